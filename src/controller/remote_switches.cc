#include "controller/remote_switches.h"

#include <arpa/inet.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include "rendezvous/operator_auth.h"
#include "control/job_layout.h"

namespace switchml::controller {

using rendezvous::ConstantTimeEquals;
using rendezvous::kOperatorTokenHelp;
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

// The IPv4 (host order) of "a.b.c.d:port", or 0 if the host is not a dotted quad.
uint32_t HostIpv4(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1) return 0;
  return ntohl(a.s_addr);
}

// Whether a call's failure says the switch is down (it does not answer), rather than refusing
// the call.
bool Down(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

}  // namespace

StatusOr<std::unique_ptr<RemoteSwitches>> RemoteSwitches::Connect(
    const std::vector<std::string>& switch_addresses, std::chrono::milliseconds rpc_timeout,
    const std::string& operator_token, std::chrono::milliseconds health_interval, const TlsOptions& tls) {
  if (switch_addresses.empty()) {
    return InvalidArgumentError("a standalone controller needs at least one switch address");
  }
  if (switch_addresses.size() > kMaxSwitches) {
    return InvalidArgumentError("at most " + Str(kMaxSwitches) + " switches, got " +
                                Str(switch_addresses.size()));
  }
  if (operator_token.empty()) {
    return InvalidArgumentError(
        "a standalone controller needs the switches' operator credential to drive them: " +
        std::string(kOperatorTokenHelp));
  }
  std::unique_ptr<RemoteSwitches> r(new RemoteSwitches());
  HealthState initial;
  initial.since = std::chrono::steady_clock::now();
  r->health_.assign(switch_addresses.size(), initial);
  Status first_down;
  for (size_t i = 0; i < switch_addresses.size(); ++i) {
    Switch s;
    s.address = switch_addresses[i];
    // A switch that is down now is kept (and reported down): a controller restarted while one
    // of its switches is down must still serve the jobs on the others (and re-place the rest).
    auto jobs = JobClient::Connect(s.address, rpc_timeout, tls, /*require_connected=*/false);
    if (!jobs.ok()) return jobs.status().WithContext("switch " + Str(i));
    auto session = SessionClient::Connect(s.address, rpc_timeout, tls, /*require_connected=*/false);
    if (!session.ok()) return session.status().WithContext("switch " + Str(i));
    s.jobs = std::move(*jobs);
    s.session = std::move(*session);
    s.jobs->set_operator_token(operator_token);
    // A switch that is down must not stall calls for the others (ListJobs asks every switch)
    // nor hold an operator's call past its own deadline: fail fast, and let gRPC reconnect
    // in the background (within a second of the switch coming back, grpc_client.cc).
    s.jobs->set_wait_for_ready(false);
    s.session->set_wait_for_ready(false);
    // Fail now, naming the switch, rather than on every operator's call later.
    auto check = s.jobs->ListJobs();
    r->Note(i, check.status());
    if (!check.ok() && !Down(check.status())) {
      return check.status().WithContext("switch " + Str(i) + " (" + s.address +
                                        ") refuses this controller");
    }
    if (!check.ok() && first_down.ok()) {
      first_down = check.status().WithContext("switch " + Str(i) + " (" + s.address + ")");
    }
    r->switches_.push_back(std::move(s));
  }
  bool any_up = false;
  for (const HealthState& h : r->health_) any_up = any_up || h.up;
  if (!any_up) return first_down.WithContext("no switch reachable");
  r->Adopt();
  if (health_interval.count() > 0) {
    RemoteSwitches* self = r.get();
    r->health_thread_ = std::thread([self, health_interval] { self->HealthLoop(health_interval); });
  }
  return r;
}

RemoteSwitches::~RemoteSwitches() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (health_thread_.joinable()) health_thread_.join();
}

Status RemoteSwitches::SwitchError(const Switch& s, const Status& status) const {
  const size_t index = size_t(&s - switches_.data());
  return status.WithContext("switch " + Str(index) + " (" + s.address + ")");
}

StatusOr<std::pair<RemoteSwitches::Switch*, uint32_t>> RemoteSwitches::Route(
    uint32_t job_id) const {
  const uint32_t index = job_id >> kLocalIdBits;
  if (index >= switches_.size()) {
    return NotFoundError("job " + Str(job_id) + " does not exist (it names switch " + Str(index) +
                         " of " + Str(switches_.size()) + ")");
  }
  return std::make_pair(const_cast<Switch*>(&switches_[index]),
                        job_id & ((uint32_t{1} << kLocalIdBits) - 1));
}

StatusOr<JobWorkerGrant> RemoteSwitches::RegisterInReferenceSession(
    const JobRegistration& reg) {
  if (!reg.token.empty()) {
    return InvalidArgumentError("job 0 (the reference session) takes no token; got a token of " +
                                Str(reg.token.size()) + " characters");
  }
  StatusOr<SwitchInfo> reply = switches_[0].session->UdpSession(reg.worker);
  if (!reply.ok()) return SwitchError(switches_[0], reply.status());
  JobWorkerGrant grant;
  grant.switch_info = *reply;
  if (grant.switch_info.ipv4 == 0) grant.switch_info.ipv4 = HostIpv4(switches_[0].address);
  grant.job_id = control::kReferenceJobId;
  grant.num_workers = reg.worker.num_workers;
  grant.state = JobState::kRunning;
  return grant;
}

Status RemoteSwitches::CheckTokenUnused(const std::string& token) const {
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    if (!list.ok()) continue;  // unreachable: it gets no new job either
    for (const JobInfo& j : list->jobs) {
      if (j.state == JobState::kEnded) continue;
      // GetJob with a token answers OK only for the job that token opens.
      if (switches_[i].jobs->GetJob(j.job_id, token).ok()) {
        return AlreadyExistsError(
            "token: another live job already uses this token; choose another one (or leave "
            "it out to get a random one)");
      }
    }
  }
  return OkStatus();
}

StatusOr<JobInfo> RemoteSwitches::CreateJob(const JobSpec& spec) {
  // One create at a time, so that two creates with one token cannot both pass the check.
  std::lock_guard<std::mutex> lock(create_mu_);
  if (!spec.token.empty()) SWITCHML_RETURN_IF_ERROR(CheckTokenUnused(spec.token));
  return Place(spec);
}

Status RemoteSwitches::DeleteJob(uint32_t job_id, const std::string& token) {
  if (std::shared_ptr<Job> job = Find(job_id)) {
    SWITCHML_RETURN_IF_ERROR(CheckAccess(*job, token));
    End(*job, "deleted through the controller");
    return OkStatus();
  }
  SWITCHML_ASSIGN_OR_RETURN(auto route, Route(job_id));
  const Status s = route.first->jobs->DeleteJob(route.second, token);
  return s.ok() ? s : SwitchError(*route.first, s);
}

