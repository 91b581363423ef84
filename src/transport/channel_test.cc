#include "transport/channel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace switchml::transport {
namespace {

using ::testing::HasSubstr;

TEST(EndpointTest, ToStringFormatsDottedQuadAndPort) {
  EXPECT_EQ((Endpoint{0x7F000001, 48864}).ToString(), "127.0.0.1:48864");
  EXPECT_EQ((Endpoint{0, 0}).ToString(), "0.0.0.0:0");
  EXPECT_EQ((Endpoint{0xFFFFFFFF, 65535}).ToString(), "255.255.255.255:65535");
  EXPECT_EQ((Endpoint{0x0A000102, 7}).ToString(), "10.0.1.2:7");
}

TEST(ParseEndpointTest, ParsesAddressWithAndWithoutPort) {
  auto a = ParseEndpoint("10.0.1.2:9000", 48864);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Endpoint{0x0A000102, 9000}));

  auto b = ParseEndpoint("192.168.0.255", 48864);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, (Endpoint{0xC0A800FF, 48864}));

  auto c = ParseEndpoint("0.0.0.0:0", 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, (Endpoint{0, 0}));

  auto d = ParseEndpoint("255.255.255.255:65535", 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, (Endpoint{0xFFFFFFFF, 65535}));
}

TEST(ParseEndpointTest, AcceptsLocalhost) {
  auto a = ParseEndpoint("localhost", 48864);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Endpoint{0x7F000001, 48864}));
  auto b = ParseEndpoint("localhost:5", 48864);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, (Endpoint{0x7F000001, 5}));
}

TEST(ParseEndpointTest, RoundTripsThroughToString) {
  for (const char* text : {"1.2.3.4:5", "127.0.0.1:48864", "10.200.30.4:65535"}) {
    auto ep = ParseEndpoint(text, 0);
    ASSERT_TRUE(ep.ok()) << text << ": " << ep.status();
    EXPECT_EQ(ep->ToString(), text);
  }
}

struct BadCase {
  const char* text;
  const char* problem;  // a substring the message must contain
};

TEST(ParseEndpointTest, RejectsMalformedInputNamingTheProblem) {
  const BadCase cases[] = {
      {"", "empty"},
      {":80", "address is empty"},
      {"1.2.3", "expected 4 dotted octets"},
      {"1.2.3.4.5", "found more"},
      {"1.2..4", "octet 3 is empty"},
      {"1.2.3.256", "octet 4 is 256, must be 0..255"},
      {"300.1.1.1", "octet 1 is 300"},
      {"1.2.3.4x", "octet 4 '4x' is not a decimal number"},
      {"1.2.x.4", "octet 3 'x' is not a decimal number"},
      {"1.2.3.1234", "octet 4 '1234'"},
      {"01.2.3.4", "leading zero"},
      {" 1.2.3.4", "octet 1"},
      {"1.2.3.4:", "port is empty"},
      {"1.2.3.4:65536", "port 65536 is out of range 0..65535"},
      {"1.2.3.4:99999999", "port 99999999 is out of range"},
      {"1.2.3.4:80x", "port '80x' is not a decimal number"},
      {"1.2.3.4:-1", "port '-1' is not a decimal number"},
      {"1.2.3.4:80:90", "port '80:90'"},
      {"localhost:x", "port 'x'"},
      {"example.com", "octet"},
  };
  for (const BadCase& c : cases) {
    auto ep = ParseEndpoint(c.text, 48864);
    ASSERT_FALSE(ep.ok()) << "'" << c.text << "' parsed as " << ep->ToString();
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(ep.status().message(), HasSubstr(c.problem)) << c.text;
    if (c.text[0] != '\0') {
      EXPECT_THAT(ep.status().message(), HasSubstr(std::string("'") + c.text + "'")) << c.text;
    }
  }
}

TEST(GroupByDestinationTest, MakesEachDestinationContiguousKeepingOrder) {
  const Endpoint a{1, 10}, b{2, 10}, c{1, 11};
  uint8_t bytes[12];
  std::vector<TxDatagram> in;
  const Endpoint order[] = {a, b, c, a, b, c, b, a, a, c, b, a};
  for (size_t i = 0; i < 12; ++i) in.push_back({&bytes[i], 1, order[i]});
  std::vector<TxDatagram> out;
  GroupByDestination(in, &out);
  ASSERT_EQ(out.size(), in.size());
  // First appearance order a, b, c; within a destination the original order.
  const size_t expect[] = {0, 3, 7, 8, 11, 1, 4, 6, 10, 2, 5, 9};
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(out[i].data, &bytes[expect[i]]) << i;
  GroupByDestination({}, &out);
  EXPECT_TRUE(out.empty());
}

TEST(GroupByDestinationTest, MoreThan256DestinationsLoseNothing) {
  // 300 destinations, 3 datagrams each, round robin: every datagram appears once, the first 256
  // destinations are contiguous, and per-destination order holds throughout.
  std::vector<uint32_t> ids;
  std::vector<TxDatagram> in;
  for (uint32_t r = 0; r < 3; ++r) {
    for (uint32_t d = 0; d < 300; ++d) ids.push_back(d * 3 + r);
  }
  for (const uint32_t& id : ids) in.push_back({reinterpret_cast<const uint8_t*>(&id), 4, {id / 3 + 1, 7}});
  std::vector<TxDatagram> out;
  GroupByDestination(in, &out);
  ASSERT_EQ(out.size(), in.size());
  std::vector<int> seen(900, 0);
  std::vector<int> last_round(300, -1);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t id = *reinterpret_cast<const uint32_t*>(out[i].data);
    ++seen[id];
    EXPECT_GT(static_cast<int>(id % 3), last_round[id / 3]);
    last_round[id / 3] = static_cast<int>(id % 3);
    if (i < 256 * 3) {
      EXPECT_EQ(id / 3, i / 3) << i;
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace switchml::transport
