#include "dataplane/switch_core.h"

#include <utility>

#include "quant/quantizer.h"
#include "wire/packet.h"

namespace switchml::dataplane {

void Outbox::Reserve(size_t responses, size_t stride, size_t datagrams) {
  if (responses > response_capacity_ || stride != stride_) {
    bytes_ = std::make_unique_for_overwrite<uint8_t[]>(responses * stride);
    response_capacity_ = responses;
    stride_ = stride;
  }
  if (tx_.size() < datagrams) tx_.resize(datagrams);
}

StatusOr<SwitchCore> SwitchCore::Create(const SwitchConfig& config) {
  SWITCHML_RETURN_IF_ERROR(config.Validate());
  SWITCHML_ASSIGN_OR_RETURN(Aggregator aggregator,
                            Aggregator::Create(config.num_slots, config.max_elements_per_packet));
  return SwitchCore(config, std::move(aggregator));
}

SwitchCore::SwitchCore(const SwitchConfig& config, Aggregator aggregator)
    : config_(config),
      aggregator_(std::move(aggregator)),
      session_(std::make_shared<const SessionTable>()),
      // Independent streams, so enabling one knob does not change the other's decisions.
      ingress_drop_(config.ingress_drop_probability, config.drop_seed),
      egress_drop_(config.egress_drop_probability, config.drop_seed ^ 0x5DEECE66DA3B9F4Full),
      // Responses start on a 64-byte boundary in the slab (cache-line aligned encode).
      response_stride_((wire::PacketBytes(config.max_elements_per_packet) + 63) & ~size_t{63}) {}

Status SwitchCore::RegisterWorker(const controller::WorkerRegistration& reg) {
  SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const SessionTable> next,
                            SessionTable::Apply(*session_, reg, config_.max_workers));
  AdoptSession(std::move(next));
  return OkStatus();
}

void SwitchCore::AdoptSession(std::shared_ptr<const SessionTable> table) {
  if (table->epoch() != session_->epoch() && table->num_workers() > 0) {
    // A new session: contract C7, the state is zero when a session starts. Cannot fail:
    // num_workers was validated against max_workers <= 256 by SessionTable::Apply.
    (void)aggregator_.Reset(table->num_workers());
  }
  session_ = std::move(table);
}

void SwitchCore::ProcessBurst(std::span<const transport::RxDatagram> in, Outbox& out) {
  out.Clear();
  const SessionTable& table = *session_;
  const uint32_t num_workers = table.num_workers();
  // Worst case every datagram completes a round and fans out to every worker.
  out.Reserve(in.size(), response_stride_, in.size() * size_t{std::max<uint32_t>(num_workers, 1)});
  SwitchCounters& c = counters_;
  const uint32_t num_slots = config_.num_slots;
  const uint32_t max_elements = config_.max_elements_per_packet;

  for (const transport::RxDatagram& d : in) {
    ++c.datagrams_received;
    if (d.truncated) {
      ++c.rx_truncated;
      continue;
    }
    wire::PacketView pkt;
    const wire::DecodeError err = wire::Decode({d.data, d.size}, &pkt);
    if (err != wire::DecodeError::kOk) {
      ++c.decode_errors[size_t(err)];
      continue;
    }
    SessionTable::Sender sender;
    if (!table.Find(d.from, &sender)) {
      ++c.unknown_sender;
      continue;
    }
    const wire::Header& h = pkt.header;
    if (h.slot >= num_slots) {
      ++c.slot_out_of_range;
      continue;
    }
    if (pkt.num_elements > max_elements) {
      ++c.too_large;
      continue;
    }
    if (ingress_drop_.ShouldDrop()) {
      ++c.sim_ingress_drops;
      continue;
    }
    const AggregationResult r = aggregator_.Process(Contribution{
        .rank = sender.rank,
        .slot = h.slot,
        .set = h.set,
        .exp0 = h.exp0,
        .exp1 = h.exp1,
        .payload_be = pkt.payload,
        .num_elements = pkt.num_elements,
    });
    switch (r.outcome) {
      case Outcome::kConsume: ++c.consumed; continue;
      case Outcome::kDropDuplicate: ++c.duplicates_dropped; continue;
      case Outcome::kDropSizeMismatch: ++c.size_mismatch; continue;
      case Outcome::kDropInvalid: ++c.aggregator_invalid; continue;
      case Outcome::kMulticast: ++c.multicast_rounds; break;
      case Outcome::kUnicast: ++c.unicast_replies; break;
    }
    if (egress_drop_.ShouldDrop()) {
      ++c.sim_egress_drops;
      continue;
    }

    // Encode the response once.
    uint8_t* resp = out.NextResponse();
    wire::Header rh = h;  // size code, job number, tsi, slot and set of the triggering packet
    rh.msg_type = wire::kMsgTypeAllReduce;
    rh.exp0 = r.exp0;
    rh.exp1 = r.exp1;
    wire::EncodePrefix(rh, resp);
    quant::Int32ToBE(r.sums, r.num_elements, resp + wire::kPrefixBytes);
    const uint32_t size = uint32_t(wire::PacketBytes(r.num_elements));

    if (r.outcome == Outcome::kUnicast) {
      out.Push(resp, size, d.from);
      ++c.datagrams_sent;
      continue;
    }
    for (uint32_t rank = 0; rank < num_workers; ++rank) {
      const SessionTable::Worker& w = table.worker(rank);
      // Every rank contributed to a completed round, so all are registered; guard anyway.
      if (!w.registered) continue;
      const uint16_t port = sender.thread < w.udp_ports.size() ? w.udp_ports[sender.thread]
                                                               : d.from.port;
      out.Push(resp, size, transport::Endpoint{w.ipv4, port});
      ++c.datagrams_sent;
    }
  }
}

}  // namespace switchml::dataplane
