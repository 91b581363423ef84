// integrations/pytorch/failover.cc — the backend's side of surviving a failing switch
// (switchml/failover.h; docs/reliability.md, "Surviving a failing switch").
//
// Design. Every SwitchML handle's completion callback first goes through SettleHandle. A handle
// that failed because the switch is gone (Failover::SwitchFailed) is parked: its part of the
// call stays open, the group's path becomes kRecovering (no SwitchML call starts any more; they
// wait in the queue), and the recovery thread runs the agreement (Failover::Agree(true)) on the
// host group. A rank that saw no failure joins at its next probe (ProbeSwitch: before every
// collective it hands to Gloo, at barriers, at destruction, unless no SwitchML all-reduce was
// called since an agreement found every rank idle: see ProbeSwitch), which runs Agree(false) on
// the caller's thread. Whichever thread's agreement found a failure then calls FinishRecovery: it
// waits until every SwitchML handle's callback has run (so every failed one is parked), settles
// the parked handles in call order (OK: the recovery finished it; RunOnHost: a Gloo all-reduce
// of the handle's buffer on the host group, whose input is intact; else its error), switches
// the path to kHost and starts the calls that waited. From then on SubmitJob issues a host-group
// all-reduce instead of a SwitchML call, still in call order and under mu_, so every rank issues
// the same host collectives in the same order; memory ordering is the queue's (direct calls are
// no longer ordered by the library, so ConflictsLocked orders them too).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "backend.h"

namespace switchml::pytorch {

namespace {

// The host path of switchml::Failover over a c10d Gloo group: blocking collectives, each bounded
// by the group timeout (Gloo's own deadline).
class GlooHostPath : public switchml::HostPath {
 public:
  GlooHostPath(c10::intrusive_ptr<c10d::Backend> host, int size, const std::atomic<int64_t>& timeout_ms)
      : host_(std::move(host)), size_(size), timeout_ms_(timeout_ms) {}

