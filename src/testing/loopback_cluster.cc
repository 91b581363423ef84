#include "testing/loopback_cluster.h"

#include <algorithm>
#include <string>
#include <utility>

#include "client/context_impl.h"
#include "control/job_layout.h"
#include "control/switch_control.h"

namespace switchml::testing {

dataplane::SwitchConfig LoopbackCluster::DefaultSwitchConfig() {
  dataplane::SwitchConfig sc;
  sc.num_slots = 512;
  return sc;
}

StatusOr<dataplane::SwitchServer*> LoopbackCluster::AddSwitch(
    uint32_t ipv4, const dataplane::SwitchConfig& switch_config) {
  // The switch as `switchml switch` assembles it (dataplane::SwitchHost), on the fabric.
  dataplane::SwitchHostConfig hc;
  hc.switch_config = switch_config;
  hc.io = dataplane::SwitchHostConfig::Io::kFactory;
  hc.bind = {switch_config.advertised_ipv4, kSwitchEndpoint.port};  // as configured
  transport::LoopbackFabric* fabric = fabric_.get();
  hc.channel_factory = [fabric, ipv4](uint32_t i) {
    return fabric->CreateChannel({ipv4, uint16_t(kSwitchEndpoint.port + i)});
  };
  SWITCHML_ASSIGN_OR_RETURN(auto host, dataplane::SwitchHost::Create(std::move(hc)));
  SWITCHML_RETURN_IF_ERROR(host->Start());
  dataplane::SwitchServer* server = host->server();
  hosts_.push_back(std::move(host));
  return server;
}

Status LoopbackCluster::AddWorker(const Options& o, control::WorkerRegistration reg,
                                  const std::vector<JobAt>& jobs) {
  // What Context::Create registers: the job's layout comes from these.
  reg.protocol_version = control::kClientProtocolVersion;
  reg.num_worker_threads = o.num_worker_threads;
  reg.window_packets = o.window_packets;
  reg.elements_per_packet = o.elements_per_packet;
  std::vector<std::unique_ptr<transport::Channel>> channels;
  for (uint32_t t = 0; t < o.num_worker_threads; ++t) {
    const uint16_t port = uint16_t(6000 + t);
    SWITCHML_ASSIGN_OR_RETURN(auto channel, fabric_->CreateChannel({reg.ipv4, port}));
    reg.udp_ports.push_back(port);
    channels.push_back(std::move(channel));
  }
  std::vector<control::SwitchInfo> answers;
  for (const JobAt& j : jobs) {
    control::JobRegistration jr;  // job 0: the reference session, no token
    jr.job_id = j.job_id;
    jr.token = j.token;
    jr.worker = reg;
    SWITCHML_ASSIGN_OR_RETURN(control::JobWorkerGrant grant, j.server->RegisterJobWorker(jr));
    answers.push_back(grant.switch_info);
    answers.back().ipv4 = j.switch_ipv4;
  }
  // The answers merged as a standalone controller merges them, turned into routes as
  // Context::Create does.
  SWITCHML_ASSIGN_OR_RETURN(control::SwitchInfo info, control::MergeShardAnswers(answers));
  SWITCHML_ASSIGN_OR_RETURN(client::ContextImpl::Routes routes,
                            client::ContextImpl::RoutesFor(o, info, kSwitchEndpoint.ipv4));
  contexts_.push_back(
      client::ContextImpl::CreateWithChannels(o, std::move(channels), std::move(routes)));
  return OkStatus();
}

namespace {
// Options for rank `rank` of `num_workers`, validated.
StatusOr<Options> RankOptions(const Options& options, uint32_t rank, uint32_t num_workers) {
  Options o = options;
  o.rank = rank;
  o.num_workers = num_workers;
  if (Status s = o.Validate(); !s.ok()) return s.WithContext("options of rank " + std::to_string(rank));
  return o;
}
constexpr char kToken[] = "loopback-cluster-token";
}  // namespace

StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::Create(
    uint32_t num_workers, const Options& options, const transport::FaultOptions& faults,
    const dataplane::SwitchConfig& switch_config, uint32_t shards) {
  if (num_workers == 0) return InvalidArgumentError("num_workers must be >= 1, got 0");
  if (shards == 0) return InvalidArgumentError("shards must be >= 1, got 0");
  std::unique_ptr<LoopbackCluster> c(new LoopbackCluster());
  transport::LoopbackOptions lo;
  lo.faults = faults;
  SWITCHML_ASSIGN_OR_RETURN(c->fabric_, transport::LoopbackFabric::Create(lo));
  // Shard s listens at 127.0.0.(1+s); its I/O thread i at kSwitchEndpoint's port + i (as
  // `switchml switch --io-threads`).
  auto shard_ip = [](uint32_t s) { return kSwitchEndpoint.ipv4 + s; };
  for (uint32_t s = 0; s < shards; ++s) {
    SWITCHML_ASSIGN_OR_RETURN(dataplane::SwitchServer * server,
                              c->AddSwitch(shard_ip(s), switch_config));
    c->servers_.push_back(server);
  }
  // One shard: the reference session (job 0). Several: one service job per shard (job 0
  // serves a single switch only).
  std::vector<JobAt> jobs;
  for (uint32_t s = 0; s < shards; ++s) {
    jobs.push_back({c->servers_[s], control::kReferenceJobId, "", shard_ip(s)});
  }
  constexpr uint64_t kShardGroup = 1;  // one job; no controller ever looks for it
  if (shards > 1) {
    for (uint32_t s = 0; s < shards; ++s) {
      control::JobSpec spec;
      spec.num_workers = num_workers;
      // Enough for every shard to hold its threads' windows.
      spec.num_slots = control::JobLayout::SlotsFor(shards, options.num_worker_threads,
                                                    options.window_packets);
      spec.elements_per_packet = options.elements_per_packet;
      spec.token = kToken;
      spec.switches = shards;
      SWITCHML_ASSIGN_OR_RETURN(
          control::JobInfo job,
          c->servers_[s]->CreateJobShard(
              spec, {.shard = s, .num_shards = shards, .shard_group = kShardGroup}));
      jobs[s].job_id = job.job_id;
      jobs[s].token = kToken;
    }
  }
  for (uint32_t r = 0; r < num_workers; ++r) {
    SWITCHML_ASSIGN_OR_RETURN(Options o, RankOptions(options, r, num_workers));
    control::WorkerRegistration reg;
    reg.rank = r;
    reg.num_workers = num_workers;
    reg.ipv4 = 0x0A000001 + r;
    SWITCHML_RETURN_IF_ERROR(c->AddWorker(o, std::move(reg), jobs));
  }
  return c;
}

StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::CreateTwoLevel(
    uint32_t racks, uint32_t per_rack, const Options& options,
    const transport::FaultOptions& faults, const dataplane::SwitchConfig& switch_config,
    uint32_t shards) {
  if (racks == 0) return InvalidArgumentError("racks must be >= 1, got 0");
  if (per_rack == 0) return InvalidArgumentError("per_rack must be >= 1, got 0");
  if (shards == 0) return InvalidArgumentError("shards must be >= 1, got 0");
  std::unique_ptr<LoopbackCluster> c(new LoopbackCluster());
  transport::LoopbackOptions lo;
  lo.faults = faults;
  SWITCHML_ASSIGN_OR_RETURN(c->fabric_, transport::LoopbackFabric::Create(lo));
  const uint32_t job_slots = control::JobLayout::SlotsFor(shards, options.num_worker_threads,
                                                          options.window_packets);
  // Every level has the workers' layout; every switch here has the same I/O threads, I/O
  // thread i at port kSwitchEndpoint.port + i, so a leaf's port for each worker thread (what
  // it answers a worker with) follows from the layout.
  SWITCHML_ASSIGN_OR_RETURN(
      control::JobLayout layout,
      control::JobLayout::Make({.job_slots = job_slots,
                                .num_shards = shards,
                                .worker_threads = options.num_worker_threads,
                                .window_packets = options.window_packets}));
  const uint32_t io_threads = std::max<uint32_t>(1, switch_config.io_threads);
  std::vector<uint16_t> io_ports, thread_ports;
  for (uint32_t i = 0; i < io_threads; ++i) io_ports.push_back(uint16_t(kSwitchEndpoint.port + i));
  for (uint32_t t = 0; t < layout.worker_threads(); ++t) {
    thread_ports.push_back(io_ports[layout.IoThreadOf(t, io_threads)]);
  }
  auto leaf_ip = [shards](uint32_t l, uint32_t s) { return kSwitchEndpoint.ipv4 + l * shards + s; };
  constexpr uint64_t kShardGroup = 1;  // one job; no controller ever looks for it
  auto assignment = [&](uint32_t s) {
    control::ShardAssignment a;
    if (shards > 1) a = {.shard = s, .num_shards = shards, .shard_group = kShardGroup};
    return a;
  };
  control::JobSpec parent_spec;
  parent_spec.num_workers = racks;
  parent_spec.num_slots = job_slots;
  parent_spec.elements_per_packet = options.elements_per_packet;
  parent_spec.token = kToken;
  parent_spec.switches = shards;
  // Parent shard s: a job of one worker per rack (leaf shard s of each rack).
  std::vector<uint32_t> parent_job(shards);
  for (uint32_t s = 0; s < shards; ++s) {
    SWITCHML_ASSIGN_OR_RETURN(dataplane::SwitchServer * p,
                              c->AddSwitch(kParentIpv4 + s, switch_config));
    c->parents_.push_back(p);
    SWITCHML_ASSIGN_OR_RETURN(control::JobInfo job,
                              shards > 1 ? p->CreateJobShard(parent_spec, assignment(s))
                                         : p->CreateJob(parent_spec));
    parent_job[s] = job.job_id;
  }
  const uint32_t total = racks * per_rack;
  for (uint32_t l = 0; l < racks; ++l) {
    std::vector<JobAt> rack;  // leaf shard s of this rack
    for (uint32_t s = 0; s < shards; ++s) {
      SWITCHML_ASSIGN_OR_RETURN(dataplane::SwitchServer * leaf,
                                c->AddSwitch(leaf_ip(l, s), switch_config));
      c->servers_.push_back(leaf);
      control::JobSpec spec = parent_spec;
      spec.num_workers = per_rack;
      control::ShardAssignment a = assignment(s);
      a.uplink = {.parent_ipv4 = kParentIpv4 + s,
                  .parent_ports = io_ports,
                  .parent_job_id = parent_job[s],
                  .leaf = l,
                  .total_workers = total};
      SWITCHML_ASSIGN_OR_RETURN(control::JobInfo job, leaf->CreateJobShard(spec, a));
      rack.push_back({leaf, job.job_id, kToken, leaf_ip(l, s)});
      std::vector<uint16_t> ours(thread_ports.size(), 0);
      const control::ThreadRange threads = layout.ShardThreads(s);
      for (uint32_t t = threads.begin; t < threads.end; ++t) ours[t] = thread_ports[t];
      control::JobRegistration up;
      up.job_id = parent_job[s];
      up.token = kToken;
      up.worker = control::LeafRegistration(l, racks, leaf_ip(l, s), ours, io_ports[0], layout,
                                            options.elements_per_packet);
      SWITCHML_RETURN_IF_ERROR(c->parents_[s]->RegisterJobWorker(up).status().WithContext(
          "registering leaf " + std::to_string(l) + " shard " + std::to_string(s) +
          " at the parent"));
    }
    for (uint32_t i = 0; i < per_rack; ++i) {
      const uint32_t g = l * per_rack + i;
      SWITCHML_ASSIGN_OR_RETURN(Options o, RankOptions(options, g, total));
      control::WorkerRegistration reg;
      reg.rank = i;
      reg.num_workers = per_rack;
      reg.ipv4 = 0x0A000001 + g;
      SWITCHML_RETURN_IF_ERROR(c->AddWorker(o, std::move(reg), rack));
    }
  }
  return c;
}

LoopbackCluster::~LoopbackCluster() {
  contexts_.clear();
  for (auto& h : hosts_) h->Stop();
}

}  // namespace switchml::testing
