#include "dataplane/aggregator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/endian.h"
#include "wire/packet.h"

namespace switchml::dataplane {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<uint8_t> ToBE(const std::vector<int32_t>& v) {
  std::vector<uint8_t> out(4 * v.size());
  for (size_t i = 0; i < v.size(); ++i) StoreBE32(out.data() + 4 * i, uint32_t(v[i]));
  return out;
}

std::vector<int32_t> Add(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = int32_t(uint32_t(a[i]) + uint32_t(b[i]));
  return out;
}

// What one Process() call returned, with the sums copied out.
struct Got {
  Outcome outcome;
  std::vector<int32_t> sums;
  int8_t exp0 = 0;
  int8_t exp1 = 0;
};

// Wraps an Aggregator so tests read like docs/protocol.md#worked-trace.
class Harness {
 public:
  Harness(uint32_t num_workers, uint32_t num_slots = 16, uint32_t max_elements = 8,
          AggregatorOptions options = {})
      : agg_(Make(num_slots, max_elements, options)) {
    Status s = agg_.Reset(num_workers);
    EXPECT_TRUE(s.ok()) << s;
  }

  Got Send(uint32_t rank, uint32_t slot, uint8_t set, const std::vector<int32_t>& v,
           int8_t e0 = 0, int8_t e1 = 0) {
    return SendTagged(rank, slot, set, v, /*job_number=*/0, /*tsi=*/0, e0, e1);
  }

  // With the wire tag (job number, tsi) the late-duplicate guard reads.
  Got SendTagged(uint32_t rank, uint32_t slot, uint8_t set, const std::vector<int32_t>& v,
                 uint8_t job_number, uint32_t tsi, int8_t e0 = 0, int8_t e1 = 0) {
    const std::vector<uint8_t> be = ToBE(v);
    AggregationResult r = agg_.Process(Contribution{.rank = rank,
                                                    .slot = slot,
                                                    .set = set,
                                                    .exp0 = e0,
                                                    .exp1 = e1,
                                                    .payload_be = be.data(),
                                                    .num_elements = uint32_t(v.size()),
                                                    .job_number = job_number,
                                                    .tsi = tsi});
    Got g{r.outcome, {}, r.exp0, r.exp1};
    if (r.sums != nullptr) g.sums.assign(r.sums, r.sums + r.num_elements);
    const bool has_result = r.outcome == Outcome::kMulticast || r.outcome == Outcome::kUnicast ||
                            r.outcome == Outcome::kForwardUp || r.outcome == Outcome::kResendUp;
    EXPECT_EQ(r.sums != nullptr, has_result) << OutcomeName(r.outcome);
    return g;
  }

  // A leaf's parent total (Aggregator::Complete).
  Got Total(uint32_t slot, uint8_t set, const std::vector<int32_t>& v, int8_t e0 = 0,
            int8_t e1 = 0) {
    const std::vector<uint8_t> be = ToBE(v);
    AggregationResult r = agg_.Complete(slot, set, e0, e1, be.data(), uint32_t(v.size()));
    Got g{r.outcome, {}, r.exp0, r.exp1};
    if (r.sums != nullptr) g.sums.assign(r.sums, r.sums + r.num_elements);
    EXPECT_EQ(r.sums != nullptr, r.outcome == Outcome::kMulticast) << OutcomeName(r.outcome);
    return g;
  }
  bool Held(uint32_t slot, uint8_t set) const { return agg_.Inspect(slot, set).held; }

  uint64_t Bits(uint32_t slot, uint8_t set, int word = 0) const {
    return agg_.Inspect(slot, set).bitmap[word];
  }
  uint32_t Counter(uint32_t slot, uint8_t set) const { return agg_.Inspect(slot, set).counter; }
  std::vector<int32_t> Sums(uint32_t slot, uint8_t set) const {
    auto s = agg_.Inspect(slot, set).sums;
    return {s.begin(), s.end()};
  }

  Aggregator& agg() { return agg_; }

 private:
  static Aggregator Make(uint32_t num_slots, uint32_t max_elements, AggregatorOptions options) {
    auto a = Aggregator::Create(num_slots, max_elements, options);
    EXPECT_TRUE(a.ok()) << a.status();
    return std::move(a).value();
  }
  Aggregator agg_;
};

const std::vector<int32_t> kA = {1, 2, 3, 4};
const std::vector<int32_t> kB = {10, 20, 30, 40};
const std::vector<int32_t> kC = {100, 200, 300, 400};

// ---------------------------------------------------------------------------------------------
// Construction and preconditions.

TEST(AggregatorTest, CreateRejectsBadSizesNamingTheField) {
  auto a = Aggregator::Create(0, 64);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("num_slots"));
  a = Aggregator::Create(16385, 64);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("16385"));
  a = Aggregator::Create(16384, 0);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("max_elements"));
  a = Aggregator::Create(16, 1025);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("1025"));
  a = Aggregator::Create(16384, 1024);  // the largest configuration is accepted
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->num_slots(), 16384u);
}

