// kevlar — internal: the duration format every strategy's describe() uses.
#pragma once

#include <kevlar/clock.hpp>

#include <cmath>
#include <cstdint>
#include <string>

namespace kevlar::detail {

/// Formats `d` for describe() strings: `infinite` for Clock::duration::max(), `0s` for zero, then
/// the largest unit the value reaches — below one second in milliseconds, below one minute in
/// seconds, below one hour in minutes, else in hours — with at most one decimal and no trailing
/// `.0`: `250ms`, `1.5s`, `30s`, `2m`, `1.5h`, `0.1ms`. Negative durations keep their sign.
///
/// Thread-safety: a pure function.
[[nodiscard]] inline std::string format_duration(Clock::duration d) {
  using namespace std::chrono_literals;
  if (d == Clock::duration::max()) return "infinite";
  if (d == Clock::duration::zero()) return "0s";
  const bool negative = d < Clock::duration::zero();
  const Clock::duration a = negative ? -d : d;
  double value = 0;
  const char* unit = "h";
  if (a < 1s) {
    value = static_cast<double>(a.count()) / 1e6;
    unit = "ms";
  } else if (a < 1min) {
    value = static_cast<double>(a.count()) / 1e9;
    unit = "s";
  } else if (a < 1h) {
    value = static_cast<double>(a.count()) / 60e9;
    unit = "m";
  } else {
    value = static_cast<double>(a.count()) / 3600e9;
  }
  const auto tenths = static_cast<std::int64_t>(std::llround(value * 10));
  std::string out = negative ? "-" : "";
  out += std::to_string(tenths / 10);
  if (tenths % 10 != 0) {
    out += '.';
    out += static_cast<char>('0' + tenths % 10);
  }
  out += unit;
  return out;
}

}  // namespace kevlar::detail
