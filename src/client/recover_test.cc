// ContextImpl::Recover (docs/reliability.md, "Surviving a failing switch"): whole jobs on the
// loopback cluster whose switch "dies" (the fabric drops everything from and to it from some
// point on), then every rank recovers over an in-process host path and every call must hold the
// exact sum on every rank.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "client/context_impl.h"
#include "switchml/failover.h"
#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"
#include "testing/shared_host_path.h"

namespace switchml::client {
namespace {

using testing::LoopbackCluster;

using testing::FastOptions;
using testing::SharedGroup;
using testing::SharedHostPath;
using testing::SwitchKiller;
using testing::OnEveryRank;

// A sequence of calls, several in flight (some in place, some of 0 or 1 elements, some over
// many rounds of both threads), with the switch stopped after a seeded number of its datagrams;
// then a probe call (which fails on a rank the switch had not failed yet) and Recover on every
// rank: every call submitted on every rank is OK, right (int32: exact; float32: within the
// quantizer's bound) and bit-identical on every rank.
struct Totals {
  uint64_t broadcast = 0, host_reduced = 0, first_call_above_zero = 0;
};

void RunSwitchDiesAtARandomPoint(uint64_t seed, DataType type, Totals& totals) {
  constexpr uint32_t kRanks = 3, kCalls = 10, kThreads = 2;
  SCOPED_TRACE("seed " + std::to_string(seed) + " " + std::string(DataTypeName(type)));
  std::mt19937_64 rng(seed);
  const size_t sizes[] = {0, 1, 63, 64, 65, 500, 2000, 3001, 5000};
  std::vector<size_t> n(kCalls);
  std::vector<bool> in_place(kCalls);
  int64_t datagrams = 0;
  for (uint32_t c = 0; c < kCalls; ++c) {
    n[c] = sizes[rng() % std::size(sizes)];
    in_place[c] = rng() % 3 == 0;
    datagrams += int64_t(n[c] / 64 + 2 + kThreads) * kRanks;
  }
  SwitchKiller killer;
  killer.budget = int64_t(rng() % uint64_t(datagrams));
  auto cluster = LoopbackCluster::Create(kRanks, FastOptions(kThreads), killer.Faults()).value();
  SharedGroup group(kRanks);
  // 32-bit words: int32 values or float32 bits.
  std::vector<std::vector<std::vector<int32_t>>> in(kRanks), out(kRanks);
  std::vector<std::vector<AllReduceHandle>> handles(kRanks);
  std::vector<StatusOr<RecoveryReport>> reports(kRanks, InternalError("not run"));
  std::vector<Status> probes(kRanks);
  std::vector<std::vector<int32_t>> probe_buf(kRanks, std::vector<int32_t>(1));
  std::vector<AllReduceHandle> probe_handles(kRanks);
  OnEveryRank(kRanks, [&](uint32_t r) {
    Context& ctx = cluster->ctx(r);
    in[r].resize(kCalls);
    out[r].resize(kCalls);
    for (uint32_t c = 0; c < kCalls; ++c) {
      in[r][c].resize(n[c]);
      if (type == DataType::kInt32) {
        testing::FillInt32(r, c * 100000, in[r][c].data(), n[c]);
      } else {
        testing::FillFloat32(r, c * 100000, reinterpret_cast<float*>(in[r][c].data()), n[c]);
      }
      out[r][c].assign(n[c], 0x5A5A5A5A);
    }
    for (uint32_t c = 0; c < kCalls; ++c) {
      int32_t* o = in_place[c] ? in[r][c].data() : out[r][c].data();
      handles[r].push_back(ctx.AllReduceAsync(in[r][c].data(), o, n[c], type));
    }
    for (auto& h : handles[r]) (void)h.Wait();
  });
  // Whatever happened so far, the switch is dead now; the probe makes every rank see it.
  killer.dead = true;
  OnEveryRank(kRanks, [&](uint32_t r) {
    probe_buf[r][0] = int32_t(r + 1);
    probe_handles[r] = cluster->ctx(r).AllReduceAsync(probe_buf[r].data(), probe_buf[r].data(), 1, DataType::kInt32);
    probes[r] = probe_handles[r].Wait();
    SharedHostPath host(group, r);
    reports[r] = ContextImpl::Of(cluster->ctx(r)).Recover(host);
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_FALSE(probes[r].ok()) << "rank " << r;
    EXPECT_EQ(reports[r]->first_call, reports[0]->first_call);
    EXPECT_EQ(reports[r]->end_call, reports[0]->end_call);
    EXPECT_GE(reports[r]->end_call, kCalls);
    EXPECT_EQ(reports[r]->packets_broadcast, reports[0]->packets_broadcast);
    EXPECT_EQ(reports[r]->elements_host_reduced, reports[0]->elements_host_reduced);
    if (r == 0) {
      totals.broadcast += reports[r]->packets_broadcast;
      totals.host_reduced += reports[r]->elements_host_reduced;
      totals.first_call_above_zero += reports[r]->first_call > 0;
      std::printf("seed %llu %s: calls [%llu, %llu) recovered, %llu packets broadcast, %llu elements on the host path\n",
                  (unsigned long long)seed, std::string(DataTypeName(type)).c_str(),
                  (unsigned long long)reports[r]->first_call, (unsigned long long)reports[r]->end_call,
                  (unsigned long long)reports[r]->packets_broadcast,
                  (unsigned long long)reports[r]->elements_host_reduced);
    }
    for (uint32_t c = 0; c < kCalls; ++c) {
      ASSERT_TRUE(handles[r][c].status().ok()) << "rank " << r << " call " << c << ": " << handles[r][c].status();
      const int32_t* o = in_place[c] ? in[r][c].data() : out[r][c].data();
      const int32_t* o0 = in_place[c] ? in[0][c].data() : out[0][c].data();
      const auto v = type == DataType::kInt32
                         ? testing::VerifyInt32(o, n[c], kRanks, c * 100000)
                         : testing::VerifyFloat32(reinterpret_cast<const float*>(o), n[c], kRanks, c * 100000,
                                                  {.elements_per_packet = 64, .threads = kThreads});
      EXPECT_EQ(v.wrong, 0u) << "rank " << r << " call " << c << " (" << n[c] << " elements"
                             << (in_place[c] ? ", in place" : "") << "): first wrong at " << v.first_wrong;
      EXPECT_EQ(0, n[c] == 0 ? 0 : std::memcmp(o, o0, 4 * n[c])) << "rank " << r << " and rank 0 differ, call " << c;
    }
    // The probe: recovered (sum 1 + 2 + 3) when every rank submitted it, else still failed.
    if (reports[r]->end_call > kCalls) {
      EXPECT_TRUE(probe_handles[r].status().ok()) << probe_handles[r].status();
      EXPECT_EQ(probe_buf[r][0], 6);
    } else {
      EXPECT_FALSE(probe_handles[r].status().ok());
    }
    // New calls go to the host path.
    int32_t x = 0;
    const Status after = cluster->ctx(r).AllReduce(&x, &x, 1, DataType::kInt32);
    EXPECT_EQ(after.code(), StatusCode::kFailedPrecondition) << after;
    EXPECT_NE(after.message().find("host path"), std::string::npos) << after;
  }
}

TEST(RecoverTest, Int32CallsExactOnEveryRankAfterTheSwitchDiesAtARandomPoint) {
  Totals totals;
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) RunSwitchDiesAtARandomPoint(seed, DataType::kInt32, totals);
  // The seeds stop the switch at different points: some calls finished before, some elements
  // went to the host path.
  EXPECT_GT(totals.host_reduced, 0u);
  EXPECT_GT(totals.first_call_above_zero, 0u);
}

TEST(RecoverTest, Float32CallsIdenticalOnEveryRankAfterTheSwitchDiesAtARandomPoint) {
  Totals totals;
  for (uint64_t seed : {11, 12, 13, 14}) RunSwitchDiesAtARandomPoint(seed, DataType::kFloat32, totals);
  EXPECT_GT(totals.host_reduced, 0u);
}

// One rank completes the last (here: the only) round of a call and the other does not: the
// switch's results to rank 1 are lost from the start, then the switch dies. Rank 0's call is OK
// and it reuses the input; rank 1's call fails. Recover completes rank 1's call from rank 0's
// shadow copies (not from its buffers), exactly.
TEST(RecoverTest, ALaggingRankCompletesFromTheOtherRanksShadowCopies) {
  constexpr uint32_t kRanks = 2;
  const size_t n = 4 * 64 - 5;  // 4 blocks + the descriptor packet: one round of an 8-slot window
  SwitchKiller killer;
  killer.mute_rank = 1;
  auto cluster = LoopbackCluster::Create(kRanks, FastOptions(1), killer.Faults()).value();
  SharedGroup group(kRanks);
  std::vector<std::vector<int32_t>> in(kRanks, std::vector<int32_t>(n)), out(kRanks, std::vector<int32_t>(n, 7));
  std::vector<Status> first(kRanks), second(kRanks);
  std::vector<AllReduceHandle> h(kRanks);
  std::vector<StatusOr<RecoveryReport>> reports(kRanks, InternalError("not run"));
  std::atomic<bool> rank0_done{false};
  OnEveryRank(kRanks, [&](uint32_t r) {
    testing::FillInt32(r, 77, in[r].data(), n);
    h[r] = cluster->ctx(r).AllReduceAsync(in[r].data(), out[r].data(), n, DataType::kInt32);
    first[r] = h[r].Wait();
    if (r == 0) {
      std::fill(in[0].begin(), in[0].end(), -1);  // the caller reuses its buffer
      rank0_done = true;
    }
  });
  ASSERT_TRUE(first[0].ok()) << first[0];
  ASSERT_FALSE(first[1].ok());
  killer.dead = true;
  OnEveryRank(kRanks, [&](uint32_t r) {
    int32_t x = 1;
    second[r] = cluster->ctx(r).AllReduce(&x, &x, 1, DataType::kInt32);
    SharedHostPath host(group, r);
    reports[r] = ContextImpl::Of(cluster->ctx(r)).Recover(host);
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status();
    EXPECT_FALSE(second[r].ok());
    EXPECT_EQ(reports[r]->first_call, 0u);
    EXPECT_EQ(reports[r]->end_call, 1u);  // rank 1's second call was refused: it has 1 call
    EXPECT_EQ(reports[r]->packets_broadcast, 4u);
    EXPECT_EQ(reports[r]->elements_host_reduced, 0u);
    EXPECT_TRUE(h[r].status().ok()) << h[r].status();
    const auto v = testing::VerifyInt32(out[r].data(), n, kRanks, 77);
    EXPECT_EQ(v.wrong, 0u) << "rank " << r << " first wrong at " << v.first_wrong;
  }
  EXPECT_EQ(reports[0]->submitted, 2u);  // its second call stays failed: the host path's
  EXPECT_EQ(reports[1]->submitted, 1u);
}

}  // namespace
}  // namespace switchml::client
