#include "wire/call_descriptor.h"

#include <algorithm>
#include <array>

#include "common/endian.h"

namespace switchml::wire {

namespace {

using Bytes = std::array<uint8_t, kDescriptorBytes>;

// Field layout of the descriptor bytes.
constexpr size_t kVersionByte = 0, kTypeByte = 1, kRejectedByte = 2, kCountByte = 3, kCallByte = 11;

Bytes ToBytes(const CallDescriptor& d) {
  Bytes b{};
  b[kVersionByte] = kDescriptorVersion;
  b[kTypeByte] = d.type;
  b[kRejectedByte] = d.rejected ? 1 : 0;
  for (size_t i = 0; i < 8; ++i) b[kCountByte + i] = uint8_t(d.num_elements >> (8 * i));
  for (size_t i = 0; i < 4; ++i) b[kCallByte + i] = uint8_t(d.call_id >> (8 * i));
  return b;
}

uint64_t Field(const Bytes& b, size_t first, size_t len) {
  uint64_t v = 0;
  for (size_t i = 0; i < len; ++i) v |= uint64_t{b[first + i]} << (8 * i);
  return v;
}

const char* TypeName(uint64_t t) { return t == 0 ? "int32" : t == 1 ? "float32" : "an unknown type"; }

}  // namespace

void EncodeDescriptor(const CallDescriptor& d, uint8_t* payload) {
  const Bytes b = ToBytes(d);
  for (size_t i = 0; i < kDescriptorBytes; ++i) {
    StoreBE32(payload + 8 * i, uint32_t{b[i]});
    StoreBE32(payload + 8 * i + 4, uint32_t{b[i]} * b[i]);
  }
}

DescriptorVerdict CheckDescriptor(const CallDescriptor& mine, const uint8_t* summed, uint32_t num_workers) {
  const Bytes b = ToBytes(mine);
  const uint64_t n = num_workers == 0 ? 1 : num_workers;
  DescriptorVerdict verdict;
  Bytes other{};          // with two workers: the other worker's bytes
  bool differs[kDescriptorBytes] = {};
  bool any = false, other_exact = n == 2;
  for (size_t i = 0; i < kDescriptorBytes; ++i) {
    const uint64_t s1 = LoadBE32(summed + 8 * i), s2 = LoadBE32(summed + 8 * i + 4);
    if (i == kRejectedByte) {
      // Each worker sent 0 or 1: S1 = S2 = the number that sent 1, at least ours, at most n.
      if (s1 != s2 || s1 > n || s1 < b[i]) {
        differs[i] = true;
        any = true;
      }
      verdict.rejected_by = uint32_t(std::min<uint64_t>(s1, n));
      continue;
    }
    differs[i] = s1 != n * b[i] || s2 != n * b[i] * b[i];
    any |= differs[i];
    if (n == 2) {
      // s1 = b + b', s2 = b^2 + b'^2; a consistent b' is in [0, 255] and matches both sums.
      const uint64_t o = s1 - b[i];
      if (s1 < b[i] || o > 255 || s2 != uint64_t{b[i]} * b[i] + o * o) other_exact = false;
      other[i] = uint8_t(o);
    }
  }
  if (!any) return verdict;
  auto range_differs = [&](size_t first, size_t len) {
    for (size_t i = first; i < first + len; ++i)
      if (differs[i]) return true;
    return false;
  };
  std::string why;
  auto add = [&](const std::string& what) { why += (why.empty() ? "" : "; ") + what; };
  if (range_differs(kVersionByte, 1)) {
    add("the workers run different client protocol versions (or a worker is not a SwitchML-C++ client)");
  }
  if (range_differs(kTypeByte, 1)) {
    std::string s = std::string("the element type differs (this worker: ") + TypeName(mine.type);
    if (other_exact) s += std::string("; the other worker: ") + TypeName(other[kTypeByte]);
    add(s + ")");
  }
  if (range_differs(kCountByte, 8)) {
    std::string s = "the element count differs (this worker: " + std::to_string(mine.num_elements);
    if (other_exact) s += "; the other worker: " + std::to_string(Field(other, kCountByte, 8));
    add(s + ")");
  }
  if (range_differs(kCallByte, 4)) {
    std::string s = "the call number differs (this worker: #" + std::to_string(uint32_t(mine.call_id));
    if (other_exact) s += "; the other worker: #" + std::to_string(Field(other, kCallByte, 4));
    add(s + "): the workers issued different numbers of all-reduce calls");
  }
  if (why.empty()) add("the descriptor sum is inconsistent (a corrupted or foreign datagram)");
  verdict.mismatch = std::move(why);
  return verdict;
}

}  // namespace switchml::wire
