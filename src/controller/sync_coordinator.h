// controller/sync_coordinator.h — Barrier and Broadcast rendezvous state, free of gRPC.
//
// The gRPC Sync service (session_service.cc) is a thin shell over this class: each handler
// thread calls Barrier() or Broadcast(), which block the calling thread until the operation
// completes, the call's deadline passes, the call is cancelled, or Shutdown() is called.
//
//   SyncCoordinator sync;
//   WaitControl wait{.deadline = Clock::now() + std::chrono::seconds(5)};
//   Status s = sync.Barrier(/*num_workers=*/4, wait);                     // blocks
//   StatusOr<uint64_t> v = sync.Broadcast(42, /*rank=*/0, 4, /*root=*/0, wait);
//
// Semantics (the reference controller's, docs/protocol.md#barrier-and-broadcast, with
// docs/protocol.md#d7-broadcast-bookkeeping-edited-while-iterated fixed):
//
// Barrier: one operation is pending at a time. The first caller opens it with its
//   num_workers; callers block until num_workers calls have arrived, then all are released
//   together and the next call opens a new operation. A caller whose num_workers differs from
//   the pending operation's gets InvalidArgument (and does not join).
//
// Broadcast: operations are kept in a map keyed by a monotonically increasing operation id
//   (= arrival order). A caller joins the oldest live operation in which its rank has not yet
//   participated, or opens a new one. The root stores its value and releases the waiters;
//   every participant returns the root's value. An operation is erased once all num_workers
//   participants have read the value. A caller whose num_workers or root differs from the
//   operation it would join gets InvalidArgument (and does not join).
//
// Giving up (both operations): a blocked caller whose deadline passes returns
//   DeadlineExceeded; one whose `cancelled` predicate turns true (checked every
//   `poll_interval`) returns Cancelled; after Shutdown() every blocked and every later caller
//   returns Unavailable. A caller that gives up *withdraws*: it no longer counts towards the
//   barrier, and it no longer counts as a participant of its broadcast operation (a broadcast
//   operation left with no participant and no value is erased), so a retry joins the same
//   operation again. Withdrawal happens when the waiter wakes, i.e. at its deadline or within
//   one poll interval of the cancellation; an operation that completes before that counts the
//   caller, and the caller then returns OK even if its client is already gone (its reply is
//   lost). A root never blocks, so it never withdraws.
//
// Bounds (every piece of state here is created by client requests): a Barrier's num_workers
//   and a Broadcast's num_workers are at most kMaxBroadcastParticipants; at most
//   SyncLimits::max_pending_broadcasts broadcast operations are live and at most
//   SyncLimits::max_waiters callers are blocked at once. A call that would go beyond a bound
//   gets ResourceExhausted (naming the bound) and changes nothing, so repeated Broadcast calls
//   (e.g. a root that never waits, or callers that never read) cannot grow memory past the
//   bound.
//
// Known limit (inherent to the protocol): a broadcast operation whose value was stored but
// some of whose participants never call (e.g. a job that failed half-way through Bootstrap)
// stays in the map; a later job's ranks would join it, and get InvalidArgument if its
// num_workers or root differ (or its stale value if not). Reset() clears such leftovers (the
// reference's `reset_workers` CLI command does the same); NumPendingBroadcasts() exposes the
// count for monitoring and tests.
//
// Thread-safety: all methods are thread-safe. Blocking calls hold one thread each.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "common/clock.h"
#include "switchml/status.h"

namespace switchml::controller {

// How a blocking call may end early. Defaults: no deadline, never cancelled.
struct WaitControl {
  TimePoint deadline = TimePoint::max();
  // Polled (from the waiting thread only) every poll_interval while blocked; may be empty.
  std::function<bool()> cancelled;
  std::chrono::milliseconds poll_interval{10};
};

// How much state one SyncCoordinator keeps at most (see "Bounds" above).
struct SyncLimits {
  uint32_t max_pending_broadcasts = 1024;  // live broadcast operations
  uint32_t max_waiters = 4096;             // callers blocked in Barrier or Broadcast at once
};

class SyncCoordinator {
 public:
  // Largest num_workers a Barrier or Broadcast accepts (a participation bitmap is allocated
  // per broadcast operation, so the bound keeps a hostile request from allocating gigabytes).
  static constexpr uint32_t kMaxBroadcastParticipants = 1u << 16;

