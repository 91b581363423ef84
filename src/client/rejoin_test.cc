// SwitchRejoin (switchml/rejoin.h) against real switches and controllers on 127.0.0.1, with 3
// ranks (threads) and an in-process host path: every rank has a Context on the switch, the
// switch dies, every rank recovers through Failover and runs its calls on the host path,
// polling SwitchRejoin at each; when the job can be served again every rank gets a new Context
// at the same call and its all-reduces are exact.
//  - job 0 (the reference session): the switch process (switch + its controller) restarts on
//    the same controller port; Poll returns null at every call while it is down;
//  - a rank whose registration fails in the first attempt (a configuration the session refuses)
//    keeps every rank on the host path; a later attempt succeeds;
//  - a JobService job on a standalone controller: its switch dies, the controller re-places it
//    on the other switch (same id and token); the first attempt fails for one rank (a wrong
//    token) after the others registered into the new placement, and the retry, which registers
//    them again with the same ports, succeeds.
// Then the agreement alone (SwitchRejoinAgreementTest: the controller question and the
// registration replaced; no gRPC, so it also runs under ThreadSanitizer, which excludes the
// SwitchRejoinTest cases: scripts/sanitize.sh).
#include "switchml/rejoin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <span>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "client/context_impl.h"
#include "client/rejoin_test_peer.h"
#include "controller/local_switch_for_tests.h"
#include "controller/remote_switches.h"
#include "controller/session_service.h"
#include "dataplane/switch_server.h"
#include "rendezvous/job_client.h"
#include "switchml/context.h"
#include "switchml/failover.h"
#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"
#include "testing/shared_host_path.h"
#include "transport/loopback.h"

namespace switchml {
namespace {

using controller::ControllerServer;
using testing::OnEveryRank;
using testing::SharedGroup;
using testing::SharedHostPath;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr uint32_t kRanks = 3;
constexpr uint32_t kThreads = 2;
constexpr char kOperatorToken[] = "operator-token-for-tests-0123";
// Host-path calls polled while the switch is down (Poll must return null at each).
constexpr uint64_t kCallsWhileDown = 12;
// A hang guard only: each host-path call after the restart sleeps 2 ms, so giving up takes at
// least 60 s (the rejoin needs a few hundred milliseconds of backoff and one registration).
constexpr uint64_t kMaxCallsToRejoin = 30000;

// A switch with its own controller (the `switchml switch` process) on 127.0.0.1; the
// controller on `port` (0: any; read back).
struct SwitchProcess {
  std::unique_ptr<dataplane::SwitchServer> sw;
  std::unique_ptr<ControllerServer> controller;
  uint16_t port = 0;

