// rendezvous/rendezvous.h — how a worker joins its job through the controller: one interface
// for job 0 (the reference Session service) and for the JobService's jobs.
//
//   auto r = ConnectRendezvous("10.0.0.1:50099", job_id, job_token, std::chrono::seconds(5));
//   if (!r.ok()) return r.status();   // InvalidArgument (half-set identity), Unavailable
//   StatusOr<JobWorkerGrant> grant = (*r)->Join(reg);   // every rank registered after it
//   // grant->switch_info: where to send (routes per worker thread); grant->elements_per_packet:
//   // the job's packet size, 0 = any (job 0 agrees on it among its workers, not in advance).
//   ContextImpl::FailureExplainer explain = (*r)->failure_explainer();   // for timeouts later
//
// Job 0 (job_id 0, no token) is the reference session: Join runs the reference client's
// set-up (session_client.h Bootstrap: Broadcast of the session id, UdpSession, Barriers), so
// a reference controller serves it. Any other job_id joins that job of the JobService with its
// token (job_client.h JobBootstrap: RegisterWorker, then the job's Barrier). Errors and
// deadlines are those of the client underneath (every RPC within rpc_timeout; a job's errors
// name the job: "job J rank R: registration: ...").
//
// Thread-safety: Join is called once, from one thread; failure_explainer() may be called at any
// time and its function from any thread, also after the Rendezvous is gone.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/switch_control.h"
#include "switchml/options.h"
#include "switchml/status.h"

namespace switchml::rendezvous {

class Rendezvous {
 public:
  // Explains a worker's failure (a Status from an all-reduce) from the controller's point of
  // view: a suffix for its message ("; job 3 has ended: deleted through the controller", or
  // "" when there is nothing to add) and whether the switch is what failed
  // (control::FailureExplanation).
  using FailureExplainer = std::function<control::FailureExplanation(const Status&)>;

  virtual ~Rendezvous() = default;

  // Registers this worker (every field of `reg`, including the agreed parameters) and waits
  // until every rank of the job has. The grant's switch_info says where this worker's threads
  // send; job_id and num_workers are the job's; elements_per_packet is the job's packet size,
  // 0 when the job does not fix one in advance (job 0); state is kRunning. Blocks up to a few
  // rpc_timeouts (session_client.h / job_client.h say how many).
  virtual StatusOr<control::JobWorkerGrant> Join(const control::WorkerRegistration& reg) = 0;

  // A function that asks the controller, when a worker's operation times out
  // (DeadlineExceeded), whether the job still exists and why not; it opens its own connection
  // (deadline min(rpc_timeout, 2 s)) and holds none in between, so it may outlive this object.
  // Job 0's asks only whether the controller answers, and, when this process's environment
  // holds the operator credential (SWITCHML_OPERATOR_TOKEN), which ranks the switch has not
  // heard from (its per-rank state is the operator's to read: ListJobs).
  virtual FailureExplainer failure_explainer() const = 0;

  // The job this rendezvous joins (0 = the reference session).
  virtual uint32_t job_id() const = 0;
  // The controller's address as given.
  virtual const std::string& address() const = 0;

  // failure_explainer() applied to `s` (nothing when it is empty).
  control::FailureExplanation ExplainFailure(const Status& s) const;
};

// A rank the switch has not heard from for this long is named in a timeout's explanation: well
// above the client's retransmission timeout (max_rto, 320 ms by default), so a rank that is
// waiting for the others and retransmitting is never named, and well below call_timeout, so a
// rank that stopped sending when the call stalled is.
inline constexpr std::chrono::milliseconds kSilentRankThreshold{1000};

// "; the switch has had no datagram from rank 2 (10.0.0.3) for 10310 ms: it may have died,
// stalled, or not made this call" for the ranks of a live job whose idle_for is at least
// kSilentRankThreshold (longest first; `self`, this worker's rank, marked as such); "" when
// there are none. What a timeout's explanation appends for a job that is still live.
std::string SilentRanks(const control::JobInfo& job, uint32_t self);

// Connects to the controller at `address` for job `job_id`: the reference session for job 0
// (token must be empty), the JobService otherwise (token must be set). Errors: InvalidArgument
// ("job_token must be set when job_id is (job_id=J)", "job_token is set but job_id is 0; ...",
// empty address, rpc_timeout <= 0, TLS files), FailedPrecondition (a token over plaintext to
// an address not on this host without tls.insecure; rendezvous/tls.h), Unavailable (no
// connection within rpc_timeout). Every later connection (the failure explainer's) uses `tls`
// too. Blocks.
StatusOr<std::unique_ptr<Rendezvous>> ConnectRendezvous(const std::string& address,
                                                        uint32_t job_id, const std::string& token,
                                                        std::chrono::milliseconds rpc_timeout,
                                                        const TlsOptions& tls = {});

}  // namespace switchml::rendezvous
