// switchml_ref_worker — one worker that behaves on the wire like the reference SwitchML DPDK
// client (one worker thread), for tests/netns/reference_clients_test.sh (issue #14).
//
//   switchml_ref_worker --controller 10.0.0.254:50099 --rank 0 --num-workers 3 --iface eth0
//       --count 8192 --type int32 --window 16 [--checksums reference|correct] [--timeout-s 30]
//
// What it does, as the reference client does it:
//  - registers through the reference session sequence (rendezvous::Bootstrap:
//    docs/protocol.md#session-sequence) with its rank, num_workers, the MAC and IPv4 address of
//    --iface and NO per-thread UDP ports ("reference mode": the switch answers to the source port
//    of the triggering packet), and none of our extension fields (agreed parameters 0); it
//    takes the switch's MAC, IPv4 and UDP port from the UdpSession reply;
//  - sends every request as a frame it builds itself on an AF_PACKET socket bound to --iface
//    (as DPDK's af_packet driver does): destination MAC = the MAC the switch advertised, source
//    MAC = the interface's, one datagram per frame, UDP source port --base-port + thread (4000),
//    destination = the switch's IPv4 and port. With --checksums reference (the default) the IPv4
//    header checksum is 0 and the UDP checksum holds only the pseudo-header sum (what the
//    reference leaves to a NIC offload it never enables); with --checksums correct both are
//    right (for a switch that reads kernel UDP sockets, which drop the others);
//  - streams one all-reduce of --count elements in packets of --elements-per-packet: packet p
//    goes to slot p % window, set (p / window) % 2 (docs/protocol.md#pool-index); packet
//    p + window is sent only after p's result came back; a packet whose result has not come
//    back after --retransmit-ms is sent again, byte for byte;
//  - with --hold-file F, sends its first window only once F exists (tests of a whole first burst);
//  - never answers ARP and needs no neighbour entry: the test turns ARP off on --iface. A UDP
//    socket bound to the worker's IPv4 and port with a drop-everything filter keeps the kernel
//    from answering the switch's datagrams with ICMP port unreachable (as a DPDK port would: the
//    kernel never sees them).
// Responses are read off the same interface (a second AF_PACKET socket, filter: IPv4 UDP to the
// worker's IPv4 and port). Each must come addressed to the interface's MAC, with a correct IPv4
// header checksum and a correct UDP checksum; frames the sending kernel left to checksum or
// segmentation offload (a veth pair passes them on unfinished, a NIC would finish them) are
// finished here as the NIC would and counted (checksum_offloaded, gso_frames). The socket reads
// a virtio_net_hdr before every frame (PACKET_VNET_HDR) to see those flags.
//
// Inputs: int32 element i of rank r is (7i + 13r) mod 1000 − 500. float32: k / 2^(6 + s) with
// k the int32 value and s = (block + r) mod 3, so that every block's largest exponent comes from
// a different rank; e0 of every packet is the block's local exponent (docs/protocol.md
// #float32-exponent-quantizer) and the response must carry the maximum over the ranks. All
// inputs are below 2^3 in magnitude, so every rank quantizes with the same power-of-two scale
// 2^(30 − 3 − ceil(log2 n)): quantization, sum and dequantization are exact. Every element of
// the result is compared exactly with the sum of all ranks' inputs.
//
// Registration only (tests/netns/neighbour_test.sh):
//   switchml_ref_worker --controller 10.0.0.254:50099 --rank 0 --num-workers 1 --register-only
//       --register-ipv4 127.0.0.1 --register-mac 02:00:00:00:00:01 [--iface eth0]
// runs the same session sequence with the given IPv4 and MAC (each defaults to --iface's),
// prints one JSON line (ok, the switch's advertised address) and exits: 0 if the switch
// accepted the registration, 1 with the switch's refusal on stderr and in "error".
// --register-mac also works with an all-reduce (tests/netns/raw_registered_macs_test.sh): the
// worker registers that MAC but sends from --iface's, and still accepts responses only at
// --iface's MAC (not_my_mac below).
//
// Output: one JSON line on stdout (ok, counters, the switch's advertised MAC, IPv4 and port);
// exit 0 only if every element is right, no response had a wrong checksum or another
// destination MAC, and everything finished within --timeout-s. Otherwise exit 1 with the reason
// on stderr (and ok = false in the JSON line). Needs CAP_NET_RAW (root).
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "rendezvous/session_client.h"
#include "switchml/status.h"
#include "transport/channel.h"
#include "transport/frame.h"
#include "wire/packet.h"

