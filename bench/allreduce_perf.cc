// allreduce_perf: nccl-tests style all-reduce benchmark, one process per rank, for SwitchML and
// the Gloo / MPI baselines (docs/benchmarks.md). Every rank fills inputs whose sums are known
// exactly, verifies every element of every iteration, and the job exits non-zero if any element
// on any rank is wrong. Rank 0 prints the table and writes --json.
//
//   allreduce_perf --backend switchml --rank R --workers N --controller 127.0.0.1:PORT -b 4K -e 64M
//   allreduce_perf --backend gloo --rank R --workers N --rendezvous-dir DIR
//   mpirun ... -np N allreduce_perf --backend mpi
//   allreduce_perf summarize --json summary.json run1.json run2.json ...
//
// Per size: warm-up iterations, then timed ones; each iteration is barrier → timed all-reduce
// → verification (untimed). The time of an iteration is the slowest rank's; the table shows the
// mean over timed iterations (nccl-tests), the JSON also the minimum. Per-rank measurements are
// gathered with the backend's own all-reduce (int32 SUM, exact everywhere; perf_metrics.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/backend.h"
#include "bench/backend_flags.h"
#include "bench/json_file.h"
#include "bench/perf_metrics.h"
#include "testing/exact_inputs.h"
#include "tools/cli_util.h"

