#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/hedging.hpp>

#include <new>
#include <stdexcept>
#include <type_traits>

namespace kevlar {

static_assert(std::is_trivially_destructible_v<detail::DeadlineEntry>);
static_assert(HedgeOptions::max_max_attempts <= 16, "one bit per attempt in HedgeFrame::budgeted");

namespace {

bool finite_stagger(Clock::duration delay) noexcept {
  return delay != Clock::duration::zero() && delay != HedgeOptions::infinite_delay;
}

}  // namespace

HedgeStrategy::HedgeStrategy(HedgeOptions options) : options_(std::move(options)) {
  if (options_.handles) own_clause_ = std::make_shared<const Clause>(*options_.handles);
  if (options_.max_attempts < 1 || options_.max_attempts > HedgeOptions::max_max_attempts) {
    throw std::invalid_argument("kevlar::HedgeOptions::max_attempts must be between 1 and " +
                                std::to_string(HedgeOptions::max_max_attempts) + " (got " +
                                std::to_string(options_.max_attempts) + ")");
  }
  const Clock::duration d = options_.delay;
  if (d != HedgeOptions::infinite_delay) {
    detail::check_duration(d, HedgeOptions::max_delay, detail::DurationFloor::zero,
                           "kevlar::HedgeOptions::delay", detail::DurationRole::option,
                           "HedgeOptions::infinite_delay");
  }
}

std::string HedgeStrategy::describe() const {
  return "Hedge(" + std::to_string(options_.max_attempts) + ", " +
         detail::format_duration(options_.delay) + ")";
}

StrategyTraits HedgeStrategy::strategy_traits() const noexcept {
  const bool racing = options_.max_attempts > 1;
  StrategyTraits t;
  t.role = StrategyRole::reactive;
  t.needs_executor = racing;  // the attempts' cancellation and the stagger run on the executor
  t.asynchronous_only = racing;
  t.clause = own_clause_;
  return t;
}

Step HedgeStrategy::start(Layer& layer, Frame& f) {
  if (options_.max_attempts == 1) return Step::run_inner;  // a pass-through, in any execution
  if (options_.budget) options_.budget->execution_started();
  layer.start_attempt();
  if (options_.delay == Clock::duration::zero()) {
    while (launch_next(layer, f)) {
    }
  } else {
    arm_stagger(layer, f);
  }
  return parked(layer);
}

Step HedgeStrategy::inner_complete(Layer& layer, Frame& f) {
  (void)layer;
  (void)f;
  return Step::complete;  // the pass-through of max_attempts == 1
}

Step HedgeStrategy::wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
  (void)ec;  // the stagger is never cancelled: it is disarmed
  f.armed = false;  // it fired
  // A stagger the budget refused still re-arms: a later one asks again.
  const bool launched = launch_next(layer, f);
  if (launched || options_.budget) arm_stagger(layer, f);
  return parked(layer);
}

Step HedgeStrategy::attempt_complete(Layer& layer, Frame& f, std::uint32_t attempt) {
  const bool handled = layer.handled();
  if (options_.budget) account(layer, f, attempt, handled);
  if (!handled) return Step::complete;  // the winner: the others are cancelled
  // A handled failure launches the next attempt at once; either way a fresh full delay starts.
  launch_next(layer, f);
  arm_stagger(layer, f);
  return parked(layer);
}

void HedgeStrategy::account(Layer& layer, Frame& f, std::uint32_t attempt, bool handled) noexcept {
  RetryBudget& budget = *options_.budget;
  const auto bit = static_cast<std::uint16_t>(1U << attempt);
  if ((f.budgeted & bit) != 0) {
    f.budgeted = static_cast<std::uint16_t>(f.budgeted & ~bit);
    budget.release_attempt();
  }
  budget.record(layer.outcome(), handled);
}

void HedgeStrategy::finish(Layer& layer, Frame& f) noexcept {
  (void)layer;
  disarm(f);
  if (options_.max_attempts == 1 || !options_.budget) return;
  // Attempts cancelled once a winner was found are never reported: give their admissions back.
  for (std::uint16_t held = f.budgeted; held != 0; held = static_cast<std::uint16_t>(held & (held - 1))) {
    options_.budget->release_attempt();
  }
  f.budgeted = 0;
  options_.budget->execution_finished();
}

Step HedgeStrategy::parked(Layer& layer) noexcept {
  // Nothing left to report: the last outcome reported is the call's (every one was handled). An
  // attempt that completed during its launch counts as running until it is reported.
  return layer.attempts_running() == 0 ? Step::complete : Step::suspend;
}

bool HedgeStrategy::launch_next(Layer& layer, Frame& f) {
  const std::uint32_t attempt = layer.attempts_started() + 1;
  // Not once the call is cancelled, nor once an outer deadline has passed (its expiry may still
  // be on its way: the stagger can fire first).
  if (attempt > options_.max_attempts || detail::cancelled_meanwhile(layer)) return false;
  RetryBudget* const budget = options_.budget.get();
  if (budget != nullptr) {
    if (!budget->try_acquire()) {
      if (layer.wants<RetryBudgetExhausted>()) {
        layer.emit(RetryBudgetExhausted{budget->mode(), true, attempt, budget->balance()});
      }
      return false;
    }
  }
  // Given back if the attempt does not start (a hook threw, or the call was cancelled in it).
  struct Admission {
    RetryBudget* budget;
    ~Admission() {
      if (budget != nullptr) budget->release_attempt();
    }
  } admission{budget};
  if (options_.on_hedge) {
    options_.on_hedge(HedgeEvent{attempt, layer.context()});
    if (detail::cancelled_meanwhile(layer)) return false;  // cancelled inside the hook
  }
  const std::uint32_t id = layer.start_attempt([&](Context& context) {
    if (options_.action_generator) options_.action_generator(HedgeActionArguments{attempt, context});
    layer.emit(HedgeLaunched{attempt});
  });
  if (budget != nullptr) {
    f.budgeted = static_cast<std::uint16_t>(f.budgeted | (1U << id));
    admission.budget = nullptr;  // the attempt holds it until it is reported
  }
  return true;
}

void HedgeStrategy::arm_stagger(Layer& layer, Frame& f) {
  disarm(f);
  if (!finite_stagger(options_.delay) || layer.attempts_started() >= options_.max_attempts ||
      detail::cancelled_meanwhile(layer)) {
    return;
  }
  // The stagger resumes the hedge (wait_complete) through the engine's deadline service.
  layer.arm_deadline(f.entry, layer.clock().now() + options_.delay, options_.delay,
                     DeadlineAction::resume);
  f.armed = true;
}

void HedgeStrategy::disarm(Frame& f) noexcept {
  if (!f.armed) return;
  Layer::disarm_deadline(f.entry);
  f.armed = false;
}

std::shared_ptr<HedgeStrategy> hedge(std::uint32_t max_attempts, Clock::duration delay) {
  HedgeOptions options;
  options.max_attempts = max_attempts;
  options.delay = delay;
  return std::make_shared<HedgeStrategy>(std::move(options));
}

std::shared_ptr<HedgeStrategy> hedge(HedgeOptions options) {
  return std::make_shared<HedgeStrategy>(std::move(options));
}

}  // namespace kevlar
