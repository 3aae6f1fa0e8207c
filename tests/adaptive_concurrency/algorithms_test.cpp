// The adaptive limit algorithms (AimdLimit, VegasLimit, GradientLimit) fed hand-made windows, and
// the AdaptiveLimitController that aggregates samples into windows: each rule of an algorithm, the
// pitfalls its guards exist for (a reference that learns the limiter's own queueing, a lucky
// no-load latency, Gradient2's upward creep), option validation, and the controller's windowing,
// clamping and thread-safety.
#include <kevlar/adaptive_limit.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();

/// A window of `samples` measured calls of mean (and shortest) latency `rtt`, the busiest of which
/// started with `max_in_flight` calls in flight.
LimitWindow window(Clock::duration rtt, std::uint32_t max_in_flight, std::uint32_t dropped = 0,
                   std::uint32_t samples = 100) {
  LimitWindow w;
  w.average_rtt = rtt;
  w.min_rtt = rtt;
  w.samples = samples;
  w.dropped = dropped;
  w.max_in_flight = max_in_flight;
  return w;
}

/// A window that used the whole limit.
LimitWindow saturated(Clock::duration rtt, double limit) {
  return window(rtt, static_cast<std::uint32_t>(std::ceil(limit)));
}

/// A window that used one call of the limit (app-limited for any limit above 2).
LimitWindow app_limited(Clock::duration rtt) {
  return window(rtt, 1);
}

/// Feeds `w` to `algorithm` as the controller does: the decision, clamped to the bounds, is the
/// limit in force during the next window.
LimitDecision feed(LimitAlgorithm& algorithm, const LimitWindow& w, double& limit,
                   double min_limit = 1, double max_limit = 1000) {
  const LimitDecision d = algorithm.update(w, limit, min_limit, max_limit);
  limit = std::clamp(d.limit, min_limit, max_limit);
  return d;
}

Clock::duration nanoseconds(double ns) {
  return Clock::duration(static_cast<Clock::duration::rep>(ns));
}

/// `what` throws std::invalid_argument whose message names `name`.
void expect_invalid(const std::function<void()>& what, const std::string& name) {
  try {
    what();
    ADD_FAILURE() << "accepted an invalid " << name;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos)
        << "the message does not name " << name << ": " << e.what();
  }
}

// --- AIMD ------------------------------------------------------------------------------------

TEST(AdaptiveAimd, ADroppedCallMultipliesTheLimitByTheDecreaseFactor) {
  AimdOptions o;
  o.decrease_factor = 0.8;
  AimdLimit aimd(o);
  double limit = 20;
  feed(aimd, saturated(10ms, limit), limit);  // reference 10 ms, +1
  ASSERT_DOUBLE_EQ(limit, 21);
  // Drops decide even when the latency is at its reference.
  const LimitDecision d = feed(aimd, window(10ms, 21, /*dropped=*/1), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::dropped);
  EXPECT_DOUBLE_EQ(d.limit, 21 * 0.8);
  // A window of nothing but drops too (no latency to judge).
  const LimitDecision only = aimd.update(window(0ns, 10, /*dropped=*/5, /*samples=*/0), 10, 1, 100);
  EXPECT_EQ(only.reason, LimitChangeReason::dropped);
  EXPECT_DOUBLE_EQ(only.limit, 8);
}

