#include "perf_metrics.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace switchml::bench {

StatusOr<std::vector<uint64_t>> SizeSweep(uint64_t min_bytes, uint64_t max_bytes, uint64_t step_factor,
                                          uint32_t element_size) {
  if (element_size == 0) return InvalidArgumentError("element size must be positive");
  if (min_bytes < element_size)
    return InvalidArgumentError("--min-bytes must be at least one element (" + std::to_string(element_size) +
                                " bytes), got " + std::to_string(min_bytes));
  if (max_bytes < min_bytes)
    return InvalidArgumentError("--max-bytes (" + std::to_string(max_bytes) + ") must be >= --min-bytes (" +
                                std::to_string(min_bytes) + ")");
  if (step_factor < 2 && min_bytes != max_bytes)
    return InvalidArgumentError("--step-factor must be >= 2, got " + std::to_string(step_factor));
  std::vector<uint64_t> sizes;
  // s <= max / factor guarantees s * factor <= max (no overflow).
  for (uint64_t s = min_bytes;; s *= step_factor) {
    const uint64_t aligned = s / element_size * element_size;
    if (sizes.empty() || sizes.back() != aligned) sizes.push_back(aligned);
    if (step_factor < 2 || s > max_bytes / step_factor) break;
  }
  return sizes;
}

double AlgBwGBps(uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0; }

double AllReduceBusBwFactor(uint32_t num_workers) {
  return num_workers == 0 ? 0.0 : 2.0 * double(num_workers - 1) / double(num_workers);
}

double GoodputGbps(uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) * 8 / seconds / 1e9 : 0.0; }

double AggregatedElementsPerSecond(uint64_t num_elements, double seconds) {
  return seconds > 0 ? double(num_elements) / seconds : 0.0;
}

std::vector<int32_t> PackForSum(const std::vector<uint64_t>& values) {
  std::vector<int32_t> out;
  out.reserve(values.size() * kLimbsPerValue);
  for (uint64_t v : values) {
    if (v > kMaxPackValue) v = kMaxPackValue;
    for (size_t k = 0; k < kLimbsPerValue; ++k) out.push_back(int32_t((v >> (16 * k)) & 0xFFFF));
  }
  return out;
}

std::vector<uint64_t> UnpackSum(const std::vector<int32_t>& packed) {
  std::vector<uint64_t> out(packed.size() / kLimbsPerValue, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t v = 0;
    for (size_t k = 0; k < kLimbsPerValue; ++k) {
      const int32_t limb = packed[i * kLimbsPerValue + k];
      v += uint64_t(limb < 0 ? 0 : limb) << (16 * k);
    }
    out[i] = v;
  }
  return out;
}

std::vector<int32_t> PackRankBlock(const std::vector<uint64_t>& block, uint32_t rank, uint32_t num_ranks) {
  std::vector<uint64_t> all(block.size() * num_ranks, 0);
  if (rank < num_ranks) std::copy(block.begin(), block.end(), all.begin() + std::ptrdiff_t(block.size() * rank));
  return PackForSum(all);
}

uint64_t ErrorToFixed(double abs_error) {
  if (!(abs_error >= 0) || std::isinf(abs_error)) return kMaxPackValue;  // NaN, inf, negative
  const double scaled = std::ceil(abs_error * double(uint64_t{1} << 24));
  if (scaled >= double(kMaxPackValue)) return kMaxPackValue;
  return uint64_t(scaled);
}

double FixedToError(uint64_t fixed) {
  if (fixed >= kMaxPackValue) return INFINITY;
  return double(fixed) / double(uint64_t{1} << 24);
}

double WirePerWorker(uint64_t tx_delta_bytes, uint64_t iterations, uint32_t shared_by) {
  if (iterations == 0 || shared_by == 0) return 0.0;
  return double(tx_delta_bytes) / double(iterations) / double(shared_by);
}

}  // namespace switchml::bench
