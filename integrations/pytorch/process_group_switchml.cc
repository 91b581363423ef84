#include "integrations/pytorch/process_group_switchml.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <stdexcept>
#include <utility>

namespace switchml::pytorch {

namespace {

// Marks a store value as "rank 0 could not provide an address; here is why".
constexpr char kErrorMarker = '!';

const char* ReduceOpName(c10d::ReduceOp op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNKNOWN";
  }
}

// The Python name of a dtype ("float64"), as users write it.
std::string DtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(t);
  }
}

// The dtype SwitchML reduces a tensor of dtype `t` in: itself for float32/int32, float32 for
// the 16-bit floats.
at::ScalarType WireType(at::ScalarType t) { return t == at::kInt ? at::kInt : at::kFloat; }

// A contiguous float32/int32 tensor to hand to SwitchML: `t` itself when it already is one,
// otherwise a fresh host copy (converted to the wire type). The caller copies the result back
// when the returned tensor is not `t`.
at::Tensor WireBuffer(const at::Tensor& t) {
  const at::ScalarType wire = WireType(t.scalar_type());
  if (t.scalar_type() == wire && t.is_contiguous()) return t;
  at::Tensor buffer = at::empty(t.sizes(), t.options().dtype(wire).memory_format(at::MemoryFormat::Contiguous));
  buffer.copy_(t);
  return buffer;
}

std::string JobName(const char* collective, size_t index, const at::Tensor& t) {
  return std::string(collective) + " of tensor " + std::to_string(index) + " (" +
         DtypeName(t.scalar_type()) + ", " + std::to_string(t.numel()) + " elements)";
}

}  // namespace

// ---- SwitchMLWork ----

SwitchMLWork::SwitchMLWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, op),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void SwitchMLWork::Complete(std::exception_ptr error) {
  // Waiters of wait() first, then the future, whose callbacks (DDP's bucket finalisation, user
  // .then() functions) run inline here.
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

// ---- ProcessGroupSwitchML ----

ProcessGroupSwitchML::ProcessGroupSwitchML(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                           int size, std::chrono::milliseconds timeout,
                                           SwitchMLConfig config)
    : c10d::ProcessGroup(rank, size) {
  TORCH_CHECK_VALUE(size >= 1 && size <= 256, "switchml: world size must be in [1, 256], got ", size);

  // Gloo for everything that is not an all-reduce. Its own key space in the store.
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
  gloo_options->devices.push_back(config.gloo_interface.empty()
                                      ? c10d::ProcessGroupGloo::createDefaultDevice()
                                      : c10d::ProcessGroupGloo::createDeviceForInterface(config.gloo_interface));
  gloo_options->threads = 2;
  gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", store),
                                                      rank, size, gloo_options);

  controller_address_ = ResolveControllerAddress(store, config.controller_address);

  switchml::Options options;
  options.rank = static_cast<uint32_t>(rank);
  options.num_workers = static_cast<uint32_t>(size);
  options.controller_address = controller_address_;
  if (config.num_worker_threads != 0) options.num_worker_threads = config.num_worker_threads;
  if (config.window_packets != 0) options.window_packets = config.window_packets;
  if (config.elements_per_packet != 0) options.elements_per_packet = config.elements_per_packet;
  if (config.job_timeout.count() > 0) options.job_timeout = config.job_timeout;
  options.bind_ip = config.bind_ip;
  options.advertise_ip = config.advertise_ip;
  options.job_id = config.job_id;
  options.job_token = config.job_token;
  if (switchml::Status s = options.Validate(); !s.ok()) {
    TORCH_CHECK_VALUE(false, "switchml: invalid backend settings: ", s.message());
  }
  auto context = switchml::Context::Create(options);
  TORCH_CHECK(context.ok(), "switchml: rank ", rank, " of ", size, " could not join the SwitchML job through ",
              "the controller at ", controller_address_, ": ", context.status().ToString());
  context_ = std::move(*context);

  completion_thread_ = std::thread([this] { CompletionLoop(); });
  init();
}

