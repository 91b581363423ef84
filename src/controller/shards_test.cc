// A job on several switches (shards, docs/design.md "Shards on several switches"): the slot
// ownership of a shard (pure JobTable), then end to end through a standalone controller
// (RemoteSwitches) in front of real SwitchServers on 127.0.0.1 with different I/O thread
// counts: every worker thread reaches the shard that serves it and results are exact; the
// merged job view; a shard that dies fails every worker's call naming that shard, ends the job
// on the other shard, and leaves another job alone; a restarted controller finds the job
// again; the errors of bad placements. Then two-level jobs placed by the controller (leaf
// switches under a parent, docs/scaling.md "Two-level aggregation"): exact results through real
// contexts, bad requests refused naming the field, a dead leaf or parent or a leaf's part ended
// at its switch ending the job naming it, and a restarted controller finding the job again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/job_client.h"
#include "controller/local_switch_for_tests.h"
#include "controller/remote_switches.h"
#include "controller/session_service.h"
#include "dataplane/job_table.h"
#include "dataplane/switch_server.h"
#include "switchml/context.h"
#include "testing/exact_inputs.h"

namespace switchml::controller {

using control::JobInfo;
using control::JobSpec;
using control::JobState;
using rendezvous::JobClient;
namespace {

using dataplane::JobTable;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kOperatorToken[] = "operator-token-for-tests-0123";
constexpr uint32_t kThreads = 5;  // worker threads: shard 0 of 2 serves 0..2, shard 1 serves 3, 4
constexpr uint32_t kWindow = 40;  // 8 slots per worker thread
// A job's slots: on two switches shard 0 serves threads 0..2 and needs 24 slots, shard 1
// holds the other 24 (control::JobLayout).
constexpr uint32_t kJobSlots = 48;
constexpr uint32_t kPool = 96;  // slots per switch: two jobs of kJobSlots fit

// Shard s of K serves exactly its threads (control::JobLayout); inside a shard its I/O threads
// split those threads as a whole switch would, no I/O thread owns the others' slots, and each
// shard reserves only its share of the pool: the K shards of a job together use exactly the
// slots the job would use on one switch.
TEST(ShardSlotsTest, EachShardOwnsItsThreadsSlotsAndNoOthers) {
  for (uint32_t n : {1u, 2u, 3u, 5u, 8u, 13u}) {
    for (uint32_t k : {1u, 2u, 3u, 4u}) {
      for (uint32_t io_threads : {1u, 2u, 3u}) {
        const uint32_t w = 4;
        const uint32_t job_slots = k * ((n + k - 1) / k) * w;  // every shard holds its threads
        const uint32_t pool = 256;
        std::vector<int> owner_count(job_slots, 0);
        uint32_t used_by_shards = 0;
        for (uint32_t shard = 0; shard < k; ++shard) {
          auto t0 = std::make_shared<const JobTable>(pool, /*max_workers=*/4,
                                                     /*max_elements=*/64,
                                                     dataplane::AggregatorOptions{}, io_threads);
          control::JobSpec spec;
          spec.num_workers = 1;
          spec.num_slots = job_slots;
          spec.elements_per_packet = 64;
          spec.switches = k;
          uint32_t id = 0;
          auto t1 = JobTable::Create(*t0, spec, {.shard = shard, .num_shards = k, .shard_group = 7},
                                     "token-0123456789", TimePoint{}, &id);
          ASSERT_TRUE(t1.ok()) << t1.status();
          used_by_shards += pool - (*t1)->free_slots();
          control::JobRegistration reg;
          reg.job_id = id;
          reg.token = "token-0123456789";
          reg.worker.ipv4 = 0x0A000001;
          for (uint32_t t = 0; t < n; ++t) reg.worker.udp_ports.push_back(uint16_t(5000 + t));
          reg.worker.protocol_version = control::kClientProtocolVersion;
          reg.worker.num_worker_threads = n;
          reg.worker.window_packets = n * w;
          reg.worker.elements_per_packet = 64;
          control::JobWorkerGrant grant;
          auto t2 = JobTable::Register(**t1, reg, &grant, TimePoint{});
          ASSERT_TRUE(t2.ok()) << t2.status();
          const JobTable::Job& job = *(*t2)->FindJob(id);
          const control::JobLayout& layout = job.layout;
          ASSERT_EQ(layout.num_shards(), k);
          ASSERT_EQ(layout.worker_threads(), n);
          for (uint32_t t = 0; t < n; ++t) {
            const bool mine = layout.ShardOf(t) == shard;
            const control::SlotRange slots = layout.ThreadSlots(t);
            for (uint32_t slot = slots.first; slot < slots.end(); ++slot) {
              int owners = 0;
              for (uint32_t io = 0; io < io_threads; ++io) owners += job.OwnsSlot(io, slot);
              EXPECT_EQ(owners, mine ? 1 : 0)
                  << "n=" << n << " K=" << k << " T=" << io_threads << " shard " << shard
                  << " slot " << slot;
              if (mine) {
                EXPECT_TRUE(job.OwnsSlot(layout.IoThreadOf(t, io_threads), slot)) << "slot " << slot;
              }
              owner_count[slot] += owners;
            }
          }
        }
        for (uint32_t t = 0; t < n; ++t) {
          const control::SlotRange slots =
              control::JobLayout::Make({.job_slots = job_slots, .num_shards = k,
                                        .worker_threads = n, .window_packets = n * w})
                  ->ThreadSlots(t);
          for (uint32_t slot = slots.first; slot < slots.end(); ++slot) {
            EXPECT_EQ(owner_count[slot], 1) << "n=" << n << " K=" << k << " T=" << io_threads
                                            << ": slot " << slot << " has " << owner_count[slot]
                                            << " owners over the shards";
          }
        }
        EXPECT_EQ(used_by_shards, job_slots) << "n=" << n << " K=" << k;
      }
    }
  }
}

TEST(ShardSlotsTest, ASwitchRefusesToPlaceAJobOnSeveralSwitchesItself) {
  auto t0 = std::make_shared<const JobTable>(64, 4, 64);
  control::JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 8;
  spec.elements_per_packet = 64;
  spec.switches = 2;
  uint32_t id = 0;
  auto t1 = JobTable::Create(*t0, spec, {}, "token-0123456789", TimePoint{}, &id);
  ASSERT_FALSE(t1.ok());
  EXPECT_EQ(t1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t1.status().message(), HasSubstr("standalone controller"));
  // An assignment out of range, or one that disagrees with the request's switches.
  t1 = JobTable::Create(*t0, spec, {.shard = 2, .num_shards = 2, .shard_group = 7},
                        "token-0123456789", TimePoint{}, &id);
  ASSERT_FALSE(t1.ok());
  EXPECT_THAT(t1.status().message(), HasSubstr("shard 2 of num_shards 2"));
  spec.switches = 3;
  t1 = JobTable::Create(*t0, spec, {.shard = 1, .num_shards = 2, .shard_group = 7},
                        "token-0123456789", TimePoint{}, &id);
  ASSERT_FALSE(t1.ok());
  EXPECT_EQ(t1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(t1.status().message(), HasSubstr("switches=3 but this switch is shard 1 of num_shards 2"));
  // A shard is listed with its assignment (what a restarted controller finds its jobs by).
  spec.switches = 2;
  t1 = JobTable::Create(*t0, spec, {.shard = 1, .num_shards = 2, .shard_group = 7},
                        "token-0123456789", TimePoint{}, &id);
  ASSERT_TRUE(t1.ok()) << t1.status();
  const JobInfo info = (*t1)->Describe(*(*t1)->FindJob(id), TimePoint{});
  EXPECT_EQ(info.assignment, (control::ShardAssignment{.shard = 1, .num_shards = 2, .shard_group = 7}));
  EXPECT_EQ(info.held_slots.count, 4u);  // its share of the job's 8
}

// Switches with their embedded controllers, and a standalone controller driving them all.
class ShardsTest : public ::testing::Test {
 protected:
  void StartSwitches(std::vector<uint32_t> io_threads) {
    for (uint32_t t : io_threads) {
      auto sw = StartLocalSwitchForTests(kPool, /*max_workers=*/8, 256, t);
      ASSERT_TRUE(sw.ok()) << sw.status();
      auto ctl = StartLocalControllerForTests(sw->get(), kOperatorToken);
      ASSERT_TRUE(ctl.ok()) << ctl.status();
      addresses_.push_back("127.0.0.1:" + std::to_string((*ctl)->port()));
      switches_.push_back(std::move(*sw));
      controllers_.push_back(std::move(*ctl));
    }
    StartStandalone();
  }
  // (Re)starts the standalone controller in front of every switch (dead ones included);
  // address_ is its address. It probes its switches every 50 ms.
  void StartStandalone() {
    if (standalone_) standalone_->Shutdown();
    standalone_.reset();
    remote_.reset();
    auto remote = RemoteSwitches::Connect(addresses_, 3s, kOperatorToken, 50ms);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = std::move(*remote);
    auto ctl = StartLocalControllerForTests(remote_.get(), kOperatorToken);
    ASSERT_TRUE(ctl.ok()) << ctl.status();
    standalone_ = std::move(*ctl);
    address_ = "127.0.0.1:" + std::to_string(standalone_->port());
  }
  void TearDown() override {
    contexts_.clear();
    if (standalone_) standalone_->Shutdown();
    for (auto& c : controllers_) {
      if (c) c->Shutdown();
    }
    for (auto& s : switches_) {
      if (s) s->Stop();
    }
  }
  // Stops switch i and its controller, as if its host died.
  void Kill(size_t i) {
    controllers_[i]->Shutdown();
    controllers_[i].reset();
    switches_[i]->Stop();
  }

  std::unique_ptr<JobClient> Jobs() {
    auto c = JobClient::Connect(address_, 3s);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    (*c)->set_operator_token(kOperatorToken);
    return std::move(*c);
  }
  StatusOr<JobInfo> CreateJob(uint32_t workers, uint32_t switches) {
    JobSpec spec;
    spec.num_workers = workers;
    spec.num_slots = kJobSlots;
    spec.elements_per_packet = 64;
    spec.switches = switches;
    return Jobs()->CreateJob(spec);
  }
  // A two-level job of `racks` ({switches, workers} in rank order, a switch per shard) under
  // `parent` (a switch per shard; none: the controller chooses), K = the racks' switches.
  StatusOr<JobInfo> CreateTwoLevel(std::vector<JobSpec::Rack> racks,
                                   std::vector<uint32_t> parent = {}) {
    JobSpec spec;
    for (const auto& r : racks) spec.num_workers += r.workers;
    spec.num_slots = kJobSlots;
    spec.elements_per_packet = 64;
    spec.switches = racks.empty() ? 1 : uint32_t(racks[0].switches.size());
    spec.racks = std::move(racks);
    spec.parent_switches = std::move(parent);
    return Jobs()->CreateJob(spec);
  }
  // Every rank of `job` joins (concurrently) with kThreads worker threads.
  std::vector<Context*> Join(const JobInfo& job, uint32_t workers) {
    std::vector<std::future<StatusOr<std::unique_ptr<Context>>>> f;
    for (uint32_t r = 0; r < workers; ++r) {
      Options o;
      o.rank = r;
      o.num_workers = workers;
      o.controller_address = address_;
      o.bind_ip = "127.0.0.1";
      o.job_id = job.job_id;
      o.job_token = job.token;
      o.num_worker_threads = kThreads;
      o.window_packets = kWindow;
      o.elements_per_packet = 64;
      o.initial_rto = 5ms;
      o.min_rto = 2ms;
      o.max_rto = 100ms;
      o.call_timeout = 2s;
      o.rpc_timeout = 5s;
      f.push_back(std::async(std::launch::async, [o] { return Context::Create(o); }));
    }
    std::vector<Context*> out;
    for (auto& x : f) {
      auto ctx = x.get();
      EXPECT_TRUE(ctx.ok()) << ctx.status();
      if (!ctx.ok()) return {};
      out.push_back(ctx->get());
      contexts_.push_back(std::move(*ctx));
    }
    return out;
  }
  // Every rank all-reduces int32 and float32 tensors of `n` elements at once; returns each
  // rank's first error, and checks the results when all succeeded.
  std::vector<Status> AllReduce(const std::vector<Context*>& ctx, size_t n, uint64_t offset) {
    const uint32_t workers = uint32_t(ctx.size());
    std::vector<std::vector<int32_t>> in(workers, std::vector<int32_t>(n)), out = in;
    std::vector<std::vector<float>> fin(workers, std::vector<float>(n)), fout = fin;
    std::vector<Status> st(workers);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < workers; ++r) {
      testing::FillInt32(r, offset, in[r].data(), n);
      testing::FillFloat32(r, offset, fin[r].data(), n);
      threads.emplace_back([&, r] {
        st[r] = ctx[r]->AllReduce(in[r].data(), out[r].data(), n, DataType::kInt32);
        if (st[r].ok()) {
          st[r] = ctx[r]->AllReduce(fin[r].data(), fout[r].data(), n, DataType::kFloat32);
        }
      });
    }
    for (auto& t : threads) t.join();
    for (uint32_t r = 0; r < workers; ++r) {
      if (!st[r].ok()) continue;
      EXPECT_EQ(testing::VerifyInt32(out[r].data(), n, workers, offset).wrong, 0u)
          << "rank " << r << ", " << n << " elements";
      EXPECT_EQ(testing::VerifyFloat32(fout[r].data(), n, workers, offset,
                                       testing::BlockLayout{64, kThreads})
                    .wrong,
                0u)
          << "rank " << r << ", " << n << " elements";
    }
    return st;
  }

  // The job's shards on switch i: (local id, assignment) of its live jobs of `group`.
  std::vector<std::pair<uint32_t, control::ShardAssignment>> ShardsOn(size_t i, uint64_t group) {
    std::vector<std::pair<uint32_t, control::ShardAssignment>> out;
    for (const JobInfo& j : switches_[i]->ListJobs().jobs) {
      if (j.state != JobState::kEnded && j.assignment.shard_group == group) {
        out.push_back({j.job_id, j.assignment});
      }
    }
    return out;
  }
  // GetJob through the controller until `done` holds (a hang guard of 30 s, not a bound).
  JobInfo WaitForJob(uint32_t job_id, const std::function<bool(const JobInfo&)>& done) {
    JobInfo last;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto info = Jobs()->GetJob(job_id);
      EXPECT_TRUE(info.ok()) << info.status();
      if (!info.ok()) return last;
      last = *info;
      if (done(last)) return last;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "job " << job_id << " never reached the expected state: state "
                  << control::JobStateName(last.state) << ", placement "
                  << last.assignment.placement << ", end reason " << last.end_reason;
    return last;
  }

  std::vector<std::unique_ptr<dataplane::SwitchServer>> switches_;
  std::vector<std::unique_ptr<ControllerServer>> controllers_;
  std::vector<std::string> addresses_;  // each switch's controller
  std::unique_ptr<RemoteSwitches> remote_;
  std::unique_ptr<ControllerServer> standalone_;
  std::string address_;
  std::vector<std::unique_ptr<Context>> contexts_;
};

TEST_F(ShardsTest, AJobOnTwoSwitchesIsExactAndEveryThreadReachesItsShard) {
  // Switch 0 with one I/O thread, switch 1 with two, switch 2 unused by the job.
  StartSwitches({1, 2, 1});
  auto job = CreateJob(3, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.switches, 2u);
  auto ctx = Join(*job, 3);
  ASSERT_EQ(ctx.size(), 3u);
  // Sizes that give some threads empty slices, partial blocks, and several windows.
  uint64_t offset = 1;
  for (size_t n : {1, 4, 5, 63, 64 * 5 + 1, 64 * 40 * 3 + 17}) {
    for (const Status& s : AllReduce(ctx, n, offset++)) ASSERT_TRUE(s.ok()) << s;
  }
  // Both shards aggregated (each serves its threads: nothing at the wrong switch or I/O
  // thread); switch 1's second I/O thread served worker thread 4; switch 2 saw nothing.
  EXPECT_GT(switches_[0]->counters().core.consumed, 0u);
  EXPECT_GT(switches_[1]->io_thread_counters(0).core.consumed, 0u);
  EXPECT_GT(switches_[1]->io_thread_counters(1).core.consumed, 0u);
  EXPECT_EQ(switches_[2]->counters().core.datagrams_received, 0u);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(switches_[i]->counters().core.wrong_io_thread, 0u);
  // One merged job: running, two switches, counters summed over the shards.
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->spec.switches, 2u);
  EXPECT_EQ(info->num_registered, 3u);
  EXPECT_EQ(info->counters.received, switches_[0]->counters().core.datagrams_received +
                                         switches_[1]->counters().core.datagrams_received);
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);  // listed once, not once per shard
  EXPECT_EQ(list->jobs[0].job_id, job->job_id);
  EXPECT_EQ(list->jobs[0].spec.switches, 2u);
  // Each switch reserves only its shard's share of the job's slots: together what the job
  // would use on one switch.
  EXPECT_EQ(switches_[0]->ListJobs().free_slots + switches_[1]->ListJobs().free_slots,
            2 * kPool - kJobSlots);
  // Slot inspection merges the shards: every slot of the job comes back once, in order.
  auto slots = Jobs()->InspectSlots(job->job_id, 0, kJobSlots);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), size_t{kJobSlots});
  for (uint32_t k = 0; k < kJobSlots; ++k) EXPECT_EQ((*slots)[k].slot, k);
  // Delete ends it on both switches.
  ASSERT_TRUE(Jobs()->DeleteJob(job->job_id, job->token).ok());
  auto ended = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state, JobState::kEnded);
  EXPECT_THAT(ended->end_reason, HasSubstr("deleted"));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(switches_[i]->ListJobs().free_slots, kPool) << "switch " << i;
  }
}

