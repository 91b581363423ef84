// controller/sync_coordinator.h — Barrier and Broadcast rendezvous state, free of gRPC.
//
// The gRPC services (session_service.cc for the reference Sync service, job_service.cc for
// the job-scoped calls) are thin shells over this class. A waiting call holds no thread: it
// is a ticket here plus a completion callback, and whoever completes or ends the operation
// (another caller, GiveUp from the server's deadline timer or gRPC's cancellation callback,
// Reset, Shutdown) runs the callback. Blocking wrappers (Barrier(), Broadcast()) exist for
// tests and simple callers:
//
//   SyncCoordinator sync;
//   // Non-blocking: done runs exactly once, maybe before StartBarrier returns.
//   SyncCoordinator::Ticket t = sync.StartBarrier(4, [](SyncResult r) { /* reply */ });
//   sync.GiveUp(t, GiveUpReason::kDeadline);          // at the caller's deadline
//   // Blocking:
//   WaitControl wait{.deadline = Clock::now() + std::chrono::seconds(5)};
//   Status s = sync.Barrier(/*num_workers=*/4, wait);
//   StatusOr<uint64_t> v = sync.Broadcast(42, /*rank=*/0, 4, /*root=*/0, wait);
//
// Semantics (the reference controller's, docs/protocol.md#barrier-and-broadcast, with
// docs/protocol.md#d7-broadcast-bookkeeping-edited-while-iterated fixed):
//
// Barrier: one operation is pending at a time. The first caller opens it with its
//   num_workers; callers wait until num_workers calls have arrived, then all are released
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
// Session size (SetSessionSize; the reference session uses it, service jobs need not since
//   their num_workers comes from the job): once a size n is set, a Barrier with another
//   num_workers gets InvalidArgument naming both, and setting it ends the pending barrier and
//   drops the broadcast operations of another size (their waiters get InvalidArgument): a
//   barrier of a size the session does not have can never complete, and holding it would
//   refuse the session's own workers. Broadcast callers are not checked against the size (a
//   new session's other ranks may call before its rank 0 does).
//
// Giving up (both operations): GiveUp(ticket, kDeadline) ends a waiting call with
//   DeadlineExceeded, GiveUp(ticket, kCancelled) and CancelWaiters with Cancelled; after
//   Shutdown() every waiting and every later caller gets Unavailable, after Reset() every
//   waiting caller gets Aborted. A caller that gives up *withdraws*: it no longer counts
//   towards the barrier, and it no longer counts as a participant of its broadcast operation (a
//   broadcast operation left with no participant and no value is erased), so a retry joins the
//   same operation again. An operation that completes before GiveUp counts the caller (GiveUp
//   is then a no-op), and the caller gets OK even if its client is already gone (its reply is
//   lost). A root never waits, so it never withdraws. The blocking wrappers give up at
//   WaitControl::deadline, or within one poll_interval of `cancelled` turning true.
//
// Bounds (every piece of state here is created by client requests): a Barrier's num_workers
//   and a Broadcast's num_workers are at most kMaxBroadcastParticipants; at most
//   SyncLimits::max_pending_broadcasts broadcast operations are live, and at most
//   SyncLimits::max_waiters callers wait in Barrier and as many in Broadcast, at most
//   max_waiters_per_peer of each naming the same peer (when set). The two operations are
//   bounded apart so that a flood of one (e.g. barriers of a stranger's size) cannot refuse
//   the other (a session's bootstrap starts with a broadcast, which ends such a flood: see
//   "Session size"). A call that would go beyond a bound gets ResourceExhausted (naming the
//   bound) and changes nothing, so repeated Broadcast calls (e.g. a root that never waits, or
//   callers that never read) cannot grow memory past the bound. Calls that do not wait (a
//   root, the caller completing a barrier) are never refused by the waiting bounds. A waiting
//   call costs its ticket, its callback and (in the services) one gRPC call object, not a
//   thread.
//
// Known limit (inherent to the protocol): a broadcast operation whose value was stored but
// some of whose participants never call (e.g. a job that failed half-way through Bootstrap)
// stays in the map; a later job's ranks would join it, and get InvalidArgument if its
// num_workers or root differ (or its stale value if not). Reset() clears such leftovers (the
// reference's `reset_workers` CLI command does the same), and so does a new session size of
// another value; NumPendingBroadcasts() exposes the count for monitoring and tests.
//
// Thread-safety: all methods are thread-safe. Completion callbacks run on the thread of the
// call that completes or ends the operation, never with this object's lock held, so a
// callback may call back into this object.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
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
  uint32_t max_waiters = 4096;  // callers waiting in Barrier at once, and in Broadcast
  // Callers of one peer (the `peer` a call names, e.g. its client's address) waiting in
  // Barrier at once, and in Broadcast; 0 = no per-peer bound.
  uint32_t max_waiters_per_peer = 0;
};

// A Barrier's (value 0) or Broadcast's (the root's value) outcome, and its callback.
using SyncResult = StatusOr<uint64_t>;
using SyncDone = std::function<void(SyncResult)>;

// Why a waiting call ends early (GiveUp).
enum class GiveUpReason { kDeadline, kCancelled };

class SyncCoordinator {
 public:
  // Largest num_workers a Barrier or Broadcast accepts (a participation bitmap is allocated
  // per broadcast operation, so the bound keeps a hostile request from allocating gigabytes).
  static constexpr uint32_t kMaxBroadcastParticipants = 1u << 16;

  // Names one waiting call; kFinished when the call finished before Start* returned.
  using Ticket = uint64_t;
  static constexpr Ticket kFinished = 0;

