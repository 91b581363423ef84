// dataplane/job_table.h — the switch's one table of jobs; the reference session is job 0.
//
// Every datagram the switch aggregates belongs to a job, and every job is a row of this
// table: its workers (WorkerEntry, worker_records.h), its slot range, its packet size, its
// state and a shared JobRuntime (aggregator and counters). The switch identifies a datagram's
// job by its source (ipv4, port), never by a field of the packet, and packets carry
// job-relative slots in [0, num_slots) (what a reference client sends), so a packet can only
// ever touch the state of the job its *sender* is registered in. SwitchCore::ProcessBurst
// (switch_core.cc) handles the packets of job 0 and of every service job on one code path.
//
// Two kinds of rows, one registration rule (Register; Admit holds every check, AdmissionRule
// the few places where the reference defines job 0 differently; docs/design.md, "Several
// jobs"):
//  * job 0, the reference session: always present (jobs_[0]), no token, slots = the whole
//    pool (its aggregation state is its own, so it reserves nothing and overlaps the ranges
//    of service jobs), packets of up to max_elements. As the reference `UdpSession` defines
//    it (RegisterSessionWorker is Register into job 0): rank 0 starts a new session (the workers are
//    forgotten, `epoch` increases and the row gets a new JobRuntime: zeroed aggregation state
//    and per-rank counts, job counters continued), other ranks join it; reference mode (no
//    ports) is allowed. It is
//    running as soon as rank 0 registered. It never ends and is not listed (jobs(), FindJob,
//    List and CheckAccess see service jobs only: the JobService knows no job 0).
//  * service jobs (switchml.v1.JobService, ids from 1): created with a spec and a token
//    (Create), a contiguous range of num_slots slots of the pool (first fit) and their own
//    Aggregator; every rank registers once with its token and its ports (Register); running
//    once every rank registered; ended by DeleteJob or idle timeout (End, ExpireIdle).
// Address precedence when two rows claim the same source: a service job's (ipv4, port) (live,
// then ended newest first) before job 0's (ipv4, port), before job 0's reference-mode host.
//
// A JobTable is an immutable snapshot: every change (create, register, end, expire, a
// UdpSession) builds a new table from the current one, and the switch's I/O thread adopts it
// between bursts, so the per-packet lookup (Find) takes no lock. What must change per packet
// lives in the shared JobRuntime (the aggregator and single-writer counters).
//
//   auto empty = JobTable::CreateEmpty(/*pool_slots=*/8192, /*max_workers=*/256,
//                                      /*max_elements=*/1024);
//   auto t1 = JobTable::RegisterSessionWorker(**empty, udp_session_reg);   // job 0
//   uint32_t id;
//   auto t2 = JobTable::Create(**t1, spec, {}, "token-0123456789", Clock::now(), &id);
//   JobWorkerGrant grant;
//   auto t3 = JobTable::Register(**t2, reg, &grant, now);
//   JobTable::Sender s;
//   if ((*t3)->Find(datagram.from, &s) && s.job->state == JobState::kRunning) { ... }
//
// Ended jobs (deleted or idle too long) are kept (at most kMaxEndedJobs, oldest forgotten
// first) without their aggregation state, so that GetJob can say why a job ended and so that
// their workers' late datagrams are counted as job_ended rather than unknown_sender; their
// addresses are free for new registrations.
//
// Thread-safety: a JobTable is immutable and may be read by any thread. JobRuntime: the
// aggregator and rank_received belong to the switch's I/O threads as writers (each to its own
// slots and share); counters are single-writer atomics (each I/O thread writes its share with
// relaxed load+store, any thread may read); `activity` belongs to whoever holds the table
// writer's lock (SwitchServer's table mutex; never an I/O thread).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "control/job_layout.h"
#include "dataplane/aggregator.h"
#include "dataplane/switch_config.h"
#include "control/switch_control.h"
#include "dataplane/worker_records.h"
#include "dataplane/switch_counters.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::dataplane {

