// kevlar — chaos strategies: inject latency, faults, outcomes and behaviour, to rehearse what a
// shield does in an outage before the outage comes.
#pragma once

#include <kevlar/basic_shield.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/error.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace kevlar {

/// What a chaos strategy injects.
enum class ChaosKind : unsigned char {
  latency,   ///< a wait before the call
  fault,     ///< a failure instead of the call
  outcome,   ///< a result instead of the call
  behavior,  ///< a user callback before the call
};

/// `latency`, `fault`, `outcome` or `behavior` (the metric tag values).
[[nodiscard]] const char* to_string(ChaosKind kind) noexcept;

/// A chaos strategy injected something (after its on_injected hook, before the injection takes
/// effect): an event (Layer::emit, Observer).
struct ChaosInjected {
  static constexpr std::string_view kevlar_event = "ChaosInjected";
  ChaosKind kind = ChaosKind::fault;
  std::string operation;    ///< the execution's chaos scope's operation ("" when none)
  std::string environment;  ///< the execution's chaos scope's environment ("" when none)
};

/// The operation and environment a call runs in, as chaos options match them
/// (ChaosOptions::operation, ChaosOptions::environment). Unset values match no option that names
/// one.
struct ChaosScopeValues {
  std::optional<std::string> operation;
  std::optional<std::string> environment;
  friend bool operator==(const ChaosScopeValues&, const ChaosScopeValues&) = default;
};

/// Sets the chaos scope of the calls this thread starts while it lives (RAII). Scopes nest: an
/// inner scope inherits the values it leaves unset from the one around it, and the outer scope is
/// restored when the inner one is destroyed.
///
/// ```
/// kevlar::ChaosScope scope{"checkout", "staging"};
/// shield.execute(fn);    // chaos strategies that name "checkout" or "staging" may inject
/// ```
///
/// When an enabled chaos strategy first decides for an execution, it reads the scope recorded in
/// the execution's Context (chaos_scope_key()) or, if there is none, this thread's scope, and
/// records that in the Context, so that every later decision of the same execution (a retry's
/// next attempt, a strategy after a wait, on whatever thread it runs) sees the scope the
/// execution first saw. A synchronous execution makes its first decision on the calling thread.
/// An asynchronous one does too, unless something defers the execution before its first chaos
/// strategy (a queue, a retry's backoff after a rejection, a hedge's later attempt): put
/// chaos::capture_scope() outermost to capture the scope when the execution starts, or record it
/// yourself (record_chaos_scope).
///
/// A scope is a value on its thread's stack: it belongs to the thread, not to a coroutine. Never
/// keep one across a `co_await` (the coroutine may resume on another thread, and other work on this
/// thread would see the scope meanwhile): open one per thread for the thread's life (an
/// environment), or use record_chaos_scope where the execution's Context is at hand. A scope
/// destroyed out of order, or on another thread, removes only its own value and never leaves a
/// dangling one.
///
/// Thread-safety: each thread has its own scope stack.
class ChaosScope {
 public:
  /// Enters a scope with these values (unset ones inherited from the enclosing scope).
  explicit ChaosScope(std::optional<std::string> operation,
                      std::optional<std::string> environment = std::nullopt);
  ~ChaosScope();
  ChaosScope(const ChaosScope&) = delete;
  ChaosScope& operator=(const ChaosScope&) = delete;

  /// The values in force inside this scope (the inherited ones included).
  [[nodiscard]] const ChaosScopeValues& values() const noexcept { return values_; }
  /// This thread's innermost scope's values, or nullptr outside every scope. Valid until that
  /// scope ends.
  [[nodiscard]] static const ChaosScopeValues* current() noexcept;

 private:
  ChaosScopeValues values_;
  std::uint64_t token_;  ///< identifies this scope's entry on its thread's stack
};

/// The Context property in which an execution's chaos scope is recorded.
[[nodiscard]] const Key<ChaosScopeValues>& chaos_scope_key();

/// Records `values` as the chaos scope of the execution whose context is `context` (replacing
/// any recorded one). Use it from an attempt, a hedge's action generator or a custom strategy.
void record_chaos_scope(Context& context, ChaosScopeValues values);

/// What a chaos strategy tells ChaosOptions::on_injected. Valid only during that call.
struct ChaosEvent {
  ChaosKind kind;             ///< what is injected
  Context& context;           ///< the execution's context (do not keep it)
  std::string_view operation;    ///< the scope's operation ("" when the scope has none)
  std::string_view environment;  ///< the scope's environment ("" when the scope has none)
  double injection_rate;      ///< the rate in force for this decision, in [0, 1]
  double sample;              ///< the random sample drawn, in [0, 1) (0 when the rate is 1)
};

