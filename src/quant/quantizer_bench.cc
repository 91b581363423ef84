// quantizer_bench — throughput of the quantizer kernels against memcpy (Google Benchmark).
//
// Each iteration walks a 64 MiB float32 buffer in 1024-element packets (4 KiB payloads, the
// reference's largest UDP packet), the way a worker does: exponent, scale, quantize into a
// packet buffer, then dequantize a packet buffer into the output tensor. bytes_per_second
// counts the 64 MiB of float input per iteration, so it compares directly with
// BM_Memcpy (64 MiB copied per iteration: the same DRAM read + write traffic).
//
// Kernel benchmarks take the Highway target as an argument (the best one this CPU supports
// and the scalar fallback), so the SIMD speedup can be read off. Not a CTest test. BM_AddBEInto
// measures the switch's int32 add (wire/payload.h, dispatched to the same target) on the same
// payloads.
//
//   quantizer_bench --benchmark_filter='Memcpy|QuantizeDequantize'
//   bench/run_quantizer.sh      (interleaved repetitions, medians and ratios to memcpy)

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "quant/quantizer.h"
#include "quant/quantizer_internal.h"
#include "wire/payload.h"

namespace switchml::quant {
namespace {

constexpr size_t kBufferBytes = size_t{64} << 20;
constexpr size_t kNumElements = kBufferBytes / sizeof(float);
constexpr size_t kPacketElements = 1024;
constexpr uint32_t kWorkers = 8;

// Inputs shared by all benchmarks (allocated and filled once).
struct Buffers {
  std::vector<float> input;
  std::vector<float> output;
  std::vector<uint8_t> payloads;  // 64 MiB of big-endian int32 (the quantized input)
  Buffers() : input(kNumElements), output(kNumElements), payloads(kBufferBytes) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1e-3f);  // gradient-like magnitudes
    for (float& v : input) v = dist(rng);
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      int8_t e = 0;
      BlockExponent(&input[i], kPacketElements, &e);
      QuantizeToBE(&input[i], kPacketElements, ScaleForExponent(e, kWorkers), kWorkers,
                   &payloads[4 * i]);
    }
  }
};

Buffers& Shared() {
  static Buffers* buffers = new Buffers();
  return *buffers;
}

// Restricts dispatch to the target in state.range(0) for the benchmark's lifetime.
class ScopedTarget {
 public:
  explicit ScopedTarget(benchmark::State& state) {
    hwy::SetSupportedTargetsForTest(state.range(0));
    state.SetLabel(ActiveTarget());
  }
  ~ScopedTarget() { hwy::SetSupportedTargetsForTest(0); }
};

