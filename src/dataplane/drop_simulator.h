// dataplane/drop_simulator.h — seeded Bernoulli drop decisions, a testing aid
// (docs/protocol.md#drop-simulator).
//
//   DropSimulator ingress(/*probability=*/0.01, /*seed=*/42);
//   if (ingress.ShouldDrop()) { count; continue; }
//
// The reference compares a 16-bit random number against a per-port threshold; we draw 64-bit
// numbers from splitmix64 (fast, good enough for loss injection, and identical on every
// platform for a given seed). p = 0 never draws and never drops; p = 1 always drops.
// Thread-compatible.
#pragma once

#include <cstdint>

namespace switchml::dataplane {

class DropSimulator {
 public:
  DropSimulator() = default;
  // probability must be in [0, 1] (SwitchConfig::Validate checks it).
  DropSimulator(double probability, uint64_t seed) : state_(seed) {
    if (probability >= 1.0) {
      always_ = true;
    } else if (probability > 0.0) {
      // p · 2^64, strictly below 2^64 because p < 1.
      threshold_ = uint64_t(probability * 18446744073709551616.0);
    }
  }

  bool enabled() const { return always_ || threshold_ != 0; }

  bool ShouldDrop() {
    if (always_) return true;
    if (threshold_ == 0) return false;
    return Next() < threshold_;
  }

 private:
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t state_ = 0;
  uint64_t threshold_ = 0;
  bool always_ = false;
};

}  // namespace switchml::dataplane
