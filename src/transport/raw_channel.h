// transport/raw_channel.h — Channel over raw Ethernet frames (AF_PACKET with a memory-mapped
// receive ring), for peers whose UDP frames the kernel would drop.
//
// The reference SwitchML DPDK client sends its UDP datagrams with an IPv4 header checksum of 0
// and a UDP checksum holding only the pseudo-header sum (it counts on NIC checksum offload,
// which it never enables); the kernel's IP layer drops them before any UDP socket sees them.
// A RawChannel is bound to one interface, one local IPv4 address and one UDP port and takes
// every IPv4/UDP frame for that address and port off the interface itself, whatever its
// checksums (frame.h says what was wrong with them; counters per reason; an option refuses
// frames with bad ones). Everything else (ARP, ICMP, TCP, other UDP ports) stays with the
// kernel: a classic BPF filter on the packet socket passes only "IPv4, UDP, to IP:port". So
// that the kernel's own UDP does not also take those datagrams (queue them, or answer "ICMP
// port unreachable"), the channel binds a UDP socket to the same IP:port with a BPF filter that
// drops everything: the port is "open" for the kernel, every datagram to it is discarded, and no
// other program can bind it while the channel exists.
//
//   RawChannelOptions opt;
//   opt.interface = "eth0";
//   opt.local = {0x0A000001, 48864};      // 10.0.0.1:48864, an address of eth0
//   SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<RawChannel> ch, RawChannel::Create(opt));
//   ... ch->RecvBurst(rx, 1ms) ... ch->SendBurst(tx) ...   // as any Channel (channel.h)
//
// The ring's size (RawChannelOptions::ring_frames) bounds the burst the channel takes while its
// owner is busy: a frame that finds every slot full is dropped by the kernel and counted
// (ring_drops; issue seen with 4 reference workers at a window of 256 on a ring of 912 slots).
//
// Receive: a TPACKET_V2 ring (default; one slot per frame, the kernel signals every frame) or a
// TPACKET_V3 ring (variable-size frames packed in blocks that the kernel hands over when full
// or after `block_timeout_ms`, which batches wake-ups but adds up to that much latency at low
// rates). The choice and the measurements behind it (bench/raw_rate.cc on a veth pair): see
// "Raw-frame input" in docs/design.md. Datagrams are copied out of the ring into the caller's
// buffers; RecvBurst fills `from` with the source IP and port.
//
// UDP GSO super-frames: a sender on this host (over veth or a bridge) that sends with UDP GSO
// (UdpChannel does by default) hands the interface one frame holding k datagrams, which no wire
// segmented. The socket asks for a virtio_net_hdr before each frame (PACKET_VNET_HDR); a frame
// whose header says UDP GSO (VIRTIO_NET_HDR_GSO_UDP_L4) with segment size G is handed out as
// ceil(payload/G) datagrams of G bytes (the last one shorter), all from the frame's source:
// what the wire would have carried. A RecvBurst stops at the batch's end and the next one goes on
// with the rest of the super-frame (it stays in the ring until then). With TPACKET_V2 a slot
// holds a frame of max_payload; a longer one (a super-frame, usually) is read whole from the
// socket's own queue (PACKET_COPY_THRESH), one recv(2) per such frame, into a 64 KiB buffer
// allocated at Create. Counted: gso_frames_split, gso_datagrams.
//
// Send: one datagram per frame (behind a zero virtio_net_hdr: no offload asked for), IPv4 (DF,
// TTL 64) and UDP checksums computed in software, in one sendmmsg(2) per burst on the packet
// socket (through the interface's qdisc, so tc shaping applies). The destination MAC is the one
// the destination endpoint's last frame came from (learned on receive, per source IP and port;
// failing that, per source IP); for a destination never heard from, the kernel's neighbour
// table (its resolved entries on the interface, ReadResolvedNeighbours in netif.h: the same
// rtnetlink reader the switch's neighbour entries use; read at most every 100 ms and only for
// such misses) or an entry set
// with SetNeighbours. A datagram whose MAC is unknown is dropped and counted (send_no_mac): like
// a lost packet, it counts as accepted.
//
// Errors: Create needs CAP_NET_RAW (PermissionDenied naming the capability otherwise); the
// interface must exist (NotFound) and be Ethernet-like; the local address must be one the
// kernel can bind (Unavailable "bind 10.0.0.1:48864: Cannot assign requested address").
//
// Threading: as for every Channel, one thread at a time; Wake() from any thread. No allocation
// per packet except the first time a source endpoint is seen (the MAC table); super-frames are
// split in place (ring or the preallocated copy buffer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "switchml/status.h"
#include "transport/channel.h"
#include "transport/frame.h"

