#include "transport/frame.h"

#include <cstdio>
#include <cstring>

namespace switchml::transport {
namespace {

constexpr size_t kEthernetHeader = 14;
constexpr size_t kIpv4MinHeader = 20;
constexpr size_t kUdpHeader = 8;
constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint8_t kProtoUdp = 17;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Load32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
void Store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

uint16_t Fold(uint64_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

// Pseudo-header sum for UDP over IPv4: source, destination, protocol, UDP length.
uint64_t PseudoHeaderSum(uint32_t src, uint32_t dst, uint16_t udp_length) {
  return uint64_t{src >> 16} + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF) + kProtoUdp +
         udp_length;
}

// Ones'-complement equality: 0x0000 and 0xFFFF are both "zero".
bool OnesEqual(uint16_t a, uint16_t b) {
  return a == b || (a == 0 && b == 0xFFFF) || (a == 0xFFFF && b == 0);
}

}  // namespace

std::string MacToString(const MacAddress& mac) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return buf;
}

const char* FrameVerdictName(FrameVerdict v) {
  switch (v) {
    case FrameVerdict::kOk: return "ok";
    case FrameVerdict::kIpv4ChecksumZero: return "ipv4_checksum_zero";
    case FrameVerdict::kIpv4ChecksumBad: return "ipv4_checksum_bad";
    case FrameVerdict::kUdpChecksumZero: return "udp_checksum_zero";
    case FrameVerdict::kUdpChecksumPartial: return "udp_checksum_partial";
    case FrameVerdict::kUdpChecksumBad: return "udp_checksum_bad";
    case FrameVerdict::kTruncated: return "truncated";
    case FrameVerdict::kNotIpv4: return "not_ipv4";
    case FrameVerdict::kBadIpv4Header: return "bad_ipv4_header";
    case FrameVerdict::kFragment: return "fragment";
    case FrameVerdict::kNotUdp: return "not_udp";
    case FrameVerdict::kBadUdpLength: return "bad_udp_length";
  }
  return "unknown";
}

uint16_t OnesComplementSum(std::span<const uint8_t> data, uint32_t initial) {
  uint64_t sum = initial;
  const uint8_t* p = data.data();
  size_t n = data.size();
  // Four bytes at a time into a 64-bit accumulator (no overflow below 2^32 words).
  for (; n >= 4; p += 4, n -= 4) sum += Load32(p);
  if (n >= 2) {
    sum += Load16(p);
    p += 2;
    n -= 2;
  }
  if (n == 1) sum += uint32_t{p[0]} << 8;
  return Fold(sum);
}

