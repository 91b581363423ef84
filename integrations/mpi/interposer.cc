// integrations/mpi/interposer.cc — libswitchml_mpi.so, a PMPI interposer that routes
// MPI_Allreduce / MPI_Iallreduce with MPI_SUM on MPI_FLOAT / MPI_INT over MPI_COMM_WORLD
// through SwitchML and passes every other call to PMPI.
//
//   mpirun.openmpi -np 4 -x LD_PRELOAD=libswitchml_mpi.so -x SWITCHML_CONTROLLER=10.0.0.254:50099 ./app
//   mpirun.mpich   -np 4 -genv LD_PRELOAD libswitchml_mpi_mpich.so -genv SWITCHML_CONTROLLER ... ./app
//
// Settings come from environment variables (config.h, README.md). The library is built once
// per MPI implementation: the two have different ABIs (MPI_Comm is a pointer in Open MPI, an
// int in MPICH), so a library built against one cannot be preloaded into the other's programs.
//
// Routing decision (contract C1, docs/protocol.md#c1-identical-call-sequence: every worker
// issues the same job sequence): a call is routed iff SwitchML is up on all ranks (agreed on
// collectively at MPI_Init), comm is MPI_COMM_WORLD itself (not a duplicate), op is MPI_SUM,
// the datatype is MPI_FLOAT or MPI_INT and count >= max(1, SWITCHML_MPI_MIN_ELEMENTS). Only
// arguments that MPI already requires to match across ranks are used, so every rank decides
// the same way for the same call.
//
// MPI_Iallreduce returns a generalized request, completed with MPI_Grequest_complete when the
// SwitchML job is done (AsyncMode):
//  - Open MPI (kThread): the job's completion callback (AllReduceHandle::OnComplete) completes
//    the request, on the SwitchML worker thread that finished the job (or at once in
//    MPI_Iallreduce if it already had). Calling MPI from a thread of ours needs
//    MPI_THREAD_MULTIPLE, so MPI_Init(_thread) asks PMPI for it (and reports the level actually
//    provided to the caller).
//  - MPICH (kMpix): MPIX_Grequest_start with a poll function (called by MPI_Test*, MPI_Wait,
//    MPI_Waitany/some) and a wait function (called by MPI_Waitall), which complete the request
//    from inside the application's own completion call, as ROMIO does; no thread, no
//    MPI_THREAD_MULTIPLE. (A plain generalized request completed from another thread trips an
//    assertion in MPICH 4.0.2's MPI_Waitall when the array also holds MPI_REQUEST_NULL.)
//  - kInline (SWITCHML_MPI_COMPLETION=inline, or Open MPI without MPI_THREAD_MULTIPLE):
//    MPI_Iallreduce runs the job to completion and returns a completed request: correct, no
//    overlap.
// Intercepting MPI_Wait/Test/Waitall/... ourselves was rejected: every completion function
// would need wrapping, and a single one missed hangs the program.
//
// Errors on a routed call: the SwitchML Status is printed on stderr, the communicator's error
// handler is invoked with MPI_ERR_OTHER (by default MPI_ERRORS_ARE_FATAL: the job aborts with
// that message) and, if it returns, MPI_ERR_OTHER is returned. A routed call never waits longer
// than SWITCHML_CALL_TIMEOUT_MS without progress. (A failed switch is not an error with
// failover, below; the host path then waits as long as MPI does.)
//
// Failover (SWITCHML_MPI_FAILOVER=1, the default; README.md "Failover"): a routed call that
// fails because the switch is gone (switchml::Failover::SwitchFailed) moves every rank onto
// MPI's own all-reduce at the same call. The host path (MpiHostPath) runs on a private
// duplicate of MPI_COMM_WORLD made at MPI_Init, so it never mixes with the application's
// traffic; every use of it, every Agree and every routed submission happen under fo_mu, so one
// thread at a time uses it and no call is submitted while a recovery runs. Who agrees:
//  - a blocking MPI_Allreduce (and MPI_Iallreduce in inline mode) whose call failed: the
//    application's thread, in that call (Agree(true));
//  - an asynchronous MPI_Iallreduce: its failure is seen on a SwitchML worker thread (Open MPI's
//    completion callback) or in MPICH's poll/wait callbacks, where no MPI collective may run;
//    they only flag it (SignalFailure) and leave the request incomplete, and the failover
//    thread (started at MPI_Init in those modes; needs MPI_THREAD_MULTIPLE) agrees;
//  - while on the switch path, MPI_Barrier, MPI_Finalize and the MPI_Allreduce on
//    MPI_COMM_WORLD passed to PMPI probe (Agree(false)): they are blocking collectives, which
//    MPI lets synchronise, so every rank reaches them in the same order, and a rank that saw no
//    failure joins there. A pass-through MPI_Iallreduce does not probe: starting a nonblocking
//    collective is local in MPI, and a blocking probe there could deadlock a correct program
//    (rank 0 in MPI_Iallreduce waiting for rank 1, which waits in MPI_Send for rank 0's
//    receive after it) even when nothing failed.
// After the agreement the recovering thread settles every outstanding routed call in call
// order (Resolve: finished by the recovery, or run again with PMPI_Iallreduce on the private
// communicator from its intact input, or failed) and completes its request; every later
// eligible call runs on the private communicator too, so the k-th call after the failure meets
// the k-th on every rank whatever each had submitted when the switch died.
//
// Coming back (SWITCHML_MPI_REJOIN=1, the default; README.md "Coming back"): the recovery starts
// a switchml::SwitchRejoin (rank 0 asks the controller in the background, with backoff, whether
// the job can be served again). Every MPI_Barrier on MPI_COMM_WORLD on the host path polls it on
// the calling thread under fo_mu (RejoinAtBarrier), after its probe: every rank reaches the same
// barriers in the same order, each with every routed call before it settled, so the poll's
// all-gathers on the private communicator meet in the same order on every rank (after any host
// MPI_Iallreduce still outstanding, which every rank started before the barrier too). When rank
// 0's answer is yes and every rank registered again, every rank swaps in the new context and a
// new Failover at that barrier and routes every later call to the switch; the old context's
// calls never start a failover again (RoutedOp::generation).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "switchml/context.h"
#include "switchml/failover.h"
#include "switchml/rejoin.h"

