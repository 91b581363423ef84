// client/engine.h — the per-thread streaming protocol engine (docs/protocol.md#client-protocol),
// pure.
//
// One SliceEngine belongs to one worker thread. It streams one call slice at a time through
// the thread's own range of W switch slots, self-clocked: each accepted result frees its slot,
// which immediately carries the slice's next packet. It owns the packet buffers, the
// per-slot state and the retransmission timers, but no socket and no clock: the caller
// (worker.cc) moves datagrams between it and a transport::Channel and passes the time in.
// That makes every loss, timeout and backoff path testable with a fake clock.
//
// Slot/set mapping (docs/protocol.md#slot-and-set-assignment; it fixes reference defect D3,
// docs/protocol.md#d3-set-reuse-in-short-float32-slices): packet p of a slice with
// B = min(W, packets) in-flight positions uses slot `slot_base + p mod B`; every slot keeps a
// "next set" bit that persists across slices and flips each time a *new* packet (not a
// retransmission) is put on it. So each slot strictly alternates sets for its whole life and
// a worker never starts a round in set b before it has the result of its previous round on
// that slot (contract C4, docs/protocol.md#c4-strict-set-alternation), for any sequence of
// slice sizes. All workers run the same rule.
//
// Retransmission (docs/protocol.md#retransmission; fixes reference defects D1 and D2, and with
// the acceptance rule below D4: docs/protocol.md#known-defects-of-the-reference): one timer per
// slot, keyed by the exact in-flight packet (id, set); armed when the packet is handed to the
// transport; cancelled when its result is accepted; all cleared at slice end. RTO adapts to
// the measured RTT (RFC 6298, Karn's rule) within [min_rto, max_rto] and doubles per
// retransmission of the same packet. A slice fails with DEADLINE_EXCEEDED if no result is
// accepted for call_timeout.
//
// Acceptance of a result: decodes, carries this slice's call number, its slot is in use and
// its (tsi, set, size) equal the in-flight packet's; anything else is counted and ignored.
//
// Float32 (docs/protocol.md#float32-exponent-quantizer): B extra leading packets carry only
// block exponents; packet p >= B carries block p − B quantized with the scale derived from the
// switch-wide max exponent that came back with packet p − B (same slot, so the scale is kept
// per slot). A block whose data reaches beyond that exponent (the input changed after its
// exponent was taken) fails the slice instead of being clamped into a wrong sum; clamps at the
// rounding boundary are counted.
//
// Call descriptor (wire/call_descriptor.h): packet 0 of the slice carries the call's
// descriptor, in the payload of the first exponent packet (float32) or in one extra leading
// packet (int32, and the empty slice of a call with no elements). When its sum comes back, a
// descriptor that differs on any worker (element count, type, call number) fails the slice with
// INVALID_ARGUMENT on every worker, so workers that disagree never get a result.
//
// Rejected calls (the verdict): until packet 0's result is back, nobody knows whether some
// worker rejected the call, so the first round (packets 0 .. B-1) is held: results that arrive
// before packet 0's are accepted but neither written to the output nor followed by the slot's
// next packet (an int32 result's payload waits in a per-slot buffer). If packet 0's sum says the call is the same everywhere and nobody rejected
// it, the held results are processed and the slice streams on. If k > 0 workers rejected it
// (SliceSpec::rejected: the worker sends the same first round with zero payloads and its
// rejected flag set), every worker ends the slice after the whole first round is back, having
// written nothing, with every slot's set flipped exactly once on every worker: the slice fails
// "in step" (ended_in_step()), so the slot state of all workers still agrees and the next call
// pairs with the next call everywhere. A round trip per slice is the cost; on the common path
// results come back in order and nothing waits (packet 0 is sent first on every worker).
//
// Shadow copies (docs/reliability.md, "Surviving a failing switch"): every slot keeps the last
// round it completed, as received: the call number, the packet index within that call's slice,
// the result's exponent field and, for a packet that carries data, its wire payload (one memcpy
// of the payload at completion; window x 4 x elements_per_packet bytes in all). A result that
// was accepted but held (before the verdict) or never arrived is not recorded. Since a worker
// sends round r+1 of a slot only after completing round r, the workers' shadows of a slot differ
// by at most one round; recovery (ContextImpl::Recover) completes the laggards from them.
//
// Not thread-safe: used by its worker thread only (stats are copied out by that thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "quant/quantizer.h"
#include "switchml/status.h"
#include "switchml/types.h"
#include "transport/channel.h"