TEST(AggregatorTest, ResetRejectsBadWorkerCounts) {
  auto a = Aggregator::Create(4, 8);
  ASSERT_TRUE(a.ok());
  Status s = a->Reset(0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_workers"));
  EXPECT_EQ(a->Reset(257).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->num_workers(), 0u);
  EXPECT_TRUE(a->Reset(256).ok());
  EXPECT_EQ(a->num_workers(), 256u);
}

TEST(AggregatorTest, NoSessionDropsEverything) {
  auto a = Aggregator::Create(4, 8);
  ASSERT_TRUE(a.ok());
  auto be = ToBE(kA);
  auto r = a->Process({.rank = 0, .slot = 0, .set = 0, .payload_be = be.data(), .num_elements = 4});
  EXPECT_EQ(r.outcome, Outcome::kDropInvalid);
}

TEST(AggregatorTest, BrokenPreconditionsDropWithoutStateChange) {
  Harness h(2, /*num_slots=*/4, /*max_elements=*/4);
  EXPECT_EQ(h.Send(2, 0, 0, kA).outcome, Outcome::kDropInvalid);  // rank >= num_workers
  EXPECT_EQ(h.Send(0, 4, 0, kA).outcome, Outcome::kDropInvalid);  // slot >= num_slots
  EXPECT_EQ(h.Send(0, 0, 2, kA).outcome, Outcome::kDropInvalid);  // set > 1
  EXPECT_EQ(h.Send(0, 0, 0, {}).outcome, Outcome::kDropInvalid);  // no elements
  EXPECT_EQ(h.Send(0, 0, 0, {1, 2, 3, 4, 5}).outcome, Outcome::kDropInvalid);  // too many
  for (uint32_t slot = 0; slot < 4; ++slot) {
    for (uint8_t set = 0; set < 2; ++set) {
      EXPECT_EQ(h.Bits(slot, set), 0u);
      EXPECT_EQ(h.Counter(slot, set), 0u);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// docs/protocol.md#decision-table, one test per row.

TEST(AggregatorDecisionTable, NewFlagOneMulticastsTheAggregate) {
  Harness h(3);
  EXPECT_EQ(h.Send(0, 1, 0, kA).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Send(1, 1, 0, kB).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Counter(1, 0), 1u);  // flag of the next packet will be 1
  Got g = h.Send(2, 1, 0, kC);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(Add(kA, kB), kC)));
  EXPECT_EQ(h.Counter(1, 0), 0u);
  EXPECT_EQ(h.Bits(1, 0), 0b111u);
}

TEST(AggregatorDecisionTable, NewFlagZeroWithEmptyBitmapOverwritesAndStartsRound) {
  Harness h(3);
  // Leave stale sums in (slot 2, set 0) from a completed round...
  h.Send(0, 2, 0, kC);
  h.Send(1, 2, 0, kC);
  ASSERT_EQ(h.Send(2, 2, 0, kC).outcome, Outcome::kMulticast);
  // ...then every worker moves to set 1, which clears all their set-0 bits.
  h.Send(0, 2, 1, kA);
  h.Send(1, 2, 1, kA);
  ASSERT_EQ(h.Send(2, 2, 1, kA).outcome, Outcome::kMulticast);
  ASSERT_EQ(h.Bits(2, 0), 0u);
  ASSERT_EQ(h.Counter(2, 0), 0u);
  // The next set-0 round's first packet overwrites the stale sums.
  Got g = h.Send(1, 2, 0, kB);
  EXPECT_EQ(g.outcome, Outcome::kConsume);
  EXPECT_TRUE(g.sums.empty());
  EXPECT_EQ(h.Counter(2, 0), 2u);  // n - 1
  EXPECT_EQ(h.Bits(2, 0), 0b010u);
  EXPECT_THAT(h.Sums(2, 0), ElementsAreArray(kB));
}

TEST(AggregatorDecisionTable, NewFlagZeroWithNonEmptyBitmapAddsInsteadOfOverwriting) {
  // Counter 0 but bitmap not empty: only reachable by violating
  // docs/protocol.md#c6-no-reordering-behind-the-next-packet (see the late-duplicate
  // test); the reference decides overwrite-vs-add by the bitmap, so it adds.
  Harness h(2);
  h.Send(0, 3, 0, kA);
  ASSERT_EQ(h.Send(1, 3, 0, kB).outcome, Outcome::kMulticast);
  h.Send(0, 3, 1, kC);  // A moves on: its set-0 bit is cleared, B's stays
  ASSERT_EQ(h.Bits(3, 0), 0b10u);
  ASSERT_EQ(h.Counter(3, 0), 0u);
  Got g = h.Send(0, 3, 0, kA);
  EXPECT_EQ(g.outcome, Outcome::kConsume);
  EXPECT_EQ(h.Counter(3, 0), 1u);
  EXPECT_THAT(h.Sums(3, 0), ElementsAreArray(Add(Add(kA, kB), kA)));
}

TEST(AggregatorDecisionTable, NewFlagBetweenTwoAndNMinusOneAddsAndDecrements) {
  Harness h(4);
  EXPECT_EQ(h.Send(3, 0, 1, kA).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Counter(0, 1), 3u);
  EXPECT_EQ(h.Send(0, 0, 1, kB).outcome, Outcome::kConsume);  // flag 3
  EXPECT_EQ(h.Counter(0, 1), 2u);
  EXPECT_EQ(h.Send(2, 0, 1, kC).outcome, Outcome::kConsume);  // flag 2
  EXPECT_EQ(h.Counter(0, 1), 1u);
  EXPECT_THAT(h.Sums(0, 1), ElementsAreArray(Add(Add(kA, kB), kC)));
  EXPECT_EQ(h.Bits(0, 1), 0b1101u);
}

TEST(AggregatorDecisionTable, DuplicateWithCounterZeroUnicastsStoredResult) {
  Harness h(2);
  h.Send(0, 0, 0, kA, 5, -2);
  ASSERT_EQ(h.Send(1, 0, 0, kB, 7, -9).outcome, Outcome::kMulticast);
  Got g = h.Send(1, 0, 0, kB, 7, -9);
  EXPECT_EQ(g.outcome, Outcome::kUnicast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(kA, kB)));
  EXPECT_EQ(g.exp0, 7);
  EXPECT_EQ(g.exp1, -2);
  // A duplicate changes nothing.
  EXPECT_THAT(h.Sums(0, 0), ElementsAreArray(Add(kA, kB)));
  EXPECT_EQ(h.Counter(0, 0), 0u);
}

TEST(AggregatorDecisionTable, DuplicateWithCounterNonZeroIsDropped) {
  Harness h(3);
  h.Send(0, 0, 0, kA);
  Got g = h.Send(0, 0, 0, kA);
  EXPECT_EQ(g.outcome, Outcome::kDropDuplicate);
  EXPECT_TRUE(g.sums.empty());
  EXPECT_EQ(h.Counter(0, 0), 2u);
  EXPECT_THAT(h.Sums(0, 0), ElementsAreArray(kA));
}

TEST(AggregatorDecisionTable, SingleWorkerWritesAndMulticastsEveryNewPacket) {
  Harness h(1);
  Got g = h.Send(0, 4, 0, kA, -3, 4);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(kA));
  EXPECT_EQ(g.exp0, -3);
  EXPECT_EQ(g.exp1, 4);
  EXPECT_EQ(h.Counter(4, 0), 0u);  // the counter stays 0 with n == 1
  // A duplicate of the completed round gets a unicast (flag := 0 for dup).
  g = h.Send(0, 4, 0, kA, -3, 4);
  EXPECT_EQ(g.outcome, Outcome::kUnicast);
  EXPECT_THAT(g.sums, ElementsAreArray(kA));
  // The next round, in the other set, overwrites and completes immediately.
  g = h.Send(0, 4, 1, kB, -8, 1);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(kB));
  EXPECT_EQ(g.exp0, -8);
  // And the round after that, back in set 0, overwrites the old sums (bitmap was cleared).
  g = h.Send(0, 4, 0, kC);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(kC));
  EXPECT_EQ(h.Counter(4, 0), 0u);
  EXPECT_EQ(h.Counter(4, 1), 0u);
}

// ---------------------------------------------------------------------------------------------
// docs/protocol.md#worked-trace: 2 workers A = rank 0, B = rank 1, slot 5. Bitmaps as
// (B bit, A bit).

TEST(AggregatorTrace, WorkedTraceOfTheSpec) {
  Harness h(2);
  const uint32_t kSlot = 5;
  const std::vector<int32_t> vA = {1, -2, 3, -4}, vB = {5, 6, -7, 8};
  const std::vector<int32_t> vA1 = {100, 0, -1, 7}, vB1 = {-50, 9, 9, 9};
  const std::vector<int32_t> vB2 = {42, 43, 44, 45};
  auto state = [&](uint64_t b0, uint64_t b1, uint32_t c0, uint32_t c1) {
    EXPECT_EQ(h.Bits(kSlot, 0), b0);
    EXPECT_EQ(h.Bits(kSlot, 1), b1);
    EXPECT_EQ(h.Counter(kSlot, 0), c0);
    EXPECT_EQ(h.Counter(kSlot, 1), c1);
  };

  SCOPED_TRACE("step 0: initial");
  state(0b00, 0b00, 0, 0);

  // Step 1: A sends round 0 (set 0): values := vA, no output.
  Got g = h.Send(0, kSlot, 0, vA);
  EXPECT_EQ(g.outcome, Outcome::kConsume);
  state(0b01, 0b00, 1, 0);
  EXPECT_THAT(h.Sums(kSlot, 0), ElementsAreArray(vA));

  // Step 2: B sends round 0 (set 0): flag 1 → multicast vA+vB (the copy to A is lost).
  g = h.Send(1, kSlot, 0, vB);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(vA, vB)));
  state(0b11, 0b00, 0, 0);

  // Step 3: B sends round 1 (set 1): set-1 values := vB', B's set-0 bit cleared.
  g = h.Send(1, kSlot, 1, vB1);
  EXPECT_EQ(g.outcome, Outcome::kConsume);
  state(0b01, 0b10, 0, 1);
  EXPECT_THAT(h.Sums(kSlot, 1), ElementsAreArray(vB1));

  // Step 4: A times out and resends round 0 (set 0): dup, flag 0 → unicast vA+vB to A.
  g = h.Send(0, kSlot, 0, vA);
  EXPECT_EQ(g.outcome, Outcome::kUnicast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(vA, vB)));
  state(0b01, 0b10, 0, 1);

  // Step 5: A sends round 1 (set 1): flag 1 → multicast vA'+vB'.
  g = h.Send(0, kSlot, 1, vA1);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(vA1, vB1)));
  state(0b00, 0b11, 0, 0);

  // Step 6: B sends round 2 (set 0): bitmap was 0 → overwrite.
  g = h.Send(1, kSlot, 0, vB2);
  EXPECT_EQ(g.outcome, Outcome::kConsume);
  state(0b10, 0b01, 1, 0);
  EXPECT_THAT(h.Sums(kSlot, 0), ElementsAreArray(vB2));
}

// ---------------------------------------------------------------------------------------------
// docs/protocol.md#corner-cases.

TEST(AggregatorCornerCases, RequestLostRetransmissionCountsAsNew) {
  Harness h(2);
  // A's request is lost (never reaches Process). B's arrives.
  EXPECT_EQ(h.Send(1, 0, 0, kB).outcome, Outcome::kConsume);
  // A's timer fires: its bit is not set, so the retransmission is a new contribution.
  Got g = h.Send(0, 0, 0, kA);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(kA, kB)));
}

TEST(AggregatorCornerCases, ResultLostForOneWorkerIsUnicastOnRetransmission) {
  Harness h(3);
  h.Send(0, 7, 1, kA, 1);
  h.Send(1, 7, 1, kB, 3);
  ASSERT_EQ(h.Send(2, 7, 1, kC, 2).outcome, Outcome::kMulticast);
  // Only rank 1 lost its copy.
  Got g = h.Send(1, 7, 1, kB, 3);
  EXPECT_EQ(g.outcome, Outcome::kUnicast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(Add(kA, kB), kC)));
  EXPECT_EQ(g.exp0, 3);
}

