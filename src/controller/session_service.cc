#include "controller/session_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "controller/grpc_status.h"
#include "controller/grpc_wait.h"
#include "controller/job_service.h"
#include "controller/job_sync_table.h"
#include "controller/sync_coordinator.h"
#include "switchml.grpc.pb.h"

namespace switchml::controller {
namespace {

using dataplane::JobRegistration;
using dataplane::JobWorkerGrant;
using dataplane::SwitchInfo;
using dataplane::WorkerRegistration;

constexpr uint32_t kJob0 = dataplane::kReferenceJobId;
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
          syncs_->RecordRefusal(kJob0, "", grant.status().message());
        }
        return ToGrpcStatus(grant.status());
      }
      if (reg.rank == 0) syncs_->ForgetRefusal(kJob0);  // a new session
      info = grant->switch_info;
    }
    response->set_session_id(request->session_id());
    response->set_mac(info.mac);
    response->set_ipv4(info.ipv4);
    response->set_udp_port(info.udp_port);
    response->set_num_slots(info.num_slots);
    response->set_max_workers(info.max_workers);
    for (uint16_t p : info.thread_udp_ports) response->add_udp_ports(p);
    return grpc::Status::OK;
  }

 private:
  SwitchControl* const control_;
  JobSyncTable* const syncs_;
  std::mutex control_mu_;  // serializes registrations (the reference serializes all requests)
};

// Barrier/Broadcast: job 0's entry of the JobSyncTable.

class SyncServiceImpl final : public switchml_proto::Sync::Service {
 public:
  explicit SyncServiceImpl(JobSyncTable* syncs) : syncs_(syncs) {}

  grpc::Status Barrier(grpc::ServerContext* context, const switchml_proto::BarrierRequest* request,
                       switchml_proto::BarrierResponse*) override {
    if (std::optional<std::string> refused = syncs_->Refused(kJob0, "")) {
      return ToGrpcStatus(SessionRefusal(*refused));
    }
    const Status s = syncs_->reference().Barrier(
        request->num_workers(),
        WaitFor(context, [this] { return syncs_->HasRefusal(kJob0, ""); }));
    if (s.code() == StatusCode::kCancelled && !context->IsCancelled()) {
      if (std::optional<std::string> refused = syncs_->Refused(kJob0, "")) {
        return ToGrpcStatus(SessionRefusal(*refused));
      }
    }
    return ToGrpcStatus(s);
  }

  grpc::Status Broadcast(grpc::ServerContext* context,
                         const switchml_proto::BroadcastRequest* request,
                         switchml_proto::BroadcastResponse* response) override {
    // Rank 0 broadcasting as root starts a bootstrap (session_client.h): a new session.
    if (request->rank() == 0 && request->root() == 0) syncs_->ForgetRefusal(kJob0);
    StatusOr<uint64_t> value = syncs_->reference().Broadcast(request->value(), request->rank(),
                                                request->num_workers(), request->root(),
                                                WaitFor(context));
    if (!value.ok()) return ToGrpcStatus(value.status());
    response->set_value(*value);
    return grpc::Status::OK;
  }

 private:
  JobSyncTable* const syncs_;
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
    builder.AddListeningPort(options_.listen_address, grpc::InsecureServerCredentials(), &port_);
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
