// kevlar — the intrusive FIFO of parked waiters behind kevlar::BasicUnpairedSemaphore.
//
// No counting logic lives here: the queue links, pops and unlinks nodes, and the node's state byte
// records which of the exclusive exits (grant, cancellation, close) took it out of the queue.
// Every mutation happens under the owning semaphore's slow-path lock.
#pragma once

#include <boost/assert.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstdint>

namespace kevlar::detail {

/// Where a waiter is in its life. Written only under the semaphore's slow-path lock; read without
/// the lock only by a cancellation handler deciding whether the semaphore may still be touched.
/// `granted`, `cancelled` and `aborted` are final: once set they never change.
enum class WaitState : std::uint8_t {
  idle,            ///< allocated, private to the initiating thread, not yet visible to releasers
  cancel_pending,  ///< a cancellation arrived before the node was linked (T3 completes it aborted)
  linked,          ///< in the queue, counted in the ledger's `queued`
  granted,         ///< popped by a release; the caller owns one permit once delivered
  cancelled,       ///< unlinked by its cancellation handler; owns nothing
  aborted,         ///< unlinked by close() or the semaphore's destruction; owns nothing
};

/// A parked waiter: list hooks, the state byte and the type-erased completion. The completion is
/// called exactly once, after the lock has been released, with the outcome of the wait; it must
/// not throw and must not call back into the semaphore under its lock.
struct WaitNode {
  using CompleteFn = void (*)(WaitNode* self, boost::system::error_code ec) noexcept;

  explicit WaitNode(CompleteFn complete) noexcept : complete_(complete) {}
  WaitNode(const WaitNode&) = delete;
  WaitNode& operator=(const WaitNode&) = delete;

  /// Hands the outcome to the waiter (schedules an asynchronous handler, or wakes a blocked
  /// thread). The node may be destroyed by another thread as soon as this starts.
  void complete(boost::system::error_code ec) noexcept { complete_(this, ec); }

  [[nodiscard]] WaitState state() const noexcept { return state_.load(std::memory_order_acquire); }
  void set_state(WaitState s) noexcept { state_.store(s, std::memory_order_release); }

  WaitNode* next_ = nullptr;
  WaitNode* prev_ = nullptr;

 private:
  std::atomic<WaitState> state_{WaitState::idle};
  CompleteFn complete_;
};

/// A doubly-linked intrusive FIFO of WaitNode. O(1) push, pop and unlink; never allocates.
/// Not synchronised: the owner serialises access with its slow-path lock.
class WaitQueue {
 public:
  WaitQueue() noexcept = default;
  WaitQueue(const WaitQueue&) = delete;
  WaitQueue& operator=(const WaitQueue&) = delete;

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }

  void push_back(WaitNode* n) noexcept {
    BOOST_ASSERT(n->next_ == nullptr && n->prev_ == nullptr);
    n->prev_ = tail_;
    if (tail_ != nullptr) {
      tail_->next_ = n;
    } else {
      head_ = n;
    }
    tail_ = n;
  }

  /// Removes and returns the oldest node, or nullptr.
  WaitNode* pop_front() noexcept {
    WaitNode* n = head_;
    if (n != nullptr) unlink(n);
    return n;
  }

  /// Removes `n`, which must be in this queue.
  void unlink(WaitNode* n) noexcept {
    if (n->prev_ != nullptr) {
      n->prev_->next_ = n->next_;
    } else {
      BOOST_ASSERT(head_ == n);
      head_ = n->next_;
    }
    if (n->next_ != nullptr) {
      n->next_->prev_ = n->prev_;
    } else {
      BOOST_ASSERT(tail_ == n);
      tail_ = n->prev_;
    }
    n->next_ = nullptr;
    n->prev_ = nullptr;
  }

  /// Detaches every node and returns the old head; the nodes stay chained through `next_` (in
  /// FIFO order) so that the caller can complete them after unlocking.
  WaitNode* take_all() noexcept {
    WaitNode* h = head_;
    head_ = nullptr;
    tail_ = nullptr;
    return h;
  }

 private:
  WaitNode* head_ = nullptr;
  WaitNode* tail_ = nullptr;
};

/// A singly-linked chain of nodes popped under the lock and completed after it (FIFO order).
/// Lives on the releaser's stack, so a release that wakes k waiters allocates nothing.
class WakeChain {
 public:
  void push_back(WaitNode* n) noexcept {
    n->next_ = nullptr;
    if (tail_ != nullptr) {
      tail_->next_ = n;
    } else {
      head_ = n;
    }
    tail_ = n;
  }

  /// Adopts a chain produced by WaitQueue::take_all().
  void adopt(WaitNode* head) noexcept {
    head_ = head;
    tail_ = nullptr;
  }

  /// Completes every node with `ec`, in order. Reads each node's successor before completing it,
  /// because a completed node may be destroyed by another thread at once.
  void complete_all(boost::system::error_code ec) noexcept {
    WaitNode* n = head_;
    head_ = nullptr;
    tail_ = nullptr;
    while (n != nullptr) {
      WaitNode* next = n->next_;
      n->next_ = nullptr;
      n->prev_ = nullptr;
      n->complete(ec);
      n = next;
    }
  }

 private:
  WaitNode* head_ = nullptr;
  WaitNode* tail_ = nullptr;
};

}  // namespace kevlar::detail
