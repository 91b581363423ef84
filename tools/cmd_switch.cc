// `switchml switch`: the software switch (UDP dataplane) with its controller (gRPC) embedded:
// the reference Session/Sync services (one UdpSession job) and the switchml.v1.JobService
// (several jobs, each with its own slots, workers and token; `switchml jobs ...` drives it).
// Runs until SIGINT/SIGTERM, then prints its counters. This file is flags -> options, one
// SwitchService (switch_service.h: the switch on this host, a dataplane::SwitchHost, with the
// controller, the operator credential, the startup lines and the ready file), the wait for a
// signal with --stats-interval's prints, and the counters at exit.
//
// Data plane input (--io): kernel UDP sockets (default), or raw frames read off --iface
// (transport/raw_channel.h), accepted whatever their IPv4/UDP checksums, for reference DPDK
// clients that leave them to NIC offload. Either way registrations advertise the interface's
// real MAC (docs/operations.md, "Serving reference clients").
//
// Neighbour entries (--neighbour-entries, off by default: nothing a worker sends changes the
// host unless the operator asked): in kernel-UDP mode, a permanent neighbour entry on the data
// interface for every worker that registers a MAC (reference clients never answer ARP), tagged
// as the switch's own (transport/netif.h). A registration whose address must not get one
// (transport::CheckNeighbourEntry: off the interface's subnets, the host's own, loopback, the
// gateway at another MAC, ...) is refused with FailedPrecondition naming the job, rank, address,
// MAC and reason. The entries a killed run left are removed at start, the others when their
// worker is forgotten and at exit. docs/operations.md, "Neighbour entries for reference clients".
//
// Job administration needs the operator credential (rendezvous/operator_auth.h): from
// --operator-token-file FILE (wins) or SWITCHML_OPERATOR_TOKEN; with neither the switch
// generates one, writes it to a new private file (/tmp/switchml-switch.XXXXXX/operator-token,
// mode 0600) that it names in its log and in the ready file ("operator_token_file"), and
// removes that file when it exits.
//
// What operators see (issue #18): --stats-interval prints every counter that moved (the
// switch's, the channels' raw_* / udp_socket_drops, and in kernel-UDP mode the kernel's receive
// errors of this network namespace, kernel_*); in kernel-UDP mode a rise of those while workers
// are registered is warned about once. The raw receive ring is sized for the largest first
// burst (--raw-ring-frames), and a gratuitous ARP at start and every --announce-interval-s
// teaches bridges the switch's MAC before workers send.
//
// --metrics-listen HOST:PORT serves Prometheus metrics (tools/metrics.h; docs/operations.md,
// "Monitoring"), started by SwitchService before the ready file is written.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "cli_util.h"
#include "commands.h"
#include "dataplane/switch_host.h"
#include "job_flags.h"
#include "metrics.h"
#include "switch_service.h"
#include "transport/channel.h"