TEST(AggregatorCornerCases, ResultLostForAllWorkersEachGetsAUnicast) {
  Harness h(3);
  h.Send(0, 7, 0, kA);
  h.Send(1, 7, 0, kB);
  ASSERT_EQ(h.Send(2, 7, 0, kC).outcome, Outcome::kMulticast);
  const auto expected = Add(Add(kA, kB), kC);
  for (uint32_t rank : {2u, 0u, 1u}) {
    Got g = h.Send(rank, 7, 0, rank == 0 ? kA : rank == 1 ? kB : kC);
    EXPECT_EQ(g.outcome, Outcome::kUnicast) << "rank " << rank;
    EXPECT_THAT(g.sums, ElementsAreArray(expected));
  }
  EXPECT_EQ(h.Counter(7, 0), 0u);
}

TEST(AggregatorCornerCases, SpuriousTimeoutGetsAnExtraUnicast) {
  Harness h(2);
  h.Send(0, 1, 0, kA);
  // A's timer fires too early: its retransmission is queued behind B's packet (FIFO).
  ASSERT_EQ(h.Send(1, 1, 0, kB).outcome, Outcome::kMulticast);  // result still in flight
  Got g = h.Send(0, 1, 0, kA);                                  // the early retransmission
  EXPECT_EQ(g.outcome, Outcome::kUnicast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(kA, kB)));
  // The next round is unaffected.
  h.Send(0, 1, 1, kC);
  g = h.Send(1, 1, 1, kC);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(kC, kC)));
}

TEST(AggregatorCornerCases, RetransmissionWhileOthersMissingIsDroppedIncludingCounterOne) {
  Harness h(3);
  h.Send(0, 2, 1, kA);
  EXPECT_EQ(h.Send(0, 2, 1, kA).outcome, Outcome::kDropDuplicate);  // counter 2
  h.Send(1, 2, 1, kB);
  ASSERT_EQ(h.Counter(2, 1), 1u);
  // Exactly one other worker missing: dup with flag 1 is dropped too.
  EXPECT_EQ(h.Send(0, 2, 1, kA).outcome, Outcome::kDropDuplicate);
  EXPECT_EQ(h.Send(1, 2, 1, kB).outcome, Outcome::kDropDuplicate);
  EXPECT_EQ(h.Counter(2, 1), 1u);
  // The sums counted each worker once.
  Got g = h.Send(2, 2, 1, kC);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(Add(kA, kB), kC)));
}

TEST(AggregatorCornerCases, LateDuplicateAfterNextPacketCorruptsAsTheReferenceDoes) {
  // Violates docs/protocol.md#c6-no-reordering-behind-the-next-packet: A's retransmission of
  // round r (set 0) arrives after A's round r+1 (set 1).
  // docs/protocol.md#d16-late-duplicates-corrupt-two-rounds: two rounds end up corrupted.
  Harness h(2);
  const std::vector<int32_t> a0 = {1, 1, 1, 1}, b0 = {2, 2, 2, 2};
  const std::vector<int32_t> a1 = {3, 3, 3, 3}, b1 = {4, 4, 4, 4};
  const std::vector<int32_t> a2 = {5, 5, 5, 5}, b2 = {6, 6, 6, 6};
  h.Send(0, 9, 0, a0);
  Got round0 = h.Send(1, 9, 0, b0);
  ASSERT_EQ(round0.outcome, Outcome::kMulticast);
  EXPECT_THAT(round0.sums, ElementsAreArray(Add(a0, b0)));
  EXPECT_EQ(h.Send(0, 9, 1, a1).outcome, Outcome::kConsume);  // A's round r+1 clears its set-0 bit
  EXPECT_EQ(h.Bits(9, 0), 0b10u);
  EXPECT_EQ(h.Bits(9, 1), 0b01u);
  EXPECT_EQ(h.Counter(9, 1), 1u);

  // The late duplicate: A is not in set 0 any more → a new contribution to the completed round:
  // its sum is corrupted and a bogus round starts (counter = n - 1). Its cross-set clear also
  // removes A from the round r+1 in progress in set 1.
  Got late = h.Send(0, 9, 0, a0);
  EXPECT_EQ(late.outcome, Outcome::kConsume);
  EXPECT_EQ(h.Counter(9, 0), 1u);
  EXPECT_EQ(h.Bits(9, 0), 0b11u);
  EXPECT_EQ(h.Bits(9, 1), 0b00u);
  EXPECT_THAT(h.Sums(9, 0), ElementsAreArray(Add(Add(a0, b0), a0)));

  // Round r+1: B's packet finds set 1's bitmap empty → overwrites A's data, and the counter
  // (1) makes it complete: the result is B's data alone.
  Got round1 = h.Send(1, 9, 1, b1);
  EXPECT_EQ(round1.outcome, Outcome::kMulticast);
  EXPECT_THAT(round1.sums, ElementsAreArray(b1));
  EXPECT_THAT(round1.sums, ::testing::Not(ElementsAreArray(Add(a1, b1))));
  EXPECT_EQ(h.Bits(9, 0), 0b01u);  // B's set-0 bit cleared, A's (from the late packet) stays

  // Round r+2 in set 0: A is seen as a duplicate (its bit is still set by the late packet),
  // so its real data is dropped...
  EXPECT_EQ(h.Send(0, 9, 0, a2).outcome, Outcome::kDropDuplicate);
  // ...and B completes the bogus round with corrupted sums: (a0 + b0 + a0) + b2.
  Got round2 = h.Send(1, 9, 0, b2);
  EXPECT_EQ(round2.outcome, Outcome::kMulticast);
  EXPECT_THAT(round2.sums, ElementsAreArray(Add(Add(Add(a0, b0), a0), b2)));
  EXPECT_THAT(round2.sums, ::testing::Not(ElementsAreArray(Add(a2, b2))));
}

TEST(AggregatorCornerCases, NextRoundBeforeResultThenRetransmitDoubleCounts) {
  // Violates docs/protocol.md#c4-strict-set-alternation: A sends round r+1 before receiving
  // round r, then retransmits round r.
  Harness h(3);
  EXPECT_EQ(h.Send(0, 1, 0, kA).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Send(1, 1, 0, kB).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Send(0, 1, 1, kC).outcome, Outcome::kConsume);  // clears A's set-0 bit
  EXPECT_EQ(h.Bits(1, 0), 0b010u);
  // The retransmission is counted again: A's data twice, C's never, and the round "completes".
  Got g = h.Send(0, 1, 0, kA);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(Add(kA, kB), kA)));
  // C's real contribution then starts a bogus round and gets no reply (→ hang).
  EXPECT_EQ(h.Send(2, 1, 0, kC).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Counter(1, 0), 2u);
}

TEST(AggregatorCornerCases, RetransmissionOfAnOverwrittenRoundLosesOtherWorkersData) {
  // Same docs/protocol.md#c4-strict-set-alternation violation with 2 workers: the
  // retransmission finds set 0 empty and overwrites.
  Harness h(2);
  EXPECT_EQ(h.Send(0, 1, 0, kA).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Send(0, 1, 1, kC).outcome, Outcome::kConsume);  // set 0 bitmap now empty
  Got g = h.Send(0, 1, 0, kA);
  EXPECT_EQ(g.outcome, Outcome::kMulticast);  // counter was 1: "complete" without B
  EXPECT_THAT(g.sums, ElementsAreArray(kA));
  EXPECT_EQ(h.Send(1, 1, 0, kB).outcome, Outcome::kConsume);  // B gets no reply
  EXPECT_EQ(h.Counter(1, 0), 1u);
}

TEST(AggregatorCornerCases, SameSetReuseReturnsThePreviousResult) {
  // Violates docs/protocol.md#c4-strict-set-alternation: both workers use set 0 of slot 3
  // twice in a row.
  Harness h(2);
  h.Send(0, 3, 0, kA);
  ASSERT_EQ(h.Send(1, 3, 0, kB).outcome, Outcome::kMulticast);
  const std::vector<int32_t> newA = {7, 7, 7, 7}, newB = {9, 9, 9, 9};
  for (uint32_t rank : {0u, 1u}) {
    Got g = h.Send(rank, 3, 0, rank == 0 ? newA : newB);
    EXPECT_EQ(g.outcome, Outcome::kUnicast) << "rank " << rank;
    EXPECT_THAT(g.sums, ElementsAreArray(Add(kA, kB)));  // silently wrong: the old result
  }
}

