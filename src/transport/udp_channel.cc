#include "transport/udp_channel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <climits>
#include <utility>

#include "transport/posix_util.h"

namespace switchml::transport {
namespace {

using internal::ErrnoError;
using internal::ErrnoText;
using internal::FdCloser;

// Largest UDP payload over IPv4: 65535 − 20 (IP header) − 8 (UDP header).
constexpr uint32_t kMaxUdpPayload = 65507;
// sendmmsg/recvmmsg refuse more than UIO_MAXIOV messages per call.
constexpr uint32_t kMaxBurstLimit = 1024;
// Datagrams per GSO message: the kernel's UDP_MAX_SEGMENTS was 64 before Linux 6.x raised it.
constexpr uint32_t kMaxGsoSegments = 64;
// One GRO staging buffer holds the largest message a UDP socket can return (a coalesced run is
// at most 64 KiB, like any IPv4 datagram).
constexpr uint32_t kGroBufferBytes = 65536;
// GRO staging buffers per channel, i.e. messages per recvmmsg with GRO on (2 MiB of address
// space; pages are touched only when a message lands in them).
constexpr uint32_t kMaxGroSlots = 32;

sockaddr_in ToSockaddr(Endpoint ep) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(ep.port);
  sa.sin_addr.s_addr = htonl(ep.ipv4);
  return sa;
}

Endpoint FromSockaddr(const sockaddr_in& sa) {
  return Endpoint{ntohl(sa.sin_addr.s_addr), ntohs(sa.sin_port)};
}

// Sets a socket buffer size, first with the *FORCE variant (root: ignores net.core.*mem_max),
// then, if that is not permitted, with the capped one.
Status SetBufferSize(int fd, int force_opt, int opt, int bytes, const char* name,
                     const std::string& where) {
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) == 0) return OkStatus();
  if (errno != EPERM) {
    return ErrnoError("setsockopt " + std::string(name) + "FORCE=" + std::to_string(bytes) +
                          " on " + where, errno);
  }
  if (setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes)) != 0) {
    return ErrnoError("setsockopt " + std::string(name) + "=" + std::to_string(bytes) + " on " +
                          where, errno);
  }
  return OkStatus();
}

int GetIntOption(int fd, int opt) {
  int value = 0;
  socklen_t len = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, opt, &value, &len) != 0) return -1;
  return value;
}

}  // namespace

StatusOr<std::unique_ptr<UdpChannel>> UdpChannel::Create(const UdpChannelOptions& options) {
  if (options.send_buffer_bytes <= 0 || options.send_buffer_bytes > INT_MAX / 2) {
    return InvalidArgumentError("send_buffer_bytes must be in [1, " + std::to_string(INT_MAX / 2) +
                                "], got " + std::to_string(options.send_buffer_bytes));
  }
  if (options.recv_buffer_bytes <= 0 || options.recv_buffer_bytes > INT_MAX / 2) {
    return InvalidArgumentError("recv_buffer_bytes must be in [1, " + std::to_string(INT_MAX / 2) +
                                "], got " + std::to_string(options.recv_buffer_bytes));
  }
  if (options.busy_poll.count() < 0 || options.busy_poll.count() > INT_MAX) {
    return InvalidArgumentError("busy_poll must be in [0, " + std::to_string(INT_MAX) +
                                "] µs, got " + std::to_string(options.busy_poll.count()));
  }
  if (options.max_burst < 1 || options.max_burst > kMaxBurstLimit) {
    return InvalidArgumentError("max_burst must be in [1, " + std::to_string(kMaxBurstLimit) +
                                "], got " + std::to_string(options.max_burst));
  }
  const std::string where = "udp " + options.local.ToString();

  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket for " + where, errno);
  FdCloser fd_closer(fd);
  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) return ErrnoError("eventfd for " + where, errno);
  FdCloser wake_closer(wake_fd);

  SWITCHML_RETURN_IF_ERROR(SetBufferSize(fd, SO_SNDBUFFORCE, SO_SNDBUF, options.send_buffer_bytes,
                                         "SO_SNDBUF", where));
  SWITCHML_RETURN_IF_ERROR(SetBufferSize(fd, SO_RCVBUFFORCE, SO_RCVBUF, options.recv_buffer_bytes,
                                         "SO_RCVBUF", where));
  if (options.busy_poll.count() > 0) {
    const int us = static_cast<int>(options.busy_poll.count());
    if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) != 0 && errno != EPERM) {
      return ErrnoError("setsockopt SO_BUSY_POLL=" + std::to_string(us) + " on " + where, errno);
    }
  }

  if (options.reuse_port) {
    const int on = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0) {
      return ErrnoError("setsockopt SO_REUSEPORT on " + where, errno);
    }
  }

  const sockaddr_in local = ToSockaddr(options.local);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) {
    return ErrnoError("bind " + options.local.ToString(), errno);
  }
  std::unique_ptr<UdpChannel> ch(new UdpChannel(fd_closer.release(), wake_closer.release(), options));
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(ch->fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return ErrnoError("getsockname on " + where, errno);
  }
  ch->local_ = FromSockaddr(bound);
  ch->send_buffer_bytes_ = GetIntOption(ch->fd_, SO_SNDBUF);
  ch->recv_buffer_bytes_ = GetIntOption(ch->fd_, SO_RCVBUF);
  ch->EnableOffloads(options);
  return ch;
}

