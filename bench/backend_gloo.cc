// Gloo baseline: the bandwidth-optimal ring (reduce-scatter + all-gather) of gloo::allreduce
// with Algorithm::RING, over gloo's TCP transport. (The older gloo::AllreduceRing class passes
// the whole tensor around the ring n−1 times and is not a fair baseline.) Rendezvous: a
// FileStore in a directory every rank sees, under a PrefixStore so several jobs can share it.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <exception>

#include "backend.h"

namespace switchml::bench {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

class GlooBackend final : public Backend {
 public:
  GlooBackend(std::shared_ptr<gloo::rendezvous::Context> ctx, std::chrono::milliseconds timeout)
      : ctx_(std::move(ctx)), timeout_(timeout) {}
  uint32_t rank() const override { return uint32_t(ctx_->rank); }
  uint32_t num_workers() const override { return uint32_t(ctx_->size); }

  Status AllReduceSum(const void* in, void* out, size_t count, DataType type) override {
    if (count == 0) return OkStatus();
    try {
      gloo::AllreduceOptions opts(ctx_);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTimeout(timeout_);
      if (type == DataType::kFloat32) {
        opts.setInput(const_cast<float*>(static_cast<const float*>(in)), count);
        opts.setOutput(static_cast<float*>(out), count);
        opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      } else {
        opts.setInput(const_cast<int32_t*>(static_cast<const int32_t*>(in)), count);
        opts.setOutput(static_cast<int32_t*>(out), count);
        opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<int32_t>));
      }
      gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return UnavailableError(std::string("gloo allreduce: ") + e.what());
    }
    return OkStatus();
  }

  Status Barrier() override {
    try {
      gloo::BarrierOptions opts(ctx_);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    } catch (const std::exception& e) {
      return UnavailableError(std::string("gloo barrier: ") + e.what());
    }
    return OkStatus();
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

bool HaveGloo() { return true; }

StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(const BackendConfig& c) {
  if (c.rendezvous_dir.empty())
    return InvalidArgumentError("--rendezvous-dir is required for --backend gloo (a directory all ranks see)");
  try {
    gloo::transport::tcp::attr attr;
    if (!c.host.empty()) attr.hostname = c.host;
    else if (!c.iface.empty()) attr.iface = c.iface;
    else attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(c.rendezvous_dir);
    gloo::rendezvous::PrefixStore store(c.rendezvous_prefix, file_store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(int(c.rank), int(c.num_workers));
    ctx->setTimeout(c.timeout);
    ctx->connectFullMesh(store, dev);
    return std::unique_ptr<Backend>(new GlooBackend(std::move(ctx), c.timeout));
  } catch (const std::exception& e) {
    return UnavailableError("gloo rendezvous in '" + c.rendezvous_dir + "' (prefix '" + c.rendezvous_prefix +
                            "') failed: " + e.what());
  }
}

}  // namespace switchml::bench
