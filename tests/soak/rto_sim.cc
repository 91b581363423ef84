// tests/soak/rto_sim.cc — what the client's retransmission timeout does under loss, without
// CPU-scheduling noise: N real SliceEngines (src/client/engine.h) around one real SwitchCore,
// driven by a fake clock through an event-driven network model (per-worker links of a given
// rate in each direction, fixed one-way latency, independent random loss per direction).
// Samples every worker's SliceEngine::current_rto() every millisecond of simulated time and
// prints the job's simulated duration, the retransmissions, and the RTO distribution.
// docs/reliability.md ("The retransmission timeout runs away at high loss") cites it.
//
//   rto_sim [--workers 4] [--elements 4194304] [--window 256] [--loss-up P] [--loss-down P]
//           [--rate-mbit 500] [--latency-us 50] [--min-rto-ms 40] [--initial-rto-ms 80]
//           [--max-rto-ms 2000] [--seed 1]
//
// Exit status: 0 if every worker finished with OK and an exact int32 sum; 1 otherwise (so the
// run also checks exactness under the simulated loss); 2 for bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "client/engine.h"
#include "control/switch_control.h"
#include "dataplane/switch_core.h"
#include "switchml/options.h"
#include "testing/exact_inputs.h"

namespace {

using switchml::Duration;
using switchml::TimePoint;
using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

double Ms(std::chrono::microseconds d) { return double(d.count()) / 1000.0; }

struct Args {
  uint32_t workers = 4;
  uint64_t elements = uint64_t{4} << 20;  // 16 MiB of int32
  uint32_t window = 256;
  double loss_up = 0, loss_down = 0;
  double rate_mbit = 500;
  double latency_us = 50;
  // The library's defaults (Options), so that the simulation shows what users get.
  double min_rto_ms = Ms(switchml::Options{}.min_rto);
  double initial_rto_ms = Ms(switchml::Options{}.initial_rto);
  double max_rto_ms = Ms(switchml::Options{}.max_rto);
  uint64_t seed = 1;
  double max_simulated_s = 0;  // > 0: fail if the simulated job takes longer (a regression check)
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(why.empty() ? stdout : stderr,
               "%s%susage: rto_sim [--workers N] [--elements E] [--window W] [--loss-up P] "
               "[--loss-down P] [--rate-mbit R] [--latency-us L] [--min-rto-ms M] [--initial-rto-ms M] "
               "[--max-rto-ms M] [--seed S] [--max-simulated-s T]\n",
               why.empty() ? "" : "rto_sim: error: ", why.empty() ? "" : (why + "\n").c_str());
  std::exit(why.empty() ? 0 : 2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "-h" || k == "--help") Usage("");
    if (i + 1 >= argc) Usage(k + " needs a value");
    const std::string v = argv[++i];
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0') Usage(k + ": '" + v + "' is not a number");
    if (k == "--workers" && d >= 1 && d <= 64) a.workers = uint32_t(d);
    else if (k == "--elements" && d >= 1 && d <= 1e9) a.elements = uint64_t(d);
    else if (k == "--window" && d >= 1 && d <= 1024) a.window = uint32_t(d);
    else if (k == "--loss-up" && d >= 0 && d < 1) a.loss_up = d;
    else if (k == "--loss-down" && d >= 0 && d < 1) a.loss_down = d;
    else if (k == "--rate-mbit" && d > 0) a.rate_mbit = d;
    else if (k == "--latency-us" && d >= 0) a.latency_us = d;
    else if (k == "--min-rto-ms" && d > 0) a.min_rto_ms = d;
    else if (k == "--initial-rto-ms" && d > 0) a.initial_rto_ms = d;
    else if (k == "--max-rto-ms" && d > 0) a.max_rto_ms = d;
    else if (k == "--seed" && d >= 0) a.seed = uint64_t(d);
    else if (k == "--max-simulated-s" && d > 0) a.max_simulated_s = d;
    else Usage("unknown option or value out of range: " + k + " " + v);
  }
  return a;
}

Duration FromUs(double us) { return duration_cast<Duration>(std::chrono::duration<double, std::micro>(us)); }

struct InFlight {
  std::vector<uint8_t> bytes;
  uint32_t worker;  // sender (up) or receiver (down)
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  namespace sml = switchml;
  const sml::transport::Endpoint kSwitch{0x0A0000FE, 48864};
  auto worker_ep = [](uint32_t r) { return sml::transport::Endpoint{0x0A000001 + r, 5000}; };

