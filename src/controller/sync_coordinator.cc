#include "controller/sync_coordinator.h"

#include <string>
#include <utility>

namespace switchml::controller {
namespace {

// Upper bound on one condition-variable sleep when nothing needs polling; avoids handing
// TimePoint::max() to wait_until (overflow-prone in some standard libraries).
constexpr std::chrono::hours kMaxSleep{1};

std::string Str(uint64_t v) { return std::to_string(v); }

}  // namespace

SyncCoordinator::WaitEnd SyncCoordinator::WaitLocked(std::unique_lock<std::mutex>& lock,
                                                     const WaitControl& wait,
                                                     const std::function<bool()>& done) {
  const uint64_t epoch = reset_epoch_;
  while (true) {
    // Shutdown and reset first: they clear the state `done` may look at.
    if (shut_down_) return WaitEnd::kShutDown;
    if (reset_epoch_ != epoch) return WaitEnd::kReset;
    if (done()) return WaitEnd::kDone;
    if (wait.cancelled && wait.cancelled()) return WaitEnd::kCancelled;
    const TimePoint now = Clock::now();
    if (now >= wait.deadline) return WaitEnd::kDeadline;
    TimePoint until = now + (wait.cancelled ? Duration(wait.poll_interval) : Duration(kMaxSleep));
    // Compare as durations from now so that TimePoint::max() cannot overflow.
    if (wait.deadline - now < until - now) until = wait.deadline;
    cv_.wait_until(lock, until);
  }
}

Status SyncCoordinator::Barrier(uint32_t num_workers, const WaitControl& wait) {
  if (num_workers == 0 || num_workers > kMaxBroadcastParticipants) {
    return InvalidArgumentError("Barrier: num_workers must be in [1, " +
                                Str(kMaxBroadcastParticipants) + "], got " + Str(num_workers));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("Barrier: controller is shutting down");
  if (barrier_arrived_ == 0) {
    barrier_num_workers_ = num_workers;
  } else if (num_workers != barrier_num_workers_) {
    return InvalidArgumentError("Barrier: num_workers " + Str(num_workers) +
                                " differs from the pending barrier's num_workers " +
                                Str(barrier_num_workers_));
  }
  // A caller that does not complete the barrier blocks: refuse it if that is one too many.
  if (barrier_arrived_ + 1 < num_workers &&
      barrier_arrived_ + broadcast_waiters_ >= limits_.max_waiters) {
    return ResourceExhaustedError("Barrier: " + Str(limits_.max_waiters) +
                                  " callers are already blocked here (the most allowed); "
                                  "retry later");
  }
  ++barrier_arrived_;
  if (barrier_arrived_ == barrier_num_workers_) {
    barrier_arrived_ = 0;
    ++barrier_generation_;
    cv_.notify_all();
    return OkStatus();
  }
  const uint64_t generation = barrier_generation_;
  const WaitEnd end = WaitLocked(lock, wait, [&] { return barrier_generation_ != generation; });
  if (end == WaitEnd::kDone) return OkStatus();
  if (end == WaitEnd::kShutDown) return UnavailableError("Barrier: controller is shutting down");
  if (end == WaitEnd::kReset) return AbortedError("Barrier: sync state was reset while waiting");
  // Withdraw: the operation is still the one we joined (generation unchanged).
  const std::string progress = Str(barrier_arrived_) + " of " + Str(barrier_num_workers_) +
                               " workers had arrived";
  --barrier_arrived_;
  if (end == WaitEnd::kCancelled) return CancelledError("Barrier: call cancelled; " + progress);
  return DeadlineExceededError("Barrier: deadline passed; " + progress);
}

StatusOr<uint64_t> SyncCoordinator::Broadcast(uint64_t value, uint32_t rank,
                                              uint32_t num_workers, uint32_t root,
                                              const WaitControl& wait) {
  if (num_workers == 0 || num_workers > kMaxBroadcastParticipants) {
    return InvalidArgumentError("Broadcast: num_workers must be in [1, " +
                                Str(kMaxBroadcastParticipants) + "], got " + Str(num_workers));
  }
  if (rank >= num_workers) {
    return InvalidArgumentError("Broadcast: rank must be < num_workers (" + Str(num_workers) +
                                "), got " + Str(rank));
  }
  if (root >= num_workers) {
    return InvalidArgumentError("Broadcast: root must be < num_workers (" + Str(num_workers) +
                                "), got " + Str(root));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return UnavailableError("Broadcast: controller is shutting down");

  // The oldest live operation this rank has not participated in.
  auto it = broadcasts_.begin();
  for (; it != broadcasts_.end(); ++it) {
    const BroadcastOp& op = it->second;
    if (rank < op.num_workers && op.participated[rank]) continue;
    if (op.num_workers != num_workers) {
      return InvalidArgumentError("Broadcast: num_workers " + Str(num_workers) +
                                  " differs from pending operation " + Str(it->first) +
                                  "'s num_workers " + Str(op.num_workers) +
                                  " (left over from an earlier job? reset the sync state)");
    }
    if (op.root != root) {
      return InvalidArgumentError("Broadcast: root " + Str(root) +
                                  " differs from pending operation " + Str(it->first) +
                                  "'s root " + Str(op.root) +
                                  " (left over from an earlier job? reset the sync state)");
    }
    break;
  }
  const bool will_block = rank != root && (it == broadcasts_.end() || !it->second.has_value);
  if (will_block && barrier_arrived_ + broadcast_waiters_ >= limits_.max_waiters) {
    return ResourceExhaustedError("Broadcast: " + Str(limits_.max_waiters) +
                                  " callers are already blocked here (the most allowed); "
                                  "retry later");
  }
  if (it == broadcasts_.end()) {
    if (broadcasts_.size() >= limits_.max_pending_broadcasts) {
      return ResourceExhaustedError(
          "Broadcast: " + Str(limits_.max_pending_broadcasts) +
          " broadcast operations are already pending (the most allowed); their ranks must "
          "call (or the sync state be reset) before a new one can start");
    }
    BroadcastOp op;
    op.num_workers = num_workers;
    op.root = root;
    op.participated.assign(num_workers, false);
    it = broadcasts_.emplace(next_broadcast_id_++, std::move(op)).first;
  }
  const uint64_t id = it->first;
  BroadcastOp* op = &it->second;
  op->participated[rank] = true;
  ++op->num_participants;
  if (rank == root) {
    op->has_value = true;
    op->value = value;
    cv_.notify_all();
  } else {
    // std::map nodes are stable, but the op may be erased only after we read it, and only
    // Shutdown clears the map (WaitLocked reports that before calling the predicate).
    ++broadcast_waiters_;
    const WaitEnd end = WaitLocked(lock, wait, [op] { return op->has_value; });
    --broadcast_waiters_;
    if (end == WaitEnd::kShutDown) {
      return UnavailableError("Broadcast: controller is shutting down");
    }
    if (end == WaitEnd::kReset) {
      return AbortedError("Broadcast: sync state was reset while waiting");
    }
    if (end != WaitEnd::kDone) {
      // Withdraw so that a retry joins this same operation again.
      op->participated[rank] = false;
      --op->num_participants;
      const std::string progress = "root " + Str(root) + " has not called yet (operation " +
                                   Str(id) + " of " + Str(num_workers) + " ranks, " +
                                   Str(op->num_participants) + " others waiting)";
      if (op->num_participants == 0) broadcasts_.erase(id);
      if (end == WaitEnd::kCancelled) {
        return CancelledError("Broadcast: call cancelled; " + progress);
      }
      return DeadlineExceededError("Broadcast: deadline passed; " + progress);
    }
  }
  const uint64_t result = op->value;
  if (++op->num_reads == op->num_workers) broadcasts_.erase(id);
  return result;
}

void SyncCoordinator::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  barrier_arrived_ = 0;
  broadcasts_.clear();
  cv_.notify_all();
}

void SyncCoordinator::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  ++reset_epoch_;
  barrier_arrived_ = 0;
  broadcasts_.clear();
  cv_.notify_all();
}

uint32_t SyncCoordinator::NumBarrierWaiters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return barrier_arrived_;
}

size_t SyncCoordinator::NumPendingBroadcasts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broadcasts_.size();
}

uint32_t SyncCoordinator::NumBroadcastWaiters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broadcast_waiters_;
}

bool SyncCoordinator::Idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return barrier_arrived_ == 0 && broadcast_waiters_ == 0 && broadcasts_.empty();
}

}  // namespace switchml::controller
