// integrations/pytorch/backend.h — a torch.distributed (c10d::Backend, PyTorch 2.x) backend that runs
// all-reduce through a SwitchML switch and everything else through an inner Gloo group.
//
// Python users do not construct this class directly: `import switchml.torch` registers the
// backend name "switchml", after which
//
//   os.environ["SWITCHML_CONTROLLER"] = "10.0.0.254:50099"   # on rank 0 at least
//   dist.init_process_group("switchml", rank=r, world_size=n, init_method=...)
//   model = DistributedDataParallel(model)                   # unchanged
//
// C++ use (PyTorch 2.x c10d::Backend API; `gloo` is a ProcessGroupGloo on PrefixStore("gloo")):
//
//   switchml::pytorch::SwitchMLConfig cfg;  cfg.controller_address = "127.0.0.1:50099";
//   auto pg = c10::make_intrusive<switchml::pytorch::SwitchMLBackend>(
//       store, rank, size, std::chrono::minutes(30), cfg, gloo);   // blocks: session setup
//   std::vector<at::Tensor> ts = {grad};
//   pg->allreduce(ts)->wait();
//
// What goes where:
//   allreduce, allreduce_coalesced  → SwitchML (SUM, AVG) for float32 and int32 directly, and for
//                                     float16 / bfloat16 through a float32 host copy when
//                                     SwitchMLConfig::half_via_switch (default: Gloo, below).
//                                   → the inner Gloo group for what SwitchML cannot aggregate:
//                                     ops MAX, MIN, PRODUCT, BAND, BOR, BXOR (any dtype Gloo
//                                     takes) and dtypes float64, int64, int8, uint8, bool,
//                                     float16 and bfloat16 unless half_via_switch (SUM,
//                                     and AVG of float64 as a Gloo SUM divided here). Counted in
//                                     FallbackCounts() (Python: stats()), logged once per reason.
//   broadcast, allgather(_coalesced), gather, scatter, reduce, reduce_scatter, alltoall,
//   send/recv, barrier              → the inner ProcessGroupGloo (built on PrefixStore("gloo")),
//                                     for the dtypes Gloo takes (float32, float64, float16,
//                                     bfloat16, int8, uint8, int32, int64, bool; send/recv: any).
//   CUDA tensors: the SwitchML all-reduces are staged through pinned host memory in chunks
//   (staging.h, StageCall below); the rest goes to Gloo as for CPU tensors (torch's Gloo takes
//   CUDA tensors for all-reduce and broadcast). Works of CUDA calls have device futures.
//
// Semantics (the same as ProcessGroupGloo's, so results can be compared one to one):
//   - allreduce(tensors): every tensor of the list must have the same dtype and shape; the result,
//     written to every tensor of the list, is the reduction over all tensors of all ranks (the
//     local tensors are summed first, as Gloo does for several inputs).
//   - allreduce_coalesced(tensors): each tensor is reduced on its own (one SwitchML job per
//     tensor, all submitted at once); tensors may differ in shape and dtype. If one of them needs
//     Gloo, the whole call goes to Gloo (one Gloo all-reduce per tensor).
//   - AVG = SUM divided by the group size, in float32 before any conversion back to
//     float16/bfloat16 (float64: in float64). AVG of an integer dtype is rejected (the mean of
//     integers is not an integer; use SUM and divide where truncation is wanted); Gloo has no AVG.
//   - float32 sums are exact up to SwitchML's block quantization (docs/design.md); int32 sums are
//     exact with 32-bit wrap-around.
//   - Stream semantics: the all-reduces of one group behave as if they ran one after another in
//     call order, as NCCL's operations on one stream do. A call whose tensors overlap the memory
//     of an earlier, still pending call sees that call's result (chained async all-reduces on one
//     tensor are correct, whatever the path: in place, float16 staging, AVG, Gloo); calls on
//     disjoint memory run concurrently. How: see Call and StartReadyLocked() below.
// Errors:
//   - at the call (c10::Error → Python exception): a dtype neither SwitchML nor Gloo reduces
//     (int16, ...: TypeError, also for the delegated collectives, where Gloo itself would fail
//     only at wait() without naming it), PREMUL_SUM, AVG of integers or a bitwise op on floats
//     (ValueError), sparse tensors or tensors neither on the CPU nor CUDA, tensors of one call on
//     different devices, mismatched dtypes/shapes in one allreduce list.
//   - at wait() / on the future: a SwitchML job that failed (non-finite float input, timeout,
//     cancelled at shutdown) → RuntimeError naming the status; a failed Gloo fallback → Gloo's
//     error. After a network failure the SwitchML context is broken and every later SwitchML
//     allreduce fails (library contract).
//
// Thread-safety: calls may come from several threads (DDP calls allreduce from autograd
// threads); calls are queued under one lock so that the job order is the call order, which — as
// for every c10d backend — must be the same on every rank.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "staging.h"
#include "switchml/context.h"
#include "switchml/failover.h"
#include "switchml/rejoin.h"

