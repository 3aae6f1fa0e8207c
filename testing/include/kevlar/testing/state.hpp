// kevlar — testing kit: one snapshot of the state of every stateful strategy of a shield.
#pragma once

#include <kevlar/circuit_breaker.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/testing/descriptors.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace kevlar::testing {

/// A circuit breaker's state.
struct CircuitBreakerStateSnapshot {
  static constexpr StrategyKind kind = StrategyKind::circuit_breaker;
  std::size_t index = 0;  ///< position in the shield, outermost 0
  /// CircuitBreaker::state() (an open circuit whose break elapsed reads open until the next call).
  CircuitState state = CircuitState::closed;

  friend bool operator==(const CircuitBreakerStateSnapshot&,
                         const CircuitBreakerStateSnapshot&) = default;
};

/// A concurrency limit's accounting.
struct ConcurrencyLimitStateSnapshot {
  static constexpr StrategyKind kind = StrategyKind::concurrency_limit;
  std::size_t index = 0;
  std::uint32_t running = 0;    ///< permits in use (including grants on their way to a waiter)
  std::uint32_t queued = 0;     ///< callers waiting for a permit
  std::uint32_t available = 0;  ///< max_concurrency - running
  bool closed = false;          ///< ConcurrencyLimitStrategy::close() was called

  friend bool operator==(const ConcurrencyLimitStateSnapshot&,
                         const ConcurrencyLimitStateSnapshot&) = default;
};

/// A rate limit's permits, read at the shield's clock's now().
struct RateLimitStateSnapshot {
  static constexpr StrategyKind kind = StrategyKind::rate_limit;
  std::size_t index = 0;
  std::uint32_t available = 0;  ///< permits a call could take now (0 while anyone is queued)
  std::uint32_t queued = 0;     ///< calls holding a reservation, waiting for its due time

  friend bool operator==(const RateLimitStateSnapshot&, const RateLimitStateSnapshot&) = default;
};

/// The state of one stateful strategy.
using StrategyStateSnapshot = std::variant<CircuitBreakerStateSnapshot,
                                           ConcurrencyLimitStateSnapshot, RateLimitStateSnapshot>;

/// True for the snapshot types of StrategyStateSnapshot.
template <class S>
concept StrategyStateSnapshotType = std::is_same_v<S, CircuitBreakerStateSnapshot> ||
    std::is_same_v<S, ConcurrencyLimitStateSnapshot> || std::is_same_v<S, RateLimitStateSnapshot>;

/// The state of every stateful strategy of a shield, outermost first (stateless strategies have
/// no entry; each entry keeps its strategy's position).
struct ShieldStateSnapshot {
  std::vector<StrategyStateSnapshot> strategies;

  /// The snapshots of type S, outermost first.
  template <StrategyStateSnapshotType S>
  [[nodiscard]] std::vector<S> all_of() const {
    std::vector<S> r;
    for (const StrategyStateSnapshot& s : strategies) {
      if (const S* p = std::get_if<S>(&s)) r.push_back(*p);
    }
    return r;
  }
  /// The only snapshot of type S. Throws ShieldAssertionError (printing the snapshot) unless there
  /// is exactly one.
  template <StrategyStateSnapshotType S>
  [[nodiscard]] S single() const {
    std::vector<S> r = all_of<S>();
    if (r.size() != 1) fail_single(S::kind, r.size());
    return r.front();
  }

  friend bool operator==(const ShieldStateSnapshot&, const ShieldStateSnapshot&) = default;

 private:
  [[noreturn]] void fail_single(StrategyKind kind, std::size_t found) const;
};

/// Reads the state of every stateful strategy of `shield` (circuit breakers, concurrency limits,
/// rate limits; rate limits at `shield.clock().now()`). Observations, not reservations: nothing
/// is taken or changed, and the values may be stale as soon as they are returned when other
/// threads run calls. Each strategy is read on its own (the snapshot is not atomic across
/// strategies). Composed shields sharing a strategy report the same state for it. Thread-safe.
[[nodiscard]] ShieldStateSnapshot shield_state(const BasicShield& shield);

/// `#2 CircuitBreaker{open}`, `#3 ConcurrencyLimit{running=1, queued=0, available=9}`,
/// `#0 RateLimit{available=2, queued=0}`.
std::ostream& operator<<(std::ostream& os, const CircuitBreakerStateSnapshot& s);
std::ostream& operator<<(std::ostream& os, const ConcurrencyLimitStateSnapshot& s);
std::ostream& operator<<(std::ostream& os, const RateLimitStateSnapshot& s);
std::ostream& operator<<(std::ostream& os, const StrategyStateSnapshot& s);
/// `[#2 CircuitBreaker{open}, ...]`.
std::ostream& operator<<(std::ostream& os, const ShieldStateSnapshot& s);
[[nodiscard]] std::string to_string(const ShieldStateSnapshot& s);

}  // namespace kevlar::testing
