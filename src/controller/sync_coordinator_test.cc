#include "controller/sync_coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
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

// Spins (with short sleeps) until pred() holds or 30 s pass (a deadline that only turns a
// hang into a failure; a loaded machine may take its time).
template <typename Pred>
bool Eventually(Pred pred) {
  const auto end = Clock::now() + std::chrono::seconds(30);
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
  // "Nobody released" after a sleep: load can only shorten what the sleep covers (missing a
  // bug), never release a waiter of a correct barrier.
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
  // Ended by its deadline (the code says so; no other wait is in play), not before it (a lower
  // bound: load-proof). How late after the deadline depends on the machine, not on the code.
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("1 of 2"), std::string::npos) << s;
  EXPECT_GE(took, milliseconds(50));
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
  // The three non-roots are waiting (observed, not assumed after a sleep), in one operation,
  // and none has a value before the root's (threads are running: no ASSERT).
  EXPECT_TRUE(Eventually([&] { return sync.NumBroadcastWaiters() == kN - 1; }));
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
  // Broadcast callers that would wait are bounded apart (a flood of barriers cannot refuse
  // a bootstrap's broadcast); the root (which never waits) is not counted.
  std::vector<SyncResult> broadcast_results(2, InternalError("not run"));
  std::vector<std::thread> broadcast_waiters;
  for (uint32_t rank : {1u, 2u}) {
    broadcast_waiters.emplace_back([&, rank] {
      broadcast_results[rank - 1] = sync.Broadcast(0, rank, 3, 0, Within(milliseconds(5000)));
    });
  }
  ASSERT_TRUE(Eventually([&] { return sync.NumBroadcastWaiters() == 2; }));
  auto refused = sync.Broadcast(0, 1, 3, 0, Within(milliseconds(5000)));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("Broadcast: 2 callers are already blocked"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(sync.NumBarrierWaiters(), 2u);  // the refused calls did not join
  EXPECT_EQ(*sync.Broadcast(9, 0, 3, 0, {}), 9u);
  for (auto& t : broadcast_waiters) t.join();
  for (const SyncResult& r : broadcast_results) EXPECT_EQ(*r, 9u);
  // Barrier num_workers is bounded like Broadcast's.
  EXPECT_EQ(sync.Barrier(SyncCoordinator::kMaxBroadcastParticipants + 1, {}).code(),
            StatusCode::kInvalidArgument);
  sync.Reset();
  for (auto& t : waiters) t.join();
  for (const Status& r : results) EXPECT_EQ(r.code(), StatusCode::kAborted) << r;
  EXPECT_TRUE(sync.Idle());
}

// ---------------------------------------------------------------------------------------------
// The non-blocking API: a waiting call is a ticket and a callback, no thread.

// Records each callback's result (and how often it ran).
struct Results {
  std::vector<std::optional<SyncResult>> got;
  std::vector<int> calls;
  explicit Results(size_t n) : got(n), calls(n, 0) {}
  SyncDone For(size_t i) {
    return [this, i](SyncResult r) {
      ++calls[i];
      got[i].emplace(std::move(r));
    };
  }
};

TEST(SyncAsyncTest, ThousandsOfWaitersOnOneThreadEachFinishExactlyOnce) {
  SyncCoordinator sync;
  constexpr uint32_t kN = 4000;  // within max_waiters (4096)
  Results r(kN + 1);
  std::vector<SyncCoordinator::Ticket> tickets;
  for (uint32_t i = 0; i < kN; ++i) {
    tickets.push_back(sync.StartBarrier(kN + 1, r.For(i)));
    ASSERT_NE(tickets.back(), SyncCoordinator::kFinished);
    ASSERT_FALSE(r.got[i].has_value());
  }
  EXPECT_EQ(sync.NumBarrierWaiters(), kN);
  // One waiter gives up: it alone is answered, with the progress, and no longer counts.
  sync.GiveUp(tickets[7], GiveUpReason::kDeadline);
  ASSERT_TRUE(r.got[7].has_value());
  EXPECT_EQ(r.got[7]->status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.got[7]->status().message(), testing::HasSubstr("4000 of 4001 workers"));
  EXPECT_EQ(sync.NumBarrierWaiters(), kN - 1);
  // Its retry takes its place; the last arrival completes the barrier inline.
  EXPECT_NE(sync.StartBarrier(kN + 1, r.For(7)), SyncCoordinator::kFinished);
  EXPECT_EQ(sync.StartBarrier(kN + 1, r.For(kN)), SyncCoordinator::kFinished);
  for (uint32_t i = 0; i <= kN; ++i) {
    ASSERT_TRUE(r.got[i].has_value()) << i;
    EXPECT_TRUE(r.got[i]->ok()) << i << ": " << r.got[i]->status();
    EXPECT_EQ(r.calls[i], i == 7 ? 2 : 1) << i;
  }
  // Giving up after the operation completed changes nothing.
  sync.GiveUp(tickets[0], GiveUpReason::kCancelled);
  EXPECT_EQ(r.calls[0], 1);
  EXPECT_TRUE(sync.Idle());
}

