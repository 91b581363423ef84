// Context over the in-process loopback fabric with a real SwitchServer: the whole client
// (job slicing, several threads, async handles, errors) without sockets or processes.
#include "switchml/context.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <thread>

#include "testing/exact_inputs.h"
#include "testing/loopback_cluster.h"
#include "transport/loopback.h"

namespace switchml {
namespace {

using testing::LoopbackCluster;

// Rank contexts over a loopback fabric and an in-process switch (testing/loopback_cluster.h);
// aborts the test binary with the harness's error message if the cluster cannot be built.
std::unique_ptr<LoopbackCluster> Cluster(uint32_t n, const Options& base, transport::FaultOptions faults = {},
                                         bool late_duplicate_guard = false) {
  dataplane::SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.late_duplicate_guard = late_duplicate_guard;
  return LoopbackCluster::Create(n, base, faults, sc).value();
}

Options FastOptions(uint32_t threads = 1) {
  Options o;
  o.num_worker_threads = threads;
  o.window_packets = 16 * threads;
  o.elements_per_packet = 64;
  o.initial_rto = std::chrono::milliseconds(5);
  o.min_rto = std::chrono::milliseconds(2);
  o.max_rto = std::chrono::milliseconds(100);
  o.call_timeout = std::chrono::milliseconds(3000);
  return o;
}

TEST(ContextTest, SeveralAsyncJobsSeveralThreadsInt32AndFloat32) {
  const uint32_t n = 3;
  auto cluster = Cluster(n, FastOptions(3));
  LoopbackCluster& c = *cluster;
  const std::vector<size_t> sizes = {0, 1, 2, 100, 5000, 777};
  std::vector<std::vector<std::vector<int32_t>>> in(n), out(n);
  std::vector<std::vector<std::vector<float>>> fin(n), fout(n);
  std::vector<std::vector<AllReduceHandle>> handles(n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    for (size_t j = 0; j < sizes.size(); ++j) {
      in[r].emplace_back(sizes[j]);
      out[r].emplace_back(sizes[j]);
      testing::FillInt32(r, j * 10000, in[r][j].data(), sizes[j]);
      fin[r].emplace_back(sizes[j]);
      fout[r].emplace_back(sizes[j]);
      testing::FillFloat32(r, j * 10000, fin[r][j].data(), sizes[j]);
    }
  }
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (size_t j = 0; j < sizes.size(); ++j) {
        handles[r].push_back(c.ctx(r).AllReduceAsync(in[r][j].data(), out[r][j].data(), sizes[j], DataType::kInt32));
        handles[r].push_back(
            c.ctx(r).AllReduceAsync(fin[r][j].data(), fout[r][j].data(), sizes[j], DataType::kFloat32));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < n; ++r) {
    for (auto& h : handles[r]) ASSERT_TRUE(h.Wait().ok()) << h.status();
    for (size_t j = 0; j < sizes.size(); ++j) {
      EXPECT_EQ(testing::VerifyInt32(out[r][j].data(), sizes[j], n, j * 10000).wrong, 0u) << r << " " << j;
      EXPECT_EQ(testing::VerifyFloat32(fout[r][j].data(), sizes[j], n, j * 10000).wrong, 0u) << r << " " << j;
    }
    Stats s = c.ctx(r).GetStats();
    EXPECT_EQ(s.calls_completed, 2 * sizes.size());
    EXPECT_EQ(s.calls_failed, 0u);
  }
}

TEST(ContextTest, InPlaceWithLossAndDuplication) {
  transport::FaultOptions f;
  f.loss = 0.02;
  f.duplicate = 0.02;
  f.reorder = 0.0;  // reordering a retransmission behind a newer packet breaks contract C6 (docs/protocol.md#c6-no-reordering-behind-the-next-packet)
  f.seed = 5;
  const uint32_t n = 4;
  auto cluster = Cluster(n, FastOptions(2), f);
  LoopbackCluster& c = *cluster;
  const size_t count = 20000;
  std::vector<std::vector<int32_t>> data(n, std::vector<int32_t>(count));
  std::vector<AllReduceHandle> h;
  for (uint32_t r = 0; r < n; ++r) {
    testing::FillInt32(r, 0, data[r].data(), count);
    h.push_back(c.ctx(r).AllReduceAsync(data[r].data(), data[r].data(), count, DataType::kInt32));
  }
  for (auto& x : h) ASSERT_TRUE(x.Wait().ok()) << x.status();
  for (uint32_t r = 0; r < n; ++r) EXPECT_EQ(testing::VerifyInt32(data[r].data(), count, n).wrong, 0u);
  uint64_t retx = 0;
  for (uint32_t r = 0; r < n; ++r) retx += c.ctx(r).GetStats().retransmissions;
  EXPECT_GT(retx, 0u);
}

// Loss, duplication and reordering (adjacent swaps) together, over consecutive int32 and float32
// jobs: results stay exact. The switch runs with the late-duplicate guard, since a swap can in
// principle put a retransmission behind the worker's next packet to the same slot (contract C6);
// with these rates that case is rare (the guard's own tests in aggregator_test.cc force it).
TEST(ContextTest, LossDuplicationAndReorderingWithTheLateDuplicateGuard) {
  transport::FaultOptions f;
  f.loss = 0.02;
  f.duplicate = 0.02;
  f.reorder = 0.05;
  f.seed = 11;
  const uint32_t n = 3;
  auto cluster = Cluster(n, FastOptions(2), f, /*late_duplicate_guard=*/true);
  LoopbackCluster& c = *cluster;
  for (int job = 0; job < 4; ++job) {
    const size_t count = 3000 + 4000 * job;
    std::vector<std::vector<int32_t>> data(n, std::vector<int32_t>(count));
    std::vector<std::vector<float>> fdata(n, std::vector<float>(count));
    std::vector<AllReduceHandle> h;
    for (uint32_t r = 0; r < n; ++r) {
      testing::FillInt32(r, job, data[r].data(), count);
      testing::FillFloat32(r, job, fdata[r].data(), count);
      h.push_back(c.ctx(r).AllReduceAsync(data[r].data(), data[r].data(), count, DataType::kInt32));
      h.push_back(c.ctx(r).AllReduceAsync(fdata[r].data(), fdata[r].data(), count, DataType::kFloat32));
    }
    for (auto& x : h) ASSERT_TRUE(x.Wait().ok()) << x.status();
    for (uint32_t r = 0; r < n; ++r) {
      EXPECT_EQ(testing::VerifyInt32(data[r].data(), count, n, job).wrong, 0u) << "job " << job;
      EXPECT_EQ(testing::VerifyFloat32(fdata[r].data(), count, n, job).wrong, 0u) << "job " << job;
    }
  }
  EXPECT_GT(c.fabric().counters().reordered, 0u);
}

TEST(ContextTest, BadArgumentsAreReportedThroughTheHandle) {
  auto cluster = Cluster(1, FastOptions());
  LoopbackCluster& c = *cluster;
  std::vector<float> buf(100, 1.0f);
  auto h = c.ctx(0).AllReduceAsync(nullptr, buf.data(), 10, DataType::kFloat32);
  ASSERT_TRUE(h.IsDone());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("in is null"), std::string::npos);
  h = c.ctx(0).AllReduceAsync(buf.data(), buf.data() + 5, 10, DataType::kFloat32);
  EXPECT_EQ(h.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("overlap"), std::string::npos);
  buf[42] = std::numeric_limits<float>::quiet_NaN();
  h = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), 100, DataType::kFloat32);
  EXPECT_EQ(h.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("element 42 is NaN"), std::string::npos) << h.status();
  buf[42] = std::numeric_limits<float>::infinity();
  EXPECT_NE(c.ctx(0).AllReduce(buf.data(), buf.data(), 100, DataType::kFloat32).message().find("infinite"),
            std::string::npos);
  // The context still works after argument errors.
  buf[42] = 2.0f;
  ASSERT_TRUE(c.ctx(0).AllReduce(buf.data(), buf.data(), 100, DataType::kFloat32).ok());
  EXPECT_EQ(buf[42], 2.0f);
  EXPECT_EQ(buf[0], 1.0f);
  AllReduceHandle empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.Wait().code(), StatusCode::kFailedPrecondition);
}

