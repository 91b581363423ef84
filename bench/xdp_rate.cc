// xdp_rate — AF_XDP receive rate and echo latency on one interface, for the comparison with the
// AF_PACKET ring of src/transport/raw_channel.h ("Raw-frame input" in docs/design.md; run by
// bench/run_raw_compare.sh). Optional: built only where libbpf, libxdp and clang are installed.
//
//   xdp_rate recv --if veth0 --local 10.9.0.1:48864 [--mode skb|drv] [--zerocopy] --seconds 3
//       Attaches xdp_filter.bpf.o (redirects only IPv4/UDP to that IP:port into the AF_XDP socket
//       of queue 0, passes everything else to the kernel), waits up to 10 s for the first
//       datagram, then counts datagrams for that long and prints one JSON line: datagrams,
//       datagrams/s, the process's CPU (user+system) per datagram, the socket's XDP_STATISTICS
//       and the program's counters. Each frame gets the work a channel would do: ParseUdpFrame
//       (checksum verdicts) and a copy of the payload into a caller's buffer. The receiver sleeps
//       in poll() whenever the RX ring is empty; --spin never sleeps (it takes a core).
//   xdp_rate echo --if veth0 --local 10.9.0.1:48864 [--mode skb|drv] --count N --timeout S
//       Sends every datagram back to its source through the socket's TX ring (BuildUdpFrame:
//       correct checksums) until N were echoed or S seconds passed; prints counters as one JSON
//       line (exit 0 iff N were echoed). Prints "ready" on stderr once the socket is bound.
//   xdp_rate ping --local 10.9.0.2:40001 --to 10.9.0.1:48864 [--count 300] [--interval-ms 2]
//       A kernel UDP socket sends one datagram every interval and waits (up to 1 s) for its echo;
//       prints the round-trip times (median, p90, p99, min, max in µs) as one JSON line. Works
//       against `xdp_rate echo` and `raw_rate echo` alike.
//
// --mode skb is generic XDP (any driver; an skb per frame, copied into the UMEM); drv is the
// driver's native XDP (veth has it; still a copy: veth has no zero-copy AF_XDP). The program is
// detached when the tool exits (and with the namespace, if it dies). Needs root.
#include <arpa/inet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/if_link.h>
#include <linux/if_xdp.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "transport/frame.h"

#ifndef SWITCHML_XDP_FILTER_OBJ
#define SWITCHML_XDP_FILTER_OBJ "xdp_filter.bpf.o"
#endif

