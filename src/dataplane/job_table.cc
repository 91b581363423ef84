#include "dataplane/job_table.h"

#include <algorithm>
#include <bit>
#include <random>

#include "wire/packet.h"

namespace switchml::dataplane {


namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

std::string JobName(uint32_t id) { return "job " + Str(id); }

// Equal-time comparison: the time taken does not depend on where the strings differ.
bool SameToken(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

Status ValidateToken(const std::string& token) {
  if (token.size() < 8 || token.size() > 128) {
    return InvalidArgumentError("token must have 8..128 characters, got " + Str(token.size()));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = token[i];
    if (c < 0x21 || c > 0x7E) {
      return InvalidArgumentError("token must be printable ASCII without spaces; character " +
                                  Str(i) + " is not");
    }
  }
  return OkStatus();
}

Status ValidatePorts(const std::vector<uint16_t>& ports, bool may_repeat) {
  if (ports.empty()) {
    return InvalidArgumentError(
        "udp_ports must list the UDP source port of each worker thread (at least one) to "
        "register with a job");
  }
  return ValidateUdpPorts(ports, may_repeat);
}

std::string Where(uint32_t ipv4, uint16_t port) { return FormatIpv4(ipv4) + ":" + Str(port); }

// The layout a job of `spec`, shard `shard` of a job a controller placed, gets from workers
// registering `a`: JobLayout::Make from their threads and window, JobLayout::Whole for workers
// that registered no threads (reference clients, which cannot join a job on several switches).
// InvalidArgument saying what does not fit.
StatusOr<control::JobLayout> LayoutOf(const JobSpec& spec, const control::ShardAssignment& shard,
                                      const AgreedParams& a, const std::string& scope) {
  const uint32_t shards = std::max<uint32_t>(1, shard.num_shards);
  if (a.num_worker_threads == 0) {
    if (shards > 1) {
      return InvalidArgumentError(scope + " is shard " + Str(shard.shard) + " of " + Str(shards) +
                                  ": its workers must register their num_worker_threads and "
                                  "window_packets (reference-mode workers cannot join it)");
    }
    return control::JobLayout::Whole(spec.num_slots);
  }
  StatusOr<control::JobLayout> l =
      control::JobLayout::Make({.job_slots = spec.num_slots, .num_shards = shards,
                                .worker_threads = a.num_worker_threads,
                                .window_packets = a.window_packets});
  if (!l.ok()) return l.status().WithContext(scope);
  return l;
}

}  // namespace

JobCounters AtomicJobCounters::Snapshot() const {
  JobCounters c;
#define SWITCHML_JOB_COUNTER_LOAD(name) c.name = name.load(std::memory_order_relaxed);
  SWITCHML_JOB_COUNTERS(SWITCHML_JOB_COUNTER_LOAD)
#undef SWITCHML_JOB_COUNTER_LOAD
  return c;
}

JobCounters JobRuntime::Counters() const {
  JobCounters sum;
  for (uint32_t i = 0; i < io_threads; ++i) {
    sum += shares_[i].counters.Snapshot();
  }
  return sum;
}

uint64_t JobRuntime::Received() const {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < io_threads; ++i) {
    sum += shares_[i].counters.received.load(std::memory_order_relaxed);
  }
  return sum;
}

uint64_t JobRuntime::RankReceived(uint32_t rank) const {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < io_threads; ++i) {
    sum += rank_rx_[size_t{i} * RankStride(max_ranks) + rank].load(std::memory_order_relaxed);
  }
  return sum;
}


JobTable::JobTable(uint32_t pool_slots, uint32_t max_workers, uint32_t max_elements,
                   AggregatorOptions aggregator_options, uint32_t io_threads)
    : pool_slots_(pool_slots),
      max_workers_(max_workers),
      max_elements_(max_elements),
      aggregator_options_(aggregator_options),
      io_threads_(std::clamp<uint32_t>(io_threads, 1, SwitchConfig::kMaxIoThreads)) {
  jobs_.push_back(ReferenceJob(nullptr));
  Rebuild();
}

