// A switch with several I/O threads (dataplane/switch_server.h, docs/design.md "Several I/O
// threads"): exact results through the real client with T = 2 and 3 I/O threads and 1..4
// worker threads (so that some I/O threads serve several worker threads and some none), for
// job 0 and for a service job; a new session that changes the worker-thread count (and so the
// slot ownership); a datagram at the wrong I/O thread dropped and counted; counters summed; a
// job on several switches (shards) in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "client/context_impl.h"
#include "dataplane/switch_core.h"
#include "dataplane/switch_server.h"
#include "dataplane/test_packets.h"
#include "switchml/context.h"
#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"
#include "transport/loopback.h"

namespace switchml {
namespace {

using dataplane::JobTable;
using dataplane::SwitchConfig;
using dataplane::SwitchCore;
using dataplane::SwitchServer;
using testing::LoopbackCluster;

Options FastOptions(uint32_t threads) {
  Options o;
  o.num_worker_threads = threads;
  o.window_packets = 8 * threads;
  o.elements_per_packet = 64;
  o.initial_rto = std::chrono::milliseconds(5);
  o.min_rto = std::chrono::milliseconds(2);
  o.max_rto = std::chrono::milliseconds(100);
  o.call_timeout = std::chrono::milliseconds(5000);
  return o;
}

// Every rank all-reduces an int32 and a float32 tensor of `n` elements (each rank from its
// own thread) and checks the exact int32 sums and the bounded float32 ones.
void AllReduceAndVerify(std::vector<Context*> ctx, size_t n, uint64_t offset) {
  const uint32_t workers = uint32_t(ctx.size());
  std::vector<std::vector<int32_t>> in(workers, std::vector<int32_t>(n)), out = in;
  std::vector<std::vector<float>> fin(workers, std::vector<float>(n)), fout = fin;
  std::vector<Status> st(workers), fst(workers);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < workers; ++r) {
    testing::FillInt32(r, offset, in[r].data(), n);
    testing::FillFloat32(r, offset, fin[r].data(), n);
    threads.emplace_back([&, r] {
      st[r] = ctx[r]->AllReduce(in[r].data(), out[r].data(), n, DataType::kInt32);
      fst[r] = ctx[r]->AllReduce(fin[r].data(), fout[r].data(), n, DataType::kFloat32);
    });
  }
  for (auto& t : threads) t.join();
  const Options& o = ctx[0]->options();
  for (uint32_t r = 0; r < workers; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    ASSERT_TRUE(fst[r].ok()) << "rank " << r << ": " << fst[r];
    EXPECT_EQ(testing::VerifyInt32(out[r].data(), n, workers, offset).wrong, 0u) << "rank " << r;
    EXPECT_EQ(testing::VerifyFloat32(fout[r].data(), n, workers, offset,
                                     testing::BlockLayout{o.elements_per_packet,
                                                          o.num_worker_threads})
                  .wrong,
              0u)
        << "rank " << r;
  }
}

// Which I/O threads serve some worker thread: io(t) = t * T / threads.
std::vector<bool> Served(uint32_t io_threads, uint32_t worker_threads) {
  std::vector<bool> served(io_threads, false);
  for (uint32_t t = 0; t < worker_threads; ++t) served[t * io_threads / worker_threads] = true;
  return served;
}

// The summed counters equal the per-thread ones added up, nothing reached a wrong thread,
// and exactly the I/O threads that serve a worker thread received datagrams.
void ExpectCountersPerThread(const SwitchServer& server, uint32_t worker_threads) {
  const auto sum = server.counters();
  const std::vector<bool> served = Served(server.io_threads(), worker_threads);
  uint64_t received = 0, sent = 0;
  for (uint32_t i = 0; i < server.io_threads(); ++i) {
    const auto c = server.io_thread_counters(i);
    received += c.core.datagrams_received;
    sent += c.core.datagrams_sent;
    EXPECT_EQ(c.core.wrong_io_thread, 0u) << "I/O thread " << i;
    if (served[i]) {
      EXPECT_GT(c.core.datagrams_received, 0u) << "I/O thread " << i;
    } else {
      EXPECT_EQ(c.core.datagrams_received, 0u) << "I/O thread " << i;
    }
  }
  EXPECT_EQ(sum.core.datagrams_received, received);
  EXPECT_EQ(sum.core.datagrams_sent, sent);
  EXPECT_EQ(sum.core.wrong_io_thread, 0u);
}

class IoThreadsTest : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t>> {};

TEST_P(IoThreadsTest, Job0ExactThroughTheClient) {
  const auto [io_threads, worker_threads] = GetParam();
  SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.io_threads = io_threads;
  auto cluster = LoopbackCluster::Create(2, FastOptions(worker_threads), {}, sc).value();
  // Enough packets that every worker thread sends: 64 elements x 8 per thread, twice over.
  AllReduceAndVerify({&cluster->ctx(0), &cluster->ctx(1)}, 64 * 8 * worker_threads * 2 + 17, 5);
  // Counters are compared once nothing arrives any more (a late duplicate could otherwise land
  // between two reads, however quickly they follow each other on a loaded machine).
  cluster->server().Stop();
  ExpectCountersPerThread(cluster->server(), worker_threads);
}

// A job on K switches (shards) with T I/O threads each, in one process (LoopbackCluster with
// shards): exact results, every shard and every I/O thread that serves a worker thread
// aggregated, nothing misrouted.
TEST(ShardsLoopbackTest, EveryShardServesItsThreadsExactly) {
  for (uint32_t shards : {2u, 3u}) {
    for (uint32_t io_threads : {1u, 2u}) {
      SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
      sc.io_threads = io_threads;
      const uint32_t worker_threads = 6;
      auto cluster =
          LoopbackCluster::Create(3, FastOptions(worker_threads), {}, sc, shards).value();
      ASSERT_EQ(cluster->shards(), shards);
      AllReduceAndVerify({&cluster->ctx(0), &cluster->ctx(1), &cluster->ctx(2)},
                         64 * 8 * worker_threads * 2 + 17, 9);
      for (uint32_t s = 0; s < shards; ++s) {
        // Shard s serves 6 / K worker threads, at least one per I/O thread.
        for (uint32_t io = 0; io < io_threads; ++io) {
          EXPECT_GT(cluster->server(s).io_thread_counters(io).core.consumed, 0u)
              << "K=" << shards << " T=" << io_threads << " shard " << s << " I/O thread " << io;
        }
        EXPECT_EQ(cluster->server(s).counters().core.wrong_io_thread, 0u) << "shard " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TwoAndThreeIoThreads, IoThreadsTest,
                         ::testing::Combine(::testing::Values(2u, 3u),
                                            ::testing::Values(1u, 2u, 3u, 4u)),
                         [](const auto& info) {
                           std::string name = "T";  // += (not +): GCC 12 warns -Wrestrict on "T" + ...
                           name += std::to_string(std::get<0>(info.param));
                           name += "_threads";
                           name += std::to_string(std::get<1>(info.param));
                           return name;
                         });

// Registers `workers` ranks into `job_id` (0: the reference session) of `server` with
// per-thread ports base_port + t on 10.0.0.(1 + r), and builds their contexts with the
// per-thread switch ports of their grants.
std::vector<std::unique_ptr<Context>> Join(SwitchServer& server, transport::LoopbackFabric& fabric,
                                           uint32_t workers, const Options& base, uint32_t job_id,
                                           const std::string& token, uint16_t base_port) {
  std::vector<std::unique_ptr<Context>> out;
  for (uint32_t r = 0; r < workers; ++r) {
    Options o = base;
    o.rank = r;
    o.num_workers = workers;
    control::JobRegistration reg;
    reg.job_id = job_id;
    reg.token = token;
    reg.worker.rank = r;
    reg.worker.num_workers = workers;
    reg.worker.ipv4 = 0x0A000001 + r;
    reg.worker.protocol_version = control::kClientProtocolVersion;
    reg.worker.num_worker_threads = o.num_worker_threads;
    reg.worker.window_packets = o.window_packets;
    reg.worker.elements_per_packet = o.elements_per_packet;
    std::vector<std::unique_ptr<transport::Channel>> channels;
    for (uint32_t t = 0; t < o.num_worker_threads; ++t) {
      const uint16_t port = uint16_t(base_port + t);
      channels.push_back(fabric.CreateChannel({reg.worker.ipv4, port}).value());
      reg.worker.udp_ports.push_back(port);
    }
    auto grant = server.RegisterJobWorker(reg);
    EXPECT_TRUE(grant.ok()) << grant.status();
    if (!grant.ok()) return {};
    EXPECT_EQ(grant->switch_info.thread_routes.size(), o.num_worker_threads);
    auto routes = client::ContextImpl::RoutesFor(o, grant->switch_info, 0x7F000001);
    EXPECT_TRUE(routes.ok()) << routes.status();
    if (!routes.ok()) return {};
    out.push_back(client::ContextImpl::CreateWithChannels(o, std::move(channels), *routes));
  }
  return out;
}

struct Switch {
  std::unique_ptr<transport::LoopbackFabric> fabric;
  std::unique_ptr<SwitchServer> server;
};

Switch StartSwitch(uint32_t io_threads) {
  Switch s;
  s.fabric = transport::LoopbackFabric::Create().value();
  SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.io_threads = io_threads;
  std::vector<std::unique_ptr<transport::Channel>> channels;
  for (uint32_t i = 0; i < io_threads; ++i) {
    channels.push_back(s.fabric->CreateChannel({0x7F000001, uint16_t(48864 + i)}).value());
  }
  s.server = SwitchServer::Create(sc, std::move(channels)).value();
  EXPECT_TRUE(s.server->Start().ok());
  return s;
}

std::vector<Context*> Ptrs(const std::vector<std::unique_ptr<Context>>& v) {
  std::vector<Context*> p;
  for (const auto& c : v) p.push_back(c.get());
  return p;
}

TEST(IoThreadsServiceJobTest, ExactAndCountedPerJob) {
  for (uint32_t worker_threads : {1u, 3u}) {
    Switch s = StartSwitch(2);
    control::JobSpec spec;
    spec.num_workers = 3;
    spec.num_slots = 64;
    spec.elements_per_packet = 64;
    auto job = s.server->CreateJob(spec);
    ASSERT_TRUE(job.ok()) << job.status();
    auto ctx = Join(*s.server, *s.fabric, 3, FastOptions(worker_threads), job->job_id,
                    job->token, 7000);
    ASSERT_EQ(ctx.size(), 3u);
    AllReduceAndVerify(Ptrs(ctx), 3000, 11);
    // Counters are compared once nothing arrives any more: with the workers gone and the I/O
    // threads stopped (read while a late retransmission still arrives, two reads differed by
    // a few datagrams on a loaded machine).
    ctx.clear();
    s.server->Stop();
    ExpectCountersPerThread(*s.server, worker_threads);
    // The job's counters are summed over the I/O threads like the switch's.
    auto info = s.server->GetJob(job->job_id);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->counters.received, s.server->counters().core.datagrams_received);
    EXPECT_EQ(info->counters.wrong_io_thread, 0u);
    uint64_t by_rank = 0;
    for (const auto& w : info->workers) by_rank += w.received;
    EXPECT_EQ(by_rank, info->counters.received);
  }
}

TEST(IoThreadsSessionTest, NewSessionWithAnotherThreadCountMovesTheSlots) {
  Switch s = StartSwitch(2);
  // Session 1: 2 ranks x 1 worker thread: I/O thread 0 owns every slot.
  auto first = Join(*s.server, *s.fabric, 2, FastOptions(1), 0, "", 6000);
  ASSERT_EQ(first.size(), 2u);
  // One worker thread: io(0) = 0 for every T, so the grant lists I/O thread 0's port only.
  AllReduceAndVerify(Ptrs(first), 2000, 1);
  const auto before = s.server->io_thread_counters(1).core.datagrams_received;
  EXPECT_EQ(before, 0u);
  const auto runtime1 = s.server->jobs()->reference().runtime;
  first.clear();
  // Session 2 (rank 0 registers again): 2 ranks x 4 worker threads over other ports: both
  // I/O threads own slots now, and the session has fresh aggregation state.
  auto second = Join(*s.server, *s.fabric, 2, FastOptions(4), 0, "", 6100);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_NE(s.server->jobs()->reference().runtime, runtime1);
  const auto& ref = s.server->jobs()->reference();
  EXPECT_EQ(ref.layout.worker_threads(), 4u);
  EXPECT_EQ(ref.io_slot_begin[1], 16u);  // worker threads 2, 3 (8 slots each) at I/O thread 1
  AllReduceAndVerify(Ptrs(second), 64 * 8 * 4 * 2, 2);
  EXPECT_GT(s.server->io_thread_counters(1).core.datagrams_received, 0u);
  EXPECT_EQ(s.server->counters().core.wrong_io_thread, 0u);
  // Back to one thread per worker: I/O thread 0 owns everything again.
  second.clear();
  auto third = Join(*s.server, *s.fabric, 2, FastOptions(1), 0, "", 6200);
  AllReduceAndVerify(Ptrs(third), 1500, 3);
  EXPECT_EQ(s.server->jobs()->reference().layout.worker_threads(), 1u);
  EXPECT_EQ(s.server->counters().core.wrong_io_thread, 0u);
  // InspectSlots answers through the owning threads: every slot of the window comes back.
  auto slots = s.server->InspectSlots(0, 0, 32);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 32u);
  for (uint32_t k = 0; k < 32; ++k) EXPECT_EQ((*slots)[k].slot, k);
  third.clear();
  s.server->Stop();
}

// Two cores of one switch (I/O threads 0 and 1) on one table, without threads: a datagram
// whose slot the receiving thread does not own is dropped and counted, never aggregated.
TEST(IoThreadsCoreTest, MisroutedDatagramIsDroppedAndCounted) {
  using dataplane::testing::Encode;
  using dataplane::testing::OwnedRx;
  using dataplane::testing::Request;
  SwitchConfig config;
  config.num_slots = 64;
  config.io_threads = 2;
  SwitchCore core0 = SwitchCore::Create(config).value();
  SwitchCore core1 = SwitchCore::CreateForIoThread(config, core0.jobs_ptr(), 1).value();
  EXPECT_FALSE(SwitchCore::CreateForIoThread(config, core0.jobs_ptr(), 2).ok());
  control::WorkerRegistration reg;
  reg.rank = 0;
  reg.num_workers = 1;
  reg.ipv4 = 0x0A000001;
  reg.udp_ports = {5000, 5001};
  reg.protocol_version = control::kClientProtocolVersion;
  reg.num_worker_threads = 2;
  reg.window_packets = 8;  // worker thread 1 uses slots [4, 8): I/O thread 1's
  auto table = JobTable::RegisterSessionWorker(core0.jobs(), reg).value();
  core0.AdoptJobs(table);
  core1.AdoptJobs(table);
  EXPECT_EQ(table->reference().io_slot_begin[1], 4u);

  OwnedRx wrong{Encode(Request{.slot = 5, .values = std::vector<int32_t>(64, 7)}),
                {0x0A000001, 5001}};
  dataplane::Outbox out;
  core0.ProcessBurst(std::vector<transport::RxDatagram>{wrong.rx()}, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(core0.counters().wrong_io_thread, 1u);
  EXPECT_EQ(core0.counters().multicast_rounds, 0u);
  EXPECT_EQ(table->reference().runtime->Counters().wrong_io_thread, 1u);
  // Nothing of it reached the aggregator: the owner then completes the round with 7s only.
  auto slot5 = table->reference().runtime->aggregator.Inspect(5, 0);
  EXPECT_EQ(slot5.counter, 0u);
  EXPECT_EQ(slot5.bitmap[0], 0u);
  core1.ProcessBurst(std::vector<transport::RxDatagram>{wrong.rx()}, out);
  ASSERT_EQ(out.size(), 1u);  // one worker: the round completes at once
  EXPECT_EQ(core1.counters().multicast_rounds, 1u);
  EXPECT_EQ(core1.counters().wrong_io_thread, 0u);
  // And the other way round: slot 1 belongs to I/O thread 0.
  OwnedRx low{Encode(Request{.slot = 1, .values = std::vector<int32_t>(64, 1)}),
              {0x0A000001, 5000}};
  core1.ProcessBurst(std::vector<transport::RxDatagram>{low.rx()}, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(core1.counters().wrong_io_thread, 1u);
  // Counters: each core counts its own; the job's sum over both.
  const control::JobCounters jc = table->reference().runtime->Counters();
  EXPECT_EQ(jc.received, 3u);
  EXPECT_EQ(jc.wrong_io_thread, 2u);
  EXPECT_EQ(jc.multicast_rounds, 1u);
  EXPECT_EQ(table->reference().runtime->RankReceived(0), 3u);
}

TEST(IoThreadsConfigTest, IoThreadsOutOfRangeAndChannelCountRefused) {
  SwitchConfig sc;
  sc.io_threads = 0;
  EXPECT_NE(sc.Validate().message().find("io_threads"), std::string::npos);
  sc.io_threads = 17;
  EXPECT_NE(sc.Validate().message().find("io_threads"), std::string::npos);
  sc.io_threads = 2;
  auto fabric = transport::LoopbackFabric::Create().value();
  auto one = SwitchServer::Create(sc, fabric->CreateChannel({0x7F000001, 1}).value());
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("io_threads=2"), std::string::npos);
}

}  // namespace
}  // namespace switchml
