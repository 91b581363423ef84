// dataplane/switch_counters.h — what the software switch counts (the drop reasons are
// tabled in docs/reliability.md#drop-counters-by-reason).
//
// Every datagram the switch receives ends in exactly one of these buckets: a decode error, an
// unknown sender, a sender of an ended job, a sender of a job still waiting for workers, an
// out-of-range slot (of the reference session or of the sender's job), a too-large packet, a
// packet at an I/O thread that does not own its slot, a size mismatch, a simulated ingress drop, a consumed contribution, a dropped duplicate, or a
// response (multicast round or unicast reply). So:
//   datagrams_received == rx_truncated + sum(decode_*) + unknown_sender + job_ended
//                         + job_not_running + slot_out_of_range + job_slot_out_of_range
//                         + too_large + wrong_io_thread + size_mismatch + aggregator_invalid
//                         + sim_ingress_drops
//                         + consumed + duplicates_dropped + late_duplicates_dropped
//                         + multicast_rounds + unicast_replies
//                         + uplink_sent + uplink_resent + parent_stale
// (the per-job part of these is also counted per job, JobCounters). At a leaf of a two-level
// job a worker's packet that completes a round counts as uplink_sent (the round goes up to the
// parent) and the parent's total that finishes it as multicast_rounds.
//
//   std::cout << counters.FormatTable();
//   for (auto& [name, value] : counters.Named()) json[name] = value;
//
// Plain value type; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wire/packet.h"

namespace switchml::dataplane {

struct SwitchCounters {
  uint64_t datagrams_received = 0;
  uint64_t rx_truncated = 0;  // longer than the receive buffer
  // Indexed by wire::DecodeError; [kOk] stays 0.
  std::array<uint64_t, wire::kNumDecodeErrors> decode_errors{};
  uint64_t unknown_sender = 0;      // source address registered neither in a job nor in the
                                    // reference session
  uint64_t job_ended = 0;           // sender was a worker of a job that has ended (deleted or
                                    // timed out) and whose address nobody reused
  uint64_t job_not_running = 0;     // sender's job is still waiting for some ranks to register
  uint64_t job_slot_out_of_range = 0;  // slot >= the sender's job's num_slots
  uint64_t slot_out_of_range = 0;   // slot >= num_slots
  uint64_t too_large = 0;           // more elements than max_elements_per_packet
  uint64_t size_mismatch = 0;       // element count differs from the round's
  uint64_t aggregator_invalid = 0;  // aggregator precondition failed (a bug if ever non-zero)
  uint64_t sim_ingress_drops = 0;   // requests dropped by the drop simulator
  uint64_t sim_egress_drops = 0;    // triggering packets whose responses were all dropped
  uint64_t consumed = 0;            // new contributions, round not complete
  uint64_t multicast_rounds = 0;    // completed rounds (responses counted even if egress-dropped)
  uint64_t unicast_replies = 0;     // duplicates of completed rounds answered to the sender
  uint64_t duplicates_dropped = 0;  // duplicates while the round was incomplete
  uint64_t late_duplicates_dropped = 0;  // late duplicates caught by the guard (off by default)
  uint64_t wrong_io_thread = 0;     // reached an I/O thread that does not own the packet's slot
                                    // for the sender's job (switch_core.h, step 7)
  uint64_t datagrams_sent = 0;      // response datagrams handed to the transport
  // A leaf of a two-level job (control::Uplink):
  uint64_t uplink_sent = 0;    // rounds completed here and sent up to the parent
  uint64_t uplink_resent = 0;  // a worker's duplicate of a round waiting for the parent's
                               // total: the partial sums sent up again
  uint64_t parent_stale = 0;   // datagrams from the parent no held round waited for (a
                               // repeated or late total; or a size mismatch)

  // Calls f(name, value_ref) for every counter, in a fixed order. Names are snake_case and
  // stable (they appear in JSON output and tests). Works on const and non-const counters.
  template <typename Self, typename F>
  static void Visit(Self& c, F&& f) {
    f("datagrams_received", c.datagrams_received);
    f("rx_truncated", c.rx_truncated);
    f("decode_truncated", c.decode_errors[size_t(wire::DecodeError::kTruncated)]);
    f("decode_unknown_msg_type", c.decode_errors[size_t(wire::DecodeError::kUnknownMsgType)]);
    f("decode_unsupported_size_code",
      c.decode_errors[size_t(wire::DecodeError::kUnsupportedSizeCode)]);
    f("decode_length_mismatch", c.decode_errors[size_t(wire::DecodeError::kLengthMismatch)]);
    f("unknown_sender", c.unknown_sender);
    f("job_ended", c.job_ended);
    f("job_not_running", c.job_not_running);
    f("job_slot_out_of_range", c.job_slot_out_of_range);
    f("slot_out_of_range", c.slot_out_of_range);
    f("too_large", c.too_large);
    f("size_mismatch", c.size_mismatch);
    f("aggregator_invalid", c.aggregator_invalid);
    f("sim_ingress_drops", c.sim_ingress_drops);
    f("sim_egress_drops", c.sim_egress_drops);
    f("consumed", c.consumed);
    f("multicast_rounds", c.multicast_rounds);
    f("unicast_replies", c.unicast_replies);
    f("duplicates_dropped", c.duplicates_dropped);
    f("late_duplicates_dropped", c.late_duplicates_dropped);
    f("wrong_io_thread", c.wrong_io_thread);
    f("datagrams_sent", c.datagrams_sent);
    f("uplink_sent", c.uplink_sent);
    f("uplink_resent", c.uplink_resent);
    f("parent_stale", c.parent_stale);
  }
  static constexpr size_t kNumCounters = 26;

  uint64_t decode_error(wire::DecodeError e) const { return decode_errors[size_t(e)]; }

  // (name, value) pairs in Visit order, e.g. for JSON.
  std::vector<std::pair<std::string, uint64_t>> Named() const;
  // Two aligned columns, one counter per line.
  std::string FormatTable() const;
};

// Whether the counter `name` counts datagrams or frames the switch dropped: a reason above
// (decode_*, unknown_sender, ..., duplicates, the drop simulator's), a server's send_dropped,
// or a transport's drops (Channel::TransportCounters: raw_ring_drops, raw_refused_checksum,
// raw_not_for_us, raw_truncated, raw_send_no_mac, raw_frames_<malformed verdict>,
// udp_socket_drops). One list for `switchml jobs list` and `switchml switch --stats-interval`.
bool IsDropCounter(std::string_view name);

// Formats (name, value) pairs as two aligned columns, one per line.
std::string FormatCounterTable(const std::vector<std::pair<std::string, uint64_t>>& rows);

}  // namespace switchml::dataplane
