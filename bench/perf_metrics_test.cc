#include "perf_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace switchml::bench {
namespace {

TEST(BenchSizeSweep, DoublesFromMinToMaxInclusive) {
  auto s = SizeSweep(4096, 65536, 2, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<uint64_t>{4096, 8192, 16384, 32768, 65536}));
}

TEST(BenchSizeSweep, StopsBelowMaxWhenTheFactorOvershoots) {
  auto s = SizeSweep(4, 100, 4, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<uint64_t>{4, 16, 64}));
}

TEST(BenchSizeSweep, RoundsDownToWholeElementsAndDropsDuplicates) {
  auto s = SizeSweep(6, 30, 2, 4);  // 6, 12, 24 → 4, 12, 24
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<uint64_t>{4, 12, 24}));
}

TEST(BenchSizeSweep, SingleSizeWithAnyFactor) {
  auto s = SizeSweep(1024, 1024, 1, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<uint64_t>{1024}));
}

TEST(BenchSizeSweep, NamesTheBadFlag) {
  EXPECT_NE(SizeSweep(2, 64, 2, 4).status().message().find("--min-bytes"), std::string::npos);
  EXPECT_NE(SizeSweep(64, 32, 2, 4).status().message().find("--max-bytes"), std::string::npos);
  EXPECT_NE(SizeSweep(4, 64, 1, 4).status().message().find("--step-factor"), std::string::npos);
}

TEST(BenchSizeSweep, NoOverflowNearTheTop) {
  auto s = SizeSweep(uint64_t{1} << 62, UINT64_MAX, 2, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->size(), 2u);
}

TEST(BenchBandwidth, NcclTestsDefinitions) {
  EXPECT_DOUBLE_EQ(AlgBwGBps(2'000'000'000, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(AllReduceBusBwFactor(1), 0.0);
  EXPECT_DOUBLE_EQ(AllReduceBusBwFactor(2), 1.0);
  EXPECT_DOUBLE_EQ(AllReduceBusBwFactor(4), 1.5);
  EXPECT_DOUBLE_EQ(AllReduceBusBwFactor(8), 1.75);
  EXPECT_DOUBLE_EQ(AlgBwGBps(100, 0.0), 0.0);
}

TEST(BenchBandwidth, SpecMetrics) {
  // 2^28 int32 in 1 s: 8.59 Gbit/s of payload, 2^28 ATE/s; goodput = ATE/s · 32 bits.
  const uint64_t n = uint64_t{1} << 28;
  EXPECT_DOUBLE_EQ(GoodputGbps(n * 4, 1.0), double(n) * 32 / 1e9);
  EXPECT_DOUBLE_EQ(AggregatedElementsPerSecond(n, 0.5), 2.0 * double(n));
}

TEST(BenchPack, SumOfPackedEqualsSumOfValuesFor256Ranks) {
  std::mt19937_64 rng(7);
  const size_t kValues = 5;
  std::vector<int64_t> acc(kValues * kLimbsPerValue, 0);
  std::vector<uint64_t> want(kValues, 0);
  for (uint32_t r = 0; r < kMaxPackRanks; ++r) {
    std::vector<uint64_t> v(kValues);
    for (size_t i = 0; i < kValues; ++i) v[i] = (i == 0) ? kMaxPackValue : rng() % (kMaxPackValue / kMaxPackRanks);
    for (size_t i = 0; i < kValues; ++i) want[i] += v[i];
    const std::vector<int32_t> p = PackForSum(v);
    for (size_t k = 0; k < p.size(); ++k) {
      ASSERT_GE(p[k], 0);
      acc[k] += p[k];
    }
  }
  std::vector<int32_t> summed(acc.size());
  for (size_t k = 0; k < acc.size(); ++k) {
    ASSERT_LE(acc[k], INT32_MAX) << "limb sum would overflow int32";
    summed[k] = int32_t(acc[k]);
  }
  EXPECT_EQ(UnpackSum(summed), want);
}

TEST(BenchPack, ClampsValuesAboveTheLimit) {
  EXPECT_EQ(UnpackSum(PackForSum({kMaxPackValue + 12345})), (std::vector<uint64_t>{kMaxPackValue}));
}

TEST(BenchPack, RankBlocksGatherEveryRanksBlockInRankOrder) {
  const uint32_t kRanks = 3;
  std::vector<int32_t> summed;
  std::vector<uint64_t> want;
  for (uint32_t r = 0; r < kRanks; ++r) {
    const std::vector<uint64_t> block = {r + 1, 1000 * (r + 1), kMaxPackValue - r};
    want.insert(want.end(), block.begin(), block.end());
    const std::vector<int32_t> p = PackRankBlock(block, r, kRanks);
    ASSERT_EQ(p.size(), block.size() * kRanks * kLimbsPerValue);
    if (summed.empty()) summed.assign(p.size(), 0);
    for (size_t k = 0; k < p.size(); ++k) summed[k] += p[k];
  }
  EXPECT_EQ(UnpackSum(summed), want);
}

TEST(BenchPack, RankBlockOutsideTheRanksContributesZeros) {
  EXPECT_EQ(UnpackSum(PackRankBlock({5, 6}, 2, 2)), (std::vector<uint64_t>{0, 0, 0, 0}));
}

TEST(BenchPack, ErrorsRoundTripUpwardAndSaturate) {
  EXPECT_EQ(ErrorToFixed(0.0), 0u);
  EXPECT_DOUBLE_EQ(FixedToError(ErrorToFixed(0.125)), 0.125);
  EXPECT_GE(FixedToError(ErrorToFixed(1e-9)), 1e-9);  // rounded up, never hides an error
  EXPECT_TRUE(std::isinf(FixedToError(ErrorToFixed(NAN))));
  EXPECT_TRUE(std::isinf(FixedToError(ErrorToFixed(INFINITY))));
  EXPECT_TRUE(std::isinf(FixedToError(ErrorToFixed(1e30))));
}

TEST(BenchWire, PerWorkerSplitsTheDelta) {
  EXPECT_DOUBLE_EQ(WirePerWorker(8000, 2, 4), 1000.0);  // loopback ring, n = 4
  EXPECT_DOUBLE_EQ(WirePerWorker(8000, 2, 8), 500.0);   // loopback with a switch: 2n senders
  EXPECT_DOUBLE_EQ(WirePerWorker(8000, 0, 8), 0.0);
}

}  // namespace
}  // namespace switchml::bench
