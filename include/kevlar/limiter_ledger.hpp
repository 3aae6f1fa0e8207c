// kevlar — LimiterLedger: the counting policy of a concurrency limit's UnpairedSemaphore (permits
// in use, queued callers and closed in one word), shared by the concurrency limit and the rate
// limit's turn.
#pragma once

#include <kevlar/detail/ledger_word.hpp>
#include <kevlar/error.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstdint>

namespace kevlar {

/// The ledger of the concurrency limiter: ONE atomic 64-bit word (detail::LedgerWord) holding
/// {permits in use (bits 0-31, including permits granted to queued callers whose completion has
/// not run yet), queued callers (bits 32-62), closed (bit 63)} against `limit` and `queue_limit`.
///
/// The uncontended acquire and release are one CAS each. Queueing, handoff, cancellation and close
/// change the word under the semaphore's slow-path lock, in the same step that links or unlinks
/// the waiter, so a release decides "free the permit or hand it to the first waiter" in one CAS
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
      if (w.closed_or_queued() || w.count() >= limit()) return c.keep(false);
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
    const count_type limit = this->limit();
    return word_.update<Admission>(std::memory_order_acq_rel, [this, limit](Bits w, auto& c) {
      if (w.closed()) return c.keep(Admission::closed);
      if (w.queued() == 0 && w.count() < limit) {
        return c.write(w.plus_count(1), Admission::granted);
      }
      if (w.queued() < queue_limit_) return c.write(w.plus_one_queued(), Admission::queued);
      return c.keep(Admission::rejected);
    });
  }
  /// Under the lock, T5: of `n` returned permits, as many as the limit lets in pass to the first
  /// waiters ("in use" unchanged for those): min(n, queued), fewer after the limit shrank below
  /// the permits in use (a permit above the limit retires as it returns). The rest are freed.
  /// Returns the waiters to wake, or -1 (nothing changed) if fewer than `n` permits are in use.
  ///
  /// While queued > 0 no lock-free member can change the word (try_acquire and try_release both
  /// refuse a word with waiters): the common handoff is a plain store (detail::LedgerWord).
  std::int64_t release_locked(count_type n) noexcept {
    const count_type limit = this->limit();
    return word_.update_locked<std::int64_t>([n, limit](Bits w, auto& c) {
      if (w.count() < n) return c.keep(-1);
      const count_type q = w.queued();
      count_type k = q < n ? q : n;
      // While waiters queue, the count is at the limit; above it only after a shrink, when fewer
      // pass: those that would keep the count above the limit retire.
      if (w.count() > limit) [[unlikely]] {
        const count_type left = w.count() - n;
        const count_type room = left < limit ? limit - left : 0;
        if (k > room) k = room;
      }
      return c.write(w.minus_queued(k).minus_count(n - k), k);
    });
  }
  /// Under the lock: the limit becomes `limit` (1 to max_count). Growth hands a permit to each of
  /// up to (limit - in use) of the first waiters at once (they are counted as in use, and the
  /// result is how many to wake); a shrink revokes nothing: permits in use above the new limit
  /// retire as they are released, and no waiter is granted until the count is below it. The
  /// queue limit and the queue's order are unchanged. An acquire racing the change lock-free may still
  /// be admitted under the limit it read: the count never exceeds the largest limit ever set.
  std::int64_t resize_locked(count_type limit) noexcept {
    limit_.store(limit, std::memory_order_relaxed);
    return word_.update_locked<std::int64_t>([limit](Bits w, auto& c) {
      const count_type q = w.queued();
      if (q == 0 || w.count() >= limit) return c.keep(0);
      const count_type room = limit - w.count();
      const count_type k = q < room ? q : room;
      return c.write(w.minus_queued(k).plus_count(k), k);
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
    const count_type limit = this->limit();
    return {u < limit ? limit - u : 0, w.queued(), w.closed()};
  }
  /// Permits in use (running calls plus grants in transit), from the same load as snapshot().
  [[nodiscard]] count_type in_use() const noexcept { return word_.load().count(); }
  /// {permits in use, queued, closed} from one load.
  struct Counts {
    count_type in_use = 0;
    count_type queued = 0;
    bool closed = false;
  };
  [[nodiscard]] Counts counts() const noexcept {
    const Bits w = word_.load();
    return {w.count(), w.queued(), w.closed()};
  }
  /// True if a new caller would be rejected now: every permit in use (or someone queued) and the
  /// queue full, or closed. One load; used to reject without allocating.
  [[nodiscard]] bool full() const noexcept {
    const Bits w = word_.load();
    if (w.closed()) return true;
    const bool permit_free = w.queued() == 0 && w.count() < limit();
    return !permit_free && w.queued() >= queue_limit_;
  }
  /// The limit (resize_locked changes it at run time). Thread-safe.
  [[nodiscard]] count_type limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  [[nodiscard]] count_type queue_limit() const noexcept { return queue_limit_; }

  static boost::system::error_code rejection() noexcept {
    return make_error_code(errc::concurrency_limit_exceeded);
  }

 private:
  using Bits = detail::LedgerBits;
  /// The count of the word is the permits in use.
  detail::LedgerWord word_{0};
  /// Read without ordering on the fast paths; written under the semaphore's lock, whose
  /// acquire-release orders it for every locked decision.
  std::atomic<count_type> limit_;
  count_type queue_limit_;
};

static_assert(Ledger<LimiterLedger>);

}  // namespace kevlar