// The best supported target, AVX2 (the documented deployment machine's best) and the scalar
// fallback.
void TargetArgs(benchmark::internal::Benchmark* b) {
  const int64_t targets = hwy::SupportedTargets() & internal::CompiledTargets();
  const int64_t best = targets & -targets;
  int64_t fallback = targets;
  while (fallback & (fallback - 1)) fallback &= fallback - 1;  // highest bit: the slowest
  b->Arg(best);
  if ((targets & HWY_AVX2) != 0 && best != HWY_AVX2) b->Arg(HWY_AVX2);
  if (fallback != best) b->Arg(fallback);
  b->ArgName("target")->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_Memcpy(benchmark::State& state) {
  Buffers& buf = Shared();
  for (auto _ : state) {
    std::memcpy(buf.output.data(), buf.input.data(), kBufferBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

// The worker's whole float path per packet; the packet buffer stays in L1 like a reused
// transmit buffer would.
void BM_QuantizeDequantize(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  alignas(64) uint8_t packet[4 * kPacketElements];
  for (auto _ : state) {
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      int8_t e = 0;
      BlockExponent(&buf.input[i], kPacketElements, &e);
      const Scale s = ScaleForExponent(e, kWorkers);
      QuantizeToBE(&buf.input[i], kPacketElements, s, kWorkers, packet);
      DequantizeFromBE(packet, kPacketElements, s, &buf.output[i]);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_QuantizeDequantize)->Apply(TargetArgs);

// The same round trip on tiny blocks: the input times 2^-110 (block maxima around 2^-117,
// normal floats), where the reference's scale overflows and ours carries a power-of-two shift
// (one more multiply per vector each way).
void BM_QuantizeDequantizeTiny(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  static std::vector<float>* tiny = [&] {
    auto* v = new std::vector<float>(buf.input);
    for (float& x : *v) x = std::ldexp(x, -110);
    return v;
  }();
  alignas(64) uint8_t packet[4 * kPacketElements];
  for (auto _ : state) {
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      int8_t e = 0;
      BlockExponent(&(*tiny)[i], kPacketElements, &e);
      const Scale s = ScaleForExponent(e, kWorkers);
      QuantizeToBE(&(*tiny)[i], kPacketElements, s, kWorkers, packet);
      DequantizeFromBE(packet, kPacketElements, s, &buf.output[i]);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_QuantizeDequantizeTiny)->Apply(TargetArgs);

// The same kernels in the order the client engine runs them (docs/protocol.md#float32-exponent-quantizer): the packet sent for
// block p carries block p's exponent and block p - window's quantized data, and the result for
// block p - window is dequantized when it returns. So the exponent scan runs `window` blocks
// ahead of quantize and dequantize (window = 64 packets, the default).
void BM_WorkerOrder(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  constexpr size_t kWindow = 64;
  constexpr size_t kBlocks = kNumElements / kPacketElements;
  alignas(64) uint8_t packet[4 * kPacketElements];
  std::vector<Scale> scales(kWindow);
  for (auto _ : state) {
    for (size_t p = 0; p < kBlocks + kWindow; ++p) {
      Scale next_scale;
      if (p < kBlocks) {
        int8_t e = 0;
        BlockExponent(&buf.input[p * kPacketElements], kPacketElements, &e);
        next_scale = ScaleForExponent(e, kWorkers);
      }
      if (p >= kWindow) {
        const size_t b = p - kWindow;
        const Scale s = scales[p % kWindow];
        QuantizeToBE(&buf.input[b * kPacketElements], kPacketElements, s, kWorkers, packet);
        DequantizeFromBE(packet, kPacketElements, s, &buf.output[b * kPacketElements]);
      }
      scales[p % kWindow] = next_scale;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_WorkerOrder)->Apply(TargetArgs);


void BM_BlockExponent(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  for (auto _ : state) {
    int sum = 0;
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      int8_t e = 0;
      BlockExponent(&buf.input[i], kPacketElements, &e);
      sum += e;
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_BlockExponent)->Apply(TargetArgs);

// Quantize 64 MiB of floats into 64 MiB of payloads (DRAM to DRAM).
void BM_Quantize(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  const Scale s = ScaleForExponent(-9, kWorkers);
  for (auto _ : state) {
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      QuantizeToBE(&buf.input[i], kPacketElements, s, kWorkers, &buf.payloads[4 * i]);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_Quantize)->Apply(TargetArgs);

// Dequantize 64 MiB of payloads into 64 MiB of floats (DRAM to DRAM).
void BM_Dequantize(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  const Scale s = ScaleForExponent(-9, kWorkers);
  for (auto _ : state) {
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      DequantizeFromBE(&buf.payloads[4 * i], kPacketElements, s, &buf.output[i]);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_Dequantize)->Apply(TargetArgs);

// The switch's add: one slot's 1024 int32 sums (in cache) += a packet from the 64 MiB stream.
void BM_AddBEInto(benchmark::State& state) {
  ScopedTarget target(state);
  Buffers& buf = Shared();
  alignas(64) int32_t slot[kPacketElements] = {};
  for (auto _ : state) {
    for (size_t i = 0; i < kNumElements; i += kPacketElements) {
      wire::AddBEInto(slot, &buf.payloads[4 * i], kPacketElements);
    }
    benchmark::DoNotOptimize(slot);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBufferBytes));
}
BENCHMARK(BM_AddBEInto)->Apply(TargetArgs);

}  // namespace
}  // namespace switchml::quant

BENCHMARK_MAIN();