StatusOr<std::shared_ptr<const JobTable>> JobTable::CreateEmpty(
    uint32_t pool_slots, uint32_t max_workers, uint32_t max_elements,
    AggregatorOptions aggregator_options, uint32_t io_threads) {
  SWITCHML_ASSIGN_OR_RETURN(Aggregator agg,
                            Aggregator::Create(pool_slots, max_elements, aggregator_options));
  auto table = std::make_shared<JobTable>(pool_slots, max_workers, max_elements,
                                          aggregator_options, io_threads);
  table->jobs_[0].runtime =
      std::make_shared<JobRuntime>(max_workers, std::move(agg), table->io_threads_);
  return std::shared_ptr<const JobTable>(std::move(table));
}

JobTable::Job JobTable::ReferenceJob(std::shared_ptr<JobRuntime> runtime) const {
  Job job;
  job.job_id = kReferenceJobId;
  job.spec.num_workers = 0;
  job.spec.num_slots = pool_slots_;
  job.spec.elements_per_packet = max_elements_;
  job.spec.name = "reference session";
  job.held = control::SlotRange{0, pool_slots_};
  job.layout = control::JobLayout::Whole(pool_slots_);
  job.slot_out_of_range_counter = &SwitchCounters::slot_out_of_range;
  job.runtime = std::move(runtime);
  return job;
}

StatusOr<std::shared_ptr<const JobTable>> JobTable::RegisterSessionWorker(
    const JobTable& current, const WorkerRegistration& reg) {
  JobWorkerGrant grant;
  return Register(current, JobRegistration{.job_id = kReferenceJobId, .worker = reg}, &grant,
                  TimePoint{});
}

bool JobTable::Allocate(uint32_t n, uint32_t* base) const {
  std::vector<std::pair<uint32_t, uint32_t>> used;  // (base, size) of live jobs
  for (const Job& j : jobs()) {
    if (j.state != JobState::kEnded) used.emplace_back(j.slot_base, j.held.count);
  }
  std::sort(used.begin(), used.end());
  uint32_t cursor = 0;
  for (const auto& [b, size] : used) {
    if (b - cursor >= n) {
      *base = cursor;
      return true;
    }
    cursor = b + size;
  }
  if (pool_slots_ - cursor >= n) {
    *base = cursor;
    return true;
  }
  return false;
}

uint32_t JobTable::free_slots() const {
  uint32_t used = 0;
  for (const Job& j : jobs()) {
    if (j.state != JobState::kEnded) used += j.held.count;
  }
  return pool_slots_ - used;
}

uint32_t JobTable::largest_free_range() const {
  std::vector<std::pair<uint32_t, uint32_t>> used;
  for (const Job& j : jobs()) {
    if (j.state != JobState::kEnded) used.emplace_back(j.slot_base, j.held.count);
  }
  std::sort(used.begin(), used.end());
  uint32_t cursor = 0, best = 0;
  for (const auto& [b, size] : used) {
    best = std::max(best, b - cursor);
    cursor = b + size;
  }
  return std::max(best, pool_slots_ - cursor);
}

