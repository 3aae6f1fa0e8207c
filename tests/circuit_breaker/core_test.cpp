// CircuitBreakerCore driven directly with time values: no Shield, no Asio, no sleeping.
#include "breaker_test_support.hpp"

#include <kevlar/circuit_breaker.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using test::Driver;
using test::Transitions;
using S = CircuitState;

CircuitBreakerOptions consecutive(int n, Clock::duration brk = 30s) {
  CircuitBreakerOptions o;
  o.consecutive_failures = n;
  o.break_duration = brk;
  return o;
}

CircuitBreakerOptions ratio(double r, int min, Clock::duration window = 30s,
                            Clock::duration brk = 30s) {
  CircuitBreakerOptions o;
  o.failure_ratio = r;
  o.minimum_throughput = min;
  o.sampling_window = window;
  o.break_duration = brk;
  return o;
}

TEST(CircuitBreakerCore, DefaultsAreKevlars) {
  const CircuitBreakerOptions o;
  EXPECT_FALSE(o.consecutive_failures);
  EXPECT_FALSE(o.failure_ratio);
  EXPECT_EQ(o.minimum_throughput, 10);
  EXPECT_EQ(o.sampling_window, 30s);
  EXPECT_EQ(o.break_duration, 15s);
  EXPECT_EQ(o.half_open_probes, 1);
  EXPECT_EQ(o.success_threshold, 1);
  CircuitBreakerCore core(o);
  EXPECT_EQ(core.options().consecutive_failures, 5);
  EXPECT_FALSE(core.ratio_mode());
  EXPECT_EQ(core.state(), S::closed);
}

TEST(CircuitBreakerCore, DefaultModeOpensAfterFiveConsecutiveFailures) {
  Driver d(CircuitBreakerOptions{});
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
  EXPECT_EQ(d.core.admit(d.now).retry_after, 15s);
}

TEST(CircuitBreakerCore, InterleavedSuccessesResetTheConsecutiveCount) {
  Driver d(consecutive(3));
  for (int round = 0; round < 3; ++round) {
    EXPECT_TRUE(d.fail());
    EXPECT_TRUE(d.fail());
    EXPECT_TRUE(d.succeed());
    EXPECT_EQ(d.core.state(), S::closed) << "round " << round;
  }
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
  EXPECT_FALSE(d.fail()) << "an open circuit admits nothing";
}

TEST(CircuitBreakerCore, RejectionCarriesTheRemainingBreak) {
  Driver d(consecutive(1, 30s));
  EXPECT_TRUE(d.fail());
  auto a = d.core.admit(d.now);
  EXPECT_FALSE(a.admitted());
  EXPECT_EQ(a.state, S::open);
  EXPECT_EQ(a.retry_after, 30s);
  d.advance(10s);
  a = d.core.admit(d.now);
  EXPECT_FALSE(a.admitted());
  EXPECT_EQ(a.retry_after, 20s);
}

TEST(CircuitBreakerCore, StaysOpenUntilTheBreakFullyElapses) {
  Driver d(consecutive(1, 30s));
  EXPECT_TRUE(d.fail());
  d.advance(30s - 1ms);
  auto a = d.core.admit(d.now);
  EXPECT_FALSE(a.admitted());
  EXPECT_EQ(a.retry_after, 1ms);
  EXPECT_EQ(d.core.state(), S::open);
  d.advance(1ms);
  a = d.core.admit(d.now);
  EXPECT_TRUE(a.probe());
  EXPECT_EQ(d.core.state(), S::half_open);
}

TEST(CircuitBreakerCore, OpenReadsOpenUntilTheFirstCallAfterTheBreak) {
  Driver d(consecutive(1, 5s));
  EXPECT_TRUE(d.fail());
  d.advance(1h);
  EXPECT_EQ(d.core.state(), S::open) << "no timer moves the state";
  EXPECT_TRUE(d.core.admit(d.now).probe());
  EXPECT_EQ(d.core.state(), S::half_open);
}

