// control/switch_control.h — what the control plane asks of a switch.
//
// The one interface the gRPC services call and the software switch (dataplane/switch_server.h)
// and the standalone controller (controller/remote_switches.h) implement, with its plain value
// types (no gRPC). It lives in the bottom module control/ (with the job layout), so that the
// switch, the controller and the worker library all depend on it and none of them on another
// for it.
//
// One interface, one job model behind it (docs/design.md, "Several jobs"): every worker
// registers into a job with RegisterJobWorker. Job 0 is the reference `UdpSession` session:
// it exists implicitly, covers the whole slot pool, takes no token, and rank 0's registration
// starts a new session; the reference Session service (controller/session_service.h) is a
// thin adapter that registers into it. Other jobs are switchml.v1.JobService jobs: created
// with an id, a secret token, a number of workers, a packet size, a range of switch slots and
// an idle timeout.
//
//   JobSpec spec{.num_workers = 4, .num_slots = 256, .elements_per_packet = 256};
//   StatusOr<JobInfo> job = control->CreateJob(spec);       // job->job_id, job->token
//   // A standalone controller, on the switch it made shard 1 of a job on 2 switches:
//   sw->CreateJobShard(spec, {.shard = 1, .num_shards = 2, .shard_group = group});
//   JobRegistration reg{.job_id = job->job_id, .token = job->token,
//                       .worker = {.rank = 0, .num_workers = 4, .ipv4 = ip, .udp_ports = {p}}};
//   StatusOr<JobWorkerGrant> grant = control->RegisterJobWorker(reg);
//   // The reference session: job 0, no token, num_workers in the registration.
//   control->RegisterJobWorker({.job_id = 0, .worker = {.rank = 0, .num_workers = 4, ...}});
//
// Slots: a job's packets carry *job-relative* slots in [0, num_slots), exactly like a
// reference client's packets; the switch maps them onto the job's own aggregation state. The
// job's place in the switch's slot pool ([slot_base, slot_base + num_slots)) is reported for
// accounting; no packet can name another job's slot.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "control/job_layout.h"
#include "switchml/status.h"

namespace switchml::control {

struct WorkerRegistration {
  uint64_t session_id = 0;
  uint32_t rank = 0;
  uint32_t num_workers = 0;
  uint64_t mac = 0;    // informative on the software switch
  uint32_t ipv4 = 0;   // host order, a.b.c.d = a<<24 | ...
  // Our extension: the worker's UDP source port for each of its worker threads. Thread t of
  // every worker uses slot range t, so results for a packet from thread t go to each worker's
  // port[t]. Empty = reference behaviour: replies go to the port the triggering packet came
  // from, which requires every worker to use the same ports.
  std::vector<uint16_t> udp_ports;

