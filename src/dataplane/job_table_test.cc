// JobTable (pure) and SwitchCore with several jobs: creation limits, slot ranges, token and
// rank checks, per-packet isolation between jobs, drops by reason, idle expiry.
#include "dataplane/job_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "dataplane/switch_core.h"
#include "dataplane/test_packets.h"

namespace switchml::dataplane {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Encode;
using testing::ExpectedResponse;
using testing::Ip;
using testing::OwnedRx;
using testing::Ramp;
using testing::Request;
using testing::Sum;
using transport::Endpoint;
using namespace std::chrono_literals;

using TablePtr = std::shared_ptr<const JobTable>;
const std::string kToken = "secret-token-1";
const TimePoint kT0 = TimePoint{} + 1h;

JobSpec Spec(uint32_t workers, uint32_t slots, std::chrono::milliseconds idle = 0ms) {
  JobSpec s;
  s.num_workers = workers;
  s.num_slots = slots;
  s.elements_per_packet = 64;
  s.idle_timeout = idle;
  return s;
}

JobRegistration Reg(uint32_t job, uint32_t rank, uint32_t ipv4, std::vector<uint16_t> ports,
                    std::string token = kToken) {
  JobRegistration r;
  r.job_id = job;
  r.token = std::move(token);
  r.worker.rank = rank;
  r.worker.ipv4 = ipv4;
  r.worker.udp_ports = std::move(ports);
  return r;
}

// Applies operations to a current table, asserting success where asked.
struct Tables {
  TablePtr t = std::make_shared<const JobTable>(/*pool_slots=*/100, /*max_workers=*/8,
                                                /*max_elements=*/256);
  uint32_t Create(JobSpec spec, TimePoint now = kT0) {
    uint32_t id = 0;
    auto next = JobTable::Create(*t, spec, {}, kToken, now, &id);
    EXPECT_TRUE(next.ok()) << next.status();
    if (next.ok()) t = *next;
    return id;
  }
  Status TryCreate(JobSpec spec, const control::ShardAssignment& a = {}, uint32_t* id_out = nullptr) {
    uint32_t id = 0;
    auto next = JobTable::Create(*t, spec, a, kToken, kT0, &id);
    if (id_out != nullptr) *id_out = id;
    if (next.ok()) t = *next;
    return next.status();
  }
  Status Register(const JobRegistration& reg, JobWorkerGrant* grant = nullptr,
                  TimePoint now = kT0) {
    JobWorkerGrant g;
    auto next = JobTable::Register(*t, reg, grant ? grant : &g, now);
    if (next.ok()) t = *next;
    return next.status();
  }
  // A reference UdpSession registration (job 0).
  Status RegisterSession(const WorkerRegistration& reg) {
    auto next = JobTable::RegisterSessionWorker(*t, reg);
    if (next.ok()) t = *next;
    return next.status();
  }
  Status End(uint32_t id) {
    auto next = JobTable::End(*t, id, "deleted by the test");
    if (next.ok()) t = *next;
    return next.status();
  }
};

TEST(JobTableTest, CreateValidatesEveryFieldAndNamesIt) {
  Tables x;
  struct Case {
    JobSpec spec;
    const char* field;
  };
  JobSpec bad_elements = Spec(2, 10);
  bad_elements.elements_per_packet = 100;
  JobSpec too_big_elements = Spec(2, 10);
  too_big_elements.elements_per_packet = 1024;  // switch max is 256
  JobSpec short_token = Spec(2, 10);
  short_token.token = "short";
  JobSpec space_token = Spec(2, 10);
  space_token.token = "has a space";
  JobSpec long_name = Spec(2, 10);
  long_name.name = std::string(65, 'n');
  JobSpec negative = Spec(2, 10, -1ms);
  const std::vector<Case> cases = {
      {Spec(0, 10), "num_workers"},        {Spec(9, 10), "num_workers"},
      {Spec(2, 0), "num_slots"},           {Spec(2, 101), "num_slots"},
      {bad_elements, "elements_per_packet"}, {too_big_elements, "elements_per_packet"},
      {short_token, "token"},              {space_token, "token"},
      {long_name, "name"},                 {negative, "idle_timeout"},
  };
  for (const Case& c : cases) {
    Status s = x.TryCreate(c.spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
  EXPECT_TRUE(x.t->jobs().empty());
}

TEST(JobTableTest, SlotRangesAreDisjointAndFreedAtOnce) {
  Tables x;
  const uint32_t a = x.Create(Spec(2, 40));
  const uint32_t b = x.Create(Spec(2, 40));
  EXPECT_NE(a, b);
  EXPECT_EQ(x.t->FindJob(a)->slot_base, 0u);
  EXPECT_EQ(x.t->FindJob(b)->slot_base, 40u);
  EXPECT_EQ(x.t->free_slots(), 20u);
  // A job that needs more slots than are free is refused, and nothing changes.
  Status s = x.TryCreate(Spec(2, 30));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("needs 30 slots"));
  EXPECT_THAT(s.message(), HasSubstr("largest free range of the pool is 20"));
  EXPECT_EQ(x.t->jobs().size(), 2u);
  // Ending a job frees its range for the next job at once.
  ASSERT_TRUE(x.End(a).ok());
  EXPECT_EQ(x.t->free_slots(), 60u);
  const uint32_t c = x.Create(Spec(2, 30));
  EXPECT_EQ(x.t->FindJob(c)->slot_base, 0u);
  EXPECT_EQ(x.t->largest_free_range(), 20u);  // [80, 100); [30, 40) is 10
  // The ended job is remembered with its reason, once.
  EXPECT_EQ(x.t->FindJob(a)->state, JobState::kEnded);
  EXPECT_EQ(x.End(a).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(x.End(999).code(), StatusCode::kNotFound);
}

TEST(JobTableTest, RegistrationChecksTokenRankAndAddresses) {
  Tables x;
  const uint32_t a = x.Create(Spec(2, 10));
  const uint32_t b = x.Create(Spec(2, 10));
  const uint32_t ip = Ip(10, 0, 0, 1);

  Status s = x.Register(Reg(a, 0, ip, {5000}, "wrong-token-123"));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("wrong token for job"));
  EXPECT_EQ(x.Register(Reg(77, 0, ip, {5000})).code(), StatusCode::kNotFound);
  s = x.Register(Reg(a, 2, ip, {5000}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank must be < num_workers (2)"));
  s = x.Register(Reg(a, 0, ip, {}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("udp_ports"));
  JobRegistration wrong_n = Reg(a, 0, ip, {5000});
  wrong_n.worker.num_workers = 3;
  // Like an agreed parameter and like job 0's rule (one registration rule for both).
  const Status wrong = x.Register(wrong_n);
  EXPECT_EQ(wrong.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.message(), HasSubstr("num_workers 3 differs from job 1's num_workers 2"));
  EXPECT_EQ(x.t->FindJob(a)->num_registered, 0u);

  JobWorkerGrant grant;
  ASSERT_TRUE(x.Register(Reg(a, 0, ip, {5000, 5001}), &grant).ok());
  EXPECT_EQ(grant.state, JobState::kWaitingForWorkers);
  EXPECT_EQ(grant.switch_info.num_slots, 10u);
  EXPECT_EQ(grant.elements_per_packet, 64u);
  // A retried identical registration is fine and changes nothing.
  ASSERT_TRUE(x.Register(Reg(a, 0, ip, {5000, 5001})).ok());
  EXPECT_EQ(x.t->FindJob(a)->num_registered, 1u);
  // A second rank 0 (from elsewhere) is refused.
  s = x.Register(Reg(a, 0, Ip(10, 0, 0, 2), {5000}));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("rank 0 of job 1 is already registered from 10.0.0.1"));
  // An address of job a's rank 0 cannot join job b.
  s = x.Register(Reg(b, 0, ip, {5001}));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("10.0.0.1:5001 is already registered by rank 0 of job 1"));

  ASSERT_TRUE(x.Register(Reg(a, 1, ip, {6000}), &grant).ok());
  EXPECT_EQ(grant.state, JobState::kRunning);
  EXPECT_EQ(x.t->FindJob(a)->state, JobState::kRunning);
  EXPECT_EQ(x.t->FindJob(b)->state, JobState::kWaitingForWorkers);

  JobTable::Sender snd;
  ASSERT_TRUE(x.t->Find({ip, 5001}, &snd));
  EXPECT_EQ(snd.job->job_id, a);
  EXPECT_EQ(snd.rank, 0u);
  EXPECT_EQ(snd.thread, 1u);
  ASSERT_TRUE(x.t->Find({ip, 6000}, &snd));
  EXPECT_EQ(snd.rank, 1u);
  EXPECT_FALSE(x.t->Find({ip, 6001}, &snd));

  // Ended: registration is refused with the reason; its addresses are free again.
  ASSERT_TRUE(x.End(a).ok());
  s = x.Register(Reg(a, 1, ip, {6000}));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("deleted by the test"));
  ASSERT_TRUE(x.t->Find({ip, 6000}, &snd));  // tombstone
  EXPECT_EQ(snd.job->state, JobState::kEnded);
  ASSERT_TRUE(x.Register(Reg(b, 0, ip, {6000})).ok());
  ASSERT_TRUE(x.t->Find({ip, 6000}, &snd));
  EXPECT_EQ(snd.job->job_id, b);
}

TEST(JobTableTest, RegistrationKeepsTheRuntimeOfEveryJob) {
  Tables x;
  const uint32_t a = x.Create(Spec(2, 10));
  const JobRuntime* rt = x.t->FindJob(a)->runtime.get();
  ASSERT_TRUE(x.Register(Reg(a, 0, 1, {1})).ok());
  const uint32_t b = x.Create(Spec(1, 10));
  ASSERT_TRUE(x.Register(Reg(b, 0, 2, {1})).ok());
  EXPECT_EQ(x.t->FindJob(a)->runtime.get(), rt);  // never reset by others' registrations
}

TEST(JobTableTest, IdleJobsExpireAndActiveOnesDoNot) {
  Tables x;
  const uint32_t idle = x.Create(Spec(1, 10, 100ms));
  const uint32_t busy = x.Create(Spec(1, 10, 100ms));
  const uint32_t forever = x.Create(Spec(1, 10, 0ms));
  std::vector<uint32_t> expired;
  EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + 100ms, &expired), nullptr);  // not longer than
  Bump(x.t->FindJob(busy)->runtime->counters.received);
  EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + 90ms, &expired), nullptr);  // sees the activity
  TablePtr next = JobTable::ExpireIdle(*x.t, kT0 + 150ms, &expired);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(expired, std::vector<uint32_t>{idle});
  const JobTable::Job* j = next->FindJob(idle);
  EXPECT_EQ(j->state, JobState::kEnded);
  EXPECT_EQ(j->runtime, nullptr);
  EXPECT_THAT(j->end_reason, HasSubstr("no datagram from any of its workers for 150 ms"));
  EXPECT_THAT(j->end_reason, HasSubstr("only 0 of 1 ranks had registered"));
  EXPECT_EQ(next->CheckAccess(idle, kToken).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(next->CheckAccess(busy, kToken).ok());
  expired.clear();
  TablePtr later = JobTable::ExpireIdle(*next, kT0 + 10s, &expired);
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(expired, std::vector<uint32_t>{busy});
  EXPECT_TRUE(later->CheckAccess(forever, kToken).ok());
  EXPECT_EQ(later->free_slots(), 90u);
}

