// The retry's coroutine hooks (a coroutine delay_generator or on_retry: Kevlar's
// DelayGeneratorAsync and OnRetryAsync): their order, the delay rules, failures that end the
// execution, the caller's cancellation reaching what they await, and both execution shapes.
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/timeout.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;

struct Down : std::runtime_error {
  Down() : std::runtime_error("down") {}
};

/// Options whose two hooks are coroutines that record their order and the delay they were given;
/// the generator returns `generated`. (The plain and the coroutine form of each hook are one
/// option now: a retry runs one generator and one on_retry.)
RetryOptions recorded(std::vector<std::string>& log, std::optional<Clock::duration> generated) {
  RetryOptions r;
  r.max_retries = 1;
  r.backoff = Backoff::constant(1h);
  r.delay_generator = [&log,
                       generated](RetryEvent e) -> asio::awaitable<std::optional<Clock::duration>> {
    co_await asio::post(asio::use_awaitable);  // really suspends
    log.push_back("gen:" + std::to_string(e.delay / 1ms) + ":" +
                  std::to_string(e.context.attempt()));
    co_return generated;
  };
  r.on_retry = [&log](RetryEvent e) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.push_back("on_retry:" + std::to_string(e.delay / 1ms) + ":" +
                  (e.outcome.has_exception() ? "exception" : "error"));
  };
  return r;
}

/// An operation that fails with connection_reset on its first call and answers `value` after,
/// on `io`, counting its calls in `calls`.
auto failing_once(asio::io_context& io, int& calls, int value) {
  return [&io, &calls, value](auto token) {
    return test::async_answer(io.get_executor(),
                              ++calls == 1 ? error_code(asio::error::connection_reset)
                                           : error_code(),
                              value, std::move(token));
  };
}

/// Runs `io` until `done()` or for `rounds` polls.
template <class Done>
void poll_until(asio::io_context& io, Done done, int rounds = 10) {
  for (int i = 0; i < rounds && !done(); ++i) {
    io.restart();
    io.poll();
  }
}

TEST(RetryAsyncHooks, SynchronousExecutionsAwaitThemInKevlarsOrder) {
  std::vector<std::string> log;
  // The generator's 0 replaces the backoff's 1 h: no wait at all, so the synchronous call does not
  // block on the clock.
  const Shield shield = Shield{}.retry(recorded(log, 0ms)).with_clock(ManualClock::create());
  int calls = 0;
  EXPECT_EQ(shield.execute([&]() -> int {
    if (++calls == 1) throw Down();
    return 7;
  }),
            7);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(log, (std::vector<std::string>{"gen:3600000:1", "on_retry:0:exception"}));
}

TEST(RetryAsyncHooks, AnEmptyOrNegativeAsyncResultKeepsTheDelayAndTheCapApplies) {
  std::vector<std::string> log;
  auto clock = ManualClock::create();
  asio::io_context io;
  RetryOptions r = recorded(log, std::nullopt);
  r.max_delay = 4s;  // caps the backoff's 1 h
  std::optional<int> got;
  int calls = 0;
  Shield{}.retry(r).with_clock(clock).execute_async(
      failing_once(io, calls, 9), asio::bind_executor(io, [&](error_code ec, int v) {
        EXPECT_FALSE(ec);
        got = v;
      }));
  poll_until(io, [] { return false; });  // the hooks run; then the backoff waits on the clock
  // The backoff's 1 h is capped to 4 s before the generator sees it; its nullopt keeps it.
  EXPECT_EQ(log, (std::vector<std::string>{"gen:4000:1", "on_retry:4000:error"}));
  EXPECT_EQ(clock->pending_deadlines().size(), 1u);  // the 4 s backoff, after the hooks
  EXPECT_EQ(clock->pending_deadlines()[0] - clock->now(), 4s);
  clock->advance(4s);
  poll_until(io, [&] { return got.has_value(); });
  EXPECT_EQ(got, 9);
  EXPECT_EQ(calls, 2);
}

// A coroutine generator's result is capped by max_delay as a function's is: its 5 s becomes 4 s,
// which on_retry sees and the backoff waits.
TEST(RetryAsyncHooks, ACoroutineGeneratorsResultIsCapped) {
  std::vector<std::string> log;
  auto clock = ManualClock::create();
  asio::io_context io;
  RetryOptions r = recorded(log, 5s);
  r.backoff = Backoff::constant(1s);
  r.max_delay = 4s;
  std::optional<int> got;
  int calls = 0;
  Shield{}.retry(r).with_clock(clock).execute_async(
      failing_once(io, calls, 6), asio::bind_executor(io, [&](error_code ec, int v) {
        EXPECT_FALSE(ec);
        got = v;
      }));
  poll_until(io, [] { return false; });
  EXPECT_EQ(log, (std::vector<std::string>{"gen:1000:1", "on_retry:4000:error"}));
  ASSERT_EQ(clock->pending_deadlines().size(), 1u);
  EXPECT_EQ(clock->pending_deadlines()[0] - clock->now(), 4s);
  clock->advance(4s);
  poll_until(io, [&] { return got.has_value(); });
  EXPECT_EQ(got, 6);
  EXPECT_EQ(calls, 2);
}