struct mmsghdr;
struct iovec;

namespace switchml::transport {

enum class RawRing : uint8_t { kTpacketV2, kTpacketV3 };

struct RawChannelOptions {
  std::string interface;  // e.g. "eth0"; required
  Endpoint local;         // the address and port to serve; both required (nonzero)
  // Accept frames whatever their checksums (true, the point of this channel), or refuse those
  // with an IPv4 checksum that is 0 or wrong, or a UDP checksum that is partial or wrong
  // (counted in refused_checksum). A UDP checksum of 0 ("none") is legal and always accepted.
  bool accept_bad_checksums = true;
  RawRing ring = RawRing::kTpacketV2;
  // Largest UDP payload that fits a TPACKET_V2 ring slot; a longer frame (a UDP GSO
  // super-frame, or a datagram above max_payload) is read whole from the socket's queue instead
  // (one recv(2) each; should the socket buffer be full, it arrives cut short and is dropped as
  // a `truncated` verdict). TPACKET_V3 blocks hold any frame. Also the largest payload SendBurst
  // accepts (besides the MTU).
  uint32_t max_payload = 9000;
  // Frames of max_payload the receive ring holds at least, in [1, kMaxRingFrames] (TPACKET_V2:
  // that many slots; TPACKET_V3: blocks with room for that many such frames), rounded up to
  // whole blocks of 1 MiB. The kernel drops a frame that finds the ring full (ring_drops): size
  // it for the largest burst that can arrive while the owner is busy, e.g. a first window of
  // every worker (workers x window frames, all at once). Memory (pinned kernel pages): about
  // ring_frames x (max_payload + 200) bytes; more than kMaxRingBytes is refused.
  uint32_t ring_frames = 2048;
  // TPACKET_V3 only: a partly filled block is handed over after this many milliseconds.
  uint32_t block_timeout_ms = 1;
  // Most datagrams one sendmmsg carries; must be in [1, 1024].
  uint32_t max_burst = 64;
  // Bind the kernel UDP socket that keeps the kernel from handling these datagrams (see the
  // file comment). Off only for measurements.
  bool block_kernel_udp = true;
};

// Counters of one channel; read from the owning thread.
struct RawChannelStats {
  uint64_t frames = 0;     // frames taken from the ring (after the socket filter)
  uint64_t received = 0;   // datagrams handed out by RecvBurst
  uint64_t truncated = 0;  // of those, cut to the caller's capacity
  // Per FrameVerdict: a frame whose checksums are both right counts under kOk; one with wrong
  // checksums under each checksum reason it has (an offloading sender's frame counts under
  // ipv4_checksum_zero and udp_checksum_partial); a malformed frame under its structural reason
  // (dropped).
  uint64_t verdicts[kNumFrameVerdicts] = {};
  // Frames from a sender on this host (e.g. over veth) with the partial UDP checksum the kernel
  // leaves to offload, flagged so by the kernel (TP_STATUS_CSUMNOTREADY): counted here and as kOk.
  uint64_t udp_checksum_offloaded = 0;
  uint64_t refused_checksum = 0;  // dropped because accept_bad_checksums is off
  // UDP GSO super-frames (virtio_net_hdr gso_type UDP_L4, from a sender on this host) split at
  // their segment size, and the datagrams they yielded (included in `received`). A super-frame
  // counts once in `frames`, `verdicts` and `udp_checksum_offloaded`.
  uint64_t gso_frames_split = 0;
  uint64_t gso_datagrams = 0;
  uint64_t copied_frames = 0;     // TPACKET_V2: frames too long for a slot, read with recv(2)
  uint64_t not_for_us = 0;        // dropped: another host's frame (promiscuous), wrong IP/port
  uint64_t ring_drops = 0;        // frames the kernel dropped because the ring was full
  uint64_t sent = 0;              // datagrams handed to the kernel
  uint64_t send_no_mac = 0;       // datagrams dropped: destination MAC unknown
  uint64_t send_eagain = 0;       // SendBurst calls that stopped early: device queue full
  uint64_t send_syscalls = 0;
  uint64_t neighbour_reads = 0;   // reads of the kernel's neighbour table (ReadResolvedNeighbours)
};

class RawChannel final : public Channel {
 public:
  static constexpr uint32_t kMaxRingFrames = 1u << 22;
  static constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;  // 1 GiB per channel
  // Bytes one ring slot takes for frames of `max_payload` (TPACKET_V2; V3's differ by 16).
  static uint32_t RingSlotBytes(uint32_t max_payload);
  // The ring Create maps for these options (TPACKET_V2): whole 1 MiB blocks of ring_frames slots.
  static uint64_t RingBytes(uint32_t ring_frames, uint32_t max_payload);