TEST(ContextTest, NonFiniteInputInALaterSliceIsNamedByItsIndexInTheTensor) {
  // Three threads: the tensor is cut into three slices, each scanned for its block exponents
  // before anything is sent; the error names the element's index in the whole tensor.
  auto cluster = Cluster(1, FastOptions(3));
  LoopbackCluster& c = *cluster;
  std::vector<float> buf(1000, 0.5f);
  buf[901] = -std::numeric_limits<float>::infinity();
  Status s = c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("element 901 is infinite"), std::string::npos) << s;
  buf[901] = 3e38f;  // finite, but its exponent (128) does not fit the wire's int8
  s = c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("element 901 is 3e+38"), std::string::npos) << s;
  EXPECT_NE(s.message().find("2^127"), std::string::npos) << s;
  // Nothing was sent: the context still works, and the result uses the scanned exponents.
  buf[901] = 0.25f;
  ASSERT_TRUE(c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32).ok());
  EXPECT_EQ(buf[0], 0.5f);
  EXPECT_EQ(buf[901], 0.25f);
  EXPECT_EQ(buf[999], 0.5f);
}

TEST(ContextTest, MissingPeerTimesOutThenContextIsBroken) {
  // Two workers registered, only rank 0 submits: its job must fail within the job timeout.
  Options o = FastOptions();
  o.call_timeout = std::chrono::milliseconds(300);
  auto cluster = Cluster(2, o);
  LoopbackCluster& c = *cluster;
  std::vector<int32_t> buf(1000, 1);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  // Ended by the call timeout: the code and the message, which names the 300 ms, say so (no
  // upper bound on the clock: a loaded machine may be late, and lateness is no bug here).
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("127.0.0.1:48864"), std::string::npos) << s;
  EXPECT_NE(s.message().find(" for 300 ms "), std::string::npos) << s;
  EXPECT_GE(elapsed, std::chrono::milliseconds(300));  // not before it (a lower bound: load-proof)
  s = c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("earlier failure"), std::string::npos) << s;
}

