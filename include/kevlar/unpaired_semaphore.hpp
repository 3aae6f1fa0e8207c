// kevlar — UnpairedSemaphore: a signal-only asynchronous semaphore for Boost.Asio.
//
// "Unpaired": the code that releases never waited on the semaphore (a completing call hands its
// slot to a queued caller, a producer signals consumers). "Signal-only": the semaphore carries
// wake-ups; whatever the permits stand for is owned by the caller. The counting word is a policy
// (a Ledger), so the concurrency limiter can keep {in use, queued, closed} in its own word while
// reusing this queue, its cancellation and its executor rules. See docs/semaphore.md.
#pragma once

#include <kevlar/detail/spin_lock.hpp>
#include <kevlar/detail/trampoline.hpp>
#include <kevlar/detail/wait_queue.hpp>
#include <kevlar/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/allocator.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/execution/relationship.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/require.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/assert.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <boost/throw_exception.hpp>

#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace kevlar {

/// What a ledger decides, under the semaphore's slow-path lock, for an acquire that could not take
/// a permit lock-free.
enum class Admission : std::uint8_t {
  granted,   ///< T3': a permit appeared since the lock-free attempt; the caller now owns it
  queued,    ///< T3: the ledger counted one more queued waiter; the semaphore links it
  rejected,  ///< T2: the ledger refuses to queue (e.g. a full queue); see Ledger::rejection()
  closed,    ///< the ledger is closed; the acquire completes with kevlar::errc::closed
};

/// Result of a ledger's lock-free release attempt.
enum class ReleaseStep : std::uint8_t {
  done,       ///< T4: the permits were returned to the word; nobody was waiting
  refused,    ///< the release would overflow the word; nothing changed
  contended,  ///< waiters are queued: the release must take the lock and hand permits over (T5)
};

/// Observable state of a ledger, read with a single load (the fields are always coherent).
struct LedgerSnapshot {
  std::uint32_t available = 0;  ///< permits (tokens) free to take
  std::uint32_t queued = 0;     ///< waiters linked in the queue
  bool closed = false;          ///< close() was called
};

/// The policy kevlar::BasicUnpairedSemaphore delegates its counting to.
///
/// A ledger owns one atomic word holding at least {free permits, queued waiters, closed}. Lock-free
/// members may run concurrently with anything; `*_locked` members run only under the semaphore's
/// slow-path lock, which serialises every change of `queued` (so a lock-free member can rely on
/// `queued` not changing under it without its CAS failing). The contract that makes wake-ups
/// impossible to lose: a ledger never reports free permits while it counts queued waiters, and
/// try_release() never returns `done` while waiters are queued.
template <class L>
concept Ledger = requires(L& l, const L& cl, std::uint32_t n) {
  { l.try_acquire() }
  noexcept->std::same_as<bool>;  // T1
  { l.try_release(n) }
  noexcept->std::same_as<ReleaseStep>;  // T4, or "take the lock"
  { l.admit_locked() }
  noexcept->std::same_as<Admission>;  // T2 / T3 / T3'
  { l.release_locked(n) }
  noexcept->std::same_as<std::int64_t>;  // T5: waiters to wake, -1 = refused
  { l.cancel_locked() }
  noexcept;  // T6: one queued waiter left
  { l.close_locked() }
  noexcept->std::same_as<std::uint32_t>;  // T7: returns former queued
  { cl.snapshot() }
  noexcept->std::same_as<LedgerSnapshot>;
  { L::rejection() }
  noexcept->std::same_as<boost::system::error_code>;
};

/// The ledger of the plain unpaired semaphore: signals accumulate as tokens and waits consume
/// them. One 64-bit word: tokens in bits 0-31, queued waiters in bits 32-62, closed in bit 63.
///
/// Invariant (INV3): queued > 0 implies tokens == 0. Only admit_locked() raises `queued`, and only
/// when there are no tokens; try_release() adds tokens only while `queued` is 0; release_locked()
/// gives tokens to queued waiters before it keeps any. Releases keep working after close()
/// (tokens still accumulate), acquires do not.
///
/// Thread-safety: every member is safe to call concurrently, subject to the `_locked` rule above.
class TokenLedger {
 public:
  using count_type = std::uint32_t;

  /// The most tokens the word can hold; a release that would pass it is refused.
  static constexpr count_type max_count = 0xFFFF'FFFFu;