  // Errors: InvalidArgument (an option out of range, named), PermissionDenied (no
  // CAP_NET_RAW), NotFound (no such interface), Unavailable (a socket call failed; the message
  // names the call, the interface or endpoint and the errno text).
  static StatusOr<std::unique_ptr<RawChannel>> Create(const RawChannelOptions& options);

  ~RawChannel() override;
  RawChannel(const RawChannel&) = delete;
  RawChannel& operator=(const RawChannel&) = delete;

  // One frame per datagram, source = local_endpoint(). Never blocks; returns the accepted
  // prefix (short when the device queue is full). Errors: InvalidArgument (a datagram larger
  // than max_payload or the interface MTU allows, null data, port 0 or address 0 — checked
  // before anything is sent), Unavailable.
  StatusOr<size_t> SendBurst(std::span<const TxDatagram> batch) override;

  // Copies datagrams out of the ring; waits in ppoll (ring and Wake() eventfd) up to `timeout`
  // for the first. Errors: InvalidArgument (null data with nonzero capacity), Unavailable.
  StatusOr<size_t> RecvBurst(std::span<RxDatagram> batch,
                             std::chrono::microseconds timeout) override;

  Endpoint local_endpoint() const override { return local_; }
  void Wake() override;                   // thread-safe (one write(2) to an eventfd)
  std::string Describe() const override;  // "raw eth0 10.0.0.1:48864"

  // Replaces the table of known neighbours: the MAC of each destination IP (all ports), used
  // before the kernel's neighbour table and before a MAC learned per IP; a MAC learned from an
  // endpoint's own frames takes precedence for that endpoint. Thread-safe: the owning thread
  // takes the new table at its next SendBurst (one atomic load per burst otherwise). A switch
  // (dataplane::SwitchHost) passes the MACs its workers registered, as it installs neighbour
  // entries for kernel UDP: one source of the workers' MACs for both modes.
  void SetNeighbours(std::vector<std::pair<uint32_t, MacAddress>> neighbours);

  // Updates ring_drops from the kernel (PACKET_STATISTICS, which resets on read) and returns the
  // counters.
  const RawChannelStats& stats();
  // stats() by name, "raw_" + field, the verdicts as "raw_frames_<verdict>" (frame.h).
  std::vector<std::pair<std::string, uint64_t>> TransportCounters() override;
  uint32_t ring_frames() const { return frames_per_block_ * ring_blocks_; }
  uint64_t ring_bytes() const { return ring_size_; }
  const MacAddress& local_mac() const { return local_mac_; }

