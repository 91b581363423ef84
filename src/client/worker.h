// client/worker.h — one worker thread of a Context: a SliceEngine, a Channel and a queue.
//
// The thread takes slices (call_state.h) from its FIFO in order, waits for the call's
// dependencies (stream semantics, context_impl.h), runs the slice's protocol with its
// SliceEngine (engine.h) over its own Channel, and reports the result to its ContextImpl. The
// loop is run-to-completion: send everything the engine queued, wait for results until the next
// timer, hand the results to the engine, fire timers.
//
// Thread-safety: Enqueue, Stop, stats and send_stalls may be called from any thread; the rest
// runs on the worker's own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "client/engine.h"
#include "client/call_state.h"
#include "transport/channel.h"

namespace switchml::client {

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
  // The engine, for recovery (ContextImpl::Recover): only while the thread runs no slice (every
  // slice it was given has been reported).
  const SliceEngine& engine() const { return engine_; }
  uint64_t send_stalls() const { return send_stalls_.load(std::memory_order_relaxed); }

 private:
  void Run();
  Status RunSlice(SliceTask& task);
  // Waits until the call's dependencies finished and, when the call reads one's output, takes the
  // block exponents (marking the slice rejected when the input is not finite). Errors:
  // CANCELLED (context stopping).
  Status PrepareSlice(SliceTask& task);
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
  bool ran_ = false;  // the current slice reached the engine (worker thread only)

  // Stats published by the worker thread for GetStats().
  mutable std::mutex stats_mu_;
  EngineStats published_;
  std::atomic<uint64_t> send_stalls_{0};
};

}  // namespace switchml::client
