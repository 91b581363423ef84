// switchml/context.h — the client library's entry point.
//
//   switchml::Options opt;  opt.rank = r;  opt.num_workers = n;
//   auto ctx = switchml::Context::Create(opt);          // registers with the switch (blocks)
//   if (!ctx.ok()) { std::cerr << ctx.status() << "\n"; return 1; }
//   std::vector<float> grad(1 << 20, 1.0f);
//   switchml::Status s = (*ctx)->AllReduce(grad.data(), grad.data(), grad.size(),
//                                          switchml::DataType::kFloat32);   // in place, SUM
//   auto h = (*ctx)->AllReduceAsync(in, out, count, switchml::DataType::kInt32);
//   ... overlap work ...
//   if (!h.Wait().ok()) ...
//
// Contracts (as in the reference, spec §0): every worker of a job issues the same sequence of
// all-reduce calls (same counts, types, order). Results are element-wise sums over workers:
// exact for int32 (with 32-bit wrap-around), within the quantization bound for float32
// (docs/design.md). Inputs are read and outputs written by the library's threads until the
// job's handle reports completion; the caller keeps both buffers alive until then.
//
// Thread-safety: a Context may be used from several threads, but the order of submission
// defines the job order, which must match across workers.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "switchml/options.h"
#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml {

namespace client {
class ContextImpl;
struct JobState;
}  // namespace client

// Completion handle of an asynchronous all-reduce. Copyable; all copies refer to one job.
class AllReduceHandle {
 public:
  AllReduceHandle() = default;
  // Blocks until the job finished; returns its result. Never blocks longer than the job's
  // timeout plus the time the job waited in the queue behind earlier jobs.
  Status Wait() const;
  // Waits at most `timeout`; returns true if the job finished (then status() is valid).
  bool WaitFor(std::chrono::nanoseconds timeout) const;
  bool IsDone() const;
  // The job's result; FAILED_PRECONDITION if it has not finished yet.
  Status status() const;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class client::ContextImpl;
  explicit AllReduceHandle(std::shared_ptr<client::JobState> s) : state_(std::move(s)) {}
  std::shared_ptr<client::JobState> state_;
};

class Context {
 public:
  // Validates `options`, opens the data sockets, registers with the switch through the
  // controller (rank 0 first, then the others, with barriers; spec §4.3) and starts the worker
  // threads. Blocks up to about 3 × rpc_timeout. Errors: INVALID_ARGUMENT (options),
  // UNAVAILABLE / DEADLINE_EXCEEDED (controller unreachable, naming its address),
  // FAILED_PRECONDITION (the switch cannot serve this configuration).
  static StatusOr<std::unique_ptr<Context>> Create(const Options& options);

  // Stops the worker threads; jobs still queued or running fail with CANCELLED.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Starts an element-wise SUM of `num_elements` values of `type` at `in` over all workers,
  // writing the result to `out` (`in == out` is allowed; otherwise they must not overlap).
  // Argument errors (null pointers, overlapping buffers, non-finite float32 input, a context
  // already broken by an earlier failure) are reported through the returned handle, which is
  // then already done.
  AllReduceHandle AllReduceAsync(const void* in, void* out, size_t num_elements, DataType type,
                                 ReduceOp op = ReduceOp::kSum);
  // AllReduceAsync + Wait.
  Status AllReduce(const void* in, void* out, size_t num_elements, DataType type,
                   ReduceOp op = ReduceOp::kSum);

  Stats GetStats() const;
  const Options& options() const;

 private:
  friend class client::ContextImpl;
  explicit Context(std::unique_ptr<client::ContextImpl> impl);
  std::unique_ptr<client::ContextImpl> impl_;
};

}  // namespace switchml
