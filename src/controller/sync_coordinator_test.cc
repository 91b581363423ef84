#include "controller/sync_coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace switchml::controller {
namespace {

using std::chrono::milliseconds;

WaitControl Within(milliseconds d) {
  WaitControl w;
  w.deadline = Clock::now() + d;
  return w;
}

// Spins (with short sleeps) until pred() holds or 2 s pass.
template <typename Pred>
bool Eventually(Pred pred) {
  const auto end = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return pred();
}

TEST(SyncBarrierTest, SingleWorkerReturnsAtOnce) {
  SyncCoordinator sync;
  EXPECT_TRUE(sync.Barrier(1, Within(milliseconds(100))).ok());
  EXPECT_TRUE(sync.Barrier(1, Within(milliseconds(100))).ok());
  EXPECT_EQ(sync.NumBarrierWaiters(), 0u);
}

TEST(SyncBarrierTest, ZeroWorkersIsInvalid) {
  SyncCoordinator sync;
  Status s = sync.Barrier(0, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_workers"), std::string::npos) << s;
}

TEST(SyncBarrierTest, NobodyLeavesBeforeTheLastArrives) {
  SyncCoordinator sync;
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      EXPECT_TRUE(sync.Barrier(3, Within(milliseconds(5000))).ok());
      ++released;
    });
  }
  EXPECT_TRUE(Eventually([&] { return sync.NumBarrierWaiters() == 2; }));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(released.load(), 0);
  // A caller with another num_workers is refused and does not join.
  Status wrong = sync.Barrier(4, Within(milliseconds(100)));
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument) << wrong;
  EXPECT_NE(wrong.message().find("differs"), std::string::npos) << wrong;
  EXPECT_EQ(sync.NumBarrierWaiters(), 2u);
  EXPECT_EQ(released.load(), 0);

  EXPECT_TRUE(sync.Barrier(3, Within(milliseconds(5000))).ok());
  for (auto& t : threads) t.join();
  EXPECT_EQ(released.load(), 2);
  EXPECT_EQ(sync.NumBarrierWaiters(), 0u);
  // The next operation may use another size.
  EXPECT_TRUE(sync.Barrier(1, {}).ok());
}

TEST(SyncBarrierTest, DeadlineWithdrawsTheWaiter) {
  SyncCoordinator sync;
  const auto start = Clock::now();
  Status s = sync.Barrier(2, Within(milliseconds(50)));
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("1 of 2"), std::string::npos) << s;
  EXPECT_GE(took, milliseconds(50));
  EXPECT_LT(took, milliseconds(1000));
  EXPECT_EQ(sync.NumBarrierWaiters(), 0u);
  // The withdrawn caller did not count: a lone new caller still has to wait.
  EXPECT_EQ(sync.Barrier(2, Within(milliseconds(20))).code(), StatusCode::kDeadlineExceeded);
}

TEST(SyncBarrierTest, CancellationIsPolled) {
  SyncCoordinator sync;
  std::atomic<bool> cancel{false};
  WaitControl w;
  w.cancelled = [&] { return cancel.load(); };
  w.poll_interval = milliseconds(5);
  Status result;
  std::thread t([&] { result = sync.Barrier(2, w); });
  EXPECT_TRUE(Eventually([&] { return sync.NumBarrierWaiters() == 1; }));
  cancel = true;
  t.join();
  EXPECT_EQ(result.code(), StatusCode::kCancelled) << result;
  EXPECT_EQ(sync.NumBarrierWaiters(), 0u);
}

