// switchml.v1.JobService end to end in one process: a real SwitchServer (UDP on 127.0.0.1),
// the ControllerServer with the switch as its SwitchControl, JobClient, and switchml::Context
// workers that join jobs by id and token. Covers the negative cases, each ending in a
// clear error and no effect on other running jobs.
#include "rendezvous/job_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "controller/fake_switch_for_tests.h"
#include "controller/remote_switches.h"
#include "controller/session_service.h"
#include "rendezvous/job_counters_proto.h"
#include "controller/local_switch_for_tests.h"
#include "dataplane/switch_server.h"
#include "dataplane/test_packets.h"
#include "switchml/context.h"
#include "transport/udp_channel.h"

namespace switchml::controller {

using control::JobDataType;
using control::JobInfo;
using control::JobRegistration;
using control::JobSpec;
using control::JobState;
using control::SlotInfo;
using control::WorkerRegistration;
using rendezvous::JobClient;
using rendezvous::SessionClient;
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

constexpr uint32_t kLocalhost = 0x7F000001;
constexpr uint32_t kPoolSlots = 64;
// The operator credential every server here is started with (job administration needs it).
constexpr char kOperatorToken[] = "operator-token-for-tests-0123";

class JobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto plane = StartLocalControlPlaneForTests(kPoolSlots, kOperatorToken);
    ASSERT_TRUE(plane.ok()) << plane.status();
    switch_ = std::move(plane->sw);
    controller_ = std::move(plane->controller);
    address_ = plane->address;
    client_ = std::move(plane->admin);
  }
  void TearDown() override {
    if (controller_) controller_->Shutdown();
    if (switch_) switch_->Stop();
  }

  JobInfo Create(uint32_t workers, uint32_t slots, std::chrono::milliseconds idle = 0ms) {
    JobSpec spec;
    spec.num_workers = workers;
    spec.num_slots = slots;
    spec.elements_per_packet = 64;
    spec.idle_timeout = idle;
    spec.data_type = JobDataType::kInt32;
    auto job = client_->CreateJob(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobInfo{};
  }

  Options WorkerOptions(const JobInfo& job, uint32_t rank) const {
    Options o;
    o.rank = rank;
    o.num_workers = job.spec.num_workers;
    o.controller_address = address_;
    o.job_id = job.job_id;
    o.job_token = job.token;
    o.window_packets = 8;
    o.elements_per_packet = 64;
    o.initial_rto = 10ms;
    o.min_rto = 5ms;
    o.max_rto = 100ms;
    o.call_timeout = 800ms;
    o.rpc_timeout = 3s;
    return o;
  }

  // Creates the job's contexts concurrently (registration ends in the job's barrier).
  std::vector<std::unique_ptr<Context>> Join(const JobInfo& job) {
    std::vector<std::future<StatusOr<std::unique_ptr<Context>>>> f;
    for (uint32_t r = 0; r < job.spec.num_workers; ++r) {
      f.push_back(std::async(std::launch::async,
                             [this, &job, r] { return Context::Create(WorkerOptions(job, r)); }));
    }
    std::vector<std::unique_ptr<Context>> out;
    for (auto& x : f) {
      auto ctx = x.get();
      EXPECT_TRUE(ctx.ok()) << ctx.status();
      if (ctx.ok()) out.push_back(std::move(*ctx));
    }
    return out;
  }

  // Every rank all-reduces `n` int32 values (rank r: i * (r + 1) + seed); checks exact sums.
  void RunAllReduce(std::vector<std::unique_ptr<Context>>& ctxs, size_t n, int32_t seed) {
    const uint32_t w = uint32_t(ctxs.size());
    std::vector<std::thread> threads;
    std::vector<Status> status(w);
    std::vector<std::vector<int32_t>> out(w, std::vector<int32_t>(n));
    for (uint32_t r = 0; r < w; ++r) {
      threads.emplace_back([&, r] {
        std::vector<int32_t> in(n);
        for (size_t i = 0; i < n; ++i) in[i] = int32_t(i) * int32_t(r + 1) + seed;
        status[r] = ctxs[r]->AllReduce(in.data(), out[r].data(), n, DataType::kInt32);
      });
    }
    for (auto& t : threads) t.join();
    const int32_t factor = int32_t(w * (w + 1) / 2);
    for (uint32_t r = 0; r < w; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[r][i], int32_t(i) * factor + seed * int32_t(w)) << "rank " << r << " i " << i;
      }
    }
  }

  std::unique_ptr<dataplane::SwitchServer> switch_;
  std::unique_ptr<ControllerServer> controller_;
  std::unique_ptr<JobClient> client_;
  std::string address_;
};

