// The outage demo's command line: the dependency's phases, the load, the seed and the output
// folder, with the errors a user sees for a bad flag.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace outage_demo {

using Millis = std::chrono::milliseconds;

/// What the dependency does, in the order it does it.
enum class Phase : unsigned char { healthy, slow, failing, recovering };
inline constexpr std::size_t phase_count = 4;

/// "healthy", "slow", "failing" or "recovering".
[[nodiscard]] const char* to_string(Phase phase) noexcept;

/// How long each phase lasts, from the start of the run.
struct Schedule {
  std::array<Millis, phase_count> lengths{Millis(8000), Millis(7000), Millis(8000), Millis(7000)};

  /// The length of the whole run.
  [[nodiscard]] Millis total() const noexcept;
  /// When `phase` starts and ends, from the start of the run.
  [[nodiscard]] Millis start_of(Phase phase) const noexcept;
  [[nodiscard]] Millis end_of(Phase phase) const noexcept;
  /// The phase at `elapsed` since the start; recovering from its start on, also past the end.
  [[nodiscard]] Phase at(std::chrono::nanoseconds elapsed) const noexcept;
};

/// Everything the flags set.
struct DemoOptions {
  Schedule schedule;                ///< the dependency's phases
  int rate = 40;                    ///< calls per second, the same for each client
  Millis slow_latency{2000};        ///< how long the dependency takes to answer in its slow phase
  std::uint64_t seed = 1;           ///< the dependency's choices and the retry's jitter
  std::string out = "outage-demo";  ///< folder for the chart, its data and the final metrics
  std::uint16_t metrics_port = 0;   ///< 0: the system picks one
  bool plain = false;               ///< plain lines even on a terminal
};

/// A flag the demo cannot use; what() names it and says what it expects.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Parses the arguments after the program name. Returns std::nullopt for --help; throws
/// UsageError for an unknown flag, a missing value or a value out of range.
[[nodiscard]] std::optional<DemoOptions> parse_options(const std::vector<std::string>& args);

/// The usage text, every flag with its default.
[[nodiscard]] std::string usage();

}  // namespace outage_demo
