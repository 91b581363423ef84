// dataplane/aggregator.h — the switch's aggregation state machine for one job
// (docs/protocol.md#processing-one-packet).
//
// This is the logic the reference implements in P4 on a Tofino, as a pure value-in/value-out
// class: no I/O, no clock, no threads. Every slot exists twice (set 0 and set 1, the "shadow
// copies"); each (slot, set) holds one round's running int32 sums, its signed-max exponents,
// a per-set worker bitmap and a completion counter. One call to Process() is one accepted
// packet; the returned outcome says what the switch must emit (docs/protocol.md#processing-one-packet,
// step 5):
//
//   kMulticast       the packet completed the round: send the sums to every worker
//   kUnicast         a duplicate of an already completed round (its result was lost or is
//                    still in flight): send the stored sums back to the sender only
//   kConsume         a new contribution, the round is not complete: emit nothing
//   kDropDuplicate   a duplicate while the round is incomplete: emit nothing
//
// and, for a leaf of a two-level job (AggregatorOptions::hold_completed_rounds, below):
//
//   kForwardUp       the packet completed the round at this leaf: send the partial sums (and
//                    the round's max exponents) up to the parent as this leaf's contribution;
//                    the round is *held* until the parent's total arrives (Complete)
//   kResendUp        a duplicate of a held round (the worker timed out: the leaf's
//                    contribution or the parent's total was lost): send the partial sums up
//                    again; the parent counts it, drops it, or answers with its stored total
//   Complete() then stores the parent's total as the round's result and returns kMulticast
//   (send it to every worker), or kDropStale for a total no held round waits for (a
//   duplicate, or a late copy).
//
// plus guards the reference lacks (the packet is rejected before any state changes):
//
//   kDropSizeMismatch   the (slot, set) holds a round whose element count differs from the
//                       packet's (the round remembers the count of its first contribution)
//   kDropInvalid        a precondition of Process() does not hold (rank >= num_workers, slot
//                       out of range, set > 1, 0 or too many elements, no session yet)
//   kDropLateDuplicate  only with AggregatorOptions::late_duplicate_guard (off by default):
//                       a late duplicate reordered behind the worker's next packet to the slot
//                       (docs/protocol.md#late-duplicate-guard,
//                       docs/protocol.md#d16-late-duplicates-corrupt-two-rounds), which the
//                       reference would count as a new contribution, corrupting two rounds. See "Late-duplicate guard" below.
//
// Beyond the reference: up to 256 workers (bitmap of 4 x 64 bits per slot per set), up to
// wire::kMaxSlots (16384) slots per set and up to 1024 elements per slot.
//
// Late-duplicate guard (docs/protocol.md#late-duplicate-guard). For every (worker, slot, set) the
// aggregator remembers the tag (job, tsi) of the worker's last *new* contribution there. A
// packet that the reference would treat as new (the worker's bit is clear in its set) but
// carries exactly that tag is the late copy of a round the worker already contributed to:
// it is dropped. Its bit was cleared only because the worker's next packet to the slot went
// to the other set, so the tag stored for this set is still the one of the late packet.
//
//   What "job" means. tsi restarts at 0 in every slice (every all-reduce call), so (slot, set,
//   tsi) recurs in later calls, and the wire's 8-bit job number recurs every 256 calls. A
//   guard keyed on the raw (job_number, tsi) would drop a legitimate packet when a (slot, set)
//   is left untouched by a worker for 256 calls and then reused with the same tsi (e.g. a
//   training loop of 128 all-reduces where only the largest one touches some slot, once). So
//   the guard keys on an *unwrapped* job sequence instead: per worker the aggregator keeps
//   the highest job sequence seen (from any slot) and maps each packet's job number to the
//   sequence value congruent to it modulo 256 that lies in [highest - 128, highest + 127].
//
//   Why no legitimate packet is dropped. Two legitimate new contributions of one worker to
//   the same (slot, set) come from the same client thread (threads own disjoint slots) in
//   non-decreasing call order. Within one call their tsi differ (packet ids of one slice are
//   distinct). Across calls, their job sequences differ as long as unwrapping is exact, which
//   holds when (a) the worker never lets 127 consecutive all-reduce calls pass without sending
//   a packet (only zero-length calls send nothing; thread 0 carries data in every other call)
//   and (b) its threads never drift 128 or more calls apart. Stray packets can only push the
//   highest sequence up, which makes later sequences larger, never equal to a stored one.
//   The randomized multi-job test in aggregator_test.cc exercises this with the client's slot
//   and set rules, job numbers wrapping several times, losses and retransmissions.
//
//   What it cannot catch: a copy reordered behind two or more of the worker's later packets
//   to the same slot (the tag has been overwritten; the copy then finds its bit set or is
//   counted as new, as in the reference), or one more than ~128 calls old. A client that
//   violates docs/protocol.md#c4-strict-set-alternation (sends round r+1 before receiving
//   round r, then retransmits r; docs/protocol.md#d3-set-reuse-in-short-float32-slices) gets
//   its retransmission dropped instead of double-counted; our client never does this.
//   Wire compatible: nothing changes on the wire. Off by default for bit-exact reference
//   behaviour. Costs 8 bytes per (worker, slot, set), allocated at Reset().
//
// Usage:
//   SWITCHML_ASSIGN_OR_RETURN(Aggregator agg, Aggregator::Create(/*num_slots=*/8192,
//                                                                /*max_elements=*/1024));
//   SWITCHML_RETURN_IF_ERROR(agg.Reset(/*num_workers=*/3));   // a new session
//   AggregationResult r = agg.Process({.rank = 1, .slot = 5, .set = 0, .exp0 = 3, .exp1 = 0,
//                                      .payload_be = pkt.payload, .num_elements = 64,
//                                      .job_number = 7, .tsi = 5});
//   if (r.outcome == Outcome::kMulticast) { send r.sums[0..r.num_elements) to everyone; }
//
// Memory: 2 * num_slots * max_elements int32 sums (64 MiB at 8192 x 1024), obtained zeroed from
// the allocator and only touched where used, plus ~80 bytes of metadata per slot (and 16 bytes
// per slot and worker with the late-duplicate guard).
// Thread-compatible, with one exception for the switch's several I/O threads: Process() may
// run concurrently on threads whose packets name disjoint sets of slots (each I/O thread owns
// its own slots of a job, docs/design.md "Several I/O threads"). All state is per slot except
// the late-duplicate guard's per-rank highest job sequence, which is updated atomically.
// Reset() and Inspect() need the usual exclusion.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string_view>

