// End-to-end tests of the controller API: ControllerServer on 127.0.0.1 (port 0) with a fake
// switch (its job 0 registrations), SessionClient and raw generated stubs in the same process.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "controller/fake_switch_for_tests.h"
#include "rendezvous/session_client.h"
#include "controller/session_service.h"
#include "switchml.grpc.pb.h"

namespace switchml::controller {

using control::JobRegistration;
using control::JobState;
using control::JobWorkerGrant;
using control::SwitchInfo;
using control::WorkerRegistration;
using rendezvous::SessionClient;
using rendezvous::kReferenceSwitchUdpPort;
using rendezvous::Bootstrap;
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;
using control::JobRegistration;
using control::JobState;
using control::JobWorkerGrant;

// Records every registration into job 0 (the reference session) and answers with error_, or
// with info_ as the switch's SwitchInfo.
class FakeSink : public UnimplementedSwitchForTests {
 public:
  StatusOr<JobWorkerGrant> RegisterJobWorker(const JobRegistration& reg) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(reg.job_id, control::kReferenceJobId);
    EXPECT_TRUE(reg.token.empty());
    registrations_.push_back(reg.worker);
    if (!error_.ok()) return error_;
    JobWorkerGrant grant;
    grant.switch_info = info_;
    grant.num_workers = reg.worker.num_workers;
    grant.state = JobState::kRunning;
    return grant;
  }
  void set_error(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(s);
  }
  void set_info(const SwitchInfo& info) {
    std::lock_guard<std::mutex> lock(mu_);
    info_ = info;
  }
  std::vector<WorkerRegistration> registrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<WorkerRegistration> registrations_;
  Status error_;
  SwitchInfo info_;
};

SwitchInfo TestSwitchInfo() {
  SwitchInfo info;
  info.mac = 0xAABBCCDDEEFFull;
  info.ipv4 = 0x0A0000FEu;  // 10.0.0.254
  info.udp_port = 12345;
  info.num_slots = 4096;
  info.max_workers = 32;
  return info;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(ServerOptions{}); }

  void StartServer(ServerOptions options) {
    sink_.set_info(TestSwitchInfo());
    options.listen_address = "127.0.0.1:0";
    auto server = ControllerServer::Start(options, &sink_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }

  std::unique_ptr<SessionClient> NewClient(milliseconds timeout = milliseconds(5000)) {
    auto client = SessionClient::Connect(address_, timeout);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<switchml_proto::Session::Stub> SessionStub() {
    return switchml_proto::Session::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<switchml_proto::Sync::Stub> SyncStub() {
    return switchml_proto::Sync::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  static void SetDeadline(grpc::ClientContext* context, milliseconds d = milliseconds(5000)) {
    context->set_deadline(std::chrono::system_clock::now() + d);
  }

  FakeSink sink_;
  std::unique_ptr<ControllerServer> server_;
  std::string address_;
};

// ---------------------------------------------------------------------------------------------
// Server start-up

TEST(ControllerServerStartTest, RejectsNullSinkAndEmptyAddress) {
  FakeSink sink;
  auto s = ControllerServer::Start(ServerOptions{}, nullptr);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  ServerOptions options;
  options.listen_address = "";
  s = ControllerServer::Start(options, &sink);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("listen_address"), std::string::npos) << s.status();
}

TEST(ControllerServerStartTest, PortInUseIsUnavailable) {
  FakeSink sink;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  auto first = ControllerServer::Start(options, &sink);
  ASSERT_TRUE(first.ok()) << first.status();
  options.listen_address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = ControllerServer::Start(options, &sink);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(options.listen_address), std::string::npos)
      << second.status();
}

// ---------------------------------------------------------------------------------------------
// Session service

TEST_F(ControllerTest, UdpSessionRoundTrip) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  WorkerRegistration reg;
  reg.session_id = 0x123456789ABCull;
  reg.rank = 1;
  reg.num_workers = 4;
  reg.mac = 0x001122334455ull;
  reg.ipv4 = 0x0A000001u;
  reg.udp_ports = {40000, 40001, 65535};
  auto info = client->UdpSession(reg);
  ASSERT_TRUE(info.ok()) << info.status();
  const SwitchInfo want = TestSwitchInfo();
  EXPECT_EQ(info->mac, want.mac);
  EXPECT_EQ(info->ipv4, want.ipv4);
  EXPECT_EQ(info->udp_port, want.udp_port);
  EXPECT_EQ(info->num_slots, want.num_slots);
  EXPECT_EQ(info->max_workers, want.max_workers);

  auto regs = sink_.registrations();
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0].session_id, reg.session_id);
  EXPECT_EQ(regs[0].rank, 1u);
  EXPECT_EQ(regs[0].num_workers, 4u);
  EXPECT_EQ(regs[0].mac, reg.mac);
  EXPECT_EQ(regs[0].ipv4, reg.ipv4);
  EXPECT_EQ(regs[0].udp_ports, reg.udp_ports);

  // The raw reply: session id echoed, extension fields present at their field numbers.
  switchml_proto::UdpSessionRequest request;
  request.set_session_id(77);
  request.set_rank(0);
  request.set_num_workers(1);
  switchml_proto::UdpSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  ASSERT_TRUE(SessionStub()->UdpSession(&context, request, &response).ok());
  EXPECT_EQ(response.session_id(), 77u);
  EXPECT_EQ(response.mac(), want.mac);
  EXPECT_EQ(response.ipv4(), want.ipv4);
  EXPECT_EQ(response.udp_port(), want.udp_port);
  EXPECT_EQ(response.num_slots(), want.num_slots);
  EXPECT_EQ(response.max_workers(), want.max_workers);
  // A request without udp_ports (a reference client) reaches the sink with none.
  regs = sink_.registrations();
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_TRUE(regs[1].udp_ports.empty());
}

