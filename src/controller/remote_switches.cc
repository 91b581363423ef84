#include "controller/remote_switches.h"

#include <arpa/inet.h>

#include <algorithm>
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

}  // namespace

StatusOr<std::unique_ptr<RemoteSwitches>> RemoteSwitches::Connect(
    const std::vector<std::string>& switch_addresses, std::chrono::milliseconds rpc_timeout,
    const std::string& operator_token) {
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
  for (size_t i = 0; i < switch_addresses.size(); ++i) {
    Switch s;
    s.address = switch_addresses[i];
    auto jobs = JobClient::Connect(s.address, rpc_timeout);
    if (!jobs.ok()) return jobs.status().WithContext("switch " + Str(i));
    auto session = SessionClient::Connect(s.address, rpc_timeout);
    if (!session.ok()) return session.status().WithContext("switch " + Str(i));
    s.jobs = std::move(*jobs);
    s.session = std::move(*session);
    s.jobs->set_operator_token(operator_token);
    // Fail now, naming the switch, rather than on every operator's call later.
    auto check = s.jobs->ListJobs();
    if (!check.ok()) {
      return check.status().WithContext("switch " + Str(i) + " (" + s.address +
                                        ") refuses this controller");
    }
    // A switch that is down must not stall calls for the others (ListJobs asks every switch)
    // nor hold an operator's call past its own deadline: fail fast, and let gRPC reconnect
    // in the background (within a second of the switch coming back, grpc_client.cc).
    s.jobs->set_wait_for_ready(false);
    s.session->set_wait_for_ready(false);
    r->switches_.push_back(std::move(s));
  }
  r->Adopt();
  return r;
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
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs = jobs_;
  }
  for (const auto& [id, job] : jobs) {
    for (const auto& shard : job->shards) shard_of[shard] = id;
  }
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    if (!list.ok()) continue;
    for (JobInfo& j : list->jobs) {
      const auto it = shard_of.find({i, j.job_id});
      if (it == shard_of.end()) {
        j.job_id = GlobalId(i, j.job_id);
        all.jobs.push_back(std::move(j));
        continue;
      }
      Job& job = *jobs.at(it->second);
      if (job.shards[0] == std::make_pair(i, j.job_id)) all.jobs.push_back(Describe(job));
    }
    all.pool_slots += list->pool_slots;
    all.free_slots += list->free_slots;
    all.largest_free_range = std::max(all.largest_free_range, list->largest_free_range);
  }
  return all;
}

StatusOr<std::vector<SlotInfo>> RemoteSwitches::InspectSlots(uint32_t job_id,
                                                             uint32_t first_slot,
                                                             uint32_t count) const {
  if (std::shared_ptr<Job> job = Find(job_id)) {
    // Each shard holds its own share of the job's slots (control::JobLayout::ShardSlots) and
    // answers only for those: the shards' answers, in shard order, are the slots asked for.
    std::vector<SlotInfo> merged;
    for (size_t shard = 0; shard < job->shards.size(); ++shard) {
      const auto& [index, local_id] = job->shards[shard];
      auto slots = switches_[index].jobs->InspectSlots(local_id, first_slot, count);
      if (!slots.ok()) return slots.status().WithContext(ShardName(*job, shard));
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
    const bool reachable = switches_[i].jobs->ListJobs(&counters).ok();
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

std::string RemoteSwitches::ShardName(const Job& job, size_t shard) const {
  const size_t index = job.shards[shard].first;
  return "shard " + Str(shard) + " of " + Str(job.shards.size()) + " (switch " + Str(index) +
         " at " + switches_[index].address + ")";
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
    const auto& [index, local_id] = job.shards[0];
    StatusOr<JobInfo> info = switches_[index].jobs->GetJob(local_id, token);
    if (!info.ok()) return info.status().WithContext(ShardName(job, 0));
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
  std::map<uint64_t, std::vector<std::pair<size_t, uint32_t>>> groups;  // shard -> (switch, id)
  std::map<uint64_t, bool> broken;
  constexpr auto kMissing = std::make_pair(SIZE_MAX, uint32_t{0});
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    if (!list.ok()) continue;
    for (const JobInfo& j : list->jobs) {
      const control::ShardAssignment& a = j.assignment;
      if (j.state == JobState::kEnded || a.shard_group == 0 || a.num_shards < 1) continue;
      auto& g = groups[a.shard_group];
      if (g.empty()) g.assign(a.num_shards, kMissing);
      if (g.size() != a.num_shards || a.shard >= g.size() || g[a.shard] != kMissing) {
        broken[a.shard_group] = true;  // inconsistent: leave it alone
        continue;
      }
      g[a.shard] = {i, j.job_id};
    }
  }
  std::lock_guard<std::mutex> lock(jobs_mu_);
  for (const auto& [group, shards] : groups) {
    if (broken.count(group) != 0 ||
        std::find(shards.begin(), shards.end(), kMissing) != shards.end()) {
      continue;
    }
    auto job = std::make_shared<Job>();
    job->shards = shards;
    job->job_id = GlobalId(shards[0].first, shards[0].second);
    jobs_[job->job_id] = job;
  }
}

StatusOr<JobInfo> RemoteSwitches::Place(const JobSpec& spec) {
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
  auto job = std::make_shared<Job>();
  job->token = spec.token.empty() ? control::RandomToken() : spec.token;
  JobSpec remote = spec;
  remote.token = job->token;
  // Our JobService already applied its default: 0 here means "none"
  // (control/switch_control.h), which the switch's JobService must not read as "its default".
  if (remote.idle_timeout.count() == 0) remote.idle_timeout = JobClient::kNoIdleTimeout;
  control::ShardAssignment assignment{.num_shards = k};
  do {
    assignment.shard_group = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  } while (assignment.shard_group == 0);
  JobInfo first;
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
      for (const auto& [i, local] : job->shards) (void)switches_[i].jobs->DeleteJob(local, job->token);
      return k == 1 ? error : error.WithContext("creating shard " + Str(shard) + " of " + Str(k));
    }
    job->shards.push_back({index, created->job_id});
    if (shard == 0) first = std::move(*created);
  }
  job->job_id = GlobalId(job->shards[0].first, job->shards[0].second);
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_[job->job_id] = job;
  }
  first.job_id = job->job_id;
  first.assignment.shard = 0;
  first.held_slots = control::SlotRange{0, first.spec.num_slots};  // all shards together
  first.token = job->token;
  return first;
}

