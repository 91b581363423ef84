#include "controller/sync_coordinator.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace switchml::controller {
namespace {

// Upper bound on one condition-variable sleep when nothing needs polling; avoids handing
// TimePoint::max() to wait_until (overflow-prone in some standard libraries).
constexpr std::chrono::hours kMaxSleep{1};

std::string Str(uint64_t v) { return std::to_string(v); }

const char* Name(bool broadcast) { return broadcast ? "Broadcast" : "Barrier"; }

}  // namespace

void SyncCoordinator::Run(Ready& ready) {
  for (auto& [done, result] : ready) done(std::move(result));
}

std::string SyncCoordinator::ProgressLocked(const Waiter& w) const {
  if (!w.broadcast) {
    return Str(barrier_waiting_.size()) + " of " + Str(barrier_num_workers_) +
           " workers had arrived";
  }
  const BroadcastOp& op = broadcasts_.at(w.op_id);
  return "root " + Str(op.root) + " has not called yet (operation " + Str(w.op_id) + " of " +
         Str(op.num_workers) + " ranks, " + Str(op.num_participants - 1) + " others waiting)";
}

Status SyncCoordinator::WaitBoundLocked(bool broadcast, const std::string& peer) const {
  const char* rpc = Name(broadcast);
  const size_t waiting = broadcast ? broadcast_waiters_ : barrier_waiting_.size();
  if (waiting >= limits_.max_waiters) {
    return ResourceExhaustedError(std::string(rpc) + ": " + Str(limits_.max_waiters) +
                                  " callers are already blocked here (the most allowed); "
                                  "retry later");
  }
  if (limits_.max_waiters_per_peer != 0) {
    const auto& counts = peer_waiters_[broadcast];
    auto it = counts.find(peer);
    if (it != counts.end() && it->second >= limits_.max_waiters_per_peer) {
      return ResourceExhaustedError(std::string(rpc) + ": " +
                                    Str(limits_.max_waiters_per_peer) + " calls from " +
                                    (peer.empty() ? std::string("this peer") : peer) +
                                    " are already blocked here (the most allowed per client "
                                    "address); retry later");
    }
  }
  return OkStatus();
}

SyncCoordinator::Ticket SyncCoordinator::AddWaiterLocked(Waiter w) {
  if (limits_.max_waiters_per_peer != 0) ++peer_waiters_[w.broadcast][w.peer];
  if (w.broadcast) ++broadcast_waiters_;
  const Ticket ticket = next_ticket_++;
  waiters_.emplace(ticket, std::move(w));
  return ticket;
}

SyncDone SyncCoordinator::TakeLocked(std::map<Ticket, Waiter>::iterator it) {
  Waiter& w = it->second;
  if (limits_.max_waiters_per_peer != 0) {
    auto& counts = peer_waiters_[w.broadcast];
    auto p = counts.find(w.peer);
    if (p != counts.end() && --p->second == 0) counts.erase(p);
  }
  if (w.broadcast) --broadcast_waiters_;
  SyncDone done = std::move(w.done);
  waiters_.erase(it);
  return done;
}

void SyncCoordinator::WithdrawLocked(std::map<Ticket, Waiter>::iterator it, const Status& status,
                                     Ready* ready) {
  const Waiter& w = it->second;
  if (!w.broadcast) {
    barrier_waiting_.erase(it->first);
  } else {
    auto op_it = broadcasts_.find(w.op_id);
    if (op_it != broadcasts_.end()) {
      BroadcastOp& op = op_it->second;
      op.participated[w.rank] = false;
      --op.num_participants;
      std::erase(op.waiting, it->first);
      if (op.num_participants == 0 && !op.has_value) broadcasts_.erase(op_it);
    }
  }
  ready->emplace_back(TakeLocked(it), status);
}

SyncCoordinator::Ticket SyncCoordinator::StartBarrier(uint32_t num_workers, SyncDone done,
                                                      const std::string& peer) {
  if (num_workers == 0 || num_workers > kMaxBroadcastParticipants) {
    done(InvalidArgumentError("Barrier: num_workers must be in [1, " +
                              Str(kMaxBroadcastParticipants) + "], got " + Str(num_workers)));
    return kFinished;
  }
  Ready ready;
  Ticket ticket = kFinished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Status refused;
    if (shut_down_) {
      refused = UnavailableError("Barrier: controller is shutting down");
    } else if (session_size_ != 0 && num_workers != session_size_) {
      refused = InvalidArgumentError("Barrier: num_workers " + Str(num_workers) +
                                     " differs from the session's " + Str(session_size_) +
                                     " workers (set when its rank 0 started it)");
    } else if (!barrier_waiting_.empty() && num_workers != barrier_num_workers_) {
      refused = InvalidArgumentError("Barrier: num_workers " + Str(num_workers) +
                                     " differs from the pending barrier's num_workers " +
                                     Str(barrier_num_workers_));
    } else if (barrier_waiting_.size() + 1 < num_workers) {
      // A caller that does not complete the barrier waits: refuse it if that is one too many.
      refused = WaitBoundLocked(/*broadcast=*/false, peer);
    }
    if (!refused.ok()) {
      ready.emplace_back(std::move(done), refused);
    } else if (barrier_waiting_.size() + 1 == num_workers) {
      for (Ticket t : barrier_waiting_) {
        ready.emplace_back(TakeLocked(waiters_.find(t)), uint64_t{0});
      }
      barrier_waiting_.clear();
      ready.emplace_back(std::move(done), uint64_t{0});
    } else {
      barrier_num_workers_ = num_workers;
      ticket = AddWaiterLocked(Waiter{std::move(done), false, 0, 0, peer});
      barrier_waiting_.insert(ticket);
    }
  }
  Run(ready);
  return ticket;
}