TEST(AdaptiveAimd, LatencyAboveTheToleranceDecreasesAndAtItDoesNot) {
  AimdLimit aimd;  // tolerance 2
  double limit = 20;
  feed(aimd, saturated(10ms, limit), limit);
  EXPECT_EQ(aimd.reference(), 10ms);
  // Exactly 2 × the reference is still within the tolerance: the limit grows.
  LimitDecision d = feed(aimd, saturated(20ms, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 22);
  // Above it: × 0.9.
  d = feed(aimd, saturated(20ms + 1us, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::latency);
  EXPECT_DOUBLE_EQ(d.limit, 22 * 0.9);
}

TEST(AdaptiveAimd, AHealthyWindowUsingHalfTheLimitAddsTheIncreaseAndLessHolds) {
  AimdOptions o;
  o.increase = 2.5;
  AimdLimit aimd(o);
  double limit = 20;
  feed(aimd, app_limited(10ms), limit);  // the reference; an app-limited window holds
  EXPECT_DOUBLE_EQ(limit, 20);
  // max_in_flight 10 = limit / 2: in use.
  LimitDecision d = feed(aimd, window(10ms, 10), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 22.5);
  // max_in_flight 11 < 22.5 / 2: app-limited, the limit is not in use and learns nothing.
  d = feed(aimd, window(10ms, 11), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 22.5);
  // So does an app-limited window whose latency is above the tolerance: the limiter did not cause
  // it, and shedding an unused limit would not cure it.
  d = feed(aimd, window(30ms, 11), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 22.5);
  // A window without samples (nothing completed) holds too.
  d = feed(aimd, window(0ns, 0, 0, /*samples=*/0), limit);
  EXPECT_DOUBLE_EQ(limit, 22.5);
}

// The pitfall: a reference that averages every uncongested window learns the queueing the limit
// itself causes (each +1 adds a little latency), so the threshold rises with the limit and the
// limit grows forever. Here the latency creeps up 1 % per saturated window: the reference must
// stay at the first window's 10 ms, so the first decrease comes at the first window above
// 2 × 10 ms (k = 70: 1.01^69 < 2 < 1.01^70), and from then on every window decreases.
TEST(AdaptiveAimd, TheReferenceDoesNotLearnFromSaturatedWindows) {
  AimdOptions o;
  o.floor_windows = 0;  // keep the floor rule out of this test
  AimdLimit aimd(o);
  double limit = 20;
  feed(aimd, saturated(10ms, limit), limit);
  ASSERT_EQ(aimd.reference(), 10ms);
  double peak = limit;
  std::optional<int> first_decrease;
  for (int k = 1; k <= 150; ++k) {
    const double before = limit;
    const Clock::duration rtt = nanoseconds(1e7 * std::pow(1.01, k));
    const LimitDecision d = feed(aimd, saturated(rtt, limit), limit);
    peak = std::max(peak, limit);
    EXPECT_EQ(aimd.reference(), 10ms) << "the reference learned a saturated window at k = " << k;
    if (d.reason == LimitChangeReason::latency && !first_decrease) first_decrease = k;
    if (first_decrease) {
      EXPECT_EQ(d.reason, LimitChangeReason::latency) << "k = " << k;
      EXPECT_TRUE(limit < before || limit == 1) << "k = " << k;
    }
  }
  ASSERT_TRUE(first_decrease.has_value()) << "the limit grew forever";
  EXPECT_EQ(*first_decrease, 70);
  EXPECT_DOUBLE_EQ(peak, 21 + 69);  // +1 on each of the 69 uncongested windows after the first
  EXPECT_DOUBLE_EQ(limit, 1);       // × 0.9 for 81 windows: down to the floor
}

TEST(AdaptiveAimd, TheReferenceRisesFromAppLimitedWindowsAndFallsFromFasterOnes) {
  AimdLimit aimd;  // reference_weight 0.1
  double limit = 20;
  feed(aimd, app_limited(10ms), limit);
  // 15 ms is within the tolerance; a lightly loaded dependency's latency: learned by 10 %.
  LimitDecision d = feed(aimd, app_limited(15ms), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 20) << "an app-limited window moved the limit";
  EXPECT_NEAR(static_cast<double>(aimd.reference().count()), 10.5e6, 1);
  for (int i = 0; i < 200; ++i) feed(aimd, app_limited(15ms), limit);
  EXPECT_NEAR(static_cast<double>(aimd.reference().count()), 15e6, 0.01e6);
  // A faster window lowers it even when saturated: by 10 % of the gap...
  feed(aimd, saturated(12ms, limit), limit);
  EXPECT_NEAR(static_cast<double>(aimd.reference().count()), 14.7e6, 10);  // 15 + 0.1 × (12 − 15)
  // ...and halfway at once when it is faster than the tolerance can explain (5 × 2 < 14.7).
  feed(aimd, saturated(5ms, limit), limit);
  EXPECT_NEAR(static_cast<double>(aimd.reference().count()), 9.85e6, 10);
}

// At the floor there is nothing left to shed: after floor_windows congested windows there, their
// latency becomes the reference (reason probe), and the limit can grow again.
TEST(AdaptiveAimd, AtTheFloorCongestedWindowsRelearnTheReference) {
  AimdLimit aimd;  // floor_windows 5
  double limit = 5;
  const double min = 5;
  feed(aimd, app_limited(10ms), limit, min);
  for (int i = 1; i <= 4; ++i) {
    const LimitDecision d = feed(aimd, saturated(30ms, limit), limit, min);
    EXPECT_EQ(d.reason, LimitChangeReason::latency) << "window " << i;
    EXPECT_DOUBLE_EQ(limit, min);
    EXPECT_EQ(aimd.reference(), 10ms);
  }
  LimitDecision d = feed(aimd, saturated(30ms, limit), limit, min);
  EXPECT_EQ(d.reason, LimitChangeReason::probe);
  EXPECT_EQ(aimd.reference(), 30ms);
  EXPECT_DOUBLE_EQ(limit, min);
  d = feed(aimd, saturated(30ms, limit), limit, min);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, min + 1);
  // The first window as fast as the replaced reference allowed (12 ms <= 2 × 10 ms) ends the slow
  // spell: the old reference is back.
  feed(aimd, saturated(12ms, limit), limit, min);
  EXPECT_EQ(aimd.reference(), 10ms);
}

TEST(AdaptiveAimd, CongestedWindowsAboveTheFloorOrWithTheRuleOffNeverRelearn) {
  AimdOptions off;
  off.floor_windows = 0;
  AimdLimit never(off);
  double limit = 5;
  feed(never, app_limited(10ms), limit, 5);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(feed(never, saturated(30ms, limit), limit, 5).reason, LimitChangeReason::latency);
  }
  EXPECT_EQ(never.reference(), 10ms);

  // Above the floor the count restarts: four at the floor, one above it, four at the floor again.
  AimdLimit aimd;
  limit = 5;
  feed(aimd, app_limited(10ms), limit, 5);
  for (int i = 0; i < 4; ++i) feed(aimd, saturated(30ms, limit), limit, 5);
  limit = 8;
  feed(aimd, saturated(30ms, limit), limit, 5);  // 8 × 0.9 = 7.2, above the floor
  limit = 5;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(feed(aimd, saturated(30ms, limit), limit, 5).reason, LimitChangeReason::latency);
  }
  EXPECT_EQ(aimd.reference(), 10ms);
}

TEST(AdaptiveAimd, OptionsAreValidated) {
  const auto with = [](auto set) {
    return [set] {
      AimdOptions o;
      set(o);
      AimdLimit limit(o);
    };
  };
  expect_invalid(with([](AimdOptions& o) { o.decrease_factor = 2; }), "decrease_factor");
  expect_invalid(with([](AimdOptions& o) { o.decrease_factor = 0.4; }), "decrease_factor");
  expect_invalid(with([](AimdOptions& o) { o.decrease_factor = 1; }), "decrease_factor");
  expect_invalid(with([](AimdOptions& o) { o.decrease_factor = nan_value; }), "decrease_factor");
  expect_invalid(with([](AimdOptions& o) { o.latency_tolerance = 0.99; }), "latency_tolerance");
  expect_invalid(with([](AimdOptions& o) { o.reference_weight = 0; }), "reference_weight");
  expect_invalid(with([](AimdOptions& o) { o.reference_weight = 1.01; }), "reference_weight");
  expect_invalid(with([](AimdOptions& o) { o.increase = 0; }), "increase");
  expect_invalid(with([](AimdOptions& o) { o.increase = std::numeric_limits<double>::infinity(); }),
                 "increase");
  expect_invalid(with([](AimdOptions& o) { o.floor_windows = -1; }), "floor_windows");
  // The edges of every range are accepted.
  AimdOptions edge;
  edge.decrease_factor = 0.5;
  edge.latency_tolerance = 1;
  edge.reference_weight = 1;
  edge.floor_windows = 0;
  EXPECT_NO_THROW(AimdLimit{edge});
  try {
    AimdOptions o;
    o.decrease_factor = 2;
    AimdLimit limit(o);
    ADD_FAILURE() << "accepted decrease_factor 2";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kevlar::AimdOptions::decrease_factor must be in [0.5, 1) (got 2)");
  }
}