ProcessGroupSwitchML::~ProcessGroupSwitchML() {
  // Cancels jobs still queued or running: their handles complete with CANCELLED, so the
  // completion thread finishes every pending work (with that error) and then exits.
  context_.reset();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (completion_thread_.joinable()) completion_thread_.join();
}

std::string ProcessGroupSwitchML::ResolveControllerAddress(const c10::intrusive_ptr<c10d::Store>& store,
                                                           const std::string& own) {
  if (getRank() == 0) {
    if (own.empty()) {
      const std::string why =
          "rank 0 has no SwitchML controller address: set SWITCHML_CONTROLLER=host:port (the "
          "session service of `switchml switch`) at least on rank 0";
      const std::string value = kErrorMarker + why;
      store->set(kControllerStoreKey, std::vector<uint8_t>(value.begin(), value.end()));
      TORCH_CHECK(false, "switchml: ", why);
    }
    store->set(kControllerStoreKey, std::vector<uint8_t>(own.begin(), own.end()));
    return own;
  }
  if (!own.empty()) return own;
  // Blocks up to the store's timeout (the group timeout) for rank 0 to publish.
  const std::vector<uint8_t> value = store->get(kControllerStoreKey);
  std::string address(value.begin(), value.end());
  if (!address.empty() && address[0] == kErrorMarker) {
    TORCH_CHECK(false, "switchml: ", address.substr(1));
  }
  TORCH_CHECK(!address.empty(), "switchml: rank 0 published an empty controller address");
  return address;
}

void ProcessGroupSwitchML::CheckTensors(const std::vector<at::Tensor>& tensors, c10d::ReduceOp op,
                                        const char* collective) const {
  TORCH_CHECK_VALUE(!tensors.empty(), "switchml: ", collective, " needs at least one tensor");
  TORCH_CHECK_VALUE(op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG, "switchml: ", collective,
                    ": reduce op ", ReduceOpName(op), " is not supported (only SUM and AVG are)");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    TORCH_CHECK_VALUE(t.defined(), "switchml: ", collective, ": tensor ", i, " is undefined");
    TORCH_CHECK_VALUE(t.device().is_cpu(), "switchml: ", collective, ": tensor ", i, " is on ", t.device().str(),
                      "; the switchml backend reduces CPU tensors only");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "switchml: ", collective, ": tensor ", i,
                      " is not dense (layout ", t.layout(), "); only dense tensors are supported");
    const at::ScalarType type = t.scalar_type();
    TORCH_CHECK_TYPE(type == at::kFloat || type == at::kInt || type == at::kHalf || type == at::kBFloat16,
                     "switchml: ", collective, ": tensor ", i, " has unsupported dtype ", DtypeName(type),
                     "; supported: float32, int32, float16 and bfloat16 (the last two are reduced as float32)");
    TORCH_CHECK_VALUE(!(type == at::kInt && op.op_ == c10d::ReduceOp::AVG), "switchml: ", collective, ": tensor ", i,
                      ": AVG of int32 is not supported (the mean of integers is not an integer); use SUM and "
                      "divide");
  }
}

void ProcessGroupSwitchML::SubmitJob(const at::Tensor& buffer, std::string name, Pending& p) {
  if (buffer.numel() == 0) return;  // nothing to send; every rank skips it alike
  const switchml::DataType type =
      buffer.scalar_type() == at::kInt ? switchml::DataType::kInt32 : switchml::DataType::kFloat32;
  void* data = buffer.data_ptr();
  p.handles.push_back(context_->AllReduceAsync(data, data, static_cast<size_t>(buffer.numel()), type));
  p.job_names.push_back(std::move(name));
}

