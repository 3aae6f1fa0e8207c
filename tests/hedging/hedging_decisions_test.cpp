// The hedge's decisions as boundary actions on the strategy driver: which attempt starts when,
// which are cancelled when one wins, and what an injected failure or cancellation at any step
// makes of a hedged execution. hedging_test.cpp runs the same strategy on a real io_context.
#include <kevlar/hedging.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>

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

const boost::system::error_code down = make_error_code(boost::system::errc::connection_refused);

TEST(HedgingDecisions, AWinnerBeforeTheDelayIsTheOnlyAttempt) {
  StrategyDriver<int> d{Shield{}.hedge(2, 10s)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_EQ(d.timers(), Durations{10s});
  d.succeed(0, 1);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_TRUE(d.events_of<HedgeLaunched>().empty());
}

TEST(HedgingDecisions, TheStaggerLaunchesTheNextAttemptAndTheWinnerCancelsTheRest) {
  StrategyDriver<int> d{Shield{}.hedge(3, 1s)};
  d.start();
  d.advance(1s);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(0), DriverAction::started(1)}));
  EXPECT_EQ(d.attempt(1).context_attempt, 2u);
  EXPECT_EQ(d.timers(), Durations{1s}) << "a fresh full delay after the launch";
  d.succeed(1, 20);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::cancelled(0), DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().value(), 20);
  EXPECT_TRUE(d.running().empty()) << "the loser was aborted through its own slot";
  d.advance(5s);
  EXPECT_EQ(d.attempts(), 2u) << "nothing launches after the winner";
  const auto hedges = d.events_of<HedgeLaunched>();
  ASSERT_EQ(hedges.size(), 1u);
  EXPECT_EQ(hedges[0].attempt, 2u);
}

TEST(HedgingDecisions, AZeroDelayLaunchesEveryAttemptAtOnce) {
  StrategyDriver<int> d{Shield{}.hedge(3, 0s)};
  d.start();
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(0), DriverAction::started(1),
                                       DriverAction::started(2)}));
  d.succeed(2, 3);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::cancelled(0), DriverAction::cancelled(1),
                                       DriverAction::delivered()}));
}

TEST(HedgingDecisions, AHandledFailureLaunchesTheNextAttemptAtOnce) {
  StrategyDriver<int> d{Shield{}.hedge(3, 10s)};
  d.start();
  d.fail(0, down);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(0), DriverAction::started(1)}));
  d.fail(1, down);
  d.fail(2, down);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(2), DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().error(), down) << "every attempt failed: the last outcome";
}

TEST(HedgingDecisions, AnUnhandledFailureWinsAtOnce) {
  StrategyDriver<int> d{Shield{}.when(Clause{}.error(down)).hedge(2, 0s)};
  d.start();
  (void)d.take_actions();
  d.fail(1, asio::error::host_unreachable);
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::cancelled(0), DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().error(), asio::error::host_unreachable);
}

TEST(HedgingDecisions, AnInfiniteDelayLaunchesOnlyAfterAHandledFailure) {
  HedgeOptions o;
  o.max_attempts = 2;
  o.delay = HedgeOptions::infinite_delay;
  StrategyDriver<int> d{Shield{}.hedge(o)};
  d.start();
  d.advance(24h);
  EXPECT_EQ(d.attempts(), 1u);
  EXPECT_TRUE(d.timers().empty());
  d.fail(0, down);
  EXPECT_EQ(d.attempts(), 2u);
}

TEST(HedgingDecisions, CallerCancellationCancelsEveryAttemptAndLaunchesNoMore) {
  StrategyDriver<int> d{Shield{}.hedge(3, 1s)};
  d.start();
  d.advance(1s);
  (void)d.take_actions();
  d.cancel();
  const Actions a = d.take_actions();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a.back(), DriverAction::delivered());
  EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
  EXPECT_EQ(d.attempt(0).cancellations.size(), 1u);
  EXPECT_EQ(d.attempt(1).cancellations.size(), 1u);
  d.advance(10s);
  EXPECT_EQ(d.attempts(), 2u);
}

// A retry outside a hedge runs the whole hedge again (docs/strategies/hedging.md):
// retry(1) outside hedge(3, infinite) over an always-failing operation runs the hedge's three
// attempts twice, each launched by the failure before it.
TEST(HedgingDecisions, RetryOutsideAHedgeRunsTheHedgeAgainAfterItsLastFailure) {
  RetryOptions retry;
  retry.max_retries = 1;
  retry.backoff = Backoff::none();
  HedgeOptions hedge;
  hedge.max_attempts = 3;
  hedge.delay = HedgeOptions::infinite_delay;
  StrategyDriver<int> d{Shield{}.retry(retry).hedge(hedge)};
  d.start();
  for (std::uint32_t i = 0; i < 6; ++i) {
    ASSERT_EQ(d.attempts(), i + 1);
    d.fail(i, down);
  }
  std::vector<std::uint32_t> numbers;
  for (std::uint32_t i = 0; i < d.attempts(); ++i) numbers.push_back(d.attempt(i).context_attempt);
  EXPECT_EQ(numbers, (std::vector<std::uint32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(d.events_of<RetryScheduled>().size(), 1u);
  EXPECT_EQ(d.events_of<HedgeLaunched>().size(), 4u);
  EXPECT_EQ(d.outcome().error(), down);
}

// Whatever step fails or is cancelled, a hedged execution ends once and leaves no attempt behind.
TEST(HedgingDecisions, EveryStepSurvivesAnInjectedFailureOrCancellation) {
  const std::size_t runs = testing::inject_at_every_step<int>(
      [] { return Shield{}.hedge(3, 1s); },
      [](StrategyDriver<int>& d) {
        d.start();
        d.advance(1s);
        d.fail(0, down);
        d.succeed(2, 7);
      },
      [](StrategyDriver<int>& d, const InjectionPoint& p) {
        switch (p.kind) {
          case Injection::none:
            EXPECT_EQ(d.outcome().value(), 7);
            EXPECT_EQ(d.attempts(), 3u);
            break;
          case Injection::failure:
            EXPECT_EQ(d.outcome().error(), make_error_code(boost::system::errc::io_error))
                << p.step;
            EXPECT_EQ(d.attempts(), 3u) << p.step << ": every attempt is used before giving up";
            break;
          case Injection::cancellation:
            EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted) << p.step;
            break;
        }
      });
  EXPECT_EQ(runs, 9u);
}

}  // namespace
}  // namespace kevlar
