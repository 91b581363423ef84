// bench/backend_flags.h — what every benchmark tool (allreduce_perf, dnn_bench) shares about
// its command line and its output: the flags and JSON fields of BackendConfig, the check of
// a flag with a fixed set of values, joining the job, the SwitchML header line and writing the
// --json file, so that both take and report them alike.
#pragma once

#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend.h"

namespace switchml::bench {

// The SwitchML data-path flags, the job to join (--job-id/--job-token, defaults from the
// environment variables SWITCHML_JOB_ID/SWITCHML_JOB_TOKEN that `switchml jobs create` prints)
// and the Gloo rendezvous directory.
inline void AddBackendFlags(CLI::App& app, BackendConfig& c) {
  app.add_option("-t,--threads", c.threads, "switchml: worker threads per rank")->capture_default_str();
  app.add_option("--window", c.window, "switchml: packets in flight per rank")->capture_default_str();
  app.add_option("--elements-per-packet", c.elements_per_packet, "switchml: 64, 256, 512 or 1024")
      ->capture_default_str();
  app.add_option("--controller", c.controller, "switchml: controller address host:port")->capture_default_str();
  app.add_option("--bind-ip", c.bind_ip, "switchml: local IPv4 for the data sockets");
  app.add_option("--advertise-ip", c.advertise_ip, "switchml: IPv4 registered with the switch");
  app.add_option("--job-id", c.job_id,
                 "switchml: id of the job to join (`switchml jobs create`); 0 = the reference session")
      ->envname("SWITCHML_JOB_ID")
      ->capture_default_str();
  app.add_option("--job-token", c.job_token, "switchml: the job's token (needed with --job-id)")
      ->envname("SWITCHML_JOB_TOKEN");
  app.add_option("--rendezvous-dir", c.rendezvous_dir, "gloo: directory for the FileStore rendezvous (fresh per job)");
}

// Adds "switchml": {threads, window, elements_per_packet, job_id} to a run's JSON when it ran
// SwitchML (job_id 0: the reference session; the token is never written).
inline void AddBackendJson(const BackendConfig& c, nlohmann::json& j) {
  if (c.backend == "switchml")
    j["switchml"] = {{"threads", c.threads},
                     {"window", c.window},
                     {"elements_per_packet", c.elements_per_packet},
                     {"job_id", c.job_id}};
}

// INVALID_ARGUMENT "FLAG must be A, B or C, got 'VALUE'" unless `value` is one of `choices`.
inline Status CheckChoice(const std::string& flag, const std::string& value,
                          std::initializer_list<std::string_view> choices) {
  std::string list;
  size_t i = 0;
  for (std::string_view c : choices) {
    if (value == c) return Status();
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
    ++i;
  }
  return InvalidArgumentError(flag + " must be " + list + ", got '" + value + "'");
}

// Reports a failed CreateBackend as "TOOL (BACKEND, rank R): error: STATUS" on stderr; returns
// the exit code: 2 for a bad configuration (INVALID_ARGUMENT), else 1.
inline int ReportBackendError(const std::string& tool, const BackendConfig& c, const Status& s) {
  std::cerr << tool << " (" << c.backend << ", rank " << c.rank << "): error: " << s.ToString() << "\n";
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

// The header line "# switchml: ..." with the data-path settings, for SwitchML runs only.
inline void PrintSwitchmlHeader(const BackendConfig& c) {
  if (c.backend == "switchml")
    std::printf("# switchml: %u thread(s)/worker, window %u packets, %u elements/packet, controller %s, %s\n",
                c.threads, c.window, c.elements_per_packet, c.controller.c_str(),
                c.job_id == 0 ? "reference session" : ("job " + std::to_string(c.job_id)).c_str());
}

// Writes `j` (indented by 2, then a newline) to `path`; UNAVAILABLE "cannot write FLAG PATH"
// ("cannot write PATH" without a flag) when the file cannot be written.
inline Status WriteJsonFile(const std::string& flag, const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) return UnavailableError("cannot write " + (flag.empty() ? "" : flag + " ") + path);
  return Status();
}

}  // namespace switchml::bench
