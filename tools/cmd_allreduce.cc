// `switchml allreduce`: one worker of a job. Fills a deterministic input whose sum is known
// exactly, all-reduces it (optionally several times), verifies every element and reports.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "switchml/switchml.h"
#include "testing/exact_inputs.h"
#include "cli_util.h"
#include "commands.h"
#include "job_flags.h"

namespace switchml::tools {

namespace {

struct AllReduceArgs {
  uint32_t rank = 0;
  uint32_t workers = 1;
  std::string controller = "127.0.0.1:50099";
  JobFlags job{"4MiB"};
  uint32_t rpc_timeout_ms = 10000;
  double initial_rto_ms = -1;  // < 0: library default
  double min_rto_ms = -1;
  double max_rto_ms = -1;
  bool inplace = false;
  std::string json;
  std::string bind_ip;
  std::string advertise_ip;
  uint32_t job_id = 0;
  std::string job_token;
  bool no_udp_offload = false;
  uint32_t busy_poll_us = 0;
};

// FNV-1a over the output bytes: lets tests compare results of two runs (e.g. with and
// without loss) without shipping the tensors around.
uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

int Run(const AllReduceArgs& a) {
  nlohmann::json report;
  report["rank"] = a.rank;
  report["num_workers"] = a.workers;
  auto fail = [&](const std::string& msg) {
    std::cerr << "switchml allreduce (rank " << a.rank << "): error: " << msg << "\n";
    report["ok"] = false;
    report["error"] = msg;
    if (!a.json.empty()) std::ofstream(a.json) << report.dump(2) << "\n";
    return 1;
  };
  auto job = a.job.Parse();
  if (!job.ok()) return fail(job.status().message());
  const DataType type = job->type;
  const std::vector<uint64_t>& counts = job->counts;

  Options opt;
  opt.rank = a.rank;
  opt.num_workers = a.workers;
  opt.controller_address = a.controller;
  opt.num_worker_threads = a.job.threads;
  opt.window_packets = a.job.window;
  opt.elements_per_packet = a.job.elements_per_packet;
  opt.job_timeout = std::chrono::milliseconds(a.job.job_timeout_ms);
  opt.rpc_timeout = std::chrono::milliseconds(a.rpc_timeout_ms);
  auto us = [](double ms) { return std::chrono::microseconds(int64_t(ms * 1000)); };
  if (a.initial_rto_ms >= 0) opt.initial_rto = us(a.initial_rto_ms);
  if (a.min_rto_ms >= 0) opt.min_rto = us(a.min_rto_ms);
  if (a.max_rto_ms >= 0) opt.max_rto = us(a.max_rto_ms);
  opt.bind_ip = a.bind_ip;
  opt.udp_offload = !a.no_udp_offload;
  opt.busy_poll = std::chrono::microseconds(a.busy_poll_us);
  opt.job_id = a.job_id;
  opt.job_token = a.job_token;
  opt.advertise_ip = a.advertise_ip;
  auto ctx = Context::Create(opt);
  if (!ctx.ok()) return fail(ctx.status().ToString());

  report["type"] = a.job.type;
  report["results"] = nlohmann::json::array();
  bool all_ok = true;
  for (uint64_t count : counts) {
    std::vector<uint8_t> in(count * 4), out_storage(a.inplace ? 0 : count * 4);
    void* out = a.inplace ? in.data() : out_storage.data();
    auto fill = [&] {
      if (type == DataType::kFloat32) testing::FillFloat32(a.rank, 0, reinterpret_cast<float*>(in.data()), count);
      else testing::FillInt32(a.rank, 0, reinterpret_cast<int32_t*>(in.data()), count);
    };
    fill();
    const Stats before = (*ctx)->GetStats();
    std::vector<double> times;
    testing::Verification worst;
    uint64_t checksum = 0;
    for (uint32_t it = 0; it < a.job.warmup + a.job.iters; ++it) {
      if (a.inplace && it > 0) fill();
      // Barrier (a one-element all-reduce completes only after every worker contributed): a
      // worker still verifying the previous iteration must not steal CPU from the others'
      // timed iteration on a shared host, nor count as their time.
      int32_t one = 1, ready = 0;
      if (Status s = (*ctx)->AllReduce(&one, &ready, 1, DataType::kInt32); !s.ok() || ready != int32_t(a.workers))
        return fail("barrier before iteration " + std::to_string(it) + ": " +
                    (s.ok() ? "sum " + std::to_string(ready) + ", want " + std::to_string(a.workers) : s.ToString()));
      const auto t0 = std::chrono::steady_clock::now();
      Status s = (*ctx)->AllReduce(in.data(), out, count, type);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!s.ok()) return fail(std::to_string(count) + " elements, iteration " + std::to_string(it) + ": " + s.ToString());
      testing::Verification v =
          type == DataType::kFloat32
              ? testing::VerifyFloat32(static_cast<const float*>(out), count, a.workers, 0,
                                       testing::BlockLayout{a.job.elements_per_packet, a.job.threads})
              : testing::VerifyInt32(static_cast<const int32_t*>(out), count, a.workers);
      if (v.wrong > worst.wrong || (worst.wrong == 0 && v.max_abs_error > worst.max_abs_error)) worst = v;
      worst.tolerance = v.tolerance;
      if (it >= a.job.warmup) times.push_back(secs);
      checksum = Fnv1a(static_cast<const uint8_t*>(out), count * 4);
    }
    const Stats st = (*ctx)->GetStats();
    const uint64_t sent = st.packets_sent - before.packets_sent, retx = st.retransmissions - before.retransmissions;
    double best = times[0], total = 0;
    for (double t : times) { best = std::min(best, t); total += t; }
    nlohmann::json r;
    r["num_elements"] = count;
    r["bytes"] = count * 4;
    r["times_s"] = times;
    r["wrong"] = worst.wrong;
    r["first_wrong"] = worst.first_wrong;
    r["max_abs_error"] = worst.max_abs_error;
    r["tolerance"] = worst.tolerance;
    r["checksum"] = checksum;
    r["packets_sent"] = sent;
    r["retransmissions"] = retx;
    report["results"].push_back(r);
    const double retx_pct = sent ? 100.0 * double(retx) / double(sent) : 0.0;
    std::printf("rank %u/%u: %llu %s elements, best %.3f ms, mean %.3f ms over %zu iteration(s), %llu wrong, retx %.2f%%\n",
                a.rank, a.workers, (unsigned long long)count, a.job.type.c_str(), best * 1e3,
                total / double(times.size()) * 1e3, times.size(), (unsigned long long)worst.wrong, retx_pct);
    std::fflush(stdout);
    if (worst.wrong) {
      all_ok = false;
      std::fprintf(stderr, "rank %u: %llu wrong elements of %llu, first at index %llu (max abs error %g, largest per-element "
                   "bound %g)\n",
                   a.rank, (unsigned long long)worst.wrong, (unsigned long long)count,
                   (unsigned long long)worst.first_wrong, worst.max_abs_error, worst.tolerance);
    }
  }
  const Stats st = (*ctx)->GetStats();
  report["ok"] = all_ok;
  report["error"] = all_ok ? "" : "wrong elements";
  report["stats"] = {{"packets_sent", st.packets_sent},       {"retransmissions", st.retransmissions},
                     {"results_received", st.results_received}, {"duplicates", st.duplicates},
                     {"malformed", st.malformed},               {"timeouts", st.timeouts},
                     {"send_stalls", st.send_stalls}};
  if (!a.json.empty()) std::ofstream(a.json) << report.dump(2) << "\n";
  return all_ok ? 0 : 1;
}

}  // namespace

