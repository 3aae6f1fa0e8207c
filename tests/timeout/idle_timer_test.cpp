// Once no deadline is pending, nothing of kevlar's keeps an io_context running: run() returns
// without any call from the user, while a loop that keeps making calls keeps its one deadline
// timer armed (no timer wait, so no timerfd_settime, per call).
#include "core/async_ops.hpp"

#include <kevlar/circuit_breaker.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/timeout.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

/// The steady clock, counting the timer waits started and the cancellations of its timers: a
/// wait started on a Boost.Asio steady timer that becomes the earliest one is a timerfd_settime
/// system call.
class CountingClock final : public Clock {
 public:
  std::atomic<int> waits{0};
  std::atomic<int> cancels{0};

  [[nodiscard]] time_point now() const noexcept override { return inner_->now(); }
  bool sleep_until(time_point deadline, std::stop_token stop) const override {
    return inner_->sleep_until(deadline, std::move(stop));
  }
  [[nodiscard]] std::unique_ptr<ClockTimer> make_timer(
      const asio::any_io_executor& executor) const override {
    return std::make_unique<Timer>(inner_->make_timer(executor), *const_cast<CountingClock*>(this));
  }

 private:
  class Timer final : public ClockTimer {
   public:
    Timer(std::unique_ptr<ClockTimer> inner, CountingClock& clock)
        : inner_(std::move(inner)), clock_(&clock) {}
    void async_wait_until(Clock::time_point deadline, ClockWaiter& waiter) override {
      inner_->async_wait_until(deadline, waiter);
      ++clock_->waits;
    }
    void cancel() noexcept override {
      ++clock_->cancels;
      inner_->cancel();
    }

   private:
    std::unique_ptr<ClockTimer> inner_;
    CountingClock* clock_;
  };

  std::shared_ptr<const Clock> inner_ = Clock::steady();
};

/// Runs the handlers that are ready, until none is left; the loop is then stopped if and only if
/// nothing (no timer wait, no posted job) is pending on it.
void drain(asio::io_context& ioc) {
  while (ioc.poll() != 0) {
  }
}

/// Makes `n` calls through `shield` one after another from a coroutine, each resumed from its
/// completion; returns how many completed without error.
int sequential_calls(asio::io_context& ioc, const Shield& shield, int n) {
  int ok = 0;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        for (int i = 0; i < n; ++i) {
          auto [ec, v] = co_await shield.execute_async(
              [&](auto token) { return test::async_answer(ex, {}, i, std::move(token)); },
              asio::as_tuple(asio::deferred));
          if (!ec && v == i) ++ok;
        }
      },
      asio::detached);
  drain(ioc);
  return ok;
}

TEST(IdleTimers, RunStopsOnceTheLastCallHasCompletedOnTheSteadyClock) {
  // The README's shield: two deadline queues (30 s and 5 s), both with a timer pending after the
  // calls, which used to hold run() for up to 30 s.
  const Shield shield = Shield{}.timeout(30s).retry(3).circuit_breaker(5, 30s).concurrency_limit(
      10, 20).timeout(5s);
  asio::io_context ioc;
  ASSERT_EQ(sequential_calls(ioc, shield, 3), 3);
  ASSERT_TRUE(ioc.stopped()) << "a deadline timer still holds the io_context";
  ioc.restart();
  ioc.run();  // returns at once: nothing is pending
}

TEST(IdleTimers, CallbackCallsLeaveNoTimerPendingOnTheManualClock) {
  const auto clock = ManualClock::create();
  const Shield shield = Shield{}.timeout(30s).with_clock(clock);
  asio::io_context ioc;
  int done = 0;
  for (int i = 0; i < 3; ++i) {
    shield.execute_async(
        [&](auto token) { return test::async_answer(ioc.get_executor(), {}, i, std::move(token)); },
        asio::bind_executor(ioc, [&](error_code ec, int) { done += ec ? 0 : 1; }));
  }
  drain(ioc);
  EXPECT_EQ(done, 3);
  EXPECT_TRUE(ioc.stopped());
  EXPECT_EQ(clock->pending_timers(), 0u) << "the deadline queue's wait outlived its last call";
}

