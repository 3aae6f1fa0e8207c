// The circuit breaker: CircuitBreakerCore (decisions, publication of state changes) and the
// CircuitBreaker strategy that drives it for Shield executions.
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/detail/duration_format.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <string>

namespace kevlar {
namespace {

constexpr std::int64_t no_bucket = std::numeric_limits<std::int64_t>::min();

/// Floor division for a positive divisor.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  const std::int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

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

}  // namespace

const char* to_string(CircuitState state) noexcept {
  switch (state) {
    case CircuitState::closed:
      return "closed";
    case CircuitState::open:
      return "open";
    case CircuitState::half_open:
      return "half_open";
    case CircuitState::isolated:
      return "isolated";
  }
  return "unknown";
}

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
  if (sampling_window <= Clock::duration::zero() || sampling_window > max_duration) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::sampling_window must be positive and at most 2^32 - 2 ms");
  }
  if (break_duration <= Clock::duration::zero() || break_duration > max_duration) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::break_duration must be positive and at most 2^32 - 2 ms");
  }
  if (half_open_probes < 1) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::half_open_probes must be at least 1");
  }
  if (success_threshold < 1) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::success_threshold must be at least 1");
  }
  if (slow_call_threshold &&
      (*slow_call_threshold <= Clock::duration::zero() || *slow_call_threshold > max_duration)) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions::slow_call_threshold must be positive and at most 2^32 - 2 "
        "ms");
  }
  if (!(slow_call_ratio > 0.0 && slow_call_ratio <= 1.0)) {
    throw std::invalid_argument("kevlar::CircuitBreakerOptions::slow_call_ratio must be in (0, 1]");
  }
  if (break_duration_generator && break_duration_generator_async) {
    throw std::invalid_argument(
        "kevlar::CircuitBreakerOptions: configure either break_duration_generator or "
        "break_duration_generator_async, not both");
  }
}

CircuitObserverErrors::CircuitObserverErrors(std::vector<std::exception_ptr> errors)
    : std::runtime_error("kevlar::CircuitBreaker: " + std::to_string(errors.size()) +
                         " state-change observers threw"),
      errors_(std::move(errors)) {}

// ---- core: construction ------------------------------------------------------------------------

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
      current_end_(std::numeric_limits<std::int64_t>::min()),
      current_bucket_(no_bucket) {
  for (Bucket& b : buckets_) b.index.store(no_bucket, std::memory_order_relaxed);
  auto observers = std::make_shared<std::vector<Observer>>();
  if (options_.on_state_changed) observers->push_back(options_.on_state_changed);
  observers_ = std::move(observers);
}

CircuitBreakerCore::~CircuitBreakerCore() = default;

void CircuitBreakerCore::subscribe(std::function<void(const CircuitStateChange&)> observer) {
  if (!observer) throw std::invalid_argument("kevlar::CircuitBreaker::subscribe: empty observer");
  std::lock_guard lock(mutex_);
  auto next = std::make_shared<std::vector<Observer>>(*observers_);
  next->push_back(std::move(observer));
  observers_ = std::move(next);
}

// ---- core: the sampling window
// -------------------------------------------------------------------

std::int64_t CircuitBreakerCore::bucket_of(Clock::time_point t) const noexcept {
  // Bucket n covers [n * W / 10, (n + 1) * W / 10) on the clock's timeline, W the window.
  const std::int64_t w = options_.sampling_window.count();
  const std::int64_t ns = t.time_since_epoch().count();
  const std::int64_t q = floor_div(ns, w);
  const std::int64_t r = ns - q * w;  // in [0, w); r * 10 fits (w <= max_duration)
  return q * 10 + (r * 10) / w;
}

std::int64_t CircuitBreakerCore::bucket_end(std::int64_t bucket) const noexcept {
  // The first instant of bucket + 1: ceil((bucket + 1) * W / 10), computed without overflow.
  const std::int64_t w = options_.sampling_window.count();
  const std::int64_t n = bucket + 1;
  const std::int64_t q = floor_div(n, 10);
  const std::int64_t r = n - q * 10;
  return q * w + (r * w + 9) / 10;
}

