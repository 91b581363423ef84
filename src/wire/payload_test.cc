// Tests of wire/payload.h. Every TEST_P runs once per Highway target that payload.cc compiled
// and this CPU supports (AVX3, AVX2, SSE4, SSSE3, EMU128/SCALAR): the fixture restricts dynamic
// dispatch to that target, and the first test checks it really ran there. Results are compared
// with an independent scalar reference written below.

#include "common/hwy_target_test.h"
#include "wire/payload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "wire/payload_internal.h"

namespace switchml::wire {
namespace {

// ---------------------------------------------------------------- scalar reference

void RefStoreBE(int32_t v, uint8_t* p) {
  const auto u = static_cast<uint32_t>(v);
  p[0] = static_cast<uint8_t>(u >> 24);
  p[1] = static_cast<uint8_t>(u >> 16);
  p[2] = static_cast<uint8_t>(u >> 8);
  p[3] = static_cast<uint8_t>(u);
}

// ---------------------------------------------------------------- per-target fixture

class PayloadTarget : public HwyTargetTest {};

INSTANTIATE_TEST_SUITE_P(AllTargets, PayloadTarget, ::testing::ValuesIn(HwyTargetsToTest(internal::CompiledTargets())),
                         HwyTargetName);

// ---------------------------------------------------------------- tests

TEST_P(PayloadTarget, DispatchesToTheTargetUnderTest) {
  EXPECT_STREQ(internal::ActiveTarget(), hwy::TargetName(GetParam()));
}

TEST(PayloadDispatch, BestTargetIsActiveByDefault) {
  hwy::SetSupportedTargetsForTest(0);
  const int64_t targets = hwy::SupportedTargets() & internal::CompiledTargets();
  ASSERT_NE(targets, 0);
  // The lowest set bit is the best target.
  EXPECT_STREQ(internal::ActiveTarget(), hwy::TargetName(targets & -targets));
}

// Sizes around the vector width, int32 arrays and byte buffers at offsets 0-3 (bytes: 4-7),
// exact against the reference, and no writes outside [0, n).
TEST_P(PayloadTarget, AllKernelsMatchReferenceForAnySizeAndAlignment) {
  std::mt19937 rng(16);
  constexpr uint8_t kGuard = 0xA5;
  for (size_t n : {0u, 1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 64u, 65u, 1023u, 1024u}) {
    for (size_t offset : {0u, 1u, 2u, 3u}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      std::vector<uint8_t> bytes(4 * n + 16, kGuard);
      uint8_t* be = bytes.data() + 4 + offset;

      // Int32ToBE on random int32s (extremes included).
      std::vector<int32_t> ints_store(n + 8, 12345);
      int32_t* ints = ints_store.data() + offset;
      for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int32_t>(rng());
      if (n > 1) ints[0] = INT32_MIN, ints[n - 1] = INT32_MAX;
      Int32ToBE(ints, n, be);
      for (size_t i = 0; i < n; ++i) {
        uint8_t expected[4];
        RefStoreBE(ints[i], expected);
        ASSERT_EQ(std::memcmp(be + 4 * i, expected, 4), 0) << "element " << i;
      }
      for (size_t i = 0; i < 4 + offset; ++i) EXPECT_EQ(bytes[i], kGuard);
      for (size_t i = 4 + offset + 4 * n; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], kGuard);

      // BEToInt32 back into an int32 array at another offset.
      std::vector<int32_t> back_store(n + 8, 999);
      int32_t* back = back_store.data() + (3 - offset);
      BEToInt32(be, n, back);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], ints[i]) << "element " << i;
      for (size_t i = 0; i < 3 - offset; ++i) EXPECT_EQ(back_store[i], 999);
      for (size_t i = 3 - offset + n; i < back_store.size(); ++i) EXPECT_EQ(back_store[i], 999);