  /// Starts with `initial` tokens (0 allowed).
  explicit TokenLedger(count_type initial = 0) noexcept : word_(initial) {}
  TokenLedger(const TokenLedger&) = delete;
  TokenLedger& operator=(const TokenLedger&) = delete;

  /// T1: takes one token if there is one and the ledger is open. Acquire ordering on success, so
  /// the releaser's prior writes are visible to the taker.
  bool try_acquire() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & tokens_mask) == 0 || (w & closed_bit) != 0) return false;
      if (word_.compare_exchange_weak(w, w - 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        return true;
      }
    }
  }

  /// T4: adds `n` tokens if nobody is queued. Release ordering on success.
  ReleaseStep try_release(count_type n) noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & queued_mask) != 0) return ReleaseStep::contended;
      if (tokens(w) > max_count - n) return ReleaseStep::refused;
      if (word_.compare_exchange_weak(w, w + n, std::memory_order_release,
                                      std::memory_order_relaxed)) {
        return ReleaseStep::done;
      }
    }
  }

  /// Under the lock: T3' (take a token that appeared), T3 (count one more waiter) or closed.
  Admission admit_locked() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & closed_bit) != 0) return Admission::closed;
      const bool take = tokens(w) != 0;
      const std::uint64_t next = take ? w - 1 : w + queued_one;
      if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return take ? Admission::granted : Admission::queued;
      }
    }
  }

  /// Under the lock, T5: of `n` signals, min(n, queued) go to queued waiters (queued drops by as
  /// many) and the rest become tokens. Returns how many waiters the caller must pop and wake, or
  /// -1 if the remaining tokens would overflow (nothing changed).
  ///
  /// While queued > 0 no lock-free member can change the word (try_acquire needs a token, which
  /// INV3 rules out; try_release needs queued == 0) and every other writer holds the lock, so the
  /// value loaded under the lock is exact and a plain release store replaces the CAS.
  std::int64_t release_locked(count_type n) noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      const count_type q = queued(w);
      const count_type k = q < n ? q : n;
      const count_type rest = n - k;
      if (tokens(w) > max_count - rest) return -1;
      const std::uint64_t next = w - static_cast<std::uint64_t>(k) * queued_one + rest;
      if (q != 0) {
        word_.store(next, std::memory_order_release);
        return k;
      }
      if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return k;
      }
    }
  }

  /// Under the lock, T6: one queued waiter left without a token. queued > 0 here, so the word
  /// cannot change under us (see release_locked()) and a plain store suffices.
  void cancel_locked() noexcept {
    const std::uint64_t w = word_.load(std::memory_order_relaxed);
    word_.store(w - queued_one, std::memory_order_release);
  }

  /// Under the lock, T7: marks the ledger closed and forgets every queued waiter.
  std::uint32_t close_locked() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t next = (w & tokens_mask) | closed_bit;
      if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return queued(w);
      }
    }
  }

  /// One load; never torn.
  [[nodiscard]] LedgerSnapshot snapshot() const noexcept {
    const std::uint64_t w = word_.load(std::memory_order_acquire);
    return {tokens(w), queued(w), (w & closed_bit) != 0};
  }

  /// The token ledger never refuses to queue; this is what a rejecting ledger would report.
  static boost::system::error_code rejection() noexcept { return {}; }

 private:
  static constexpr std::uint64_t tokens_mask = 0xFFFF'FFFFull;
  static constexpr std::uint64_t queued_one = 1ull << 32;
  static constexpr std::uint64_t queued_mask = 0x7FFF'FFFFull << 32;
  static constexpr std::uint64_t closed_bit = 1ull << 63;

  static count_type tokens(std::uint64_t w) noexcept { return static_cast<count_type>(w); }
  static count_type queued(std::uint64_t w) noexcept {
    return static_cast<count_type>((w & queued_mask) >> 32);
  }

  std::atomic<std::uint64_t> word_;
};

static_assert(Ledger<TokenLedger>);

namespace detail {

/// Bytes reserved in every waiter operation for the executor's wrapper around its delivery
/// (an io_context executor_op holding one pointer and one allocator is 40 bytes on LP64).
inline constexpr std::size_t delivery_reserve_size = 64;

/// Storage reserved inside a waiter operation at park time, so that handing the waiter its result
/// (T5, T6, T7) allocates nothing: the executor builds its queued wrapper here.
struct DeliveryReserve {
  alignas(std::max_align_t) unsigned char bytes[delivery_reserve_size];
  bool in_use = false;
};

/// An allocator that serves one allocation from a DeliveryReserve and falls back to Asio's
/// recycling allocator when the request does not fit or the reserve is taken. Executors that honour
/// the `execution::allocator` property (io_context's, strands over it) use it for the wrapper they
/// queue; type-erased executors ignore the property and use their own recycling allocation.
template <class T>
class ReserveAllocator {
 public:
  using value_type = T;

