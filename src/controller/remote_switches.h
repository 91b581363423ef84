// controller/remote_switches.h — a standalone controller's view of one or more switches.
//
// By default the controller runs inside the switch process (`switchml switch`), with the
// switch itself as its SwitchControl. A standalone controller (`switchml
// controller --switch H:P ...`) instead serves the same gRPC API to workers and drives the
// switches over gRPC, through each switch's embedded JobService and Session service:
//
//   auto sw = RemoteSwitches::Connect({"10.0.0.10:50099", "10.0.0.11:50099"}, 5s, token);
//   auto server = ControllerServer::Start(opts, sw->get());
//
// Jobs: CreateJob places a job on the switch with the largest free slot range (first on
// ties); the controller's job id is (switch index << 24) | the switch's own job id, so every
// later call (RegisterWorker, GetJob, DeleteJob, InspectSlots) is routed to that switch
// without state here, and RegisterWorker's answer carries that switch's data address. Tokens
// are checked by the switch. A token the operator chooses must be unique among the live jobs
// of every reachable switch (each switch refuses a duplicate among its own jobs; CreateJob
// asks the others, one GetJob with the token per live job, so choosing a token costs one RPC
// per live job): ALREADY_EXISTS, not saying which job holds it. Creates are serialized. Job-scoped Barrier/Broadcast are served by this controller.
// Jobs on several switches (JobSpec::switches = K > 1; docs/design.md "Shards on several
// switches"): CreateJob creates the job on the K reachable switches with the largest free
// ranges, switch i of them as shard i of K with one token (the operator's, or one generated
// here), and keeps the shard list here; the job's id is its shard 0's. RegisterWorker
// registers the worker on every shard in shard order (one registration at a time per job, so
// every shard sees the same order and the same first registration) and answers with each
// worker thread's shard, address and port (thread t goes to shard t * K / threads). GetJob and
// ListJobs merge the shards (counters summed; running when every shard is). A shard that is
// unreachable or whose job ended ends the job: the first GetJob (or ListJobs, or the job
// service's periodic sweep) that sees it deletes the job on the other shards and reports it
// ended with a reason naming the shard; workers meanwhile fail by their job timeout with an
// error naming the shard. Every shard keeps the job's shard group (a random id), so a
// controller that restarts finds its sharded jobs again at Connect (the complete groups among
// the switches' live jobs); it learns such a job's token from the first call that presents the
// right one (checked by shard 0), and until then cannot delete the other shards of a job whose
// shard is lost (they end by their idle timeout). A registration that fails on shard i > 0
// stays on shards < i (the rank cannot register again; the job is lost).
//
// Job 0 (the reference single-job session: UdpSession) is the first switch's job 0: its
// registrations are forwarded to that switch's Session service. Registrations are
// forwarded with every field, so the switch checks that the workers agree (num_workers and the
// agreed parameters of WorkerRegistration); its FAILED_PRECONDITION comes back prefixed with
// the switch, and this controller's Session/JobService fail the barriers of that session or
// job with it as the switch's embedded controller would (session_service.h, job_service.h).
//
// Calls to a switch fail fast (Unavailable, prefixed "switch <i> (<address>)") while it is
// down instead of waiting for it, so one switch that is down stalls nothing else: ListJobs
// leaves it out (CounterValues reports switch<i>.reachable = 0), CreateJob places jobs on
// the reachable ones. A switch that comes back is used again within about a second.
//
// Credentials: every call to a switch carries `operator_token`, the switches' operator
// credential (operator_auth.h); Connect checks it with one ListJobs per switch. Workers'
// job tokens are passed through unchanged and checked by the switch. The idle timeout is
// settled by this controller's JobService (its default applies), so CreateJob always sends
// the switch an explicit timeout or none.
//
// Limitation: a switch's own job ids must stay below 2^24 (16 million jobs per switch run).
//
// Thread-safety: all methods are thread-safe (gRPC stubs are).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/job_client.h"
#include "rendezvous/session_client.h"
#include "control/switch_control.h"

namespace switchml::controller {

// The control contract's names and the stubs this controller drives its switches with.
using control::JobCounters;
using control::JobDataType;
using control::JobInfo;
using control::JobList;
using control::JobRegistration;
using control::JobSpec;
using control::JobState;
using control::JobWorkerGrant;
using control::JobWorkerInfo;
using control::SlotInfo;
using control::SlotSetInfo;
using control::SwitchControl;
using control::SwitchInfo;
using control::WorkerRegistration;
using rendezvous::JobClient;
using rendezvous::SessionClient;

class RemoteSwitches final : public SwitchControl {
 public:
  static constexpr uint32_t kMaxSwitches = 255;
  static constexpr uint32_t kLocalIdBits = 24;

  // Most (job, token) pairs whose positive access check is cached (CheckJobAccess).
  static constexpr size_t kMaxAccessCache = 1024;

  // Connects to every switch's controller address and checks the operator credential there.
  // Errors: InvalidArgument (no address, more than kMaxSwitches, empty operator_token),
  // Unavailable (a switch not reachable within rpc_timeout), Unauthenticated or
  // PermissionDenied (a switch refuses the credential); each names the switch.
  static StatusOr<std::unique_ptr<RemoteSwitches>> Connect(
      const std::vector<std::string>& switch_addresses, std::chrono::milliseconds rpc_timeout,
      const std::string& operator_token);

