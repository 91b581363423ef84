// `switchml switch`: the software switch (UDP dataplane) with its controller (gRPC) embedded:
// the reference Session/Sync services (one UdpSession job) and the switchml.v1.JobService
// (several jobs, each with its own slots, workers and token; `switchml jobs ...` drives it).
// Runs until SIGINT/SIGTERM, then prints its counters.
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
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "controller/session_service.h"
#include "dataplane/switch_server.h"
#include "wire/packet.h"
#include "cli_util.h"
#include "commands.h"
#include "job_flags.h"
#include "transport/arp_announce.h"
#include "transport/kernel_counters.h"
#include "transport/netif.h"
#include "transport/raw_channel.h"
#include "transport/udp_channel.h"

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
  double job_idle_timeout_s = 600;
  // Raw receive ring and gratuitous ARP (issue #18).
  uint32_t raw_ring_frames = 0;  // 0 = LargestBurstDatagrams, at most kDefaultRawRingFramesCap
  double announce_interval_s = 10;
};

// The default raw ring holds at most this many frames per I/O thread (64 workers x a window of
// 256; about 66 MiB of pinned kernel memory with 1024-element packets, 18 MiB with 256).
constexpr uint32_t kDefaultRawRingFramesCap = 16384;

// Every counter of the switch by name: the server's, its channels' (raw_*, udp_*) and, in
// kernel-UDP mode, the kernel's receive errors in this network namespace since `kernel_base`
// (kernel_*).
std::vector<std::pair<std::string, uint64_t>> AllCounters(
    const dataplane::SwitchServer& server,
    const std::vector<std::pair<std::string, uint64_t>>* kernel_base) {
  std::vector<std::pair<std::string, uint64_t>> out = server.counters().Named();
  for (auto& c : server.transport_counters()) out.push_back(std::move(c));
  if (kernel_base != nullptr) {
    for (auto& [name, value] : transport::ReadKernelDropCounters()) {
      uint64_t base = 0;
      for (const auto& [n, v] : *kernel_base) {
        if (n == name) base = v;
      }
      out.emplace_back(name, value >= base ? value - base : 0);
    }
  }
  return out;
}

// Workers registered in every live job, the reference session's included.
uint32_t RegisteredWorkers(const dataplane::SwitchServer& server) {
  const auto jobs = server.jobs();
  uint32_t n = jobs->reference().num_registered;
  for (const auto& j : jobs->jobs()) {
    if (j.state != control::JobState::kEnded) n += j.num_registered;
  }
  return n;
}

// Removes a generated token file and its private directory at exit.
struct TokenFileCleanup {
  std::string path;
  ~TokenFileCleanup() {
    if (path.empty()) return;
    std::remove(path.c_str());
    ::rmdir(path.substr(0, path.rfind('/')).c_str());
  }
};

