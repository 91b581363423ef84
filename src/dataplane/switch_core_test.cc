#include "dataplane/switch_core.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dataplane/test_packets.h"

namespace switchml::dataplane {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Encode;
using testing::ExpectedResponse;
using testing::Ip;
using testing::OwnedRx;
using testing::Ramp;
using testing::Request;
using testing::Sum;
using transport::Endpoint;

struct Sent {
  std::vector<uint8_t> bytes;
  Endpoint to;
  const uint8_t* data;  // where the datagram pointed (to check sharing)
  bool single_frame = false;
};

WorkerRegistration Reg(uint32_t rank, uint32_t num_workers, uint32_t ipv4,
                                   std::vector<uint16_t> ports = {}) {
  WorkerRegistration r;
  r.session_id = 77;
  r.rank = rank;
  r.num_workers = num_workers;
  r.ipv4 = ipv4;
  r.udp_ports = std::move(ports);
  return r;
}

class CoreHarness {
 public:
  explicit CoreHarness(SwitchConfig config = Small()) : core_(Make(config)) {}

  static SwitchConfig Small() {
    SwitchConfig c;
    c.num_slots = 16;
    c.max_elements_per_packet = 256;
    c.max_workers = 8;
    return c;
  }

  void Register(const WorkerRegistration& reg) {
    Status s = core_.RegisterWorker(reg);
    ASSERT_TRUE(s.ok()) << s;
  }

  std::vector<Sent> Burst(std::vector<OwnedRx> in) {
    std::vector<transport::RxDatagram> rx;
    for (auto& d : in) rx.push_back(d.rx());
    core_.ProcessBurst(rx, out_);
    std::vector<Sent> sent;
    for (const auto& tx : out_.datagrams()) {
      sent.push_back(Sent{std::vector<uint8_t>(tx.data, tx.data + tx.size), tx.to, tx.data,
                          tx.single_frame});
    }
    return sent;
  }
  std::vector<Sent> One(const Request& r, Endpoint from) {
    return Burst({OwnedRx{Encode(r), from}});
  }

  SwitchCore& core() { return core_; }
  const SwitchCounters& counters() { return core_.counters(); }
  Outbox& outbox() { return out_; }

 private:
  static SwitchCore Make(const SwitchConfig& c) {
    auto core = SwitchCore::Create(c);
    EXPECT_TRUE(core.ok()) << core.status();
    return std::move(core).value();
  }
  SwitchCore core_;
  Outbox out_;
};

// Every received datagram lands in exactly one bucket (switch_counters.h).
void ExpectBucketsAddUp(const SwitchCounters& c) {
  uint64_t sum = c.rx_truncated + c.unknown_sender + c.job_ended + c.job_not_running +
                 c.job_slot_out_of_range + c.slot_out_of_range + c.too_large +
                 c.wrong_io_thread + c.size_mismatch + c.aggregator_invalid + c.sim_ingress_drops + c.consumed +
                 c.duplicates_dropped + c.late_duplicates_dropped + c.multicast_rounds +
                 c.unicast_replies + c.uplink_sent + c.uplink_resent + c.parent_stale;
  for (uint64_t e : c.decode_errors) sum += e;
  EXPECT_EQ(sum, c.datagrams_received);
}

const uint32_t kIpA = Ip(10, 0, 0, 1);
const uint32_t kIpB = Ip(10, 0, 0, 2);
const uint32_t kIpC = Ip(10, 0, 0, 3);

// ---------------------------------------------------------------------------------------------
// Configuration.

TEST(SwitchConfigTest, DefaultsAreValid) {
  SwitchConfig c;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.num_slots, 8192u);
  EXPECT_EQ(c.max_elements_per_packet, 1024u);
  EXPECT_EQ(c.max_workers, 256u);
}

