// `switchml demo`: the main job. Starts a software switch and N worker processes on this
// machine (loopback UDP), all-reduces a tensor whose sum is known exactly, verifies every
// element on every worker, prints an nccl-tests style table and a one-line verdict.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "testing/exact_inputs.h"
#include "cli_util.h"
#include "commands.h"
#include "job_flags.h"

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

// The table's columns: size, count, type, time, algbw, busbw, #wrong, retx, agg elems/s.
constexpr std::array<int, 9> kColumns = {12, 12, 8, 10, 11, 11, 7, 7, 12};

// Per tensor size, what the workers reported; an iteration's time is the slowest rank's.
struct SizeResult {
  std::vector<double> iter_max;
  uint64_t wrong = 0, sent = 0, retx = 0;
  std::set<uint64_t> checksums;
  int reported = 0;
};

// "HEAD:" and the last `lines` lines of a log as one error message.
std::string WithLogTail(const std::string& head, const std::string& log, int lines) {
  std::string m = head + ":\n" + Tail(log, lines);
  m.pop_back();  // the last line's newline; the error printer adds one
  return m;
}

int PrintError(const Status& s) {
  std::cerr << "switchml demo: error: " << s.message() << "\n";
  return 1;
}

// The steps of a demo job: the switch and worker processes, then what their result files say.
class Demo {
 public:
  Demo(const DemoArgs& a, const std::vector<uint64_t>& counts, std::string dir)
      : a_(a), counts_(counts), dir_(std::move(dir)), exe_(SelfExe()), rows_(counts.size()) {
    for (SizeResult& r : rows_) r.iter_max.assign(a.job.iters, 0.0);
  }

  void PrintPlan() const {
    const JobFlags& j = a_.job;
    if (counts_.size() == 1)
      std::printf("switchml demo: %u workers, %s %s (%llu elements), %u thread(s)/worker, window %u, %u elements/packet\n",
                  a_.workers, FormatBytes(counts_[0] * 4).c_str(), j.type.c_str(), (unsigned long long)counts_[0],
                  j.threads, j.window, j.elements_per_packet);
    else
      std::printf("switchml demo: %u workers, %zu %s tensors as consecutive jobs, %u thread(s)/worker, window %u, "
                  "%u elements/packet\n", a_.workers, counts_.size(), j.type.c_str(), j.threads, j.window,
                  j.elements_per_packet);
    if (a_.ingress_drop > 0 || a_.egress_drop > 0)
      std::printf("switchml demo: switch drop simulator: ingress %.4f, egress %.4f (seed %llu)\n", a_.ingress_drop,
                  a_.egress_drop, (unsigned long long)a_.drop_seed);
    std::fflush(stdout);
  }

