// Context::Create: opens the data sockets, registers with the switch through the controller
// (docs/protocol.md#session-sequence) and starts the worker threads.
#include <algorithm>
#include <chrono>
#include <string>

#include "client/context_impl.h"
#include "rendezvous/job_client.h"
#include "rendezvous/session_client.h"
#include "transport/udp_channel.h"

namespace switchml {

namespace {

// Joins job options.job_id through the JobService: token-checked registration, then the
// job's own barrier. Returns the switch's address with num_slots = the job's slots.
StatusOr<control::SwitchInfo> JoinJob(const Options& options,
                                         const control::WorkerRegistration& reg) {
  SWITCHML_ASSIGN_OR_RETURN(auto client, rendezvous::JobClient::Connect(
                                             options.controller_address, options.rpc_timeout));
  control::JobRegistration jr;
  jr.job_id = options.job_id;
  jr.token = options.job_token;
  jr.worker = reg;
  SWITCHML_ASSIGN_OR_RETURN(control::JobWorkerGrant grant,
                            rendezvous::JobBootstrap(*client, jr));
  if (options.elements_per_packet > grant.elements_per_packet) {
    return FailedPreconditionError(
        "elements_per_packet=" + std::to_string(options.elements_per_packet) + " exceeds job " +
        std::to_string(options.job_id) + "'s elements_per_packet " +
        std::to_string(grant.elements_per_packet) + " (set when the job was created)");
  }
  return grant.switch_info;
}

// For a job of the JobService: when a worker times out, asks the controller whether the job
// still exists, so that a job the switch tore down (idle timeout, deleted, another rank gone)
// says so instead of only "no result from switch".
client::ContextImpl::FailureExplainer JobFailureExplainer(const Options& options) {
  if (options.job_id == 0) return {};
  return [address = options.controller_address, job_id = options.job_id, token = options.job_token,
          deadline = std::min<std::chrono::milliseconds>(options.rpc_timeout, std::chrono::seconds(2))](
             const Status& s) -> std::string {
    if (s.code() != StatusCode::kDeadlineExceeded) return "";
    auto client = rendezvous::JobClient::Connect(address, deadline);
    if (!client.ok()) return "";
    auto info = (*client)->GetJob(job_id, token);
    if (!info.ok()) {
      // NOT_FOUND (the switch restarted or forgot it) and FAILED_PRECONDITION ("job J has
      // ended: <reason>") both explain the timeout; anything else says nothing about it.
      const StatusCode c = info.status().code();
      if (c != StatusCode::kNotFound && c != StatusCode::kFailedPrecondition) return "";
      return "; the controller says: " + info.status().message();
    }
    if (info->state != control::JobState::kEnded) return "";
    return "; job " + std::to_string(job_id) + " has ended: " + info->end_reason;
  };
}

}  // namespace

StatusOr<std::unique_ptr<Context>> Context::Create(const Options& given) {
  SWITCHML_RETURN_IF_ERROR(given.Validate());
  SWITCHML_ASSIGN_OR_RETURN(const Options options, given.Resolved());  // deprecated fields folded in
  // Also in Options::Validate; repeated here so a stale Validate cannot let a half-set job
  // identity fall back to the reference session (which a rank 0 would reset).
  if (options.job_id != 0 && options.job_token.empty()) {
    return InvalidArgumentError("job_token must be set when job_id is (job_id=" +
                                std::to_string(options.job_id) + ")");
  }
  if (options.job_id == 0 && !options.job_token.empty()) {
    return InvalidArgumentError("job_token is set but job_id is 0; give the job's id too");
  }
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
  for (uint32_t t = 0; t < options.num_worker_threads; ++t) {
    transport::UdpChannelOptions uo;
    uo.local = transport::Endpoint{bind_ip, 0};
    uo.gso = uo.gro = options.udp_offload;
    uo.busy_poll = options.busy_poll;
    SWITCHML_ASSIGN_OR_RETURN(auto ch, transport::UdpChannel::Create(uo));
    reg.udp_ports.push_back(ch->local_endpoint().port);
    channels.push_back(std::move(ch));
  }

  control::SwitchInfo info;
  if (options.job_id != 0) {
    SWITCHML_ASSIGN_OR_RETURN(info, JoinJob(options, reg));
  } else {
    SWITCHML_ASSIGN_OR_RETURN(auto session, rendezvous::SessionClient::Connect(
                                                options.controller_address, options.rpc_timeout));
    SWITCHML_ASSIGN_OR_RETURN(info, rendezvous::Bootstrap(*session, reg));
  }

  if (info.max_workers != 0 && options.num_workers > info.max_workers) {
    return FailedPreconditionError("num_workers=" + std::to_string(options.num_workers) +
                                   " exceeds the switch's maximum of " + std::to_string(info.max_workers));
  }
  SWITCHML_ASSIGN_OR_RETURN(client::ContextImpl::Routes routes,
                            client::ContextImpl::RoutesFor(options, info, controller.ipv4));
  return client::ContextImpl::CreateWithChannels(options, std::move(channels), std::move(routes),
                                                 JobFailureExplainer(options));
}

}  // namespace switchml
