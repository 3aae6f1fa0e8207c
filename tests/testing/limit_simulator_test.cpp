// The adaptive limit algorithms against the pitfalls of adaptive concurrency, in LimitSimulator's
// virtual time (a dependency of C servers with exponential 10 ms service and its own FIFO queue,
// Poisson open-loop callers, 1 s windows). Every scenario has a fixed seed: the thresholds below
// were chosen from measured runs, with a margin, and each comment gives the measured values.
//
// Why the tolerances: once the limit L exceeds C, the dependency queues L − C calls and the mean
// latency is about service × L / C, so an algorithm that accepts latency up to t × its baseline
// settles near t × C. AIMD uses latency_tolerance 1.1 and Gradient rtt_tolerance 1.05 here (at
// 1.2 both settle above C + 20 %: measured mean limits 47.5 and 50.5 at C = 40); Vegas keeps its
// defaults (it settles at C + alpha..beta = C + 3..6 queued calls while lg(L) = 1).
#include <kevlar/adaptive_limit.hpp>
#include <kevlar/testing/limit_simulator.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using testing::DependencyPhase;
using testing::LimitScenario;
using testing::LimitSimulation;
using testing::LimitSimulator;
using testing::PhaseSummary;

DependencyPhase phase(std::string name, Clock::duration duration, int capacity, double arrival_rate,
                      Clock::duration service_time = 10ms) {
  DependencyPhase p;
  p.name = std::move(name);
  p.duration = duration;
  p.capacity = capacity;
  p.service_time = service_time;
  p.arrival_rate = arrival_rate;
  return p;
}

std::unique_ptr<LimitAlgorithm> aimd() {
  AimdOptions o;
  o.latency_tolerance = 1.1;
  return std::make_unique<AimdLimit>(o);
}

std::unique_ptr<LimitAlgorithm> vegas() {
  VegasOptions o;
  o.seed = 7;
  return std::make_unique<VegasLimit>(o);
}

std::unique_ptr<LimitAlgorithm> gradient() {
  GradientOptions o;
  o.rtt_tolerance = 1.05;
  return std::make_unique<GradientLimit>(o);
}

AdaptiveLimitSettings settings(int initial = 10, int min = 1, int max = 200) {
  AdaptiveLimitSettings s;
  s.initial_limit = initial;
  s.min_limit = min;
  s.max_limit = max;
  return s;
}

/// Runs `scenario` against `controller` and checks the bounds on the way: no limit the run saw
/// (after every change, and in every row) left [min_limit, max_limit].
LimitSimulation run(const LimitScenario& scenario, AdaptiveLimitController& controller) {
  LimitSimulation r = LimitSimulator::run(scenario, controller);
  const auto min = static_cast<std::uint32_t>(controller.settings().min_limit);
  const auto max = static_cast<std::uint32_t>(controller.settings().max_limit);
  EXPECT_GE(r.lowest_limit, min) << r.limiter;
  EXPECT_LE(r.highest_limit, max) << r.limiter;
  for (const testing::LimitSimulationRow& row : r.rows) {
    EXPECT_GE(row.limit, min) << r.limiter << " at " << row.time_s << " s";
    EXPECT_LE(row.limit, max) << r.limiter << " at " << row.time_s << " s";
  }
  return r;
}

/// The same against a fresh controller of `algorithm`.
LimitSimulation run(const LimitScenario& scenario, std::unique_ptr<LimitAlgorithm> algorithm,
                    const AdaptiveLimitSettings& s = settings()) {
  AdaptiveLimitController controller(s, std::move(algorithm));
  return run(scenario, controller);
}

/// The limit in the last row of phase `index`.
std::uint32_t limit_at_end(const LimitSimulation& r, std::size_t index) {
  std::uint32_t limit = 0;
  for (const testing::LimitSimulationRow& row : r.rows) {
    if (row.phase == index) limit = row.limit;
  }
  return limit;
}

