#include "client/worker.h"

#include <algorithm>
#include <string>
#include <vector>

#include "client/context_impl.h"
#include "wire/packet.h"

namespace switchml::client {

Worker::Worker(ContextImpl* owner, uint32_t index, const EngineConfig& config,
               std::unique_ptr<transport::Channel> channel)
    : owner_(owner), index_(index), engine_(config), channel_(std::move(channel)) {}

Worker::~Worker() { Stop(); }

void Worker::Start() { thread_ = std::thread([this] { Run(); }); }

void Worker::Enqueue(SliceTask task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void Worker::Stop() {
  {
    // Under mu_: a thread between checking the predicate in Run() and blocking on cv_ would
    // otherwise miss this notification and wait forever (the context's destructor with it).
    std::lock_guard lock(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (channel_) channel_->Wake();
  if (thread_.joinable()) thread_.join();
  // Whatever is left never ran.
  std::deque<SliceTask> left;
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
  }
  for (auto& t : left)
    owner_->OnSliceDone(t.call, CancelledError("context destroyed before all-reduce #" + std::to_string(t.call->id) + " ran"),
                        /*in_step=*/false);
}

EngineStats Worker::stats() const {
  std::lock_guard lock(stats_mu_);
  return published_;
}

void Worker::PublishStats() {
  std::lock_guard lock(stats_mu_);
  published_ = engine_.stats();
}

void Worker::Run() {
  while (true) {
    SliceTask task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_.load(std::memory_order_acquire) || !queue_.empty(); });
      if (stop_.load(std::memory_order_acquire)) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const Status result = RunSlice(task);
    PublishStats();
    owner_->OnSliceDone(task.call, result, ran_ && engine_.ended_in_step());
  }
}

Status Worker::PrepareSlice(SliceTask& task) {
  CallState& call = *task.call;
  for (const auto& weak : call.deps) {
    const std::shared_ptr<CallState> dep = weak.lock();
    if (!dep) continue;  // gone: it finished and nobody holds it any more
    const AllReduceHandle h = ContextImpl::MakeHandle(dep);
    // Its slices are ahead of ours in every worker's queue, so it finishes (or fails by its own
    // timeout); the short waits only let a stopping context leave promptly. Its result does not
    // matter here: a call that failed in step wrote nothing (its buffers are as they were), and
    // one that failed otherwise broke the context, which RunSlice checks next.
    while (!h.WaitFor(std::chrono::milliseconds(20))) {
      if (stop_.load(std::memory_order_acquire)) {
        return CancelledError("context destroyed while all-reduce #" + std::to_string(call.id) +
                              " waited for all-reduce #" + std::to_string(dep->id));
      }
    }
  }
  if (call.exponents_at_start && task.spec.num_elements > 0) {
    // The input is an earlier call's output, final only now. The first slice to get here scans
    // all of it, so every slice of this worker knows before sending anything whether the call
    // is rejected.
    std::call_once(call.start_scan_once,
                   [&] { call.start_scan = ScanExponents(call, owner_->options().elements_per_packet); });
    if (!call.start_scan.ok()) {
      task.spec.rejected = task.spec.send_descriptor;
      task.spec.rejection = InvalidArgumentError(
          call.start_scan.message() + " (the input of all-reduce #" + std::to_string(call.id) +
          " is the output of an earlier call, so it was checked when the call started; the call failed on every "
          "worker and wrote nothing)");
    }
  }
  return OkStatus();
}

Status Worker::RunSlice(SliceTask& task) {
  ran_ = false;
  if (Status st = PrepareSlice(task); !st.ok()) return st;
  if (owner_->broken()) {
    return AbortedError("all-reduce #" + std::to_string(task.call->id) +
                        " not started: " + owner_->broken_status().ToString());
  }
  ran_ = true;
  engine_.Begin(task.spec, Clock::now());
  constexpr size_t kBurst = 32;  // ~32 datagrams per syscall amortises the ~6 us call cost.
  transport::TxDatagram tx[kBurst];
  transport::RxDatagram rx[kBurst];
  static thread_local std::vector<uint8_t> rx_storage;
  rx_storage.resize(kBurst * wire::kMaxPacketBytes);
  uint64_t iterations = 0;
  while (engine_.active()) {
    if (stop_.load(std::memory_order_acquire)) {
      engine_.Abort(CancelledError("context destroyed while call " + std::to_string(task.call->id) + " ran"));
      break;
    }
    if (owner_->broken()) {
      engine_.Abort(AbortedError("call " + std::to_string(task.call->id) +
                                 " aborted: " + owner_->broken_status().ToString()));
      break;
    }
    // Transmit everything queued, one burst at a time.
    bool stalled = false;
    while (engine_.pending_sends() > 0) {
      const size_t k = engine_.PeekSends(tx);
      auto sent = channel_->SendBurst({tx, k});
      if (!sent.ok()) {
        engine_.Abort(sent.status().WithContext("sending to the switch"));
        break;
      }
      engine_.ConfirmSent(*sent, Clock::now());
      if (*sent < k) {
        stalled = true;
        send_stalls_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
    if (!engine_.active()) break;
    // Wait for results, at most until the next timer (and briefly when the socket was full).
    const TimePoint now = Clock::now();
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(engine_.NextDeadline() - now);
    wait = std::clamp(wait, std::chrono::microseconds(0), std::chrono::microseconds(stalled ? 50 : 100000));
    // In place where the channel stages datagrams (UDP GRO): OnDatagram reads each result once,
    // straight from the channel's buffer, into the output tensor.
    transport::PointAt(rx, rx_storage.data(), uint32_t(wire::kMaxPacketBytes));
    auto got = channel_->RecvBurstNoCopy(rx, wait);
    if (!got.ok()) {
      engine_.Abort(got.status().WithContext("receiving from the switch"));
      break;
    }
    const TimePoint after = Clock::now();
    for (size_t i = 0; i < *got; ++i) {
      if (rx[i].truncated) continue;  // larger than any SwitchML datagram: not ours
      engine_.OnDatagram({rx[i].data, rx[i].size}, after);
    }
    engine_.OnTick(after);
    if ((++iterations & 63) == 0) PublishStats();
  }
  return engine_.result();
}

}  // namespace switchml::client
