// transport/arp_announce.h — gratuitous ARP from the switch on its data interface, so that the
// Ethernet bridges and switches between it and its workers learn where its MAC is.
//
// Until a learning bridge has seen a frame from the switch's MAC it floods every frame sent to
// that MAC to all of its ports: each worker then receives the other workers' requests, and a
// reference client takes them for results (their header looks the same). A switch whose
// workers never answer ARP and that sends nothing until the first request arrives would leave
// bridges ignorant exactly when the first window goes out. An ARP announcement (RFC 5227: an
// ARP request from the switch's MAC whose sender and target address are both the switch's
// IPv4, sent to the Ethernet broadcast address) teaches every bridge on the segment, changes no
// neighbour entry a host does not already have, and asks nobody to answer.
//
//   SWITCHML_ASSIGN_OR_RETURN(auto arp, ArpAnnouncer::Create("eth0", 0x0A0000FE));
//   SWITCHML_RETURN_IF_ERROR(arp->Announce());   // at start, then every few seconds
//
// Needs CAP_NET_RAW (an AF_PACKET socket that receives nothing: protocol 0). Thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "switchml/status.h"
#include "transport/frame.h"

namespace switchml::transport {

inline constexpr size_t kArpFrameBytes = 42;  // Ethernet (14) + ARP for IPv4 over Ethernet (28)

// The announcement frame: Ethernet broadcast from `mac`, EtherType ARP, an ARP request
// (hardware Ethernet, protocol IPv4) with sender `mac`/`ipv4`, target MAC zero and target
// IPv4 `ipv4` (host order). Pure.
std::array<uint8_t, kArpFrameBytes> BuildGratuitousArp(const MacAddress& mac, uint32_t ipv4);

class ArpAnnouncer {
 public:
  // Opens the socket and reads the interface's index and MAC. Errors: InvalidArgument (empty
  // or too long interface name, ipv4 0), PermissionDenied (no CAP_NET_RAW), NotFound (no such
  // interface), FailedPrecondition (not an Ethernet interface, e.g. loopback: no ARP there),
  // Unavailable (a socket call failed, named).
  static StatusOr<std::unique_ptr<ArpAnnouncer>> Create(const std::string& interface, uint32_t ipv4);
  ~ArpAnnouncer();
  ArpAnnouncer(const ArpAnnouncer&) = delete;
  ArpAnnouncer& operator=(const ArpAnnouncer&) = delete;

  // Sends one announcement; never blocks. Errors: Unavailable (sendto failed, e.g. the
  // interface is down), naming the interface.
  Status Announce();
  uint64_t sent() const { return sent_; }
  const MacAddress& mac() const { return mac_; }

 private:
  ArpAnnouncer() = default;
  int fd_ = -1;
  int ifindex_ = 0;
  std::string interface_;
  uint32_t ipv4_ = 0;
  MacAddress mac_{};
  uint64_t sent_ = 0;
};

}  // namespace switchml::transport
