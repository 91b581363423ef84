#include "transport/arp_announce.h"

#include <gtest/gtest.h>

namespace switchml::transport {
namespace {

TEST(BuildGratuitousArp, IsAnAnnouncementFromTheSwitch) {
  const MacAddress mac = {0x02, 0x5e, 0x01, 0x00, 0x00, 0xfe};
  const auto f = BuildGratuitousArp(mac, 0x0A5101FE);  // 10.81.1.254
  const std::array<uint8_t, kArpFrameBytes> want = {
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // to: broadcast
      0x02, 0x5e, 0x01, 0x00, 0x00, 0xfe,  // from: the switch
      0x08, 0x06,                          // ARP
      0x00, 0x01, 0x08, 0x00, 6, 4,        // Ethernet, IPv4, address lengths
      0x00, 0x01,                          // request
      0x02, 0x5e, 0x01, 0x00, 0x00, 0xfe,  // sender MAC
      10, 81, 1, 254,                      // sender IPv4
      0, 0, 0, 0, 0, 0,                    // target MAC: unknown
      10, 81, 1, 254};                     // target IPv4 = sender's
  EXPECT_EQ(f, want);
}

TEST(ArpAnnouncer, RefusesBadArguments) {
  EXPECT_EQ(ArpAnnouncer::Create("", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ArpAnnouncer::Create("a-very-long-interface-name", 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ArpAnnouncer::Create("lo", 0).status().code(), StatusCode::kInvalidArgument);
  // Without CAP_NET_RAW: PermissionDenied; with it, loopback has no ARP and an unknown
  // interface is NotFound.
  auto lo = ArpAnnouncer::Create("lo", 0x7F000001);
  ASSERT_FALSE(lo.ok());
  EXPECT_TRUE(lo.status().code() == StatusCode::kFailedPrecondition ||
              lo.status().code() == StatusCode::kPermissionDenied)
      << lo.status();
  auto missing = ArpAnnouncer::Create("nosuchif0", 0x0A000001);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().code() == StatusCode::kNotFound ||
              missing.status().code() == StatusCode::kPermissionDenied)
      << missing.status();
}

}  // namespace
}  // namespace switchml::transport
