// dataplane/handoff.h — lock-free handoffs between the switch's control side and its I/O
// threads, so that the packet path never waits on a lock (switch_server.h, "Threading").
//
//  * Mailbox<T>: one slot, the latest value wins. Post() (any thread) leaves a value and
//    destroys, on the posting thread, one that was never taken; Take() (one consumer) removes
//    the latest value, or finds none. Post is one allocation and one atomic exchange; Take is
//    one relaxed load when the slot is empty and one exchange when it is not. Neither waits.
//  * PushList<T>: a multi-producer, single-consumer pile. Push() (any thread) adds a value with
//    a compare-and-swap loop (lock-free: a failed CAS means another thread's push succeeded);
//    DrainAll() (one consumer at a time) removes every value at once with one exchange and
//    hands each to a function, most recently pushed first. No ABA problem: nothing ever removes
//    a single node.
//
//   Mailbox<std::shared_ptr<const JobTable>> next;     // control side -> one I/O thread
//   next.Post(table);                                    // on the registering thread
//   if (auto t = next.Take()) core.AdoptJobs(*t);        // on the I/O thread, between bursts
//
// Memory ordering: everything the poster / pusher wrote before Post / Push is visible to the
// thread that Take()s / drains that value (release on publication, acquire on removal).
// Thread-safety: as above; destroying either while another thread uses it is undefined.
#pragma once

#include <atomic>
#include <memory>
#include <utility>

namespace switchml::dataplane {

template <typename T>
class Mailbox {
 public:
  Mailbox() = default;
  ~Mailbox() { delete slot_.load(std::memory_order_acquire); }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Leaves `value` for the next Take(); a value posted earlier and not yet taken is destroyed
  // here, on the calling thread.
  void Post(T value) {
    T* old = slot_.exchange(new T(std::move(value)), std::memory_order_acq_rel);
    delete old;
  }

  // The value posted last since the previous Take(), or null if none was.
  std::unique_ptr<T> Take() {
    if (slot_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    return std::unique_ptr<T>(slot_.exchange(nullptr, std::memory_order_acquire));
  }

 private:
  std::atomic<T*> slot_{nullptr};
};

template <typename T>
class PushList {
 public:
  PushList() = default;
  ~PushList() {
    DrainAll([](T&) {});
  }
  PushList(const PushList&) = delete;
  PushList& operator=(const PushList&) = delete;

  void Push(T value) {
    Node* n = new Node{std::move(value), head_.load(std::memory_order_relaxed)};
    while (!head_.compare_exchange_weak(n->next, n, std::memory_order_release,
                                        std::memory_order_relaxed)) {
    }
  }

  // Whether a Push may be waiting (one relaxed load; for polling before DrainAll).
  bool empty() const { return head_.load(std::memory_order_relaxed) == nullptr; }

  // Removes every value pushed so far, calls f(value&) on each (newest first), then destroys
  // them on this thread. Returns how many there were.
  template <typename F>
  size_t DrainAll(F&& f) {
    Node* n = head_.exchange(nullptr, std::memory_order_acquire);
    size_t count = 0;
    while (n != nullptr) {
      std::unique_ptr<Node> owned(n);
      n = n->next;
      f(owned->value);
      ++count;
    }
    return count;
  }

 private:
  struct Node {
    T value;
    Node* next;
  };
  std::atomic<Node*> head_{nullptr};
};

}  // namespace switchml::dataplane