ParsedUdpFrame ParseUdpFrame(std::span<const uint8_t> frame) {
  ParsedUdpFrame r;
  r.verdict = FrameVerdict::kTruncated;
  if (frame.size() < kEthernetHeader) return r;
  const uint8_t* f = frame.data();
  std::memcpy(r.dst_mac.data(), f, 6);
  std::memcpy(r.src_mac.data(), f + 6, 6);
  if (Load16(f + 12) != kEtherTypeIpv4) {
    r.verdict = FrameVerdict::kNotIpv4;
    return r;
  }
  const std::span<const uint8_t> ip = frame.subspan(kEthernetHeader);
  if (ip.empty()) return r;
  if ((ip[0] >> 4) != 4) {
    r.verdict = FrameVerdict::kNotIpv4;
    return r;
  }
  const size_t ihl = size_t{ip[0] & 0x0Fu} * 4;
  if (ihl < kIpv4MinHeader) {
    r.verdict = FrameVerdict::kBadIpv4Header;
    return r;
  }
  if (ip.size() < ihl) return r;  // truncated
  const uint16_t total_length = Load16(ip.data() + 2);
  if (total_length < ihl + kUdpHeader) {
    r.verdict = FrameVerdict::kBadIpv4Header;
    return r;
  }
  if (ip.size() < total_length) return r;  // truncated
  r.ipv4_header_bytes = static_cast<uint8_t>(ihl);
  const uint32_t src_ip = Load32(ip.data() + 12);
  const uint32_t dst_ip = Load32(ip.data() + 16);
  r.src.ipv4 = src_ip;
  r.dst.ipv4 = dst_ip;
  if (ip[9] != kProtoUdp) {
    r.verdict = FrameVerdict::kNotUdp;
    return r;
  }
  if ((Load16(ip.data() + 6) & 0x3FFF) != 0) {  // MF or fragment offset
    r.verdict = FrameVerdict::kFragment;
    return r;
  }
  const uint8_t* udp = ip.data() + ihl;
  r.src.port = Load16(udp);
  r.dst.port = Load16(udp + 2);
  const uint16_t udp_length = Load16(udp + 4);
  if (udp_length < kUdpHeader || udp_length > total_length - ihl) {
    r.verdict = FrameVerdict::kBadUdpLength;
    return r;
  }

  // IPv4 header: the sum over the whole header, checksum field included, is 0xFFFF when right.
  const uint16_t ip_field = Load16(ip.data() + 10);
  if (OnesComplementSum(ip.first(ihl)) == 0xFFFF) {
    r.ipv4_checksum = FrameVerdict::kOk;
  } else {
    r.ipv4_checksum = ip_field == 0 ? FrameVerdict::kIpv4ChecksumZero : FrameVerdict::kIpv4ChecksumBad;
  }
  // UDP: likewise over pseudo-header + header + payload; 0 means "none"; the bare
  // pseudo-header sum (not complemented) is what checksum offload leaves in the field.
  const uint16_t udp_field = Load16(udp + 6);
  const uint64_t pseudo = PseudoHeaderSum(src_ip, dst_ip, udp_length);
  if (udp_field == 0) {
    r.udp_checksum = FrameVerdict::kUdpChecksumZero;
  } else if (OnesComplementSum({udp, udp_length}, Fold(pseudo)) == 0xFFFF) {
    r.udp_checksum = FrameVerdict::kOk;
  } else if (OnesEqual(udp_field, Fold(pseudo))) {
    r.udp_checksum = FrameVerdict::kUdpChecksumPartial;
  } else {
    r.udp_checksum = FrameVerdict::kUdpChecksumBad;
  }
  r.verdict = r.ipv4_checksum != FrameVerdict::kOk ? r.ipv4_checksum : r.udp_checksum;
  r.payload = {udp + kUdpHeader, size_t{udp_length} - kUdpHeader};
  return r;
}

StatusOr<size_t> BuildUdpFrame(const UdpFrameHeader& h, std::span<const uint8_t> payload,
                               std::span<uint8_t> out) {
  if (payload.size() > kMaxUdpFramePayload) {
    return InvalidArgumentError("BuildUdpFrame: payload of " + std::to_string(payload.size()) +
                                " bytes > " + std::to_string(kMaxUdpFramePayload));
  }
  const size_t frame_len = kUdpFrameOverhead + payload.size();
  if (out.size() < frame_len) {
    return InvalidArgumentError("BuildUdpFrame: output buffer of " + std::to_string(out.size()) +
                                " bytes < frame of " + std::to_string(frame_len));
  }
  uint8_t* f = out.data();
  std::memcpy(f, h.dst_mac.data(), 6);
  std::memcpy(f + 6, h.src_mac.data(), 6);
  Store16(f + 12, kEtherTypeIpv4);
  uint8_t* ip = f + kEthernetHeader;
  const uint16_t ip_total = static_cast<uint16_t>(kIpv4MinHeader + kUdpHeader + payload.size());
  ip[0] = 0x45;
  ip[1] = 0;
  Store16(ip + 2, ip_total);
  Store16(ip + 4, h.ipv4_id);
  Store16(ip + 6, 0x4000);  // DF
  ip[8] = h.ttl;
  ip[9] = kProtoUdp;
  Store16(ip + 10, 0);
  Store32(ip + 12, h.src.ipv4);
  Store32(ip + 16, h.dst.ipv4);
  Store16(ip + 10, static_cast<uint16_t>(~OnesComplementSum({ip, kIpv4MinHeader})));
  uint8_t* udp = ip + kIpv4MinHeader;
  const uint16_t udp_length = static_cast<uint16_t>(kUdpHeader + payload.size());
  Store16(udp, h.src.port);
  Store16(udp + 2, h.dst.port);
  Store16(udp + 4, udp_length);
  Store16(udp + 6, 0);
  if (!payload.empty()) std::memcpy(udp + kUdpHeader, payload.data(), payload.size());
  const uint16_t sum = OnesComplementSum(
      {udp, udp_length}, Fold(PseudoHeaderSum(h.src.ipv4, h.dst.ipv4, udp_length)));
  const uint16_t csum = static_cast<uint16_t>(~sum);
  Store16(udp + 6, csum == 0 ? 0xFFFF : csum);
  return frame_len;
}

}  // namespace switchml::transport
