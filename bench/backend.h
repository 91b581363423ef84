// bench/backend.h — one rank of an all-reduce implementation under test. allreduce_perf drives
// every backend (SwitchML, Gloo ring, MPI_Allreduce) through this interface, so that all of
// them run the same sweep, inputs, verification and timing code.
//
//   auto b = CreateBackend(config);              // joins the job (rendezvous); blocks
//   SWITCHML_RETURN_IF_ERROR((*b)->Barrier());
//   SWITCHML_RETURN_IF_ERROR((*b)->AllReduceSum(in, out, count, DataType::kFloat32));
//
// A backend is used from one thread. Its calls block until the collective finished on this
// rank and return the backend's error as a Status (never abort, never throw).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml::bench {

struct PacketCounters {
  uint64_t packets_sent = 0;     // including retransmissions
  uint64_t retransmissions = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t num_workers() const = 0;
  // Element-wise SUM over all ranks; `in` and `out` do not overlap; count may be 0.
  virtual Status AllReduceSum(const void* in, void* out, size_t count, DataType type) = 0;
  // Returns once every rank has entered the barrier.
  virtual Status Barrier() = 0;
  // Packet counters (SwitchML only); nullopt where the backend has none (TCP baselines).
  virtual std::optional<PacketCounters> Counters() const { return std::nullopt; }
  // True when float32 sums are quantized (SwitchML): results are checked against the
  // quantization bound instead of exactly.
  virtual bool quantizes_float32() const { return false; }
  // True when the job's packets go through a switch process rather than between workers:
  // on an interface shared by ranks and switch, half the bytes are the switch's.
  virtual bool via_switch() const { return false; }
};

// Everything the backends need; each backend reads only its own fields.
struct BackendConfig {
  std::string backend;  // "switchml", "gloo" or "mpi"
  uint32_t rank = 0;
  uint32_t num_workers = 1;
  std::chrono::milliseconds timeout{60000};  // per collective (Gloo, SwitchML job timeout)
  // switchml
  std::string controller = "127.0.0.1:50099";
  std::string bind_ip, advertise_ip;
  uint32_t threads = 1, window = 256, elements_per_packet = 256;
  // The JobService job to join (`switchml jobs create` prints both); 0 and "" = the reference
  // session. CreateSwitchMLBackend rejects one without the other.
  uint32_t job_id = 0;
  std::string job_token;
  // gloo: rendezvous through files in a directory all ranks see; TCP bound to host or iface.
  std::string rendezvous_dir, rendezvous_prefix = "allreduce_perf";
  std::string host, iface;
};

// INVALID_ARGUMENT for an unknown backend or bad fields; UNIMPLEMENTED for a backend this
// binary was built without; the backend's own error when joining the job fails.
StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendConfig& config);

// Per-backend factories (backend_*.cc); the Gloo and MPI ones exist only when built with them.
StatusOr<std::unique_ptr<Backend>> CreateSwitchMLBackend(const BackendConfig& config);
StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(const BackendConfig& config);
StatusOr<std::unique_ptr<Backend>> CreateMpiBackend(const BackendConfig& config);
bool HaveGloo();
bool HaveMpi();

}  // namespace switchml::bench
