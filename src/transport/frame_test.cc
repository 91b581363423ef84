#include "transport/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace switchml::transport {
namespace {

// 02:00:00:00:00:01 10.0.0.1:40000 -> 02:00:00:00:00:02 10.0.0.2:48864, IPv4 id 0x1234, DF,
// TTL 64, payload "SwitchML!" (9 bytes, odd). Checksums computed independently (Python, RFC 1071)
// and the IPv4 one by hand: words 4500+0025+1234+4000+4011+0000+0a00+0001+0a00+0002 = eb6d,
// ~eb6d = 1492. UDP checksum 0x0208; pseudo-header sum alone (the "partial" value) 0x1425.
const std::vector<uint8_t> kGolden = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
    0x45, 0x00, 0x00, 0x25, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x14, 0x92, 0x0a, 0x00,
    0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0x9c, 0x40, 0xbe, 0xe0, 0x00, 0x11, 0x02, 0x08,
    0x53, 0x77, 0x69, 0x74, 0x63, 0x68, 0x4d, 0x4c, 0x21};
constexpr uint16_t kGoldenPartial = 0x1425;
constexpr size_t kIpCsum = 14 + 10;
constexpr size_t kUdpCsum = 14 + 20 + 6;

const MacAddress kMacA = {0x02, 0, 0, 0, 0, 0x01};
const MacAddress kMacB = {0x02, 0, 0, 0, 0, 0x02};
constexpr Endpoint kA{0x0A000001, 40000};
constexpr Endpoint kB{0x0A000002, 48864};

// Reference ones'-complement checksum, 16 bits at a time, the textbook way.
uint16_t RefChecksum(const std::vector<uint8_t>& bytes) {
  uint32_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 2) {
    uint32_t word = uint32_t{bytes[i]} << 8;
    if (i + 1 < bytes.size()) word |= bytes[i + 1];
    sum += word;
    sum = (sum & 0xFFFF) + (sum >> 16);
  }
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

// Verifies the checksums of a frame built by BuildUdpFrame (IHL 5) with RefChecksum.
void ExpectReferenceChecksumsHold(const std::vector<uint8_t>& f) {
  const std::vector<uint8_t> ip(f.begin() + 14, f.begin() + 34);
  EXPECT_EQ(RefChecksum(ip), 0) << "IPv4 header checksum";
  std::vector<uint8_t> pseudo(f.begin() + 26, f.begin() + 34);  // src, dst
  pseudo.push_back(0);
  pseudo.push_back(17);
  pseudo.push_back(f[38]);  // UDP length
  pseudo.push_back(f[39]);
  pseudo.insert(pseudo.end(), f.begin() + 34, f.end());
  EXPECT_EQ(RefChecksum(pseudo), 0) << "UDP checksum";
}

std::vector<uint8_t> Build(const std::vector<uint8_t>& payload, Endpoint src = kA,
                           Endpoint dst = kB) {
  UdpFrameHeader h{.dst_mac = kMacB, .src_mac = kMacA, .src = src, .dst = dst, .ipv4_id = 0x1234};
  std::vector<uint8_t> out(kUdpFrameOverhead + payload.size());
  auto n = BuildUdpFrame(h, payload, out);
  EXPECT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, out.size());
  return out;
}

void Put16(std::vector<uint8_t>& f, size_t at, uint16_t v) {
  f[at] = static_cast<uint8_t>(v >> 8);
  f[at + 1] = static_cast<uint8_t>(v);
}

TEST(FrameTest, BuildMatchesGoldenBytes) {
  const std::vector<uint8_t> payload = {'S', 'w', 'i', 't', 'c', 'h', 'M', 'L', '!'};
  EXPECT_EQ(Build(payload), kGolden);
  ExpectReferenceChecksumsHold(kGolden);
}

