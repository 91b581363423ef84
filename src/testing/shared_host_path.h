// testing/shared_host_path.h — what the recovery tests share: a HostPath for N ranks in one
// process (shared memory and a barrier), a switch "killer" for the loopback cluster, and fast
// retransmission options.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "switchml/failover.h"
#include "switchml/options.h"
#include "testing/loopback_cluster.h"
#include "transport/loopback.h"

namespace switchml::testing {

// The host path of N ranks in one process: shared memory and a barrier with a generous hang
// guard (a rank that never comes makes the others fail instead of hang).
class SharedGroup {
 public:
  explicit SharedGroup(uint32_t n) : n_(n), ptr_(n), size_(n) {}
  Status Barrier() {
    std::unique_lock l(mu_);
    const uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
      return OkStatus();
    }
    if (!cv_.wait_for(l, std::chrono::seconds(120), [&] { return gen_ != gen; }))
      return DeadlineExceededError("test host path: a rank did not arrive within 120 s");
    return OkStatus();
  }
  uint32_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t arrived_ = 0;
  uint64_t gen_ = 0;
  std::vector<const void*> ptr_;
  std::vector<size_t> size_;
};

class SharedHostPath : public HostPath {
 public:
  SharedHostPath(SharedGroup& g, uint32_t rank) : g_(g), rank_(rank) {}
  StatusOr<std::vector<int64_t>> AllGather(std::span<const int64_t> mine) override {
    g_.ptr_[rank_] = mine.data();
    g_.size_[rank_] = mine.size();
    SWITCHML_RETURN_IF_ERROR(g_.Barrier());
    std::vector<int64_t> all;
    bool same = true;
    for (uint32_t r = 0; r < g_.n_; ++r) {
      same &= g_.size_[r] == mine.size();
      const auto* p = static_cast<const int64_t*>(g_.ptr_[r]);
      if (same) all.insert(all.end(), p, p + mine.size());
    }
    SWITCHML_RETURN_IF_ERROR(g_.Barrier());
    if (!same) return InvalidArgumentError("test host path: all-gather of different sizes");
    return all;
  }
  Status Broadcast(void* data, size_t bytes, uint32_t root) override {
    g_.ptr_[rank_] = data;
    SWITCHML_RETURN_IF_ERROR(g_.Barrier());
    if (rank_ != root) std::memcpy(data, g_.ptr_[root], bytes);
    ++broadcasts;
    return g_.Barrier();
  }
  Status AllReduce(void* data, size_t n, DataType type) override {
    g_.ptr_[rank_] = data;
    SWITCHML_RETURN_IF_ERROR(g_.Barrier());
    std::vector<uint32_t> sum(n, 0);
    std::vector<float> fsum(n, 0.0f);
    for (uint32_t r = 0; r < g_.n_; ++r) {  // rank order: the same bits on every rank
      for (size_t i = 0; i < n; ++i) {
        if (type == DataType::kInt32) {
          sum[i] += static_cast<const uint32_t*>(g_.ptr_[r])[i];
        } else {
          fsum[i] += static_cast<const float*>(g_.ptr_[r])[i];
        }
      }
    }
    SWITCHML_RETURN_IF_ERROR(g_.Barrier());
    if (type == DataType::kInt32) {
      std::memcpy(data, sum.data(), 4 * n);
    } else {
      std::memcpy(data, fsum.data(), 4 * n);
    }
    reduced += n;
    return OkStatus();
  }
  uint64_t broadcasts = 0, reduced = 0;

 private:
  SharedGroup& g_;
  uint32_t rank_;
};

// Kills the switch: from the moment `dead` is set (or `budget` datagrams from the switch have
// passed), every datagram from or to it is lost; with `mute_rank` >= 0, the switch's datagrams
// to that rank are lost too.
struct SwitchKiller {
  std::atomic<int64_t> budget{INT64_MAX};
  std::atomic<bool> dead{false};
  std::atomic<int> mute_rank{-1};
  // The switch that dies (its datagrams count against the budget; once dead, nothing reaches
  // it or leaves it): the cluster's switch, or in a two-level cluster a leaf or the parent.
  uint32_t victim_ipv4 = LoopbackCluster::kSwitchEndpoint.ipv4;
  transport::FaultOptions Faults() {
    transport::FaultOptions f;
    f.loss = 1.0;
    f.applies_to = [this](transport::Endpoint from, transport::Endpoint to) {
      const bool from_switch = from.ipv4 == victim_ipv4;
      if (dead.load()) return from_switch || to.ipv4 == victim_ipv4;
      if (!from_switch) return false;
      if (budget.fetch_sub(1) <= 0) {
        dead.store(true);
        return true;
      }
      const int m = mute_rank.load();
      return m >= 0 && to.ipv4 == 0x0A000001u + uint32_t(m);
    };
    return f;
  }
};

inline Options FastOptions(uint32_t threads) {
  Options o;
  o.num_worker_threads = threads;
  o.window_packets = 8 * threads;
  o.elements_per_packet = 64;
  o.initial_rto = std::chrono::milliseconds(20);
  o.min_rto = std::chrono::milliseconds(5);
  o.max_rto = std::chrono::milliseconds(100);
  // Failures are what this test is about; a spurious one (a busy host) is just another failure.
  o.call_timeout = std::chrono::milliseconds(600);
  return o;
}

}  // namespace switchml::testing