namespace switchml::pytorch {

// The store key under which rank 0 publishes the controller address for the other ranks
// (relative to the store the group is created with, which torch already prefixes per group).
inline constexpr char kControllerStoreKey[] = "switchml/controller";
// Rank 0's settings that decide which calls go to the switch and how they are cut
// (half_via_switch, staging_chunk_bytes), and whether the ranks come back to the switch
// (rejoin): every rank must have the same, or its calls would pair with other calls on the
// switch or the host path (CheckSettingsAgree).
inline constexpr char kSettingsStoreKey[] = "switchml/settings";

// Backend settings; the Python package fills them from SWITCHML_* environment variables.
struct SwitchMLConfig {
  // host:port of the SwitchML controller (session service). Empty on a rank other than 0: use
  // the address rank 0 publishes in the store. Rank 0 must have one.
  std::string controller_address;
  // Passed through to switchml::Options (0 / empty = keep the library's default).
  uint32_t num_worker_threads = 0;
  uint32_t window_packets = 0;
  uint32_t elements_per_packet = 0;
  std::chrono::milliseconds call_timeout{0};
  std::string bind_ip;
  std::string advertise_ip;
  // A job created with `switchml jobs create` (0 / empty: the reference session).
  uint32_t job_id = 0;
  std::string job_token;
  // CUDA tensors are staged through pinned host memory in chunks of this many bytes (0: 4 MiB;
  // see staging.h). Must be equal on every rank (it decides how many SwitchML calls a tensor is).
  int64_t staging_chunk_bytes = 0;
  // Survive a failing switch (docs/reliability.md, "Surviving a failing switch"): when a call
  // fails because the switch, a shard or the controller is gone, every rank finishes the calls
  // in flight on the host path (a second Gloo group given to the constructor) and runs every
  // later all-reduce there. false: such a call fails (RuntimeError at wait()), as every later one.
  bool failover = true;
  // Coming back to the switch after a failover (switchml/rejoin.h): rank 0 asks the controller
  // whether the job can be served again, first after rejoin_min_backoff, doubling up to
  // rejoin_max_backoff; at every barrier() on the host path the ranks agree on its answer and,
  // when yes, register again and move back there. rejoin=false: stay on the host path. 0 =
  // the library's default.
  bool rejoin = true;
  std::chrono::milliseconds rejoin_min_backoff{0};
  std::chrono::milliseconds rejoin_max_backoff{0};
  // float16/bfloat16 SUM/AVG through the switch, widened to float32 (true), or on the inner Gloo
  // group (false, the default): the switch carries 4 bytes per element whatever the dtype, a
  // Gloo ring 2 × 2(n−1)/n, so on bandwidth-bound links Gloo is faster for half precision
  // (measured: docs/training.md). Must be equal on every rank.
  bool half_via_switch = false;
};

// The Work returned by allreduce: completes when every SwitchML job (or Gloo fallback) of the
// call finished and the results were written back. wait() rethrows a failed job as a c10::Error; getFuture()
// gives a Future whose value is the list of output tensors (as Gloo's).
class SwitchMLWork : public c10d::Work {
 public:
  // `devices`: the devices of the outputs (empty for CPU tensors); the future is then a device
  // future: completed with the stream that wrote the results current, it records an event there.
  SwitchMLWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs, std::vector<c10::Device> devices = {});
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // Device works: wait() blocks the host until the results are enqueued back (the switch is a
  // host-side operation), then makes the current stream wait for them (an event, no host sync).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override { return outputs_; }

