#include "rendezvous/rendezvous.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "rendezvous/job_client.h"
#include "rendezvous/operator_auth.h"
#include "rendezvous/session_client.h"

namespace switchml::rendezvous {

namespace {

std::string Dotted(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
}

}  // namespace

std::string SilentRanks(const control::JobInfo& job, uint32_t self) {
  std::vector<const control::JobWorkerInfo*> silent;
  for (const control::JobWorkerInfo& w : job.workers) {
    if (w.idle_for >= kSilentRankThreshold) silent.push_back(&w);
  }
  if (silent.empty()) return "";
  std::sort(silent.begin(), silent.end(),
            [](const auto* a, const auto* b) { return a->idle_for > b->idle_for; });
  std::string out = "; the switch has had no datagram from ";
  for (size_t i = 0; i < silent.size(); ++i) {
    const control::JobWorkerInfo& w = *silent[i];
    if (i > 0) out += ", ";
    out += "rank " + std::to_string(w.rank) + " (" + Dotted(w.ipv4) +
           (w.rank == self ? ", this worker" : "") + ") for " +
           std::to_string(w.idle_for.count()) + " ms";
  }
  const bool only_self = silent.size() == 1 && silent[0]->rank == self;
  out += only_self ? ": this worker's datagrams do not reach it"
                   : ": it may have died, stalled, or not made this call";
  return out;
}

namespace {

// How long a timeout's explanation may wait for the controller (at most; rpc_timeout if less).
constexpr std::chrono::milliseconds kExplainDeadline{2000};

// The explanation when connecting to the controller at `address` failed with `why`.
control::FailureExplanation ControllerGone(const std::string& address, const Status& why) {
  return {"; the controller at " + address + " does not answer either (" + why.message() + ")",
          true};
}

// Job 0: the reference Session service (Bootstrap). The session fixes no packet size in
// advance (its workers agree on one among themselves), so the grant says 0 = any.
class SessionRendezvous final : public Rendezvous {
 public:
  SessionRendezvous(std::string address, TlsOptions tls, std::unique_ptr<SessionClient> client)
      : address_(std::move(address)), tls_(std::move(tls)), client_(std::move(client)) {}

  StatusOr<control::JobWorkerGrant> Join(const control::WorkerRegistration& reg) override {
    rank_ = reg.rank;
    SWITCHML_ASSIGN_OR_RETURN(control::SwitchInfo info, Bootstrap(*client_, reg));
    control::JobWorkerGrant grant;
    grant.switch_info = std::move(info);
    grant.job_id = control::kReferenceJobId;
    grant.num_workers = reg.num_workers;
    grant.elements_per_packet = 0;
    grant.state = control::JobState::kRunning;
    return grant;
  }
  // A timeout learns whether the controller still answers (a switch's own controller dies
  // with it: the switch is what failed). Job 0 has no token, and its per-rank state is the
  // operator's to read (ListJobs): only a worker whose environment holds the operator
  // credential (SWITCHML_OPERATOR_TOKEN, read when the explainer is made) also learns which
  // ranks the switch has not heard from (SilentRanks), as a JobService job's workers do with
  // their job's token. Without it, or if the controller refuses it, nothing more is said.
  FailureExplainer failure_explainer() const override {
    const char* env = std::getenv(kOperatorTokenEnv);
    return [address = address_, tls = tls_, rank = rank_, operator_token = std::string(env ? env : "")](
               const Status& s) -> control::FailureExplanation {
      if (s.code() != StatusCode::kDeadlineExceeded) return {};
      // Only an operator's worker asks more than "does the controller answer" (a Session
      // call carries no token: plaintext is fine for it).
      if (operator_token.empty()) {
        auto session = SessionClient::Connect(address, kExplainDeadline, tls);
        if (!session.ok()) return ControllerGone(address, session.status());
        return {};
      }
      auto client = JobClient::Connect(address, kExplainDeadline, tls);
      if (!client.ok()) {
        // Refused before connecting (the operator credential over plaintext): nothing learnt.
        if (client.status().code() == StatusCode::kFailedPrecondition) return {};
        return ControllerGone(address, client.status());
      }
      (*client)->set_operator_token(operator_token);
      auto list = (*client)->ListJobs();
      if (!list.ok() || !list->reference_session) return {};
      return {SilentRanks(*list->reference_session, rank), false};
    };
  }
  uint32_t job_id() const override { return control::kReferenceJobId; }
  const std::string& address() const override { return address_; }

 private:
  const std::string address_;
  const TlsOptions tls_;
  std::unique_ptr<SessionClient> client_;
  uint32_t rank_ = 0;  // this worker's, set by Join
};

// Any other job: the JobService (JobBootstrap), with the job's token.
class JobRendezvous final : public Rendezvous {
 public:
  JobRendezvous(std::string address, TlsOptions tls, uint32_t job_id, std::string token,
                std::chrono::milliseconds rpc_timeout, std::unique_ptr<JobClient> client)
      : address_(std::move(address)),
        tls_(std::move(tls)),
        job_id_(job_id),
        token_(std::move(token)),
        rpc_timeout_(rpc_timeout),
        client_(std::move(client)) {}