// Increments a counter that only one thread writes: a plain load and store (no locked
// instruction), so readers on other threads see a value that is never torn.
inline void Bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// JobCounters as single-writer atomics (control::SWITCHML_JOB_COUNTERS, the one list).
struct AtomicJobCounters {
#define SWITCHML_ATOMIC_JOB_COUNTER(name) std::atomic<uint64_t> name{0};
  SWITCHML_JOB_COUNTERS(SWITCHML_ATOMIC_JOB_COUNTER)
#undef SWITCHML_ATOMIC_JOB_COUNTER
  JobCounters Snapshot() const;
};

// The mutable part of a job, shared by all table snapshots that contain it: everything the
// packet path changes for the job, in one place. With several switch I/O threads each thread
// writes only its own share of the counters (counters_of(i), rank_received_of(i): separate
// cache lines) and only the aggregator slots it owns (JobTable::Job::OwnsSlot); readers sum
// the shares (Counters(), RankReceived()).
// Job 0 gets a new JobRuntime for each session (JobTable::RegisterSessionWorker) that continues
// counting into the previous session's counter shares (ContinuingCounters), so its job
// counters span the switch's life while its aggregator and per-rank counts start at zero.
class JobRuntime {
 private:
  struct alignas(64) IoShare {
    AtomicJobCounters counters;
  };
  // rank_received entries per I/O thread: max_ranks rounded up to a cache line, plus one line
  // of padding, so that no two threads' counters share a line.
  static uint32_t RankStride(uint32_t max_ranks) { return (max_ranks + 7) / 8 * 8 + 8; }
  std::shared_ptr<IoShare[]> shares_;  // [io_threads]; may be shared with later runtimes
  std::unique_ptr<std::atomic<uint64_t>[]> rank_rx_;

 public:
  // A runtime with zeroed counters, or (`continuing` non-null, with the same io_threads) one
  // that counts on in `continuing`'s job counters; rank_received always starts at zero.
  JobRuntime(uint32_t max_ranks, Aggregator aggregator, uint32_t io_threads = 1,
             const JobRuntime* continuing = nullptr)
      : shares_(continuing != nullptr && continuing->io_threads == io_threads
                    ? continuing->shares_
                    : std::shared_ptr<IoShare[]>(new IoShare[io_threads])),
        rank_rx_(std::make_unique<std::atomic<uint64_t>[]>(size_t{io_threads} *
                                                           RankStride(max_ranks))),
        aggregator(std::move(aggregator)),
        max_ranks(max_ranks),
        io_threads(io_threads),
        counters(shares_[0].counters),
        rank_received(rank_rx_.get()) {
    activity.ranks.resize(max_ranks);
  }
  JobRuntime(const JobRuntime&) = delete;
  JobRuntime& operator=(const JobRuntime&) = delete;

  Aggregator aggregator;  // I/O threads only, each on the slots it owns
  const uint32_t max_ranks;  // num_workers; max_workers for job 0, whose sessions vary
  const uint32_t io_threads;
  // I/O thread 0's share, and its per-rank counts (for tests of one SwitchCore).
  AtomicJobCounters& counters;
  std::atomic<uint64_t>* const rank_received;  // [max_ranks]
  // I/O thread `io`'s share (io < io_threads).
  AtomicJobCounters& counters_of(uint32_t io) { return shares_[io].counters; }
  std::atomic<uint64_t>* rank_received_of(uint32_t io) {
    return rank_rx_.get() + size_t{io} * RankStride(max_ranks);
  }
  // Sums over the I/O threads, for any thread.
  JobCounters Counters() const;
  uint64_t Received() const;
  uint64_t RankReceived(uint32_t rank) const;
  // Idle tracking, by the table writer (ExpireIdle): the received count last seen and when it
  // last changed, for the job and for each rank.
  struct Activity {
    uint64_t seen = 0;
    TimePoint last_active{};
    struct Rank {
      uint64_t seen = 0;
      TimePoint last_active{};
    };
    std::vector<Rank> ranks;  // [max_ranks]
    // A registration or the job's creation at `now`: counts as activity of the job (and rank).
    void Touch(TimePoint now, uint32_t rank) {
      last_active = now;
      if (rank < ranks.size()) ranks[rank].last_active = now;
    }
  } activity;
};