namespace {

using namespace switchml;
using transport::Endpoint;
using transport::MacAddress;
using Clock = std::chrono::steady_clock;

// struct virtio_net_hdr (linux/virtio_net.h, which C++ cannot include: a field is named
// `class`), as a packet socket with PACKET_VNET_HDR writes it before every frame, in host byte
// order.
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);
constexpr uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr uint8_t kVnetGsoNone = 0;    // VIRTIO_NET_HDR_GSO_NONE
constexpr uint8_t kVnetGsoUdpL4 = 5;   // VIRTIO_NET_HDR_GSO_UDP_L4

// Every input is below 2^kSharedExponent in magnitude (|k| <= 500 < 2^9, divided by >= 2^6).
constexpr int kSharedExponent = 3;
constexpr int kFloatMaxWorkers = 8;  // keeps every sum exactly representable as a float

struct Args {
  std::string controller;
  uint32_t rank = 0;
  uint32_t num_workers = 0;
  std::string iface;
  uint64_t count = 0;
  std::string type = "int32";
  uint32_t window = 16;
  uint32_t elements_per_packet = 64;
  std::string checksums = "reference";
  uint32_t base_port = 4000;
  uint32_t thread = 0;
  uint32_t job_number = 0;
  uint32_t retransmit_ms = 50;
  double timeout_s = 30;
  bool register_only = false;
  std::string register_ipv4;  // empty: --iface's
  std::string register_mac;   // empty: --iface's
  std::string hold_file;  // see --hold-file
};

// "02:00:00:00:00:01" -> the MAC; InvalidArgument naming the text otherwise.
StatusOr<MacAddress> ParseMac(const std::string& text) {
  MacAddress mac{};
  unsigned b[6];
  char extra;
  if (std::sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                  &extra) != 6) {
    return InvalidArgumentError("'" + text + "' is not a MAC (xx:xx:xx:xx:xx:xx)");
  }
  for (int i = 0; i < 6; ++i) mac[size_t(i)] = uint8_t(b[i]);
  return mac;
}

Status Errno(const std::string& what, int err) {
  return UnavailableError(what + ": " + std::strerror(err));
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

struct Interface {
  int index = 0;
  MacAddress mac{};
  uint32_t ipv4 = 0;  // host order
};

StatusOr<Interface> ReadInterface(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return InvalidArgumentError("--iface must name an interface (1.." + std::to_string(IFNAMSIZ - 1) +
                                " characters), got '" + name + "'");
  }
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Errno("socket(AF_INET)", errno);
  Interface out;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  if (ioctl(fd.get(), SIOCGIFINDEX, &ifr) != 0) {
    return NotFoundError("--iface " + name + ": " + std::strerror(errno));
  }
  out.index = ifr.ifr_ifindex;
  if (ioctl(fd.get(), SIOCGIFHWADDR, &ifr) != 0) return Errno("SIOCGIFHWADDR " + name, errno);
  if (ifr.ifr_hwaddr.sa_family != 1 /* ARPHRD_ETHER */) {
    return InvalidArgumentError("--iface " + name + " is not an Ethernet interface (type " +
                                std::to_string(ifr.ifr_hwaddr.sa_family) + ")");
  }
  std::memcpy(out.mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  ifr.ifr_addr.sa_family = AF_INET;
  if (ioctl(fd.get(), SIOCGIFADDR, &ifr) != 0) {
    return FailedPreconditionError("--iface " + name + " has no IPv4 address: " + std::strerror(errno));
  }
  out.ipv4 = ntohl(reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr)->sin_addr.s_addr);
  return out;
}

std::string Ipv4ToString(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xFF) + "." +
         std::to_string((ip >> 8) & 0xFF) + "." + std::to_string(ip & 0xFF);
}

uint64_t MacToUint(const MacAddress& m) {
  uint64_t v = 0;
  for (uint8_t b : m) v = v << 8 | b;
  return v;
}

MacAddress UintToMac(uint64_t v) {
  MacAddress m{};
  for (int i = 5; i >= 0; --i, v >>= 8) m[i] = uint8_t(v & 0xFF);
  return m;
}

Status AttachFilter(int fd, std::vector<sock_filter> prog, const std::string& where) {
  sock_fprog fp{static_cast<unsigned short>(prog.size()), prog.data()};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof fp) != 0) {
    return Errno("SO_ATTACH_FILTER " + where, errno);
  }
  return OkStatus();
}

// The frame sockets: tx sends whole frames; rx receives IPv4/UDP frames to `me`, each after a
// virtio_net_hdr; block holds `me` in the kernel's UDP table and drops what reaches it.
struct Sockets {
  Fd tx, rx, block;
};

