#include "dataplane/switch_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dataplane/test_packets.h"
#include "transport/frame.h"

namespace switchml::dataplane {
namespace {

using ::testing::HasSubstr;
using testing::Encode;
using testing::ExpectedResponse;
using testing::Ip;
using testing::Ramp;
using testing::Request;
using testing::Sum;
using transport::Endpoint;
using namespace std::chrono_literals;

struct Datagram {
  std::vector<uint8_t> bytes;
  Endpoint peer;
};

// State shared between a FakeChannel (owned by the server) and the test.
struct FakeNet {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Datagram> inbound;  // to the switch
  std::vector<Datagram> sent;    // from the switch
  bool woken = false;
  size_t max_accept_per_send = SIZE_MAX;  // emulate a full transmit queue
  int fail_next_sends = 0;                // emulate socket errors
  int fail_next_recvs = 0;
  uint64_t send_calls = 0;
  uint64_t recv_calls = 0;
  uint64_t transport_drops = 0;  // what TransportCounters reports as raw_ring_drops
  // When set, RecvBurst waits this long for a datagram or a Wake() instead of the caller's
  // timeout (a thread blocked in it then ends early only if woken).
  std::optional<std::chrono::microseconds> recv_wait;
  uint64_t recv_waits_expired = 0;                    // RecvBurst waits that ran to their end
  std::chrono::microseconds longest_recv_timeout{0};  // the longest timeout a caller passed

  void Inject(std::vector<uint8_t> bytes, Endpoint from) {
    {
      std::lock_guard<std::mutex> lock(mu);
      inbound.push_back({std::move(bytes), from});
    }
    cv.notify_all();
  }
  // Waits until at least n datagrams were sent; returns a copy of them.
  std::vector<Datagram> WaitSent(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, timeout, [&] { return sent.size() >= n; });
    return sent;
  }
};

class FakeChannel : public transport::Channel {
 public:
  FakeChannel(std::shared_ptr<FakeNet> net, Endpoint local) : net_(std::move(net)), local_(local) {}

  StatusOr<size_t> SendBurst(std::span<const transport::TxDatagram> batch) override {
    std::lock_guard<std::mutex> lock(net_->mu);
    ++net_->send_calls;
    if (net_->fail_next_sends > 0) {
      --net_->fail_next_sends;
      return UnavailableError("fake send failure");
    }
    const size_t n = std::min(batch.size(), net_->max_accept_per_send);
    for (size_t i = 0; i < n; ++i) {
      net_->sent.push_back({std::vector<uint8_t>(batch[i].data, batch[i].data + batch[i].size),
                            batch[i].to});
    }
    net_->cv.notify_all();
    return n;
  }

  StatusOr<size_t> RecvBurst(std::span<transport::RxDatagram> batch,
                             std::chrono::microseconds timeout) override {
    std::unique_lock<std::mutex> lock(net_->mu);
    ++net_->recv_calls;
    if (net_->fail_next_recvs > 0) {
      --net_->fail_next_recvs;
      return UnavailableError("fake recv failure");
    }
    net_->longest_recv_timeout = std::max(net_->longest_recv_timeout, timeout);
    if (!net_->cv.wait_for(lock, net_->recv_wait.value_or(timeout),
                           [&] { return !net_->inbound.empty() || net_->woken; })) {
      ++net_->recv_waits_expired;
    }
    net_->woken = false;
    size_t n = 0;
    while (n < batch.size() && !net_->inbound.empty()) {
      Datagram& d = net_->inbound.front();
      transport::RxDatagram& rx = batch[n++];
      rx.truncated = d.bytes.size() > rx.capacity;
      rx.size = uint32_t(std::min<size_t>(d.bytes.size(), rx.capacity));
      std::copy(d.bytes.begin(), d.bytes.begin() + rx.size, rx.data);
      rx.from = d.peer;
      net_->inbound.pop_front();
    }
    return n;
  }

  Endpoint local_endpoint() const override { return local_; }

  void Wake() override {
    {
      std::lock_guard<std::mutex> lock(net_->mu);
      net_->woken = true;
    }
    net_->cv.notify_all();
  }

  std::string Describe() const override { return "fake"; }

  std::vector<std::pair<std::string, uint64_t>> TransportCounters() override {
    std::lock_guard<std::mutex> lock(net_->mu);
    return {{"raw_frames", 1}, {"raw_ring_drops", net_->transport_drops}};
  }