StatusOr<JobWorkerGrant> RemoteSwitches::RegisterJobWorker(const JobRegistration& reg) {
  if (reg.job_id == control::kReferenceJobId) return RegisterInReferenceSession(reg);
  if (std::shared_ptr<Job> job = Find(reg.job_id)) {
    SWITCHML_RETURN_IF_ERROR(CheckAccess(*job, reg.token));
    uint32_t placement = 0;
    (void)ShardsOf(*job, &placement);
    StatusOr<JobWorkerGrant> grant = Register(*job, reg);
    if (grant.ok() || (grant.status().code() != StatusCode::kUnavailable &&
                       grant.status().code() != StatusCode::kNotFound)) {
      return grant;
    }
    // A shard lost under the registration: Describe re-places the job (or ends it); then the
    // registration goes into the new placement.
    const JobInfo info = Describe(*job);
    if (info.state == JobState::kEnded || info.assignment.placement == placement) return grant;
    SWITCHML_RETURN_IF_ERROR(CheckAccess(*job, reg.token));
    return Register(*job, reg);
  }
  SWITCHML_ASSIGN_OR_RETURN(auto route, Route(reg.job_id));
  JobRegistration local = reg;
  local.job_id = route.second;
  StatusOr<JobWorkerGrant> reply = route.first->jobs->RegisterWorker(local);
  if (!reply.ok()) return SwitchError(*route.first, reply.status());
  JobWorkerGrant grant = std::move(*reply);
  grant.job_id = reg.job_id;
  // A switch listening on every interface reports 0.0.0.0; workers must not read that as
  // "where the controller is" (we are not on the switch's host): use the switch's address.
  if (grant.switch_info.ipv4 == 0) grant.switch_info.ipv4 = HostIpv4(route.first->address);
  return grant;
}

StatusOr<JobInfo> RemoteSwitches::GetJob(uint32_t job_id) const {
  if (std::shared_ptr<Job> job = Find(job_id)) return Describe(*job);
  SWITCHML_ASSIGN_OR_RETURN(auto route, Route(job_id));
  StatusOr<JobInfo> job = route.first->jobs->GetJob(route.second);
  if (!job.ok()) return SwitchError(*route.first, job.status());
  job->job_id = job_id;
  return job;
}

JobList RemoteSwitches::ListJobs() const {
  JobList all;
  // A job of this controller is listed once, merged (Describe), in place of its shard 0.
  std::map<uint32_t, std::shared_ptr<Job>> jobs;
  std::map<std::pair<size_t, uint32_t>, uint32_t> shard_of;  // (switch, local id) -> job id
  std::map<uint32_t, std::pair<size_t, uint32_t>> shard0;    // job id -> its shard 0
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs = jobs_;
    for (const auto& [id, job] : jobs) {
      for (const auto& shard : job->shards) shard_of[shard] = id;
      shard0[id] = job->shards[0];
    }
  }
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    Note(i, list.status());
    if (!list.ok()) continue;
    for (JobInfo& j : list->jobs) {
      const auto it = shard_of.find({i, j.job_id});
      if (it == shard_of.end()) {
        j.job_id = GlobalId(i, j.job_id);
        all.jobs.push_back(std::move(j));
        continue;
      }
      Job& job = *jobs.at(it->second);
      if (shard0.at(it->second) == std::make_pair(i, j.job_id)) all.jobs.push_back(Describe(job));
    }
    all.pool_slots += list->pool_slots;
    all.free_slots += list->free_slots;
    all.largest_free_range = std::max(all.largest_free_range, list->largest_free_range);
  }
  all.switches = Health();
  return all;
}

StatusOr<std::vector<SlotInfo>> RemoteSwitches::InspectSlots(uint32_t job_id,
                                                             uint32_t first_slot,
                                                             uint32_t count) const {
  if (std::shared_ptr<Job> job = Find(job_id)) {
    // Each shard holds its own share of the job's slots (control::JobLayout::ShardSlots) and
    // answers only for those: the shards' answers, in shard order, are the slots asked for.
    std::vector<SlotInfo> merged;
    const Shards shards = ShardsOf(*job);
    for (size_t shard = 0; shard < shards.size(); ++shard) {
      const auto& [index, local_id] = shards[shard];
      auto slots = switches_[index].jobs->InspectSlots(local_id, first_slot, count);
      if (!slots.ok()) return slots.status().WithContext(PartName(*job, shards, shard));
      merged.insert(merged.end(), slots->begin(), slots->end());
    }
    return merged;
  }
  Switch* sw = &const_cast<Switch&>(switches_[0]);
  uint32_t local_id = 0;
  if (job_id != 0) {
    SWITCHML_ASSIGN_OR_RETURN(auto route, Route(job_id));
    sw = route.first;
    local_id = route.second;
  }
  auto slots = sw->jobs->InspectSlots(local_id, first_slot, count);
  if (!slots.ok()) return SwitchError(*sw, slots.status());
  return slots;
}

std::vector<std::pair<std::string, uint64_t>> RemoteSwitches::CounterValues() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < switches_.size(); ++i) {
    std::vector<std::pair<std::string, uint64_t>> counters;
    const Status st = switches_[i].jobs->ListJobs(&counters).status();
    Note(i, st);
    const bool reachable = st.ok();
    out.emplace_back("switch" + Str(i) + ".reachable", reachable ? 1 : 0);
    for (auto& [name, value] : counters) out.emplace_back("switch" + Str(i) + "." + name, value);
  }
  return out;
}

Status RemoteSwitches::CheckJobAccess(uint32_t job_id, const std::string& token) const {
  if (std::shared_ptr<Job> job = Find(job_id)) return CheckAccess(*job, token);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    for (const AccessCache& c : access_cache_) {
      if (c.job_id == job_id && ConstantTimeEquals(c.token, token) && c.until > now) {
        return OkStatus();
      }
    }
  }
  SWITCHML_ASSIGN_OR_RETURN(auto route, Route(job_id));
  StatusOr<JobInfo> job = route.first->jobs->GetJob(route.second, token);
  if (!job.ok()) return SwitchError(*route.first, job.status());
  std::lock_guard<std::mutex> lock(cache_mu_);
  std::erase_if(access_cache_, [&](const AccessCache& c) { return c.until <= now; });
  if (access_cache_.size() < kMaxAccessCache) {
    access_cache_.push_back({job_id, token, now + kAccessCacheFor});
  }
  return OkStatus();
}

// ---- The jobs of this controller: K >= 1 shards ----

