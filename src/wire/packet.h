// wire/packet.h — the SwitchML UDP payload, byte for byte (docs/protocol.md#wire-format).
//
// Layout of a SwitchML datagram (the UDP payload; the switch listens on port 48864 = 0xBEE0):
//
//   byte 0      msg_type (bits 7..4, 1 = all-reduce) | unused (bit 3) | size code (bits 2..0)
//   byte 1      job_number (opaque, echoed)
//   bytes 2..5  tsi (opaque 32-bit tag, echoed). We write it little-endian, as the reference
//               x86 client does, so the reference's golden bytes (docs/protocol.md#golden-example) decode to the same id.
//   bytes 6..7  pool index, big-endian: bit 15 = set, bit 14 ignored on input, bits 13..0 = slot
//   byte 8      exponent e0 (int8)
//   byte 9      exponent e1 (int8)
//   bytes 10..  payload: N two's-complement int32 elements, big-endian
//
// Size codes follow the InfiniBand MTU enumeration: 1 → 64 elements and 3 → 256 elements as in
// the reference; 4 → 512 and 5 → 1024 elements are our extension for jumbo frames. Codes 0 and
// 2 (and 6, 7) are rejected, as the reference drops them.
//
// Usage:
//   wire::PacketView pkt;
//   if (auto err = wire::Decode(bytes, &pkt); err != wire::DecodeError::kOk) { count(err); }
//   else { use(pkt.header.slot, pkt.payload, pkt.num_elements); }
//
// Everything here is pure, allocation-free and thread-safe. Decode never reads outside the
// span it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace switchml::wire {

inline constexpr uint16_t kDefaultSwitchPort = 48864;  // 0xBEE0
inline constexpr size_t kHeaderBytes = 8;
inline constexpr size_t kExponentBytes = 2;
inline constexpr size_t kPrefixBytes = kHeaderBytes + kExponentBytes;  // payload offset
inline constexpr uint8_t kMsgTypeAllReduce = 1;
inline constexpr uint32_t kSlotBits = 14;
inline constexpr uint32_t kMaxSlots = 1u << kSlotBits;  // slot field is 14 bits wide
inline constexpr uint32_t kMaxElementsPerPacket = 1024;
inline constexpr size_t kMaxPacketBytes = kPrefixBytes + 4 * kMaxElementsPerPacket;

// Elements carried by a size code, or 0 if the code is not supported.
constexpr uint32_t ElementsForSizeCode(uint8_t code) {
  switch (code) {
    case 1: return 64;
    case 3: return 256;
    case 4: return 512;
    case 5: return 1024;
    default: return 0;
  }
}

// The size code for a supported number of elements per packet (64, 256, 512, 1024).
constexpr std::optional<uint8_t> SizeCodeForElements(uint32_t num_elements) {
  switch (num_elements) {
    case 64: return uint8_t{1};
    case 256: return uint8_t{3};
    case 512: return uint8_t{4};
    case 1024: return uint8_t{5};
    default: return std::nullopt;
  }
}

constexpr size_t PacketBytes(uint32_t num_elements) { return kPrefixBytes + 4 * size_t{num_elements}; }

struct Header {
  uint8_t msg_type = kMsgTypeAllReduce;
  uint8_t size_code = 0;
  uint8_t job_number = 0;
  uint32_t tsi = 0;
  uint16_t slot = 0;  // < kMaxSlots
  uint8_t set = 0;    // 0 or 1
  int8_t exp0 = 0;
  int8_t exp1 = 0;

  friend bool operator==(const Header&, const Header&) = default;
};

// Why a datagram was rejected. Each reason is counted separately by the switch and the client.
enum class DecodeError : uint8_t {
  kOk = 0,
  kTruncated,            // shorter than the 10-byte prefix
  kUnknownMsgType,       // msg_type != 1 (all-reduce)
  kUnsupportedSizeCode,  // size code other than 1, 3, 4, 5
  kLengthMismatch,       // payload length differs from the one the size code announces
};
inline constexpr size_t kNumDecodeErrors = 5;
std::string_view DecodeErrorName(DecodeError e);

// A decoded datagram; `payload` points into the decoded buffer (big-endian int32 elements).
struct PacketView {
  Header header;
  const uint8_t* payload = nullptr;
  uint32_t num_elements = 0;
};

// Validates and decodes one datagram. On error `*out` is unspecified.
DecodeError Decode(std::span<const uint8_t> datagram, PacketView* out);

// Writes the 10-byte prefix (header + exponents) of `h` at out[0..10). Requires h.slot <
// kMaxSlots and h.set <= 1 (checked by the caller; violating it is a bug).
void EncodePrefix(const Header& h, uint8_t* out);

// Rewrites the exponent bytes of an encoded datagram in place.
inline void SetExponents(uint8_t* datagram, int8_t e0, int8_t e1) {
  datagram[8] = uint8_t(e0);
  datagram[9] = uint8_t(e1);
}

constexpr uint16_t EncodePoolIndex(uint16_t slot, uint8_t set) {
  return uint16_t((uint16_t(set & 1) << 15) | (slot & (kMaxSlots - 1)));
}

}  // namespace switchml::wire