  Status Start(uint16_t want_port) {
    auto s = controller::StartLocalSwitchForTests(/*num_slots=*/64, /*max_workers=*/8, 256, 1);
    if (!s.ok()) return s.status();
    sw = std::move(*s);
    controller::ServerOptions so;
    so.listen_address = "127.0.0.1:" + std::to_string(want_port);
    so.operator_token = kOperatorToken;
    so.shutdown_grace = 100ms;
    auto c = ControllerServer::Start(so, sw.get());
    if (!c.ok()) return c.status();
    controller = std::move(*c);
    port = uint16_t(controller->port());
    return OkStatus();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  // As if the host died: the controller goes with the switch.
  void Kill() {
    if (controller) controller->Shutdown();
    controller.reset();
    if (sw) sw->Stop();
    sw.reset();
  }
};

Options RankOptions(uint32_t rank, const std::string& controller) {
  Options o;
  o.rank = rank;
  o.num_workers = kRanks;
  o.controller_address = controller;
  o.bind_ip = "127.0.0.1";
  o.num_worker_threads = kThreads;
  o.window_packets = 8 * kThreads;
  o.elements_per_packet = 64;
  o.initial_rto = 20ms;
  o.min_rto = 5ms;
  o.max_rto = 100ms;
  // Generous for a busy host (a spurious timeout before the kill fails the test); the kill is
  // found within call_timeout, and a rank waits up to rpc_timeout in a failed attempt's barrier.
  o.call_timeout = 2s;
  o.rpc_timeout = 5s;
  return o;
}

RejoinOptions FastRejoin() {
  RejoinOptions r;
  r.min_backoff = 20ms;
  r.max_backoff = 200ms;
  r.check_timeout = 1s;
  r.poll_every_calls = 4;
  return r;
}

// What one rank saw.
struct RankRun {
  std::vector<std::string> errors;
  bool switch_failed = false;      // the call after the kill failed with SwitchFailed
  bool recovered = false;
  uint64_t null_polls_while_down = 0;
  uint64_t rejoined_at_poll = 0;   // the Poll that returned the new context
  std::vector<RejoinAttempt> failed_attempts;
  std::optional<RejoinAttempt> last;
  uint64_t exact_after = 0;        // exact all-reduces on the new context
};

// One all-reduce on the host path, checked.
void HostCall(HostPath& host, uint32_t rank, uint64_t call, RankRun& run) {
  std::vector<int32_t> buf(100);
  testing::FillInt32(rank, call * 1000, buf.data(), buf.size());
  if (Status s = host.AllReduce(buf.data(), buf.size(), DataType::kInt32); !s.ok()) {
    run.errors.push_back("host call " + std::to_string(call) + ": " + s.ToString());
    return;
  }
  const auto v = testing::VerifyInt32(buf.data(), buf.size(), kRanks, call * 1000);
  if (v.wrong != 0) run.errors.push_back("host call " + std::to_string(call) + " wrong");
}

// The scenario on every rank: `contexts` on the switch; `kill` (run once, by rank 0, with every
// rank between calls) makes the switch path fail; `revive` (likewise, after kCallsWhileDown
// host-path calls) makes the job servable again (may be empty). `adjust` changes a rank's
// options for an attempt (RejoinTestPeer). `expect_null_while_down`: whether Poll must return
// null until `revive` ran.
std::vector<RankRun> RunScenario(std::vector<std::unique_ptr<Context>>& contexts,
                                 const std::function<void()>& kill,
                                 const std::function<void()>& revive,
                                 const std::function<void(uint32_t, uint64_t, Options&)>& adjust,
                                 bool expect_null_while_down) {
  SharedGroup group(kRanks);
  std::vector<RankRun> runs(kRanks);
  OnEveryRank(kRanks, [&](uint32_t r) {
    RankRun& run = runs[r];
    auto fail = [&](const std::string& what) { run.errors.push_back(what); };
    SharedHostPath host(group, r);
    Context& ctx = *contexts[r];
    uint64_t call = 0;
    // On the switch: exact.
    for (; call < 3; ++call) {
      std::vector<int32_t> buf(500);
      testing::FillInt32(r, call * 1000, buf.data(), buf.size());
      if (Status s = ctx.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kInt32); !s.ok()) {
        return fail("switch call " + std::to_string(call) + ": " + s.ToString());
      }
      if (testing::VerifyInt32(buf.data(), buf.size(), kRanks, call * 1000).wrong != 0) {
        return fail("switch call " + std::to_string(call) + " wrong");
      }
    }
    if (!group.Barrier().ok()) return fail("barrier");
    if (r == 0) kill();
    if (!group.Barrier().ok()) return fail("barrier");
    // The next call fails: every rank moves to the host path (Failover).
    Failover fo(ctx, host);
    std::vector<int32_t> buf(500);
    testing::FillInt32(r, call * 1000, buf.data(), buf.size());
    AllReduceHandle h = ctx.AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32);
    const Status st = h.Wait();
    run.switch_failed = fo.SwitchFailed(st);
    if (!run.switch_failed) return fail("the call after the kill: " + st.ToString());
    auto agreed = fo.Agree(true);
    if (!agreed.ok()) return fail("Agree: " + agreed.status().ToString());
    run.recovered = agreed->has_value();
    if (!h.status().ok()) {
      if (!fo.RunOnHost(h)) return fail("failed call not for the host: " + h.status().ToString());
      if (Status s = host.AllReduce(buf.data(), buf.size(), DataType::kInt32); !s.ok()) {
        return fail("host: " + s.ToString());
      }
    }
    if (testing::VerifyInt32(buf.data(), buf.size(), kRanks, call * 1000).wrong != 0) {
      return fail("recovered call wrong");
    }
    ++call;

    client::RejoinHooks hooks;
    if (adjust) hooks.options_for_attempt = [&, r](uint64_t attempt, Options& o) { adjust(r, attempt, o); };
    auto rejoin = client::RejoinTestPeer::Start(ctx.options(), host, FastRejoin(), hooks);
    if (!rejoin.ok()) return fail("Start: " + rejoin.status().ToString());
    uint64_t seen_attempts = 0;
    // Polls once per host-path call; returns the new context or null.
    auto poll = [&]() -> std::unique_ptr<Context> {
      auto back = (*rejoin)->Poll();
      if (!back.ok()) {
        fail("Poll: " + back.status().ToString());
        return nullptr;
      }
      if (auto a = (*rejoin)->last_attempt(); a && a->number != seen_attempts) {
        seen_attempts = a->number;
        if (!a->succeeded) run.failed_attempts.push_back(*a);
        run.last = a;
      }
      return std::move(*back);
    };
    std::unique_ptr<Context> fresh;
    for (uint64_t k = 0; k < kCallsWhileDown && run.errors.empty(); ++k, ++call) {
      fresh = poll();
      if (fresh) break;
      ++run.null_polls_while_down;
      HostCall(host, r, call, run);
    }
    if (!run.errors.empty()) return;
    if (expect_null_while_down && fresh) return fail("Poll returned a context while the switch was down");
    if (!group.Barrier().ok()) return fail("barrier");
    if (r == 0 && revive) revive();
    if (!group.Barrier().ok()) return fail("barrier");
    for (uint64_t k = 0; !fresh && k < kMaxCallsToRejoin && run.errors.empty(); ++k, ++call) {
      fresh = poll();
      if (fresh) break;
      HostCall(host, r, call, run);
      std::this_thread::sleep_for(2ms);
    }
    if (!run.errors.empty()) return;
    if (!fresh) return fail("no rejoin within the hang guard; last check: " + (*rejoin)->last_check());
    run.rejoined_at_poll = (*rejoin)->polls();
    // The same Poll again: refused.
    if ((*rejoin)->Poll().status().code() != StatusCode::kFailedPrecondition) {
      fail("Poll after the rejoin is not FAILED_PRECONDITION");
    }
    rejoin->reset();
    // On the new context, from this call on: exact.
    for (size_t n : {size_t(1), size_t(64), size_t(1000), size_t(5000)}) {
      std::vector<int32_t> in(n), out(n);
      testing::FillInt32(r, call * 1000, in.data(), n);
      if (Status s = fresh->AllReduce(in.data(), out.data(), n, DataType::kInt32); !s.ok()) {
        return fail("new context, " + std::to_string(n) + " elements: " + s.ToString());
      }
      if (testing::VerifyInt32(out.data(), n, kRanks, call * 1000).wrong == 0) ++run.exact_after;
      ++call;
    }
    std::vector<float> fin(3000), fout(3000);
    testing::FillFloat32(r, call, fin.data(), fin.size());
    if (Status s = fresh->AllReduce(fin.data(), fout.data(), fin.size(), DataType::kFloat32); !s.ok()) {
      return fail("new context, float32: " + s.ToString());
    }
    if (testing::VerifyFloat32(fout.data(), fout.size(), kRanks, call, testing::BlockLayout{64, kThreads})
            .wrong == 0) {
      ++run.exact_after;
    }
  });
  return runs;
}

std::vector<std::unique_ptr<Context>> CreateAll(const std::function<Options(uint32_t)>& options) {
  std::vector<std::future<StatusOr<std::unique_ptr<Context>>>> f;
  for (uint32_t r = 0; r < kRanks; ++r) {
    f.push_back(std::async(std::launch::async, [&, r] { return Context::Create(options(r)); }));
  }
  std::vector<std::unique_ptr<Context>> out;
  for (auto& x : f) {
    auto c = x.get();
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    out.push_back(std::move(*c));
  }
  return out;
}

// What every rank must agree on, and the results.
void ExpectAllRejoined(const std::vector<RankRun>& runs) {
  for (uint32_t r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    for (const std::string& e : runs[r].errors) ADD_FAILURE() << e;
    EXPECT_TRUE(runs[r].switch_failed);
    EXPECT_TRUE(runs[r].recovered);
    EXPECT_GT(runs[r].rejoined_at_poll, 0u);
    EXPECT_EQ(runs[r].rejoined_at_poll, runs[0].rejoined_at_poll);
    EXPECT_EQ(runs[r].rejoined_at_poll % FastRejoin().poll_every_calls, 0u);
    ASSERT_TRUE(runs[r].last.has_value());
    EXPECT_TRUE(runs[r].last->succeeded) << runs[r].last->description;
    EXPECT_EQ(runs[r].last->number, runs[0].last->number);
    EXPECT_EQ(runs[r].last->at_poll, runs[r].rejoined_at_poll);
    EXPECT_EQ(runs[r].exact_after, 5u);
  }
}

TEST(SwitchRejoinTest, Job0ComesBackWhenTheSwitchProcessRestartsEveryRankAtTheSameCall) {
  SwitchProcess proc;
  ASSERT_TRUE(proc.Start(0).ok());
  const uint16_t port = proc.port;
  auto contexts = CreateAll([&](uint32_t r) { return RankOptions(r, proc.address()); });
  ASSERT_EQ(contexts.size(), kRanks);
  Status restarted;
  const auto runs = RunScenario(
      contexts, [&] { proc.Kill(); }, [&] { restarted = proc.Start(port); }, nullptr,
      /*expect_null_while_down=*/true);
  ASSERT_TRUE(restarted.ok()) << restarted;
  ExpectAllRejoined(runs);
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(runs[r].null_polls_while_down, kCallsWhileDown) << "rank " << r;
    EXPECT_TRUE(runs[r].failed_attempts.empty()) << "rank " << r;
  }
  contexts.clear();
  proc.Kill();
}

