// kevlar — UnpairedSemaphore: a signal-only asynchronous semaphore for Boost.Asio.
//
// "Unpaired": the code that releases never waited on the semaphore (a completing call hands its
// slot to a queued caller, a producer signals consumers). "Signal-only": the semaphore carries
// wake-ups; whatever the permits stand for is owned by the caller. The counting word is a policy
// (a Ledger), so the concurrency limiter can keep {in use, queued, closed} in its own word while
// reusing this queue, its cancellation and its executor rules. See docs/semaphore.md.
//
// This header is the interface. The member function bodies, the waiter operation and the helpers
// they need are in detail/unpaired_semaphore_impl.hpp, included at the end (header-only: the
// semaphore is a template).
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/always_inline.hpp>
#include <kevlar/detail/ledger_word.hpp>
#include <kevlar/detail/spin_lock.hpp>
#include <kevlar/detail/wait_queue.hpp>
#include <kevlar/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <concepts>
#include <cstdint>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace kevlar {

namespace detail {
struct SemaphoreAccess;
/// What BasicUnpairedSemaphore::park decided for a waiter.
struct Parked {
  bool queued = false;             ///< linked: the queue completes the node later
  boost::system::error_code ec{};  ///< otherwise: granted (no error), or why not
};
}  // namespace detail

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
/// them. One 64-bit word (detail::LedgerWord): tokens in bits 0-31, queued waiters in bits 32-62,
/// closed in bit 63.
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
  bool try_acquire() noexcept;
  /// T4: adds `n` tokens if nobody is queued. Release ordering on success.
  ReleaseStep try_release(count_type n) noexcept;
  /// Under the lock: T3' (take a token that appeared), T3 (count one more waiter) or closed.
  Admission admit_locked() noexcept;
  /// Under the lock, T5: of `n` signals, min(n, queued) go to queued waiters (queued drops by as
  /// many) and the rest become tokens. Returns how many waiters the caller must pop and wake, or
  /// -1 if the remaining tokens would overflow (nothing changed).
  std::int64_t release_locked(count_type n) noexcept;
  /// Under the lock, T6: one queued waiter left without a token.
  void cancel_locked() noexcept;
  /// Under the lock, T7: marks the ledger closed and forgets every queued waiter; returns how many
  /// were queued.
  std::uint32_t close_locked() noexcept;
  /// One load; never torn.
  [[nodiscard]] LedgerSnapshot snapshot() const noexcept;

  /// The token ledger never refuses to queue; this is what a rejecting ledger would report.
  static boost::system::error_code rejection() noexcept { return {}; }

 private:
  /// The count of the word is the free tokens.
  detail::LedgerWord word_;
};

static_assert(Ledger<TokenLedger>);

