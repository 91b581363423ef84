// wire/payload_simd-inl.h — per-target SIMD building blocks for big-endian int32 payloads
// (Highway's -inl.h convention: no #pragma once; a toggle guard lets foreach_target.h compile it
// once per target). Shared by the int32 kernels (wire/payload.cc) and the float32 quantizer
// (quant/quantizer.cc), so the two modules run the same loops. Not part of any module's API.
//
// Include it after "hwy/highway.h" from a file that uses Highway dynamic dispatch; every helper
// lives in switchml::wire::HWY_NAMESPACE (a using-declaration brings it into another module's
// per-target namespace):
//
//   ToFromBE32          byte-swaps every 32-bit lane (host order <-> big-endian)
//   LoadBytesU/Part     32-bit lanes from a byte pointer (whole vector / partial vector)
//   StoreBytesU/Part    the same, storing
//   LoadPart/StorePart  count < Lanes(d) elements, touching no memory past them
//   ForEachVector       whole vectors aligned to one pointer, partial vectors around them
//   PrefetchNext        prefetches one block ahead
//   MapToBytes          dst (4 bytes per element) = f(x), vector by vector
//   MapFromBytes        y = f(lanes of src), vector by vector

#if defined(SWITCHML_WIRE_PAYLOAD_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SWITCHML_WIRE_PAYLOAD_SIMD_INL_H_
#undef SWITCHML_WIRE_PAYLOAD_SIMD_INL_H_
#else
#define SWITCHML_WIRE_PAYLOAD_SIMD_INL_H_
#endif

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace switchml::wire {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Reverses the bytes of every 32-bit lane (host order <-> big-endian on little-endian hosts).
template <class DU32>
HWY_INLINE hn::Vec<DU32> ToFromBE32(DU32 du32, hn::Vec<DU32> v) {
  if constexpr (std::endian::native == std::endian::big) {
    return v;
  } else {
#if HWY_TARGET == HWY_SCALAR
    // One-lane vectors: a byte shuffle cannot span the lane, so use shifts.
    const auto lo_mid = hn::And(hn::ShiftLeft<8>(v), hn::Set(du32, 0x00FF0000u));
    const auto hi_mid = hn::And(hn::ShiftRight<8>(v), hn::Set(du32, 0x0000FF00u));
    return hn::Or(hn::Or(hn::ShiftLeft<24>(v), hn::ShiftRight<24>(v)), hn::Or(lo_mid, hi_mid));
#else
    // TableLookupBytes shuffles within each 128-bit block, so one 16-byte index pattern,
    // broadcast to every block, reverses each 4-byte group.
    const hn::Repartition<uint8_t, DU32> du8;
    alignas(16) static constexpr uint8_t kReverse4[16] = {3,  2,  1, 0, 7,  6,  5,  4,
                                                          11, 10, 9, 8, 15, 14, 13, 12};
    return hn::BitCast(du32,
                       hn::TableLookupBytes(hn::BitCast(du8, v), hn::LoadDup128(du8, kReverse4)));
#endif
  }
}

// Big-endian int32 payloads are read and written as 32-bit lanes (the SCALAR target has
// one-lane vectors, so no multi-byte uint8_t vectors), then byte-swapped in registers.
template <class DU32>
HWY_INLINE hn::Vec<DU32> LoadBytesU(DU32 du32, const uint8_t* HWY_RESTRICT p) {
  return hn::LoadU(du32, reinterpret_cast<const uint32_t*>(p));
}
template <class DU32>
HWY_INLINE void StoreBytesU(hn::Vec<DU32> v, DU32 du32, uint8_t* HWY_RESTRICT p) {
  hn::StoreU(v, du32, reinterpret_cast<uint32_t*>(p));
}

// Calls `full(i)` for whole vectors starting at element i and `part(i, count)` (count < lanes)
// for the elements around them, so that every `full` call's access to `align_to` (4-byte
// elements: the output, or the input of a kernel without one) is vector-aligned: a head of
// up to lanes - 1 elements first if needed, then whole vectors, then the remainder. An unaligned
// 64-byte AVX-512 store always spans two cache lines, and such split stores made the kernels
// 2-3x slower than their aligned speed (packet payloads sit behind a header, tensors are
// often 16-byte aligned). Results do not depend on the split: every element goes through the
// same vector code.
template <class Full, class Part>
HWY_INLINE void ForEachVector(size_t n, size_t lanes, const void* align_to, const Full& full,
                              const Part& part) {
  size_t i = 0;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(align_to);
  const size_t vector_bytes = lanes * 4;
  if (lanes > 1 && addr % 4 == 0 && n >= 2 * lanes) {
    const size_t head = ((vector_bytes - addr % vector_bytes) % vector_bytes) / 4;
    if (head != 0) {
      part(0, head);
      i = head;
    }
  }
  for (; i + lanes <= n; i += lanes) full(i);
  if (i < n) part(i, n - i);
}

// Loads count < Lanes(d) elements from p into the low lanes, zero in the others; touches no
// memory past them. AVX2 and AVX-512 have fault-suppressing masked loads and stores; other
// targets go through a zero-padded stack vector.
#undef SWITCHML_WIRE_MASKED_PARTS  // defined once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define SWITCHML_WIRE_MASKED_PARTS 1
#else
#define SWITCHML_WIRE_MASKED_PARTS 0
#endif
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> LoadPart(D d, const T* HWY_RESTRICT p, size_t count) {
#if SWITCHML_WIRE_MASKED_PARTS
  return hn::MaskedLoad(hn::FirstN(d, count), d, p);
#else
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(buf, p, count * sizeof(T));
  return hn::Load(d, buf);
#endif
}
// Stores the low count < Lanes(d) lanes of v to p; touches no memory past them.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE void StorePart(hn::Vec<D> v, D d, T* HWY_RESTRICT p, size_t count) {
#if SWITCHML_WIRE_MASKED_PARTS
  hn::BlendedStore(v, hn::FirstN(d, count), d, p);
#else
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, count * sizeof(T));
#endif
}
template <class DU32>
HWY_INLINE hn::Vec<DU32> LoadBytesPart(DU32 du32, const uint8_t* HWY_RESTRICT p, size_t count) {
  return LoadPart(du32, reinterpret_cast<const uint32_t*>(p), count);
}
template <class DU32>
HWY_INLINE void StoreBytesPart(hn::Vec<DU32> v, DU32 du32, uint8_t* HWY_RESTRICT p, size_t count) {
  StorePart(v, du32, reinterpret_cast<uint32_t*>(p), count);
}

