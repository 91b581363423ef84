#include "controller/remote_switches.h"

#include <arpa/inet.h>

#include <algorithm>

#include "controller/operator_auth.h"

namespace switchml::controller {
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
  grant.job_id = dataplane::kReferenceJobId;
  grant.num_workers = reg.worker.num_workers;
  grant.state = JobState::kRunning;
  return grant;
}

StatusOr<JobInfo> RemoteSwitches::CreateJob(const JobSpec& spec) {
  // Place the job where the largest free range is (ties: the first switch); an unreachable
  // switch gets no new jobs.
  size_t best = switches_.size();
  uint32_t best_free = 0;
  Status first_error;
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    if (!list.ok()) {
      if (first_error.ok()) first_error = SwitchError(switches_[i], list.status());
      continue;
    }
    if (best == switches_.size() || list->largest_free_range > best_free) {
      best_free = list->largest_free_range;
      best = i;
    }
  }
  if (best == switches_.size()) {
    return first_error.WithContext("no switch reachable (" + Str(switches_.size()) +
                                   " configured)");
  }
  // Our JobService already applied its default: 0 here means "none" (dataplane/switch_control.h), which the
  // switch's JobService must not read as "its default".
  JobSpec remote_spec = spec;
  if (remote_spec.idle_timeout.count() == 0) remote_spec.idle_timeout = JobClient::kNoIdleTimeout;
  StatusOr<JobInfo> job = switches_[best].jobs->CreateJob(remote_spec);
  if (!job.ok()) return SwitchError(switches_[best], job.status());
  if (job->job_id >> kLocalIdBits) {
    return InternalError("switch " + Str(best) + " returned job id " + Str(job->job_id) +
                         " >= 2^24, which this controller cannot route");
  }
  job->job_id = GlobalId(best, job->job_id);
  return job;
}

Status RemoteSwitches::DeleteJob(uint32_t job_id, const std::string& token) {
  SWITCHML_ASSIGN_OR_RETURN(auto route, Route(job_id));
  const Status s = route.first->jobs->DeleteJob(route.second, token);
  return s.ok() ? s : SwitchError(*route.first, s);
}

StatusOr<JobWorkerGrant> RemoteSwitches::RegisterJobWorker(const JobRegistration& reg) {
  if (reg.job_id == dataplane::kReferenceJobId) return RegisterInReferenceSession(reg);
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
  SWITCHML_ASSIGN_OR_RETURN(auto route, Route(job_id));
  StatusOr<JobInfo> job = route.first->jobs->GetJob(route.second);
  if (!job.ok()) return SwitchError(*route.first, job.status());
  job->job_id = job_id;
  return job;
}

JobList RemoteSwitches::ListJobs() const {
  JobList all;
  for (size_t i = 0; i < switches_.size(); ++i) {
    auto list = switches_[i].jobs->ListJobs();
    if (!list.ok()) continue;
    for (JobInfo& j : list->jobs) {
      j.job_id = GlobalId(i, j.job_id);
      all.jobs.push_back(std::move(j));
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
    access_cache_.push_back({job_id, token, now + std::chrono::milliseconds(200)});
  }
  return OkStatus();
}

}  // namespace switchml::controller