StatusOr<JobWorkerGrant> RemoteSwitches::Register(Job& job, const JobRegistration& reg) {
  const size_t k = job.shards.size();
  if (k > 1 && reg.worker.udp_ports.empty()) {
    return InvalidArgumentError("job " + Str(job.job_id) + " is served by " + Str(k) +
                                " switches: its workers must register a UDP port per worker "
                                "thread (reference-mode workers cannot join it)");
  }
  std::lock_guard<std::mutex> lock(job.register_mu);
  std::vector<JobWorkerGrant> grants;
  for (size_t shard = 0; shard < k; ++shard) {
    const auto& [index, local_id] = job.shards[shard];
    JobRegistration local = reg;
    local.job_id = local_id;
    StatusOr<JobWorkerGrant> reply = switches_[index].jobs->RegisterWorker(local);
    if (!reply.ok()) return reply.status().WithContext(ShardName(job, shard));
    // A switch listening on every interface reports 0.0.0.0; workers must not read that as
    // "where the controller is" (we are not on the switch's host): use the switch's address.
    if (reply->switch_info.ipv4 == 0) reply->switch_info.ipv4 = HostIpv4(switches_[index].address);
    grants.push_back(std::move(*reply));
  }
  JobWorkerGrant grant = grants[0];
  grant.job_id = reg.job_id;
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

void RemoteSwitches::End(Job& job, const std::string& reason, bool switch_lost) const {
  std::string token;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    if (!job.end_reason.empty()) return;
    token = job.token;
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
  for (const auto& [index, local_id] : job.shards) {
    (void)switches_[index].jobs->DeleteJob(local_id, token);
  }
}

JobInfo RemoteSwitches::Describe(Job& job) const {
  const size_t k = job.shards.size();
  std::optional<JobInfo> merged;
  std::string lost;
  bool switch_lost = false;  // `lost` is a shard that does not answer or forgot the job
  for (size_t shard = 0; shard < k; ++shard) {
    const auto& [index, local_id] = job.shards[shard];
    StatusOr<JobInfo> info = switches_[index].jobs->GetJob(local_id);
    if (!info.ok()) {
      if (lost.empty()) {
        lost = ShardName(job, shard) + (info.status().code() == StatusCode::kNotFound
                                            ? " no longer knows the job (restarted?): "
                                            : " is unreachable: ") +
               info.status().message();
        switch_lost = true;
      }
      continue;
    }
    if (info->state == JobState::kEnded && lost.empty()) {
      lost = ShardName(job, shard) + " ended: " + info->end_reason;
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
  if (!lost.empty()) End(job, lost, switch_lost);
  if (!merged) merged.emplace();  // no shard answered: what this controller knows
  merged->job_id = job.job_id;
  merged->spec.switches = uint32_t(k);
  merged->assignment.shard = 0;
  merged->assignment.num_shards = uint32_t(k);
  merged->held_slots = control::SlotRange{0, merged->spec.num_slots};  // all shards together
  std::lock_guard<std::mutex> lock(jobs_mu_);
  if (!job.end_reason.empty()) {
    merged->state = JobState::kEnded;
    merged->end_reason = job.end_reason;
    merged->switch_lost = job.switch_lost;
  }
  return *merged;
}

}  // namespace switchml::controller