TEST(AggregatorCornerCases, StateClearedWhileActiveTreatsRetransmissionsAsNew) {
  Harness h(2);
  h.Send(0, 0, 1, kA);
  ASSERT_EQ(h.Send(1, 0, 1, kB).outcome, Outcome::kMulticast);
  ASSERT_TRUE(h.agg().Reset(2).ok());  // a new session while workers are active
  EXPECT_EQ(h.Bits(0, 1), 0u);
  EXPECT_EQ(h.Counter(0, 1), 0u);
  // A's retransmission of the completed round is now a first packet: no unicast.
  EXPECT_EQ(h.Send(0, 0, 1, kA).outcome, Outcome::kConsume);
  EXPECT_THAT(h.Sums(0, 1), ElementsAreArray(kA));
}

TEST(AggregatorCornerCases, SlotUsedByOnlySomeWorkersNeverCompletes) {
  // Violates docs/protocol.md#c1-identical-call-sequence: only rank 0 uses slot 6.
  Harness h(2);
  EXPECT_EQ(h.Send(0, 6, 0, kA).outcome, Outcome::kConsume);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(h.Send(0, 6, 0, kA).outcome, Outcome::kDropDuplicate);
  EXPECT_EQ(h.Counter(6, 0), 1u);
}

// ---------------------------------------------------------------------------------------------
// Guard beyond the reference: element-count mismatch.

TEST(AggregatorTest, SizeMismatchIsRejectedBeforeTouchingState) {
  Harness h(3, 16, 8);
  h.Send(0, 0, 0, kA, 4, 4);  // a 4-element round
  const auto bits = h.Bits(0, 0);
  Got g = h.Send(1, 0, 0, {1, 2, 3, 4, 5, 6, 7, 8}, 9, 9);
  EXPECT_EQ(g.outcome, Outcome::kDropSizeMismatch);
  EXPECT_EQ(h.Bits(0, 0), bits);
  EXPECT_EQ(h.Counter(0, 0), 2u);
  EXPECT_THAT(h.Sums(0, 0), ElementsAreArray(kA));
  // Rank 1 was not marked: its correctly sized packet still counts.
  EXPECT_EQ(h.Send(1, 0, 0, kB).outcome, Outcome::kConsume);
  // A mismatched duplicate of a completed round is rejected as well (no unicast of 4 sums).
  ASSERT_EQ(h.Send(2, 0, 0, kC).outcome, Outcome::kMulticast);
  EXPECT_EQ(h.Send(2, 0, 0, {1, 2}).outcome, Outcome::kDropSizeMismatch);
  EXPECT_EQ(h.agg().Inspect(0, 0).exp0, 4);
  // Once every worker moved to set 1, set 0 starts fresh and may use another size.
  for (uint32_t r = 0; r < 3; ++r) h.Send(r, 0, 1, kA);
  Got big = h.Send(1, 0, 0, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(big.outcome, Outcome::kConsume);
  EXPECT_EQ(h.agg().Inspect(0, 0).num_elements, 8u);
}

// ---------------------------------------------------------------------------------------------
// Arithmetic.

TEST(AggregatorTest, Int32AdditionWrapsAround) {
  Harness h(3);
  const int32_t kMax = std::numeric_limits<int32_t>::max();
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  h.Send(0, 0, 0, {kMax, kMin, -1, kMax});
  h.Send(1, 0, 0, {1, -1, kMin, kMax});
  Got g = h.Send(2, 0, 0, {0, 0, 0, 2});
  ASSERT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray({kMin, kMax, kMax, 0}));
}

TEST(AggregatorTest, ExponentsKeepTheSignedMaximumIndependently) {
  Harness h(4);
  h.Send(0, 0, 0, kA, -5, -128);
  h.Send(1, 0, 0, kA, -100, -7);
  EXPECT_EQ(h.agg().Inspect(0, 0).exp0, -5);
  EXPECT_EQ(h.agg().Inspect(0, 0).exp1, -7);
  h.Send(2, 0, 0, kA, -3, -128);
  Got g = h.Send(3, 0, 0, kA, -126, -8);
  ASSERT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_EQ(g.exp0, -3);  // signed: -3 > -5 > -100 > -126 (unsigned bytes would pick 0x82)
  EXPECT_EQ(g.exp1, -7);

  // The next round in set 0 overwrites the exponents at its first packet, even with smaller
  // values than the previous round's maximum, then keeps the signed max (127 beats negatives).
  for (uint32_t r = 0; r < 4; ++r) h.Send(r, 0, 1, kA, 0, 0);
  h.Send(2, 0, 0, kA, -120, -120);
  EXPECT_EQ(h.agg().Inspect(0, 0).exp0, -120);
  h.Send(0, 0, 0, kA, 127, -121);
  h.Send(1, 0, 0, kA, 0, -128);
  g = h.Send(3, 0, 0, kA, -1, 0);
  ASSERT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_EQ(g.exp0, 127);
  EXPECT_EQ(g.exp1, 0);
}

// ---------------------------------------------------------------------------------------------
// Scale: 256 workers, full-size slots.

TEST(AggregatorTest, TwoHundredFiftySixWorkersCompleteExactlyOnTheLast) {
  Harness h(256, /*num_slots=*/8192, /*max_elements=*/1024);
  std::mt19937 rng(7);
  std::vector<uint32_t> order(256);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  const uint32_t kSlot = 8191;
  std::vector<int64_t> expected(1024, 0);
  std::vector<int32_t> v(1024);
  for (size_t i = 0; i < order.size(); ++i) {
    const uint32_t rank = order[i];
    for (size_t e = 0; e < v.size(); ++e) v[e] = int32_t(rank * 1000 + e) - 70000;
    for (size_t e = 0; e < v.size(); ++e) expected[e] += v[e];
    Got g = h.Send(rank, kSlot, 1, v, int8_t(int(rank % 200) - 100));
    if (i + 1 < order.size()) {
      ASSERT_EQ(g.outcome, Outcome::kConsume) << "contribution " << i;
      EXPECT_EQ(h.Counter(kSlot, 1), 255u - i);
    } else {
      ASSERT_EQ(g.outcome, Outcome::kMulticast);
      ASSERT_EQ(g.sums.size(), 1024u);
      for (size_t e = 0; e < 1024; ++e) ASSERT_EQ(g.sums[e], int32_t(expected[e])) << e;
      EXPECT_EQ(g.exp0, 99);
    }
  }
  for (int w = 0; w < 4; ++w) EXPECT_EQ(h.Bits(kSlot, 1, w), ~uint64_t{0}) << "word " << w;
  // Rank 200 (word 3) moving to set 0 clears exactly its bit in set 1.
  h.Send(200, kSlot, 0, v);
  EXPECT_EQ(h.Bits(kSlot, 1, 3), ~(uint64_t{1} << (200 - 192)));
  EXPECT_EQ(h.Bits(kSlot, 0, 3), uint64_t{1} << (200 - 192));
  EXPECT_EQ(h.Bits(kSlot, 0, 0), 0u);
  // A duplicate from the highest rank after completion is answered.
  EXPECT_EQ(h.Send(255, kSlot, 1, v).outcome, Outcome::kUnicast);
}

// ---------------------------------------------------------------------------------------------
// Many rounds: a protocol simulation that keeps the contracts C1–C7 (docs/protocol.md#contracts:
// FIFO per worker, next round
// only after the previous result) while results get lost and timers fire early. Every result a
// worker accepts must be the exact sum of its round (docs/protocol.md#why-shadow-copies-work).

