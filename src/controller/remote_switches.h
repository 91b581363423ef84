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
// Jobs (docs/design.md "Shards on several switches"): every job this controller creates is a
// set of K >= 1 shards (JobSpec::switches = K, 1 by default), and one code path creates,
// registers into, shows, lists, inspects, deletes and finds again each of them, whatever K:
//
// - CreateJob places the job on the K reachable switches with the largest free ranges (ties:
//   the first index), each of which must have room for its shard's share of the job's slots
//   (control::JobLayout::ShardSlots; with K = 1 all of them). Switch i of them becomes shard i
//   of K (control::ShardAssignment, sent with CreateJobShard) with one token (the operator's,
//   or one generated here) and one random shard group; the controller keeps the shard list. The
//   job's id is (switch index << 24) | its shard 0's own job id.
// - A token the operator chooses must be unique among the live jobs of every reachable switch
//   (each switch refuses a duplicate among its own jobs; CreateJob asks the others, one GetJob
//   with the token per live job): ALREADY_EXISTS, not saying which job holds it. Creates are
//   serialized.
// - RegisterWorker registers the worker on every shard in shard order (one registration at a
//   time per job, so every shard sees the same order and the same first registration) and
//   answers with each worker thread's shard, address and port (thread t goes to shard
//   t * K / threads; with K = 1 the switch's own answer, its address filled in). Workers of the
//   reference protocol (no per-thread ports) can join only a job of one switch. A registration
//   that fails on shard i > 0 stays on shards < i (the rank cannot register again; the job is
//   lost).
// - GetJob and ListJobs merge the shards (counters summed; running when every shard is).
// - A shard that is unreachable or no longer knows the job (its switch restarted) re-places
//   the job (below), or, where that cannot be done, ends it (switch_lost); a shard whose job
//   ended (idle timeout, deleted at the switch) ends the job. The health probe, or the first
//   GetJob, ListJobs, registration or access check (CheckJobAccess asks the shards at most
//   every 200 ms per job; the JobService's barrier watch and sweep call it) that sees it acts,
//   deleting the job on the other shards; an ended job's reason names the shard and its
//   switch. Workers meanwhile fail by their job timeout naming the shard. DeleteJob ends it on
//   every shard.
// - Every shard keeps the job's shard group, placement and id, so a controller that restarts
//   finds its jobs again at Connect (the groups whose newest placement is complete among the
//   switches' live jobs, K = 1 included), under the same ids, and they keep running. It
//   learns such a job's token from the first call that presents the right one (checked by
//   shard 0), and until then can neither re-place a job whose shard is lost (it ends, saying
//   so) nor delete its other shards (they end by their idle timeout).
//
// Health and re-placement (docs/operations.md "Health checks and re-placement"): a thread
// probes every switch every `health_interval` (one ListJobs with the rpc deadline) and keeps
// its health (up/down, since when, the last error), which ListJobs reports
// (JobList::switches). A switch found down (unreachable), or up but no longer holding a shard
// (it restarted: the shard's id is gone or names another group), loses its shards: each job
// with a shard there is re-placed instead of ended. Re-placement deletes every shard of the
// job (the survivors' registrations are stale) and creates all K anew, same spec, token and
// shard group, on the K reachable switches with room (the same rule as CreateJob, the
// survivors' freed slots counted), with placement + 1 and the job's id in the assignment, so
// the job keeps its id and token and waits for workers again; every worker registers again
// (RegisterWorker answers the placement it went into; GetJob shows it). It happens under the
// job's registration lock, so a registration goes wholly into one placement. A job that no K
// switches can take, or an adopted job whose token this controller has not learned yet (it
// cannot create shards without it), ends as before (switch_lost), the reason saying why. The
// same re-placement happens when a call (GetJob, an access check, a registration) finds the
// shard lost first. A switch that comes back holding a shard of an older placement has it
// deleted at the next probe.
//
// Two-level jobs (JobSpec::racks, `switchml jobs create --leaf I[,I...]:N ... [--parent
// P[,P...]]`; docs/scaling.md "Two-level aggregation"): the request names the racks in rank
// order (rack k: the next racks[k].workers global ranks, on switches racks[k].switches, one per
// shard: K = JobSpec::switches shards per level) and optionally the parent's K switches
// (default: the reachable switches that are not leaves with the largest free ranges, each
// holding its shard's slots); every field is checked first, each error naming it and its
// flag. CreateJob asks every leaf and parent switch for its data address
// (JobList::data_ipv4/data_udp_ports; a switch listening on every interface reports 0.0.0.0,
// replaced by the host of its --switch address, as for workers' grants), creates the parent
// job (K shards, num_workers = the racks) and then each rack's K leaf shards (its rack's
// workers) with CreateJobShard carrying the control::Uplink to the parent's shard of the same
// index, all in one shard group with one token; any failure deletes what it created. The job's
// id is the parent shard 0's global id; its parts (Job::shards) are rack k's leaf shard s at
// k * K + s, then the parent's shards (Job::LeafPart/ParentPart). RegisterWorker for global
// rank g registers at its rack's K leaf shards only, as the rack's local rank of the rack's
// count (everything else as sent), and answers with their merged grant (num_workers the job's
// total); the rack's first registration also registers each leaf shard at the parent's shard
// (control::LeafRegistration: the workers' layout, the leaf's port per thread from its answer).
// GetJob/ListJobs merge the parts (each rack's workers once under their global ranks, every
// part's counters; running when every part is). A part found unreachable, forgotten or ended
// ENDS the job (switch_lost when lost), the reason naming "leaf k (switch i at ADDRESS)" or
// "the parent (switch i at ADDRESS)" ("leaf k shard s of K (...)", "the parent's shard s of K
// (...)"): two-level jobs are never re-placed (yet). A restarted controller finds them again
// at Connect (the group's parent shards and its leaves, told apart by the leaves' uplinks and
// shard indices), under the same id. InspectSlots answers the parts in that order. Limits:
// one leaf job per (leaf switch, parent switch) pair.
//
// Jobs this controller did not create (created on a switch directly, or whose shard group is
// incomplete at Connect) are still visible and usable through it, statelessly: the controller
// id (switch index << 24) | the switch's job id routes GetJob, RegisterWorker, DeleteJob,
// InspectSlots and access checks to that switch, which checks the token; ListJobs lists them
// as the switch does.
//
// Job-scoped Barrier/Broadcast are served by this controller (job_service.h).
//
// Job 0 (the reference single-job session: UdpSession) is the first switch's job 0, never a
// job of several shards (control::ShardAssignment says why): its
// registrations are forwarded to that switch's Session service. Registrations are
// forwarded with every field, so the switch checks that the workers agree (num_workers and the
// agreed parameters of WorkerRegistration); its FAILED_PRECONDITION comes back prefixed with
// the switch, and this controller's Session/JobService fail the barriers of that session or
// job with it as the switch's embedded controller would (session_service.h, job_service.h).
//
// Calls to a switch fail fast (Unavailable, prefixed "switch <i> (<address>)", or "shard s of
// K (switch <i> at <address>)" for a job of this controller) while it is down instead of
// waiting for it, so one switch that is down stalls nothing else: ListJobs leaves its jobs
// out and reports it down (JobList::switches; CounterValues reports switch<i>.reachable = 0),
// CreateJob places jobs on the reachable ones, and a job of this controller with a shard
// there is re-placed when first noticed (above). A switch that comes back is used again
// within about a second. A switch that is down when this controller starts is kept, reported
// down, and used once it is back.
//
// Credentials: every call to a switch carries `operator_token`, the switches' operator
// credential (operator_auth.h); Connect checks it with one ListJobs per switch. Workers'
// job tokens are checked here for the jobs of this controller (by shard 0 until learned) and
// by the switch for the others. The idle timeout is
// settled by this controller's JobService (its default applies), so CreateJob always sends
// the switch an explicit timeout or none.
//
// Limitation: a switch's own job ids must stay below 2^24 (16 million jobs per switch run).
//
// Thread-safety: all methods are thread-safe (gRPC stubs are).
#pragma once

