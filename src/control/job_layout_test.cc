#include "control/job_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace switchml::control {
namespace {

using ::testing::HasSubstr;

JobLayout MakeOk(uint32_t slots, uint32_t shards, uint32_t threads, uint32_t window) {
  StatusOr<JobLayout> l = JobLayout::Make({.job_slots = slots, .num_shards = shards,
                                           .worker_threads = threads, .window_packets = window});
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return *l;
}

TEST(JobLayoutTest, HeaderExample) {
  const JobLayout l = MakeOk(256, 2, 4, 128);
  EXPECT_EQ(l.ShardOf(3), 1u);
  EXPECT_EQ(l.ThreadSlots(3), (SlotRange{160, 32}));
  EXPECT_EQ(l.IoThreadOf(3, 2), 1u);
  EXPECT_EQ(l.ShardSlots(1), (SlotRange{128, 128}));
  EXPECT_EQ(l.ShardThreads(1), (ThreadRange{2, 4}));
  EXPECT_EQ(l.ToString(), "256 slots, 2 shards, 4 threads x 32 slots");
}

TEST(JobLayoutTest, OneShardIsThreadTimesWindow) {
  const JobLayout l = MakeOk(1000, 1, 8, 512);
  for (uint32_t t = 0; t < 8; ++t) {
    EXPECT_EQ(l.ThreadSlots(t), (SlotRange{t * 64, 64}));
    EXPECT_EQ(l.ShardOf(t), 0u);
  }
  EXPECT_EQ(l.ShardSlots(0), (SlotRange{0, 1000}));
  // Three I/O threads: threads 0-2, 3-5, 6-7; the last also owns the slots above the window.
  EXPECT_EQ(l.IoSlots(0, 0, 3), (SlotRange{0, 192}));
  EXPECT_EQ(l.IoSlots(0, 1, 3), (SlotRange{192, 192}));
  EXPECT_EQ(l.IoSlots(0, 2, 3), (SlotRange{384, 616}));
}

TEST(JobLayoutTest, WholeIsOneThreadOnIoThreadZero) {
  const JobLayout l = JobLayout::Whole(512);
  EXPECT_EQ(l.worker_threads(), 1u);
  EXPECT_EQ(l.ThreadSlots(0), (SlotRange{0, 512}));
  EXPECT_EQ(l.IoThreadOf(0, 4), 0u);
  EXPECT_EQ(l.IoSlots(0, 0, 4), (SlotRange{0, 512}));
  for (uint32_t i = 1; i < 4; ++i) EXPECT_EQ(l.IoSlots(0, i, 4).count, 0u);
}

TEST(JobLayoutTest, ShardSlotsNeedOnlyWhatIsKnownAtCreation) {
  // 10 slots on 3 shards: 4, 3, 3 (the first shards get the extra slot, as they get the extra
  // thread); together exactly [0, 10).
  EXPECT_EQ(JobLayout::ShardSlots(10, 0, 3), (SlotRange{0, 4}));
  EXPECT_EQ(JobLayout::ShardSlots(10, 1, 3), (SlotRange{4, 3}));
  EXPECT_EQ(JobLayout::ShardSlots(10, 2, 3), (SlotRange{7, 3}));
  EXPECT_EQ(JobLayout::ShardSlots(10, 3, 3).count, 0u);
  // The layout agrees with the creation-time answer whatever the threads.
  EXPECT_EQ(MakeOk(10, 3, 3, 3).ShardSlots(2), JobLayout::ShardSlots(10, 2, 3));
}

TEST(JobLayoutTest, SlotsForIsTheFewestThatFit) {
  EXPECT_EQ(JobLayout::SlotsFor(1, 4, 256), 256u);
  EXPECT_EQ(JobLayout::SlotsFor(2, 4, 256), 256u);  // K divides the threads: the window
  for (uint32_t k = 1; k <= 6; ++k) {
    for (uint32_t n = 1; n <= 13; ++n) {
      const uint32_t w = 8, slots = JobLayout::SlotsFor(k, n, n * w);
      if (k > slots) continue;
      EXPECT_TRUE(JobLayout::Make({.job_slots = slots, .num_shards = k, .worker_threads = n,
                                   .window_packets = n * w}).ok()) << "K=" << k << " n=" << n;
      if (slots > 1 && k <= slots - 1) {
        EXPECT_FALSE(JobLayout::Make({.job_slots = slots - 1, .num_shards = k,
                                      .worker_threads = n, .window_packets = n * w}).ok())
            << "K=" << k << " n=" << n << ": " << slots - 1 << " slots fit too";
      }
    }
  }
}

TEST(JobLayoutTest, MoreShardsThanThreadsLeavesShardsIdle) {
  const JobLayout l = MakeOk(64, 4, 2, 16);
  EXPECT_EQ(l.ShardOf(0), 0u);
  EXPECT_EQ(l.ShardOf(1), 2u);
  EXPECT_EQ(l.ShardThreads(1).size(), 0u);
  EXPECT_EQ(l.ShardThreads(3).size(), 0u);
  // An idle shard's slots all belong to its first I/O thread (no thread sends there).
  EXPECT_EQ(l.IoSlots(1, 0, 2), (SlotRange{16, 16}));
  EXPECT_EQ(l.IoSlots(1, 1, 2).count, 0u);
}

TEST(JobLayoutTest, RefusesBadParametersNamingThem) {
  auto err = [](JobLayout::Params p) { return JobLayout::Make(p).status(); };
  EXPECT_THAT(err({.job_slots = 0, .window_packets = 1}).message(), HasSubstr("job slots"));
  EXPECT_THAT(err({.job_slots = 20000, .window_packets = 1}).message(), HasSubstr("job slots"));
  EXPECT_THAT(err({.job_slots = 8, .num_shards = 0, .window_packets = 1}).message(),
              HasSubstr("num_shards"));
  EXPECT_THAT(err({.job_slots = 8, .num_shards = 9, .window_packets = 1}).message(),
              HasSubstr("num_shards must be in [1, 8]"));
  EXPECT_THAT(err({.job_slots = 8, .worker_threads = 0, .window_packets = 1}).message(),
              HasSubstr("num_worker_threads"));
  EXPECT_THAT(err({.job_slots = 8, .worker_threads = 65, .window_packets = 65}).message(),
              HasSubstr("num_worker_threads"));
  EXPECT_THAT(err({.job_slots = 8, .worker_threads = 2, .window_packets = 3}).message(),
              HasSubstr("window_packets must be a positive multiple of num_worker_threads=2"));
  EXPECT_THAT(err({.job_slots = 8, .worker_threads = 2, .window_packets = 0}).message(),
              HasSubstr("window_packets"));
  for (const Status& s : {err({.job_slots = 0, .window_packets = 1}),
                          err({.job_slots = 8, .worker_threads = 2, .window_packets = 3})}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  }
}

TEST(JobLayoutTest, RefusesAWindowTooLargeAndNamesTheLargestThatFits) {
  // One shard: the window must fit the job's slots.
  Status s = JobLayout::Make({.job_slots = 100, .worker_threads = 4, .window_packets = 104}).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("window_packets=104 (4 threads x 26 slots) does not fit the "
                                     "job's 100 slots; the largest window that fits is 100"));
  // Three shards of 10 slots (4, 3, 3) for 4 threads (2, 1, 1): shard 0 holds 4 slots for 2
  // threads, so w <= 2 and W <= 8.
  s = JobLayout::Make({.job_slots = 10, .num_shards = 3, .worker_threads = 4,
                       .window_packets = 12}).status();
  EXPECT_THAT(s.message(), HasSubstr("shard 0 of 3 holds 4 slots for 2 threads (needs 6)"));
  EXPECT_THAT(s.message(), HasSubstr("the largest window that fits is 8"));
  EXPECT_TRUE(JobLayout::Make({.job_slots = 10, .num_shards = 3, .worker_threads = 4,
                               .window_packets = 8}).ok());
  s = JobLayout::Make({.job_slots = 3, .num_shards = 3, .worker_threads = 6,
                       .window_packets = 6}).status();
  EXPECT_THAT(s.message(), HasSubstr("too few slots for this many threads"));
}

