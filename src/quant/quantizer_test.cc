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

// clamp(round_half_even(float(x * s)), ±floor(INT32_MAX / n)), computed in double.
int32_t RefQuantize(float x, float scale, uint32_t num_workers) {
  const float product = x * scale;  // float32 multiply, as the reference client does
  const double limit = static_cast<double>(INT32_MAX / num_workers);
  const double rounded = std::nearbyint(static_cast<double>(product));  // default: ties to even
  return static_cast<int32_t>(std::clamp(rounded, -limit, limit));
}

float RefDequantize(int32_t sum, float scale) { return static_cast<float>(sum) / scale; }

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
  float scale = 0;
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
  const int64_t limit = INT32_MAX / num_workers;

  std::vector<int32_t> acc(n, 0);
  std::vector<int64_t> exact(n, 0);
  std::vector<uint8_t> payload(4 * n), expected(4 * n);
  for (const auto& x : inputs) {
    QuantizeToBE(x.data(), n, sim.scale, num_workers, payload.data());
    for (size_t i = 0; i < n; ++i) {
      const int32_t q = RefQuantize(x[i], sim.scale, num_workers);
      RefStoreBE(q, &expected[4 * i]);
      EXPECT_LE(std::abs(int64_t{q}), limit);
      exact[i] += q;
    }
    EXPECT_EQ(payload, expected) << "quantized bytes differ from the reference";
    wire::AddBEInto(acc.data(), payload.data(), n);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(int64_t{acc[i]}, exact[i]) << "int32 sum wrapped";

  std::vector<uint8_t> result_bytes(4 * n);
  wire::Int32ToBE(acc.data(), n, result_bytes.data());
  sim.result.assign(n, 0.0f);
  DequantizeFromBE(result_bytes.data(), n, sim.scale, sim.result.data());
  sim.sum.assign(n, 0.0L);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(sim.result[i]),
              std::bit_cast<uint32_t>(RefDequantize(acc[i], sim.scale)));
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
  const float s = ScaleForExponent(std::max(ea, eb), 2);
  EXPECT_EQ(s, 33554432.0f);

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
      const float s = ScaleForExponent(e, workers);
      EXPECT_EQ(s, FLT_MAX) << "2^31 / (n * 2^-126) exceeds FLT_MAX: clamped";
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
    EXPECT_EQ(sim.scale, FLT_MAX);
    const double bound = BoundFor(sim, workers);
    EXPECT_LE(sim.max_error, bound) << "workers " << workers;
    for (float y : sim.result) EXPECT_TRUE(std::isfinite(y));
    // The largest subnormal quantizes to 4 quanta per worker and is not lost.
    EXPECT_GT(std::fabs(sim.result[0]), 0.0f);
  }
}