/// The options every chaos strategy shares. Copied into the strategy when it is built.
///
/// A decision, per execution reaching the strategy, in this order (the first "no" ends it, with
/// nothing injected and no random number drawn): `enabled`; `enabled_generator`; `predicate`;
/// `operation` and `environment` against the execution's scope (ChaosScope); the rate
/// (`injection_rate_generator` or `injection_rate`; a rate of 0 injects nothing); the sample (a
/// rate of 1 injects without drawing one; otherwise a number in [0, 1) drawn from the strategy's
/// own SplitMix64 sequence, injecting when it is below the rate). Then the strategy's payload is
/// computed, `on_injected` is called, and the injection takes effect.
///
/// An injection is reported to the shield's observers (Shield::observed_by) as a ChaosInjected
/// event, after `on_injected`.
///
/// A generator, predicate or hook that throws, or a generated rate outside [0, 1] (an
/// std::invalid_argument), ends the execution at this position with that exception as its
/// outcome; the operation is not called.
struct ChaosOptions {
  /// Master switch, off by default: a disabled strategy is a pass-through and decides nothing.
  bool enabled = false;
  /// The probability of injecting, in [0, 1].
  double injection_rate = 1.0;
  /// If set, chooses the rate per execution instead of `injection_rate` (validated: [0, 1]).
  std::function<double(Context&)> injection_rate_generator;
  /// If set, a kill switch read per execution: false injects nothing.
  std::function<bool(Context&)> enabled_generator;
  /// If set, only executions for which it returns true may be injected.
  std::function<bool(Context&)> predicate;
  /// If set, only executions whose scope has this operation may be injected.
  std::optional<std::string> operation;
  /// If set, only executions whose scope has this environment may be injected.
  std::optional<std::string> environment;
  /// The random sequence's seed: two strategies built with the same seed make the same decisions
  /// for the same sequence of executions (in one thread; across threads the same decisions as a
  /// multiset). Unset: a distinct seed per strategy from a process-wide sequence.
  std::optional<std::uint64_t> seed;
  /// Told about each injection, before it takes effect.
  std::function<void(const ChaosEvent&)> on_injected;
};

namespace detail {

/// The decision every chaos strategy makes, with its random sequence (SplitMix64 over an atomic
/// state advanced once per drawn sample: safe and deterministic under concurrency).
class ChaosCore {
 public:
  /// Validates the common options (`owner` names the options type in messages). `options` belongs
  /// to the strategy that owns this core (its options' `chaos` member) and must outlive it.
  ChaosCore(const ChaosOptions& options, const char* owner);

  /// What a decision to inject found.
  struct Decision {
    double rate = 0;
    double sample = 0;
  };

  /// True if this execution is injected (see ChaosOptions for the order); fills `d`. Throws what
  /// a user callback throws, and std::invalid_argument for a generated rate outside [0, 1].
  bool decide(Layer& layer, Decision& d);
  /// Calls on_injected, if set, then emits ChaosInjected to the shield's observers.
  void notify(ChaosKind kind, Layer& layer, const Decision& d) const;
  /// The next number of the strategy's sequence, in [0, 1).
  double next_sample() noexcept;

  [[nodiscard]] bool enabled() const noexcept { return options_.enabled; }
  [[nodiscard]] const ChaosOptions& options() const noexcept { return options_; }
  /// `, rate 0.1` `, seed 7` `, disabled`… for describe().
  [[nodiscard]] std::string describe_options() const;

 private:
  const ChaosOptions& options_;  ///< the owning strategy's, not a second copy
  std::atomic<std::uint64_t> state_;
};

}  // namespace detail

// ---- latency -------------------------------------------------------------------------------------

/// Options of ChaosLatencyStrategy.
struct ChaosLatencyOptions {
  ChaosOptions chaos;
  /// The wait injected before the call, in [0, max_delay].
  Clock::duration delay = std::chrono::seconds(1);
  /// If set, chooses the wait per injection instead of `delay` (validated like `delay`).
  std::function<Clock::duration(Context&)> delay_generator;

  /// The longest injected wait (2^32 - 2 ms, about 49.7 days).
  static constexpr Clock::duration max_delay = kevlar::max_duration;
};

/// Injects latency: an injected execution waits on the shield's clock, then runs the inner part.
///
/// The wait is the engine's (Step::wait_until): in an asynchronous execution a clock wait that the
/// caller's cancellation, or a timeout outside, ends at once with `operation_aborted` (the
/// operation is then not called); in a synchronous one the thread sleeps on the clock, and a
/// deadline (a timeout outside) or the caller's stop token cuts the sleep short. A zero wait
/// injects nothing but on_injected.
///
/// Thread-safety: one instance serves any number of concurrent executions.
class ChaosLatencyStrategy final : public Strategy {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit ChaosLatencyStrategy(ChaosLatencyOptions options);