std::string csv(const LimitSimulation& r) {
  std::ostringstream out;
  r.write_csv(out);
  return out.str();
}

// 1.5 × overload (6,000 calls/s offered, 4,000/s served at C = 40), starting at limit 10.
// Measured (seed 1):
//   AIMD(1.1):       converged after 23 s (+1 per window: 22 windows is the fastest possible),
//                    second-half mean limit 43.3, goodput share 0.887
//   Vegas:           converged after 6 s (+6 per window), mean limit 45.2, share 0.970
//   Gradient(1.05):  converged after 33 s (+0.8 per window), mean limit 43.7, share 0.841
// Seeds 2..12: AIMD 23 s, means 40.9..43.6; Gradient 30..35 s, means 43.0..44.4; Vegas 6..9 s,
// means 43..46, except seed 8, where one +6 jump to 49 left the band and it converged for good
// only after 49 s (its hold band, C + 3..6, touches the ±20 % edge, 48, at C = 40).
// Asserted: converged within 30 / 12 / 45 windows, a second-half mean limit within ±20 % of C,
// and a goodput share of at least 0.8 (the ramp from 10 costs the rest).
TEST(LimitSimulatorPitfalls, EachAlgorithmConvergesNearTheCapacityUnderOverload) {
  LimitScenario scenario;
  scenario.name = "convergence";
  scenario.seed = 1;
  scenario.phases = {phase("overload", 120s, 40, 6000)};
  struct Case {
    std::function<std::unique_ptr<LimitAlgorithm>()> make;
    double within_s;
  };
  for (const Case& c : {Case{aimd, 30}, Case{vegas, 12}, Case{gradient, 45}}) {
    const LimitSimulation r = run(scenario, c.make());
    SCOPED_TRACE(r.limiter);
    const PhaseSummary& p = r.phases.at(0);
    ASSERT_TRUE(p.converged_after_s.has_value()) << "never within ±20 % of C for good";
    EXPECT_LE(*p.converged_after_s, c.within_s);
    EXPECT_NEAR(p.mean_limit, 40, 8);
    EXPECT_GE(p.goodput_share, 0.8);
    EXPECT_EQ(p.dropped_per_s, 0);
  }
}

// The capacity halves (C 20 → 10) and then quadruples (10 → 40, twice the first phase's), under a
// steady 6,000 calls/s (3 ×, 6 × and 1.5 × overload). Measured (seed 1), limit at each phase's
// end and second-half mean, C = 20 / 10 / 40:
//   AIMD(1.1):      21 / 10 / 44, means 21.6 / 10.5 / 41.6; share halved 0.978, doubled 0.862
//   Gradient(1.05): 22 / 11 / 44, means 21.9 / 11.1 / 43.5; share halved 0.995, doubled 0.873
//   Vegas:          24 / 15 / 50, means 24.0 / 15.0 / 50.0; share halved 1.00, doubled 0.984
//   static(20):     share halved 1.00 (no timeout: it only queues), doubled 0.487
// (Seeds 2..6: ends AIMD 19..23 / 9..11 / 38..43, Gradient 21..22 / 11 / 43..44, Vegas
// 23..24 / 14..15 / 47..49; doubled shares AIMD 0.866..0.892, Gradient 0.852..0.872.)
// Vegas settles C + 3..6 above the capacity by design, which is +50 % at C = 10; in the doubled
// phase its probe (every 150..300 windows at limit 10) re-measured the no-load latency while the
// limit was above C, which lifted it to 50. So: AIMD and Gradient end (and average) within ±25 %
// of C; Vegas between C and C + 2 × beta (12). Goodput share: at least 0.95 halved, 0.8 doubled;
// the static limit at most 0.55 doubled, 0.3 below every adaptive one.
TEST(LimitSimulatorPitfalls, TheLimitFollowsTheCapacityDownAndUp) {
  LimitScenario scenario;
  scenario.name = "halved-doubled";
  scenario.seed = 1;
  scenario.phases = {phase("steady", 120s, 20, 6000), phase("halved", 120s, 10, 6000),
                     phase("doubled", 120s, 40, 6000)};
  const LimitSimulation fixed = LimitSimulator::run(scenario, 20);
  EXPECT_LE(fixed.phases.at(2).goodput_share, 0.55);

  struct Case {
    std::function<std::unique_ptr<LimitAlgorithm>()> make;
    bool additive;  // Vegas: a band above C rather than around it
  };
  for (const Case& c : {Case{aimd, false}, Case{gradient, false}, Case{vegas, true}}) {
    const LimitSimulation r = run(scenario, c.make());
    SCOPED_TRACE(r.limiter);
    ASSERT_EQ(r.phases.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      const double capacity = scenario.phases[i].capacity;
      const double end = limit_at_end(r, i);
      SCOPED_TRACE(scenario.phases[i].name);
      if (c.additive) {
        EXPECT_GE(end, capacity);
        EXPECT_LE(end, capacity + 12);
        EXPECT_GE(r.phases[i].mean_limit, capacity);
        EXPECT_LE(r.phases[i].mean_limit, capacity + 12);
      } else {
        EXPECT_NEAR(end, capacity, 0.25 * capacity);
        EXPECT_NEAR(r.phases[i].mean_limit, capacity, 0.25 * capacity);
      }
    }
    EXPECT_GE(r.phases[1].goodput_share, 0.95);
    EXPECT_GE(r.phases[2].goodput_share, 0.8);
    EXPECT_GE(r.phases[2].goodput_share, fixed.phases[2].goodput_share + 0.3);
  }
}

