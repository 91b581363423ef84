// client/failover.cc — Failover (switchml/failover.h): the agreement that moves every rank of a
// job from the switch to the host path at the same call, then ContextImpl::Recover.
//
// Why one all-gather of one flag is enough: every rank calls Agree at the same sequence of
// points (its first switch failure, or a synchronisation point while on the switch path) and
// every Agree is one all-gather on the host path, so the k-th Agree of every rank meets the k-th
// of every other and all ranks see the same flags. A rank whose flag is 1 stopped submitting to
// the switch; a rank at a synchronisation point has submitted everything before it. Whoever sees
// a 1 recovers, all at the same all-gather, and Recover finishes exactly the calls every rank
// submitted (the others run on the host path: RunOnHost).
//
// The busy bit (probes): a rank with an all-reduce that may still fail sets it. Every rank sees
// the same flags, so last_agreement_idle() is the same on every rank, and when it is true every
// all-reduce called before this agreement has finished on every rank without a switch failure:
// none of them can start a recovery later. An integration uses that to skip probes (its
// reasoning, docs/reliability.md "Skipping the probe").
#include "switchml/failover.h"

#include <mutex>
#include <string>

#include "client/call_state.h"
#include "client/context_impl.h"
#include "switchml/context.h"

namespace switchml {

namespace {
constexpr int64_t kFailedFlag = 1;  // the flag's bits in the agreement's all-gather
constexpr int64_t kBusyFlag = 2;
}  // namespace

struct Failover::State {
  State(client::ContextImpl& c, HostPath& h) : context(c), host(h) {}
  client::ContextImpl& context;
  HostPath& host;
  mutable std::mutex mu;  // serialises Agree; guards the fields below
  bool recovered = false;
  bool last_idle = false;  // the last Agree found every flag 0
  RecoveryReport report;
};

Failover::Failover(Context& context, HostPath& host)
    : state_(std::make_unique<State>(client::ContextImpl::Of(context), host)) {}

Failover::~Failover() = default;

bool Failover::SwitchFailed(const Status& call_status) const {
  if (call_status.ok()) return false;
  return call_status.code() == StatusCode::kUnavailable || SwitchFailedBefore();
}

bool Failover::SwitchFailedBefore() const {
  client::ContextImpl& c = state_->context;
  return c.broken() && c.broken_status().code() == StatusCode::kUnavailable;
}

void Failover::InjectSwitchFailure(const std::string& why) {
  state_->context.Break(UnavailableError(why));
}

bool Failover::BrokenOtherwise() const {
  client::ContextImpl& c = state_->context;
  return c.broken() && c.broken_status().code() != StatusCode::kUnavailable;
}

StatusOr<std::optional<RecoveryReport>> Failover::Agree(bool failed, bool busy) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (s.recovered) {
    return FailedPreconditionError("Failover::Agree: this context already recovered onto the host path");
  }
  s.last_idle = false;
  // Bit 0: failed (a rank whose context broke because the switch failed says so even at a
  // probe); bit 1: busy (an all-reduce of this rank may still fail).
  const int64_t mine = (failed || SwitchFailedBefore() ? kFailedFlag : 0) | (busy ? kBusyFlag : 0);
  SWITCHML_ASSIGN_OR_RETURN(std::vector<int64_t> flags,
                            s.host.AllGather(std::span<const int64_t>(&mine, 1)));
  const uint32_t n = s.context.options().num_workers;
  if (flags.size() != n) {
    return InternalError("Failover::Agree: the host path's all-gather returned " + std::to_string(flags.size()) +
                         " values for " + std::to_string(n) + " workers");
  }
  std::vector<uint32_t> failed_ranks;
  bool any_busy = false;
  for (uint32_t r = 0; r < n; ++r) {
    if ((flags[r] & kFailedFlag) != 0) failed_ranks.push_back(r);
    any_busy = any_busy || (flags[r] & kBusyFlag) != 0;
  }
  if (failed_ranks.empty()) {
    s.last_idle = !any_busy;
    return std::optional<RecoveryReport>();
  }
  if (!s.context.broken()) {
    s.context.Break(UnavailableError("rank " + std::to_string(failed_ranks[0]) +
                                     " found the switch failed; every rank moves to the host path"));
  }
  SWITCHML_ASSIGN_OR_RETURN(RecoveryReport report, s.context.Recover(s.host));
  report.failed_ranks = std::move(failed_ranks);
  s.recovered = true;
  s.report = report;
  return std::optional<RecoveryReport>(std::move(report));
}

bool Failover::RunOnHost(const AllReduceHandle& handle) const {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  if (!s.recovered || !client::ContextImpl::HasState(handle)) return false;
  const client::CallState& call = client::ContextImpl::StateOf(handle);
  if (call.refused_broken) return true;
  // Also a call this rank rejected (non-finite input): the other ranks run it on the host path,
  // so this one must too, or every later host-path call would pair with the wrong one.
  return call.id >= s.report.end_call && call.id < s.report.submitted;
}

bool Failover::last_agreement_idle() const {
  std::lock_guard lock(state_->mu);
  return state_->last_idle;
}

bool Failover::recovered() const {
  std::lock_guard lock(state_->mu);
  return state_->recovered;
}

}  // namespace switchml