// Every layout Make accepts is a partition: shards split the job's slots, each thread's slots
// lie in its shard's and in its I/O thread's, no two threads share a slot, and the I/O threads
// of a shard split exactly its slots.
TEST(JobLayoutTest, RandomLayoutsArePartitions) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const uint32_t slots = 1 + rng() % 600;
    const uint32_t shards = 1 + rng() % 9;
    const uint32_t threads = 1 + rng() % 17;
    const uint32_t window = threads * (1 + rng() % 40);
    const uint32_t io = 1 + rng() % 6;
    StatusOr<JobLayout> made = JobLayout::Make({.job_slots = slots, .num_shards = shards,
                                                .worker_threads = threads,
                                                .window_packets = window});
    if (!made.ok()) continue;
    ++checked;
    const JobLayout& l = *made;
    std::vector<int> owner(slots, -1);
    uint32_t covered = 0;
    for (uint32_t s = 0; s < shards; ++s) {
      const SlotRange r = l.ShardSlots(s);
      ASSERT_EQ(r.first, covered);
      covered = r.end();
      uint32_t io_covered = r.first;
      for (uint32_t i = 0; i < io; ++i) {
        const SlotRange ir = l.IoSlots(s, i, io);
        ASSERT_EQ(ir.first, io_covered) << l.ToString() << " shard " << s << " io " << i;
        io_covered = ir.end();
      }
      ASSERT_EQ(io_covered, r.end()) << l.ToString();
      for (uint32_t t = l.ShardThreads(s).begin; t < l.ShardThreads(s).end; ++t) {
        ASSERT_EQ(l.ShardOf(t), s);
      }
    }
    ASSERT_EQ(covered, slots);
    for (uint32_t t = 0; t < threads; ++t) {
      const uint32_t s = l.ShardOf(t);
      ASSERT_LT(s, shards);
      ASSERT_TRUE(l.ShardThreads(s).Contains(t));
      const SlotRange tr = l.ThreadSlots(t);
      ASSERT_EQ(tr.count, window / threads);
      const SlotRange ir = l.IoSlots(s, l.IoThreadOf(t, io), io);
      ASSERT_LT(l.IoThreadOf(t, io), io);
      for (uint32_t x = tr.first; x < tr.end(); ++x) {
        ASSERT_TRUE(l.ShardSlots(s).Contains(x)) << l.ToString() << " thread " << t;
        ASSERT_TRUE(ir.Contains(x)) << l.ToString() << " thread " << t;
        ASSERT_EQ(owner[x], -1) << "slot " << x << " used by threads " << owner[x] << " and " << t;
        owner[x] = int(t);
      }
    }
    for (uint32_t x = 0; x < slots + 2; ++x) {
      const int expected = x < slots && owner[x] >= 0 ? owner[x] : int(threads);
      ASSERT_EQ(l.ThreadOfSlot(x), uint32_t(expected)) << l.ToString() << " slot " << x;
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace switchml::control