namespace {

using namespace switchml;
using namespace switchml::transport;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kFrameSize = XSK_UMEM__DEFAULT_FRAME_SIZE;  // 4096
constexpr uint32_t kNumFrames = 8192;                          // 32 MiB of UMEM
constexpr uint32_t kRxFrames = kNumFrames / 2;                 // fill ring's share
constexpr uint32_t kRingSize = 4096;                           // rx, tx, fill, completion

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

// The XDP program, the UMEM and one AF_XDP socket on queue 0 of an interface. Fatal setup
// errors leave `error` set; the destructor detaches the program and frees everything.
class XdpPort {
 public:
  XdpPort(const std::string& iface, const Endpoint& local, const std::string& mode, bool zerocopy,
          const std::string& obj_path) {
    ifindex_ = if_nametoindex(iface.c_str());
    if (ifindex_ == 0) {
      error = Errno("interface '" + iface + "'", errno);
      return;
    }
    xdp_flags_ = mode == "drv" ? XDP_FLAGS_DRV_MODE : XDP_FLAGS_SKB_MODE;
    obj_ = bpf_object__open_file(obj_path.c_str(), nullptr);
    if (obj_ == nullptr) {
      error = Errno("opening BPF object '" + obj_path + "'", errno);
      return;
    }
    if (int e = bpf_object__load(obj_); e != 0) {
      error = Errno("loading BPF object '" + obj_path + "'", -e);
      return;
    }
    bpf_program* prog = bpf_object__find_program_by_name(obj_, "xdp_filter");
    config_fd_ = bpf_object__find_map_fd_by_name(obj_, "xdp_filter_config");
    xsks_fd_ = bpf_object__find_map_fd_by_name(obj_, "xdp_filter_xsks");
    counts_fd_ = bpf_object__find_map_fd_by_name(obj_, "xdp_filter_counts");
    if (prog == nullptr || config_fd_ < 0 || xsks_fd_ < 0 || counts_fd_ < 0) {
      error = "BPF object '" + obj_path + "' lacks program xdp_filter or its maps";
      return;
    }
    struct {
      uint32_t ipv4, port_pad;
    } cfg{htonl(local.ipv4), htons(local.port)};
    const uint32_t zero = 0;
    if (bpf_map_update_elem(config_fd_, &zero, &cfg, 0) != 0) {
      error = Errno("writing xdp_filter_config", errno);
      return;
    }
    if (int e = bpf_xdp_attach(ifindex_, bpf_program__fd(prog), xdp_flags_ | XDP_FLAGS_UPDATE_IF_NOEXIST,
                               nullptr);
        e != 0) {
      error = Errno("attaching XDP program to " + iface + " in " + mode + " mode", -e);
      return;
    }
    attached_ = true;

    umem_area_ = mmap(nullptr, size_t{kNumFrames} * kFrameSize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (umem_area_ == MAP_FAILED) {
      umem_area_ = nullptr;
      error = Errno("mmap of the UMEM", errno);
      return;
    }
    xsk_umem_config ucfg{kRingSize, kRingSize, kFrameSize, 0, 0};
    if (int e = xsk_umem__create(&umem_, umem_area_, size_t{kNumFrames} * kFrameSize, &fill_, &comp_, &ucfg);
        e != 0) {
      error = Errno("xsk_umem__create", -e);
      return;
    }
    xsk_socket_config scfg{};
    scfg.rx_size = kRingSize;
    scfg.tx_size = kRingSize;
    scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    scfg.xdp_flags = xdp_flags_;
    scfg.bind_flags = static_cast<uint16_t>((zerocopy ? XDP_ZEROCOPY : XDP_COPY) | XDP_USE_NEED_WAKEUP);
    if (int e = xsk_socket__create(&xsk_, iface.c_str(), 0, umem_, &rx_, &tx_, &scfg); e != 0) {
      error = Errno(std::string("binding AF_XDP socket to ") + iface + " queue 0 (" +
                        (zerocopy ? "zero-copy" : "copy") + ")",
                    -e);
      return;
    }
    fd_ = xsk_socket__fd(xsk_);
    if (bpf_map_update_elem(xsks_fd_, &zero, &fd_, 0) != 0) {
      error = Errno("inserting the socket into xdp_filter_xsks", errno);
      return;
    }
    // The fill ring gets the lower half of the frames, TX the upper half.
    uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&fill_, kRxFrames, &idx) != kRxFrames) {
      error = "fill ring reservation failed";
      return;
    }
    for (uint32_t i = 0; i < kRxFrames; ++i) *xsk_ring_prod__fill_addr(&fill_, idx + i) = uint64_t{i} * kFrameSize;
    xsk_ring_prod__submit(&fill_, kRxFrames);
    for (uint32_t i = kRxFrames; i < kNumFrames; ++i) tx_free_.push_back(uint64_t{i} * kFrameSize);
  }

  ~XdpPort() {
    if (xsk_ != nullptr) xsk_socket__delete(xsk_);
    if (umem_ != nullptr) xsk_umem__delete(umem_);
    if (umem_area_ != nullptr) munmap(umem_area_, size_t{kNumFrames} * kFrameSize);
    if (attached_) bpf_xdp_detach(ifindex_, xdp_flags_, nullptr);
    if (obj_ != nullptr) bpf_object__close(obj_);
  }