  // The switch, on free ports it picks itself; it reports them in a ready file.
  Status StartSwitch() {
    const std::string ready = dir_ + "/switch.ready";
    std::vector<std::string> argv = {exe_, "switch", "--bind", "127.0.0.1", "--port", "0",
                                     "--controller-port", "0", "--ready-file", ready,
                                     "--counters-json", dir_ + "/switch-counters.json",
                                     "--ingress-drop", std::to_string(a_.ingress_drop),
                                     "--egress-drop", std::to_string(a_.egress_drop),
                                     "--drop-seed", std::to_string(a_.drop_seed)};
    if (a_.no_udp_offload) argv.push_back("--no-udp-offload");
    auto sw = Spawn("switch", argv, dir_ + "/switch.log");
    if (!sw.ok()) return sw.status();
    sw_ = *sw;
    const auto t_start = std::chrono::steady_clock::now();
    nlohmann::json ready_info;
    while (true) {
      std::ifstream f(ready);
      if (f) {
        try { f >> ready_info; break; } catch (...) { /* partially written: retry */ }
      }
      if (!StillRunning(sw_))
        return UnavailableError(WithLogTail("the switch exited with code " + std::to_string(sw_.exit_code),
                                            sw_.log_path, 20));
      if (std::chrono::steady_clock::now() - t_start > std::chrono::seconds(20)) {
        Terminate(sw_, std::chrono::milliseconds(500));
        return DeadlineExceededError(WithLogTail("the switch did not become ready within 20 s", sw_.log_path, 20));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int udp_port = ready_info.value("udp_port", 0);
    ctl_port_ = ready_info.value("controller_port", 0);
    std::printf("switchml demo: switch up (data udp 127.0.0.1:%d, controller 127.0.0.1:%d); starting %u workers\n",
                udp_port, ctl_port_, a_.workers);
    std::fflush(stdout);
    return Status();
  }

  // One `switchml allreduce` process per rank; on an error the ones started keep running (StopAll).
  Status StartWorkers() {
    for (uint32_t r = 0; r < a_.workers; ++r) {
      std::vector<std::string> argv = {exe_, "allreduce", "--rank", std::to_string(r), "--workers",
                                       std::to_string(a_.workers), "--controller",
                                       "127.0.0.1:" + std::to_string(ctl_port_), "--json", RankFile(r, ".json")};
      const auto job_args = a_.job.ToArgs(counts_);
      argv.insert(argv.end(), job_args.begin(), job_args.end());
      argv.insert(argv.end(), a_.worker_args.begin(), a_.worker_args.end());
      if (a_.no_udp_offload) argv.push_back("--no-udp-offload");
      auto c = Spawn("rank " + std::to_string(r), argv, RankFile(r, ".log"));
      if (!c.ok()) return c.status();
      workers_.push_back(*c);
    }
    return Status();
  }

  void StopAll() {
    for (auto& w : workers_) Terminate(w, std::chrono::milliseconds(200));
    Terminate(sw_, std::chrono::milliseconds(500));
  }

  // Until every worker exited or --timeout-s passed (then kills them); then stops the switch.
  void WaitForWorkers() {
    std::vector<Child*> ptrs;
    for (auto& w : workers_) ptrs.push_back(&w);
    WaitAll(ptrs, std::chrono::steady_clock::now() + std::chrono::seconds(a_.timeout_s));
    Terminate(sw_, std::chrono::seconds(5));
  }

  void CollectResults() {
    for (uint32_t r = 0; r < a_.workers; ++r) ReadRankResult(r);
  }

  // The nccl-tests style table, one row per tensor size.
  void PrintTable() {
    std::printf("\n%s\n", TableLine(kColumns, {"size", "count", "type", "time", "algbw", "busbw", "#wrong", "retx",
                                               "agg elems/s"}).c_str());
    std::printf("%s\n", TableLine(kColumns, {"(B)", "(elements)", "", "(ms)", "(GB/s)", "(GB/s)", "", "(%)",
                                             "(Melem/s)"}).c_str());
    for (size_t k = 0; k < counts_.size(); ++k) PrintRow(k);
    std::printf("\n");
  }

  // Settles the verdict, prints the errors and the verdict line (on FAIL also the logs' tails).
  void PrintVerdict() {
    if (!errors_.empty() || total_wrong_) ok_ = false;
    for (auto& e : errors_) std::printf("  %s\n", e.c_str());
    if (ok_) {
      std::printf("verdict: PASS: all %u workers got every element right in %zu tensor(s) (%s)\n", a_.workers,
                  counts_.size(),
                  a_.job.type == "int32" ? "int32: exact sums"
                                         : ("float32: each within its block's quantization bound, largest " +
                                            std::to_string(max_tolerance_))
                                               .c_str());
      return;
    }
    std::printf("verdict: FAIL: %llu wrong elements, %zu error(s); logs kept in %s\n", (unsigned long long)total_wrong_,
                errors_.size(), dir_.c_str());
    for (uint32_t r = 0; r < a_.workers; ++r) {
      if (workers_[r].exit_code != 0) std::printf("--- rank %u log:\n%s", r, Tail(workers_[r].log_path, 10).c_str());
    }
    std::printf("--- switch log:\n%s", Tail(sw_.log_path, 30).c_str());
  }

  void WriteJson() const {
    const JobFlags& j = a_.job;
    nlohmann::json out = {{"workers", a_.workers}, {"type", j.type}, {"threads", j.threads}, {"window", j.window},
                          {"elements_per_packet", j.elements_per_packet}, {"iters", j.iters}, {"rows", rows_json_},
                          {"wrong", total_wrong_}, {"ok", ok_}, {"errors", errors_}, {"ranks", ranks_},
                          {"switch_counters", nlohmann::json::object()}};
    std::ifstream cf(dir_ + "/switch-counters.json");
    if (cf) { try { cf >> out["switch_counters"]; } catch (...) {} }
    std::ofstream(a_.json) << out.dump(2) << "\n";
  }

  // Removes the logs of a passed job unless --keep-logs; the exit code.
  int Finish() const {
    if (ok_ && !a_.keep_logs) std::filesystem::remove_all(dir_);
    else if (ok_) std::printf("logs: %s\n", dir_.c_str());
    return ok_ ? 0 : 1;
  }

 private:
  std::string RankFile(uint32_t r, const std::string& ext) const {
    return dir_ + "/rank-" + std::to_string(r) + ext;
  }

  // Rank r's exit and its result file (`switchml allreduce --json`).
  void ReadRankResult(uint32_t r) {
    const Child& c = workers_[r];
    const std::string who = "rank " + std::to_string(r);
    nlohmann::json j;
    std::ifstream f(RankFile(r, ".json"));
    bool parsed = false;
    if (f) { try { f >> j; parsed = true; } catch (...) {} }
    if (c.killed) errors_.push_back(who + ": killed after the " + std::to_string(a_.timeout_s) + " s deadline");
    else if (c.exit_code != 0 && (!parsed || j.value("error", "").empty()))
      errors_.push_back(who + ": exited with code " + std::to_string(c.exit_code));
    if (!parsed) {
      ok_ = false;
      if (!c.killed && c.exit_code == 0) errors_.push_back(who + ": no result file");
      return;
    }
    ranks_.push_back(j);
    if (!j.value("ok", false)) {
      ok_ = false;
      if (!j.value("error", "").empty()) errors_.push_back(who + ": " + j.value("error", ""));
    }
    if (j.contains("results")) AddSizeResults(j["results"]);
  }

  void AddSizeResults(const nlohmann::json& results) {
    for (size_t k = 0; k < results.size() && k < rows_.size(); ++k) {
      const auto& res = results[k];
      SizeResult& row = rows_[k];
      ++row.reported;
      row.wrong += res.value("wrong", uint64_t{0});
      max_tolerance_ = std::max(max_tolerance_, res.value("tolerance", 0.0));
      row.sent += res.value("packets_sent", uint64_t{0});
      row.retx += res.value("retransmissions", uint64_t{0});
      row.checksums.insert(res.value("checksum", uint64_t{0}));
      auto t = res["times_s"].get<std::vector<double>>();
      for (size_t i = 0; i < t.size() && i < row.iter_max.size(); ++i) row.iter_max[i] = std::max(row.iter_max[i], t[i]);
    }
  }

  // Row k of the table (and of the JSON); the time is the best iteration's.
  void PrintRow(size_t k) {
    const SizeResult& row = rows_[k];
    const uint64_t cnt = counts_[k], size_bytes = cnt * 4;
    const std::string bytes_s = StrPrintf("%llu", (unsigned long long)size_bytes);
    const std::string cnt_s = StrPrintf("%llu", (unsigned long long)cnt);
    if (row.reported != int(a_.workers)) {
      ok_ = false;
      std::printf("%s\n", TableLine(kColumns, {bytes_s, cnt_s, a_.job.type, "(no result)"}).c_str());
      return;
    }
    if (row.checksums.size() != 1) {
      ok_ = false;
      errors_.push_back(std::to_string(cnt) + " elements: workers hold different results");
    }
    double best = row.iter_max[0], mean = 0;
    for (double t : row.iter_max) { best = std::min(best, t); mean += t; }
    mean /= double(row.iter_max.size());
    const double n = a_.workers;
    const double algbw = best > 0 ? double(size_bytes) / best / 1e9 : 0;
    const double busbw = algbw * (n > 1 ? 2 * (n - 1) / n : 1.0);
    const double retx_pct = row.sent ? 100.0 * double(row.retx) / double(row.sent) : 0;
    const double elems = best > 0 ? double(cnt) / best : 0;
    total_wrong_ += row.wrong;
    std::printf("%s\n", TableLine(kColumns, {bytes_s, cnt_s, a_.job.type, StrPrintf("%.2f", best * 1e3),
                                             StrPrintf("%.4f", algbw), StrPrintf("%.4f", busbw),
                                             StrPrintf("%llu", (unsigned long long)row.wrong),
                                             StrPrintf("%.3f", retx_pct), StrPrintf("%.2f", elems / 1e6)}).c_str());
    rows_json_.push_back({{"bytes", size_bytes}, {"count", cnt}, {"time_s", best}, {"mean_time_s", mean},
                          {"algbw_GBps", algbw}, {"busbw_GBps", busbw}, {"wrong", row.wrong}, {"retx_pct", retx_pct},
                          {"agg_elements_per_s", elems}, {"checksum", *row.checksums.begin()}});
  }

  const DemoArgs& a_;
  const std::vector<uint64_t>& counts_;  // elements per tensor
  const std::string dir_;                 // logs and result files
  const std::string exe_;
  Child sw_;
  int ctl_port_ = 0;
  std::vector<Child> workers_;
  // What the result files say, and the verdict.
  std::vector<SizeResult> rows_;
  double max_tolerance_ = 0;  // float32: the largest per-element bound any worker allowed
  bool ok_ = true;
  std::vector<std::string> errors_;
  nlohmann::json ranks_ = nlohmann::json::array();
  nlohmann::json rows_json_ = nlohmann::json::array();
  uint64_t total_wrong_ = 0;
};

int Run(const DemoArgs& a) {
  auto job = a.job.Parse();
  if (!job.ok()) { std::cerr << "switchml demo: error: " << job.status().message() << "\n"; return 2; }
  if (a.workers < 1 || a.workers > 64) {
    std::cerr << "switchml demo: error: --workers must be in [1, 64] on one machine, got " << a.workers << "\n";
    return 2;
  }
  char tmpl[] = "/tmp/switchml-demo.XXXXXX";
  if (!mkdtemp(tmpl)) { std::perror("switchml demo: mkdtemp"); return 1; }
  Demo demo(a, job->counts, tmpl);

  demo.PrintPlan();
  if (Status s = demo.StartSwitch(); !s.ok()) return PrintError(s);
  if (Status s = demo.StartWorkers(); !s.ok()) {
    PrintError(s);
    demo.StopAll();
    return 1;
  }
  demo.WaitForWorkers();
  demo.CollectResults();
  demo.PrintTable();
  demo.PrintVerdict();
  if (!a.json.empty()) demo.WriteJson();
  return demo.Finish();
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
