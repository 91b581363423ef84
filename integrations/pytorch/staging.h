// integrations/pytorch/staging.h — what the switchml backend needs from a device (CUDA) to stage
// all-reduce tensors through pinned host memory, behind a small interface so that the staging
// pipeline (backend.cc: chunking, call order, overlap, errors, timeouts) runs on the CPU too,
// with FakeDeviceOps (tests: SwitchMLBackend::SetTestStaging).
//
// The pipeline, per device tensor of an all-reduce call (backend.cc, SwitchMLBackend::StageCall):
//   calling thread   the tensor (or a float32/int32 device copy of it) is cut into chunks of
//                    `chunk_bytes` (StagingChunks: derived from the element count only, so every
//                    rank cuts alike); per chunk, CopyToHost enqueues a non-blocking copy into a
//                    pinned host buffer on the caller's current stream and returns a mark (an
//                    event recorded after it). Nothing blocks on the device.
//   staging thread   one per group, FIFO in call order: waits for each chunk's mark (polling,
//                    bounded by the group timeout), then lets the chunk's SwitchML job start (in
//                    the group's call-ordered queue, so jobs reach the switch in call order on
//                    every rank, device and CPU calls alike).
//   completion       when a chunk's job finishes (SwitchML worker thread): CopyToDevice enqueues
//                    the host→device copy on the device's staging stream; when the call's last
//                    chunk is back, its work's future (a c10::ivalue::Future with the device) is
//                    completed with the staging stream current, so the future records an event
//                    there and wait() / then() / DDP's comm hooks make the consumer's stream wait
//                    on that event, not the host.
// Device-generic (c10::Stream, c10::Event, VirtualGuardImpl): no CUDA headers are needed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace switchml::pytorch {

// Default chunk of a staged tensor (SwitchMLConfig::staging_chunk_bytes = 0).
inline constexpr int64_t kDefaultStagingChunkBytes = int64_t{4} << 20;

// [offset, offset + count) element ranges covering `numel` elements of 4 bytes (the wire types
// float32 and int32) in chunks of at most max(1, chunk_bytes / 4) elements; none for numel 0.
std::vector<std::pair<int64_t, int64_t>> StagingChunks(int64_t numel, int64_t chunk_bytes);

// The bytes of device memory a call touches ([begin, end) per tensor), for ordering calls.
struct DeviceSpan {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

// A point in a device stream (an event recorded after a copy).
class DeviceMark {
 public:
  virtual ~DeviceMark() = default;
  // Whether everything before the mark has run. Never blocks.
  virtual bool Query() = 0;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // The devices a work's future must know (empty: a CPU future).
  virtual std::vector<c10::Device> FutureDevices(const c10::Device& device) = 0;
  // Calling thread: enqueues host.copy_(src) (non-blocking) on src's device's current stream and
  // returns a mark recorded after it. `host` is pinned (PinnedEmpty), `src` contiguous.
  virtual std::unique_ptr<DeviceMark> CopyToHost(const at::Tensor& host, const at::Tensor& src) = 0;
  // An empty host buffer the device can copy to and from asynchronously (pinned memory).
  virtual at::Tensor PinnedEmpty(int64_t numel, at::ScalarType type) = 0;
  // Any thread: enqueues dst.copy_(src) on dst's device's staging stream (non-blocking; src is a
  // host buffer from PinnedEmpty, or a device tensor), keeping dst's memory alive for that stream.
  virtual void CopyOnStagingStream(const at::Tensor& dst, const at::Tensor& src) = 0;
  // Runs `fn` with `device`'s staging stream current (completions: a future completed there
  // records its event on that stream).
  virtual void WithStagingStream(const c10::Device& device, const std::function<void()>& fn) = 0;
  // A call on `spans` completed: everything enqueued on the staging stream so far is its result.
  virtual void CallDone(const c10::Device& device, const std::vector<DeviceSpan>& spans) = 0;
  // Calling thread: makes the current stream wait for the results of completed calls that
  // touched `spans` and whose copies back may still be running.
  virtual void WaitForEarlier(const c10::Device& device, const std::vector<DeviceSpan>& spans) = 0;
};

// The real one, for a device type with streams and events (CUDA): c10's device-generic API.
std::unique_ptr<DeviceOps> MakeStreamDeviceOps(c10::DeviceType type);

// Tests: CPU tensors staged as if they lived on a device. Copies run at once; marks complete
// only when not held (Hold/Release), so a test can keep a call waiting for its "device copy"
// deterministically. Counts what it did.
class FakeDeviceOps : public DeviceOps {
 public:
  std::vector<c10::Device> FutureDevices(const c10::Device&) override { return {}; }
  std::unique_ptr<DeviceMark> CopyToHost(const at::Tensor& host, const at::Tensor& src) override;
  at::Tensor PinnedEmpty(int64_t numel, at::ScalarType type) override;
  void CopyOnStagingStream(const at::Tensor& dst, const at::Tensor& src) override;
  void WithStagingStream(const c10::Device&, const std::function<void()>& fn) override { fn(); }
  void CallDone(const c10::Device&, const std::vector<DeviceSpan>&) override { calls_done++; }
  void WaitForEarlier(const c10::Device&, const std::vector<DeviceSpan>&) override {}

  // Hold(): marks made from now on wait for a new gate; Unhold(): later marks are free again
  // (the gate stays closed); Release(): opens the gate (and unholds).
  void Hold();
  void Unhold();
  void Release();

  std::atomic<uint64_t> copies_to_host{0};
  std::atomic<uint64_t> copies_to_device{0};
  std::atomic<uint64_t> calls_done{0};

 private:
  std::mutex mu_;
  std::shared_ptr<std::atomic<bool>> gate_;  // guarded by mu_; null: not holding
  std::vector<std::shared_ptr<std::atomic<bool>>> released_later_;  // guarded by mu_: unheld, closed
};

}  // namespace switchml::pytorch