  explicit ReserveAllocator(DeliveryReserve* reserve) noexcept : reserve_(reserve) {}
  template <class U>
  ReserveAllocator(
      const ReserveAllocator<U>& other) noexcept  // NOLINT(google-explicit-constructor)
      : reserve_(other.reserve_) {}

  T* allocate(std::size_t n) {
    if (!reserve_->in_use && n * sizeof(T) <= delivery_reserve_size &&
        alignof(T) <= alignof(std::max_align_t)) {
      reserve_->in_use = true;
      return reinterpret_cast<T*>(reserve_->bytes);
    }
    return boost::asio::recycling_allocator<T>().allocate(n);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (static_cast<void*>(p) == static_cast<void*>(reserve_->bytes)) {
      reserve_->in_use = false;
      return;
    }
    boost::asio::recycling_allocator<T>().deallocate(p, n);
  }

  template <class U>
  bool operator==(const ReserveAllocator<U>& other) const noexcept {
    return reserve_ == other.reserve_;
  }

 private:
  template <class>
  friend class ReserveAllocator;
  DeliveryReserve* reserve_;
};

/// A waiter of the blocking acquire(): the node lives on the blocked thread's stack and the
/// completion wakes that thread (the only completion that runs on the completing thread: it runs
/// no user code).
class BlockingWaiter final : public WaitNode {
 public:
  BlockingWaiter() noexcept : WaitNode(&BlockingWaiter::on_complete) {}

  boost::system::error_code wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    return ec_;
  }

 private:
  static void on_complete(WaitNode* node, boost::system::error_code ec) noexcept {
    auto* self = static_cast<BlockingWaiter*>(node);
    // Notify under the lock: the waiter cannot return (and destroy this node) before we unlock.
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->ec_ = ec;
    self->done_ = true;
    self->cv_.notify_one();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  boost::system::error_code ec_;
  bool done_ = false;
};

}  // namespace detail

/// An asynchronous, unpaired, signal-only semaphore whose counting word is the policy `L`.
///
/// Waiters queue in FIFO order; a release hands its permits to the oldest waiters first (direct
/// handoff: a permit is never free while anyone waits, so a newcomer cannot overtake a queued
/// waiter). A woken waiter resumes on its own associated executor, never inside release(),
/// close() or a cancellation handler. (kevlar's concurrency limiter opts its own waits into
/// detail/trampoline.hpp: the engine runs them just before the completion that released returns,
/// still never inside those calls.)
///
/// Lifetime: the semaphore must outlive every operation started on it, including completions
/// queued on an executor but not yet run (a grant whose completion is destroyed undelivered
/// returns its permit to this semaphore). Destroying it closes it first: every queued waiter
/// completes once with kevlar::errc::closed.
///
/// Thread-safety: every member function may be called concurrently from any thread, except the
/// destructor. A cancellation must be emitted where Asio allows it for the handler's slot: on the
/// waiter's own executor (or strand), serialised with its completion.
template <Ledger L>
class BasicUnpairedSemaphore {
 public:
  /// The counting policy.
  using ledger_type = L;
  /// The executor used for handlers that have no associated executor.
  using executor_type = boost::asio::any_io_executor;
  /// Permit counts.
  using count_type = std::uint32_t;

  /// Constructs with the ledger built from `args` (for TokenLedger: the initial token count, 0 if
  /// none). Handlers without an associated executor complete on Asio's system executor.
  template <class... Args>
  requires std::constructible_from<L, Args...>
  explicit BasicUnpairedSemaphore(Args&&... args)
      : default_ex_(boost::asio::system_executor()), ledger_(std::forward<Args>(args)...) {}

  /// Constructs with the ledger built from `args`; handlers without an associated executor
  /// complete on `ex`.
  template <class... Args>
  requires std::constructible_from<L, Args...>
  explicit BasicUnpairedSemaphore(const executor_type& ex, Args&&... args)
      : default_ex_(ex), ledger_(std::forward<Args>(args)...) {}

