// transport/kernel_counters.h — the kernel's own IPv4/UDP receive-error counters, for a switch
// in kernel-UDP mode: a datagram the kernel drops (a wrong IPv4 header checksum, a wrong UDP
// checksum, a full socket buffer) never reaches the switch, whose counters then show nothing.
//
//   /proc/net/snmp and /proc/net/netstat hold pairs of lines, a header and its values:
//     Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors ...
//     Udp: 24 0 0 25 0 0 0 ...
//   ParseSnmpTable turns such text into ("Udp.InCsumErrors", 0) pairs; KernelDropCounters
//   picks the receive errors a switch cares about and names them kernel_* (snake_case):
//
//   for (auto& [name, value] : transport::ReadKernelDropCounters()) ...  // kernel_udp_in_csum_errors
//
// The counters are per network namespace (the reading process's), not per interface or socket:
// other traffic of the namespace counts too. A socket's own drops are the channel's
// (UdpChannel::TransportCounters, udp_socket_drops). Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "switchml/status.h"

namespace switchml::transport {

// Parses the text of /proc/net/snmp or /proc/net/netstat (`source` names it in errors) into
// ("Section.Field", value) pairs in file order. Errors: InvalidArgument naming the source and
// line when a values line does not follow its header line, their counts differ, or a value is
// not an integer. Values may be negative (Tcp MaxConn -1).
StatusOr<std::vector<std::pair<std::string, int64_t>>> ParseSnmpTable(std::string_view text,
                                                                      std::string_view source);

// The receive errors among `parsed` (ParseSnmpTable of both files), in a fixed order, by the
// names the switch prints; fields the kernel does not have are left out:
//   kernel_ip_in_hdr_errors    Ip.InHdrErrors     bad IPv4 header (checksum included)
//   kernel_ip_in_csum_errors   IpExt.InCsumErrors wrong IPv4 header checksum
//   kernel_ip_in_addr_errors   Ip.InAddrErrors
//   kernel_ip_in_discards      Ip.InDiscards
//   kernel_udp_in_errors       Udp.InErrors       every UDP receive error
//   kernel_udp_in_csum_errors  Udp.InCsumErrors   wrong UDP checksum
//   kernel_udp_rcvbuf_errors   Udp.RcvbufErrors   a socket's receive buffer was full
//   kernel_udp_mem_errors      Udp.MemErrors
std::vector<std::pair<std::string, uint64_t>> KernelDropCounters(
    const std::vector<std::pair<std::string, int64_t>>& parsed);

// Reads /proc/net/snmp and /proc/net/netstat of this process's network namespace and returns
// KernelDropCounters of them. A file that cannot be read or parsed contributes nothing (the
// error goes to *error if given).
std::vector<std::pair<std::string, uint64_t>> ReadKernelDropCounters(Status* error = nullptr);

}  // namespace switchml::transport