namespace switchml::mpi {
namespace {

// One routed call. Blocking MPI_Allreduce: owned by the caller (refs 1) and, while a recovery
// settles it, by the recovering thread. MPI_Iallreduce: owned jointly by the completion side
// (whoever calls MPI_Grequest_complete: the job's completion callback, an MPIX callback,
// MPI_Iallreduce itself in inline mode, a recovery, or MPI_Finalize; see FinishOp) and by MPI
// (until free_fn): the last to let go deletes it.
struct RoutedOp {
  AllReduceHandle handle;
  bool is_async = false;
  // The call's arguments, for running it again on the host path.
  const void* sendbuf = nullptr;  // MPI_IN_PLACE or the input
  void* recvbuf = nullptr;
  int count = 0;
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  uint64_t seq = 0;  // routed calls on this rank, from 0 (the context's call numbers)
  // The SwitchML context it was submitted to (State::generation then): after a return to the
  // switch, a call of an earlier context is settled already and never starts a failover.
  uint64_t generation = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  int error_code = MPI_SUCCESS;  // written before MPI_Grequest_complete, read by query_fn after
  std::atomic<bool> completed{false};  // MPI_Grequest_complete called (exactly once)
  // A recovery settled the call: rc is its result (written before resolved is set).
  std::atomic<bool> resolved{false};
  int rc = MPI_SUCCESS;
  std::atomic<int> refs{1};
  void Unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

struct Counters {
  std::atomic<uint64_t> routed_allreduce{0};
  std::atomic<uint64_t> routed_iallreduce{0};
  std::atomic<uint64_t> routed_bytes{0};
  std::atomic<uint64_t> routed_errors{0};
  std::atomic<uint64_t> passthrough_allreduce{0};
  std::atomic<uint64_t> passthrough_iallreduce{0};
  // Failover: calls the recovery finished (RecoveryReport [first_call, end_call)), and routed
  // calls this rank ran on MPI's all-reduce itself (RunOnHost ones and every later one).
  std::atomic<uint64_t> recovered_calls{0};
  std::atomic<uint64_t> host_path_calls{0};
  // Of those, calls submitted to the switch that ran again from their input (RunOnHost).
  std::atomic<uint64_t> rerun_calls{0};
  // Moves to MPI's all-reduce, returns to the switch (SWITCHML_MPI_REJOIN), and registrations
  // tried for a return (successful or not).
  std::atomic<uint64_t> failovers{0};
  std::atomic<uint64_t> returns{0};
  std::atomic<uint64_t> rejoin_attempts{0};
};

enum class AsyncMode { kNone, kInline, kThread, kMpix };

#ifdef MPICH_VERSION
constexpr bool kHaveMpixGrequest = true;
#else
constexpr bool kHaveMpixGrequest = false;
#endif

// switchml::HostPath over PMPI on the interposer's private duplicate of MPI_COMM_WORLD (errors
// returned, not fatal). MPI collectives have no deadline: each blocks until every rank joins
// (docs: README.md "Failover", limits).
class MpiHostPath final : public HostPath {
 public:
  explicit MpiHostPath(MPI_Comm comm) : comm_(comm) {}

  StatusOr<std::vector<int64_t>> AllGather(std::span<const int64_t> mine) override {
    int n = 0;
    PMPI_Comm_size(comm_, &n);
    if (mine.size() > size_t(INT_MAX)) return InvalidArgumentError("host path: all-gather of too many values");
    std::vector<int64_t> all(mine.size() * size_t(n));
    const int k = int(mine.size());
    if (int rc = PMPI_Allgather(mine.data(), k, MPI_INT64_T, all.data(), k, MPI_INT64_T, comm_); rc != MPI_SUCCESS) {
      return Error("MPI_Allgather", rc);
    }
    return all;
  }

  Status Broadcast(void* data, size_t bytes, uint32_t root) override {
    auto* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kChunk) {
      const int k = int(std::min(kChunk, bytes - off));
      if (int rc = PMPI_Bcast(p + off, k, MPI_BYTE, int(root), comm_); rc != MPI_SUCCESS) return Error("MPI_Bcast", rc);
    }
    return OkStatus();
  }

  // int32: MPI_UINT32_T sums wrap (defined behaviour), bit for bit the wrapping int32 sum, and
  // integer sums do not depend on the order. float32: MPI_Reduce to rank 0, then MPI_Bcast of
  // its result, so every rank gets the same bits whatever order the reduction takes (the MPI
  // standard only recommends, not requires, that MPI_Allreduce gives every rank the same
  // floating-point result).
  Status AllReduce(void* data, size_t n, DataType type) override {
    auto* p = static_cast<char*>(data);
    const size_t per = kChunk / 4;
    int rank = 0;
    PMPI_Comm_rank(comm_, &rank);
    for (size_t off = 0; off < n; off += per) {
      const int k = int(std::min(per, n - off));
      void* chunk = p + off * 4;
      if (type == DataType::kInt32) {
        if (int rc = PMPI_Allreduce(MPI_IN_PLACE, chunk, k, MPI_UINT32_T, MPI_SUM, comm_); rc != MPI_SUCCESS) {
          return Error("MPI_Allreduce", rc);
        }
      } else if (type == DataType::kFloat32) {
        int rc = rank == 0 ? PMPI_Reduce(MPI_IN_PLACE, chunk, k, MPI_FLOAT, MPI_SUM, 0, comm_)
                           : PMPI_Reduce(chunk, nullptr, k, MPI_FLOAT, MPI_SUM, 0, comm_);
        if (rc != MPI_SUCCESS) return Error("MPI_Reduce", rc);
        if ((rc = PMPI_Bcast(chunk, k, MPI_FLOAT, 0, comm_)) != MPI_SUCCESS) return Error("MPI_Bcast", rc);
      } else {
        return InvalidArgumentError("host path: only int32 and float32 all-reduces");
      }
    }
    return OkStatus();
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 30;  // bytes per MPI call (counts are int)
  static Status Error(const char* call, int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    PMPI_Error_string(rc, text, &len);
    return UnavailableError(std::string("host path: ") + call + " on the interposer's communicator failed: " + text);
  }
  MPI_Comm comm_;
};

struct State {
  InterposerConfig config;
  int rank = -1;
  int size = 0;
  // Set at the end of MPI_Init when every rank has a working Context; cleared at MPI_Finalize.
  // Only MPI_Init/MPI_Finalize write ctx; routed calls read it while active is true.
  std::atomic<bool> active{false};
  std::unique_ptr<Context> ctx;
  AsyncMode async_mode = AsyncMode::kNone;  // set with active
  // Routed calls not settled yet, by call order: MPI_Iallreduce requests not completed (the
  // program may have freed one with MPI_Request_free before it completed: MPI_Finalize waits
  // for them) and, with failover, the blocking call in progress. A recovery settles them all.
  std::mutex pending_mu;
  std::map<uint64_t, RoutedOp*> pending;  // guarded by pending_mu
  std::condition_variable resolved_cv;    // with pending_mu: a RoutedOp::resolved was set
  std::string disabled_reason = "MPI_Init not intercepted yet";
  Counters counters;