JobRegistration Reg(const JobInfo& job, uint32_t rank, uint16_t port,
                    std::string token = {}) {
  JobRegistration r;
  r.job_id = job.job_id;
  r.token = token.empty() ? job.token : token;
  r.worker.rank = rank;
  r.worker.ipv4 = kLocalhost;
  r.worker.udp_ports = {port};
  return r;
}

// Job 0 is the reference session: registered through UdpSession only, never through the
// JobService, whose answers for id 0 are those for a job that does not exist.
// The wire carries every per-job counter under its own name (control::SWITCHML_JOB_COUNTERS).
TEST(JobCountersProtoTest, EveryCounterHasAFieldOfItsNameAndRoundTrips) {
  control::JobCounters c;
  uint64_t next = 1;
  control::JobCounters::Visit(c, [&](const char* name, uint64_t& v) {
    v = next++ * 1000003;
    EXPECT_NE(v1::JobCounters::descriptor()->FindFieldByName(name), nullptr) << name;
  });
  v1::JobCounters p;
  rendezvous::ToProto(c, &p);
  EXPECT_EQ(p.uplink_resent(), 14u * 1000003);
  const control::JobCounters back = rendezvous::FromProto(p);
  control::JobCounters::Visit(back, [&, i = uint64_t{1}](const char* name, uint64_t v) mutable {
    EXPECT_EQ(v, i++ * 1000003) << name;
  });
}

TEST_F(JobServiceTest, Job0IsNotAJobServiceJob) {
  JobRegistration job0;
  job0.job_id = 0;
  job0.worker.rank = 0;
  job0.worker.num_workers = 1;
  job0.worker.ipv4 = kLocalhost;
  job0.worker.udp_ports = {9300};
  auto refused = client_->RegisterWorker(job0);
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("job ids start at 1"));
  job0.token = "some-token-0123";
  EXPECT_EQ(client_->RegisterWorker(job0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->Barrier(0, "", 0).code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->GetJob(0).status().code(), StatusCode::kNotFound);
  // Nothing reached job 0: no session was started.
  EXPECT_EQ(switch_->jobs()->reference().epoch, 0u);
  EXPECT_EQ(client_->ListJobs().value().jobs.size(), 0u);
  // ... but the list shows it, as the reference session (no session yet: 0 workers).
  const auto listed = client_->ListJobs().value().reference_session;
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(listed->job_id, 0u);
  EXPECT_EQ(listed->spec.name, "reference session");
  EXPECT_EQ(listed->spec.num_workers, 0u);
  EXPECT_EQ(listed->spec.num_slots, kPoolSlots);
}

TEST_F(JobServiceTest, CreateListGetDeleteAndErrorsAreGrpcCodes) {
  const JobInfo a = Create(2, 40);
  EXPECT_EQ(a.job_id, 1u);
  EXPECT_EQ(a.token.size(), 32u);  // generated
  EXPECT_EQ(a.state, JobState::kWaitingForWorkers);

  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 30;
  auto too_big = client_->CreateJob(spec);
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(), HasSubstr("largest free range of the pool is 24"));
  spec.num_workers = 0;
  auto invalid = client_->CreateJob(spec);
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid.status().message(), HasSubstr("num_workers must be in [1, 8], got 0"));

  auto list = client_->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);
  EXPECT_EQ(list->pool_slots, kPoolSlots);
  EXPECT_EQ(list->free_slots, kPoolSlots - 40);
  EXPECT_TRUE(list->jobs[0].spec.token.empty());

  EXPECT_EQ(client_->GetJob(42).status().code(), StatusCode::kNotFound);
  Status s = client_->DeleteJob(a.job_id, "not-the-token");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("wrong token for job 1"));
  ASSERT_TRUE(client_->DeleteJob(a.job_id, a.token).ok());
  // Slots are free at once; the job is remembered as ended with its reason.
  list = client_->ListJobs();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->free_slots, kPoolSlots);
  auto ended = client_->GetJob(a.job_id);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->state, JobState::kEnded);
  EXPECT_THAT(ended->end_reason, HasSubstr("deleted"));
  EXPECT_EQ(client_->DeleteJob(a.job_id, a.token).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Create(2, kPoolSlots).job_id != 0);
}