TEST(SwitchConfigTest, ValidateNamesTheBadField) {
  struct Case {
    void (*mutate)(SwitchConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](SwitchConfig& c) { c.num_slots = 0; }, "num_slots"},
      {[](SwitchConfig& c) { c.num_slots = 16385; }, "num_slots"},
      {[](SwitchConfig& c) { c.max_elements_per_packet = 63; }, "max_elements_per_packet"},
      {[](SwitchConfig& c) { c.max_elements_per_packet = 1025; }, "max_elements_per_packet"},
      {[](SwitchConfig& c) { c.max_workers = 0; }, "max_workers"},
      {[](SwitchConfig& c) { c.max_workers = 257; }, "max_workers"},
      {[](SwitchConfig& c) { c.ingress_drop_probability = -0.1; }, "ingress_drop_probability"},
      {[](SwitchConfig& c) { c.ingress_drop_probability = 0.0 / 0.0; }, "ingress_drop_probability"},
      {[](SwitchConfig& c) { c.egress_drop_probability = 1.5; }, "egress_drop_probability"},
  };
  for (const Case& k : cases) {
    SwitchConfig c;
    k.mutate(c);
    Status s = c.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k.field;
    EXPECT_THAT(s.message(), HasSubstr(k.field));
    auto core = SwitchCore::Create(c);
    EXPECT_FALSE(core.ok()) << k.field;
  }
}

// ---------------------------------------------------------------------------------------------
// Rejections before the aggregator.

TEST(SwitchCoreTest, CountsEachDecodeErrorSeparately) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  const Endpoint a{kIpA, 4000};
  auto good = Encode({.slot = 1, .values = Ramp(64, 1, 1)});

  std::vector<uint8_t> short_one(good.begin(), good.begin() + 9);
  std::vector<uint8_t> bad_type = good;
  bad_type[0] = uint8_t(2 << 4 | 1);
  std::vector<uint8_t> bad_code = good;
  bad_code[0] = uint8_t(1 << 4 | 2);  // 512-byte code: unsupported
  std::vector<uint8_t> bad_len = good;
  bad_len.push_back(0);
  OwnedRx truncated{good, a, /*truncated=*/true};

  auto sent = h.Burst({{short_one, a}, {bad_type, a}, {bad_type, a}, {bad_code, a},
                       {bad_len, a}, {bad_len, a}, {bad_len, a}, truncated});
  EXPECT_TRUE(sent.empty());
  const SwitchCounters& c = h.counters();
  EXPECT_EQ(c.datagrams_received, 8u);
  EXPECT_EQ(c.decode_error(wire::DecodeError::kTruncated), 1u);
  EXPECT_EQ(c.decode_error(wire::DecodeError::kUnknownMsgType), 2u);
  EXPECT_EQ(c.decode_error(wire::DecodeError::kUnsupportedSizeCode), 1u);
  EXPECT_EQ(c.decode_error(wire::DecodeError::kLengthMismatch), 3u);
  EXPECT_EQ(c.rx_truncated, 1u);
  EXPECT_EQ(c.consumed, 0u);
  // Nothing reached the aggregator.
  EXPECT_EQ(h.core().aggregator().Inspect(1, 0).bitmap[0], 0u);
  ExpectBucketsAddUp(c);
}

TEST(SwitchCoreTest, UnknownSendersAreCountedAndDropped) {
  CoreHarness h;
  auto pkt = Encode({.slot = 0, .values = Ramp(64, 0, 1)});
  // No session yet: everyone is unknown.
  EXPECT_TRUE(h.Burst({{pkt, {kIpA, 4000}}}).empty());
  EXPECT_EQ(h.counters().unknown_sender, 1u);

  h.Register(Reg(0, 2, kIpA, {4000, 4001}));
  h.Register(Reg(1, 2, kIpB));  // reference mode: any port of kIpB
  EXPECT_TRUE(h.Burst({{pkt, {kIpA, 4002}},      // registered host, unregistered port
                       {pkt, {kIpC, 4000}}})      // unregistered host
                  .empty());
  EXPECT_EQ(h.counters().unknown_sender, 3u);
  EXPECT_EQ(h.counters().consumed, 0u);
  // Registered ones pass.
  h.Burst({{pkt, {kIpA, 4001}}, {Encode({.slot = 1, .values = Ramp(64, 0, 1)}), {kIpB, 1234}}});
  EXPECT_EQ(h.counters().consumed, 2u);
  ExpectBucketsAddUp(h.counters());
}

