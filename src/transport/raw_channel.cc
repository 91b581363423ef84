#include "transport/raw_channel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <endian.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "transport/netif.h"
#include "transport/posix_util.h"

namespace switchml::transport {
namespace {

using internal::ErrnoError;
using internal::ErrnoText;
using internal::FdCloser;

constexpr uint32_t kBlockBytes = 1u << 20;
constexpr uint32_t kMaxBurstLimit = 1024;
// Learned MACs kept before the tables are cleared (a bound against spoofed sources).
constexpr size_t kMaxLearned = 1u << 16;
constexpr auto kArpReadInterval = std::chrono::milliseconds(100);
// struct virtio_net_hdr, the header PACKET_VNET_HDR puts before every frame (ring and recv) and
// expects before every sent one (linux/virtio_net.h, which does not compile as C++: a field is
// named `class`). Its 16-bit fields are little-endian (virtio 1.0) on every host of ours.
struct VnetHeader {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
constexpr uint32_t kVnetHdrBytes = sizeof(VnetHeader);
static_assert(kVnetHdrBytes == 10);
constexpr uint8_t kVnetFlagNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM: checksum left to offload
constexpr uint8_t kVnetGsoUdpL4 = 5;       // VIRTIO_NET_HDR_GSO_UDP_L4: UDP GSO super-frame
constexpr uint8_t kVnetGsoEcn = 0x80;      // VIRTIO_NET_HDR_GSO_ECN (a flag bit of gso_type)
// TPACKET_V2 copy buffer: a virtio_net_hdr and the longest frame (an IPv4 datagram of 64 KiB).
constexpr size_t kCopyBufferBytes = kVnetHdrBytes + 14 + 65535;
// Socket buffer for the frames read whole (TPACKET_V2 only): a few dozen 64 KiB super-frames.
constexpr int kCopyQueueBytes = 4 << 20;

uint32_t AlignUp(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }

uint64_t EndpointKey(Endpoint e) { return uint64_t{e.ipv4} << 16 | e.port; }

// One ring slot: the tpacket header (`header`: tpacket2_hdr or tpacket3_hdr with the
// sockaddr_ll after it), room for the MAC header at 16-byte alignment, the virtio_net_hdr, then
// the IPv4/UDP datagram (with slack for IPv4 options).
uint32_t SlotBytes(uint32_t header, uint32_t max_payload) {
  return AlignUp(TPACKET_ALIGN(header + 16) + kVnetHdrBytes + 20 + 8 + max_payload + 60,
                 TPACKET_ALIGNMENT);
}
constexpr uint32_t kV2Header = TPACKET_ALIGN(sizeof(tpacket2_hdr)) + sizeof(sockaddr_ll);

// Classic BPF for a SOCK_RAW packet socket (offsets from the Ethernet header): accept IPv4 UDP
// to ip:port that is not a non-first fragment (those carry no UDP header and stay with the
// kernel); everything else is left to the kernel alone.
std::vector<sock_filter> UdpToFilter(Endpoint local) {
  return {
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),                 // 0: EtherType
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 10),   // 1: -> 12 drop
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23),                 // 2: IPv4 protocol
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 8), // 3
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 30),                 // 4: destination IP
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, local.ipv4, 0, 6),  // 5
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20),                 // 6: flags + fragment offset
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1FFF, 4, 0),     // 7: offset != 0 -> drop
      BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14),                // 8: X = IHL * 4
      BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16),                 // 9: UDP destination port
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, local.port, 0, 1),  // 10
      BPF_STMT(BPF_RET | BPF_K, 0x40000),                     // 11: accept (whole frame)
      BPF_STMT(BPF_RET | BPF_K, 0),                           // 12: not ours
  };
}

Status AttachFilter(int fd, std::vector<sock_filter> program, const std::string& where) {
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program.size());
  prog.filter = program.data();
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) != 0) {
    return ErrnoError("setsockopt SO_ATTACH_FILTER on " + where, errno);
  }
  return OkStatus();
}

}  // namespace

uint32_t RawChannel::RingSlotBytes(uint32_t max_payload) { return SlotBytes(kV2Header, max_payload); }

uint64_t RawChannel::RingBytes(uint32_t ring_frames, uint32_t max_payload) {
  const uint32_t slot = RingSlotBytes(max_payload);
  const uint64_t block = std::max(kBlockBytes, AlignUp(slot, 4096));
  const uint64_t per_block = block / slot;
  return (ring_frames + per_block - 1) / per_block * block;
}