int Run(const SwitchArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "switchml switch: error: " << m << "\n";
    return 1;
  };
  if (a.port > 65535) return fail("--port must be in [0, 65535], got " + std::to_string(a.port));
  if (a.controller_port > 65535)
    return fail("--controller-port must be in [0, 65535], got " + std::to_string(a.controller_port));
  auto bind = transport::ParseEndpoint(a.bind, uint16_t(a.port));
  if (!bind.ok()) return fail("--bind: " + bind.status().message());
  bind->port = uint16_t(a.port);

  dataplane::SwitchConfig cfg;
  cfg.num_slots = a.slots;
  cfg.max_elements_per_packet = a.max_elements;
  cfg.max_workers = a.max_workers;
  cfg.ingress_drop_probability = a.ingress_drop;
  cfg.egress_drop_probability = a.egress_drop;
  cfg.drop_seed = a.drop_seed;
  cfg.late_duplicate_guard = a.late_duplicate_guard;
  cfg.advertised_ipv4 = bind->ipv4;
  cfg.io_threads = a.io_threads;
  if (Status s = cfg.Validate(); !s.ok()) return fail(s.message());
  if (a.port != 0 && a.port + a.io_threads - 1 > 65535) {
    return fail("--port " + std::to_string(a.port) + " with --io-threads " +
                std::to_string(a.io_threads) + " needs ports up to " +
                std::to_string(a.port + a.io_threads - 1) + " > 65535");
  }
  if (!(a.job_idle_timeout_s >= 0) || a.job_idle_timeout_s > 4e6) {
    return fail("--job-idle-timeout-s must be in [0, 4e6], got " +
                std::to_string(a.job_idle_timeout_s));
  }
  auto cred = a.operator_token.Resolve("switchml switch");
  if (!cred.ok()) return fail(cred.status().message());
  TokenFileCleanup generated;
  if (cred->token.empty()) {
    cred->token = rendezvous::GenerateOperatorToken();
    const char* tmpdir = std::getenv("TMPDIR");
    const std::string dir = std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") +
                            "/switchml-switch.XXXXXX";
    auto path = rendezvous::WritePrivateTokenFile(dir, cred->token);
    if (!path.ok()) return fail("cannot store the generated operator credential: " + path.status().message());
    generated.path = *path;
    cred->source = "generated, in " + *path;
  }

  // Signals are taken synchronously by this thread: block them before any thread starts so
  // every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // The interface the data plane uses: --iface, else the one holding --bind, else (0.0.0.0)
  // the first one up with an IPv4 address. Its MAC is what registrations advertise
  // (reference clients address their frames to it).
  const bool raw = a.io == "raw";
  if (!raw && a.io != "udp") return fail("--io must be udp or raw, got '" + a.io + "'");
  if (raw && bind->ipv4 == 0) return fail("--io raw needs --bind IP, an address of the interface it reads");
  if (raw && a.port == 0) return fail("--io raw needs a fixed --port (it filters frames by port)");
  std::string iface = a.iface;
  if (iface.empty()) {
    auto found = bind->ipv4 != 0 ? transport::InterfaceOfIpv4(bind->ipv4) : transport::FirstDataInterface();
    if (found.ok()) {
      iface = *found;
    } else if (bind->ipv4 != 0 || raw) {
      return fail("--bind: " + found.status().message());
    } else {
      std::printf("switchml switch: advertising MAC %s: %s\n",
                  transport::MacToString(transport::MacFromUint64(cfg.mac)).c_str(),
                  found.status().message().c_str());
    }
  }
  if (!iface.empty()) {
    auto mac = transport::InterfaceMac(iface);
    if (!mac.ok()) return fail("--iface: " + mac.status().message());
    cfg.mac = transport::MacToUint64(*mac);
  }
  if (a.busy_poll_us > 1000000) return fail("--busy-poll-us must be in [0, 1000000], got " + std::to_string(a.busy_poll_us));
  // Raw receive ring of each I/O thread: room for the largest first burst (LargestBurstDatagrams)
  // unless that is more than the default cap or --raw-ring-frames says otherwise; slots for the
  // largest packet the switch accepts.
  const uint64_t largest_burst = cfg.LargestBurstDatagrams();
  const uint32_t raw_ring_frames =
      a.raw_ring_frames != 0 ? a.raw_ring_frames
                             : uint32_t(std::min<uint64_t>(largest_burst, kDefaultRawRingFramesCap));
  const uint32_t raw_max_payload = uint32_t(wire::PacketBytes(cfg.max_elements_per_packet));
  if (raw && a.raw_ring_frames > transport::RawChannel::kMaxRingFrames) {
    return fail("--raw-ring-frames must be in [1, " +
                std::to_string(transport::RawChannel::kMaxRingFrames) + "], got " +
                std::to_string(a.raw_ring_frames));
  }
  if (raw && transport::RawChannel::RingBytes(raw_ring_frames, raw_max_payload) >
                 transport::RawChannel::kMaxRingBytes) {
    return fail("--raw-ring-frames " + std::to_string(raw_ring_frames) + " with --max-elements " +
                std::to_string(cfg.max_elements_per_packet) + " needs a receive ring of " +
                std::to_string(transport::RawChannel::RingBytes(raw_ring_frames, raw_max_payload) >> 20) +
                " MiB per I/O thread, more than the " +
                std::to_string(transport::RawChannel::kMaxRingBytes >> 20) + " MiB allowed");
  }
  if (!(a.announce_interval_s >= 0) || a.announce_interval_s > 3600) {
    return fail("--announce-interval-s must be in [0, 3600], got " +
                std::to_string(a.announce_interval_s));
  }
  // I/O thread i takes --port + i (each a free port with --port 0, kernel UDP only).
  std::vector<std::unique_ptr<transport::Channel>> channels;
  std::vector<uint16_t> udp_ports;
  for (uint32_t i = 0; i < cfg.io_threads; ++i) {
    StatusOr<std::unique_ptr<transport::Channel>> channel = InternalError("no channel");
    if (raw) {
      transport::RawChannelOptions ro;
      ro.interface = iface;
      ro.local = transport::Endpoint{bind->ipv4, uint16_t(a.port + i)};
      ro.accept_bad_checksums = !a.refuse_bad_checksums;
      ro.max_payload = raw_max_payload;
      ro.ring_frames = raw_ring_frames;
      auto ch = transport::RawChannel::Create(ro);
      if (ch.ok()) channel = std::unique_ptr<transport::Channel>(std::move(*ch));
      else channel = ch.status();
    } else {
      transport::UdpChannelOptions uo;
      uo.local = *bind;
      if (a.port != 0) uo.local.port = uint16_t(a.port + i);
      uo.gso = uo.gro = !a.no_udp_offload;
      uo.busy_poll = std::chrono::microseconds(a.busy_poll_us);
      auto ch = transport::UdpChannel::Create(uo);
      if (ch.ok()) channel = std::unique_ptr<transport::Channel>(std::move(*ch));
      else channel = ch.status();
    }
    if (!channel.ok()) {
      return fail("I/O thread " + std::to_string(i) + ": " + channel.status().ToString());
    }
    udp_ports.push_back((*channel)->local_endpoint().port);
    channels.push_back(std::move(*channel));
  }
  const uint16_t udp_port = udp_ports[0];
  auto server = dataplane::SwitchServer::Create(cfg, std::move(channels));
  if (!server.ok()) return fail(server.status().ToString());
  // Kernel UDP: the kernel must resolve every worker's MAC to send its results, and reference
  // clients never answer ARP: with --neighbour-entries, a neighbour entry for every worker that
  // registered its MAC, if CheckNeighbourEntry allows it (else its registration is refused);
  // removed when it is forgotten, and at exit. A raw channel learns MACs from the frames.
  std::unique_ptr<transport::NeighbourEntries> neighbours;
  auto registrant = [](const control::JobRegistration& r) {
    return "job " + std::to_string(r.job_id) + " rank " + std::to_string(r.worker.rank);
  };
  if (a.neighbours) {
    if (raw) {
      return fail("--neighbour-entries is for --io udp: with --io raw the switch answers every "
                  "worker at the MAC its frames come from and needs no neighbour entries");
    }
    if (iface.empty()) {
      return fail("--neighbour-entries needs a data interface: none is up with an IPv4 address; "
                  "name one with --iface or --bind IP");
    }
    auto n = transport::NeighbourEntries::Open(iface);
    if (!n.ok()) return fail("--neighbour-entries: " + n.status().message());
    neighbours = std::move(*n);
    if (neighbours->removed_at_open() > 0) {
      std::printf("switchml switch: removed %zu neighbour entries (proto %u) an earlier run left on %s\n",
                  neighbours->removed_at_open(), unsigned(transport::kSwitchNeighbourProtocol), iface.c_str());
    }
    (*server)->SetRegistrationCheck([n = neighbours.get(), registrant](
                                        const control::JobRegistration& r) -> Status {
      if (r.worker.mac == 0) return OkStatus();
      const auto allowed = n->Check(r.worker.ipv4, transport::MacFromUint64(r.worker.mac));
      if (allowed.ok()) return OkStatus();
      const std::string why = registrant(r) + ": " + allowed.status().message();
      std::fprintf(stderr, "switchml switch: refused a registration: %s\n", why.c_str());
      return Status(allowed.status().code(), why);  // FailedPrecondition, or why it could not tell
    });
    (*server)->SetWorkersListener([n = neighbours.get(), warned = false](
                                      const dataplane::SwitchServer::WorkerAddresses& workers) mutable {
      std::vector<std::pair<uint32_t, transport::MacAddress>> wanted;
      for (const auto& [ip, mac] : workers) wanted.emplace_back(ip, transport::MacFromUint64(mac));
      const Status s = n->Sync(wanted);
      if (!s.ok() && !warned) {
        warned = true;  // once: a switch without CAP_NET_ADMIN would say it on every registration
        std::fprintf(stderr, "switchml switch: warning: %s; workers that do not answer ARP (reference "
                     "clients) get no results from this switch\n", s.message().c_str());
      }
    });
  } else if (!iface.empty()) {
    // Entries of ours that a killed run with --neighbour-entries left (or a switch still running
    // with it on this interface): named, not removed.
    if (auto host = transport::ReadNeighbourHost(iface); host.ok()) {
      size_t ours = 0;
      for (const auto& e : host->neighbours) ours += e.ours() ? 1 : 0;
      if (ours > 0) {
        std::fprintf(stderr, "switchml switch: warning: %s has %zu neighbour entries (proto %u) that a "
                     "switch with --neighbour-entries installed and did not remove; a switch started "
                     "with --neighbour-entries removes them (`ip neigh show dev %s` lists them)\n",
                     iface.c_str(), ours, unsigned(transport::kSwitchNeighbourProtocol), iface.c_str());
      }
    }
    if (!raw) {
      (*server)->SetRegistrationCheck([registrant, noted = false](
                                          const control::JobRegistration& r) mutable -> Status {
        if (r.worker.mac != 0 && !noted) {
          noted = true;  // once (registrations are serialised under the table lock)
          std::printf("switchml switch: note: %s registered a MAC (%s): a worker that never answers "
                      "ARP (a reference client) gets no results from this switch unless it runs with "
                      "--neighbour-entries or --io raw\n",
                      registrant(r).c_str(), transport::MacToString(transport::MacFromUint64(r.worker.mac)).c_str());
          std::fflush(stdout);
        }
        return OkStatus();
      });
    }
  }
  if (Status s = (*server)->Start(); !s.ok()) return fail(s.ToString());
  // Gratuitous ARP on the data interface at start and every --announce-interval-s, so that
  // bridges learn the switch's MAC before the first request (transport/arp_announce.h).
  std::unique_ptr<transport::ArpAnnouncer> announcer;
  std::string announce_note;
  if (a.announce_interval_s > 0 && !iface.empty() && bind->ipv4 != 0) {
    auto an = transport::ArpAnnouncer::Create(iface, bind->ipv4);
    Status first = an.ok() ? (*an)->Announce() : an.status();
    if (first.ok()) {
      announcer = std::move(*an);
      char every[32];
      std::snprintf(every, sizeof(every), "%g s", a.announce_interval_s);
      announce_note = "gratuitous ARP for " + a.bind + " (MAC " +
                      transport::MacToString(announcer->mac()) + ") on " + iface +
                      " at start and every " + every;
    } else if (first.code() == StatusCode::kFailedPrecondition) {
      // Not Ethernet (loopback): no bridge to teach.
    } else if (raw) {
      return fail("--announce-interval-s: " + first.message());
    } else {
      std::fprintf(stderr, "switchml switch: warning: no gratuitous ARP (%s); bridges between the "
                   "switch and its workers flood frames to its MAC until they see one from it\n",
                   first.message().c_str());
    }
  }

  controller::ServerOptions so;
  so.listen_address = a.bind + ":" + std::to_string(a.controller_port);
  so.operator_token = cred->token;
  so.default_job_idle_timeout = std::chrono::milliseconds(int64_t(a.job_idle_timeout_s * 1000));
  // The switch is both the session sink (reference UdpSession) and the job sink (JobService).
  auto ctl = controller::ControllerServer::Start(so, server->get());
  if (!ctl.ok()) return fail("session service: " + ctl.status().ToString());

  std::printf("switchml switch: data plane on %s %s:%u, session service on %s:%d, %u slots, "
              "up to %u elements/packet, up to %u workers\n",
              raw ? ("raw frames of " + iface).c_str() : "udp", a.bind.c_str(), udp_port, a.bind.c_str(),
              (*ctl)->port(), cfg.num_slots, cfg.max_elements_per_packet, cfg.max_workers);
  if (!iface.empty()) {
    std::printf("switchml switch: advertising MAC %s (%s)%s\n",
                transport::MacToString(transport::MacFromUint64(cfg.mac)).c_str(), iface.c_str(),
                raw ? (a.refuse_bad_checksums ? "; frames with unfinished or wrong checksums are refused"
                                              : "; frames are accepted whatever their checksums (counted by reason)")
                    : (neighbours ? "; neighbour entries (proto 83) for workers that register their MAC"
                                  : "; no neighbour entries (--neighbour-entries: for reference clients)"));
  }
  if (raw) {
    std::printf("switchml switch: raw receive ring: %u frames (at least) of up to %u bytes per I/O thread (%llu MiB)",
                raw_ring_frames, raw_max_payload,
                (unsigned long long)(transport::RawChannel::RingBytes(raw_ring_frames, raw_max_payload) >> 20));
    if (raw_ring_frames < largest_burst) {
      std::printf("; fewer than the largest first burst (--slots %u x --max-workers %u = %llu): "
                  "sessions with more packets in flight at once (workers x window) may lose frames "
                  "to a full ring (raw_ring_drops); --raw-ring-frames sizes it",
                  cfg.num_slots, cfg.max_workers, (unsigned long long)largest_burst);
    }
    std::printf("\n");
  }
  if (!announce_note.empty()) std::printf("switchml switch: %s\n", announce_note.c_str());
  if (cfg.io_threads > 1) {
    std::string ports;
    for (uint16_t p : udp_ports) ports += (ports.empty() ? "" : ", ") + std::to_string(p);
    std::printf("switchml switch: %u I/O threads on udp ports %s (reference clients: %u)\n",
                cfg.io_threads, ports.c_str(), udp_port);
  }
  std::printf("switchml switch: job service (switchml.v1) on the same port; jobs share a pool of %u "
              "slots; default job idle timeout %g s\n",
              cfg.num_slots, a.job_idle_timeout_s);
  std::printf("switchml switch: operator credential: %s\n", cred->source.c_str());
  if (!generated.path.empty()) {
    std::printf("switchml switch: `switchml jobs` needs it: --operator-token-file %s (or "
                "export SWITCHML_OPERATOR_TOKEN=$(cat %s)); the file is removed at exit\n",
                generated.path.c_str(), generated.path.c_str());
  }
  if (a.ingress_drop > 0 || a.egress_drop > 0)
    std::printf("switchml switch: drop simulator on: ingress %g, egress %g, seed %llu\n", a.ingress_drop,
                a.egress_drop, (unsigned long long)a.drop_seed);
  std::fflush(stdout);
  if (!a.ready_file.empty()) {
    const std::string tmp = a.ready_file + ".tmp";
    nlohmann::json ready{{"udp_port", udp_port},
                         {"udp_ports", udp_ports},
                         {"controller_port", (*ctl)->port()}};
    if (!generated.path.empty()) ready["operator_token_file"] = generated.path;
    std::ofstream(tmp) << ready.dump() << "\n";
    std::rename(tmp.c_str(), a.ready_file.c_str());
  }

  const auto start = std::chrono::steady_clock::now();
  // Kernel-UDP mode: the kernel's receive errors, counted from here (kernel_* = the increase).
  std::vector<std::pair<std::string, uint64_t>> kernel_base;
  if (!raw) kernel_base = transport::ReadKernelDropCounters();
  const auto* kernel = raw ? nullptr : &kernel_base;
  auto last_stats = start;
  auto last_announce = start;
  auto last_kernel_check = start;
  std::vector<std::pair<std::string, uint64_t>> last_kernel = kernel_base;
  bool kernel_warned = false;
  std::map<std::string, uint64_t> shown;  // values at the last --stats-interval print
  for (const auto& [name, value] : AllCounters(**server, kernel)) shown[name] = value;
  while (true) {
    timespec ts{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("switchml switch: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (announcer && now - last_announce >= std::chrono::duration<double>(a.announce_interval_s)) {
      last_announce = now;
      (void)announcer->Announce();  // best effort: the interface may be down for a moment
    }
    // Kernel-UDP mode, once a second: datagrams the kernel dropped before the switch's socket
    // (checksums, headers, a full buffer) while workers are registered get one warning.
    if (!raw && !kernel_warned && now - last_kernel_check >= std::chrono::seconds(1)) {
      last_kernel_check = now;
      const auto current = transport::ReadKernelDropCounters();
      std::string rose;
      for (const auto& [name, value] : current) {
        for (const auto& [n, before] : last_kernel) {
          if (n == name && value > before && name != "kernel_ip_in_addr_errors" &&
              name != "kernel_ip_in_discards") {
            rose += (rose.empty() ? "" : ", ") + name + " +" + std::to_string(value - before);
          }
        }
      }
      if (!rose.empty() && RegisteredWorkers(**server) > 0) {
        kernel_warned = true;
        std::fprintf(stderr,
                     "switchml switch: warning: the kernel dropped UDP/IP datagrams in this network "
                     "namespace while workers are registered (%s): they never reach the switch. "
                     "Reference DPDK clients leave their checksums to NIC offload: serve them with "
                     "--io raw (docs/operations.md, \"Serving reference clients\")\n",
                     rose.c_str());
      }
      last_kernel = current;
    }
    if (a.stats_interval_s > 0 && now - last_stats > std::chrono::duration<double>(a.stats_interval_s)) {
      // Every counter that moved since the last print: total and change.
      std::string lines;
      for (const auto& [name, value] : AllCounters(**server, kernel)) {
        uint64_t& before = shown[name];
        if (value == before) continue;
        char line[160];
        std::snprintf(line, sizeof(line), "  %-36s %14llu  %+lld\n", name.c_str(),
                      (unsigned long long)value, (long long)(value - before));
        lines += line;
        before = value;
      }
      std::printf("switchml switch: stats at %.1f s: %s\n%s",
                  std::chrono::duration<double>(now - start).count(),
                  lines.empty() ? "no counter moved" : "counters that moved (total, change):",
                  lines.c_str());
      std::fflush(stdout);
      last_stats = now;
    }
  }
  (*ctl)->Shutdown();
  (*server)->Stop();
  const auto counters = (*server)->counters();
  std::printf("switchml switch: counters after %.1f s:\n%s", 
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              counters.FormatTable().c_str());
  // The channels' own counters (raw_*, udp_*) summed over the I/O threads, and in kernel-UDP
  // mode the kernel's receive errors while the switch ran (kernel_*); the non-zero ones here,
  // all of them in --counters-json.
  std::vector<std::pair<std::string, uint64_t>> raw_counters = (*server)->transport_counters();
  if (kernel != nullptr) {
    const auto all = AllCounters(**server, kernel);
    for (const auto& c : all) {
      if (c.first.starts_with("kernel_")) raw_counters.push_back(c);
    }
  }
  for (const auto& [name, value] : raw_counters) {
    if (value != 0) std::printf("  %-36s %llu\n", name.c_str(), (unsigned long long)value);
  }
  if (cfg.io_threads > 1) {
    for (uint32_t i = 0; i < cfg.io_threads; ++i) {
      const auto c = (*server)->io_thread_counters(i);
      std::printf("switchml switch: I/O thread %u (udp %u): %llu received, %llu sent, %llu "
                  "wrong_io_thread\n",
                  i, udp_ports[i], (unsigned long long)c.core.datagrams_received,
                  (unsigned long long)c.core.datagrams_sent,
                  (unsigned long long)c.core.wrong_io_thread);
    }
  }
  if (!a.counters_json.empty()) {
    nlohmann::json j;
    for (auto& [name, value] : counters.Named()) j[name] = value;
    for (auto& [name, value] : raw_counters) j[name] = value;
    if (cfg.io_threads > 1) {  // the sums above, and each I/O thread's own
      nlohmann::json per = nlohmann::json::array();
      for (uint32_t i = 0; i < cfg.io_threads; ++i) {
        nlohmann::json t;
        for (auto& [name, value] : (*server)->io_thread_counters(i).Named()) t[name] = value;
        per.push_back(std::move(t));
      }
      j["per_io_thread"] = std::move(per);
    }
    std::ofstream(a.counters_json) << j.dump(2) << "\n";
  }
  std::fflush(stdout);
  return 0;
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
                 "\"operator_token_file\" when the credential was generated) as JSON to FILE once "
                 "serving; udp_port is I/O thread 0's, udp_ports every I/O thread's");
  app.add_option("--stats-interval", a->stats_interval_s,
                 "Every N seconds print every counter that moved since the last print (total and "
                 "change): the switch's, its transport's (raw_*, udp_socket_drops) and in kernel-UDP "
                 "mode the kernel's receive errors since start (kernel_*); 0 = only at exit")
      ->capture_default_str();
  app.add_option("--counters-json", a->counters_json, "Write the final counters as JSON to FILE at exit");
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
                 "at most " + std::to_string(kDefaultRawRingFramesCap) + "; a fuller ring drops "
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
  a->operator_token.Register(app, "to authenticate job administration (`switchml jobs`); "
                             "with neither, a random one is generated and its file named in the log");
  app.add_option("--job-idle-timeout-s", a->job_idle_timeout_s,
                 "Idle timeout of a job created without one (0 = such jobs never expire)")
      ->capture_default_str();
  app.add_option("--busy-poll-us", a->busy_poll_us,
                 "Poll the socket this long before sleeping when idle (0 = off, max 1000000); costs a core")
      ->capture_default_str();
  return [a] { return Run(*a); };
}

}  // namespace switchml::tools