// --- Vegas -----------------------------------------------------------------------------------

/// A Vegas limit whose probe cannot come within a test's few windows (30 × 20 × 0.5 = 300).
VegasLimit vegas(double smoothing = 1) {
  VegasOptions o;
  o.smoothing = smoothing;
  o.seed = 1;
  return VegasLimit(o);
}

TEST(AdaptiveVegas, TheFirstWindowSetsTheNoLoadLatencyAndHolds) {
  VegasLimit v = vegas();
  EXPECT_EQ(v.no_load_rtt(), 0ns);
  double limit = 20;
  const LimitDecision d = feed(v, saturated(10ms, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 20);
  EXPECT_EQ(v.no_load_rtt(), 10ms);
}

// queue = ceil(L × (1 − no_load / rtt)); at L = 20, lg(L) = 1, alpha = 3, beta = 6.
TEST(AdaptiveVegas, TheQueueEstimateMovesTheLimitByLgSteps) {
  VegasLimit v = vegas();
  double limit = 20;
  feed(v, app_limited(10ms), limit);
  // 10.5 ms: queue = ceil(0.95) = 1 <= lg(20) = 1: + beta = +6.
  LimitDecision d = feed(v, saturated(10500us, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 26);
  // 11 ms at L = 20: queue = ceil(1.8) = 2, between lg and alpha: +lg = +1.
  limit = 20;
  d = feed(v, saturated(11ms, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 21);
  // 12.5 ms at L = 20: queue = 4, within [alpha, beta]: hold.
  limit = 20;
  d = feed(v, saturated(12500us, limit), limit);
  EXPECT_DOUBLE_EQ(limit, 20);
  // 20 ms: queue = 10 > beta: −lg = −1.
  d = feed(v, saturated(20ms, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::latency);
  EXPECT_DOUBLE_EQ(limit, 19);
  // At L = 200, lg = 2: queue ceil(200 × (1 − 10 / 10.05)) = 1 <= 2: + beta = +12.
  limit = 200;
  d = feed(v, saturated(10050us, limit), limit);
  EXPECT_DOUBLE_EQ(limit, 212);
}

TEST(AdaptiveVegas, AnAppLimitedWindowHoldsWhateverItsLatency) {
  VegasLimit v = vegas();
  double limit = 20;
  feed(v, app_limited(10ms), limit);
  feed(v, window(20ms, 9), limit);  // queue 10 > beta, but 9 < 20 / 2 in use
  EXPECT_DOUBLE_EQ(limit, 20);
  feed(v, window(10500us, 9), limit);  // queue 1: would be +6
  EXPECT_DOUBLE_EQ(limit, 20);
}

TEST(AdaptiveVegas, ADropLowersTheLimitByLg) {
  VegasLimit v = vegas();
  double limit = 20;
  feed(v, app_limited(10ms), limit);
  LimitDecision d = feed(v, window(10ms, 20, /*dropped=*/1), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::dropped);
  EXPECT_DOUBLE_EQ(limit, 19);
  d = feed(v, window(0ns, 19, /*dropped=*/3, /*samples=*/0), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::dropped);
  EXPECT_DOUBLE_EQ(limit, 18);
}

TEST(AdaptiveVegas, SmoothingWeighsTheNewLimitAgainstTheOld) {
  VegasLimit v = vegas(0.5);
  double limit = 20;
  feed(v, app_limited(10ms), limit);
  feed(v, saturated(20ms, limit), limit);  // target 19
  EXPECT_DOUBLE_EQ(limit, 19.5);
}

// One window far faster than those around it (a burst of cache hits) must not become the no-load
// latency: Vegas would then see a queue of nearly the whole limit in every normal window and
// shrink it by lg(L) per window until the next probe. The window only lowers the no-load latency
// to max(its mean, the previous window's mean); two fast windows in a row do lower it.
TEST(AdaptiveVegas, OneLuckyFastWindowDoesNotSetTheNoLoadLatency) {
  VegasLimit v = vegas();
  double limit = 20;
  feed(v, app_limited(10ms), limit);
  for (int i = 0; i < 5; ++i) feed(v, saturated(12500us, limit), limit);  // queue 4: hold
  ASSERT_DOUBLE_EQ(limit, 20);
  feed(v, saturated(100us, limit), limit);  // the lucky window
  EXPECT_EQ(v.no_load_rtt(), 10ms);
  const double before = limit;
  for (int i = 0; i < 20; ++i) feed(v, saturated(12500us, limit), limit);
  EXPECT_EQ(v.no_load_rtt(), 10ms);
  // With a no-load latency of 0.1 ms the queue would be 99 % of L > beta: −1 for 20 windows.
  EXPECT_GE(limit, before) << "the limit collapsed after one lucky window";

  feed(v, saturated(8ms, limit), limit);
  EXPECT_EQ(v.no_load_rtt(), 10ms);
  feed(v, saturated(8ms, limit), limit);
  EXPECT_EQ(v.no_load_rtt(), 8ms) << "a sustained faster latency was not learned";
}

// probe_multiplier 1: the probe comes after U[0.5, 1) × 20 windows, so within the first 20. It
// forgets the no-load latency and takes the probe window's mean (12.5 ms here, while the one seen
// before was 10 ms); the limit holds during the probe.
TEST(AdaptiveVegas, TheProbeReMeasuresTheNoLoadLatencyWithinLimitWindows) {
  VegasOptions o;
  o.probe_multiplier = 1;
  o.seed = 42;
  VegasLimit v(o);
  double limit = 20;
  feed(v, app_limited(10ms), limit);
  ASSERT_EQ(v.no_load_rtt(), 10ms);
  int windows = 1;
  bool probed = false;
  while (windows < 40 && !probed) {
    const LimitDecision d = feed(v, saturated(12500us, limit), limit);
    ++windows;
    EXPECT_DOUBLE_EQ(limit, 20);
    probed = d.reason == LimitChangeReason::probe;
  }
  ASSERT_TRUE(probed);
  EXPECT_GE(windows, 10);  // not before 0.5 × 1 × 20 windows
  EXPECT_LE(windows, 20);  // nor after 1 × 1 × 20
  EXPECT_EQ(v.no_load_rtt(), 12500us);
  // Measured against 12.5 ms, a 12.5 ms window shows no queue: + beta.
  feed(v, saturated(12500us, limit), limit);
  EXPECT_DOUBLE_EQ(limit, 26);
}

TEST(AdaptiveVegas, OptionsAreValidated) {
  const auto with = [](auto set) {
    return [set] {
      VegasOptions o;
      set(o);
      VegasLimit limit(o);
    };
  };
  expect_invalid(with([](VegasOptions& o) { o.probe_multiplier = 0.5; }), "probe_multiplier");
  expect_invalid(with([](VegasOptions& o) { o.probe_multiplier = nan_value; }), "probe_multiplier");
  expect_invalid(with([](VegasOptions& o) { o.smoothing = 0; }), "smoothing");
  expect_invalid(with([](VegasOptions& o) { o.smoothing = 1.5; }), "smoothing");
  VegasOptions edge;
  edge.probe_multiplier = 1;
  edge.smoothing = 1;
  EXPECT_NO_THROW(VegasLimit{edge});
}

// --- Gradient --------------------------------------------------------------------------------

/// Ten app-limited windows at `rtt`: the baseline's warm-up, ending at `rtt`.
void warm(GradientLimit& g, Clock::duration rtt, double& limit, double min_limit = 1) {
  for (int i = 0; i < 10; ++i) feed(g, app_limited(rtt), limit, min_limit);
  ASSERT_EQ(g.baseline(), rtt);
}

// At a steady gradient below 1 (rtt = 1.2 × tolerance × baseline, the limit in use) the limit can
// only shrink: over 10,000 windows it never rises above where it started and reaches the floor.
TEST(AdaptiveGradient, ASteadyGradientBelowOneNeverRaisesTheLimit) {
  GradientOptions o;
  o.floor_windows = 0;  // the floor rule would (rightly) relearn this latency as the baseline
  GradientLimit g(o);
  double limit = 20;
  warm(g, 10ms, limit);
  const Clock::duration rtt = nanoseconds(1.2 * o.rtt_tolerance * 10e6);  // 18 ms
  double highest = limit;
  for (int i = 0; i < 10'000; ++i) {
    feed(g, saturated(rtt, limit), limit);
    highest = std::max(highest, limit);
  }
  EXPECT_LE(highest, 20);
  EXPECT_LT(limit, 1.001) << "the limit did not reach the floor";
  EXPECT_EQ(g.baseline(), 10ms);
}

// Netflix's Gradient2 computes limit × gradient + queue_size (smoothed 0.2) on every window, so at
// gradient 0.9 from 20 it rises toward 0.2 × 4 / (0.2 × 0.1) = 40: it creeps upward while the
// latency says there is a queue. The same windows fed to GradientLimit only lower the limit.
TEST(AdaptiveGradient, UnlikeGradient2TheLimitDoesNotCreepAtAGradientBelowOne) {
  GradientOptions o;
  o.floor_windows = 0;
  GradientLimit g(o);
  double limit = 20;
  warm(g, 10ms, limit);
  const double baseline_ns = 10e6;
  const Clock::duration rtt = nanoseconds(o.rtt_tolerance * baseline_ns / 0.9);  // 16.67 ms
  double control = 20;  // Gradient2's limit (its baseline held at 10 ms, which favours it)
  for (int i = 0; i < 200; ++i) {
    const LimitWindow w = saturated(rtt, std::max(limit, control));
    const double gradient =
        std::clamp(o.rtt_tolerance * baseline_ns / static_cast<double>(rtt.count()), 0.5, 1.0);
    control = (1 - o.smoothing) * control + o.smoothing * (control * gradient + o.queue_size);
    feed(g, w, limit);
    EXPECT_LE(limit, 20) << "window " << i;
  }
  EXPECT_GT(control, 35) << "the control did not creep: the test shows nothing";
  EXPECT_LT(limit, 10);
}

// A long incident (2,000 saturated windows at 3 × the baseline latency) must not become the norm:
// the baseline stays, the limit shrinks, and healthy windows afterwards make it grow again.
TEST(AdaptiveGradient, ALongIncidentDoesNotMoveTheBaseline) {
  GradientOptions o;
  o.floor_windows = 0;
  GradientLimit g(o);
  double limit = 40;
  const double min = 5;
  warm(g, 10ms, limit, min);
  for (int i = 0; i < 2000; ++i) {
    feed(g, saturated(30ms, limit), limit, min);
    ASSERT_EQ(g.baseline(), 10ms) << "window " << i;
  }
  EXPECT_LT(limit, min + 0.001);
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(feed(g, saturated(10ms, limit), limit, min).reason, LimitChangeReason::healthy);
  }
  EXPECT_NEAR(limit, min + 25 * 0.2 * 4, 1e-9);  // + smoothing × queue_size per window
}

TEST(AdaptiveGradient, MaxHealthyRttCapsTheBaselineAndMakesSlowerWindowsCongested) {
  GradientOptions capped;
  capped.max_healthy_rtt = 15ms;
  GradientLimit g(capped);
  GradientLimit uncapped;  // the same windows without a ceiling
  double limit = 20;
  double uncapped_limit = 20;
  feed(g, app_limited(40ms), limit);
  feed(uncapped, app_limited(40ms), uncapped_limit);
  EXPECT_EQ(g.baseline(), 15ms);
  EXPECT_EQ(uncapped.baseline(), 40ms);
  // 20 ms is within 1.5 × 15 ms, but above the ceiling: gradient 15 / 20 = 0.75.
  const LimitDecision d = feed(g, saturated(20ms, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::latency);
  EXPECT_DOUBLE_EQ(limit, 0.8 * 20 + 0.2 * 20 * 0.75);
  EXPECT_EQ(feed(uncapped, saturated(20ms, uncapped_limit), uncapped_limit).reason,
            LimitChangeReason::healthy);
  // App-limited windows teach the baseline upward, but never past the ceiling.
  for (int i = 0; i < 100; ++i) feed(g, app_limited(25ms), limit);
  EXPECT_EQ(g.baseline(), 15ms);
  // At the floor the latency above the ceiling is not relearned.
  double low = 1;
  for (int i = 0; i < 50; ++i) {
    EXPECT_NE(feed(g, saturated(30ms, low), low).reason, LimitChangeReason::probe);
  }
  EXPECT_EQ(g.baseline(), 15ms);
}

TEST(AdaptiveGradient, AppLimitedWindowsHoldTheLimitAndLetTheBaselineRise) {
  GradientLimit g;  // long_window 60: factor 2 / 61
  double limit = 20;
  warm(g, 10ms, limit);
  LimitDecision d = feed(g, app_limited(12ms), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 20);
  EXPECT_NEAR(static_cast<double>(g.baseline().count()), 10e6 + 2e6 * 2 / 61, 1);
  for (int i = 0; i < 500; ++i) feed(g, app_limited(12ms), limit);
  EXPECT_DOUBLE_EQ(limit, 20);
  EXPECT_NEAR(static_cast<double>(g.baseline().count()), 12e6, 0.01e6);
  // A saturated window at the same latency grows the limit (+0.2 × 4) and teaches nothing.
  const Clock::duration before = g.baseline();
  d = feed(g, saturated(12500us, limit), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 20.8);
  EXPECT_EQ(g.baseline(), before);
  // An app-limited window holds even at a gradient below 1 (as Gradient2: it says nothing about
  // the capacity, and shedding an unused limit would not cure its latency).
  d = feed(g, app_limited(30ms), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, 20.8);
}

TEST(AdaptiveGradient, TheBaselineFallsWithFasterWindowsHalfwayWhenMuchFaster) {
  GradientLimit g;  // rtt_tolerance 1.5, factor 2 / 61
  double limit = 20;
  warm(g, 12ms, limit);
  // 11 ms (11 × 1.5 > 12): the exponential average, even from a saturated window.
  feed(g, saturated(11ms, limit), limit);
  const double expected = 12e6 - 1e6 * 2 / 61;
  EXPECT_NEAR(static_cast<double>(g.baseline().count()), expected, 1);
  // 6 ms (6 × 1.5 < 11.97): faster than the tolerance can explain, the dependency recovered.
  feed(g, saturated(6ms, limit), limit);
  EXPECT_NEAR(static_cast<double>(g.baseline().count()), (expected + 6e6) / 2, 1);
}

TEST(AdaptiveGradient, AtTheFloorCongestedWindowsRelearnTheBaseline) {
  GradientLimit g;  // floor_windows 5
  const double min = 5;
  double limit = 5;
  warm(g, 10ms, limit, min);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(feed(g, saturated(30ms, limit), limit, min).reason, LimitChangeReason::latency);
    EXPECT_DOUBLE_EQ(limit, min);
  }
  LimitDecision d = feed(g, saturated(30ms, limit), limit, min);
  EXPECT_EQ(d.reason, LimitChangeReason::probe);
  EXPECT_EQ(g.baseline(), 30ms);
  d = feed(g, saturated(30ms, limit), limit, min);
  EXPECT_EQ(d.reason, LimitChangeReason::healthy);
  EXPECT_DOUBLE_EQ(limit, min + 0.8);
  // The first window as fast as the replaced baseline allowed (12 ms <= 1.5 × 10 ms) ends the
  // slow spell: the old baseline is back.
  feed(g, saturated(12ms, limit), limit, min);
  EXPECT_EQ(g.baseline(), 10ms);
}

TEST(AdaptiveGradient, DropsMultiplyByTheBackoffRatio) {
  GradientOptions o;
  o.backoff_ratio = 0.75;
  GradientLimit g(o);
  double limit = 20;
  warm(g, 10ms, limit);
  const LimitDecision d = feed(g, window(10ms, 20, /*dropped=*/2), limit);
  EXPECT_EQ(d.reason, LimitChangeReason::dropped);
  EXPECT_DOUBLE_EQ(limit, 15);
  EXPECT_EQ(g.baseline(), 10ms);
}

TEST(AdaptiveGradient, OptionsAreValidated) {
  const auto with = [](auto set) {
    return [set] {
      GradientOptions o;
      set(o);
      GradientLimit limit(o);
    };
  };
  expect_invalid(with([](GradientOptions& o) { o.rtt_tolerance = 0.9; }), "rtt_tolerance");
  expect_invalid(with([](GradientOptions& o) { o.rtt_tolerance = nan_value; }), "rtt_tolerance");
  expect_invalid(with([](GradientOptions& o) { o.long_window = 0; }), "long_window");
  expect_invalid(with([](GradientOptions& o) { o.queue_size = 0; }), "queue_size");
  expect_invalid(with([](GradientOptions& o) { o.smoothing = 0; }), "smoothing");
  expect_invalid(with([](GradientOptions& o) { o.smoothing = 1.1; }), "smoothing");
  expect_invalid(with([](GradientOptions& o) { o.backoff_ratio = 1; }), "backoff_ratio");
  expect_invalid(with([](GradientOptions& o) { o.backoff_ratio = 0.49; }), "backoff_ratio");
  expect_invalid(with([](GradientOptions& o) { o.floor_windows = -1; }), "floor_windows");
  expect_invalid(with([](GradientOptions& o) { o.max_healthy_rtt = -1ns; }), "max_healthy_rtt");
  GradientOptions edge;
  edge.rtt_tolerance = 1;
  edge.long_window = 1;
  edge.smoothing = 1;
  edge.backoff_ratio = 0.5;
  edge.floor_windows = 0;
  EXPECT_NO_THROW(GradientLimit{edge});
}

// --- The controller --------------------------------------------------------------------------

/// An algorithm that keeps every window it is given and answers `next(limit)`.
class ScriptedAlgorithm final : public LimitAlgorithm {
 public:
  explicit ScriptedAlgorithm(std::function<double(double)> next) : next_(std::move(next)) {}
  LimitDecision update(const LimitWindow& w, double limit, double, double) override {
    windows.push_back(w);
    return {next_(limit), LimitChangeReason::latency};
  }
  [[nodiscard]] std::string describe() const override { return "scripted"; }
  std::vector<LimitWindow> windows;

 private:
  std::function<double(double)> next_;
};

const Clock::time_point t0 = Clock::time_point(100s);

std::unique_ptr<ScriptedAlgorithm> scripted(std::function<double(double)> next) {
  return std::make_unique<ScriptedAlgorithm>(std::move(next));
}

TEST(AdaptiveController, BadSettingsThrowNamingTheSetting) {
  const auto with = [](auto set) {
    return [set] {
      AdaptiveLimitSettings s;
      set(s);
      AdaptiveLimitController c(s, std::make_unique<AimdLimit>());
    };
  };
  using S = AdaptiveLimitSettings;
  expect_invalid(with([](S& s) { s.min_limit = 0; }), "min_limit");
  expect_invalid(with([](S& s) { s.max_limit = 0; }), "max_limit");
  expect_invalid(with([](S& s) {
                   s.min_limit = 20;
                   s.initial_limit = 20;
                   s.max_limit = 19;
                 }),
                 "max_limit");
  expect_invalid(with([](S& s) { s.initial_limit = 101; }), "initial_limit");
  expect_invalid(with([](S& s) {
                   s.min_limit = 11;
                   s.initial_limit = 10;
                 }),
                 "initial_limit");
  expect_invalid(with([](S& s) { s.window = 999us; }), "window");
  expect_invalid(with([](S& s) { s.min_window_samples = 0; }), "min_window_samples");
  expect_invalid([] { AdaptiveLimitController c({}, nullptr); }, "algorithm");
  AdaptiveLimitSettings edge;
  edge.min_limit = edge.initial_limit = edge.max_limit = 7;
  edge.window = 1ms;
  edge.min_window_samples = 1;
  EXPECT_NO_THROW(AdaptiveLimitController(edge, std::make_unique<AimdLimit>()));
}

TEST(AdaptiveController, TheFirstCloseOnlyStartsTheWindowAndItsSamplesCount) {
  auto algorithm = scripted([](double limit) { return limit + 5; });
  ScriptedAlgorithm* spy = algorithm.get();
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, std::move(algorithm));
  EXPECT_EQ(c.limit(), 10u);
  EXPECT_TRUE(c.due(t0));
  c.record(LimitSample::success, 4ms, 3);
  EXPECT_FALSE(c.close_window(t0).has_value());
  EXPECT_EQ(c.windows(), 0u);
  EXPECT_TRUE(spy->windows.empty());
  EXPECT_FALSE(c.due(t0 + 999ms));
  EXPECT_FALSE(c.close_window(t0 + 999ms).has_value());
  EXPECT_TRUE(c.due(t0 + 1s));
  const std::optional<LimitChange> change = c.close_window(t0 + 1s);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->old_limit, 10u);
  EXPECT_EQ(change->new_limit, 15u);
  EXPECT_EQ(change->reason, LimitChangeReason::latency);
  EXPECT_EQ(change->window.samples, 1u);  // the sample before the first close
  EXPECT_EQ(change->window.average_rtt, 4ms);
  EXPECT_EQ(change->window.end, t0 + 1s);
  EXPECT_EQ(c.windows(), 1u);
  EXPECT_EQ(c.limit(), 15u);
  EXPECT_DOUBLE_EQ(c.estimate(), 15);
  EXPECT_FALSE(c.due(t0 + 1s + 999ms));  // the next window runs from this close
}

TEST(AdaptiveController, ADueWindowKeepsCollectingUntilItHoldsEnoughSamples) {
  auto algorithm = scripted([](double limit) { return limit; });
  ScriptedAlgorithm* spy = algorithm.get();
  AdaptiveLimitSettings s;
  s.min_window_samples = 6;
  AdaptiveLimitController c(s, std::move(algorithm));
  (void)c.close_window(t0);
  c.record(LimitSample::success, 10ms, 4);
  c.record(LimitSample::success, 30ms, 9);
  c.record(LimitSample::dropped, 2s, 17);   // counts, and its in-flight count; not its time
  c.record(LimitSample::ignored, 1us, 99);  // counts nowhere in the window
  c.record(LimitSample::ignored, 1us, 99);
  EXPECT_FALSE(c.close_window(t0 + 2s).has_value());
  EXPECT_EQ(c.windows(), 0u) << "closed with 3 samples of the 6 required";
  EXPECT_TRUE(c.due(t0 + 2s));
  c.record(LimitSample::success, 5ms, 2);
  c.record(LimitSample::success, 15ms, 6);
  EXPECT_FALSE(c.close_window(t0 + 3s).has_value());
  EXPECT_EQ(c.windows(), 0u);
  c.record(LimitSample::dropped, 1ms, 3);
  EXPECT_FALSE(c.close_window(t0 + 4s).has_value());  // closes, but the limit did not change
  EXPECT_EQ(c.windows(), 1u);
  ASSERT_EQ(spy->windows.size(), 1u);
  const LimitWindow& w = spy->windows[0];
  EXPECT_EQ(w.end, t0 + 4s);
  EXPECT_EQ(w.samples, 4u);
  EXPECT_EQ(w.dropped, 2u);
  EXPECT_EQ(w.average_rtt, 15ms);  // (10 + 30 + 5 + 15) / 4
  EXPECT_EQ(w.min_rtt, 5ms);
  EXPECT_EQ(w.max_in_flight, 17u);
  EXPECT_EQ(c.total(LimitSample::success), 4u);
  EXPECT_EQ(c.total(LimitSample::dropped), 2u);
  EXPECT_EQ(c.total(LimitSample::ignored), 2u);

  // A window of drops only has no latency.
  for (int i = 0; i < 6; ++i) c.record(LimitSample::dropped, 1s, 1);
  (void)c.close_window(t0 + 6s);
  ASSERT_EQ(spy->windows.size(), 2u);
  EXPECT_EQ(spy->windows[1].samples, 0u);
  EXPECT_EQ(spy->windows[1].dropped, 6u);
  EXPECT_EQ(spy->windows[1].average_rtt, 0ns);
  EXPECT_EQ(spy->windows[1].min_rtt, 0ns);
  EXPECT_EQ(spy->windows[1].max_in_flight, 1u) << "the last window's in-flight count leaked";
}

TEST(AdaptiveController, IgnoredSamplesCountOnlyInTheirTotal) {
  auto algorithm = scripted([](double limit) { return limit; });
  ScriptedAlgorithm* spy = algorithm.get();
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, std::move(algorithm));
  (void)c.close_window(t0);
  for (int i = 0; i < 1000; ++i) c.record(LimitSample::ignored, 1s, 500);
  EXPECT_FALSE(c.close_window(t0 + 1s).has_value());
  EXPECT_EQ(c.windows(), 0u) << "ignored samples filled a window";
  c.record(LimitSample::success, 2ms, 1);
  (void)c.close_window(t0 + 2s);
  ASSERT_EQ(spy->windows.size(), 1u);
  EXPECT_EQ(spy->windows[0].samples, 1u);
  EXPECT_EQ(spy->windows[0].average_rtt, 2ms);
  EXPECT_EQ(spy->windows[0].max_in_flight, 1u);
  EXPECT_EQ(c.total(LimitSample::ignored), 1000u);
  EXPECT_EQ(c.total(LimitSample::success), 1u);
  EXPECT_EQ(c.total(LimitSample::dropped), 0u);
}