StatusOr<std::shared_ptr<const JobTable>> JobTable::Create(const JobTable& current,
                                                           JobSpec spec,
                                                           const control::ShardAssignment& shard,
                                                           const std::string& token,
                                                           TimePoint now, uint32_t* job_id) {
  if (spec.num_workers < 1 || spec.num_workers > current.max_workers_) {
    return InvalidArgumentError("num_workers must be in [1, " + Str(current.max_workers_) +
                                "], got " + Str(spec.num_workers));
  }
  if (spec.num_slots < 1 || spec.num_slots > current.pool_slots_) {
    return InvalidArgumentError("num_slots must be in [1, " + Str(current.pool_slots_) +
                                "] (the switch's slot pool), got " + Str(spec.num_slots));
  }
  if (!wire::SizeCodeForElements(spec.elements_per_packet).has_value() ||
      spec.elements_per_packet > current.max_elements_) {
    return InvalidArgumentError(
        "elements_per_packet must be one of 64, 256, 512, 1024 and at most the switch's " +
        Str(current.max_elements_) + ", got " + Str(spec.elements_per_packet));
  }
  if (spec.idle_timeout.count() < 0) {
    return InvalidArgumentError("idle_timeout must be >= 0 ms (0 = never), got " +
                                Str(uint64_t(spec.idle_timeout.count())));
  }
  if (uint8_t(spec.data_type) > uint8_t(JobDataType::kFloat32)) {
    return InvalidArgumentError("data_type must be unspecified, int32 or float32, got " +
                                Str(uint8_t(spec.data_type)));
  }
  const uint32_t max_shards = std::min(control::JobLayout::kMaxShards, spec.num_slots);
  if (shard.num_shards < 1 || shard.num_shards > max_shards || shard.shard >= shard.num_shards) {
    return InvalidArgumentError("shard " + Str(shard.shard) + " of num_shards " +
                                Str(shard.num_shards) + ": need num_shards in [1, " +
                                Str(max_shards) + "] (at most one shard per slot) and shard < "
                                "num_shards");
  }
  if (spec.switches != shard.num_shards) {
    if (shard.num_shards == 1) {
      return InvalidArgumentError(
          "switches=" + Str(spec.switches) + ": a switch serves a job alone (switches = 1); a "
          "job on several switches is created through a standalone controller that drives at "
          "least that many (switchml controller --switch HOST:PORT --switch ...)");
    }
    return InvalidArgumentError("switches=" + Str(spec.switches) + " but this switch is shard " +
                                Str(shard.shard) + " of num_shards " + Str(shard.num_shards) +
                                ": a job's switches are its shards");
  }
  if (!spec.racks.empty() || !spec.parent_switches.empty()) {
    return InvalidArgumentError(
        std::string(spec.racks.empty() ? "parent_switches" : "racks") +
        ": a switch serves one level of a job; a two-level job is placed by a standalone "
        "controller that drives its leaf and parent switches (switchml controller --switch ...)");
  }
  const control::Uplink& up = shard.uplink;
  if (up.enabled()) {
    if (up.parent_ports.empty() || up.parent_ports.size() > SwitchConfig::kMaxIoThreads) {
      return InvalidArgumentError("uplink parent_ports must list the parent's data port of each "
                                  "of its I/O threads (1 to " + Str(SwitchConfig::kMaxIoThreads) +
                                  "), got " + Str(up.parent_ports.size()) + " (parent " +
                                  FormatIpv4(up.parent_ipv4) + ")");
    }
    for (size_t i = 0; i < up.parent_ports.size(); ++i) {
      if (up.parent_ports[i] == 0) {
        return InvalidArgumentError("uplink parent_ports[" + Str(i) + "] must not be 0 (parent " +
                                    FormatIpv4(up.parent_ipv4) + ")");
      }
    }
    for (const Job& j : current.jobs()) {
      if (j.state == JobState::kEnded) continue;
      for (uint16_t port : up.parent_ports) {
        if (j.uplink().IsParent(up.parent_ipv4, port)) {
          return AlreadyExistsError("uplink: " + JobName(j.job_id) + " already has the parent " +
                                    Where(up.parent_ipv4, port) +
                                    "; one leaf job per parent switch on a switch");
        }
      }
      for (uint32_t r = 0; r < j.workers.size(); ++r) {
        const WorkerEntry& w = j.workers[r];
        if (!w.registered || w.ipv4 != up.parent_ipv4) continue;
        for (uint16_t port : up.parent_ports) {
          if (w.udp_ports.empty() ||
              std::find(w.udp_ports.begin(), w.udp_ports.end(), port) != w.udp_ports.end()) {
            return AlreadyExistsError("uplink: the parent " + Where(up.parent_ipv4, port) +
                                      " is the address of rank " + Str(r) + " of " +
                                      JobName(j.job_id));
          }
        }
      }
    }
  }
  if (spec.name.size() > kMaxNameLength) {
    return InvalidArgumentError("name must have at most " + Str(kMaxNameLength) +
                                " characters, got " + Str(spec.name.size()));
  }
  // A token chosen by the operator must be unique among live jobs (a generated one is 128
  // random bits, control::RandomToken): a token opens one job, and a second live job with it would let
  // either job's workers (and whoever holds the token) into the other.
  const bool chosen = !spec.token.empty();
  if (!chosen) spec.token = token;
  SWITCHML_RETURN_IF_ERROR(ValidateToken(spec.token));
  size_t live = 0;
  for (const Job& j : current.jobs()) {
    if (j.state == JobState::kEnded) continue;
    ++live;
    // The message does not say which job has the token.
    if (chosen && j.spec.token == spec.token) {
      return AlreadyExistsError(
          "token: another live job already uses this token; choose another one (or leave it "
          "out to get a random one)");
    }
  }
  if (live >= kMaxLiveJobs) {
    return ResourceExhaustedError("the switch already has " + Str(live) +
                                  " live jobs, the most it keeps (" + Str(kMaxLiveJobs) +
                                  "); delete one first");
  }
  // A shard reserves only its share of the job's slots.
  const control::SlotRange held =
      control::JobLayout::ShardSlots(spec.num_slots, shard.shard, shard.num_shards);
  uint32_t base = 0;
  if (!current.Allocate(held.count, &base)) {
    return ResourceExhaustedError(
        "job needs " + Str(held.count) + " slots" +
        (shard.num_shards > 1 ? " (shard " + Str(shard.shard) + "'s share of " +
                                   Str(spec.num_slots) + ")"
                             : std::string()) +
        " but the largest free range of the pool is " +
        Str(current.largest_free_range()) + " slots (" + Str(current.free_slots()) + " of " +
        Str(current.pool_slots_) + " free); delete a job or ask for fewer slots");
  }
  AggregatorOptions agg_options = current.aggregator_options_;
  agg_options.hold_completed_rounds = up.enabled();
  SWITCHML_ASSIGN_OR_RETURN(Aggregator agg,
                            Aggregator::Create(held.count, spec.elements_per_packet, agg_options));
  SWITCHML_RETURN_IF_ERROR(agg.Reset(spec.num_workers));

  auto next = std::make_shared<JobTable>(current);
  Job job;
  job.job_id = next->next_job_id_++;
  job.slot_base = base;
  job.held = held;
  job.workers.assign(spec.num_workers, WorkerEntry{});
  job.runtime = std::make_shared<JobRuntime>(spec.num_workers, std::move(agg), next->io_threads_);
  job.runtime->activity.last_active = now;
  for (auto& r : job.runtime->activity.ranks) r.last_active = now;
  job.spec = std::move(spec);
  job.assignment = shard;
  *job_id = job.job_id;
  next->jobs_.push_back(std::move(job));
  next->Rebuild();
  return std::shared_ptr<const JobTable>(std::move(next));
}