StatusOr<Sockets> OpenSockets(const Interface& ifc, const std::string& name, Endpoint me) {
  Sockets s;
  s.tx = Fd(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));  // protocol 0: receives nothing
  if (s.tx.get() < 0) {
    if (errno == EPERM || errno == EACCES) {
      return PermissionDeniedError("AF_PACKET socket needs CAP_NET_RAW (run as root)");
    }
    return Errno("socket(AF_PACKET)", errno);
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_ifindex = ifc.index;
  sll.sll_protocol = 0;
  if (bind(s.tx.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    return Errno("bind AF_PACKET (send) to " + name, errno);
  }

  // Receive: created with protocol 0 so nothing queues before the filter is attached.
  s.rx = Fd(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  if (s.rx.get() < 0) return Errno("socket(AF_PACKET)", errno);
  int one = 1;
  if (setsockopt(s.rx.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
    return Errno("PACKET_VNET_HDR", errno);
  }
  // Room for a whole window of results arriving at once (a DPDK port's receive ring holds
  // thousands of frames); the default socket buffer holds about a hundred.
  const int rcvbuf = 16 << 20;
  if (setsockopt(s.rx.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0) {
    setsockopt(s.rx.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  }
  SWITCHML_RETURN_IF_ERROR(AttachFilter(
      s.rx.get(),
      {
          BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),                 // 0: EtherType
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 10),   // 1: -> 12
          BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23),                 // 2: IPv4 protocol
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 8), // 3
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 30),                 // 4: destination IPv4
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, me.ipv4, 0, 6),     // 5
          BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20),                 // 6: flags + fragment offset
          BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1FFF, 4, 0),     // 7: a later fragment -> 12
          BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14),                // 8: X = IHL * 4
          BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16),                 // 9: UDP destination port
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, me.port, 0, 1),     // 10
          BPF_STMT(BPF_RET | BPF_K, 0x40000),                     // 11: the whole frame
          BPF_STMT(BPF_RET | BPF_K, 0),                           // 12: not ours
      },
      "(receive)"));
  sll.sll_protocol = htons(ETH_P_IP);
  if (bind(s.rx.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    return Errno("bind AF_PACKET (receive) to " + name, errno);
  }

  s.block = Fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.block.get() < 0) return Errno("socket(AF_INET)", errno);
  SWITCHML_RETURN_IF_ERROR(AttachFilter(s.block.get(), {BPF_STMT(BPF_RET | BPF_K, 0)}, "(udp block)"));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(me.ipv4);
  sin.sin_port = htons(me.port);
  if (bind(s.block.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) {
    return Errno("bind udp " + me.ToString(), errno);
  }
  return s;
}

int32_t IntInput(uint64_t i, uint32_t rank) {
  return int32_t((i * 7 + uint64_t{rank} * 13) % 1000) - 500;
}

// float32 input: IntInput / 2^(6 + shift), shift = (block + rank) mod 3.
float FloatInput(uint64_t i, uint32_t rank, uint32_t elements_per_packet) {
  const uint32_t shift = uint32_t((i / elements_per_packet + rank) % 3);
  return std::ldexp(float(IntInput(i, rank)), -int(6 + shift));
}

// docs/protocol.md#float32-exponent-quantizer, step 1: m < 2^e for the block's largest |x|.
int LocalExponent(const float* x, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  const uint32_t bits = std::bit_cast<uint32_t>(m);
  const int biased = int((bits >> 23) & 0xFF);
  return biased == 0 ? -126 : biased - 126;
}

uint32_t CeilLog2(uint32_t n) { return n <= 1 ? 0 : 32 - uint32_t(std::countl_zero(n - 1)); }

void PutBigEndian32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}
uint32_t GetBigEndian32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

struct Counters {
  uint64_t sent = 0;              // frames sent, retransmissions included
  uint64_t retransmits = 0;
  uint64_t frames = 0;            // frames to our IPv4 and port
  uint64_t responses = 0;         // results accepted
  uint64_t duplicates = 0;        // decodable results for no packet in flight (after a retransmit)
  uint64_t undecodable = 0;       // datagrams wire::Decode rejects
  uint64_t malformed_frames = 0;  // structural frame errors
  uint64_t gso_frames = 0;        // frames carrying several datagrams (segmentation offload)
  uint64_t checksum_offloaded = 0;  // frames whose UDP checksum the sender left to offload
  uint64_t bad_ipv4_checksum = 0;
  uint64_t bad_udp_checksum = 0;
  uint64_t not_my_mac = 0;
  uint64_t exponent_mismatch = 0;
  uint64_t mismatches = 0;        // result elements that differ from the expected sum
};

class Worker {
 public:
  Worker(const Args& a, const Interface& ifc, Endpoint me, const control::SwitchInfo& sw,
         Sockets& sockets)
      : a_(a), ifc_(ifc), me_(me), sw_(sw), sock_(sockets) {
    E_ = a.elements_per_packet;
    packets_ = (a.count + E_ - 1) / E_;
    is_float_ = a.type == "float32";
    result_i_.assign(a.count, 0);
    result_f_.assign(a.count, 0.0f);
    scale_shift_ = 30 - kSharedExponent - int(CeilLog2(a.num_workers));
    slots_.resize(std::min<uint64_t>(a.window, std::max<uint64_t>(packets_, 1)));
  }