TEST_F(ShardsTest, ADeadShardFailsEveryWorkerNamingItAndSparesOtherJobs) {
  StartSwitches({1, 1});
  auto job = CreateJob(2, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  // Another job, on one switch: placed on switch 0 (as much free room as switch 1; first).
  auto other = CreateJob(2, 1);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->job_id >> RemoteSwitches::kLocalIdBits, 0u);
  auto ctx = Join(*job, 2);
  auto other_ctx = Join(*other, 2);
  ASSERT_EQ(ctx.size(), 2u);
  ASSERT_EQ(other_ctx.size(), 2u);
  for (const Status& s : AllReduce(ctx, 1000, 1)) ASSERT_TRUE(s.ok()) << s;

  Kill(1);
  const std::vector<Status> failed = AllReduce(ctx, 1000, 2);
  // Each rank fails by its 2 s call timeout (named in the message), then asks the controller
  // why: the status says which wait ended the call, so no bound on the clock is needed. The
  // controller ended the job because a switch is lost: UNAVAILABLE (the switch path is down).
  for (size_t r = 0; r < failed.size(); ++r) {
    EXPECT_EQ(failed[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << failed[r];
    EXPECT_THAT(failed[r].message(), HasSubstr(" for 2000 ms ")) << "rank " << r;
    // Which shard's wait expires first is a race: the dead shard 1, or shard 0, whose part
    // of the job the controller deletes when it ends the job (so shard 0 stops answering).
    EXPECT_THAT(failed[r].message(), ContainsRegex("no result from switch shard [01] of 2 "))
        << "rank " << r;
    // The controller, asked why, has ended the job naming the dead shard.
    EXPECT_THAT(failed[r].message(), HasSubstr("has ended: shard 1 of 2 (switch 1 at"))
        << "rank " << r;
  }
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kEnded);
  EXPECT_THAT(info->end_reason, HasSubstr("shard 1 of 2"));
  // Two switches for a job of two, one of them dead: nowhere to re-place it.
  EXPECT_THAT(info->end_reason, HasSubstr("no healthy switch could take the job"));
  EXPECT_TRUE(info->switch_lost);
  // Its shard on switch 0 is gone too (its slots are free for other jobs)...
  const control::JobList on0 = switches_[0]->ListJobs();
  EXPECT_EQ(on0.free_slots, kPool - kJobSlots);  // only `other` holds slots
  // ... and the other job on switch 0 is unharmed.
  for (const Status& s : AllReduce(other_ctx, 3000, 3)) EXPECT_TRUE(s.ok()) << s;
  // Later calls of the broken contexts fail at once.
  int32_t x = 1, y = 0;
  EXPECT_EQ(ctx[0]->AllReduce(&x, &y, 1, DataType::kInt32).code(), StatusCode::kFailedPrecondition);
}

TEST_F(ShardsTest, ARestartedControllerFindsItsShardedJobsAgain) {
  StartSwitches({1, 2});
  auto job = CreateJob(2, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  auto ctx = Join(*job, 2);
  ASSERT_EQ(ctx.size(), 2u);
  for (const Status& s : AllReduce(ctx, 1000, 1)) ASSERT_TRUE(s.ok()) << s;
  // The standalone controller restarts (a new one on the same switches, another port).
  StartStandalone();
  // It knows the job again, under the same id, merged over both shards.
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->spec.switches, 2u);
  EXPECT_EQ(info->state, JobState::kRunning);
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);
  // The workers never needed it; a wrong token is refused (shard 0 checks it), the right one
  // is learned and ends the job on both switches.
  for (const Status& s : AllReduce(ctx, 2000, 2)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Jobs()->GetJob(job->job_id, "wrong-token-123").status().code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(Jobs()->DeleteJob(job->job_id, job->token).ok());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(switches_[i]->ListJobs().free_slots, kPool) << "switch " << i;
  auto ended = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->state, JobState::kEnded);
}

