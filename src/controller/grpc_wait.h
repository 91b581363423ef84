// controller/grpc_wait.h — how a blocked gRPC handler waits (internal to the controller).
//
// Blocked handlers give up slightly before the call's deadline (1/10 of the time left, at most
// kMaxEarlyEnd): the server's status, which says how many workers had arrived, then reaches
// the client before its own deadline fires, and the caller is already withdrawn when the
// client sees the error and might retry.
#pragma once

#include <grpcpp/server_context.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "common/clock.h"
#include "controller/sync_coordinator.h"

namespace switchml::controller {

inline constexpr std::chrono::milliseconds kMaxEarlyEnd{100};

// When a blocked handler gives up, on our steady clock. gRPC reports "no deadline" as
// system_clock::time_point::max().
inline TimePoint HandlerDeadline(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  const auto sys_now = std::chrono::system_clock::now();
  // Anything beyond ten years counts as "none"; also keeps the subtraction below in range.
  if (deadline >= sys_now + std::chrono::hours(24 * 365 * 10)) return TimePoint::max();
  const Duration left = std::chrono::duration_cast<Duration>(deadline - sys_now);
  const Duration early = std::min<Duration>(left / 10, kMaxEarlyEnd);
  return Clock::now() + left - early;
}

// Waits until the handler deadline; cancelled when the client cancels or `also` returns true
// (polled every 10 ms from the waiting thread).
inline WaitControl WaitFor(grpc::ServerContext* context, std::function<bool()> also = {}) {
  WaitControl wait;
  wait.deadline = HandlerDeadline(*context);
  wait.cancelled = [context, also = std::move(also)] {
    return context->IsCancelled() || (also && also());
  };
  return wait;
}

}  // namespace switchml::controller