TEST(SwitchCoreTest, SlotOutOfRangeAndTooLargeAreDropped) {
  CoreHarness h;  // 16 slots, 256 elements max
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  const Endpoint a{kIpA, 4000};
  EXPECT_TRUE(h.One({.slot = 16, .values = Ramp(64, 0, 1)}, a).empty());
  EXPECT_TRUE(h.One({.slot = 16383, .values = Ramp(64, 0, 1)}, a).empty());
  EXPECT_EQ(h.counters().slot_out_of_range, 2u);
  EXPECT_TRUE(h.One({.slot = 0, .values = Ramp(512, 0, 1)}, a).empty());
  EXPECT_TRUE(h.One({.slot = 0, .values = Ramp(1024, 0, 1)}, a).empty());
  EXPECT_EQ(h.counters().too_large, 2u);
  EXPECT_EQ(h.counters().consumed, 0u);
  // The largest slot and the largest size are fine.
  EXPECT_TRUE(h.One({.slot = 15, .values = Ramp(256, 0, 1)}, a).empty());
  EXPECT_EQ(h.counters().consumed, 1u);
  ExpectBucketsAddUp(h.counters());
}

// ---------------------------------------------------------------------------------------------
// Rounds through ProcessBurst.

TEST(SwitchCoreTest, TwoWorkerRoundMulticastsExactBytesToPerThreadPorts) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA, {5000, 5001}));
  h.Register(Reg(1, 2, kIpB, {6000, 6001}));
  // Thread 1 of both workers uses slot 9, set 1.
  Request ra{.slot = 9, .set = 1, .values = Ramp(64, -100, 7), .exp0 = -4, .exp1 = 2,
             .job_number = 5, .tsi = 70};
  Request rb{.slot = 9, .set = 1, .values = Ramp(64, 2000000000, 99991), .exp0 = -6, .exp1 = 3,
             .job_number = 5, .tsi = 70};
  EXPECT_TRUE(h.One(ra, {kIpA, 5001}).empty());
  auto sent = h.One(rb, {kIpB, 6001});
  ASSERT_EQ(sent.size(), 2u);
  const auto expected = ExpectedResponse(rb, Sum({ra.values, rb.values}), -4, 3);
  EXPECT_EQ(sent[0].to, (Endpoint{kIpA, 5001}));
  EXPECT_EQ(sent[1].to, (Endpoint{kIpB, 6001}));
  EXPECT_EQ(sent[0].bytes, expected);
  EXPECT_EQ(sent[1].bytes, expected);
  // Encoded once, shared by both copies.
  EXPECT_EQ(sent[0].data, sent[1].data);
  // Spot-check the header bytes against the wire format (docs/protocol.md#golden-example):
  // size code 1, job 5,
  // tsi 70 little-endian, pool index 0x8009 (set bit + slot 9), exponents.
  EXPECT_THAT(std::vector<uint8_t>(expected.begin(), expected.begin() + 10),
              ElementsAre(0x11, 0x05, 0x46, 0x00, 0x00, 0x00, 0x80, 0x09, 0xFC, 0x03));
  EXPECT_EQ(h.counters().multicast_rounds, 1u);
  EXPECT_EQ(h.counters().consumed, 1u);
  EXPECT_EQ(h.counters().datagrams_sent, 2u);
}

TEST(SwitchCoreTest, GoldenReferenceExampleGetsTheGoldenResponseHeader) {
  // docs/protocol.md#golden-example: rank 1, job id 5, packet id 70, slot 6, set 1, 256-byte
  // payload, exponent 3 →
  // "11 05 46 00 00 00 80 06 03 xx"; the response header is "11 05 46 00 00 00 80 06 <max e0>
  // <max e1>". Rank 0's packet sets bit 14 of the pool index, which is ignored on input.
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  std::vector<uint8_t> from_a = Encode({.slot = 6, .set = 1, .values = Ramp(64, 1, 0),
                                        .exp0 = 1, .exp1 = 9, .job_number = 5, .tsi = 70});
  from_a[6] |= 0x40;  // bit 14
  EXPECT_TRUE(h.Burst({{from_a, {kIpA, 4000}}}).empty());
  std::vector<uint8_t> golden = {0x11, 0x05, 0x46, 0x00, 0x00, 0x00, 0x80, 0x06, 0x03, 0x7F};
  for (int i = 0; i < 64; ++i) golden.insert(golden.end(), {0x00, 0x00, 0x01, 0x00});  // 256
  auto sent = h.Burst({{golden, {kIpB, 4000}}});
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_THAT(std::vector<uint8_t>(sent[0].bytes.begin(), sent[0].bytes.begin() + 10),
              ElementsAre(0x11, 0x05, 0x46, 0x00, 0x00, 0x00, 0x80, 0x06, 0x03, 0x7F));
  ASSERT_EQ(sent[0].bytes.size(), 10u + 256u);
  for (int i = 0; i < 64; ++i) {  // 1 + 256 = 257 = 0x00000101, big-endian
    EXPECT_THAT(std::vector<uint8_t>(sent[0].bytes.begin() + 10 + 4 * i,
                                     sent[0].bytes.begin() + 14 + 4 * i),
                ElementsAre(0x00, 0x00, 0x01, 0x01))
        << "element " << i;
  }
}

