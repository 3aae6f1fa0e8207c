// The circuit breaker's decisions through the strategy driver: one driver per call, all over one
// shield and one manual clock, so the calls share the circuit. The breaker's core (window,
// publication) has its own unit tests in core_test.cpp; the threaded races stay in
// concurrency_test.cpp.
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using testing::DriverAction;
using testing::Injection;
using testing::InjectionPoint;
using testing::StrategyDriver;
using Actions = std::vector<DriverAction>;
using S = CircuitState;

const boost::system::error_code down = make_error_code(boost::system::errc::connection_refused);

struct BreakerDecisions : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<CircuitBreaker> breaker;
  Shield shield;

  void make(int consecutive, Clock::duration break_duration, int probes = 1) {
    CircuitBreakerOptions o;
    o.consecutive_failures = consecutive;
    o.break_duration = break_duration;
    o.half_open_probes = probes;
    breaker = CircuitBreaker::create(o);
    shield = Shield{}.use(breaker);
  }
  /// A call that fails with `ec` at once.
  void failing_call(boost::system::error_code ec = down) {
    StrategyDriver<int> d(shield, clock);
    d.start();
    d.fail(0, ec);
  }
  void succeeding_call() {
    StrategyDriver<int> d(shield, clock);
    d.start();
    d.succeed(0, 1);
  }
};

TEST_F(BreakerDecisions, ConsecutiveFailuresOpenTheCircuitAndASuccessResetsTheCount) {
  make(3, 5s);
  failing_call();
  failing_call();
  succeeding_call();
  failing_call();
  failing_call();
  EXPECT_EQ(breaker->state(), S::closed);
  failing_call();
  EXPECT_EQ(breaker->state(), S::open);
}

TEST_F(BreakerDecisions, AnOpenCircuitRejectsWithoutStartingTheCallAndSaysWhenToComeBack) {
  make(1, 5s);
  failing_call();
  clock->advance(2s);
  StrategyDriver<int> d(shield, clock);
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(d.outcome().error(), errc::circuit_open);
  const auto rejections = d.events_of<Rejected>();
  ASSERT_EQ(rejections.size(), 1u);
  EXPECT_EQ(rejections[0].kind, RejectionKind::circuit_open);
  EXPECT_EQ(rejections[0].retry_after, std::optional<Clock::duration>(3s));
}

TEST_F(BreakerDecisions, AfterTheBreakOneProbeRunsAndItsOutcomeDecides) {
  make(1, 5s);
  failing_call();
  clock->advance(5s);
  StrategyDriver<int> probe(shield, clock);
  probe.start();
  EXPECT_EQ(probe.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_EQ(breaker->state(), S::half_open);
  StrategyDriver<int> second(shield, clock);
  second.start();
  EXPECT_EQ(second.outcome().error(), errc::circuit_open) << "the probe slot is taken";
  EXPECT_EQ(second.events_of<Rejected>().at(0).retry_after, std::nullopt);
  probe.succeed(0, 1);
  EXPECT_EQ(breaker->state(), S::closed);
  const auto transitions = probe.events_of<BreakerTransition>();
  ASSERT_FALSE(transitions.empty());
  EXPECT_EQ(transitions.back().from, S::half_open);
  EXPECT_EQ(transitions.back().to, S::closed);
}

TEST_F(BreakerDecisions, AFailedProbeOpensTheCircuitAgain) {
  make(1, 5s);
  failing_call();
  clock->advance(5s);
  failing_call();
  EXPECT_EQ(breaker->state(), S::open);
}

TEST_F(BreakerDecisions, ACancelledProbeFreesItsSlotAndCountsNothing) {
  make(1, 5s);
  failing_call();
  clock->advance(5s);
  {
    StrategyDriver<int> probe(shield, clock);
    probe.start();
    probe.cancel();
    EXPECT_EQ(probe.outcome().error(), asio::error::operation_aborted);
  }
  EXPECT_EQ(breaker->state(), S::half_open);
  StrategyDriver<int> next(shield, clock);
  next.start();
  EXPECT_EQ(next.take_actions(), Actions{DriverAction::started(0)}) << "the slot is free again";
}

TEST_F(BreakerDecisions, AnAbandonedProbeReleasesItsSlot) {
  make(1, 5s);
  failing_call();
  clock->advance(5s);
  {
    StrategyDriver<int> probe(shield, clock);
    probe.start();
    probe.drop(0);  // its executor went away with the probe pending
    EXPECT_FALSE(probe.delivered());
  }
  StrategyDriver<int> next(shield, clock);
  next.start();
  EXPECT_EQ(next.attempts(), 1u);
}

TEST_F(BreakerDecisions, AnErrorTheClauseDoesNotHandleCountsAsASuccess) {
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  breaker = CircuitBreaker::create(o);
  shield = Shield{}.when(Clause{}.error(down)).use(breaker);
  failing_call(asio::error::host_unreachable);
  EXPECT_EQ(breaker->state(), S::closed);
  failing_call(down);
  EXPECT_EQ(breaker->state(), S::open);
}

TEST_F(BreakerDecisions, ARetryOutsideAnOpenCircuitSeesTheRejectionAsItsFailure) {
  make(1, 5s);
  RetryOptions r;
  r.max_retries = 2;
  r.backoff = Backoff::constant(1s);
  shield = Shield{}.when(Clause{}.error(down).error(errc::circuit_open)).retry(r).use(breaker);
  StrategyDriver<int> d(shield, clock);
  d.start();
  d.fail(0, down);  // opens the circuit
  d.advance(1s);    // the retry is rejected by the open circuit
  d.advance(1s);
  EXPECT_EQ(d.attempts(), 1u);
  EXPECT_EQ(d.outcome().error(), errc::circuit_open);
  EXPECT_EQ(d.events_of<Rejected>().size(), 2u);
}

// A breaker that opens on the first failure, over a call whose steps fail or are cancelled: the call
// ends once, and the circuit state is what the counted outcome says.
TEST_F(BreakerDecisions, EveryStepSurvivesAnInjectedFailureOrCancellation) {
  std::shared_ptr<CircuitBreaker> last;
  const std::size_t runs = testing::inject_at_every_step<int>(
      [&] {
        CircuitBreakerOptions o;
        o.consecutive_failures = 1;
        o.break_duration = 5s;
        last = CircuitBreaker::create(o);
        return Shield{}.use(last);
      },
      [](StrategyDriver<int>& d) {
        d.start();
        d.succeed(0, 1);
      },
      [&](StrategyDriver<int>& d, const InjectionPoint& p) {
        switch (p.kind) {
          case Injection::none:
            EXPECT_EQ(last->state(), S::closed);
            break;
          case Injection::failure:
            EXPECT_TRUE(d.outcome().has_error());
            EXPECT_EQ(last->state(), S::open) << p.step;
            break;
          case Injection::cancellation:
            EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
            EXPECT_EQ(last->state(), S::closed) << p.step << ": a cancellation counts nothing";
            break;
        }
      });
  EXPECT_EQ(runs, 5u);
}

}  // namespace
}  // namespace kevlar
