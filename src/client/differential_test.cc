// Randomized differential test of the client library: random programs of all-reduces run on a
// whole in-process job (testing/loopback_cluster.h: a real SwitchServer and one Context per
// rank over the loopback fabric) and are checked, element by element, against a sequential
// model of the API's contract: the jobs submitted to one Context behave as if they ran one
// after another in submission order, whatever the mix of sync and async calls, shared
// buffers, in-place and out-of-place calls, and wait points.
//
// A program is: cluster parameters (workers 1..6, worker threads 1..4, window, elements per
// packet, fabric or switch faults, sometimes a small max_calls_in_flight), buffers (int32 or float32, sizes 0, 1, odd, around a packet, multi-packet,
// multi-slice) and ops (sync or async all-reduce of a range of one buffer into a range of the
// same or another buffer, often reading what an earlier, possibly still pending, op writes;
// random points where the program waits on some handles). Every rank runs the same program on
// its own thread with its own rank-specific inputs.
//
// The model (ApplyOp) is exact for int32 (wrap-around sums) and carries, for float32, an
// interval per element (centre in double, radius) that provably contains what the library
// must produce; see FloatBlock for the derivation. Every handle must be OK, every
// element inside its interval, every element written by an all-reduce bit-identical on all
// ranks, and the Stats counters must agree.
//
// Default run: a fixed seed and 700 programs, about 20 s on 2 cores (120 in sanitizer builds);
// then 40 programs against a switch with 2 I/O threads, 40 against a job on 2 or 3 switches
// (shards) and 40 through two levels (racks of leaf switches under a parent;
// SWITCHML_DIFF_IO_PROGRAMS, SWITCHML_DIFF_SHARD_PROGRAMS, SWITCHML_DIFF_RACK_PROGRAMS).
// Longer runs:
//   SWITCHML_DIFF_SEED=S SWITCHML_DIFF_PROGRAMS=N build/src/client/differential_test
// (the soak configuration runs one: tests/soak/CMakeLists.txt). A failure prints the seed, the
// program index and the program; SWITCHML_DIFF_FIRST=I SWITCHML_DIFF_PROGRAMS=1 with the same
// seed runs that one program again (the same program and inputs; thread timing, and so which
// datagrams the faults hit, may differ); SWITCHML_DIFF_VERBOSE=1 prints every program first.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "quant/quantizer.h"
#include "switchml/context.h"
#include "testing/loopback_cluster.h"

namespace switchml {
namespace {

using testing::LoopbackCluster;

// ---------------------------------------------------------------------------------------------
// Randomness: splitmix64, identical on every platform for a given seed.

uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t Hash(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b)); }
uint64_t Hash(uint64_t a, uint64_t b, uint64_t c, uint64_t d) { return Hash(Hash(Hash(a, b), c), d); }

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_++ * 0xD1B54A32D192ED03ull); }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }  // [lo, hi]
  bool Chance(double p) { return double(Next() >> 11) * 0x1p-53 < p; }
  template <typename T>
  const T& Pick(const std::vector<T>& v) { return v[Below(v.size())]; }

 private:
  uint64_t state_;
};

// ---------------------------------------------------------------------------------------------
// Programs.

enum class Faults { kNone, kFabricLossAndDuplication, kSwitchDropSimulator, kFabricReorderWithGuard };

const char* FaultsName(Faults f) {
  switch (f) {
    case Faults::kNone: return "none";
    case Faults::kFabricLossAndDuplication: return "fabric loss 1% + duplication 1%";
    case Faults::kSwitchDropSimulator: return "switch drop simulator ingress 1% + egress 1%";
    case Faults::kFabricReorderWithGuard: return "fabric loss 1% + reorder 3%, late-duplicate guard";
  }
  return "?";
}

struct ClusterParams {
  uint32_t workers = 2;
  uint32_t threads = 1;              // Options::num_worker_threads
  uint32_t window = 256;             // Options::window_packets (a multiple of threads)
  uint32_t elements_per_packet = 256;
  Faults faults = Faults::kNone;
  uint64_t fault_seed = 1;
  uint32_t max_calls_in_flight = 0;   // Options::max_calls_in_flight; 0 = the library's default
  uint32_t io_threads = 1;           // the switch's SwitchConfig::io_threads
  uint32_t shards = 1;               // switches serving the job (LoopbackCluster shards)
  uint32_t racks = 0;                // > 0: two levels, racks leaves of workers / racks each
                                     // (LoopbackCluster::CreateTwoLevel); racks divides workers
};

struct BufferSpec {
  DataType type = DataType::kFloat32;
  size_t size = 0;
};

// How a rank spoils its call so that it rejects it locally (the others' calls are fine): a
// NaN, an infinity or 2^127 in a float32 input (a scratch copy carries it), overlapping in and
// out (out one element behind in), or a null input.
enum class Reject { kNone, kNaN, kInf, kTooLarge, kOverlap, kNull };

const char* RejectName(Reject r) {
  switch (r) {
    case Reject::kNone: return "none";
    case Reject::kNaN: return "NaN input";
    case Reject::kInf: return "infinite input";
    case Reject::kTooLarge: return "2^127 in the input";
    case Reject::kOverlap: return "overlapping in and out";
    case Reject::kNull: return "null input";
  }
  return "?";
}

struct Op {
  bool async = true;
  uint32_t in_buf = 0;
  size_t in_off = 0;
  uint32_t out_buf = 0;
  size_t out_off = 0;
  size_t count = 0;
  std::vector<uint32_t> wait_after;  // earlier async ops whose handles are waited on after this op
  int32_t reject_rank = -1;          // this rank rejects the call locally (count > 0), or -1
  Reject reject = Reject::kNone;
  size_t reject_index = 0;           // the bad element of a NaN/Inf/2^127 scratch input
  bool in_place() const { return in_buf == out_buf && in_off == out_off; }
};

struct Program {
  uint64_t seed = 0;  // of the inputs (and of the generator, for generated programs)
  ClusterParams cluster;
  std::vector<BufferSpec> buffers;
  std::vector<Op> ops;
  // Inputs include chunks at the extremes of float32: [2^121, 2^127) (whose sums may reach 2^127
  // and be rejected when read again) and multiples of 2^-149 (the smallest subnormal).
  bool extremes = false;
  // Rank abandon_rank destroys its context right after submitting op abandon_after, with its
  // calls still running (a worker that dies), or -1.
  int32_t abandon_rank = -1;
  uint32_t abandon_after = 0;
};

