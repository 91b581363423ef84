// SliceEngine against the real switch core (dataplane::SwitchCore), with a fake clock and
// seeded loss in both directions: every timeout, backoff and retransmission path runs in
// microseconds of real time.
#include "client/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "control/switch_control.h"
#include "dataplane/switch_core.h"
#include "quant/quantizer.h"
#include "testing/exact_inputs.h"
#include "wire/packet.h"
#include "wire/payload.h"

namespace switchml::client {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

constexpr transport::Endpoint kSwitch{0x0A0000FE, 48864};
transport::Endpoint WorkerEp(uint32_t r) { return {0x0A000001 + r, 5000}; }

struct Packet {
  std::vector<uint8_t> bytes;
  transport::Endpoint from, to;
};

// N workers, each one SliceEngine (one thread), around one SwitchCore. Each Step() advances
// the fake clock by `step` and moves every datagram one hop, dropping with the given
// probabilities.
class Sim {
 public:
  Sim(uint32_t n, uint32_t window, uint32_t elements, double loss_up = 0, double loss_down = 0,
      uint64_t seed = 1)
      : n_(n), loss_up_(loss_up), loss_down_(loss_down), rng_(seed) {
    dataplane::SwitchConfig sc;
    sc.num_slots = 1024;
    sc.max_elements_per_packet = 1024;
    core_.emplace(std::move(dataplane::SwitchCore::Create(sc)).value());
    for (uint32_t r = 0; r < n; ++r) {
      control::WorkerRegistration reg;
      reg.rank = r;
      reg.num_workers = n;
      reg.ipv4 = WorkerEp(r).ipv4;
      reg.udp_ports = {WorkerEp(r).port};
      EXPECT_TRUE(core_->RegisterWorker(reg).ok());
      EngineConfig c;
      c.slot_base = 0;
      c.window = window;
      c.elements_per_packet = elements;
      c.num_workers = n;
      c.switch_endpoint = kSwitch;
      c.initial_rto = milliseconds(2);
      c.min_rto = milliseconds(1);
      c.max_rto = milliseconds(50);
      c.call_timeout = milliseconds(2000);
      engines_.emplace_back(c);
    }
  }

  // Runs one slice on every worker with per-rank inputs; returns each worker's status.
  std::vector<Status> Run(DataType type, std::vector<const void*> in, std::vector<void*> out, size_t count,
                          uint64_t job_id, int max_steps = 2000000) {
    std::vector<SliceSpec> specs;
    for (uint32_t r = 0; r < n_; ++r) specs.push_back(SliceSpec{job_id, type, in[r], out[r], count});
    return Run(specs, max_steps);
  }
  // The same with a spec per worker (descriptors, precomputed exponents, different counts).
  std::vector<Status> Run(const std::vector<SliceSpec>& specs, int max_steps = 2000000) {
    for (uint32_t r = 0; r < n_; ++r) engines_[r].Begin(specs[r], now_);
    for (int i = 0; i < max_steps && AnyActive(); ++i) Step();
    std::vector<Status> st;
    for (auto& e : engines_) st.push_back(e.active() ? InternalError("still active") : e.result());
    return st;
  }

  bool AnyActive() const {
    for (auto& e : engines_) if (e.active()) return true;
    return false;
  }

  void Step() {
    now_ += step_;
    // Workers → switch.
    std::vector<Packet> up;
    for (uint32_t r = 0; r < n_; ++r) {
      transport::TxDatagram tx[64];
      while (engines_[r].pending_sends() > 0) {
        size_t k = engines_[r].PeekSends(tx);
        for (size_t j = 0; j < k; ++j) {
          EXPECT_EQ(tx[j].to, kSwitch);
          if (Chance(loss_up_)) { ++lost_up; continue; }
          up.push_back({std::vector<uint8_t>(tx[j].data, tx[j].data + tx[j].size), WorkerEp(r), tx[j].to});
          if (duplicate_up_) up.push_back(up.back());
        }
        engines_[r].ConfirmSent(k, now_);
      }
    }
    std::vector<transport::RxDatagram> rx;
    for (auto& p : up) {
      transport::RxDatagram d;
      d.data = p.bytes.data();
      d.capacity = d.size = uint32_t(p.bytes.size());
      d.from = p.from;
      rx.push_back(d);
    }
    dataplane::Outbox out;
    core_->ProcessBurst(rx, out);
    for (auto& t : out.datagrams()) {
      if (Chance(loss_down_)) { ++lost_down; continue; }
      in_flight_down_.push_back({std::vector<uint8_t>(t.data, t.data + t.size), kSwitch, t.to});
      if (duplicate_down_) in_flight_down_.push_back(in_flight_down_.back());
    }
    // Switch → workers (delivered on the next step: one step of latency each way).
    std::vector<Packet> deliver;
    deliver.swap(delivering_);
    delivering_.swap(in_flight_down_);
    for (auto& p : deliver) {
      if (drop_all_to_rank0_ && p.to == WorkerEp(0)) continue;
      if (drop_first_result_of_slot0_to_rank0_ && !dropped_slot0_result_ && p.to == WorkerEp(0)) {
        wire::PacketView v;
        if (wire::Decode(p.bytes, &v) == wire::DecodeError::kOk && v.header.slot == 0) {
          dropped_slot0_result_ = true;
          continue;
        }
      }
      for (uint32_t r = 0; r < n_; ++r) {
        if (p.to == WorkerEp(r)) engines_[r].OnDatagram(p.bytes, now_);
      }
    }
    for (auto& e : engines_) e.OnTick(now_);
  }