TEST(AdaptiveController, TheLimitIsTheFloorOfTheClampedEstimate) {
  double answer = 0;
  AdaptiveLimitSettings s;
  s.min_limit = 3;
  s.max_limit = 40;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, scripted([&](double) { return answer; }));
  Clock::time_point now = t0;
  (void)c.close_window(now);
  const auto close = [&](double next) {
    answer = next;
    c.record(LimitSample::success, 1ms, 1);
    now += 1s;
    (void)c.close_window(now);
  };
  close(12.7);
  EXPECT_EQ(c.limit(), 12u);
  EXPECT_DOUBLE_EQ(c.estimate(), 12.7);
  close(0.9 * (100.0 / 9.0));  // 9.999999999999998: ten
  EXPECT_EQ(c.limit(), 10u);
  close(1000);
  EXPECT_EQ(c.limit(), 40u);
  EXPECT_DOUBLE_EQ(c.estimate(), 40);
  close(-5);
  EXPECT_EQ(c.limit(), 3u);
  EXPECT_DOUBLE_EQ(c.estimate(), 3);
}

// Random windows (latencies from 0.1 ms to 2 s in regimes of 300 windows, each sample within
// −36 %..+72 % of its regime's, drops in one window of twenty, any in-flight count) never push the
// limit out of [min, max]; each algorithm is driven to both bounds, so the clamp is exercised
// (to within one of the ceiling: Gradient smooths toward a target already clamped to it, so its
// estimate nears the ceiling geometrically and reaches it only after ~100 undisturbed windows).
TEST(AdaptiveController, TheLimitStaysWithinItsBoundsOverRandomWindows) {
  const std::vector<std::function<std::unique_ptr<LimitAlgorithm>()>> algorithms = {
      [] { return std::make_unique<AimdLimit>(); },
      [] {
        VegasOptions o;
        o.seed = 3;
        return std::make_unique<VegasLimit>(o);
      },
      [] { return std::make_unique<GradientLimit>(); },
  };
  for (const auto& make : algorithms) {
    AdaptiveLimitSettings s;
    s.initial_limit = 20;
    s.min_limit = 5;
    s.max_limit = 60;
    s.min_window_samples = 5;
    AdaptiveLimitController c(s, make());
    SCOPED_TRACE(c.algorithm().describe());
    std::mt19937 random(12345);
    std::uniform_int_distribution<int> samples(5, 40);
    std::uniform_int_distribution<int> in_flight(1, 80);
    std::uniform_real_distribution<double> log_rtt(std::log(1e5), std::log(2e9));
    std::bernoulli_distribution drop_window(0.05);
    std::bernoulli_distribution drop(0.3);
    // Latencies drift in regimes of a few hundred windows, so that the algorithms find both a
    // healthy dependency (and grow) and a slow one (and shrink).
    double regime = 1e7;
    Clock::time_point now = t0;
    (void)c.close_window(now);
    bool reached_min = false;
    bool reached_max = false;
    for (int i = 0; i < 10'000; ++i) {
      if (i % 300 == 0) regime = std::exp(log_rtt(random));
      const bool drops = drop_window(random);
      const int n = samples(random);
      for (int k = 0; k < n; ++k) {
        const auto rtt = nanoseconds(regime * std::exp(0.1 * (log_rtt(random) - 16)));
        const auto kind = drops && drop(random) ? LimitSample::dropped : LimitSample::success;
        c.record(kind, rtt, static_cast<std::uint32_t>(in_flight(random)));
      }
      now += 1s;
      const std::optional<LimitChange> change = c.close_window(now);
      ASSERT_EQ(c.windows(), static_cast<std::uint64_t>(i + 1));
      ASSERT_GE(c.limit(), 5u) << "window " << i;
      ASSERT_LE(c.limit(), 60u) << "window " << i;
      ASSERT_GE(c.estimate(), 5.0);
      ASSERT_LE(c.estimate(), 60.0);
      if (change) {
        ASSERT_EQ(change->new_limit, c.limit());
        ASSERT_NE(change->old_limit, change->new_limit);
      }
      reached_min = reached_min || c.limit() == 5;
      reached_max = reached_max || c.limit() >= 59;
    }
    EXPECT_TRUE(reached_min);
    EXPECT_TRUE(reached_max);
  }
}

