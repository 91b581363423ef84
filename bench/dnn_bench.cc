// dnn_bench: data-parallel training imitation (after the reference's dnn_benchmark,
// docs/dnn-benchmark.md). One process
// per rank. Each iteration simulates the backward pass of a real model layer by layer (last
// layer first) and, as each layer's gradient (or DDP-style bucket of layers) becomes ready,
// queues an asynchronous float32 SUM all-reduce of it; then it waits for all of them. The same
// structure serves every backend: a communication thread per rank executes the queued
// collectives in order through the blocking bench::Backend, while the main thread "computes".
//
//   dnn_bench --model resnet50 --backend switchml --rank R --workers N --controller HOST:PORT
//   dnn_bench --model vgg19 --backend gloo --rank R --workers N --rendezvous-dir DIR --host IP
//   dnn_bench --model bert-base --print-layers          # the layer table, then exit
//   dnn_bench summarize --json summary.json run1.json run2.json ...
//
// Times per iteration (each the slowest rank's): iteration = start of the pass (after a
// barrier) until the last all-reduce finished; compute = the simulated compute; comm = time the
// communication thread spent inside all-reduces (it overlaps compute); exposed = iteration −
// compute, the communication the compute could not hide. Ideal = the configured compute time
// (no communication at all). Every rank checks the reduced gradients after every iteration
// (untimed); a wrong element on any rank makes every rank exit non-zero.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend.h"
#include "backend_flags.h"
#include "json_file.h"
#include "dnn_models.h"
#include "perf_metrics.h"
#include "testing/exact_inputs.h"
#include "tools/cli_util.h"

namespace switchml::bench {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

struct DnnArgs {
  BackendConfig backend;
  std::string label;
  std::string model = "resnet50";
  double compute_ms = 100.0;  // total backward time per iteration
  double forward_ms = 0.0;    // total forward time per iteration (not overlapped)
  std::string split = "flops";
  std::string layer_times;    // CSV file; replaces compute_ms/forward_ms/split
  uint32_t iterations = 5, warmup = 1;
  double bucket_mib = 0;      // 0 = one all-reduce per layer
  std::string compute_mode = "sleep";
  std::string verify = "all";
  uint32_t timeout_ms = 300000;
  std::string json;
  bool print_layers = false;
  std::string dump_layer_times;
  int corrupt_rank = -1;  // testing aid: this rank damages one element of the last layer's sum
};

// Executes queued collectives of one Backend in submission order on a thread of its own: the
// Backend is only ever used from that thread. Submit() never waits for communication.
class CommThread {
 public:
  struct Done {
    Status status;
    Clock::time_point start, end;
  };
  using Op = std::function<Status(Backend&)>;

  explicit CommThread(Backend& backend) : backend_(backend), thread_([this] { Loop(); }) {}
  // Lets the running collective finish; queued ones complete with CANCELLED.
  ~CommThread() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::future<Done> Submit(Op op) {
    std::promise<Done> p;
    std::future<Done> f = p.get_future();
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back(Item{std::move(op), std::move(p)});
    }
    cv_.notify_one();
    return f;
  }
  // Submit and wait.
  Status Run(Op op) { return Submit(std::move(op)).get().status; }

 private:
  struct Item {
    Op op;
    std::promise<Done> done;
  };
  void Loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
        if (stop_) {
          for (Item& it : queue_) it.done.set_value(Done{CancelledError("benchmark stopped"), {}, {}});
          queue_.clear();
          return;
        }
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      Done d;
      d.start = Clock::now();
      d.status = item.op(backend_);
      d.end = Clock::now();
      item.done.set_value(std::move(d));
    }
  }

  Backend& backend_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

// What one rank measured in one iteration (its block in the gathered vector).
enum Field : size_t { kIterNs, kComputeNs, kCommNs, kExposedNs, kWrong, kMaxErr, kSent, kRetx, kNumFields };

struct IterResult {
  double iter_ms = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0;
  uint64_t wrong = 0;
  double max_abs_error = 0;
  uint64_t sent = 0, retx = 0;  // SwitchML packets of all ranks (0 for the TCP baselines)
};

std::string FormatMib(double mib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", mib);
  return buf;
}

double Ms(nanoseconds d) { return double(d.count()) * 1e-6; }
double Ms(uint64_t ns) { return double(ns) * 1e-6; }