  /// `ChaosLatency(1s, rate 0.1)`; `, disabled` when off.
  [[nodiscard]] std::string describe() const override;
  /// Proactive, stateless, no frame.
  [[nodiscard]] StrategyTraits traits() const noexcept override { return {}; }
  Step on_start(Layer& layer) override;
  Step on_wait_complete(Layer& layer, const boost::system::error_code& ec) override;

  [[nodiscard]] const ChaosLatencyOptions& options() const noexcept { return options_; }

 private:
  ChaosLatencyOptions options_;
  detail::ChaosCore core_;
};

// ---- fault ---------------------------------------------------------------------------------------

/// The exception a fault injection produces when its options name no fault of their own.
class ChaosInjectedError : public std::runtime_error {
 public:
  ChaosInjectedError() : std::runtime_error("kevlar: a fault was injected by a chaos strategy") {}
};

/// A fault: an error code or an exception (exactly one is set).
struct ChaosFault {
  boost::system::error_code error;
  std::exception_ptr exception;
};

/// Options of ChaosFaultStrategy. Set at most one of `error`, `exception` and `fault_generator`;
/// with none, the fault is one ChaosInjectedError, made when the strategy is built.
struct ChaosFaultOptions {
  ChaosOptions chaos;
  /// The error code to fail with.
  boost::system::error_code error;
  /// The exception to fail with (the same object every time).
  std::exception_ptr exception;
  /// If set, makes the fault per injection; a result with neither or both members set fails the
  /// execution with std::logic_error.
  std::function<ChaosFault(Context&)> fault_generator;
};

/// Injects faults: an injected execution fails at this position with the fault, without running
/// the inner part (nor the operation). An error code fails an asynchronous call with that code
/// and Shield::execute with kevlar::Error; an exception is the outcome as it is (an error-code
/// completion reports it as `errc::callback_exception`, as for any exception).
///
/// Thread-safety: one instance serves any number of concurrent executions.
class ChaosFaultStrategy final : public Strategy {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit ChaosFaultStrategy(ChaosFaultOptions options);

  /// `ChaosFault(rate 0.1)`; `, disabled` when off.
  [[nodiscard]] std::string describe() const override;
  [[nodiscard]] StrategyTraits traits() const noexcept override { return {}; }
  Step on_start(Layer& layer) override;

  [[nodiscard]] const ChaosFaultOptions& options() const noexcept { return options_; }

 private:
  ChaosFaultOptions options_;
  detail::ChaosCore core_;
};

// ---- outcome -------------------------------------------------------------------------------------

/// Options of ChaosOutcomeStrategy<T>. Set exactly one of `result` and `result_generator`.
template <class T>
struct ChaosOutcomeOptions {
  ChaosOptions chaos;
  /// The result to complete with.
  std::optional<T> result;
  /// If set, makes the result per injection.
  std::function<T(Context&)> result_generator;
};

namespace detail {
/// Throws std::invalid_argument unless exactly one of result and result_generator is set.
void check_chaos_outcome_options(bool has_result, bool has_generator);
}  // namespace detail

/// Injects outcomes: an injected execution completes at this position with a result, without
/// running the inner part (nor the operation). `T` is the call's value type as a fallback sees it
/// (see FallbackOptions); a call of another value type fails with `errc::invalid_result_type`
/// when injected.
///
/// Thread-safety: one instance serves any number of concurrent executions.
template <class T>
class ChaosOutcomeStrategy final : public Strategy {
  static_assert(std::is_same_v<T, std::remove_cvref_t<T>> && std::is_copy_constructible_v<T> &&
                    !std::is_void_v<T>,
                "kevlar::ChaosOutcomeStrategy<T>: T must be a copyable, non-reference, "
                "unqualified value type");

 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit ChaosOutcomeStrategy(ChaosOutcomeOptions<T> options)
      : options_(std::move(options)), core_(options_.chaos, "kevlar::ChaosOutcomeOptions") {
    detail::check_chaos_outcome_options(options_.result.has_value(),
                                        static_cast<bool>(options_.result_generator));
  }

  /// `ChaosOutcome(rate 0.1)`; `, disabled` when off.
  [[nodiscard]] std::string describe() const override {
    return "ChaosOutcome(" + core_.describe_options() + ")";
  }
  [[nodiscard]] StrategyTraits traits() const noexcept override { return {}; }
  Step on_start(Layer& layer) override {
    if (!core_.enabled()) return Step::run_inner;
    detail::ChaosCore::Decision d;
    if (!core_.decide(layer, d)) return Step::run_inner;
    const T value = options_.result_generator ? options_.result_generator(layer.context())
                                              : *options_.result;
    core_.notify(ChaosKind::outcome, layer, d);
    OutcomeRef out = layer.outcome();
    if (!out.set_value(value)) out.set_error(make_error_code(errc::invalid_result_type));
    return Step::complete;
  }