  StatusOr<control::JobWorkerGrant> Join(const control::WorkerRegistration& reg) override {
    control::JobRegistration jr;
    jr.job_id = job_id_;
    jr.token = token_;
    jr.worker = reg;
    rank_ = reg.rank;
    StatusOr<control::JobWorkerGrant> grant = JobBootstrap(*client_, jr);
    if (grant.ok()) placement_ = grant->placement;
    return grant;
  }

  // When a worker times out, asks the controller whether the job still exists, so that a job
  // the switch tore down (idle timeout, deleted, another rank gone) says so instead of only
  // "no result from switch"; for a live job, which ranks the switch has not heard from (a
  // rank that died or did not make the call: SilentRanks); and whether the switch is what
  // failed (control::FailureExplanation::switch_unreachable): the controller does not answer
  // (a switch's own controller dies with it), the job's switch forgot it (NOT_FOUND: it
  // restarted), the controller ended it because a switch of the job is lost (UNAVAILABLE), or
  // the controller re-placed the job on other switches since this worker registered (a newer
  // placement: the worker must register again; UNAVAILABLE).
  FailureExplainer failure_explainer() const override {
    return [address = address_, tls = tls_, job_id = job_id_, token = token_, rank = rank_,
            placement = placement_, deadline = std::min(rpc_timeout_, kExplainDeadline)](
               const Status& s) -> control::FailureExplanation {
      if (s.code() != StatusCode::kDeadlineExceeded) return {};
      auto client = JobClient::Connect(address, deadline, tls);
      if (!client.ok()) return ControllerGone(address, client.status());
      auto info = (*client)->GetJob(job_id, token);
      if (!info.ok()) {
        const StatusCode c = info.status().code();
        if (c == StatusCode::kUnavailable || c == StatusCode::kDeadlineExceeded) {
          return {"; " + info.status().message(), true};
        }
        // NOT_FOUND (the switch restarted or forgot it) and FAILED_PRECONDITION ("job J has
        // ended: <reason>") both explain the timeout; anything else says nothing about it.
        if (c != StatusCode::kNotFound && c != StatusCode::kFailedPrecondition) return {};
        return {"; the controller says: " + info.status().message(), c == StatusCode::kNotFound};
      }
      if (info->state != control::JobState::kEnded && placement != 0 &&
          info->assignment.placement > placement) {
        return {"; the controller re-placed job " + std::to_string(job_id) +
                    " on other switches (placement " + std::to_string(info->assignment.placement) +
                    "; this worker registered into placement " + std::to_string(placement) +
                    "): every worker must register again, with the same job id and token",
                true};
      }
      if (info->state != control::JobState::kEnded) return {SilentRanks(*info, rank), false};
      return {"; job " + std::to_string(job_id) + " has ended: " + info->end_reason,
              info->switch_lost};
    };
  }
  uint32_t job_id() const override { return job_id_; }
  const std::string& address() const override { return address_; }

 private:
  const std::string address_;
  const TlsOptions tls_;
  const uint32_t job_id_;
  const std::string token_;
  const std::chrono::milliseconds rpc_timeout_;
  std::unique_ptr<JobClient> client_;
  uint32_t rank_ = 0;  // this worker's, set by Join
  uint32_t placement_ = 0;  // the job's placement Join registered into (0: not a controller's)
};

}  // namespace

control::FailureExplanation Rendezvous::ExplainFailure(const Status& s) const {
  FailureExplainer explain = failure_explainer();
  return explain ? explain(s) : control::FailureExplanation{};
}

StatusOr<std::unique_ptr<Rendezvous>> ConnectRendezvous(const std::string& address,
                                                        uint32_t job_id, const std::string& token,
                                                        std::chrono::milliseconds rpc_timeout,
                                                        const TlsOptions& tls) {
  // A half-set identity must not fall back to the reference session (which a rank 0 would
  // reset), nor send a token nobody checks.
  if (job_id != control::kReferenceJobId && token.empty()) {
    return InvalidArgumentError("job_token must be set when job_id is (job_id=" +
                                std::to_string(job_id) + ")");
  }
  if (job_id == control::kReferenceJobId && !token.empty()) {
    return InvalidArgumentError("job_token is set but job_id is 0; give the job's id too");
  }
  if (job_id == control::kReferenceJobId) {
    SWITCHML_ASSIGN_OR_RETURN(auto client, SessionClient::Connect(address, rpc_timeout, tls));
    return std::unique_ptr<Rendezvous>(
        std::make_unique<SessionRendezvous>(address, tls, std::move(client)));
  }
  SWITCHML_ASSIGN_OR_RETURN(auto client, JobClient::Connect(address, rpc_timeout, tls));
  return std::unique_ptr<Rendezvous>(
      std::make_unique<JobRendezvous>(address, tls, job_id, token, rpc_timeout, std::move(client)));
}

}  // namespace switchml::rendezvous