 private:
  std::shared_ptr<FakeNet> net_;
  Endpoint local_;
};

const uint32_t kIpA = Ip(10, 0, 0, 1);
const uint32_t kIpB = Ip(10, 0, 0, 2);
const Endpoint kSwitch{Ip(10, 0, 0, 254), 48864};

WorkerRegistration Reg(uint32_t rank, uint32_t num_workers, uint32_t ipv4,
                                   std::vector<uint16_t> ports = {}) {
  WorkerRegistration r;
  r.rank = rank;
  r.num_workers = num_workers;
  r.ipv4 = ipv4;
  r.udp_ports = std::move(ports);
  return r;
}

// A reference UdpSession registration: job 0, no token.
Status RegisterInJob0(SwitchServer& server, const WorkerRegistration& reg) {
  JobRegistration job0;
  job0.job_id = kReferenceJobId;
  job0.worker = reg;
  return server.RegisterJobWorker(job0).status();
}

SwitchConfig SmallConfig() {
  SwitchConfig c;
  c.num_slots = 64;
  c.max_elements_per_packet = 256;
  c.max_workers = 16;
  return c;
}

std::unique_ptr<SwitchServer> MakeServer(const std::shared_ptr<FakeNet>& net,
                                         SwitchConfig config = SmallConfig()) {
  auto server = SwitchServer::Create(config, std::make_unique<FakeChannel>(net, kSwitch));
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(server).value();
}

// Polls `pred` for up to 5 s.
bool Eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

TEST(SwitchServerTest, CreateValidates) {
  auto net = std::make_shared<FakeNet>();
  SwitchConfig bad = SmallConfig();
  bad.num_slots = 0;
  auto s = SwitchServer::Create(bad, std::make_unique<FakeChannel>(net, kSwitch));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("num_slots"));
  s = SwitchServer::Create(SmallConfig(), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("channel"));
}

TEST(SwitchServerTest, InfoDescribesTheSwitch) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  SwitchInfo info = server->Info();
  EXPECT_EQ(info.ipv4, kSwitch.ipv4);
  EXPECT_EQ(info.udp_port, 48864);
  EXPECT_EQ(info.num_slots, 64u);
  EXPECT_EQ(info.max_workers, 16u);
  EXPECT_EQ(info.mac, 0x001122334455u);
  SwitchConfig c = SmallConfig();
  c.advertised_ipv4 = Ip(192, 168, 1, 1);
  auto other = MakeServer(net, c);
  EXPECT_EQ(other->Info().ipv4, Ip(192, 168, 1, 1));
  EXPECT_EQ(other->local_endpoint(), kSwitch);
}

TEST(SwitchServerTest, AggregatesAndMulticastsThroughTheChannel) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  // One worker registers before Start, one after.
  ASSERT_TRUE(RegisterInJob0(*server, Reg(0, 2, kIpA, {4000, 4001})).ok());
  ASSERT_TRUE(server->Start().ok());
  EXPECT_TRUE(server->running());
  ASSERT_TRUE(RegisterInJob0(*server, Reg(1, 2, kIpB, {5000, 5001})).ok());

  Request ra{.slot = 10, .set = 1, .values = Ramp(64, 1, 2), .exp0 = 3, .job_number = 2, .tsi = 11};
  Request rb{.slot = 10, .set = 1, .values = Ramp(64, -5, 9), .exp0 = 1, .job_number = 2, .tsi = 11};
  net->Inject(Encode(ra), {kIpA, 4001});
  net->Inject(Encode(rb), {kIpB, 5001});
  auto sent = net->WaitSent(2);
  ASSERT_EQ(sent.size(), 2u);
  const auto expected = ExpectedResponse(rb, Sum({ra.values, rb.values}), 3, 0);
  EXPECT_EQ(sent[0].peer, (Endpoint{kIpA, 4001}));
  EXPECT_EQ(sent[1].peer, (Endpoint{kIpB, 5001}));
  EXPECT_EQ(sent[0].bytes, expected);
  EXPECT_EQ(sent[1].bytes, expected);

  // A retransmission after completion is unicast back.
  net->Inject(Encode(ra), {kIpA, 4001});
  sent = net->WaitSent(3);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[2].peer, (Endpoint{kIpA, 4001}));

  // Counters are readable from this thread.
  ASSERT_TRUE(Eventually([&] { return server->counters().core.unicast_replies == 1; }));
  ServerCounters c = server->counters();
  EXPECT_EQ(c.core.datagrams_received, 3u);
  EXPECT_EQ(c.core.multicast_rounds, 1u);
  EXPECT_EQ(c.core.consumed, 1u);
  EXPECT_EQ(c.core.datagrams_sent, 3u);
  EXPECT_GE(c.bursts, 1u);
  EXPECT_GE(c.sessions_adopted, 1u);
  EXPECT_EQ(c.send_errors, 0u);
  EXPECT_EQ(c.Named().size(), ServerCounters::kNumCounters);
  EXPECT_THAT(c.FormatTable(), HasSubstr("sessions_adopted"));
  server->Stop();
  EXPECT_FALSE(server->running());
}