  bool Chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  uint32_t n_;
  double loss_up_, loss_down_;
  bool duplicate_up_ = false, duplicate_down_ = false;
  bool drop_first_result_of_slot0_to_rank0_ = false, dropped_slot0_result_ = false;
  bool drop_all_to_rank0_ = false;  // every result to rank 0 is lost
  std::mt19937_64 rng_;
  std::optional<dataplane::SwitchCore> core_;
  std::vector<SliceEngine> engines_;
  TimePoint now_{};
  Duration step_ = microseconds(100);
  std::vector<Packet> in_flight_down_, delivering_;
  uint64_t lost_up = 0, lost_down = 0;
};

struct Buffers {
  std::vector<std::vector<int32_t>> in, out;
  std::vector<const void*> ins() const { std::vector<const void*> v; for (auto& b : in) v.push_back(b.data()); return v; }
  std::vector<void*> outs() { std::vector<void*> v; for (auto& b : out) v.push_back(b.data()); return v; }
};

Buffers MakeInt32(uint32_t n, size_t count, uint64_t offset = 0) {
  Buffers b;
  for (uint32_t r = 0; r < n; ++r) {
    b.in.emplace_back(count + 1);
    b.out.emplace_back(count + 1, 0x5A5A5A5A);
    testing::FillInt32(r, offset, b.in.back().data(), count);
  }
  return b;
}

void ExpectExactInt32(Buffers& b, uint32_t n, size_t count, uint64_t offset = 0) {
  for (uint32_t r = 0; r < n; ++r) {
    auto v = testing::VerifyInt32(b.out[r].data(), count, n, offset);
    EXPECT_EQ(v.wrong, 0u) << "rank " << r << " first wrong at " << v.first_wrong;
    EXPECT_EQ(b.out[r][count], 0x5A5A5A5A) << "wrote past the end";
  }
}

TEST(EngineTest, Int32ExactAcrossWorkerCountsAndSizes) {
  const uint32_t W = 8, N = 64;
  for (uint32_t n : {1u, 2u, 3u, 8u}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{W * N - 1},
                         size_t{W * N}, size_t{W * N + 1}, size_t{5000}}) {
      Sim sim(n, W, N);
      auto b = MakeInt32(n, count);
      auto st = sim.Run(DataType::kInt32, b.ins(), b.outs(), count, 7);
      for (auto& s : st) ASSERT_TRUE(s.ok()) << s << " n=" << n << " count=" << count;
      ExpectExactInt32(b, n, count);
      EXPECT_EQ(sim.engines_[0].stats().retransmissions, 0u);
    }
  }
}

TEST(EngineTest, Float32WithinBoundAndIdenticalUnderLoss) {
  const uint32_t n = 3, count = 3000;
  std::vector<std::vector<float>> in(n), clean(n), lossy(n);
  for (uint32_t r = 0; r < n; ++r) {
    in[r].resize(count);
    testing::FillFloat32(r, 0, in[r].data(), count);
    clean[r].assign(count, -1);
    lossy[r].assign(count, -2);
  }
  auto run = [&](double up, double down, std::vector<std::vector<float>>& out) {
    Sim sim(n, 16, 64, up, down, 42);
    std::vector<const void*> i;
    std::vector<void*> o;
    for (uint32_t r = 0; r < n; ++r) { i.push_back(in[r].data()); o.push_back(out[r].data()); }
    auto st = sim.Run(DataType::kFloat32, i, o, count, 1);
    for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
    return sim.engines_[0].stats().retransmissions + sim.engines_[1].stats().retransmissions;
  };
  EXPECT_EQ(run(0, 0, clean), 0u);
  EXPECT_GT(run(0.05, 0.05, lossy), 0u);
  for (uint32_t r = 0; r < n; ++r) {
    auto v = testing::VerifyFloat32(clean[r].data(), count, n);
    EXPECT_EQ(v.wrong, 0u) << "max err " << v.max_abs_error << " tol " << v.tolerance;
    EXPECT_EQ(0, std::memcmp(clean[r].data(), lossy[r].data(), count * 4)) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(clean[0].data(), clean[r].data(), count * 4)) << "ranks disagree";
  }
}