// Rank 1's first registration is refused (it disagrees with rank 0 on num_worker_threads: the
// session refuses it, and the ranks waiting in the session's barrier fail at once): every rank
// stays on the host path, and the next attempt (rank 0 starts a new session) succeeds.
TEST(SwitchRejoinTest, ARankWhoseRegistrationFailsKeepsEveryRankOnTheHostPathUntilARetrySucceeds) {
  SwitchProcess proc;
  ASSERT_TRUE(proc.Start(0).ok());
  const uint16_t port = proc.port;
  auto contexts = CreateAll([&](uint32_t r) { return RankOptions(r, proc.address()); });
  ASSERT_EQ(contexts.size(), kRanks);
  Status restarted;
  const auto runs = RunScenario(
      contexts, [&] { proc.Kill(); }, [&] { restarted = proc.Start(port); },
      [](uint32_t r, uint64_t attempt, Options& o) {
        if (r == 1 && attempt == 1) o.num_worker_threads = 1;
      },
      /*expect_null_while_down=*/true);
  ASSERT_TRUE(restarted.ok()) << restarted;
  ExpectAllRejoined(runs);
  for (uint32_t r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_GE(runs[r].failed_attempts.size(), 1u);
    const RejoinAttempt& first = runs[r].failed_attempts[0];
    EXPECT_EQ(first.number, 1u);
    EXPECT_EQ(first.at_poll, runs[0].failed_attempts[0].at_poll);
    // Rank 1's registration was refused; the others fail in the session's barrier, which the
    // refusal ends at once.
    EXPECT_EQ(first.failed_ranks, (std::vector<uint32_t>{0, 1, 2}));
    EXPECT_THAT(first.description, HasSubstr("failed: rank(s) 0, 1, 2 could not register"));
    if (r == 1) {
      EXPECT_EQ(first.status.code(), StatusCode::kFailedPrecondition) << first.status;
      EXPECT_THAT(first.status.message(), HasSubstr("num_worker_threads"));
    } else {
      EXPECT_THAT(first.status.message(), HasSubstr("barrier"));
    }
    EXPECT_GE(runs[r].last->number, 2u);
    EXPECT_GT(runs[r].rejoined_at_poll, first.at_poll);
  }
  contexts.clear();
  proc.Kill();
}

