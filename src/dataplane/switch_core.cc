#include "dataplane/switch_core.h"

#include <algorithm>
#include <utility>

#include "wire/packet.h"
#include "wire/payload.h"

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
  SWITCHML_ASSIGN_OR_RETURN(
      std::shared_ptr<const JobTable> jobs,
      JobTable::CreateEmpty(config.num_slots, config.max_workers, config.max_elements_per_packet,
                            AggregatorOptions{.late_duplicate_guard = config.late_duplicate_guard},
                            config.io_threads));
  return SwitchCore(config, std::move(jobs));
}

StatusOr<SwitchCore> SwitchCore::CreateForIoThread(const SwitchConfig& config,
                                                   std::shared_ptr<const JobTable> jobs,
                                                   uint32_t io_thread) {
  SWITCHML_RETURN_IF_ERROR(config.Validate());
  if (jobs == nullptr) return InvalidArgumentError("jobs must not be null");
  if (io_thread >= config.io_threads || io_thread >= jobs->io_threads()) {
    return InvalidArgumentError("io_thread must be < io_threads (" +
                                std::to_string(config.io_threads) + "), got " +
                                std::to_string(io_thread));
  }
  return SwitchCore(config, std::move(jobs), io_thread);
}

namespace {
// Thread 0 keeps the configured seed (one I/O thread behaves as before); thread i > 0 gets
// its own stream.
uint64_t ThreadSeed(uint64_t seed, uint32_t io_thread) {
  return seed + uint64_t{io_thread} * 0x9E3779B97F4A7C15ull;
}
}  // namespace

SwitchCore::SwitchCore(const SwitchConfig& config, std::shared_ptr<const JobTable> jobs,
                       uint32_t io_thread)
    : config_(config),
      jobs_(std::move(jobs)),
      // Independent streams, so enabling one knob does not change the other's decisions.
      ingress_drop_(config.ingress_drop_probability, ThreadSeed(config.drop_seed, io_thread)),
      egress_drop_(config.egress_drop_probability,
                   ThreadSeed(config.drop_seed, io_thread) ^ 0x5DEECE66DA3B9F4Full),
      // Responses start on a 64-byte boundary in the slab (cache-line aligned encode).
      response_stride_((wire::PacketBytes(config.max_elements_per_packet) + 63) & ~size_t{63}),
      io_thread_(io_thread) {}

Status SwitchCore::RegisterWorker(const WorkerRegistration& reg) {
  SWITCHML_ASSIGN_OR_RETURN(std::shared_ptr<const JobTable> next,
                            JobTable::RegisterSessionWorker(*jobs_, reg));
  AdoptJobs(std::move(next));
  return OkStatus();
}

std::shared_ptr<const JobTable> SwitchCore::AdoptJobs(std::shared_ptr<const JobTable> jobs) {
  std::swap(jobs_, jobs);
  return jobs;
}

void SwitchCore::ProcessBurst(std::span<const transport::RxDatagram> in, Outbox& out) {
  out.Clear();
  const JobTable& jobs = *jobs_;
  // Worst case every datagram completes a round and fans out to every worker of its job.
  const uint32_t fan_out = std::max<uint32_t>(jobs.max_job_workers(), 1);
  out.Reserve(in.size(), response_stride_, in.size() * size_t{fan_out});
  SwitchCounters& c = counters_;

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
    // One path for every job, job 0 (the reference session) included.
    JobTable::Sender sender;
    if (!jobs.Find(d.from, &sender)) {
      ++c.unknown_sender;
      continue;
    }
    const JobTable::Job& job = *sender.job;
    if (job.state == JobState::kEnded) {
      ++c.job_ended;
      continue;
    }
    JobRuntime& rt = *job.runtime;
    if (sender.rank == JobTable::kParentRank) {
      ParentTotal(pkt, job, rt, out);
      continue;
    }
    AtomicJobCounters& jc = rt.counters_of(io_thread_);
    Bump(jc.received);
    Bump(rt.rank_received_of(io_thread_)[sender.rank]);
    if (job.state != JobState::kRunning) {
      ++c.job_not_running;
      Bump(jc.not_running);
      continue;
    }
    if (pkt.header.slot >= job.spec.num_slots) {
      ++(c.*job.slot_out_of_range_counter);
      Bump(jc.slot_out_of_range);
      continue;
    }
    if (pkt.num_elements > job.spec.elements_per_packet) {
      ++c.too_large;
      Bump(jc.too_large);
      continue;
    }
    if (!job.OwnsSlot(io_thread_, pkt.header.slot)) {
      // Another I/O thread aggregates this slot: never touch it from here.
      ++c.wrong_io_thread;
      Bump(jc.wrong_io_thread);
      continue;
    }
    Aggregate(d, pkt, job, rt, sender.rank, sender.thread, out);
  }
}

