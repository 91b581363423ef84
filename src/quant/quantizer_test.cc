// Tests of quant/quantizer.h. Every TEST_P runs once per Highway target that quantizer.cc
// compiled and this CPU supports (AVX2, SSE4, SSSE3, EMU128/SCALAR here): the fixture
// restricts dynamic dispatch to that target, and the first test checks it really ran there.
// Results are compared bit for bit with an independent scalar reference written below. The
// switch's side of the simulated all-reduce is the wire format's int32 kernels (wire/payload.h,
// tested in wire/payload_test.cc), which dispatch to the same target.

#include "common/hwy_target_test.h"
#include "quant/quantizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "quant/quantizer_internal.h"
#include "wire/payload.h"

namespace switchml::quant {
namespace {

// ---------------------------------------------------------------- scalar reference

uint32_t AbsBits(float v) { return std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu; }

// Reference BlockExponent: false for Inf/NaN and for |x| >= 2^127 (exponent 128 is not int8).
bool RefExponent(const float* x, size_t n, int8_t* exp) {
  uint32_t max_bits = 0;
  for (size_t i = 0; i < n; ++i) max_bits = std::max(max_bits, AbsBits(x[i]));
  if (max_bits >= 0x7F000000u) return false;
  *exp = static_cast<int8_t>(static_cast<int>(max_bits >> 23) - 126);
  return true;
}

// double -> float with IEEE overflow to ±Inf (a plain cast of a double beyond the float range
// is undefined behaviour): from 2^128 - 2^103 up the correctly rounded float is Inf.
float ToFloat(double v) {
  if (std::fabs(v) >= 0x1.ffffffp127) {
    return std::copysign(std::numeric_limits<float>::infinity(), v);
  }
  return static_cast<float>(v);
}

// The scale as a real number, written independently of ScaleForExponent: f_n * 2^-E with
// f_n = float(INT32_MAX / n), the division in double (n <= 2^24, so f_n * 2^-E is normal).
double RefScale(int e, uint32_t num_workers) {
  const float f_n = static_cast<float>(static_cast<double>(INT32_MAX) / num_workers);
  return std::ldexp(static_cast<double>(f_n), -e);
}

// The reference client's float scale (docs: double(INT32_MAX) / (n * powf(2, E)) stored as a
// float): +Inf for tiny blocks.
float ReferenceClientScale(int e, uint32_t num_workers) {
  const float denominator = static_cast<float>(num_workers) * std::pow(2.0f, static_cast<float>(e));
  return ToFloat(static_cast<double>(INT32_MAX) / denominator);
}

// What this quantizer did before tiny blocks got a shifted scale: the scale in double, clamped
// to FLT_MAX.
float OldScale(int e, uint32_t num_workers) {
  const double scale = static_cast<double>(INT32_MAX) / (num_workers * std::ldexp(1.0, e));
  return scale >= static_cast<double>(FLT_MAX) ? FLT_MAX : static_cast<float>(scale);
}

// clamp(round_half_even(x * s rounded once to float), ±floor(INT32_MAX / n)). x * s is exact
// in double (two 24-bit significands, exponents far inside double's range), so ToFloat rounds
// once.
int32_t RefQuantize(float x, double scale, uint32_t num_workers) {
  const float product = ToFloat(static_cast<double>(x) * scale);
  const double limit = static_cast<double>(INT32_MAX / num_workers);
  const double rounded = std::nearbyint(static_cast<double>(product));  // default: ties to even
  return static_cast<int32_t>(std::clamp(rounded, -limit, limit));
}

// The old kernel's quantization: a float multiply by a float scale.
int32_t OldQuantize(float x, float scale, uint32_t num_workers) {
  return RefQuantize(x, static_cast<double>(scale), num_workers);
}

// float(sum) / s rounded once to float. float(sum) and s have 24-bit significands, so the
// double quotient rounded to float is the correctly rounded float quotient (double rounding
// is innocuous for division when 53 >= 2 * 24 + 2), subnormal results included.
float RefDequantize(int32_t sum, double scale) {
  return ToFloat(static_cast<double>(static_cast<float>(sum)) / scale);
}

void RefStoreBE(int32_t v, uint8_t* p) {
  const auto u = static_cast<uint32_t>(v);
  p[0] = static_cast<uint8_t>(u >> 24);
  p[1] = static_cast<uint8_t>(u >> 16);
  p[2] = static_cast<uint8_t>(u >> 8);
  p[3] = static_cast<uint8_t>(u);
}

int32_t RefLoadBE(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 |
                              uint32_t{p[3]});
}

// ---------------------------------------------------------------- helpers

class QuantTarget : public HwyTargetTest {};

INSTANTIATE_TEST_SUITE_P(AllTargets, QuantTarget, ::testing::ValuesIn(HwyTargetsToTest(internal::CompiledTargets())),
                         HwyTargetName);

// Result of simulating one all-reduce of equal-length blocks over num_workers = inputs.size().
struct Simulation {
  int8_t max_exp = 0;
  Scale scale;
  std::vector<std::vector<uint8_t>> payloads;  // each worker's quantized block
  std::vector<float> result;     // dequantized sum
  std::vector<long double> sum;  // exact sum of the inputs
  long double sum_abs_max = 0;   // max_i |sum[i]|
  long double max_error = 0;     // max_i |result[i] - sum[i]|
};

// The full data path: each worker computes its exponent, the switch takes the max, each worker
// quantizes (checked byte-exact against the reference), the switch adds the payloads into an
// int32 accumulator (checked against exact int64 sums: no wrap), then every worker
// dequantizes the big-endian result (checked bit-exact against the reference).
Simulation Simulate(const std::vector<std::vector<float>>& inputs) {
  const auto num_workers = static_cast<uint32_t>(inputs.size());
  const size_t n = inputs[0].size();
  Simulation sim;
  sim.max_exp = INT8_MIN;
  for (const auto& x : inputs) {
    int8_t e = 0;
    EXPECT_TRUE(BlockExponent(x.data(), n, &e));
    int8_t ref_e = 0;
    EXPECT_TRUE(RefExponent(x.data(), n, &ref_e));
    EXPECT_EQ(e, ref_e);
    sim.max_exp = std::max(sim.max_exp, e);
  }
  sim.scale = ScaleForExponent(sim.max_exp, num_workers);
  EXPECT_EQ(sim.scale.Value(), RefScale(sim.max_exp, num_workers));
  const double s = RefScale(sim.max_exp, num_workers);
  const int64_t limit = INT32_MAX / num_workers;

  std::vector<int32_t> acc(n, 0);
  std::vector<int64_t> exact(n, 0);
  std::vector<uint8_t> payload(4 * n), expected(4 * n);
  for (const auto& x : inputs) {
    QuantizeToBE(x.data(), n, sim.scale, num_workers, payload.data());
    for (size_t i = 0; i < n; ++i) {
      const int32_t q = RefQuantize(x[i], s, num_workers);
      RefStoreBE(q, &expected[4 * i]);
      EXPECT_LE(std::abs(int64_t{q}), limit);
      exact[i] += q;
    }
    EXPECT_EQ(payload, expected) << "quantized bytes differ from the reference";
    wire::AddBEInto(acc.data(), payload.data(), n);
    sim.payloads.push_back(payload);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(int64_t{acc[i]}, exact[i]) << "int32 sum wrapped";

  std::vector<uint8_t> result_bytes(4 * n);
  wire::Int32ToBE(acc.data(), n, result_bytes.data());
  sim.result.assign(n, 0.0f);
  DequantizeFromBE(result_bytes.data(), n, sim.scale, sim.result.data());
  sim.sum.assign(n, 0.0L);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(sim.result[i]),
              std::bit_cast<uint32_t>(RefDequantize(acc[i], s)));
    for (const auto& x : inputs) sim.sum[i] += x[i];  // exact: 64-bit significand suffices
    sim.sum_abs_max = std::max(sim.sum_abs_max, std::fabs(sim.sum[i]));
  }
  for (size_t i = 0; i < n; ++i) {
    sim.max_error = std::max(sim.max_error, std::fabs(sim.result[i] - sim.sum[i]));
  }
  return sim;
}

