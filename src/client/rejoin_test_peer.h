// client/rejoin_test_peer.h — test-only access to SwitchRejoin (switchml/rejoin.h).
#pragma once

#include <cstdint>
#include <functional>

#include "switchml/options.h"
#include "switchml/rejoin.h"

namespace switchml::client {

struct RejoinTestPeer {
  // Called by this rank before each attempt's registration with the attempt's number (from 1)
  // and the options it registers with, which it may change (e.g. a wrong token for attempt 1).
  // Set before the first Poll.
  static void SetOptionsForAttempt(SwitchRejoin& rejoin,
                                   std::function<void(uint64_t attempt, Options& options)> fn);
};

}  // namespace switchml::client