TEST(FrameTest, ParseGolden) {
  const ParsedUdpFrame p = ParseUdpFrame(kGolden);
  EXPECT_EQ(p.verdict, FrameVerdict::kOk) << FrameVerdictName(p.verdict);
  EXPECT_EQ(p.ipv4_checksum, FrameVerdict::kOk);
  EXPECT_EQ(p.udp_checksum, FrameVerdict::kOk);
  EXPECT_EQ(p.dst_mac, kMacB);
  EXPECT_EQ(p.src_mac, kMacA);
  EXPECT_EQ(p.src, kA);
  EXPECT_EQ(p.dst, kB);
  EXPECT_EQ(p.ipv4_header_bytes, 20);
  ASSERT_EQ(p.payload.size(), 9u);
  EXPECT_EQ(std::memcmp(p.payload.data(), "SwitchML!", 9), 0);
  EXPECT_EQ(p.payload.data(), kGolden.data() + 42);
}

TEST(FrameTest, OffloadingSenderFrame) {
  // What the reference DPDK client sends: IPv4 checksum 0, UDP checksum = pseudo-header sum.
  std::vector<uint8_t> f = kGolden;
  Put16(f, kIpCsum, 0);
  Put16(f, kUdpCsum, kGoldenPartial);
  const ParsedUdpFrame p = ParseUdpFrame(f);
  EXPECT_EQ(p.verdict, FrameVerdict::kIpv4ChecksumZero);
  EXPECT_EQ(p.ipv4_checksum, FrameVerdict::kIpv4ChecksumZero);
  EXPECT_EQ(p.udp_checksum, FrameVerdict::kUdpChecksumPartial);
  EXPECT_EQ(p.payload.size(), 9u);
  EXPECT_EQ(p.src, kA);
}

TEST(FrameTest, EveryChecksumReason) {
  struct Case {
    uint16_t ip, udp;
    FrameVerdict ip_want, udp_want, verdict;
  } cases[] = {
      {0x1492, 0x0208, FrameVerdict::kOk, FrameVerdict::kOk, FrameVerdict::kOk},
      {0, 0x0208, FrameVerdict::kIpv4ChecksumZero, FrameVerdict::kOk, FrameVerdict::kIpv4ChecksumZero},
      {0x1493, 0x0208, FrameVerdict::kIpv4ChecksumBad, FrameVerdict::kOk, FrameVerdict::kIpv4ChecksumBad},
      {0x1492, 0, FrameVerdict::kOk, FrameVerdict::kUdpChecksumZero, FrameVerdict::kUdpChecksumZero},
      {0x1492, kGoldenPartial, FrameVerdict::kOk, FrameVerdict::kUdpChecksumPartial,
       FrameVerdict::kUdpChecksumPartial},
      {0x1492, 0x0209, FrameVerdict::kOk, FrameVerdict::kUdpChecksumBad, FrameVerdict::kUdpChecksumBad},
      {0xBEEF, 0xBEEF, FrameVerdict::kIpv4ChecksumBad, FrameVerdict::kUdpChecksumBad,
       FrameVerdict::kIpv4ChecksumBad},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> f = kGolden;
    Put16(f, kIpCsum, c.ip);
    Put16(f, kUdpCsum, c.udp);
    const ParsedUdpFrame p = ParseUdpFrame(f);
    SCOPED_TRACE(testing::Message() << std::hex << c.ip << " " << c.udp);
    EXPECT_EQ(p.ipv4_checksum, c.ip_want) << FrameVerdictName(p.ipv4_checksum);
    EXPECT_EQ(p.udp_checksum, c.udp_want) << FrameVerdictName(p.udp_checksum);
    EXPECT_EQ(p.verdict, c.verdict) << FrameVerdictName(p.verdict);
    EXPECT_FALSE(IsStructuralError(p.verdict));
    EXPECT_EQ(p.payload.size(), 9u);
  }
}

TEST(FrameTest, CorruptedPayloadIsUdpChecksumBad) {
  std::vector<uint8_t> f = kGolden;
  f[45] ^= 0x01;
  EXPECT_EQ(ParseUdpFrame(f).verdict, FrameVerdict::kUdpChecksumBad);
}

