// kevlar::testing — a sans-I/O simulator for concurrency limits: a dependency of limited capacity
// in virtual time, open-loop callers, and a static or adaptive limit in front of it.
#pragma once

#include <kevlar/adaptive_limit.hpp>
#include <kevlar/clock.hpp>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace kevlar::testing {

/// One phase of the simulated dependency and of the load offered to it.
struct DependencyPhase {
  std::string name;           ///< e.g. "steady", "halved" (a column of the CSV)
  Clock::duration duration{};  ///< positive
  /// Requests the dependency serves at once (positive); more wait in its own FIFO queue, so that
  /// latency grows with the load beyond it, as in an M/M/c queue.
  int capacity = 1;
  /// Mean service time of one request (exponentially distributed), positive.
  Clock::duration service_time{};
  /// Calls offered per second (Poisson arrivals, open loop: they arrive whatever happens to the
  /// earlier ones). Positive.
  double arrival_rate = 1;
  /// Latency added to every response of the phase, on its way back (a spike that is neither
  /// queueing nor lost capacity: it holds no server). Non-negative.
  Clock::duration extra_latency{};
};

/// A scenario: the phases in order, the caller's timeout and the limiter's queue.
struct LimitScenario {
  std::string name;
  std::vector<DependencyPhase> phases;  ///< at least one
  std::uint64_t seed = 1;               ///< every random draw derives from it
  /// The caller gives up after this long (a timeout inside the limiter: the call is a dropped
  /// sample and frees its permit; the dependency still finishes the work). 0: never.
  Clock::duration timeout{};
  /// Calls allowed to wait for a permit (FIFO); more are rejected. Non-negative.
  int max_queue = 0;
  /// One CSV row per this much virtual time. Positive. Default 1 s.
  Clock::duration report_every = std::chrono::seconds(1);
};

/// One row of a simulation: the interval that ends at `time_s`.
struct LimitSimulationRow {
  double time_s = 0;
  std::size_t phase = 0;          ///< index into the scenario's phases
  int capacity = 0;               ///< the dependency's capacity during the interval's end
  std::uint32_t limit = 0;        ///< the limit at the interval's end
  std::uint32_t in_flight = 0;    ///< calls holding a permit at the interval's end
  double offered_per_s = 0;       ///< arrivals
  double goodput_per_s = 0;       ///< calls completed in time
  double rejected_per_s = 0;      ///< calls refused by the limiter
  double dropped_per_s = 0;       ///< calls that timed out
  double p50_ms = 0;              ///< latency of the calls completed in time (0: none)
  double p99_ms = 0;
};

/// What one phase came to.
struct PhaseSummary {
  std::string name;
  int capacity = 0;
  /// What the dependency can complete per second: capacity / service time.
  double capacity_per_s = 0;
  double offered_per_s = 0;
  double goodput_per_s = 0;
  /// goodput / min(offered, capacity_per_s): 1 means nothing the dependency could serve was lost.
  double goodput_share = 0;
  double dropped_per_s = 0;
  double rejected_per_s = 0;
  double mean_limit = 0;  ///< over the phase's second half
  /// Time from the phase's start until the limit entered ±20 % of `capacity` for good (to the
  /// phase's end); nothing if it never did.
  std::optional<double> converged_after_s;
  /// Time from the phase's start until the limit entered ±20 % of mean_limit (where the algorithm
  /// itself settles, which need not be the capacity) for good; nothing if it never did.
  std::optional<double> settled_after_s;
  double p99_ms = 0;  ///< latency of the phase's calls completed in time
};

/// The outcome of LimitSimulator::run.
struct LimitSimulation {
  std::string scenario;
  std::string limiter;  ///< "static(20)" or the algorithm's description
  std::vector<LimitSimulationRow> rows;
  std::vector<PhaseSummary> phases;
  std::uint32_t lowest_limit = 0;   ///< over the whole run, sampled after every change
  std::uint32_t highest_limit = 0;
  std::uint64_t limit_changes = 0;

  /// Writes the rows as CSV with a header line:
  /// time_s,phase,capacity,limit,in_flight,offered_per_s,goodput_per_s,rejected_per_s,
  /// dropped_per_s,p50_ms,p99_ms.
  void write_csv(std::ostream& out) const;
};

/// Runs a scenario against a limit, entirely in virtual time (no thread, no clock, no sleep): the
/// same seed gives the same rows.
///
/// Thread-safety: each run is self-contained; runs on different threads are independent as long
/// as each has its own controller (a controller fed by two runs at once would mix their windows).
class LimitSimulator {
 public:
  /// Against a static limit of `limit` (positive).
  [[nodiscard]] static LimitSimulation run(const LimitScenario& scenario, int limit);
  /// Against an adaptive limit: `controller` receives every sample (success with its round-trip
  /// time and in-flight count, dropped for a timeout) and closes its windows on the simulated
  /// time; its limit governs admission. Use a fresh controller per run.
  [[nodiscard]] static LimitSimulation run(const LimitScenario& scenario,
                                           AdaptiveLimitController& controller);
};

}  // namespace kevlar::testing