#include "switchml/status.h"

namespace switchml::dataplane {

enum class Outcome : uint8_t {
  kConsume = 0,
  kMulticast,
  kUnicast,
  kDropDuplicate,
  kDropSizeMismatch,
  kDropInvalid,
  kDropLateDuplicate,  // only with AggregatorOptions::late_duplicate_guard
  kForwardUp,          // only with AggregatorOptions::hold_completed_rounds
  kResendUp,           // only with AggregatorOptions::hold_completed_rounds
  kDropStale,          // Complete() only: no held round waits for this total
};
std::string_view OutcomeName(Outcome o);

// One packet's contribution. `payload_be` points at `num_elements` big-endian int32 values (the
// wire payload); it is only read during Process().
struct Contribution {
  uint32_t rank = 0;
  uint32_t slot = 0;
  uint8_t set = 0;
  int8_t exp0 = 0;
  int8_t exp1 = 0;
  const uint8_t* payload_be = nullptr;
  uint32_t num_elements = 0;
  // The packet's wire tag. Echo-only in the reference; read only by the late-duplicate guard
  // (ignored when it is off, so callers that do not fill them keep the reference behaviour).
  uint8_t job_number = 0;
  uint32_t tsi = 0;
};

struct AggregatorOptions {
  // Drop late duplicates (kDropLateDuplicate) instead of counting them as new contributions.
  // See "Late-duplicate guard" in the file comment. Off: bit-exact reference behaviour.
  bool late_duplicate_guard = false;
  // A leaf of a two-level job (docs/scaling.md "Two-level aggregation"): a completed round
  // is not multicast but forwarded up (kForwardUp) and held until Complete() brings the
  // parent's total. While a round is held, a duplicate gets kResendUp (never the partial
  // sums as a result) and a new contribution to it is dropped (kDropDuplicate: an honest
  // worker cannot send the slot's next round to this set before it received this one).
  bool hold_completed_rounds = false;
};

struct AggregationResult {
  Outcome outcome = Outcome::kDropInvalid;
  // For kMulticast, kUnicast, kForwardUp and kResendUp only (nullptr/0 otherwise): the stored
  // sums of the round in host byte order and the stored signed-max exponents (for the two
  // "up" outcomes the leaf's partial sums and maxima). `sums` points into the aggregator and stays
  // valid until the next Process() or Reset().
  const int32_t* sums = nullptr;
  uint32_t num_elements = 0;
  int8_t exp0 = 0;
  int8_t exp1 = 0;
};

// Read-only view of one (slot, set), for tests and diagnostics.
struct SlotSetView {
  std::array<uint64_t, 4> bitmap{};  // bit r of word r/64 = rank r contributed in this set
  uint32_t counter = 0;                 // workers still missing (0 = idle or complete)
  bool held = false;                    // complete at this leaf, waiting for the parent's total
  uint32_t num_elements = 0;            // element count of the round (set at its first packet)
  int8_t exp0 = 0;
  int8_t exp1 = 0;
  std::span<const int32_t> sums;        // num_elements stored sums, host order
};

class Aggregator {
 public:
  static constexpr uint32_t kMaxWorkers = 256;
  static constexpr uint32_t kBitmapWords = kMaxWorkers / 64;