TEST(ContextTest, DestroyingContextCancelsQueuedJobs) {
  auto cluster = Cluster(2, FastOptions());
  LoopbackCluster& c = *cluster;
  std::vector<int32_t> buf(100000, 1);
  auto h1 = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  auto h2 = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  c.DestroyContext(0);  // rank 1 never participates
  ASSERT_TRUE(h1.IsDone());
  ASSERT_TRUE(h2.IsDone());
  EXPECT_FALSE(h1.status().ok());
  EXPECT_EQ(h2.status().code(), StatusCode::kCancelled) << h2.status();
}

// ---- AllReduceHandle::OnComplete ----

// Records the callbacks it hands out: how often each ran, with what, on which thread.
class Recorder {
 public:
  std::function<void(const Status&)> Callback(std::function<void()> inside = {}) {
    return [this, inside = std::move(inside)](const Status& s) {
      if (inside) inside();
      std::lock_guard l(mu_);
      ++runs_;
      status_ = s;
      thread_ = std::this_thread::get_id();
      cv_.notify_all();
    };
  }
  // Waits (at most 20 s, far above any test's need) until `n` callbacks ran.
  bool WaitForRuns(int n) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(20), [&] { return runs_ >= n; });
  }
  int runs() const { std::lock_guard l(mu_); return runs_; }
  Status status() const { std::lock_guard l(mu_); return status_; }
  std::thread::id thread() const { std::lock_guard l(mu_); return thread_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int runs_ = 0;
  Status status_;
  std::thread::id thread_;
};

TEST(OnCompleteTest, RunsOnceOnAWorkerThreadAfterTheResultIsWritten) {
  auto cluster = Cluster(2, FastOptions(2));
  LoopbackCluster& c = *cluster;
  const size_t count = 5000;
  std::vector<int32_t> a(count, 1), b(count, 2);
  auto h = c.ctx(0).AllReduceAsync(a.data(), a.data(), count, DataType::kInt32);
  // Rank 1 has not submitted yet, so this call cannot have finished: the callback is queued.
  Recorder rec;
  int32_t first = 0, last = 0;
  Status own;
  uint64_t completed_seen = ~0ull;
  h.OnComplete(rec.Callback([&] {
    first = a[0];
    last = a[count - 1];
    own = h.status();  // its own handle is done
    completed_seen = c.ctx(0).GetStats().calls_completed;
  }));
  h.OnComplete(rec.Callback());  // a second registration runs too, once
  EXPECT_EQ(rec.runs(), 0);
  ASSERT_TRUE(c.ctx(1).AllReduce(b.data(), b.data(), count, DataType::kInt32).ok());
  ASSERT_TRUE(h.Wait().ok());
  ASSERT_TRUE(rec.WaitForRuns(2));
  EXPECT_TRUE(rec.status().ok()) << rec.status();
  EXPECT_NE(rec.thread(), std::this_thread::get_id());
  EXPECT_EQ(first, 3);
  EXPECT_EQ(last, 3);
  EXPECT_TRUE(own.ok()) << own;
  EXPECT_EQ(completed_seen, 1u);
  c.DestroyContext(0);
  c.DestroyContext(1);
  EXPECT_EQ(rec.runs(), 2);  // never again
}