TEST(EngineTest, Int32ExactUnderLossAndDuplication) {
  for (uint64_t seed : {1, 2, 3}) {
    const uint32_t n = 4, count = 4000;
    Sim sim(n, 8, 64, 0.1, 0.1, seed);
    sim.duplicate_up_ = seed == 2;
    sim.duplicate_down_ = seed == 3;
    auto b = MakeInt32(n, count);
    auto st = sim.Run(DataType::kInt32, b.ins(), b.outs(), count, 3);
    for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
    ExpectExactInt32(b, n, count);
    EXPECT_GT(sim.lost_up + sim.lost_down, 0u);
    uint64_t retx = 0, dups = 0;
    for (auto& e : sim.engines_) { retx += e.stats().retransmissions; dups += e.stats().duplicates; }
    EXPECT_GT(retx, 0u);
    if (seed == 3) {
      EXPECT_GT(dups, 0u);
    }
  }
}

// Consecutive jobs of different sizes on the same slots, including float32 jobs with
// W/2 < blocks < W (the range of reference defect D3,
// docs/protocol.md#d3-set-reuse-in-short-float32-slices), under loss: every slot must strictly
// alternate sets, identically on all workers, and every result must be right.
TEST(EngineTest, SetAlternationAcrossJobsOfDifferentSizes) {
  const uint32_t n = 3, W = 8, N = 64;
  Sim sim(n, W, N, 0.08, 0.08, 9);
  std::vector<uint8_t> expected_set(W, 0);
  uint64_t job = 0;
  for (size_t blocks : {8, 5, 7, 1, 6, 3, 8, 2, 13, 5, 17, 4}) {
    for (DataType type : {DataType::kFloat32, DataType::kInt32}) {
      const size_t count = blocks * N - (blocks % 2);  // some partial last blocks
      const size_t B = std::min<size_t>(W, blocks);
      const size_t total = blocks + (type == DataType::kFloat32 ? B : 0);
      if (type == DataType::kInt32) {
        auto b = MakeInt32(n, count, job * 1000);
        auto st = sim.Run(type, b.ins(), b.outs(), count, job);
        for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
        ExpectExactInt32(b, n, count, job * 1000);
      } else {
        std::vector<std::vector<float>> in(n, std::vector<float>(count)), out(n, std::vector<float>(count));
        std::vector<const void*> i;
        std::vector<void*> o;
        for (uint32_t r = 0; r < n; ++r) {
          testing::FillFloat32(r, job * 1000, in[r].data(), count);
          i.push_back(in[r].data());
          o.push_back(out[r].data());
        }
        auto st = sim.Run(type, i, o, count, job);
        for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
        for (uint32_t r = 0; r < n; ++r) EXPECT_EQ(testing::VerifyFloat32(out[r].data(), count, n, job * 1000).wrong, 0u);
      }
      // Packet p used slot p mod B: each slot i < B carried ceil((total - i) / B) packets.
      for (size_t s = 0; s < B; ++s) {
        const size_t uses = (total - s + B - 1) / B;
        expected_set[s] ^= uint8_t(uses & 1);
      }
      for (uint32_t r = 0; r < n; ++r)
        for (uint32_t s = 0; s < W; ++s)
          ASSERT_EQ(sim.engines_[r].next_set(s), expected_set[s]) << "rank " << r << " slot " << s << " job " << job;
      ++job;
    }
  }
}

