// rendezvous::Rendezvous against a real controller and switch in one process: job 0 (the
// reference Session service) and a JobService job through the same interface give the same
// routes for the same registrations; errors name the job; the failure explanation.
#include "rendezvous/rendezvous.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <vector>

#include "controller/local_switch_for_tests.h"
#include "dataplane/switch_server.h"
#include "rendezvous/job_client.h"
#include "switchml/context.h"

namespace switchml::controller {
namespace {

using control::JobInfo;
using control::JobSpec;
using control::JobState;
using control::JobWorkerGrant;
using control::JobWorkerInfo;
using control::WorkerRegistration;
using rendezvous::ConnectRendezvous;
using rendezvous::JobClient;
using rendezvous::Rendezvous;
using rendezvous::SilentRanks;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr uint32_t kLocalhost = 0x7F000001;
constexpr char kOperatorToken[] = "operator-token-for-tests-0123";

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two I/O threads, so that the routes of a worker's threads differ from one another.
    auto plane = StartLocalControlPlaneForTests(/*num_slots=*/64, kOperatorToken, /*io_threads=*/2);
    ASSERT_TRUE(plane.ok()) << plane.status();
    switch_ = std::move(plane->sw);
    controller_ = std::move(plane->controller);
    address_ = plane->address;
    admin_ = std::move(plane->admin);
  }
  void TearDown() override {
    if (controller_) controller_->Shutdown();
    if (switch_) switch_->Stop();
  }

  JobInfo CreateJob(uint32_t workers) {
    JobSpec spec;
    spec.num_workers = workers;
    spec.num_slots = 16;
    spec.elements_per_packet = 64;
    auto job = admin_->CreateJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobInfo{};
  }

  static WorkerRegistration Reg(uint32_t rank, uint32_t n, uint32_t threads, uint16_t port_base) {
    WorkerRegistration r;
    r.rank = rank;
    r.num_workers = n;
    r.ipv4 = kLocalhost;
    r.protocol_version = control::kClientProtocolVersion;
    r.num_worker_threads = threads;
    r.window_packets = 8;
    r.elements_per_packet = 64;
    for (uint32_t t = 0; t < threads; ++t) r.udp_ports.push_back(port_base + rank * 10 + t);
    return r;
  }

  // Every rank connects and joins at once (one thread each); returns each rank's result.
  std::vector<StatusOr<JobWorkerGrant>> JoinAll(uint32_t job_id, const std::string& token,
                                                const std::vector<WorkerRegistration>& regs) {
    std::vector<std::future<StatusOr<JobWorkerGrant>>> futures;
    for (const WorkerRegistration& reg : regs) {
      futures.push_back(std::async(std::launch::async, [&, reg]() -> StatusOr<JobWorkerGrant> {
        SWITCHML_ASSIGN_OR_RETURN(auto r, ConnectRendezvous(address_, job_id, token, 3s));
        return r->Join(reg);
      }));
    }
    std::vector<StatusOr<JobWorkerGrant>> out;
    for (auto& f : futures) out.push_back(f.get());
    return out;
  }

  std::unique_ptr<dataplane::SwitchServer> switch_;
  std::unique_ptr<ControllerServer> controller_;
  std::unique_ptr<JobClient> admin_;
  std::string address_;
};

TEST_F(RendezvousTest, Job0AndAJobGiveTheSameRoutesForTheSameRegistrations) {
  const std::vector<WorkerRegistration> regs = {Reg(0, 2, 2, 7000), Reg(1, 2, 2, 7000)};
  const auto session = JoinAll(0, "", regs);
  const JobInfo job = CreateJob(2);
  const auto jobs = JoinAll(job.job_id, job.token, regs);
  for (uint32_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(session[r].ok()) << session[r].status();
    ASSERT_TRUE(jobs[r].ok()) << jobs[r].status();
    const JobWorkerGrant& s = *session[r];
    const JobWorkerGrant& j = *jobs[r];
    EXPECT_EQ(s.job_id, 0u);
    EXPECT_EQ(j.job_id, job.job_id);
    EXPECT_EQ(s.num_workers, 2u);
    EXPECT_EQ(j.num_workers, 2u);
    EXPECT_EQ(s.state, JobState::kRunning);
    EXPECT_EQ(j.state, JobState::kRunning);
    // Job 0 fixes no packet size in advance; the job has its own.
    EXPECT_EQ(s.elements_per_packet, 0u);
    EXPECT_EQ(j.elements_per_packet, 64u);
    // Where each thread sends: the same switch, port and I/O threads either way.
    EXPECT_EQ(s.switch_info.udp_port, j.switch_info.udp_port);
    // (max_workers: the reference reply carries the switch's; the JobService's grant does not
    // (0 = unknown), its num_workers having been checked when the job was created.)
    EXPECT_EQ(s.switch_info.max_workers, 8u);
    EXPECT_EQ(s.switch_info.ipv4, j.switch_info.ipv4);
    EXPECT_EQ(s.switch_info.num_shards, j.switch_info.num_shards);
    ASSERT_EQ(s.switch_info.thread_routes.size(), 2u);
    EXPECT_EQ(s.switch_info.thread_routes, j.switch_info.thread_routes);
    EXPECT_NE(s.switch_info.thread_routes[0].udp_port, s.switch_info.thread_routes[1].udp_port);
  }
}

