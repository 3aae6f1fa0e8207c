// What the demo prints and writes: the live table, the summary and the chart. No I/O objects:
// everything here is computed from the calls' records and a metrics snapshot.
#pragma once

#include "dependency.hpp"
#include "load.hpp"
#include "options.hpp"

#include <kevlar/metrics.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace outage_demo {

/// Latency figures of a set of calls, in seconds.
struct Stats {
  std::size_t calls = 0;  ///< calls counted
  std::size_t ok = 0;     ///< of which answered with 200
  double p50 = 0, p90 = 0, p99 = 0, max = 0;

  /// ok / calls in percent; 0 without calls.
  [[nodiscard]] double success_rate() const noexcept {
    return calls == 0 ? 0.0 : 100.0 * static_cast<double>(ok) / static_cast<double>(calls);
  }
};
/// Nearest-rank percentiles over every call of `calls`, successful or not.
[[nodiscard]] Stats stats_of(std::span<const CallRecord> calls);

/// The protected client's shield, as its metrics observer counts it (summed over the shield's
/// strategies where several count, such as the two timeouts).
struct ShieldCounters {
  double retries = 0, timeouts = 0, rejected_open = 0, rejected_limit = 0;
  double breaker_state = 0;  ///< kevlar.circuit_breaker.state: 0 closed, 1 open, 2 half-open
  double running = 0, queued = 0;
};
[[nodiscard]] ShieldCounters read_counters(const kevlar::MetricsSnapshot& snapshot);
/// "closed", "open", "half-open" or "isolated".
[[nodiscard]] const char* breaker_name(double state) noexcept;

/// The table printed once a second: redrawn in place on a terminal, plain lines otherwise.
class LiveTable {
 public:
  /// The columns a redrawn table needs (its widest line).
  static constexpr int width = 112;

  /// Writes to `out`: redrawn in place when `in_place`, else two plain lines per second.
  LiveTable(const DemoOptions& options, bool in_place, std::FILE* out);

  /// One second: `last` holds the calls each client completed during it, `delta` what the
  /// shield's counters gained during it, `now` the gauges at its end.
  void update(double elapsed, const std::array<Stats, client_count>& last,
              const std::array<int, client_count>& in_flight, const ShieldCounters& delta,
              const ShieldCounters& now);

 private:
  [[nodiscard]] std::string progress(double elapsed) const;

  DemoOptions options_;
  bool in_place_;
  std::FILE* out_;
  int drawn_ = 0;  ///< lines of the last drawing, to move back over
};

/// Everything the summary compares.
struct RunResult {
  std::array<std::vector<CallRecord>, client_count> calls;  ///< every call, by client
  /// Requests the dependency received, by client and phase.
  std::array<std::array<std::uint64_t, phase_count>, client_count> reached{};
  ShieldCounters counters;  ///< the protected client's, at the end
};

/// The first moment after the recovering phase starts from which 90 % of the calls started over
/// the next half second succeeded (over the next three calls' worth of time at rates under 6 per
/// second), in seconds after that start; std::nullopt if none.
[[nodiscard]] std::optional<double> time_to_recover(std::span<const CallRecord> calls,
                                                    const Schedule& schedule, int rate);

/// The side-by-side summary (every figure the test checks is on a line of its own).
[[nodiscard]] std::string summary_text(const DemoOptions& options, const RunResult& run);

/// Writes outage_demo.csv (0.5 s buckets by start time: p50 and p99 latency and success rate per
/// client) and outage_demo.gp into `folder`, then runs gnuplot there to draw outage_demo.png.
/// Returns the PNG's path; throws std::runtime_error naming what failed (gnuplot missing too).
std::filesystem::path write_chart(const std::filesystem::path& folder, const DemoOptions& options,
                                  const RunResult& run);

}  // namespace outage_demo