StatusOr<std::unique_ptr<RawChannel>> RawChannel::Create(const RawChannelOptions& options) {
  if (options.interface.empty() || options.interface.size() >= IFNAMSIZ) {
    return InvalidArgumentError("raw channel: interface name '" + options.interface +
                                "' must have 1.." + std::to_string(IFNAMSIZ - 1) + " characters");
  }
  if (options.local.ipv4 == 0 || options.local.port == 0) {
    return InvalidArgumentError("raw channel on " + options.interface + ": local endpoint " +
                                options.local.ToString() + " needs an address and a port");
  }
  if (options.max_burst < 1 || options.max_burst > kMaxBurstLimit) {
    return InvalidArgumentError("max_burst must be in [1, " + std::to_string(kMaxBurstLimit) +
                                "], got " + std::to_string(options.max_burst));
  }
  if (options.max_payload < 1 || options.max_payload > kMaxUdpFramePayload) {
    return InvalidArgumentError("max_payload must be in [1, " +
                                std::to_string(kMaxUdpFramePayload) + "], got " +
                                std::to_string(options.max_payload));
  }
  if (options.block_timeout_ms < 1 || options.block_timeout_ms > 1000) {
    return InvalidArgumentError("block_timeout_ms must be in [1, 1000], got " +
                                std::to_string(options.block_timeout_ms));
  }
  if (options.ring_frames < 1 || options.ring_frames > kMaxRingFrames) {
    return InvalidArgumentError("ring_frames must be in [1, " + std::to_string(kMaxRingFrames) +
                                "], got " + std::to_string(options.ring_frames));
  }
  if (const uint64_t bytes = RingBytes(options.ring_frames, options.max_payload);
      bytes > kMaxRingBytes) {
    return InvalidArgumentError(
        "raw channel on " + options.interface + ": a receive ring of " +
        std::to_string(options.ring_frames) + " frames of " +
        std::to_string(RingSlotBytes(options.max_payload)) + " bytes needs " +
        std::to_string(bytes >> 20) + " MiB, more than the " +
        std::to_string(kMaxRingBytes >> 20) + " MiB a channel may pin; ask for fewer frames");
  }
  const std::string where = "raw " + options.interface + " " + options.local.ToString();

  std::unique_ptr<RawChannel> ch(new RawChannel());
  ch->interface_ = options.interface;
  ch->local_ = options.local;
  ch->accept_bad_checksums_ = options.accept_bad_checksums;
  ch->ring_kind_ = options.ring;
  ch->max_payload_ = options.max_payload;
  ch->max_burst_ = options.max_burst;

  // Protocol 0: the socket receives nothing until bound below, after filter and ring are set.
  ch->fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ch->fd_ < 0) {
    const int err = errno;
    if (err == EPERM || err == EACCES) {
      return PermissionDeniedError("socket(AF_PACKET) for " + where +
                                   " needs CAP_NET_RAW (run as root or grant the capability): " +
                                   ErrnoText(err));
    }
    return ErrnoError("socket(AF_PACKET) for " + where, err);
  }
  ch->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ch->wake_fd_ < 0) return ErrnoError("eventfd for " + where, errno);

  ifreq ifr{};
  memcpy(ifr.ifr_name, options.interface.data(), options.interface.size());
  if (ioctl(ch->fd_, SIOCGIFINDEX, &ifr) != 0) {
    if (errno == ENODEV) return NotFoundError("raw channel: no interface '" + options.interface + "'");
    return ErrnoError("SIOCGIFINDEX " + options.interface, errno);
  }
  ch->ifindex_ = ifr.ifr_ifindex;
  if (ioctl(ch->fd_, SIOCGIFHWADDR, &ifr) != 0) return ErrnoError("SIOCGIFHWADDR " + options.interface, errno);
  if (ifr.ifr_hwaddr.sa_family != 1 /* ARPHRD_ETHER */) {
    return InvalidArgumentError("raw channel: interface '" + options.interface +
                                "' is not Ethernet (hardware type " +
                                std::to_string(ifr.ifr_hwaddr.sa_family) + ")");
  }
  memcpy(ch->local_mac_.data(), ifr.ifr_hwaddr.sa_data, 6);
  if (ioctl(ch->fd_, SIOCGIFMTU, &ifr) != 0) return ErrnoError("SIOCGIFMTU " + options.interface, errno);
  ch->mtu_ = static_cast<uint32_t>(ifr.ifr_mtu);

  SWITCHML_RETURN_IF_ERROR(AttachFilter(ch->fd_, UdpToFilter(options.local), where));

  // A virtio_net_hdr before each frame (says which are UDP GSO super-frames); set before the
  // ring, as the kernel requires.
  const int one = 1;
  if (setsockopt(ch->fd_, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0) {
    return ErrnoError("setsockopt PACKET_VNET_HDR on " + where, errno);
  }
  if (options.ring == RawRing::kTpacketV2) {
    // A frame longer than a slot is also queued whole on the socket (TP_STATUS_COPY).
    if (setsockopt(ch->fd_, SOL_PACKET, PACKET_COPY_THRESH, &one, sizeof(one)) != 0) {
      return ErrnoError("setsockopt PACKET_COPY_THRESH on " + where, errno);
    }
    // Above net.core.rmem_max only with CAP_NET_ADMIN; otherwise capped (a hint either way).
    if (setsockopt(ch->fd_, SOL_SOCKET, SO_RCVBUFFORCE, &kCopyQueueBytes, sizeof(int)) != 0) {
      setsockopt(ch->fd_, SOL_SOCKET, SO_RCVBUF, &kCopyQueueBytes, sizeof(int));
    }
    ch->copy_capacity_ = kCopyBufferBytes;
    ch->copy_buf_ = std::make_unique_for_overwrite<uint8_t[]>(kCopyBufferBytes);
  }

  // Receive ring.
  const int version = options.ring == RawRing::kTpacketV2 ? TPACKET_V2 : TPACKET_V3;
  if (setsockopt(ch->fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) != 0) {
    return ErrnoError("setsockopt PACKET_VERSION on " + where, errno);
  }
  const uint32_t header = options.ring == RawRing::kTpacketV2
                              ? TPACKET_ALIGN(sizeof(tpacket2_hdr)) + sizeof(sockaddr_ll)
                              : TPACKET_ALIGN(sizeof(tpacket3_hdr)) + sizeof(sockaddr_ll);
  ch->frame_bytes_ = SlotBytes(header, options.max_payload);
  ch->block_bytes_ = std::max(kBlockBytes, AlignUp(ch->frame_bytes_, 4096));
  ch->frames_per_block_ = ch->block_bytes_ / ch->frame_bytes_;
  ch->ring_blocks_ = (options.ring_frames + ch->frames_per_block_ - 1) / ch->frames_per_block_;
  if (options.ring == RawRing::kTpacketV2) {
    tpacket_req req{};
    req.tp_block_size = ch->block_bytes_;
    req.tp_block_nr = ch->ring_blocks_;
    req.tp_frame_size = ch->frame_bytes_;
    req.tp_frame_nr = ch->frames_per_block_ * ch->ring_blocks_;
    if (setsockopt(ch->fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) != 0) {
      return ErrnoError("setsockopt PACKET_RX_RING (TPACKET_V2, " +
                            std::to_string(req.tp_frame_nr) + " frames of " +
                            std::to_string(req.tp_frame_size) + " bytes) on " + where, errno);
    }
  } else {
    tpacket_req3 req{};
    req.tp_block_size = ch->block_bytes_;
    req.tp_block_nr = ch->ring_blocks_;
    req.tp_frame_size = ch->frame_bytes_;
    req.tp_frame_nr = ch->frames_per_block_ * ch->ring_blocks_;
    req.tp_retire_blk_tov = options.block_timeout_ms;
    if (setsockopt(ch->fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) != 0) {
      return ErrnoError("setsockopt PACKET_RX_RING (TPACKET_V3, " +
                            std::to_string(req.tp_block_nr) + " blocks of " +
                            std::to_string(req.tp_block_size) + " bytes) on " + where, errno);
    }
  }
  ch->ring_size_ = size_t{ch->block_bytes_} * ch->ring_blocks_;
  void* ring = mmap(nullptr, ch->ring_size_, PROT_READ | PROT_WRITE, MAP_SHARED, ch->fd_, 0);
  if (ring == MAP_FAILED) return ErrnoError("mmap of the receive ring on " + where, errno);
  ch->ring_ = static_cast<uint8_t*>(ring);

  // The kernel's UDP socket that swallows these datagrams (no ICMP port unreachable). Its filter
  // is set before bind, so not one datagram is ever queued on it.
  if (options.block_kernel_udp) {
    ch->block_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (ch->block_fd_ < 0) return ErrnoError("socket(AF_INET) for " + where, errno);
    SWITCHML_RETURN_IF_ERROR(
        AttachFilter(ch->block_fd_, {BPF_STMT(BPF_RET | BPF_K, 0)}, "udp " + options.local.ToString()));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(options.local.port);
    sa.sin_addr.s_addr = htonl(options.local.ipv4);
    if (bind(ch->block_fd_, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
      return ErrnoError("bind " + options.local.ToString() +
                            " (the kernel UDP socket that keeps the kernel off these datagrams)",
                        errno);
    }
  }

  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = ch->ifindex_;
  if (bind(ch->fd_, reinterpret_cast<const sockaddr*>(&ll), sizeof(ll)) != 0) {
    return ErrnoError("bind AF_PACKET socket to " + options.interface, errno);
  }

  // Send scratch: each frame behind a zero virtio_net_hdr (no checksum or segmentation offload).
  ch->tx_frame_capacity_ = AlignUp(kVnetHdrBytes + kUdpFrameOverhead + options.max_payload, 64);
  ch->tx_frames_ = std::make_unique_for_overwrite<uint8_t[]>(ch->tx_frame_capacity_ * ch->max_burst_);
  for (uint32_t i = 0; i < ch->max_burst_; ++i) {
    memset(ch->tx_frames_.get() + i * ch->tx_frame_capacity_, 0, kVnetHdrBytes);
  }
  ch->tx_msgs_.reset(new mmsghdr[ch->max_burst_]());
  ch->tx_iov_.reset(new iovec[ch->max_burst_]());
  ch->tx_index_.reset(new size_t[ch->max_burst_]());
  for (uint32_t i = 0; i < ch->max_burst_; ++i) {
    ch->tx_msgs_[i].msg_hdr.msg_iov = &ch->tx_iov_[i];
    ch->tx_msgs_[i].msg_hdr.msg_iovlen = 1;
    ch->tx_iov_[i].iov_base = ch->tx_frames_.get() + i * ch->tx_frame_capacity_;
  }
  return ch;
}

RawChannel::~RawChannel() {
  if (ring_ != nullptr) munmap(ring_, ring_size_);
  if (fd_ >= 0) close(fd_);
  if (block_fd_ >= 0) close(block_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string RawChannel::Describe() const { return "raw " + interface_ + " " + local_.ToString(); }

void RawChannel::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = write(wake_fd_, &one, sizeof(one));
}

void RawChannel::SetNeighbours(std::vector<std::pair<uint32_t, MacAddress>> neighbours) {
  std::lock_guard<std::mutex> lock(neighbours_mu_);
  pending_neighbours_ = std::move(neighbours);
  neighbours_posted_.store(true, std::memory_order_release);
}

const RawChannelStats& RawChannel::stats() {
  tpacket_stats_v3 st{};  // the V2 layout is its prefix
  socklen_t len = sizeof(st);
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) stats_.ring_drops += st.tp_drops;
  return stats_;
}

std::vector<std::pair<std::string, uint64_t>> RawChannel::TransportCounters() {
  const RawChannelStats& st = stats();
  std::vector<std::pair<std::string, uint64_t>> out = {
      {"raw_frames", st.frames},
      {"raw_received", st.received},
      {"raw_truncated", st.truncated},
      {"raw_udp_checksum_offloaded", st.udp_checksum_offloaded},
      {"raw_refused_checksum", st.refused_checksum},
      {"raw_not_for_us", st.not_for_us},
      {"raw_ring_drops", st.ring_drops},
      {"raw_sent", st.sent},
      {"raw_send_no_mac", st.send_no_mac},
      {"raw_send_eagain", st.send_eagain},
      {"raw_gso_frames_split", st.gso_frames_split},
      {"raw_gso_datagrams", st.gso_datagrams},
      {"raw_copied_frames", st.copied_frames}};
  for (int v = 0; v < kNumFrameVerdicts; ++v) {
    out.emplace_back(std::string("raw_frames_") + FrameVerdictName(FrameVerdict(v)), st.verdicts[v]);
  }
  return out;
}

bool RawChannel::NextFrame(RingFrame* out) {
  if (ring_kind_ == RawRing::kTpacketV2) {
    const uint32_t block = slot_ / frames_per_block_;
    const uint32_t index = slot_ % frames_per_block_;
    uint8_t* base = ring_ + size_t{block} * block_bytes_ + size_t{index} * frame_bytes_;
    auto* h = reinterpret_cast<tpacket2_hdr*>(base);
    if ((__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) == 0) return false;
    const auto* sll = reinterpret_cast<const sockaddr_ll*>(base + TPACKET_ALIGN(sizeof(tpacket2_hdr)));
    *out = {base + h->tp_mac, h->tp_snaplen, sll->sll_pkttype,
            (h->tp_status & TP_STATUS_CSUMNOTREADY) != 0, (h->tp_status & TP_STATUS_COPY) != 0};
    return true;
  }
  for (;;) {
    auto* bd = reinterpret_cast<tpacket_block_desc*>(ring_ + size_t{block_} * block_bytes_);
    if (!in_block_) {
      if ((__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) == 0) {
        return false;
      }
      in_block_ = true;
      block_left_ = bd->hdr.bh1.num_pkts;
      block_offset_ = bd->hdr.bh1.offset_to_first_pkt;
    }
    if (block_left_ == 0) {  // an empty block (retired by the timer) or one fully read
      __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      in_block_ = false;
      block_ = (block_ + 1) % ring_blocks_;
      continue;
    }
    uint8_t* base = reinterpret_cast<uint8_t*>(bd) + block_offset_;
    auto* h = reinterpret_cast<tpacket3_hdr*>(base);
    const auto* sll = reinterpret_cast<const sockaddr_ll*>(base + TPACKET_ALIGN(sizeof(tpacket3_hdr)));
    *out = {base + h->tp_mac, h->tp_snaplen, sll->sll_pkttype,
            (h->tp_status & TP_STATUS_CSUMNOTREADY) != 0, false};
    return true;
  }
}

void RawChannel::ReleaseFrame() {
  if (ring_kind_ == RawRing::kTpacketV2) {
    const uint32_t block = slot_ / frames_per_block_;
    const uint32_t index = slot_ % frames_per_block_;
    auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t{block} * block_bytes_ +
                                              size_t{index} * frame_bytes_);
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    slot_ = (slot_ + 1) % (frames_per_block_ * ring_blocks_);
    return;
  }
  auto* bd = reinterpret_cast<tpacket_block_desc*>(ring_ + size_t{block_} * block_bytes_);
  auto* h = reinterpret_cast<tpacket3_hdr*>(reinterpret_cast<uint8_t*>(bd) + block_offset_);
  block_offset_ += h->tp_next_offset;
  if (--block_left_ == 0) {
    __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    in_block_ = false;
    block_ = (block_ + 1) % ring_blocks_;
  }
}