std::vector<std::pair<uint32_t, size_t>> RemoteSwitches::ByFreeRange(Status* first_error) const {
  std::vector<std::pair<uint32_t, size_t>> out;
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    Note(i, list.status());
    if (!list.ok()) {
      if (first_error->ok()) *first_error = SwitchError(switches_[i], list.status());
      continue;
    }
    out.push_back({list->largest_free_range, i});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::shared_ptr<RemoteSwitches::Job> RemoteSwitches::Find(uint32_t job_id) const {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  const auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::string RemoteSwitches::ShardName(const Shards& shards, size_t shard) const {
  const size_t index = shards[shard].first;
  return "shard " + Str(shard) + " of " + Str(shards.size()) + " (switch " + Str(index) +
         " at " + switches_[index].address + ")";
}

std::string RemoteSwitches::PartName(const Job& job, const Shards& shards, size_t part) const {
  if (!job.two_level()) return ShardName(shards, part);
  const size_t index = shards[part].first;
  const std::string where = "(switch " + Str(index) + " at " + switches_[index].address + ")";
  const size_t k = job.per_level();
  const std::string shard =
      k > 1 ? "shard " + Str(part % k) + " of " + Str(k) + " " : std::string();
  if (job.IsParentPart(part)) return (k > 1 ? "the parent's " + shard : "the parent ") + where;
  return "leaf " + Str(part / k) + (k > 1 ? " " + shard : " ") + where;
}

RemoteSwitches::Shards RemoteSwitches::ShardsOf(const Job& job, uint32_t* placement) const {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  if (placement != nullptr) *placement = job.placement;
  return job.shards;
}

namespace {

// An ended job's access error: UNAVAILABLE when a lost switch ended it (the switch path is
// down: a worker's timeout says so, control::FailureExplanation), FAILED_PRECONDITION when a
// decision did (deleted).
Status Ended(uint32_t job_id, const std::string& reason, bool switch_lost) {
  const std::string why = "job " + Str(job_id) + " has ended: " + reason;
  return switch_lost ? UnavailableError(why) : FailedPreconditionError(why);
}

}  // namespace

Status RemoteSwitches::CheckAccess(Job& job, const std::string& token) const {
  std::string known;
  bool probe = false;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    if (!job.end_reason.empty()) {
      // A job ended by a lost switch is UNAVAILABLE (the switch path is down: a worker's
      // timeout says so, control::FailureExplanation); one ended by a decision (deleted) is
      // FAILED_PRECONDITION.
      return Ended(job.job_id, job.end_reason, job.switch_lost);
    }
    known = job.token;
    probe = job.live_until <= std::chrono::steady_clock::now();
  }
  if (!known.empty()) {
    if (!ConstantTimeEquals(token, known)) {
      return PermissionDeniedError("wrong token for job " + Str(job.job_id));
    }
  } else {
    // Found again after a restart: shard 0 checks the token (every shard has the same one).
    const Shards shards = ShardsOf(job);
    const auto& [index, local_id] = shards[0];
    StatusOr<JobInfo> info = switches_[index].jobs->GetJob(local_id, token);
    if (!info.ok()) return info.status().WithContext(PartName(job, shards, 0));
    std::lock_guard<std::mutex> lock(jobs_mu_);
    job.token = token;
  }
  if (!probe) return OkStatus();
  // Whether every shard still serves the job (a switch may have ended it: idle timeout, a
  // restart): Describe ends the job if not. At most every kAccessCacheFor, since blocked job
  // barriers poll this every 10 ms.
  const JobInfo info = Describe(job);
  if (info.state == JobState::kEnded) return Ended(job.job_id, info.end_reason, info.switch_lost);
  std::lock_guard<std::mutex> lock(jobs_mu_);
  job.live_until = std::chrono::steady_clock::now() + kAccessCacheFor;
  return OkStatus();
}

void RemoteSwitches::Adopt() {
  // Per shard group, the shards of its newest placement (a switch that was cut off during a
  // re-placement may still hold shards of an older one).
  struct Group {
    uint32_t placement = 0;
    Shards shards;
    bool broken = false;
    JobInfo first;  // shard 0's record: the spec to re-create the job with
    uint32_t job_id = 0;
  };
  std::map<uint64_t, Group> groups;
  constexpr auto kMissing = std::make_pair(SIZE_MAX, uint32_t{0});
  std::vector<std::optional<JobList>> lists(switches_.size());
  // The groups of two-level jobs (a leaf's assignment has an uplink): their parts, found
  // again by AdoptTwoLevel.
  std::map<uint64_t, std::vector<std::pair<size_t, JobInfo>>> two_level;
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    if (!list.ok()) continue;
    lists[i] = std::move(*list);
    for (const JobInfo& j : lists[i]->jobs) {
      if (j.state != JobState::kEnded && j.assignment.shard_group != 0 &&
          j.assignment.uplink.enabled()) {
        two_level[j.assignment.shard_group];
      }
    }
  }
  for (size_t i = 0; i < switches_.size(); ++i) {
    if (!lists[i]) continue;
    for (const JobInfo& j : lists[i]->jobs) {
      const control::ShardAssignment& a = j.assignment;
      if (j.state == JobState::kEnded || a.shard_group == 0 || a.num_shards < 1) continue;
      if (const auto t = two_level.find(a.shard_group); t != two_level.end()) {
        t->second.push_back({i, j});
        continue;
      }
      Group& g = groups[a.shard_group];
      const uint32_t placement = std::max<uint32_t>(1, a.placement);
      if (placement < g.placement) continue;  // stale: a newer placement exists
      if (placement > g.placement) {
        g = Group{};
        g.placement = placement;
      }
      if (g.shards.empty()) g.shards.assign(a.num_shards, kMissing);
      if (g.shards.size() != a.num_shards || a.shard >= g.shards.size() ||
          g.shards[a.shard] != kMissing) {
        g.broken = true;  // inconsistent: leave it alone
        continue;
      }
      g.shards[a.shard] = {i, j.job_id};
      if (a.shard == 0) {
        g.first = j;
        g.job_id = a.job_id;
      }
    }
  }
  std::unique_lock<std::mutex> lock(jobs_mu_);
  for (const auto& [group, g] : groups) {
    if (g.broken || std::find(g.shards.begin(), g.shards.end(), kMissing) != g.shards.end()) {
      continue;
    }
    auto job = std::make_shared<Job>();
    job->shards = g.shards;
    job->shard_group = group;
    job->placement = g.placement;
    job->job_id = g.job_id != 0 ? g.job_id : GlobalId(g.shards[0].first, g.shards[0].second);
    job->spec = g.first.spec;
    job->spec.switches = uint32_t(g.shards.size());
    // As listed, 0 is "never": what the switches must be sent for it.
    if (job->spec.idle_timeout.count() == 0) job->spec.idle_timeout = JobClient::kNoIdleTimeout;
    jobs_[job->job_id] = job;
  }
  lock.unlock();  // AdoptTwoLevel takes it
  for (const auto& [group, parts] : two_level) AdoptTwoLevel(group, parts);
}

void RemoteSwitches::AdoptTwoLevel(uint64_t group,
                                   const std::vector<std::pair<size_t, JobInfo>>& parts) {
  // The parent's K shards (no uplink) and every rack's K leaf shards (rack = the uplink's
  // leaf), all of the group's newest placement; anything else is left alone (usable per
  // switch, statelessly).
  uint32_t placement = 0;
  for (const auto& [i, j] : parts) placement = std::max(placement, std::max<uint32_t>(1, j.assignment.placement));
  using Part = std::optional<std::pair<size_t, JobInfo>>;
  uint32_t k = 0;
  std::vector<Part> parents;
  for (const auto& part : parts) {
    const control::ShardAssignment& a = part.second.assignment;
    if (std::max<uint32_t>(1, a.placement) != placement) continue;
    if (k == 0) {
      k = std::max<uint32_t>(1, a.num_shards);
      parents.resize(k);
    }
    if (std::max<uint32_t>(1, a.num_shards) != k || a.shard >= k) return;  // inconsistent
    if (a.uplink.enabled()) continue;
    if (parents[a.shard]) return;  // two parents
    parents[a.shard] = part;
  }
  if (k == 0) return;
  for (const Part& p : parents) {
    if (!p) return;  // a parent shard is missing
  }
  const uint32_t num_leaves = parents[0]->second.spec.num_workers;
  std::vector<Part> leaves(size_t{num_leaves} * k);
  for (const auto& part : parts) {
    const control::ShardAssignment& a = part.second.assignment;
    if (std::max<uint32_t>(1, a.placement) != placement || !a.uplink.enabled()) continue;
    const size_t at = size_t{a.uplink.leaf} * k + a.shard;
    if (a.uplink.leaf >= num_leaves || leaves[at] ||
        a.uplink.parent_job_id != parents[a.shard]->second.job_id) {
      return;
    }
    leaves[at] = part;
  }
  auto job = std::make_shared<Job>();
  uint32_t total = 0;
  for (const Part& leaf : leaves) {
    if (!leaf) return;  // a leaf shard is missing
    job->shards.push_back({leaf->first, leaf->second.job_id});
  }
  for (uint32_t r = 0; r < num_leaves; ++r) {
    JobSpec::Rack rack{.switches = {}, .workers = leaves[size_t{r} * k]->second.spec.num_workers};
    for (uint32_t s = 0; s < k; ++s) rack.switches.push_back(uint32_t(leaves[size_t{r} * k + s]->first));
    total += rack.workers;
    job->spec.racks.push_back(std::move(rack));
  }
  if (total != leaves[0]->second.assignment.uplink.total_workers) return;
  for (const Part& p : parents) {
    job->shards.push_back({p->first, p->second.job_id});
    job->spec.parent_switches.push_back(uint32_t(p->first));
  }
  const JobSpec placed = job->spec;
  job->spec = leaves[0]->second.spec;
  job->spec.racks = placed.racks;
  job->spec.parent_switches = placed.parent_switches;
  job->spec.num_workers = total;
  job->spec.switches = k;
  if (job->spec.idle_timeout.count() == 0) job->spec.idle_timeout = JobClient::kNoIdleTimeout;
  job->shard_group = group;
  job->placement = placement;
  const uint32_t id = leaves[0]->second.assignment.job_id;
  job->job_id = id != 0 ? id : GlobalId(parents[0]->first, parents[0]->second.job_id);
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_[job->job_id] = job;
}