  // Our extension: parameters every worker of a session or job must share (besides
  // num_workers); 0 = not sent (e.g. an unmodified reference client). The first registration
  // of a session (rank 0's) or job fixes them together with num_workers; a later registration
  // with any other value, 0 included, is refused with FailedPrecondition naming the field,
  // both values and both ranks, so workers that disagree (or reference clients mixed with
  // ours) fail at registration instead of producing wrong sums or a bare timeout.
  uint32_t protocol_version = 0;     // kClientProtocolVersion for this library's client
  uint32_t num_worker_threads = 0;
  uint32_t window_packets = 0;       // the worker's whole window (all its threads)
  uint32_t elements_per_packet = 0;
  // Set only by a standalone controller registering a leaf switch of a two-level job at its
  // parent (LeafRegistration): several worker threads may then share a port (one leaf I/O
  // thread serves them). A worker's ports must differ.
  bool leaf = false;
};

// The data-path protocol of this library's client, registered as
// WorkerRegistration::protocol_version: 1 = per-call descriptor packets; 2 = the descriptor
// carries the rejected flag (a call one worker rejects runs its first round and fails on every
// worker). 0 = not sent.
inline constexpr uint32_t kClientProtocolVersion = 2;

// Where one worker thread sends its data: a switch (a shard of the job) and the port of the
// switch I/O thread that owns the thread's slots (docs/design.md "Several I/O threads").
struct ThreadRoute {
  uint32_t ipv4 = 0;      // host order; 0 = the switch's SwitchInfo::ipv4
  uint16_t udp_port = 0;  // 0 only in one shard's own answer: another shard serves the thread
  uint32_t shard = 0;     // of SwitchInfo::num_shards
  uint32_t io_thread = 0;  // informative: the I/O thread of that switch
  bool operator==(const ThreadRoute&) const = default;
};

struct SwitchInfo {
  uint64_t mac = 0;
  uint32_t ipv4 = 0;          // host order
  uint16_t udp_port = 48864;  // where workers send data (a switch with several I/O threads:
                              // I/O thread 0's port, where reference clients send)
  uint32_t num_slots = 0;     // slots per set available to a job
  uint32_t max_workers = 0;
  // In a registration's answer, our extension: where each worker thread of the registering
  // worker sends its data (one route per thread, from the job's control::JobLayout). Empty =
  // everything to (ipv4, udp_port): a reference-mode worker, or an older switch.
  std::vector<ThreadRoute> thread_routes;
  // The number of switches serving the job (shards, docs/design.md "Shards on several
  // switches"); thread_routes[t].shard < num_shards.
  uint32_t num_shards = 1;
};

enum class JobDataType : uint8_t { kUnspecified = 0, kInt32 = 1, kFloat32 = 2 };

enum class JobState : uint8_t {
  kWaitingForWorkers = 1,  // created; not every rank has registered; packets are dropped
  kRunning = 2,            // every rank registered; packets are aggregated
  kEnded = 3,              // deleted or timed out; its slots are free; kept for a while so
                           // GetJob can say why (end_reason)
};
inline const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kWaitingForWorkers: return "waiting_for_workers";
    case JobState::kRunning: return "running";
    case JobState::kEnded: return "ended";
  }
  return "unknown";
}
inline const char* JobDataTypeName(JobDataType t) {
  switch (t) {
    case JobDataType::kUnspecified: return "unspecified";
    case JobDataType::kInt32: return "int32";
    case JobDataType::kFloat32: return "float32";
  }
  return "unknown";
}

// What a user asks for when creating a job (CreateJob): the request, the same for a switch
// and for a standalone controller. Where the job's shards go is not the user's to say
// (ShardAssignment).
struct JobSpec {
  uint32_t num_workers = 0;          // [1, switch max_workers]
  uint32_t num_slots = 0;            // slots per set this job needs; [1, pool size]
  uint32_t elements_per_packet = 256;  // 64, 256, 512 or 1024 (<= switch's max); larger
                                       // packets of the job are dropped (too_large)
  JobDataType data_type = JobDataType::kUnspecified;  // informative
  // The switch tears the job down when none of its workers sent anything for this long
  // (counted from creation until the first packet). 0 = never.
  std::chrono::milliseconds idle_timeout{0};
  // Secret workers must present to register. Empty = the switch generates one (32 hex
  // digits). Otherwise 8..128 printable ASCII characters.
  std::string token;
  std::string name;  // informative, <= 64 characters
  // Placement: serve the job with this many switches (shards), each owning a contiguous share
  // of the job's worker threads (control::JobLayout). Only a standalone controller
  // (controller/remote_switches.h) places a job on several switches; a switch asked directly
  // serves a job alone (1).
  uint32_t switches = 1;
  // Two-level aggregation (docs/scaling.md "Two-level aggregation"), placed only by a
  // standalone controller: the racks in rank order, rack k a leaf job of `workers` ranks (rack
  // k holds the next `workers` global ranks) on the controller's switches `switches` (its
  // --switch list, from 0), one per shard: with K = `switches` above, every rack names K
  // switches (leaf shard s on switches[s]) and the parent job is K shards too, shard s on
  // parent_switches[s] (empty: reachable switches that are not leaves, with room). Leaf shard s
  // of every rack is a worker of parent shard s. Empty racks = a one-level job.
  struct Rack {
    std::vector<uint32_t> switches;
    uint32_t workers = 0;
    bool operator==(const Rack&) const = default;
  };
  std::vector<Rack> racks;
  std::vector<uint32_t> parent_switches;
};