TEST(OnCompleteTest, AlreadyFinishedRunsAtOnceOnTheCallersThread) {
  auto cluster = Cluster(1, FastOptions());
  LoopbackCluster& c = *cluster;
  std::vector<float> buf(100, 1.0f);
  auto h = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kFloat32);
  ASSERT_TRUE(h.Wait().ok());
  Recorder done;
  h.OnComplete(done.Callback());
  EXPECT_EQ(done.runs(), 1);  // before OnComplete returned
  EXPECT_EQ(done.thread(), std::this_thread::get_id());
  EXPECT_TRUE(done.status().ok());
  // Rejected at submission: already done, with the error.
  Recorder rejected;
  c.ctx(0).AllReduceAsync(nullptr, buf.data(), 10, DataType::kFloat32).OnComplete(rejected.Callback());
  EXPECT_EQ(rejected.runs(), 1);
  EXPECT_EQ(rejected.thread(), std::this_thread::get_id());
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rejected.status().message().find("in is null"), std::string::npos) << rejected.status();
  // An empty handle never finishes: FAILED_PRECONDITION at once, so fn still runs exactly once.
  Recorder empty;
  AllReduceHandle().OnComplete(empty.Callback());
  EXPECT_EQ(empty.runs(), 1);
  EXPECT_EQ(empty.status().code(), StatusCode::kFailedPrecondition);
  h.OnComplete({});  // ignored
}

TEST(OnCompleteTest, AFailedCallReportsItsError) {
  Options o = FastOptions();
  o.call_timeout = std::chrono::milliseconds(300);
  auto cluster = Cluster(2, o);
  LoopbackCluster& c = *cluster;
  std::vector<int32_t> buf(1000, 1);
  Recorder rec;
  auto h = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  h.OnComplete(rec.Callback());  // rank 1 never submits: the call times out
  ASSERT_TRUE(rec.WaitForRuns(1));
  EXPECT_EQ(rec.status().code(), StatusCode::kDeadlineExceeded) << rec.status();
  EXPECT_EQ(rec.status().ToString(), h.Wait().ToString());
  // The broken context's next call fails at submission: its callback runs at once.
  Recorder next;
  c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32).OnComplete(next.Callback());
  EXPECT_EQ(next.runs(), 1);
  EXPECT_EQ(next.status().code(), StatusCode::kFailedPrecondition) << next.status();
}

TEST(OnCompleteTest, CallsCancelledByDestroyingTheContextRunTheirCallbacksBeforeItReturns) {
  // One worker thread: with several, another thread's slice of a queued call may see the
  // context broken by the cancellation first (ABORTED naming it) instead of CANCELLED.
  auto cluster = Cluster(2, FastOptions(1));
  LoopbackCluster& c = *cluster;
  std::vector<int32_t> buf(100000, 1);
  Recorder running, queued;
  auto h1 = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  auto h2 = c.ctx(0).AllReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  h1.OnComplete(running.Callback());
  h2.OnComplete(queued.Callback());
  c.DestroyContext(0);  // rank 1 never participates
  EXPECT_EQ(running.runs(), 1);
  EXPECT_EQ(queued.runs(), 1);
  EXPECT_FALSE(running.status().ok());
  EXPECT_EQ(queued.status().code(), StatusCode::kCancelled) << queued.status();
  EXPECT_EQ(queued.status().ToString(), h2.status().ToString());
  Recorder late;  // after the context is gone: at once, with the same result
  h2.OnComplete(late.Callback());
  EXPECT_EQ(late.runs(), 1);
  EXPECT_EQ(late.status().code(), StatusCode::kCancelled);
}

