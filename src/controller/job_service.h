// controller/job_service.h — the switchml.v1.JobService gRPC service (switchml_v1.proto).
//
// Internal to the controller: ControllerServer (session_service.h) registers it next to the
// reference Session/Sync services. Each RPC is a thin shell over the switch's SwitchControl
// (control/switch_control.h), whose Status errors become gRPC status codes with the same
// code and message. Job 0, the reference session, is not a JobService job: RegisterWorker,
// Barrier and Broadcast for it answer NOT_FOUND as for a job that does not exist. Barrier and
// Broadcast are job-scoped: each job has its own SyncCoordinator in the one JobSyncTable
// (job_sync_table.h, which also holds job 0's for the reference Sync service), the token is
// checked first, and a caller waiting while its job ends (deleted or idle timeout)
// returns ABORTED with the job's end reason: at once when the job is deleted through this
// service, otherwise within about 10 ms (a background watch asks the switch, once per job
// with waiting callers, every 10 ms).
//
// Agreement: a RegisterWorker the switch refuses with FAILED_PRECONDITION while the job is live
// (the worker disagrees with the job's first registration: num_workers or an agreed parameter,
// control/switch_control.h) means the job can never start, so the job's Barrier/Broadcast callers with its
// token, blocked and later ones, get FAILED_PRECONDITION "<rpc>: job J cannot start: a
// registration was refused: <the refusal>" (within one poll interval). At most 1024 refused
// jobs are remembered, the lowest ids forgotten first.
//
// Access control (operator_auth.h): CreateJob, DeleteJob, ListJobs, InspectSlots and GetJob
// without the job's token need the operator credential in the call's metadata
// (kOperatorTokenMetadataKey): missing -> UNAUTHENTICATED, wrong -> PERMISSION_DENIED, both
// with a message saying how to pass it; with no operator token configured job administration
// is refused (PERMISSION_DENIED). DeleteJob also checks the job's token. Worker calls
// (RegisterWorker, Barrier, Broadcast, GetJob with a token) check the job's token only.
//
// Idle timeout: CreateJob with idle_timeout_ms 0 gets options.default_idle_timeout; only
// no_idle_timeout asks for none.
//
// Sync state: a job's SyncCoordinator exists while a caller is inside Barrier/Broadcast or a
// broadcast operation is pending, and is dropped as soon as it is idle (it then holds nothing).
// Leftovers of a job that ended (a pending broadcast no rank will complete) are dropped when
// the job is deleted through this service, when a caller of it notices the end, or by a sweep
// every options.sweep_interval that asks the switch about each job that has some. Bounds: at
// most kMaxSyncStates coordinators; per job, at most kMaxPendingBroadcastsPerJob pending
// broadcast operations and 2 x num_workers blocked callers (RESOURCE_EXHAUSTED beyond).
//
// Threading: Barrier and Broadcast use gRPC's callback API (sync_calls.h): a waiting call
// holds no thread, its deadline is kept by one timer thread, and a client's cancellation
// withdraws it at once. The other RPCs are synchronous (gRPC's sync-server pool) and do not
// wait for other callers. One background thread watches jobs with waiting callers and sweeps
// leftover sync state. A Barrier/Broadcast checks the job's token and rank on gRPC's callback
// thread (SwitchControl::CheckJobAccess and GetJob: in-memory in the switch; a standalone
// controller's RemoteSwitches may ask a switch over gRPC, which caches positive answers).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "controller/job_sync_table.h"
#include "control/switch_control.h"
#include "rendezvous/tls.h"

namespace grpc {
class Service;
}

namespace switchml::controller {

struct JobServiceOptions {
  // The operator credential (operator_auth.h); empty = job administration is refused.
  std::string operator_token;
  // Given to a job created with idle_timeout_ms 0 (and no_idle_timeout false).
  std::chrono::milliseconds default_idle_timeout{std::chrono::minutes(10)};
  // How often leftover sync state of ended jobs is looked for.
  std::chrono::milliseconds sweep_interval{std::chrono::seconds(1)};
  // Bounds of job 0's coordinator, the reference Sync service's (ServerOptions sets the
  // per-peer bound).
  SyncLimits reference_limits;
  // How the server is reached (ServerOptions::tls): every JobService call carries a token, so
  // without TLS a call from a peer not on this host is refused (PermissionDenied) unless
  // tls.insecure (rendezvous/tls.h, CheckServerMayAcceptTokens).
  rendezvous::ServerTlsOptions tls;
};

// The control contract's names (control::contract) the services use.
using namespace control::contract;

class JobService {
 public:
  static constexpr size_t kMaxSyncStates = JobSyncTable::kMaxSyncStates;
  static constexpr uint32_t kMaxPendingBroadcastsPerJob = 64;

  // `sink` (the switch) is not owned and must outlive this object.
  explicit JobService(SwitchControl* sink, JobServiceOptions options = {});
  ~JobService();
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  grpc::Service* grpc_service();
  // Wakes every blocked Barrier/Broadcast (UNAVAILABLE) and fails later ones the same way;
  // stops the sweep.
  void Shutdown();

  // Every job's Barrier/Broadcast state, job 0's included (the reference Sync service's).
  JobSyncTable* sync_table();

  // Number of service jobs with sync state (for tests and monitoring).
  size_t NumSyncStates() const;
  // Callers blocked in a job's Barrier or Broadcast right now (for tests and monitoring).
  size_t NumBlockedCallers() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace switchml::controller