#include <chrono>
#include <condition_variable>
#include <thread>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/job_client.h"
#include "rendezvous/session_client.h"
#include "control/switch_control.h"

namespace switchml::controller {

// The control contract's names (control::contract) and the stubs this controller drives its
// switches with.
using namespace control::contract;
using rendezvous::JobClient;
using rendezvous::SessionClient;

class RemoteSwitches final : public SwitchControl {
 public:
  static constexpr uint32_t kMaxSwitches = 255;
  static constexpr uint32_t kLocalIdBits = 24;

  // Most (job, token) pairs whose positive access check is cached (CheckJobAccess).
  static constexpr size_t kMaxAccessCache = 1024;
  // How long a positive access check is trusted (CheckJobAccess).
  static constexpr std::chrono::milliseconds kAccessCacheFor{200};

  // Connects to every switch's controller address and checks the operator credential there.
  // A switch not reachable within rpc_timeout is kept and reported down (Health). Errors:
  // InvalidArgument (no address, more than kMaxSwitches, empty operator_token), Unavailable
  // (no switch reachable), Unauthenticated or PermissionDenied (a switch refuses the
  // credential); each names the switch.
  // health_interval: how often every switch is probed (above); 0 = no probing thread (health
  // is then what the last call to each switch saw; lost shards are found by calls).
  // tls: how to reach the switches (rendezvous/tls.h; the operator credential goes with every
  // call, so plaintext only to switches on this host or with tls.insecure: FailedPrecondition
  // otherwise).
  static constexpr std::chrono::milliseconds kDefaultHealthInterval{1000};
  static StatusOr<std::unique_ptr<RemoteSwitches>> Connect(
      const std::vector<std::string>& switch_addresses, std::chrono::milliseconds rpc_timeout,
      const std::string& operator_token,
      std::chrono::milliseconds health_interval = kDefaultHealthInterval, const TlsOptions& tls = {});
  ~RemoteSwitches() override;