TEST(SwitchServerTest, TransportCountersAreSummedOverIoThreadsAndListed) {
  auto net = std::make_shared<FakeNet>();
  SwitchConfig config = SmallConfig();
  config.io_threads = 2;
  std::vector<std::unique_ptr<transport::Channel>> channels;
  channels.push_back(std::make_unique<FakeChannel>(net, kSwitch));
  channels.push_back(std::make_unique<FakeChannel>(net, Endpoint{kSwitch.ipv4, uint16_t(kSwitch.port + 1)}));
  auto s = SwitchServer::Create(config, std::move(channels));
  ASSERT_TRUE(s.ok()) << s.status();
  using Counters = std::vector<std::pair<std::string, uint64_t>>;
  // Read at Create, before any thread runs.
  EXPECT_EQ((*s)->transport_counters(), (Counters{{"raw_frames", 2}, {"raw_ring_drops", 0}}));
  {
    std::lock_guard<std::mutex> lock(net->mu);
    net->transport_drops = 5;
  }
  ASSERT_TRUE((*s)->Start().ok());
  // Refreshed by each I/O thread every kSweepInterval.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((*s)->transport_counters() != Counters{{"raw_frames", 2}, {"raw_ring_drops", 10}} &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ((*s)->transport_counters(), (Counters{{"raw_frames", 2}, {"raw_ring_drops", 10}}));
  // What the controller lists (jobs list): the switch's counters, then the transport's.
  const Counters values = (*s)->CounterValues();
  ASSERT_GE(values.size(), 2u);
  EXPECT_EQ(values.front().first, "datagrams_received");
  EXPECT_EQ(values[values.size() - 2], (std::pair<std::string, uint64_t>{"raw_frames", 2}));
  EXPECT_EQ(values.back(), (std::pair<std::string, uint64_t>{"raw_ring_drops", 10}));
  (*s)->Stop();
}

TEST(IsDropCounterTest, EveryDropReasonAndNothingElse) {
  // Every switch counter is a drop reason except the datagrams it took in or sent and the
  // outcomes of aggregation.
  const std::vector<std::string> not_drops = {"datagrams_received", "consumed", "multicast_rounds",
                                              "unicast_replies", "datagrams_sent", "bursts",
                                              "recv_errors", "send_errors", "sessions_adopted",
                                              "uplink_sent", "uplink_resent"};
  for (const auto& [name, v] : ServerCounters{}.Named()) {
    const bool expected = std::find(not_drops.begin(), not_drops.end(), name) == not_drops.end();
    EXPECT_EQ(IsDropCounter(name), expected) << name;
  }
  // The raw channel's: malformed frames are drops; checksum verdicts of accepted frames are not.
  for (int v = 0; v < transport::kNumFrameVerdicts; ++v) {
    const auto verdict = transport::FrameVerdict(v);
    EXPECT_EQ(IsDropCounter(std::string("raw_frames_") + transport::FrameVerdictName(verdict)),
              transport::IsStructuralError(verdict))
        << transport::FrameVerdictName(verdict);
  }
  for (const char* name : {"raw_ring_drops", "raw_refused_checksum", "raw_not_for_us",
                           "raw_send_no_mac", "udp_socket_drops", "sim_egress_drops"}) {
    EXPECT_TRUE(IsDropCounter(name)) << name;
  }
  for (const char* name : {"raw_frames", "raw_received", "raw_sent", "raw_udp_checksum_offloaded",
                           "raw_gso_datagrams"}) {
    EXPECT_FALSE(IsDropCounter(name)) << name;
  }
}

