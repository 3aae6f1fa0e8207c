// kevlar — testing kit: the shape of a shield as typed values, and assertions on it.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/fallback.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/testing/assertion.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace kevlar::testing {

/// What a strategy is, as describe_shield() tells them apart. The values are Kevlar's.
enum class StrategyKind : unsigned char {
  custom = 0,  ///< any strategy the kit does not know (user-defined, or a kind added later)
  retry = 1,
  timeout = 2,
  circuit_breaker = 3,
  rate_limit = 4,
  concurrency_limit = 5,
  hedging = 6,
  fallback = 7,
};

/// `Custom`, `Retry`, `Timeout`, `CircuitBreaker`, `RateLimit`, `ConcurrencyLimit`, `Hedging`,
/// `Fallback`.
[[nodiscard]] const char* to_string(StrategyKind kind) noexcept;
/// Prints to_string(kind).
std::ostream& operator<<(std::ostream& os, StrategyKind kind);

/// The shape of a retry's delay sequence (Backoff::Kind, with a constant zero told apart).
enum class BackoffKind : unsigned char {
  none,         ///< no delay (Backoff::none(), a constant zero)
  constant,     ///< Backoff::constant
  linear,       ///< Backoff::linear
  exponential,  ///< Backoff::exponential
  custom,       ///< Backoff::custom (described without calling it)
};

/// `none`, `constant`, `linear`, `exponential` or `custom`.
[[nodiscard]] const char* to_string(BackoffKind kind) noexcept;
std::ostream& operator<<(std::ostream& os, BackoffKind kind);

/// A retry's backoff, without its function or random source.
struct BackoffDescriptor {
  BackoffKind kind = BackoffKind::exponential;
  /// The constant delay, the linear step or the exponential initial delay (zero for none and
  /// custom).
  Clock::duration base{};
  double factor = 1.0;                       ///< the exponential factor (1 for other kinds)
  std::optional<Clock::duration> max_delay;  ///< the cap given to linear() or exponential()
  Jitter jitter = Jitter::none;              ///< how delays are jittered

  friend bool operator==(const BackoffDescriptor&, const BackoffDescriptor&) = default;
};

/// A RetryStrategy (RetryOptions).
struct RetryDescriptor {
  static constexpr StrategyKind kind = StrategyKind::retry;
  std::size_t index = 0;  ///< position in the shield, outermost 0
  int max_retries = 0;    ///< kevlar::retry_forever for a retry without limit
  BackoffDescriptor backoff;
  std::optional<Clock::duration> max_delay;  ///< RetryOptions::max_delay, the absolute cap
  bool has_delay_generator = false;          ///< delay_generator is set (a function or a coroutine)
  bool has_on_retry = false;                 ///< on_retry is set (a function or a coroutine)

  friend bool operator==(const RetryDescriptor&, const RetryDescriptor&) = default;
};

/// A TimeoutStrategy (TimeoutOptions).
struct TimeoutDescriptor {
  static constexpr StrategyKind kind = StrategyKind::timeout;
  std::size_t index = 0;
  Clock::duration timeout{};  ///< the fixed budget (used when there is no generator)
  bool has_timeout_generator = false;
  bool has_on_timeout = false;  ///< on_timeout is set (a function or a coroutine)

  friend bool operator==(const TimeoutDescriptor&, const TimeoutDescriptor&) = default;
};

/// How a circuit breaker counts failures.
enum class BreakerMode : unsigned char {
  consecutive,  ///< opens after N handled failures in a row
  ratio,        ///< opens when the failure ratio over the sampling window reaches a threshold
};

/// `consecutive` or `ratio`.
[[nodiscard]] const char* to_string(BreakerMode mode) noexcept;
std::ostream& operator<<(std::ostream& os, BreakerMode mode);

/// A CircuitBreaker (CircuitBreakerOptions, as the breaker normalised them: a breaker built with
/// neither threshold is in consecutive mode with 5).
struct CircuitBreakerDescriptor {
  static constexpr StrategyKind kind = StrategyKind::circuit_breaker;
  std::size_t index = 0;
  BreakerMode mode = BreakerMode::consecutive;
  std::optional<int> consecutive_failures;         ///< consecutive mode only
  std::optional<double> failure_ratio;             ///< ratio mode only
  std::optional<int> minimum_throughput;           ///< ratio mode, or slow calls tracked
  std::optional<Clock::duration> sampling_window;  ///< ratio mode, or slow calls tracked
  std::optional<Clock::duration> slow_call_threshold;  ///< slow calls tracked only
  std::optional<double> slow_call_ratio;               ///< slow calls tracked only
  Clock::duration break_duration{};  ///< the fixed break (used when there is no generator)
  int half_open_probes = 1;
  int success_threshold = 1;
  /// CircuitBreakerOptions::break_duration_generator is set (a function or a coroutine).
  bool has_break_duration_generator = false;
  /// CircuitBreakerOptions::on_state_changed is set (a function or a coroutine; subscribers added
  /// later are not options).
  bool has_on_state_changed = false;

