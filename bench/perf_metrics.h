// bench/perf_metrics.h — the pure arithmetic of allreduce_perf: the size sweep, nccl-tests
// bandwidths, the reference's and the paper's metrics (docs/benchmarks.md#metrics), and the
// exact int32 packing that lets every backend gather per-rank measurements with its own
// all-reduce (SUM of int32 is exact on SwitchML too).
//
//   std::vector<uint64_t> sizes = SizeSweep(4096, 64 << 20, 2, 4);   // bytes, multiples of 4
//   std::vector<int32_t> packed = PackForSum(values);                  // values < 2^48
//   ... all-reduce SUM of `packed` over n ranks (n <= 256) ...
//   std::vector<uint64_t> sums = UnpackSum(packed);                    // exact Σ over ranks
//   ... or, to gather a block per rank: PackRankBlock(mine, rank, n), all-reduce, UnpackSum.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "switchml/status.h"

namespace switchml::bench {

// Sizes in bytes from min_bytes up to max_bytes inclusive, each the previous one times
// step_factor (nccl-tests -f), rounded down to a multiple of element_size (at least one
// element). INVALID_ARGUMENT names the bad flag (min > max, factor < 2, sizes below one element).
StatusOr<std::vector<uint64_t>> SizeSweep(uint64_t min_bytes, uint64_t max_bytes, uint64_t step_factor,
                                          uint32_t element_size);

// nccl-tests: algbw = bytes / time; busbw = algbw · 2(n−1)/n for all-reduce (0 for n = 1).
// GB/s = 1e9 bytes per second.
double AlgBwGBps(uint64_t bytes, double seconds);
double AllReduceBusBwFactor(uint32_t num_workers);
// The reference's goodput (Gbit/s of tensor payload) and the paper's ATE/s (aggregated tensor
// elements per second); docs/benchmarks.md#metrics.
double GoodputGbps(uint64_t bytes, double seconds);
double AggregatedElementsPerSecond(uint64_t num_elements, double seconds);

// Exact transport of non-negative integers through an int32 SUM all-reduce of up to
// kMaxPackRanks ranks: each value (< 2^48) becomes three 16-bit limbs; a sum of 256 limbs
// stays below 2^24, so no int32 overflows and UnpackSum recovers Σ values exactly.
inline constexpr uint32_t kMaxPackRanks = 256;
inline constexpr uint64_t kMaxPackValue = (uint64_t{1} << 48) - 1;
inline constexpr size_t kLimbsPerValue = 3;
// Values above kMaxPackValue are clamped to it (callers use it as "saturated").
std::vector<int32_t> PackForSum(const std::vector<uint64_t>& values);
// `packed.size()` must be a multiple of kLimbsPerValue; negative limbs are treated as 0.
std::vector<uint64_t> UnpackSum(const std::vector<int32_t>& packed);
// Gathering one block of measurements from every rank with one SUM all-reduce: rank `rank`
// of `num_ranks` contributes PackForSum of num_ranks blocks of block.size() values, its own
// `block` at position `rank` and zeros elsewhere. UnpackSum of the reduced vector holds rank
// q's block at [q · block.size(), (q + 1) · block.size()).
std::vector<int32_t> PackRankBlock(const std::vector<uint64_t>& block, uint32_t rank, uint32_t num_ranks);

// An absolute error as a packable integer (units of 2^-24, rounded up, saturating; NaN and
// infinity map to kMaxPackValue) and back.
uint64_t ErrorToFixed(double abs_error);
double FixedToError(uint64_t fixed);

// Per-worker bytes sent per iteration, from an interface's tx counter delta over `iterations`.
// On an interface shared by all ranks (loopback), the delta holds every rank's traffic and,
// for in-network aggregation, the switch's result packets too: `shared_by` is the number of
// senders the delta is split among (n for peer-to-peer rings, 2n with a switch on the same
// interface, 1 for a worker's own interface).
double WirePerWorker(uint64_t tx_delta_bytes, uint64_t iterations, uint32_t shared_by);

}  // namespace switchml::bench