Runner AddAllReduceCommand(CLI::App& app) {
  auto a = std::make_shared<AllReduceArgs>();
  app.add_option("--rank", a->rank, "This worker's rank in [0, workers)")->required();
  app.add_option("--workers", a->workers, "Number of workers in the job (1..256)")->required();
  app.add_option("--controller", a->controller, "Controller (session service) address host:port")
      ->capture_default_str();
  a->job.Register(app);
  app.add_option("--rpc-timeout-ms", a->rpc_timeout_ms, "Deadline of each controller call")->capture_default_str();
  app.add_option("--initial-rto-ms", a->initial_rto_ms, "Initial retransmission timeout (default 80)");
  app.add_option("--min-rto-ms", a->min_rto_ms, "Lower bound of the adaptive retransmission timeout (default 40)");
  app.add_option("--max-rto-ms", a->max_rto_ms, "Upper bound of the retransmission timeout (default 320)");
  app.add_flag("--inplace", a->inplace, "All-reduce in place (input buffer = output buffer)");
  app.add_option("--json", a->json, "Write this rank's result as JSON to FILE");
  app.add_option("--job-id", a->job_id, "Join this job (from `switchml jobs create`); 0 = the reference session");
  app.add_option("--job-token", a->job_token, "The job's token (from `switchml jobs create`)");
  app.add_option("--bind-ip", a->bind_ip, "Local IPv4 for the data sockets (default: any)");
  app.add_flag("--no-udp-offload", a->no_udp_offload,
               "Send and receive one datagram per message (no UDP GSO/GRO), for comparison");
  app.add_option("--busy-poll-us", a->busy_poll_us,
                 "Poll the data socket this long before sleeping when waiting for results (0 = off, max 1000000)")
      ->capture_default_str();
  app.add_option("--advertise-ip", a->advertise_ip, "IPv4 to register with the switch (default: route to controller)");
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
