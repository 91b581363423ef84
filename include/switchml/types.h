// switchml/types.h — value types of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace switchml {

enum class DataType : uint8_t { kInt32, kFloat32 };
enum class ReduceOp : uint8_t { kSum };

inline constexpr size_t ElementSize(DataType) { return 4; }
std::string_view DataTypeName(DataType t);  // "int32", "float32"

// Per-context counters, summed over worker threads. Read with Context::GetStats().
// The struct's own (implicit) copy, move and destruction of its deprecated fields are not uses:
// only code naming them is warned about.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct Stats {
  // Every submitted call is, once finished, in exactly one of calls_completed, calls_recovered
  // and calls_failed: calls_submitted = completed + recovered + failed + calls still in flight.
  uint64_t calls_submitted = 0;  // all-reduce calls (AllReduceAsync / AllReduce)
  uint64_t calls_completed = 0;  // finished OK on the switch
  // Failed on the switch, then finished with their results by a failover's recovery
  // (switchml/failover.h: Failover::Agree, which runs Context recovery): their handles report
  // OK. Not counted in calls_failed (they were until the recovery finished them).
  uint64_t calls_recovered = 0;
  // Finished with an error, including the calls a recovery left to the caller's host path
  // (Failover::RunOnHost: the integration runs them there; it counts those itself) and those
  // refused by a context that broke or recovered.
  uint64_t calls_failed = 0;
  uint64_t packets_sent = 0;     // including retransmissions
  uint64_t retransmissions = 0;  // packets resent after a timeout
  uint64_t results_received = 0; // results accepted (one per packet of a slice)
  uint64_t duplicates = 0;       // results that were duplicates or belonged to no in-flight packet
  uint64_t malformed = 0;        // datagrams that failed to decode
  uint64_t timeouts = 0;         // retransmission timer expiries
  uint64_t send_stalls = 0;      // bursts the transport could not take at once
  // float32 values clamped to ±floor(INT32_MAX / num_workers) when quantized: a product just
  // below the bound that rounds up (off by at most one quantum). A value beyond its block's
  // exponent is never clamped silently: its all-reduce fails instead.
  uint64_t quantization_clamps = 0;

  // Deprecated (one release): the old names of calls_submitted, calls_completed and
  // calls_failed, filled by GetStats() with the same values.
  [[deprecated("use calls_submitted")]] uint64_t jobs_submitted = 0;
  [[deprecated("use calls_completed")]] uint64_t jobs_completed = 0;
  [[deprecated("use calls_failed")]] uint64_t jobs_failed = 0;
};
#pragma GCC diagnostic pop

}  // namespace switchml
