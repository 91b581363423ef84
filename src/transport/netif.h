// transport/netif.h — the host's network interfaces as the switch needs them: which interface
// holds an address, its MAC, and neighbour (ARP) entries the switch installs for workers that
// never answer ARP.
//
// The reference SwitchML client learns the switch's MAC from its session reply and addresses
// its frames to it, so the switch must advertise the real MAC of the interface its data plane
// uses; and it never answers ARP, so the switch's kernel (kernel-UDP mode) cannot resolve it
// and never sends its results unless the switch installs a neighbour entry from the MAC and
// IPv4 the worker registered.
//
//   SWITCHML_ASSIGN_OR_RETURN(std::string iface, InterfaceOfIpv4(bind_ip));   // "eth0"
//   SWITCHML_ASSIGN_OR_RETURN(MacAddress mac, InterfaceMac(iface));
//   SWITCHML_ASSIGN_OR_RETURN(auto neigh, NeighbourEntries::Open(iface));
//   neigh->Sync({{worker_ip, worker_mac}});   // installs; a later Sync without it removes it
//
// Thread-safety: the functions are thread-safe; a NeighbourEntries is used by one thread at a
// time (the caller serialises Sync).
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

// Permanent neighbour entries on one interface, installed and removed over rtnetlink. Only
// entries this object installed are ever removed (all of them when it is destroyed).
class NeighbourEntries {
 public:
  // Errors: NotFound (no such interface), Unavailable (netlink socket).
  static StatusOr<std::unique_ptr<NeighbourEntries>> Open(const std::string& iface);
  ~NeighbourEntries();  // removes every entry still installed
  NeighbourEntries(const NeighbourEntries&) = delete;
  NeighbourEntries& operator=(const NeighbourEntries&) = delete;

  // Makes the installed set equal `wanted` (ipv4 host order, MAC): installs (or replaces) the
  // new and changed entries, removes those no longer wanted. Returns the first error (the others
  // are still attempted): PermissionDenied without CAP_NET_ADMIN, Unavailable otherwise, naming
  // the address. Entries whose MAC is all zero are ignored.
  Status Sync(const std::vector<std::pair<uint32_t, MacAddress>>& wanted);

  const std::string& interface() const { return iface_; }
  size_t installed() const { return installed_.size(); }

 private:
  NeighbourEntries() = default;
  // RTM_NEWNEIGH (replace, permanent) or RTM_DELNEIGH for `ipv4`; waits for the kernel's ack.
  Status Request(bool add, uint32_t ipv4, const MacAddress& mac);

  int fd_ = -1;
  int ifindex_ = 0;
  uint32_t seq_ = 0;
  std::string iface_;
  std::map<uint32_t, MacAddress> installed_;
};

}  // namespace switchml::transport