std::int64_t CircuitBreakerCore::rotate_locked(Clock::time_point now) noexcept {
  const std::int64_t c = bucket_of(now);
  if (c <= current_bucket_) return current_bucket_;  // never move backwards (coarse vs. precise)
  const auto slot = static_cast<unsigned>(c - floor_div(c, 10) * 10);
  Bucket& b = buckets_[slot];
  b.successes.store(0, std::memory_order_relaxed);
  b.failures.store(0, std::memory_order_relaxed);
  b.slow.store(0, std::memory_order_relaxed);
  b.index.store(c, std::memory_order_relaxed);
  current_bucket_ = c;
  current_slot_.store(slot, std::memory_order_relaxed);
  current_end_.store(bucket_end(c), std::memory_order_release);
  return c;
}

CircuitBreakerCore::Window CircuitBreakerCore::window_locked(std::int64_t current) const {
  Window w;
  for (const Bucket& b : buckets_) {
    const std::int64_t i = b.index.load(std::memory_order_relaxed);
    if (i == no_bucket || i > current || current - i >= 10) continue;
    const std::uint64_t f = b.failures.load(std::memory_order_relaxed);
    w.failures += f;
    w.total += f + b.successes.load(std::memory_order_relaxed);
    w.slow += b.slow.load(std::memory_order_relaxed);
  }
  return w;
}

void CircuitBreakerCore::clear_metrics_locked() noexcept {
  consecutive_.store(0, std::memory_order_relaxed);
  current_end_.store(std::numeric_limits<std::int64_t>::min(), std::memory_order_release);
  current_slot_.store(0, std::memory_order_relaxed);
  current_bucket_ = no_bucket;
  for (Bucket& b : buckets_) {
    b.index.store(no_bucket, std::memory_order_relaxed);
    b.successes.store(0, std::memory_order_relaxed);
    b.failures.store(0, std::memory_order_relaxed);
    b.slow.store(0, std::memory_order_relaxed);
  }
}

void CircuitBreakerCore::count_success_slow(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (state_.load(std::memory_order_relaxed) != CircuitState::closed) return;
  rotate_locked(now);
  buckets_[current_slot_.load(std::memory_order_relaxed)].successes.fetch_add(
      1, std::memory_order_relaxed);
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
  const std::int64_t c = rotate_locked(now);
  Bucket& b = buckets_[current_slot_.load(std::memory_order_relaxed)];
  (failed ? b.failures : b.successes).fetch_add(1, std::memory_order_relaxed);
  if (slow) b.slow.fetch_add(1, std::memory_order_relaxed);
  const Window w = window_locked(c);
  if (w.total < static_cast<std::uint64_t>(options_.minimum_throughput)) return trip;
  const auto total = static_cast<double>(w.total);
  if (ratio_mode_ && failed && static_cast<double>(w.failures) / total >= *options_.failure_ratio) {
    trip = true;
  }
  if (slow && static_cast<double>(w.slow) / total >= options_.slow_call_ratio) trip = true;
  return trip;
}

// ---- core: transitions -------------------------------------------------------------------------

std::uint64_t CircuitBreakerCore::enqueue(CircuitState from, CircuitState to) {
  const std::uint64_t seq = next_seq_;
  // A change made from inside an observer (reentrant) belongs to the change being delivered.
  const bool reentrant = publishing_ && publisher_ == std::this_thread::get_id();
  // The causing call's shield, if observed (set by the strategy around its calls into the core).
  const detail::TransitionSource& tl = detail::tl_transition_source;
  const bool ours = tl.machine == this && tl.observers != nullptr;
  queue_.push_back(Event{{from, to, last_exception_, last_error_},
                         seq,
                         reentrant ? delivering_owner_ : seq,
                         ours ? *tl.observers : nullptr,
                         ours ? tl.strategy_index : EventSource::no_strategy,
                         ours ? tl.strategy : nullptr});
  ++next_seq_;
  return seq;
}

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
    deliver(ticket);
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
  deliver(ticket);
}