// One model for every K: a job of one switch created through the controller is found again by
// a restarted controller exactly like a job of two (same id, its token learned from the first
// call that presents it), its workers register through the new controller and get exact
// results, and deleting it ends it on its switch. A job created on a switch directly stays
// visible and usable through the controller, as the switch shows it, and is never adopted.
TEST_F(ShardsTest, AJobOfOneSwitchSurvivesAControllerRestartLikeAJobOfTwo) {
  StartSwitches({1, 2});
  auto one = CreateJob(2, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = CreateJob(2, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(one->spec.switches, 1u);
  EXPECT_EQ(one->assignment.num_shards, 1u);
  EXPECT_NE(one->assignment.shard_group, 0u);
  const size_t one_switch = one->job_id >> RemoteSwitches::kLocalIdBits;
  ASSERT_LT(one_switch, 2u);
  // Its switch lists it as shard 0 of 1 of a group, like each shard of the other job.
  const control::JobList on_switch = switches_[one_switch]->ListJobs();
  bool listed = false;
  for (const JobInfo& j : on_switch.jobs) {
    if (j.assignment.shard_group == one->assignment.shard_group) {
      listed = true;
      EXPECT_EQ(j.assignment, one->assignment);
    }
  }
  EXPECT_TRUE(listed);
  // A job created on switch 1 directly (no shard group).
  auto direct = JobClient::Connect("127.0.0.1:" + std::to_string(controllers_[1]->port()), 3s);
  ASSERT_TRUE(direct.ok());
  (*direct)->set_operator_token(kOperatorToken);
  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 4;
  spec.elements_per_packet = 64;
  auto own = (*direct)->CreateJob(spec);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->assignment, control::ShardAssignment{});
  const uint32_t own_id = (uint32_t{1} << RemoteSwitches::kLocalIdBits) | own->job_id;

  StartStandalone();  // a new controller on the same switches

  for (const JobInfo* job : {&*one, &*two}) {
    const uint32_t k = job->spec.switches;
    auto info = Jobs()->GetJob(job->job_id);
    ASSERT_TRUE(info.ok()) << "K=" << k << ": " << info.status();
    EXPECT_EQ(info->spec.switches, k);
    EXPECT_EQ(info->assignment.num_shards, k);
    EXPECT_EQ(info->assignment.shard_group, job->assignment.shard_group) << "K=" << k;
    EXPECT_EQ(info->spec.num_slots, kJobSlots) << "K=" << k;
    EXPECT_EQ(info->state, JobState::kWaitingForWorkers) << "K=" << k;
    // The token is checked by shard 0 until learned.
    EXPECT_EQ(Jobs()->GetJob(job->job_id, "wrong-token-123").status().code(),
              StatusCode::kPermissionDenied) << "K=" << k;
    EXPECT_EQ(Jobs()->DeleteJob(job->job_id, "wrong-token-123").code(),
              StatusCode::kPermissionDenied) << "K=" << k;
  }
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 3u);  // each adopted job once, and the switch's own job
  bool own_listed = false;
  for (const JobInfo& j : list->jobs) {
    if (j.job_id == own_id) {
      own_listed = true;
      EXPECT_EQ(j.assignment, control::ShardAssignment{});
      EXPECT_EQ(j.spec.num_slots, 4u);
    }
  }
  EXPECT_TRUE(own_listed);
  auto own_info = Jobs()->GetJob(own_id);
  ASSERT_TRUE(own_info.ok()) << own_info.status();
  EXPECT_EQ(own_info->spec.num_slots, 4u);
  EXPECT_EQ(own_info->state, JobState::kWaitingForWorkers);

  // Workers register through the restarted controller (which learns the tokens) and run.
  for (const JobInfo* job : {&*one, &*two}) {
    auto ctx = Join(*job, 2);
    ASSERT_EQ(ctx.size(), 2u) << "K=" << job->spec.switches;
    for (const Status& s : AllReduce(ctx, 3000, job->spec.switches)) {
      EXPECT_TRUE(s.ok()) << "K=" << job->spec.switches << ": " << s;
    }
    auto info = Jobs()->GetJob(job->job_id, job->token);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->state, JobState::kRunning);
    EXPECT_EQ(info->num_registered, 2u);
  }
  // Deleting either ends it on its switches: their slots are free again, only the switch's own
  // job holds any.
  for (const JobInfo* job : {&*one, &*two}) {
    ASSERT_TRUE(Jobs()->DeleteJob(job->job_id, job->token).ok()) << "K=" << job->spec.switches;
    auto ended = Jobs()->GetJob(job->job_id);
    ASSERT_TRUE(ended.ok()) << ended.status();
    EXPECT_EQ(ended->state, JobState::kEnded);
    EXPECT_EQ(ended->end_reason, "deleted through the controller");
    EXPECT_EQ(Jobs()->DeleteJob(job->job_id, job->token).code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(switches_[0]->ListJobs().free_slots, kPool);
  EXPECT_EQ(switches_[1]->ListJobs().free_slots, kPool - 4);
  for (auto& sw : switches_) {
    for (const JobInfo& j : sw->ListJobs().jobs) {
      if (j.assignment.shard_group != 0) {
        EXPECT_EQ(j.state, JobState::kEnded) << j.job_id;
      }
    }
  }
  // The switch's own job is deleted through the controller by its switch.
  EXPECT_EQ(Jobs()->DeleteJob(own_id, "wrong-token-123").code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(Jobs()->DeleteJob(own_id, own->token).ok());
  EXPECT_EQ(switches_[1]->ListJobs().free_slots, kPool);
}

// A job of one switch ends like a job of several when its switch ends it: the controller's
// next access check (what a worker's barrier and registration go through) or GetJob reports it
// ended naming the shard and its switch.
TEST_F(ShardsTest, AJobOfOneSwitchEndedByItsSwitchIsReportedEndedNamingTheSwitch) {
  StartSwitches({1});
  auto job = CreateJob(2, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  auto direct = JobClient::Connect("127.0.0.1:" + std::to_string(controllers_[0]->port()), 3s);
  ASSERT_TRUE(direct.ok());
  (*direct)->set_operator_token(kOperatorToken);
  const uint32_t local_id = job->job_id & ((uint32_t{1} << RemoteSwitches::kLocalIdBits) - 1);
  ASSERT_TRUE((*direct)->DeleteJob(local_id, job->token).ok());
  // Within the access check's 200 ms trust, then for good.
  Status access;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    access = Jobs()->GetJob(job->job_id, job->token).status();
    if (!access.ok()) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(access.code(), StatusCode::kFailedPrecondition) << access;
  EXPECT_THAT(access.message(), HasSubstr("has ended: shard 0 of 1 (switch 0 at 127.0.0.1:"));
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kEnded);
  EXPECT_THAT(info->end_reason, HasSubstr("shard 0 of 1 (switch 0 at"));
  EXPECT_EQ(info->spec.num_workers, 2u);  // the switch's record, merged
}

// A switch that dies under a job: the controller's health probe finds it down and re-places the
// job on healthy switches with room (every shard anew: the job waits for its workers again),
// same id and token, placement 2; the workers register again and get exact results. A job on a
// healthy switch is untouched; the dead switch shows down in the controller's list.
TEST_F(ShardsTest, AJobWhoseSwitchDiesIsRePlacedAndItsWorkersRegisterAgain) {
  StartSwitches({1, 1, 1});
  auto job = CreateJob(2, 2);  // switches 0 and 1 (ties: the first)
  ASSERT_TRUE(job.ok()) << job.status();
  auto other = CreateJob(2, 1);  // switch 2: the most room
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(other->job_id >> RemoteSwitches::kLocalIdBits, 2u);
  const uint64_t group = job->assignment.shard_group;
  EXPECT_EQ(job->assignment.placement, 1u);
  ASSERT_EQ(ShardsOn(0, group).size(), 1u);
  ASSERT_EQ(ShardsOn(1, group).size(), 1u);
  const uint32_t old_on_0 = ShardsOn(0, group)[0].first;
  auto ctx = Join(*job, 2);
  auto other_ctx = Join(*other, 2);
  ASSERT_EQ(ctx.size(), 2u);
  ASSERT_EQ(other_ctx.size(), 2u);
  for (const Status& s : AllReduce(ctx, 1000, 1)) ASSERT_TRUE(s.ok()) << s;

  Kill(1);
  const JobInfo replaced = WaitForJob(job->job_id, [](const JobInfo& j) {
    return j.assignment.placement >= 2 || j.state == JobState::kEnded;
  });
  ASSERT_NE(replaced.state, JobState::kEnded) << replaced.end_reason;
  EXPECT_EQ(replaced.assignment.placement, 2u);
  EXPECT_EQ(replaced.job_id, job->job_id);
  EXPECT_EQ(replaced.assignment.shard_group, group);
  EXPECT_EQ(replaced.spec.switches, 2u);
  EXPECT_EQ(replaced.spec.num_slots, kJobSlots);
  // Registrations reset: the job waits for every worker again.
  EXPECT_EQ(replaced.state, JobState::kWaitingForWorkers);
  EXPECT_EQ(replaced.num_registered, 0u);
  // Its shards now: one on switch 0 (a new one: the old one, with the old registrations, is
  // ended) and one on switch 2, each with placement 2 and the job's id.
  const auto on0 = ShardsOn(0, group);
  const auto on2 = ShardsOn(2, group);
  ASSERT_EQ(on0.size(), 1u);
  ASSERT_EQ(on2.size(), 1u);
  EXPECT_NE(on0[0].first, old_on_0);
  for (const auto& [local, a] : {on0[0], on2[0]}) {
    EXPECT_EQ(a.placement, 2u);
    EXPECT_EQ(a.job_id, job->job_id);
    EXPECT_EQ(a.num_shards, 2u);
  }
  EXPECT_NE(on0[0].second.shard, on2[0].second.shard);
  auto old_shard = switches_[0]->GetJob(old_on_0);
  ASSERT_TRUE(old_shard.ok()) << old_shard.status();
  EXPECT_EQ(old_shard->state, JobState::kEnded);
  // The old workers' calls fail: their shards are gone. UNAVAILABLE (the switch path is down)
  // saying that the job was re-placed and they must register again.
  const std::vector<Status> stale = AllReduce(ctx, 1000, 9);
  for (size_t r = 0; r < stale.size(); ++r) {
    EXPECT_EQ(stale[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << stale[r];
    EXPECT_THAT(stale[r].message(), HasSubstr("re-placed job " + std::to_string(job->job_id) +
                                              " on other switches (placement 2; this worker "
                                              "registered into placement 1)"))
        << "rank " << r;
  }
  // The token still opens the job; a wrong one does not.
  EXPECT_TRUE(Jobs()->GetJob(job->job_id, job->token).ok());
  EXPECT_EQ(Jobs()->GetJob(job->job_id, "wrong-token-123").status().code(),
            StatusCode::kPermissionDenied);

  // The workers register again, same id and token, and get exact results from the new shards.
  ctx = Join(*job, 2);
  ASSERT_EQ(ctx.size(), 2u);
  const uint64_t consumed2 = switches_[2]->counters().core.consumed;
  for (const Status& s : AllReduce(ctx, 3000, 2)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_GT(switches_[2]->counters().core.consumed, consumed2);
  auto running = Jobs()->GetJob(job->job_id, job->token);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->state, JobState::kRunning);
  EXPECT_EQ(running->assignment.placement, 2u);

  // The job on the healthy switch is untouched (placement 1; its workers never re-registered).
  for (const Status& s : AllReduce(other_ctx, 2000, 3)) EXPECT_TRUE(s.ok()) << s;
  auto other_info = Jobs()->GetJob(other->job_id);
  ASSERT_TRUE(other_info.ok());
  EXPECT_EQ(other_info->assignment.placement, 1u);
  EXPECT_EQ(other_info->state, JobState::kRunning);

  // The controller's list shows each switch's health: switch 1 down, one job re-placed away.
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->switches.size(), 3u);
  EXPECT_TRUE(list->switches[0].up);
  EXPECT_FALSE(list->switches[1].up);
  EXPECT_EQ(list->switches[1].address, addresses_[1]);
  EXPECT_FALSE(list->switches[1].last_error.empty());
  EXPECT_EQ(list->switches[1].jobs_replaced, 1u);
  EXPECT_TRUE(list->switches[2].up);
  EXPECT_EQ(list->switches[2].jobs_replaced, 0u);
  // A dead switch gets no new jobs: a job of two goes to switches 0 and 2.
  auto later = CreateJob(2, 2);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(ShardsOn(1, later->assignment.shard_group).size(), 0u);
}

// A job of one switch whose switch dies, with no other switch having room: ended (UNAVAILABLE
// for its workers: switch_lost), the reason naming the dead shard and why it could not move.
TEST_F(ShardsTest, AJobThatNoHealthySwitchCanTakeEndsSayingSo) {
  StartSwitches({1, 1});
  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = kPool - 8;  // only one such job fits on a switch
  spec.elements_per_packet = 64;
  auto big0 = Jobs()->CreateJob(spec);
  auto big1 = Jobs()->CreateJob(spec);
  ASSERT_TRUE(big0.ok() && big1.ok());
  ASSERT_EQ(big1->job_id >> RemoteSwitches::kLocalIdBits, 1u);
  Kill(1);
  const JobInfo ended =
      WaitForJob(big1->job_id, [](const JobInfo& j) { return j.state == JobState::kEnded; });
  EXPECT_TRUE(ended.switch_lost);
  EXPECT_THAT(ended.end_reason, HasSubstr("shard 0 of 1 (switch 1 at " + addresses_[1]));
  EXPECT_THAT(ended.end_reason, HasSubstr("no healthy switch could take the job"));
  const Status access = Jobs()->GetJob(big1->job_id, big1->token).status();
  EXPECT_EQ(access.code(), StatusCode::kUnavailable) << access;
  // The job on the live switch is untouched.
  auto info0 = Jobs()->GetJob(big0->job_id, big0->token);
  ASSERT_TRUE(info0.ok()) << info0.status();
  EXPECT_EQ(info0->state, JobState::kWaitingForWorkers);
  EXPECT_EQ(info0->assignment.placement, 1u);
}

// A restarted controller (Adopt) keeps running jobs of one and of two switches running (their
// workers never need it), learns their tokens from the first call, re-places an adopted job
// whose switch then dies, and a controller restarted after that (with the dead switch still
// down) finds the re-placed job under its id and placement. An adopted job whose token it has
// not learned cannot be re-placed: it ends saying so.
TEST_F(ShardsTest, ControllerRestartsKeepJobsAndRePlaceAdoptedOnes) {
  StartSwitches({1, 1, 1});
  auto one = CreateJob(2, 1);  // switch 0
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = CreateJob(2, 2);  // switches 1 and 2 (the most room)
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(one->job_id >> RemoteSwitches::kLocalIdBits, 0u);
  ASSERT_EQ(ShardsOn(1, two->assignment.shard_group).size(), 1u);
  auto ctx_one = Join(*one, 2);
  auto ctx_two = Join(*two, 2);
  ASSERT_EQ(ctx_one.size(), 2u);
  ASSERT_EQ(ctx_two.size(), 2u);
  for (const Status& s : AllReduce(ctx_one, 1000, 1)) ASSERT_TRUE(s.ok()) << s;
  for (const Status& s : AllReduce(ctx_two, 1000, 2)) ASSERT_TRUE(s.ok()) << s;

  StartStandalone();  // restart: the jobs keep running, under the same ids
  for (const Status& s : AllReduce(ctx_one, 2000, 3)) EXPECT_TRUE(s.ok()) << s;
  for (const Status& s : AllReduce(ctx_two, 2000, 4)) EXPECT_TRUE(s.ok()) << s;
  for (const JobInfo* job : {&*one, &*two}) {
    auto info = Jobs()->GetJob(job->job_id, job->token);  // teaches the token
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->state, JobState::kRunning);
    EXPECT_EQ(info->assignment.placement, 1u);
  }

  Kill(1);  // serves shard 0 of `two`
  const JobInfo replaced = WaitForJob(two->job_id, [](const JobInfo& j) {
    return j.assignment.placement >= 2 || j.state == JobState::kEnded;
  });
  ASSERT_NE(replaced.state, JobState::kEnded) << replaced.end_reason;
  EXPECT_EQ(replaced.job_id, two->job_id);
  EXPECT_EQ(ShardsOn(0, two->assignment.shard_group).size(), 1u);
  EXPECT_EQ(ShardsOn(2, two->assignment.shard_group).size(), 1u);
  ctx_two = Join(*two, 2);
  ASSERT_EQ(ctx_two.size(), 2u);
  for (const Status& s : AllReduce(ctx_two, 3000, 5)) EXPECT_TRUE(s.ok()) << s;
  for (const Status& s : AllReduce(ctx_one, 3000, 6)) EXPECT_TRUE(s.ok()) << s;  // untouched

  // Restarted again, switch 1 still dead: the re-placed job is found under its id (not its
  // new shard 0's), placement 2, and keeps running.
  StartStandalone();
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->switches.size(), 3u);
  EXPECT_FALSE(list->switches[1].up);
  auto info = Jobs()->GetJob(two->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->assignment.placement, 2u);
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->spec.switches, 2u);
  for (const Status& s : AllReduce(ctx_two, 2000, 7)) EXPECT_TRUE(s.ok()) << s;
  size_t listed = 0;
  for (const JobInfo& j : list->jobs) listed += j.job_id == two->job_id || j.job_id == one->job_id;
  EXPECT_EQ(listed, 2u);

  // Switch 0 dies before any call presented the adopted jobs' tokens to this controller.
  Kill(0);
  const JobInfo lost =
      WaitForJob(one->job_id, [](const JobInfo& j) { return j.state == JobState::kEnded; });
  EXPECT_TRUE(lost.switch_lost);
  EXPECT_THAT(lost.end_reason, HasSubstr("no call has presented the job's token"));
}