  explicit SyncCoordinator(SyncLimits limits = {}) : limits_(limits) {}
  SyncCoordinator(const SyncCoordinator&) = delete;
  SyncCoordinator& operator=(const SyncCoordinator&) = delete;

  // Blocks until num_workers callers (this one included) have arrived. Errors:
  // InvalidArgument (num_workers == 0 or > kMaxBroadcastParticipants, or differs from the
  // pending operation's), ResourceExhausted (max_waiters callers already blocked),
  // DeadlineExceeded, Cancelled, Unavailable (shut down), Aborted (Reset() while blocked).
  // The messages name the field.
  Status Barrier(uint32_t num_workers, const WaitControl& wait);

  // Returns the root's value once the root has called. Errors: InvalidArgument
  // (num_workers == 0 or > kMaxBroadcastParticipants, rank >= num_workers,
  // root >= num_workers, num_workers/root differ from the operation being joined),
  // ResourceExhausted (max_pending_broadcasts operations live and this call would open one,
  // or max_waiters callers already blocked), DeadlineExceeded, Cancelled, Unavailable (shut down), Aborted (Reset() while blocked).
  StatusOr<uint64_t> Broadcast(uint64_t value, uint32_t rank, uint32_t num_workers,
                               uint32_t root, const WaitControl& wait);

  // Wakes every blocked caller with Unavailable and makes every later call fail the same
  // way; drops all state. Does not wait for the woken callers to return. Idempotent.
  void Shutdown();

  // Forgets every pending barrier and broadcast operation; blocked callers return Aborted.
  // Later calls start afresh. Does not wait for the woken callers to return.
  void Reset();

  // Number of callers currently blocked in Barrier (for tests and monitoring).
  uint32_t NumBarrierWaiters() const;
  // Number of broadcast operations not yet garbage-collected.
  size_t NumPendingBroadcasts() const;
  // Number of callers currently blocked in Broadcast.
  uint32_t NumBroadcastWaiters() const;
  // No caller blocked and no broadcast operation live: dropping this object loses nothing.
  bool Idle() const;
  const SyncLimits& limits() const { return limits_; }

 private:
  struct BroadcastOp {
    uint32_t num_workers = 0;
    uint32_t root = 0;
    std::vector<bool> participated;  // indexed by rank
    uint32_t num_participants = 0;
    bool has_value = false;
    uint64_t value = 0;
    uint32_t num_reads = 0;  // participants that have taken the value
  };

  enum class WaitEnd { kDone, kShutDown, kReset, kCancelled, kDeadline };
  // Blocks on cv_ (lock held on entry and exit) until `done()` holds or the wait must end.
  // Must be entered with the lock held since the caller joined its operation (the reset epoch
  // is sampled on entry).
  WaitEnd WaitLocked(std::unique_lock<std::mutex>& lock, const WaitControl& wait,
                     const std::function<bool()>& done);

  const SyncLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint32_t broadcast_waiters_ = 0;  // callers blocked in Broadcast
  bool shut_down_ = false;
  uint64_t reset_epoch_ = 0;  // incremented by Reset()

  // Barrier: the pending operation (barrier_arrived_ == 0 means none is pending).
  uint32_t barrier_num_workers_ = 0;
  uint32_t barrier_arrived_ = 0;
  uint64_t barrier_generation_ = 0;  // incremented when an operation completes

  // Broadcast: live operations by id (ascending id = arrival order).
  std::map<uint64_t, BroadcastOp> broadcasts_;
  uint64_t next_broadcast_id_ = 0;
};

}  // namespace switchml::controller