TEST(SyncAsyncTest, BroadcastWaitersAreReleasedByTheRootAndCanGiveUp) {
  SyncCoordinator sync;
  Results r(4);
  const auto t1 = sync.StartBroadcast(0, 1, 4, /*root=*/0, r.For(1));
  const auto t2 = sync.StartBroadcast(0, 2, 4, 0, r.For(2));
  const auto t3 = sync.StartBroadcast(0, 3, 4, 0, r.For(3));
  EXPECT_EQ(sync.NumBroadcastWaiters(), 3u);
  sync.GiveUp(t3, GiveUpReason::kCancelled);
  EXPECT_EQ(r.got[3]->status().code(), StatusCode::kCancelled);
  EXPECT_THAT(r.got[3]->status().message(), testing::HasSubstr("root 0 has not called yet"));
  EXPECT_EQ(sync.StartBroadcast(55, 0, 4, 0, r.For(0)), SyncCoordinator::kFinished);
  for (int i : {0, 1, 2}) EXPECT_EQ(*r.got[i].value(), 55u) << i;
  // Rank 3 withdrew: its retry reads the same operation's value.
  Results late(1);
  EXPECT_EQ(sync.StartBroadcast(0, 3, 4, 0, late.For(0)), SyncCoordinator::kFinished);
  EXPECT_EQ(*late.got[0].value(), 55u);
  EXPECT_TRUE(sync.Idle());
  sync.GiveUp(t1, GiveUpReason::kDeadline);  // finished long ago: no-op
  sync.GiveUp(t2, GiveUpReason::kDeadline);
  EXPECT_EQ(r.calls[1], 1);
  EXPECT_EQ(r.calls[2], 1);
}

TEST(SyncAsyncTest, CallbacksMayCallBackIntoTheCoordinator) {
  SyncCoordinator sync;
  std::optional<SyncResult> inner;
  // The first waiter's callback starts another barrier (it runs without the lock held).
  sync.StartBarrier(2, [&](SyncResult) {
    sync.StartBarrier(1, [&](SyncResult r) { inner.emplace(std::move(r)); });
  });
  sync.StartBarrier(2, [](SyncResult) {});
  ASSERT_TRUE(inner.has_value());
  EXPECT_TRUE(inner->ok());
}