TEST(RetryAsyncHooks, ANegativeAsyncResultKeepsTheBackoffDelay) {
  auto clock = ManualClock::create();
  asio::io_context io;
  RetryOptions r;
  r.max_retries = 1;
  r.backoff = Backoff::constant(2s);
  r.delay_generator = [](RetryEvent) -> asio::awaitable<std::optional<Clock::duration>> {
    co_await asio::post(asio::use_awaitable);
    co_return -1s;
  };
  std::vector<Clock::duration> delays;
  r.on_retry = [&delays](const RetryEvent& e) { delays.push_back(e.delay); };
  std::optional<int> got;
  int calls = 0;
  Shield{}.retry(r).with_clock(clock).execute_async(
      failing_once(io, calls, 3), asio::bind_executor(io, [&](error_code ec, int v) {
        EXPECT_FALSE(ec);
        got = v;
      }));
  poll_until(io, [] { return false; });
  EXPECT_EQ(delays, (std::vector<Clock::duration>{2s}));
  ASSERT_EQ(clock->pending_deadlines().size(), 1u);
  EXPECT_EQ(clock->pending_deadlines()[0] - clock->now(), 2s);
  clock->advance(2s);
  poll_until(io, [&] { return got.has_value(); });
  EXPECT_EQ(got, 3);
  EXPECT_EQ(calls, 2);
}

TEST(RetryAsyncHooks, AFailingAsyncGeneratorSkipsTheRestAndIsTheOutcome) {
  RetryOptions r;
  r.max_retries = 3;
  r.backoff = Backoff::none();
  int notified = 0;
  r.delay_generator = [](RetryEvent) -> asio::awaitable<std::optional<Clock::duration>> {
    co_await asio::post(asio::use_awaitable);
    throw std::domain_error("generator");
  };
  r.on_retry = [&notified](const RetryEvent&) { ++notified; };
  int calls = 0;
  const Outcome<int> out = Shield{}.retry(r).execute_outcome([&]() -> int {
    ++calls;
    throw Down();
  });
  ASSERT_TRUE(out.has_exception());
  EXPECT_THROW(std::rethrow_exception(out.exception()), std::domain_error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(notified, 0);
}

TEST(RetryAsyncHooks, AFailingCoroutineOnRetryEndsTheExecutionAsynchronouslyToo) {
  asio::io_context io;
  RetryOptions r;
  r.max_retries = 3;
  r.backoff = Backoff::none();
  r.on_retry = [](RetryEvent) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    throw std::domain_error("hook");
  };
  int calls = 0;
  std::optional<error_code> got;
  Shield{}.retry(r).execute_async(
      [&](auto token) {
        ++calls;
        return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_executor(io, [&](error_code ec, int) { got = ec; }));
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::callback_exception);  // an error-code completion cannot carry it
  EXPECT_EQ(calls, 1);
}

TEST(RetryAsyncHooks, TheCallersCancellationReachesWhatAHookAwaits) {
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  asio::cancellation_signal cancel;
  RetryOptions r;
  r.max_retries = 3;
  r.backoff = Backoff::none();
  bool hook_returned = false;
  r.on_retry = [&](RetryEvent) -> asio::awaitable<void> {
    co_await hour.async_wait(asio::use_awaitable);
    hook_returned = true;
  };
  int calls = 0;
  std::optional<error_code> got;
  Shield{}.retry(r).execute_async(
      [&](auto token) {
        ++calls;
        return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_cancellation_slot(cancel.slot(),
                                   asio::bind_executor(io, [&](error_code ec, int) { got = ec; })));
  for (int i = 0; i < 5; ++i) io.poll();  // the call failed and the hook waits on the timer
  EXPECT_FALSE(got.has_value());
  cancel.emit(asio::cancellation_type::terminal);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value()) << "the hook's wait was not cancelled";
  EXPECT_EQ(*got, asio::error::operation_aborted);
  EXPECT_FALSE(hook_returned);
  EXPECT_EQ(calls, 1);
}

TEST(RetryAsyncHooks, ATimeoutOutsideEndsAHooksWaitAsATimeout) {
  auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  RetryOptions r;
  r.max_retries = 3;
  r.backoff = Backoff::none();
  r.delay_generator = [&](RetryEvent) -> asio::awaitable<std::optional<Clock::duration>> {
    co_await hour.async_wait(asio::use_awaitable);
    co_return std::nullopt;
  };
  std::optional<error_code> got;
  Shield{}.timeout(1s).retry(r).with_clock(clock).execute_async(
      [&](auto token) {
        return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_executor(io, [&](error_code ec, int) { got = ec; }));
  for (int i = 0; i < 5; ++i) io.poll();
  clock->advance(1s);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
}

}  // namespace
}  // namespace kevlar