TEST(JobTableTest, RegistrationRestartsTheIdleClock) {
  Tables x;
  const uint32_t id = x.Create(Spec(2, 10, 100ms));
  // Rank 1 registers 90 ms after the job was created: the job may idle 100 ms from then on.
  ASSERT_TRUE(x.Register(Reg(id, 0, 1, {1}), nullptr, kT0 + 10ms).ok());
  ASSERT_TRUE(x.Register(Reg(id, 1, 2, {1}), nullptr, kT0 + 90ms).ok());
  std::vector<uint32_t> expired;
  EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + 150ms, &expired), nullptr);
  EXPECT_TRUE(expired.empty());
  TablePtr next = JobTable::ExpireIdle(*x.t, kT0 + 191ms, &expired);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(expired, std::vector<uint32_t>{id});
  EXPECT_THAT(next->FindJob(id)->end_reason, HasSubstr("for 101 ms"));
}

TEST(JobTableTest, EachRankReportsHowLongTheSwitchHasNotHeardFromIt) {
  Tables x;
  const uint32_t id = x.Create(Spec(3, 10, 0ms));
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(x.Register(Reg(id, r, 10 + r, {1}), nullptr, kT0 + 10ms).ok());
  }
  JobRuntime& rt = *x.t->FindJob(id)->runtime;
  std::vector<uint32_t> expired;
  // Ranks 0 and 1 send until 900 ms (on two I/O threads' counters alike); rank 2 never does.
  for (auto t : {100ms, 500ms, 900ms}) {
    Bump(rt.rank_received_of(0)[0]);
    Bump(rt.rank_received_of(0)[1]);
    EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + t, &expired), nullptr);
  }
  const auto ranks = [&](TimePoint now) {
    std::vector<int64_t> idle;
    const JobList list = x.t->List(now);  // (a range-for over the temporary's member would dangle)
    for (const JobWorkerInfo& w : list.jobs.at(0).workers) idle.push_back(w.idle_for.count());
    return idle;
  };
  EXPECT_EQ(ranks(kT0 + 2000ms), (std::vector<int64_t>{1100, 1100, 1990}));
  // A datagram the sweep has not seen yet: that rank is not idle (its count moved).
  Bump(rt.rank_received_of(0)[1]);
  EXPECT_EQ(ranks(kT0 + 2000ms), (std::vector<int64_t>{1100, 0, 1990}));
  EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + 2100ms, &expired), nullptr);
  EXPECT_EQ(ranks(kT0 + 2500ms), (std::vector<int64_t>{1600, 400, 2490}));
  // Re-registering (a retried RPC) counts as hearing from the rank.
  ASSERT_TRUE(x.Register(Reg(id, 2, 12, {1}), nullptr, kT0 + 2400ms).ok());
  EXPECT_EQ(ranks(kT0 + 2500ms).at(2), 100);
}

