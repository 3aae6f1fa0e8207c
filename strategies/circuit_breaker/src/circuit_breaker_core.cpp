// The circuit breaker's decisions: its options' validation and CircuitBreakerCore, the state
// machine (closed, open, half-open, isolated; probes; openings sized by a generator).
#include <kevlar/circuit_breaker_core.hpp>
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/run_to_completion.hpp>

#include <stdexcept>
#include <string>

namespace kevlar {

// ---- options ---------------------------------------------------------------------------------

void CircuitBreakerOptions::validate() const {
  if (consecutive_failures && failure_ratio) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions: configure either consecutive_failures or failure_ratio, "
        "not both");
  }
  if (consecutive_failures && *consecutive_failures <= 0) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::consecutive_failures must be positive");
  }
  if (failure_ratio && !(*failure_ratio > 0.0 && *failure_ratio <= 1.0)) {
    throw std::invalid_argument("kevlar::CircuitBreakerOptions::failure_ratio must be in (0, 1]");
  }
  if (minimum_throughput < 1) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::minimum_throughput must be at least 1");
  }
  using detail::DurationFloor;
  detail::check_duration(sampling_window, max_duration, DurationFloor::positive,
                         "kevlar::CircuitBreakerOptions::sampling_window");
  detail::check_duration(break_duration, max_duration, DurationFloor::positive,
                         "kevlar::CircuitBreakerOptions::break_duration");
  if (half_open_probes < 1) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::half_open_probes must be at least 1");
  }
  if (success_threshold < 1) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::success_threshold must be at least 1");
  }
  if (slow_call_threshold) {
    detail::check_duration(*slow_call_threshold, max_duration, DurationFloor::positive,
                           "kevlar::CircuitBreakerOptions::slow_call_threshold");
  }
  if (!(slow_call_ratio > 0.0 && slow_call_ratio <= 1.0)) {
    throw std::invalid_argument("kevlar::CircuitBreakerOptions::slow_call_ratio must be in (0, 1]");
  }
}

// ---- construction ----------------------------------------------------------------------------

namespace {
CircuitBreakerOptions validated(const CircuitBreakerOptions& options) {
  options.validate();
  CircuitBreakerOptions o = options;
  if (!o.failure_ratio && !o.consecutive_failures) o.consecutive_failures = 5;
  return o;
}
}  // namespace

CircuitBreakerCore::CircuitBreakerCore(const CircuitBreakerOptions& options)
    : options_(validated(options)),
      ratio_mode_(options_.failure_ratio.has_value()),
      slow_mode_(options_.slow_call_threshold.has_value()),
      windowed_(ratio_mode_ || slow_mode_),
      fast_closed_(slow_mode_ ? static_cast<CircuitState>(0xFF) : CircuitState::closed),
      consecutive_limit_(options_.consecutive_failures.value_or(0)),
      window_(options_.sampling_window),
      publisher_(this, options_.on_state_changed.function(),
                 options_.on_state_changed.coroutine()) {}

CircuitBreakerCore::~CircuitBreakerCore() = default;

// ---- counting --------------------------------------------------------------------------------

void CircuitBreakerCore::clear_metrics_locked() noexcept {
  consecutive_.store(0, std::memory_order_relaxed);
  window_.clear();
}

void CircuitBreakerCore::count_success_slow(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (state_.load(std::memory_order_relaxed) != CircuitState::closed) return;
  window_.add_success(now);
}

bool CircuitBreakerCore::count_locked(Clock::time_point now, bool failed, bool slow) {
  bool trip = false;
  if (!ratio_mode_) {
    if (failed) {
      trip = consecutive_.fetch_add(1, std::memory_order_relaxed) + 1 >= consecutive_limit_;
    } else {
      consecutive_.store(0, std::memory_order_relaxed);
    }
  }
  if (!windowed_) return trip;
  const detail::RollingWindow::Counts w = window_.add(now, failed, slow);
  if (w.total < static_cast<std::uint64_t>(options_.minimum_throughput)) return trip;
  const auto total = static_cast<double>(w.total);
  if (ratio_mode_ && failed && static_cast<double>(w.failures) / total >= *options_.failure_ratio) {
    trip = true;
  }
  if (slow && static_cast<double>(w.slow) / total >= options_.slow_call_ratio) trip = true;
  return trip;
}

// ---- transitions -----------------------------------------------------------------------------

void CircuitBreakerCore::end_half_open_locked() noexcept {
  ++probe_generation_;
  probes_in_flight_ = 0;
  probe_successes_ = 0;
}

