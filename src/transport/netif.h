// transport/netif.h — the host's network interfaces as the switch needs them: which interface
// holds an address, its MAC, and neighbour (ARP) entries the switch installs for workers that
// never answer ARP.
//
// The reference SwitchML client learns the switch's MAC from its session reply and addresses
// its frames to it, so the switch must advertise the real MAC of the interface its data plane
// uses; and it never answers ARP, so the switch's kernel (kernel-UDP mode) cannot resolve it
// and never sends its results unless the switch installs a neighbour entry from the MAC and
// IPv4 the worker registered (`switchml switch --neighbour-entries`).
//
// A worker's registration must never rewrite how the host reaches anything else: the decision
// (CheckNeighbourEntry, pure) accepts only unicast addresses of the interface's own subnets
// that are not the host's own, not the subnet's network or broadcast address, and not already
// reached at another MAC through an entry the switch did not install; never on a loopback or
// point-to-point interface (the kernel keys every entry there as 0.0.0.0: one entry would take
// over all its traffic). Every entry the switch installs carries the neighbour protocol
// kSwitchNeighbourProtocol (`ip neigh` shows `proto 83`), and entries are removed by the key
// the kernel stored, found by a dump: at Open (those a crashed run left), when a worker is
// forgotten, and at exit.
//
//   SWITCHML_ASSIGN_OR_RETURN(std::string iface, InterfaceOfIpv4(bind_ip));   // "eth0"
//   SWITCHML_ASSIGN_OR_RETURN(MacAddress mac, InterfaceMac(iface));
//   SWITCHML_ASSIGN_OR_RETURN(auto neigh, NeighbourEntries::Open(iface));
//   SWITCHML_RETURN_IF_ERROR(neigh->Check(worker_ip, worker_mac));   // at registration
//   neigh->Sync({{worker_ip, worker_mac}});   // installs; a later Sync without it removes it
//
// Thread-safety: the functions are thread-safe; a NeighbourEntries is used by one thread at a
// time (the caller serialises Check and Sync).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "switchml/status.h"
#include "transport/frame.h"

