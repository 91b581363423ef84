#include "client/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "quant/quantizer.h"
#include "wire/call_descriptor.h"
#include "wire/packet.h"
#include "wire/payload.h"

namespace switchml::client {

Status BlockExponents(const float* x, size_t n, uint32_t block, int8_t* exps, size_t index_base) {
  for (size_t off = 0, b = 0; off < n; off += block, ++b) {
    const size_t len = std::min<size_t>(block, n - off);
    if (quant::BlockExponent(x + off, len, &exps[b])) continue;
    for (size_t i = off; i < off + len; ++i) {
      if (!std::isfinite(x[i])) {
        return InvalidArgumentError("float32 input element " + std::to_string(index_base + i) + " is " +
                                    (std::isnan(x[i]) ? "NaN" : "infinite") +
                                    "; SwitchML quantization needs finite values");
      }
    }
    // Finite but |x| >= 2^127: its exponent does not fit the wire's int8 field.
    for (size_t i = off; i < off + len; ++i) {
      if (std::fabs(x[i]) >= 0x1p127f) {
        char value[32];
        std::snprintf(value, sizeof value, "%g", double(x[i]));
        return InvalidArgumentError("float32 input element " + std::to_string(index_base + i) + " is " +
                                    value + "; SwitchML quantization needs |x| < 2^127");
      }
    }
  }
  return OkStatus();
}

namespace {
std::string Ms(Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}
}  // namespace

SliceEngine::SliceEngine(const EngineConfig& config) : config_(config) {
  slots_.resize(config_.window);
  // Stride rounded up to a cache line so slots never share lines.
  buffer_stride_ = (wire::PacketBytes(config_.elements_per_packet) + 63) / 64 * 64;
  buffers_.assign(buffer_stride_ * config_.window, 0);
  size_code_ = wire::SizeCodeForElements(config_.elements_per_packet).value_or(0);
  queue_.resize(config_.window);
  held_.assign(size_t{config_.window} * 4 * config_.elements_per_packet, 0);
  if (config_.shadow_copies) shadow_.assign(size_t{config_.window} * 4 * config_.elements_per_packet, 0);
  rto_ = config_.initial_rto;
}

SliceLayout SliceLayout::Of(uint64_t num_elements, DataType type, bool send_descriptor, uint32_t window,
                            uint32_t elements_per_packet) {
  SliceLayout l;
  l.blocks = (num_elements + elements_per_packet - 1) / elements_per_packet;
  l.float_layout = type == DataType::kFloat32 && l.blocks > 0;
  if (l.float_layout) {
    // The descriptor rides in packet 0, an exponent-only packet.
    l.batch = uint32_t(std::min<uint64_t>(window, l.blocks));
    l.data_offset = l.batch;
    l.total = l.blocks + l.batch;
  } else {
    l.data_offset = send_descriptor ? 1 : 0;  // one descriptor-only packet leads
    l.total = l.blocks + l.data_offset;
    l.batch = uint32_t(std::min<uint64_t>(window, l.total));
  }
  return l;
}

SlotShadow SliceEngine::shadow(uint32_t i) const {
  SlotShadow sh;
  const Slot& s = slots_.at(i);
  if (!s.shadow_valid) return sh;
  sh.valid = true;
  sh.call_id = s.shadow_call;
  sh.packet = s.shadow_packet;
  sh.exp0 = s.shadow_exp0;
  if (s.shadow_has_payload)
    sh.payload = {shadow_.data() + size_t{i} * 4 * config_.elements_per_packet, 4 * size_t{config_.elements_per_packet}};
  return sh;
}

uint32_t SliceEngine::BlockLength(uint64_t block) const {
  const uint64_t n = config_.elements_per_packet;
  return uint32_t(std::min<uint64_t>(n, slice_.num_elements - block * n));
}

void SliceEngine::Begin(const SliceSpec& slice, TimePoint now) {
  slice_ = slice;
  job_number_ = uint8_t(slice.call_id & 0xFF);
  const uint64_t n = config_.elements_per_packet;
  const SliceLayout layout =
      SliceLayout::Of(slice.num_elements, slice.type, slice.send_descriptor, config_.window, config_.elements_per_packet);
  blocks_ = layout.blocks;
  float_layout_ = layout.float_layout;
  batch_ = layout.batch;
  data_offset_ = layout.data_offset;
  total_ = layout.total;
  begun_ = true;
  completed_ = 0;
  queue_head_ = queue_size_ = 0;
  next_timer_ = TimePoint::max();
  last_progress_ = now;
  result_ = OkStatus();
  active_ = true;
  in_step_ = true;
  verdict_pending_ = slice.send_descriptor;
  rejected_by_ = 0;
  first_round_left_ = batch_;
  if (slice_.rejected && !slice_.send_descriptor) {
    // Nobody else would learn of the rejection: a programming error of the caller.
    Finish(InternalError("a rejected slice must send the call descriptor: " + slice_.rejection.ToString()));
    return;
  }
  if (slice_.rejected) {
    // Zero payloads, no exponents, nothing read or written.
    slice_.in = nullptr;
    slice_.out = nullptr;
    slice_.exponents = nullptr;
  } else if (float_layout_ && slice_.exponents == nullptr) {
    // A spec without exponents (tests, tools): take them now, in one pass.
    own_exponents_.resize(blocks_);
    if (Status s = BlockExponents(static_cast<const float*>(slice_.in), slice_.num_elements, uint32_t(n),
                                  own_exponents_.data(), 0);
        !s.ok()) {
      Finish(s);
      return;
    }
    slice_.exponents = own_exponents_.data();
  }
  if (total_ == 0) {
    Finish(OkStatus());
    return;
  }
  for (uint32_t p = 0; p < batch_ && active_; ++p) BuildPacket(p, now);
}

void SliceEngine::BuildPacket(uint32_t p, TimePoint now) {
  const uint32_t i = p % batch_;
  Slot& s = slots_[i];
  s.packet = p;
  s.set = s.next_set;
  s.next_set ^= 1;
  s.resent = false;
  s.sent_once = false;
  s.retransmitting = false;
  s.held = false;
  s.rto = rto_;
  s.deadline = TimePoint::max();
  const uint32_t n = config_.elements_per_packet;
  s.size = uint32_t(wire::PacketBytes(n));

  uint8_t* buf = Buffer(i);
  wire::Header h;
  h.size_code = size_code_;
  h.job_number = job_number_;
  h.tsi = p;
  h.slot = uint16_t(config_.slot_base + i);
  h.set = s.set;
  uint8_t* payload = buf + wire::kPrefixBytes;
  // A rejecting worker's exponent packets carry the all-zero block's exponent (nothing is
  // quantized with what comes back).
  if (float_layout_ && p < blocks_) h.exp0 = slice_.rejected ? int8_t{-126} : slice_.exponents[p];
  wire::EncodePrefix(h, buf);

  // Which data block this packet carries, if any.
  const int64_t block = int64_t{p} - int64_t(data_offset_);
  uint32_t len = 0;
  if (slice_.rejected) {
    // The first round only (nothing follows it), zero payloads.
  } else if (block >= 0 && uint64_t(block) < blocks_) {
    len = BlockLength(uint64_t(block));
    const uint64_t offset = uint64_t(block) * n;
    if (float_layout_) {
      const float* x = static_cast<const float*>(slice_.in) + offset;
      const float max_product = quant::QuantizeToBE(x, len, s.scale, config_.num_workers, payload);
      if (max_product >= float(quant::QuantizeLimit(config_.num_workers))) {
        // Rare: something may have been clamped. Data beyond the switch-wide exponent means the
        // input changed after its exponent was taken (its sum would be silently wrong).
        const float bound = std::ldexp(1.0f, s.max_exp);
        for (uint32_t k = 0; k < len; ++k) {
          if (!(std::fabs(x[k]) < bound)) {
            Finish(FailedPreconditionError(
                "float32 input element " + std::to_string(offset + k) + " of this slice of all-reduce #" +
                std::to_string(slice_.call_id) + " changed while the all-reduce ran (it is " +
                std::to_string(x[k]) + ", beyond the block exponent 2^" + std::to_string(s.max_exp) +
                " taken from the data before it was sent); the input must not be written until the "
                "all-reduce's handle completes"));
            return;
          }
        }
        stats_.clamped += quant::CountClamped(x, len, s.scale, config_.num_workers);
      }
    } else {
      wire::Int32ToBE(static_cast<const int32_t*>(slice_.in) + offset, len, payload);
    }
  }
  if (p == 0 && slice_.send_descriptor) {
    // Packet 0 carries no data: the exponent packet of block 0 (float32) or a leading
    // descriptor-only packet (data_offset_ == 1).
    wire::EncodeDescriptor({slice_.call_id, slice_.call_elements, uint8_t(slice_.type), slice_.rejected}, payload);
    len = wire::kDescriptorElements;
  }
  // Deterministic padding (the reference sends whatever the buffer held).
  std::memset(payload + 4 * size_t{len}, 0, 4 * size_t{n - len});
  (void)now;
  Queue(i);
}

void SliceEngine::Queue(uint32_t i) {
  Slot& s = slots_[i];
  if (s.queued) return;
  s.queued = true;
  queue_[(queue_head_ + queue_size_) % queue_.size()] = i;
  ++queue_size_;
}

size_t SliceEngine::PeekSends(std::span<transport::TxDatagram> out) const {
  const size_t k = std::min(out.size(), queue_size_);
  for (size_t j = 0; j < k; ++j) {
    const uint32_t i = queue_[(queue_head_ + j) % queue_.size()];
    out[j] = transport::TxDatagram{Buffer(i), slots_[i].size, config_.switch_endpoint};
  }
  return k;
}

void SliceEngine::ConfirmSent(size_t count, TimePoint now) {
  count = std::min(count, queue_size_);
  for (size_t j = 0; j < count; ++j) {
    const uint32_t i = queue_[queue_head_];
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_size_;
    Slot& s = slots_[i];
    s.queued = false;
    ++stats_.packets_sent;
    if (s.retransmitting) {
      ++stats_.retransmissions;
      s.retransmitting = false;
      s.resent = true;
    } else {
      s.sent_at = now;
      s.sent_once = true;
    }
    s.deadline = now + s.rto;
    next_timer_ = std::min(next_timer_, s.deadline);
  }
}

void SliceEngine::SampleRtt(Duration r) {
  // A result's round trip includes waiting for the slowest peer's packet of the same round. When
  // a peer's packet was lost, our sample includes that peer's whole retransmission timeout:
  // Karn's rule cannot see it (we sent once), and with a few percent loss such samples drive the
  // estimate, and so everyone's timeout, up to max_rto (measured: 5% loss both ways made a
  // 16 MiB call 20-70x slower). So a sample counts for at most twice the smoothed RTT: a real RTT
  // increase still moves srtt up by 1/8 per sample (thousands per second), while peer waits
  // cannot inflate it by more than a bounded factor.
  if (have_rtt_) r = std::min(r, 2 * srtt_);
  // RFC 6298, section 2, with alpha = 1/8, beta = 1/4.
  if (!have_rtt_) {
    srtt_ = r;
    rttvar_ = r / 2;
    have_rtt_ = true;
  } else {
    const Duration err = srtt_ > r ? srtt_ - r : r - srtt_;
    rttvar_ = (3 * rttvar_ + err) / 4;
    srtt_ = (7 * srtt_ + r) / 8;
  }
  rto_ = std::clamp<Duration>(srtt_ + 4 * rttvar_, config_.min_rto, config_.max_rto);
}

void SliceEngine::OnDatagram(std::span<const uint8_t> bytes, TimePoint now) {
  wire::PacketView v;
  if (wire::Decode(bytes, &v) != wire::DecodeError::kOk) {
    ++stats_.malformed;
    return;
  }
  const wire::Header& h = v.header;
  // Stale: another call's result, a slot this slice does not use, a packet not in flight
  // (already accepted: a duplicate from a spurious retransmission), or a size we never sent.
  if (!active_ || h.job_number != job_number_ || h.slot < config_.slot_base ||
      h.slot >= config_.slot_base + batch_ || v.num_elements != config_.elements_per_packet) {
    ++stats_.duplicates;
    return;
  }
  const uint32_t i = h.slot - config_.slot_base;
  Slot& s = slots_[i];
  if (s.packet == kIdle || s.held || h.tsi != s.packet || h.set != s.set) {
    ++stats_.duplicates;
    return;
  }
  // Accept packet p.
  const uint32_t p = s.packet;
  ++stats_.results_received;
  if (!s.resent && s.sent_once) SampleRtt(now - s.sent_at);
  last_progress_ = now;
  s.deadline = TimePoint::max();
  s.retransmitting = false;
  if (p < batch_) --first_round_left_;
  if (p == 0 && slice_.send_descriptor) {
    OnVerdict(i, v.payload, h.exp0, now);
    return;
  }
  if (verdict_pending_) {
    // First round, before the verdict: keep the result (an int32 payload; the slot's own buffer
    // still holds the request, which a retransmission already queued may send), do not refill.
    s.held = true;
    s.held_exp0 = h.exp0;
    if (p >= data_offset_) std::memcpy(HeldPayload(i), v.payload, 4 * size_t{config_.elements_per_packet});
    return;
  }
  if (rejected_by_ > 0) {
    // The call was rejected: this is the rest of the first round, which every worker waits for.
    s.packet = kIdle;
    if (first_round_left_ == 0) Finish(result_);
    return;
  }
  Complete(i, v.payload, h.exp0, now);
}

void SliceEngine::OnVerdict(uint32_t i, const uint8_t* payload, int8_t exp0, TimePoint now) {
  verdict_pending_ = false;
  const wire::CallDescriptor mine{slice_.call_id, slice_.call_elements, uint8_t(slice_.type), slice_.rejected};
  const wire::DescriptorVerdict verdict = wire::CheckDescriptor(mine, payload, config_.num_workers);
  if (!verdict.mismatch.empty()) {
    Finish(InvalidArgumentError("the workers' all-reduce calls #" + std::to_string(slice_.call_id) +
                                " do not match: " + verdict.mismatch +
                                "; every worker must make the same calls (same element counts and "
                                "types) in the same order"));
    return;
  }
  if (verdict.rejected_by > 0 || slice_.rejected) {
    // Rejected by some worker: nothing is written and nothing follows the first round, on
    // every worker; the slice ends when the whole first round is back.
    rejected_by_ = std::max<uint32_t>(verdict.rejected_by, 1);
    if (slice_.rejected) {
      result_ = slice_.rejection;
    } else {
      const uint32_t n = config_.num_workers;
      result_ = AbortedError(
          "all-reduce #" + std::to_string(slice_.call_id) + " was rejected by " +
          (n == 2 ? std::string("the other worker") : std::to_string(rejected_by_) + " of the " + std::to_string(n) + " workers") +
          " (its arguments or input; that worker's error says which), so it failed on every worker without "
          "writing any output; the calls after it are not affected");
    }
    for (uint32_t j = 0; j < batch_; ++j) {
      if (slots_[j].held || j == i) {
        slots_[j].held = false;
        slots_[j].packet = kIdle;
      }
    }
    if (first_round_left_ == 0) Finish(result_);
    return;
  }
  // The same call everywhere, rejected by nobody: process packet 0, then the held results.
  Complete(i, payload, exp0, now);
  for (uint32_t j = 0; j < batch_ && active_; ++j) {
    if (!slots_[j].held) continue;
    slots_[j].held = false;
    Complete(j, HeldPayload(j), slots_[j].held_exp0, now);
  }
}

void SliceEngine::Complete(uint32_t i, const uint8_t* payload, int8_t exp0, TimePoint now) {
  Slot& s = slots_[i];
  const uint32_t p = s.packet;
  const uint32_t n = config_.elements_per_packet;
  // The shadow copy: the last round this slot completed, as received.
  if (config_.shadow_copies) {
    s.shadow_valid = true;
    s.shadow_call = slice_.call_id;
    s.shadow_packet = p;
    s.shadow_exp0 = exp0;
    s.shadow_has_payload = p >= data_offset_;
    if (p >= data_offset_) std::memcpy(ShadowPayload(i), payload, 4 * size_t{n});
  }
  if (p >= data_offset_) {
    const uint64_t block = p - data_offset_;
    if (float_layout_) {
      quant::DequantizeFromBE(payload, BlockLength(block), s.scale, static_cast<float*>(slice_.out) + block * n);
    } else {
      wire::BEToInt32(payload, BlockLength(block), static_cast<int32_t*>(slice_.out) + block * n);
    }
  }
  if (float_layout_ && p < blocks_) {
    s.scale = quant::ScaleForExponent(exp0, config_.num_workers);
    s.max_exp = exp0;
  }
  ++completed_;
  if (uint64_t{p} + batch_ < total_) {
    BuildPacket(p + batch_, now);
  } else {
    s.packet = kIdle;
  }
  if (completed_ == total_ && active_) Finish(OkStatus());
}

void SliceEngine::OnTick(TimePoint now) {
  if (!active_) return;
  if (now - last_progress_ >= config_.call_timeout) {
    Finish(DeadlineExceededError(
        "no result from " +
        (config_.switch_name.empty() ? "switch " + config_.switch_endpoint.ToString()
                                     : config_.switch_name) +
        " for " +
        Ms(config_.call_timeout) + " (all-reduce #" + std::to_string(slice_.call_id) +
        " of this context, slots " +
        std::to_string(config_.slot_base) + ".." + std::to_string(config_.slot_base + batch_ - 1) +
        ", " + std::to_string(completed_) + "/" + std::to_string(total_) + " packets done, " +
        std::to_string(stats_.retransmissions) + " retransmissions so far)"));
    return;
  }
  if (now < next_timer_) return;
  TimePoint next = TimePoint::max();
  for (uint32_t i = 0; i < batch_; ++i) {
    Slot& s = slots_[i];
    if (s.packet == kIdle || s.queued || s.held) continue;
    if (s.deadline <= now) {
      ++stats_.timeouts;
      s.rto = std::min<Duration>(s.rto * 2, config_.max_rto);
      // RFC 6298, section 5.5: keep the backed-off timeout for new packets too until a fresh RTT
      // sample arrives; otherwise a sudden RTT increase (a descheduled peer, a busy switch)
      // makes every new packet time out spuriously and the retransmissions add to the load.
      rto_ = std::max(rto_, s.rto);
      s.retransmitting = true;
      s.deadline = TimePoint::max();
      Queue(i);
    } else {
      next = std::min(next, s.deadline);
    }
  }
  next_timer_ = next;
}

TimePoint SliceEngine::NextDeadline() const {
  if (!active_) return TimePoint::max();
  return std::min(next_timer_, last_progress_ + config_.call_timeout);
}

void SliceEngine::Abort(Status why) {
  if (active_) Finish(std::move(why));
}

void SliceEngine::Finish(Status s) {
  active_ = false;
  // In step: completed, or rejected with the whole first round back (rejected_by_ > 0 is set
  // only by a consistent verdict).
  in_step_ = s.ok() ? completed_ == total_ : rejected_by_ > 0 && first_round_left_ == 0;
  result_ = std::move(s);
  for (uint32_t i = 0; i < batch_; ++i) {
    slots_[i].held = false;
    slots_[i].packet = kIdle;
    slots_[i].queued = false;
    slots_[i].retransmitting = false;
    slots_[i].deadline = TimePoint::max();
  }
  queue_head_ = queue_size_ = 0;
  next_timer_ = TimePoint::max();
}

}  // namespace switchml::client
