// `switchml controller`: a standalone controller process. Serves the reference Session/Sync
// services and switchml.v1.JobService to workers, and drives one or more switches (each a
// `switchml switch`, whose embedded controller it talks to) over gRPC
// (controller/remote_switches.h). Runs until SIGINT/SIGTERM.
//
//   switchml controller --listen 0.0.0.0:50099 --switch 10.0.0.10:50099 --switch 10.0.0.11:50099
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "controller/remote_switches.h"
#include "controller/session_service.h"
#include "tools/commands.h"

namespace switchml::tools {
namespace {

struct ControllerArgs {
  std::string listen = "0.0.0.0:50099";
  std::vector<std::string> switches;
  uint32_t rpc_timeout_ms = 5000;
  std::string ready_file;
};

int Run(const ControllerArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "switchml controller: error: " << m << "\n";
    return 1;
  };
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto remote = controller::RemoteSwitches::Connect(
      a.switches, std::chrono::milliseconds(a.rpc_timeout_ms));
  if (!remote.ok()) return fail(remote.status().ToString());
  controller::ServerOptions so;
  so.listen_address = a.listen;
  auto ctl = controller::ControllerServer::Start(so, remote->get(), remote->get());
  if (!ctl.ok()) return fail(ctl.status().ToString());
  std::printf("switchml controller: serving on %s (port %d), driving %zu switch(es)\n",
              a.listen.c_str(), (*ctl)->port(), (*remote)->num_switches());
  std::fflush(stdout);
  if (!a.ready_file.empty()) {
    const std::string tmp = a.ready_file + ".tmp";
    std::ofstream(tmp) << nlohmann::json{{"controller_port", (*ctl)->port()}}.dump() << "\n";
    std::rename(tmp.c_str(), a.ready_file.c_str());
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  std::printf("switchml controller: %s received, shutting down\n",
              sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*ctl)->Shutdown();
  return 0;
}

}  // namespace

Runner AddControllerCommand(CLI::App& app) {
  auto a = std::make_shared<ControllerArgs>();
  app.add_option("--listen", a->listen, "host:port to serve workers and operators on")
      ->capture_default_str();
  app.add_option("--switch", a->switches,
                 "Controller address host:port of a `switchml switch` to drive (repeatable)")
      ->required();
  app.add_option("--rpc-timeout-ms", a->rpc_timeout_ms, "Deadline of each call to a switch")
      ->capture_default_str();
  app.add_option("--ready-file", a->ready_file,
                 "Write {\"controller_port\"} as JSON to FILE once serving");
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