TEST(JobTableTest, Job0RanksReportHowLongTheSwitchHasNotHeardFromThem) {
  Tables x;
  for (uint32_t r = 0; r < 3; ++r) {
    WorkerRegistration w;
    w.rank = r;
    w.num_workers = 3;
    w.ipv4 = 10 + r;
    w.udp_ports = {1};
    ASSERT_TRUE(x.RegisterSession(w).ok());
  }
  JobRuntime& rt = *x.t->reference().runtime;
  std::vector<uint32_t> expired;
  // The first sweep starts every rank's clock; ranks 0 and 1 send until 900 ms, rank 2 never.
  EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + 10ms, &expired), nullptr);
  for (auto t : {100ms, 500ms, 900ms}) {
    Bump(rt.rank_received_of(0)[0]);
    Bump(rt.rank_received_of(0)[1]);
    EXPECT_EQ(JobTable::ExpireIdle(*x.t, kT0 + t, &expired), nullptr);
  }
  const JobList list = x.t->List(kT0 + 2000ms);
  ASSERT_TRUE(list.reference_session.has_value());
  std::vector<int64_t> idle;
  for (const JobWorkerInfo& w : list.reference_session->workers) idle.push_back(w.idle_for.count());
  EXPECT_EQ(idle, (std::vector<int64_t>{1100, 1100, 1990}));
  EXPECT_TRUE(expired.empty());  // job 0 never expires
}

TEST(JobTableTest, OnlyTheNewestEndedJobsAreRemembered) {
  Tables x;
  uint32_t first = 0;
  for (size_t i = 0; i < JobTable::kMaxEndedJobs + 3; ++i) {
    const uint32_t id = x.Create(Spec(1, 1));
    if (i == 0) first = id;
    ASSERT_TRUE(x.End(id).ok());
  }
  EXPECT_EQ(x.t->jobs().size(), JobTable::kMaxEndedJobs);
  EXPECT_EQ(x.t->FindJob(first), nullptr);
  EXPECT_EQ(x.t->CheckAccess(first, kToken).code(), StatusCode::kNotFound);
  const JobList list = x.t->List(kT0);
  EXPECT_EQ(list.free_slots, 100u);
  EXPECT_EQ(list.jobs.size(), JobTable::kMaxEndedJobs);
  EXPECT_TRUE(list.jobs[0].spec.token.empty());  // never reported
}

// ---- SwitchCore with jobs ----

struct Sent {
  std::vector<uint8_t> bytes;
  Endpoint to;
};