TEST(EngineTest, RetransmitsWithExponentialBackoffThenTimesOut) {
  // One worker of two: the other never sends, so the round never completes.
  EngineConfig c;
  c.window = 4;
  c.elements_per_packet = 64;
  c.num_workers = 2;
  c.switch_endpoint = kSwitch;
  c.initial_rto = milliseconds(10);
  c.min_rto = milliseconds(1);
  c.max_rto = milliseconds(80);
  c.call_timeout = milliseconds(1000);
  SliceEngine e(c);
  std::vector<int32_t> in(64, 1), out(64);
  TimePoint t{};
  e.Begin({1, DataType::kInt32, in.data(), out.data(), 64}, t);
  transport::TxDatagram tx[8];
  std::vector<TimePoint> sends;
  auto flush = [&] {
    size_t k = e.PeekSends(tx);
    for (size_t j = 0; j < k; ++j) sends.push_back(t);
    e.ConfirmSent(k, t);
  };
  flush();
  ASSERT_EQ(sends.size(), 1u);
  while (e.active()) {
    t += milliseconds(1);
    e.OnTick(t);
    flush();
  }
  // Sent at 0, then retransmitted after 10, 20, 40, 80, 80, ... ms.
  ASSERT_GE(sends.size(), 6u);
  auto ms = [](Duration d) { return std::chrono::duration_cast<milliseconds>(d).count(); };
  EXPECT_EQ(ms(sends[1] - sends[0]), 10);
  EXPECT_EQ(ms(sends[2] - sends[1]), 20);
  EXPECT_EQ(ms(sends[3] - sends[2]), 40);
  EXPECT_EQ(ms(sends[4] - sends[3]), 80);
  EXPECT_EQ(ms(sends[5] - sends[4]), 80);
  EXPECT_EQ(e.result().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(e.result().message().find("10.0.0.254:48864"), std::string::npos) << e.result();
  EXPECT_EQ(ms(t - TimePoint{}), 1000);
  EXPECT_EQ(e.stats().retransmissions, sends.size() - 1);
  EXPECT_EQ(e.stats().timeouts, sends.size() - 1);
}

TEST(EngineTest, RtoAdaptsToMeasuredRtt) {
  Sim sim(2, 4, 64);
  sim.step_ = milliseconds(3);  // a result arrives one step after its packet: RTT = 3 ms
  auto b = MakeInt32(2, 64 * 40);
  auto st = sim.Run(DataType::kInt32, b.ins(), b.outs(), 64 * 40, 1);
  ASSERT_TRUE(st[0].ok());
  ExpectExactInt32(b, 2, 64 * 40);
  const auto rto = std::chrono::duration_cast<microseconds>(sim.engines_[0].current_rto()).count();
  EXPECT_GE(rto, 3000);  // at least the RTT
  EXPECT_LE(rto, 6000);  // the variance term decays with a steady RTT (initial RTO was 2 ms)
  EXPECT_EQ(sim.engines_[0].stats().retransmissions, 0u);
}

TEST(EngineTest, IgnoresStaleMalformedAndForeignResults) {
  Sim sim(2, 4, 64);
  auto b = MakeInt32(2, 256);
  for (uint32_t r = 0; r < 2; ++r) sim.engines_[r].Begin({5, DataType::kInt32, b.in[r].data(), b.out[r].data(), 256}, sim.now_);
  auto& e = sim.engines_[0];
  // A result for another job number, a slot outside the window, a wrong set, and garbage.
  std::vector<uint8_t> d(wire::PacketBytes(64), 0);
  wire::Header h{.size_code = 1, .job_number = 4, .tsi = 0, .slot = 0, .set = 0};
  wire::EncodePrefix(h, d.data());
  e.OnDatagram(d, sim.now_);
  h.job_number = 5;
  h.slot = 9;
  wire::EncodePrefix(h, d.data());
  e.OnDatagram(d, sim.now_);
  h.slot = 0;
  h.set = 1;
  wire::EncodePrefix(h, d.data());
  e.OnDatagram(d, sim.now_);
  h.set = 0;
  h.tsi = 3;  // in the window but slot 0 carries packet 0
  wire::EncodePrefix(h, d.data());
  e.OnDatagram(d, sim.now_);
  uint8_t junk[5] = {1, 2, 3, 4, 5};
  e.OnDatagram(junk, sim.now_);
  EXPECT_EQ(e.stats().duplicates, 4u);
  EXPECT_EQ(e.stats().malformed, 1u);
  EXPECT_EQ(e.stats().results_received, 0u);
  for (int i = 0; i < 100000 && sim.AnyActive(); ++i) sim.Step();
  ASSERT_TRUE(e.result().ok());
  ExpectExactInt32(b, 2, 256);
}

TEST(EngineTest, AbortFailsSliceAndEngineIsReusable) {
  Sim sim(2, 4, 64);
  auto b = MakeInt32(2, 1000);
  sim.engines_[0].Begin({1, DataType::kInt32, b.in[0].data(), b.out[0].data(), 1000}, sim.now_);
  sim.engines_[0].Abort(CancelledError("stop"));
  EXPECT_FALSE(sim.engines_[0].active());
  EXPECT_EQ(sim.engines_[0].result().code(), StatusCode::kCancelled);
  EXPECT_EQ(sim.engines_[0].pending_sends(), 0u);
}

}  // namespace
}  // namespace switchml::client

