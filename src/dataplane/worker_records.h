// dataplane/worker_records.h — the worker records and registration checks every job shares,
// the reference session (job 0) included.
//
// The switch has one table of jobs (job_table.h); the reference `UdpSession` session is its
// job 0. What the one registration rule (JobTable::Register / Admit, for job 0 and service
// jobs alike) uses to describe and check a worker lives here:
//  * WorkerEntry — a registered worker's address. Two ways a worker is identified
//    (WorkerRegistration::udp_ports):
//     - port mode (our extension): the worker lists one UDP source port per worker thread; a
//       datagram from (ipv4, udp_ports[t]) is rank r, thread t. Several workers may share a
//       host. Every service job's workers register this way.
//     - reference mode (empty list, job 0 only): any datagram from the worker's IPv4 is rank
//       r, thread unknown (kNoThread); replies go to the source port of the triggering packet
//       (docs/protocol.md#switch-state-machine). Such a worker claims its whole IPv4 address.
//  * AgreedParams / CheckAgreedParams — the parameters every worker of a session or job must
//    share, and the check that refuses a registration that disagrees.
//
// Plain values and pure functions; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "control/switch_control.h"
#include "switchml/status.h"

namespace switchml::dataplane {

// The names of the control contract (control::contract) the switch uses throughout.
using namespace control::contract;

// A thread index that is not known: the sender registered no ports (reference mode).
inline constexpr uint16_t kNoThread = 0xFFFF;
// Most udp_ports one worker may register.
inline constexpr size_t kMaxPortsPerWorker = 64;

// One rank of a job (or of the reference session).
struct WorkerEntry {
  bool registered = false;
  uint32_t ipv4 = 0;  // host order
  uint64_t mac = 0;   // as registered; `switch --neighbour-entries` makes neighbour entries of it
  std::vector<uint16_t> udp_ports;  // empty = reference mode
};

// The registration fields every worker of a session or job must share (num_workers and the
// agreed parameters of WorkerRegistration), as one registration gave them.
struct AgreedParams {
  uint32_t rank = 0;  // who registered them
  uint32_t protocol_version = 0;
  uint32_t num_workers = 0;
  uint32_t num_worker_threads = 0;
  uint32_t window_packets = 0;
  uint32_t elements_per_packet = 0;

  static AgreedParams Of(const WorkerRegistration& reg);
};

// OK if `reg` carries exactly the values of `first` (the registration that fixed them; 0 is a
// value like any other). Otherwise FailedPrecondition naming every field that differs, both
// values and both ranks, e.g. "rank 1 registered num_worker_threads=2, but rank 0 registered
// num_worker_threads=1 for job 3; every worker of a job must use the same value". `scope`
// names the session or job ("job 3"), `kind` what every worker belongs to ("job").
Status CheckAgreedParams(const AgreedParams& first, const AgreedParams& reg,
                         const std::string& scope, const std::string& kind);

// InvalidArgument naming the entry if `ports` has more than kMaxPortsPerWorker entries, a 0
// or a repeated port (allowed with `may_repeat`: a leaf switch registered at its parent,
// control::LeafRegistration). An empty list is valid here (the callers decide whether it is
// allowed).
Status ValidateUdpPorts(const std::vector<uint16_t>& ports, bool may_repeat = false);

// "10.0.0.1" for a host-order IPv4 address.
std::string FormatIpv4(uint32_t ipv4);

}  // namespace switchml::dataplane
