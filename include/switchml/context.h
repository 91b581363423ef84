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
// Vocabulary: a "job" is a tenant of the switch (workers registered together, Options::job_id);
// a "call" is one all-reduce of that job (one AllReduceAsync on every worker).
//
// Contracts. Every worker of a job issues the same sequence of all-reduce calls (same counts,
// types, order). This is checked, not assumed: each call carries a small descriptor (element
// count, type, call number) that the switch sums like data, and a call whose descriptor differs
// on any worker fails on every worker with INVALID_ARGUMENT naming what differs, never with a
// result. Results are element-wise sums over workers: exact for int32 (with 32-bit
// wrap-around), within the quantization bound for float32 (docs/design.md).
//
// Ordering (stream semantics, as NCCL's operations on one stream): the all-reduces submitted to
// one Context behave as if they ran one after another in submission order. A call whose input is
// the output of an earlier call that has not finished sees that call's result; a call that
// writes a buffer an earlier unfinished call reads or writes waits for it. So
//   for (int i = 0; i < 4; ++i) h[i] = ctx->AllReduceAsync(buf, buf, n, kFloat32);
// sums four times in a row. Calls on disjoint buffers do not wait for each other: they stream
// back to back through the switch. Overlap is decided on byte ranges, per Context.
//
// Buffers: inputs are read and outputs written by the library's threads until the call's handle
// reports completion; the caller keeps both alive and does not write them until then. (A float32
// input that changes after submission so that its data exceeds the exponent taken from it fails
// the call instead of being clamped into a wrong sum.)
//
// Backpressure: at most Options::max_calls_in_flight calls are queued or running; a further
// AllReduceAsync blocks until the oldest finishes.
//
// Errors: a call that any worker rejects for its arguments or input (null or overlapping
// buffers, a type or op SwitchML lacks, Inf/NaN or |x| >= 2^127 in float32 input, even when that
// input is an earlier call's output and is only checked when the call starts) fails on EVERY
// worker: the rejecting worker gets INVALID_ARGUMENT naming the problem, the others ABORTED
// ("all-reduce #N was rejected by ..."), one round trip later. The rejected call still uses its
// call number on the worker that rejected it, writes no output on any worker, and leaves every
// context usable: the calls after it pair up as if it had succeeded without writing. (A worker
// that rejects a call still runs its first round through the switch, flagged, which is how the
// others learn of it: the context never answers a call one worker rejected with a result.)
// After a call fails for any other reason (timeouts, workers that made different calls, a
// destroyed context), the context is unusable and later calls fail at once with
// FAILED_PRECONDITION carrying the first error: the workers' slot state may no longer agree.
// A call that reads or writes the buffers of an earlier call that failed runs normally on the
// data as it is (a failed call writes nothing).
//
// Thread-safety: a Context may be used from several threads; the order in which calls enter
// AllReduceAsync defines the call order, which must match across workers.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "switchml/options.h"
#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml {

namespace client {
class ContextImpl;
struct CallState;
}  // namespace client

// Completion handle of an asynchronous all-reduce. Copyable; all copies refer to one call.
class AllReduceHandle {
 public:
  AllReduceHandle() = default;
  // Blocks until the call finished; returns its result. Never blocks longer than the call's
  // timeout plus the time the call waited in the queue behind earlier calls.
  Status Wait() const;
  // Waits at most `timeout`; returns true if the call finished (then status() is valid).
  bool WaitFor(std::chrono::nanoseconds timeout) const;
  bool IsDone() const;
  // The call's result; FAILED_PRECONDITION if it has not finished yet.
  Status status() const;
  bool valid() const { return state_ != nullptr; }

  // Completion callback: `fn` runs exactly once, with the call's result (the Status Wait()
  // returns), when the call finishes. Several may be registered on one call (through any copy
  // of the handle); each runs once. Which thread runs it:
  //  - the library's worker thread that finished the call, right after the call is marked done
  //    (Wait() and IsDone() already see it; Stats already count it);
  //  - the caller's thread, before OnComplete returns, if the call had already finished (also
  //    for a call rejected at submission, and with FAILED_PRECONDITION on an empty handle);
  //  - for calls ~Context cancels: the thread destroying the Context or a worker thread while
  //    it stops, with status CANCELLED (with several worker threads, a slice that another
  //    thread's cancellation stopped first may make it ABORTED naming that cancellation);
  //    every callback has run when ~Context returns.
  // Registration never races completion: a callback registered while the call finishes runs
  // either on the worker thread or at once on the caller's thread, never twice, never not.
  // The callback runs on the thread that moves every call's packets (each call is spread over
  // all worker threads), so it must be short and must not block: no Wait()/WaitFor() on a
  // handle of this Context that has not finished (that call may need this very thread: a
  // deadlock), no AllReduce(), no destroying the Context, no waiting for a lock held by a
  // thread that blocks in one of these. AllReduceAsync() only when the caller knows fewer than
  // max_calls_in_flight calls are pending (the call then returns at once; this callback's own
  // call no longer counts): beyond that it blocks for calls that may need this thread.
  // Wait()/status() on its own handle are fine (it is done). Hand longer work to a thread of
  // your own. It must not throw (an exception leaving it terminates the process). An empty
  // `fn` is ignored.
  void OnComplete(std::function<void(const Status&)> fn) const;

 private:
  friend class client::ContextImpl;
  explicit AllReduceHandle(std::shared_ptr<client::CallState> s) : state_(std::move(s)) {}
  std::shared_ptr<client::CallState> state_;
};

class Context {
 public:
  // Validates `options`, opens the data sockets, registers with the switch through the
  // controller (rank 0 first, then the others, with barriers; docs/protocol.md#session-sequence)
  // and starts the worker threads. Blocks up to about 3 × rpc_timeout. Errors:
  // INVALID_ARGUMENT (options), UNAVAILABLE / DEADLINE_EXCEEDED (controller unreachable,
  // naming its address), FAILED_PRECONDITION (the switch cannot serve this configuration).
  static StatusOr<std::unique_ptr<Context>> Create(const Options& options);

  // Stops the worker threads; calls still queued or running fail with CANCELLED (or ABORTED
  // naming it, see OnComplete); their OnComplete callbacks have run when it returns.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Starts an element-wise SUM of `num_elements` values of `type` at `in` over all workers,
  // writing the result to `out` (`in == out` is allowed; otherwise they must not overlap).
  // Argument errors (null pointers, overlapping buffers, non-finite float32 input, a context
  // already broken by an earlier failure) are reported through the returned handle, which is
  // then already done; the call still fails on the other workers (see "Errors" above). Blocks
  // only while max_calls_in_flight calls are pending. Non-finite input that is the output of an
  // earlier unfinished call can only be seen when this call starts: its handle then fails with
  // INVALID_ARGUMENT, on every worker as above, and the context stays usable.
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