double BoundFor(const Simulation& sim, size_t num_workers) {
  return QuantizationErrorBound(sim.max_exp, static_cast<uint32_t>(num_workers),
                                static_cast<double>(sim.sum_abs_max));
}

// Uniform in (-magnitude, magnitude), with full 24-bit significands (a float distribution
// would only produce multiples of 2^-24, which quantize without rounding).
std::vector<float> RandomBlock(std::mt19937& rng, size_t n, float magnitude) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(dist(rng) * magnitude);
  return x;
}

// The worker counts the tiny-block tests cover.
constexpr uint32_t kWorkerCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 256};

// n values with |x| < 2^e: the largest float below 2^e and its negation, a zero, the smallest
// subnormal, and random values with full significands (a quarter of them up to 2^40 smaller,
// so blocks near the bottom of the range hold subnormals).
std::vector<float> BlockBelow(std::mt19937& rng, size_t n, int e) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> drop(0, 40);
  const float top = std::nextafter(std::ldexp(1.0f, e), 0.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = ToFloat(std::ldexp(unit(rng), e - (i % 4 == 3 ? drop(rng) : 0)));
    if (std::fabs(x[i]) > top) x[i] = std::copysign(top, x[i]);  // rounded up to 2^e
  }
  x[0] = top;
  if (n > 1) x[1] = -top;
  if (n > 2) x[2] = 0.0f;
  if (n > 3) x[n - 1] = std::numeric_limits<float>::denorm_min();
  return x;
}

// ---------------------------------------------------------------- tests

TEST_P(QuantTarget, DispatchesToTheTargetUnderTest) {
  EXPECT_STREQ(ActiveTarget(), hwy::TargetName(GetParam()));
}

TEST(QuantDispatch, BestTargetIsActiveByDefault) {
  hwy::SetSupportedTargetsForTest(0);
  const int64_t targets = hwy::SupportedTargets() & internal::CompiledTargets();
  ASSERT_NE(targets, 0);
  // The lowest set bit is the best target.
  EXPECT_STREQ(ActiveTarget(), hwy::TargetName(targets & -targets));
}

// The worked example of docs/protocol.md#float32-exponent-quantizer: 2 workers, 3.0 and 20.0.
TEST_P(QuantTarget, WorkedExample) {
  const float a = 3.0f, b = 20.0f;
  int8_t ea = 0, eb = 0;
  ASSERT_TRUE(BlockExponent(&a, 1, &ea));
  ASSERT_TRUE(BlockExponent(&b, 1, &eb));
  EXPECT_EQ(ea, 2);
  EXPECT_EQ(eb, 5);
  const Scale s = ScaleForExponent(std::max(ea, eb), 2);
  EXPECT_EQ(s, (Scale{33554432.0f, 0}));

  uint8_t pa[4], pb[4];
  QuantizeToBE(&a, 1, s, 2, pa);
  QuantizeToBE(&b, 1, s, 2, pb);
  EXPECT_EQ(RefLoadBE(pa), 100663296);
  EXPECT_EQ(RefLoadBE(pb), 671088640);
  const uint8_t expected_a[4] = {0x06, 0x00, 0x00, 0x00};
  EXPECT_EQ(std::memcmp(pa, expected_a, 4), 0);

  int32_t acc = 0;
  wire::AddBEInto(&acc, pa, 1);
  wire::AddBEInto(&acc, pb, 1);
  EXPECT_EQ(acc, 771751936);
  uint8_t sum_be[4];
  wire::Int32ToBE(&acc, 1, sum_be);
  float y = 0;
  DequantizeFromBE(sum_be, 1, s, &y);
  EXPECT_EQ(y, 23.0f);

  // The same with negative inputs.
  const float na = -3.0f, nb = -20.0f;
  QuantizeToBE(&na, 1, s, 2, pa);
  QuantizeToBE(&nb, 1, s, 2, pb);
  EXPECT_EQ(RefLoadBE(pa), -100663296);
  acc = 0;
  wire::AddBEInto(&acc, pa, 1);
  wire::AddBEInto(&acc, pb, 1);
  wire::Int32ToBE(&acc, 1, sum_be);
  DequantizeFromBE(sum_be, 1, s, &y);
  EXPECT_EQ(y, -23.0f);
}

