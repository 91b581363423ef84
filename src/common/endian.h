// common/endian.h — explicit byte-order loads and stores over byte buffers.
//
// The wire format is defined byte by byte (docs/protocol.md#wire-format): never cast packed
// structs onto buffers; use these helpers. All functions are pure, allocation-free and thread-safe.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace switchml {

inline uint16_t LoadBE16(const uint8_t* p) { return uint16_t(uint16_t(p[0]) << 8 | p[1]); }
inline void StoreBE16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }

inline uint32_t LoadBE32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return std::endian::native == std::endian::little ? __builtin_bswap32(v) : v;
}
inline void StoreBE32(uint8_t* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}
inline uint32_t LoadLE32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return std::endian::native == std::endian::little ? v : __builtin_bswap32(v);
}
inline void StoreLE32(uint8_t* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}

}  // namespace switchml
