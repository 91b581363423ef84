// testing/loopback_cluster.h — a whole SwitchML job in one process, for tests: a real
// SwitchServer and n Contexts (one per rank) joined by the in-process loopback fabric
// (transport/loopback.h) instead of sockets, without the controller or other processes.
//
//   Options o;  o.num_worker_threads = 2;  o.window_packets = 32;  o.elements_per_packet = 64;
//   transport::FaultOptions f;  f.loss = 0.01;  f.seed = 3;        // fabric faults (optional)
//   dataplane::SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
//   sc.ingress_drop_probability = 0.01;                          // switch drop simulator
//   auto c = LoopbackCluster::Create(/*num_workers=*/3, o, f, sc).value();
//   c->ctx(1).AllReduce(in, out, n, DataType::kInt32);   // each rank from its own thread
//
// The switch listens at kSwitchEndpoint (127.0.0.1:48864 on the fabric; with
// switch_config.io_threads = T > 1, I/O thread i at port 48864 + i, and each worker thread
// sends to the port its registration grant names); worker r's thread t
// sends from 10.0.0.(1+r):(6000+t). The workers are registered with the switch's reference
// session (job 0: SwitchServer::RegisterJobWorker, per-thread ports), exactly as Context::Create would
// through the controller. Contexts are built with client::ContextImpl::CreateWithChannels from
// `options` with rank and num_workers filled in.
//
// Destruction order: contexts first (their jobs end with CANCELLED), then the switch, then
// the fabric.
//
// With `shards` = K > 1 the job is served by K SwitchServers on the fabric (shard s at
// 127.0.0.(1+s), port 48864 (+ i for I/O thread i)), each holding one service job as shard s
// of K; every worker registers on every shard and each worker thread sends to the shard that
// serves it (what a standalone controller arranges, controller/remote_switches.h).
//
// Two-level (CreateTwoLevel): `racks` leaf switches (leaf l at 127.0.0.(1+l)) under one parent
// switch at kParentIpv4, as docs/scaling.md "Two-level aggregation" places them: the parent
// job has one worker per leaf (control::LeafRegistration), each leaf a job of its `per_rack`
// workers with the parent as its uplink; worker g = l * per_rack + i is rank i of leaf l and
// aggregates as rank g of racks * per_rack (what it quantizes with). server(l) is leaf l's,
// parent() the parent's. With `shards` = K > 1 every level is K shards of the workers' layout
// (what a standalone controller places): rack l's leaf shard s at 127.0.0.(1 + l*K + s) is
// server(l*K + s) and a worker (rank l) of parent shard s at kParentIpv4 + s, parent(s).
//
// Thread-safety: ctx(r) may be used from any thread (Context's own rules); the
// accessors themselves are not synchronised with DestroyContext.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "dataplane/switch_config.h"
#include "dataplane/switch_host.h"
#include "dataplane/switch_server.h"
#include "switchml/context.h"
#include "switchml/options.h"
#include "switchml/status.h"
#include "transport/loopback.h"

namespace switchml::testing {

class LoopbackCluster {
 public:
  static constexpr transport::Endpoint kSwitchEndpoint{0x7F000001, 48864};

  // The switch configuration used when none is given: defaults with 512 slots (enough for any
  // window a test uses, and small).
  static dataplane::SwitchConfig DefaultSwitchConfig();

  // Builds the fabric (with `faults` on every datagram), the switch (`switch_config`, which
  // carries the drop simulator and the late-duplicate guard) and `num_workers` contexts.
  // Errors: INVALID_ARGUMENT naming the bad field (num_workers 0, options that fail
  // Options::Validate for some rank, fault probabilities, switch config), or whatever the
  // switch returns for the registration (e.g. a window beyond its slots).
  static StatusOr<std::unique_ptr<LoopbackCluster>> Create(
      uint32_t num_workers, const Options& options, const transport::FaultOptions& faults = {},
      const dataplane::SwitchConfig& switch_config = DefaultSwitchConfig(), uint32_t shards = 1);

  static constexpr uint32_t kParentIpv4 = 0x7F0000C8;  // 127.0.0.200
  // Two levels: `racks` leaves x `per_rack` workers under one parent; `switch_config` for
  // every switch. Errors as Create, and racks or per_rack 0.
  static StatusOr<std::unique_ptr<LoopbackCluster>> CreateTwoLevel(
      uint32_t racks, uint32_t per_rack, const Options& options,
      const transport::FaultOptions& faults = {},
      const dataplane::SwitchConfig& switch_config = DefaultSwitchConfig(), uint32_t shards = 1);

  ~LoopbackCluster();
  LoopbackCluster(const LoopbackCluster&) = delete;
  LoopbackCluster& operator=(const LoopbackCluster&) = delete;

  // Rank r's context (r < size(); it must not have been destroyed).
  Context& ctx(uint32_t r) { return *contexts_[r]; }
  // Destroys rank r's context now (its queued and running jobs fail with CANCELLED).
  void DestroyContext(uint32_t r) { contexts_[r].reset(); }
  uint32_t size() const { return uint32_t(contexts_.size()); }

  dataplane::SwitchServer& server() { return *servers_[0]; }  // shard 0's with shards > 1
  dataplane::SwitchServer& server(uint32_t shard) { return *servers_[shard]; }
  uint32_t shards() const { return uint32_t(servers_.size()); }
  // The parent switch of a two-level cluster (nullptr otherwise).
  dataplane::SwitchServer* parent(uint32_t shard = 0) {
    return shard < parents_.size() ? parents_[shard] : nullptr;
  }
  transport::LoopbackFabric& fabric() { return *fabric_; }

 private:
  LoopbackCluster() = default;
  // Starts a switch on the fabric at `ipv4` (I/O thread i at kSwitchEndpoint's port + i).
  StatusOr<dataplane::SwitchServer*> AddSwitch(uint32_t ipv4,
                                               const dataplane::SwitchConfig& switch_config);
  // A job on one switch: the server, the job's id there (0: the reference session) and token,
  // and the switch's address.
  struct JobAt {
    dataplane::SwitchServer* server;
    uint32_t job_id;
    std::string token;
    uint32_t switch_ipv4;
  };
  // Builds a worker's channels at reg.ipv4 (ports 6000 + t for `o`'s threads), registers `reg`
  // with them into every job of `jobs` (one per shard) and adds the context for `o`, its routes
  // from the answers merged as a standalone controller merges them.
  Status AddWorker(const Options& o, control::WorkerRegistration reg,
                   const std::vector<JobAt>& jobs);

  std::unique_ptr<transport::LoopbackFabric> fabric_;
  std::vector<std::unique_ptr<dataplane::SwitchHost>> hosts_;
  std::vector<dataplane::SwitchServer*> servers_;  // hosts_'s (the leaves, two-level)
  std::vector<dataplane::SwitchServer*> parents_;  // two-level: the parent's shards
  std::vector<std::unique_ptr<Context>> contexts_;
};

// Runs `body(rank)` on one thread per rank, ranks 0..n-1, and joins them: every rank's calls
// of a test at once, as separate processes would make them.
template <typename F>
void OnEveryRank(uint32_t n, F body) {
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) threads.emplace_back([&, r] { body(r); });
  for (auto& t : threads) t.join();
}

}  // namespace switchml::testing
