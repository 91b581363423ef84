#include "transport/udp_channel.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace switchml::transport {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

RxDatagram Buffer(uint8_t* data, size_t capacity) {
  RxDatagram rx;
  rx.data = data;
  rx.capacity = static_cast<uint32_t>(capacity);
  return rx;
}

constexpr uint32_t kLocalhost = 0x7F000001;
constexpr uint32_t kDatagramBytes = 4106;  // 10-byte SwitchML prefix + 1024 int32

std::unique_ptr<UdpChannel> MakeChannel(UdpChannelOptions opt = {}) {
  if (opt.local.ipv4 == 0) opt.local.ipv4 = kLocalhost;
  auto ch = UdpChannel::Create(opt);
  EXPECT_TRUE(ch.ok()) << ch.status();
  return ch.ok() ? std::move(ch).value() : nullptr;
}

// Byte j of datagram i from sender `tag`: distinct per datagram, per position and per sender.
uint8_t Pattern(int tag, uint32_t i, uint32_t j) {
  return static_cast<uint8_t>(tag * 101 + i * 7 + j * 13 + (j >> 8));
}

// Sends `count` datagrams of `size` bytes to `to`, retrying the unaccepted rest.
void SendAll(UdpChannel& ch, Endpoint to, int tag, uint32_t count, uint32_t size,
             bool single_frame = false) {
  std::vector<std::vector<uint8_t>> bufs(count, std::vector<uint8_t>(size));
  std::vector<TxDatagram> tx(count);
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t j = 0; j < size; ++j) bufs[i][j] = Pattern(tag, i, j);
    tx[i] = TxDatagram{bufs[i].data(), size, to, single_frame};
  }
  size_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (done < count && std::chrono::steady_clock::now() < deadline) {
    auto sent = ch.SendBurst(std::span<const TxDatagram>(tx).subspan(done));
    ASSERT_TRUE(sent.ok()) << sent.status();
    done += *sent;
  }
  ASSERT_EQ(done, count);
}

// Receives until `count` datagrams arrived (or 2 s passed) and checks size, content and sender.
void ReceiveAndCheck(UdpChannel& ch, Endpoint from, int tag, uint32_t count, uint32_t size,
                     size_t burst) {
  std::vector<std::vector<uint8_t>> bufs(burst, std::vector<uint8_t>(size + 100));
  std::vector<RxDatagram> rx(burst);
  uint32_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (got < count && std::chrono::steady_clock::now() < deadline) {
    for (size_t k = 0; k < burst; ++k) {
      rx[k] = Buffer(bufs[k].data(), static_cast<uint32_t>(bufs[k].size()));
    }
    auto n = ch.RecvBurst(rx, 100ms);
    ASSERT_TRUE(n.ok()) << n.status();
    for (size_t k = 0; k < *n; ++k) {
      const uint32_t i = got + static_cast<uint32_t>(k);  // loopback UDP keeps order
      ASSERT_EQ(rx[k].size, size) << "datagram " << i;
      EXPECT_FALSE(rx[k].truncated);
      EXPECT_EQ(rx[k].from, from);
      for (uint32_t j = 0; j < size; ++j) {
        ASSERT_EQ(rx[k].data[j], Pattern(tag, i, j)) << "datagram " << i << " byte " << j;
      }
    }
    got += static_cast<uint32_t>(*n);
  }
  EXPECT_EQ(got, count);
}

TEST(UdpChannelTest, BindsEphemeralPortAndReportsIt) {
  auto ch = MakeChannel();
  ASSERT_NE(ch, nullptr);
  EXPECT_EQ(ch->local_endpoint().ipv4, kLocalhost);
  EXPECT_NE(ch->local_endpoint().port, 0);
  EXPECT_EQ(ch->Describe(), "udp " + ch->local_endpoint().ToString());
  EXPECT_GT(ch->recv_buffer_bytes(), 0);
  if (geteuid() == 0) {
    // SO_RCVBUFFORCE lifts the rmem_max cap for root; Linux reports twice the request.
    EXPECT_GE(ch->recv_buffer_bytes(), 4 << 20);
    EXPECT_GE(ch->send_buffer_bytes(), 4 << 20);
  }
}

TEST(UdpChannelTest, ExchangesBurstsInBothDirections) {
  auto a = MakeChannel();
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  SendAll(*a, b->local_endpoint(), 1, 32, kDatagramBytes);
  SendAll(*b, a->local_endpoint(), 2, 32, kDatagramBytes);
  ReceiveAndCheck(*b, a->local_endpoint(), 1, 32, kDatagramBytes, 32);
  ReceiveAndCheck(*a, b->local_endpoint(), 2, 32, kDatagramBytes, 32);
  EXPECT_EQ(a->stats().sent, 32u);
  EXPECT_EQ(a->stats().received, 32u);
  EXPECT_EQ(b->stats().sent, 32u);
  EXPECT_EQ(b->stats().received, 32u);
}