  friend bool operator==(const CircuitBreakerDescriptor&,
                         const CircuitBreakerDescriptor&) = default;
};

/// A RateLimitStrategy (RateLimitOptions).
struct RateLimitDescriptor {
  static constexpr StrategyKind kind = StrategyKind::rate_limit;
  std::size_t index = 0;
  int permits = 0;
  Clock::duration window{};
  int burst = 0;  ///< the effective burst (RateLimitOptions::burst, or `permits` when unset)
  int queue_limit = 0;
  bool has_on_rejected = false;  ///< on_rejected is set (a function or a coroutine)
  bool has_hold_from_outcome = false;

  friend bool operator==(const RateLimitDescriptor&, const RateLimitDescriptor&) = default;
};

/// A ConcurrencyLimitStrategy (ConcurrencyLimitOptions).
struct ConcurrencyLimitDescriptor {
  static constexpr StrategyKind kind = StrategyKind::concurrency_limit;
  std::size_t index = 0;
  int max_concurrency = 0;
  int max_queue = 0;
  bool has_on_rejected = false;  ///< on_rejected is set (a function or a coroutine)

  friend bool operator==(const ConcurrencyLimitDescriptor&,
                         const ConcurrencyLimitDescriptor&) = default;
};

/// A HedgeStrategy (HedgeOptions).
struct HedgingDescriptor {
  static constexpr StrategyKind kind = StrategyKind::hedging;
  std::size_t index = 0;
  std::uint32_t max_attempts = 0;
  Clock::duration delay{};  ///< HedgeOptions::infinite_delay: only after a handled failure
  bool has_on_hedge = false;
  bool has_action_generator = false;

  friend bool operator==(const HedgingDescriptor&, const HedgingDescriptor&) = default;
};

/// A FallbackStrategy<T>. The strategy is a template, so describe_shield() knows its hooks only
/// for the value types it is told about (`describe_shield<int, std::string>(shield)`); otherwise
/// they are unknown (std::nullopt).
struct FallbackDescriptor {
  static constexpr StrategyKind kind = StrategyKind::fallback;
  std::size_t index = 0;
  std::string result_type;           ///< the value type T, as the compiler spells it (`int`)
  std::optional<bool> has_recovery;  ///< a recovery (function or coroutine) instead of a value
  std::optional<bool> has_on_fallback;  ///< on_fallback is set (a function or a coroutine)

  friend bool operator==(const FallbackDescriptor&, const FallbackDescriptor&) = default;
};

/// Any other strategy: what its describe() says.
struct CustomDescriptor {
  static constexpr StrategyKind kind = StrategyKind::custom;
  std::size_t index = 0;
  std::string description;  ///< Strategy::describe()

  friend bool operator==(const CustomDescriptor&, const CustomDescriptor&) = default;
};

/// One strategy of a shield, typed by kind.
using StrategyDescriptor =
    std::variant<RetryDescriptor, TimeoutDescriptor, CircuitBreakerDescriptor, RateLimitDescriptor,
                 ConcurrencyLimitDescriptor, HedgingDescriptor, FallbackDescriptor,
                 CustomDescriptor>;

/// True for the descriptor types of StrategyDescriptor.
template <class D>
concept StrategyDescriptorType =
    std::is_same_v<D, RetryDescriptor> || std::is_same_v<D, TimeoutDescriptor> ||
    std::is_same_v<D, CircuitBreakerDescriptor> || std::is_same_v<D, RateLimitDescriptor> ||
    std::is_same_v<D, ConcurrencyLimitDescriptor> || std::is_same_v<D, HedgingDescriptor> ||
    std::is_same_v<D, FallbackDescriptor> || std::is_same_v<D, CustomDescriptor>;

/// The kind of `d`.
[[nodiscard]] StrategyKind kind_of(const StrategyDescriptor& d) noexcept;
/// The position of `d` in its shield (outermost 0).
[[nodiscard]] std::size_t index_of(const StrategyDescriptor& d) noexcept;

/// A shield's shape: its name and its strategies, outermost first. An immutable value: it holds
/// no callback, no strategy and no state, and stays valid after the shield is gone.
struct ShieldDescriptor {
  std::optional<std::string> name;  ///< Shield::with_name
  bool custom_clock = false;        ///< the shield reads time from a clock other than steady()
  std::vector<StrategyDescriptor> strategies;

