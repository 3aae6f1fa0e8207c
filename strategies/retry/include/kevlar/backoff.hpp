// kevlar — Backoff: the delays a retry waits between attempts (constant, linear, exponential or a
// function of your own) and how they are jittered. A value type, pure but for the jitter's sample.
#pragma once

#include <kevlar/clock.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace kevlar {

/// How a built-in backoff (constant, linear, exponential) randomises its delays, so that clients
/// that failed together do not retry together. `d` is the curve's delay for the retry and `u` a
/// uniform sample in [0, 1).
enum class Jitter : unsigned char {
  none,          ///< `d` as it is
  proportional,  ///< `d * (0.5 + u)`: in [d/2, 3d/2) (Kevlar's `Jitter.Equal`; kevlar's default)
  equal,         ///< `d/2 + u * d/2`: in [d/2, d) (AWS's "equal jitter")
  full,          ///< `u * d`: in [0, d) (AWS's "full jitter")
  /// `base + u * (max(base, 3 * previous) - base)`, where `base` is the constant delay, the linear
  /// step or the exponential initial delay, and `previous` the backoff's delay for the previous
  /// retry of the same execution, capped by RetryOptions::max_delay (`base` before the first):
  /// AWS's "decorrelated jitter", the curve's shape no longer matters. Delays grow about 1.5x a
  /// retry on average: give the backoff or the retry a max_delay.
  decorrelated,
};

/// `none`, `proportional`, `equal`, `full` or `decorrelated`.
[[nodiscard]] const char* to_string(Jitter jitter) noexcept;

/// The delays between attempts: a small value type with a pure, sans-I/O `delay(attempt)`.
///
/// Kinds (`attempt` is the 1-based retry number: 1 is the wait before the second call):
/// - none(): no delay; constant(d, jitter): `d`;
/// - linear(step, max_delay, jitter): `step * attempt`;
/// - exponential(initial, factor, max_delay, jitter): `initial * factor^(attempt - 1)`;
/// - custom(fn): whatever `fn(attempt)` returns (negative values become 0).
/// The built-in kinds apply their Jitter to that delay and the cap (`max_delay` if given, else one
/// day (implicit_cap) for linear and exponential and max_delay_limit for constant): equal and full
/// jitter cap first and jitter below the cap (AWS), proportional and decorrelated jitter cap the
/// jittered delay (Kevlar).
/// The arithmetic never overflows: a delay that would exceed its cap is the cap, a NaN is 0, and a
/// zero initial delay stays zero whatever the power.
///
/// A default-constructed Backoff is Kevlar's default: exponential from 250 ms, factor 2,
/// proportional jitter, at most 30 s.
///
/// Randomness: jitter draws from a per-thread generator (no lock, no allocation), or from the
/// source given to with_random() — tests inject a fixed one to make jitter deterministic. A backoff
/// without jitter draws nothing.
///
/// Thread-safety: immutable once built; delay() may be called from any number of threads (a
/// random source given to with_random() must then be thread-safe too).
class Backoff {
 public:
  /// The shape of the delay sequence.
  enum class Kind : unsigned char { constant, linear, exponential, custom };

  /// A source of uniform doubles in [0, 1) for the jitter (out-of-range values are clamped).
  using RandomSource = std::function<double()>;
  /// A custom delay sequence: the delay before retry number `attempt` (1-based).
  using Function = std::function<Clock::duration(int attempt)>;

  /// The longest delay kevlar accepts anywhere: (2^32 - 2) ms, about 49.7 days (Kevlar's limit).
  static constexpr Clock::duration max_delay_limit = kevlar::max_duration;
  /// The cap of linear and exponential backoffs built without `max_delay`.
  static constexpr Clock::duration implicit_cap = std::chrono::hours(24);

  /// Kevlar's default: exponential(250ms, 2.0, 30s, jitter on).
  Backoff() = default;

