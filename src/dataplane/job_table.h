// dataplane/job_table.h — the switch's table of jobs (several jobs per switch, issue 3).
//
// A job (controller/job_sink.h) has an id, a token, num_workers ranks, a packet size, an idle
// timeout and a contiguous range of num_slots slots in the switch's slot pool. Each job owns
// its own Aggregator (num_slots x elements_per_packet), so a packet can only ever touch the
// state of the job its *sender* is registered in: the switch identifies a datagram's job by
// its source (ipv4, port), never by a field of the packet, and packets carry job-relative
// slots in [0, num_slots) (what a reference client sends). Each worker socket belongs to
// exactly one job.
//
// Like SessionTable, a JobTable is an immutable snapshot: every change (create, register,
// end, expire) builds a new table from the current one, and the switch's I/O thread adopts it
// between bursts, so the per-packet lookup (Find) takes no lock. What must change per packet
// lives in the shared JobRuntime (the aggregator and single-writer counters).
//
//   JobTable empty(/*pool_slots=*/8192, /*max_workers=*/256, /*max_elements=*/1024);
//   uint32_t id;
//   auto t1 = JobTable::Create(empty, spec, "token-0123456789", Clock::now(), &id);
//   controller::JobWorkerGrant grant;
//   auto t2 = JobTable::Register(**t1, reg, &grant, now);
//   JobTable::Sender s;
//   if ((*t2)->Find(datagram.from, &s) && s.job->state == JobState::kRunning) { ... }
//
// Ended jobs (deleted or idle too long) are kept (at most kMaxEndedJobs, oldest forgotten
// first) without their aggregation state, so that GetJob can say why a job ended and so that
// their workers' late datagrams are counted as job_ended rather than unknown_sender; their
// addresses are free for new registrations.
//
// Thread-safety: a JobTable is immutable and may be read by any thread. JobRuntime: the
// aggregator and `io` fields belong to the switch's I/O thread; counters are single-writer
// atomics (the I/O thread writes with relaxed load+store, any thread may read); `activity`
// belongs to whoever holds the table writer's lock (SwitchServer's table mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/job_sink.h"
#include "dataplane/aggregator.h"
#include "dataplane/session_table.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::dataplane {

// Increments a counter that only one thread writes: a plain load and store (no locked
// instruction), so readers on other threads see a value that is never torn.
inline void Bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
  c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

struct AtomicJobCounters {
  std::atomic<uint64_t> received{0}, consumed{0}, multicast_rounds{0}, unicast_replies{0},
      duplicates_dropped{0}, late_duplicates_dropped{0}, size_mismatch{0}, slot_out_of_range{0}, too_large{0},
      not_running{0}, datagrams_sent{0};
  controller::JobCounters Snapshot() const;
};

// The mutable part of a job, shared by all table snapshots that contain it.
class JobRuntime {
 public:
  JobRuntime(uint32_t num_workers, Aggregator aggregator)
      : aggregator(std::move(aggregator)),
        rank_received(std::make_unique<std::atomic<uint64_t>[]>(num_workers)) {}

  Aggregator aggregator;  // I/O thread only
  AtomicJobCounters counters;
  std::unique_ptr<std::atomic<uint64_t>[]> rank_received;  // [num_workers]
  // Idle tracking, by the table writer (ExpireIdle): the received count last seen and when it
  // last changed.
  struct Activity {
    uint64_t seen = 0;
    TimePoint last_active{};
  } activity;
};

class JobTable {
 public:
  static constexpr size_t kMaxEndedJobs = 32;
  // Most live (not ended) jobs at once; Create refuses more with ResourceExhausted.
  static constexpr size_t kMaxLiveJobs = 1024;
  static constexpr size_t kMaxNameLength = 64;

  struct Job {
    uint32_t job_id = 0;
    controller::JobSpec spec;  // includes the token
    uint32_t slot_base = 0;
    controller::JobState state = controller::JobState::kWaitingForWorkers;
    std::vector<SessionTable::Worker> workers;  // [num_workers]; unregistered ranks unset
    uint32_t num_registered = 0;
    // What the job's first registration gave for the parameters every worker must share
    // (CheckAgreedParams); valid once num_registered > 0.
    AgreedParams agreed;
    std::shared_ptr<JobRuntime> runtime;  // null once ended
    std::string end_reason;               // ended jobs only
    controller::JobCounters final_counters;  // ended jobs only: counters when it ended
  };
  // The result of a hot-path lookup: pointers into the table (valid while it lives).
  struct Sender {
    const Job* job = nullptr;
    uint32_t rank = 0;
    uint16_t thread = 0;
  };

  // The empty table for a pool of `pool_slots` slots, jobs of up to `max_workers` workers and
  // packets of up to `max_elements` elements (the switch's configuration).
  JobTable(uint32_t pool_slots, uint32_t max_workers, uint32_t max_elements,
           AggregatorOptions aggregator_options = {})
      : pool_slots_(pool_slots),
        max_workers_(max_workers),
        max_elements_(max_elements),
        aggregator_options_(aggregator_options) {}

