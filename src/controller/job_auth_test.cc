// Access control and bounds of switchml.v1.JobService (job_service.h, operator_auth.h): the
// operator credential (none, wrong, right; constant-time comparison; token files), the
// default idle timeout, the sync state of ended jobs, and the limits on what clients can make
// the controller keep. The JobService is served directly (so its sync-state count can be
// observed) in front of a real SwitchServer on 127.0.0.1.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include "rendezvous/job_client.h"
#include "controller/job_service.h"
#include "rendezvous/operator_auth.h"
#include "controller/remote_switches.h"
#include "controller/session_service.h"
#include "controller/local_switch_for_tests.h"
#include "dataplane/switch_server.h"
#include "transport/udp_channel.h"

namespace switchml::controller {

using control::JobInfo;
using control::JobRegistration;
using control::JobSpec;
using control::JobState;
using control::JobStateName;
using rendezvous::JobClient;
using rendezvous::ConstantTimeEquals;
using rendezvous::ReadOperatorTokenFile;
using rendezvous::ResolveOperatorToken;
using rendezvous::GenerateOperatorToken;
using rendezvous::WritePrivateTokenFile;
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr uint32_t kLocalhost = 0x7F000001;
constexpr uint32_t kPoolSlots = 64;
constexpr char kOperator[] = "the-operator-token-0123456789";
constexpr std::chrono::milliseconds kDefaultIdle = 300ms;

// Waits (polling, 5 s at most) until pred() holds.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

class JobAuthTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(kOperator); }

  void Start(const std::string& operator_token) {
    auto sw = StartLocalSwitchForTests(kPoolSlots);
    ASSERT_TRUE(sw.ok()) << sw.status();
    switch_ = std::move(*sw);

    JobServiceOptions options;
    options.operator_token = operator_token;
    options.default_idle_timeout = kDefaultIdle;
    options.sweep_interval = 20ms;
    service_ = std::make_unique<JobService>(switch_.get(), options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_->grpc_service());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port);
    admin_ = Client(operator_token);
    anonymous_ = Client("");
  }

  void TearDown() override {
    if (service_) service_->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 500ms);
    if (switch_) switch_->Stop();
  }

  std::unique_ptr<JobClient> Client(const std::string& operator_token) {
    auto client = JobClient::Connect(address_, 3s);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return nullptr;
    (*client)->set_operator_token(operator_token);
    return std::move(*client);
  }

  JobInfo Create(uint32_t workers, uint32_t slots, std::chrono::milliseconds idle = 0ms) {
    JobSpec spec;
    spec.num_workers = workers;
    spec.num_slots = slots;
    spec.elements_per_packet = 64;
    spec.idle_timeout = idle;
    auto job = admin_->CreateJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobInfo{};
  }

  std::unique_ptr<dataplane::SwitchServer> switch_;
  std::unique_ptr<JobService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<JobClient> admin_;
  std::unique_ptr<JobClient> anonymous_;
};

JobSpec SmallSpec() {
  JobSpec spec;
  spec.num_workers = 1;
  spec.num_slots = 4;
  spec.elements_per_packet = 64;
  return spec;
}

TEST_F(JobAuthTest, WithoutTheCredentialAdministrationIsUnauthenticated) {
  const JobInfo job = Create(1, 4);
  const std::vector<Status> refused = {
      anonymous_->CreateJob(SmallSpec()).status(),
      anonymous_->ListJobs().status(),
      anonymous_->DeleteJob(job.job_id, job.token),
      anonymous_->InspectSlots(job.job_id, 0, 1).status(),
      anonymous_->GetJob(job.job_id).status(),
  };
  for (const Status& s : refused) {
    EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s;
    EXPECT_THAT(s.message(), HasSubstr("SWITCHML_OPERATOR_TOKEN"));
    EXPECT_THAT(s.message(), HasSubstr("--operator-token-file"));
  }
  // Nothing happened: still one job, still live.
  auto list = admin_->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);
  EXPECT_EQ(list->jobs[0].state, JobState::kWaitingForWorkers);
}

TEST_F(JobAuthTest, AWrongCredentialIsPermissionDenied) {
  const JobInfo job = Create(1, 4);
  // Same length and differing in the last character; a prefix; a longer string.
  const std::string same_length = std::string(kOperator).substr(0, sizeof(kOperator) - 2) + "X";
  for (const std::string& wrong :
       {same_length, std::string(kOperator).substr(0, 20), std::string(kOperator) + "0"}) {
    auto client = Client(wrong);
    ASSERT_NE(client, nullptr);
    for (const Status& s : {client->CreateJob(SmallSpec()).status(), client->ListJobs().status(),
                            client->DeleteJob(job.job_id, job.token),
                            client->InspectSlots(job.job_id, 0, 1).status(),
                            client->GetJob(job.job_id).status()}) {
      EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << wrong << ": " << s;
      EXPECT_THAT(s.message(), HasSubstr("wrong operator credential"));
      EXPECT_THAT(s.message(), HasSubstr("SWITCHML_OPERATOR_TOKEN"));
    }
  }
  EXPECT_EQ(admin_->GetJob(job.job_id)->state, JobState::kWaitingForWorkers);
}

