// 256 workers end to end: 256 Contexts (one per rank, each with its own worker thread and
// channel) and the real SwitchServer in one process over the loopback fabric. The most workers
// a job can have: 256-bit bitmaps in the switch, the call descriptor's sums at their largest,
// the float32 scale with the smallest headroom (the one case where a value just below 2^E is
// legitimately clamped by one quantum).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"

namespace switchml {
namespace {

constexpr uint32_t kWorkers = 256;

Options ManyWorkerOptions() {
  Options o;
  o.num_worker_threads = 1;
  o.window_packets = 8;
  o.elements_per_packet = 256;
  // 256 ranks and the switch share two cores: results come late, and a spurious retransmission
  // only costs time, so keep the floor high and give each job plenty of time.
  o.initial_rto = std::chrono::milliseconds(200);
  o.min_rto = std::chrono::milliseconds(200);
  o.max_rto = std::chrono::milliseconds(1000);
  o.call_timeout = std::chrono::seconds(60);
  return o;
}

using testing::OnEveryRank;

TEST(ManyWorkersTest, TwoHundredFiftySixWorkersInt32ExactAndFloat32WithinBound) {
  auto cluster = testing::LoopbackCluster::Create(kWorkers, ManyWorkerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  testing::LoopbackCluster& c = **cluster;
  // 5 packets and a partial one, so a slot carries two rounds (set alternation at n = 256).
  const size_t count = 5 * 256 + 77;
  std::vector<Status> int_status(kWorkers), float_status(kWorkers);
  std::vector<testing::Verification> int_check(kWorkers), float_check(kWorkers);
  OnEveryRank(kWorkers, [&](uint32_t r) {
    std::vector<int32_t> x(count);
    testing::FillInt32(r, 0, x.data(), count);
    int_status[r] = c.ctx(r).AllReduce(x.data(), x.data(), count, DataType::kInt32);
    int_check[r] = testing::VerifyInt32(x.data(), count, kWorkers);
    std::vector<float> f(count), out(count);
    testing::FillFloat32(r, 1000, f.data(), count);
    float_status[r] = c.ctx(r).AllReduce(f.data(), out.data(), count, DataType::kFloat32);
    float_check[r] = testing::VerifyFloat32(out.data(), count, kWorkers, 1000, testing::BlockLayout{256, 1});
  });
  for (uint32_t r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(int_status[r].ok()) << "rank " << r << ": " << int_status[r];
    EXPECT_EQ(int_check[r].wrong, 0u) << "rank " << r << " first wrong at " << int_check[r].first_wrong;
    ASSERT_TRUE(float_status[r].ok()) << "rank " << r << ": " << float_status[r];
    EXPECT_EQ(float_check[r].wrong, 0u) << "rank " << r << " first wrong at " << float_check[r].first_wrong;
  }
  const auto counters = c.server().counters();
  EXPECT_GT(counters.core.multicast_rounds, 0u);
}

TEST(ManyWorkersTest, OneOfTwoHundredFiftySixDisagreeingFailsEveryRank) {
  auto cluster = testing::LoopbackCluster::Create(kWorkers, ManyWorkerOptions());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  testing::LoopbackCluster& c = **cluster;
  std::vector<Status> status(kWorkers);
  OnEveryRank(kWorkers, [&](uint32_t r) {
    // Rank 200 passes one element more than everyone else: the sums of the descriptors differ
    // from 256 times anyone's own, so every rank sees it.
    const size_t count = r == 200 ? 301 : 300;
    std::vector<int32_t> x(count, int32_t(r));
    status[r] = c.ctx(r).AllReduce(x.data(), x.data(), count, DataType::kInt32);
  });
  for (uint32_t r = 0; r < kWorkers; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << status[r];
    EXPECT_NE(status[r].message().find("the element count differs"), std::string::npos) << status[r];
  }
}

}  // namespace
}  // namespace switchml
