// CircuitBreakerCore's decisions around an opening sized by the caller (what the strategy does with
// a coroutine break_duration_generator): reserve_opening, open_reserved and cancel_opening, driven
// with a manual clock (no Shield, no Asio, no sleeping).
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/clock.hpp>

#include <boost/asio/awaitable.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using S = CircuitState;
using Core = CircuitBreakerCore;

/// `n` consecutive failures trip the circuit; the caller sizes each break.
CircuitBreakerOptions sized_by_caller(int n, std::vector<std::string>* log = nullptr) {
  CircuitBreakerOptions o;
  o.consecutive_failures = n;
  o.break_duration_generator = [](BreakEvent) -> boost::asio::awaitable<Clock::duration> {
    co_return 1s;  // never called: the test is the generator's caller
  };
  if (log != nullptr) {
    o.on_state_changed = [log](const CircuitStateChange& c) {
      log->push_back(std::string(to_string(c.from)) + "->" + to_string(c.to));
    };
  }
  return o;
}

/// Records a failure of a call admitted at the clock's time; true if it reserved an opening.
bool fail(Core& core, const ManualClock& clock, Core::Opening& opening) {
  const Core::Admission a = core.admit(clock.now());
  EXPECT_TRUE(a.admitted());
  return core.reserve_opening(clock.now(), a, Core::Failure{}, true, false, opening);
}

TEST(OpeningReservation, TheTrippingFailureReservesAndTheCircuitOpensOnlyWithTheDuration) {
  std::vector<std::string> log;
  ManualClock clock;
  Core core(sized_by_caller(2, &log));
  Core::Opening opening;
  EXPECT_FALSE(fail(core, clock, opening));  // 1 of 2: nothing to size
  ASSERT_TRUE(fail(core, clock, opening));
  EXPECT_EQ(opening.from, S::closed);
  EXPECT_EQ(opening.event.from, S::closed);
  EXPECT_EQ(opening.event.trip_number, 1);
  EXPECT_FALSE(opening.event.slow);
  EXPECT_TRUE(core.metrics(clock.now()).opening_pending);
  // While the duration is sized the circuit keeps its state; a further failure reserves nothing.
  EXPECT_EQ(core.state(), S::closed);
  Core::Opening second;
  EXPECT_FALSE(fail(core, clock, second));
  EXPECT_TRUE(log.empty());
  clock.advance(1s);
  core.open_reserved(opening, clock.now(), 7s);  // the break starts when the duration arrives
  EXPECT_EQ(core.state(), S::open);
  EXPECT_EQ(log, (std::vector<std::string>{"closed->open"}));
  EXPECT_FALSE(core.metrics(clock.now()).opening_pending);
  clock.advance(2s);
  const Core::Admission rejected = core.admit(clock.now());
  EXPECT_FALSE(rejected.admitted());
  ASSERT_TRUE(rejected.retry_after.has_value());
  EXPECT_EQ(*rejected.retry_after, 5s);
}

TEST(OpeningReservation, ACancelledOpeningLeavesTheCircuitAbleToTripAgain) {
  ManualClock clock;
  Core core(sized_by_caller(1));
  Core::Opening opening;
  ASSERT_TRUE(fail(core, clock, opening));
  core.cancel_opening(opening);
  EXPECT_EQ(core.state(), S::closed);
  EXPECT_FALSE(core.metrics(clock.now()).opening_pending);
  core.cancel_opening(opening);  // twice: a no-op
  Core::Opening again;
  ASSERT_TRUE(fail(core, clock, again));
  EXPECT_NE(again.token, opening.token);
  core.open_reserved(opening, clock.now(), 5s);  // the cancelled reservation opens nothing
  EXPECT_EQ(core.state(), S::closed);
  EXPECT_TRUE(core.metrics(clock.now()).opening_pending);
  core.open_reserved(again, clock.now(), 5s);
  EXPECT_EQ(core.state(), S::open);
}

TEST(OpeningReservation, AResetOrIsolateMakesTheReservationStale) {
  std::vector<std::string> log;
  ManualClock clock;
  Core core(sized_by_caller(1, &log));
  Core::Opening opening;
  ASSERT_TRUE(fail(core, clock, opening));
  core.isolate();
  core.open_reserved(opening, clock.now(), 5s);  // discarded
  EXPECT_EQ(core.state(), S::isolated);
  core.reset();
  ASSERT_TRUE(fail(core, clock, opening));
  core.reset();  // already closed: no event, but the reservation is stale all the same
  core.open_reserved(opening, clock.now(), 5s);
  EXPECT_EQ(core.state(), S::closed);
  EXPECT_EQ(log, (std::vector<std::string>{"closed->isolated", "isolated->closed"}));
}