// Registrations from three threads race the completions of a stream of calls: one registers
// right after each submission (mostly before completion), one when the previous call finished
// (mostly while the call completes), one after the call finished. Every callback runs exactly
// once, with the call's result, wherever it lands.
TEST(OnCompleteTest, RegistrationRacingCompletionRunsEveryCallbackExactlyOnce) {
  auto cluster = Cluster(1, FastOptions(2));
  LoopbackCluster& c = *cluster;
  constexpr int kCalls = 300;
  std::vector<std::vector<int32_t>> bufs(kCalls, std::vector<int32_t>(70, 1));
  std::vector<std::atomic<int>> runs(kCalls);
  std::vector<AllReduceHandle> handles(kCalls);
  std::atomic<int> submitted{0};
  std::atomic<int> on_worker{0}, inline_runs{0}, failed{0};
  auto registrar = [&](int tag) {
    const auto me = std::this_thread::get_id();
    for (int i = 0; i < kCalls; ++i) {
      while (submitted.load(std::memory_order_acquire) <= i) std::this_thread::yield();
      AllReduceHandle h = handles[i];
      if (tag == 10 && i > 0) {
        while (!handles[i - 1].IsDone()) std::this_thread::yield();
      } else if (tag == 100) {
        (void)h.Wait();
      }
      h.OnComplete([&, i, me, tag](const Status& s) {
        if (!s.ok()) failed.fetch_add(1);
        runs[i].fetch_add(tag, std::memory_order_relaxed);
        (std::this_thread::get_id() == me ? inline_runs : on_worker).fetch_add(1);
      });
    }
  };
  std::thread submitter([&] {
    for (int i = 0; i < kCalls; ++i) {
      handles[i] = c.ctx(0).AllReduceAsync(bufs[i].data(), bufs[i].data(), bufs[i].size(), DataType::kInt32);
      submitted.store(i + 1, std::memory_order_release);
    }
  });
  std::thread r1(registrar, 1), r2(registrar, 10), r3(registrar, 100);
  submitter.join();
  r1.join();
  r2.join();
  r3.join();
  for (auto& h : handles) ASSERT_TRUE(h.Wait().ok()) << h.status();
  c.DestroyContext(0);  // every callback has run when this returns
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(runs[i].load(), 111) << "call " << i;
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(on_worker.load() + inline_runs.load(), 3 * kCalls);
  EXPECT_GE(inline_runs.load(), kCalls);  // the third registrar's, at least
  std::printf("callbacks run on a worker thread: %d, at registration: %d\n", on_worker.load(), inline_runs.load());
}

// ---- A call one rank rejects fails on every rank, and the calls after it pair up ----

// How rank 0 spoils its call x (the other ranks' x is fine).
enum class Spoil { kNaN, kInfinity, kTooLarge, kOverlap, kNullInput, kNotSum };

const char* SpoilName(Spoil s) {
  switch (s) {
    case Spoil::kNaN: return "NaN";
    case Spoil::kInfinity: return "infinity";
    case Spoil::kTooLarge: return "2^127";
    case Spoil::kOverlap: return "overlapping in and out";
    case Spoil::kNullInput: return "null input";
    case Spoil::kNotSum: return "an op other than SUM";
  }
  return "?";
}