TEST_F(RendezvousTest, JobErrorsNameTheJob) {
  const JobInfo job = CreateJob(1);
  auto wrong = JoinAll(job.job_id, "not-the-token", {Reg(0, 1, 1, 7100)});
  ASSERT_FALSE(wrong[0].ok());
  EXPECT_EQ(wrong[0].status().code(), StatusCode::kPermissionDenied) << wrong[0].status();
  EXPECT_THAT(wrong[0].status().message(),
              HasSubstr("job " + std::to_string(job.job_id) + " rank 0: registration"));
  auto unknown = JoinAll(9999, "some-token", {Reg(0, 1, 1, 7100)});
  ASSERT_FALSE(unknown[0].ok());
  EXPECT_EQ(unknown[0].status().code(), StatusCode::kNotFound) << unknown[0].status();
  EXPECT_THAT(unknown[0].status().message(), HasSubstr("job 9999"));
  // The job itself is unharmed: its rank joins with the token.
  auto ok = JoinAll(job.job_id, job.token, {Reg(0, 1, 1, 7100)});
  EXPECT_TRUE(ok[0].ok()) << ok[0].status();
}

TEST_F(RendezvousTest, Job0RefusalNamesTheFieldOnBothRanks) {
  std::vector<WorkerRegistration> regs = {Reg(0, 2, 1, 7200), Reg(1, 2, 1, 7200)};
  regs[1].window_packets = 32;
  const auto got = JoinAll(0, "", regs);
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_FALSE(got[r].ok()) << "rank " << r;
    EXPECT_EQ(got[r].status().code(), StatusCode::kFailedPrecondition) << got[r].status();
    EXPECT_THAT(got[r].status().message(), HasSubstr("rank 1 registered window_packets=32"));
  }
}