SyncCoordinator::Ticket SyncCoordinator::StartBroadcast(uint64_t value, uint32_t rank,
                                                        uint32_t num_workers, uint32_t root,
                                                        SyncDone done, const std::string& peer) {
  Status invalid;
  if (num_workers == 0 || num_workers > kMaxBroadcastParticipants) {
    invalid = InvalidArgumentError("Broadcast: num_workers must be in [1, " +
                                   Str(kMaxBroadcastParticipants) + "], got " + Str(num_workers));
  } else if (rank >= num_workers) {
    invalid = InvalidArgumentError("Broadcast: rank must be < num_workers (" + Str(num_workers) +
                                   "), got " + Str(rank));
  } else if (root >= num_workers) {
    invalid = InvalidArgumentError("Broadcast: root must be < num_workers (" + Str(num_workers) +
                                   "), got " + Str(root));
  }
  if (!invalid.ok()) {
    done(invalid);
    return kFinished;
  }
  Ready ready;
  Ticket ticket = kFinished;
  auto refuse = [&](Status s) {
    ready.emplace_back(std::move(done), std::move(s));
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) {
      refuse(UnavailableError("Broadcast: controller is shutting down"));
    } else {
      // The oldest live operation this rank has not participated in.
      auto it = broadcasts_.begin();
      Status mismatch;
      for (; it != broadcasts_.end(); ++it) {
        const BroadcastOp& op = it->second;
        if (rank < op.num_workers && op.participated[rank]) continue;
        if (op.num_workers != num_workers) {
          mismatch = InvalidArgumentError(
              "Broadcast: num_workers " + Str(num_workers) + " differs from pending operation " +
              Str(it->first) + "'s num_workers " + Str(op.num_workers) +
              " (left over from an earlier job? reset the sync state)");
        } else if (op.root != root) {
          mismatch = InvalidArgumentError(
              "Broadcast: root " + Str(root) + " differs from pending operation " +
              Str(it->first) + "'s root " + Str(op.root) +
              " (left over from an earlier job? reset the sync state)");
        }
        break;
      }
      const bool will_wait =
          rank != root && (it == broadcasts_.end() || !it->second.has_value);
      const Status bound = will_wait ? WaitBoundLocked(/*broadcast=*/true, peer) : OkStatus();
      if (!mismatch.ok()) {
        refuse(mismatch);
      } else if (!bound.ok()) {
        refuse(bound);
      } else if (it == broadcasts_.end() &&
                 broadcasts_.size() >= limits_.max_pending_broadcasts) {
        refuse(ResourceExhaustedError(
            "Broadcast: " + Str(limits_.max_pending_broadcasts) +
            " broadcast operations are already pending (the most allowed); their ranks must "
            "call (or the sync state be reset) before a new one can start"));
      } else {
        if (it == broadcasts_.end()) {
          BroadcastOp op;
          op.num_workers = num_workers;
          op.root = root;
          op.participated.assign(num_workers, false);
          it = broadcasts_.emplace(next_broadcast_id_++, std::move(op)).first;
        }
        const uint64_t id = it->first;
        BroadcastOp& op = it->second;
        op.participated[rank] = true;
        ++op.num_participants;
        if (will_wait) {
          ticket = AddWaiterLocked(Waiter{std::move(done), true, id, rank, peer});
          op.waiting.push_back(ticket);
        } else {
          if (rank == root) {
            op.has_value = true;
            op.value = value;
            for (Ticket t : op.waiting) {
              ready.emplace_back(TakeLocked(waiters_.find(t)), op.value);
              ++op.num_reads;
            }
            op.waiting.clear();
          }
          ready.emplace_back(std::move(done), op.value);
          if (++op.num_reads == op.num_workers) broadcasts_.erase(it);
        }
      }
    }
  }
  Run(ready);
  return ticket;
}

void SyncCoordinator::GiveUp(Ticket ticket, GiveUpReason reason) {
  Ready ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = waiters_.find(ticket);
    if (it == waiters_.end()) return;
    const std::string rpc = Name(it->second.broadcast);
    const std::string progress = ProgressLocked(it->second);
    WithdrawLocked(it,
                   reason == GiveUpReason::kCancelled
                       ? CancelledError(rpc + ": call cancelled; " + progress)
                       : DeadlineExceededError(rpc + ": deadline passed; " + progress),
                   &ready);
  }
  Run(ready);
}

