// rendezvous/session_client.h — the worker side of the controller API.
//
// A SessionClient wraps one gRPC channel to the controller; Bootstrap() runs the reference
// client's session set-up sequence (docs/protocol.md#session-sequence) over it and returns the switch's address.
// Workers join through rendezvous.h (ConnectRendezvous), which uses this for job 0.
//
//   auto client = SessionClient::Connect("10.0.0.1:50099", std::chrono::seconds(5));
//   if (!client.ok()) return client.status();   // Unavailable within 5 s if nobody listens
//   WorkerRegistration reg{.rank = rank, .num_workers = n, .ipv4 = my_ip,
//                          .udp_ports = my_thread_ports};
//   StatusOr<SwitchInfo> sw = Bootstrap(**client, reg);
//   // all n workers are registered once Bootstrap returns OK on every rank
//
// Every RPC carries a deadline of `rpc_timeout` from the moment it is issued, and waits for
// the channel to (re)connect until then, so nothing blocks longer than rpc_timeout (plus
// scheduling noise). Errors come back as switchml::Status whose message names the controller
// address and the RPC:
//   Unavailable       "controller 127.0.0.1:50099 unreachable (UdpSession): not connected
//                      within 5000 ms" — nobody listening / connection lost;
//   DeadlineExceeded  "controller ... (Barrier): did not complete within 5000 ms: Barrier:
//                      deadline passed; 3 of 4 workers had arrived" — connected but
//                      the operation did not complete (e.g. a worker missing from a barrier);
//   other codes       the controller's own status and message (e.g. FailedPrecondition from
//                      the switch when num_workers disagrees), prefixed with the address/RPC.
//
// Thread-safety: all methods are thread-safe (gRPC stubs are); several threads may share one
// client.
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

// The registration and switch description the Session service exchanges
// (control/switch_control.h documents them).
using control::kClientProtocolVersion;
using control::SwitchInfo;
using control::ThreadRoute;
using control::WorkerRegistration;

// The reference switch's UDP data port; used when a controller's reply does not say.
inline constexpr uint16_t kReferenceSwitchUdpPort = 48864;

class SessionClient {
 public:
  // Creates the channel (TLS as `tls` says; rendezvous/tls.h) and waits up to rpc_timeout for
  // it to connect. Errors: InvalidArgument (empty address, rpc_timeout <= 0, TLS files),
  // Unavailable (no connection within rpc_timeout, with gRPC's reason and a TLS hint; with
  // require_connected false the client is returned anyway). Blocks. The reference services
  // carry no token: plaintext to any address is allowed.
  static StatusOr<std::unique_ptr<SessionClient>> Connect(const std::string& controller_address,
                                                          std::chrono::milliseconds rpc_timeout,
                                                          const TlsOptions& tls = {},
                                                          bool require_connected = true);
  ~SessionClient();
  SessionClient(const SessionClient&) = delete;
  SessionClient& operator=(const SessionClient&) = delete;

  // Blocks until num_workers callers (across all workers) have called Barrier. Errors:
  // InvalidArgument (num_workers == 0, or differs from the pending barrier's), plus the
  // transport errors above.
  Status Barrier(uint32_t num_workers);

  // Returns root's value (`value` is sent but only the root's is used). Errors:
  // InvalidArgument (rank or root >= num_workers, num_workers == 0, mismatch with the
  // operation being joined), plus the transport errors above.
  StatusOr<uint64_t> Broadcast(uint64_t value, uint32_t rank, uint32_t num_workers,
                               uint32_t root);

  // Registers one worker with the switch (all fields of `reg`, including the agreed
  // parameters). Returns the switch's address; extension fields a
  // controller does not send come back as udp_port = kReferenceSwitchUdpPort and
  // num_slots = max_workers = 0 (unknown). An all-zero reply to a non-zero session_id (how a
  // reference controller reports failure,
  // docs/protocol.md#d5-session-failure-answered-with-success) becomes FailedPrecondition.
  // Errors:
  // InvalidArgument (rank >= num_workers), the controller's rejection (InvalidArgument,
  // FailedPrecondition, ...), Internal (reply with udp_port > 65535), transport errors.
  StatusOr<SwitchInfo> UdpSession(const WorkerRegistration& reg);

  const std::string& address() const;

  // As JobClient::set_wait_for_ready. Call before sharing the client between threads.
  void set_wait_for_ready(bool wait);

  std::chrono::milliseconds rpc_timeout() const;

 private:
  struct Impl;
  explicit SessionClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Nanoseconds since the Unix epoch (system clock): the reference's session id.
uint64_t WallClockNanos();

// The reference client's session set-up, run by every worker (rank reg.rank of
// reg.num_workers) with its own client:
//   1. rank 0 picks session_id = session_id_source(); Broadcast(session_id, root 0) gives it
//      to everyone (reg.session_id is overwritten with it);
//   2. rank 0: UdpSession then Barrier; other ranks: Barrier then UdpSession — so rank 0,
//      which starts a fresh session on the switch, always registers first;
//   3. all: Barrier (after it every worker is registered).
// Returns the switch info from this worker's UdpSession. Errors: InvalidArgument
// (num_workers == 0 or rank >= num_workers) and any RPC error, prefixed with
// "Bootstrap rank R of N, <step>". If rank 0's registration fails, the other ranks are not
// told: they fail at step 2's Barrier with DeadlineExceeded after rpc_timeout. A registration
// our controller refuses with FailedPrecondition (this worker's num_workers or agreed
// parameters differ from rank 0's) fails the other ranks' barriers at once with the same
// message (session_service.h). Blocks for up to about 4 × rpc_timeout.
StatusOr<SwitchInfo> Bootstrap(SessionClient& client, WorkerRegistration reg,
                               const std::function<uint64_t()>& session_id_source = WallClockNanos);

}  // namespace switchml::rendezvous