  // Called once, by whoever completes the call's last part (SwitchMLBackend::CompleteCall:
  // a SwitchML worker thread, a Gloo thread, or the calling thread if everything was already
  // done): marks the work done (with `error` if not null) and then completes the future (whose
  // callbacks run on the calling thread).
  void Complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  bool on_device_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// switchml::HostPath over a c10d Gloo group of `size` ranks; each collective waits at most
// `timeout_ms` as it reads when the collective starts (failover.cc).
std::unique_ptr<switchml::HostPath> MakeGlooHostPath(c10::intrusive_ptr<c10d::Backend> host, int size,
                                                     const std::atomic<int64_t>& timeout_ms);

class SwitchMLBackend : public c10d::Backend {
 public:
  // `gloo` is the inner Gloo group (torch's ProcessGroupGloo on PrefixStore("gloo", store), made
  // by the Python creator: its headers are not part of torch's wheel, so it is used through the
  // Backend interface only). Exchanges the controller address through `store` (rank 0
  // publishes config.controller_address; the others read it when theirs is empty), and creates
  // the SwitchML context (registration with the switch; blocks up to a few rpc timeouts).
  // `timeout` is the group timeout (store reads, waits for earlier calls). Throws c10::Error
  // with the SwitchML status text if the controller cannot be reached or the options are
  // invalid.
  // `host` (may be null: no failover) is a second Gloo group of the same ranks (Python:
  // ProcessGroupGloo on PrefixStore("switchml-host", store)), used only by the failover: the
  // agreement, the recovery and, after a switch failure, every SwitchML all-reduce. It is
  // separate from `gloo` because the recovery runs on a thread of its own at a point that
  // differs between ranks, which would reorder it against the delegated collectives.
  SwitchMLBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout, SwitchMLConfig config,
                  c10::intrusive_ptr<c10d::Backend> gloo, c10::intrusive_ptr<c10d::Backend> host = {});
  // Stops the SwitchML context (jobs still running fail with CANCELLED, their works complete
  // with that error), then waits until every call's work completed (Gloo fallbacks: within
  // Gloo's timeout).
  ~SwitchMLBackend() override;

  const std::string getBackendName() const override { return "switchml"; }
  // destroy_process_group() calls it first: a rank that saw no switch failure joins the others'
  // recovery there (ProbeAtExit), while the inner Gloo groups still connect every rank.
  void shutdown() override { ProbeAtExit(); }

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;

  // Delegated to the inner Gloo group.
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  // Waits (blocking the caller, at most the group timeout) until every all-reduce called before
  // it has completed (SwitchML or Gloo fallback), then runs a Gloo barrier and returns its work.
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // The controller address this rank connected to, and the library's counters.
  const std::string& controller_address() const { return controller_address_; }
  // The counters of the current SwitchML context (a return to the switch starts a new one).
  switchml::Stats GetStats() const;
  const c10::intrusive_ptr<c10d::Backend>& gloo() const { return gloo_; }
  // All-reduce calls sent to the inner Gloo group: ("fallback_allreduces", total) first, then
  // one entry per reason ("fallback_op_max", ..., "fallback_dtype_float64", ...), every reason
  // present (0 if unused). A call counts under one reason: its op if SwitchML lacks it, else the
  // first tensor's dtype SwitchML lacks.
  std::vector<std::pair<std::string, uint64_t>> FallbackCounts() const;
  // The failover's counters: ("failover", times the group moved to the host path),
  // ("failover_recovered_calls", SwitchML calls in flight at a failure that the recovery
  // finished), ("failover_host_calls", SwitchML calls run on the host path),
  // ("failover_returns", times the group came back to the switch), ("failover_rejoin_attempts",
  // registrations tried for that, successful or not), ("on_host_path", 1 while there),
  // ("failover_agreements", agreements this rank ran: probes and its recovery's; the same
  // number on every rank once the ranks agree), ("failover_probes_skipped", probes skipped
  // because no SwitchML all-reduce was called since an agreement found every rank idle).
  std::vector<std::pair<std::string, uint64_t>> FailoverCounts() const;
  // While on the switch path: one agreement with the other ranks (switchml::Failover::Agree),
  // so that a rank that saw no failure joins the others' recovery before it waits for them in
  // a collective (called before every delegated collective, Gloo fallback and barrier, and at
  // destruction), unless no SwitchML all-reduce was called since an agreement at which every
  // rank was idle (failover.cc: why every rank skips the same probes, and why that is safe).
  // No-op on the host path or without failover. Throws if the agreement or the recovery failed.
  void ProbeSwitch(const char* where);
  // Tests and fire drills (Python: _inject_switch_failure): this rank's context breaks as if the
  // switch had failed; the ranks then fail over at the next call or probe. Throws without failover.
  void InjectSwitchFailure();