const JobTable::Job* JobTable::FindJob(uint32_t job_id) const {
  for (const Job& j : jobs()) {
    if (j.job_id == job_id) return &j;
  }
  return nullptr;
}

Status JobTable::CheckAccess(uint32_t job_id, const std::string& token) const {
  const Job* job = FindJob(job_id);
  if (job == nullptr) {
    return NotFoundError(JobName(job_id) + " does not exist on this switch" +
                         (job_id == 0 ? " (job ids start at 1)" : ""));
  }
  if (!SameToken(job->spec.token, token)) {
    return PermissionDeniedError("wrong token for " + JobName(job_id));
  }
  if (job->state == JobState::kEnded) {
    return FailedPreconditionError(JobName(job_id) + " has ended: " + job->end_reason);
  }
  return OkStatus();
}

Status JobTable::Admit(const Job& job, const WorkerRegistration& w, const AdmissionRule& rule,
                       const std::string& scope) const {
  const uint32_t n = job.spec.num_workers;
  if (w.num_workers != 0 && w.num_workers != n) {
    return FailedPreconditionError("num_workers " + Str(w.num_workers) + " differs from " +
                                   scope + "'s num_workers " + Str(n));
  }
  if (w.rank >= n) {
    return InvalidArgumentError("rank must be < num_workers (" + Str(n) + ") of " + scope +
                                ", got " + Str(w.rank));
  }
  SWITCHML_RETURN_IF_ERROR(rule.ports_required ? ValidatePorts(w.udp_ports, w.leaf)
                                               : ValidateUdpPorts(w.udp_ports, w.leaf));
  const WorkerEntry& old = job.workers[w.rank];
  const bool identical = old.registered && old.ipv4 == w.ipv4 && old.udp_ports == w.udp_ports;
  if (old.registered && !identical && !rule.rank_replaces) {
    return AlreadyExistsError("rank " + Str(w.rank) + " of " + scope +
                              " is already registered from " + FormatIpv4(old.ipv4) + ":" +
                              Str(old.udp_ports.empty() ? 0 : old.udp_ports[0]) +
                              "; a rank registers once per job");
  }
  if (!identical) {
    // An address belongs to at most one worker: of the job's other ranks, and with
    // rule.across_jobs of every live service job.
    auto conflict = [&](const Job& other, const std::string& other_scope) -> Status {
      for (uint32_t r = 0; r < other.workers.size(); ++r) {
        const WorkerEntry& o = other.workers[r];
        if (&other == &job && r == w.rank) continue;  // its own entry (replaced)
        if (!o.registered || o.ipv4 != w.ipv4) continue;
        if (o.udp_ports.empty() || w.udp_ports.empty()) {
          return AlreadyExistsError(
              "ipv4 " + FormatIpv4(w.ipv4) + " is already used by rank " + Str(r) + " of " +
              other_scope + "; workers sharing an address must each register their udp_ports");
        }
        for (uint16_t p : w.udp_ports) {
          if (std::find(o.udp_ports.begin(), o.udp_ports.end(), p) != o.udp_ports.end()) {
            return AlreadyExistsError("udp port " + Where(w.ipv4, p) +
                                      " is already registered by rank " + Str(r) + " of " +
                                      other_scope);
          }
        }
      }
      return OkStatus();
    };
    SWITCHML_RETURN_IF_ERROR(conflict(job, scope));
    // A leaf job's parent endpoints are where its totals come from: no worker may claim one.
    for (const Job& other : jobs()) {
      const control::Uplink& up = other.uplink();
      if (other.state == JobState::kEnded || !up.enabled() || up.parent_ipv4 != w.ipv4) continue;
      for (uint16_t port : up.parent_ports) {
        if (w.udp_ports.empty() ||
            std::find(w.udp_ports.begin(), w.udp_ports.end(), port) != w.udp_ports.end()) {
          return AlreadyExistsError("udp port " + Where(up.parent_ipv4, port) +
                                    " is the parent switch of " + JobName(other.job_id));
        }
      }
    }
    if (rule.across_jobs) {
      for (const Job& other : jobs()) {
        if (other.state == JobState::kEnded || other.job_id == job.job_id) continue;
        SWITCHML_RETURN_IF_ERROR(conflict(other, JobName(other.job_id)));
      }
    }
  }
  // After the rank and address checks: a duplicate rank is ALREADY_EXISTS whatever it sends,
  // so only a rank that could still join is refused for disagreeing (and fails the barrier).
  if (job.num_registered > 0) {
    return CheckAgreedParams(job.agreed, AgreedParams::Of(w), scope, rule.kind);
  }
  return LayoutOf(job.spec, job.assignment, AgreedParams::Of(w), scope).status();
}

