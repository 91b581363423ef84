// transport/udp_channel.h — Channel over a kernel UDP/IPv4 socket, with batched syscalls and
// UDP segmentation offload.
//
// Every syscall costs about 6 µs per UDP packet on the development machine
// (docs/benchmarks.md#measured-on-the-development-machine), so a burst of datagrams goes to
// the kernel in one sendmmsg(2) and comes back in one recvmmsg(2). On top of that, two offloads
// cut the per-datagram kernel cost (measured there: 14 Gbit/s of 1 KiB datagrams over veth with
// both, 1.45 without):
//  * GSO (UDP_SEGMENT, Linux ≥ 4.18): a run of consecutive datagrams in a SendBurst with the same
//    destination and the same size (the last one may be shorter) becomes one message: one
//    iovec per datagram, no copy, and a UDP_SEGMENT control message with the datagram size. The
//    kernel walks the stack once for the whole run and splits it into datagrams at the device
//    (or never, over loopback and veth to a GRO socket). On the wire these are ordinary UDP
//    datagrams: receivers without GRO, and the reference switch, see no difference. A datagram
//    marked TxDatagram::single_frame is always sent alone (a frame reader on the same host,
//    e.g. a reference DPDK client over af_packet on veth, would see the unsplit run).
//  * GRO (UDP_GRO, Linux ≥ 5.0): the receiving socket accepts such runs whole (and the runs GRO
//    coalesced in the driver); RecvBurst splits them at the segment size given in the UDP_GRO
//    control message, copying each datagram into the caller's buffer, and RecvBurstNoCopy
//    hands out pointers into the staging buffers instead.
// Both are on by default and switch themselves off when the kernel lacks them; GSO also falls
// back, per datagram size, when the kernel or the device refuses it (for example a datagram that
// needs IP fragmentation on the path). The socket is non-blocking: SendBurst never waits (it
// returns how many the kernel took), and RecvBurst waits only in ppoll(2), on the socket and an
// eventfd that Wake() signals.
//
//   UdpChannelOptions opt;
//   opt.local = {0, 0};  // any address, ephemeral port
//   SWITCHML_ASSIGN_OR_RETURN(std::unique_ptr<UdpChannel> ch, UdpChannel::Create(opt));
//   SWITCHML_ASSIGN_OR_RETURN(uint32_t my_ip, LocalIpv4For(switch_endpoint));  // to register
//   ... ch->SendBurst(tx) / ch->RecvBurst(rx, 1ms) ...
//
// Senders get the most from GSO by putting datagrams for one destination next to each other in
// a burst (GroupByDestination in channel.h does that for a multicasting switch).
//
// Threading: as for every Channel, one thread at a time; Wake() from any thread.
// No allocation per packet: the mmsghdr/iovec/sockaddr/control arrays and the GRO staging
// buffers are sized once, at Create (the staging pages are touched only when used).
//
// Transient network errors (an ICMP "port unreachable" reported as ECONNREFUSED, "no route to
// host", a netfilter drop reported as EPERM) are not failures: a datagram the kernel refuses
// for such a reason is dropped like a lost packet and counted in stats(). On an unconnected
// socket Linux reports ICMP errors only when IP_RECVERR is set; both cases are handled.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "switchml/status.h"
#include "transport/channel.h"

#include <linux/filter.h>  // sock_filter (classic BPF instruction)

struct mmsghdr;
struct sockaddr_in;
struct iovec;

