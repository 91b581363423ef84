// tools/job_flags.h — the job-shape flags shared by `switchml allreduce` and `switchml demo`
// (the demo forwards them to its workers), declared once; and the operator-credential flag
// shared by `switchml switch`, `switchml controller` and `switchml jobs`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "control/switch_control.h"
#include "rendezvous/operator_auth.h"
#include "rendezvous/tls.h"
#include "switchml/options.h"
#include "switchml/status.h"
#include "switchml/types.h"

namespace switchml::tools {

struct JobFlags {
  std::string size;
  std::vector<std::string> counts;
  std::string type = "float32";
  uint32_t iters = 1;
  uint32_t warmup = 0;
  uint32_t threads = 1;
  uint32_t window = 256;
  uint32_t elements_per_packet = 256;
  uint32_t call_timeout_ms = 10000;
  // --job-timeout-ms: the deprecated name of --call-timeout-ms (one release); Parse() prints a
  // one-line note on stderr when it is used; EffectiveCallTimeoutMs() folds it in.
  uint32_t deprecated_job_timeout_ms = 0;
  CLI::Option* call_timeout_option = nullptr;
  CLI::Option* deprecated_job_timeout_option = nullptr;

  explicit JobFlags(std::string default_size) : size(std::move(default_size)) {}
  void Register(CLI::App& app);

  // Checks the flags; the message names the flag ("--type must be float32 or int32, got 'x'").
  // Notes --job-timeout-ms (deprecated) on stderr; giving it with a different
  // --call-timeout-ms is an error naming both.
  struct Job {
    DataType type;
    std::vector<uint64_t> counts;  // elements per tensor, run as consecutive calls
  };
  StatusOr<Job> Parse() const;
  // --call-timeout-ms, or --job-timeout-ms (deprecated) when only that was given.
  uint32_t EffectiveCallTimeoutMs() const;

  // The same flags as arguments for `switchml allreduce`, with the tensor sizes given.
  std::vector<std::string> ToArgs(const std::vector<uint64_t>& counts) const;
};

// `switchml jobs create --leaf I[,I...]:N ... [--parent P[,P...]]`: a two-level job's racks in
// rank order (rack k = the k-th --leaf: N ranks on the controller's switches I, its --switch
// list from 0, one per shard) and the parent's switches (one per shard; empty = chosen by the
// controller). Checks what needs no controller: each "I,...:N" well formed with N >= 1, every
// rack naming as many switches (K, the shards per level) and --parent none or K, no switch
// twice anywhere, the counts summing to `workers`, and at least two racks. Errors name the
// flag. Empty `leaves` = a one-level job (then --parent is refused).
struct LeafPlacement {
  std::vector<control::JobSpec::Rack> racks;
  std::vector<uint32_t> parent_switches;
  uint32_t shards() const { return racks.empty() ? 1 : uint32_t(racks[0].switches.size()); }
};
StatusOr<LeafPlacement> ParseLeafFlags(const std::vector<std::string>& leaves, uint32_t workers,
                                       const std::string& parent);

// --operator-token-file FILE, or else the environment variable SWITCHML_OPERATOR_TOKEN
// (rendezvous/operator_auth.h): the operator credential of the job service.
struct OperatorTokenFlag {
  std::string file;

  // `role` ends the flag's help, e.g. "to authenticate operators".
  void Register(CLI::App& app, const std::string& role);
  // The flag's file wins over the environment; token empty if neither is given. Errors name
  // the file or the variable (unreadable, empty, malformed). A warning (e.g. a file other
  // users can read) is printed to stderr prefixed with `who`.
  StatusOr<rendezvous::OperatorCredential> Resolve(const std::string& who) const;
};

// How a tool reaches a controller (rendezvous/tls.h): --tls-ca FILE, --tls-cert FILE,
// --tls-key FILE, --tls-server-name NAME, --insecure. Each flag given wins over its
// environment variable (SWITCHML_TLS_CA, SWITCHML_TLS_CERT, SWITCHML_TLS_KEY,
// SWITCHML_TLS_SERVER_NAME, SWITCHML_INSECURE; TlsOptionsFromEnvironment).
struct ClientTlsFlags {
  std::string ca, cert, key, server_name;
  bool insecure = false;

  void Register(CLI::App& app);
  // The environment, then the flags over it; errors name the variable or the flag.
  StatusOr<TlsOptions> Resolve() const;
};

// A server's TLS (`switchml switch`, `switchml controller`): --tls-cert FILE, --tls-key FILE,
// --tls-client-ca FILE (mutual TLS), --insecure (plaintext tokens from other hosts).
struct ServerTlsFlags {
  rendezvous::ServerTlsOptions tls;

  void Register(CLI::App& app);
  // The flags with SWITCHML_INSECURE=1 standing in for an absent --insecure; errors name the
  // variable (InsecureFromEnvironment).
  StatusOr<rendezvous::ServerTlsOptions> Resolve() const;
};

}  // namespace switchml::tools
