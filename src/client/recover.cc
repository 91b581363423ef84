// client/recover.cc — ContextImpl::Recover: finishing the calls a failed switch left unfinished
// on the host path (docs/reliability.md, "Surviving a failing switch").
//
// Why the plan below is right (engine.h for the protocol): on each worker thread the slices run
// one after another, and a worker sends a slot's next round only after it completed the slot's
// previous one. So when some rank completed packet q of call c on slot i, every rank completed
// every earlier round of slot i (and every slice of that thread before c); ranks differ only in
// the last round of a slot, and the shadow copies (SliceEngine::shadow) say which rank has it.
// A packet's output is written only when it completes, so the input of a packet no rank
// completed is intact on every rank, also in place. Per (call, thread, slot), with M the latest
// (call, packet) any rank completed on the slot:
//   M's call > c: every packet of c on the slot is complete everywhere;
//   M's call == c: the packets before M are complete everywhere, M is broadcast from the lowest
//     rank that has it to the ranks that do not, the packets after it are reduced on the host;
//   otherwise: no rank completed any packet of c on the slot: all are reduced on the host.
// The plan depends only on all-gathered values, so every rank issues the same collectives.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "client/context_impl.h"
#include "quant/quantizer.h"
#include "wire/payload.h"

namespace switchml::client {

namespace {

struct Mark {
  int64_t call = -1;  // -1: no round completed on the slot
  int64_t packet = 0;
  bool operator==(const Mark&) const = default;
  bool operator<(const Mark& o) const { return call != o.call ? call < o.call : packet < o.packet; }
};

}  // namespace

StatusOr<RecoveryReport> ContextImpl::Recover(HostPath& host) {
  if (!broken()) {
    return FailedPreconditionError(
        "Recover: the context has not failed; recovery finishes the calls of a context whose switch failed");
  }
  if (!options_.shadow_copies) {
    return FailedPreconditionError(
        "Recover: this context keeps no shadow copies (Options::shadow_copies = false), so the results some "
        "ranks lack cannot be completed; the calls keep their failure");
  }
  std::lock_guard recover_lock(recover_mu_);
  std::vector<std::shared_ptr<CallState>> calls;
  uint64_t submitted = 0;
  {
    std::lock_guard l(submit_mu_);
    if (recovered_.exchange(true, std::memory_order_acq_rel)) {
      return FailedPreconditionError("Recover: this context was already recovered");
    }
    calls.assign(pending_.begin(), pending_.end());
    submitted = next_call_id_;
  }
  // (0) Every call stops: a broken context fails the running ones at once and the queued ones
  // without starting them. Afterwards no worker thread touches its engine.
  for (const auto& c : calls) (void)MakeHandle(c).Wait();
  std::map<uint64_t, std::shared_ptr<CallState>> by_id;
  for (const auto& c : calls) by_id[c->id] = c;

  const uint32_t T = uint32_t(workers_.size());
  const uint32_t N = options_.num_workers;
  const uint32_t rank = options_.rank;
  const uint32_t E = options_.elements_per_packet;
  std::vector<uint32_t> window(T), slot_offset(T);
  uint32_t slots = 0;
  for (uint32_t t = 0; t < T; ++t) {
    window[t] = workers_[t]->engine().config().window;
    slot_offset[t] = slots;
    slots += window[t];
  }

  // (1) What each rank has: calls submitted, per thread the first call it has not finished, per
  // slot the last round completed.
  std::vector<int64_t> mine;
  mine.push_back(int64_t(submitted));
  for (uint32_t t = 0; t < T; ++t) {
    const SliceEngine& e = workers_[t]->engine();
    mine.push_back(e.begun() ? int64_t(e.last_call_id() + (e.ended_in_step() ? 1 : 0)) : 0);
  }
  for (uint32_t t = 0; t < T; ++t) {
    for (uint32_t i = 0; i < window[t]; ++i) {
      const SlotShadow sh = workers_[t]->engine().shadow(i);
      mine.push_back(sh.valid ? int64_t(sh.call_id) : -1);
      mine.push_back(sh.valid ? int64_t(sh.packet) : 0);
    }
  }
  const size_t stride = mine.size();
  SWITCHML_ASSIGN_OR_RETURN(std::vector<int64_t> all, host.AllGather(mine));
  if (all.size() != stride * N) {
    return InternalError("Recover: the host path's all-gather returned " + std::to_string(all.size()) +
                         " values, expected " + std::to_string(stride * N));
  }
  auto mark = [&](uint32_t r, uint32_t t, uint32_t i) {
    const size_t at = r * stride + 1 + T + 2 * size_t(slot_offset[t] + i);
    return Mark{all[at], all[at + 1]};
  };
  uint64_t lo = UINT64_MAX, end = UINT64_MAX;
  for (uint32_t r = 0; r < N; ++r) {
    end = std::min<uint64_t>(end, uint64_t(all[r * stride]));
    for (uint32_t t = 0; t < T; ++t) lo = std::min<uint64_t>(lo, uint64_t(all[r * stride + 1 + t]));
  }
  lo = std::min(lo, end);
  RecoveryReport report;
  report.first_call = lo;
  report.end_call = end;
  report.submitted = submitted;

  // (2) Agree on every call to finish: its element count and type, and whether a rank rejected it.
  std::vector<int64_t> desc;
  for (uint64_t c = lo; c < end; ++c) {
    auto it = by_id.find(c);
    if (it == by_id.end()) {
      desc.insert(desc.end(), {0, 0, 0, 0});  // finished here (and forgotten)
      continue;
    }
    const CallState& cs = *it->second;
    const bool rejected = cs.rejected_at_submit || (cs.exponents_at_start && !cs.start_scan.ok());
    desc.insert(desc.end(), {1, int64_t(cs.num_elements), int64_t(cs.type), rejected ? 1 : 0});
  }
  SWITCHML_ASSIGN_OR_RETURN(std::vector<int64_t> descs, host.AllGather(desc));
  if (descs.size() != desc.size() * N) return InternalError("Recover: the host path's all-gather returned the wrong size");

  std::vector<uint8_t> scratch(4 * size_t{E});
  std::map<uint64_t, Status> outcome;
  for (uint64_t c = lo; c < end; ++c) {
    const size_t k = 4 * (c - lo);
    int known = -1;
    uint32_t rejected_by = 0;
    std::string mismatch;
    for (uint32_t r = 0; r < N; ++r) {
      const int64_t* d = &descs[r * desc.size() + k];
      if (d[0] == 0) continue;
      if (d[3] != 0) ++rejected_by;
      if (known < 0) {
        known = int(r);
      } else {
        const int64_t* f = &descs[size_t(known) * desc.size() + k];
        if (d[3] == 0 && f[3] == 0 && (d[1] != f[1] || d[2] != f[2]) && mismatch.empty()) {
          mismatch = "rank " + std::to_string(known) + " passed " + std::to_string(f[1]) + " elements of " +
                     std::string(DataTypeName(DataType(f[2]))) + ", rank " + std::to_string(r) + " " +
                     std::to_string(d[1]) + " of " + std::string(DataTypeName(DataType(d[2])));
        }
      }
    }
    if (known < 0) {
      return InternalError("Recover: no rank knows all-reduce #" + std::to_string(c) +
                           " although some rank has not finished it");
    }
    if (rejected_by > 0) {
      outcome[c] = AbortedError("all-reduce #" + std::to_string(c) + " was rejected by " + std::to_string(rejected_by) +
                                " of the " + std::to_string(N) + " workers (found while recovering from the "
                                "switch's failure); it wrote no output");
      continue;
    }
    if (!mismatch.empty()) {
      outcome[c] = InvalidArgumentError("the workers' all-reduce calls #" + std::to_string(c) +
                                        " do not match (found while recovering from the switch's failure): " +
                                        mismatch);
      continue;
    }
    const int64_t* agreed = &descs[size_t(known) * desc.size() + k];
    const size_t n = size_t(agreed[1]);
    const DataType type = DataType(agreed[2]);
    auto it = by_id.find(c);
    CallState* cs = it == by_id.end() ? nullptr : it->second.get();
    auto need_buffers = [&]() -> Status {
      if (cs == nullptr) {
        return InternalError("Recover: rank " + std::to_string(rank) + " finished all-reduce #" + std::to_string(c) +
                             " but the other ranks' shadow copies say it lacks some of its packets");
      }
      return OkStatus();
    };
    const size_t base = n / T, rem = n % T;
    for (uint32_t t = 0; t < T; ++t) {
      const size_t len = t < rem ? base + 1 : base;
      const size_t offset = t < rem ? t * (base + 1) : t * base + rem;
      const SliceLayout L = SliceLayout::Of(len, type, len > 0 || t == 0, window[t], E);
      const uint8_t* in = cs && cs->in_begin ? reinterpret_cast<const uint8_t*>(cs->in_begin) + 4 * offset : nullptr;
      uint8_t* out = cs && cs->out_begin ? reinterpret_cast<uint8_t*>(cs->out_begin) + 4 * offset : nullptr;
      std::vector<uint64_t> missing;  // data blocks no rank completed
      for (uint32_t i = 0; i < L.batch; ++i) {
        Mark M;
        for (uint32_t r = 0; r < N; ++r) M = std::max(M, mark(r, t, i));
        uint64_t first_missing = i;
        if (M.call > int64_t(c)) continue;
        if (M.call == int64_t(c)) {
          const uint64_t last = uint64_t(M.packet);
          int root = -1;
          bool lagging_here = false, any_lagging = false;
          for (uint32_t r = 0; r < N; ++r) {
            const Mark m = mark(r, t, i);
            if (m == M) {
              if (root < 0) root = int(r);
              continue;
            }
            // One round behind: the slot's previous packet, or an earlier call's.
            const bool ok = last >= L.batch ? m == Mark{int64_t(c), int64_t(last - L.batch)} : m.call < int64_t(c);
            if (!ok) {
              return InternalError("Recover: rank " + std::to_string(r) + " is more than one round behind on slot " +
                                   std::to_string(i) + " of worker thread " + std::to_string(t) + " (all-reduce #" +
                                   std::to_string(c) + ")");
            }
            any_lagging = true;
            lagging_here |= r == rank;
          }
          if (any_lagging && last >= L.data_offset) {
            const uint64_t block = last - L.data_offset;
            const uint32_t blen = uint32_t(std::min<uint64_t>(E, len - block * E));
            if (int(rank) == root) {
              const SlotShadow sh = workers_[t]->engine().shadow(i);
              std::memcpy(scratch.data(), sh.payload.data(), scratch.size());
            }
            SWITCHML_RETURN_IF_ERROR(host.Broadcast(scratch.data(), scratch.size(), uint32_t(root))
                                         .WithContext("recovery: broadcasting a shadow copy"));
            ++report.packets_broadcast;
            if (lagging_here) {
              SWITCHML_RETURN_IF_ERROR(need_buffers());
              if (type == DataType::kInt32) {
                wire::BEToInt32(scratch.data(), blen, reinterpret_cast<int32_t*>(out) + block * E);
              } else {
                // Dequantized with the scale of the block's switch-wide exponent, which came with
                // this slot's previous packet: this rank's own shadow.
                const SlotShadow own = workers_[t]->engine().shadow(i);
                if (!own.valid || own.call_id != c || own.packet + L.batch != last) {
                  return InternalError("Recover: no exponent for block " + std::to_string(block) + " of all-reduce #" +
                                       std::to_string(c));
                }
                quant::DequantizeFromBE(scratch.data(), blen, quant::ScaleForExponent(own.exp0, N),
                                        reinterpret_cast<float*>(out) + block * E);
              }
            }
          }
          first_missing = last + L.batch;
        }
        for (uint64_t q = first_missing; q < L.total; q += L.batch) {
          if (q >= L.data_offset) missing.push_back(q - L.data_offset);
        }
      }
      // (3) What no rank completed: from the intact inputs, contiguous blocks at once.
      std::sort(missing.begin(), missing.end());
      for (size_t a = 0; a < missing.size();) {
        size_t b = a + 1;
        while (b < missing.size() && missing[b] == missing[b - 1] + 1) ++b;
        const size_t e0 = missing[a] * E, e1 = std::min<size_t>((missing[b - 1] + 1) * E, len);
        SWITCHML_RETURN_IF_ERROR(need_buffers());
        if (in != out) std::memcpy(out + 4 * e0, in + 4 * e0, 4 * (e1 - e0));
        SWITCHML_RETURN_IF_ERROR(host.AllReduce(out + 4 * e0, e1 - e0, type)
                                     .WithContext("recovery: all-reduce #" + std::to_string(c) + " on the host path"));
        report.elements_host_reduced += e1 - e0;
        a = b;
      }
    }
    outcome[c] = OkStatus();
  }

  // (4) The calls' handles report what recovery made of them.
  for (const auto& [id, status] : outcome) {
    auto it = by_id.find(id);
    if (it == by_id.end()) continue;
    CallState& cs = *it->second;
    std::lock_guard l(cs.mu);
    // A call this rank rejected keeps its own error.
    if (cs.rejected_at_submit && !status.ok()) continue;
    // Every call here has finished (step 0), failed (the context broke) and was counted in
    // calls_failed_ then: one finished OK now counts as recovered instead (GetStats).
    if (!cs.status.ok() && status.ok()) calls_recovered_.fetch_add(1, std::memory_order_relaxed);
    cs.status = status;
  }
  return report;
}

}  // namespace switchml::client