namespace switchml::client {
namespace {

TEST(EngineTest, InputBeyondItsExponentFailsTheSliceInsteadOfBeingClamped) {
  // The exponents claim |x| < 2^0 but the data holds 1.5 (as when the caller wrote the buffer
  // after the exponents were taken): every worker fails, nobody gets a clamped sum.
  const uint32_t n = 2, count = 300;
  Sim sim(n, 4, 64);
  std::vector<std::vector<float>> in(n, std::vector<float>(count, 0.5f)), out(n, std::vector<float>(count));
  in[1][200] = 1.5f;  // block 3
  const std::vector<int8_t> exps(5, 0);
  std::vector<SliceSpec> specs;
  for (uint32_t r = 0; r < n; ++r) {
    SliceSpec s{5, DataType::kFloat32, in[r].data(), out[r].data(), count, exps.data()};
    s.send_descriptor = true;
    s.call_elements = count;
    specs.push_back(s);
  }
  auto st = sim.Run(specs, 200000);
  EXPECT_EQ(st[1].code(), StatusCode::kFailedPrecondition) << st[1];
  EXPECT_NE(st[1].message().find("element 200 of this slice of all-reduce #5 changed while the all-reduce ran"),
            std::string::npos) << st[1];
  // Rank 0 never gets block 3's result: it times out rather than returning OK.
  EXPECT_FALSE(st[0].ok()) << st[0];
  // With honest exponents the same data is fine, and nothing is clamped.
  Sim ok(n, 4, 64);
  std::vector<int8_t> e2(5, 1);
  for (auto& s : specs) s.exponents = e2.data();
  for (auto& s : ok.Run(specs)) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ok.engines_[0].stats().clamped + ok.engines_[1].stats().clamped, 0u);
  EXPECT_EQ(out[0][200], 2.0f);
}

TEST(EngineTest, DescriptorMismatchFailsEveryWorkerInTheFirstRoundTrip) {
  // Counts 100 and 1000 (2 and 16 packets of 64): both workers fail with the two counts named,
  // long before the 2 s job timeout, for int32 and float32, and for 0 against 100.
  for (DataType type : {DataType::kInt32, DataType::kFloat32}) {
    for (auto [a, b] : {std::pair<size_t, size_t>{100, 1000}, {0, 100}, {64, 63}}) {
      Sim sim(2, 4, 64);
      std::vector<std::vector<float>> in{std::vector<float>(a + 1, 1.0f), std::vector<float>(b + 1, 1.0f)};
      auto out = in;
      std::vector<SliceSpec> specs;
      size_t counts[2] = {a, b};
      for (uint32_t r = 0; r < 2; ++r) {
        SliceSpec s{9, type, in[r].data(), out[r].data(), counts[r]};
        s.send_descriptor = true;
        s.call_elements = counts[r];
        specs.push_back(s);
      }
      const TimePoint start = sim.now_;
      auto st = sim.Run(specs);
      for (uint32_t r = 0; r < 2; ++r) {
        EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r];
        EXPECT_NE(st[r].message().find("the element count differs (this worker: " + std::to_string(counts[r]) +
                                       "; the other worker: " + std::to_string(counts[1 - r]) + ")"),
                  std::string::npos) << st[r];
      }
      EXPECT_LT(sim.now_ - start, std::chrono::milliseconds(50));
    }
  }
}

// A call some worker rejects (SliceSpec::rejected) fails on every worker in step, writes
// nothing, and the slices after it are exact: over many slices with loss both ways, random
// rejecting workers, int32 and float32, windows larger and smaller than the slice, and the
// slot sets of all workers still agreeing after each slice.
TEST(EngineTest, RejectedSlicesFailInStepAndTheNextSlicesAreExact) {
  constexpr uint32_t kN = 3, kWindow = 6, kElements = 64;
  Sim sim(kN, kWindow, kElements, /*loss_up=*/0.03, /*loss_down=*/0.03, /*seed=*/17);
  std::mt19937_64 rng(99);
  uint32_t rejected_slices = 0;
  for (uint64_t job = 1; job <= 60; ++job) {
    const DataType type = job % 2 ? DataType::kInt32 : DataType::kFloat32;
    const size_t count = 1 + rng() % (kElements * 10);
    const int rejecter = rng() % 3 == 0 ? int(rng() % kN) : -1;
    std::vector<std::vector<int32_t>> in(kN, std::vector<int32_t>(count)), out(kN, std::vector<int32_t>(count, -7));
    std::vector<std::vector<float>> fin(kN, std::vector<float>(count)), fout(kN, std::vector<float>(count, -7.0f));
    std::vector<SliceSpec> specs;
    for (uint32_t r = 0; r < kN; ++r) {
      testing::FillInt32(r, job * 1000, in[r].data(), count);
      for (size_t i = 0; i < count; ++i) fin[r][i] = float(int(r + 1) * int(i % 100));
      SliceSpec s{job, type, type == DataType::kInt32 ? static_cast<const void*>(in[r].data()) : fin[r].data(),
                  type == DataType::kInt32 ? static_cast<void*>(out[r].data()) : fout[r].data(), count};
      s.send_descriptor = true;
      s.call_elements = count;
      if (int(r) == rejecter) {
        s.rejected = true;
        s.rejection = InvalidArgumentError("rank " + std::to_string(r) + " rejects job " + std::to_string(job));
      }
      specs.push_back(s);
    }
    const std::vector<Status> st = sim.Run(specs);
    for (uint32_t r = 0; r < kN; ++r) {
      SCOPED_TRACE("job " + std::to_string(job) + " rank " + std::to_string(r));
      ASSERT_FALSE(sim.engines_[r].active());
      EXPECT_TRUE(sim.engines_[r].ended_in_step()) << st[r];
      if (rejecter < 0) {
        ASSERT_TRUE(st[r].ok()) << st[r];
        for (size_t i = 0; i < count; ++i) {
          if (type == DataType::kInt32) {
            uint32_t want = 0;
            for (uint32_t k = 0; k < kN; ++k) want += uint32_t(in[k][i]);
            ASSERT_EQ(uint32_t(out[r][i]), want) << i;
          } else {
            ASSERT_EQ(fout[r][i], float(6 * int(i % 100))) << i;
          }
        }
      } else {
        EXPECT_EQ(st[r].code(), int(r) == rejecter ? StatusCode::kInvalidArgument : StatusCode::kAborted) << st[r];
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[r][i], -7) << "a rejected call wrote element " << i;
          ASSERT_EQ(fout[r][i], -7.0f) << "a rejected call wrote element " << i;
        }
      }
    }
    if (rejecter >= 0) ++rejected_slices;
    for (uint32_t slot = 0; slot < kWindow; ++slot)
      for (uint32_t r = 1; r < kN; ++r) ASSERT_EQ(sim.engines_[r].next_set(slot), sim.engines_[0].next_set(slot));
  }
  EXPECT_GT(rejected_slices, 10u);
  uint64_t retx = 0;
  for (auto& e : sim.engines_) retx += e.stats().retransmissions;
  EXPECT_GT(retx, 0u);  // the losses hit first rounds too
}