namespace switchml::tools {

namespace {

struct SwitchArgs {
  std::string bind = "0.0.0.0";
  uint32_t port = 48864;
  uint32_t io_threads = 1;
  uint32_t controller_port = 50099;
  uint32_t slots = 8192;
  uint32_t max_elements = 1024;
  uint32_t max_workers = 256;
  double ingress_drop = 0;
  double egress_drop = 0;
  uint64_t drop_seed = 1;
  std::string ready_file;
  double stats_interval_s = 0;
  std::string counters_json;
  bool late_duplicate_guard = false;
  bool no_udp_offload = false;
  uint32_t busy_poll_us = 0;
  std::string io = "udp";
  std::string iface;
  bool refuse_bad_checksums = false;
  bool neighbours = false;  // --neighbour-entries / --no-neighbour-entries
  OperatorTokenFlag operator_token;
  ServerTlsFlags tls;
  double job_idle_timeout_s = 600;
  // Raw receive ring and gratuitous ARP (issue #18).
  uint32_t raw_ring_frames = 0;  // 0 = LargestBurstDatagrams, at most kDefaultRawRingFramesCap
  double announce_interval_s = 10;
  std::string metrics_listen;  // empty = off
};

// Takes SIGINT and SIGTERM synchronously (WaitForStop): blocked before any thread starts, so
// that every thread inherits the mask.
sigset_t BlockStopSignals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  return sigs;
}

// Waits for SIGINT or SIGTERM (returns its name), calling `tick` every 200 ms meanwhile.
template <typename Tick>
const char* WaitForStop(const sigset_t& sigs, Tick tick) {
  while (true) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    tick();
  }
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --stats-interval: every counter that moved since the last print (`shown`), total and change.
void PrintMovedCounters(const dataplane::SwitchHost& host, double elapsed_s,
                        std::map<std::string, uint64_t>& shown) {
  std::string lines;
  for (const auto& [name, value] : host.AllCounters()) {
    uint64_t& before = shown[name];
    if (value == before) continue;
    char line[160];
    std::snprintf(line, sizeof(line), "  %-36s %14llu  %+lld\n", name.c_str(),
                  (unsigned long long)value, (long long)(value - before));
    lines += line;
    before = value;
  }
  std::printf("switchml switch: stats at %.1f s: %s\n%s", elapsed_s,
              lines.empty() ? "no counter moved" : "counters that moved (total, change):",
              lines.c_str());
  std::fflush(stdout);
}

// At exit: the switch's counters, the non-zero transport and kernel ones (all of them in
// --counters-json), each I/O thread's with several.
void PrintFinalCounters(const SwitchServiceCounters& c, const std::vector<uint16_t>& ports,
                        double elapsed_s) {
  std::printf("switchml switch: counters after %.1f s:\n%s", elapsed_s, c.total.FormatTable().c_str());
  for (const auto& [name, value] : c.transport) {
    if (value != 0) std::printf("  %-36s %llu\n", name.c_str(), (unsigned long long)value);
  }
  for (size_t i = 0; i < c.per_io_thread.size(); ++i) {
    const auto& t = c.per_io_thread[i].core;
    std::printf("switchml switch: I/O thread %zu (udp %u): %llu received, %llu sent, %llu "
                "wrong_io_thread\n",
                i, ports[i], (unsigned long long)t.datagrams_received,
                (unsigned long long)t.datagrams_sent, (unsigned long long)t.wrong_io_thread);
  }
}

int Run(const SwitchArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "switchml switch: error: " << m << "\n";
    return 1;
  };
  // Flags -> options.
  if (a.port > 65535) return fail("--port must be in [0, 65535], got " + std::to_string(a.port));
  if (a.controller_port > 65535)
    return fail("--controller-port must be in [0, 65535], got " + std::to_string(a.controller_port));
  auto bind = transport::ParseEndpoint(a.bind, uint16_t(a.port));
  if (!bind.ok()) return fail("--bind: " + bind.status().message());
  bind->port = uint16_t(a.port);
  if (!a.metrics_listen.empty()) {
    if (auto m = ParseMetricsListen("--metrics-listen", a.metrics_listen); !m.ok()) {
      return fail(m.status().message());
    }
  }
  if (a.io != "udp" && a.io != "raw") return fail("--io must be udp or raw, got '" + a.io + "'");
  if (!(a.job_idle_timeout_s >= 0) || a.job_idle_timeout_s > 4e6) {
    return fail("--job-idle-timeout-s must be in [0, 4e6], got " +
                std::to_string(a.job_idle_timeout_s));
  }
  SwitchServiceOptions o;
  dataplane::SwitchHostConfig& hc = o.host;
  dataplane::SwitchConfig& cfg = hc.switch_config;
  cfg.num_slots = a.slots;
  cfg.max_elements_per_packet = a.max_elements;
  cfg.max_workers = a.max_workers;
  cfg.ingress_drop_probability = a.ingress_drop;
  cfg.egress_drop_probability = a.egress_drop;
  cfg.drop_seed = a.drop_seed;
  cfg.late_duplicate_guard = a.late_duplicate_guard;
  cfg.io_threads = a.io_threads;
  hc.io = a.io == "raw" ? dataplane::SwitchHostConfig::Io::kRaw : dataplane::SwitchHostConfig::Io::kUdp;
  hc.bind = *bind;
  hc.iface = a.iface;
  hc.udp_offload = !a.no_udp_offload;
  hc.busy_poll_us = a.busy_poll_us;
  hc.refuse_bad_checksums = a.refuse_bad_checksums;
  hc.raw_ring_frames = a.raw_ring_frames;
  hc.neighbour_entries = a.neighbours;
  hc.announce_interval_s = a.announce_interval_s;
  hc.log = [](bool warning, const std::string& text) {
    std::fprintf(warning ? stderr : stdout, "switchml switch: %s\n", text.c_str());
    std::fflush(warning ? stderr : stdout);
  };
  if (Status s = cfg.Validate(); !s.ok()) return fail(s.message());
  o.listen_host = a.bind;
  o.controller_port = a.controller_port;
  o.default_job_idle_timeout = std::chrono::milliseconds(int64_t(a.job_idle_timeout_s * 1000));
  o.ready_file = a.ready_file;
  o.metrics_listen = a.metrics_listen;
  auto cred = a.operator_token.Resolve("switchml switch");
  if (!cred.ok()) return fail(cred.status().message());
  o.operator_token = cred->token;  // empty: SwitchService generates one
  o.operator_token_source = cred->source;
  auto tls = a.tls.Resolve();
  if (!tls.ok()) return fail(tls.status().message());
  o.tls = *tls;

