// rendezvous/job_client.h — the client side of switchml.v1.JobService (switchml_v1.proto).
//
// Used by operators' tools (`switchml jobs ...`) and by workers that join a job (through
// rendezvous.h, ConnectRendezvous, which runs JobBootstrap for every job but job 0):
//
//   auto client = JobClient::Connect("10.0.0.254:50099", std::chrono::seconds(5));
//   if (!client.ok()) return client.status();        // Unavailable within 5 s
//   StatusOr<JobInfo> job = (*client)->CreateJob({.num_workers = 4, .num_slots = 256});
//   // give job->job_id and job->token to the 4 workers; each then runs:
//   JobRegistration reg{.job_id = id, .token = token,
//                       .worker = {.rank = r, .ipv4 = my_ip, .udp_ports = my_ports}};
//   StatusOr<JobWorkerGrant> grant = JobBootstrap(**client, reg);   // all registered after
//
// Operators' calls (CreateJob, DeleteJob, ListJobs, InspectSlots, GetJob without a token) need
// the operator credential (operator_auth.h): set_operator_token() makes every call send it as
// gRPC metadata; without it they fail with Unauthenticated. Workers need only their job's
// token.
//
// Every RPC has a deadline of rpc_timeout and waits for the channel to (re)connect until then.
// Errors are switchml::Status with the controller's code (control/switch_control.h lists them) and a message
// prefixed with the controller address and the RPC; "not connected" becomes Unavailable,
// an operation that did not complete in time DeadlineExceeded (as in session_client.h).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "control/switch_control.h"
#include "switchml/options.h"
#include "switchml/status.h"

namespace switchml::rendezvous {

// The job values the JobService exchanges (control::contract; control/switch_control.h
// documents them).
using namespace control::contract;

class JobClient {
 public:
  // CreateJob: JobSpec::idle_timeout = kNoIdleTimeout asks for a job without idle timeout;
  // 0 asks for the controller's default (10 minutes unless configured). In answers
  // (JobInfo::spec) 0 means the job has none.
  static constexpr std::chrono::milliseconds kNoIdleTimeout = std::chrono::milliseconds::max();

  // TLS as `tls` says (rendezvous/tls.h). Every call carries a token, so plaintext is only
  // allowed to a loopback address or with tls.insecure (FailedPrecondition otherwise, before
  // anything is sent). Errors: InvalidArgument (empty address, rpc_timeout <= 0, TLS files),
  // Unavailable (no connection within rpc_timeout, with gRPC's reason and a TLS hint; with
  // require_connected false the client is returned anyway, its calls failing until the
  // server is reachable). Blocks.
  static StatusOr<std::unique_ptr<JobClient>> Connect(const std::string& controller_address,
                                                      std::chrono::milliseconds rpc_timeout,
                                                      const TlsOptions& tls = {},
                                                      bool require_connected = true);
  ~JobClient();
  JobClient(const JobClient&) = delete;
  JobClient& operator=(const JobClient&) = delete;

  // The answer carries the token (JobInfo::token). spec.idle_timeout: see kNoIdleTimeout.
  StatusOr<JobInfo> CreateJob(const JobSpec& spec);
  // The controller-to-switch path (control::SwitchControl::CreateJobShard): asks a switch for
  // its shard `assignment` of a job a standalone controller placed. A controller that is not
  // a switch refuses it (InvalidArgument naming the field).
  StatusOr<JobInfo> CreateJobShard(const JobSpec& spec,
                                   const control::ShardAssignment& assignment);
  Status DeleteJob(uint32_t job_id, const std::string& token);
  // With a non-empty token the controller also checks it (PermissionDenied, or
  // FailedPrecondition if the job ended), without any other effect.
  StatusOr<JobInfo> GetJob(uint32_t job_id, const std::string& token = {});
  // Also fills *switch_counters (name, value) when non-null.
  StatusOr<JobList> ListJobs(std::vector<std::pair<std::string, uint64_t>>* switch_counters =
                                 nullptr);
  // Sends every field of reg.worker, including the agreed parameters.
  // grant.switch_info.ipv4 == 0 means "where the controller is".
  StatusOr<JobWorkerGrant> RegisterWorker(const JobRegistration& reg);
  // Job-scoped rendezvous: returns once every rank of the job has called Barrier.
  Status Barrier(uint32_t job_id, const std::string& token, uint32_t rank);
  StatusOr<uint64_t> Broadcast(uint32_t job_id, const std::string& token, uint32_t rank,
                               uint32_t root, uint64_t value);
  StatusOr<std::vector<SlotInfo>> InspectSlots(uint32_t job_id, uint32_t first_slot,
                                               uint32_t count);

  const std::string& address() const;

  // Fail fast (false): every later call fails at once with Unavailable while the controller
  // is unreachable (refused or dropped the connection) instead of waiting for it until
  // rpc_timeout. A standalone controller uses this towards its switches, so that a switch
  // that is down does not stall the calls that concern the others. Default: true (wait).
  // Call before sharing the client between threads.
  void set_wait_for_ready(bool wait);

  // The operator credential to send with every call (empty = none). Call before sharing the
  // client between threads.
  void set_operator_token(std::string token);

 private:
  struct Impl;
  explicit JobClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A worker's job set-up: RegisterWorker, then the job's Barrier (after which every rank is
// registered and the job is running). Errors from either step, prefixed with
// "job J rank R: registration" / "...: barrier". A rank refused because it disagrees with
// the job's first registration (FailedPrecondition naming the field, both values and both
// ranks) makes the ranks waiting in the barrier fail at once with the same message
// (job_service.h). Blocks up to about 2 x rpc_timeout.
StatusOr<JobWorkerGrant> JobBootstrap(JobClient& client, const JobRegistration& reg);

}  // namespace switchml::rendezvous
