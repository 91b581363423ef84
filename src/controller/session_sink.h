// controller/session_sink.h — what the session service asks of a switch.
//
// The gRPC Session service (session_service.h) turns UdpSession requests into calls on a
// SessionSink; the software switch (dataplane/switch_server.h) implements it. Keeping this
// interface free of gRPC types lets the switch be tested without a server.
#pragma once

#include <cstdint>
#include <vector>

#include "switchml/status.h"

namespace switchml::controller {

struct WorkerRegistration {
  uint64_t session_id = 0;
  uint32_t rank = 0;
  uint32_t num_workers = 0;
  uint64_t mac = 0;    // informative on the software switch
  uint32_t ipv4 = 0;   // host order, a.b.c.d = a<<24 | ...
  // Our extension: the worker's UDP source port for each of its worker threads. Thread t of
  // every worker uses slot range t, so results for a packet from thread t go to each worker's
  // port[t]. Empty = reference behaviour: replies go to the port the triggering packet came
  // from, which requires every worker to use the same ports.
  std::vector<uint16_t> udp_ports;

  // Our extension: parameters every worker of a session or job must share (besides
  // num_workers); 0 = not sent (e.g. an unmodified reference client). The first registration
  // of a session (rank 0's) or job fixes them together with num_workers; a later registration
  // with any other value, 0 included, is refused with FailedPrecondition naming the field,
  // both values and both ranks, so workers that disagree (or reference clients mixed with
  // ours) fail at registration instead of producing wrong sums or a bare timeout.
  uint32_t protocol_version = 0;     // kClientProtocolVersion for this library's client
  uint32_t num_worker_threads = 0;
  uint32_t window_packets = 0;       // the worker's whole window (all its threads)
  uint32_t elements_per_packet = 0;
};

// The data-path protocol of this library's client, registered as
// WorkerRegistration::protocol_version: 1 = per-call descriptor packets. 0 = not sent.
inline constexpr uint32_t kClientProtocolVersion = 1;

struct SwitchInfo {
  uint64_t mac = 0;
  uint32_t ipv4 = 0;          // host order
  uint16_t udp_port = 48864;  // where workers send data
  uint32_t num_slots = 0;     // slots per set available to a job
  uint32_t max_workers = 0;
};

class SessionSink {
 public:
  virtual ~SessionSink() = default;
  // Called for every UdpSession request. Rank 0 starts a new session (the reference clears all
  // worker state here). Errors: InvalidArgument (rank/num_workers out of range, bad ports),
  // FailedPrecondition (num_workers or another agreed parameter of WorkerRegistration differs
  // from the session's).
  virtual Status RegisterWorker(const WorkerRegistration& reg) = 0;
  virtual SwitchInfo Info() const = 0;
};

}  // namespace switchml::controller