namespace switchml::bench {

namespace {

struct PerfArgs {
  BackendConfig backend;
  std::string label;  // names the run in JSON and summaries; default = backend
  std::string min_bytes = "4KiB", max_bytes = "64MiB";
  uint64_t step_factor = 2;
  uint32_t iters = 5, warmup = 1;
  std::string type = "float32";
  uint32_t timeout_ms = 60000;
  std::string iface = "lo";
  std::string iface_shared = "auto";
  std::string json;
  int corrupt_rank = -1;  // testing aid: this rank damages one output element after each all-reduce
};

struct IfaceBytes {
  uint64_t tx = 0, rx = 0;
};

// Reads /sys/class/net/<iface>/statistics/{tx,rx}_bytes; nullopt if unreadable.
std::optional<IfaceBytes> ReadIface(const std::string& iface) {
  if (iface.empty()) return std::nullopt;
  IfaceBytes b;
  for (auto [name, field] : {std::pair{"tx_bytes", &b.tx}, std::pair{"rx_bytes", &b.rx}}) {
    std::ifstream f("/sys/class/net/" + iface + "/statistics/" + name);
    if (!(f >> *field)) return std::nullopt;
  }
  return b;
}

// What one rank measured for one size (layout of its block in the gathered vector).
enum Field : size_t { kWrong, kSent, kRetx, kTx, kRx, kMaxErr, kIfaceOk, kNumFields };

void Poison(void* out, size_t count) {
  // 0x7F7F7F7F: int32 2139062143 and float32 3.39e38, both far outside any expected sum.
  std::memset(out, 0x7F, count * 4);
}

struct RowResult {
  uint64_t bytes = 0, count = 0;
  double mean_s = 0, min_s = 0, max_s = 0;
  uint64_t wrong = 0;
  std::optional<double> retx_pct;
  std::optional<double> wire_tx_per_worker;
  double max_abs_error = 0, tolerance = 0;
};

int Run(const PerfArgs& a) {
  const DataType type = a.type == "int32" ? DataType::kInt32 : DataType::kFloat32;
  if (a.type != "int32" && a.type != "float32") {
    std::cerr << "allreduce_perf: error: --type must be float32 or int32, got '" << a.type << "'\n";
    return 2;
  }
  auto min_b = tools::ParseSize(a.min_bytes), max_b = tools::ParseSize(a.max_bytes);
  if (!min_b.ok() || !max_b.ok()) {
    std::cerr << "allreduce_perf: error: " << (!min_b.ok() ? "--min-bytes: " + min_b.status().message()
                                                           : "--max-bytes: " + max_b.status().message())
              << "\n";
    return 2;
  }
  auto sizes = SizeSweep(*min_b, *max_b, a.step_factor, 4);
  if (!sizes.ok()) { std::cerr << "allreduce_perf: error: " << sizes.status().message() << "\n"; return 2; }
  if (a.iters < 1) { std::cerr << "allreduce_perf: error: --iters must be >= 1\n"; return 2; }
  if (a.iface_shared != "auto" && a.iface_shared != "yes" && a.iface_shared != "no") {
    std::cerr << "allreduce_perf: error: --iface-shared must be auto, yes or no, got '" << a.iface_shared << "'\n";
    return 2;
  }
  BackendConfig cfg = a.backend;
  cfg.timeout = std::chrono::milliseconds(a.timeout_ms);
  if (cfg.iface.empty()) cfg.iface = a.iface;
  auto backend_or = CreateBackend(cfg);
  if (!backend_or.ok()) {
    std::cerr << "allreduce_perf (" << cfg.backend << ", rank " << cfg.rank << "): error: "
              << backend_or.status().ToString() << "\n";
    return backend_or.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  Backend& b = **backend_or;
  const uint32_t rank = b.rank(), n = b.num_workers();
  const bool shared = a.iface_shared == "yes" || (a.iface_shared == "auto" && a.iface == "lo");
  const bool exact_float = !b.quantizes_float32();
  const std::string label = a.label.empty() ? cfg.backend : a.label;
  const bool iface_readable = ReadIface(a.iface).has_value();
  auto fail = [&](const std::string& msg) {
    std::cerr << "allreduce_perf (" << label << ", rank " << rank << "): error: " << msg << "\n";
    return 1;
  };

  if (rank == 0) {
    std::printf("# allreduce_perf: backend %s (%s), %u ranks, %s, sizes %s..%s x%llu, %u warm-up + %u timed iterations\n",
                cfg.backend.c_str(), label.c_str(), n, a.type.c_str(), tools::FormatBytes(sizes->front()).c_str(),
                tools::FormatBytes(sizes->back()).c_str(), (unsigned long long)a.step_factor, a.warmup, a.iters);
    if (cfg.backend == "switchml")
      std::printf("# switchml: %u thread(s)/worker, window %u packets, %u elements/packet, controller %s\n",
                  cfg.threads, cfg.window, cfg.elements_per_packet, cfg.controller.c_str());
    std::printf("# check: every element of every iteration on every rank; %s\n",
                type == DataType::kInt32 ? "int32 sums exact"
                : exact_float            ? "float32 sums exact (every sum of the inputs fits 23 bits)"
                                         : "float32 within the quantization bound of each element's block "
                                           "(inputs' exponents vary per 64 elements and per rank)");
    if (!iface_readable)
      std::printf("# wire/wkr: not measured (interface '%s' has no readable counters)\n", a.iface.c_str());
    else if (shared)
      std::printf("# wire/wkr: bytes each worker sends per iteration, from %s's tx counter, which all ranks%s share: "
                  "delta / %s (other traffic on %s counts too)\n",
                  a.iface.c_str(), b.via_switch() ? " and the switch" : "", b.via_switch() ? "2n" : "n",
                  a.iface.c_str());
    else
      std::printf("# wire/wkr: bytes each worker sends per iteration, from its own %s tx counter (mean over ranks)\n",
                  a.iface.c_str());
    std::printf("#%11s %12s %8s %11s %9s %9s %8s %7s %12s %10s\n", "size", "count", "type", "time", "algbw", "busbw",
                "#wrong", "retx", "wire/wkr", "ATE/s");
    std::printf("#%11s %12s %8s %11s %9s %9s %8s %7s %12s %10s\n", "(B)", "(elements)", "", "(us)", "(GB/s)",
                "(GB/s)", "", "(%)", "(B)", "(Melem/s)");
    std::fflush(stdout);
  }

  std::vector<RowResult> rows;
  uint64_t total_wrong = 0;
  for (uint64_t bytes : *sizes) {
    const size_t count = bytes / 4;
    std::vector<uint32_t> in(count), out(count);
    if (type == DataType::kFloat32) testing::FillFloat32(rank, 0, reinterpret_cast<float*>(in.data()), count);
    else testing::FillInt32(rank, 0, reinterpret_cast<int32_t*>(in.data()), count);
    std::vector<uint64_t> times_ns;
    testing::Verification worst;
    std::optional<IfaceBytes> if0, if1;
    std::optional<PacketCounters> c0, c1;
    for (uint32_t it = 0; it < a.warmup + a.iters; ++it) {
      Poison(out.data(), count);
      if (it == a.warmup) { if0 = ReadIface(a.iface); c0 = b.Counters(); }
      if (Status s = b.Barrier(); !s.ok()) return fail("barrier before " + std::to_string(bytes) + " B: " + s.ToString());
      const auto t0 = std::chrono::steady_clock::now();
      Status s = b.AllReduceSum(in.data(), out.data(), count, type);
      const auto t1 = std::chrono::steady_clock::now();
      if (!s.ok()) return fail(std::to_string(bytes) + " B, iteration " + std::to_string(it) + ": " + s.ToString());
      if (int(rank) == a.corrupt_rank && count > 0) {  // proves the check catches a wrong element
        if (type == DataType::kFloat32)
          reinterpret_cast<float*>(out.data())[count / 2] = testing::Float32WrongResult(n, count / 2);
        else reinterpret_cast<int32_t*>(out.data())[count / 2] += 1;
      }
      if (it >= a.warmup) times_ns.push_back(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
      testing::Verification v;
      if (type == DataType::kInt32) {
        v = testing::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, n);
      } else {
        const float* o = reinterpret_cast<const float*>(out.data());
        // SwitchML cuts the call as Context does: cfg.threads slices of cfg.elements_per_packet blocks.
        v = testing::VerifyFloat32(o, count, n, 0, testing::BlockLayout{cfg.elements_per_packet, cfg.threads});
        if (exact_float && v.max_abs_error > 0) {  // baselines: float sums must be exact
          v.wrong = 0;
          v.tolerance = 0;
          for (size_t i = 0; i < count; ++i)
            if (double(o[i]) != testing::Float32ExpectedSum(n, i) && v.wrong++ == 0) v.first_wrong = i;
        } else if (exact_float) {
          v.tolerance = 0;
        }
      }
      if (v.wrong > 0 && worst.wrong == 0)
        std::fprintf(stderr, "allreduce_perf (%s, rank %u): %zu B, iteration %u: %llu wrong elements, first at %llu\n",
                     label.c_str(), rank, size_t(bytes), it, (unsigned long long)v.wrong,
                     (unsigned long long)v.first_wrong);
      if (v.wrong > worst.wrong) worst.wrong = v.wrong;
      worst.max_abs_error = std::max(worst.max_abs_error, v.max_abs_error);
      worst.tolerance = v.tolerance;
    }
    if1 = ReadIface(a.iface);
    c1 = b.Counters();

    // Gather: rank r fills block r; the SUM all-reduce hands every rank every block.
    const size_t block = a.iters + kNumFields;
    std::vector<uint64_t> mine(block * n, 0);
    uint64_t* my = &mine[block * rank];
    for (uint32_t i = 0; i < a.iters; ++i) my[kNumFields + i] = times_ns[i];
    my[kWrong] = worst.wrong;
    if (c0 && c1) { my[kSent] = c1->packets_sent - c0->packets_sent; my[kRetx] = c1->retransmissions - c0->retransmissions; }
    if (if0 && if1) { my[kTx] = if1->tx - if0->tx; my[kRx] = if1->rx - if0->rx; my[kIfaceOk] = 1; }
    my[kMaxErr] = ErrorToFixed(worst.max_abs_error);
    std::vector<int32_t> packed = PackForSum(mine), summed(packed.size());
    if (Status s = b.AllReduceSum(packed.data(), summed.data(), packed.size(), DataType::kInt32); !s.ok())
      return fail("gathering the results of " + std::to_string(bytes) + " B: " + s.ToString());
    const std::vector<uint64_t> all = UnpackSum(summed);

    RowResult r;
    r.bytes = bytes;
    r.count = count;
    r.tolerance = worst.tolerance;
    std::vector<double> iter_max(a.iters, 0.0);
    uint64_t sent = 0, retx = 0, tx_sum = 0, iface_ok = 0;
    for (uint32_t q = 0; q < n; ++q) {
      const uint64_t* blk = &all[block * q];
      for (uint32_t i = 0; i < a.iters; ++i) iter_max[i] = std::max(iter_max[i], double(blk[kNumFields + i]) * 1e-9);
      r.wrong += blk[kWrong];
      sent += blk[kSent];
      retx += blk[kRetx];
      tx_sum += blk[kTx];
      iface_ok += blk[kIfaceOk];
      r.max_abs_error = std::max(r.max_abs_error, FixedToError(blk[kMaxErr]));
    }
    r.min_s = *std::min_element(iter_max.begin(), iter_max.end());
    r.max_s = *std::max_element(iter_max.begin(), iter_max.end());
    for (double t : iter_max) r.mean_s += t;
    r.mean_s /= double(a.iters);
    if (b.Counters()) r.retx_pct = sent ? 100.0 * double(retx) / double(sent) : 0.0;
    if (iface_ok == n) {
      r.wire_tx_per_worker = shared ? WirePerWorker(all[kTx], a.iters, b.via_switch() ? 2 * n : n)
                                    : WirePerWorker(tx_sum, a.iters, n);
    }
    total_wrong += r.wrong;
    rows.push_back(r);

    if (rank == 0) {
      char retx_s[32] = "-", wire_s[32] = "-";
      if (r.retx_pct) std::snprintf(retx_s, sizeof retx_s, "%.3f", *r.retx_pct);
      if (r.wire_tx_per_worker) std::snprintf(wire_s, sizeof wire_s, "%.0f", *r.wire_tx_per_worker);
      const double algbw = AlgBwGBps(bytes, r.mean_s);
      std::printf(" %11llu %12llu %8s %11.1f %9.4f %9.4f %8llu %7s %12s %10.2f\n", (unsigned long long)bytes,
                  (unsigned long long)count, a.type.c_str(), r.mean_s * 1e6, algbw, algbw * AllReduceBusBwFactor(n),
                  (unsigned long long)r.wrong, retx_s, wire_s, AggregatedElementsPerSecond(count, r.mean_s) / 1e6);
      std::fflush(stdout);
    }
  }

  const bool ok = total_wrong == 0;
  if (rank == 0) {
    double busbw_sum = 0;
    for (const RowResult& r : rows) busbw_sum += AlgBwGBps(r.bytes, r.mean_s) * AllReduceBusBwFactor(n);
    std::printf("# Out of bounds values : %llu %s\n", (unsigned long long)total_wrong, ok ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.4f\n", rows.empty() ? 0.0 : busbw_sum / double(rows.size()));
    std::printf("# %s: %s, %u ranks, %zu sizes, %llu wrong elements\n", ok ? "PASS" : "FAIL", label.c_str(), n,
                rows.size(), (unsigned long long)total_wrong);
    std::fflush(stdout);
    if (!a.json.empty()) {
      nlohmann::json j;
      j["label"] = label;
      j["backend"] = cfg.backend;
      j["workers"] = n;
      j["type"] = a.type;
      j["iters"] = a.iters;
      j["warmup"] = a.warmup;
      AddBackendJson(cfg, j);
      j["iface"] = a.iface;
      j["iface_shared"] = shared;
      j["rows"] = nlohmann::json::array();
      for (const RowResult& r : rows) {
        nlohmann::json row = {{"bytes", r.bytes},
                              {"count", r.count},
                              {"time_us", r.mean_s * 1e6},
                              {"min_time_us", r.min_s * 1e6},
                              {"max_time_us", r.max_s * 1e6},
                              {"algbw_GBps", AlgBwGBps(r.bytes, r.mean_s)},
                              {"busbw_GBps", AlgBwGBps(r.bytes, r.mean_s) * AllReduceBusBwFactor(n)},
                              {"goodput_Gbps", GoodputGbps(r.bytes, r.mean_s)},
                              {"ate_per_s", AggregatedElementsPerSecond(r.count, r.mean_s)},
                              {"wrong", r.wrong},
                              {"max_abs_error", r.max_abs_error},
                              {"tolerance", r.tolerance},
                              {"retx_pct", nullptr},
                              {"wire_tx_per_worker_B", nullptr},
                              {"wire_over_size", nullptr}};
        if (r.retx_pct) row["retx_pct"] = *r.retx_pct;
        if (r.wire_tx_per_worker) {
          row["wire_tx_per_worker_B"] = *r.wire_tx_per_worker;
          row["wire_over_size"] = *r.wire_tx_per_worker / double(r.bytes);
        }
        j["rows"].push_back(row);
      }
      j["wrong"] = total_wrong;
      j["ok"] = ok;
      std::ofstream f(a.json);
      f << j.dump(2) << "\n";
      if (!f) return fail("cannot write --json " + a.json);
    }
  }
  return ok ? 0 : 1;
}

// `summarize`: side-by-side time per size and worker count of several runs (their --json), with
// the ratio of each run's time to the first run's (> 1: the first run is faster).
int Summarize(const std::vector<std::string>& files, const std::string& out_json) {
  struct Run {
    std::string label;
    uint32_t workers;
    std::map<uint64_t, double> time_us;
  };
  std::vector<Run> runs;
  std::vector<std::string> labels;
  for (const std::string& path : files) {
    StatusOr<nlohmann::json> parsed = ReadJsonFile(path);
    if (!parsed.ok()) {
      std::cerr << "allreduce_perf summarize: error: " << parsed.status().message() << "\n";
      return 1;
    }
    const nlohmann::json& j = *parsed;
    Run r{j.value("label", path), j.value("workers", 0u), {}};
    for (const auto& row : j["rows"]) r.time_us[row.value("bytes", uint64_t{0})] = row.value("time_us", 0.0);
    if (std::find(labels.begin(), labels.end(), r.label) == labels.end()) labels.push_back(r.label);
    runs.push_back(std::move(r));
  }
  if (labels.empty()) { std::cerr << "allreduce_perf summarize: error: no runs given\n"; return 2; }
  std::map<uint32_t, std::map<uint64_t, std::map<std::string, double>>> grid;  // n → bytes → label → us
  for (const Run& r : runs)
    for (auto [bytes, us] : r.time_us) grid[r.workers][bytes][r.label] = us;
  const std::string& ref = labels[0];
  std::printf("# summary: mean time per all-reduce (us), same host, sizes and inputs; each 'ratio' is the time of\n"
              "# the column to its left divided by the %s time (> 1: %s is faster)\n", ref.c_str(), ref.c_str());
  std::printf("#%3s %11s", "n", "size(B)");
  for (const auto& l : labels) {
    std::printf(" %12s", l.substr(0, 12).c_str());
    if (l != ref) std::printf(" %8s", "ratio");
  }
  std::printf("\n");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [n, by_size] : grid) {
    for (const auto& [bytes, by_label] : by_size) {
      std::printf(" %3u %11llu", n, (unsigned long long)bytes);
      nlohmann::json row = {{"workers", n}, {"bytes", bytes}, {"time_us", nlohmann::json::object()},
                            {"ratio_to_" + ref, nlohmann::json::object()}};
      const auto ref_it = by_label.find(ref);
      for (const auto& l : labels) {
        const auto it = by_label.find(l);
        if (it == by_label.end()) std::printf(" %12s", "-");
        else { std::printf(" %12.1f", it->second); row["time_us"][l] = it->second; }
        if (l == ref) continue;
        if (it != by_label.end() && ref_it != by_label.end() && ref_it->second > 0) {
          const double ratio = it->second / ref_it->second;
          std::printf(" %8.2f", ratio);
          row["ratio_to_" + ref][l] = ratio;
        } else {
          std::printf(" %8s", "-");
        }
      }
      std::printf("\n");
      out.push_back(row);
    }
  }
  if (!out_json.empty()) std::ofstream(out_json) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

}  // namespace switchml::bench

int main(int argc, char** argv) {
  using switchml::bench::PerfArgs;
  CLI::App app{"allreduce_perf: nccl-tests style all-reduce benchmark (SwitchML, Gloo ring, MPI); one process per rank"};
  PerfArgs a;
  auto& c = a.backend;
  c.backend = "switchml";
  app.add_option("--backend", c.backend, "switchml, gloo or mpi")->capture_default_str();
  app.add_option("--label", a.label, "Name of this run in the JSON and summaries (default: the backend)");
  app.add_option("--rank", c.rank, "This rank (switchml, gloo; mpi takes it from mpirun)")->capture_default_str();
  app.add_option("--workers", c.num_workers, "Number of ranks (switchml, gloo)")->capture_default_str();
  app.add_option("-b,--min-bytes", a.min_bytes, "Smallest size (suffixes K, M, G, KiB, MiB, GiB)")->capture_default_str();
  app.add_option("-e,--max-bytes", a.max_bytes, "Largest size")->capture_default_str();
  app.add_option("-f,--step-factor", a.step_factor, "Multiply the size by this between rows")->capture_default_str();
  app.add_option("-n,--iters", a.iters, "Timed iterations per size")->capture_default_str();
  app.add_option("-w,--warmup", a.warmup, "Untimed warm-up iterations per size")->capture_default_str();
  app.add_option("-d,--type", a.type, "float32 or int32")->capture_default_str();
  AddBackendFlags(app, c);
  app.add_option("--rendezvous-prefix", c.rendezvous_prefix, "gloo: key prefix within the directory")
      ->capture_default_str();
  app.add_option("--host", c.host, "gloo: address to bind the TCP transport to (default: --iface's address)");
  app.add_option("--iface", a.iface, "Interface whose byte counters measure wire bytes ('' = none); gloo binds to it")
      ->capture_default_str();
  app.add_option("--iface-shared", a.iface_shared,
                 "auto (yes for lo), yes (all ranks use this interface), no (each rank has its own)")
      ->capture_default_str();
  app.add_option("--timeout-ms", a.timeout_ms, "Fail a collective after this long")->capture_default_str();
  app.add_option("--json", a.json, "Rank 0 writes the results as JSON to FILE");
  app.add_option("--corrupt-rank", a.corrupt_rank,
                 "Testing aid: this rank adds 1 to one output element after every all-reduce (the run must FAIL)");
  std::vector<std::string> files;
  std::string summary_json;
  CLI::App* sum = app.add_subcommand("summarize", "Side-by-side summary of several runs' --json files");
  sum->add_option("files", files, "JSON files of allreduce_perf runs; the first run's label is the reference")
      ->required();
  sum->add_option("--json", summary_json, "Write the summary as JSON to FILE");
  CLI11_PARSE(app, argc, argv);
  if (sum->parsed()) return switchml::bench::Summarize(files, summary_json);
  return switchml::bench::Run(a);
}
