// The retry strategy: a loop over the engine's steps, its decisions taken by Backoff (pure) and a
// per-execution retry counter kept in the layer's frame.
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/detail/observer_layer.hpp>
#include <kevlar/retry.hpp>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>

namespace kevlar {

// ---- RetryStrategy ------------------------------------------------------------------------------

RetryStrategy::RetryStrategy(RetryOptions options)
    : options_(std::move(options)), budget_(options_.budget.get()) {
  if (options_.max_retries < 0) {
    throw std::invalid_argument("kevlar::RetryOptions: max_retries must not be negative (got " +
                                std::to_string(options_.max_retries) + ")");
  }
  if (options_.max_delay) detail::check_retry_delay("RetryOptions", "max_delay", *options_.max_delay);
  if (options_.handles) own_clause_ = std::make_shared<const Clause>(*options_.handles);
}

Clock::duration RetryStrategy::cap(Clock::duration d) const noexcept {
  const Clock::duration limit = options_.max_delay ? *options_.max_delay : Backoff::max_delay_limit;
  return d > limit ? limit : d;
}

Clock::duration RetryStrategy::planned_delay(int attempt) const {
  return cap(options_.backoff.delay(attempt));
}

Clock::duration RetryStrategy::planned_delay(int attempt, Clock::duration previous) const {
  return cap(options_.backoff.delay(attempt, previous));
}

std::string RetryStrategy::describe() const {
  std::string out = options_.max_retries == retry_forever
                        ? std::string("RetryForever(")
                        : "Retry(" + std::to_string(options_.max_retries) + ", ";
  out += options_.backoff.describe();
  if (options_.max_delay) out += ", <=" + detail::format_duration(*options_.max_delay);
  out += ')';
  return out;
}

StrategyTraits RetryStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.role = StrategyRole::reactive;
  t.clause = own_clause_;
  // finish() only gives back to a budget that counts executions or admissions in flight.
  t.needs_finish = budget_ != nullptr && budget_->mode() == RetryBudgetMode::concurrency;
  return t;
}

Step RetryStrategy::start(Layer& layer, Frame& f) {
  (void)layer;
  if (budget_ != nullptr) [[unlikely]] {
    f.holding = false;
    budget_->execution_started();
  }
  return Step::run_inner;
}

void RetryStrategy::finish(Layer& layer, Frame& f) noexcept {
  (void)layer;
  if (budget_ == nullptr) return;
  if (f.holding) budget_->release_attempt();
  budget_->execution_finished();
}

Step RetryStrategy::budgeted_inner_complete(Layer& layer, Frame& f) {
  if (f.holding) {  // the attempt the budget admitted has ended
    f.holding = false;
    budget_->release_attempt();
  }
  if (layer.plain_success()) {
    budget_->record_success();
    return Step::complete;
  }
  const bool handled = layer.handled();
  budget_->record(layer.outcome(), handled);
  if (!handled || f.used >= options_.max_retries) return Step::complete;
  return retry_handled(layer, f);
}

Step RetryStrategy::retry(Layer& layer, Frame& f) {
  if (!layer.handled()) return Step::complete;
  return retry_handled(layer, f);
}

Step RetryStrategy::retry_handled(Layer& layer, Frame& f) {
  if (detail::cancelled_meanwhile(layer)) return Step::complete;  // the original failure surfaces
  const int attempt = ++f.used;
  Clock::duration delay =
      planned_delay(attempt, attempt == 1 ? Clock::duration::zero() : f.previous);
  // Decorrelated jitter draws from the backoff's own (capped) delay, before any generator, as
  // Kevlar does: a server's long Retry-After does not inflate the next draw.
  f.previous = delay;
  f.delay = delay;
  if (options_.delay_generator.is_function()) {
    const std::optional<Clock::duration> generated = options_.delay_generator.function()(
        RetryEvent{attempt, delay, layer.outcome(), layer.context()});
    if (generated && *generated >= Clock::duration::zero()) f.delay = cap(*generated);
  } else if (options_.delay_generator.is_coroutine()) {
    f.stage = Frame::Stage::delay_generator;
    Frame* frame = &f;
    return layer.await(options_.delay_generator.coroutine()(
                           RetryEvent{attempt, delay, layer.outcome(), layer.context()}),
                       [this, frame](std::optional<Clock::duration> generated) {
                         if (generated && *generated >= Clock::duration::zero()) {
                           frame->delay = cap(*generated);
                         }
                       });
  }
  return after_delay_generators(layer, f);
}

Step RetryStrategy::after_delay_generators(Layer& layer, Frame& f) {
  const int attempt = f.used;
  // A wait that would end at or past the execution's deadline cannot be followed by an attempt:
  // the last real failure surfaces now, instead of the deadline's cancellation later.
  const Clock::time_point deadline = layer.context().deadline();
  if (deadline != Clock::time_point::max() && layer.clock().now() + f.delay >= deadline) {
    return Step::complete;
  }
  if (budget_ != nullptr) {
    if (!budget_->try_acquire()) {
      if (layer.wants<RetryBudgetExhausted>()) {
        layer.emit(RetryBudgetExhausted{budget_->mode(), false,
                                        static_cast<std::uint32_t>(attempt) + 1,
                                        budget_->balance()});
      }
      return Step::complete;
    }
    // Only the concurrency mode counts admissions in flight (release_attempt).
    f.holding = budget_->mode() == RetryBudgetMode::concurrency;
  }
  if (layer.wants<RetryScheduled>()) {
    layer.emit(RetryScheduled{attempt, f.delay, detail::failure_of_outcome(layer.outcome())});
  }
  if (options_.on_retry.is_function()) {
    options_.on_retry.function()(RetryEvent{attempt, f.delay, layer.outcome(), layer.context()});
  } else if (options_.on_retry.is_coroutine()) {
    f.stage = Frame::Stage::on_retry;
    return layer.await(options_.on_retry.coroutine()(
        RetryEvent{attempt, f.delay, layer.outcome(), layer.context()}));
  }
  return after_retry_hooks(layer, f);
}

Step RetryStrategy::after_retry_hooks(Layer& layer, Frame& f) {
  if (detail::cancelled_meanwhile(layer)) {
    layer.outcome().set_error(boost::asio::error::operation_aborted);
    return Step::complete;
  }
  f.stage = Frame::Stage::backoff;
  if (f.delay > Clock::duration::zero()) return layer.wait_for(f.delay);
  return Step::run_inner;
}

Step RetryStrategy::wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
  if (f.stage != Frame::Stage::backoff) {  // an awaited hook ended
    if (ec) {
      detail::report_cancelled_hook(layer);  // the hook's exception is the outcome
      return Step::complete;
    }
    return f.stage == Frame::Stage::delay_generator ? after_delay_generators(layer, f)
                                                    : after_retry_hooks(layer, f);
  }
  if (ec) {
    layer.outcome().set_error(ec);
    return Step::complete;
  }
  if (detail::cancelled_meanwhile(layer)) {  // cancelled as the wait completed
    layer.outcome().set_error(boost::asio::error::operation_aborted);
    return Step::complete;
  }
  return Step::run_inner;
}

// ---- factories ----------------------------------------------------------------------------------

std::shared_ptr<RetryStrategy> retry(int max_retries) {
  RetryOptions options;
  options.max_retries = max_retries;
  return std::make_shared<RetryStrategy>(std::move(options));
}

std::shared_ptr<RetryStrategy> retry(RetryOptions options) {
  return std::make_shared<RetryStrategy>(std::move(options));
}

}  // namespace kevlar