// D12 (docs/protocol.md#d12-tiny-blocks-and-non-finite-input): the reference flushes blocks below ~2^-97 to zero (its scale overflows to +Inf); the
// clamped scale keeps about 12 significant bits at 1e-35.
TEST_P(QuantTarget, TinyBlockIsNotFlushedToZero) {
  std::mt19937 rng(12);
  for (uint32_t workers : {1u, 2u, 8u}) {
    std::vector<std::vector<float>> inputs;
    for (uint32_t w = 0; w < workers; ++w) {
      inputs.push_back(RandomBlock(rng, 256, 1e-35f));
      inputs.back()[7] = 1e-35f;
    }
    const Simulation sim = Simulate(inputs);
    EXPECT_EQ(sim.scale, FLT_MAX);
    EXPECT_LE(sim.max_error, BoundFor(sim, workers));
    const long double expected = sim.sum[7];
    ASSERT_GT(expected, 0.0L);
    EXPECT_NEAR(sim.result[7] / expected, 1.0L, 1e-3L) << "workers " << workers;
    // Relative to the block maximum, every element keeps ~2^-12 resolution.
    EXPECT_LE(sim.max_error, 1e-35L * workers * 1e-3L);
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
    for (float magnitude : {1.0f, 7.5f, 3e-20f}) {
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
  for (int e : {-126, -100, -1, 0, 5, 30, 126, 127}) {
    const float x = std::nextafter(std::ldexp(1.0f, e), 0.0f);
    int8_t block_exp = 0;
    ASSERT_TRUE(BlockExponent(&x, 1, &block_exp));
    ASSERT_EQ(block_exp, e);
    for (uint32_t workers = 1; workers <= 256; ++workers) {
      const float s = ScaleForExponent(block_exp, workers);
      const int64_t limit = INT32_MAX / workers;
      for (float sign : {1.0f, -1.0f}) {
        const float v = sign * x;
        uint8_t be[4];
        QuantizeToBE(&v, 1, s, workers, be);
        const int32_t q = RefLoadBE(be);
        ASSERT_EQ(q, RefQuantize(v, s, workers));
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
  QuantizeToBE(x.data(), x.size(), 1.0f, 1, be.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(RefLoadBE(&be[4 * i]), expected[i]) << x[i];
}

// Inputs outside the contract (|x| >= 2^E, Inf) are clamped to ±floor(INT32_MAX / n): defined
// results, no overflow of the float-to-int conversion.
TEST_P(QuantTarget, ClampsValuesBeyondTheExponent) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float x, scale;
    uint32_t workers;
    int32_t expected;
  };
  const Case cases[] = {
      {2147483648.0f, 1.0f, 1, INT32_MAX},   // 2^31: beyond int32
      {2147483520.0f, 1.0f, 1, 2147483520},  // largest float below 2^31: exact
      {-2147483648.0f, 1.0f, 1, -INT32_MAX},
      {715827840.0f, 1.0f, 3, 715827840},  // largest float <= floor(INT32_MAX / 3)
      {715827904.0f, 1.0f, 3, 715827882},  // next float: clamped
      {1e30f, 1.0f, 7, INT32_MAX / 7},
      {-1e30f, 1.0f, 7, -(INT32_MAX / 7)},
      {inf, 1.0f, 2, INT32_MAX / 2},
      {-inf, 1.0f, 2, -(INT32_MAX / 2)},
      {1e-20f, FLT_MAX, 1, INT32_MAX},             // product 3.4e18
      {-1e38f, FLT_MAX, 256, -(INT32_MAX / 256)},  // product overflows to -Inf
      // Around the int32 conversion's range with several workers (the x86 fast path caps
      // products just below 2^31 before converting).
      {2147483520.0f, 1.0f, 2, INT32_MAX / 2},
      {2147483648.0f, 1.0f, 2, INT32_MAX / 2},
      {3e9f, 1.0f, 4, INT32_MAX / 4},
      {-2147483648.0f, 1.0f, 2, -(INT32_MAX / 2)},
      {-3e9f, 1.0f, 4, -(INT32_MAX / 4)},
      {1073741760.0f, 1.0f, 2, 1073741760},  // largest float <= floor(INT32_MAX / 2): exact
      {1073741824.0f, 1.0f, 2, INT32_MAX / 2},  // 2^30: one above the bound
  };
  for (const Case& c : cases) {
    uint8_t be[4];
    QuantizeToBE(&c.x, 1, c.scale, c.workers, be);
    EXPECT_EQ(RefLoadBE(be), c.expected) << c.x << " * " << c.scale << ", workers " << c.workers;
    EXPECT_EQ(RefLoadBE(be), RefQuantize(c.x, c.scale, c.workers));
  }
}

TEST_P(QuantTarget, ReturnsTheLargestProductSoClampsAreNeverSilent) {
  // The return value is max |x * s| (float products), the engine's cue to look for clamps.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (size_t n : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = u(rng);
    const float s = ScaleForExponent(2, 5);
    std::vector<uint8_t> be(4 * n);
    float want = 0.0f;
    for (float v : x) want = std::max(want, std::fabs(v * s));
    EXPECT_EQ(QuantizeToBE(x.data(), n, s, 5, be.data()), want) << n;
    EXPECT_LT(want, float(QuantizeLimit(5)));  // |x| < 2^2: below the bound, nothing clamped
    EXPECT_EQ(CountClamped(x.data(), n, s, 5), 0u);
  }
  // The one legitimate clamp: 256 workers, s = 2^23, the largest float below 2^E gives the
  // product 2^23 - 0.5, which rounds (to even) to 2^23, one above floor(INT32_MAX / 256).
  const float below_one = std::nextafter(1.0f, 0.0f);
  const float x[3] = {below_one, 0.5f, -below_one};
  const float s = ScaleForExponent(0, 256);
  uint8_t be[12];
  EXPECT_EQ(QuantizeToBE(x, 3, s, 256, be), 8388607.5f);
  EXPECT_GE(8388607.5f, float(QuantizeLimit(256)));
  EXPECT_EQ(CountClamped(x, 3, s, 256), 2u);
  EXPECT_EQ(RefLoadBE(be), QuantizeLimit(256));
  // Data beyond the exponent: every such element is counted.
  const float beyond[4] = {1.5f, -2.0f, 0.25f, 1e30f};
  EXPECT_EQ(CountClamped(beyond, 4, ScaleForExponent(0, 2), 2), 3u);
  EXPECT_EQ(QuantizeToBE(nullptr, 0, 1.0f, 1, nullptr), 0.0f);
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
      for (size_t i = 0; i < n; ++i) {
        x[i] = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), exponent(rng));
      }
      int8_t e = 0, ref_e = 0;
      ASSERT_TRUE(BlockExponent(x, n, &e));
      ASSERT_TRUE(RefExponent(x, n, &ref_e));
      EXPECT_EQ(e, ref_e);
      const uint32_t workers = 1 + static_cast<uint32_t>(rng() % 40);
      const float s = ScaleForExponent(e, workers);

      // QuantizeToBE into a byte buffer at an odd offset, with guard bytes around it.
      std::vector<uint8_t> bytes(4 * n + 16, kGuard);
      uint8_t* be = bytes.data() + 4 + offset;
      QuantizeToBE(x, n, s, workers, be);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(RefLoadBE(be + 4 * i), RefQuantize(x[i], s, workers)) << "element " << i;
      }
      for (size_t i = 0; i < 4 + offset; ++i) EXPECT_EQ(bytes[i], kGuard);
      for (size_t i = 4 + offset + 4 * n; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], kGuard);

      // DequantizeFromBE from the odd offset into floats at an odd offset.
      std::vector<float> y_store(n + 8, -7.0f);
      float* y = y_store.data() + (3 - offset);
      DequantizeFromBE(be, n, s, y);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]),
                  std::bit_cast<uint32_t>(RefDequantize(RefLoadBE(be + 4 * i), s)));
      }
      for (size_t i = 0; i < 3 - offset; ++i) EXPECT_EQ(y_store[i], -7.0f);
      for (size_t i = 3 - offset + n; i < y_store.size(); ++i) EXPECT_EQ(y_store[i], -7.0f);
    }
  }
}