// Tensors are processed block after block (one block per packet), so the next block is the
// next memory a kernel touches. Each whole-vector step of a kernel prefetches the same position
// one block ahead (`p` = element i + n), so the misses of the next block are in flight while
// this one computes, spread over the loop rather than in one burst (the one-lane SCALAR
// target skips it). Without it the per-packet
// kernels serialize on each 4 KiB block's misses (the hardware prefetchers stop at page
// boundaries): measured, the worker's round trip went from 0.65x to about 0.8x of memcpy.
// The address of base[index] is computed as an integer (it may lie past the caller's array; a
// prefetch never faults). kWrite prefetches lines about to be overwritten.
template <bool kWrite, typename T>
HWY_INLINE void PrefetchNext(const T* base, size_t index) {
#if HWY_TARGET != HWY_SCALAR
  const uintptr_t address = reinterpret_cast<uintptr_t>(base) + index * sizeof(T);
  __builtin_prefetch(reinterpret_cast<const void*>(address), kWrite ? 1 : 0, 3);
#else
  (void)base;
  (void)index;
#endif
}

// dst (4 bytes per element) = f(vector of x) for every vector of x[0..n), whole-vector stores
// aligned to dst, prefetching one block ahead in x. f returns uint32 lanes in wire byte order.
template <class D, typename T, class F>
HWY_INLINE void MapToBytes(D d, const T* HWY_RESTRICT x, size_t n, uint8_t* HWY_RESTRICT dst,
                           const F& f) {
  const hn::RebindToUnsigned<D> du;
  ForEachVector(
      n, hn::Lanes(d), dst,
      [&](size_t i) {
        PrefetchNext<false>(x, i + n);
        StoreBytesU(f(hn::LoadU(d, x + i)), du, dst + 4 * i);
      },
      [&](size_t i, size_t count) {
        StoreBytesPart(f(LoadPart(d, x + i, count)), du, dst + 4 * i, count);
      });
}

// y[0..n) = f(uint32 lanes of src, 4 bytes per element), whole-vector stores aligned to y,
// prefetching (for writing) one block ahead in y. f returns lanes of D.
template <class D, typename T, class F>
HWY_INLINE void MapFromBytes(D d, const uint8_t* HWY_RESTRICT src, size_t n, T* HWY_RESTRICT y,
                             const F& f) {
  const hn::RebindToUnsigned<D> du;
  ForEachVector(
      n, hn::Lanes(d), y,
      [&](size_t i) {
        PrefetchNext<true>(y, i + n);
        hn::StoreU(f(LoadBytesU(du, src + 4 * i)), d, y + i);
      },
      [&](size_t i, size_t count) {
        StorePart(f(LoadBytesPart(du, src + 4 * i, count)), d, y + i, count);
      });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace switchml::wire
HWY_AFTER_NAMESPACE();

#endif  // SWITCHML_WIRE_PAYLOAD_SIMD_INL_H_ (toggle)
