#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/timeout.hpp>

#include <boost/asio/error.hpp>

#include <new>
#include <stdexcept>
#include <type_traits>

namespace kevlar {
namespace {

using Frame = detail::TimeoutFrame;
static_assert(std::is_trivially_destructible_v<DeadlineSlot>);

Clock::duration validated(Clock::duration d, const char* what) {
  if (!detail::duration_in_range(d, TimeoutOptions::max_timeout, detail::DurationFloor::positive)) {
    detail::throw_duration_out_of_range(d, TimeoutOptions::max_timeout,
                                        detail::DurationFloor::positive,
                                        std::string("kevlar::TimeoutOptions::") + what);
  }
  return d;
}

/// disarm() in an asynchronous execution: the deadline the layer owns, then the armed expiry (the
/// two are independent; in this order the queue's disarm is a tail call).
[[gnu::noinline]] void disarm_async(Layer& layer, Frame& f) noexcept {
  if (f.deadline_set) {
    layer.restore_deadline({f.previous_deadline(), f.previous_owner});
    f.deadline_set = false;
  }
  if (f.armed) {
    f.armed = false;
    Layer::disarm_deadline(f.entry);
  }
}

/// disarm() in a synchronous execution, which never arms: the context's previous deadline back.
void restore_synchronous(Layer& layer, Frame& f) noexcept {
  if (f.deadline_set) {
    detail::LayerAccess::call(layer)->exchange_deadline(f.previous_deadline());  // see start()
    f.deadline_set = false;
  }
}

/// Disarms the deadline and restores the context's previous one; idempotent.
void disarm(Layer& layer, Frame& f) noexcept {
  if (!f.armed && !f.deadline_set) return;  // disarmed by inner_complete already
  if (layer.synchronous()) {
    restore_synchronous(layer, f);
  } else {
    disarm_async(layer, f);
  }
}

}  // namespace

TimeoutStrategy::TimeoutStrategy(TimeoutOptions options) : options_(std::move(options)) {
  if (!options_.timeout_generator) validated(options_.timeout, "timeout");
}

std::string TimeoutStrategy::describe() const {
  if (options_.timeout_generator) return "Timeout(dynamic)";
  return "Timeout(" + detail::format_duration(options_.timeout) + ")";
}

StrategyTraits TimeoutStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.needs_executor = true;  // the expiry is delivered on the call's executor
  return t;
}

Step TimeoutStrategy::start(Layer& layer, Frame& f) {
  const bool generated = static_cast<bool>(options_.timeout_generator);
  f.budget =
      generated ? validated(options_.timeout_generator(layer.context()), "timeout_generator result")
                : options_.timeout;
  // The precise clock, not Clock::coarse_now(): the kernel's coarse clock lags by a scheduler tick
  // or more (1.6-5.7 ms measured on a VM), and a deadline computed from it fired that much early.
  f.deadline_at = (layer.clock().now() + f.budget).time_since_epoch();
  if (layer.synchronous()) {
    // No owner needed: only the asynchronous engine declines attempts past a deadline, and a
    // strategy inside hears a cancellation past a deadline of no owner as one from outside
    // (Layer::cancelled_from_outside), which is what this deadline is for it.
    f.previous_at = detail::LayerAccess::call(layer)
                        ->exchange_deadline(std::min(f.deadline(), layer.context().deadline()))
                        .time_since_epoch();
    f.deadline_set = true;
    return Step::run_inner;
  }
  // A handler without an executor never gets here: the engine refuses the call first
  // (errc::executor_required, StrategyTraits::needs_executor), since the expiry is delivered on
  // the execution's executor, serialised with the operation's completion.
  layer.arm_deadline(f.entry, f.deadline(), generated ? Clock::duration::zero() : options_.timeout,
                     DeadlineAction::cancel_inner);
  f.armed = true;
  // The context's deadline too, as in a synchronous execution: Context::cancelled() and
  // Context::deadline() tell the strategies inside (a retry about to try again) and the engine
  // (about to start an attempt) that the budget is spent before the expiry job arrives.
  const detail::CallBase::SavedDeadline previous = layer.lower_deadline(f.deadline());
  f.previous_at = previous.time.time_since_epoch();
  f.previous_owner = previous.owner;
  f.deadline_set = true;
  return Step::run_inner;
}

Step TimeoutStrategy::inner_complete(Layer& layer, Frame& f) {
  // The asynchronous half apart, so that no call returns here and a synchronous execution saves
  // no register (docs/benchmarks.md, "Layout decisions").
  if (!layer.synchronous()) return inner_complete_async(layer, f);
  restore_synchronous(layer, f);
  if (layer.outcome().has_value()) return Step::complete;  // a success passes unchanged
  return judge_failure(layer, f, f.previous_deadline());
}

[[gnu::noinline]] Step TimeoutStrategy::inner_complete_async(Layer& layer, Frame& f) {
  disarm_async(layer, f);  // leaves the previous deadline as it was
  if (layer.outcome().has_value()) return Step::complete;
  return judge_failure(layer, f, f.previous_deadline());
}

[[gnu::noinline]] Step TimeoutStrategy::judge_failure(Layer& layer, Frame& f,
                                                      Clock::time_point previous) {
  const Clock::time_point deadline = f.deadline();
  const Clock::duration budget = f.budget;
  OutcomeRef outcome = layer.outcome();
  if (!outcome.is_cancellation()) return Step::complete;  // another failure: unchanged
  // It was this timeout if it cancelled the inner part, or if its deadline has passed (the expiry
  // may still be on its way: a wait or an attempt that ended at the deadline saw the context's
  // deadline instead), unless the caller cancelled or an outer deadline (no later than ours) had
  // passed too: of equal nested timeouts the outermost reports.
  const Clock::time_point now = layer.clock().now();
  const bool own = layer.cancelled_inner();  // this timeout's expiry (or its deadline) cancelled
  const bool outer = layer.cancelled_from_outside() || (!own && previous <= now);
  const bool timed_out = !outer && (own || now >= deadline);
  if (!timed_out) return Step::complete;
  outcome.set_error(make_error_code(errc::timeout));
  layer.emit(TimeoutFired{budget});
  if (options_.on_timeout.is_function()) {
    options_.on_timeout.function()(TimeoutEvent{budget, layer.context()});
  } else if (options_.on_timeout.is_coroutine()) {
    return layer.await(options_.on_timeout.coroutine()(TimeoutEvent{budget, layer.context()}));
  }
  return Step::complete;
}

Step TimeoutStrategy::wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
  (void)f;
  // Only a coroutine on_timeout's end comes here. Its exception (ec) is the outcome, except that
  // the caller's cancellation wins, as a cancellation.
  if (ec && layer.cancelled_from_outside() && layer.outcome().is_cancellation()) {
    layer.outcome().set_error(boost::asio::error::operation_aborted);
  }
  return Step::complete;
}

void TimeoutStrategy::finish(Layer& layer, Frame& f) noexcept { disarm(layer, f); }

void TimeoutStrategy::release_idle_timers(boost::asio::execution_context& ctx) noexcept {
  detail::release_idle_deadline_timers(ctx);
}

std::shared_ptr<TimeoutStrategy> timeout(Clock::duration timeout) {
  TimeoutOptions options;
  options.timeout = timeout;
  return std::make_shared<TimeoutStrategy>(std::move(options));
}

std::shared_ptr<TimeoutStrategy> timeout(TimeoutOptions options) {
  return std::make_shared<TimeoutStrategy>(std::move(options));
}

}  // namespace kevlar
