// controller/sync_calls.h — Barrier/Broadcast RPCs that wait without a thread (internal to
// the controller).
//
// The reference Sync service (session_service.cc) and the job-scoped calls of the JobService
// (job_service.cc) serve Barrier and Broadcast with gRPC's callback API: a waiting call is a
// SyncCallReactor, a ticket in its SyncCoordinator and, when it has a deadline, an entry in a
// CallTimer; no thread waits for it. Whoever ends the operation (the caller that completes it,
// the CallTimer at the deadline, gRPC's OnCancel when the client goes, a reset or shutdown)
// runs the coordinator's callback, which answers the call.
//
//   CallTimer timer;                                       // one thread per service
//   auto* reactor = new SyncCallReactor(context, sync, &timer, HandlerDeadline(*context),
//                                       [](SyncResult r) { return ToGrpcStatus(r.status()); });
//   reactor->Start([&](SyncDone done) { return sync->StartBarrier(n, std::move(done)); });
//   return reactor;                                        // from the callback method
//
// The reference Sync service names each call's peer by its client address (PeerHost), so that
// SyncLimits::max_waiters_per_peer keeps one host from taking all of job 0's max_waiters.
//
// Thread-safety: CallTimer is thread-safe. A SyncCallReactor is driven by
// gRPC and by its coordinator's callback, from any threads.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/clock.h"
#include "controller/sync_coordinator.h"
#include "switchml/status.h"

namespace switchml::controller {

// Waiting handlers give up slightly before the call's deadline (1/10 of the time left, at most
// kMaxEarlyEnd): the server's status, which says how many workers had arrived, then reaches
// the client before its own deadline fires, and the caller is already withdrawn when the
// client sees the error and might retry.
inline constexpr std::chrono::milliseconds kMaxEarlyEnd{100};

// Runs functions at given times on one thread of its own.
class CallTimer {
 public:
  CallTimer();
  // Stops; functions not yet run are dropped.
  ~CallTimer();
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

  // Runs `fn` on the timer's thread at `when` (at once if it has passed). Returns an id for
  // Cancel; 0 (and `fn` never runs) when `when` is TimePoint::max() or the timer stopped.
  // `fn` runs without the timer's lock held and must not block for long.
  uint64_t Schedule(TimePoint when, std::function<void()> fn);
  // Drops a function that has not run yet (no-op for 0, or one that ran or is running).
  void Cancel(uint64_t id);
  // Number of scheduled functions (for tests).
  size_t size() const;

 private:
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::map<std::pair<TimePoint, uint64_t>, std::function<void()>> queue_;
  std::unordered_map<uint64_t, TimePoint> when_;
  std::thread thread_;  // last: starts once the rest exists
};

// The address part of a gRPC peer string, the key of SyncLimits::max_waiters_per_peer
// ("ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1", "ipv6:[::1]:5000" -> "ipv6:[::1]"; a string
// without a port is returned whole).
std::string PeerHost(const std::string& peer);

// When a waiting handler gives up (kMaxEarlyEnd), on our steady clock.
TimePoint HandlerDeadline(const grpc::ServerContextBase& context);

// One Barrier or Broadcast call. Created by a callback method; deletes itself when gRPC is
// done with it.
class SyncCallReactor final : public grpc::ServerUnaryReactor {
 public:
  // Turns the coordinator's result into the call's status (and fills the response); runs
  // exactly once, before the reactor finishes the call.
  using Reply = std::function<grpc::Status(SyncResult)>;

  SyncCallReactor(std::shared_ptr<SyncCoordinator> sync, CallTimer* timer, TimePoint deadline,
                  Reply reply)
      : sync_(std::move(sync)), timer_(timer), deadline_(deadline), reply_(std::move(reply)) {}

  // Joins the operation through `start` (StartBarrier or StartBroadcast with the callback it
  // is given) and arms the deadline. Call once, from the callback method, before returning.
  void Start(const std::function<SyncCoordinator::Ticket(SyncDone)>& start);
  // Answers at once without joining anything.
  void FinishNow(const grpc::Status& status);

  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  void Complete(SyncResult result);

  const std::shared_ptr<SyncCoordinator> sync_;
  CallTimer* const timer_;
  const TimePoint deadline_;
  Reply reply_;
  std::mutex mu_;
  bool finished_ = false;          // Complete has run (or is running)
  bool cancelled_ = false;         // OnCancel came before the ticket was known
  SyncCoordinator::Ticket ticket_ = SyncCoordinator::kFinished;
  uint64_t timer_id_ = 0;
};

}  // namespace switchml::controller
