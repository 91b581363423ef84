// `switchml controller`: a standalone controller process. Serves the reference Session/Sync
// services and switchml.v1.JobService to workers, and drives one or more switches (each a
// `switchml switch`, whose embedded controller it talks to) over gRPC
// (controller/remote_switches.h). Runs until SIGINT/SIGTERM.
//
//   switchml controller --listen 0.0.0.0:50099 --switch 10.0.0.10:50099 --switch 10.0.0.11:50099
//
// Each job goes to the switch with the largest free slot range, or, created with
// `switchml jobs create --switches K`, to K of them (shards, each serving a share of every
// worker's threads; docs/operations.md "One job on several switch hosts").
//
// Credentials: the operator credential (--operator-token-file FILE, which wins, or
// SWITCHML_OPERATOR_TOKEN) is required. It authenticates this controller's operators and is
// what the controller presents to its switches, unless --switch-operator-token-file gives the
// switches' own; the switches are checked at start.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "controller/remote_switches.h"
#include "controller/session_service.h"
#include "cli_util.h"
#include "commands.h"
#include "job_flags.h"
#include "metrics.h"

namespace switchml::tools {
namespace {

struct ControllerArgs {
  std::string listen = "0.0.0.0:50099";
  std::vector<std::string> switches;
  uint32_t rpc_timeout_ms = 5000;
  uint32_t health_interval_ms = 1000;
  std::string ready_file;
  OperatorTokenFlag operator_token;
  std::string switch_operator_token_file;
  double job_idle_timeout_s = 600;
  std::string metrics_listen;  // empty = off
  ServerTlsFlags tls;
  std::string switch_tls_ca;  // --tls-ca: TLS towards the switches
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

