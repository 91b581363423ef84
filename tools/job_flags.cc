#include "job_flags.h"

#include <cstring>
#include <utility>

#include <cstdlib>
#include <iostream>

#include "cli_util.h"

namespace switchml::tools {

void JobFlags::Register(CLI::App& app) {
  app.add_option("--size", size, "Tensor size in bytes (suffixes K, M, G, KiB, MiB, GiB)")->capture_default_str();
  app.add_option("--counts,--count", counts,
                 "Tensor sizes in elements (comma-separated; overrides --size), run in order as consecutive jobs")
      ->delimiter(',');
  app.add_option("--type", type, "Element type: float32 or int32")->capture_default_str();
  app.add_option("--iters", iters, "Timed iterations per tensor")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed warm-up iterations per tensor")->capture_default_str();
  app.add_option("--threads", threads, "Worker threads per worker (each owns window/threads slots)")
      ->capture_default_str();
  app.add_option("--window", window, "Packets in flight per worker")->capture_default_str();
  app.add_option("--elements-per-packet", elements_per_packet, "64, 256, 512 or 1024")->capture_default_str();
  call_timeout_option =
      app.add_option("--call-timeout-ms", call_timeout_ms, "Fail an all-reduce call after this long without progress")
          ->capture_default_str();
  deprecated_job_timeout_option =
      app.add_option("--job-timeout-ms", deprecated_job_timeout_ms, "Deprecated name of --call-timeout-ms");
}

uint32_t JobFlags::EffectiveCallTimeoutMs() const {
  const bool old_given = deprecated_job_timeout_option != nullptr && deprecated_job_timeout_option->count() > 0;
  const bool new_given = call_timeout_option != nullptr && call_timeout_option->count() > 0;
  return old_given && !new_given ? deprecated_job_timeout_ms : call_timeout_ms;
}

StatusOr<JobFlags::Job> JobFlags::Parse() const {
  if (deprecated_job_timeout_option != nullptr && deprecated_job_timeout_option->count() > 0) {
    if (call_timeout_option != nullptr && call_timeout_option->count() > 0 &&
        call_timeout_ms != deprecated_job_timeout_ms) {
      return InvalidArgumentError("--job-timeout-ms (deprecated) " + std::to_string(deprecated_job_timeout_ms) +
                                  " and --call-timeout-ms " + std::to_string(call_timeout_ms) +
                                  " disagree; give only --call-timeout-ms");
    }
    std::cerr << "switchml: note: --job-timeout-ms is deprecated, use --call-timeout-ms\n";
  }
  Job job;
  if (type == "float32") job.type = DataType::kFloat32;
  else if (type == "int32") job.type = DataType::kInt32;
  else return InvalidArgumentError("--type must be float32 or int32, got '" + type + "'");
  if (iters < 1) return InvalidArgumentError("--iters must be >= 1, got 0");
  for (const std::string& c : counts) {
    auto v = ParseSize(c);
    if (!v.ok()) return InvalidArgumentError("--counts: " + v.status().message());
    job.counts.push_back(*v);
  }
  if (job.counts.empty()) {
    auto bytes = ParseSize(size);
    if (!bytes.ok()) return InvalidArgumentError("--size: " + bytes.status().message());
    if (*bytes % 4 != 0)
      return InvalidArgumentError("--size must be a multiple of 4 bytes, got " + std::to_string(*bytes));
    job.counts.push_back(*bytes / 4);
  }
  return job;
}

std::vector<std::string> JobFlags::ToArgs(const std::vector<uint64_t>& c) const {
  std::string list;
  for (uint64_t n : c) list += (list.empty() ? "" : ",") + std::to_string(n);
  return {"--counts", list, "--type", type, "--iters", std::to_string(iters), "--warmup", std::to_string(warmup),
          "--threads", std::to_string(threads), "--window", std::to_string(window), "--elements-per-packet",
          std::to_string(elements_per_packet), "--call-timeout-ms", std::to_string(EffectiveCallTimeoutMs())};
}

namespace {

// "3" or "3,4,5": switch indices (up to 9 digits each). False if malformed.
bool ParseSwitchList(const std::string& text, std::vector<uint32_t>* out) {
  out->clear();
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string t = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                        : comma - start);
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    out->push_back(uint32_t(std::stoul(t)));
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

}  // namespace

StatusOr<LeafPlacement> ParseLeafFlags(const std::vector<std::string>& leaves, uint32_t workers,
                                       const std::string& parent) {
  LeafPlacement out;
  if (!parent.empty() && !ParseSwitchList(parent, &out.parent_switches)) {
    return InvalidArgumentError("--parent must be SWITCH or SWITCH,SWITCH,... (the controller's "
                                "switch index of each of the parent's shards), got '" + parent +
                                "'");
  }
  if (leaves.empty()) {
    if (!parent.empty()) return InvalidArgumentError("--parent needs --leaf (a two-level job's racks)");
    return out;
  }
  if (leaves.size() < 2) {
    return InvalidArgumentError("--leaf: a two-level job needs at least two racks, got one ('" +
                                leaves[0] + "'); a job of one rack is a one-level job on that "
                                "switch");
  }
  // Where each switch index was given first, to name both places when one repeats.
  std::map<uint32_t, std::string> given;
  auto claim = [&](uint32_t i, const std::string& where) -> Status {
    const auto [it, fresh] = given.emplace(i, where);
    if (fresh) return OkStatus();
    return InvalidArgumentError("switch " + std::to_string(i) + " is given twice (" + it->second +
                                " and " + where + "): a switch serves one rack or the parent, "
                                "one shard of it");
  };
  for (uint32_t i : out.parent_switches) SWITCHML_RETURN_IF_ERROR(claim(i, "--parent " + parent));
  uint64_t sum = 0;
  for (const std::string& l : leaves) {
    const size_t colon = l.rfind(':');
    control::JobSpec::Rack r;
    const std::string count = colon == std::string::npos ? "" : l.substr(colon + 1);
    if (colon == std::string::npos || !ParseSwitchList(l.substr(0, colon), &r.switches) ||
        count.empty() || count.size() > 9 ||
        count.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgumentError("--leaf must be SWITCH:WORKERS or SWITCH,SWITCH,...:WORKERS (the "
                                  "controller's switch index of each of the rack's shards and the "
                                  "rack's worker count, e.g. 0:4 or 0,1:4), got '" + l + "'");
    }
    r.workers = uint32_t(std::stoul(count));
    if (r.workers == 0) return InvalidArgumentError("--leaf " + l + ": a rack needs >= 1 worker");
    if (!out.racks.empty() && r.switches.size() != out.racks[0].switches.size()) {
      return InvalidArgumentError("--leaf " + l + " names " + std::to_string(r.switches.size()) +
                                  " switch(es) but --leaf " + leaves[0] + " names " +
                                  std::to_string(out.racks[0].switches.size()) +
                                  ": every rack has one switch per shard (the same number)");
    }
    for (uint32_t i : r.switches) SWITCHML_RETURN_IF_ERROR(claim(i, "--leaf " + l));
    sum += r.workers;
    out.racks.push_back(r);
  }
  if (!out.parent_switches.empty() && out.parent_switches.size() != out.shards()) {
    return InvalidArgumentError("--parent " + parent + " names " +
                                std::to_string(out.parent_switches.size()) +
                                " switch(es) but every --leaf names " +
                                std::to_string(out.shards()) +
                                ": the parent has as many shards as each rack");
  }
  if (sum != workers) {
    return InvalidArgumentError("--leaf counts sum to " + std::to_string(sum) + " but --workers is " +
                                std::to_string(workers) + "; rack k holds the next count ranks");
  }
  return out;
}

void OperatorTokenFlag::Register(CLI::App& app, const std::string& role) {
  app.add_option("--operator-token-file", file,
                 "File holding the operator credential (16..1024 printable characters; wins over "
                 "the environment variable SWITCHML_OPERATOR_TOKEN) " + role);
}

StatusOr<rendezvous::OperatorCredential> OperatorTokenFlag::Resolve(const std::string& who) const {
  auto cred = rendezvous::ResolveOperatorToken(file, std::getenv(rendezvous::kOperatorTokenEnv));
  if (cred.ok() && !cred->warning.empty()) std::cerr << who << ": " << cred->warning << "\n";
  return cred;
}

void ClientTlsFlags::Register(CLI::App& app) {
  app.add_option("--tls-ca", ca,
                 "Use TLS: PEM file of the CA that signed the controller's certificate "
                 "(default: SWITCHML_TLS_CA; unset = plaintext)");
  app.add_option("--tls-cert", cert,
                 "With --tls-ca: this client's certificate (PEM), for a controller that requires "
                 "client certificates (default: SWITCHML_TLS_CERT)");
  app.add_option("--tls-key", key, "The private key of --tls-cert (PEM; default: SWITCHML_TLS_KEY)");
  app.add_option("--tls-server-name", server_name,
                 "The name the controller's certificate must carry, when not the host in "
                 "--controller (default: SWITCHML_TLS_SERVER_NAME)");
  app.add_flag("--insecure", insecure,
               "Without TLS: send tokens to a controller on another host anyway (they can be read "
               "on the network; default: SWITCHML_INSECURE=1)");
}

StatusOr<TlsOptions> ClientTlsFlags::Resolve() const {
  SWITCHML_ASSIGN_OR_RETURN(TlsOptions tls, TlsOptionsFromEnvironment());
  if (!ca.empty()) tls.ca_file = ca;
  if (!cert.empty()) tls.cert_file = cert;
  if (!key.empty()) tls.key_file = key;
  if (!server_name.empty()) tls.server_name = server_name;
  if (insecure) tls.insecure = true;
  Status s = tls.Validate();
  if (s.ok()) s = rendezvous::CheckClientTlsFiles(tls);  // the files too, before connecting
  if (!s.ok()) {
    return InvalidArgumentError(RenameTlsFields(
        s.message(), {"--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name", "--insecure"}));
  }
  return tls;
}

void ServerTlsFlags::Register(CLI::App& app) {
  app.add_option("--tls-cert", tls.cert_file,
                 "Serve gRPC over TLS only: this server's certificate chain (PEM)");
  app.add_option("--tls-key", tls.key_file, "The private key of --tls-cert (PEM, unencrypted)");
  app.add_option("--tls-client-ca", tls.client_ca_file,
                 "With --tls-cert: require client certificates signed by this CA (PEM; mutual TLS)");
  app.add_flag("--insecure", tls.insecure,
               "Without TLS: accept tokens from other hosts over plaintext gRPC (they can be read on "
               "the network; a warning is logged). Without it they are accepted only from this host "
               "(default: SWITCHML_INSECURE=1)");
}

StatusOr<rendezvous::ServerTlsOptions> ServerTlsFlags::Resolve() const {
  rendezvous::ServerTlsOptions resolved = tls;
  SWITCHML_ASSIGN_OR_RETURN(const bool from_env, InsecureFromEnvironment());
  resolved.insecure = tls.insecure || from_env;
  return resolved;
}

}  // namespace switchml::tools