// DequantizeFromBE multiplies by 1/s when s is a power of two: still bit-identical to the
// division, including reciprocals in the subnormal range and results that underflow.
TEST_P(QuantTarget, DequantizeEqualsDivisionForEveryScale) {
  std::mt19937 rng(17);
  std::vector<int32_t> sums(257);
  for (int32_t& v : sums) v = static_cast<int32_t>(rng()) >> (rng() % 32);
  sums[0] = INT32_MIN, sums[1] = INT32_MAX, sums[2] = 0, sums[3] = 1, sums[4] = -1;
  std::vector<uint8_t> be(4 * sums.size());
  wire::Int32ToBE(sums.data(), sums.size(), be.data());
  std::vector<float> scales = {std::ldexp(1.0f, -128),
                               std::ldexp(1.0f, -100),
                               0.5f,
                               1.0f,
                               std::ldexp(1.0f, 31),
                               std::ldexp(1.0f, 126),
                               std::ldexp(1.0f, 127),
                               FLT_MAX,
                               3.0f * 1048576.0f,
                               33554432.0f,
                               1e-30f};
  for (int e : {-126, -97, -96, -20, 0, 5, 100, 127}) {
    for (uint32_t n : {1u, 2u, 3u, 8u, 100u, 256u}) {
      scales.push_back(ScaleForExponent(static_cast<int8_t>(e), n));
    }
  }
  std::vector<float> y(sums.size());
  for (float s : scales) {
    DequantizeFromBE(be.data(), sums.size(), s, y.data());
    for (size_t i = 0; i < sums.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(RefDequantize(sums[i], s)))
          << "scale " << s << " sum " << sums[i];
    }
  }
}

