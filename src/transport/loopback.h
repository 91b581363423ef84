// transport/loopback.h — an in-process datagram fabric with seeded fault injection (tests only).
//
// Channels created from one LoopbackFabric deliver to each other by Endpoint, as UDP sockets on
// one host would, but without the kernel: a datagram is copied into the destination channel's
// bounded inbox. The fabric can lose, duplicate and reorder datagrams with fixed probabilities
// drawn from a seeded generator, optionally only on some directions of traffic, so protocol
// tests reproduce a loss pattern exactly.
//
//   LoopbackOptions opt;
//   opt.faults.loss = 0.01;
//   opt.faults.seed = 7;
//   SWITCHML_ASSIGN_OR_RETURN(auto fabric, LoopbackFabric::Create(opt));
//   SWITCHML_ASSIGN_OR_RETURN(auto sw, fabric->CreateChannel({0x0A000001, 48864}));
//   SWITCHML_ASSIGN_OR_RETURN(auto worker, fabric->CreateChannel({0x0A000002, 0}));  // any port
//   ... worker->SendBurst(tx); sw->RecvBurst(rx, 10ms); ...
//   EXPECT_EQ(fabric->counters().lost, ...);
//
// Semantics (per datagram, in SendBurst order, under one fabric lock):
//   * unknown destination: accepted and dropped, as UDP does; counted in `unroutable` (not in
//     `lost`, which counts only injected loss). Not an error.
//   * if the fault filter applies: one draw each for loss, duplicate and reorder, always all
//     three, so the fault sequence depends only on the seed and the order of datagrams.
//     lost → nothing delivered. duplicate → delivered twice. reorder → held back in the
//     destination's inbox and delivered right after the next datagram to that destination, or
//     at the destination's next RecvBurst that finds the inbox empty; one datagram is held per
//     destination at a time (a second reorder while one is held is delivered normally).
//   * a full inbox (inbox_capacity datagrams waiting) drops the datagram: `inbox_overflow`.
// Determinism: the same seed and the same order of SendBurst calls give the same faults; with
// several sending threads that order is the order in which they take the fabric lock.
//
// Threading: the fabric and its channels are thread-safe in the Channel sense (each channel
// used by one thread at a time, Wake() from anywhere); the fabric's methods may be called from
// any thread. Channels share the fabric's state, so either may be destroyed first.
// Allocates and copies per datagram: it is a test fixture, not a data path.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::transport {

namespace internal {
struct LoopbackCore;  // the state shared by a fabric and its channels (loopback.cc)
}  // namespace internal

struct FaultOptions {
  // Probabilities in [0, 1], applied independently to each datagram the filter selects.
  double loss = 0;
  double duplicate = 0;
  double reorder = 0;
  uint64_t seed = 1;
  // Which traffic the faults apply to; empty = all. Called under the fabric lock, once per
  // datagram: keep it cheap and do not call back into the fabric.
  std::function<bool(Endpoint from, Endpoint to)> applies_to;
};

struct LoopbackOptions {
  // Datagrams waiting in one inbox before further ones are dropped (like a socket buffer).
  uint32_t inbox_capacity = 4096;
  FaultOptions faults;
};

struct LoopbackCounters {
  uint64_t delivered = 0;       // datagrams put into an inbox (duplicates count twice)
  uint64_t lost = 0;            // dropped by injected loss
  uint64_t duplicated = 0;      // extra copies injected
  uint64_t reordered = 0;       // datagrams held back to be delivered late
  uint64_t inbox_overflow = 0;  // dropped because the destination inbox was full
  uint64_t unroutable = 0;      // sent to an endpoint no channel has
};

class LoopbackFabric {
 public:
  // Errors: InvalidArgument naming the bad field (a probability outside [0, 1], NaN, or
  // inbox_capacity 0).
  static StatusOr<std::unique_ptr<LoopbackFabric>> Create(LoopbackOptions options = {});
  ~LoopbackFabric();
  LoopbackFabric(const LoopbackFabric&) = delete;
  LoopbackFabric& operator=(const LoopbackFabric&) = delete;

  // A channel reachable at `addr`. addr.port 0 picks a free port from 49152 up. Errors:
  // AlreadyExists ("loopback 10.0.0.1:48864 is already in use"), ResourceExhausted (no free
  // port). The channel may outlive the fabric object.
  StatusOr<std::unique_ptr<Channel>> CreateChannel(Endpoint addr);

  // Replaces the fault configuration and restarts the generator from faults.seed. Datagrams
  // already held for reordering stay held. Errors: InvalidArgument (as Create).
  Status SetFaults(FaultOptions faults);

  // A snapshot of the counters.
  LoopbackCounters counters() const;

 private:
  explicit LoopbackFabric(std::shared_ptr<internal::LoopbackCore> core);
  std::shared_ptr<internal::LoopbackCore> core_;
};

}  // namespace switchml::transport