TEST(FrameTest, StructuralReasons) {
  auto with = [](auto mutate) {
    std::vector<uint8_t> f = kGolden;
    mutate(f);
    return ParseUdpFrame(f).verdict;
  };
  EXPECT_EQ(with([](auto& f) { Put16(f, 12, 0x86DD); }), FrameVerdict::kNotIpv4);
  EXPECT_EQ(with([](auto& f) { Put16(f, 12, 0x8100); }), FrameVerdict::kNotIpv4);  // VLAN
  EXPECT_EQ(with([](auto& f) { f[14] = 0x65; }), FrameVerdict::kNotIpv4);          // version 6
  EXPECT_EQ(with([](auto& f) { f[14] = 0x44; }), FrameVerdict::kBadIpv4Header);    // IHL 4
  EXPECT_EQ(with([](auto& f) { Put16(f, 16, 27); }), FrameVerdict::kBadIpv4Header);  // < 20+8
  EXPECT_EQ(with([](auto& f) { Put16(f, 16, 38); }), FrameVerdict::kTruncated);  // > frame
  EXPECT_EQ(with([](auto& f) { f[23] = 6; }), FrameVerdict::kNotUdp);
  EXPECT_EQ(with([](auto& f) { Put16(f, 20, 0x2000); }), FrameVerdict::kFragment);  // MF
  EXPECT_EQ(with([](auto& f) { Put16(f, 20, 0x0001); }), FrameVerdict::kFragment);  // offset
  EXPECT_EQ(with([](auto& f) { Put16(f, 38, 7); }), FrameVerdict::kBadUdpLength);
  EXPECT_EQ(with([](auto& f) { Put16(f, 38, 18); }), FrameVerdict::kBadUdpLength);
  EXPECT_EQ(ParseUdpFrame(std::span<const uint8_t>(kGolden).first(13)).verdict,
            FrameVerdict::kTruncated);
  EXPECT_EQ(ParseUdpFrame(std::span<const uint8_t>(kGolden).first(14)).verdict,
            FrameVerdict::kTruncated);
  EXPECT_EQ(ParseUdpFrame(std::span<const uint8_t>(kGolden).first(50)).verdict,
            FrameVerdict::kTruncated);
  for (int i = 0; i < kNumFrameVerdicts; ++i) {
    EXPECT_NE(std::string(FrameVerdictName(static_cast<FrameVerdict>(i))), "unknown") << i;
  }
}

TEST(FrameTest, EthernetPaddingIgnored) {
  std::vector<uint8_t> f = kGolden;
  f.resize(60, 0xAA);  // padded to the Ethernet minimum with junk
  const ParsedUdpFrame p = ParseUdpFrame(f);
  EXPECT_EQ(p.verdict, FrameVerdict::kOk);
  EXPECT_EQ(p.payload.size(), 9u);
}

TEST(FrameTest, UdpLengthShorterThanIpPayload) {
  // UDP length 16 of 17 available bytes: the payload is 8 bytes; checksums cover UDP length only.
  std::vector<uint8_t> payload = {'S', 'w', 'i', 't', 'c', 'h', 'M', 'L'};
  std::vector<uint8_t> f = Build(payload);
  f.push_back(0x77);
  Put16(f, 16, static_cast<uint16_t>(f.size() - 14));
  Put16(f, kIpCsum, 0);
  Put16(f, kIpCsum, RefChecksum(std::vector<uint8_t>(f.begin() + 14, f.begin() + 34)));
  const ParsedUdpFrame p = ParseUdpFrame(f);
  EXPECT_EQ(p.verdict, FrameVerdict::kOk) << FrameVerdictName(p.verdict);
  EXPECT_EQ(p.payload.size(), 8u);
}

TEST(FrameTest, Ipv4OptionsHandled) {
  // IHL 6 (one NOP-padded option word), built by hand from the golden frame.
  std::vector<uint8_t> f(kGolden.begin(), kGolden.begin() + 34);
  f.insert(f.end(), {0x01, 0x01, 0x01, 0x00});  // NOP NOP NOP EOL
  f.insert(f.end(), kGolden.begin() + 34, kGolden.end());
  f[14] = 0x46;
  Put16(f, 16, static_cast<uint16_t>(f.size() - 14));
  Put16(f, kIpCsum, 0);
  Put16(f, kIpCsum, RefChecksum(std::vector<uint8_t>(f.begin() + 14, f.begin() + 38)));
  const ParsedUdpFrame p = ParseUdpFrame(f);
  EXPECT_EQ(p.verdict, FrameVerdict::kOk) << FrameVerdictName(p.verdict);
  EXPECT_EQ(p.ipv4_header_bytes, 24);
  EXPECT_EQ(p.dst, kB);
  ASSERT_EQ(p.payload.size(), 9u);
  EXPECT_EQ(p.payload[0], 'S');
}

