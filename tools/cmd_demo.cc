// `switchml demo`: the main job. Starts a software switch and N worker processes on this
// machine (loopback UDP), all-reduces a tensor whose sum is known exactly, verifies every
// element on every worker, prints an nccl-tests style table and a one-line verdict.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "testing/exact_inputs.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/job_flags.h"

namespace switchml::tools {

namespace {

struct DemoArgs {
  uint32_t workers = 4;
  JobFlags job{"64MiB"};
  double ingress_drop = 0;
  double egress_drop = 0;
  uint64_t drop_seed = 1;
  uint32_t timeout_s = 300;
  std::vector<std::string> worker_args;
  std::string json;
  bool keep_logs = false;
  bool no_udp_offload = false;
};

int Run(const DemoArgs& a) {
  auto job = a.job.Parse();
  if (!job.ok()) { std::cerr << "switchml demo: error: " << job.status().message() << "\n"; return 2; }
  if (a.workers < 1 || a.workers > 64) {
    std::cerr << "switchml demo: error: --workers must be in [1, 64] on one machine, got " << a.workers << "\n";
    return 2;
  }
  const std::vector<uint64_t>& counts = job->counts;
  const uint64_t count = counts[0];
  char tmpl[] = "/tmp/switchml-demo.XXXXXX";
  if (!mkdtemp(tmpl)) { std::perror("switchml demo: mkdtemp"); return 1; }
  const std::string dir = tmpl;
  const std::string exe = SelfExe();

  if (counts.size() == 1)
    std::printf("switchml demo: %u workers, %s %s (%llu elements), %u thread(s)/worker, window %u, %u elements/packet\n",
                a.workers, FormatBytes(count * 4).c_str(), a.job.type.c_str(), (unsigned long long)count, a.job.threads,
                a.job.window, a.job.elements_per_packet);
  else
    std::printf("switchml demo: %u workers, %zu %s tensors as consecutive jobs, %u thread(s)/worker, window %u, "
                "%u elements/packet\n", a.workers, counts.size(), a.job.type.c_str(), a.job.threads, a.job.window,
                a.job.elements_per_packet);
  if (a.ingress_drop > 0 || a.egress_drop > 0)
    std::printf("switchml demo: switch drop simulator: ingress %.4f, egress %.4f (seed %llu)\n", a.ingress_drop,
                a.egress_drop, (unsigned long long)a.drop_seed);
  std::fflush(stdout);

  // 1. The switch, on free ports it picks itself; it reports them in a ready file.
  const std::string ready = dir + "/switch.ready";
  std::vector<std::string> sw_argv = {exe, "switch", "--bind", "127.0.0.1", "--port", "0",
                                      "--controller-port", "0", "--ready-file", ready, "--counters-json", dir + "/switch-counters.json",
                                      "--ingress-drop", std::to_string(a.ingress_drop),
                                      "--egress-drop", std::to_string(a.egress_drop),
                                      "--drop-seed", std::to_string(a.drop_seed)};
  if (a.no_udp_offload) sw_argv.push_back("--no-udp-offload");
  auto sw = Spawn("switch", sw_argv, dir + "/switch.log");
  if (!sw.ok()) { std::cerr << "switchml demo: error: " << sw.status().message() << "\n"; return 1; }
  const auto t_start = std::chrono::steady_clock::now();
  nlohmann::json ready_info;
  while (true) {
    std::ifstream f(ready);
    if (f) {
      try { f >> ready_info; break; } catch (...) { /* partially written: retry */ }
    }
    if (!StillRunning(*sw)) {
      std::cerr << "switchml demo: error: the switch exited with code " << sw->exit_code << ":\n" << Tail(sw->log_path, 20);
      return 1;
    }
    if (std::chrono::steady_clock::now() - t_start > std::chrono::seconds(20)) {
      Terminate(*sw, std::chrono::milliseconds(500));
      std::cerr << "switchml demo: error: the switch did not become ready within 20 s:\n" << Tail(sw->log_path, 20);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const int udp_port = ready_info.value("udp_port", 0), ctl_port = ready_info.value("controller_port", 0);
  std::printf("switchml demo: switch up (data udp 127.0.0.1:%d, controller 127.0.0.1:%d); starting %u workers\n",
              udp_port, ctl_port, a.workers);
  std::fflush(stdout);

  // 2. The workers.
  std::vector<Child> workers;
  for (uint32_t r = 0; r < a.workers; ++r) {
    std::vector<std::string> argv = {exe, "allreduce", "--rank", std::to_string(r), "--workers",
                                     std::to_string(a.workers), "--controller", "127.0.0.1:" + std::to_string(ctl_port), "--json",
                                     dir + "/rank-" + std::to_string(r) + ".json"};
    const auto job_args = a.job.ToArgs(counts);
    argv.insert(argv.end(), job_args.begin(), job_args.end());
    argv.insert(argv.end(), a.worker_args.begin(), a.worker_args.end());
    if (a.no_udp_offload) argv.push_back("--no-udp-offload");
    auto c = Spawn("rank " + std::to_string(r), argv, dir + "/rank-" + std::to_string(r) + ".log");
    if (!c.ok()) {
      std::cerr << "switchml demo: error: " << c.status().message() << "\n";
      for (auto& w : workers) Terminate(w, std::chrono::milliseconds(200));
      Terminate(*sw, std::chrono::milliseconds(500));
      return 1;
    }
    workers.push_back(*c);
  }
  std::vector<Child*> ptrs;
  for (auto& w : workers) ptrs.push_back(&w);
  WaitAll(ptrs, std::chrono::steady_clock::now() + std::chrono::seconds(a.timeout_s));
  Terminate(*sw, std::chrono::seconds(5));

  // 3. Collect: per tensor size, the time of an iteration is the slowest rank's.
  bool ok = true;
  std::vector<std::string> errors;
  nlohmann::json ranks = nlohmann::json::array();
  struct Row {
    std::vector<double> iter_max;
    uint64_t wrong = 0, sent = 0, retx = 0;
    std::set<uint64_t> checksums;
    int reported = 0;
  };
  std::vector<Row> rows(counts.size());
  double max_tolerance = 0;  // float32: the largest per-element bound any worker allowed
  for (auto& r : rows) r.iter_max.assign(a.job.iters, 0.0);
  for (uint32_t r = 0; r < a.workers; ++r) {
    Child& c = workers[r];
    nlohmann::json j;
    std::ifstream f(dir + "/rank-" + std::to_string(r) + ".json");
    bool parsed = false;
    if (f) { try { f >> j; parsed = true; } catch (...) {} }
    if (c.killed) errors.push_back("rank " + std::to_string(r) + ": killed after the " + std::to_string(a.timeout_s) + " s deadline");
    else if (c.exit_code != 0 && (!parsed || j.value("error", "").empty()))
      errors.push_back("rank " + std::to_string(r) + ": exited with code " + std::to_string(c.exit_code));
    if (!parsed) { ok = false; if (!c.killed && c.exit_code == 0) errors.push_back("rank " + std::to_string(r) + ": no result file"); continue; }
    ranks.push_back(j);
    if (!j.value("ok", false)) {
      ok = false;
      if (!j.value("error", "").empty()) errors.push_back("rank " + std::to_string(r) + ": " + j.value("error", ""));
    }
    if (!j.contains("results")) continue;
    for (size_t k = 0; k < j["results"].size() && k < rows.size(); ++k) {
      const auto& res = j["results"][k];
      Row& row = rows[k];
      ++row.reported;
      row.wrong += res.value("wrong", uint64_t{0});
      max_tolerance = std::max(max_tolerance, res.value("tolerance", 0.0));
      row.sent += res.value("packets_sent", uint64_t{0});
      row.retx += res.value("retransmissions", uint64_t{0});
      row.checksums.insert(res.value("checksum", uint64_t{0}));
      auto t = res["times_s"].get<std::vector<double>>();
      for (size_t i = 0; i < t.size() && i < row.iter_max.size(); ++i) row.iter_max[i] = std::max(row.iter_max[i], t[i]);
    }
  }
  const double n = a.workers;
  std::printf("\n%12s %12s %8s %10s %11s %11s %7s %7s %12s\n", "size", "count", "type", "time", "algbw", "busbw",
              "#wrong", "retx", "agg elems/s");
  std::printf("%12s %12s %8s %10s %11s %11s %7s %7s %12s\n", "(B)", "(elements)", "", "(ms)", "(GB/s)", "(GB/s)", "", "(%)",
              "(Melem/s)");
  nlohmann::json rows_json = nlohmann::json::array();
  uint64_t total_wrong = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    Row& row = rows[k];
    const uint64_t cnt = counts[k], size_bytes = cnt * 4;
    if (row.reported != int(a.workers)) {
      ok = false;
      std::printf("%12llu %12llu %8s %10s\n", (unsigned long long)size_bytes, (unsigned long long)cnt, a.job.type.c_str(),
                  "(no result)");
      continue;
    }
    if (row.checksums.size() != 1) {
      ok = false;
      errors.push_back(std::to_string(cnt) + " elements: workers hold different results");
    }
    double best = row.iter_max[0], mean = 0;
    for (double t : row.iter_max) { best = std::min(best, t); mean += t; }
    mean /= double(row.iter_max.size());
    const double algbw = best > 0 ? double(size_bytes) / best / 1e9 : 0;
    const double busbw = algbw * (n > 1 ? 2 * (n - 1) / n : 1.0);
    const double retx_pct = row.sent ? 100.0 * double(row.retx) / double(row.sent) : 0;
    const double elems = best > 0 ? double(cnt) / best : 0;
    total_wrong += row.wrong;
    std::printf("%12llu %12llu %8s %10.2f %11.4f %11.4f %7llu %7.3f %12.2f\n", (unsigned long long)size_bytes,
                (unsigned long long)cnt, a.job.type.c_str(), best * 1e3, algbw, busbw, (unsigned long long)row.wrong,
                retx_pct, elems / 1e6);
    rows_json.push_back({{"bytes", size_bytes}, {"count", cnt}, {"time_s", best}, {"mean_time_s", mean},
                         {"algbw_GBps", algbw}, {"busbw_GBps", busbw}, {"wrong", row.wrong}, {"retx_pct", retx_pct},
                         {"agg_elements_per_s", elems}, {"checksum", *row.checksums.begin()}});
  }
  std::printf("\n");
  if (!errors.empty() || total_wrong) ok = false;
  for (auto& e : errors) std::printf("  %s\n", e.c_str());
  if (ok) {
    std::printf("verdict: PASS: all %u workers got every element right in %zu tensor(s) (%s)\n", a.workers,
                counts.size(),
                a.job.type == "int32" ? "int32: exact sums"
                                  : ("float32: each within its block's quantization bound, largest " +
                                     std::to_string(max_tolerance))
                                        .c_str());
  } else {
    std::printf("verdict: FAIL: %llu wrong elements, %zu error(s); logs kept in %s\n", (unsigned long long)total_wrong,
                errors.size(), dir.c_str());
    for (uint32_t r = 0; r < a.workers; ++r) {
      if (workers[r].exit_code != 0) std::printf("--- rank %u log:\n%s", r, Tail(workers[r].log_path, 10).c_str());
    }
    std::printf("--- switch log:\n%s", Tail(sw->log_path, 30).c_str());
  }
  if (!a.json.empty()) {
    nlohmann::json out = {{"workers", a.workers}, {"type", a.job.type}, {"threads", a.job.threads}, {"window", a.job.window},
                          {"elements_per_packet", a.job.elements_per_packet}, {"iters", a.job.iters}, {"rows", rows_json},
                          {"wrong", total_wrong}, {"ok", ok}, {"errors", errors}, {"ranks", ranks},
                          {"switch_counters", nlohmann::json::object()}};
    std::ifstream cf(dir + "/switch-counters.json");
    if (cf) { try { cf >> out["switch_counters"]; } catch (...) {} }
    std::ofstream(a.json) << out.dump(2) << "\n";
  }
  if (ok && !a.keep_logs) std::filesystem::remove_all(dir);
  else if (ok) std::printf("logs: %s\n", dir.c_str());
  return ok ? 0 : 1;
}

}  // namespace

Runner AddDemoCommand(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  app.add_option("--workers", a->workers, "Worker processes to start")->capture_default_str();
  a->job.Register(app);
  app.add_option("--ingress-drop", a->ingress_drop, "Switch drop simulator: probability to drop a request")
      ->capture_default_str();
  app.add_option("--egress-drop", a->egress_drop, "Switch drop simulator: probability to drop a packet's responses")
      ->capture_default_str();
  app.add_option("--drop-seed", a->drop_seed, "Seed of the drop simulator")->capture_default_str();
  app.add_option("--timeout-s", a->timeout_s, "Kill workers still running after this many seconds")->capture_default_str();
  app.add_option("--json", a->json, "Write the results as JSON to FILE");
  app.add_option("--worker-arg", a->worker_args,
                 "Extra flag passed to every `switchml allreduce` worker (repeatable), e.g. --worker-arg=--min-rto-ms=10");
  app.add_flag("--keep-logs", a->keep_logs, "Keep the switch and worker logs (kept anyway on failure)");
  app.add_flag("--no-udp-offload", a->no_udp_offload,
               "Switch and workers send and receive one datagram per message (no UDP GSO/GRO)");
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
