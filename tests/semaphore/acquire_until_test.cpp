// UnpairedSemaphore::acquire_until: the blocking wait that gives up at a deadline read on a Clock
// (what a synchronous execution's queue wait under a timeout uses). On a ManualClock, so that the
// test moves time; once on the steady clock.
#include <kevlar/clock.hpp>
#include <kevlar/error.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using boost::system::error_code;

TEST(AcquireUntil, AFreeTokenIsTakenAtOnceWithoutSleeping) {
  UnpairedSemaphore sem(1);
  ManualClock clock;
  EXPECT_FALSE(sem.acquire_until(clock, clock.now() + 1s));
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(clock.sleepers(), 0u);
  // Even past its deadline a free token is taken; only a wait is refused.
  EXPECT_TRUE(sem.release());
  EXPECT_FALSE(sem.acquire_until(clock, clock.now() - 1s));
}

TEST(AcquireUntil, APassedDeadlineNeverQueues) {
  UnpairedSemaphore sem;
  ManualClock clock;
  EXPECT_EQ(sem.acquire_until(clock, clock.now()), errc::timeout);
  EXPECT_EQ(sem.waiting(), 0u);
  sem.close();
  EXPECT_EQ(sem.acquire_until(clock, clock.now()), errc::closed);
}

TEST(AcquireUntil, AReleaseBeforeTheDeadlineGrantsTheToken) {
  UnpairedSemaphore sem;
  ManualClock clock;
  std::optional<error_code> got;
  std::thread waiter([&] { got = sem.acquire_until(clock, clock.now() + 10s); });
  clock.wait_for_sleepers(1);
  EXPECT_EQ(sem.waiting(), 1u);
  clock.advance(9s);
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_TRUE(sem.release());  // wakes the sleeper through its stop state
  waiter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(*got);
  EXPECT_EQ(sem.available(), 0u) << "the token is the waiter's";
}

TEST(AcquireUntil, TheDeadlineTakesTheWaiterOutOfTheQueueAndTheOthersKeepTheirOrder) {
  UnpairedSemaphore sem;
  ManualClock clock;
  boost::asio::io_context ioc;
  std::vector<int> granted;
  sem.async_acquire(boost::asio::bind_executor(ioc, [&](error_code ec) {
    if (!ec) granted.push_back(1);
  }));
  std::optional<error_code> got;
  std::thread waiter([&] { got = sem.acquire_until(clock, clock.now() + 1s); });
  clock.wait_for_sleepers(1);
  sem.async_acquire(boost::asio::bind_executor(ioc, [&](error_code ec) {
    if (!ec) granted.push_back(3);
  }));
  EXPECT_EQ(sem.waiting(), 3u);
  clock.advance(1s);
  waiter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_TRUE(sem.release(2));
  ioc.run();
  EXPECT_EQ(granted, (std::vector<int>{1, 3}));
  EXPECT_EQ(sem.available(), 0u);
}

TEST(AcquireUntil, AStopRequestEndsTheWaitAsACancellation) {
  UnpairedSemaphore sem;
  ManualClock clock;
  std::stop_source stop;
  std::optional<error_code> got;
  std::thread waiter([&] { got = sem.acquire_until(clock, clock.now() + 1h, stop.get_token()); });
  clock.wait_for_sleepers(1);
  stop.request_stop();
  waiter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, boost::asio::error::operation_aborted);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u) << "nothing was consumed";
}

TEST(AcquireUntil, CloseEndsTheWaitWithClosed) {
  UnpairedSemaphore sem;
  ManualClock clock;
  std::optional<error_code> got;
  std::thread waiter([&] { got = sem.acquire_until(clock, clock.now() + 1h); });
  clock.wait_for_sleepers(1);
  sem.close();
  waiter.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::closed);
}

// A release and the deadline at the same moment, from two threads: the waiter ends exactly once,
// and the token is either its own (granted) or still free (timed out): never lost or doubled.
TEST(AcquireUntil, AGrantRacingTheDeadlineResolvesOnce) {
  for (int round = 0; round < 200; ++round) {
    UnpairedSemaphore sem;
    ManualClock clock;
    std::optional<error_code> got;
    std::thread waiter([&] { got = sem.acquire_until(clock, clock.now() + 1s); });
    clock.wait_for_sleepers(1);
    std::thread advancer([&] { clock.advance(1s); });
    EXPECT_TRUE(sem.release());
    advancer.join();
    waiter.join();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(sem.waiting(), 0u);
    if (*got) {
      EXPECT_EQ(*got, errc::timeout) << "round " << round;
      EXPECT_EQ(sem.available(), 1u) << "round " << round;
    } else {
      EXPECT_EQ(sem.available(), 0u) << "round " << round;
    }
  }
}

TEST(AcquireUntilOnTheSteadyClock, GivesUpAtItsDeadline) {
  UnpairedSemaphore sem;
  const Clock& clock = *Clock::steady();
  const auto started = clock.now();
  EXPECT_EQ(sem.acquire_until(clock, started + 30ms), errc::timeout);
  EXPECT_GE(clock.now() - started, 30ms);
  EXPECT_EQ(sem.waiting(), 0u);
}

}  // namespace
}  // namespace kevlar
