// SwitchML backend: a switchml::Context per rank; the barrier is a one-element int32 all-reduce
// (no worker receives a result before every worker contributed).
#include <chrono>

#include "backend.h"
#include "switchml/switchml.h"

namespace switchml::bench {

namespace {

class SwitchMLBackend final : public Backend {
 public:
  explicit SwitchMLBackend(std::unique_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  uint32_t rank() const override { return ctx_->options().rank; }
  uint32_t num_workers() const override { return ctx_->options().num_workers; }
  Status AllReduceSum(const void* in, void* out, size_t count, DataType type) override {
    return ctx_->AllReduce(in, out, count, type);
  }
  Status Barrier() override {
    int32_t in = 1, out = 0;
    SWITCHML_RETURN_IF_ERROR(ctx_->AllReduce(&in, &out, 1, DataType::kInt32));
    if (out != int32_t(num_workers()))
      return InternalError("barrier all-reduce returned " + std::to_string(out) + ", want " +
                           std::to_string(num_workers()));
    return OkStatus();
  }
  std::optional<PacketCounters> Counters() const override {
    const Stats s = ctx_->GetStats();
    return PacketCounters{s.packets_sent, s.retransmissions};
  }
  bool quantizes_float32() const override { return true; }
  bool via_switch() const override { return true; }

 private:
  std::unique_ptr<Context> ctx_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateSwitchMLBackend(const BackendConfig& c) {
  // In the flags' words (Context::Create would name the Options fields).
  if (c.job_id != 0 && c.job_token.empty())
    return InvalidArgumentError("--job-id " + std::to_string(c.job_id) +
                                " needs the job's token: --job-token or SWITCHML_JOB_TOKEN");
  if (c.job_id == 0 && !c.job_token.empty())
    return InvalidArgumentError("--job-token (or SWITCHML_JOB_TOKEN) is set but --job-id (or SWITCHML_JOB_ID) "
                                "is not; give the job's id too");
  Options opt;
  opt.rank = c.rank;
  opt.num_workers = c.num_workers;
  opt.controller_address = c.controller;
  opt.bind_ip = c.bind_ip;
  opt.advertise_ip = c.advertise_ip;
  opt.num_worker_threads = c.threads;
  opt.window_packets = c.window;
  opt.elements_per_packet = c.elements_per_packet;
  opt.call_timeout = c.timeout;
  opt.job_id = c.job_id;
  opt.job_token = c.job_token;
  // TLS towards the controller from SWITCHML_TLS_* / SWITCHML_INSECURE, as the integrations.
  SWITCHML_ASSIGN_OR_RETURN(opt.tls, TlsOptionsFromEnvironment());
  SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::Create(opt));
  return std::unique_ptr<Backend>(new SwitchMLBackend(std::move(ctx)));
}

}  // namespace switchml::bench
