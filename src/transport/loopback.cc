#include "transport/loopback.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace switchml::transport {
namespace {

// Same limit as a UDP/IPv4 socket, so tests cannot rely on something the real path refuses.
constexpr uint32_t kMaxDatagramBytes = 65507;
constexpr uint16_t kFirstEphemeralPort = 49152;

uint64_t Key(Endpoint ep) { return (uint64_t{ep.ipv4} << 16) | ep.port; }

struct Packet {
  Endpoint from;
  std::vector<uint8_t> bytes;
};

struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Packet> queue;    // guarded by mu
  Packet held;                 // guarded by mu; a datagram delayed by reordering,
  bool has_held = false;       // if this is set
  bool wake = false;           // guarded by mu; a Wake() not yet consumed by a waiting RecvBurst
};

Status CheckProbability(double p, const char* name) {
  if (!(p >= 0.0 && p <= 1.0)) {  // also rejects NaN
    return InvalidArgumentError(std::string("faults.") + name + " must be in [0, 1], got " +
                                std::to_string(p));
  }
  return OkStatus();
}

Status ValidateFaults(const FaultOptions& f) {
  SWITCHML_RETURN_IF_ERROR(CheckProbability(f.loss, "loss"));
  SWITCHML_RETURN_IF_ERROR(CheckProbability(f.duplicate, "duplicate"));
  SWITCHML_RETURN_IF_ERROR(CheckProbability(f.reorder, "reorder"));
  return OkStatus();
}

}  // namespace

namespace internal {

struct LoopbackCore {
  uint32_t inbox_capacity = 0;  // immutable after Create

  std::mutex mu;  // guards everything below; taken before any Inbox::mu
  FaultOptions faults;
  uint64_t rng_state = 0;
  uint16_t next_ephemeral = kFirstEphemeralPort;
  std::unordered_map<uint64_t, std::shared_ptr<Inbox>> inboxes;

  // Atomics so that receivers can count without the fabric lock (lock order core → inbox).
  std::atomic<uint64_t> delivered{0};
  std::atomic<uint64_t> lost{0};
  std::atomic<uint64_t> duplicated{0};
  std::atomic<uint64_t> reordered{0};
  std::atomic<uint64_t> inbox_overflow{0};
  std::atomic<uint64_t> unroutable{0};

  // SplitMix64: tiny, fast, and the same sequence on every platform (unlike std:: distributions).
  double NextUniform() {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  }

  // Appends to `inbox` (whose mu is held) unless it is full.
  void Push(Inbox& inbox, Packet packet) {
    if (inbox.queue.size() >= inbox_capacity) {
      inbox_overflow.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    inbox.queue.push_back(std::move(packet));
    delivered.fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace internal

namespace {

using internal::LoopbackCore;

class LoopbackChannel final : public Channel {
 public:
  LoopbackChannel(std::shared_ptr<LoopbackCore> core, std::shared_ptr<Inbox> inbox,
                  Endpoint local)
      : core_(std::move(core)), inbox_(std::move(inbox)), local_(local) {}

  ~LoopbackChannel() override {
    std::lock_guard<std::mutex> lock(core_->mu);
    auto it = core_->inboxes.find(Key(local_));
    if (it != core_->inboxes.end() && it->second == inbox_) core_->inboxes.erase(it);
  }

  StatusOr<size_t> SendBurst(std::span<const TxDatagram> batch) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      const TxDatagram& d = batch[i];
      if ((d.data == nullptr && d.size > 0) || d.size > kMaxDatagramBytes || d.to.port == 0) {
        return InvalidArgumentError("SendBurst on " + Describe() + ": datagram " +
                                    std::to_string(i) + " to " + d.to.ToString() +
                                    " has null data, port 0 or size " + std::to_string(d.size) +
                                    " > " + std::to_string(kMaxDatagramBytes));
      }
    }
    LoopbackCore& core = *core_;
    std::lock_guard<std::mutex> lock(core.mu);
    for (const TxDatagram& d : batch) {
      auto it = core.inboxes.find(Key(d.to));
      if (it == core.inboxes.end()) {
        core.unroutable.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      bool lose = false, duplicate = false, reorder = false;
      const FaultOptions& f = core.faults;
      if (!f.applies_to || f.applies_to(local_, d.to)) {
        // Always three draws, so one datagram's fate never shifts another's.
        lose = core.NextUniform() < f.loss;
        duplicate = core.NextUniform() < f.duplicate;
        reorder = core.NextUniform() < f.reorder;
      }
      if (lose) {
        core.lost.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      Packet packet{local_, std::vector<uint8_t>(d.data, d.data + d.size)};
      Inbox& inbox = *it->second;
      {
        std::lock_guard<std::mutex> inbox_lock(inbox.mu);
        const bool releasing = inbox.has_held;
        Packet release;
        if (releasing) {
          release = std::move(inbox.held);
          inbox.has_held = false;
        }
        if (duplicate) {
          core.duplicated.fetch_add(1, std::memory_order_relaxed);
          core.Push(inbox, packet);  // copy
        }
        if (reorder && !releasing) {
          core.reordered.fetch_add(1, std::memory_order_relaxed);
          inbox.held = std::move(packet);
          inbox.has_held = true;
        } else {
          core.Push(inbox, std::move(packet));
        }
        if (releasing) core.Push(inbox, std::move(release));
      }
      inbox.cv.notify_one();
    }
    return batch.size();
  }

  StatusOr<size_t> RecvBurst(std::span<RxDatagram> batch,
                             std::chrono::microseconds timeout) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].data == nullptr && batch[i].capacity > 0) {
        return InvalidArgumentError("RecvBurst on " + Describe() + ": buffer " +
                                    std::to_string(i) + " has null data");
      }
    }
    if (batch.empty()) return size_t{0};
    Inbox& inbox = *inbox_;
    std::unique_lock<std::mutex> lock(inbox.mu);
    if (inbox.queue.empty() && inbox.has_held) {
      // No later datagram came to overtake it: deliver the held one now.
      core_->Push(inbox, std::move(inbox.held));
      inbox.has_held = false;
    }
    if (inbox.queue.empty()) {
      if (timeout.count() <= 0) return size_t{0};
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      inbox.cv.wait_until(lock, deadline, [&] { return !inbox.queue.empty() || inbox.wake; });
      inbox.wake = false;
    }
    size_t got = 0;
    while (got < batch.size() && !inbox.queue.empty()) {
      Packet& p = inbox.queue.front();
      RxDatagram& rx = batch[got];
      const size_t n = std::min<size_t>(rx.capacity, p.bytes.size());
      if (n > 0) std::memcpy(rx.data, p.bytes.data(), n);
      rx.size = static_cast<uint32_t>(n);
      rx.truncated = n < p.bytes.size();
      rx.from = p.from;
      inbox.queue.pop_front();
      ++got;
    }
    return got;
  }