void JobTable::Admitted(Job& j, const WorkerRegistration& w, const AdmissionRule& rule) {
  if (j.num_registered == 0) j.agreed = AgreedParams::Of(w);
  WorkerEntry& e = j.workers[w.rank];
  j.leaf_workers = j.leaf_workers || w.leaf;
  e.registered = true;
  e.ipv4 = w.ipv4;
  e.mac = w.mac;
  e.udp_ports = w.udp_ports;
  j.num_registered = uint32_t(std::count_if(j.workers.begin(), j.workers.end(),
                                            [](const WorkerEntry& x) { return x.registered; }));
  if (rule.running_at_first || j.num_registered == j.spec.num_workers) {
    j.state = JobState::kRunning;
  }
}

StatusOr<std::shared_ptr<const JobTable>> JobTable::Register(
    const JobTable& current, const JobRegistration& reg,
    JobWorkerGrant* grant, TimePoint now) {
  const WorkerRegistration& w = reg.worker;
  if (reg.job_id == kReferenceJobId) {
    // Job 0, the reference UdpSession rule: no token; rank 0 starts a new session of
    // num_workers ranks (a fresh row of job 0, then the same admission as every rank); a rank
    // registering again replaces its entry; reference-mode workers (no ports) are welcome.
    static const AdmissionRule kSessionRule{.rank_replaces = true, .ports_required = false,
                                            .running_at_first = true, .across_jobs = false,
                                            .kind = "session"};
    if (!reg.token.empty()) {
      return InvalidArgumentError(
          "job 0 (the reference session) takes no token; got a token of " +
          Str(reg.token.size()) + " characters");
    }
    const Job& ref = current.reference();
    const uint32_t max_workers = current.max_workers_;
    if (w.num_workers < 1 || w.num_workers > max_workers) {
      return InvalidArgumentError("num_workers must be in [1, " + Str(max_workers) + "], got " +
                                  Str(w.num_workers));
    }
    const bool new_session = w.rank == 0;
    if (!new_session && ref.spec.num_workers == 0) {
      return FailedPreconditionError("rank " + Str(w.rank) +
                                     " registered before rank 0 started a session");
    }
    // Validate everything before building anything: an invalid request leaves the session as
    // is (the reference clears the switch first and validates afterwards).
    Job session = new_session ? current.ReferenceJob(nullptr) : ref;
    if (new_session) {
      session.epoch = ref.epoch + 1;
      session.session_id = w.session_id;
      session.spec.num_workers = w.num_workers;
      session.workers.assign(w.num_workers, WorkerEntry{});
    }
    SWITCHML_RETURN_IF_ERROR(current.Admit(session, w, kSessionRule, "the session"));
    // A new session gets new aggregation state rather than having the I/O threads clear the
    // old one when they adopt the table: they adopt at different bursts, the slot ownership
    // may change with the new session's agreed parameters, and a thread still on the old
    // table may be writing the old state. The old runtime goes when the last table holding it
    // does. The job counters count on (JobRuntime's `continuing`).
    if (new_session || session.runtime == nullptr) {  // (none: a table made by the constructor)
      SWITCHML_ASSIGN_OR_RETURN(Aggregator agg,
                                Aggregator::Create(current.pool_slots_, current.max_elements_,
                                                   current.aggregator_options_));
      if (new_session) SWITCHML_RETURN_IF_ERROR(agg.Reset(w.num_workers));
      session.runtime = std::make_shared<JobRuntime>(max_workers, std::move(agg),
                                                     current.io_threads_, ref.runtime.get());
    }
    Admitted(session, w, kSessionRule);
    auto next = std::make_shared<JobTable>(current);
    next->jobs_[0] = std::move(session);
    next->Rebuild();
    *grant = JobWorkerGrant{};
    grant->switch_info.num_slots = current.pool_slots_;
    grant->job_id = kReferenceJobId;
    grant->num_workers = w.num_workers;
    grant->state = JobState::kRunning;
    return std::shared_ptr<const JobTable>(std::move(next));
  }
  // A service job: token-checked; every rank registers once with its ports; it runs when
  // every rank has registered; an address is unique among all live jobs.
  static const AdmissionRule kJobRule{.rank_replaces = false, .ports_required = true,
                                      .running_at_first = false, .across_jobs = true,
                                      .kind = "job"};
  SWITCHML_RETURN_IF_ERROR(current.CheckAccess(reg.job_id, reg.token));
  const Job& job = *current.FindJob(reg.job_id);
  SWITCHML_RETURN_IF_ERROR(current.Admit(job, w, kJobRule, JobName(reg.job_id)));
  const WorkerEntry& old = job.workers[w.rank];
  const bool identical = old.registered && old.ipv4 == w.ipv4 && old.udp_ports == w.udp_ports;
  auto next = std::make_shared<JobTable>(current);
  Job& j = const_cast<Job&>(*next->FindJob(reg.job_id));
  if (!identical) {
    Admitted(j, w, kJobRule);
    next->Rebuild();
  }
  // Writers hold the table lock, which also guards Activity (see ExpireIdle).
  j.runtime->activity.Touch(now, w.rank);
  grant->job_id = j.job_id;
  grant->num_workers = j.spec.num_workers;
  grant->elements_per_packet = j.spec.elements_per_packet;
  grant->state = j.state;
  grant->switch_info.num_slots = j.spec.num_slots;
  return std::shared_ptr<const JobTable>(std::move(next));
}

