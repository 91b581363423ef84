// raw_rate — the raw-frame channel (src/transport/raw_channel.h) on one interface: a receive-rate
// measurement and an echo server for tests/netns/raw_channel_test.sh.
//
//   raw_rate recv --if veth0 --local 10.9.0.1:48864 [--ring v2|v3|udp] --seconds 3
//       Counts datagrams to the address for that long and prints one JSON line: datagrams,
//       datagrams/s, the process's CPU (user+system) per datagram, and the channel's counters.
//       --ring udp receives with the kernel's UdpChannel instead (the baseline).
//   raw_rate send --if veth1 --local 10.9.0.2:40000 --to 10.9.0.1:48864 --dst-mac MAC
//                 --size 1024 --seconds 3
//       Sends datagrams as fast as the device takes them (a RawChannel without the kernel UDP
//       block), then prints one JSON line with the number sent.
//   raw_rate echo --if veth0 --local 10.9.0.1:48864 --count N --timeout S [--refuse-bad-checksums]
//       Sends every datagram back to where it came from (SendBurst to rx.from) until N have been
//       echoed or S seconds passed, then prints the counters as one JSON line (exit 0 iff N were
//       echoed). Prints "ready" on stderr once the channel is open. --burst is the RecvBurst batch.
//   raw_rate udp-send --local 10.9.0.2:40000 --to 10.9.0.1:48864 --bursts B --burst K --size S
//                     --last-size L [--no-gso] [--timeout S]
//       The other side of `echo` through the kernel (transport::UdpChannel, UDP GSO on unless
//       --no-gso): B times, one SendBurst of K datagrams to one destination, K-1 of S bytes and
//       a last one of L bytes (L <= S; with GSO one super-frame), each with its own bytes; then
//       waits for the K echoes and checks that they come back in order, from the destination,
//       with the same sizes and bytes. Prints one JSON line (sent, echoes_ok, errors, the
//       sender's gso_messages); exit 0 iff every echo was right.
// Needs CAP_NET_RAW (root).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "transport/raw_channel.h"
#include "transport/udp_channel.h"