  // Start (it logs what runs, then writes the ready file), wait, stop, print.
  const sigset_t sigs = BlockStopSignals();
  auto service = SwitchService::Start(std::move(o));
  if (!service.ok()) return fail(service.status().message());
  const dataplane::SwitchHost& host = (*service)->host();
  const auto start = std::chrono::steady_clock::now();
  auto last_stats = start;
  std::map<std::string, uint64_t> shown;  // values at the last --stats-interval print
  for (const auto& [name, value] : host.AllCounters()) shown[name] = value;
  const char* signal_name = WaitForStop(sigs, [&] {
    const auto now = std::chrono::steady_clock::now();
    if (a.stats_interval_s > 0 && now - last_stats > std::chrono::duration<double>(a.stats_interval_s)) {
      PrintMovedCounters(host, SecondsSince(start), shown);
      last_stats = now;
    }
  });
  std::printf("switchml switch: %s received, shutting down\n", signal_name);
  (*service)->Stop();
  const SwitchServiceCounters counters = (*service)->Counters();
  PrintFinalCounters(counters, host.ports(), SecondsSince(start));
  if (!a.counters_json.empty()) std::ofstream(a.counters_json) << counters.ToJson().dump(2) << "\n";
  std::fflush(stdout);
  return 0;  // the service's destructor removes the host's neighbour entries
}

}  // namespace

