// kevlar — the concurrency limit strategy: interlocked permits, queued callers woken by the
// unpaired semaphore.
#pragma once

#include <kevlar/context.hpp>
#include <kevlar/error.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace kevlar {

/// The ledger of the concurrency limiter: ONE atomic 64-bit word (detail::LedgerWord) holding
/// {permits in use (bits 0-31, including permits granted to queued callers whose completion has
/// not run yet), queued callers (bits 32-62), closed (bit 63)} against `limit` and `queue_limit`.
///
/// The uncontended acquire and release are one CAS each. Queueing, handoff, cancellation and close
/// change the word under the semaphore's slow-path lock, in the same step that links or unlinks
/// the waiter, so a release decides "free the permit or hand it to the oldest waiter" in one CAS
/// and a wake-up cannot be lost: while anyone is queued, every permit is in use (a newcomer never
/// takes a permit ahead of a queued caller, and a handoff leaves "in use" unchanged).
///
/// Thread-safety: see kevlar::Ledger.
class LimiterLedger {
 public:
  using count_type = std::uint32_t;
  /// The largest limit and queue limit the word can count.
  static constexpr count_type max_count = detail::LedgerBits::max_queued;

  LimiterLedger(count_type limit, count_type queue_limit) noexcept
      : limit_(limit), queue_limit_(queue_limit) {}
  LimiterLedger(const LimiterLedger&) = delete;
  LimiterLedger& operator=(const LimiterLedger&) = delete;

  /// T1: a permit if one is free, nobody is queued and the ledger is open. Acquire ordering.
  bool try_acquire() noexcept {
    return word_.update<bool>(std::memory_order_acquire, [this](Bits w, auto& c) {
      if (w.closed_or_queued() || w.count() >= limit_) return c.keep(false);
      return c.write(w.plus_count(1), true);
    });
  }
  /// T4: returns `n` permits if nobody is queued; otherwise the semaphore hands them over (T5).
  ReleaseStep try_release(count_type n) noexcept {
    return word_.update<ReleaseStep>(std::memory_order_release, [n](Bits w, auto& c) {
      if (w.has_queued()) return c.keep(ReleaseStep::contended);
      // More releases than acquisitions.
      if (w.count() < n) return c.keep(ReleaseStep::refused);
      return c.write(w.minus_count(n), ReleaseStep::done);
    });
  }
  /// Under the lock: T3' (a permit appeared), T3 (queue), T2 (full) or closed.
  Admission admit_locked() noexcept {
    return word_.update<Admission>(std::memory_order_acq_rel, [this](Bits w, auto& c) {
      if (w.closed()) return c.keep(Admission::closed);
      if (w.queued() == 0 && w.count() < limit_) {
        return c.write(w.plus_count(1), Admission::granted);
      }
      if (w.queued() < queue_limit_) return c.write(w.plus_one_queued(), Admission::queued);
      return c.keep(Admission::rejected);
    });
  }
  /// Under the lock, T5: of `n` returned permits, min(n, queued) pass to the oldest waiters
  /// ("in use" unchanged for those) and the rest are freed. Returns the waiters to wake, or -1
  /// (nothing changed) if fewer than `n` permits are in use.
  ///
  /// While queued > 0 no lock-free member can change the word (try_acquire and try_release both
  /// refuse a word with waiters): the common handoff is a plain store (detail::LedgerWord).
  std::int64_t release_locked(count_type n) noexcept {
    return word_.update_locked<std::int64_t>([n](Bits w, auto& c) {
      const count_type q = w.queued();
      const count_type k = q < n ? q : n;
      if (w.count() < n) return c.keep(-1);
      return c.write(w.minus_queued(k).minus_count(n - k), k);
    });
  }
  /// Under the lock, T6: a queued caller left.
  void cancel_locked() noexcept { word_.leave_queue_locked(); }
  /// Under the lock, T7: closed, nobody queued; returns how many were.
  std::uint32_t close_locked() noexcept { return word_.close_locked(); }
  /// One load: {free permits, queued, closed}.
  [[nodiscard]] LedgerSnapshot snapshot() const noexcept {
    const Bits w = word_.load();
    const count_type u = w.count();
    return {u < limit_ ? limit_ - u : 0, w.queued(), w.closed()};
  }
  /// Permits in use (running calls plus grants in transit), from the same load as snapshot().
  [[nodiscard]] count_type in_use() const noexcept { return word_.load().count(); }
  /// True if a new caller would be rejected now: every permit in use (or someone queued) and the
  /// queue full, or closed. One load; used to reject without allocating.
  [[nodiscard]] bool full() const noexcept {
    const Bits w = word_.load();
    if (w.closed()) return true;
    const bool permit_free = w.queued() == 0 && w.count() < limit_;
    return !permit_free && w.queued() >= queue_limit_;
  }
  [[nodiscard]] count_type limit() const noexcept { return limit_; }
  [[nodiscard]] count_type queue_limit() const noexcept { return queue_limit_; }

  static boost::system::error_code rejection() noexcept {
    return make_error_code(errc::concurrency_limit_exceeded);
  }

 private:
  using Bits = detail::LedgerBits;
  /// The count of the word is the permits in use.
  detail::LedgerWord word_{0};
  count_type limit_;
  count_type queue_limit_;
};

static_assert(Ledger<LimiterLedger>);

/// What the rejection hooks receive.
struct ConcurrencyLimitRejectedEvent {
  std::uint32_t max_concurrency;
  std::uint32_t max_queue;
  std::size_t strategy_index;  ///< position of the limiter in the pipeline (0: outermost)
  Context& context;            ///< the rejected execution's context (do not keep it)
};

