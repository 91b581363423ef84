// Context::Create: opens the data sockets, registers with the switch through the controller
// (docs/protocol.md#session-sequence) and starts the worker threads.
#include <memory>
#include <string>
#include <vector>

#include "client/context_create.h"
#include "client/context_impl.h"
#include "rendezvous/rendezvous.h"
#include "transport/udp_channel.h"

namespace switchml {

StatusOr<std::unique_ptr<Context>> Context::Create(const Options& given) {
  std::vector<uint16_t> ports;  // ephemeral
  return client::CreateContextOnPorts(given, ports);
}

StatusOr<std::unique_ptr<Context>> client::CreateContextOnPorts(const Options& given,
                                                                std::vector<uint16_t>& ports) {
  SWITCHML_RETURN_IF_ERROR(given.Validate());
  SWITCHML_ASSIGN_OR_RETURN(const Options options, given.Resolved());  // deprecated fields folded in
  SWITCHML_ASSIGN_OR_RETURN(transport::Endpoint controller,
                            transport::ParseEndpoint(options.controller_address, 50099));
  uint32_t bind_ip = 0;
  if (!options.bind_ip.empty()) {
    SWITCHML_ASSIGN_OR_RETURN(transport::Endpoint b, transport::ParseEndpoint(options.bind_ip, 0));
    bind_ip = b.ipv4;
  }
  uint32_t advertise_ip = 0;
  if (!options.advertise_ip.empty()) {
    SWITCHML_ASSIGN_OR_RETURN(transport::Endpoint b, transport::ParseEndpoint(options.advertise_ip, 0));
    advertise_ip = b.ipv4;
  } else if (bind_ip != 0) {
    advertise_ip = bind_ip;
  } else {
    SWITCHML_ASSIGN_OR_RETURN(advertise_ip, transport::LocalIpv4For(controller));
  }

  // One socket per worker thread; each thread's port is registered so the switch can send
  // each thread its own results.
  std::vector<std::unique_ptr<transport::Channel>> channels;
  control::WorkerRegistration reg;
  reg.rank = options.rank;
  reg.num_workers = options.num_workers;
  reg.ipv4 = advertise_ip;
  // What every worker of the job must share: the controller refuses a registration that
  // differs from the first one, naming the field (instead of wrong sums or a bare timeout).
  reg.protocol_version = control::kClientProtocolVersion;
  reg.num_worker_threads = options.num_worker_threads;
  reg.window_packets = options.window_packets;
  reg.elements_per_packet = options.elements_per_packet;
  const bool fixed = ports.size() == options.num_worker_threads;
  for (uint32_t t = 0; t < options.num_worker_threads; ++t) {
    transport::UdpChannelOptions uo;
    uo.local = transport::Endpoint{bind_ip, fixed ? ports[t] : uint16_t{0}};
    uo.gso = uo.gro = options.udp_offload;
    uo.busy_poll = options.busy_poll;
    auto ch = transport::UdpChannel::Create(uo);
    if (!ch.ok() && fixed && ports[t] != 0) {  // the port is gone: an ephemeral one
      uo.local.port = 0;
      ch = transport::UdpChannel::Create(uo);
    }
    if (!ch.ok()) return ch.status();
    reg.udp_ports.push_back((*ch)->local_endpoint().port);
    channels.push_back(std::move(*ch));
  }
  ports = reg.udp_ports;

  // One path for job 0 (the reference session) and the JobService's jobs. ConnectRendezvous
  // also refuses a half-set job identity (as Options::Validate does), so that it can never fall
  // back to the reference session, which a rank 0 would reset.
  SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<rendezvous::Rendezvous> rdv,
                            rendezvous::ConnectRendezvous(options.controller_address,
                                                          options.job_id, options.job_token,
                                                          options.rpc_timeout, options.tls));
  SWITCHML_ASSIGN_OR_RETURN(const control::JobWorkerGrant grant, rdv->Join(reg));
  // The job's packet size (0 = any: job 0's workers agree on theirs at registration).
  if (grant.elements_per_packet != 0 && options.elements_per_packet > grant.elements_per_packet) {
    return FailedPreconditionError(
        "elements_per_packet=" + std::to_string(options.elements_per_packet) + " exceeds job " +
        std::to_string(grant.job_id) + "'s elements_per_packet " +
        std::to_string(grant.elements_per_packet) + " (set when the job was created)");
  }
  const control::SwitchInfo& info = grant.switch_info;
  if (info.max_workers != 0 && options.num_workers > info.max_workers) {
    return FailedPreconditionError("num_workers=" + std::to_string(options.num_workers) +
                                   " exceeds the switch's maximum of " + std::to_string(info.max_workers));
  }
  SWITCHML_ASSIGN_OR_RETURN(client::ContextImpl::Routes routes,
                            client::ContextImpl::RoutesFor(options, info, controller.ipv4));
  return client::ContextImpl::CreateWithChannels(options, std::move(channels), std::move(routes),
                                                 rdv->failure_explainer());
}

}  // namespace switchml
