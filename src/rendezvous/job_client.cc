#include "rendezvous/job_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "rendezvous/grpc_client.h"
#include "rendezvous/grpc_status.h"
#include "rendezvous/job_counters_proto.h"
#include "rendezvous/two_level_proto.h"
#include "rendezvous/operator_auth.h"
#include "rendezvous/tls.h"
#include "switchml_v1.grpc.pb.h"

namespace switchml::rendezvous {
namespace {

namespace v1 = ::switchml::v1;

std::string Str(uint64_t v) { return std::to_string(v); }

JobState FromProto(v1::JobState s) {
  switch (s) {
    case v1::RUNNING: return JobState::kRunning;
    case v1::ENDED: return JobState::kEnded;
    default: return JobState::kWaitingForWorkers;
  }
}

JobInfo FromProto(const v1::JobInfo& p) {
  JobInfo j;
  j.job_id = p.job_id();
  j.spec.num_workers = p.spec().num_workers();
  j.spec.num_slots = p.spec().num_slots();
  j.spec.elements_per_packet = p.spec().elements_per_packet();
  j.spec.data_type = static_cast<JobDataType>(p.spec().data_type());
  j.spec.idle_timeout = std::chrono::milliseconds(p.spec().idle_timeout_ms());
  j.spec.name = p.spec().name();
  j.spec.switches = std::max<uint32_t>(1, p.spec().switches());
  j.assignment.shard = p.spec().shard();
  j.assignment.num_shards = std::max<uint32_t>(1, p.spec().num_shards());
  j.assignment.shard_group = p.spec().shard_group();
  j.assignment.placement = p.spec().placement();
  j.assignment.job_id = p.spec().controller_job_id();
  // A port out of range from the other end reads as none (informative here).
  StatusOr<control::Uplink> uplink = UplinkFromProto(p.spec());
  if (uplink.ok()) j.assignment.uplink = std::move(*uplink);
  RacksFromProto(p.spec(), &j.spec);
  j.state = FromProto(p.state());
  j.slot_base = p.slot_base();
  j.num_registered = p.num_registered();
  j.barrier_waiters = p.barrier_waiters();
  j.broadcast_waiters = p.broadcast_waiters();
  for (const v1::WorkerInfo& w : p.workers()) {
    JobWorkerInfo wi;
    wi.rank = w.rank();
    wi.ipv4 = w.ipv4();
    for (uint32_t port : w.udp_ports()) wi.udp_ports.push_back(static_cast<uint16_t>(port));
    wi.received = w.received();
    wi.idle_for = std::chrono::milliseconds(w.idle_ms());
    j.workers.push_back(std::move(wi));
  }
  j.counters = ::switchml::rendezvous::FromProto(p.counters());
  j.idle_for = std::chrono::milliseconds(p.idle_ms());
  j.end_reason = p.end_reason();
  j.switch_lost = p.switch_lost();
  return j;
}

SlotSetInfo FromProto(const v1::SlotSet& p) {
  SlotSetInfo s;
  for (int i = 0; i < p.bitmap_size() && i < 4; ++i) s.bitmap[i] = p.bitmap(i);
  s.counter = p.counter();
  s.num_elements = p.num_elements();
  s.exp0 = static_cast<int8_t>(p.exp0());
  s.exp1 = static_cast<int8_t>(p.exp1());
  return s;
}

}  // namespace

struct JobClient::Impl : ControllerConnection {
  std::unique_ptr<v1::JobService::Stub> stub;
  std::string operator_token;  // sent as metadata when set

  // Hides ControllerConnection::Prepare: also attaches the operator credential.
  void Prepare(grpc::ClientContext* context) const {
    ControllerConnection::Prepare(context);
    if (!operator_token.empty()) context->AddMetadata(kOperatorTokenMetadataKey, operator_token);
  }