bool RawChannel::TakeFrame(const RingFrame& f) {
  ++stats_.frames;
  // The frame and the virtio_net_hdr before it: in the ring, or (TP_STATUS_COPY: too long for
  // the slot) the next frame on the socket's queue, which the kernel queued in ring order.
  const uint8_t* frame = f.data;
  uint32_t len = f.len;
  const uint8_t* vnet = f.data - kVnetHdrBytes;
  if (f.copied) {
    const ssize_t r = recv(fd_, copy_buf_.get(), copy_capacity_, MSG_DONTWAIT);
    if (r >= static_cast<ssize_t>(kVnetHdrBytes)) {
      ++stats_.copied_frames;
      vnet = copy_buf_.get();
      frame = vnet + kVnetHdrBytes;
      len = static_cast<uint32_t>(r) - kVnetHdrBytes;
    }  // else: the cut ring copy, which parses as truncated
  }
  VnetHeader vh;
  memcpy(&vh, vnet, sizeof(vh));
  const bool gso_udp = (vh.gso_type & ~kVnetGsoEcn) == kVnetGsoUdpL4;
  const uint32_t gso_size = le16toh(vh.gso_size);

  ParsedUdpFrame p = ParseUdpFrame({frame, len});
  if ((f.csum_not_ready || (vh.flags & kVnetFlagNeedsCsum) != 0) &&
      p.udp_checksum == FrameVerdict::kUdpChecksumPartial) {
    // A sender on this host (over veth) whose UDP checksum the kernel left to offload: the
    // kernel vouches for the data (TP_STATUS_CSUMNOTREADY, VIRTIO_NET_HDR_F_NEEDS_CSUM), so it
    // counts as correct.
    ++stats_.udp_checksum_offloaded;
    p.udp_checksum = FrameVerdict::kOk;
    if (p.verdict == FrameVerdict::kUdpChecksumPartial) p.verdict = FrameVerdict::kOk;
  }
  if (IsStructuralError(p.verdict)) {
    ++stats_.verdicts[static_cast<int>(p.verdict)];
    return false;
  }
  if (f.pkttype == PACKET_OTHERHOST || f.pkttype == PACKET_OUTGOING || !(p.dst == local_)) {
    ++stats_.not_for_us;
    return false;
  }
  if (p.verdict == FrameVerdict::kOk) ++stats_.verdicts[0];
  if (p.ipv4_checksum != FrameVerdict::kOk) ++stats_.verdicts[static_cast<int>(p.ipv4_checksum)];
  if (p.udp_checksum != FrameVerdict::kOk) ++stats_.verdicts[static_cast<int>(p.udp_checksum)];
  const bool bad = p.ipv4_checksum != FrameVerdict::kOk ||
                   (p.udp_checksum != FrameVerdict::kOk &&
                    p.udp_checksum != FrameVerdict::kUdpChecksumZero);
  if (bad && !accept_bad_checksums_) {
    ++stats_.refused_checksum;
    return false;
  }
  const uint32_t size = static_cast<uint32_t>(p.payload.size());
  pending_data_ = p.payload.data();
  pending_bytes_ = size;
  pending_from_ = p.src;
  if (gso_udp && gso_size > 0 && size > gso_size) {
    // A UDP GSO super-frame: the datagrams the device would have cut it into.
    pending_segment_ = gso_size;
    pending_count_ = (size + gso_size - 1) / gso_size;
    ++stats_.gso_frames_split;
    stats_.gso_datagrams += pending_count_;
  } else {
    pending_segment_ = size;
    pending_count_ = 1;
  }
  // Learn where this endpoint's frames come from (the last hop's MAC).
  if (mac_by_endpoint_.size() >= kMaxLearned) mac_by_endpoint_.clear();
  if (mac_by_ip_.size() >= kMaxLearned) mac_by_ip_.clear();
  mac_by_endpoint_[EndpointKey(p.src)] = p.src_mac;
  mac_by_ip_[p.src.ipv4] = p.src_mac;
  return true;
}