TEST_P(QuantTarget, AllZeroBlockGivesExactZero) {
  for (size_t n : {1u, 7u, 64u, 65u, 1024u}) {
    std::vector<float> x(n, 0.0f);
    for (size_t i = 0; i < n; i += 3) x[i] = -0.0f;
    int8_t e = 0;
    ASSERT_TRUE(BlockExponent(x.data(), n, &e));
    EXPECT_EQ(e, -126);
    for (uint32_t workers : {1u, 2u, 32u, 256u}) {
      const Scale s = ScaleForExponent(e, workers);
      EXPECT_EQ(s.shift, kMaxScaleShift) << "2^31 / (n * 2^-126) exceeds FLT_MAX: shifted";
      const Simulation sim = Simulate(std::vector<std::vector<float>>(workers, x));
      for (float y : sim.result) EXPECT_EQ(std::bit_cast<uint32_t>(y), 0u) << "expected +0.0";
    }
  }
}

TEST_P(QuantTarget, SubnormalBlockStaysWithinBound) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x007FFFFF);
  for (uint32_t workers : {1u, 2u, 3u, 16u}) {
    std::vector<std::vector<float>> inputs(workers, std::vector<float>(100));
    for (auto& x : inputs) {
      for (float& v : x)
        v = std::bit_cast<float>(mantissa(rng) | (static_cast<uint32_t>(rng()) & 0x80000000u));
      x[0] = std::bit_cast<float>(0x007FFFFFu);  // the largest subnormal
    }
    const Simulation sim = Simulate(inputs);
    EXPECT_EQ(sim.max_exp, -126);
    EXPECT_EQ(sim.scale.shift, kMaxScaleShift);
    const double bound = BoundFor(sim, workers);
    EXPECT_LE(sim.max_error, bound) << "workers " << workers;
    for (float y : sim.result) EXPECT_TRUE(std::isfinite(y));
    // Subnormals are multiples of 2^-149 and s = f_n * 2^126 >= 2^149 for n <= 256: with a
    // power-of-two scale every product is an integer, and each element is the exact sum
    // rounded once to float32 (the best the format allows).
    if (std::has_single_bit(workers)) {
      for (size_t i = 0; i < sim.sum.size(); ++i) {
        ASSERT_EQ(sim.result[i], static_cast<float>(sim.sum[i])) << "workers " << workers;
      }
    }
  }
}

// D12 (docs/protocol.md#d12-tiny-blocks-and-non-finite-input): the reference flushes blocks
// below ~2^-97 to zero (its scale overflows to +Inf). With the shifted scale they keep the
// resolution of ordinary blocks (the old clamp to FLT_MAX kept about 12 bits at 1e-35).
TEST_P(QuantTarget, TinyBlockIsNotFlushedToZero) {
  std::mt19937 rng(12);
  for (uint32_t workers : {1u, 2u, 8u}) {
    std::vector<std::vector<float>> inputs;
    for (uint32_t w = 0; w < workers; ++w) {
      inputs.push_back(RandomBlock(rng, 256, 1e-35f));
      inputs.back()[7] = 1e-35f;
    }
    const Simulation sim = Simulate(inputs);
    EXPECT_EQ(sim.scale.shift, kMaxScaleShift);
    EXPECT_TRUE(std::isinf(ReferenceClientScale(sim.max_exp, workers)));
    EXPECT_LE(sim.max_error, BoundFor(sim, workers));
    const long double expected = sim.sum[7];
    ASSERT_GT(expected, 0.0L);
    EXPECT_NEAR(sim.result[7] / expected, 1.0L, 1e-6L) << "workers " << workers;
    // Relative to the block maximum, every element keeps ~2^-24 resolution.
    EXPECT_LE(sim.max_error, 1e-35L * workers * 1e-7L);
  }
}

// The compatibility sweep: for every block exponent and worker count, the quantized integers
// and the dequantized values are exactly the old kernel's (a float multiply by the float
// scale, a float division) wherever the reference client's scale is finite, so reference
// clients and ours still share jobs. Where it is +Inf (the old kernel clamped it to FLT_MAX)
// the integers change: they follow the exact scale.
TEST_P(QuantTarget, EveryExponentKeepsTheOldIntegersWhereTheReferenceScaleIsFinite) {
  std::mt19937 rng(21);
  constexpr size_t kN = 67;
  std::vector<uint8_t> be(4 * kN);
  std::vector<float> y(kN);
  for (uint32_t workers : kWorkerCounts) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    int shifted_exponents = 0;
    for (int e = -126; e <= 127; ++e) {
      SCOPED_TRACE("e " + std::to_string(e));
      const std::vector<float> x = BlockBelow(rng, kN, e);
      int8_t block_exp = 0;
      ASSERT_TRUE(BlockExponent(x.data(), kN, &block_exp));
      ASSERT_EQ(block_exp, e);
      const Scale s = ScaleForExponent(block_exp, workers);
      // (For E >= 128 - log2(n) the reference's float denominator overflows and its scale is
      // 0: a defect of its own that our double computation never had.)
      const bool reference_finite = !std::isinf(ReferenceClientScale(e, workers));
      ASSERT_EQ(s.shift == 0, reference_finite);
      const float old_scale = OldScale(e, workers);
      QuantizeToBE(x.data(), kN, s, workers, be.data());
      // One worker's payload doubles as a sum to dequantize.
      DequantizeFromBE(be.data(), kN, s, y.data());
      size_t changed = 0;
      for (size_t i = 0; i < kN; ++i) {
        const int32_t q = RefLoadBE(&be[4 * i]);
        ASSERT_EQ(q, RefQuantize(x[i], RefScale(e, workers), workers)) << "element " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                  std::bit_cast<uint32_t>(RefDequantize(q, RefScale(e, workers))));
        const int32_t old_q = OldQuantize(x[i], old_scale, workers);
        if (reference_finite) {
          ASSERT_EQ(q, old_q) << "element " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                    std::bit_cast<uint32_t>(static_cast<float>(q) / old_scale));
        } else {
          changed += q != old_q ? 1 : 0;
        }
      }
      if (!reference_finite) {
        ++shifted_exponents;
        // Where the exact scale is well above FLT_MAX, everything but the zero (and elements
        // tiny enough to round to 0 either way) changes.
        if (RefScale(e, workers) >= 4 * static_cast<double>(FLT_MAX)) {
          EXPECT_GE(changed, kN / 2);
        }
      }
    }
    // Shifted exactly for E <= -97 - log2(n) (n a power of two): -97 for one worker, -99 for
    // four, -105 for 256.
    const int expected = workers == 1 ? 30 : workers == 4 ? 28 : workers == 256 ? 22 : -1;
    if (expected >= 0) {
      EXPECT_EQ(shifted_exponents, expected);
    }
  }
}

