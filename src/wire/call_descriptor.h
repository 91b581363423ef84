// wire/call_descriptor.h — the per-call descriptor every worker sends so that all workers can
// check, in band and exactly, that they made the same all-reduce call.
//
// The problem it solves: the switch adds whatever arrives in a slot, so two workers that pass
// different element counts or types at the same call would otherwise get a result (a wrong one,
// or one for the part they share) with status OK. The control plane cannot see calls; the data
// plane already carries every byte of them.
//
// How: packet 0 of every non-empty slice (and of thread 0's slice of an empty call) carries, for
// each byte b of the descriptor, the two int32 values b and b*b in its payload. The switch sums
// them over the n workers like any payload, and every worker checks S1 == n*b and S2 == n*b*b.
// Since sum_i (b_i - b)^2 = S2 - 2*b*S1 + n*b^2, both equalities hold exactly when every worker
// sent b (no wrap-around: b <= 255 keeps S2 = n * b^2 below 2^32 for n up to 66051; the
// library allows 32768 workers, a two-level job's most). So a worker whose check
// passes knows every worker sent its descriptor, and any difference is seen by every worker at
// the same round: each of them fails the call instead of returning a result.
//
// A call one worker rejects locally (its arguments: non-finite input, overlapping buffers, ...)
// must fail on every worker too, and must still use its call number so that the calls after it
// pair up. That worker still sends the call's first round with `rejected` set: the rejected
// byte is the one field that may differ, and its sum S1 is exactly the number of workers that
// rejected the call (S2 == S1 since 1*1 == 1). Every worker reads the same verdict from the same
// sum, so all of them end the call the same way (client/engine.h: "Rejected calls").
//
// It needs nothing from the switch beyond summing payloads, so it works with any switch that
// implements the reference semantics. It occupies kDescriptorElements payload elements (<= 64,
// the smallest packet).
//
//   uint8_t payload[4 * 64];
//   wire::EncodeDescriptor({.call_id = 7, .num_elements = 4096, .type = 1}, payload);
//   ... switch sums over n workers ...
//   const wire::DescriptorVerdict v = wire::CheckDescriptor(mine, summed_payload, n);
//   if (!v.mismatch.empty()) fail(v.mismatch);            // the workers made different calls
//   else if (v.rejected_by > 0) fail_in_step(...);        // same call, rejected by some worker(s)
//
// Pure, allocation-free except for the returned message, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace switchml::wire {

struct CallDescriptor {
  uint64_t call_id = 0;       // the call's number in its context (low 32 bits are sent)
  uint64_t num_elements = 0;  // elements of the whole call (not of the slice)
  uint8_t type = 0;           // DataType as an integer
  bool rejected = false;      // this worker rejected the call locally (it fails on every worker)
};

// version, type, rejected, count, call id
inline constexpr size_t kDescriptorBytes = 1 + 1 + 1 + 8 + 4;
inline constexpr uint32_t kDescriptorElements = 2 * kDescriptorBytes;
inline constexpr uint8_t kDescriptorVersion = 2;

struct DescriptorVerdict {
  // "" if every worker made the same call (the rejected flags aside); otherwise a message naming
  // what differs, e.g. "the element count differs (this worker: 4096; the other worker: 8192)".
  std::string mismatch;
  // How many workers rejected the call (exact; meaningful when mismatch is empty).
  uint32_t rejected_by = 0;
};

// Writes kDescriptorElements big-endian int32 values at payload[0 .. 4 * kDescriptorElements).
void EncodeDescriptor(const CallDescriptor& d, uint8_t* payload);

// Checks the switch's sum over num_workers descriptors (big-endian int32 payload) against `mine`.
// With two workers the other's differing values are reconstructed exactly; with more, the
// message says which fields differ.
DescriptorVerdict CheckDescriptor(const CallDescriptor& mine, const uint8_t* summed_payload,
                                  uint32_t num_workers);

}  // namespace switchml::wire
