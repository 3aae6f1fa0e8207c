// The range check of durations shared by the strategies, and its message.
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>

#include <chrono>
#include <stdexcept>

namespace kevlar::detail {
namespace {

/// `d` exactly: in milliseconds when it is a whole number of them, else in nanoseconds.
std::string exact(Clock::duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d);
  if (ms == d) return std::to_string(ms.count()) + " ms";
  return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()) + " ns";
}

}  // namespace

std::string duration_range_message(Clock::duration d, Clock::duration max, DurationFloor floor,
                                   std::string_view what, DurationRole role,
                                   std::string_view alternative) {
  std::string out(what);
  const bool result = role == DurationRole::result;
  if (floor == DurationFloor::positive) {
    out +=
        result ? " must return a positive duration of at most " : " must be positive and at most ";
  } else {
    out += result ? " must return a duration between 0 and " : " must be between 0 and ";
  }
  out += exact(max) + " (" + format_duration(max) + ")";
  if (!alternative.empty()) {
    out += ", or ";
    out += alternative;
  }
  out += " (got " + format_duration(d) + ", " +
         std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()) + " ns)";
  return out;
}

void throw_duration_out_of_range(Clock::duration d, Clock::duration max, DurationFloor floor,
                                 std::string_view what, DurationRole role,
                                 std::string_view alternative) {
  throw std::invalid_argument(duration_range_message(d, max, floor, what, role, alternative));
}

}  // namespace kevlar::detail