TEST(CircuitBreakerCore, HalfOpenAdmitsOneProbeAndRejectsOthersWithoutRetryAfter) {
  Driver d(consecutive(1, 5s));
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  const auto probe = d.core.admit(d.now);
  ASSERT_TRUE(probe.probe());
  for (int i = 0; i < 3; ++i) {
    const auto a = d.core.admit(d.now);
    EXPECT_FALSE(a.admitted());
    EXPECT_EQ(a.state, S::half_open);
    EXPECT_FALSE(a.retry_after);
  }
  d.core.record_success(d.now, probe);
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, ProbeSuccessClosesAndClearsCounters) {
  Driver d(consecutive(2, 5s));
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  EXPECT_TRUE(d.succeed());
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_EQ(d.core.metrics(d.now).consecutive_failures, 0);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed) << "the failures before the trip were forgotten";
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
}

TEST(CircuitBreakerCore, ProbeFailureReopensForAFullBreak) {
  Driver d(consecutive(1, 5s));
  EXPECT_TRUE(d.fail());
  d.advance(7s);
  EXPECT_TRUE(d.fail());  // the probe
  EXPECT_EQ(d.core.state(), S::open);
  const auto a = d.core.admit(d.now);
  EXPECT_FALSE(a.admitted());
  EXPECT_EQ(a.retry_after, 5s);
}

TEST(CircuitBreakerCore, ReleasedProbeFreesTheSlot) {
  Driver d(consecutive(1, 5s));
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  const auto probe = d.core.admit(d.now);
  ASSERT_TRUE(probe.probe());
  d.core.release(probe);
  EXPECT_EQ(d.core.state(), S::half_open);
  EXPECT_EQ(d.core.metrics(d.now).probes_in_flight, 0);
  const auto next = d.core.admit(d.now);
  ASSERT_TRUE(next.probe()) << "the next call is the probe";
  d.core.record_success(d.now, next);
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, OutcomesOfCallsAdmittedBeforeTheTripChangeNothingWhileHalfOpen) {
  Driver d(consecutive(1, 5s));
  const auto early = d.core.admit(d.now);  // admitted while closed, completes late
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  const auto probe = d.core.admit(d.now);
  ASSERT_TRUE(probe.probe());
  d.core.record_success(d.now, early);
  d.core.record_failure(d.now, early);
  EXPECT_EQ(d.core.state(), S::half_open);
  d.core.record_success(d.now, probe);
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, SeveralProbesAndASuccessThreshold) {
  CircuitBreakerOptions o = consecutive(1, 5s);
  o.half_open_probes = 3;
  o.success_threshold = 4;
  Driver d(o);
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  std::vector<CircuitBreakerCore::Admission> probes;
  for (int i = 0; i < 3; ++i) {
    probes.push_back(d.core.admit(d.now));
    EXPECT_TRUE(probes.back().probe());
  }
  EXPECT_FALSE(d.core.admit(d.now).admitted()) << "three probes at once at most";
  d.core.record_success(d.now, probes[0]);
  d.core.record_success(d.now, probes[1]);
  d.core.record_success(d.now, probes[2]);
  EXPECT_EQ(d.core.state(), S::half_open) << "three successes of four";
  const auto fourth = d.core.admit(d.now);
  ASSERT_TRUE(fourth.probe());
  d.core.record_success(d.now, fourth);
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, AnyFailingProbeReopens) {
  CircuitBreakerOptions o = consecutive(1, 5s);
  o.half_open_probes = 2;
  o.success_threshold = 2;
  Driver d(o);
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  const auto p1 = d.core.admit(d.now);
  const auto p2 = d.core.admit(d.now);
  ASSERT_TRUE(p1.probe());
  ASSERT_TRUE(p2.probe());
  d.core.record_success(d.now, p1);
  d.core.record_failure(d.now, p2);
  EXPECT_EQ(d.core.state(), S::open);
  EXPECT_EQ(d.core.admit(d.now).retry_after, 5s);
}

TEST(CircuitBreakerCore, RatioModeOpensOnTheFailureThatReachesMinimumThroughput) {
  Driver d(ratio(1.0, 4));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
}

TEST(CircuitBreakerCore, RatioModeForgetsFailuresAFullWindowOld) {
  Driver d(ratio(1.0, 4, 30s));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(d.fail());
  d.advance(30s);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed);
  const auto m = d.core.metrics(d.now);
  EXPECT_EQ(m.window_total, 1u);
  EXPECT_EQ(m.window_failures, 1u);
}

TEST(CircuitBreakerCore, RatioModeKeepsFailuresUntilTheirBucketIsRecycled) {
  // Buckets of 3 s: failures at t0 (bucket b) still count at t0 + 29.9 s (bucket b + 9).
  Driver d(ratio(1.0, 4, 30s));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(d.fail());
  d.advance(29s + 900ms);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
}