// The cases the issue measured on the old kernel: blocks whose largest value is 2^-126
// (FLT_MIN), 1.5e-38, and subnormals down to 2^-149. Every worker's block holds the value, its
// negation, thirds and random smaller values. With the old FLT_MAX scale they kept 2-3 bits
// (1e-40 and 2^-149 came back as 0); now the error is that of an ordinary block: for a
// power-of-two worker count and s >= 2^149 every element is the exact sum rounded once to
// float32 (these inputs are multiples of 2^-149, so every product is an integer), otherwise
// the error is within 2^-20 of n * 2^E, the largest sum the block's exponent allows (for
// subnormal blocks E = -126 and the bound is 2^-150 to a few 2^-149).
TEST_P(QuantTarget, TinyBlocksFromTheIssueKeepTheirPrecision) {
  std::mt19937 rng(22);
  for (float v : {0x1p-126f, 1.5e-38f, 0x1.fffffcp-127f, 1e-40f, 0x1p-140f, 0x1p-149f}) {
    for (uint32_t workers : kWorkerCounts) {
      SCOPED_TRACE("v " + std::to_string(v) + " workers " + std::to_string(workers));
      std::vector<std::vector<float>> inputs;
      for (uint32_t w = 0; w < workers; ++w) {
        std::vector<float> x = RandomBlock(rng, 64, v);  // |x| < v, rounded to floats
        x[0] = v;
        x[1] = -v;
        x[2] = v / 3.0f;
        x[3] = (w % 2 == 0 ? 1 : -1) * v / 3.0f;
        inputs.push_back(std::move(x));
      }
      const Simulation sim = Simulate(inputs);
      const long double block_sum_max = static_cast<long double>(v) * workers;
      ASSERT_EQ(sim.sum_abs_max, block_sum_max);
      const double bound = BoundFor(sim, workers);
      EXPECT_LE(sim.max_error, bound);
      EXPECT_LE(bound, std::ldexp(workers * 0x1p-20, sim.max_exp));
      if (std::has_single_bit(workers) && sim.scale.Value() >= 0x1p149) {
        for (size_t i = 0; i < sim.sum.size(); ++i) {
          ASSERT_EQ(sim.result[i], static_cast<float>(sim.sum[i])) << "element " << i;
        }
      }

      // What the old kernel (scale clamped to FLT_MAX) returned for the same inputs.
      const float old_scale = OldScale(sim.max_exp, workers);
      ASSERT_EQ(old_scale, FLT_MAX);
      long double old_error = 0;
      for (size_t i = 0; i < sim.sum.size(); ++i) {
        int64_t old_sum = 0;
        for (const auto& x : inputs) old_sum += OldQuantize(x[i], old_scale, workers);
        const float old_y = static_cast<float>(old_sum) / old_scale;
        old_error = std::max(old_error, std::fabs(old_y - sim.sum[i]));
      }
      EXPECT_GT(old_error, block_sum_max * 0.01L) << "the old kernel lost these blocks";
    }
  }
}

// Tiny blocks have exactly the precision of ordinary ones: a block and its copy scaled by 2^100
// (every value exact) quantize to the same integers on every worker, and the results differ by
// the factor 2^-100 alone, up to float32's own rounding where the tiny result is subnormal
// (2^-150).
TEST_P(QuantTarget, TinyBlocksQuantizeLikeTheirScaledUpCopies) {
  std::mt19937 rng(23);
  for (int e : {-126, -125, -124, -120, -110, -104, -100, -97}) {
    for (uint32_t workers : kWorkerCounts) {
      SCOPED_TRACE("e " + std::to_string(e) + " workers " + std::to_string(workers));
      std::vector<std::vector<float>> tiny, big;
      for (uint32_t w = 0; w < workers; ++w) {
        // Worker exponents spread over 8 below e (worker 0 holds the block maximum).
        tiny.push_back(BlockBelow(rng, 40, w == 0 ? e : e - static_cast<int>(rng() % 8)));
        big.push_back(tiny.back());
        for (float& v : big.back()) v = std::ldexp(v, 100);  // exact: scaling up
      }
      const Simulation t = Simulate(tiny);
      const Simulation b = Simulate(big);
      ASSERT_EQ(t.max_exp, e);
      ASSERT_EQ(b.max_exp, e + 100);
      EXPECT_EQ(b.scale.shift, 0);
      ASSERT_EQ(t.payloads, b.payloads) << "the same integers on the wire";
      for (size_t i = 0; i < t.result.size(); ++i) {
        const long double scaled_down = std::ldexp(static_cast<long double>(b.result[i]), -100);
        if (std::fabs(scaled_down) >= 0x1p-126L) {
          ASSERT_EQ(t.result[i], scaled_down) << "element " << i;
        } else {
          ASSERT_LE(std::fabs(t.result[i] - scaled_down), 0x1p-150L) << "element " << i;
        }
      }
      EXPECT_LE(t.max_error, BoundFor(t, workers));
      EXPECT_LE(BoundFor(t, workers),
                std::ldexp(BoundFor(b, workers), -100) + 0x1p-150 * (1 + 0x1p-30));
    }
  }
}