TEST(SwitchCoreTest, ReferenceModeRepliesToTheTriggeringSourcePort) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  Request ra{.slot = 3, .values = Ramp(256, 1, 1), .job_number = 1, .tsi = 9};
  Request rb{.slot = 3, .values = Ramp(256, 5, -3), .job_number = 1, .tsi = 9};
  // In the reference every worker uses the same port per thread; the switch echoes the
  // completing packet's source port to everyone
  // (docs/protocol.md#responses-and-multicast-addressing).
  EXPECT_TRUE(h.One(rb, {kIpB, 4003}).empty());
  auto sent = h.One(ra, {kIpA, 4003});
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].to, (Endpoint{kIpA, 4003}));
  EXPECT_EQ(sent[1].to, (Endpoint{kIpB, 4003}));
  EXPECT_EQ(sent[0].bytes, ExpectedResponse(ra, Sum({ra.values, rb.values}), 0, 0));
  EXPECT_EQ(sent[0].bytes.size(), wire::PacketBytes(256));
  // Reference clients may read frames themselves: never coalesced into GSO messages.
  EXPECT_TRUE(sent[0].single_frame && sent[1].single_frame);
  // A retransmission after completion: the unicast answer too.
  auto again = h.One(rb, {kIpB, 4003});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].single_frame);
}

TEST(SwitchCoreTest, ThreeWorkerRoundsInOneBurstAcrossSlots) {
  CoreHarness h;
  h.Register(Reg(0, 3, kIpA, {7000, 7001}));
  h.Register(Reg(1, 3, kIpB, {7000, 7001}));
  h.Register(Reg(2, 3, kIpA, {8000, 8001}));  // shares a host with rank 0, other ports
  std::vector<Request> s0, s1;
  for (uint32_t r = 0; r < 3; ++r) {
    s0.push_back({.slot = 0, .set = 0, .values = Ramp(64, int32_t(r * 10), 1),
                  .exp0 = int8_t(r), .job_number = 3, .tsi = 100 + r});
    s1.push_back({.slot = 8, .set = 1, .values = Ramp(64, int32_t(r * -1000), 5),
                  .exp1 = int8_t(-int(r)), .job_number = 3, .tsi = 200 + r});
  }
  const Endpoint t0[3] = {{kIpA, 7000}, {kIpB, 7000}, {kIpA, 8000}};
  const Endpoint t1[3] = {{kIpA, 7001}, {kIpB, 7001}, {kIpA, 8001}};
  // Interleaved: slot 0 completes with rank 1's packet, slot 8 with rank 0's.
  auto sent = h.Burst({{Encode(s0[2]), t0[2]}, {Encode(s1[1]), t1[1]}, {Encode(s0[0]), t0[0]},
                       {Encode(s1[2]), t1[2]}, {Encode(s0[1]), t0[1]}, {Encode(s1[0]), t1[0]}});
  ASSERT_EQ(sent.size(), 6u);
  const auto r0 = ExpectedResponse(s0[1], Sum({s0[0].values, s0[1].values, s0[2].values}), 2, 0);
  const auto r1 = ExpectedResponse(s1[0], Sum({s1[0].values, s1[1].values, s1[2].values}), 0, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].to, t0[i]) << i;
    EXPECT_EQ(sent[i].bytes, r0) << i;
    EXPECT_FALSE(sent[i].single_frame) << i;  // our clients: GSO allowed
    EXPECT_EQ(sent[3 + i].to, t1[i]) << i;
    EXPECT_EQ(sent[3 + i].bytes, r1) << i;
  }
  EXPECT_NE(sent[0].data, sent[3].data);
  EXPECT_EQ(h.counters().multicast_rounds, 2u);
  EXPECT_EQ(h.counters().consumed, 4u);
  ExpectBucketsAddUp(h.counters());
}