// A first-round result that overtakes packet 0's is held, then written when the verdict comes:
// drop packet 0's result on its way to worker 0 once, so every other first-round result of
// worker 0 arrives before it.
TEST(EngineTest, FirstRoundResultsThatOvertakePacketZeroAreHeldAndThenWritten) {
  Sim sim(2, 4, 64);
  std::vector<std::vector<int32_t>> in(2, std::vector<int32_t>(64 * 8)), out(2, std::vector<int32_t>(64 * 8));
  for (uint32_t r = 0; r < 2; ++r) testing::FillInt32(r, 5, in[r].data(), in[r].size());
  std::vector<SliceSpec> specs;
  for (uint32_t r = 0; r < 2; ++r) {
    SliceSpec s{3, DataType::kInt32, in[r].data(), out[r].data(), in[r].size()};
    s.send_descriptor = true;
    s.call_elements = in[r].size();
    specs.push_back(s);
  }
  sim.drop_first_result_of_slot0_to_rank0_ = true;
  const auto st = sim.Run(specs);
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(st[r].ok()) << st[r];
  EXPECT_TRUE(sim.dropped_slot0_result_);
  for (size_t i = 0; i < in[0].size(); ++i) ASSERT_EQ(out[0][i], int32_t(uint32_t(in[0][i]) + uint32_t(in[1][i]))) << i;
  EXPECT_EQ(out[0], out[1]);
  EXPECT_GE(sim.engines_[0].stats().retransmissions, 1u);
}

