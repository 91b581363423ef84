// The interface lookups of netif.h on this host's loopback, and the MAC conversions. (Neighbour
// entries need CAP_NET_ADMIN and an interface with ARP: tests/netns/reference_clients_test.sh.)
#include "transport/netif.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace switchml::transport