namespace switchml::transport {

struct UdpChannelOptions {
  // Address to bind: ipv4 0 = any local address, port 0 = an ephemeral port.
  Endpoint local;
  // Kernel socket buffers. At 4 MiB a receive buffer holds ~1000 datagrams of 4 KiB: a full
  // window of a few workers' bursts while the owning thread is descheduled on 2 cores. As root
  // SO_{SND,RCV}BUFFORCE lifts the net.core.{w,r}mem_max cap; otherwise the kernel caps the size
  // silently (see UdpChannel::recv_buffer_bytes()).
  int send_buffer_bytes = 4 << 20;
  int recv_buffer_bytes = 4 << 20;
  // Busy polling: a RecvBurst that finds nothing queued keeps polling the socket without
  // sleeping for up to this long (within its timeout) before it waits in ppoll, trading CPU for
  // the wake-up latency of a sleeping thread; the same value is set as SO_BUSY_POLL, which makes
  // the kernel spin in the driver for devices that support it. 0 = off. SO_BUSY_POLL values
  // above net.core.busy_poll need CAP_NET_ADMIN; EPERM is ignored (the socket option is a
  // hint). A Wake() during the spin is seen when it ends.
  std::chrono::microseconds busy_poll{0};
  // Most datagrams one sendmmsg/recvmmsg call moves; larger bursts take several calls. 32–64
  // amortises the syscall to well under the per-datagram copy cost. Must be in [1, 1024].
  uint32_t max_burst = 64;
  // UDP GSO on send and UDP GRO on receive (see the file comment). Off = plain sendmmsg /
  // recvmmsg, one datagram per message (receiving straight into the caller's buffers).
  bool gso = true;
  bool gro = true;
  // SO_REUSEPORT before bind: several sockets (of this user) may bind the same address and
  // port, forming one reuseport group; the kernel hands each arriving datagram to one of them,
  // by a hash of the 4-tuple (so one sender's datagrams all land on one socket) unless a
  // steering program is attached (AttachReuseportCbpf). Every socket of the group must set it.
  bool reuse_port = false;
};

// Counters of one channel. Read from the owning thread (plain integers, no atomics: they are
// bumped on the hot path).
struct UdpChannelStats {
  uint64_t sent = 0;          // datagrams the kernel accepted
  uint64_t received = 0;      // datagrams returned by RecvBurst (truncated ones included)
  uint64_t truncated = 0;     // of those, cut to the caller's capacity
  uint64_t send_eagain = 0;   // SendBurst calls that stopped early: socket buffer full (EAGAIN/ENOBUFS)
  uint64_t send_dropped = 0;  // datagrams dropped after a transient error hit them twice
  uint64_t errors_ignored = 0;  // transient socket errors absorbed (ICMP-induced etc.; see above)
  uint64_t send_syscalls = 0;   // sendmmsg calls made
  uint64_t recv_syscalls = 0;   // recvmmsg calls made (including those that found nothing)
  uint64_t gso_messages = 0;    // messages sent carrying more than one datagram
  uint64_t gso_fallbacks = 0;   // GSO messages the kernel refused, resent datagram by datagram
  uint64_t gro_messages = 0;    // messages received carrying more than one datagram

  // Adds every counter of `o` (totals over several channels, e.g. a switch's I/O threads).
  UdpChannelStats& operator+=(const UdpChannelStats& o) {
    sent += o.sent;
    received += o.received;
    truncated += o.truncated;
    send_eagain += o.send_eagain;
    send_dropped += o.send_dropped;
    errors_ignored += o.errors_ignored;
    send_syscalls += o.send_syscalls;
    recv_syscalls += o.recv_syscalls;
    gso_messages += o.gso_messages;
    gso_fallbacks += o.gso_fallbacks;
    gro_messages += o.gro_messages;
    return *this;
  }
};

class UdpChannel final : public Channel {
 public:
  // Opens, configures and binds the socket. Errors: InvalidArgument (an option out of range,
  // named), Unavailable (socket/bind/setsockopt failed; the message names the endpoint and the
  // errno text, e.g. "bind 127.0.0.1:48864: Address already in use").
  static StatusOr<std::unique_ptr<UdpChannel>> Create(const UdpChannelOptions& options);

  ~UdpChannel() override;
  UdpChannel(const UdpChannel&) = delete;
  UdpChannel& operator=(const UdpChannel&) = delete;