// The sequence: every rank calls AllReduce(x), then y, then z (1,024 float32 each;
// x = r+1, y = 100(r+1), z = 10,000(r+1), with threads worker threads); rank 0 spoils x. Every
// rank must get an error for x and exact y and z.
void ExpectRejectedCallFailsEverywhere(Spoil spoil, uint32_t n, uint32_t threads) {
  SCOPED_TRACE(std::string("rank 0's x: ") + SpoilName(spoil) + ", " + std::to_string(n) + " ranks, " +
               std::to_string(threads) + " worker threads");
  auto cluster = Cluster(n, FastOptions(threads));
  LoopbackCluster& c = *cluster;
  constexpr size_t kCount = 1024;
  std::vector<Status> sx(n), sy(n), sz(n);
  std::vector<std::vector<float>> x(n), y(n), z(n);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < n; ++r) {
    x[r].assign(2 * kCount, float(r + 1));
    y[r].assign(kCount, 100.0f * float(r + 1));
    z[r].assign(kCount, 10000.0f * float(r + 1));
    ranks.emplace_back([&, r] {
      Context& ctx = c.ctx(r);
      const float* in = x[r].data();
      float* out = x[r].data();
      ReduceOp op = ReduceOp::kSum;
      if (r == 0) {
        switch (spoil) {
          case Spoil::kNaN: x[r][700] = std::numeric_limits<float>::quiet_NaN(); break;
          case Spoil::kInfinity: x[r][3] = -std::numeric_limits<float>::infinity(); break;
          case Spoil::kTooLarge: x[r][1023] = 0x1p127f; break;
          case Spoil::kOverlap: out = x[r].data() + 1; break;
          case Spoil::kNullInput: in = nullptr; break;
          case Spoil::kNotSum: op = static_cast<ReduceOp>(3); break;
        }
      }
      sx[r] = ctx.AllReduce(in, out, kCount, DataType::kFloat32, op);
      sy[r] = ctx.AllReduce(y[r].data(), y[r].data(), kCount, DataType::kFloat32);
      sz[r] = ctx.AllReduce(z[r].data(), z[r].data(), kCount, DataType::kFloat32);
    });
  }
  for (auto& t : ranks) t.join();
  const float sum = float(n * (n + 1) / 2);
  for (uint32_t r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_FALSE(sx[r].ok()) << "x came back OK on a rank although rank 0 rejected it";
    if (r == 0) {
      EXPECT_EQ(sx[r].code(), StatusCode::kInvalidArgument) << sx[r];
    } else {
      EXPECT_EQ(sx[r].code(), StatusCode::kAborted) << sx[r];
      EXPECT_NE(sx[r].message().find("was rejected by"), std::string::npos) << sx[r];
      // Nothing was written: x is still this rank's input.
      EXPECT_EQ(x[r][0], float(r + 1));
      EXPECT_EQ(x[r][kCount - 1], float(r + 1));
    }
    ASSERT_TRUE(sy[r].ok()) << sy[r];
    ASSERT_TRUE(sz[r].ok()) << sz[r];
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(y[r][i], 100.0f * sum) << "y[" << i << "]";
      ASSERT_EQ(z[r][i], 10000.0f * sum) << "z[" << i << "]";
    }
    const Stats st = c.ctx(r).GetStats();
    EXPECT_EQ(st.calls_submitted, 3u);
    EXPECT_EQ(st.calls_completed, 2u);
    EXPECT_EQ(st.calls_failed, 1u);
  }
}

TEST(RejectedCallTest, NaNOnOneRankFailsTheCallOnBothAndLaterCallsAreExact) {
  ExpectRejectedCallFailsEverywhere(Spoil::kNaN, 2, 1);
}
TEST(RejectedCallTest, EveryKindOfLocalRejection) {
  for (Spoil s : {Spoil::kInfinity, Spoil::kTooLarge, Spoil::kOverlap, Spoil::kNullInput, Spoil::kNotSum})
    ExpectRejectedCallFailsEverywhere(s, 2, 1);
}
TEST(RejectedCallTest, ThreeRanksAndSeveralWorkerThreads) {
  ExpectRejectedCallFailsEverywhere(Spoil::kNaN, 3, 3);
  ExpectRejectedCallFailsEverywhere(Spoil::kOverlap, 3, 2);
}

// An int32 call whose first round comes back out of order still pairs up: results that arrive
// before packet 0's (held until the verdict) land in the output exactly (loss and reordering
// on the fabric move packet 0's result behind others).
TEST(RejectedCallTest, HeldFirstRoundResultsAreExactUnderReordering) {
  transport::FaultOptions f;
  f.loss = 0.05;
  f.reorder = 0.2;
  f.seed = 5;
  const uint32_t n = 2;
  auto cluster = Cluster(n, FastOptions(1), f, /*late_duplicate_guard=*/true);
  LoopbackCluster& c = *cluster;
  for (int call = 0; call < 12; ++call) {
    const size_t count = 64 * 20 + call;
    std::vector<std::vector<int32_t>> data(n, std::vector<int32_t>(count));
    std::vector<Status> st(n);
    std::vector<std::thread> ranks;
    for (uint32_t r = 0; r < n; ++r) {
      testing::FillInt32(r, call, data[r].data(), count);
      ranks.emplace_back([&, r] {
        // Every third call rank 1 rejects (a null output), the others are exact.
        void* out = (call % 3 == 2 && r == 1) ? nullptr : data[r].data();
        st[r] = c.ctx(r).AllReduce(data[r].data(), out, count, DataType::kInt32);
      });
    }
    for (auto& t : ranks) t.join();
    for (uint32_t r = 0; r < n; ++r) {
      if (call % 3 == 2) {
        EXPECT_FALSE(st[r].ok()) << "call " << call << " rank " << r;
      } else {
        ASSERT_TRUE(st[r].ok()) << "call " << call << " rank " << r << ": " << st[r];
        EXPECT_EQ(testing::VerifyInt32(data[r].data(), count, n, call).wrong, 0u) << "call " << call << " rank " << r;
      }
    }
  }
  EXPECT_GT(c.fabric().counters().reordered, 0u);
}