TEST(CircuitBreakerCore, RatioModeElevenUnitWindow) {
  // An 11 s window (buckets of 1.1 s): a failure 10 s old still counts, 11 s old does not.
  Driver d(ratio(1.0, 2, 11s));
  EXPECT_TRUE(d.fail());
  d.advance(10s);
  EXPECT_EQ(d.core.metrics(d.now).window_failures, 1u);
  d.advance(1s);
  EXPECT_EQ(d.core.metrics(d.now).window_failures, 0u);
}

TEST(CircuitBreakerCore, RatioModeSuccessesDiluteTheRatio) {
  Driver d(ratio(0.75, 4));
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.succeed());
  EXPECT_TRUE(d.succeed());
  EXPECT_EQ(d.core.state(), S::closed) << "2/4 = 50% < 75%";
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed) << "5/7 < 75%";
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open) << "6/8 = 75%";
}

TEST(CircuitBreakerCore, RatioModeSuccessesNeverTrip) {
  Driver d(ratio(0.5, 4));
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.succeed());  // total 4, 3/4 >= 50%, but only a failure judges
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
}

TEST(CircuitBreakerCore, RatioModeCountsSuccessesAcrossManyBuckets) {
  Driver d(ratio(0.5, 10, 10s));
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(d.succeed());
    d.advance(250ms);
  }
  // 5 s elapsed: all 20 successes are within the window.
  EXPECT_EQ(d.core.metrics(d.now).window_total, 20u);
  d.advance(5s);  // the first ones age out bucket by bucket
  EXPECT_LT(d.core.metrics(d.now).window_total, 20u);
  d.advance(10s);
  EXPECT_EQ(d.core.metrics(d.now).window_total, 0u);
}

TEST(CircuitBreakerCore, HalfOpenToClosedClearsTheWindow) {
  Driver d(ratio(0.5, 2, 30s, 5s));
  EXPECT_TRUE(d.fail());
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
  d.advance(5s);
  EXPECT_TRUE(d.succeed());
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_EQ(d.core.metrics(d.now).window_total, 0u);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed) << "one failure, below minimum throughput";
}

TEST(CircuitBreakerCore, IsolateRejectsWithoutRetryAfterUntilReset) {
  Transitions log;
  CircuitBreakerOptions o = consecutive(2);
  o.on_state_changed = log.observer();
  Driver d(o);
  d.core.isolate();
  EXPECT_EQ(d.core.state(), S::isolated);
  const auto a = d.core.admit(d.now);
  EXPECT_FALSE(a.admitted());
  EXPECT_EQ(a.state, S::isolated);
  EXPECT_FALSE(a.retry_after);
  d.advance(24h);
  EXPECT_FALSE(d.core.admit(d.now).admitted()) << "isolation never expires";
  d.core.isolate();  // already isolated: no event
  d.core.reset();
  d.core.reset();  // already closed: no event
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_TRUE(d.succeed());
  EXPECT_EQ(log.pairs(),
            (std::vector<std::pair<S, S>>{{S::closed, S::isolated}, {S::isolated, S::closed}}));
}

TEST(CircuitBreakerCore, ResetClosesAndClearsHistory) {
  Driver d(consecutive(2, 5s));
  EXPECT_TRUE(d.fail());
  d.core.reset();
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::closed) << "the failure before the reset was forgotten";
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
  d.core.reset();
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_TRUE(d.succeed());
}

TEST(CircuitBreakerCore, IsolateOrResetMakesInFlightProbesStale) {
  Driver d(consecutive(1, 5s));
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  const auto probe = d.core.admit(d.now);
  ASSERT_TRUE(probe.probe());
  d.core.isolate();
  d.core.record_success(d.now, probe);
  EXPECT_EQ(d.core.state(), S::isolated) << "a stale probe closes nothing";
  d.core.reset();
  d.core.record_failure(d.now, probe);
  EXPECT_EQ(d.core.state(), S::closed) << "a stale probe opens nothing";
}

