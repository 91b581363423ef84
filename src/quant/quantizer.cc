// quant/quantizer.cc — SIMD kernels of the block-exponent quantizer (see quantizer.h).
//
// Highway dynamic dispatch: foreach_target.h re-includes this file once per x86 target
// (AVX3_DL, AVX3, AVX2, SSE4, SSSE3 and the baseline EMU128), each copy compiled with that
// target's instruction set inside its own namespace; the HWY_ONCE section at the end exports
// the per-target kernels and dispatches to the best one the CPU supports. Debian's Highway
// 1.0.3 would compile static dispatch to EMU128 (plain scalar loops) without this.
//
// Every kernel runs full vectors, aligned to its output, over the bulk of the input and
// processes the elements before the first aligned vector and after the last one as a partial
// vector (masked loads and stores on AVX2 and AVX-512, a zero-padded stack vector elsewhere)
// through the same vector code: head and tail give bit-identical results and never touch
// memory outside the n elements. Those loops and the big-endian lane helpers are shared with
// the int32 payload kernels (wire/payload.cc) through wire/payload_simd-inl.h.

#include "quant/quantizer.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/quantizer_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/quantizer.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "wire/payload_simd-inl.h"  // IWYU pragma: keep (per target)

// Target-independent helpers, compiled once (a plain include guard: this file is included
// once per target).
#ifndef SWITCHML_QUANT_QUANTIZER_SHARED_
#define SWITCHML_QUANT_QUANTIZER_SHARED_
namespace switchml::quant::internal {

// floor(INT32_MAX / num_workers): the largest magnitude one worker may contribute so that the
// int32 sum over num_workers contributions never wraps. num_workers == 0 is treated as 1.
inline int32_t ClampLimit(uint32_t num_workers) {
  return static_cast<int32_t>(INT32_MAX / (num_workers == 0 ? 1u : num_workers));
}

// The largest float <= limit (limit > 0). Floats at or below it convert to int32 without
// overflow, and a float product above it is also above `limit` as a real number.
inline float LargestFloatAtMost(int32_t limit) {
  float f = static_cast<float>(limit);
  if (static_cast<double>(f) > static_cast<double>(limit)) f = std::nextafter(f, 0.0f);
  return f;
}

}  // namespace switchml::quant::internal
#endif  // SWITCHML_QUANT_QUANTIZER_SHARED_

HWY_BEFORE_NAMESPACE();
namespace switchml::quant {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The shared payload loops and byte-order helpers (wire/payload_simd-inl.h).
using wire::HWY_NAMESPACE::ForEachVector;
using wire::HWY_NAMESPACE::LoadPart;
using wire::HWY_NAMESPACE::MapFromBytes;
using wire::HWY_NAMESPACE::MapToBytes;
using wire::HWY_NAMESPACE::PrefetchNext;
using wire::HWY_NAMESPACE::ToFromBE32;

// q = clamp(round_half_even(p), ±limit) for any non-NaN float p, without overflow or UB.
template <class DI32, class VF>
HWY_INLINE hn::Vec<DI32> RoundAndClamp(DI32 di32, VF p, hn::Vec<DI32> v_limit,
                                       hn::Vec<DI32> v_neg_limit, VF v_limit_f, VF v_neg_limit_f) {
#if !HWY_ARCH_X86 || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  // Portable path. Highway 1.0.3's emulated NearestInt adds 0.5 in float (rounding 0.49999997f up
  // to 1) and casts 2^31 to int32 (UB). Instead: clamp to ±limit_f (the largest float <= limit, so
  // the cast below cannot overflow; a product beyond it is beyond ±limit as a real number and maps
  // to ±limit exactly), then round by adding and subtracting 2^23 (the float spacing in [2^23,
  // 2^24) is 1, so this rounds |v| < 2^23 with ties to even; larger floats are integers already).
  const hn::Rebind<float, DI32> df;
  const auto clamped = hn::Min(hn::Max(p, v_neg_limit_f), v_limit_f);
  const auto k2p23 = hn::Set(df, 8388608.0f);
  const auto abs = hn::Abs(clamped);
  const auto rounded = hn::Sub(hn::Add(abs, k2p23), k2p23);
  const auto magnitude = hn::IfThenElse(hn::Lt(abs, k2p23), rounded, abs);
  auto q = hn::ConvertTo(di32, hn::CopySignToAbs(magnitude, clamped));
  q = hn::IfThenElse(hn::RebindMask(di32, hn::Gt(p, v_limit_f)), v_limit, q);
  return hn::IfThenElse(hn::RebindMask(di32, hn::Lt(p, v_neg_limit_f)), v_neg_limit, q);
#else
  // x86 SIMD: cvtps2dq rounds with MXCSR's default ties-to-even, and Highway maps positive overflow
  // to INT32_MAX (negative overflow gives INT32_MIN): a saturating rne, so an integer clamp gives
  // the exact result.
  (void)v_limit_f;
  (void)v_neg_limit_f;
  return hn::Min(hn::Max(hn::NearestInt(p), v_neg_limit), v_limit);
#endif
}

#undef SWITCHML_QUANT_RAW_CVT  // defined once per target
#if HWY_ARCH_X86 && (HWY_TARGET <= HWY_AVX3 || HWY_TARGET == HWY_AVX2 || \
                     HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3)