  // Failover (set with active when SWITCHML_MPI_FAILOVER=1).
  bool failover_on = false;
  MPI_Comm host_comm = MPI_COMM_NULL;  // private duplicate of MPI_COMM_WORLD
  std::unique_ptr<MpiHostPath> host;
  std::unique_ptr<Failover> fo;  // destroyed before ctx
  // Serialises routed submissions, Agree / recovery, a return to the switch and every use of
  // host_comm.
  std::mutex fo_mu;
  uint64_t next_seq = 0;               // guarded by fo_mu
  // Coming back (SWITCHML_MPI_REJOIN=1): created at a failover, polled at every MPI_Barrier on
  // the host path; a return replaces ctx and fo under fo_mu and fo_ptr_mu and bumps generation.
  // FailoverApplies (also on SwitchML worker threads, without fo_mu) reads fo under fo_ptr_mu.
  std::unique_ptr<SwitchRejoin> rejoin;  // guarded by fo_mu
  std::mutex fo_ptr_mu;
  std::atomic<uint64_t> generation{0};
  uint64_t ctx_first_call = 0;  // routed calls before ctx started (call #N in logs); fo_mu
  uint64_t rejoin_logged_attempt = 0;  // fo_mu
  std::atomic<bool> on_host{false};    // recovered: every eligible call runs on host_comm
  std::atomic<bool> gave_up{false};    // the agreement or the recovery failed: calls fail
  std::atomic<bool> failure_seen{false};  // a routed call of this rank failed with SwitchFailed
  // The failover thread (async modes kThread / kMpix): agrees for failures flagged where no
  // collective may run.
  std::thread fo_thread;
  std::mutex signal_mu;
  std::condition_variable signal_cv;
  bool fo_stop = false;       // guarded by signal_mu
  std::string first_failure;  // guarded by signal_mu
};

// Never destroyed: MPI calls from atexit handlers or other static destructors stay safe.
State& S() {
  static State* s = new State;
  return *s;
}

// Counts and prints a failed routed call. Returns MPI_ERR_OTHER. Nothing sticky here: a call
// one rank rejects (bad input) fails on every rank and leaves the context usable, and any other
// failure breaks the context, which then fails every later call itself (switchml/context.h).
int RecordFailure(const char* call, const Status& status) {
  State& s = S();
  s.counters.routed_errors.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "switchml-mpi: rank %d: %s via SwitchML failed: %s\n", s.rank, call,
               status.ToString().c_str());
  return MPI_ERR_OTHER;
}

// Completes op's generalized request with `rc`, once (later calls do nothing), and drops the
// completion side's reference. FinishOp: rc known; CompleteOp: from the job's status.
void FinishOpOnce(RoutedOp* op, int rc) {
  op->error_code = rc;
  {
    std::lock_guard lock(S().pending_mu);
    S().pending.erase(op->seq);
  }
  PMPI_Grequest_complete(op->request);
  op->Unref();
}
void FinishOp(RoutedOp* op, int rc) {
  if (op->completed.exchange(true, std::memory_order_acq_rel)) return;
  FinishOpOnce(op, rc);
}
void CompleteOp(RoutedOp* op, const Status& s) {
  if (op->completed.exchange(true, std::memory_order_acq_rel)) return;
  FinishOpOnce(op, s.ok() ? MPI_SUCCESS : RecordFailure("MPI_Iallreduce", s));
}

// Whether a failed routed call is one failover handles (the switch is gone and nothing gave up).
// A call of a context that a return to the switch replaced never is (the recovery settled it).
bool FailoverApplies(const RoutedOp* op, const Status& status) {
  State& s = S();
  if (status.ok() || !s.failover_on || s.gave_up.load(std::memory_order_acquire)) return false;
  std::lock_guard lock(s.fo_ptr_mu);
  return op->generation == s.generation.load(std::memory_order_acquire) && s.fo && s.fo->SwitchFailed(status);
}

// Flags a switch failure seen where no collective may run (a SwitchML worker thread, an MPIX
// callback): the failover thread agrees.
void SignalFailure(const Status& status) {
  State& s = S();
  {
    std::lock_guard lock(s.signal_mu);
    if (s.first_failure.empty()) s.first_failure = status.ToString();
    s.failure_seen.store(true, std::memory_order_release);
  }
  s.signal_cv.notify_all();
}

// A routed call on the host communicator, to completion. fo_mu held. Started as
// PMPI_Iallreduce, like a routed MPI_Iallreduce after the failure: MPI never matches a blocking
// collective with a nonblocking one, and the same call may be a rerun of an MPI_Iallreduce on
// one rank and a later MPI_Iallreduce (or an MPI_Allreduce rerun) on another.
int HostAllreduceLocked(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype) {
  State& s = S();
  s.counters.host_path_calls.fetch_add(1, std::memory_order_relaxed);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, s.host_comm, &req);
  if (rc == MPI_SUCCESS) rc = PMPI_Wait(&req, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    s.counters.routed_errors.fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr, "switchml-mpi: rank %d: MPI_Allreduce on the host path failed with MPI error %d\n",
                 s.rank, rc);
  }
  return rc;
}

// After an agreement (fo_mu held): the result of one outstanding routed call. `failure` not OK:
// the recovery failed, so does the call.
int Resolve(RoutedOp* op, const Status& failure) {
  State& s = S();
  const char* name = op->is_async ? "MPI_Iallreduce" : "MPI_Allreduce";
  if (!failure.ok()) return RecordFailure(name, failure);
  Status st = op->handle.Wait();  // done: the recovery waited for every call
  if (st.ok()) return MPI_SUCCESS;
  if (s.fo->RunOnHost(op->handle)) {
    s.counters.rerun_calls.fetch_add(1, std::memory_order_relaxed);
    return HostAllreduceLocked(op->sendbuf, op->recvbuf, op->count, op->datatype);
  }
  return RecordFailure(name, st);
}

// Hands a settled call's result to whoever completes it.
void Publish(RoutedOp* op, int rc) {
  State& s = S();
  if (op->is_async && s.async_mode != AsyncMode::kMpix) {
    FinishOp(op, rc);  // MPI_Grequest_complete from here (MPI_THREAD_MULTIPLE in kThread)
    return;
  }
  // Blocking calls: their caller reads rc. MPIX requests: PollFn/WaitFn complete them.
  {
    std::lock_guard lock(s.pending_mu);
    op->rc = rc;
    op->resolved.store(true, std::memory_order_release);
  }
  s.resolved_cv.notify_all();
}

// Settles every outstanding routed call in call order (see Resolve).
void ResolveAll(const Status& failure) {
  State& s = S();
  std::vector<RoutedOp*> ops;
  {
    std::lock_guard lock(s.pending_mu);
    for (auto& [seq, op] : s.pending) {
      if (op->resolved.load(std::memory_order_acquire) || op->completed.load(std::memory_order_acquire)) continue;
      // Still pending under this lock: its owners have not let go.
      op->refs.fetch_add(1, std::memory_order_relaxed);
      ops.push_back(op);
    }
  }
  for (RoutedOp* op : ops) {
    if (!op->completed.load(std::memory_order_acquire)) Publish(op, Resolve(op, failure));
    op->Unref();
  }
}

