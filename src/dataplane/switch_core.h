// dataplane/switch_core.h — the software switch's whole per-datagram path, without I/O.
//
// SwitchCore turns a burst of received datagrams into a burst of datagrams to send. Per
// datagram, in this order (each rejection is counted, see switch_counters.h), the same for
// every job, the reference session (job 0) included:
//   1. wire::Decode                                   (decode_<reason>)
//   2. source address → (job, rank, thread) in the job table     (unknown_sender)
//   3. the job has not ended                          (job_ended)
//   4. the job is running (every rank registered; job 0 always)   (job_not_running)
//   5. slot < the job's num_slots                     (slot_out_of_range for job 0,
//                                                      job_slot_out_of_range for the others)
//   6. elements <= the job's elements_per_packet      (too_large)
//   7. this core's I/O thread owns the slot for the job (Job::OwnsSlot; always true with
//      one I/O thread)                                (wrong_io_thread)
//   8. ingress drop simulator, before any state change (sim_ingress_drops)
//   9. the job's Aggregator::Process (docs/protocol.md#switch-state-machine)
//                                                     (consumed / duplicates_dropped /
//                                                      size_mismatch / multicast / unicast)
//  10. egress drop simulator: one decision per packet that produced responses; drops all of
//      them (sim_egress_drops)
//  11. the response: msg type 1; size code, job number and tsi of the triggering packet; the
//      same (slot, set); the round's max exponents; its sums big-endian. A multicast is encoded
//      once and sent to every worker of the job; a unicast goes back to the sender's address.
// A leaf of a two-level job (JobTable::Job::uplink, docs/scaling.md "Two-level aggregation"):
// in step 11 a completed round goes up to the parent instead (the same encoding, the leaf's
// partial sums and max exponents; uplink_sent), and so does a worker's duplicate while the
// parent's total is outstanding (uplink_resent: the workers' retransmission timers drive the
// leaf's); a datagram from the parent's endpoint (after step 2) is the total of a held round:
// checked (slot, size, the I/O thread that owns the slot; else parent_stale), through the
// ingress drop simulator,
// stored by Aggregator::Complete and multicast to the workers (multicast_rounds), through the
// egress drop simulator.
// The per-job counters (JobRuntime, this I/O thread's share) are bumped alongside the
// switch-wide ones from step 3 on.
// Several I/O threads (switch_server.h): one SwitchCore per thread (CreateForIoThread), all
// adopting the same tables; step 7 keeps each core on the slots its thread owns, so the
// cores share the job's Aggregator without ever writing the same slot.
// Multicast addressing (docs/protocol.md#switch-state-machine): to each worker's IPv4 and its
// registered UDP port for the sender's thread index; a worker that registered no ports
// (reference mode), or too few, gets the source port of the triggering packet, as the
// reference switch does.
//
// Usage (the I/O edge, switch_server.h, does exactly this):
//   SWITCHML_ASSIGN_OR_RETURN(SwitchCore core, SwitchCore::Create(config));
//   SWITCHML_RETURN_IF_ERROR(core.RegisterWorker(reg0));  ...   // job 0, or AdoptJobs(table)
//   Outbox out;
//   core.ProcessBurst(received, out);
//   channel.SendBurst(out.datagrams());     // pointers into `out`, valid until its next use
//
// Thread-compatible: one thread at a time. Pure: no sockets, threads, clocks or logging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dataplane/aggregator.h"
#include "dataplane/drop_simulator.h"
#include "dataplane/job_table.h"
#include "dataplane/switch_config.h"
#include "control/switch_control.h"
#include "dataplane/switch_counters.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::dataplane {

// The datagrams produced by one ProcessBurst: TxDatagrams pointing into a response slab owned
// by the Outbox. The slab and the datagram array grow to the largest burst seen and are then
// reused, so steady state allocates nothing. Move-only; contents are valid until the next
// ProcessBurst or Clear() on this Outbox.
class Outbox {
 public:
  Outbox() = default;
  Outbox(Outbox&&) noexcept = default;
  Outbox& operator=(Outbox&&) noexcept = default;

  std::span<const transport::TxDatagram> datagrams() const { return {tx_.data(), num_tx_}; }
  size_t size() const { return num_tx_; }
  bool empty() const { return num_tx_ == 0; }
  void Clear() {
    num_tx_ = 0;
    num_responses_ = 0;
  }