size_t RawChannel::Drain(std::span<RxDatagram> batch) {
  size_t n = 0;
  while (n < batch.size()) {
    if (pending_count_ == 0) {  // nothing left of the last frame: take the next one
      RingFrame f;
      if (!NextFrame(&f)) break;
      if (!TakeFrame(f)) {
        ReleaseFrame();
        continue;
      }
    }
    // Hand out the taken frame's datagrams (one, or a super-frame's segments) while room lasts;
    // the ring frame is released once the last one is out.
    for (; pending_count_ > 0 && n < batch.size(); --pending_count_) {
      const uint32_t size = std::min(pending_segment_, pending_bytes_);
      RxDatagram& d = batch[n++];
      d.size = std::min(size, d.capacity);
      d.truncated = size > d.capacity;
      if (d.size > 0) memcpy(d.data, pending_data_, d.size);
      d.from = pending_from_;
      stats_.truncated += d.truncated ? 1 : 0;
      ++stats_.received;
      pending_data_ += size;
      pending_bytes_ -= size;
    }
    if (pending_count_ == 0) ReleaseFrame();
  }
  return n;
}

StatusOr<size_t> RawChannel::RecvBurst(std::span<RxDatagram> batch,
                                       std::chrono::microseconds timeout) {
  SWITCHML_RETURN_IF_ERROR(internal::CheckRecvBuffers(batch, Describe()));
  if (batch.empty()) return size_t{0};
  size_t got = Drain(batch);
  if (got > 0 || timeout.count() <= 0) return got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    SWITCHML_ASSIGN_OR_RETURN(internal::WaitEvent e,
                              internal::WaitForEvent(fd_, wake_fd_, deadline, Describe()));
    if (e.kind == internal::WaitEvent::kTimeout) return size_t{0};
    if (e.kind == internal::WaitEvent::kReadable && (e.revents & POLLERR)) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);  // clears it (e.g. ENETDOWN)
    }
    got = Drain(batch);
    if (got > 0 || e.kind == internal::WaitEvent::kWoken) return got;
  }
}