// Room for one UDP_SEGMENT (uint16_t) or UDP_GRO (int) control message.
struct UdpChannel::Control {
  alignas(cmsghdr) uint8_t bytes[CMSG_SPACE(sizeof(int))];
};

UdpChannel::UdpChannel(int fd, int wake_fd, const UdpChannelOptions& options)
    : fd_(fd),
      wake_fd_(wake_fd),
      local_(options.local),
      max_burst_(options.max_burst),
      busy_poll_(options.busy_poll),
      tx_msgs_(new mmsghdr[options.max_burst]()),
      tx_iov_(new iovec[options.max_burst]()),
      tx_addr_(new sockaddr_in[options.max_burst]()),
      tx_control_(new Control[options.max_burst]()),
      tx_segs_(new uint32_t[options.max_burst]()),
      rx_msgs_(new mmsghdr[options.max_burst]()),
      rx_iov_(new iovec[options.max_burst]()),
      rx_addr_(new sockaddr_in[options.max_burst]()),
      rx_control_(new Control[options.max_burst]()) {
  // The per-message name pointers never change; iovecs, lengths, control data and flags are
  // set per call.
  for (uint32_t i = 0; i < max_burst_; ++i) {
    msghdr& tx = tx_msgs_[i].msg_hdr;
    tx.msg_name = &tx_addr_[i];
    tx.msg_namelen = sizeof(sockaddr_in);
    tx_addr_[i].sin_family = AF_INET;
    msghdr& rx = rx_msgs_[i].msg_hdr;
    rx.msg_name = &rx_addr_[i];
    rx.msg_iov = &rx_iov_[i];
    rx.msg_iovlen = 1;
  }
}