void CircuitBreakerCore::open_locked(Clock::time_point now, Clock::duration d,
                                     std::uint64_t& ticket) {
  ticket = enqueue(state_.load(std::memory_order_relaxed), CircuitState::open);  // may throw
  open_until_.store((now + d).time_since_epoch().count(), std::memory_order_relaxed);
  end_half_open_locked();
  ++trips_;
  set_state(CircuitState::open);
}

void CircuitBreakerCore::close_locked(std::uint64_t& ticket) {
  ticket = enqueue(state_.load(std::memory_order_relaxed), CircuitState::closed);  // may throw
  clear_metrics_locked();
  end_half_open_locked();
  trips_ = 0;
  set_state(CircuitState::closed);
}

CircuitBreakerCore::Admission CircuitBreakerCore::admit(Clock::time_point now) {
  Admission a;
  // Rejections by an isolated circuit, or by an open one whose break has not elapsed, take no
  // lock: open_until_ is written before the state becomes open, so an open state read here comes
  // with its open_until_ (or a later one's, if the circuit re-opened meanwhile).
  const CircuitState seen = state();
  if (seen == CircuitState::isolated) {
    a.decision = Admission::Decision::rejected;
    a.state = CircuitState::isolated;
    return a;
  }
  if (seen == CircuitState::open) {
    const Clock::time_point until(Clock::duration(open_until_.load(std::memory_order_relaxed)));
    if (now < until) {
      a.decision = Admission::Decision::rejected;
      a.state = CircuitState::open;
      a.retry_after = until - now;
      return a;
    }
  }
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    switch (state_.load(std::memory_order_relaxed)) {
      case CircuitState::closed:
        return a;
      case CircuitState::isolated:
        a.decision = Admission::Decision::rejected;
        a.state = CircuitState::isolated;
        return a;
      case CircuitState::open:
        if (const Clock::time_point until(
                Clock::duration(open_until_.load(std::memory_order_relaxed)));
            now < until) {
          a.decision = Admission::Decision::rejected;
          a.state = CircuitState::open;
          a.retry_after = until - now;
          return a;
        }
        // The break elapsed: this caller moves the circuit to half-open and is its first probe.
        ticket = enqueue(CircuitState::open, CircuitState::half_open);
        end_half_open_locked();
        probes_in_flight_ = 1;
        set_state(CircuitState::half_open);
        a.decision = Admission::Decision::probe;
        a.generation = probe_generation_;
        break;
      case CircuitState::half_open:
        if (opening_pending_ || probes_in_flight_ >= options_.half_open_probes) {
          a.decision = Admission::Decision::rejected;
          a.state = CircuitState::half_open;
          return a;
        }
        ++probes_in_flight_;
        a.decision = Admission::Decision::probe;
        a.generation = probe_generation_;
        return a;
    }
  }
  try {
    publisher_.deliver(ticket);
  } catch (...) {
    release(a);  // the probe never runs; a newer probe's slot is left alone (generation check)
    throw;
  }
  return a;
}

void CircuitBreakerCore::record_success_slow(Clock::time_point now, const Admission& a) {
  if (!a.probe()) {  // ratio mode, closed, a new bucket: rotate under the lock
    count_success_slow(now);
    return;
  }
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    if (state_.load(std::memory_order_relaxed) != CircuitState::half_open ||
        a.generation != probe_generation_) {
      return;  // a stale probe (the circuit was reset, isolated or re-opened since)
    }
    if (opening_pending_ || probe_successes_ + 1 < options_.success_threshold) {
      --probes_in_flight_;
      if (!opening_pending_) ++probe_successes_;
      return;
    }
    close_locked(ticket);
  }
  publisher_.deliver(ticket);
}

bool CircuitBreakerCore::count_outcome(Clock::time_point now, const Admission& a,
                                       const Failure& failure, bool failed, bool slow,
                                       Opening& opening, std::uint64_t& ticket) {
  std::lock_guard lock(mutex_);
  if (failed) {
    last_exception_ = failure.exception;
    last_error_ = failure.error;
  }
  const CircuitState s = state_.load(std::memory_order_relaxed);
  if (a.probe()) {  // a failed or slow probe
    if (s != CircuitState::half_open || a.generation != probe_generation_) return false;
    if (opening_pending_) {  // another probe already failed; its opening is being sized
      --probes_in_flight_;
      return false;
    }
  } else {
    if (s != CircuitState::closed) return false;
    if (!count_locked(now, failed, slow) || opening_pending_) return false;
  }
  // A slow success that trips the circuit has no failure to report: the transition must not
  // carry an older, unrelated one.
  if (!failed) {
    last_exception_ = nullptr;
    last_error_ = {};
  }
  if (!options_.break_duration_generator) {
    open_locked(now, options_.break_duration, ticket);
    return false;
  }
  opening.token = ++opening_token_;
  opening.from = s;
  opening.admission = a;
  opening.event = BreakEvent{
      s, trips_ + 1, failure.exception, failure.error, failure.context, failure.outcome, slow};
  opening_pending_ = true;
  return true;
}