namespace {

using namespace switchml;
using namespace switchml::transport;
using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

nlohmann::json StatsJson(RawChannel& ch) {
  const RawChannelStats& s = ch.stats();
  nlohmann::json v;
  for (int i = 0; i < kNumFrameVerdicts; ++i) v[FrameVerdictName(static_cast<FrameVerdict>(i))] = s.verdicts[i];
  return {{"frames", s.frames},           {"received", s.received},
          {"truncated", s.truncated},     {"verdicts", v},
          {"refused_checksum", s.refused_checksum}, {"not_for_us", s.not_for_us},
          {"udp_checksum_offloaded", s.udp_checksum_offloaded},
          {"gso_frames_split", s.gso_frames_split}, {"gso_datagrams", s.gso_datagrams},
          {"copied_frames", s.copied_frames},
          {"ring_drops", s.ring_drops},   {"sent", s.sent},
          {"send_no_mac", s.send_no_mac}, {"send_eagain", s.send_eagain},
          {"local_mac", MacToString(ch.local_mac())}};
}

int Fail(const Status& s) {
  std::cerr << "raw_rate: " << s << "\n";
  return 1;
}

// Byte j of datagram i of burst b in `udp-send`: distinct per datagram and position.
uint8_t PatternByte(uint64_t b, uint32_t i, uint32_t j) {
  return static_cast<uint8_t>(b * 131 + i * 31 + j * 7 + (j >> 8));
}

// `udp-send`: bursts of K datagrams through a UdpChannel, each burst's echoes checked.
int UdpSend(const std::string& local_text, const std::string& to_text, uint64_t bursts,
            uint32_t k, uint32_t size, uint32_t last_size, bool gso, double timeout) {
  StatusOr<Endpoint> local = ParseEndpoint(local_text, 0);
  if (!local.ok()) return Fail(local.status());
  StatusOr<Endpoint> to = ParseEndpoint(to_text, 0);
  if (!to.ok()) return Fail(to.status());
  if (last_size > size) {
    return Fail(InvalidArgumentError("--last-size " + std::to_string(last_size) + " > --size " +
                                     std::to_string(size)));
  }
  UdpChannelOptions uo;
  uo.local = *local;
  uo.gso = gso;
  uo.max_burst = k;
  auto ch = UdpChannel::Create(uo);
  if (!ch.ok()) return Fail(ch.status());
  std::vector<uint8_t> out(size_t{k} * size), in(size_t{k} * 9100);
  std::vector<TxDatagram> tx(k);
  std::vector<RxDatagram> rx(k);
  PointAt(rx, in.data(), 9100);
  std::vector<std::string> errors;
  auto error = [&](std::string e) {
    if (errors.size() < 10) errors.push_back(std::move(e));
  };
  uint64_t sent = 0, echoes_ok = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  for (uint64_t b = 0; b < bursts && Clock::now() < deadline; ++b) {
    for (uint32_t i = 0; i < k; ++i) {
      const uint32_t n = i + 1 == k ? last_size : size;
      uint8_t* p = out.data() + size_t{i} * size;
      for (uint32_t j = 0; j < n; ++j) p[j] = PatternByte(b, i, j);
      tx[i] = TxDatagram{p, n, *to};
    }
    size_t done = 0;
    while (done < k && Clock::now() < deadline) {
      auto s = (*ch)->SendBurst(std::span<const TxDatagram>(tx).subspan(done));
      if (!s.ok()) return Fail(s.status());
      done += *s;
    }
    sent += done;
    // The echoes, in order.
    uint32_t got = 0;
    while (got < k && Clock::now() < deadline) {
      auto r = (*ch)->RecvBurst(std::span<RxDatagram>(rx).subspan(0, k - got),
                                std::chrono::milliseconds(50));
      if (!r.ok()) return Fail(r.status());
      for (size_t e = 0; e < *r; ++e, ++got) {
        const RxDatagram& d = rx[e];
        const TxDatagram& want = tx[got];
        const std::string what = "burst " + std::to_string(b) + " datagram " + std::to_string(got);
        if (!(d.from == *to)) {
          error(what + ": echo from " + d.from.ToString());
        } else if (d.size != want.size || d.truncated) {
          error(what + ": echo of " + std::to_string(d.size) + " bytes, sent " +
                std::to_string(want.size));
        } else if (memcmp(d.data, want.data, want.size) != 0) {
          error(what + ": echo's bytes differ");
        } else {
          ++echoes_ok;
        }
      }
    }
    if (got < k) error("burst " + std::to_string(b) + ": " + std::to_string(got) + " of " +
                       std::to_string(k) + " echoes before the timeout");
  }
  const UdpChannelStats& st = (*ch)->stats();
  nlohmann::json j{{"sent", sent},
                   {"echoes_ok", echoes_ok},
                   {"errors", errors},
                   {"gso_messages", st.gso_messages},
                   {"gso_fallbacks", st.gso_fallbacks}};
  std::cout << j.dump() << std::endl;
  return echoes_ok == bursts * k && errors.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"raw-frame channel: receive rate, sender, echo server"};
  app.require_subcommand(1);
  std::string iface, local_text, to_text, dst_mac_text, ring = "v2";
  double seconds = 3, timeout = 10;
  uint32_t size = 1024, burst = 32;
  uint64_t count = 0, bursts = 1;
  uint32_t last_size = 0;
  bool refuse = false, no_gso = false;
  auto* recv = app.add_subcommand("recv", "count received datagrams");
  auto* send = app.add_subcommand("send", "send datagrams as fast as possible");
  auto* echo = app.add_subcommand("echo", "echo datagrams back to their source");
  for (auto* sub : {recv, send, echo}) {
    sub->add_option("--if", iface, "interface")->required();
    sub->add_option("--local", local_text, "local IPv4:port")->required();
    sub->add_option("--burst", burst, "datagrams per call")->check(CLI::Range(1, 1024));
  }
  recv->add_option("--ring", ring, "v2, v3 or udp (kernel UdpChannel)")
      ->check(CLI::IsMember({"v2", "v3", "udp"}));
  recv->add_option("--seconds", seconds, "measurement time");
  send->add_option("--to", to_text, "destination IPv4:port")->required();
  send->add_option("--dst-mac", dst_mac_text, "destination MAC")->required();
  send->add_option("--size", size, "UDP payload bytes")->check(CLI::Range(1, 9000));
  send->add_option("--seconds", seconds, "sending time");
  echo->add_option("--ring", ring, "v2 or v3")->check(CLI::IsMember({"v2", "v3"}));
  echo->add_option("--count", count, "datagrams to echo before exiting")->required();
  echo->add_option("--timeout", timeout, "seconds before giving up");
  echo->add_flag("--refuse-bad-checksums", refuse, "drop frames with bad or partial checksums");
  auto* udp_send =
      app.add_subcommand("udp-send", "bursts through UdpChannel (GSO), echoes checked");
  udp_send->add_option("--local", local_text, "local IPv4:port")->required();
  udp_send->add_option("--to", to_text, "destination IPv4:port (an echo server)")->required();
  udp_send->add_option("--bursts", bursts, "bursts to send")->check(CLI::Range(1, 1000000));
  udp_send->add_option("--burst", burst, "datagrams per burst")->check(CLI::Range(1, 64));
  udp_send->add_option("--size", size, "bytes of each datagram but the last")
      ->check(CLI::Range(1, 9000));
  udp_send->add_option("--last-size", last_size, "bytes of the last datagram (default --size)")
      ->check(CLI::Range(1, 9000));
  udp_send->add_flag("--no-gso", no_gso, "send without UDP GSO");
  udp_send->add_option("--timeout", timeout, "seconds before giving up");
  CLI11_PARSE(app, argc, argv);
  if (udp_send->parsed()) {
    return UdpSend(local_text, to_text, bursts, burst, size, last_size == 0 ? size : last_size,
                   !no_gso, timeout);
  }