// A JobService job through a standalone controller in front of two switches: its switch dies,
// the controller re-places it on the other one (placement 2, same id and token). Rank 1's first
// attempt uses a wrong token (refused) after ranks 0 and 2 registered into placement 2; the
// retry registers them again with the same ports and succeeds.
TEST(SwitchRejoinTest, AJobRePlacedOnAnotherSwitchComesBackAndARetryAfterAHalfRegistrationWorks) {
  SwitchProcess procs[2];
  std::vector<std::string> addresses;
  for (SwitchProcess& p : procs) {
    ASSERT_TRUE(p.Start(0).ok());
    addresses.push_back(p.address());
  }
  auto remote = controller::RemoteSwitches::Connect(addresses, 3s, kOperatorToken, 50ms);
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto standalone = controller::StartLocalControllerForTests(remote->get(), kOperatorToken);
  ASSERT_TRUE(standalone.ok()) << standalone.status();
  const std::string address = "127.0.0.1:" + std::to_string((*standalone)->port());
  auto admin = rendezvous::JobClient::Connect(address, 3s);
  ASSERT_TRUE(admin.ok()) << admin.status();
  (*admin)->set_operator_token(kOperatorToken);
  control::JobSpec spec;
  spec.num_workers = kRanks;
  spec.num_slots = 8 * kThreads;
  spec.elements_per_packet = 64;
  spec.switches = 1;
  auto job = (*admin)->CreateJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->assignment.placement, 1u);
  auto contexts = CreateAll([&](uint32_t r) {
    Options o = RankOptions(r, address);
    o.job_id = job->job_id;
    o.job_token = job->token;
    return o;
  });
  ASSERT_EQ(contexts.size(), kRanks);
  // Which switch took it: the one whose switch lists a live job.
  size_t on = 2;
  for (size_t i = 0; i < 2; ++i) {
    for (const control::JobInfo& j : procs[i].sw->ListJobs().jobs) {
      if (j.state != control::JobState::kEnded) on = i;
    }
  }
  ASSERT_LT(on, 2u);
  const auto runs = RunScenario(
      contexts, [&] { procs[on].Kill(); }, nullptr,
      [](uint32_t r, uint64_t attempt, Options& o) {
        if (r == 1 && attempt == 1) o.job_token = "wrong-token-for-tests-0123";
      },
      /*expect_null_while_down=*/false);
  ExpectAllRejoined(runs);
  for (uint32_t r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_GE(runs[r].failed_attempts.size(), 1u);
    const RejoinAttempt& first = runs[r].failed_attempts[0];
    // Rank 1 was refused; ranks 0 and 2 registered and then waited for it in the job's barrier
    // until their rpc_timeout.
    EXPECT_THAT(first.failed_ranks, ::testing::Contains(1u));
    // The retry succeeded at once: ranks 0 and 2 were admitted again (same address and ports).
    EXPECT_EQ(runs[r].failed_attempts.size(), 1u);
    EXPECT_EQ(runs[r].last->number, 2u);
    if (r == 1) {
      EXPECT_EQ(first.status.code(), StatusCode::kPermissionDenied) << first.status;
    }
  }
  auto info = (*admin)->GetJob(job->job_id);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->assignment.placement, 2u);
  EXPECT_EQ(info->state, control::JobState::kRunning);
  contexts.clear();
  (*standalone)->Shutdown();
  for (SwitchProcess& p : procs) p.Kill();
}

