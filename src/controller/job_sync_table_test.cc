#include "controller/job_sync_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace switchml::controller {
namespace {

using std::chrono::milliseconds;

// Polls `pred` for up to 30 s (a deadline that only turns a hang into a failure).
template <typename Pred>
bool Eventually(Pred pred) {
  const auto end = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return pred();
}

WaitControl Within(milliseconds d) {
  WaitControl wait;
  wait.deadline = Clock::now() + d;
  return wait;
}

TEST(JobSyncTableTest, Job0IsOneCoordinatorThatIsNeverDroppedNorCounted) {
  JobSyncTable table;
  SyncLimits tiny{.max_pending_broadcasts = 1, .max_waiters = 1};
  auto a = table.Acquire(0, tiny);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->get(), &table.reference());
  // Job 0 keeps the reference bounds whatever limits a caller passes.
  EXPECT_EQ((*a)->limits().max_pending_broadcasts, SyncLimits{}.max_pending_broadcasts);
  table.Release(0, *a);
  auto b = table.Acquire(0, tiny);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->get(), a->get());
  table.Release(0, *b);
  EXPECT_EQ(table.NumSyncStates(), 0u);

  // A service job's coordinator is counted while used and dropped once idle.
  auto j = table.Acquire(7, tiny);
  ASSERT_TRUE(j.ok());
  EXPECT_NE(j->get(), &table.reference());
  EXPECT_EQ((*j)->limits().max_waiters, 1u);
  EXPECT_EQ(table.NumSyncStates(), 1u);
  table.Release(7, *j);
  EXPECT_EQ(table.NumSyncStates(), 0u);
}

TEST(JobSyncTableTest, ForgetJob0ResetsItInPlace) {
  JobSyncTable table;
  table.RecordRefusal(0, "", "rank 1 disagrees");
  auto blocked = std::async(std::launch::async,
                            [&] { return table.reference().Barrier(2, Within(milliseconds(5000))); });
  ASSERT_TRUE(Eventually([&] { return table.reference().NumBarrierWaiters() == 1; }));
  table.Forget(0);
  EXPECT_EQ(blocked.get().code(), StatusCode::kAborted);
  EXPECT_FALSE(table.HasRefusal(0, ""));
  // Still the same, usable coordinator.
  auto again = table.Acquire(0, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), &table.reference());
  EXPECT_TRUE(table.reference().Barrier(1, Within(milliseconds(100))).ok());
}

TEST(JobSyncTableTest, Job0KeepsTheLatestRefusalAServiceJobItsFirst) {
  JobSyncTable table;
  table.RecordRefusal(0, "", "first");
  table.RecordRefusal(0, "", "second");
  EXPECT_EQ(table.Refused(0, "").value_or(""), "second");
  table.RecordRefusal(5, "token-5", "first");
  table.RecordRefusal(5, "token-5", "second");
  EXPECT_EQ(table.Refused(5, "token-5").value_or(""), "first");
  EXPECT_FALSE(table.Refused(5, "other-token").has_value());
  EXPECT_FALSE(table.HasRefusal(5, ""));
}

// A call checks for a refusal, then joins: a refusal recorded before the check fails it at
// once, one recorded after the join cancels it, and one recorded in between (the race the
// services close with CancelWaitersIfRefused) is seen by the joined call itself.
TEST(JobSyncTableTest, ARefusalEndsCallsThatJoinedBeforeAndInBetween) {
  for (uint32_t job : {0u, 9u}) {
    SCOPED_TRACE("job " + std::to_string(job));
    JobSyncTable table;
    const std::string token = job == 0 ? "" : "token-9";
    auto sync = table.Acquire(job, {}, token);
    ASSERT_TRUE(sync.ok()) << sync.status();
    JobSyncTable::Use use(&table, job, *sync);
    std::promise<SyncResult> before;
    std::promise<SyncResult> between;
    // Joined before the refusal: RecordRefusal cancels it.
    ASSERT_NE((*sync)->StartBarrier(3, [&](SyncResult r) { before.set_value(r); }),
              SyncCoordinator::kFinished);
    EXPECT_EQ(table.CancelWaitersIfRefused(job, token), 0u);  // nothing refused yet
    EXPECT_EQ((*sync)->NumBarrierWaiters(), 1u);
    table.RecordRefusal(job, token, "rank 1 disagrees");
    EXPECT_EQ(before.get_future().get().status().code(), StatusCode::kCancelled);
    // Checked before the refusal, joined after it: nothing cancels it but its own re-check.
    ASSERT_NE((*sync)->StartBarrier(3, [&](SyncResult r) { between.set_value(r); }),
              SyncCoordinator::kFinished);
    EXPECT_EQ((*sync)->NumBarrierWaiters(), 1u);
    if (job != 0) {
      EXPECT_EQ(table.CancelWaitersIfRefused(job, "other-token"), 0u);
    }
    EXPECT_EQ(table.CancelWaitersIfRefused(job, token), 1u);
    SyncResult r = between.get_future().get();
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
    EXPECT_NE(r.status().message().find("a registration was refused"), std::string::npos)
        << r.status();
    EXPECT_EQ((*sync)->NumBarrierWaiters(), 0u);
  }
}

TEST(JobSyncTableTest, SweepNeverTouchesJob0) {
  JobSyncTable table;
  table.RecordRefusal(0, "", "refused");
  table.RecordRefusal(3, "t", "refused");
  auto j = table.Acquire(4, {});
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE((*j)->Broadcast(9, 0, 2, /*root=*/0, {}).ok());  // pending: rank 1 never reads
  table.Release(4, *j);
  EXPECT_EQ(table.NumSyncStates(), 1u);
  const std::vector<uint32_t> candidates = table.SweepCandidates();
  EXPECT_EQ(candidates, (std::vector<uint32_t>{4, 3}));
  for (uint32_t id : candidates) table.ForgetUnused(id);
  table.ForgetUnused(0);  // no effect on job 0
  EXPECT_EQ(table.NumSyncStates(), 0u);
  EXPECT_FALSE(table.HasRefusal(3, "t"));
  EXPECT_TRUE(table.HasRefusal(0, ""));
}

TEST(JobSyncTableTest, EvictingRefusalsKeepsJob0s) {
  JobSyncTable table;
  table.RecordRefusal(0, "", "session refusal");
  for (uint32_t id = 1; id <= JobSyncTable::kMaxRefusals + 5; ++id) {
    table.RecordRefusal(id, "t", "refused");
  }
  EXPECT_TRUE(table.HasRefusal(0, ""));
  EXPECT_FALSE(table.HasRefusal(1, "t"));  // the lowest service ids went first
  EXPECT_TRUE(table.HasRefusal(JobSyncTable::kMaxRefusals + 5, "t"));
}

TEST(JobSyncTableTest, ShutdownReachesJob0AndRefusesNewServiceState) {
  JobSyncTable table;
  auto blocked = std::async(std::launch::async,
                            [&] { return table.reference().Barrier(2, Within(milliseconds(5000))); });
  ASSERT_TRUE(Eventually([&] { return table.reference().NumBarrierWaiters() == 1; }));
  table.Shutdown();
  EXPECT_EQ(blocked.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(table.Acquire(9, {}).status().code(), StatusCode::kUnavailable);
  // Job 0's coordinator is still handed out and answers Unavailable itself.
  auto ref = table.Acquire(0, {});
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ((*ref)->Barrier(1, {}).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace switchml::controller
