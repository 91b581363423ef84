#include "testing/exact_inputs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

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
// An integer in [lo, hi] drawn by a hash of (salt, key).
inline int Draw(uint32_t salt, uint64_t key, int lo, int hi) {
  return lo + int(Mix(0x51ED2700u + salt, key) % uint64_t(hi - lo + 1));
}
constexpr int kFloatMaxMagnitude = 1000;  // |k| <= 1000, x = k / 8 * 2^m
constexpr int kTinyRunExponent = -40;     // the D of a tiny run

// m of rank `rank`'s run `run` (global indices run * 64 .. run * 64 + 63); see the header.
int RunExponent(uint32_t rank, uint64_t run) {
  const int a = Draw(1, run >> 4, -8, 8);
  const int b = Draw(2, run >> 3, -4, 4);
  const int c = Draw(3, run >> 2, -4, 4);
  const int d = Draw(4, run, 0, 7) == 0 ? kTinyRunExponent : Draw(5, run, -4, 4);
  const int r = int(Mix(rank, run ^ 0xA5A5A5A5A5A5ull) >> 61) & 3;
  return a + b + c + d + r;
}
inline int Units(uint32_t rank, uint64_t index) {
  return int(Mix(rank, index) % (2 * kFloatMaxMagnitude + 1)) - kFloatMaxMagnitude;
}

// Memo of Float32Bound for one worker count: for every binade 2^b of the exact sum's
// magnitude, the prefix maxima over exponents of quant::QuantizationErrorBound(e, n, 2^b).
class BoundMemo {
 public:
  explicit BoundMemo(uint32_t num_workers) : n_(num_workers), tables_(kMaxB - kMinB + 1) {}
  uint32_t num_workers() const { return n_; }

  double Get(int8_t max_exp, double want) {
    const double a = std::fabs(want);
    // |want| <= 2^b (b >= kMinB); 2^b is a valid sum_abs_max for QuantizationErrorBound.
    int b = a == 0 ? kMinB : std::ilogb(a) + 1;
    if (b < kMinB) b = kMinB;
    if (b > kMaxB || std::isnan(a)) return HUGE_VAL;  // no such sum in this pattern
    auto& t = tables_[size_t(b - kMinB)];
    if (!t) {
      t = std::make_unique<std::array<double, 256>>();
      // Block exponents are >= -126 (quant::BlockExponent); -128 and -127 get -126's bound.
      double running = 0;
      for (int e = -126; e <= 127; ++e) {
        running = std::max(running, quant::QuantizationErrorBound(int8_t(e), n_, std::ldexp(1.0, b)));
        (*t)[size_t(e + 128)] = running;
      }
      (*t)[0] = (*t)[1] = (*t)[2];
    }
    return (*t)[size_t(int(max_exp) + 128)];
  }

 private:
  static constexpr int kMinB = -200, kMaxB = 200;
  uint32_t n_;
  std::vector<std::unique_ptr<std::array<double, 256>>> tables_;
};

// Switch-wide exponent (max over ranks) of the inputs at global indices [begin, end).
int8_t SwitchExponent(uint32_t num_workers, uint64_t begin, uint64_t end, std::vector<float>& scratch) {
  scratch.resize(size_t(end - begin));
  int8_t best = -126;
  const uint32_t ranks = num_workers == 0 ? 1 : num_workers;
  for (uint32_t r = 0; r < ranks; ++r) {
    FillFloat32(r, begin, scratch.data(), scratch.size());
    int8_t e = -126;
    quant::BlockExponent(scratch.data(), scratch.size(), &e);  // always finite here
    best = std::max(best, e);
  }
  return best;
}
}  // namespace

int32_t Int32Input(uint32_t rank, uint64_t index) { return int32_t(Mix(rank, index) % 2001) - 1000; }