  switchml::StatusOr<std::vector<int64_t>> AllGather(std::span<const int64_t> mine) override {
    std::vector<at::Tensor> in = {at::empty({int64_t(mine.size())}, at::kLong)};
    std::copy(mine.begin(), mine.end(), in[0].data_ptr<int64_t>());
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(at::empty({int64_t(mine.size())}, at::kLong));
    SWITCHML_RETURN_IF_ERROR(Run("all-gather", [&] {
      c10d::AllgatherOptions opts;
      opts.timeout = timeout_;
      return host_->allgather(out, in, opts);
    }));
    std::vector<int64_t> all;
    all.reserve(mine.size() * size_);
    for (const at::Tensor& t : out[0]) all.insert(all.end(), t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    return all;
  }

  switchml::Status Broadcast(void* data, size_t bytes, uint32_t root) override {
    std::vector<at::Tensor> t = {at::from_blob(data, {int64_t(bytes)}, at::kByte)};
    return Run("broadcast", [&] {
      c10d::BroadcastOptions opts;
      opts.rootRank = int64_t(root);
      opts.timeout = timeout_;
      return host_->broadcast(t, opts);
    });
  }

  switchml::Status AllReduce(void* data, size_t n, switchml::DataType type) override {
    std::vector<at::Tensor> t = {
        at::from_blob(data, {int64_t(n)}, type == switchml::DataType::kInt32 ? at::kInt : at::kFloat)};
    return Run("all-reduce", [&] {
      c10d::AllreduceOptions opts;
      opts.timeout = timeout_;
      return host_->allreduce(t, opts);
    });
  }

 private:
  template <typename F>
  switchml::Status Run(const char* what, F&& issue) {
    timeout_ = std::chrono::milliseconds(timeout_ms_.load());
    try {
      at::NoGradGuard no_grad;
      c10::intrusive_ptr<c10d::Work> w = issue();
      w->wait(timeout_);
      return switchml::OkStatus();
    } catch (const std::exception& e) {
      return switchml::UnavailableError(std::string("the host path's ") + what + " (Gloo) failed: " + e.what());
    }
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  int size_;
  const std::atomic<int64_t>& timeout_ms_;
  std::chrono::milliseconds timeout_{0};  // this collective's (set by Run)
};

}  // namespace

std::unique_ptr<switchml::HostPath> MakeGlooHostPath(c10::intrusive_ptr<c10d::Backend> host, int size,
                                                     const std::atomic<int64_t>& timeout_ms) {
  return std::make_unique<GlooHostPath>(std::move(host), size, timeout_ms);
}

bool SwitchMLBackend::SettleHandle(const std::shared_ptr<Call>& c, size_t index, const switchml::Status& s) {
  std::lock_guard lock(mu_);
  --handles_unsettled_;
  progress_cv_.notify_all();
  if (s.ok() || !failover_ || closing_ || path_ == Path::kFailed || !failover_->SwitchFailed(s)) return false;
  parked_.push_back(Parked{c, index});
  if (path_ == Path::kSwitch) {
    path_ = Path::kRecovering;
    if (!recovery_thread_.joinable()) recovery_thread_ = std::thread([this] { RecoveryThread(); });
  }
  recovery_cv_.notify_all();
  return true;
}

void SwitchMLBackend::RecoveryThread() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      recovery_cv_.wait(lock, [&] { return recovery_stop_ || (path_ == Path::kRecovering && !parked_.empty()); });
      // A pending recovery runs even when stopping: the parked calls need it (and the other
      // ranks wait for this one's agreement).
      if (!(path_ == Path::kRecovering && !parked_.empty())) return;
    }
    std::lock_guard host_lock(host_mu_);
    if (failover_->recovered()) {
      // A probe on another thread recovered; it settled what was parked then. Settle the rest.
      FinishRecovery(std::optional<switchml::RecoveryReport>());
    } else {
      failover_agreements_.fetch_add(1, std::memory_order_relaxed);
      FinishRecovery(failover_->Agree(true));
    }
  }
}

