// tools/metrics.h: --metrics-listen parsing, the switch's metrics (serialized, and over HTTP
// from a SwitchService on 127.0.0.1 with a free port), a port already taken, the controller's
// metrics from a fake SwitchControl's ListJobs.
#include "metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "controller/fake_switch_for_tests.h"
#include "switch_service.h"

namespace switchml::tools {
namespace {

TEST(ParseMetricsListenTest, AcceptsHostPort) {
  auto a = ParseMetricsListen("--metrics-listen", "127.0.0.1:9464");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9464);
  auto b = ParseMetricsListen("--metrics-listen", "localhost:0");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->host, "127.0.0.1");
  EXPECT_EQ(b->port, 0);
  auto c = ParseMetricsListen("--metrics-listen", "0.0.0.0:65535");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
}

TEST(ParseMetricsListenTest, RefusesBadInputNamingIt) {
  for (const char* bad : {"", "9464", ":9464", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:94x", "example.invalid:9464", "1.2.3:80"}) {
    auto r = ParseMetricsListen("--metrics-listen", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--metrics-listen must be HOST:PORT"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("got '" + std::string(bad) + "'"), std::string::npos)
        << r.status().message();
  }
}

// GET http://127.0.0.1:PORT/metrics, the whole response ("" on a connection error).
std::string HttpGet(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(0x7F000001);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, req.data(), req.size(), 0) == ssize_t(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, size_t(n));
    }
  }
  ::close(fd);
  return out;
}

TEST(SwitchMetricsTest, CountersMoveAndAreServed) {
  SwitchServiceOptions o;
  o.host.switch_config.num_slots = 64;
  o.host.switch_config.max_elements_per_packet = 256;
  o.host.switch_config.max_workers = 4;
  o.host.bind = {0x7F000001, 0};
  o.host.announce_interval_s = 0;
  o.controller_port = 0;
  o.operator_token = "metrics-test-operator-token";
  o.metrics_listen = "127.0.0.1:0";
  auto s = SwitchService::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  SwitchService& sw = **s;
  ASSERT_GT(sw.metrics_port(), 0);
  EXPECT_EQ(sw.ReadyJson()["metrics_port"], sw.metrics_port());
  bool logged = false;
  for (const std::string& l : sw.StartupLines()) {
    logged |= l == "Prometheus metrics on http://127.0.0.1:" + std::to_string(sw.metrics_port()) +
                       "/metrics";
  }
  EXPECT_TRUE(logged);

  const auto collector = SwitchMetrics(sw.host());
  const std::string before = SerializeMetrics(*collector);
  EXPECT_NE(before.find("# TYPE switchml_switch_datagrams_received_total counter"),
            std::string::npos) << before;
  EXPECT_NE(before.find("switchml_switch_datagrams_received_total{io_thread=\"0\"} 0"),
            std::string::npos) << before;
  EXPECT_NE(before.find("# TYPE switchml_switch_slots_in_use gauge"), std::string::npos);
  // The reference session is listed as job 0.
  EXPECT_NE(before.find("switchml_job_info{job=\"0\",name=\"reference session\""),
            std::string::npos) << before;

  // Three 2-byte datagrams: too short to decode (decode_truncated, a drop reason).
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(sw.host().ports()[0]);
  to.sin_addr.s_addr = htonl(0x7F000001);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(::sendto(fd, "xy", 2, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 2);
  }
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (sw.host().server()->counters().core.datagrams_received < 3 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(sw.host().server()->counters().core.datagrams_received, 3u);
  const std::string after = SerializeMetrics(*collector);
  EXPECT_NE(after.find("switchml_switch_datagrams_received_total{io_thread=\"0\"} 3"),
            std::string::npos) << after;
  const std::string drops =
      "switchml_switch_drops_total{io_thread=\"0\",reason=\"decode_truncated\"} 3";
  EXPECT_NE(after.find(drops), std::string::npos) << after;
  EXPECT_NE(
      after.find("switchml_switch_counter_total{io_thread=\"0\",counter=\"decode_truncated\"} 3"),
      std::string::npos) << after;

  // The same over HTTP.
  const std::string http = HttpGet(uint16_t(sw.metrics_port()));
  EXPECT_NE(http.find("200 OK"), std::string::npos) << http;
  EXPECT_NE(http.find(drops), std::string::npos) << http;

  // A second server on the same port: a clear error.
  auto again = MetricsServer::Start("--metrics-listen",
                                    "127.0.0.1:" + std::to_string(sw.metrics_port()), collector);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("--metrics-listen 127.0.0.1:" +
                                          std::to_string(sw.metrics_port()) + ": cannot listen"),
            std::string::npos) << again.status().message();

  const int port = sw.metrics_port();
  sw.Stop();
  EXPECT_EQ(sw.metrics_port(), 0);
  EXPECT_EQ(HttpGet(uint16_t(port)), "") << "still serving after Stop";
}

