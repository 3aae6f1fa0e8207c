#include <kevlar/detail/duration_format.hpp>
#include <kevlar/testing/time_control.hpp>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar::testing {

namespace {

using kevlar::detail::format_duration;

void run(const Drain& drain) {
  if (drain) drain();
}

bool something_waits(const ManualClock& clock) {
  return clock.pending_timers() != 0 || clock.sleepers() != 0;
}

/// `N timer waits (earliest in 250ms), M sleeping threads`.
std::string waits_text(const ManualClock& clock) {
  const std::vector<Clock::time_point> deadlines = clock.pending_deadlines();
  std::string r = std::to_string(deadlines.size()) + " timer waits";
  if (!deadlines.empty()) {
    r += " (earliest in " + format_duration(deadlines.front() - clock.now()) + ")";
  }
  return r + ", " + std::to_string(clock.sleepers()) + " threads sleeping";
}

}  // namespace

std::string virtual_time(const Clock& clock) {
  using namespace std::chrono;
  auto t = clock.now().time_since_epoch();
  std::string r;
  const auto h = duration_cast<hours>(t);
  if (h.count() != 0) r += std::to_string(h.count()) + "h";
  t -= h;
  const auto m = duration_cast<minutes>(t);
  if (m.count() != 0 || !r.empty()) r += std::to_string(m.count()) + "m";
  t -= m;
  // Seconds with up to nine decimals, trailing zeros dropped.
  const auto ns = duration_cast<nanoseconds>(t).count();
  std::string s = std::to_string(ns / 1000000000);
  if (const auto frac = ns % 1000000000; frac != 0) {
    std::string f = std::to_string(frac);
    f.insert(0, 9 - f.size(), '0');
    while (f.back() == '0') f.pop_back();
    s += "." + f;
  }
  return r + s + "s";
}

std::size_t advance_until(ManualClock& clock, Clock::duration step,
                          const std::function<bool()>& condition, std::string_view description,
                          std::size_t max_advances, const Drain& drain) {
  if (step <= Clock::duration::zero()) {
    throw std::invalid_argument("kevlar::testing::advance_until: step must be positive");
  }
  if (!condition) {
    throw std::invalid_argument("kevlar::testing::advance_until: empty condition");
  }
  run(drain);
  if (condition()) return 0;
  for (std::size_t n = 1; n <= max_advances; ++n) {
    clock.advance(step);
    run(drain);
    if (condition()) return n;
  }
  throw ShieldAssertionError("advance_until: \"" + std::string(description) +
                             "\" still false after " + std::to_string(max_advances) +
                             " advances of " + format_duration(step) + " (virtual time " +
                             virtual_time(clock) + "; " + waits_text(clock) + ")");
}

std::size_t advance_until_idle(ManualClock& clock, const Drain& drain, std::size_t max_advances) {
  run(drain);
  for (std::size_t n = 0;; ++n) {
    const std::vector<Clock::time_point> deadlines = clock.pending_deadlines();
    if (deadlines.empty()) return n;
    if (n == max_advances) {
      throw ShieldAssertionError("advance_until_idle: timer waits still pending after " +
                                 std::to_string(max_advances) + " advances (virtual time " +
                                 virtual_time(clock) + "; " + waits_text(clock) +
                                 "): something re-arms a wait forever");
    }
    clock.advance_to(deadlines.front());
    run(drain);
  }
}

std::size_t advance_expecting_wait(ManualClock& clock, Clock::duration d, const Drain& drain) {
  if (!something_waits(clock)) {
    throw ShieldAssertionError(
        "advance_expecting_wait: asked to advance by " + format_duration(d) +
        " but nothing waits on the clock at virtual time " + virtual_time(clock) +
        ": start the call (and drain its executor, so that it reaches its wait) before advancing "
        "time; a wait armed after the move would never be released");
  }
  const std::size_t pending = clock.pending_timers();
  clock.advance(d);
  run(drain);
  return pending;
}

void drain_until_waiting(ManualClock& clock, const Drain& drain, std::string_view description,
                         std::size_t max_drains) {
  for (std::size_t n = 0;; ++n) {
    if (something_waits(clock)) return;
    if (n == max_drains) break;
    run(drain);
  }
  throw ShieldAssertionError("drain_until_waiting: \"" + std::string(description) +
                             "\": nothing waits on the clock after " + std::to_string(max_drains) +
                             " drains (virtual time " + virtual_time(clock) + ")");
}

}  // namespace kevlar::testing