TEST(SyncAsyncTest, CancelWaitersEndsBarrierOrAllWaiters) {
  SyncCoordinator sync;
  Results r(2);
  sync.StartBarrier(3, r.For(0));
  sync.StartBroadcast(0, 1, 2, 0, r.For(1));
  EXPECT_EQ(sync.CancelWaiters("a registration was refused", /*broadcasts=*/false), 1u);
  EXPECT_EQ(r.got[0]->status().code(), StatusCode::kCancelled);
  EXPECT_THAT(r.got[0]->status().message(), testing::HasSubstr("a registration was refused"));
  EXPECT_FALSE(r.got[1].has_value());
  EXPECT_EQ(sync.CancelWaiters("the job ended", /*broadcasts=*/true), 1u);
  EXPECT_EQ(r.got[1]->status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(sync.Idle());  // the withdrawn broadcast left an empty operation: erased
}

// ---------------------------------------------------------------------------------------------
// Session size and the per-peer bound (the reference Sync service's flood limits).

TEST(SyncSessionSizeTest, ASizeEvictsOtherShapesAndRefusesThemLater) {
  SyncCoordinator sync;
  Results r(3);
  // A stranger's barrier of 65536 is pending, and a broadcast operation of that size too.
  sync.StartBarrier(65536, r.For(0));
  sync.StartBarrier(65536, r.For(1));
  sync.StartBroadcast(0, 5, 65536, 0, r.For(2));
  EXPECT_EQ(sync.Barrier(2, Within(milliseconds(10))).code(), StatusCode::kInvalidArgument);
  // A session of 2 starts: the stranger's calls end, and the session's workers get through.
  ASSERT_TRUE(sync.SetSessionSize(2).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(r.got[i].has_value()) << i;
    EXPECT_EQ(r.got[i]->status().code(), StatusCode::kInvalidArgument) << i;
    EXPECT_THAT(r.got[i]->status().message(), testing::HasSubstr("session's 2 workers")) << i;
  }
  EXPECT_TRUE(sync.Idle());
  Status later = sync.Barrier(65536, {});
  EXPECT_EQ(later.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(later.message(),
              testing::HasSubstr("num_workers 65536 differs from the session's 2"));
  std::thread other([&] { EXPECT_TRUE(sync.Barrier(2, Within(milliseconds(5000))).ok()); });
  EXPECT_TRUE(sync.Barrier(2, Within(milliseconds(5000))).ok());
  other.join();
  // Broadcast callers are not checked against the size (a new session's ranks may come
  // before its rank 0), and Reset forgets the size.
  EXPECT_EQ(*sync.Broadcast(3, 0, 3, 0, {}), 3u);
  EXPECT_EQ(sync.session_size(), 2u);
  sync.Reset();
  EXPECT_EQ(sync.session_size(), 0u);
  EXPECT_EQ(sync.SetSessionSize(SyncCoordinator::kMaxBroadcastParticipants + 1).code(),
            StatusCode::kInvalidArgument);
}

TEST(SyncPeerBoundTest, OnePeerCannotTakeAllWaitingSlots) {
  SyncLimits limits;
  limits.max_waiters_per_peer = 2;
  SyncCoordinator sync(limits);
  Results r(3);
  sync.StartBarrier(10, r.For(0), "ipv4:10.0.0.9");
  sync.StartBarrier(10, r.For(1), "ipv4:10.0.0.9");
  sync.StartBarrier(10, r.For(2), "ipv4:10.0.0.9");
  ASSERT_TRUE(r.got[2].has_value());
  EXPECT_EQ(r.got[2]->status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(r.got[2]->status().message(),
              testing::HasSubstr("Barrier: 2 calls from ipv4:10.0.0.9 are already blocked"));
  EXPECT_EQ(sync.NumBarrierWaiters(), 2u);
  // Another address may wait; so may the full address's broadcasts (bounded apart), and a call
  // of it that does not wait (the one completing the barrier) is never refused.
  Results other(2);
  EXPECT_NE(sync.StartBarrier(10, other.For(0), "ipv4:10.0.0.1"), SyncCoordinator::kFinished);
  EXPECT_NE(sync.StartBroadcast(0, 1, 2, 0, other.For(1), "ipv4:10.0.0.9"),
            SyncCoordinator::kFinished);
  Results more(7);
  for (int i = 0; i < 6; ++i) {
    sync.StartBarrier(10, more.For(i), "ipv4:10.0.0." + std::to_string(20 + i));
  }
  EXPECT_EQ(sync.NumBarrierWaiters(), 9u);
  EXPECT_EQ(sync.StartBarrier(10, more.For(6), "ipv4:10.0.0.9"), SyncCoordinator::kFinished);
  EXPECT_TRUE(more.got[6]->ok());
  EXPECT_TRUE(r.got[0]->ok());
  EXPECT_TRUE(other.got[0]->ok());
  // The released calls no longer count: the address may wait again.
  Results again(1);
  EXPECT_NE(sync.StartBarrier(10, again.For(0), "ipv4:10.0.0.9"), SyncCoordinator::kFinished);
  EXPECT_FALSE(again.got[0].has_value());
  sync.Reset();
  EXPECT_EQ(again.got[0]->status().code(), StatusCode::kAborted);
  EXPECT_EQ(other.got[1]->status().code(), StatusCode::kAborted);
  // After Reset the counts start from zero.
  Results fresh(3);
  EXPECT_NE(sync.StartBarrier(10, fresh.For(0), "ipv4:10.0.0.9"), SyncCoordinator::kFinished);
  EXPECT_NE(sync.StartBarrier(10, fresh.For(1), "ipv4:10.0.0.9"), SyncCoordinator::kFinished);
  sync.StartBarrier(10, fresh.For(2), "ipv4:10.0.0.9");
  EXPECT_EQ(fresh.got[2]->status().code(), StatusCode::kResourceExhausted);
  sync.Shutdown();
  EXPECT_EQ(fresh.got[0]->status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace switchml::controller