// Tensors mixing tiny and ordinary blocks, and blocks where one worker's data is tiny and
// another's is not: every block gets the scale of its own switch-wide exponent.
TEST_P(QuantTarget, MixesOfTinyAndOrdinaryBlocksStayWithinBound) {
  std::mt19937 rng(24);
  const int exponents[] = {-126, 0, -125, -97, 20, -110, -60, -100, 127, -120};
  for (uint32_t workers : kWorkerCounts) {
    for (int e : exponents) {
      for (int spread : {0, 30, 120}) {  // worker w > 0 holds data up to 2^(e - spread)
        SCOPED_TRACE("workers " + std::to_string(workers) + " e " + std::to_string(e) +
                     " spread " + std::to_string(spread));
        std::vector<std::vector<float>> inputs;
        for (uint32_t w = 0; w < workers; ++w) {
          inputs.push_back(BlockBelow(rng, 100, w == 0 ? e : std::max(-140, e - spread)));
        }
        const Simulation sim = Simulate(inputs);
        ASSERT_EQ(sim.max_exp, e);
        EXPECT_LE(sim.max_error, BoundFor(sim, workers));
        EXPECT_EQ(sim.scale.shift == 0, std::isfinite(ReferenceClientScale(e, workers)));
      }
    }
  }
}

// Workers whose blocks differ by up to 2^40 in magnitude: the small ones lose precision
// (they are quantized with the largest worker's exponent) but the bound holds.
TEST_P(QuantTarget, MixedMagnitudesAcrossWorkersStayWithinBound) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (uint32_t workers : {1u, 2u, 3u, 5u, 8u, 32u, 256u}) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<std::vector<float>> inputs;
      for (uint32_t w = 0; w < workers; ++w) {
        inputs.push_back(RandomBlock(rng, 1024, std::ldexp(1.0f, exponent(rng))));
      }
      const Simulation sim = Simulate(inputs);
      const double bound = BoundFor(sim, workers);
      EXPECT_LE(sim.max_error, bound) << "workers " << workers << " trial " << trial;
    }
  }
}

// The bound must not be absurdly loose: on random data it is within 8x of the largest error
// actually observed. With independent blocks the workers' rounding errors partly cancel (a
// random walk: ~sqrt(n) instead of n), so for many workers the worst case is shown with every
// worker sending the same random block, where they add up coherently. Observed/bound ratios
// with this seed: independent blocks 0.30-1.0 for n <= 32 (0.07-0.27 for n = 100, 256);
// identical blocks 0.40-0.71 for n = 100, 256.
TEST_P(QuantTarget, ErrorBoundIsTightOnRandomData) {
  std::mt19937 rng(14);
  for (uint32_t workers : {1u, 2u, 3u, 7u, 8u, 32u, 100u, 256u}) {
    for (float magnitude : {1.0f, 7.5f, 3e-20f, 1e-33f}) {
      for (bool identical_blocks : {false, true}) {
        std::vector<std::vector<float>> inputs;
        for (uint32_t w = 0; w < workers; ++w) {
          inputs.push_back(identical_blocks && w > 0 ? inputs[0]
                                                     : RandomBlock(rng, 1024, magnitude));
        }
        const Simulation sim = Simulate(inputs);
        const double bound = BoundFor(sim, workers);
        const double observed = static_cast<double>(sim.max_error);
        SCOPED_TRACE("workers " + std::to_string(workers) + " magnitude " +
                     std::to_string(magnitude) + " identical " + std::to_string(identical_blocks) +
                     " observed/bound = " + std::to_string(observed / bound));
        EXPECT_LE(observed, bound);
        // Identical blocks with few workers are an easy case, not a tightness witness: with
        // n a power of two the int32 sum n * q converts to float exactly.
        if (identical_blocks ? workers >= 100 : workers <= 32) {
          EXPECT_LE(bound, 8 * observed);
        }
      }
    }
  }
}

// The largest float below 2^E, contributed by every worker with the same sign: each quantized
// value stays within ±floor(INT32_MAX / n), so the int32 sum of n of them never wraps.
TEST_P(QuantTarget, ValuesJustBelowTwoToTheExponentNeverWrap) {
  for (int e : {-126, -125, -110, -100, -97, -96, -1, 0, 5, 30, 126, 127}) {
    const float x = std::nextafter(std::ldexp(1.0f, e), 0.0f);
    int8_t block_exp = 0;
    ASSERT_TRUE(BlockExponent(&x, 1, &block_exp));
    ASSERT_EQ(block_exp, e);
    for (uint32_t workers = 1; workers <= 256; ++workers) {
      const Scale s = ScaleForExponent(block_exp, workers);
      const int64_t limit = INT32_MAX / workers;
      for (float sign : {1.0f, -1.0f}) {
        const float v = sign * x;
        uint8_t be[4];
        QuantizeToBE(&v, 1, s, workers, be);
        const int32_t q = RefLoadBE(be);
        ASSERT_EQ(q, RefQuantize(v, RefScale(e, workers), workers));
        ASSERT_LE(std::abs(int64_t{q}), limit) << "e " << e << " workers " << workers;
        int32_t acc = 0;
        for (uint32_t w = 0; w < workers; ++w) wire::AddBEInto(&acc, be, 1);
        ASSERT_EQ(int64_t{acc}, int64_t{q} * workers) << "e " << e << " workers " << workers;
        uint8_t sum_be[4];
        wire::Int32ToBE(&acc, 1, sum_be);
        float y = 0;
        DequantizeFromBE(sum_be, 1, s, &y);
        const long double exact = static_cast<long double>(v) * workers;
        const double bound = QuantizationErrorBound(block_exp, workers, std::fabs(exact));
        ASSERT_LE(std::fabs(y - exact), bound) << "e " << e << " workers " << workers;
      }
    }
  }
}