  StatusOr<Endpoint> local = ParseEndpoint(local_text, 0);
  if (!local.ok()) return Fail(local.status());
  RawChannelOptions opt;
  opt.interface = iface;
  opt.local = *local;
  opt.ring = ring == "v3" ? RawRing::kTpacketV3 : RawRing::kTpacketV2;
  opt.max_burst = burst;
  opt.accept_bad_checksums = !refuse;
  // The ring the measurements in docs/design.md were made with: 8 MiB of 9000-byte slots.
  opt.ring_frames = 912;

  std::vector<uint8_t> storage(size_t{burst} * 9100);
  std::vector<RxDatagram> rx(burst);
  PointAt(rx, storage.data(), 9100);

  if (recv->parsed()) {
    std::unique_ptr<Channel> ch;
    RawChannel* raw = nullptr;
    if (ring == "udp") {
      UdpChannelOptions uo;
      uo.local = *local;
      uo.gro = false;
      uo.max_burst = burst;
      auto u = UdpChannel::Create(uo);
      if (!u.ok()) return Fail(u.status());
      ch = std::move(u).value();
    } else {
      auto r = RawChannel::Create(opt);
      if (!r.ok()) return Fail(r.status());
      raw = r->get();
      ch = std::move(r).value();
    }
    std::cerr << "ready\n";
    // Start at the first datagram, measure for `seconds`.
    uint64_t got = 0;
    for (;;) {
      auto n = ch->RecvBurst(rx, std::chrono::seconds(10));
      if (!n.ok()) return Fail(n.status());
      if (*n == 0) return Fail(DeadlineExceededError("no datagram within 10 s on " + ch->Describe()));
      break;
    }
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      auto n = ch->RecvBurst(rx, std::chrono::milliseconds(10));
      if (!n.ok()) return Fail(n.status());
      got += *n;
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = CpuSeconds() - cpu0;
    nlohmann::json j{{"ring", ring},
                     {"datagrams", got},
                     {"seconds", wall},
                     {"datagrams_per_s", got / wall},
                     {"cpu_s", cpu},
                     {"cpu_ns_per_datagram", got > 0 ? cpu * 1e9 / got : 0.0}};
    if (raw != nullptr) j["stats"] = StatsJson(*raw);
    std::cout << j.dump() << std::endl;
    return 0;
  }

  if (send->parsed()) {
    opt.block_kernel_udp = false;
    opt.max_payload = std::max(size, 1u);
    auto ch = RawChannel::Create(opt);
    if (!ch.ok()) return Fail(ch.status());
    StatusOr<Endpoint> to = ParseEndpoint(to_text, 0);
    if (!to.ok()) return Fail(to.status());
    MacAddress mac{};
    unsigned b[6];
    if (std::sscanf(dst_mac_text.c_str(), "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6) {
      return Fail(InvalidArgumentError("--dst-mac '" + dst_mac_text + "' is not a MAC address"));
    }
    for (int i = 0; i < 6; ++i) mac[i] = static_cast<uint8_t>(b[i]);
    (*ch)->SetNeighbours({{to->ipv4, mac}});
    std::vector<uint8_t> payload(size, 0x5A);
    std::vector<TxDatagram> tx(burst, TxDatagram{payload.data(), size, *to});
    uint64_t sent = 0;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      auto n = (*ch)->SendBurst(tx);
      if (!n.ok()) return Fail(n.status());
      sent += *n;
    }
    std::cout << nlohmann::json{{"sent", sent}, {"stats", StatsJson(**ch)}}.dump() << std::endl;
    return 0;
  }

  // echo
  auto ch = RawChannel::Create(opt);
  if (!ch.ok()) return Fail(ch.status());
  std::cerr << "ready\n";
  uint64_t echoed = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  std::vector<TxDatagram> tx(burst);
  while (echoed < count && Clock::now() < deadline) {
    auto n = (*ch)->RecvBurst(rx, std::chrono::milliseconds(50));
    if (!n.ok()) return Fail(n.status());
    for (size_t i = 0; i < *n; ++i) tx[i] = TxDatagram{rx[i].data, rx[i].size, rx[i].from};
    size_t done = 0;
    while (done < *n && Clock::now() < deadline) {
      auto s = (*ch)->SendBurst(std::span<const TxDatagram>(tx).subspan(done, *n - done));
      if (!s.ok()) return Fail(s.status());
      done += *s;
    }
    echoed += done;
  }
  nlohmann::json j = StatsJson(**ch);
  j["echoed"] = echoed;
  std::cout << j.dump() << std::endl;
  return echoed >= count ? 0 : 1;
}