// Rejected when it starts: rank 0's call reads an earlier call's output, which is too large to
// quantize (two values near 2^127 add up beyond it), so rank 0 can only see it when the call starts;
// rank 1's call reads a finite buffer. Both fail, nothing is written, the next call is exact.
TEST(RejectedCallTest, RejectionWhenTheCallStartsFailsEverywhere) {
  const uint32_t n = 2;
  auto cluster = Cluster(n, FastOptions(2));
  LoopbackCluster& c = *cluster;
  constexpr size_t kCount = 600;
  std::vector<std::vector<float>> a(n, std::vector<float>(kCount, 0x1.9p126f)), b(n), d(n);
  std::vector<Status> sa(n), sb(n), sd(n);
  std::vector<std::thread> ranks;
  for (uint32_t r = 0; r < n; ++r) {
    b[r].assign(kCount, 5.0f);
    d[r].assign(kCount, float(r + 1));
    ranks.emplace_back([&, r] {
      Context& ctx = c.ctx(r);
      AllReduceHandle ha = ctx.AllReduceAsync(a[r].data(), a[r].data(), kCount, DataType::kFloat32);
      // Rank 0 chains on a's output (checked when the call starts); rank 1 reads b.
      float* in = r == 0 ? a[r].data() : b[r].data();
      AllReduceHandle hb = ctx.AllReduceAsync(in, in, kCount, DataType::kFloat32);
      sa[r] = ha.Wait();
      sb[r] = hb.Wait();
      sd[r] = ctx.AllReduce(d[r].data(), d[r].data(), kCount, DataType::kFloat32);
    });
  }
  for (auto& t : ranks) t.join();
  for (uint32_t r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(sa[r].ok()) << sa[r];
    EXPECT_GE(std::fabs(a[r][0]), 0x1p127f) << a[r][0];
    EXPECT_FALSE(sb[r].ok());
    EXPECT_EQ(sb[r].code(), r == 0 ? StatusCode::kInvalidArgument : StatusCode::kAborted) << sb[r];
    if (r == 0) {
      EXPECT_NE(sb[r].message().find("checked when the call started"), std::string::npos) << sb[r];
    } else {
      EXPECT_EQ(b[r][0], 5.0f);
    }
    ASSERT_TRUE(sd[r].ok()) << sd[r];
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(d[r][i], 3.0f) << i;
  }
}

// The deprecated names of one release (Options::max_jobs_in_flight, Options::job_timeout,
// Stats::jobs_*) still work, with the documented precedence.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(DeprecatedNamesTest, OptionsAliasesAreFoldedIntoTheNewFields) {
  Options o;
  o.job_timeout = std::chrono::milliseconds(1234);
  o.max_jobs_in_flight = 7;
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  StatusOr<Options> r = o.Resolved();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->call_timeout, std::chrono::milliseconds(1234));
  EXPECT_EQ(r->max_calls_in_flight, 7u);
  EXPECT_EQ(r->job_timeout, std::chrono::milliseconds(1234));  // both report the value in force
  EXPECT_EQ(r->max_jobs_in_flight, 7u);
  // Unset deprecated fields: the new ones stand, and the old ones mirror them.
  Options plain;
  plain.call_timeout = std::chrono::milliseconds(99);
  EXPECT_EQ(plain.Resolved()->call_timeout, std::chrono::milliseconds(99));
  EXPECT_EQ(plain.Resolved()->job_timeout, std::chrono::milliseconds(99));
  EXPECT_EQ(plain.Resolved()->max_calls_in_flight, 256u);
  // Both set, equal: fine. Both set, different: INVALID_ARGUMENT naming both.
  Options both = o;
  both.call_timeout = std::chrono::milliseconds(1234);
  EXPECT_TRUE(both.Validate().ok());
  both.call_timeout = std::chrono::milliseconds(500);
  EXPECT_EQ(both.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(both.Validate().message().find("job_timeout (deprecated) = 1234 ms and call_timeout = 500 ms disagree"),
            std::string::npos) << both.Validate();
  both = o;
  both.max_calls_in_flight = 8;
  EXPECT_NE(both.Validate().message().find("max_jobs_in_flight (deprecated) = 7 and max_calls_in_flight = 8"),
            std::string::npos) << both.Validate();
  // A bad value through the old name is caught like one through the new name.
  Options bad;
  bad.max_jobs_in_flight = 70000;
  EXPECT_NE(bad.Validate().message().find("max_calls_in_flight must be in [1, 65536], got 70000"), std::string::npos)
      << bad.Validate();
}