size_t SyncCoordinator::CancelWaiters(const std::string& why, bool broadcasts) {
  Ready ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto next = std::next(it);
      if (!it->second.broadcast || broadcasts) {
        WithdrawLocked(it, CancelledError(std::string(Name(it->second.broadcast)) +
                                          ": call cancelled; " + why),
                       &ready);
      }
      it = next;
    }
  }
  const size_t n = ready.size();
  Run(ready);
  return n;
}

Status SyncCoordinator::SetSessionSize(uint32_t num_workers) {
  if (num_workers > kMaxBroadcastParticipants) {
    return InvalidArgumentError("session size must be in [0, " +
                                Str(kMaxBroadcastParticipants) + "], got " + Str(num_workers));
  }
  Ready ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    session_size_ = num_workers;
    if (num_workers == 0 || shut_down_) return OkStatus();
    const std::string why = " differs from the session's " + Str(num_workers) +
                            " workers (a new session started)";
    if (!barrier_waiting_.empty() && barrier_num_workers_ != num_workers) {
      const Status s = InvalidArgumentError(
          "Barrier: num_workers " + Str(barrier_num_workers_) + why);
      for (Ticket t : std::set<Ticket>(barrier_waiting_)) {
        WithdrawLocked(waiters_.find(t), s, &ready);
      }
    }
    for (auto it = broadcasts_.begin(); it != broadcasts_.end();) {
      auto next = std::next(it);
      if (it->second.num_workers != num_workers) {
        const Status s = InvalidArgumentError("Broadcast: operation " + Str(it->first) +
                                              "'s num_workers " + Str(it->second.num_workers) +
                                              why);
        for (Ticket t : it->second.waiting) ready.emplace_back(TakeLocked(waiters_.find(t)), s);
        broadcasts_.erase(it);
      }
      it = next;
    }
  }
  Run(ready);
  return OkStatus();
}

uint32_t SyncCoordinator::session_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return session_size_;
}

StatusOr<uint64_t> SyncCoordinator::Wait(const std::function<Ticket(SyncDone)>& start,
                                         const WaitControl& wait) {
  struct Box {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<SyncResult> result;
  };
  auto box = std::make_shared<Box>();
  const Ticket ticket = start([box](SyncResult r) {
    std::lock_guard<std::mutex> lock(box->mu);
    box->result.emplace(std::move(r));
    box->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(box->mu);
  bool gave_up = false;
  while (!box->result.has_value()) {
    if (gave_up) {
      // GiveUp ran the callback, or the operation completed first and its callback is on
      // its way: either way it comes without a deadline.
      box->cv.wait(lock);
      continue;
    }
    std::optional<GiveUpReason> reason;
    const TimePoint now = Clock::now();
    if (wait.cancelled && wait.cancelled()) {
      reason = GiveUpReason::kCancelled;
    } else if (now >= wait.deadline) {
      reason = GiveUpReason::kDeadline;
    }
    if (reason.has_value()) {
      gave_up = true;
      lock.unlock();
      GiveUp(ticket, *reason);
      lock.lock();
      continue;
    }
    TimePoint until = now + (wait.cancelled ? Duration(wait.poll_interval) : Duration(kMaxSleep));
    // Compare as durations from now so that TimePoint::max() cannot overflow.
    if (wait.deadline - now < until - now) until = wait.deadline;
    box->cv.wait_until(lock, until);
  }
  return std::move(*box->result);
}

Status SyncCoordinator::Barrier(uint32_t num_workers, const WaitControl& wait) {
  return Wait([&](SyncDone done) { return StartBarrier(num_workers, std::move(done)); }, wait)
      .status();
}

StatusOr<uint64_t> SyncCoordinator::Broadcast(uint64_t value, uint32_t rank,
                                              uint32_t num_workers, uint32_t root,
                                              const WaitControl& wait) {
  return Wait(
      [&](SyncDone done) {
        return StartBroadcast(value, rank, num_workers, root, std::move(done));
      },
      wait);
}

void SyncCoordinator::ClearLocked(const Status& barrier_status, const Status& broadcast_status,
                                  Ready* ready) {
  for (auto& [ticket, w] : waiters_) {
    ready->emplace_back(std::move(w.done), w.broadcast ? broadcast_status : barrier_status);
  }
  waiters_.clear();
  peer_waiters_[0].clear();
  peer_waiters_[1].clear();
  barrier_waiting_.clear();
  broadcasts_.clear();
  broadcast_waiters_ = 0;
  session_size_ = 0;
}

void SyncCoordinator::Shutdown() {
  Ready ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    ClearLocked(UnavailableError("Barrier: controller is shutting down"),
                UnavailableError("Broadcast: controller is shutting down"), &ready);
  }
  Run(ready);
}

void SyncCoordinator::Reset() {
  Ready ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ClearLocked(AbortedError("Barrier: sync state was reset while waiting"),
                AbortedError("Broadcast: sync state was reset while waiting"), &ready);
  }
  Run(ready);
}

uint32_t SyncCoordinator::NumBarrierWaiters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint32_t>(barrier_waiting_.size());
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
  return waiters_.empty() && broadcasts_.empty();
}

}  // namespace switchml::controller