TEST(SwitchCoreTest, DuplicateAfterCompletionIsUnicastToTheSender) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA, {5000}));
  h.Register(Reg(1, 2, kIpB, {6000}));
  Request ra{.slot = 2, .values = Ramp(64, 3, 3), .exp0 = 1, .job_number = 8, .tsi = 1};
  Request rb{.slot = 2, .values = Ramp(64, 4, 4), .exp0 = 2, .job_number = 8, .tsi = 1};
  // A duplicate while the round is incomplete is dropped silently.
  EXPECT_TRUE(h.One(ra, {kIpA, 5000}).empty());
  EXPECT_TRUE(h.One(ra, {kIpA, 5000}).empty());
  EXPECT_EQ(h.counters().duplicates_dropped, 1u);
  ASSERT_EQ(h.One(rb, {kIpB, 6000}).size(), 2u);
  // A lost its copy and retransmits (with its own tsi/job, echoed in the reply).
  Request retx = ra;
  retx.tsi = 0xA1B2C3D4;
  retx.job_number = 9;
  auto sent = h.One(retx, {kIpA, 5000});
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].to, (Endpoint{kIpA, 5000}));
  EXPECT_EQ(sent[0].bytes, ExpectedResponse(retx, Sum({ra.values, rb.values}), 2, 0));
  EXPECT_EQ(h.counters().unicast_replies, 1u);
  EXPECT_EQ(h.counters().datagrams_sent, 3u);
}

TEST(SwitchCoreTest, SizeMismatchIsCounted) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  h.One({.slot = 1, .values = Ramp(64, 0, 1)}, {kIpA, 1});
  EXPECT_TRUE(h.One({.slot = 1, .values = Ramp(256, 0, 1)}, {kIpB, 1}).empty());
  EXPECT_EQ(h.counters().size_mismatch, 1u);
  EXPECT_EQ(h.One({.slot = 1, .values = Ramp(64, 0, 1)}, {kIpB, 1}).size(), 2u);
}

TEST(SwitchCoreTest, SingleWorkerSessionAnswersEveryPacket) {
  CoreHarness h;
  h.Register(Reg(0, 1, kIpA, {4000}));
  Request r{.slot = 0, .values = Ramp(64, 9, 9), .exp0 = -2};
  auto sent = h.One(r, {kIpA, 4000});
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].bytes, ExpectedResponse(r, r.values, -2, 0));
  EXPECT_EQ(h.counters().multicast_rounds, 1u);
}

TEST(SwitchCoreTest, OutboxIsReusedAcrossBursts) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA, {5000}));
  h.Register(Reg(1, 2, kIpB, {6000}));
  const uint8_t* first = nullptr;
  for (uint16_t round = 0; round < 10; ++round) {
    const uint8_t set = round % 2;
    auto sent = h.Burst({{Encode({.slot = 4, .set = set, .values = Ramp(64, round, 1)}), {kIpA, 5000}},
                         {Encode({.slot = 4, .set = set, .values = Ramp(64, round, 2)}), {kIpB, 6000}}});
    ASSERT_EQ(sent.size(), 2u) << round;
    if (first == nullptr) first = sent[0].data;
    EXPECT_EQ(sent[0].data, first) << "the response slab was reallocated";
  }
}

// ---------------------------------------------------------------------------------------------
// Drop simulator.