class JobTable {
 public:
  static constexpr size_t kMaxEndedJobs = 32;
  // Most live (not ended) service jobs at once; Create refuses more with ResourceExhausted.
  static constexpr size_t kMaxLiveJobs = 1024;
  static constexpr size_t kMaxNameLength = 64;
  // The reference session's job id.
  static constexpr uint32_t kReferenceJobId = 0;
  // Sender::rank of a datagram from a leaf job's parent switch (its totals; Uplink).
  static constexpr uint32_t kParentRank = 0xFFFFFFFF;

  struct Job {
    uint32_t job_id = 0;  // 0 = the reference session
    JobSpec spec;         // includes the token (none for job 0)
    // The shard of a job a standalone controller placed on several switches (the default: a
    // job this switch serves alone; always for job 0).
    control::ShardAssignment assignment;
    uint32_t slot_base = 0;
    JobState state = JobState::kWaitingForWorkers;
    std::vector<WorkerEntry> workers;  // [num_workers]; unregistered ranks unset
    uint32_t num_registered = 0;
    // What the job's first registration (job 0: rank 0's) gave for the parameters every
    // worker must share (CheckAgreedParams); valid once num_registered > 0.
    AgreedParams agreed;
    // A leaf switch of a two-level job registered as a worker (WorkerRegistration::leaf): its
    // threads may share a port, so results go to each worker's port for the slot's thread
    // (the layout's), not the sender's thread.
    bool leaf_workers = false;
    std::shared_ptr<JobRuntime> runtime;  // null once ended
    // The switch-wide counter a packet with slot >= num_slots is counted under:
    // slot_out_of_range for job 0, job_slot_out_of_range for service jobs (switch_counters.h).
    uint64_t SwitchCounters::*slot_out_of_range_counter = &SwitchCounters::job_slot_out_of_range;
    // Job 0: changes exactly when rank 0 starts a new session (0 = never had one), and the
    // session id of rank 0's request (informative). Always 0 for service jobs.
    uint64_t epoch = 0;
    uint64_t session_id = 0;
    std::string end_reason;                  // ended jobs only
    JobCounters final_counters;  // ended jobs only: counters when it ended
    // The job-relative slots this switch holds: all of the job's, or a shard's share
    // (control::JobLayout::ShardSlots), at pool slots [slot_base, slot_base + held.count); the
    // job's aggregator holds exactly these, slot x at index x - held.first.
    control::SlotRange held;
    // How the job's worker threads map onto slots, shards and I/O threads (control/job_layout.h):
    // from the agreed parameters once a worker registered its threads, JobLayout::Whole (every
    // slot at I/O thread 0) before that and for reference-mode workers.
    control::JobLayout layout = control::JobLayout::Whole(1);
    // Slot ownership among the switch's I/O threads (docs/design.md, "Several I/O threads"),
    // from `layout`: I/O thread i owns the job-relative slots [io_slot_begin[i],
    // io_slot_begin[i + 1]) (JobLayout::IoSlots); none owns a slot outside `held`.
    std::array<uint32_t, SwitchConfig::kMaxIoThreads + 1> io_slot_begin{};
    bool OwnsSlot(uint32_t io_thread, uint32_t slot) const {
      return slot >= io_slot_begin[io_thread] && slot < io_slot_begin[io_thread + 1];
    }
    // The shard of the job this switch is (0 of 1 unless a controller placed it on several).
    uint32_t shard() const { return assignment.num_shards > 1 ? assignment.shard : 0; }
    // A leaf of a two-level job (control::Uplink): its parent, or none.
    const control::Uplink& uplink() const { return assignment.uplink; }
    // The I/O threads that serve the job: the switch's (a leaf's too: each I/O thread sends
    // its slots' rounds up and takes their totals on its own port, control::Uplink).
    uint32_t io_threads = 1;
  };
  // The result of a hot-path lookup: pointers into the table (valid while it lives).
  struct Sender {
    const Job* job = nullptr;
    uint32_t rank = 0;  // kParentRank: the job's parent switch (a leaf's totals)
    uint16_t thread = kNoThread;  // index into the worker's udp_ports, or kNoThread
  };