TEST(UdpChannelTest, BurstsLargerThanMaxBurstTakeSeveralSyscalls) {
  UdpChannelOptions opt;
  opt.max_burst = 8;
  auto a = MakeChannel(opt);
  auto b = MakeChannel(opt);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  SendAll(*a, b->local_endpoint(), 3, 20, 100);
  // One RecvBurst of 20 collects the 20 queued datagrams in three recvmmsg calls.
  std::vector<std::vector<uint8_t>> bufs(20, std::vector<uint8_t>(200));
  std::vector<RxDatagram> rx(20);
  for (size_t k = 0; k < 20; ++k) rx[k] = Buffer(bufs[k].data(), 200);
  auto n = b->RecvBurst(rx, 1s);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 20u);
  for (size_t k = 0; k < *n; ++k) {
    ASSERT_EQ(rx[k].size, 100u);
    EXPECT_EQ(rx[k].data[50], Pattern(3, static_cast<uint32_t>(k), 50));
  }
}

TEST(UdpChannelTest, FlagsTruncatedDatagrams) {
  auto a = MakeChannel();
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> big(100);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i + 1);
  TxDatagram tx[2] = {{big.data(), 100, b->local_endpoint()}, {big.data(), 10, b->local_endpoint()}};
  auto sent = a->SendBurst(tx);
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_EQ(*sent, 2u);

  uint8_t buf0[10] = {}, buf1[10] = {};
  RxDatagram rx[2] = {Buffer(buf0, sizeof(buf0)), Buffer(buf1, sizeof(buf1))};
  size_t got = 0;
  for (int tries = 0; tries < 10 && got < 2; ++tries) {
    auto n = b->RecvBurst(std::span<RxDatagram>(rx).subspan(got), 200ms);
    ASSERT_TRUE(n.ok()) << n.status();
    got += *n;
  }
  ASSERT_EQ(got, 2u);
  EXPECT_EQ(rx[0].size, 10u);  // bytes stored, not the datagram's length
  EXPECT_TRUE(rx[0].truncated);
  EXPECT_EQ(buf0[0], 1);
  EXPECT_EQ(buf0[9], 10);
  EXPECT_EQ(rx[1].size, 10u);  // exactly fits: not truncated
  EXPECT_FALSE(rx[1].truncated);
  EXPECT_EQ(b->stats().truncated, 1u);
}

TEST(UdpChannelTest, RecvTimesOutAfterTheTimeout) {
  auto ch = MakeChannel();
  ASSERT_NE(ch, nullptr);
  uint8_t buf[64];
  RxDatagram rx[1] = {Buffer(buf, sizeof(buf))};

  for (auto timeout : {std::chrono::microseconds(50ms), std::chrono::microseconds(3ms)}) {
    const auto start = std::chrono::steady_clock::now();
    auto n = ch->RecvBurst(rx, timeout);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
    // Not before the timeout (a lower bound: load can only make it later).
    EXPECT_GE(elapsed, timeout);
    // Not a speed claim: rules out a timeout read in the wrong unit (the microsecond count
    // taken as milliseconds: 50 ms becomes 50 s). 5 s is a tenth of that and far above any
    // scheduling delay.
    EXPECT_LT(elapsed, 5s);
  }

  // Zero timeout: a poll, no wait. Checked by the mechanism: exactly one non-blocking
  // recvmmsg and no spinning (a wait that ignored the zero would hang the test).
  const uint64_t syscalls = ch->stats().recv_syscalls;
  auto n = ch->RecvBurst(rx, 0us);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(ch->stats().recv_syscalls, syscalls + 1);
}

TEST(UdpChannelTest, WakeUnblocksRecvInAnotherThread) {
  auto ch = MakeChannel();
  ASSERT_NE(ch, nullptr);
  std::atomic<bool> returned{false};
  StatusOr<size_t> result = size_t{99};
  std::chrono::steady_clock::duration blocked{};
  std::thread t([&] {
    uint8_t buf[64];
    RxDatagram rx[1] = {Buffer(buf, sizeof(buf))};
    const auto start = std::chrono::steady_clock::now();
    result = ch->RecvBurst(rx, 100s);
    blocked = std::chrono::steady_clock::now() - start;
    returned = true;
  });
  // "Has not returned" after a sleep: under load the sleep can only end before the thread
  // blocks (missing a bug), never make a correct channel fail.
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load());  // really blocked
  ch->Wake();
  t.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(*result, 0u);
  // Ended by the Wake(), not by its 100 s timeout (the only other way it returns with
  // nothing): 10 s is a tenth of that and far above any scheduling delay.
  EXPECT_LT(blocked, 10s);

  // The wake-up was consumed: the next wait runs to its timeout (a lower bound: load-proof).
  uint8_t buf[64];
  RxDatagram rx[1] = {Buffer(buf, sizeof(buf))};
  const auto start = std::chrono::steady_clock::now();
  auto n = ch->RecvBurst(rx, 20ms);
  ASSERT_TRUE(n.ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
}

