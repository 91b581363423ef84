// client/rejoin.cc — SwitchRejoin (switchml/rejoin.h): rank 0's background questions to the
// controller, and the agreement that moves every rank back to the switch at the same call.
//
// Why the ranks switch at the same call: every rank calls Poll at the same points, so the k-th
// all-gather of every rank meets the k-th of every other and all see rank 0's same flag; when
// it is set, all register and all-gather their outcomes, so all see the same outcomes and
// either all return the new context from this Poll or all destroy it. Rank 0's flag changes
// only between its Polls as far as the others can tell: they see it only through the
// all-gather.
#include "switchml/rejoin.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "client/context_create.h"
#include "client/rejoin_test_peer.h"
#include "control/switch_control.h"
#include "rendezvous/job_client.h"

namespace switchml {

namespace {

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string out;
  for (uint32_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

struct SwitchRejoin::State {
  State(const Options& o, HostPath& h, const RejoinOptions& r, client::RejoinHooks k)
      : options(o), host(h), rejoin(r), hooks(std::move(k)) {}

  const Options options;
  HostPath& host;
  const RejoinOptions rejoin;
  const client::RejoinHooks hooks;  // tests only (client/rejoin_test_peer.h)

  // The caller's thread (Poll) only.
  uint64_t polls = 0;
  uint64_t attempts = 0;
  bool done = false;                  // a context was returned
  std::vector<uint16_t> ports;        // the previous attempt's (empty: ephemeral)

  // Rank 0's thread and Poll.
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool ready = false;                 // the job can be served; the thread waits until reset
  bool attempted = false;             // an attempt ran (and failed): see Check
  uint32_t attempt_placement = 0;     // the placement the last ready answer saw
  std::string last_check;
  std::optional<RejoinAttempt> last_attempt;
  std::thread thread;

  // Whether the job can be served now; "" if so, otherwise why not.
  std::string Check(uint32_t* placement) {
    if (hooks.check) return hooks.check();
    auto client = rendezvous::JobClient::Connect(options.controller_address, rejoin.check_timeout,
                                                 options.tls);
    if (!client.ok()) return "the controller does not answer: " + client.status().message();
    if (options.job_id == control::kReferenceJobId) return "";  // its controller is the switch's
    auto info = (*client)->GetJob(options.job_id, options.job_token);
    if (!info.ok()) return info.status().message();
    *placement = info->assignment.placement;
    bool same_placement_filled = false;
    {
      std::lock_guard lock(mu);
      // A failed attempt may have completed the registrations (the job runs; nothing was sent
      // on its contexts): the same placement can be tried again.
      same_placement_filled = attempted && info->assignment.placement == attempt_placement;
    }
    if (info->state == control::JobState::kWaitingForWorkers) return "";
    if (info->state == control::JobState::kRunning && same_placement_filled) return "";
    if (info->state == control::JobState::kEnded) {
      return "job " + std::to_string(options.job_id) + " has ended: " + info->end_reason;
    }
    return "job " + std::to_string(options.job_id) + " is still " +
           std::string(control::JobStateName(info->state)) + " in placement " +
           std::to_string(info->assignment.placement) +
           " (the one that failed): it comes back when the controller re-places it";
  }

  void Run() {
    std::chrono::milliseconds backoff = rejoin.min_backoff;
    std::unique_lock lock(mu);
    while (!stop) {
      if (cv.wait_for(lock, backoff, [&] { return stop; })) break;
      lock.unlock();
      uint32_t placement = 0;
      std::string why = Check(&placement);
      lock.lock();
      if (stop) break;
      last_check = why.empty() ? "ready" : why;
      if (why.empty()) {
        ready = true;
        attempt_placement = placement;
        cv.wait(lock, [&] { return stop || !ready; });  // Poll resets it after a failed attempt
      }
      backoff = backoff > rejoin.max_backoff / 2 ? rejoin.max_backoff : backoff * 2;
    }
  }
};

SwitchRejoin::SwitchRejoin(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<SwitchRejoin>> SwitchRejoin::Start(const Options& options, HostPath& host,
                                                            RejoinOptions rejoin) {
  return client::RejoinTestPeer::Start(options, host, rejoin, {});
}

StatusOr<std::unique_ptr<SwitchRejoin>> client::RejoinTestPeer::Start(const Options& given,
                                                                      HostPath& host,
                                                                      RejoinOptions rejoin,
                                                                      RejoinHooks hooks) {
  SWITCHML_RETURN_IF_ERROR(given.Validate());
  SWITCHML_ASSIGN_OR_RETURN(const Options options, given.Resolved());
  if (rejoin.min_backoff.count() <= 0) {
    return InvalidArgumentError("RejoinOptions::min_backoff must be > 0, got " + Ms(rejoin.min_backoff));
  }
  if (rejoin.max_backoff < rejoin.min_backoff) {
    return InvalidArgumentError("RejoinOptions::max_backoff (" + Ms(rejoin.max_backoff) +
                                ") must be >= min_backoff (" + Ms(rejoin.min_backoff) + ")");
  }
  if (rejoin.check_timeout.count() <= 0) {
    return InvalidArgumentError("RejoinOptions::check_timeout must be > 0, got " + Ms(rejoin.check_timeout));
  }
  if (rejoin.poll_every_calls == 0) {
    return InvalidArgumentError("RejoinOptions::poll_every_calls must be >= 1, got 0");
  }
  auto state = std::make_unique<SwitchRejoin::State>(options, host, rejoin, std::move(hooks));
  if (options.rank == 0) {
    SwitchRejoin::State* s = state.get();
    s->thread = std::thread([s] { s->Run(); });
  }
  return std::unique_ptr<SwitchRejoin>(new SwitchRejoin(std::move(state)));
}

SwitchRejoin::~SwitchRejoin() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  if (s.thread.joinable()) s.thread.join();
}

StatusOr<std::unique_ptr<Context>> SwitchRejoin::Poll() {
  State& s = *state_;
  if (s.done) {
    return FailedPreconditionError("SwitchRejoin::Poll: this rejoin already returned a context");
  }
  const uint64_t poll = ++s.polls;
  if (poll % s.rejoin.poll_every_calls != 0) return std::unique_ptr<Context>();
  const uint32_t n = s.options.num_workers;
  auto gather = [&](int64_t mine, const char* what) -> StatusOr<std::vector<int64_t>> {
    SWITCHML_ASSIGN_OR_RETURN(std::vector<int64_t> all,
                              s.host.AllGather(std::span<const int64_t>(&mine, 1)));
    if (all.size() != n) {
      return InternalError(std::string("SwitchRejoin::Poll: the host path's all-gather of ") + what +
                           " returned " + std::to_string(all.size()) + " values for " +
                           std::to_string(n) + " workers");
    }
    return all;
  };
  int64_t ready = 0;
  if (s.options.rank == 0) {
    std::lock_guard lock(s.mu);
    ready = s.ready ? 1 : 0;
  }
  SWITCHML_ASSIGN_OR_RETURN(std::vector<int64_t> flags, gather(ready, "rank 0's readiness"));
  if (flags[0] == 0) return std::unique_ptr<Context>();

  // Every rank registers again, then all learn whether all did.
  RejoinAttempt attempt;
  attempt.number = ++s.attempts;
  attempt.at_poll = poll;
  Options options = s.options;
  if (s.hooks.options_for_attempt) s.hooks.options_for_attempt(attempt.number, options);
  StatusOr<std::unique_ptr<Context>> created = s.hooks.create ? s.hooks.create(options, s.ports)
                                                              : client::CreateContextOnPorts(options, s.ports);
  attempt.status = created.status();
  SWITCHML_ASSIGN_OR_RETURN(std::vector<int64_t> outcomes, gather(created.ok() ? 1 : 0, "registration outcomes"));
  for (uint32_t r = 0; r < n; ++r) {
    if (outcomes[r] == 0) attempt.failed_ranks.push_back(r);
  }
  attempt.succeeded = attempt.failed_ranks.empty();
  const std::string head = "switch rejoin attempt " + std::to_string(attempt.number) +
                           " at host-path call " + std::to_string(poll);
  if (attempt.succeeded) {
    attempt.description = head + ": every rank registered again; from this call on, the switch";
  } else {
    attempt.description = head + " failed: rank(s) " + RankList(attempt.failed_ranks) +
                          " could not register (this rank: " +
                          (created.ok() ? std::string("registered") : created.status().ToString()) +
                          "); every rank stays on the host path and retries";
    created = std::unique_ptr<Context>();  // destroyed: its registration is not used
  }
  {
    std::lock_guard lock(s.mu);
    s.last_attempt = attempt;
    if (attempt.succeeded) {
      s.stop = true;
    } else {
      s.attempted = true;
      s.ready = false;  // rank 0's thread asks again, after a longer backoff
    }
  }
  s.cv.notify_all();
  if (!attempt.succeeded) return std::unique_ptr<Context>();
  s.done = true;
  return created;
}

uint64_t SwitchRejoin::polls() const { return state_->polls; }

std::optional<RejoinAttempt> SwitchRejoin::last_attempt() const {
  std::lock_guard lock(state_->mu);
  return state_->last_attempt;
}

std::string SwitchRejoin::last_check() const {
  std::lock_guard lock(state_->mu);
  return state_->last_check;
}

}  // namespace switchml
