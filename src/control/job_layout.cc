#include "control/job_layout.h"

#include <algorithm>
#include <limits>

namespace switchml::control {

namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

Status OutOfRange(const char* field, uint32_t value, uint32_t lo, uint32_t hi) {
  return InvalidArgumentError(std::string(field) + " must be in [" + Str(lo) + ", " + Str(hi) +
                              "], got " + Str(value));
}

}  // namespace

StatusOr<JobLayout> JobLayout::Make(const Params& p) {
  if (p.job_slots < 1 || p.job_slots > kMaxJobSlots) {
    return OutOfRange("job slots", p.job_slots, 1, kMaxJobSlots);
  }
  if (p.num_shards < 1 || p.num_shards > std::min(kMaxShards, p.job_slots)) {
    return OutOfRange("num_shards", p.num_shards, 1, std::min(kMaxShards, p.job_slots));
  }
  if (p.worker_threads < 1 || p.worker_threads > kMaxWorkerThreads) {
    return OutOfRange("num_worker_threads", p.worker_threads, 1, kMaxWorkerThreads);
  }
  if (p.window_packets < p.worker_threads || p.window_packets % p.worker_threads != 0) {
    return InvalidArgumentError("window_packets must be a positive multiple of "
                                "num_worker_threads=" + Str(p.worker_threads) + ", got " +
                                Str(p.window_packets));
  }
  const JobLayout layout(p);
  const uint32_t w = layout.thread_window();
  uint32_t fits = std::numeric_limits<uint32_t>::max();  // the largest w every shard holds
  uint32_t worst = 0;
  for (uint32_t s = 0; s < p.num_shards; ++s) {
    const uint32_t m = layout.ShardThreads(s).size();
    if (m == 0) continue;
    const uint32_t holds = layout.ShardSlots(s).count / m;
    if (holds < fits) {
      fits = holds;
      worst = s;
    }
  }
  if (w > fits) {
    const SlotRange r = layout.ShardSlots(worst);
    const uint32_t m = layout.ShardThreads(worst).size();
    std::string msg = "window_packets=" + Str(p.window_packets) + " (" + Str(p.worker_threads) +
                      " threads x " + Str(w) + " slots) does not fit the job's " +
                      Str(p.job_slots) + " slots";
    if (p.num_shards > 1) {
      msg += ": shard " + Str(worst) + " of " + Str(p.num_shards) + " holds " + Str(r.count) +
             " slots for " + Str(m) + " threads (needs " + Str(uint64_t{m} * w) + ")";
    }
    msg += fits == 0 ? "; the job has too few slots for this many threads"
                     : "; the largest window that fits is " + Str(uint64_t{fits} * p.worker_threads);
    return FailedPreconditionError(msg);
  }
  return layout;
}

JobLayout JobLayout::Whole(uint32_t job_slots) {
  return JobLayout(Params{.job_slots = job_slots, .num_shards = 1, .worker_threads = 1,
                          .window_packets = job_slots});
}

SlotRange JobLayout::ShardSlots(uint32_t job_slots, uint32_t shard, uint32_t num_shards) {
  if (num_shards == 0 || shard >= num_shards) return SlotRange{job_slots, 0};
  // Rounded up like ShardThreads, so the shards with an extra thread also get the extra slot.
  const uint64_t k = num_shards;
  const auto first = uint32_t((shard * uint64_t{job_slots} + k - 1) / k);
  const auto end = uint32_t(((shard + 1) * uint64_t{job_slots} + k - 1) / k);
  return SlotRange{first, end - first};
}

uint32_t JobLayout::SlotsFor(uint32_t num_shards, uint32_t worker_threads,
                             uint32_t window_packets) {
  if (num_shards == 0 || worker_threads == 0) return window_packets;
  // Between the window (every thread's slots) and K x ceil(n / K) x w (every shard holding as
  // many as shard 0, which has the most threads): the first that Make accepts.
  const uint64_t w = window_packets / worker_threads;
  const uint64_t most =
      num_shards * ((uint64_t{worker_threads} + num_shards - 1) / num_shards) * w;
  for (uint64_t slots = std::max<uint64_t>(window_packets, num_shards); slots < most; ++slots) {
    if (Make({.job_slots = uint32_t(slots), .num_shards = num_shards,
              .worker_threads = worker_threads, .window_packets = window_packets})
            .ok()) {
      return uint32_t(slots);
    }
  }
  return uint32_t(std::max<uint64_t>(most, num_shards));
}

SlotRange JobLayout::ShardSlots(uint32_t shard) const {
  return ShardSlots(p_.job_slots, shard, p_.num_shards);
}

ThreadRange JobLayout::ShardThreads(uint32_t shard) const {
  const uint64_t n = p_.worker_threads, k = p_.num_shards;
  if (shard >= k) return ThreadRange{uint32_t(n), uint32_t(n)};
  return ThreadRange{uint32_t((shard * n + k - 1) / k), uint32_t(((shard + 1) * n + k - 1) / k)};
}

uint32_t JobLayout::ShardOf(uint32_t thread) const {
  return uint32_t(uint64_t{thread} * p_.num_shards / p_.worker_threads);
}

SlotRange JobLayout::ThreadSlots(uint32_t thread) const {
  const uint32_t s = ShardOf(thread);
  const uint32_t w = thread_window();
  return SlotRange{ShardSlots(s).first + (thread - ShardThreads(s).begin) * w, w};
}

uint32_t JobLayout::ThreadOfSlot(uint32_t slot) const {
  if (slot >= p_.job_slots) return p_.worker_threads;
  // The shard whose range holds the slot: near slot * K / S, the ranges being rounded up.
  auto s = uint32_t(uint64_t{slot} * p_.num_shards / p_.job_slots);
  while (s > 0 && ShardSlots(s).first > slot) --s;
  while (ShardSlots(s).end() <= slot) ++s;
  const ThreadRange r = ShardThreads(s);
  const uint64_t t = r.begin + uint64_t{slot - ShardSlots(s).first} / thread_window();
  return t < r.end ? uint32_t(t) : p_.worker_threads;
}

uint32_t JobLayout::IoThreadOf(uint32_t thread, uint32_t io_threads) const {
  const ThreadRange r = ShardThreads(ShardOf(thread));
  if (io_threads <= 1 || r.size() == 0) return 0;
  return uint32_t(uint64_t{thread - r.begin} * io_threads / r.size());
}

SlotRange JobLayout::IoSlots(uint32_t shard, uint32_t io_thread, uint32_t io_threads) const {
  const SlotRange whole = ShardSlots(shard);
  if (io_threads == 0 || io_thread >= io_threads) return SlotRange{whole.end(), 0};
  const ThreadRange r = ShardThreads(shard);
  const uint64_t m = r.size();
  // Where I/O thread i's slots begin: at its first thread's, the shard's end when it has none.
  auto begin = [&](uint32_t i) -> uint32_t {
    if (i == 0) return whole.first;
    if (i >= io_threads || m == 0) return whole.end();
    const uint64_t first_thread = r.begin + (uint64_t{i} * m + io_threads - 1) / io_threads;
    return first_thread < r.end ? ThreadSlots(uint32_t(first_thread)).first : whole.end();
  };
  const uint32_t b = begin(io_thread), e = begin(io_thread + 1);
  return SlotRange{b, e - b};
}

std::string JobLayout::ToString() const {
  return Str(p_.job_slots) + " slots, " + Str(p_.num_shards) +
         (p_.num_shards == 1 ? " shard, " : " shards, ") + Str(p_.worker_threads) +
         " threads x " + Str(thread_window()) + " slots";
}

}  // namespace switchml::control