// The agreement alone (no controller, no gRPC: the question and the registration replaced),
// also under ThreadSanitizer. A host path that counts its all-gathers.
class CountingHostPath : public HostPath {
 public:
  explicit CountingHostPath(HostPath& inner) : inner_(inner) {}
  StatusOr<std::vector<int64_t>> AllGather(std::span<const int64_t> mine) override {
    ++all_gathers;
    if (!fail_with.ok()) return fail_with;
    return inner_.AllGather(mine);
  }
  Status Broadcast(void* data, size_t bytes, uint32_t root) override { return inner_.Broadcast(data, bytes, root); }
  Status AllReduce(void* data, size_t n, DataType type) override { return inner_.AllReduce(data, n, type); }
  uint64_t all_gathers = 0;
  Status fail_with;

 private:
  HostPath& inner_;
};

// A context that is never used (no switch behind it): what a registration returns here.
struct IdleContexts {
  IdleContexts() : fabric(transport::LoopbackFabric::Create().value()) {}
  StatusOr<std::unique_ptr<Context>> Make(const Options& o, uint16_t port) {
    std::vector<std::unique_ptr<transport::Channel>> channels;
    for (uint32_t t = 0; t < o.num_worker_threads; ++t) {
      SWITCHML_ASSIGN_OR_RETURN(auto ch, fabric->CreateChannel(transport::Endpoint{0x0A000001u + o.rank,
                                                                                   uint16_t(port + t)}));
      channels.push_back(std::move(ch));
    }
    return client::ContextImpl::CreateWithChannels(o, std::move(channels), testing::LoopbackCluster::kSwitchEndpoint);
  }
  std::unique_ptr<transport::LoopbackFabric> fabric;
};

