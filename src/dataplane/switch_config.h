// dataplane/switch_config.h — runtime configuration of the software switch.
//
//   SwitchConfig config;                  // defaults: 8192 slots, 1024 elements, 256 workers
//   config.ingress_drop_probability = 0.01;
//   SWITCHML_RETURN_IF_ERROR(config.Validate());
//
// Plain value type; thread-compatible.
#pragma once

#include <cstdint>

#include "switchml/status.h"

namespace switchml::dataplane {

struct SwitchConfig {
  // Slots per set offered to a job (slots 0..num_slots-1 are valid). [1, wire::kMaxSlots].
  uint32_t num_slots = 8192;
  // Largest payload accepted, in int32 elements. [64, wire::kMaxElementsPerPacket]; bigger
  // packets are dropped and counted as too_large. The sum memory is 8·num_slots·this bytes.
  uint32_t max_elements_per_packet = 1024;
  // Largest num_workers a session may announce. [1, 256].
  uint32_t max_workers = 256;
  // Drop simulator (docs/protocol.md#drop-simulator), for tests: probability in [0, 1] that a
  // request is dropped before any state change, and that the responses of a packet (all
  // multicast copies or the unicast) are dropped. One seeded pseudo-random stream each, so
  // runs are reproducible.
  double ingress_drop_probability = 0.0;
  double egress_drop_probability = 0.0;
  uint64_t drop_seed = 1;
  // Drop late duplicates (aggregator.h, "Late-duplicate guard"; counted as
  // late_duplicates_dropped) instead of treating them as new contributions. Off by default:
  // bit-exact reference behaviour. Applies to the reference session and to every job.
  bool late_duplicate_guard = false;
  // Advertised to workers in every registration's grant (SwitchServer::Info). `mac` is
  // informative; `advertised_ipv4` (host order) overrides the channel's local address, which
  // is 0.0.0.0 when the switch listens on every interface. 0 = use the channel's address.
  uint64_t mac = 0x001122334455;
  uint32_t advertised_ipv4 = 0;
  // I/O threads of the SwitchServer, [1, kMaxIoThreads]: thread i has its own channel (UDP
  // port P + i), SwitchCore and counters, and aggregates the slots of the worker threads it
  // serves (docs/design.md, "Several I/O threads"). 1 = one thread, exactly the old switch.
  uint32_t io_threads = 1;
  static constexpr uint32_t kMaxIoThreads = 16;

  // InvalidArgument naming the first bad field and its value.
  Status Validate() const;

  // The most request datagrams that can be in flight towards one I/O thread at once, e.g. every
  // worker's first window sent together: a worker has at most num_slots packets in flight (its
  // window is at most the slots it was given) and a session at most max_workers workers, and
  // the reference session sends all of them to I/O thread 0. What a receive queue that must
  // never overflow (a raw channel's ring) has to hold.
  uint64_t LargestBurstDatagrams() const { return uint64_t{num_slots} * max_workers; }
};

}  // namespace switchml::dataplane
