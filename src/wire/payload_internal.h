// wire/payload_internal.h — introspection of the payload kernels' dynamic dispatch, for tests
// and benchmarks only (not part of the module's API).
//
//   const int64_t targets = hwy::SupportedTargets() & CompiledTargets();
//   for (int64_t bits = targets; bits != 0; bits &= bits - 1) {
//     hwy::SetSupportedTargetsForTest(bits & -bits);  // every wire:: kernel now runs there
//     ...   // ActiveTarget() == hwy::TargetName(bits & -bits)
//   }
//   hwy::SetSupportedTargetsForTest(0);  // back to the best target
#pragma once

#include <cstdint>

namespace switchml::wire::internal {

// HWY_TARGETS of payload.cc: the bit set of Highway targets compiled into the kernels (AND it
// with hwy::SupportedTargets() for the ones this CPU can run). Pure, thread-safe.
int64_t CompiledTargets();

// The SIMD target the payload kernels dispatch to now ("AVX2", "SSE4", "EMU128", ...).
const char* ActiveTarget();

}  // namespace switchml::wire::internal