TEST_F(ShardsTest, BadPlacementsAreRefusedWithTheReason) {
  StartSwitches({1, 1});
  auto three = CreateJob(2, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(three.status().message(), HasSubstr("switches=3 but this controller drives 2"));
  // The controller assigns shards, not the operator: a request carrying an assignment's
  // fields (which only the controller-to-switch path sends) is refused naming the field.
  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 8;
  spec.elements_per_packet = 64;
  spec.switches = 2;
  for (const control::ShardAssignment& a :
       {control::ShardAssignment{.shard = 0, .num_shards = 2, .shard_group = 0},
        control::ShardAssignment{.shard = 1, .num_shards = 1, .shard_group = 0},
        control::ShardAssignment{.shard = 0, .num_shards = 1, .shard_group = 99}}) {
    auto forged = Jobs()->CreateJobShard(spec, a);
    ASSERT_FALSE(forged.ok());
    EXPECT_EQ(forged.status().code(), StatusCode::kInvalidArgument);
    const char* field = a.num_shards != 1 ? "num_shards" : a.shard != 0 ? "shard" : "shard_group";
    EXPECT_THAT(forged.status().message(), HasSubstr(std::string(field) + " (shard "));
    EXPECT_THAT(forged.status().message(), HasSubstr("ask for switches"));
  }
  for (auto& sw : switches_) EXPECT_EQ(sw->ListJobs().jobs.size(), 0u);  // nothing created
  // A switch's own (embedded) controller refuses switches > 1.
  auto direct = JobClient::Connect("127.0.0.1:" + std::to_string(controllers_[0]->port()), 3s);
  ASSERT_TRUE(direct.ok());
  (*direct)->set_operator_token(kOperatorToken);
  auto embedded = (*direct)->CreateJob(spec);
  ASSERT_FALSE(embedded.ok());
  EXPECT_THAT(embedded.status().message(), HasSubstr("standalone controller"));
  // Not enough room on one of them: the message says how many switches qualify.
  spec.switches = 1;
  spec.num_slots = kPool - 6;
  auto big = Jobs()->CreateJob(spec);
  ASSERT_TRUE(big.ok()) << big.status();
  spec.switches = 2;
  spec.num_slots = 14;  // a shard's share is 7 slots, one more than the 6 left on that switch
  auto no_room = Jobs()->CreateJob(spec);
  ASSERT_FALSE(no_room.ok());
  EXPECT_EQ(no_room.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(no_room.status().message(), HasSubstr("only 1 of the 2 switches"));
  // A wrong token is refused by the controller for a sharded job too.
  spec.num_slots = 4;
  auto job = Jobs()->CreateJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(Jobs()->DeleteJob(job->job_id, "wrong-token-123").code(), StatusCode::kPermissionDenied);
}

// ---- Two-level jobs (docs/scaling.md "Two-level aggregation") placed by the controller ----

// The local jobs of group `group` on switch i that are live (a leaf or the parent).
size_t LiveInGroup(dataplane::SwitchServer& sw, uint64_t group) {
  size_t n = 0;
  for (const JobInfo& j : sw.ListJobs().jobs) {
    n += j.state != JobState::kEnded && j.assignment.shard_group == group;
  }
  return n;
}

// 2 racks x 2 workers under a parent, created through the controller: real contexts (global
// ranks, N = 4) register at their leaf through the controller; int32 exact, float32 within the
// global bound; the leaves sent their partials up and the parent aggregated them; one merged
// job (running, every rack's workers, the racks and the parent chosen); delete frees all.
TEST_F(ShardsTest, ATwoLevelJobThroughTheControllerIsExact) {
  // Leaves on switches 0 and 1 (1 has two I/O threads, each serving its share of the job and
  // sending it up to the parent's I/O thread that owns it); the parent is chosen: switch 2, the
  // only switch that is not a leaf, with three I/O threads.
  StartSwitches({1, 2, 3});
  auto job = CreateTwoLevel({{.switches = {0}, .workers = 2}, {.switches = {1}, .workers = 2}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.num_workers, 4u);
  ASSERT_EQ(job->spec.racks.size(), 2u);
  EXPECT_EQ(job->spec.parent_switches, std::vector<uint32_t>{2});
  EXPECT_FALSE(job->token.empty());
  EXPECT_EQ(job->job_id >> RemoteSwitches::kLocalIdBits, 2u);  // the parent's id
  // Each leaf's job has the parent as its uplink; the parent's job has both leaves registered.
  const uint64_t group = job->assignment.shard_group;
  ASSERT_NE(group, 0u);
  for (uint32_t leaf = 0; leaf < 2; ++leaf) {
    auto on = ShardsOn(leaf, group);
    ASSERT_EQ(on.size(), 1u) << "leaf " << leaf;
    EXPECT_TRUE(on[0].second.uplink.enabled());
    EXPECT_EQ(on[0].second.uplink.leaf, leaf);
    EXPECT_EQ(on[0].second.uplink.total_workers, 4u);
    EXPECT_EQ(on[0].second.uplink.parent_ports, switches_[2]->ListJobs().data_udp_ports);
    EXPECT_EQ(on[0].second.uplink.parent_ports.size(), 3u);
  }
  auto parent_jobs = ShardsOn(2, group);
  ASSERT_EQ(parent_jobs.size(), 1u);
  auto parent_job = switches_[2]->GetJob(parent_jobs[0].first);
  ASSERT_TRUE(parent_job.ok()) << parent_job.status();
  EXPECT_EQ(parent_job->spec.num_workers, 2u);
  // A leaf registers at the parent when its rack's first worker registers (the layout is the
  // workers').
  EXPECT_EQ(parent_job->num_registered, 0u);
  EXPECT_FALSE(parent_jobs[0].second.uplink.enabled());

  auto ctx = Join(*job, 4);
  ASSERT_EQ(ctx.size(), 4u);
  parent_job = switches_[2]->GetJob(parent_jobs[0].first);
  ASSERT_TRUE(parent_job.ok()) << parent_job.status();
  EXPECT_EQ(parent_job->num_registered, 2u);
  EXPECT_EQ(parent_job->workers[1].udp_ports.size(), kThreads);
  uint64_t offset = 1;
  for (size_t n : {1, 63, 64 * 5 + 1, 64 * 40 * 3 + 17}) {
    for (const Status& s : AllReduce(ctx, n, offset++)) ASSERT_TRUE(s.ok()) << s;
  }
  for (uint32_t leaf = 0; leaf < 2; ++leaf) {
    EXPECT_GT(switches_[leaf]->counters().core.uplink_sent, 0u) << "leaf " << leaf;
  }
  EXPECT_GT(switches_[2]->counters().core.consumed, 0u);  // the parent aggregated
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->spec.num_workers, 4u);
  EXPECT_EQ(info->num_registered, 4u);
  ASSERT_EQ(info->workers.size(), 4u);
  for (uint32_t r = 0; r < 4; ++r) EXPECT_EQ(info->workers[r].rank, r);  // global ranks
  EXPECT_EQ(info->spec.racks, job->spec.racks);
  EXPECT_EQ(info->spec.parent_switches, job->spec.parent_switches);
  EXPECT_GT(info->counters.received, 0u);
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);  // listed once, not once per level
  EXPECT_EQ(list->jobs[0].job_id, job->job_id);
  // Delete ends it on the leaves and the parent.
  ASSERT_TRUE(Jobs()->DeleteJob(job->job_id, job->token).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(switches_[i]->ListJobs().free_slots, kPool) << "switch " << i;
  }
}

// K = 2 shards per level (docs/scaling.md): each rack's two leaf switches serve its workers'
// threads as the two shards of a one-level job would (5 threads: 3 and 2), leaf shard s of
// every rack is a worker of the parent's shard s (switches chosen by the controller), with
// several I/O threads on some switches. Exact; a restarted controller finds the job again
// (all eight parts); a dead leaf shard ends it naming that shard.
TEST_F(ShardsTest, ATwoLevelJobWithTwoShardsPerLevelIsExactSurvivesARestartAndNamesADeadShard) {
  StartSwitches({1, 2, 1, 3, 2, 1});
  auto job = CreateTwoLevel({{.switches = {0, 1}, .workers = 2}, {.switches = {2, 3}, .workers = 2}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.switches, 2u);
  EXPECT_EQ(job->spec.parent_switches, (std::vector<uint32_t>{4, 5}));
  const uint64_t group = job->assignment.shard_group;
  // Leaf shard s of each rack goes up to the parent's shard s.
  for (uint32_t rack = 0; rack < 2; ++rack) {
    for (uint32_t s = 0; s < 2; ++s) {
      auto on = ShardsOn(rack * 2 + s, group);
      ASSERT_EQ(on.size(), 1u) << "rack " << rack << " shard " << s;
      EXPECT_EQ(on[0].second.shard, s);
      EXPECT_EQ(on[0].second.num_shards, 2u);
      EXPECT_EQ(on[0].second.uplink.leaf, rack);
      EXPECT_EQ(on[0].second.uplink.parent_ports, switches_[4 + s]->ListJobs().data_udp_ports);
    }
  }
  auto ctx = Join(*job, 4);
  ASSERT_EQ(ctx.size(), 4u);
  uint64_t offset = 1;
  for (size_t n : {1, 63, 64 * 5 + 1, 64 * 40 * 3 + 17}) {
    for (const Status& s : AllReduce(ctx, n, offset++)) ASSERT_TRUE(s.ok()) << s;
  }
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_GT(switches_[i]->counters().core.uplink_sent, 0u) << "leaf switch " << i;
    EXPECT_EQ(switches_[i]->counters().core.wrong_io_thread, 0u) << "leaf switch " << i;
  }
  for (uint32_t i = 4; i < 6; ++i) {
    EXPECT_GT(switches_[i]->counters().core.consumed, 0u) << "parent switch " << i;
    EXPECT_EQ(switches_[i]->counters().core.wrong_io_thread, 0u) << "parent switch " << i;
  }
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->num_registered, 4u);
  ASSERT_EQ(info->workers.size(), 4u);  // each rack's workers once, not once per shard
  for (uint32_t r = 0; r < 4; ++r) EXPECT_EQ(info->workers[r].rank, r);
  EXPECT_EQ(info->spec.racks, job->spec.racks);
  EXPECT_EQ(info->spec.switches, 2u);

  StartStandalone();
  info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->spec.racks, job->spec.racks);
  EXPECT_EQ(info->spec.parent_switches, job->spec.parent_switches);
  EXPECT_EQ(info->spec.switches, 2u);
  EXPECT_EQ(info->num_registered, 4u);
  for (const Status& s : AllReduce(ctx, 3000, offset++)) EXPECT_TRUE(s.ok()) << s;
  // The restarted controller learns the token from a call presenting it (to delete the other
  // parts when the job ends).
  ASSERT_TRUE(Jobs()->GetJob(job->job_id, job->token).ok());

  Kill(3);  // rack 1's leaf shard 1
  const std::vector<Status> failed = AllReduce(ctx, 64 * 40 * 3, offset++);
  for (size_t r = 0; r < failed.size(); ++r) {
    EXPECT_EQ(failed[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << failed[r];
  }
  const JobInfo ended =
      WaitForJob(job->job_id, [](const JobInfo& j) { return j.state == JobState::kEnded; });
  EXPECT_THAT(ended.end_reason, HasSubstr("leaf 1 shard 1 of 2 (switch 3 at"));
  EXPECT_TRUE(ended.switch_lost);
  for (uint32_t i : {0u, 1u, 2u, 4u, 5u}) {
    EXPECT_EQ(switches_[i]->ListJobs().free_slots, kPool) << "switch " << i;
  }
}

// Racks whose workers cut calls differently (other threads or window) would put other data in
// a slot than the other racks, and the parent would add it up with status OK: refused.
TEST_F(ShardsTest, RacksThatDisagreeAreRefused) {
  StartSwitches({1, 1, 1});
  auto job = CreateTwoLevel({{.switches = {1}, .workers = 1}, {.switches = {2}, .workers = 1}}, {0});
  ASSERT_TRUE(job.ok()) << job.status();
  auto jobs = Jobs();
  ASSERT_NE(jobs, nullptr);
  auto reg = [&](uint32_t rank, uint32_t threads, uint16_t port) {
    JobRegistration r;
    r.job_id = job->job_id;
    r.token = job->token;
    r.worker.rank = rank;
    r.worker.num_workers = 2;
    r.worker.ipv4 = 0x7F000001;
    r.worker.protocol_version = control::kClientProtocolVersion;
    r.worker.num_worker_threads = threads;
    r.worker.window_packets = 8 * threads;
    r.worker.elements_per_packet = 64;
    for (uint32_t t = 0; t < threads; ++t) r.worker.udp_ports.push_back(uint16_t(port + t));
    return r;
  };
  ASSERT_TRUE(jobs->RegisterWorker(reg(0, 1, 41000)).ok());
  auto refused = jobs->RegisterWorker(reg(1, 2, 41100));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("num_worker_threads=2 (rank 0: 1)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("window_packets=16 (rank 0: 8)"));
  // A reference-mode worker (no threads, no ports) cannot join: the leaves register at the
  // parent with the workers' layout.
  JobRegistration bare = reg(1, 1, 41100);
  bare.worker.num_worker_threads = 0;
  bare.worker.window_packets = 0;
  bare.worker.udp_ports.clear();
  auto no_layout = jobs->RegisterWorker(bare);
  ASSERT_FALSE(no_layout.ok());
  EXPECT_EQ(no_layout.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_layout.status().message(), HasSubstr("reference-mode workers cannot join it"));
  // The same rank agreeing joins.
  EXPECT_TRUE(jobs->RegisterWorker(reg(1, 1, 41100)).ok());
}

TEST_F(ShardsTest, BadTwoLevelRequestsAreRefusedNamingTheField) {
  StartSwitches({1, 1, 1});
  using Rack = JobSpec::Rack;
  struct Case {
    std::vector<Rack> racks;
    uint32_t workers;  // 0: the racks' sum
    std::vector<uint32_t> parent;
    uint32_t switches;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{{{0}, 2}, {{1}, 2}}, 5, {}, 1,
            "racks (--leaf): the racks' workers sum to 4 but num_workers (--workers) is 5"},
           {{{{0}, 2}, {{3}, 2}}, 0, {}, 1,
            "racks[1] (--leaf 3:2): switch 3 is out of range: this controller drives 3"},
           {{{{0}, 2}, {{1}, 2}}, 0, {1}, 1,
            "parent_switches (--parent) 1 is also racks[1] (--leaf 1:2); the parent must be"},
           {{{{0}, 2}, {{1}, 2}}, 0, {7}, 1,
            "parent_switches (--parent) 7: switch 7 is out of range"},
           {{{{0}, 2}, {{0}, 2}}, 0, {}, 1,
            "racks[1] (--leaf 0:2): switch 0 is also racks[0] (--leaf 0:2)"},
           {{{{0}, 2}, {{1}, 0}}, 0, {}, 1, "racks[1] (--leaf 1:0): a rack needs >= 1"},
           {{{{0}, 4}}, 0, {}, 1, "racks (--leaf): a two-level job needs at least two"},
           {{{{0}, 2}, {{1}, 2}}, 0, {}, 2,
            "racks[0] (--leaf 0:2) names 1 switch(es) but the job has 2 shard(s) per level"},
           {{{{0, 1}, 2}, {{2}, 2}}, 0, {}, 2,
            "racks[1] (--leaf 2:2) names 1 switch(es) but the job has 2 shard(s) per level"},
           {{{{0}, 2}, {{1}, 2}}, 0, {2, 0}, 1,
            "parent_switches (--parent) names 2 switch(es) but the job has 1 shard(s)"},
           {{}, 4, {2}, 1, "parent_switches (--parent) 2 needs racks (--leaf)"},
       }) {
    JobSpec spec;
    spec.num_workers = c.workers;
    if (spec.num_workers == 0) {
      for (const Rack& r : c.racks) spec.num_workers += r.workers;
    }
    spec.num_slots = kJobSlots;
    spec.elements_per_packet = 64;
    spec.racks = c.racks;
    spec.parent_switches = c.parent;
    spec.switches = c.switches;
    auto job = Jobs()->CreateJob(spec);
    ASSERT_FALSE(job.ok()) << c.expect;
    EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << job.status();
    EXPECT_THAT(job.status().message(), HasSubstr(c.expect));
  }
  // Nothing was created anywhere.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(switches_[i]->ListJobs().jobs.size(), 0u) << i;
  // Three switches, both not leaves full: no parent with room.
  {
    JobSpec big;
    big.num_workers = 2;
    big.num_slots = kPool;
    big.elements_per_packet = 64;
    auto filler = Jobs()->CreateJob(big);  // on switch 0 (all equal: the first)
    ASSERT_TRUE(filler.ok()) << filler.status();
    auto job = CreateTwoLevel({{.switches = {1}, .workers = 1}, {.switches = {2}, .workers = 1}});
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), StatusCode::kResourceExhausted) << job.status();
    EXPECT_THAT(job.status().message(), HasSubstr("no switch for the parent (--parent)"));
    ASSERT_TRUE(Jobs()->DeleteJob(filler->job_id, filler->token).ok());
  }
  // A switch asked directly refuses a two-level job, naming the field.
  auto direct = JobClient::Connect("127.0.0.1:" + std::to_string(controllers_[0]->port()), 3s);
  ASSERT_TRUE(direct.ok());
  (*direct)->set_operator_token(kOperatorToken);
  JobSpec spec;
  spec.num_workers = 4;
  spec.num_slots = kJobSlots;
  spec.elements_per_packet = 64;
  spec.racks = {{{1}, 2}, {{2}, 2}};
  auto refused = (*direct)->CreateJob(spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("racks: a switch serves one level"));
}