TEST(SwitchCoreTest, IngressDropProbabilityOneDropsBeforeAnyStateChange) {
  SwitchConfig c = CoreHarness::Small();
  c.ingress_drop_probability = 1.0;
  CoreHarness h(c);
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(h.One({.slot = 0, .values = Ramp(64, 0, 1)}, {kIpA, 1}).empty());
    EXPECT_TRUE(h.One({.slot = 0, .values = Ramp(64, 0, 1)}, {kIpB, 1}).empty());
  }
  EXPECT_EQ(h.counters().sim_ingress_drops, 20u);
  EXPECT_EQ(h.counters().consumed, 0u);
  EXPECT_EQ(h.core().aggregator().Inspect(0, 0).bitmap[0], 0u);
  // Validation still comes first: an unknown sender is counted as such.
  h.One({.slot = 0, .values = Ramp(64, 0, 1)}, {kIpC, 1});
  EXPECT_EQ(h.counters().unknown_sender, 1u);
  ExpectBucketsAddUp(h.counters());
}

TEST(SwitchCoreTest, EgressDropProbabilityOneDropsAllResponsesButKeepsState) {
  SwitchConfig c = CoreHarness::Small();
  c.egress_drop_probability = 1.0;
  CoreHarness h(c);
  h.Register(Reg(0, 3, kIpA));
  h.Register(Reg(1, 3, kIpB));
  h.Register(Reg(2, 3, kIpC));
  EXPECT_TRUE(h.One({.slot = 5, .values = Ramp(64, 0, 1)}, {kIpA, 1}).empty());
  EXPECT_TRUE(h.One({.slot = 5, .values = Ramp(64, 0, 1)}, {kIpB, 1}).empty());
  EXPECT_TRUE(h.One({.slot = 5, .values = Ramp(64, 0, 1)}, {kIpC, 1}).empty());  // completes
  EXPECT_EQ(h.counters().multicast_rounds, 1u);
  EXPECT_EQ(h.counters().sim_egress_drops, 1u);  // one decision for all three copies
  // Retransmissions are answered by unicast — and those are dropped as well.
  EXPECT_TRUE(h.One({.slot = 5, .values = Ramp(64, 0, 1)}, {kIpA, 1}).empty());
  EXPECT_EQ(h.counters().unicast_replies, 1u);
  EXPECT_EQ(h.counters().sim_egress_drops, 2u);
  EXPECT_EQ(h.counters().datagrams_sent, 0u);
  // Consumes draw no egress decision.
  EXPECT_EQ(h.counters().consumed, 2u);
}

TEST(SwitchCoreTest, ZeroProbabilityNeverDrops) {
  SwitchConfig c = CoreHarness::Small();
  c.ingress_drop_probability = 0.0;
  c.egress_drop_probability = 0.0;
  CoreHarness h(c);
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  for (uint16_t round = 0; round < 200; ++round) {
    h.One({.slot = uint16_t(round % 16), .set = uint8_t((round / 16) % 2), .values = Ramp(64, 0, 1)},
          {kIpA, 1});
    ASSERT_EQ(h.One({.slot = uint16_t(round % 16), .set = uint8_t((round / 16) % 2),
                     .values = Ramp(64, 0, 1)},
                    {kIpB, 1})
                  .size(),
              2u);
  }
  EXPECT_EQ(h.counters().sim_ingress_drops, 0u);
  EXPECT_EQ(h.counters().sim_egress_drops, 0u);
  EXPECT_EQ(h.counters().multicast_rounds, 200u);
}

// Runs 2000 single-worker packets through a core with p = 0.5 on both sides.
SwitchCounters RunHalfLossy(uint64_t seed) {
  SwitchConfig c = CoreHarness::Small();
  c.ingress_drop_probability = 0.5;
  c.egress_drop_probability = 0.5;
  c.drop_seed = seed;
  CoreHarness h(c);
  h.Register(Reg(0, 1, kIpA));
  for (int i = 0; i < 2000; ++i) {
    h.One({.slot = uint16_t(i % 16), .set = uint8_t((i / 16) % 2), .values = Ramp(64, i, 1)},
          {kIpA, 1});
  }
  return h.counters();
}