// 3 calls/s for 600 s against C = 40: at most one or two calls are ever in flight, far below half
// the limit, so every window is app-limited and says nothing about capacity. The app-limited
// guards hold the limit exactly at its initial 10 (without them AIMD and Gradient would add to it
// window after window). Default options; a 1 s timeout that no call reaches.
TEST(LimitSimulatorPitfalls, LowTrafficLeavesTheLimitWhereItWas) {
  LimitScenario scenario;
  scenario.name = "low-traffic";
  scenario.seed = 1;
  scenario.timeout = 1s;
  scenario.phases = {phase("quiet", 600s, 40, 3)};
  const std::vector<std::function<std::unique_ptr<LimitAlgorithm>()>> algorithms = {
      [] { return std::make_unique<AimdLimit>(); },
      [] {
        VegasOptions o;
        o.seed = 7;
        return std::make_unique<VegasLimit>(o);
      },
      [] { return std::make_unique<GradientLimit>(); },
  };
  for (const auto& make : algorithms) {
    AdaptiveLimitController controller(settings(), make());
    const LimitSimulation r = run(scenario, controller);
    SCOPED_TRACE(r.limiter);
    EXPECT_GT(controller.windows(), 100u) << "too few windows closed to show anything";
    EXPECT_EQ(r.limit_changes, 0u);
    EXPECT_EQ(r.lowest_limit, 10u);
    EXPECT_EQ(r.highest_limit, 10u);
    const PhaseSummary& p = r.phases.at(0);
    EXPECT_EQ(p.dropped_per_s, 0);
    EXPECT_EQ(p.rejected_per_s, 0);
    EXPECT_GE(p.goodput_share, 0.99);
  }
}