void UdpChannel::EnableOffloads(const UdpChannelOptions& options) {
  if (options.gso) {
    // Probing the option tells whether this kernel has UDP GSO at all (ENOPROTOOPT if not).
    int value = 0;
    socklen_t len = sizeof(value);
    gso_enabled_ = getsockopt(fd_, SOL_UDP, UDP_SEGMENT, &value, &len) == 0;
    gso_max_datagram_ = kMaxUdpPayload;
  }
  if (options.gro) {
    const int on = 1;
    gro_enabled_ = setsockopt(fd_, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
  }
  if (gro_enabled_) {
    gro_slots_ = std::min(max_burst_, kMaxGroSlots);
    staging_ = std::make_unique_for_overwrite<uint8_t[]>(size_t{gro_slots_} * kGroBufferBytes);
    staged_segment_ = std::make_unique<uint32_t[]>(gro_slots_);
    for (uint32_t i = 0; i < gro_slots_; ++i) {
      rx_iov_[i].iov_base = staging_.get() + size_t{i} * kGroBufferBytes;
      rx_iov_[i].iov_len = kGroBufferBytes;
    }
  }
}

UdpChannel::~UdpChannel() {
  if (fd_ >= 0) close(fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string UdpChannel::Describe() const { return "udp " + local_.ToString(); }

bool UdpChannel::MayBeAsyncError(int err) {
  // What ICMP messages turn into (icmp_err_convert in the kernel), and interface flaps.
  switch (err) {
    case ECONNREFUSED:  // port unreachable: peer not listening (yet, or any more)
    case EHOSTUNREACH:  // host unreachable, administratively filtered, no neighbour
    case ENETUNREACH:   // network unreachable / no route right now
    case EHOSTDOWN:
    case ENONET:
    case ENOPROTOOPT:   // protocol unreachable
    case EOPNOTSUPP:    // source route failed
    case EMSGSIZE:      // fragmentation needed
    case EPROTO:
    case ENETDOWN:
    case ECONNRESET:
    case ETIMEDOUT:
    case EPERM:         // a netfilter DROP rule in OUTPUT makes sendmmsg fail with EPERM
      return true;
    default:
      return false;
  }
}

bool UdpChannel::IsLossLikeError(int err) {
  // A datagram refused for one of these reasons is as good as lost on the way: the protocol
  // above retransmits. The others (EMSGSIZE, ENOPROTOOPT, EOPNOTSUPP) are the caller's problem.
  return MayBeAsyncError(err) && err != EMSGSIZE && err != ENOPROTOOPT && err != EOPNOTSUPP;
}

void UdpChannel::DrainErrorQueue() {
  // Bounded: the error queue is charged to the receive buffer, so it cannot be endless, but a
  // flood must not stall the caller either; the rest is drained on the next error.
  uint8_t data[64];
  uint8_t control[256];
  for (int i = 0; i < 64; ++i) {
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
  }
}

StatusOr<size_t> UdpChannel::SendBurst(std::span<const TxDatagram> batch) {
  // Validate the whole batch first, so a bad datagram fails the call before any is sent.
  for (size_t i = 0; i < batch.size(); ++i) {
    const TxDatagram& d = batch[i];
    if (d.size > kMaxUdpPayload || (d.data == nullptr && d.size > 0) || d.to.port == 0) {
      return InvalidArgumentError(
          "SendBurst on " + Describe() + ": datagram " + std::to_string(i) + " to " +
          d.to.ToString() +
          (d.to.port == 0 ? " has port 0"
           : d.data == nullptr
               ? " has null data"
               : " has size " + std::to_string(d.size) + " > " + std::to_string(kMaxUdpPayload)));
    }
  }

  size_t done = 0;           // datagrams accepted (sent or dropped) so far
  int failures_at_done = 0;  // transient errors hitting the message at `done` in a row
  while (done < batch.size()) {
    // One chunk of at most max_burst_ datagrams per sendmmsg, as GSO runs where possible.
    const uint32_t num_msgs = BuildMessages(batch.subspan(done));
    uint32_t offset = 0;  // messages of this chunk accepted so far
    bool rebuild = false;
    while (offset < num_msgs && !rebuild) {
      const int r = sendmmsg(fd_, tx_msgs_.get() + offset, num_msgs - offset, 0);
      ++stats_.send_syscalls;
      if (r > 0) {
        for (uint32_t m = offset; m < offset + static_cast<uint32_t>(r); ++m) {
          done += tx_segs_[m];
          stats_.sent += tx_segs_[m];
          stats_.gso_messages += tx_segs_[m] > 1 ? 1 : 0;
        }
        offset += static_cast<uint32_t>(r);
        failures_at_done = 0;
        // A short count means the next message failed; the next call reports why.
        continue;
      }
      const int err = r == 0 ? EAGAIN : errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
        ++stats_.send_eagain;
        return done;
      }
      const uint32_t segs = tx_segs_[offset];
      const TxDatagram& d = batch[done];
      if (segs > 1 && (err == EIO || err == EINVAL || err == EMSGSIZE || err == EOPNOTSUPP ||
                       err == ENOPROTOOPT)) {
        // The kernel or the device refused segmentation offload for this size (no checksum
        // offload: EIO; a segment that needs IP fragmentation on the path: EINVAL/EMSGSIZE).
        // From now on datagrams this large go singly; the rest of the chunk is rebuilt.
        gso_max_datagram_ = d.size - 1;
        ++stats_.gso_fallbacks;
        rebuild = true;
        continue;
      }
      if (MayBeAsyncError(err) && failures_at_done == 0) {
        // Possibly a pending asynchronous error (an earlier ICMP message) that this message
        // merely reported; reading it cleared it, so retry the same message once.
        ++stats_.errors_ignored;
        ++failures_at_done;
        DrainErrorQueue();
        continue;
      }
      if (IsLossLikeError(err)) {
        // Refused twice: this message's own fate (no route, filtered). Drop its datagrams,
        // like the network would, and go on.
        ++stats_.errors_ignored;
        stats_.send_dropped += segs;
        failures_at_done = 0;
        ++offset;
        done += segs;
        continue;
      }
      const std::string what = "sendmmsg on " + Describe() + " to " + d.to.ToString() + " (" +
                               std::to_string(d.size) + " bytes)";
      if (err == EMSGSIZE || err == EACCES) {  // too big for the path; broadcast not enabled
        return InvalidArgumentError(what + ": " + ErrnoText(err));
      }
      return ErrnoError(what, err);
    }
  }
  return done;
}

uint32_t UdpChannel::BuildMessages(std::span<const TxDatagram> rest) {
  const uint32_t limit = static_cast<uint32_t>(std::min<size_t>(max_burst_, rest.size()));
  uint32_t d = 0;  // datagram index in rest
  uint32_t m = 0;  // message index
  while (d < limit) {
    const TxDatagram& first = rest[d];
    uint32_t segs = 1;
    if (gso_enabled_ && !first.single_frame && first.size > 0 && first.size <= gso_max_datagram_) {
      // Extend the run: same destination, same size; a shorter datagram may end it.
      uint32_t bytes = first.size;
      while (d + segs < limit && segs < kMaxGsoSegments) {
        const TxDatagram& next = rest[d + segs];
        if (!(next.to == first.to) || next.single_frame || next.size == 0 || next.size > first.size ||
            bytes + next.size > kMaxUdpPayload) {
          break;
        }
        bytes += next.size;
        ++segs;
        if (next.size < first.size) break;
      }
    }
    for (uint32_t i = 0; i < segs; ++i) {
      tx_iov_[d + i].iov_base = const_cast<uint8_t*>(rest[d + i].data);
      tx_iov_[d + i].iov_len = rest[d + i].size;
    }
    msghdr& h = tx_msgs_[m].msg_hdr;
    h.msg_iov = &tx_iov_[d];
    h.msg_iovlen = segs;
    tx_addr_[m].sin_port = htons(first.to.port);
    tx_addr_[m].sin_addr.s_addr = htonl(first.to.ipv4);
    if (segs > 1) {
      h.msg_control = tx_control_[m].bytes;
      h.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t segment = static_cast<uint16_t>(first.size);
      memcpy(CMSG_DATA(c), &segment, sizeof(segment));
    } else {
      h.msg_control = nullptr;
      h.msg_controllen = 0;
    }
    tx_segs_[m] = segs;
    d += segs;
    ++m;
  }
  return m;
}

size_t UdpChannel::DrainStaged(std::span<RxDatagram> batch) {
  size_t n = 0;
  while (n < batch.size() && staged_next_ < staged_count_) {
    const uint32_t m = staged_next_;
    const uint32_t len = rx_msgs_[m].msg_len;
    const uint32_t segment = staged_segment_[m] != 0 ? staged_segment_[m] : std::max(len, 1u);
    const uint32_t piece = std::min(segment, len - staged_offset_);  // 0 for an empty datagram
    RxDatagram& d = batch[n++];
    uint8_t* src = staging_.get() + size_t{m} * kGroBufferBytes + staged_offset_;
    // Lending keeps the copy's semantics: at most `capacity` bytes, longer ones flagged.
    d.size = std::min(piece, d.capacity);
    if (lend_) {
      d.data = src;
    } else if (d.size > 0) {
      memcpy(d.data, src, d.size);
    }
    d.truncated = piece > d.capacity || (rx_msgs_[m].msg_hdr.msg_flags & MSG_TRUNC) != 0;
    d.from = FromSockaddr(rx_addr_[m]);
    stats_.truncated += d.truncated ? 1 : 0;
    ++stats_.received;
    staged_offset_ += piece;
    if (staged_offset_ >= len) {
      ++staged_next_;
      staged_offset_ = 0;
    }
  }
  return n;
}

StatusOr<size_t> UdpChannel::RecvOnce(std::span<RxDatagram> batch) {
  last_recv_full_ = false;
  size_t got = 0;
  uint32_t n = 0;  // messages to ask for
  if (gro_enabled_) {
    // What the last recvmmsg left in the staging buffers goes first, without a syscall.
    got = DrainStaged(batch);
    if (got == batch.size() || (lend_ && got > 0)) {
      last_recv_full_ = got == batch.size() || staged_next_ < staged_count_;
      return got;
    }
    n = gro_slots_;
    for (uint32_t i = 0; i < n; ++i) {
      rx_msgs_[i].msg_hdr.msg_control = rx_control_[i].bytes;
      rx_msgs_[i].msg_hdr.msg_controllen = sizeof(Control::bytes);
    }
  } else {
    n = static_cast<uint32_t>(std::min<size_t>(max_burst_, batch.size()));
    for (uint32_t i = 0; i < n; ++i) {
      rx_iov_[i].iov_base = batch[i].data;
      rx_iov_[i].iov_len = batch[i].capacity;
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    rx_msgs_[i].msg_hdr.msg_flags = 0;
    rx_msgs_[i].msg_len = 0;
  }
  // A pending asynchronous error is cleared by the call that reports it, so a few retries
  // suffice; the bound keeps a pathological error stream from spinning here.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int r = recvmmsg(fd_, rx_msgs_.get(), n, MSG_DONTWAIT, nullptr);
    ++stats_.recv_syscalls;
    if (r >= 0) {
      last_recv_full_ = static_cast<uint32_t>(r) == n;
      if (gro_enabled_) {
        for (int i = 0; i < r; ++i) {
          // UDP_GRO: the message is a run of datagrams of this size (the last may be shorter).
          uint32_t segment = 0;
          msghdr& h = rx_msgs_[i].msg_hdr;
          for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
              int value = 0;
              memcpy(&value, CMSG_DATA(c), sizeof(value));
              segment = value > 0 ? static_cast<uint32_t>(value) : 0;
            }
          }
          if (segment >= rx_msgs_[i].msg_len) segment = 0;  // a single datagram
          staged_segment_[i] = segment;
          stats_.gro_messages += segment != 0 ? 1 : 0;
        }
        staged_count_ = static_cast<uint32_t>(r);
        staged_next_ = 0;
        staged_offset_ = 0;
        got += DrainStaged(batch.subspan(got));
        return got;
      }
      for (int i = 0; i < r; ++i) {
        RxDatagram& d = batch[static_cast<size_t>(i)];
        d.size = rx_msgs_[i].msg_len;
        d.truncated = (rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
        d.from = FromSockaddr(rx_addr_[i]);
        stats_.truncated += d.truncated ? 1 : 0;
      }
      stats_.received += static_cast<uint64_t>(r);
      return static_cast<size_t>(r);
    }
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return got;
    if (err == EINTR) continue;
    if (MayBeAsyncError(err)) {
      ++stats_.errors_ignored;
      DrainErrorQueue();
      continue;
    }
    if (got > 0) return got;  // deliver what we have; the error will come back next call
    return ErrnoError("recvmmsg on " + Describe(), err);
  }
  return got;
}

StatusOr<UdpChannel::WaitResult> UdpChannel::Wait(
    std::chrono::steady_clock::time_point deadline) {
  SWITCHML_ASSIGN_OR_RETURN(internal::WaitEvent e,
                            internal::WaitForEvent(fd_, wake_fd_, deadline, Describe()));
  if (e.kind == internal::WaitEvent::kTimeout) return WaitResult::kTimeout;
  if (e.kind == internal::WaitEvent::kWoken) return WaitResult::kWoken;
  // POLLERR: an asynchronous error is pending (sk_err or the IP_RECVERR queue). Clear the
  // queue here; RecvOnce reads and absorbs sk_err.
  if (e.revents & POLLERR) DrainErrorQueue();
  return WaitResult::kReadable;
}

StatusOr<size_t> UdpChannel::RecvBurst(std::span<RxDatagram> batch,
                                       std::chrono::microseconds timeout) {
  SWITCHML_RETURN_IF_ERROR(internal::CheckRecvBuffers(batch, Describe()));
  if (batch.empty()) return size_t{0};

  // Fast path: while traffic is flowing this is the only syscall.
  SWITCHML_ASSIGN_OR_RETURN(size_t got, RecvOnce(batch));
  if (got == 0) {
    if (timeout.count() <= 0) return size_t{0};
    const auto now = std::chrono::steady_clock::now();
    const auto deadline = now + timeout;
    if (busy_poll_.count() > 0) {
      // Spin on the socket (one non-blocking recvmmsg per round) before sleeping.
      const auto spin_end = std::min(deadline, now + busy_poll_);
      while (got == 0 && std::chrono::steady_clock::now() < spin_end) {
        SWITCHML_ASSIGN_OR_RETURN(got, RecvOnce(batch));
      }
      if (got == 0 && std::chrono::steady_clock::now() >= deadline) return size_t{0};
    }
    while (got == 0) {
      SWITCHML_ASSIGN_OR_RETURN(WaitResult why, Wait(deadline));
      if (why == WaitResult::kTimeout) return size_t{0};
      SWITCHML_ASSIGN_OR_RETURN(got, RecvOnce(batch));
      // After Wake() return even when empty; a readable event that yielded nothing (a
      // datagram dropped for a bad checksum, an absorbed error) just waits again.
      if (got > 0 || why == WaitResult::kWoken) break;
    }
  }
  // The batch is larger than one syscall moves and the last call came back full: take what
  // else is already queued, without waiting (not when lending: that would refill the staging
  // buffers under the datagrams just handed out).
  while (got < batch.size() && last_recv_full_ && !lend_) {
    SWITCHML_ASSIGN_OR_RETURN(size_t more, RecvOnce(batch.subspan(got)));
    if (more == 0) break;
    got += more;
  }
  return got;
}

StatusOr<size_t> UdpChannel::RecvBurstNoCopy(std::span<RxDatagram> batch,
                                             std::chrono::microseconds timeout) {
  lend_ = gro_enabled_;
  StatusOr<size_t> got = RecvBurst(batch, timeout);
  lend_ = false;
  return got;
}

Status UdpChannel::AttachReuseportCbpf(std::span<const sock_filter> program) {
  if (program.empty() || program.size() > BPF_MAXINSNS) {
    return InvalidArgumentError("AttachReuseportCbpf on " + Describe() + ": program length " +
                                std::to_string(program.size()) + " not in [1, " +
                                std::to_string(BPF_MAXINSNS) + "]");
  }
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program.size());
  prog.filter = const_cast<sock_filter*>(program.data());
  if (setsockopt(fd_, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) != 0) {
    const int err = errno;
    const std::string what = "setsockopt SO_ATTACH_REUSEPORT_CBPF (" +
                             std::to_string(program.size()) + " instructions) on " + Describe();
    // EINVAL: an invalid program, or a socket outside any reuseport group.
    if (err == EINVAL) return InvalidArgumentError(what + ": " + ErrnoText(err));
    return ErrnoError(what, err);
  }
  return OkStatus();
}

