#include "control/switch_control.h"

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

}  // namespace switchml::control
