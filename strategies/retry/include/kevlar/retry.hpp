// kevlar — the retry strategy and its backoff: re-run a call whose outcome the clause handles.
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/detail/await_hook.hpp>
#include <kevlar/context.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/strategy.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <string>

namespace kevlar {

/// `RetryOptions::max_retries` value that retries for as long as the clause handles the outcome
/// (describe() prints `RetryForever(...)`).
inline constexpr int retry_forever = std::numeric_limits<int>::max();

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
  static constexpr Clock::duration max_delay_limit = std::chrono::milliseconds(4294967294LL);
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

/// What the retry hooks see for one retry.
///
/// Valid only during the hook call: do not keep references to the outcome or the context.
struct RetryEvent {
  /// The retry number: 1 for the first retry (before the second call), 2 for the next...
  int attempt;
  /// The delay before the next call: the backoff's, capped by max_delay; for on_retry, after the
  /// delay generator.
  Clock::duration delay;
  /// The handled outcome of the call that just failed (read-only): error(), exception(), or for a
  /// result the clause judged bad, value_if<T>().
  OutcomeRef outcome;
  /// The execution's context (attempt(), properties()).
  Context& context;
};

/// Options of the retry strategy, with Kevlar's defaults. Copied into the strategy when the shield
/// is built: changing an options object afterwards changes nothing.
///
/// Synchronous hooks are `std::function`s run inline on the execution's completion path (the
/// thread or executor that completed the failed call), one execution at a time but concurrently
/// across executions: they must be thread-safe and quick. The asynchronous ones (Kevlar's
/// DelayGeneratorAsync / OnRetryAsync) are coroutines the retry awaits, in Kevlar's order:
/// delay_generator, delay_generator_async, on_retry, on_retry_async, then the wait. In an
/// asynchronous execution they are spawned on the execution's executor with its cancellation slot
/// (the caller's cancellation, or a timeout outside, aborts what they await); in a synchronous one
/// they run to completion on a private io_context. Unset, they cost nothing.
///
/// A hook or generator that throws ends the execution with that exception (the same object): no
/// later hook runs and no further call is made. An asynchronous hook ended by the caller's
/// cancellation ends the execution with `operation_aborted`.
struct RetryOptions {
  /// Retries after the first call (at most max_retries + 1 calls); 0 never retries;
  /// kevlar::retry_forever retries without limit. Must not be negative.
  int max_retries = 3;
  /// The delay sequence; default exponential 250 ms x2 with jitter, at most 30 s.
  Backoff backoff{};
  /// An absolute cap on every delay, including the delay generator's. In [0, max_delay_limit].
  std::optional<Clock::duration> max_delay;
  /// Overrides the delay: called with the backoff's (capped) delay; a returned value >= 0 replaces
  /// it (then capped by max_delay); std::nullopt or a negative value keeps it. Typical use:
  /// honouring a server's "retry after" (e.g. kevlar::Error::retry_after()).
  std::function<std::optional<Clock::duration>(const RetryEvent&)> delay_generator;
  /// Awaited after delay_generator, with the delay so far (RetryEvent::delay): a returned value
  /// >= 0 replaces it (then capped by max_delay); std::nullopt or a negative value keeps it. The
  /// event's outcome and context stay valid while it runs.
  std::function<boost::asio::awaitable<std::optional<Clock::duration>>(RetryEvent)>
      delay_generator_async;
  /// Told about each retry, with the final delay, before the wait starts.
  std::function<void(const RetryEvent&)> on_retry;
  /// Awaited after on_retry, with the final delay, before the wait starts.
  std::function<boost::asio::awaitable<void>(RetryEvent)> on_retry_async;
  /// The outcomes this retry handles, instead of the ambient clause (Shield::when) in force where
  /// it is added (Kevlar's HandlesException / HandlesResult). Unset: the ambient clause.
  std::optional<Clause> handles;
};

namespace detail {
/// A retry's per-execution state.
struct RetryFrame {
  /// What the retry waits for when it returns Step::wait or Step::suspend.
  enum class Stage : unsigned char { backoff, delay_generator, on_retry };
  /// Only `used` is set: the rest is written before it is first read (the happy path, which
  /// never retries, stores one int).
  RetryFrame() noexcept : used(0) {}
  int used;                  ///< retries used by the execution
  Clock::duration previous;  ///< the backoff's delay for the last retry (decorrelated jitter)
  Clock::duration delay;     ///< the retry being decided: its delay so far
  Stage stage;               ///< the pending wait
  HookEnd hook;              ///< how an awaited hook ended
};
}  // namespace detail

/// Re-runs the inner part of the pipeline while the clause in force where it was added handles the
/// outcome, up to RetryOptions::max_retries times, waiting the backoff's delay in between (the
/// thread sleeps on the shield's clock in Shield::execute; an asynchronous execution arms a clock
/// timer bound to the caller's cancellation).
///
/// Per failed call: it stops — the outcome surfaces unchanged, so exhausted retries surface the
/// last failure — when the retries are used up, the clause does not handle the outcome, or the
/// caller has cancelled (the original failure is returned, not a cancellation). Otherwise: delay =
/// backoff.delay(n, previous), capped by max_delay; delay_generator, then delay_generator_async,
/// each result capped again; on_retry, then on_retry_async; if the caller cancelled during the
/// hooks the execution ends with `operation_aborted`; wait `delay` (a
/// cancellation during the wait ends it with `operation_aborted`); call again. Caller
/// cancellation means the caller's stop token or cancellation slot, or a strategy outside this
/// one (a timeout's budget).
///
/// Completion: through the pipeline; adds no hop. Thread-safety: stateless; one instance serves
/// any number of concurrent executions (the retry count lives in the execution's frame).
class RetryStrategy final : public BasicStrategy<RetryStrategy, detail::RetryFrame> {
 public:
  /// Validates `options`: std::invalid_argument naming the option for a negative max_retries or a
  /// max_delay outside [0, Backoff::max_delay_limit].
  explicit RetryStrategy(RetryOptions options);

