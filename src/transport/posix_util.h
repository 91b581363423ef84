// transport/posix_util.h — internal to the transport module: errno text, errno as a Status,
// a descriptor closed on scope exit, the receive-buffer check (used by the kernel-socket
// channels and netif.cc).
#pragma once

#include <string.h>
#include <unistd.h>

#include <string>
#include <utility>

#include <span>

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