  // Tests only (Python: _test_staging_*): from now on, SwitchML all-reduces of CPU tensors take
  // the device staging path (chunks of `chunk_bytes`, a staging thread, copies back) with
  // FakeDeviceOps standing in for the device; a chunk's "device copy" not done within
  // `mark_timeout` fails its call. Call before any all-reduce, on every rank alike.
  void EnableTestStaging(int64_t chunk_bytes, std::chrono::milliseconds mark_timeout);
  void SetTestStagingTimeout(std::chrono::milliseconds mark_timeout) { mark_timeout_ms_ = mark_timeout.count(); }
  FakeDeviceOps* test_staging() const { return fake_ops_.get(); }

 private:
  // The bytes a tensor's elements may occupy: [first element, last element + 1) for
  // non-negative strides (exact for contiguous tensors and views, a superset for strided ones).
  using Span = DeviceSpan;

  // The chunk calls of one staged (device) all-reduce: the work completes when the last chunk's
  // result was enqueued back (StagedPartDone).
  struct Staged {
    c10::intrusive_ptr<SwitchMLWork> work;
    DeviceOps* ops = nullptr;
    c10::Device device{c10::kCPU};
    std::vector<Span> spans;
    std::function<void()> finish;  // on the staging stream, after every chunk succeeded
    std::atomic<size_t> parts{0};  // chunk calls not completed, + 1 while being queued
    std::mutex mu;                 // guards error
    std::exception_ptr error;      // the first failed chunk
  };