float Float32Input(uint32_t rank, uint64_t index) {
  const int m = RunExponent(rank, index / kFloat32RunLength);
  return std::ldexp(float(Units(rank, index)), m - 3);  // exact: |k| < 2^10, normal range
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
  size_t i = 0;
  while (i < n) {
    const uint64_t index = offset + i, run = index / kFloat32RunLength;
    const size_t len = std::min<uint64_t>(n - i, (run + 1) * kFloat32RunLength - index);
    const float scale = std::ldexp(1.0f, RunExponent(rank, run) - 3);  // a power of two: exact
    for (size_t j = 0; j < len; ++j) buf[i + j] = float(Units(rank, index + j)) * scale;
    i += len;
  }
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

void Float32BlockExponents(uint32_t num_workers, uint64_t offset, size_t n, BlockLayout layout, int8_t* exps) {
  std::vector<float> scratch;
  if (layout.elements_per_packet > 0) {
    const size_t threads = std::max<uint32_t>(layout.threads, 1), base = n / threads, rem = n % threads;
    size_t start = 0;
    for (size_t t = 0; t < threads; ++t) {
      const size_t len = t < rem ? base + 1 : base;
      for (size_t b = 0; b < len; b += layout.elements_per_packet) {
        const size_t blen = std::min<size_t>(layout.elements_per_packet, len - b);
        const int8_t e = SwitchExponent(num_workers, offset + start + b, offset + start + b + blen, scratch);
        std::fill(exps + start + b, exps + start + b + blen, e);
      }
      start += len;
    }
    return;
  }
  // Unknown layout: the block of element i lies in [i - 1023, i + 1023] within the call, so
  // its exponent is at most the largest exponent of the (whole) runs that window touches.
  if (n == 0) return;
  const uint64_t first_run = offset / kFloat32RunLength, last_run = (offset + n - 1) / kFloat32RunLength;
  std::vector<int8_t> run_exp(size_t(last_run - first_run + 1));
  for (uint64_t r = first_run; r <= last_run; ++r) {
    const uint64_t begin = std::max(offset, r * kFloat32RunLength);
    const uint64_t end = std::min(offset + n, (r + 1) * kFloat32RunLength);
    run_exp[size_t(r - first_run)] = SwitchExponent(num_workers, begin, end, scratch);
  }
  const uint64_t reach = kMaxBlockElements - 1;
  for (size_t i = 0; i < n;) {
    const uint64_t index = offset + i, run = index / kFloat32RunLength;
    const uint64_t run_end = std::min(offset + n, (run + 1) * kFloat32RunLength);
    // Runs touched by the windows of every element of this run (clipped to the call).
    const uint64_t lo = std::max(offset, run * kFloat32RunLength > reach ? run * kFloat32RunLength - reach : 0);
    const uint64_t hi = std::min(offset + n - 1, run_end - 1 + reach);
    int8_t e = -126;
    for (uint64_t r = lo / kFloat32RunLength; r <= hi / kFloat32RunLength; ++r)
      e = std::max(e, run_exp[size_t(r - first_run)]);
    std::fill(exps + i, exps + (run_end - offset), e);
    i = size_t(run_end - offset);
  }
}

double Float32Bound(uint32_t num_workers, int8_t max_exp, double want) {
  thread_local std::unique_ptr<BoundMemo> memo;
  if (!memo || memo->num_workers() != num_workers) memo = std::make_unique<BoundMemo>(num_workers);
  return memo->Get(max_exp, want);
}

Verification VerifyFloat32(const float* out, size_t n, uint32_t num_workers, uint64_t offset, BlockLayout layout) {
  Verification v;
  std::vector<int8_t> exps(n);
  Float32BlockExponents(num_workers, offset, n, layout, exps.data());
  // Expected sums chunk by chunk, rank by rank (FillFloat32 draws each run's exponent once).
  constexpr size_t kChunk = 4096;
  std::vector<float> x(kChunk);
  std::vector<double> want(kChunk);
  for (size_t c = 0; c < n; c += kChunk) {
    const size_t len = std::min(kChunk, n - c);
    std::fill(want.begin(), want.begin() + len, 0.0);
    for (uint32_t r = 0; r < num_workers; ++r) {
      FillFloat32(r, offset + c, x.data(), len);
      for (size_t i = 0; i < len; ++i) want[i] += double(x[i]);  // exact (see the header)
    }
    for (size_t i = 0; i < len; ++i) {
      const double tol = Float32Bound(num_workers, exps[c + i], want[i]);
      v.tolerance = std::max(v.tolerance, tol);
      const double err = std::fabs(double(out[c + i]) - want[i]);
      if (!(err <= tol)) {  // also catches NaN
        if (v.wrong++ == 0) v.first_wrong = offset + c + i;
      }
      if (err > v.max_abs_error || std::isnan(err)) v.max_abs_error = std::isnan(err) ? INFINITY : err;
    }
  }
  return v;
}

float Float32WrongResult(uint32_t num_workers, uint64_t index) {
  // Every input is below 2^30 in magnitude, so every block exponent is at most 30 and every
  // bound is far below n * 2^30 (about n^2 * 2^-1 plus a 2^-23 relative term); 2^32 * n away
  // from the exact sum is wrong for any check here, and exactly representable.
  const double want = Float32ExpectedSum(num_workers, index);
  return float(want + std::ldexp(double(std::max<uint32_t>(num_workers, 1)), 32));
}

double UniformFloat32Tolerance(uint32_t num_workers, double max_abs_input) {
  // |x| <= max_abs_input < 2^e for every contribution, so every block exponent is at most e.
  int e = max_abs_input <= 0 ? -126 : std::ilogb(max_abs_input) + 1;
  e = std::clamp(e, -126, 127);
  const double sum = max_abs_input * std::max<uint32_t>(num_workers, 1);
  double tol = 0;
  for (int k = -126; k <= e; ++k) tol = std::max(tol, quant::QuantizationErrorBound(int8_t(k), num_workers, sum));
  return tol;
}

}  // namespace switchml::testing