  if (!(a.job_idle_timeout_s >= 0) || a.job_idle_timeout_s > 4e6) {
    return fail("--job-idle-timeout-s must be in [0, 4e6], got " +
                std::to_string(a.job_idle_timeout_s));
  }
  if (!a.metrics_listen.empty()) {
    if (auto m = ParseMetricsListen("--metrics-listen", a.metrics_listen); !m.ok()) {
      return fail(m.status().message());
    }
  }
  auto cred = a.operator_token.Resolve("switchml controller");
  if (!cred.ok()) return fail(cred.status().message());
  if (cred->token.empty()) {
    return fail(std::string("no operator credential: a standalone controller needs one (it "
                            "authenticates operators and is presented to the switches): ") +
                rendezvous::kOperatorTokenHelp);
  }
  std::string switch_token = cred->token;
  if (!a.switch_operator_token_file.empty()) {
    auto sc = rendezvous::ReadOperatorTokenFile(a.switch_operator_token_file);
    if (!sc.ok()) return fail("--switch-operator-token-file: " + sc.status().message());
    if (!sc->warning.empty()) std::cerr << "switchml controller: " << sc->warning << "\n";
    switch_token = sc->token;
  }
  // Towards the switches: TLS with --tls-ca (presenting this controller's own certificate, for
  // switches that require client certificates), else plaintext (tokens only to switches on
  // this host, unless --insecure).
  auto server_tls = a.tls.Resolve();
  if (!server_tls.ok()) return fail(server_tls.status().message());
  TlsOptions to_switches;
  if (!a.switch_tls_ca.empty()) {
    to_switches.ca_file = a.switch_tls_ca;
    to_switches.cert_file = server_tls->cert_file;
    to_switches.key_file = server_tls->key_file;
  } else {
    to_switches.insecure = server_tls->insecure;
  }
  auto remote = controller::RemoteSwitches::Connect(
      a.switches, std::chrono::milliseconds(a.rpc_timeout_ms), switch_token,
      std::chrono::milliseconds(a.health_interval_ms), to_switches);
  if (!remote.ok()) return fail(remote.status().ToString());
  {
    const std::vector<control::SwitchHealth> health = (*remote)->Health();
    for (size_t i = 0; i < health.size(); ++i) {
      if (!health[i].up) {
        std::cerr << "switchml controller: warning: switch " << i << " (" << health[i].address
                  << ") is down: " << health[i].last_error
                  << " (it gets no jobs until it answers again)\n";
      }
    }
  }
  controller::ServerOptions so;
  so.listen_address = a.listen;
  so.operator_token = cred->token;
  so.default_job_idle_timeout = std::chrono::milliseconds(int64_t(a.job_idle_timeout_s * 1000));
  so.tls = *server_tls;
  auto ctl = controller::ControllerServer::Start(so, remote->get());
  if (!ctl.ok()) return fail(ctl.status().ToString());
  std::printf("switchml controller: %s\n",
              rendezvous::DescribeServerTransport(
                  so.tls, a.listen.substr(0, a.listen.rfind(':') + 1) + std::to_string((*ctl)->port()))
                  .c_str());
  std::printf("switchml controller: serving on %s (port %d), driving %zu switch(es); operator "
              "credential from %s%s\n",
              a.listen.c_str(), (*ctl)->port(), (*remote)->num_switches(), cred->source.c_str(),
              a.switch_operator_token_file.empty() ? " (also presented to the switches)" : "");
  std::unique_ptr<MetricsServer> metrics;  // before the ready file; stopped before *remote
  nlohmann::json ready{{"controller_port", (*ctl)->port()}};
  if (!a.metrics_listen.empty()) {
    auto m =
        MetricsServer::Start("--metrics-listen", a.metrics_listen, ControllerMetrics(**remote));
    if (!m.ok()) {
      (*ctl)->Shutdown();
      return fail(m.status().message());
    }
    metrics = std::move(*m);
    ready["metrics_port"] = metrics->port();
    std::printf("switchml controller: Prometheus metrics on %s\n", metrics->url().c_str());
  }
  std::fflush(stdout);
  if (!a.ready_file.empty()) {
    const std::string tmp = a.ready_file + ".tmp";
    std::ofstream(tmp) << ready.dump() << "\n";
    std::rename(tmp.c_str(), a.ready_file.c_str());
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  std::printf("switchml controller: %s received, shutting down\n",
              sig == SIGINT ? "SIGINT" : "SIGTERM");
  metrics.reset();
  (*ctl)->Shutdown();
  return 0;
}

}  // namespace

Runner AddControllerCommand(CLI::App& app) {
  auto a = std::make_shared<ControllerArgs>();
  app.add_option("--listen", a->listen, "host:port to serve workers and operators on")
      ->capture_default_str();
  app.add_option("--switch", a->switches,
                 "Controller address host:port of a `switchml switch` to drive (repeatable); "
                 "a job goes to one of them, or to K with `jobs create --switches K`")
      ->required();
  app.add_option("--rpc-timeout-ms", a->rpc_timeout_ms, "Deadline of each call to a switch")
      ->capture_default_str();
  app.add_option("--health-interval-ms", a->health_interval_ms,
                 "How often every switch is probed; a job with a shard on a switch found down "
                 "(or restarted) is re-placed on healthy switches (0 = no probing: a lost shard "
                 "is found by the next call about its job)")
      ->capture_default_str();
  app.add_option("--ready-file", a->ready_file,
                 "Write {\"controller_port\"} (and \"metrics_port\" with --metrics-listen) as "
                 "JSON to FILE once serving");
  app.add_option("--metrics-listen", a->metrics_listen,
                 "Serve Prometheus metrics (switches up/down, jobs by state, placements, per-job "
                 "counters) at http://HOST:PORT/metrics (HOST an IPv4 address or localhost; "
                 "PORT 0 = a free one, printed and in the ready file); off by default. "
                 "docs/operations.md, \"Monitoring\"");
  a->operator_token.Register(app, "(required): authenticates job administration here and, "
                                  "unless --switch-operator-token-file is given, at the switches");
  app.add_option("--switch-operator-token-file", a->switch_operator_token_file,
                 "File holding the switches' operator credential, when it differs from ours");
  app.add_option("--job-idle-timeout-s", a->job_idle_timeout_s,
                 "Idle timeout of a job created without one (0 = such jobs never expire)")
      ->capture_default_str();
  a->tls.Register(app);
  app.add_option("--tls-ca", a->switch_tls_ca,
                 "Reach the switches over TLS: PEM file of the CA that signed their certificates "
                 "(this controller presents --tls-cert/--tls-key to them, for switches started "
                 "with --tls-client-ca). Without it, plaintext: the operator credential then goes "
                 "only to switches on this host, unless --insecure");
  AddConfigFileOption(app);
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
