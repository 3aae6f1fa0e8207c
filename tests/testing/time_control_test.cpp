// Time control on the ManualClock: advance_until and its bound message, advance_until_idle, and
// the "start the call, then advance" rule that advance_expecting_wait enforces.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/strategy_driver.hpp>
#include <kevlar/testing/time_control.hpp>

#include <gtest/gtest.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
using kevlar::Shield;
using namespace kevlar::testing;

template <class F>
std::string failure_of(F f) {
  try {
    f();
  } catch (const ShieldAssertionError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ShieldAssertionError";
  return {};
}

kevlar::RetryOptions constant_retry(int retries, kevlar::Clock::duration delay) {
  kevlar::RetryOptions o;
  o.max_retries = retries;
  o.backoff = kevlar::Backoff::constant(delay);
  return o;
}

TEST(TimeControl, VirtualTimeIsTheClocksNowSinceItsEpoch) {
  kevlar::ManualClock clock;  // starts at 1 h
  EXPECT_EQ(virtual_time(clock), "1h0m0s");
  clock.advance(61500ms);
  EXPECT_EQ(virtual_time(clock), "1h1m1.5s");
  kevlar::ManualClock zero{kevlar::Clock::time_point{}};
  zero.advance(250ms);
  EXPECT_EQ(virtual_time(zero), "0.25s");
}

TEST(TimeControl, AdvanceUntilStepsTheClockAndDrainsUntilTheConditionHolds) {
  StrategyDriver<int> d{Shield{}.retry(constant_retry(1, 300ms))};
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  const auto start = d.clock().now();
  const std::size_t moves = advance_until(
      d.clock(), 100ms, [&] { return d.attempts() == 2; }, "the retry started attempt 2", 100,
      [&] { d.run(); });
  EXPECT_EQ(moves, 3u) << "the 300 ms backoff takes three steps of 100 ms";
  EXPECT_EQ(d.clock().now() - start, 300ms);
  EXPECT_EQ(advance_until(
                d.clock(), 100ms, [&] { return d.attempts() == 2; }, "already"),
            0u)
      << "a condition that holds moves nothing";
  d.succeed(1, 5);
  EXPECT_EQ(d.outcome().value(), 5);
}

TEST(TimeControl, AdvanceUntilNamesTheConditionTheVirtualTimeAndTheBound) {
  StrategyDriver<int> d{Shield{}.retry(constant_retry(1, 10s))};
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  const std::string m = failure_of([&] {
    (void)advance_until(
        d.clock(), 1s, [&] { return d.attempts() == 2; }, "the retry started attempt 2", 5,
        [&] { d.run(); });
  });
  EXPECT_NE(m.find("\"the retry started attempt 2\" still false after 5 advances of 1s"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("virtual time 1h0m5s"), std::string::npos) << m;
  EXPECT_NE(m.find("1 timer waits (earliest in 5s)"), std::string::npos) << m;
  EXPECT_THROW((void)advance_until(
                   d.clock(), 0s, [] { return true; }, "zero step"),
               std::invalid_argument);
}

TEST(TimeControl, AdvanceUntilIdleFiresEveryWaitIncludingThoseItsCompletionsArm) {
  // Two backoffs in a row: the second is armed only when the first attempt after the first
  // backoff fails, inside the drain.
  StrategyDriver<int> d{Shield{}.retry(constant_retry(2, 1s)), StrategyDriverOptions{}};
  int failures = 0;
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  const std::size_t moves = advance_until_idle(d.clock(), [&] {
    d.run();
    for (std::uint32_t i : d.running()) {
      if (i < 2) {
        ++failures;
        d.fail(i, boost::asio::error::connection_reset);
      }
    }
  });
  EXPECT_EQ(moves, 2u);
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(d.attempts(), 3u);
  EXPECT_TRUE(d.timers().empty());
  d.succeed(2, 9);
  EXPECT_EQ(d.outcome().value(), 9);
  EXPECT_EQ(advance_until_idle(d.clock()), 0u) << "nothing pending: no move";
}

TEST(TimeControl, AdvanceUntilIdleReportsAWaitThatIsReArmedForever) {
  StrategyDriver<int> d{Shield{}.retry(constant_retry(kevlar::retry_forever, 1s))};
  d.start();
  const std::string m = failure_of([&] {
    (void)advance_until_idle(
        d.clock(),
        [&] {
          d.run();
          for (std::uint32_t i : d.running()) d.fail(i, boost::asio::error::connection_reset);
        },
        10);
  });
  EXPECT_NE(m.find("timer waits still pending after 10 advances (virtual time 1h0m10s"),
            std::string::npos)
      << m;
  d.cancel();
}

TEST(TimeControl, AdvancingBeforeTheCallWaitsIsReported) {
  boost::asio::io_context io;
  const auto clock = kevlar::ManualClock::create();
  const std::string m = failure_of([&] { (void)advance_expecting_wait(*clock, 1s); });
  EXPECT_NE(m.find("asked to advance by 1s but nothing waits on the clock at virtual time 1h0m0s"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("start the call"), std::string::npos) << m;
  EXPECT_EQ(clock->now().time_since_epoch(), 1h) << "the clock did not move";

  // Start the call, then advance: the retry's backoff is waiting, and the move releases it.
  const Shield shield = Shield{}.retry(constant_retry(1, 1s)).with_clock(clock);
  int calls = 0;
  std::optional<int> result;
  shield.execute_async(
      [&](auto token) {
        return boost::asio::async_initiate<decltype(token), void(boost::system::error_code, int)>(
            [&](auto handler) {
              ++calls;
              const auto ec = calls == 1 ? make_error_code(boost::asio::error::connection_reset)
                                         : boost::system::error_code{};
              boost::asio::post(io.get_executor(),
                                [h = std::move(handler), ec]() mutable { std::move(h)(ec, 7); });
            },
            token);
      },
      boost::asio::bind_executor(io.get_executor(), [&](boost::system::error_code ec, int v) {
        if (!ec) result = v;
      }));
  drain_until_waiting(
      *clock, [&] { io.poll(); }, "the retry's backoff");
  EXPECT_EQ(advance_expecting_wait(*clock, 1s, [&] { io.poll(); }), 1u);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(result, 7);

  const std::string never = failure_of([&] {
    drain_until_waiting(
        *clock, [&] { io.poll(); }, "a wait that never comes", 3);
  });
  EXPECT_NE(never.find("\"a wait that never comes\": nothing waits on the clock after 3 drains"),
            std::string::npos)
      << never;
}

TEST(TimeControl, AdvanceUntilRefusesAnEmptyCondition) {
  kevlar::ManualClock clock;
  try {
    (void)advance_until(clock, 1s, std::function<bool()>{}, "nothing");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kevlar::testing::advance_until: empty condition");
  }
  EXPECT_EQ(clock.now().time_since_epoch(), 1h) << "the clock did not move";
}

TEST(TimeControl, AdvanceUntilSaysWhenNothingWaitsOnTheClock) {
  kevlar::ManualClock clock;
  const std::string m = failure_of([&] {
    (void)advance_until(
        clock, 1s, [] { return false; }, "a call that was never started", 2);
  });
  EXPECT_NE(m.find("(virtual time 1h0m2s; 0 timer waits, 0 threads sleeping)"), std::string::npos)
      << m;
}

TEST(TimeControl, AThreadSleepingOnTheClockCountsAsAWait) {
  const auto clock = kevlar::ManualClock::create();
  const Shield shield = Shield{}.retry(constant_retry(1, 1s)).with_clock(clock);
  int calls = 0;
  std::optional<int> result;
  std::thread caller([&] {
    result = shield.execute([&] {
      if (++calls == 1) throw std::runtime_error("flaky");
      return 3;
    });
  });
  clock->wait_for_sleepers(1);  // the retry's backoff blocks the caller's thread
  EXPECT_EQ(clock->pending_timers(), 0u);
  EXPECT_EQ(advance_expecting_wait(*clock, 1s), 0u) << "no timer wait, one sleeper";
  caller.join();
  EXPECT_EQ(result, 3);
  EXPECT_EQ(calls, 2);
}

}  // namespace
