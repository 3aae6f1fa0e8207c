// Backoff: the delay curves, their jitter and their description.
#include <kevlar/backoff.hpp>
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace kevlar {

namespace detail {

void check_retry_delay(const char* where, const char* what, Clock::duration d) {
  if (!duration_in_range(d, Backoff::max_delay_limit, DurationFloor::zero)) {
    throw_duration_out_of_range(d, Backoff::max_delay_limit, DurationFloor::zero,
                                std::string("kevlar::") + where + ": " + what);
  }
}

}  // namespace detail

namespace {

/// A uniform double in [0, 1) from a per-thread splitmix64 generator: no lock, no allocation.
double thread_random() noexcept {
  thread_local std::uint64_t state = [] {
    const int anchor = 0;
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           (reinterpret_cast<std::uintptr_t>(&anchor) * 0x9E3779B97F4A7C15ULL);
  }();
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  z ^= z >> 31U;
  return static_cast<double>(z >> 11U) * 0x1.0p-53;
}

/// `0.#` formatting of a factor (2 -> "2", 1.5 -> "1.5").
std::string format_factor(double f) {
  const auto tenths = static_cast<std::int64_t>(std::llround(f * 10));
  std::string out = std::to_string(tenths / 10);
  if (tenths % 10 != 0) {
    out += '.';
    out += static_cast<char>('0' + tenths % 10);
  }
  return out;
}

}  // namespace

const char* to_string(Jitter jitter) noexcept {
  switch (jitter) {
    case Jitter::none:
      return "none";
    case Jitter::proportional:
      return "proportional";
    case Jitter::equal:
      return "equal";
    case Jitter::full:
      return "full";
    case Jitter::decorrelated:
      return "decorrelated";
  }
  return "unknown";
}

namespace {

void check_jitter(const char* where, Jitter jitter) {
  if (static_cast<unsigned>(jitter) > static_cast<unsigned>(Jitter::decorrelated)) {
    throw std::invalid_argument(std::string("kevlar::") + where + ": unknown jitter (" +
                                std::to_string(static_cast<unsigned>(jitter)) + ")");
  }
}

/// `d` (as a count of Clock ticks) as a duration no longer than `cap`: NaN and negatives are 0.
Clock::duration clamp_ticks(double v, Clock::duration cap) noexcept {
  if (std::isnan(v) || v <= 0.0) return Clock::duration::zero();
  if (v >= static_cast<double>(cap.count())) return cap;
  return Clock::duration(static_cast<Clock::duration::rep>(v));
}

}  // namespace

Backoff Backoff::constant(Clock::duration delay, Jitter jitter) {
  detail::check_retry_delay("Backoff::constant", "delay", delay);
  check_jitter("Backoff::constant", jitter);
  Backoff b;
  b.kind_ = Kind::constant;
  b.base_ = delay;
  b.factor_ = 1.0;
  b.max_delay_.reset();
  b.jitter_ = jitter;
  return b;
}

Backoff Backoff::linear(Clock::duration step, std::optional<Clock::duration> max_delay,
                        Jitter jitter) {
  if (step < Clock::duration::zero()) {
    throw std::invalid_argument("kevlar::Backoff::linear: step must not be negative (got " +
                                detail::format_duration(step) + ")");
  }
  if (max_delay) detail::check_retry_delay("Backoff::linear", "max_delay", *max_delay);
  check_jitter("Backoff::linear", jitter);
  Backoff b;
  b.kind_ = Kind::linear;
  b.base_ = step;
  b.factor_ = 1.0;
  b.max_delay_ = max_delay;
  b.jitter_ = jitter;
  return b;
}

Backoff Backoff::exponential(Clock::duration initial, double factor,
                             std::optional<Clock::duration> max_delay, Jitter jitter) {
  if (initial < Clock::duration::zero()) {
    throw std::invalid_argument("kevlar::Backoff::exponential: initial must not be negative (got " +
                                detail::format_duration(initial) + ")");
  }
  if (!std::isfinite(factor) || factor < 1.0) {
    throw std::invalid_argument(
        "kevlar::Backoff::exponential: factor must be finite and at least 1");
  }
  if (max_delay) detail::check_retry_delay("Backoff::exponential", "max_delay", *max_delay);
  check_jitter("Backoff::exponential", jitter);
  Backoff b;
  b.kind_ = Kind::exponential;
  b.base_ = initial;
  b.factor_ = factor;
  b.max_delay_ = max_delay;
  b.jitter_ = jitter;
  return b;
}

Backoff Backoff::custom(Function fn) {
  if (!fn) throw std::invalid_argument("kevlar::Backoff::custom: the function is empty");
  Backoff b;
  b.kind_ = Kind::custom;
  b.base_ = Clock::duration::zero();
  b.factor_ = 1.0;
  b.max_delay_.reset();
  b.jitter_ = Jitter::none;
  b.custom_ = std::move(fn);
  return b;
}

Backoff Backoff::with_random(RandomSource random) const {
  Backoff b = *this;
  b.random_ = std::move(random);
  return b;
}

namespace {

void check_attempt(int attempt) {
  if (attempt < 1) {
    throw std::invalid_argument("kevlar::Backoff::delay: attempt must be at least 1 (got " +
                                std::to_string(attempt) + ")");
  }
}

}  // namespace

Clock::duration Backoff::delay(int attempt) const {
  check_attempt(attempt);
  if (kind_ != Kind::custom && jitter_ == Jitter::decorrelated) {
    // No execution to remember the previous delay: replay the draws from the base.
    Clock::duration previous = Clock::duration::zero();
    for (int n = 1; n <= attempt; ++n) previous = delay(n, previous);
    return previous;
  }
  return delay(attempt, Clock::duration::zero());
}

Clock::duration Backoff::delay(int attempt, Clock::duration previous) const {
  check_attempt(attempt);
  double u = 0.0;
  if (kind_ != Kind::custom && jitter_ != Jitter::none) u = random_ ? random_() : thread_random();
  return delay(attempt, u, previous);
}

Clock::duration Backoff::delay(int attempt, double u, Clock::duration previous) const {
  check_attempt(attempt);
  if (kind_ == Kind::custom) {
    const Clock::duration d = custom_(attempt);
    if (d < Clock::duration::zero()) return Clock::duration::zero();
    return d > max_delay_limit ? max_delay_limit : d;
  }
  const Clock::duration cap =
      max_delay_ ? *max_delay_ : (kind_ == Kind::constant ? max_delay_limit : implicit_cap);
  if (!(u >= 0.0)) u = 0.0;  // also NaN
  if (u >= 1.0) u = std::nextafter(1.0, 0.0);
  if (jitter_ == Jitter::decorrelated) {
    const double lower = static_cast<double>(base_.count());
    const double prev =
        previous > Clock::duration::zero() ? static_cast<double>(previous.count()) : lower;
    const double upper = std::max(lower, prev * 3.0);
    return clamp_ticks(lower + u * (upper - lower), cap);
  }
  double v = 0.0;
  switch (kind_) {
    case Kind::constant:
      v = static_cast<double>(base_.count());
      break;
    case Kind::linear:
      // In doubles, step * attempt cannot overflow, and below the cap (at most 2^32 - 2 ms, under
      // 2^53 ns) it is exact.
      v = static_cast<double>(base_.count()) * attempt;
      break;
    case Kind::exponential:
      if (base_ == Clock::duration::zero()) return base_;
      v = static_cast<double>(base_.count()) * std::pow(factor_, attempt - 1);
      break;
    case Kind::custom:
      break;
  }
  switch (jitter_) {
    case Jitter::none:
    case Jitter::decorrelated:
      break;
    case Jitter::proportional: {
      const double top = v * 1.5;
      v *= 0.5 + u;
      // Rounding may reach the excluded upper bound: stay strictly below it.
      if (v >= top) v = std::nextafter(top, 0.0);
      break;
    }
    case Jitter::equal: {  // AWS: capped first, then jittered below the cap
      v = std::min(v, static_cast<double>(cap.count()));
      const double top = v;
      v = v * 0.5 + u * v * 0.5;
      if (v >= top && top > 0.0) v = std::nextafter(top, 0.0);
      break;
    }
    case Jitter::full:  // AWS: capped first, then jittered below the cap
      v = std::min(v, static_cast<double>(cap.count())) * u;
      break;
  }
  return clamp_ticks(v, cap);
}

std::string Backoff::describe() const {
  std::string out;
  switch (kind_) {
    case Kind::constant:
      if (base_ == Clock::duration::zero() && jitter_ != Jitter::decorrelated) return "no delay";
      out = "constant " + detail::format_duration(base_);
      break;
    case Kind::linear:
      out = "linear " + detail::format_duration(base_) + " steps";
      break;
    case Kind::exponential:
      out = "exponential " + detail::format_duration(base_) + " x" + format_factor(factor_);
      break;
    case Kind::custom:
      return "custom backoff";
  }
  if (jitter_ == Jitter::proportional) {
    out += " +jitter";
  } else if (jitter_ != Jitter::none) {
    out += std::string(" +") + to_string(jitter_) + " jitter";
  }
  if (max_delay_) out += " <=" + detail::format_duration(*max_delay_);
  return out;
}

}  // namespace kevlar
