// The circuit breaker's rolling window: ten buckets aligned on the clock's timeline.
#include <kevlar/detail/rolling_window.hpp>

#include <limits>

namespace kevlar::detail {
namespace {

constexpr std::int64_t no_bucket = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t no_end = std::numeric_limits<std::int64_t>::min();

/// Floor division for a positive divisor.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

}  // namespace

RollingWindow::RollingWindow(Clock::duration length) noexcept
    : current_end_(no_end), length_(length.count()), current_bucket_(no_bucket) {
  for (Bucket& b : buckets_) b.index.store(no_bucket, std::memory_order_relaxed);
}

std::int64_t RollingWindow::bucket_of(Clock::time_point t) const noexcept {
  // Bucket n covers [n * W / 10, (n + 1) * W / 10) on the clock's timeline, W the window.
  const std::int64_t w = length_;
  const std::int64_t ns = t.time_since_epoch().count();
  const std::int64_t q = floor_div(ns, w);
  const std::int64_t r = ns - q * w;  // in [0, w); r * 10 fits (w <= max_duration)
  return q * buckets + (r * buckets) / w;
}

std::int64_t RollingWindow::bucket_end(std::int64_t bucket) const noexcept {
  // The first instant of bucket + 1: ceil((bucket + 1) * W / 10), computed without overflow.
  const std::int64_t w = length_;
  const std::int64_t n = bucket + 1;
  const std::int64_t q = floor_div(n, buckets);
  const std::int64_t r = n - q * buckets;
  return q * w + (r * w + buckets - 1) / buckets;
}

std::int64_t RollingWindow::rotate(Clock::time_point now) noexcept {
  const std::int64_t c = bucket_of(now);
  if (c <= current_bucket_) return current_bucket_;  // never move backwards (coarse vs. precise)
  // The stripes counted for the bucket ending here (a success racing this rotation may still
  // reach them, and then counts in the new bucket: the neighbouring one).
  fold_stripes();
  const auto slot = static_cast<unsigned>(c - floor_div(c, buckets) * buckets);
  Bucket& b = buckets_[slot];
  b.successes.store(0, std::memory_order_relaxed);
  b.failures.store(0, std::memory_order_relaxed);
  b.slow.store(0, std::memory_order_relaxed);
  b.index.store(c, std::memory_order_relaxed);
  current_bucket_ = c;
  current_slot_ = slot;
  current_end_.store(bucket_end(c), std::memory_order_release);
  return c;
}

void RollingWindow::fold_stripes() noexcept {
  // Before the first bucket (or after clear()) there is no bucket to fold into: a success that
  // raced clear() stays in its stripe and counts in the first bucket.
  if (current_bucket_ == no_bucket) return;
  std::uint64_t n = 0;
  for (Stripe& s : stripes_) n += s.successes.exchange(0, std::memory_order_relaxed);
  buckets_[current_slot_].successes.fetch_add(n, std::memory_order_relaxed);
}

RollingWindow::Counts RollingWindow::counts_at(std::int64_t current) const noexcept {
  Counts w;
  for (const Bucket& b : buckets_) {
    const std::int64_t i = b.index.load(std::memory_order_relaxed);
    if (i == no_bucket || i > current || current - i >= buckets) continue;
    const std::uint64_t f = b.failures.load(std::memory_order_relaxed);
    w.failures += f;
    w.total += f + b.successes.load(std::memory_order_relaxed);
    w.slow += b.slow.load(std::memory_order_relaxed);
    if (i == current_bucket_) {
      // The current bucket's successes not folded yet.
      for (const Stripe& s : stripes_) w.total += s.successes.load(std::memory_order_relaxed);
    }
  }
  return w;
}

void RollingWindow::add_success(Clock::time_point now) noexcept {
  rotate(now);
  buckets_[current_slot_].successes.fetch_add(1, std::memory_order_relaxed);
}

RollingWindow::Counts RollingWindow::add(Clock::time_point now, bool failed, bool slow) noexcept {
  const std::int64_t c = rotate(now);
  Bucket& b = buckets_[current_slot_];
  (failed ? b.failures : b.successes).fetch_add(1, std::memory_order_relaxed);
  if (slow) b.slow.fetch_add(1, std::memory_order_relaxed);
  return counts_at(c);
}

RollingWindow::Counts RollingWindow::counts(Clock::time_point now) const noexcept {
  return counts_at(bucket_of(now));
}

void RollingWindow::clear() noexcept {
  current_end_.store(no_end, std::memory_order_release);
  current_slot_ = 0;
  current_bucket_ = no_bucket;
  // A success that passed the bucket test before the store above may still reach a stripe: it
  // counts in the next bucket, as one racing a rotation.
  for (Stripe& s : stripes_) s.successes.store(0, std::memory_order_relaxed);
  for (Bucket& b : buckets_) {
    b.index.store(no_bucket, std::memory_order_relaxed);
    b.successes.store(0, std::memory_order_relaxed);
    b.failures.store(0, std::memory_order_relaxed);
    b.slow.store(0, std::memory_order_relaxed);
  }
}

}  // namespace kevlar::detail
