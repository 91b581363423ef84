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
};

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
  // FailedPrecondition (num_workers differs from the session's).
  virtual Status RegisterWorker(const WorkerRegistration& reg) = 0;
  virtual SwitchInfo Info() const = 0;
};

}  // namespace switchml::controller