  Status Run(Clock::time_point deadline) {
    if (!a_.hold_file.empty()) SWITCHML_RETURN_IF_ERROR(Hold(deadline));
    for (uint64_t p = 0; p < packets_ && p < a_.window; ++p) SWITCHML_RETURN_IF_ERROR(Launch(p));
    if (!a_.hold_file.empty()) SWITCHML_RETURN_IF_ERROR(Touch(a_.hold_file + ".sent." + std::to_string(a_.rank)));
    std::vector<uint8_t> buf(sizeof(VnetHdr) + 70000);
    const auto rto = std::chrono::milliseconds(a_.retransmit_ms);
    while (c_.responses < packets_) {
      const auto now = Clock::now();
      if (now >= deadline) {
        return DeadlineExceededError("rank " + std::to_string(a_.rank) + ": " +
                                     std::to_string(c_.responses) + " of " + std::to_string(packets_) +
                                     " results came back before --timeout-s " +
                                     std::to_string(a_.timeout_s) + " (sent " + std::to_string(c_.sent) +
                                     " frames to " + sw_endpoint().ToString() + ", " +
                                     std::to_string(c_.frames) + " frames back)");
      }
      // Retransmit every slot whose packet is overdue; wait until the next one is due.
      auto next_due = deadline;
      for (Slot& s : slots_) {
        if (!s.busy) continue;
        if (now - s.sent_at >= rto) {
          SWITCHML_RETURN_IF_ERROR(Send(s.frame));
          ++c_.retransmits;
          s.sent_at = now;
        }
        next_due = std::min(next_due, s.sent_at + rto);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_due - now);
      pollfd pfd{sock_.rx.get(), POLLIN, 0};
      const int rc = ::poll(&pfd, 1, int(std::clamp<int64_t>(wait.count() + 1, 0, 1000)));
      if (rc < 0 && errno != EINTR) return Errno("poll", errno);
      while (true) {
        sockaddr_ll from{};
        socklen_t fl = sizeof from;
        const ssize_t n = ::recvfrom(sock_.rx.get(), buf.data(), buf.size(), MSG_DONTWAIT,
                                     reinterpret_cast<sockaddr*>(&from), &fl);
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          return Errno("recvfrom AF_PACKET", errno);
        }
        if (from.sll_pkttype == PACKET_OUTGOING) continue;
        SWITCHML_RETURN_IF_ERROR(OnFrame({buf.data(), size_t(n)}));
      }
    }
    return OkStatus();
  }

  // Compares every element with the sum of all ranks' inputs; returns the first difference.
  std::string Verify() {
    std::string first;
    for (uint64_t i = 0; i < a_.count; ++i) {
      bool ok;
      std::string got, want;
      if (is_float_) {
        double sum = 0;
        for (uint32_t r = 0; r < a_.num_workers; ++r) sum += FloatInput(i, r, E_);
        const float w = float(sum);
        ok = std::bit_cast<uint32_t>(w) == std::bit_cast<uint32_t>(result_f_[i]) ||
             (w == 0 && result_f_[i] == 0);
        got = std::to_string(result_f_[i]);
        want = std::to_string(w);
      } else {
        int64_t sum = 0;
        for (uint32_t r = 0; r < a_.num_workers; ++r) sum += IntInput(i, r);
        ok = result_i_[i] == int32_t(sum);
        got = std::to_string(result_i_[i]);
        want = std::to_string(sum);
      }
      if (!ok) {
        ++c_.mismatches;
        if (first.empty()) first = "element " + std::to_string(i) + " is " + got + ", want " + want;
      }
    }
    return first;
  }

  const Counters& counters() const { return c_; }
  uint64_t packets() const { return packets_; }
  Endpoint sw_endpoint() const { return {sw_.ipv4, uint16_t(sw_.udp_port)}; }

 private:
  struct Slot {
    bool busy = false;
    uint64_t packet = 0;
    uint8_t set = 0;
    std::vector<uint8_t> frame;
    Clock::time_point sent_at;
  };

  static Status Touch(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("create " + path, errno);
    ::close(fd);
    return OkStatus();
  }

  // --hold-file F: says "registered" (creates F.ready.<rank>) and waits until F exists.
  Status Hold(Clock::time_point deadline) {
    SWITCHML_RETURN_IF_ERROR(Touch(a_.hold_file + ".ready." + std::to_string(a_.rank)));
    while (::access(a_.hold_file.c_str(), F_OK) != 0) {
      if (Clock::now() >= deadline) {
        return DeadlineExceededError("--hold-file " + a_.hold_file + " did not appear before --timeout-s");
      }
      ::poll(nullptr, 0, 5);
    }
    return OkStatus();
  }

  // Builds packet p's frame (kept for retransmissions) and sends it.
  Status Launch(uint64_t p) {
    Slot& s = slots_[p % a_.window];
    s.busy = true;
    s.packet = p;
    s.set = uint8_t((p / a_.window) % 2);
    std::vector<uint8_t> dgram(wire::PacketBytes(E_), 0);
    wire::Header h;
    h.size_code = *wire::SizeCodeForElements(E_);
    h.job_number = uint8_t(a_.job_number);
    h.tsi = uint32_t(p);
    h.slot = uint16_t(p % a_.window);
    h.set = s.set;
    const uint64_t begin = p * E_, end = std::min<uint64_t>(a_.count, begin + E_);
    if (is_float_) {
      std::vector<float> x(end - begin);
      for (uint64_t i = begin; i < end; ++i) x[i - begin] = FloatInput(i, a_.rank, E_);
      h.exp0 = int8_t(LocalExponent(x.data(), x.size()));
      for (size_t k = 0; k < x.size(); ++k) {
        const int32_t q = int32_t(std::ldexp(double(x[k]), scale_shift_));  // exact
        PutBigEndian32(&dgram[wire::kPrefixBytes + 4 * k], uint32_t(q));
      }
    } else {
      for (uint64_t i = begin; i < end; ++i) {
        PutBigEndian32(&dgram[wire::kPrefixBytes + 4 * (i - begin)], uint32_t(IntInput(i, a_.rank)));
      }
    }
    wire::EncodePrefix(h, dgram.data());

    transport::UdpFrameHeader fh{.dst_mac = UintToMac(sw_.mac), .src_mac = ifc_.mac, .src = me_,
                                 .dst = sw_endpoint(), .ipv4_id = uint16_t(p)};
    s.frame.assign(transport::kUdpFrameOverhead + dgram.size(), 0);
    SWITCHML_ASSIGN_OR_RETURN(size_t len, transport::BuildUdpFrame(fh, dgram, s.frame));
    s.frame.resize(len);
    if (a_.checksums == "reference") {
      // IPv4 header checksum 0 (bytes 24..25); UDP checksum (40..41) = the pseudo-header sum,
      // not complemented: what an offloading sender leaves for the NIC.
      s.frame[24] = s.frame[25] = 0;
      uint8_t pseudo[12];
      std::memcpy(pseudo, &s.frame[26], 8);  // source and destination IPv4
      pseudo[8] = 0;
      pseudo[9] = IPPROTO_UDP;
      std::memcpy(&pseudo[10], &s.frame[38], 2);  // UDP length
      const uint16_t partial = transport::OnesComplementSum(pseudo, 0);
      s.frame[40] = uint8_t(partial >> 8);
      s.frame[41] = uint8_t(partial);
    }
    s.sent_at = Clock::now();
    return Send(s.frame);
  }

  Status Send(const std::vector<uint8_t>& frame) {
    while (true) {
      const ssize_t n = ::send(sock_.tx.get(), frame.data(), frame.size(), 0);
      if (n == ssize_t(frame.size())) break;
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOBUFS)) continue;
      return Errno("send AF_PACKET frame of " + std::to_string(frame.size()) + " bytes on " + a_.iface,
                   n < 0 ? errno : EMSGSIZE);
    }
    ++c_.sent;
    return OkStatus();
  }

  // One frame from the receive socket: virtio_net_hdr, then the Ethernet frame.
  Status OnFrame(std::span<const uint8_t> data) {
    if (data.size() < sizeof(VnetHdr)) return OkStatus();
    VnetHdr vh;
    std::memcpy(&vh, data.data(), sizeof vh);
    std::span<const uint8_t> frame = data.subspan(sizeof vh);
    transport::ParsedUdpFrame f = transport::ParseUdpFrame(frame);
    if (transport::IsStructuralError(f.verdict)) {
      ++c_.malformed_frames;
      return OkStatus();
    }
    if (f.dst.ipv4 != me_.ipv4 || f.dst.port != me_.port) return OkStatus();
    ++c_.frames;
    if (f.dst_mac != ifc_.mac) ++c_.not_my_mac;
    if (f.ipv4_checksum != transport::FrameVerdict::kOk) ++c_.bad_ipv4_checksum;
    if (vh.flags & kVnetNeedsCsum) {
      // Left to offload: the field must hold the pseudo-header sum a NIC would complete.
      ++c_.checksum_offloaded;
      if (f.udp_checksum != transport::FrameVerdict::kUdpChecksumPartial &&
          f.udp_checksum != transport::FrameVerdict::kOk) {
        ++c_.bad_udp_checksum;
      }
    } else if (f.udp_checksum != transport::FrameVerdict::kOk) {
      ++c_.bad_udp_checksum;
    }
    // Several datagrams in one frame (UDP segmentation offload): split them as the NIC would.
    size_t seg = f.payload.size();
    if (vh.gso_type != kVnetGsoNone) {
      ++c_.gso_frames;
      if (vh.gso_type != kVnetGsoUdpL4 || vh.gso_size == 0) {
        return InternalError("frame with gso_type " + std::to_string(vh.gso_type) + " gso_size " +
                             std::to_string(vh.gso_size) + ", not UDP segmentation");
      }
      seg = vh.gso_size;
    }
    for (size_t off = 0; off < f.payload.size(); off += seg) {
      SWITCHML_RETURN_IF_ERROR(OnDatagram(f.payload.subspan(off, std::min(seg, f.payload.size() - off))));
    }
    return OkStatus();
  }

  // Accepts a result if it is for the packet in flight on its slot (job number, slot, set, tsi
  // and size equal), writes it out and sends the slot's next packet.
  Status OnDatagram(std::span<const uint8_t> d) {
    wire::PacketView v;
    if (wire::Decode(d, &v) != wire::DecodeError::kOk) {
      ++c_.undecodable;
      return OkStatus();
    }
    const wire::Header& h = v.header;
    if (h.job_number != uint8_t(a_.job_number) || h.slot >= slots_.size() || v.num_elements != E_) {
      ++c_.duplicates;
      return OkStatus();
    }
    Slot& s = slots_[h.slot];
    if (!s.busy || h.tsi != uint32_t(s.packet) || h.set != s.set) {
      ++c_.duplicates;
      return OkStatus();
    }
    const uint64_t p = s.packet;
    const uint64_t begin = p * E_, end = std::min<uint64_t>(a_.count, begin + E_);
    if (is_float_) {
      // The switch returns the largest e0 of the round: the largest local exponent of the
      // block over all ranks.
      int want = -126;
      std::vector<float> x(end - begin);
      for (uint32_t r = 0; r < a_.num_workers; ++r) {
        for (uint64_t i = begin; i < end; ++i) x[i - begin] = FloatInput(i, r, E_);
        want = std::max(want, LocalExponent(x.data(), x.size()));
      }
      if (h.exp0 != want) ++c_.exponent_mismatch;
      for (uint64_t i = begin; i < end; ++i) {
        const int32_t q = int32_t(GetBigEndian32(v.payload + 4 * (i - begin)));
        result_f_[i] = float(std::ldexp(double(q), -scale_shift_));
      }
    } else {
      for (uint64_t i = begin; i < end; ++i) {
        result_i_[i] = int32_t(GetBigEndian32(v.payload + 4 * (i - begin)));
      }
    }
    ++c_.responses;
    s.busy = false;
    if (p + a_.window < packets_) return Launch(p + a_.window);
    return OkStatus();
  }

  const Args& a_;
  const Interface& ifc_;
  Endpoint me_;
  control::SwitchInfo sw_;
  Sockets& sock_;
  uint32_t E_ = 64;
  uint64_t packets_ = 0;
  bool is_float_ = false;
  int scale_shift_ = 0;
  std::vector<Slot> slots_;
  std::vector<int32_t> result_i_;
  std::vector<float> result_f_;
  Counters c_;
};