TEST(SwitchCoreTest, SeededHalfDropProbabilityIsReproducible) {
  const SwitchCounters a = RunHalfLossy(42);
  const SwitchCounters b = RunHalfLossy(42);
  const SwitchCounters other = RunHalfLossy(43);
  EXPECT_EQ(a.Named(), b.Named());
  EXPECT_NE(a.sim_ingress_drops, other.sim_ingress_drops);  // different seed, different run
  // About half the requests are dropped at ingress, and about half of the responses of the rest.
  EXPECT_GT(a.sim_ingress_drops, 900u);
  EXPECT_LT(a.sim_ingress_drops, 1100u);
  const uint64_t responded = a.multicast_rounds + a.unicast_replies;
  EXPECT_EQ(responded, 2000u - a.sim_ingress_drops);
  EXPECT_GT(a.sim_egress_drops, responded * 4 / 10);
  EXPECT_LT(a.sim_egress_drops, responded * 6 / 10);
  EXPECT_EQ(a.datagrams_sent, responded - a.sim_egress_drops);
  ExpectBucketsAddUp(a);
}

// ---------------------------------------------------------------------------------------------
// Registration.

TEST(SwitchCoreRegistration, ErrorsNameFieldAndValue) {
  CoreHarness h;  // max_workers = 8
  Status s = h.core().RegisterWorker(Reg(1, 2, kIpB));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("rank 0"));

  s = h.core().RegisterWorker(Reg(0, 0, kIpA));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_workers"));
  s = h.core().RegisterWorker(Reg(0, 9, kIpA));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("got 9"));
  s = h.core().RegisterWorker(Reg(0, 2, kIpA, std::vector<uint16_t>(65, 1)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("udp_ports"));
  s = h.core().RegisterWorker(Reg(0, 2, kIpA, {4000, 0}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("udp_ports[1]"));
  s = h.core().RegisterWorker(Reg(0, 2, kIpA, {4000, 4001, 4000}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("4000"));
  EXPECT_EQ(h.core().jobs().reference().spec.num_workers, 0u);  // failed requests changed nothing

  h.Register(Reg(0, 3, kIpA, {4000, 4001}));
  s = h.core().RegisterWorker(Reg(3, 3, kIpB));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rank"));
  s = h.core().RegisterWorker(Reg(1, 4, kIpB));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("num_workers 4"));
  s = h.core().RegisterWorker(Reg(1, 3, kIpA, {4002, 4001}));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("10.0.0.1:4001"));
  s = h.core().RegisterWorker(Reg(1, 3, kIpA));  // reference mode would claim the whole host
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("10.0.0.1"));
  h.Register(Reg(1, 3, kIpA, {4002, 4003}));  // same host, other ports: fine
  h.Register(Reg(2, 3, kIpB));
  s = h.core().RegisterWorker(Reg(1, 3, kIpB, {9000}));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(h.core().jobs().reference().num_registered, 3u);
}

TEST(SwitchCoreRegistration, ReRegisteringARankReplacesIt) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA, {4000}));
  h.Register(Reg(1, 2, kIpB, {5000}));
  h.Register(Reg(1, 2, kIpB, {5001}));
  EXPECT_EQ(h.core().jobs().reference().num_registered, 2u);
  auto pkt = Encode({.slot = 0, .values = Ramp(64, 0, 1)});
  h.Burst({{pkt, {kIpB, 5000}}});
  EXPECT_EQ(h.counters().unknown_sender, 1u);
  h.Burst({{pkt, {kIpB, 5001}}});
  EXPECT_EQ(h.counters().consumed, 1u);
  // Rank 1's old port is free for rank... nobody else here, but its own entry moved: a
  // multicast goes to the new port.
  auto sent = h.Burst({{pkt, {kIpA, 4000}}});
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].to, (Endpoint{kIpB, 5001}));
}