StatusOr<std::shared_ptr<const JobTable>> JobTable::End(const JobTable& current, uint32_t job_id,
                                                        const std::string& reason) {
  const Job* job = current.FindJob(job_id);
  if (job == nullptr) return NotFoundError(JobName(job_id) + " does not exist on this switch");
  if (job->state == JobState::kEnded) {
    return FailedPreconditionError(JobName(job_id) + " has already ended: " + job->end_reason);
  }
  auto next = std::make_shared<JobTable>(current);
  Job& j = const_cast<Job&>(*next->FindJob(job_id));
  j.state = JobState::kEnded;
  j.end_reason = reason;
  j.final_counters = j.runtime->Counters();
  j.runtime.reset();  // the aggregator goes once no snapshot refers to it
  // Forget the oldest ended jobs beyond the limit (ids grow with age).
  size_t ended = 0;
  for (const Job& x : next->jobs()) ended += x.state == JobState::kEnded;
  while (ended > kMaxEndedJobs) {
    auto oldest = next->jobs_.end();
    for (auto it = next->jobs_.begin() + 1; it != next->jobs_.end(); ++it) {
      if (it->state == JobState::kEnded &&
          (oldest == next->jobs_.end() || it->job_id < oldest->job_id)) {
        oldest = it;
      }
    }
    next->jobs_.erase(oldest);
    --ended;
  }
  next->Rebuild();
  return std::shared_ptr<const JobTable>(std::move(next));
}

