// kevlar — Shield: the core's BasicShield with the built-in strategies' fluent builders, so that a
// pipeline reads in one chain: `kevlar::Shield{}.timeout(30s).retry(3).circuit_breaker(5, 30s)`.
//
// The sugar lives here, in the aggregate kevlar::kevlar, and not in the core: the core's shield
// names no strategy, each strategy is a module of its own (its header offers a free factory,
// `kevlar::retry(3)`, that BasicShield::use and with accept), and this header is where they meet,
// as tower's feature-gated builder methods meet its middleware modules. A program that links
// only some strategies uses BasicShield and their factories.
#pragma once

#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/fallback.hpp>
#include <kevlar/hedging.hpp>
#include <kevlar/rate_limit.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/timeout.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

namespace kevlar {

/// A BasicShield with a fluent builder for each built-in strategy; see BasicShield for everything
/// else (execution, inspection, threading). Each builder appends the strategy its factory makes
/// (`retry(3)` appends `kevlar::retry(3)`) and returns a new Shield. Options are validated when
/// the shield is built: invalid values throw std::invalid_argument naming the option.
///
/// A Shield is a BasicShield (every function taking a shield takes a `const BasicShield&`), and a
/// BasicShield converts to a Shield (`Shield s = some_basic_shield;`).
///
/// Thread-safety: as BasicShield.
class Shield : public BasicShield {
 public:
  /// The empty shield: executes calls directly.
  Shield() noexcept = default;
  /// The same pipeline, with the fluent builders.
  Shield(BasicShield base) noexcept : BasicShield(std::move(base)) {}  // NOLINT: implicit

  // ---- the core's builders, returning a Shield ------------------------------------------------

  /// See BasicShield::use.
  [[nodiscard]] Shield use(std::shared_ptr<Strategy> strategy) const {
    return BasicShield::use(std::move(strategy));
  }
  /// See BasicShield::use.
  template <class S>
  requires std::derived_from<S, Strategy> && (!std::is_same_v<S, Strategy>)
  [[nodiscard]] Shield use(std::shared_ptr<S> strategy) const {
    return BasicShield::use(std::move(strategy));
  }
  /// See BasicShield::with.
  template <class S>
  requires std::derived_from<S, Strategy>
  [[nodiscard]] Shield with(std::shared_ptr<S> strategy) const {
    return BasicShield::with(std::move(strategy));
  }
  /// See BasicShield::with.
  [[nodiscard]] Shield with(const BasicShield& inner) const { return BasicShield::with(inner); }
  /// See BasicShield::when.
  [[nodiscard]] Shield when(Clause clause) const { return BasicShield::when(std::move(clause)); }
  /// See BasicShield::with_name.
  [[nodiscard]] Shield with_name(std::string name) const {
    return BasicShield::with_name(std::move(name));
  }
  /// See BasicShield::with_clock.
  [[nodiscard]] Shield with_clock(std::shared_ptr<const Clock> clock) const {
    return BasicShield::with_clock(std::move(clock));
  }
  /// See BasicShield::observed_by.
  [[nodiscard]] Shield observed_by(std::shared_ptr<Observer> observer) const {
    return BasicShield::observed_by(std::move(observer));
  }
  /// See BasicShield::wrap.
  [[nodiscard]] Shield wrap(const BasicShield& inner) const { return BasicShield::wrap(inner); }
  /// See BasicShield::compose.
  [[nodiscard]] static Shield compose(std::initializer_list<BasicShield> shields) {
    return BasicShield::compose(shields);
  }

  // ---- the built-in strategies ----------------------------------------------------------------

  /// Appends kevlar::retry(max_retries): Kevlar's default backoff (exponential from 250 ms x2
  /// with jitter, at most 30 s). See <kevlar/retry.hpp>.
  [[nodiscard]] Shield retry(int max_retries = 3) const { return use(kevlar::retry(max_retries)); }
  /// Appends kevlar::retry(options).
  [[nodiscard]] Shield retry(const RetryOptions& options) const {
    return use(kevlar::retry(options));
  }

