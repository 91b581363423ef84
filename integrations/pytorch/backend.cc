#include "backend.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <thread>
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

bool SwitchMLDtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kInt || t == at::kHalf || t == at::kBFloat16;
}
// The dtypes the inner Gloo group (torch 2.15's ProcessGroupGloo) takes, for all-reduce fallbacks
// (every op) and the delegated collectives; it fails others (int16, ...) only at wait(), with
// "Invalid scalar type", so the backend refuses them at the call (send/recv excepted: raw bytes).
bool GlooDtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16 || t == at::kChar ||
         t == at::kByte || t == at::kInt || t == at::kLong || t == at::kBool;
}
bool IntegralDtype(at::ScalarType t) { return at::isIntegralType(t, /*includeBool=*/true); }

// The fallback reasons, in the order stats() lists them (key = "fallback_" + reason).
constexpr const char* kFallbackReasons[] = {"op_max",         "op_min",        "op_product",   "op_band",
                                            "op_bor",         "op_bxor",       "dtype_float64", "dtype_int64",
                                            "dtype_int8",     "dtype_uint8",   "dtype_bool",
                                            "dtype_float16",  "dtype_bfloat16"};

// The dtype SwitchML reduces a tensor of dtype `t` in: itself for float32/int32, float32 for
// the 16-bit floats.
at::ScalarType WireType(at::ScalarType t) { return t == at::kInt ? at::kInt : at::kFloat; }

// Whether SwitchML can reduce `t` in place (no staging copy).
bool InPlace(const at::Tensor& t) { return t.scalar_type() == WireType(t.scalar_type()) && t.is_contiguous(); }

at::Tensor NewWireBuffer(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().dtype(WireType(t.scalar_type())).memory_format(at::MemoryFormat::Contiguous));
}

// [first byte, last byte + 1) of the elements of `t` (strides are never negative in torch);
// {0, 0} for an empty tensor, which overlaps nothing.
std::pair<uintptr_t, uintptr_t> ByteSpan(const at::Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t last = 0;  // offset of the last element, in elements
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {begin, begin + static_cast<uintptr_t>((last + 1) * t.element_size())};
}

std::string JobName(const char* collective, size_t index, const at::Tensor& t) {
  return std::string(collective) + " of tensor " + std::to_string(index) + " (" +
         DtypeName(t.scalar_type()) + ", " + std::to_string(t.numel()) + " elements)";
}

}  // namespace

// ---- SwitchMLWork ----

SwitchMLWork::SwitchMLWork(int rank, c10d::OpType op, std::vector<at::Tensor> outputs,
                           std::vector<c10::Device> devices)
    : c10d::Work(rank, op),
      outputs_(std::move(outputs)),
      on_device_(!devices.empty()),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                       std::move(devices))) {}

bool SwitchMLWork::wait(std::chrono::milliseconds timeout) {
  const bool done = c10d::Work::wait(timeout);  // throws the call's error
  synchronize();
  return done;
}

void SwitchMLWork::synchronize() {
  // The future is complete: its wait() makes the current streams wait on its events.
  if (on_device_) future_->wait();
}

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

// ---- SwitchMLBackend ----

SwitchMLBackend::SwitchMLBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout, SwitchMLConfig config,
                                 c10::intrusive_ptr<c10d::Backend> gloo, c10::intrusive_ptr<c10d::Backend> host)
    : c10d::Backend(rank, size),
      timeout_(timeout),
      gloo_(std::move(gloo)),
      mark_timeout_ms_(timeout.count()),
      host_(std::move(host)) {
  for (const char* reason : kFallbackReasons) fallback_counts_.emplace_back(reason, 0);
  TORCH_CHECK_VALUE(size >= 1 && size <= 256, "switchml: world size must be in [1, 256], got ", size);
  TORCH_CHECK_VALUE(gloo_ && gloo_->getRank() == rank && gloo_->getSize() == size,
                    "switchml: the inner Gloo group must have this group's rank and size");

  controller_address_ = ResolveControllerAddress(store, config.controller_address);
  CheckSettingsAgree(store, config);

  switchml::Options options;
  options.rank = static_cast<uint32_t>(rank);
  options.num_workers = static_cast<uint32_t>(size);
  options.controller_address = controller_address_;
  if (config.num_worker_threads != 0) options.num_worker_threads = config.num_worker_threads;
  if (config.window_packets != 0) options.window_packets = config.window_packets;
  if (config.elements_per_packet != 0) options.elements_per_packet = config.elements_per_packet;
  if (config.call_timeout.count() > 0) options.call_timeout = config.call_timeout;
  options.bind_ip = config.bind_ip;
  options.advertise_ip = config.advertise_ip;
  options.job_id = config.job_id;
  options.job_token = config.job_token;
  // TLS towards the controller: SWITCHML_TLS_CA, SWITCHML_TLS_CERT, SWITCHML_TLS_KEY,
  // SWITCHML_TLS_SERVER_NAME, SWITCHML_INSECURE (the library's one parser of them).
  switchml::StatusOr<switchml::TlsOptions> tls = switchml::TlsOptionsFromEnvironment();
  TORCH_CHECK_VALUE(tls.ok(), "switchml: ", tls.status().message());
  options.tls = *tls;
  // Only the failover's recovery needs them (config.failover is equal on every rank: checked).
  options.shadow_copies = config.failover && host_;
  // The queue holds calls back instead (StartReadyLocked): AllReduceAsync never blocks.
  options.max_calls_in_flight = 2 * kMaxJobsInFlight;
  TORCH_CHECK_VALUE(config.staging_chunk_bytes >= 0, "switchml: the staging chunk size must not be negative, got ",
                    config.staging_chunk_bytes);
  if (config.staging_chunk_bytes > 0) chunk_bytes_ = config.staging_chunk_bytes;
  half_via_switch_ = config.half_via_switch;
  if (switchml::Status s = options.Validate(); !s.ok()) {
    TORCH_CHECK_VALUE(false, "switchml: invalid backend settings: ", s.message());
  }
  auto context = switchml::Context::Create(options);
  TORCH_CHECK(context.ok(), "switchml: rank ", rank, " of ", size, " could not join the SwitchML job through ",
              "the controller at ", controller_address_, ": ", context.status().ToString());
  context_ = std::move(*context);
  rejoin_enabled_ = config.rejoin;
  if (config.rejoin_min_backoff.count() > 0) rejoin_options_.min_backoff = config.rejoin_min_backoff;
  if (config.rejoin_max_backoff.count() > 0) rejoin_options_.max_backoff = config.rejoin_max_backoff;
  rejoin_options_.poll_every_calls = 1;  // at every barrier() on the host path (RejoinAtBarrier)
  TORCH_CHECK_VALUE(rejoin_options_.min_backoff <= rejoin_options_.max_backoff,
                    "switchml: SWITCHML_REJOIN_MIN_BACKOFF_MS (", rejoin_options_.min_backoff.count(),
                    ") must not exceed SWITCHML_REJOIN_MAX_BACKOFF_MS (", rejoin_options_.max_backoff.count(), ")");
  if (config.failover && host_) {
    TORCH_CHECK_VALUE(host_->getRank() == rank && host_->getSize() == size,
                      "switchml: the host Gloo group must have this group's rank and size");
    host_timeout_ms_ = timeout_.count();
    host_path_ = MakeGlooHostPath(host_, size, host_timeout_ms_);
    failover_ = std::make_unique<switchml::Failover>(*context_, *host_path_);
    failover_enabled_ = true;
  } else {
    host_.reset();
  }
  init();
}