#define SWITCHML_QUANT_RAW_CVT 1
// cvtps2dq without Highway's overflow fix-up (an out-of-range lane gives INT32_MIN): for
// callers that make positive overflow impossible first.
template <class VF>
HWY_INLINE auto RawNearestInt(VF p) {
#if HWY_TARGET <= HWY_AVX3
  return hn::Vec512<int32_t>{_mm512_cvtps_epi32(p.raw)};
#elif HWY_TARGET == HWY_AVX2
  return hn::Vec256<int32_t>{_mm256_cvtps_epi32(p.raw)};
#else
  return hn::Vec128<int32_t>{_mm_cvtps_epi32(p.raw)};
#endif
}
#else
#define SWITCHML_QUANT_RAW_CVT 0
#endif

uint32_t MaxAbsBitsImpl(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const size_t lanes = hn::Lanes(df);
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu);
  // |x| bits, compared as unsigned: ordered like |x| for finite values, and Inf/NaN
  // (>= 0x7F800000) compare above every finite value. Zero lanes of a part do not change it.
  auto max_bits = hn::Zero(du);
  auto accumulate = [&](hn::Vec<decltype(df)> v) {
    max_bits = hn::Max(max_bits, hn::And(hn::BitCast(du, v), abs_mask));
  };
  ForEachVector(
      n, lanes, x,
      [&](size_t i) {
        PrefetchNext<false>(x, i + n);
        accumulate(hn::LoadU(df, x + i));
      },
      [&](size_t i, size_t count) { accumulate(LoadPart(df, x + i, count)); });
  return hn::GetLane(hn::MaxOfLanes(du, max_bits));
}

// `pre_scale` is 2^shift of the Scale (1 for shift == 0, the only shift a reference scale
// has): x * 2^shift is exact (ScaleForExponent shifts only blocks with E + shift <= 29, so
// |x| < 2^E cannot overflow, and scaling up loses no bits, subnormals included), so the
// product below is x * s rounded once, however s is split.
float QuantizeToBEImpl(const float* HWY_RESTRICT x, size_t n, float factor, float pre_scale,
                       uint32_t num_workers, uint8_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  using VF = hn::Vec<decltype(df)>;

  const int32_t limit = internal::ClampLimit(num_workers);
  const float limit_f = internal::LargestFloatAtMost(limit);  // <= 2^31 - 128
  const auto v_scale = hn::Set(df, factor);
  const auto v_pre_scale = hn::Set(df, pre_scale);
  const auto v_limit_f = hn::Set(df, limit_f);
  const auto v_neg_limit_f = hn::Set(df, -limit_f);
  const auto v_limit = hn::Set(di, limit);
  const auto v_neg_limit = hn::Set(di, -limit);

  // q = clamp(rne(x * s), ±limit); ±Inf products (x beyond the contract) give ±limit too.
  // The largest |x * s| rides along (two instructions per vector; zero-filled tail lanes do
  // not raise it) so the caller can tell whether anything was clamped without a second pass.
  auto v_max_abs = hn::Zero(df);
  auto run = [&](auto product, auto round_and_clamp) {
    MapToBytes(df, x, n, dst, [&](VF v) {
      const auto p = product(v);
      v_max_abs = hn::Max(v_max_abs, hn::Abs(p));
      return ToFromBE32(du, hn::BitCast(du, round_and_clamp(p)));
    });
    return hn::GetLane(hn::MaxOfLanes(df, v_max_abs));
  };
  auto quantize = [&](auto product) {
#if SWITCHML_QUANT_RAW_CVT
    constexpr float kBelow2p31 = 2147483520.0f;  // the largest float below 2^31
    if (num_workers >= 2) {  // limit <= 2^30 - 1 < kBelow2p31
      // Three instructions fewer per vector than RoundAndClamp, same results: products are
      // capped at kBelow2p31 (> limit) so the conversion cannot overflow upwards, one below
      // -2^31 gives INT32_MIN, and the integer clamp maps both to ±limit. (With one worker
      // limit = INT32_MAX lies above kBelow2p31 and a product >= 2^31 must give INT32_MAX, so
      // it takes the other path.)
      const auto v_cvt_max = hn::Set(df, kBelow2p31);
      return run(product, [&](VF p) {
        return hn::Min(hn::Max(RawNearestInt(hn::Min(p, v_cvt_max)), v_neg_limit), v_limit);
      });
    }
#endif
    return run(product, [&](VF p) {
      return RoundAndClamp(di, p, v_limit, v_neg_limit, v_limit_f, v_neg_limit_f);
    });
  };
  if (pre_scale == 1.0f) return quantize([&](VF v) { return hn::Mul(v, v_scale); });
  // Tiny blocks: one more multiply per vector, exact.
  return quantize([&](VF v) { return hn::Mul(hn::Mul(v, v_pre_scale), v_scale); });
}

