// switchml/options.h — everything a Context needs, given explicitly (no config files, no
// environment variables: tools and integrations parse their inputs into Options;
// TlsOptionsFromEnvironment is the one parser they share).
//
//   switchml::Options opt;
//   opt.rank = 1;
//   opt.num_workers = 4;
//   opt.controller_address = "10.0.0.254:50099";
//   if (auto s = opt.Validate(); !s.ok()) { ... s.message() names the bad field ... }
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "switchml/status.h"

namespace switchml {

// TLS towards the controller (gRPC), for Options::tls and the tools. Off by default
// (plaintext). Tokens (the job's token, the operator credential) cross plaintext gRPC only to a
// controller on this host (a loopback address) unless `insecure` is set: connecting a job's
// worker or an operator's tool to any other address without TLS fails with
// FAILED_PRECONDITION saying so. docs/operations.md "Securing" shows a set-up.
struct TlsOptions {
  // PEM file of the certificate authorities that signed the controller's certificate; setting
  // it turns TLS on.
  std::string ca_file;
  // This end's certificate chain and private key (PEM), for a controller that requires client
  // certificates (mutual TLS). Both or neither; only with ca_file.
  std::string cert_file;
  std::string key_file;
  // The name the controller's certificate must carry when it is not the host in
  // controller_address (e.g. an address by IP and a certificate for "switch1.example").
  std::string server_name;
  // Without TLS: send tokens to a controller that is not on this host anyway (anyone on the
  // path can read them). No effect with TLS.
  bool insecure = false;

  bool enabled() const { return !ca_file.empty(); }
  // INVALID_ARGUMENT naming the field ("tls.cert_file is set but tls.key_file is not").
  // The files themselves are read and checked when a connection is made.
  Status Validate() const;
};

// TlsOptions from the workers' environment, the one home of these variable names:
// SWITCHML_TLS_CA, SWITCHML_TLS_CERT, SWITCHML_TLS_KEY, SWITCHML_TLS_SERVER_NAME (paths and a
// name; unset or empty = not given) and SWITCHML_INSECURE (0 or 1). `get` returns a variable's
// value or nullptr when unset (empty = std::getenv). Errors: INVALID_ARGUMENT naming the variable.
StatusOr<TlsOptions> TlsOptionsFromEnvironment(
    const std::function<const char*(const char*)>& get = nullptr);

// SWITCHML_INSECURE alone (what servers read for --insecure): unset, empty or 0 = false, 1 =
// true; anything else INVALID_ARGUMENT naming the variable.
StatusOr<bool> InsecureFromEnvironment(const std::function<const char*(const char*)>& get = nullptr);

// `message` (from TlsOptions::Validate or a connection's TLS file checks) with the field names
// tls.ca_file, tls.cert_file, tls.key_file, tls.server_name, tls.insecure replaced by `names`
// in that order: what the user set (environment variables, a tool's flags).
std::string RenameTlsFields(std::string message, const std::array<const char*, 5>& names);

// The struct's own (implicit) copy, move and destruction of its deprecated fields are not uses:
// only code naming them is warned about.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct Options {
  // The most workers of one job: a switch aggregates up to 256 workers, a two-level job up to
  // 256 leaves of 256 (docs/scaling.md "Two-level aggregation"); 32768 keeps the call
  // descriptor's sums exact (wire/call_descriptor.h).
  static constexpr uint32_t kMaxWorkers = 32768;
  // This worker's rank in [0, num_workers) and the number of workers in the job
  // (1..kMaxWorkers; a job on one switch level: up to 256, the switch's limit). In a two-level
  // job, the global rank and count: the worker quantizes with num_workers, and registers at
  // its leaf switch with its rank in the rack.
  uint32_t rank = 0;
  uint32_t num_workers = 1;

  // gRPC session service (the controller, embedded in `switchml switch` by default). The switch's
  // data address comes from its session reply.
  std::string controller_address = "127.0.0.1:50099";

  // Multi-job switches (the controller's switchml.v1.JobService): the job to join and its
  // secret token, as printed by whoever created the job (`switchml jobs create`). The worker
  // registers with RegisterWorker(job_id, job_token, rank) and waits in the job's own barrier,
  // so several jobs can share one switch and one controller. job_id 0 (default) = the
  // reference session path (UdpSession; one job per switch; rank 0 starts it).
  uint32_t job_id = 0;
  std::string job_token;

  // Local IPv4 to bind the data sockets to; empty = any. The address registered with the
  // switch is the one the kernel uses to reach the controller, unless advertise_ip is set.
  std::string bind_ip;
  std::string advertise_ip;