  // SwitchControl (routing as described above). RegisterJobWorker for job 0 is a UdpSession
  // to the first switch; its grant carries that switch's reply (an ipv4 of 0 replaced by the
  // switch's host address).
  StatusOr<JobInfo> CreateJob(const JobSpec& spec) override;
  Status DeleteJob(uint32_t job_id, const std::string& token) override;
  StatusOr<JobWorkerGrant> RegisterJobWorker(const JobRegistration& reg) override;
  StatusOr<JobInfo> GetJob(uint32_t job_id) const override;
  JobList ListJobs() const override;
  StatusOr<std::vector<SlotInfo>> InspectSlots(uint32_t job_id, uint32_t first_slot,
                                               uint32_t count) const override;
  // "switch<i>.<name>" for every switch's counters, and "switch<i>.reachable" (1, or 0 when
  // the switch did not answer; its other counters are then missing).
  std::vector<std::pair<std::string, uint64_t>> CounterValues() const override;
  // Asks the switch (GetJob with the token); a positive answer is cached for 200 ms (at most
  // kMaxAccessCache of them), since blocked job barriers poll this every 10 ms.
  Status CheckJobAccess(uint32_t job_id, const std::string& token) const override;

  size_t num_switches() const { return switches_.size(); }

  // Ended sharded jobs kept so that GetJob can say why (oldest forgotten first).
  static constexpr size_t kMaxEndedShardedJobs = 32;

 private:
  struct Switch {
    std::string address;
    std::unique_ptr<JobClient> jobs;
    std::unique_ptr<SessionClient> session;
  };
  struct ShardedJob {
    uint32_t job_id = 0;
    std::vector<std::pair<size_t, uint32_t>> shards;  // (switch index, its job id), by shard
    // Guarded by sharded_mu_: empty for a job found again after a restart until a call
    // presents the right token (CheckShardedAccess).
    std::string token;
    std::mutex register_mu;  // one registration at a time, on every shard in order
    // Guarded by sharded_mu_: set once the job ended (deleted, or a shard lost).
    std::string end_reason;
    uint64_t ended_seq = 0;
  };
  // The reachable switches as (largest free range, index), largest first (ties: the first
  // index); *first_error gets the first unreachable switch's error.
  std::vector<std::pair<uint32_t, size_t>> ByFreeRange(Status* first_error) const;
  std::shared_ptr<ShardedJob> FindSharded(uint32_t job_id) const;
  // Connect: the sharded jobs whose every shard is live on the switches (grouped by
  // ShardAssignment::shard_group), e.g. after this controller restarted.
  void AdoptShardedJobs();
  // PermissionDenied (token differs), FailedPrecondition (ended, saying why).
  // A job found again after a restart learns its token here (shard 0 checks it).
  Status CheckShardedAccess(ShardedJob& job, const std::string& token) const;
  StatusOr<JobInfo> CreateShardedJob(const JobSpec& spec);
  // AlreadyExists if a live job on any reachable switch has `token` (not saying which).
  Status CheckTokenUnused(const std::string& token) const;
  StatusOr<JobWorkerGrant> RegisterSharded(ShardedJob& job, const JobRegistration& reg);
  StatusOr<JobInfo> GetSharded(ShardedJob& job) const;
  // Marks the job ended with `reason` (unless it already is) and deletes it on every shard
  // (errors ignored: a shard that is down or already ended it has nothing to free).
  void EndSharded(ShardedJob& job, const std::string& reason) const;
  // "shard i of K (switch j at ADDRESS)".
  std::string ShardName(const ShardedJob& job, size_t shard) const;
  RemoteSwitches() = default;
  // The switch and its local id for a controller job id; NotFound if it names no switch.
  StatusOr<std::pair<Switch*, uint32_t>> Route(uint32_t job_id) const;
  // Job 0: a UdpSession to the first switch.
  StatusOr<JobWorkerGrant> RegisterInReferenceSession(const JobRegistration& reg);
  // `status` prefixed with "switch <i> (<address>)".
  Status SwitchError(const Switch& s, const Status& status) const;
  static uint32_t GlobalId(size_t index, uint32_t local) {
    return (uint32_t(index) << kLocalIdBits) | local;
  }

  std::vector<Switch> switches_;
  std::mutex create_mu_;  // one CreateJob at a time (CheckTokenUnused, then create)
  mutable std::mutex cache_mu_;
  struct AccessCache {
    uint32_t job_id = 0;
    std::string token;
    std::chrono::steady_clock::time_point until;
  };
  mutable std::vector<AccessCache> access_cache_;  // guarded by cache_mu_
  mutable std::mutex sharded_mu_;
  mutable std::map<uint32_t, std::shared_ptr<ShardedJob>> sharded_;  // guarded by sharded_mu_
  mutable uint64_t ended_seq_ = 0;                           // guarded by sharded_mu_
};

}  // namespace switchml::controller