void RunManyRoundsWithLosses(AggregatorOptions options) {
  const uint32_t kWorkers = 3, kSlots = 4, kRounds = 200;
  Harness h(kWorkers, kSlots, 4, options);
  std::mt19937 rng(12345);
  auto value = [](uint32_t rank, uint32_t slot, uint32_t round, uint32_t e) {
    return int32_t(rank * 7919 + slot * 104729 + round * 31 + e * 3) * (round % 2 ? -1 : 1);
  };
  struct WorkerSlot {
    uint32_t round = 0;
    bool sent = false;
  };
  std::vector<std::vector<WorkerSlot>> st(kWorkers, std::vector<WorkerSlot>(kSlots));
  uint64_t multicasts = 0, unicasts = 0, delivered = 0;
  auto deliver = [&](uint32_t rank, uint32_t slot, const Got& g) {
    WorkerSlot& ws = st[rank][slot];
    std::vector<int32_t> want(4, 0);
    for (uint32_t r = 0; r < kWorkers; ++r) {
      for (uint32_t e = 0; e < 4; ++e) {
        want[e] = int32_t(uint32_t(want[e]) + uint32_t(value(r, slot, ws.round, e)));
      }
    }
    ASSERT_THAT(g.sums, ElementsAreArray(want)) << "rank " << rank << " slot " << slot
                                                << " round " << ws.round;
    ++ws.round;
    ws.sent = false;
    ++delivered;
  };
  bool done = false;
  for (int step = 0; step < 200000 && !done; ++step) {
    const uint32_t rank = rng() % kWorkers, slot = rng() % kSlots;
    WorkerSlot& ws = st[rank][slot];
    if (ws.round >= kRounds) {
      done = true;
      for (auto& w : st) for (auto& s : w) done = done && s.round >= kRounds;
      continue;
    }
    // Send (or, if already sent, retransmit after a timeout) the current round's packet.
    std::vector<int32_t> v(4);
    for (uint32_t e = 0; e < 4; ++e) v[e] = value(rank, slot, ws.round, e);
    const uint32_t round = ws.round;
    ws.sent = true;
    // Tag as our client does: one job, tsi = packet id (round * slots + slot).
    Got g = h.SendTagged(rank, slot, uint8_t(round % 2), v, /*job_number=*/3,
                         /*tsi=*/round * kSlots + slot);
    if (g.outcome == Outcome::kMulticast) {
      ++multicasts;
      for (uint32_t r = 0; r < kWorkers; ++r) {
        // Each copy is lost with probability 1/4; only workers still waiting for it accept it.
        if (rng() % 4 == 0) continue;
        if (st[r][slot].round == round && st[r][slot].sent) deliver(r, slot, g);
      }
    } else if (g.outcome == Outcome::kUnicast) {
      ++unicasts;
      if (rng() % 4 != 0 && st[rank][slot].round == round) deliver(rank, slot, g);
    } else {
      ASSERT_TRUE(g.outcome == Outcome::kConsume || g.outcome == Outcome::kDropDuplicate)
          << OutcomeName(g.outcome);
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(multicasts, uint64_t{kSlots} * kRounds);
  EXPECT_GT(unicasts, 100u);  // losses were actually exercised
  EXPECT_EQ(delivered, uint64_t{kWorkers} * kSlots * kRounds);
}

TEST(AggregatorTest, ManyRoundsAlternatingSetsWithLossesStayExact) { RunManyRoundsWithLosses({}); }

TEST(AggregatorTest, ManyRoundsWithLossesStayExactWithTheLateDuplicateGuard) {
  // Losses, spurious timeouts and unicast replies without violations of
  // docs/protocol.md#c6-no-reordering-behind-the-next-packet: the guard must be
  // invisible (the ASSERT on outcomes inside rejects kDropLateDuplicate).
  RunManyRoundsWithLosses({.late_duplicate_guard = true});
}

// ---------------------------------------------------------------------------------------------
// Late-duplicate guard (AggregatorOptions::late_duplicate_guard; docs/protocol.md#late-duplicate-guard,
// docs/protocol.md#d16-late-duplicates-corrupt-two-rounds).

constexpr AggregatorOptions kGuardOn{.late_duplicate_guard = true};

// The late-duplicate row of docs/protocol.md#corner-cases with our client's tags (2 workers,
// slot 9, window 8: the
// packets on slot 9 are tsi 9, 17, 25 of job 1). Returns the results of the three rounds and
// the late packet's outcome.
struct LateDuplicateRun {
  Outcome late;
  Got round0, round1, round2;
  Outcome a2;
};
LateDuplicateRun RunLateDuplicateScenario(AggregatorOptions options) {
  Harness h(2, 16, 8, options);
  const std::vector<int32_t> a0 = {1, 1, 1, 1}, b0 = {2, 2, 2, 2};
  const std::vector<int32_t> a1 = {3, 3, 3, 3}, b1 = {4, 4, 4, 4};
  const std::vector<int32_t> a2 = {5, 5, 5, 5}, b2 = {6, 6, 6, 6};
  LateDuplicateRun run;
  h.SendTagged(0, 9, 0, a0, 1, 9);
  run.round0 = h.SendTagged(1, 9, 0, b0, 1, 9);
  h.SendTagged(0, 9, 1, a1, 1, 17);       // A's next packet to the slot clears its set-0 bit
  run.late = h.SendTagged(0, 9, 0, a0, 1, 9).outcome;  // A's late copy of round 0
  run.round1 = h.SendTagged(1, 9, 1, b1, 1, 17);
  run.a2 = h.SendTagged(0, 9, 0, a2, 1, 25).outcome;
  run.round2 = h.SendTagged(1, 9, 0, b2, 1, 25);
  return run;
}

TEST(AggregatorLateDuplicateGuard, OffTheLateDuplicateCorruptsTwoRounds) {
  const LateDuplicateRun run = RunLateDuplicateScenario({});  // the default: reference behaviour
  EXPECT_EQ(run.late, Outcome::kConsume);
  ASSERT_EQ(run.round1.outcome, Outcome::kMulticast);
  EXPECT_THAT(run.round1.sums, ElementsAreArray(std::vector<int32_t>{4, 4, 4, 4}));  // A lost
  EXPECT_EQ(run.a2, Outcome::kDropDuplicate);  // A's real round-2 data is dropped
  ASSERT_EQ(run.round2.outcome, Outcome::kMulticast);
  EXPECT_THAT(run.round2.sums, ElementsAreArray(std::vector<int32_t>{10, 10, 10, 10}));  // 1+2+1+6
}

TEST(AggregatorLateDuplicateGuard, OnTheLateDuplicateIsDroppedAndEveryRoundIsExact) {
  const LateDuplicateRun run = RunLateDuplicateScenario(kGuardOn);
  ASSERT_EQ(run.round0.outcome, Outcome::kMulticast);
  EXPECT_THAT(run.round0.sums, ElementsAreArray(std::vector<int32_t>{3, 3, 3, 3}));
  EXPECT_EQ(run.late, Outcome::kDropLateDuplicate);
  ASSERT_EQ(run.round1.outcome, Outcome::kMulticast);
  EXPECT_THAT(run.round1.sums, ElementsAreArray(std::vector<int32_t>{7, 7, 7, 7}));
  EXPECT_EQ(run.a2, Outcome::kConsume);
  ASSERT_EQ(run.round2.outcome, Outcome::kMulticast);
  EXPECT_THAT(run.round2.sums, ElementsAreArray(std::vector<int32_t>{11, 11, 11, 11}));
}

TEST(AggregatorLateDuplicateGuard, DroppedLateDuplicateChangesNoState) {
  Harness h(2, 16, 8, kGuardOn);
  h.SendTagged(0, 9, 0, kA, 1, 9, 4, 4);
  ASSERT_EQ(h.SendTagged(1, 9, 0, kB, 1, 9, 2, 2).outcome, Outcome::kMulticast);
  h.SendTagged(0, 9, 1, kC, 1, 17);
  const SlotSetView before0 = h.agg().Inspect(9, 0), before1 = h.agg().Inspect(9, 1);
  EXPECT_EQ(h.SendTagged(0, 9, 0, kA, 1, 9, 100, 100).outcome, Outcome::kDropLateDuplicate);
  const SlotSetView after0 = h.agg().Inspect(9, 0), after1 = h.agg().Inspect(9, 1);
  EXPECT_EQ(after0.bitmap, before0.bitmap);
  EXPECT_EQ(after1.bitmap, before1.bitmap);  // no cross-set clear of A's round-1 bit
  EXPECT_EQ(after0.counter, before0.counter);
  EXPECT_EQ(after1.counter, 1u);
  EXPECT_EQ(after0.exp0, 4);
  EXPECT_THAT(h.Sums(9, 0), ElementsAreArray(Add(kA, kB)));
}

TEST(AggregatorLateDuplicateGuard, DuplicatesWithTheirBitSetKeepTheReferenceOutcomes) {
  Harness h(2, 16, 8, kGuardOn);
  h.SendTagged(0, 1, 0, kA, 5, 1);
  EXPECT_EQ(h.SendTagged(0, 1, 0, kA, 5, 1).outcome, Outcome::kDropDuplicate);
  ASSERT_EQ(h.SendTagged(1, 1, 0, kB, 5, 1).outcome, Outcome::kMulticast);
  Got g = h.SendTagged(0, 1, 0, kA, 5, 1);  // result lost for A: unicast as in the reference
  EXPECT_EQ(g.outcome, Outcome::kUnicast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(kA, kB)));
}

TEST(AggregatorLateDuplicateGuard, LateDuplicateFromThePreviousJobIsDropped) {
  // A's last packet of job 7 on slot 2 (set 0) is duplicated; the copy arrives after A's first
  // packet of job 8 on the slot (set 1, tsi 2 again: tsi restarts each job).
  Harness h(2, 16, 8, kGuardOn);
  h.SendTagged(0, 2, 0, kA, 7, 2);
  ASSERT_EQ(h.SendTagged(1, 2, 0, kB, 7, 2).outcome, Outcome::kMulticast);
  EXPECT_EQ(h.SendTagged(0, 2, 1, kC, 8, 2).outcome, Outcome::kConsume);
  EXPECT_EQ(h.SendTagged(0, 2, 0, kA, 7, 2).outcome, Outcome::kDropLateDuplicate);
  Got g = h.SendTagged(1, 2, 1, kB, 8, 2);
  ASSERT_EQ(g.outcome, Outcome::kMulticast);
  EXPECT_THAT(g.sums, ElementsAreArray(Add(kC, kB)));
}

TEST(AggregatorLateDuplicateGuard, SameTsiAndSetInLaterJobsIsNewAcrossJobNumberWrap) {
  // One packet per job on slot 0 (tsi 0 every time), sets alternating, 600 jobs: the job
  // number wraps twice; the late copy of the last packet is still recognised after the wrap.
  Harness h(2, 4, 8, kGuardOn);
  uint8_t set = 0;
  for (uint32_t job = 250; job < 850; ++job, set ^= 1) {
    const std::vector<int32_t> a(4, int32_t(job)), b(4, int32_t(2 * job));
    ASSERT_EQ(h.SendTagged(0, 0, set, a, uint8_t(job), 0).outcome, Outcome::kConsume) << job;
    Got g = h.SendTagged(1, 0, set, b, uint8_t(job), 0);
    ASSERT_EQ(g.outcome, Outcome::kMulticast) << job;
    ASSERT_THAT(g.sums, ElementsAreArray(std::vector<int32_t>(4, int32_t(3 * job)))) << job;
    if (job == 511) {  // a late copy of job 510's packet (set `set ^ 1`), job number 254
      EXPECT_EQ(h.SendTagged(0, 0, set ^ 1, a, uint8_t(510), 0).outcome,
                Outcome::kDropLateDuplicate);
    }
    if (job == 512) {  // job number 0 after 255: a late copy of job 511 (number 255)
      EXPECT_EQ(h.SendTagged(1, 0, set ^ 1, b, uint8_t(511), 0).outcome,
                Outcome::kDropLateDuplicate);
    }
  }
}

TEST(AggregatorLateDuplicateGuard, ResetForgetsTheStoredTags) {
  Harness h(1, 4, 8, kGuardOn);
  ASSERT_EQ(h.SendTagged(0, 3, 0, kA, 1, 3).outcome, Outcome::kMulticast);
  ASSERT_EQ(h.SendTagged(0, 3, 1, kB, 1, 7).outcome, Outcome::kMulticast);
  EXPECT_EQ(h.SendTagged(0, 3, 0, kA, 1, 3).outcome, Outcome::kDropLateDuplicate);
  ASSERT_TRUE(h.agg().Reset(3).ok());  // a new session (more workers: the tags grow too)
  EXPECT_EQ(h.SendTagged(0, 3, 0, kA, 1, 3).outcome, Outcome::kConsume);
  EXPECT_EQ(h.SendTagged(2, 3, 0, kA, 1, 3).outcome, Outcome::kConsume);
  EXPECT_TRUE(h.agg().options().late_duplicate_guard);
}

TEST(AggregatorLateDuplicateGuard, WorksWithTheLargestConfiguration) {
  auto a = Aggregator::Create(wire::kMaxSlots, 64, kGuardOn);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->Reset(Aggregator::kMaxWorkers).ok());
  const auto be = ToBE(kA);
  Contribution c{.rank = 255, .slot = wire::kMaxSlots - 1, .set = 1, .payload_be = be.data(),
                 .num_elements = 4, .job_number = 9, .tsi = 1234567};
  EXPECT_EQ(a->Process(c).outcome, Outcome::kConsume);
  c.set = 0;
  c.tsi = 7654321;
  EXPECT_EQ(a->Process(c).outcome, Outcome::kConsume);  // clears rank 255's set-1 bit
  c.set = 1;
  c.tsi = 1234567;
  EXPECT_EQ(a->Process(c).outcome, Outcome::kDropLateDuplicate);
}

