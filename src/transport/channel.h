// transport/channel.h — the one datagram interface every transport implements.
//
// The client's protocol engine and the switch's I/O loop are written against `Channel` once
// (the protocol engine exists once); kernel UDP (udp_channel.h), the in-process loopback
// fabric for tests (loopback.h), and later AF_XDP/DPDK plug in underneath.
//
// A Channel is an unconnected, addressed datagram endpoint with burst operations:
//
//   std::array<uint8_t, 4106> buf;
//   TxDatagram tx{buf.data(), len, switch_endpoint};
//   SWITCHML_ASSIGN_OR_RETURN(size_t sent, channel->SendBurst({&tx, 1}));
//   RxDatagram rx[32] = ...;  // each with data/capacity set
//   SWITCHML_ASSIGN_OR_RETURN(size_t got, channel->RecvBurst(rx, std::chrono::milliseconds(1)));
//
// Threading: a Channel is used by one thread at a time (the owning engine or switch thread);
// only Wake() may be called from another thread. Bursts exist because every syscall costs
// about 6 µs on the development machine: one call moves up to ~32 datagrams
// (docs/benchmarks.md#measured-on-the-development-machine).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "switchml/status.h"

namespace switchml::transport {

// An IPv4 address and UDP port, both in host byte order (a.b.c.d = a<<24 | ...).
struct Endpoint {
  uint32_t ipv4 = 0;
  uint16_t port = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
  std::string ToString() const;  // "127.0.0.1:48864"
};

// Parses "a.b.c.d" (IPv4 dotted quad, decimal octets without leading zeros) or "localhost"
// (127.0.0.1), with an optional ":port" in 0..65535; without one the port is `default_port`.
// No DNS. Errors: InvalidArgument quoting the text and naming the problem (empty, bad octet,
// port out of range, trailing junk).
StatusOr<Endpoint> ParseEndpoint(const std::string& text, uint16_t default_port);

struct TxDatagram {
  const uint8_t* data = nullptr;
  uint32_t size = 0;
  Endpoint to;
  // Send it in a frame of its own: never coalesced with its neighbours into one GSO message
  // (for peers that read frames themselves, e.g. a reference DPDK client over af_packet, and
  // would see one oversized frame where the wire would carry several).
  bool single_frame = false;
};

struct RxDatagram {
  uint8_t* data = nullptr;  // caller-owned buffer
  uint32_t capacity = 0;    // bytes available at data
  uint32_t size = 0;        // filled by RecvBurst; a datagram longer than capacity is truncated
  bool truncated = false;   // and flagged here
  Endpoint from;            // filled by RecvBurst
};

class Channel {
 public:
  virtual ~Channel() = default;

  // Queues datagrams for transmission, in order. Returns how many were accepted (a prefix of
  // `batch`); fewer than batch.size() means the transmit path is full for now and the caller
  // retries the rest later. Errors: Unavailable (socket error), InvalidArgument.
  virtual StatusOr<size_t> SendBurst(std::span<const TxDatagram> batch) = 0;

  // Receives up to batch.size() datagrams. Waits at most `timeout` for the first one
  // (zero = do not wait), then returns whatever is immediately available. Returns 0 on
  // timeout or after Wake(). Errors: Unavailable.
  virtual StatusOr<size_t> RecvBurst(std::span<RxDatagram> batch,
                                     std::chrono::microseconds timeout) = 0;

  // Like RecvBurst, but a channel that stages datagrams in its own memory (UdpChannel with GRO)
  // may hand them out in place instead of copying each into the caller's buffer: on return
  // batch[i].data may point into the channel, valid until the next receive call on this
  // channel. Sizes and truncation are as with copying (at most `capacity` bytes). The caller sets up its own buffers as for RecvBurst (used
  // where no staging is involved) and must point the batch back at them before every call
  // (PointAt below). The default implementation is RecvBurst.
  virtual StatusOr<size_t> RecvBurstNoCopy(std::span<RxDatagram> batch,
                                           std::chrono::microseconds timeout) {
    return RecvBurst(batch, timeout);
  }

  // The address peers send to in order to reach this channel.
  virtual Endpoint local_endpoint() const = 0;

  // Makes a RecvBurst blocked in another thread return early. Thread-safe. A Wake() while no
  // RecvBurst is waiting is remembered: the next RecvBurst that would wait returns at once
  // (so a wake-up racing with the start of a wait is never lost). Several Wake() calls before
  // one wait count once.
  virtual void Wake() = 0;

  // "udp 127.0.0.1:40001" — for logs and error messages.
  virtual std::string Describe() const = 0;

  // What the transport itself counted or dropped, below the datagrams it hands out, by stable
  // snake_case name prefixed with the transport ("raw_ring_drops", "udp_socket_drops"), for
  // operators. Called by the thread that uses the channel (it may make a system call); not for
  // the packet path. Default: none.
  virtual std::vector<std::pair<std::string, uint64_t>> TransportCounters() { return {}; }
};

// Points batch[i] at storage + i * capacity with that capacity: the caller's own receive
// buffers, before each RecvBurstNoCopy.
inline void PointAt(std::span<RxDatagram> batch, uint8_t* storage, uint32_t capacity) {
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].data = storage + i * size_t{capacity};
    batch[i].capacity = capacity;
  }
}

// Reorders `batch` into `out` so that datagrams to the same destination are adjacent (the order
// of first appearance of each destination, and the order among one destination's datagrams,
// are kept), which lets a GSO channel (udp_channel.h) send each destination's datagrams as one
// message. For a switch multicasting results to n workers this turns n·k single sends into n
// runs of k.
// `out` is resized to batch.size(); allocation only when it grows. Destinations beyond the
// first 256 distinct ones keep their relative order after them.
void GroupByDestination(std::span<const TxDatagram> batch, std::vector<TxDatagram>* out);

}  // namespace switchml::transport
