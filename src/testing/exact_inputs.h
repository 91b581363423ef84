// testing/exact_inputs.h — deterministic per-rank inputs whose all-reduce sums are known
// exactly, and verifiers that count wrong elements. Used by tests, the CLI's `allreduce` and
// `demo`, and the benchmarks, so that every run checks every element (ARCHITECTURE.md §3.9).
//
//   FillInt32(rank, offset, buf, n);  ... all-reduce over num_workers ranks ...
//   Verification v = VerifyInt32(out, n, num_workers, offset);   // v.wrong == 0
//
// int32 inputs lie in [-1000, 1000], so sums are exact for any number of workers.
// float32 inputs are multiples of 1/8 in [-125, 125]; the float32 check allows the
// quantization error bound of quant::QuantizationErrorBound for the worst block exponent.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace switchml::testing {

int32_t Int32Input(uint32_t rank, uint64_t index);
float Float32Input(uint32_t rank, uint64_t index);
// Exact sums over ranks 0..num_workers-1.
int64_t Int32ExpectedSum(uint32_t num_workers, uint64_t index);
double Float32ExpectedSum(uint32_t num_workers, uint64_t index);

// Fill buf[0..n) with the inputs of `rank` for global indices offset..offset+n.
void FillInt32(uint32_t rank, uint64_t offset, int32_t* buf, size_t n);
void FillFloat32(uint32_t rank, uint64_t offset, float* buf, size_t n);

struct Verification {
  uint64_t wrong = 0;            // elements outside the tolerance (int32: not equal)
  uint64_t first_wrong = 0;      // index of the first wrong element (valid if wrong > 0)
  double max_abs_error = 0.0;    // over all elements
  double tolerance = 0.0;        // float32: the allowed absolute error; int32: 0
};

Verification VerifyInt32(const int32_t* out, size_t n, uint32_t num_workers, uint64_t offset = 0);
Verification VerifyFloat32(const float* out, size_t n, uint32_t num_workers, uint64_t offset = 0);
// The absolute error allowed per element for the float32 pattern with num_workers workers.
double Float32Tolerance(uint32_t num_workers);

}  // namespace switchml::testing