// The agreement (fo_mu held): `failed` = this rank's own call failed with SwitchFailed (`why`),
// else a probe at a synchronisation point. On a recovery, settles every outstanding call and
// moves this rank onto the host path; on an error, fails them and gives up.
void RecoverLocked(bool failed, const Status& why = OkStatus()) {
  State& s = S();
  if (s.on_host.load(std::memory_order_acquire) || s.gave_up.load(std::memory_order_acquire)) return;
  std::string cause;
  if (failed) {
    std::lock_guard lock(s.signal_mu);
    if (s.first_failure.empty() && !why.ok()) s.first_failure = why.ToString();
    cause = s.first_failure;
  }
  auto agreed = s.fo->Agree(failed);
  if (!agreed.ok()) {
    s.gave_up.store(true, std::memory_order_release);
    std::fprintf(stderr,
                 "switchml-mpi: rank %d: error: the switch failed and moving to MPI's own all-reduce failed: %s\n",
                 s.rank, agreed.status().ToString().c_str());
    ResolveAll(agreed.status());
    return;
  }
  if (!agreed->has_value()) return;  // nobody failed
  const RecoveryReport& r = **agreed;
  if (cause.empty()) {
    cause = "rank " + std::to_string(r.failed_ranks.empty() ? 0u : r.failed_ranks[0]) +
            " found it; this rank learned of it at a synchronisation point";
  }
  s.counters.recovered_calls.fetch_add(r.end_call - r.first_call, std::memory_order_relaxed);
  s.counters.failovers.fetch_add(1, std::memory_order_relaxed);
  // Call numbers count this rank's routed calls from 0 (the context's own from ctx_first_call).
  const uint64_t base = s.ctx_first_call;
  std::string finished = "no call left for the recovery to finish";
  if (r.end_call > r.first_call) {
    finished = "calls #" + std::to_string(base + r.first_call) + " to #" + std::to_string(base + r.end_call - 1) +
               " finished by the recovery";
  }
  std::fprintf(stderr,
               "switchml-mpi: rank %d: the switch failed (%s); calls from #%llu on run on MPI's own all-reduce (%s)\n",
               s.rank, cause.c_str(), (unsigned long long)(base + r.end_call), finished.c_str());
  ResolveAll(OkStatus());
  s.on_host.store(true, std::memory_order_release);
  if (s.config.rejoin) {
    // Coming back: rank 0 starts asking the controller; the ranks agree at MPI_Barrier.
    RejoinOptions ro = s.config.rejoin_options;
    ro.poll_every_calls = 1;  // every MPI_Barrier on the host path (RejoinAtBarrier)
    auto started = SwitchRejoin::Start(s.ctx->options(), *s.host, ro);
    if (started.ok()) {
      s.rejoin = std::move(*started);
      s.rejoin_logged_attempt = 0;
    } else {
      std::fprintf(stderr, "switchml-mpi: rank %d: cannot come back to the switch later: %s\n", s.rank,
                   started.status().ToString().c_str());
    }
  }
}

// At MPI_Barrier on MPI_COMM_WORLD, after Probe, on the calling thread (SWITCHML_MPI_REJOIN=1):
// while on the host path, every rank is at the same barrier with every routed call before it
// settled (the recovery settled the switch's; later ones ran on host_comm), so the SwitchRejoin
// all-gathers on host_comm meet in the same order on every rank. When every rank registered
// again, all of them move back to the switch here, with a new context and a new Failover.
void RejoinAtBarrier() {
  State& s = S();
  if (!s.failover_on || !s.config.rejoin || !s.on_host.load(std::memory_order_acquire)) return;
  std::lock_guard lock(s.fo_mu);
  if (!s.rejoin || !s.on_host.load(std::memory_order_acquire) || s.gave_up.load(std::memory_order_acquire)) return;
  auto back = s.rejoin->Poll();
  if (!back.ok()) {
    // The host path itself failed: the calls on it will say so; stop trying.
    std::fprintf(stderr, "switchml-mpi: rank %d: stopped trying to come back to the switch: %s\n", s.rank,
                 back.status().ToString().c_str());
    s.rejoin.reset();
    return;
  }
  const std::optional<RejoinAttempt> attempt = s.rejoin->last_attempt();
  if (attempt && attempt->number != s.rejoin_logged_attempt) {
    s.rejoin_logged_attempt = attempt->number;
    s.counters.rejoin_attempts.fetch_add(1, std::memory_order_relaxed);
    if (!attempt->succeeded) std::fprintf(stderr, "switchml-mpi: rank %d: %s\n", s.rank, attempt->description.c_str());
  }
  if (!*back) return;
  const uint64_t barriers = s.rejoin->polls();
  std::unique_ptr<Failover> old_fo;
  std::unique_ptr<Context> old_ctx;
  {
    // A completion callback of the old context may be in FailoverApplies: from here on it sees
    // another generation and leaves fo alone.
    std::lock_guard ptr_lock(s.fo_ptr_mu);
    old_fo = std::move(s.fo);
    old_ctx = std::move(s.ctx);
    s.ctx = std::move(*back);
    s.fo = std::make_unique<Failover>(*s.ctx, *s.host);
    s.generation.fetch_add(1, std::memory_order_acq_rel);
  }
  s.rejoin.reset();  // stops rank 0's questions
  old_fo.reset();    // before the context it refers to
  old_ctx.reset();   // joins its worker threads: none of its callbacks runs after this
  {
    // What its calls flagged is settled (they were the old context's).
    std::lock_guard signal_lock(s.signal_mu);
    s.failure_seen.store(false, std::memory_order_release);
    s.first_failure.clear();
  }
  s.ctx_first_call = s.counters.routed_allreduce.load() + s.counters.routed_iallreduce.load();
  s.counters.returns.fetch_add(1, std::memory_order_relaxed);
  s.on_host.store(false, std::memory_order_release);
  std::fprintf(stderr,
               "switchml-mpi: rank %d: back on the switch at MPI_Barrier %llu on the host path (%s); calls from #%llu "
               "on run on the switch (the stats line's returns= counts the returns)\n",
               s.rank, (unsigned long long)barriers, attempt ? attempt->description.c_str() : "rejoined",
               (unsigned long long)s.ctx_first_call);
}