  // One all-reduce call, in the group's call-ordered queue from the call until its work is
  // complete.
  //
  // Ordering design. The SwitchML job order must be the call order on every rank, and a call
  // must see the results of earlier calls on the same memory. Calls that only hand the caller's
  // tensor to the library in place (direct: float32/int32, contiguous, one tensor, SUM) are
  // ordered by the library itself (a job on memory an earlier pending job uses waits for it). Any
  // other call stages data before its jobs (float16 → float32 copies, local sums of several
  // tensors, non-contiguous gathers) or writes after them (AVG division, copies back), which the
  // library cannot see. Such a call starts (stages and submits) only once every earlier call
  // whose memory overlaps its own has completed; until then it waits in the queue, and so do the
  // calls after it (their SwitchML jobs must not overtake it), and the completion of the
  // conflicting call starts it (CompleteCall, on the thread that completes that call). Calls on
  // disjoint memory are not held back unless a waiting call precedes them. Gloo fallbacks are issued by the calling thread (Gloo's
  // collective order must be the call order too), after waiting for the earlier overlapping
  // calls; they stay in the queue until Gloo finishes, so later overlapping calls wait for them.
  //
  // Completion design. No thread of our own: each SwitchML handle's completion callback
  // (AllReduceHandle::OnComplete) and each Gloo work's future callback counts down `parts`; the
  // part that brings it to zero completes the call (CompleteCall): `finish`, then out of the
  // queue, start what may start now, then the work. Works complete as their calls do, not
  // necessarily in call order. SwitchML runs these callbacks on the worker thread that moves
  // every call's packets, so mu_ is never held while blocking: a call also waits in the queue
  // while starting it could make AllReduceAsync block for backpressure (kMaxJobsInFlight).
  struct Call {
    c10::intrusive_ptr<SwitchMLWork> work;
    std::vector<Span> spans;  // memory of every tensor the call reads or writes
    bool direct = false;      // SwitchML in place, nothing before or after (see above)
    bool started = false;     // guarded by mu_
    uint64_t epoch = 0;       // path_epoch_ when it started (guarded by mu_)
    // Run once, under mu_, when the call may start: stages host copies, submits the SwitchML
    // jobs (filling handles/job_names) or issues the Gloo calls (gloo_works), and may set
    // finish. A throw from a SwitchML call's start becomes its work's error.
    std::function<void(Call&)> start;
    std::vector<switchml::AllReduceHandle> handles;
    std::vector<at::Tensor> job_buffers;  // per handle: the buffer it reduces in place
    std::vector<std::string> job_names;  // "allreduce of tensor 0 (float32, 1000 elements)"
    std::vector<c10::intrusive_ptr<c10d::Work>> gloo_works;
    std::function<void()> finish;  // after every job succeeded, in CompleteCall
    std::exception_ptr error;      // start failed (or the group was closing)
    size_t max_jobs = 0;           // SwitchML jobs its start submits, at most (set at the call)
    std::atomic<size_t> parts{0};  // handles + Gloo works not finished, + 1 while being armed
                                   // (a handle parked by the failover stays unfinished until
                                   // the recovery settles it)
    std::mutex part_mu;            // guards part_error
    std::exception_ptr part_error; // the first failed handle or Gloo work
    // Device calls (staging.h). A staged chunk is not `ready` (guarded by mu_) until the staging
    // thread saw its device→host copy done; until then it holds back the calls after it.
    bool ready = true;
    DeviceOps* ops = nullptr;          // non-CPU tensors: how to reach their device
    c10::Device device{c10::kCPU};
    std::shared_ptr<Staged> staged;    // a chunk of this staged call
  };
  // A chunk waiting for its device→host copy, in the staging thread's FIFO.
  struct StageItem {
    std::shared_ptr<Call> call;
    std::unique_ptr<DeviceMark> mark;
    std::string name;
  };
  // What one staged item reduces: the sum of `inputs` (same dtype and shape), written to `outputs`.
  struct StageTensors {
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> outputs;
  };