  sml::dataplane::SwitchConfig sc;
  sc.num_slots = std::max<uint32_t>(a.window, 64);
  sc.max_elements_per_packet = 256;
  auto core_or = sml::dataplane::SwitchCore::Create(sc);
  if (!core_or.ok()) Usage(core_or.status().ToString());
  sml::dataplane::SwitchCore core = std::move(core_or).value();

  std::vector<sml::client::SliceEngine> engines;
  for (uint32_t r = 0; r < a.workers; ++r) {
    sml::control::WorkerRegistration reg;
    reg.rank = r;
    reg.num_workers = a.workers;
    reg.ipv4 = worker_ep(r).ipv4;
    reg.udp_ports = {worker_ep(r).port};
    if (auto s = core.RegisterWorker(reg); !s.ok()) Usage(s.ToString());
    sml::client::EngineConfig c;
    c.window = a.window;
    c.elements_per_packet = 256;
    c.num_workers = a.workers;
    c.switch_endpoint = kSwitch;
    c.initial_rto = FromUs(a.initial_rto_ms * 1000);
    c.min_rto = FromUs(a.min_rto_ms * 1000);
    c.max_rto = FromUs(a.max_rto_ms * 1000);
    c.call_timeout = std::chrono::seconds(600);
    engines.emplace_back(c);
  }

  std::vector<std::vector<int32_t>> in(a.workers), out(a.workers);
  TimePoint now = TimePoint{} + std::chrono::seconds(1);
  const TimePoint start = now;
  for (uint32_t r = 0; r < a.workers; ++r) {
    in[r].resize(a.elements);
    out[r].assign(a.elements, 0);
    sml::testing::FillInt32(r, 0, in[r].data(), a.elements);
    engines[r].Begin({1, sml::DataType::kInt32, in[r].data(), out[r].data(), a.elements}, now);
  }

