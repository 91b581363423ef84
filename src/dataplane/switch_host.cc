#include "dataplane/switch_host.h"

#include <algorithm>
#include <cstdio>

#include "transport/arp_announce.h"
#include "transport/kernel_counters.h"
#include "transport/netif.h"
#include "transport/raw_channel.h"
#include "transport/udp_channel.h"
#include "wire/packet.h"

namespace switchml::dataplane {

namespace {

// Workers registered in every live job, the reference session's included.
uint32_t RegisteredWorkers(const SwitchServer& server) {
  const auto jobs = server.jobs();
  uint32_t n = jobs->reference().num_registered;
  for (const auto& j : jobs->jobs()) {
    if (j.state != control::JobState::kEnded) n += j.num_registered;
  }
  return n;
}

std::string Registrant(const control::JobRegistration& r) {
  return "job " + std::to_string(r.job_id) + " rank " + std::to_string(r.worker.rank);
}

}  // namespace

SwitchHost::SwitchHost(SwitchHostConfig config) : config_(std::move(config)) {}

SwitchHost::~SwitchHost() {
  Stop();
  server_.reset();  // before neighbours_: its listener points at them
}

void SwitchHost::Log(bool warning, const std::string& text) const {
  if (config_.log) config_.log(warning, text);
}

StatusOr<std::unique_ptr<SwitchHost>> SwitchHost::Create(SwitchHostConfig config) {
  auto host = std::unique_ptr<SwitchHost>(new SwitchHost(std::move(config)));
  SwitchHostConfig& c = host->config_;
  SwitchConfig& cfg = c.switch_config;
  using Io = SwitchHostConfig::Io;
  const bool raw = c.io == Io::kRaw;
  const bool factory = c.io == Io::kFactory;
  cfg.advertised_ipv4 = c.bind.ipv4;
  SWITCHML_RETURN_IF_ERROR(cfg.Validate());
  if (c.bind.port != 0 && uint32_t{c.bind.port} + cfg.io_threads - 1 > 65535) {
    return InvalidArgumentError("--port " + std::to_string(c.bind.port) + " with --io-threads " +
                                std::to_string(cfg.io_threads) + " needs ports up to " +
                                std::to_string(c.bind.port + cfg.io_threads - 1) + " > 65535");
  }
  if (factory && !c.channel_factory) {
    return InvalidArgumentError("channel_factory: needed with Io::kFactory");
  }
  if (raw && c.bind.ipv4 == 0) {
    return InvalidArgumentError("--io raw needs --bind IP, an address of the interface it reads");
  }
  if (raw && c.bind.port == 0) {
    return InvalidArgumentError("--io raw needs a fixed --port (it filters frames by port)");
  }

  // The interface the data plane uses, whose MAC registrations advertise (reference clients
  // address their frames to it).
  if (!factory) {
    host->iface_ = c.iface;
    if (host->iface_.empty()) {
      auto found = c.bind.ipv4 != 0 ? transport::InterfaceOfIpv4(c.bind.ipv4)
                                    : transport::FirstDataInterface();
      if (found.ok()) {
        host->iface_ = *found;
      } else if (c.bind.ipv4 != 0 || raw) {
        return Status(found.status().code(), "--bind: " + found.status().message());
      } else {
        host->Log(false, "advertising MAC " +
                             transport::MacToString(transport::MacFromUint64(cfg.mac)) + ": " +
                             found.status().message());
      }
    }
    if (!host->iface_.empty()) {
      auto mac = transport::InterfaceMac(host->iface_);
      if (!mac.ok()) return Status(mac.status().code(), "--iface: " + mac.status().message());
      cfg.mac = transport::MacToUint64(*mac);
    }
  }
  if (c.busy_poll_us > 1000000) {
    return InvalidArgumentError("--busy-poll-us must be in [0, 1000000], got " +
                                std::to_string(c.busy_poll_us));
  }
  // Raw receive ring of each I/O thread: room for the largest first burst unless that is more
  // than the default cap or raw_ring_frames says otherwise; slots for the largest packet the
  // switch accepts.
  const uint64_t largest_burst = cfg.LargestBurstDatagrams();
  host->raw_ring_frames_ =
      c.raw_ring_frames != 0 ? c.raw_ring_frames
                             : uint32_t(std::min<uint64_t>(largest_burst, kDefaultRawRingFramesCap));
  const uint32_t raw_max_payload = uint32_t(wire::PacketBytes(cfg.max_elements_per_packet));
  if (raw && c.raw_ring_frames > transport::RawChannel::kMaxRingFrames) {
    return InvalidArgumentError("--raw-ring-frames must be in [1, " +
                                std::to_string(transport::RawChannel::kMaxRingFrames) + "], got " +
                                std::to_string(c.raw_ring_frames));
  }
  const uint64_t ring_bytes = transport::RawChannel::RingBytes(host->raw_ring_frames_, raw_max_payload);
  if (raw && ring_bytes > transport::RawChannel::kMaxRingBytes) {
    return InvalidArgumentError(
        "--raw-ring-frames " + std::to_string(host->raw_ring_frames_) + " with --max-elements " +
        std::to_string(cfg.max_elements_per_packet) + " needs a receive ring of " +
        std::to_string(ring_bytes >> 20) + " MiB per I/O thread, more than the " +
        std::to_string(transport::RawChannel::kMaxRingBytes >> 20) + " MiB allowed");
  }
  if (!(c.announce_interval_s >= 0) || c.announce_interval_s > 3600) {
    return InvalidArgumentError("--announce-interval-s must be in [0, 3600], got " +
                                std::to_string(c.announce_interval_s));
  }
  if (c.neighbour_entries && raw) {
    return InvalidArgumentError(
        "--neighbour-entries is for --io udp: with --io raw the switch answers every worker at "
        "the MAC its frames come from and needs no neighbour entries");
  }
  if (c.neighbour_entries && factory) {
    return InvalidArgumentError("--neighbour-entries needs --io udp (not a channel factory)");
  }

  // I/O thread i takes bind.port + i (each a free port with port 0, kernel UDP only).
  std::vector<std::unique_ptr<transport::Channel>> channels;
  for (uint32_t i = 0; i < cfg.io_threads; ++i) {
    StatusOr<std::unique_ptr<transport::Channel>> channel = InternalError("no channel");
    if (factory) {
      channel = c.channel_factory(i);
    } else if (raw) {
      transport::RawChannelOptions ro;
      ro.interface = host->iface_;
      ro.local = transport::Endpoint{c.bind.ipv4, uint16_t(c.bind.port + i)};
      ro.accept_bad_checksums = !c.refuse_bad_checksums;
      ro.max_payload = raw_max_payload;
      ro.ring_frames = host->raw_ring_frames_;
      auto ch = transport::RawChannel::Create(ro);
      if (ch.ok()) host->raw_channels_.push_back(ch->get());
      if (ch.ok()) channel = std::unique_ptr<transport::Channel>(std::move(*ch));
      else channel = ch.status();
    } else {
      transport::UdpChannelOptions uo;
      uo.local = c.bind;
      if (c.bind.port != 0) uo.local.port = uint16_t(c.bind.port + i);
      uo.gso = uo.gro = c.udp_offload;
      uo.busy_poll = std::chrono::microseconds(c.busy_poll_us);
      auto ch = transport::UdpChannel::Create(uo);
      if (ch.ok()) channel = std::unique_ptr<transport::Channel>(std::move(*ch));
      else channel = ch.status();
    }
    if (!channel.ok()) {
      return Status(channel.status().code(),
                    "I/O thread " + std::to_string(i) + ": " + channel.status().ToString());
    }
    if (*channel == nullptr) {
      return InvalidArgumentError("channel_factory returned no channel for I/O thread " +
                                  std::to_string(i));
    }
    host->ports_.push_back((*channel)->local_endpoint().port);
    channels.push_back(std::move(*channel));
  }
  SWITCHML_ASSIGN_OR_RETURN(host->server_, SwitchServer::Create(cfg, std::move(channels)));
  SwitchServer& server = *host->server_;
  if (factory) return host;
  if (raw) {
    // The workers' registered MACs (the source neighbour entries use in kernel-UDP mode) reach
    // each raw channel: destinations it has not heard from yet are sent to at them.
    std::vector<transport::RawChannel*> chans = host->raw_channels_;
    server.SetWorkersListener([chans](const SwitchServer::WorkerAddresses& workers) {
      std::vector<std::pair<uint32_t, transport::MacAddress>> known;
      for (const auto& [ip, mac] : workers) known.emplace_back(ip, transport::MacFromUint64(mac));
      for (transport::RawChannel* ch : chans) ch->SetNeighbours(known);
    });
  }

  if (c.neighbour_entries) {
    if (host->iface_.empty()) {
      return FailedPreconditionError(
          "--neighbour-entries needs a data interface: none is up with an IPv4 address; name "
          "one with --iface or --bind IP");
    }
    auto n = transport::NeighbourEntries::Open(host->iface_);
    if (!n.ok()) return Status(n.status().code(), "--neighbour-entries: " + n.status().message());
    host->neighbours_ = std::move(*n);
    if (host->neighbours_->removed_at_open() > 0) {
      host->Log(false, "removed " + std::to_string(host->neighbours_->removed_at_open()) +
                           " neighbour entries (proto " +
                           std::to_string(unsigned(transport::kSwitchNeighbourProtocol)) +
                           ") an earlier run left on " + host->iface_);
    }
    SwitchHost* h = host.get();
    server.SetRegistrationCheck([h](const control::JobRegistration& r) -> Status {
      if (r.worker.mac == 0) return OkStatus();
      const auto allowed = h->neighbours_->Check(r.worker.ipv4, transport::MacFromUint64(r.worker.mac));
      if (allowed.ok()) return OkStatus();
      const std::string why = Registrant(r) + ": " + allowed.status().message();
      h->Log(true, "refused a registration: " + why);
      return Status(allowed.status().code(), why);  // FailedPrecondition, or why it could not tell
    });
    server.SetWorkersListener([h, warned = false](const SwitchServer::WorkerAddresses& workers) mutable {
      std::vector<std::pair<uint32_t, transport::MacAddress>> wanted;
      for (const auto& [ip, mac] : workers) wanted.emplace_back(ip, transport::MacFromUint64(mac));
      const Status s = h->neighbours_->Sync(wanted);
      if (!s.ok() && !warned) {
        warned = true;  // once: a switch without CAP_NET_ADMIN would say it on every registration
        h->Log(true, "warning: " + s.message() +
                         "; workers that do not answer ARP (reference clients) get no results "
                         "from this switch");
      }
    });
  } else if (!host->iface_.empty()) {
    // Entries of ours that a killed run with neighbour entries left (or a switch still running
    // with them on this interface): named, not removed.
    if (auto nh = transport::ReadNeighbourHost(host->iface_); nh.ok()) {
      size_t ours = 0;
      for (const auto& e : nh->neighbours) ours += e.ours() ? 1 : 0;
      if (ours > 0) {
        const std::string proto = std::to_string(unsigned(transport::kSwitchNeighbourProtocol));
        host->Log(true, "warning: " + host->iface_ + " has " + std::to_string(ours) +
                            " neighbour entries (proto " + proto +
                            ") that a switch with --neighbour-entries installed and did not "
                            "remove; a switch started with --neighbour-entries removes them (`ip "
                            "neigh show dev " + host->iface_ + "` lists them)");
      }
    }
    if (!raw) {
      SwitchHost* h = host.get();
      server.SetRegistrationCheck([h, noted = false](const control::JobRegistration& r) mutable -> Status {
        if (r.worker.mac != 0 && !noted) {
          noted = true;  // once (registrations are serialised under the table lock)
          h->Log(false, "note: " + Registrant(r) + " registered a MAC (" +
                            transport::MacToString(transport::MacFromUint64(r.worker.mac)) +
                            "): a worker that never answers ARP (a reference client) gets no "
                            "results from this switch unless it runs with --neighbour-entries "
                            "or --io raw");
        }
        return OkStatus();
      });
    }
  }
  return host;
}

Status SwitchHost::Start() {
  if (server_->running()) return OkStatus();
  SWITCHML_RETURN_IF_ERROR(server_->Start());
  const SwitchHostConfig& c = config_;
  // Gratuitous ARP on the data interface at start and every announce_interval_s, so that
  // bridges learn the switch's MAC before the first request (transport/arp_announce.h).
  if (announcer_ == nullptr && c.announce_interval_s > 0 && !iface_.empty() && c.bind.ipv4 != 0) {
    auto an = transport::ArpAnnouncer::Create(iface_, c.bind.ipv4);
    Status first = an.ok() ? (*an)->Announce() : an.status();
    if (first.ok()) {
      announcer_ = std::move(*an);
      char every[32];
      std::snprintf(every, sizeof(every), "%g s", c.announce_interval_s);
      std::string ip = transport::Endpoint{c.bind.ipv4, 0}.ToString();
      ip = ip.substr(0, ip.rfind(':'));
      announce_note_ = "gratuitous ARP for " + ip +
                       " (MAC " + transport::MacToString(announcer_->mac()) + ") on " + iface_ +
                       " at start and every " + every;
    } else if (first.code() == StatusCode::kFailedPrecondition) {
      // Not Ethernet (loopback): no bridge to teach.
    } else if (raw()) {
      server_->Stop();
      return Status(first.code(), "--announce-interval-s: " + first.message());
    } else {
      Log(true, "warning: no gratuitous ARP (" + first.message() +
                    "); bridges between the switch and its workers flood frames to its MAC "
                    "until they see one from it");
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = false;
    kernel_watch_ = c.io == SwitchHostConfig::Io::kUdp;
    if (kernel_watch_) kernel_base_ = transport::ReadKernelDropCounters();
  }
  if (announcer_ != nullptr || kernel_watch_) housekeeping_ = std::thread([this] { Housekeeping(); });
  return OkStatus();
}

void SwitchHost::Housekeeping() {
  const auto start = std::chrono::steady_clock::now();
  auto last_announce = start;
  std::vector<std::pair<std::string, uint64_t>> last_kernel;
  bool kernel_warned = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    last_kernel = kernel_base_;
  }
  auto last_kernel_check = start;
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return stop_; })) {
    l.unlock();
    const auto now = std::chrono::steady_clock::now();
    if (announcer_ != nullptr &&
        now - last_announce >= std::chrono::duration<double>(config_.announce_interval_s)) {
      last_announce = now;
      (void)announcer_->Announce();  // best effort: the interface may be down for a moment
    }
    // Kernel UDP, once a second: datagrams the kernel dropped before the switch's socket
    // (checksums, headers, a full buffer) while workers are registered get one warning.
    if (kernel_watch_ && !kernel_warned && now - last_kernel_check >= std::chrono::seconds(1)) {
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
      if (!rose.empty() && RegisteredWorkers(*server_) > 0) {
        kernel_warned = true;
        Log(true, "warning: the kernel dropped UDP/IP datagrams in this network namespace while "
                  "workers are registered (" + rose + "): they never reach the switch. Reference "
                  "DPDK clients leave their checksums to NIC offload: serve them with --io raw "
                  "(docs/operations.md, \"Serving reference clients\")");
      }
      last_kernel = current;
    }
    l.lock();
  }
}