  // num_slots in [1, wire::kMaxSlots], max_elements in [1, wire::kMaxElementsPerPacket].
  // Errors: InvalidArgument naming the field, ResourceExhausted if memory is not available.
  // The new aggregator has no session: Process() returns kDropInvalid until Reset().
  static StatusOr<Aggregator> Create(uint32_t num_slots, uint32_t max_elements,
                                     AggregatorOptions options = {});

  Aggregator(Aggregator&&) noexcept = default;
  Aggregator& operator=(Aggregator&&) noexcept = default;

  // Starts a new session of `num_workers` in [1, 256]: clears every bitmap, counter, exponent
  // and round size (docs/protocol.md#c7-zero-state-at-session-start: state is zero when a session starts). The stored sums are not
  // rewritten: they are unobservable until the first contribution of a round overwrites them.
  // O(num_slots). With the late-duplicate guard, also forgets every stored tag (a fresh
  // zeroed allocation of 16 bytes per slot and worker).
  // Errors: InvalidArgument (num_workers out of range), ResourceExhausted (guard memory);
  // on error the state is left unchanged.
  Status Reset(uint32_t num_workers);

  // Applies one packet exactly as docs/protocol.md#processing-one-packet, steps 1–5 (see the
  // file comment for outcomes).
  // Never fails and never allocates; bad preconditions give kDropInvalid without state change.
  AggregationResult Process(const Contribution& c);

  // A leaf (options().hold_completed_rounds): the parent's total for (slot, set), the wire
  // payload of its response (`num_elements` big-endian int32) and its max exponents. If the
  // round is held and has that element count, stores the total as the round's result (later
  // duplicates get it as kUnicast), releases the round and returns kMulticast with it.
  // Otherwise returns kDropStale (no held round: a repeated or late total), kDropSizeMismatch
  // (the held round has another element count) or kDropInvalid (slot, set or size out of
  // range, no session, not a leaf), and changes nothing. Never allocates.
  AggregationResult Complete(uint32_t slot, uint8_t set, int8_t exp0, int8_t exp1,
                             const uint8_t* payload_be, uint32_t num_elements);

  uint32_t num_slots() const { return num_slots_; }
  uint32_t max_elements() const { return max_elements_; }
  uint32_t num_workers() const { return num_workers_; }  // 0 = no session yet
  const AggregatorOptions& options() const { return options_; }

  // The state of (slot, set); slot < num_slots, set <= 1 (otherwise an empty view).
  SlotSetView Inspect(uint32_t slot, uint8_t set) const;

 private:
  // Metadata of one slot, both sets side by side: the cross-set clear of step 1 touches both.
  struct SlotState {
    uint64_t bitmap[2][kBitmapWords];
    uint16_t num_elements[2];
    uint8_t counter[2];  // n-1 <= 255
    int8_t exp0[2];
    int8_t exp1[2];
    uint8_t held[2];  // hold_completed_rounds: complete here, waiting for the parent's total
  };
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  // Late-duplicate guard: the last new contribution of one worker to one (slot, set).
  // job_seq == 0: none yet in this session (sequences start at kJobSeqOrigin).
  struct Tag {
    uint32_t job_seq;
    uint32_t tsi;
  };
  // First unwrapped job sequence of a worker: far from 0 so that neither unwrapping below it
  // nor 2^32 wrap-around (after ~4e9 calls) produces the "no tag" value in practice.
  static constexpr uint32_t kJobSeqOrigin = uint32_t{1} << 24;

  Aggregator(uint32_t num_slots, uint32_t max_elements, AggregatorOptions options,
             std::unique_ptr<SlotState[], FreeDeleter> slots,
             std::unique_ptr<int32_t[], FreeDeleter> sums);

  // The job sequence of `job_number` for `rank` (see the file comment); updates the rank's
  // highest sequence.
  uint32_t UnwrapJob(uint32_t rank, uint8_t job_number);
  Tag& TagOf(uint32_t rank, uint32_t slot, uint32_t set) {
    return tags_[(size_t{rank} * num_slots_ + slot) * 2 + set];
  }

  int32_t* SumsOf(uint32_t slot, uint32_t set) {
    return sums_.get() + (size_t{slot} * 2 + set) * max_elements_;
  }
  const int32_t* SumsOf(uint32_t slot, uint32_t set) const {
    return sums_.get() + (size_t{slot} * 2 + set) * max_elements_;
  }

  uint32_t num_slots_ = 0;
  uint32_t max_elements_ = 0;
  uint32_t num_workers_ = 0;
  AggregatorOptions options_;
  std::unique_ptr<SlotState[], FreeDeleter> slots_;
  std::unique_ptr<int32_t[], FreeDeleter> sums_;
  // Guard state, allocated by Reset() when options_.late_duplicate_guard is on:
  // tags_[(rank * num_slots + slot) * 2 + set] and job_high_[rank] (0 = no packet yet).
  std::unique_ptr<Tag[], FreeDeleter> tags_;
  std::unique_ptr<uint32_t[], FreeDeleter> job_high_;
};

}  // namespace switchml::dataplane