// A model of many all-reduce calls through one switch, following our client
// (src/client/engine.cc, docs/protocol.md#slicing, docs/protocol.md#slot-and-set-assignment):
// per rank `threads` threads, thread t owns slots
// [t·W, t·W+W); a call of n elements gives thread t its share (docs/protocol.md#slicing); a
// slice of `blocks`
// packets has batch = min(W, blocks) and total = blocks (+ batch for float32: the extra
// batch); packet p goes to slot p mod batch with that slot's persistent "next set" bit,
// tsi = p, job number = call index & 0xFF; packet p + batch is sent when p's result is
// accepted; a result is accepted only for the (job number, tsi, slot, set) in flight.
// The network: per-worker FIFO towards the switch
// (docs/protocol.md#c6-no-reordering-behind-the-next-packet), request and result copies lost at
// random, timers firing at random (also spuriously), results in flight while workers move on.
// Optionally `late_copy`: a sent packet is duplicated and the copy delivered right behind the
// worker's next packet to the same slot (the late duplicate of
// docs/protocol.md#corner-cases).
struct SimJob {
  uint64_t num_elements;
  bool is_float;
};
struct SimConfig {
  uint32_t ranks = 3;
  uint32_t threads = 2;
  uint32_t window = 4;
  uint32_t elements = 4;  // per packet
  std::vector<SimJob> jobs;
  uint32_t request_loss_pct = 5;
  uint32_t result_loss_pct = 10;
  uint32_t timeout_pct = 5;    // chance that a step fires a timer instead
  uint32_t late_copy_pct = 0;  // chance that a new packet gets a late copy
  uint32_t max_skew = 8;       // calls a thread may run ahead of its rank's slowest thread
  uint64_t max_steps = 5'000'000;
  AggregatorOptions options;
  uint32_t seed = 1;
};
struct SimResult {
  bool finished = false;        // every thread of every rank completed every call
  uint64_t results_accepted = 0;
  uint64_t wrong_results = 0;   // accepted results whose sums were not the exact sum
  std::map<Outcome, uint64_t> outcomes;
  uint64_t late_copies_sent = 0;
  uint64_t count(Outcome o) const {
    auto it = outcomes.find(o);
    return it == outcomes.end() ? 0 : it->second;
  }
  uint32_t max_job_number_wraps = 0;
};

class MultiJobSim {
 public:
  explicit MultiJobSim(SimConfig c) : c_(std::move(c)), rng_(c_.seed) {
    auto a = Aggregator::Create(c_.threads * c_.window, c_.elements, c_.options);
    EXPECT_TRUE(a.ok()) << a.status();
    agg_ = std::make_unique<Aggregator>(std::move(a).value());
    EXPECT_TRUE(agg_->Reset(c_.ranks).ok());
    streams_.resize(size_t{c_.ranks} * c_.threads);
    for (uint32_t r = 0; r < c_.ranks; ++r) {
      for (uint32_t t = 0; t < c_.threads; ++t) {
        Stream& s = stream(r, t);
        s.rank = r;
        s.thread = t;
        s.slots.resize(c_.window);
        s.late.resize(c_.window);
      }
    }
  }

  SimResult Run() {
    for (uint64_t step = 0; step < c_.max_steps; ++step) {
      bool all_done = true;
      for (Stream& s : streams_) {
        if (!s.active) TryStart(s);
        all_done = all_done && !s.active && s.job >= c_.jobs.size();
      }
      if (all_done) {
        res_.finished = true;
        break;
      }
      Stream& s = streams_[rng_() % streams_.size()];
      const uint32_t dice = rng_() % 100;
      if (dice < c_.timeout_pct) {
        FireTimer(s);
      } else if (dice % 2 == 0 && !s.to_switch.empty()) {
        SwitchStep(s);
      } else if (!s.inbox.empty()) {
        Deliver(s);
      } else if (!s.to_switch.empty()) {
        SwitchStep(s);
      }
    }
    res_.max_job_number_wraps = uint32_t(c_.jobs.size() / 256);
    return res_;
  }

 private:
  static constexpr uint64_t kIdle = ~uint64_t{0};
  struct Packet {
    uint32_t rank, slot;
    uint8_t set, job_number;
    uint32_t tsi;
    std::vector<int32_t> values;
  };
  struct Result {
    uint32_t slot;
    uint8_t set, job_number;
    uint32_t tsi;
    std::vector<int32_t> sums;
  };
  struct SlotState {
    uint8_t next_set = 0;  // persistent across calls (docs/protocol.md#slot-and-set-assignment)
    uint64_t packet = kIdle;
    uint8_t set = 0;
  };
  struct Stream {
    uint32_t rank = 0, thread = 0;
    size_t job = 0;  // the current (or next) call
    bool active = false;
    uint64_t total = 0, batch = 0, received = 0;
    std::vector<SlotState> slots;
    std::vector<std::optional<Packet>> late;  // late copy waiting for the slot's next packet
    std::deque<Packet> to_switch;
    std::deque<Result> inbox;
  };