void SwitchCore::Aggregate(const transport::RxDatagram& d, const wire::PacketView& pkt,
                           const JobTable::Job& job, JobRuntime& rt, uint32_t rank,
                           uint16_t thread, Outbox& out) {
  SwitchCounters& c = counters_;
  AtomicJobCounters& jc = rt.counters_of(io_thread_);
  if (ingress_drop_.ShouldDrop()) {
    ++c.sim_ingress_drops;
    return;
  }
  const wire::Header& h = pkt.header;
  const AggregationResult r = rt.aggregator.Process(Contribution{
      .rank = rank,
      .slot = uint32_t(h.slot - job.held.first),  // OwnsSlot: h.slot is in job.held
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
      Bump(jc.consumed);
      return;
    case Outcome::kDropDuplicate:
      ++c.duplicates_dropped;
      Bump(jc.duplicates_dropped);
      return;
    case Outcome::kDropLateDuplicate:
      ++c.late_duplicates_dropped;
      Bump(jc.late_duplicates_dropped);
      return;
    case Outcome::kDropSizeMismatch:
      ++c.size_mismatch;
      Bump(jc.size_mismatch);
      return;
    case Outcome::kDropInvalid:
    case Outcome::kDropStale:  // Complete() only
      ++c.aggregator_invalid;
      return;
    case Outcome::kForwardUp:
      ++c.uplink_sent;
      Bump(jc.uplink_sent);
      break;
    case Outcome::kResendUp:
      ++c.uplink_resent;
      Bump(jc.uplink_resent);
      break;
    case Outcome::kMulticast:
      ++c.multicast_rounds;
      Bump(jc.multicast_rounds);
      break;
    case Outcome::kUnicast:
      ++c.unicast_replies;
      Bump(jc.unicast_replies);
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
  wire::Int32ToBE(r.sums, r.num_elements, resp + wire::kPrefixBytes);
  const uint32_t size = uint32_t(wire::PacketBytes(r.num_elements));

  // A leaf's completed round (or a worker's duplicate of one still held) goes up to the parent.
  if (r.outcome == Outcome::kForwardUp || r.outcome == Outcome::kResendUp) {
    const control::Uplink& up = job.uplink();
    out.Push(resp, size, transport::Endpoint{up.parent_ipv4, up.PortFor(job.layout, h.slot)},
             false);
    ++c.datagrams_sent;
    Bump(jc.datagrams_sent);
    return;
  }
  // Workers in reference mode (registered without ports: reference clients) get one datagram
  // per frame: they may read frames themselves (DPDK af_packet) and never see a GSO run split.
  if (r.outcome == Outcome::kUnicast) {
    out.Push(resp, size, d.from, thread == kNoThread);
    ++c.datagrams_sent;
    Bump(jc.datagrams_sent);
    return;
  }
  // Each worker's port for the sender's thread (a worker thread sends only its own slots), but
  // at a parent whose workers are leaf switches, whose threads may share a port
  // (LeafRegistration), the port for the thread whose slots hold this one (the layout's).
  if (job.leaf_workers && thread != kNoThread && job.agreed.num_worker_threads > 0) {
    const uint32_t slot_thread = job.layout.ThreadOfSlot(h.slot);
    if (slot_thread < job.layout.worker_threads()) thread = uint16_t(slot_thread);
  }
  Multicast(resp, size, job, jc, thread, d.from.port, out);
}

void SwitchCore::Multicast(const uint8_t* resp, uint32_t size, const JobTable::Job& job,
                           AtomicJobCounters& jc, uint16_t thread, uint16_t fallback_port,
                           Outbox& out) {
  uint64_t sent = 0;
  for (const WorkerEntry& w : job.workers) {
    // Every rank contributed to a completed round, so all are registered; guard anyway.
    if (!w.registered) continue;
    const uint16_t port = thread < w.udp_ports.size() ? w.udp_ports[thread] : fallback_port;
    if (port == 0) continue;  // a parent's total for a slot no worker thread uses
    out.Push(resp, size, transport::Endpoint{w.ipv4, port}, w.udp_ports.empty());
    ++sent;
  }
  counters_.datagrams_sent += sent;
  Bump(jc.datagrams_sent, sent);
}

void SwitchCore::ParentTotal(const wire::PacketView& pkt, const JobTable::Job& job,
                             JobRuntime& rt, Outbox& out) {
  SwitchCounters& c = counters_;
  AtomicJobCounters& jc = rt.counters_of(io_thread_);
  Bump(jc.received);
  const wire::Header& h = pkt.header;
  // The parent answers what this leaf sent up: slots of the job, at most its packet size, on
  // the I/O thread that owns the slot (the leaf registered that thread's port for it).
  // Anything else is not a total of ours.
  if (job.state != JobState::kRunning || h.slot >= job.spec.num_slots ||
      pkt.num_elements > job.spec.elements_per_packet || !job.OwnsSlot(io_thread_, h.slot)) {
    ++c.parent_stale;
    Bump(jc.parent_stale);
    return;
  }
  if (ingress_drop_.ShouldDrop()) {
    ++c.sim_ingress_drops;
    return;
  }
  const AggregationResult r = rt.aggregator.Complete(uint32_t(h.slot - job.held.first), h.set,
                                                     h.exp0, h.exp1, pkt.payload, pkt.num_elements);
  if (r.outcome != Outcome::kMulticast) {
    ++c.parent_stale;
    Bump(jc.parent_stale);
    return;
  }
  ++c.multicast_rounds;
  Bump(jc.multicast_rounds);
  if (egress_drop_.ShouldDrop()) {
    ++c.sim_egress_drops;
    return;
  }
  // The parent's response carries the header this leaf sent up (the completing worker's size
  // code, job number, tsi, slot and set) and the global max exponents: forward it as it is.
  uint8_t* resp = out.NextResponse();
  wire::Header rh = h;
  rh.msg_type = wire::kMsgTypeAllReduce;
  wire::EncodePrefix(rh, resp);
  wire::Int32ToBE(r.sums, r.num_elements, resp + wire::kPrefixBytes);
  const uint32_t size = uint32_t(wire::PacketBytes(r.num_elements));
  // Each worker's port for the thread whose slots hold this one (the job's layout).
  const uint32_t t = job.layout.ThreadOfSlot(h.slot);
  Multicast(resp, size, job, jc, uint16_t(std::min<uint32_t>(t, kNoThread - 1)), 0, out);
}

}  // namespace switchml::dataplane
