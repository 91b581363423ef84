#include "controller/job_service.h"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "controller/grpc_status.h"
#include "controller/grpc_wait.h"
#include "controller/sync_coordinator.h"
#include "switchml_v1.grpc.pb.h"

namespace switchml::controller {
namespace {

namespace v1 = ::switchml::v1;

v1::JobState ToProto(JobState s) {
  switch (s) {
    case JobState::kWaitingForWorkers: return v1::WAITING_FOR_WORKERS;
    case JobState::kRunning: return v1::RUNNING;
    case JobState::kEnded: return v1::ENDED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

void ToProto(const JobInfo& j, v1::JobInfo* out) {
  out->set_job_id(j.job_id);
  v1::JobSpec* spec = out->mutable_spec();
  spec->set_num_workers(j.spec.num_workers);
  spec->set_num_slots(j.spec.num_slots);
  spec->set_elements_per_packet(j.spec.elements_per_packet);
  spec->set_data_type(static_cast<v1::DataType>(j.spec.data_type));
  spec->set_idle_timeout_ms(static_cast<uint32_t>(j.spec.idle_timeout.count()));
  spec->set_name(j.spec.name);
  out->set_state(ToProto(j.state));
  out->set_slot_base(j.slot_base);
  out->set_num_registered(j.num_registered);
  for (const JobWorkerInfo& w : j.workers) {
    v1::WorkerInfo* wi = out->add_workers();
    wi->set_rank(w.rank);
    wi->set_ipv4(w.ipv4);
    for (uint16_t p : w.udp_ports) wi->add_udp_ports(p);
    wi->set_received(w.received);
  }
  v1::JobCounters* c = out->mutable_counters();
  c->set_received(j.counters.received);
  c->set_consumed(j.counters.consumed);
  c->set_multicast_rounds(j.counters.multicast_rounds);
  c->set_unicast_replies(j.counters.unicast_replies);
  c->set_duplicates_dropped(j.counters.duplicates_dropped);
  c->set_late_duplicates_dropped(j.counters.late_duplicates_dropped);
  c->set_size_mismatch(j.counters.size_mismatch);
  c->set_slot_out_of_range(j.counters.slot_out_of_range);
  c->set_too_large(j.counters.too_large);
  c->set_not_running(j.counters.not_running);
  c->set_datagrams_sent(j.counters.datagrams_sent);
  out->set_idle_ms(static_cast<uint64_t>(j.idle_for.count()));
  out->set_end_reason(j.end_reason);
}

void ToProto(const SlotSetInfo& s, v1::SlotSet* out) {
  for (uint64_t w : s.bitmap) out->add_bitmap(w);
  out->set_counter(s.counter);
  out->set_num_elements(s.num_elements);
  out->set_exp0(s.exp0);
  out->set_exp1(s.exp1);
}

grpc::Status Error(StatusCode code, const std::string& message) {
  return ToGrpcStatus(Status(code, message));
}

}  // namespace

class JobService::Impl final : public v1::JobService::Service {
 public:
  explicit Impl(JobSink* sink) : sink_(sink) {}

  grpc::Status CreateJob(grpc::ServerContext*, const v1::CreateJobRequest* request,
                         v1::CreateJobResponse* response) override {
    const v1::JobSpec& p = request->spec();
    if (p.data_type() < v1::DATA_TYPE_UNSPECIFIED || p.data_type() > v1::FLOAT32) {
      return Error(StatusCode::kInvalidArgument,
                   "CreateJob: data_type " + std::to_string(p.data_type()) + " is unknown");
    }
    JobSpec spec;
    spec.num_workers = p.num_workers();
    spec.num_slots = p.num_slots();
    spec.elements_per_packet = p.elements_per_packet();
    spec.data_type = static_cast<JobDataType>(p.data_type());
    spec.idle_timeout = std::chrono::milliseconds(p.idle_timeout_ms());
    spec.token = p.token();
    spec.name = p.name();
    StatusOr<JobInfo> job = sink_->CreateJob(spec);
    if (!job.ok()) return ToGrpcStatus(job.status());
    ToProto(*job, response->mutable_job());
    response->set_token(job->token);
    return grpc::Status::OK;
  }

  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* request,
                         v1::DeleteJobResponse*) override {
    const Status s = sink_->DeleteJob(request->job_id(), request->token());
    if (!s.ok()) return ToGrpcStatus(s);
    ForgetSync(request->job_id());
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    if (!request->token().empty()) {
      const Status access = sink_->CheckJobAccess(request->job_id(), request->token());
      if (!access.ok()) return ToGrpcStatus(access);
    }
    StatusOr<JobInfo> job = sink_->GetJob(request->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    ToProto(*job, response->mutable_job());
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    const JobList list = sink_->ListJobs();
    for (const JobInfo& j : list.jobs) ToProto(j, response->add_jobs());
    response->set_pool_slots(list.pool_slots);
    response->set_free_slots(list.free_slots);
    response->set_largest_free_range(list.largest_free_range);
    for (const auto& [name, value] : sink_->CounterValues()) {
      (*response->mutable_switch_counters())[name] = value;
    }
    return grpc::Status::OK;
  }

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override {
    JobRegistration reg;
    reg.job_id = request->job_id();
    reg.token = request->token();
    reg.worker.rank = request->rank();
    reg.worker.num_workers = request->num_workers();
    reg.worker.ipv4 = request->ipv4();
    reg.worker.mac = request->mac();
    for (int i = 0; i < request->udp_ports_size(); ++i) {
      const uint32_t port = request->udp_ports(i);
      if (port == 0 || port > std::numeric_limits<uint16_t>::max()) {
        return Error(StatusCode::kInvalidArgument,
                     "RegisterWorker: udp_ports[" + std::to_string(i) +
                         "] must be in [1, 65535], got " + std::to_string(port));
      }
      reg.worker.udp_ports.push_back(static_cast<uint16_t>(port));
    }
    StatusOr<JobWorkerGrant> grant = sink_->RegisterJobWorker(reg);
    if (!grant.ok()) return ToGrpcStatus(grant.status());
    response->set_switch_ipv4(grant->switch_info.ipv4);
    response->set_switch_udp_port(grant->switch_info.udp_port);
    response->set_switch_mac(grant->switch_info.mac);
    response->set_num_slots(grant->switch_info.num_slots);
    response->set_num_workers(grant->num_workers);
    response->set_elements_per_packet(grant->elements_per_packet);
    response->set_state(ToProto(grant->state));
    return grpc::Status::OK;
  }

  grpc::Status Barrier(grpc::ServerContext* context, const v1::JobBarrierRequest* request,
                       v1::JobBarrierResponse*) override {
    uint32_t num_workers = 0;
    StatusOr<std::shared_ptr<SyncCoordinator>> sync =
        SyncFor(request->job_id(), request->token(), request->rank(), &num_workers);
    if (!sync.ok()) return ToGrpcStatus(sync.status());
    const Status s = (*sync)->Barrier(num_workers, JobWait(context, request->job_id(),
                                                            request->token()));
    return ToGrpcStatus(Explain(s, "Barrier", request->job_id(), request->token()));
  }

  grpc::Status Broadcast(grpc::ServerContext* context, const v1::JobBroadcastRequest* request,
                         v1::JobBroadcastResponse* response) override {
    uint32_t num_workers = 0;
    StatusOr<std::shared_ptr<SyncCoordinator>> sync =
        SyncFor(request->job_id(), request->token(), request->rank(), &num_workers);
    if (!sync.ok()) return ToGrpcStatus(sync.status());
    StatusOr<uint64_t> value =
        (*sync)->Broadcast(request->value(), request->rank(), num_workers, request->root(),
                           JobWait(context, request->job_id(), request->token()));
    if (!value.ok()) {
      return ToGrpcStatus(
          Explain(value.status(), "Broadcast", request->job_id(), request->token()));
    }
    response->set_value(*value);
    return grpc::Status::OK;
  }

  grpc::Status InspectSlots(grpc::ServerContext*, const v1::InspectSlotsRequest* request,
                            v1::InspectSlotsResponse* response) override {
    StatusOr<std::vector<SlotInfo>> slots =
        sink_->InspectSlots(request->job_id(), request->first_slot(), request->count());
    if (!slots.ok()) return ToGrpcStatus(slots.status());
    for (const SlotInfo& s : *slots) {
      v1::SlotInfo* out = response->add_slots();
      out->set_slot(s.slot);
      ToProto(s.sets[0], out->mutable_set0());
      ToProto(s.sets[1], out->mutable_set1());
    }
    return grpc::Status::OK;
  }

  void Shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    for (auto& [id, sync] : syncs_) sync->Shutdown();
  }

 private:
  // The job's coordinator, after checking the token and the rank.
  StatusOr<std::shared_ptr<SyncCoordinator>> SyncFor(uint32_t job_id, const std::string& token,
                                                     uint32_t rank, uint32_t* num_workers) {
    SWITCHML_RETURN_IF_ERROR(sink_->CheckJobAccess(job_id, token));
    SWITCHML_ASSIGN_OR_RETURN(JobInfo job, sink_->GetJob(job_id));
    if (rank >= job.spec.num_workers) {
      return InvalidArgumentError("rank must be < num_workers (" +
                                  std::to_string(job.spec.num_workers) + ") of job " +
                                  std::to_string(job_id) + ", got " + std::to_string(rank));
    }
    *num_workers = job.spec.num_workers;
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return UnavailableError("the controller is shutting down");
    std::shared_ptr<SyncCoordinator>& sync = syncs_[job_id];
    if (sync == nullptr) sync = std::make_shared<SyncCoordinator>();
    return sync;
  }

  // Waits until the call's deadline, and gives up (Cancelled) as soon as the job ends.
  WaitControl JobWait(grpc::ServerContext* context, uint32_t job_id, const std::string& token) {
    return WaitFor(context, [this, job_id, token] { return !sink_->CheckJobAccess(job_id, token).ok(); });
  }

  // A wait that ended because the job ended says so (Aborted with the reason).
  Status Explain(const Status& s, const char* rpc, uint32_t job_id, const std::string& token) {
    if (s.ok()) return s;
    if (s.code() == StatusCode::kCancelled || s.code() == StatusCode::kAborted) {
      const Status access = sink_->CheckJobAccess(job_id, token);
      if (!access.ok()) {
        ForgetSync(job_id);
        return AbortedError(std::string(rpc) + ": job " + std::to_string(job_id) +
                            " ended while this worker waited: " + access.message());
      }
    }
    return s.WithContext("job " + std::to_string(job_id));
  }

  void ForgetSync(uint32_t job_id) {
    std::shared_ptr<SyncCoordinator> sync;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = syncs_.find(job_id);
      if (it == syncs_.end()) return;
      sync = std::move(it->second);
      syncs_.erase(it);
    }
    sync->Reset();  // blocked callers return Aborted; they hold their own reference
  }

  JobSink* const sink_;
  std::mutex mu_;
  bool shut_down_ = false;
  std::map<uint32_t, std::shared_ptr<SyncCoordinator>> syncs_;  // guarded by mu_
};

JobService::JobService(JobSink* sink) : impl_(std::make_unique<Impl>(sink)) {}
JobService::~JobService() = default;
grpc::Service* JobService::grpc_service() { return impl_.get(); }
void JobService::Shutdown() { impl_->Shutdown(); }

}  // namespace switchml::controller
