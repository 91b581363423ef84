// dataplane/aggregator.h — the switch's aggregation state machine for one job (spec §3.4).
//
// This is the logic the reference implements in P4 on a Tofino, as a pure value-in/value-out
// class: no I/O, no clock, no threads. Every slot exists twice (set 0 and set 1, the "shadow
// copies"); each (slot, set) holds one round's running int32 sums, its signed-max exponents,
// a per-set worker bitmap and a completion counter. One call to Process() is one accepted
// packet; the returned outcome says what the switch must emit (§3.4 step 5):
//
//   kMulticast       the packet completed the round: send the sums to every worker
//   kUnicast         a duplicate of an already completed round (its result was lost or is
//                    still in flight): send the stored sums back to the sender only
//   kConsume         a new contribution, the round is not complete: emit nothing
//   kDropDuplicate   a duplicate while the round is incomplete: emit nothing
//
// plus two guards the reference lacks (the packet is rejected before any state changes):
//
//   kDropSizeMismatch  the (slot, set) holds a round whose element count differs from the
//                      packet's (the round remembers the count of its first contribution)
//   kDropInvalid       a precondition of Process() does not hold (rank >= num_workers, slot
//                      out of range, set > 1, 0 or too many elements, no session yet)
//
// Beyond the reference: up to 256 workers (bitmap of 4 x 64 bits per slot per set), up to
// wire::kMaxSlots (16384) slots per set and up to 1024 elements per slot.
//
// Usage:
//   SWITCHML_ASSIGN_OR_RETURN(Aggregator agg, Aggregator::Create(/*num_slots=*/8192,
//                                                                /*max_elements=*/1024));
//   SWITCHML_RETURN_IF_ERROR(agg.Reset(/*num_workers=*/3));   // a new session
//   AggregationResult r = agg.Process({.rank = 1, .slot = 5, .set = 0, .exp0 = 3, .exp1 = 0,
//                                      .payload_be = pkt.payload, .num_elements = 64});
//   if (r.outcome == Outcome::kMulticast) { send r.sums[0..r.num_elements) to everyone; }
//
// Memory: 2 * num_slots * max_elements int32 sums (64 MiB at 8192 x 1024), obtained zeroed from
// the allocator and only touched where used, plus ~80 bytes of metadata per slot.
// Thread-compatible: one thread at a time (the switch's I/O thread owns it).
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
};

struct AggregationResult {
  Outcome outcome = Outcome::kDropInvalid;
  // For kMulticast and kUnicast only (nullptr/0 otherwise): the stored sums of the round in host
  // byte order and the stored signed-max exponents. `sums` points into the aggregator and stays
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
  static StatusOr<Aggregator> Create(uint32_t num_slots, uint32_t max_elements);

  Aggregator(Aggregator&&) noexcept = default;
  Aggregator& operator=(Aggregator&&) noexcept = default;

  // Starts a new session of `num_workers` in [1, 256]: clears every bitmap, counter, exponent
  // and round size (contract C7: state is zero when a session starts). The stored sums are not
  // rewritten: they are unobservable until the first contribution of a round overwrites them.
  // O(num_slots). Errors: InvalidArgument (num_workers out of range; state left unchanged).
  Status Reset(uint32_t num_workers);

  // Applies one packet exactly as spec §3.4 steps 1–5 (see the file comment for outcomes).
  // Never fails and never allocates; bad preconditions give kDropInvalid without state change.
  AggregationResult Process(const Contribution& c);

  uint32_t num_slots() const { return num_slots_; }
  uint32_t max_elements() const { return max_elements_; }
  uint32_t num_workers() const { return num_workers_; }  // 0 = no session yet

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
  };
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };

  Aggregator(uint32_t num_slots, uint32_t max_elements, std::unique_ptr<SlotState[], FreeDeleter> slots,
             std::unique_ptr<int32_t[], FreeDeleter> sums);

  int32_t* SumsOf(uint32_t slot, uint32_t set) {
    return sums_.get() + (size_t{slot} * 2 + set) * max_elements_;
  }
  const int32_t* SumsOf(uint32_t slot, uint32_t set) const {
    return sums_.get() + (size_t{slot} * 2 + set) * max_elements_;
  }

  uint32_t num_slots_ = 0;
  uint32_t max_elements_ = 0;
  uint32_t num_workers_ = 0;
  std::unique_ptr<SlotState[], FreeDeleter> slots_;
  std::unique_ptr<int32_t[], FreeDeleter> sums_;
};

}  // namespace switchml::dataplane
