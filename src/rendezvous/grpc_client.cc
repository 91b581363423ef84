#include "rendezvous/grpc_client.h"

#include <grpcpp/generic/generic_stub.h>

#include <condition_variable>
#include <mutex>

#include "rendezvous/grpc_status.h"
#include "rendezvous/tls.h"

namespace switchml::rendezvous {

StatusOr<ControllerConnection> ControllerConnection::Open(const std::string& address,
                                                          std::chrono::milliseconds timeout,
                                                          const TlsOptions& tls, const char* who,
                                                          bool require_connected) {
  if (address.empty()) return InvalidArgumentError(std::string(who) + ": controller_address is empty");
  if (timeout <= std::chrono::milliseconds::zero()) {
    return InvalidArgumentError(std::string(who) + ": rpc_timeout must be > 0 ms, got " +
                                std::to_string(timeout.count()));
  }
  ControllerConnection c;
  c.address = address;
  c.timeout = timeout;
  c.tls = tls;
  grpc::ChannelArguments args;
  // gRPC's default first reconnect backoff is 1 s (up to 120 s); a controller that starts a
  // moment after its workers should be found within a fraction of rpc_timeout.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = ChannelCredentials(tls, &args);
  if (!credentials.ok()) return InvalidArgumentError(std::string(who) + ": " + credentials.status().message());
  c.channel = grpc::CreateCustomChannel(address, *credentials, args);
  if (!c.channel->WaitForConnected(std::chrono::system_clock::now() + timeout) && require_connected) {
    return UnavailableError("controller " + address + " unreachable (Connect): not connected within " +
                            c.TimeoutText() + c.LastConnectError());
  }
  return c;
}

std::string ControllerConnection::LastConnectError() const {
  // gRPC keeps why its last connection attempt failed (refused, a TLS handshake that failed
  // and why) in the status of a call that fails fast: one call to a method no server has,
  // without waiting for the channel, brings it back.
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  context.set_wait_for_ready(false);
  grpc::Slice empty(std::string{});
  grpc::ByteBuffer request(&empty, 1), response;  // an empty message (a null buffer is misuse)
  grpc::Status status;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&context, "/switchml.Probe/LastConnectError", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = std::move(s);
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  std::string detail;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !status.error_message().empty()) {
    detail = ": " + status.error_message();
  }
  return detail + ConnectionFailureHint(tls);
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
