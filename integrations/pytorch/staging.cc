#include "staging.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>

namespace switchml::pytorch {

std::vector<std::pair<int64_t, int64_t>> StagingChunks(int64_t numel, int64_t chunk_bytes) {
  const int64_t per_chunk = std::max<int64_t>(1, chunk_bytes / 4);
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t offset = 0; offset < numel; offset += per_chunk) {
    chunks.emplace_back(offset, std::min(per_chunk, numel - offset));
  }
  return chunks;
}

namespace {

bool Overlaps(const std::vector<DeviceSpan>& a, const std::vector<DeviceSpan>& b) {
  for (const DeviceSpan& x : a) {
    for (const DeviceSpan& y : b) {
      if (x.begin < y.end && y.begin < x.end) return true;
    }
  }
  return false;
}

class EventMark : public DeviceMark {
 public:
  explicit EventMark(c10::Event event) : event_(std::move(event)) {}
  bool Query() override { return event_.query(); }

 private:
  c10::Event event_;
};

// Streams and events through c10's VirtualGuardImpl: the same code for any device type whose
// guard implementation is registered (CUDA's is, when torch's CUDA library is loaded).
class StreamDeviceOps : public DeviceOps {
 public:
  explicit StreamDeviceOps(c10::DeviceType type) : type_(type), impl_(type) {}

  std::vector<c10::Device> FutureDevices(const c10::Device& device) override { return {device}; }

  std::unique_ptr<DeviceMark> CopyToHost(const at::Tensor& host, const at::Tensor& src) override {
    // at::Tensor::copy_ runs on the current stream of src's device (the caller's).
    host.copy_(src, /*non_blocking=*/true);
    c10::Event event(type_);
    event.record(impl_.getStream(src.device()));
    return std::make_unique<EventMark>(std::move(event));
  }

  at::Tensor PinnedEmpty(int64_t numel, at::ScalarType type) override {
    return at::empty({numel}, at::TensorOptions().dtype(type).pinned_memory(true));
  }

  void CopyOnStagingStream(const at::Tensor& dst, const at::Tensor& src) override {
    const c10::Stream stream = StagingStream(dst.device());
    c10::StreamGuard guard(stream);
    // The caching allocator must not hand dst's memory to another stream before this copy ran.
    impl_.recordDataPtrOnStream(dst.storage().data_ptr(), stream);
    if (src.device() != dst.device()) {
      // Host → device; pinned source, so asynchronous. A dtype change (float32 wire buffer →
      // float16 tensor) is done on the device after the copy.
      if (src.scalar_type() == dst.scalar_type()) {
        dst.copy_(src, /*non_blocking=*/true);
      } else {
        at::Tensor tmp = at::empty(src.sizes(), src.options().device(dst.device()).pinned_memory(false));
        tmp.copy_(src, /*non_blocking=*/true);
        dst.copy_(tmp);
      }
    } else {
      impl_.recordDataPtrOnStream(src.storage().data_ptr(), stream);
      dst.copy_(src, /*non_blocking=*/true);
    }
  }

  void WithStagingStream(const c10::Device& device, const std::function<void()>& fn) override {
    c10::StreamGuard guard(StagingStream(device));
    fn();
  }

  void CallDone(const c10::Device& device, const std::vector<DeviceSpan>& spans) override {
    c10::Event event(type_);
    event.record(StagingStream(device));
    std::lock_guard lock(mu_);
    done_.push_back({device, spans, std::move(event)});
  }

  void WaitForEarlier(const c10::Device& device, const std::vector<DeviceSpan>& spans) override {
    std::lock_guard lock(mu_);
    const c10::Stream current = impl_.getStream(device);
    for (auto it = done_.begin(); it != done_.end();) {
      if (it->event.query()) {  // its copies back have run: nothing to wait for, forget it
        it = done_.erase(it);
        continue;
      }
      if (it->device == device && Overlaps(it->spans, spans)) it->event.block(current);
      ++it;
    }
  }

 private:
  c10::Stream StagingStream(const c10::Device& device) {
    std::lock_guard lock(mu_);
    auto it = streams_.find(device.index());
    if (it == streams_.end()) {
      it = streams_.emplace(device.index(), impl_.getStreamFromGlobalPool(device, /*isHighPriority=*/false)).first;
    }
    return it->second;
  }

  struct Done {
    c10::Device device;
    std::vector<DeviceSpan> spans;
    c10::Event event;  // recorded on the staging stream after the call's copies back
  };

  const c10::DeviceType type_;
  const c10::impl::VirtualGuardImpl impl_;
  std::mutex mu_;
  std::map<c10::DeviceIndex, c10::Stream> streams_;  // guarded by mu_: one staging stream per device
  std::vector<Done> done_;                           // guarded by mu_
};

class FakeMark : public DeviceMark {
 public:
  explicit FakeMark(std::shared_ptr<std::atomic<bool>> gate) : gate_(std::move(gate)) {}
  bool Query() override { return !gate_ || gate_->load(); }

 private:
  std::shared_ptr<std::atomic<bool>> gate_;
};

}  // namespace

std::unique_ptr<DeviceOps> MakeStreamDeviceOps(c10::DeviceType type) {
  return std::make_unique<StreamDeviceOps>(type);
}

std::unique_ptr<DeviceMark> FakeDeviceOps::CopyToHost(const at::Tensor& host, const at::Tensor& src) {
  host.copy_(src);
  copies_to_host++;
  std::lock_guard lock(mu_);
  return std::make_unique<FakeMark>(gate_);
}

at::Tensor FakeDeviceOps::PinnedEmpty(int64_t numel, at::ScalarType type) {
  return at::empty({numel}, at::TensorOptions().dtype(type));
}

void FakeDeviceOps::CopyOnStagingStream(const at::Tensor& dst, const at::Tensor& src) {
  dst.copy_(src);
  copies_to_device++;
}

void FakeDeviceOps::Hold() {
  std::lock_guard lock(mu_);
  if (!gate_) gate_ = std::make_shared<std::atomic<bool>>(false);
}

void FakeDeviceOps::Unhold() {
  std::lock_guard lock(mu_);
  if (gate_) released_later_.push_back(gate_);
  gate_.reset();
}

void FakeDeviceOps::Release() {
  std::lock_guard lock(mu_);
  if (gate_) gate_->store(true);
  gate_.reset();
  for (auto& g : released_later_) g->store(true);
  released_later_.clear();
}

}  // namespace switchml::pytorch
