#include "transport/kernel_counters.h"

#include <gtest/gtest.h>

#include <map>

namespace switchml::transport {
namespace {

// Lines as Linux 6.1 writes them (values shortened where the field list is long).
constexpr std::string_view kSnmp =
    "Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos "
    "InDiscards InDelivers\n"
    "Ip: 2 64 2178 17 3 0 0 5 2178\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn\n"
    "Tcp: 1 200 120000 -1\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors "
    "IgnoredMulti MemErrors\n"
    "Udp: 24 0 9 25 4 0 5 0 0\n"
    "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors "
    "IgnoredMulti MemErrors\n"
    "UdpLite: 0 0 0 0 0 0 77 0 0\n";
constexpr std::string_view kNetstat =
    "TcpExt: SyncookiesSent SyncookiesRecv\n"
    "TcpExt: 0 0\n"
    "IpExt: InNoRoutes InTruncatedPkts InCsumErrors\n"
    "IpExt: 0 0 11\n";

std::map<std::string, int64_t> AsMap(const std::vector<std::pair<std::string, int64_t>>& v) {
  return {v.begin(), v.end()};
}

TEST(ParseSnmpTable, NamesEveryFieldBySection) {
  auto parsed = ParseSnmpTable(kSnmp, "/proc/net/snmp");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto m = AsMap(*parsed);
  EXPECT_EQ(m.at("Ip.InHdrErrors"), 17);
  EXPECT_EQ(m.at("Ip.InDiscards"), 5);
  EXPECT_EQ(m.at("Tcp.MaxConn"), -1);
  EXPECT_EQ(m.at("Udp.InCsumErrors"), 5);
  EXPECT_EQ(m.at("UdpLite.InCsumErrors"), 77);  // not mixed up with Udp's
  EXPECT_EQ(parsed->size(), 9u + 4u + 9u + 9u);
  EXPECT_EQ(parsed->front().first, "Ip.Forwarding");  // file order
}

TEST(ParseSnmpTable, RefusesMalformedTextNamingTheLine) {
  struct Case {
    std::string_view text, want;
  } cases[] = {
      {"Udp: InDatagrams NoPorts\n", "line 1"},                         // header without values
      {"Udp: InDatagrams NoPorts\nUdp: 1\n", "1 values for 2 names"},  // short
      {"Udp: InDatagrams NoPorts\nIp: 1 2\n", "expected the values of Udp:"},
      {"Udp: InDatagrams NoPorts\nUdp: 1 x2\n", "'x2' of Udp.NoPorts is not an integer"},
      {"Udp InDatagrams\nUdp 1\n", "no 'Section:' prefix"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseSnmpTable(c.text, "/proc/net/snmp");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.want), std::string::npos) << parsed.status();
    EXPECT_NE(parsed.status().message().find("/proc/net/snmp"), std::string::npos);
  }
  // Blank lines and a missing final newline are fine; empty text is an empty table.
  EXPECT_EQ(ParseSnmpTable("\nUdp: A B\n\nUdp: 1 2", "x").value().size(), 2u);
  EXPECT_TRUE(ParseSnmpTable("", "x").value().empty());
}

TEST(KernelDropCounters, PicksTheReceiveErrorsInAFixedOrder) {
  auto snmp = ParseSnmpTable(kSnmp, "snmp").value();
  auto netstat = ParseSnmpTable(kNetstat, "netstat").value();
  snmp.insert(snmp.end(), netstat.begin(), netstat.end());
  const std::vector<std::pair<std::string, uint64_t>> want = {
      {"kernel_ip_in_hdr_errors", 17}, {"kernel_ip_in_csum_errors", 11},
      {"kernel_ip_in_addr_errors", 3}, {"kernel_ip_in_discards", 5},
      {"kernel_udp_in_errors", 9},     {"kernel_udp_in_csum_errors", 5},
      {"kernel_udp_rcvbuf_errors", 4}, {"kernel_udp_mem_errors", 0}};
  EXPECT_EQ(KernelDropCounters(snmp), want);
  // A kernel without IpExt (or a field) leaves it out rather than inventing a zero.
  const auto only_snmp = KernelDropCounters(ParseSnmpTable(kSnmp, "snmp").value());
  EXPECT_EQ(only_snmp.size(), want.size() - 1);
  for (const auto& [name, v] : only_snmp) EXPECT_NE(name, "kernel_ip_in_csum_errors");
}

TEST(ReadKernelDropCounters, ReadsThisNamespace) {
  Status error;
  const auto counters = ReadKernelDropCounters(&error);
  ASSERT_TRUE(error.ok()) << error;  // Linux always has both files
  const auto m = std::map<std::string, uint64_t>(counters.begin(), counters.end());
  EXPECT_EQ(m.count("kernel_ip_in_hdr_errors"), 1u);
  EXPECT_EQ(m.count("kernel_udp_in_csum_errors"), 1u);
  EXPECT_EQ(m.count("kernel_udp_rcvbuf_errors"), 1u);
}

}  // namespace
}  // namespace switchml::transport