// Counts elements of out[begin, end) that differ from the exact sum want[i] by more than their
// bound: 0 without block exponents (exact backends), else the quantization bound of element i's
// block (exps[i]: its switch-wide exponent) for n workers.
void Check(const float* out, const float* want, const int8_t* exps, uint32_t n, uint64_t begin, uint64_t end,
           testing::Verification& v) {
  for (uint64_t i = begin; i < end; ++i) {
    const double err = std::abs(double(out[i]) - double(want[i]));
    const double tol = exps ? testing::Float32Bound(n, exps[i], double(want[i])) : 0.0;
    if (!(err <= tol)) {  // NaN counts as wrong
      if (v.wrong++ == 0) v.first_wrong = i;
      v.max_abs_error = std::max(v.max_abs_error, std::isnan(err) ? 1e30 : err);
    } else {
      v.max_abs_error = std::max(v.max_abs_error, err);
    }
  }
}

void WaitUntil(Clock::time_point deadline, bool spin) {
  if (spin) {
    while (Clock::now() < deadline) {
    }
  } else {
    std::this_thread::sleep_until(deadline);
  }
}

int Fail(const std::string& who, const std::string& msg) {
  std::cerr << "dnn_bench (" << who << "): error: " << msg << "\n";
  return 1;
}

int Usage(const std::string& msg) {
  std::cerr << "dnn_bench: error: " << msg << "\n";
  return 2;
}

void PrintLayers(const DnnModel& m, const LayerTimes& t, const std::vector<GradientBucket>& buckets) {
  std::printf("# %s: %s\n# %zu layers, %llu parameters (%.1f MB of float32 gradients), %.2f GFLOP forward/sample\n",
              m.name.c_str(), m.description.c_str(), m.layers.size(), (unsigned long long)m.TotalParams(),
              double(m.TotalParams()) * 4e-6, double(m.TotalFlops()) * 1e-9);
  std::printf("#%5s %-45s %-9s %12s %14s %12s %12s\n", "index", "name", "kind", "params", "fwd_flops", "fwd_us",
              "bwd_us");
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const DnnLayer& l = m.layers[i];
    std::printf(" %5zu %-45s %-9s %12llu %14llu %12.1f %12.1f\n", i, l.name.c_str(), l.kind.c_str(),
                (unsigned long long)l.num_params, (unsigned long long)l.forward_flops, double(t.forward[i].count()) / 1e3,
                double(t.backward[i].count()) / 1e3);
  }
  std::printf("# %zu all-reduces per iteration, in launch order (layers [first, end), elements):", buckets.size());
  for (size_t k = 0; k < buckets.size(); ++k)
    std::printf("%s[%zu,%zu) %llu", k % 6 == 0 ? "\n#   " : "  ", buckets[k].first_layer, buckets[k].end_layer,
                (unsigned long long)buckets[k].num_elements);
  std::printf("\n");
}

// The flag checks that need no model and no backend.
Status CheckArgs(const DnnArgs& a) {
  SWITCHML_RETURN_IF_ERROR(CheckChoice("--split", a.split, {"flops", "params"}));
  SWITCHML_RETURN_IF_ERROR(CheckChoice("--compute-mode", a.compute_mode, {"sleep", "spin"}));
  SWITCHML_RETURN_IF_ERROR(CheckChoice("--verify", a.verify, {"all", "layers", "none"}));
  if (a.compute_ms < 0 || a.forward_ms < 0) return InvalidArgumentError("--compute-ms and --forward-ms must be >= 0");
  if (a.bucket_mib < 0) return InvalidArgumentError("--bucket-mib must be >= 0, got " + std::to_string(a.bucket_mib));
  if (a.iterations < 1) return InvalidArgumentError("--iterations must be >= 1");
  return Status();
}