// At a synchronisation point every rank reaches in the same order (MPI_Barrier, MPI_Finalize,
// a pass-through MPI_Allreduce on MPI_COMM_WORLD): while on the switch path, agree.
void Probe() {
  State& s = S();
  if (!s.failover_on || s.on_host.load(std::memory_order_acquire) || s.gave_up.load(std::memory_order_acquire)) {
    return;
  }
  std::lock_guard lock(s.fo_mu);
  RecoverLocked(s.failure_seen.load(std::memory_order_acquire));
}

void FailoverThread() {
  State& s = S();
  for (;;) {
    {
      std::unique_lock lock(s.signal_mu);
      s.signal_cv.wait(lock, [&] {
        return s.fo_stop || (s.failure_seen.load() && !s.on_host.load() && !s.gave_up.load());
      });
      if (s.fo_stop) return;
    }
    std::lock_guard lock(s.fo_mu);
    // Still to do (an application thread may have agreed meanwhile, and a return to the switch
    // clears what the old context's calls flagged): sets on_host or gave_up.
    if (s.failure_seen.load(std::memory_order_acquire)) RecoverLocked(true);
  }
}

int QueryFn(void* extra_state, MPI_Status* status) {
  auto* op = static_cast<RoutedOp*>(extra_state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = op->error_code;
  return op->error_code;
}

int FreeFn(void* extra_state) {
  static_cast<RoutedOp*>(extra_state)->Unref();
  return MPI_SUCCESS;
}

// A SwitchML job cannot be withdrawn once the other workers may have contributed to it.
int CancelFn(void* /*extra_state*/, int /*complete*/) { return MPI_SUCCESS; }

#ifdef MPICH_VERSION
// MPIX poll function: never blocks. MPI_Wait calls it in a loop until the request completes,
// so yield the core to the SwitchML threads while the job runs. A switch failure is only
// flagged here (no collective may run inside MPI_Test/MPI_Wait): the failover thread settles
// the call and a later poll completes it.
int PollFn(void* extra_state, MPI_Status* /*status*/) {
  auto* op = static_cast<RoutedOp*>(extra_state);
  if (op->completed.load(std::memory_order_acquire)) return MPI_SUCCESS;
  if (op->resolved.load(std::memory_order_acquire)) {
    FinishOp(op, op->rc);
  } else if (op->handle.IsDone()) {
    Status st = op->handle.status();
    if (FailoverApplies(op, st)) {
      SignalFailure(st);
      std::this_thread::yield();
    } else {
      CompleteOp(op, st);
    }
  } else {
    std::this_thread::yield();
  }
  return MPI_SUCCESS;
}

// MPIX wait function: blocks until every given job is done (at most the job timeout each)
// and completes their requests; a call the switch failed waits for the failover thread to settle
// it. `timeout` is ignored, as ROMIO's wait functions do.
int WaitFn(int count, void** states, double /*timeout*/, MPI_Status* /*status*/) {
  State& s = S();
  for (int i = 0; i < count; ++i) {
    auto* op = static_cast<RoutedOp*>(states[i]);
    if (op->completed.load(std::memory_order_acquire)) continue;
    Status st = op->handle.Wait();
    if (!op->resolved.load(std::memory_order_acquire) && FailoverApplies(op, st)) {
      SignalFailure(st);
      std::unique_lock lock(s.pending_mu);
      // A failure the failover thread cannot settle makes it give up, which settles every call.
      s.resolved_cv.wait(lock, [&] { return op->resolved.load() || op->completed.load(); });
    }
    if (op->resolved.load(std::memory_order_acquire)) {
      FinishOp(op, op->rc);
    } else {
      CompleteOp(op, op->handle.status());
    }
  }
  return MPI_SUCCESS;
}
#endif
// The SwitchML type for a routable call, or nullopt: pass it to PMPI.
std::optional<DataType> RoutedType(int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  State& s = S();
  if (!s.active.load(std::memory_order_acquire)) return std::nullopt;
  if (comm != MPI_COMM_WORLD || op != MPI_SUM) return std::nullopt;
  if (count < 1 || static_cast<uint64_t>(count) < s.config.min_elements) return std::nullopt;
  if (datatype == MPI_FLOAT) return DataType::kFloat32;
  if (datatype == MPI_INT) return DataType::kInt32;
  return std::nullopt;
}

// A failed blocking routed call: records it, invokes comm's error handler, returns MPI_ERR_OTHER.
int ReportError(MPI_Comm comm, const char* call, const Status& status) {
  RecordFailure(call, status);
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

// Settings that must be equal on every rank; checked at MPI_Init.
constexpr int kNumShared = 6;
void SharedSettings(const InterposerConfig& c, long long out[kNumShared]) {
  out[0] = c.options.num_worker_threads;
  out[1] = c.options.window_packets;
  out[2] = c.options.elements_per_packet;
  out[3] = static_cast<long long>(c.min_elements);
  out[4] = c.failover ? 1 : 0;
  out[5] = c.rejoin ? 1 : 0;  // MPI_Barrier polls on the host path only where it is on
}

// Collective over MPI_COMM_WORLD: decides on every rank the same way whether SwitchML is used.
// Returns MPI_SUCCESS, or MPI_ERR_OTHER if SwitchML is unavailable and SWITCHML_MPI_FALLBACK=fail
// (after invoking MPI_COMM_WORLD's error handler).
int SetUp(int provided) {
  State& s = S();
  PMPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &s.size);
  const InterposerConfig& c = s.config;
  if (s.rank == 0) {
    for (const std::string& note : c.notes) std::fprintf(stderr, "switchml-mpi: note: %s\n", note.c_str());
  }

  // Round 1: settings. Any rank with bad or missing settings disables routing everywhere
  // before anyone contacts the controller (which would otherwise wait for it in a barrier).
  std::string local_reason;
  bool warn = true;  // a silent pass-through only when nobody asked for SwitchML
  if (!c.status.ok()) {
    local_reason = "bad setting: " + c.status.message();
  } else if (!c.enabled) {
    local_reason = "SWITCHML_CONTROLLER is not set";
    warn = c.fallback == FallbackMode::kFail;
  }
  // [0] = 1 if this rank cannot route; [1] = 1 if it wants SwitchML (controller set);
  // then max and -min of each shared setting.
  long long mine[2 + 2 * kNumShared], all[2 + 2 * kNumShared];
  long long shared[kNumShared];
  SharedSettings(c, shared);
  mine[0] = local_reason.empty() ? 0 : 1;
  mine[1] = c.enabled || !c.status.ok() ? 1 : 0;
  for (int i = 0; i < kNumShared; ++i) {
    mine[2 + 2 * i] = shared[i];
    mine[3 + 2 * i] = -shared[i];
  }
  PMPI_Allreduce(mine, all, 2 + 2 * kNumShared, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  std::string reason = local_reason;
  if (reason.empty() && all[0] != 0) reason = "SwitchML settings are bad or missing on another rank";
  if (all[1] != 0) warn = true;  // someone asked for SwitchML and will not get it
  if (reason.empty()) {
    static const char* kNames[kNumShared] = {"SWITCHML_THREADS", "SWITCHML_WINDOW",
                                             "SWITCHML_ELEMENTS_PER_PACKET", "SWITCHML_MPI_MIN_ELEMENTS",
                                             "SWITCHML_MPI_FAILOVER", "SWITCHML_MPI_REJOIN"};
    for (int i = 0; i < kNumShared; ++i) {
      if (all[2 + 2 * i] != -all[3 + 2 * i]) {
        reason = std::string(kNames[i]) + " differs across ranks (must be equal on all)";
        break;
      }
    }
  }

  // Round 2: start SwitchML (Context::Create ends with a controller barrier), then agree that
  // it started everywhere.
  if (reason.empty()) {
    Options o = c.options;
    o.rank = static_cast<uint32_t>(s.rank);
    o.num_workers = static_cast<uint32_t>(s.size);
    o.shadow_copies = c.failover;  // only a recovery needs them (equal on every rank: checked)
    auto ctx = Context::Create(o);
    int ok = ctx.ok() ? 1 : 0, all_ok = 0;
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ctx.ok()) {
      reason = "cannot start SwitchML with controller " + o.controller_address + ": " + ctx.status().ToString();
    } else if (!all_ok) {
      reason = "SwitchML could not start on another rank";
    } else {
      s.ctx = std::move(*ctx);
    }
  }

  if (reason.empty()) {
    // MPIX callbacks need no thread of ours, but failover then needs the failover thread, which
    // calls MPI concurrently with the program.
    if (c.completion == CompletionMode::kInline) {
      s.async_mode = AsyncMode::kInline;
    } else if (kHaveMpixGrequest && (!c.failover || provided >= MPI_THREAD_MULTIPLE)) {
      s.async_mode = AsyncMode::kMpix;
    } else if (!kHaveMpixGrequest && provided >= MPI_THREAD_MULTIPLE) {
      s.async_mode = AsyncMode::kThread;
    } else {
      s.async_mode = AsyncMode::kInline;
    }
    // Collective, like everything here: every rank has the same SWITCHML_MPI_FAILOVER.
    if (c.failover && PMPI_Comm_dup(MPI_COMM_WORLD, &s.host_comm) != MPI_SUCCESS) {
      std::fprintf(stderr, "switchml-mpi: rank %d: warning: MPI_Comm_dup failed: failover is off\n", s.rank);
      s.host_comm = MPI_COMM_NULL;
    }
    if (c.failover && s.host_comm != MPI_COMM_NULL) {
      PMPI_Comm_set_errhandler(s.host_comm, MPI_ERRORS_RETURN);
      s.host = std::make_unique<MpiHostPath>(s.host_comm);
      s.fo = std::make_unique<Failover>(*s.ctx, *s.host);
      s.failover_on = true;
      if (s.async_mode == AsyncMode::kThread || s.async_mode == AsyncMode::kMpix) {
        s.fo_thread = std::thread(FailoverThread);
      }
    }
    s.disabled_reason.clear();
    s.active.store(true, std::memory_order_release);
    return MPI_SUCCESS;
  }
  s.disabled_reason = reason;
  if (c.fallback == FallbackMode::kFail) {
    std::fprintf(stderr,
                 "switchml-mpi: rank %d: error: SwitchML unavailable and SWITCHML_MPI_FALLBACK=fail: %s\n",
                 s.rank, reason.c_str());
    PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
  }
  if (warn) {
    std::fprintf(stderr, "switchml-mpi: rank %d: warning: passing all calls to PMPI: %s\n", s.rank,
                 reason.c_str());
  }
  return MPI_SUCCESS;
}

// MPI_Init and MPI_Init_thread. `required` < 0: the caller is MPI_Init (no thread level asked).
int InitCommon(int* argc, char*** argv, int required, int* provided) {
  State& s = S();
  s.config = ParseInterposerConfig([](const char* name) { return std::getenv(name); });
  int rc;
  int level = MPI_THREAD_SINGLE;
  if (s.config.enabled && s.config.completion == CompletionMode::kAsync &&
      (!kHaveMpixGrequest || s.config.failover)) {
    // Completion callbacks call MPI_Grequest_complete from SwitchML's worker threads, and the
    // failover thread runs collectives on the interposer's communicator, concurrently with the
    // application.
    rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &level);
  } else if (required >= 0) {
    rc = PMPI_Init_thread(argc, argv, required, &level);
  } else {
    rc = PMPI_Init(argc, argv);
  }
  if (rc != MPI_SUCCESS) return rc;
  if (provided != nullptr) *provided = level;
  return SetUp(level);
}