TEST_F(JobServiceTest, RegistrationNegativeCases) {
  const JobInfo a = Create(2, 8);
  auto wrong = client_->RegisterWorker(Reg(a, 0, 9000, "wrong-token-456"));
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied);
  auto out_of_range = client_->RegisterWorker(Reg(a, 2, 9000));
  EXPECT_EQ(out_of_range.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_range.status().message(), HasSubstr("rank must be < num_workers (2)"));
  auto ok = client_->RegisterWorker(Reg(a, 0, 9000));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->switch_info.udp_port, switch_->local_endpoint().port);
  EXPECT_EQ(ok->switch_info.num_slots, 8u);
  auto second_rank0 = client_->RegisterWorker(Reg(a, 0, 9001));
  EXPECT_EQ(second_rank0.status().code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(second_rank0.status().message(), HasSubstr("rank 0 of job 1 is already registered"));
  JobRegistration bad_port = Reg(a, 1, 9002);
  bad_port.worker.udp_ports = {};
  EXPECT_EQ(client_->RegisterWorker(bad_port).status().code(), StatusCode::kInvalidArgument);
  auto job = client_->GetJob(a.job_id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->num_registered, 1u);  // nothing but the good registration took effect
  ASSERT_EQ(job->workers.size(), 1u);
  EXPECT_EQ(job->workers[0].udp_ports, std::vector<uint16_t>{9000});
}

