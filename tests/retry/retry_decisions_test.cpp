// The retry's decisions, one event at a time on the strategy driver (no io_context, no sockets):
// when it tries again, how long it waits, when it stops, and how cancellation ends it. The
// end-to-end behaviour through real executors stays in retry_async_test.cpp.
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

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

TEST(RetryDecisions, RetriesErrorCodesAfterTheBackoffOnTheClock) {
  StrategyDriver<int> d{
      Shield{}.retry(RetryOptions{.max_retries = 3, .backoff = Backoff::constant(1s)})};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  d.fail(0, asio::error::connection_reset);
  EXPECT_EQ(d.timers(), Durations{1s});
  d.advance(999ms);
  EXPECT_TRUE(d.take_actions().empty()) << "999 ms does not release a 1 s backoff";
  d.advance(1ms);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(1)});
  d.fail(1, asio::error::connection_refused);
  d.advance(1s);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(2)});
  d.succeed(2, 3);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(d.outcome().value(), 3);
  EXPECT_EQ(d.attempt(2).context_attempt, 3u);

  const auto retries = d.events_of<RetryScheduled>();
  ASSERT_EQ(retries.size(), 2u);
  EXPECT_EQ(retries[0].retry, 1);
  EXPECT_EQ(retries[0].delay, 1s);
  EXPECT_EQ(retries[0].failure.error, asio::error::connection_reset);
  EXPECT_EQ(retries[1].retry, 2);
  EXPECT_EQ(retries[1].failure.error, asio::error::connection_refused);
}

TEST(RetryDecisions, ExhaustedRetriesSurfaceTheLastError) {
  StrategyDriver<int> d{Shield{}.retry(RetryOptions{.max_retries = 2, .backoff = Backoff::none()})};
  d.start();
  d.fail(0, asio::error::connection_reset);
  d.fail(1, asio::error::connection_refused);
  EXPECT_FALSE(d.delivered());
  d.fail(2, asio::error::host_unreachable);
  EXPECT_EQ(d.attempts(), 3u);
  EXPECT_EQ(d.outcome().error(), asio::error::host_unreachable);
  EXPECT_EQ(d.events_of<RetryScheduled>().size(), 2u);
}

TEST(RetryDecisions, ExponentialBackoffWithoutJitterDoublesUpToTheCap) {
  StrategyDriver<int> d{Shield{}.retry(RetryOptions{
      .max_retries = 4, .backoff = Backoff::exponential(100ms, 2.0, 300ms, /*jitter=*/false)})};
  d.start();
  Durations waits;
  for (std::uint32_t i = 0; i < 4; ++i) {
    d.fail(i, asio::error::connection_reset);
    const Durations t = d.timers();
    ASSERT_EQ(t.size(), 1u) << i;
    waits.push_back(t[0]);
    d.advance(t[0]);
  }
  EXPECT_EQ(waits, (Durations{100ms, 200ms, 300ms, 300ms}));
}

TEST(RetryDecisions, CancellationErrorsAreNotRetriedByDefault) {
  StrategyDriver<int> d{Shield{}.retry(RetryOptions{.max_retries = 3, .backoff = Backoff::none()})};
  d.start();
  d.fail(0, asio::error::operation_aborted);
  EXPECT_EQ(d.attempts(), 1u);
  EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
  EXPECT_TRUE(d.events_of<RetryScheduled>().empty());
}

TEST(RetryDecisions, AnErrorTheClauseDoesNotHandleIsNotRetried) {
  StrategyDriver<int> d{Shield{}
                            .when(Clause{}.error(asio::error::connection_reset))
                            .retry(RetryOptions{.max_retries = 3, .backoff = Backoff::none()})};
  d.start();
  d.fail(0, asio::error::connection_reset);  // handled: retried
  d.fail(1, asio::error::host_unreachable);  // not handled: surfaces at once
  EXPECT_EQ(d.attempts(), 2u);
  EXPECT_EQ(d.outcome().error(), asio::error::host_unreachable);
}

TEST(RetryDecisions, CancellationDuringAnAttemptReturnsTheOriginalFailure) {
  testing::StrategyDriverOptions options;
  options.abort_on_cancel = false;  // the attempt fails anyway after the cancellation
  StrategyDriver<int> d{
      Shield{}.retry(RetryOptions{.max_retries = 3, .backoff = Backoff::none()}), options};
  d.start();
  d.cancel();
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::started(0), DriverAction::cancelled(0)}));
  d.fail(0, asio::error::connection_reset);
  EXPECT_EQ(d.attempts(), 1u) << "no retry once the caller cancelled";
  EXPECT_EQ(d.outcome().error(), asio::error::connection_reset)
      << "the original failure, not a cancellation";
}

TEST(RetryDecisions, CancellationDuringTheBackoffEndsWithOperationAborted) {
  StrategyDriver<int> d{
      Shield{}.retry(RetryOptions{.max_retries = 3, .backoff = Backoff::constant(1h)})};
  d.start();
  d.fail(0, asio::error::connection_reset);
  ASSERT_EQ(d.timers(), Durations{1h});
  d.cancel();
  EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
  EXPECT_TRUE(d.timers().empty()) << "the backoff wait was cancelled";
  d.advance(2h);
  EXPECT_EQ(d.attempts(), 1u) << "no attempt after the cancellation";
}

TEST(RetryDecisions, APartialCancellationDuringTheBackoffEndsItToo) {
  StrategyDriver<int> d{
      Shield{}.retry(RetryOptions{.max_retries = 1, .backoff = Backoff::constant(1s)})};
  d.start();
  d.fail(0, asio::error::connection_reset);
  d.cancel(asio::cancellation_type::partial);
  // A clock wait honours terminal, partial and total cancellation, as Asio's timers do.
  EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
}

// Whatever step fails or is cancelled, the retry ends exactly once: a failure injected at any step
// makes every later attempt fail too, and the retries run out; a cancellation ends the loop with
// operation_aborted and starts nothing more.
TEST(RetryDecisions, EveryStepSurvivesAnInjectedFailureOrCancellation) {
  const auto make = [] {
    return Shield{}.retry(RetryOptions{.max_retries = 2, .backoff = Backoff::constant(10ms)});
  };
  const std::size_t runs = testing::inject_at_every_step<int>(
      make,
      [](StrategyDriver<int>& d) {
        d.start();
        d.fail(0, asio::error::connection_reset);
        d.advance(10ms);
        d.fail(1, asio::error::connection_reset);
        d.advance(10ms);
        d.succeed(2, 9);
      },
      [](StrategyDriver<int>& d, const InjectionPoint& p) {
        if (p.kind == Injection::none) {
          EXPECT_EQ(d.outcome().value(), 9);
        } else if (p.kind == Injection::failure) {
          EXPECT_EQ(d.attempts(), 3u) << p.step;
          EXPECT_TRUE(d.outcome().has_error()) << p.step;
        } else {
          EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted) << p.step;
          // The attempt running (or the backoff pending) when the caller cancelled is the last.
          const std::uint32_t started[] = {1, 1, 1, 2, 2, 3};
          EXPECT_EQ(d.attempts(), started[p.step]) << p.step;
        }
        EXPECT_TRUE(d.timers().empty()) << p.step;
      });
  EXPECT_EQ(runs, 13u);
}

}  // namespace
}  // namespace kevlar