TEST(UdpChannelTest, WakeBeforeRecvIsNotLost) {
  auto ch = MakeChannel();
  ASSERT_NE(ch, nullptr);
  ch->Wake();
  uint8_t buf[64];
  RxDatagram rx[1] = {Buffer(buf, sizeof(buf))};
  const auto start = std::chrono::steady_clock::now();
  auto n = ch->RecvBurst(rx, 100s);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  // Returned because of the earlier Wake(), not its 100 s timeout (the only other way it
  // returns with nothing): 10 s is a tenth of that and far above any scheduling delay.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(UdpChannelTest, BindConflictNamesEndpointAndErrno) {
  auto a = MakeChannel();
  ASSERT_NE(a, nullptr);
  UdpChannelOptions opt;
  opt.local = a->local_endpoint();
  auto b = UdpChannel::Create(opt);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(b.status().message(),
            "bind " + a->local_endpoint().ToString() + ": Address already in use");
}

TEST(UdpChannelTest, RejectsBadOptionsNamingTheField) {
  UdpChannelOptions opt;
  opt.max_burst = 0;
  auto a = UdpChannel::Create(opt);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("max_burst"));

  opt = {};
  opt.recv_buffer_bytes = -1;
  auto b = UdpChannel::Create(opt);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("recv_buffer_bytes"));

  opt = {};
  opt.busy_poll = std::chrono::microseconds(-5);
  auto c = UdpChannel::Create(opt);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("busy_poll"));
}

