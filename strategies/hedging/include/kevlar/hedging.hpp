// kevlar — the hedging strategy: when an attempt is slow, start another; the first good one wins.
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/retry_budget.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/strategy.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kevlar {

/// A hedge launched another attempt alongside the ones running (after its on_hedge hook and
/// action generator, before the attempt starts): an event (Layer::emit, Observer).
struct HedgeLaunched {
  static constexpr std::string_view kevlar_event = "HedgeLaunched";
  std::uint32_t attempt = 0;  ///< 2 for the first hedge
};

/// What an on_hedge hook receives, before a hedged attempt starts.
struct HedgeEvent {
  std::uint32_t attempt;  ///< the attempt about to start: 2 for the first hedge
  Context& context;       ///< the execution's context (do not keep it)
};

/// What the action generator receives, before a hedged attempt starts.
struct HedgeActionArguments {
  std::uint32_t attempt;  ///< the attempt about to start: 2 for the first hedge
  /// The attempt's own context (a copy of the execution's): set properties here that the
  /// operation reads through kevlar::attempt_context(handler), e.g. which replica to ask.
  Context& context;
};

/// Options of Shield::hedge. Defaults follow Kevlar.
struct HedgeOptions {
  /// Launch the next attempt only after a handled failure (never on a timer).
  static constexpr Clock::duration infinite_delay = Clock::duration::max();
  /// The longest finite delay: (2^32 - 2) ms, about 49.7 days (Kevlar's limit).
  static constexpr Clock::duration max_delay = kevlar::max_duration;
  /// The most attempts one execution may race.
  static constexpr std::uint32_t max_max_attempts = 10;

  /// Attempts in total, the first included (1 ..= max_max_attempts). 1 is a pass-through.
  std::uint32_t max_attempts = 2;
  /// How long to wait for the attempts running before launching the next: 0 launches every
  /// attempt at once, infinite_delay launches one only after a handled failure, anything else
  /// staggers (0 ..= max_delay, or infinite_delay). A fresh full delay starts after every launch
  /// and every handled completion.
  Clock::duration delay = std::chrono::seconds(1);
  /// Called before each hedged attempt (2, 3, ...) starts, on the execution's executor. An
  /// exception it throws cancels the running attempts and becomes the outcome; that attempt is
  /// not launched.
  std::function<void(const HedgeEvent&)> on_hedge;
  /// Called before each hedged attempt starts, after on_hedge, with the attempt's own context:
  /// the way to send attempts >= 2 elsewhere (another replica). An exception it throws is handled
  /// as on_hedge's.
  std::function<void(const HedgeActionArguments&)> action_generator;
  /// The outcomes this hedge treats as failures (launching the next attempt, never winning),
  /// instead of the ambient clause (Shield::when) where it is added. Unset: the ambient one.
  std::optional<Clause> handles;
  /// A budget shared with retries and other hedges (and other shields): each hedged attempt (2,
  /// 3, ...) must be admitted by it before its hooks run; a refused one is not launched
  /// (RetryBudgetExhausted), and a later stagger or handled failure asks again. Every reported
  /// attempt's outcome feeds it (a success gives back, a handled failure takes). Null: no budget.
  std::shared_ptr<RetryBudget> budget;
};

namespace detail {

/// A hedge's per-execution state, in its layer's frame: its stagger, armed through the deadline
/// service.
struct HedgeFrame {
  HedgeFrame() noexcept {}  // `entry` is constructed when the stagger is first armed
  ~HedgeFrame() {}
  HedgeFrame(const HedgeFrame&) = delete;
  HedgeFrame& operator=(const HedgeFrame&) = delete;

  union {
    DeadlineEntry entry;  // trivially destructible: nothing to end
  };
  bool armed = false;
  /// Attempts (by id) the budget admitted that have not been reported yet.
  std::uint16_t budgeted = 0;
};

}  // namespace detail

/// Races attempts of the inner part of the pipeline (the strategies inside, then the user's
/// operation): the first starts at once; while the attempts running are slower than `delay`,
/// another starts, up to `max_attempts`. A handled failure (the clause in force where the hedge
/// was added) starts the next at once. The first outcome the clause does not handle (a success,
/// an unhandled failure, a cancellation) wins: it completes the call, and every other attempt is
/// cancelled through its own cancellation slot (terminal), so its operation really stops (a
/// socket read or a timer wait is aborted). If every attempt's outcome is handled, the last one
/// to complete is the call's. The caller's cancellation (or an outer timeout's) starts nothing
/// more and reaches every running attempt.
///
/// Each attempt runs on a copy of the context made at its launch (its property writes stay its
/// own) and counts as the next attempt of the execution (Context::attempt()). The stagger is
/// armed through the engine's deadline service (no kernel timer per call), so a call whose first
/// attempt wins costs one O(1) arm and disarm.
///
/// Asynchronous only when `max_attempts > 1`: a shield holding such a hedge refuses Shield::execute
/// and execute_outcome with std::logic_error before any strategy runs, and, like a timeout,
/// refuses an asynchronous call whose handler has no associated executor
/// (`errc::executor_required`). Attempts complete on the call's executor: with a multi-threaded
/// io_context, run the call on a strand, as for any Asio per-operation cancellation.
///
/// Thread-safety: one instance serves any number of concurrent executions.
class HedgeStrategy final : public BasicStrategy<HedgeStrategy, detail::HedgeFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit HedgeStrategy(HedgeOptions options);

  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks, called by the engine on the call's executor.
  /// Reactive; with more than one attempt, asynchronous only and needing the call's executor.
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Launches the first attempt (all of them with a zero delay) and arms the stagger; with one
  /// attempt, runs the inner part as a pass-through.
  Step start(Layer& layer, Frame& f);
  /// The pass-through's completion (max_attempts == 1): the outcome passes unchanged.
  Step inner_complete(Layer& layer, Frame& f);
  /// The stagger elapsed: launches the next attempt unless the call is cancelled.
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);
  /// An attempt completed: an unhandled outcome wins (the others are cancelled); a handled one
  /// launches the next at once, or ends the call if none is left running.
  Step attempt_complete(Layer& layer, Frame& f, std::uint32_t attempt);
  /// Disarms the stagger.
  void finish(Layer& layer, Frame& f) noexcept;

  [[nodiscard]] const HedgeOptions& options() const noexcept { return options_; }

 private:
  /// Launches the next hedged attempt unless all are launched, the call is cancelled or the
  /// budget refuses (running the hooks first); true if it launched one.
  bool launch_next(Layer& layer, Frame& f);
  /// Step::suspend while attempts run, else Step::complete with the last outcome reported.
  static Step parked(Layer& layer) noexcept;
  /// Starts a fresh full stagger if another attempt may still be launched on a timer.
  void arm_stagger(Layer& layer, Frame& f);
  static void disarm(Frame& f) noexcept;

  /// Feeds the budget the outcome of reported attempt `attempt`, and gives back its admission.
  void account(Layer& layer, Frame& f, std::uint32_t attempt, bool handled) noexcept;

  HedgeOptions options_;
  std::shared_ptr<const Clause> own_clause_;  ///< options_.handles
};

/// A hedge: up to `max_attempts` attempts in total, the next one launched when those running take
/// longer than `delay` (0: all at once; HedgeOptions::infinite_delay: only after a handled
/// failure). Add it with BasicShield::use or with (`kevlar::Shield::hedge` is the fluent form).
[[nodiscard]] std::shared_ptr<HedgeStrategy> hedge(std::uint32_t max_attempts = 2,
                                                   Clock::duration delay = std::chrono::seconds(1));
/// A hedge configured by `options` (std::invalid_argument names an invalid option).
[[nodiscard]] std::shared_ptr<HedgeStrategy> hedge(HedgeOptions options);

}  // namespace kevlar