StatusOr<RemoteSwitches::Shards> RemoteSwitches::CreateShards(const JobSpec& spec,
                                                              const std::string& token,
                                                              uint64_t group, uint32_t placement,
                                                              uint32_t job_id,
                                                              JobInfo* first) const {
  const uint32_t k = spec.switches;
  // The K reachable switches with the largest free ranges (ties: the first), each of which
  // must hold its shard's share of the job's slots (control::JobLayout::ShardSlots; shard 0's
  // is the largest). An unreachable switch gets no new jobs.
  const uint32_t share = control::JobLayout::ShardSlots(spec.num_slots, 0, k).count;
  Status first_error;
  std::vector<std::pair<uint32_t, size_t>> candidates = ByFreeRange(&first_error);
  if (candidates.empty()) {
    return first_error.WithContext("no switch reachable (" + Str(switches_.size()) +
                                   " configured)");
  }
  std::erase_if(candidates, [&](const auto& c) { return c.first < share; });
  if (candidates.size() < k) {
    const std::string msg =
        "switches=" + Str(k) + ": only " + Str(candidates.size()) + " of the " +
        Str(switches_.size()) + " switches are reachable with " + Str(share) +
        " free slots in one range (" +
        (k == 1 ? std::string("the job's slots") : "a shard's share of " + Str(spec.num_slots)) +
        ")";
    if (!first_error.ok()) return first_error.WithContext(msg);
    return ResourceExhaustedError(msg + "; delete a job or ask for fewer slots or switches");
  }
  JobSpec remote = spec;
  remote.token = token;
  control::ShardAssignment assignment{
      .num_shards = k, .shard_group = group, .placement = placement, .job_id = job_id};
  Shards shards;
  for (uint32_t shard = 0; shard < k; ++shard) {
    const size_t index = candidates[shard].second;
    assignment.shard = shard;
    StatusOr<JobInfo> created = switches_[index].jobs->CreateJobShard(remote, assignment);
    Status error = created.ok() ? OkStatus() : SwitchError(switches_[index], created.status());
    if (error.ok() && created->job_id >> kLocalIdBits) {
      error = InternalError("switch " + Str(index) + " returned job id " + Str(created->job_id) +
                            " >= 2^24, which this controller cannot route");
    }
    if (!error.ok()) {
      for (const auto& [i, local] : shards) (void)switches_[i].jobs->DeleteJob(local, token);
      return k == 1 ? error : error.WithContext("creating shard " + Str(shard) + " of " + Str(k));
    }
    shards.push_back({index, created->job_id});
    if (shard == 0 && first != nullptr) *first = std::move(*created);
  }
  return shards;
}

StatusOr<JobInfo> RemoteSwitches::Place(const JobSpec& spec) {
  if (!spec.racks.empty()) return PlaceTwoLevel(spec);
  if (!spec.parent_switches.empty()) {
    return InvalidArgumentError("parent_switches (--parent) " + Str(spec.parent_switches[0]) +
                                " needs racks (--leaf): only a two-level job has a parent");
  }
  const uint32_t k = spec.switches;
  // (num_slots 0: the switch names that field.)
  const uint32_t max_k = spec.num_slots == 0
                             ? control::JobLayout::kMaxShards
                             : std::min(control::JobLayout::kMaxShards, spec.num_slots);
  if (k == 0 || k > max_k) {
    return InvalidArgumentError("switches must be in [1, " + Str(max_k) +
                                "] (at most one per slot of the job), got " + Str(k));
  }
  if (k > switches_.size()) {
    return InvalidArgumentError("switches=" + Str(k) + " but this controller drives " +
                                Str(switches_.size()) + " switch(es) (--switch)");
  }
  auto job = std::make_shared<Job>();
  job->token = spec.token.empty() ? control::RandomToken() : spec.token;
  job->spec = spec;
  job->spec.token.clear();
  // Our JobService already applied its default: 0 here means "none"
  // (control/switch_control.h), which the switch's JobService must not read as "its default".
  if (job->spec.idle_timeout.count() == 0) job->spec.idle_timeout = JobClient::kNoIdleTimeout;
  do {
    job->shard_group = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  } while (job->shard_group == 0);
  JobInfo first;
  // The job's id is its shard 0's global id, unless a live job re-placed away from that id's
  // switch (which restarted and repeats its ids) still has it: then create again (new ids).
  for (int attempt = 0;; ++attempt) {
    StatusOr<Shards> shards =
        CreateShards(job->spec, job->token, job->shard_group, /*placement=*/1, 0, &first);
    if (!shards.ok()) return shards.status();
    const uint32_t id = GlobalId((*shards)[0].first, (*shards)[0].second);
    std::lock_guard<std::mutex> lock(jobs_mu_);
    const auto it = jobs_.find(id);
    if (it == jobs_.end() || !it->second->end_reason.empty() || attempt == 8) {
      if (it != jobs_.end() && it->second->end_reason.empty()) {
        for (const auto& [i, local] : *shards) (void)switches_[i].jobs->DeleteJob(local, job->token);
        return InternalError("job id " + Str(id) + " is still used by a re-placed job");
      }
      job->shards = std::move(*shards);
      job->job_id = id;
      jobs_[id] = job;
      break;
    }
    for (const auto& [i, local] : *shards) (void)switches_[i].jobs->DeleteJob(local, job->token);
  }
  first.job_id = job->job_id;
  first.assignment.shard = 0;
  first.assignment.placement = 1;
  first.held_slots = control::SlotRange{0, first.spec.num_slots};  // all shards together
  first.token = job->token;
  return first;
}

StatusOr<RemoteSwitches::DataAddress> RemoteSwitches::DataAddressOf(size_t i) const {
  StatusOr<JobList> list = switches_[i].jobs->ListJobs();
  Note(i, list.status());
  if (!list.ok()) return SwitchError(switches_[i], list.status());
  DataAddress a;
  a.ipv4 = list->data_ipv4 != 0 ? list->data_ipv4 : HostIpv4(switches_[i].address);
  a.port = list->data_udp_port;
  a.ports = list->data_udp_ports;
  if (a.ports.empty() && a.port != 0) a.ports = {a.port};  // a switch that lists one port
  a.largest_free_range = list->largest_free_range;
  if (a.port == 0) {
    return SwitchError(switches_[i], FailedPreconditionError(
                                         "it does not report its data address (a switch older "
                                         "than two-level jobs?)"));
  }
  if (a.ipv4 == 0) {
    return SwitchError(switches_[i],
                       FailedPreconditionError(
                           "it listens on every interface and its controller address is not an "
                           "IPv4 address: give --switch as IP:PORT, or bind the switch to its address "
                           "(switchml switch --bind)"));
  }
  return a;
}