TEST(SwitchServerTest, StopIsPromptAndIdempotent) {
  // Checked: Stop() wakes the I/O thread blocked in RecvBurst (Channel::Wake) instead of
  // waiting for the receive timeout to run out. Not by the clock: the channel's RecvBurst here
  // ignores the server's 20 ms timeout and waits 60 s unless woken, so a Stop() that relied on
  // the timeout would leave an expired wait behind (and take 60 s).
  auto net = std::make_shared<FakeNet>();
  net->recv_wait = 60s;
  auto server = MakeServer(net);
  server->Stop();  // never started: no effect
  ASSERT_TRUE(server->Start().ok());
  ASSERT_TRUE(server->Start().ok());  // already running: no effect
  // The I/O thread has reached RecvBurst (a Wake() before it waits is remembered, so this only
  // makes the blocked case the one tested, it is not needed for correctness).
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(net->mu);
    return net->recv_calls > 0;
  }));
  server->Stop();
  {
    std::lock_guard<std::mutex> lock(net->mu);
    EXPECT_EQ(net->recv_waits_expired, 0u) << "Stop() waited for a receive timeout instead of waking";
  }
  server->Stop();
  EXPECT_FALSE(server->running());
  // Restartable, and the destructor stops it (again by waking it: no 60 s wait).
  ASSERT_TRUE(server->Start().ok());
  EXPECT_TRUE(server->running());
}

TEST(SwitchServerTest, StopIsBoundedEvenIfWakeIsLost) {
  // A channel whose Wake() does nothing: the receive timeout still bounds Stop(). Checked: the
  // server never asks RecvBurst to wait longer than kRecvTimeout, so its I/O loop sees the stop
  // flag within that; and Stop() returns (a hang fails by the test's timeout). Not by the clock.
  class DeafChannel : public FakeChannel {
   public:
    using FakeChannel::FakeChannel;
    void Wake() override {}
  };
  auto net = std::make_shared<FakeNet>();
  auto s = SwitchServer::Create(SmallConfig(), std::make_unique<DeafChannel>(net, kSwitch));
  ASSERT_TRUE(s.ok());
  auto server = std::move(s).value();
  ASSERT_TRUE(server->Start().ok());
  ASSERT_TRUE(Eventually([&] {
    std::lock_guard<std::mutex> lock(net->mu);
    return net->recv_calls > 0;
  }));
  server->Stop();
  EXPECT_FALSE(server->running());
  std::lock_guard<std::mutex> lock(net->mu);
  EXPECT_GT(net->longest_recv_timeout.count(), 0);  // it waits (no busy loop)...
  EXPECT_LE(net->longest_recv_timeout, SwitchServer::kRecvTimeout);  // ... at most kRecvTimeout
}

TEST(SwitchServerTest, RetriesTheUnsentSuffixUntilEverythingIsSent) {
  auto net = std::make_shared<FakeNet>();
  net->max_accept_per_send = 1;
  auto server = MakeServer(net);
  const uint32_t kWorkers = 5;
  for (uint32_t r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(RegisterInJob0(*server, Reg(r, kWorkers, kIpA, {uint16_t(4000 + r)})).ok());
  }
  ASSERT_TRUE(server->Start().ok());
  for (uint32_t r = 0; r < kWorkers; ++r) {
    net->Inject(Encode({.slot = 0, .values = Ramp(64, int32_t(r), 1)}), {kIpA, uint16_t(4000 + r)});
  }
  auto sent = net->WaitSent(kWorkers);
  ASSERT_EQ(sent.size(), kWorkers);
  for (uint32_t r = 0; r < kWorkers; ++r) {
    EXPECT_EQ(sent[r].peer, (Endpoint{kIpA, uint16_t(4000 + r)})) << r;
    EXPECT_EQ(sent[r].bytes, sent[0].bytes);
  }
  {
    std::lock_guard<std::mutex> lock(net->mu);
    EXPECT_GE(net->send_calls, kWorkers);
  }
  server->Stop();
  EXPECT_EQ(server->counters().send_dropped, 0u);
}