namespace {
void check_break(const CircuitBreakerOptions& o, Clock::duration d) {
  if (d <= Clock::duration::zero() || d > CircuitBreakerOptions::max_duration) {
    throw std::invalid_argument(std::string("kevlar::CircuitBreakerOptions::") +
                                (o.break_duration_generator ? "break_duration_generator"
                                                            : "break_duration_generator_async") +
                                " must return a positive duration of at most 2^32 - 2 ms");
  }
}
}  // namespace

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
  if (!options_.break_duration_generator && !options_.break_duration_generator_async) {
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
  boost::asio::io_context private_context;
  std::exception_ptr failure;
  Clock::duration d{};
  boost::asio::co_spawn(private_context, options_.break_duration_generator_async(event),
                        [&](std::exception_ptr ep, Clock::duration v) {
                          failure = std::move(ep);
                          d = v;
                        });
  private_context.run();
  if (failure) std::rethrow_exception(failure);
  return d;
}

void CircuitBreakerCore::record_outcome(Clock::time_point now, const Admission& a,
                                        const Failure& failure, bool failed, bool slow) {
  std::uint64_t ticket = 0;
  Opening opening;
  if (count_outcome(now, a, failure, failed, slow, opening, ticket)) {
    Clock::duration d{};
    try {
      d = options_.break_duration_generator ? options_.break_duration_generator(opening.event)
                                            : await_generator(opening.event);
    } catch (...) {
      cancel_opening(opening);
      throw;
    }
    open_reserved(opening, now, d);
    return;
  }
  deliver(ticket);
}

bool CircuitBreakerCore::reserve_opening(Clock::time_point now, const Admission& a,
                                         const Failure& details, bool failed, bool slow,
                                         Opening& opening) {
  std::uint64_t ticket = 0;
  if (count_outcome(now, a, details, failed, slow, opening, ticket)) return true;
  deliver(ticket);
  return false;
}

void CircuitBreakerCore::open_reserved(const Opening& opening, Clock::time_point now,
                                       Clock::duration d) {
  try {
    check_break(options_, d);
  } catch (...) {
    cancel_opening(opening);
    throw;
  }
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    if (!opening_pending_ || opening_token_ != opening.token) return;  // stale: discarded
    opening_pending_ = false;
    if (state_.load(std::memory_order_relaxed) != opening.from) return;
    open_locked(now, d, ticket);
  }
  deliver(ticket);
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

void CircuitBreakerCore::isolate() {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    const CircuitState s = state_.load(std::memory_order_relaxed);
    if (s != CircuitState::isolated) ticket = enqueue(s, CircuitState::isolated);
    opening_pending_ = false;
    ++opening_token_;
    end_half_open_locked();
    set_state(CircuitState::isolated);
  }
  deliver(ticket);
}

void CircuitBreakerCore::reset() {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    const CircuitState s = state_.load(std::memory_order_relaxed);
    if (s != CircuitState::closed) ticket = enqueue(s, CircuitState::closed);
    opening_pending_ = false;
    ++opening_token_;
    clear_metrics_locked();
    end_half_open_locked();
    trips_ = 0;
    set_state(CircuitState::closed);
  }
  deliver(ticket);
}

CircuitBreakerCore::Metrics CircuitBreakerCore::metrics(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  Metrics m{};
  m.state = state_.load(std::memory_order_relaxed);
  m.consecutive_failures = consecutive_.load(std::memory_order_relaxed);
  if (windowed_) {
    const Window w = window_locked(bucket_of(now));
    m.window_total = w.total;
    m.window_failures = w.failures;
    m.window_slow = w.slow;
  }
  m.probes_in_flight = probes_in_flight_;
  m.opening_pending = opening_pending_;
  return m;
}

// ---- core: publication -------------------------------------------------------------------------