// One second in which the service time is 100 × shorter (a burst of cache hits) amid a steady
// overload. A Vegas that took that window's mean as its no-load latency would see a queue of
// nearly the whole limit in every later window and shed one per window. Measured (seed 1): limit
// 45 before the lucky second, 46 at the end, no-load latency 9.95 ms; with the guard removed
// (no_load = that window's mean, 0.19 ms) the limit fell from 44 to 6. Asserted: the limit 60 s
// later is at least 80 % of before, and the no-load latency stays above 5 ms.
TEST(LimitSimulatorPitfalls, ALuckyFastSecondDoesNotCollapseVegas) {
  LimitScenario scenario;
  scenario.name = "lucky";
  scenario.seed = 1;
  scenario.phases = {phase("steady", 60s, 40, 6000), phase("lucky", 1s, 40, 6000, 100us),
                     phase("after", 60s, 40, 6000)};
  VegasOptions o;
  o.seed = 7;
  auto algorithm = std::make_unique<VegasLimit>(o);
  const VegasLimit* v = algorithm.get();
  AdaptiveLimitController controller(settings(), std::move(algorithm));
  const LimitSimulation r = run(scenario, controller);
  const double before = limit_at_end(r, 0);
  const double after = limit_at_end(r, 2);
  EXPECT_GE(after, 0.8 * before) << "before " << before << ", after " << after;
  EXPECT_GT(v->no_load_rtt(), 5ms);
}

// Capacity halves (C 40 → 20) for 1,200 s under 6,000 calls/s. GradientLimit's baseline learns
// upward only from app-limited windows, so the incident (all windows saturated) must not become
// the norm. Measured (seed 1): baseline 9.879 ms after the healthy phase, 9.864 ms at the
// incident's end (ratio 0.998); limit 21..23 through the incident's second half, mean 21.8.
// Asserted: the ratio within [0.8, 1.25], every limit of the second half within [0.8 C, 1.25 C]
// = [16, 25], and the mean within ±20 % of C.
TEST(LimitSimulatorPitfalls, ALongIncidentDoesNotTeachGradientItsLatency) {
  const auto baseline_after = [](const LimitScenario& scenario, LimitSimulation& result) {
    GradientOptions o;
    o.rtt_tolerance = 1.05;
    auto algorithm = std::make_unique<GradientLimit>(o);
    const GradientLimit* g = algorithm.get();
    AdaptiveLimitController controller(settings(), std::move(algorithm));
    result = run(scenario, controller);
    return g->baseline();
  };
  LimitScenario scenario;
  scenario.name = "incident";
  scenario.seed = 1;
  scenario.phases = {phase("healthy", 120s, 40, 6000)};
  LimitSimulation healthy_run;
  const Clock::duration healthy = baseline_after(scenario, healthy_run);
  ASSERT_GT(healthy, 5ms);
  ASSERT_LT(healthy, 15ms);

  scenario.phases.push_back(phase("incident", 1200s, 20, 6000));
  LimitSimulation r;
  const Clock::duration after = baseline_after(scenario, r);
  const double ratio = static_cast<double>(after.count()) / static_cast<double>(healthy.count());
  EXPECT_GE(ratio, 0.8);
  EXPECT_LE(ratio, 1.25);
  for (const testing::LimitSimulationRow& row : r.rows) {
    if (row.phase != 1 || row.time_s <= 120 + 600) continue;
    EXPECT_GE(row.limit, 16u) << "at " << row.time_s << " s";
    EXPECT_LE(row.limit, 25u) << "at " << row.time_s << " s";
  }
  EXPECT_NEAR(r.phases.at(1).mean_limit, 20, 4);
}

// Bounds that every algorithm presses against: [30, 35] while C = 40 (they want about 44) and
// then C = 10 (they want about 11). Every limit stays within them (checked by run(), as in every
// other test here) and both are reached, so the clamp was exercised. Measured (seed 3): AIMD and
// Vegas 30..35; Gradient 30..34: its smoothing moves the estimate a fifth of the way to a target
// already clamped to 35, so it nears 35 geometrically and its integer limit (floor(estimate +
// 1e-9)) reaches 35 only once within 1e-9 of it, after about 100 windows, beyond this 60 s phase.
// (While C = 10 the floor rules of AIMD and Gradient relearn the queued latency at 30 and let the
// limit grow again: they end at 33 and 32, by design; Vegas stays at 30.)
TEST(LimitSimulatorPitfalls, TheLimitNeverLeavesItsBounds) {
  LimitScenario scenario;
  scenario.name = "bounds";
  scenario.seed = 3;
  scenario.phases = {phase("wide", 60s, 40, 6000), phase("narrow", 60s, 10, 6000)};
  struct Case {
    std::function<std::unique_ptr<LimitAlgorithm>()> make;
    std::uint32_t highest;
  };
  for (const Case& c : {Case{aimd, 35}, Case{vegas, 35}, Case{gradient, 34}}) {
    const LimitSimulation r = run(scenario, c.make(), settings(30, 30, 35));
    SCOPED_TRACE(r.limiter);
    EXPECT_EQ(r.highest_limit, c.highest);
    EXPECT_EQ(r.lowest_limit, 30u);
  }
}

