#include "controller/job_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rendezvous/grpc_status.h"
#include "rendezvous/job_counters_proto.h"
#include "rendezvous/two_level_proto.h"
#include "controller/job_sync_table.h"
#include "rendezvous/operator_auth.h"
#include "controller/sync_calls.h"
#include "controller/sync_coordinator.h"
#include "switchml_v1.grpc.pb.h"

namespace switchml::controller {

using rendezvous::ToGrpcStatus;
using rendezvous::kOperatorTokenMetadataKey;
using rendezvous::kOperatorTokenHelp;
using rendezvous::ConstantTimeEquals;
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
  spec->set_no_idle_timeout(j.spec.idle_timeout.count() == 0);
  spec->set_name(j.spec.name);
  spec->set_switches(j.spec.switches);
  spec->set_shard(j.assignment.shard);
  spec->set_num_shards(j.assignment.num_shards);
  spec->set_shard_group(j.assignment.shard_group);
  spec->set_placement(j.assignment.placement);
  spec->set_controller_job_id(j.assignment.job_id);
  rendezvous::UplinkToProto(j.assignment.uplink, spec);
  rendezvous::RacksToProto(j.spec, spec);
  out->set_state(ToProto(j.state));
  out->set_slot_base(j.slot_base);
  out->set_num_registered(j.num_registered);
  out->set_barrier_waiters(j.barrier_waiters);
  out->set_broadcast_waiters(j.broadcast_waiters);
  for (const JobWorkerInfo& w : j.workers) {
    v1::WorkerInfo* wi = out->add_workers();
    wi->set_rank(w.rank);
    wi->set_ipv4(w.ipv4);
    for (uint16_t p : w.udp_ports) wi->add_udp_ports(p);
    wi->set_received(w.received);
    wi->set_idle_ms(static_cast<uint64_t>(w.idle_for.count()));
  }
  rendezvous::ToProto(j.counters, out->mutable_counters());
  out->set_idle_ms(static_cast<uint64_t>(j.idle_for.count()));
  out->set_end_reason(j.end_reason);
  out->set_switch_lost(j.switch_lost);
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

#define SWITCHML_RETURN_IF_ERROR_GRPC(expr)  \
  do {                                       \
    const ::switchml::Status _st = (expr);   \
    if (!_st.ok()) return ToGrpcStatus(_st); \
  } while (0)

}  // namespace

// How often the jobs with waiting callers are asked whether they ended (Watch).
constexpr std::chrono::milliseconds kWatchInterval{10};

// Barrier and Broadcast use gRPC's callback API (a waiting call holds no thread,
// sync_calls.h); the other methods are synchronous.
using JobServiceBase = v1::JobService::WithCallbackMethod_Barrier<
    v1::JobService::WithCallbackMethod_Broadcast<v1::JobService::Service>>;

class JobService::Impl final : public JobServiceBase {
 public:
  Impl(SwitchControl* sink, JobServiceOptions options)
      : sink_(sink),
        options_(std::move(options)),
        syncs_(options_.reference_limits),
        sweeper_([this] { SweepLoop(); }) {}
  ~Impl() override { StopSweep(); }

