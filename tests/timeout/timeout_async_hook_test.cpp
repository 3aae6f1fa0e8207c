// The timeout's coroutine hook (a coroutine on_timeout): awaited in both execution shapes before
// the call completes; its exception becomes the outcome; the call still reports errc::timeout
// otherwise.
#include <kevlar/shield.hpp>
#include <kevlar/timeout.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;

// The plain and the coroutine on_timeout are one option now: this checks the coroutine alone, and
// that the call completes only after it.
TEST(TimeoutAsyncHook, AnAsynchronousTimeoutAwaitsACoroutineOnTimeout) {
  auto clock = ManualClock::create();
  asio::io_context io;
  std::vector<std::string> log;
  TimeoutOptions o;
  o.timeout = 1s;
  o.on_timeout = [&log](TimeoutEvent e) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.push_back("on_timeout:" + std::to_string(e.timeout / 1ms));
  };
  std::optional<error_code> got;
  Shield{}.timeout(o).with_clock(clock).execute_async(test::CompletesOnCancel{},
                                                      asio::bind_executor(io, [&](error_code ec) {
                                                        log.emplace_back("completed");
                                                        got = ec;
                                                      }));
  io.poll();
  clock->advance(1s);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_EQ(log, (std::vector<std::string>{"on_timeout:1000", "completed"}));
}

TEST(TimeoutAsyncHook, ASynchronousTimeoutRunsItAndItsFailureIsTheOutcome) {
  auto clock = ManualClock::create();
  TimeoutOptions o;
  o.timeout = 1s;
  int ran = 0;
  o.on_timeout = [&ran](TimeoutEvent) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    if (++ran == 2) throw std::domain_error("hook");
  };
  const Shield shield = Shield{}.timeout(o).with_clock(clock);
  auto slow = [&](Context& c) -> int {
    clock->advance(2s);  // the call takes longer than its budget
    c.throw_if_cancelled();
    return 1;
  };
  const Outcome<int> first = shield.execute_outcome(slow);
  EXPECT_EQ(first.error(), errc::timeout);
  const Outcome<int> second = shield.execute_outcome(slow);
  ASSERT_TRUE(second.has_exception());
  EXPECT_THROW(std::rethrow_exception(second.exception()), std::domain_error);
  EXPECT_EQ(ran, 2);
}

// Only a cancellation outcome becomes the caller's abort: a hook that sees the caller cancel and
// then fails with its own error (without awaiting anything more) leaves that error as the
// outcome.
TEST(TimeoutAsyncHook, AHookFailingWithItsOwnErrorAfterTheCallerCancelledKeepsThatError) {
  auto clock = ManualClock::create();
  std::stop_source stop;
  TimeoutOptions o;
  o.timeout = 1s;
  o.on_timeout = [&stop](TimeoutEvent) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    stop.request_stop();
    throw std::domain_error("hook");
  };
  const Outcome<int> out = Shield{}.timeout(o).with_clock(clock).execute_outcome(
      [&](Context& c) -> int {
        clock->advance(2s);
        c.throw_if_cancelled();
        return 1;
      },
      stop.get_token());
  ASSERT_TRUE(out.has_exception());
  EXPECT_THROW(std::rethrow_exception(out.exception()), std::domain_error);
  EXPECT_TRUE(stop.stop_requested());
}

TEST(TimeoutAsyncHook, TheCallersCancellationWhileItRunsEndsTheCallAsAborted) {
  auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  asio::cancellation_signal cancel;
  bool returned = false;
  TimeoutOptions o;
  o.timeout = 1s;
  o.on_timeout = [&](TimeoutEvent) -> asio::awaitable<void> {
    co_await hour.async_wait(asio::use_awaitable);  // aborted by the caller's cancellation
    returned = true;
  };
  std::optional<error_code> got;
  Shield{}.timeout(o).with_clock(clock).execute_async(
      test::CompletesOnCancel{},
      asio::bind_cancellation_slot(cancel.slot(),
                                   asio::bind_executor(io, [&](error_code ec) { got = ec; })));
  io.poll();
  clock->advance(1s);
  for (int i = 0; i < 10; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_FALSE(got.has_value()) << "the call awaits the hook";
  cancel.emit(asio::cancellation_type::terminal);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value()) << "the hook's wait was not cancelled";
  EXPECT_EQ(*got, asio::error::operation_aborted) << "not the hook's exception, nor a timeout";
  EXPECT_FALSE(returned);
}

}  // namespace
}  // namespace kevlar
