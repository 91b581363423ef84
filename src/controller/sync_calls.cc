#include "controller/sync_calls.h"

#include <algorithm>
#include <utility>

namespace switchml::controller {

CallTimer::CallTimer() : thread_([this] { Loop(); }) {}

CallTimer::~CallTimer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
    when_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t CallTimer::Schedule(TimePoint when, std::function<void()> fn) {
  if (when == TimePoint::max()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return 0;
  const uint64_t id = next_id_++;
  const bool earliest = queue_.empty() || when < queue_.begin()->first.first;
  queue_.emplace(std::make_pair(when, id), std::move(fn));
  when_.emplace(id, when);
  if (earliest) cv_.notify_all();
  return id;
}

void CallTimer::Cancel(uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return;
  queue_.erase(std::make_pair(it->second, id));
  when_.erase(it);
}

size_t CallTimer::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void CallTimer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const TimePoint next = queue_.begin()->first.first;
    if (Clock::now() < next) {
      cv_.wait_until(lock, next);
      continue;
    }
    auto node = queue_.extract(queue_.begin());
    when_.erase(node.key().second);
    lock.unlock();
    node.mapped()();
    lock.lock();
  }
}

std::string PeerHost(const std::string& peer) {
  // "ipv4:1.2.3.4:port", "ipv6:[::1]:port"; anything else (e.g. "unix:/path") is its own key.
  const size_t colon = peer.rfind(':');
  const size_t first = peer.find(':');
  if (colon == std::string::npos || colon == first) return peer;
  return peer.substr(0, colon);
}

TimePoint HandlerDeadline(const grpc::ServerContextBase& context) {
  const auto deadline = context.deadline();
  const auto sys_now = std::chrono::system_clock::now();
  // Anything beyond ten years counts as "none"; also keeps the subtraction below in range.
  if (deadline >= sys_now + std::chrono::hours(24 * 365 * 10)) return TimePoint::max();
  const Duration left = std::chrono::duration_cast<Duration>(deadline - sys_now);
  const Duration early = std::min<Duration>(left / 10, kMaxEarlyEnd);
  return Clock::now() + left - early;
}

void SyncCallReactor::Start(const std::function<SyncCoordinator::Ticket(SyncDone)>& start) {
  // The callback may run before `start` returns (the call completes or is refused at once),
  // or on another thread at any time after; `this` stays valid until Finish has been called
  // and gRPC has called OnDone, which cannot happen before the method returns the reactor.
  const SyncCoordinator::Ticket ticket =
      start([this](SyncResult result) { Complete(std::move(result)); });
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    ticket_ = ticket;
    timer_id_ = timer_->Schedule(deadline_, [sync = sync_, ticket] {
      sync->GiveUp(ticket, GiveUpReason::kDeadline);
    });
    cancel = cancelled_;
  }
  if (cancel) sync_->GiveUp(ticket, GiveUpReason::kCancelled);
}

void SyncCallReactor::FinishNow(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  Finish(status);
}

void SyncCallReactor::OnCancel() {
  SyncCoordinator::Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    if (ticket_ == SyncCoordinator::kFinished) {
      cancelled_ = true;  // Start gives up once it knows the ticket
      return;
    }
    ticket = ticket_;
  }
  sync_->GiveUp(ticket, GiveUpReason::kCancelled);
}

void SyncCallReactor::Complete(SyncResult result) {
  uint64_t timer_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    timer_id = timer_id_;
  }
  timer_->Cancel(timer_id);
  const grpc::Status status = reply_(std::move(result));
  Finish(status);  // `this` may be deleted from here on
}

}  // namespace switchml::controller
