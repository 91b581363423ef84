// dataplane/switch_host.h — the software switch assembled on a host: a SwitchServer with one
// channel per I/O thread (kernel UDP, raw frames off an interface, or channels a caller makes,
// e.g. on an in-process loopback fabric), the interface's MAC it advertises, the workers'
// neighbour entries, gratuitous ARP announcements and the kernel's receive-error watch.
// `switchml switch` starts one inside a tools::SwitchService (tools/switch_service.h), with the
// embedded controller (which stays outside: the host is what the controller drives, through
// server()).
//
//   SwitchHostConfig c;
//   c.switch_config = ...;  c.io = SwitchHostConfig::Io::kUdp;  c.bind = {0, 48864};
//   SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<SwitchHost> host, SwitchHost::Create(c));
//   SWITCHML_RETURN_IF_ERROR(host->Start());
//   ... host->server() is the SwitchControl a controller serves; host->AllCounters() ...
//   host->Stop();   // also done by the destructor
//
// What it owns, by mode:
//  * Channels: I/O thread i gets bind.port + i (each a free port when bind.port is 0, kernel
//    UDP only). kUdp: transport::UdpChannel (GSO/GRO unless udp_offload is off, busy polling).
//    kRaw: transport::RawChannel on `iface`, its receive ring sized for the largest first burst
//    (SwitchConfig::LargestBurstDatagrams) unless raw_ring_frames says otherwise. kFactory:
//    channel_factory(i) (no interface, MAC, neighbour entries, announcements or kernel watch).
//  * The interface: `iface`, else the one holding bind.ipv4, else (0.0.0.0) the first one up
//    with an IPv4 address; its MAC goes into SwitchConfig::mac (what registrations advertise).
//  * The workers' MACs. Kernel UDP: the kernel resolves each worker's MAC to send results, and
//    reference clients never answer ARP, so with neighbour_entries each worker that registered
//    a MAC gets a permanent neighbour entry tagged as the switch's (transport/netif.h), if
//    transport::CheckNeighbourEntry allows it (else its registration is refused); removed when
//    it is forgotten, when the host is destroyed and (after a crash) at the next Create. Raw
//    frames: the same registered MACs go to every raw channel (RawChannel::SetNeighbours), which
//    answers each worker at the MAC its frames come from, else at the registered one, else at
//    the kernel's neighbour entry (transport/raw_channel.h). One source for both modes: the
//    registrations (SwitchServer::SetWorkersListener).
//  * Gratuitous ARP for bind.ipv4 on the interface at Start and every announce_interval_s.
//  * Kernel UDP: the kernel's receive errors of this network namespace, counted from Start
//    (kernel_*); a rise while workers are registered is warned about once.
//
// Messages for the operator (what was set up, warnings) go to `log` as they happen; the lines
// describing the running host come from StartupLines(). Error messages name the `switchml
// switch` flag of the field at fault (each field below says which), since that is where
// operators set them.
//
// Threading: Create/Start/Stop from one thread; AllCounters, KernelCounters and server() from
// any thread. Start runs a housekeeping thread (announcements, the kernel watch) until Stop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/switch_config.h"
#include "dataplane/switch_server.h"
#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::transport {
class ArpAnnouncer;
class NeighbourEntries;
class RawChannel;
}  // namespace switchml::transport