TEST_F(JobAuthTest, TheRightCredentialAdministersAndWorkersNeedOnlyTheirJobToken) {
  const JobInfo job = Create(1, 4);
  ASSERT_NE(job.job_id, 0u);
  EXPECT_TRUE(admin_->ListJobs().ok());
  EXPECT_TRUE(admin_->InspectSlots(job.job_id, 0, 1).ok());
  // DeleteJob checks the job's token as well.
  EXPECT_EQ(admin_->DeleteJob(job.job_id, "not-the-job-token").code(),
            StatusCode::kPermissionDenied);

  // A worker without the operator credential: registration, barrier and GetJob with the
  // job's token work; a wrong job token does not.
  JobRegistration reg;
  reg.job_id = job.job_id;
  reg.token = job.token;
  reg.worker.rank = 0;
  reg.worker.ipv4 = kLocalhost;
  reg.worker.udp_ports = {9300};
  auto grant = anonymous_->RegisterWorker(reg);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_TRUE(anonymous_->Barrier(job.job_id, job.token, 0).ok());
  auto info = anonymous_->GetJob(job.job_id, job.token);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(anonymous_->GetJob(job.job_id, "wrong-job-token").status().code(),
            StatusCode::kPermissionDenied);

  ASSERT_TRUE(admin_->DeleteJob(job.job_id, job.token).ok());
  EXPECT_EQ(admin_->GetJob(job.job_id)->state, JobState::kEnded);
}

TEST_F(JobAuthTest, WithoutAConfiguredCredentialAdministrationIsRefused) {
  TearDown();
  Start("");
  auto s = admin_->CreateJob(SmallSpec());  // admin_ sends nothing either
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("job administration is disabled"));
  auto someone = Client("some-token-0123456789");
  EXPECT_EQ(someone->ListJobs().status().code(), StatusCode::kPermissionDenied);
}

TEST_F(JobAuthTest, PoolExhaustionNamesRequestedAndFreeSlots) {
  Create(1, 40);
  JobSpec spec = SmallSpec();
  spec.num_slots = 30;
  auto job = admin_->CreateJob(spec);
  EXPECT_EQ(job.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(job.status().message(), HasSubstr("needs 30 slots"));
  EXPECT_THAT(job.status().message(), HasSubstr("24 of 64 free"));
  auto list = admin_->ListJobs();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs.size(), 1u);
  EXPECT_EQ(list->free_slots, 24u);
}

TEST_F(JobAuthTest, JobsGetTheDefaultIdleTimeoutAndOnlyAnExplicitRequestHasNone) {
  const JobInfo never = Create(1, 4, JobClient::kNoIdleTimeout);
  const JobInfo by_default = Create(1, 4);
  const JobInfo explicit_timeout = Create(1, 4, 60s);
  EXPECT_EQ(never.spec.idle_timeout, 0ms);  // in answers, 0 = none
  EXPECT_EQ(by_default.spec.idle_timeout, kDefaultIdle);
  EXPECT_EQ(explicit_timeout.spec.idle_timeout, 60s);
  // The defaulted job is torn down (nobody registered, nothing sent) ...
  StatusOr<JobInfo> job = admin_->GetJob(by_default.job_id);
  ASSERT_TRUE(Eventually([&] {
    job = admin_->GetJob(by_default.job_id);
    return job.ok() && job->state == JobState::kEnded;
  })) << (job.ok() ? JobStateName(job->state) : job.status().ToString());
  EXPECT_THAT(job->end_reason, HasSubstr("idle_timeout 300 ms"));
  // ... while the job without one, created earlier, still waits for its workers.
  EXPECT_EQ(admin_->GetJob(never.job_id)->state, JobState::kWaitingForWorkers);
  EXPECT_EQ(admin_->GetJob(explicit_timeout.job_id)->state, JobState::kWaitingForWorkers);
}