// The controller's assignment of one switch to a job it placed (docs/design.md "Shards on
// several switches"): this switch is shard `shard` of `num_shards` and reserves only its share
// of the job's num_slots, serving only that shard's worker threads (control::JobLayout);
// packets for the other shards' slots are served by no I/O thread here (wrong_io_thread).
// Only the controller-to-switch path carries it (SwitchControl::CreateJobShard); a user's
// request (JobSpec) cannot. The default is a job the switch serves alone, placed by no
// controller (created on the switch directly).
//
// Job 0, the reference session, is never a shard: it is the reference protocol's one session
// of a switch (UdpSession, no job id on the wire, registered at one switch's Session service),
// so there is no job for a controller to split over switches, and workers of the reference
// protocol cannot be told a route per worker thread.
// Two-level aggregation (docs/scaling.md "Two-level aggregation"): the parent of a leaf job.
// A leaf switch aggregates its own workers' packets as for any job, but sends each completed
// round up to the parent switch, where the leaf is one worker of the parent job, holds the
// round until the parent's total comes back and then multicasts the total to its workers.
// The leaf and the parent serve the job with the same layout (the workers' threads and
// window; the same shard of the same K): a completed round of slot x goes up from the leaf I/O
// thread that owns x to the parent I/O thread that owns x, parent_ports[IoThreadOf(
// ThreadOfSlot(x), parent_ports.size())], and datagrams from (parent_ipv4, any of
// parent_ports) are the parent's totals.
struct Uplink {
  uint32_t parent_ipv4 = 0;  // host order; 0 = no parent (a one-level job)
  // The parent switch's data port of each of its I/O threads (JobList::data_udp_ports).
  std::vector<uint16_t> parent_ports;
  // Informative (listed with the job): the parent job this leaf is a worker of, the leaf's rank
  // in it, and the workers of every leaf together (what the workers quantize with).
  uint32_t parent_job_id = 0;
  uint32_t leaf = 0;
  uint32_t total_workers = 0;
  bool enabled() const { return parent_ipv4 != 0; }
  bool IsParent(uint32_t ipv4, uint16_t port) const {
    return enabled() && ipv4 == parent_ipv4 &&
           std::find(parent_ports.begin(), parent_ports.end(), port) != parent_ports.end();
  }
  // The parent's port for job-relative slot `slot` of a job laid out as `layout`.
  uint16_t PortFor(const JobLayout& layout, uint32_t slot) const;
  bool operator==(const Uplink&) const = default;
};

// What a leaf switch registers as at its parent (when the first worker of its rack has
// registered, so the layout is known): rank `leaf` of the parent job's `num_leaves` workers,
// from its data address, with the workers' threads and window (`layout`) and packet size, and
// as worker thread t's port `thread_ports[t]`: the port of the leaf I/O thread that owns t's
// slots (what the leaf answers a worker's registration with, SwitchInfo::thread_routes); 0 for
// a thread another shard serves, replaced by `data_port` (the leaf's I/O thread 0 port; also
// every thread's when the leaf's shard serves none: more shards than worker threads). Ports
// repeat when the leaf has fewer I/O threads than worker threads: `leaf` is set, which allows
// that.
WorkerRegistration LeafRegistration(uint32_t leaf, uint32_t num_leaves, uint32_t leaf_ipv4,
                                    const std::vector<uint16_t>& thread_ports, uint16_t data_port,
                                    const JobLayout& layout, uint32_t elements_per_packet);

struct ShardAssignment {
  uint32_t shard = 0;       // [0, num_shards)
  uint32_t num_shards = 1;  // the job's switches, [1, control::JobLayout::kMaxShards]
  // One random id shared by the shards of one job, kept by each switch and listed with it, so
  // that a restarted controller finds the job's shards again. 0 = placed by no controller.
  uint64_t shard_group = 0;
  // The job's placement (generation), from 1: the controller re-places a job whose switch died
  // on healthy switches (controller/remote_switches.h), every shard anew, with the same group
  // and placement + 1; a restarted controller keeps only a group's newest placement. 0 = not
  // sent (a controller that does not re-place: the same as 1).
  uint32_t placement = 0;
  // The controller's id of the job, which stays when a re-placement moves shard 0 to another
  // switch. 0 = not sent: the id the controller derives from shard 0 (its first placement).
  uint32_t job_id = 0;
  // A leaf of a two-level job: where its completed rounds go (none by default).
  Uplink uplink{};
  bool operator==(const ShardAssignment&) const = default;
};