  explicit SyncCoordinator(SyncLimits limits = {}) : limits_(limits) {}
  SyncCoordinator(const SyncCoordinator&) = delete;
  SyncCoordinator& operator=(const SyncCoordinator&) = delete;

  // Joins the barrier without blocking. `done` runs exactly once: before this returns
  // (kFinished) when the call completes the barrier or is refused, otherwise later, from the
  // thread that completes or ends the operation. Errors (through `done`): InvalidArgument
  // (num_workers == 0 or > kMaxBroadcastParticipants, or differs from the pending
  // operation's or the session size), ResourceExhausted (max_waiters callers already
  // waiting), DeadlineExceeded and Cancelled (GiveUp, CancelWaiters), Unavailable (shut
  // down), Aborted (Reset() while waiting). The messages name the field.
  // `peer` names the caller for SyncLimits::max_waiters_per_peer (calls that do not wait are
  // not counted).
  Ticket StartBarrier(uint32_t num_workers, SyncDone done, const std::string& peer = {});

  // Joins a broadcast without blocking; `done` as for StartBarrier, with the root's value.
  // Errors: InvalidArgument (num_workers == 0 or > kMaxBroadcastParticipants,
  // rank >= num_workers, root >= num_workers, num_workers/root differ from the operation
  // being joined), ResourceExhausted (max_pending_broadcasts operations live and this call
  // would open one, or max_waiters callers already waiting), and those of StartBarrier.
  Ticket StartBroadcast(uint64_t value, uint32_t rank, uint32_t num_workers, uint32_t root,
                        SyncDone done, const std::string& peer = {});

  // Ends a waiting call (it withdraws; its `done` gets DeadlineExceeded or Cancelled with the
  // operation's progress). A no-op when the call has finished already (or the ticket is
  // kFinished or unknown). Does not block.
  void GiveUp(Ticket ticket, GiveUpReason reason);

  // Ends every waiting Barrier call, and every waiting Broadcast call too when
  // `broadcasts`, as GiveUp(kCancelled) would, with `why` in the message. Returns how many.
  size_t CancelWaiters(const std::string& why, bool broadcasts);

  // Sets the session's size (see "Session size" above; 0 = unknown, no check).
  // InvalidArgument unless num_workers <= kMaxBroadcastParticipants.
  Status SetSessionSize(uint32_t num_workers);
  uint32_t session_size() const;

  // Blocking forms of StartBarrier/StartBroadcast: block the calling thread until the call
  // finishes, wait.deadline passes (DeadlineExceeded) or wait.cancelled turns true (Cancelled).
  Status Barrier(uint32_t num_workers, const WaitControl& wait);
  StatusOr<uint64_t> Broadcast(uint64_t value, uint32_t rank, uint32_t num_workers,
                               uint32_t root, const WaitControl& wait);

  // Ends every waiting call with Unavailable and makes every later call fail the same way;
  // drops all state. Idempotent.
  void Shutdown();

  // Forgets every pending barrier and broadcast operation and the session size; waiting
  // callers get Aborted. Later calls start afresh.
  void Reset();

  // Number of callers currently waiting in Barrier (for tests and monitoring).
  uint32_t NumBarrierWaiters() const;
  // Number of broadcast operations not yet garbage-collected.
  size_t NumPendingBroadcasts() const;
  // Number of callers currently waiting in Broadcast.
  uint32_t NumBroadcastWaiters() const;
  // No caller waiting and no broadcast operation live: dropping this object loses nothing.
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
    uint32_t num_reads = 0;       // participants that have taken the value
    std::vector<Ticket> waiting;  // participants waiting for the value
  };
  struct Waiter {
    SyncDone done;
    bool broadcast = false;
    uint64_t op_id = 0;  // broadcast only
    uint32_t rank = 0;   // broadcast only
    std::string peer;
  };
  // Callbacks to run once the lock is released.
  using Ready = std::vector<std::pair<SyncDone, SyncResult>>;
  static void Run(Ready& ready);

  // Refusal of a call that would wait, if a bound forbids it (lock held).
  Status WaitBoundLocked(bool broadcast, const std::string& peer) const;
  // Adds a waiting call (lock held).
  Ticket AddWaiterLocked(Waiter w);
  // Removes a waiting call (lock held) without touching its operation; returns its callback.
  SyncDone TakeLocked(std::map<Ticket, Waiter>::iterator it);
  // Removes a waiting call (lock held), appending its callback with `status` to *ready.
  void WithdrawLocked(std::map<Ticket, Waiter>::iterator it, const Status& status, Ready* ready);
  // The message of a call that gives up, with the progress of its operation (lock held).
  std::string ProgressLocked(const Waiter& w) const;
  // Ends every waiting call with `status` and drops all state (lock held).
  void ClearLocked(const Status& barrier_status, const Status& broadcast_status, Ready* ready);
  StatusOr<uint64_t> Wait(const std::function<Ticket(SyncDone)>& start, const WaitControl& wait);

  const SyncLimits limits_;
  mutable std::mutex mu_;
  bool shut_down_ = false;
  uint32_t session_size_ = 0;  // 0 = unknown
  std::map<Ticket, Waiter> waiters_;  // every waiting call
  Ticket next_ticket_ = 1;
  uint32_t broadcast_waiters_ = 0;
  // Waiting calls per peer (if bounded), [0] Barrier, [1] Broadcast.
  std::map<std::string, uint32_t> peer_waiters_[2];

  // Barrier: the pending operation (no waiter means none is pending).
  uint32_t barrier_num_workers_ = 0;
  std::set<Ticket> barrier_waiting_;

  // Broadcast: live operations by id (ascending id = arrival order).
  std::map<uint64_t, BroadcastOp> broadcasts_;
  uint64_t next_broadcast_id_ = 0;
};

}  // namespace switchml::controller