namespace switchml::dataplane {

struct SwitchHostConfig {
  enum class Io : uint8_t { kUdp, kRaw, kFactory };
  // The switch itself. advertised_ipv4 is set from bind.ipv4 and mac from the interface.
  SwitchConfig switch_config;
  Io io = Io::kUdp;  // --io
  // --bind and --port: the address of every I/O thread's channel; port 0 = a free one each
  // (kUdp only). kRaw needs both.
  transport::Endpoint bind;
  std::string iface;  // --iface; empty = found as above
  // kUdp (--no-udp-offload, --busy-poll-us at most 1000000).
  bool udp_offload = true;
  uint32_t busy_poll_us = 0;
  // kRaw (--refuse-bad-checksums, --raw-ring-frames: 0 = the largest first burst, at most
  // kDefaultRawRingFramesCap).
  bool refuse_bad_checksums = false;
  uint32_t raw_ring_frames = 0;
  bool neighbour_entries = false;  // --neighbour-entries (kUdp only)
  double announce_interval_s = 10;  // --announce-interval-s, [0, 3600]; 0 = never
  // kFactory: I/O thread i's channel.
  std::function<StatusOr<std::unique_ptr<transport::Channel>>(uint32_t io_thread)> channel_factory;
  // Operator messages: (false, text) for information, (true, text) for warnings and refusals.
  // Called from Create, Start, the housekeeping thread and registering threads. May be empty.
  std::function<void(bool warning, const std::string& text)> log;
};

class SwitchHost {
 public:
  // The default raw ring holds at most this many frames per I/O thread (64 workers x a window
  // of 256; about 66 MiB of pinned kernel memory with 1024-element packets, 18 MiB with 256).
  static constexpr uint32_t kDefaultRawRingFramesCap = 16384;

  // Validates `config` (InvalidArgument naming the flag), finds the interface and its MAC,
  // makes the channels and the server, opens the neighbour entries. Errors: those, and the
  // channels' and netif's (prefixed with what failed).
  static StatusOr<std::unique_ptr<SwitchHost>> Create(SwitchHostConfig config);
  ~SwitchHost();  // Stop()s, then removes the neighbour entries
  SwitchHost(const SwitchHost&) = delete;
  SwitchHost& operator=(const SwitchHost&) = delete;

  // Starts the server, sends the first gratuitous ARP (a failure is an error in raw mode, a
  // warning otherwise; none on a non-Ethernet interface) and the housekeeping thread.
  Status Start();
  // Stops the housekeeping thread and the server (may Start again). Idempotent. The neighbour
  // entries stay until the host is destroyed.
  void Stop();

  SwitchServer* server() const { return server_.get(); }
  const SwitchConfig& switch_config() const { return config_.switch_config; }
  const std::string& iface() const { return iface_; }  // empty if none
  bool raw() const { return config_.io == SwitchHostConfig::Io::kRaw; }
  bool neighbour_entries() const { return neighbours_ != nullptr; }
  // Every I/O thread's port, by thread.
  const std::vector<uint16_t>& ports() const { return ports_; }
  uint32_t raw_ring_frames() const { return raw_ring_frames_; }

  // Lines (without a prefix) describing the interface, MAC, receive ring and announcements.
  std::vector<std::string> StartupLines() const;
  // Every counter by name: the server's, its channels' (raw_*, udp_*) and, in kernel-UDP mode
  // after Start, the kernel's receive errors since Start (kernel_*).
  std::vector<std::pair<std::string, uint64_t>> AllCounters() const;
  // The kernel_* part alone (empty unless kernel UDP and started).
  std::vector<std::pair<std::string, uint64_t>> KernelCounters() const;

 private:
  explicit SwitchHost(SwitchHostConfig config);
  void Log(bool warning, const std::string& text) const;
  void Housekeeping();

  SwitchHostConfig config_;
  std::string iface_;
  uint32_t raw_ring_frames_ = 0;
  std::vector<uint16_t> ports_;
  std::vector<transport::RawChannel*> raw_channels_;  // kRaw: the server's channels, by thread
  std::unique_ptr<transport::NeighbourEntries> neighbours_;  // destroyed after server_
  std::unique_ptr<SwitchServer> server_;
  std::unique_ptr<transport::ArpAnnouncer> announcer_;
  std::string announce_note_;

  mutable std::mutex mu_;  // guards kernel_base_, stop_
  std::condition_variable cv_;
  bool stop_ = false;
  bool kernel_watch_ = false;  // kUdp, started
  std::vector<std::pair<std::string, uint64_t>> kernel_base_;
  std::thread housekeeping_;
};

}  // namespace switchml::dataplane
