// kevlar — the retry strategy and its backoff: re-run a call whose outcome the clause handles.
#pragma once

#include <kevlar/backoff.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/retry_budget.hpp>
#include <kevlar/strategy.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace kevlar {

/// A retry decided to try again, before its backoff wait (an event: Layer::emit, Observer).
struct RetryScheduled {
  static constexpr std::string_view kevlar_event = "RetryScheduled";
  int retry = 0;            ///< 1 for the first retry
  Clock::duration delay{};  ///< the backoff it waits before the next attempt
  Failure failure;          ///< the outcome that is being retried
};

/// `RetryOptions::max_retries` value that retries for as long as the clause handles the outcome
/// (describe() prints `RetryForever(...)`).
inline constexpr int retry_forever = std::numeric_limits<int>::max();

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
/// Hooks (kevlar::Hook) hold a function or a coroutine. A function runs inline on the execution's
/// completion path (the thread or executor that completed the failed call), one execution at a
/// time but concurrently across executions: it must be thread-safe and quick. A coroutine
/// (Kevlar's DelayGeneratorAsync / OnRetryAsync) is awaited by the retry, in Kevlar's order:
/// delay_generator, on_retry, then the wait. In an asynchronous execution it is spawned on the
/// execution's executor with its cancellation slot (the caller's cancellation, or a timeout
/// outside, aborts what it awaits); in a synchronous one it runs to completion on a private
/// io_context. Unset, they cost nothing.
///
/// A hook or generator that throws ends the execution with that exception (the same object): no
/// later hook runs and no further call is made. A coroutine hook ended by the caller's
/// cancellation ends the execution with `operation_aborted`.
struct RetryOptions {
  /// Retries after the first call (at most max_retries + 1 calls); 0 never retries;
  /// kevlar::retry_forever retries without limit. Must not be negative.
  int max_retries = 3;
  /// The delay sequence; default exponential 250 ms x2 with jitter, at most 30 s.
  Backoff backoff{};
  /// An absolute cap on every delay, including the delay generator's. In [0, max_delay_limit].
  std::optional<Clock::duration> max_delay;
  /// Overrides the delay: runs with the backoff's (capped) delay (RetryEvent::delay); a returned
  /// value >= 0 replaces it (then capped by max_delay); std::nullopt or a negative value keeps it.
  /// Typical use: honouring a server's "retry after" (e.g. kevlar::Error::retry_after()). A
  /// coroutine may await; the event's outcome and context stay valid while it runs.
  Hook<std::optional<Clock::duration>(const RetryEvent&)> delay_generator;
  /// Told about each retry, with the final delay, before the wait starts (a coroutine: awaited
  /// before the wait starts).
  Hook<void(const RetryEvent&)> on_retry;
  /// The outcomes this retry handles, instead of the ambient clause (Shield::when) in force where
  /// it is added (Kevlar's HandlesException / HandlesResult). Unset: the ambient clause.
  std::optional<Clause> handles;
  /// A budget shared with other retries and hedges (and other shields): each retry must be
  /// admitted by it, after the delay generators and before RetryScheduled; a refused retry ends
  /// the execution with the last failure and emits RetryBudgetExhausted. Every attempt's outcome
  /// feeds it (a success gives back, a handled failure takes: RetryBudget::record_*). Null: no
  /// budget (nothing is counted).
  std::shared_ptr<RetryBudget> budget;
};

namespace detail {
/// A retry's per-execution state.
struct RetryFrame {
  /// What the retry waits for when it returns Step::wait_until or awaits a hook.
  enum class Stage : unsigned char { backoff, delay_generator, on_retry };
  /// Only `used` is set: the rest is written before it is first read (the happy path, which
  /// never retries, stores one int).
  RetryFrame() noexcept : used(0) {}
  int used;                  ///< retries used by the execution
  /// With a budget (set by start, before it is read): the running attempt was admitted by the
  /// budget, which gets the admission back when the attempt ends.
  bool holding;
  Clock::duration previous;  ///< the backoff's delay for the last retry (decorrelated jitter)
  Clock::duration delay;     ///< the retry being decided: its delay so far
  Stage stage;               ///< the pending wait
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
/// backoff.delay(n, previous), capped by max_delay; delay_generator, its result capped again. It
/// stops there too, with the last failure, if the wait would end at or past the execution's
/// deadline (Context::deadline: an outer timeout's), or if the budget (RetryOptions::budget)
/// refuses the retry (RetryBudgetExhausted). Then: RetryScheduled; on_retry; if the caller
/// cancelled during the hooks the execution ends with `operation_aborted`; wait `delay` (a
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
  /// Reactive, stateless; with a budget, it needs finish.
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Runs the inner part (with a budget, counting the execution in it).
  Step start(Layer& layer, Frame& f);
  /// Decides on the completed call: complete, run again, or wait (see the class comment). The
  /// outcome (a success, or the last failure) surfaces unchanged. A plain success is told apart
  /// here, inline where the engine calls it; the clause is asked in retry(), out of line, so that
  /// this path saves no register.
  Step inner_complete(Layer& layer, Frame& f) {
    if (budget_ != nullptr) [[unlikely]] return budgeted_inner_complete(layer, f);
    if (layer.plain_success() || f.used >= options_.max_retries) return Step::complete;
    return retry(layer, f);
  }
  /// After the backoff: run again, or complete with the wait's error (`operation_aborted`).
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);
  /// With a budget: gives back the running attempt's admission and counts the execution out.
  void finish(Layer& layer, Frame& f) noexcept;

 private:
  [[nodiscard]] Clock::duration cap(Clock::duration d) const noexcept;
  /// on_inner_complete past a plain success with retries left: asks the clause, and retries a
  /// handled outcome. Out of line to keep the success path short.
  [[gnu::noinline]] Step retry(Layer& layer, Frame& f);
  /// inner_complete with a budget: feeds it the attempt's outcome, then decides as retry() does.
  [[gnu::noinline]] Step budgeted_inner_complete(Layer& layer, Frame& f);
  /// retry() once the clause has judged the outcome handled.
  Step retry_handled(Layer& layer, Frame& f);
  /// The decision's steps after the delay generators, and after the retry hooks.
  Step after_delay_generators(Layer& layer, Frame& f);
  Step after_retry_hooks(Layer& layer, Frame& f);
  /// An awaited hook ended: its failure (or the caller's cancellation) ends the execution.

  RetryOptions options_;
  std::shared_ptr<const Clause> own_clause_;  ///< options_.handles, shared with the pipeline
  RetryBudget* budget_;                       ///< options_.budget.get()
};

/// A retry strategy: `max_retries` retries after the first attempt, Kevlar's default backoff
/// (exponential from 250 ms x2 with jitter, at most 30 s). Add it with BasicShield::use or with
/// (`kevlar::Shield::retry` is the fluent form). Throws std::invalid_argument for a negative count.
[[nodiscard]] std::shared_ptr<RetryStrategy> retry(int max_retries = 3);
/// A retry strategy configured by `options` (std::invalid_argument names an invalid option).
[[nodiscard]] std::shared_ptr<RetryStrategy> retry(RetryOptions options);

}  // namespace kevlar