  // Calls f(frame, len) for up to `max` received frames (waiting up to timeout_ms for the first)
  // and gives their buffers back to the fill ring. Returns the number of frames, -1 on error.
  template <typename F>
  int Receive(uint32_t max, int timeout_ms, F&& f) {
    uint32_t idx = 0;
    uint32_t n = xsk_ring_cons__peek(&rx_, max, &idx);
    if (n == 0) {
      if (xsk_ring_prod__needs_wakeup(&fill_)) recvfrom(fd_, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
      if (timeout_ms == 0) return 0;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) < 0 && errno != EINTR) return -1;
      n = xsk_ring_cons__peek(&rx_, max, &idx);
      if (n == 0) return 0;
    }
    uint32_t fidx = 0;
    while (xsk_ring_prod__reserve(&fill_, n, &fidx) != n) {
      // Cannot happen (the fill ring holds every rx frame); kick the kernel and retry.
      recvfrom(fd_, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    }
    for (uint32_t i = 0; i < n; ++i) {
      const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, idx + i);
      f(static_cast<uint8_t*>(xsk_umem__get_data(umem_area_, d->addr)), d->len);
      *xsk_ring_prod__fill_addr(&fill_, fidx + i) = xsk_umem__extract_addr(d->addr);
    }
    xsk_ring_prod__submit(&fill_, n);
    xsk_ring_cons__release(&rx_, n);
    return static_cast<int>(n);
  }

  // A free TX buffer (nullptr if none), to be passed to Send.
  uint8_t* TxBuffer(uint64_t* addr) {
    Complete();
    if (tx_free_.empty()) return nullptr;
    *addr = tx_free_.back();
    tx_free_.pop_back();
    return static_cast<uint8_t*>(xsk_umem__get_data(umem_area_, *addr));
  }

  bool Send(uint64_t addr, uint32_t len) {
    uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&tx_, 1, &idx) != 1) {
      tx_free_.push_back(addr);
      return false;
    }
    *xsk_ring_prod__tx_desc(&tx_, idx) = xdp_desc{addr, len, 0};
    xsk_ring_prod__submit(&tx_, 1);
    // Copy mode transmits only when kicked.
    if (sendto(fd_, nullptr, 0, MSG_DONTWAIT, nullptr, 0) < 0 && errno != EAGAIN && errno != EBUSY &&
        errno != ENOBUFS) {
      return false;
    }
    return true;
  }

  void Complete() {
    uint32_t idx = 0;
    const uint32_t n = xsk_ring_cons__peek(&comp_, kRingSize, &idx);
    for (uint32_t i = 0; i < n; ++i) tx_free_.push_back(*xsk_ring_cons__comp_addr(&comp_, idx + i));
    xsk_ring_cons__release(&comp_, n);
  }

  nlohmann::json Stats() const {
    xdp_statistics s{};
    socklen_t len = sizeof(s);
    nlohmann::json j;
    if (fd_ >= 0 && getsockopt(fd_, SOL_XDP, XDP_STATISTICS, &s, &len) == 0) {
      j["rx_dropped"] = s.rx_dropped;
      j["rx_invalid_descs"] = s.rx_invalid_descs;
      j["rx_ring_full"] = s.rx_ring_full;
      j["rx_fill_ring_empty_descs"] = s.rx_fill_ring_empty_descs;
      j["tx_invalid_descs"] = s.tx_invalid_descs;
    }
    const int cpus = libbpf_num_possible_cpus();
    for (uint32_t slot = 0; slot < 2 && cpus > 0; ++slot) {
      std::vector<uint64_t> v(static_cast<size_t>(cpus));
      uint64_t sum = 0;
      if (bpf_map_lookup_elem(counts_fd_, &slot, v.data()) == 0) {
        for (uint64_t x : v) sum += x;
      }
      j[slot == 0 ? "prog_redirected" : "prog_passed"] = sum;
    }
    return j;
  }

  std::string error;

 private:
  unsigned ifindex_ = 0;
  uint32_t xdp_flags_ = 0;
  bool attached_ = false;
  bpf_object* obj_ = nullptr;
  int config_fd_ = -1, xsks_fd_ = -1, counts_fd_ = -1, fd_ = -1;
  void* umem_area_ = nullptr;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fill_{}, tx_{};
  xsk_ring_cons comp_{}, rx_{};
  std::vector<uint64_t> tx_free_;
};

int Fail(const std::string& s) {
  std::cerr << "xdp_rate: " << s << "\n";
  return 1;
}

