// fuzz/fuzz_wire_decode.cc — libFuzzer target for wire::Decode (docs/protocol.md#decode-checks).
//
// Input: one datagram (the UDP payload), arbitrary bytes. Invariants:
//   * Decode never reads outside the span (ASan) and every error has a distinct name;
//   * an accepted datagram is exactly PacketBytes(n) long for its size code's n, its payload
//     starts at the 10-byte prefix, slot < kMaxSlots, set <= 1, msg type 1;
//   * re-encoding the decoded header (EncodePrefix) and the payload gives bytes that decode to
//     the same header and payload, and equal the input except the bits Decode ignores
//     (byte 0 bit 3, and bit 14 of the pool index);
//   * SizeCodeForElements and ElementsForSizeCode agree on the accepted size code.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz_check.h"
#include "wire/packet.h"

namespace {

using namespace switchml;

// The bits of the 10-byte prefix that Decode does not interpret.
constexpr std::array<uint8_t, wire::kPrefixBytes> kIgnoredBits = {0x08, 0, 0, 0, 0, 0, 0x40, 0, 0, 0};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wire::PacketView pkt;
  const wire::DecodeError err = wire::Decode({data, size}, &pkt);
  const std::string_view name = wire::DecodeErrorName(err);
  FUZZ_CHECK(!name.empty() && name != "invalid");
  if (err != wire::DecodeError::kOk) {
    FUZZ_CHECK(size_t(err) < wire::kNumDecodeErrors);
    if (size < wire::kPrefixBytes) FUZZ_CHECK(err == wire::DecodeError::kTruncated);
    return 0;
  }

  const wire::Header& h = pkt.header;
  FUZZ_CHECK(h.msg_type == wire::kMsgTypeAllReduce);
  FUZZ_CHECK(pkt.num_elements == wire::ElementsForSizeCode(h.size_code));
  FUZZ_CHECK(pkt.num_elements >= 1 && pkt.num_elements <= wire::kMaxElementsPerPacket);
  FUZZ_CHECK(wire::SizeCodeForElements(pkt.num_elements) == h.size_code);
  FUZZ_CHECK(size == wire::PacketBytes(pkt.num_elements));
  FUZZ_CHECK(pkt.payload == data + wire::kPrefixBytes);
  FUZZ_CHECK(h.slot < wire::kMaxSlots);
  FUZZ_CHECK(h.set <= 1);

  // Round trip through the encoder.
  static std::array<uint8_t, wire::kMaxPacketBytes> buf;
  wire::EncodePrefix(h, buf.data());
  std::memcpy(buf.data() + wire::kPrefixBytes, pkt.payload, 4 * size_t{pkt.num_elements});
  for (size_t i = 0; i < wire::kPrefixBytes; ++i) {
    FUZZ_CHECK((buf[i] & ~kIgnoredBits[i]) == (data[i] & ~kIgnoredBits[i]));
    FUZZ_CHECK((buf[i] & kIgnoredBits[i]) == 0);  // the encoder writes ignored bits as 0
  }
  wire::PacketView again;
  FUZZ_CHECK(wire::Decode({buf.data(), size}, &again) == wire::DecodeError::kOk);
  FUZZ_CHECK(again.header == h);
  FUZZ_CHECK(again.num_elements == pkt.num_elements);
  FUZZ_CHECK(std::memcmp(again.payload, pkt.payload, 4 * size_t{pkt.num_elements}) == 0);

  // The pool-index helper agrees with the encoder.
  const uint16_t pool = wire::EncodePoolIndex(h.slot, h.set);
  FUZZ_CHECK(buf[6] == uint8_t(pool >> 8) && buf[7] == uint8_t(pool));

  // Any other length with this prefix is a length mismatch.
  if (size > wire::kPrefixBytes) {
    FUZZ_CHECK(wire::Decode({data, size - 1}, &again) == wire::DecodeError::kLengthMismatch);
  }
  return 0;
}
