#include "transport/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transport/posix_util.h"

namespace switchml::transport {
namespace {

std::string Ip(uint32_t ipv4) {
  return std::to_string(ipv4 >> 24) + "." + std::to_string((ipv4 >> 16) & 255) + "." +
         std::to_string((ipv4 >> 8) & 255) + "." + std::to_string(ipv4 & 255);
}

// Unavailable, or PermissionDenied saying which capability is missing.
Status Errno(const std::string& what, int err) {
  if (err == EPERM || err == EACCES) {
    return PermissionDeniedError(what + ": " + internal::ErrnoText(err) +
                                 " (needs CAP_NET_ADMIN: run the switch as root or grant it)");
  }
  return internal::ErrnoError(what, err);
}

}  // namespace

StatusOr<std::string> InterfaceOfIpv4(uint32_t ipv4) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Errno("getifaddrs", errno);
  std::string found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (ntohl(sin->sin_addr.s_addr) == ipv4) {
      found = a->ifa_name;
      break;
    }
  }
  freeifaddrs(list);
  if (found.empty()) return NotFoundError(Ip(ipv4) + " is not an address of any interface of this host");
  return found;
}

StatusOr<std::string> FirstDataInterface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Errno("getifaddrs", errno);
  std::string found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    found = a->ifa_name;
    break;
  }
  freeifaddrs(list);
  if (found.empty()) return NotFoundError("no interface other than loopback is up with an IPv4 address");
  return found;
}

StatusOr<MacAddress> InterfaceMac(const std::string& iface) {
  ifreq req{};
  if (iface.empty() || iface.size() >= sizeof(req.ifr_name)) {
    return InvalidArgumentError("interface name '" + iface + "' must have 1.." +
                                std::to_string(sizeof(req.ifr_name) - 1) + " characters");
  }
  if (if_nametoindex(iface.c_str()) == 0) return NotFoundError("no interface named '" + iface + "'");
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket", errno);
  std::memcpy(req.ifr_name, iface.data(), iface.size());
  const int rc = ioctl(fd, SIOCGIFHWADDR, &req);
  const int err = errno;
  close(fd);
  if (rc != 0) return Errno("SIOCGIFHWADDR " + iface, err);
  MacAddress mac{};
  std::memcpy(mac.data(), req.ifr_hwaddr.sa_data, mac.size());
  return mac;
}

MacAddress MacFromUint64(uint64_t mac) {
  MacAddress out{};
  for (int i = 0; i < 6; ++i) out[size_t(i)] = uint8_t(mac >> (8 * (5 - i)));
  return out;
}

uint64_t MacToUint64(const MacAddress& mac) {
  uint64_t v = 0;
  for (uint8_t b : mac) v = (v << 8) | b;
  return v;
}

StatusOr<std::unique_ptr<NeighbourEntries>> NeighbourEntries::Open(const std::string& iface) {
  const unsigned index = if_nametoindex(iface.c_str());
  if (index == 0) return NotFoundError("no interface named '" + iface + "'");
  std::unique_ptr<NeighbourEntries> n(new NeighbourEntries());
  n->fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (n->fd_ < 0) return Errno("netlink socket", errno);
  // Every request waits for its ack; never longer than this.
  timeval tv{1, 0};
  setsockopt(n->fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (bind(n->fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    const int err = errno;
    close(n->fd_);
    n->fd_ = -1;
    return Errno("netlink bind", err);
  }
  n->ifindex_ = int(index);
  n->iface_ = iface;
  return n;
}

NeighbourEntries::~NeighbourEntries() {
  if (fd_ < 0) return;
  for (const auto& [ip, mac] : installed_) (void)Request(false, ip, mac);
  close(fd_);
}

Status NeighbourEntries::Request(bool add, uint32_t ipv4, const MacAddress& mac) {
  struct {
    nlmsghdr nh;
    ndmsg nd;
    char attrs[64];
  } req{};
  req.nh.nlmsg_type = add ? RTM_NEWNEIGH : RTM_DELNEIGH;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | (add ? NLM_F_CREATE | NLM_F_REPLACE : 0);
  req.nh.nlmsg_seq = ++seq_;
  req.nd.ndm_family = AF_INET;
  req.nd.ndm_ifindex = ifindex_;
  req.nd.ndm_state = NUD_PERMANENT;
  size_t len = NLMSG_LENGTH(sizeof(ndmsg));
  auto put = [&](uint16_t type, const void* data, size_t size) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(len));
    rta->rta_type = type;
    rta->rta_len = uint16_t(RTA_LENGTH(size));
    std::memcpy(RTA_DATA(rta), data, size);
    len = NLMSG_ALIGN(len) + RTA_ALIGN(rta->rta_len);
  };
  const uint32_t dst = htonl(ipv4);
  put(NDA_DST, &dst, sizeof(dst));
  if (add) put(NDA_LLADDR, mac.data(), mac.size());
  req.nh.nlmsg_len = uint32_t(len);
  const std::string what = std::string(add ? "installing" : "removing") + " the neighbour entry " +
                           Ip(ipv4) + (add ? " lladdr " + MacToString(mac) : "") + " dev " + iface_;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd_, &req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return Errno(what, errno);
  }
  char buf[1024];
  while (true) {
    const ssize_t got = recv(fd_, buf, sizeof(buf), 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return Errno(what + " (no answer from the kernel)", errno);
    }
    int left = int(got);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq_ || h->nlmsg_type != NLMSG_ERROR) continue;
      const int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err == 0 || (!add && err == ENOENT)) return OkStatus();
      return Errno(what, err);
    }
  }
}

Status NeighbourEntries::Sync(const std::vector<std::pair<uint32_t, MacAddress>>& wanted) {
  std::map<uint32_t, MacAddress> next;
  for (const auto& [ip, mac] : wanted) {
    if (mac != MacAddress{}) next[ip] = mac;
  }
  Status first;
  for (auto it = installed_.begin(); it != installed_.end();) {
    if (next.count(it->first) != 0) {
      ++it;
      continue;
    }
    const Status s = Request(false, it->first, it->second);
    if (!s.ok() && first.ok()) first = s;
    it = installed_.erase(it);
  }
  for (const auto& [ip, mac] : next) {
    const auto have = installed_.find(ip);
    if (have != installed_.end() && have->second == mac) continue;
    const Status s = Request(true, ip, mac);
    if (!s.ok()) {
      if (first.ok()) first = s;
      continue;
    }
    installed_[ip] = mac;
  }
  return first;
}

}  // namespace switchml::transport
