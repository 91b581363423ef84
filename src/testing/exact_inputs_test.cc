// Tests of the shared test inputs: the float32 pattern varies its block exponent from block to
// block and rank to rank, its expected sums are exact, and VerifyFloat32 accepts the real
// quantizer's result but catches an exponent mix-up.
#include "testing/exact_inputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <vector>

#include "quant/quantizer.h"
#include "wire/payload.h"

namespace switchml::testing {
namespace {

constexpr uint32_t kPacketSizes[] = {64, 256, 512, 1024};

struct Block {
  size_t start = 0, len = 0;
  std::vector<int8_t> rank_exp;  // each rank's own block exponent
  int8_t switch_exp = -126;      // max over ranks
};

// The blocks of one call of n elements cut as `layout` (the library's slicing), with exponents.
std::vector<Block> Blocks(uint32_t workers, uint64_t offset, size_t n, BlockLayout layout) {
  std::vector<Block> blocks;
  const size_t threads = layout.threads, base = n / threads, rem = n % threads;
  std::vector<float> x;
  size_t start = 0;
  for (size_t t = 0; t < threads; ++t) {
    const size_t len = t < rem ? base + 1 : base;
    for (size_t b = 0; b < len; b += layout.elements_per_packet) {
      Block blk;
      blk.start = start + b;
      blk.len = std::min<size_t>(layout.elements_per_packet, len - b);
      x.resize(blk.len);
      for (uint32_t r = 0; r < workers; ++r) {
        FillFloat32(r, offset + blk.start, x.data(), blk.len);
        int8_t e = 0;
        EXPECT_TRUE(quant::BlockExponent(x.data(), blk.len, &e));
        blk.rank_exp.push_back(e);
        blk.switch_exp = std::max(blk.switch_exp, e);
      }
      blocks.push_back(blk);
    }
    start += len;
  }
  return blocks;
}

// What the workers receive when block k is quantized with exponent used_exp[k] on every rank:
// the real quantizer, the switch's int32 add, and the dequantizer.
std::vector<float> AllReduce(uint32_t workers, uint64_t offset, size_t n, const std::vector<Block>& blocks,
                             const std::vector<int8_t>& used_exp) {
  std::vector<float> out(n), x;
  std::vector<uint8_t> payload, sum_be;
  std::vector<int32_t> acc;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const Block& b = blocks[k];
    const quant::Scale scale = quant::ScaleForExponent(used_exp[k], workers);
    x.resize(b.len);
    payload.resize(4 * b.len);
    sum_be.resize(4 * b.len);
    acc.assign(b.len, 0);
    for (uint32_t r = 0; r < workers; ++r) {
      FillFloat32(r, offset + b.start, x.data(), b.len);
      quant::QuantizeToBE(x.data(), b.len, scale, workers, payload.data());
      wire::AddBEInto(acc.data(), payload.data(), b.len);
    }
    wire::Int32ToBE(acc.data(), b.len, sum_be.data());
    quant::DequantizeFromBE(sum_be.data(), b.len, scale, out.data() + b.start);
  }
  return out;
}

std::vector<int8_t> SwitchExps(const std::vector<Block>& blocks) {
  std::vector<int8_t> e;
  for (const Block& b : blocks) e.push_back(b.switch_exp);
  return e;
}

TEST(ExactInputsTest, ConsecutiveBlocksHaveDifferentExponentsForEveryPacketSize) {
  for (uint32_t workers : {1u, 2u, 3u, 5u, 8u}) {
    for (uint32_t p : kPacketSizes) {
      const size_t n = size_t(p) * 400;
      const auto blocks = Blocks(workers, 0, n, {p, 1});
      size_t differ = 0, rank_differ = 0;
      std::set<int> distinct;
      for (size_t k = 0; k < blocks.size(); ++k) {
        distinct.insert(blocks[k].switch_exp);
        if (k > 0 && blocks[k].switch_exp != blocks[k - 1].switch_exp) ++differ;
        const auto [lo, hi] = std::minmax_element(blocks[k].rank_exp.begin(), blocks[k].rank_exp.end());
        if (*lo != *hi) ++rank_differ;
      }
      SCOPED_TRACE("workers " + std::to_string(workers) + ", packet " + std::to_string(p));
      // At least 80% of the neighbouring blocks differ, over a range of exponents.
      EXPECT_GE(differ * 5, (blocks.size() - 1) * 4) << differ << " of " << blocks.size() - 1;
      EXPECT_GE(distinct.size(), 10u);
      // With several ranks, most blocks have ranks whose own exponents differ (so the
      // switch-wide exponent is not simply any rank's).
      if (workers > 1) {
        EXPECT_GE(rank_differ * 2, blocks.size()) << rank_differ << " of " << blocks.size();
      }
    }
  }
}

TEST(ExactInputsTest, PacketsMixTinyAndHugeRuns) {
  // Within one 256-element packet, some 64-element run is at least 2^30 smaller than the
  // packet's exponent: the quantizer rounds it to (almost) nothing.
  std::vector<float> x(kFloat32RunLength);
  size_t mixed = 0;
  for (uint64_t packet = 0; packet < 500; ++packet) {
    int run_exp[4];
    for (int q = 0; q < 4; ++q) {
      FillFloat32(0, packet * 256 + q * kFloat32RunLength, x.data(), x.size());
      int8_t e = 0;
      ASSERT_TRUE(quant::BlockExponent(x.data(), x.size(), &e));
      run_exp[q] = e;
    }
    if (*std::max_element(run_exp, run_exp + 4) - *std::min_element(run_exp, run_exp + 4) >= 30) ++mixed;
  }
  EXPECT_GE(mixed, 100u);
}

TEST(ExactInputsTest, InputsAreFiniteAndFarFromOverflowAndExpectedSumsAreExact) {
  for (uint32_t workers : {2u, 3u, 7u, 64u}) {
    for (uint64_t i = 0; i < 200000; i += 7) {
      float f = 0;  // float32 sum in reverse rank order: equal to the double sum iff both exact
      for (uint32_t r = workers; r-- > 0;) {
        const float x = Float32Input(r, i);
        ASSERT_TRUE(std::fabs(x) < 0x1p30f && (x == 0 || std::fabs(x) >= 0x1p-59f)) << x;
        f += x;
      }
      ASSERT_EQ(double(f), Float32ExpectedSum(workers, i)) << "index " << i;
    }
  }
  std::vector<float> buf(1000);
  FillFloat32(3, 12345, buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], Float32Input(3, 12345 + i));
}