TEST_F(JobServiceTest, TwoConcurrentJobsExactResultsAndNoInterference) {
  const JobInfo a = Create(2, 8);
  const JobInfo b = Create(3, 8);
  auto ca = Join(a);
  auto cb = Join(b);
  ASSERT_EQ(ca.size(), 2u);
  ASSERT_EQ(cb.size(), 3u);
  std::thread ta([&] { RunAllReduce(ca, 5000, 7); });
  std::thread tb([&] { RunAllReduce(cb, 3000, -11); });
  ta.join();
  tb.join();

  // Negative actions while both jobs are live: none disturbs them.
  EXPECT_EQ(client_->RegisterWorker(Reg(a, 0, 9100)).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(client_->RegisterWorker(Reg(b, 1, 9101, "bad-token-0000")).status().code(),
            StatusCode::kPermissionDenied);
  {
    // An unregistered sender's datagram is dropped and counted.
    transport::UdpChannelOptions uo;
    uo.local = transport::Endpoint{kLocalhost, 0};
    auto rogue = transport::UdpChannel::Create(uo);
    ASSERT_TRUE(rogue.ok());
    auto bytes = dataplane::testing::Encode({.slot = 0, .values = std::vector<int32_t>(64, 5)});
    transport::TxDatagram d{bytes.data(), uint32_t(bytes.size()), switch_->local_endpoint()};
    ASSERT_TRUE((*rogue)->SendBurst({&d, 1}).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (switch_->counters().core.unknown_sender == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(switch_->counters().core.unknown_sender, 1u);
  RunAllReduce(ca, 777, 1);
  RunAllReduce(cb, 1, 2);

  auto ja = client_->GetJob(a.job_id);
  ASSERT_TRUE(ja.ok());
  EXPECT_EQ(ja->state, JobState::kRunning);
  EXPECT_GT(ja->counters.multicast_rounds, 0u);
  EXPECT_EQ(ja->counters.slot_out_of_range + ja->counters.not_running, 0u);
  EXPECT_EQ(ja->workers.size(), 2u);
  EXPECT_GT(ja->workers[1].received, 0u);
  EXPECT_NE(ja->slot_base, client_->GetJob(b.job_id)->slot_base);

  // Slot inspection: after complete rounds every counter is 0; the job's last round is in
  // one of the sets of slot 0 with both ranks' bits.
  auto slots = client_->InspectSlots(a.job_id, 0, 100);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 8u);  // clipped to the job's range
  const SlotInfo& s0 = (*slots)[0];
  EXPECT_EQ(s0.sets[0].counter + s0.sets[1].counter, 0u);
  EXPECT_EQ(s0.sets[0].bitmap[0] | s0.sets[1].bitmap[0], 3u);
  EXPECT_EQ(client_->InspectSlots(99, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client_->InspectSlots(a.job_id, 0, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(JobServiceTest, JobNeedingMoreSlotsThanTheWindowIsRefusedAtCreate) {
  const JobInfo small = Create(1, 4);
  Options o = WorkerOptions(small, 0);  // window 8 > 4 slots
  auto ctx = Context::Create(o);
  EXPECT_EQ(ctx.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(ctx.status().message(), HasSubstr("job 1: window_packets=8 (1 threads x 8 slots) does not fit the job's 4 "
                                "slots; the largest window that fits is 4"));
  o.job_token = "wrong-token-789";
  ctx = Context::Create(o);
  EXPECT_EQ(ctx.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(ctx.status().message(), HasSubstr("wrong token"));
}

TEST_F(JobServiceTest, KilledWorkerFailsTheOthersThenTheJobIsTornDownAndANewJobRuns) {
  const JobInfo other = Create(1, 8);  // a bystander job that must keep working
  auto bystander = Join(other);
  ASSERT_EQ(bystander.size(), 1u);
  const JobInfo a = Create(2, 32, /*idle=*/300ms);
  auto ctxs = Join(a);
  ASSERT_EQ(ctxs.size(), 2u);
  RunAllReduce(ctxs, 1000, 3);
  ctxs[1].reset();  // rank 1 dies mid-job

  std::vector<int32_t> buf(2000, 1);
  Status s = ctxs[0]->AllReduce(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  // The survivor fails by its call timeout (800 ms, named in the message), not by anything
  // longer: read from the status, not from the clock.
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr(" for 800 ms "));

  // The switch tears the idle job down and frees its slots (a state waited for; the deadline
  // only turns a hang into a failure).
  StatusOr<JobInfo> job = client_->GetJob(a.job_id);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (job.ok() && job->state != JobState::kEnded && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    job = client_->GetJob(a.job_id);
  }
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kEnded);
  EXPECT_THAT(job->end_reason, HasSubstr("idle_timeout 300 ms"));
  auto list = client_->ListJobs();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->free_slots, kPoolSlots - 8);
  // Registering into it now says why it is gone.
  auto late = client_->RegisterWorker(Reg(a, 1, 9200));
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.status().message(), HasSubstr("torn down by the switch"));

  ctxs.clear();
  const JobInfo next = Create(2, kPoolSlots - 8);  // needs the freed slots
  auto cn = Join(next);
  ASSERT_EQ(cn.size(), 2u);
  RunAllReduce(cn, 3000, 5);
  RunAllReduce(bystander, 100, 9);  // the other job was never disturbed
}

TEST_F(JobServiceTest, BarrierAndBroadcastAreJobScopedAndEndWithTheJob) {
  const JobInfo a = Create(2, 4);
  const JobInfo b = Create(2, 4);
  // One rank of each job in a barrier: neither completes (they are different barriers).
  auto fa = std::async(std::launch::async, [&] { return client_->Barrier(a.job_id, a.token, 0); });
  auto fb = std::async(std::launch::async, [&] { return client_->Barrier(b.job_id, b.token, 0); });
  // Each job shows its one waiting caller (operators see who waits, `jobs show`).
  auto waiters = [&](const JobInfo& j) {
    StatusOr<JobInfo> info = client_->GetJob(j.job_id, j.token);
    return info.ok() ? info->barrier_waiters : 99u;
  };
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((waiters(a) != 1 || waiters(b) != 1) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(waiters(a), 1u);
  ASSERT_EQ(waiters(b), 1u);
  EXPECT_EQ(client_->GetJob(a.job_id, a.token)->broadcast_waiters, 0u);
  // "Not completed" after 200 ms: load can only make the call later (missing a bug), never
  // complete a correct barrier early.
  EXPECT_EQ(fa.wait_for(200ms), std::future_status::timeout);
  EXPECT_EQ(client_->Barrier(a.job_id, a.token, 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Barrier(a.job_id, "bad-token-xyz", 1).code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(client_->Barrier(a.job_id, a.token, 1).ok());
  EXPECT_TRUE(fa.get().ok());
  EXPECT_EQ(waiters(a), 0u);
  // Deleting job b wakes its blocked rank with ABORTED and the reason.
  ASSERT_TRUE(client_->DeleteJob(b.job_id, b.token).ok());
  Status sb = fb.get();
  EXPECT_EQ(sb.code(), StatusCode::kAborted) << sb;
  EXPECT_THAT(sb.message(), HasSubstr("ended while this worker waited"));

  auto root = std::async(std::launch::async,
                         [&] { return client_->Broadcast(a.job_id, a.token, 1, 1, 4242); });
  auto got = client_->Broadcast(a.job_id, a.token, 0, 1, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 4242u);
  EXPECT_EQ(*root.get(), 4242u);
}

TEST(JobClientTest, UnreachableControllerFailsWithinTheTimeout) {
  // A port nobody listens on: bind one, note it, close it.
  int port = 0;
  {
    dataplane::SwitchConfig sc;
    ServerOptions so;
    so.listen_address = "127.0.0.1:0";
    UnimplementedSwitchForTests sink;
    auto ctl = ControllerServer::Start(so, &sink);
    ASSERT_TRUE(ctl.ok());
    port = (*ctl)->port();
  }
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  // "Within the timeout": the error names the 300 ms it waited (read from the status, not the
  // clock).
  auto client = JobClient::Connect(addr, 300ms);
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr("not connected within 300 ms"));

  Options o;
  o.controller_address = addr;
  o.job_id = 1;
  o.job_token = "whatever-token";
  o.rpc_timeout = 300ms;
  auto ctx = Context::Create(o);
  EXPECT_EQ(ctx.status().code(), StatusCode::kUnavailable) << ctx.status();
  EXPECT_THAT(ctx.status().message(), HasSubstr("unreachable"));
  EXPECT_THAT(ctx.status().message(), HasSubstr("300 ms"));

  o.job_token.clear();
  EXPECT_EQ(Context::Create(o).status().code(), StatusCode::kInvalidArgument);
}

// A switch with its embedded controller on free local ports, as `switchml switch` runs it.
struct EmbeddedSwitch {
  std::unique_ptr<dataplane::SwitchServer> sw;
  std::unique_ptr<ControllerServer> ctl;
  std::string address;  // the controller's
};

void StartEmbeddedSwitches(size_t count, uint32_t num_slots, std::vector<EmbeddedSwitch>* out) {
  out->resize(count);
  for (auto& e : *out) {
    auto sw = StartLocalSwitchForTests(num_slots, 8, dataplane::SwitchConfig{}.max_elements_per_packet);
    ASSERT_TRUE(sw.ok()) << sw.status();
    e.sw = std::move(*sw);
    auto ctl = StartLocalControllerForTests(e.sw.get(), kOperatorToken);
    ASSERT_TRUE(ctl.ok()) << ctl.status();
    e.ctl = std::move(*ctl);
    e.address = "127.0.0.1:" + std::to_string(e.ctl->port());
  }
}

// A token the operator chooses is unique among live jobs: refused (ALREADY_EXISTS, not naming
// the job) by the switch that has it, and by a standalone controller when another of its
// switches has it; free again once the job is deleted.
TEST(StandaloneControllerTest, AChosenTokenIsUniqueAmongLiveJobsOfEverySwitch) {
  std::vector<EmbeddedSwitch> switches;
  ASSERT_NO_FATAL_FAILURE(StartEmbeddedSwitches(2, 32, &switches));
  auto remote =
      RemoteSwitches::Connect({switches[0].address, switches[1].address}, 3s, kOperatorToken);
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto standalone = StartLocalControllerForTests(remote->get(), kOperatorToken);
  ASSERT_TRUE(standalone.ok());
  auto client = JobClient::Connect("127.0.0.1:" + std::to_string((*standalone)->port()), 3s);
  ASSERT_TRUE(client.ok());
  (*client)->set_operator_token(kOperatorToken);
  auto direct = JobClient::Connect(switches[1].address, 3s);  // switch 1's own controller
  ASSERT_TRUE(direct.ok());
  (*direct)->set_operator_token(kOperatorToken);

  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 8;
  spec.elements_per_packet = 64;
  spec.token = "the-operators-chosen-token";
  // A job with the token on switch 1 (created there directly).
  auto held = (*direct)->CreateJob(spec);
  ASSERT_TRUE(held.ok()) << held.status();
  // The same switch refuses a second one.
  auto again = (*direct)->CreateJob(spec);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("token"));
  EXPECT_THAT(again.status().message(), Not(HasSubstr("job " + std::to_string(held->job_id))));
  // The controller would place a job on switch 0 (more free slots), which has no such token:
  // the controller itself refuses it; with two switches too.
  auto placed = (*client)->CreateJob(spec);
  EXPECT_EQ(placed.status().code(), StatusCode::kAlreadyExists) << placed.status();
  JobSpec sharded = spec;
  sharded.switches = 2;
  EXPECT_EQ((*client)->CreateJob(sharded).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(switches[0].sw->ListJobs().jobs.size(), 0u);  // nothing was created
  // Another token is fine, and so is this one once its job is deleted.
  JobSpec other = spec;
  other.token = "another-chosen-token-1";
  auto ok = (*client)->CreateJob(other);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE((*direct)->DeleteJob(held->job_id, spec.token).ok());
  auto reused = (*client)->CreateJob(sharded);
  EXPECT_TRUE(reused.ok()) << reused.status();
}

// A standalone controller driving two switches over gRPC: jobs are placed on the switch with
// the most free slots, ids route back to it, workers reach the controller and the switches by
// address, and the reference Session path goes to the first switch.
TEST(StandaloneControllerTest, DrivesTwoSwitchesOverGrpc) {
  std::vector<EmbeddedSwitch> switches;
  ASSERT_NO_FATAL_FAILURE(StartEmbeddedSwitches(2, 32, &switches));
  auto remote =
      RemoteSwitches::Connect({switches[0].address, switches[1].address}, 3s, kOperatorToken);
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto standalone = StartLocalControllerForTests(remote->get(), kOperatorToken);
  ASSERT_TRUE(standalone.ok());
  const std::string address = "127.0.0.1:" + std::to_string((*standalone)->port());
  auto client = JobClient::Connect(address, 3s);
  ASSERT_TRUE(client.ok());
  (*client)->set_operator_token(kOperatorToken);

  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 20;
  spec.elements_per_packet = 64;
  auto a = (*client)->CreateJob(spec);  // switch 0 (tie: first)
  auto b = (*client)->CreateJob(spec);  // switch 1 (32 free vs 12)
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->job_id >> RemoteSwitches::kLocalIdBits, 0u);
  EXPECT_EQ(b->job_id >> RemoteSwitches::kLocalIdBits, 1u);
  EXPECT_EQ(switches[1].sw->ListJobs().jobs.size(), 1u);
  auto c = (*client)->CreateJob(spec);  // neither switch has 20 free slots any more
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  auto list = (*client)->ListJobs();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs.size(), 2u);
  EXPECT_EQ(list->pool_slots, 64u);

  for (const JobInfo* job : {&*a, &*b}) {
    std::vector<std::future<StatusOr<std::unique_ptr<Context>>>> f;
    for (uint32_t r = 0; r < 2; ++r) {
      f.push_back(std::async(std::launch::async, [&, r] {
        Options o;
        o.rank = r;
        o.num_workers = 2;
        o.controller_address = address;
        o.job_id = job->job_id;
        o.job_token = job->token;
        o.window_packets = 8;
        o.elements_per_packet = 64;
        o.initial_rto = 10ms;
        o.min_rto = 5ms;
        o.call_timeout = 2s;
        o.rpc_timeout = 3s;
        return Context::Create(o);
      }));
    }
    std::vector<std::unique_ptr<Context>> ctx;
    for (auto& x : f) {
      auto got = x.get();
      ASSERT_TRUE(got.ok()) << got.status();
      ctx.push_back(std::move(*got));
    }
    std::vector<int32_t> in0(1000), in1(1000), out0(1000), out1(1000);
    for (int i = 0; i < 1000; ++i) {
      in0[i] = i;
      in1[i] = 3 * i - 7;
    }
    std::thread t([&] { EXPECT_TRUE(ctx[1]->AllReduce(in1.data(), out1.data(), 1000, DataType::kInt32).ok()); });
    EXPECT_TRUE(ctx[0]->AllReduce(in0.data(), out0.data(), 1000, DataType::kInt32).ok());
    t.join();
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(out0[i], 4 * i - 7);
      ASSERT_EQ(out1[i], 4 * i - 7);
    }
  }
  // Each job's traffic went to its own switch.
  EXPECT_GT((*client)->GetJob(b->job_id)->counters.multicast_rounds, 0u);
  EXPECT_GT(switches[1].sw->counters().core.multicast_rounds, 0u);
  EXPECT_EQ((*client)->DeleteJob(b->job_id, "wrong-token-000").code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE((*client)->DeleteJob(b->job_id, b->token).ok());
  EXPECT_EQ(switches[1].sw->ListJobs().free_slots, 32u);
  EXPECT_EQ((*client)->GetJob(uint32_t{7} << RemoteSwitches::kLocalIdBits).status().code(),
            StatusCode::kNotFound);

  // The reference session path through the standalone controller reaches switch 0.
  auto session = SessionClient::Connect(address, 3s);
  ASSERT_TRUE(session.ok());
  WorkerRegistration reg;
  reg.rank = 0;
  reg.num_workers = 1;
  reg.ipv4 = kLocalhost;
  reg.udp_ports = {9999};
  auto info = (*session)->UdpSession(reg);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->udp_port, switches[0].sw->local_endpoint().port);
  EXPECT_EQ(switches[0].sw->jobs()->reference().num_registered, 1u);
  (*standalone)->Shutdown();
  for (auto& e : switches) {
    e.ctl->Shutdown();
    e.sw->Stop();
  }
}

// A standalone controller whose second switch goes down: calls that concern the first switch
// still answer at once (none waits for the dead switch until the deadline), a job on the dead
// switch is re-placed on the live one at the first call about it (the health probe is off
// here, so the list below is what it was at the kill), and new jobs go to the live switch.
// "None waits" is checked without a clock: the standalone controller's calls to the switches
// may take 60 s, the test's calls to it only 30 s, so a call that waited for the dead switch
// would fail here with DEADLINE_EXCEEDED instead of answering.
TEST(StandaloneControllerTest, ASwitchThatIsDownFailsFastAndStallsNothingElse) {
  std::vector<EmbeddedSwitch> switches;
  ASSERT_NO_FATAL_FAILURE(StartEmbeddedSwitches(2, 64, &switches));
  auto remote =
      RemoteSwitches::Connect({switches[0].address, switches[1].address}, 60s, kOperatorToken,
                              /*health_interval=*/0ms);
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto standalone = StartLocalControllerForTests(remote->get(), kOperatorToken);
  ASSERT_TRUE(standalone.ok());
  auto client = JobClient::Connect("127.0.0.1:" + std::to_string((*standalone)->port()), 30s);
  ASSERT_TRUE(client.ok());
  (*client)->set_operator_token(kOperatorToken);

  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 16;
  spec.elements_per_packet = 64;
  auto a = (*client)->CreateJob(spec);  // switch 0
  auto b = (*client)->CreateJob(spec);  // switch 1 (64 free vs 48)
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(b->job_id >> RemoteSwitches::kLocalIdBits, 1u);

  // Switch 1's controller goes away (as when its process dies).
  switches[1].ctl->Shutdown();
  switches[1].ctl.reset();
  auto list = (*client)->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);
  EXPECT_EQ(list->jobs[0].job_id, a->job_id);
  std::vector<std::pair<std::string, uint64_t>> counters;
  ASSERT_TRUE((*client)->ListJobs(&counters).ok());
  auto value = [&](const std::string& name) -> int64_t {
    for (auto& [k, v] : counters) {
      if (k == name) return int64_t(v);
    }
    return -1;
  };
  EXPECT_EQ(value("switch0.reachable"), 1);
  EXPECT_EQ(value("switch1.reachable"), 0);
  auto c = (*client)->CreateJob(spec);  // switch 0: the only one that answers
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->job_id >> RemoteSwitches::kLocalIdBits, 0u);
  // A job the controller placed on the dead switch is re-placed on the live one (which has
  // room), under the same id: placement 2, waiting for its workers again.
  auto moved = (*client)->GetJob(b->job_id);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->state, JobState::kWaitingForWorkers) << moved->end_reason;
  EXPECT_EQ(moved->assignment.placement, 2u);
  EXPECT_EQ(moved->job_id, b->job_id);
  EXPECT_EQ(switches[0].sw->ListJobs().free_slots, 64u - 3 * 16);
  const std::vector<control::SwitchHealth> health = (*remote)->Health();
  ASSERT_EQ(health.size(), 2u);
  EXPECT_TRUE(health[0].up);
  EXPECT_FALSE(health[1].up);
  EXPECT_EQ(health[1].jobs_replaced, 1u);

  (*standalone)->Shutdown();
  switches[0].ctl->Shutdown();
  for (auto& e : switches) e.sw->Stop();
}

}  // namespace
}  // namespace switchml::controller
