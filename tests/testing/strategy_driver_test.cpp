// The strategy driver itself: its boundary actions, clock waits, misuse errors, abandonment and the
// failure-injection helper, over shields whose behaviour other tests pin down end to end.
#include "support/field_equality.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using kevlar::Clock;
using kevlar::Shield;
using kevlar::testing::DriverAction;
using kevlar::testing::Injection;
using kevlar::testing::InjectionPoint;
using kevlar::testing::StrategyDriver;
using Actions = std::vector<DriverAction>;
using Durations = std::vector<Clock::duration>;

const boost::system::error_code io_error = make_error_code(boost::system::errc::io_error);

TEST(StrategyDriver, AnEmptyShieldStartsTheOperationAndDeliversItsValue) {
  StrategyDriver<int> d{Shield()};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_FALSE(d.delivered());
  EXPECT_EQ(d.attempt(0).context_attempt, 1u);
  d.succeed(0, 42);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  ASSERT_TRUE(d.outcome().has_value());
  EXPECT_EQ(d.outcome().value(), 42);
  EXPECT_EQ(d.deliveries(), 1u);
  const auto finished = d.events_of<kevlar::ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].success);
  EXPECT_EQ(finished[0].attempts, 1u);
}

TEST(StrategyDriver, AFailureIsDeliveredAsTheOutcomesError) {
  StrategyDriver<int> d{Shield()};
  d.start();
  d.fail(0, io_error);
  ASSERT_TRUE(d.outcome().has_error());
  EXPECT_EQ(d.outcome().error(), io_error);
}

TEST(StrategyDriver, ARetrysBackoffIsAPendingClockWaitThatAdvanceReleases) {
  kevlar::RetryOptions o;
  o.max_retries = 1;
  o.backoff = kevlar::Backoff::constant(100ms);
  StrategyDriver<int> d{Shield().retry(o)};
  d.start();
  d.fail(0, io_error);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_EQ(d.timers(), Durations{100ms});
  d.advance(99ms);
  EXPECT_TRUE(d.take_actions().empty());
  d.advance(1ms);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(1)});
  EXPECT_EQ(d.attempt(1).context_attempt, 2u);
  EXPECT_TRUE(d.timers().empty());
  d.succeed(1, 7);
  EXPECT_EQ(d.outcome().value(), 7);
}

TEST(StrategyDriver, TheCallersCancellationReachesThePendingOperation) {
  StrategyDriver<int> d{Shield()};
  d.start();
  (void)d.take_actions();
  d.cancel(boost::asio::cancellation_type::partial);
  EXPECT_EQ(d.take_actions(),
            (Actions{DriverAction::cancelled(0, boost::asio::cancellation_type::partial),
                     DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().error(), boost::asio::error::operation_aborted);
  EXPECT_EQ(d.attempt(0).cancellations,
            std::vector<boost::asio::cancellation_type>{boost::asio::cancellation_type::partial});
}

TEST(StrategyDriver, AnOperationThatIgnoresCancellationCompletesWhenTheTestSays) {
  kevlar::testing::StrategyDriverOptions options;
  options.abort_on_cancel = false;
  StrategyDriver<int> d{Shield(), options};
  d.start();
  (void)d.take_actions();
  d.cancel();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::cancelled(0)});
  EXPECT_FALSE(d.delivered());
  d.succeed(0, 5);  // it finished anyway: a success stands
  EXPECT_EQ(d.outcome().value(), 5);
}

TEST(StrategyDriver, MisuseIsRefusedWithAClearError) {
  StrategyDriver<int> d{Shield()};
  EXPECT_THROW((void)d.outcome(), std::logic_error);
  d.start();
  EXPECT_THROW(d.start(), std::logic_error);
  EXPECT_THROW(d.succeed(1, 0), std::out_of_range);
  EXPECT_THROW(d.fail(0, {}), std::invalid_argument);
  d.succeed(0, 1);
  EXPECT_THROW(d.succeed(0, 2), std::logic_error);
  EXPECT_EQ(d.outcome().value(), 1);
  EXPECT_THROW(StrategyDriver<int>(Shield(), nullptr), std::invalid_argument);
}