  /// The options it was built with.
  [[nodiscard]] const RetryOptions& options() const noexcept { return options_; }

  /// The delay before retry number `attempt` before hooks: the backoff's delay capped by
  /// max_delay (sans-I/O; draws jitter from the backoff's random source; `previous` as
  /// Backoff::delay's).
  [[nodiscard]] Clock::duration planned_delay(int attempt) const;
  [[nodiscard]] Clock::duration planned_delay(int attempt, Clock::duration previous) const;

  /// `Retry(3, exponential 250ms x2 +jitter <=30s)`, `Retry(2, constant 1s, <=10s)`,
  /// `RetryForever(no delay)`.
  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks; the frame counts the retries the execution used.
  /// Reactive, stateless.
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Runs the inner part.
  Step start(Layer& layer, Frame& f);
  /// Decides on the completed call: complete, run again, or wait (see the class comment).
  Step inner_complete(Layer& layer, Frame& f);
  /// After the backoff: run again, or complete with the wait's error (`operation_aborted`).
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);

 private:
  [[nodiscard]] Clock::duration cap(Clock::duration d) const noexcept;
  /// on_inner_complete past a plain success with retries left: asks the clause, and retries a
  /// handled outcome. Out of line to keep the success path short.
  [[gnu::noinline]] Step retry(Layer& layer, Frame& f);
  /// The decision's steps after the delay generators, and after the retry hooks.
  Step after_delay_generators(Layer& layer, Frame& f);
  Step after_retry_hooks(Layer& layer, Frame& f);
  /// An awaited hook ended: its failure (or the caller's cancellation) ends the execution.
  [[nodiscard]] static bool hook_failed(Layer& layer, const Frame& f);

  RetryOptions options_;
  std::shared_ptr<const Clause> own_clause_;  ///< options_.handles, shared with the pipeline
};

}  // namespace kevlar