// The per-job counters, the one list the struct below, its sums, the switch's per-thread
// atomic copies (dataplane::AtomicJobCounters), the wire (switchml.v1.JobCounters, a field of
// the same name each) and the CLI's JSON are made from:
//   received                 datagrams attributed to this job (all outcomes)
//   consumed, multicast_rounds, unicast_replies, duplicates_dropped, late_duplicates_dropped,
//   size_mismatch            as the switch-wide counters (dataplane/switch_counters.h)
//   slot_out_of_range        slot >= the job's num_slots
//   too_large                more elements than the job's elements_per_packet
//   not_running              arrived before every rank had registered
//   datagrams_sent
//   wrong_io_thread          reached a switch I/O thread (or shard) that does not own its slot
//   uplink_sent, uplink_resent, parent_stale   a leaf of a two-level job (switch_counters.h)
#define SWITCHML_JOB_COUNTERS(X)                                                            \
  X(received) X(consumed) X(multicast_rounds) X(unicast_replies) X(duplicates_dropped)      \
  X(late_duplicates_dropped) X(size_mismatch) X(slot_out_of_range) X(too_large)             \
  X(not_running) X(datagrams_sent) X(wrong_io_thread) X(uplink_sent) X(uplink_resent)       \
  X(parent_stale)

struct JobCounters {
#define SWITCHML_JOB_COUNTER_FIELD(name) uint64_t name = 0;
  SWITCHML_JOB_COUNTERS(SWITCHML_JOB_COUNTER_FIELD)
#undef SWITCHML_JOB_COUNTER_FIELD

  // Calls f(name, value_ref) for every counter, in the list's order (const or not).
  template <typename Self, typename F>
  static void Visit(Self& c, F&& f) {
#define SWITCHML_JOB_COUNTER_VISIT(name) f(#name, c.name);
    SWITCHML_JOB_COUNTERS(SWITCHML_JOB_COUNTER_VISIT)
#undef SWITCHML_JOB_COUNTER_VISIT
  }
  // Field by field: totals over I/O threads or over the shards of a job.
  JobCounters& operator+=(const JobCounters& o) {
#define SWITCHML_JOB_COUNTER_ADD(name) name += o.name;
    SWITCHML_JOB_COUNTERS(SWITCHML_JOB_COUNTER_ADD)
#undef SWITCHML_JOB_COUNTER_ADD
    return *this;
  }
};

struct JobWorkerInfo {
  uint32_t rank = 0;
  uint32_t ipv4 = 0;
  std::vector<uint16_t> udp_ports;
  uint64_t received = 0;  // datagrams from this rank
  // Since the switch last received a datagram from this rank (or since it registered): a rank
  // that died or stopped calling all-reduce shows here while the others retransmit (their
  // idle_for stays below the client's max_rto). A standalone controller's merged view of a job
  // on several switches: the least over the shards.
  std::chrono::milliseconds idle_for{0};
};

struct JobInfo {
  uint32_t job_id = 0;
  JobSpec spec;  // token is cleared except in CreateJob's answer
  // A switch's job: the assignment it was created with (the default for a job created on the
  // switch directly). A standalone controller's merged view of a job it placed: the job's
  // shard group and num_shards, shard 0.
  ShardAssignment assignment;
  std::string token;  // only set in CreateJob's answer
  JobState state = JobState::kWaitingForWorkers;
  uint32_t slot_base = 0;  // first pool slot of the job's range
  // The job-relative slots this switch holds, at pool slots [slot_base, slot_base +
  // held_slots.count): all of spec.num_slots, or a shard's share (control::JobLayout). A
  // standalone controller's merged view of a job on several switches: all of them.
  control::SlotRange held_slots;
  uint32_t num_registered = 0;
  std::vector<JobWorkerInfo> workers;  // registered ranks, ascending
  JobCounters counters;
  std::chrono::milliseconds idle_for{0};  // since the last packet (or creation)
  std::string end_reason;                 // kEnded only
  // kEnded only: the job ended because a switch serving it became unreachable or forgot it
  // (restarted), not by anyone's decision (deleted, idle): a failure of the switch, which the
  // host path can stand in for (a worker's timeout then says UNAVAILABLE).
  bool switch_lost = false;
  // Callers waiting right now in the job's Barrier and Broadcast on the controller that
  // answered (its job service fills them in; a switch's own table has no such callers).
  uint32_t barrier_waiters = 0;
  uint32_t broadcast_waiters = 0;
};

// A standalone controller's view of one of its switches (RemoteSwitches health checks).
struct SwitchHealth {
  std::string address;
  bool up = true;
  // Since the switch was last seen changing state (up or down), or since the controller
  // started; at the last probe.
  std::chrono::milliseconds for_ms{0};
  std::string last_error;      // of the last failed probe ("" if none failed yet)
  uint64_t jobs_replaced = 0;  // jobs re-placed away from this switch
};