TEST(SwitchServerTest, ChannelErrorsAreCountedAndTheLoopContinues) {
  auto net = std::make_shared<FakeNet>();
  net->fail_next_sends = 1;
  net->fail_next_recvs = 2;
  auto server = MakeServer(net);
  ASSERT_TRUE(RegisterInJob0(*server, Reg(0, 1, kIpA)).ok());
  ASSERT_TRUE(server->Start().ok());
  net->Inject(Encode({.slot = 0, .values = Ramp(64, 0, 1)}), {kIpA, 4000});  // reply fails
  ASSERT_TRUE(Eventually([&] { return server->counters().send_errors == 1; }));
  net->Inject(Encode({.slot = 1, .values = Ramp(64, 0, 1)}), {kIpA, 4000});  // reply goes out
  auto sent = net->WaitSent(1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].peer, (Endpoint{kIpA, 4000}));
  ServerCounters c = server->counters();
  EXPECT_EQ(c.recv_errors, 2u);
  EXPECT_EQ(c.send_dropped, 1u);
  EXPECT_EQ(server->last_error().code(), StatusCode::kUnavailable);
  EXPECT_THAT(server->last_error().message(), HasSubstr("fake send failure"));
}

TEST(SwitchServerTest, NewSessionWhileRunningResetsAggregation) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  ASSERT_TRUE(server->Start().ok());
  ASSERT_TRUE(RegisterInJob0(*server, Reg(0, 2, kIpA, {4000})).ok());
  ASSERT_TRUE(RegisterInJob0(*server, Reg(1, 2, kIpB, {5000})).ok());
  auto pa = Encode({.slot = 3, .values = Ramp(64, 100, 0)});
  auto pb = Encode({.slot = 3, .values = Ramp(64, 20, 0)});
  net->Inject(pa, {kIpA, 4000});
  ASSERT_TRUE(Eventually([&] { return server->counters().core.consumed == 1; }));

  // A new session (same workers): A's half-finished contribution must be gone.
  ASSERT_TRUE(RegisterInJob0(*server, Reg(0, 2, kIpA, {4000})).ok());
  ASSERT_TRUE(RegisterInJob0(*server, Reg(1, 2, kIpB, {5000})).ok());
  EXPECT_EQ(server->jobs()->reference().epoch, 2u);
  net->Inject(pb, {kIpB, 5000});
  ASSERT_TRUE(Eventually([&] { return server->counters().core.consumed == 2; }));
  EXPECT_EQ(server->counters().core.multicast_rounds, 0u);
  net->Inject(pa, {kIpA, 4000});
  auto sent = net->WaitSent(2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].bytes, ExpectedResponse(Request{.slot = 3}, Ramp(64, 120, 0), 0, 0));
}

TEST(SwitchServerTest, RegistrationErrorsAreReturned) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  Status s = RegisterInJob0(*server, Reg(1, 2, kIpA));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  s = RegisterInJob0(*server, Reg(0, 17, kIpA));  // max_workers = 16
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("num_workers"));
  EXPECT_EQ(server->jobs()->reference().epoch, 0u);
  // Job 0 takes no token.
  JobRegistration with_token{.job_id = kReferenceJobId, .token = "some-token-1234",
                             .worker = Reg(0, 2, kIpA)};
  s = server->RegisterJobWorker(with_token).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("takes no token"));
  EXPECT_EQ(server->jobs()->reference().epoch, 0u);
}

TEST(SwitchServerTest, Job0RegistrationGrantsTheWholePool) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  JobRegistration job0;
  job0.job_id = kReferenceJobId;
  job0.worker = Reg(0, 3, kIpA, {4000});
  auto grant = server->RegisterJobWorker(job0);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->job_id, kReferenceJobId);
  EXPECT_EQ(grant->num_workers, 3u);
  EXPECT_EQ(grant->state, JobState::kRunning);
  EXPECT_EQ(grant->switch_info.num_slots, 64u);
  EXPECT_EQ(grant->switch_info.ipv4, kSwitch.ipv4);
  EXPECT_EQ(grant->switch_info.udp_port, 48864);
  EXPECT_EQ(grant->switch_info.max_workers, 16u);
  EXPECT_EQ(server->jobs()->reference().epoch, 1u);
  // Job 0 stays out of the job list.
  EXPECT_EQ(server->GetJob(kReferenceJobId).status().code(), StatusCode::kNotFound);
}