 private:
  friend class SwitchCore;
  // Room for `responses` encoded responses of up to `stride` bytes and `datagrams` entries.
  void Reserve(size_t responses, size_t stride, size_t datagrams);
  uint8_t* NextResponse() { return bytes_.get() + stride_ * num_responses_++; }
  void Push(const uint8_t* data, uint32_t size, transport::Endpoint to, bool single_frame) {
    tx_[num_tx_++] = transport::TxDatagram{data, size, to, single_frame};
  }

  std::unique_ptr<uint8_t[]> bytes_;
  size_t stride_ = 0;
  size_t response_capacity_ = 0;
  size_t num_responses_ = 0;
  std::vector<transport::TxDatagram> tx_;
  size_t num_tx_ = 0;
};

class SwitchCore {
 public:
  // Errors: InvalidArgument from config.Validate(), ResourceExhausted for the sum memory.
  static StatusOr<SwitchCore> Create(const SwitchConfig& config);
  // The core of I/O thread `io_thread` (< config.io_threads) of a switch whose job table is
  // `jobs` (the one Create made for I/O thread 0, or a later one): its own counters and drop
  // simulators (thread 0's seeds are Create's; others are derived from the thread index).
  // Errors: InvalidArgument (config, io_thread, null jobs).
  static StatusOr<SwitchCore> CreateForIoThread(const SwitchConfig& config,
                                                std::shared_ptr<const JobTable> jobs,
                                                uint32_t io_thread);

  SwitchCore(SwitchCore&&) noexcept = default;
  SwitchCore& operator=(SwitchCore&&) noexcept = default;

  // Applies a reference `UdpSession` registration to job 0
  // (JobTable::RegisterSessionWorker) and adopts the result: rank 0 starts a new session with
  // zeroed aggregation state. Errors as JobTable::RegisterSessionWorker.
  Status RegisterWorker(const WorkerRegistration& reg);

  // Switches to the job table `jobs` (built with JobTable's functions from jobs(), possibly on
  // another thread) and returns the previous one, so that the caller chooses the thread that
  // releases it (SwitchServer hands it to its control thread). Jobs keep their aggregation
  // state across tables (it lives in their JobRuntime; a new session of job 0 comes with a
  // new runtime); a job absent from `jobs` is no longer reachable. Nothing is cleared or
  // allocated here. Must be non-null, from this switch's configuration.
  std::shared_ptr<const JobTable> AdoptJobs(std::shared_ptr<const JobTable> jobs);

  // Processes `in` in order and replaces the contents of `out` with the datagrams to send.
  // Never fails: bad datagrams are counted and dropped. Allocates only when `out` must grow.
  //
  // Batching: the job table pointer and the outbox capacity are loaded once per burst, so the
  // per-datagram work is decode + one hash probe + the element-wise add; a multicast's bytes are encoded once and shared by all its copies, so
  // fan-out costs one 24-byte TxDatagram per worker, not one 4 KiB copy.
  void ProcessBurst(std::span<const transport::RxDatagram> in, Outbox& out);

  const SwitchConfig& config() const { return config_; }
  uint32_t io_thread() const { return io_thread_; }
  const SwitchCounters& counters() const { return counters_; }
  const JobTable& jobs() const { return *jobs_; }
  const std::shared_ptr<const JobTable>& jobs_ptr() const { return jobs_; }
  // Job 0's aggregation state (the reference session's).
  const Aggregator& aggregator() const { return jobs_->reference().runtime->aggregator; }

 private:
  SwitchCore(const SwitchConfig& config, std::shared_ptr<const JobTable> jobs,
             uint32_t io_thread = 0);
  // Steps 7-10 for an accepted packet of `job`.
  void Aggregate(const transport::RxDatagram& d, const wire::PacketView& pkt,
                 const JobTable::Job& job, JobRuntime& rt, uint32_t rank, uint16_t thread,
                 Outbox& out);
  // A datagram from a leaf job's parent switch: its total for a held round (Aggregator::
  // Complete), multicast to the job's workers; anything else counts as parent_stale.
  void ParentTotal(const wire::PacketView& pkt, const JobTable::Job& job, JobRuntime& rt,
                   Outbox& out);
  // Pushes the encoded response `resp` to every registered worker of `job`: to its port for
  // worker thread `thread`, or to `fallback_port` for a worker without that port.
  void Multicast(const uint8_t* resp, uint32_t size, const JobTable::Job& job,
                 AtomicJobCounters& jc, uint16_t thread, uint16_t fallback_port, Outbox& out);

  SwitchConfig config_;
  std::shared_ptr<const JobTable> jobs_;
  DropSimulator ingress_drop_;
  DropSimulator egress_drop_;
  SwitchCounters counters_;
  size_t response_stride_ = 0;
  uint32_t io_thread_ = 0;
};

}  // namespace switchml::dataplane