namespace switchml::transport {

// The interface that has IPv4 address `ipv4` (host order). NotFound naming the address if
// none has it; Unavailable if the interfaces cannot be listed.
StatusOr<std::string> InterfaceOfIpv4(uint32_t ipv4);

// The first interface (in the kernel's order) that is up, not loopback and has an IPv4 address:
// what a switch bound to 0.0.0.0 advertises. NotFound if there is none.
StatusOr<std::string> FirstDataInterface();

// The hardware address of `iface`. NotFound (no such interface), InvalidArgument (a name longer
// than IFNAMSIZ - 1), Unavailable (the ioctl failed).
StatusOr<MacAddress> InterfaceMac(const std::string& iface);

// A MAC as the 48 low bits of a uint64 (first octet most significant), the wire form of the
// session messages' `mac` fields, and back.
MacAddress MacFromUint64(uint64_t mac);
uint64_t MacToUint64(const MacAddress& mac);

// The neighbour protocol (NDA_PROTOCOL, `ip neigh ... proto 83`) that marks the entries the
// switch installed: only those are ever replaced or removed by it.
inline constexpr uint8_t kSwitchNeighbourProtocol = 83;

// One IPv4 address of an interface with its prefix length (10.0.0.254/24: {0x0A0000FE, 24}).
struct InterfaceAddress {
  uint32_t ipv4 = 0;  // host order
  uint8_t prefix_len = 32;
};

// One IPv4 neighbour entry as the kernel stores it.
struct NeighbourEntry {
  uint32_t ipv4 = 0;     // host order: the key the kernel stored (NDA_DST)
  MacAddress mac{};      // NDA_LLADDR; all zero when the entry has none (incomplete, failed)
  uint16_t state = 0;    // NUD_* bits
  uint8_t protocol = 0;  // NDA_PROTOCOL; 0 when the entry has none
  bool ours() const { return protocol == kSwitchNeighbourProtocol; }
};

// What CheckNeighbourEntry looks at: the data interface, the host's addresses and the
// interface's neighbour table at one moment.
struct NeighbourHost {
  std::string iface;
  // False on loopback and point-to-point interfaces, where the kernel keys every neighbour
  // entry as 0.0.0.0 whatever address it was asked for.
  bool keyed_by_address = true;
  std::vector<InterfaceAddress> iface_addresses;  // the interface's IPv4 addresses
  std::vector<uint32_t> host_addresses;           // every IPv4 address of the host, any interface
  std::vector<NeighbourEntry> neighbours;         // the interface's IPv4 neighbour entries
};

// Whether the switch may install a permanent neighbour entry `ipv4` (host order) -> `mac` on
// host.iface. OK(true): install it. OK(false): an entry the switch did not install already maps
// `ipv4` to `mac` permanently (an operator's static entry): nothing to install, and it stays the
// operator's. FailedPrecondition otherwise, naming the address, the MAC, the reason and the
// subnets that would be accepted: the interface is loopback or point-to-point or has no IPv4
// address; the MAC is zero or multicast; the address is 0.0.0.0, loopback (127/8), multicast
// (224/4), the limited broadcast, off the interface's subnets, one of the host's own, a
// subnet's network or broadcast address (prefixes up to /30), or already reached at another MAC
// through an entry the switch did not install (entries without a MAC do not count). Pure.
StatusOr<bool> CheckNeighbourEntry(const NeighbourHost& host, uint32_t ipv4, const MacAddress& mac);

// "10.0.0.0/24" for each of `addresses`' subnets, comma separated ("none" when empty).
std::string DescribeSubnets(const std::vector<InterfaceAddress>& addresses);

// Reads `iface`'s flags and IPv4 addresses, the host's IPv4 addresses (getifaddrs) and the
// interface's IPv4 neighbour entries (an rtnetlink dump; needs no privilege). Errors: NotFound
// (no such interface), Unavailable (getifaddrs or netlink failed or did not answer within 1 s).
StatusOr<NeighbourHost> ReadNeighbourHost(const std::string& iface);

// The IPv4 neighbour entries of `iface` that resolve to a MAC now (the kernel's NUD_VALID
// states: permanent, noarp, reachable, stale, delay, probe; a MAC that is not all zero): where
// the kernel itself would send. An rtnetlink dump, as ReadNeighbourHost's; needs no privilege.
// The one reader of the kernel's neighbour table (RawChannel asks it for destinations it never
// heard from). Errors: NotFound (no such interface), Unavailable (netlink failed or did not
// answer within 1 s).
StatusOr<std::vector<std::pair<uint32_t, MacAddress>>> ReadResolvedNeighbours(const std::string& iface);

// Permanent neighbour entries on one interface, installed and removed over rtnetlink, each
// tagged kSwitchNeighbourProtocol. Only entries with that tag on this interface are ever
// removed: those left by an earlier run at Open, those no longer wanted at Sync, all of them
// when the object is destroyed, each by the key the kernel stored (found by a dump).
class NeighbourEntries {
 public:
  // Refuses loopback and point-to-point interfaces, then removes the entries an earlier run
  // left on `iface` (removed_at_open() counts them). Errors: NotFound (no such interface),
  // FailedPrecondition (loopback or point-to-point, naming why), Unavailable (netlink socket),
  // PermissionDenied (leftovers found but not removable without CAP_NET_ADMIN).
  static StatusOr<std::unique_ptr<NeighbourEntries>> Open(const std::string& iface);
  ~NeighbourEntries();  // removes every entry of ours on the interface
  NeighbourEntries(const NeighbourEntries&) = delete;
  NeighbourEntries& operator=(const NeighbourEntries&) = delete;

  // CheckNeighbourEntry against the host as it is now (ReadNeighbourHost); OK(false) also when
  // the MAC is all zero (no entry wanted). Errors as CheckNeighbourEntry and ReadNeighbourHost.
  StatusOr<bool> Check(uint32_t ipv4, const MacAddress& mac) const;

  // Makes this switch's entries on the interface equal `wanted` (ipv4 host order, MAC): removes
  // ours that are no longer wanted, installs (or replaces) the new and changed ones that
  // CheckNeighbourEntry allows against the table as it is now. Returns the first error (the
  // others are still attempted): FailedPrecondition (an entry refused), PermissionDenied
  // without CAP_NET_ADMIN, Unavailable otherwise, naming the address. Entries whose MAC is all
  // zero are ignored.
  Status Sync(const std::vector<std::pair<uint32_t, MacAddress>>& wanted);

  const std::string& interface() const { return iface_; }
  size_t installed() const { return installed_.size(); }
  size_t removed_at_open() const { return removed_at_open_; }

 private:
  NeighbourEntries() = default;
  // RTM_NEWNEIGH (replace, permanent, our protocol) or RTM_DELNEIGH for `ipv4` on ifindex_;
  // waits for the kernel's ack.
  Status Request(bool add, uint32_t ipv4, const MacAddress& mac);
  // Removes every entry of ours on the interface whose address is not in `keep` (by the key
  // the dump returned); `removed` counts them. Returns the first error.
  Status RemoveOurs(const std::map<uint32_t, MacAddress>& keep, size_t* removed);

  int fd_ = -1;
  int ifindex_ = 0;
  uint32_t seq_ = 0;
  std::string iface_;
  std::map<uint32_t, MacAddress> installed_;
  size_t removed_at_open_ = 0;
};

}  // namespace switchml::transport