TEST(SwitchCoreRegistration, RankZeroStartsANewSessionAndClearsAggregation) {
  CoreHarness h;
  h.Register(Reg(0, 2, kIpA));
  h.Register(Reg(1, 2, kIpB));
  const uint64_t epoch = h.core().jobs().reference().epoch;
  auto pa = Encode({.slot = 0, .values = Ramp(64, 1, 0)});
  auto pb = Encode({.slot = 0, .values = Ramp(64, 2, 0)});
  h.Burst({{pa, {kIpA, 1}}});
  ASSERT_EQ(h.core().aggregator().Inspect(0, 0).counter, 1u);

  // A new session with 3 workers: rank 1 of the old session is forgotten.
  h.Register(Reg(0, 3, kIpA));
  EXPECT_EQ(h.core().jobs().reference().epoch, epoch + 1);
  EXPECT_EQ(h.core().jobs().reference().num_registered, 1u);
  EXPECT_EQ(h.core().aggregator().num_workers(), 3u);
  EXPECT_EQ(h.core().aggregator().Inspect(0, 0).counter, 0u);
  EXPECT_EQ(h.core().aggregator().Inspect(0, 0).bitmap[0], 0u);
  EXPECT_TRUE(h.Burst({{pb, {kIpB, 1}}}).empty());
  EXPECT_EQ(h.counters().unknown_sender, 1u);

  h.Register(Reg(1, 3, kIpB));
  h.Register(Reg(2, 3, kIpC));
  EXPECT_EQ(h.core().jobs().reference().epoch, epoch + 1);  // joining does not start a session
  auto pc = Encode({.slot = 0, .values = Ramp(64, 4, 0)});
  auto sent = h.Burst({{pb, {kIpB, 1}}, {pc, {kIpC, 1}}, {pa, {kIpA, 1}}});
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].bytes, ExpectedResponse(Request{}, Ramp(64, 7, 0), 0, 0));
}

TEST(SessionTableTest, FindsEveryPortAtFullScale) {
  // 256 workers x 64 ports of job 0, 4 workers per host: 16384 entries in the lookup index.
  std::shared_ptr<const JobTable> t = std::make_shared<JobTable>(16, 256, 64);
  for (uint32_t r = 0; r < 256; ++r) {
    std::vector<uint16_t> ports(64);
    for (uint32_t p = 0; p < 64; ++p) ports[p] = uint16_t(10000 + (r % 4) * 64 + p);
    auto next = JobTable::RegisterSessionWorker(*t, Reg(r, 256, Ip(10, 1, uint8_t(r / 4), 7), ports));
    ASSERT_TRUE(next.ok()) << next.status();
    t = *next;
  }
  EXPECT_EQ(t->reference().num_registered, 256u);
  EXPECT_EQ(t->reference().epoch, 1u);
  for (uint32_t r = 0; r < 256; ++r) {
    for (uint32_t p = 0; p < 64; ++p) {
      JobTable::Sender s;
      ASSERT_TRUE(t->Find({Ip(10, 1, uint8_t(r / 4), 7), uint16_t(10000 + (r % 4) * 64 + p)}, &s));
      ASSERT_EQ(s.job, &t->reference());
      ASSERT_EQ(s.rank, r);
      ASSERT_EQ(s.thread, p);
    }
  }
  JobTable::Sender s;
  EXPECT_FALSE(t->Find({Ip(10, 1, 0, 7), 10256}, &s));  // one past the host's last port
  EXPECT_FALSE(t->Find({Ip(10, 1, 64, 7), 10000}, &s));  // unknown host
  EXPECT_FALSE(t->Find({Ip(10, 1, 0, 8), 10000}, &s));
}

TEST(SwitchCoreTest, CountersHaveStableNamesAndATable) {
  CoreHarness h;
  h.Register(Reg(0, 1, kIpA));
  h.One({.slot = 0, .values = Ramp(64, 0, 1)}, {kIpA, 1});
  auto named = h.counters().Named();
  ASSERT_EQ(named.size(), SwitchCounters::kNumCounters);
  std::set<std::string> names;
  std::map<std::string, uint64_t> values;
  for (auto& [n, v] : named) {
    names.insert(n);
    values[n] = v;
  }
  EXPECT_EQ(names.size(), named.size());
  EXPECT_EQ(values.at("datagrams_received"), 1u);
  EXPECT_EQ(values.at("multicast_rounds"), 1u);
  EXPECT_EQ(values.at("datagrams_sent"), 1u);
  EXPECT_EQ(values.at("decode_length_mismatch"), 0u);
  const std::string table = h.counters().FormatTable();
  EXPECT_THAT(table, HasSubstr("multicast_rounds"));
  EXPECT_THAT(table, HasSubstr("sim_egress_drops"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), int(named.size()) + 1);
}

}  // namespace
}  // namespace switchml::dataplane
