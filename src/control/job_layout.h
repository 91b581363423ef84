// control/job_layout.h — how one job's worker threads, switch slots, shards and switch I/O
// threads map onto each other. The only code anywhere that computes this mapping: the client
// (which slots each of its threads uses), the switch (which I/O thread owns which slots, which
// port serves which thread), the controller (which shard serves which thread) and the test
// cluster and benchmarks all ask a JobLayout.
//
// A job has S slots per set (JobSpec::num_slots), is served by K >= 1 switches (shards), and
// each of its workers runs n worker threads with a whole window of W packets (the parameters
// every worker registers and must share). Then:
//
//   shard s holds the job-relative slots [ceil(s*S/K), ceil((s+1)*S/K))  ShardSlots(s)
//     (known when the job is created: a shard reserves only its share of the slot pool)
//   worker thread t is served by shard t*K/n                              ShardOf(t)
//     (shard s serves the contiguous threads [ceil(s*n/K), ceil((s+1)*n/K)))  ShardThreads(s)
//   each thread uses w = W/n consecutive slots; the i-th thread of shard s   ThreadSlots(t)
//     starts at ShardSlots(s).first + i*w
//   a switch serving shard s with T I/O threads gives the shard's m threads  IoThreadOf(t, T)
//     to I/O thread (t - first thread of s) * T / m; I/O thread i owns the   IoSlots(s, i, T)
//     slots of its threads, the shard's last I/O thread also the rest of the shard's range.
//
// With K = 1 thread t uses slots [t*w, (t+1)*w): the layout of an unsharded job. A layout is
// valid (Make) when every shard's threads fit in its slots (m_s * w <= |ShardSlots(s)|).
// Workers that registered no threads (reference clients) get Whole(S): one thread that owns
// every slot, served by I/O thread 0.
//
//   SWITCHML_ASSIGN_OR_RETURN(JobLayout l, JobLayout::Make({.job_slots = 256, .num_shards = 2,
//                                                           .worker_threads = 4,
//                                                           .window_packets = 128}));
//   l.ShardOf(3);          // 1
//   l.ThreadSlots(3);      // {first 160, count 32}: shard 1 holds [128, 256)
//   l.IoThreadOf(3, 2);    // 1 (threads 2 and 3 on shard 1's two I/O threads)
#pragma once

#include <cstdint>
#include <string>

#include "switchml/status.h"

namespace switchml::control {

// Job-relative slots [first, first + count).
struct SlotRange {
  uint32_t first = 0;
  uint32_t count = 0;
  uint32_t end() const { return first + count; }
  bool Contains(uint32_t slot) const { return slot >= first && slot - first < count; }
  bool operator==(const SlotRange&) const = default;
};

// Worker threads [begin, end).
struct ThreadRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t size() const { return end - begin; }
  bool Contains(uint32_t t) const { return t >= begin && t < end; }
  bool operator==(const ThreadRange&) const = default;
};

class JobLayout {
 public:
  // Most shards of one job (a worker has at most kMaxWorkerThreads threads, so more would
  // serve nothing).
  static constexpr uint32_t kMaxShards = 64;
  static constexpr uint32_t kMaxWorkerThreads = 64;
  // Most slots per set of one job (wire::kMaxSlots: the slot field's range).
  static constexpr uint32_t kMaxJobSlots = 16384;

  struct Params {
    uint32_t job_slots = 0;       // S, [1, kMaxJobSlots]
    uint32_t num_shards = 1;      // K, [1, kMaxShards]
    uint32_t worker_threads = 1;  // n, [1, kMaxWorkerThreads]
    uint32_t window_packets = 0;  // W, a multiple of n
    bool operator==(const Params&) const = default;
  };
  // InvalidArgument naming the field when a parameter is out of range; FailedPrecondition
  // when a shard's threads do not fit in its slots (the message gives the largest window that
  // fits).
  static StatusOr<JobLayout> Make(const Params& p);
  // The layout of workers that registered no threads (reference clients, or no worker yet):
  // one thread with the whole window, shard 0 of 1. job_slots >= 1.
  static JobLayout Whole(uint32_t job_slots);
  // The slots shard `shard` of `num_shards` holds of a job of `job_slots` slots: what a shard
  // reserves when the job is created, before any worker says how many threads it runs.
  static SlotRange ShardSlots(uint32_t job_slots, uint32_t shard, uint32_t num_shards);
  // The fewest job slots with which every one of `num_shards` shards holds the windows of its
  // share of `worker_threads` threads (window_packets / worker_threads slots each): what to
  // create a job on several switches with. window_packets when num_shards divides the threads.
  static uint32_t SlotsFor(uint32_t num_shards, uint32_t worker_threads, uint32_t window_packets);

  uint32_t job_slots() const { return p_.job_slots; }
  uint32_t num_shards() const { return p_.num_shards; }
  uint32_t worker_threads() const { return p_.worker_threads; }
  uint32_t window_packets() const { return p_.window_packets; }
  // w: slots per worker thread.
  uint32_t thread_window() const { return p_.window_packets / p_.worker_threads; }

  SlotRange ShardSlots(uint32_t shard) const;
  ThreadRange ShardThreads(uint32_t shard) const;
  uint32_t ShardOf(uint32_t thread) const;
  SlotRange ThreadSlots(uint32_t thread) const;
  // The worker thread whose slots hold `slot`; worker_threads() for a slot no thread uses
  // (above a shard's threads' windows, or outside the job).
  uint32_t ThreadOfSlot(uint32_t slot) const;
  // The I/O thread, of `io_threads` >= 1 of the switch serving the thread's shard, that owns
  // the thread's slots.
  uint32_t IoThreadOf(uint32_t thread, uint32_t io_threads) const;
  // The slots I/O thread `io_thread` of `io_threads` owns on the switch serving `shard`
  // (possibly empty); together they are exactly ShardSlots(shard).
  SlotRange IoSlots(uint32_t shard, uint32_t io_thread, uint32_t io_threads) const;

  // "S slots, K shards, n threads x w slots" (for messages).
  std::string ToString() const;
  bool operator==(const JobLayout&) const = default;

 private:
  explicit JobLayout(const Params& p) : p_(p) {}
  Params p_;
};

}  // namespace switchml::control