  // Worker threads (1..64). Each owns a socket and a disjoint range of `window_packets /
  // num_worker_threads` switch slots, and streams the matching slice of every tensor.
  // Every worker of a job must use the same num_workers, num_worker_threads, window_packets
  // and elements_per_packet (contract C2, docs/protocol.md#c2-identical-client-configuration).
  // Each worker registers them, with its client's protocol version; the job's first
  // registration (rank 0's, for the reference session) fixes them, and Context::Create of a
  // worker that differs fails with FAILED_PRECONDITION naming the field, both values and both
  // ranks, e.g. "rank 1 registered num_worker_threads=2, but rank 0 registered
  // num_worker_threads=1 for job 3; ...". The workers already waiting in the job's barrier fail
  // at once with the same message.
  uint32_t num_worker_threads = 1;
  // Packets in flight per worker (the reference's max_outstanding_packets), split among threads.
  uint32_t window_packets = 256;
  // Elements per packet: 64 or 256 (reference switch), 512 or 1024 (our jumbo extension).
  uint32_t elements_per_packet = 256;

  // Retransmission timeout: starts at initial_rto, then adapts to the measured round-trip time
  // (RFC 6298 style) within [min_rto, max_rto]; doubles per retransmission of the same packet.
  // The 40 ms floor is for hosts where workers and the switch share few cores: there the
  // scheduler delays a worker by tens of milliseconds, and a lower floor turns those delays into
  // spurious retransmissions (measured: 4 workers + switch on 2 cores, 64 MiB float32: 27%
  // retransmitted packets at 5 ms, 2.4% at 20 ms, none at 40 ms, and 1.7x faster). On dedicated
  // hosts with microsecond RTTs a floor of a few milliseconds recovers losses faster.
  std::chrono::microseconds initial_rto{std::chrono::milliseconds(80)};
  std::chrono::microseconds min_rto{std::chrono::milliseconds(40)};
  // The 320 ms ceiling bounds the exponential backoff: beyond a few hundred milliseconds a longer
  // wait only delays recovery (a worker that keeps failing is caught by call_timeout). With a
  // 2 s ceiling, 5% loss in both directions made a 16 MiB call 20-70x slower than loss-free
  // (docs/reliability.md); with 320 ms, about 14x (simulated: 4.0 s against 0.28 s).
  std::chrono::microseconds max_rto{std::chrono::milliseconds(320)};
  // UDP segmentation offload: GSO on send (a window's packets leave in a few syscalls) and GRO
  // on receive (Linux; each falls back by itself where the kernel lacks it). The packets on
  // the wire are the same either way; off = one datagram per message, for comparison.
  bool udp_offload = true;
  // Busy polling of the data sockets (0..1 s; 0 = off): a worker thread waiting for results
  // polls its socket for up to this long before it sleeps. Lower latency for more CPU; only
  // worth it with a core per worker thread.
  std::chrono::microseconds busy_poll{0};
  // All-reduce calls submitted and not finished, at most (1..65536). AllReduceAsync blocks
  // while this many are queued or running, until the oldest finishes (each finishes or fails
  // within its call_timeout), so a caller that submits faster than the network drains keeps
  // memory flat. 256 is far more than a training step overlaps (DDP buckets, per-layer calls).
  uint32_t max_calls_in_flight = 256;
  // A call fails when no result arrives for this long: UNAVAILABLE when the controller then
  // finds the switch is what failed (it or its controller does not answer, it forgot the job,
  // or a shard of the job is lost: the host path may stand in), DEADLINE_EXCEEDED otherwise
  // (e.g. naming a rank the switch has not heard from).
  std::chrono::milliseconds call_timeout{std::chrono::seconds(10)};
  // Keep a shadow copy of every slot's last result (one memcpy of each result payload; window x
  // 4 x elements_per_packet bytes per worker thread), which a recovery onto the host path needs
  // (switchml/failover.h). false: no copy, and a recovery fails (FAILED_PRECONDITION).
  bool shadow_copies = true;
  // Deadline of each controller call (session setup, barrier).
  std::chrono::milliseconds rpc_timeout{std::chrono::seconds(10)};
  // TLS towards the controller (see TlsOptions; plaintext by default).
  TlsOptions tls;

  // Deprecated (one release): the old names of max_calls_in_flight and call_timeout. 0 =
  // unset (the default). Precedence: a deprecated field that is set replaces its new field
  // (Context::Create and Validate use it, and Context::options() reports both with that
  // value); setting both to different values is INVALID_ARGUMENT naming both, unless the new
  // field still has its default (then the deprecated one wins).
  [[deprecated("use max_calls_in_flight")]] uint32_t max_jobs_in_flight = 0;
  [[deprecated("use call_timeout")]] std::chrono::milliseconds job_timeout{0};

  // These options with the deprecated fields folded in (see above): max_calls_in_flight and
  // call_timeout hold the values in force, the deprecated fields the same values.
  // INVALID_ARGUMENT if a deprecated field and its new field disagree.
  StatusOr<Options> Resolved() const;

  // Returns INVALID_ARGUMENT naming the first bad field, e.g.
  // "elements_per_packet must be one of 64, 256, 512, 1024, got 100".
  Status Validate() const;
};
#pragma GCC diagnostic pop

}  // namespace switchml
