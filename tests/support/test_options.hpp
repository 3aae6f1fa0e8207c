// Strategy options the tests build again and again, in one place.
#pragma once

#include <kevlar/kevlar.hpp>

namespace kevlar::test {

/// `n` retries with a constant backoff `delay` (0: none).
inline RetryOptions constant_retries(int n, Clock::duration delay) {
  RetryOptions r;
  r.max_retries = n;
  r.backoff = Backoff::constant(delay);
  return r;
}

/// A breaker opening after `failures` handled failures in a row, for `break_duration`.
inline CircuitBreakerOptions consecutive_breaker(int failures, Clock::duration break_duration) {
  CircuitBreakerOptions o;
  o.consecutive_failures = failures;
  o.break_duration = break_duration;
  return o;
}

/// A concurrency limit of `concurrency` permits and `queue` waiting places.
inline ConcurrencyLimitOptions limits(int concurrency, int queue) {
  ConcurrencyLimitOptions o;
  o.max_concurrency = concurrency;
  o.max_queue = queue;
  return o;
}

}  // namespace kevlar::test