// Rank 0's question says "not yet" twice, then "ready"; rank 1's first registration fails
// after opening its sockets. Every rank polls: all-gathers only every third Poll, the first
// attempt fails on every rank at the same Poll, the second (each rank on the ports of its
// first) returns a context on every rank at the same Poll.
TEST(SwitchRejoinAgreementTest, EveryRankSwitchesAtTheSamePollAfterAFailedAttempt) {
  constexpr uint64_t kEvery = 3;
  SharedGroup group(kRanks);
  IdleContexts idle;
  std::atomic<int> checks{0};
  struct Seen {
    std::vector<std::string> errors;
    uint64_t returned_at = 0, all_gathers = 0, polls = 0;
    std::vector<std::vector<uint16_t>> ports_in;  // per attempt
    std::optional<RejoinAttempt> first, last;
    std::string last_check;
  };
  std::vector<Seen> seen(kRanks);
  std::mutex idle_mu;  // the fabric's channel creation from several ranks
  OnEveryRank(kRanks, [&](uint32_t r) {
    Seen& me = seen[r];
    SharedHostPath shared(group, r);
    CountingHostPath host(shared);
    Options o = testing::FastOptions(1);
    o.rank = r;
    o.num_workers = kRanks;
    client::RejoinHooks hooks;
    hooks.check = [&]() -> std::string { return checks.fetch_add(1) < 2 ? "not yet (test)" : ""; };
    hooks.create = [&, r](const Options& opt, std::vector<uint16_t>& ports) -> StatusOr<std::unique_ptr<Context>> {
      me.ports_in.push_back(ports);
      const size_t attempt = me.ports_in.size();
      ports = {uint16_t(7000 + 100 * r + attempt)};  // "bound": the next attempt gets them
      if (r == 1 && attempt == 1) return UnavailableError("test: rank 1 cannot register");
      std::lock_guard lock(idle_mu);
      return idle.Make(opt, ports[0]);
    };
    RejoinOptions ro;
    ro.min_backoff = 1ms;
    ro.max_backoff = 5ms;
    ro.poll_every_calls = kEvery;
    auto rejoin = client::RejoinTestPeer::Start(o, host, ro, hooks);
    if (!rejoin.ok()) return me.errors.push_back(rejoin.status().ToString());
    std::unique_ptr<Context> back;
    for (uint64_t k = 0; k < 60000 && !back; ++k) {  // a hang guard: at least 60 s
      auto p = (*rejoin)->Poll();
      if (!p.ok()) return me.errors.push_back(p.status().ToString());
      back = std::move(*p);
      if (auto a = (*rejoin)->last_attempt(); a && !a->succeeded && !me.first) me.first = a;
      if (!back) std::this_thread::sleep_for(1ms);
    }
    if (!back) return me.errors.push_back("no context within the hang guard");
    if (back->options().rank != r) me.errors.push_back("the context of another rank");
    me.polls = (*rejoin)->polls();
    me.returned_at = me.polls;
    me.all_gathers = host.all_gathers;
    me.last = (*rejoin)->last_attempt();
    me.last_check = (*rejoin)->last_check();
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Seen& me = seen[r];
    for (const std::string& e : me.errors) ADD_FAILURE() << e;
    EXPECT_EQ(me.returned_at, seen[0].returned_at);
    EXPECT_EQ(me.returned_at % kEvery, 0u);
    // One all-gather per kEvery polls, and one more per attempt (2).
    EXPECT_EQ(me.all_gathers, me.polls / kEvery + 2);
    ASSERT_TRUE(me.first.has_value());
    EXPECT_EQ(me.first->number, 1u);
    EXPECT_EQ(me.first->at_poll, seen[0].first->at_poll);
    EXPECT_EQ(me.first->failed_ranks, std::vector<uint32_t>{1});
    EXPECT_EQ(me.first->status.ok(), r != 1) << me.first->status;
    EXPECT_THAT(me.first->description, HasSubstr("failed: rank(s) 1 could not register"));
    ASSERT_TRUE(me.last.has_value());
    EXPECT_TRUE(me.last->succeeded);
    EXPECT_EQ(me.last->number, 2u);
    EXPECT_EQ(me.last->at_poll, me.returned_at);
    EXPECT_GT(me.last->at_poll, me.first->at_poll);
    // Attempt 1 on ephemeral ports, attempt 2 on attempt 1's.
    ASSERT_EQ(me.ports_in.size(), 2u);
    EXPECT_TRUE(me.ports_in[0].empty());
    EXPECT_EQ(me.ports_in[1], std::vector<uint16_t>{uint16_t(7000 + 100 * r + 1)});
    EXPECT_EQ(me.last_check, r == 0 ? "ready" : "");
  }
  EXPECT_GE(checks.load(), 4);  // 2 "not yet", "ready" before each attempt
}

// Poll's only errors are the host path's; a rank whose flag is never set stays put.
TEST(SwitchRejoinAgreementTest, PollReturnsTheHostPathsErrorAndNullOtherwise) {
  SharedGroup group(1);
  SharedHostPath shared(group, 0);
  CountingHostPath host(shared);
  Options o = testing::FastOptions(1);
  client::RejoinHooks hooks;
  hooks.check = [] { return std::string("not yet (test)"); };
  RejoinOptions ro;
  ro.min_backoff = 1ms;
  ro.max_backoff = 2ms;
  ro.poll_every_calls = 4;
  auto rejoin = client::RejoinTestPeer::Start(o, host, ro, hooks);
  ASSERT_TRUE(rejoin.ok()) << rejoin.status();
  for (int k = 0; k < 8; ++k) {
    auto p = (*rejoin)->Poll();
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(*p, nullptr);
  }
  EXPECT_EQ(host.all_gathers, 2u);
  host.fail_with = DeadlineExceededError("test host path: a rank did not arrive");
  for (int k = 0; k < 3; ++k) EXPECT_TRUE((*rejoin)->Poll().ok());  // polls 9..11: no all-gather
  auto p = (*rejoin)->Poll();                                       // poll 12
  EXPECT_EQ(p.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(p.status().message(), HasSubstr("a rank did not arrive"));
  EXPECT_FALSE((*rejoin)->last_attempt().has_value());
}

TEST(SwitchRejoinOptionsTest, BadRejoinOptionsAreRefusedNamingTheField) {
  SharedGroup group(1);
  SharedHostPath host(group, 0);
  Options o;
  RejoinOptions r = FastRejoin();
  r.poll_every_calls = 0;
  auto s = SwitchRejoin::Start(o, host, r);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("poll_every_calls"));
  r = FastRejoin();
  r.max_backoff = 10ms;
  s = SwitchRejoin::Start(o, host, r);
  EXPECT_THAT(s.status().message(), HasSubstr("max_backoff"));
  o.num_workers = 0;
  s = SwitchRejoin::Start(o, host, FastRejoin());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchml
