#include "testing/exact_inputs.h"

#include <cmath>

#include "quant/quantizer.h"

namespace switchml::testing {

namespace {
// A cheap integer hash so neighbouring elements and ranks get unrelated values.
inline uint64_t Mix(uint32_t rank, uint64_t index) {
  uint64_t x = index * 0x9E3779B97F4A7C15ull + uint64_t{rank} * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return x;
}
constexpr int kFloatMaxMagnitude = 1000;  // units of 1/8 → |x| <= 125
}  // namespace

int32_t Int32Input(uint32_t rank, uint64_t index) { return int32_t(Mix(rank, index) % 2001) - 1000; }

float Float32Input(uint32_t rank, uint64_t index) {
  const int units = int(Mix(rank, index) % (2 * kFloatMaxMagnitude + 1)) - kFloatMaxMagnitude;
  return float(units) / 8.0f;
}

int64_t Int32ExpectedSum(uint32_t num_workers, uint64_t index) {
  int64_t s = 0;
  for (uint32_t r = 0; r < num_workers; ++r) s += Int32Input(r, index);
  return s;
}

double Float32ExpectedSum(uint32_t num_workers, uint64_t index) {
  double s = 0;
  for (uint32_t r = 0; r < num_workers; ++r) s += double(Float32Input(r, index));
  return s;
}

void FillInt32(uint32_t rank, uint64_t offset, int32_t* buf, size_t n) {
  for (size_t i = 0; i < n; ++i) buf[i] = Int32Input(rank, offset + i);
}

void FillFloat32(uint32_t rank, uint64_t offset, float* buf, size_t n) {
  for (size_t i = 0; i < n; ++i) buf[i] = Float32Input(rank, offset + i);
}

Verification VerifyInt32(const int32_t* out, size_t n, uint32_t num_workers, uint64_t offset) {
  Verification v;
  for (size_t i = 0; i < n; ++i) {
    const int64_t want = Int32ExpectedSum(num_workers, offset + i);
    const double err = std::fabs(double(out[i]) - double(want));
    if (err > v.max_abs_error) v.max_abs_error = err;
    if (out[i] != want) {
      if (v.wrong++ == 0) v.first_wrong = offset + i;
    }
  }
  return v;
}

double Float32Tolerance(uint32_t num_workers) {
  // |x| <= 125 < 2^7, so every block's exponent is at most 7 on every worker.
  const double max_sum = 125.0 * num_workers;
  return quant::QuantizationErrorBound(7, num_workers, max_sum);
}

Verification VerifyFloat32(const float* out, size_t n, uint32_t num_workers, uint64_t offset) {
  Verification v;
  v.tolerance = Float32Tolerance(num_workers);
  for (size_t i = 0; i < n; ++i) {
    const double want = Float32ExpectedSum(num_workers, offset + i);
    const double err = std::fabs(double(out[i]) - want);
    if (!(err <= v.tolerance)) {  // also catches NaN
      if (v.wrong++ == 0) v.first_wrong = offset + i;
    }
    if (err > v.max_abs_error || std::isnan(err)) v.max_abs_error = std::isnan(err) ? INFINITY : err;
  }
  return v;
}

}  // namespace switchml::testing