TEST(CircuitBreakerCore, ProbesOfAnEarlierHalfOpenPeriodChangeNothingInTheNextOne) {
  CircuitBreakerOptions o = consecutive(1, 5s);
  o.half_open_probes = 4;
  Driver d(o);
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  std::vector<CircuitBreakerCore::Admission> old;
  for (int i = 0; i < 4; ++i) {
    old.push_back(d.core.admit(d.now));
    ASSERT_TRUE(old.back().probe());
  }
  d.core.record_failure(d.now, old[3]);  // re-opens: the other three probes are stale
  ASSERT_EQ(d.core.state(), S::open);
  d.advance(5s);
  const auto fresh = d.core.admit(d.now);
  ASSERT_TRUE(fresh.probe());
  d.core.record_success(d.now, old[0]);
  EXPECT_EQ(d.core.state(), S::half_open) << "a stale probe's success closes nothing";
  d.core.record_failure(d.now, old[1]);
  EXPECT_EQ(d.core.state(), S::half_open) << "a stale probe's failure opens nothing";
  d.core.release(old[2]);
  EXPECT_EQ(d.core.metrics(d.now).probes_in_flight, 1) << "the fresh probe keeps its slot";
  d.core.record_success(d.now, fresh);
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, TransitionStreamForTripProbeClose) {
  Transitions log;
  CircuitBreakerOptions o = consecutive(1, 5s);
  o.on_state_changed = log.observer();
  Driver d(o);
  const auto boom = std::make_exception_ptr(std::runtime_error("boom"));
  const auto a = d.core.admit(d.now);
  d.core.record_failure(d.now, a, {boom, {}, nullptr});
  d.advance(5s);
  EXPECT_TRUE(d.succeed());
  EXPECT_EQ(log.pairs(),
            (std::vector<std::pair<S, S>>{
                {S::closed, S::open}, {S::open, S::half_open}, {S::half_open, S::closed}}));
  EXPECT_EQ(log.changes().front().last_exception, boom) << "the event carries the cause";
}

TEST(CircuitBreakerCore, ThrowingObserverDoesNotStopLaterOnesNorTheStateChange) {
  std::vector<std::string> calls;
  CircuitBreakerOptions o = consecutive(1);
  const auto oops = std::make_exception_ptr(std::logic_error("observer"));
  o.on_state_changed = [&](const CircuitStateChange&) {
    calls.push_back("first");
    std::rethrow_exception(oops);
  };
  CircuitBreakerCore core(o);
  core.subscribe([&](const CircuitStateChange&) { calls.push_back("second"); });
  const Clock::time_point now{1h};
  const auto a = core.admit(now);
  try {
    core.record_failure(now, a);
    FAIL() << "the observer's exception must reach the triggering call";
  } catch (const std::logic_error&) {
    EXPECT_EQ(std::current_exception(), oops) << "rethrown unchanged";
  }
  EXPECT_EQ(calls, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(core.state(), S::open);
}

TEST(CircuitBreakerCore, TwoThrowingObserversAggregateInOrder) {
  CircuitBreakerOptions o = consecutive(1);
  o.on_state_changed = [](const CircuitStateChange&) { throw std::runtime_error("one"); };
  CircuitBreakerCore core(o);
  core.subscribe([](const CircuitStateChange&) { throw std::logic_error("two"); });
  try {
    core.isolate();
    FAIL() << "isolate() must report the observers' exceptions";
  } catch (const CircuitObserverErrors& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_THROW(std::rethrow_exception(e.errors()[0]), std::runtime_error);
    EXPECT_THROW(std::rethrow_exception(e.errors()[1]), std::logic_error);
  }
  EXPECT_EQ(core.state(), S::isolated);
}

TEST(CircuitBreakerCore, ThrowingHalfOpenObserverReleasesTheProbe) {
  CircuitBreakerOptions o = consecutive(1, 5s);
  bool fail_half_open = true;
  o.on_state_changed = [&](const CircuitStateChange& c) {
    if (c.to == S::half_open && fail_half_open) throw std::runtime_error("observer");
  };
  Driver d(o);
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  EXPECT_THROW((void)d.core.admit(d.now), std::runtime_error);
  EXPECT_EQ(d.core.state(), S::half_open);
  EXPECT_EQ(d.core.metrics(d.now).probes_in_flight, 0);
  fail_half_open = false;
  EXPECT_TRUE(d.succeed()) << "the slot was freed: the next call probes";
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, ReentrantChangesAreQueuedBehindTheCurrentOne) {
  std::vector<std::string> log;
  int depth = 0;
  int max_depth = 0;
  CircuitBreakerCore* self = nullptr;
  CircuitBreakerOptions o = consecutive(1);
  o.on_state_changed = [&](const CircuitStateChange& c) {
    max_depth = std::max(max_depth, ++depth);
    log.push_back(std::string(to_string(c.from)) + "->" + to_string(c.to));
    if (c.to == S::open) {
      self->reset();  // queued: delivered after this observer returns
      log.push_back("reset returned");
      self->isolate();
      log.push_back("isolate returned");
    }
    --depth;
  };
  CircuitBreakerCore core(o);
  self = &core;
  const Clock::time_point now{1h};
  core.record_failure(now, core.admit(now));
  EXPECT_EQ(log, (std::vector<std::string>{"closed->open", "reset returned", "isolate returned",
                                           "open->closed", "closed->isolated"}));
  EXPECT_EQ(max_depth, 1);
  EXPECT_EQ(core.state(), S::isolated);
}

TEST(CircuitBreakerCore, ExceptionsOfReentrantChangesGoToTheParentCaller) {
  CircuitBreakerCore* self = nullptr;
  CircuitBreakerOptions o = consecutive(1);
  o.on_state_changed = [&](const CircuitStateChange& c) {
    if (c.to == S::open) self->reset();
    if (c.to == S::closed) throw std::runtime_error("from the reentrant change");
  };
  CircuitBreakerCore core(o);
  self = &core;
  const Clock::time_point now{1h};
  EXPECT_THROW(core.record_failure(now, core.admit(now)), std::runtime_error);
  EXPECT_EQ(core.state(), S::closed);
}

TEST(CircuitBreakerCore, GeneratorSizesEachTripOnce) {
  std::vector<BreakEvent> events;
  CircuitBreakerOptions o = consecutive(1);
  o.break_duration_generator = [&](const BreakEvent& e) {
    events.push_back(e);
    return std::chrono::seconds(10 * e.trip_number);
  };
  Driver d(o);
  EXPECT_TRUE(d.fail());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].from, S::closed);
  EXPECT_EQ(events[0].trip_number, 1);
  EXPECT_EQ(d.core.admit(d.now).retry_after, 10s);
  d.advance(10s);
  EXPECT_TRUE(d.fail());  // the probe fails
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].from, S::half_open);
  EXPECT_EQ(events[1].trip_number, 2);
  EXPECT_EQ(d.core.admit(d.now).retry_after, 20s);
  d.advance(20s);
  EXPECT_TRUE(d.succeed());
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(events.back().trip_number, 1) << "closing resets the trip count";
}