  std::mt19937_64 rng(a.seed);
  auto lost = [&](double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  const Duration latency = FromUs(a.latency_us);
  auto wire_time = [&](size_t bytes) {  // Ethernet + IP + UDP headers: 42 bytes
    return FromUs(double(bytes + 42) * 8 / a.rate_mbit);
  };
  // Per-worker links, each direction: FIFO, busy until link_free; arrival = departure + latency.
  std::vector<TimePoint> up_free(a.workers, now), down_free(a.workers, now);
  std::multimap<TimePoint, InFlight> up, down;  // by arrival time
  uint64_t lost_up = 0, lost_down = 0;

  std::vector<double> rto_ms;  // samples of every worker's current RTO
  std::vector<double> rto0_ms;
  TimePoint next_sample = now;
  std::vector<TimePoint> done_at(a.workers, TimePoint::max());

  auto any_active = [&] {
    for (auto& e : engines) if (e.active()) return true;
    return false;
  };
  while (any_active()) {
    if (now - start > std::chrono::seconds(3600)) Usage("simulated job ran for an hour; giving up");
    // Sends due now.
    for (uint32_t r = 0; r < a.workers; ++r) {
      sml::transport::TxDatagram tx[64];
      while (engines[r].pending_sends() > 0) {
        const size_t k = engines[r].PeekSends(tx);
        for (size_t j = 0; j < k; ++j) {
          const TimePoint dep = std::max(now, up_free[r]) + wire_time(tx[j].size);
          up_free[r] = dep;
          if (lost(a.loss_up)) { ++lost_up; continue; }
          up.emplace(dep + latency, InFlight{{tx[j].data, tx[j].data + tx[j].size}, r});
        }
        engines[r].ConfirmSent(k, now);
      }
    }
    // Next event.
    TimePoint next = next_sample;
    if (!up.empty()) next = std::min(next, up.begin()->first);
    if (!down.empty()) next = std::min(next, down.begin()->first);
    for (auto& e : engines) next = std::min(next, e.NextDeadline());
    now = std::max(now, next);
    // Switch: everything that has arrived, as one burst.
    std::vector<InFlight> burst;
    while (!up.empty() && up.begin()->first <= now) {
      burst.push_back(std::move(up.begin()->second));
      up.erase(up.begin());
    }
    if (!burst.empty()) {
      std::vector<sml::transport::RxDatagram> rx(burst.size());
      for (size_t i = 0; i < burst.size(); ++i) {
        rx[i].data = burst[i].bytes.data();
        rx[i].size = rx[i].capacity = uint32_t(burst[i].bytes.size());
        rx[i].from = worker_ep(burst[i].worker);
      }
      sml::dataplane::Outbox ob;
      core.ProcessBurst(rx, ob);
      for (const auto& t : ob.datagrams()) {
        const uint32_t r = t.to.ipv4 - worker_ep(0).ipv4;
        if (r >= a.workers) continue;
        const TimePoint dep = std::max(now, down_free[r]) + wire_time(t.size);
        down_free[r] = dep;
        if (lost(a.loss_down)) { ++lost_down; continue; }
        down.emplace(dep + latency, InFlight{{t.data, t.data + t.size}, r});
      }
    }
    while (!down.empty() && down.begin()->first <= now) {
      InFlight p = std::move(down.begin()->second);
      down.erase(down.begin());
      engines[p.worker].OnDatagram(p.bytes, now);
    }
    for (uint32_t r = 0; r < a.workers; ++r) {
      engines[r].OnTick(now);
      if (!engines[r].active() && done_at[r] == TimePoint::max()) done_at[r] = now;
    }
    if (now >= next_sample) {
      for (uint32_t r = 0; r < a.workers; ++r) {
        if (!engines[r].active()) continue;
        const double ms = std::chrono::duration<double, std::milli>(engines[r].current_rto()).count();
        rto_ms.push_back(ms);
        if (r == 0) rto0_ms.push_back(ms);
      }
      next_sample += milliseconds(1);
    }
  }

  bool ok = true;
  uint64_t sent = 0, retx = 0, timeouts = 0;  // timeouts: timer expiries (= retransmissions here)
  for (uint32_t r = 0; r < a.workers; ++r) {
    if (!engines[r].result().ok()) {
      std::printf("rank %u: %s\n", r, engines[r].result().ToString().c_str());
      ok = false;
    }
    const auto v = sml::testing::VerifyInt32(out[r].data(), a.elements, a.workers);
    if (v.wrong) {
      std::printf("rank %u: %llu wrong elements, first at %llu\n", r, (unsigned long long)v.wrong,
                  (unsigned long long)v.first_wrong);
      ok = false;
    }
    sent += engines[r].stats().packets_sent;
    retx += engines[r].stats().retransmissions;
    timeouts += engines[r].stats().timeouts;
  }
  const TimePoint end = *std::max_element(done_at.begin(), done_at.end());
  std::sort(rto_ms.begin(), rto_ms.end());
  auto pct = [&](double q) { return rto_ms.empty() ? 0.0 : rto_ms[size_t(q * double(rto_ms.size() - 1))]; };
  double mean = 0;
  for (double x : rto_ms) mean += x;
  if (!rto_ms.empty()) mean /= double(rto_ms.size());
  const double at_max = rto_ms.empty() ? 0.0
      : 100.0 * double(std::count_if(rto_ms.begin(), rto_ms.end(), [&](double x) { return x >= a.max_rto_ms * 0.999; })) /
            double(rto_ms.size());
  std::printf(
      "workers %u, %llu int32, loss up %.4g down %.4g, %.0f Mbit/s, latency %.0f us, rto [%.0f, %.0f] ms (initial %.0f): "
      "simulated time %.3f s, retransmitted %.2f%% of %llu packets (%llu timer expiries; lost %llu up, %llu down), "
      "RTO ms: mean %.1f, p50 %.1f, p90 %.1f, p99 %.1f, max %.1f, at max_rto %.1f%% of samples; %s\n",
      a.workers, (unsigned long long)a.elements, a.loss_up, a.loss_down, a.rate_mbit, a.latency_us, a.min_rto_ms,
      a.max_rto_ms, a.initial_rto_ms, std::chrono::duration<double>(end - start).count(),
      sent ? 100.0 * double(retx) / double(sent) : 0.0, (unsigned long long)sent, (unsigned long long)timeouts,
      (unsigned long long)lost_up,
      (unsigned long long)lost_down, mean, pct(0.5), pct(0.9), pct(0.99), rto_ms.empty() ? 0.0 : rto_ms.back(), at_max,
      ok ? "every result exact" : "WRONG RESULTS");
  const double simulated = std::chrono::duration<double>(end - start).count();
  if (a.max_simulated_s > 0 && simulated > a.max_simulated_s) {
    std::printf("FAIL: the simulated job took %.3f s, more than --max-simulated-s %.3f\n", simulated,
                a.max_simulated_s);
    return 1;
  }
  return ok ? 0 : 1;
}
