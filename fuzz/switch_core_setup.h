// fuzz/switch_core_setup.h — the switch that fuzz_switch_core drives and the record format of
// its inputs, shared with the corpus generator (make_corpus.cc) so that generated traffic
// replays exactly.
//
// Input = [flags][record]...; record = [ctl][len_lo][len_hi][len bytes: one datagram].
//   ctl bits 0-1: sender (0..2 = that rank's address, 3 = an unregistered address)
//   ctl bit 2:    thread (the sender's second port)
//   ctl bit 3:    mark the datagram truncated (as a too-small receive buffer would)
//   ctl bit 4:    end the current burst after this record (bursts are also cut at kMaxBurst)
//   flags bit 0:  ingress drop simulator at p = 1/4
//   flags bit 1:  late-duplicate guard on (SwitchConfig::late_duplicate_guard)
// The switch: kSlots slots, <= kMaxElements elements per packet, one session of kWorkers:
// ranks 0 and 1 in port mode (thread t on port kPortBase + t), rank 2 in reference mode.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dataplane/switch_config.h"
#include "control/switch_control.h"
#include "dataplane/switch_core.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::fuzz {

inline constexpr uint32_t kWorkers = 3;
inline constexpr uint32_t kSlots = 8;
inline constexpr uint32_t kMaxElements = 256;
inline constexpr uint16_t kPortBase = 40000;
inline constexpr size_t kMaxBurst = 32;
inline constexpr uint32_t kIpv4[kWorkers + 1] = {0x0A000001, 0x0A000002, 0x0A000003, 0x0A0000FE};

inline constexpr uint8_t kCtlTruncated = 8;
inline constexpr uint8_t kCtlEndBurst = 16;

inline transport::Endpoint SenderAddress(uint8_t ctl) {
  return transport::Endpoint{kIpv4[ctl & 3], uint16_t(kPortBase + ((ctl >> 2) & 1))};
}

inline uint8_t Ctl(uint32_t rank, uint32_t thread) { return uint8_t((rank & 3) | (thread & 1) << 2); }

inline void AppendRecord(std::vector<uint8_t>& input, uint8_t ctl, const uint8_t* data, size_t size) {
  input.push_back(ctl);
  input.push_back(uint8_t(size));
  input.push_back(uint8_t(size >> 8));
  input.insert(input.end(), data, data + size);
}

// The switch with its session registered. Errors: as SwitchCore::Create / RegisterWorker.
inline StatusOr<dataplane::SwitchCore> MakeSwitch(uint8_t flags) {
  dataplane::SwitchConfig config;
  config.num_slots = kSlots;
  config.max_elements_per_packet = kMaxElements;
  config.max_workers = 4;
  if (flags & 1) config.ingress_drop_probability = 0.25;
  config.late_duplicate_guard = (flags & 2) != 0;
  SWITCHML_ASSIGN_OR_RETURN(dataplane::SwitchCore core, dataplane::SwitchCore::Create(config));
  for (uint32_t rank = 0; rank < kWorkers; ++rank) {
    control::WorkerRegistration reg;
    reg.session_id = 1;
    reg.rank = rank;
    reg.num_workers = kWorkers;
    reg.ipv4 = kIpv4[rank];
    if (rank < 2) reg.udp_ports = {kPortBase, uint16_t(kPortBase + 1)};
    SWITCHML_RETURN_IF_ERROR(core.RegisterWorker(reg));
  }
  return core;
}

}  // namespace switchml::fuzz