TEST(StrategyDriver, ActionsPrintReadably) {
  using boost::asio::cancellation_type;
  std::ostringstream os;
  os << DriverAction::started(1) << ' ' << DriverAction::cancelled(0) << ' '
     << DriverAction::cancelled(2, cancellation_type::partial) << ' '
     << DriverAction::cancelled(3, cancellation_type::total) << ' ' << DriverAction::delivered();
  EXPECT_EQ(os.str(), "start(1) cancel(0, terminal) cancel(2, partial) cancel(3, total) deliver");
  EXPECT_STREQ(kevlar::testing::to_string(cancellation_type::none), "none");
  EXPECT_STREQ(kevlar::testing::to_string(cancellation_type::all), "all");
  EXPECT_STREQ(kevlar::testing::to_string(cancellation_type::terminal | cancellation_type::partial),
               "mixed");
}

TEST(StrategyDriver, AnActionOfAnUnknownKindPrintsAsAQuestionMark) {
  DriverAction action = DriverAction::delivered();
  action.kind = static_cast<DriverAction::Kind>(7);
  std::ostringstream os;
  os << action;
  EXPECT_EQ(os.str(), "?");
}

/// Counts on_start and on_finish of the executions it serves.
struct Counting final : kevlar::BasicStrategy<Counting, int> {
  int* started;
  int* finished;
  Counting(int* s, int* f) : started(s), finished(f) {}
  [[nodiscard]] std::string describe() const override { return "Counting"; }
  kevlar::Step start(kevlar::Layer&, int&) {
    ++*started;
    return kevlar::Step::run_inner;
  }
  void finish(kevlar::Layer&, int&) noexcept { ++*finished; }
};

TEST(StrategyDriver, ADroppedOperationAbandonsTheExecution) {
  int started = 0;
  int finished = 0;
  StrategyDriver<int> d{Shield().use(std::make_shared<Counting>(&started, &finished))};
  d.start();
  EXPECT_EQ(started, 1);
  d.drop(0);
  EXPECT_FALSE(d.delivered());
  EXPECT_EQ(finished, 1);  // every strategy's on_finish ran
  EXPECT_TRUE(d.running().empty());
}

TEST(StrategyDriver, DestroyingTheDriverMidExecutionAbandonsIt) {
  int started = 0;
  int finished = 0;
  {
    kevlar::RetryOptions o;
    o.backoff = kevlar::Backoff::constant(1s);
    StrategyDriver<int> d{
        Shield().use(std::make_shared<Counting>(&started, &finished)).timeout(10s).retry(o)};
    d.start();
    d.fail(0, io_error);  // the retry waits on the clock, the timeout's deadline is armed
    EXPECT_EQ(d.timers().size(), 2u);
  }
  EXPECT_EQ(started, 1);
  EXPECT_EQ(finished, 1);
}

TEST(StrategyDriver, DriversOverOneShieldShareItsStrategiesState) {
  auto clock = kevlar::ManualClock::create();
  const Shield shield = Shield().circuit_breaker(1, 5s);
  StrategyDriver<int> first(shield, clock);
  first.start();
  first.fail(0, io_error);
  StrategyDriver<int> second(shield, clock);
  second.start();
  EXPECT_EQ(second.take_actions(), Actions{DriverAction::delivered()});  // rejected, not started
  EXPECT_EQ(second.outcome().error(), kevlar::errc::circuit_open);
}