std::string Describe(const Program& p) {
  std::ostringstream o;
  const ClusterParams& c = p.cluster;
  o << "program (input seed " << p.seed << "): workers=" << c.workers << " threads=" << c.threads
    << " window=" << c.window << " elements_per_packet=" << c.elements_per_packet << " faults=" << FaultsName(c.faults);
  if (c.faults != Faults::kNone) o << " (seed " << c.fault_seed << ")";
  if (c.max_calls_in_flight != 0) o << " max_calls_in_flight=" << c.max_calls_in_flight;
  if (c.io_threads != 1) o << " switch_io_threads=" << c.io_threads;
  if (c.shards != 1) o << " shards=" << c.shards;
  if (c.racks != 0) o << " racks=" << c.racks;
  if (p.extremes) o << " inputs=extreme";
  o << "\n  buffers:";
  for (size_t b = 0; b < p.buffers.size(); ++b)
    o << " b" << b << "=" << DataTypeName(p.buffers[b].type) << "[" << p.buffers[b].size << "]";
  o << "\n";
  for (size_t j = 0; j < p.ops.size(); ++j) {
    const Op& op = p.ops[j];
    o << "  #" << j << (op.async ? " async " : " sync  ") << "b" << op.in_buf << "[" << op.in_off << ", "
      << op.in_off + op.count << ") -> b" << op.out_buf << "[" << op.out_off << ", " << op.out_off + op.count << ")"
      << (op.in_place() ? " in place" : "");
    if (op.reject_rank >= 0)
      o << "; rank " << op.reject_rank << " rejects it (" << RejectName(op.reject) << ", element " << op.reject_index
        << ")";
    if (!op.wait_after.empty()) {
      o << "; then wait";
      for (uint32_t w : op.wait_after) o << " #" << w;
    }
    o << "\n";
    if (int32_t(j) == int32_t(p.abandon_after) && p.abandon_rank >= 0)
      o << "  rank " << p.abandon_rank << " destroys its context here\n";
  }
  o << "  then wait all\n";
  return o.str();
}

// Sizes that exercise the slicing (one slice per worker thread, docs/protocol.md#slicing) and
// the packet boundaries inside each slice.
size_t RandomSize(Rng& rng, const ClusterParams& c, size_t cap) {
  const size_t e = c.elements_per_packet, t = c.threads;
  const std::vector<size_t> interesting = {
      0, 1, 2, 3, e - 1, e, e + 1, 2 * e + 1, t * e - 1, t * e, t * e + 1, t * (e + 1) + 1, 3 * t * e + 7,
      size_t(c.window / t) * e * t + 1};  // one more than a full window of every thread
  size_t s;
  switch (rng.Below(4)) {
    case 0: s = rng.Pick(interesting); break;
    case 1: s = 2 * rng.Range(0, 40) + 1; break;  // small odd
    case 2: s = rng.Range(1, 4 * e * t); break;
    default: s = rng.Range(1, cap); break;
  }
  return std::min(s, cap);
}