constexpr const char* kAsyncModeNames[] = {"none", "inline", "thread", "mpix"};

void PrintStats() {
  State& s = S();
  const Counters& k = s.counters;
  Stats st;
  if (s.ctx) st = s.ctx->GetStats();
  const uint64_t routed = k.routed_allreduce.load() + k.routed_iallreduce.load();
  const uint64_t passed = k.passthrough_allreduce.load() + k.passthrough_iallreduce.load();
  std::fprintf(stderr,
               "switchml-mpi stats: rank=%d switchml=%s routed_calls=%llu routed_allreduce=%llu "
               "routed_iallreduce=%llu routed_bytes=%llu routed_errors=%llu passthrough_calls=%llu "
               "passthrough_allreduce=%llu passthrough_iallreduce=%llu packets_sent=%llu "
               "retransmissions=%llu calls_completed=%llu async_completion=%s failover=%s failovers=%llu "
               "recovered_calls=%llu host_path_calls=%llu rerun_calls=%llu returns=%llu rejoin_attempts=%llu "
               "fallback_reason=\"%s\"\n",
               s.rank, s.ctx ? "on" : "off", (unsigned long long)routed,
               (unsigned long long)k.routed_allreduce.load(), (unsigned long long)k.routed_iallreduce.load(),
               (unsigned long long)k.routed_bytes.load(), (unsigned long long)k.routed_errors.load(),
               (unsigned long long)passed, (unsigned long long)k.passthrough_allreduce.load(),
               (unsigned long long)k.passthrough_iallreduce.load(), (unsigned long long)st.packets_sent,
               (unsigned long long)st.retransmissions, (unsigned long long)st.calls_completed,
               kAsyncModeNames[static_cast<int>(s.async_mode)],
               !s.failover_on ? "off" : s.gave_up.load() ? "failed" : s.on_host.load() ? "done" : "ready",
               (unsigned long long)k.failovers.load(), (unsigned long long)k.recovered_calls.load(),
               (unsigned long long)k.host_path_calls.load(), (unsigned long long)k.rerun_calls.load(),
               (unsigned long long)k.returns.load(), (unsigned long long)k.rejoin_attempts.load(),
               s.disabled_reason.c_str());
}