TEST_F(RendezvousTest, AHalfSetIdentityIsRefusedBeforeConnecting) {
  auto no_token = ConnectRendezvous(address_, 7, "", 3s);
  ASSERT_FALSE(no_token.ok());
  EXPECT_EQ(no_token.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_token.status().message(),
              HasSubstr("job_token must be set when job_id is (job_id=7)"));
  auto stray_token = ConnectRendezvous(address_, 0, "tok", 3s);
  ASSERT_FALSE(stray_token.ok());
  EXPECT_EQ(stray_token.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(stray_token.status().message(), HasSubstr("job_token is set but job_id is 0"));
}

TEST_F(RendezvousTest, NobodyListeningIsUnavailableForBothKinds) {
  // A TCP port that is bound but not listening: connections are refused.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(kLocalhost);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string dead = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto s = ConnectRendezvous(dead, 0, "", 300ms);
  auto j = ConnectRendezvous(dead, 5, "tok", 300ms);
  close(fd);
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status();
  EXPECT_EQ(j.status().code(), StatusCode::kUnavailable) << j.status();
  EXPECT_THAT(s.status().message(), HasSubstr(dead));
  EXPECT_THAT(j.status().message(), HasSubstr(dead));
}

TEST_F(RendezvousTest, FailureExplanationAsksAboutTheJobOnlyForTimeouts) {
  auto session = ConnectRendezvous(address_, 0, "", 3s);
  ASSERT_TRUE(session.ok()) << session.status();
  // Job 0 has no job state: its explanation only says whether the controller still answers.
  ASSERT_TRUE((*session)->failure_explainer());
  EXPECT_EQ((*session)->ExplainFailure(DeadlineExceededError("no result")).text, "");
  EXPECT_FALSE((*session)->ExplainFailure(DeadlineExceededError("no result")).switch_unreachable);

  const JobInfo job = CreateJob(1);
  Rendezvous::FailureExplainer explain;
  {
    auto r = ConnectRendezvous(address_, job.job_id, job.token, 3s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->job_id(), job.job_id);
    ASSERT_TRUE((*r)->Join(Reg(0, 1, 1, 7300)).ok());
    explain = (*r)->failure_explainer();
    ASSERT_TRUE(explain);
    // The job runs: nothing to add.
    EXPECT_EQ((*r)->ExplainFailure(DeadlineExceededError("no result")).text, "");
    EXPECT_FALSE((*r)->ExplainFailure(DeadlineExceededError("no result")).switch_unreachable);
  }
  // Deleted: a timeout is explained, by a function that outlives its Rendezvous; other
  // failures are not.
  ASSERT_TRUE(admin_->DeleteJob(job.job_id, job.token).ok());
  const control::FailureExplanation deleted = explain(DeadlineExceededError("no result"));
  EXPECT_FALSE(deleted.switch_unreachable);  // a decision, not a failure of the switch
  const std::string why = deleted.text;
  EXPECT_THAT(why, HasSubstr("job " + std::to_string(job.job_id)));
  EXPECT_THAT(why, HasSubstr("deleted through the controller"));
  EXPECT_EQ(explain(InternalError("something else")).text, "");
  // The controller gone (a switch's own controller dies with it): the switch is unreachable.
  controller_->Shutdown();
  const control::FailureExplanation gone = explain(DeadlineExceededError("no result"));
  EXPECT_TRUE(gone.switch_unreachable);
  EXPECT_THAT(gone.text, HasSubstr("the controller at " + address_ + " does not answer either"));
  const control::FailureExplanation session_gone =
      (*session)->ExplainFailure(DeadlineExceededError("no result"));
  EXPECT_TRUE(session_gone.switch_unreachable);
  EXPECT_THAT(session_gone.text, HasSubstr("does not answer either"));
}

// What a timeout's explanation says of a live job's ranks: those the switch has not heard from
// for kSilentRankThreshold or longer, longest first, this worker marked.
TEST(SilentRanksTest, NamesTheRanksTheSwitchHasNotHeardFrom) {
  JobInfo job;
  const auto worker = [](uint32_t rank, uint32_t ip, int64_t idle_ms) {
    JobWorkerInfo w;
    w.rank = rank;
    w.ipv4 = ip;
    w.idle_for = std::chrono::milliseconds(idle_ms);
    return w;
  };
  job.workers = {worker(0, 0x0A000001, 120), worker(1, 0x0A000002, 999)};
  EXPECT_EQ(SilentRanks(job, 0), "");  // retransmitting ranks are heard from
  job.workers.push_back(worker(2, 0x0A000003, 10310));
  EXPECT_EQ(SilentRanks(job, 0),
            "; the switch has had no datagram from rank 2 (10.0.0.3) for 10310 ms: it may have "
            "died, stalled, or not made this call");
  job.workers[0].idle_for = std::chrono::milliseconds(1000);
  EXPECT_EQ(SilentRanks(job, 1),
            "; the switch has had no datagram from rank 2 (10.0.0.3) for 10310 ms, rank 0 "
            "(10.0.0.1) for 1000 ms: it may have died, stalled, or not made this call");
  job.workers = {worker(0, 0x0A000001, 5000), worker(1, 0x0A000002, 10)};
  EXPECT_EQ(SilentRanks(job, 0),
            "; the switch has had no datagram from rank 0 (10.0.0.1, this worker) for 5000 ms: "
            "this worker's datagrams do not reach it");
}

// Context::Create goes through the interface for both kinds, with the job's packet size checked
// once, from the grant: a job's caps the worker's, job 0's (0) caps nothing.
TEST_F(RendezvousTest, ContextChecksThePacketSizeAgainstTheGrant) {
  Options o;
  o.num_workers = 1;
  o.controller_address = address_;
  o.window_packets = 8;
  o.elements_per_packet = 256;
  o.rpc_timeout = 3s;
  const JobInfo job = CreateJob(1);  // elements_per_packet 64
  Options in_job = o;
  in_job.job_id = job.job_id;
  in_job.job_token = job.token;
  auto refused = Context::Create(in_job);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("elements_per_packet=256 exceeds job " + std::to_string(job.job_id) +
                        "'s elements_per_packet 64"));
  auto session = Context::Create(o);
  EXPECT_TRUE(session.ok()) << session.status();
}

}  // namespace
}  // namespace switchml::controller