  Endpoint local_endpoint() const override { return local_; }

  void Wake() override {
    {
      std::lock_guard<std::mutex> lock(inbox_->mu);
      inbox_->wake = true;
    }
    inbox_->cv.notify_all();
  }

  std::string Describe() const override { return "loopback " + local_.ToString(); }

 private:
  std::shared_ptr<LoopbackCore> core_;
  std::shared_ptr<Inbox> inbox_;
  Endpoint local_;
};

}  // namespace

LoopbackFabric::LoopbackFabric(std::shared_ptr<LoopbackCore> core) : core_(std::move(core)) {}
LoopbackFabric::~LoopbackFabric() = default;

StatusOr<std::unique_ptr<LoopbackFabric>> LoopbackFabric::Create(LoopbackOptions options) {
  if (options.inbox_capacity == 0) return InvalidArgumentError("inbox_capacity must be >= 1, got 0");
  SWITCHML_RETURN_IF_ERROR(ValidateFaults(options.faults));
  auto core = std::make_shared<LoopbackCore>();
  core->inbox_capacity = options.inbox_capacity;
  core->rng_state = options.faults.seed;
  core->faults = std::move(options.faults);
  return std::unique_ptr<LoopbackFabric>(new LoopbackFabric(std::move(core)));
}

StatusOr<std::unique_ptr<Channel>> LoopbackFabric::CreateChannel(Endpoint addr) {
  std::lock_guard<std::mutex> lock(core_->mu);
  if (addr.port == 0) {
    // Ephemeral: the next free port in [49152, 65535], wrapping around.
    constexpr uint32_t kRange = 65536 - kFirstEphemeralPort;
    for (uint32_t tries = 0; tries < kRange; ++tries) {
      const uint16_t port = core_->next_ephemeral;
      core_->next_ephemeral =
          port == 65535 ? kFirstEphemeralPort : static_cast<uint16_t>(port + 1);
      if (!core_->inboxes.contains(Key({addr.ipv4, port}))) {
        addr.port = port;
        break;
      }
    }
    if (addr.port == 0) {
      return ResourceExhaustedError("loopback: no free ephemeral port on " +
                                    Endpoint{addr.ipv4, 0}.ToString());
    }
  } else if (core_->inboxes.contains(Key(addr))) {
    return AlreadyExistsError("loopback " + addr.ToString() + " is already in use");
  }
  auto inbox = std::make_shared<Inbox>();
  core_->inboxes.emplace(Key(addr), inbox);
  return std::unique_ptr<Channel>(new LoopbackChannel(core_, std::move(inbox), addr));
}

Status LoopbackFabric::SetFaults(FaultOptions faults) {
  SWITCHML_RETURN_IF_ERROR(ValidateFaults(faults));
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->rng_state = faults.seed;
  core_->faults = std::move(faults);
  return OkStatus();
}

LoopbackCounters LoopbackFabric::counters() const {
  const LoopbackCore& c = *core_;
  LoopbackCounters out;
  out.delivered = c.delivered.load(std::memory_order_relaxed);
  out.lost = c.lost.load(std::memory_order_relaxed);
  out.duplicated = c.duplicated.load(std::memory_order_relaxed);
  out.reordered = c.reordered.load(std::memory_order_relaxed);
  out.inbox_overflow = c.inbox_overflow.load(std::memory_order_relaxed);
  out.unroutable = c.unroutable.load(std::memory_order_relaxed);
  return out;
}

}  // namespace switchml::transport