SwitchMLBackend::~SwitchMLBackend() {
  ProbeAtExit();  // unless shutdown() did
  // Calls still waiting to start fail (closing_, when an earlier call completes); destroying
  // the context cancels jobs still queued or running: their handles complete with CANCELLED
  // (every SwitchML callback has run when the context is gone), which completes their calls.
  // Gloo fallbacks complete within Gloo's own timeout. Their callbacks use this object: wait.
  // The staging thread stops first (chunks still waiting for their device copy then fail below).
  {
    std::lock_guard lock(stage_mu_);
    stage_stop_ = true;
  }
  stage_cv_.notify_all();
  if (stage_thread_.joinable()) stage_thread_.join();
  std::vector<std::shared_ptr<Call>> started;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    StartReadyLocked(started);  // fails every call not started yet
  }
  for (auto& c : started) Arm(c);
  StopRecoveryThread();  // a recovery under way finishes first (it needs the context)
  rejoin_.reset();
  failover_.reset();
  context_.reset();
  std::unique_lock lock(mu_);
  progress_cv_.wait(lock, [&] { return queue_.empty() && completing_ == 0; });
}

std::string SwitchMLBackend::ResolveControllerAddress(const c10::intrusive_ptr<c10d::Store>& store,
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

void SwitchMLBackend::CheckSettingsAgree(const c10::intrusive_ptr<c10d::Store>& store,
                                         const SwitchMLConfig& config) {
  const std::string own = "SWITCHML_HALF_VIA_SWITCH=" + std::to_string(config.half_via_switch ? 1 : 0) +
                          " SWITCHML_STAGING_CHUNK_BYTES=" + std::to_string(config.staging_chunk_bytes) +
                          " SWITCHML_REJOIN=" + std::to_string(config.rejoin ? 1 : 0);
  if (getRank() == 0) {
    store->set(kSettingsStoreKey, std::vector<uint8_t>(own.begin(), own.end()));
    return;
  }
  // Blocks up to the store's timeout (the group timeout) for rank 0 to publish.
  const std::vector<uint8_t> value = store->get(kSettingsStoreKey);
  const std::string rank0(value.begin(), value.end());
  TORCH_CHECK_VALUE(own == rank0, "switchml: rank ", getRank(), " has ", own, " but rank 0 has ", rank0,
                    "; every rank must use the same values (they decide which calls go to the switch)");
}

SwitchMLBackend::Route SwitchMLBackend::CheckTensors(const std::vector<at::Tensor>& tensors,
                                                               c10d::ReduceOp op, const char* collective) const {
  TORCH_CHECK_VALUE(!tensors.empty(), "switchml: ", collective, " needs at least one tensor");
  const auto kind = op.op_;
  const bool sum_or_avg = kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::AVG;
  const bool bitwise = kind == c10d::ReduceOp::BAND || kind == c10d::ReduceOp::BOR || kind == c10d::ReduceOp::BXOR;
  TORCH_CHECK_VALUE(sum_or_avg || bitwise || kind == c10d::ReduceOp::MAX || kind == c10d::ReduceOp::MIN ||
                        kind == c10d::ReduceOp::PRODUCT,
                    "switchml: ", collective, ": reduce op ", ReduceOpName(op),
                    " is not supported (SUM, AVG, MAX, MIN, PRODUCT, BAND, BOR and BXOR are)");
  Route route;
  if (!sum_or_avg) {
    route.reason = "op_" + c10::str(ReduceOpName(op));
    std::transform(route.reason.begin(), route.reason.end(), route.reason.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    route.words = std::string("with op ") + ReduceOpName(op);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    TORCH_CHECK_VALUE(t.defined(), "switchml: ", collective, ": tensor ", i, " is undefined");
    TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "switchml: ", collective, ": tensor ", i,
                      " is on ", t.device().str(), "; the switchml backend reduces CPU and CUDA tensors only");
    TORCH_CHECK_VALUE(t.device() == tensors[0].device(), "switchml: ", collective, ": tensor ", i, " is on ",
                      t.device().str(), " but tensor 0 is on ", tensors[0].device().str(),
                      "; the tensors of one call must be on one device");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "switchml: ", collective, ": tensor ", i,
                      " is not dense (layout ", t.layout(), "); only dense tensors are supported");
    const at::ScalarType type = t.scalar_type();
    TORCH_CHECK_VALUE(!(kind == c10d::ReduceOp::AVG && IntegralDtype(type)), "switchml: ", collective, ": tensor ", i,
                      ": AVG of ", DtypeName(type),
                      " is not supported (the mean of integers is not an integer); use SUM and divide");
    TORCH_CHECK_VALUE(!(bitwise && !IntegralDtype(type)), "switchml: ", collective, ": tensor ", i, ": ",
                      ReduceOpName(op), " needs an integer dtype, got ", DtypeName(type));
    const bool half = type == at::kHalf || type == at::kBFloat16;
    if (route.reason.empty() && (!SwitchMLDtype(type) || (half && !half_via_switch_))) {
      route.reason = "dtype_" + DtypeName(type);
      route.words = "of " + DtypeName(type);
    }
  }
  if (route.reason.empty()) return route;  // SwitchML
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::ScalarType type = tensors[i].scalar_type();
    TORCH_CHECK_TYPE(GlooDtype(type), "switchml: ", collective, ": tensor ", i, " has unsupported dtype ",
                     DtypeName(type), " for ", ReduceOpName(op),
                     "; SwitchML reduces float32, int32, float16 and bfloat16 with SUM and AVG, and the "
                     "inner Gloo group takes the rest for float32, float64, float16, bfloat16, int8, uint8, "
                     "int32, int64 and bool only");
  }
  return route;
}