/// An asynchronous, unpaired, signal-only semaphore whose counting word is the policy `L`.
///
/// Waiters queue by priority, higher first, and in arrival order within a priority (every waiter
/// has priority 0 unless it asks for another: then the queue is FIFO); a release hands its permits
/// to the first waiters (direct handoff: a permit is never free while anyone waits, so a newcomer
/// cannot overtake a queued waiter). A ledger that refuses to queue (a full queue) lets a newcomer
/// take the place of the newest waiter of the lowest priority if that is lower than its own: the
/// waiter it displaces completes with the ledger's rejection(). Linking a waiter walks back from
/// the newest past the waiters of lower priority (O(1) when priorities are equal; a waiter of
/// high priority behind many lower ones pays for the walk under the lock). A woken waiter resumes
/// on its own associated executor, never inside release(), close() or a cancellation handler.
/// (kevlar's concurrency limiter opts its own waits into detail/trampoline.hpp: the engine runs
/// them just before the completion that released returns, still never inside those calls.)
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

  /// Adds `n` permits from any thread (the caller need not have acquired anything): the first
  /// min(n, queued) waiters are granted one each and scheduled on their executors (never run
  /// inline); the rest accumulate. Releases keep working after close().
  ///
  /// Never allocates, never throws. Lock-free when nobody is queued; takes the slow-path lock to
  /// hand over to waiters. Returns false, changing nothing, if the permits the ledger would keep
  /// would overflow it (for TokenLedger: more than TokenLedger::max_count tokens); `n == 0` does
  /// nothing and returns true. Release ordering: writes before release() happen before the
  /// grantee's completion or a later successful try_acquire().
  bool release(count_type n = 1) noexcept;

  /// Changes what the ledger admits at run time (LimiterLedger::resize_locked): `change(ledger)`
  /// runs under the slow-path lock and returns how many of the first waiters it gave a permit
  /// to (counted by the ledger as in use, as a handoff is), or a negative number if it changed
  /// nothing. Those waiters are then granted one permit each in queue order and scheduled as
  /// release() schedules them (never run inline). Returns false if `change` returned a negative
  /// number. Never allocates; `change` must not throw. Thread-safe.
  template <class Change>
  requires std::is_nothrow_invocable_r_v<std::int64_t, Change&, L&>
  bool adjust(Change change) noexcept;

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
        Initiation{this, 0}, token);
  }

  /// async_acquire(token) for a waiter of priority `priority`: it is granted before every waiter
  /// of lower priority and after those of its own or higher that queued before it, and may
  /// displace a lower one from a full queue (see the class notes; the displaced waiter completes
  /// with the ledger's rejection()). Otherwise as async_acquire(token).
  template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                CompletionToken = boost::asio::deferred_t>
  auto async_acquire(std::int32_t priority, CompletionToken&& token = CompletionToken()) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        Initiation{this, priority}, token);
  }

  /// Blocks the calling thread until it owns a permit, sharing the queue with asynchronous
  /// waiters. Throws `boost::system::system_error` with `kevlar::errc::closed` if the semaphore is
  /// or gets closed first (or with the ledger's rejection code), and with
  /// `boost::asio::error::operation_aborted` if `stop` is requested first (see acquire_or_error).
  /// Allocates nothing. Do not call it on a thread whose executor must run to release a permit.
  /// Thread-safe.
  void acquire(std::stop_token stop = {});

  /// Blocking acquire reporting failure as an error code instead of throwing; see acquire(). The
  /// caller waits with priority `priority` (see async_acquire(priority, token)).
  ///
  /// Cancellation: if `stop` is requested before the call, it returns `operation_aborted` without
  /// taking a permit; if it is requested while the caller waits in the queue (from any thread),
  /// the caller leaves the queue — consuming nothing, the others keeping their order — and gets
  /// `operation_aborted`. A request that loses the race with a grant changes nothing: the caller
  /// owns the permit it was given.
  [[nodiscard]] boost::system::error_code acquire_or_error(std::stop_token stop = {},
                                                           std::int32_t priority = 0);

  /// Blocking acquire that gives up at `deadline`, read on `clock` (a synchronous execution's
  /// queue wait under a timeout: the context's deadline). Returns no error once the caller owns a
  /// permit; `kevlar::errc::timeout` if the deadline passes first (the caller leaves the queue as
  /// a cancelled waiter does: it consumes nothing and the others keep their order);
  /// `operation_aborted` if `stop` is requested first; `kevlar::errc::closed`; or the ledger's
  /// rejection code. The caller waits with priority `priority` (see async_acquire(priority,
  /// token)). A deadline that has passed already still takes a permit that is free at once
  /// (as try_acquire() does) but never queues: it is `errc::timeout` (or `errc::closed`) then.
  ///
  /// The clock decides when the deadline has passed: with a ManualClock the caller waits until a
  /// test advances it (ManualClock::sleepers() counts it), with the steady clock until the time
  /// comes. As with `stop`, a deadline that loses the race with a grant changes nothing: the
  /// caller owns the permit it was given, and decides itself whether it is still in time.
  ///
  /// Allocation: when it must queue, one shared stop state (std::stop_source) that wakes the
  /// sleeping thread, allocated before the ledger or the queue change (`std::bad_alloc` leaves
  /// both as they were). Do not call it on a thread whose executor must run to release a permit.
  /// Thread-safe.
  [[nodiscard]] boost::system::error_code acquire_until(const Clock& clock,
                                                        Clock::time_point deadline,
                                                        std::stop_token stop = {},
                                                        std::int32_t priority = 0);

  /// T7: refuses every later acquire (they complete with kevlar::errc::closed) and completes every
  /// queued waiter exactly once with kevlar::errc::closed, on its own executor, never inline.
  /// Permits already granted stay granted; release() keeps working. Idempotent, noexcept,
  /// allocation-free. Thread-safe.
  void close() noexcept;

  /// Takes the newest waiter of the lowest priority out of the queue if that priority is below
  /// `priority`, and completes it with `ec` (on its executor, never inline; it owns nothing):
  /// true if there was one. `ec` must be an error (a waiter completed without one would believe
  /// it owns a permit). A blocking acquire_until() waiter given `operation_aborted` reports it as
  /// the timeout if its deadline has passed too. For an owner whose queue limit the ledger does not
  /// count (a rate limit's reservations) making room for a newcomer of higher priority. Never
  /// allocates. Thread-safe.
  bool evict_below(std::int32_t priority, boost::system::error_code ec) noexcept;

  /// The priority of the newest waiter of the lowest priority (the one a newcomer of higher
  /// priority would displace from a full queue), or no_waiter_priority when nobody waits (which
  /// is also what a queue whose lowest waiter has that priority reports: nobody outranks it). A
  /// hint, read without the lock (one relaxed load): an owner asks it before it takes the lock to
  /// try a displacement that cannot succeed; racing a cancellation or a grant it may be stale,
  /// as if the newcomer had come a moment earlier. Thread-safe.
  [[nodiscard]] std::int32_t lowest_queued_priority() const noexcept {
    return lowest_queued_.load(std::memory_order_relaxed);
  }
  /// lowest_queued_priority() of an empty queue: no newcomer displaces anyone.
  static constexpr std::int32_t no_waiter_priority = 0x7FFF'FFFF;

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
  /// async_acquire's initiation: starts the wait (start_acquire).
  struct Initiation;
  /// One queued async_acquire (the queue node, the handler and its delivery).
  template <class Handler>
  class AcquireOp;

  /// T1 or T3/T3'/T2 for an asynchronous wait; allocates before touching the ledger.
  template <class Handler>
  void start_acquire(Handler&& handler, std::int32_t priority);
  /// T3/T3'/T2 under the lock for an idle `node` (or its cancellation, arrived first): links it,
  /// calling `on_link()` (noexcept) just before, or sets its final state and says why not. Never
  /// completes the node.
  template <class OnLink>
  detail::Parked park(detail::WaitNode* node, OnLink&& on_link) noexcept;
  friend struct detail::SemaphoreAccess;
  /// Cancellation arbitration (T6): takes `node` out of the queue if it is still there.
  void cancel_wait(detail::WaitNode* node) noexcept;
  /// Under the lock: links `node` at its place (link_by_priority) and marks it linked.
  void link_locked(detail::WaitNode* node) noexcept;
  /// Under the lock: unlinks the newest waiter of the lowest priority if that is below `priority`
  /// (marked aborted; the caller completes it after the lock and fixes the ledger's count).
  detail::WaitNode* evict_tail_locked(std::int32_t priority) noexcept;
  /// Under the lock: lowest_queued_ follows the queue's tail.
  void note_tail_locked() noexcept;
  /// Under the lock: moves the `k` first waiters, which the ledger has just granted, to
  /// `granted` (completed once the lock is released).
  KEVLAR_DETAIL_ALWAYS_INLINE void take_first_locked(std::int64_t k,
                                                     detail::WaitQueue& granted) noexcept;

  executor_type default_ex_;
  // The ledger word is written by every fast path: keep it alone on its cache line.
  alignas(64) L ledger_;
  // Slow-path state, touched only to park, hand off, cancel and close.
  alignas(64) detail::SpinLock lock_;
  detail::WaitQueue queue_;
  std::atomic<std::int32_t> lowest_queued_{no_waiter_priority};
};

/// The plain unpaired semaphore: tokens accumulate from release() and are consumed by acquires.
using UnpairedSemaphore = BasicUnpairedSemaphore<TokenLedger>;

}  // namespace kevlar

#include <kevlar/detail/unpaired_semaphore_impl.hpp>
