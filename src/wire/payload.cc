// wire/payload.cc — SIMD kernels of the int32 payload (see payload.h).
//
// Highway dynamic dispatch: foreach_target.h re-includes this file once per x86 target
// (AVX3_DL, AVX3, AVX2, SSE4, SSSE3 and the baseline EMU128), each copy compiled with that
// target's instruction set inside its own namespace; the HWY_ONCE section at the end exports
// the per-target kernels and dispatches to the best one the CPU supports. The loops (whole
// vectors aligned to the output, partial vectors around them that touch nothing past the n
// elements) and the byte-order helpers are in payload_simd-inl.h, shared with the quantizer.

#include "wire/payload.h"

#include <cstddef>
#include <cstdint>

#include "wire/payload_internal.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "wire/payload.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "wire/payload_simd-inl.h"  // IWYU pragma: keep (per target)

HWY_BEFORE_NAMESPACE();
namespace switchml::wire {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void Int32ToBEImpl(const int32_t* HWY_RESTRICT x, size_t n, uint8_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  MapToBytes(di, x, n, dst,
             [&](hn::Vec<decltype(di)> v) { return ToFromBE32(du, hn::BitCast(du, v)); });
}

void BEToInt32Impl(const uint8_t* HWY_RESTRICT src, size_t n, int32_t* HWY_RESTRICT y) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  MapFromBytes(di, src, n, y,
               [&](hn::Vec<decltype(du)> be) { return hn::BitCast(di, ToFromBE32(du, be)); });
}

void AddBEIntoImpl(int32_t* HWY_RESTRICT acc, const uint8_t* HWY_RESTRICT src, size_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const size_t lanes = hn::Lanes(du);
  // Unsigned lanes: the add wraps modulo 2^32 on every target (the emulated targets add in
  // C++, where signed overflow would be undefined).
  auto add = [&](hn::Vec<decltype(di)> a, hn::Vec<decltype(du)> be) {
    return hn::BitCast(di, hn::Add(hn::BitCast(du, a), ToFromBE32(du, be)));
  };
  ForEachVector(
      n, lanes, acc,
      [&](size_t i) {
        hn::StoreU(add(hn::LoadU(di, acc + i), LoadBytesU(du, src + 4 * i)), di, acc + i);
      },
      [&](size_t i, size_t count) {
        StorePart(add(LoadPart(di, acc + i, count), LoadBytesPart(du, src + 4 * i, count)), di,
                  acc + i, count);
      });
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace switchml::wire
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace switchml::wire {

HWY_EXPORT(Int32ToBEImpl);
HWY_EXPORT(BEToInt32Impl);
HWY_EXPORT(AddBEIntoImpl);
HWY_EXPORT(TargetNameImpl);

void Int32ToBE(const int32_t* x, size_t n, uint8_t* dst) {
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(Int32ToBEImpl)(x, n, dst);
}

void BEToInt32(const uint8_t* src, size_t n, int32_t* y) {
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(BEToInt32Impl)(src, n, y);
}

void AddBEInto(int32_t* acc, const uint8_t* src, size_t n) {
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(AddBEIntoImpl)(acc, src, n);
}

namespace internal {
int64_t CompiledTargets() { return HWY_TARGETS; }
const char* ActiveTarget() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
}  // namespace internal

}  // namespace switchml::wire
#endif  // HWY_ONCE
