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

#include <bit>
#include <cerrno>
#include <chrono>
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

constexpr MacAddress kZeroMac{};

uint32_t Mask(uint8_t prefix_len) {
  return prefix_len == 0 ? 0 : prefix_len >= 32 ? ~uint32_t{0} : ~uint32_t{0} << (32 - prefix_len);
}

std::string StateName(uint16_t state) {
  if (state & NUD_PERMANENT) return "permanent";
  if (state & NUD_NOARP) return "noarp";
  if (state & NUD_REACHABLE) return "reachable";
  if (state & NUD_STALE) return "stale";
  if (state & NUD_DELAY) return "delay";
  if (state & NUD_PROBE) return "probe";
  if (state & NUD_INCOMPLETE) return "incomplete";
  if (state & NUD_FAILED) return "failed";
  return "state " + std::to_string(state);
}

// An rtnetlink socket whose receives give up after 1 s.
StatusOr<int> OpenNetlink() {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return Errno("netlink socket", errno);
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    const int err = errno;
    close(fd);
    return Errno("netlink bind", err);
  }
  return fd;
}

// Every IPv4 neighbour entry on interface `ifindex` (RTM_GETNEIGH dump, request `seq`). Gives
// up after 5 s in all, or 1 s without an answer.
StatusOr<std::vector<NeighbourEntry>> DumpNeighbours(int fd, uint32_t seq, int ifindex,
                                                     const std::string& iface) {
  struct {
    nlmsghdr nh;
    ndmsg nd;
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  req.nh.nlmsg_type = RTM_GETNEIGH;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = seq;
  req.nd.ndm_family = AF_INET;
  req.nd.ndm_ifindex = ifindex;  // a filter only for kernels in strict mode: checked below too
  const std::string what = "listing the neighbour entries of " + iface;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd, &req, req.nh.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return Errno(what, errno);
  }
  std::vector<NeighbourEntry> out;
  std::vector<char> buf(64 * 1024);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t got = recv(fd, buf.data(), buf.size(), 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return Errno(what + " (no answer from the kernel)", errno);
    }
    int left = int(got);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq) continue;
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        const int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
        if (err == 0) return out;
        return Errno(what, err);
      }
      if (h->nlmsg_type != RTM_NEWNEIGH || h->nlmsg_len < NLMSG_LENGTH(sizeof(ndmsg))) continue;
      const auto* nd = reinterpret_cast<const ndmsg*>(NLMSG_DATA(h));
      if (nd->ndm_family != AF_INET || nd->ndm_ifindex != ifindex) continue;
      NeighbourEntry e;
      e.state = nd->ndm_state;
      bool has_dst = false;
      int attr_len = int(h->nlmsg_len - NLMSG_LENGTH(sizeof(ndmsg)));
      for (auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(NLMSG_DATA(h)) +
                                                 NLMSG_ALIGN(sizeof(ndmsg)));
           RTA_OK(rta, attr_len); rta = RTA_NEXT(rta, attr_len)) {
        const size_t size = RTA_PAYLOAD(rta);
        if (rta->rta_type == NDA_DST && size == 4) {
          uint32_t dst;
          std::memcpy(&dst, RTA_DATA(rta), 4);
          e.ipv4 = ntohl(dst);
          has_dst = true;
        } else if (rta->rta_type == NDA_LLADDR && size == e.mac.size()) {
          std::memcpy(e.mac.data(), RTA_DATA(rta), e.mac.size());
        } else if (rta->rta_type == NDA_PROTOCOL && size >= 1) {
          e.protocol = *reinterpret_cast<const uint8_t*>(RTA_DATA(rta));
        }
      }
      if (has_dst) out.push_back(e);
    }
  }
  return UnavailableError(what + ": the kernel's answer did not end within 5 s");
}

}  // namespace

std::string DescribeSubnets(const std::vector<InterfaceAddress>& addresses) {
  std::string out;
  for (const InterfaceAddress& a : addresses) {
    const std::string net = Ip(a.ipv4 & Mask(a.prefix_len)) + "/" + std::to_string(a.prefix_len);
    if (out.find(net) != std::string::npos) continue;
    out += (out.empty() ? "" : ", ") + net;
  }
  return out.empty() ? "none" : out;
}