TEST(UdpChannelTest, BusyPollReceivesWhatArrivesDuringTheSpinAndStillTimesOut) {
  // A spin (60 s) far longer than the calls' timeouts, so that "the timeout ends the spin" and
  // "the spin runs on" are told apart by an order of magnitude, not by milliseconds.
  UdpChannelOptions opt;
  opt.busy_poll = 60s;
  auto a = MakeChannel(opt);
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  uint8_t buf[64];
  RxDatagram rx = Buffer(buf, sizeof(buf));
  // Nothing arrives: the call returns 0 after its timeout even though that is inside the spin.
  auto t0 = std::chrono::steady_clock::now();
  auto n = a->RecvBurst({&rx, 1}, 200ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  EXPECT_GE(took, 200ms);  // a lower bound: load-proof
  // Ended by its timeout, not by the end of the 60 s spin: 10 s is far above any scheduling
  // delay and far below the spin.
  EXPECT_LT(took, 10s);
  // It polled instead of sleeping: more than two recvmmsg calls in 200 ms of spinning (the
  // thread would have to be descheduled for the whole 200 ms to make fewer).
  EXPECT_GT(a->stats().recv_syscalls, 2u);
  // A datagram sent while the receiver spins is returned. The sender's sleep only makes the
  // "during the spin" case likely; if it sends earlier the datagram is returned all the same,
  // and the 30 s timeout is far beyond when it is sent.
  std::thread sender([&] {
    std::this_thread::sleep_for(20ms);
    SendAll(*b, a->local_endpoint(), 7, 1, 10);
  });
  n = a->RecvBurst({&rx, 1}, 30s);
  sender.join();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(rx.size, 10u);
}

TEST(UdpChannelTest, RejectsBadDatagramsBeforeSendingAny) {
  auto a = MakeChannel();
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  uint8_t byte = 7;
  std::vector<uint8_t> huge(70000);
  const TxDatagram ok{&byte, 1, b->local_endpoint()};
  for (const TxDatagram& bad : {TxDatagram{&byte, 1, {kLocalhost, 0}},
                                TxDatagram{nullptr, 5, b->local_endpoint()},
                                TxDatagram{huge.data(), 70000, b->local_endpoint()}}) {
    TxDatagram batch[2] = {ok, bad};
    auto sent = a->SendBurst(batch);
    ASSERT_FALSE(sent.ok());
    EXPECT_EQ(sent.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(sent.status().message(), HasSubstr("datagram 1"));
  }
  EXPECT_EQ(a->stats().sent, 0u);
}

// Traffic to a port nobody listens on provokes ICMP port-unreachable. With IP_RECVERR the
// kernel reports it as ECONNREFUSED on the next send/receive; neither may fail.
TEST(UdpChannelTest, IcmpErrorsAreCountedNotFatal) {
  auto a = MakeChannel();
  ASSERT_NE(a, nullptr);
  Endpoint dead;
  {
    auto gone = MakeChannel();
    ASSERT_NE(gone, nullptr);
    dead = gone->local_endpoint();
  }  // closed: its port has no listener now
  const int on = 1;
  ASSERT_EQ(setsockopt(a->native_handle(), IPPROTO_IP, IP_RECVERR, &on, sizeof(on)), 0);

  uint8_t payload[16] = {};
  uint8_t buf[64];
  for (int round = 0; round < 20; ++round) {
    TxDatagram tx[4];
    for (auto& t : tx) t = TxDatagram{payload, sizeof(payload), dead};
    auto sent = a->SendBurst(tx);
    ASSERT_TRUE(sent.ok()) << sent.status();
    EXPECT_EQ(*sent, 4u);
    RxDatagram rx[1] = {Buffer(buf, sizeof(buf))};
    auto n = a->RecvBurst(rx, 1ms);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0u);
  }
  EXPECT_GT(a->stats().errors_ignored, 0u);
  // A pending error is reported by whichever datagram comes next; that datagram is retried and
  // sent, so nothing is dropped.
  EXPECT_EQ(a->stats().send_dropped, 0u);
  EXPECT_EQ(a->stats().sent, 80u);

  // The channel still works afterwards.
  auto b = MakeChannel();
  ASSERT_NE(b, nullptr);
  SendAll(*a, b->local_endpoint(), 4, 4, 64);
  ReceiveAndCheck(*b, a->local_endpoint(), 4, 4, 64, 4);
}

TEST(UdpChannelTest, SendingToDeadPortWithoutRecvErrSucceeds) {
  auto a = MakeChannel();
  ASSERT_NE(a, nullptr);
  Endpoint dead;
  {
    auto gone = MakeChannel();
    ASSERT_NE(gone, nullptr);
    dead = gone->local_endpoint();
  }
  uint8_t payload[16] = {};
  for (int round = 0; round < 10; ++round) {
    TxDatagram tx[2] = {{payload, 16, dead}, {payload, 16, dead}};
    auto sent = a->SendBurst(tx);
    ASSERT_TRUE(sent.ok()) << sent.status();
    EXPECT_EQ(*sent, 2u);
    uint8_t buf[64];
    RxDatagram rx[1] = {Buffer(buf, sizeof(buf))};
    auto n = a->RecvBurst(rx, 1ms);
    ASSERT_TRUE(n.ok()) << n.status();
  }
  EXPECT_EQ(a->stats().sent, 20u);
}

// In an empty network namespace nothing is routable: every datagram fails with ENETUNREACH,
// twice, and is dropped and counted rather than failing the burst or blocking the caller.
TEST(UdpChannelTest, UnroutableDatagramsAreDroppedNotFatal) {
  bool skipped = false;
  std::thread t([&] {
    // unshare(CLONE_NEWNET) moves only this thread (and the sockets it creates) into a new,
    // empty namespace; it needs CAP_SYS_ADMIN.
    if (unshare(CLONE_NEWNET) != 0) {
      skipped = true;
      return;
    }
    for (bool gso : {false, true}) {
      UdpChannelOptions opt;  // 0.0.0.0:0
      opt.gso = gso;
      auto ch = UdpChannel::Create(opt);
      ASSERT_TRUE(ch.ok()) << ch.status();
      uint8_t payload[8] = {};
      TxDatagram tx[3];
      for (auto& d : tx) d = TxDatagram{payload, sizeof(payload), {0x0A010203, 9}};
      auto sent = (*ch)->SendBurst(tx);
      ASSERT_TRUE(sent.ok()) << sent.status();
      EXPECT_EQ(*sent, 3u);
      EXPECT_EQ((*ch)->stats().send_dropped, 3u);
      // Each message is tried twice: three single datagrams, or one GSO message of three.
      EXPECT_EQ((*ch)->stats().errors_ignored, (*ch)->gso_enabled() ? 2u : 6u) << "gso " << gso;
      EXPECT_EQ((*ch)->stats().sent, 0u);
    }
    auto route = LocalIpv4For({0x0A010203, 9});
    ASSERT_FALSE(route.ok());
    EXPECT_EQ(route.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(route.status().message(), "route to 10.1.2.3:9: Network is unreachable");
  });
  t.join();
  if (skipped) GTEST_SKIP() << "unshare(CLONE_NEWNET) not permitted";
}

TEST(UdpChannelTest, BroadcastWithoutSoBroadcastIsInvalidArgument) {
  auto a = MakeChannel();
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  uint8_t payload[8] = {};
  TxDatagram tx[2] = {{payload, 8, b->local_endpoint()}, {payload, 8, {0xFFFFFFFF, 9}}};
  auto sent = a->SendBurst(tx);
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(sent.status().message(), HasSubstr("255.255.255.255:9"));
  EXPECT_EQ(a->stats().sent, 1u);  // the first one went out
}

// Minimal buffers on both sides and a flood: SendBurst must keep returning promptly (the socket
// is non-blocking) with a count, and the receiver simply loses what did not fit.
TEST(UdpChannelTest, FloodNeverBlocksTheSender) {
  UdpChannelOptions small;
  small.send_buffer_bytes = 1;  // the kernel rounds up to its minimum
  small.recv_buffer_bytes = 1;
  auto a = MakeChannel(small);
  auto b = MakeChannel(small);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<uint8_t> payload(kDatagramBytes, 0xAB);
  std::vector<TxDatagram> tx(64, TxDatagram{payload.data(), kDatagramBytes, b->local_endpoint()});
  // Never blocks: checked by the mechanism (a non-blocking socket, so a full buffer makes
  // sendmmsg return at once) and by every SendBurst returning a count; not by the clock.
  const int flags = fcntl(a->native_handle(), F_GETFL);
  ASSERT_GE(flags, 0);
  EXPECT_NE(flags & O_NONBLOCK, 0);
  uint64_t accepted = 0;
  for (int round = 0; round < 16; ++round) {
    auto sent = a->SendBurst(tx);
    ASSERT_TRUE(sent.ok()) << sent.status();
    EXPECT_LE(*sent, tx.size());
    accepted += *sent;
  }
  EXPECT_EQ(accepted, a->stats().sent);
  EXPECT_EQ(a->stats().send_dropped, 0u);

  std::vector<std::vector<uint8_t>> bufs(64, std::vector<uint8_t>(kDatagramBytes));
  std::vector<RxDatagram> rx(64);
  uint64_t received = 0;
  for (;;) {
    for (size_t k = 0; k < rx.size(); ++k) rx[k] = Buffer(bufs[k].data(), kDatagramBytes);
    auto n = b->RecvBurst(rx, 0us);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
    received += *n;
  }
  EXPECT_LT(received, 16u * 64u);  // a few KiB of receive buffer cannot hold 4 MiB
  EXPECT_LE(received, accepted);
}

// ---- UDP GSO / GRO ----

// Datagrams of mixed sizes and destinations, one SendBurst: each receiver gets exactly its own,
// in order, byte for byte, whether sender and receiver use the offloads or not. Runs include a
// shorter last datagram, empty datagrams and runs longer than one GSO message.
// Every combination of GSO, GRO, copying or in-place receive (RecvBurstNoCopy) and receive
// batch size (small: GRO runs are handed out over several calls; large: one call would take
// more than one recvmmsg returns).
TEST(UdpChannelTest, OffloadsDeliverEveryDatagramIntactInAnyCombination) {
  for (int mode = 0; mode < 16; ++mode) {
    const bool gso = (mode & 1) != 0, gro = (mode & 2) != 0, nocopy = (mode & 4) != 0;
    const size_t batch = (mode & 8) != 0 ? 300 : 5;
    SCOPED_TRACE("gso " + std::to_string(gso) + " gro " + std::to_string(gro) + " nocopy " +
                 std::to_string(nocopy) + " batch " + std::to_string(batch));
    UdpChannelOptions so, ro;
    so.gso = gso;
    so.max_burst = 256;
    ro.gro = gro;
    auto a = MakeChannel(so);
    auto r1 = MakeChannel(ro);
    auto r2 = MakeChannel(ro);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(r1, nullptr);
    ASSERT_NE(r2, nullptr);
    if (gso) {
      EXPECT_TRUE(a->gso_enabled());  // Linux >= 4.18
    }
    if (gro) {
      EXPECT_TRUE(r1->gro_enabled());  // Linux >= 5.0
    }
    // 150 datagrams of 1034 bytes to r1 (more than one 64-segment message), then 7 to r2 of
    // which the last is shorter, then 3 empty ones to r1, then 5 alternating.
    struct Plan { Endpoint to; uint32_t size; int tag; };
    std::vector<Plan> plan;
    for (int i = 0; i < 150; ++i) plan.push_back({r1->local_endpoint(), 1034, 1});
    for (int i = 0; i < 7; ++i) plan.push_back({r2->local_endpoint(), i < 6 ? 4106u : 100u, 2});
    for (int i = 0; i < 3; ++i) plan.push_back({r1->local_endpoint(), 0, 1});
    for (int i = 0; i < 5; ++i) {
      plan.push_back({(i % 2 ? r2 : r1)->local_endpoint(), 64, i % 2 ? 2 : 1});
    }
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<TxDatagram> tx;
    std::vector<uint32_t> seq(plan.size());
    uint32_t per_tag[3] = {};
    for (size_t k = 0; k < plan.size(); ++k) {
      seq[k] = per_tag[plan[k].tag]++;
      bufs.emplace_back(plan[k].size);
      for (uint32_t j = 0; j < plan[k].size; ++j) bufs[k][j] = Pattern(plan[k].tag, seq[k], j);
    }
    for (size_t k = 0; k < plan.size(); ++k) tx.push_back({bufs[k].data(), plan[k].size, plan[k].to});
    auto sent = a->SendBurst(tx);
    ASSERT_TRUE(sent.ok()) << sent.status();
    ASSERT_EQ(*sent, tx.size());
    EXPECT_EQ(a->stats().sent, tx.size());
    if (gso) {
      EXPECT_GT(a->stats().gso_messages, 0u);
      EXPECT_EQ(a->stats().send_syscalls, 1u);  // all messages in one sendmmsg
    } else {
      EXPECT_EQ(a->stats().gso_messages, 0u);
    }
    // Receive with a small batch so that GRO runs are handed out over several calls.
    for (auto* rcv : {r1.get(), r2.get()}) {
      const int tag = rcv == r1.get() ? 1 : 2;
      std::vector<size_t> expect;
      for (size_t k = 0; k < plan.size(); ++k) {
        if (plan[k].tag == tag) expect.push_back(k);
      }
      std::vector<uint8_t> storage(batch * 5000);
      std::vector<RxDatagram> rx(batch);
      size_t got = 0, lent = 0;
      const auto deadline = std::chrono::steady_clock::now() + 2s;
      while (got < expect.size() && std::chrono::steady_clock::now() < deadline) {
        PointAt(rx, storage.data(), 5000);
        auto n = nocopy ? rcv->RecvBurstNoCopy(rx, 100ms) : rcv->RecvBurst(rx, 100ms);
        ASSERT_TRUE(n.ok()) << n.status();
        // Checked after the call returned: datagrams handed out in place must not have been
        // overwritten by anything the same call received.
        for (size_t q = 0; q < *n; ++q, ++got) {
          const bool in_place = rx[q].data < storage.data() ||
                                rx[q].data >= storage.data() + storage.size();
          lent += in_place ? 1 : 0;
          ASSERT_LT(got, expect.size());
          const Plan& p = plan[expect[got]];
          ASSERT_EQ(rx[q].size, p.size) << "datagram " << got;
          EXPECT_FALSE(rx[q].truncated);
          EXPECT_EQ(rx[q].from, a->local_endpoint());
          for (uint32_t j = 0; j < p.size; ++j) {
            ASSERT_EQ(rx[q].data[j], Pattern(tag, seq[expect[got]], j)) << "datagram " << got;
          }
        }
      }
      EXPECT_EQ(got, expect.size());
      EXPECT_EQ(rcv->stats().received, expect.size());
      // In place exactly when asked for and GRO stages the datagrams.
      if (nocopy && gro) {
        EXPECT_EQ(lent, expect.size());
      } else {
        EXPECT_EQ(lent, 0u);
      }
      // Over loopback a GSO run reaches a GRO socket whole; without GRO the kernel splits it.
      if (gso && gro) {
        EXPECT_GT(rcv->stats().gro_messages, 0u);
      } else {
        EXPECT_EQ(rcv->stats().gro_messages, 0u);
      }
    }
  }
}

// A GRO run larger than the caller's buffers: each datagram is cut to the capacity and flagged,
// and the next one still starts at its own boundary.
TEST(UdpChannelTest, GroRunIntoSmallBuffersTruncatesEachDatagramSeparately) {
  auto a = MakeChannel();
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  SendAll(*a, b->local_endpoint(), 4, 10, 1000);
  std::vector<std::vector<uint8_t>> bufs(10, std::vector<uint8_t>(600));
  std::vector<RxDatagram> rx(10);
  for (size_t k = 0; k < rx.size(); ++k) rx[k] = Buffer(bufs[k].data(), 600);
  auto n = b->RecvBurst(rx, 1s);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, 10u);
  for (uint32_t k = 0; k < 10; ++k) {
    EXPECT_EQ(rx[k].size, 600u);
    EXPECT_TRUE(rx[k].truncated);
    EXPECT_EQ(rx[k].data[0], Pattern(4, k, 0));
    EXPECT_EQ(rx[k].data[599], Pattern(4, k, 599));
  }
  EXPECT_EQ(b->stats().truncated, 10u);
  // In place, the same: the caller's capacity bounds the size and longer datagrams are flagged.
  SendAll(*a, b->local_endpoint(), 5, 10, 1000);
  for (size_t k = 0; k < rx.size(); ++k) rx[k] = Buffer(bufs[k].data(), 600);
  n = b->RecvBurstNoCopy(rx, 1s);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, 10u);
  for (uint32_t k = 0; k < 10; ++k) {
    EXPECT_EQ(rx[k].size, 600u);
    EXPECT_TRUE(rx[k].truncated);
    EXPECT_NE(rx[k].data, bufs[k].data());  // handed out in place
    EXPECT_EQ(rx[k].data[0], Pattern(5, k, 0));
    EXPECT_EQ(rx[k].data[599], Pattern(5, k, 599));
  }
  EXPECT_EQ(b->stats().truncated, 20u);
}