TEST(CircuitBreakerCore, GeneratorFailurePropagatesAndTheCircuitCanTripAgain) {
  int calls = 0;
  CircuitBreakerOptions o = consecutive(2);
  o.break_duration_generator = [&](const BreakEvent&) -> Clock::duration {
    if (++calls == 1) throw std::runtime_error("generator");
    return 7s;
  };
  Driver d(o);
  EXPECT_TRUE(d.fail());
  const auto a = d.core.admit(d.now);
  EXPECT_THROW(d.core.record_failure(d.now, a), std::runtime_error);
  EXPECT_EQ(d.core.state(), S::closed);
  EXPECT_FALSE(d.core.metrics(d.now).opening_pending);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(d.core.state(), S::open);
  EXPECT_EQ(d.core.admit(d.now).retry_after, 7s);
}

TEST(CircuitBreakerCore, GeneratorFailureOfAProbeFreesItsSlot) {
  int calls = 0;
  CircuitBreakerOptions o = consecutive(1, 5s);
  o.break_duration_generator = [&](const BreakEvent&) -> Clock::duration {
    if (++calls == 2) throw std::runtime_error("generator");
    return 5s;
  };
  Driver d(o);
  EXPECT_TRUE(d.fail());
  d.advance(5s);
  const auto probe = d.core.admit(d.now);
  ASSERT_TRUE(probe.probe());
  EXPECT_THROW(d.core.record_failure(d.now, probe), std::runtime_error);
  EXPECT_EQ(d.core.state(), S::half_open);
  EXPECT_EQ(d.core.metrics(d.now).probes_in_flight, 0);
  EXPECT_TRUE(d.succeed());
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, GeneratorReturningNonPositiveIsRefused) {
  CircuitBreakerOptions o = consecutive(1);
  o.break_duration_generator = [](const BreakEvent&) { return Clock::duration::zero(); };
  Driver d(o);
  const auto a = d.core.admit(d.now);
  try {
    d.core.record_failure(d.now, a);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("break_duration_generator"), std::string::npos);
  }
  EXPECT_EQ(d.core.state(), S::closed);
}

