// client/call_state.h — one all-reduce call as the context and its worker threads share it.
//
// ContextImpl::Submit creates a CallState, cuts the call into one SliceTask per worker thread and
// queues them (worker.h); each worker thread reports its slice's result with
// ContextImpl::OnSliceDone, and the last one marks the call done and wakes its waiters
// (AllReduceHandle). Fields marked "set by Submit" are written before the slices are queued and
// read-only afterwards; the rest are guarded by `mu`.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "client/engine.h"
#include "switchml/status.h"

namespace switchml::client {

struct CallState {
  uint64_t id = 0;
  DataType type = DataType::kInt32;  // set by Submit (for recovery)
  size_t num_elements = 0;           // likewise
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  // AllReduceHandle::OnComplete callbacks registered before `done`; taken (and cleared) by
  // whoever sets `done`, which runs them after waking the waiters (guarded by mu).
  std::vector<std::function<void(const Status&)>> callbacks;
  int remaining_slices = 0;  // guarded by mu
  std::vector<int8_t> exponents;  // float32: every slice's block exponents (SliceSpec::exponents)

  // Ordering (set by Submit before the slices are queued, then read-only).
  uintptr_t in_begin = 0, in_end = 0, out_begin = 0, out_end = 0;  // byte ranges of the buffers
  std::vector<std::weak_ptr<CallState>> deps;  // earlier calls that must finish first (expired = done)

  // float32 input written by a dependency: the whole input is scanned once, by the first slice
  // that starts (all dependencies are finished by then), so that every slice of this worker
  // knows before it sends anything whether the call must be rejected (non-finite input).
  bool exponents_at_start = false;
  const float* in = nullptr;       // the call's input (float32), set by Submit
  std::vector<size_t> slice_offsets, slice_lengths, slice_first_blocks;  // per worker thread
  std::once_flag start_scan_once;
  Status start_scan;               // written once under start_scan_once

  // Submit rejected this call: its slices run only the first round with the rejected flag
  // (engine.h, "Rejected calls"), so that it fails on every worker and uses its call number.
  // The caller got the error at once through another, already done, handle; this call is not
  // counted in Stats a second time.
  bool rejected_at_submit = false;
  // Submitted after the context broke (never sent): after a recovery (Failover) the caller
  // runs it on the host path.
  bool refused_broken = false;
};

// Takes the block exponents of every slice of a float32 call (call.in, the slice vectors) into
// call.exponents. INVALID_ARGUMENT naming the first non-finite (or too large) element.
Status ScanExponents(CallState& call, uint32_t block);

struct SliceTask {
  std::shared_ptr<CallState> call;
  SliceSpec spec;
  size_t element_offset = 0;  // of the slice in the call's tensor (for messages)
  size_t first_block = 0;     // of the slice in CallState::exponents
};

}  // namespace switchml::client
