#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/context_impl.h"
#include "control/switch_control.h"
#include "quant/quantizer.h"
#include "transport/channel.h"
#include "wire/packet.h"

namespace switchml {

std::string_view DataTypeName(DataType t) {
  switch (t) {
    case DataType::kInt32: return "int32";
    case DataType::kFloat32: return "float32";
  }
  return "invalid";
}

namespace {
template <typename D>
long long CountUs(D d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}
}  // namespace

// The deprecated fields are read only here (Options::Resolved and Validate) and written only by
// Resolved and ContextImpl::GetStats.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
StatusOr<Options> Options::Resolved() const {
  Options o = *this;
  const Options defaults;
  if (max_jobs_in_flight != 0) {
    if (max_calls_in_flight != defaults.max_calls_in_flight && max_calls_in_flight != max_jobs_in_flight) {
      return InvalidArgumentError("max_jobs_in_flight (deprecated) = " + std::to_string(max_jobs_in_flight) +
                                  " and max_calls_in_flight = " + std::to_string(max_calls_in_flight) +
                                  " disagree; set only max_calls_in_flight");
    }
    o.max_calls_in_flight = max_jobs_in_flight;
  }
  if (job_timeout.count() != 0) {
    if (call_timeout != defaults.call_timeout && call_timeout != job_timeout) {
      return InvalidArgumentError("job_timeout (deprecated) = " + std::to_string(job_timeout.count()) +
                                  " ms and call_timeout = " + std::to_string(call_timeout.count()) +
                                  " ms disagree; set only call_timeout");
    }
    o.call_timeout = job_timeout;
  }
  o.max_jobs_in_flight = o.max_calls_in_flight;
  o.job_timeout = o.call_timeout;
  return o;
}

Status Options::Validate() const {
  if ((max_jobs_in_flight != 0 && max_jobs_in_flight != max_calls_in_flight) ||
      (job_timeout.count() != 0 && job_timeout != call_timeout)) {
    StatusOr<Options> resolved = Resolved();
    if (!resolved.ok()) return resolved.status();
    return resolved->Validate();  // its deprecated fields equal the new ones: no recursion
  }
  auto bad = [](const std::string& m) { return InvalidArgumentError(m); };
  if (num_workers < 1 || num_workers > kMaxWorkers)
    return bad("num_workers must be in [1, " + std::to_string(kMaxWorkers) + "], got " +
               std::to_string(num_workers));
  if (rank >= num_workers)
    return bad("rank must be in [0, num_workers=" + std::to_string(num_workers) + "), got " +
               std::to_string(rank));
  if (num_worker_threads < 1 || num_worker_threads > 64)
    return bad("num_worker_threads must be in [1, 64], got " + std::to_string(num_worker_threads));
  if (window_packets < num_worker_threads || window_packets > wire::kMaxSlots)
    return bad("window_packets must be in [num_worker_threads=" + std::to_string(num_worker_threads) +
               ", " + std::to_string(wire::kMaxSlots) + "], got " + std::to_string(window_packets));
  if (window_packets % num_worker_threads != 0)
    return bad("window_packets (" + std::to_string(window_packets) +
               ") must be a multiple of num_worker_threads (" + std::to_string(num_worker_threads) + ")");
  if (!wire::SizeCodeForElements(elements_per_packet).has_value())
    return bad("elements_per_packet must be one of 64, 256, 512, 1024, got " +
               std::to_string(elements_per_packet));
  if (min_rto.count() <= 0) return bad("min_rto must be > 0, got " + std::to_string(CountUs(min_rto)) + " us");
  if (initial_rto < min_rto || initial_rto > max_rto)
    return bad("initial_rto must be in [min_rto, max_rto] = [" + std::to_string(CountUs(min_rto)) + ", " +
               std::to_string(CountUs(max_rto)) + "] us, got " + std::to_string(CountUs(initial_rto)) + " us");
  if (call_timeout.count() <= 0) return bad("call_timeout must be > 0 ms, got " + std::to_string(call_timeout.count()));
  if (rpc_timeout.count() <= 0) return bad("rpc_timeout must be > 0 ms, got " + std::to_string(rpc_timeout.count()));
  if (max_calls_in_flight < 1 || max_calls_in_flight > 65536)
    return bad("max_calls_in_flight must be in [1, 65536], got " + std::to_string(max_calls_in_flight));
  if (busy_poll.count() < 0 || busy_poll > std::chrono::seconds(1))
    return bad("busy_poll must be in [0, 1000000] us, got " + std::to_string(busy_poll.count()) + " us");
  if (job_id != 0 && job_token.empty())
    return bad("job_token must be set when job_id is (job_id=" + std::to_string(job_id) + ")");
  if (job_id == 0 && !job_token.empty()) return bad("job_token is set but job_id is 0; give the job's id too");
  if (controller_address.empty()) return bad("controller_address must not be empty");
  SWITCHML_RETURN_IF_ERROR(tls.Validate());
  if (auto ep = transport::ParseEndpoint(controller_address, 50099); !ep.ok())
    return bad("controller_address: " + ep.status().message());
  if (!bind_ip.empty()) {
    if (auto ep = transport::ParseEndpoint(bind_ip, 0); !ep.ok()) return bad("bind_ip: " + ep.status().message());
  }
  if (!advertise_ip.empty()) {
    if (auto ep = transport::ParseEndpoint(advertise_ip, 0); !ep.ok())
      return bad("advertise_ip: " + ep.status().message());
  }
  return OkStatus();
}
#pragma GCC diagnostic pop

// ---- AllReduceHandle ----

Status AllReduceHandle::Wait() const {
  if (!state_) return FailedPreconditionError("Wait() on an empty AllReduceHandle");
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

bool AllReduceHandle::WaitFor(std::chrono::nanoseconds timeout) const {
  if (!state_) return false;
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->done; });
}