TEST(IdleTimers, AQueueThatEmptiesAndFillsAgainStillExpiresItsDeadlines) {
  const auto clock = ManualClock::create();
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  asio::io_context ioc;
  ASSERT_EQ(sequential_calls(ioc, shield, 2), 2);
  ASSERT_TRUE(ioc.stopped());
  // A later call on the same queue arms its timer again and is timed out.
  std::optional<error_code> got;
  shield.execute_async(test::CompletesOnCancel{},
                       asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  ioc.restart();
  drain(ioc);
  EXPECT_FALSE(ioc.stopped()) << "the deadline's timer wait is work";
  clock->advance(1s);
  drain(ioc);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_TRUE(ioc.stopped());
}

TEST(IdleTimers, ALoopRunInsideAnotherLoopsHandlerStopsToo) {
  // A completion handler of one loop runs calls on a local loop of its own, then destroys it: the
  // local loop's queue is released while the outer handler still runs, and nothing touches it
  // after its context is gone.
  const auto clock = ManualClock::create();
  const Shield shield = Shield{}.timeout(30s).with_clock(clock);
  asio::io_context outer;
  bool local_stopped = false;
  std::optional<error_code> outer_result;
  shield.execute_async(
      [&](auto token) { return test::async_answer(outer.get_executor(), {}, 1, std::move(token)); },
      asio::bind_executor(outer, [&](error_code ec, int) {
        outer_result = ec;
        asio::io_context local;
        EXPECT_EQ(sequential_calls(local, shield, 3), 3);
        local_stopped = local.stopped();
      }));
  drain(outer);
  ASSERT_TRUE(outer_result.has_value());
  EXPECT_TRUE(local_stopped) << "the local loop's deadline timer outlived its calls";
  EXPECT_TRUE(outer.stopped());
  EXPECT_EQ(clock->pending_timers(), 0u);
}

TEST(IdleTimers, ABusyLoopStartsOneTimerWaitForAllItsCalls) {
  // Each call arms its deadline and disarms it when it completes; the next call starts from the
  // completion, before the idle sweep runs, so the timer armed by the first call stays armed.
  const auto clock = std::make_shared<CountingClock>();
  const Shield shield = Shield{}.timeout(30s).with_clock(clock);
  asio::io_context ioc;
  ASSERT_EQ(sequential_calls(ioc, shield, 200), 200);
  EXPECT_EQ(clock->waits.load(), 1) << "a timer wait per call is a timerfd_settime per call";
  EXPECT_EQ(clock->cancels.load(), 1) << "released once, after the last call";
  EXPECT_TRUE(ioc.stopped());
}

TEST(IdleTimers, ALoopThatPostsItsNextCallKeepsItsTimerToo) {
  // A callback that posts the next call instead of starting it: the sweep looks twice before it
  // releases the timer, so the posted call arms in between.
  const auto clock = std::make_shared<CountingClock>();
  const Shield shield = Shield{}.timeout(30s).with_clock(clock);
  asio::io_context ioc;
  int remaining = 100;
  int done = 0;
  std::function<void()> next = [&] {
    shield.execute_async(
        [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 1, std::move(token)); },
        asio::bind_executor(ioc, [&](error_code ec, int) {
          done += ec ? 0 : 1;
          if (--remaining > 0) asio::post(ioc, next);
        }));
  };
  next();
  drain(ioc);
  EXPECT_EQ(done, 100);
  EXPECT_EQ(clock->waits.load(), 1);
  EXPECT_EQ(clock->cancels.load(), 1);
  EXPECT_TRUE(ioc.stopped());
}

}  // namespace
}  // namespace kevlar
