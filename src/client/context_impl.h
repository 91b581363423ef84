// client/context_impl.h — internals of switchml::Context: call bookkeeping and worker threads.
//
// A call is split into one slice per worker thread (docs/protocol.md#slicing, so thread t of every
// worker streams the same elements through the same slots); each thread has its own FIFO of
// slices and its own SliceEngine + Channel. A call is done when all its slices are done, at
// which point no library thread touches its buffers any more.
//
// A call that any worker rejects (its arguments or input) still runs its first round, flagged,
// and fails on every worker in step (engine.h, "Rejected calls"): it uses its call number,
// writes nothing, and the context stays usable. After any other slice failure, the slot/set
// state of this worker may no longer match the other workers' (contract C4,
// docs/protocol.md#c4-strict-set-alternation), so the context becomes "broken": running slices
// are aborted and new calls fail at once with FAILED_PRECONDITION carrying the first error.
//
// Stream semantics: calls behave as if run one after another in submission order. A call whose
// buffers overlap those of an earlier call that has not finished (it reads what that call writes,
// or writes what it reads or writes) records that call as a dependency; each of its slices waits
// for its dependencies before it starts. When it reads an earlier call's output, its float32
// block exponents are taken by each slice when it starts, from the final data, instead of at
// submission. Calls on disjoint buffers still stream back to back without waiting.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/engine.h"
#include "client/call_state.h"
#include "switchml/failover.h"
#include "client/worker.h"
#include "switchml/context.h"
#include "control/job_layout.h"
#include "control/switch_control.h"
#include "transport/channel.h"

namespace switchml::client {

// Runs one OnComplete callback; noexcept: an exception leaving it terminates the process.
void RunCallback(const std::function<void(const Status&)>& fn, const Status& result) noexcept;

class ContextImpl {
 public:
  // What the control plane knows about a context's first error, e.g. that the switch tore
  // the job down ("; job 3 has ended: torn down by the switch: ..."), or nothing; and whether
  // the switch is unreachable (the error then becomes UNAVAILABLE). Called once per context,
  // on a worker thread, when the first slice fails; may block for a short RPC. Every failing
  // slice with the same status code (the other worker threads that timed out at the same
  // time) waits for it and gets the same explanation.
  using FailureExplainer = std::function<control::FailureExplanation(const Status&)>;

  // Builds a context over already-open channels (one per worker thread) talking to a switch
  // at `switch_endpoint`: used by tests with the loopback fabric. `options` must be valid.
  // Thread t uses the slots of the one-switch layout of the options' threads and window.
  static std::unique_ptr<Context> CreateWithChannels(
      const Options& options, std::vector<std::unique_ptr<transport::Channel>> channels,
      transport::Endpoint switch_endpoint, FailureExplainer explain_failure = {});
  // Where each worker thread sends and which slots it uses: what a registration gives.
  struct Routes {
    // One per worker thread, or one for every thread (a switch with several I/O threads, or
    // the shards of a job, serve each thread at its own endpoint).
    std::vector<transport::Endpoint> endpoints;
    // When not empty, one per endpoint naming it in errors (e.g. "switch shard 1 of 2
    // (10.0.0.2:48864)"; default "switch <endpoint>").
    std::vector<std::string> names;
    // Which slots each thread uses (JobLayout::ThreadSlots); must have the options' threads
    // and window.
    control::JobLayout layout;
  };
  // The routes a registration's answer gives: the job's layout (its slots and shards, the
  // options' threads and window) and one route per thread. default_switch_ip stands for a
  // switch that reports IP 0 (bound to the wildcard address: reached where the controller
  // is). FailedPrecondition when the window does not fit the job's slots, Internal when the
  // answer contradicts the layout.
  static StatusOr<Routes> RoutesFor(const Options& options, const control::SwitchInfo& info,
                                    uint32_t default_switch_ip);
  // Used by Context::Create after registration and by the loopback cluster.
  static std::unique_ptr<Context> CreateWithChannels(
      const Options& options, std::vector<std::unique_ptr<transport::Channel>> channels,
      Routes routes, FailureExplainer explain_failure = {});

  ~ContextImpl();
  AllReduceHandle Submit(const void* in, void* out, size_t n, DataType type, ReduceOp op);
  Stats GetStats() const;
  const Options& options() const { return options_; }

