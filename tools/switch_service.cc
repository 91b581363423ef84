#include "switch_service.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "controller/session_service.h"
#include "metrics.h"
#include "rendezvous/operator_auth.h"
#include "transport/channel.h"

namespace switchml::tools {

namespace {

std::string Dotted(uint32_t ipv4) {
  std::string s = transport::Endpoint{ipv4, 0}.ToString();
  return s.substr(0, s.rfind(':'));
}

}  // namespace

nlohmann::json SwitchServiceCounters::ToJson() const {
  nlohmann::json j;
  for (auto& [name, value] : total.Named()) j[name] = value;
  for (auto& [name, value] : transport) j[name] = value;
  if (!per_io_thread.empty()) {  // the sums above, and each I/O thread's own
    nlohmann::json per = nlohmann::json::array();
    for (const dataplane::ServerCounters& c : per_io_thread) {
      nlohmann::json t;
      for (auto& [name, value] : c.Named()) t[name] = value;
      per.push_back(std::move(t));
    }
    j["per_io_thread"] = std::move(per);
  }
  return j;
}

SwitchService::SwitchService(SwitchServiceOptions options) : options_(std::move(options)) {}

SwitchService::~SwitchService() { Stop(); }

StatusOr<std::unique_ptr<SwitchService>> SwitchService::Start(SwitchServiceOptions options) {
  auto s = std::unique_ptr<SwitchService>(new SwitchService(std::move(options)));
  SwitchServiceOptions& o = s->options_;
  const dataplane::SwitchConfig& cfg = o.host.switch_config;
  // Checked before anything is made (a token file, sockets).
  if (o.controller_port > 65535) {
    return InvalidArgumentError("--controller-port must be in [0, 65535], got " +
                                std::to_string(o.controller_port));
  }
  if (o.default_job_idle_timeout.count() < 0 ||
      o.default_job_idle_timeout > std::chrono::seconds(4000000)) {
    return InvalidArgumentError("--job-idle-timeout-s must be in [0, 4e6], got " +
                                std::to_string(o.default_job_idle_timeout.count() / 1000.0));
  }
  SWITCHML_RETURN_IF_ERROR(cfg.Validate());
  if (!o.operator_token.empty()) {
    SWITCHML_RETURN_IF_ERROR(rendezvous::ValidateOperatorToken(o.operator_token, "operator_token"));
  }
  if (o.listen_host.empty()) o.listen_host = Dotted(o.host.bind.ipv4);
  auto log = [&o](const std::string& line) {
    if (o.host.log) o.host.log(false, line);
  };

  // The credential: generated into a private file when none is given.
  std::string credential = o.operator_token_source;
  if (o.operator_token.empty()) {
    o.operator_token = rendezvous::GenerateOperatorToken();
    std::string dir = o.token_dir;
    if (dir.empty()) {
      const char* tmpdir = std::getenv("TMPDIR");
      dir = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
    }
    auto path = rendezvous::WritePrivateTokenFile(dir + "/switchml-switch.XXXXXX", o.operator_token);
    if (!path.ok()) {
      return Status(path.status().code(),
                    "cannot store the generated operator credential: " + path.status().message());
    }
    s->token_file_ = *path;  // removed by the destructor from here on
    credential = "generated, in " + *path;
  }

  // The switch on this host, then the controller in front of it: the switch is both the
  // session sink (reference UdpSession) and the job sink (JobService).
  SWITCHML_ASSIGN_OR_RETURN(s->host_, dataplane::SwitchHost::Create(o.host));
  SWITCHML_RETURN_IF_ERROR(s->host_->Start());
  controller::ServerOptions so;
  so.listen_address = o.listen_host + ":" + std::to_string(o.controller_port);
  so.operator_token = o.operator_token;
  so.default_job_idle_timeout = o.default_job_idle_timeout;
  so.tls = o.tls;
  auto ctl = controller::ControllerServer::Start(so, s->host_->server());
  if (!ctl.ok()) return Status(ctl.status().code(), "session service: " + ctl.status().ToString());
  s->controller_ = std::move(*ctl);
  s->controller_port_ = s->controller_->port();
  if (!o.metrics_listen.empty()) {
    SWITCHML_ASSIGN_OR_RETURN(
        s->metrics_,
        MetricsServer::Start("--metrics-listen", o.metrics_listen, SwitchMetrics(*s->host_)));
  }

  // What runs, for the operator.
  const dataplane::SwitchHost& host = *s->host_;
  const std::vector<uint16_t>& ports = host.ports();
  std::vector<std::string>& lines = s->startup_lines_;
  char line[512];
  std::snprintf(line, sizeof(line),
                "data plane on %s %s:%u, session service on %s:%d, %u slots, up to %u "
                "elements/packet, up to %u workers",
                host.raw() ? ("raw frames of " + host.iface()).c_str() : "udp",
                o.listen_host.c_str(), ports[0], o.listen_host.c_str(), s->controller_port_,
                cfg.num_slots, cfg.max_elements_per_packet, cfg.max_workers);
  lines.push_back(line);
  lines.push_back(rendezvous::DescribeServerTransport(
      o.tls, o.listen_host + ":" + std::to_string(s->controller_port_)));
  for (std::string& l : host.StartupLines()) lines.push_back(std::move(l));
  if (cfg.io_threads > 1) {
    std::string list;
    for (uint16_t p : ports) list += (list.empty() ? "" : ", ") + std::to_string(p);
    std::snprintf(line, sizeof(line), "%u I/O threads on udp ports %s (reference clients: %u)",
                  cfg.io_threads, list.c_str(), ports[0]);
    lines.push_back(line);
  }
  std::snprintf(line, sizeof(line),
                "job service (switchml.v1) on the same port; jobs share a pool of %u slots; "
                "default job idle timeout %g s",
                cfg.num_slots, double(o.default_job_idle_timeout.count()) / 1000);
  lines.push_back(line);
  lines.push_back("operator credential: " + credential);
  if (s->metrics_ != nullptr) lines.push_back("Prometheus metrics on " + s->metrics_->url());
  if (!s->token_file_.empty()) {
    const std::string& f = s->token_file_;
    lines.push_back("`switchml jobs` needs it: --operator-token-file " + f +
                    " (or export SWITCHML_OPERATOR_TOKEN=$(cat " + f +
                    ")); the file is removed at exit");
  }
  if (cfg.ingress_drop_probability > 0 || cfg.egress_drop_probability > 0) {
    std::snprintf(line, sizeof(line), "drop simulator on: ingress %g, egress %g, seed %llu",
                  cfg.ingress_drop_probability, cfg.egress_drop_probability,
                  (unsigned long long)cfg.drop_seed);
    lines.push_back(line);
  }
  for (const std::string& l : lines) log(l);

  // Last: whoever waits for the ready file finds the lines above.
  if (!o.ready_file.empty()) {
    const std::string tmp = o.ready_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << s->ReadyJson().dump() << "\n";
      if (!out.flush()) return InternalError("--ready-file: cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), o.ready_file.c_str()) != 0) {
      return InternalError("--ready-file: cannot rename " + tmp + " to " + o.ready_file);
    }
  }
  return s;
}

nlohmann::json SwitchService::ReadyJson() const {
  nlohmann::json ready{{"udp_port", host_->ports()[0]},
                       {"udp_ports", host_->ports()},
                       {"controller_port", controller_port_}};
  if (!token_file_.empty()) ready["operator_token_file"] = token_file_;
  if (metrics_ != nullptr) ready["metrics_port"] = metrics_->port();
  return ready;
}

int SwitchService::metrics_port() const { return metrics_ != nullptr ? metrics_->port() : 0; }

void SwitchService::Stop() {
  metrics_.reset();
  if (controller_ != nullptr) controller_->Shutdown();
  if (host_ != nullptr) host_->Stop();
  RemoveTokenFile();
}

void SwitchService::RemoveTokenFile() {
  if (token_file_.empty()) return;
  std::remove(token_file_.c_str());
  ::rmdir(token_file_.substr(0, token_file_.rfind('/')).c_str());
  token_file_.clear();
}

SwitchServiceCounters SwitchService::Counters() const {
  SwitchServiceCounters c;
  const dataplane::SwitchServer& server = *host_->server();
  c.total = server.counters();
  c.transport = server.transport_counters();
  for (auto& k : host_->KernelCounters()) c.transport.push_back(std::move(k));
  const uint32_t threads = host_->switch_config().io_threads;
  if (threads > 1) {
    for (uint32_t i = 0; i < threads; ++i) c.per_io_thread.push_back(server.io_thread_counters(i));
  }
  return c;
}

}  // namespace switchml::tools