  /// Appends kevlar::timeout(timeout): outside a retry it bounds the whole call, inside it each
  /// attempt. See <kevlar/timeout.hpp>.
  [[nodiscard]] Shield timeout(Clock::duration timeout) const {
    return use(kevlar::timeout(timeout));
  }
  /// Appends kevlar::timeout(options).
  [[nodiscard]] Shield timeout(const TimeoutOptions& options) const {
    return use(kevlar::timeout(options));
  }

  /// Appends kevlar::circuit_breaker(consecutive_failures, break_duration): opens after that many
  /// handled failures in a row, for `break_duration`. See <kevlar/circuit_breaker.hpp>.
  [[nodiscard]] Shield circuit_breaker(int consecutive_failures,
                                       Clock::duration break_duration) const {
    return use(kevlar::circuit_breaker(consecutive_failures, break_duration));
  }
  /// Appends kevlar::circuit_breaker(options).
  [[nodiscard]] Shield circuit_breaker(const CircuitBreakerOptions& options) const {
    return use(kevlar::circuit_breaker(options));
  }

  /// Appends kevlar::rate_limit(permits, window): at most `permits` calls per `window` on
  /// average, bursts up to `permits`, no queue (a call beyond the rate fails at once with
  /// `errc::rate_limited` and an exact retry-after). See <kevlar/rate_limit.hpp>.
  [[nodiscard]] Shield rate_limit(int permits, Clock::duration window) const {
    return use(kevlar::rate_limit(permits, window));
  }
  /// Appends kevlar::rate_limit(options).
  [[nodiscard]] Shield rate_limit(const RateLimitOptions& options) const {
    return use(kevlar::rate_limit(options));
  }

  /// Appends kevlar::concurrency_limit(max_concurrency, max_queue): at most `max_concurrency`
  /// calls run at once and at most `max_queue` wait. See <kevlar/concurrency_limit.hpp>.
  [[nodiscard]] Shield concurrency_limit(int max_concurrency, int max_queue = 0) const {
    return use(kevlar::concurrency_limit(max_concurrency, max_queue));
  }
  /// Appends kevlar::concurrency_limit(options).
  [[nodiscard]] Shield concurrency_limit(const ConcurrencyLimitOptions& options) const {
    return use(kevlar::concurrency_limit(options));
  }
  /// Appends kevlar::adaptive_concurrency_limit(options): a concurrency limit whose maximum follows
  /// the dependency's latency and drops. See <kevlar/adaptive_concurrency_limit.hpp>.
  [[nodiscard]] Shield adaptive_concurrency_limit(const AdaptiveLimitOptions& options = {}) const {
    return use(kevlar::adaptive_concurrency_limit(options));
  }
  /// Appends kevlar::adaptive_throttle(options): client-side adaptive throttling, rejecting a
  /// share of calls locally (`errc::throttled`) that grows as the dependency refuses more of the
  /// window's requests. See <kevlar/adaptive_throttle.hpp>.
  [[nodiscard]] Shield adaptive_throttle(const AdaptiveThrottleOptions& options = {}) const {
    return use(kevlar::adaptive_throttle(options));
  }

  /// Appends kevlar::hedge(max_attempts, delay): up to `max_attempts` attempts in total, the next
  /// one launched when those running take longer than `delay` (0: all at once;
  /// HedgeOptions::infinite_delay: only after a handled failure); the first outcome the clause
  /// does not handle wins and the others are cancelled. See <kevlar/hedging.hpp>.
  [[nodiscard]] Shield hedge(std::uint32_t max_attempts = 2,
                             Clock::duration delay = std::chrono::seconds(1)) const {
    return use(kevlar::hedge(max_attempts, delay));
  }
  /// Appends kevlar::hedge(options).
  [[nodiscard]] Shield hedge(const HedgeOptions& options) const {
    return use(kevlar::hedge(options));
  }

  /// Appends kevlar::fallback(value): replaces handled failures of calls whose value type is `T`
  /// with `value`. See <kevlar/fallback.hpp>.
  template <class T>
  [[nodiscard]] Shield fallback(T value) const {
    return use(kevlar::fallback<T>(std::move(value)));
  }
  /// Appends kevlar::fallback(options).
  template <class T>
  [[nodiscard]] Shield fallback(FallbackOptions<T> options) const {
    return use(kevlar::fallback<T>(std::move(options)));
  }
};

}  // namespace kevlar