void SwitchMLBackend::SubmitJob(const at::Tensor& buffer, std::string name, Call& c) {
  if (buffer.numel() == 0) return;  // nothing to send; every rank skips it alike
  if (path_ == Path::kHost) {
    // After a switch failure (failover.cc): the host group, in call order like every rank.
    std::vector<at::Tensor> t = {buffer};
    c.gloo_works.push_back(host_->allreduce(t));
    failover_host_calls_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  TORCH_CHECK(path_ != Path::kFailed, "switchml: ", name, ": ", failover_error_);
  ++handles_unsettled_;
  c.job_buffers.push_back(buffer);
  const switchml::DataType type =
      buffer.scalar_type() == at::kInt ? switchml::DataType::kInt32 : switchml::DataType::kFloat32;
  void* data = buffer.data_ptr();
  // Never blocks: StartReadyLocked keeps jobs_in_flight_ + max_jobs <= kMaxJobsInFlight.
  c.handles.push_back(context_->AllReduceAsync(data, data, static_cast<size_t>(buffer.numel()), type));
  c.job_names.push_back(std::move(name));
}

bool SwitchMLBackend::ConflictsLocked(const Call& c, size_t count) const {
  for (size_t i = 0; i < count && i < queue_.size(); ++i) {
    const Call& earlier = *queue_[i];
    if (&earlier == &c) break;
    // The library orders these itself: on the switch, on the same context (not on the host
    // path after a failover, nor a call on a context before a return to the switch).
    if (earlier.direct && c.direct && path_ == Path::kSwitch && earlier.started && earlier.epoch == path_epoch_) {
      continue;
    }
    if (earlier.staged && earlier.staged == c.staged) continue;  // chunks of one call: disjoint
    for (const Span& a : earlier.spans) {
      for (const Span& b : c.spans) {
        if (a.begin < b.end && b.begin < a.end) return true;
      }
    }
  }
  return false;
}

void SwitchMLBackend::StartReadyLocked(std::vector<std::shared_ptr<Call>>& started) {
  for (size_t j = 0; j < queue_.size(); ++j) {
    Call& c = *queue_[j];
    if (c.started) continue;
    if (closing_) {
      c.started = true;
      c.error = std::make_exception_ptr(
          std::runtime_error("switchml: the process group was destroyed before this all-reduce started"));
      started.push_back(queue_[j]);
      continue;
    }
    // A call that must wait holds back every later one: SwitchML job order = call order. So
    // does one whose jobs could make AllReduceAsync block (a completion callback, on the
    // SwitchML thread the pending jobs need, may be waiting for mu_).
    // A staged chunk whose device copy is not done holds back the calls after it likewise.
    if (!c.ready || ConflictsLocked(c, j) || jobs_in_flight_ + c.max_jobs > kMaxJobsInFlight) return;
    // While the failover recovers, nothing goes to the switch (FinishRecovery starts them).
    if (path_ == Path::kRecovering) return;
    c.started = true;
    c.epoch = path_epoch_;
    if (!c.error) {  // set: the staging thread gave up on its device copy
      try {
        at::NoGradGuard no_grad;
        c.start(c);
      } catch (...) {
        c.error = std::current_exception();
      }
    }
    jobs_in_flight_ += c.handles.size();
    started.push_back(queue_[j]);
  }
}

namespace {
// Set while this thread completes a call's work (its future callbacks run then): what must
// not wait for other calls there (WaitLocked).
thread_local bool tls_completing = false;
}  // namespace

void SwitchMLBackend::Arm(const std::shared_ptr<Call>& c) {
  c->parts.store(c->handles.size() + c->gloo_works.size() + 1, std::memory_order_relaxed);
  const int rank = getRank();
  for (size_t i = 0; i < c->handles.size(); ++i) {
    // On the SwitchML worker thread that finished the job (or here): short, never blocks long.
    c->handles[i].OnComplete([this, c, i, rank](const switchml::Status& s) {
      if (SettleHandle(c, i, s)) return;  // parked for the failover's recovery
      if (!s.ok()) {
        std::lock_guard lock(c->part_mu);
        if (!c->part_error) {
          c->part_error = std::make_exception_ptr(std::runtime_error(
              "switchml: " + c->job_names[i] + " failed on rank " + std::to_string(rank) + ": " + s.ToString()));
        }
      }
      PartDone(c);
    });
  }
  for (auto& w : c->gloo_works) {
    // On a Gloo thread when the work finishes (Gloo's timeout bounds it), or here.
    w->getFuture()->addCallback([this, c](c10::ivalue::Future& f) {
      if (f.hasError()) {
        std::lock_guard lock(c->part_mu);
        if (!c->part_error) c->part_error = f.exception_ptr();
      }
      PartDone(c);
    });
  }
  PartDone(c);  // the arming part
}

void SwitchMLBackend::PartDone(const std::shared_ptr<Call>& c) {
  if (c->parts.fetch_sub(1, std::memory_order_acq_rel) == 1) CompleteCall(c);
}

void SwitchMLBackend::CompleteCall(const std::shared_ptr<Call>& c) {
  std::exception_ptr eptr = c->error;
  {
    std::lock_guard lock(c->part_mu);
    if (!eptr) eptr = c->part_error;
  }
  const bool outer = !tls_completing;
  tls_completing = true;
  auto run_finish = [&] {
    if (!eptr && c->finish) {
      try {
        at::NoGradGuard no_grad;
        c->finish();
      } catch (...) {
        eptr = std::current_exception();
      }
    }
  };
  if (c->ops && !c->staged) {
    // A Gloo fallback on device tensors: its finish (AVG division) and its future's event go on
    // the staging stream, after the Gloo works' own events.
    c->ops->WithStagingStream(c->device, [&] {
      for (auto& w : c->gloo_works) w->getFuture()->wait();  // complete: no host wait
      run_finish();
      c->ops->CallDone(c->device, c->spans);
    });
  } else {
    run_finish();  // staged chunks: the copy of the chunk back to the device
  }
  std::vector<std::shared_ptr<Call>> started;
  {
    // The call's effects on its tensors are final: calls waiting for it may start.
    std::lock_guard lock(mu_);
    queue_.erase(std::find(queue_.begin(), queue_.end(), c));
    jobs_in_flight_ -= c->handles.size();
    ++completing_;
    StartReadyLocked(started);
  }
  progress_cv_.notify_all();
  for (auto& next : started) Arm(next);
  // Drop tensor references before reporting idle (the work keeps its outputs).
  c->start = nullptr;
  c->finish = nullptr;
  c->gloo_works.clear();
  if (c->staged) {
    StagedPartDone(c->staged, eptr);
  } else if (c->ops) {
    c->ops->WithStagingStream(c->device, [&] { c->work->Complete(eptr); });
  } else {
    c->work->Complete(eptr);
  }
  if (outer) tls_completing = false;
  // Notified under the lock: the destructor may return as soon as it sees completing_ == 0.
  std::lock_guard lock(mu_);
  --completing_;
  progress_cv_.notify_all();
}

void SwitchMLBackend::WaitLocked(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                                      const std::string& what) {
  if (ready()) return;
  TORCH_CHECK(!tls_completing, "switchml: ", what,
              " was called from a work's callback (future.then, DDP comm hook) while an earlier all-reduce it "
              "must wait for is pending; that would wait for the thread running the callback");
  TORCH_CHECK(progress_cv_.wait_for(lock, timeout_, ready), "switchml: ", what,
              " waited longer than the group timeout (", timeout_.count(),
              " ms) for earlier all-reduces to complete");
}

void SwitchMLBackend::CountFallback(const Route& route, const char* collective) {
  bool first = false;
  {
    std::lock_guard lock(fallback_mu_);
    fallback_total_++;
    for (auto& [reason, count] : fallback_counts_) {
      if (reason == route.reason) first = count++ == 0;
    }
  }
  if (first) {
    std::fprintf(stderr,
                 "switchml: rank %d: %s %s goes to the inner Gloo group (SwitchML aggregates float32 and int32 "
                 "with SUM and AVG only; float16/bfloat16 too, as float32, with SWITCHML_HALF_VIA_SWITCH=1); "
                 "stats()[\"fallback_%s\"] counts these calls; this message is printed once\n",
                 getRank(), collective, route.words.c_str(), route.reason.c_str());
  }
}

std::vector<std::pair<std::string, uint64_t>> SwitchMLBackend::FallbackCounts() const {
  std::lock_guard lock(fallback_mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  out.emplace_back("fallback_allreduces", fallback_total_);
  for (const auto& [reason, count] : fallback_counts_) out.emplace_back("fallback_" + reason, count);
  return out;
}

std::shared_ptr<SwitchMLBackend::Call> SwitchMLBackend::NewCall(c10d::OpType op,
                                                               const std::vector<at::Tensor>& tensors) const {
  auto c = std::make_shared<Call>();
  std::vector<c10::Device> devices;
  if (!tensors.empty() && !tensors[0].device().is_cpu()) {
    c->device = tensors[0].device();
    c->ops = StagingOps(c->device);
    devices = c->ops->FutureDevices(c->device);
  }
  c->work = c10::make_intrusive<SwitchMLWork>(getRank(), op, tensors, std::move(devices));
  for (const at::Tensor& t : tensors) {
    const auto [begin, end] = ByteSpan(t);
    c->spans.push_back({begin, end});
  }
  return c;
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::EnqueueSwitchML(std::shared_ptr<Call> c) {
  c10::intrusive_ptr<c10d::Work> work = c->work;
  std::vector<std::shared_ptr<Call>> started;
  {
    std::lock_guard lock(mu_);
    ++switch_calls_;  // the next probe must run (ProbeSwitch)
    queue_.push_back(std::move(c));
    StartReadyLocked(started);  // starts it now unless an earlier call holds it back
  }
  for (auto& s : started) Arm(s);
  return work;
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::RunOnGloo(std::shared_ptr<Call> c, const Route& route,
                                                               const char* collective) {
  c10::intrusive_ptr<c10d::Work> work = c->work;
  ProbeSwitch(collective);
  {
    std::unique_lock lock(mu_);
    // Issued now, in call order on every rank (as every Gloo collective), once the earlier calls
    // on the same memory have completed; later overlapping calls wait for this one (the queue).
    WaitLocked(lock, [&] { return !ConflictsLocked(*c, queue_.size()); },
               std::string(collective) + " " + route.words + " (Gloo fallback)");
    // Device tensors: the current stream (Gloo's copies wait for it) waits for the copies back of
    // completed calls on this memory.
    if (c->ops) c->ops->WaitForEarlier(c->device, c->spans);
    {
      at::NoGradGuard no_grad;
      c->start(*c);  // a throw (Gloo rejecting the call) reaches the caller; nothing is queued
    }
    c->started = true;
    queue_.push_back(c);
  }
  CountFallback(route, collective);
  Arm(c);
  return work;
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  const Route route = CheckTensors(tensors, opts.reduceOp, "allreduce");
  const at::Tensor& first = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) {
    TORCH_CHECK_VALUE(tensors[i].scalar_type() == first.scalar_type() && tensors[i].sizes() == first.sizes(),
                      "switchml: allreduce: all tensors of one call must have the same dtype and shape; tensor ",
                      i, " is ", DtypeName(tensors[i].scalar_type()), tensors[i].sizes(), ", tensor 0 is ",
                      DtypeName(first.scalar_type()), first.sizes());
  }
  const bool avg = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  const int size = getSize();
  if (route.reason.empty()) {
    if (DeviceOps* ops = StagingOps(first.device())) {
      return StageCall(c10d::OpType::ALLREDUCE, tensors, {StageTensors{tensors, tensors}}, avg, "allreduce", ops);
    }
  }
  std::shared_ptr<Call> c = NewCall(c10d::OpType::ALLREDUCE, tensors);

  if (!route.reason.empty()) {
    c10d::AllreduceOptions gloo_opts = opts;
    if (avg) gloo_opts.reduceOp = c10d::ReduceOp::SUM;  // Gloo has no AVG: SUM, then divide
    c->start = [this, tensors, gloo_opts, avg, size](Call& call) mutable {
      call.gloo_works.push_back(gloo_->allreduce(tensors, gloo_opts));
      if (avg) {
        call.finish = [tensors, size] {
          for (const at::Tensor& t : tensors) t.div_(size);
        };
      }
    };
    return RunOnGloo(std::move(c), route, "all_reduce");
  }

  c->max_jobs = 1;
  if (tensors.size() == 1 && InPlace(first)) {
    // The library reduces the caller's tensor in place: direct unless AVG divides afterwards.
    c->direct = !avg;
    c->start = [this, buffer = first, avg, size](Call& call) {
      SubmitJob(buffer, JobName("allreduce", 0, buffer), call);
      if (avg) call.finish = [buffer, size] { buffer.div_(size); };
    };
  } else {
    // Staged: a float32/int32 host buffer filled when the call starts (so after every earlier
    // call on these tensors completed), several local tensors summed into it, as Gloo does.
    c->start = [this, tensors, avg, size](Call& call) {
      at::Tensor buffer = NewWireBuffer(tensors[0]);
      buffer.copy_(tensors[0]);
      for (size_t i = 1; i < tensors.size(); ++i) buffer.add_(tensors[i]);
      SubmitJob(buffer, JobName("allreduce", 0, tensors[0]), call);
      call.finish = [buffer, outputs = tensors, avg, size]() mutable {
        if (avg) buffer.div_(size);
        for (at::Tensor& t : outputs) t.copy_(buffer);
      };
    };
  }
  return EnqueueSwitchML(std::move(c));
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const Route route = CheckTensors(tensors, opts.reduceOp, "allreduce_coalesced");
  const bool avg = opts.reduceOp.op_ == c10d::ReduceOp::AVG;
  const int size = getSize();
  if (route.reason.empty()) {
    if (DeviceOps* ops = StagingOps(tensors[0].device())) {
      std::vector<StageTensors> items;
      for (const at::Tensor& t : tensors) items.push_back(StageTensors{{t}, {t}});
      return StageCall(c10d::OpType::ALLREDUCE_COALESCED, tensors, std::move(items), avg, "allreduce_coalesced",
                       ops);
    }
  }
  std::shared_ptr<Call> c = NewCall(c10d::OpType::ALLREDUCE_COALESCED, tensors);

  if (!route.reason.empty()) {
    // One Gloo all-reduce per tensor (Gloo's own coalesced call needs a single dtype).
    c10d::AllreduceOptions gloo_opts;
    gloo_opts.reduceOp = avg ? c10d::ReduceOp(c10d::ReduceOp::SUM) : opts.reduceOp;
    gloo_opts.timeout = opts.timeout;
    c->start = [this, tensors, gloo_opts, avg, size](Call& call) {
      for (const at::Tensor& t : tensors) {
        std::vector<at::Tensor> one = {t};
        call.gloo_works.push_back(gloo_->allreduce(one, gloo_opts));
      }
      if (avg) {
        call.finish = [tensors, size] {
          for (const at::Tensor& t : tensors) t.div_(size);
        };
      }
    };
    return RunOnGloo(std::move(c), route, "all_reduce_coalesced");
  }

  TORCH_CHECK_VALUE(tensors.size() <= kMaxJobsInFlight, "switchml: allreduce_coalesced takes at most ",
                    kMaxJobsInFlight, " tensors (one SwitchML call each), got ", tensors.size());
  c->max_jobs = tensors.size();
  bool all_in_place = true;
  for (const at::Tensor& t : tensors) all_in_place = all_in_place && InPlace(t);
  c->direct = all_in_place && !avg;
  c->start = [this, tensors, avg, size](Call& call) {
    // Every staging copy first, then every submission: nothing can throw between two jobs.
    std::vector<at::Tensor> buffers;
    buffers.reserve(tensors.size());
    for (const at::Tensor& t : tensors) {
      if (InPlace(t)) {
        buffers.push_back(t);
      } else {
        buffers.push_back(NewWireBuffer(t));
        buffers.back().copy_(t);
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      SubmitJob(buffers[i], JobName("allreduce_coalesced", i, tensors[i]), call);
    }
    if (avg || !call.direct) {
      call.finish = [buffers, outputs = tensors, avg, size]() mutable {
        for (size_t i = 0; i < outputs.size(); ++i) {
          if (avg) buffers[i].div_(size);
          if (!outputs[i].is_same(buffers[i])) outputs[i].copy_(buffers[i]);
        }
      };
    }
  };
  return EnqueueSwitchML(std::move(c));
}

// ---- Device staging (staging.h) ----

DeviceOps* SwitchMLBackend::StagingOps(const c10::Device& device) const {
  if (device.is_cpu()) return fake_ops_.get();  // null outside tests: the CPU path
  std::lock_guard lock(ops_mu_);
  if (!cuda_ops_) cuda_ops_ = MakeStreamDeviceOps(device.type());
  return cuda_ops_.get();
}

void SwitchMLBackend::EnableTestStaging(int64_t chunk_bytes, std::chrono::milliseconds mark_timeout) {
  TORCH_CHECK_VALUE(chunk_bytes >= 4, "switchml: the staging chunk must hold at least one element (4 bytes), got ",
                    chunk_bytes);
  chunk_bytes_ = chunk_bytes;
  mark_timeout_ms_ = mark_timeout.count();
  fake_ops_ = std::make_unique<FakeDeviceOps>();
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::StageCall(c10d::OpType op, const std::vector<at::Tensor>& tensors,
                                                          std::vector<StageTensors> items, bool avg,
                                                          const char* collective, DeviceOps* ops) {
  const c10::Device device = tensors[0].device();
  auto s = std::make_shared<Staged>();
  s->work = c10::make_intrusive<SwitchMLWork>(getRank(), op, tensors, ops->FutureDevices(device));
  s->ops = ops;
  s->device = device;
  for (const at::Tensor& t : tensors) {
    const auto [begin, end] = ByteSpan(t);
    s->spans.push_back({begin, end});
  }
  // Host buffers first (pinned allocation may take a while): nothing below blocks but the wait
  // for earlier calls on the same memory.
  std::vector<at::Tensor> hosts;
  for (const StageTensors& item : items) {
    hosts.push_back(ops->PinnedEmpty(item.inputs[0].numel(), WireType(item.inputs[0].scalar_type())));
  }
  const int size = getSize();
  s->parts.store(1, std::memory_order_relaxed);  // the queuing part
  std::vector<at::Tensor> landing(items.size());  // per item: where the chunks land on the device
  std::exception_ptr queue_error;
  {
    at::NoGradGuard no_grad;
    std::unique_lock lock(mu_);
    // A call on memory an earlier pending call uses waits for it (host; bounded by the group
    // timeout), then the current stream waits for the copies back of completed ones (an event).
    ++switch_calls_;  // the next probe must run (ProbeSwitch)
    Call probe;
    probe.spans = s->spans;
    WaitLocked(lock, [&] { return !ConflictsLocked(probe, queue_.size()); },
               std::string(collective) + " on " + device.str());
    ops->WaitForEarlier(device, s->spans);
    bool first_chunk = true;
    try {
      for (size_t k = 0; k < items.size(); ++k) {
        const StageTensors& item = items[k];
        const at::Tensor& in0 = item.inputs[0];
        if (in0.numel() == 0) continue;  // nothing to send; every rank skips it alike
        // The wire buffer on the device (on the current stream): the tensor itself when it can be
        // reduced in place, else a float32/int32 contiguous copy (with the local sum).
        const bool in_place = item.inputs.size() == 1 && item.outputs.size() == 1 && InPlace(in0);
        at::Tensor wire = in_place ? in0.view({-1}) : NewWireBuffer(in0);
        if (!in_place) {
          wire.copy_(in0);
          for (size_t i = 1; i < item.inputs.size(); ++i) wire.add_(item.inputs[i]);
          wire = wire.view({-1});
        }
        landing[k] = wire;
        const auto chunks = StagingChunks(wire.numel(), chunk_bytes_);
        for (size_t j = 0; j < chunks.size(); ++j) {
          const auto [offset, count] = chunks[j];
          at::Tensor host = hosts[k].narrow(0, offset, count);
          at::Tensor dev = wire.narrow(0, offset, count);
          auto c = std::make_shared<Call>();
          c->work = s->work;
          c->spans = s->spans;
          c->ready = false;
          c->ops = ops;
          c->device = device;
          c->staged = s;
          c->max_jobs = 1;
          std::string name = JobName(collective, k, in0) + " on " + device.str();
          if (chunks.size() > 1) name += ", chunk " + std::to_string(j + 1) + " of " + std::to_string(chunks.size());
          c->start = [this, host, name](Call& call) { SubmitJob(host, name, call); };
          c->finish = [host, dev, ops, avg, size] {
            if (avg) host.div_(size);
            ops->CopyOnStagingStream(dev, host);
          };
          std::unique_ptr<DeviceMark> mark = ops->CopyToHost(host, dev);
          s->parts.fetch_add(1, std::memory_order_relaxed);
          queue_.push_back(c);
          {
            std::lock_guard stage_lock(stage_mu_);
            if (first_chunk && !stage_thread_.joinable()) stage_thread_ = std::thread([this] { StagingThread(); });
            first_chunk = false;
            stage_queue_.push_back(StageItem{std::move(c), std::move(mark), std::move(name)});
          }
        }
      }
    } catch (...) {
      // A device error while staging: the work fails (the chunks queued so far still run; this
      // rank's later SwitchML calls no longer match the other ranks').
      queue_error = std::current_exception();
    }
  }
  stage_cv_.notify_all();
  // After every chunk: the landing buffers into the outputs that are not them (several tensors,
  // dtype conversion, non-contiguous), on the staging stream.
  s->finish = [items = std::move(items), landing, ops] {
    for (size_t k = 0; k < items.size(); ++k) {
      if (!landing[k].defined()) continue;
      for (const at::Tensor& out : items[k].outputs) {
        if (out.data_ptr() == landing[k].data_ptr() && out.is_contiguous() && out.scalar_type() == landing[k].scalar_type()) {
          continue;  // reduced in place
        }
        ops->CopyOnStagingStream(out, landing[k].view(out.sizes()));
      }
    }
  };
  c10::intrusive_ptr<c10d::Work> work = s->work;
  StagedPartDone(s, queue_error);  // the queuing part: completes the work now if it has no chunks
  return work;
}

void SwitchMLBackend::StagedPartDone(const std::shared_ptr<Staged>& s, std::exception_ptr error) {
  if (error) {
    std::lock_guard lock(s->mu);
    if (!s->error) s->error = error;
  }
  if (s->parts.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::exception_ptr eptr;
  {
    std::lock_guard lock(s->mu);
    eptr = s->error;
  }
  // With the staging stream current: the copies back were enqueued there, so the future's event
  // (recorded there by markCompleted) covers them.
  s->ops->WithStagingStream(s->device, [&] {
    if (!eptr && s->finish) {
      try {
        at::NoGradGuard no_grad;
        s->finish();
      } catch (...) {
        eptr = std::current_exception();
      }
    }
    s->ops->CallDone(s->device, s->spans);
    s->finish = nullptr;
    s->work->Complete(eptr);
  });
}

void SwitchMLBackend::StagingThread() {
  for (;;) {
    StageItem item;
    {
      std::unique_lock lock(stage_mu_);
      stage_cv_.wait(lock, [&] { return stage_stop_ || !stage_queue_.empty(); });
      if (stage_stop_) return;  // the destructor fails the chunks still waiting
      item = std::move(stage_queue_.front());
      stage_queue_.pop_front();
    }
    // Poll the chunk's device→host copy (an event query never blocks), backing off to 1 ms.
    std::exception_ptr error;
    const int64_t timeout_ms = mark_timeout_ms_;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto pause = std::chrono::microseconds(10);
    while (!item.mark->Query()) {
      if (stage_stop_) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        error = std::make_exception_ptr(std::runtime_error(
            "switchml: the device-to-host copy of " + item.name + " did not finish within " +
            std::to_string(timeout_ms) + " ms on rank " + std::to_string(getRank()) +
            "; this rank skips its SwitchML call, so unless every rank skipped it this group's later "
            "all-reduces no longer match the other ranks': recreate the process group"));
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
    std::vector<std::shared_ptr<Call>> started;
    {
      std::lock_guard lock(mu_);
      item.call->ready = true;
      if (error && !item.call->started) item.call->error = error;
      StartReadyLocked(started);
    }
    for (auto& c : started) Arm(c);
  }
}

// ---- Delegated to Gloo ----

namespace {

// "int16" or "float32, int64": the distinct dtypes of `tensors`, for error messages.
std::string DtypeList(const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> names;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    std::string name = DtypeName(t.scalar_type());
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "no tensors" : out;
}

// Runs `call` (a collective handed to the inner Gloo group). Gloo's errors name neither the
// collective nor the dtype: a dtype Gloo does not take raises here, at the call (Gloo would fail
// only at wait()), unless `any_dtype` (send/recv move bytes); an error Gloo raises at the call
// gets a line naming both (same exception type).
template <typename F>
c10::intrusive_ptr<c10d::Work> Delegate(SwitchMLBackend& self, const char* collective,
                                        const std::vector<at::Tensor>& tensors, F&& call, bool any_dtype = false) {
  for (size_t i = 0; i < tensors.size() && !any_dtype; ++i) {
    if (!tensors[i].defined()) continue;
    const at::ScalarType type = tensors[i].scalar_type();
    TORCH_CHECK_TYPE(GlooDtype(type), "switchml: ", collective, " of ", DtypeName(type),
                     " is not supported: it runs on the inner Gloo group, which takes float32, float64, float16, "
                     "bfloat16, int8, uint8, int32, int64 and bool only");
  }
  // A collective every rank enters (not send/recv): a rank that saw no switch failure must join
  // the others' recovery first, or they would wait for each other.
  if (!any_dtype) self.ProbeSwitch(collective);
  try {
    return call();
  } catch (c10::Error& e) {
    e.add_context(std::string("switchml: ") + collective + " of " + DtypeList(tensors) +
                  " runs on the inner Gloo group, which rejected it");
    throw;
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  return Delegate(*this, "broadcast", tensors, [&] { return gloo_->broadcast(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  return Delegate(*this, "reduce", tensors, [&] { return gloo_->reduce(tensors, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                               std::vector<at::Tensor>& inputs,
                                                               const c10d::AllgatherOptions& opts) {
  return Delegate(*this, "all_gather", inputs, [&] { return gloo_->allgather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::AllgatherOptions& opts) {
  return Delegate(*this, "all_gather_into_tensor", std::vector<at::Tensor>{input},
                  [&] { return gloo_->_allgather_base(output, input, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return Delegate(*this, "all_gather_coalesced", inputs, [&] { return gloo_->allgather_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  return Delegate(*this, "all_gather_into_tensor (coalesced)", inputs,
                  [&] { return gloo_->allgather_into_tensor_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::GatherOptions& opts) {
  return Delegate(*this, "gather", inputs, [&] { return gloo_->gather(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::scatter(std::vector<at::Tensor>& outputs,
                                                        std::vector<std::vector<at::Tensor>>& inputs,
                                                        const c10d::ScatterOptions& opts) {
  return Delegate(*this, "scatter", outputs, [&] { return gloo_->scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  return Delegate(*this, "reduce_scatter", outputs, [&] { return gloo_->reduce_scatter(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
  return Delegate(*this, "reduce_scatter_tensor", std::vector<at::Tensor>{output},
                  [&] { return gloo_->_reduce_scatter_base(output, input, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  return Delegate(*this, "reduce_scatter_tensor (coalesced)", outputs,
                  [&] { return gloo_->reduce_scatter_tensor_coalesced(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_split_sizes,
                                                              std::vector<int64_t>& input_split_sizes,
                                                              const c10d::AllToAllOptions& opts) {
  return Delegate(*this, "all_to_all_single", std::vector<at::Tensor>{input},
                  [&] { return gloo_->alltoall_base(output, input, output_split_sizes, input_split_sizes, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  return Delegate(*this, "all_to_all", inputs, [&] { return gloo_->alltoall(outputs, inputs, opts); });
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                          int tag) {
  return Delegate(*this, "send", tensors, [&] { return gloo_->send(tensors, dst_rank, tag); }, /*any_dtype=*/true);
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                          int tag) {
  return Delegate(*this, "recv", tensors, [&] { return gloo_->recv(tensors, src_rank, tag); }, /*any_dtype=*/true);
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return Delegate(*this, "recv (any source)", tensors, [&] { return gloo_->recvAnysource(tensors, tag); }, /*any_dtype=*/true);
}

c10::intrusive_ptr<c10d::Work> SwitchMLBackend::barrier(const c10d::BarrierOptions& opts) {
  {
    std::unique_lock lock(mu_);
    WaitLocked(lock, [&] { return queue_.empty() && completing_ == 0; }, "barrier");
  }
  ProbeSwitch("barrier");
  RejoinAtBarrier();
  return gloo_->barrier(opts);
}

void SwitchMLBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  {
    std::unique_lock lock(mu_);
    WaitLocked(lock, [&] { return queue_.empty() && completing_ == 0; }, "monitoredBarrier");
  }
  ProbeSwitch("monitoredBarrier");
  RejoinAtBarrier();
  gloo_->monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace switchml::pytorch
