#include "transport/channel.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace switchml::transport {
namespace {

constexpr std::string_view kLocalhost = "localhost";

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Parses a non-empty run of at most `max_digits` decimal digits as an unsigned value.
// Returns false if `text` is empty, has a non-digit, or is longer than max_digits.
bool ParseDecimal(std::string_view text, size_t max_digits, uint32_t* out) {
  if (text.empty() || text.size() > max_digits) return false;
  uint32_t v = 0;
  for (char c : text) {
    if (!IsDigit(c)) return false;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  *out = v;
  return true;
}

Status Bad(const std::string& text, std::string_view problem) {
  std::string m = "endpoint '";
  m += text;
  m += "': ";
  m += problem;
  return InvalidArgumentError(std::move(m));
}

}  // namespace

std::string Endpoint::ToString() const {
  std::string out;
  out.reserve(21);
  for (int shift = 24; shift >= 0; shift -= 8) {
    out += std::to_string((ipv4 >> shift) & 0xFF);
    out += shift == 0 ? ':' : '.';
  }
  out += std::to_string(port);
  return out;
}

StatusOr<Endpoint> ParseEndpoint(const std::string& text, uint16_t default_port) {
  if (text.empty()) return InvalidArgumentError("endpoint is empty (expected a.b.c.d[:port])");
  const std::string_view all(text);
  const size_t colon = all.find(':');
  const std::string_view host = all.substr(0, colon);

  Endpoint ep;
  ep.port = default_port;
  if (host.empty()) return Bad(text, "address is empty (expected a.b.c.d[:port])");
  if (host == kLocalhost) {
    ep.ipv4 = 0x7F000001;
  } else {
    size_t begin = 0;
    for (int i = 0; i < 4; ++i) {
      const size_t dot = i < 3 ? host.find('.', begin) : host.size();
      if (dot == std::string_view::npos) {
        return Bad(text, "expected 4 dotted octets a.b.c.d, found " + std::to_string(i + 1));
      }
      const std::string_view octet = host.substr(begin, dot - begin);
      const std::string which = "octet " + std::to_string(i + 1);
      if (octet.empty()) return Bad(text, which + " is empty");
      if (octet.find('.') != std::string_view::npos) {
        return Bad(text, "expected 4 dotted octets a.b.c.d, found more");
      }
      // An octet with more digits, or junk after the last octet, fails here ("1.2.3.4x").
      uint32_t v = 0;
      if (!ParseDecimal(octet, 3, &v)) {
        return Bad(text, which + " '" + std::string(octet) + "' is not a decimal number 0..255");
      }
      if (v > 255) return Bad(text, which + " is " + std::to_string(v) + ", must be 0..255");
      if (octet.size() > 1 && octet[0] == '0') {
        // Some parsers (inet_aton) read a leading zero as octal: refuse the ambiguity.
        return Bad(text, which + " '" + std::string(octet) + "' has a leading zero");
      }
      ep.ipv4 = (ep.ipv4 << 8) | v;
      begin = dot + 1;
    }
  }

  if (colon != std::string_view::npos) {
    const std::string_view port = all.substr(colon + 1);
    if (port.empty()) return Bad(text, "port is empty after ':'");
    uint32_t v = 0;
    // Six digits are enough to tell "65536" (out of range) from junk.
    if (!ParseDecimal(port, 6, &v)) {
      bool digits_only = true;
      for (char c : port) digits_only = digits_only && IsDigit(c);
      if (digits_only) return Bad(text, "port " + std::string(port) + " is out of range 0..65535");
      return Bad(text, "port '" + std::string(port) + "' is not a decimal number");
    }
    if (v > 65535) return Bad(text, "port " + std::to_string(v) + " is out of range 0..65535");
    ep.port = static_cast<uint16_t>(v);
  }
  return ep;
}

void GroupByDestination(std::span<const TxDatagram> batch, std::vector<TxDatagram>* out) {
  out->resize(batch.size());
  // Destination → group, in an open-addressing table on the stack (no allocation); groups are
  // numbered in order of first appearance. Destinations past kMaxGroups share one last group.
  constexpr uint32_t kMaxGroups = 256;
  constexpr uint32_t kTableSize = 512;  // power of two, at most half full
  constexpr uint16_t kEmpty = 0xFFFF;
  uint64_t keys[kTableSize];
  uint16_t groups[kTableSize];
  std::fill(std::begin(groups), std::end(groups), kEmpty);
  uint32_t counts[kMaxGroups + 1] = {};
  uint32_t num_groups = 0;
  auto group_of = [&](Endpoint to) -> uint32_t {
    const uint64_t key = (uint64_t{to.ipv4} << 16) | to.port;
    uint32_t h = static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 55);  // 9 bits
    for (;; h = (h + 1) & (kTableSize - 1)) {
      if (groups[h] == kEmpty) {
        if (num_groups == kMaxGroups) return kMaxGroups;
        keys[h] = key;
        groups[h] = static_cast<uint16_t>(num_groups);
        return num_groups++;
      }
      if (keys[h] == key) return groups[h];
    }
  };
  for (const TxDatagram& d : batch) ++counts[group_of(d.to)];
  uint32_t start[kMaxGroups + 1];
  uint32_t sum = 0;
  for (uint32_t g = 0; g <= kMaxGroups; ++g) {
    start[g] = sum;
    sum += counts[g];
  }
  for (const TxDatagram& d : batch) (*out)[start[group_of(d.to)]++] = d;
}

}  // namespace switchml::transport
