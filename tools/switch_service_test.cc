// SwitchService: the switch process a front end starts (kernel UDP on 127.0.0.1, free ports).
#include "switch_service.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/job_client.h"

namespace switchml::tools {
namespace {

namespace fs = std::filesystem;

class SwitchServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/switch_service_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Kernel UDP on 127.0.0.1, free ports, a small switch; log lines kept in `log_`, each with
  // whether the ready file existed when it was logged.
  SwitchServiceOptions Options() {
    SwitchServiceOptions o;
    o.host.switch_config.num_slots = 64;
    o.host.switch_config.max_elements_per_packet = 256;
    o.host.switch_config.max_workers = 4;
    o.host.bind = {0x7F000001, 0};
    o.host.announce_interval_s = 0;
    o.controller_port = 0;
    o.token_dir = dir_;
    o.ready_file = dir_ + "/ready.json";
    o.host.log = [this](bool warning, const std::string& text) {
      log_.push_back((warning ? "W " : "I ") + text);
      ready_when_logged_.push_back(fs::exists(dir_ + "/ready.json"));
    };
    return o;
  }
  size_t EntriesInDir() const {
    return size_t(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }

  std::string dir_;
  std::vector<std::string> log_;
  std::vector<bool> ready_when_logged_;
};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST_F(SwitchServiceTest, GeneratesCredentialLogsThenWritesReadyFileAndCleansUp) {
  auto s = SwitchService::Start(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  SwitchService& svc = **s;
  // The generated credential: a private file in a private directory under token_dir.
  const std::string token_file = svc.generated_token_file();
  ASSERT_FALSE(token_file.empty());
  EXPECT_EQ(token_file.rfind(dir_ + "/switchml-switch.", 0), 0u) << token_file;
  struct stat st {};
  ASSERT_EQ(::stat(token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string token;
  std::ifstream(token_file) >> token;
  EXPECT_EQ(token.size(), 32u);

  // The ready file names what runs, and was written after every startup line was logged.
  const nlohmann::json ready = ReadJson(dir_ + "/ready.json");
  EXPECT_EQ(ready, svc.ReadyJson());
  EXPECT_EQ(ready["controller_port"].get<int>(), svc.controller_port());
  EXPECT_NE(svc.controller_port(), 0);
  EXPECT_EQ(ready["udp_port"].get<int>(), svc.host().ports()[0]);
  EXPECT_EQ(ready["udp_ports"].get<std::vector<int>>().size(), 1u);
  EXPECT_EQ(ready["operator_token_file"].get<std::string>(), token_file);
  EXPECT_FALSE(fs::exists(dir_ + "/ready.json.tmp"));
  ASSERT_FALSE(svc.StartupLines().empty());
  for (const std::string& line : svc.StartupLines()) {
    bool logged = false;
    for (size_t i = 0; i < log_.size(); ++i) {
      if (log_[i] == "I " + line) {
        logged = true;
        EXPECT_FALSE(ready_when_logged_[i]) << "logged after the ready file: " << line;
      }
    }
    EXPECT_TRUE(logged) << "not logged: " << line;
  }
  EXPECT_EQ(svc.StartupLines()[0].rfind("data plane on udp 127.0.0.1:" +
                                            std::to_string(svc.host().ports()[0]) +
                                            ", session service on 127.0.0.1:" +
                                            std::to_string(svc.controller_port()),
                                        0),
            0u)
      << svc.StartupLines()[0];
  bool names_file = false;
  for (const std::string& line : svc.StartupLines()) {
    names_file = names_file || line == "operator credential: generated, in " + token_file;
  }
  EXPECT_TRUE(names_file);

  // The controller serves the job service with that credential, and refuses another.
  auto client = rendezvous::JobClient::Connect("127.0.0.1:" + std::to_string(svc.controller_port()),
                                               std::chrono::seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->set_operator_token(std::string(32, 'f'));
  auto denied = (*client)->ListJobs();
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status();
  (*client)->set_operator_token(token);
  auto listed = (*client)->ListJobs();
  EXPECT_TRUE(listed.ok()) << listed.status();

  // A datagram to the data plane shows in the counters.
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(svc.host().ports()[0]);
  to.sin_addr.s_addr = htonl(0x7F000001);
  const char junk[2] = {'x', 'y'};
  ASSERT_EQ(::sendto(fd, junk, sizeof(junk), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 2);
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (svc.Counters().total.core.datagrams_received == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  svc.Stop();
  const SwitchServiceCounters c = svc.Counters();
  EXPECT_EQ(c.total.core.datagrams_received, 1u);
  EXPECT_EQ(c.total.core.decode_error(wire::DecodeError::kTruncated), 1u);
  EXPECT_TRUE(c.per_io_thread.empty());
  const nlohmann::json j = c.ToJson();
  EXPECT_EQ(j["datagrams_received"].get<uint64_t>(), 1u);
  EXPECT_TRUE(j.contains("udp_socket_drops")) << j.dump();
  EXPECT_TRUE(j.contains("kernel_udp_in_errors")) << j.dump();
  EXPECT_FALSE(j.contains("per_io_thread"));
  // Stop removed the token file and its directory; the ready file stays.
  EXPECT_FALSE(fs::exists(token_file));
  EXPECT_FALSE(fs::exists(fs::path(token_file).parent_path()));
  EXPECT_TRUE(svc.generated_token_file().empty());
  EXPECT_EQ(EntriesInDir(), 1u);
  svc.Stop();  // idempotent
}

TEST_F(SwitchServiceTest, GivenCredentialIsNotWrittenAnywhere) {
  SwitchServiceOptions o = Options();
  o.operator_token = std::string(24, 'a');
  o.operator_token_source = "--operator-token-file F";
  o.host.switch_config.io_threads = 2;
  auto s = SwitchService::Start(std::move(o));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->generated_token_file().empty());
  const nlohmann::json ready = ReadJson(dir_ + "/ready.json");
  EXPECT_FALSE(ready.contains("operator_token_file")) << ready.dump();
  EXPECT_EQ(ready["udp_ports"].get<std::vector<int>>().size(), 2u);
  EXPECT_EQ(EntriesInDir(), 1u);  // the ready file only
  bool names_source = false, names_threads = false;
  for (const std::string& line : (*s)->StartupLines()) {
    names_source = names_source || line == "operator credential: --operator-token-file F";
    names_threads = names_threads || line.rfind("2 I/O threads on udp ports ", 0) == 0;
  }
  EXPECT_TRUE(names_source);
  EXPECT_TRUE(names_threads);
  (*s)->Stop();
  EXPECT_EQ((*s)->Counters().per_io_thread.size(), 2u);
  EXPECT_TRUE((*s)->Counters().ToJson()["per_io_thread"].is_array());
}

TEST_F(SwitchServiceTest, BadOptionsAreRefusedBeforeAnythingIsMade) {
  SwitchServiceOptions o = Options();
  o.host.switch_config.num_slots = 0;
  auto s = SwitchService::Start(std::move(o));
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_slots"), std::string::npos) << s.status();
  o = Options();
  o.controller_port = 70000;
  s = SwitchService::Start(std::move(o));
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--controller-port"), std::string::npos) << s.status();
  o = Options();
  o.operator_token = "short";
  s = SwitchService::Start(std::move(o));
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status();
  EXPECT_EQ(EntriesInDir(), 0u);  // no token file, no ready file
}

TEST_F(SwitchServiceTest, ControllerPortInUseFailsAndRemovesTheGeneratedCredential) {
  // A TCP port held by a listening socket (without SO_REUSEPORT, so gRPC cannot share it).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7F000001);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  SwitchServiceOptions o = Options();
  o.controller_port = ntohs(a.sin_port);
  auto s = SwitchService::Start(std::move(o));
  ::close(fd);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message().rfind("session service: ", 0), 0u) << s.status();
  EXPECT_EQ(EntriesInDir(), 0u);  // the generated token file and its directory removed, no ready file
}

}  // namespace
}  // namespace switchml::tools
