// integrations/mpi/config.h — the MPI interposer's settings, parsed from environment variables.
//
// Pure (no MPI, no global state): the interposer calls it once per rank before MPI_Init with
// a lookup over the process environment; tests call it with a map.
//
//   InterposerConfig c = ParseInterposerConfig([](const char* name) { return std::getenv(name); });
//   if (!c.status.ok()) { ... c.status.message() names the variable; c.fallback says what to do ... }
//   if (c.enabled) { c.options.rank = rank; c.options.num_workers = size; Context::Create(c.options) }
//
// Variables (README.md in this folder has the full table):
//   SWITCHML_CONTROLLER          host:port of the controller; unset or empty = routing disabled
//   SWITCHML_THREADS, SWITCHML_WINDOW, SWITCHML_ELEMENTS_PER_PACKET,
//   SWITCHML_CALL_TIMEOUT_MS, SWITCHML_RPC_TIMEOUT_MS, SWITCHML_BIND_IP, SWITCHML_ADVERTISE_IP
//                                → the matching switchml::Options fields
//   SWITCHML_TLS_CA, SWITCHML_TLS_CERT, SWITCHML_TLS_KEY, SWITCHML_TLS_SERVER_NAME, SWITCHML_INSECURE
//                                → options.tls (switchml::TlsOptionsFromEnvironment)
//   SWITCHML_JOB_TIMEOUT_MS      deprecated name of SWITCHML_CALL_TIMEOUT_MS (noted in `notes`)
//   SWITCHML_MPI_FALLBACK        pmpi (default) | fail
//   SWITCHML_MPI_STATS           0 (default) | 1
//   SWITCHML_MPI_MIN_ELEMENTS    calls with fewer elements go to PMPI (default 0)
//   SWITCHML_MPI_COMPLETION      async (default) | inline: how routed MPI_Iallreduce completes
//   SWITCHML_MPI_FAILOVER        1 (default) | 0: move to MPI's own all-reduce when the switch fails
//   SWITCHML_MPI_REJOIN          1 (default) | 0: after a failover, come back to the switch
//   SWITCHML_REJOIN_MIN_BACKOFF_MS, SWITCHML_REJOIN_MAX_BACKOFF_MS
//                                → rejoin.min_backoff / max_backoff (rank 0's questions)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "switchml/options.h"
#include "switchml/rejoin.h"
#include "switchml/status.h"

namespace switchml::mpi {

// What to do when SwitchML cannot be used (bad settings, switch unreachable at MPI_Init).
enum class FallbackMode { kPmpi, kFail };

// How a routed MPI_Iallreduce completes. kAsync: it returns at once and the request completes
// when the job does (interposer.cc: the job's completion callback under Open MPI, MPICH's MPIX
// generalized request callbacks under MPICH). kInline: MPI_Iallreduce finishes the job before it returns
// (no overlap; never needs MPI_THREAD_MULTIPLE).
enum class CompletionMode { kAsync, kInline };

struct InterposerConfig {
  // True when SWITCHML_CONTROLLER is set (non-empty) and every variable parsed.
  bool enabled = false;
  // Everything but rank/num_workers (the interposer fills those from MPI_COMM_WORLD).
  Options options;
  FallbackMode fallback = FallbackMode::kPmpi;
  CompletionMode completion = CompletionMode::kAsync;
  bool print_stats = false;
  // SWITCHML_MPI_FAILOVER: when a routed call fails because the switch is gone, finish the
  // calls on MPI's own all-reduce and run every later one there (README.md, "Failover").
  bool failover = true;
  // SWITCHML_MPI_REJOIN: after a failover, come back to the switch at an MPI_Barrier once it can
  // serve the job again (README.md, "Coming back"). Only with failover.
  bool rejoin = true;
  // SWITCHML_REJOIN_MIN_BACKOFF_MS / SWITCHML_REJOIN_MAX_BACKOFF_MS (min <= max, checked);
  // poll_every_calls is the interposer's (every MPI_Barrier on the host path).
  RejoinOptions rejoin_options;
  // Routed calls need at least this many elements (and always at least 1).
  uint64_t min_elements = 0;
  // One line each for deprecated variables that were used (the interposer prints them on
  // stderr, rank 0 only), e.g. "SWITCHML_JOB_TIMEOUT_MS is deprecated, use ...".
  std::vector<std::string> notes;
  // The first error, naming the variable (INVALID_ARGUMENT); OK otherwise. On error `enabled`
  // is false and the other fields hold what could be parsed: a bad SWITCHML_MPI_FALLBACK
  // value selects kFail (the user asked for a policy we cannot tell), a bad SWITCHML_MPI_STATS
  // value leaves print_stats on so the error is also visible in the counters.
  Status status;
};

// Returns the value of an environment variable, or nullptr if it is unset.
using EnvLookup = std::function<const char*(const char* name)>;

InterposerConfig ParseInterposerConfig(const EnvLookup& getenv);

}  // namespace switchml::mpi