TEST(OpeningReservation, AnInvalidDurationIsRefusedAndCancelsTheReservation) {
  ManualClock clock;
  Core core(sized_by_caller(1));
  for (const Clock::duration bad :
       {Clock::duration::zero(), Clock::duration(-1s), CircuitBreakerOptions::max_duration + 1ms}) {
    Core::Opening opening;
    ASSERT_TRUE(fail(core, clock, opening));
    try {
      core.open_reserved(opening, clock.now(), bad);
      ADD_FAILURE() << "accepted " << bad.count() << " ns";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("break_duration_generator"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(core.state(), S::closed);
    EXPECT_FALSE(core.metrics(clock.now()).opening_pending);
  }
}

TEST(OpeningReservation, AFailedProbeHoldsTheHalfOpenCircuitUntilItsDurationArrives) {
  ManualClock clock;
  CircuitBreakerOptions o = sized_by_caller(1);
  o.half_open_probes = 2;
  Core core(o);
  Core::Opening opening;
  ASSERT_TRUE(fail(core, clock, opening));
  core.open_reserved(opening, clock.now(), 10s);
  clock.advance(10s);
  const Core::Admission probe = core.admit(clock.now());
  ASSERT_TRUE(probe.probe());
  ASSERT_TRUE(core.reserve_opening(clock.now(), probe, Core::Failure{}, true, false, opening));
  EXPECT_EQ(opening.from, S::half_open);
  EXPECT_EQ(opening.event.trip_number, 2);
  // The second probe slot is free, but no probe is admitted while the opening is pending.
  const Core::Admission held = core.admit(clock.now());
  EXPECT_FALSE(held.admitted());
  EXPECT_EQ(held.state, S::half_open);
  EXPECT_FALSE(held.retry_after.has_value());
  // The sizing failed: the circuit stays half-open and the failed probe's slot is free again.
  core.cancel_opening(opening);
  EXPECT_EQ(core.state(), S::half_open);
  EXPECT_EQ(core.metrics(clock.now()).probes_in_flight, 0);
  const Core::Admission next = core.admit(clock.now());
  EXPECT_TRUE(next.probe());
  EXPECT_TRUE(core.admit(clock.now()).probe());  // both slots
}

TEST(OpeningReservation, WhileAFailedProbesBreakIsSizedOtherProbesEndWithoutClosingOrReserving) {
  ManualClock clock;
  CircuitBreakerOptions o = sized_by_caller(1);
  o.half_open_probes = 3;
  o.success_threshold = 2;
  Core core(o);
  Core::Opening opening;
  ASSERT_TRUE(fail(core, clock, opening));
  core.open_reserved(opening, clock.now(), 10s);
  clock.advance(10s);
  const Core::Admission failing = core.admit(clock.now());
  const Core::Admission succeeding = core.admit(clock.now());
  const Core::Admission failing_too = core.admit(clock.now());
  ASSERT_TRUE(failing.probe());
  ASSERT_TRUE(succeeding.probe());
  ASSERT_TRUE(failing_too.probe());
  ASSERT_TRUE(core.reserve_opening(clock.now(), failing, Core::Failure{}, true, false, opening));
  core.record_success(clock.now(), succeeding);
  EXPECT_EQ(core.state(), S::half_open);
  Core::Opening second;
  EXPECT_FALSE(core.reserve_opening(clock.now(), failing_too, Core::Failure{}, true, false, second))
      << "the first failure's opening is the one sized";
  EXPECT_EQ(core.metrics(clock.now()).probes_in_flight, 1) << "only the probe being sized";
  // The sizing fails: the circuit stays half-open, and the success made meanwhile did not count
  // towards the two needed to close it.
  core.cancel_opening(opening);
  EXPECT_EQ(core.metrics(clock.now()).probes_in_flight, 0);
  const Core::Admission first = core.admit(clock.now());
  ASSERT_TRUE(first.probe());
  core.record_success(clock.now(), first);
  EXPECT_EQ(core.state(), S::half_open) << "one success of two";
  const Core::Admission second_success = core.admit(clock.now());
  ASSERT_TRUE(second_success.probe());
  core.record_success(clock.now(), second_success);
  EXPECT_EQ(core.state(), S::closed);
}

TEST(OpeningReservation, ASlowSuccessThatTripsReservesWithoutAFailure) {
  ManualClock clock;
  CircuitBreakerOptions o = sized_by_caller(5);
  o.slow_call_threshold = 1s;
  o.slow_call_ratio = 0.5;
  o.minimum_throughput = 2;
  Core core(o);
  Core::Opening opening;
  const Core::Admission first = core.admit(clock.now());
  core.record_success(clock.now(), first);
  const Core::Admission slow = core.admit(clock.now());
  ASSERT_TRUE(core.reserve_opening(clock.now(), slow, Core::Failure{}, false, true, opening));
  EXPECT_TRUE(opening.event.slow);
  EXPECT_EQ(opening.event.exception, nullptr);
  EXPECT_FALSE(opening.event.error);
  core.open_reserved(opening, clock.now(), 3s);
  EXPECT_EQ(core.state(), S::open);
}

}  // namespace
}  // namespace kevlar