void UdpChannel::Wake() {
  const uint64_t one = 1;
  // EAGAIN would mean the counter is saturated: a wake-up is pending anyway.
  [[maybe_unused]] ssize_t ignored = write(wake_fd_, &one, sizeof(one));
}

StatusOr<uint32_t> LocalIpv4For(Endpoint remote) {
  const std::string what = "route to " + remote.ToString();
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(what + ": socket", errno);
  FdCloser closer(fd);
  // connect() on UDP only chooses a route and source address; nothing is sent. Port 0 is not
  // a valid destination, so any port stands in for it.
  Endpoint target = remote;
  if (target.port == 0) target.port = 9;
  const sockaddr_in sa = ToSockaddr(target);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) {
    return ErrnoError(what, errno);
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return ErrnoError(what + ": getsockname", errno);
  }
  return ntohl(local.sin_addr.s_addr);
}

std::vector<std::pair<std::string, uint64_t>> UdpChannel::TransportCounters() {
  uint32_t meminfo[SK_MEMINFO_VARS] = {};
  socklen_t len = sizeof(meminfo);
  if (getsockopt(fd_, SOL_SOCKET, SO_MEMINFO, meminfo, &len) != 0 ||
      len < sizeof(uint32_t) * (SK_MEMINFO_DROPS + 1)) {
    return {};
  }
  return {{"udp_socket_drops", meminfo[SK_MEMINFO_DROPS]}};
}

}  // namespace switchml::transport
