#include "config.h"

#include <charconv>
#include <string_view>
#include <utility>

namespace switchml::mpi {
namespace {

// Parses a decimal integer in [lo, hi]; the whole value must be digits (no sign, no spaces).
StatusOr<uint64_t> ParseUint(const char* name, std::string_view text, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi) {
    return InvalidArgumentError(std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got '" + std::string(text) + "'");
  }
  return v;
}

// Options::Validate names Options fields; the user set environment variables.
Status RenameField(const Status& s) {
  static constexpr std::pair<std::string_view, std::string_view> kFieldToVar[] = {
      {"num_worker_threads", "SWITCHML_THREADS"},
      {"window_packets", "SWITCHML_WINDOW"},
      {"elements_per_packet", "SWITCHML_ELEMENTS_PER_PACKET"},
      {"call_timeout", "SWITCHML_CALL_TIMEOUT_MS"},
      {"rpc_timeout", "SWITCHML_RPC_TIMEOUT_MS"},
      {"controller_address", "SWITCHML_CONTROLLER"},
      {"bind_ip", "SWITCHML_BIND_IP"},
      {"advertise_ip", "SWITCHML_ADVERTISE_IP"},
      {"job_token", "SWITCHML_JOB_TOKEN"},
      {"job_id", "SWITCHML_JOB_ID"},
  };
  for (const auto& [field, var] : kFieldToVar) {
    if (s.message().starts_with(field)) {
      return InvalidArgumentError(std::string(var) + ": " + s.message());
    }
  }
  return InvalidArgumentError("SWITCHML_* settings: " + s.message());
}

}  // namespace

InterposerConfig ParseInterposerConfig(const EnvLookup& getenv) {
  InterposerConfig c;
  auto get = [&](const char* name) -> const char* { return getenv(name); };
  auto fail = [&](Status s) {
    if (c.status.ok()) c.status = std::move(s);
  };

  if (const char* v = get("SWITCHML_MPI_FALLBACK")) {
    std::string_view s(v);
    if (s == "pmpi") {
      c.fallback = FallbackMode::kPmpi;
    } else if (s == "fail") {
      c.fallback = FallbackMode::kFail;
    } else {
      c.fallback = FallbackMode::kFail;
      fail(InvalidArgumentError("SWITCHML_MPI_FALLBACK must be 'pmpi' or 'fail', got '" + std::string(s) + "'"));
    }
  }
  if (const char* v = get("SWITCHML_MPI_COMPLETION")) {
    std::string_view s(v);
    if (s == "async") {
      c.completion = CompletionMode::kAsync;
    } else if (s == "inline") {
      c.completion = CompletionMode::kInline;
    } else {
      fail(InvalidArgumentError("SWITCHML_MPI_COMPLETION must be 'async' or 'inline', got '" + std::string(s) +
                                "'"));
    }
  }
  if (const char* v = get("SWITCHML_MPI_STATS")) {
    std::string_view s(v);
    if (s == "1") {
      c.print_stats = true;
    } else if (s == "0" || s.empty()) {
      c.print_stats = false;
    } else {
      c.print_stats = true;
      fail(InvalidArgumentError("SWITCHML_MPI_STATS must be 0 or 1, got '" + std::string(s) + "'"));
    }
  }
  if (const char* v = get("SWITCHML_MPI_FAILOVER")) {
    std::string_view s(v);
    if (s == "1") {
      c.failover = true;
    } else if (s == "0") {
      c.failover = false;
    } else {
      fail(InvalidArgumentError("SWITCHML_MPI_FAILOVER must be 0 or 1, got '" + std::string(s) + "'"));
    }
  }
  if (const char* v = get("SWITCHML_MPI_REJOIN")) {
    std::string_view s(v);
    if (s == "1") {
      c.rejoin = true;
    } else if (s == "0") {
      c.rejoin = false;
    } else {
      fail(InvalidArgumentError("SWITCHML_MPI_REJOIN must be 0 or 1, got '" + std::string(s) + "'"));
    }
  }
  // Rank 0's questions to the controller after a failover (RejoinOptions; the same variables as
  // the PyTorch backend's). Unset: the library's defaults.
  bool backoff_ok = true;
  for (auto [name, field] : {std::pair{"SWITCHML_REJOIN_MIN_BACKOFF_MS", &c.rejoin_options.min_backoff},
                             std::pair{"SWITCHML_REJOIN_MAX_BACKOFF_MS", &c.rejoin_options.max_backoff}}) {
    if (const char* v = get(name)) {
      auto n = ParseUint(name, v, 1, 86'400'000);
      if (n.ok()) {
        *field = std::chrono::milliseconds(*n);
      } else {
        fail(n.status());
        backoff_ok = false;
      }
    }
  }
  if (backoff_ok && c.rejoin_options.min_backoff > c.rejoin_options.max_backoff) {
    fail(InvalidArgumentError(
        "SWITCHML_REJOIN_MIN_BACKOFF_MS (" + std::to_string(c.rejoin_options.min_backoff.count()) +
        ") must not exceed SWITCHML_REJOIN_MAX_BACKOFF_MS (" + std::to_string(c.rejoin_options.max_backoff.count()) +
        ")"));
  }
  if (const char* v = get("SWITCHML_MPI_MIN_ELEMENTS")) {
    auto n = ParseUint("SWITCHML_MPI_MIN_ELEMENTS", v, 0, uint64_t{1} << 62);
    if (n.ok()) c.min_elements = *n; else fail(n.status());
  }

  Options& o = c.options;
  struct UintVar {
    const char* name;
    uint64_t lo, hi;
    void (*apply)(Options&, uint64_t);
  };
  static const UintVar kUintVars[] = {
      {"SWITCHML_THREADS", 1, 64, [](Options& o, uint64_t v) { o.num_worker_threads = uint32_t(v); }},
      {"SWITCHML_WINDOW", 1, 1u << 20, [](Options& o, uint64_t v) { o.window_packets = uint32_t(v); }},
      {"SWITCHML_ELEMENTS_PER_PACKET", 1, 1u << 20,
       [](Options& o, uint64_t v) { o.elements_per_packet = uint32_t(v); }},
      {"SWITCHML_CALL_TIMEOUT_MS", 1, 86'400'000,
       [](Options& o, uint64_t v) { o.call_timeout = std::chrono::milliseconds(v); }},
      {"SWITCHML_RPC_TIMEOUT_MS", 1, 86'400'000,
       [](Options& o, uint64_t v) { o.rpc_timeout = std::chrono::milliseconds(v); }},
      {"SWITCHML_JOB_ID", 1, UINT32_MAX, [](Options& o, uint64_t v) { o.job_id = uint32_t(v); }},
  };
  for (const UintVar& var : kUintVars) {
    if (const char* v = get(var.name)) {
      auto n = ParseUint(var.name, v, var.lo, var.hi);
      if (n.ok()) var.apply(o, *n); else fail(n.status());
    }
  }
  // The deprecated name of SWITCHML_CALL_TIMEOUT_MS (one release): used when the new one is
  // not set; both set to different values is an error naming both.
  if (const char* old = get("SWITCHML_JOB_TIMEOUT_MS")) {
    c.notes.push_back("SWITCHML_JOB_TIMEOUT_MS is deprecated, use SWITCHML_CALL_TIMEOUT_MS");
    const char* now = get("SWITCHML_CALL_TIMEOUT_MS");
    if (now == nullptr) {
      auto n = ParseUint("SWITCHML_JOB_TIMEOUT_MS", old, 1, 86'400'000);
      if (n.ok()) o.call_timeout = std::chrono::milliseconds(*n); else fail(n.status());
    } else if (std::string_view(now) != old) {
      fail(InvalidArgumentError("SWITCHML_JOB_TIMEOUT_MS (deprecated) '" + std::string(old) +
                                "' and SWITCHML_CALL_TIMEOUT_MS '" + now +
                                "' disagree; set only SWITCHML_CALL_TIMEOUT_MS"));
    }
  }
  if (const char* v = get("SWITCHML_BIND_IP")) o.bind_ip = v;
  if (const char* v = get("SWITCHML_ADVERTISE_IP")) o.advertise_ip = v;
  if (const char* v = get("SWITCHML_JOB_TOKEN")) o.job_token = v;
  // SWITCHML_TLS_CA, SWITCHML_TLS_CERT, SWITCHML_TLS_KEY, SWITCHML_TLS_SERVER_NAME,
  // SWITCHML_INSECURE: the library's one parser (errors name the variable).
  if (StatusOr<TlsOptions> tls = TlsOptionsFromEnvironment(getenv); tls.ok()) {
    o.tls = *tls;
  } else {
    fail(tls.status());
  }

  const char* controller = get("SWITCHML_CONTROLLER");
  const bool wanted = controller != nullptr && *controller != '\0';
  if (wanted) o.controller_address = controller;
  if (wanted && c.status.ok()) {
    // rank/num_workers are placeholders here; the interposer validates again with the real ones.
    if (Status s = o.Validate(); !s.ok()) fail(RenameField(s));
  }
  c.enabled = wanted && c.status.ok();
  return c;
}

}  // namespace switchml::mpi
