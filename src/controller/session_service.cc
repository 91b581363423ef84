#include "controller/session_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "controller/grpc_status.h"
#include "controller/grpc_wait.h"
#include "controller/job_service.h"
#include "controller/sync_coordinator.h"
#include "switchml.grpc.pb.h"

namespace switchml::controller {
namespace {

// The reference session's (job 0's) refused registration, the counterpart of JobService's
// per-job refusals. A UdpSession refused with FailedPrecondition
// (the worker disagrees with the session: num_workers or an agreed parameter) means the
// session's barriers can never complete, so the refusal fails the Barrier calls that are
// waiting and those that come later, until a new session starts: rank 0 registers, or rank 0
// broadcasts as root (the first step of every bootstrap, so a new job's ranks never see an
// old job's refusal). Thread-safe.
class SessionRefusal {
 public:
  void Set(const Status& refusal) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = FailedPreconditionError(
        "Barrier: the session cannot complete: a registration was refused: " +
        refusal.message());
    set_.store(true, std::memory_order_release);
  }
  void Clear() {
    if (!set_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mu_);
    status_ = OkStatus();
    set_.store(false, std::memory_order_release);
  }
  bool set() const { return set_.load(std::memory_order_acquire); }
  // OK when none is set.
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<bool> set_{false};
  Status status_;  // guarded by mu_
};

class SessionServiceImpl final : public switchml_proto::Session::Service {
 public:
  SessionServiceImpl(SessionSink* sink, SessionRefusal* refusal)
      : sink_(sink), refusal_(refusal) {}

  grpc::Status RdmaSession(grpc::ServerContext*, const switchml_proto::RdmaSessionRequest*,
                           switchml_proto::RdmaSessionResponse*) override {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "RdmaSession: RDMA is not supported by the software switch; use "
                        "UdpSession");
  }

  grpc::Status UdpSession(grpc::ServerContext*, const switchml_proto::UdpSessionRequest* request,
                          switchml_proto::UdpSessionResponse* response) override {
    WorkerRegistration reg;
    reg.session_id = request->session_id();
    reg.rank = request->rank();
    reg.num_workers = request->num_workers();
    reg.mac = request->mac();
    reg.ipv4 = request->ipv4();
    reg.protocol_version = request->protocol_version();
    reg.num_worker_threads = request->num_worker_threads();
    reg.window_packets = request->window_packets();
    reg.elements_per_packet = request->elements_per_packet();
    reg.udp_ports.reserve(request->udp_ports_size());
    for (int i = 0; i < request->udp_ports_size(); ++i) {
      const uint32_t port = request->udp_ports(i);
      if (port == 0 || port > std::numeric_limits<uint16_t>::max()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "UdpSession: udp_ports[" + std::to_string(i) +
                                "] must be in [1, 65535], got " + std::to_string(port));
      }
      reg.udp_ports.push_back(static_cast<uint16_t>(port));
    }
    SwitchInfo info;
    {
      std::lock_guard<std::mutex> lock(sink_mu_);
      const Status s = sink_->RegisterWorker(reg);
      if (!s.ok()) {
        if (s.code() == StatusCode::kFailedPrecondition) refusal_->Set(s);
        return ToGrpcStatus(s);
      }
      if (reg.rank == 0) refusal_->Clear();  // a new session
      info = sink_->Info();
    }
    response->set_session_id(request->session_id());
    response->set_mac(info.mac);
    response->set_ipv4(info.ipv4);
    response->set_udp_port(info.udp_port);
    response->set_num_slots(info.num_slots);
    response->set_max_workers(info.max_workers);
    return grpc::Status::OK;
  }

 private:
  SessionSink* const sink_;
  SessionRefusal* const refusal_;
  std::mutex sink_mu_;  // serializes sink calls (the reference serializes all requests)
};

class SyncServiceImpl final : public switchml_proto::Sync::Service {
 public:
  SyncServiceImpl(SyncCoordinator* sync, SessionRefusal* refusal)
      : sync_(sync), refusal_(refusal) {}

