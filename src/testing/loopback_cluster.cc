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
    // The switch as `switchml switch` assembles it (dataplane::SwitchHost), on the fabric.
    dataplane::SwitchHostConfig hc;
    hc.switch_config = switch_config;
    hc.io = dataplane::SwitchHostConfig::Io::kFactory;
    hc.bind = {switch_config.advertised_ipv4, kSwitchEndpoint.port};  // as configured
    transport::LoopbackFabric* fabric = c->fabric_.get();
    hc.channel_factory = [fabric, ip = shard_ip(s)](uint32_t i) {
      return fabric->CreateChannel({ip, uint16_t(kSwitchEndpoint.port + i)});
    };
    SWITCHML_ASSIGN_OR_RETURN(auto host, dataplane::SwitchHost::Create(std::move(hc)));
    SWITCHML_RETURN_IF_ERROR(host->Start());
    c->servers_.push_back(host->server());
    c->hosts_.push_back(std::move(host));
  }
  // Several shards: one service job per shard (job 0 serves a single switch only).
  const std::string token = "loopback-cluster-token";
  constexpr uint64_t kShardGroup = 1;  // one job; no controller ever looks for it
  std::vector<uint32_t> job_ids(shards, control::kReferenceJobId);
  if (shards > 1) {
    for (uint32_t s = 0; s < shards; ++s) {
      control::JobSpec spec;
      spec.num_workers = num_workers;
      // Enough for every shard to hold its threads' windows.
      spec.num_slots = control::JobLayout::SlotsFor(shards, options.num_worker_threads,
                                                    options.window_packets);
      spec.elements_per_packet = options.elements_per_packet;
      spec.token = token;
      spec.switches = shards;
      SWITCHML_ASSIGN_OR_RETURN(
          control::JobInfo job,
          c->servers_[s]->CreateJobShard(
              spec, {.shard = s, .num_shards = shards, .shard_group = kShardGroup}));
      job_ids[s] = job.job_id;
    }
  }
  for (uint32_t r = 0; r < num_workers; ++r) {
    Options o = options;
    o.rank = r;
    o.num_workers = num_workers;
    if (Status s = o.Validate(); !s.ok()) return s.WithContext("options of rank " + std::to_string(r));
    control::WorkerRegistration reg;
    reg.rank = r;
    reg.num_workers = num_workers;
    reg.ipv4 = 0x0A000001 + r;
    // What Context::Create registers: the job's layout comes from these.
    reg.protocol_version = control::kClientProtocolVersion;
    reg.num_worker_threads = o.num_worker_threads;
    reg.window_packets = o.window_packets;
    reg.elements_per_packet = o.elements_per_packet;
    std::vector<std::unique_ptr<transport::Channel>> channels;
    for (uint32_t t = 0; t < o.num_worker_threads; ++t) {
      const uint16_t port = uint16_t(6000 + t);
      SWITCHML_ASSIGN_OR_RETURN(auto channel, c->fabric_->CreateChannel({reg.ipv4, port}));
      reg.udp_ports.push_back(port);
      channels.push_back(std::move(channel));
    }
    std::vector<control::JobWorkerGrant> grants;
    for (uint32_t s = 0; s < shards; ++s) {
      control::JobRegistration jr;  // shards == 1: the reference session, job 0, no token
      jr.job_id = job_ids[s];
      if (shards > 1) jr.token = token;
      jr.worker = reg;
      SWITCHML_ASSIGN_OR_RETURN(control::JobWorkerGrant grant, c->servers_[s]->RegisterJobWorker(jr));
      grants.push_back(std::move(grant));
    }
    // The answers merged as a standalone controller merges them (shard s at shard_ip(s)),
    // turned into routes as Context::Create does.
    std::vector<control::SwitchInfo> answers;
    for (uint32_t s = 0; s < shards; ++s) {
      answers.push_back(grants[s].switch_info);
      answers.back().ipv4 = shard_ip(s);
    }
    SWITCHML_ASSIGN_OR_RETURN(control::SwitchInfo info, control::MergeShardAnswers(answers));
    SWITCHML_ASSIGN_OR_RETURN(client::ContextImpl::Routes routes,
                              client::ContextImpl::RoutesFor(o, info, kSwitchEndpoint.ipv4));
    c->contexts_.push_back(
        client::ContextImpl::CreateWithChannels(o, std::move(channels), std::move(routes)));
  }
  return c;
}

LoopbackCluster::~LoopbackCluster() {
  contexts_.clear();
  for (auto& h : hosts_) h->Stop();
}

}  // namespace switchml::testing