struct JobList {
  std::vector<JobInfo> jobs;  // live jobs, then recently ended ones (JobService jobs only)
  // Job 0, the reference session of a switch (spec.name "reference session"; num_workers 0
  // until a rank 0 registers; its slots are the whole pool, shared with the jobs above). Absent
  // from a standalone controller's list (each of its switches has its own).
  std::optional<JobInfo> reference_session;
  uint32_t pool_slots = 0;
  uint32_t free_slots = 0;
  uint32_t largest_free_range = 0;
  // A standalone controller's switches, in --switch order (empty from a switch).
  std::vector<SwitchHealth> switches;
  // A switch's data address (SwitchInfo ipv4 and udp_port: I/O thread 0's, ipv4 0 when it
  // listens on every interface), what a standalone controller gives a leaf as its parent
  // (with data_udp_ports). 0 from a standalone controller.
  uint32_t data_ipv4 = 0;
  uint16_t data_udp_port = 0;
  // The data port of each of the switch's I/O threads ([0] = data_udp_port); empty from a
  // standalone controller (or a switch older than leaves on several I/O threads).
  std::vector<uint16_t> data_udp_ports;
};

struct JobRegistration {
  uint32_t job_id = 0;
  std::string token{};
  // rank, ipv4, mac, udp_ports and the agreed parameters (protocol_version,
  // num_worker_threads, window_packets, elements_per_packet) are used; worker.num_workers
  // must be 0 or the job's (job 0: the session's, [1, max_workers]; session_id is echoed
  // only). udp_ports must list one port per worker thread (at least one).
  // num_workers and the agreed parameters must equal those of the job's first registration.
  WorkerRegistration worker;
};

// What a registered worker needs to send data.
struct JobWorkerGrant {
  SwitchInfo switch_info;  // num_slots = the job's slots; max_workers = the switch's (0 when
                           // it came through the JobService: the job's num_workers bounds it)
  uint32_t job_id = 0;
  uint32_t num_workers = 0;
  uint32_t elements_per_packet = 0;
  JobState state = JobState::kWaitingForWorkers;  // after this registration
  // A standalone controller's job: the placement this registration went into
  // (ShardAssignment::placement, from 1). After a re-placement every worker registers again;
  // a grant of an older placement is stale. 0 = a switch's own answer.
  uint32_t placement = 0;
};

// One (slot, set) of a job's aggregation state, for diagnostics (like the reference CLI's
// show_bitmap / show_statistics).
struct SlotSetInfo {
  uint64_t bitmap[4] = {0, 0, 0, 0};  // bit r of word r/64 = rank r counted in this set
  uint32_t counter = 0;               // workers still missing (0 = idle or complete)
  uint32_t num_elements = 0;
  int8_t exp0 = 0;
  int8_t exp1 = 0;
};
struct SlotInfo {
  uint32_t slot = 0;  // job-relative
  SlotSetInfo sets[2];
};

// What the control plane adds to a worker's failed call (rendezvous::Rendezvous::
// failure_explainer): text for its message ("; job 3 has ended: ...", or "" for nothing), and
// whether the failure is the switch's: the controller, the switch or a shard of the job cannot
// be reached, or a switch restarted and forgot the job. The worker then reports the call as
// UNAVAILABLE, the one code that says "the switch path is down, the host path may serve";
// every other code is the job's or the caller's (a rank that died, a deleted job, bad input).
struct FailureExplanation {
  std::string text;
  bool switch_unreachable = false;
};

// Job 0, the reference session (dataplane::JobTable::kReferenceJobId).
inline constexpr uint32_t kReferenceJobId = 0;

// What a worker of a job on several switches is told: shard 0's answer with each worker
// thread's route taken from the shard that serves it (whose address it carries). `shards[s]`
// is shard s's answer to the same registration, its ipv4 filled in. InternalError naming the
// shard that gives no port for one of its threads.
StatusOr<SwitchInfo> MergeShardAnswers(const std::vector<SwitchInfo>& shards);

// 32 lowercase hex digits from std::random_device: a job token (JobSpec::token) nobody chose.
std::string RandomToken();