// Skipping the probe. A probe is a host collective, so every rank must make the same decision
// at the same point of the program; the decision below depends only on switch_calls_ (the
// SwitchML all-reduces the program called before this point: the same on every rank of a
// correct program, which calls the same collectives in the same order) and on calls_at_idle_
// (switch_calls_ at the last agreement that found every rank idle: its outcome comes from the
// all-gathered flags, the same on every rank, and the ranks reach it at the same point). Never
// on timing or on what this rank saw. So every rank probes at the same points, and the k-th
// agreement of every rank still meets the k-th of every other.
//
// Why skipping is safe: the probe exists so that a rank that saw no failure joins the
// agreement of a rank that did (Agree(true) on its recovery thread) before it waits for that
// rank in a collective. A rank is idle at a probe when it has no SwitchML handle unsettled and
// no SwitchML call queued and not started, and its context did not break because the switch
// failed. When an agreement found every rank idle, every all-reduce called before it had
// finished on every rank without a switch failure, so none of them can start a recovery. A
// recovery can then only start from an all-reduce called after it, and every rank counts that
// call: at the next synchronisation point every rank probes again (a rank already recovering
// takes part through its recovery's agreement instead, as without the skip), so the failure
// reaches every rank there, as it would without the skip. What is deferred: a context broken
// while no call is in flight (only InjectSwitchFailure does that) is seen at the first
// agreement after the next SwitchML all-reduce, not at the next probe point. If some rank was
// busy at an agreement (an async all-reduce still running), the next point probes again.
void SwitchMLBackend::ProbeSwitch(const char* where) {
  if (!failover_) return;
  std::lock_guard host_lock(host_mu_);  // failover_ is replaced only under it (RejoinAtBarrier)
  if (failover_->BrokenOtherwise()) return;
  bool busy = false;
  uint64_t calls = 0;
  {
    std::lock_guard lock(mu_);
    if (path_ != Path::kSwitch) return;  // recovering (its own agreement comes), or done
    calls = switch_calls_;
    if (calls == calls_at_idle_) {
      failover_probes_skipped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    busy = handles_unsettled_ != 0 ||
           std::any_of(queue_.begin(), queue_.end(), [](const std::shared_ptr<Call>& c) { return !c->started; });
  }
  failover_agreements_.fetch_add(1, std::memory_order_relaxed);
  auto agreed = failover_->Agree(false, busy);
  if (agreed.ok() && !agreed->has_value()) {  // every rank is fine
    if (failover_->last_agreement_idle()) {
      std::lock_guard lock(mu_);
      calls_at_idle_ = calls;  // not switch_calls_: a call made meanwhile still needs a probe
    }
    return;
  }
  FinishRecovery(agreed);
  std::lock_guard lock(mu_);
  TORCH_CHECK(path_ != Path::kFailed, "switchml: ", where, ": ", failover_error_);
}

void SwitchMLBackend::FinishRecovery(
    const switchml::StatusOr<std::optional<switchml::RecoveryReport>>& agreed) {
  struct Settled {
    std::shared_ptr<Call> call;
    std::exception_ptr error;
    c10::intrusive_ptr<c10d::Work> host_work;  // re-run on the host path
  };
  std::vector<Settled> settled;
  std::vector<std::shared_ptr<Call>> started;
  std::string log;
  const int rank = getRank();
  {
    std::unique_lock lock(mu_);
    // Every SwitchML handle's callback has run (the context's calls have all stopped: the
    // agreement waited for them), so every one that failed is parked.
    const bool all_in = progress_cv_.wait_for(lock, timeout_, [&] { return handles_unsettled_ == 0; });
    const bool first = path_ == Path::kSwitch || path_ == Path::kRecovering;
    if (first && (!agreed.ok() || !all_in)) {
      path_ = Path::kFailed;
      failover_error_ =
          "the switch failed and the recovery onto the host path failed: " +
          (agreed.ok() ? std::string("not every SwitchML call's callback ran within the group timeout")
                       : agreed.status().ToString()) +
          "; this group's all-reduces fail from now on: recreate the process group";
      log = "switchml: rank " + std::to_string(rank) + ": " + failover_error_ + "\n";
    } else if (first && agreed->has_value()) {
      const switchml::RecoveryReport& r = **agreed;
      path_ = Path::kHost;
      ++path_epoch_;
      failover_moves_.fetch_add(1, std::memory_order_relaxed);
      std::string who;
      for (uint32_t f : r.failed_ranks) who += (who.empty() ? "" : ", ") + std::to_string(f);
      const std::string finished =
          r.first_call == r.end_call
              ? std::string("no all-reduce was in flight on every rank")
              : "all-reduce calls [" + std::to_string(r.first_call) + ", " + std::to_string(r.end_call) +
                    ") finished by the recovery (" + std::to_string(r.packets_broadcast) +
                    " packets from shadow copies, " + std::to_string(r.elements_host_reduced) +
                    " elements on the host path)";
      log = "switchml: rank " + std::to_string(rank) + ": the switch failed (seen first by rank(s) " + who +
            "): " + finished + "; every later all-reduce runs on the host path (Gloo); " +
            "stats()[\"failover_host_calls\"] counts them; printed once\n";
    }
    // The parked handles in call order (queue order, then handle order within a call).
    auto position = [&](const Parked& p) {
      return std::find(queue_.begin(), queue_.end(), p.call) - queue_.begin();
    };
    std::stable_sort(parked_.begin(), parked_.end(), [&](const Parked& a, const Parked& b) {
      const auto pa = position(a), pb = position(b);
      return pa != pb ? pa < pb : a.index < b.index;
    });
    for (const Parked& p : parked_) {
      const switchml::AllReduceHandle& h = p.call->handles[p.index];
      const switchml::Status st = h.status();
      Settled s{p.call, nullptr, {}};
      if (path_ == Path::kFailed) {
        s.error = std::make_exception_ptr(std::runtime_error("switchml: " + p.call->job_names[p.index] +
                                                             " failed on rank " + std::to_string(rank) + ": " +
                                                             st.ToString() + "; " + failover_error_));
      } else if (st.ok()) {
        failover_recovered_calls_.fetch_add(1, std::memory_order_relaxed);
      } else if (failover_->RunOnHost(h)) {
        std::vector<at::Tensor> t = {p.call->job_buffers[p.index]};
        at::NoGradGuard no_grad;
        try {
          s.host_work = host_->allreduce(t);
          failover_host_calls_.fetch_add(1, std::memory_order_relaxed);
        } catch (...) {
          s.error = std::current_exception();
        }
      } else {
        s.error = std::make_exception_ptr(std::runtime_error("switchml: " + p.call->job_names[p.index] +
                                                             " failed on rank " + std::to_string(rank) + ": " +
                                                             st.ToString()));
      }
      settled.push_back(std::move(s));
    }
    parked_.clear();
    StartReadyLocked(started);  // what waited for the recovery (host path, or failing)
  }
  progress_cv_.notify_all();
  if (!log.empty()) std::fputs(log.c_str(), stderr);
  if (rejoin_enabled_ && !rejoin_ && failover_->recovered()) {
    // Coming back: rank 0 starts asking the controller (host_mu_ is held: RejoinAtBarrier waits).
    auto rejoin = switchml::SwitchRejoin::Start(context_->options(), *host_path_, rejoin_options_);
    if (rejoin.ok()) {
      rejoin_ = std::move(*rejoin);
    } else {
      std::fprintf(stderr, "switchml: rank %d: cannot come back to the switch later: %s\n", rank,
                   rejoin.status().ToString().c_str());
    }
  }
  // Outside mu_: a part may complete its call (CompleteCall takes mu_).
  for (Settled& s : settled) {
    if (s.host_work) {
      s.host_work->getFuture()->addCallback([this, c = s.call](c10::ivalue::Future& f) {
        if (f.hasError()) {
          std::lock_guard lock(c->part_mu);
          if (!c->part_error) c->part_error = f.exception_ptr();
        }
        PartDone(c);
      });
      continue;
    }
    if (s.error) {
      std::lock_guard lock(s.call->part_mu);
      if (!s.call->part_error) s.call->part_error = s.error;
    }
    PartDone(s.call);
  }
  for (auto& c : started) Arm(c);
}

void SwitchMLBackend::ProbeAtExit() {
  if (!failover_) return;
  std::call_once(exit_probe_, [&] {
    {
      // A call whose work the caller saw complete may still be finishing (completing_): wait for
      // that; calls still pending are cancelled instead (no agreement).
      std::unique_lock lock(mu_);
      progress_cv_.wait_for(lock, timeout_, [&] { return !queue_.empty() || completing_ == 0; });
      if (!queue_.empty() || completing_ != 0) return;
    }
    // Bounded: a rank that failed enters its agreement within its call timeout (plus the
    // controller query); one that died never does.
    const auto call_timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(context_->options().call_timeout).count();
    host_timeout_ms_ = std::min<int64_t>(timeout_.count(), 2 * call_timeout + 30000);
    try {
      ProbeSwitch("destroying the process group");
    } catch (const c10::Error& e) {
      std::fprintf(stderr, "%s (rank %d)\n", e.what_without_backtrace(), getRank());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "switchml: rank %d: %s\n", getRank(), e.what());
    }
  });
}

