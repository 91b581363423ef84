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
// than SWITCHML_CALL_TIMEOUT_MS without progress.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "config.h"
#include "switchml/context.h"

namespace switchml::mpi {
namespace {

// One MPI_Iallreduce routed through SwitchML. Owned jointly by the completion side (whoever
// calls MPI_Grequest_complete: the job's completion callback, an MPIX callback, MPI_Iallreduce
// itself in inline mode, or MPI_Finalize; see CompleteOp) and by MPI (until free_fn): the last
// to let go deletes it.
struct AsyncOp {
  AllReduceHandle handle;
  MPI_Request request = MPI_REQUEST_NULL;
  int error_code = MPI_SUCCESS;  // written before MPI_Grequest_complete, read by query_fn after
  std::atomic<bool> completed{false};  // MPI_Grequest_complete called (exactly once)
  std::atomic<int> refs{2};
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
};

enum class AsyncMode { kNone, kInline, kThread, kMpix };

#ifdef MPICH_VERSION
constexpr bool kHaveMpixGrequest = true;
#else
constexpr bool kHaveMpixGrequest = false;
#endif

struct State {
  InterposerConfig config;
  int rank = -1;
  int size = 0;
  // Set at the end of MPI_Init when every rank has a working Context; cleared at MPI_Finalize.
  // Only MPI_Init/MPI_Finalize write ctx; routed calls read it while active is true.
  std::atomic<bool> active{false};
  std::unique_ptr<Context> ctx;
  AsyncMode async_mode = AsyncMode::kNone;  // set with active
  // kThread and kMpix: requests not completed yet; MPI_Finalize waits for them (the program may
  // have freed one with MPI_Request_free before it completed).
  std::mutex pending_mu;
  std::unordered_set<AsyncOp*> pending;  // guarded by pending_mu
  std::string disabled_reason = "MPI_Init not intercepted yet";
  Counters counters;
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

// Completes op's generalized request with the job's result `s`, once (later calls do nothing),
// and drops the completion side's reference.
void CompleteOp(AsyncOp* op, const Status& s) {
  if (op->completed.exchange(true, std::memory_order_acq_rel)) return;
  if (!s.ok()) op->error_code = RecordFailure("MPI_Iallreduce", s);
  {
    std::lock_guard lock(S().pending_mu);
    S().pending.erase(op);
  }
  PMPI_Grequest_complete(op->request);
  op->Unref();
}

int QueryFn(void* extra_state, MPI_Status* status) {
  auto* op = static_cast<AsyncOp*>(extra_state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = op->error_code;
  return op->error_code;
}

int FreeFn(void* extra_state) {
  static_cast<AsyncOp*>(extra_state)->Unref();
  return MPI_SUCCESS;
}

// A SwitchML job cannot be withdrawn once the other workers may have contributed to it.
int CancelFn(void* /*extra_state*/, int /*complete*/) { return MPI_SUCCESS; }

#ifdef MPICH_VERSION
// MPIX poll function: never blocks. MPI_Wait calls it in a loop until the request completes,
// so yield the core to the SwitchML threads while the job runs.
int PollFn(void* extra_state, MPI_Status* /*status*/) {
  auto* op = static_cast<AsyncOp*>(extra_state);
  if (op->completed.load(std::memory_order_acquire)) return MPI_SUCCESS;
  if (op->handle.IsDone()) {
    CompleteOp(op, op->handle.status());
  } else {
    std::this_thread::yield();
  }
  return MPI_SUCCESS;
}

// MPIX wait function: blocks until every given job is done (at most the job timeout each)
// and completes their requests. `timeout` is ignored, as ROMIO's wait functions do.
int WaitFn(int count, void** states, double /*timeout*/, MPI_Status* /*status*/) {
  for (int i = 0; i < count; ++i) {
    auto* op = static_cast<AsyncOp*>(states[i]);
    if (!op->completed.load(std::memory_order_acquire)) CompleteOp(op, op->handle.Wait());
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
constexpr int kNumShared = 4;
void SharedSettings(const InterposerConfig& c, long long out[kNumShared]) {
  out[0] = c.options.num_worker_threads;
  out[1] = c.options.window_packets;
  out[2] = c.options.elements_per_packet;
  out[3] = static_cast<long long>(c.min_elements);
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
                                             "SWITCHML_ELEMENTS_PER_PACKET", "SWITCHML_MPI_MIN_ELEMENTS"};
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
    if (c.completion == CompletionMode::kInline) {
      s.async_mode = AsyncMode::kInline;
    } else if (kHaveMpixGrequest) {
      s.async_mode = AsyncMode::kMpix;
    } else if (provided >= MPI_THREAD_MULTIPLE) {
      s.async_mode = AsyncMode::kThread;
    } else {
      s.async_mode = AsyncMode::kInline;
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
  if (s.config.enabled && s.config.completion == CompletionMode::kAsync && !kHaveMpixGrequest) {
    // Completion callbacks call MPI_Grequest_complete from SwitchML's worker threads,
    // concurrently with the application.
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
               "retransmissions=%llu async_completion=%s fallback_reason=\"%s\"\n",
               s.rank, s.ctx ? "on" : "off", (unsigned long long)routed,
               (unsigned long long)k.routed_allreduce.load(), (unsigned long long)k.routed_iallreduce.load(),
               (unsigned long long)k.routed_bytes.load(), (unsigned long long)k.routed_errors.load(),
               (unsigned long long)passed, (unsigned long long)k.passthrough_allreduce.load(),
               (unsigned long long)k.passthrough_iallreduce.load(), (unsigned long long)st.packets_sent,
               (unsigned long long)st.retransmissions,
               kAsyncModeNames[static_cast<int>(s.async_mode)],
               s.disabled_reason.c_str());
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
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  k.routed_allreduce.fetch_add(1, std::memory_order_relaxed);
  k.routed_bytes.fetch_add(uint64_t(count) * 4, std::memory_order_relaxed);
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  switchml::Status s = S().ctx->AllReduce(in, recvbuf, size_t(count), *type);
  if (!s.ok()) return switchml::mpi::ReportError(comm, "MPI_Allreduce", s);
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                                          MPI_Request* request) {
  using switchml::mpi::AsyncOp;
  auto type = switchml::mpi::RoutedType(count, datatype, op, comm);
  auto& st = S();
  auto& k = st.counters;
  if (!type) {
    k.passthrough_iallreduce.fetch_add(1, std::memory_order_relaxed);
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  k.routed_iallreduce.fetch_add(1, std::memory_order_relaxed);
  k.routed_bytes.fetch_add(uint64_t(count) * 4, std::memory_order_relaxed);
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  auto* op_state = new AsyncOp;
  op_state->handle = st.ctx->AllReduceAsync(in, recvbuf, size_t(count), *type);
  if (op_state->handle.IsDone() && !op_state->handle.status().ok()) {
    // Rejected at submission (bad arguments, non-finite input, broken context): report it now.
    // (A rejected call still fails on the other ranks and uses its call number there.)
    switchml::Status s = op_state->handle.status();
    delete op_state;
    return switchml::mpi::ReportError(comm, "MPI_Iallreduce", s);
  }
  using switchml::mpi::AsyncMode;
  int rc;
#ifdef MPICH_VERSION
  if (st.async_mode == AsyncMode::kMpix) {
    rc = PMPIX_Grequest_start(switchml::mpi::QueryFn, switchml::mpi::FreeFn, switchml::mpi::CancelFn,
                              switchml::mpi::PollFn, switchml::mpi::WaitFn, op_state, request);
  } else
#endif
  {
    rc = PMPI_Grequest_start(switchml::mpi::QueryFn, switchml::mpi::FreeFn, switchml::mpi::CancelFn, op_state,
                             request);
  }
  if (rc != MPI_SUCCESS) {
    // The job is already submitted (the other ranks count on it): let it finish first.
    (void)op_state->handle.Wait();
    delete op_state;
    return rc;
  }
  op_state->request = *request;
  switch (st.async_mode) {
    case AsyncMode::kThread: {
      {
        std::lock_guard lock(st.pending_mu);
        st.pending.insert(op_state);
      }
      // Runs on the SwitchML worker thread that finishes the job, or here if it already has.
      // CompleteOp never blocks: a short lock, MPI_Grequest_complete, maybe a line on stderr.
      op_state->handle.OnComplete([op_state](const switchml::Status& s) { switchml::mpi::CompleteOp(op_state, s); });
      break;
    }
    case AsyncMode::kMpix: {
      std::lock_guard lock(st.pending_mu);
      st.pending.insert(op_state);
      break;
    }
    default:
      // Finish the job here and hand back a completed request.
      switchml::mpi::CompleteOp(op_state, op_state->handle.Wait());
      break;
  }
  return MPI_SUCCESS;
}

__attribute__((visibility("default"))) int MPI_Finalize(void) {
  auto& st = S();
  // Outstanding MPI_Iallreduce requests must be complete by now (MPI requires it); whatever is
  // left (requests freed with MPI_Request_free before completion) is completed here, each
  // within its job timeout. Destroying the context below joins SwitchML's worker threads, so
  // no completion callback is still inside MPI_Grequest_complete when PMPI_Finalize runs.
  std::vector<switchml::mpi::AsyncOp*> left;
  {
    std::lock_guard lock(st.pending_mu);
    left.assign(st.pending.begin(), st.pending.end());
    // A completion callback may complete one meanwhile (and delete it if MPI freed it already):
    // keep each alive. Still pending under this lock = its completion side has not let go.
    for (auto* op : left) op->refs.fetch_add(1, std::memory_order_relaxed);
  }
  for (auto* op : left) {
    switchml::mpi::CompleteOp(op, op->handle.Wait());
    op->Unref();
  }
  st.active.store(false, std::memory_order_release);
  if (st.config.print_stats) switchml::mpi::PrintStats();
  st.ctx.reset();
  return PMPI_Finalize();
}

}  // extern "C"