// A path MTU below the datagram size makes the kernel refuse GSO (a segment would need IP
// fragmentation): the channel falls back to single datagrams for that size and loses nothing.
TEST(UdpChannelTest, GsoFallsBackWhenTheKernelRefusesASegmentSize) {
  bool skipped = false;
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      skipped = true;
      return;
    }
    // Bring up this namespace's own loopback with a 1500-byte MTU.
    const int s = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(s, 0);
    ifreq ifr{};
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ);
    ifr.ifr_mtu = 1500;
    ASSERT_EQ(ioctl(s, SIOCSIFMTU, &ifr), 0);
    ASSERT_EQ(ioctl(s, SIOCGIFFLAGS, &ifr), 0);
    ifr.ifr_flags |= IFF_UP;
    ASSERT_EQ(ioctl(s, SIOCSIFFLAGS, &ifr), 0);
    close(s);
    auto a = MakeChannel();
    auto b = MakeChannel();
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(a->gso_enabled());
    SendAll(*a, b->local_endpoint(), 5, 8, 4000);  // 4000 > 1500 - 28: IP fragments
    SendAll(*a, b->local_endpoint(), 6, 8, 1000);  // fits: still one GSO message
    EXPECT_EQ(a->stats().gso_fallbacks, 1u);
    EXPECT_EQ(a->stats().gso_messages, 1u);
    ReceiveAndCheck(*b, a->local_endpoint(), 5, 8, 4000, 4);
    ReceiveAndCheck(*b, a->local_endpoint(), 6, 8, 1000, 4);
  });
  t.join();
  if (skipped) GTEST_SKIP() << "unshare(CLONE_NEWNET) not permitted";
}