StatusOr<bool> CheckNeighbourEntry(const NeighbourHost& host, uint32_t ipv4, const MacAddress& mac) {
  const std::string subnets = DescribeSubnets(host.iface_addresses);
  auto refuse = [&](const std::string& why) -> Status {
    return FailedPreconditionError(
        "no neighbour entry " + Ip(ipv4) + " lladdr " + MacToString(mac) + " on " + host.iface +
        ": " + why + "; the switch installs entries only for unicast addresses of " + subnets +
        " (" + host.iface + ") other than the host's own, the network and broadcast addresses "
        "and addresses the host already reaches at another MAC");
  };
  if (!host.keyed_by_address) {
    return refuse(host.iface + " is a loopback or point-to-point interface, where the kernel keys "
                  "every neighbour entry as 0.0.0.0 (one entry would take over all its traffic)");
  }
  if (host.iface_addresses.empty()) return refuse(host.iface + " has no IPv4 address");
  if (mac == kZeroMac) return refuse("the MAC is all zero");
  if ((mac[0] & 1) != 0) return refuse("the MAC is a multicast or broadcast address");
  if (ipv4 == 0) return refuse("0.0.0.0 is not the address of a host");
  if ((ipv4 >> 24) == 127) return refuse(Ip(ipv4) + " is a loopback address (127.0.0.0/8)");
  if ((ipv4 >> 28) == 0xE) return refuse(Ip(ipv4) + " is a multicast address (224.0.0.0/4)");
  if (ipv4 == 0xFFFFFFFFu) return refuse("255.255.255.255 is the limited broadcast address");
  for (uint32_t own : host.host_addresses) {
    if (own == ipv4) return refuse(Ip(ipv4) + " is one of this switch host's own addresses");
  }
  bool on_subnet = false;
  for (const InterfaceAddress& a : host.iface_addresses) {
    if (a.ipv4 == ipv4) return refuse(Ip(ipv4) + " is one of this switch host's own addresses");
    const uint32_t mask = Mask(a.prefix_len);
    if ((a.ipv4 & mask) != (ipv4 & mask)) continue;
    on_subnet = true;
    const std::string net = Ip(a.ipv4 & mask) + "/" + std::to_string(a.prefix_len);
    if (a.prefix_len > 30) continue;  // /31 and /32: every address is a host's (RFC 3021)
    if (ipv4 == (a.ipv4 & mask)) return refuse(Ip(ipv4) + " is the network address of " + net);
    if (ipv4 == (a.ipv4 | ~mask)) return refuse(Ip(ipv4) + " is the broadcast address of " + net);
  }
  if (!on_subnet) return refuse(Ip(ipv4) + " is not on " + host.iface + "'s subnets (" + subnets + ")");
  bool already = false;
  for (const NeighbourEntry& e : host.neighbours) {
    if (e.ipv4 != ipv4 || e.ours() || e.mac == kZeroMac) continue;
    if (e.mac != mac) {
      return refuse("the switch host already reaches " + Ip(ipv4) + " at " + MacToString(e.mac) +
                    " (a " + StateName(e.state) + " neighbour entry the switch did not install)");
    }
    if ((e.state & (NUD_PERMANENT | NUD_NOARP)) != 0) already = true;
  }
  return !already;
}

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

StatusOr<NeighbourHost> ReadNeighbourHost(const std::string& iface) {
  const unsigned index = if_nametoindex(iface.c_str());
  if (index == 0) return NotFoundError("no interface named '" + iface + "'");
  NeighbourHost host;
  host.iface = iface;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return Errno("getifaddrs", errno);
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    const bool mine = iface == a->ifa_name;
    if (mine && (a->ifa_flags & (IFF_LOOPBACK | IFF_POINTOPOINT)) != 0) host.keyed_by_address = false;
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    host.host_addresses.push_back(ip);
    if (!mine) continue;
    uint8_t prefix = 32;
    if (a->ifa_netmask != nullptr && a->ifa_netmask->sa_family == AF_INET) {
      const uint32_t mask = ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
      prefix = uint8_t(std::popcount(mask));
    }
    host.iface_addresses.push_back({ip, prefix});
  }
  freeifaddrs(list);
  SWITCHML_ASSIGN_OR_RETURN(const int fd, OpenNetlink());
  auto dump = DumpNeighbours(fd, 1, int(index), iface);
  close(fd);
  if (!dump.ok()) return dump.status();
  host.neighbours = std::move(*dump);
  return host;
}