// A leaf's switch dies: every worker's call (both racks: the parent never completes a round
// without that leaf) fails by its timeout, asking the controller why; the job ended naming the
// leaf and its switch, not re-placed, its other parts deleted.
TEST_F(ShardsTest, ADeadLeafEndsTheTwoLevelJobNamingIt) {
  StartSwitches({1, 1, 1});
  auto job = CreateTwoLevel({{.switches = {0}, .workers = 2}, {.switches = {1}, .workers = 2}}, {2});
  ASSERT_TRUE(job.ok()) << job.status();
  auto ctx = Join(*job, 4);
  ASSERT_EQ(ctx.size(), 4u);
  for (const Status& s : AllReduce(ctx, 1000, 1)) ASSERT_TRUE(s.ok()) << s;

  Kill(1);
  const std::vector<Status> failed = AllReduce(ctx, 1000, 2);
  // A lost switch ended the job: UNAVAILABLE (the switch path is down), for every rack's workers.
  for (size_t r = 0; r < failed.size(); ++r) {
    EXPECT_EQ(failed[r].code(), StatusCode::kUnavailable) << "rank " << r << ": " << failed[r];
    EXPECT_THAT(failed[r].message(), HasSubstr(" for 2000 ms ")) << "rank " << r << ": " << failed[r];
    EXPECT_THAT(failed[r].message(), HasSubstr("has ended: leaf 1 (switch 1 at"))
        << "rank " << r << ": " << failed[r];
  }
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kEnded);
  EXPECT_THAT(info->end_reason, HasSubstr("leaf 1 (switch 1 at"));
  EXPECT_THAT(info->end_reason, HasSubstr("a two-level job is not re-placed"));
  EXPECT_TRUE(info->switch_lost);
  // The other leaf and the parent freed their slots.
  EXPECT_EQ(switches_[0]->ListJobs().free_slots, kPool);
  EXPECT_EQ(switches_[2]->ListJobs().free_slots, kPool);
}