// Datagrams marked single_frame (for reference clients reading frames themselves) are never
// coalesced into a GSO message, even when they could be; unmarked ones next to them still are.
TEST(UdpChannelTest, SingleFrameDatagramsAreNeverCoalesced) {
  auto a = MakeChannel();
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  if (!a->gso_enabled()) GTEST_SKIP() << "no UDP GSO on this kernel";
  SendAll(*a, b->local_endpoint(), 7, 8, 1000, /*single_frame=*/true);
  EXPECT_EQ(a->stats().gso_messages, 0u);
  ReceiveAndCheck(*b, a->local_endpoint(), 7, 8, 1000, 8);
  SendAll(*a, b->local_endpoint(), 8, 8, 1000);
  EXPECT_EQ(a->stats().gso_messages, 1u);
  ReceiveAndCheck(*b, a->local_endpoint(), 8, 8, 1000, 8);
}

// ---- SO_REUSEPORT groups and cBPF steering ----

// Receives from every channel of `group` until `total` datagrams arrived in all (or 2 s
// passed); returns, per channel, the first payload byte of each datagram it got, in order.
std::vector<std::vector<uint8_t>> ReceiveFirstBytes(const std::vector<UdpChannel*>& group,
                                                    size_t total) {
  std::vector<std::vector<uint8_t>> got(group.size());
  std::vector<uint8_t> storage(64 * 2048);
  std::vector<RxDatagram> rx(64);
  size_t n = 0;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (n < total && std::chrono::steady_clock::now() < deadline) {
    for (size_t c = 0; c < group.size(); ++c) {
      PointAt(rx, storage.data(), 2048);
      auto r = group[c]->RecvBurst(rx, 1ms);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return got;
      for (size_t i = 0; i < *r; ++i, ++n) got[c].push_back(rx[i].size > 0 ? rx[i].data[0] : 0xFF);
    }
  }
  return got;
}

