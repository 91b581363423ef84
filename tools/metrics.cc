#include "metrics.h"

#include <arpa/inet.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <exception>
#include <map>
#include <utility>
#include <vector>

#include "control/switch_control.h"
#include "dataplane/switch_counters.h"
#include "dataplane/switch_host.h"
#include "dataplane/switch_server.h"

namespace switchml::tools {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// The families of one scrape, in first-added order, each created with its help and type on
// first use.
class Families {
 public:
  void Add(const std::string& name, MetricType type, const std::string& help, Labels labels,
           double value) {
    auto [it, inserted] = index_.try_emplace(name, families_.size());
    if (inserted) families_.push_back(MetricFamily{name, help, type, {}});
    ClientMetric m;
    m.label = std::move(labels);
    if (type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    families_[it->second].metric.push_back(std::move(m));
  }
  void Counter(const std::string& name, const std::string& help, Labels labels, double value) {
    Add(name, MetricType::Counter, help, std::move(labels), value);
  }
  void Gauge(const std::string& name, const std::string& help, Labels labels, double value) {
    Add(name, MetricType::Gauge, help, std::move(labels), value);
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

constexpr const char* kRetransmissionCounters[] = {"unicast_replies", "duplicates_dropped",
                                                   "late_duplicates_dropped", "uplink_resent"};

// One I/O thread's (or the switch's) ServerCounters.
void AddServerCounters(Families& f, const std::string& io_thread,
                       const dataplane::ServerCounters& c) {
  const Labels t{{"io_thread", io_thread}};
  f.Counter("switchml_switch_datagrams_received_total", "Datagrams the switch received",
            t, double(c.core.datagrams_received));
  f.Counter("switchml_switch_datagrams_sent_total",
            "Response datagrams the switch handed to its transport", t,
            double(c.core.datagrams_sent));
  f.Counter("switchml_switch_aggregations_total",
            "Aggregation rounds completed and multicast (multicast_rounds)", t,
            double(c.core.multicast_rounds));
  dataplane::ServerCounters::Visit(c, [&](const char* name, uint64_t value) {
    if (dataplane::IsDropCounter(name)) {
      f.Counter("switchml_switch_drops_total",
                "Datagrams the switch dropped, by reason (docs/reliability.md, drop counters)",
                {{"io_thread", io_thread}, {"reason", name}}, double(value));
    }
  });
  for (const char* r : kRetransmissionCounters) {
    uint64_t value = 0;
    dataplane::ServerCounters::Visit(c, [&](const char* name, uint64_t v) {
      if (std::string_view(name) == r) value = v;
    });
    f.Counter("switchml_switch_retransmissions_total",
              "Retransmitted datagrams seen, by what became of them: answered again "
              "(unicast_replies), dropped while the round was open (duplicates_dropped, "
              "late_duplicates_dropped), partial sums sent up again (uplink_resent)",
              {{"io_thread", io_thread}, {"kind", r}}, double(value));
  }
  dataplane::ServerCounters::Visit(c, [&](const char* name, uint64_t value) {
    f.Counter("switchml_switch_counter_total",
              "Every switch counter by its --counters-json name, per I/O thread",
              {{"io_thread", io_thread}, {"counter", name}}, double(value));
  });
}

double Seconds(std::chrono::milliseconds ms) { return double(ms.count()) / 1000.0; }

Labels JobLabels(const control::JobInfo& j) {
  return {{"job", std::to_string(j.job_id)}, {"name", j.spec.name}};
}

Labels With(Labels l, std::string name, std::string value) {
  l.push_back({std::move(name), std::move(value)});
  return l;
}

// One job (switchml_job_*): its counters (a switch's own, or a controller's merged over the
// shards), slots, workers and idle time.
void AddJob(Families& f, const control::JobInfo& j) {
  const Labels l = JobLabels(j);
  const control::JobCounters& c = j.counters;
  f.Gauge("switchml_job_info", "1 for every job listed; its state in the label",
          With(l, "state", control::JobStateName(j.state)), 1);
  f.Counter("switchml_job_datagrams_received_total", "Datagrams attributed to the job", l,
            double(c.received));
  f.Counter("switchml_job_datagrams_sent_total", "Response datagrams of the job", l,
            double(c.datagrams_sent));
  f.Counter("switchml_job_aggregations_total", "Aggregation rounds of the job completed", l,
            double(c.multicast_rounds));
  const std::pair<const char*, uint64_t> drops[] = {
      {"duplicates_dropped", c.duplicates_dropped},
      {"late_duplicates_dropped", c.late_duplicates_dropped},
      {"size_mismatch", c.size_mismatch},
      {"job_slot_out_of_range", c.slot_out_of_range},
      {"too_large", c.too_large},
      {"job_not_running", c.not_running},
      {"wrong_io_thread", c.wrong_io_thread}};
  for (const auto& [reason, value] : drops) {
    f.Counter("switchml_job_drops_total", "Datagrams of the job dropped, by reason",
              With(l, "reason", reason), double(value));
  }
  f.Counter("switchml_job_retransmissions_total",
            "Retransmitted datagrams of the job seen: answered again (unicast_replies) or "
            "dropped while the round was open (duplicates_dropped, late_duplicates_dropped)",
            With(l, "kind", "unicast_replies"), double(c.unicast_replies));
  f.Counter("switchml_job_retransmissions_total", "", With(l, "kind", "duplicates_dropped"),
            double(c.duplicates_dropped));
  f.Counter("switchml_job_retransmissions_total", "", With(l, "kind", "late_duplicates_dropped"),
            double(c.late_duplicates_dropped));
  f.Gauge("switchml_job_slots", "Aggregator slots the job holds here (per set)", l,
          double(j.held_slots.count));
  f.Gauge("switchml_job_workers", "Workers the job was created for", l,
          double(j.spec.num_workers));
  f.Gauge("switchml_job_workers_registered", "Workers registered (active) in the job", l,
          double(j.num_registered));
  f.Gauge("switchml_job_idle_seconds", "Seconds since the job's last datagram (or creation)", l,
          Seconds(j.idle_for));
  f.Gauge("switchml_job_placement",
          "The job's placement (from 1; a standalone controller re-places a job whose switch "
          "went down), 0 for a job created on a switch directly",
          l, double(j.assignment.placement));
  f.Gauge("switchml_job_shards", "Switches serving the job", l,
          double(j.assignment.num_shards));
}

void AddJobs(Families& f, const std::string& prefix, const control::JobList& list) {
  std::map<std::string, int> by_state{{"waiting_for_workers", 0}, {"running", 0}, {"ended", 0}};
  uint64_t workers = 0;
  for (const control::JobInfo& j : list.jobs) {
    ++by_state[control::JobStateName(j.state)];
    if (j.state != control::JobState::kEnded) workers += j.num_registered;
  }
  for (const auto& [state, n] : by_state) {
    f.Gauge(prefix + "_jobs", "Jobs (JobService) by state; ended ones are listed for a while",
            {{"state", state}}, n);
  }
  f.Gauge(prefix + "_workers_registered", "Workers registered in the live jobs", {},
          double(workers));
  f.Gauge(prefix + "_pool_slots", "Aggregator slots per set of the pool jobs share", {},
          double(list.pool_slots));
  f.Gauge(prefix + "_slots_in_use", "Slots of the pool held by jobs", {},
          double(list.pool_slots - std::min(list.free_slots, list.pool_slots)));
  f.Gauge(prefix + "_largest_free_slot_range", "Largest contiguous free slot range", {},
          double(list.largest_free_range));
  for (const control::JobInfo& j : list.jobs) AddJob(f, j);
}

class SwitchCollector final : public prometheus::Collectable {
 public:
  explicit SwitchCollector(const dataplane::SwitchHost& host) : host_(host) {}
  std::vector<MetricFamily> Collect() const override {
    Families f;
    const dataplane::SwitchServer& server = *host_.server();
    f.Gauge("switchml_switch_io_threads", "I/O threads of the switch", {},
            server.io_threads());
    for (uint32_t i = 0; i < server.io_threads(); ++i) {
      AddServerCounters(f, std::to_string(i), server.io_thread_counters(i));
    }
    // The transport's own and the kernel's (kernel-UDP mode) counters, not per I/O thread.
    std::vector<std::pair<std::string, uint64_t>> other = server.transport_counters();
    for (auto& kc : host_.KernelCounters()) other.push_back(std::move(kc));
    for (const auto& [name, value] : other) {
      if (dataplane::IsDropCounter(name)) {
        f.Counter("switchml_switch_transport_drops_total",
                  "Frames or datagrams the transport dropped before the switch saw them, by "
                  "reason (raw_*, udp_socket_drops)",
                  {{"reason", name}}, double(value));
      }
      f.Counter("switchml_switch_transport_counter_total",
                "The transport's counters (raw_*, udp_*) and in kernel-UDP mode the kernel's "
                "receive errors since start (kernel_*), by their --counters-json name",
                {{"counter", name}}, double(value));
    }
    const control::JobList list = server.ListJobs();
    AddJobs(f, "switchml_switch", list);
    if (list.reference_session.has_value()) AddJob(f, *list.reference_session);
    return f.Take();
  }

 private:
  const dataplane::SwitchHost& host_;
};

class ControllerCollector final : public prometheus::Collectable {
 public:
  explicit ControllerCollector(const control::SwitchControl& control) : control_(control) {}
  std::vector<MetricFamily> Collect() const override {
    Families f;
    const control::JobList list = control_.ListJobs();
    f.Gauge("switchml_controller_switches", "Switches this controller drives", {},
            double(list.switches.size()));
    for (const control::SwitchHealth& h : list.switches) {
      const Labels l{{"switch", h.address}};
      f.Gauge("switchml_controller_switch_up", "1 if the switch answered its last health probe",
              l, h.up ? 1 : 0);
      f.Gauge("switchml_controller_switch_state_seconds",
              "Seconds since the switch last changed state (up or down), at the last probe", l,
              Seconds(h.for_ms));
      f.Counter("switchml_controller_switch_jobs_replaced_total",
                "Jobs re-placed away from the switch (it went down or forgot them)", l,
                double(h.jobs_replaced));
    }
    AddJobs(f, "switchml_controller", list);
    return f.Take();
  }

 private:
  const control::SwitchControl& control_;
};

}  // namespace

StatusOr<MetricsListen> ParseMetricsListen(std::string_view flag, std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError(std::string(flag) + " must be HOST:PORT with HOST an IPv4 "
                                "address or localhost and PORT in [0, 65535] (0 = a free one), "
                                "e.g. 127.0.0.1:9464; got '" + std::string(text) + "': " + why);
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return bad("no ':'");
  MetricsListen out;
  out.host = std::string(text.substr(0, colon));
  const std::string_view port = text.substr(colon + 1);
  if (out.host.empty()) return bad("no HOST");
  if (out.host == "localhost") out.host = "127.0.0.1";
  in_addr addr{};
  if (inet_pton(AF_INET, out.host.c_str(), &addr) != 1) {
    return bad("'" + out.host + "' is not an IPv4 address");
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return bad("'" + std::string(port) + "' is not a port");
  }
  out.port = uint16_t(value);
  return out;
}

std::shared_ptr<prometheus::Collectable> SwitchMetrics(const dataplane::SwitchHost& host) {
  return std::make_shared<SwitchCollector>(host);
}

std::shared_ptr<prometheus::Collectable> ControllerMetrics(const control::SwitchControl& control) {
  return std::make_shared<ControllerCollector>(control);
}

std::string SerializeMetrics(const prometheus::Collectable& c) {
  return prometheus::TextSerializer().Serialize(c.Collect());
}

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    std::string_view flag, std::string_view listen,
    std::shared_ptr<prometheus::Collectable> collectable) {
  SWITCHML_ASSIGN_OR_RETURN(MetricsListen where, ParseMetricsListen(flag, listen));
  auto s = std::unique_ptr<MetricsServer>(new MetricsServer());
  s->collectable_ = std::move(collectable);
  s->host_ = where.host;
  const std::string address = where.host + ":" + std::to_string(where.port);
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return UnavailableError(std::string(flag) + " " + std::string(listen) +
                            ": cannot listen (address in use, or not an address of this host): " +
                            e.what());
  }
  const std::vector<int> ports = s->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return UnavailableError(std::string(flag) + " " + std::string(listen) +
                            ": the HTTP server reports no listening port");
  }
  s->port_ = uint16_t(ports[0]);
  s->exposer_->RegisterCollectable(s->collectable_);
  return s;
}

MetricsServer::~MetricsServer() { exposer_.reset(); }

std::string MetricsServer::url() const {
  return "http://" + host_ + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace switchml::tools
