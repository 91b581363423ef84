#include "dataplane/switch_host.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "transport/loopback.h"

namespace switchml::dataplane {
namespace {

using ::testing::HasSubstr;

SwitchHostConfig SmallConfig() {
  SwitchHostConfig c;
  c.switch_config.num_slots = 64;
  c.switch_config.max_workers = 4;
  c.announce_interval_s = 0;
  return c;
}

bool Has(const std::vector<std::pair<std::string, uint64_t>>& counters, const std::string& name) {
  for (const auto& [n, v] : counters) {
    if (n == name) return true;
  }
  return false;
}

// The names of this process's threads (/proc/self/task/<tid>/comm).
std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string comm;
    std::ifstream(std::string("/proc/self/task/") + e->d_name + "/comm") >> comm;
    names.push_back(comm);
  }
  closedir(d);
  return names;
}

TEST(SwitchHostTest, KernelUdpOneChannelPerIoThreadEachOnItsPort) {
  SwitchHostConfig c = SmallConfig();
  c.bind = {0x7F000001, 0};  // 127.0.0.1, free ports
  c.switch_config.io_threads = 3;
  auto host = SwitchHost::Create(c);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ((*host)->ports().size(), 3u);
  EXPECT_EQ((*host)->server()->io_threads(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_NE((*host)->ports()[i], 0);
    EXPECT_EQ((*host)->server()->local_endpoints()[i].port, (*host)->ports()[i]);
  }
  EXPECT_EQ((*host)->iface(), "lo");  // the interface holding 127.0.0.1
  EXPECT_FALSE((*host)->raw());
  EXPECT_FALSE((*host)->neighbour_entries());
  EXPECT_TRUE((*host)->KernelCounters().empty());  // counted from Start
  ASSERT_TRUE((*host)->Start().ok());
  EXPECT_TRUE((*host)->server()->running());
  // Named when Start returns (bench/switch_rate finds the I/O threads by name).
  const auto names = ThreadNames();
  for (const char* name : {"swml-io-0", "swml-io-1", "swml-io-2", "swml-control"}) {
    EXPECT_EQ(std::count(names.begin(), names.end(), name), 1) << name;
  }
  const auto all = (*host)->AllCounters();
  EXPECT_TRUE(Has(all, "datagrams_received"));
  EXPECT_FALSE((*host)->KernelCounters().empty());
  EXPECT_TRUE(Has(all, (*host)->KernelCounters()[0].first));
  const auto lines = (*host)->StartupLines();
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0], HasSubstr("(lo); no neighbour entries"));
  (*host)->Stop();
  EXPECT_FALSE((*host)->server()->running());
  (*host)->Stop();  // idempotent
}

TEST(SwitchHostTest, FactoryChannelsOnALoopbackFabric) {
  auto fabric = transport::LoopbackFabric::Create();
  ASSERT_TRUE(fabric.ok());
  SwitchHostConfig c = SmallConfig();
  c.io = SwitchHostConfig::Io::kFactory;
  c.bind = {0x0A000001, 48864};
  c.switch_config.io_threads = 2;
  c.channel_factory = [&](uint32_t i) {
    return (*fabric)->CreateChannel({0x0A000001, uint16_t(48864 + i)});
  };
  auto host = SwitchHost::Create(c);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ((*host)->ports(), (std::vector<uint16_t>{48864, 48865}));
  EXPECT_TRUE((*host)->iface().empty());
  EXPECT_EQ((*host)->server()->Info().ipv4, 0x0A000001u);
  ASSERT_TRUE((*host)->Start().ok());
  EXPECT_TRUE((*host)->KernelCounters().empty());  // no kernel in the loop
  EXPECT_TRUE((*host)->StartupLines().empty());
}

TEST(SwitchHostTest, BadConfigsNameTheFlag) {
  {
    SwitchHostConfig c = SmallConfig();
    c.io = SwitchHostConfig::Io::kRaw;
    c.bind = {0, 48864};
    auto host = SwitchHost::Create(c);
    ASSERT_FALSE(host.ok());
    EXPECT_EQ(host.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(host.status().message(), HasSubstr("--io raw needs --bind IP"));
  }
  {
    SwitchHostConfig c = SmallConfig();
    c.io = SwitchHostConfig::Io::kRaw;
    c.bind = {0x7F000001, 48864};
    c.neighbour_entries = true;
    auto host = SwitchHost::Create(c);
    ASSERT_FALSE(host.ok());
    EXPECT_THAT(host.status().message(), HasSubstr("--neighbour-entries is for --io udp"));
  }
  {
    SwitchHostConfig c = SmallConfig();
    c.bind = {0x7F000001, 65535};
    c.switch_config.io_threads = 2;
    auto host = SwitchHost::Create(c);
    ASSERT_FALSE(host.ok());
    EXPECT_THAT(host.status().message(), HasSubstr("needs ports up to 65536 > 65535"));
  }
  {
    SwitchHostConfig c = SmallConfig();
    c.bind = {0x7F000001, 0};
    c.announce_interval_s = -1;
    auto host = SwitchHost::Create(c);
    ASSERT_FALSE(host.ok());
    EXPECT_THAT(host.status().message(), HasSubstr("--announce-interval-s must be in [0, 3600]"));
  }
  {
    SwitchHostConfig c = SmallConfig();
    c.io = SwitchHostConfig::Io::kFactory;
    auto host = SwitchHost::Create(c);
    ASSERT_FALSE(host.ok());
    EXPECT_THAT(host.status().message(), HasSubstr("channel_factory"));
  }
  {
    SwitchHostConfig c = SmallConfig();
    c.io = SwitchHostConfig::Io::kFactory;
    c.channel_factory = [](uint32_t) -> StatusOr<std::unique_ptr<transport::Channel>> {
      return UnavailableError("no such fabric");
    };
    auto host = SwitchHost::Create(c);
    ASSERT_FALSE(host.ok());
    EXPECT_EQ(host.status().code(), StatusCode::kUnavailable);
    EXPECT_THAT(host.status().message(), HasSubstr("I/O thread 0: "));
  }
}

}  // namespace
}  // namespace switchml::dataplane
