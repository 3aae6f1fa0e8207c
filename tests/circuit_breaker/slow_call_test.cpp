// Slow calls: a call that takes at least slow_call_threshold counts as slow, whatever its outcome,
// and the circuit opens when slow calls reach slow_call_ratio of the sampling window (with at least
// minimum_throughput outcomes). Time is a ManualClock that the calls themselves move forward (a
// synchronous call "takes" what it advances), or that the strategy driver advances.
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using testing::StrategyDriver;

CircuitBreakerOptions slow_options(Clock::duration threshold, double ratio, int min) {
  CircuitBreakerOptions o;
  o.consecutive_failures = 100;  // failures alone never trip here
  o.slow_call_threshold = threshold;
  o.slow_call_ratio = ratio;
  o.minimum_throughput = min;
  o.sampling_window = 10s;
  o.break_duration = 5s;
  return o;
}

/// A breaker on a manual clock, with calls that take a given time and succeed or fail.
struct Harness {
  explicit Harness(const CircuitBreakerOptions& o)
      : breaker(CircuitBreaker::create(o)), shield(Shield{}.use(breaker).with_clock(clock)) {}

  /// Runs one call that takes `d` and succeeds (or throws a handled failure): its outcome.
  Outcome<int> call(Clock::duration d, bool fail = false) {
    return shield.execute_outcome([&]() -> int {
      clock->advance(d);
      if (fail) throw std::runtime_error("dependency failed");
      return 1;
    });
  }

  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<CircuitBreaker> breaker;
  Shield shield;
};

TEST(SlowCalls, SlowSuccessesOpenTheCircuitAtTheirRatio) {
  Harness h(slow_options(1s, 0.5, 4));
  EXPECT_TRUE(h.call(10ms).has_value());
  EXPECT_TRUE(h.call(1s).has_value());  // at the threshold: slow
  EXPECT_TRUE(h.call(999ms).has_value());
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);
  EXPECT_EQ(h.breaker->core().metrics(h.clock->now()).window_slow, 1u);
  EXPECT_TRUE(h.call(2s).has_value());  // 2 slow of 4: 50 %
  EXPECT_EQ(h.breaker->state(), CircuitState::open);
  const Outcome<int> rejected = h.call(0s);
  EXPECT_EQ(rejected.error(), errc::circuit_open);
}

TEST(SlowCalls, NothingOpensBeforeTheMinimumThroughput) {
  Harness h(slow_options(100ms, 0.5, 5));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(h.call(1s).has_value());  // 4 of 4 slow, min 5
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);
  EXPECT_TRUE(h.call(1s).has_value());
  EXPECT_EQ(h.breaker->state(), CircuitState::open);
}

TEST(SlowCalls, OnlyASlowCallTripsAndFastOnesDiluteTheRatio) {
  Harness h(slow_options(100ms, 0.5, 2));
  EXPECT_TRUE(h.call(200ms).has_value());  // 1 of 1 slow, below the minimum
  EXPECT_TRUE(h.call(0ms).has_value());    // 1 of 2 slow: a fast call trips nothing
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);
  EXPECT_TRUE(h.call(0ms).has_value());
  EXPECT_TRUE(h.call(0ms).has_value());
  EXPECT_TRUE(h.call(200ms).has_value());  // 2 of 5
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);
  const auto m = h.breaker->core().metrics(h.clock->now());
  EXPECT_EQ(m.window_total, 5u);
  EXPECT_EQ(m.window_slow, 2u);
}

TEST(SlowCalls, SlowCallsLeaveTheWindowWithTime) {
  Harness h(slow_options(100ms, 0.5, 2));
  EXPECT_TRUE(h.call(500ms).has_value());  // slow, at t = 0.5 s
  h.clock->advance(11s);                   // out of the 10 s window
  EXPECT_TRUE(h.call(0ms).has_value());
  EXPECT_TRUE(h.call(0ms).has_value());
  EXPECT_EQ(h.breaker->core().metrics(h.clock->now()).window_slow, 0u);
  EXPECT_TRUE(h.call(150ms).has_value());  // 1 of 3
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);
}