// Float32 tensors whose blocks range from ordinary magnitudes down to subnormals, through the
// engine and the switch: each slot keeps the quant::Scale of the block it carries next (tiny
// blocks get a shifted one), so tiny blocks come back with an ordinary block's precision
// (docs/protocol.md#d12-tiny-blocks-and-non-finite-input) instead of (nearly) 0.
TEST(EngineTest, Float32TinyBlocksKeepTheirPrecision) {
  constexpr uint32_t N = 64;
  const float magnitudes[] = {1.0f, 1.5e-38f, 1e-40f, 0x1p-149f, 1e-30f, 0x1p-126f, 3e-39f, 1e-35f};
  constexpr size_t kBlocks = std::size(magnitudes);
  const size_t count = N * kBlocks;
  for (uint32_t n : {1u, 2u, 3u, 4u, 7u}) {
    std::mt19937 rng(n);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    std::vector<std::vector<float>> in(n, std::vector<float>(count));
    std::vector<std::vector<float>> out(n, std::vector<float>(count, -1.0f));
    for (uint32_t r = 0; r < n; ++r) {
      for (size_t b = 0; b < kBlocks; ++b) {
        for (size_t i = 0; i < N; ++i) {
          in[r][b * N + i] = static_cast<float>(unit(rng) * magnitudes[b]);
        }
        in[r][b * N] = magnitudes[b];
      }
    }
    Sim sim(n, 4, N);
    std::vector<const void*> ins;
    std::vector<void*> outs;
    for (uint32_t r = 0; r < n; ++r) {
      ins.push_back(in[r].data());
      outs.push_back(out[r].data());
    }
    for (auto& st : sim.Run(DataType::kFloat32, ins, outs, count, 3)) ASSERT_TRUE(st.ok()) << st;
    for (size_t b = 0; b < kBlocks; ++b) {
      SCOPED_TRACE("n " + std::to_string(n) + " block " + std::to_string(b));
      int8_t e = -128;
      for (uint32_t r = 0; r < n; ++r) {
        int8_t er = 0;
        ASSERT_TRUE(quant::BlockExponent(&in[r][b * N], N, &er));
        e = std::max(e, er);
      }
      std::vector<long double> sum(N, 0.0L);
      long double sum_abs_max = 0;
      for (size_t i = 0; i < N; ++i) {
        for (uint32_t r = 0; r < n; ++r) sum[i] += in[r][b * N + i];
        sum_abs_max = std::max(sum_abs_max, std::fabs(sum[i]));
      }
      const double bound = quant::QuantizationErrorBound(e, n, static_cast<double>(sum_abs_max));
      // An ordinary block's precision: within 2^-20 of the largest sum the exponent allows.
      EXPECT_LE(bound, std::ldexp(n * 0x1p-20, e));
      for (uint32_t r = 0; r < n; ++r) {
        EXPECT_NE(out[r][b * N], 0.0f) << "rank " << r << ": flushed to zero";
        for (size_t i = 0; i < N; ++i) {
          ASSERT_LE(std::fabs(out[r][b * N + i] - sum[i]), bound)
              << "rank " << r << " element " << i;
          ASSERT_EQ(out[r][b * N + i], out[0][b * N + i]) << "ranks disagree";
        }
      }
    }
  }
}

// Shadow copies (docs/reliability.md, "Surviving a failing switch"): after every slice, each
// slot the slice used holds its last packet's result as received (int32: the payload is the
// output block in wire order; float32: the payload dequantizes, with the scale of the switch-wide
// max exponent of its block, to the output block), and the slots it did not use keep what an
// earlier slice left; under loss, on every worker.
TEST(EngineTest, ShadowHoldsTheLastCompletedRoundOfEverySlot) {
  const uint32_t n = 3, W = 8, N = 64;
  Sim sim(n, W, N, 0.05, 0.05, 4);
  struct Expected { bool valid = false; uint64_t call = 0; uint32_t packet = 0; };
  std::vector<Expected> expected(W);
  uint64_t call = 100;
  for (size_t blocks : {size_t{13}, size_t{3}, size_t{8}, size_t{1}, size_t{20}, size_t{5}}) {
    for (DataType type : {DataType::kInt32, DataType::kFloat32}) {
      SCOPED_TRACE("call " + std::to_string(call) + " blocks " + std::to_string(blocks));
      const size_t count = blocks * N - (blocks % 2 ? 7 : 0);
      std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count)), out(n, std::vector<int32_t>(count));
      std::vector<SliceSpec> specs;
      for (uint32_t r = 0; r < n; ++r) {
        if (type == DataType::kInt32) {
          testing::FillInt32(r, call, in[r].data(), count);
        } else {
          testing::FillFloat32(r, call, reinterpret_cast<float*>(in[r].data()), count);
        }
        SliceSpec s{call, type, in[r].data(), out[r].data(), count};
        s.send_descriptor = true;
        s.call_elements = count;
        specs.push_back(s);
      }
      const auto st = sim.Run(specs);
      for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
      const SliceLayout l = SliceLayout::Of(count, type, true, W, N);
      for (uint32_t i = 0; i < l.batch; ++i) {
        const uint32_t last = uint32_t(i + l.batch * ((l.total - 1 - i) / l.batch));
        expected[i] = {true, call, last};
      }
      for (uint32_t r = 0; r < n; ++r) {
        for (uint32_t i = 0; i < W; ++i) {
          const SlotShadow sh = sim.engines_[r].shadow(i);
          ASSERT_EQ(sh.valid, expected[i].valid) << "rank " << r << " slot " << i;
          if (!sh.valid) continue;
          ASSERT_EQ(sh.call_id, expected[i].call) << "rank " << r << " slot " << i;
          ASSERT_EQ(sh.packet, expected[i].packet) << "rank " << r << " slot " << i;
          if (sh.call_id != call) continue;  // an earlier slice's, checked then
          ASSERT_EQ(sh.payload.empty(), sh.packet < l.data_offset) << "rank " << r << " slot " << i;
          if (sh.payload.empty()) continue;
          ASSERT_EQ(sh.payload.size(), 4u * N);
          const uint64_t block = sh.packet - l.data_offset;
          const uint32_t len = uint32_t(std::min<uint64_t>(N, count - block * N));
          std::vector<int32_t> got(len);
          if (type == DataType::kInt32) {
            wire::BEToInt32(sh.payload.data(), len, got.data());
          } else {
            int8_t e = -128;
            for (uint32_t q = 0; q < n; ++q) {
              int8_t eq = 0;
              ASSERT_TRUE(quant::BlockExponent(reinterpret_cast<const float*>(&in[q][block * N]), len, &eq));
              e = std::max(e, eq);
            }
            quant::DequantizeFromBE(sh.payload.data(), len, quant::ScaleForExponent(e, n),
                                    reinterpret_cast<float*>(got.data()));
          }
          for (uint32_t k = 0; k < len; ++k)
            ASSERT_EQ(got[k], out[r][block * N + k]) << "rank " << r << " slot " << i << " element " << k;
        }
        EXPECT_TRUE(sim.engines_[r].begun());
        EXPECT_EQ(sim.engines_[r].last_call_id(), call);
      }
      ++call;
    }
  }
  EXPECT_GT(sim.lost_up + sim.lost_down, 0u);
}