// ---- Routed calls with failover (SWITCHML_MPI_FAILOVER=1) ----

// Before a routed call (fo_mu held): a switch failure this rank already flagged (an
// asynchronous call) is agreed on now rather than submitting to a broken context.
void CatchUpLocked() {
  State& s = S();
  if (!s.on_host.load(std::memory_order_acquire) && s.failure_seen.load(std::memory_order_acquire)) {
    RecoverLocked(true);
  }
}

// Submits `op` (fo_mu held, not on the host path). Returns false if the context refused it
// because it broke with a switch failure before any recovery (the call never reached the
// switch and has no call number: after agreeing, it runs on the host path like any later one).
bool SubmitLocked(RoutedOp* op, DataType type) {
  State& s = S();
  const void* in = op->sendbuf == MPI_IN_PLACE ? op->recvbuf : op->sendbuf;
  op->generation = s.generation.load(std::memory_order_relaxed);  // changes only under fo_mu
  op->handle = s.ctx->AllReduceAsync(in, op->recvbuf, size_t(op->count), type);
  if (op->handle.IsDone() && FailoverApplies(op, op->handle.status())) {
    RecoverLocked(true, op->handle.status());
    return false;
  }
  op->seq = s.next_seq++;
  std::lock_guard lock(s.pending_mu);
  s.pending[op->seq] = op;
  return true;
}

// A submitted call's outcome, waited for on the caller's thread: its own result, or (a switch
// failure) the one the recovery settled, agreeing here if nobody has yet.
int AwaitRouted(RoutedOp* op) {
  State& s = S();
  Status st = op->handle.Wait();
  if (st.ok()) return MPI_SUCCESS;
  if (!op->resolved.load(std::memory_order_acquire) && FailoverApplies(op, st)) {
    std::lock_guard lock(s.fo_mu);
    RecoverLocked(true, st);
  }
  if (op->resolved.load(std::memory_order_acquire)) return op->rc;
  if (op->completed.load(std::memory_order_acquire)) return op->error_code;
  return RecordFailure(op->is_async ? "MPI_Iallreduce" : "MPI_Allreduce", st);
}

int FailoverAllreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, DataType type,
                      MPI_Comm comm) {
  State& s = S();
  auto* op = new RoutedOp;
  op->sendbuf = sendbuf;
  op->recvbuf = recvbuf;
  op->count = count;
  op->datatype = datatype;
  int rc = MPI_SUCCESS;
  bool submitted = false;
  {
    std::lock_guard lock(s.fo_mu);
    CatchUpLocked();
    if (!s.on_host.load(std::memory_order_acquire) && !s.gave_up.load(std::memory_order_acquire)) {
      submitted = SubmitLocked(op, type);
    }
    if (!submitted) {
      if (s.on_host.load(std::memory_order_acquire)) {
        rc = HostAllreduceLocked(sendbuf, recvbuf, count, datatype);
      } else {
        rc = RecordFailure("MPI_Allreduce", FailedPreconditionError("the switch failed and failover failed"));
      }
    }
  }
  if (submitted) {
    rc = AwaitRouted(op);
    std::lock_guard lock(s.pending_mu);
    s.pending.erase(op->seq);
  }
  op->Unref();
  if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
  return rc;
}

// Starts the generalized request of a routed MPI_Iallreduce.
int StartGrequest(RoutedOp* op, MPI_Request* request) {
  int rc;
#ifdef MPICH_VERSION
  if (S().async_mode == AsyncMode::kMpix) {
    rc = PMPIX_Grequest_start(QueryFn, FreeFn, CancelFn, PollFn, WaitFn, op, request);
  } else
#endif
  {
    rc = PMPI_Grequest_start(QueryFn, FreeFn, CancelFn, op, request);
  }
  if (rc == MPI_SUCCESS) op->request = *request;
  return rc;
}

int FailoverIallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, DataType type,
                       MPI_Comm comm, MPI_Request* request) {
  State& s = S();
  auto* op = new RoutedOp;
  op->is_async = true;
  op->refs.store(2);
  op->sendbuf = sendbuf;
  op->recvbuf = recvbuf;
  op->count = count;
  op->datatype = datatype;
  {
    std::lock_guard lock(s.fo_mu);
    CatchUpLocked();
    bool submitted = false;
    if (!s.on_host.load(std::memory_order_acquire) && !s.gave_up.load(std::memory_order_acquire)) {
      submitted = SubmitLocked(op, type);
    }
    if (!submitted) {
      delete op;
      int rc;
      if (s.on_host.load(std::memory_order_acquire)) {
        // A real request on the host communicator; only this thread starts collectives there
        // now (see HostAllreduceLocked).
        s.counters.host_path_calls.fetch_add(1, std::memory_order_relaxed);
        rc = PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, MPI_SUM, s.host_comm, request);
      } else {
        rc = RecordFailure("MPI_Iallreduce", FailedPreconditionError("the switch failed and failover failed"));
      }
      if (rc != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, rc);
      return rc;
    }
    if (op->handle.IsDone() && !op->handle.status().ok()) {
      // Rejected at submission (bad arguments, non-finite input): report it now, as without
      // failover. (A rejected call still fails on the other ranks and uses its call number.)
      Status st = op->handle.status();
      {
        std::lock_guard l(s.pending_mu);
        s.pending.erase(op->seq);
      }
      delete op;
      return ReportError(comm, "MPI_Iallreduce", st);
    }
    // Registered in pending: a recovery from here on settles it. Its request must exist first.
    if (int rc = StartGrequest(op, request); rc != MPI_SUCCESS) {
      {
        std::lock_guard l(s.pending_mu);
        s.pending.erase(op->seq);
      }
      (void)op->handle.Wait();  // the other ranks count on the job: let it finish first
      delete op;
      return rc;
    }
  }
  switch (s.async_mode) {
    case AsyncMode::kThread:
      // Runs on the SwitchML worker thread that finishes the job, or here if it already has.
      // Never blocks: a switch failure is only flagged for the failover thread. A recovery may
      // complete the request first (and the program free it), so the callback holds its own
      // reference.
      op->refs.fetch_add(1, std::memory_order_relaxed);
      op->handle.OnComplete([op](const Status& st) {
        if (FailoverApplies(op, st)) {
          SignalFailure(st);
        } else {
          CompleteOp(op, st);
        }
        op->Unref();
      });
      break;
    case AsyncMode::kMpix:
      break;  // PollFn / WaitFn
    default:
      FinishOp(op, AwaitRouted(op));
      break;
  }
  return MPI_SUCCESS;
}

}  // namespace
}  // namespace switchml::mpi

using switchml::mpi::S;