TEST(AdaptiveController, AnAlgorithmAnsweringNotANumberKeepsTheLimit) {
  double answer = nan_value;
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, scripted([&](double) { return answer; }));
  (void)c.close_window(t0);
  c.record(LimitSample::success, 1ms, 1);
  EXPECT_FALSE(c.close_window(t0 + 1s).has_value());
  EXPECT_EQ(c.windows(), 1u);
  EXPECT_EQ(c.limit(), 10u);
  EXPECT_DOUBLE_EQ(c.estimate(), 10);
  answer = std::numeric_limits<double>::infinity();
  c.record(LimitSample::success, 1ms, 1);
  EXPECT_FALSE(c.close_window(t0 + 2s).has_value());
  EXPECT_EQ(c.limit(), 10u);
  answer = 14;  // and the controller works on
  c.record(LimitSample::success, 1ms, 1);
  EXPECT_TRUE(c.close_window(t0 + 3s).has_value());
  EXPECT_EQ(c.limit(), 14u);
}

TEST(AdaptiveController, AnAlgorithmThatThrowsPropagatesAndTheLimitStays) {
  bool fail = true;
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, scripted([&](double limit) {
                              if (fail) throw std::runtime_error("boom");
                              return limit + 1;
                            }));
  (void)c.close_window(t0);
  c.record(LimitSample::success, 1ms, 1);
  EXPECT_THROW((void)c.close_window(t0 + 1s), std::runtime_error);
  EXPECT_EQ(c.limit(), 10u);
  EXPECT_DOUBLE_EQ(c.estimate(), 10);
  // The window lock was released: the next window closes.
  fail = false;
  c.record(LimitSample::success, 1ms, 1);
  const std::optional<LimitChange> change = c.close_window(t0 + 2s);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->new_limit, 11u);
  EXPECT_EQ(change->window.samples, 1u) << "the failed window's samples leaked into the next";
}