StatusOr<JobInfo> RemoteSwitches::PlaceTwoLevel(const JobSpec& spec) {
  // The request, each error naming the field and the `switchml jobs create` flag.
  const std::vector<JobSpec::Rack>& racks = spec.racks;
  const size_t n = switches_.size();
  const uint32_t k = spec.switches;  // shards per level
  if (racks.size() < 2) {
    return InvalidArgumentError("racks (--leaf): a two-level job needs at least two racks, got " +
                                Str(racks.size()));
  }
  if (k == 0 || k > control::JobLayout::kMaxShards ||
      (spec.num_slots != 0 && k > spec.num_slots)) {
    return InvalidArgumentError("switches (shards per level) must be in [1, " +
                                Str(std::min<uint32_t>(control::JobLayout::kMaxShards,
                                                       spec.num_slots == 0 ? UINT32_MAX
                                                                           : spec.num_slots)) +
                                "], got " + Str(k));
  }
  // Every switch the request names, and where: each serves one part of one level.
  std::map<uint32_t, std::string> named;
  auto name = [&](uint32_t i, const std::string& what) -> Status {
    if (i >= n) {
      return InvalidArgumentError(what + ": switch " + Str(i) +
                                  " is out of range: this controller drives " + Str(n) +
                                  " switch(es) (--switch), indices from 0");
    }
    const auto [it, fresh] = named.emplace(i, what);
    if (fresh) return OkStatus();
    return InvalidArgumentError(what + ": switch " + Str(i) + " is also " + it->second +
                                " (a switch serves one rack's shard or one of the parent's)");
  };
  uint64_t total = 0;
  for (size_t r = 0; r < racks.size(); ++r) {
    std::string list;
    for (uint32_t i : racks[r].switches) list += (list.empty() ? "" : ",") + Str(i);
    const std::string what = "racks[" + Str(r) + "] (--leaf " + list + ":" +
                             Str(racks[r].workers) + ")";
    if (racks[r].switches.size() != k) {
      return InvalidArgumentError(what + " names " + Str(racks[r].switches.size()) +
                                  " switch(es) but the job has " + Str(k) +
                                  " shard(s) per level (switches): one switch per shard");
    }
    if (racks[r].workers == 0) return InvalidArgumentError(what + ": a rack needs >= 1 worker");
    for (uint32_t i : racks[r].switches) SWITCHML_RETURN_IF_ERROR(name(i, what));
    total += racks[r].workers;
  }
  if (total != spec.num_workers) {
    return InvalidArgumentError("racks (--leaf): the racks' workers sum to " + Str(total) +
                                " but num_workers (--workers) is " + Str(spec.num_workers));
  }
  if (!spec.parent_switches.empty() && spec.parent_switches.size() != k) {
    return InvalidArgumentError("parent_switches (--parent) names " +
                                Str(spec.parent_switches.size()) + " switch(es) but the job has " +
                                Str(k) + " shard(s) per level (switches)");
  }
  for (uint32_t p : spec.parent_switches) {
    const Status s = name(p, "parent_switches (--parent) " + Str(p));
    if (!s.ok() && p < n) {
      return InvalidArgumentError("parent_switches (--parent) " + Str(p) + " is also " +
                                  named.at(p) + "; the parent must be other switches");
    }
    SWITCHML_RETURN_IF_ERROR(s);
  }
  // Every leaf: reachable, room for the job's slots (each shard its share).
  auto room = [&](size_t i, uint32_t shard, const std::string& what) -> StatusOr<DataAddress> {
    StatusOr<DataAddress> a = DataAddressOf(i);
    if (!a.ok()) return a.status().WithContext(what);
    const uint32_t needs = control::JobLayout::ShardSlots(spec.num_slots, shard, k).count;
    if (a->largest_free_range < needs) {
      return ResourceExhaustedError(what + " (switch " + Str(i) + " at " + switches_[i].address +
                                    ") has " + Str(a->largest_free_range) +
                                    " free slots in one range, its shard needs " + Str(needs));
    }
    return a;
  };
  for (size_t r = 0; r < racks.size(); ++r) {
    for (uint32_t s = 0; s < k; ++s) {
      SWITCHML_RETURN_IF_ERROR(
          room(racks[r].switches[s], s, "leaf " + Str(r) + (k > 1 ? " shard " + Str(s) : "") +
                                            " (--leaf)")
              .status());
    }
  }
  // The parent's shards: those asked for, or the reachable non-leaf switches with the largest
  // free ranges (ties: the first index), one per shard.
  std::vector<size_t> parent(k);
  std::vector<DataAddress> parent_at(k);
  if (!spec.parent_switches.empty()) {
    for (uint32_t s = 0; s < k; ++s) {
      parent[s] = spec.parent_switches[s];
      SWITCHML_ASSIGN_OR_RETURN(parent_at[s],
                                room(parent[s], s, std::string("the parent") +
                                                       (k > 1 ? " shard " + Str(s) : "") +
                                                       " (--parent)"));
    }
  } else {
    Status first_error;
    uint32_t found = 0;
    for (const auto& [free, i] : ByFreeRange(&first_error)) {
      if (found == k) break;
      if (named.count(uint32_t(i)) ||
          free < control::JobLayout::ShardSlots(spec.num_slots, found, k).count) {
        continue;
      }
      StatusOr<DataAddress> a = DataAddressOf(i);
      if (!a.ok()) {
        if (first_error.ok()) first_error = a.status();
        continue;
      }
      parent[found] = i;
      parent_at[found] = *a;
      ++found;
    }
    if (found < k) {
      const std::string msg = "no switch for the parent (--parent): " + Str(found) + " of the " +
                              Str(n) + " switches that are not leaves are reachable with room "
                              "for a shard; the parent needs " + Str(k);
      if (!first_error.ok()) return first_error.WithContext(msg);
      return ResourceExhaustedError(msg + "; add a switch (--switch) or free one");
    }
  }

  auto job = std::make_shared<Job>();
  job->token = spec.token.empty() ? control::RandomToken() : spec.token;
  job->spec = spec;
  job->spec.token.clear();
  job->spec.parent_switches.assign(parent.begin(), parent.end());
  if (job->spec.idle_timeout.count() == 0) job->spec.idle_timeout = JobClient::kNoIdleTimeout;
  do {
    job->shard_group = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  } while (job->shard_group == 0);
  // Each level's job: the spec without the racks, K shards.
  JobSpec part = job->spec;
  part.racks.clear();
  part.parent_switches.clear();
  part.switches = k;
  part.token = job->token;
  Shards created;
  auto undo = [&] {
    for (const auto& [i, local] : created) (void)switches_[i].jobs->DeleteJob(local, job->token);
  };
  auto assignment = [&](uint32_t s) {
    return control::ShardAssignment{.shard = s,
                                    .num_shards = k,
                                    .shard_group = job->shard_group,
                                    .placement = 1};
  };
  // The parent first: an ordinary job of one "worker" per leaf, in the job's group. The job's
  // id is the parent's (shard 0's) global id (unless a live re-placed job still has that id:
  // then again).
  JobSpec parent_spec = part;
  parent_spec.num_workers = uint32_t(racks.size());
  std::vector<uint32_t> parent_local(k);
  for (int attempt = 0;; ++attempt) {
    Shards parents;
    Status error;
    for (uint32_t s = 0; s < k && error.ok(); ++s) {
      StatusOr<JobInfo> p = switches_[parent[s]].jobs->CreateJobShard(parent_spec, assignment(s));
      if (!p.ok()) {
        error = SwitchError(switches_[parent[s]], p.status())
                    .WithContext(std::string("the parent") + (k > 1 ? " shard " + Str(s) : ""));
        break;
      }
      parents.push_back({parent[s], p->job_id});
      if (p->job_id >> kLocalIdBits) {
        error = InternalError("switch " + Str(parent[s]) + " returned job id " + Str(p->job_id) +
                              " >= 2^24, which this controller cannot route");
      }
    }
    auto drop = [&] {
      for (const auto& [i, local] : parents) (void)switches_[i].jobs->DeleteJob(local, job->token);
    };
    if (!error.ok()) {
      drop();
      return error;
    }
    const uint32_t id = GlobalId(parent[0], parents[0].second);
    {
      std::lock_guard<std::mutex> lock(jobs_mu_);
      const auto it = jobs_.find(id);
      if (it == jobs_.end() || !it->second->end_reason.empty()) {
        for (uint32_t s = 0; s < k; ++s) parent_local[s] = parents[s].second;
        job->job_id = id;
        break;
      }
    }
    drop();
    if (attempt == 8) return InternalError("job id " + Str(id) + " is still used by a re-placed job");
  }
  // Each rack's leaf shards: jobs of the rack's workers whose completed rounds go up to the
  // parent's shard of the same index.
  for (size_t r = 0; r < racks.size(); ++r) {
    JobSpec leaf_spec = part;
    leaf_spec.num_workers = racks[r].workers;
    for (uint32_t s = 0; s < k; ++s) {
      const size_t i = racks[r].switches[s];
      control::ShardAssignment a = assignment(s);
      a.job_id = job->job_id;
      a.uplink = {.parent_ipv4 = parent_at[s].ipv4,
                  .parent_ports = parent_at[s].ports,
                  .parent_job_id = parent_local[s],
                  .leaf = uint32_t(r),
                  .total_workers = spec.num_workers};
      StatusOr<JobInfo> leaf = switches_[i].jobs->CreateJobShard(leaf_spec, a);
      Status error = leaf.ok() ? OkStatus() : SwitchError(switches_[i], leaf.status());
      if (error.ok() && leaf->job_id >> kLocalIdBits) {
        created.push_back({i, leaf->job_id});
        error = InternalError("switch " + Str(i) + " returned job id " + Str(leaf->job_id) +
                              " >= 2^24, which this controller cannot route");
      }
      if (!error.ok()) {
        for (uint32_t p = 0; p < k; ++p) created.push_back({parent[p], parent_local[p]});
        undo();
        return error.WithContext("creating leaf " + Str(r) + (k > 1 ? " shard " + Str(s) : ""));
      }
      created.push_back({i, leaf->job_id});
    }
  }
  for (uint32_t s = 0; s < k; ++s) created.push_back({parent[s], parent_local[s]});
  // Each leaf registers at the parent when its rack's first worker registers (Register): the
  // leaf and the parent serve the job with the workers' layout, known only then.
  job->shards = created;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_[job->job_id] = job;
  }
  JobInfo info = Describe(*job);
  info.token = job->token;
  return info;
}