// Registration as the reference client does it (Broadcast of the session id, UdpSession,
// Barriers), with MAC and IPv4 as given, each controller call bounded by a quarter of
// --timeout-s (0.5 .. 10 s).
StatusOr<control::SwitchInfo> RegisterAsReference(const Args& a, const transport::MacAddress& mac, uint32_t ipv4) {
  const auto rpc_timeout = std::chrono::milliseconds(int64_t(std::clamp(a.timeout_s / 4, 0.5, 10.0) * 1000));
  SWITCHML_ASSIGN_OR_RETURN(auto client, rendezvous::SessionClient::Connect(a.controller, rpc_timeout));
  control::WorkerRegistration reg;
  reg.rank = a.rank;
  reg.num_workers = a.num_workers;
  reg.mac = MacToUint(mac);
  reg.ipv4 = ipv4;
  return rendezvous::Bootstrap(*client, reg);
}

// --register-only: the session sequence with the given (or --iface's) IPv4 and MAC, then exit.
template <typename Fail>
int RegisterOnly(const Args& a, nlohmann::json& out, const Fail& fail) {
  Interface ifc;
  if (!a.iface.empty()) {
    auto read = ReadInterface(a.iface);
    if (!read.ok()) return fail(read.status().ToString());
    ifc = *read;
  } else if (a.register_ipv4.empty() || a.register_mac.empty()) {
    return fail("--register-only needs --iface or both --register-ipv4 and --register-mac");
  }
  if (!a.register_ipv4.empty()) {
    auto ip = transport::ParseEndpoint(a.register_ipv4, 1);
    if (!ip.ok()) return fail("--register-ipv4: " + ip.status().message());
    ifc.ipv4 = ip->ipv4;
  }
  if (!a.register_mac.empty()) {
    auto mac = ParseMac(a.register_mac);
    if (!mac.ok()) return fail("--register-mac: " + mac.status().message());
    ifc.mac = *mac;
  }
  out["mac"] = transport::MacToString(ifc.mac);
  out["ipv4"] = Ipv4ToString(ifc.ipv4);
  auto info = RegisterAsReference(a, ifc.mac, ifc.ipv4);
  if (!info.ok()) return fail(info.status().ToString());
  out["switch_mac"] = transport::MacToString(UintToMac(info->mac));
  out["switch"] = Endpoint{info->ipv4, uint16_t(info->udp_port)}.ToString();
  out["ok"] = true;
  std::cout << out.dump() << std::endl;
  return 0;
}