// y = float(sum) / s. When the Scale's shift is not 0, `post_scale` = 2^-shift (a normal float)
// is applied first: float(sum) is 0 or at least 1 in magnitude, so the product is a normal
// float and exact, and the one rounding left is the division's (y = float(sum) / s rounded
// once, as with shift 0). When factor is a power of two whose reciprocal is a float,
// `reciprocal` holds it and the kernel multiplies instead: x * 2^-k and x / 2^k are the same
// real number, correctly rounded by both operations, so the result is bit-identical to the
// reference's division (and ~15% faster). Otherwise reciprocal is 0 and the kernel divides.
void DequantizeFromBEImpl(const uint8_t* HWY_RESTRICT src, size_t n, float factor,
                          float reciprocal, float post_scale, float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  using VU = hn::Vec<decltype(du)>;
  using VF = hn::Vec<decltype(df)>;

  auto to_float = [&](VU be) { return hn::ConvertTo(df, hn::BitCast(di, ToFromBE32(du, be))); };
  auto run = [&](auto sum_to_float) {
    if (reciprocal != 0.0f) {
      const auto v_reciprocal = hn::Set(df, reciprocal);
      MapFromBytes(df, src, n, y, [&](VU be) { return hn::Mul(sum_to_float(be), v_reciprocal); });
    } else {
      const auto v_scale = hn::Set(df, factor);
      MapFromBytes(df, src, n, y, [&](VU be) { return hn::Div(sum_to_float(be), v_scale); });
    }
  };
  if (post_scale == 1.0f) {
    run(to_float);
  } else {
    const auto v_post_scale = hn::Set(df, post_scale);
    run([&](VU be) -> VF { return hn::Mul(to_float(be), v_post_scale); });
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace switchml::quant
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace switchml::quant {

HWY_EXPORT(MaxAbsBitsImpl);
HWY_EXPORT(QuantizeToBEImpl);
HWY_EXPORT(DequantizeFromBEImpl);
HWY_EXPORT(TargetNameImpl);

namespace {

// |x| bits of 2^127: from here on e = biased_exponent - 126 = 128 does not fit in int8.
constexpr uint32_t kFirstUnrepresentableBits = 0x7F000000u;

constexpr double kHalfMinSubnormal = 0x1p-150;  // absolute rounding error below 2^-126.

// Half an ulp of float32 values of magnitude <= bound, or 0 if every such value that is an
// integer fits the 24-bit significand (bound < 2^24) — used where the value being rounded
// is an integer.
double IntegerToFloatError(double bound) {
  if (bound < 0x1p24) return 0.0;
  return std::ldexp(1.0, std::ilogb(bound) - 24);
}

// Half an ulp of float32 values of magnitude <= bound (including the subnormal range).
double FloatRoundingError(double bound) {
  if (bound < 0x1p-126) return kHalfMinSubnormal;
  return std::ldexp(1.0, std::ilogb(bound) - 24);
}

// 2^k as a float, for -126 <= k <= 127 (Scale shifts and their inverses).
float PowerOfTwo(int32_t k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

// A positive normal power of two: zero mantissa, exponent field neither 0 nor 255.
bool IsPowerOfTwo(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t exponent = bits >> 23;  // the sign bit makes negative values >= 256
  return (bits & 0x007FFFFFu) == 0 && exponent != 0 && exponent < 255;
}

}  // namespace

bool BlockExponent(const float* x, size_t n, int8_t* exp) {
  if (n == 0) {
    *exp = -126;
    return true;
  }
  const uint32_t max_bits = HWY_DYNAMIC_DISPATCH(MaxAbsBitsImpl)(x, n);
  if (max_bits >= kFirstUnrepresentableBits) return false;  // Inf, NaN or |x| >= 2^127
  *exp = static_cast<int8_t>(static_cast<int>(max_bits >> 23) - 126);
  return true;
}

double Scale::Value() const { return std::ldexp(static_cast<double>(factor), shift); }

Scale ScaleForExponent(int8_t max_exp, uint32_t num_workers) {
  const double workers = num_workers == 0 ? 1.0 : static_cast<double>(num_workers);
  const double scale = static_cast<double>(INT32_MAX) / (workers * std::ldexp(1.0, max_exp));
  // Doubles from FLT_MAX + half an ulp (2^128 - 2^103, a tie that rounds to even: 2^128) up
  // round to +Inf in float: there the reference's scale is infinite.
  constexpr double kFloatOverflow = 0x1.ffffffp127;
  if (scale < kFloatOverflow) return {static_cast<float>(scale), 0};
  // scale = fl(INT32_MAX / n) * 2^-max_exp exactly (double), <= 2^159: the factor is at most
  // 2^33 and rounds exactly as the whole scale would in a wider float.
  return {static_cast<float>(std::ldexp(scale, -kMaxScaleShift)), kMaxScaleShift};
}

float QuantizeToBE(const float* x, size_t n, Scale scale, uint32_t num_workers, uint8_t* dst) {
  if (n == 0) return 0.0f;
  return HWY_DYNAMIC_DISPATCH(QuantizeToBEImpl)(x, n, scale.factor, PowerOfTwo(scale.shift),
                                                num_workers, dst);
}

int32_t QuantizeLimit(uint32_t num_workers) { return internal::ClampLimit(num_workers); }

size_t CountClamped(const float* x, size_t n, Scale scale, uint32_t num_workers) {
  const double limit = internal::ClampLimit(num_workers);
  const float pre_scale = PowerOfTwo(scale.shift);
  size_t clamped = 0;
  for (size_t i = 0; i < n; ++i) {
    const float p = x[i] * pre_scale * scale.factor;  // the kernel's float multiplies
    if (std::isnan(p) || std::fabs(std::nearbyint(static_cast<double>(p))) > limit) ++clamped;
  }
  return clamped;
}

void DequantizeFromBE(const uint8_t* src, size_t n, Scale scale, float* y) {
  if (n == 0) return;
  float reciprocal = 0.0f;  // see DequantizeFromBEImpl
  if (IsPowerOfTwo(scale.factor)) {
    const double r = 1.0 / static_cast<double>(scale.factor);  // exact in double
    if (r <= static_cast<double>(FLT_MAX) && static_cast<double>(static_cast<float>(r)) == r) {
      reciprocal = static_cast<float>(r);
    }
  }
  HWY_DYNAMIC_DISPATCH(DequantizeFromBEImpl)(src, n, scale.factor, reciprocal,
                                             PowerOfTwo(-scale.shift), y);
}

// Derivation. Let s = ScaleForExponent(E, n).Value() = factor * 2^shift (a float, or a float
// times 2^126 for tiny blocks; either way a 24-bit significand), u = 2^-24, X = sum_k x_k the
// exact sum of the n contributions (|x_k| < 2^E, |X| <= A = sum_abs_max), and write errors in
// units of one quantum 1/s where convenient. Both kernels round once per operation on the real
// s, whatever its split (QuantizeToBEImpl, DequantizeFromBEImpl), so s acts as one number of a
// float format with a wider exponent range.
//
// 1. Per worker, p_k = fl(x_k * s) (float multiply), r_k = rne(p_k), q_k = clamp(r_k, ±L) with
//    L = floor(INT32_MAX / n).
//    - |x_k * s| < P := 2^E * s. If s is a power of two the product is exact (up to underflow,
//      at most 2^-150 absolute); otherwise |p_k - x_k s| <= half an ulp at magnitude P,
//      h = 2^(ilogb(P) - 24) (plus the underflow term).
//    - If |p_k| >= 2^23, p_k is an integer and r_k = p_k. Otherwise |x_k s| < 2^23, so the
//      product erred by at most 2^-2, and rounding to an integer adds at most 1/2.
//      Hence |r_k - x_k s| <= w := max(h, 1/2 + min(h, 1/4)) (+ 2^-150).
//    - The clamp is a projection onto [-L, L]: it does not increase the error when x_k s lies
//      in [-L, L]; otherwise x_k s lies in (L, INT32_MAX/n) (or the mirror) and the error is
//      at most max(w, c) with c = (INT32_MAX mod n) / n < 1.
//    So |q_k - x_k s| <= e_w := max(w, c), and |S - X s| <= n e_w for the exact int32 sum
//    S = sum_k q_k (no wrap: |q_k| <= L).
// 2. F = float(S): |S| <= S_max := A s + n e_w, so |F - S| <= half an ulp at S_max, zero
//    when S_max < 2^24. With n = 1 it is zero too: q_1 is either p_1 (a float) or an
//    integer of magnitude <= 2^23 (the clamp never engages: s <= 2^(31-E) there, so
//    |x s| <= (1 - u) 2^31 = 2^31 - 128 = the clamp's float threshold).
// 3. y = fl(F / s) (for shift > 0: F * 2^-shift is exact, as |F| >= 1 or F = 0 and shift <=
//    126, and the division by factor rounds once): exact when s is a power of two and the
//    quotient is normal (a subnormal quotient errs by <= 2^-150; as |F| >= 1 or F = 0, that
//    needs s > 2^126, which every tiny-block scale is); otherwise at most half an ulp at
//    |y|_max = (S_max + conversion error) / s (>= 2^-150).
// Total: |y - X| <= n e_w / s + conversion / s + division; +Inf when |y|_max exceeds FLT_MAX
// (the float result itself may overflow). The double arithmetic here has
// relative error ~1e-16 per step; the final factor (1 + 2^-40) absorbs it.
//
// For a tiny block the bound is the ordinary one scaled: E and E + k (k > 0) give scales s and
// s 2^-k, so steps 1 and 2 are the same in quanta; only step 3's floor of 2^-150 (float32's
// subnormal spacing, the format's own limit) does not scale.
double QuantizationErrorBound(int8_t max_exp, uint32_t num_workers, double sum_abs_max) {
  const double n = num_workers == 0 ? 1.0 : static_cast<double>(num_workers);
  const Scale scale = ScaleForExponent(max_exp, num_workers);
  const double s = scale.Value();
  const bool pow2_scale = IsPowerOfTwo(scale.factor);
  const double a = std::fabs(sum_abs_max);

  // Step 1: per-worker error in quanta.
  const double p_bound = std::ldexp(s, max_exp);  // 2^E * s
  const double h = pow2_scale ? 0.0 : std::ldexp(1.0, std::ilogb(p_bound) - 24);
  double per_worker = std::max(h, 0.5 + std::min(h, 0.25)) + kHalfMinSubnormal;
  const uint32_t workers = num_workers == 0 ? 1u : num_workers;
  const double clamp_gap = static_cast<double>(INT32_MAX % workers) / n;
  per_worker = std::max(per_worker, clamp_gap);
  const double quant_err_quanta = n * per_worker;

  // Step 2: int32 sum -> float.
  const double s_max = a * s + quant_err_quanta;
  const double conv_err_quanta = workers == 1 ? 0.0 : IntegerToFloatError(s_max);

  // Step 3: division by s.
  const double y_max = (s_max + conv_err_quanta) / s;
  if (y_max > static_cast<double>(FLT_MAX)) return HUGE_VAL;  // the float sum may overflow
  double div_err = 0.0;
  if (!pow2_scale) {
    div_err = FloatRoundingError(y_max);  // >= 2^-150: covers subnormal quotients too
  } else if (s > 0x1p126) {
    div_err = kHalfMinSubnormal;  // |F| >= 1, so F / s can be subnormal only if s > 2^126
  }

  const double total = (quant_err_quanta + conv_err_quanta) / s + div_err;
  return total * (1.0 + 0x1p-40);
}

const char* ActiveTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

namespace internal {
int64_t CompiledTargets() { return HWY_TARGETS; }
}  // namespace internal

}  // namespace switchml::quant
#endif  // HWY_ONCE
