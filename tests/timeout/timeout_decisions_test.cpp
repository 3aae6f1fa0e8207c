// The timeout's decisions on the strategy driver: when its deadline cancels the attempt, which of
// nested timeouts reports, how it composes with a retry inside or outside it, and what a late
// success or the caller's cancellation make of it. Expiries that abort real sockets and timers, and
// the deadline queue under threads and strands, stay in timeout_test.cpp.
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>
#include <kevlar/timeout.hpp>

#include <test_options.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
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
using Durations = std::vector<Clock::duration>;
using test::constant_retries;

TimeoutOptions counted(Clock::duration budget, int& fired) {
  TimeoutOptions o;
  o.timeout = budget;
  o.on_timeout = [&fired](const TimeoutEvent&) { ++fired; };
  return o;
}

TEST(TimeoutDecisions, TheDeadlineCancelsTheAttemptAndReportsTimeout) {
  int fired = 0;
  StrategyDriver<int> d{Shield{}.timeout(counted(2s, fired))};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_EQ(d.timers(), Durations{2s});
  d.advance(1999ms);
  EXPECT_TRUE(d.take_actions().empty());
  d.advance(1ms);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::cancelled(0), DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().error(), errc::timeout);
  EXPECT_EQ(fired, 1);
  const auto events = d.events_of<TimeoutFired>();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].timeout, 2s);
}

TEST(TimeoutDecisions, ASuccessInTimePassesAndItsDeadlineNeverFiresLater) {
  int fired = 0;
  StrategyDriver<int> d{Shield{}.timeout(counted(1s, fired))};
  d.start();
  d.advance(500ms);
  d.succeed(0, 4);
  d.advance(10s);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(0), DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().value(), 4);
  EXPECT_EQ(fired, 0);
}

TEST(TimeoutDecisions, CallerCancellationWinsAndIsNotATimeout) {
  int fired = 0;
  testing::StrategyDriverOptions options;
  options.abort_on_cancel = false;
  StrategyDriver<int> d{Shield{}.timeout(counted(1s, fired)), options};
  d.start();
  d.cancel();
  d.advance(2s);  // the deadline passes too before the attempt completes
  d.fail(0, asio::error::operation_aborted);
  EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
  EXPECT_EQ(fired, 0);
  EXPECT_TRUE(d.events_of<TimeoutFired>().empty());
}

TEST(TimeoutDecisions, EqualNestedTimeoutsReportTheOutermost) {
  int outer = 0;
  int inner = 0;
  StrategyDriver<int> d{Shield{}.timeout(counted(1s, outer)).timeout(counted(1s, inner))};
  d.start();
  d.advance(1s);
  EXPECT_EQ(d.outcome().error(), errc::timeout);
  EXPECT_EQ(outer, 1);
  EXPECT_EQ(inner, 0);
}

TEST(TimeoutDecisions, AShorterInnerTimeoutReportsAndTheOuterPassesItThrough) {
  int outer = 0;
  int inner = 0;
  StrategyDriver<int> d{Shield{}.timeout(counted(10s, outer)).timeout(counted(1s, inner))};
  d.start();
  d.advance(1s);
  EXPECT_EQ(d.outcome().error(), errc::timeout);
  EXPECT_EQ(inner, 1);
  EXPECT_EQ(outer, 0);
}

TEST(TimeoutDecisions, InsideARetryEachAttemptGetsAFreshBudget) {
  StrategyDriver<int> d{Shield{}
                            .when(Clause{}.error(errc::timeout))
                            .retry(constant_retries(2, Clock::duration::zero()))
                            .timeout(1s)};
  d.start();
  for (std::uint32_t attempt = 0; attempt < 3; ++attempt) {
    EXPECT_EQ(d.attempts(), attempt + 1);
    d.advance(999ms);
    EXPECT_EQ(d.attempts(), attempt + 1) << "an attempt was cut short by an earlier budget";
    d.advance(1ms);
  }
  EXPECT_EQ(d.attempts(), 3u);
  EXPECT_EQ(d.outcome().error(), errc::timeout);
  EXPECT_EQ(d.events_of<TimeoutFired>().size(), 3u);
}