  // The table for a pool of `pool_slots` slots, jobs of up to `max_workers` workers and
  // packets of up to `max_elements` elements (the switch's configuration), with no service
  // job and a job 0 without a session. CreateEmpty also allocates job 0's aggregation state
  // (pool_slots x max_elements; errors from Aggregator::Create); a table built with the
  // constructor gets it at its first RegisterSessionWorker.
  // `io_threads` is the switch's I/O thread count (SwitchConfig::io_threads): rows get their
  // slot ownership (Job::io_slot_begin) and runtimes their per-thread counters for it.
  static StatusOr<std::shared_ptr<const JobTable>> CreateEmpty(
      uint32_t pool_slots, uint32_t max_workers, uint32_t max_elements,
      AggregatorOptions aggregator_options = {}, uint32_t io_threads = 1);
  JobTable(uint32_t pool_slots, uint32_t max_workers, uint32_t max_elements,
           AggregatorOptions aggregator_options = {}, uint32_t io_threads = 1);

  // Applies a reference `UdpSession` registration to job 0 (docs/protocol.md#session-setup,
  // for the software switch):
  //  * rank 0 starts a new session: all of job 0's workers are forgotten, num_workers is taken
  //    from the request, job 0's epoch increases and its row gets a new JobRuntime (a zeroed
  //    aggregator for the new ownership, per-rank counts from zero, the job counters continued:
  //    JobRuntime's `continuing`), so no I/O thread ever clears state another may still be
  //    writing (docs/design.md, "New session of job 0"); the old runtime goes when the last
  //    table holding it does;
  //  * any other rank joins the current session and must announce the same num_workers and
  //    the same agreed parameters as rank 0 (protocol_version, num_worker_threads,
  //    window_packets, elements_per_packet; CheckAgreedParams);
  //  * registering a rank again replaces its previous entry.
  // Addresses are checked against job 0's other ranks only (a service job's (ipv4, port)
  // takes precedence in Find). Errors (nothing changes on error):
  //  InvalidArgument     num_workers not in [1, max_workers]; rank >= num_workers; more than
  //                      64 udp_ports; a port of 0; a port listed twice
  //  FailedPrecondition  rank > 0 with no session yet, or num_workers or an agreed parameter
  //                      differs from the session's (rank 0's)
  //  AlreadyExists       another rank already uses the same (ipv4, port), or one of the two
  //                      workers is in reference mode on the same ipv4
  //  and Aggregator::Create's, for a table whose job 0 has no aggregation state yet.
  static StatusOr<std::shared_ptr<const JobTable>> RegisterSessionWorker(
      const JobTable& current, const WorkerRegistration& reg);

  // Adds a service job with the next job id (returned in *job_id), spec.token = `token`
  // unless the spec has one, its slot range the first free range that fits (a shard: its
  // share of the job's slots, control::JobLayout::ShardSlots), and a new zeroed aggregator.
  // `shard` is the default for a job this switch serves alone, or a standalone controller's
  // assignment; spec.switches must equal shard.num_shards. With shard.uplink the job is a
  // leaf of a two-level job: its aggregator holds completed rounds for the parent
  // (AggregatorOptions::hold_completed_rounds), datagrams from the parent's endpoints are its
  // totals, and its I/O threads serve it as any job's; InvalidArgument for a leaf without
  // parent_ports (or a 0 among them), AlreadyExists when another live job has one of the same
  // parent endpoints (the endpoint is how the leaf tells its totals apart) or a worker of a
  // live job registered one of those addresses. `now` starts its idle clock. Errors: InvalidArgument (num_workers,
  // num_slots, elements_per_packet, idle_timeout, token or name out of range — the message
  // names the field and value), AlreadyExists (spec.token was given and another live job
  // has it; the message does not say which), ResourceExhausted (no free range of num_slots slots; the
  // message says how many are free and the largest range; or kMaxLiveJobs jobs are live) or
  // from Aggregator::Create.
  static StatusOr<std::shared_ptr<const JobTable>> Create(const JobTable& current,
                                                          JobSpec spec,
                                                          const control::ShardAssignment& shard,
                                                          const std::string& token,
                                                          TimePoint now, uint32_t* job_id);

