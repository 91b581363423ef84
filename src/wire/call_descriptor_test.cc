#include "wire/call_descriptor.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/endian.h"

namespace switchml::wire {
namespace {

// What the switch does with the descriptors of n workers: an element-wise int32 sum.
std::vector<uint8_t> Sum(const std::vector<CallDescriptor>& ds) {
  std::vector<uint8_t> acc(4 * kDescriptorElements, 0), one(4 * kDescriptorElements);
  for (const auto& d : ds) {
    EncodeDescriptor(d, one.data());
    for (size_t i = 0; i < kDescriptorElements; ++i)
      StoreBE32(acc.data() + 4 * i, LoadBE32(acc.data() + 4 * i) + LoadBE32(one.data() + 4 * i));
  }
  return acc;
}

std::string Mismatch(const CallDescriptor& mine, const uint8_t* sum, uint32_t n) {
  return CheckDescriptor(mine, sum, n).mismatch;
}

TEST(CallDescriptorTest, FitsTheSmallestPacket) { EXPECT_LE(kDescriptorElements, 64u); }

TEST(CallDescriptorTest, EqualDescriptorsPassForEveryWorkerCount) {
  const CallDescriptor d{.call_id = 0xFFFFFFFFu, .num_elements = (uint64_t{1} << 40) - 1, .type = 1};
  for (uint32_t n : {1u, 2u, 3u, 7u, 64u, 255u, 256u}) {
    EXPECT_EQ(Mismatch(d, Sum(std::vector<CallDescriptor>(n, d)).data(), n), "") << n;
  }
}

TEST(CallDescriptorTest, TwoWorkersNameTheOthersValues) {
  const CallDescriptor a{.call_id = 5, .num_elements = 262144, .type = 0};
  CallDescriptor b = a;
  b.num_elements = 524288;
  const auto sum = Sum({a, b});
  EXPECT_EQ(Mismatch(a, sum.data(), 2), "the element count differs (this worker: 262144; the other worker: 524288)");
  EXPECT_EQ(Mismatch(b, sum.data(), 2), "the element count differs (this worker: 524288; the other worker: 262144)");
  b = a;
  b.type = 1;
  EXPECT_EQ(Mismatch(a, Sum({a, b}).data(), 2),
            "the element type differs (this worker: int32; the other worker: float32)");
  b = a;
  b.call_id = 6;
  EXPECT_NE(Mismatch(b, Sum({a, b}).data(), 2).find("the call number differs (this worker: #6; the other worker: #5)"),
            std::string::npos);
}

TEST(CallDescriptorTest, AnySingleDifferenceIsSeenByEveryWorker) {
  // Random descriptors where one worker differs from the rest in one random field: every worker's
  // check fails (not only the odd one out, and not only the one with the larger value).
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const uint32_t n = 2 + rng() % 40;
    CallDescriptor base{.call_id = rng(), .num_elements = rng() % (uint64_t{1} << 40), .type = uint8_t(rng() % 2)};
    std::vector<CallDescriptor> ds(n, base);
    CallDescriptor& odd = ds[rng() % n];
    switch (rng() % 3) {
      case 0: odd.type ^= 1; break;
      case 1: odd.num_elements ^= uint64_t{1} << (rng() % 40); break;
      case 2: odd.call_id = uint32_t(odd.call_id) ^ (1u << (rng() % 32)); break;
    }
    const auto sum = Sum(ds);
    for (uint32_t r = 0; r < n; ++r) EXPECT_NE(Mismatch(ds[r], sum.data(), n), "") << trial << " rank " << r;
  }
}

TEST(CallDescriptorTest, DifferencesThatCancelInTheSumAreStillSeen) {
  // Counts 100 and 300 average to 200: the plain sum matches a worker with 200, the sum of
  // squares does not.
  CallDescriptor a{.num_elements = 100}, b{.num_elements = 200}, c{.num_elements = 300};
  const auto sum = Sum({a, b, c});
  EXPECT_NE(Mismatch(b, sum.data(), 3), "");
  EXPECT_NE(Mismatch(b, sum.data(), 3).find("element count differs"), std::string::npos);
}

TEST(CallDescriptorTest, GarbageIsNotAccepted) {
  const CallDescriptor d{.call_id = 1, .num_elements = 10};
  std::vector<uint8_t> zeros(4 * kDescriptorElements, 0);
  EXPECT_NE(Mismatch(d, zeros.data(), 2), "");  // e.g. a reference client's payload
}

TEST(CallDescriptorTest, RejectionsAreCountedExactlyAndAreNotAMismatch) {
  const CallDescriptor d{.call_id = 9, .num_elements = 1000, .type = 1};
  for (uint32_t n : {1u, 2u, 3u, 8u, 256u}) {
    for (uint32_t k : {0u, 1u, n / 2, n}) {
      std::vector<CallDescriptor> ds(n, d);
      for (uint32_t r = 0; r < k; ++r) ds[r].rejected = true;
      const auto sum = Sum(ds);
      for (uint32_t r = 0; r < n; ++r) {
        const DescriptorVerdict v = CheckDescriptor(ds[r], sum.data(), n);
        EXPECT_EQ(v.mismatch, "") << n << " " << k << " rank " << r;
        EXPECT_EQ(v.rejected_by, k) << n << " " << k << " rank " << r;
      }
    }
  }
}

TEST(CallDescriptorTest, ARejectionDoesNotHideAMismatch) {
  CallDescriptor a{.call_id = 3, .num_elements = 64, .type = 0}, b = a;
  b.rejected = true;
  b.num_elements = 65;
  const auto sum = Sum({a, b});
  const DescriptorVerdict va = CheckDescriptor(a, sum.data(), 2), vb = CheckDescriptor(b, sum.data(), 2);
  EXPECT_NE(va.mismatch.find("element count differs (this worker: 64; the other worker: 65)"), std::string::npos)
      << va.mismatch;
  EXPECT_NE(vb.mismatch.find("element count differs"), std::string::npos) << vb.mismatch;
}

TEST(CallDescriptorTest, AnImpossibleRejectionCountIsAMismatch) {
  // A rejected byte whose sums cannot come from 0/1 values (S2 != S1, or more than n) is not
  // a verdict anyone may act on.
  const CallDescriptor d{.call_id = 1, .num_elements = 10};
  auto sum = Sum({d, d});
  StoreBE32(sum.data() + 8 * 2, 2);      // S1 of the rejected byte
  StoreBE32(sum.data() + 8 * 2 + 4, 4);  // S2: a worker sent 2
  EXPECT_NE(CheckDescriptor(d, sum.data(), 2).mismatch, "");
  sum = Sum({d, d});
  StoreBE32(sum.data() + 8 * 2, 3);
  StoreBE32(sum.data() + 8 * 2 + 4, 3);  // three rejections among two workers
  EXPECT_NE(CheckDescriptor(d, sum.data(), 2).mismatch, "");
}

}  // namespace
}  // namespace switchml::wire