 private:
  RawChannel() = default;
  // Next frame in the ring or nullptr; Release() hands it back.
  struct RingFrame {
    const uint8_t* data;
    uint32_t len;
    uint8_t pkttype;
    bool csum_not_ready;  // TP_STATUS_CSUMNOTREADY: the kernel left the checksum to offload
    bool copied;          // TP_STATUS_COPY: cut to the slot; the whole frame is on the queue
  };
  bool NextFrame(RingFrame* out);
  void ReleaseFrame();
  // Parses the ring frame `f` (after its virtio_net_hdr), counts it and, if it is taken, sets
  // the pending datagrams (pending_*). Returns false if the frame yields nothing.
  bool TakeFrame(const RingFrame& f);
  // One pass over the ring into batch; returns datagrams stored.
  size_t Drain(std::span<RxDatagram> batch);
  const MacAddress* LookupMac(Endpoint to);
  void ReadNeighbourTable();

  int fd_ = -1;         // AF_PACKET socket
  int block_fd_ = -1;   // kernel UDP socket that drops everything
  int wake_fd_ = -1;
  std::string interface_;
  int ifindex_ = 0;
  uint32_t mtu_ = 0;
  MacAddress local_mac_{};
  Endpoint local_;
  bool accept_bad_checksums_ = true;
  RawRing ring_kind_ = RawRing::kTpacketV2;
  uint32_t max_payload_ = 0;
  uint32_t max_burst_ = 0;
  RawChannelStats stats_;

  // Ring: ring_blocks_ blocks of block_bytes_ at ring_.
  uint8_t* ring_ = nullptr;
  size_t ring_size_ = 0;
  uint32_t block_bytes_ = 0;
  uint32_t ring_blocks_ = 0;
  // V2: slots of frame_bytes_; next slot to look at.
  uint32_t frame_bytes_ = 0;
  uint32_t frames_per_block_ = 0;
  uint32_t slot_ = 0;
  // V3: current block, packets left in it and the next packet's offset.
  uint32_t block_ = 0;
  uint32_t block_left_ = 0;
  uint32_t block_offset_ = 0;
  bool in_block_ = false;
  // The taken frame being handed out (its ring frame is released when none is left): the next
  // datagram's bytes, the bytes left, the segment size and the number of datagrams left.
  const uint8_t* pending_data_ = nullptr;
  uint32_t pending_bytes_ = 0;
  uint32_t pending_segment_ = 0;
  uint32_t pending_count_ = 0;
  Endpoint pending_from_;
  // TPACKET_V2: a frame too long for its slot is read here (virtio_net_hdr + whole frame).
  std::unique_ptr<uint8_t[]> copy_buf_;
  size_t copy_capacity_ = 0;

  // Send scratch: max_burst_ frames of frame capacity each, messages and iovecs.
  std::unique_ptr<uint8_t[]> tx_frames_;
  size_t tx_frame_capacity_ = 0;
  std::unique_ptr<mmsghdr[]> tx_msgs_;
  std::unique_ptr<iovec[]> tx_iov_;
  std::unique_ptr<size_t[]> tx_index_;  // batch index of the datagram in message i

  // MACs: learned per endpoint (ip << 16 | port) and per IP; static and neighbour-table ones.
  std::unordered_map<uint64_t, MacAddress> mac_by_endpoint_;
  std::unordered_map<uint32_t, MacAddress> mac_by_ip_;
  std::unordered_map<uint32_t, MacAddress> static_mac_;
  // SetNeighbours' table, until the owning thread takes it.
  std::mutex neighbours_mu_;
  std::vector<std::pair<uint32_t, MacAddress>> pending_neighbours_;  // guarded by neighbours_mu_
  std::atomic<bool> neighbours_posted_{false};
  std::unordered_map<uint32_t, MacAddress> arp_mac_;
  std::chrono::steady_clock::time_point last_arp_read_{};
};

}  // namespace switchml::transport
