// common/hwy_target_test.h — test-only: run a GoogleTest suite once per Highway SIMD target
// that a module compiled and this CPU supports, so every dynamic-dispatch path is tested
// (not only the best one).
//
//   class MyTarget : public HwyTargetTest {};
//   INSTANTIATE_TEST_SUITE_P(AllTargets, MyTarget,
//                            ::testing::ValuesIn(HwyTargetsToTest(internal::CompiledTargets())),
//                            HwyTargetName);
//   TEST_P(MyTarget, Works) { ... the module's kernels dispatch to GetParam() ... }
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <string>
#include <vector>

namespace switchml {

// Each target bit of `compiled_targets` (the module's HWY_TARGETS) that this CPU supports.
inline std::vector<int64_t> HwyTargetsToTest(int64_t compiled_targets) {
  std::vector<int64_t> targets;
  for (int64_t bits = hwy::SupportedTargets() & compiled_targets; bits != 0; bits &= bits - 1) {
    targets.push_back(bits & -bits);
  }
  return targets;
}

// Restricts dynamic dispatch to the parameter's target for the duration of each test.
class HwyTargetTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

// Test names: the target's name ("AVX2", "SSE4", ...).
inline std::string HwyTargetName(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

}  // namespace switchml