// The parent's switch dies: the job ends naming the parent.
TEST_F(ShardsTest, ADeadParentEndsTheTwoLevelJobNamingIt) {
  StartSwitches({1, 1, 1});
  auto job = CreateTwoLevel({{.switches = {1}, .workers = 1}, {.switches = {2}, .workers = 1}});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->spec.parent_switches, std::vector<uint32_t>{0});
  Kill(0);
  const JobInfo ended =
      WaitForJob(job->job_id, [](const JobInfo& j) { return j.state == JobState::kEnded; });
  EXPECT_THAT(ended.end_reason, HasSubstr("the parent (switch 0 at"));
  EXPECT_TRUE(ended.switch_lost);
  EXPECT_EQ(switches_[1]->ListJobs().free_slots, kPool);
  EXPECT_EQ(switches_[2]->ListJobs().free_slots, kPool);
}

// A leaf's switch that no longer holds its part (deleted there directly) ends the job too,
// naming the leaf; the parent's part is deleted.
TEST_F(ShardsTest, ALeafJobEndedAtItsSwitchEndsTheTwoLevelJobNamingIt) {
  StartSwitches({1, 1, 1});
  auto job = CreateTwoLevel({{.switches = {0}, .workers = 1}, {.switches = {1}, .workers = 1}});
  ASSERT_TRUE(job.ok()) << job.status();
  auto on1 = ShardsOn(1, job->assignment.shard_group);
  ASSERT_EQ(on1.size(), 1u);
  ASSERT_TRUE(switches_[1]->DeleteJob(on1[0].first, job->token).ok());
  const JobInfo ended =
      WaitForJob(job->job_id, [](const JobInfo& j) { return j.state == JobState::kEnded; });
  EXPECT_THAT(ended.end_reason, HasSubstr("leaf 1 (switch 1 at"));
  EXPECT_THAT(ended.end_reason, HasSubstr("ended: deleted"));
  EXPECT_FALSE(ended.switch_lost);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(LiveInGroup(*switches_[i], job->assignment.shard_group), 0u) << "switch " << i;
  }
}