Clock::duration CircuitBreakerCore::await_generator(const BreakEvent& event) const {
  return detail::run_to_completion(options_.break_duration_generator.coroutine()(event));
}

void CircuitBreakerCore::record_outcome(Clock::time_point now, const Admission& a,
                                        const Failure& failure, bool failed, bool slow) {
  std::uint64_t ticket = 0;
  Opening opening;
  if (count_outcome(now, a, failure, failed, slow, opening, ticket)) {
    Clock::duration d{};
    try {
      d = options_.break_duration_generator.is_function()
              ? options_.break_duration_generator.function()(opening.event)
              : await_generator(opening.event);
    } catch (...) {
      cancel_opening(opening);
      throw;
    }
    open_reserved(opening, now, d);
    return;
  }
  publisher_.deliver(ticket);
}

bool CircuitBreakerCore::reserve_opening(Clock::time_point now, const Admission& a,
                                         const Failure& details, bool failed, bool slow,
                                         Opening& opening) {
  std::uint64_t ticket = 0;
  if (count_outcome(now, a, details, failed, slow, opening, ticket)) return true;
  publisher_.deliver(ticket);
  return false;
}

void CircuitBreakerCore::open_reserved(const Opening& opening, Clock::time_point now,
                                       Clock::duration d) {
  if (!detail::duration_in_range(d, CircuitBreakerOptions::max_duration,
                                 detail::DurationFloor::positive)) {
    cancel_opening(opening);
    detail::throw_duration_out_of_range(
        d, CircuitBreakerOptions::max_duration, detail::DurationFloor::positive,
        "kevlar::CircuitBreakerOptions::break_duration_generator", detail::DurationRole::result);
  }
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    if (!opening_pending_ || opening_token_ != opening.token) return;  // stale: discarded
    opening_pending_ = false;
    if (state_.load(std::memory_order_relaxed) != opening.from) return;
    open_locked(now, d, ticket);
  }
  publisher_.deliver(ticket);
}

void CircuitBreakerCore::cancel_opening(const Opening& opening) noexcept {
  std::lock_guard lock(mutex_);
  if (!opening_pending_ || opening_token_ != opening.token) return;
  opening_pending_ = false;
  const Admission& a = opening.admission;
  if (a.probe() && probe_generation_ == a.generation && probes_in_flight_ > 0) {
    --probes_in_flight_;
  }
}

void CircuitBreakerCore::record_failure(Clock::time_point now, const Admission& a) {
  record_outcome(now, a, Failure{}, true, false);
}

void CircuitBreakerCore::release(const Admission& a) noexcept {
  if (!a.probe()) return;
  std::lock_guard lock(mutex_);
  if (state_.load(std::memory_order_relaxed) == CircuitState::half_open &&
      a.generation == probe_generation_ && probes_in_flight_ > 0) {
    --probes_in_flight_;
  }
}

void CircuitBreakerCore::isolate() { force_state(CircuitState::isolated); }

void CircuitBreakerCore::reset() { force_state(CircuitState::closed); }

void CircuitBreakerCore::force_state(CircuitState to) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    const CircuitState s = state_.load(std::memory_order_relaxed);
    if (s != to) ticket = enqueue(s, to);
    // A pending opening's result is stale from here on.
    opening_pending_ = false;
    ++opening_token_;
    if (to == CircuitState::closed) {  // a reset also forgets the window and the trips
      clear_metrics_locked();
      trips_ = 0;
    }
    end_half_open_locked();
    set_state(to);
  }
  publisher_.deliver(ticket);
}

CircuitBreakerCore::Metrics CircuitBreakerCore::metrics(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  Metrics m{};
  m.state = state_.load(std::memory_order_relaxed);
  m.consecutive_failures = consecutive_.load(std::memory_order_relaxed);
  if (windowed_) {
    const detail::RollingWindow::Counts w = window_.counts(now);
    m.window_total = w.total;
    m.window_failures = w.failures;
    m.window_slow = w.slow;
  }
  m.probes_in_flight = probes_in_flight_;
  m.opening_pending = opening_pending_;
  return m;
}

}  // namespace kevlar
