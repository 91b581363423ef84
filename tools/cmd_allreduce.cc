// `switchml allreduce`: one worker of a job. Fills a deterministic input whose sum is known
// exactly, all-reduces it (optionally several times), verifies every element and reports.
// --start-file and --hold-file let a test act at a known point of the job (before it streams,
// while it streams) instead of racing it: the ranks wait, or keep all-reducing, until a file the
// test creates exists.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
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
  std::string start_file;
  std::string hold_file;
  double file_timeout_s = 120;
  ClientTlsFlags tls;
};

using Clock = std::chrono::steady_clock;

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// Waits until PATH exists, polling every 20 ms; false once DEADLINE passes without it.
bool WaitForFile(const std::string& path, Clock::time_point deadline) {
  while (!FileExists(path)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

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
  if (!(a.file_timeout_s > 0) || a.file_timeout_s > 86400)
    return fail("--file-timeout-s must be in (0, 86400], got " + Secs(a.file_timeout_s));
  const DataType type = job->type;
  const std::vector<uint64_t>& counts = job->counts;

  Options opt;
  opt.rank = a.rank;
  opt.num_workers = a.workers;
  opt.controller_address = a.controller;
  opt.num_worker_threads = a.job.threads;
  opt.window_packets = a.job.window;
  opt.elements_per_packet = a.job.elements_per_packet;
  opt.call_timeout = std::chrono::milliseconds(a.job.EffectiveCallTimeoutMs());
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
  auto tls = a.tls.Resolve();
  if (!tls.ok()) return fail(tls.status().ToString());
  opt.tls = *tls;
  auto ctx = Context::Create(opt);
  if (!ctx.ok()) return fail(ctx.status().ToString());
  // Registered (every rank has: Create returns after the job's barrier); nothing sent yet.
  if (!a.start_file.empty()) {
    std::printf("rank %u/%u: registered, waiting for --start-file %s\n", a.rank, a.workers, a.start_file.c_str());
    std::fflush(stdout);
    if (!WaitForFile(a.start_file, Clock::now() + Seconds(a.file_timeout_s)))
      return fail("--start-file " + a.start_file + " did not appear within --file-timeout-s " +
                  Secs(a.file_timeout_s) + " s");
  }

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
    const uint32_t planned = a.job.warmup + a.job.iters;
    const bool hold = !a.hold_file.empty();
    Clock::time_point hold_deadline{};
    uint32_t it = 0;
    for (;; ++it) {
      const bool holding = it >= planned;
      if (holding && !hold) break;
      const bool released = hold && FileExists(a.hold_file);
      if (holding && it == planned) {
        hold_deadline = Clock::now() + Seconds(a.file_timeout_s);
        if (!released) {
          std::printf("rank %u/%u: holding: repeating the %llu-element all-reduce until --hold-file %s exists\n",
                      a.rank, a.workers, (unsigned long long)count, a.hold_file.c_str());
          std::fflush(stdout);
        }
      }
      // Barrier (an all-reduce completes only after every worker contributed): a worker still
      // verifying the previous iteration must not steal CPU from the others' timed iteration on
      // a shared host, nor count as their time. With --hold-file it also decides, the same way
      // on every rank, whether to repeat past the planned iterations: each rank votes
      // {1, it sees the file, its hold deadline passed}.
      int32_t vote[3] = {1, released ? 1 : 0, holding && !released && Clock::now() >= hold_deadline ? 1 : 0};
      int32_t sum[3] = {0, 0, 0};
      if (Status s = (*ctx)->AllReduce(vote, sum, hold ? 3 : 1, DataType::kInt32); !s.ok() || sum[0] != int32_t(a.workers))
        return fail("barrier before iteration " + std::to_string(it) + ": " +
                    (s.ok() ? "sum " + std::to_string(sum[0]) + ", want " + std::to_string(a.workers) : s.ToString()));
      if (holding && sum[1] > 0) break;
      if (holding && sum[2] > 0)
        return fail("--hold-file " + a.hold_file + " did not appear within --file-timeout-s " +
                    Secs(a.file_timeout_s) + " s (deadline passed on " + std::to_string(sum[2]) + " of " +
                    std::to_string(a.workers) + " ranks) after " + std::to_string(it) + " iterations");
      if (a.inplace && it > 0) fill();
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
    r["iterations"] = it;  // warm-up, timed and held (--hold-file)
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
  a->tls.Register(app);
  app.add_option("--advertise-ip", a->advertise_ip, "IPv4 to register with the switch (default: route to controller)");
  app.add_option("--start-file", a->start_file,
                 "After registering, wait until this file exists before the first all-reduce (for tests: act "
                 "while every rank is registered and nothing streams)");
  app.add_option("--hold-file", a->hold_file,
                 "After the iterations of each tensor size, keep repeating that all-reduce (verified, timed) until "
                 "this file exists on some rank (for tests: act while the job is known to stream); give it to every rank "
                 "or to none");
  app.add_option("--file-timeout-s", a->file_timeout_s,
                 "How long --start-file and --hold-file may take to appear before the worker fails")
      ->capture_default_str();
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
