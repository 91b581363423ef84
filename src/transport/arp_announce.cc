#include "transport/arp_announce.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/posix_util.h"

namespace switchml::transport {

std::array<uint8_t, kArpFrameBytes> BuildGratuitousArp(const MacAddress& mac, uint32_t ipv4) {
  std::array<uint8_t, kArpFrameBytes> f{};
  uint8_t* p = f.data();
  auto put16 = [&](uint16_t v) {
    *p++ = uint8_t(v >> 8);
    *p++ = uint8_t(v);
  };
  auto put_mac = [&](const MacAddress& m) {
    memcpy(p, m.data(), 6);
    p += 6;
  };
  auto put_ip = [&](uint32_t ip) {
    for (int shift = 24; shift >= 0; shift -= 8) *p++ = uint8_t(ip >> shift);
  };
  put_mac({0xff, 0xff, 0xff, 0xff, 0xff, 0xff});  // Ethernet destination: broadcast
  put_mac(mac);                                   // source
  put16(ETH_P_ARP);
  put16(1);           // hardware type: Ethernet
  put16(ETH_P_IP);    // protocol type: IPv4
  *p++ = 6;           // hardware address length
  *p++ = 4;           // protocol address length
  put16(1);           // operation: request
  put_mac(mac);       // sender hardware address
  put_ip(ipv4);       // sender protocol address
  put_mac({});        // target hardware address: unknown
  put_ip(ipv4);       // target protocol address: the sender's own (an announcement)
  return f;
}

StatusOr<std::unique_ptr<ArpAnnouncer>> ArpAnnouncer::Create(const std::string& interface,
                                                              uint32_t ipv4) {
  if (interface.empty() || interface.size() >= IFNAMSIZ) {
    return InvalidArgumentError("ARP announcer: interface name '" + interface + "' must have 1.." +
                                std::to_string(IFNAMSIZ - 1) + " characters");
  }
  if (ipv4 == 0) return InvalidArgumentError("ARP announcer on " + interface + ": needs an IPv4 address");
  std::unique_ptr<ArpAnnouncer> a(new ArpAnnouncer());
  a->interface_ = interface;
  a->ipv4_ = ipv4;
  // Protocol 0: this socket receives nothing; it only sends.
  a->fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (a->fd_ < 0) {
    const int err = errno;
    if (err == EPERM || err == EACCES) {
      return PermissionDeniedError("socket(AF_PACKET) for ARP announcements on " + interface +
                                   " needs CAP_NET_RAW: " + internal::ErrnoText(err));
    }
    return internal::ErrnoError("socket(AF_PACKET) for ARP announcements on " + interface, err);
  }
  ifreq ifr{};
  memcpy(ifr.ifr_name, interface.data(), interface.size());
  if (ioctl(a->fd_, SIOCGIFINDEX, &ifr) != 0) {
    if (errno == ENODEV) return NotFoundError("ARP announcer: no interface '" + interface + "'");
    return internal::ErrnoError("SIOCGIFINDEX " + interface, errno);
  }
  a->ifindex_ = ifr.ifr_ifindex;
  if (ioctl(a->fd_, SIOCGIFHWADDR, &ifr) != 0) return internal::ErrnoError("SIOCGIFHWADDR " + interface, errno);
  if (ifr.ifr_hwaddr.sa_family != 1 /* ARPHRD_ETHER */) {
    return FailedPreconditionError("ARP announcer: interface '" + interface +
                                   "' is not Ethernet (hardware type " +
                                   std::to_string(ifr.ifr_hwaddr.sa_family) + "): no ARP there");
  }
  memcpy(a->mac_.data(), ifr.ifr_hwaddr.sa_data, 6);
  return a;
}

ArpAnnouncer::~ArpAnnouncer() {
  if (fd_ >= 0) close(fd_);
}

Status ArpAnnouncer::Announce() {
  const std::array<uint8_t, kArpFrameBytes> frame = BuildGratuitousArp(mac_, ipv4_);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ETH_P_ARP);
  to.sll_ifindex = ifindex_;
  to.sll_halen = 6;
  memset(to.sll_addr, 0xff, 6);
  if (sendto(fd_, frame.data(), frame.size(), MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to),
             sizeof(to)) != static_cast<ssize_t>(frame.size())) {
    const int err = errno;
    in_addr addr{htonl(ipv4_)};
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &addr, ip, sizeof(ip));
    return internal::ErrnoError("sendto (gratuitous ARP for " + std::string(ip) + " on " +
                                    interface_ + ")",
                                err);
  }
  ++sent_;
  return OkStatus();
}

}  // namespace switchml::transport