TEST(InjectAtEveryStep, RunsTheScriptOnceAsWrittenAndTwiceForEveryStep) {
  kevlar::RetryOptions o;
  o.max_retries = 2;
  o.backoff = kevlar::Backoff::constant(10ms);
  std::vector<InjectionPoint> seen;
  const std::size_t runs = kevlar::testing::inject_at_every_step<int>(
      [&] { return Shield().retry(o); },
      [](StrategyDriver<int>& d) {
        d.start();
        d.fail(0, io_error);
        d.advance(10ms);
        d.succeed(1, 3);
      },
      [&](StrategyDriver<int>& d, const InjectionPoint& p) {
        seen.push_back(p);
        switch (p.kind) {
          case Injection::none:
            EXPECT_EQ(d.outcome().value(), 3);
            break;
          case Injection::failure:
            // Every operation fails from the injection on: the retries run out.
            ASSERT_TRUE(d.outcome().has_error());
            EXPECT_EQ(d.outcome().error(), io_error);
            EXPECT_EQ(d.attempts(), 3u);
            break;
          case Injection::cancellation:
            EXPECT_EQ(d.outcome().error(), boost::asio::error::operation_aborted);
            EXPECT_LE(d.attempts(), 2u);  // nothing starts once the caller cancelled
            break;
        }
      });
  EXPECT_EQ(runs, 1u + 2u * 4u);
  ASSERT_EQ(seen.size(), runs);
  EXPECT_EQ(seen[0].kind, Injection::none);
  EXPECT_EQ(seen[1].step, 0u);
  EXPECT_EQ(seen[1].kind, Injection::failure);
  EXPECT_EQ(seen[2].kind, Injection::cancellation);
  EXPECT_EQ(seen.back().step, 3u);
}

TEST(InjectAtEveryStep, ReportsAnExecutionThatNeverCompletes) {
  // The operation's executor goes away with it pending: the execution is abandoned and never
  // delivers, which the helper reports (naming the run) instead of passing.
  try {
    (void)kevlar::testing::inject_at_every_step<int>(
        [] { return Shield().retry(1); },
        [](StrategyDriver<int>& d) {
          d.start();
          d.drop(0);
        },
        [](StrategyDriver<int>&, const InjectionPoint&) {});
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("reference run): 0 deliveries"), std::string::npos)
        << e.what();
  }
}

TEST(InjectAtEveryStep, AnUnhandledInjectedFailureEndsAHedgeWhoseOtherAttemptsAbortOnTheirOwn) {
  // Failing the first attempt with an error the clause does not handle makes it the winner: the
  // hedge cancels the other attempt, which must not be failed a second time by the injection.
  const boost::system::error_code down = make_error_code(boost::system::errc::connection_refused);
  const std::size_t runs = kevlar::testing::inject_at_every_step<int>(
      [&] { return Shield().when(kevlar::Clause{}.error(down)).hedge(2, 0s); },
      [&](StrategyDriver<int>& d) {
        d.start();
        d.fail(0, down);
        d.succeed(1, 4);
      },
      [](StrategyDriver<int>& d, const InjectionPoint& p) {
        if (p.kind == Injection::failure) {
          EXPECT_EQ(d.outcome().error(), io_error) << p.step;
        }
      });
  EXPECT_EQ(runs, 7u);
}

TEST(StrategyDriver, DestroyingTheDriverWithHedgedAttemptsPendingAbandonsThem) {
  int started = 0;
  int finished = 0;
  {
    StrategyDriver<int> d{
        Shield().use(std::make_shared<Counting>(&started, &finished)).hedge(3, 1s)};
    d.start();
    d.advance(1s);
    EXPECT_EQ(d.running().size(), 2u);
  }
  EXPECT_EQ(started, 1);
  EXPECT_EQ(finished, 1);
}

TEST(StrategyDriver, SettleReportsAnExecutionThatCannotComplete) {
  StrategyDriver<int> d{Shield()};
  d.start();
  d.drop(0);
  EXPECT_THROW(d.settle(), std::logic_error);
}