// Stands in for a reference controller: replies with fixed fields and no extensions, and
// reports failure the reference way (all zeros, status OK).
class ReferenceLikeSession final : public switchml_proto::Session::Service {
 public:
  explicit ReferenceLikeSession(bool fail) : fail_(fail) {}
  grpc::Status UdpSession(grpc::ServerContext*, const switchml_proto::UdpSessionRequest* request,
                          switchml_proto::UdpSessionResponse* response) override {
    if (fail_) return grpc::Status::OK;  // session 0, MAC 0, IP 0
    response->set_session_id(request->session_id());
    response->set_mac(0x001122334455ull);
    response->set_ipv4(0x0A0000FEu);
    return grpc::Status::OK;
  }

 private:
  const bool fail_;
};

TEST(SessionClientTest, ReferenceControllerReplies) {
  for (bool fail : {false, true}) {
    ReferenceLikeSession service(fail);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    auto client = SessionClient::Connect("127.0.0.1:" + std::to_string(port), milliseconds(5000));
    ASSERT_TRUE(client.ok()) << client.status();
    WorkerRegistration reg;
    reg.session_id = 5;
    reg.num_workers = 1;
    auto info = (*client)->UdpSession(reg);
    if (fail) {
      EXPECT_EQ(info.status().code(), StatusCode::kFailedPrecondition) << info.status();
      EXPECT_NE(info.status().message().find("all-zero"), std::string::npos) << info.status();
    } else {
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->mac, 0x001122334455ull);
      EXPECT_EQ(info->ipv4, 0x0A0000FEu);
      EXPECT_EQ(info->udp_port, kReferenceSwitchUdpPort);  // field 100 absent
      EXPECT_EQ(info->num_slots, 0u);
      EXPECT_EQ(info->max_workers, 0u);
    }
    server->Shutdown();
  }
}

TEST_F(ControllerTest, SinkErrorReachesTheClient) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  WorkerRegistration reg;
  reg.rank = 2;
  reg.num_workers = 4;
  const StatusCode codes[] = {StatusCode::kFailedPrecondition, StatusCode::kInvalidArgument,
                              StatusCode::kAlreadyExists, StatusCode::kResourceExhausted};
  for (StatusCode code : codes) {
    sink_.set_error(Status(code, "num_workers 4 differs from the session's 8"));
    auto info = client->UdpSession(reg);
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), code) << info.status();
    const std::string& m = info.status().message();
    EXPECT_NE(m.find("num_workers 4 differs from the session's 8"), std::string::npos) << m;
    EXPECT_NE(m.find(address_), std::string::npos) << m;
    EXPECT_NE(m.find("UdpSession"), std::string::npos) << m;
  }
}