TEST_P(QuantTarget, RoundsHalfToEven) {
  const std::vector<float> x = {0.5f,        1.5f,         2.5f,       -0.5f,       -1.5f, -2.5f,
                                0.49999997f, -0.49999997f, 8388607.5f, -8388606.5f, 3.0f,  1e-30f};
  const std::vector<int32_t> expected = {0, 2, 2, 0, -2, -2, 0, 0, 8388608, -8388606, 3, 0};
  std::vector<uint8_t> be(4 * x.size());
  QuantizeToBE(x.data(), x.size(), Scale{1.0f, 0}, 1, be.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(RefLoadBE(&be[4 * i]), expected[i]) << x[i];
}

// Inputs outside the contract (|x| >= 2^E, Inf) are clamped to ±floor(INT32_MAX / n): defined
// results, no overflow of the float-to-int conversion.
TEST_P(QuantTarget, ClampsValuesBeyondTheExponent) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float x;
    Scale scale;
    uint32_t workers;
    int32_t expected;
  };
  const Case cases[] = {
      {2147483648.0f, {1.0f, 0}, 1, INT32_MAX},   // 2^31: beyond int32
      {2147483520.0f, {1.0f, 0}, 1, 2147483520},  // largest float below 2^31: exact
      {-2147483648.0f, {1.0f, 0}, 1, -INT32_MAX},
      {715827840.0f, {1.0f, 0}, 3, 715827840},  // largest float <= floor(INT32_MAX / 3)
      {715827904.0f, {1.0f, 0}, 3, 715827882},  // next float: clamped
      {1e30f, {1.0f, 0}, 7, INT32_MAX / 7},
      {-1e30f, {1.0f, 0}, 7, -(INT32_MAX / 7)},
      {inf, {1.0f, 0}, 2, INT32_MAX / 2},
      {-inf, {1.0f, 0}, 2, -(INT32_MAX / 2)},
      {1e-20f, {FLT_MAX, 0}, 1, INT32_MAX},             // product 3.4e18
      {-1e38f, {FLT_MAX, 0}, 256, -(INT32_MAX / 256)},  // product overflows to -Inf
      // Shifted scales: x * 2^126 overflows to Inf (x far beyond its exponent), or the
      // product does.
      {1e30f, {4.0f, kMaxScaleShift}, 1, INT32_MAX},
      {-1e-10f, {4.0f, kMaxScaleShift}, 8, -(INT32_MAX / 8)},
      {inf, {2.0f, kMaxScaleShift}, 2, INT32_MAX / 2},
      {0x1.fffffep-98f, {4.0f, kMaxScaleShift}, 1, 2147483520},  // below 2^E = 2^-97: exact
      {0x1p-97f, {4.0f, kMaxScaleShift}, 1, INT32_MAX},           // 2^31: clamped
      // Around the int32 conversion's range with several workers (the x86 fast path caps
      // products just below 2^31 before converting).
      {2147483520.0f, {1.0f, 0}, 2, INT32_MAX / 2},
      {2147483648.0f, {1.0f, 0}, 2, INT32_MAX / 2},
      {3e9f, {1.0f, 0}, 4, INT32_MAX / 4},
      {-2147483648.0f, {1.0f, 0}, 2, -(INT32_MAX / 2)},
      {-3e9f, {1.0f, 0}, 4, -(INT32_MAX / 4)},
      {1073741760.0f, {1.0f, 0}, 2, 1073741760},  // largest float <= floor(INT32_MAX / 2): exact
      {1073741824.0f, {1.0f, 0}, 2, INT32_MAX / 2},  // 2^30: one above the bound
  };
  for (const Case& c : cases) {
    uint8_t be[4];
    QuantizeToBE(&c.x, 1, c.scale, c.workers, be);
    EXPECT_EQ(RefLoadBE(be), c.expected)
        << c.x << " * " << c.scale.factor << " * 2^" << c.scale.shift << ", workers " << c.workers;
    EXPECT_EQ(RefLoadBE(be), RefQuantize(c.x, c.scale.Value(), c.workers));
  }
}

TEST_P(QuantTarget, ReturnsTheLargestProductSoClampsAreNeverSilent) {
  // The return value is max |x * s| (float products), the engine's cue to look for clamps.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (size_t n : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = u(rng);
    const Scale s = ScaleForExponent(2, 5);
    ASSERT_EQ(s.shift, 0);
    std::vector<uint8_t> be(4 * n);
    float want = 0.0f;
    for (float v : x) want = std::max(want, std::fabs(v * s.factor));
    EXPECT_EQ(QuantizeToBE(x.data(), n, s, 5, be.data()), want) << n;
    EXPECT_LT(want, float(QuantizeLimit(5)));  // |x| < 2^2: below the bound, nothing clamped
    EXPECT_EQ(CountClamped(x.data(), n, s, 5), 0u);
  }
  // The one legitimate clamp: 256 workers, s = 2^23, the largest float below 2^E gives the
  // product 2^23 - 0.5, which rounds (to even) to 2^23, one above floor(INT32_MAX / 256).
  const float below_one = std::nextafter(1.0f, 0.0f);
  const float x[3] = {below_one, 0.5f, -below_one};
  const Scale s = ScaleForExponent(0, 256);
  uint8_t be[16];  // room for the 4-element tiny case below
  EXPECT_EQ(QuantizeToBE(x, 3, s, 256, be), 8388607.5f);
  EXPECT_GE(8388607.5f, float(QuantizeLimit(256)));
  EXPECT_EQ(CountClamped(x, 3, s, 256), 2u);
  EXPECT_EQ(RefLoadBE(be), QuantizeLimit(256));
  // Data beyond the exponent: every such element is counted.
  const float beyond[4] = {1.5f, -2.0f, 0.25f, 1e30f};
  EXPECT_EQ(CountClamped(beyond, 4, ScaleForExponent(0, 2), 2), 3u);
  EXPECT_EQ(QuantizeToBE(nullptr, 0, Scale{}, 1, nullptr), 0.0f);
  // The same with a shifted scale (tiny blocks): the products are x * s, not x * factor.
  const float tiny[4] = {below_one * 0x1p-110f, 0x1p-111f, -below_one * 0x1p-110f, 0x1p-140f};
  const Scale tiny_s = ScaleForExponent(-110, 256);
  ASSERT_EQ(tiny_s.shift, kMaxScaleShift);
  EXPECT_EQ(QuantizeToBE(tiny, 4, tiny_s, 256, be), 8388607.5f);
  EXPECT_EQ(CountClamped(tiny, 4, tiny_s, 256), 2u);
  const float tiny_beyond[3] = {0x1.8p-110f, -0x1p-109f, 0x1p-112f};
  EXPECT_EQ(CountClamped(tiny_beyond, 3, ScaleForExponent(-110, 2), 2), 2u);
}

