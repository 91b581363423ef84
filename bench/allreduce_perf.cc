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
#include <array>
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

#include "backend.h"
#include "backend_flags.h"
#include "json_file.h"
#include "perf_metrics.h"
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
  double mean_s = 0, min_s = 0, max_s = 0, median_s = 0;
  std::vector<double> iter_s;  // each timed iteration's time (the slowest rank's), in order
  uint64_t wrong = 0;
  std::optional<double> retx_pct;
  std::optional<double> wire_tx_per_worker;
  double max_abs_error = 0, tolerance = 0;
};

// What this rank measured for one size, before the gather.
struct RankSample {
  std::vector<uint64_t> times_ns;  // one per timed iteration
  testing::Verification worst;     // most wrong elements of any iteration, largest error
  std::optional<IfaceBytes> if0, if1;
  std::optional<PacketCounters> c0, c1;
};

// The columns of the table: size, count, type, time, algbw, busbw, #wrong, retx, wire/wkr, ATE/s.
constexpr std::array<int, 10> kColumns = {12, 12, 8, 11, 9, 9, 8, 7, 12, 10};

int Usage(const std::string& msg) {
  std::cerr << "allreduce_perf: error: " << msg << "\n";
  return 2;
}

// The flag checks that need no backend; returns the sizes of the sweep.
StatusOr<std::vector<uint64_t>> CheckArgs(const PerfArgs& a) {
  if (Status s = CheckChoice("--type", a.type, {"float32", "int32"}); !s.ok()) return s;
  auto min_b = tools::ParseSize(a.min_bytes), max_b = tools::ParseSize(a.max_bytes);
  if (!min_b.ok()) return InvalidArgumentError("--min-bytes: " + min_b.status().message());
  if (!max_b.ok()) return InvalidArgumentError("--max-bytes: " + max_b.status().message());
  auto sizes = SizeSweep(*min_b, *max_b, a.step_factor, 4);
  if (!sizes.ok()) return sizes.status();
  if (a.iters < 1) return InvalidArgumentError("--iters must be >= 1");
  if (Status s = CheckChoice("--iface-shared", a.iface_shared, {"auto", "yes", "no"}); !s.ok()) return s;
  return sizes;
}

