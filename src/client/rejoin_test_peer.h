// client/rejoin_test_peer.h — test-only: SwitchRejoin (switchml/rejoin.h) with its controller
// question, its registration or its per-attempt options replaced.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "switchml/context.h"
#include "switchml/options.h"
#include "switchml/rejoin.h"

namespace switchml::client {

struct RejoinHooks {
  // Rank 0's question to the controller: "" when the job can be served, else why not. Empty =
  // the real one.
  std::function<std::string()> check;
  // A rank's registration (client::CreateContextOnPorts: `ports` in and out). Empty = the real one.
  std::function<StatusOr<std::unique_ptr<Context>>(const Options&, std::vector<uint16_t>& ports)> create;
  // Called before each attempt's registration with the attempt's number (from 1) and the
  // options this rank registers with, which it may change (e.g. a wrong token for attempt 1).
  std::function<void(uint64_t attempt, Options& options)> options_for_attempt;
};

struct RejoinTestPeer {
  // SwitchRejoin::Start with `hooks` in place before rank 0's thread starts.
  static StatusOr<std::unique_ptr<SwitchRejoin>> Start(const Options& options, HostPath& host,
                                                       RejoinOptions rejoin, RejoinHooks hooks);
};

}  // namespace switchml::client
