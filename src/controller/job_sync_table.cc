#include "controller/job_sync_table.h"

#include <utility>

namespace switchml::controller {

JobSyncTable::JobSyncTable(SyncLimits reference_limits)
    : reference_(std::make_shared<SyncCoordinator>(reference_limits)) {}

StatusOr<std::shared_ptr<SyncCoordinator>> JobSyncTable::Acquire(uint32_t job_id,
                                                                 const SyncLimits& limits,
                                                                 const std::string& token) {
  if (job_id == kReferenceJob) return reference_;
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("the controller is shutting down");
  auto it = syncs_.find(job_id);
  if (it == syncs_.end()) {
    if (syncs_.size() >= kMaxSyncStates) {
      return ResourceExhaustedError(
          "job " + std::to_string(job_id) + ": " + std::to_string(kMaxSyncStates) +
          " jobs already have barrier/broadcast state on this controller (the most it "
          "keeps); retry once some have finished");
    }
    it = syncs_.emplace(job_id, Entry{std::make_shared<SyncCoordinator>(limits), 0, token}).first;
  }
  ++it->second.users;
  return it->second.sync;
}

void JobSyncTable::Release(uint32_t job_id, const std::shared_ptr<SyncCoordinator>& sync) {
  if (job_id == kReferenceJob) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = syncs_.find(job_id);
  // Forgotten (or replaced) meanwhile: nothing to count.
  if (it == syncs_.end() || it->second.sync != sync) return;
  if (--it->second.users == 0 && it->second.sync->Idle()) syncs_.erase(it);
}

void JobSyncTable::Forget(uint32_t job_id) {
  ForgetRefusal(job_id);
  if (job_id == kReferenceJob) {
    reference_->Reset();
    return;
  }
  std::shared_ptr<SyncCoordinator> sync;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = syncs_.find(job_id);
    if (it == syncs_.end()) return;
    sync = std::move(it->second.sync);
    syncs_.erase(it);
  }
  sync->Reset();  // blocked callers return Aborted; they hold their own reference
}

std::vector<uint32_t> JobSyncTable::SweepCandidates() const {
  std::vector<uint32_t> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, entry] : syncs_) {
      if (entry.users == 0) candidates.push_back(id);
    }
  }
  std::lock_guard<std::mutex> lock(refusal_mu_);
  for (const auto& [id, refusal] : refusals_) {
    if (id != kReferenceJob) candidates.push_back(id);
  }
  return candidates;
}

void JobSyncTable::ForgetUnused(uint32_t job_id) {
  if (job_id == kReferenceJob) return;
  ForgetRefusal(job_id);
  std::shared_ptr<SyncCoordinator> sync;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = syncs_.find(job_id);
    if (it == syncs_.end() || it->second.users != 0) return;
    sync = std::move(it->second.sync);
    syncs_.erase(it);
  }
  sync->Reset();
}

size_t JobSyncTable::CancelWaiters(uint32_t job_id, const std::string& why) {
  std::shared_ptr<SyncCoordinator> sync;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = syncs_.find(job_id);
    if (job_id == kReferenceJob || it == syncs_.end()) return 0;
    sync = it->second.sync;
  }
  return sync->CancelWaiters(why, /*broadcasts=*/true);  // callbacks run without our lock
}

std::vector<std::pair<uint32_t, std::string>> JobSyncTable::WatchList() const {
  std::vector<std::pair<uint32_t, std::string>> list;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, entry] : syncs_) {
    if (entry.sync->NumBarrierWaiters() + entry.sync->NumBroadcastWaiters() != 0) {
      list.emplace_back(id, entry.token);
    }
  }
  return list;
}

void JobSyncTable::Shutdown() {
  reference_->Shutdown();
  std::vector<std::shared_ptr<SyncCoordinator>> syncs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    for (auto& [id, entry] : syncs_) syncs.push_back(entry.sync);
  }
  // Without our lock: the waiters' callbacks end their uses (Release).
  for (auto& sync : syncs) sync->Shutdown();
}

void JobSyncTable::RecordRefusal(uint32_t job_id, const std::string& token,
                                 const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(refusal_mu_);
    if (job_id == kReferenceJob) {
      refusals_[job_id] = Refusal{token, message};  // the latest refusal of the session
    } else if (refusals_.count(job_id) == 0) {  // the first refusal explains the failure
      if (refusals_.size() >= kMaxRefusals) {
        auto oldest = refusals_.begin();  // the lowest id, job 0's kept
        if (oldest->first == kReferenceJob) ++oldest;
        refusals_.erase(oldest);
      }
      refusals_.emplace(job_id, Refusal{token, message});
    }
  }
  // Recorded first, cancelled second: a call that joins in between sees the refusal in
  // CancelWaitersIfRefused, one that joined before is cancelled here.
  CancelRefusedWaiters(job_id);
}

size_t JobSyncTable::CancelWaitersIfRefused(uint32_t job_id, const std::string& token) {
  return HasRefusal(job_id, token) ? CancelRefusedWaiters(job_id) : 0;
}

size_t JobSyncTable::CancelRefusedWaiters(uint32_t job_id) {
  static const std::string kWhy = "a registration was refused";
  // Job 0's broadcasts belong to the next session's bootstrap, which a refusal does not end.
  if (job_id == kReferenceJob) return reference_->CancelWaiters(kWhy, /*broadcasts=*/false);
  return CancelWaiters(job_id, kWhy);
}

std::optional<std::string> JobSyncTable::Refused(uint32_t job_id,
                                                 const std::string& token) const {
  std::lock_guard<std::mutex> lock(refusal_mu_);
  auto it = refusals_.find(job_id);
  if (it == refusals_.end() || it->second.token != token) return std::nullopt;
  return it->second.message;
}

bool JobSyncTable::HasRefusal(uint32_t job_id, const std::string& token) const {
  std::lock_guard<std::mutex> lock(refusal_mu_);
  auto it = refusals_.find(job_id);
  return it != refusals_.end() && it->second.token == token;
}

void JobSyncTable::ForgetRefusal(uint32_t job_id) {
  std::lock_guard<std::mutex> lock(refusal_mu_);
  refusals_.erase(job_id);
}

size_t JobSyncTable::NumSyncStates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return syncs_.size();
}

JobSyncTable::Waiters JobSyncTable::WaitersOf(uint32_t job_id) const {
  std::shared_ptr<SyncCoordinator> sync = reference_;
  if (job_id != kReferenceJob) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = syncs_.find(job_id);
    if (it == syncs_.end()) return {};
    sync = it->second.sync;
  }
  return {sync->NumBarrierWaiters(), sync->NumBroadcastWaiters()};
}

size_t JobSyncTable::NumBlockedCallers() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, entry] : syncs_) {
    n += entry.sync->NumBarrierWaiters() + entry.sync->NumBroadcastWaiters();
  }
  return n;
}

}  // namespace switchml::controller