/// Options of Shield::concurrency_limit. Defaults follow Kevlar.
struct ConcurrencyLimitOptions {
  /// Calls allowed to run at once (1 .. LimiterLedger::max_count).
  int max_concurrency = 10;
  /// Calls allowed to wait for a permit (0 .. LimiterLedger::max_count); 0 rejects as soon as
  /// every permit is in use.
  int max_queue = 0;
  /// Called for each rejection, first. An exception it throws replaces the rejection (and the
  /// asynchronous hook is skipped).
  std::function<void(const ConcurrencyLimitRejectedEvent&)> on_rejected;
  /// Awaited after on_rejected: in an asynchronous execution it runs as a coroutine on the
  /// execution's executor; a synchronous execution runs it to completion on a private
  /// io_context. An exception it throws replaces the rejection.
  std::function<boost::asio::awaitable<void>(ConcurrencyLimitRejectedEvent)> on_rejected_async;
};

/// Running, queued and free permits, read from one atomic load (always coherent).
struct ConcurrencyLimitState {
  std::uint32_t running = 0;    ///< permits in use (including grants on their way to a waiter)
  std::uint32_t queued = 0;     ///< callers waiting for a permit
  std::uint32_t available = 0;  ///< permits free to take
  bool closed = false;
};

namespace detail {

/// A concurrency limit's per-execution state, in its layer's frame.
struct LimiterFrame {
  /// Where an execution stands at this position.
  enum class Phase : unsigned char {
    acquiring,  ///< no permit yet (or waiting in the queue)
    holding,    ///< owns a permit
    rejecting,  ///< rejected; the asynchronous rejection hook is running
  };
  Phase phase = Phase::acquiring;
};

}  // namespace detail

/// Caps how many calls run at once (`max_concurrency`) and how many may wait (`max_queue`).
///
/// Capacity is max_concurrency + max_queue; a call beyond it fails at once with
/// `errc::concurrency_limit_exceeded`, without waiting, allocating or taking a lock. A call that
/// finds a permit free takes it with one CAS on the ledger word (no lock, no allocation, no
/// executor hop) and gives it back with one CAS when the inner part completes (success or
/// failure). Otherwise it queues, FIFO, on the UnpairedSemaphore: the completing call hands its
/// permit straight to the oldest waiter, which resumes on its own executor (never inside the
/// releaser). A newcomer never takes a permit while someone waits.
///
/// Cancellation: a queued asynchronous call honours terminal, partial and total cancellation:
/// it leaves the queue (its place is freed exactly once), never runs, and completes with
/// `operation_aborted` — a cancellation, not a rejection (no hooks). A cancellation racing the
/// grant resolves once either way: if the grant won, the call runs. A synchronous execute queued
/// here blocks its thread in the same FIFO until it gets a permit, its stop token is requested,
/// the context's deadline (an outer timeout's budget) passes, or the limiter is closed; the stop
/// and the deadline leave the queue as a cancellation does (`operation_aborted`, which the
/// timeout reports as `errc::timeout`), and a grant that arrives as the deadline passes is handed
/// on to the next waiter: the call never runs past its deadline.
///
/// close() fails queued callers with `errc::closed` and refuses new ones; permits held keep
/// working. Destroying the limiter closes it. An executor destroyed with a grant in flight returns
/// the permit.
///
/// One instance is one set of permits: every shield containing it shares them (it is stateful;
/// it may appear once per chain). Thread-safety: any number of concurrent executions, on any
/// threads and executors.
class ConcurrencyLimitStrategy final
    : public BasicStrategy<ConcurrencyLimitStrategy, detail::LimiterFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit ConcurrencyLimitStrategy(ConcurrencyLimitOptions options);
  /// Creates a limiter to add with Shield::use (keep the pointer to observe or close it).
  [[nodiscard]] static std::shared_ptr<ConcurrencyLimitStrategy> create(
      ConcurrencyLimitOptions options) {
    return std::make_shared<ConcurrencyLimitStrategy>(std::move(options));
  }

  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks, called by the engine on the execution's thread.
  /// Proactive and stateful (one instance per chain).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Takes a permit (lock-free) and runs the inner part, queues the call (asynchronous: a
  /// suspended wait cancelled through the caller's slot; synchronous: a blocking wait), or rejects
  /// it with `errc::concurrency_limit_exceeded`.
  Step start(Layer& layer, Frame& f);
  /// Returns the permit; the outcome passes unchanged.
  Step inner_complete(Layer& layer, Frame& f);
  /// A queue wait ended: the permit was granted, or the call was cancelled (`operation_aborted`),
  /// closed (`errc::closed`) or rejected; also the end of an asynchronous rejection hook.
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);
  /// Returns a permit the execution still holds (it was abandoned).
  void finish(Layer& layer, Frame& f) noexcept;

  /// {running, queued, available, closed} from one load. Thread-safe.
  [[nodiscard]] ConcurrencyLimitState state() const noexcept;
  /// Fails every queued call with `errc::closed` and refuses new ones. Thread-safe, idempotent.
  void close() noexcept { semaphore_.close(); }
  [[nodiscard]] const ConcurrencyLimitOptions& options() const noexcept { return options_; }

 private:
  Step reject(Layer& layer);
  /// A synchronous execution's queue wait (start): blocks until the grant, the caller's stop or
  /// the context's deadline.
  [[gnu::noinline]] Step wait_synchronously(Layer& layer, Frame& f);
  void emit_state(Layer& layer) const noexcept;
  ConcurrencyLimitOptions options_;
  BasicUnpairedSemaphore<LimiterLedger> semaphore_;
};

}  // namespace kevlar