extern "C" {

__attribute__((visibility("default"))) int MPI_Init(int* argc, char*** argv) {
  return switchml::mpi::InitCommon(argc, argv, -1, nullptr);
}

__attribute__((visibility("default"))) int MPI_Init_thread(int* argc, char*** argv, int required,
                                                           int* provided) {
  return switchml::mpi::InitCommon(argc, argv, required, provided);
}

__attribute__((visibility("default"))) int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  auto type = switchml::mpi::RoutedType(count, datatype, op, comm);
  auto& k = S().counters;
  if (!type) {
    k.passthrough_allreduce.fetch_add(1, std::memory_order_relaxed);
    if (comm == MPI_COMM_WORLD && S().active.load(std::memory_order_acquire)) switchml::mpi::Probe();
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  k.routed_allreduce.fetch_add(1, std::memory_order_relaxed);
  k.routed_bytes.fetch_add(uint64_t(count) * 4, std::memory_order_relaxed);
  if (S().failover_on) return switchml::mpi::FailoverAllreduce(sendbuf, recvbuf, count, datatype, *type, comm);
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  switchml::Status s = S().ctx->AllReduce(in, recvbuf, size_t(count), *type);
  if (!s.ok()) return switchml::mpi::ReportError(comm, "MPI_Allreduce", s);
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                                          MPI_Request* request) {
  using switchml::mpi::RoutedOp;
  auto type = switchml::mpi::RoutedType(count, datatype, op, comm);
  auto& st = S();
  auto& k = st.counters;
  if (!type) {
    k.passthrough_iallreduce.fetch_add(1, std::memory_order_relaxed);
    // No probe here: starting a nonblocking collective must stay local (see the header).
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  k.routed_iallreduce.fetch_add(1, std::memory_order_relaxed);
  k.routed_bytes.fetch_add(uint64_t(count) * 4, std::memory_order_relaxed);
  if (st.failover_on) {
    return switchml::mpi::FailoverIallreduce(sendbuf, recvbuf, count, datatype, *type, comm, request);
  }
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  auto* op_state = new RoutedOp;
  op_state->is_async = true;
  op_state->refs.store(2);
  op_state->handle = st.ctx->AllReduceAsync(in, recvbuf, size_t(count), *type);
  if (op_state->handle.IsDone() && !op_state->handle.status().ok()) {
    // Rejected at submission (bad arguments, non-finite input, broken context): report it now.
    // (A rejected call still fails on the other ranks and uses its call number there.)
    switchml::Status s = op_state->handle.status();
    delete op_state;
    return switchml::mpi::ReportError(comm, "MPI_Iallreduce", s);
  }
  using switchml::mpi::AsyncMode;
  if (int rc = switchml::mpi::StartGrequest(op_state, request); rc != MPI_SUCCESS) {
    // The job is already submitted (the other ranks count on it): let it finish first.
    (void)op_state->handle.Wait();
    delete op_state;
    return rc;
  }
  {
    // Without failover nothing reads seq: a counter of our own keeps the keys distinct.
    std::lock_guard lock(st.pending_mu);
    op_state->seq = st.next_seq++;
  }
  switch (st.async_mode) {
    case AsyncMode::kThread: {
      {
        std::lock_guard lock(st.pending_mu);
        st.pending[op_state->seq] = op_state;
      }
      // Runs on the SwitchML worker thread that finishes the job, or here if it already has.
      // CompleteOp never blocks: a short lock, MPI_Grequest_complete, maybe a line on stderr.
      op_state->handle.OnComplete([op_state](const switchml::Status& s) { switchml::mpi::CompleteOp(op_state, s); });
      break;
    }
    case AsyncMode::kMpix: {
      std::lock_guard lock(st.pending_mu);
      st.pending[op_state->seq] = op_state;
      break;
    }
    default:
      // Finish the job here and hand back a completed request.
      switchml::mpi::CompleteOp(op_state, op_state->handle.Wait());
      break;
  }
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int MPI_Barrier(MPI_Comm comm) {
  // A synchronisation point every rank reaches in the same order: a rank still on the switch
  // path learns here of a switch failure another rank saw (failover); on the host path, the
  // ranks agree here whether to come back to the switch (SWITCHML_MPI_REJOIN).
  if (comm == MPI_COMM_WORLD && S().active.load(std::memory_order_acquire)) {
    switchml::mpi::Probe();
    switchml::mpi::RejoinAtBarrier();
  }
  return PMPI_Barrier(comm);
}

__attribute__((visibility("default"))) int MPI_Finalize(void) {
  auto& st = S();
  // Outstanding MPI_Iallreduce requests must be complete by now (MPI requires it); whatever is
  // left (requests freed with MPI_Request_free before completion) is completed here, each
  // within its job timeout. Destroying the context below joins SwitchML's worker threads, so
  // no completion callback is still inside MPI_Grequest_complete when PMPI_Finalize runs.
  std::vector<switchml::mpi::RoutedOp*> left;
  {
    std::lock_guard lock(st.pending_mu);
    // A completion callback may complete one meanwhile (and delete it if MPI freed it already):
    // keep each alive. Still pending under this lock = its completion side has not let go.
    for (auto& [seq, op] : st.pending) {
      op->refs.fetch_add(1, std::memory_order_relaxed);
      left.push_back(op);
    }
  }
  bool switch_failed = false;
  for (auto* op : left) switch_failed |= switchml::mpi::FailoverApplies(op, op->handle.Wait());
  if (st.failover_on) {
    // The last synchronisation point: agree once more while on the switch path, so a rank
    // whose last calls failed is not left waiting for the others (and settle those calls).
    if (switch_failed) switchml::mpi::SignalFailure(switchml::UnavailableError("a call left at MPI_Finalize"));
    switchml::mpi::Probe();
    {
      std::lock_guard lock(st.signal_mu);
      st.fo_stop = true;
    }
    st.signal_cv.notify_all();
    if (st.fo_thread.joinable()) st.fo_thread.join();
  }
  for (auto* op : left) {
    if (op->resolved.load(std::memory_order_acquire)) {
      switchml::mpi::FinishOp(op, op->rc);
    } else {
      switchml::mpi::CompleteOp(op, op->handle.status());
    }
    op->Unref();
  }
  st.active.store(false, std::memory_order_release);
  if (st.config.print_stats) switchml::mpi::PrintStats();
  st.rejoin.reset();  // stops rank 0's questions (waits for one in flight)
  {
    std::lock_guard lock(st.fo_ptr_mu);  // a late completion callback may be in FailoverApplies
    st.fo.reset();
  }
  st.ctx.reset();
  if (st.host_comm != MPI_COMM_NULL) PMPI_Comm_free(&st.host_comm);
  return PMPI_Finalize();
}

}  // extern "C"