TEST(ExactInputsTest, VerifierAcceptsTheRealQuantizerForEveryLayout) {
  for (uint32_t workers : {1u, 2u, 3u, 5u, 7u, 8u}) {
    for (uint32_t p : kPacketSizes) {
      for (uint32_t threads : {1u, 3u}) {
        const uint64_t offset = 10000;  // not a multiple of 64: blocks straddle runs
        const size_t n = 20 * size_t(p) + 37;
        const BlockLayout layout{p, threads};
        const auto blocks = Blocks(workers, offset, n, layout);
        const auto out = AllReduce(workers, offset, n, blocks, SwitchExps(blocks));
        SCOPED_TRACE("workers " + std::to_string(workers) + ", packet " + std::to_string(p) + ", threads " +
                     std::to_string(threads));
        const Verification exact = VerifyFloat32(out.data(), n, workers, offset, layout);
        EXPECT_EQ(exact.wrong, 0u) << "first at " << exact.first_wrong;
        EXPECT_GT(exact.tolerance, 0.0);
        const Verification unknown = VerifyFloat32(out.data(), n, workers, offset);
        EXPECT_EQ(unknown.wrong, 0u) << "first at " << unknown.first_wrong;
        EXPECT_GE(unknown.tolerance, exact.tolerance);
      }
    }
  }
}

TEST(ExactInputsTest, VerifierCatchesSwappedBlockExponents) {
  for (uint32_t workers : {2u, 3u, 5u}) {
    for (uint32_t p : kPacketSizes) {
      const size_t n = 16 * size_t(p);
      const BlockLayout layout{p, 1};
      const auto blocks = Blocks(workers, 0, n, layout);
      std::vector<int8_t> used = SwitchExps(blocks);
      size_t k = 1;  // the first neighbours whose exponents differ
      while (k < used.size() && used[k] == used[k - 1]) ++k;
      ASSERT_LT(k, used.size());
      std::swap(used[k - 1], used[k]);
      const auto out = AllReduce(workers, 0, n, blocks, used);
      SCOPED_TRACE("workers " + std::to_string(workers) + ", packet " + std::to_string(p));
      const Verification v = VerifyFloat32(out.data(), n, workers, 0, layout);
      EXPECT_GT(v.wrong, 0u);
      // Only the two swapped blocks can be wrong.
      EXPECT_GE(v.first_wrong, blocks[k - 1].start);
      EXPECT_LE(v.wrong, blocks[k - 1].len + blocks[k].len);
      // The block given the smaller exponent clamps: even the layout-free check sees that.
      EXPECT_GT(VerifyFloat32(out.data(), n, workers, 0).wrong, 0u);
    }
  }
}

