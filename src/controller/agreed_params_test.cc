// Agreed job parameters at registration: every worker of a session or job must register the
// same num_workers, protocol_version, num_worker_threads, window_packets and
// elements_per_packet; the first registration fixes them, any other value is refused with
// FAILED_PRECONDITION naming the field, both values and both ranks, and the ranks waiting in
// the session's/job's barrier get the same message at once. Over gRPC on 127.0.0.1 against a
// real SwitchServer, with the embedded controller and with a standalone one (RemoteSwitches).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/job_client.h"
#include "controller/remote_switches.h"
#include "rendezvous/session_client.h"
#include "controller/session_service.h"
#include "controller/local_switch_for_tests.h"
#include "dataplane/switch_server.h"
#include "switchml/context.h"
#include "transport/udp_channel.h"

namespace switchml::controller {

using control::JobInfo;
using control::JobRegistration;
using control::JobSpec;
using control::JobState;
using control::kClientProtocolVersion;
using control::WorkerRegistration;
using rendezvous::JobClient;
using rendezvous::JobBootstrap;
using rendezvous::SessionClient;
using rendezvous::Bootstrap;
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kLocalhost = 0x7F000001;
// The operator credential the controllers are started with (a standalone controller presents
// it to the switch).
constexpr char kOperatorToken[] = "operator-token-for-tests-0123";

// The parameters our client registers by default (Options' defaults).
WorkerRegistration Ours(uint32_t rank, uint32_t num_workers, uint16_t port) {
  WorkerRegistration r;
  r.rank = rank;
  r.num_workers = num_workers;
  r.ipv4 = kLocalhost;
  r.udp_ports = {port};
  r.protocol_version = kClientProtocolVersion;
  r.num_worker_threads = 1;
  r.window_packets = 8;
  r.elements_per_packet = 64;
  return r;
}

struct FieldCase {
  const char* field;
  uint32_t WorkerRegistration::*member;
  uint32_t other;  // rank 1's value (rank 0 registers Ours())
  uint32_t base;
};
// num_workers is checked too, but the session reports it with its own message (below).
const FieldCase kFieldCases[] = {
    {"protocol_version", &WorkerRegistration::protocol_version, 0, kClientProtocolVersion},
    {"num_worker_threads", &WorkerRegistration::num_worker_threads, 2, 1},
    {"window_packets", &WorkerRegistration::window_packets, 16, 8},
    {"elements_per_packet", &WorkerRegistration::elements_per_packet, 256, 64},
};

std::string Expected(const FieldCase& c, const std::string& scope, const std::string& kind) {
  return "rank 1 registered " + std::string(c.field) + "=" + std::to_string(c.other) +
         ", but rank 0 registered " + c.field + "=" + std::to_string(c.base) + " for " + scope +
         "; every worker of a " + kind + " must use the same value";
}

class AgreedParamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StartLocalSwitchForTests(64);
    ASSERT_TRUE(server.ok()) << server.status();
    switch_ = std::move(*server);
    auto ctl = StartLocalControllerForTests(switch_.get(), kOperatorToken);
    ASSERT_TRUE(ctl.ok()) << ctl.status();
    controller_ = std::move(*ctl);
    switch_address_ = "127.0.0.1:" + std::to_string(controller_->port());
    address_ = switch_address_;
  }
  void TearDown() override {
    if (standalone_) standalone_->Shutdown();
    if (controller_) controller_->Shutdown();
    if (switch_) switch_->Stop();
  }

  // Puts a standalone controller (RemoteSwitches) in front of the switch; address_ becomes
  // its address.
  void UseStandaloneController() {
    auto remote = RemoteSwitches::Connect({switch_address_}, 3s, kOperatorToken);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = std::move(*remote);
    auto ctl = StartLocalControllerForTests(remote_.get(), kOperatorToken);
    ASSERT_TRUE(ctl.ok()) << ctl.status();
    standalone_ = std::move(*ctl);
    address_ = "127.0.0.1:" + std::to_string(standalone_->port());
  }

  // A job created on the switch itself (its id is the same through a standalone controller
  // driving only this switch: switch index 0).
  JobInfo CreateJob(uint32_t workers) {
    JobSpec spec;
    spec.num_workers = workers;
    spec.num_slots = 16;
    spec.elements_per_packet = 256;
    auto job = switch_->CreateJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobInfo{};
  }

  std::unique_ptr<SessionClient> Session() {
    auto c = SessionClient::Connect(address_, 3s);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  std::unique_ptr<JobClient> Jobs() {
    auto c = JobClient::Connect(address_, 3s);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  Options WorkerOptions(uint32_t rank, uint32_t num_workers, const JobInfo* job) const {
    Options o;
    o.rank = rank;
    o.num_workers = num_workers;
    o.controller_address = address_;
    if (job != nullptr) {
      o.job_id = job->job_id;
      o.job_token = job->token;
    }
    o.window_packets = 8;
    o.elements_per_packet = 64;
    o.call_timeout = 2s;
    o.rpc_timeout = 5s;
    return o;
  }

  // Creates one Context per options concurrently; returns each one's status.
  std::vector<Status> CreateAll(const std::vector<Options>& opts) {
    std::vector<std::future<StatusOr<std::unique_ptr<Context>>>> f;
    for (const Options& o : opts) {
      f.push_back(std::async(std::launch::async, [o] { return Context::Create(o); }));
    }
    std::vector<Status> out;
    for (auto& x : f) out.push_back(x.get().status());
    return out;
  }

  // Two workers whose options differ by `change` applied to rank 1: both fail by the refusal,
  // not by the 5 s rpc_timeout; rank 1 (refused) names `field`, rank 0 (waiting in the
  // barrier) too. FAILED_PRECONDITION naming the refusal on both says so (had rank 0 waited
  // out its deadline it would get DEADLINE_EXCEEDED): no bound on the clock is needed.
  void ExpectBothFail(const JobInfo* job, const std::function<void(Options&)>& change,
                      const std::string& field) {
    std::vector<Options> opts = {WorkerOptions(0, 2, job), WorkerOptions(1, 2, job)};
    change(opts[1]);
    const std::vector<Status> s = CreateAll(opts);
    for (uint32_t r = 0; r < 2; ++r) {
      EXPECT_EQ(s[r].code(), StatusCode::kFailedPrecondition) << "rank " << r << ": " << s[r];
      EXPECT_THAT(s[r].message(), HasSubstr(field)) << "rank " << r;
      EXPECT_THAT(s[r].message(), HasSubstr("rank 1 registered")) << "rank " << r;
    }
  }

  std::unique_ptr<dataplane::SwitchServer> switch_;
  std::unique_ptr<ControllerServer> controller_;
  std::unique_ptr<RemoteSwitches> remote_;
  std::unique_ptr<ControllerServer> standalone_;
  std::string switch_address_;
  std::string address_;
};

// ---------------------------------------------------------------------------------------------
// The reference session (UdpSession).

TEST_F(AgreedParamsTest, SessionRefusesEachFieldNamingBothValuesAndRanks) {
  auto client = Session();
  ASSERT_NE(client, nullptr);
  for (const FieldCase& c : kFieldCases) {
    ASSERT_TRUE(client->UdpSession(Ours(0, 2, 7000)).ok()) << c.field;  // a new session
    WorkerRegistration r1 = Ours(1, 2, 7001);
    r1.*c.member = c.other;
    auto refused = client->UdpSession(r1);
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << c.field;
    EXPECT_THAT(refused.status().message(), HasSubstr(Expected(c, "the session", "session")));
    EXPECT_EQ(switch_->jobs()->reference().num_registered, 1u) << c.field;  // nothing changed
    // The same rank with the session's values is accepted.
    EXPECT_TRUE(client->UdpSession(Ours(1, 2, 7001)).ok()) << c.field;
  }
  // num_workers keeps the session's own message (field and both values).
  auto n = client->UdpSession(Ours(1, 3, 7001));
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(n.status().message(), HasSubstr("num_workers 3 differs from the session's num_workers 2"));
}

TEST_F(AgreedParamsTest, SessionListsEveryDifferingFieldAndRefusesMixedReferenceClients) {
  auto client = Session();
  ASSERT_NE(client, nullptr);
  // An unmodified reference client sends none of the fields (all 0): all-zero sessions work.
  WorkerRegistration ref0 = Ours(0, 2, 7100), ref1 = Ours(1, 2, 7101);
  for (WorkerRegistration* r : {&ref0, &ref1}) {
    r->protocol_version = r->num_worker_threads = r->window_packets = r->elements_per_packet = 0;
  }
  ASSERT_TRUE(client->UdpSession(ref0).ok());
  ASSERT_TRUE(client->UdpSession(ref1).ok());
  EXPECT_EQ(switch_->jobs()->reference().num_registered, 2u);
  // Our client joining a reference session: every field is named.
  auto mixed = client->UdpSession(Ours(1, 2, 7102));
  EXPECT_EQ(mixed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(mixed.status().message(),
              HasSubstr("rank 1 registered protocol_version=2 and num_worker_threads=1 and "
                        "window_packets=8 and elements_per_packet=64, but rank 0 registered "
                        "protocol_version=0 and num_worker_threads=0 and window_packets=0 and "
                        "elements_per_packet=0 for the session; every worker of a session must "
                        "use the same values"));
  // A new session (rank 0 again) fixes new values: the old ones are forgotten.
  WorkerRegistration r0 = Ours(0, 2, 7100);
  r0.num_worker_threads = 4;
  ASSERT_TRUE(client->UdpSession(r0).ok());
  WorkerRegistration r1 = Ours(1, 2, 7101);
  r1.num_worker_threads = 4;
  EXPECT_TRUE(client->UdpSession(r1).ok());
}

TEST_F(AgreedParamsTest, SessionRefusalFailsWaitingAndLaterBarriersUntilANewSession) {
  auto c0 = Session();
  auto c1 = Session();
  ASSERT_NE(c0, nullptr);
  ASSERT_NE(c1, nullptr);
  WorkerRegistration r0 = Ours(0, 2, 7200);
  WorkerRegistration r1 = Ours(1, 2, 7201);
  r1.window_packets = 32;
  // Bootstrap both ranks: rank 1 is refused at registration, rank 0 waits in the barrier
  // after all registered and must learn why at once (not after its 3 s rpc_timeout). "At once"
  // is read from rank 0's status: FAILED_PRECONDITION naming the refusal, where waiting out
  // the rpc_timeout would give DEADLINE_EXCEEDED.
  auto f0 = std::async(std::launch::async, [&] { return Bootstrap(*c0, r0); });
  auto f1 = std::async(std::launch::async, [&] { return Bootstrap(*c1, r1); });
  const Status s1 = f1.get().status();
  const Status s0 = f0.get().status();
  const std::string why =
      "rank 1 registered window_packets=32, but rank 0 registered window_packets=8 for the "
      "session";
  EXPECT_EQ(s1.code(), StatusCode::kFailedPrecondition) << s1;
  EXPECT_THAT(s1.message(), HasSubstr("registration"));
  EXPECT_THAT(s1.message(), HasSubstr(why));
  EXPECT_EQ(s0.code(), StatusCode::kFailedPrecondition) << s0;
  EXPECT_THAT(s0.message(), HasSubstr("barrier after all registered"));
  EXPECT_THAT(s0.message(), HasSubstr("a registration was refused"));
  EXPECT_THAT(s0.message(), HasSubstr(why));

  // A later barrier of the same session fails at once with the same message.
  Status late = c0->Barrier(2);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr(why));

  // The next job's bootstrap (rank 0 broadcasts first) starts afresh and completes.
  r1.window_packets = 8;
  auto g0 = std::async(std::launch::async, [&] { return Bootstrap(*c0, r0); });
  auto g1 = std::async(std::launch::async, [&] { return Bootstrap(*c1, r1); });
  EXPECT_TRUE(g0.get().ok());
  EXPECT_TRUE(g1.get().ok());
  EXPECT_EQ(switch_->jobs()->reference().num_registered, 2u);
}

TEST_F(AgreedParamsTest, SessionContextsThatDisagreeBothFailNamingTheField) {
  ExpectBothFail(nullptr, [](Options& o) { o.num_worker_threads = 2; }, "num_worker_threads=2");
  ExpectBothFail(nullptr, [](Options& o) { o.window_packets = 16; }, "window_packets=16");
  ExpectBothFail(nullptr, [](Options& o) { o.elements_per_packet = 256; }, "elements_per_packet=256");
  // And workers that agree still run.
  const auto ok = CreateAll({WorkerOptions(0, 2, nullptr), WorkerOptions(1, 2, nullptr)});
  EXPECT_TRUE(ok[0].ok()) << ok[0];
  EXPECT_TRUE(ok[1].ok()) << ok[1];
}

// ---------------------------------------------------------------------------------------------
// Jobs of the JobService.

TEST_F(AgreedParamsTest, JobRefusesEachFieldNamingBothValuesAndRanks) {
  auto client = Jobs();
  ASSERT_NE(client, nullptr);
  for (const FieldCase& c : kFieldCases) {
    const JobInfo job = CreateJob(2);
    JobRegistration reg{.job_id = job.job_id, .token = job.token, .worker = Ours(0, 2, 7300)};
    ASSERT_TRUE(client->RegisterWorker(reg).ok()) << c.field;
    reg.worker = Ours(1, 2, 7301);
    reg.worker.*c.member = c.other;
    auto refused = client->RegisterWorker(reg);
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << c.field;
    EXPECT_THAT(refused.status().message(),
                HasSubstr(Expected(c, "job " + std::to_string(job.job_id), "job")));
    auto info = switch_->GetJob(job.job_id);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->num_registered, 1u) << c.field;  // nothing changed
    ASSERT_TRUE(switch_->DeleteJob(job.job_id, job.token).ok());  // frees the ports
  }
  // num_workers: 0 ("the job's") is a value like any other once a rank has sent the number.
  const JobInfo job = CreateJob(2);
  JobRegistration reg{.job_id = job.job_id, .token = job.token, .worker = Ours(0, 2, 7300)};
  ASSERT_TRUE(client->RegisterWorker(reg).ok());
  reg.worker = Ours(1, 0, 7301);
  auto refused = client->RegisterWorker(reg);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("rank 1 registered num_workers=0, but rank 0 registered num_workers=2 for "
                        "job " + std::to_string(job.job_id)));
}