  // What SwitchML cannot do for a call: empty = SwitchML; otherwise the fallback reason key
  // ("op_max", "dtype_float64") and words for the log. Throws for what neither backend reduces.
  struct Route {
    std::string reason;
    std::string words;
  };
  // Validates every tensor of a call (CPU, dense, a dtype and op SwitchML or Gloo reduces) and
  // picks the backend; throws.
  Route CheckTensors(const std::vector<at::Tensor>& tensors, c10d::ReduceOp op, const char* collective) const;
  // A new call of `op` on `tensors`: its work (outputs = tensors) and the memory it touches.
  std::shared_ptr<Call> NewCall(c10d::OpType op, const std::vector<at::Tensor>& tensors) const;
  // Submits one in-place SwitchML job for `buffer` (contiguous float32 or int32); appends to `c`.
  void SubmitJob(const at::Tensor& buffer, std::string name, Call& c);
  // Queues a SwitchML call and starts it if nothing earlier holds it back; returns its work.
  c10::intrusive_ptr<c10d::Work> EnqueueSwitchML(std::shared_ptr<Call> c);
  // Waits for the earlier calls overlapping `c`, issues its Gloo calls and queues it.
  c10::intrusive_ptr<c10d::Work> RunOnGloo(std::shared_ptr<Call> c, const Route& route, const char* collective);
  // Starts every queued call that may start now, in order, appending them to `started`, which
  // the caller must Arm() after releasing mu_ (requires mu_).
  void StartReadyLocked(std::vector<std::shared_ptr<Call>>& started);
  // Registers the completion callbacks of a started call's handles and Gloo works (never under
  // mu_: a part already finished runs its callback at once, on this thread).
  void Arm(const std::shared_ptr<Call>& c);
  // One part of `c` finished; the last one completes the call.
  void PartDone(const std::shared_ptr<Call>& c);
  void CompleteCall(const std::shared_ptr<Call>& c);
  // Whether `c` overlaps one of the first `count` queued calls it must wait for (requires mu_).
  bool ConflictsLocked(const Call& c, size_t count) const;
  // Waits on progress_cv_ until `ready` holds, at most the group timeout; throws naming `what`
  // on timeout, or at once if called from a work's completion (a future callback) when `ready`
  // does not hold: that thread may be the one the pending calls need.
  void WaitLocked(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready, const std::string& what);
  void CountFallback(const Route& route, const char* collective);
  // The device ops that stage tensors of `device`: CUDA's, or the test fake for CPU tensors when
  // enabled; null for CPU tensors otherwise (the CPU path).
  DeviceOps* StagingOps(const c10::Device& device) const;
  // Stages a SwitchML all-reduce of device tensors (staging.h): chunk calls queued in call order,
  // device→host copies enqueued now, the staging thread releases each chunk when its copy is done.
  c10::intrusive_ptr<c10d::Work> StageCall(c10d::OpType op, const std::vector<at::Tensor>& tensors,
                                           std::vector<StageTensors> items, bool avg, const char* collective,
                                           DeviceOps* ops);
  void StagedPartDone(const std::shared_ptr<Staged>& s, std::exception_ptr error);
  void StagingThread();
  // ---- Surviving a failing switch (failover.cc) ----
  // kSwitch → (a handle failed because the switch is gone) kRecovering → kHost (recovered:
  // every SwitchML all-reduce runs on `host_`), or kFailed (the recovery failed: calls fail).
  enum class Path { kSwitch, kRecovering, kHost, kFailed };
  struct Parked {
    std::shared_ptr<Call> call;
    size_t index;  // of the handle in call->handles
  };
  // Every SwitchML handle's completion callback first: settles the handle's count; a handle that
  // failed because the switch is gone is parked (its part stays open) and the recovery starts.
  bool SettleHandle(const std::shared_ptr<Call>& c, size_t index, const switchml::Status& s);
  void RecoveryThread();
  // With host_mu_ held, after this rank's agreement: settles every parked handle (OK from the
  // recovery, re-run on the host, or failed) and moves the group to the host (or failed) path.
  void FinishRecovery(const switchml::StatusOr<std::optional<switchml::RecoveryReport>>& agreed);
  void StopRecoveryThread();
  // Once, at shutdown() or else at destruction: the last agreement, bounded by
  // 2 x call_timeout + 30 s, when no call is pending (logged, never thrown).
  void ProbeAtExit();
  // In barrier() after its agreement, the queue drained (every rank at the same barrier, no host
  // collective in flight): on the host path, SwitchRejoin::Poll, and on a new context the move
  // back to the switch for every later all-reduce (docs/reliability.md, "Coming back").
  void RejoinAtBarrier();

  std::string ResolveControllerAddress(const c10::intrusive_ptr<c10d::Store>& store,
                                       const std::string& own);
  // ValueError on a rank whose settings differ from rank 0's (kSettingsStoreKey).
  void CheckSettingsAgree(const c10::intrusive_ptr<c10d::Store>& store, const SwitchMLConfig& config);

  std::string controller_address_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::unique_ptr<switchml::Context> context_;

  // SwitchML jobs submitted and not yet accounted complete, at most (the context's
  // max_calls_in_flight is twice this: the library also counts the first round of a call it
  // rejected at submission, whose handle the backend already saw complete).
  static constexpr size_t kMaxJobsInFlight = 32768;