  // One sendmmsg per max_burst datagrams. Never blocks. Returns the accepted prefix length:
  // less than batch.size() when the socket buffer is full (EAGAIN/ENOBUFS), possibly 0.
  // A datagram refused twice in a row with a network error (no route, host unreachable,
  // filtered) is dropped, counted in send_dropped, and counts as accepted: the network may lose
  // any datagram anyway. Errors: InvalidArgument (a datagram with size > 65507, null data or
  // port 0 — checked before anything is sent; or refused by the kernel as too big for the path
  // or a broadcast address: the datagrams before it were sent), Unavailable (an unexpected
  // socket error; the datagrams before it were sent).
  StatusOr<size_t> SendBurst(std::span<const TxDatagram> batch) override;

  // Tries recvmmsg(MSG_DONTWAIT) first (no poll syscall when traffic is flowing); if nothing is
  // queued, waits in ppoll until a datagram arrives, Wake() is called or `timeout` passes
  // (microsecond resolution). Fills size (bytes stored, <= capacity), truncated (MSG_TRUNC) and
  // from. A Wake() that finds no RecvBurst waiting makes the next wait return at once (it is
  // never lost). Errors: InvalidArgument (null data with nonzero capacity), Unavailable.
  StatusOr<size_t> RecvBurst(std::span<RxDatagram> batch,
                             std::chrono::microseconds timeout) override;

  // With GRO on, hands out datagrams in place in the staging buffers instead of copying them
  // (one memcpy of every received byte less); see Channel::RecvBurstNoCopy. Datagrams already
  // staged are returned without a syscall, and a call makes at most one recvmmsg, after which
  // it hands out only what that call received (the staging buffers are not refilled while
  // views into them are out). Without GRO, the same as RecvBurst.
  StatusOr<size_t> RecvBurstNoCopy(std::span<RxDatagram> batch,
                                   std::chrono::microseconds timeout) override;

  // The bound address (getsockname): the actual port even if an ephemeral one was asked for.
  // ipv4 is 0 when bound to any address; use LocalIpv4For() for the address peers should use.
  Endpoint local_endpoint() const override { return local_; }

  void Wake() override;  // thread-safe, async-signal-safe (one write(2) to an eventfd)

  std::string Describe() const override;  // "udp 127.0.0.1:40001"

  const UdpChannelStats& stats() const { return stats_; }

  // "udp_socket_drops": datagrams the kernel dropped at this socket (receive buffer full, or a
  // filter), from SO_MEMINFO; absent if the kernel does not say.
  std::vector<std::pair<std::string, uint64_t>> TransportCounters() override;

  // Whether GSO / GRO are in use: asked for in the options and supported by the kernel. GSO
  // stays on after a fallback; only datagrams of the refused size and larger are sent singly.
  bool gso_enabled() const { return gso_enabled_; }
  bool gro_enabled() const { return gro_enabled_; }

  // Socket buffer sizes the kernel actually granted (getsockopt; Linux reports twice the
  // requested value because it counts bookkeeping overhead).
  int send_buffer_bytes() const { return send_buffer_bytes_; }
  int recv_buffer_bytes() const { return recv_buffer_bytes_; }

  // The socket descriptor, for diagnostics and tests (e.g. setting IP_RECVERR). Owned by the
  // channel; do not close it or change its blocking mode.
  int native_handle() const { return fd_; }

  // Attaches a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) to the reuseport group this
  // channel's socket belongs to (created with reuse_port): for every datagram the kernel runs
  // it and hands the datagram to the group's socket at the index the program returns, in the
  // order the sockets were bound (an index past the last socket falls back to the 4-tuple
  // hash). For UDP the program sees the datagram with its data starting at the UDP payload:
  // BPF_LD|BPF_ABS offset 0 is the first payload byte. One program per group; attaching again
  // replaces it. Caveat: the kernel selects the socket once per arriving skb, so a UDP GSO
  // message (or a run GRO coalesced in the driver) goes whole to the socket its FIRST datagram
  // selects. Errors: InvalidArgument (empty or longer than BPF_MAXINSNS (4096) instructions;
  // the kernel refused the program, e.g. a channel without reuse_port), Unavailable.
  Status AttachReuseportCbpf(std::span<const sock_filter> program);

