// Failover (switchml/failover.h): the integrations' loop around it, on the loopback cluster with a
// switch that dies at a random point and an in-process host path. Every rank runs 100 in-place
// int32 all-reduces, up to 4 in flight, as an integration does: on its first call that fails
// because the switch is gone it agrees (Agree(true)), runs the calls recovery left it
// (RunOnHost) and every later call on the host path; a rank still on the switch at the end
// agrees at its "barrier" (Agree(false)). Every call must be exact on every rank.
#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "client/context_impl.h"
#include "switchml/failover.h"
#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"
#include "testing/shared_host_path.h"

namespace switchml {
namespace {

using testing::FastOptions;
using testing::LoopbackCluster;
using testing::OnEveryRank;
using testing::SharedGroup;
using testing::SharedHostPath;
using testing::SwitchKiller;

// What a rank saw.
struct RankRun {
  Status error;  // the first unexpected failure
  bool recovered = false;
  bool failed_first = false;  // this rank's own call failed (Agree(true)); else it agreed at the barrier
  RecoveryReport report;
  uint64_t on_host = 0;  // calls it ran on the host path itself
  uint64_t rerun = 0;    // of those, calls it had submitted that recovery left to it (RunOnHost)
  Stats stats;           // the context's, at the end
};

// One rank's loop: an integration's all-reduce path. Returns through `run`.
void RunRank(Context& ctx, HostPath& host, Failover& fo, std::vector<std::vector<int32_t>>& bufs, RankRun& run) {
  const size_t calls = bufs.size();
  std::vector<AllReduceHandle> h(calls);
  std::deque<size_t> inflight;
  bool on_switch = true;
  auto fail = [&](Status s) {
    if (run.error.ok()) run.error = std::move(s);
  };
  auto host_reduce = [&](size_t c) {
    ++run.on_host;
    if (Status s = host.AllReduce(bufs[c].data(), bufs[c].size(), DataType::kInt32); !s.ok()) fail(s);
  };
  auto settle = [&](size_t c) {
    Status s = h[c].Wait();
    if (s.ok()) return;
    if (on_switch) {
      if (!fo.SwitchFailed(s)) return fail(s.WithContext("call " + std::to_string(c) + " (not a switch failure)"));
      auto agreed = fo.Agree(true);
      if (!agreed.ok()) return fail(agreed.status());
      if (!agreed->has_value()) return fail(InternalError("Agree(true) returned no recovery"));
      run.recovered = true;
      run.failed_first = true;
      run.report = **agreed;
      on_switch = false;
    }
    if (h[c].status().ok()) return;  // finished by the recovery
    if (!fo.RunOnHost(h[c])) return fail(h[c].status().WithContext("call " + std::to_string(c) + " not for the host"));
    ++run.rerun;
    host_reduce(c);
  };
  for (size_t c = 0; c < calls && run.error.ok(); ++c) {
    if (!on_switch) {
      host_reduce(c);
      continue;
    }
    h[c] = ctx.AllReduceAsync(bufs[c].data(), bufs[c].data(), bufs[c].size(), DataType::kInt32);
    inflight.push_back(c);
    while (inflight.size() > 4 || (c + 1 == calls && !inflight.empty())) {
      const size_t oldest = inflight.front();
      inflight.pop_front();
      settle(oldest);
      if (!on_switch) {  // the rest of the window, in call order
        while (!inflight.empty()) {
          settle(inflight.front());
          inflight.pop_front();
        }
      }
    }
  }
  if (on_switch && run.error.ok()) {  // the barrier at the end
    auto agreed = fo.Agree(false);
    if (!agreed.ok()) return fail(agreed.status());
    if (agreed->has_value()) {
      run.recovered = true;
      run.report = **agreed;
    }
  }
}

// `kCalls` calls of random sizes, the switch killed after a random number of its datagrams; or,
// with `mute_rank` >= 0, one call of 100 elements whose results never reach that rank.
// `stats_out`, if given, gets every rank's context Stats at the end.
// `racks` > 0: a two-level cluster of `racks` leaves x 3 / racks workers, `victim` the switch
// that dies (a leaf's or the parent's address).
void RunCalls(uint64_t seed, size_t kCalls, int mute_rank, uint64_t& recoveries, uint64_t& host_calls,
              std::vector<Stats>* stats_out = nullptr, uint32_t racks = 0,
              uint32_t victim = LoopbackCluster::kSwitchEndpoint.ipv4) {
  constexpr uint32_t kRanks = 3, kThreads = 2;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const size_t sizes[] = {1, 64, 300, 1000, 2500};
  std::vector<size_t> n(kCalls);
  int64_t datagrams = 0;
  for (size_t c = 0; c < kCalls; ++c) {
    n[c] = mute_rank >= 0 ? 100 : sizes[rng() % std::size(sizes)];
    datagrams += int64_t(n[c] / 64 + 2 + kThreads) * kRanks;
  }
  SwitchKiller killer;
  killer.mute_rank = mute_rank;
  killer.victim_ipv4 = victim;
  // A point in the run, or (1 in 6) after its end: then no rank fails and nobody recovers.
  if (mute_rank < 0) killer.budget = int64_t(rng() % uint64_t(datagrams + datagrams / 5));
  auto cluster = racks == 0 ? LoopbackCluster::Create(kRanks, FastOptions(kThreads), killer.Faults()).value()
                            : LoopbackCluster::CreateTwoLevel(racks, kRanks / racks, FastOptions(kThreads),
                                                              killer.Faults())
                                  .value();
  for (uint32_t r = 0; r < kRanks; ++r) {
    // What Context::Create's controller query says once the switch process is gone.
    client::ContextImpl::Of(cluster->ctx(r)).SetFailureExplainerForTests([&killer](const Status&) {
      control::FailureExplanation e;
      // A muted rank's view: its switch is gone (nothing comes back).
      e.switch_unreachable = killer.dead.load() || killer.mute_rank.load() >= 0;
      if (e.switch_unreachable) e.text = " (test: the switch is gone)";
      return e;
    });
  }
  SharedGroup group(kRanks);
  std::vector<std::vector<std::vector<int32_t>>> bufs(kRanks, std::vector<std::vector<int32_t>>(kCalls));
  std::vector<RankRun> runs(kRanks);
  OnEveryRank(kRanks, [&](uint32_t r) {
    for (size_t c = 0; c < kCalls; ++c) {
      bufs[r][c].resize(n[c]);
      testing::FillInt32(r, c * 10000 + seed, bufs[r][c].data(), n[c]);
    }
    SharedHostPath host(group, r);
    Failover fo(cluster->ctx(r), host);
    RunRank(cluster->ctx(r), host, fo, bufs[r], runs[r]);
    runs[r].stats = cluster->ctx(r).GetStats();
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(runs[r].error.ok()) << "rank " << r << ": " << runs[r].error;
    EXPECT_EQ(runs[r].recovered, runs[0].recovered) << "rank " << r;
    if (runs[r].recovered) {
      EXPECT_EQ(runs[r].report.end_call, runs[0].report.end_call);
      EXPECT_EQ(runs[r].report.failed_ranks, runs[0].report.failed_ranks);
      // The calls on the host path: those after what the recovery finished.
      EXPECT_EQ(runs[r].on_host, kCalls - runs[r].report.end_call) << "rank " << r;
    }
    // The library's counters: every submitted call in exactly one of completed (on the switch),
    // recovered (failed there, finished by the recovery) and failed (left to the host path).
    const Stats& st = runs[r].stats;
    EXPECT_EQ(st.calls_submitted, st.calls_completed + st.calls_recovered + st.calls_failed) << "rank " << r;
    EXPECT_EQ(st.calls_failed, runs[r].rerun) << "rank " << r;
    if (runs[r].recovered) {
      EXPECT_LE(st.calls_recovered, runs[r].report.end_call - runs[r].report.first_call) << "rank " << r;
    } else {
      EXPECT_EQ(st.calls_recovered, 0u) << "rank " << r;
      EXPECT_EQ(st.calls_completed, kCalls) << "rank " << r;
    }
    if (stats_out) stats_out->push_back(st);
    for (size_t c = 0; c < kCalls; ++c) {
      const auto v = testing::VerifyInt32(bufs[r][c].data(), n[c], kRanks, c * 10000 + seed);
      EXPECT_EQ(v.wrong, 0u) << "rank " << r << " call " << c << " (" << n[c] << " elements): first wrong at "
                             << v.first_wrong;
    }
  }
  if (runs[0].recovered) {
    ++recoveries;
    host_calls += runs[0].on_host;
    std::printf("seed %llu: switch gone after call %llu (failed first: rank(s)", (unsigned long long)seed,
                (unsigned long long)runs[0].report.first_call);
    for (uint32_t f : runs[0].report.failed_ranks) std::printf(" %u", f);
    std::printf("); recovery finished calls [%llu, %llu), %llu on the host path\n",
                (unsigned long long)runs[0].report.first_call, (unsigned long long)runs[0].report.end_call,
                (unsigned long long)runs[0].on_host);
  } else {
    std::printf("seed %llu: the switch outlived the run\n", (unsigned long long)seed);
  }
}

TEST(FailoverTest, HundredInt32CallsExactOnEveryRankWhenTheSwitchDiesAtARandomPoint) {
  uint64_t recoveries = 0, host_calls = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) RunCalls(seed, 100, -1, recoveries, host_calls);
  EXPECT_GE(recoveries, 4u);  // most seeds kill the switch inside the run
  EXPECT_GT(host_calls, 0u);
}

// Two levels (docs/scaling.md "Two-level aggregation"): the parent, or one leaf, dies at a random
// point. Every rank's calls time out (the parent's totals, or that rack's results, stop; the
// other leaves hold their rounds), the ranks agree, and the recovery finishes every call on the
// host path exactly, as for one switch: what the integrations' failover stands on.
TEST(FailoverTest, TwoLevelCallsExactOnEveryRankWhenTheParentOrALeafDies) {
  uint64_t recoveries = 0, host_calls = 0;
  for (uint64_t seed = 31; seed <= 34; ++seed) {
    RunCalls(seed, 60, -1, recoveries, host_calls, nullptr, /*racks=*/3, LoopbackCluster::kParentIpv4);
  }
  for (uint64_t seed = 35; seed <= 38; ++seed) {  // leaf 1 (127.0.0.2) of 3 racks x 1
    RunCalls(seed, 60, -1, recoveries, host_calls, nullptr, /*racks=*/3, LoopbackCluster::kSwitchEndpoint.ipv4 + 1);
  }
  EXPECT_GE(recoveries, 4u);  // most seeds kill the switch inside the run
  EXPECT_GT(host_calls, 0u);
}

// The switch's results to rank 2 are lost: ranks 0 and 1 complete their call, rank 2's fails.
// Ranks 0 and 1 never see a failure: they learn of rank 2's at their barrier (Agree(false)) and
// recover with it; rank 2's call is completed from their shadow copies.
TEST(FailoverTest, RanksThatSawNoFailureJoinTheRecoveryAtTheirBarrier) {
  uint64_t recoveries = 0, host_calls = 0;
  std::vector<Stats> stats;
  RunCalls(21, 1, /*mute_rank=*/2, recoveries, host_calls, &stats);
  EXPECT_EQ(recoveries, 1u);
  EXPECT_EQ(host_calls, 0u);
  ASSERT_EQ(stats.size(), 3u);
  // Ranks 0 and 1 completed the call on the switch; rank 2's failed there and the recovery
  // finished it: recovered, no longer failed.
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(stats[r].calls_completed, 1u) << "rank " << r;
    EXPECT_EQ(stats[r].calls_recovered, 0u) << "rank " << r;
    EXPECT_EQ(stats[r].calls_failed, 0u) << "rank " << r;
  }
  EXPECT_EQ(stats[2].calls_submitted, 1u);
  EXPECT_EQ(stats[2].calls_completed, 0u);
  EXPECT_EQ(stats[2].calls_recovered, 1u);
  EXPECT_EQ(stats[2].calls_failed, 0u);
}

// The busy bit: last_agreement_idle() is true on every rank exactly when no rank was busy (and
// none failed), false before any agreement; a busy rank starts no recovery.
TEST(FailoverTest, LastAgreementIdleIsTheSameOnEveryRankAndFalseWhenAnyRankWasBusy) {
  constexpr uint32_t kRanks = 3;
  auto cluster = LoopbackCluster::Create(kRanks, FastOptions(1)).value();
  SharedGroup group(kRanks);
  std::vector<std::vector<int>> idle(kRanks);  // before any, then after each agreement
  std::vector<Status> errors(kRanks);
  OnEveryRank(kRanks, [&](uint32_t r) {
    SharedHostPath host(group, r);
    Failover fo(cluster->ctx(r), host);
    idle[r].push_back(fo.last_agreement_idle());
    // Nobody busy; rank 1 busy; everybody busy; nobody busy again.
    for (int round = 0; round < 4; ++round) {
      const bool busy = round == 2 || (round == 1 && r == 1);
      auto agreed = fo.Agree(false, busy);
      if (!agreed.ok() || agreed->has_value()) {
        errors[r] = agreed.ok() ? InternalError("a recovery without a failure") : agreed.status();
        return;
      }
      idle[r].push_back(fo.last_agreement_idle());
    }
    EXPECT_FALSE(fo.recovered());
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(idle[r], (std::vector<int>{0, 1, 0, 0, 1})) << "rank " << r;
  }
}

// A failed rank's flag wins over another's busy bit: every rank recovers, and the agreement is
// not idle.
TEST(FailoverTest, AFailureAmongBusyRanksStillRecoversEveryRank) {
  auto cluster = LoopbackCluster::Create(2, FastOptions(1)).value();
  SharedGroup group(2);
  std::vector<StatusOr<std::optional<RecoveryReport>>> agreed(2, InternalError("not run"));
  std::vector<int> idle(2, -1);
  OnEveryRank(2, [&](uint32_t r) {
    int32_t x = int32_t(r + 1);
    ASSERT_TRUE(cluster->ctx(r).AllReduce(&x, &x, 1, DataType::kInt32).ok());
    SharedHostPath host(group, r);
    Failover fo(cluster->ctx(r), host);
    if (r == 0) fo.InjectSwitchFailure("test: the switch is gone");
    agreed[r] = fo.Agree(false, /*busy=*/r == 1);
    idle[r] = fo.last_agreement_idle();
  });
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(agreed[r].ok()) << "rank " << r << ": " << agreed[r].status();
    ASSERT_TRUE(agreed[r]->has_value()) << "rank " << r;
    EXPECT_EQ((*agreed[r])->failed_ranks, std::vector<uint32_t>{0}) << "rank " << r;
    EXPECT_EQ(idle[r], 0) << "rank " << r;
  }
}

TEST(FailoverTest, AgreeWithoutAnyFailureChangesNothing) {
  auto cluster = LoopbackCluster::Create(2, FastOptions(1)).value();
  SharedGroup group(2);
  std::vector<StatusOr<std::optional<RecoveryReport>>> agreed(2, InternalError("not run"));
  std::vector<Status> after(2);
  OnEveryRank(2, [&](uint32_t r) {
    SharedHostPath host(group, r);
    Failover fo(cluster->ctx(r), host);
    agreed[r] = fo.Agree(false);
    int32_t x = int32_t(r + 1);
    after[r] = cluster->ctx(r).AllReduce(&x, &x, 1, DataType::kInt32);
    if (after[r].ok() && x != 3) after[r] = InternalError("wrong sum " + std::to_string(x));
    EXPECT_FALSE(fo.recovered());
  });
  for (uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(agreed[r].ok()) << agreed[r].status();
    EXPECT_FALSE(agreed[r]->has_value());
    EXPECT_TRUE(after[r].ok()) << after[r];  // still on the switch
  }
}

// Without shadow copies (Options::shadow_copies = false, what the integrations set when their
// failover is off) the recovery refuses, on every rank, naming the option.
TEST(FailoverTest, WithoutShadowCopiesTheRecoveryFailsOnEveryRankNamingTheOption) {
  Options o = FastOptions(1);
  o.shadow_copies = false;
  auto cluster = LoopbackCluster::Create(2, o).value();
  SharedGroup group(2);
  std::vector<StatusOr<std::optional<RecoveryReport>>> agreed(2, InternalError("not run"));
  OnEveryRank(2, [&](uint32_t r) {
    int32_t x = int32_t(r + 1);
    ASSERT_TRUE(cluster->ctx(r).AllReduce(&x, &x, 1, DataType::kInt32).ok());
    SharedHostPath host(group, r);
    Failover fo(cluster->ctx(r), host);
    if (r == 0) fo.InjectSwitchFailure("test: the switch is gone");
    agreed[r] = fo.Agree(r == 0);
  });
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(agreed[r].status().code(), StatusCode::kFailedPrecondition) << "rank " << r << ": " << agreed[r].status();
    EXPECT_NE(agreed[r].status().message().find("shadow_copies"), std::string::npos) << agreed[r].status();
  }
}

}  // namespace
}  // namespace switchml