// Two channels in one reuseport group with a program that returns the first payload byte: each
// datagram lands on the socket the program names (the program sees the UDP payload at offset
// 0); an index past the group falls back to the hash and still lands on one of them.
TEST(UdpChannelTest, ReuseportCbpfSteersEachDatagramToTheSocketItNames) {
  for (const bool gro : {false, true}) {
    SCOPED_TRACE("receiver gro " + std::to_string(gro));
    UdpChannelOptions ro;
    ro.reuse_port = true;
    ro.gro = gro;
    auto r0 = MakeChannel(ro);
    ASSERT_NE(r0, nullptr);
    ro.local = r0->local_endpoint();  // the second socket joins the first one's port
    auto r1 = MakeChannel(ro);
    ASSERT_NE(r1, nullptr);
    EXPECT_EQ(r1->local_endpoint(), r0->local_endpoint());
    const sock_filter program[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),  // A = payload[0]
        BPF_STMT(BPF_RET | BPF_A, 0),           // socket index A
    };
    Status st = r1->AttachReuseportCbpf(program);  // any member attaches for the group
    ASSERT_TRUE(st.ok()) << st;

    UdpChannelOptions so;
    so.gso = false;  // one skb per datagram: steered one by one
    auto a = MakeChannel(so);
    ASSERT_NE(a, nullptr);
    // 0,1,0,1,... then 1,1,0,0,... then one with index 7 (past the group).
    std::vector<uint8_t> first;
    for (int i = 0; i < 20; ++i) first.push_back(uint8_t(i % 2));
    for (int i = 0; i < 20; ++i) first.push_back(uint8_t((i / 2) % 2));
    first.push_back(7);
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<TxDatagram> tx;
    for (uint8_t b : first) {
      bufs.emplace_back(100, uint8_t(0xAB));
      bufs.back()[0] = b;
    }
    for (auto& b : bufs) tx.push_back({b.data(), uint32_t(b.size()), r0->local_endpoint()});
    auto sent = a->SendBurst(tx);
    ASSERT_TRUE(sent.ok()) << sent.status();
    ASSERT_EQ(*sent, tx.size());
    auto got = ReceiveFirstBytes({r0.get(), r1.get()}, tx.size());
    size_t zeros = 0, ones = 0, sevens = 0;
    for (size_t c = 0; c < 2; ++c) {
      for (uint8_t b : got[c]) {
        if (b == 7) {
          ++sevens;  // hash fallback: either socket
          continue;
        }
        EXPECT_EQ(b, c) << "a datagram naming socket " << int(b) << " landed on socket " << c;
        (b == 0 ? zeros : ones) += 1;
      }
    }
    EXPECT_EQ(zeros, 20u);
    EXPECT_EQ(ones, 20u);
    EXPECT_EQ(sevens, 1u);
  }
}

