// A plain token bucket, written independently of GCRA, that the rate limit's model tests compare
// against.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kevlar::test {

/// A plain token bucket: credit in nanoseconds of refill (one permit is T), capped at burst x T,
/// refilled one nanosecond per nanosecond; queued calls take their permit only when they run, in
/// order, as soon as the credit allows. Written independently of GCRA.
class TokenBucketModel {
 public:
  TokenBucketModel(std::int64_t t, std::int64_t burst, std::int64_t queue_limit)
      : t_(t), burst_(burst), queue_limit_(queue_limit), credit_(burst * t) {}

  /// Admitted: 0; queued: 1; rejected: 2 with the retry-after.
  int acquire(std::int64_t& retry_after) {
    if (waiting_ == 0 && credit_ >= t_) {
      credit_ -= t_;
      return 0;
    }
    // The time until the credit, once every queued call has taken its permit, reaches T.
    const std::int64_t owed = (waiting_ + 1) * t_ - credit_;
    if (waiting_ >= queue_limit_) {
      retry_after = owed > 0 ? owed : 0;
      return 2;
    }
    ++waiting_;
    return 1;
  }
  /// Moves time forward; returns how many queued calls could start (in order).
  std::int64_t advance(std::int64_t d) {
    std::int64_t started = 0;
    // Refill step by step through each start, so that the cap applies only while nobody waits.
    while (waiting_ > 0) {
      const std::int64_t need = t_ - credit_;
      if (need > d) break;
      if (need > 0) {
        credit_ += need;
        d -= need;
      }
      credit_ -= t_;
      --waiting_;
      ++started;
    }
    credit_ = std::min(burst_ * t_, credit_ + d);
    return started;
  }
  void cancel_one() { --waiting_; }
  [[nodiscard]] std::int64_t waiting() const { return waiting_; }

 private:
  std::int64_t t_;
  std::int64_t burst_;
  std::int64_t queue_limit_;
  std::int64_t credit_;
  std::int64_t waiting_ = 0;
};

}  // namespace kevlar::test