TEST(DeprecatedNamesTest, AContextHonoursTheOldTimeoutAndFillsTheOldStats) {
  Options o = FastOptions();
  o.call_timeout = Options().call_timeout;  // left at its default: the deprecated field wins
  o.job_timeout = std::chrono::milliseconds(300);
  auto cluster = Cluster(2, o);
  LoopbackCluster& c = *cluster;
  EXPECT_EQ(c.ctx(0).options().call_timeout, std::chrono::milliseconds(300));
  std::vector<int32_t> buf(1000, 1), other(1000, 2);
  // A call that completes, then one that times out after the old field's 300 ms (rank 1 stays
  // away), not the default 10 s.
  std::thread peer([&] { ASSERT_TRUE(c.ctx(1).AllReduce(other.data(), other.data(), other.size(), DataType::kInt32).ok()); });
  ASSERT_TRUE(c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kInt32).ok());
  peer.join();
  // Which timeout ended it is in the message ("... for 300 ms ..."), not in the clock.
  const Status timed_out = c.ctx(0).AllReduce(buf.data(), buf.data(), buf.size(), DataType::kInt32);
  EXPECT_EQ(timed_out.code(), StatusCode::kDeadlineExceeded) << timed_out;
  EXPECT_NE(timed_out.message().find(" for 300 ms "), std::string::npos) << timed_out;
  const Stats s = c.ctx(0).GetStats();
  EXPECT_EQ(s.calls_submitted, 2u);
  EXPECT_EQ(s.calls_completed, 1u);
  EXPECT_EQ(s.calls_failed, 1u);
  EXPECT_EQ(s.jobs_submitted, s.calls_submitted);
  EXPECT_EQ(s.jobs_completed, s.calls_completed);
  EXPECT_EQ(s.jobs_failed, s.calls_failed);
}
#pragma GCC diagnostic pop

TEST(OptionsTest, ValidateNamesTheField) {
  Options o;
  EXPECT_TRUE(o.Validate().ok());
  auto msg = [](Options x) { return x.Validate().message(); };
  Options b = o;
  b.num_workers = 0;
  EXPECT_NE(msg(b).find("num_workers"), std::string::npos);
  b = o; b.num_workers = Options::kMaxWorkers + 1;
  EXPECT_NE(msg(b).find("num_workers must be in [1, 32768]"), std::string::npos);
  b = o; b.num_workers = 1024; b.rank = 1023;  // a two-level job's global rank and count
  EXPECT_TRUE(b.Validate().ok());
  b = o; b.num_workers = 4; b.rank = 4;
  EXPECT_NE(msg(b).find("rank"), std::string::npos);
  b = o; b.elements_per_packet = 100;
  EXPECT_NE(msg(b).find("elements_per_packet must be one of 64, 256, 512, 1024, got 100"), std::string::npos);
  b = o; b.num_worker_threads = 3; b.window_packets = 256;
  EXPECT_NE(msg(b).find("multiple of num_worker_threads"), std::string::npos);
  b = o; b.num_worker_threads = 0;
  EXPECT_NE(msg(b).find("num_worker_threads"), std::string::npos);
  b = o; b.window_packets = 0;
  EXPECT_NE(msg(b).find("window_packets"), std::string::npos);
  b = o; b.initial_rto = std::chrono::seconds(5);
  EXPECT_NE(msg(b).find("initial_rto"), std::string::npos);
  b = o; b.call_timeout = std::chrono::milliseconds(0);
  EXPECT_NE(msg(b).find("call_timeout"), std::string::npos);
  b = o; b.controller_address = "300.1.1.1:5";
  EXPECT_NE(msg(b).find("controller_address"), std::string::npos);
  b = o; b.job_id = 7;
  EXPECT_NE(msg(b).find("job_token must be set when job_id is (job_id=7)"), std::string::npos);
  b = o; b.job_token = "secret";
  EXPECT_NE(msg(b).find("job_token is set but job_id is 0"), std::string::npos);
  b = o; b.busy_poll = std::chrono::seconds(2);
  EXPECT_NE(msg(b).find("busy_poll must be in [0, 1000000] us, got 2000000 us"), std::string::npos);
  b = o; b.controller_address = "";
  EXPECT_NE(msg(b).find("controller_address"), std::string::npos);
  EXPECT_EQ(b.Validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace switchml