void CircuitBreakerCore::deliver(std::uint64_t ticket) {
  if (ticket == 0) return;
  std::vector<std::exception_ptr> mine;
  bool claimed = false;
  // An asynchronous execution that awaits the state-change hooks itself, if they come to this
  // caller (read before the observers run under scopes of their own).
  bool* const lane_claim = detail::tl_transition_source.machine == this
                               ? detail::tl_transition_source.lane_claim
                               : nullptr;
  {
    std::unique_lock lock(mutex_);
    const std::thread::id me = std::this_thread::get_id();
    // Reentrant: the change is queued behind the one being delivered, by this very thread.
    if (publishing_ && publisher_ == me) return;
    const auto delivered = [&] {
      if (delivered_seq_ < ticket || delivering_owner_ == ticket) return false;
      return std::none_of(queue_.begin(), queue_.end(),
                          [&](const Event& e) { return e.owner == ticket; });
    };
    while (!delivered()) {
      if (publishing_) {  // another thread delivers; wait until it delivered this change
        delivered_.wait(lock);
        continue;
      }
      publishing_ = true;
      publisher_ = me;
      while (!queue_.empty()) {
        Event e = std::move(queue_.front());
        queue_.pop_front();
        delivering_owner_ = e.owner;
        const std::shared_ptr<const std::vector<Observer>> observers = observers_;
        lock.unlock();
        // The callbacks below are not the call that caused this change: a change they make
        // (reset() or isolate() from a hook) is made by hand.
        const detail::TransitionScope by_hand{detail::TransitionSource{}};
        std::vector<std::exception_ptr> failed;
        for (const Observer& o : *observers) {
          try {
            o(e.change);
          } catch (...) {
            try {
              failed.push_back(std::current_exception());
            } catch (...) {  // std::bad_alloc: the observer's exception is lost, nothing else
            }
          }
        }
        if (e.shield_observers) {  // never throws: a shield observer's exception is swallowed
          EventSource source;
          source.shield_name = e.shield_observers->name();
          source.strategy_index = e.strategy_index;
          source.strategy = e.strategy;
          kevlar::Failure failure;
          if (e.change.to == CircuitState::open) {
            failure = kevlar::Failure{e.change.last_error, e.change.last_exception};
          }
          kevlar::Event event{source, BreakerTransition{e.change.from, e.change.to, failure}};
          e.shield_observers->deliver(event);
        }
        lock.lock();
        for (std::exception_ptr& ep : failed) {
          try {
            observer_failures_.emplace_back(e.owner, std::move(ep));
          } catch (...) {
          }
        }
        if (options_.on_state_changed_async) {
          try {
            lane_.push_back(e.change);  // its hook is awaited next, by the lane's holder
          } catch (...) {               // std::bad_alloc: the hook misses this change, nothing else
          }
        }
        delivered_seq_ = e.seq;
        delivering_owner_ = 0;
        delivered_.notify_all();
      }
      publishing_ = false;
      publisher_ = std::thread::id();
      delivered_.notify_all();
    }
    for (auto it = observer_failures_.begin(); it != observer_failures_.end();) {
      if (it->first == ticket) {
        mine.push_back(std::move(it->second));
        it = observer_failures_.erase(it);
      } else {
        ++it;
      }
    }
    if (!lane_.empty() && !lane_busy_) {  // take the lane: this caller awaits the hooks
      lane_busy_ = true;
      claimed = true;
      if (lane_claim != nullptr) {  // the failures so far wait for the hooks' (no allocation)
        lane_failures_ = std::move(mine);
        *lane_claim = true;
        return;
      }
    }
  }
  if (claimed) {
    pump_lane(std::move(mine));
    return;
  }
  throw_failures(std::move(mine));
}

void CircuitBreakerCore::throw_failures(std::vector<std::exception_ptr> failures) {
  if (failures.size() == 1) std::rethrow_exception(failures.front());
  if (failures.size() > 1) throw CircuitObserverErrors(std::move(failures));
}

