// client/context_impl.h — internals of switchml::Context: job bookkeeping and worker threads.
//
// A job is split into one slice per worker thread (spec §5.4 formula, so thread t of every
// worker streams the same elements through the same slots); each thread has its own FIFO of
// slices and its own SliceEngine + Channel. A job is done when all its slices are done, at
// which point no library thread touches its buffers any more.
//
// After any slice fails, the slot/set state of this worker may no longer match the other
// workers' (contract C4), so the context becomes "broken": running slices are aborted and new
// jobs fail at once with FAILED_PRECONDITION carrying the first error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "client/engine.h"
#include "switchml/context.h"
#include "transport/channel.h"

namespace switchml::client {

struct JobState {
  uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  int remaining_slices = 0;  // guarded by mu
  std::vector<int8_t> exponents;  // float32: every slice's block exponents (SliceSpec::exponents)
};

struct SliceTask {
  std::shared_ptr<JobState> job;
  SliceSpec spec;
};

class ContextImpl;

// One worker thread: a SliceEngine, a Channel and a queue of slices.
class Worker {
 public:
  Worker(ContextImpl* owner, uint32_t index, const EngineConfig& config,
         std::unique_ptr<transport::Channel> channel);
  ~Worker();
  void Start();
  void Enqueue(SliceTask task);
  // Asks the thread to stop: the running slice and queued slices fail with CANCELLED.
  void Stop();
  EngineStats stats() const;
  uint64_t send_stalls() const { return send_stalls_.load(std::memory_order_relaxed); }

 private:
  void Run();
  Status RunSlice(SliceTask& task);
  void PublishStats();

  ContextImpl* owner_;
  uint32_t index_;
  SliceEngine engine_;
  std::unique_ptr<transport::Channel> channel_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SliceTask> queue_;  // guarded by mu_
  std::atomic<bool> stop_{false};

  // Stats published by the worker thread for GetStats().
  mutable std::mutex stats_mu_;
  EngineStats published_;
  std::atomic<uint64_t> send_stalls_{0};
};

class ContextImpl {
 public:
  // Adds what the control plane knows to a job's first error, e.g. that the switch tore the
  // job down ("...; job 3 has ended: torn down by the switch: ..."). Called once per context,
  // on a worker thread, when the first slice fails; may block for a short RPC.
  using FailureExplainer = std::function<Status(const Status&)>;

  // Builds a context over already-open channels (one per worker thread) talking to a switch
  // at `switch_endpoint`: used by Context::Create after session setup, and by tests with the
  // loopback fabric. `options` must be valid.
  static std::unique_ptr<Context> CreateWithChannels(
      const Options& options, std::vector<std::unique_ptr<transport::Channel>> channels,
      transport::Endpoint switch_endpoint, FailureExplainer explain_failure = {});

  ~ContextImpl();
  AllReduceHandle Submit(const void* in, void* out, size_t n, DataType type, ReduceOp op);
  Stats GetStats() const;
  const Options& options() const { return options_; }

  // Called by workers.
  void OnSliceDone(const std::shared_ptr<JobState>& job, const Status& s);
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  Status broken_status() const;

  static AllReduceHandle MakeHandle(std::shared_ptr<JobState> s) { return AllReduceHandle(std::move(s)); }

 private:
  ContextImpl(const Options& options, transport::Endpoint switch_endpoint);
  AllReduceHandle Failed(Status s);

  Options options_;
  transport::Endpoint switch_endpoint_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex submit_mu_;     // job ids and slice order are assigned atomically per job
  uint64_t next_job_id_ = 0;
  std::atomic<bool> broken_{false};
  mutable std::mutex broken_mu_;
  Status broken_status_;
  FailureExplainer explain_failure_;  // may be empty
  std::atomic<bool> explained_{false};
  std::atomic<uint64_t> jobs_submitted_{0}, jobs_completed_{0}, jobs_failed_{0};
};

// Computes the exponent of every block of `block` elements of x[0..n) into exps
// (ceil(n / block) entries; quant::BlockExponent). Returns INVALID_ARGUMENT naming the first
// element that is Inf or NaN (or too large to quantize) by its index plus index_base, or OK.
Status BlockExponents(const float* x, size_t n, uint32_t block, int8_t* exps, size_t index_base);

}  // namespace switchml::client
