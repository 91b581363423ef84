#include "dataplane/switch_config.h"

#include <cmath>
#include <string>

#include "dataplane/aggregator.h"
#include "wire/packet.h"

namespace switchml::dataplane {
namespace {

bool IsProbability(double p) { return std::isfinite(p) && p >= 0.0 && p <= 1.0; }

}  // namespace

Status SwitchConfig::Validate() const {
  if (num_slots < 1 || num_slots > wire::kMaxSlots) {
    return InvalidArgumentError("num_slots must be in [1, " + std::to_string(wire::kMaxSlots) +
                                "], got " + std::to_string(num_slots));
  }
  if (max_elements_per_packet < 64 || max_elements_per_packet > wire::kMaxElementsPerPacket) {
    return InvalidArgumentError("max_elements_per_packet must be in [64, " +
                                std::to_string(wire::kMaxElementsPerPacket) + "], got " +
                                std::to_string(max_elements_per_packet));
  }
  if (max_workers < 1 || max_workers > Aggregator::kMaxWorkers) {
    return InvalidArgumentError("max_workers must be in [1, " +
                                std::to_string(Aggregator::kMaxWorkers) + "], got " +
                                std::to_string(max_workers));
  }
  if (!IsProbability(ingress_drop_probability)) {
    return InvalidArgumentError("ingress_drop_probability must be in [0, 1], got " +
                                std::to_string(ingress_drop_probability));
  }
  if (!IsProbability(egress_drop_probability)) {
    return InvalidArgumentError("egress_drop_probability must be in [0, 1], got " +
                                std::to_string(egress_drop_probability));
  }
  if (io_threads < 1 || io_threads > kMaxIoThreads) {
    return InvalidArgumentError("io_threads must be in [1, " + std::to_string(kMaxIoThreads) +
                                "], got " + std::to_string(io_threads));
  }
  return OkStatus();
}

}  // namespace switchml::dataplane
