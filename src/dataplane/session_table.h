// dataplane/session_table.h — the software switch's worker table for one session (§3.2, §4.3).
//
// Maps a datagram's source address to the sending worker's rank and worker-thread index, and
// gives the addresses a result goes to. A table is an immutable value once built: registration
// builds a new table from the current one (Apply), and the switch's I/O thread adopts it
// between bursts, so the per-packet lookup takes no lock (see switch_server.h).
//
//   auto next = SessionTable::Apply(*current, registration, /*max_workers=*/256);
//   if (!next.ok()) return next.status();   // names the bad field
//   SessionTable::Sender s;
//   if ((*next)->Find(datagram.from, &s)) { ... s.rank, s.thread ... }
//
// Two ways a worker is identified (controller::WorkerRegistration::udp_ports):
//  * port mode (our extension): the worker lists one UDP source port per worker thread; a
//    datagram from (ipv4, udp_ports[t]) is rank r, thread t. Several workers may share a host.
//  * reference mode (empty list): any datagram from the worker's IPv4 is rank r, thread
//    unknown (kNoThread); replies go to the source port of the triggering packet (§3.5). Such a
//    worker claims its whole IPv4 address.
//
// Thread-safety: immutable after Apply returns, so any number of threads may read it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "controller/session_sink.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::dataplane {

// The registration fields every worker of a session or job must share (num_workers and the
// agreed parameters of controller::WorkerRegistration), as one registration gave them.
struct AgreedParams {
  uint32_t rank = 0;  // who registered them
  uint32_t protocol_version = 0;
  uint32_t num_workers = 0;
  uint32_t num_worker_threads = 0;
  uint32_t window_packets = 0;
  uint32_t elements_per_packet = 0;

  static AgreedParams Of(const controller::WorkerRegistration& reg);
};

// OK if `reg` carries exactly the values of `first` (the registration that fixed them; 0 is a
// value like any other). Otherwise FailedPrecondition naming every field that differs, both
// values and both ranks, e.g. "rank 1 registered num_worker_threads=2, but rank 0 registered
// num_worker_threads=1 for job 3; every worker of a job must use the same value". `scope`
// names the session or job ("job 3"), `kind` what every worker belongs to ("job").
Status CheckAgreedParams(const AgreedParams& first, const AgreedParams& reg,
                         const std::string& scope, const std::string& kind);

class SessionTable {
 public:
  static constexpr uint16_t kNoThread = 0xFFFF;
  static constexpr size_t kMaxPortsPerWorker = 64;

  struct Worker {
    bool registered = false;
    uint32_t ipv4 = 0;  // host order
    uint64_t mac = 0;   // informative
    std::vector<uint16_t> udp_ports;  // empty = reference mode
  };
  struct Sender {
    uint32_t rank = 0;
    uint16_t thread = kNoThread;  // index into the worker's udp_ports, or kNoThread
  };

  // The empty table: no session, every sender is unknown.
  SessionTable() = default;

  // Returns the table that results from applying `reg` to `current` (UdpSession semantics,
  // §4.3, for the software switch):
  //  * rank 0 starts a new session: all workers are forgotten, num_workers is taken from the
  //    request and epoch() increases (the switch then clears all aggregation state);
  //  * any other rank joins the current session and must announce the same num_workers and
  //    the same agreed parameters as rank 0 (protocol_version, num_worker_threads,
  //    window_packets, elements_per_packet; CheckAgreedParams);
  //  * registering a rank again replaces its previous entry.
  // Errors (nothing changes on error):
  //  InvalidArgument     num_workers not in [1, max_workers]; rank >= num_workers; more than
  //                      64 udp_ports; a port of 0; a port listed twice
  //  FailedPrecondition  rank > 0 with no session yet, or num_workers or an agreed parameter
  //                      differs from the session's (rank 0's)
  //  AlreadyExists       another rank already uses the same (ipv4, port), or one of the two
  //                      workers is in reference mode on the same ipv4
  static StatusOr<std::shared_ptr<const SessionTable>> Apply(
      const SessionTable& current, const controller::WorkerRegistration& reg,
      uint32_t max_workers);

  // Changes exactly when a new session starts (rank 0 registered); 0 = never had a session.
  uint64_t epoch() const { return epoch_; }
  uint64_t session_id() const { return session_id_; }   // from rank 0's request (informative)
  uint32_t num_workers() const { return num_workers_; }  // 0 = no session
  uint32_t num_registered() const { return num_registered_; }
  // What rank 0 registered for this session (all zero with no session).
  const AgreedParams& agreed() const { return agreed_; }
  // rank < num_workers(); an unregistered rank has registered == false.
  const Worker& worker(uint32_t rank) const { return workers_[rank]; }
  // All num_workers() entries, by rank (empty with no session).
  std::span<const Worker> workers() const { return workers_; }

  // The hot-path lookup: one or two probes of an open-addressing hash table, no allocation.
  // Returns false for an unknown sender.
  bool Find(const transport::Endpoint& from, Sender* out) const {
    if (index_.empty()) return false;
    if (const Entry* e = Probe(PortKey(from.ipv4, from.port))) {
      *out = Sender{e->rank, e->thread};
      return true;
    }
    if (const Entry* e = Probe(HostKey(from.ipv4))) {
      *out = Sender{e->rank, e->thread};
      return true;
    }
    return false;
  }

 private:
  struct Entry {
    uint64_t key = 0;  // 0 = empty
    uint32_t rank = 0;
    uint16_t thread = kNoThread;
  };
  // Bit 63 marks an occupied entry, bit 48 a (host, port) key, bits 47..16 the IPv4 address.
  static uint64_t PortKey(uint32_t ipv4, uint16_t port) {
    return (uint64_t{1} << 63) | (uint64_t{1} << 48) | (uint64_t{ipv4} << 16) | port;
  }
  static uint64_t HostKey(uint32_t ipv4) { return (uint64_t{1} << 63) | (uint64_t{ipv4} << 16); }

  const Entry* Probe(uint64_t key) const {
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> index_shift_);
    while (true) {
      const Entry& e = index_[i];
      if (e.key == key) return &e;
      if (e.key == 0) return nullptr;
      i = (i + 1) & (index_.size() - 1);
    }
  }
  void BuildIndex();
  void Insert(uint64_t key, uint32_t rank, uint16_t thread);

  uint64_t epoch_ = 0;
  uint64_t session_id_ = 0;
  uint32_t num_workers_ = 0;
  uint32_t num_registered_ = 0;
  AgreedParams agreed_;
  std::vector<Worker> workers_;
  std::vector<Entry> index_;  // power-of-two size, at most half full
  uint32_t index_shift_ = 64;
};

// "10.0.0.1" for a host-order IPv4 address.
std::string FormatIpv4(uint32_t ipv4);

}  // namespace switchml::dataplane