  Stream& stream(uint32_t rank, uint32_t thread) {
    return streams_[size_t{rank} * c_.threads + thread];
  }

  uint64_t SliceElements(size_t job, uint32_t thread) const {
    const uint64_t n = c_.jobs[job].num_elements;
    return n / c_.threads + (thread < n % c_.threads ? 1 : 0);
  }

  int32_t Value(uint32_t rank, uint32_t thread, size_t job, uint64_t p, uint32_t e) const {
    uint64_t x = (uint64_t{rank} + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{thread} << 56) ^
                 (uint64_t(job) << 32) ^ (p << 8) ^ e;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return int32_t(uint32_t(x));
  }

  void TryStart(Stream& s) {
    while (!s.active && s.job < c_.jobs.size()) {
      for (uint32_t t = 0; t < c_.threads; ++t) {
        if (s.job > stream(s.rank, t).job + c_.max_skew) return;  // bounded outstanding calls
      }
      const uint64_t blocks = (SliceElements(s.job, s.thread) + c_.elements - 1) / c_.elements;
      s.batch = std::min<uint64_t>(c_.window, blocks);
      s.total = blocks + (c_.jobs[s.job].is_float ? s.batch : 0);
      s.received = 0;
      if (s.total == 0) {  // an empty slice completes at once
        ++s.job;
        continue;
      }
      s.active = true;
      for (uint64_t p = 0; p < s.batch; ++p) SendNew(s, p);
    }
  }

  Packet Build(const Stream& s, uint64_t p) const {
    const uint32_t i = uint32_t(p % s.batch);
    Packet pkt{s.rank, s.thread * c_.window + i, s.slots[i].set, uint8_t(s.job & 0xFF),
               uint32_t(p), std::vector<int32_t>(c_.elements)};
    for (uint32_t e = 0; e < c_.elements; ++e) pkt.values[e] = Value(s.rank, s.thread, s.job, p, e);
    return pkt;
  }

  void SendNew(Stream& s, uint64_t p) {
    const uint32_t i = uint32_t(p % s.batch);
    SlotState& slot = s.slots[i];
    slot.packet = p;
    slot.set = slot.next_set;
    slot.next_set ^= 1;
    Packet pkt = Build(s, p);
    s.to_switch.push_back(pkt);
    // The earlier packet's copy, reordered behind this one
    // (docs/protocol.md#c6-no-reordering-behind-the-next-packet violated).
    if (s.late[i]) {
      s.to_switch.push_back(*std::move(s.late[i]));
      s.late[i].reset();
      ++res_.late_copies_sent;
    }
    if (c_.late_copy_pct > 0 && rng_() % 100 < c_.late_copy_pct) s.late[i] = std::move(pkt);
  }

  void FireTimer(Stream& s) {
    if (!s.active || s.to_switch.size() > 4 * c_.window) return;
    const uint32_t i = uint32_t(rng_() % s.batch);
    if (s.slots[i].packet == kIdle) return;
    s.to_switch.push_back(Build(s, s.slots[i].packet));  // retransmission: same slot and set
  }

  void SwitchStep(Stream& s) {
    Packet pkt = std::move(s.to_switch.front());
    s.to_switch.pop_front();
    if (rng_() % 100 < c_.request_loss_pct) return;
    const std::vector<uint8_t> be = ToBE(pkt.values);
    const AggregationResult r = agg_->Process(Contribution{
        .rank = pkt.rank, .slot = pkt.slot, .set = pkt.set, .payload_be = be.data(),
        .num_elements = c_.elements, .job_number = pkt.job_number, .tsi = pkt.tsi});
    ++res_.outcomes[r.outcome];
    if (r.outcome != Outcome::kMulticast && r.outcome != Outcome::kUnicast) return;
    Result out{pkt.slot, pkt.set, pkt.job_number, pkt.tsi,
               std::vector<int32_t>(r.sums, r.sums + r.num_elements)};
    if (r.outcome == Outcome::kUnicast) {
      if (rng_() % 100 >= c_.result_loss_pct) s.inbox.push_back(std::move(out));
      return;
    }
    for (uint32_t rank = 0; rank < c_.ranks; ++rank) {
      if (rng_() % 100 >= c_.result_loss_pct) stream(rank, s.thread).inbox.push_back(out);
    }
  }

  void Deliver(Stream& s) {
    Result res = std::move(s.inbox.front());
    s.inbox.pop_front();
    // The engine's acceptance rules: this call, a slot of this slice, the packet in flight.
    const uint32_t base = s.thread * c_.window;
    if (!s.active || res.job_number != uint8_t(s.job & 0xFF) || res.slot < base ||
        res.slot >= base + s.batch) {
      return;
    }
    SlotState& slot = s.slots[res.slot - base];
    if (slot.packet == kIdle || res.tsi != slot.packet || res.set != slot.set) return;
    std::vector<int32_t> want(c_.elements, 0);
    for (uint32_t r = 0; r < c_.ranks; ++r) {
      for (uint32_t e = 0; e < c_.elements; ++e) {
        want[e] = int32_t(uint32_t(want[e]) + uint32_t(Value(r, s.thread, s.job, slot.packet, e)));
      }
    }
    ++res_.results_accepted;
    if (res.sums != want) ++res_.wrong_results;
    const uint64_t p = slot.packet;
    slot.packet = kIdle;
    if (p + s.batch < s.total) SendNew(s, p + s.batch);
    if (++s.received == s.total) {
      s.active = false;
      ++s.job;
    }
  }

  SimConfig c_;
  std::mt19937 rng_;
  std::unique_ptr<Aggregator> agg_;
  std::vector<Stream> streams_;
  SimResult res_;
};

// Calls of varying sizes: empty, smaller than one packet per thread, partial and full windows,
// several windows; int32 and float32 (extra batch).
std::vector<SimJob> RandomJobs(size_t count, const SimConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint64_t per_window = uint64_t{c.window} * c.elements * c.threads;
  std::vector<SimJob> jobs(count);
  for (SimJob& j : jobs) {
    const uint32_t kind = rng() % 10;
    if (kind == 0) j.num_elements = 0;
    else if (kind < 4) j.num_elements = 1 + rng() % (c.elements * c.threads);
    else if (kind < 8) j.num_elements = 1 + rng() % per_window;
    else j.num_elements = 1 + rng() % (4 * per_window);
    j.is_float = rng() % 2 == 0;
  }
  return jobs;
}

std::string Describe(const SimResult& r) {
  std::ostringstream s;
  s << "finished=" << r.finished << " accepted=" << r.results_accepted
    << " wrong=" << r.wrong_results << " late_copies=" << r.late_copies_sent;
  for (const auto& [o, n] : r.outcomes) s << " " << OutcomeName(o) << "=" << n;
  return s.str();
}

TEST(AggregatorLateDuplicateGuard, RandomizedManyJobsNeverDropALegitimateContribution) {
  // 800 calls (job number wraps 3 times), 3 ranks x 2 threads, losses and spurious timers,
  // no docs/protocol.md#c6-no-reordering-behind-the-next-packet violation: with the guard on
  // every call completes with exact sums and the guard
  // never fires.
  for (uint32_t seed : {1u, 2u, 3u}) {
    SimConfig c;
    c.jobs = RandomJobs(800, c, seed);
    c.options = kGuardOn;
    c.seed = seed;
    const SimResult r = MultiJobSim(c).Run();
    SCOPED_TRACE(Describe(r));
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.wrong_results, 0u);
    EXPECT_EQ(r.count(Outcome::kDropLateDuplicate), 0u);
    EXPECT_GT(r.count(Outcome::kUnicast), 100u);  // losses were exercised
    EXPECT_GT(r.results_accepted, 10000u);
  }
}

TEST(AggregatorLateDuplicateGuard, PeriodicCallsThatReuseASlotOnlyEvery128CallsStayLive) {
  // The pattern that defeats a guard keyed on the raw 8-bit job number: a training loop of 128
  // calls where only the largest (int32, 6 packets) touches slot 5, once per iteration; its
  // set alternates, so every 256 calls the same (slot 5, set, job number, tsi 5) recurs with no
  // other use of that (slot, set) in between. Unwrapped job sequences tell the calls apart.
  SimConfig c;
  c.ranks = 2;
  c.threads = 1;
  c.window = 8;
  c.max_skew = 2;
  for (size_t k = 0; k < 4 * 128 + 1; ++k) {
    c.jobs.push_back(SimJob{k % 128 == 0 ? 6u * c.elements : 1u, /*is_float=*/false});
  }
  c.options = kGuardOn;
  const SimResult r = MultiJobSim(c).Run();
  SCOPED_TRACE(Describe(r));
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.wrong_results, 0u);
  EXPECT_EQ(r.count(Outcome::kDropLateDuplicate), 0u);
}