// The simulation is a function of its scenario (and of the algorithm's own seed): the same seed
// gives the same rows, byte for byte, and another seed other rows. The scenario has a timeout and
// a limiter queue, so that every kind of event is drawn.
TEST(LimitSimulatorPitfalls, TheSameSeedGivesTheSameRunAndAnotherSeedAnother) {
  LimitScenario scenario;
  scenario.name = "determinism";
  scenario.seed = 11;
  scenario.timeout = 30ms;
  scenario.max_queue = 10;
  scenario.phases = {phase("a", 20s, 20, 3000), phase("b", 10s, 10, 3000)};
  const auto adaptive = [](const LimitScenario& s) {
    AdaptiveLimitController controller(settings(), vegas());
    return csv(run(s, controller));
  };
  const std::string first = adaptive(scenario);
  EXPECT_EQ(first.rfind("time_s,phase,capacity,limit,in_flight,", 0), 0u);
  EXPECT_EQ(std::count(first.begin(), first.end(), '\n'), 31);  // the header and 30 rows
  EXPECT_EQ(first, adaptive(scenario));
  const std::string fixed = csv(LimitSimulator::run(scenario, 15));
  EXPECT_EQ(fixed, csv(LimitSimulator::run(scenario, 15)));

  LimitScenario other = scenario;
  other.seed = 12;
  EXPECT_NE(first, adaptive(other));
  EXPECT_NE(fixed, csv(LimitSimulator::run(other, 15)));
}

TEST(LimitSimulatorPitfalls, InvalidScenariosAreRefused) {
  const LimitScenario valid = [] {
    LimitScenario s;
    s.phases = {phase("p", 1s, 2, 10)};
    return s;
  }();
  ASSERT_NO_THROW((void)LimitSimulator::run(valid, 1));
  const auto refused = [&](const std::function<void(LimitScenario&)>& spoil) {
    LimitScenario s = valid;
    spoil(s);
    EXPECT_THROW((void)LimitSimulator::run(s, 1), std::invalid_argument);
    AdaptiveLimitController controller(settings(), aimd());
    EXPECT_THROW((void)LimitSimulator::run(s, controller), std::invalid_argument);
  };
  refused([](LimitScenario& s) { s.phases.clear(); });
  refused([](LimitScenario& s) { s.phases[0].capacity = 0; });
  refused([](LimitScenario& s) { s.phases[0].duration = 0s; });
  refused([](LimitScenario& s) { s.phases[0].service_time = 0s; });
  refused([](LimitScenario& s) { s.phases[0].arrival_rate = 0; });
  refused([](LimitScenario& s) { s.phases[0].arrival_rate = std::nan(""); });
  refused([](LimitScenario& s) { s.phases[0].extra_latency = -1ms; });
  refused([](LimitScenario& s) { s.phases.push_back(phase("second", 1s, -1, 10)); });
  refused([](LimitScenario& s) { s.timeout = -1ms; });
  refused([](LimitScenario& s) { s.max_queue = -1; });
  refused([](LimitScenario& s) { s.report_every = 0s; });
  EXPECT_THROW((void)LimitSimulator::run(valid, 0), std::invalid_argument);
}

}  // namespace
}  // namespace kevlar