TEST(StrategyDriver, WithoutAnEventRecorderTypedEventQueriesAreEmpty) {
  kevlar::testing::StrategyDriverOptions options;
  options.record_events = false;
  StrategyDriver<int> d{Shield().retry(1), options};
  d.start();
  d.fail(0, io_error);
  d.advance(1s);
  d.succeed(1, 2);
  EXPECT_EQ(d.outcome().value(), 2) << "the execution runs the same without a recorder";
  EXPECT_FALSE(d.recorder());
  EXPECT_TRUE(d.events_of<kevlar::RetryScheduled>().empty());
  EXPECT_TRUE(d.events_of<kevlar::ExecutionFinished>().empty());
}

TEST(StrategyDriver, MisuseErrorsNameTheOperationAndWhatWasWrong) {
  StrategyDriver<int> d{Shield()};
  d.start();
  try {
    d.drop(3);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "kevlar::testing::StrategyDriver: no operation 3 (1 started)");
  }
  d.drop(0);
  try {
    d.fail(0, io_error);
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "kevlar::testing::StrategyDriver: operation 0 already completed");
  }
  try {
    (void)StrategyDriver<int>{Shield()}.outcome();
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "kevlar::testing::StrategyDriver::outcome: not delivered yet");
  }
}

TEST(StrategyDriver, AFailureInjectionNeedsAnErrorAndNoneClearsAnInjection) {
  StrategyDriver<int> d{Shield()};
  try {
    d.inject(0, Injection::failure, {});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kevlar::testing::StrategyDriver::inject: empty error code");
  }
  d.inject(1, Injection::cancellation);
  d.inject(1, Injection::none);  // the cancellation planned at step 1 is withdrawn
  d.start();
  d.succeed(0, 6);
  EXPECT_FALSE(d.injected());
  EXPECT_EQ(d.steps(), 2u);
  EXPECT_EQ(d.outcome().value(), 6);
  EXPECT_TRUE(d.attempt(0).cancellations.empty());
}

TEST(StrategyDriver, AnInjectedFailureReplacesTheCallersCancellation) {
  StrategyDriver<int> d{Shield()};
  d.inject(1, Injection::failure);
  d.start();
  d.cancel();  // step 1: the injection runs instead
  EXPECT_TRUE(d.injected());
  EXPECT_TRUE(d.attempt(0).cancellations.empty()) << "the cancellation was not emitted";
  EXPECT_EQ(d.outcome().error(), io_error);
  d.cancel();  // after the injection every event call is skipped
  EXPECT_EQ(d.steps(), 3u);
  EXPECT_EQ(d.actions(), (Actions{DriverAction::started(0), DriverAction::delivered()}));
}

