// RenderTop: what `switchml top` shows from two snapshots (rates over the time between them).
#include "top_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace switchml::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

control::JobInfo Job(uint32_t id, uint64_t received, uint64_t rounds, uint64_t dups) {
  control::JobInfo j;
  j.job_id = id;
  j.spec.num_workers = 4;
  j.spec.num_slots = 128;
  j.spec.name = "train-" + std::to_string(id);
  j.num_registered = 3;
  j.state = control::JobState::kRunning;
  j.counters.received = received;
  j.counters.multicast_rounds = rounds;
  j.counters.duplicates_dropped = dups;
  j.idle_for = std::chrono::milliseconds(1500);
  return j;
}

TopSnapshot Snapshot(double t_s, uint64_t rx, uint64_t job_rx) {
  TopSnapshot s;
  s.when = std::chrono::steady_clock::time_point{} +
           std::chrono::milliseconds(int64_t(t_s * 1000));
  s.list.pool_slots = 8192;
  s.list.free_slots = 8064;
  s.list.jobs = {Job(7, job_rx, job_rx / 4, job_rx / 100)};
  s.counters = {{"switch0.datagrams_received", rx}, {"switch0.datagrams_sent", 2 * rx},
                {"switch0.multicast_rounds", rx / 4}, {"switch0.duplicates_dropped", rx / 100},
                {"switch0.unknown_sender", 5}};
  control::SwitchHealth h;
  h.address = "10.0.0.10:50099";
  h.up = true;
  h.for_ms = std::chrono::milliseconds(90000);
  control::SwitchHealth down;
  down.address = "10.0.0.11:50099";
  down.up = false;
  down.last_error = "connection refused";
  s.list.switches = {h, down};
  return s;
}

TEST(TopViewTest, FirstScreenHasNoRatesAndListsSwitchesAndJobs) {
  const std::string screen = RenderTop(nullptr, Snapshot(0, 1000, 800), "ctl:50099");
  EXPECT_THAT(screen, HasSubstr("controller ctl:50099, 1 live job(s), slot pool 8064 of 8192 free"));
  EXPECT_THAT(screen, HasSubstr("rates from the next refresh on"));
  EXPECT_THAT(screen, HasSubstr("switch0"));
  EXPECT_THAT(screen, HasSubstr("up 1.5m 10.0.0.10:50099"));
  // The unreachable switch has no counters: its health alone, with the error.
  EXPECT_THAT(screen, HasSubstr("DOWN 0.0s 10.0.0.11:50099: connection refused"));
  EXPECT_THAT(screen, HasSubstr("     7 running                3/4       128        -        -        -    1.5s  train-7"));
}

TEST(TopViewTest, RatesAreDeltasOverTheTimeBetweenSnapshots) {
  const TopSnapshot a = Snapshot(10, 1000, 800);
  const TopSnapshot b = Snapshot(12, 5000, 4800);  // 2 s later
  const std::string screen = RenderTop(&a, b, "ctl:50099");
  EXPECT_THAT(screen, Not(HasSubstr("rates from the next refresh on")));
  // Switch: (5000-1000)/2 = 2.0k in, 4.0k out, 500 rounds/s, (50-10)/2 = 20 drops/s (the
  // unknown_sender drops did not move).
  EXPECT_THAT(screen, HasSubstr("switch0        2.0k     4.0k      500       20        -"));
  // Job: (4800-800)/2 = 2.0k datagrams/s, 500 rounds/s, (48-8)/2 = 20 drops/s.
  EXPECT_THAT(screen, HasSubstr("     7 running                3/4       128     2.0k      500       20"));
}

TEST(TopViewTest, EndedJobsShowTheirReasonAndLeavesAreMarked) {
  TopSnapshot s = Snapshot(0, 0, 0);
  s.list.jobs[0].state = control::JobState::kEnded;
  s.list.jobs[0].end_reason = "idle for 600000 ms";
  control::JobInfo leaf = Job(9, 0, 0, 0);
  leaf.assignment.uplink.parent_ipv4 = 0x0A000001;
  leaf.assignment.uplink.parent_ports = {48864};
  leaf.assignment.uplink.leaf = 2;
  s.list.jobs.push_back(leaf);
  s.counters.push_back({"switch0.uplink_sent", 10});
  const std::string screen = RenderTop(nullptr, s, "ctl:50099");
  EXPECT_THAT(screen, HasSubstr("ended"));
  EXPECT_THAT(screen, HasSubstr("idle for 600000 ms"));
  EXPECT_THAT(screen, HasSubstr("train-9 [leaf 2]"));
  EXPECT_THAT(screen, HasSubstr("1 live job(s)"));
}

TEST(TopViewTest, NoJobsSaysSo) {
  TopSnapshot s;
  s.counters = {{"datagrams_received", 0}};
  const std::string screen = RenderTop(nullptr, s, "127.0.0.1:50099");
  EXPECT_THAT(screen, HasSubstr("(no jobs)"));
  EXPECT_THAT(screen, HasSubstr("switch "));  // a switch's own controller: unprefixed names
}

}  // namespace
}  // namespace switchml::tools