StatusOr<std::vector<std::pair<uint32_t, MacAddress>>> ReadResolvedNeighbours(const std::string& iface) {
  const unsigned index = if_nametoindex(iface.c_str());
  if (index == 0) return NotFoundError("no interface named '" + iface + "'");
  SWITCHML_ASSIGN_OR_RETURN(const int fd, OpenNetlink());
  auto dump = DumpNeighbours(fd, 1, int(index), iface);
  close(fd);
  if (!dump.ok()) return dump.status();
  // NUD_VALID of the kernel's net/neighbour.h (not in the uapi headers).
  constexpr uint16_t kValid = NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;
  std::vector<std::pair<uint32_t, MacAddress>> out;
  for (const NeighbourEntry& e : *dump) {
    if ((e.state & kValid) != 0 && e.mac != MacAddress{}) out.emplace_back(e.ipv4, e.mac);
  }
  return out;
}

StatusOr<std::unique_ptr<NeighbourEntries>> NeighbourEntries::Open(const std::string& iface) {
  SWITCHML_ASSIGN_OR_RETURN(NeighbourHost host, ReadNeighbourHost(iface));
  if (!host.keyed_by_address) {
    return FailedPreconditionError(
        iface + " is a loopback or point-to-point interface: the kernel keys every neighbour "
        "entry on it as 0.0.0.0, so one entry would take over all its traffic; the switch "
        "installs none there");
  }
  std::unique_ptr<NeighbourEntries> n(new NeighbourEntries());
  SWITCHML_ASSIGN_OR_RETURN(n->fd_, OpenNetlink());
  n->ifindex_ = int(if_nametoindex(iface.c_str()));
  n->iface_ = iface;
  // Entries a run that crashed (or was killed) left behind.
  SWITCHML_RETURN_IF_ERROR(n->RemoveOurs({}, &n->removed_at_open_));
  return n;
}

NeighbourEntries::~NeighbourEntries() {
  if (fd_ < 0) return;
  size_t removed = 0;
  if (!RemoveOurs({}, &removed).ok()) {
    // The dump failed: remove what this object installed, by the address it asked for.
    for (const auto& [ip, mac] : installed_) (void)Request(false, ip, mac);
  }
  close(fd_);
}

StatusOr<bool> NeighbourEntries::Check(uint32_t ipv4, const MacAddress& mac) const {
  if (mac == kZeroMac) return false;
  SWITCHML_ASSIGN_OR_RETURN(NeighbourHost host, ReadNeighbourHost(iface_));
  return CheckNeighbourEntry(host, ipv4, mac);
}

Status NeighbourEntries::RemoveOurs(const std::map<uint32_t, MacAddress>& keep, size_t* removed) {
  SWITCHML_ASSIGN_OR_RETURN(std::vector<NeighbourEntry> all,
                            DumpNeighbours(fd_, ++seq_, ifindex_, iface_));
  Status first;
  for (const NeighbourEntry& e : all) {
    if (!e.ours() || keep.count(e.ipv4) != 0) continue;
    const Status s = Request(false, e.ipv4, e.mac);
    if (s.ok()) {
      ++*removed;
      installed_.erase(e.ipv4);
    } else if (first.ok()) {
      first = s;
    }
  }
  return first;
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
  if (add) {
    put(NDA_LLADDR, mac.data(), mac.size());
    const uint8_t protocol = kSwitchNeighbourProtocol;
    put(NDA_PROTOCOL, &protocol, sizeof(protocol));
  }
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
    if (mac != kZeroMac) next[ip] = mac;
  }
  size_t removed = 0;
  Status first = RemoveOurs(next, &removed);
  if (!first.ok()) {  // no dump: remove what this object installed and no longer wants
    for (auto it = installed_.begin(); it != installed_.end();) {
      if (next.count(it->first) != 0) {
        ++it;
        continue;
      }
      (void)Request(false, it->first, it->second);
      it = installed_.erase(it);
    }
  }
  if (next.empty()) return first;
  auto host = ReadNeighbourHost(iface_);
  if (!host.ok()) return first.ok() ? host.status() : first;
  for (const auto& [ip, mac] : next) {
    bool have = false;
    for (const NeighbourEntry& e : host->neighbours) {
      have = have || (e.ipv4 == ip && e.ours() && e.mac == mac && (e.state & NUD_PERMANENT) != 0);
    }
    if (have) {
      installed_[ip] = mac;
      continue;
    }
    StatusOr<bool> allowed = CheckNeighbourEntry(*host, ip, mac);
    Status s = allowed.ok() ? OkStatus() : allowed.status();
    if (allowed.ok() && *allowed) s = Request(true, ip, mac);
    if (!s.ok()) {
      if (first.ok()) first = s;
      installed_.erase(ip);
      continue;
    }
    if (*allowed) installed_[ip] = mac;
  }
  return first;
}

}  // namespace switchml::transport