TEST_F(ControllerTest, UdpPortOutOfRangeIsRejectedBeforeTheSink) {
  switchml_proto::UdpSessionRequest request;
  request.set_rank(0);
  request.set_num_workers(1);
  request.add_udp_ports(5000);
  request.add_udp_ports(70000);
  switchml_proto::UdpSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::Status s = SessionStub()->UdpSession(&context, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("udp_ports[1]"), std::string::npos) << s.error_message();
  EXPECT_TRUE(sink_.registrations().empty());
}

TEST_F(ControllerTest, RdmaSessionIsUnimplemented) {
  switchml_proto::RdmaSessionRequest request;
  request.set_num_workers(1);
  switchml_proto::RdmaSessionResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::Status s = SessionStub()->RdmaSession(&context, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(s.error_message().find("RDMA"), std::string::npos) << s.error_message();
  EXPECT_TRUE(sink_.registrations().empty());
}

// ---------------------------------------------------------------------------------------------
// Barrier

TEST_F(ControllerTest, BarrierOfOne) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->Barrier(1).ok());
  EXPECT_TRUE(client->Barrier(1).ok());
  EXPECT_EQ(client->Barrier(0).code(), StatusCode::kInvalidArgument);
  // The server checks too.
  switchml_proto::BarrierRequest request;
  switchml_proto::BarrierResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  EXPECT_EQ(SyncStub()->Barrier(&context, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// Waits (polling, 5 s at most) until the server has exactly n callers blocked in Barrier.
bool WaitForBarrierWaiters(const ControllerServer& server, uint32_t n) {
  const auto end = SteadyClock::now() + std::chrono::seconds(5);
  while (server.NumBarrierWaiters() != n && SteadyClock::now() < end) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  return server.NumBarrierWaiters() == n;
}

TEST_F(ControllerTest, BarrierOfFourReleasesOnlyWhenTheFourthArrives) {
  constexpr int kN = 4;
  std::vector<std::unique_ptr<SessionClient>> clients;
  for (int i = 0; i < kN; ++i) {
    clients.push_back(NewClient());
    ASSERT_NE(clients.back(), nullptr);
  }
  for (int round = 0; round < 2; ++round) {
    std::atomic<int> released{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kN - 1; ++i) {
      threads.emplace_back([&, i] {
        Status s = clients[i]->Barrier(kN);
        EXPECT_TRUE(s.ok()) << s;
        ++released;
      });
    }
    // All three are blocked on the server (observed, not assumed after a sleep), and none of
    // them has been released.
    EXPECT_TRUE(WaitForBarrierWaiters(*server_, kN - 1));  // threads are running: no ASSERT
    EXPECT_EQ(released.load(), 0) << "released before the 4th worker arrived";
    // A mismatching caller is refused without joining or releasing anyone.
    Status wrong = clients[kN - 1]->Barrier(kN + 1);
    EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument) << wrong;
    EXPECT_NE(wrong.message().find("differs"), std::string::npos) << wrong;
    EXPECT_EQ(released.load(), 0);
    EXPECT_EQ(server_->NumBarrierWaiters(), uint32_t(kN - 1));  // the refused one did not join
    Status last = clients[kN - 1]->Barrier(kN);
    EXPECT_TRUE(last.ok()) << last;
    for (auto& t : threads) t.join();
    EXPECT_EQ(released.load(), kN - 1);
    EXPECT_EQ(server_->NumBarrierWaiters(), 0u);
  }
}

TEST_F(ControllerTest, BarrierTimesOutWhenOneWorkerIsMissing) {
  constexpr int kN = 4;
  const milliseconds timeout(300);
  std::vector<std::thread> threads;
  std::vector<Status> results(kN - 1);
  std::vector<SteadyClock::duration> took(kN - 1);
  for (int i = 0; i < kN - 1; ++i) {
    threads.emplace_back([&, i] {
      auto client = NewClient(timeout);
      ASSERT_NE(client, nullptr);
      const auto start = SteadyClock::now();
      results[i] = client->Barrier(kN);
      took[i] = SteadyClock::now() - start;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kN - 1; ++i) {
    EXPECT_EQ(results[i].code(), StatusCode::kDeadlineExceeded) << results[i];
    EXPECT_NE(results[i].message().find(address_), std::string::npos) << results[i];
    EXPECT_NE(results[i].message().find("Barrier"), std::string::npos) << results[i];
    // Ended by the 300 ms timeout: the code says so (no other wait is in play), and no upper
    // bound on the clock (how late depends on the machine's load, not on the code). Not
    // before it, though: the server ends the wait up to 1/10 of the timeout early so that its
    // message arrives (a lower bound: load-proof).
    EXPECT_GE(took[i], timeout - timeout / 10 - milliseconds(5));
  }
  // The three that gave up were withdrawn on the server: a full new round of four works,
  // and does not release early (which it would if the stale three still counted).
  ASSERT_TRUE(WaitForBarrierWaiters(*server_, 0));
  std::atomic<int> released{0};
  threads.clear();
  for (int i = 0; i < kN - 1; ++i) {
    threads.emplace_back([&] {
      auto client = NewClient();
      ASSERT_NE(client, nullptr);
      Status s = client->Barrier(kN);
      EXPECT_TRUE(s.ok()) << s;
      ++released;
    });
  }
  EXPECT_TRUE(WaitForBarrierWaiters(*server_, kN - 1));  // threads are running: no ASSERT
  EXPECT_EQ(released.load(), 0);
  auto last = NewClient();
  EXPECT_NE(last, nullptr);
  if (last != nullptr) {
    EXPECT_TRUE(last->Barrier(kN).ok());
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(released.load(), kN - 1);
}

// ---------------------------------------------------------------------------------------------
// Broadcast

TEST_F(ControllerTest, BroadcastConsecutiveOperationsWithChangingRoot) {
  constexpr uint32_t kN = 4;
  constexpr int kOps = 6;
  std::vector<std::vector<uint64_t>> got(kN, std::vector<uint64_t>(kOps, 0));
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < kN; ++rank) {
    threads.emplace_back([&, rank] {
      auto client = NewClient();
      ASSERT_NE(client, nullptr);
      for (int op = 0; op < kOps; ++op) {
        const uint32_t root = (op + 1) % kN;  // 1, 2, 3, 0, 1, 2
        auto v = client->Broadcast(1000 * op + rank, rank, kN, root);
        ASSERT_TRUE(v.ok()) << v.status();
        got[rank][op] = *v;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t rank = 0; rank < kN; ++rank) {
    for (int op = 0; op < kOps; ++op) {
      EXPECT_EQ(got[rank][op], 1000u * op + (op + 1) % kN) << "rank " << rank << " op " << op;
    }
  }
}

TEST_F(ControllerTest, BroadcastNonRootWaitsForTheRoot) {
  auto a = NewClient();
  auto b = NewClient();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::atomic<bool> done{false};
  uint64_t value = 0;
  std::thread waiter([&] {
    auto v = a->Broadcast(0, /*rank=*/0, 2, /*root=*/1);
    ASSERT_TRUE(v.ok()) << v.status();
    value = *v;
    done = true;
  });
  // "Not done" after a sleep: load can only shorten what the sleep covers (missing a bug),
  // never complete a correct broadcast before its root.
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(done.load());
  auto root = b->Broadcast(0xDEADBEEFCAFEull, 1, 2, 1);
  waiter.join();
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root, 0xDEADBEEFCAFEull);
  EXPECT_EQ(value, 0xDEADBEEFCAFEull);
}

TEST_F(ControllerTest, BroadcastOutOfRangeIsInvalidArgument) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  auto r = client->Broadcast(1, /*rank=*/4, /*num_workers=*/4, /*root=*/0);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rank"), std::string::npos) << r.status();
  r = client->Broadcast(1, 0, 4, /*root=*/4);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("root"), std::string::npos) << r.status();

  // The server validates as well (reference clients do not).
  auto stub = SyncStub();
  for (auto [rank, root] : {std::pair<uint32_t, uint32_t>{4, 0}, {0, 9}}) {
    switchml_proto::BroadcastRequest request;
    request.set_value(1);
    request.set_rank(rank);
    request.set_num_workers(4);
    request.set_root(root);
    switchml_proto::BroadcastResponse response;
    grpc::ClientContext context;
    SetDeadline(&context);
    grpc::Status s = stub->Broadcast(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find(rank == 4 ? "rank" : "root"), std::string::npos)
        << s.error_message();
  }
}

// ---------------------------------------------------------------------------------------------
// Bootstrap

TEST_F(ControllerTest, BootstrapFourRanks) {
  constexpr uint32_t kN = 4;
  constexpr uint64_t kSessionId = 0x1122334455667788ull;
  std::vector<StatusOr<SwitchInfo>> infos(kN, InternalError("not run"));
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < kN; ++rank) {
    threads.emplace_back([&, rank] {
      // Rank 0 starts last, so the others really wait for its broadcast and registration.
      // (Only makes that case likely; the results are checked the same either way.)
      if (rank == 0) std::this_thread::sleep_for(milliseconds(100));
      auto client = NewClient();
      ASSERT_NE(client, nullptr);
      WorkerRegistration reg;
      reg.session_id = 999;  // overwritten by the broadcast
      reg.rank = rank;
      reg.num_workers = kN;
      reg.ipv4 = 0x0A000001u + rank;
      reg.udp_ports = {static_cast<uint16_t>(41000 + rank)};
      infos[rank] = Bootstrap(*client, reg, [rank]() -> uint64_t {
        EXPECT_EQ(rank, 0u) << "only rank 0 picks the session id";
        return kSessionId;
      });
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t rank = 0; rank < kN; ++rank) {
    ASSERT_TRUE(infos[rank].ok()) << infos[rank].status();
    EXPECT_EQ(infos[rank]->mac, TestSwitchInfo().mac);
    EXPECT_EQ(infos[rank]->ipv4, TestSwitchInfo().ipv4);
    EXPECT_EQ(infos[rank]->udp_port, TestSwitchInfo().udp_port);
  }
  auto regs = sink_.registrations();
  ASSERT_EQ(regs.size(), kN);
  EXPECT_EQ(regs[0].rank, 0u) << "rank 0 must register first";
  std::vector<bool> seen(kN, false);
  for (const auto& r : regs) {
    EXPECT_EQ(r.session_id, kSessionId);
    EXPECT_EQ(r.num_workers, kN);
    ASSERT_LT(r.rank, kN);
    EXPECT_FALSE(seen[r.rank]) << "rank " << r.rank << " registered twice";
    seen[r.rank] = true;
    EXPECT_EQ(r.ipv4, 0x0A000001u + r.rank);
    EXPECT_EQ(r.udp_ports, std::vector<uint16_t>{static_cast<uint16_t>(41000 + r.rank)});
  }
}

TEST_F(ControllerTest, BootstrapRejectsBadRank) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  WorkerRegistration reg;
  reg.rank = 2;
  reg.num_workers = 2;
  EXPECT_EQ(Bootstrap(*client, reg).status().code(), StatusCode::kInvalidArgument);
  reg.rank = 0;
  reg.num_workers = 0;
  EXPECT_EQ(Bootstrap(*client, reg).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sink_.registrations().empty());
}

TEST_F(ControllerTest, BootstrapReportsRankZerosRegistrationError) {
  sink_.set_error(FailedPreconditionError("switch is busy"));
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  WorkerRegistration reg;
  reg.num_workers = 1;
  auto info = Bootstrap(*client, reg);
  EXPECT_EQ(info.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(info.status().message().find("Bootstrap rank 0 of 1"), std::string::npos)
      << info.status();
  EXPECT_NE(info.status().message().find("switch is busy"), std::string::npos) << info.status();
}

TEST_F(ControllerTest, ResetSyncStateClearsAHalfFinishedBootstrap) {
  // Rank 0 of a 4-worker job bootstraps alone: its broadcast (root, never blocks) and its
  // registration succeed, then its barrier times out; the broadcast operation lingers.
  auto client = NewClient(milliseconds(200));
  ASSERT_NE(client, nullptr);
  WorkerRegistration reg;
  reg.num_workers = 4;
  auto failed = Bootstrap(*client, reg);
  EXPECT_EQ(failed.status().code(), StatusCode::kDeadlineExceeded) << failed.status();
  EXPECT_NE(failed.status().message().find("barrier after rank 0 registered"), std::string::npos)
      << failed.status();
  // The next job (2 workers): its rank 1 runs into the leftover operation...
  reg.num_workers = 2;
  reg.rank = 1;
  auto next = Bootstrap(*client, reg);
  EXPECT_EQ(next.status().code(), StatusCode::kInvalidArgument) << next.status();
  EXPECT_NE(next.status().message().find("session id broadcast"), std::string::npos)
      << next.status();
  // ...until the controller's sync state is reset.
  server_->ResetSyncState();
  auto c1 = NewClient(milliseconds(2000));
  ASSERT_NE(c1, nullptr);
  StatusOr<SwitchInfo> rank0 = InternalError("not run");
  std::thread t([&] {
    auto c0 = NewClient(milliseconds(2000));
    ASSERT_NE(c0, nullptr);
    WorkerRegistration reg0;
    reg0.num_workers = 2;
    rank0 = Bootstrap(*c0, reg0);
  });
  next = Bootstrap(*c1, reg);
  t.join();
  EXPECT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(rank0.ok()) << rank0.status();
}

// ---------------------------------------------------------------------------------------------
// Unreachable controller and shutdown

// A local TCP port with nothing listening (bound, then closed).
int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(SessionClientTest, UnreachableControllerFailsWithinTheTimeout) {
  const int port = ClosedPort();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto client = SessionClient::Connect(address, milliseconds(300));
  ASSERT_FALSE(client.ok());
  // "Within the timeout": the error names the 300 ms it waited (read from the status, not
  // from the clock).
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find(address), std::string::npos) << client.status();
  EXPECT_NE(client.status().message().find("300 ms"), std::string::npos) << client.status();
}

TEST(SessionClientTest, ConnectValidatesArguments) {
  EXPECT_EQ(SessionClient::Connect("", milliseconds(100)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SessionClient::Connect("127.0.0.1:1", milliseconds(0)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ControllerTest, ControllerGoneAfterConnectFailsWithinTheTimeout) {
  auto client = NewClient(milliseconds(300));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Barrier(1).ok());
  server_->Shutdown();
  // Fails, rather than hanging: refused at once (UNAVAILABLE) or ended by the client's 300 ms
  // deadline (DEADLINE_EXCEEDED naming it); which one, the status says, not the clock.
  for (int i = 0; i < 2; ++i) {
    Status s = client->Barrier(1);
    EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)
        << s;
    EXPECT_NE(s.message().find(address_), std::string::npos) << s;
    EXPECT_NE(s.message().find("Barrier"), std::string::npos) << s;
    if (s.code() == StatusCode::kDeadlineExceeded) {
      EXPECT_NE(s.message().find("300 ms"), std::string::npos) << s;
    }
  }
}

TEST_F(ControllerTest, ShutdownWakesBlockedHandlersPromptly) {
  // A long grace period (100 s): Shutdown only returns before it if it wakes the handlers
  // itself. The bounds below (10 s) are a tenth of it and far above any scheduling delay; the
  // clients' deadlines (200 s) are beyond it.
  server_->Shutdown();
  ServerOptions options;
  options.shutdown_grace = milliseconds(100000);
  StartServer(options);

  auto barrier_client = NewClient(milliseconds(200000));
  auto broadcast_client = NewClient(milliseconds(200000));
  ASSERT_NE(barrier_client, nullptr);
  ASSERT_NE(broadcast_client, nullptr);
  Status barrier_status;
  Status broadcast_status;
  SteadyClock::duration barrier_took{};
  std::thread barrier([&] {
    const auto start = SteadyClock::now();
    barrier_status = barrier_client->Barrier(2);
    barrier_took = SteadyClock::now() - start;
  });
  std::thread broadcast([&] {
    broadcast_status = broadcast_client->Broadcast(0, 1, 2, 0).status();
  });
  // The barrier caller is blocked on the server. The broadcast caller gets UNAVAILABLE from
  // our handler whether it is blocked by now or arrives after the shutdown, or CANCELLED from
  // gRPC itself when its call reaches the server while gRPC is tearing it down (seen
  // under ASan in CI); either way it does not hang.
  EXPECT_TRUE(WaitForBarrierWaiters(*server_, 1));
  const auto start = SteadyClock::now();
  server_->Shutdown();
  const auto shutdown_took = SteadyClock::now() - start;
  barrier.join();
  broadcast.join();
  EXPECT_LT(shutdown_took, milliseconds(10000));
  EXPECT_LT(barrier_took, milliseconds(10000));
  EXPECT_EQ(barrier_status.code(), StatusCode::kUnavailable) << barrier_status;
  EXPECT_NE(barrier_status.message().find("shutting down"), std::string::npos) << barrier_status;
  EXPECT_TRUE(broadcast_status.code() == StatusCode::kUnavailable ||
              broadcast_status.code() == StatusCode::kCancelled)
      << broadcast_status;
  server_->Shutdown();  // idempotent
}

}  // namespace
}  // namespace switchml::controller