TEST_F(JobAuthTest, SyncStateLivesOnlyWhileUsedAndIsFreedWhenTheJobEnds) {
  EXPECT_EQ(service_->NumSyncStates(), 0u);
  const JobInfo a = Create(2, 4, JobClient::kNoIdleTimeout);
  // A completed barrier leaves nothing behind.
  auto first = std::async(std::launch::async, [&] { return admin_->Barrier(a.job_id, a.token, 0); });
  ASSERT_TRUE(Eventually([&] { return service_->NumBlockedCallers() == 1; }));
  EXPECT_EQ(service_->NumSyncStates(), 1u);
  ASSERT_TRUE(admin_->Barrier(a.job_id, a.token, 1).ok());
  ASSERT_TRUE(first.get().ok());
  EXPECT_EQ(service_->NumSyncStates(), 0u);

  // A rank blocked when the job is deleted returns ABORTED, and the state is gone.
  auto blocked = std::async(std::launch::async, [&] { return admin_->Barrier(a.job_id, a.token, 0); });
  ASSERT_TRUE(Eventually([&] { return service_->NumBlockedCallers() == 1; }));
  ASSERT_TRUE(admin_->DeleteJob(a.job_id, a.token).ok());
  const Status aborted = blocked.get();
  EXPECT_EQ(aborted.code(), StatusCode::kAborted) << aborted;
  EXPECT_EQ(service_->NumSyncStates(), 0u);

  // A leftover broadcast (the root called, rank 1 never will) keeps the job's state while
  // the job lives; when the job is torn down (default idle timeout) the sweep frees it.
  const JobInfo b = Create(2, 4);
  auto root = anonymous_->Broadcast(b.job_id, b.token, 0, 0, 77);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(service_->NumSyncStates(), 1u);
  ASSERT_TRUE(Eventually([&] { return admin_->GetJob(b.job_id)->state == JobState::kEnded; }));
  EXPECT_TRUE(Eventually([&] { return service_->NumSyncStates() == 0; }));
}

TEST_F(JobAuthTest, RepeatedBroadcastsOfAJobAreBounded) {
  const JobInfo job = Create(2, 4, JobClient::kNoIdleTimeout);
  // Rank 0 as root never waits and rank 1 never reads: each call would open an operation.
  for (uint32_t i = 0; i < JobService::kMaxPendingBroadcastsPerJob; ++i) {
    auto r = anonymous_->Broadcast(job.job_id, job.token, 0, 0, i);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
  }
  for (int i = 0; i < 200; ++i) {
    auto r = anonymous_->Broadcast(job.job_id, job.token, 0, 0, 1);
    ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status();
    if (i == 0) {
      EXPECT_THAT(r.status().message(), HasSubstr("64 broadcast operations"));
    }
  }
  EXPECT_EQ(service_->NumSyncStates(), 1u);
  // Rank 1 drains them in order, after which the job has no sync state at all.
  for (uint32_t i = 0; i < JobService::kMaxPendingBroadcastsPerJob; ++i) {
    auto r = anonymous_->Broadcast(job.job_id, job.token, 1, 0, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, i);
  }
  EXPECT_EQ(service_->NumSyncStates(), 0u);
}