namespace switchml::client {

struct EngineConfig {
  uint32_t slot_base = 0;          // first switch slot owned by this thread
  uint32_t window = 64;            // W: slots owned = max packets in flight
  uint32_t elements_per_packet = 256;
  uint32_t num_workers = 1;
  transport::Endpoint switch_endpoint;
  std::string switch_name;  // in errors; empty = "switch <switch_endpoint>"
  Duration initial_rto = std::chrono::milliseconds(20);
  Duration min_rto = std::chrono::milliseconds(5);
  Duration max_rto = std::chrono::seconds(1);
  Duration call_timeout = std::chrono::seconds(10);
  bool shadow_copies = true;  // Options::shadow_copies: SliceEngine::shadow is recorded
};

struct SliceSpec {
  uint64_t call_id = 0;      // the call number, for messages; its low 8 bits go on the wire as job_number
  DataType type = DataType::kInt32;
  const void* in = nullptr;  // first element of the slice
  void* out = nullptr;
  size_t num_elements = 0;
  // float32 only, optional: the exponent of every block (ceil(num_elements / elements_per_packet)
  // entries), computed before the call started (ContextImpl::Submit does, in the same pass that
  // rejects Inf/NaN input). Null: Begin computes them (BlockExponents) into its own buffer.
  const int8_t* exponents = nullptr;
  // Send the call descriptor (wire::CallDescriptor) in packet 0 and check it on return. The
  // context sets it for every non-empty slice and for thread 0's slice of every call, so each
  // call is checked on every worker even when it has no elements.
  bool send_descriptor = false;
  uint64_t call_elements = 0;  // elements of the whole call (the descriptor's count)
  // This worker rejects the call (its arguments or input): the slice sends the first round with
  // zero payloads (in/out/exponents are not used and may be null) and the descriptor's rejected
  // flag, and ends in step with `rejection` as its result. Requires send_descriptor.
  bool rejected = false;
  Status rejection{};
};

// How a slice of `num_elements` elements maps onto packets and slots (SliceEngine::Begin): the
// same on every worker for the same call, so recovery can recompute it.
struct SliceLayout {
  uint64_t blocks = 0;       // M: data packets
  uint32_t batch = 0;        // B: slots in use (packet p on slot p mod B)
  uint64_t data_offset = 0;  // packet that carries block 0 (B for float32, else 0 or 1)
  uint64_t total = 0;        // packets in all
  bool float_layout = false; // float32 with data: B exponent packets lead
  static SliceLayout Of(uint64_t num_elements, DataType type, bool send_descriptor, uint32_t window,
                        uint32_t elements_per_packet);
};

// The last round a slot completed (SliceEngine::shadow).
struct SlotShadow {
  bool valid = false;        // some round completed on this slot since the engine was built
  uint64_t call_id = 0;      // SliceSpec::call_id of its slice
  uint32_t packet = 0;       // its packet index in that slice
  int8_t exp0 = 0;           // the result's exponent field (float32: the switch-wide max exponent)
  // The result's wire payload (big-endian, 4 x elements_per_packet bytes) when the packet carries
  // data (packet >= the slice's data_offset); empty otherwise.
  std::span<const uint8_t> payload;
};

struct EngineStats {
  uint64_t packets_sent = 0;
  uint64_t retransmissions = 0;
  uint64_t results_received = 0;
  uint64_t duplicates = 0;
  uint64_t malformed = 0;
  uint64_t timeouts = 0;
  uint64_t clamped = 0;  // float32 values clamped at the quantization boundary
};

// Computes the exponent of every block of `block` elements of x[0..n) into exps
// (ceil(n / block) entries; quant::BlockExponent). Returns INVALID_ARGUMENT naming the first
// element that is Inf or NaN (or too large to quantize) by its index plus index_base, or OK.
// The one place block exponents are taken: at submission (ContextImpl::Submit), when a slice
// starts (Worker, for input written by an earlier call), or by SliceEngine::Begin for a spec
// without them.
Status BlockExponents(const float* x, size_t n, uint32_t block, int8_t* exps, size_t index_base);

class SliceEngine {
 public:
  explicit SliceEngine(const EngineConfig& config);

  // Starts a slice (requires !active()). Queues the first batch. A slice of 0 elements
  // finishes at once.
  void Begin(const SliceSpec& slice, TimePoint now);
  bool active() const { return active_; }
  // Result of the last slice, valid when !active().
  const Status& result() const { return result_; }
  // Valid when !active(): the slice ended with every worker's slot state in agreement (it
  // completed, or it was rejected and its first round came back). A slice that failed in any
  // other way (timeout, mismatch, abort) leaves the slot state unknown.
  bool ended_in_step() const { return in_step_; }
  // Fails the running slice with `why` (e.g. CANCELLED at shutdown).
  void Abort(Status why);

  // Copies up to out.size() datagrams that must be sent now (first batch, refills,
  // retransmissions), in order, without removing them; then ConfirmSent(k) removes the first
  // k (those the transport accepted) and arms their timers. The bytes stay valid until the
  // next call of any other method.
  size_t PeekSends(std::span<transport::TxDatagram> out) const;
  void ConfirmSent(size_t count, TimePoint now);
  size_t pending_sends() const { return queue_size_; }

  // A datagram that arrived from the switch.
  void OnDatagram(std::span<const uint8_t> bytes, TimePoint now);
  // Fires due retransmission timers and the call timeout.
  void OnTick(TimePoint now);
  // When OnTick next has something to do (TimePoint::max() when idle).
  TimePoint NextDeadline() const;

