// tools/metrics.h — Prometheus metrics of the switch and of the standalone controller
// (`--metrics-listen HOST:PORT`, docs/operations.md "Monitoring"), served over HTTP at /metrics
// by prometheus-cpp (Debian's prometheus-cpp-dev; its civetweb server).
//
//   auto c = SwitchMetrics(host);                      // or ControllerMetrics(control)
//   SWITCHML_ASSIGN_OR_RETURN(auto m, MetricsServer::Start("--metrics-listen", "127.0.0.1:0", c));
//   ... m->port(), m->url() ...                        // serving until m is destroyed
//   std::string text = SerializeMetrics(*c);           // the same text, without HTTP (tests)
//
// Nothing is counted for the metrics: the collectors build every metric family at scrape time
// from what the switch or controller already exposes. A switch's scrape reads the I/O threads'
// mirrored counters (SwitchServer::counters() / io_thread_counters(): relaxed atomics, no lock
// on the packet path), the transport and kernel counters, and one ListJobs (the job-table lock
// of the control path, which the packet path never takes). A controller's scrape is one
// ListJobs of its SwitchControl (RemoteSwitches: one call per switch, with the switch health).
//
// Threading: the collectors are called from the HTTP server's threads; the SwitchHost or
// SwitchControl they read must outlive the MetricsServer serving them (destroy it first).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "switchml/status.h"

namespace prometheus {
class Collectable;
class Exposer;
}  // namespace prometheus

namespace switchml::dataplane {
class SwitchHost;
}
namespace switchml::control {
class SwitchControl;
}

namespace switchml::tools {

struct MetricsListen {
  std::string host;  // an IPv4 address, dotted quad ("localhost" becomes 127.0.0.1)
  uint16_t port = 0;  // 0 = a free one
};

// Parses `text` as HOST:PORT (IPv4 address or "localhost", port in [0, 65535]). Errors:
// InvalidArgument naming `flag` and the text.
StatusOr<MetricsListen> ParseMetricsListen(std::string_view flag, std::string_view text);

// The switch's metrics (switchml_switch_*, per I/O thread; switchml_job_*, per job). `host`
// must outlive the collectable's use.
std::shared_ptr<prometheus::Collectable> SwitchMetrics(const dataplane::SwitchHost& host);
// A standalone controller's metrics (switchml_controller_*: switches up/down, jobs by state,
// placements; switchml_job_* per job, merged over its shards).
std::shared_ptr<prometheus::Collectable> ControllerMetrics(const control::SwitchControl& control);

// The Prometheus text exposition format (version 0.0.4) of one scrape of `c`.
std::string SerializeMetrics(const prometheus::Collectable& c);

class MetricsServer {
 public:
  // Serves `collectable` at http://HOST:PORT/metrics (`listen` as ParseMetricsListen takes it).
  // Errors: ParseMetricsListen's; Unavailable "FLAG HOST:PORT: cannot listen ..." when the
  // address cannot be bound (in use, not local).
  static StatusOr<std::unique_ptr<MetricsServer>> Start(
      std::string_view flag, std::string_view listen,
      std::shared_ptr<prometheus::Collectable> collectable);
  ~MetricsServer();  // stops serving
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }  // the bound port (the free one picked for 0)
  const std::string& host() const { return host_; }
  std::string url() const;  // http://HOST:PORT/metrics

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace switchml::tools
