#include "controller/session_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "rendezvous/grpc_status.h"
#include "controller/job_service.h"
#include "controller/job_sync_table.h"
#include "controller/sync_calls.h"
#include "controller/sync_coordinator.h"
#include "switchml.grpc.pb.h"

namespace switchml::controller {

using rendezvous::ToGrpcStatus;
namespace {

using control::JobRegistration;
using control::JobWorkerGrant;
using control::SwitchInfo;
using control::WorkerRegistration;

constexpr uint32_t kJob0 = control::kReferenceJobId;
static_assert(kJob0 == JobSyncTable::kReferenceJob);

// Job 0's refused registration (JobSyncTable, the counterpart of a service job's refusal): a
// UdpSession refused with FailedPrecondition (the worker disagrees with the session:
// num_workers or an agreed parameter) means the session's barriers can never complete, so the
// refusal fails the Barrier calls that are waiting and those that come later, until a new
// session starts: rank 0 registers, or rank 0 broadcasts as root (the first step of every
// bootstrap, so a new job's ranks never see an old job's refusal).
Status SessionRefusal(const std::string& refusal) {
  return FailedPreconditionError(
      "Barrier: the session cannot complete: a registration was refused: " + refusal);
}

// UdpSession: one registration into job 0 (SwitchControl::RegisterJobWorker).
class SessionServiceImpl final : public switchml_proto::Session::Service {
 public:
  SessionServiceImpl(SwitchControl* control, JobSyncTable* syncs)
      : control_(control), syncs_(syncs) {}

  grpc::Status RdmaSession(grpc::ServerContext*, const switchml_proto::RdmaSessionRequest*,
                           switchml_proto::RdmaSessionResponse*) override {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "RdmaSession: RDMA is not supported by the software switch; use "
                        "UdpSession");
  }

  grpc::Status UdpSession(grpc::ServerContext*, const switchml_proto::UdpSessionRequest* request,
                          switchml_proto::UdpSessionResponse* response) override {
    JobRegistration job0;
    job0.job_id = kJob0;  // no token: the reference session's rule
    WorkerRegistration& reg = job0.worker;
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
      std::lock_guard<std::mutex> lock(control_mu_);
      StatusOr<JobWorkerGrant> grant = control_->RegisterJobWorker(job0);
      if (!grant.ok()) {
        if (grant.status().code() == StatusCode::kFailedPrecondition) {
          // The waiting barrier calls learn it now (SyncServiceImpl::Barrier's reply).
          syncs_->RecordRefusal(kJob0, "", grant.status().message());
        }
        return ToGrpcStatus(grant.status());
      }
      if (reg.rank == 0) {  // a new session, of num_workers workers
        syncs_->ForgetRefusal(kJob0);
        (void)syncs_->reference().SetSessionSize(reg.num_workers);
      }
      info = grant->switch_info;
    }
    response->set_session_id(request->session_id());
    response->set_mac(info.mac);
    response->set_ipv4(info.ipv4);
    response->set_udp_port(info.udp_port);
    response->set_num_slots(info.num_slots);
    response->set_max_workers(info.max_workers);
    for (const control::ThreadRoute& r : info.thread_routes) response->add_udp_ports(r.udp_port);
    return grpc::Status::OK;
  }

 private:
  SwitchControl* const control_;
  JobSyncTable* const syncs_;
  std::mutex control_mu_;  // serializes registrations (the reference serializes all requests)
};

