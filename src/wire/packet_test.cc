#include "wire/packet.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/endian.h"

namespace switchml::wire {
namespace {

std::vector<uint8_t> MakeDatagram(const Header& h, uint32_t num_elements) {
  std::vector<uint8_t> d(PacketBytes(num_elements));
  EncodePrefix(h, d.data());
  for (uint32_t i = 0; i < num_elements; ++i) StoreBE32(d.data() + kPrefixBytes + 4 * i, i * 3 - 7);
  return d;
}

// The reference's example (docs/protocol.md#golden-example): rank 1, thread 0, job id 5, packet id 70, slot 6, set 1,
// 256-byte payload, exponent 3 → "11 05 46 00 00 00 80 06 03 xx".
TEST(WireTest, GoldenBytesOfReferenceExample) {
  Header h;
  h.size_code = 1;
  h.job_number = 5;
  h.tsi = 70;
  h.slot = 6;
  h.set = 1;
  h.exp0 = 3;
  h.exp1 = 0;
  uint8_t out[kPrefixBytes];
  EncodePrefix(h, out);
  const uint8_t golden[9] = {0x11, 0x05, 0x46, 0x00, 0x00, 0x00, 0x80, 0x06, 0x03};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(out[i], golden[i]) << "byte " << i;

  std::vector<uint8_t> d(PacketBytes(64), 0);
  std::copy(golden, golden + 9, d.begin());
  d[9] = 0x7f;  // e1: "xx", whatever the buffer held
  PacketView v;
  ASSERT_EQ(Decode(d, &v), DecodeError::kOk);
  EXPECT_EQ(v.header.msg_type, 1);
  EXPECT_EQ(v.header.size_code, 1);
  EXPECT_EQ(v.header.job_number, 5);
  EXPECT_EQ(v.header.tsi, 70u);
  EXPECT_EQ(v.header.slot, 6);
  EXPECT_EQ(v.header.set, 1);
  EXPECT_EQ(v.header.exp0, 3);
  EXPECT_EQ(v.header.exp1, 127);
  EXPECT_EQ(v.num_elements, 64u);
  EXPECT_EQ(v.payload, d.data() + 10);
}

TEST(WireTest, RoundTripEverySupportedSize) {
  for (uint32_t n : {64u, 256u, 512u, 1024u}) {
    auto code = SizeCodeForElements(n);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(ElementsForSizeCode(*code), n);
    Header h{.msg_type = 1, .size_code = *code, .job_number = 200, .tsi = 0xDEADBEEF,
             .slot = uint16_t(kMaxSlots - 1), .set = 1, .exp0 = -126, .exp1 = 127};
    auto d = MakeDatagram(h, n);
    PacketView v;
    ASSERT_EQ(Decode(d, &v), DecodeError::kOk);
    EXPECT_EQ(v.header, h);
    EXPECT_EQ(v.num_elements, n);
    EXPECT_EQ(int32_t(LoadBE32(v.payload + 4 * (n - 1))), int32_t((n - 1) * 3 - 7));
  }
}

TEST(WireTest, SizeCodesOfReferenceAndExtension) {
  EXPECT_EQ(ElementsForSizeCode(0), 0u);
  EXPECT_EQ(ElementsForSizeCode(1), 64u);
  EXPECT_EQ(ElementsForSizeCode(2), 0u);
  EXPECT_EQ(ElementsForSizeCode(3), 256u);
  EXPECT_EQ(ElementsForSizeCode(4), 512u);
  EXPECT_EQ(ElementsForSizeCode(5), 1024u);
  EXPECT_EQ(ElementsForSizeCode(6), 0u);
  EXPECT_EQ(ElementsForSizeCode(7), 0u);
  EXPECT_FALSE(SizeCodeForElements(32).has_value());
  EXPECT_FALSE(SizeCodeForElements(128).has_value());
  EXPECT_FALSE(SizeCodeForElements(100).has_value());
}

TEST(WireTest, PoolIndexBit14IgnoredOnInput) {
  Header h{.size_code = 1, .slot = 6, .set = 0};
  auto d = MakeDatagram(h, 64);
  d[6] = 0x40;  // bit 14 set, set bit clear
  PacketView v;
  ASSERT_EQ(Decode(d, &v), DecodeError::kOk);
  EXPECT_EQ(v.header.slot, 6);
  EXPECT_EQ(v.header.set, 0);
  EXPECT_EQ(EncodePoolIndex(6, 1), 0x8006);
  EXPECT_EQ(EncodePoolIndex(8191, 0), 0x1FFF);
}

TEST(WireTest, RejectsTruncated) {
  PacketView v;
  for (size_t len = 0; len < kPrefixBytes; ++len) {
    std::vector<uint8_t> d(len, 0x11);
    EXPECT_EQ(Decode(d, &v), DecodeError::kTruncated) << len;
  }
  EXPECT_EQ(Decode({}, &v), DecodeError::kTruncated);
}

TEST(WireTest, RejectsUnknownMsgType) {
  auto d = MakeDatagram(Header{.size_code = 1}, 64);
  PacketView v;
  for (uint8_t t : {0, 2, 15}) {
    d[0] = uint8_t(t << 4 | 1);
    EXPECT_EQ(Decode(d, &v), DecodeError::kUnknownMsgType) << int(t);
  }
}

TEST(WireTest, RejectsUnsupportedSizeCodes) {
  PacketView v;
  for (uint8_t code : {0, 2, 6, 7}) {
    std::vector<uint8_t> d(PacketBytes(256), 0);
    d[0] = uint8_t(0x10 | code);
    EXPECT_EQ(Decode(d, &v), DecodeError::kUnsupportedSizeCode) << int(code);
  }
}

TEST(WireTest, RejectsLengthMismatch) {
  PacketView v;
  for (uint32_t n : {64u, 256u, 512u, 1024u}) {
    Header h{.size_code = *SizeCodeForElements(n)};
    auto d = MakeDatagram(h, n);
    for (long delta : {-1L, 1L, -4L, 4L, -long(4 * n)}) {
      std::vector<uint8_t> e(d.begin(), d.end());
      e.resize(size_t(long(d.size()) + delta), 0);
      EXPECT_EQ(Decode(e, &v), DecodeError::kLengthMismatch) << n << " " << delta;
    }
  }
}

TEST(WireTest, DecodeErrorNamesAreDistinct) {
  EXPECT_EQ(DecodeErrorName(DecodeError::kTruncated), "truncated");
  EXPECT_EQ(DecodeErrorName(DecodeError::kUnknownMsgType), "unknown_msg_type");
  EXPECT_EQ(DecodeErrorName(DecodeError::kUnsupportedSizeCode), "unsupported_size_code");
  EXPECT_EQ(DecodeErrorName(DecodeError::kLengthMismatch), "length_mismatch");
}

}  // namespace
}  // namespace switchml::wire
