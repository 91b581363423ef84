// Two-level aggregation end to end (docs/scaling.md "Two-level aggregation"): leaf switches
// each aggregate their rack's workers and are workers of a parent switch, which multicasts the
// totals down; real SwitchServers and Contexts over the in-process loopback fabric
// (testing::LoopbackCluster::CreateTwoLevel). Every element of every result is checked: int32
// exact, float32 within the quantization bound of the *global* worker count, with loss on
// every hop (worker -> leaf -> parent -> leaf -> worker) and the switches' drop simulators.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"

namespace switchml {
namespace {

using testing::LoopbackCluster;
using testing::OnEveryRank;

Options TwoLevelOptions() {
  Options o;
  o.num_worker_threads = 2;
  o.window_packets = 16;
  o.elements_per_packet = 64;
  // A generous floor: losses are recovered by the workers' timers (which also drive the
  // leaves' resends to the parent), and the machine may be busy.
  o.initial_rto = std::chrono::milliseconds(20);
  o.min_rto = std::chrono::milliseconds(20);
  o.call_timeout = std::chrono::seconds(60);
  return o;
}


// Runs every size as int32 and float32 on every rank, checks every element.
void RunAndCheck(LoopbackCluster& c, const std::vector<size_t>& counts, uint32_t threads = 2) {
  const uint32_t n = c.size();
  std::vector<std::string> errors(n);
  OnEveryRank(n, [&](uint32_t r) {
    for (size_t i = 0; i < counts.size(); ++i) {
      const size_t count = counts[i];
      std::vector<int32_t> x(count);
      testing::FillInt32(r, uint32_t(i), x.data(), count);
      Status s = c.ctx(r).AllReduce(x.data(), x.data(), count, DataType::kInt32);
      if (!s.ok()) {
        errors[r] += "int32 count " + std::to_string(count) + ": " + s.ToString() + "; ";
        continue;
      }
      const testing::Verification v = testing::VerifyInt32(x.data(), count, n, i);
      if (v.wrong != 0) {
        errors[r] += "int32 count " + std::to_string(count) + ": " + std::to_string(v.wrong) +
                     " wrong, first at " + std::to_string(v.first_wrong) + "; ";
      }
      std::vector<float> f(count), out(count);
      testing::FillFloat32(r, 100 + uint32_t(i), f.data(), count);
      s = c.ctx(r).AllReduce(f.data(), out.data(), count, DataType::kFloat32);
      if (!s.ok()) {
        errors[r] += "float32 count " + std::to_string(count) + ": " + s.ToString() + "; ";
        continue;
      }
      const testing::Verification vf = testing::VerifyFloat32(
          out.data(), count, n, 100 + uint32_t(i), testing::BlockLayout{64, threads});
      if (vf.wrong != 0) {
        errors[r] += "float32 count " + std::to_string(count) + ": " + std::to_string(vf.wrong) +
                     " wrong, first at " + std::to_string(vf.first_wrong) + "; ";
      }
    }
  });
  for (uint32_t r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(TwoLevelTest, ThreeRacksOfTwoExactInt32AndFloat32WithinTheGlobalBound) {
  auto cluster = LoopbackCluster::CreateTwoLevel(3, 2, TwoLevelOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoopbackCluster& c = **cluster;
  ASSERT_EQ(c.size(), 6u);
  RunAndCheck(c, {1, 63, 64, 65, 1000, 16 * 64 + 5, 20000});
  // Every round went up from every leaf and came down as the parent's total.
  const auto parent = c.parent()->counters().core;
  EXPECT_GT(parent.multicast_rounds, 0u);
  EXPECT_EQ(parent.uplink_sent, 0u);
  for (uint32_t l = 0; l < 3; ++l) {
    const auto leaf = c.server(l).counters().core;
    EXPECT_EQ(leaf.multicast_rounds, parent.multicast_rounds) << "leaf " << l;
    EXPECT_EQ(leaf.uplink_sent, parent.multicast_rounds) << "leaf " << l;
  }
}

TEST(TwoLevelTest, OneWorkerPerRackAndOneRack) {
  for (auto [racks, per_rack] : {std::pair{4u, 1u}, std::pair{1u, 3u}}) {
    SCOPED_TRACE(std::to_string(racks) + " racks x " + std::to_string(per_rack));
    auto cluster = LoopbackCluster::CreateTwoLevel(racks, per_rack, TwoLevelOptions());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    RunAndCheck(**cluster, {1, 200, 3000});
  }
}

TEST(TwoLevelTest, LossOnEveryHopStaysExact) {
  transport::FaultOptions f;
  f.loss = 0.02;  // every datagram on the fabric: worker <-> leaf and leaf <-> parent
  f.seed = 11;
  dataplane::SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.ingress_drop_probability = 0.01;
  sc.egress_drop_probability = 0.01;
  auto cluster = LoopbackCluster::CreateTwoLevel(2, 3, TwoLevelOptions(), f, sc);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoopbackCluster& c = **cluster;
  RunAndCheck(c, {64, 5000, 20000});
  // The losses were recovered at both levels: leaves resent partials on the workers'
  // retransmissions, and the parent answered some of them with its stored total.
  uint64_t resent = 0;
  for (uint32_t l = 0; l < 2; ++l) resent += c.server(l).counters().core.uplink_resent;
  EXPECT_GT(resent, 0u);
  EXPECT_GT(c.parent()->counters().core.unicast_replies, 0u);
}

// Every level on several I/O threads: each leaf I/O thread sends its slots' rounds up to the
// parent I/O thread that owns them and takes their totals on its own port (the leaf registered
// the workers' layout at the parent, threads sharing a port where the leaf has fewer I/O
// threads than the workers have threads).
TEST(TwoLevelTest, EveryLevelOnSeveralIoThreads) {
  Options o = TwoLevelOptions();
  o.num_worker_threads = 5;
  o.window_packets = 40;
  dataplane::SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.io_threads = 3;
  auto cluster = LoopbackCluster::CreateTwoLevel(2, 2, o, {}, sc);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoopbackCluster& c = **cluster;
  RunAndCheck(c, {1, 64 * 5 + 3, 64 * 40 * 2 + 17, 20000}, 5);
  std::vector<dataplane::SwitchServer*> all = {c.parent(), &c.server(0), &c.server(1)};
  for (dataplane::SwitchServer* s : all) {
    const auto core = s->counters().core;
    // (parent_stale may count a total answering a partial resent on a worker's retransmission
    // when the machine is slow: timing, not checked.)
    EXPECT_EQ(core.wrong_io_thread, 0u);
    EXPECT_EQ(core.unknown_sender, 0u);
    // Every I/O thread served its share (its counters are published after it sent: waited for,
    // with a deadline).
    for (uint32_t i = 0; i < 3; ++i) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (s->io_thread_counters(i).core.multicast_rounds == 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      EXPECT_GT(s->io_thread_counters(i).core.multicast_rounds, 0u) << "I/O thread " << i;
    }
  }
}

// K shards per level (docs/scaling.md): rack l's leaf shard s is a worker of parent shard s,
// every level with the workers' layout (here 3 threads over 2 shards: 2 and 1), on two I/O
// threads each, with loss on every hop.
TEST(TwoLevelTest, ShardsOnEveryLevelWithLossStayExact) {
  Options o = TwoLevelOptions();
  o.num_worker_threads = 3;
  o.window_packets = 24;
  transport::FaultOptions f;
  f.loss = 0.01;
  f.seed = 5;
  dataplane::SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.io_threads = 2;
  auto cluster = LoopbackCluster::CreateTwoLevel(3, 2, o, f, sc, /*shards=*/2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoopbackCluster& c = **cluster;
  ASSERT_EQ(c.size(), 6u);
  ASSERT_EQ(c.shards(), 6u);  // 3 racks x 2 leaf shards
  RunAndCheck(c, {1, 64 * 3 + 1, 64 * 24 * 2 + 5, 20000}, 3);
  for (uint32_t s = 0; s < 2; ++s) {
    const auto parent = c.parent(s)->counters().core;
    EXPECT_GT(parent.multicast_rounds, 0u) << "parent shard " << s;
    EXPECT_EQ(parent.wrong_io_thread, 0u) << "parent shard " << s;
    for (uint32_t l = 0; l < 3; ++l) {
      const auto leaf = c.server(l * 2 + s).counters().core;
      EXPECT_GT(leaf.uplink_sent, 0u) << "rack " << l << " shard " << s;
      EXPECT_EQ(leaf.wrong_io_thread, 0u) << "rack " << l << " shard " << s;
    }
  }
}

// More shards per level than worker threads: the second shard of each level serves no thread
// (as a one-level job's would), yet every leaf shard registers at its parent shard (from its
// data port) and the job runs, exact.
TEST(TwoLevelTest, MoreShardsPerLevelThanWorkerThreads) {
  Options o = TwoLevelOptions();
  o.num_worker_threads = 1;
  o.window_packets = 16;
  auto cluster = LoopbackCluster::CreateTwoLevel(2, 2, o, {}, LoopbackCluster::DefaultSwitchConfig(),
                                                 /*shards=*/2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoopbackCluster& c = **cluster;
  RunAndCheck(c, {1, 1000, 5000}, 1);
  for (uint32_t s = 0; s < 2; ++s) {
    auto parent_jobs = c.parent(s)->ListJobs();
    ASSERT_EQ(parent_jobs.jobs.size(), 1u) << "parent shard " << s;
    EXPECT_EQ(parent_jobs.jobs[0].state, control::JobState::kRunning) << "parent shard " << s;
  }
}

// 1,024 workers through two levels (8 leaves x 128): four times what one switch can aggregate.
// Each worker quantizes with N = 1024 (the smallest float32 headroom of any test) and checks
// the call descriptor's sums over 1024 workers.
TEST(TwoLevelTest, ThousandTwentyFourWorkersThroughEightLeaves) {
  Options o;
  o.num_worker_threads = 1;
  o.window_packets = 4;
  o.elements_per_packet = 256;
  // 1024 ranks and nine switches share two cores: results come late, and a spurious
  // retransmission only costs time, so keep the floor high and give each call plenty of time.
  o.initial_rto = std::chrono::milliseconds(500);
  o.min_rto = std::chrono::milliseconds(500);
  o.max_rto = std::chrono::milliseconds(2000);
  o.call_timeout = std::chrono::seconds(120);
  auto cluster = LoopbackCluster::CreateTwoLevel(8, 128, o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  LoopbackCluster& c = **cluster;
  ASSERT_EQ(c.size(), 1024u);
  constexpr size_t kCount = 3 * 256 + 19;  // 4 packets: every slot of the window, one partial
  std::vector<std::string> errors(c.size());
  OnEveryRank(c.size(), [&](uint32_t r) {
    std::vector<int32_t> x(kCount);
    testing::FillInt32(r, 0, x.data(), kCount);
    Status s = c.ctx(r).AllReduce(x.data(), x.data(), kCount, DataType::kInt32);
    if (!s.ok()) {
      errors[r] = "int32: " + s.ToString();
      return;
    }
    testing::Verification v = testing::VerifyInt32(x.data(), kCount, c.size());
    if (v.wrong != 0) errors[r] = "int32: " + std::to_string(v.wrong) + " wrong";
    std::vector<float> f(kCount), out(kCount);
    testing::FillFloat32(r, 7, f.data(), kCount);
    s = c.ctx(r).AllReduce(f.data(), out.data(), kCount, DataType::kFloat32);
    if (!s.ok()) {
      errors[r] += "float32: " + s.ToString();
      return;
    }
    v = testing::VerifyFloat32(out.data(), kCount, c.size(), 7, testing::BlockLayout{256, 1});
    if (v.wrong != 0) errors[r] += "float32: " + std::to_string(v.wrong) + " wrong";
  });
  size_t failed = 0;
  for (uint32_t r = 0; r < c.size(); ++r) {
    if (!errors[r].empty() && ++failed <= 5) ADD_FAILURE() << "rank " << r << ": " << errors[r];
  }
  EXPECT_EQ(failed, 0u);
  EXPECT_GT(c.parent()->counters().core.multicast_rounds, 0u);
}

}  // namespace
}  // namespace switchml
