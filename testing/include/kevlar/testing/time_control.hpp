// kevlar — testing kit: move a ManualClock until something holds, with a bound and a message.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/testing/assertion.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kevlar::testing {

/// What runs the work a clock move released: a strategy's timer completion is posted to its
/// executor, never run inside ManualClock::advance, so the test drains that executor after each
/// move — `[&] { io.poll(); }` for an io_context, `[&] { driver.run(); }` for a StrategyDriver. An
/// empty function drains nothing (synchronous calls woken in their own threads).
using Drain = std::function<void()>;

/// The rule of every test on a ManualClock: **start the call, then advance**. A strategy reads
/// now() when it decides to wait (a backoff, a timeout's deadline, a queued rate-limit
/// reservation); moving the clock before the wait exists releases nothing, and the call then waits
/// for time that never comes. These helpers state and check the rule:
///
/// - advance_expecting_wait() refuses to move a clock on which nothing waits;
/// - advance_until() moves it step by step until a condition holds;
/// - advance_until_idle() fires every timer wait until none is left.
///
/// All of them throw ShieldAssertionError with a message naming what was expected, the virtual
/// time (the clock's now() since its epoch) and the waits pending. Thread-safety: the clock may be
/// shared with other threads (ManualClock is thread-safe); `drain` and `condition` run on the
/// calling thread.

/// Moves `clock` by `step` (> 0), then calls `drain`, until `condition()` holds; checks it first,
/// before any move (after one drain). Returns the number of moves made. Throws ShieldAssertionError
/// if it still does not hold after `max_advances` moves: `advance_until: "<description>" still
/// false after 100 advances of 10ms (virtual time 1h0m1s ...)`. std::invalid_argument for a step
/// <= 0 or an empty condition.
std::size_t advance_until(ManualClock& clock, Clock::duration step,
                          const std::function<bool()>& condition, std::string_view description,
                          std::size_t max_advances = 100, const Drain& drain = {});

/// Fires every timer wait of `clock`: drains, then, while a timer wait is pending, moves the clock
/// to the earliest pending deadline and drains again (a completion may arm the next wait: a retry's
/// backoff, then its next attempt's timeout). Returns the number of moves. Throws
/// ShieldAssertionError if waits are still pending after `max_advances` moves (something re-arms a
/// wait forever). Threads blocked in ManualClock::sleep_until are not timer waits: their deadlines
/// are not visible, so they are not waited for (use advance_until with a condition instead).
std::size_t advance_until_idle(ManualClock& clock, const Drain& drain = {},
                               std::size_t max_advances = 1000);

/// Moves `clock` by `d` and drains, but only if something waits on it (a timer wait, or a thread
/// blocked in sleep_until): otherwise throws ShieldAssertionError saying that nothing waits at
/// that virtual time, and that the call must be started (and its executor drained, so that it
/// reaches its wait) before time is advanced. Returns the number of timer waits that were pending
/// before the move.
std::size_t advance_expecting_wait(ManualClock& clock, Clock::duration d, const Drain& drain = {});

/// Calls `drain` until something waits on `clock` (the call reached its wait), at most
/// `max_drains` times; checks first. Throws ShieldAssertionError naming `description` if nothing
/// waits after that. The check to run between starting a call and advancing.
void drain_until_waiting(ManualClock& clock, const Drain& drain, std::string_view description,
                         std::size_t max_drains = 100);

/// `clock.now()` since its epoch, formatted for messages: `1h0m1.5s`.
[[nodiscard]] std::string virtual_time(const Clock& clock);

}  // namespace kevlar::testing