  // Adds a job with the next job id (returned in *job_id), spec.token = `token` unless the
  // spec has one, its slot range the first free range that fits, and a new zeroed
  // aggregator. `now` starts its idle clock. Errors: InvalidArgument (num_workers,
  // num_slots, elements_per_packet, idle_timeout, token or name out of range — the message
  // names the field and value), ResourceExhausted (no free range of num_slots slots; the
  // message says how many are free and the largest range; or kMaxLiveJobs jobs are live) or
  // from Aggregator::Create.
  static StatusOr<std::shared_ptr<const JobTable>> Create(const JobTable& current,
                                                          controller::JobSpec spec,
                                                          const std::string& token,
                                                          TimePoint now, uint32_t* job_id);

  // Registers a worker (see JobSink::RegisterJobWorker for the errors). The job's first
  // registration fixes num_workers and the agreed parameters (controller::WorkerRegistration);
  // a later one with other values is refused (FailedPrecondition, CheckAgreedParams). On success fills
  // *grant (switch_info is left for the caller). A registration is activity: the job's idle
  // clock restarts at `now`, so a job whose last rank registers just before idle_timeout is
  // not torn down before its workers send anything.
  static StatusOr<std::shared_ptr<const JobTable>> Register(
      const JobTable& current, const controller::JobRegistration& reg,
      controller::JobWorkerGrant* grant, TimePoint now);

  // Ends a live job: frees its range at once and drops its aggregation state (once no
  // snapshot refers to it). Errors: NotFound, FailedPrecondition (already ended).
  static StatusOr<std::shared_ptr<const JobTable>> End(const JobTable& current, uint32_t job_id,
                                                       const std::string& reason);

  // Updates each live job's activity from its received counter and ends every job with an
  // idle_timeout that has received nothing for longer than it (reason "idle for X ms ...").
  // Returns the new table, or nullptr when no job expired; appends expired ids to *expired.
  // Must be called by the table writer (it updates JobRuntime::activity).
  static std::shared_ptr<const JobTable> ExpireIdle(const JobTable& current, TimePoint now,
                                                    std::vector<uint32_t>* expired);

  // NotFound (unknown), PermissionDenied (token differs), FailedPrecondition (ended) — the
  // check a registration, a delete and the job-scoped sync calls make.
  Status CheckAccess(uint32_t job_id, const std::string& token) const;

  const Job* FindJob(uint32_t job_id) const;
  // Info as the controller reports it (token cleared). `now` gives idle_for; the caller must
  // be the table writer (it reads JobRuntime::activity).
  controller::JobInfo Describe(const Job& job, TimePoint now) const;
  controller::JobList List(TimePoint now) const;

  // The hot-path lookup by source address: one or two probes, no allocation.
  bool Find(const transport::Endpoint& from, Sender* out) const {
    if (index_.empty()) return false;
    const uint64_t key = Key(from.ipv4, from.port);
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> index_shift_);
    while (true) {
      const Entry& e = index_[i];
      if (e.key == key) {
        *out = Sender{&jobs_[e.job_index], e.rank, e.thread};
        return true;
      }
      if (e.key == 0) return false;
      i = (i + 1) & (index_.size() - 1);
    }
  }

  const std::vector<Job>& jobs() const { return jobs_; }  // live jobs first, by id
  uint32_t pool_slots() const { return pool_slots_; }
  uint32_t free_slots() const;
  uint32_t largest_free_range() const;
  // Largest num_workers among live jobs (0 if none): bounds a burst's fan-out.
  uint32_t max_job_workers() const { return max_job_workers_; }

 private:
  struct Entry {
    uint64_t key = 0;  // 0 = empty
    uint32_t job_index = 0;
    uint32_t rank = 0;
    uint16_t thread = 0;
  };
  static uint64_t Key(uint32_t ipv4, uint16_t port) {
    return (uint64_t{1} << 63) | (uint64_t{ipv4} << 16) | port;
  }
  // Finds a free range of `n` slots (first fit); false if none.
  bool Allocate(uint32_t n, uint32_t* base) const;
  // Rebuilds index_ and max_job_workers_ from jobs_ (live jobs first, sorted by id).
  void Rebuild();

  uint32_t pool_slots_;
  uint32_t max_workers_;
  uint32_t max_elements_;
  AggregatorOptions aggregator_options_;
  uint32_t next_job_id_ = 1;
  uint32_t max_job_workers_ = 0;
  std::vector<Job> jobs_;
  std::vector<Entry> index_;  // power-of-two size, at most half full; empty if no workers
  uint32_t index_shift_ = 64;
};

// 32 lowercase hex digits from std::random_device (a job token).
std::string RandomToken();

}  // namespace switchml::dataplane