TEST(FrameTest, OddAndEvenPayloadLengthsRoundTrip) {
  std::mt19937 rng(7);
  for (size_t len : {0, 1, 2, 3, 7, 8, 255, 1024, 1025, 4106, 8999}) {
    std::vector<uint8_t> payload(len);
    for (auto& b : payload) b = static_cast<uint8_t>(rng());
    const std::vector<uint8_t> f = Build(payload, {0xC0A80101, 1}, {0xFFFFFFFE, 65535});
    ExpectReferenceChecksumsHold(f);
    const ParsedUdpFrame p = ParseUdpFrame(f);
    EXPECT_EQ(p.verdict, FrameVerdict::kOk) << len;
    ASSERT_EQ(p.payload.size(), len);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), p.payload.begin()));
    // The partial value an offloading sender would leave is recognised at every length.
    std::vector<uint8_t> g = f;
    std::vector<uint8_t> pseudo(f.begin() + 26, f.begin() + 34);
    pseudo.insert(pseudo.end(), {0, 17, f[38], f[39]});
    Put16(g, kUdpCsum, static_cast<uint16_t>(~RefChecksum(pseudo)));
    EXPECT_EQ(ParseUdpFrame(g).udp_checksum, FrameVerdict::kUdpChecksumPartial) << len;
  }
}

TEST(FrameTest, ZeroComputedUdpChecksumIsSentAsFfff) {
  // Search for a payload whose UDP checksum computes to 0; it must go out as 0xFFFF (0 = none).
  std::vector<uint8_t> payload(2);
  bool found = false;
  for (uint32_t v = 0; v <= 0xFFFF && !found; ++v) {
    payload[0] = static_cast<uint8_t>(v >> 8);
    payload[1] = static_cast<uint8_t>(v);
    const std::vector<uint8_t> f = Build(payload);
    if (f[kUdpCsum] == 0xFF && f[kUdpCsum + 1] == 0xFF) {
      found = true;
      EXPECT_EQ(ParseUdpFrame(f).udp_checksum, FrameVerdict::kOk);
    }
  }
  EXPECT_TRUE(found);
}

TEST(FrameTest, BuildErrors) {
  UdpFrameHeader h;
  std::vector<uint8_t> payload(100);
  std::vector<uint8_t> out(141);
  auto r = BuildUdpFrame(h, payload, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("141"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("142"), std::string::npos) << r.status();
  std::vector<uint8_t> huge(kMaxUdpFramePayload + 1);
  std::vector<uint8_t> big_out(huge.size() + 64);
  EXPECT_FALSE(BuildUdpFrame(h, huge, big_out).ok());
}

TEST(FrameTest, RandomTruncationsAndCorruptionsNeverCrash) {
  std::mt19937 rng(12345);
  std::vector<uint8_t> payload(300);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  const std::vector<uint8_t> base = Build(payload);
  int structural = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> f = base;
    const int flips = static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) f[rng() % 42] = static_cast<uint8_t>(rng());
    const size_t len = rng() % (f.size() + 1);
    // An exact-size heap copy so that sanitizers catch any read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[len == 0 ? 1 : len]);
    std::memcpy(exact.get(), f.data(), len);
    const ParsedUdpFrame p = ParseUdpFrame({exact.get(), len});
    if (IsStructuralError(p.verdict)) {
      ++structural;
      EXPECT_TRUE(p.payload.empty());
    } else {
      EXPECT_GE(p.payload.data(), exact.get());
      EXPECT_LE(p.payload.data() + p.payload.size(), exact.get() + len);
    }
    if (len < base.size() && flips == 0) {
      EXPECT_EQ(p.verdict, FrameVerdict::kTruncated) << len;
    }
  }
  EXPECT_GT(structural, 0);
}

}  // namespace
}  // namespace switchml::transport