class JobCoreHarness {
 public:
  JobCoreHarness() {
    SwitchConfig c;
    c.num_slots = 64;
    c.max_elements_per_packet = 256;
    c.max_workers = 8;
    core_.emplace(std::move(SwitchCore::Create(c)).value());
    tables_.t = core_->jobs_ptr();
  }
  Tables& tables() { return tables_; }
  void Publish() { core_->AdoptJobs(tables_.t); }
  std::vector<Sent> Burst(std::vector<OwnedRx> in) {
    std::vector<transport::RxDatagram> rx;
    for (auto& d : in) rx.push_back(d.rx());
    core_->ProcessBurst(rx, out_);
    std::vector<Sent> sent;
    for (const auto& tx : out_.datagrams()) {
      sent.push_back(Sent{std::vector<uint8_t>(tx.data, tx.data + tx.size), tx.to});
    }
    return sent;
  }
  const SwitchCounters& counters() const { return core_->counters(); }
  SwitchCore& core() { return *core_; }

 private:
  std::optional<SwitchCore> core_;
  Tables tables_;
  Outbox out_;
};

const uint32_t kA0 = Ip(10, 0, 0, 1), kA1 = Ip(10, 0, 0, 2);
const uint32_t kB0 = Ip(10, 0, 1, 1), kB1 = Ip(10, 0, 1, 2), kB2 = Ip(10, 0, 1, 3);

TEST(SwitchCoreJobsTest, TwoJobsOnTheSameSlotsAggregateSeparatelyAndExactly) {
  JobCoreHarness h;
  const uint32_t a = h.tables().Create(Spec(2, 8));
  const uint32_t b = h.tables().Create(Spec(3, 8));
  ASSERT_TRUE(h.tables().Register(Reg(a, 0, kA0, {7000})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(a, 1, kA1, {7000})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(b, 0, kB0, {7100})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(b, 1, kB1, {7100})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(b, 2, kB2, {7100})).ok());
  h.Publish();

  // Both jobs use job-relative slot 3, set 0, interleaved in one burst.
  const auto va0 = Ramp(64, 1, 1), va1 = Ramp(64, 1000, -3);
  const auto vb0 = Ramp(64, -5, 7), vb1 = Ramp(64, 9, 9), vb2 = Ramp(64, 123456, -1);
  Request ra0{.slot = 3, .values = va0, .exp0 = 1}, ra1{.slot = 3, .values = va1, .exp0 = 4};
  Request rb0{.slot = 3, .values = vb0}, rb1{.slot = 3, .values = vb1, .tsi = 9},
      rb2{.slot = 3, .values = vb2, .exp0 = -2};
  auto sent = h.Burst({{Encode(ra0), {kA0, 7000}},
                       {Encode(rb0), {kB0, 7100}},
                       {Encode(rb1), {kB1, 7100}},
                       {Encode(ra1), {kA1, 7000}},
                       {Encode(rb2), {kB2, 7100}}});
  ASSERT_EQ(sent.size(), 5u);  // 2 copies for job a, then 3 for job b
  const auto expect_a = ExpectedResponse(ra1, Sum({va0, va1}), 4, 0);
  const auto expect_b = ExpectedResponse(rb2, Sum({vb0, vb1, vb2}), 0, 0);
  EXPECT_EQ(sent[0].bytes, expect_a);
  EXPECT_EQ(sent[1].bytes, expect_a);
  EXPECT_EQ(sent[0].to, (Endpoint{kA0, 7000}));
  EXPECT_EQ(sent[1].to, (Endpoint{kA1, 7000}));
  for (int i = 2; i < 5; ++i) EXPECT_EQ(sent[i].bytes, expect_b);
  EXPECT_EQ(sent[2].to, (Endpoint{kB0, 7100}));
  EXPECT_EQ(sent[4].to, (Endpoint{kB2, 7100}));

  const auto ca = h.tables().t->FindJob(a)->runtime->counters.Snapshot();
  const auto cb = h.tables().t->FindJob(b)->runtime->counters.Snapshot();
  EXPECT_EQ(ca.received, 2u);
  EXPECT_EQ(ca.multicast_rounds, 1u);
  EXPECT_EQ(ca.datagrams_sent, 2u);
  EXPECT_EQ(cb.received, 3u);
  EXPECT_EQ(cb.consumed, 2u);
  EXPECT_EQ(cb.datagrams_sent, 3u);
  EXPECT_EQ(h.counters().multicast_rounds, 2u);
  // The reference session's aggregator was never touched.
  EXPECT_EQ(h.core().aggregator().Inspect(3, 0).num_elements, 0u);
}

TEST(SwitchCoreJobsTest, DropsAreCountedByReasonAndDisturbNoOtherJob) {
  JobCoreHarness h;
  const uint32_t a = h.tables().Create(Spec(2, 8));
  const uint32_t waiting = h.tables().Create(Spec(2, 8));
  const uint32_t gone = h.tables().Create(Spec(1, 8));
  ASSERT_TRUE(h.tables().Register(Reg(a, 0, kA0, {7000})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(a, 1, kA1, {7000})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(waiting, 0, kB0, {7100})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(gone, 0, kB1, {7100})).ok());
  ASSERT_TRUE(h.tables().End(gone).ok());
  h.Publish();

  // Rank 0 of job a starts a round in slot 1.
  const auto v0 = Ramp(64, 10, 1), v1 = Ramp(64, 20, 2);
  EXPECT_TRUE(h.Burst({{Encode({.slot = 1, .values = v0}), {kA0, 7000}}}).empty());
  auto sent = h.Burst({
      {Encode({.slot = 1, .values = Ramp(64, 666, 0)}), {kA0, 7001}},   // unregistered port
      {Encode({.slot = 1, .values = Ramp(64, 666, 0)}), {kB2, 7100}},   // unregistered host
      {Encode({.slot = 8, .values = Ramp(64, 666, 0)}), {kA1, 7000}},   // slot outside job a
      {Encode({.slot = 1, .values = Ramp(256, 666, 0)}), {kA1, 7000}},  // > 64 elements
      {Encode({.slot = 1, .values = Ramp(64, 666, 0)}), {kB0, 7100}},   // job not running
      {Encode({.slot = 1, .values = Ramp(64, 666, 0)}), {kB1, 7100}},   // job ended
  });
  EXPECT_TRUE(sent.empty());
  const SwitchCounters& c = h.counters();
  EXPECT_EQ(c.unknown_sender, 2u);
  EXPECT_EQ(c.job_slot_out_of_range, 1u);
  EXPECT_EQ(c.too_large, 1u);
  EXPECT_EQ(c.job_not_running, 1u);
  EXPECT_EQ(c.job_ended, 1u);
  const auto ca = h.tables().t->FindJob(a)->runtime->counters.Snapshot();
  EXPECT_EQ(ca.slot_out_of_range, 1u);
  EXPECT_EQ(ca.too_large, 1u);
  EXPECT_EQ(h.tables().t->FindJob(waiting)->runtime->counters.Snapshot().not_running, 1u);
  // Job a's round is intact: rank 1's real packet completes it with the exact sum.
  sent = h.Burst({{Encode({.slot = 1, .values = v1}), {kA1, 7000}}});
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].bytes, ExpectedResponse({.slot = 1}, Sum({v0, v1}), 0, 0));
}

