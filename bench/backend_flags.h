// bench/backend_flags.h — the command-line flags and JSON fields of BackendConfig that every
// benchmark tool (allreduce_perf, dnn_bench) shares, so that both take and report them alike.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/backend.h"

namespace switchml::bench {

// The SwitchML data-path flags and the Gloo rendezvous directory.
inline void AddBackendFlags(CLI::App& app, BackendConfig& c) {
  app.add_option("-t,--threads", c.threads, "switchml: worker threads per rank")->capture_default_str();
  app.add_option("--window", c.window, "switchml: packets in flight per rank")->capture_default_str();
  app.add_option("--elements-per-packet", c.elements_per_packet, "switchml: 64, 256, 512 or 1024")
      ->capture_default_str();
  app.add_option("--controller", c.controller, "switchml: controller address host:port")->capture_default_str();
  app.add_option("--bind-ip", c.bind_ip, "switchml: local IPv4 for the data sockets");
  app.add_option("--advertise-ip", c.advertise_ip, "switchml: IPv4 registered with the switch");
  app.add_option("--rendezvous-dir", c.rendezvous_dir, "gloo: directory for the FileStore rendezvous (fresh per job)");
}

// Adds "switchml": {threads, window, elements_per_packet} to a run's JSON when it ran SwitchML.
inline void AddBackendJson(const BackendConfig& c, nlohmann::json& j) {
  if (c.backend == "switchml")
    j["switchml"] = {{"threads", c.threads}, {"window", c.window}, {"elements_per_packet", c.elements_per_packet}};
}

}  // namespace switchml::bench