void CircuitBreakerCore::pump_lane(std::vector<std::exception_ptr> failures) {
  for (;;) {
    std::optional<CircuitStateChange> change;
    {
      std::lock_guard lock(mutex_);
      if (lane_.empty()) {
        lane_busy_ = false;
        break;
      }
      change.emplace(std::move(lane_.front()));
      lane_.pop_front();
    }
    // Not the call that caused the change: a change the hook makes is made by hand.
    const detail::TransitionScope by_hand{detail::TransitionSource{}};
    std::exception_ptr failure;
    try {
      boost::asio::io_context private_context;
      boost::asio::co_spawn(private_context, options_.on_state_changed_async(std::move(*change)),
                            [&failure](std::exception_ptr ep) { failure = std::move(ep); });
      private_context.run();
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure) {
      try {
        failures.push_back(std::move(failure));
      } catch (...) {  // std::bad_alloc: this hook's exception is lost, nothing else
      }
    }
  }
  throw_failures(std::move(failures));
}

bool CircuitBreakerCore::next_lane_change(CircuitStateChange& change,
                                          std::vector<std::exception_ptr>& failures) {
  std::lock_guard lock(mutex_);
  if (lane_.empty()) {
    lane_busy_ = false;
    failures = std::move(lane_failures_);
    lane_failures_.clear();
    return false;
  }
  change = std::move(lane_.front());
  lane_.pop_front();
  return true;
}

void CircuitBreakerCore::lane_hook_failed(std::exception_ptr failure) noexcept {
  std::lock_guard lock(mutex_);
  try {
    lane_failures_.push_back(std::move(failure));
  } catch (...) {  // std::bad_alloc: this hook's exception is lost, nothing else
  }
}

void CircuitBreakerCore::abandon_lane() noexcept {
  std::lock_guard lock(mutex_);
  lane_busy_ = false;
  lane_failures_.clear();
}

// ---- the strategy
// --------------------------------------------------------------------------------

namespace {

using Frame = detail::BreakerFrame;

}  // namespace

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
  s += o.break_duration_generator || o.break_duration_generator_async
           ? std::string("dynamic")
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
  detail::TransitionSource s = layer.transition_source();
  s.machine = &core_;
  // An asynchronous execution awaits the state-change hooks itself, if they come to it.
  if (lane_claim != nullptr && !layer.synchronous() && core_.options().on_state_changed_async) {
    s.lane_claim = lane_claim;
  }
  return s;
}

