#include "dataplane/aggregator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "wire/packet.h"
#include "wire/payload.h"

namespace switchml::dataplane {

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kConsume: return "consume";
    case Outcome::kMulticast: return "multicast";
    case Outcome::kUnicast: return "unicast";
    case Outcome::kDropDuplicate: return "drop_duplicate";
    case Outcome::kDropSizeMismatch: return "drop_size_mismatch";
    case Outcome::kDropInvalid: return "drop_invalid";
    case Outcome::kDropLateDuplicate: return "drop_late_duplicate";
    case Outcome::kForwardUp: return "forward_up";
    case Outcome::kResendUp: return "resend_up";
    case Outcome::kDropStale: return "drop_stale";
  }
  return "unknown";
}

StatusOr<Aggregator> Aggregator::Create(uint32_t num_slots, uint32_t max_elements,
                                        AggregatorOptions options) {
  if (num_slots < 1 || num_slots > wire::kMaxSlots) {
    return InvalidArgumentError("num_slots must be in [1, " + std::to_string(wire::kMaxSlots) +
                                "], got " + std::to_string(num_slots));
  }
  if (max_elements < 1 || max_elements > wire::kMaxElementsPerPacket) {
    return InvalidArgumentError("max_elements must be in [1, " +
                                std::to_string(wire::kMaxElementsPerPacket) + "], got " +
                                std::to_string(max_elements));
  }
  // calloc: large blocks come zeroed straight from the OS and are only committed when a slot
  // is first used, so a 64 MiB sum array costs nothing for slots a job never touches.
  std::unique_ptr<SlotState[], FreeDeleter> slots(
      static_cast<SlotState*>(std::calloc(num_slots, sizeof(SlotState))));
  std::unique_ptr<int32_t[], FreeDeleter> sums(
      static_cast<int32_t*>(std::calloc(size_t{num_slots} * 2 * max_elements, sizeof(int32_t))));
  if (!slots || !sums) {
    return ResourceExhaustedError("cannot allocate aggregator state for num_slots=" +
                                  std::to_string(num_slots) +
                                  " max_elements=" + std::to_string(max_elements));
  }
  return Aggregator(num_slots, max_elements, options, std::move(slots), std::move(sums));
}

Aggregator::Aggregator(uint32_t num_slots, uint32_t max_elements, AggregatorOptions options,
                       std::unique_ptr<SlotState[], FreeDeleter> slots,
                       std::unique_ptr<int32_t[], FreeDeleter> sums)
    : num_slots_(num_slots),
      max_elements_(max_elements),
      options_(options),
      slots_(std::move(slots)),
      sums_(std::move(sums)) {}

Status Aggregator::Reset(uint32_t num_workers) {
  if (num_workers < 1 || num_workers > kMaxWorkers) {
    return InvalidArgumentError("num_workers must be in [1, " + std::to_string(kMaxWorkers) +
                                "], got " + std::to_string(num_workers));
  }
  if (options_.late_duplicate_guard) {
    // Fresh zeroed blocks rather than a memset: calloc hands out untouched pages, so only the
    // (worker, slot) pairs a session uses are ever committed.
    std::unique_ptr<Tag[], FreeDeleter> tags(
        static_cast<Tag*>(std::calloc(size_t{num_workers} * num_slots_ * 2, sizeof(Tag))));
    std::unique_ptr<uint32_t[], FreeDeleter> high(
        static_cast<uint32_t*>(std::calloc(num_workers, sizeof(uint32_t))));
    if (!tags || !high) {
      return ResourceExhaustedError("cannot allocate late-duplicate guard state for num_workers=" +
                                    std::to_string(num_workers) +
                                    " num_slots=" + std::to_string(num_slots_));
    }
    tags_ = std::move(tags);
    job_high_ = std::move(high);
  }
  std::memset(static_cast<void*>(slots_.get()), 0, size_t{num_slots_} * sizeof(SlotState));
  num_workers_ = num_workers;
  return OkStatus();
}

uint32_t Aggregator::UnwrapJob(uint32_t rank, uint8_t job_number) {
  // The one piece of state that is per rank, not per slot: with several switch I/O threads
  // (each owning other slots of this job) several threads update it, so it is read and raised
  // atomically (a relaxed load per packet; a compare-exchange only when the rank's highest
  // sequence grows, about once per all-reduce call).
  std::atomic_ref<uint32_t> high_ref(job_high_[rank]);
  uint32_t high = high_ref.load(std::memory_order_relaxed);
  if (high == 0) {  // the rank's first packet
    const uint32_t first = kJobSeqOrigin + job_number;
    if (high_ref.compare_exchange_strong(high, first, std::memory_order_relaxed)) high = first;
  }
  // The signed distance from the highest sequence's job number, in [-128, 127].
  const int32_t delta = int8_t(uint8_t(job_number - uint8_t(high)));
  const uint32_t seq = high + uint32_t(delta);
  while (int32_t(seq - high) > 0 &&
         !high_ref.compare_exchange_weak(high, seq, std::memory_order_relaxed)) {
  }
  return seq;
}