  // Registers a worker into job reg.job_id (see SwitchControl::RegisterJobWorker for the
  // errors). Job 0 takes no token and follows RegisterSessionWorker's rule (the grant says
  // kRunning, num_slots = the pool, elements_per_packet 0; `now` is unused). A service
  // job's first registration fixes num_workers and the agreed parameters
  // (WorkerRegistration); a later one with other values is refused (FailedPrecondition,
  // CheckAgreedParams). On success fills *grant (switch_info is left for the caller). A
  // registration is activity: the job's idle clock restarts at `now`, so a job whose last
  // rank registers just before idle_timeout is not torn down before its workers send
  // anything.
  static StatusOr<std::shared_ptr<const JobTable>> Register(
      const JobTable& current, const JobRegistration& reg,
      JobWorkerGrant* grant, TimePoint now);

  // Ends a live service job: frees its range at once and drops its aggregation state (once
  // no snapshot refers to it). Errors: NotFound (job 0 included), FailedPrecondition
  // (already ended).
  static StatusOr<std::shared_ptr<const JobTable>> End(const JobTable& current, uint32_t job_id,
                                                       const std::string& reason);

  // Updates each live service job's activity from its received counter and ends every job
  // with an idle_timeout that has received nothing for longer than it (reason "idle for X ms
  // ..."). Job 0's per-rank activity is updated too (workers[].idle_for; a rank's clock starts
  // at the first sweep that sees it), and job 0 never ends. Returns the new table, or nullptr
  // when no job expired; appends expired ids to *expired. Must be called by the table writer
  // (it updates JobRuntime::activity).
  static std::shared_ptr<const JobTable> ExpireIdle(const JobTable& current, TimePoint now,
                                                    std::vector<uint32_t>* expired);

  // NotFound (unknown, or 0), PermissionDenied (token differs), FailedPrecondition (ended) —
  // the check a registration, a delete and the job-scoped sync calls make.
  Status CheckAccess(uint32_t job_id, const std::string& token) const;

  // A service job by id; nullptr if unknown (and for 0: see reference()).
  const Job* FindJob(uint32_t job_id) const;
  // Job 0, the reference session (spec.num_workers == 0 until rank 0 registers).
  const Job& reference() const { return jobs_[0]; }
  // Info as the controller reports it (token cleared). `now` gives idle_for; the caller must
  // be the table writer (it reads JobRuntime::activity).
  JobInfo Describe(const Job& job, TimePoint now) const;
  JobList List(TimePoint now) const;  // service jobs in `jobs`, job 0 in reference_session

  // The hot-path lookup by source address, for every job: one probe for a (host, port)
  // entry, a second one for a reference-mode host only when the first misses and job 0 has
  // such a worker. No allocation. Returns false for an unknown sender.
  bool Find(const transport::Endpoint& from, Sender* out) const {
    const Entry* e = Probe(PortKey(from.ipv4, from.port));
    if (e == nullptr) {
      if (!has_host_keys_) return false;
      e = Probe(HostKey(from.ipv4));
      if (e == nullptr) return false;
    }
    *out = Sender{&jobs_[e->job_index], e->rank, e->thread};
    return true;
  }

  // Service jobs: live ones first, by id, then ended ones, newest first.
  std::span<const Job> jobs() const { return std::span<const Job>(jobs_).subspan(1); }
  uint32_t pool_slots() const { return pool_slots_; }
  uint32_t max_workers() const { return max_workers_; }
  uint32_t io_threads() const { return io_threads_; }
  uint32_t free_slots() const;
  uint32_t largest_free_range() const;
  // Largest num_workers among live jobs, job 0 included (0 if none): bounds a burst's
  // fan-out.
  uint32_t max_job_workers() const { return max_job_workers_; }

