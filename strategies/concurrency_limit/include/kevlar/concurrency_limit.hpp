// kevlar — the concurrency limit strategy: interlocked permits, queued callers woken by the
// unpaired semaphore.
#pragma once

#include <kevlar/context.hpp>
#include <kevlar/error.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace kevlar {

/// The ledger of the concurrency limiter: ONE atomic 64-bit word holding {permits in use (bits
/// 0-31, including permits granted to queued callers whose completion has not run yet), queued
/// callers (bits 32-62), closed (bit 63)} against `limit` and `queue_limit`.
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
  static constexpr count_type max_count = 0x7FFF'FFFFu;

  LimiterLedger(count_type limit, count_type queue_limit) noexcept
      : limit_(limit), queue_limit_(queue_limit) {}
  LimiterLedger(const LimiterLedger&) = delete;
  LimiterLedger& operator=(const LimiterLedger&) = delete;

  /// T1: a permit if one is free, nobody is queued and the ledger is open. Acquire ordering.
  bool try_acquire() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & (closed_bit | queued_mask)) != 0 || in_use(w) >= limit_) return false;
      if (word_.compare_exchange_weak(w, w + 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        return true;
      }
    }
  }
  /// T4: returns `n` permits if nobody is queued; otherwise the semaphore hands them over (T5).
  ReleaseStep try_release(count_type n) noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & queued_mask) != 0) return ReleaseStep::contended;
      if (in_use(w) < n) return ReleaseStep::refused;  // more releases than acquisitions
      if (word_.compare_exchange_weak(w, w - n, std::memory_order_release,
                                      std::memory_order_relaxed)) {
        return ReleaseStep::done;
      }
    }
  }
  /// Under the lock: T3' (a permit appeared), T3 (queue), T2 (full) or closed.
  Admission admit_locked() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((w & closed_bit) != 0) return Admission::closed;
      std::uint64_t next = 0;
      Admission a = Admission::rejected;
      if (queued(w) == 0 && in_use(w) < limit_) {
        next = w + 1;
        a = Admission::granted;
      } else if (queued(w) < queue_limit_) {
        next = w + queued_one;
        a = Admission::queued;
      } else {
        return Admission::rejected;
      }
      if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return a;
      }
    }
  }
  /// Under the lock, T5: of `n` returned permits, min(n, queued) pass to the oldest waiters
  /// ("in use" unchanged for those) and the rest are freed. Returns the waiters to wake.
  ///
  /// While queued > 0 no lock-free member can change the word (try_acquire and try_release both
  /// refuse a word with waiters, and a CAS from an older word fails) and every other writer holds
  /// the lock, so the value loaded under the lock is exact and a plain release store replaces the
  /// locked CAS: the common handoff costs one locked instruction fewer.
  std::int64_t release_locked(count_type n) noexcept {
    std::uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      const count_type q = queued(w);
      const count_type k = q < n ? q : n;
      const count_type freed = n - k;
      if (in_use(w) < n) return -1;
      const std::uint64_t next = w - static_cast<std::uint64_t>(k) * queued_one - freed;
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
  /// Under the lock, T6: a queued caller left. The word counts it, so (as in release_locked) no
  /// lock-free member can change the word meanwhile: a plain store.
  void cancel_locked() noexcept {
    const std::uint64_t w = word_.load(std::memory_order_acquire);
    word_.store(w - queued_one, std::memory_order_release);
  }
  /// Under the lock, T7: closed, nobody queued; returns how many were.
  std::uint32_t close_locked() noexcept {
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t next = (w & in_use_mask) | closed_bit;
      if (word_.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return queued(w);
      }
    }
  }
  /// One load: {free permits, queued, closed}.
  [[nodiscard]] LedgerSnapshot snapshot() const noexcept {
    const std::uint64_t w = word_.load(std::memory_order_acquire);
    const count_type u = in_use(w);
    return {u < limit_ ? limit_ - u : 0, queued(w), (w & closed_bit) != 0};
  }
  /// Permits in use (running calls plus grants in transit), from the same load as snapshot().
  [[nodiscard]] count_type in_use() const noexcept {
    return in_use(word_.load(std::memory_order_acquire));
  }
  /// True if a new caller would be rejected now: every permit in use (or someone queued) and the
  /// queue full, or closed. One load; used to reject without allocating.
  [[nodiscard]] bool full() const noexcept {
    const std::uint64_t w = word_.load(std::memory_order_acquire);
    if ((w & closed_bit) != 0) return true;
    const bool permit_free = queued(w) == 0 && in_use(w) < limit_;
    return !permit_free && queued(w) >= queue_limit_;
  }
  [[nodiscard]] count_type limit() const noexcept { return limit_; }
  [[nodiscard]] count_type queue_limit() const noexcept { return queue_limit_; }

  static boost::system::error_code rejection() noexcept {
    return make_error_code(errc::concurrency_limit_exceeded);
  }

 private:
  static constexpr std::uint64_t in_use_mask = 0xFFFF'FFFFull;
  static constexpr std::uint64_t queued_one = 1ull << 32;
  static constexpr std::uint64_t queued_mask = 0x7FFF'FFFFull << 32;
  static constexpr std::uint64_t closed_bit = 1ull << 63;
  static count_type in_use(std::uint64_t w) noexcept { return static_cast<count_type>(w); }
  static count_type queued(std::uint64_t w) noexcept {
    return static_cast<count_type>((w & queued_mask) >> 32);
  }

  std::atomic<std::uint64_t> word_{0};
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
/// here blocks its thread in the same FIFO until it gets a permit or the limiter is closed.
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
  void emit_state(Layer& layer) const noexcept;
  ConcurrencyLimitOptions options_;
  BasicUnpairedSemaphore<LimiterLedger> semaphore_;
};

}  // namespace kevlar