TEST_P(QuantTarget, BlockExponentRejectsNonFiniteAnywhere) {
  const float inf = std::numeric_limits<float>::infinity();
  const float bad[] = {inf,
                       -inf,
                       std::numeric_limits<float>::quiet_NaN(),
                       -std::numeric_limits<float>::quiet_NaN(),
                       std::bit_cast<float>(0x7F800001u),  // signalling NaN
                       std::bit_cast<float>(0xFFFFFFFFu),
                       std::ldexp(1.0f, 127),  // |x| >= 2^127: e = 128 does not fit int8
                       FLT_MAX,
                       -FLT_MAX};
  std::mt19937 rng(15);
  for (size_t n : {1u, 7u, 63u, 64u, 65u, 1024u}) {
    const std::vector<float> good = RandomBlock(rng, n, 1e6f);
    int8_t e = 0;
    ASSERT_TRUE(BlockExponent(good.data(), n, &e));
    for (size_t pos : {size_t{0}, n / 2, n - 1}) {
      for (float b : bad) {
        std::vector<float> x = good;
        x[pos] = b;
        EXPECT_FALSE(BlockExponent(x.data(), n, &e)) << "n " << n << " pos " << pos << " " << b;
      }
    }
  }
  // The largest accepted magnitude.
  const float largest = std::nextafter(std::ldexp(1.0f, 127), 0.0f);
  int8_t e = 0;
  ASSERT_TRUE(BlockExponent(&largest, 1, &e));
  EXPECT_EQ(e, 127);
}

TEST_P(QuantTarget, BlockExponentMatchesDefinition) {
  struct Case {
    float max;
    int expected;
  };
  const Case cases[] = {{0.0f, -126},    {1e-45f, -126}, {1.1754942e-38f, -126},
                        {FLT_MIN, -125}, {0.5f, 0},      {0.99999994f, 0},
                        {1.0f, 1},       {3.0f, 2},      {20.0f, 5},
                        {-20.0f, 5},     {65536.0f, 17}, {1e38f, 127}};
  for (const Case& c : cases) {
    const float x[3] = {0.25f * c.max, c.max, -0.5f * c.max};
    int8_t e = 0;
    ASSERT_TRUE(BlockExponent(x, 3, &e)) << c.max;
    EXPECT_EQ(e, c.expected) << c.max;
    EXPECT_LT(std::fabs(c.max), std::ldexp(1.0, e)) << "|x| < 2^e";
  }
}

// Sizes around the vector width, unaligned pointers (float arrays and byte buffers at offsets
// 0-3), bit-exact against the reference, and no writes outside [0, n). The int32 kernels have
// the same test in wire/payload_test.cc.
TEST_P(QuantTarget, AllKernelsMatchReferenceForAnySizeAndAlignment) {
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> exponent(-40, 40);
  constexpr uint8_t kGuard = 0xA5;
  for (size_t n : {0u, 1u, 2u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 64u, 65u, 1023u, 1024u}) {
    for (size_t offset : {0u, 1u, 2u, 3u}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      std::vector<float> x_store(n + 8);
      float* x = x_store.data() + offset;
      // Odd offsets get tiny blocks (maxima around 2^-110, many subnormals and zeros): shifted
      // scales.
      const int base = offset % 2 == 1 ? -150 : 0;
      for (size_t i = 0; i < n; ++i) {
        x[i] = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), base + exponent(rng));
      }
      int8_t e = 0, ref_e = 0;
      ASSERT_TRUE(BlockExponent(x, n, &e));
      ASSERT_TRUE(RefExponent(x, n, &ref_e));
      EXPECT_EQ(e, ref_e);
      const uint32_t workers = 1 + static_cast<uint32_t>(rng() % 40);
      const Scale s = ScaleForExponent(e, workers);
      const double s_value = RefScale(e, workers);

      // QuantizeToBE into a byte buffer at an odd offset, with guard bytes around it.
      std::vector<uint8_t> bytes(4 * n + 16, kGuard);
      uint8_t* be = bytes.data() + 4 + offset;
      QuantizeToBE(x, n, s, workers, be);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(RefLoadBE(be + 4 * i), RefQuantize(x[i], s_value, workers)) << "element " << i;
      }
      for (size_t i = 0; i < 4 + offset; ++i) EXPECT_EQ(bytes[i], kGuard);
      for (size_t i = 4 + offset + 4 * n; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], kGuard);

      // DequantizeFromBE from the odd offset into floats at an odd offset.
      std::vector<float> y_store(n + 8, -7.0f);
      float* y = y_store.data() + (3 - offset);
      DequantizeFromBE(be, n, s, y);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                  std::bit_cast<uint32_t>(RefDequantize(RefLoadBE(be + 4 * i), s_value)));
      }
      for (size_t i = 0; i < 3 - offset; ++i) EXPECT_EQ(y_store[i], -7.0f);
      for (size_t i = 3 - offset + n; i < y_store.size(); ++i) EXPECT_EQ(y_store[i], -7.0f);
    }
  }
}