 private:
  struct Entry {
    uint64_t key = 0;  // 0 = empty
    uint32_t job_index = 0;
    uint32_t rank = 0;
    uint16_t thread = kNoThread;
  };
  // Bit 63 marks an occupied entry, bit 48 a (host, port) key, bits 47..16 the IPv4 address.
  static uint64_t PortKey(uint32_t ipv4, uint16_t port) {
    return (uint64_t{1} << 63) | (uint64_t{1} << 48) | (uint64_t{ipv4} << 16) | port;
  }
  static uint64_t HostKey(uint32_t ipv4) { return (uint64_t{1} << 63) | (uint64_t{ipv4} << 16); }
  const Entry* Probe(uint64_t key) const {
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> index_shift_);
    while (true) {
      const Entry& e = index_[i];
      if (e.key == key) return &e;
      if (e.key == 0) return nullptr;
      i = (i + 1) & (index_.size() - 1);
    }
  }
  // Job 0's row with no session, and its aggregation state if `runtime` is set.
  Job ReferenceJob(std::shared_ptr<JobRuntime> runtime) const;
  // The parts of the one registration rule in which job 0 (the reference UdpSession rule)
  // and service jobs differ; everything else is Admit.
  struct AdmissionRule {
    // Job 0: a rank registering again replaces its entry (a restarted reference client).
    // Jobs: a rank registers once; only an identical repeat (a retried RPC) is accepted.
    bool rank_replaces = false;
    // Jobs: every worker lists its threads' UDP ports. Job 0: a worker without ports is in
    // reference mode (replies go to the port its packet came from).
    bool ports_required = true;
    // Job 0 aggregates from its first registration (the reference does not wait); a job runs
    // once every rank has registered.
    bool running_at_first = false;
    // Jobs: an address is unique among every live service job's workers; job 0's among its
    // own ranks (a service job's address wins over job 0's in Find).
    bool across_jobs = true;
    const char* kind = "job";  // what every worker belongs to, for CheckAgreedParams
  };
  // Whether `job` (as it would be after the registration's session start, for job 0) admits
  // `w`: num_workers, rank, ports, the rank's old entry, address conflicts, the agreed
  // parameters and the layout they give. `scope` names the job in messages ("job 3", "the
  // session").
  Status Admit(const Job& job, const WorkerRegistration& w, const AdmissionRule& rule,
               const std::string& scope) const;
  // Records the admitted `w` in `j` (the first registration fixes the agreed parameters).
  static void Admitted(Job& j, const WorkerRegistration& w, const AdmissionRule& rule);
  // Finds a free range of `n` slots (first fit); false if none.
  bool Allocate(uint32_t n, uint32_t* base) const;
  // Sorts the service jobs (live first, by id) and rebuilds index_, has_host_keys_ and
  // max_job_workers_ from jobs_.
  void Rebuild();
  // Sets job.layout and job.io_slot_begin from its agreed parameters, its shard and
  // io_threads_.
  void ApplyLayout(Job& job) const;
  void Insert(uint64_t key, uint32_t job_index, uint32_t rank, uint16_t thread);

  uint32_t pool_slots_;
  uint32_t max_workers_;
  uint32_t max_elements_;
  AggregatorOptions aggregator_options_;
  uint32_t io_threads_ = 1;
  uint32_t next_job_id_ = 1;
  uint32_t max_job_workers_ = 0;
  std::vector<Job> jobs_;  // [0] = job 0, then the service jobs (see jobs())
  // Power-of-two size (at least 16), at most half full.
  std::vector<Entry> index_;
  uint32_t index_shift_ = 64;
  bool has_host_keys_ = false;  // some worker of job 0 is in reference mode
};


}  // namespace switchml::dataplane
