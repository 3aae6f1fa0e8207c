#include <kevlar/circuit_breaker.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/hedging.hpp>
#include <kevlar/rate_limit.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/testing/descriptors.hpp>
#include <kevlar/testing/state.hpp>
#include <kevlar/timeout.hpp>

#include <boost/core/demangle.hpp>

#include <algorithm>
#include <ostream>
#include <sstream>
#include <typeinfo>

namespace kevlar::testing {

namespace {

using kevlar::detail::format_duration;

BackoffDescriptor describe_backoff(const Backoff& b) {
  BackoffDescriptor d;
  d.base = b.base();
  d.factor = b.factor();
  d.max_delay = b.max_delay();
  d.jitter = b.jitter_kind();
  switch (b.kind()) {
    case Backoff::Kind::constant:
      d.kind = b.base() == Clock::duration::zero() ? BackoffKind::none : BackoffKind::constant;
      break;
    case Backoff::Kind::linear:
      d.kind = BackoffKind::linear;
      break;
    case Backoff::Kind::exponential:
      d.kind = BackoffKind::exponential;
      break;
    case Backoff::Kind::custom:
      d.kind = BackoffKind::custom;
      break;
  }
  return d;
}

/// `T` of a `kevlar::FallbackStrategy<T>` (from its demangled type name), or nothing.
std::optional<std::string> fallback_type(const Strategy& s) {
  const std::string name = boost::core::demangle(typeid(s).name());
  static constexpr std::string_view prefix = "kevlar::FallbackStrategy<";
  if (name.rfind(prefix, 0) != 0 || name.back() != '>') return std::nullopt;
  std::string inner = name.substr(prefix.size(), name.size() - prefix.size() - 1);
  while (!inner.empty() && inner.back() == ' ') inner.pop_back();
  return inner;
}

StrategyDescriptor describe_one(const Strategy& s, std::size_t index) {
  if (const auto* r = dynamic_cast<const RetryStrategy*>(&s)) {
    const RetryOptions& o = r->options();
    return RetryDescriptor{index,
                           o.max_retries,
                           describe_backoff(o.backoff),
                           o.max_delay,
                           static_cast<bool>(o.delay_generator),
                           static_cast<bool>(o.on_retry)};
  }
  if (const auto* t = dynamic_cast<const TimeoutStrategy*>(&s)) {
    const TimeoutOptions& o = t->options();
    return TimeoutDescriptor{index, o.timeout, static_cast<bool>(o.timeout_generator),
                             static_cast<bool>(o.on_timeout)};
  }
  if (const auto* b = dynamic_cast<const CircuitBreaker*>(&s)) {
    const CircuitBreakerOptions& o = b->core().options();
    CircuitBreakerDescriptor d;
    d.index = index;
    if (b->core().ratio_mode()) {
      d.mode = BreakerMode::ratio;
      d.failure_ratio = o.failure_ratio;
    } else {
      d.mode = BreakerMode::consecutive;
      d.consecutive_failures = o.consecutive_failures.value_or(5);
    }
    if (b->core().windowed()) {
      d.minimum_throughput = o.minimum_throughput;
      d.sampling_window = o.sampling_window;
    }
    if (o.slow_call_threshold) {
      d.slow_call_threshold = o.slow_call_threshold;
      d.slow_call_ratio = o.slow_call_ratio;
    }
    d.break_duration = o.break_duration;
    d.half_open_probes = o.half_open_probes;
    d.success_threshold = o.success_threshold;
    d.has_break_duration_generator = static_cast<bool>(o.break_duration_generator);
    d.has_on_state_changed = static_cast<bool>(o.on_state_changed);
    return d;
  }
  if (const auto* r = dynamic_cast<const RateLimitStrategy*>(&s)) {
    const RateLimitOptions& o = r->options();
    return RateLimitDescriptor{index,
                               o.permits,
                               o.window,
                               o.burst.value_or(o.permits),
                               o.queue_limit,
                               static_cast<bool>(o.on_rejected),
                               static_cast<bool>(o.hold_from_outcome)};
  }
  if (const auto* c = dynamic_cast<const ConcurrencyLimitStrategy*>(&s)) {
    const ConcurrencyLimitOptions& o = c->options();
    return ConcurrencyLimitDescriptor{index, o.max_concurrency, o.max_queue,
                                      static_cast<bool>(o.on_rejected)};
  }
  if (const auto* h = dynamic_cast<const HedgeStrategy*>(&s)) {
    const HedgeOptions& o = h->options();
    return HedgingDescriptor{index, o.max_attempts, o.delay, static_cast<bool>(o.on_hedge),
                             static_cast<bool>(o.action_generator)};
  }
  if (s.traits().role == StrategyRole::fallback) {
    if (std::optional<std::string> type = fallback_type(s)) {
      return FallbackDescriptor{index, std::move(*type), std::nullopt, std::nullopt};
    }
  }
  return CustomDescriptor{index, s.describe()};
}

const char* name_of(CircuitState s) noexcept {
  return kevlar::to_string(s);
}

template <class T>
std::string printed(const T& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

std::string kinds_text(const std::vector<StrategyKind>& kinds) {
  std::string r = "[";
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (i != 0) r += ", ";
    r += to_string(kinds[i]);
  }
  return r + "]";
}

}  // namespace

// ---- names
// ---------------------------------------------------------------------------------------

const char* to_string(StrategyKind kind) noexcept {
  switch (kind) {
    case StrategyKind::custom:
      return "Custom";
    case StrategyKind::retry:
      return "Retry";
    case StrategyKind::timeout:
      return "Timeout";
    case StrategyKind::circuit_breaker:
      return "CircuitBreaker";
    case StrategyKind::rate_limit:
      return "RateLimit";
    case StrategyKind::concurrency_limit:
      return "ConcurrencyLimit";
    case StrategyKind::hedging:
      return "Hedging";
    case StrategyKind::fallback:
      return "Fallback";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, StrategyKind kind) {
  return os << to_string(kind);
}

const char* to_string(BackoffKind kind) noexcept {
  switch (kind) {
    case BackoffKind::none:
      return "none";
    case BackoffKind::constant:
      return "constant";
    case BackoffKind::linear:
      return "linear";
    case BackoffKind::exponential:
      return "exponential";
    case BackoffKind::custom:
      return "custom";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, BackoffKind kind) {
  return os << to_string(kind);
}

const char* to_string(BreakerMode mode) noexcept {
  return mode == BreakerMode::ratio ? "ratio" : "consecutive";
}

std::ostream& operator<<(std::ostream& os, BreakerMode mode) {
  return os << to_string(mode);
}

// ---- describing
// ----------------------------------------------------------------------------------

StrategyKind kind_of(const StrategyDescriptor& d) noexcept {
  return std::visit([](const auto& x) { return std::remove_cvref_t<decltype(x)>::kind; }, d);
}

std::size_t index_of(const StrategyDescriptor& d) noexcept {
  return std::visit([](const auto& x) { return x.index; }, d);
}

std::vector<StrategyKind> ShieldDescriptor::kinds() const {
  std::vector<StrategyKind> r;
  r.reserve(strategies.size());
  for (const StrategyDescriptor& s : strategies) r.push_back(kind_of(s));
  return r;
}

ShieldDescriptor describe_shield(const BasicShield& shield) {
  ShieldDescriptor d;
  d.name = shield.name();
  d.custom_clock = &shield.clock() != Clock::steady().get();
  const std::vector<std::shared_ptr<Strategy>> strategies = shield.strategies();
  d.strategies.reserve(strategies.size());
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    d.strategies.push_back(describe_one(*strategies[i], i));
  }
  return d;
}

// ---- printing
// ------------------------------------------------------------------------------------

std::ostream& operator<<(std::ostream& os, const BackoffDescriptor& d) {
  os << to_string(d.kind);
  switch (d.kind) {
    case BackoffKind::none:
    case BackoffKind::custom:
      break;
    case BackoffKind::constant:
      os << ' ' << format_duration(d.base);
      break;
    case BackoffKind::linear:
      os << ' ' << format_duration(d.base) << " steps";
      break;
    case BackoffKind::exponential:
      os << ' ' << format_duration(d.base) << " x" << d.factor;
      break;
  }
  if (d.jitter == Jitter::proportional) {
    os << " +jitter";
  } else if (d.jitter != Jitter::none) {
    os << " +" << to_string(d.jitter) << " jitter";
  }
  if (d.max_delay) os << " <=" << format_duration(*d.max_delay);
  return os;
}

std::ostream& operator<<(std::ostream& os, const RetryDescriptor& d) {
  os << '#' << d.index << " Retry{max_retries=";
  if (d.max_retries == retry_forever) {
    os << "forever";
  } else {
    os << d.max_retries;
  }
  os << ", backoff=" << d.backoff;
  if (d.max_delay) os << ", max_delay=" << format_duration(*d.max_delay);
  if (d.has_delay_generator) os << ", +delay_generator";
  if (d.has_on_retry) os << ", +on_retry";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const TimeoutDescriptor& d) {
  os << '#' << d.index << " Timeout{" << format_duration(d.timeout);
  if (d.has_timeout_generator) os << ", +timeout_generator";
  if (d.has_on_timeout) os << ", +on_timeout";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const CircuitBreakerDescriptor& d) {
  os << '#' << d.index << " CircuitBreaker{" << to_string(d.mode);
  if (d.consecutive_failures) os << ' ' << *d.consecutive_failures;
  if (d.failure_ratio) os << ' ' << *d.failure_ratio;
  if (d.sampling_window) os << " over " << format_duration(*d.sampling_window);
  if (d.minimum_throughput) os << ", min " << *d.minimum_throughput;
  os << ", break " << format_duration(d.break_duration);
  if (d.slow_call_threshold) {
    os << ", slow >=" << format_duration(*d.slow_call_threshold) << " at "
       << d.slow_call_ratio.value_or(1.0);
  }
  if (d.half_open_probes != 1) os << ", probes " << d.half_open_probes;
  if (d.success_threshold != 1) os << ", close after " << d.success_threshold;
  if (d.has_break_duration_generator) os << ", +break_duration_generator";
  if (d.has_on_state_changed) os << ", +on_state_changed";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const RateLimitDescriptor& d) {
  os << '#' << d.index << " RateLimit{" << d.permits << '/' << format_duration(d.window)
     << ", burst " << d.burst << ", queue " << d.queue_limit;
  if (d.has_on_rejected) os << ", +on_rejected";
  if (d.has_hold_from_outcome) os << ", +hold_from_outcome";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const ConcurrencyLimitDescriptor& d) {
  os << '#' << d.index << " ConcurrencyLimit{" << d.max_concurrency << ", queue " << d.max_queue;
  if (d.has_on_rejected) os << ", +on_rejected";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const HedgingDescriptor& d) {
  os << '#' << d.index << " Hedging{" << d.max_attempts << " attempts, delay "
     << format_duration(d.delay);
  if (d.has_on_hedge) os << ", +on_hedge";
  if (d.has_action_generator) os << ", +action_generator";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const FallbackDescriptor& d) {
  os << '#' << d.index << " Fallback{" << d.result_type;
  if (d.has_recovery) os << (*d.has_recovery ? ", recovery" : ", value");
  if (d.has_on_fallback && *d.has_on_fallback) os << ", +on_fallback";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const CustomDescriptor& d) {
  return os << '#' << d.index << " Custom{" << d.description << '}';
}

std::ostream& operator<<(std::ostream& os, const StrategyDescriptor& d) {
  std::visit([&os](const auto& x) { os << x; }, d);
  return os;
}

std::ostream& operator<<(std::ostream& os, const ShieldDescriptor& d) {
  os << (d.name ? *d.name : std::string("(unnamed)")) << ": [";
  for (std::size_t i = 0; i < d.strategies.size(); ++i) {
    if (i != 0) os << ", ";
    os << d.strategies[i];
  }
  return os << ']';
}

std::string to_string(const StrategyDescriptor& d) {
  return printed(d);
}
std::string to_string(const ShieldDescriptor& d) {
  return printed(d);
}

// ---- assertions
// ----------------------------------------------------------------------------------

void expect_strategy_count(const BasicShield& shield, std::size_t n) {
  const ShieldDescriptor shape = describe_shield(shield);
  if (shape.strategies.size() == n) return;
  throw ShieldAssertionError("expect_strategy_count: expected " + std::to_string(n) +
                             " strategies, actual " + std::to_string(shape.strategies.size()) +
                             "\n  actual shape: " + to_string(shape));
}

void expect_strategy_order(const BasicShield& shield, const std::vector<StrategyKind>& kinds) {
  const ShieldDescriptor shape = describe_shield(shield);
  const std::vector<StrategyKind> actual = shape.kinds();
  if (actual == kinds) return;
  throw ShieldAssertionError("expect_strategy_order: expected " + kinds_text(kinds) + ", actual " +
                             kinds_text(actual) + "\n  actual shape: " + to_string(shape));
}

namespace detail {

void fail_contains(const ShieldDescriptor& shape, StrategyKind kind, std::size_t found,
                   bool single) {
  throw ShieldAssertionError(std::string(single ? "expect_contains_single" : "expect_contains") +
                             ": expected " + (single ? "exactly one " : "at least one ") +
                             to_string(kind) + ", actual " + std::to_string(found) +
                             "\n  actual shape: " + to_string(shape));
}

}  // namespace detail

// ---- state
// ---------------------------------------------------------------------------------------

ShieldStateSnapshot shield_state(const BasicShield& shield) {
  ShieldStateSnapshot snapshot;
  const std::vector<std::shared_ptr<Strategy>> strategies = shield.strategies();
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    const Strategy* s = strategies[i].get();
    if (const auto* b = dynamic_cast<const CircuitBreaker*>(s)) {
      snapshot.strategies.emplace_back(CircuitBreakerStateSnapshot{i, b->state()});
    } else if (const auto* c = dynamic_cast<const ConcurrencyLimitStrategy*>(s)) {
      const ConcurrencyLimitState st = c->state();
      const auto max = static_cast<std::uint32_t>(c->options().max_concurrency);
      snapshot.strategies.emplace_back(ConcurrencyLimitStateSnapshot{
          i, st.running, st.queued, st.running >= max ? 0U : max - st.running, st.closed});
    } else if (const auto* r = dynamic_cast<const RateLimitStrategy*>(s)) {
      const RateLimitState st = r->state(shield.clock());
      snapshot.strategies.emplace_back(RateLimitStateSnapshot{i, st.available, st.queued});
    }
  }
  return snapshot;
}

void ShieldStateSnapshot::fail_single(StrategyKind kind, std::size_t found) const {
  throw ShieldAssertionError("ShieldStateSnapshot::single: expected exactly one " +
                             std::string(to_string(kind)) + " state, actual " +
                             std::to_string(found) + "\n  actual state: " + to_string(*this));
}

std::ostream& operator<<(std::ostream& os, const CircuitBreakerStateSnapshot& s) {
  return os << '#' << s.index << " CircuitBreaker{" << name_of(s.state) << '}';
}

std::ostream& operator<<(std::ostream& os, const ConcurrencyLimitStateSnapshot& s) {
  os << '#' << s.index << " ConcurrencyLimit{running=" << s.running << ", queued=" << s.queued
     << ", available=" << s.available;
  if (s.closed) os << ", closed";
  return os << '}';
}

std::ostream& operator<<(std::ostream& os, const RateLimitStateSnapshot& s) {
  return os << '#' << s.index << " RateLimit{available=" << s.available << ", queued=" << s.queued
            << '}';
}

std::ostream& operator<<(std::ostream& os, const StrategyStateSnapshot& s) {
  std::visit([&os](const auto& x) { os << x; }, s);
  return os;
}

std::ostream& operator<<(std::ostream& os, const ShieldStateSnapshot& s) {
  os << '[';
  for (std::size_t i = 0; i < s.strategies.size(); ++i) {
    if (i != 0) os << ", ";
    os << s.strategies[i];
  }
  return os << ']';
}

std::string to_string(const ShieldStateSnapshot& s) {
  return printed(s);
}

}  // namespace kevlar::testing
