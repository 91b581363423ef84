// dataplane/test_packets.h — test-only helpers to build and read SwitchML datagrams.
// Header-only; included by the dataplane unit tests, never by library code.
#pragma once

#include <cstdint>
#include <vector>

#include "common/endian.h"
#include "transport/channel.h"
#include "wire/packet.h"

namespace switchml::dataplane::testing {

struct Request {
  uint16_t slot = 0;
  uint8_t set = 0;
  std::vector<int32_t> values{};  // 64, 256, 512 or 1024 elements
  int8_t exp0 = 0;
  int8_t exp1 = 0;
  uint8_t job_number = 0;
  uint32_t tsi = 0;
};

// The datagram a worker sends for `r`.
inline std::vector<uint8_t> Encode(const Request& r) {
  wire::Header h;
  h.size_code = *wire::SizeCodeForElements(uint32_t(r.values.size()));
  h.job_number = r.job_number;
  h.tsi = r.tsi;
  h.slot = r.slot;
  h.set = r.set;
  h.exp0 = r.exp0;
  h.exp1 = r.exp1;
  std::vector<uint8_t> d(wire::PacketBytes(uint32_t(r.values.size())));
  wire::EncodePrefix(h, d.data());
  for (size_t i = 0; i < r.values.size(); ++i) {
    StoreBE32(d.data() + wire::kPrefixBytes + 4 * i, uint32_t(r.values[i]));
  }
  return d;
}

// n values: base + i * step (int32 wrap-around).
inline std::vector<int32_t> Ramp(uint32_t n, int32_t base, int32_t step) {
  std::vector<int32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = int32_t(uint32_t(base) + uint32_t(step) * i);
  return v;
}

inline std::vector<int32_t> Sum(const std::vector<std::vector<int32_t>>& vs) {
  std::vector<int32_t> out(vs.at(0).size(), 0);
  for (const auto& v : vs) {
    for (size_t i = 0; i < v.size(); ++i) out[i] = int32_t(uint32_t(out[i]) + uint32_t(v[i]));
  }
  return out;
}

// The exact bytes the switch must send back: the triggering packet's header fields, the
// round's max exponents and sums.
inline std::vector<uint8_t> ExpectedResponse(const Request& trigger, const std::vector<int32_t>& sums,
                                             int8_t exp0, int8_t exp1) {
  Request r = trigger;
  r.values = sums;
  r.exp0 = exp0;
  r.exp1 = exp1;
  return Encode(r);
}

// A received datagram owning its bytes; rx() views it as a transport::RxDatagram.
struct OwnedRx {
  std::vector<uint8_t> bytes;
  transport::Endpoint from;
  bool truncated = false;
  transport::RxDatagram rx() {
    transport::RxDatagram d;
    d.data = bytes.data();
    d.capacity = uint32_t(bytes.size());
    d.size = uint32_t(bytes.size());
    d.truncated = truncated;
    d.from = from;
    return d;
  }
};

constexpr uint32_t Ip(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return a << 24 | b << 16 | c << 8 | d;
}

}  // namespace switchml::dataplane::testing