  const EngineStats& stats() const { return stats_; }
  Duration current_rto() const { return rto_; }
  // The set the next new packet on slot `slot_base + i` will use (tests).
  uint8_t next_set(uint32_t i) const { return slots_[i].next_set; }
  const EngineConfig& config() const { return config_; }

  // For recovery, valid when !active(): the shadow copy of slot `slot_base + i` (i < window);
  // the payload stays valid until the next Begin.
  SlotShadow shadow(uint32_t i) const;
  // Whether a slice was ever begun, and the call number of the last one (its result() and
  // ended_in_step() say how it ended).
  bool begun() const { return begun_; }
  uint64_t last_call_id() const { return slice_.call_id; }

 private:
  static constexpr uint32_t kIdle = UINT32_MAX;
  struct Slot {
    uint32_t packet = kIdle;   // packet id in flight, or kIdle
    uint32_t size = 0;         // datagram bytes
    uint8_t set = 0;           // set of the packet in flight
    uint8_t next_set = 0;      // persists across slices
    bool queued = false;       // in the send queue
    bool retransmitting = false;  // queued because its timer fired
    bool resent = false;       // sent more than once: no RTT sample (Karn)
    bool sent_once = false;    // sent_at is valid
    bool held = false;         // result accepted before the verdict; processed once it is known
    int8_t held_exp0 = 0;      // that result's exponent field
    // Shadow copy of the last completed round (its payload: shadow_ at i).
    bool shadow_valid = false;
    bool shadow_has_payload = false;
    int8_t shadow_exp0 = 0;
    uint32_t shadow_packet = 0;
    uint64_t shadow_call = 0;
    quant::Scale scale;        // float32: scale of the block this slot carries next
    int8_t max_exp = 0;        // float32: the switch-wide exponent behind `scale`
    Duration rto{};
    TimePoint sent_at{};
    TimePoint deadline = TimePoint::max();
  };

  void BuildPacket(uint32_t p, TimePoint now);
  // Processes the accepted result of the packet on slot i (payload: its elements): writes the
  // output, keeps the float32 scale, queues the slot's next packet, finishes the slice when it
  // was the last.
  void Complete(uint32_t i, const uint8_t* payload, int8_t exp0, TimePoint now);
  // Packet 0's result came back: checks the descriptor and releases or drops the held results.
  void OnVerdict(uint32_t i, const uint8_t* payload, int8_t exp0, TimePoint now);
  void Queue(uint32_t slot_index);
  void Finish(Status s);
  void SampleRtt(Duration rtt);
  uint8_t* Buffer(uint32_t i) { return buffers_.data() + size_t{i} * buffer_stride_; }
  const uint8_t* Buffer(uint32_t i) const { return buffers_.data() + size_t{i} * buffer_stride_; }
  uint8_t* HeldPayload(uint32_t i) { return held_.data() + size_t{i} * 4 * config_.elements_per_packet; }
  uint8_t* ShadowPayload(uint32_t i) { return shadow_.data() + size_t{i} * 4 * config_.elements_per_packet; }
  uint32_t BlockLength(uint64_t block) const;

  EngineConfig config_;
  std::vector<Slot> slots_;
  std::vector<uint8_t> buffers_;
  std::vector<uint8_t> held_;  // int32 payloads of first-round results held until the verdict
  std::vector<uint8_t> shadow_;  // per slot: the payload of the last completed data packet
  size_t buffer_stride_ = 0;
  uint8_t size_code_ = 0;
  std::vector<uint32_t> queue_;  // ring of slot indices, capacity W
  size_t queue_head_ = 0;
  size_t queue_size_ = 0;

  // Current slice.
  bool begun_ = false;
  bool active_ = false;
  Status result_;
  SliceSpec slice_;
  std::vector<int8_t> own_exponents_;  // exponents Begin computed for a spec without them
  uint8_t job_number_ = 0;
  uint64_t blocks_ = 0;      // M: data packets
  uint32_t batch_ = 0;       // B: slots in use
  uint64_t data_offset_ = 0; // packet that carries block 0 (B for float32, else 0 or 1)
  bool float_layout_ = false;  // float32 with data: exponent packets lead
  uint64_t total_ = 0;       // packets including the float32 exponent batch and descriptor
  uint64_t completed_ = 0;
  bool in_step_ = true;          // see ended_in_step()
  bool verdict_pending_ = false; // packet 0's descriptor result has not come back yet
  uint32_t rejected_by_ = 0;     // workers that rejected this call (from the verdict)
  uint32_t first_round_left_ = 0;  // first-round results not yet back
  TimePoint last_progress_{};
  TimePoint next_timer_ = TimePoint::max();

  // RTT estimator (persists across slices).
  bool have_rtt_ = false;
  Duration srtt_{};
  Duration rttvar_{};
  Duration rto_{};

  EngineStats stats_;
};

}  // namespace switchml::client