TEST(CircuitBreakerCore, GeneratorRunsOutsideTheLockAndAStaleResultIsDiscarded) {
  CircuitBreakerCore* self = nullptr;
  CircuitBreakerOptions o = consecutive(1);
  int calls = 0;
  o.break_duration_generator = [&](const BreakEvent&) {
    ++calls;
    self->reset();  // would deadlock if the generator ran under the breaker's lock
    return std::chrono::seconds(30);
  };
  CircuitBreakerCore core(o);
  self = &core;
  const Clock::time_point now{1h};
  core.record_failure(now, core.admit(now));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(core.state(), S::closed) << "the opening was made stale by reset()";
}

TEST(CircuitBreakerCore, OneGeneratorCallPerTripWhileAnOpeningIsPending) {
  CircuitBreakerCore* self = nullptr;
  const Clock::time_point now{1h};
  CircuitBreakerOptions o = consecutive(1);
  int calls = 0;
  o.break_duration_generator = [&](const BreakEvent&) {
    ++calls;
    // Other failures while this opening is pending do not size a second one.
    for (int i = 0; i < 3; ++i) self->record_failure(now, self->admit(now));
    EXPECT_TRUE(self->metrics(now).opening_pending);
    return std::chrono::seconds(30);
  };
  CircuitBreakerCore core(o);
  self = &core;
  core.record_failure(now, core.admit(now));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(core.state(), S::open);
}

TEST(CircuitBreakerCore, InvalidOptionsAreRefusedNamingTheOption) {
  const auto message_of = [](const CircuitBreakerOptions& o) -> std::string {
    try {
      CircuitBreakerCore core(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  CircuitBreakerOptions o;
  o.consecutive_failures = 0;
  EXPECT_EQ(message_of(o), "kevlar::CircuitBreakerOptions::consecutive_failures must be positive");
  o = {};
  o.consecutive_failures = -3;
  EXPECT_NE(message_of(o).find("consecutive_failures"), std::string::npos);
  for (double bad : {0.0, -0.1, 1.01, std::nan("")}) {
    o = {};
    o.failure_ratio = bad;
    EXPECT_EQ(message_of(o), "kevlar::CircuitBreakerOptions::failure_ratio must be in (0, 1]")
        << bad;
  }
  o = {};
  o.failure_ratio = 1.0;
  EXPECT_EQ(message_of(o), "accepted");
  o.consecutive_failures = 3;
  EXPECT_NE(message_of(o).find("either consecutive_failures or failure_ratio, not both"),
            std::string::npos);
  o = {};
  o.minimum_throughput = 0;
  EXPECT_NE(message_of(o).find("minimum_throughput"), std::string::npos);
  o = {};
  o.sampling_window = 0s;
  EXPECT_NE(message_of(o).find("sampling_window"), std::string::npos);
  o = {};
  o.sampling_window = CircuitBreakerOptions::max_duration + 1ms;
  EXPECT_NE(message_of(o).find("sampling_window"), std::string::npos);
  o = {};
  o.break_duration = -1s;
  EXPECT_NE(message_of(o).find("break_duration"), std::string::npos);
  o = {};
  o.break_duration = CircuitBreakerOptions::max_duration;
  EXPECT_EQ(message_of(o), "accepted");
  o = {};
  o.half_open_probes = 0;
  EXPECT_NE(message_of(o).find("half_open_probes"), std::string::npos);
  o = {};
  o.success_threshold = 0;
  EXPECT_NE(message_of(o).find("success_threshold"), std::string::npos);
}

TEST(CircuitBreakerCore, StateNames) {
  EXPECT_STREQ(to_string(S::closed), "closed");
  EXPECT_STREQ(to_string(S::open), "open");
  EXPECT_STREQ(to_string(S::half_open), "half_open");
  EXPECT_STREQ(to_string(S::isolated), "isolated");
}

TEST(CircuitBreakerCore, AStateOutsideTheEnumerationIsNamedUnknown) {
  EXPECT_STREQ(to_string(static_cast<S>(9)), "unknown");
}

}  // namespace
}  // namespace kevlar