TEST(SwitchCoreJobsTest, JobsAndTheReferenceSessionCoexist) {
  JobCoreHarness h;
  WorkerRegistration ref;
  ref.rank = 0;
  ref.num_workers = 1;
  ref.ipv4 = Ip(10, 9, 9, 9);
  ASSERT_TRUE(h.tables().RegisterSession(ref).ok());  // job 0, in the same table
  const uint32_t a = h.tables().Create(Spec(1, 4));
  ASSERT_TRUE(h.tables().Register(Reg(a, 0, kA0, {7000})).ok());
  h.Publish();
  const auto v = Ramp(64, 3, 3), w = Ramp(64, 4, 4);
  auto sent = h.Burst({{Encode({.slot = 2, .values = v}), {ref.ipv4, 1234}},
                       {Encode({.slot = 2, .values = w}), {kA0, 7000}},
                       {Encode({.slot = 40, .values = w}), {ref.ipv4, 1234}}});
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].bytes, ExpectedResponse({.slot = 2}, v, 0, 0));
  EXPECT_EQ(sent[0].to, (Endpoint{ref.ipv4, 1234}));
  EXPECT_EQ(sent[1].bytes, ExpectedResponse({.slot = 2}, w, 0, 0));
  EXPECT_EQ(sent[1].to, (Endpoint{kA0, 7000}));
  EXPECT_EQ(sent[2].to, (Endpoint{ref.ipv4, 1234}));  // slot 40 < 64: the session's range
}