// A restarted controller finds a two-level job again (its leaves and parent share the shard
// group; the leaves' uplinks say which rack each is): same id, racks and parent, still
// running; the token is learned from the first call that presents it.
TEST_F(ShardsTest, ARestartedControllerFindsATwoLevelJobAgain) {
  StartSwitches({1, 1, 1});
  auto job = CreateTwoLevel({{.switches = {2}, .workers = 1}, {.switches = {0}, .workers = 2}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.parent_switches, std::vector<uint32_t>{1});
  auto ctx = Join(*job, 3);
  ASSERT_EQ(ctx.size(), 3u);
  for (const Status& s : AllReduce(ctx, 1000, 1)) ASSERT_TRUE(s.ok()) << s;
  StartStandalone();
  auto info = Jobs()->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->spec.num_workers, 3u);
  EXPECT_EQ(info->spec.racks, job->spec.racks);
  EXPECT_EQ(info->spec.parent_switches, job->spec.parent_switches);
  EXPECT_EQ(info->num_registered, 3u);
  auto list = Jobs()->ListJobs();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->jobs.size(), 1u);
  for (const Status& s : AllReduce(ctx, 2000, 2)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Jobs()->GetJob(job->job_id, "wrong-token-123").status().code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(Jobs()->DeleteJob(job->job_id, job->token).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(LiveInGroup(*switches_[i], job->assignment.shard_group), 0u) << "switch " << i;
    EXPECT_EQ(switches_[i]->ListJobs().free_slots, kPool) << "switch " << i;
  }
}

}  // namespace
}  // namespace switchml::controller