void SwitchMLBackend::InjectSwitchFailure() {
  TORCH_CHECK(failover_ != nullptr, "switchml: _inject_switch_failure needs the failover (SWITCHML_FAILOVER=1)");
  failover_->InjectSwitchFailure("injected switch failure on rank " + std::to_string(getRank()) +
                                 " (_inject_switch_failure)");
}

switchml::Stats SwitchMLBackend::GetStats() const {
  std::lock_guard lock(mu_);  // a return to the switch replaces the context
  return context_->GetStats();
}

void SwitchMLBackend::RejoinAtBarrier() {
  if (!failover_enabled_ || !rejoin_enabled_) return;
  {
    // barrier() drained the queue and ran its agreement: a recovery it found is finished, and
    // the other ranks are at this same barrier with nothing in flight on the host group either.
    std::lock_guard lock(mu_);
    if (path_ != Path::kHost) return;
  }
  std::lock_guard host_lock(host_mu_);
  if (!rejoin_) return;
  const int rank = getRank();
  auto back = rejoin_->Poll();
  if (!back.ok()) {
    // The host path itself failed: this call and the later ones will say so; stop polling.
    std::fprintf(stderr, "switchml: rank %d: stopped trying to come back to the switch: %s\n", rank,
                 back.status().ToString().c_str());
    rejoin_.reset();
    return;
  }
  const auto attempt = rejoin_->last_attempt();
  if (attempt && attempt->number != rejoin_logged_attempt_) {
    rejoin_logged_attempt_ = attempt->number;
    rejoin_attempts_.fetch_add(1, std::memory_order_relaxed);
    if (!attempt->succeeded) std::fprintf(stderr, "switchml: rank %d: %s\n", rank, attempt->description.c_str());
  }
  if (!*back) return;
  // Every rank has a new context now, at this barrier: the later all-reduces go to the switch.
  // (Nothing runs on the host path: barrier() drained the queue; the path epoch still orders a
  // call after any that did.)
  std::unique_ptr<switchml::Context> old_context;
  std::unique_ptr<switchml::Failover> old_failover;
  const uint64_t polls = rejoin_->polls();
  {
    std::lock_guard lock(mu_);
    old_failover = std::move(failover_);
    old_context = std::move(context_);
    context_ = std::move(*back);
    failover_ = std::make_unique<switchml::Failover>(*context_, *host_path_);
    path_ = Path::kSwitch;
    ++path_epoch_;
    // Nothing is in flight on the new context, and every rank is at this same barrier with the
    // same switch_calls_: the probes start over from an idle state (ProbeSwitch).
    calls_at_idle_ = switch_calls_;
  }
  failover_returns_.fetch_add(1, std::memory_order_relaxed);
  rejoin_.reset();  // stops rank 0's questions
  old_failover.reset();
  old_context.reset();  // nothing runs on it: its calls were settled by the recovery
  std::fprintf(stderr,
               "switchml: rank %d: back on the switch after %llu all-reduce(s) on the host path (%s); "
               "stats()[\"failover_returns\"] counts the returns; printed once per return\n",
               rank, static_cast<unsigned long long>(polls),
               attempt ? attempt->description.c_str() : "rejoined");
}

void SwitchMLBackend::StopRecoveryThread() {
  {
    std::lock_guard lock(mu_);
    recovery_stop_ = true;
  }
  recovery_cv_.notify_all();
  if (recovery_thread_.joinable()) recovery_thread_.join();
}

std::vector<std::pair<std::string, uint64_t>> SwitchMLBackend::FailoverCounts() const {
  uint64_t on_host = 0;
  {
    std::lock_guard lock(mu_);
    on_host = path_ == Path::kHost ? 1 : 0;
  }
  return {{"failover", failover_moves_.load()},
          {"failover_recovered_calls", failover_recovered_calls_.load()},
          {"failover_host_calls", failover_host_calls_.load()},
          {"failover_returns", failover_returns_.load()},
          {"failover_rejoin_attempts", rejoin_attempts_.load()},
          {"failover_agreements", failover_agreements_.load()},
          {"failover_probes_skipped", failover_probes_skipped_.load()},
          {"on_host_path", on_host}};
}

}  // namespace switchml::pytorch
