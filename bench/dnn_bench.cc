// dnn_bench: data-parallel training imitation (spec §6.3, docs/dnn-benchmark.md). One process
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

#include "bench/backend.h"
#include "bench/backend_flags.h"
#include "bench/json_file.h"
#include "bench/dnn_models.h"
#include "bench/perf_metrics.h"
#include "testing/exact_inputs.h"

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

int Run(const DnnArgs& a) {
  auto model_or = MakeDnnModel(a.model);
  if (!model_or.ok()) return Usage(model_or.status().message());
  const DnnModel& model = *model_or;
  if (a.split != "flops" && a.split != "params") return Usage("--split must be flops or params, got '" + a.split + "'");
  if (a.compute_mode != "sleep" && a.compute_mode != "spin")
    return Usage("--compute-mode must be sleep or spin, got '" + a.compute_mode + "'");
  if (a.verify != "all" && a.verify != "layers" && a.verify != "none")
    return Usage("--verify must be all, layers or none, got '" + a.verify + "'");
  if (a.compute_ms < 0 || a.forward_ms < 0) return Usage("--compute-ms and --forward-ms must be >= 0");
  if (a.bucket_mib < 0) return Usage("--bucket-mib must be >= 0, got " + std::to_string(a.bucket_mib));
  if (a.iterations < 1) return Usage("--iterations must be >= 1");

  LayerTimes times;
  if (!a.layer_times.empty()) {
    std::ifstream f(a.layer_times);
    if (!f) return Usage("--layer-times: cannot read '" + a.layer_times + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    auto t = ParseLayerTimesCsv(ss.str(), model);
    if (!t.ok()) return Usage(t.status().message() + " (file " + a.layer_times + ")");
    times = *t;
  } else {
    const TimeSplit split = a.split == "flops" ? TimeSplit::kFlops : TimeSplit::kParams;
    times.backward = SplitTime(model, nanoseconds(int64_t(a.compute_ms * 1e6)), split);
    times.forward = SplitTime(model, nanoseconds(int64_t(a.forward_ms * 1e6)), split);
  }
  nanoseconds fwd_total{0}, bwd_total{0};
  for (size_t i = 0; i < model.layers.size(); ++i) {
    fwd_total += times.forward[i];
    bwd_total += times.backward[i];
  }
  const uint64_t cap_bytes = uint64_t(a.bucket_mib * 1024 * 1024);
  const std::vector<GradientBucket> buckets = MakeBuckets(model, cap_bytes);

  if (!a.dump_layer_times.empty()) {
    std::ofstream f(a.dump_layer_times);
    f << LayerTimesCsv(model, times);
    if (!f) return Usage("--dump-layer-times: cannot write '" + a.dump_layer_times + "'");
  }
  if (a.print_layers) {
    PrintLayers(model, times, buckets);
    return 0;
  }
  if (!a.dump_layer_times.empty()) return 0;

  BackendConfig cfg = a.backend;
  cfg.timeout = std::chrono::milliseconds(a.timeout_ms);
  cfg.rendezvous_prefix = "dnn_bench";
  const std::string label = a.label.empty() ? cfg.backend : a.label;
  auto backend_or = CreateBackend(cfg);
  if (!backend_or.ok()) {
    std::cerr << "dnn_bench (" << cfg.backend << ", rank " << cfg.rank << "): error: " << backend_or.status().ToString()
              << "\n";
    return backend_or.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  Backend& b = **backend_or;
  const uint32_t rank = b.rank(), n = b.num_workers();
  const std::string who = label + ", rank " + std::to_string(rank);
  const bool quantizes = b.quantizes_float32();
  const bool spin = a.compute_mode == "spin";
  const uint64_t total = model.TotalParams();

  if (rank == 0) {
    std::printf("# dnn_bench: model %s, backend %s (%s), %u ranks, %u warm-up + %u timed iterations\n",
                model.name.c_str(), cfg.backend.c_str(), label.c_str(), n, a.warmup, a.iterations);
    std::printf("# model: %s\n# %zu layers, %llu float32 gradients (%.1f MB); %zu all-reduces per iteration (%s)\n",
                model.description.c_str(), model.layers.size(), (unsigned long long)total, double(total) * 4e-6,
                buckets.size(), cap_bytes ? ("DDP-style buckets of >= " + FormatMib(a.bucket_mib) + " MiB").c_str()
                                          : "one per layer");
    std::printf("# compute per iteration: forward %.1f ms, backward %.1f ms (%s), simulated by %s\n", Ms(fwd_total),
                Ms(bwd_total),
                a.layer_times.empty() ? ("--compute-ms split over layers by " + a.split).c_str()
                                      : ("--layer-times " + a.layer_times).c_str(),
                a.compute_mode.c_str());
    if (cfg.backend == "switchml")
      std::printf("# switchml: %u thread(s)/worker, window %u packets, %u elements/packet, controller %s\n",
                  cfg.threads, cfg.window, cfg.elements_per_packet, cfg.controller.c_str());
    std::printf("# check: %s after every iteration; %s\n",
                a.verify == "all"      ? "every gradient element on every rank"
                : a.verify == "layers" ? "the first and last 256 elements of every layer on every rank"
                                       : "nothing (--verify none)",
                quantizes ? "within the quantization bound of each element's block" : "sums exact");
    std::printf("#%9s %12s %12s %12s %12s %8s %8s\n", "iteration", "time(ms)", "compute(ms)", "comm(ms)", "exposed(ms)",
                "#wrong", "retx(%)");
    std::fflush(stdout);
  }

  std::vector<float> grad(total), out(total), want;
  std::vector<int8_t> exps;  // SwitchML: each element's block exponent (switch-wide)
  double tol = 0;            // the largest per-element bound, for the JSON
  testing::FillFloat32(rank, 0, grad.data(), total);
  if (a.verify != "none") {
    // The exact sums, once: every sum of the inputs fits 23 bits (testing/exact_inputs.h), so
    // it is exact in float32, and comparing against a buffer keeps the per-iteration check
    // memory-bound. With SwitchML also the block exponents: one all-reduce call per bucket,
    // which the library cuts into `threads` slices of elements_per_packet blocks.
    want.resize(total);
    for (uint64_t i = 0; i < total; ++i) want[i] = float(testing::Float32ExpectedSum(n, i));
    if (quantizes) {
      exps.resize(total);
      const testing::BlockLayout layout{cfg.elements_per_packet, cfg.threads};
      for (const GradientBucket& g : buckets)
        testing::Float32BlockExponents(n, g.offset, g.num_elements, layout, exps.data() + g.offset);
      for (uint64_t i = 0; i < total; ++i) tol = std::max(tol, testing::Float32Bound(n, exps[i], double(want[i])));
    }
  }
  const int8_t* const exps_or_null = exps.empty() ? nullptr : exps.data();
  CommThread comm(b);

  std::vector<IterResult> timed;
  uint64_t total_wrong = 0;
  for (uint32_t it = 0; it < a.warmup + a.iterations; ++it) {
    std::memset(out.data(), 0x7F, total * sizeof(float));  // poison: 3.39e38, far from any sum
    if (Status s = comm.Run([](Backend& be) { return be.Barrier(); }); !s.ok())
      return Fail(who, "barrier before iteration " + std::to_string(it) + ": " + s.ToString());

    const std::optional<PacketCounters> c0 = b.Counters();  // the communication thread is idle here
    std::vector<std::future<CommThread::Done>> pending;
    pending.reserve(buckets.size());
    const Clock::time_point t0 = Clock::now();
    Clock::time_point deadline = t0;
    for (size_t l = 0; l < model.layers.size(); ++l) {  // forward: no communication
      if (times.forward[l].count() == 0) continue;
      deadline += times.forward[l];
      WaitUntil(deadline, spin);
    }
    size_t next = 0;  // buckets[next] is the next to launch
    for (size_t l = model.layers.size(); l-- > 0;) {
      if (times.backward[l].count() > 0) {
        deadline += times.backward[l];
        WaitUntil(deadline, spin);
      }
      for (; next < buckets.size() && buckets[next].first_layer == l; ++next) {
        const GradientBucket& g = buckets[next];
        const float* in = grad.data() + g.offset;
        float* o = out.data() + g.offset;
        const size_t count = g.num_elements;
        pending.push_back(comm.Submit(
            [in, o, count](Backend& be) { return be.AllReduceSum(in, o, count, DataType::kFloat32); }));
      }
    }
    const Clock::time_point t_compute = Clock::now();
    nanoseconds busy{0};
    Status first_error;
    for (auto& f : pending) {
      CommThread::Done d = f.get();
      if (!d.status.ok() && first_error.ok()) first_error = d.status;
      busy += std::chrono::duration_cast<nanoseconds>(d.end - d.start);
    }
    const Clock::time_point t_end = Clock::now();
    if (!first_error.ok()) return Fail(who, "iteration " + std::to_string(it) + ": " + first_error.ToString());
    const std::optional<PacketCounters> c1 = b.Counters();
    if (int(rank) == a.corrupt_rank) out[total - 1] = testing::Float32WrongResult(n, total - 1);  // must be caught

    testing::Verification v;
    if (a.verify == "all") {
      Check(out.data(), want.data(), exps_or_null, n, 0, total, v);
    } else if (a.verify == "layers") {
      for (size_t l = 0; l < model.layers.size(); ++l) {
        const uint64_t begin = model.Offset(l), end = begin + model.layers[l].num_params;
        Check(out.data(), want.data(), exps_or_null, n, begin, std::min(end, begin + 256), v);
        Check(out.data(), want.data(), exps_or_null, n, std::max(begin + 256, end > 256 ? end - 256 : 0), end, v);
      }
    }
    if (v.wrong > 0)
      std::fprintf(stderr, "dnn_bench (%s): iteration %u: %llu wrong gradient elements, first at %llu\n", who.c_str(),
                   it, (unsigned long long)v.wrong, (unsigned long long)v.first_wrong);

    // Gather: rank r fills block r; the SUM all-reduce hands every rank every block.
    std::vector<uint64_t> mine(size_t(kNumFields) * n, 0);
    uint64_t* my = &mine[size_t(kNumFields) * rank];
    my[kIterNs] = uint64_t(std::chrono::duration_cast<nanoseconds>(t_end - t0).count());
    my[kComputeNs] = uint64_t(std::chrono::duration_cast<nanoseconds>(t_compute - t0).count());
    my[kCommNs] = uint64_t(busy.count());
    my[kExposedNs] = uint64_t(std::chrono::duration_cast<nanoseconds>(t_end - t_compute).count());
    my[kWrong] = v.wrong;
    my[kMaxErr] = ErrorToFixed(v.max_abs_error);
    if (c0 && c1) {
      my[kSent] = c1->packets_sent - c0->packets_sent;
      my[kRetx] = c1->retransmissions - c0->retransmissions;
    }
    const std::vector<int32_t> packed = PackForSum(mine);
    std::vector<int32_t> summed(packed.size());
    if (Status s = comm.Run([&](Backend& be) {
          return be.AllReduceSum(packed.data(), summed.data(), packed.size(), DataType::kInt32);
        });
        !s.ok())
      return Fail(who, "gathering the results of iteration " + std::to_string(it) + ": " + s.ToString());
    const std::vector<uint64_t> all = UnpackSum(summed);
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
    total_wrong += r.wrong;
    if (it >= a.warmup) timed.push_back(r);
    if (rank == 0) {
      char name[32];
      std::snprintf(name, sizeof name, it < a.warmup ? "warm-up %u" : "%u/%u", it < a.warmup ? it + 1 : it - a.warmup + 1,
                    a.iterations);
      char retx[16] = "-";
      if (b.Counters()) std::snprintf(retx, sizeof retx, "%.2f", r.sent ? 100.0 * double(r.retx) / double(r.sent) : 0.0);
      std::printf(" %9s %12.1f %12.1f %12.1f %12.1f %8llu %8s\n", name, r.iter_ms, r.compute_ms, r.comm_ms, r.exposed_ms,
                  (unsigned long long)r.wrong, retx);
      std::fflush(stdout);
    }
  }

  IterResult mean;
  double min_iter = timed.front().iter_ms, max_iter = 0, max_err = 0;
  uint64_t sent = 0, retx = 0;
  for (const IterResult& r : timed) {
    mean.iter_ms += r.iter_ms / double(timed.size());
    mean.compute_ms += r.compute_ms / double(timed.size());
    mean.comm_ms += r.comm_ms / double(timed.size());
    mean.exposed_ms += r.exposed_ms / double(timed.size());
    min_iter = std::min(min_iter, r.iter_ms);
    max_iter = std::max(max_iter, r.iter_ms);
    max_err = std::max(max_err, r.max_abs_error);
    sent += r.sent;
    retx += r.retx;
  }
  const double ideal_ms = Ms(fwd_total + bwd_total);
  const bool ok = total_wrong == 0;
  if (rank == 0) {
    std::printf("# result: model %s backend %s n %u: iteration %.1f ms (min %.1f), compute %.1f ms, comm %.1f ms, "
                "exposed comm %.1f ms, ideal %.1f ms (ideal/iteration %.3f), %.2f iterations/s, %llu wrong: %s\n",
                model.name.c_str(), label.c_str(), n, mean.iter_ms, min_iter, mean.compute_ms, mean.comm_ms,
                mean.exposed_ms, ideal_ms, mean.iter_ms > 0 ? ideal_ms / mean.iter_ms : 0.0,
                mean.iter_ms > 0 ? 1e3 / mean.iter_ms : 0.0, (unsigned long long)total_wrong, ok ? "PASS" : "FAIL");
    std::fflush(stdout);
    if (!a.json.empty()) {
      nlohmann::json j;
      j["label"] = label;
      j["backend"] = cfg.backend;
      j["model"] = model.name;
      j["model_description"] = model.description;
      j["workers"] = n;
      j["layers"] = model.layers.size();
      j["params"] = total;
      j["allreduces_per_iteration"] = buckets.size();
      j["bucket_mib"] = a.bucket_mib;
      j["forward_ms"] = Ms(fwd_total);
      j["backward_ms"] = Ms(bwd_total);
      j["time_source"] = a.layer_times.empty() ? "compute-ms split by " + a.split : "layer-times " + a.layer_times;
      j["compute_mode"] = a.compute_mode;
      j["verify"] = a.verify;
      j["iterations"] = a.iterations;
      j["warmup"] = a.warmup;
      AddBackendJson(cfg, j);
      j["iteration_ms"] = mean.iter_ms;
      j["min_iteration_ms"] = min_iter;
      j["max_iteration_ms"] = max_iter;
      j["compute_ms"] = mean.compute_ms;
      j["comm_ms"] = mean.comm_ms;
      j["exposed_comm_ms"] = mean.exposed_ms;
      j["ideal_ms"] = ideal_ms;
      j["ideal_over_iteration"] = mean.iter_ms > 0 ? ideal_ms / mean.iter_ms : 0.0;
      j["per_iteration"] = nlohmann::json::array();
      for (const IterResult& r : timed)
        j["per_iteration"].push_back({{"iteration_ms", r.iter_ms}, {"compute_ms", r.compute_ms},
                                      {"comm_ms", r.comm_ms}, {"exposed_comm_ms", r.exposed_ms}});
      if (b.Counters()) {
        j["packets_sent"] = sent;
        j["retransmissions"] = retx;
        j["retx_pct"] = sent ? 100.0 * double(retx) / double(sent) : 0.0;
      } else {
        j["retx_pct"] = nullptr;
      }
      j["max_abs_error"] = max_err;
      j["tolerance"] = tol;
      j["wrong"] = total_wrong;
      j["ok"] = ok;
      std::ofstream f(a.json);
      f << j.dump(2) << "\n";
      if (!f) return Fail(who, "cannot write --json " + a.json);
    }
  }
  return ok ? 0 : 1;
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
  CLI::App app{"dnn_bench: data-parallel training imitation with real models' per-layer gradients (spec §6.3); "
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
                 "CSV of per-layer times (spec §6.3 format: header, then 'layer_index, numel, forward_pass_ns, "
                 "backward_pass_ns' per layer); replaces --compute-ms, --forward-ms and --split");
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
