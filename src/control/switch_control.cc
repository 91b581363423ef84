#include "control/switch_control.h"

#include <algorithm>
#include <random>
#include <string>

namespace switchml::control {

StatusOr<SwitchInfo> MergeShardAnswers(const std::vector<SwitchInfo>& shards) {
  if (shards.empty()) return InvalidArgumentError("no shard answered");
  const uint32_t k = uint32_t(shards.size());
  SwitchInfo merged = shards[0];
  merged.num_shards = k;
  const size_t n = merged.thread_routes.size();
  for (size_t t = 0; t < n; ++t) {
    const uint32_t shard = merged.thread_routes[t].shard;
    if (shard >= k) {
      return InternalError("shard 0 routes worker thread " + std::to_string(t) + " to shard " +
                           std::to_string(shard) + " of " + std::to_string(k));
    }
    const SwitchInfo& from = shards[shard];
    if (from.thread_routes.size() != n || from.thread_routes[t].udp_port == 0 ||
        from.thread_routes[t].shard != shard) {
      return InternalError("shard " + std::to_string(shard) + " gives no port for worker thread " +
                           std::to_string(t) + " of " + std::to_string(n) + " (it lists " +
                           std::to_string(from.thread_routes.size()) + " routes)");
    }
    merged.thread_routes[t] = from.thread_routes[t];
    merged.thread_routes[t].ipv4 = from.ipv4;
  }
  return merged;
}

StatusOr<JobInfo> SwitchControl::CreateJobShard(const JobSpec&,
                                                const ShardAssignment& assignment) {
  const char* field = assignment.num_shards != 1 ? "num_shards"
                      : assignment.shard != 0    ? "shard"
                                                 : "shard_group";
  return InvalidArgumentError(
      std::string(field) + " (shard " + std::to_string(assignment.shard) + " of num_shards " +
      std::to_string(assignment.num_shards) + ", shard_group " +
      std::to_string(assignment.shard_group) +
      "): a shard assignment is what a standalone controller sends the switches it places a "
      "job on, not part of a request; ask for switches = K instead");
}

uint16_t Uplink::PortFor(const JobLayout& layout, uint32_t slot) const {
  if (parent_ports.empty()) return 0;
  const uint32_t t = layout.ThreadOfSlot(slot);
  if (t >= layout.worker_threads()) return parent_ports[0];  // no thread's slot: not sent up
  return parent_ports[layout.IoThreadOf(t, uint32_t(parent_ports.size()))];
}

WorkerRegistration LeafRegistration(uint32_t leaf, uint32_t num_leaves, uint32_t leaf_ipv4,
                                    const std::vector<uint16_t>& thread_ports, uint16_t data_port,
                                    const JobLayout& layout, uint32_t elements_per_packet) {
  WorkerRegistration reg;
  reg.rank = leaf;
  reg.num_workers = num_leaves;
  reg.ipv4 = leaf_ipv4;
  reg.leaf = true;
  for (uint32_t t = 0; t < layout.worker_threads(); ++t) {
    const uint16_t p = t < thread_ports.size() ? thread_ports[t] : 0;
    reg.udp_ports.push_back(p != 0 ? p : data_port);
  }
  reg.protocol_version = kClientProtocolVersion;
  reg.num_worker_threads = layout.worker_threads();
  reg.window_packets = layout.window_packets();
  reg.elements_per_packet = elements_per_packet;
  return reg;
}

std::string RandomToken() {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 8; ++k) {
      t += kHex[v & 15];
      v >>= 4;
    }
  }
  return t;
}

}  // namespace switchml::control