// Job 0 is a row of the same table: found by the same lookup, counted per job like any other,
// but invisible to the job API, and a service job's (ipv4, port) wins over it.
TEST(SwitchCoreJobsTest, TheReferenceSessionIsJobZeroOfTheOneTable) {
  JobCoreHarness h;
  WorkerRegistration r0;
  r0.rank = 0;
  r0.num_workers = 2;
  r0.ipv4 = kA0;
  r0.udp_ports = {7000};
  WorkerRegistration r1 = r0;
  r1.rank = 1;
  r1.ipv4 = kB0;
  r1.udp_ports = {};  // reference mode: any port of kB0
  ASSERT_TRUE(h.tables().RegisterSession(r0).ok());
  ASSERT_TRUE(h.tables().RegisterSession(r1).ok());
  const uint32_t a = h.tables().Create(Spec(1, 4));
  ASSERT_TRUE(h.tables().Register(Reg(a, 0, kB0, {7100})).ok());  // on job 0's host
  h.Publish();

  const JobTable& t = *h.tables().t;
  EXPECT_EQ(t.reference().job_id, 0u);
  EXPECT_EQ(t.reference().state, JobState::kRunning);
  EXPECT_EQ(t.reference().spec.num_slots, 64u);  // the whole pool
  EXPECT_EQ(t.jobs().size(), 1u);                // job 0 is not a service job
  EXPECT_EQ(t.FindJob(0), nullptr);
  EXPECT_EQ(t.CheckAccess(0, "").code(), StatusCode::kNotFound);
  EXPECT_EQ(JobTable::End(t, 0, "no").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.List(kT0).jobs.size(), 1u);
  // Listed on its own (issue #18: operators could not see it): the reference session.
  const std::optional<JobInfo> ref = t.List(kT0).reference_session;
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->job_id, 0u);
  EXPECT_EQ(ref->spec.name, "reference session");
  EXPECT_EQ(ref->state, JobState::kRunning);
  EXPECT_EQ(ref->num_registered, 2u);
  EXPECT_EQ(ref->workers.size(), 2u);
  EXPECT_EQ(ref->spec.num_slots, 64u);
  EXPECT_EQ(t.free_slots(), 60u);  // job 0 reserves nothing
  JobTable::Sender s;
  ASSERT_TRUE(t.Find({kB0, 7100}, &s));
  EXPECT_EQ(s.job->job_id, a);  // the service job's port beats job 0's host
  ASSERT_TRUE(t.Find({kB0, 5555}, &s));
  EXPECT_EQ(s.job, &t.reference());
  EXPECT_EQ(s.rank, 1u);
  EXPECT_EQ(s.thread, kNoThread);

  // Out-of-range slots keep their two switch-wide counters.
  EXPECT_TRUE(h.Burst({{Encode({.slot = 64, .values = Ramp(64, 0, 1)}), {kA0, 7000}},
                       {Encode({.slot = 4, .values = Ramp(64, 0, 1)}), {kB0, 7100}}})
                  .empty());
  EXPECT_EQ(h.counters().slot_out_of_range, 1u);
  EXPECT_EQ(h.counters().job_slot_out_of_range, 1u);
  // A round of job 0, counted per job too; the service job's single worker answers itself.
  const auto v = Ramp(64, 5, 1), w = Ramp(64, 7, 2);
  auto sent = h.Burst({{Encode({.slot = 3, .values = v}), {kA0, 7000}},
                       {Encode({.slot = 3, .values = w}), {kB0, 4321}},
                       {Encode({.slot = 3, .values = w}), {kB0, 7100}}});
  ASSERT_EQ(sent.size(), 3u);
  // Completed by a reference-mode sender (thread unknown): everyone gets the triggering port.
  EXPECT_EQ(sent[0].to, (Endpoint{kA0, 4321}));
  EXPECT_EQ(sent[1].to, (Endpoint{kB0, 4321}));
  EXPECT_EQ(sent[0].bytes, ExpectedResponse({.slot = 3}, Sum({v, w}), 0, 0));
  EXPECT_EQ(sent[2].bytes, ExpectedResponse({.slot = 3}, w, 0, 0));
  const JobRuntime& rt = *t.reference().runtime;
  const JobCounters c0 = rt.counters.Snapshot();
  EXPECT_EQ(c0.received, 3u);
  EXPECT_EQ(c0.slot_out_of_range, 1u);
  EXPECT_EQ(c0.multicast_rounds, 1u);
  EXPECT_EQ(c0.datagrams_sent, 2u);
  EXPECT_EQ(rt.rank_received[1].load(), 1u);
  // The list reports the same counters for job 0.
  const JobCounters listed = h.tables().t->List(kT0).reference_session->counters;
  EXPECT_EQ(listed.received, 3u);
  EXPECT_EQ(listed.multicast_rounds, 1u);
  EXPECT_EQ(listed.slot_out_of_range, 1u);

  // Rank 0 starts a new session: job 0 gets a new runtime, with zeroed state and per-rank
  // counts, that counts on in the same job counters; the old runtime is left as it was (a
  // thread still on the old table writes only the old state).
  EXPECT_TRUE(h.Burst({{Encode({.slot = 5, .values = v}), {kA0, 7000}}}).empty());
  ASSERT_EQ(h.core().aggregator().Inspect(5, 0).counter, 1u);
  const std::shared_ptr<JobRuntime> old_rt = t.reference().runtime;
  ASSERT_TRUE(h.tables().RegisterSession(r0).ok());
  EXPECT_EQ(h.tables().t->reference().epoch, 2u);
  EXPECT_EQ(h.core().aggregator().Inspect(5, 0).counter, 1u);  // not adopted yet
  h.Publish();
  const JobRuntime& new_rt = *h.tables().t->reference().runtime;
  EXPECT_NE(&new_rt, old_rt.get());
  EXPECT_EQ(&h.core().aggregator(), &new_rt.aggregator);
  EXPECT_EQ(h.core().aggregator().Inspect(5, 0).counter, 0u);
  EXPECT_EQ(h.core().aggregator().num_workers(), 2u);
  EXPECT_EQ(old_rt->aggregator.Inspect(5, 0).counter, 1u);  // not cleared in place
  EXPECT_EQ(new_rt.rank_received[0].load(), 0u);
  EXPECT_EQ(new_rt.counters.Snapshot().received, 4u);  // job counters span the switch's life
  EXPECT_TRUE(h.Burst({{Encode({.slot = 5, .values = v}), {kA0, 7000}}}).empty());
  EXPECT_EQ(new_rt.Counters().received, 5u);
  EXPECT_EQ(new_rt.RankReceived(0), 1u);
  EXPECT_EQ(h.tables().t->List(kT0).reference_session->counters.received, 5u);
  EXPECT_EQ(h.core().aggregator().Inspect(5, 0).counter, 1u);
}

// The number of live jobs is bounded (each one owns an aggregator and index entries); an ended
// job frees its place.
TEST(JobTableTest, LiveJobsAreBounded) {
  TablePtr t = std::make_shared<const JobTable>(/*pool_slots=*/2 * JobTable::kMaxLiveJobs,
                                                /*max_workers=*/8, /*max_elements=*/256);
  uint32_t id = 0;
  for (size_t i = 0; i < JobTable::kMaxLiveJobs; ++i) {
    auto next = JobTable::Create(*t, Spec(1, 1), {}, kToken, kT0, &id);
    ASSERT_TRUE(next.ok()) << i << ": " << next.status();
    t = *next;
  }
  auto full = JobTable::Create(*t, Spec(1, 1), {}, kToken, kT0, &id);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("1024 live jobs, the most it keeps"));
  EXPECT_EQ(t->free_slots(), JobTable::kMaxLiveJobs);  // slots were not the limit
  auto ended = JobTable::End(*t, id, "deleted");
  ASSERT_TRUE(ended.ok());
  EXPECT_TRUE(JobTable::Create(**ended, Spec(1, 1), {}, kToken, kT0, &id).ok());
}

// A token chosen at create must be unique among live jobs: a duplicate is refused without
// naming the job that holds it, and is free again once that job ended.
TEST(JobTableTest, AChosenTokenIsUniqueAmongLiveJobs) {
  Tables x;
  JobSpec chosen = Spec(1, 4);
  chosen.token = "operator-chosen-token";
  const uint32_t a = x.Create(chosen);
  const uint32_t b = x.Create(Spec(1, 4));  // a generated token (kToken here)
  Status dup = x.TryCreate(chosen);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists) << dup;
  EXPECT_THAT(dup.message(), HasSubstr("token"));
  EXPECT_THAT(dup.message(), Not(HasSubstr("job " + std::to_string(a))));
  // Choosing the token another job was given is refused too.
  JobSpec taken = Spec(1, 4);
  taken.token = kToken;
  EXPECT_EQ(x.TryCreate(taken).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(x.t->jobs().size(), 2u);  // nothing was added
  // Once the holder ended, the token may be chosen again.
  ASSERT_TRUE(x.End(a).ok());
  const uint32_t c = x.Create(chosen);
  EXPECT_NE(c, a);
  EXPECT_EQ(x.t->FindJob(c)->spec.token, chosen.token);
  ASSERT_TRUE(x.End(b).ok());
  EXPECT_TRUE(x.TryCreate(taken).ok());
}


