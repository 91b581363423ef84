#include "testing/loopback_cluster.h"

#include <algorithm>
#include <string>
#include <utility>

#include "client/context_impl.h"
#include "dataplane/switch_control.h"

namespace switchml::testing {

dataplane::SwitchConfig LoopbackCluster::DefaultSwitchConfig() {
  dataplane::SwitchConfig sc;
  sc.num_slots = 512;
  return sc;
}

StatusOr<std::unique_ptr<LoopbackCluster>> LoopbackCluster::Create(
    uint32_t num_workers, const Options& options, const transport::FaultOptions& faults,
    const dataplane::SwitchConfig& switch_config) {
  if (num_workers == 0) return InvalidArgumentError("num_workers must be >= 1, got 0");
  std::unique_ptr<LoopbackCluster> c(new LoopbackCluster());
  transport::LoopbackOptions lo;
  lo.faults = faults;
  SWITCHML_ASSIGN_OR_RETURN(c->fabric_, transport::LoopbackFabric::Create(lo));
  // I/O thread i listens at kSwitchEndpoint's port + i (as `switchml switch --io-threads`).
  std::vector<std::unique_ptr<transport::Channel>> switch_channels;
  for (uint32_t i = 0; i < std::max<uint32_t>(switch_config.io_threads, 1); ++i) {
    SWITCHML_ASSIGN_OR_RETURN(
        auto ch, c->fabric_->CreateChannel({kSwitchEndpoint.ipv4, uint16_t(kSwitchEndpoint.port + i)}));
    switch_channels.push_back(std::move(ch));
  }
  SWITCHML_ASSIGN_OR_RETURN(c->server_,
                            dataplane::SwitchServer::Create(switch_config, std::move(switch_channels)));
  SWITCHML_RETURN_IF_ERROR(c->server_->Start());
  for (uint32_t r = 0; r < num_workers; ++r) {
    Options o = options;
    o.rank = r;
    o.num_workers = num_workers;
    if (Status s = o.Validate(); !s.ok()) return s.WithContext("options of rank " + std::to_string(r));
    dataplane::WorkerRegistration reg;
    reg.rank = r;
    reg.num_workers = num_workers;
    reg.ipv4 = 0x0A000001 + r;
    if (switch_config.io_threads > 1) {
      // What Context::Create registers: the switch splits the slots among its I/O threads by
      // these (with one I/O thread they change nothing, and are left out as before).
      reg.protocol_version = dataplane::kClientProtocolVersion;
      reg.num_worker_threads = o.num_worker_threads;
      reg.window_packets = o.window_packets;
      reg.elements_per_packet = o.elements_per_packet;
    }
    std::vector<std::unique_ptr<transport::Channel>> channels;
    for (uint32_t t = 0; t < o.num_worker_threads; ++t) {
      const uint16_t port = uint16_t(6000 + t);
      SWITCHML_ASSIGN_OR_RETURN(auto channel, c->fabric_->CreateChannel({reg.ipv4, port}));
      reg.udp_ports.push_back(port);
      channels.push_back(std::move(channel));
    }
    dataplane::JobRegistration job0;  // the reference session: job 0, no token
    job0.job_id = dataplane::kReferenceJobId;
    job0.worker = reg;
    SWITCHML_ASSIGN_OR_RETURN(dataplane::JobWorkerGrant grant, c->server_->RegisterJobWorker(job0));
    std::vector<transport::Endpoint> switch_endpoints{kSwitchEndpoint};
    if (!grant.switch_info.thread_udp_ports.empty()) {
      switch_endpoints.clear();
      for (uint16_t p : grant.switch_info.thread_udp_ports) {
        switch_endpoints.push_back({kSwitchEndpoint.ipv4, p});
      }
    }
    c->contexts_.push_back(
        client::ContextImpl::CreateWithChannels(o, std::move(channels), std::move(switch_endpoints)));
  }
  return c;
}

LoopbackCluster::~LoopbackCluster() {
  contexts_.clear();
  if (server_) server_->Stop();
}

}  // namespace switchml::testing