TEST(StrategyDriver, AnInjectedCancellationReplacesADrop) {
  StrategyDriver<int> d{Shield()};
  d.inject(1, Injection::cancellation);
  d.start();
  d.drop(0);  // step 1: the caller cancels instead, and the operation aborts
  EXPECT_TRUE(d.injected());
  EXPECT_EQ(d.actions(), (Actions{DriverAction::started(0), DriverAction::cancelled(0),
                                  DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().error(), boost::asio::error::operation_aborted);
  EXPECT_NO_THROW(d.settle());
}

TEST(StrategyDriver, SettleWithoutAnInjectionAbortsThePendingOperations) {
  // Aborting the first attempt ends the hedge (a cancellation is not handled): it cancels the
  // second attempt, which aborts on its own and is not failed a second time.
  StrategyDriver<int> d{Shield().hedge(2, 0s)};
  d.start();
  ASSERT_EQ(d.running().size(), 2u);
  (void)d.take_actions();
  d.settle();
  EXPECT_EQ(d.take_actions(), (Actions{DriverAction::cancelled(1), DriverAction::delivered()}));
  EXPECT_EQ(d.outcome().error(), boost::asio::error::operation_aborted);
  EXPECT_TRUE(d.running().empty());
  EXPECT_EQ(d.deliveries(), 1u);
}

TEST(StrategyDriver, SettleCompletesAnOperationLeftPendingAfterTheDelivery) {
  kevlar::testing::StrategyDriverOptions options;
  options.abort_on_cancel = false;
  StrategyDriver<int> d{Shield().hedge(2, 0s), options};
  d.start();
  d.succeed(1, 8);  // the hedge's winner; the loser ignores its cancellation
  EXPECT_EQ(d.outcome().value(), 8);
  EXPECT_EQ(d.running(), std::vector<std::uint32_t>{0});
  d.settle();
  EXPECT_TRUE(d.running().empty());
  EXPECT_EQ(d.deliveries(), 1u);
  EXPECT_EQ(d.outcome().value(), 8) << "the late abort changes nothing";
}

TEST(StrategyDriver, SettleReportsWhatIsLeftWhenTheExecutionCannotComplete) {
  StrategyDriver<int> dropped{Shield()};
  dropped.start();
  dropped.drop(0);
  try {
    dropped.settle();
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "kevlar::testing::StrategyDriver::settle: the execution did not complete (0 "
                 "operations pending, 0 clock waits)");
  }

  // A retry without limit retries every injected failure: settle gives up after a bounded number
  // of rounds instead of looping forever.
  kevlar::RetryOptions o;
  o.max_retries = kevlar::retry_forever;
  o.backoff = kevlar::Backoff::constant(1s);
  StrategyDriver<int> forever{Shield().retry(o)};
  forever.inject(0, Injection::failure);
  forever.start();
  try {
    forever.settle();
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "kevlar::testing::StrategyDriver::settle: the execution did not complete (0 "
                 "operations pending, 1 clock waits)");
  }
  EXPECT_FALSE(forever.delivered());
  // Its bound is 1000 rounds, each failing the pending attempt or moving the clock to the backoff.
  EXPECT_EQ(forever.attempts(), 501u);
  EXPECT_EQ(forever.clock().now().time_since_epoch(), 1h + 500s);
}

TEST(InjectAtEveryStep, ReportsAnOperationLeftPendingAfterTheDelivery) {
  kevlar::testing::StrategyDriverOptions options;
  options.abort_on_cancel = false;
  try {
    (void)kevlar::testing::inject_at_every_step<int>(
        [] { return Shield().hedge(2, 0s); },
        [](StrategyDriver<int>& d) {
          d.start();
          d.succeed(1, 8);  // the loser ignores its cancellation and stays pending
        },
        [](StrategyDriver<int>&, const InjectionPoint&) {}, io_error, options);
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "kevlar::testing::inject_at_every_step: at step 0 (reference run): 1 deliveries, "
                 "1 operations pending");
  }
}

TEST(StrategyDriver, EveryFieldOfAnActionTakesPartInEquality) {
  kevlar::test::expect_every_field_compared<DriverAction>(
      DriverAction::cancelled(1),
      {[](DriverAction& a) { a.kind = DriverAction::Kind::deliver; },
       [](DriverAction& a) { a.attempt = 2; },
       [](DriverAction& a) { a.type = boost::asio::cancellation_type::partial; }});
}

TEST(DriverLoop, RefusesToRunAJobThatPostsItselfForever) {
  kevlar::testing::detail::DriverLoop loop;
  int runs = 0;
  std::function<void()> again = [&] {
    ++runs;
    loop.post(again);
  };
  loop.post(again);
  try {
    (void)loop.run(10);
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "kevlar::testing::StrategyDriver: 10 jobs in one run; something posts itself "
                 "forever");
  }
  EXPECT_EQ(runs, 10);
  EXPECT_EQ(loop.pending(), 1u);
}

TEST(DriverLoop, OnceShutDownAJobIsQueuedButNeverRun) {
  kevlar::testing::detail::DriverLoop loop;
  bool ran = false;
  loop.post([&] { ran = true; });
  EXPECT_EQ(loop.run(), 1u);
  EXPECT_TRUE(ran);
  ran = false;
  loop.shut_down();
  loop.post([&] { ran = true; });
  EXPECT_EQ(loop.pending(), 1u);
  EXPECT_EQ(loop.run(), 0u);
  EXPECT_FALSE(ran);
}

}  // namespace
