// rendezvous/grpc_client.h — the client end of a gRPC connection to a controller, shared by
// SessionClient and JobClient (internal to the rendezvous and controller modules).
//
// It owns the channel, the per-RPC deadline policy and the mapping of failed RPCs to Status
// values that name the controller and the RPC, so both clients report errors the same way.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "switchml/options.h"
#include "switchml/status.h"

namespace switchml::rendezvous {

struct ControllerConnection {
  std::string address;
  std::chrono::milliseconds timeout{0};
  TlsOptions tls;  // how the channel was made (for the hints in errors)
  std::shared_ptr<grpc::Channel> channel;
  // true: an RPC waits for the channel to (re)connect until its deadline. false ("fail
  // fast"): an RPC fails at once with Unavailable while the channel is in transient failure
  // (the peer refused or dropped the connection), and still waits while a connection attempt
  // is in progress.
  bool wait_for_ready = true;

  // Validates the arguments, makes the channel with `tls` (rendezvous/tls.h) and waits up to
  // `timeout` for the connection. `who` names the caller in argument errors
  // ("SessionClient::Connect"). Errors: InvalidArgument (arguments, TLS files),
  // Unavailable ("controller H:P unreachable (Connect): not connected within N ms: <gRPC's
  // last error> (<TLS hint>)"), unless require_connected is false: then the connection is
  // returned anyway (gRPC keeps trying to connect; calls fail fast or wait as wait_for_ready
  // says).
  static StatusOr<ControllerConnection> Open(const std::string& address, std::chrono::milliseconds timeout,
                                             const TlsOptions& tls, const char* who,
                                             bool require_connected = true);

  // Every RPC: deadline = now + timeout; by default wait_for_ready, so that a controller that
  // is (re)starting is retried until the deadline instead of failing on the first refusal.
  void Prepare(grpc::ClientContext* context) const;

  // OK for an OK status; otherwise a Status naming the controller and `rpc`: Unavailable when
  // it was never reached or the connection broke ("unreachable") or when it answered
  // Unavailable itself ("answered"), DeadlineExceeded when it was reached but did not answer
  // in time, Unimplemented (with `unimplemented_hint` appended) when it does not serve the
  // RPC, and the controller's own code and message for everything else.
  Status MapError(const char* rpc, const grpc::Status& s, const char* unimplemented_hint = nullptr) const;

  // ": <why gRPC's last connection attempt failed>" and the TLS hint (rendezvous/tls.h), for
  // a connection that was not made.
  std::string LastConnectError() const;

  std::string TimeoutText() const { return std::to_string(timeout.count()) + " ms"; }
};

}  // namespace switchml::rendezvous