      // AddBEInto: random accumulators, 32-bit wrap-around.
      std::vector<int32_t> acc_store(n + 8, 777);
      int32_t* acc = acc_store.data() + (3 - offset);
      std::vector<int32_t> expected_acc(n);
      for (size_t i = 0; i < n; ++i) {
        acc[i] = static_cast<int32_t>(rng());
        expected_acc[i] =
            static_cast<int32_t>(static_cast<uint32_t>(acc[i]) + static_cast<uint32_t>(ints[i]));
      }
      AddBEInto(acc, be, n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], expected_acc[i]) << "element " << i;
      for (size_t i = 0; i < 3 - offset; ++i) EXPECT_EQ(acc_store[i], 777);
      for (size_t i = 3 - offset + n; i < acc_store.size(); ++i) EXPECT_EQ(acc_store[i], 777);
    }
  }
}

TEST_P(PayloadTarget, ZeroElementsTouchNothing) {
  Int32ToBE(nullptr, 0, nullptr);
  BEToInt32(nullptr, 0, nullptr);
  AddBEInto(nullptr, nullptr, 0);
  // And with real pointers: nothing is written.
  int32_t v = 42;
  uint8_t b[4] = {1, 2, 3, 4};
  Int32ToBE(&v, 0, b);
  BEToInt32(b, 0, &v);
  AddBEInto(&v, b, 0);
  EXPECT_EQ(v, 42);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[3], 4);
}

TEST_P(PayloadTarget, Int32ToBEWritesExactBytes) {
  const int32_t x[5] = {0x01020304, -2, INT32_MIN, INT32_MAX, 0};
  const uint8_t expected[20] = {0x01, 0x02, 0x03, 0x04, 0xFF, 0xFF, 0xFF, 0xFE, 0x80, 0x00,
                                0x00, 0x00, 0x7F, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00};
  uint8_t be[20];
  Int32ToBE(x, 5, be);
  EXPECT_EQ(std::memcmp(be, expected, 20), 0);
  int32_t back[5];
  BEToInt32(expected, 5, back);
  EXPECT_EQ(std::memcmp(back, x, sizeof(x)), 0);
}

TEST_P(PayloadTarget, AddBEIntoWrapsAround) {
  for (size_t n : {1u, 9u, 64u}) {
    std::vector<int32_t> acc(n, INT32_MAX);
    std::vector<uint8_t> one(4 * n), minus_one(4 * n);
    for (size_t i = 0; i < n; ++i) RefStoreBE(1, &one[4 * i]), RefStoreBE(-1, &minus_one[4 * i]);
    AddBEInto(acc.data(), one.data(), n);
    for (int32_t v : acc) EXPECT_EQ(v, INT32_MIN);
    AddBEInto(acc.data(), minus_one.data(), n);
    for (int32_t v : acc) EXPECT_EQ(v, INT32_MAX);
  }
}

// The switch's use: the first contribution is loaded, the others added, the sum written back;
// several packets in a row, as the aggregator and encoder see them.
TEST_P(PayloadTarget, SwitchSumRoundTrip) {
  constexpr size_t kN = 256;
  std::mt19937 rng(7);
  std::vector<int32_t> sums(kN), exact(kN, 0);
  std::vector<uint8_t> payload(4 * kN);
  for (int worker = 0; worker < 5; ++worker) {
    std::vector<int32_t> x(kN);
    for (size_t i = 0; i < kN; ++i) {
      x[i] = static_cast<int32_t>(rng()) >> 4;  // no wrap over five workers
      exact[i] += x[i];
    }
    Int32ToBE(x.data(), kN, payload.data());
    if (worker == 0) {
      BEToInt32(payload.data(), kN, sums.data());
    } else {
      AddBEInto(sums.data(), payload.data(), kN);
    }
  }
  EXPECT_EQ(sums, exact);
  std::vector<uint8_t> response(4 * kN);
  Int32ToBE(sums.data(), kN, response.data());
  std::vector<int32_t> y(kN);
  BEToInt32(response.data(), kN, y.data());
  EXPECT_EQ(y, exact);
}

}  // namespace
}  // namespace switchml::wire
