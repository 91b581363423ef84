#include "dataplane/handoff.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace switchml::dataplane {
namespace {

// Counts live instances, so the tests see every value destroyed exactly once.
struct Tracked {
  static inline std::atomic<int> live{0};
  explicit Tracked(int v) : value(v) { live.fetch_add(1); }
  Tracked(const Tracked& o) : value(o.value) { live.fetch_add(1); }
  Tracked(Tracked&& o) noexcept : value(o.value) { live.fetch_add(1); }
  ~Tracked() { live.fetch_sub(1); }
  int value;
};

TEST(MailboxTest, TheLatestValueWinsAndIsTakenOnce) {
  {
    Mailbox<Tracked> box;
    EXPECT_EQ(box.Take(), nullptr);
    box.Post(Tracked(1));
    box.Post(Tracked(2));  // 1 was never taken: destroyed by this Post
    EXPECT_EQ(Tracked::live.load(), 1);
    std::unique_ptr<Tracked> got = box.Take();
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->value, 2);
    EXPECT_EQ(box.Take(), nullptr);
    box.Post(Tracked(3));  // left in the box: destroyed with it
  }
  EXPECT_EQ(Tracked::live.load(), 0);
}

TEST(MailboxTest, AConsumerSeesIncreasingValuesAndTheLastOne) {
  constexpr int kPosts = 20000;
  int last_seen = -1;
  bool increasing = true;
  {
    Mailbox<Tracked> box;
    std::atomic<bool> done{false};
    std::thread producer([&] {
      for (int i = 0; i < kPosts; ++i) box.Post(Tracked(i));
      done.store(true);
    });
    auto take = [&] {
      if (std::unique_ptr<Tracked> v = box.Take()) {
        increasing = increasing && v->value > last_seen;
        last_seen = v->value;
      }
    };
    while (!done.load()) take();
    producer.join();
    take();
  }
  EXPECT_TRUE(increasing);
  EXPECT_EQ(last_seen, kPosts - 1);
  EXPECT_EQ(Tracked::live.load(), 0);
}

TEST(PushListTest, DrainsEverythingPushedByManyThreadsOnce) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  std::vector<int> seen(kThreads * kPerThread, 0);
  {
    PushList<Tracked> list;
    EXPECT_TRUE(list.empty());
    std::atomic<int> running{kThreads};
    std::vector<std::thread> producers;
    for (int t = 0; t < kThreads; ++t) {
      producers.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) list.Push(Tracked(t * kPerThread + i));
        running.fetch_sub(1);
      });
    }
    size_t drained = 0;
    auto drain = [&] { drained += list.DrainAll([&](Tracked& v) { ++seen[v.value]; }); };
    while (running.load() > 0) drain();
    for (auto& p : producers) p.join();
    drain();
    EXPECT_EQ(drained, seen.size());
    EXPECT_TRUE(list.empty());
    list.Push(Tracked(-1));  // left in the list: destroyed with it
    EXPECT_FALSE(list.empty());
  }
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << i;
  EXPECT_EQ(Tracked::live.load(), 0);
}

TEST(PushListTest, DrainAllHandsOutNewestFirst) {
  PushList<int> list;
  for (int i = 0; i < 3; ++i) list.Push(i);
  std::vector<int> order;
  EXPECT_EQ(list.DrainAll([&](int& v) { order.push_back(v); }), 3u);
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(list.DrainAll([&](int&) {}), 0u);
}

}  // namespace
}  // namespace switchml::dataplane
