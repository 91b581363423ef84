// transport/posix_util.h — internal to the transport module: errno text, errno as a Status,
// a descriptor closed on scope exit, the receive-buffer check and the wait for a socket or a
// wake-up (used by the kernel-socket channels and netif.cc).
#pragma once

#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "switchml/status.h"
#include "transport/channel.h"

namespace switchml::transport::internal {

// "Connection refused" for ECONNREFUSED; "errno N" for an unknown value.
inline std::string ErrnoText(int err) {
  const char* text = strerrordesc_np(err);
  return text != nullptr ? std::string(text) : "errno " + std::to_string(err);
}

// Unavailable: "<what>: <errno text>".
inline Status ErrnoError(const std::string& what, int err) {
  return UnavailableError(what + ": " + ErrnoText(err));
}

// InvalidArgument if a receive buffer of `batch` has null data with a nonzero capacity (the
// check every RecvBurst makes before touching the kernel), naming `channel`.
inline Status CheckRecvBuffers(std::span<const RxDatagram> batch, const std::string& channel) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].data == nullptr && batch[i].capacity > 0) {
      return InvalidArgumentError("RecvBurst on " + channel + ": buffer " + std::to_string(i) +
                                  " has null data and capacity " + std::to_string(batch[i].capacity));
    }
  }
  return OkStatus();
}

// What WaitForEvent saw: `fd` has events (their revents), the wake eventfd was written (the
// wake-up is consumed), or the deadline passed.
struct WaitEvent {
  enum Kind { kTimeout, kWoken, kReadable } kind = kTimeout;
  short revents = 0;
};

// Waits in ppoll(2) for `fd` or the eventfd `wake_fd` until `deadline` (EINTR retried): the
// blocking step of every kernel-socket channel's RecvBurst. Errors: Unavailable (ppoll failed),
// Internal (fd is not open), naming `channel`.
inline StatusOr<WaitEvent> WaitForEvent(int fd, int wake_fd,
                                        std::chrono::steady_clock::time_point deadline,
                                        const std::string& channel) {
  for (;;) {
    const auto remaining = deadline - std::chrono::steady_clock::now();
    if (remaining <= std::chrono::steady_clock::duration::zero()) return WaitEvent{};
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(remaining).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int r = ppoll(fds, 2, &ts, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("ppoll on " + channel, errno);
    }
    if (r == 0) continue;  // timed out: the deadline check above returns
    if (fds[1].revents != 0) {
      uint64_t count;
      // Consume the wake-up (EAGAIN is fine: nothing else reads this eventfd).
      [[maybe_unused]] ssize_t ignored = read(wake_fd, &count, sizeof(count));
      return WaitEvent{WaitEvent::kWoken, 0};
    }
    if (fds[0].revents & POLLNVAL) return InternalError("ppoll on " + channel + ": socket is not open");
    if (fds[0].revents != 0) return WaitEvent{WaitEvent::kReadable, fds[0].revents};
  }
}

// Closes a descriptor on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace switchml::transport::internal