  BasicUnpairedSemaphore(const BasicUnpairedSemaphore&) = delete;
  BasicUnpairedSemaphore& operator=(const BasicUnpairedSemaphore&) = delete;

  /// Closes the semaphore (see close()). Operations must not be started concurrently with, or
  /// after, destruction, and granted completions still queued on executors must have run or been
  /// destroyed before (see the class notes).
  ~BasicUnpairedSemaphore() { close(); }

  /// The executor for handlers without an associated executor. Thread-safe.
  [[nodiscard]] executor_type get_executor() const noexcept { return default_ex_; }

  /// T1: takes a permit if one is free and nobody is queued (so it never overtakes a waiter) and
  /// the semaphore is open. Lock-free, allocation-free, wait-free but for CAS retries.
  /// Thread-safe. Acquire ordering: the releaser's prior writes are visible after success.
  [[nodiscard]] bool try_acquire() noexcept { return ledger_.try_acquire(); }

  /// Adds `n` permits from any thread (the caller need not have acquired anything): the oldest
  /// min(n, queued) waiters are granted one each and scheduled on their executors (never run
  /// inline); the rest accumulate. Releases keep working after close().
  ///
  /// Never allocates, never throws. Lock-free when nobody is queued; takes the slow-path lock to
  /// hand over to waiters. Returns false, changing nothing, if the permits the ledger would keep
  /// would overflow it (for TokenLedger: more than TokenLedger::max_count tokens); `n == 0` does
  /// nothing and returns true. Release ordering: writes before release() happen before the
  /// grantee's completion or a later successful try_acquire().
  bool release(count_type n = 1) noexcept {
    if (n == 0) return true;
    switch (ledger_.try_release(n)) {
      case ReleaseStep::done:
        return true;
      case ReleaseStep::refused:
        return false;
      case ReleaseStep::contended:
        break;
    }
    detail::WakeChain granted;
    {
      std::lock_guard<detail::SpinLock> lock(lock_);
      const std::int64_t k = ledger_.release_locked(n);
      if (k < 0) return false;
      for (std::int64_t i = 0; i < k; ++i) {
        detail::WaitNode* w = queue_.pop_front();
        BOOST_ASSERT(w != nullptr);
        w->set_state(detail::WaitState::granted);
        granted.push_back(w);
      }
    }
    granted.complete_all({});
    return true;
  }

