// controller/session_service.h — the controller's gRPC server (Session + Sync services).
//
// Serves the reference controller's API (switchml.proto, docs/protocol.md#services-and-messages) for the software switch:
//
//   MySwitch sw;                                   // implements control::SwitchControl
//   ServerOptions opts;                            // listen_address "0.0.0.0:50099"
//   opts.listen_address = "127.0.0.1:0";           // port 0 = pick a free port
//   auto server = ControllerServer::Start(opts, &sw);
//   if (!server.ok()) { std::cerr << server.status(); return 1; }
//   std::cout << "controller on port " << (*server)->port() << "\n";
//   ...
//   (*server)->Shutdown();                         // also done by the destructor
//
// A thin compatibility adapter over the job machinery (docs/design.md, "Session setup"):
// UdpSession is one registration into the switch's job 0, the reference session
// (SwitchControl::RegisterJobWorker with job_id 0 and no token), and Barrier/Broadcast use
// job 0's entry of the JobSyncTable (job_sync_table.h) that also holds every service job's
// sync state, with the reference semantics (num_workers from each request, broadcasts keyed by
// arrival, no token).
//
// RPCs:
//   UdpSession  → SwitchControl::RegisterJobWorker into job 0 with a WorkerRegistration built
//                 from the request
//                 (session_id, rank, num_workers, mac, ipv4, udp_ports, and the agreed
//                 parameters protocol_version, num_worker_threads, window_packets,
//                 elements_per_packet, which every worker must share). A switch error is
//                 returned as a gRPC status with the same canonical code and the switch's message
//                 (fixes docs/protocol.md#d5-session-failure-answered-with-success: the
//                 reference answered zeros with OK). On success the
//                 reply echoes session_id and carries the grant's SwitchInfo: mac, ipv4 and the
//                 extension fields udp_port, num_slots, max_workers. udp_ports entries must be
//                 in [1, 65535] (INVALID_ARGUMENT otherwise). packet_size is ignored.
//                 A registration the switch refuses with FAILED_PRECONDITION (the worker
//                 disagrees with the session, e.g. "rank 1 registered num_worker_threads=2,
//                 but rank 0 registered num_worker_threads=1 for the session; ...") also fails
//                 every Barrier call that is waiting and every later one with
//                 FAILED_PRECONDITION "Barrier: the session cannot complete: a registration
//                 was refused: <the refusal>", so the ranks already registered learn why
//                 instead of waiting for their deadline; this lasts until a new session
//                 starts (rank 0's UdpSession succeeds, or rank 0 calls Broadcast as root, the
//                 first step of Bootstrap) or ResetSyncState().
//   RdmaSession → UNIMPLEMENTED (the software switch has no RDMA).
//   switchml.v1.JobService (switchml_v1.proto, job_service.h) → the same SwitchControl:
//                 several jobs per switch, token-checked registration, job-scoped
//                 Barrier/Broadcast, job state, counters and slot inspection.
//   Barrier, Broadcast → job 0's SyncCoordinator (sync_coordinator.h documents the exact semantics,
//                 including what happens to callers that give up). A waiting call honours its
//                 deadline and its client's cancellation (withdrawn as soon as gRPC reports
//                 it). It ends slightly *before* the call's deadline (1/10 of the time left, at
//                 most 100 ms) with DEADLINE_EXCEEDED and a message saying how many workers had
//                 arrived; so the client normally sees that message rather than its own bare
//                 timeout, and the caller is already withdrawn from the operation when the
//                 client could retry.
//
// Flood limits (the reference Sync service is unauthenticated, like the reference's): a
// waiting Barrier/Broadcast costs memory only (below), and what one client can make the
// controller keep is bounded:
//   * session size: rank 0's successful UdpSession and rank 0's Broadcast as root (the first
//     step of Bootstrap) set the session's size n; a Barrier with another num_workers is then
//     refused (INVALID_ARGUMENT naming both), and setting the size ends a pending barrier and
//     drops pending broadcasts of another size, so a stranger's barrier "shape" (e.g.
//     num_workers 65536) cannot lock the session's own workers out once a session starts;
//   * per client address: at most options.max_waiting_calls_per_peer calls from one IP wait
//     at once (RESOURCE_EXHAUSTED naming the bound and the address);
//   * in all: at most 4096 waiting calls and 1024 pending broadcasts (SyncLimits;
//     RESOURCE_EXHAUSTED naming the bound); num_workers at most 65536.
// Calls that do not wait (the root of a broadcast, the caller completing a barrier) are never
// refused by the waiting bounds. Not defended (inherent to an unauthenticated protocol): a
// client that sends the session's own shape joins the session's operations; jobs of the
// JobService (token-checked, bounded per job) are the answer where that matters.
//
// Threading: Barrier and Broadcast use gRPC's callback API (sync_calls.h): a waiting call is
// a small object (its reactor, a ticket, a timer entry), not a thread, so thousands of waiting
// calls leave the process at a few dozen threads (gRPC's own pools, one deadline timer per
// service, the JobService's watch thread). UdpSession and the JobService's other RPCs are
// synchronous and never wait for other callers. UdpSession registrations are serialized by
// the server (one at a time), so the switch only needs to be safe against its own other users
// (e.g. the dataplane). All public methods are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "control/switch_control.h"
#include "rendezvous/tls.h"
#include "switchml/status.h"

