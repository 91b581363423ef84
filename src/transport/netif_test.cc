// The interface lookups of netif.h on this host's loopback, the MAC conversions, and the pure
// decision which neighbour entries the switch may install (CheckNeighbourEntry). (Installing
// entries needs CAP_NET_ADMIN and an interface with ARP: tests/netns/neighbour_test.sh and
// tests/netns/reference_clients_test.sh.)
#include "transport/netif.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/neighbour.h>

namespace switchml::transport {
namespace {

using ::testing::HasSubstr;

TEST(NetifTest, LoopbackHoldsItsAddressAndHasTheZeroMac) {
  auto lo = InterfaceOfIpv4(0x7F000001);
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(*lo, "lo");
  auto mac = InterfaceMac(*lo);
  ASSERT_TRUE(mac.ok()) << mac.status();
  EXPECT_EQ(*mac, MacAddress{});
}

TEST(NetifTest, UnknownAddressesAndInterfacesAreNamed) {
  auto none = InterfaceOfIpv4(0xCB007101);  // 203.0.113.1, TEST-NET-3
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("203.0.113.1"));
  auto missing = InterfaceMac("nosuchif0");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nosuchif0"));
  EXPECT_EQ(InterfaceMac(std::string(40, 'x')).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NeighbourEntries::Open("nosuchif0").status().code(), StatusCode::kNotFound);
}

TEST(NetifTest, MacConversionsRoundTripFirstOctetMostSignificant) {
  const MacAddress m{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  EXPECT_EQ(MacToUint64(m), 0x021122334455ull);
  EXPECT_EQ(MacFromUint64(0x021122334455ull), m);
  EXPECT_EQ(MacFromUint64(MacToUint64(m)), m);
  EXPECT_EQ(MacToString(MacFromUint64(0x001122334455ull)), "00:11:22:33:44:55");
}

constexpr uint32_t Ip(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return a << 24 | b << 16 | c << 8 | d;
}

// The switch host of the examples: eth0 10.82.1.254/24, mgmt0 10.82.2.254/24, lo 127.0.0.1;
// the gateway 10.82.1.1 reached at 02:00:00:00:00:01 (learned by ARP), an operator's static
// entry 10.82.1.9 -> 02:00:00:00:00:09, an unresolved 10.82.1.8, and an entry of ours.
NeighbourHost Host() {
  NeighbourHost h;
  h.iface = "eth0";
  h.iface_addresses = {{Ip(10, 82, 1, 254), 24}};
  h.host_addresses = {Ip(127, 0, 0, 1), Ip(10, 82, 1, 254), Ip(10, 82, 2, 254)};
  h.neighbours = {
      {Ip(10, 82, 1, 1), {0x02, 0, 0, 0, 0, 0x01}, NUD_REACHABLE, 0},
      {Ip(10, 82, 1, 9), {0x02, 0, 0, 0, 0, 0x09}, NUD_PERMANENT, 0},
      {Ip(10, 82, 1, 8), {}, NUD_FAILED, 0},
      {Ip(10, 82, 1, 7), {0x02, 0, 0, 0, 0, 0x07}, NUD_PERMANENT, kSwitchNeighbourProtocol},
  };
  return h;
}

constexpr MacAddress kWorkerMac{0x02, 0x5e, 0x01, 0, 0, 0x05};

// The reason CheckNeighbourEntry gives for (ip, mac), "" when it allows it.
std::string Refusal(const NeighbourHost& h, uint32_t ip, const MacAddress& mac = kWorkerMac) {
  auto r = CheckNeighbourEntry(h, ip, mac);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  return r.status().message();
}

TEST(CheckNeighbourEntryTest, AllowsAnUnusedUnicastAddressOfTheSubnet) {
  const NeighbourHost h = Host();
  for (uint32_t ip : {Ip(10, 82, 1, 2), Ip(10, 82, 1, 5), Ip(10, 82, 1, 253)}) {
    auto r = CheckNeighbourEntry(h, ip, kWorkerMac);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(*r);
  }
  // An address the kernel could not resolve (no MAC) is free.
  EXPECT_EQ(Refusal(h, Ip(10, 82, 1, 8)), "");
  // Ours (a worker of an earlier session) may be replaced with another MAC, or kept.
  EXPECT_EQ(Refusal(h, Ip(10, 82, 1, 7)), "");
  EXPECT_TRUE(*CheckNeighbourEntry(h, Ip(10, 82, 1, 7), {0x02, 0, 0, 0, 0, 0x07}));
}

TEST(CheckNeighbourEntryTest, RefusesEveryAddressThatIsNotAWorkerOnTheSubnet) {
  const NeighbourHost h = Host();
  const std::string accepted = "the switch installs entries only for unicast addresses of 10.82.1.0/24 (eth0)";
  struct Case {
    uint32_t ip;
    std::string reason;
  };
  const Case cases[] = {
      {Ip(127, 0, 0, 1), "127.0.0.1 is a loopback address (127.0.0.0/8)"},
      {Ip(127, 1, 2, 3), "127.1.2.3 is a loopback address"},
      {0, "0.0.0.0 is not the address of a host"},
      {Ip(224, 0, 0, 1), "224.0.0.1 is a multicast address"},
      {Ip(239, 255, 255, 250), "is a multicast address"},
      {0xFFFFFFFFu, "255.255.255.255 is the limited broadcast address"},
      {Ip(10, 82, 1, 254), "10.82.1.254 is one of this switch host's own addresses"},
      {Ip(10, 82, 2, 254), "10.82.2.254 is one of this switch host's own addresses"},  // mgmt0's
      {Ip(10, 82, 1, 0), "10.82.1.0 is the network address of 10.82.1.0/24"},
      {Ip(10, 82, 1, 255), "10.82.1.255 is the broadcast address of 10.82.1.0/24"},
      {Ip(10, 82, 2, 5), "10.82.2.5 is not on eth0's subnets (10.82.1.0/24)"},
      {Ip(192, 0, 2, 1), "192.0.2.1 is not on eth0's subnets"},
      {Ip(10, 82, 1, 1),
       "the switch host already reaches 10.82.1.1 at 02:00:00:00:00:01 (a reachable neighbour "
       "entry the switch did not install)"},
      {Ip(10, 82, 1, 9), "already reaches 10.82.1.9 at 02:00:00:00:00:09 (a permanent"},
  };
  for (const Case& c : cases) {
    const std::string why = Refusal(h, c.ip);
    EXPECT_THAT(why, HasSubstr(c.reason)) << c.reason;
    // Every refusal names the entry, the interface and what would be accepted.
    EXPECT_THAT(why, HasSubstr(" lladdr 02:5e:01:00:00:05 on eth0: ")) << why;
    EXPECT_THAT(why, HasSubstr(accepted)) << why;
  }
}

TEST(CheckNeighbourEntryTest, AnOperatorsStaticEntryWithTheSameMacStaysTheOperators) {
  const NeighbourHost h = Host();
  auto r = CheckNeighbourEntry(h, Ip(10, 82, 1, 9), {0x02, 0, 0, 0, 0, 0x09});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(*r);  // nothing to install
  // The gateway at its own MAC: a learned entry, so ours may replace it (the worker is there).
  r = CheckNeighbourEntry(h, Ip(10, 82, 1, 1), {0x02, 0, 0, 0, 0, 0x01});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r);
}

TEST(CheckNeighbourEntryTest, RefusesBadMacsAndInterfacesKeyedAsZero) {
  NeighbourHost h = Host();
  EXPECT_THAT(Refusal(h, Ip(10, 82, 1, 5), MacAddress{}), HasSubstr("the MAC is all zero"));
  EXPECT_THAT(Refusal(h, Ip(10, 82, 1, 5), {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
              HasSubstr("multicast or broadcast"));
  EXPECT_THAT(Refusal(h, Ip(10, 82, 1, 5), {0x01, 0x00, 0x5e, 0, 0, 1}), HasSubstr("multicast or broadcast"));
  // The loopback case that took over a host's loopback traffic: every address refused.
  NeighbourHost lo;
  lo.iface = "lo";
  lo.keyed_by_address = false;
  lo.iface_addresses = {{Ip(127, 0, 0, 1), 8}};
  lo.host_addresses = {Ip(127, 0, 0, 1)};
  for (uint32_t ip : {Ip(127, 0, 0, 1), Ip(127, 0, 0, 2), Ip(10, 0, 0, 1)}) {
    EXPECT_THAT(Refusal(lo, ip), HasSubstr("lo is a loopback or point-to-point interface, where "
                                           "the kernel keys every neighbour entry as 0.0.0.0"));
  }
  NeighbourHost none = Host();
  none.iface_addresses.clear();
  EXPECT_THAT(Refusal(none, Ip(10, 82, 1, 5)), HasSubstr("eth0 has no IPv4 address"));
}

TEST(CheckNeighbourEntryTest, SeveralSubnetsAndSmallPrefixes) {
  NeighbourHost h = Host();
  h.iface_addresses.push_back({Ip(192, 168, 7, 1), 31});  // RFC 3021: both addresses are hosts
  h.iface_addresses.push_back({Ip(172, 16, 0, 1), 16});
  h.host_addresses.push_back(Ip(192, 168, 7, 1));
  h.host_addresses.push_back(Ip(172, 16, 0, 1));
  EXPECT_EQ(Refusal(h, Ip(192, 168, 7, 0)), "");
  EXPECT_EQ(Refusal(h, Ip(172, 16, 200, 3)), "");
  EXPECT_THAT(Refusal(h, Ip(172, 16, 255, 255)), HasSubstr("broadcast address of 172.16.0.0/16"));
  EXPECT_THAT(Refusal(h, Ip(192, 168, 7, 1)), HasSubstr("own addresses"));
  EXPECT_THAT(Refusal(h, Ip(10, 9, 9, 9)),
              HasSubstr("not on eth0's subnets (10.82.1.0/24, 192.168.7.0/31, 172.16.0.0/16)"));
  EXPECT_EQ(DescribeSubnets({}), "none");
  EXPECT_EQ(DescribeSubnets({{Ip(10, 0, 0, 1), 8}, {Ip(10, 0, 0, 2), 8}}), "10.0.0.0/8");
}

TEST(NetifTest, LoopbackIsNeverGivenNeighbourEntries) {
  auto host = ReadNeighbourHost("lo");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_FALSE(host->keyed_by_address);
  auto n = NeighbourEntries::Open("lo");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(n.status().message(), HasSubstr("lo is a loopback or point-to-point interface"));
  EXPECT_EQ(ReadNeighbourHost("nosuchif0").status().code(), StatusCode::kNotFound);
}

// The resolved entries are those of the full dump with a MAC in a valid state (no loopback
// entry ever has one).
TEST(NetifTest, ResolvedNeighboursAreTheDumpsEntriesWithAMac) {
  auto resolved = ReadResolvedNeighbours("lo");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  auto host = ReadNeighbourHost("lo");
  ASSERT_TRUE(host.ok()) << host.status();
  for (const auto& [ip, mac] : *resolved) {
    EXPECT_NE(mac, MacAddress{});
    bool in_dump = false;
    for (const auto& e : host->neighbours) in_dump |= e.ipv4 == ip && e.mac == mac;
    EXPECT_TRUE(in_dump) << ip;
  }
  const auto missing = ReadResolvedNeighbours("nosuchif0");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nosuchif0"));
}

}  // namespace
}  // namespace switchml::transport