AggregationResult Aggregator::Process(const Contribution& c) {
  AggregationResult r;
  // Also catches "no session" (num_workers_ == 0 makes every rank invalid).
  if (c.rank >= num_workers_ || c.slot >= num_slots_ || c.set > 1 || c.num_elements == 0 ||
      c.num_elements > max_elements_ || c.payload_be == nullptr) {
    r.outcome = Outcome::kDropInvalid;
    return r;
  }
  SlotState& s = slots_[c.slot];
  const uint32_t b = c.set;
  const uint32_t other = b ^ 1u;
  const uint32_t word = c.rank >> 6;
  const uint64_t mask = uint64_t{1} << (c.rank & 63);

  const uint64_t* set_bits = s.bitmap[b];
  const bool empty = (set_bits[0] | set_bits[1] | set_bits[2] | set_bits[3]) == 0;
  const bool dup = (set_bits[word] & mask) != 0;

  // Optional guard (not in the reference, see the file comment): a "new" contribution that
  // carries the tag of the worker's last new contribution to this very (slot, set) is a late
  // duplicate whose bit the worker's next packet (to the other set) has cleared.
  Tag* tag = nullptr;
  uint32_t job_seq = 0;
  if (options_.late_duplicate_guard) {
    job_seq = UnwrapJob(c.rank, c.job_number);
    tag = &TagOf(c.rank, c.slot, b);
    if (!dup && tag->job_seq == job_seq && tag->tsi == c.tsi) {
      r.outcome = Outcome::kDropLateDuplicate;
      return r;
    }
  }

  // Guard (not in the reference): a round keeps the element count of its first contribution;
  // a different count can only be a bug or a stray packet, and must not touch the state.
  if (!empty && s.num_elements[b] != c.num_elements) {
    r.outcome = Outcome::kDropSizeMismatch;
    return r;
  }
  // A held round (a leaf waiting for its parent's total) takes no new contribution: see
  // AggregatorOptions::hold_completed_rounds.
  if (s.held[b] && !dup) {
    r.outcome = Outcome::kDropDuplicate;
    return r;
  }
  if (tag != nullptr && !dup) *tag = Tag{job_seq, c.tsi};

  // Step 1: bitmap read-modify-write with the cross-set clear (shadow-copy maintenance).
  s.bitmap[b][word] |= mask;
  s.bitmap[other][word] &= ~mask;

  // Step 2: completion counter; `flag` is the value before the update.
  uint32_t flag;
  if (num_workers_ == 1) {
    flag = dup ? 0 : 1;  // every new packet completes its round; the counter stays 0
  } else {
    flag = s.counter[b];
    if (!dup) s.counter[b] = uint8_t(flag == 0 ? num_workers_ - 1 : flag - 1);
  }

  // Steps 3 and 4: sums and exponents. "First contribution" is decided by the bitmap, as in
  // the reference (the counter decides completion).
  int32_t* sums = SumsOf(c.slot, b);
  if (empty) {
    wire::BEToInt32(c.payload_be, c.num_elements, sums);
    s.num_elements[b] = uint16_t(c.num_elements);
    s.exp0[b] = c.exp0;
    s.exp1[b] = c.exp1;
  } else if (!dup) {
    wire::AddBEInto(sums, c.payload_be, c.num_elements);
    s.exp0[b] = std::max(s.exp0[b], c.exp0);
    s.exp1[b] = std::max(s.exp1[b], c.exp1);
  }

  // Step 5: what leaves the switch.
  // A leaf holds a completed round until its parent's total comes back (Complete).
  if (!dup) {
    r.outcome = flag != 1                       ? Outcome::kConsume
                : options_.hold_completed_rounds ? Outcome::kForwardUp
                                                 : Outcome::kMulticast;
    if (r.outcome == Outcome::kForwardUp) s.held[b] = 1;
  } else {
    r.outcome = flag != 0 ? Outcome::kDropDuplicate
                : s.held[b] ? Outcome::kResendUp
                            : Outcome::kUnicast;
  }
  if (r.outcome != Outcome::kConsume && r.outcome != Outcome::kDropDuplicate) {
    r.sums = sums;
    r.num_elements = s.num_elements[b];
    r.exp0 = s.exp0[b];
    r.exp1 = s.exp1[b];
  }
  return r;
}

AggregationResult Aggregator::Complete(uint32_t slot, uint8_t set, int8_t exp0, int8_t exp1,
                                       const uint8_t* payload_be, uint32_t num_elements) {
  AggregationResult r;
  if (!options_.hold_completed_rounds || num_workers_ == 0 || slot >= num_slots_ || set > 1 ||
      num_elements == 0 || num_elements > max_elements_ || payload_be == nullptr) {
    r.outcome = Outcome::kDropInvalid;
    return r;
  }
  SlotState& s = slots_[slot];
  if (!s.held[set]) {
    r.outcome = Outcome::kDropStale;
    return r;
  }
  if (s.num_elements[set] != num_elements) {
    r.outcome = Outcome::kDropSizeMismatch;
    return r;
  }
  int32_t* sums = SumsOf(slot, set);
  wire::BEToInt32(payload_be, num_elements, sums);
  s.exp0[set] = exp0;
  s.exp1[set] = exp1;
  s.held[set] = 0;
  r.outcome = Outcome::kMulticast;
  r.sums = sums;
  r.num_elements = num_elements;
  r.exp0 = exp0;
  r.exp1 = exp1;
  return r;
}

SlotSetView Aggregator::Inspect(uint32_t slot, uint8_t set) const {
  SlotSetView v;
  if (slot >= num_slots_ || set > 1) return v;
  const SlotState& s = slots_[slot];
  std::copy(s.bitmap[set], s.bitmap[set] + kBitmapWords, v.bitmap.begin());
  v.counter = s.counter[set];
  v.held = s.held[set] != 0;
  v.num_elements = s.num_elements[set];
  v.exp0 = s.exp0[set];
  v.exp1 = s.exp1[set];
  v.sums = std::span<const int32_t>(SumsOf(slot, set), s.num_elements[set]);
  return v;
}

}  // namespace switchml::dataplane
