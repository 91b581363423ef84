// A flood of unauthenticated reference Barrier calls against a controller (session_service.h,
// "Flood limits" and "Threading"): 5,000 concurrent Sync.Barrier(num_workers = 65536) calls
// from one client address, while an operator lists jobs and a genuine 2-worker reference
// session bootstraps, synchronizes and broadcasts. Both must be served within their deadlines,
// the flood's calls must end with the documented errors, and the process's thread count must
// stay bounded (a waiting call is not a thread).
//
// The server, the real software switch (UDP on 127.0.0.1) and the clients share this process,
// so /proc/self/status counts all of their threads. The flood uses gRPC's completion-queue
// client API driven by one thread of ours, so it adds one thread, not one per call.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/job_client.h"
#include "controller/local_switch_for_tests.h"
#include "rendezvous/session_client.h"
#include "controller/session_service.h"
#include "switchml.grpc.pb.h"

namespace switchml::controller {

using control::kClientProtocolVersion;
using control::SwitchInfo;
using control::WorkerRegistration;
using rendezvous::JobClient;
using rendezvous::SessionClient;
using rendezvous::Bootstrap;
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kLocalhost = 0x7F000001;
constexpr char kOperator[] = "operator-token-for-the-flood-test";
constexpr int kFloodCalls = 5000;
constexpr uint32_t kFloodWorkers = 65536;
// The operator's and the genuine workers' deadline (every RPC of theirs): generous for a loaded
// machine, and below the flood calls' 60 s, so that a call starved until the flood ends fails.
constexpr auto kServiceDeadline = 30s;
// How many threads the whole process may gain during the flood. The old design (one blocked
// handler thread per waiting call) needed one thread per waiting call: 256 or 4,096 here
// (2,900-4,300 were seen). gRPC's own pools (sync-server threads for ListJobs/UdpSession,
// callback executor, the clients' channels) grow by a few threads per core; 64 leaves room
// for those and still fails if even one thread in 4 waiting calls were spent.
constexpr long kMaxExtraThreads = 64;

// A field of /proc/self/status ("Threads", "VmRSS" in kB), or -1.
long ProcStatus(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

// Samples the thread count and RSS until stopped; keeps the maxima.
class Sampler {
 public:
  Sampler() : thread_([this] { Loop(); }) {}
  ~Sampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  long max_threads() const { return max_threads_; }
  long max_rss_kb() const { return max_rss_kb_; }

 private:
  void Loop() {
    while (!stop_) {
      max_threads_ = std::max(max_threads_.load(), ProcStatus("Threads"));
      max_rss_kb_ = std::max(max_rss_kb_.load(), ProcStatus("VmRSS"));
      std::this_thread::sleep_for(2ms);
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<long> max_threads_{0};
  std::atomic<long> max_rss_kb_{0};
  std::thread thread_;
};

// kFloodCalls concurrent Barrier(kFloodWorkers) calls on a channel (and connection) of their
// own, driven by one completion-queue thread; counts the answers by status code.
class Flood {
 public:
  explicit Flood(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // not the workers' connection
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = switchml_proto::Sync::NewStub(channel_);
  }
  ~Flood() { Drain(); }

  void Start() {
    request_.set_num_workers(kFloodWorkers);
    for (int i = 0; i < kFloodCalls; ++i) {
      Call& c = calls_[i];
      c.context.set_deadline(std::chrono::system_clock::now() + 60s);
      c.reader = stub_->PrepareAsyncBarrier(&c.context, request_, &cq_);
      c.reader->StartCall();
      c.reader->Finish(&c.response, &c.status, &c);
    }
    drainer_ = std::thread([this] {
      void* tag = nullptr;
      bool ok = false;
      while (cq_.Next(&tag, &ok)) {
        const Call* c = static_cast<Call*>(tag);
        std::lock_guard<std::mutex> lock(mu_);
        auto& slot = by_code_[c->status.error_code()];
        if (slot.first++ == 0) slot.second = c->status.error_message();
        if (++answered_ == kFloodCalls) cq_.Shutdown();
      }
    });
  }

  int answered() const {
    std::lock_guard<std::mutex> lock(mu_);
    return answered_;
  }
  // Answers with `code`, and the first one's message.
  std::pair<int, std::string> Count(grpc::StatusCode code) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_code_.find(code);
    return it == by_code_.end() ? std::pair<int, std::string>{0, ""} : it->second;
  }
  std::string Summary() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string s;
    for (const auto& [code, n] : by_code_) {
      s += "code " + std::to_string(code) + ": " + std::to_string(n.first) + " (" + n.second +
           "); ";
    }
    return s;
  }

  // Cancels what is left and waits for every answer.
  void Drain() {
    if (!drainer_.joinable()) return;
    for (int i = 0; i < kFloodCalls; ++i) calls_[i].context.TryCancel();
    drainer_.join();
  }

 private:
  struct Call {
    grpc::ClientContext context;
    switchml_proto::BarrierResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<switchml_proto::BarrierResponse>> reader;
  };
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<switchml_proto::Sync::Stub> stub_;
  switchml_proto::BarrierRequest request_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<Call[]> calls_ = std::make_unique<Call[]>(kFloodCalls);
  mutable std::mutex mu_;
  int answered_ = 0;
  std::map<grpc::StatusCode, std::pair<int, std::string>> by_code_;
  std::thread drainer_;
};

// Waits (polling, `limit` at most) until pred() holds.
template <typename Pred>
bool Eventually(Pred pred, SteadyClock::duration limit = 30s) {
  const auto end = SteadyClock::now() + limit;
  while (SteadyClock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

WorkerRegistration Genuine(uint32_t rank) {
  WorkerRegistration r;
  r.rank = rank;
  r.num_workers = 2;
  r.ipv4 = kLocalhost;
  r.udp_ports = {static_cast<uint16_t>(7800 + rank)};
  r.protocol_version = kClientProtocolVersion;
  r.num_worker_threads = 1;
  r.window_packets = 8;
  r.elements_per_packet = 64;
  return r;
}

// One genuine rank: Bootstrap (broadcast, register, barriers), a barrier and a broadcast.
Status GenuineRank(const std::string& address, uint32_t rank, uint64_t* broadcast_value) {
  auto client = SessionClient::Connect(address, kServiceDeadline);
  if (!client.ok()) return client.status();
  StatusOr<SwitchInfo> info = Bootstrap(**client, Genuine(rank));
  if (!info.ok()) return info.status();
  SWITCHML_RETURN_IF_ERROR((*client)->Barrier(2));
  StatusOr<uint64_t> v = (*client)->Broadcast(rank == 1 ? 0xF100D : 0, rank, 2, /*root=*/1);
  if (!v.ok()) return v.status();
  *broadcast_value = *v;
  return OkStatus();
}

struct FloodCase {
  const char* name;
  uint32_t max_waiting_calls_per_peer;  // ServerOptions
  int expected_waiting;                 // flood calls the server keeps waiting
  const char* bound_message;            // what the refused ones are told
};

// Floods a controller started with fc's bound; asserts that the operator and a genuine session
// are served within their deadlines and that the thread count stays bounded.
void FloodAndServe(const FloodCase& fc) {
  auto sw = StartLocalSwitchForTests(/*num_slots=*/64);
  ASSERT_TRUE(sw.ok()) << sw.status();
  ServerOptions so;
  so.listen_address = "127.0.0.1:0";
  so.operator_token = kOperator;
  so.max_waiting_calls_per_peer = fc.max_waiting_calls_per_peer;
  auto server = ControllerServer::Start(so, sw->get());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto admin = JobClient::Connect(address, kServiceDeadline);
  ASSERT_TRUE(admin.ok()) << admin.status();
  (*admin)->set_operator_token(kOperator);
  ASSERT_TRUE((*admin)->ListJobs().ok());  // warm: the sync-server pool has its threads

  Flood flood(address);
  const long base_threads = ProcStatus("Threads");
  const long base_rss_kb = ProcStatus("VmRSS");
  Sampler sampler;
  flood.Start();

  // Every flood call is either answered (refused by a bound) or waiting on the server.
  ASSERT_TRUE(Eventually([&] {
    return flood.answered() + static_cast<int>((*server)->NumBarrierWaiters()) == kFloodCalls;
  })) << flood.answered() << " answered, " << (*server)->NumBarrierWaiters() << " waiting; "
      << flood.Summary();
  EXPECT_EQ(static_cast<int>((*server)->NumBarrierWaiters()), fc.expected_waiting);
  const auto exhausted = flood.Count(grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(exhausted.first, kFloodCalls - fc.expected_waiting) << flood.Summary();
  EXPECT_THAT(exhausted.second, HasSubstr(fc.bound_message));

  // The operator is served while the flood's calls wait: its call succeeds within its own
  // deadline (kServiceDeadline, shorter than the flood's), so a bound on the clock would add
  // nothing; the time is printed below for information only.
  const auto list_start = SteadyClock::now();
  auto list = (*admin)->ListJobs();
  const auto list_took = SteadyClock::now() - list_start;
  EXPECT_TRUE(list.ok()) << list.status();

  // A genuine 2-worker reference session: its rank 0's broadcast starts a session of 2, which
  // ends the flood's barrier of 65536; then registration, barriers and a broadcast.
  const auto session_start = SteadyClock::now();
  uint64_t got0 = 0;
  uint64_t got1 = 0;
  auto rank0 = std::async(std::launch::async, [&] { return GenuineRank(address, 0, &got0); });
  const Status s1 = GenuineRank(address, 1, &got1);
  const Status s0 = rank0.get();
  const auto session_took = SteadyClock::now() - session_start;
  EXPECT_TRUE(s0.ok()) << s0;
  EXPECT_TRUE(s1.ok()) << s1;
  EXPECT_EQ(got0, 0xF100Du);
  EXPECT_EQ(got1, 0xF100Du);

  // The flood's waiting calls were told the session's size; none completed a barrier.
  ASSERT_TRUE(Eventually([&] { return flood.answered() == kFloodCalls; })) << flood.Summary();
  const auto evicted = flood.Count(grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(evicted.first, fc.expected_waiting) << flood.Summary();
  EXPECT_THAT(evicted.second, HasSubstr("differs from the session's 2 workers"));
  EXPECT_EQ(flood.Count(grpc::StatusCode::OK).first, 0) << flood.Summary();

  // A second flood after the session started: refused at once (its shape is not the
  // session's), and the session still synchronizes.
  Flood again(address);
  again.Start();
  ASSERT_TRUE(Eventually([&] { return again.answered() == kFloodCalls; })) << again.Summary();
  EXPECT_EQ(again.Count(grpc::StatusCode::INVALID_ARGUMENT).first, kFloodCalls)
      << again.Summary();
  auto c0 = SessionClient::Connect(address, kServiceDeadline);
  auto c1 = SessionClient::Connect(address, kServiceDeadline);
  ASSERT_TRUE(c0.ok() && c1.ok());
  auto b0 = std::async(std::launch::async, [&] { return (*c0)->Barrier(2); });
  EXPECT_TRUE((*c1)->Barrier(2).ok());
  EXPECT_TRUE(b0.get().ok());

  sampler.Stop();
  const long extra_threads = sampler.max_threads() - base_threads;
  std::cout << "[flood " << fc.name << "] threads: " << base_threads << " before, max "
            << sampler.max_threads() << " during (+" << extra_threads << "); RSS: "
            << base_rss_kb / 1024 << " MB before, max " << sampler.max_rss_kb() / 1024
            << " MB, " << ProcStatus("VmRSS") / 1024 << " MB after; ListJobs took "
            << std::chrono::duration_cast<std::chrono::milliseconds>(list_took).count()
            << " ms, the genuine session "
            << std::chrono::duration_cast<std::chrono::milliseconds>(session_took).count()
            << " ms\n";
  EXPECT_LE(extra_threads, kMaxExtraThreads);

  flood.Drain();
  again.Drain();
  (*server)->Shutdown();
  (*sw)->Stop();
}

// The default: one address may keep 256 calls waiting.
TEST(ControllerFloodTest, PerAddressBound) {
  FloodAndServe({"per-address bound", kDefaultMaxWaitingCallsPerPeer,
                 static_cast<int>(kDefaultMaxWaitingCallsPerPeer),
                 "256 calls from ipv4:127.0.0.1 are already blocked"});
}

// Without it, job 0's bound on all waiting calls (4096) holds, without 4096 threads.
TEST(ControllerFloodTest, TotalBound) {
  FloodAndServe({"total bound", 0, 4096, "4096 callers are already blocked"});
}

}  // namespace
}  // namespace switchml::controller
