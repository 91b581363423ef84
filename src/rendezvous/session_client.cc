#include "rendezvous/session_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <limits>
#include <string>
#include <utility>

#include "rendezvous/grpc_client.h"
#include "switchml.grpc.pb.h"

namespace switchml::rendezvous {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

}  // namespace

struct SessionClient::Impl : ControllerConnection {
  std::unique_ptr<switchml_proto::Session::Stub> session;
  std::unique_ptr<switchml_proto::Sync::Stub> sync;
};

StatusOr<std::unique_ptr<SessionClient>> SessionClient::Connect(
    const std::string& controller_address, std::chrono::milliseconds rpc_timeout,
    const TlsOptions& tls, bool require_connected) {
  SWITCHML_ASSIGN_OR_RETURN(ControllerConnection connection,
                            ControllerConnection::Open(controller_address, rpc_timeout, tls,
                                                       "SessionClient::Connect", require_connected));
  auto impl = std::make_unique<Impl>();
  static_cast<ControllerConnection&>(*impl) = std::move(connection);
  impl->session = switchml_proto::Session::NewStub(impl->channel);
  impl->sync = switchml_proto::Sync::NewStub(impl->channel);
  return std::unique_ptr<SessionClient>(new SessionClient(std::move(impl)));
}

SessionClient::SessionClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SessionClient::~SessionClient() = default;

const std::string& SessionClient::address() const { return impl_->address; }

void SessionClient::set_wait_for_ready(bool wait) { impl_->wait_for_ready = wait; }
std::chrono::milliseconds SessionClient::rpc_timeout() const { return impl_->timeout; }

Status SessionClient::Barrier(uint32_t num_workers) {
  if (num_workers == 0) return InvalidArgumentError("Barrier: num_workers must be >= 1, got 0");
  switchml_proto::BarrierRequest request;
  request.set_num_workers(num_workers);
  switchml_proto::BarrierResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  return impl_->MapError("Barrier", impl_->sync->Barrier(&context, request, &response));
}

StatusOr<uint64_t> SessionClient::Broadcast(uint64_t value, uint32_t rank, uint32_t num_workers,
                                            uint32_t root) {
  if (num_workers == 0) return InvalidArgumentError("Broadcast: num_workers must be >= 1, got 0");
  if (rank >= num_workers) {
    return InvalidArgumentError("Broadcast: rank must be < num_workers (" + Str(num_workers) +
                                "), got " + Str(rank));
  }
  if (root >= num_workers) {
    return InvalidArgumentError("Broadcast: root must be < num_workers (" + Str(num_workers) +
                                "), got " + Str(root));
  }
  switchml_proto::BroadcastRequest request;
  request.set_value(value);
  request.set_rank(rank);
  request.set_num_workers(num_workers);
  request.set_root(root);
  switchml_proto::BroadcastResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("Broadcast", impl_->sync->Broadcast(&context, request, &response)));
  return response.value();
}

StatusOr<SwitchInfo> SessionClient::UdpSession(const WorkerRegistration& reg) {
  if (reg.rank >= reg.num_workers) {
    return InvalidArgumentError("UdpSession: rank must be < num_workers (" +
                                Str(reg.num_workers) + "), got " + Str(reg.rank));
  }
  switchml_proto::UdpSessionRequest request;
  request.set_session_id(reg.session_id);
  request.set_rank(reg.rank);
  request.set_num_workers(reg.num_workers);
  request.set_mac(reg.mac);
  request.set_ipv4(reg.ipv4);
  // packet_size stays MTU_128 (0): the controller ignores it for UDP
  // (docs/protocol.md#services-and-messages).
  for (uint16_t port : reg.udp_ports) request.add_udp_ports(port);
  request.set_protocol_version(reg.protocol_version);
  request.set_num_worker_threads(reg.num_worker_threads);
  request.set_window_packets(reg.window_packets);
  request.set_elements_per_packet(reg.elements_per_packet);
  switchml_proto::UdpSessionResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("UdpSession", impl_->session->UdpSession(&context, request, &response)));

  const std::string where = "controller " + impl_->address;
  if (reg.session_id != 0 && response.session_id() == 0 && response.mac() == 0 &&
      response.ipv4() == 0) {
    return FailedPreconditionError(where + " rejected UdpSession: all-zero reply (how a "
                                   "reference controller reports a failed registration; see "
                                   "its log)");
  }
  if (response.udp_port() > std::numeric_limits<uint16_t>::max()) {
    return InternalError(where + " (UdpSession): reply has udp_port " +
                         Str(response.udp_port()) + " > 65535");
  }
  SwitchInfo info;
  info.mac = response.mac();
  info.ipv4 = response.ipv4();
  info.udp_port = response.udp_port() == 0 ? kReferenceSwitchUdpPort
                                           : static_cast<uint16_t>(response.udp_port());
  info.num_slots = response.num_slots();
  info.max_workers = response.max_workers();
  for (int i = 0; i < response.udp_ports_size(); ++i) {
    const uint32_t p = response.udp_ports(i);
    if (p == 0 || p > std::numeric_limits<uint16_t>::max()) {
      return InternalError(where + " (UdpSession): reply has udp_ports[" + Str(uint32_t(i)) +
                           "] " + Str(p) + ", not in [1, 65535]");
    }
    info.thread_routes.push_back(ThreadRoute{.udp_port = static_cast<uint16_t>(p)});
  }
  return info;
}

uint64_t WallClockNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

StatusOr<SwitchInfo> Bootstrap(SessionClient& client, WorkerRegistration reg,
                               const std::function<uint64_t()>& session_id_source) {
  if (reg.num_workers == 0) {
    return InvalidArgumentError("Bootstrap: num_workers must be >= 1, got 0");
  }
  if (reg.rank >= reg.num_workers) {
    return InvalidArgumentError("Bootstrap: rank must be < num_workers (" +
                                Str(reg.num_workers) + "), got " + Str(reg.rank));
  }
  const std::string context =
      "Bootstrap rank " + Str(reg.rank) + " of " + Str(reg.num_workers) + ", ";
  const uint64_t proposal = reg.rank == 0 ? session_id_source() : 0;
  StatusOr<uint64_t> session_id = client.Broadcast(proposal, reg.rank, reg.num_workers, 0);
  if (!session_id.ok()) return session_id.status().WithContext(context + "session id broadcast");
  reg.session_id = *session_id;

  StatusOr<SwitchInfo> info = InternalError("unreachable");
  if (reg.rank == 0) {
    info = client.UdpSession(reg);
    if (!info.ok()) return info.status().WithContext(context + "registration");
    SWITCHML_RETURN_IF_ERROR(
        client.Barrier(reg.num_workers).WithContext(context + "barrier after rank 0 registered"));
  } else {
    SWITCHML_RETURN_IF_ERROR(
        client.Barrier(reg.num_workers).WithContext(context + "barrier before registering"));
    info = client.UdpSession(reg);
    if (!info.ok()) return info.status().WithContext(context + "registration");
  }
  SWITCHML_RETURN_IF_ERROR(
      client.Barrier(reg.num_workers).WithContext(context + "barrier after all registered"));
  return info;
}

}  // namespace switchml::rendezvous