// ---------------------------------------------------------------------------------------------
// A leaf of a two-level job (control::Uplink).

const uint32_t kParent = Ip(10, 9, 9, 9);
constexpr uint16_t kParentPort = 48864;

control::ShardAssignment LeafOf(uint32_t parent_ipv4, uint16_t port = kParentPort) {
  control::ShardAssignment a;
  a.uplink = {.parent_ipv4 = parent_ipv4, .parent_ports = {port}, .parent_job_id = 5, .leaf = 1,
              .total_workers = 6};
  return a;
}

TEST(JobTableLeafTest, ParentEndpointIsCheckedAndIsTheParentsAlone) {
  Tables x;
  EXPECT_THAT(x.TryCreate(Spec(2, 8), LeafOf(kParent, 0)).message(),
              HasSubstr("parent_ports[0] must not be 0"));
  control::ShardAssignment none = LeafOf(kParent);
  none.uplink.parent_ports.clear();
  Status s = x.TryCreate(Spec(2, 8), none);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("parent_ports must list"));
  uint32_t leaf = 0;
  ASSERT_TRUE(x.TryCreate(Spec(2, 8), LeafOf(kParent), &leaf).ok());
  // Datagrams from the parent are the leaf job's totals.
  JobTable::Sender sender;
  ASSERT_TRUE(x.t->Find({kParent, kParentPort}, &sender));
  EXPECT_EQ(sender.rank, JobTable::kParentRank);
  EXPECT_EQ(sender.job->job_id, leaf);
  EXPECT_FALSE(x.t->Find({kParent, kParentPort + 1}, &sender));
  // A second leaf job with the same parent could not tell its totals apart.
  s = x.TryCreate(Spec(2, 8), LeafOf(kParent));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("already has the parent"));
  // No worker of any job may register the parent's address...
  const uint32_t other = x.Create(Spec(2, 8));
  for (uint32_t job : {leaf, other}) {
    s = x.Register(Reg(job, 0, kParent, {kParentPort}));
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << "job " << job;
    EXPECT_THAT(s.message(), HasSubstr("is the parent switch of job " + std::to_string(leaf)));
  }
  // ...and a parent cannot be a registered worker's address.
  ASSERT_TRUE(x.Register(Reg(other, 0, kA0, {7000})).ok());
  s = x.TryCreate(Spec(2, 8), LeafOf(kA0, 7000));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("rank 0 of job " + std::to_string(other)));
  // Once the leaf job ends, its parent is free for another.
  ASSERT_TRUE(x.End(leaf).ok());
  EXPECT_FALSE(x.t->Find({kParent, kParentPort}, &sender));
  EXPECT_TRUE(x.TryCreate(Spec(2, 8), LeafOf(kParent)).ok());
}

TEST(JobTableLeafTest, ALeafIsServedByEveryIoThreadAsAnyJobAndTakesTotalsOnEveryParentPort) {
  auto t = std::make_shared<const JobTable>(100, 8, 256, AggregatorOptions{}, /*io_threads=*/4);
  uint32_t leaf = 0, plain = 0;
  JobSpec spec = Spec(2, 8);
  control::ShardAssignment up = LeafOf(kParent);
  up.uplink.parent_ports = {kParentPort, kParentPort + 5};
  auto t1 = JobTable::Create(*t, spec, up, kToken, kT0, &leaf);
  ASSERT_TRUE(t1.ok()) << t1.status();
  auto t2 = JobTable::Create(**t1, spec, {}, kToken, kT0, &plain);
  ASSERT_TRUE(t2.ok()) << t2.status();
  for (uint32_t job : {leaf, plain}) {
    JobRegistration r = Reg(job, 0, job == leaf ? kA0 : kB0, {7000, 7001, 7002, 7003});
    r.worker.num_worker_threads = 4;
    r.worker.window_packets = 8;
    JobWorkerGrant g;
    auto next = JobTable::Register(**t2, r, &g, kT0);
    ASSERT_TRUE(next.ok()) << next.status();
    t2 = next;
  }
  const JobTable::Job& l = *(*t2)->FindJob(leaf);
  const JobTable::Job& p = *(*t2)->FindJob(plain);
  EXPECT_EQ(l.io_threads, 4u);
  EXPECT_EQ(p.io_threads, 4u);
  for (uint32_t slot = 0; slot < 8; ++slot) {
    for (uint32_t io = 0; io < 4; ++io) {
      EXPECT_EQ(l.OwnsSlot(io, slot), p.OwnsSlot(io, slot)) << slot << " " << io;
      EXPECT_EQ(l.OwnsSlot(io, slot), io == slot / 2) << slot << " " << io;
    }
  }
  // Each slot goes up to the parent port of the parent I/O thread that owns it (2 ports: the
  // first two threads' slots to the first, the others to the second).
  for (uint32_t slot = 0; slot < 8; ++slot) {
    EXPECT_EQ(l.uplink().PortFor(l.layout, slot), slot < 4 ? kParentPort : kParentPort + 5)
        << slot;
  }
  JobTable::Sender sender;
  for (uint16_t port : {kParentPort, uint16_t(kParentPort + 5)}) {
    ASSERT_TRUE((*t2)->Find({kParent, port}, &sender)) << port;
    EXPECT_EQ(sender.rank, JobTable::kParentRank);
    EXPECT_EQ(sender.job->job_id, leaf);
  }
}