nlohmann::json RowJson(const RowResult& r, uint32_t n) {
  nlohmann::json row = {{"bytes", r.bytes},
                        {"count", r.count},
                        {"time_us", r.mean_s * 1e6},
                        {"min_time_us", r.min_s * 1e6},
                        {"max_time_us", r.max_s * 1e6},
                        {"median_time_us", r.median_s * 1e6},
                        {"iter_time_us", nlohmann::json::array()},
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
  for (double t : r.iter_s) row["iter_time_us"].push_back(t * 1e6);
  if (r.retx_pct) row["retx_pct"] = *r.retx_pct;
  if (r.wire_tx_per_worker) {
    row["wire_tx_per_worker_B"] = *r.wire_tx_per_worker;
    row["wire_over_size"] = *r.wire_tx_per_worker / double(r.bytes);
  }
  return row;
}

// The steps of one rank's sweep; they share the backend and the settings. The Print* and
// WriteJson steps are rank 0's.
class PerfRun {
 public:
  PerfRun(const PerfArgs& a, const BackendConfig& cfg, Backend& b)
      : a_(a),
        cfg_(cfg),
        b_(b),
        rank_(b.rank()),
        n_(b.num_workers()),
        type_(a.type == "int32" ? DataType::kInt32 : DataType::kFloat32),
        shared_(a.iface_shared == "yes" || (a.iface_shared == "auto" && a.iface == "lo")),
        exact_float_(!b.quantizes_float32()),
        label_(a.label.empty() ? cfg.backend : a.label) {}

  uint32_t rank() const { return rank_; }

  int Fail(const std::string& msg) const {
    std::cerr << "allreduce_perf (" << label_ << ", rank " << rank_ << "): error: " << msg << "\n";
    return 1;
  }

  void PrintHeader(const std::vector<uint64_t>& sizes) const {
    std::printf("# allreduce_perf: backend %s (%s), %u ranks, %s, sizes %s..%s x%llu, %u warm-up + %u timed iterations\n",
                cfg_.backend.c_str(), label_.c_str(), n_, a_.type.c_str(), tools::FormatBytes(sizes.front()).c_str(),
                tools::FormatBytes(sizes.back()).c_str(), (unsigned long long)a_.step_factor, a_.warmup, a_.iters);
    PrintSwitchmlHeader(cfg_);
    std::printf("# check: every element of every iteration on every rank; %s\n",
                type_ == DataType::kInt32 ? "int32 sums exact"
                : exact_float_            ? "float32 sums exact (every sum of the inputs fits 23 bits)"
                                          : "float32 within the quantization bound of each element's block "
                                            "(inputs' exponents vary per 64 elements and per rank)");
    PrintWireHeader();
    std::printf("%s\n", tools::TableLine(kColumns, {"size", "count", "type", "time", "algbw", "busbw", "#wrong", "retx",
                                                    "wire/wkr", "ATE/s"}, '#').c_str());
    std::printf("%s\n", tools::TableLine(kColumns, {"(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "", "(%)",
                                                    "(B)", "(Melem/s)"}, '#').c_str());
    std::fflush(stdout);
  }

  // Every rank: warm-up and timed iterations of one size, then the gather of all ranks' results.
  StatusOr<RowResult> MeasureSize(uint64_t bytes) {
    const size_t count = bytes / 4;
    std::vector<uint32_t> in(count), out(count);
    if (type_ == DataType::kFloat32) testing::FillFloat32(rank_, 0, reinterpret_cast<float*>(in.data()), count);
    else testing::FillInt32(rank_, 0, reinterpret_cast<int32_t*>(in.data()), count);
    StatusOr<RankSample> sample = TimeIterations(bytes, in, out);
    if (!sample.ok()) return sample.status();
    return GatherRow(bytes, *sample);
  }

  void PrintRow(const RowResult& r) const {
    using tools::StrPrintf;
    const double algbw = AlgBwGBps(r.bytes, r.mean_s);
    const std::string line = tools::TableLine(
        kColumns,
        {StrPrintf("%llu", (unsigned long long)r.bytes), StrPrintf("%llu", (unsigned long long)r.count), a_.type,
         StrPrintf("%.1f", r.mean_s * 1e6), StrPrintf("%.4f", algbw), StrPrintf("%.4f", algbw * AllReduceBusBwFactor(n_)),
         StrPrintf("%llu", (unsigned long long)r.wrong), r.retx_pct ? StrPrintf("%.3f", *r.retx_pct) : "-",
         r.wire_tx_per_worker ? StrPrintf("%.0f", *r.wire_tx_per_worker) : "-",
         StrPrintf("%.2f", AggregatedElementsPerSecond(r.count, r.mean_s) / 1e6)},
        ' ');
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  // The nccl-tests closing lines and the verdict.
  void PrintVerdict(const std::vector<RowResult>& rows, uint64_t total_wrong) const {
    const bool ok = total_wrong == 0;
    double busbw_sum = 0;
    for (const RowResult& r : rows) busbw_sum += AlgBwGBps(r.bytes, r.mean_s) * AllReduceBusBwFactor(n_);
    std::printf("# Out of bounds values : %llu %s\n", (unsigned long long)total_wrong, ok ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.4f\n", rows.empty() ? 0.0 : busbw_sum / double(rows.size()));
    std::printf("# %s: %s, %u ranks, %zu sizes, %llu wrong elements\n", ok ? "PASS" : "FAIL", label_.c_str(), n_,
                rows.size(), (unsigned long long)total_wrong);
    std::fflush(stdout);
  }

  Status WriteJson(const std::vector<RowResult>& rows, uint64_t total_wrong) const {
    nlohmann::json j;
    j["label"] = label_;
    j["backend"] = cfg_.backend;
    j["workers"] = n_;
    j["type"] = a_.type;
    j["iters"] = a_.iters;
    j["warmup"] = a_.warmup;
    AddBackendJson(cfg_, j);
    j["iface"] = a_.iface;
    j["iface_shared"] = shared_;
    j["rows"] = nlohmann::json::array();
    for (const RowResult& r : rows) j["rows"].push_back(RowJson(r, n_));
    j["wrong"] = total_wrong;
    j["ok"] = total_wrong == 0;
    return WriteJsonFile("--json", a_.json, j);
  }

 private:
  void PrintWireHeader() const {
    if (!ReadIface(a_.iface).has_value())
      std::printf("# wire/wkr: not measured (interface '%s' has no readable counters)\n", a_.iface.c_str());
    else if (shared_)
      std::printf("# wire/wkr: bytes each worker sends per iteration, from %s's tx counter, which all ranks%s share: "
                  "delta / %s (other traffic on %s counts too)\n",
                  a_.iface.c_str(), b_.via_switch() ? " and the switch" : "", b_.via_switch() ? "2n" : "n",
                  a_.iface.c_str());
    else
      std::printf("# wire/wkr: bytes each worker sends per iteration, from its own %s tx counter (mean over ranks)\n",
                  a_.iface.c_str());
  }

  // Each iteration: barrier → timed all-reduce → verification (untimed).
  StatusOr<RankSample> TimeIterations(uint64_t bytes, const std::vector<uint32_t>& in, std::vector<uint32_t>& out) {
    const size_t count = in.size();
    RankSample s;
    for (uint32_t it = 0; it < a_.warmup + a_.iters; ++it) {
      Poison(out.data(), count);
      if (it == a_.warmup) {
        s.if0 = ReadIface(a_.iface);
        s.c0 = b_.Counters();
      }
      if (Status st = b_.Barrier(); !st.ok())
        return Status(st.code(), "barrier before " + std::to_string(bytes) + " B: " + st.ToString());
      const auto t0 = std::chrono::steady_clock::now();
      Status st = b_.AllReduceSum(in.data(), out.data(), count, type_);
      const auto t1 = std::chrono::steady_clock::now();
      if (!st.ok())
        return Status(st.code(), std::to_string(bytes) + " B, iteration " + std::to_string(it) + ": " + st.ToString());
      if (int(rank_) == a_.corrupt_rank && count > 0) Corrupt(out);
      if (it >= a_.warmup)
        s.times_ns.push_back(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
      const testing::Verification v = Verify(out);
      if (v.wrong > 0 && s.worst.wrong == 0)
        std::fprintf(stderr, "allreduce_perf (%s, rank %u): %zu B, iteration %u: %llu wrong elements, first at %llu\n",
                     label_.c_str(), rank_, size_t(bytes), it, (unsigned long long)v.wrong,
                     (unsigned long long)v.first_wrong);
      if (v.wrong > s.worst.wrong) s.worst.wrong = v.wrong;
      s.worst.max_abs_error = std::max(s.worst.max_abs_error, v.max_abs_error);
      s.worst.tolerance = v.tolerance;
    }
    s.if1 = ReadIface(a_.iface);
    s.c1 = b_.Counters();
    return s;
  }

  // --corrupt-rank: damages the middle element, which the check must catch.
  void Corrupt(std::vector<uint32_t>& out) const {
    const size_t mid = out.size() / 2;
    if (type_ == DataType::kFloat32) reinterpret_cast<float*>(out.data())[mid] = testing::Float32WrongResult(n_, mid);
    else reinterpret_cast<int32_t*>(out.data())[mid] += 1;
  }

  testing::Verification Verify(const std::vector<uint32_t>& out) const {
    const size_t count = out.size();
    if (type_ == DataType::kInt32) return testing::VerifyInt32(reinterpret_cast<const int32_t*>(out.data()), count, n_);
    const float* o = reinterpret_cast<const float*>(out.data());
    // SwitchML cuts the call as Context does: cfg.threads slices of cfg.elements_per_packet blocks.
    testing::Verification v =
        testing::VerifyFloat32(o, count, n_, 0, testing::BlockLayout{cfg_.elements_per_packet, cfg_.threads});
    if (exact_float_ && v.max_abs_error > 0) {  // baselines: float sums must be exact
      v.wrong = 0;
      v.tolerance = 0;
      for (size_t i = 0; i < count; ++i)
        if (double(o[i]) != testing::Float32ExpectedSum(n_, i) && v.wrong++ == 0) v.first_wrong = i;
    } else if (exact_float_) {
      v.tolerance = 0;
    }
    return v;
  }

  // Rank r's block holds the Field values, then its a.iters iteration times.
  StatusOr<RowResult> GatherRow(uint64_t bytes, const RankSample& s) {
    std::vector<uint64_t> mine(kNumFields + a_.iters, 0);
    for (uint32_t i = 0; i < a_.iters; ++i) mine[kNumFields + i] = s.times_ns[i];
    mine[kWrong] = s.worst.wrong;
    if (s.c0 && s.c1) {
      mine[kSent] = s.c1->packets_sent - s.c0->packets_sent;
      mine[kRetx] = s.c1->retransmissions - s.c0->retransmissions;
    }
    if (s.if0 && s.if1) {
      mine[kTx] = s.if1->tx - s.if0->tx;
      mine[kRx] = s.if1->rx - s.if0->rx;
      mine[kIfaceOk] = 1;
    }
    mine[kMaxErr] = ErrorToFixed(s.worst.max_abs_error);
    const std::vector<int32_t> packed = PackRankBlock(mine, rank_, n_);
    std::vector<int32_t> summed(packed.size());
    if (Status st = b_.AllReduceSum(packed.data(), summed.data(), packed.size(), DataType::kInt32); !st.ok())
      return Status(st.code(), "gathering the results of " + std::to_string(bytes) + " B: " + st.ToString());
    return RowFromBlocks(bytes, s.worst.tolerance, UnpackSum(summed));
  }

  // An iteration's time is the slowest rank's; counts add up over ranks.
  RowResult RowFromBlocks(uint64_t bytes, double tolerance, const std::vector<uint64_t>& all) const {
    const size_t block = a_.iters + kNumFields;
    RowResult r;
    r.bytes = bytes;
    r.count = bytes / 4;
    r.tolerance = tolerance;
    std::vector<double> iter_max(a_.iters, 0.0);
    uint64_t sent = 0, retx = 0, tx_sum = 0, iface_ok = 0;
    for (uint32_t q = 0; q < n_; ++q) {
      const uint64_t* blk = &all[block * q];
      for (uint32_t i = 0; i < a_.iters; ++i) iter_max[i] = std::max(iter_max[i], double(blk[kNumFields + i]) * 1e-9);
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
    r.mean_s /= double(a_.iters);
    r.iter_s = iter_max;
    std::vector<double> sorted = iter_max;
    std::sort(sorted.begin(), sorted.end());
    const size_t mid = sorted.size() / 2;
    r.median_s = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    if (b_.Counters()) r.retx_pct = sent ? 100.0 * double(retx) / double(sent) : 0.0;
    if (iface_ok == n_) {
      r.wire_tx_per_worker = shared_ ? WirePerWorker(all[kTx], a_.iters, b_.via_switch() ? 2 * n_ : n_)
                                     : WirePerWorker(tx_sum, a_.iters, n_);
    }
    return r;
  }

  const PerfArgs& a_;
  const BackendConfig& cfg_;
  Backend& b_;
  const uint32_t rank_, n_;
  const DataType type_;
  const bool shared_;       // all ranks share --iface (its counters hold everybody's traffic)
  const bool exact_float_;  // float32 sums must be exact (the baselines)
  const std::string label_;
};

int Run(const PerfArgs& a) {
  const StatusOr<std::vector<uint64_t>> sizes = CheckArgs(a);
  if (!sizes.ok()) return Usage(sizes.status().message());
  BackendConfig cfg = a.backend;
  cfg.timeout = std::chrono::milliseconds(a.timeout_ms);
  if (cfg.iface.empty()) cfg.iface = a.iface;
  auto backend_or = CreateBackend(cfg);
  if (!backend_or.ok()) return ReportBackendError("allreduce_perf", cfg, backend_or.status());
  PerfRun run(a, cfg, **backend_or);

  if (run.rank() == 0) run.PrintHeader(*sizes);
  std::vector<RowResult> rows;
  uint64_t total_wrong = 0;
  for (uint64_t bytes : *sizes) {
    StatusOr<RowResult> row = run.MeasureSize(bytes);
    if (!row.ok()) return run.Fail(row.status().message());
    total_wrong += row->wrong;
    rows.push_back(*row);
    if (run.rank() == 0) run.PrintRow(*row);
  }
  if (run.rank() == 0) run.PrintVerdict(rows, total_wrong);
  if (run.rank() == 0 && !a.json.empty()) {
    if (Status s = run.WriteJson(rows, total_wrong); !s.ok()) return run.Fail(s.message());
  }
  return total_wrong == 0 ? 0 : 1;
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