void ProcessGroupSwitchML::Enqueue(Pending p) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(p));
  }
  cv_.notify_one();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  CheckTensors(tensors, opts.reduceOp, "allreduce");
  const at::Tensor& first = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) {
    TORCH_CHECK_VALUE(tensors[i].scalar_type() == first.scalar_type() && tensors[i].sizes() == first.sizes(),
                      "switchml: allreduce: all tensors of one call must have the same dtype and shape; tensor ",
                      i, " is ", DtypeName(tensors[i].scalar_type()), tensors[i].sizes(), ", tensor 0 is ",
                      DtypeName(first.scalar_type()), first.sizes());
  }
  at::NoGradGuard no_grad;
  // Several local tensors are summed locally first, as ProcessGroupGloo does.
  at::Tensor buffer = WireBuffer(first);
  for (size_t i = 1; i < tensors.size(); ++i) buffer.add_(tensors[i]);

  Pending p;
  p.work = c10::make_intrusive<SwitchMLWork>(getRank(), c10d::OpType::ALLREDUCE, tensors);
  const bool avg = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  const bool writes_back = avg || tensors.size() > 1 || !buffer.is_same(first);
  if (writes_back) {
    p.finish = [buffer, outputs = tensors, avg, size = getSize()]() mutable {
      if (avg) buffer.div_(size);
      for (at::Tensor& t : outputs) {
        if (!t.is_same(buffer)) t.copy_(buffer);
      }
    };
  }
  std::lock_guard submit(submit_mu_);
  SubmitJob(buffer, JobName("allreduce", 0, first), p);
  c10::intrusive_ptr<c10d::Work> work = p.work;
  Enqueue(std::move(p));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  CheckTensors(tensors, opts.reduceOp, "allreduce_coalesced");
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> buffers;
  buffers.reserve(tensors.size());
  for (const at::Tensor& t : tensors) buffers.push_back(WireBuffer(t));

  Pending p;
  p.work = c10::make_intrusive<SwitchMLWork>(getRank(), c10d::OpType::ALLREDUCE_COALESCED, tensors);
  const bool avg = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  p.finish = [buffers, outputs = tensors, avg, size = getSize()]() mutable {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (avg) buffers[i].div_(size);
      if (!outputs[i].is_same(buffers[i])) outputs[i].copy_(buffers[i]);
    }
  };
  std::lock_guard submit(submit_mu_);
  for (size_t i = 0; i < tensors.size(); ++i) SubmitJob(buffers[i], JobName("allreduce_coalesced", i, tensors[i]), p);
  c10::intrusive_ptr<c10d::Work> work = p.work;
  Enqueue(std::move(p));
  return work;
}

void ProcessGroupSwitchML::CompletionLoop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      p = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::string error;
    for (size_t i = 0; i < p.handles.size(); ++i) {
      const switchml::Status s = p.handles[i].Wait();
      if (!s.ok() && error.empty()) {
        error = "switchml: " + p.job_names[i] + " failed on rank " + std::to_string(getRank()) + ": " + s.ToString();
      }
    }
    std::exception_ptr eptr;
    if (!error.empty()) {
      eptr = std::make_exception_ptr(std::runtime_error(error));
    } else if (p.finish) {
      try {
        at::NoGradGuard no_grad;
        p.finish();
      } catch (...) {
        eptr = std::current_exception();
      }
    }
    p.work->Complete(eptr);
    p = Pending();  // drop tensor references before reporting idle
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

// ---- Delegated to Gloo ----

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  return gloo_->broadcast(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  return gloo_->reduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  return gloo_->allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions& opts) {
  return gloo_->_allgather_base(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return gloo_->allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::GatherOptions& opts) {
  return gloo_->gather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ScatterOptions& opts) {
  return gloo_->scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                   std::vector<int64_t>& output_split_sizes,
                                                                   std::vector<int64_t>& input_split_sizes,
                                                                   const c10d::AllToAllOptions& opts) {
  return gloo_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                          int tag) {
  return gloo_->send(tensors, dst_rank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                          int tag) {
  return gloo_->recv(tensors, src_rank, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return gloo_->recvAnysource(tensors, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSwitchML::barrier(const c10d::BarrierOptions& opts) {
  {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  return gloo_->barrier(opts);
}

void ProcessGroupSwitchML::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  gloo_->monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace switchml::pytorch