int Main(int argc, char** argv) {
  Args a;
  CLI::App app{"One reference-style SwitchML worker (one worker thread) that builds its own "
               "frames on an AF_PACKET socket, as the reference DPDK client does; see the "
               "comment at the top of tests/netns/ref_worker.cc"};
  app.add_option("--controller", a.controller, "The switch's session service, HOST:PORT")->required();
  app.add_option("--rank", a.rank, "This worker's rank")->required();
  app.add_option("--num-workers", a.num_workers, "Workers in the session (1..256)")->required();
  app.add_option("--iface", a.iface, "Interface to send and receive frames on (its MAC and "
                 "IPv4 address are registered); required unless --register-only");
  app.add_option("--count", a.count, "Elements to all-reduce (1..2^26); required unless --register-only");
  app.add_flag("--register-only", a.register_only,
               "Register (the session sequence) and exit: 0 if the switch accepted it");
  app.add_option("--register-ipv4", a.register_ipv4, "With --register-only: the IPv4 to register (default: --iface's)");
  app.add_option("--register-mac", a.register_mac,
                 "The MAC to register (default: --iface's); without --register-only the frames still "
                 "come from --iface's MAC and responses must be addressed to it");
  app.add_option("--type", a.type, "int32 or float32")->check(CLI::IsMember({"int32", "float32"}))
      ->capture_default_str();
  app.add_option("--window", a.window, "Slots in flight (1..8192)")->capture_default_str();
  app.add_option("--elements-per-packet", a.elements_per_packet, "64, 256, 512 or 1024")
      ->capture_default_str();
  app.add_option("--checksums", a.checksums,
                 "reference: IPv4 checksum 0 and UDP checksum = pseudo-header sum; correct: both right")
      ->check(CLI::IsMember({"reference", "correct"}))->capture_default_str();
  app.add_option("--base-port", a.base_port, "UDP source port of worker thread 0")->capture_default_str();
  app.add_option("--thread", a.thread, "This worker thread's index (source port = base + thread)")
      ->capture_default_str();
  app.add_option("--job-number", a.job_number, "The packets' job_number byte (0..255)")->capture_default_str();
  app.add_option("--retransmit-ms", a.retransmit_ms, "Retransmission timeout (1..10000)")->capture_default_str();
  app.add_option("--timeout-s", a.timeout_s, "Deadline for everything, registration included")
      ->capture_default_str();
  app.add_option("--hold-file", a.hold_file,
                 "After registering, create FILE.ready.<rank> and wait until FILE exists before "
                 "sending the first window; create FILE.sent.<rank> once it is sent (a test can "
                 "stop the switch in between and have every worker's first window arrive at once)");
  CLI11_PARSE(app, argc, argv);

  const auto start = Clock::now();
  nlohmann::json out{{"ok", false}, {"rank", a.rank}, {"num_workers", a.num_workers},
                     {"type", a.type}, {"count", a.count}, {"checksums", a.checksums}};
  auto fail = [&](const std::string& m) {
    std::cerr << "switchml_ref_worker: error: rank " << a.rank << ": " << m << "\n";
    out["error"] = m;
    std::cout << out.dump() << std::endl;
    return 1;
  };
  if (a.num_workers == 0 || a.num_workers > 256 || a.rank >= a.num_workers) {
    return fail("--rank " + std::to_string(a.rank) + " must be below --num-workers " +
                std::to_string(a.num_workers) + " (1..256)");
  }
  if (a.type == "float32" && a.num_workers > kFloatMaxWorkers) {
    return fail("--type float32 is exact for at most " + std::to_string(kFloatMaxWorkers) +
                " workers, got --num-workers " + std::to_string(a.num_workers));
  }
  if (a.register_only) return RegisterOnly(a, out, fail);
  if (!a.register_ipv4.empty()) return fail("--register-ipv4 needs --register-only");
  // --register-mac: registers that MAC instead of --iface's; frames still go out from --iface's
  // MAC and responses must still come to it (tests of whom the switch answers).
  transport::MacAddress registered_mac{};
  if (!a.register_mac.empty()) {
    auto mac = ParseMac(a.register_mac);
    if (!mac.ok()) return fail("--register-mac: " + mac.status().message());
    registered_mac = *mac;
  }
  if (a.iface.empty()) return fail("--iface is required (unless --register-only)");
  if (a.count == 0 || a.count > (uint64_t{1} << 26)) {
    return fail("--count must be in [1, 2^26], got " + std::to_string(a.count));
  }
  if (!wire::SizeCodeForElements(a.elements_per_packet)) {
    return fail("--elements-per-packet must be 64, 256, 512 or 1024, got " +
                std::to_string(a.elements_per_packet));
  }
  if (a.window == 0 || a.window > 8192) return fail("--window must be in [1, 8192], got " + std::to_string(a.window));
  if (a.job_number > 255) return fail("--job-number must be in [0, 255], got " + std::to_string(a.job_number));
  if (a.retransmit_ms == 0 || a.retransmit_ms > 10000) {
    return fail("--retransmit-ms must be in [1, 10000], got " + std::to_string(a.retransmit_ms));
  }
  if (!(a.timeout_s > 0 && a.timeout_s <= 3600)) {
    return fail("--timeout-s must be in (0, 3600], got " + std::to_string(a.timeout_s));
  }
  if (a.base_port + a.thread == 0 || a.base_port + a.thread > 65535) {
    return fail("--base-port + --thread must be in [1, 65535], got " + std::to_string(a.base_port + a.thread));
  }
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(a.timeout_s));

  auto ifc = ReadInterface(a.iface);
  if (!ifc.ok()) return fail(ifc.status().ToString());
  const Endpoint me{ifc->ipv4, uint16_t(a.base_port + a.thread)};
  out["mac"] = transport::MacToString(ifc->mac);
  out["ipv4"] = Ipv4ToString(ifc->ipv4);
  auto sockets = OpenSockets(*ifc, a.iface, me);
  if (!sockets.ok()) return fail(sockets.status().ToString());

  if (a.register_mac.empty()) registered_mac = ifc->mac;
  out["registered_mac"] = transport::MacToString(registered_mac);
  auto info = RegisterAsReference(a, registered_mac, ifc->ipv4);
  if (!info.ok()) return fail(info.status().ToString());
  out["switch_mac"] = transport::MacToString(UintToMac(info->mac));
  out["switch"] = Endpoint{info->ipv4, uint16_t(info->udp_port)}.ToString();
  if (info->mac == 0 || info->ipv4 == 0 || info->udp_port == 0) {
    return fail("the switch advertised MAC " + out["switch_mac"].get<std::string>() + " and " +
                out["switch"].get<std::string>() + ": a reference client cannot send there");
  }
  if (Clock::now() >= deadline) return fail("registration ended after --timeout-s");

  Worker w(a, *ifc, me, *info, *sockets);
  Status st = w.Run(deadline);
  const std::string first_mismatch = st.ok() ? w.Verify() : "";
  const Counters& c = w.counters();
  out.update(nlohmann::json{{"packets", w.packets()},
                            {"sent", c.sent},
                            {"retransmits", c.retransmits},
                            {"frames", c.frames},
                            {"responses", c.responses},
                            {"duplicates", c.duplicates},
                            {"undecodable", c.undecodable},
                            {"malformed_frames", c.malformed_frames},
                            {"gso_frames", c.gso_frames},
                            {"checksum_offloaded", c.checksum_offloaded},
                            {"bad_ipv4_checksum", c.bad_ipv4_checksum},
                            {"bad_udp_checksum", c.bad_udp_checksum},
                            {"not_my_mac", c.not_my_mac},
                            {"exponent_mismatch", c.exponent_mismatch},
                            {"mismatches", c.mismatches},
                            {"seconds", std::chrono::duration<double>(Clock::now() - start).count()}});
  if (!st.ok()) return fail(st.ToString());
  if (!first_mismatch.empty()) {
    return fail(std::to_string(c.mismatches) + " of " + std::to_string(a.count) +
                " elements wrong; first: " + first_mismatch);
  }
  if (c.exponent_mismatch != 0) {
    return fail(std::to_string(c.exponent_mismatch) + " results carried an e0 other than the ranks' largest exponent");
  }
  if (c.bad_ipv4_checksum != 0 || c.bad_udp_checksum != 0) {
    return fail(std::to_string(c.bad_ipv4_checksum) + " response frames with a wrong IPv4 checksum and " +
                std::to_string(c.bad_udp_checksum) + " with a wrong UDP checksum");
  }
  if (c.not_my_mac != 0) {
    return fail(std::to_string(c.not_my_mac) + " response frames addressed to another MAC than " +
                transport::MacToString(ifc->mac));
  }
  out["ok"] = true;
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