TEST_F(AgreedParamsTest, JobOfAllZeroRegistrationsIsAcceptedAndFirstRegistrationFixes) {
  auto client = Jobs();
  ASSERT_NE(client, nullptr);
  const JobInfo job = CreateJob(3);
  JobRegistration reg;
  reg.job_id = job.job_id;
  reg.token = job.token;
  reg.worker.ipv4 = kLocalhost;
  reg.worker.rank = 2;  // any rank may be first
  reg.worker.udp_ports = {7402};
  ASSERT_TRUE(client->RegisterWorker(reg).ok());
  reg.worker.rank = 0;
  reg.worker.udp_ports = {7400};
  ASSERT_TRUE(client->RegisterWorker(reg).ok());
  // A retried identical registration is still fine.
  ASSERT_TRUE(client->RegisterWorker(reg).ok());
  reg.worker.rank = 1;
  reg.worker.udp_ports = {7401};
  reg.worker.num_worker_threads = 1;
  auto refused = client->RegisterWorker(reg);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("rank 1 registered num_worker_threads=1, but rank 2 registered "
                        "num_worker_threads=0"));
  reg.worker.num_worker_threads = 0;
  auto ok = client->RegisterWorker(reg);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->state, JobState::kRunning);
}

TEST_F(AgreedParamsTest, JobDuplicateRankIsAlreadyExistsWhateverItSendsAndFailsNothing) {
  auto client = Jobs();
  ASSERT_NE(client, nullptr);
  const JobInfo job = CreateJob(2);
  JobRegistration r0{.job_id = job.job_id, .token = job.token, .worker = Ours(0, 2, 7700)};
  ASSERT_TRUE(client->RegisterWorker(r0).ok());
  JobRegistration dup{.job_id = job.job_id, .token = job.token, .worker = Ours(0, 2, 7701)};
  dup.worker.num_worker_threads = 2;
  EXPECT_EQ(client->RegisterWorker(dup).status().code(), StatusCode::kAlreadyExists);
  // The job still starts: no refusal was recorded against it.
  JobRegistration r1{.job_id = job.job_id, .token = job.token, .worker = Ours(1, 2, 7702)};
  auto f0 = std::async(std::launch::async,
                       [&] { return client->Barrier(job.job_id, job.token, 0); });
  EXPECT_TRUE(JobBootstrap(*client, r1).ok());
  EXPECT_TRUE(f0.get().ok());
}