// The per-layer times: from --layer-times, or --compute-ms/--forward-ms split over the layers.
StatusOr<LayerTimes> LoadLayerTimes(const DnnArgs& a, const DnnModel& model) {
  LayerTimes times;
  if (!a.layer_times.empty()) {
    std::ifstream f(a.layer_times);
    if (!f) return InvalidArgumentError("--layer-times: cannot read '" + a.layer_times + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    auto t = ParseLayerTimesCsv(ss.str(), model);
    if (!t.ok()) return InvalidArgumentError(t.status().message() + " (file " + a.layer_times + ")");
    times = *t;
  } else {
    const TimeSplit split = a.split == "flops" ? TimeSplit::kFlops : TimeSplit::kParams;
    times.backward = SplitTime(model, nanoseconds(int64_t(a.compute_ms * 1e6)), split);
    times.forward = SplitTime(model, nanoseconds(int64_t(a.forward_ms * 1e6)), split);
  }
  return times;
}

// What an iteration simulates: the model, its per-layer compute times and its all-reduces.
struct Workload {
  DnnModel model;
  LayerTimes times;
  nanoseconds forward_total{0}, backward_total{0};
  uint64_t cap_bytes = 0;  // bucket size; 0 = one all-reduce per layer
  std::vector<GradientBucket> buckets;
};

// Checks the flags (errors: exit code 2) and builds the workload.
StatusOr<Workload> MakeWorkload(const DnnArgs& a) {
  auto model = MakeDnnModel(a.model);
  if (!model.ok()) return model.status();
  SWITCHML_RETURN_IF_ERROR(CheckArgs(a));
  Workload w;
  w.model = std::move(*model);
  auto times = LoadLayerTimes(a, w.model);
  if (!times.ok()) return times.status();
  w.times = std::move(*times);
  for (size_t i = 0; i < w.model.layers.size(); ++i) {
    w.forward_total += w.times.forward[i];
    w.backward_total += w.times.backward[i];
  }
  w.cap_bytes = uint64_t(a.bucket_mib * 1024 * 1024);
  w.buckets = MakeBuckets(w.model, w.cap_bytes);
  return w;
}

// --dump-layer-times and --print-layers, which need no job: the exit code if one was asked for.
std::optional<int> RunOfflineModes(const DnnArgs& a, const Workload& w) {
  if (!a.dump_layer_times.empty()) {
    std::ofstream f(a.dump_layer_times);
    f << LayerTimesCsv(w.model, w.times);
    if (!f) return Usage("--dump-layer-times: cannot write '" + a.dump_layer_times + "'");
  }
  if (a.print_layers) {
    PrintLayers(w.model, w.times, w.buckets);
    return 0;
  }
  if (!a.dump_layer_times.empty()) return 0;
  return std::nullopt;
}

// The columns of the per-iteration table.
constexpr std::array<int, 7> kColumns = {10, 12, 12, 12, 12, 8, 8};

// This rank's timestamps of one iteration's pass (before the gather).
struct PassTimes {
  Clock::time_point start, compute_end, end;
  nanoseconds busy{0};  // the communication thread inside all-reduces
  std::optional<PacketCounters> c0, c1;
};

// The timed iterations, averaged (means of the slowest rank's times) and their extremes.
struct RunSummary {
  IterResult mean;
  double min_iter = 0, max_iter = 0, max_err = 0;
  uint64_t sent = 0, retx = 0;
};

RunSummary SummarizeIterations(const std::vector<IterResult>& timed) {
  RunSummary s;
  s.min_iter = timed.front().iter_ms;
  for (const IterResult& r : timed) {
    s.mean.iter_ms += r.iter_ms / double(timed.size());
    s.mean.compute_ms += r.compute_ms / double(timed.size());
    s.mean.comm_ms += r.comm_ms / double(timed.size());
    s.mean.exposed_ms += r.exposed_ms / double(timed.size());
    s.min_iter = std::min(s.min_iter, r.iter_ms);
    s.max_iter = std::max(s.max_iter, r.iter_ms);
    s.max_err = std::max(s.max_err, r.max_abs_error);
    s.sent += r.sent;
    s.retx += r.retx;
  }
  return s;
}

// An iteration's result from every rank's block: times are the slowest rank's, counts add up.
IterResult IterationFromBlocks(const std::vector<uint64_t>& all, uint32_t n) {
  IterResult r;
  for (uint32_t q = 0; q < n; ++q) {
    const uint64_t* blk = &all[size_t(kNumFields) * q];
    r.iter_ms = std::max(r.iter_ms, Ms(blk[kIterNs]));
    r.compute_ms = std::max(r.compute_ms, Ms(blk[kComputeNs]));
    r.comm_ms = std::max(r.comm_ms, Ms(blk[kCommNs]));
    r.exposed_ms = std::max(r.exposed_ms, Ms(blk[kExposedNs]));
    r.wrong += blk[kWrong];
    r.max_abs_error = std::max(r.max_abs_error, FixedToError(blk[kMaxErr]));
    r.sent += blk[kSent];
    r.retx += blk[kRetx];
  }
  return r;
}

// The steps of one rank's run; they share the backend (used only through the communication
// thread), the gradient buffers and the expected sums. Print* and WriteJson are rank 0's.
class DnnRun {
 public:
  DnnRun(const DnnArgs& a, const BackendConfig& cfg, const Workload& w, Backend& b)
      : a_(a),
        cfg_(cfg),
        w_(w),
        b_(b),
        label_(a.label.empty() ? cfg.backend : a.label),
        rank_(b.rank()),
        n_(b.num_workers()),
        who_(label_ + ", rank " + std::to_string(rank_)),
        total_(w.model.TotalParams()),
        grad_(total_),
        out_(total_),
        comm_(b) {}

  uint32_t rank() const { return rank_; }
  int Fail(const std::string& msg) const { return bench::Fail(who_, msg); }

  void PrintHeader() const {
    const DnnModel& m = w_.model;
    std::printf("# dnn_bench: model %s, backend %s (%s), %u ranks, %u warm-up + %u timed iterations\n", m.name.c_str(),
                cfg_.backend.c_str(), label_.c_str(), n_, a_.warmup, a_.iterations);
    std::printf("# model: %s\n# %zu layers, %llu float32 gradients (%.1f MB); %zu all-reduces per iteration (%s)\n",
                m.description.c_str(), m.layers.size(), (unsigned long long)total_, double(total_) * 4e-6,
                w_.buckets.size(),
                w_.cap_bytes ? ("DDP-style buckets of >= " + FormatMib(a_.bucket_mib) + " MiB").c_str()
                             : "one per layer");
    std::printf("# compute per iteration: forward %.1f ms, backward %.1f ms (%s), simulated by %s\n",
                Ms(w_.forward_total), Ms(w_.backward_total),
                a_.layer_times.empty() ? ("--compute-ms split over layers by " + a_.split).c_str()
                                       : ("--layer-times " + a_.layer_times).c_str(),
                a_.compute_mode.c_str());
    PrintSwitchmlHeader(cfg_);
    std::printf("# check: %s after every iteration; %s\n",
                a_.verify == "all"      ? "every gradient element on every rank"
                : a_.verify == "layers" ? "the first and last 256 elements of every layer on every rank"
                                        : "nothing (--verify none)",
                b_.quantizes_float32() ? "within the quantization bound of each element's block" : "sums exact");
    std::printf("%s\n", tools::TableLine(kColumns, {"iteration", "time(ms)", "compute(ms)", "comm(ms)", "exposed(ms)",
                                                    "#wrong", "retx(%)"}, '#').c_str());
    std::fflush(stdout);
  }

  // The inputs and, unless --verify none, the expected sums. Every sum of the inputs fits 23
  // bits (testing/exact_inputs.h), so it is exact in float32, and comparing against a buffer
  // keeps the per-iteration check memory-bound. With SwitchML also the block exponents: one
  // all-reduce call per bucket, which the library cuts into `threads` slices of
  // elements_per_packet blocks.
  void PrepareCheck() {
    testing::FillFloat32(rank_, 0, grad_.data(), total_);
    if (a_.verify == "none") return;
    want_.resize(total_);
    for (uint64_t i = 0; i < total_; ++i) want_[i] = float(testing::Float32ExpectedSum(n_, i));
    if (!b_.quantizes_float32()) return;
    exps_.resize(total_);
    const testing::BlockLayout layout{cfg_.elements_per_packet, cfg_.threads};
    for (const GradientBucket& g : w_.buckets)
      testing::Float32BlockExponents(n_, g.offset, g.num_elements, layout, exps_.data() + g.offset);
    for (uint64_t i = 0; i < total_; ++i) tol_ = std::max(tol_, testing::Float32Bound(n_, exps_[i], double(want_[i])));
  }

  // Every rank: the timed pass, the (untimed) check, then the gather of all ranks' results.
  StatusOr<IterResult> RunIteration(uint32_t it) {
    StatusOr<PassTimes> pass = TimePass(it);
    if (!pass.ok()) return pass.status();
    if (int(rank_) == a_.corrupt_rank) out_[total_ - 1] = testing::Float32WrongResult(n_, total_ - 1);  // must be caught
    const testing::Verification v = CheckGradients();
    if (v.wrong > 0)
      std::fprintf(stderr, "dnn_bench (%s): iteration %u: %llu wrong gradient elements, first at %llu\n", who_.c_str(),
                   it, (unsigned long long)v.wrong, (unsigned long long)v.first_wrong);
    return Gather(it, *pass, v);
  }

  void PrintIterationRow(uint32_t it, const IterResult& r) const {
    using tools::StrPrintf;
    const std::string name = it < a_.warmup ? StrPrintf("warm-up %u", it + 1)
                                            : StrPrintf("%u/%u", it - a_.warmup + 1, a_.iterations);
    const std::string retx =
        b_.Counters() ? StrPrintf("%.2f", r.sent ? 100.0 * double(r.retx) / double(r.sent) : 0.0) : "-";
    std::printf("%s\n", tools::TableLine(kColumns,
                                         {name, StrPrintf("%.1f", r.iter_ms), StrPrintf("%.1f", r.compute_ms),
                                          StrPrintf("%.1f", r.comm_ms), StrPrintf("%.1f", r.exposed_ms),
                                          StrPrintf("%llu", (unsigned long long)r.wrong), retx},
                                         ' ').c_str());
    std::fflush(stdout);
  }

  void PrintResult(const RunSummary& s, uint64_t total_wrong) const {
    const double ideal_ms = IdealMs(), it_ms = s.mean.iter_ms;
    std::printf("# result: model %s backend %s n %u: iteration %.1f ms (min %.1f), compute %.1f ms, comm %.1f ms, "
                "exposed comm %.1f ms, ideal %.1f ms (ideal/iteration %.3f), %.2f iterations/s, %llu wrong: %s\n",
                w_.model.name.c_str(), label_.c_str(), n_, it_ms, s.min_iter, s.mean.compute_ms, s.mean.comm_ms,
                s.mean.exposed_ms, ideal_ms, it_ms > 0 ? ideal_ms / it_ms : 0.0, it_ms > 0 ? 1e3 / it_ms : 0.0,
                (unsigned long long)total_wrong, total_wrong == 0 ? "PASS" : "FAIL");
    std::fflush(stdout);
  }

  Status WriteJson(const std::vector<IterResult>& timed, const RunSummary& s, uint64_t total_wrong) const {
    nlohmann::json j = SetupJson();
    const double ideal_ms = IdealMs();
    j["iteration_ms"] = s.mean.iter_ms;
    j["min_iteration_ms"] = s.min_iter;
    j["max_iteration_ms"] = s.max_iter;
    j["compute_ms"] = s.mean.compute_ms;
    j["comm_ms"] = s.mean.comm_ms;
    j["exposed_comm_ms"] = s.mean.exposed_ms;
    j["ideal_ms"] = ideal_ms;
    j["ideal_over_iteration"] = s.mean.iter_ms > 0 ? ideal_ms / s.mean.iter_ms : 0.0;
    j["per_iteration"] = nlohmann::json::array();
    for (const IterResult& r : timed)
      j["per_iteration"].push_back({{"iteration_ms", r.iter_ms}, {"compute_ms", r.compute_ms},
                                    {"comm_ms", r.comm_ms}, {"exposed_comm_ms", r.exposed_ms}});
    if (b_.Counters()) {
      j["packets_sent"] = s.sent;
      j["retransmissions"] = s.retx;
      j["retx_pct"] = s.sent ? 100.0 * double(s.retx) / double(s.sent) : 0.0;
    } else {
      j["retx_pct"] = nullptr;
    }
    j["max_abs_error"] = s.max_err;
    j["tolerance"] = tol_;
    j["wrong"] = total_wrong;
    j["ok"] = total_wrong == 0;
    return WriteJsonFile("--json", a_.json, j);
  }

 private:
  double IdealMs() const { return Ms(w_.forward_total + w_.backward_total); }  // no communication at all

  // What was run: the model, the workload and the backend's settings.
  nlohmann::json SetupJson() const {
    nlohmann::json j;
    j["label"] = label_;
    j["backend"] = cfg_.backend;
    j["model"] = w_.model.name;
    j["model_description"] = w_.model.description;
    j["workers"] = n_;
    j["layers"] = w_.model.layers.size();
    j["params"] = total_;
    j["allreduces_per_iteration"] = w_.buckets.size();
    j["bucket_mib"] = a_.bucket_mib;
    j["forward_ms"] = Ms(w_.forward_total);
    j["backward_ms"] = Ms(w_.backward_total);
    j["time_source"] = a_.layer_times.empty() ? "compute-ms split by " + a_.split : "layer-times " + a_.layer_times;
    j["compute_mode"] = a_.compute_mode;
    j["verify"] = a_.verify;
    j["iterations"] = a_.iterations;
    j["warmup"] = a_.warmup;
    AddBackendJson(cfg_, j);
    return j;
  }

  // The timed part of an iteration: a barrier, then the simulated compute queuing the
  // all-reduces, then the wait for all of them.
  StatusOr<PassTimes> TimePass(uint32_t it) {
    std::memset(out_.data(), 0x7F, total_ * sizeof(float));  // poison: 3.39e38, far from any sum
    if (Status s = comm_.Run([](Backend& be) { return be.Barrier(); }); !s.ok())
      return Status(s.code(), "barrier before iteration " + std::to_string(it) + ": " + s.ToString());
    PassTimes p;
    p.c0 = b_.Counters();  // the communication thread is idle here
    std::vector<std::future<CommThread::Done>> pending;
    pending.reserve(w_.buckets.size());
    p.start = Clock::now();
    SimulateCompute(p.start, pending);
    p.compute_end = Clock::now();
    Status first_error;
    for (auto& f : pending) {
      CommThread::Done d = f.get();
      if (!d.status.ok() && first_error.ok()) first_error = d.status;
      p.busy += std::chrono::duration_cast<nanoseconds>(d.end - d.start);
    }
    p.end = Clock::now();
    if (!first_error.ok())
      return Status(first_error.code(), "iteration " + std::to_string(it) + ": " + first_error.ToString());
    p.c1 = b_.Counters();
    return p;
  }

  // The forward pass (no communication), then the backward pass from the last layer to the
  // first, queuing each bucket's all-reduce as soon as the gradient of its first layer is ready.
  void SimulateCompute(Clock::time_point start, std::vector<std::future<CommThread::Done>>& pending) {
    const bool spin = a_.compute_mode == "spin";
    const std::vector<GradientBucket>& buckets = w_.buckets;
    Clock::time_point deadline = start;
    for (size_t l = 0; l < w_.model.layers.size(); ++l) {
      if (w_.times.forward[l].count() == 0) continue;
      deadline += w_.times.forward[l];
      WaitUntil(deadline, spin);
    }
    size_t next = 0;  // buckets[next] is the next to launch
    for (size_t l = w_.model.layers.size(); l-- > 0;) {
      if (w_.times.backward[l].count() > 0) {
        deadline += w_.times.backward[l];
        WaitUntil(deadline, spin);
      }
      for (; next < buckets.size() && buckets[next].first_layer == l; ++next) {
        const GradientBucket& g = buckets[next];
        const float* in = grad_.data() + g.offset;
        float* o = out_.data() + g.offset;
        const size_t count = g.num_elements;
        pending.push_back(comm_.Submit(
            [in, o, count](Backend& be) { return be.AllReduceSum(in, o, count, DataType::kFloat32); }));
      }
    }
  }

  testing::Verification CheckGradients() const {
    testing::Verification v;
    const int8_t* const exps = exps_.empty() ? nullptr : exps_.data();
    if (a_.verify == "all") {
      Check(out_.data(), want_.data(), exps, n_, 0, total_, v);
    } else if (a_.verify == "layers") {
      for (size_t l = 0; l < w_.model.layers.size(); ++l) {
        const uint64_t begin = w_.model.Offset(l), end = begin + w_.model.layers[l].num_params;
        Check(out_.data(), want_.data(), exps, n_, begin, std::min(end, begin + 256), v);
        Check(out_.data(), want_.data(), exps, n_, std::max(begin + 256, end > 256 ? end - 256 : 0), end, v);
      }
    }
    return v;
  }

  // Rank r fills block r; the SUM all-reduce (on the communication thread) hands every rank
  // every block.
  StatusOr<IterResult> Gather(uint32_t it, const PassTimes& p, const testing::Verification& v) {
    std::vector<uint64_t> mine(kNumFields, 0);
    mine[kIterNs] = uint64_t(std::chrono::duration_cast<nanoseconds>(p.end - p.start).count());
    mine[kComputeNs] = uint64_t(std::chrono::duration_cast<nanoseconds>(p.compute_end - p.start).count());
    mine[kCommNs] = uint64_t(p.busy.count());
    mine[kExposedNs] = uint64_t(std::chrono::duration_cast<nanoseconds>(p.end - p.compute_end).count());
    mine[kWrong] = v.wrong;
    mine[kMaxErr] = ErrorToFixed(v.max_abs_error);
    if (p.c0 && p.c1) {
      mine[kSent] = p.c1->packets_sent - p.c0->packets_sent;
      mine[kRetx] = p.c1->retransmissions - p.c0->retransmissions;
    }
    const std::vector<int32_t> packed = PackRankBlock(mine, rank_, n_);
    std::vector<int32_t> summed(packed.size());
    if (Status s = comm_.Run([&](Backend& be) {
          return be.AllReduceSum(packed.data(), summed.data(), packed.size(), DataType::kInt32);
        });
        !s.ok())
      return Status(s.code(), "gathering the results of iteration " + std::to_string(it) + ": " + s.ToString());
    return IterationFromBlocks(UnpackSum(summed), n_);
  }

  const DnnArgs& a_;
  const BackendConfig& cfg_;
  const Workload& w_;
  Backend& b_;  // for its properties and counters; collectives go through comm_
  const std::string label_;
  const uint32_t rank_, n_;
  const std::string who_;  // "LABEL, rank R" in messages
  const uint64_t total_;   // gradient elements
  std::vector<float> grad_, out_, want_;
  std::vector<int8_t> exps_;  // SwitchML: each element's block exponent (switch-wide)
  double tol_ = 0;            // the largest per-element bound, for the JSON
  CommThread comm_;           // last: its thread starts once the members above exist
};

int Run(const DnnArgs& a) {
  const StatusOr<Workload> w = MakeWorkload(a);
  if (!w.ok()) return Usage(w.status().message());
  if (const std::optional<int> rc = RunOfflineModes(a, *w)) return *rc;
  BackendConfig cfg = a.backend;
  cfg.timeout = std::chrono::milliseconds(a.timeout_ms);
  cfg.rendezvous_prefix = "dnn_bench";
  auto backend_or = CreateBackend(cfg);
  if (!backend_or.ok()) return ReportBackendError("dnn_bench", cfg, backend_or.status());
  DnnRun run(a, cfg, *w, **backend_or);

  if (run.rank() == 0) run.PrintHeader();
  run.PrepareCheck();
  std::vector<IterResult> timed;
  uint64_t total_wrong = 0;
  for (uint32_t it = 0; it < a.warmup + a.iterations; ++it) {
    StatusOr<IterResult> r = run.RunIteration(it);
    if (!r.ok()) return run.Fail(r.status().message());
    total_wrong += r->wrong;
    if (it >= a.warmup) timed.push_back(*r);
    if (run.rank() == 0) run.PrintIterationRow(it, *r);
  }
  const RunSummary summary = SummarizeIterations(timed);
  if (run.rank() == 0) run.PrintResult(summary, total_wrong);
  if (run.rank() == 0 && !a.json.empty()) {
    if (Status s = run.WriteJson(timed, summary, total_wrong); !s.ok()) return run.Fail(s.message());
  }
  return total_wrong == 0 ? 0 : 1;
}

// `summarize`: one row per run, grouped by model and worker count, with the speedup of each
// run over the Gloo run of the same model and n (gloo time / run time; > 1: faster than Gloo).
int Summarize(const std::vector<std::string>& files, const std::string& out_json, const std::string& reference) {
  std::vector<nlohmann::json> runs;
  for (const std::string& path : files) {
    StatusOr<nlohmann::json> parsed = ReadJsonFile(path);
    if (!parsed.ok()) {
      std::cerr << "dnn_bench summarize: error: " << parsed.status().message() << "\n";
      return 1;
    }
    nlohmann::json j = std::move(*parsed);
    if (!j.is_object() || !j.contains("model") || !j.contains("iteration_ms")) {
      std::cerr << "dnn_bench summarize: error: " << path << " is not the --json of a dnn_bench run\n";
      return 1;
    }
    runs.push_back(std::move(j));
  }
  if (runs.empty()) return Usage("summarize: no runs given");
  // Runs are comparable when model, worker count and bucketing match.
  using Key = std::tuple<std::string, uint32_t, double>;
  auto key = [](const nlohmann::json& j) {
    return Key{j.value("model", ""), j.value("workers", 0u), j.value("bucket_mib", 0.0)};
  };
  std::map<Key, double> ref_ms;
  for (const auto& j : runs)
    if (j.value("label", "") == reference) ref_ms[key(j)] = j.value("iteration_ms", 0.0);
  std::printf("| model | n | backend | all-reduces | iteration (ms) | compute (ms) | comm (ms) | exposed comm (ms) | "
              "speedup vs %s | ideal / iteration | retx (%%) | check |\n",
              reference.c_str());
  std::printf("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& j : runs) {
    const std::string model = j.value("model", ""), label = j.value("label", "");
    const uint32_t n = j.value("workers", 0u);
    const double it = j.value("iteration_ms", 0.0);
    nlohmann::json row = {{"model", model},
                          {"workers", n},
                          {"label", label},
                          {"allreduces_per_iteration", j.value("allreduces_per_iteration", 0u)},
                          {"iteration_ms", it},
                          {"compute_ms", j.value("compute_ms", 0.0)},
                          {"comm_ms", j.value("comm_ms", 0.0)},
                          {"exposed_comm_ms", j.value("exposed_comm_ms", 0.0)},
                          {"ideal_over_iteration", j.value("ideal_over_iteration", 0.0)},
                          {"ok", j.value("ok", false)},
                          {"retx_pct", j.contains("retx_pct") ? j["retx_pct"] : nlohmann::json()},
                          {"speedup_vs_" + reference, nullptr}};
    char speedup[32] = "-", allreduces[48];
    const double bucket = j.value("bucket_mib", 0.0);
    if (bucket > 0) std::snprintf(allreduces, sizeof allreduces, "%u (%g MiB buckets)", j.value("allreduces_per_iteration", 0u), bucket);
    else std::snprintf(allreduces, sizeof allreduces, "%u (per layer)", j.value("allreduces_per_iteration", 0u));
    row["bucket_mib"] = bucket;
    const auto r = ref_ms.find(key(j));
    if (r != ref_ms.end() && it > 0) {
      row["speedup_vs_" + reference] = r->second / it;
      std::snprintf(speedup, sizeof speedup, "%.2f", r->second / it);
    }
    char retx[16] = "-";
    if (j.contains("retx_pct") && j["retx_pct"].is_number())
      std::snprintf(retx, sizeof retx, "%.2f", j["retx_pct"].get<double>());
    std::printf("| %s | %u | %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %.3f | %s | %s |\n", model.c_str(), n,
                label.c_str(), allreduces, it, j.value("compute_ms", 0.0),
                j.value("comm_ms", 0.0), j.value("exposed_comm_ms", 0.0), speedup,
                j.value("ideal_over_iteration", 0.0), retx, j.value("ok", false) ? "PASS" : "FAIL");
    out.push_back(row);
  }
  if (!out_json.empty()) {
    std::ofstream f(out_json);
    f << out.dump(2) << "\n";
    if (!f) {
      std::cerr << "dnn_bench summarize: error: cannot write " << out_json << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

}  // namespace switchml::bench

int main(int argc, char** argv) {
  using switchml::bench::DnnArgs;
  CLI::App app{"dnn_bench: data-parallel training imitation with real models' per-layer gradients; "
               "one process per rank"};
  DnnArgs a;
  auto& c = a.backend;
  c.backend = "switchml";
  app.add_option("--model", a.model, "resnet50, vgg19 or bert-base")->capture_default_str();
  app.add_option("--backend", c.backend, "switchml or gloo (mpi too, started by mpirun; not exercised by run_dnn.sh)")->capture_default_str();
  app.add_option("--label", a.label, "Name of this run in the JSON and summaries (default: the backend)");
  app.add_option("--rank", c.rank, "This rank")->capture_default_str();
  app.add_option("--workers", c.num_workers, "Number of ranks")->capture_default_str();
  app.add_option("--compute-ms", a.compute_ms, "Backward compute time per iteration, spread over layers (--split)")
      ->capture_default_str();
  app.add_option("--forward-ms", a.forward_ms, "Forward compute time per iteration (before the backward pass)")
      ->capture_default_str();
  app.add_option("--split", a.split, "Spread --compute-ms/--forward-ms over layers by 'flops' or 'params'")
      ->capture_default_str();
  app.add_option("--layer-times", a.layer_times,
                 "CSV of per-layer times in the reference dnn_benchmark's format (a header, then "
                 "'layer_index, numel, forward_pass_ns, backward_pass_ns' per layer); replaces "
                 "--compute-ms, --forward-ms and --split");
  app.add_option("--iterations", a.iterations, "Timed iterations")->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed warm-up iterations")->capture_default_str();
  app.add_option("--bucket-mib", a.bucket_mib, "DDP-style gradient buckets of this many MiB (0: one all-reduce per layer)")
      ->capture_default_str();
  app.add_option("--compute-mode", a.compute_mode,
                 "sleep (the CPU stays free, like compute on an accelerator) or spin (busy-wait)")
      ->capture_default_str();
  app.add_option("--verify", a.verify, "all (every element), layers (each layer's first and last 256) or none")
      ->capture_default_str();
  app.add_option("--timeout-ms", a.timeout_ms, "Fail a collective after this long")->capture_default_str();
  app.add_option("--json", a.json, "Rank 0 writes the results as JSON to FILE");
  app.add_flag("--print-layers", a.print_layers, "Print the model's layer table, times and buckets, then exit");
  app.add_option("--dump-layer-times", a.dump_layer_times,
                 "Write the per-layer times in --layer-times format to FILE, then exit");
  app.add_option("--corrupt-rank", a.corrupt_rank,
                 "Testing aid: this rank adds 1 to the last gradient element after every iteration (the run must FAIL)");
  AddBackendFlags(app, c);
  app.add_option("--host", c.host, "gloo: address to bind the TCP transport to (default 127.0.0.1)");
  std::vector<std::string> files;
  std::string summary_json, reference = "gloo";
  CLI::App* sum = app.add_subcommand("summarize", "Table of several runs' --json files with speedups over Gloo");
  sum->add_option("files", files, "JSON files of dnn_bench runs")->required();
  sum->add_option("--json", summary_json, "Write the summary as JSON to FILE");
  sum->add_option("--reference", reference, "Label of the run the speedups are relative to")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (sum->parsed()) return switchml::bench::Summarize(files, summary_json, reference);
  return switchml::bench::Run(a);
}
