#include "rendezvous/grpc_client.h"

#include "rendezvous/grpc_status.h"

namespace switchml::rendezvous {

StatusOr<ControllerConnection> ControllerConnection::Open(const std::string& address,
                                                          std::chrono::milliseconds timeout, const char* who,
                                                          bool require_connected) {
  if (address.empty()) return InvalidArgumentError(std::string(who) + ": controller_address is empty");
  if (timeout <= std::chrono::milliseconds::zero()) {
    return InvalidArgumentError(std::string(who) + ": rpc_timeout must be > 0 ms, got " +
                                std::to_string(timeout.count()));
  }
  ControllerConnection c;
  c.address = address;
  c.timeout = timeout;
  grpc::ChannelArguments args;
  // gRPC's default first reconnect backoff is 1 s (up to 120 s); a controller that starts a
  // moment after its workers should be found within a fraction of rpc_timeout.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  c.channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  if (!c.channel->WaitForConnected(std::chrono::system_clock::now() + timeout) && require_connected) {
    return UnavailableError("controller " + address + " unreachable (Connect): not connected within " +
                            c.TimeoutText());
  }
  return c;
}

void ControllerConnection::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  context->set_wait_for_ready(wait_for_ready);
}

Status ControllerConnection::MapError(const char* rpc, const grpc::Status& s,
                                      const char* unimplemented_hint) const {
  if (s.ok()) return OkStatus();
  const std::string where = "controller " + address;
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // With wait_for_ready the call waits for a connection until the deadline, so the
      // channel state tells "never got there" from "got there but no answer in time".
      if (channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
        return UnavailableError(where + " unreachable (" + rpc + "): not connected within " + TimeoutText());
      }
      return DeadlineExceededError(where + " (" + rpc + "): did not complete within " + TimeoutText() + ": " +
                                   s.error_message());
    case grpc::StatusCode::UNAVAILABLE:
      // Connected: the controller itself answered Unavailable (e.g. a standalone controller
      // whose switch is down; its message says which), so do not call it unreachable.
      if (channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
        return UnavailableError(where + " answered (" + rpc + "): " + s.error_message());
      }
      return UnavailableError(where + " unreachable (" + rpc + "): " + s.error_message());
    case grpc::StatusCode::UNIMPLEMENTED:
      if (unimplemented_hint != nullptr) {
        return UnimplementedError(where + " " + unimplemented_hint + " (" + rpc + "): " + s.error_message());
      }
      [[fallthrough]];
    default:
      return Status(FromGrpcCode(s.error_code()), where + " rejected " + rpc + ": " + s.error_message());
  }
}

}  // namespace switchml::rendezvous