Step CircuitBreaker::start(Layer& layer, Frame& frame) {
  Frame* f = &frame;
  if (core_.try_admit_closed()) return Step::run_inner;  // closed, durations not measured
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
  if (o.failed() &&
      (layer.cancelled_from_outside() || layer.context().stop_token().stop_requested()) &&
      o.is_cancellation()) {
    core_.release(f.admission);  // the caller's cancellation says nothing about the dependency
    return Step::complete;
  }
  if (core_.slow_calls()) return complete_timed(layer, f, false);
  // Only a probe's success changes the state (it may close the circuit).
  if (f.admission.probe()) return probe_succeeded(layer, f);
  core_.record_success(core_.windowed() ? layer.clock().coarse_now() : Clock::time_point{},
                       f.admission);
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
  if (core_.options().break_duration_generator_async) {
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

/// An awaited hook failed and its exception is the outcome: a cancellation the caller asked for
/// is reported as one (`operation_aborted`), as the other strategies' hooks do.
void report_cancelled_hook(Layer& layer) {
  if ((layer.cancelled_from_outside() || layer.context().cancelled()) &&
      layer.outcome().is_cancellation()) {
    layer.outcome().set_error(boost::asio::error::operation_aborted);
  }
}

/// The generator's awaitable, with the tripping outcome kept alive in its frame for as long as
/// the generator may read it (BreakEvent::outcome points at it).
/// `options` outlives the coroutine: the execution holds the pipeline that holds the breaker.
boost::asio::awaitable<Clock::duration> sized_by(const CircuitBreakerOptions* options,
                                                 BreakEvent event, OutcomeRef outcome) {
  event.outcome = &outcome;
  co_return co_await options->break_duration_generator_async(event);
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
  if (detail::await_hook(layer, sized_by(&core_.options(), opening.event, layer.outcome()), f.hook,
                         [frame](Clock::duration d) { frame->break_length = d; })) {
    return Step::suspend;
  }
  return break_sized(layer, f);
}

Step CircuitBreaker::break_sized(Layer& layer, Frame& f) {
  f.pending = Frame::Pending::nothing;
  const CircuitBreakerCore::Opening opening = opening_of(f);
  if (f.hook.failed) {  // the generator's exception is the outcome
    core_.cancel_opening(opening);
    report_cancelled_hook(layer);
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
    co_await core->options().on_state_changed_async(std::move(change));
  } catch (...) {
    core->lane_hook_failed(std::current_exception());
  }
}

}  // namespace

Step CircuitBreaker::after_transitions(Layer& layer, Frame& f, bool claimed, Step next) {
  if (!claimed) return next;
  f.after_lane = next;
  f.pending = Frame::Pending::lane;
  return pump_lane(layer, f);
}

Step CircuitBreaker::pump_lane(Layer& layer, Frame& f) {
  CircuitStateChange change;
  std::vector<std::exception_ptr> failures;
  while (core_.next_lane_change(change, failures)) {
    // A hook's own exception is caught by lane_hook; f.hook.failed reports only a failure to
    // resume (the outcome then holds it).
    if (detail::await_hook(layer, lane_hook(&core_, std::move(change)), f.hook)) {
      return Step::suspend;
    }
  }
  return lane_done(layer, f, std::move(failures));
}

Step CircuitBreaker::lane_done(Layer& layer, Frame& f, std::vector<std::exception_ptr> failures) {
  const bool probe_waits = f.after_lane == Step::run_inner && f.admission.probe();
  f.pending = probe_waits ? Frame::Pending::probe : Frame::Pending::nothing;
  if (failures.empty()) {
    if (f.after_lane == Step::run_inner && core_.slow_calls()) {
      f.started = layer.clock().now();  // the call's duration starts now, not before the hooks
    }
    return f.after_lane;
  }
  if (probe_waits) {  // the probe does not run
    core_.release(f.admission);
    f.pending = Frame::Pending::nothing;
  }
  if (failures.size() == 1) {
    layer.outcome().set_exception(std::move(failures.front()));
    report_cancelled_hook(layer);
  } else {
    layer.outcome().set_exception(
        std::make_exception_ptr(CircuitObserverErrors(std::move(failures))));
  }
  return Step::complete;
}

Step CircuitBreaker::wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec) {
  if (f.pending == Frame::Pending::lane) {
    if (ec) {  // not expected from an awaited hook: count it as the hook's failure
      core_.lane_hook_failed(
          std::make_exception_ptr(boost::system::system_error(ec, "on_state_changed_async")));
    }
    return pump_lane(layer, f);
  }
  if (ec) {  // not expected from an awaited hook; end as a failed one would
    core_.cancel_opening(opening_of(f));
    f.pending = Frame::Pending::nothing;
    layer.outcome().set_error(ec);
    return Step::complete;
  }
  return break_sized(layer, f);
}

void CircuitBreaker::finish(Layer& layer, Frame& f) noexcept {
  (void)layer;
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
      if (f.after_lane == Step::run_inner) core_.release(f.admission);
      return;
  }
}

// ---- Shield entry points
// -------------------------------------------------------------------------

Shield Shield::circuit_breaker(int consecutive_failures, Clock::duration break_duration) const {
  CircuitBreakerOptions o;
  o.consecutive_failures = consecutive_failures;
  o.break_duration = break_duration;
  return use(CircuitBreaker::create(o));
}

Shield Shield::circuit_breaker(const CircuitBreakerOptions& options) const {
  return use(CircuitBreaker::create(options));
}

}  // namespace kevlar