  // SwitchControl (routing as described above). RegisterJobWorker for job 0 is a UdpSession
  // to the first switch; its grant carries that switch's reply (an ipv4 of 0 replaced by the
  // switch's host address). CreateJobShard is SwitchControl's refusal: this controller makes
  // shard assignments and holds none, so a request carrying one is refused naming the field.
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
  // A job of this controller: CheckAccess below. Another job: asks its switch (GetJob with the
  // token); a positive answer is cached for 200 ms (at most kMaxAccessCache of them), since
  // blocked job barriers poll this every 10 ms.
  Status CheckJobAccess(uint32_t job_id, const std::string& token) const override;

  size_t num_switches() const { return switches_.size(); }
  // Each switch's health as last probed (ListJobs carries it too).
  std::vector<SwitchHealth> Health() const;
  // Probes every switch once now and re-places the jobs of a lost switch (what the health
  // thread does every interval).
  void ProbeAll();

  // Ended jobs of this controller kept so that GetJob can say why (oldest forgotten first; a
  // forgotten one is shown as its switches show it).
  static constexpr size_t kMaxEndedJobs = 32;

 private:
  struct Switch {
    std::string address;
    std::unique_ptr<JobClient> jobs;
    std::unique_ptr<SessionClient> session;
  };
  // A job this controller placed (or found again at Connect): K >= 1 shards.
  using Shards = std::vector<std::pair<size_t, uint32_t>>;  // (switch index, its job id)
  struct Job {
    uint32_t job_id = 0;
    // Guarded by jobs_mu_ (re-placement replaces it; read it through ShardsOf): by shard.
    Shards shards;
    uint64_t shard_group = 0;
    // What the shards are created with (token, placement and idle timeout as sent); its token
    // field is unused (token below).
    JobSpec spec;
    uint32_t placement = 1;  // guarded by jobs_mu_
    // Guarded by jobs_mu_: empty for a job found again after a restart until a call presents
    // the right token (CheckAccess).
    std::string token;
    std::mutex register_mu;  // one registration at a time, on every shard in order
    // Guarded by register_mu: a two-level job's first accepted registration. Each leaf checks
    // that its own rack's workers agree; the racks must agree with each other too (threads and
    // window decide which data each slot carries), which only the controller sees.
    std::optional<control::WorkerRegistration> first_worker;
    // Guarded by register_mu: the racks whose leaf is registered at the parent (when the
    // rack's first worker registers: the layout is the workers'). Empty after a restart: the
    // next registration registers the leaf again, which the parent takes as a repeat.
    std::vector<bool> leaf_registered;
    // Guarded by jobs_mu_: set once the job ended (deleted, or a shard lost: switch_lost).
    std::string end_reason;
    bool switch_lost = false;
    uint64_t ended_seq = 0;
    // Guarded by jobs_mu_: until when CheckAccess trusts the shards' last answer (Probe).
    std::chrono::steady_clock::time_point live_until;
    // A two-level job (spec.racks, spec.parent_switches set; never re-placed): `shards` are
    // its parts, rack r's leaf shard s at r * K + s, then the parent's shard s at R * K + s
    // (K = spec.switches shards per level, R racks).
    bool two_level() const { return !spec.racks.empty(); }
    size_t per_level() const { return std::max<size_t>(1, spec.switches); }
    size_t LeafPart(size_t rack, size_t shard) const { return rack * per_level() + shard; }
    size_t ParentPart(size_t shard) const { return spec.racks.size() * per_level() + shard; }
    bool IsParentPart(size_t part) const { return part >= ParentPart(0); }
  };
  // The reachable switches as (largest free range, index), largest first (ties: the first
  // index); *first_error gets the first unreachable switch's error.
  std::vector<std::pair<uint32_t, size_t>> ByFreeRange(Status* first_error) const;
  // The job of this controller with `job_id`, or null (a job it did not create: Route).
  std::shared_ptr<Job> Find(uint32_t job_id) const;
  // Connect: the jobs whose every shard is live on the switches (grouped by
  // ShardAssignment::shard_group), e.g. after this controller restarted.
  void Adopt();
  // Places a new job (CreateJob after the token check).
  StatusOr<JobInfo> Place(const JobSpec& spec);
  // Place for a two-level job (spec.racks).
  StatusOr<JobInfo> PlaceTwoLevel(const JobSpec& spec);
  // Switch i's data address (JobList::data_ipv4/data_udp_port; an ipv4 of 0 is the host of
  // its controller address) and largest free range, from one ListJobs.
  struct DataAddress {
    uint32_t ipv4 = 0;
    uint16_t port = 0;
    std::vector<uint16_t> ports;  // every I/O thread's ([0] = port)
    uint32_t largest_free_range = 0;
  };
  StatusOr<DataAddress> DataAddressOf(size_t i) const;
  // A two-level job: registers rack `rack`'s leaf shard `shard` at the parent's shard
  // `shard` (control::LeafRegistration) with the layout of `worker` (a worker of that rack,
  // just registered there) and the ports the leaf shard answered it with (`leaf`). Under
  // register_mu.
  Status RegisterLeafAtParent(Job& job, const Shards& shards, size_t rack, size_t shard,
                              const JobRegistration& worker, const SwitchInfo& leaf) const;
  // Adopt for the groups of two-level jobs: `parts` are (switch, listed job) of one group.
  void AdoptTwoLevel(uint64_t group, const std::vector<std::pair<size_t, JobInfo>>& parts);
  // AlreadyExists if a live job on any reachable switch has `token` (not saying which).
  Status CheckTokenUnused(const std::string& token) const;
  // PermissionDenied (token differs), FailedPrecondition (ended, saying why: also when asking
  // the shards, at most every 200 ms, finds one lost), Unavailable instead when the job ended
  // because a shard's switch is lost (JobInfo::switch_lost). A job found again after a restart
  // learns its token here (shard 0 checks it).
  Status CheckAccess(Job& job, const std::string& token) const;
  StatusOr<JobWorkerGrant> Register(Job& job, const JobRegistration& reg);
  // The merged view; ends the job if a shard is lost (unreachable, unknown, ended).
  JobInfo Describe(Job& job) const;
  // Marks the job ended with `reason` (unless it already is) and deletes it on every shard
  // (errors ignored: a shard that is down or already ended it has nothing to free).
  // switch_lost: because a shard's switch is unreachable or forgot the job (JobInfo).
  void End(Job& job, const std::string& reason, bool switch_lost = false) const;
  // "shard i of K (switch j at ADDRESS)".
  std::string ShardName(const Shards& shards, size_t shard) const;
  // ShardName, or for a two-level job "leaf k (switch j at ADDRESS)" and "the parent (switch j
  // at ADDRESS)".
  std::string PartName(const Job& job, const Shards& shards, size_t part) const;
  // The job's shards and placement now.
  Shards ShardsOf(const Job& job, uint32_t* placement = nullptr) const;
  // Re-places the job (above) if it is still at `placement` and live; `lost` says which shard
  // was lost and how (the start of the end reason if it cannot be re-placed).
  void Replace(Job& job, uint32_t placement, const std::string& lost) const;
  // Records a call's outcome at switch i (its health).
  void Note(size_t i, const Status& status) const;
  // The health thread.
  void HealthLoop(std::chrono::milliseconds interval);
  // Creates the K shards of `job` (spec, token, group, placement, the job's id unless
  // new_job) on the best reachable switches; on failure deletes what it created.
  StatusOr<Shards> CreateShards(const JobSpec& spec, const std::string& token, uint64_t group,
                                uint32_t placement, uint32_t job_id, JobInfo* first) const;
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
  // Access checks of jobs this controller did not create (Route).
  mutable std::vector<AccessCache> access_cache_;  // guarded by cache_mu_
  mutable std::mutex jobs_mu_;
  mutable std::map<uint32_t, std::shared_ptr<Job>> jobs_;  // guarded by jobs_mu_
  mutable uint64_t ended_seq_ = 0;                         // guarded by jobs_mu_

  struct HealthState {
    bool up = true;
    std::chrono::steady_clock::time_point since;
    std::string last_error;
    uint64_t jobs_replaced = 0;
  };
  mutable std::mutex health_mu_;
  mutable std::vector<HealthState> health_;  // guarded by health_mu_; one per switch
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread health_thread_;
};

}  // namespace switchml::controller