TEST(SlowCalls, SlowFailuresCountAsBothAndConsecutiveFailuresStillTrip) {
  CircuitBreakerOptions o = slow_options(1s, 1.0, 3);
  o.consecutive_failures = 3;
  Harness h(o);
  EXPECT_FALSE(h.call(2s, true).has_value());
  EXPECT_FALSE(h.call(0s, true).has_value());
  auto m = h.breaker->core().metrics(h.clock->now());
  EXPECT_EQ(m.window_failures, 2u);
  EXPECT_EQ(m.window_slow, 1u);
  EXPECT_EQ(m.consecutive_failures, 2);
  EXPECT_TRUE(h.call(0s).has_value());  // a fast success resets the consecutive count
  EXPECT_EQ(h.breaker->core().metrics(h.clock->now()).consecutive_failures, 0);
  for (int i = 0; i < 3; ++i) (void)h.call(0s, true);
  EXPECT_EQ(h.breaker->state(), CircuitState::open);  // by consecutive failures
}

TEST(SlowCalls, WorkBesideTheFailureRatio) {
  CircuitBreakerOptions o = slow_options(1s, 0.75, 4);
  o.consecutive_failures.reset();
  o.failure_ratio = 0.5;
  Harness h(o);
  EXPECT_TRUE(h.call(1s).has_value());
  EXPECT_TRUE(h.call(1s).has_value());
  EXPECT_TRUE(h.call(1s).has_value());
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);  // 3 of 3, below the minimum
  EXPECT_FALSE(h.call(0s, true).has_value());           // 1 failure of 4: 25 %, 3 slow: 75 %
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);  // the failure was not slow
  EXPECT_TRUE(h.call(1s).has_value());                  // 4 slow of 5: 80 %
  EXPECT_EQ(h.breaker->state(), CircuitState::open);
}

TEST(SlowCalls, ASlowProbeReopensTheCircuit) {
  Harness h(slow_options(1s, 0.5, 1));
  EXPECT_TRUE(h.call(1s).has_value());
  ASSERT_EQ(h.breaker->state(), CircuitState::open);
  h.clock->advance(5s);
  EXPECT_TRUE(h.call(3s).has_value());  // the probe succeeds, slowly
  EXPECT_EQ(h.breaker->state(), CircuitState::open);
  EXPECT_EQ(h.call(0s).error(), errc::circuit_open);
  h.clock->advance(5s);
  EXPECT_TRUE(h.call(0s).has_value());  // a fast probe closes it
  EXPECT_EQ(h.breaker->state(), CircuitState::closed);
}

TEST(SlowCalls, AnAsynchronousCallIsTimedFromAdmissionToItsOutcome) {
  auto clock = ManualClock::create();
  auto breaker = CircuitBreaker::create(slow_options(300ms, 0.5, 1));
  const Shield shield = Shield{}.use(breaker);
  StrategyDriver<int> fast{shield, clock};
  fast.start();
  fast.advance(299ms);
  fast.succeed(0, 1);
  EXPECT_EQ(breaker->state(), CircuitState::closed);
  StrategyDriver<int> slow{shield, clock};
  slow.start();
  slow.advance(300ms);
  slow.fail(0, boost::asio::error::connection_reset);  // slow: 1 of 2
  EXPECT_EQ(breaker->state(), CircuitState::open);
  const auto transitions = slow.events_of<BreakerTransition>();
  ASSERT_EQ(transitions.size(), 1u);
  EXPECT_EQ(transitions[0].to, CircuitState::open);
}

TEST(SlowCalls, ACancelledCallIsNeitherSlowNorCounted) {
  auto clock = ManualClock::create();
  auto breaker = CircuitBreaker::create(slow_options(100ms, 1.0, 1));
  StrategyDriver<int> d{Shield{}.use(breaker), clock};
  d.start();
  d.advance(1s);
  d.cancel();
  EXPECT_EQ(d.outcome().error(), boost::asio::error::operation_aborted);
  EXPECT_EQ(breaker->state(), CircuitState::closed);
  EXPECT_EQ(breaker->core().metrics(clock->now()).window_total, 0u);
}

