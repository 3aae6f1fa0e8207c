#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <string_view>
#include <system_error>

namespace outage_demo {

const char* to_string(Phase phase) noexcept {
  switch (phase) {
    case Phase::healthy:
      return "healthy";
    case Phase::slow:
      return "slow";
    case Phase::failing:
      return "failing";
    case Phase::recovering:
      return "recovering";
  }
  return "?";
}

Millis Schedule::total() const noexcept {
  Millis t{0};
  for (const Millis l : lengths) t += l;
  return t;
}

Millis Schedule::start_of(Phase phase) const noexcept {
  Millis t{0};
  for (std::size_t i = 0; i < static_cast<std::size_t>(phase); ++i) t += lengths[i];
  return t;
}

Millis Schedule::end_of(Phase phase) const noexcept {
  return start_of(phase) + lengths[static_cast<std::size_t>(phase)];
}

Phase Schedule::at(std::chrono::nanoseconds elapsed) const noexcept {
  for (std::size_t i = 0; i + 1 < phase_count; ++i) {
    if (elapsed < end_of(static_cast<Phase>(i))) return static_cast<Phase>(i);
  }
  return Phase::recovering;
}

namespace {

constexpr double max_phase_seconds = 600;

[[noreturn]] void bad(std::string_view flag, std::string_view expected, std::string_view got) {
  std::string m(flag);
  m.append(": expected ").append(expected).append(", got '").append(got).append("'");
  throw UsageError(m);
}

template <class Int>
Int whole(std::string_view flag, std::string_view text, Int lo, Int hi) {
  Int v{};
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || v < lo || v > hi) {
    bad(flag, "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi), text);
  }
  return v;
}

Millis seconds(std::string_view flag, std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v) || v < 0.2 || v > max_phase_seconds) {
    bad(flag, "seconds from 0.2 to 600 (decimals allowed)", text);
  }
  return Millis(static_cast<Millis::rep>(std::llround(v * 1000)));
}

}  // namespace

std::string usage() {
  return "usage: kevlar_outage_demo [flags]\n"
         "\n"
         "Runs a dependency on 127.0.0.1 that is healthy, then slow, then failing, then\n"
         "recovering, and drives the same load through an unprotected client and through a\n"
         "kevlar shield; prints a live table, a summary, and writes a chart.\n"
         "\n"
         "  --healthy S        length of the healthy phase in seconds (default 8)\n"
         "  --slow S           length of the slow phase (default 7)\n"
         "  --failing S        length of the failing phase (default 8)\n"
         "  --recovering S     length of the recovering phase (default 7)\n"
         "  --slow-latency MS  the dependency's answer time while slow, in ms (default 2000)\n"
         "  --rate N           calls per second from each client, 1 to 200 (default 40)\n"
         "  --seed N           seed of the dependency's choices and the retry jitter (default 1)\n"
         "  --out DIR          folder for outage_demo.png, its data and metrics.prom\n"
         "                     (default ./outage-demo)\n"
         "  --metrics-port P   port of the /metrics endpoint, 0 to let the system pick (default "
         "0)\n"
         "  --plain            plain lines, also on a terminal\n"
         "  --help             this text\n"
         "\n"
         "Flags take their value as the next argument or after '=' (--rate=80).\n";
}

std::optional<DemoOptions> parse_options(const std::vector<std::string>& args) {
  DemoOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") return std::nullopt;
    if (arg == "--plain") {
      o.plain = true;
      continue;
    }
    if (arg.substr(0, 2) != "--") throw UsageError("unexpected argument '" + args[i] + "'");
    std::string_view flag = arg;
    std::string_view value;
    const auto eq = arg.find('=');
    if (eq != std::string_view::npos) flag = arg.substr(0, eq);
    constexpr std::string_view known[] = {"--healthy",    "--slow",         "--failing",
                                          "--recovering", "--slow-latency", "--rate",
                                          "--seed",       "--out",          "--metrics-port"};
    if (std::find(std::begin(known), std::end(known), flag) == std::end(known)) {
      throw UsageError("unknown flag '" + std::string(flag) + "'");
    }
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= args.size()) throw UsageError(std::string(flag) + ": needs a value");
      value = args[++i];
    }
    if (flag == "--healthy") {
      o.schedule.lengths[0] = seconds(flag, value);
    } else if (flag == "--slow") {
      o.schedule.lengths[1] = seconds(flag, value);
    } else if (flag == "--failing") {
      o.schedule.lengths[2] = seconds(flag, value);
    } else if (flag == "--recovering") {
      o.schedule.lengths[3] = seconds(flag, value);
    } else if (flag == "--slow-latency") {
      o.slow_latency = Millis(whole<int>(flag, value, 1, 30000));
    } else if (flag == "--rate") {
      o.rate = whole<int>(flag, value, 1, 200);
    } else if (flag == "--seed") {
      o.seed = whole<std::uint64_t>(flag, value, 0, UINT64_MAX);
    } else if (flag == "--out") {
      if (value.empty()) bad(flag, "a folder", value);
      o.out = std::string(value);
    } else if (flag == "--metrics-port") {
      o.metrics_port = whole<std::uint16_t>(flag, value, 0, 65535);
    }
  }
  return o;
}

}  // namespace outage_demo