StatusOr<JobWorkerGrant> RemoteSwitches::Register(Job& job, const JobRegistration& reg) {
  std::lock_guard<std::mutex> lock(job.register_mu);
  // Under the registration lock the placement cannot change (Replace takes it too): the
  // registration goes wholly into this one.
  uint32_t placement = 0;
  const Shards shards = ShardsOf(job, &placement);
  size_t k = shards.size();
  // Where the registration goes: every shard with the worker's own registration, or for a
  // two-level job only its rack's leaf, as the rack's local rank of the rack's workers (its
  // context keeps the global rank and count: quantization, descriptors, barriers).
  std::vector<JobRegistration> regs(k, reg);
  std::vector<size_t> parts(k);
  for (size_t i = 0; i < k; ++i) parts[i] = i;
  if (job.two_level()) {
    const uint32_t total = job.spec.num_workers;
    if (reg.worker.num_workers != 0 && reg.worker.num_workers != total) {
      return FailedPreconditionError("num_workers " + Str(reg.worker.num_workers) +
                                     " differs from job " + Str(job.job_id) + "'s " + Str(total) +
                                     " (all its racks' workers: a two-level job's workers "
                                     "register with the global rank and count)");
    }
    uint32_t first = 0;
    size_t rack = 0;
    while (rack < job.spec.racks.size() && reg.worker.rank >= first + job.spec.racks[rack].workers) {
      first += job.spec.racks[rack].workers;
      ++rack;
    }
    if (rack == job.spec.racks.size()) {
      return InvalidArgumentError("rank " + Str(reg.worker.rank) + " must be < num_workers " +
                                  Str(total) + " of job " + Str(job.job_id));
    }
    if (reg.worker.num_worker_threads == 0 || reg.worker.udp_ports.empty()) {
      return InvalidArgumentError("two-level job " + Str(job.job_id) + ": its workers must "
                                  "register their num_worker_threads, window_packets and a UDP "
                                  "port per worker thread (reference-mode workers cannot join "
                                  "it)");
    }
    // Every rack's workers must cut calls into the same slots as every other rack's: a rack
    // with other threads or another window would put other data in a slot, and the parent
    // would add it up with status OK. Each leaf sees its own rack only.
    if (job.first_worker) {
      const control::WorkerRegistration& f = *job.first_worker;
      const struct {
        const char* name;
        uint32_t first, now;
      } fields[] = {{"protocol_version", f.protocol_version, reg.worker.protocol_version},
                    {"num_worker_threads", f.num_worker_threads, reg.worker.num_worker_threads},
                    {"window_packets", f.window_packets, reg.worker.window_packets},
                    {"elements_per_packet", f.elements_per_packet, reg.worker.elements_per_packet}};
      std::string differ;
      for (const auto& x : fields) {
        if (x.first == x.now) continue;
        differ += (differ.empty() ? "" : ", ") + std::string(x.name) + "=" + Str(x.now) +
                  " (rank " + Str(f.rank) + ": " + Str(x.first) + ")";
      }
      if (!differ.empty()) {
        return FailedPreconditionError("rank " + Str(reg.worker.rank) + " registered " + differ +
                                       " for two-level job " + Str(job.job_id) +
                                       "; every worker of every rack must use the same value");
      }
    }
    JobRegistration local = reg;
    local.worker.rank = reg.worker.rank - first;
    local.worker.num_workers = job.spec.racks[rack].workers;
    k = job.per_level();
    regs.assign(k, local);
    for (size_t s = 0; s < k; ++s) parts[s] = job.LeafPart(rack, s);
    parts.resize(k);
  }
  if (k > 1 && reg.worker.udp_ports.empty()) {
    return InvalidArgumentError("job " + Str(job.job_id) + " is served by " + Str(k) +
                                " switches: its workers must register a UDP port per worker "
                                "thread (reference-mode workers cannot join it)");
  }
  std::vector<JobWorkerGrant> grants;
  for (size_t shard = 0; shard < k; ++shard) {
    const auto& [index, local_id] = shards[parts[shard]];
    JobRegistration local = regs[shard];
    local.job_id = local_id;
    StatusOr<JobWorkerGrant> reply = switches_[index].jobs->RegisterWorker(local);
    if (!reply.ok()) return reply.status().WithContext(PartName(job, shards, parts[shard]));
    // A switch listening on every interface reports 0.0.0.0; workers must not read that as
    // "where the controller is" (we are not on the switch's host): use the switch's address.
    if (reply->switch_info.ipv4 == 0) reply->switch_info.ipv4 = HostIpv4(switches_[index].address);
    grants.push_back(std::move(*reply));
  }
  if (job.two_level()) {
    const size_t rack = parts[0] / job.per_level();
    job.leaf_registered.resize(job.spec.racks.size());
    if (!job.leaf_registered[rack]) {
      for (size_t s = 0; s < k; ++s) {
        SWITCHML_RETURN_IF_ERROR(
            RegisterLeafAtParent(job, shards, rack, s, regs[s], grants[s].switch_info));
      }
      job.leaf_registered[rack] = true;
    }
    if (!job.first_worker) job.first_worker = reg.worker;
  }
  JobWorkerGrant grant = grants[0];
  grant.job_id = reg.job_id;
  grant.placement = placement;
  if (job.two_level()) grant.num_workers = job.spec.num_workers;
  for (const JobWorkerGrant& g : grants) {
    if (g.state != JobState::kRunning) grant.state = g.state;
  }
  // Each thread's route comes from the shard that serves it (the shards agree on the layout:
  // every one computed it from the same registration).
  std::vector<SwitchInfo> answers;
  for (const JobWorkerGrant& g : grants) answers.push_back(g.switch_info);
  StatusOr<SwitchInfo> merged = control::MergeShardAnswers(answers);
  if (!merged.ok()) return merged.status().WithContext("job " + Str(job.job_id));
  grant.switch_info = std::move(*merged);
  return grant;
}

