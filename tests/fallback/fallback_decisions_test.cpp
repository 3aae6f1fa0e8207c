// The fallback's decisions on the strategy driver: what it replaces, what passes through, and how
// it composes with a retry and with rejections inside it.
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/fallback.hpp>
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

const boost::system::error_code down = make_error_code(boost::system::errc::connection_refused);

TEST(FallbackDecisions, AHandledErrorIsReplacedByTheValue) {
  StrategyDriver<int> d{Shield{}.fallback(-1)};
  d.start();
  d.fail(0, down);
  EXPECT_EQ(d.outcome().value(), -1);
  const auto taken = d.events_of<FallbackTaken>();
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].failure.error, down);
}

TEST(FallbackDecisions, ASuccessAndACancellationPassThrough) {
  StrategyDriver<int> ok{Shield{}.fallback(-1)};
  ok.start();
  ok.succeed(0, 5);
  EXPECT_EQ(ok.outcome().value(), 5);

  StrategyDriver<int> cancelled{Shield{}.fallback(-1)};
  cancelled.start();
  cancelled.cancel();
  EXPECT_EQ(cancelled.outcome().error(), asio::error::operation_aborted);
  EXPECT_TRUE(cancelled.events_of<FallbackTaken>().empty());
}

TEST(FallbackDecisions, TheRecoverySeesTheHandledOutcome) {
  FallbackOptions<int> o;
  o.recovery = [](const Outcome<int>& failed, Context& ctx) {
    return failed.error() == down ? static_cast<int>(ctx.attempt()) * 100 : 0;
  };
  StrategyDriver<int> d{Shield{}.fallback(o)};
  d.start();
  d.fail(0, down);
  EXPECT_EQ(d.outcome().value(), 100);
}

TEST(FallbackDecisions, OutsideARetryItRecoversOnlyTheLastFailureOnce) {
  RetryOptions r;
  r.max_retries = 2;
  r.backoff = Backoff::none();
  StrategyDriver<int> d{Shield{}.when(Clause{}.error(down)).fallback(-1).when(Clause{}.error(down)).retry(r)};
  d.start();
  d.fail(0, down);
  d.fail(1, down);
  EXPECT_FALSE(d.delivered());
  d.fail(2, down);
  EXPECT_EQ(d.outcome().value(), -1);
  EXPECT_EQ(d.events_of<FallbackTaken>().size(), 1u);
}

TEST(FallbackDecisions, ItRecoversARejectionFromAStrategyInsideIt) {
  CircuitBreakerOptions b;
  b.consecutive_failures = 1;
  auto breaker = CircuitBreaker::create(b);
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.when(Clause{}.error(down).error(errc::circuit_open)).fallback(-1).use(breaker);
  StrategyDriver<int> first(shield, clock);
  first.start();
  first.fail(0, down);
  EXPECT_EQ(first.outcome().value(), -1);
  StrategyDriver<int> second(shield, clock);
  second.start();
  EXPECT_EQ(second.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(second.outcome().value(), -1) << "the open circuit's rejection was recovered";
}

TEST(FallbackDecisions, EveryStepSurvivesAnInjectedFailureOrCancellation) {
  const std::size_t runs = testing::inject_at_every_step<int>(
      [] { return Shield{}.fallback(-1); },
      [](StrategyDriver<int>& d) {
        d.start();
        d.succeed(0, 3);
      },
      [](StrategyDriver<int>& d, const InjectionPoint& p) {
        switch (p.kind) {
          case Injection::none:
            EXPECT_EQ(d.outcome().value(), 3);
            break;
          case Injection::failure:
            EXPECT_EQ(d.outcome().value(), -1) << p.step;
            break;
          case Injection::cancellation:
            EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted) << p.step;
            break;
        }
      });
  EXPECT_EQ(runs, 5u);
}

}  // namespace
}  // namespace kevlar