// A result that never arrives is not recorded, and the output (here in place: the input) of a
// packet that did not complete is untouched: the other worker completes the first round and
// is one round ahead on every slot.
TEST(EngineTest, ShadowDoesNotRecordAResultThatNeverArrived) {
  const uint32_t W = 4, N = 64;
  Sim sim(2, W, N);
  const size_t count = 10 * N;
  std::vector<std::vector<int32_t>> in(2, std::vector<int32_t>(count)), out(2, std::vector<int32_t>(count));
  auto specs_for = [&](uint64_t call, bool in_place) {
    std::vector<SliceSpec> specs;
    for (uint32_t r = 0; r < 2; ++r) {
      testing::FillInt32(r, call, in[r].data(), count);
      SliceSpec s{call, DataType::kInt32, in[r].data(), in_place ? in[r].data() : out[r].data(), count};
      s.send_descriptor = true;
      s.call_elements = count;
      specs.push_back(s);
    }
    return specs;
  };
  for (auto& s : sim.Run(specs_for(1, false))) ASSERT_TRUE(s.ok()) << s;
  std::vector<SlotShadow> before;
  std::vector<std::vector<uint8_t>> before_payload;
  for (uint32_t i = 0; i < W; ++i) {
    before.push_back(sim.engines_[0].shadow(i));
    before_payload.emplace_back(before.back().payload.begin(), before.back().payload.end());
    ASSERT_TRUE(before.back().valid);
    ASSERT_EQ(before.back().call_id, 1u);
  }
  const auto specs = specs_for(2, true);
  const std::vector<int32_t> input0 = in[0];
  sim.drop_all_to_rank0_ = true;
  for (uint32_t r = 0; r < 2; ++r) sim.engines_[r].Begin(specs[r], sim.now_);
  for (int k = 0; k < 400; ++k) sim.Step();  // 40 ms: many retransmissions of rank 0
  ASSERT_TRUE(sim.engines_[0].active());
  ASSERT_TRUE(sim.engines_[1].active());
  EXPECT_GT(sim.engines_[0].stats().retransmissions, 0u);
  for (uint32_t r = 0; r < 2; ++r) sim.engines_[r].Abort(CancelledError("test"));
  EXPECT_FALSE(sim.engines_[0].ended_in_step());
  for (uint32_t i = 0; i < W; ++i) {
    const SlotShadow s0 = sim.engines_[0].shadow(i), s1 = sim.engines_[1].shadow(i);
    EXPECT_EQ(s0.call_id, 1u) << "slot " << i;
    EXPECT_EQ(s0.packet, before[i].packet) << "slot " << i;
    EXPECT_TRUE(std::equal(s0.payload.begin(), s0.payload.end(), before_payload[i].begin(), before_payload[i].end()));
    // Rank 1 completed packet i (the first round: the descriptor and blocks 0..2), nothing more.
    ASSERT_TRUE(s1.valid);
    EXPECT_EQ(s1.call_id, 2u) << "slot " << i;
    EXPECT_EQ(s1.packet, i) << "slot " << i;
  }
  EXPECT_EQ(in[0], input0) << "rank 0's in-place buffer was written without a result";
  for (size_t k = 0; k < count; ++k) {
    const int32_t want = k < 3 * N ? int32_t(uint32_t(testing::Int32Input(0, 2 + k)) + uint32_t(testing::Int32Input(1, 2 + k)))
                                   : testing::Int32Input(1, 2 + k);
    ASSERT_EQ(in[1][k], want) << "rank 1, element " << k;
  }
}

}  // namespace
}  // namespace switchml::client
