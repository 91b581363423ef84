// controller/job_sync_table.h — the Barrier/Broadcast state of every job, job 0 included.
//
// One place owns the sync state per job id (docs/design.md, "Session setup"): a
// SyncCoordinator (sync_coordinator.h) per job that is synchronizing, and the refused
// registration (if any) that means a job can never start. The JobService (job_service.h)
// serves the job-scoped Barrier/Broadcast from it, and the reference Sync service
// (session_service.h) is a thin adapter onto job 0's entry:
//
//   JobSyncTable table;
//   StatusOr<std::shared_ptr<SyncCoordinator>> sync = table.Acquire(job_id, limits);
//   JobSyncTable::Use use(&table, job_id, *sync);      // released when `use` goes
//   Status s = (*sync)->Barrier(num_workers, wait);
//
// Job 0 (the reference session): its coordinator exists from construction with the
// SyncLimits given to the constructor (the reference Barrier takes num_workers from each
// request and its Broadcast keys operations by arrival, sync_coordinator.h; the reference
// Sync service sets its session size), is never dropped, swept or counted against
// kMaxSyncStates, and is cleared only by Forget(0) (ResetSyncState) and Shutdown(). Its
// refusal is the latest refused registration (a new one replaces it) and has no token.
//
// Service jobs: a coordinator exists while a caller uses it or it holds something (a pending
// broadcast) and is dropped as soon as it is idle; Forget() drops it (blocked callers get
// Aborted) and the JobService's sweep drops the leftovers of ended jobs. A job's refusal is its
// first refused registration, remembered with the token of the registration (only callers
// with that token see it); at most kMaxRefusals are kept, the lowest ids forgotten first.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "controller/sync_coordinator.h"
#include "switchml/status.h"

namespace switchml::controller {

class JobSyncTable {
 public:
  // The reference session's job id (control::kReferenceJobId).
  static constexpr uint32_t kReferenceJob = 0;
  // Most service jobs with sync state at once.
  static constexpr size_t kMaxSyncStates = 4096;
  // Most refused registrations remembered.
  static constexpr size_t kMaxRefusals = 1024;

  // `reference_limits` bound job 0's coordinator (the reference Sync service's).
  explicit JobSyncTable(SyncLimits reference_limits = {});
  JobSyncTable(const JobSyncTable&) = delete;
  JobSyncTable& operator=(const JobSyncTable&) = delete;

  // The job's coordinator, counted as used until Release (or a Use) gives it back. A service
  // job's is created with `limits` when it has none; `token` (checked by the caller) is kept
  // with it for WatchList (the first one given). Job 0's is always returned (after Shutdown
  // its calls answer Unavailable themselves). Errors (service jobs only): Unavailable (shut
  // down), ResourceExhausted (kMaxSyncStates jobs have state).
  StatusOr<std::shared_ptr<SyncCoordinator>> Acquire(uint32_t job_id, const SyncLimits& limits,
                                                     const std::string& token = {});
  // Ends one use; a service job's coordinator that nobody uses and that holds nothing is
  // dropped.
  void Release(uint32_t job_id, const std::shared_ptr<SyncCoordinator>& sync);

  // Ends a use of a coordinator when it goes out of scope.
  class Use {
   public:
    Use(JobSyncTable* table, uint32_t job_id, std::shared_ptr<SyncCoordinator> sync)
        : table_(table), job_id_(job_id), sync_(std::move(sync)) {}
    ~Use() { table_->Release(job_id_, sync_); }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    JobSyncTable* const table_;
    const uint32_t job_id_;
    const std::shared_ptr<SyncCoordinator> sync_;
  };

  // Forgets the job's refusal and sync state: blocked callers return Aborted, later calls
  // start afresh. Job 0's coordinator is reset in place.
  void Forget(uint32_t job_id);
  // For the sweep of ended jobs: the service jobs that have a refusal or sync state nobody
  // is using right now, and forgetting one of them (its state only if still unused).
  std::vector<uint32_t> SweepCandidates() const;
  void ForgetUnused(uint32_t job_id);

  // Ends every waiting call of service job `job_id` with Cancelled (SyncCoordinator::
  // CancelWaiters) without forgetting its state; returns how many.
  size_t CancelWaiters(uint32_t job_id, const std::string& why);
  // The service jobs with callers waiting right now, each with the token kept at Acquire (for
  // the JobService's watch of ended jobs).
  std::vector<std::pair<uint32_t, std::string>> WatchList() const;

  // Wakes every blocked caller of every job (Unavailable) and fails later ones the same way.
  void Shutdown();

  // Remembers that a registration of `job_id` with `token` was refused with `message` (see
  // the header comment for which refusal is kept), then ends the job's waiting calls with
  // Cancelled (job 0: its Barrier calls only), which the services turn into the refusal.
  void RecordRefusal(uint32_t job_id, const std::string& token, const std::string& message);
  // For a call that checked HasRefusal and then joined the job's barrier or broadcast: a
  // refusal recorded in between cancelled only the waiters it found, so the joined call
  // calls this and the waiters are cancelled as RecordRefusal would have (none when there is
  // no refusal). Returns how many were cancelled.
  size_t CancelWaitersIfRefused(uint32_t job_id, const std::string& token);
  // The refusal's message if a registration of `job_id` with `token` was refused.
  std::optional<std::string> Refused(uint32_t job_id, const std::string& token) const;
  bool HasRefusal(uint32_t job_id, const std::string& token) const;
  void ForgetRefusal(uint32_t job_id);

  // Job 0's coordinator.
  SyncCoordinator& reference() { return *reference_; }
  const SyncCoordinator& reference() const { return *reference_; }
  // Service jobs with sync state, and their callers blocked in Barrier or Broadcast (job 0 is
  // not counted; reference().NumBarrierWaiters() tells about it).
  size_t NumSyncStates() const;
  size_t NumBlockedCallers() const;
  // Callers of one job (job 0 included) waiting in Barrier and in Broadcast right now.
  struct Waiters {
    uint32_t barrier = 0;
    uint32_t broadcast = 0;
  };
  Waiters WaitersOf(uint32_t job_id) const;

 private:
  struct Entry {
    std::shared_ptr<SyncCoordinator> sync;
    uint32_t users = 0;
    std::string token;
  };
  struct Refusal {
    std::string token;
    std::string message;
  };

  // Ends the waiting calls a refusal of `job_id` ends (RecordRefusal).
  size_t CancelRefusedWaiters(uint32_t job_id);

  const std::shared_ptr<SyncCoordinator> reference_;
  mutable std::mutex mu_;
  bool shut_down_ = false;              // guarded by mu_
  std::map<uint32_t, Entry> syncs_;     // service jobs; guarded by mu_
  mutable std::mutex refusal_mu_;
  std::map<uint32_t, Refusal> refusals_;  // guarded by refusal_mu_
};

}  // namespace switchml::controller
