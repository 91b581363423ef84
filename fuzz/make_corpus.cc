// fuzz/make_corpus.cc — writes the seed corpora of the fuzz targets from real traffic.
//
//   fuzz_make_corpus <dir>     # writes <dir>/fuzz_wire_decode/* and <dir>/fuzz_switch_core/*
//
// Runs our client's SliceEngines (3 workers x 2 threads) against the very switch that
// fuzz_switch_core builds (switch_core_setup.h), in process with a fake clock, and records:
//   * for fuzz_switch_core: every datagram the engines send, as the records the target
//     parses (sender rank/thread, burst boundaries), one file per scenario;
//   * for fuzz_wire_decode: distinct datagrams seen on the wire (requests and results of every
//     size code, int32 and float32).
// Scenarios: int32 and float32 all-reduces, 64 and 256 elements per packet, lost results
// (retransmissions, unicast replies), and consecutive jobs across the job-number wrap.
// Every all-reduce is checked against the exact sum, so the corpus is valid traffic.
// Exit status 0 on success, 1 if a scenario did not produce the right result.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "client/engine.h"
#include "common/clock.h"
#include "switch_core_setup.h"
#include "wire/packet.h"

namespace {

using namespace switchml;
namespace fs = std::filesystem;

constexpr uint32_t kThreads = 2;
constexpr uint32_t kWindow = 4;  // thread t owns slots [4t, 4t+4): all 8 of the switch

struct Scenario {
  std::string name;
  uint32_t elements_per_packet;
  DataType type;
  std::vector<uint64_t> job_ids;  // consecutive all-reduces
  uint64_t num_elements;          // per all-reduce, sliced per thread (docs/protocol.md#slicing)
  uint32_t result_loss_pct;       // results lost on the way back to the workers
  uint8_t flags = 0;              // the input's flags byte (switch_core_setup.h)
  // Violate contract C6 (docs/protocol.md#c6-no-reordering-behind-the-next-packet) once per
  // job: a copy of rank 0 thread 0's first packet is delivered right behind that worker's next
  // packet to the same slot (the late duplicate of docs/protocol.md#corner-cases). Only
  // with the late-duplicate guard on do the results stay exact.
  bool inject_late = false;
};

void WriteFile(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

class Recorder {
 public:
  explicit Recorder(fs::path wire_dir) : wire_dir_(std::move(wire_dir)) {}
  // Keeps the first datagram of each (direction, size, msg shape) as a wire seed.
  void Wire(const char* direction, const uint8_t* data, size_t size, uint8_t exp0) {
    const std::string key = std::string(direction) + "_" + std::to_string(size) +
                            (exp0 != 0 ? "_exp" : "");
    if (!seen_.insert(key).second) return;
    WriteFile(wire_dir_ / key, std::vector<uint8_t>(data, data + size));
  }

 private:
  fs::path wire_dir_;
  std::set<std::string> seen_;
};

bool RunScenario(const Scenario& s, const fs::path& core_dir, Recorder& wire) {
  auto created = fuzz::MakeSwitch(s.flags);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return false;
  }
  dataplane::SwitchCore core = std::move(created).value();
  std::vector<std::unique_ptr<client::SliceEngine>> engines;  // [rank * kThreads + thread]
  for (uint32_t r = 0; r < fuzz::kWorkers; ++r) {
    for (uint32_t t = 0; t < kThreads; ++t) {
      client::EngineConfig c;
      c.slot_base = t * kWindow;
      c.window = kWindow;
      c.elements_per_packet = s.elements_per_packet;
      c.num_workers = fuzz::kWorkers;
      c.switch_endpoint = transport::Endpoint{0x0A0000FD, wire::kDefaultSwitchPort};
      engines.push_back(std::make_unique<client::SliceEngine>(c));
    }
  }
  std::mt19937 rng(uint32_t(s.job_ids.front() * 31 + s.elements_per_packet));
  std::vector<uint8_t> input = {s.flags};
  TimePoint now{};
  bool ok = true;

  for (uint64_t job : s.job_ids) {
    std::vector<uint8_t> late;  // the copy waiting for its slot's next packet
    bool late_sent = false;
    // Inputs: worker r, element i.
    const uint64_t n = s.num_elements;
    std::vector<std::vector<int32_t>> in_i(fuzz::kWorkers, std::vector<int32_t>(n));
    std::vector<std::vector<float>> in_f(fuzz::kWorkers, std::vector<float>(n));
    std::vector<std::vector<int32_t>> out_i(fuzz::kWorkers, std::vector<int32_t>(n));
    std::vector<std::vector<float>> out_f(fuzz::kWorkers, std::vector<float>(n));
    for (uint32_t r = 0; r < fuzz::kWorkers; ++r) {
      for (uint64_t i = 0; i < n; ++i) {
        in_i[r][i] = int32_t(r * 1000 + i) - int32_t(job);
        in_f[r][i] = 0.25f * float(int64_t(i % 17) - 8) + float(r);
      }
    }
    for (uint32_t r = 0; r < fuzz::kWorkers; ++r) {
      for (uint32_t t = 0; t < kThreads; ++t) {
        const uint64_t len = n / kThreads + (t < n % kThreads ? 1 : 0);
        const uint64_t off = t < n % kThreads ? t * (n / kThreads + 1) : t * (n / kThreads) + n % kThreads;
        client::SliceSpec spec;
        spec.job_id = job;
        spec.type = s.type;
        spec.num_elements = len;
        if (s.type == DataType::kInt32) {
          spec.in = in_i[r].data() + off;
          spec.out = out_i[r].data() + off;
        } else {
          spec.in = in_f[r].data() + off;
          spec.out = out_f[r].data() + off;
        }
        engines[r * kThreads + t]->Begin(spec, now);
      }
    }

    for (int step = 0; step < 100000; ++step) {
      bool active = false;
      for (auto& e : engines) active |= e->active();
      if (!active) break;
      // One burst: what every engine wants to send now, engine by engine.
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<transport::RxDatagram> burst;
      for (uint32_t r = 0; r < fuzz::kWorkers; ++r) {
        for (uint32_t t = 0; t < kThreads; ++t) {
          client::SliceEngine& e = *engines[r * kThreads + t];
          transport::TxDatagram tx[kWindow];
          const size_t k = e.PeekSends(tx);
          for (size_t j = 0; j < k && burst.size() < fuzz::kMaxBurst; ++j) {
            bytes.emplace_back(tx[j].data, tx[j].data + tx[j].size);
            wire.Wire("request", tx[j].data, tx[j].size, tx[j].data[8]);
            transport::RxDatagram d;
            d.from = fuzz::SenderAddress(fuzz::Ctl(r, t));
            d.size = d.capacity = tx[j].size;
            burst.push_back(d);
            fuzz::AppendRecord(input, fuzz::Ctl(r, t), tx[j].data, tx[j].size);
            if (s.inject_late && r == 0 && t == 0 && !late_sent && burst.size() < fuzz::kMaxBurst) {
              wire::PacketView v, first;
              (void)wire::Decode({tx[j].data, tx[j].size}, &v);
              if (late.empty()) {
                late.assign(tx[j].data, tx[j].data + tx[j].size);
              } else if (wire::Decode(late, &first) == wire::DecodeError::kOk &&
                         first.header.slot == v.header.slot && first.header.set != v.header.set &&
                         first.header.tsi != v.header.tsi) {
                bytes.push_back(late);
                burst.push_back(d);
                fuzz::AppendRecord(input, fuzz::Ctl(r, t), late.data(), late.size());
                late_sent = true;
              }
            }
          }
          e.ConfirmSent(k, now);
        }
      }
      if (!burst.empty()) {
        input[input.size() - burst.back().size - 3] |= fuzz::kCtlEndBurst;
        for (size_t j = 0; j < burst.size(); ++j) burst[j].data = bytes[j].data();
        dataplane::Outbox out;
        core.ProcessBurst(burst, out);
        for (const transport::TxDatagram& tx : out.datagrams()) {
          wire.Wire("result", tx.data, tx.size, tx.data[8]);
          if (rng() % 100 < s.result_loss_pct) continue;
          for (uint32_t r = 0; r < fuzz::kWorkers; ++r) {
            if (tx.to.ipv4 != fuzz::kIpv4[r]) continue;
            const uint32_t t = tx.to.port - fuzz::kPortBase;
            if (t < kThreads) engines[r * kThreads + t]->OnDatagram({tx.data, tx.size}, now);
          }
        }
      }
      now += std::chrono::milliseconds(1);
      for (auto& e : engines) e->OnTick(now);
    }
    for (auto& e : engines) {
      if (e->active() || !e->result().ok()) {
        std::fprintf(stderr, "%s: job %llu did not complete: %s\n", s.name.c_str(),
                     (unsigned long long)job, e->result().ToString().c_str());
        ok = false;
      }
    }
    // Exact sums for int32, close sums for float32.
    for (uint32_t r = 0; r < fuzz::kWorkers && ok; ++r) {
      for (uint64_t i = 0; i < n; ++i) {
        if (s.type == DataType::kInt32) {
          int32_t want = 0;
          for (uint32_t q = 0; q < fuzz::kWorkers; ++q) want = int32_t(uint32_t(want) + uint32_t(in_i[q][i]));
          ok &= out_i[r][i] == want;
        } else {
          float want = 0;
          for (uint32_t q = 0; q < fuzz::kWorkers; ++q) want += in_f[q][i];
          ok &= std::fabs(out_f[r][i] - want) <= 1e-3f * (1 + std::fabs(want));
        }
      }
      if (!ok) std::fprintf(stderr, "%s: wrong result at worker %u\n", s.name.c_str(), r);
    }
  }
  WriteFile(core_dir / s.name, input);
  const dataplane::SwitchCounters& c = core.counters();
  std::printf("%-32s %6zu bytes  rounds=%llu unicasts=%llu late_duplicates_dropped=%llu\n",
              s.name.c_str(), input.size(), (unsigned long long)c.multicast_rounds,
              (unsigned long long)c.unicast_replies, (unsigned long long)c.late_duplicates_dropped);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const fs::path core_dir = root / "fuzz_switch_core", wire_dir = root / "fuzz_wire_decode";
  fs::create_directories(core_dir);
  fs::create_directories(wire_dir);
  Recorder wire(wire_dir);
  const std::vector<Scenario> scenarios = {
      {"int32_64_one_job", 64, DataType::kInt32, {1}, 2 * 64 * 5 + 3, 0},
      {"float32_64_one_job", 64, DataType::kFloat32, {2}, 2 * 64 * 3 + 7, 0},
      {"int32_256_one_job", 256, DataType::kInt32, {3}, 2 * 256 * 2 + 1, 0},
      {"float32_256_losses", 256, DataType::kFloat32, {4}, 2 * 256 * 2, 30},
      {"int32_64_losses", 64, DataType::kInt32, {5}, 2 * 64 * 6, 25},
      {"int32_64_tiny_jobs_wrap", 64, DataType::kInt32, {254, 255, 256, 257}, 3, 0},
      {"int32_64_jobs_losses_wrap", 64, DataType::kInt32, {255, 256, 257}, 2 * 64 * 2 + 1, 20},
      {"guard_int32_64_jobs_losses", 64, DataType::kInt32, {99, 100, 101}, 2 * 64 * 3, 25, 2},
      {"guard_float32_64_losses", 64, DataType::kFloat32, {300}, 2 * 64 * 4, 20, 2},
      {"guard_int32_64_late_duplicates", 64, DataType::kInt32, {40, 41}, 2 * 64 * 9, 0, 2, true},
  };
  bool ok = true;
  for (const Scenario& s : scenarios) ok &= RunScenario(s, core_dir, wire);
  // Wire seeds beyond what the switch accepts (its max is 256 elements): 512 and 1024.
  for (uint32_t elements : {512u, 1024u}) {
    client::EngineConfig c;
    c.window = 1;
    c.elements_per_packet = elements;
    c.num_workers = 2;
    client::SliceEngine e(c);
    std::vector<float> x(elements, 1.5f), y(elements);
    e.Begin(client::SliceSpec{7, DataType::kFloat32, x.data(), y.data(), elements}, TimePoint{});
    transport::TxDatagram tx[1];
    if (e.PeekSends(tx) == 1) wire.Wire("request", tx[0].data, tx[0].size, tx[0].data[8]);
  }
  return ok ? 0 : 1;
}