std::shared_ptr<const JobTable> JobTable::ExpireIdle(const JobTable& current, TimePoint now,
                                                     std::vector<uint32_t>* expired) {
  std::shared_ptr<const JobTable> table;
  const JobTable* cur = &current;
  // When each rank was last heard from (Describe: workers[].idle_for). A rank not seen by a
  // sweep yet counts from this one (job 0's session registrations carry no time).
  auto track_ranks = [now](const Job& j) {
    JobRuntime::Activity& a = j.runtime->activity;
    for (uint32_t r = 0; r < a.ranks.size(); ++r) {
      const uint64_t rank_rx = j.runtime->RankReceived(r);
      if (rank_rx != a.ranks[r].seen || a.ranks[r].last_active == TimePoint{}) a.ranks[r] = {rank_rx, now};
    }
  };
  // Job 0 never expires, but its ranks' idle times are reported like any job's.
  if (current.reference().runtime) track_ranks(current.reference());
  for (const Job& j : current.jobs()) {
    if (j.state == JobState::kEnded) continue;
    JobRuntime::Activity& a = j.runtime->activity;
    track_ranks(j);
    const uint64_t rx = j.runtime->Received();
    if (rx != a.seen) {
      a.seen = rx;
      a.last_active = now;
      continue;
    }
    const auto timeout = j.spec.idle_timeout;
    if (timeout.count() == 0 || now - a.last_active <= timeout) continue;
    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - a.last_active);
    std::string reason = "torn down by the switch: no datagram from any of its workers for " +
                         Str(uint64_t(idle.count())) + " ms (idle_timeout " +
                         Str(uint64_t(timeout.count())) + " ms)";
    if (j.num_registered < j.spec.num_workers) {
      reason += "; only " + Str(j.num_registered) + " of " + Str(j.spec.num_workers) +
                " ranks had registered";
    }
    StatusOr<std::shared_ptr<const JobTable>> next = End(*cur, j.job_id, reason);
    if (!next.ok()) continue;  // cannot happen: the job is live
    table = std::move(*next);
    cur = table.get();
    expired->push_back(j.job_id);
  }
  return table;
}

JobInfo JobTable::Describe(const Job& job, TimePoint now) const {
  JobInfo info;
  info.job_id = job.job_id;
  info.spec = job.spec;
  info.spec.token.clear();
  info.assignment = job.assignment;
  info.state = job.state;
  info.slot_base = job.slot_base;
  info.held_slots = job.held;
  info.num_registered = job.num_registered;
  info.end_reason = job.end_reason;
  for (uint32_t r = 0; r < job.workers.size(); ++r) {
    const WorkerEntry& w = job.workers[r];
    if (!w.registered) continue;
    JobWorkerInfo wi;
    wi.rank = r;
    wi.ipv4 = w.ipv4;
    wi.udp_ports = w.udp_ports;
    if (job.runtime) {
      wi.received = job.runtime->RankReceived(r);
      const auto& ra = job.runtime->activity.ranks;
      if (r < ra.size() && wi.received == ra[r].seen && now > ra[r].last_active) {
        wi.idle_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - ra[r].last_active);
      }
    }
    info.workers.push_back(std::move(wi));
  }
  if (job.runtime) {
    info.counters = job.runtime->Counters();
    const JobRuntime::Activity& a = job.runtime->activity;
    if (info.counters.received == a.seen && now > a.last_active) {
      info.idle_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - a.last_active);
    }
  } else {
    info.counters = job.final_counters;
  }
  return info;
}