// A standalone controller's view: two switches (one down), a job re-placed once and running,
// an ended one.
struct ListOnly : controller::UnimplementedSwitchForTests {
  control::JobList ListJobs() const override {
    control::JobList l;
    l.pool_slots = 1000;
    l.free_slots = 900;
    l.largest_free_range = 800;
    control::SwitchHealth up;
    up.address = "10.0.0.10:50099";
    up.for_ms = std::chrono::milliseconds(2500);
    control::SwitchHealth down;
    down.address = "10.0.0.11:50099";
    down.up = false;
    down.jobs_replaced = 1;
    l.switches = {up, down};
    control::JobInfo a;
    a.job_id = 7;
    a.spec.name = "a \"quoted\" \\ name";
    a.spec.num_workers = 4;
    a.state = control::JobState::kRunning;
    a.num_registered = 4;
    a.held_slots.count = 100;
    a.assignment.placement = 2;
    a.assignment.num_shards = 1;
    a.counters.received = 12345;
    a.counters.multicast_rounds = 3000;
    a.counters.duplicates_dropped = 5;
    a.idle_for = std::chrono::milliseconds(1500);
    control::JobInfo b;
    b.job_id = 8;
    b.spec.name = "b";
    b.state = control::JobState::kEnded;
    l.jobs = {a, b};
    return l;
  }
};

TEST(ControllerMetricsTest, SwitchesJobsAndPlacements) {
  ListOnly control;
  const std::string text = SerializeMetrics(*ControllerMetrics(control));
  for (const char* want : {
           "# TYPE switchml_controller_switch_up gauge",
           "switchml_controller_switches 2",
           "switchml_controller_switch_up{switch=\"10.0.0.10:50099\"} 1",
           "switchml_controller_switch_up{switch=\"10.0.0.11:50099\"} 0",
           "switchml_controller_switch_state_seconds{switch=\"10.0.0.10:50099\"} 2.5",
           "# TYPE switchml_controller_switch_jobs_replaced_total counter",
           "switchml_controller_switch_jobs_replaced_total{switch=\"10.0.0.11:50099\"} 1",
           "switchml_controller_jobs{state=\"running\"} 1",
           "switchml_controller_jobs{state=\"ended\"} 1",
           "switchml_controller_jobs{state=\"waiting_for_workers\"} 0",
           "switchml_controller_workers_registered 4",
           "switchml_controller_slots_in_use 100",
           "switchml_controller_largest_free_slot_range 800",
           // The label value escaped as the text format wants (\" and \\).
           "switchml_job_info{job=\"7\",name=\"a \\\"quoted\\\" \\\\ name\",state=\"running\"} 1",
           "switchml_job_info{job=\"8\",name=\"b\",state=\"ended\"} 1",
           "switchml_job_placement{job=\"7\",name=\"a \\\"quoted\\\" \\\\ name\"} 2",
           "switchml_job_datagrams_received_total{job=\"8\",name=\"b\"} 0",
           "switchml_job_aggregations_total{job=\"7\",name=\"a \\\"quoted\\\" \\\\ name\"} 3000",
           "switchml_job_idle_seconds{job=\"7\",name=\"a \\\"quoted\\\" \\\\ name\"} 1.5",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << "missing: " << want << "\n" << text;
  }
}

}  // namespace
}  // namespace switchml::tools