Program Generate(uint64_t seed) {
  Rng rng(seed);
  Program p;
  p.seed = seed;
  ClusterParams& c = p.cluster;
  c.workers = uint32_t(rng.Pick(std::vector<uint64_t>{1, 2, 2, 3, 3, 4, 5, 6}));
  c.threads = uint32_t(rng.Range(1, 4));
  c.elements_per_packet = uint32_t(rng.Pick(std::vector<uint64_t>{64, 256, 512, 1024}));
  // Per-thread window 1 (every packet on one slot), small, or larger; at most the switch's 512.
  c.window = c.threads * uint32_t(rng.Pick(std::vector<uint64_t>{1, 2, 3, 8, 16, 64}));
  switch (rng.Below(6)) {
    case 0: c.faults = Faults::kFabricLossAndDuplication; break;
    case 1: c.faults = Faults::kSwitchDropSimulator; break;
    case 2: c.faults = Faults::kFabricReorderWithGuard; break;
    default: c.faults = Faults::kNone; break;
  }
  c.fault_seed = rng.Range(1, 1000);
  // Sometimes a bound on pending calls that the programs' async runs exceed.
  if (rng.Chance(0.25)) c.max_calls_in_flight = uint32_t(rng.Range(1, 3));
  // Element budget: a few tens of milliseconds per program on 2 cores, with up to 6 workers x 4
  // threads and the switch sharing them.
  const size_t cap = c.workers <= 3 ? 20000 : 9000;
  const size_t num_buffers = rng.Range(1, 5);
  for (size_t b = 0; b < num_buffers; ++b) {
    BufferSpec s;
    s.type = rng.Chance(0.5) ? DataType::kFloat32 : DataType::kInt32;
    s.size = RandomSize(rng, c, cap);
    p.buffers.push_back(s);
  }
  const size_t num_ops = rng.Range(1, 12);
  std::vector<uint32_t> pending;  // async ops not yet waited on explicitly
  for (size_t j = 0; j < num_ops; ++j) {
    Op op;
    op.async = rng.Chance(0.7);
    // Often chain: read what the previous op wrote (maybe still pending).
    if (j > 0 && rng.Chance(0.45)) {
      op.in_buf = p.ops[j - 1].out_buf;
    } else {
      op.in_buf = uint32_t(rng.Below(p.buffers.size()));
    }
    const BufferSpec& in = p.buffers[op.in_buf];
    // Same-type buffers the output may go to.
    std::vector<uint32_t> same_type;
    for (uint32_t b = 0; b < p.buffers.size(); ++b)
      if (p.buffers[b].type == in.type) same_type.push_back(b);
    const bool in_place = rng.Chance(0.5);
    if (in_place) {
      op.out_buf = op.in_buf;
      op.count = rng.Chance(0.6) ? in.size : RandomSize(rng, c, in.size);
      op.in_off = op.out_off = rng.Range(0, in.size - op.count);
    } else {
      op.out_buf = rng.Pick(same_type);
      const BufferSpec& out = p.buffers[op.out_buf];
      if (op.out_buf == op.in_buf) {
        // Two disjoint ranges of one buffer: [0, count) and [count + gap, 2 count + gap), either way.
        const size_t half = in.size / 2;
        op.count = rng.Chance(0.5) ? half : RandomSize(rng, c, half);
        const size_t second = op.count + rng.Range(0, in.size - 2 * op.count);
        const bool forward = rng.Chance(0.5);
        op.in_off = forward ? 0 : second;
        op.out_off = forward ? second : 0;
        if (op.count == 0) op.in_off = op.out_off = 0;  // then it is in place; fine
      } else {
        const size_t limit = std::min(in.size, out.size);
        op.count = rng.Chance(0.6) ? limit : RandomSize(rng, c, limit);
        op.in_off = rng.Range(0, in.size - op.count);
        op.out_off = rng.Range(0, out.size - op.count);
      }
    }
    // Sometimes one rank rejects the call locally: it must fail on every rank and the calls
    // after it must still pair up.
    if (op.count > 0 && rng.Chance(0.12)) {
      op.reject_rank = int32_t(rng.Below(c.workers));
      std::vector<Reject> kinds = {Reject::kNull};
      if (op.count >= 2) kinds.push_back(Reject::kOverlap);
      if (in.type == DataType::kFloat32) {
        kinds.push_back(Reject::kNaN);
        kinds.push_back(Reject::kInf);
        kinds.push_back(Reject::kTooLarge);
      }
      op.reject = rng.Pick(kinds);
      op.reject_index = rng.Below(op.count);
    }
    if (op.async) pending.push_back(uint32_t(j));
    if (!pending.empty() && rng.Chance(0.25)) {
      // Wait on some pending handles (all of them, or a random subset).
      const bool all = rng.Chance(0.5);
      std::vector<uint32_t> keep;
      for (uint32_t h : pending) (all || rng.Chance(0.5) ? op.wait_after : keep).push_back(h);
      pending.swap(keep);
    }
    p.ops.push_back(std::move(op));
  }
  p.extremes = rng.Chance(0.35);
  if (c.workers >= 2 && rng.Chance(0.02)) {
    p.abandon_rank = int32_t(rng.Below(c.workers));
    p.abandon_after = uint32_t(rng.Below(p.ops.size()));
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Inputs: rank-specific, deterministic in (seed, rank, buffer, index). float32 values come in
// chunks of 64 elements with their own magnitude (zero, subnormal, tiny, ordinary at a random
// exponent, large), different per rank, so the block exponents differ from block to block and
// across ranks, and a packet may mix chunks of very different magnitude.

uint32_t InputBits(uint64_t seed, DataType type, uint32_t rank, uint32_t buf, size_t i, bool extremes = false) {
  const uint64_t chunk = Hash(seed, rank, buf, i / 64);
  const uint64_t h = Hash(chunk, i);
  if (type == DataType::kInt32) {
    switch (chunk % 4) {
      case 0: return uint32_t(int32_t(h % 2001) - 1000);                                    // small
      case 1: return uint32_t(h % 2 ? INT32_MAX - int32_t(h % 1000) : INT32_MIN + int32_t(h % 1000));  // wraps
      default: return uint32_t(h >> 32);                                                    // any
    }
  }
  float v;
  const int kind = int(chunk % 16);
  const double frac = 1.0 + double((h >> 20) & 0xFFFFFF) * 0x1p-24;  // [1, 2), 24 significant bits
  const double sign = (h & 1) ? -1.0 : 1.0;
  const int spread = int((h >> 8) % 4);  // elements of one chunk within a factor 16
  if (kind == 0 || h % 32 == 0) {
    v = 0.0f;
  } else if (extremes && kind == 4) {
    v = float(sign * std::ldexp(frac, 126 - int((chunk >> 8) % 3) - spread));  // [2^121, 2^127)
  } else if (extremes && kind == 5) {
    v = float(sign * std::ldexp(double(h % 8), -149));  // 0 .. 7 times the smallest subnormal
  } else if (kind == 1) {
    v = float(sign * std::ldexp(frac, -140 - spread));  // subnormal
  } else if (kind == 2) {
    v = float(sign * std::ldexp(frac, -100 - int((chunk >> 8) % 20) - spread));  // tiny
  } else if (kind == 3) {
    v = float(sign * std::ldexp(frac, 30 + int((chunk >> 8) % 30) - spread));  // large
  } else {
    v = float(sign * std::ldexp(frac, int((chunk >> 8) % 41) - 20 - spread));  // 2^-23 .. 2^20
  }
  return std::bit_cast<uint32_t>(v);
}

// ---------------------------------------------------------------------------------------------
// The model.

struct ModelBuffer {
  DataType type;
  std::vector<uint32_t> exact;  // int32: the value's bits
  std::vector<double> centre;   // float32: the value lies in [centre - radius, centre + radius]
  std::vector<double> radius;
  std::vector<int32_t> writer;  // the op that last wrote the element, -1 = input
};
using ModelRank = std::vector<ModelBuffer>;

// Exponent of a block whose largest magnitude is v, as quant::BlockExponent defines it for a
// float of that magnitude: |x| < 2^e with e = biased exponent - 126, at least -126. Monotone
// in v, so it may be applied to bounds on the magnitude.
int BlockExponentOf(double v) {
  if (!(v > 0)) return -126;
  return std::max(-126, std::ilogb(v) + 1);
}

// Float32 model of one block (one packet's elements of one slice). Derivation:
// Rank k's actual input element x_k lies in [c_k - r_k, c_k + r_k] (r_k = 0 for an input
// nobody wrote: c_k is then the float itself). The library's output y satisfies, per element,
//   |y - X| <= QuantizationErrorBound(E*, n, |X|)        with X = sum_k x_k (exact),
// where E* is the switch-wide block exponent: the max over ranks of each rank's BlockExponent
// of its *actual* input block (every |x_k| < 2^E*, which that bound requires). The actual
// inputs of a chained op are earlier outputs, known only within their radius, so E* is known
// only within [E_lo, E_hi]: E_lo from the smallest possible block maximum of each rank
// (max_i max(0, |c_ki| - r_ki)), E_hi from the largest (max_i |c_ki| + r_ki); BlockExponentOf is
// monotone. We take the largest bound over that range (QuantizationErrorBound is not assumed
// monotone in E), with |X| <= A = |sum_k c_k| + sum_k r_k. Then
//   |y - sum_k c_k| <= |y - X| + |X - sum_k c_k| <= bound + sum_k r_k,
// which is the new centre and radius. sum_k c_k is computed in double (n <= 6 terms): its own
// rounding error, at most n 2^-53 sum_k |c_k|, is added to the radius (and to A).
// This stays sound through any chain and still catches a real mix-up: a stale input, a wrong
// exponent (values clamped at 2^E) or a lost or doubled contribution moves an element by about
// its own magnitude, while the radius stays within n^2 2^-31 of the magnitudes involved.
void FloatBlock(const std::vector<const ModelBuffer*>& in, size_t in_off, size_t first, size_t len,
                uint32_t n, std::vector<double>& out_c, std::vector<double>& out_r) {
  int e_lo = -126, e_hi = -126;
  for (const ModelBuffer* b : in) {
    double lo = 0, hi = 0;
    for (size_t i = first; i < first + len; ++i) {
      const double c = std::fabs(b->centre[in_off + i]), r = b->radius[in_off + i];
      lo = std::max(lo, c - r);
      hi = std::max(hi, c + r);
    }
    e_lo = std::max(e_lo, BlockExponentOf(lo));
    e_hi = std::max(e_hi, BlockExponentOf(hi));
  }
  e_hi = std::min(e_hi, 127);
  for (size_t i = first; i < first + len; ++i) {
    double sum = 0, sum_abs = 0, sum_r = 0;
    for (const ModelBuffer* b : in) {
      sum += b->centre[in_off + i];
      sum_abs += std::fabs(b->centre[in_off + i]);
      sum_r += b->radius[in_off + i];
    }
    const double rounding = sum_abs * double(n) * 0x1p-52;
    const double a = (std::fabs(sum) + sum_r + rounding) * (1 + 0x1p-50);
    double bound = 0;
    for (int e = e_lo; e <= e_hi; ++e) bound = std::max(bound, quant::QuantizationErrorBound(int8_t(e), n, a));
    out_c[i] = sum;
    out_r[i] = (sum_r + bound + rounding) * (1 + 0x1p-50);
  }
}

// What a call does in the model.
enum class Outcome {
  kDone,       // every rank gets OK and the sum
  kRejected,   // some rank rejects it: it fails on every rank and writes nothing
  kAmbiguous,  // the model cannot tell whether it is rejected (an input near 2^127)
};

struct Model {
  std::vector<ModelRank> ranks;
  std::vector<Outcome> outcomes;               // per op
  std::vector<std::vector<char>> rejects;      // [op][rank]: that rank itself rejects the op
  bool ambiguous = false;                      // some op's outcome is kAmbiguous
};

// The largest float32 input SwitchML accepts is below 2^127 (its block exponent must fit int8).
constexpr double kTooLarge = 0x1p127;

// Which ranks reject op #j themselves: the op's reject_rank, and for float32 every rank whose
// input (possibly an earlier call's output, known within its radius) holds an element that is
// surely >= 2^127 or not finite. Returns false if that cannot be decided (an element that may or
// may not reach 2^127).
bool RejectingRanks(const Program& p, uint32_t j, const Model& m, std::vector<char>& rejects) {
  const Op& op = p.ops[j];
  const uint32_t n = p.cluster.workers;
  rejects.assign(n, 0);
  if (op.count == 0) return true;
  if (op.reject_rank >= 0) rejects[op.reject_rank] = 1;
  if (p.buffers[op.in_buf].type != DataType::kFloat32) return true;
  for (uint32_t k = 0; k < n; ++k) {
    const ModelBuffer& b = m.ranks[k][op.in_buf];
    bool must = false, may = false;
    for (size_t i = op.in_off; i < op.in_off + op.count; ++i) {
      const double c = std::fabs(b.centre[i]), r = b.radius[i];
      must |= !std::isfinite(c) || (std::isfinite(r) && c - r >= kTooLarge);
      may |= !std::isfinite(r) || c + r >= kTooLarge;
    }
    if (may && !must) return false;
    if (must) rejects[k] = 1;
  }
  return true;
}

// Applies op #j to the model of every rank: sequential semantics, and a rejected call writes
// nothing.
void ApplyOp(const Program& p, uint32_t j, Model& model) {
  const Op& op = p.ops[j];
  const uint32_t n = p.cluster.workers;
  const DataType type = p.buffers[op.in_buf].type;
  std::vector<char>& rejects = model.rejects[j];
  if (!RejectingRanks(p, j, model, rejects)) {
    model.outcomes[j] = Outcome::kAmbiguous;
    model.ambiguous = true;
    return;
  }
  if (std::find(rejects.begin(), rejects.end(), 1) != rejects.end()) {
    model.outcomes[j] = Outcome::kRejected;
    return;
  }
  model.outcomes[j] = Outcome::kDone;
  if (op.count == 0) return;
  if (type == DataType::kInt32) {
    std::vector<uint32_t> sum(op.count, 0);
    for (uint32_t k = 0; k < n; ++k)
      for (size_t i = 0; i < op.count; ++i) sum[i] += model.ranks[k][op.in_buf].exact[op.in_off + i];  // wraps
    for (uint32_t k = 0; k < n; ++k) {
      ModelBuffer& out = model.ranks[k][op.out_buf];
      std::copy(sum.begin(), sum.end(), out.exact.begin() + op.out_off);
      std::fill_n(out.writer.begin() + op.out_off, op.count, int32_t(j));
    }
    return;
  }
  std::vector<const ModelBuffer*> in;
  for (uint32_t k = 0; k < n; ++k) in.push_back(&model.ranks[k][op.in_buf]);
  std::vector<double> c(op.count), r(op.count);
  // Slices as in ContextImpl::Submit (one per worker thread), blocks of elements_per_packet
  // inside each slice.
  const size_t threads = p.cluster.threads, base = op.count / threads, rem = op.count % threads;
  const size_t e = p.cluster.elements_per_packet;
  for (size_t t = 0, offset = 0; t < threads; ++t) {
    const size_t length = t < rem ? base + 1 : base;
    for (size_t b = 0; b < length; b += e) FloatBlock(in, op.in_off, offset + b, std::min(e, length - b), n, c, r);
    offset += length;
  }
  for (uint32_t k = 0; k < n; ++k) {
    ModelBuffer& out = model.ranks[k][op.out_buf];
    std::copy(c.begin(), c.end(), out.centre.begin() + op.out_off);
    std::copy(r.begin(), r.end(), out.radius.begin() + op.out_off);
    std::fill_n(out.writer.begin() + op.out_off, op.count, int32_t(j));
  }
}

Model RunModel(const Program& p) {
  Model model;
  model.ranks.resize(p.cluster.workers);
  model.outcomes.assign(p.ops.size(), Outcome::kDone);
  model.rejects.resize(p.ops.size());
  for (uint32_t k = 0; k < p.cluster.workers; ++k) {
    for (uint32_t b = 0; b < p.buffers.size(); ++b) {
      const BufferSpec& s = p.buffers[b];
      ModelBuffer m;
      m.type = s.type;
      m.writer.assign(s.size, -1);
      if (s.type == DataType::kInt32) {
        m.exact.resize(s.size);
        for (size_t i = 0; i < s.size; ++i) m.exact[i] = InputBits(p.seed, s.type, k, b, i, p.extremes);
      } else {
        m.centre.resize(s.size);
        m.radius.assign(s.size, 0.0);
        for (size_t i = 0; i < s.size; ++i)
          m.centre[i] = std::bit_cast<float>(InputBits(p.seed, s.type, k, b, i, p.extremes));
      }
      model.ranks[k].push_back(std::move(m));
    }
  }
  for (uint32_t j = 0; j < p.ops.size() && !model.ambiguous; ++j) ApplyOp(p, j, model);
  return model;
}

// A generated program whose model is ambiguous (an element that may or may not reach 2^127)
// is run without the extreme inputs instead (its other inputs stay far below 2^127).
Program Decidable(Program p) {
  if (p.extremes && RunModel(p).ambiguous) p.extremes = false;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Running a program on a cluster.

Options ProgramOptions(const ClusterParams& c) {
  Options o;
  o.num_worker_threads = c.threads;
  o.window_packets = c.window;
  o.elements_per_packet = c.elements_per_packet;
  o.initial_rto = std::chrono::milliseconds(10);
  o.min_rto = std::chrono::milliseconds(5);
  o.max_rto = std::chrono::milliseconds(200);
  // Generous: up to 6 workers x 4 threads and the switch share 2 cores.
  o.call_timeout = std::chrono::milliseconds(10000);
  if (c.max_calls_in_flight != 0) o.max_calls_in_flight = c.max_calls_in_flight;
  return o;
}

// Aborts the process with `what` if not disarmed before the deadline: a hang must end in a
// message, not in a test runner's timeout.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, limit, [&] { return disarmed_; })) {
        std::fprintf(stderr, "differential_test: no result after %lld ms: %s\n", (long long)limit.count(),
                     what_.c_str());
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      disarmed_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

struct RankResult {
  std::vector<std::vector<uint32_t>> data;  // the rank's buffers (both types as raw bits)
  std::vector<Status> status;               // per op
  Stats stats;
  uint32_t over_bound = 0;                  // most calls seen pending beyond max_calls_in_flight
};

// Runs `p` and returns an empty string if everything matched the model, else a report.
//
// Checks: every handle's status is what the model says (OK for a call that is done; for a call
// some rank rejects, INVALID_ARGUMENT on the ranks that reject it and ABORTED on the others);
// every element inside its interval; every element written by an all-reduce bit-identical on
// all ranks; Stats counters that agree. With an abandoning rank (Program::abandon_rank): no
// surviving rank gets OK for a call the abandoning rank never made, and every element whose
// last writer (in the model) returned OK on its rank is right; calls up to the abandonment may
// fail (their peers time out).
std::string RunAndCheck(const Program& p) {
  const ClusterParams& c = p.cluster;
  const uint32_t n = c.workers;
  const bool abandon = p.abandon_rank >= 0;
  // Buffers outlive the cluster: the cluster (declared after) is destroyed first, which stops
  // the library's threads before the memory goes.
  std::vector<RankResult> ranks(n);
  std::vector<std::vector<float>> scratch(p.ops.size());  // the rejecting rank's spoiled input
  for (uint32_t k = 0; k < n; ++k) {
    for (uint32_t b = 0; b < p.buffers.size(); ++b) {
      std::vector<uint32_t> d(p.buffers[b].size);
      for (size_t i = 0; i < d.size(); ++i) d[i] = InputBits(p.seed, p.buffers[b].type, k, b, i, p.extremes);
      ranks[k].data.push_back(std::move(d));
    }
    ranks[k].status.resize(p.ops.size());
  }
  for (uint32_t j = 0; j < p.ops.size(); ++j) {
    const Op& op = p.ops[j];
    if (op.reject == Reject::kNaN || op.reject == Reject::kInf || op.reject == Reject::kTooLarge) {
      scratch[j].assign(op.count, 1.0f);
      scratch[j][op.reject_index % op.count] = op.reject == Reject::kNaN ? std::numeric_limits<float>::quiet_NaN()
                                               : op.reject == Reject::kInf ? -std::numeric_limits<float>::infinity()
                                                                           : 0x1p127f;
    }
  }
  transport::FaultOptions faults;
  dataplane::SwitchConfig sc = LoopbackCluster::DefaultSwitchConfig();
  sc.io_threads = c.io_threads;
  faults.seed = c.fault_seed;
  switch (c.faults) {
    case Faults::kNone: break;
    case Faults::kFabricLossAndDuplication:
      faults.loss = 0.01;
      faults.duplicate = 0.01;
      break;
    case Faults::kSwitchDropSimulator:
      sc.ingress_drop_probability = 0.01;
      sc.egress_drop_probability = 0.01;
      sc.drop_seed = c.fault_seed;
      break;
    case Faults::kFabricReorderWithGuard:
      faults.loss = 0.01;
      faults.reorder = 0.03;
      sc.late_duplicate_guard = true;
      break;
  }
  Options options = ProgramOptions(c);
  // The survivors of an abandoned job wait one job timeout: keep it short there.
  if (abandon) options.call_timeout = std::chrono::milliseconds(1500);
  auto cluster_or = c.racks != 0
                        ? LoopbackCluster::CreateTwoLevel(c.racks, n / c.racks, options, faults, sc,
                                                          c.shards)
                        : LoopbackCluster::Create(n, options, faults, sc, c.shards);
  if (!cluster_or.ok()) return "cannot build the cluster: " + cluster_or.status().ToString();
  std::unique_ptr<LoopbackCluster> cluster = std::move(*cluster_or);
  {
    // Each op's failure ends that op in at most call_timeout; after the first failure the
    // context is broken and later ops fail at once.
    Watchdog dog(std::chrono::milliseconds(30000 + 10000 * (p.ops.size() + 1)), Describe(p));
    std::vector<std::thread> threads;
    for (uint32_t k = 0; k < n; ++k) {
      threads.emplace_back([&, k] {
        RankResult& rr = ranks[k];
        const bool abandons = int32_t(k) == p.abandon_rank;
        std::vector<AllReduceHandle> handles(p.ops.size());
        uint32_t submitted = 0;
        for (uint32_t j = 0; j < p.ops.size(); ++j) {
          Context& ctx = cluster->ctx(k);
          const Op& op = p.ops[j];
          const void* in = rr.data[op.in_buf].data() + op.in_off;
          void* out = rr.data[op.out_buf].data() + op.out_off;
          if (op.reject_rank == int32_t(k)) {
            switch (op.reject) {
              case Reject::kOverlap: out = rr.data[op.in_buf].data() + op.in_off + 1; break;
              case Reject::kNull: in = nullptr; break;
              case Reject::kNone: break;
              default: in = scratch[j].data(); break;
            }
          }
          const DataType type = p.buffers[op.in_buf].type;
          if (op.async) {
            handles[j] = ctx.AllReduceAsync(in, out, op.count, type);
            // Backpressure: when AllReduceAsync returns, at most max_calls_in_flight calls are
            // pending, this one included (calls only ever finish, so counting afterwards is safe).
            const uint32_t bound = ctx.options().max_calls_in_flight;
            uint32_t pending = 0;
            for (uint32_t i = 0; i <= j; ++i) pending += p.ops[i].async && !handles[i].IsDone();
            if (pending > bound) rr.over_bound = std::max(rr.over_bound, pending);
          } else {
            rr.status[j] = ctx.AllReduce(in, out, op.count, type);
          }
          submitted = j + 1;
          if (abandons && j == p.abandon_after) {
            rr.stats = ctx.GetStats();
            cluster->DestroyContext(k);  // with its calls still running
            break;
          }
          for (uint32_t w : op.wait_after) rr.status[w] = handles[w].Wait();
        }
        for (uint32_t j = 0; j < submitted; ++j)
          if (p.ops[j].async) rr.status[j] = handles[j].Wait();
        for (uint32_t j = submitted; j < p.ops.size(); ++j) rr.status[j] = CancelledError("never submitted");
        if (!abandons) rr.stats = cluster->ctx(k).GetStats();
      });
    }
    for (auto& t : threads) t.join();
  }
  cluster.reset();

  std::ostringstream report;
  size_t problems = 0;
  auto note = [&](const std::string& line) {
    if (++problems <= 24) report << "  " << line << "\n";
  };
  const Model model = RunModel(p);
  if (model.ambiguous) return "the model cannot decide every call's outcome (program generator bug)";
  for (uint32_t k = 0; k < n; ++k) {
    const bool survivor = abandon && int32_t(k) != p.abandon_rank;
    uint64_t done = 0, rejected = 0;
    for (uint32_t j = 0; j < p.ops.size(); ++j) {
      const Status& st = ranks[k].status[j];
      const std::string where = "rank " + std::to_string(k) + " op #" + std::to_string(j) + ": ";
      if (model.outcomes[j] == Outcome::kRejected) {
        ++rejected;
        const StatusCode want = model.rejects[j][k] ? StatusCode::kInvalidArgument : StatusCode::kAborted;
        if (st.ok()) {
          note(where + "OK, but rank(s) rejected this call: it must fail on every rank");
        } else if (!abandon && st.code() != want) {
          note(where + "expected " + (model.rejects[j][k] ? "INVALID_ARGUMENT" : "ABORTED") + " (a rejected call), got " +
               st.ToString());
        }
        continue;
      }
      ++done;
      if (abandon) {
        if (survivor && j > p.abandon_after && st.ok())
          note(where + "OK, but rank " + std::to_string(p.abandon_rank) + " never made this call");
      } else if (!st.ok()) {
        note(where + st.ToString());
      }
    }
    if (ranks[k].over_bound != 0)
      note("rank " + std::to_string(k) + ": " + std::to_string(ranks[k].over_bound) +
           " calls pending after AllReduceAsync returned, more than max_calls_in_flight");
    const Stats& s = ranks[k].stats;
    if (!abandon && (s.calls_submitted != p.ops.size() || s.calls_completed != done || s.calls_failed != rejected))
      note("rank " + std::to_string(k) + " stats: submitted " + std::to_string(s.calls_submitted) + ", completed " +
           std::to_string(s.calls_completed) + ", failed " + std::to_string(s.calls_failed) + "; expected " +
           std::to_string(p.ops.size()) + " submitted, " + std::to_string(done) + " completed, " +
           std::to_string(rejected) + " failed (rejected)");
  }
  // An element is checked when its last writer returned OK on its rank (always, without an
  // abandoning rank: then the only failures are rejected calls, which write nothing) or when
  // nothing wrote it.
  auto checked = [&](uint32_t k, int32_t writer) { return writer < 0 || ranks[k].status[writer].ok(); };
  for (uint32_t k = 0; k < n; ++k) {
    for (uint32_t b = 0; b < p.buffers.size(); ++b) {
      const ModelBuffer& m = model.ranks[k][b];
      const std::vector<uint32_t>& got = ranks[k].data[b];
      size_t wrong = 0, not_shared = 0;
      std::string first, first_not_shared;
      for (size_t i = 0; i < got.size(); ++i) {
        if (!checked(k, m.writer[i])) continue;
        bool ok;
        char line[256];
        if (m.type == DataType::kInt32) {
          ok = got[i] == m.exact[i];
          std::snprintf(line, sizeof line, "[%zu] = %d, expected %d (last written by %s%d)", i, int32_t(got[i]),
                        int32_t(m.exact[i]), m.writer[i] < 0 ? "input " : "op #", m.writer[i]);
        } else {
          const double y = std::bit_cast<float>(got[i]);
          // An infinite radius: the sum may overflow float32, the model cannot bound it.
          ok = std::isinf(m.radius[i]) || (std::isfinite(y) && std::fabs(y - m.centre[i]) <= m.radius[i]);
          std::snprintf(line, sizeof line, "[%zu] = %.9g, expected %.9g +- %.3g (last written by %s%d)", i, y,
                        m.centre[i], m.radius[i], m.writer[i] < 0 ? "input " : "op #", m.writer[i]);
        }
        if (!ok && wrong++ == 0) first = line;
        // What an all-reduce wrote is the same multicast result on every rank, bit for bit.
        if (k > 0 && m.writer[i] >= 0 && checked(0, m.writer[i]) && got[i] != ranks[0].data[b][i] &&
            not_shared++ == 0)
          first_not_shared = line;
      }
      const std::string where = "rank " + std::to_string(k) + " b" + std::to_string(b) + " (" +
                                std::string(DataTypeName(m.type)) + "[" + std::to_string(got.size()) + "]): ";
      if (wrong > 0) note(where + std::to_string(wrong) + " element(s) outside the model; first " + first);
      if (not_shared > 0)
        note(where + std::to_string(not_shared) + " element(s) written by an all-reduce differ from rank 0's; first " +
             first_not_shared);
    }
  }
  if (problems == 0) return "";
  if (problems > 24) report << "  ... and " << problems - 24 << " more\n";
  return report.str();
}

uint64_t EnvU64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    ADD_FAILURE() << name << " must be a non-negative integer, got '" << v << "'";
    return fallback;
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// The randomized run.

constexpr uint64_t kDefaultSeed = 20261201;
// About 20 s on 2 cores (loaded); sanitizer builds run 5-15x slower, so fewer programs there.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SWITCHML_DIFF_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(SWITCHML_DIFF_SANITIZED)
constexpr uint64_t kDefaultPrograms = 120;
#else
constexpr uint64_t kDefaultPrograms = 700;
#endif

TEST(DifferentialTest, RandomProgramsMatchTheSequentialModel) {
  const uint64_t seed = EnvU64("SWITCHML_DIFF_SEED", kDefaultSeed);
  const uint64_t programs = EnvU64("SWITCHML_DIFF_PROGRAMS", kDefaultPrograms);
  const uint64_t first = EnvU64("SWITCHML_DIFF_FIRST", 0);
  std::printf("differential: seed %llu, programs %llu..%llu\n", (unsigned long long)seed, (unsigned long long)first,
              (unsigned long long)(first + programs - 1));
  const bool verbose = EnvU64("SWITCHML_DIFF_VERBOSE", 0) != 0;
  // What the programs covered (printed at the end, so a generator change that stops covering a
  // case shows).
  uint64_t rejected_calls = 0, rejected_by_value = 0, extreme_programs = 0, abandoning_programs = 0;
  for (uint64_t i = first; i < first + programs; ++i) {
    const Program p = Decidable(Generate(Hash(seed, i)));
    if (verbose) std::printf("program %llu: %s", (unsigned long long)i, Describe(p).c_str());
    const Model m = RunModel(p);
    for (uint32_t j = 0; j < p.ops.size(); ++j) {
      if (m.outcomes[j] != Outcome::kRejected) continue;
      ++rejected_calls;
      rejected_by_value += p.ops[j].reject_rank < 0;
    }
    extreme_programs += p.extremes;
    abandoning_programs += p.abandon_rank >= 0;
    const std::string failure = RunAndCheck(p);
    if (!failure.empty()) {
      ADD_FAILURE() << "program " << i << " of seed " << seed << " failed (replay: SWITCHML_DIFF_SEED=" << seed
                    << " SWITCHML_DIFF_FIRST=" << i << " SWITCHML_DIFF_PROGRAMS=1)\n"
                    << Describe(p) << "problems:\n"
                    << failure;
      return;  // one failing program is enough to read
    }
  }
  std::printf("differential: %llu calls rejected by some rank (%llu of them for their values, e.g. a sum that "
              "reached 2^127), %llu programs with extreme inputs, %llu with a rank that abandoned its calls\n",
              (unsigned long long)rejected_calls, (unsigned long long)rejected_by_value,
              (unsigned long long)extreme_programs, (unsigned long long)abandoning_programs);
}

// The same generator against a job served by 2 or 3 switches (shards, each serving a share of
// every worker's threads; some with 2 I/O threads each): a fixed seed and a few programs.
TEST(DifferentialTest, RandomProgramsMatchTheModelOnSeveralShards) {
  constexpr uint64_t kSeed = 20261205;
  const uint64_t programs = EnvU64("SWITCHML_DIFF_SHARD_PROGRAMS", 40);
  for (uint64_t i = 0; i < programs; ++i) {
    Program p = Decidable(Generate(Hash(kSeed, i)));
    p.cluster.shards = 2 + uint32_t(i % 2);
    p.cluster.io_threads = 1 + uint32_t((i / 2) % 2);
    const std::string failure = RunAndCheck(p);
    if (!failure.empty()) {
      ADD_FAILURE() << "program " << i << " of seed " << kSeed << " on " << p.cluster.shards
                    << " shards failed\n"
                    << Describe(p) << "problems:\n"
                    << failure;
      return;
    }
  }
}

// The same generator against a two-level job (docs/scaling.md "Two-level aggregation"): the
// workers split into racks, a leaf switch per rack under one parent (some with 2 I/O threads
// per switch, some with 2 shards per level); a fixed seed and a few programs.
TEST(DifferentialTest, RandomProgramsMatchTheModelThroughTwoLevels) {
  constexpr uint64_t kSeed = 20261203;
  const uint64_t programs = EnvU64("SWITCHML_DIFF_RACK_PROGRAMS", 40);
  for (uint64_t i = 0; i < programs; ++i) {
    Program p = Decidable(Generate(Hash(kSeed, i)));
    const uint32_t n = p.cluster.workers;
    p.cluster.racks = n % 2 == 0 ? 2 : n % 3 == 0 ? 3 : n;  // n racks of 1 for 1 and 5
    p.cluster.io_threads = 1 + uint32_t(i % 2);
    p.cluster.shards = 1 + uint32_t((i / 2) % 2);  // shards per level
    const std::string failure = RunAndCheck(p);
    if (!failure.empty()) {
      ADD_FAILURE() << "program " << i << " of seed " << kSeed << " through " << p.cluster.racks
                    << " racks (" << p.cluster.shards << " shard(s) per level) failed\n"
                    << Describe(p) << "problems:\n"
                    << failure;
      return;
    }
  }
}

// The same generator against a switch with two I/O threads (each worker thread's slots at
// the I/O thread that owns them, the aggregator shared): a fixed seed and a few programs.
TEST(DifferentialTest, RandomProgramsMatchTheModelWithTwoSwitchIoThreads) {
  constexpr uint64_t kSeed = 20261202;
  const uint64_t programs = EnvU64("SWITCHML_DIFF_IO_PROGRAMS", 40);
  for (uint64_t i = 0; i < programs; ++i) {
    Program p = Decidable(Generate(Hash(kSeed, i)));
    p.cluster.io_threads = 2;
    const std::string failure = RunAndCheck(p);
    if (!failure.empty()) {
      ADD_FAILURE() << "program " << i << " of seed " << kSeed << " with 2 switch I/O threads failed\n"
                    << Describe(p) << "problems:\n"
                    << failure;
      return;
    }
  }
}

// The model itself, on hand-computed cases: a wrong model would make every other test
// meaningless.
TEST(DifferentialTest, ModelIsSequentialAndItsBoundIsTight) {
  constexpr DataType kF32 = DataType::kFloat32;
  Program p;
  p.seed = 7;
  p.cluster.workers = 2;
  p.buffers = {{DataType::kInt32, 3}, {DataType::kFloat32, 300}};
  p.ops = {Op{true, 0, 0, 0, 0, 3, {}}, Op{true, 0, 0, 0, 0, 3, {}}, Op{false, 1, 0, 1, 0, 300, {}},
           Op{true, 1, 0, 1, 0, 300, {}}};
  const auto model = RunModel(p);
  for (size_t i = 0; i < 3; ++i) {
    // Two in-place sums over 2 ranks: 2 * (a + b), with 32-bit wrap-around.
    const uint32_t a = InputBits(p.seed, DataType::kInt32, 0, 0, i), b = InputBits(p.seed, DataType::kInt32, 1, 0, i);
    EXPECT_EQ(model.ranks[0][0].exact[i], 2 * (a + b));
    EXPECT_EQ(model.ranks[1][0].exact[i], 2 * (a + b));
    EXPECT_EQ(model.ranks[0][0].writer[i], 1);
  }
  // One thread, 256 elements per packet: blocks [0, 256) and [256, 300).
  for (size_t first : {size_t{0}, size_t{256}}) {
    const size_t end = std::min<size_t>(first + 256, 300);
    double block_max = 0;
    for (size_t i = first; i < end; ++i)
      for (uint32_t k = 0; k < 2; ++k)
        block_max = std::max<double>(block_max, std::fabs(std::bit_cast<float>(InputBits(p.seed, kF32, k, 1, i))));
    for (size_t i = first; i < end; ++i) {
      const double a = std::bit_cast<float>(InputBits(p.seed, kF32, 0, 1, i));
      const double b = std::bit_cast<float>(InputBits(p.seed, kF32, 1, 1, i));
      EXPECT_EQ(model.ranks[0][1].centre[i], 2 * (a + b)) << i;
      EXPECT_GT(model.ranks[0][1].radius[i], 0.0) << i;
      // About 2^-24 of the block's largest magnitude (the float32 rounding of x * s is up to
      // 64 quanta when the scale is not a power of two; quantizer.h), over two chained calls:
      // far below a mix-up such as a + b instead of 2 (a + b) for any element that is not
      // negligible in its block.
      EXPECT_LE(model.ranks[0][1].radius[i], 0x1p-20 * block_max) << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Regression: chained async all-reduces on one buffer (all four submitted before any wait).

Program Chain(uint32_t workers, DataType type, size_t count, bool out_of_place) {
  Program p;
  p.seed = 4096 + workers;
  p.cluster.workers = workers;
  p.cluster.threads = 1;
  p.cluster.window = 256;
  p.cluster.elements_per_packet = 256;
  p.buffers = {{type, count}};
  if (out_of_place) p.buffers.push_back({type, count});
  for (uint32_t j = 0; j < 4; ++j) {
    Op op;
    op.async = true;
    op.count = count;
    op.in_buf = out_of_place ? j % 2 : 0;  // a -> b -> a -> b, or a -> a four times
    op.out_buf = out_of_place ? 1 - j % 2 : 0;
    p.ops.push_back(op);
  }
  return p;
}

void ExpectMatchesModel(const Program& p) {
  const std::string failure = RunAndCheck(p);
  EXPECT_TRUE(failure.empty()) << Describe(p) << "problems:\n" << failure;
}

TEST(DifferentialTest, ChainedAsyncInPlaceFloat32TwoWorkers) { ExpectMatchesModel(Chain(2, DataType::kFloat32, 4096, false)); }
TEST(DifferentialTest, ChainedAsyncInPlaceInt32TwoWorkers) { ExpectMatchesModel(Chain(2, DataType::kInt32, 4096, false)); }
TEST(DifferentialTest, ChainedAsyncInPlaceFloat32ThreeWorkers) { ExpectMatchesModel(Chain(3, DataType::kFloat32, 4096, false)); }
TEST(DifferentialTest, ChainedAsyncInPlaceInt32ThreeWorkers) { ExpectMatchesModel(Chain(3, DataType::kInt32, 4096, false)); }
TEST(DifferentialTest, ChainedAsyncOutOfPlaceAToBToAFloat32) { ExpectMatchesModel(Chain(2, DataType::kFloat32, 4096, true)); }
TEST(DifferentialTest, ChainedAsyncOutOfPlaceAToBToAInt32) { ExpectMatchesModel(Chain(3, DataType::kInt32, 4096, true)); }

// Chained calls on overlapping parts of one buffer with several worker threads: the second
// call's input straddles the first call's output and the slices of the two calls differ.
Program OverlappingChain(DataType type) {
  Program p;
  p.seed = 99;
  p.cluster.workers = 3;
  p.cluster.threads = 3;
  p.cluster.window = 24;
  p.cluster.elements_per_packet = 64;
  p.buffers = {{type, 5000}, {type, 3000}};
  p.ops = {Op{true, 0, 0, 0, 0, 3000, {}},       // b0[0, 3000) in place
           Op{true, 0, 1000, 1, 0, 3000, {}},    // b0[1000, 4000) -> b1: half of it is #0's output
           Op{true, 1, 0, 0, 2000, 3000, {}},    // b1 -> b0[2000, 5000): overwrites #1's input tail
           Op{true, 0, 0, 0, 0, 5000, {}}};      // all of b0 in place
  return p;
}

TEST(DifferentialTest, ChainedAsyncOnOverlappingRangesSeveralThreadsFloat32) {
  ExpectMatchesModel(OverlappingChain(DataType::kFloat32));
}
TEST(DifferentialTest, ChainedAsyncOnOverlappingRangesSeveralThreadsInt32) {
  ExpectMatchesModel(OverlappingChain(DataType::kInt32));
}

// ---------------------------------------------------------------------------------------------
// Regression: workers that disagree on a call's count or type end in an error on every worker,
// never in a result, and the context is broken afterwards. The error is the calls' mismatch
// (INVALID_ARGUMENT naming it), found when the descriptors meet, not the call timeout: that is
// what "at once rather than at the timeout" means, checked by the status instead of the clock.

struct Disagreement {
  std::vector<size_t> counts;      // per rank
  std::vector<DataType> types;     // per rank
};

std::string DescribeDisagreement(const Disagreement& d) {
  std::ostringstream o;
  for (size_t r = 0; r < d.counts.size(); ++r)
    o << (r ? ", " : "") << "rank " << r << ": " << DataTypeName(d.types[r]) << "[" << d.counts[r] << "]";
  return o.str();
}

void ExpectEveryRankFails(const Disagreement& d) {
  SCOPED_TRACE(DescribeDisagreement(d));
  const uint32_t n = uint32_t(d.counts.size());
  Options o = ProgramOptions(ClusterParams{});
  o.num_worker_threads = 1;
  o.window_packets = 16;
  o.elements_per_packet = 256;
  // Long, so that on a loaded machine no call reaches it before the mismatch is found (which a
  // DEADLINE_EXCEEDED below would show).
  o.call_timeout = std::chrono::milliseconds(20000);
  // How long to wait for a result before calling it a hang: well past the call timeout.
  const auto limit = o.call_timeout + std::chrono::seconds(20);
  std::vector<std::vector<uint32_t>> buffers(n);
  for (uint32_t r = 0; r < n; ++r) {
    buffers[r].resize(std::max<size_t>(d.counts[r], 1));
    for (size_t i = 0; i < buffers[r].size(); ++i) buffers[r][i] = InputBits(5, d.types[r], r, 0, i) & 0x3FFFFFFF;
  }
  auto cluster = LoopbackCluster::Create(n, o).value();
  std::vector<Status> status(n);
  std::vector<std::chrono::milliseconds> elapsed(n);
  std::vector<char> finished(n, 0);  // not vector<bool>: one writer thread per element
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const auto t0 = std::chrono::steady_clock::now();
      auto h = cluster->ctx(r).AllReduceAsync(buffers[r].data(), buffers[r].data(), d.counts[r], d.types[r]);
      finished[r] = h.WaitFor(limit);
      elapsed[r] = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      if (finished[r]) status[r] = h.status();
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < n; ++r) {
    ASSERT_TRUE(finished[r]) << "rank " << r << ": no result after " << elapsed[r].count() << " ms";
    EXPECT_FALSE(status[r].ok()) << "rank " << r << " got OK for a call the other workers made differently";
    EXPECT_EQ(status[r].code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << status[r];
    EXPECT_NE(status[r].message().find("all-reduce calls #0 do not match"), std::string::npos)
        << "rank " << r << ": " << status[r];
  }
  // The context is broken: a later, agreeing call fails at once (FAILED_PRECONDITION; a call
  // that ran would succeed, or time out only after 20 s, so the wait is a deadline, not a bound).
  for (uint32_t r = 0; r < n; ++r) {
    int32_t x = 1;
    auto h = cluster->ctx(r).AllReduceAsync(&x, &x, 1, DataType::kInt32);
    ASSERT_TRUE(h.WaitFor(limit)) << "rank " << r;
    EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition) << "rank " << r << ": " << h.status();
  }
}

constexpr DataType kF = DataType::kFloat32;
constexpr DataType kI = DataType::kInt32;

TEST(DifferentialTest, DisagreeingCountsFailOnEveryRank) {
  ExpectEveryRankFails({{4096, 4000}, {kF, kF}});
  ExpectEveryRankFails({{4096, 4097}, {kI, kI}});
}
TEST(DifferentialTest, DisagreeingCountsWithinOnePacketFailOnEveryRank) {
  ExpectEveryRankFails({{100, 37}, {kF, kF}});
  ExpectEveryRankFails({{1, 2}, {kI, kI}});
}
TEST(DifferentialTest, ZeroAgainstNonZeroCountFailsOnEveryRank) {
  ExpectEveryRankFails({{0, 1000}, {kF, kF}});
  ExpectEveryRankFails({{1000, 0}, {kI, kI}});
}
TEST(DifferentialTest, OneRankOfThreeDisagreesOnTheCount) { ExpectEveryRankFails({{512, 512, 300}, {kI, kI, kI}}); }
TEST(DifferentialTest, DisagreeingTypesFailOnEveryRank) {
  ExpectEveryRankFails({{4096, 4096}, {kI, kF}});
  ExpectEveryRankFails({{10, 10}, {kF, kI}});
}

// ---------------------------------------------------------------------------------------------
// Backpressure: many more async calls than max_calls_in_flight from one thread per rank, on
// disjoint buffers and on chains; AllReduceAsync blocks instead of queueing them all, and every
// call completes with the right result.

TEST(DifferentialTest, MaxJobsInFlightBoundsPendingCallsAndAllComplete) {
  Program p;
  p.seed = 3;
  p.cluster.workers = 2;
  p.cluster.threads = 2;
  p.cluster.window = 16;
  p.cluster.elements_per_packet = 64;
  p.cluster.max_calls_in_flight = 4;
  for (uint32_t b = 0; b < 24; ++b) p.buffers.push_back({b % 2 ? DataType::kInt32 : DataType::kFloat32, 300 + 7 * b});
  for (uint32_t j = 0; j < 120; ++j) {
    Op op;
    op.async = true;
    // Mostly disjoint buffers in turn; every fifth call chains on the previous call's output.
    const uint32_t b = j % 5 == 4 ? p.ops.back().out_buf : j % 24;
    op.in_buf = op.out_buf = b;
    op.count = p.buffers[b].size;
    p.ops.push_back(op);
  }
  ExpectMatchesModel(p);  // includes: pending calls <= 4 whenever AllReduceAsync returns
}

}  // namespace
}  // namespace switchml