namespace switchml::controller {

using control::SwitchControl;

// A host runs at most a few dozen ranks of a session, each with one waiting call at a time;
// 256 leaves room for that and keeps one host from taking all of job 0's 4096 waiting calls.
inline constexpr uint32_t kDefaultMaxWaitingCallsPerPeer = 256;

struct ServerOptions {
  // "host:port"; the reference controller listens on port 50099. Port 0 picks a free port
  // (read it back with ControllerServer::port()).
  std::string listen_address = "0.0.0.0:50099";
  // How long Shutdown() lets in-flight RPCs finish before gRPC cancels them.
  std::chrono::milliseconds shutdown_grace{500};
  // switchml.v1.JobService only (job_service.h, operator_auth.h): the operator credential
  // that job administration needs (empty = job administration is refused), and the idle
  // timeout of a job created without one. The reference services ignore both.
  std::string operator_token;
  std::chrono::milliseconds default_job_idle_timeout{std::chrono::minutes(10)};
  // The reference Sync service (unauthenticated): at most this many Barrier/Broadcast calls
  // from one client address (IP, any port) wait at once (0 = no per-address bound); job 0's
  // bound on all waiting calls is SyncLimits::max_waiters (4096). See "Flood limits" above.
  uint32_t max_waiting_calls_per_peer = kDefaultMaxWaitingCallsPerPeer;
  // TLS (rendezvous/tls.h): plaintext by default; with tls.cert_file every service is served
  // over TLS only (and with tls.client_ca_file only to clients whose certificate that CA
  // signed). Without TLS, JobService calls (they carry tokens) from peers not on this host
  // are refused unless tls.insecure. Start fails with InvalidArgument naming the flag when a
  // file is unreadable, holds no certificate or key, is expired, or the key does not match.
  rendezvous::ServerTlsOptions tls;
};

class ControllerServer {
 public:
  // Starts serving the Session, Sync and switchml.v1.JobService services on a background
  // thread pool. `control` (the switch, or RemoteSwitches) is not owned and must outlive the
  // server (i.e. until Shutdown() returns or the server is destroyed). Errors:
  // InvalidArgument (empty address, null control), Unavailable (cannot listen on the
  // address, e.g. port in use or an unparsable address).
  static StatusOr<std::unique_ptr<ControllerServer>> Start(const ServerOptions& options,
                                                           SwitchControl* control);

  // Shuts down (see Shutdown()).
  ~ControllerServer();
  ControllerServer(const ControllerServer&) = delete;
  ControllerServer& operator=(const ControllerServer&) = delete;

  // The bound TCP port (the chosen one when the address asked for port 0).
  int port() const;

  // Stops the server and waits for it: first wakes every blocked Barrier/Broadcast handler
  // (their clients get UNAVAILABLE) and makes new ones fail the same way, then gives other
  // in-flight RPCs up to options.shutdown_grace before cancelling them. Returns after every
  // handler has returned; never calls the switch afterwards. Idempotent; blocks.
  void Shutdown();

  // Forgets all pending Barrier/Broadcast operations (blocked callers get ABORTED), e.g. the
  // leftovers of a job that died half-way through its session set-up, which would otherwise
  // make the next job's calls fail (sync_coordinator.h), and a refused registration's hold on
  // the barrier (see UdpSession above). Like the reference's `reset_workers` CLI command,
  // minus the switch state (that is the switch's business). Thread-safe.
  void ResetSyncState();

  // Callers blocked in the reference Barrier right now (for tests and monitoring).
  uint32_t NumBarrierWaiters() const;

 private:
  class Impl;
  explicit ControllerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace switchml::controller
