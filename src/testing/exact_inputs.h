// testing/exact_inputs.h — deterministic per-rank inputs whose all-reduce sums are known
// exactly, and verifiers that count wrong elements. Used by tests, the CLI's `allreduce` and
// `demo`, and the benchmarks, so that every run checks every element (benchmarks verify while
// they measure).
//
//   FillInt32(rank, offset, buf, n);  ... all-reduce over num_workers ranks ...
//   Verification v = VerifyInt32(out, n, num_workers, offset);   // v.wrong == 0
//   FillFloat32(rank, offset, fbuf, n);  ... all-reduce with elements_per_packet P, T threads ...
//   v = VerifyFloat32(fout, n, num_workers, offset, BlockLayout{P, T});
//
// int32 inputs lie in [-1000, 1000], so sums are exact for any number of workers.
//
// float32 inputs are k/8 * 2^m with |k| <= 1000, so every input and every partial sum of up to
// 2^10 ranks is exact in float32 (and the float64 expected sum is exact). The exponent m is
// constant over each run of kFloat32RunLength = 64 consecutive global indices and varies from
// run to run (m = A + B + C + D + R: A per 1024 indices, B per 512, C per 256, D per 64, R per
// rank and run), so the block exponent of a packet differs from packet to packet for every
// packet size (64, 256, 512, 1024) and from rank to rank within one packet, and about one run
// in eight is tiny (D = -40) next to normal runs in the same packet: the quantizer rounds it to
// almost nothing, which the bound must (and does) allow. m lies in [-56, 23], so |x| < 2^30 and
// every non-zero |x| >= 2^-59 (normal floats, far from 2^127 and from underflow).
//
// The float32 check allows, per element, quant::QuantizationErrorBound for the switch-wide
// exponent (max over ranks) of the block the element was quantized in, and the element's exact
// sum. The blocks depend on how the library cut the call (BlockLayout); with an unknown layout
// the exponent is bounded by the largest over every block that could hold the element (any
// window of up to 1024 elements of the call), which is rigorous for any layout but loose next
// to large-exponent runs.
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace switchml::testing {

// Consecutive global indices that share one float32 exponent (a divisor of every packet size).
inline constexpr uint64_t kFloat32RunLength = 64;
// The largest elements_per_packet the library accepts: the longest possible block.
inline constexpr uint32_t kMaxBlockElements = 1024;

int32_t Int32Input(uint32_t rank, uint64_t index);
float Float32Input(uint32_t rank, uint64_t index);
// Exact sums over ranks 0..num_workers-1.
int64_t Int32ExpectedSum(uint32_t num_workers, uint64_t index);
double Float32ExpectedSum(uint32_t num_workers, uint64_t index);

// Fill buf[0..n) with the inputs of `rank` for global indices offset..offset+n.
void FillInt32(uint32_t rank, uint64_t offset, int32_t* buf, size_t n);
void FillFloat32(uint32_t rank, uint64_t offset, float* buf, size_t n);

// How the library cut one float32 all-reduce call of n elements into quantization blocks:
// `threads` slices (Context's formula: the first n % threads slices hold n / threads + 1
// elements, the others n / threads), each cut into blocks of elements_per_packet from its
// start. elements_per_packet == 0: unknown (e.g. an integration that splits calls itself).
struct BlockLayout {
  uint32_t elements_per_packet = 0;
  uint32_t threads = 1;
};

struct Verification {
  uint64_t wrong = 0;            // elements outside the tolerance (int32: not equal)
  uint64_t first_wrong = 0;      // index of the first wrong element (valid if wrong > 0)
  double max_abs_error = 0.0;    // over all elements
  double tolerance = 0.0;        // float32: the largest per-element allowed error; int32: 0
};

Verification VerifyInt32(const int32_t* out, size_t n, uint32_t num_workers, uint64_t offset = 0);
// out[i] is the result for global index offset + i of one all-reduce call of n elements.
Verification VerifyFloat32(const float* out, size_t n, uint32_t num_workers, uint64_t offset = 0,
                           BlockLayout layout = {});

// The pieces of VerifyFloat32, for callers that keep the expected sums themselves:
// exps[i] = the switch-wide exponent of the block holding element offset + i of one call of n
// elements cut as `layout` (with an unknown layout: an upper bound on it).
void Float32BlockExponents(uint32_t num_workers, uint64_t offset, size_t n, BlockLayout layout, int8_t* exps);
// The allowed absolute error of a result whose exact sum is `want`, quantized in a block whose
// switch-wide exponent is at most max_exp: the largest quant::QuantizationErrorBound over
// those exponents (rigorous even where the bound is not monotonic in the exponent).
double Float32Bound(uint32_t num_workers, int8_t max_exp, double want);
// A float32 result for global index `index` that every float32 check here counts as wrong
// (for tests that corrupt an output on purpose).
float Float32WrongResult(uint32_t num_workers, uint64_t index);

// The allowed absolute error per element for inputs other than this pattern whose every
// element satisfies |x| <= max_abs_input on every worker (e.g. the MPI tests' own inputs).
double UniformFloat32Tolerance(uint32_t num_workers, double max_abs_input);

}  // namespace switchml::testing
