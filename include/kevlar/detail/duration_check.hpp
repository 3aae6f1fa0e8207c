// kevlar — internal: the range check of a duration option or generated duration, with the message
// every strategy gives when it refuses one.
#pragma once

#include <kevlar/clock.hpp>

#include <string>
#include <string_view>

namespace kevlar::detail {

/// The shortest duration a check accepts.
enum class DurationFloor : unsigned char {
  positive,  ///< more than zero
  zero,      ///< zero or more
};

/// What the checked duration is, which decides the wording of the message.
enum class DurationRole : unsigned char {
  option,  ///< a value the user set: "<what> must be positive and at most ..."
  result,  ///< a value a user's function returned: "<what> must return a positive duration ..."
};

/// The message of a refused duration: `what` (the option's or function's full name, such as
/// `kevlar::TimeoutOptions::timeout`), the accepted range — its maximum exactly (in milliseconds
/// when it is a whole number of them, else in nanoseconds) and readably (detail::format_duration)
/// — then ", or `alternative`" if not empty, then the value refused, readably and exactly in
/// nanoseconds. For example: `kevlar::TimeoutOptions::timeout must be positive and at most
/// 4294967294 ms (1193h) (got -1s, -1000000000 ns)`.
///
/// Thread-safety: a pure function.
[[nodiscard]] std::string duration_range_message(Clock::duration d, Clock::duration max,
                                                 DurationFloor floor, std::string_view what,
                                                 DurationRole role = DurationRole::option,
                                                 std::string_view alternative = {});

/// Throws std::invalid_argument with duration_range_message(...).
[[noreturn]] void throw_duration_out_of_range(Clock::duration d, Clock::duration max,
                                              DurationFloor floor, std::string_view what,
                                              DurationRole role = DurationRole::option,
                                              std::string_view alternative = {});

/// True if `d` is at least `floor` and at most `max`.
[[nodiscard]] constexpr bool duration_in_range(Clock::duration d, Clock::duration max,
                                               DurationFloor floor) noexcept {
  const bool above_floor =
      floor == DurationFloor::positive ? d > Clock::duration::zero() : d >= Clock::duration::zero();
  return above_floor && d <= max;
}

/// Returns `d` if it is at least `floor` and at most `max`; else throws std::invalid_argument
/// naming `what` (see duration_range_message). The check is inline; the message is built only
/// when it fails.
inline Clock::duration check_duration(Clock::duration d, Clock::duration max, DurationFloor floor,
                                      std::string_view what,
                                      DurationRole role = DurationRole::option,
                                      std::string_view alternative = {}) {
  if (!duration_in_range(d, max, floor)) {
    throw_duration_out_of_range(d, max, floor, what, role, alternative);
  }
  return d;
}

}  // namespace kevlar::detail
