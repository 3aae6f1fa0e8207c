// kevlar — testing kit: run both orders of a two-party race, reproducibly.
#pragma once

#include <kevlar/testing/assertion.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace kevlar::testing {

/// Which party of a race goes first.
enum class RaceOrder : unsigned char {
  a_then_b,
  b_then_a,
};

/// `a then b` or `b then a`.
[[nodiscard]] const char* to_string(RaceOrder order) noexcept;
std::ostream& operator<<(std::ostream& os, RaceOrder order);

/// One run of a race.
struct RaceRound {
  std::size_t repetition = 0;  ///< 0, 1, 2...
  std::uint64_t seed = 0;      ///< race_seed(repetition): decides which order runs first
  RaceOrder order = RaceOrder::a_then_b;
};

/// The two parties of one run, on state built for that run, and what must hold after both.
struct RaceParties {
  std::function<void()> a;
  std::function<void()> b;
  /// Runs after both parties (may be empty); throws when the outcome is wrong.
  std::function<void()> check;
};

/// The seed of repetition `repetition`: 0x4B45564C + 397 x repetition (Kevlar's).
[[nodiscard]] constexpr std::uint64_t race_seed(std::size_t repetition) noexcept {
  return 0x4B45564CULL + 397ULL * static_cast<std::uint64_t>(repetition);
}
/// The order that repetition's seed runs first (a bit of its SplitMix64 mix); the other order
/// runs right after.
[[nodiscard]] RaceOrder first_order(std::uint64_t seed) noexcept;

/// A race failed: the name, the round (repetition, seed and order) and the failure.
class RaceFailure : public ShieldAssertionError {
 public:
  RaceFailure(const std::string& message, RaceRound round)
      : ShieldAssertionError(message), round_(round) {}
  [[nodiscard]] const RaceRound& round() const noexcept { return round_; }

 private:
  RaceRound round_;
};

/// What run_race ran.
struct RaceReport {
  std::size_t runs = 0;          ///< 2 per repetition
  std::size_t a_first_runs = 0;  ///< runs in the order a then b
  std::size_t b_first_runs = 0;  ///< runs in the order b then a
};

/// Runs a two-party race in both orders, `repetitions` times: for each repetition, the seed
/// race_seed(repetition) picks which order runs first, then both run, each on fresh state:
/// `setup(round)` builds it and returns the parties; the runner calls `a` then `b` (or `b` then
/// `a`), then `check`. Deterministic: the two completions a real race could deliver in either
/// order (a grant and a cancellation, a completion and a timeout) are delivered in each order
/// explicitly, on the calling thread (a StrategyDriver or a ManualClock makes each party one
/// call).
///
/// Throws RaceFailure on the first exception from `setup`, a party or `check`, with the message
/// `race "<name>" failed at repetition 3 (seed 0x4b455a0b, order b then a): <what>`. Throws
/// std::invalid_argument if setup returns a party that is empty.
///
/// Thread-safety: runs everything on the calling thread.
RaceReport run_race(std::string_view name, std::size_t repetitions,
                    const std::function<RaceParties(const RaceRound&)>& setup);

}  // namespace kevlar::testing