// record() from two threads at once loses no sample: 100,000 each (alternately measured and
// dropped, so that both counters are raced), then one close sees them all.
TEST(AdaptiveController, ConcurrentRecordsLoseNothing) {
  auto algorithm = scripted([](double limit) { return limit; });
  ScriptedAlgorithm* spy = algorithm.get();
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, std::move(algorithm));
  (void)c.close_window(t0);
  constexpr int per_thread = 100'000;
  std::atomic<bool> go{false};
  const auto worker = [&](std::uint32_t base_in_flight, Clock::duration rtt) {
    while (!go.load(std::memory_order_acquire)) {
    }
    for (int i = 0; i < per_thread; ++i) {
      const auto kind = i % 2 == 0 ? LimitSample::success : LimitSample::dropped;
      c.record(kind, rtt, base_in_flight + static_cast<std::uint32_t>(i % 1000));
    }
  };
  std::thread a(worker, 1u, 2ms);
  std::thread b(worker, 5000u, 4ms);
  go.store(true, std::memory_order_release);
  a.join();
  b.join();
  (void)c.close_window(t0 + 1s);
  ASSERT_EQ(spy->windows.size(), 1u);
  const LimitWindow& w = spy->windows[0];
  EXPECT_EQ(w.samples + w.dropped, 2u * per_thread);
  EXPECT_EQ(w.samples, static_cast<std::uint32_t>(per_thread));
  EXPECT_EQ(w.dropped, static_cast<std::uint32_t>(per_thread));
  EXPECT_EQ(w.average_rtt, 3ms);  // half at 2 ms, half at 4 ms
  EXPECT_EQ(w.min_rtt, 2ms);
  EXPECT_EQ(w.max_in_flight, 5999u);
  EXPECT_EQ(c.total(LimitSample::success) + c.total(LimitSample::dropped), 2u * per_thread);
}