// A leaf registers at its parent with the workers' threads, several of them on one port when
// it has fewer I/O threads (control::LeafRegistration); a worker's ports must differ.
TEST(JobTableLeafTest, OnlyALeafRegistrationMayRepeatAPort) {
  Tables x;
  const uint32_t job = x.Create(Spec(2, 8));
  JobRegistration r = Reg(job, 0, kA0, {7000, 7000});
  r.worker.num_worker_threads = 2;
  r.worker.window_packets = 8;
  Status s = x.Register(r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("udp_ports[1] = 7000 repeats udp_ports[0]"));
  r.worker.leaf = true;
  EXPECT_TRUE(x.Register(r).ok());
}

// The leaf's packet path, datagram by datagram: a completed round goes up, a duplicate while the
// parent's total is outstanding goes up again, the total comes down to every worker, and
// anything else from the parent is stale.
TEST(SwitchCoreLeafTest, RoundsGoUpAndTotalsComeDown) {
  JobCoreHarness h;
  uint32_t leaf = 0;
  ASSERT_TRUE(h.tables().TryCreate(Spec(2, 8), LeafOf(kParent), &leaf).ok());
  ASSERT_TRUE(h.tables().Register(Reg(leaf, 0, kA0, {7000})).ok());
  ASSERT_TRUE(h.tables().Register(Reg(leaf, 1, kA1, {7000})).ok());
  h.Publish();
  const Endpoint parent{kParent, kParentPort};
  const auto v0 = Ramp(64, 10, 1), v1 = Ramp(64, 20, 2), total = Ramp(64, 1000, 7);
  EXPECT_TRUE(h.Burst({{Encode({.slot = 2, .set = 1, .values = v0, .exp0 = 3, .tsi = 9}),
                        {kA0, 7000}}}).empty());
  auto sent = h.Burst({{Encode({.slot = 2, .set = 1, .values = v1, .exp0 = 5, .tsi = 9}),
                        {kA1, 7000}}});
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, parent);
  // Up: the leaf's partial sums and max exponent, with the completing packet's tag.
  EXPECT_EQ(sent[0].bytes, ExpectedResponse({.slot = 2, .set = 1, .tsi = 9}, Sum({v0, v1}), 5, 0));
  // Rank 0 times out: its duplicate sends the partial up again; nothing goes to a worker.
  sent = h.Burst({{Encode({.slot = 2, .set = 1, .values = v0, .tsi = 9}), {kA0, 7000}}});
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, parent);
  EXPECT_EQ(sent[0].bytes, ExpectedResponse({.slot = 2, .set = 1, .tsi = 9}, Sum({v0, v1}), 5, 0));
  // Totals for rounds nobody holds, from the parent, change nothing.
  sent = h.Burst({
      {Encode({.slot = 2, .set = 0, .values = total, .tsi = 9}), parent},   // other set
      {Encode({.slot = 9, .set = 1, .values = total, .tsi = 9}), parent},   // outside the job
      {Encode({.slot = 2, .set = 1, .values = Ramp(256, 1, 1)}), parent},   // too large
  });
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(h.counters().parent_stale, 3u);
  // The total: stored and multicast to both workers with the parent's exponent.
  sent = h.Burst({{Encode({.slot = 2, .set = 1, .values = total, .exp0 = 8, .tsi = 9}), parent}});
  ASSERT_EQ(sent.size(), 2u);
  const auto want = ExpectedResponse({.slot = 2, .set = 1, .tsi = 9}, total, 8, 0);
  EXPECT_EQ(sent[0].bytes, want);
  EXPECT_EQ(sent[1].bytes, want);
  std::set<std::pair<uint32_t, uint16_t>> to = {{sent[0].to.ipv4, sent[0].to.port},
                                                 {sent[1].to.ipv4, sent[1].to.port}};
  EXPECT_EQ(to, (std::set<std::pair<uint32_t, uint16_t>>{{kA0, 7000}, {kA1, 7000}}));
  // The parent repeats it (it answered the resent partial): stale. A worker's duplicate now
  // gets the total as a unicast.
  EXPECT_TRUE(h.Burst({{Encode({.slot = 2, .set = 1, .values = total, .exp0 = 8, .tsi = 9}),
                        parent}}).empty());
  sent = h.Burst({{Encode({.slot = 2, .set = 1, .values = v1, .tsi = 9}), {kA1, 7000}}});
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, (Endpoint{kA1, 7000}));
  EXPECT_EQ(sent[0].bytes, want);
  const SwitchCounters& c = h.counters();
  EXPECT_EQ(c.uplink_sent, 1u);
  EXPECT_EQ(c.uplink_resent, 1u);
  EXPECT_EQ(c.parent_stale, 4u);
  EXPECT_EQ(c.multicast_rounds, 1u);
  EXPECT_EQ(c.unicast_replies, 1u);
  EXPECT_EQ(c.consumed, 1u);
  // Every datagram in one bucket (switch_counters.h).
  EXPECT_EQ(c.datagrams_received, c.consumed + c.uplink_sent + c.uplink_resent + c.parent_stale +
                                      c.multicast_rounds + c.unicast_replies);
  // The job's own share of them.
  const JobCounters jc = h.tables().t->FindJob(leaf)->runtime->Counters();
  EXPECT_EQ(jc.uplink_sent, 1u);
  EXPECT_EQ(jc.uplink_resent, 1u);
  EXPECT_EQ(jc.parent_stale, 4u);
  EXPECT_EQ(jc.multicast_rounds, 1u);
  EXPECT_EQ(jc.received, c.datagrams_received);
}

}  // namespace
}  // namespace switchml::dataplane