void SwitchHost::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (housekeeping_.joinable()) housekeeping_.join();
  if (server_ != nullptr) server_->Stop();
}

std::vector<std::pair<std::string, uint64_t>> SwitchHost::KernelCounters() const {
  std::vector<std::pair<std::string, uint64_t>> base;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!kernel_watch_) return {};
    base = kernel_base_;
  }
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [name, value] : transport::ReadKernelDropCounters()) {
    uint64_t b = 0;
    for (const auto& [n, v] : base) {
      if (n == name) b = v;
    }
    out.emplace_back(name, value >= b ? value - b : 0);
  }
  return out;
}

std::vector<std::pair<std::string, uint64_t>> SwitchHost::AllCounters() const {
  std::vector<std::pair<std::string, uint64_t>> out = server_->counters().Named();
  for (auto& c : server_->transport_counters()) out.push_back(std::move(c));
  for (auto& c : KernelCounters()) out.push_back(std::move(c));
  return out;
}

std::vector<std::string> SwitchHost::StartupLines() const {
  std::vector<std::string> lines;
  const SwitchConfig& cfg = config_.switch_config;
  if (!iface_.empty()) {
    std::string l = "advertising MAC " + transport::MacToString(transport::MacFromUint64(cfg.mac)) +
                    " (" + iface_ + ")";
    if (raw()) {
      l += config_.refuse_bad_checksums
               ? "; frames with unfinished or wrong checksums are refused"
               : "; frames are accepted whatever their checksums (counted by reason)";
    } else {
      l += neighbours_ != nullptr
               ? "; neighbour entries (proto 83) for workers that register their MAC"
               : "; no neighbour entries (--neighbour-entries: for reference clients)";
    }
    lines.push_back(std::move(l));
  }
  if (raw()) {
    const uint32_t max_payload = uint32_t(wire::PacketBytes(cfg.max_elements_per_packet));
    const uint64_t largest_burst = cfg.LargestBurstDatagrams();
    std::string l = "raw receive ring: " + std::to_string(raw_ring_frames_) +
                    " frames (at least) of up to " + std::to_string(max_payload) +
                    " bytes per I/O thread (" +
                    std::to_string(transport::RawChannel::RingBytes(raw_ring_frames_, max_payload) >> 20) +
                    " MiB)";
    if (raw_ring_frames_ < largest_burst) {
      l += "; fewer than the largest first burst (--slots " + std::to_string(cfg.num_slots) +
           " x --max-workers " + std::to_string(cfg.max_workers) + " = " +
           std::to_string(largest_burst) +
           "): sessions with more packets in flight at once (workers x window) may lose frames "
           "to a full ring (raw_ring_drops); --raw-ring-frames sizes it";
    }
    lines.push_back(std::move(l));
  }
  if (!announce_note_.empty()) lines.push_back(announce_note_);
  return lines;
}

}  // namespace switchml::dataplane
