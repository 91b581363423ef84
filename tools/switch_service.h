// tools/switch_service.h — the switch process without its command line: a dataplane::SwitchHost
// (the switch on this host: channels, MAC, neighbour entries, ARP, kernel counters) with its
// controller embedded (controller::ControllerServer: the reference Session/Sync services and
// switchml.v1.JobService on one port), the operator credential (generated into a private file
// when none is given, that file removed at Stop), the lines that describe it to the operator
// and the ready file. What `switchml switch` starts (tools/cmd_switch.cc: flags, signals and
// printing around one SwitchService), and what any other front end (a test, a service daemon)
// starts the same way instead of assembling it again. It sits in tools/ because it embeds both
// the switch (dataplane) and the controller, which neither module may do for the other.
//
//   SwitchServiceOptions o;
//   o.host.switch_config = ...;  o.host.bind = {0x7F000001, 0};  o.controller_port = 0;
//   o.host.log = [](bool warning, const std::string& text) { ... };
//   o.ready_file = "/tmp/ready.json";
//   SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<SwitchService> s, SwitchService::Start(std::move(o)));
//   ... s->controller_port(), s->host().AllCounters() ...
//   s->Stop();                                  // also the destructor
//   std::cout << s->Counters().ToJson().dump(); // every counter, final after Stop
//
// Start, in this order: checks the options (InvalidArgument naming the `switchml switch` flag),
// generates the credential if none is given, creates and starts the SwitchHost, starts the
// controller on `listen_host`:`controller_port`, the metrics server (if asked), logs the startup lines (StartupLines(), as
// info through host.log) and only then writes the ready file, atomically: whoever waits for
// the ready file finds every line in the log. On an error everything started is stopped and a
// generated token file removed.
//
// Threading: Start, Stop and the destructor from one thread; the accessors and Counters() from
// any thread. Nothing here handles signals: block them before Start (threads inherit the mask).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/switch_host.h"
#include "dataplane/switch_server.h"
#include "rendezvous/tls.h"
#include "switchml/status.h"

namespace switchml::controller {
class ControllerServer;
}

namespace switchml::tools {

class MetricsServer;

struct SwitchServiceOptions {
  // The switch on this host (its log also takes the startup lines).
  dataplane::SwitchHostConfig host;
  // The --bind text: the controller listens on LISTEN_HOST:controller_port and the startup
  // lines name it as given ("localhost" stays "localhost"). Empty = host.bind.ipv4's dotted quad.
  std::string listen_host;
  uint32_t controller_port = 50099;  // --controller-port, [0, 65535]; 0 = a free one
  // The operator credential job administration needs (--operator-token-file or
  // SWITCHML_OPERATOR_TOKEN, already validated) and where it came from, for the log. Empty
  // token: a random one is generated and written to a new private file
  // TOKEN_DIR/switchml-switch.XXXXXX/operator-token (mode 0600, its directory 0700), named in
  // the log and the ready file and removed at Stop; token_dir empty = $TMPDIR, else /tmp.
  std::string operator_token;
  std::string operator_token_source;
  std::string token_dir;
  // Idle timeout of a job created without one (--job-idle-timeout-s, at most 4e6 s; 0 = never).
  std::chrono::milliseconds default_job_idle_timeout{std::chrono::minutes(10)};
  // Written once serving (empty = none): {"udp_port", "udp_ports", "controller_port"} and
  // "operator_token_file" when the credential was generated, "metrics_port" with
  // metrics_listen (--ready-file).
  std::string ready_file;
  // --metrics-listen HOST:PORT: serve Prometheus metrics (tools/metrics.h) at
  // http://HOST:PORT/metrics (port 0 = a free one: metrics_port(), the ready file's
  // "metrics_port"). Empty = off.
  std::string metrics_listen;
  // The session service's TLS (--tls-cert/--tls-key/--tls-client-ca/--insecure;
  // rendezvous/tls.h); logged at start.
  rendezvous::ServerTlsOptions tls;
};

// Every counter of a switch: what `switchml switch` prints at exit and writes to
// --counters-json.
struct SwitchServiceCounters {
  dataplane::ServerCounters total;  // the switch's, summed over the I/O threads
  // The channels' own (raw_*, udp_*) summed over the I/O threads, then in kernel-UDP mode the
  // kernel's receive errors since Start (kernel_*).
  std::vector<std::pair<std::string, uint64_t>> transport;
  // Each I/O thread's own, by thread; empty with one I/O thread.
  std::vector<dataplane::ServerCounters> per_io_thread;
  // {total by name..., transport by name..., "per_io_thread": [{...}, ...] (if any)}.
  nlohmann::json ToJson() const;
};

class SwitchService {
 public:
  // See the file comment. Errors: the options' (InvalidArgument naming the flag), the host's
  // (SwitchHost::Create/Start), "cannot store the generated operator credential: ..." and
  // "session service: ..." (the controller could not listen), each with the code of the cause.
  static StatusOr<std::unique_ptr<SwitchService>> Start(SwitchServiceOptions options);
  ~SwitchService();  // Stop()
  SwitchService(const SwitchService&) = delete;
  SwitchService& operator=(const SwitchService&) = delete;

  // Shuts the controller down, stops the host, removes a generated token file. Idempotent.
  // The host (and its neighbour entries) lives until the service is destroyed.
  void Stop();

  dataplane::SwitchHost& host() const { return *host_; }
  int controller_port() const { return controller_port_; }
  // The metrics server's port (0 when --metrics-listen is off, or after Stop).
  int metrics_port() const;
  // The generated token file, empty if the credential was given (or after Stop).
  const std::string& generated_token_file() const { return token_file_; }
  // The operator lines Start logged: the data plane, the host's (SwitchHost::StartupLines), the
  // I/O threads, the job service, the credential, the drop simulator.
  const std::vector<std::string>& StartupLines() const { return startup_lines_; }
  // The ready file's contents ("metrics_port" with --metrics-listen).
  nlohmann::json ReadyJson() const;
  // Every counter now (final once stopped).
  SwitchServiceCounters Counters() const;

 private:
  explicit SwitchService(SwitchServiceOptions options);
  void RemoveTokenFile();

  SwitchServiceOptions options_;
  std::string token_file_;
  std::unique_ptr<dataplane::SwitchHost> host_;
  std::unique_ptr<controller::ControllerServer> controller_;
  int controller_port_ = 0;
  std::unique_ptr<MetricsServer> metrics_;  // reads host_: declared after it, destroyed first
  std::vector<std::string> startup_lines_;
};

}  // namespace switchml::tools