Runner AddSwitchCommand(CLI::App& app) {
  auto a = std::make_shared<SwitchArgs>();
  app.add_option("--bind", a->bind, "IPv4 address to listen on (data plane and session service)")->capture_default_str();
  app.add_option("--port", a->port,
                 "UDP port of the data plane (0 = pick a free one); with --io-threads T, I/O "
                 "thread i listens on port + i")
      ->capture_default_str();
  app.add_option("--io-threads", a->io_threads,
                 "I/O threads (1..16), each with its own UDP port and its share of every job's "
                 "slots; workers learn the ports at registration, reference clients use the "
                 "first. Use about one per core the switch may have, leaving one core for the "
                 "controller and interrupts")
      ->capture_default_str();
  app.add_option("--controller-port", a->controller_port, "TCP port of the session service (0 = pick a free one)")
      ->capture_default_str();
  app.add_option("--slots", a->slots,
                 "Aggregator slots per set (1..16384): of the reference session, and the pool jobs share")
      ->capture_default_str();
  app.add_option("--max-elements", a->max_elements, "Largest packet accepted, in elements (64..1024)")
      ->capture_default_str();
  app.add_option("--max-workers", a->max_workers, "Most workers per job (1..256)")->capture_default_str();
  app.add_option("--ingress-drop", a->ingress_drop, "Drop simulator: probability to drop a request before aggregation")
      ->capture_default_str();
  app.add_option("--egress-drop", a->egress_drop, "Drop simulator: probability to drop all responses of a packet")
      ->capture_default_str();
  app.add_option("--drop-seed", a->drop_seed, "Seed of the drop simulator")->capture_default_str();
  app.add_option("--ready-file", a->ready_file,
                 "Write {\"udp_port\",\"udp_ports\",\"controller_port\"} (and "
                 "\"operator_token_file\" when the credential was generated, \"metrics_port\" with "
                 "--metrics-listen) as JSON to FILE once serving; udp_port is I/O thread 0's, "
                 "udp_ports every I/O thread's");
  app.add_option("--stats-interval", a->stats_interval_s,
                 "Every N seconds print every counter that moved since the last print (total and "
                 "change): the switch's, its transport's (raw_*, udp_socket_drops) and in kernel-UDP "
                 "mode the kernel's receive errors since start (kernel_*); 0 = only at exit")
      ->capture_default_str();
  app.add_option("--counters-json", a->counters_json, "Write the final counters as JSON to FILE at exit");
  app.add_option("--metrics-listen", a->metrics_listen,
                 "Serve Prometheus metrics at http://HOST:PORT/metrics (HOST an IPv4 address or "
                 "localhost; PORT 0 = a free one, logged and in the ready file as "
                 "\"metrics_port\"); off by default. docs/operations.md, \"Monitoring\"");
  app.add_flag("--late-duplicate-guard", a->late_duplicate_guard,
               "Drop late duplicates reordered behind a worker's next packet (not in the reference)");
  app.add_option("--io", a->io,
                 "Data plane input: udp (kernel UDP sockets) or raw (frames read off --iface with "
                 "an AF_PACKET ring, accepted whatever their IPv4/UDP checksums: what reference "
                 "DPDK clients send; needs --bind IP, a fixed --port and CAP_NET_RAW)")
      ->capture_default_str();
  app.add_option("--iface", a->iface,
                 "Interface of the data plane: its MAC is advertised to workers, raw mode reads "
                 "it, neighbour entries go on it (default: the one holding --bind; with 0.0.0.0 "
                 "the first one up with an IPv4 address)");
  app.add_option("--raw-ring-frames", a->raw_ring_frames,
                 "--io raw: frames the receive ring of each I/O thread holds (slots sized for "
                 "--max-elements). 0 = room for the largest first burst, --slots x --max-workers, "
                 "at most " + std::to_string(dataplane::SwitchHost::kDefaultRawRingFramesCap) + "; a fuller ring drops "
                 "frames (raw_ring_drops). At most 1 GiB of ring per I/O thread")
      ->capture_default_str();
  app.add_option("--announce-interval-s", a->announce_interval_s,
                 "Send a gratuitous ARP for --bind from --iface at start and every S seconds, so "
                 "that bridges learn the switch's MAC before workers send (needs CAP_NET_RAW; "
                 "0 = never; needs --bind IP)")
      ->capture_default_str();
  app.add_flag("--refuse-bad-checksums", a->refuse_bad_checksums,
               "--io raw: drop frames whose IPv4 or UDP checksum is zero, partial or wrong "
               "(counted) instead of accepting them");
  app.add_flag("--neighbour-entries,!--no-neighbour-entries", a->neighbours,
               "--io udp: install a permanent neighbour entry on --iface for every worker that "
               "registers a MAC (reference clients never answer ARP; needs CAP_NET_ADMIN); a "
               "worker whose address must not get one (not on the interface's subnets, the "
               "host's own, loopback, network/broadcast, already reached at another MAC) is "
               "refused at registration. Entries are tagged proto 83 and removed when the "
               "worker is forgotten, at exit and (after a crash) at the next start. Default: "
               "off (--no-neighbour-entries)");
  app.add_flag("--no-udp-offload", a->no_udp_offload,
               "Send and receive one datagram per message (no UDP GSO/GRO), for comparison");
  a->tls.Register(app);
  a->operator_token.Register(app, "to authenticate job administration (`switchml jobs`); "
                             "with neither, a random one is generated and its file named in the log");
  app.add_option("--job-idle-timeout-s", a->job_idle_timeout_s,
                 "Idle timeout of a job created without one (0 = such jobs never expire)")
      ->capture_default_str();
  app.add_option("--busy-poll-us", a->busy_poll_us,
                 "Poll the socket this long before sleeping when idle (0 = off, max 1000000); costs a core")
      ->capture_default_str();
  AddConfigFileOption(app);
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