// The caveat the header states: the kernel picks the socket once per skb, so a UDP GSO message
// goes whole to the socket its first datagram names (a sender that wants per-datagram steering
// must not put datagrams for different sockets in one GSO message).
TEST(UdpChannelTest, ReuseportCbpfSteersAGsoMessageByItsFirstDatagram) {
  UdpChannelOptions ro;
  ro.reuse_port = true;
  auto r0 = MakeChannel(ro);
  ASSERT_NE(r0, nullptr);
  ro.local = r0->local_endpoint();
  auto r1 = MakeChannel(ro);
  ASSERT_NE(r1, nullptr);
  const sock_filter program[] = {BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),
                                 BPF_STMT(BPF_RET | BPF_A, 0)};
  ASSERT_TRUE(r0->AttachReuseportCbpf(program).ok());
  auto a = MakeChannel();  // GSO on
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->gso_enabled());
  // One run of 8 same-size datagrams to one destination = one GSO message: 1,0,0,0,0,0,0,0.
  std::vector<std::vector<uint8_t>> bufs(8, std::vector<uint8_t>(500, 0));
  bufs[0][0] = 1;
  std::vector<TxDatagram> tx;
  for (auto& b : bufs) tx.push_back({b.data(), 500, r0->local_endpoint()});
  auto sent = a->SendBurst(tx);
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_EQ(*sent, 8u);
  EXPECT_EQ(a->stats().gso_messages, 1u);
  auto got = ReceiveFirstBytes({r0.get(), r1.get()}, 8);
  EXPECT_EQ(got[0].size(), 0u);
  ASSERT_EQ(got[1].size(), 8u);
  EXPECT_EQ(got[1][0], 1);
  EXPECT_GT(r1->stats().gro_messages, 0u);  // and GRO still takes the run whole
}

// Without reuse_port a second bind of the same port fails; with it on both sockets, it works.
// A program cannot be attached to a socket outside a group, nor an empty one.
TEST(UdpChannelTest, ReuseportNeedsTheOptionAndAttachRejectsBadUse) {
  auto plain = MakeChannel();
  ASSERT_NE(plain, nullptr);
  UdpChannelOptions same;
  same.local = plain->local_endpoint();
  same.reuse_port = true;
  auto dup = UdpChannel::Create(same);
  EXPECT_FALSE(dup.ok());
  const sock_filter program[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
  Status st = plain->AttachReuseportCbpf(program);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("SO_ATTACH_REUSEPORT_CBPF"));

  UdpChannelOptions ro;
  ro.reuse_port = true;
  auto r0 = MakeChannel(ro);
  ASSERT_NE(r0, nullptr);
  ro.local = r0->local_endpoint();
  auto r1 = UdpChannel::Create(ro);
  ASSERT_TRUE(r1.ok()) << r1.status();
  st = r0->AttachReuseportCbpf({});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("program length 0"));
}

TEST(UdpChannelTest, LocalIpv4ForLoopbackIsLoopback) {
  auto ip = LocalIpv4For({kLocalhost, 48864});
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(*ip, kLocalhost);
  auto ip2 = LocalIpv4For({0x7F000005, 0});  // any 127/8 address; port 0 is allowed here
  ASSERT_TRUE(ip2.ok()) << ip2.status();
  EXPECT_EQ(*ip2 >> 24, 127u);
}

}  // namespace
}  // namespace switchml::transport

namespace switchml::transport {
namespace {

// What the kernel dropped at the socket (a full receive buffer) is the channel's
// udp_socket_drops (switchml switch lists it; issue #18).
TEST(UdpChannelTest, TransportCountersReportTheSocketsDrops) {
  UdpChannelOptions no_gso;
  no_gso.gso = false;
  auto a = MakeChannel(no_gso);
  auto b = MakeChannel();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  using Counters = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(b->TransportCounters(), (Counters{{"udp_socket_drops", 0}}));
  const int small = 4096;  // the kernel's minimum, about two such datagrams
  ASSERT_EQ(setsockopt(b->native_handle(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
  SendAll(*a, b->local_endpoint(), 1, 64, kDatagramBytes);  // loopback: delivered at once
  const Counters after = b->TransportCounters();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].first, "udp_socket_drops");
  EXPECT_GE(after[0].second, 32u);  // most of the 64 found the buffer full
  EXPECT_LE(after[0].second, 64u);
}

}  // namespace
}  // namespace switchml::transport