TEST(SyncBarrierTest, ShutdownWakesWaiters) {
  SyncCoordinator sync;
  Status result;
  std::thread t([&] { result = sync.Barrier(2, {}); });  // no deadline at all
  EXPECT_TRUE(Eventually([&] { return sync.NumBarrierWaiters() == 1; }));
  sync.Shutdown();
  t.join();
  EXPECT_EQ(result.code(), StatusCode::kUnavailable) << result;
  EXPECT_EQ(sync.Barrier(1, {}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(sync.Broadcast(1, 0, 1, 0, {}).status().code(), StatusCode::kUnavailable);
}

TEST(SyncBroadcastTest, ValidatesArguments) {
  SyncCoordinator sync;
  auto r = sync.Broadcast(1, /*rank=*/4, /*num_workers=*/4, /*root=*/0, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rank"), std::string::npos) << r.status();
  r = sync.Broadcast(1, 0, 4, /*root=*/7, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("root"), std::string::npos) << r.status();
  r = sync.Broadcast(1, 0, 0, 0, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = sync.Broadcast(1, 0, SyncCoordinator::kMaxBroadcastParticipants + 1, 0, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
}

TEST(SyncBroadcastTest, RootAheadByTwoOperationsKeepsOrder) {
  // docs/protocol.md#d7-broadcast-bookkeeping-edited-while-iterated: several operations
  // complete "at once"; each participant must get them in order.
  SyncCoordinator sync;
  EXPECT_EQ(*sync.Broadcast(11, 1, 2, /*root=*/1, {}), 11u);  // root never waits
  EXPECT_EQ(*sync.Broadcast(22, 1, 2, 1, {}), 22u);
  EXPECT_EQ(*sync.Broadcast(33, 1, 2, 1, {}), 33u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 3u);
  EXPECT_EQ(*sync.Broadcast(0, 0, 2, 1, Within(milliseconds(100))), 11u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 2u);  // first one read by both: collected
  EXPECT_EQ(*sync.Broadcast(0, 0, 2, 1, Within(milliseconds(100))), 22u);
  EXPECT_EQ(*sync.Broadcast(0, 0, 2, 1, Within(milliseconds(100))), 33u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
}

TEST(SyncBroadcastTest, MismatchedRootIsRefused) {
  SyncCoordinator sync;
  EXPECT_EQ(*sync.Broadcast(5, 0, 2, 0, {}), 5u);
  auto r = sync.Broadcast(0, 1, 2, /*root=*/1, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("root"), std::string::npos) << r.status();
  r = sync.Broadcast(0, 1, /*num_workers=*/3, 0, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*sync.Broadcast(0, 1, 2, 0, {}), 5u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
}

TEST(SyncBroadcastTest, WaitersGetTheRootsValue) {
  SyncCoordinator sync;
  constexpr uint32_t kN = 4;
  std::vector<uint64_t> got(kN, 0);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < kN; ++rank) {
    if (rank == 2) continue;  // the root comes last
    threads.emplace_back([&, rank] {
      auto v = sync.Broadcast(100 + rank, rank, kN, /*root=*/2, Within(milliseconds(5000)));
      ASSERT_TRUE(v.ok()) << v.status();
      got[rank] = *v;
      ++finished;
    });
  }
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(sync.NumPendingBroadcasts(), 1u);
  EXPECT_EQ(finished.load(), 0);
  got[2] = *sync.Broadcast(777, 2, kN, 2, {});
  for (auto& t : threads) t.join();
  for (uint32_t rank = 0; rank < kN; ++rank) EXPECT_EQ(got[rank], 777u) << rank;
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
}

TEST(SyncBroadcastTest, WithdrawnWaiterRejoinsTheSameOperation) {
  SyncCoordinator sync;
  auto r = sync.Broadcast(0, 1, 2, 0, Within(milliseconds(20)));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);  // empty operation erased
  EXPECT_EQ(*sync.Broadcast(9, 0, 2, 0, {}), 9u);
  // Rank 1 retries and gets operation 0's value, not a fresh operation.
  EXPECT_EQ(*sync.Broadcast(0, 1, 2, 0, Within(milliseconds(100))), 9u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);

  // Withdrawal while another participant still waits keeps the operation.
  std::thread waiter(
      [&] { EXPECT_EQ(*sync.Broadcast(0, 2, 3, 0, Within(milliseconds(5000))), 4u); });
  EXPECT_TRUE(Eventually([&] { return sync.NumPendingBroadcasts() == 1; }));
  EXPECT_EQ(sync.Broadcast(0, 1, 3, 0, Within(milliseconds(10))).status().code(),
            StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 1u);
  EXPECT_EQ(*sync.Broadcast(4, 0, 3, 0, {}), 4u);
  waiter.join();
  EXPECT_EQ(sync.NumPendingBroadcasts(), 1u);  // rank 1 has not read yet
  EXPECT_EQ(*sync.Broadcast(0, 1, 3, 0, {}), 4u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
}

TEST(SyncResetTest, ResetAbortsWaitersAndClearsLeftovers) {
  SyncCoordinator sync;
  // A job that died half-way: its root broadcast, its other ranks never came.
  EXPECT_EQ(*sync.Broadcast(1, 0, 4, 0, {}), 1u);
  auto stale = sync.Broadcast(0, 1, 2, 0, Within(milliseconds(100)));
  EXPECT_EQ(stale.status().code(), StatusCode::kInvalidArgument) << stale.status();
  EXPECT_NE(stale.status().message().find("earlier job"), std::string::npos) << stale.status();

  Status barrier_result;
  StatusOr<uint64_t> broadcast_result = InternalError("not run");
  std::thread barrier([&] { barrier_result = sync.Barrier(2, Within(milliseconds(5000))); });
  std::thread broadcast(
      [&] { broadcast_result = sync.Broadcast(0, 1, 4, 0, Within(milliseconds(5000))); });
  EXPECT_TRUE(Eventually([&] { return sync.NumBarrierWaiters() == 1; }));
  std::this_thread::sleep_for(milliseconds(20));
  // Rank 1 joined the stale operation (same shape) and got its stale value already.
  broadcast.join();
  EXPECT_EQ(*broadcast_result, 1u);

  sync.Reset();
  barrier.join();
  EXPECT_EQ(barrier_result.code(), StatusCode::kAborted) << barrier_result;
  EXPECT_EQ(sync.NumBarrierWaiters(), 0u);
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
  // A new job of another shape works now.
  EXPECT_EQ(*sync.Broadcast(8, 0, 2, 0, {}), 8u);
  EXPECT_EQ(*sync.Broadcast(0, 1, 2, 0, {}), 8u);
  // A broadcast waiter is aborted by Reset too.
  std::thread waiter(
      [&] { broadcast_result = sync.Broadcast(0, 1, 2, 0, Within(milliseconds(5000))); });
  EXPECT_TRUE(Eventually([&] { return sync.NumPendingBroadcasts() == 1; }));
  sync.Reset();
  waiter.join();
  EXPECT_EQ(broadcast_result.status().code(), StatusCode::kAborted) << broadcast_result.status();
  EXPECT_TRUE(sync.Barrier(1, {}).ok());
}

// ---------------------------------------------------------------------------------------------
// Bounds: every piece of state is created by client requests, so each is bounded.

// A root that never waits opens a new operation per call (the others never read): the map
// stops at its bound, further calls are refused and change nothing, and the operations drain
// once the other rank reads.
TEST(SyncBoundsTest, RepeatedBroadcastsKeepThePendingMapBounded) {
  SyncLimits limits;
  limits.max_pending_broadcasts = 8;
  SyncCoordinator sync(limits);
  for (uint64_t i = 0; i < 8; ++i) {
    auto r = sync.Broadcast(100 + i, /*rank=*/0, /*num_workers=*/2, /*root=*/0, {});
    ASSERT_TRUE(r.ok()) << r.status();
  }
  EXPECT_EQ(sync.NumPendingBroadcasts(), 8u);
  for (int i = 0; i < 1000; ++i) {
    auto r = sync.Broadcast(7, 0, 2, 0, {});
    ASSERT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status();
    if (i == 0) {
      EXPECT_NE(r.status().message().find("8 broadcast operations are already pending"),
                std::string::npos)
          << r.status();
    }
  }
  EXPECT_EQ(sync.NumPendingBroadcasts(), 8u);  // flat: the refused calls left nothing
  EXPECT_FALSE(sync.Idle());
  // Rank 1 joins the oldest operations in order and drains them.
  for (uint64_t i = 0; i < 8; ++i) {
    auto r = sync.Broadcast(0, 1, 2, 0, Within(milliseconds(1000)));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, 100 + i);
  }
  EXPECT_EQ(sync.NumPendingBroadcasts(), 0u);
  EXPECT_TRUE(sync.Idle());
  EXPECT_TRUE(sync.Broadcast(1, 0, 2, 0, {}).ok());  // room again
}

TEST(SyncBoundsTest, BlockedCallersAreBounded) {
  SyncLimits limits;
  limits.max_waiters = 2;
  SyncCoordinator sync(limits);
  std::vector<Status> results(2);
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&, i] { results[i] = sync.Barrier(5, Within(milliseconds(5000))); });
  }
  ASSERT_TRUE(Eventually([&] { return sync.NumBarrierWaiters() == 2; }));
  Status third = sync.Barrier(5, Within(milliseconds(5000)));
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted) << third;
  EXPECT_NE(third.message().find("2 callers are already blocked"), std::string::npos) << third;
  // A broadcast caller that would wait counts against the same bound; the root (which never
  // waits) does not.
  EXPECT_EQ(sync.Broadcast(0, 1, 2, 0, Within(milliseconds(5000))).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(sync.NumBarrierWaiters(), 2u);  // the refused calls did not join
  EXPECT_TRUE(sync.Broadcast(9, 0, 2, 0, {}).ok());
  // Barrier num_workers is bounded like Broadcast's.
  EXPECT_EQ(sync.Barrier(SyncCoordinator::kMaxBroadcastParticipants + 1, {}).code(),
            StatusCode::kInvalidArgument);
  sync.Reset();
  for (auto& t : waiters) t.join();
  for (const Status& r : results) EXPECT_EQ(r.code(), StatusCode::kAborted) << r;
  EXPECT_TRUE(sync.Idle());
}

}  // namespace
}  // namespace switchml::controller