  // Called by workers when a slice ended. `in_step`: it ended with this worker's slot state
  // still agreeing with every other worker's (SliceEngine::ended_in_step()); a failure that is
  // not in step breaks the context.
  void OnSliceDone(const std::shared_ptr<CallState>& call, const Status& s, bool in_step);
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  Status broken_status() const;

  static AllReduceHandle MakeHandle(std::shared_ptr<CallState> s) { return AllReduceHandle(std::move(s)); }
  static ContextImpl& Of(Context& c) { return *c.impl_; }

  // Finishes, on the host path, every call the switch did not finish after the context broke
  // (docs/reliability.md, "Surviving a failing switch"). Every rank of the job calls it, each after
  // its own context broke; it waits until this context's calls have stopped, then, with
  // collectives on `host`: (1) all-gathers every slot's shadow copy (which packet its last
  // completed round belongs to) and how far each thread got; (2) for a packet some ranks
  // completed and others not (they are one round behind on its slot), the lowest rank that has
  // it broadcasts its shadow payload and the others complete the packet from it as a result
  // from the switch would (int32 converted, float32 dequantized with the same scale); (3) packets
  // no rank completed are all-reduced on the host path from their inputs, which are intact (a
  // packet's output is written only at its completion), range by range; (4) the handles of the
  // calls submitted on every rank then report OK (or the failure every rank agrees on: a call
  // some rank rejected, calls whose element counts or types differ). Every rank ends with
  // identical results for every element. Afterwards the context refuses new calls
  // (FAILED_PRECONDITION naming the recovery); the caller runs them on the host path.
  // Errors: FAILED_PRECONDITION (the context has not failed, or was already recovered), the
  // host path's errors, INTERNAL (the ranks' states contradict the protocol). Not to be called
  // from a completion callback.
  StatusOr<RecoveryReport> Recover(HostPath& host);
  // Breaks a healthy context as a failure would (no-op if already broken): its running calls
  // stop at once, its queued ones fail without starting. Used when another rank found the switch
  // failed (Failover::Agree), so that this rank can recover with the others.
  void Break(const Status& why);
  // Tests on the loopback fabric: how a failure is explained (as Context::Create's controller
  // query would). Call before the first call.
  void SetFailureExplainerForTests(FailureExplainer f) { explain_failure_ = std::move(f); }
  // The call behind a handle (for Failover::RunOnHost).
  static const CallState& StateOf(const AllReduceHandle& h) { return *h.state_; }
  static bool HasState(const AllReduceHandle& h) { return h.state_ != nullptr; }

 private:
  ContextImpl(const Options& options, transport::Endpoint switch_endpoint);
  AllReduceHandle Failed(Status s);
  // A call refused because the context broke: marked for the host path (RunOnHost).
  AllReduceHandle FailedBroken(Status s);
  // Blocks until fewer than max_calls_in_flight calls are queued or running. FAILED_PRECONDITION
  // if the context broke meanwhile.
  Status WaitForInflightRoom();

  Options options_;
  transport::Endpoint switch_endpoint_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex submit_mu_;     // call ids and slice order are assigned atomically per call
  uint64_t next_call_id_ = 0;
  // Calls submitted and maybe not finished, in order (guarded by submit_mu_; done ones are
  // dropped at the next submission). At most options_.max_calls_in_flight entries.
  std::deque<std::shared_ptr<CallState>> pending_;
  std::mutex inflight_mu_;   // taken by OnSliceDone, never while holding submit_mu_ for long
  std::condition_variable inflight_cv_;
  uint32_t inflight_ = 0;    // calls queued or running (guarded by inflight_mu_)
  std::atomic<bool> broken_{false};
  std::atomic<bool> recovered_{false};  // Recover ran (or runs): new calls are refused
  std::mutex recover_mu_;
  mutable std::mutex broken_mu_;
  Status broken_status_;
  FailureExplainer explain_failure_;  // may be empty
  std::once_flag explain_once_;
  StatusCode explained_code_ = StatusCode::kOk;  // written once, under explain_once_
  control::FailureExplanation explanation_;      // likewise
  std::atomic<uint64_t> calls_submitted_{0}, calls_completed_{0}, calls_failed_{0};
  // Calls counted in calls_failed_ when they finished that Recover then finished OK: Stats
  // report them as calls_recovered and no longer as failed (GetStats).
  std::atomic<uint64_t> calls_recovered_{0};
};

}  // namespace switchml::client