// record() racing close_window(): one thread records measured samples of exactly 3 ms while another
// closes a window whenever one is due, 200 times. A sample's count and its time travel in one
// word, so that no window can hold one without the other: every window's mean is exactly 3 ms,
// and the windows hold every sample recorded, once.
TEST(AdaptiveController, ACloseRacingRecordsNeverSplitsASample) {
  auto algorithm = scripted([](double limit) { return limit; });
  ScriptedAlgorithm* spy = algorithm.get();
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  s.window = 1ms;
  AdaptiveLimitController c(s, std::move(algorithm));
  (void)c.close_window(t0);
  std::atomic<bool> stop{false};
  std::uint64_t recorded = 0;
  std::thread recorder([&] {
    while (!stop.load(std::memory_order_acquire)) {
      c.record(LimitSample::success, 3ms, 1);
      ++recorded;
    }
  });
  // The closer (this thread) touches the spy's windows alone: it is the only one closing.
  Clock::time_point now = t0;
  while (spy->windows.size() < 200) {
    now += 1ms;
    (void)c.close_window(now);
  }
  stop.store(true, std::memory_order_release);
  recorder.join();
  (void)c.close_window(now + 1ms);  // the rest (the recorder ran at least once after the last)
  std::uint64_t seen = 0;
  for (const LimitWindow& w : spy->windows) {
    seen += w.samples;
    ASSERT_EQ(w.average_rtt, 3ms) << "a window held a sample's count without its time";
  }
  EXPECT_EQ(seen, recorded);
}