TEST(AggregatorLateDuplicateGuard, RandomizedLateCopiesCorruptWithoutTheGuardAndNotWithIt) {
  // Same traffic as above plus late copies (docs/protocol.md#c6-no-reordering-behind-the-next-packet
  // violated, docs/protocol.md#late-duplicate-guard): without the guard results
  // go wrong or the run hangs; with it every call completes with exact sums.
  SimConfig c;
  c.jobs = RandomJobs(600, c, 11);
  c.late_copy_pct = 3;
  c.max_steps = 2'000'000;
  c.seed = 11;
  const SimResult off = MultiJobSim(c).Run();
  {
    SCOPED_TRACE("guard off: " + Describe(off));
    EXPECT_GT(off.late_copies_sent, 0u);
    EXPECT_TRUE(off.wrong_results > 0 || !off.finished);
  }
  c.options = kGuardOn;
  const SimResult on = MultiJobSim(c).Run();
  SCOPED_TRACE("guard on: " + Describe(on));
  EXPECT_TRUE(on.finished);
  EXPECT_EQ(on.wrong_results, 0u);
  EXPECT_GT(on.late_copies_sent, 50u);
  EXPECT_GT(on.count(Outcome::kDropLateDuplicate), 0u);
}

// ---------------------------------------------------------------------------------------------
// A leaf of a two-level job (AggregatorOptions::hold_completed_rounds).

constexpr AggregatorOptions kLeaf{.hold_completed_rounds = true};

TEST(AggregatorLeaf, CompletedRoundGoesUpWithPartialSumsAndMaxExponentsAndIsHeld) {
  Harness h(2, 16, 8, kLeaf);
  EXPECT_EQ(h.Send(0, 3, 0, kA, 2, -1).outcome, Outcome::kConsume);
  const Got up = h.Send(1, 3, 0, kB, 5, -3);
  EXPECT_EQ(up.outcome, Outcome::kForwardUp);
  EXPECT_THAT(up.sums, ElementsAreArray(Add(kA, kB)));
  EXPECT_EQ(up.exp0, 5);
  EXPECT_EQ(up.exp1, -1);
  EXPECT_TRUE(h.Held(3, 0));
  EXPECT_FALSE(h.Held(3, 1));
}

TEST(AggregatorLeaf, DuplicateOfAHeldRoundResendsThePartialNeverAsAResult) {
  Harness h(2, 16, 8, kLeaf);
  h.Send(0, 3, 0, kA);
  h.Send(1, 3, 0, kB);
  for (uint32_t rank : {0u, 1u, 0u}) {
    const Got g = h.Send(rank, 3, 0, rank == 0 ? kA : kB);
    EXPECT_EQ(g.outcome, Outcome::kResendUp);
    EXPECT_THAT(g.sums, ElementsAreArray(Add(kA, kB)));  // the partial, unchanged
  }
  EXPECT_TRUE(h.Held(3, 0));
}

TEST(AggregatorLeaf, TotalReleasesTheRoundAndLaterDuplicatesGetTheTotal) {
  Harness h(2, 16, 8, kLeaf);
  h.Send(0, 3, 1, kA, 1, 1);
  h.Send(1, 3, 1, kB, 2, 2);
  const Got m = h.Total(3, 1, kC, 7, 6);
  EXPECT_EQ(m.outcome, Outcome::kMulticast);
  EXPECT_THAT(m.sums, ElementsAreArray(kC));
  EXPECT_EQ(m.exp0, 7);
  EXPECT_EQ(m.exp1, 6);
  EXPECT_FALSE(h.Held(3, 1));
  const Got u = h.Send(0, 3, 1, kA);
  EXPECT_EQ(u.outcome, Outcome::kUnicast);
  EXPECT_THAT(u.sums, ElementsAreArray(kC));
  EXPECT_EQ(u.exp0, 7);
  // The parent repeats its total (it answered a resent partial): nothing waits for it.
  EXPECT_EQ(h.Total(3, 1, kC, 7, 6).outcome, Outcome::kDropStale);
  // The slot's next round, in the other set, runs as usual.
  EXPECT_EQ(h.Send(0, 3, 0, kB).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Send(1, 3, 0, kB).outcome, Outcome::kForwardUp);
}

TEST(AggregatorLeaf, TotalsNoRoundWaitsForChangeNothing) {
  Harness h(2, 16, 8, kLeaf);
  EXPECT_EQ(h.Total(3, 0, kC).outcome, Outcome::kDropStale);  // idle slot
  h.Send(0, 3, 0, kA);
  EXPECT_EQ(h.Total(3, 0, kC).outcome, Outcome::kDropStale);  // incomplete round
  EXPECT_THAT(h.Sums(3, 0), ElementsAreArray(kA));
  h.Send(1, 3, 0, kB);
  EXPECT_EQ(h.Total(3, 0, {1, 2}).outcome, Outcome::kDropSizeMismatch);
  EXPECT_EQ(h.Total(3, 1, kC).outcome, Outcome::kDropStale);  // the other set
  EXPECT_EQ(h.Total(16, 0, kC).outcome, Outcome::kDropInvalid);
  EXPECT_EQ(h.Total(3, 2, kC).outcome, Outcome::kDropInvalid);
  EXPECT_EQ(h.Total(3, 0, std::vector<int32_t>(9, 1)).outcome, Outcome::kDropInvalid);
  EXPECT_TRUE(h.Held(3, 0));
  EXPECT_THAT(h.Sums(3, 0), ElementsAreArray(Add(kA, kB)));
  // A one-level aggregator has no held rounds to complete.
  Harness one(2);
  one.Send(0, 3, 0, kA);
  one.Send(1, 3, 0, kB);
  EXPECT_EQ(one.Total(3, 0, kC).outcome, Outcome::kDropInvalid);
}

TEST(AggregatorLeaf, NewContributionToAHeldRoundIsDropped) {
  // Worker 0 cleared its bit in set 0 by sending set 1 without the round's result (only a
  // broken or hostile worker can): its "new" packet to the held set must not touch the sums.
  Harness h(2, 16, 8, kLeaf);
  h.Send(0, 3, 0, kA);
  h.Send(1, 3, 0, kB);
  EXPECT_EQ(h.Send(0, 3, 1, kC).outcome, Outcome::kConsume);
  EXPECT_EQ(h.Send(0, 3, 0, kC).outcome, Outcome::kDropDuplicate);
  EXPECT_THAT(h.Sums(3, 0), ElementsAreArray(Add(kA, kB)));
  EXPECT_TRUE(h.Held(3, 0));
}

TEST(AggregatorLeaf, SingleWorkerLeafForwardsEveryRound) {
  Harness h(1, 16, 8, kLeaf);
  EXPECT_EQ(h.Send(0, 0, 0, kA).outcome, Outcome::kForwardUp);
  EXPECT_EQ(h.Send(0, 0, 0, kA).outcome, Outcome::kResendUp);
  EXPECT_EQ(h.Total(0, 0, kB).outcome, Outcome::kMulticast);
  EXPECT_EQ(h.Send(0, 0, 0, kA).outcome, Outcome::kUnicast);
  EXPECT_EQ(h.Send(0, 0, 1, kC).outcome, Outcome::kForwardUp);
  EXPECT_TRUE(h.Held(0, 1));
  EXPECT_FALSE(h.Held(0, 0));
}

TEST(AggregatorLeaf, ResetForgetsHeldRounds) {
  Harness h(2, 16, 8, kLeaf);
  h.Send(0, 3, 0, kA);
  h.Send(1, 3, 0, kB);
  ASSERT_TRUE(h.Held(3, 0));
  ASSERT_TRUE(h.agg().Reset(2).ok());
  EXPECT_FALSE(h.Held(3, 0));
  EXPECT_EQ(h.Total(3, 0, kC).outcome, Outcome::kDropStale);
}

TEST(AggregatorTest, OutcomeNamesAreDistinct) {
  std::map<std::string_view, int> seen;
  for (Outcome o : {Outcome::kConsume, Outcome::kMulticast, Outcome::kUnicast,
                    Outcome::kDropDuplicate, Outcome::kDropSizeMismatch, Outcome::kDropInvalid,
                    Outcome::kDropLateDuplicate, Outcome::kForwardUp, Outcome::kResendUp,
                    Outcome::kDropStale}) {
    ++seen[OutcomeName(o)];
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(seen.count("unknown"), 0u);
}

}  // namespace
}  // namespace switchml::dataplane