TEST_F(JobAuthTest, BlockedCallersOfAJobAreBounded) {
  const JobInfo job = Create(2, 4, JobClient::kNoIdleTimeout);
  // Rank 0 retried while its first call still waits: 2 x num_workers = 4 callers may block.
  std::vector<std::future<Status>> waiting;
  for (int i = 0; i < 4; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] {
      auto r = anonymous_->Broadcast(job.job_id, job.token, 1, 0, 0);
      return r.status();
    }));
  }
  // Each waiter sits in its own operation (rank 1 participates once per operation).
  ASSERT_TRUE(Eventually([&] { return service_->NumBlockedCallers() == 4; }));
  auto fifth = anonymous_->Broadcast(job.job_id, job.token, 1, 0, 0);
  EXPECT_EQ(fifth.status().code(), StatusCode::kResourceExhausted) << fifth.status();
  EXPECT_THAT(fifth.status().message(), HasSubstr("4 callers are already blocked"));
  EXPECT_EQ(service_->NumBlockedCallers(), 4u);
  ASSERT_TRUE(admin_->DeleteJob(job.job_id, job.token).ok());
  for (auto& f : waiting) EXPECT_EQ(f.get().code(), StatusCode::kAborted);
  EXPECT_EQ(service_->NumSyncStates(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Standalone controller: it presents the switches' credential, and its default idle timeout
// (not the switch's) applies.

TEST(StandaloneAuthTest, TheControllerPresentsTheSwitchCredential) {
  auto sw = StartLocalSwitchForTests(32, 8, dataplane::SwitchConfig{}.max_elements_per_packet);
  ASSERT_TRUE(sw.ok()) << sw.status();
  ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.operator_token = kOperator;
  so.default_job_idle_timeout = 1h;  // the switch's default must not apply
  auto embedded = ControllerServer::Start(so, sw->get());
  ASSERT_TRUE(embedded.ok());
  const std::string sw_address = "127.0.0.1:" + std::to_string((*embedded)->port());

  auto none = RemoteSwitches::Connect({sw_address}, 3s, "");
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("SWITCHML_OPERATOR_TOKEN"));
  auto wrong = RemoteSwitches::Connect({sw_address}, 3s, "not-the-switch-token");
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status();
  EXPECT_THAT(wrong.status().message(), HasSubstr("switch 0 (" + sw_address + ")"));

  auto remote = RemoteSwitches::Connect({sw_address}, 3s, kOperator);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ServerOptions co;
  co.listen_address = "127.0.0.1:0";
  co.operator_token = "controller-own-token-0123";
  co.default_job_idle_timeout = 5s;
  auto standalone = ControllerServer::Start(co, remote->get());
  ASSERT_TRUE(standalone.ok());
  auto client = JobClient::Connect("127.0.0.1:" + std::to_string((*standalone)->port()), 3s);
  ASSERT_TRUE(client.ok());
  (*client)->set_operator_token(kOperator);  // the switch's, not the controller's
  EXPECT_EQ((*client)->ListJobs().status().code(), StatusCode::kPermissionDenied);
  (*client)->set_operator_token("controller-own-token-0123");
  auto defaulted = (*client)->CreateJob(SmallSpec());
  ASSERT_TRUE(defaulted.ok()) << defaulted.status();
  auto never = (*client)->CreateJob([] {
    JobSpec s = SmallSpec();
    s.idle_timeout = JobClient::kNoIdleTimeout;
    return s;
  }());
  ASSERT_TRUE(never.ok()) << never.status();
  // What the switch itself holds.
  auto on_switch = (*sw)->ListJobs();
  ASSERT_EQ(on_switch.jobs.size(), 2u);
  EXPECT_EQ(on_switch.jobs[0].spec.idle_timeout, 5s);
  EXPECT_EQ(on_switch.jobs[1].spec.idle_timeout, 0ms);
  (*standalone)->Shutdown();
  (*embedded)->Shutdown();
  (*sw)->Stop();
}

// ---------------------------------------------------------------------------------------------
// Credential files and comparison.

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/switchml-auth-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    std::remove(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(TokenFileTest, ReadsTrimsAndChecksTheFile) {
  auto good = ReadOperatorTokenFile(Write("good", "  0123456789abcdef0123\n", 0600));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->token, "0123456789abcdef0123");
  EXPECT_EQ(good->warning, "");

  auto shared = ReadOperatorTokenFile(Write("shared", "0123456789abcdef0123\n", 0644));
  ASSERT_TRUE(shared.ok());
  EXPECT_THAT(shared->warning, HasSubstr("readable by other users (mode 0644)"));

  auto empty = ReadOperatorTokenFile(Write("empty", "\n\n", 0600));
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("the file is empty"));
  auto short_token = ReadOperatorTokenFile(Write("short", "abc\n", 0600));
  EXPECT_EQ(short_token.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(short_token.status().message(), HasSubstr("16..1024 characters, got 3"));
  auto spaces = ReadOperatorTokenFile(Write("spaces", "0123456789 abcdef0123\n", 0600));
  EXPECT_EQ(spaces.status().code(), StatusCode::kInvalidArgument);
  auto missing = ReadOperatorTokenFile(dir_ + "/missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir_ + "/missing"));
  if (geteuid() != 0) {  // root reads anything
    auto unreadable = ReadOperatorTokenFile(Write("unreadable", "0123456789abcdef0123\n", 0));
    EXPECT_EQ(unreadable.status().code(), StatusCode::kPermissionDenied);
  }
}

TEST_F(TokenFileTest, TheFileWinsOverTheEnvironment) {
  const std::string file = Write("file", "from-the-file-0123456\n", 0600);
  auto both = ResolveOperatorToken(file, "from-the-environment-0123");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->token, "from-the-file-0123456");
  auto env = ResolveOperatorToken("", "from-the-environment-0123");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->token, "from-the-environment-0123");
  EXPECT_EQ(env->source, "SWITCHML_OPERATOR_TOKEN");
  auto none = ResolveOperatorToken("", nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->token, "");
  EXPECT_EQ(ResolveOperatorToken("", "short").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TokenFileTest, GeneratedTokensArePrivateAndRandom) {
  const std::string a = GenerateOperatorToken();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, GenerateOperatorToken());
  auto path = WritePrivateTokenFile(dir_ + "/gen.XXXXXX", a);
  ASSERT_TRUE(path.ok()) << path.status();
  files_.push_back(*path);
  struct stat st {};
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string dir = path->substr(0, path->rfind('/'));
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto back = ReadOperatorTokenFile(*path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->token, a);
  EXPECT_EQ(back->warning, "");
  files_.push_back(dir);  // removed after the file (rmdir via std::remove)
}

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abcdef", "abcdef"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcdeg"));
  EXPECT_FALSE(ConstantTimeEquals("abcdef", "abcde"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

}  // namespace
}  // namespace switchml::controller
