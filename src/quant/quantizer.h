// quant/quantizer.h — float32 <-> int32 block-exponent quantizer.
//
// Implements the reference's CPU exponent quantizer (docs/protocol.md#float32-exponent-quantizer) with SIMD (Highway, dynamic
// dispatch: Debian's Highway 1.0.3 compiles to scalar code otherwise; the best of AVX3 (AVX-512),
// AVX2, SSE4, SSSE3 is picked at run time). Every function processes one packet's worth of elements
// (n <= 1024, but any n works) and is pure, allocation-free and thread-safe.
//
// Float path, per block of a slice (one block = one packet payload):
//   int8_t e;  if (!BlockExponent(x, n, &e)) → the input holds Inf/NaN: reject the job.
//   ... switch returns E* = max over workers of e ...
//   Scale s = ScaleForExponent(E*, num_workers);
//   QuantizeToBE(x, n, s, num_workers, payload);        // worker → switch
//   DequantizeFromBE(sum_payload, n, s, y);             // switch → worker: y = float(sum) / s
//
// The scale is s = f_n * 2^-E*, with f_n = float(INT32_MAX / num_workers) (the division in
// double). Where that is a finite float it is exactly the reference's float scale, and the
// quantized integers are the reference's (wire compatible). Below that (E* <= -97 -
// log2(num_workers): -97 for one worker, -99 for four) the reference's float scale is +Inf;
// ours carries a power-of-two exponent beside the float (Scale::shift) and the kernels apply
// it exactly, so every block exponent down to -126 (subnormal blocks) keeps the resolution of
// ordinary blocks, about 31 - log2(num_workers) bits of the block maximum before the result's
// own float32 rounding (to the subnormal spacing 2^-149 below 2^-126) (D12,
// docs/protocol.md#d12-tiny-blocks-and-non-finite-input).
//
// Guarantee: for finite inputs with |x| < 2^E* every quantized value lies in
// [-floor(INT32_MAX / num_workers), +floor(INT32_MAX / num_workers)], so the switch's int32
// sum over num_workers contributions never wraps (the reference can wrap by a few units at the
// boundary). Per-element absolute error of the dequantized sum: num_workers * 0.5 / s when s
// is a power of two (num_workers a power of two), plus the float32 rounding of the product
// x * s (at most 2^-24 relative, i.e. up to ~128 / num_workers quanta, when it is not) and of
// the result (half an ulp, at least 2^-150 where the result is subnormal);
// QuantizationErrorBound gives the exact rigorous bound.
//
// Results are bit-identical on every SIMD target (rounding is ties-to-even everywhere).
//
// The payloads are the wire format's big-endian int32 elements; the int32 kernels (byte order
// and the switch's add: Int32ToBE, BEToInt32, AddBEInto) are in wire/payload.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace switchml::quant {

// Exponent of the block: e = biased_exponent(max |x|) - 126 (so |x| < 2^e), -126 for an
// all-zero or subnormal-max block (and for n == 0; x may then be null). Returns false (and
// leaves *exp unchanged) if any element is Inf or NaN: such input cannot be quantized
// (reference defect D12, docs/protocol.md#d12-tiny-blocks-and-non-finite-input). Also returns false if max |x| >= 2^127, whose e = 128 does not fit
// in int8 (the reference wraps it to -128).
bool BlockExponent(const float* x, size_t n, int8_t* exp);

// A quantization scale: the real number factor * 2^shift, as ScaleForExponent computes it.
// Every function below requires factor finite and > 0 and 0 <= shift <= kMaxScaleShift.
struct Scale {
  float factor = 1.0f;
  int32_t shift = 0;

  // factor * 2^shift, exact (a double holds every scale).
  double Value() const;
  friend bool operator==(const Scale&, const Scale&) = default;
};

// The largest Scale::shift: 2^-shift must be a normal float (dequantization multiplies by it).
inline constexpr int32_t kMaxScaleShift = 126;

// s = INT32_MAX / (num_workers * 2^max_exp), computed in double and rounded to float: then
// shift == 0 and factor equals the reference's scale (num_workers <= 2^24). Where that float
// would overflow (the reference's scale is +Inf: tiny blocks), shift == kMaxScaleShift and
// factor = float(INT32_MAX / num_workers * 2^(-max_exp - 126)), so s = f_n * 2^-max_exp for
// every max_exp (f_n = float(INT32_MAX / num_workers), num_workers <= 2^24). num_workers >= 1
// (0 is treated as 1).
Scale ScaleForExponent(int8_t max_exp, uint32_t num_workers);

// dst[i] = big-endian int32 of clamp(round_to_nearest_even(x[i] * s), ±INT32_MAX/num_workers)
// (integer division; x[i] * s is rounded once to float32: a float multiply by factor, as in the
// reference, after an exact multiply by 2^shift, so the product does not depend on how s is
// split). dst holds 4 * n bytes, any alignment. Values beyond the exponent's range, including
// ±Inf, clamp to the bound; NaN gives an unspecified value (BlockExponent rejects NaN blocks
// first). Returns max |x[i] * s| as floats (0 for n == 0). Nothing was clamped if it is below
// QuantizeLimit(num_workers); otherwise CountClamped tells how many were (a rare, slow check).
float QuantizeToBE(const float* x, size_t n, Scale scale, uint32_t num_workers, uint8_t* dst);

// The clamp bound of QuantizeToBE: floor(INT32_MAX / num_workers) (0 is treated as 1).
int32_t QuantizeLimit(uint32_t num_workers);

// How many of x[0..n) QuantizeToBE clamps (|rne(x[i] * s)| > QuantizeLimit), scalar. With
// the block's own exponent in the scale at most one unit of the boundary is ever clamped (a
// product just below INT32_MAX / num_workers that rounds up); more means |x| >= 2^max_exp, i.e.
// the exponent did not cover the data.
size_t CountClamped(const float* x, size_t n, Scale scale, uint32_t num_workers);

// y[i] = float(int32 from big-endian src[i]) / s, rounded once to float32 (the reference's
// float division where shift == 0; an exact multiply by 2^-shift first otherwise).
void DequantizeFromBE(const uint8_t* src, size_t n, Scale scale, float* y);

// Rigorous bound on |dequantized sum - exact sum| per element, for a block whose switch-wide
// exponent is max_exp (every contribution |x| < 2^max_exp), quantized by num_workers workers
// with s = ScaleForExponent(max_exp, num_workers), whose exact sum has magnitude
// <= |sum_abs_max|. +Inf if the float32 sum itself may overflow. Derivation in quantizer.cc.
double QuantizationErrorBound(int8_t max_exp, uint32_t num_workers, double sum_abs_max);

// The SIMD target picked at run time ("AVX2", "SSE4", "EMU128", "SCALAR", ...).
const char* ActiveTarget();

}  // namespace switchml::quant