  [[nodiscard]] const ChaosOutcomeOptions<T>& options() const noexcept { return options_; }

 private:
  ChaosOutcomeOptions<T> options_;
  detail::ChaosCore core_;
};

// ---- behavior ------------------------------------------------------------------------------------

/// Options of ChaosBehaviorStrategy. Without a `behavior` the strategy is a pass-through that
/// decides nothing.
struct ChaosBehaviorOptions {
  ChaosOptions chaos;
  /// Runs before the inner part of an injected execution (e.g. drops a cache, closes a pooled
  /// connection, burns CPU). A function runs on the deciding thread; a coroutine (Hook) is
  /// awaited: spawned on the call's executor in an asynchronous execution, run to completion on a
  /// private io_context in a synchronous one.
  Hook<void(Context&)> behavior;
};

namespace detail {
/// ChaosBehaviorStrategy's per-execution state: none (the asynchronous behaviour's end reaches
/// wait_complete with its result).
struct ChaosBehaviorFrame {};
}  // namespace detail

/// Injects behaviour: an injected execution runs a user callback, then the inner part. An
/// exception the callback throws is the outcome instead (the operation is not called).
///
/// Cancellation: an asynchronous behaviour's coroutine is spawned with the execution's
/// cancellation slot, so the caller's cancellation, or the expiry of a timeout outside, reaches
/// the operation it awaits (terminal cancellation; the coroutine then ends with the exception
/// that operation throws). Once it ends, a cancelled execution completes with `operation_aborted`
/// (a timeout outside reports `errc::timeout`) without running the operation. A synchronous
/// behaviour runs to its end on a private io_context; a deadline or stop request that passed
/// meanwhile ends the execution the same way. Its Context tells whether a deadline has passed
/// (Context::cancelled()).
///
/// An enabled asynchronous behaviour declares StrategyTraits::needs_executor: every asynchronous
/// call through the shield, injected or not, must then have a completion handler with an
/// associated executor (as a timeout requires).
///
/// Thread-safety: one instance serves any number of concurrent executions; the callbacks run
/// concurrently for concurrent executions.
class ChaosBehaviorStrategy final
    : public BasicStrategy<ChaosBehaviorStrategy, detail::ChaosBehaviorFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit ChaosBehaviorStrategy(ChaosBehaviorOptions options);

  /// `ChaosBehavior(rate 0.1)`; `, disabled` when off.
  [[nodiscard]] std::string describe() const override;
  /// Proactive; needs the call's executor when it has an asynchronous behaviour (spawned there).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  Step start(Layer& layer, Frame& f);
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);

  [[nodiscard]] const ChaosBehaviorOptions& options() const noexcept { return options_; }

 private:
  ChaosBehaviorOptions options_;
  detail::ChaosCore core_;
};

// ---- scope capture -------------------------------------------------------------------------------

/// Records the calling thread's chaos scope (ChaosScope::current()) in each execution's Context
/// when the execution reaches it, unless one is recorded already; then runs the inner part. Put
/// it outermost in an asynchronous shield whose chaos strategies sit behind a queue or a hedge.
///
/// Thread-safety: stateless.
class ChaosScopeCaptureStrategy final : public Strategy {
 public:
  /// `ChaosScopeCapture`.
  [[nodiscard]] std::string describe() const override { return "ChaosScopeCapture"; }
  Step on_start(Layer& layer) override;
};

// ---- builders ------------------------------------------------------------------------------------

/// Shields of one chaos strategy each, to compose with Shield::wrap or Shield::compose, e.g.
/// `Shield{}.retry(3).wrap(chaos::fault(options))`; or add the strategies with Shield::use.
namespace chaos {

/// A shield that injects latency.
[[nodiscard]] BasicShield latency(ChaosLatencyOptions options);
/// A shield that injects faults.
[[nodiscard]] BasicShield fault(ChaosFaultOptions options);
/// A shield that injects results of type T.
template <class T>
[[nodiscard]] BasicShield outcome(ChaosOutcomeOptions<T> options) {
  return BasicShield{}.use(std::make_shared<ChaosOutcomeStrategy<T>>(std::move(options)));
}
/// A shield that injects behaviour.
[[nodiscard]] BasicShield behavior(ChaosBehaviorOptions options);
/// A shield that records each execution's chaos scope (ChaosScopeCaptureStrategy).
[[nodiscard]] BasicShield capture_scope();

}  // namespace chaos

}  // namespace kevlar