bool AllReduceHandle::IsDone() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

Status AllReduceHandle::status() const {
  if (!state_) return FailedPreconditionError("status() on an empty AllReduceHandle");
  std::lock_guard lock(state_->mu);
  if (!state_->done) return FailedPreconditionError("call " + std::to_string(state_->id) + " has not finished");
  return state_->status;
}

void AllReduceHandle::OnComplete(std::function<void(const Status&)> fn) const {
  if (!fn) return;
  if (!state_) {
    client::RunCallback(fn, FailedPreconditionError("OnComplete() on an empty AllReduceHandle"));
    return;
  }
  Status result;
  {
    std::lock_guard lock(state_->mu);
    if (!state_->done) {
      // The thread that sets `done` takes the list under this lock: it will run fn.
      state_->callbacks.push_back(std::move(fn));
      return;
    }
    result = state_->status;
  }
  client::RunCallback(fn, result);
}

// ---- Context ----

Context::Context(std::unique_ptr<client::ContextImpl> impl) : impl_(std::move(impl)) {}
Context::~Context() = default;

AllReduceHandle Context::AllReduceAsync(const void* in, void* out, size_t n, DataType type, ReduceOp op) {
  return impl_->Submit(in, out, n, type, op);
}

Status Context::AllReduce(const void* in, void* out, size_t n, DataType type, ReduceOp op) {
  return AllReduceAsync(in, out, n, type, op).Wait();
}

Stats Context::GetStats() const { return impl_->GetStats(); }
const Options& Context::options() const { return impl_->options(); }

