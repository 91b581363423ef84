// switchml/rejoin.h — coming back to the switch after a failover (docs/reliability.md,
// "Surviving a failing switch", "Coming back").
//
// After Failover moved every rank of a job to the host path (switchml/failover.h), an
// integration keeps one SwitchRejoin per rank and calls Poll() at every call it runs on the
// host path (the same points on every rank). When the job can be served again, Poll returns a
// fresh Context on every rank at the same call: the caller runs that call and every later one
// on it (a clean call boundary: no rank on the switch while another is on the host path).
//
//   auto started = SwitchRejoin::Start(ctx->options(), host);   // right after the failover
//   if (!started.ok()) return started.status();                  // bad options
//   std::unique_ptr<SwitchRejoin> rejoin = std::move(*started);
//   ...
//   // at each host-path call, before running it:
//   StatusOr<std::unique_ptr<Context>> back = rejoin->Poll();
//   if (!back.ok()) return back.status();                      // the host path failed
//   if (*back) {   // every rank, at this same call
//     failover.reset();  // the old context's, before the context it refers to
//     rejoin.reset();    // done
//     ctx = std::move(*back);
//     failover = std::make_unique<Failover>(*ctx, host);   // the next failure is handled alike
//     /* this call and the later ones on the switch */
//   }
//   // else: run this call on the host path; log rejoin->last_attempt() when it changes.
//
// How: only rank 0 asks the controller, from a background thread, with exponential backoff
// (RejoinOptions) and a deadline per question, whether the job can be served: for job 0 (the
// reference session, whose controller lives in the switch process) whether the controller
// answers; for a JobService job whether the controller has a placement of it that waits for its
// workers (GetJob with the job's token: state waiting_for_workers — the job was re-placed on
// other switches, same id and token, with no registration from before the failure). The thread
// only sets a flag. Every poll_every_calls-th Poll, every rank all-gathers rank 0's flag on the
// host path (one int64 per rank; call counts, not clocks, decide, so every rank decides alike).
// When it is set, every rank registers again (Context::Create with the same options: job 0's
// rank 0 starts a new session; a JobService job's ranks register into its new placement), then
// the ranks all-gather whether each succeeded. If all did, Poll returns the new Context;
// otherwise every rank destroys its new context, Poll returns null, rank 0 goes back to asking
// with a longer backoff, and a later all-gather tries again (last_attempt() says what
// happened). A retry works: job 0's rank 0 starts a new session every time; a JobService job
// admits a rank again when it registers with the identical address and ports, and each rank's
// attempt binds the ports of its previous attempt (the ranks that succeeded in a failed attempt
// are registered, and nothing was sent on their contexts).
//
// Limits: a JobService job created on a switch directly (not through a standalone controller)
// is forgotten when its switch restarts and nothing re-creates it: such a job never comes back
// (rank 0 keeps asking, at max_backoff; last_check() says why). A job that the controller ended
// (switch_lost, deleted) never comes back either, nor one whose placement still runs (a
// standalone controller's outage alone made a call fail over): its switch's slot state is the
// old context's, and only a re-placement gives the job fresh shards.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "switchml/context.h"
#include "switchml/failover.h"
#include "switchml/options.h"
#include "switchml/status.h"

namespace switchml {

namespace client {
struct RejoinTestPeer;
}  // namespace client

struct RejoinOptions {
  // Rank 0's questions to the controller: the first min_backoff after Start, then after each
  // answer that the job cannot be served yet (and after each failed attempt) the wait doubles,
  // up to max_backoff. 0 < min_backoff <= max_backoff.
  std::chrono::milliseconds min_backoff{std::chrono::seconds(1)};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(30)};
  // Deadline of each question (connecting, then one RPC), > 0.
  std::chrono::milliseconds check_timeout{std::chrono::seconds(2)};
  // Every this many Poll calls (>= 1), one host-path all-gather of rank 0's flag.
  uint32_t poll_every_calls = 16;
};

// One rejoin attempt, as this rank saw it.
struct RejoinAttempt {
  uint64_t number = 0;   // 1, 2, ... in this SwitchRejoin
  uint64_t at_poll = 0;  // the Poll call (counted from 1) that ran it: the same on every rank
  bool succeeded = false;
  Status status;                      // this rank's registration (Context::Create)
  std::vector<uint32_t> failed_ranks;  // the ranks whose registration failed
  // One line for a log, e.g. "switch rejoin attempt 1 at host-path call 32 failed: rank(s) 1
  // could not register (this rank registered); every rank stays on the host path and retries".
  std::string description;
};

class SwitchRejoin {
 public:
  // Starts rank 0's questions (a thread; other ranks start none). `options` are those of the
  // context that failed (Context::options()); a new context is created with them. `host` must
  // outlive this object; its all-gather's deadline must exceed Context::Create's (about 3 x
  // options.rpc_timeout): a rank whose registration fails at once waits there for the others.
  // INVALID_ARGUMENT naming the field for bad options or rejoin options.
  static StatusOr<std::unique_ptr<SwitchRejoin>> Start(const Options& options, HostPath& host,
                                                       RejoinOptions rejoin = {});
  // Stops rank 0's thread (waits for a question in flight: at most about 2 x check_timeout).
  ~SwitchRejoin();
  SwitchRejoin(const SwitchRejoin&) = delete;
  SwitchRejoin& operator=(const SwitchRejoin&) = delete;

  // Every rank calls it at each call it runs on the host path, at the same points, before
  // running the call; from one thread at a time. Returns null (stay on the host path) or, on
  // every rank at the same Poll, the new Context: the caller runs this call and every later one
  // on it. Blocks only every poll_every_calls-th call, in one host-path all-gather, and when
  // the job can be served, in the registration (up to about 3 x rpc_timeout) and a second
  // all-gather. A failed attempt is not an error (last_attempt()). Errors: the host path's;
  // FAILED_PRECONDITION once a context was returned.
  StatusOr<std::unique_ptr<Context>> Poll();

  // Poll calls so far.
  uint64_t polls() const;
  // The last attempt (nullopt before the first).
  std::optional<RejoinAttempt> last_attempt() const;
  // Rank 0: the controller's last answer to the question ("" before the first; "ready" when
  // the job can be served, else why not). Other ranks: "".
  std::string last_check() const;

 private:
  friend struct client::RejoinTestPeer;
  struct State;
  explicit SwitchRejoin(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace switchml