uint64_t Key(const Endpoint& e) { return (uint64_t{e.ipv4} << 16) | e.port; }

int Ping(const Endpoint& local, const Endpoint& to, uint32_t count, double interval_ms, uint32_t size) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return Fail(Errno("socket", errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(local.ipv4);
  a.sin_port = htons(local.port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return Fail(Errno("bind", errno));
  sockaddr_in b{};
  b.sin_family = AF_INET;
  b.sin_addr.s_addr = htonl(to.ipv4);
  b.sin_port = htons(to.port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&b), sizeof(b)) != 0) return Fail(Errno("connect", errno));
  std::vector<uint8_t> out(std::max<uint32_t>(size, 8)), in(65536);
  std::vector<double> rtt_us;
  uint32_t lost = 0;
  auto next = Clock::now();
  for (uint32_t seq = 0; seq < count; ++seq) {
    std::this_thread::sleep_until(next);  // pacing only; replies are waited for with a deadline
    next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(interval_ms));
    std::memcpy(out.data(), &seq, sizeof(seq));
    const auto t0 = Clock::now();
    if (send(fd, out.data(), out.size(), 0) < 0) return Fail(Errno("send", errno));
    const auto deadline = t0 + std::chrono::seconds(1);
    bool got = false;
    while (!got) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      const ssize_t n = recv(fd, in.data(), in.size(), 0);
      uint32_t rseq = 0;
      if (n >= 4) std::memcpy(&rseq, in.data(), sizeof(rseq));
      if (n >= 4 && rseq == seq) {
        got = true;
        rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    }
    if (!got) ++lost;
  }
  close(fd);
  std::sort(rtt_us.begin(), rtt_us.end());
  auto pct = [&](double q) { return rtt_us.empty() ? 0.0 : rtt_us[static_cast<size_t>(q * (rtt_us.size() - 1))]; };
  std::cout << nlohmann::json{{"sent", count},           {"lost", lost},
                              {"rtt_us_median", pct(0.5)}, {"rtt_us_p90", pct(0.9)},
                              {"rtt_us_p99", pct(0.99)},   {"rtt_us_min", pct(0)},
                              {"rtt_us_max", pct(1)}}
                   .dump()
            << std::endl;
  return lost == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"AF_XDP receive rate, echo server and UDP ping"};
  app.require_subcommand(1);
  std::string iface, local_text, to_text, mode = "skb", obj = SWITCHML_XDP_FILTER_OBJ;
  double seconds = 3, timeout = 10, interval_ms = 2;
  uint32_t burst = 32, count = 300, size = 64;
  bool zerocopy = false, spin = false;
  auto* recv = app.add_subcommand("recv", "count received datagrams");
  auto* echo = app.add_subcommand("echo", "echo datagrams back to their source");
  auto* ping = app.add_subcommand("ping", "UDP round trips from a kernel socket to an echo server");
  for (auto* sub : {recv, echo}) {
    sub->add_option("--if", iface, "interface")->required();
    sub->add_option("--mode", mode, "skb (generic XDP) or drv (native)")->check(CLI::IsMember({"skb", "drv"}));
    sub->add_flag("--zerocopy", zerocopy, "bind with XDP_ZEROCOPY instead of XDP_COPY");
    sub->add_option("--bpf-obj", obj, "the compiled xdp_filter.bpf.o");
    sub->add_option("--burst", burst, "frames per ring pass")->check(CLI::Range(1, 1024));
  }
  for (auto* sub : {recv, echo, ping}) sub->add_option("--local", local_text, "local IPv4:port")->required();
  recv->add_option("--seconds", seconds, "measurement time");
  recv->add_flag("--spin", spin, "never sleep in poll() (busy-polls the RX ring)");
  echo->add_option("--count", count, "datagrams to echo before exiting")->required();
  echo->add_option("--timeout", timeout, "seconds before giving up");
  ping->add_option("--to", to_text, "echo server IPv4:port")->required();
  ping->add_option("--count", count, "round trips");
  ping->add_option("--interval-ms", interval_ms, "time between requests");
  ping->add_option("--size", size, "UDP payload bytes")->check(CLI::Range(8, 9000));
  CLI11_PARSE(app, argc, argv);

  StatusOr<Endpoint> local = ParseEndpoint(local_text, 0);
  if (!local.ok()) return Fail(local.status().ToString());
  if (ping->parsed()) {
    StatusOr<Endpoint> to = ParseEndpoint(to_text, 0);
    if (!to.ok()) return Fail(to.status().ToString());
    return Ping(*local, *to, count, interval_ms, size);
  }

  XdpPort port(iface, *local, mode, zerocopy, obj);
  if (!port.error.empty()) return Fail(port.error);
  std::cerr << "ready\n";
  std::vector<uint8_t> buffers(size_t{burst} * 9100);
  std::unordered_map<uint64_t, MacAddress> learned;
  uint64_t frames = 0, received = 0, not_for_us = 0, bad = 0;
  // What a channel would do per frame: parse with checksum verdicts, copy the payload out,
  // learn the sender's MAC.
  auto take = [&](const uint8_t* frame, uint32_t len, ParsedUdpFrame* p) {
    ++frames;
    *p = ParseUdpFrame({frame, len});
    if (IsStructuralError(p->verdict)) {
      ++bad;
      return false;
    }
    if (!(p->dst == *local)) {
      ++not_for_us;
      return false;
    }
    const size_t n = std::min<size_t>(p->payload.size(), 9100);
    std::memcpy(buffers.data() + (received % burst) * 9100, p->payload.data(), n);
    learned[Key(p->src)] = p->src_mac;
    ++received;
    return true;
  };

  if (recv->parsed()) {
    ParsedUdpFrame p;
    const auto first_deadline = Clock::now() + std::chrono::seconds(10);
    while (received == 0) {
      if (Clock::now() > first_deadline) return Fail("no datagram within 10 s on " + iface + " " + local_text);
      if (port.Receive(1, 10, [&](const uint8_t* f, uint32_t l) { take(f, l, &p); }) < 0) {
        return Fail(Errno("poll", errno));
      }
    }
    const uint64_t base = received;
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(seconds);
    while (Clock::now() < end) {
      if (port.Receive(burst, spin ? 0 : 10, [&](const uint8_t* f, uint32_t l) { take(f, l, &p); }) < 0) {
        return Fail(Errno("poll", errno));
      }
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = CpuSeconds() - cpu0;
    const uint64_t got = received - base;
    nlohmann::json j{{"ring", std::string("xdp-") + mode + (spin ? "-spin" : "")},
                     {"datagrams", got},
                     {"seconds", wall},
                     {"datagrams_per_s", got / wall},
                     {"cpu_s", cpu},
                     {"cpu_ns_per_datagram", got > 0 ? cpu * 1e9 / got : 0.0},
                     {"frames", frames},
                     {"not_for_us", not_for_us},
                     {"structural_errors", bad},
                     {"stats", port.Stats()}};
    std::cout << j.dump() << std::endl;
    return 0;
  }

  // echo
  uint64_t echoed = 0, tx_full = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout);
  while (echoed < count && Clock::now() < deadline) {
    const int n = port.Receive(burst, 50, [&](const uint8_t* f, uint32_t l) {
      ParsedUdpFrame p;
      if (!take(f, l, &p)) return;
      uint64_t addr = 0;
      uint8_t* out = port.TxBuffer(&addr);
      if (out == nullptr) {
        ++tx_full;
        return;
      }
      UdpFrameHeader h{.dst_mac = p.src_mac, .src_mac = p.dst_mac, .src = p.dst, .dst = p.src};
      StatusOr<size_t> len = BuildUdpFrame(h, p.payload, {out, kFrameSize});
      if (!len.ok() || !port.Send(addr, static_cast<uint32_t>(*len))) {
        ++tx_full;
        return;
      }
      ++echoed;
    });
    if (n < 0) return Fail(Errno("poll", errno));
  }
  port.Complete();
  nlohmann::json j{{"echoed", echoed}, {"received", received}, {"tx_failed", tx_full}, {"stats", port.Stats()}};
  std::cout << j.dump() << std::endl;
  return echoed >= count ? 0 : 1;
}