namespace client {

// ---- ContextImpl ----

ContextImpl::ContextImpl(const Options& options, transport::Endpoint switch_endpoint)
    : options_(options), switch_endpoint_(switch_endpoint) {}

std::unique_ptr<Context> ContextImpl::CreateWithChannels(
    const Options& options, std::vector<std::unique_ptr<transport::Channel>> channels,
    transport::Endpoint switch_endpoint, FailureExplainer explain_failure) {
  StatusOr<control::JobLayout> layout = control::JobLayout::Make(
      {.job_slots = options.window_packets, .worker_threads = options.num_worker_threads,
       .window_packets = options.window_packets});
  if (!layout.ok()) std::abort();  // `options` must be valid (Options::Validate)
  return CreateWithChannels(options, std::move(channels), Routes{{switch_endpoint}, {}, *layout},
                            std::move(explain_failure));
}

std::unique_ptr<Context> ContextImpl::CreateWithChannels(
    const Options& options, std::vector<std::unique_ptr<transport::Channel>> channels,
    Routes routes, FailureExplainer explain_failure) {
  auto impl = std::unique_ptr<ContextImpl>(
      new ContextImpl(options.Resolved().value(), routes.endpoints.at(0)));
  impl->explain_failure_ = std::move(explain_failure);
  const control::JobLayout& layout = routes.layout;
  for (uint32_t t = 0; t < options.num_worker_threads; ++t) {
    EngineConfig c;
    const control::SlotRange slots = layout.ThreadSlots(t);
    c.slot_base = slots.first;
    c.window = slots.count;
    c.elements_per_packet = options.elements_per_packet;
    c.num_workers = options.num_workers;
    const size_t e = routes.endpoints.size() > t ? t : 0;
    c.switch_endpoint = routes.endpoints[e];
    if (routes.names.size() > e) c.switch_name = routes.names[e];
    c.initial_rto = options.initial_rto;
    c.min_rto = options.min_rto;
    c.max_rto = options.max_rto;
    c.call_timeout = impl->options().call_timeout;
    c.shadow_copies = options.shadow_copies;
    impl->workers_.push_back(std::make_unique<Worker>(impl.get(), t, c, std::move(channels[t])));
  }
  for (auto& w : impl->workers_) w->Start();
  return std::unique_ptr<Context>(new Context(std::move(impl)));
}

// Where each worker thread sends and which slots it uses, from the registration's answer:
// the job's layout (its slots and shards, our threads and window) and one route per thread.
StatusOr<ContextImpl::Routes> ContextImpl::RoutesFor(const Options& options,
                                                     const control::SwitchInfo& info,
                                                     uint32_t default_switch_ip) {
  const uint32_t switch_ip = info.ipv4 != 0 ? info.ipv4 : default_switch_ip;
  // num_slots 0: an older switch that does not say; our window is all we need.
  StatusOr<control::JobLayout> layout = control::JobLayout::Make(
      {.job_slots = info.num_slots != 0 ? info.num_slots : options.window_packets,
       .num_shards = std::max<uint32_t>(1, info.num_shards),
       .worker_threads = options.num_worker_threads,
       .window_packets = options.window_packets});
  if (!layout.ok()) {
    return FailedPreconditionError(layout.status().message() + " (the switch has " +
                                   std::to_string(info.num_slots) + " slots for this job)");
  }
  Routes routes{{}, {}, *layout};
  if (info.thread_routes.empty()) {
    // A reference or older switch: every thread sends to udp_port.
    routes.endpoints.push_back({switch_ip, info.udp_port});
    return routes;
  }
  if (info.thread_routes.size() != options.num_worker_threads) {
    return InternalError("the switch gave " + std::to_string(info.thread_routes.size()) +
                         " per-thread routes for num_worker_threads=" +
                         std::to_string(options.num_worker_threads) + "; expected one per thread");
  }
  for (size_t t = 0; t < info.thread_routes.size(); ++t) {
    const control::ThreadRoute& r = info.thread_routes[t];
    if (r.udp_port == 0) {
      return InternalError("the switch gave no UDP port for worker thread " + std::to_string(t));
    }
    if (r.shard != layout->ShardOf(uint32_t(t))) {
      return InternalError("the switch routes worker thread " + std::to_string(t) + " to shard " +
                           std::to_string(r.shard) + " but the job's layout (" +
                           layout->ToString() + ") puts it on shard " +
                           std::to_string(layout->ShardOf(uint32_t(t))));
    }
    routes.endpoints.push_back({r.ipv4 != 0 ? r.ipv4 : switch_ip, r.udp_port});
    if (layout->num_shards() > 1) {
      routes.names.push_back("switch shard " + std::to_string(r.shard) + " of " +
                             std::to_string(layout->num_shards()) + " (" +
                             routes.endpoints.back().ToString() + ")");
    }
  }
  return routes;
}

ContextImpl::~ContextImpl() {
  for (auto& w : workers_) w->Stop();
}

Status ContextImpl::broken_status() const {
  std::lock_guard lock(broken_mu_);
  return broken_status_;
}

void ContextImpl::Break(const Status& why) {
  {
    std::lock_guard lock(broken_mu_);
    if (!broken_.load(std::memory_order_relaxed)) {
      broken_status_ = why;
      broken_.store(true, std::memory_order_release);
    }
  }
  { std::lock_guard l(inflight_mu_); }  // a submitter waiting for room re-checks broken()
  inflight_cv_.notify_all();
}

AllReduceHandle ContextImpl::Failed(Status s) {
  auto call = std::make_shared<CallState>();
  call->done = true;
  call->status = std::move(s);
  calls_failed_.fetch_add(1, std::memory_order_relaxed);
  return AllReduceHandle(call);
}

AllReduceHandle ContextImpl::FailedBroken(Status s) {
  AllReduceHandle h = Failed(std::move(s));
  h.state_->refused_broken = true;
  return h;
}

namespace {

// What Submit checks before anything runs. OK, or INVALID_ARGUMENT naming the argument.
Status CheckArguments(const void* in, const void* out, size_t n, DataType type, ReduceOp op) {
  if (op != ReduceOp::kSum) return InvalidArgumentError("op: only SUM is supported");
  if (type != DataType::kInt32 && type != DataType::kFloat32)
    return InvalidArgumentError("type: only int32 and float32 are supported");
  if (n > 0 && in == nullptr) return InvalidArgumentError("in is null but num_elements is " + std::to_string(n));
  if (n > 0 && out == nullptr) return InvalidArgumentError("out is null but num_elements is " + std::to_string(n));
  if (n > (size_t(1) << 40)) return InvalidArgumentError("num_elements " + std::to_string(n) + " exceeds 2^40");
  const size_t bytes = n * ElementSize(type);
  if (n > 0 && in != out) {
    auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
    if (a < b + bytes && b < a + bytes)
      return InvalidArgumentError("in and out overlap without being identical (use in == out for in place)");
  }
  return OkStatus();
}

}  // namespace

Status ScanExponents(CallState& call, uint32_t block) {
  for (size_t t = 0; t < call.slice_offsets.size(); ++t) {
    Status s = BlockExponents(call.in + call.slice_offsets[t], call.slice_lengths[t], block,
                              call.exponents.data() + call.slice_first_blocks[t], call.slice_offsets[t]);
    if (!s.ok()) return s;
  }
  return OkStatus();
}

AllReduceHandle ContextImpl::Submit(const void* in, void* out, size_t n, DataType type, ReduceOp op) {
  calls_submitted_.fetch_add(1, std::memory_order_relaxed);
  Status invalid = CheckArguments(in, out, n, type, op);
  if (broken()) {
    // Nothing pairs up any more: no round for this call either.
    if (!invalid.ok()) return Failed(invalid);
    if (recovered_.load(std::memory_order_acquire)) {
      return FailedBroken(FailedPreconditionError(
          "context recovered onto the host path after the switch failed (" + broken_status().ToString() +
          "); run this all-reduce on the host path"));
    }
    return FailedBroken(FailedPreconditionError("context unusable after an earlier failure: " + broken_status().ToString()));
  }
  auto call = std::make_shared<CallState>();
  const size_t bytes = n * ElementSize(type);
  if (n > 0 && invalid.ok()) {
    call->in_begin = reinterpret_cast<uintptr_t>(in);
    call->in_end = call->in_begin + bytes;
    call->out_begin = reinterpret_cast<uintptr_t>(out);
    call->out_end = call->out_begin + bytes;
  }
  const uint32_t threads = uint32_t(workers_.size());
  // Slicing (docs/protocol.md#slicing): thread t gets the same elements on every worker.
  const size_t base = n / threads, rem = n % threads;
  const uint32_t block = options_.elements_per_packet;
  size_t blocks = 0;
  for (uint32_t t = 0; t < threads; ++t) {
    const size_t length = t < rem ? base + 1 : base;
    call->slice_offsets.push_back(t < rem ? t * (base + 1) : t * base + rem);
    call->slice_lengths.push_back(length);
    call->slice_first_blocks.push_back(blocks);
    blocks += (length + block - 1) / block;
  }

  // Submission order is call order: everything below happens under submit_mu_.
  std::lock_guard lock(submit_mu_);
  if (Status st = WaitForInflightRoom(); !st.ok()) return invalid.ok() ? FailedBroken(st) : Failed(invalid);
  bool reads_pending_output = false;
  // Finished calls leave. A call that failed because the context broke stays (recovery finishes
  // it): the context is marked broken before such a call is marked done (OnSliceDone), so it is
  // seen here.
  std::erase_if(pending_, [this](const std::shared_ptr<CallState>& j) {
    std::lock_guard l(j->mu);
    return j->done && !broken();
  });
  if (invalid.ok()) {
    // Stream semantics: depend on every unfinished earlier call whose buffers conflict with ours.
    auto overlaps = [](uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1) { return a0 < b1 && b0 < a1; };
    for (const auto& p : pending_) {
      const bool raw = overlaps(call->in_begin, call->in_end, p->out_begin, p->out_end);
      const bool waw = overlaps(call->out_begin, call->out_end, p->out_begin, p->out_end);
      const bool war = overlaps(call->out_begin, call->out_end, p->in_begin, p->in_end);
      if (raw || waw || war) call->deps.push_back(p);
      reads_pending_output |= raw;
    }
    // float32: one pass over the input computes every block's exponent before anything is sent,
    // and rejects Inf/NaN input. The engines use these exponents instead of scanning the input
    // a second time. When the input is an earlier unfinished call's output, the first slice
    // that starts does this instead (Worker::PrepareSlice).
    if (type == DataType::kFloat32 && n > 0) {
      call->in = static_cast<const float*>(in);
      call->exponents.resize(blocks);
      call->exponents_at_start = reads_pending_output;
      if (!reads_pending_output) invalid = ScanExponents(*call, block);
    }
  }
  // A rejected call still uses its call number and runs its first round, flagged, so that it
  // fails on every worker and the calls after it pair up (engine.h, "Rejected calls"). Its
  // buffers are never touched, so nothing depends on it.
  if (!invalid.ok()) {
    call = std::make_shared<CallState>();
    call->rejected_at_submit = true;
  }
  call->id = next_call_id_++;
  call->type = type;
  call->num_elements = n;
  call->remaining_slices = int(threads);
  {
    std::lock_guard l(inflight_mu_);
    ++inflight_;
  }
  // Rejected calls too (recovery must know that this worker rejected it); their empty byte
  // ranges overlap nothing.
  pending_.push_back(call);
  for (uint32_t t = 0; t < threads; ++t) {
    const size_t len = t < rem ? base + 1 : base;
    const size_t offset = t < rem ? t * (base + 1) : t * base + rem;
    SliceTask task;
    task.call = call;
    task.element_offset = offset;
    task.first_block = invalid.ok() ? call->slice_first_blocks[t] : 0;
    task.spec.call_id = call->id;
    task.spec.type = type;
    task.spec.num_elements = len;
    // Every call is checked on every worker: each non-empty slice, and thread 0 even when the
    // call has no elements (so a worker that passes 0 where another passes n is caught too).
    task.spec.send_descriptor = len > 0 || t == 0;
    task.spec.call_elements = n;
    if (invalid.ok()) {
      task.spec.in = static_cast<const uint8_t*>(in) + offset * 4;
      task.spec.out = static_cast<uint8_t*>(out) + offset * 4;
      if (!call->exponents.empty()) task.spec.exponents = call->exponents.data() + call->slice_first_blocks[t];
      if (n == 0) task.spec.in = task.spec.out = nullptr;
    } else {
      task.spec.rejected = task.spec.send_descriptor;
      task.spec.rejection = invalid;
    }
    workers_[t]->Enqueue(std::move(task));
  }
  if (!invalid.ok()) return Failed(invalid);
  return AllReduceHandle(call);
}

Status ContextImpl::WaitForInflightRoom() {
  std::unique_lock l(inflight_mu_);
  // Every queued call finishes or fails within its own call timeout, so this wait ends; a broken
  // context fails its queued calls at once.
  inflight_cv_.wait(l, [&] { return inflight_ < options_.max_calls_in_flight || broken(); });
  if (inflight_ >= options_.max_calls_in_flight) {
    return FailedPreconditionError("context unusable after an earlier failure: " + broken_status().ToString());
  }
  return OkStatus();
}

void ContextImpl::OnSliceDone(const std::shared_ptr<CallState>& call, const Status& slice_status, bool in_step) {
  Status s = slice_status;
  // A slice that failed out of step (timeout, disagreeing workers, cancellation) leaves this
  // worker's slot state unknown: the context breaks. One that failed in step (a rejected call)
  // does not: every worker ended it the same way.
  const bool breaks = !s.ok() && !in_step;
  if (breaks && explain_failure_) {
    std::call_once(explain_once_, [&] {
      explained_code_ = s.code();
      explanation_ = explain_failure_(s);
    });
    if (s.code() == explained_code_ &&
        (!explanation_.text.empty() || explanation_.switch_unreachable)) {
      s = Status(explanation_.switch_unreachable ? StatusCode::kUnavailable : s.code(),
                 s.message() + explanation_.text);
    }
  }
  if (breaks) Break(s);
  bool finished = false;
  std::vector<std::function<void(const Status&)>> callbacks;
  Status result;
  {
    std::lock_guard lock(call->mu);
    if (!s.ok() && call->status.ok()) call->status = s;
    finished = --call->remaining_slices == 0;
    if (finished) {
      call->done = true;
      callbacks.swap(call->callbacks);  // later registrations run on their caller's thread
      result = call->status;
    }
  }
  if (finished) {
    // A call rejected at submission was counted then (its caller's handle).
    if (!call->rejected_at_submit) (result.ok() ? calls_completed_ : calls_failed_).fetch_add(1, std::memory_order_relaxed);
    call->cv.notify_all();
    {
      std::lock_guard l(inflight_mu_);
      --inflight_;
    }
    inflight_cv_.notify_all();
    // Last: the call no longer counts as in flight, and nothing below touches this context.
    for (auto& fn : callbacks) RunCallback(fn, result);
  }
}

void RunCallback(const std::function<void(const Status&)>& fn, const Status& result) noexcept { fn(result); }

Stats ContextImpl::GetStats() const {
  Stats s;
  s.calls_submitted = calls_submitted_.load();
  s.calls_completed = calls_completed_.load();
  // Recovered first: a call is counted failed before Recover can count it recovered.
  s.calls_recovered = calls_recovered_.load();
  const uint64_t failed = calls_failed_.load();
  s.calls_failed = failed >= s.calls_recovered ? failed - s.calls_recovered : 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  s.jobs_submitted = s.calls_submitted;
  s.jobs_completed = s.calls_completed;
  s.jobs_failed = s.calls_failed;
#pragma GCC diagnostic pop
  for (auto& w : workers_) {
    EngineStats e = w->stats();
    s.packets_sent += e.packets_sent;
    s.retransmissions += e.retransmissions;
    s.results_received += e.results_received;
    s.duplicates += e.duplicates;
    s.malformed += e.malformed;
    s.timeouts += e.timeouts;
    s.quantization_clamps += e.clamped;
    s.send_stalls += w->send_stalls();
  }
  return s;
}

}  // namespace client
}  // namespace switchml