TEST(SwitchServerTest, ConcurrentRegistrationAndTraffic) {
  // Registration from one thread while the I/O thread processes rounds: every completed round
  // must still be exact (run under TSan to check the publication protocol).
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  ASSERT_TRUE(RegisterInJob0(*server, Reg(0, 2, kIpA, {4000})).ok());
  ASSERT_TRUE(RegisterInJob0(*server, Reg(1, 2, kIpB, {5000})).ok());
  ASSERT_TRUE(server->Start().ok());
  std::atomic<bool> stop{false};
  std::thread registrar([&] {
    // Re-registering rank 1 with the same address: a new table, same session.
    while (!stop.load()) {
      EXPECT_TRUE(RegisterInJob0(*server, Reg(1, 2, kIpB, {5000})).ok());
      (void)server->counters();
      std::this_thread::sleep_for(100us);
    }
  });
  const int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    const uint16_t slot = uint16_t(round % 64);
    const uint8_t set = uint8_t((round / 64) % 2);
    net->Inject(Encode({.slot = slot, .set = set, .values = Ramp(64, round, 1)}), {kIpA, 4000});
    net->Inject(Encode({.slot = slot, .set = set, .values = Ramp(64, -round, 2)}), {kIpB, 5000});
    auto sent = net->WaitSent(size_t(2 * (round + 1)));
    ASSERT_EQ(sent.size(), size_t(2 * (round + 1))) << "round " << round;
    EXPECT_EQ(sent.back().bytes,
              ExpectedResponse(Request{.slot = slot, .set = set}, Ramp(64, 0, 3), 0, 0));
  }
  stop = true;
  registrar.join();
  server->Stop();
  EXPECT_EQ(server->counters().core.multicast_rounds, uint64_t(kRounds));
  EXPECT_EQ(server->jobs()->reference().epoch, 1u);
}

// ---- Jobs through the server (SwitchControl) ----

JobRegistration JobReg(const JobInfo& job, uint32_t rank, uint32_t ipv4,
                                   uint16_t port) {
  JobRegistration r;
  r.job_id = job.job_id;
  r.token = job.token;
  r.worker.rank = rank;
  r.worker.ipv4 = ipv4;
  r.worker.udp_ports = {port};
  return r;
}