TEST(ExactInputsTest, VerifierCatchesATooLargeExponentInATinyBlock) {
  // A tiny 64-element block quantized with its neighbour's (much larger) exponent loses all its
  // values; the error stays far below that neighbour's bound, but the tiny block's own bound
  // (known layout) catches it.
  const uint32_t workers = 3, p = 64;
  const size_t n = 64 * 200;
  const auto blocks = Blocks(workers, 0, n, {p, 1});
  std::vector<int8_t> used = SwitchExps(blocks);
  size_t k = 1;
  while (k < used.size() && used[k - 1] - used[k] < 30) ++k;
  ASSERT_LT(k, used.size()) << "no tiny block after a normal one";
  used[k] = used[k - 1];
  const auto out = AllReduce(workers, 0, n, blocks, used);
  const Verification v = VerifyFloat32(out.data(), n, workers, 0, {p, 1});
  EXPECT_GT(v.wrong, 0u);
  EXPECT_GE(v.first_wrong, blocks[k].start);
  EXPECT_LT(v.first_wrong, blocks[k].start + blocks[k].len);
}

TEST(ExactInputsTest, VerifierCatchesRankZerosExponentInsteadOfTheMax) {
  for (uint32_t workers : {2u, 3u, 7u}) {
    for (uint32_t p : kPacketSizes) {
      const size_t n = 16 * size_t(p);
      const BlockLayout layout{p, 1};
      const auto blocks = Blocks(workers, 0, n, layout);
      std::vector<int8_t> used;
      size_t lower = 0;
      for (const Block& b : blocks) {
        used.push_back(b.rank_exp[0]);
        if (b.rank_exp[0] < b.switch_exp) ++lower;
      }
      ASSERT_GT(lower, 0u);
      const auto out = AllReduce(workers, 0, n, blocks, used);
      SCOPED_TRACE("workers " + std::to_string(workers) + ", packet " + std::to_string(p));
      EXPECT_GT(VerifyFloat32(out.data(), n, workers, 0, layout).wrong, 0u);
      EXPECT_GT(VerifyFloat32(out.data(), n, workers, 0).wrong, 0u);
    }
  }
}

TEST(ExactInputsTest, WrongResultIsAlwaysCaught) {
  for (uint32_t workers : {1u, 2u, 3u, 8u}) {
    for (uint64_t i : {0ull, 1ull, 63ull, 64ull, 1000ull, 123457ull}) {
      std::vector<float> out(2048);
      const uint64_t offset = i >= 1024 ? i - 1024 : 0;
      for (size_t j = 0; j < out.size(); ++j) out[j] = float(Float32ExpectedSum(workers, offset + j));
      out[i - offset] = Float32WrongResult(workers, i);
      for (BlockLayout layout : {BlockLayout{}, BlockLayout{64, 1}, BlockLayout{1024, 2}}) {
        const Verification v = VerifyFloat32(out.data(), out.size(), workers, offset, layout);
        EXPECT_EQ(v.wrong, 1u) << "workers " << workers << " index " << i;
        EXPECT_EQ(v.first_wrong, i);
      }
    }
  }
}

TEST(ExactInputsTest, BoundsAreRigorousUpperBoundsOfQuantizationErrorBound) {
  // Float32Bound covers every exponent up to max_exp and every |sum| up to |want|.
  for (uint32_t workers : {1u, 3u, 8u}) {
    for (int e : {-126, -40, 0, 7, 30}) {
      for (double want : {0.0, 1e-12, 0.5, 3.0, 1e6}) {
        const double b = Float32Bound(workers, int8_t(e), want);
        for (int f = -126; f <= e; ++f) EXPECT_GE(b, quant::QuantizationErrorBound(int8_t(f), workers, want));
      }
    }
  }
  // The MPI tests' inputs: |x| <= 125 < 2^7.
  EXPECT_GE(UniformFloat32Tolerance(3, 125.0), quant::QuantizationErrorBound(7, 3, 375.0));
  EXPECT_LT(UniformFloat32Tolerance(3, 125.0), 1e-3);
}

TEST(ExactInputsTest, Int32InputsAreUnchanged) {
  std::vector<int32_t> buf(100);
  FillInt32(2, 5, buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i) {
    ASSERT_GE(buf[i], -1000);
    ASSERT_LE(buf[i], 1000);
  }
  buf[10] = int32_t(Int32ExpectedSum(3, 10)) + 1;
  std::vector<int32_t> out(20);
  for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t(Int32ExpectedSum(3, i));
  out[10] += 1;
  const Verification v = VerifyInt32(out.data(), out.size(), 3);
  EXPECT_EQ(v.wrong, 1u);
  EXPECT_EQ(v.first_wrong, 10u);
}

}  // namespace
}  // namespace switchml::testing