Status RemoteSwitches::RegisterLeafAtParent(Job& job, const Shards& shards, size_t rack,
                                            size_t shard, const JobRegistration& worker,
                                            const SwitchInfo& leaf) const {
  const size_t parent = job.ParentPart(shard);
  const size_t part = job.LeafPart(rack, shard);
  StatusOr<control::JobLayout> layout =
      control::JobLayout::Make({.job_slots = job.spec.num_slots,
                                .num_shards = uint32_t(job.per_level()),
                                .worker_threads = worker.worker.num_worker_threads,
                                .window_packets = worker.worker.window_packets});
  if (!layout.ok()) return layout.status().WithContext(PartName(job, shards, part));
  // The leaf's port for each worker thread it serves: where it told the worker to send that
  // thread's data (the port of its I/O thread that owns the thread's slots); 0 for the threads
  // other shards serve.
  std::vector<uint16_t> ports;
  for (uint32_t t = 0; t < layout->worker_threads(); ++t) {
    ports.push_back(t < leaf.thread_routes.size() ? leaf.thread_routes[t].udp_port : 0);
  }
  JobRegistration up;
  up.job_id = shards[parent].second;
  up.token = worker.token;
  up.worker = control::LeafRegistration(uint32_t(rack), uint32_t(job.spec.racks.size()),
                                        leaf.ipv4, ports, leaf.udp_port, *layout,
                                        worker.worker.elements_per_packet);
  const size_t index = shards[parent].first;
  StatusOr<JobWorkerGrant> g = switches_[index].jobs->RegisterWorker(up);
  if (!g.ok()) {
    return g.status().WithContext("registering " + PartName(job, shards, part) + " at " +
                                  PartName(job, shards, parent));
  }
  return OkStatus();
}

void RemoteSwitches::End(Job& job, const std::string& reason, bool switch_lost) const {
  std::string token;
  Shards shards;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    if (!job.end_reason.empty()) return;
    token = job.token;
    shards = job.shards;
    job.end_reason = reason;
    job.switch_lost = switch_lost;
    job.ended_seq = ++ended_seq_;
    // Keep the newest kMaxEndedJobs ended jobs.
    std::vector<std::pair<uint64_t, uint32_t>> ended;
    for (const auto& [id, j] : jobs_) {
      if (!j->end_reason.empty()) ended.push_back({j->ended_seq, id});
    }
    std::sort(ended.begin(), ended.end());
    for (size_t i = 0; i + kMaxEndedJobs < ended.size(); ++i) jobs_.erase(ended[i].second);
  }
  // Without the token (a job found again after a restart that no call has presented it for)
  // the shards cannot be deleted: they end by their idle timeout.
  if (token.empty()) return;
  for (const auto& [index, local_id] : shards) {
    (void)switches_[index].jobs->DeleteJob(local_id, token);
  }
}

void RemoteSwitches::Replace(Job& job, uint32_t placement, const std::string& lost) const {
  std::lock_guard<std::mutex> register_lock(job.register_mu);  // no registration in flight
  std::string token;
  Shards old;
  JobSpec spec;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    // Already re-placed (or ended) by another caller that saw the same loss.
    if (!job.end_reason.empty() || job.placement != placement) return;
    token = job.token;
    old = job.shards;
    spec = job.spec;
  }
  if (job.two_level()) {
    End(job, lost + "; a two-level job is not re-placed (its leaves and parent end together)",
        /*switch_lost=*/true);
    return;
  }
  if (token.empty()) {
    End(job,
        lost + "; this controller restarted and no call has presented the job's token since, "
               "so it cannot re-place the job",
        /*switch_lost=*/true);
    return;
  }
  // Every shard anew: the survivors' registrations belong to the old placement.
  for (const auto& [index, local_id] : old) (void)switches_[index].jobs->DeleteJob(local_id, token);
  StatusOr<Shards> shards =
      CreateShards(spec, token, job.shard_group, placement + 1, job.job_id, nullptr);
  if (!shards.ok()) {
    End(job, lost + "; no healthy switch could take the job: " + shards.status().message(),
        /*switch_lost=*/true);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    job.shards = std::move(*shards);
    job.placement = placement + 1;
    job.live_until = {};  // the next access check asks the new shards
  }
  std::lock_guard<std::mutex> lock(health_mu_);
  std::vector<bool> counted(switches_.size(), false);
  for (const auto& [index, local_id] : old) {
    // The switches whose shard was lost (down, or no longer holding it).
    if (!counted[index] && (!health_[index].up || lost.find("(switch " + Str(index) + " at") !=
                                                      std::string::npos)) {
      counted[index] = true;
      ++health_[index].jobs_replaced;
    }
  }
}

void RemoteSwitches::Note(size_t i, const Status& status) const {
  std::lock_guard<std::mutex> lock(health_mu_);
  HealthState& h = health_[i];
  // Only an unreachable switch is down; any other error is the call's.
  const bool up = !Down(status);
  if (!status.ok()) h.last_error = status.message();
  if (up != h.up) {
    h.up = up;
    h.since = std::chrono::steady_clock::now();
  }
}

std::vector<SwitchHealth> RemoteSwitches::Health() const {
  std::vector<SwitchHealth> out;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(health_mu_);
  for (size_t i = 0; i < switches_.size(); ++i) {
    const HealthState& h = health_[i];
    out.push_back({.address = switches_[i].address,
                   .up = h.up,
                   .for_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - h.since),
                   .last_error = h.last_error,
                   .jobs_replaced = h.jobs_replaced});
  }
  return out;
}

