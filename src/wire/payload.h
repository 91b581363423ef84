// wire/payload.h — kernels for the packet payload's big-endian int32 elements (the bytes after
// wire::kPrefixBytes; see packet.h): byte order and the switch's wrap-around add.
//
// SIMD (Highway, dynamic dispatch: Debian's Highway 1.0.3 compiles to scalar code otherwise; the
// best of AVX3 (AVX-512), AVX2, SSE4, SSSE3 is picked at run time). Every function processes
// one packet's worth of elements (n <= 1024, but any n works), touches only its n elements
// (dst/src hold 4 * n bytes, any alignment), does nothing for n == 0 (the pointers may then be
// null) and is pure, allocation-free and thread-safe. Results are identical on every target.
//
//   worker → switch:  wire::Int32ToBE(x, n, payload);          // int32 tensors
//   switch:           wire::BEToInt32(payload, n, sums);       // first contribution
//                     wire::AddBEInto(sums, payload, n);       // every further one
//                     wire::Int32ToBE(sums, n, response_payload);
//   switch → worker:  wire::BEToInt32(response_payload, n, y);
//
// The float32 quantizer (quant/quantizer.h) writes and reads the same payload format.
#pragma once

#include <cstddef>
#include <cstdint>

namespace switchml::wire {

// dst[i] = big-endian bytes of x[i].
void Int32ToBE(const int32_t* x, size_t n, uint8_t* dst);

// y[i] = int32 from big-endian src[i].
void BEToInt32(const uint8_t* src, size_t n, int32_t* y);

// acc[i] += int32 from big-endian src[i], with 32-bit wrap-around (the switch's add).
void AddBEInto(int32_t* acc, const uint8_t* src, size_t n);

}  // namespace switchml::wire