TEST(SlowCalls, ASlowSuccessTripReportsItselfAndNoOlderFailure) {
  CircuitBreakerOptions o = slow_options(1s, 0.5, 2);
  std::vector<BreakEvent> breaks;
  std::vector<CircuitStateChange> changes;
  o.break_duration_generator = [&](const BreakEvent& e) {
    breaks.push_back(e);
    EXPECT_NE(e.context, nullptr);
    EXPECT_NE(e.outcome, nullptr);
    if (e.outcome != nullptr) {
      EXPECT_FALSE(e.outcome->failed());
    }
    return 5s;
  };
  o.on_state_changed = [&](const CircuitStateChange& c) { changes.push_back(c); };
  Harness h(o);
  EXPECT_FALSE(h.call(0s, true).has_value());  // a fast failure: recorded as the last failure
  EXPECT_TRUE(h.call(2s).has_value());         // a slow success: 1 slow of 2, opens
  ASSERT_EQ(h.breaker->state(), CircuitState::open);
  ASSERT_EQ(breaks.size(), 1u);
  EXPECT_TRUE(breaks[0].slow);
  EXPECT_FALSE(breaks[0].exception);
  EXPECT_FALSE(breaks[0].error);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].to, CircuitState::open);
  EXPECT_FALSE(changes[0].last_exception) << "the fast failure did not trip the circuit";
}

TEST(SlowCalls, ASlowFailingProbeReopensWithItsFailure) {
  CircuitBreakerOptions o = slow_options(1s, 0.5, 1);
  o.half_open_probes = 2;
  o.success_threshold = 2;
  std::vector<CircuitStateChange> changes;
  o.on_state_changed = [&](const CircuitStateChange& c) { changes.push_back(c); };
  Harness h(o);
  EXPECT_TRUE(h.call(1s).has_value());
  ASSERT_EQ(h.breaker->state(), CircuitState::open);
  h.clock->advance(5s);
  EXPECT_TRUE(h.call(0s).has_value());  // one fast probe succeeds: 1 of 2 needed
  EXPECT_EQ(h.breaker->state(), CircuitState::half_open);
  EXPECT_FALSE(h.call(2s, true).has_value());  // the second probe fails, slowly
  EXPECT_EQ(h.breaker->state(), CircuitState::open);
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.back().to, CircuitState::open);
  ASSERT_TRUE(changes.back().last_exception);
  EXPECT_THROW(std::rethrow_exception(changes.back().last_exception), std::runtime_error);
}

TEST(SlowCalls, OptionsAreValidatedAndDescribed) {
  auto invalid = [](auto tweak) {
    CircuitBreakerOptions o;
    tweak(o);
    try {
      o.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(invalid([](auto& o) { o.slow_call_threshold = 0s; }).find("slow_call_threshold"),
            std::string::npos);
  EXPECT_NE(invalid([](auto& o) { o.slow_call_threshold = -1s; }).find("slow_call_threshold"),
            std::string::npos);
  EXPECT_NE(invalid([](auto& o) {
              o.slow_call_threshold = CircuitBreakerOptions::max_duration + 1ms;
            }).find("slow_call_threshold"),
            std::string::npos);
  EXPECT_NE(invalid([](auto& o) { o.slow_call_ratio = 0.0; }).find("slow_call_ratio"),
            std::string::npos);
  EXPECT_NE(invalid([](auto& o) { o.slow_call_ratio = 1.5; }).find("slow_call_ratio"),
            std::string::npos);
  EXPECT_EQ(invalid([](auto& o) { o.slow_call_threshold = 2s; }), "");
  EXPECT_EQ(CircuitBreakerOptions{}.slow_call_ratio, 1.0);
  EXPECT_FALSE(CircuitBreakerOptions{}.slow_call_threshold);

  CircuitBreakerOptions c = slow_options(2s, 0.5, 10);
  c.consecutive_failures = 5;
  EXPECT_EQ(CircuitBreaker(c).describe(),
            "CircuitBreaker(5 consecutive, break 5s, slow >=2s at 50% over 10s, min 10)");
  CircuitBreakerOptions r;
  r.failure_ratio = 0.5;
  r.minimum_throughput = 20;
  r.slow_call_threshold = 500ms;
  r.slow_call_ratio = 0.8;
  EXPECT_EQ(CircuitBreaker(r).describe(),
            "CircuitBreaker(50% over 30s, min 20, break 15s, slow >=500ms at 80%)");
  EXPECT_FALSE(CircuitBreaker(CircuitBreakerOptions{}).core().slow_calls());
  EXPECT_TRUE(CircuitBreaker(r).core().slow_calls());
}

}  // namespace
}  // namespace kevlar
