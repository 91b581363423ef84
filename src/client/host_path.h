// client/host_path.h — the collectives recovery needs from the host network (Gloo, MPI), as an
// interface the integrations implement (docs/reliability.md, "Surviving a failing switch").
//
// Every rank of the job calls the same methods in the same order with the same sizes (the
// recovery plan is computed from all-gathered data only, so it is the same on every rank). Every
// method must end within a deadline (the implementation's own; it must exceed the context's
// call_timeout, since each rank enters recovery at its own first failure) and returns an error
// instead of hanging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml::client {

class HostPath {
 public:
  virtual ~HostPath() = default;
  // Every rank passes the same number of values; returns num_workers x mine.size() values,
  // rank r's at [r * mine.size(), (r + 1) * mine.size()).
  virtual StatusOr<std::vector<int64_t>> AllGather(std::span<const int64_t> mine) = 0;
  // Copies data[0..bytes) of rank `root` to data[0..bytes) of every other rank.
  virtual Status Broadcast(void* data, size_t bytes, uint32_t root) = 0;
  // In place element-wise SUM of data[0..n) (int32, wrapping, or float32) over the ranks. Every
  // rank must get bit-identical results (the float32 summation order may not depend on the rank).
  virtual Status AllReduce(void* data, size_t n, DataType type) = 0;
};

// What ContextImpl::Recover did.
struct RecoveryReport {
  // Calls [first_call, end_call) were finished by recovery: their handles now report their
  // results (OK, or the failure every worker agreed on, e.g. a call some worker rejected). Calls
  // before first_call had finished on every worker before the switch failed.
  uint64_t first_call = 0;
  uint64_t end_call = 0;
  // Calls [end_call, submitted) were submitted here but not by every worker: no worker
  // completed any of their packets, their inputs are intact, and their handles keep their
  // failure; the caller runs them on the host path, in order.
  uint64_t submitted = 0;
  uint64_t packets_broadcast = 0;     // packets completed from another rank's shadow copy
  uint64_t elements_host_reduced = 0; // elements all-reduced on the host path
};

}  // namespace switchml::client
