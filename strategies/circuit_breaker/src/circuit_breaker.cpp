// The circuit breaker strategy: drives CircuitBreakerCore (circuit_breaker_core.cpp) for Shield
// executions, awaiting the asynchronous break-duration generator and state-change hooks.
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/detail/duration_format.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

namespace kevlar {
namespace {

using Frame = detail::BreakerFrame;

/// `v` rounded to one decimal, printed without a trailing ".0" (50, 12.5): the percentage in
/// describe(), formatted like detail::format_duration formats times.
std::string format_number(double v) {
  char buf[64];
  const double rounded = std::round(v * 10.0) / 10.0;
  if (rounded == std::floor(rounded)) {
    std::snprintf(buf, sizeof buf, "%.0f", rounded);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", rounded);
  }
  return buf;
}

/// The outcome is a cancellation that the caller, a strategy outside the breaker or a deadline set
/// outside it caused: it says nothing about the dependency. Out of line, so that the success path
/// of inner_complete keeps its registers.
[[gnu::noinline]] bool cancelled_from_outside(const Layer& layer) noexcept {
  return layer.cancelled_from_outside() && layer.outcome().is_cancellation();
}

}  // namespace

// ---- the strategy ----------------------------------------------------------------------------

CircuitBreaker::CircuitBreaker(const CircuitBreakerOptions& options) : core_(options) {
  if (options.handles) own_clause_ = std::make_shared<const Clause>(*options.handles);
}

std::string CircuitBreaker::describe() const {
  const CircuitBreakerOptions& o = core_.options();
  std::string s = "CircuitBreaker(";
  if (o.failure_ratio) {
    s += format_number(*o.failure_ratio * 100.0) + "% over " +
         detail::format_duration(o.sampling_window) + ", min " +
         std::to_string(o.minimum_throughput);
  } else {
    s += std::to_string(*o.consecutive_failures) + " consecutive";
  }
  s += ", break ";
  s += o.break_duration_generator ? std::string("dynamic")
                                  : detail::format_duration(o.break_duration);
  if (o.half_open_probes != 1 || o.success_threshold != 1) {
    s += ", probes " + std::to_string(o.half_open_probes) + ", close after " +
         std::to_string(o.success_threshold);
  }
  if (o.slow_call_threshold) {
    s += ", slow >=" + detail::format_duration(*o.slow_call_threshold) + " at " +
         format_number(o.slow_call_ratio * 100.0) + "%";
    if (!o.failure_ratio) {
      s += " over " + detail::format_duration(o.sampling_window) + ", min " +
           std::to_string(o.minimum_throughput);
    }
  }
  return s + ")";
}

StrategyTraits CircuitBreaker::strategy_traits() const noexcept {
  StrategyTraits t;
  t.role = StrategyRole::reactive;
  t.stateful = true;
  t.clause = own_clause_;
  return t;
}

detail::TransitionSource CircuitBreaker::transition_source(const Layer& layer,
                                                           bool* lane_claim) const noexcept {
  detail::TransitionSource s;
  // Only an observed shield that wants the transitions hears of them.
  if (layer.wants<BreakerTransition>()) s.origin = layer.event_origin();
  s.machine = &core_;
  // An asynchronous execution awaits the state-change hooks itself, if they come to it.
  if (lane_claim != nullptr && !layer.synchronous() &&
      core_.options().on_state_changed.is_coroutine()) {
    s.lane_claim = lane_claim;
  }
  return s;
}

Step CircuitBreaker::admit(Layer& layer, Frame& frame) {
  Frame* f = &frame;
  if (core_.slow_calls()) {
    f->started = layer.clock().now();
    if (core_.state() == CircuitState::closed) return Step::run_inner;
  }
  bool claimed = false;
  const CircuitBreakerCore::Admission a = [&] {
    // open -> half-open
    const detail::TransitionScope transitions(transition_source(layer, &claimed));
    return core_.admit(layer.clock().now());
  }();
  if (!a.admitted()) {
    const bool isolated = a.state == CircuitState::isolated;
    if (layer.wants<Rejected>()) {
      std::optional<Clock::duration> retry_after;
      if (a.retry_after) retry_after = *a.retry_after;
      layer.emit(
          Rejected{isolated ? RejectionKind::isolated : RejectionKind::circuit_open, retry_after});
    }
    layer.outcome().set_rejection(make_error_code(isolated ? errc::isolated : errc::circuit_open),
                                  a.retry_after);
    return Step::complete;
  }
  f->admission = a;
  f->pending = a.probe() ? Frame::Pending::probe : Frame::Pending::nothing;
  if (core_.slow_calls()) f->started = layer.clock().now();
  return after_transitions(layer, *f, claimed, Step::run_inner);
}

Step CircuitBreaker::inner_complete(Layer& layer, Frame& f) {
  f.pending = Frame::Pending::nothing;
  if (layer.handled()) {
    if (core_.slow_calls()) return complete_timed(layer, f, true);
    return record_tripping(layer, f, layer.clock().now(), true, false);
  }
  const OutcomeRef o = layer.outcome();
  if (o.failed() && cancelled_from_outside(layer)) {
    core_.release(f.admission);  // the caller's cancellation says nothing about the dependency
    return Step::complete;
  }
  if (core_.slow_calls()) return complete_timed(layer, f, false);
  // Only a probe's success changes the state (it may close the circuit).
  if (f.admission.probe()) return probe_succeeded(layer, f);
  core_.record_closed_success(
      core_.windowed() ? layer.clock().coarse_now() : Clock::time_point{}, f.admission);
  return Step::complete;
}

Step CircuitBreaker::probe_succeeded(Layer& layer, Frame& f) {
  bool claimed = false;
  {
    const detail::TransitionScope transitions(transition_source(layer, &claimed));  // may close
    core_.record_success(layer.clock().coarse_now(), f.admission);
  }
  return after_transitions(layer, f, claimed, Step::complete);
}

Step CircuitBreaker::complete_timed(Layer& layer, Frame& f, bool handled) {
  const Clock::time_point now = layer.clock().now();
  const bool slow = now - f.started >= *core_.options().slow_call_threshold;
  if (handled || slow) return record_tripping(layer, f, now, handled, slow);
  bool claimed = false;
  {
    const detail::TransitionScope transitions(transition_source(layer, &claimed));  // may close
    core_.record_success(now, f.admission);
  }
  return after_transitions(layer, f, claimed, Step::complete);
}

Step CircuitBreaker::record_tripping(Layer& layer, Frame& f, Clock::time_point now, bool failed,
                                     bool slow) {
  const OutcomeRef o = layer.outcome();
  const CircuitBreakerCore::Failure details =
      failed ? CircuitBreakerCore::Failure{o.exception(), o.error(), &layer.context(), &o}
             : CircuitBreakerCore::Failure{nullptr, {}, &layer.context(), &o};
  if (core_.options().break_duration_generator.is_coroutine()) {
    return size_break(layer, f, now, details, failed, slow);
  }
  bool claimed = false;
  {
    // may open or close
    const detail::TransitionScope transitions(transition_source(layer, &claimed));
    if (failed) {
      core_.record_failure(now, f.admission, details, slow);
    } else {
      core_.record_slow_success(now, f.admission, details);
    }
  }
  return after_transitions(layer, f, claimed, Step::complete);
}

namespace {

/// The generator's awaitable, with the tripping outcome kept alive in its frame for as long as
/// the generator may read it (BreakEvent::outcome points at it).
/// `options` outlives the coroutine: the execution holds the pipeline that holds the breaker.
boost::asio::awaitable<Clock::duration> sized_by(const CircuitBreakerOptions* options,
                                                 BreakEvent event, OutcomeRef outcome) {
  event.outcome = &outcome;
  co_return co_await options->break_duration_generator.coroutine()(event);
}

}  // namespace

CircuitBreakerCore::Opening CircuitBreaker::opening_of(const Frame& f) noexcept {
  CircuitBreakerCore::Opening o;
  o.token = f.opening_token;
  o.from = f.opening_from;
  o.admission = f.admission;
  return o;
}

Step CircuitBreaker::size_break(Layer& layer, Frame& f, Clock::time_point now,
                                const CircuitBreakerCore::Failure& details, bool failed,
                                bool slow) {
  CircuitBreakerCore::Opening opening;
  bool claimed = false;
  bool reserved = false;
  {
    const detail::TransitionScope transitions(transition_source(layer, &claimed));
    reserved = core_.reserve_opening(now, f.admission, details, failed, slow, opening);
  }
  if (!reserved) return after_transitions(layer, f, claimed, Step::complete);
  f.opening_token = opening.token;
  f.opening_from = opening.from;
  f.pending = Frame::Pending::opening;
  Frame* frame = &f;
  // The coroutine is created here but the generator is called only inside it: a generator that
  // throws at once ends like one that throws later.
  return layer.await(sized_by(&core_.options(), opening.event, layer.outcome()),
                     [frame](Clock::duration d) { frame->break_length = d; });
}

Step CircuitBreaker::break_sized(Layer& layer, Frame& f, bool failed) {
  f.pending = Frame::Pending::nothing;
  const CircuitBreakerCore::Opening opening = opening_of(f);
  if (failed) {  // the generator's exception is the outcome
    core_.cancel_opening(opening);
    detail::report_cancelled_hook(layer);
    return Step::complete;
  }
  bool claimed = false;
  {
    const detail::TransitionScope transitions(transition_source(layer, &claimed));  // opens
    core_.open_reserved(opening, layer.clock().now(), f.break_length);
  }
  return after_transitions(layer, f, claimed, Step::complete);
}

namespace {

/// A state-change hook awaited by the lane's holder: its exception goes to the core, which
/// gathers the lane's failures for the holder's outcome.
boost::asio::awaitable<void> lane_hook(CircuitBreakerCore* core, CircuitStateChange change) {
  try {
    co_await core->options().on_state_changed.coroutine()(std::move(change));
  } catch (...) {
    core->lane_hook_failed(std::current_exception());
  }
}

}  // namespace

Step CircuitBreaker::after_transitions(Layer& layer, Frame& f, bool claimed, Step next) {
  if (!claimed) return next;
  f.run_after_lane = next.kind() == Step::Kind::run_inner;
  f.pending = Frame::Pending::lane;
  return pump_lane(layer, f);
}

Step CircuitBreaker::pump_lane(Layer& layer, Frame& f) {
  CircuitStateChange change;
  std::vector<std::exception_ptr> failures;
  // One hook per step; wait_complete comes back here for the next. A hook's own exception is
  // caught by lane_hook and gathered by the core.
  if (core_.next_lane_change(change, failures)) {
    return layer.await(lane_hook(&core_, std::move(change)));
  }
  return lane_done(layer, f, std::move(failures));
}

Step CircuitBreaker::lane_done(Layer& layer, Frame& f, std::vector<std::exception_ptr> failures) {
  const bool probe_waits = f.run_after_lane && f.admission.probe();
  f.pending = probe_waits ? Frame::Pending::probe : Frame::Pending::nothing;
  if (failures.empty()) {
    if (f.run_after_lane && core_.slow_calls()) {
      f.started = layer.clock().now();  // the call's duration starts now, not before the hooks
    }
    return f.run_after_lane ? Step::run_inner : Step::complete;
  }
  if (probe_waits) {  // the probe does not run
    core_.release(f.admission);
    f.pending = Frame::Pending::nothing;
  }
  if (failures.size() == 1) {
    layer.outcome().set_exception(std::move(failures.front()));
    detail::report_cancelled_hook(layer);
  } else {
    layer.outcome().set_exception(
        std::make_exception_ptr(CircuitObserverErrors(std::move(failures))));
  }
  return Step::complete;
}

Step CircuitBreaker::wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
  if (f.pending == Frame::Pending::lane) {
    if (ec) {  // lane_hook lets no hook's exception out: the coroutine itself failed
      core_.lane_hook_failed(
          layer.outcome().has_exception()
              ? layer.outcome().exception()
              : std::make_exception_ptr(boost::system::system_error(ec, "on_state_changed")));
    }
    return pump_lane(layer, f);
  }
  return break_sized(layer, f, static_cast<bool>(ec));  // ec: the generator threw
}

void CircuitBreaker::settle(Frame& f) noexcept {
  switch (f.pending) {
    case Frame::Pending::nothing:
      return;
    case Frame::Pending::probe:  // abandoned, or failed before recording
      core_.release(f.admission);
      return;
    case Frame::Pending::opening:  // abandoned while the generator ran
      core_.cancel_opening(opening_of(f));
      return;
    case Frame::Pending::lane:  // abandoned while it awaited a state-change hook
      core_.abandon_lane();
      if (f.run_after_lane) core_.release(f.admission);
      return;
  }
}

// ---- factories ----------------------------------------------------------------------------------

std::shared_ptr<CircuitBreaker> circuit_breaker(int consecutive_failures,
                                                Clock::duration break_duration) {
  CircuitBreakerOptions o;
  o.consecutive_failures = consecutive_failures;
  o.break_duration = break_duration;
  return CircuitBreaker::create(o);
}

std::shared_ptr<CircuitBreaker> circuit_breaker(const CircuitBreakerOptions& options) {
  return CircuitBreaker::create(options);
}

}  // namespace kevlar
