// quant/quantizer.h — float32 <-> int32 block-exponent quantizer and big-endian int32 kernels.
//
// Implements the reference's CPU exponent quantizer (spec §5.8.2) with SIMD (Highway, dynamic
// dispatch: Debian's Highway 1.0.3 compiles to scalar code otherwise; AVX2 is picked at run
// time where available). Every function processes one packet's worth of elements (n <= 1024,
// but any n works) and is pure, allocation-free and thread-safe.
//
// Float path, per block of a slice (one block = one packet payload):
//   int8_t e;  if (!BlockExponent(x, n, &e)) → the input holds Inf/NaN: reject the job.
//   ... switch returns E* = max over workers of e ...
//   float s = ScaleForExponent(E*, num_workers);
//   QuantizeToBE(x, n, s, num_workers, payload);        // worker → switch
//   DequantizeFromBE(sum_payload, n, s, y);             // switch → worker: y = float(sum) / s
//
// Guarantee: for finite inputs with |x| < 2^E* every quantized value lies in
// [-floor(INT32_MAX / num_workers), +floor(INT32_MAX / num_workers)], so the switch's int32
// sum over num_workers contributions never wraps (the reference can wrap by a few units at the
// boundary). Per-element absolute error of the dequantized sum is at most
// num_workers * 0.5 / s + float32 rounding of the result (see QuantizationErrorBound).
#pragma once

#include <cstddef>
#include <cstdint>

namespace switchml::quant {

// Exponent of the block: e = biased_exponent(max |x|) - 126 (so |x| < 2^e), -126 for an
// all-zero or subnormal-max block. Returns false (and leaves *exp undefined) if any element is
// Inf or NaN: such input cannot be quantized (reference defect D12).
bool BlockExponent(const float* x, size_t n, int8_t* exp);

// s = INT32_MAX / (num_workers * 2^max_exp), computed in double and clamped to the largest
// finite float, so tiny blocks keep their precision instead of flushing to zero (D12).
// num_workers >= 1.
float ScaleForExponent(int8_t max_exp, uint32_t num_workers);

// dst[i] = big-endian int32 of clamp(round_to_nearest_even(x[i] * scale), ±INT32_MAX/num_workers).
void QuantizeToBE(const float* x, size_t n, float scale, uint32_t num_workers, uint8_t* dst);

// y[i] = float(int32 from big-endian src[i]) / scale.
void DequantizeFromBE(const uint8_t* src, size_t n, float scale, float* y);

// Bound on |dequantized sum - exact sum| per element for a block whose switch-wide exponent
// is max_exp and whose exact sum has magnitude <= |sum_abs_max|.
double QuantizationErrorBound(int8_t max_exp, uint32_t num_workers, double sum_abs_max);

// Byte-order kernels for int32 payloads.
void Int32ToBE(const int32_t* x, size_t n, uint8_t* dst);
void BEToInt32(const uint8_t* src, size_t n, int32_t* y);
// acc[i] += int32 from big-endian src[i], with 32-bit wrap-around (the switch's add).
void AddBEInto(int32_t* acc, const uint8_t* src, size_t n);

// The SIMD target picked at run time ("AVX2", "SSE4", "EMU128", "SCALAR", ...).
const char* ActiveTarget();

}  // namespace switchml::quant