// Two threads close the same due window at once, 1,000 times: exactly one of them gets the change
// each time (the other finds the lock taken, or the window already closed), and the algorithm
// sees each window once. A barrier (main thread and both closers) separates the rounds.
TEST(AdaptiveController, RacingClosesOfOneWindowReportOneChange) {
  auto algorithm = scripted([](double limit) { return limit == 10 ? 20 : 10; });
  ScriptedAlgorithm* spy = algorithm.get();
  AdaptiveLimitSettings s;
  s.min_window_samples = 1;
  AdaptiveLimitController c(s, std::move(algorithm));
  (void)c.close_window(t0);
  constexpr int rounds = 1000;
  std::barrier sync(3);
  std::atomic<int> changes{0};
  const auto closer = [&] {
    for (int r = 1; r <= rounds; ++r) {
      sync.arrive_and_wait();  // the round's samples are in
      if (c.close_window(t0 + r * 1s)) changes.fetch_add(1, std::memory_order_relaxed);
      sync.arrive_and_wait();  // both closes returned
    }
  };
  std::thread a(closer);
  std::thread b(closer);
  int wrong = 0;
  for (int r = 1; r <= rounds; ++r) {
    for (int k = 0; k < 3; ++k) c.record(LimitSample::success, 1ms, 1);
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    if (changes.exchange(0, std::memory_order_relaxed) != 1) ++wrong;
  }
  a.join();
  b.join();
  EXPECT_EQ(wrong, 0) << "rounds without exactly one change";
  EXPECT_EQ(spy->windows.size(), static_cast<std::size_t>(rounds));
  EXPECT_EQ(c.windows(), static_cast<std::uint64_t>(rounds));
  EXPECT_EQ(c.total(LimitSample::success), 3u * rounds);
}

TEST(AdaptiveController, ReasonsHaveNames) {
  EXPECT_EQ(to_string(LimitChangeReason::healthy), "healthy");
  EXPECT_EQ(to_string(LimitChangeReason::latency), "latency");
  EXPECT_EQ(to_string(LimitChangeReason::dropped), "dropped");
  EXPECT_EQ(to_string(LimitChangeReason::probe), "probe");
}

}  // namespace
}  // namespace kevlar