  // Guards the queue and every start, so that the SwitchML job order is the queue order. Never
  // held while blocking (SwitchML completion callbacks take it).
  mutable std::mutex mu_;
  std::condition_variable progress_cv_;  // a call completed (barrier(), Gloo fallbacks wait on it)
  std::deque<std::shared_ptr<Call>> queue_;  // guarded by mu_; call order
  size_t jobs_in_flight_ = 0;  // guarded by mu_: SwitchML jobs of started, uncompleted calls
  int completing_ = 0;    // guarded by mu_: calls out of the queue whose work is being completed
  bool closing_ = false;  // guarded by mu_: destructor running; calls not started fail

  bool half_via_switch_ = false;  // SwitchMLConfig::half_via_switch

  // Device staging (staging.h).
  int64_t chunk_bytes_ = kDefaultStagingChunkBytes;
  std::atomic<int64_t> mark_timeout_ms_;  // a chunk's device→host copy must finish within it
  mutable std::mutex ops_mu_;
  mutable std::unique_ptr<DeviceOps> cuda_ops_;  // guarded by ops_mu_ (made on first use)
  std::unique_ptr<FakeDeviceOps> fake_ops_;     // tests only; set before any call
  std::mutex stage_mu_;
  std::condition_variable stage_cv_;
  std::deque<StageItem> stage_queue_;           // guarded by stage_mu_; call order
  std::atomic<bool> stage_stop_{false};
  std::thread stage_thread_;                    // started by the first staged call (under stage_mu_)

  // Failover (failover.cc). host_ and failover_ are null without failover.
  c10::intrusive_ptr<c10d::Backend> host_;
  std::unique_ptr<switchml::HostPath> host_path_;
  // The host path's deadline per collective: the group timeout, but shorter for the agreement at
  // destruction (a rank that died must not keep the others there for the group timeout).
  std::atomic<int64_t> host_timeout_ms_{0};
  std::unique_ptr<switchml::Failover> failover_;
  std::mutex host_mu_;            // one agreement at a time (probes and the recovery thread)
  Path path_ = Path::kSwitch;     // guarded by mu_
  std::vector<Parked> parked_;    // guarded by mu_
  size_t handles_unsettled_ = 0;  // guarded by mu_: SwitchML handles whose callback has not run
  std::string failover_error_;    // guarded by mu_: why the path is kFailed
  std::condition_variable recovery_cv_;  // with mu_: path_ became kRecovering, or stop
  bool recovery_stop_ = false;           // guarded by mu_
  std::thread recovery_thread_;          // started with the first parked handle (under mu_)
  std::atomic<uint64_t> failover_recovered_calls_{0}, failover_host_calls_{0};
  std::atomic<uint64_t> failover_moves_{0}, failover_returns_{0}, rejoin_attempts_{0};
  std::atomic<uint64_t> failover_agreements_{0}, failover_probes_skipped_{0};
  // Skipping the probe (failover.cc, ProbeSwitch). switch_calls_: SwitchML-routed all-reduce
  // calls made so far (counted on the calling thread, at the call: the same count on every rank
  // at the same point of the program); calls_at_idle_: its value at the last probe whose
  // agreement found every rank idle (or at a return to the switch). Both guarded by mu_.
  uint64_t switch_calls_ = 0;
  uint64_t calls_at_idle_ = 0;
  // Coming back (guarded by host_mu_; created at a failover when config.rejoin).
  std::unique_ptr<switchml::SwitchRejoin> rejoin_;
  switchml::RejoinOptions rejoin_options_;
  bool rejoin_enabled_ = false;
  bool failover_enabled_ = false;              // failover_ made at construction
  uint64_t rejoin_logged_attempt_ = 0;
  // Incremented at every change of path (guarded by mu_); a call records it when it starts:
  // the library orders only direct calls started on the same context (ConflictsLocked).
  uint64_t path_epoch_ = 0;
  std::once_flag exit_probe_;

  mutable std::mutex fallback_mu_;
  uint64_t fallback_total_ = 0;                                     // guarded by fallback_mu_
  std::vector<std::pair<std::string, uint64_t>> fallback_counts_;  // guarded by fallback_mu_
};

}  // namespace switchml::pytorch