// DequantizeFromBE multiplies by 1/s when s is a power of two, and by 2^-shift first for
// shifted scales: still bit-identical to one correctly rounded division, including
// reciprocals in the subnormal range and results that underflow.
TEST_P(QuantTarget, DequantizeEqualsDivisionForEveryScale) {
  std::mt19937 rng(17);
  std::vector<int32_t> sums(257);
  for (int32_t& v : sums) v = static_cast<int32_t>(rng()) >> (rng() % 32);
  sums[0] = INT32_MIN, sums[1] = INT32_MAX, sums[2] = 0, sums[3] = 1, sums[4] = -1;
  std::vector<uint8_t> be(4 * sums.size());
  wire::Int32ToBE(sums.data(), sums.size(), be.data());
  std::vector<Scale> scales;
  for (float f : {std::ldexp(1.0f, -128), std::ldexp(1.0f, -100), 0.5f, 1.0f, std::ldexp(1.0f, 31),
                  std::ldexp(1.0f, 126), std::ldexp(1.0f, 127), FLT_MAX, 3.0f * 1048576.0f,
                  33554432.0f, 1e-30f}) {
    scales.push_back({f, 0});
    if (f >= 0.5f && f <= 0x1p60f) scales.push_back({f, kMaxScaleShift});  // shifted: tiny blocks
  }
  for (int e = -128; e <= 127; e += (e < -90 ? 1 : 7)) {
    for (uint32_t n : {1u, 2u, 3u, 8u, 100u, 256u}) {
      scales.push_back(ScaleForExponent(static_cast<int8_t>(e), n));
    }
  }
  std::vector<float> y(sums.size());
  for (const Scale& s : scales) {
    DequantizeFromBE(be.data(), sums.size(), s, y.data());
    for (size_t i = 0; i < sums.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                std::bit_cast<uint32_t>(RefDequantize(sums[i], s.Value())))
          << "scale " << s.factor << " * 2^" << s.shift << " sum " << sums[i];
    }
  }
}

TEST_P(QuantTarget, ZeroElementsTouchNothing) {
  int8_t e = 55;
  EXPECT_TRUE(BlockExponent(nullptr, 0, &e));
  EXPECT_EQ(e, -126);
  QuantizeToBE(nullptr, 0, Scale{}, 1, nullptr);
  DequantizeFromBE(nullptr, 0, Scale{}, nullptr);
}

// ---------------------------------------------------------------- scalar functions

TEST(QuantScale, MatchesTheReferenceWhereFiniteAndShiftsBelow) {
  EXPECT_EQ(ScaleForExponent(5, 2), (Scale{33554432.0f, 0}));
  EXPECT_EQ(ScaleForExponent(0, 1), (Scale{2147483648.0f, 0}));  // 2147483647 rounds to 2^31
  EXPECT_EQ(ScaleForExponent(0, 0), ScaleForExponent(0, 1)) << "0 workers treated as 1";
  EXPECT_EQ(ScaleForExponent(127, 1), (Scale{std::ldexp(1.0f, -96), 0}));
  EXPECT_EQ(ScaleForExponent(-96, 1), (Scale{std::ldexp(1.0f, 127), 0}));
  EXPECT_EQ(ScaleForExponent(-97, 1), (Scale{4.0f, kMaxScaleShift})) << "2^128: beyond float";
  EXPECT_EQ(ScaleForExponent(-126, 1), (Scale{0x1p31f, kMaxScaleShift}));   // 2^157
  EXPECT_EQ(ScaleForExponent(-126, 256), (Scale{0x1p23f, kMaxScaleShift})); // 2^149
  EXPECT_EQ(ScaleForExponent(-128, 1), (Scale{0x1p33f, kMaxScaleShift}));
  EXPECT_EQ((Scale{3.0f, 2}).Value(), 12.0);
  const Scale smallest = ScaleForExponent(127, UINT32_MAX);
  EXPECT_GT(smallest.factor, 0.0f);
  EXPECT_TRUE(std::isfinite(smallest.factor));
  EXPECT_EQ(smallest.shift, 0);
  // Every exponent: the value is f_n * 2^-E; the factor is the reference client's float scale
  // (float denominator) wherever that is finite, and the scale is shifted exactly where it is
  // +Inf.
  // (The reference's float denominator overflows for large n * 2^E, giving it a zero scale;
  // ours stays the double computation there: shift 0.)
  std::vector<uint32_t> counts;
  for (uint32_t n = 1; n <= 300; ++n) counts.push_back(n);
  counts.push_back((1u << 20) + 1);
  counts.push_back(1u << 24);
  for (uint32_t workers : counts) {
    for (int e = -128; e <= 127; ++e) {
      const Scale s = ScaleForExponent(static_cast<int8_t>(e), workers);
      const float reference = ReferenceClientScale(e, workers);
      ASSERT_EQ(s.Value(), RefScale(e, workers)) << "e " << e << " workers " << workers;
      if (std::isinf(reference)) {
        ASSERT_EQ(s.shift, kMaxScaleShift) << "e " << e << " workers " << workers;
      } else if (reference != 0.0f) {
        ASSERT_EQ(s, (Scale{reference, 0})) << "e " << e << " workers " << workers;
      } else {
        ASSERT_EQ(s.shift, 0) << "e " << e << " workers " << workers;
      }
    }
  }
}

TEST(QuantBound, ScalesWithWorkersAndMagnitude) {
  // n = 1, power-of-two scale: only the rounding to an integer remains.
  const double s = ScaleForExponent(3, 1).Value();
  EXPECT_NEAR(QuantizationErrorBound(3, 1, 5.0), 0.5 / s, 1e-6 / s);
  EXPECT_LT(QuantizationErrorBound(3, 2, 5.0), QuantizationErrorBound(3, 3, 5.0));
  EXPECT_LT(QuantizationErrorBound(3, 8, 5.0), QuantizationErrorBound(4, 8, 5.0));
  EXPECT_LE(QuantizationErrorBound(3, 8, 1.0), QuantizationErrorBound(3, 8, 64.0));
  EXPECT_GT(QuantizationErrorBound(-126, 1, 0.0), 0.0);
  EXPECT_TRUE(std::isinf(QuantizationErrorBound(127, 4, 6e38))) << "float sum overflows";
}

}  // namespace
}  // namespace switchml::quant