  /// Starts an asynchronous wait for one permit.
  ///
  /// Completion signature: `void(boost::system::error_code)`. Success means the caller owns one
  /// permit (give it back with release() when the work it guards is done). Errors:
  /// `kevlar::errc::closed` if the semaphore is or gets closed (or destroyed) before the grant;
  /// `boost::asio::error::operation_aborted` if cancelled before the grant; for ledgers that
  /// reject, their rejection() code.
  ///
  /// Any completion token: a callback, `use_awaitable`, `deferred` (the default, so that
  /// `co_await sem.async_acquire()` works in a coroutine), `use_future`, `as_tuple(...)`, ...
  /// The handler is never invoked from inside this function, release(), close() or a cancellation
  /// handler: it runs on its associated executor (the semaphore's executor if it has none),
  /// submitted with the continuation relationship (defer); a permit available at once is
  /// delivered the same way.
  ///
  /// Cancellation: through the handler's associated cancellation slot; terminal, partial and total
  /// are all honoured while the wait is queued (it completes with operation_aborted, consumes
  /// nothing and leaves the queue order of the others unchanged) and all ignored once the permit
  /// has been granted (the wait completes with success and the caller owns the permit). Emit on
  /// the waiter's executor, serialised with its completion (Asio's slot rule).
  ///
  /// Allocation: one operation block from the handler's associated allocator (Asio's recycling
  /// allocator by default: no malloc after warm-up), holding the queue node and storage for the
  /// delivery wrapper; installing the cancellation handler may allocate, as the slot decides
  /// (Asio's cancellation_slot recycles its memory per thread inside a running io_context and
  /// allocates outside one). Both happen before the ledger or the queue change: if either throws
  /// `std::bad_alloc`, the exception leaves this function (the handler is destroyed without being
  /// invoked) and permits and queue are as before. Nothing allocates between parking and delivery
  /// when the handler's executor honours the allocator property (io_context executors and
  /// strands) or is an any_io_executor wrapping an io_context executor (delivered to that
  /// executor directly). The slot may be any type with Asio's slot interface (`is_connected`,
  /// `emplace`, `clear`), as the handler's `cancellation_slot_type` names it.
  ///
  /// Thread-safety: may be called from any thread concurrently with every other member.
  template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                CompletionToken = boost::asio::deferred_t>
  auto async_acquire(CompletionToken&& token = CompletionToken()) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        Initiation{this}, token);
  }

  /// Blocks the calling thread until it owns a permit, sharing the FIFO with asynchronous
  /// waiters. Throws `boost::system::system_error` with `kevlar::errc::closed` if the semaphore is
  /// or gets closed first (or with the ledger's rejection code), and with
  /// `boost::asio::error::operation_aborted` if `stop` is requested first (see acquire_or_error).
  /// Allocates nothing. Do not call it on a thread whose executor must run to release a permit.
  /// Thread-safe.
  void acquire(std::stop_token stop = {}) {
    const boost::system::error_code ec = acquire_or_error(std::move(stop));
    if (ec) boost::throw_exception(boost::system::system_error(ec, "kevlar::UnpairedSemaphore"));
  }

  /// Blocking acquire reporting failure as an error code instead of throwing; see acquire().
  ///
  /// Cancellation: if `stop` is requested before the call, it returns `operation_aborted` without
  /// taking a permit; if it is requested while the caller waits in the queue (from any thread),
  /// the caller leaves the queue — consuming nothing, the others keeping their order — and gets
  /// `operation_aborted`. A request that loses the race with a grant changes nothing: the caller
  /// owns the permit it was given.
  [[nodiscard]] boost::system::error_code acquire_or_error(std::stop_token stop = {}) {
    if (stop.stop_requested()) return boost::asio::error::operation_aborted;
    if (ledger_.try_acquire()) return {};
    detail::BlockingWaiter waiter;
    {
      std::lock_guard<detail::SpinLock> lock(lock_);
      switch (ledger_.admit_locked()) {
        case Admission::granted:
          return {};
        case Admission::closed:
          return make_error_code(errc::closed);
        case Admission::rejected:
          return L::rejection();
        case Admission::queued:
          queue_.push_back(&waiter);
          waiter.set_state(detail::WaitState::linked);
          break;
      }
    }
    if (!stop.stop_possible()) return waiter.wait();
    // Declared after the waiter: its destructor waits for a callback running on another thread,
    // so the waiter outlives every use the callback makes of it.
    std::stop_callback on_stop(stop, [this, &waiter]() noexcept { cancel_wait(&waiter); });
    return waiter.wait();
  }

  /// T7: refuses every later acquire (they complete with kevlar::errc::closed) and completes every
  /// queued waiter exactly once with kevlar::errc::closed, on its own executor, never inline.
  /// Permits already granted stay granted; release() keeps working. Idempotent, noexcept,
  /// allocation-free. Thread-safe.
  void close() noexcept {
    detail::WakeChain aborted;
    {
      std::lock_guard<detail::SpinLock> lock(lock_);
      ledger_.close_locked();
      detail::WaitNode* head = queue_.take_all();
      for (detail::WaitNode* n = head; n != nullptr; n = n->next_) {
        n->set_state(detail::WaitState::aborted);
      }
      aborted.adopt(head);
    }
    aborted.complete_all(make_error_code(errc::closed));
  }

  /// A coherent view of {available permits, queued waiters, closed}, from one atomic load.
  /// Thread-safe; a concurrent snapshot may be stale but is never torn.
  [[nodiscard]] LedgerSnapshot snapshot() const noexcept { return ledger_.snapshot(); }
  /// Permits free to take now. Thread-safe (see snapshot()).
  [[nodiscard]] count_type available() const noexcept { return ledger_.snapshot().available; }
  /// Waiters queued now. Thread-safe (see snapshot()).
  [[nodiscard]] count_type waiting() const noexcept { return ledger_.snapshot().queued; }
  /// True once close() has run. Thread-safe.
  [[nodiscard]] bool is_closed() const noexcept { return ledger_.snapshot().closed; }

  /// The counting policy, for owners that build on the semaphore (the concurrency limiter).
  /// Its `_locked` members must not be called from outside: they need the slow-path lock.
  [[nodiscard]] L& ledger() noexcept { return ledger_; }
  [[nodiscard]] const L& ledger() const noexcept { return ledger_; }

 private:
  struct Initiation {
    using executor_type = BasicUnpairedSemaphore::executor_type;
    BasicUnpairedSemaphore* self;
    [[nodiscard]] executor_type get_executor() const noexcept { return self->default_ex_; }
    template <class Handler>
    void operator()(Handler&& handler) const {
      self->start_acquire(std::forward<Handler>(handler));
    }
  };

  template <class Handler>
  class AcquireOp;

  /// Cancellation arbitration (T6). Leaves the node alone unless it is still queued; never
  /// touches the semaphore once the node reached a final state (the semaphore may be gone).
  void cancel_wait(detail::WaitNode* node) noexcept {
    using detail::WaitState;
    const WaitState s = node->state();
    if (s != WaitState::idle && s != WaitState::linked) return;
    {
      std::lock_guard<detail::SpinLock> lock(lock_);
      switch (node->state()) {
        case WaitState::idle:
          node->set_state(WaitState::cancel_pending);
          return;
        case WaitState::linked:
          queue_.unlink(node);
          ledger_.cancel_locked();
          node->set_state(WaitState::cancelled);
          break;
        default:
          return;
      }
    }
    node->complete(boost::asio::error::operation_aborted);
  }

  template <class Handler>
  void start_acquire(Handler&& handler);

  executor_type default_ex_;
  // The ledger word is written by every fast path: keep it alone on its cache line.
  alignas(64) L ledger_;
  // Slow-path state, touched only to park, hand off, cancel and close.
  alignas(64) detail::SpinLock lock_;
  detail::WaitQueue queue_;
};

