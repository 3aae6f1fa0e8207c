// kevlar — internal: the circuit breaker's rolling window, the outcomes of the last sampling
// window counted in ten buckets.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/lease.hpp>

#include <array>
#include <atomic>
#include <cstdint>

namespace kevlar::detail {

/// The circuit breaker's rolling window: successes, failures and slow outcomes over the last
/// `length` of the clock's timeline, counted in ten buckets of `length / 10`. The buckets are
/// aligned on the timeline — bucket n covers [n * length / 10, (n + 1) * length / 10) — and the
/// window as of a time point is that time point's bucket and the nine before it. A bucket's slot is
/// reused (its counts cleared) when time reaches a bucket ten further on. Time never moves the
/// window backwards: an outcome recorded at a time point before the current bucket counts in the
/// current bucket.
///
/// The successes counted without the lock (try_add_success) go to a per-thread stripe of the
/// current bucket (the stripes of detail/lease.hpp), so that threads recording successes at once
/// write no shared cache line; a rotation folds the stripes into the bucket they counted for, and
/// counts() adds them to the current bucket.
///
/// Thread-safety: add(), add_success(), counts() and clear() must not run concurrently with each
/// other (the breaker calls them under its lock). try_add_success() may run concurrently with any
/// member, and takes no lock: a success racing a rotation may land in the neighbouring bucket,
/// which the window counts the same way.
class RollingWindow {
 public:
  /// What the window holds.
  struct Counts {
    std::uint64_t total = 0;     ///< outcomes: successes and failures
    std::uint64_t failures = 0;  ///< failures
    std::uint64_t slow = 0;      ///< slow outcomes (successes or failures), counted in total too
  };

  /// The number of buckets the window is kept in.
  static constexpr int buckets = 10;

  /// An empty window of `length` (> 0, at most CircuitBreakerOptions::max_duration, so that the
  /// bucket arithmetic cannot overflow).
  explicit RollingWindow(Clock::duration length) noexcept;

  /// Counts a success at `now` without a lock if `now` is still in the current bucket; false if it
  /// is not (or nothing was counted yet): the caller then counts it with add_success().
  [[nodiscard]] bool try_add_success(Clock::time_point now) noexcept {
    if (now.time_since_epoch().count() < current_end_.load(std::memory_order_acquire)) {
      this_thread_stripe(stripes_.data()).successes.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    return false;
  }
  /// Moves the window to `now` and counts a success.
  void add_success(Clock::time_point now) noexcept;
  /// Moves the window to `now`, counts an outcome (`failed`: a failure, else a success; `slow`:
  /// slow too) and returns the window's counts after it.
  Counts add(Clock::time_point now, bool failed, bool slow) noexcept;
  /// The counts of the window as of `now` (without moving it: buckets older than ten before
  /// `now`'s, or later than it, are left out).
  [[nodiscard]] Counts counts(Clock::time_point now) const noexcept;
  /// Forgets every outcome.
  void clear() noexcept;

 private:
  struct Bucket {
    std::atomic<std::int64_t> index{0};  ///< absolute bucket number (no_bucket: empty)
    std::atomic<std::uint64_t> successes{0};
    std::atomic<std::uint64_t> failures{0};
    std::atomic<std::uint64_t> slow{0};
  };

  /// The absolute number of the bucket holding `t`.
  [[nodiscard]] std::int64_t bucket_of(Clock::time_point t) const noexcept;
  /// The first instant after `bucket`, in nanoseconds on the clock's timeline.
  [[nodiscard]] std::int64_t bucket_end(std::int64_t bucket) const noexcept;
  /// Makes `now`'s bucket current, unless the current one is later; returns the current bucket.
  std::int64_t rotate(Clock::time_point now) noexcept;
  /// The counts of the ten buckets ending at `current`.
  [[nodiscard]] Counts counts_at(std::int64_t current) const noexcept;
  /// Moves the stripes' successes into the current bucket.
  void fold_stripes() noexcept;

  /// Successes of the current bucket counted without the lock, by one stripe of threads.
  struct alignas(lease_stripe_bytes) Stripe {
    std::atomic<std::uint64_t> successes{0};
  };

  /// First time point after the current bucket: read by every try_add_success without the lock,
  /// written only by a rotation or clear(), and alone on its cache line with fields as rarely
  /// written (the buckets, which the lock's holders write, start on the next line).
  alignas(lease_stripe_bytes) std::atomic<std::int64_t> current_end_;
  std::int64_t length_;          ///< the window, in nanoseconds
  std::int64_t current_bucket_;  ///< absolute number of the current bucket
  unsigned current_slot_ = 0;    ///< the current bucket's slot
  alignas(lease_stripe_bytes) std::array<Bucket, buckets> buckets_;
  std::array<Stripe, lease_stripes> stripes_;
};

}  // namespace kevlar::detail