  /// The kinds of the strategies, outermost first.
  [[nodiscard]] std::vector<StrategyKind> kinds() const;
  /// The descriptors of type D, outermost first.
  template <StrategyDescriptorType D>
  [[nodiscard]] std::vector<D> all_of() const {
    std::vector<D> r;
    for (const StrategyDescriptor& s : strategies) {
      if (const D* d = std::get_if<D>(&s)) r.push_back(*d);
    }
    return r;
  }

  friend bool operator==(const ShieldDescriptor&, const ShieldDescriptor&) = default;
};

/// Describes `shield`: one typed descriptor per strategy, from the options the strategies were
/// built with. Strategies are recognised by their type (the built-in ones); anything else is a
/// CustomDescriptor. Never calls a callback, never reads or changes state. Thread-safe (a shield is
/// immutable and options are read-only).
[[nodiscard]] ShieldDescriptor describe_shield(const BasicShield& shield);

/// Like describe_shield(shield), also telling the hooks of fallbacks whose value type is one of
/// `FallbackTypes` (FallbackDescriptor::has_recovery, has_on_fallback).
template <class... FallbackTypes>
requires(sizeof...(FallbackTypes) > 0) [[nodiscard]] ShieldDescriptor
    describe_shield(const BasicShield& shield) {
  ShieldDescriptor d = describe_shield(shield);
  const std::vector<std::shared_ptr<Strategy>> strategies = shield.strategies();
  for (StrategyDescriptor& s : d.strategies) {
    auto* f = std::get_if<FallbackDescriptor>(&s);
    if (f == nullptr) continue;
    const Strategy* strategy = strategies.at(f->index).get();
    (
        [&] {
          if (const auto* typed = dynamic_cast<const FallbackStrategy<FallbackTypes>*>(strategy)) {
            f->has_recovery = static_cast<bool>(typed->options().recovery);
            f->has_on_fallback = static_cast<bool>(typed->options().on_fallback);
          }
        }(),
        ...);
  }
  return d;
}

/// Prints the descriptor on one line, e.g.
/// `#1 Retry{max_retries=3, backoff=exponential 250ms x2 +jitter <=30s}`: the fields that differ
/// from "not set" (hooks are listed as `+on_retry`...).
std::ostream& operator<<(std::ostream& os, const BackoffDescriptor& d);
std::ostream& operator<<(std::ostream& os, const RetryDescriptor& d);
std::ostream& operator<<(std::ostream& os, const TimeoutDescriptor& d);
std::ostream& operator<<(std::ostream& os, const CircuitBreakerDescriptor& d);
std::ostream& operator<<(std::ostream& os, const RateLimitDescriptor& d);
std::ostream& operator<<(std::ostream& os, const ConcurrencyLimitDescriptor& d);
std::ostream& operator<<(std::ostream& os, const HedgingDescriptor& d);
std::ostream& operator<<(std::ostream& os, const FallbackDescriptor& d);
std::ostream& operator<<(std::ostream& os, const CustomDescriptor& d);
std::ostream& operator<<(std::ostream& os, const StrategyDescriptor& d);
/// `api: [#0 Timeout{30s}, #1 Retry{...}]` (`(unnamed)` without a name; `[]` when empty).
std::ostream& operator<<(std::ostream& os, const ShieldDescriptor& d);

/// The printed form of a descriptor (as operator<<).
[[nodiscard]] std::string to_string(const StrategyDescriptor& d);
[[nodiscard]] std::string to_string(const ShieldDescriptor& d);

// ---- assertions
// ---------------------------------------------------------------------------------- Each throws
// ShieldAssertionError, whose message names the assertion, what it expected and the shield's actual
// shape. Thread-safe.

/// The shield holds exactly `n` strategies.
void expect_strategy_count(const BasicShield& shield, std::size_t n);
/// The shield's strategies are of these kinds, in this order (outermost first), and no others.
void expect_strategy_order(const BasicShield& shield, const std::vector<StrategyKind>& kinds);

namespace detail {
[[noreturn]] void fail_contains(const ShieldDescriptor& shape, StrategyKind kind, std::size_t found,
                                bool single);
}  // namespace detail

/// The shield holds at least one strategy described by D; returns the outermost one.
template <StrategyDescriptorType D>
D expect_contains(const BasicShield& shield) {
  const ShieldDescriptor shape = describe_shield(shield);
  std::vector<D> found = shape.all_of<D>();
  if (found.empty()) detail::fail_contains(shape, D::kind, 0, false);
  return found.front();
}

/// The shield holds exactly one strategy described by D; returns it.
template <StrategyDescriptorType D>
D expect_contains_single(const BasicShield& shield) {
  const ShieldDescriptor shape = describe_shield(shield);
  std::vector<D> found = shape.all_of<D>();
  if (found.size() != 1) detail::fail_contains(shape, D::kind, found.size(), true);
  return found.front();
}

}  // namespace kevlar::testing
