// kevlar — internal: the one intrusive list of kevlar's queues: the semaphore's waiters
// (detail/wait_queue.hpp), the deadline queue's armed and firing entries
// (detail/deadline_queue.hpp) and the trampoline's deliveries (detail/trampoline.hpp).
#pragma once

#include <boost/assert.hpp>

namespace kevlar::detail {

template <class Node>
class IntrusiveList;

/// The links a node of an IntrusiveList<Node> carries: `Node` derives from
/// IntrusiveListHook<Node> (publicly), so the list never allocates. A node whose links are null is
/// in no list; every list operation that takes a node out clears them. A class may derive from
/// several hooks (one per node type it is: kevlar's waiter operation is both a WaitNode and a
/// TrampolineJob) and so be in one list of each at a time.
template <class Node>
class IntrusiveListHook {
  friend class IntrusiveList<Node>;

  Node* list_next_ = nullptr;
  Node* list_prev_ = nullptr;
};

/// A doubly-linked intrusive FIFO: O(1) push_back, pop_front, insert_before and unlink of any
/// node, O(1) splice of a whole list; never allocates, never throws. The list owns nothing: the
/// nodes' storage is their owners'. Not synchronised: its owner serialises access (a lock, or a
/// single thread).
///
/// Debug builds check, here and only here, that a node entering a list is in none and that a node
/// leaving one is in it.
template <class Node>
class IntrusiveList {
 public:
  IntrusiveList() noexcept = default;
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  /// The oldest node, or nullptr.
  [[nodiscard]] Node* front() const noexcept { return head_; }
  /// The newest node, or nullptr.
  [[nodiscard]] Node* back() const noexcept { return tail_; }
  /// The node after `n` in its list, or nullptr.
  [[nodiscard]] static Node* next(const Node* n) noexcept { return hook(n).list_next_; }
  /// The node before `n` in its list, or nullptr.
  [[nodiscard]] static Node* prev(const Node* n) noexcept { return hook(n).list_prev_; }

  /// Appends `n`, which is in no list.
  void push_back(Node* n) noexcept {
    IntrusiveListHook<Node>& h = unlinked(n);
    h.list_prev_ = tail_;
    (tail_ != nullptr ? hook(tail_).list_next_ : head_) = n;
    tail_ = n;
  }

  /// Prepends `n`, which is in no list.
  void push_front(Node* n) noexcept {
    IntrusiveListHook<Node>& h = unlinked(n);
    h.list_next_ = head_;
    (head_ != nullptr ? hook(head_).list_prev_ : tail_) = n;
    head_ = n;
  }

  /// Forgets every node without touching them: for nodes destroyed with their container.
  void forget_all() noexcept {
    head_ = nullptr;
    tail_ = nullptr;
  }

  /// Inserts `n`, which is in no list, before `pos`, which is in this list (nullptr: at the back).
  void insert_before(Node* pos, Node* n) noexcept {
    if (pos == nullptr) {
      push_back(n);
      return;
    }
    IntrusiveListHook<Node>& h = unlinked(n);
    IntrusiveListHook<Node>& p = hook(pos);
    BOOST_ASSERT(p.list_prev_ != nullptr || head_ == pos);
    h.list_next_ = pos;
    h.list_prev_ = p.list_prev_;
    (p.list_prev_ != nullptr ? hook(p.list_prev_).list_next_ : head_) = n;
    p.list_prev_ = n;
  }

  /// Removes and returns the oldest node (its links cleared), or nullptr.
  Node* pop_front() noexcept {
    Node* n = head_;
    if (n == nullptr) return nullptr;
    IntrusiveListHook<Node>& h = hook(n);
    head_ = h.list_next_;
    (head_ != nullptr ? hook(head_).list_prev_ : tail_) = nullptr;
    h.list_next_ = nullptr;
    return n;
  }

  /// Removes `n`, which is in this list, and clears its links.
  void unlink(Node* n) noexcept {
    IntrusiveListHook<Node>& h = hook(n);
    BOOST_ASSERT(h.list_prev_ != nullptr ? hook(h.list_prev_).list_next_ == n : head_ == n);
    BOOST_ASSERT(h.list_next_ != nullptr ? hook(h.list_next_).list_prev_ == n : tail_ == n);
    (h.list_prev_ != nullptr ? hook(h.list_prev_).list_next_ : head_) = h.list_next_;
    (h.list_next_ != nullptr ? hook(h.list_next_).list_prev_ : tail_) = h.list_prev_;
    h.list_next_ = nullptr;
    h.list_prev_ = nullptr;
  }

  /// Moves every node of `other` to the back of this list, in order; `other` is left empty.
  void splice_back(IntrusiveList& other) noexcept {
    if (other.head_ == nullptr) return;
    hook(other.head_).list_prev_ = tail_;
    (tail_ != nullptr ? hook(tail_).list_next_ : head_) = other.head_;
    tail_ = other.tail_;
    other.head_ = nullptr;
    other.tail_ = nullptr;
  }

  /// Whether `n` is in this list (O(n): for assertions and tests).
  [[nodiscard]] bool contains(const Node* n) const noexcept {
    for (const Node* i = head_; i != nullptr; i = next(i)) {
      if (i == n) return true;
    }
    return false;
  }

 private:
  static IntrusiveListHook<Node>& hook(Node* n) noexcept { return *n; }
  static const IntrusiveListHook<Node>& hook(const Node* n) noexcept { return *n; }
  /// `n`'s hook, checked to be in no list: null links, and not the only node of this one.
  IntrusiveListHook<Node>& unlinked(Node* n) const noexcept {
    IntrusiveListHook<Node>& h = hook(n);
    BOOST_ASSERT(h.list_next_ == nullptr && h.list_prev_ == nullptr && head_ != n);
    return h;
  }

  Node* head_ = nullptr;
  Node* tail_ = nullptr;
};

}  // namespace kevlar::detail