TEST(SwitchServerJobsTest, ARefusingRegistrationCheckLeavesEverythingUnchanged) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  std::vector<SwitchServer::WorkerAddresses> published;
  std::vector<uint32_t> checked_ranks;
  server->SetWorkersListener([&](const SwitchServer::WorkerAddresses& w) { published.push_back(w); });
  // Refuses every worker that registers MAC 02:00:00:00:00:bb (only registrations the job
  // table accepted reach it).
  server->SetRegistrationCheck([&](const JobRegistration& r) -> Status {
    checked_ranks.push_back(r.worker.rank);
    if (r.worker.mac == 0x0200000000bbu) {
      return FailedPreconditionError("refused: rank " + std::to_string(r.worker.rank));
    }
    return OkStatus();
  });
  WorkerRegistration good = Reg(0, 2, kIpA);
  good.mac = 0x0200000000aau;
  ASSERT_TRUE(RegisterInJob0(*server, good).ok());
  ASSERT_EQ(published.size(), 1u);
  EXPECT_EQ(published[0], (SwitchServer::WorkerAddresses{{kIpA, 0x0200000000aau}}));
  const auto before = server->jobs();
  WorkerRegistration bad = Reg(1, 2, kIpB);
  bad.mac = 0x0200000000bbu;
  Status s = RegisterInJob0(*server, bad);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "refused: rank 1");
  EXPECT_EQ(server->jobs(), before);  // no new table published
  EXPECT_EQ(published.size(), 1u);    // the listener was not called
  // The job table's own refusals come first: the check never sees them.
  EXPECT_EQ(RegisterInJob0(*server, Reg(5, 2, kIpB)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(checked_ranks, (std::vector<uint32_t>{0, 1}));
  // A service job's registrations go through the same check.
  JobSpec spec;
  spec.num_workers = 1;
  spec.num_slots = 16;
  auto job = server->CreateJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  JobRegistration jr = JobReg(*job, 0, kIpB, 5000);
  jr.worker.mac = 0x0200000000bbu;
  EXPECT_EQ(server->RegisterJobWorker(jr).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(server->GetJob(job->job_id)->num_registered, 0u);
}

TEST(SwitchServerJobsTest, JobTrafficInspectionAndIdleTeardown) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  JobSpec spec;
  spec.num_workers = 2;
  spec.num_slots = 16;
  spec.elements_per_packet = 64;
  spec.idle_timeout = 10min;  // never reached on its own during the test
  auto job = server->CreateJob(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->token.size(), 32u);
  auto grant = server->RegisterJobWorker(JobReg(*job, 0, kIpA, 4000));
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->switch_info.udp_port, 48864);
  EXPECT_EQ(grant->switch_info.num_slots, 16u);
  ASSERT_TRUE(server->RegisterJobWorker(JobReg(*job, 1, kIpB, 5000)).ok());
  // Inspection before Start reads the state directly.
  auto slots = server->InspectSlots(job->job_id, 14, 10);
  ASSERT_TRUE(slots.ok()) << slots.status();
  EXPECT_EQ(slots->size(), 2u);
  ASSERT_TRUE(server->Start().ok());

  Request ra{.slot = 3, .values = Ramp(64, 1, 1)};
  net->Inject(Encode(ra), {kIpA, 4000});
  ASSERT_TRUE(Eventually([&] { return server->counters().core.consumed == 1; }));
  // While running, inspection is served by the I/O thread and sees the half-done round.
  slots = server->InspectSlots(job->job_id, 3, 1);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 1u);
  EXPECT_EQ((*slots)[0].sets[0].bitmap[0], 1u);
  EXPECT_EQ((*slots)[0].sets[0].counter, 1u);
  EXPECT_EQ(server->InspectSlots(job->job_id, 0, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(server->InspectSlots(77, 0, 1).status().code(), StatusCode::kNotFound);
  auto info = server->GetJob(job->job_id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, JobState::kRunning);
  EXPECT_EQ(info->counters.consumed, 1u);

  // An hour later without traffic the job is torn down; its workers' datagrams are then
  // dropped as job_ended, and its slots are free.
  // (The first sweep after traffic only notes the activity, so sweep twice; the I/O thread's
  // own sweep may have done the first one.)
  auto expired = server->ExpireIdleJobs(Clock::now() + 1h);
  const auto more = server->ExpireIdleJobs(Clock::now() + 2h);
  expired.insert(expired.end(), more.begin(), more.end());
  EXPECT_EQ(expired, std::vector<uint32_t>{job->job_id});
  EXPECT_EQ(server->ListJobs().free_slots, 64u);
  net->Inject(Encode({.slot = 3, .values = Ramp(64, 2, 2)}), {kIpB, 5000});
  ASSERT_TRUE(Eventually([&] { return server->counters().core.job_ended == 1; }));
  EXPECT_EQ(net->sent.size(), 0u);
  EXPECT_EQ(server->InspectSlots(job->job_id, 0, 1).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(server->CheckJobAccess(job->job_id, job->token).code(),
            StatusCode::kFailedPrecondition);
  server->Stop();
}

TEST(SwitchServerJobsTest, TheControlThreadExpiresIdleJobsByItself) {
  auto net = std::make_shared<FakeNet>();
  auto server = MakeServer(net);
  ASSERT_TRUE(server->Start().ok());
  JobSpec spec;
  spec.num_workers = 1;
  spec.num_slots = 8;
  spec.elements_per_packet = 64;
  spec.idle_timeout = 100ms;
  auto job = server->CreateJob(spec);
  ASSERT_TRUE(job.ok());
  spec.idle_timeout = 0ms;
  auto keep = server->CreateJob(spec);
  ASSERT_TRUE(keep.ok());
  ASSERT_TRUE(Eventually([&] {
    auto j = server->GetJob(job->job_id);
    return j.ok() && j->state == JobState::kEnded;
  }));
  EXPECT_THAT(server->GetJob(job->job_id)->end_reason, HasSubstr("idle_timeout 100 ms"));
  EXPECT_EQ(server->GetJob(keep->job_id)->state, JobState::kWaitingForWorkers);
  EXPECT_EQ(server->ListJobs().free_slots, 64u - 8u);
  server->Stop();
}

// ---- The packet path takes no lock (header, "Threading") ----

class PacketPathTest : public ::testing::TestWithParam<uint32_t> {};

// With the job-table lock held by the test, every I/O thread keeps aggregating, for longer
// than several sweep intervals (I/O thread 0 used to take that lock for the idle sweep every
// kSweepInterval; it would stop here). Two workers of job 0 with two worker threads each:
// worker thread t uses slots [4t, 4t + 4) and is served by I/O thread t * io_threads / 2.
TEST_P(PacketPathTest, RoundsCompleteWhileTheTableLockIsHeld) {
  const uint32_t io_threads = GetParam();
  SwitchConfig config = SmallConfig();
  config.io_threads = io_threads;
  std::vector<std::shared_ptr<FakeNet>> nets;  // one per I/O thread
  std::vector<std::unique_ptr<transport::Channel>> channels;
  for (uint32_t i = 0; i < io_threads; ++i) {
    nets.push_back(std::make_shared<FakeNet>());
    channels.push_back(std::make_unique<FakeChannel>(
        nets[i], Endpoint{kSwitch.ipv4, uint16_t(kSwitch.port + i)}));
  }
  auto created = SwitchServer::Create(config, std::move(channels));
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<SwitchServer> server = std::move(created).value();
  for (uint32_t rank : {0u, 1u}) {
    const uint16_t port = rank == 0 ? 4000 : 5000;
    WorkerRegistration r = Reg(rank, 2, rank == 0 ? kIpA : kIpB, {port, uint16_t(port + 1)});
    r.protocol_version = control::kClientProtocolVersion;
    r.num_worker_threads = 2;
    r.window_packets = 8;
    ASSERT_TRUE(RegisterInJob0(*server, r).ok());
  }
  EXPECT_EQ(server->jobs()->reference().io_slot_begin[1], io_threads == 1 ? 64u : 4u);
  ASSERT_TRUE(server->Start().ok());

  std::unique_lock<std::mutex> table_lock = server->HoldTableLockForTesting();
  ASSERT_TRUE(table_lock.owns_lock());
  const auto held_since = std::chrono::steady_clock::now();
  std::vector<size_t> expected_sent(io_threads, 0);
  uint64_t rounds = 0;
  for (int round = 0;
       round < 16 || std::chrono::steady_clock::now() - held_since < 4 * SwitchServer::kSweepInterval;
       ++round) {
    const uint32_t t = uint32_t(round % 2);
    const uint32_t io = t * io_threads / 2;
    const int i = round / 2;  // this worker thread's round: slot i % 4, the other set every 4
    const uint16_t slot = uint16_t(4 * t + i % 4);
    const uint8_t set = uint8_t((i / 4) % 2);
    nets[io]->Inject(Encode({.slot = slot, .set = set, .values = Ramp(64, round, 1)}),
                     {kIpA, uint16_t(4000 + t)});
    nets[io]->Inject(Encode({.slot = slot, .set = set, .values = Ramp(64, -round, 2)}),
                     {kIpB, uint16_t(5000 + t)});
    expected_sent[io] += 2;
    const std::vector<Datagram> sent = nets[io]->WaitSent(expected_sent[io]);
    ASSERT_EQ(sent.size(), expected_sent[io]) << "round " << round << " with the table lock held";
    for (size_t k = sent.size() - 2; k < sent.size(); ++k) {
      EXPECT_EQ(sent[k].bytes,
                ExpectedResponse(Request{.slot = slot, .set = set}, Ramp(64, 0, 3), 0, 0));
    }
    EXPECT_EQ(sent[sent.size() - 2].peer, (Endpoint{kIpA, uint16_t(4000 + t)}));
    EXPECT_EQ(sent.back().peer, (Endpoint{kIpB, uint16_t(5000 + t)}));
    ++rounds;
  }
  table_lock.unlock();
  ASSERT_TRUE(Eventually([&] { return server->counters().core.multicast_rounds == rounds; }));
  EXPECT_EQ(server->counters().core.wrong_io_thread, 0u);
  if (io_threads == 2) {
    EXPECT_EQ(server->io_thread_counters(1).core.multicast_rounds, rounds / 2);
  }
  // The control side works again once the lock is free.
  EXPECT_EQ(server->ListJobs().reference_session->counters.multicast_rounds, rounds);
  server->Stop();
}

INSTANTIATE_TEST_SUITE_P(IoThreads, PacketPathTest, ::testing::Values(1u, 2u));

}  // namespace
}  // namespace switchml::dataplane