 private:
  UdpChannel(int fd, int wake_fd, const UdpChannelOptions& options);
  // Turns on GSO/GRO as asked and as the kernel allows; allocates the GRO staging buffers.
  void EnableOffloads(const UdpChannelOptions& options);

  // True if errno `err` may be an asynchronous (ICMP-induced) error that a socket call merely
  // reports; such a call is retried once.
  static bool MayBeAsyncError(int err);
  // True if a datagram refused with `err` twice in a row is treated as lost in the network.
  static bool IsLossLikeError(int err);
  // Reads and discards queued IP_RECVERR messages so they cannot fill the receive buffer or keep
  // ppoll returning POLLERR. Error path only.
  void DrainErrorQueue();
  // Fills tx_msgs_ for the first (at most max_burst_) datagrams of `rest`: one message per GSO
  // run (or per datagram). Returns the number of messages; tx_segs_[m] = datagrams in message m.
  uint32_t BuildMessages(std::span<const TxDatagram> rest);
  // One recvmmsg(MSG_DONTWAIT) into batch (at most max_burst) — or, with GRO, into the staging
  // buffers, after first handing out what an earlier call left there (when lending, only that:
  // no recvmmsg over staged datagrams already handed out). Returns datagrams stored
  // in batch (0 = none queued) or an error. Sets last_recv_full_ when the syscall came back
  // with every message slot filled (more may be queued).
  StatusOr<size_t> RecvOnce(std::span<RxDatagram> batch);
  // Hands out datagrams from the GRO staging buffers into batch; returns how many.
  size_t DrainStaged(std::span<RxDatagram> batch);
  enum class WaitResult { kTimeout, kReadable, kWoken };
  // Waits in ppoll until the socket is readable (or has an error pending), Wake() is called, or
  // `deadline` passes. Consumes the Wake() signal.
  StatusOr<WaitResult> Wait(std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  int wake_fd_ = -1;
  Endpoint local_;
  uint32_t max_burst_ = 0;
  std::chrono::microseconds busy_poll_{0};
  int send_buffer_bytes_ = 0;
  int recv_buffer_bytes_ = 0;
  UdpChannelStats stats_;
  bool gso_enabled_ = false;
  bool gro_enabled_ = false;
  // GSO is used only for datagrams of at most this size (lowered when the kernel refuses one).
  uint32_t gso_max_datagram_ = 0;
  bool last_recv_full_ = false;
  // Set during RecvBurstNoCopy: DrainStaged lends staging memory instead of copying.
  bool lend_ = false;

  // Scratch for one syscall, max_burst_ entries each, allocated once: messages, one iovec per
  // datagram, one address and one control buffer per message.
  struct Control;
  std::unique_ptr<mmsghdr[]> tx_msgs_;
  std::unique_ptr<iovec[]> tx_iov_;
  std::unique_ptr<sockaddr_in[]> tx_addr_;
  std::unique_ptr<Control[]> tx_control_;
  std::unique_ptr<uint32_t[]> tx_segs_;
  std::unique_ptr<mmsghdr[]> rx_msgs_;
  std::unique_ptr<iovec[]> rx_iov_;
  std::unique_ptr<sockaddr_in[]> rx_addr_;
  std::unique_ptr<Control[]> rx_control_;

  // GRO staging: gro_slots_ buffers of kGroBufferBytes; messages [staged_next_, staged_count_)
  // of the last recvmmsg are not yet fully handed out, the current one from staged_offset_.
  uint32_t gro_slots_ = 0;
  std::unique_ptr<uint8_t[]> staging_;
  std::unique_ptr<uint32_t[]> staged_segment_;  // segment size per staged message (0 = whole)
  uint32_t staged_count_ = 0;
  uint32_t staged_next_ = 0;
  uint32_t staged_offset_ = 0;
};



// The local IPv4 address the kernel would use as the source to reach `remote` (by routing: it
// connects a throwaway UDP socket and reads getsockname; nothing is sent). Workers register this
// address with the switch. Errors: Unavailable ("route to 10.0.0.9:48864: Network is
// unreachable").
StatusOr<uint32_t> LocalIpv4For(Endpoint remote);

}  // namespace switchml::transport