  grpc::Status Barrier(grpc::ServerContext* context, const switchml_proto::BarrierRequest* request,
                       switchml_proto::BarrierResponse*) override {
    if (refusal_->set()) return ToGrpcStatus(refusal_->status());
    const Status s = sync_->Barrier(request->num_workers(),
                                    WaitFor(context, [this] { return refusal_->set(); }));
    if (s.code() == StatusCode::kCancelled && !context->IsCancelled()) {
      const Status refused = refusal_->status();
      if (!refused.ok()) return ToGrpcStatus(refused);
    }
    return ToGrpcStatus(s);
  }

  grpc::Status Broadcast(grpc::ServerContext* context,
                         const switchml_proto::BroadcastRequest* request,
                         switchml_proto::BroadcastResponse* response) override {
    // Rank 0 broadcasting as root starts a bootstrap (session_client.h): a new session.
    if (request->rank() == 0 && request->root() == 0) refusal_->Clear();
    StatusOr<uint64_t> value = sync_->Broadcast(request->value(), request->rank(),
                                                request->num_workers(), request->root(),
                                                WaitFor(context));
    if (!value.ok()) return ToGrpcStatus(value.status());
    response->set_value(*value);
    return grpc::Status::OK;
  }

 private:
  SyncCoordinator* const sync_;
  SessionRefusal* const refusal_;
};

}  // namespace

class ControllerServer::Impl {
 public:
  Impl(const ServerOptions& options, SessionSink* sink, JobSink* jobs)
      : options_(options),
        session_service_(sink, &refusal_),
        sync_service_(&sync_, &refusal_) {
    if (jobs != nullptr) {
      JobServiceOptions jo;
      jo.operator_token = options.operator_token;
      jo.default_idle_timeout = options.default_job_idle_timeout;
      job_service_ = std::make_unique<JobService>(jobs, jo);
    }
  }
  ~Impl() { Shutdown(); }

  Status Start() {
    grpc::ServerBuilder builder;
    // gRPC enables SO_REUSEPORT by default, which would let two controllers "share" a port.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort(options_.listen_address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&session_service_);
    builder.RegisterService(&sync_service_);
    if (job_service_) builder.RegisterService(job_service_->grpc_service());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      server_.reset();
      return UnavailableError("controller: cannot listen on '" + options_.listen_address +
                              "' (address in use, not local, or not host:port)");
    }
    return OkStatus();
  }

  void Shutdown() {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    if (server_ == nullptr || shut_down_) return;
    shut_down_ = true;
    sync_.Shutdown();  // blocked Barrier/Broadcast handlers return UNAVAILABLE now
    if (job_service_) job_service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + options_.shutdown_grace);
    server_->Wait();
  }

  int port() const { return port_; }
  uint32_t NumBarrierWaiters() const { return sync_.NumBarrierWaiters(); }
  void ResetSyncState() {
    refusal_.Clear();
    sync_.Reset();
  }

 private:
  const ServerOptions options_;
  // Job 0's sync state: the reference Barrier/Broadcast (num_workers from the request, no
  // token, default bounds); cleared by ResetSyncState, never swept.
  SyncCoordinator sync_;
  SessionRefusal refusal_;
  SessionServiceImpl session_service_;
  SyncServiceImpl sync_service_;
  std::unique_ptr<JobService> job_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(const ServerOptions& options,
                                                                    SessionSink* sink,
                                                                    JobSink* jobs) {
  if (sink == nullptr) return InvalidArgumentError("ControllerServer::Start: sink is null");
  if (options.listen_address.empty()) {
    return InvalidArgumentError("ControllerServer::Start: listen_address is empty");
  }
  auto impl = std::make_unique<Impl>(options, sink, jobs);
  SWITCHML_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<ControllerServer>(new ControllerServer(std::move(impl)));
}

ControllerServer::ControllerServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControllerServer::~ControllerServer() = default;  // Impl's destructor shuts down
int ControllerServer::port() const { return impl_->port(); }
void ControllerServer::Shutdown() { impl_->Shutdown(); }
void ControllerServer::ResetSyncState() { impl_->ResetSyncState(); }
uint32_t ControllerServer::NumBarrierWaiters() const { return impl_->NumBarrierWaiters(); }

}  // namespace switchml::controller
