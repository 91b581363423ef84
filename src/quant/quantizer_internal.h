// quant/quantizer_internal.h — introspection of the quantizer's dynamic dispatch, for tests
// and benchmarks only (not part of the module's API).
//
//   const int64_t targets = hwy::SupportedTargets() & CompiledTargets();
//   for (int64_t bits = targets; bits != 0; bits &= bits - 1) {
//     hwy::SetSupportedTargetsForTest(bits & -bits);  // every quant:: call now runs there
//     ...
//   }
//   hwy::SetSupportedTargetsForTest(0);  // back to the best target
#pragma once

#include <cstdint>

namespace switchml::quant::internal {

// HWY_TARGETS of quantizer.cc: the bit set of Highway targets compiled into the kernels
// (AND it with hwy::SupportedTargets() for the ones this CPU can run). Pure, thread-safe.
int64_t CompiledTargets();

}  // namespace switchml::quant::internal