void RemoteSwitches::ProbeAll() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    for (const auto& [id, job] : jobs_) {
      if (job->end_reason.empty()) jobs.push_back(job);
    }
  }
  struct Seen {
    std::shared_ptr<Job> job;
    Shards shards;
    uint32_t placement = 0;
    std::string token;
  };
  for (size_t i = 0; i < switches_.size(); ++i) {
    // The jobs' shards before asking the switch: a re-placement meanwhile (placement + 1) makes
    // Replace below a no-op instead of taking its new shards, not yet listed, for lost ones.
    std::vector<Seen> seen;
    {
      std::lock_guard<std::mutex> lock(jobs_mu_);
      for (const std::shared_ptr<Job>& job : jobs) {
        seen.push_back({job, job->shards, job->placement, job->token});
      }
    }
    StatusOr<JobList> list = switches_[i].jobs->ListJobs();
    Note(i, list.status());
    for (const Seen& s : seen) {
      Job& job = *s.job;
      const Shards& shards = s.shards;
      for (size_t shard = 0; shard < shards.size(); ++shard) {
        if (shards[shard].first != i) continue;
        if (!list.ok()) {
          if (!Down(list.status())) break;  // it answered (refusing the call): not lost
          Replace(job, s.placement,
                  PartName(job, shards, shard) + " is unreachable: " + list.status().message());
          break;
        }
        const auto it = std::find_if(list->jobs.begin(), list->jobs.end(), [&](const JobInfo& j) {
          return j.job_id == shards[shard].second;
        });
        if (it == list->jobs.end() || it->assignment.shard_group != job.shard_group) {
          Replace(job, s.placement,
                  PartName(job, shards, shard) + " no longer knows the job (restarted?)");
          break;
        }
        // A shard the switch ended (idle timeout): Describe ends the job, as a call would.
        if (it->state == JobState::kEnded) {
          (void)Describe(job);
          break;
        }
      }
      // Shards of an older placement of the job still live here (the switch was cut off when
      // the job was re-placed): delete them.
      if (!list.ok() || s.token.empty()) continue;
      for (const JobInfo& j : list->jobs) {
        if (j.state != JobState::kEnded && j.assignment.shard_group == job.shard_group &&
            std::max<uint32_t>(1, j.assignment.placement) < s.placement) {
          (void)switches_[i].jobs->DeleteJob(j.job_id, s.token);
        }
      }
    }
  }
}

void RemoteSwitches::HealthLoop(std::chrono::milliseconds interval) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
    lock.unlock();
    ProbeAll();
    lock.lock();
  }
}

JobInfo RemoteSwitches::Describe(Job& job) const {
  // A lost shard re-places the job (Replace); the new placement is then described. Bounded:
  // each round either ends the job or moves it to a newer placement.
  for (int round = 0;; ++round) {
    uint32_t placement = 0;
    const Shards shards = ShardsOf(job, &placement);
    const size_t k = shards.size();
    std::optional<JobInfo> merged;
    std::string lost;
    bool switch_lost = false;  // `lost` is a shard that does not answer or forgot the job
    for (size_t shard = 0; shard < k; ++shard) {
      const auto& [index, local_id] = shards[shard];
      StatusOr<JobInfo> info = switches_[index].jobs->GetJob(local_id);
      if (info.ok() && info->assignment.shard_group != job.shard_group) {
        // The switch restarted and gave the id to another job.
        info = NotFoundError("job " + Str(local_id) + " is another job now");
      }
      if (!info.ok()) {
        if (Down(info.status())) Note(index, info.status());
        if (lost.empty()) {
          lost = PartName(job, shards, shard) + (info.status().code() == StatusCode::kNotFound
                                                 ? " no longer knows the job (restarted?): "
                                                 : " is unreachable: ") +
                 info.status().message();
          switch_lost = true;
        }
        continue;
      }
      if (info->state == JobState::kEnded && lost.empty()) {
        lost = PartName(job, shards, shard) + " ended: " + info->end_reason;
      }
      if (job.two_level()) {
        // The leaves' workers (global ranks) and registrations, every part's counters; the
        // parent's "workers" are the leaves.
        const JobInfo& j = *info;
        if (!merged) {
          merged = j;
          merged->state = JobState::kRunning;
          merged->num_registered = 0;
          merged->workers.clear();
          merged->counters = {};
        }
        if (j.state != JobState::kRunning) merged->state = j.state;
        merged->counters += j.counters;
        merged->idle_for = std::min(merged->idle_for, j.idle_for);
        if (!job.IsParentPart(shard)) {
          // Each rack's workers once (from its leaf shard 0), with what every shard received.
          const size_t rack = shard / job.per_level();
          uint32_t first = 0;
          for (size_t r = 0; r < rack && r < job.spec.racks.size(); ++r) {
            first += job.spec.racks[r].workers;
          }
          if (shard % job.per_level() == 0) {
            merged->num_registered += j.num_registered;
            for (JobWorkerInfo w : j.workers) {
              w.rank += first;
              merged->workers.push_back(std::move(w));
            }
          } else {
            for (JobWorkerInfo& w : merged->workers) {
              for (const JobWorkerInfo& o : j.workers) {
                if (o.rank + first == w.rank) {
                  w.received += o.received;
                  w.idle_for = std::min(w.idle_for, o.idle_for);
                }
              }
            }
          }
        }
        continue;
      }
      if (!merged) {
        merged = std::move(*info);
        continue;
      }
      const JobInfo& j = *info;
      if (j.state != JobState::kRunning) merged->state = j.state;
      merged->num_registered = std::min(merged->num_registered, j.num_registered);
      merged->counters += j.counters;
      merged->idle_for = std::min(merged->idle_for, j.idle_for);
      for (JobWorkerInfo& w : merged->workers) {
        for (const JobWorkerInfo& o : j.workers) {
          if (o.rank == w.rank) {
            w.received += o.received;
            w.idle_for = std::min(w.idle_for, o.idle_for);
          }
        }
      }
    }
    if (!lost.empty()) {
      // A re-placement in progress (it deletes the old shards first) finishes first: the loss
      // seen may be its doing.
      std::unique_lock<std::mutex> register_lock(job.register_mu);
      uint32_t now = 0;
      (void)ShardsOf(job, &now);
      if (now != placement && round < 4) continue;  // re-placed meanwhile: describe the new one
      if (switch_lost && round < 4) {
        register_lock.unlock();
        Replace(job, placement, lost);
        (void)ShardsOf(job, &now);
        std::lock_guard<std::mutex> lock(jobs_mu_);
        if (job.end_reason.empty() && now != placement) continue;  // describe the new one
      }
      End(job, lost, switch_lost);
    }
    if (!merged) merged.emplace();  // no shard answered: what this controller knows
    merged->job_id = job.job_id;
    merged->spec.switches = uint32_t(k);
    merged->assignment.shard = 0;
    merged->assignment.num_shards = uint32_t(k);
    if (job.two_level()) {
      // The job as asked for (all racks' workers, the racks, the parent chosen), the idle
      // timeout as the leaves show it; K shards per level.
      JobSpec spec = job.spec;
      spec.idle_timeout = merged->spec.idle_timeout;
      spec.switches = uint32_t(job.per_level());
      merged->spec = std::move(spec);
      merged->assignment.num_shards = uint32_t(job.per_level());
      merged->assignment.uplink = {};
    }
    merged->assignment.shard_group = job.shard_group;
    merged->assignment.placement = placement;
    merged->held_slots = control::SlotRange{0, merged->spec.num_slots};  // all shards together
    std::lock_guard<std::mutex> lock(jobs_mu_);
    if (!job.end_reason.empty()) {
      merged->state = JobState::kEnded;
      merged->end_reason = job.end_reason;
      merged->switch_lost = job.switch_lost;
    }
    return *merged;
  }
}

}  // namespace switchml::controller