TEST_P(QuantTarget, ZeroElementsTouchNothing) {
  int8_t e = 55;
  EXPECT_TRUE(BlockExponent(nullptr, 0, &e));
  EXPECT_EQ(e, -126);
  QuantizeToBE(nullptr, 0, 1.0f, 1, nullptr);
  DequantizeFromBE(nullptr, 0, 1.0f, nullptr);
}

// ---------------------------------------------------------------- scalar functions

TEST(QuantScale, MatchesSpecAndClamps) {
  EXPECT_EQ(ScaleForExponent(5, 2), 33554432.0f);
  EXPECT_EQ(ScaleForExponent(0, 1), 2147483648.0f);  // 2147483647 rounds to 2^31 in float
  EXPECT_EQ(ScaleForExponent(0, 0), ScaleForExponent(0, 1)) << "0 workers treated as 1";
  EXPECT_EQ(ScaleForExponent(127, 1), std::ldexp(1.0f, -96));
  EXPECT_EQ(ScaleForExponent(-96, 1), std::ldexp(1.0f, 127));
  EXPECT_EQ(ScaleForExponent(-97, 1), FLT_MAX) << "2^128 clamped";
  EXPECT_EQ(ScaleForExponent(-126, 256), FLT_MAX);
  EXPECT_EQ(ScaleForExponent(-128, 1), FLT_MAX);
  const float smallest = ScaleForExponent(127, UINT32_MAX);
  EXPECT_GT(smallest, 0.0f);
  EXPECT_TRUE(std::isfinite(smallest));
  // Matches the reference's formula (float denominator) wherever that is finite.
  for (int e = -90; e <= 100; e += 7) {
    for (uint32_t n : {1u, 2u, 3u, 7u, 32u, 255u}) {
      const double reference =
          static_cast<double>(INT32_MAX) / (n * std::pow(2.0f, static_cast<float>(e)));
      EXPECT_EQ(ScaleForExponent(static_cast<int8_t>(e), n), static_cast<float>(reference));
    }
  }
}

TEST(QuantBound, ScalesWithWorkersAndMagnitude) {
  // n = 1, power-of-two scale: only the rounding to an integer remains.
  const double s = ScaleForExponent(3, 1);
  EXPECT_NEAR(QuantizationErrorBound(3, 1, 5.0), 0.5 / s, 1e-6 / s);
  EXPECT_LT(QuantizationErrorBound(3, 2, 5.0), QuantizationErrorBound(3, 3, 5.0));
  EXPECT_LT(QuantizationErrorBound(3, 8, 5.0), QuantizationErrorBound(4, 8, 5.0));
  EXPECT_LE(QuantizationErrorBound(3, 8, 1.0), QuantizationErrorBound(3, 8, 64.0));
  EXPECT_GT(QuantizationErrorBound(-126, 1, 0.0), 0.0);
  EXPECT_TRUE(std::isinf(QuantizationErrorBound(127, 4, 6e38))) << "float sum overflows";
}

}  // namespace
}  // namespace switchml::quant