/// One queued async_acquire: the queue node, the handler, a work-tracked executor and the storage
/// the delivery wrapper needs, in one block from the handler's associated allocator.
template <Ledger L>
template <class Handler>
class BasicUnpairedSemaphore<L>::AcquireOp final : public detail::WaitNode,
                                                   public detail::TrampolineJob {
  using AssocEx = boost::asio::associated_executor_t<Handler, executor_type>;
  using Slot = boost::asio::associated_cancellation_slot_t<Handler>;

  // The executor deliveries are submitted to: never blocking, as a continuation (defer), with
  // the wrapper built in the reserve.
  template <class Ex>
  static auto make_delivery_executor(const Ex& ex, detail::DeliveryReserve* reserve) {
    namespace exec = boost::asio::execution;
    return boost::asio::prefer(boost::asio::require(ex, exec::blocking.never),
                               exec::relationship.continuation,
                               exec::allocator(detail::ReserveAllocator<void>(reserve)));
  }
  template <class Ex>
  using DeliveryExOf = decltype(make_delivery_executor(std::declval<const Ex&>(), nullptr));
  // Outstanding work, counted only while the operation waits (a ready grant is counted by the
  // executor's own queue). Made from the final executor: every copy of a tracked executor counts
  // work again, an atomic increment and decrement per temporary.
  template <class Ex>
  using WorkExOf = std::decay_t<decltype(boost::asio::prefer(
      std::declval<const DeliveryExOf<Ex>&>(), boost::asio::execution::outstanding_work.tracked))>;

  // A type-erased any_io_executor ignores the allocator property: a delivery through it would
  // allocate twice (its function wrapper and the io_context's operation). When it wraps an
  // io_context executor (coroutines, kevlar's own executions), deliveries go to that executor
  // directly instead, with the wrapper in the reserve.
  static constexpr bool erased = std::is_same_v<AssocEx, boost::asio::any_io_executor>;
  using IoEx = boost::asio::io_context::executor_type;
  // kevlar's own queue waits (the engine resumes the execution) may be delivered by the engine's
  // trampoline on the releasing thread; a user's handler is always delivered through its executor.
  static constexpr bool inline_grant = requires { requires Handler::kevlar_inline_grant; };

  /// Where deliveries of this op go: the delivery executor made from `Ex` and, while the op is
  /// linked, the work it counts there.
  template <class Ex>
  struct Target {
    std::optional<DeliveryExOf<Ex>> ex;
    std::optional<WorkExOf<Ex>> work;
    void track() {
      work.emplace(boost::asio::prefer(*ex, boost::asio::execution::outstanding_work.tracked));
    }
  };
  struct NoTarget {};

  using HandlerAlloc = boost::asio::associated_allocator_t<Handler>;
  using BaseAlloc = std::conditional_t<std::is_same_v<HandlerAlloc, std::allocator<void>>,
                                       boost::asio::recycling_allocator<void>, HandlerAlloc>;

 public:
  using allocator_type =
      typename std::allocator_traits<BaseAlloc>::template rebind_alloc<AcquireOp>;

  static allocator_type allocator_for(const Handler& h) noexcept {
    if constexpr (std::is_same_v<HandlerAlloc, std::allocator<void>>) {
      return allocator_type();
    } else {
      return allocator_type(boost::asio::get_associated_allocator(h));
    }
  }

  /// Allocates and constructs; on failure nothing is left behind and the exception propagates.
  static AcquireOp* create(BasicUnpairedSemaphore* sem, Handler&& handler) {
    AssocEx ex = boost::asio::get_associated_executor(handler, sem->default_ex_);
    allocator_type alloc = allocator_for(handler);
    AcquireOp* raw = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      return ::new (static_cast<void*>(raw)) AcquireOp(sem, std::move(handler), ex);
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, raw, 1);
      throw;
    }
  }

  /// Installs the cancellation handler (may throw std::bad_alloc; nothing is installed then).
  void install(Slot slot) {
    slot.template emplace<CancelHandler>(this);
    slot_ = slot;
  }

  /// Counts outstanding work on the waiter's executor, so that its io_context::run() does not
  /// return while the operation waits. May throw (copying a type-erased executor may allocate).
  void track_work() {
    if constexpr (erased) {
      if (io_.ex) {
        io_.track();
        return;
      }
    }
    assoc_.track();
  }

  /// Hands the result to the executor; the op belongs to the queued delivery from here on. A
  /// queue wait of kevlar's engine whose io_context runs on this thread, inside an engine entry
  /// point, goes to the engine's trampoline instead: it runs when that entry point has finished.
  void schedule(boost::system::error_code ec) noexcept {
    ec_ = ec;
    if constexpr (erased) {
      if (io_.ex) {
        if constexpr (inline_grant) {
          if (detail::trampoline_accepts(&io_.ex->context()) && io_.ex->running_in_this_thread()) {
            this->detail::TrampolineJob::run = &AcquireOp::run_inline;
            this->detail::TrampolineJob::runnable = &AcquireOp::still_running_here;
            this->detail::TrampolineJob::reschedule = &AcquireOp::reschedule_job;
            detail::trampoline_push(this);
            return;
          }
        }
        io_.ex->execute(Delivery{this});
        return;
      }
    }
    assoc_.ex->execute(Delivery{this});
  }

  /// Frees an op that was never scheduled (initiation failed after allocation).
  void discard() noexcept {
    if (slot_.is_connected()) slot_.clear();
    allocator_type alloc = allocator_for(handler_);
    this->~AcquireOp();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  void clear_slot() noexcept {
    if (slot_.is_connected()) {
      slot_.clear();
      slot_ = {};
    }
  }

 private:
  AcquireOp(BasicUnpairedSemaphore* sem, Handler&& handler, const AssocEx& ex)
      : detail::WaitNode(&AcquireOp::on_complete), sem_(sem), handler_(std::move(handler)) {
    if constexpr (erased) {
      if (const IoEx* io = ex.template target<IoEx>()) {
        io_.ex.emplace(make_delivery_executor(*io, &reserve_));
        return;
      }
    }
    assoc_.ex.emplace(make_delivery_executor(ex, &reserve_));
  }

  static void on_complete(detail::WaitNode* node, boost::system::error_code ec) noexcept {
    static_cast<AcquireOp*>(node)->schedule(ec);
  }

  // The trampoline's view of a queued delivery. Only an erased waiter with an io_context target
  // is ever pushed (schedule()), so these are instantiated for such ops alone.
  static void run_inline(detail::TrampolineJob* job) { static_cast<AcquireOp*>(job)->deliver(); }
  static bool still_running_here(const detail::TrampolineJob* job) noexcept {
    // Like asio::dispatch: running on this thread is enough. A stop() made by the releasing
    // completion's own handler does not hold the grant back: the granted call goes on right
    // there (what it posts waits for the next run()). Asking io_context::stopped() would take
    // the scheduler's lock for every grant.
    return static_cast<const AcquireOp*>(job)->io_.ex->running_in_this_thread();
  }
  static void reschedule_job(detail::TrampolineJob* job) noexcept {
    auto* op = static_cast<AcquireOp*>(job);
    op->io_.ex->execute(Delivery{op});
  }

  struct CancelHandler {
    explicit CancelHandler(AcquireOp* o) noexcept : op(o) {}  // emplace() needs a constructor
    AcquireOp* op;
    void operator()(boost::asio::cancellation_type_t type) const noexcept {
      using ct = boost::asio::cancellation_type;
      if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
      op->sem_->cancel_wait(op);
    }
  };

  /// The function queued on the waiter's executor. If it is destroyed without running (the
  /// executor shut down), a granted permit goes back to the semaphore (T8).
  class Delivery {
   public:
    explicit Delivery(AcquireOp* op) noexcept : op_(op) {}
    Delivery(Delivery&& other) noexcept : op_(std::exchange(other.op_, nullptr)) {}
    Delivery(const Delivery&) = delete;
    Delivery& operator=(const Delivery&) = delete;
    Delivery& operator=(Delivery&&) = delete;
    ~Delivery() {
      if (op_ != nullptr) op_->abandon();
    }
    void operator()() { std::exchange(op_, nullptr)->deliver(); }

   private:
    AcquireOp* op_;
  };

  /// On the waiter's executor: clear the slot, free the block with its work count (so the
  /// handler's next operation can reuse it), then invoke the handler.
  void deliver() {
    clear_slot();
    Handler handler(std::move(handler_));
    const boost::system::error_code ec = ec_;
    // The work count goes with the block: the delivery now running is itself counted by the
    // scheduler until the handler returns, so run() cannot see the context out of work here.
    allocator_type alloc = allocator_for(handler);
    this->~AcquireOp();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
    std::move(handler)(ec);
  }

  /// T8: the delivery was destroyed undelivered (its executor shut down). A grant is returned
  /// (or passed on) through release(); the handler is destroyed without being invoked. The slot
  /// is left alone, as Asio's own operations do on shutdown: its signal may already be gone, and
  /// emitting it after the operation ended is outside the slot's contract.
  void abandon() noexcept {
    BasicUnpairedSemaphore* sem = sem_;
    const bool owned_permit = !ec_;
    Handler handler(std::move(handler_));
    allocator_type alloc = allocator_for(handler);
    this->~AcquireOp();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
    // Return the permit before the handler goes: destroying it may release the last reference to
    // whatever owns this semaphore (a limiter inside a shield that only the execution kept alive).
    if (owned_permit) (void)sem->release(1);
  }

  BasicUnpairedSemaphore* sem_;
  Handler handler_;
  detail::DeliveryReserve reserve_;
  Target<AssocEx> assoc_;  ///< deliveries through the associated executor, unless ...
  /// ... it is an any_io_executor wrapping an io_context executor: then through that one.
  [[no_unique_address]] std::conditional_t<erased, Target<IoEx>, NoTarget> io_;
  Slot slot_{};
  boost::system::error_code ec_;
};