JobList JobTable::List(TimePoint now) const {
  JobList list;
  for (const Job& j : jobs()) list.jobs.push_back(Describe(j, now));
  list.reference_session = Describe(reference(), now);
  list.pool_slots = pool_slots_;
  list.free_slots = free_slots();
  list.largest_free_range = largest_free_range();
  return list;
}

void JobTable::Rebuild() {
  // Service jobs: live ones first (by id), then ended ones (newest first): a live
  // registration always wins an address over an ended job's tombstone. Job 0 stays at [0]
  // but is indexed last, so that a service job's address wins over it (see the header).
  std::stable_sort(jobs_.begin() + 1, jobs_.end(), [](const Job& a, const Job& b) {
    const bool ea = a.state == JobState::kEnded, eb = b.state == JobState::kEnded;
    if (ea != eb) return !ea;
    return ea ? a.job_id > b.job_id : a.job_id < b.job_id;
  });
  size_t entries = 0;
  max_job_workers_ = 0;
  for (Job& j : jobs_) ApplyLayout(j);
  for (const Job& j : jobs_) {
    for (const WorkerEntry& w : j.workers) {
      if (w.registered) entries += std::max<size_t>(1, w.udp_ports.size());
    }
    if (j.uplink().enabled()) entries += j.uplink().parent_ports.size();
    if (j.state != JobState::kEnded) {
      max_job_workers_ = std::max(max_job_workers_, j.spec.num_workers);
    }
  }
  // At most half full: short probe sequences; at 256 x 64 ports this is 32768 x 24 B.
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, 2 * entries));
  index_.assign(capacity, Entry{});
  index_shift_ = uint32_t(64 - std::countr_zero(capacity));
  has_host_keys_ = false;
  // Parents first: a leaf job's parent endpoint is never a worker's (Create and Admit refuse
  // that), and indexing it first keeps it the parent's whatever happens.
  for (uint32_t ji = 1; ji < jobs_.size(); ++ji) {
    const Job& j = jobs_[ji];
    if (j.state == JobState::kEnded || !j.uplink().enabled()) continue;
    for (uint16_t port : j.uplink().parent_ports) {
      Insert(PortKey(j.uplink().parent_ipv4, port), ji, kParentRank, 0);
    }
  }
  for (size_t n = 1; n <= jobs_.size(); ++n) {
    const uint32_t ji = uint32_t(n % jobs_.size());  // 1, 2, ..., then 0
    const Job& j = jobs_[ji];
    for (uint32_t r = 0; r < j.workers.size(); ++r) {
      const WorkerEntry& w = j.workers[r];
      if (!w.registered) continue;
      if (w.udp_ports.empty()) {
        Insert(HostKey(w.ipv4), ji, r, kNoThread);
        has_host_keys_ = true;
      }
      for (size_t t = 0; t < w.udp_ports.size(); ++t) {
        Insert(PortKey(w.ipv4, w.udp_ports[t]), ji, r, uint16_t(t));
      }
    }
  }
}

void JobTable::ApplyLayout(Job& job) const {
  // Registration checked that the agreed parameters make a layout (LayoutOf); a job nobody
  // registered into yet gets the whole-job layout, and every slot it holds at I/O thread 0.
  StatusOr<control::JobLayout> l = control::JobLayout::Whole(job.spec.num_slots);
  if (job.num_registered > 0) l = LayoutOf(job.spec, job.assignment, job.agreed, JobName(job.job_id));
  job.layout = l.ok() ? *l : control::JobLayout::Whole(job.spec.num_slots);
  const uint32_t shard = job.layout.num_shards() > 1 ? job.shard() : 0;
  job.io_threads = io_threads_;
  job.io_slot_begin.fill(job.held.end());
  for (uint32_t i = 0; i < job.io_threads; ++i) {
    job.io_slot_begin[i] = std::clamp(job.layout.IoSlots(shard, i, job.io_threads).first,
                                      job.held.first, job.held.end());
  }
}

void JobTable::Insert(uint64_t key, uint32_t job_index, uint32_t rank, uint16_t thread) {
  size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> index_shift_);
  while (index_[i].key != 0 && index_[i].key != key) i = (i + 1) & (index_.size() - 1);
  if (index_[i].key == key) return;  // taken by a row indexed earlier (see Rebuild)
  index_[i] = Entry{key, job_index, rank, thread};
}

}  // namespace switchml::dataplane