// Barrier/Broadcast: job 0's entry of the JobSyncTable, with gRPC's callback API (a waiting
// call holds no thread; sync_calls.h).
class SyncServiceImpl final : public switchml_proto::Sync::CallbackService {
 public:
  explicit SyncServiceImpl(JobSyncTable* syncs) : syncs_(syncs) {}

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* context,
                                    const switchml_proto::BarrierRequest* request,
                                    switchml_proto::BarrierResponse*) override {
    std::shared_ptr<SyncCoordinator> sync = Reference();
    if (std::optional<std::string> refused = syncs_->Refused(kJob0, "")) {
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      reactor->Finish(ToGrpcStatus(SessionRefusal(*refused)));
      return reactor;
    }
    auto* reactor = new SyncCallReactor(
        sync, &timer_, HandlerDeadline(*context), [this, context](SyncResult result) {
          const Status& s = result.status();
          // Cancelled without the client cancelling: a refused registration (UdpSession).
          if (s.code() == StatusCode::kCancelled && !context->IsCancelled()) {
            if (std::optional<std::string> refused = syncs_->Refused(kJob0, "")) {
              return ToGrpcStatus(SessionRefusal(*refused));
            }
          }
          return ToGrpcStatus(s);
        });
    const uint32_t num_workers = request->num_workers();
    const std::string peer = PeerHost(context->peer());
    reactor->Start([&](SyncDone done) {
      return sync->StartBarrier(num_workers, std::move(done), peer);
    });
    // A refusal recorded since the Refused check above did not see this call.
    syncs_->CancelWaitersIfRefused(kJob0, "");
    return reactor;
  }

  grpc::ServerUnaryReactor* Broadcast(grpc::CallbackServerContext* context,
                                      const switchml_proto::BroadcastRequest* request,
                                      switchml_proto::BroadcastResponse* response) override {
    std::shared_ptr<SyncCoordinator> sync = Reference();
    // Rank 0 broadcasting as root starts a bootstrap (session_client.h): a new session, whose
    // size is this call's num_workers.
    if (request->rank() == 0 && request->root() == 0 && request->num_workers() >= 1 &&
        request->num_workers() <= SyncCoordinator::kMaxBroadcastParticipants) {
      syncs_->ForgetRefusal(kJob0);
      (void)sync->SetSessionSize(request->num_workers());
    }
    auto* reactor = new SyncCallReactor(sync, &timer_, HandlerDeadline(*context),
                                        [response](SyncResult result) {
                                          if (!result.ok()) return ToGrpcStatus(result.status());
                                          response->set_value(*result);
                                          return grpc::Status::OK;
                                        });
    const std::string peer = PeerHost(context->peer());
    reactor->Start([&](SyncDone done) {
      return sync->StartBroadcast(request->value(), request->rank(), request->num_workers(),
                                  request->root(), std::move(done), peer);
    });
    return reactor;
  }

 private:
  std::shared_ptr<SyncCoordinator> Reference() {
    StatusOr<std::shared_ptr<SyncCoordinator>> sync = syncs_->Acquire(kJob0, SyncLimits{});
    return *sync;  // job 0's is always there (after Shutdown its calls fail themselves)
  }

  JobSyncTable* const syncs_;
  CallTimer timer_;  // the waiting calls' deadlines
};

}  // namespace

class ControllerServer::Impl {
 public:
  Impl(const ServerOptions& options, SwitchControl* control)
      : options_(options),
        job_service_(control, JobOptions(options)),
        session_service_(control, job_service_.sync_table()),
        sync_service_(job_service_.sync_table()) {}
  ~Impl() { Shutdown(); }

  Status Start() {
    grpc::ServerBuilder builder;
    // gRPC enables SO_REUSEPORT by default, which would let two controllers "share" a port.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                              rendezvous::ServerCredentials(options_.tls));
    builder.AddListeningPort(options_.listen_address, credentials, &port_);
    builder.RegisterService(&session_service_);
    builder.RegisterService(&sync_service_);
    builder.RegisterService(job_service_.grpc_service());
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
    // Blocked Barrier/Broadcast handlers (job 0's too) return UNAVAILABLE now.
    job_service_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + options_.shutdown_grace);
    server_->Wait();
  }

  int port() const { return port_; }
  uint32_t NumBarrierWaiters() {
    return job_service_.sync_table()->reference().NumBarrierWaiters();
  }
  void ResetSyncState() { job_service_.sync_table()->Forget(kJob0); }

 private:
  static JobServiceOptions JobOptions(const ServerOptions& options) {
    JobServiceOptions jo;
    jo.operator_token = options.operator_token;
    jo.default_idle_timeout = options.default_job_idle_timeout;
    jo.reference_limits.max_waiters_per_peer = options.max_waiting_calls_per_peer;
    jo.tls = options.tls;
    return jo;
  }

  const ServerOptions options_;
  // Owns every job's sync state (its JobSyncTable), job 0's included: the reference
  // Barrier/Broadcast (num_workers from the request, no token, default bounds) use that
  // entry; it is cleared by ResetSyncState and never swept.
  JobService job_service_;
  SessionServiceImpl session_service_;
  SyncServiceImpl sync_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

StatusOr<std::unique_ptr<ControllerServer>> ControllerServer::Start(const ServerOptions& options,
                                                                    SwitchControl* control) {
  if (control == nullptr) {
    return InvalidArgumentError("ControllerServer::Start: control (the switch) is null");
  }
  if (options.listen_address.empty()) {
    return InvalidArgumentError("ControllerServer::Start: listen_address is empty");
  }
  auto impl = std::make_unique<Impl>(options, control);
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