  Status MapError(const char* rpc, const grpc::Status& s) const {
    return ControllerConnection::MapError(
        rpc, s, "does not serve switchml.v1.JobService: a reference controller, or a switch started without jobs");
  }
};

StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(const std::string& controller_address,
                                                        std::chrono::milliseconds rpc_timeout,
                                                        const TlsOptions& tls, bool require_connected) {
  // Every JobService call carries a token (the job's or the operator's).
  SWITCHML_RETURN_IF_ERROR(CheckClientMaySendTokens(tls, controller_address, "JobClient::Connect"));
  SWITCHML_ASSIGN_OR_RETURN(ControllerConnection connection,
                            ControllerConnection::Open(controller_address, rpc_timeout, tls,
                                                       "JobClient::Connect", require_connected));
  auto impl = std::make_unique<Impl>();
  static_cast<ControllerConnection&>(*impl) = std::move(connection);
  impl->stub = v1::JobService::NewStub(impl->channel);
  return std::unique_ptr<JobClient>(new JobClient(std::move(impl)));
}

JobClient::JobClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobClient::~JobClient() = default;
const std::string& JobClient::address() const { return impl_->address; }

void JobClient::set_wait_for_ready(bool wait) { impl_->wait_for_ready = wait; }
void JobClient::set_operator_token(std::string token) { impl_->operator_token = std::move(token); }

StatusOr<JobInfo> JobClient::CreateJob(const JobSpec& spec) {
  return CreateJobShard(spec, control::ShardAssignment{});
}

StatusOr<JobInfo> JobClient::CreateJobShard(const JobSpec& spec,
                                            const control::ShardAssignment& assignment) {
  v1::CreateJobRequest request;
  v1::JobSpec* p = request.mutable_spec();
  p->set_num_workers(spec.num_workers);
  p->set_num_slots(spec.num_slots);
  p->set_elements_per_packet(spec.elements_per_packet);
  p->set_data_type(static_cast<v1::DataType>(spec.data_type));
  if (spec.idle_timeout == kNoIdleTimeout) {
    p->set_no_idle_timeout(true);
  } else {
    const auto ms = spec.idle_timeout.count();
    if (ms < 0 || ms > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgumentError("CreateJob: idle_timeout must be in [0, 2^32) ms (0 = the "
                                  "controller's default) or kNoIdleTimeout, got " +
                                  std::to_string(ms));
    }
    p->set_idle_timeout_ms(static_cast<uint32_t>(ms));
  }
  p->set_token(spec.token);
  p->set_name(spec.name);
  p->set_switches(spec.switches);
  // The wire's JobSpec carries the assignment's fields (unset for a job served alone).
  p->set_shard(assignment.shard);
  p->set_num_shards(assignment.num_shards == 1 ? 0 : assignment.num_shards);
  p->set_shard_group(assignment.shard_group);
  p->set_placement(assignment.placement);
  p->set_controller_job_id(assignment.job_id);
  UplinkToProto(assignment.uplink, p);
  RacksToProto(spec, p);
  v1::CreateJobResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("CreateJob", impl_->stub->CreateJob(&context, request, &response)));
  JobInfo info = FromProto(response.job());
  info.token = response.token();
  return info;
}

Status JobClient::DeleteJob(uint32_t job_id, const std::string& token) {
  v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  request.set_token(token);
  v1::DeleteJobResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  return impl_->MapError("DeleteJob", impl_->stub->DeleteJob(&context, request, &response));
}

StatusOr<JobInfo> JobClient::GetJob(uint32_t job_id, const std::string& token) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  request.set_token(token);
  v1::GetJobResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("GetJob", impl_->stub->GetJob(&context, request, &response)));
  return FromProto(response.job());
}

StatusOr<JobList> JobClient::ListJobs(
    std::vector<std::pair<std::string, uint64_t>>* switch_counters) {
  v1::ListJobsRequest request;
  v1::ListJobsResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("ListJobs", impl_->stub->ListJobs(&context, request, &response)));
  JobList list;
  for (const v1::JobInfo& j : response.jobs()) list.jobs.push_back(FromProto(j));
  if (response.has_reference_session()) list.reference_session = FromProto(response.reference_session());
  list.pool_slots = response.pool_slots();
  list.free_slots = response.free_slots();
  list.largest_free_range = response.largest_free_range();
  list.data_ipv4 = response.data_ipv4();
  list.data_udp_port = static_cast<uint16_t>(response.data_udp_port());
  for (uint32_t port : response.data_udp_ports()) {
    if (port == 0 || port > 65535) {
      return InternalError("ListJobs: data_udp_ports has " + std::to_string(port) +
                           ", not a UDP port");
    }
    list.data_udp_ports.push_back(static_cast<uint16_t>(port));
  }
  for (const v1::SwitchHealth& h : response.switches()) {
    list.switches.push_back({.address = h.address(),
                             .up = h.up(),
                             .for_ms = std::chrono::milliseconds(h.for_ms()),
                             .last_error = h.last_error(),
                             .jobs_replaced = h.jobs_replaced()});
  }
  if (switch_counters != nullptr) {
    switch_counters->assign(response.switch_counters().begin(),
                            response.switch_counters().end());
    std::sort(switch_counters->begin(), switch_counters->end());
  }
  return list;
}