  /// No delay between attempts (describe(): `no delay`).
  [[nodiscard]] static Backoff none() { return constant(Clock::duration::zero()); }
  /// Always `delay`, jittered. Throws std::invalid_argument unless 0 <= delay <=
  /// max_delay_limit.
  [[nodiscard]] static Backoff constant(Clock::duration delay, Jitter jitter = Jitter::none);
  /// `step * attempt`, jittered, capped at `max_delay` (or implicit_cap). Throws
  /// std::invalid_argument for a negative step or a max_delay outside [0, max_delay_limit].
  [[nodiscard]] static Backoff linear(Clock::duration step,
                                      std::optional<Clock::duration> max_delay = std::nullopt,
                                      Jitter jitter = Jitter::none);
  /// `initial * factor^(attempt - 1)`, jittered, capped at `max_delay` (or implicit_cap). Throws
  /// std::invalid_argument for a negative initial delay, a factor that is not finite or below 1,
  /// or a max_delay outside [0, max_delay_limit].
  [[nodiscard]] static Backoff exponential(Clock::duration initial, double factor,
                                           std::optional<Clock::duration> max_delay,
                                           Jitter jitter);
  /// The same with `jitter` true for Jitter::proportional (the default), false for none.
  [[nodiscard]] static Backoff exponential(Clock::duration initial, double factor = 2.0,
                                           std::optional<Clock::duration> max_delay = std::nullopt,
                                           bool jitter = true) {
    return exponential(initial, factor, max_delay, jitter ? Jitter::proportional : Jitter::none);
  }
  /// `fn(attempt)`; negative results become 0 and results above max_delay_limit become the limit.
  /// Throws std::invalid_argument for an empty function.
  [[nodiscard]] static Backoff custom(Function fn);

  /// A copy drawing its jitter from `random` instead of the per-thread generator (an empty
  /// function restores the per-thread generator).
  [[nodiscard]] Backoff with_random(RandomSource random) const;

  /// The delay before retry number `attempt` (1-based), drawing the jitter sample from the random
  /// source. For decorrelated jitter, `previous` is the delay waited before the previous retry
  /// (zero or negative: none yet, the base is used). Without it (the first overload) a
  /// decorrelated delay is drawn `attempt` times from the base, as an execution would have.
  /// Throws std::invalid_argument for `attempt < 1`. A custom function's exception propagates.
  [[nodiscard]] Clock::duration delay(int attempt) const;
  [[nodiscard]] Clock::duration delay(int attempt, Clock::duration previous) const;
  /// The same with an explicit jitter sample `u` in [0, 1) (see Jitter; out-of-range samples and
  /// NaN are clamped into it): a pure function of its arguments.
  [[nodiscard]] Clock::duration delay(int attempt, double u,
                                      Clock::duration previous = Clock::duration::zero()) const;

  /// E.g. `exponential 250ms x2 +jitter <=30s`, `constant 1s`, `no delay`,
  /// `linear 500ms steps +full jitter`, `exponential 1s x2 +decorrelated jitter`, `custom backoff`.
  /// Proportional jitter prints `+jitter`, the others `+<kind> jitter`.
  [[nodiscard]] std::string describe() const;

  /// The shape of the sequence (none() is a constant zero).
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  /// The constant delay, the linear step or the exponential initial delay.
  [[nodiscard]] Clock::duration base() const noexcept { return base_; }
  /// The exponential factor (1 for the other kinds).
  [[nodiscard]] double factor() const noexcept { return factor_; }
  /// True if delays are jittered.
  [[nodiscard]] bool jitter() const noexcept { return jitter_ != Jitter::none; }
  /// How delays are jittered.
  [[nodiscard]] Jitter jitter_kind() const noexcept { return jitter_; }
  /// The explicit cap given to linear() or exponential(), if any.
  [[nodiscard]] const std::optional<Clock::duration>& max_delay() const noexcept {
    return max_delay_;
  }

 private:
  Kind kind_ = Kind::exponential;
  Clock::duration base_ = std::chrono::milliseconds(250);
  double factor_ = 2.0;
  std::optional<Clock::duration> max_delay_ = std::chrono::seconds(30);
  Jitter jitter_ = Jitter::proportional;
  Function custom_;
  RandomSource random_;
};

namespace detail {
/// Throws std::invalid_argument unless 0 <= d <= Backoff::max_delay_limit, naming
/// `kevlar::<where>: <what>` (what Backoff's factories and RetryOptions::max_delay check).
void check_retry_delay(const char* where, const char* what, Clock::duration d);
}  // namespace detail

}  // namespace kevlar