template <Ledger L>
template <class Handler>
void BasicUnpairedSemaphore<L>::start_acquire(Handler&& handler) {
  using Op = AcquireOp<std::decay_t<Handler>>;
  auto slot = boost::asio::get_associated_cancellation_slot(handler);

  // Every allocation happens before the ledger or the queue change (std::bad_alloc leaves them
  // untouched).
  Op* op = Op::create(this, std::move(handler));
  if (ledger_.try_acquire()) {  // T1
    op->set_state(detail::WaitState::granted);
    op->schedule({});
    return;
  }
  try {
    if (slot.is_connected()) op->install(slot);
    op->track_work();
  } catch (...) {
    op->discard();
    throw;
  }

  boost::system::error_code ec;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    if (op->state() == detail::WaitState::cancel_pending) {
      ec = boost::asio::error::operation_aborted;
      op->set_state(detail::WaitState::cancelled);
    } else {
      switch (ledger_.admit_locked()) {
        case Admission::queued:  // T3: visible to releasers from here; never touch op again
          queue_.push_back(op);
          op->set_state(detail::WaitState::linked);
          return;
        case Admission::granted:  // T3'
          op->set_state(detail::WaitState::granted);
          break;
        case Admission::closed:
          ec = make_error_code(errc::closed);
          op->set_state(detail::WaitState::aborted);
          break;
        case Admission::rejected:
          ec = L::rejection();
          op->set_state(detail::WaitState::aborted);
          break;
      }
    }
  }
  op->clear_slot();
  op->schedule(ec);
}

/// The plain unpaired semaphore: tokens accumulate from release() and are consumed by acquires.
using UnpairedSemaphore = BasicUnpairedSemaphore<TokenLedger>;

}  // namespace kevlar
