#include "wire/packet.h"

#include "common/endian.h"

namespace switchml::wire {

std::string_view DecodeErrorName(DecodeError e) {
  switch (e) {
    case DecodeError::kOk: return "ok";
    case DecodeError::kTruncated: return "truncated";
    case DecodeError::kUnknownMsgType: return "unknown_msg_type";
    case DecodeError::kUnsupportedSizeCode: return "unsupported_size_code";
    case DecodeError::kLengthMismatch: return "length_mismatch";
  }
  return "invalid";
}

DecodeError Decode(std::span<const uint8_t> d, PacketView* out) {
  if (d.size() < kPrefixBytes) return DecodeError::kTruncated;
  const uint8_t* p = d.data();
  Header& h = out->header;
  h.msg_type = p[0] >> 4;
  h.size_code = p[0] & 0x7;
  if (h.msg_type != kMsgTypeAllReduce) return DecodeError::kUnknownMsgType;
  const uint32_t n = ElementsForSizeCode(h.size_code);
  if (n == 0) return DecodeError::kUnsupportedSizeCode;
  if (d.size() != PacketBytes(n)) return DecodeError::kLengthMismatch;
  h.job_number = p[1];
  h.tsi = LoadLE32(p + 2);
  const uint16_t pool = LoadBE16(p + 6);
  h.set = uint8_t(pool >> 15);
  h.slot = uint16_t(pool & (kMaxSlots - 1));  // bit 14 is ignored on input (docs/protocol.md#pool-index)
  h.exp0 = int8_t(p[8]);
  h.exp1 = int8_t(p[9]);
  out->payload = p + kPrefixBytes;
  out->num_elements = n;
  return DecodeError::kOk;
}

void EncodePrefix(const Header& h, uint8_t* out) {
  out[0] = uint8_t((h.msg_type & 0xF) << 4 | (h.size_code & 0x7));
  out[1] = h.job_number;
  StoreLE32(out + 2, h.tsi);
  StoreBE16(out + 6, EncodePoolIndex(h.slot, h.set));
  out[8] = uint8_t(h.exp0);
  out[9] = uint8_t(h.exp1);
}

}  // namespace switchml::wire