TEST_F(AgreedParamsTest, JobRefusalFailsWaitingAndLaterBarrierCallsOfThatJobOnly) {
  auto client = Jobs();
  ASSERT_NE(client, nullptr);
  const JobInfo job = CreateJob(2);
  const JobInfo other = CreateJob(2);
  // Rank 0 registers and waits in the job's barrier.
  JobRegistration r0{.job_id = job.job_id, .token = job.token, .worker = Ours(0, 2, 7500)};
  auto f0 = std::async(std::launch::async, [&] { return JobBootstrap(*client, r0); });
  // Wait until rank 0 is registered (its barrier call follows at once): a state, observed
  // with a deadline that only turns a hang into a failure (rank 1 must not register first).
  const auto deadline = SteadyClock::now() + 30s;
  while (switch_->GetJob(job.job_id)->num_registered == 0 && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(switch_->GetJob(job.job_id)->num_registered, 1u);
  JobRegistration r1{.job_id = job.job_id, .token = job.token, .worker = Ours(1, 2, 7501)};
  r1.worker.num_worker_threads = 3;
  const Status s1 = JobBootstrap(*client, r1).status();
  const Status s0 = f0.get().status();  // FailedPrecondition, not the rpc_timeout's deadline
  const std::string why = "rank 1 registered num_worker_threads=3, but rank 0 registered "
                          "num_worker_threads=1 for job " + std::to_string(job.job_id);
  EXPECT_EQ(s1.code(), StatusCode::kFailedPrecondition) << s1;
  EXPECT_THAT(s1.message(), HasSubstr("registration"));
  EXPECT_THAT(s1.message(), HasSubstr(why));
  EXPECT_EQ(s0.code(), StatusCode::kFailedPrecondition) << s0;
  EXPECT_THAT(s0.message(), HasSubstr("barrier"));
  EXPECT_THAT(s0.message(), HasSubstr("cannot start: a registration was refused"));
  EXPECT_THAT(s0.message(), HasSubstr(why));

  // Later calls of that job fail (not at the deadline); a wrong token learns nothing.
  Status late = client->Barrier(job.job_id, job.token, 1);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr(why));
  Status wrong = client->Barrier(job.job_id, "wrong-token-000", 1);
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(wrong.message(), Not(HasSubstr("registered")));

  // Another job on the same switch is not affected.
  JobRegistration o0{.job_id = other.job_id, .token = other.token, .worker = Ours(0, 2, 7600)};
  JobRegistration o1{.job_id = other.job_id, .token = other.token, .worker = Ours(1, 2, 7601)};
  auto g0 = std::async(std::launch::async, [&] { return JobBootstrap(*client, o0); });
  EXPECT_TRUE(JobBootstrap(*client, o1).ok());
  EXPECT_TRUE(g0.get().ok());
}