void RawChannel::ReadNeighbourTable() {
  ++stats_.neighbour_reads;
  last_arp_read_ = std::chrono::steady_clock::now();
  // The kernel's resolved entries on this interface (netif.h), as the kernel would send.
  auto entries = ReadResolvedNeighbours(interface_);
  if (!entries.ok()) return;  // as a miss: the datagram is counted in send_no_mac
  for (const auto& [ip, mac] : *entries) arp_mac_[ip] = mac;
}

const MacAddress* RawChannel::LookupMac(Endpoint to) {
  if (auto it = mac_by_endpoint_.find(EndpointKey(to)); it != mac_by_endpoint_.end()) return &it->second;
  if (auto it = static_mac_.find(to.ipv4); it != static_mac_.end()) return &it->second;
  if (auto it = mac_by_ip_.find(to.ipv4); it != mac_by_ip_.end()) return &it->second;
  auto it = arp_mac_.find(to.ipv4);
  if (it == arp_mac_.end() && std::chrono::steady_clock::now() - last_arp_read_ >= kArpReadInterval) {
    ReadNeighbourTable();
    it = arp_mac_.find(to.ipv4);
  }
  return it != arp_mac_.end() ? &it->second : nullptr;
}

StatusOr<size_t> RawChannel::SendBurst(std::span<const TxDatagram> batch) {
  if (neighbours_posted_.load(std::memory_order_acquire)) {  // a new SetNeighbours table
    std::lock_guard<std::mutex> lock(neighbours_mu_);
    static_mac_.clear();
    for (const auto& [ip, mac] : pending_neighbours_) static_mac_[ip] = mac;
    neighbours_posted_.store(false, std::memory_order_relaxed);
  }
  const uint32_t limit = std::min(max_payload_, mtu_ > 28 ? mtu_ - 28 : 0);
  for (size_t i = 0; i < batch.size(); ++i) {
    const TxDatagram& d = batch[i];
    if (d.size > limit || (d.data == nullptr && d.size > 0) || d.to.port == 0 || d.to.ipv4 == 0) {
      return InvalidArgumentError(
          "SendBurst on " + Describe() + ": datagram " + std::to_string(i) + " to " +
          d.to.ToString() +
          (d.to.port == 0 || d.to.ipv4 == 0 ? " has no address or port"
           : d.data == nullptr ? " has null data"
                               : " has size " + std::to_string(d.size) + " > " +
                                     std::to_string(limit) + " (max_payload, MTU " +
                                     std::to_string(mtu_) + " - 28)"));
    }
  }
  size_t done = 0;
  while (done < batch.size()) {
    // Build up to max_burst_ frames; a datagram without a MAC is dropped (and counts as accepted).
    uint32_t m = 0;
    size_t next = done;
    while (next < batch.size() && m < max_burst_) {
      const TxDatagram& d = batch[next++];
      const MacAddress* mac = LookupMac(d.to);
      if (mac == nullptr) {
        ++stats_.send_no_mac;
        continue;
      }
      UdpFrameHeader h{.dst_mac = *mac, .src_mac = local_mac_, .src = local_, .dst = d.to};
      // The frame goes after the slot's zero virtio_net_hdr.
      uint8_t* frame = static_cast<uint8_t*>(tx_iov_[m].iov_base) + kVnetHdrBytes;
      StatusOr<size_t> len =
          BuildUdpFrame(h, {d.data, d.size}, {frame, tx_frame_capacity_ - kVnetHdrBytes});
      if (!len.ok()) return len.status();  // cannot happen: sizes checked above
      tx_iov_[m].iov_len = kVnetHdrBytes + *len;
      tx_index_[m] = next - 1;
      ++m;
    }
    uint32_t sent_msgs = 0;
    while (sent_msgs < m) {
      const int r = sendmmsg(fd_, tx_msgs_.get() + sent_msgs, m - sent_msgs, 0);
      ++stats_.send_syscalls;
      if (r > 0) {
        sent_msgs += static_cast<uint32_t>(r);
        stats_.sent += static_cast<uint64_t>(r);
        continue;
      }
      const int err = r == 0 ? EAGAIN : errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
        ++stats_.send_eagain;
        // Accepted: everything before the first unsent frame (dropped no-MAC ones included).
        return tx_index_[sent_msgs];
      }
      return ErrnoError("sendmmsg on " + Describe() + " (" + std::to_string(m - sent_msgs) +
                            " frames)", err);
    }
    done = next;
  }
  return done;
}

}  // namespace switchml::transport
