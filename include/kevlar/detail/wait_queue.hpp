// kevlar — the intrusive queue of parked waiters behind kevlar::BasicUnpairedSemaphore.
//
// No counting logic lives here: the queue (a detail::IntrusiveList) links, pops and unlinks nodes,
// and the node's state byte records which of the exclusive exits (grant, cancellation, close) took
// it out of the queue. Every mutation happens under the owning semaphore's slow-path lock.
#pragma once

#include <kevlar/detail/intrusive_list.hpp>

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
struct WaitNode : IntrusiveListHook<WaitNode> {
  using CompleteFn = void (*)(WaitNode* self, boost::system::error_code ec) noexcept;

  explicit WaitNode(CompleteFn complete) noexcept : complete_(complete) {}
  WaitNode(const WaitNode&) = delete;
  WaitNode& operator=(const WaitNode&) = delete;

  /// Hands the outcome to the waiter (schedules an asynchronous handler, or wakes a blocked
  /// thread). The node may be destroyed by another thread as soon as this starts.
  void complete(boost::system::error_code ec) noexcept { complete_(this, ec); }

  [[nodiscard]] WaitState state() const noexcept { return state_.load(std::memory_order_acquire); }
  void set_state(WaitState s) noexcept { state_.store(s, std::memory_order_release); }

  /// The waiter's priority: higher waiters are granted first, equal ones in arrival order. Set
  /// before the node is parked, constant while it is linked.
  [[nodiscard]] std::int32_t priority() const noexcept { return priority_; }
  void set_priority(std::int32_t p) noexcept { priority_ = p; }

 private:
  std::atomic<WaitState> state_{WaitState::idle};
  std::int32_t priority_ = 0;  // in the padding after state_: the node stays 32 bytes
  CompleteFn complete_;
};

/// The parked waiters, highest priority first and in arrival order within a priority (O(1) pop and
/// unlink; a push walks back from the newest past the waiters of lower priority, O(1) when all
/// share one priority; never allocates). Not synchronised: the semaphore serialises access with its
/// slow-path lock. Waiters it takes out under the lock (a
/// release's grants, close()'s aborts) go to a second WaitQueue on the caller's stack, completed by
/// complete_all() once the lock is released, so a release that wakes k waiters allocates nothing.
using WaitQueue = IntrusiveList<WaitNode>;

/// Links `node` behind every waiter of its priority or higher, ahead of every lower one.
inline void link_by_priority(WaitQueue& queue, WaitNode* node) noexcept {
  WaitNode* after = queue.back();
  while (after != nullptr && after->priority() < node->priority()) after = WaitQueue::prev(after);
  queue.insert_before(after != nullptr ? WaitQueue::next(after) : queue.front(), node);
}

/// Completes every node of `nodes` with `ec`, oldest first, leaving `nodes` empty. Each node is
/// taken out of the list before it completes: a completed node may be destroyed by another thread
/// at once.
inline void complete_all(WaitQueue& nodes, boost::system::error_code ec) noexcept {
  while (WaitNode* n = nodes.pop_front()) n->complete(ec);
}

}  // namespace kevlar::detail