TEST_F(AgreedParamsTest, JobContextsThatDisagreeBothFailNamingTheField) {
  JobInfo job = CreateJob(2);
  ExpectBothFail(&job, [](Options& o) { o.num_worker_threads = 2; }, "num_worker_threads=2");
  job = CreateJob(2);
  ExpectBothFail(&job, [](Options& o) { o.window_packets = 16; }, "window_packets=16");
  job = CreateJob(2);
  ExpectBothFail(&job, [](Options& o) { o.elements_per_packet = 256; }, "elements_per_packet=256");
}

// ---------------------------------------------------------------------------------------------
// A standalone controller forwards the fields; the switch refuses; the controller's own
// barriers fail with the switch's message.

TEST_F(AgreedParamsTest, StandaloneControllerSessionAndJob) {
  UseStandaloneController();
  ExpectBothFail(nullptr, [](Options& o) { o.num_worker_threads = 2; }, "num_worker_threads=2");
  JobInfo job = CreateJob(2);
  ExpectBothFail(&job, [](Options& o) { o.window_packets = 16; }, "window_packets=16");
  // Agreeing workers run through it.
  job = CreateJob(2);
  const auto ok = CreateAll({WorkerOptions(0, 2, &job), WorkerOptions(1, 2, &job)});
  EXPECT_TRUE(ok[0].ok()) << ok[0];
  EXPECT_TRUE(ok[1].ok()) << ok[1];
}

}  // namespace
}  // namespace switchml::controller