  grpc::Status CreateJob(grpc::ServerContext* context, const v1::CreateJobRequest* request,
                         v1::CreateJobResponse* response) override {
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckTransport(*context, "CreateJob"));
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckOperator(*context, "CreateJob"));
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
    if (p.no_idle_timeout() && p.idle_timeout_ms() != 0) {
      return Error(StatusCode::kInvalidArgument,
                   "CreateJob: idle_timeout_ms must be 0 when no_idle_timeout is set, got " +
                       std::to_string(p.idle_timeout_ms()));
    }
    // 0 = the default; only no_idle_timeout asks for none (0 in the sink's terms).
    spec.idle_timeout = p.no_idle_timeout()         ? std::chrono::milliseconds(0)
                        : p.idle_timeout_ms() == 0 ? options_.default_idle_timeout
                                                   : std::chrono::milliseconds(p.idle_timeout_ms());
    spec.token = p.token();
    spec.name = p.name();
    spec.switches = std::max<uint32_t>(1, p.switches());
    rendezvous::RacksFromProto(p, &spec);
    // The wire's JobSpec also carries a shard assignment, which only a standalone controller
    // sends, to the switches it places a job on: the switch creates its shard; any other sink
    // (a standalone controller itself) refuses it naming the field.
    StatusOr<control::Uplink> uplink = rendezvous::UplinkFromProto(p);
    if (!uplink.ok()) {
      return Error(StatusCode::kInvalidArgument, "CreateJob: " + uplink.status().message());
    }
    const control::ShardAssignment assignment{.shard = p.shard(),
                                              .num_shards = std::max<uint32_t>(1, p.num_shards()),
                                              .shard_group = p.shard_group(),
                                              .placement = p.placement(),
                                              .job_id = p.controller_job_id(),
                                              .uplink = std::move(*uplink)};
    StatusOr<JobInfo> job = assignment == control::ShardAssignment{}
                                ? sink_->CreateJob(spec)
                                : sink_->CreateJobShard(spec, assignment);
    if (!job.ok()) return ToGrpcStatus(job.status());
    ToProto(*job, response->mutable_job());
    response->set_token(job->token);
    return grpc::Status::OK;
  }

  grpc::Status DeleteJob(grpc::ServerContext* context, const v1::DeleteJobRequest* request,
                         v1::DeleteJobResponse*) override {
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckTransport(*context, "DeleteJob"));
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckOperator(*context, "DeleteJob"));
    const Status s = sink_->DeleteJob(request->job_id(), request->token());
    if (!s.ok()) return ToGrpcStatus(s);
    syncs_.Forget(request->job_id());
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override {
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckTransport(*context, "GetJob"));
    if (!request->token().empty()) {
      const Status access = sink_->CheckJobAccess(request->job_id(), request->token());
      if (!access.ok()) return ToGrpcStatus(access);
    } else {
      // Without the job's token only an operator may look.
      SWITCHML_RETURN_IF_ERROR_GRPC(CheckOperator(*context, "GetJob without the job's token"));
    }
    StatusOr<JobInfo> job = sink_->GetJob(request->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    CountWaiters(*job);
    ToProto(*job, response->mutable_job());
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckTransport(*context, "ListJobs"));
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckOperator(*context, "ListJobs"));
    JobList list = sink_->ListJobs();
    for (JobInfo& j : list.jobs) {
      CountWaiters(j);
      ToProto(j, response->add_jobs());
    }
    if (list.reference_session) {
      CountWaiters(*list.reference_session);
      ToProto(*list.reference_session, response->mutable_reference_session());
    }
    response->set_pool_slots(list.pool_slots);
    response->set_free_slots(list.free_slots);
    response->set_largest_free_range(list.largest_free_range);
    response->set_data_ipv4(list.data_ipv4);
    response->set_data_udp_port(list.data_udp_port);
    for (uint16_t port : list.data_udp_ports) response->add_data_udp_ports(port);
    for (const SwitchHealth& h : list.switches) {
      v1::SwitchHealth* out = response->add_switches();
      out->set_address(h.address);
      out->set_up(h.up);
      out->set_for_ms(static_cast<uint64_t>(h.for_ms.count()));
      out->set_last_error(h.last_error);
      out->set_jobs_replaced(h.jobs_replaced);
    }
    for (const auto& [name, value] : sink_->CounterValues()) {
      (*response->mutable_switch_counters())[name] = value;
    }
    return grpc::Status::OK;
  }

  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override {
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckTransport(*context, "RegisterWorker"));
    JobRegistration reg;
    reg.job_id = request->job_id();
    reg.token = request->token();
    reg.worker.rank = request->rank();
    reg.worker.num_workers = request->num_workers();
    reg.worker.ipv4 = request->ipv4();
    reg.worker.mac = request->mac();
    reg.worker.protocol_version = request->protocol_version();
    reg.worker.num_worker_threads = request->num_worker_threads();
    reg.worker.window_packets = request->window_packets();
    reg.worker.elements_per_packet = request->elements_per_packet();
    reg.worker.leaf = request->leaf();
    for (int i = 0; i < request->udp_ports_size(); ++i) {
      const uint32_t port = request->udp_ports(i);
      if (port == 0 || port > std::numeric_limits<uint16_t>::max()) {
        return Error(StatusCode::kInvalidArgument,
                     "RegisterWorker: udp_ports[" + std::to_string(i) +
                         "] must be in [1, 65535], got " + std::to_string(port));
      }
      reg.worker.udp_ports.push_back(static_cast<uint16_t>(port));
    }
    if (reg.job_id == control::kReferenceJobId) {
      // Job 0, the reference session, is not a JobService job: it registers through the
      // reference UdpSession (session_service.h). Answer as for any job that does not exist.
      const Status access = sink_->CheckJobAccess(reg.job_id, reg.token);
      return ToGrpcStatus(access.ok() ? NotFoundError("RegisterWorker: job 0 is the reference "
                                                      "session; job ids start at 1")
                                      : access);
    }
    StatusOr<JobWorkerGrant> grant = sink_->RegisterJobWorker(reg);
    if (!grant.ok()) {
      RecordRefusal(reg.job_id, reg.token, grant.status());
      return ToGrpcStatus(grant.status());
    }
    response->set_switch_ipv4(grant->switch_info.ipv4);
    response->set_switch_udp_port(grant->switch_info.udp_port);
    response->set_switch_mac(grant->switch_info.mac);
    response->set_num_slots(grant->switch_info.num_slots);
    response->set_num_workers(grant->num_workers);
    response->set_elements_per_packet(grant->elements_per_packet);
    response->set_state(ToProto(grant->state));
    // The proto carries the routes as parallel lists (switchml_v1.proto).
    for (const control::ThreadRoute& r : grant->switch_info.thread_routes) {
      response->add_switch_udp_ports(r.udp_port);
      response->add_switch_thread_ipv4s(r.ipv4);
      response->add_switch_thread_shards(r.shard);
    }
    response->set_switch_shards(grant->switch_info.num_shards);
    response->set_placement(grant->placement);
    return grpc::Status::OK;
  }

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* context,
                                    const v1::JobBarrierRequest* request,
                                    v1::JobBarrierResponse*) override {
    return JobCall(
        context, request->job_id(), request->token(), request->rank(), "Barrier",
        [](SyncCoordinator& sync, uint32_t num_workers, SyncDone done) {
          return sync.StartBarrier(num_workers, std::move(done));
        },
        [](uint64_t) {});
  }

  grpc::ServerUnaryReactor* Broadcast(grpc::CallbackServerContext* context,
                                      const v1::JobBroadcastRequest* request,
                                      v1::JobBroadcastResponse* response) override {
    const uint64_t value = request->value();
    const uint32_t rank = request->rank();
    const uint32_t root = request->root();
    return JobCall(
        context, request->job_id(), request->token(), rank, "Broadcast",
        [value, rank, root](SyncCoordinator& sync, uint32_t num_workers, SyncDone done) {
          return sync.StartBroadcast(value, rank, num_workers, root, std::move(done));
        },
        [response](uint64_t v) { response->set_value(v); });
  }

  grpc::Status InspectSlots(grpc::ServerContext* context, const v1::InspectSlotsRequest* request,
                            v1::InspectSlotsResponse* response) override {
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckTransport(*context, "InspectSlots"));
    SWITCHML_RETURN_IF_ERROR_GRPC(CheckOperator(*context, "InspectSlots"));
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
    syncs_.Shutdown();
    StopSweep();
  }

  JobSyncTable* sync_table() { return &syncs_; }

 private:
  // The plaintext rule for a call that carries a token (rendezvous/tls.h).
  Status CheckTransport(const grpc::ServerContextBase& context, std::string_view rpc) const {
    return rendezvous::CheckServerMayAcceptTokens(options_.tls, context.peer(), rpc);
  }

  // OK if the call carries the operator credential; the errors say how to pass it.
  Status CheckOperator(const grpc::ServerContext& context, const std::string& rpc) const {
    if (options_.operator_token.empty()) {
      return PermissionDeniedError(
          rpc + ": job administration is disabled: this switch or controller was started "
                "without an operator credential (start it with --operator-token-file FILE "
                "or SWITCHML_OPERATOR_TOKEN)");
    }
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find(kOperatorTokenMetadataKey);
    if (it == metadata.end()) {
      return UnauthenticatedError(rpc + " needs the operator credential (gRPC metadata " +
                                  kOperatorTokenMetadataKey + "), and none was sent: " +
                                  kOperatorTokenHelp);
    }
    if (!ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()),
                            options_.operator_token)) {
      return PermissionDeniedError(rpc + ": wrong operator credential: " + kOperatorTokenHelp);
    }
    return OkStatus();
  }

  // Drops the sync state and refusal of every job that has ended (or is unknown), unless a
  // handler is using it; asks the sink without holding the table's locks.
  void Sweep() {
    for (uint32_t id : syncs_.SweepCandidates()) {
      const StatusOr<JobInfo> job = sink_->GetJob(id);
      const bool ended = job.ok() ? job->state == JobState::kEnded
                                  : job.status().code() == StatusCode::kNotFound;
      if (ended) syncs_.ForgetUnused(id);
    }
  }

  // The background thread: Watch every kWatchInterval while a job has waiting callers (woken
  // by WakeWatch when one starts waiting), Sweep every options_.sweep_interval.
  void SweepLoop() {
    TimePoint next_sweep = Clock::now() + options_.sweep_interval;
    std::unique_lock<std::mutex> lock(sweep_mu_);
    while (!stop_sweep_) {
      lock.unlock();
      const bool watching = !syncs_.WatchList().empty();
      lock.lock();
      const TimePoint now = Clock::now();
      const TimePoint until = watching ? std::min(now + kWatchInterval, next_sweep) : next_sweep;
      sweep_cv_.wait_until(lock, until, [this] { return stop_sweep_ || wake_watch_; });
      wake_watch_ = false;
      if (stop_sweep_) break;
      lock.unlock();
      Watch();
      if (Clock::now() >= next_sweep) {
        Sweep();
        next_sweep = Clock::now() + options_.sweep_interval;
      }
      lock.lock();
    }
  }

  void StopSweep() {
    {
      std::lock_guard<std::mutex> lock(sweep_mu_);
      stop_sweep_ = true;
    }
    sweep_cv_.notify_all();
    std::lock_guard<std::mutex> lock(join_mu_);
    if (sweeper_.joinable()) sweeper_.join();
  }

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
    SyncLimits limits;
    limits.max_pending_broadcasts = kMaxPendingBroadcastsPerJob;
    // Each rank blocks in one call at a time; twice that leaves room for retries.
    limits.max_waiters = 2 * job.spec.num_workers;
    return syncs_.Acquire(job_id, limits, token);
  }

  // A job-scoped Barrier or Broadcast: checks the token and the rank, then joins the job's
  // operation through `start` without holding a thread (SyncCallReactor). The call ends at
  // its deadline, when the client cancels, when the job ends (Watch) or a registration of the
  // job is refused (RecordRefusal); Explain says which.
  grpc::ServerUnaryReactor* JobCall(
      grpc::CallbackServerContext* context, uint32_t job_id, const std::string& token,
      uint32_t rank, const char* rpc,
      std::function<SyncCoordinator::Ticket(SyncCoordinator&, uint32_t, SyncDone)> start,
      std::function<void(uint64_t)> fill) {
    uint32_t num_workers = 0;
    if (Status plaintext = CheckTransport(*context, rpc); !plaintext.ok()) {
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      reactor->Finish(ToGrpcStatus(plaintext));
      return reactor;
    }
    StatusOr<std::shared_ptr<SyncCoordinator>> sync = SyncFor(job_id, token, rank, &num_workers);
    Status refused;
    if (!sync.ok()) {
      refused = sync.status();
    } else if (syncs_.HasRefusal(job_id, token)) {
      JobSyncTable::Use use(&syncs_, job_id, *sync);
      refused = Explain(CancelledError(std::string(rpc) + ": a registration was refused"), rpc,
                        job_id, token);
    }
    if (sync.ok() && refused.ok()) {
      auto use = std::make_shared<JobSyncTable::Use>(&syncs_, job_id, *sync);
      auto* reactor = new SyncCallReactor(
          *sync, &timer_, HandlerDeadline(*context),
          [this, use, job_id, token, rpc, fill = std::move(fill)](SyncResult result) mutable {
            grpc::Status status = grpc::Status::OK;
            if (result.ok()) {
              fill(*result);
            } else {
              status = ToGrpcStatus(Explain(result.status(), rpc, job_id, token));
            }
            use.reset();  // the call no longer uses the job's state
            return status;
          });
      WakeWatch();
      SyncCoordinator& coordinator = **sync;
      reactor->Start(
          [&](SyncDone done) { return start(coordinator, num_workers, std::move(done)); });
      // A refusal recorded since the HasRefusal check above did not see this call.
      syncs_.CancelWaitersIfRefused(job_id, token);
      return reactor;
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(refused));
    return reactor;
  }

  // Ends the waiting calls of every job that has ended (they get Cancelled, which Explain
  // turns into Aborted with the job's end reason). One access check per job with waiting
  // callers, every kWatchInterval while there are any.
  void Watch() {
    for (const auto& [job_id, token] : syncs_.WatchList()) {
      if (!sink_->CheckJobAccess(job_id, token).ok()) {
        syncs_.CancelWaiters(job_id, "the job ended");
      }
    }
  }

  void WakeWatch() {
    {
      std::lock_guard<std::mutex> lock(sweep_mu_);
      wake_watch_ = true;
    }
    sweep_cv_.notify_all();
  }

  // The job's callers waiting here (the switch, or the controller the job was placed by, knows
  // nothing of them).
  void CountWaiters(JobInfo& job) const {
    const JobSyncTable::Waiters w = syncs_.WaitersOf(job.job_id);
    job.barrier_waiters = w.barrier;
    job.broadcast_waiters = w.broadcast;
  }

  // A wait that ended because the job ended says so (Aborted with the reason).
  Status Explain(const Status& s, const char* rpc, uint32_t job_id, const std::string& token) {
    if (s.ok()) return s;
    if (s.code() == StatusCode::kCancelled || s.code() == StatusCode::kAborted) {
      const Status access = sink_->CheckJobAccess(job_id, token);
      if (!access.ok()) {
        syncs_.Forget(job_id);
        return AbortedError(std::string(rpc) + ": job " + std::to_string(job_id) +
                            " ended while this worker waited: " + access.message());
      }
      if (std::optional<std::string> refusal = syncs_.Refused(job_id, token)) {
        return FailedPreconditionError(std::string(rpc) + ": job " + std::to_string(job_id) +
                                       " cannot start: a registration was refused: " +
                                       *refusal);
      }
    }
    return s.WithContext("job " + std::to_string(job_id));
  }

  // A registration refused with FailedPrecondition for a live job (a worker that disagrees
  // with the job's first registration, control/switch_control.h) means the job's barrier can never
  // complete: its waiting and later Barrier/Broadcast calls fail with the refusal's message
  // (JobCall, Explain). Only a caller with the job's token can cause this, and only callers
  // with that token see it (a standalone controller's job ids repeat when a switch restarts;
  // the new job has a new token).
  void RecordRefusal(uint32_t job_id, const std::string& token, const Status& refusal) {
    if (refusal.code() != StatusCode::kFailedPrecondition) return;
    if (!sink_->CheckJobAccess(job_id, token).ok()) return;  // ended: waiters learn that
    syncs_.RecordRefusal(job_id, token, refusal.message());  // cancels; Explain says why
  }

  SwitchControl* const sink_;
  const JobServiceOptions options_;
  // Every job's Barrier/Broadcast state and refusals, job 0's included (the reference Sync
  // service uses that entry through sync_table()).
  JobSyncTable syncs_;

  CallTimer timer_;  // the waiting calls' deadlines

  // The watch of jobs with waiting callers (Watch) and the sweep of ended jobs' sync state
  // (Sweep). Declared last: the thread starts in the constructor, once every other member
  // exists.
  std::mutex sweep_mu_;
  std::condition_variable sweep_cv_;
  bool stop_sweep_ = false;   // guarded by sweep_mu_
  bool wake_watch_ = false;   // guarded by sweep_mu_
  std::mutex join_mu_;
  std::thread sweeper_;
};

JobService::JobService(SwitchControl* sink, JobServiceOptions options)
    : impl_(std::make_unique<Impl>(sink, std::move(options))) {}
JobService::~JobService() = default;
grpc::Service* JobService::grpc_service() { return impl_.get(); }
void JobService::Shutdown() { impl_->Shutdown(); }
JobSyncTable* JobService::sync_table() { return impl_->sync_table(); }
size_t JobService::NumSyncStates() const { return impl_->sync_table()->NumSyncStates(); }
size_t JobService::NumBlockedCallers() const { return impl_->sync_table()->NumBlockedCallers(); }

}  // namespace switchml::controller