class SwitchControl {
 public:
  virtual ~SwitchControl() = default;
  // Errors: InvalidArgument (a spec field out of range, named), AlreadyExists (spec.token was
  // given and another live job has it), ResourceExhausted (no free range of num_slots slots;
  // the message gives the largest free range).
  virtual StatusOr<JobInfo> CreateJob(const JobSpec& spec) = 0;
  // The controller-to-switch path: creates this switch's shard `assignment` of a job a
  // standalone controller placed (CreateJob's errors, and InvalidArgument when the
  // assignment is out of range or spec.switches differs from assignment.num_shards). Only a
  // switch holds shards; this default, which a standalone controller keeps (it assigns
  // shards itself), refuses with InvalidArgument naming the assignment's field.
  virtual StatusOr<JobInfo> CreateJobShard(const JobSpec& spec, const ShardAssignment& assignment);
  // Frees the job's slots at once; its workers' later datagrams are dropped (job_ended).
  // Errors: NotFound, PermissionDenied (wrong token), FailedPrecondition (already ended).
  virtual Status DeleteJob(uint32_t job_id, const std::string& token) = 0;
  // Registers a worker into job `reg.job_id`; the one registration entry point and one rule
  // (dataplane::JobTable::Admit): num_workers, rank, ports, the rank's earlier entry, address
  // conflicts, the agreed parameters and the job layout they give are checked alike for
  // every job; job 0 and service jobs differ only where the reference defines job 0:
  //
  // Job 0 (kReferenceJobId), the reference `UdpSession` rule: no token (reg.token must be
  // empty), worker.num_workers is the session's, rank 0 starts a new session (the reference
  // clears all worker state here), a rank registering again replaces its entry. The grant
  // carries the switch's SwitchInfo (num_slots = the whole pool), num_workers and state
  // kRunning (job 0 aggregates from rank 0's registration on); elements_per_packet is 0.
  // Errors: InvalidArgument (rank/num_workers out of range, bad ports, a token),
  // FailedPrecondition (rank > 0 with no session, or num_workers or another agreed
  // parameter of WorkerRegistration differs from the session's), AlreadyExists (address
  // used by another rank of the session).
  //
  // Other jobs. Errors: NotFound (unknown job), PermissionDenied (wrong token),
  // FailedPrecondition (job ended, num_workers differs from the job's, or an agreed parameter
  // differs from the job's first registration: the message names the field, both values and
  // both ranks, or the window does not fit the job's slots), InvalidArgument (rank >=
  // num_workers, bad ports),
  // AlreadyExists (rank already registered from another address — a second rank 0 or a
  // duplicate rank — or an address already used by another worker of any job). Registering
  // never resets or otherwise changes another worker's state. Repeating an identical
  // registration is OK (a retried RPC).
  virtual StatusOr<JobWorkerGrant> RegisterJobWorker(const JobRegistration& reg) = 0;
  // Errors: NotFound (never existed or forgotten; job 0 is not a listed job).
  virtual StatusOr<JobInfo> GetJob(uint32_t job_id) const = 0;
  virtual JobList ListJobs() const = 0;
  // Slots [first_slot, first_slot + count) of a job (job_id 0 = the reference UdpSession
  // session), clipped to the slots this switch holds (JobInfo::held_slots). Errors: NotFound, InvalidArgument (count 0 or
  // > 1024).
  virtual StatusOr<std::vector<SlotInfo>> InspectSlots(uint32_t job_id, uint32_t first_slot,
                                                       uint32_t count) const = 0;
  // Switch-wide counters (name, value), e.g. drops by reason.
  virtual std::vector<std::pair<std::string, uint64_t>> CounterValues() const = 0;
  // OK if `token` opens the live job `job_id`; NotFound, PermissionDenied, or
  // FailedPrecondition (ended, with the reason) otherwise. For job-scoped barriers.
  virtual Status CheckJobAccess(uint32_t job_id, const std::string& token) const = 0;
};

}  // namespace switchml::control

// The contract's names for the modules that use them throughout (the switch, the controller,
// the worker's job client): each says `using namespace control::contract;` instead of keeping
// its own list of using-declarations.
namespace switchml::control::contract {
using control::JobCounters;
using control::JobDataType;
using control::JobDataTypeName;
using control::JobInfo;
using control::JobList;
using control::SwitchHealth;
using control::JobRegistration;
using control::JobSpec;
using control::JobState;
using control::JobStateName;
using control::JobWorkerGrant;
using control::JobWorkerInfo;
using control::kClientProtocolVersion;
using control::kReferenceJobId;
using control::RandomToken;
using control::SlotInfo;
using control::SlotSetInfo;
using control::SwitchControl;
using control::SwitchInfo;
using control::ThreadRoute;
using control::WorkerRegistration;
}  // namespace switchml::control::contract
