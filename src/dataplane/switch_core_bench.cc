// Throughput of SwitchCore::ProcessBurst (not a CTest test): n workers stream rounds through
// distinct slots in bursts of 32, as the I/O loop would see them. Reports datagrams/s in and
// payload bytes/s aggregated.
#include <benchmark/benchmark.h>

#include <vector>

#include "dataplane/switch_core.h"
#include "dataplane/test_packets.h"

namespace switchml::dataplane {
namespace {

void BM_ProcessBurst(benchmark::State& state) {
  const uint32_t num_workers = uint32_t(state.range(0));
  const uint32_t elements = uint32_t(state.range(1));
  SwitchConfig config;
  config.num_slots = 8192;
  config.max_elements_per_packet = 1024;
  auto core = SwitchCore::Create(config);
  if (!core.ok()) {
    state.SkipWithError(core.status().ToString().c_str());
    return;
  }
  for (uint32_t r = 0; r < num_workers; ++r) {
    WorkerRegistration reg;
    reg.rank = r;
    reg.num_workers = num_workers;
    reg.ipv4 = testing::Ip(10, 0, 0, 1);
    reg.udp_ports = {uint16_t(4000 + r)};
    if (!core->RegisterWorker(reg).ok()) std::abort();
  }
  // 256 slots × 2 sets of pre-encoded packets per worker, arranged round by round: all workers'
  // packets for slot s, then slot s+1, ... so every num_workers-th packet completes a round.
  const uint32_t kSlots = 256;
  std::vector<testing::OwnedRx> packets;
  for (uint8_t set = 0; set < 2; ++set) {
    for (uint16_t slot = 0; slot < kSlots; ++slot) {
      for (uint32_t r = 0; r < num_workers; ++r) {
        packets.push_back({testing::Encode({.slot = slot, .set = set,
                                            .values = testing::Ramp(elements, int32_t(r), 3)}),
                           {testing::Ip(10, 0, 0, 1), uint16_t(4000 + r)}});
      }
    }
  }
  std::vector<transport::RxDatagram> rx;
  for (auto& p : packets) rx.push_back(p.rx());
  Outbox out;
  size_t pos = 0;
  uint64_t sent = 0;
  for (auto _ : state) {
    core->ProcessBurst(std::span<const transport::RxDatagram>(rx.data() + pos, 32), out);
    sent += out.size();
    benchmark::DoNotOptimize(out.datagrams().data());
    pos += 32;
    if (pos + 32 > rx.size()) pos = 0;
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * 32);
  state.SetBytesProcessed(int64_t(state.iterations()) * 32 * elements * 4);
  state.counters["tx_per_rx"] = double(sent) / double(state.iterations() * 32);
  if (core->counters().multicast_rounds == 0) state.SkipWithError("no round completed");
}
BENCHMARK(BM_ProcessBurst)->Args({2, 256})->Args({8, 256})->Args({8, 1024})->Args({32, 1024});

}  // namespace
}  // namespace switchml::dataplane

BENCHMARK_MAIN();