StatusOr<JobWorkerGrant> JobClient::RegisterWorker(const JobRegistration& reg) {
  v1::RegisterWorkerRequest request;
  request.set_job_id(reg.job_id);
  request.set_token(reg.token);
  request.set_rank(reg.worker.rank);
  request.set_num_workers(reg.worker.num_workers);
  request.set_ipv4(reg.worker.ipv4);
  request.set_mac(reg.worker.mac);
  for (uint16_t p : reg.worker.udp_ports) request.add_udp_ports(p);
  request.set_protocol_version(reg.worker.protocol_version);
  request.set_num_worker_threads(reg.worker.num_worker_threads);
  request.set_window_packets(reg.worker.window_packets);
  request.set_elements_per_packet(reg.worker.elements_per_packet);
  request.set_leaf(reg.worker.leaf);
  v1::RegisterWorkerResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(impl_->MapError(
      "RegisterWorker", impl_->stub->RegisterWorker(&context, request, &response)));
  if (response.switch_udp_port() == 0 ||
      response.switch_udp_port() > std::numeric_limits<uint16_t>::max()) {
    return InternalError("controller " + impl_->address +
                         " (RegisterWorker): reply has switch_udp_port " +
                         Str(response.switch_udp_port()) + ", not in [1, 65535]");
  }
  JobWorkerGrant grant;
  grant.switch_info.ipv4 = response.switch_ipv4();
  grant.switch_info.udp_port = static_cast<uint16_t>(response.switch_udp_port());
  grant.switch_info.mac = response.switch_mac();
  grant.switch_info.num_slots = response.num_slots();
  // The routes come as parallel lists (switchml_v1.proto). Port 0 only from a shard (a thread
  // another shard serves); the standalone controller merges the shards' answers
  // (remote_switches.cc) and checks every port.
  const int threads = response.switch_udp_ports_size();
  if ((response.switch_thread_ipv4s_size() != 0 && response.switch_thread_ipv4s_size() != threads) ||
      (response.switch_thread_shards_size() != 0 && response.switch_thread_shards_size() != threads)) {
    return InternalError("controller " + impl_->address + " (RegisterWorker): reply has " +
                         Str(uint32_t(response.switch_thread_ipv4s_size())) + " thread addresses and " +
                         Str(uint32_t(response.switch_thread_shards_size())) + " thread shards for " +
                         Str(uint32_t(threads)) + " thread ports");
  }
  grant.switch_info.num_shards = std::max<uint32_t>(1, response.switch_shards());
  for (int i = 0; i < threads; ++i) {
    const uint32_t p = response.switch_udp_ports(i);
    if (p > std::numeric_limits<uint16_t>::max()) {
      return InternalError("controller " + impl_->address +
                           " (RegisterWorker): reply has switch_udp_ports[" + Str(uint32_t(i)) +
                           "] " + Str(p) + ", not in [0, 65535]");
    }
    ThreadRoute r;
    r.udp_port = static_cast<uint16_t>(p);
    if (response.switch_thread_ipv4s_size() != 0) r.ipv4 = response.switch_thread_ipv4s(i);
    if (response.switch_thread_shards_size() != 0) r.shard = response.switch_thread_shards(i);
    if (r.shard >= grant.switch_info.num_shards) {
      return InternalError("controller " + impl_->address + " (RegisterWorker): reply names shard " +
                           Str(r.shard) + " of " + Str(grant.switch_info.num_shards));
    }
    grant.switch_info.thread_routes.push_back(r);
  }
  grant.job_id = reg.job_id;
  grant.num_workers = response.num_workers();
  grant.elements_per_packet = response.elements_per_packet();
  grant.state = FromProto(response.state());
  grant.placement = response.placement();
  return grant;
}

Status JobClient::Barrier(uint32_t job_id, const std::string& token, uint32_t rank) {
  v1::JobBarrierRequest request;
  request.set_job_id(job_id);
  request.set_token(token);
  request.set_rank(rank);
  v1::JobBarrierResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  return impl_->MapError("Barrier", impl_->stub->Barrier(&context, request, &response));
}

StatusOr<uint64_t> JobClient::Broadcast(uint32_t job_id, const std::string& token, uint32_t rank,
                                        uint32_t root, uint64_t value) {
  v1::JobBroadcastRequest request;
  request.set_job_id(job_id);
  request.set_token(token);
  request.set_rank(rank);
  request.set_root(root);
  request.set_value(value);
  v1::JobBroadcastResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("Broadcast", impl_->stub->Broadcast(&context, request, &response)));
  return response.value();
}

StatusOr<std::vector<SlotInfo>> JobClient::InspectSlots(uint32_t job_id, uint32_t first_slot,
                                                        uint32_t count) {
  v1::InspectSlotsRequest request;
  request.set_job_id(job_id);
  request.set_first_slot(first_slot);
  request.set_count(count);
  v1::InspectSlotsResponse response;
  grpc::ClientContext context;
  impl_->Prepare(&context);
  SWITCHML_RETURN_IF_ERROR(
      impl_->MapError("InspectSlots", impl_->stub->InspectSlots(&context, request, &response)));
  std::vector<SlotInfo> out;
  for (const v1::SlotInfo& s : response.slots()) {
    SlotInfo info;
    info.slot = s.slot();
    info.sets[0] = FromProto(s.set0());
    info.sets[1] = FromProto(s.set1());
    out.push_back(info);
  }
  return out;
}

StatusOr<JobWorkerGrant> JobBootstrap(JobClient& client, const JobRegistration& reg) {
  const std::string where =
      "job " + Str(reg.job_id) + " rank " + Str(reg.worker.rank) + ": ";
  StatusOr<JobWorkerGrant> grant = client.RegisterWorker(reg);
  if (!grant.ok()) return grant.status().WithContext(where + "registration");
  SWITCHML_RETURN_IF_ERROR(
      client.Barrier(reg.job_id, reg.token, reg.worker.rank).WithContext(where + "barrier"));
  grant->state = JobState::kRunning;
  return grant;
}

}  // namespace switchml::rendezvous
