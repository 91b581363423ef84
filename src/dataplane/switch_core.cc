#include "dataplane/switch_core.h"

#include <algorithm>
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
                            Aggregator::Create(config.num_slots, config.max_elements_per_packet,
                                               AggregatorOptions{
                                                   .late_duplicate_guard =
                                                       config.late_duplicate_guard}));
  return SwitchCore(config, std::move(aggregator));
}

SwitchCore::SwitchCore(const SwitchConfig& config, Aggregator aggregator)
    : config_(config),
      aggregator_(std::move(aggregator)),
      session_(std::make_shared<const SessionTable>()),
      jobs_(EmptyJobTable(config)),
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

void SwitchCore::AdoptJobs(std::shared_ptr<const JobTable> jobs) { jobs_ = std::move(jobs); }

std::shared_ptr<const JobTable> SwitchCore::EmptyJobTable(const SwitchConfig& config) {
  return std::make_shared<const JobTable>(
      config.num_slots, config.max_workers, config.max_elements_per_packet,
      AggregatorOptions{.late_duplicate_guard = config.late_duplicate_guard});
}

void SwitchCore::ProcessBurst(std::span<const transport::RxDatagram> in, Outbox& out) {
  out.Clear();
  const SessionTable& table = *session_;
  const JobTable& jobs = *jobs_;
  const bool have_jobs = !jobs.jobs().empty();
  const uint32_t num_workers = table.num_workers();
  const std::span<const SessionTable::Worker> session_workers = table.workers();
  // Worst case every datagram completes a round and fans out to every worker of its job.
  const uint32_t fan_out = std::max<uint32_t>({num_workers, jobs.max_job_workers(), 1});
  out.Reserve(in.size(), response_stride_, in.size() * size_t{fan_out});
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
    const wire::Header& h = pkt.header;
    JobTable::Sender js;
    if (have_jobs && jobs.Find(d.from, &js)) {
      const JobTable::Job& job = *js.job;
      if (job.state == controller::JobState::kEnded) {
        ++c.job_ended;
        continue;
      }
      JobRuntime& rt = *job.runtime;
      Bump(rt.counters.received);
      Bump(rt.rank_received[js.rank]);
      if (job.state != controller::JobState::kRunning) {
        ++c.job_not_running;
        Bump(rt.counters.not_running);
        continue;
      }
      if (h.slot >= job.spec.num_slots) {
        ++c.job_slot_out_of_range;
        Bump(rt.counters.slot_out_of_range);
        continue;
      }
      if (pkt.num_elements > job.spec.elements_per_packet) {
        ++c.too_large;
        Bump(rt.counters.too_large);
        continue;
      }
      Aggregate(d, pkt, rt.aggregator, js.rank, js.thread, job.workers, &rt.counters, out);
      continue;
    }
    SessionTable::Sender sender;
    if (!table.Find(d.from, &sender)) {
      ++c.unknown_sender;
      continue;
    }
    if (h.slot >= num_slots) {
      ++c.slot_out_of_range;
      continue;
    }
    if (pkt.num_elements > max_elements) {
      ++c.too_large;
      continue;
    }
    Aggregate(d, pkt, aggregator_, sender.rank, sender.thread, session_workers,
              static_cast<AtomicJobCounters*>(nullptr), out);
  }
}

template <typename JobCountersPtr>
void SwitchCore::Aggregate(const transport::RxDatagram& d, const wire::PacketView& pkt,
                           Aggregator& agg, uint32_t rank, uint16_t thread,
                           std::span<const SessionTable::Worker> workers, JobCountersPtr job,
                           Outbox& out) {
  SwitchCounters& c = counters_;
  if (ingress_drop_.ShouldDrop()) {
    ++c.sim_ingress_drops;
    return;
  }
  const wire::Header& h = pkt.header;
  const AggregationResult r = agg.Process(Contribution{
      .rank = rank,
      .slot = h.slot,
      .set = h.set,
      .exp0 = h.exp0,
      .exp1 = h.exp1,
      .payload_be = pkt.payload,
      .num_elements = pkt.num_elements,
      .job_number = h.job_number,
      .tsi = h.tsi,
  });
  switch (r.outcome) {
    case Outcome::kConsume:
      ++c.consumed;
      if (job) Bump(job->consumed);
      return;
    case Outcome::kDropDuplicate:
      ++c.duplicates_dropped;
      if (job) Bump(job->duplicates_dropped);
      return;
    case Outcome::kDropLateDuplicate:
      ++c.late_duplicates_dropped;
      if (job) Bump(job->late_duplicates_dropped);
      return;
    case Outcome::kDropSizeMismatch:
      ++c.size_mismatch;
      if (job) Bump(job->size_mismatch);
      return;
    case Outcome::kDropInvalid:
      ++c.aggregator_invalid;
      return;
    case Outcome::kMulticast:
      ++c.multicast_rounds;
      if (job) Bump(job->multicast_rounds);
      break;
    case Outcome::kUnicast:
      ++c.unicast_replies;
      if (job) Bump(job->unicast_replies);
      break;
  }
  if (egress_drop_.ShouldDrop()) {
    ++c.sim_egress_drops;
    return;
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
    if (job) Bump(job->datagrams_sent);
    return;
  }
  uint64_t sent = 0;
  for (const SessionTable::Worker& w : workers) {
    // Every rank contributed to a completed round, so all are registered; guard anyway.
    if (!w.registered) continue;
    const uint16_t port = thread < w.udp_ports.size() ? w.udp_ports[thread] : d.from.port;
    out.Push(resp, size, transport::Endpoint{w.ipv4, port});
    ++sent;
  }
  c.datagrams_sent += sent;
  if (job) Bump(job->datagrams_sent, sent);
}

}  // namespace switchml::dataplane