TEST(TimeoutDecisions, OutsideARetryItCapsTheWholeLoopIncludingBackoff) {
  StrategyDriver<int> d{Shield{}.timeout(5s).retry(constant_retries(100, 2s))};
  d.start();
  for (int step = 0; step < 10 && !d.delivered(); ++step) {
    for (std::uint32_t i : d.running()) d.fail(i, asio::error::connection_refused);
    d.advance(1s);
  }
  // At 0s, 2s, 4s; the backoff towards 6s would end past the 5s deadline: the retry does not
  // start it, and the last real failure surfaces instead of errc::timeout.
  EXPECT_EQ(d.outcome().error(), asio::error::connection_refused);
  EXPECT_EQ(d.attempts(), 3u);
}

TEST(TimeoutDecisions, NoAttemptStartsOnceATotalTimeoutsDeadlineHasPassed) {
  StrategyDriver<int> d{Shield{}.timeout(3s).retry(constant_retries(10, 1s))};
  d.start();
  for (int step = 0; step < 5 && !d.delivered(); ++step) {
    for (std::uint32_t i : d.running()) d.fail(i, asio::error::connection_refused);
    d.advance(1s);
  }
  EXPECT_EQ(d.outcome().error(), asio::error::connection_refused);
  EXPECT_EQ(d.attempts(), 3u);  // at t = 0, 1 and 2: the backoff ending at 3 s is not started
}

TEST(TimeoutDecisions, ALateSuccessPassesThrough) {
  testing::StrategyDriverOptions options;
  options.abort_on_cancel = false;  // an operation that ignores cancellation
  StrategyDriver<int> d{Shield{}.timeout(1s), options};
  d.start();
  d.advance(1s);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(0), DriverAction::cancelled(0)}));
  d.succeed(0, 8);
  EXPECT_EQ(d.outcome().value(), 8);
}

TEST(TimeoutDecisions, TheGeneratorChoosesEachExecutionsBudget) {
  TimeoutOptions o;
  o.timeout_generator = [](Context&) { return 250ms; };
  StrategyDriver<int> d{Shield{}.timeout(o)};
  d.start();
  EXPECT_EQ(d.timers(), Durations{250ms});
  d.advance(250ms);
  EXPECT_EQ(d.outcome().error(), errc::timeout);
}

// Timeout(1s) -> Retry(2, 300 ms): a failure or a cancellation injected at any step still ends the
// execution exactly once; injected failures run the retries out (or meet the deadline first).
TEST(TimeoutDecisions, EveryStepSurvivesAnInjectedFailureOrCancellation) {
  const std::size_t runs = testing::inject_at_every_step<int>(
      [] { return Shield{}.timeout(1s).retry(constant_retries(2, 300ms)); },
      [](StrategyDriver<int>& d) {
        d.start();
        d.fail(0, asio::error::connection_reset);
        d.advance(300ms);
        d.succeed(1, 2);
      },
      [](StrategyDriver<int>& d, const InjectionPoint& p) {
        switch (p.kind) {
          case Injection::none:
            EXPECT_EQ(d.outcome().value(), 2);
            break;
          case Injection::failure:
            EXPECT_EQ(d.outcome().error(), make_error_code(boost::system::errc::io_error))
                << p.step;
            EXPECT_EQ(d.attempts(), 3u) << p.step;  // 0, 300 and 600 ms: within the budget
            break;
          case Injection::cancellation:
            EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted) << p.step;
            EXPECT_TRUE(d.events_of<TimeoutFired>().empty()) << p.step;
            break;
        }
      });
  EXPECT_EQ(runs, 9u);
}

}  // namespace
}  // namespace kevlar
