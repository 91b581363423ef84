// transport/frame.h — Ethernet II / IPv4 / UDP frames: parsing with checksum verdicts, and
// building frames with correct checksums. Pure functions: no sockets, no allocation.
//
// The raw-frame channel (raw_channel.h) receives whole Ethernet frames, because the reference
// SwitchML DPDK client sends datagrams the kernel would drop: an IPv4 header checksum of 0 and a
// UDP checksum holding only the pseudo-header sum (it leaves both to NIC offload). ParseUdpFrame
// takes such a frame apart and says what is wrong with its checksums instead of dropping it:
//
//   ParsedUdpFrame p = ParseUdpFrame({frame, frame_len});
//   if (p.verdict is structural (IsStructuralError)) drop;        // not_ipv4, truncated, ...
//   // p.ipv4_checksum: kOk / kIpv4ChecksumZero / kIpv4ChecksumBad
//   // p.udp_checksum:  kOk / kUdpChecksumZero / kUdpChecksumPartial / kUdpChecksumBad
//   use p.src_mac, p.src / p.dst (Endpoint), p.payload
//
//   UdpFrameHeader h{.dst_mac = p.src_mac, .src_mac = my_mac, .src = me, .dst = p.src};
//   StatusOr<size_t> n = BuildUdpFrame(h, payload, out);   // correct IPv4 and UDP checksums
//
// Scope: Ethernet II without VLAN tags (a tagged frame is kNotIpv4), IPv4 with or without
// options (IHL 5..15), UDP. Bytes after the IPv4 total length (Ethernet padding) are ignored.
// Frames are not padded to the 60-byte Ethernet minimum: the device does that.
//
// Thread-safety: all functions are pure and reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::transport {

using MacAddress = std::array<uint8_t, 6>;

// "02:00:00:00:00:01".
std::string MacToString(const MacAddress& mac);

// What ParseUdpFrame found. The structural reasons (IsStructuralError) mean the frame is not a
// complete, unfragmented IPv4/UDP datagram; the checksum reasons describe a complete one.
enum class FrameVerdict : uint8_t {
  kOk = 0,
  // Checksums (the frame is otherwise complete).
  kIpv4ChecksumZero,     // IPv4 header checksum field 0 (left to offload), header otherwise fine
  kIpv4ChecksumBad,      // IPv4 header checksum wrong (and not 0)
  kUdpChecksumZero,      // UDP checksum 0: "no checksum", legal in IPv4 (RFC 768)
  kUdpChecksumPartial,   // UDP checksum = the pseudo-header sum only (what an offloading sender
                         // leaves for the NIC to finish)
  kUdpChecksumBad,       // UDP checksum wrong (neither correct, 0 nor partial)
  // Structure.
  kTruncated,            // shorter than the headers it announces (Ethernet, IPv4, UDP, lengths)
  kNotIpv4,              // EtherType not 0x0800 (VLAN-tagged frames included), or version != 4
  kBadIpv4Header,        // IHL < 5, or IPv4 total length < header length + 8
  kFragment,             // MF flag or a fragment offset: not a whole datagram
  kNotUdp,               // IPv4 protocol != 17
  kBadUdpLength,         // UDP length < 8 or beyond the IPv4 payload
};
inline constexpr int kNumFrameVerdicts = static_cast<int>(FrameVerdict::kBadUdpLength) + 1;

// "ok", "ipv4_checksum_zero", "udp_checksum_partial", "not_udp", ... (snake_case, for counters).
const char* FrameVerdictName(FrameVerdict v);

// True for the reasons from kTruncated on: the frame carries no usable datagram.
inline bool IsStructuralError(FrameVerdict v) { return v >= FrameVerdict::kTruncated; }

struct ParsedUdpFrame {
  // The first problem found: a structural reason, else the IPv4 checksum's verdict if not kOk,
  // else the UDP checksum's. kOk only if both checksums are correct.
  FrameVerdict verdict = FrameVerdict::kTruncated;
  // Both checksum verdicts separately (a frame from an offloading sender has two problems).
  // kOk when structural parsing failed before reaching them.
  FrameVerdict ipv4_checksum = FrameVerdict::kOk;  // kOk, kIpv4ChecksumZero, kIpv4ChecksumBad
  FrameVerdict udp_checksum = FrameVerdict::kOk;   // kOk, kUdpChecksumZero/Partial/Bad
  MacAddress dst_mac{};
  MacAddress src_mac{};
  Endpoint src;  // host byte order
  Endpoint dst;
  uint8_t ipv4_header_bytes = 0;  // 20..60
  // The UDP payload (UDP length − 8 bytes), inside the parsed frame. Empty on structural errors.
  std::span<const uint8_t> payload;
};

// Parses an Ethernet II frame (starting at the destination MAC, no FCS). Never reads outside
// `frame`. Fields are filled as far as parsing got (MACs once 14 bytes are there, addresses and
// ports once the IPv4/UDP headers are).
ParsedUdpFrame ParseUdpFrame(std::span<const uint8_t> frame);

struct UdpFrameHeader {
  MacAddress dst_mac{};
  MacAddress src_mac{};
  Endpoint src;  // host byte order
  Endpoint dst;
  uint16_t ipv4_id = 0;  // IPv4 identification (DF is set, so it is informational)
  uint8_t ttl = 64;
};

// Ethernet (14) + IPv4 without options (20) + UDP (8).
inline constexpr size_t kUdpFrameOverhead = 42;
// Largest UDP payload in an IPv4 datagram without options.
inline constexpr size_t kMaxUdpFramePayload = 65535 - 20 - 8;

// Writes header + payload into `out` as an Ethernet II / IPv4 (IHL 5, DF, no options) / UDP
// frame with correct IPv4 header and UDP checksums (a UDP checksum that computes to 0 is sent
// as 0xFFFF). Returns the frame length, kUdpFrameOverhead + payload.size(). Errors:
// InvalidArgument (payload larger than kMaxUdpFramePayload, or `out` shorter than the frame;
// the message names both sizes).
StatusOr<size_t> BuildUdpFrame(const UdpFrameHeader& header, std::span<const uint8_t> payload,
                               std::span<uint8_t> out);

// The 16-bit ones'-complement sum of `data` (big-endian words, an odd last byte padded with a
// zero byte) added to `initial`, folded to 16 bits but not complemented (RFC 1071). The
// checksum of a block is ~OnesComplementSum(block, 0).
uint16_t OnesComplementSum(std::span<const uint8_t> data, uint32_t initial = 0);

}  // namespace switchml::transport
