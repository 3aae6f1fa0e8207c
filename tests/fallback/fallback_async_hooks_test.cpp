// The fallback's coroutine hooks (a coroutine on_fallback) and coroutine recovery (a coroutine
// recovery): Kevlar's order, every execution shape, failures, and the caller's cancellation
// reaching what they await.
#include <kevlar/fallback.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/timeout.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

struct Down : std::runtime_error {
  Down() : std::runtime_error("down") {}
};

/// Options whose on_fallback and recovery are coroutines that record their order. (The plain and
/// the coroutine form of each are one option now: a fallback runs one on_fallback.)
FallbackOptions<int> recorded(std::vector<std::string>& log) {
  FallbackOptions<int> o;
  o.on_fallback = [&log](FallbackEvent<int> e) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.emplace_back(std::string("on_fallback:") +
                     (e.outcome.has_exception() ? "exception" : "error"));
  };
  o.recovery = [&log](Outcome<int> failed, Context&) -> asio::awaitable<int> {
    co_await asio::post(asio::use_awaitable);
    log.emplace_back("recovery");
    co_return failed.has_error() ? -2 : -1;
  };
  return o;
}

/// Runs one asynchronous execution through `shield` whose operation fails with connection_reset,
/// on an io_context of its own, and returns what it completed with.
std::optional<std::pair<error_code, int>> recover_reset(const Shield& shield) {
  asio::io_context io;
  std::optional<std::pair<error_code, int>> got;
  shield.execute_async(
      [&](auto token) {
        return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_executor(io, [&](error_code ec, int v) { got.emplace(ec, v); }));
  io.run();
  return got;
}

TEST(FallbackAsyncHooks, ASynchronousCallAwaitsThemInOrder) {
  std::vector<std::string> log;
  const Shield shield = Shield{}.fallback(recorded(log));
  EXPECT_EQ(shield.execute([]() -> int { throw Down(); }), -1);
  EXPECT_EQ(log, (std::vector<std::string>{"on_fallback:exception", "recovery"}));
  EXPECT_EQ(shield.execute([] { return 4; }), 4);  // a success passes untouched
  EXPECT_EQ(log.size(), 2u);
}

TEST(FallbackAsyncHooks, AnAsynchronousCallGetsTheRecoveredValue) {
  std::vector<std::string> log;
  const std::optional<std::pair<error_code, int>> got =
      recover_reset(Shield{}.fallback(recorded(log)));
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->first);
  EXPECT_EQ(got->second, -2);
  EXPECT_EQ(log, (std::vector<std::string>{"on_fallback:error", "recovery"}));
}

TEST(FallbackAsyncHooks, ACoroutineCallRecoversToo) {
  std::vector<std::string> log;
  asio::io_context io;
  int result = 0;
  const Shield shield = Shield{}.fallback(recorded(log));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        result = co_await shield.execute_async([]() -> asio::awaitable<int> {
          co_await asio::post(asio::use_awaitable);
          throw Down();
        });
      },
      asio::detached);
  io.run();
  EXPECT_EQ(result, -1);
}

TEST(FallbackAsyncHooks, AFailingHookSkipsTheRecoveryAndIsTheOutcome) {
  FallbackOptions<int> o;
  bool recovered = false;
  o.on_fallback = [](FallbackEvent<int>) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    throw std::domain_error("hook");
  };
  o.recovery = [&recovered](const Outcome<int>&, Context&) {
    recovered = true;
    return 0;
  };
  const Outcome<int> out = Shield{}.fallback(o).execute_outcome([]() -> int { throw Down(); });
  ASSERT_TRUE(out.has_exception());
  EXPECT_THROW(std::rethrow_exception(out.exception()), std::domain_error);
  EXPECT_FALSE(recovered);
}

// Mixed forms: a function on_fallback runs inline, before the coroutine recovery is awaited; if
// it throws, the recovery never starts and its exception is the outcome.
TEST(FallbackAsyncHooks, AFunctionOnFallbackRunsBeforeACoroutineRecovery) {
  std::vector<std::string> log;
  FallbackOptions<int> o = recorded(log);
  o.on_fallback = [&log](const FallbackEvent<int>& e) {
    log.emplace_back(std::string("on_fallback:") +
                     (e.outcome.has_exception() ? "exception" : "error"));
  };
  ASSERT_TRUE(o.on_fallback.is_function());
  const std::optional<std::pair<error_code, int>> got = recover_reset(Shield{}.fallback(o));
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->first);
  EXPECT_EQ(got->second, -2);
  EXPECT_EQ(log, (std::vector<std::string>{"on_fallback:error", "recovery"}));

  log.clear();
  o.on_fallback = [](const FallbackEvent<int>&) { throw std::domain_error("hook"); };
  const Outcome<int> out = Shield{}.fallback(o).execute_outcome([]() -> int { throw Down(); });
  ASSERT_TRUE(out.has_exception());
  EXPECT_THROW(std::rethrow_exception(out.exception()), std::domain_error);
  EXPECT_TRUE(log.empty());  // the coroutine recovery never started
}

TEST(FallbackAsyncHooks, TheCallersCancellationReachesTheAsynchronousRecovery) {
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  asio::cancellation_signal cancel;
  FallbackOptions<int> o;
  o.recovery = [&](Outcome<int>, Context&) -> asio::awaitable<int> {
    co_await hour.async_wait(asio::use_awaitable);
    co_return 1;
  };
  std::optional<error_code> got;
  Shield{}.fallback(o).execute_async(
      [&](auto token) {
        return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_cancellation_slot(cancel.slot(),
                                   asio::bind_executor(io, [&](error_code ec, int) { got = ec; })));
  for (int i = 0; i < 5; ++i) io.poll();
  EXPECT_FALSE(got.has_value());
  cancel.emit(asio::cancellation_type::terminal);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, asio::error::operation_aborted);
}

TEST(FallbackAsyncHooks, VoidCallsAwaitTheirRecovery) {
  std::vector<std::string> log;
  FallbackOptions<void> o;
  o.on_fallback = [&log](FallbackEvent<void>) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.emplace_back("hook");
  };
  o.recovery = [&log](Outcome<void> failed, Context&) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.emplace_back(failed.has_exception() ? "recovered exception" : "recovered");
  };
  Shield{}.fallback(o).execute([] { throw Down(); });
  EXPECT_EQ(log, (std::vector<std::string>{"hook", "recovered exception"}));
}

int throw_down() {
  throw Down();
}

void throw_down_void() {
  throw Down();
}

TEST(FallbackAsyncHooks, AnAsynchronousHookWithoutARecoveryIsFollowedByTheFixedValue) {
  std::vector<std::string> log;
  FallbackOptions<int> o;
  o.value = 9;
  o.on_fallback = [&log](FallbackEvent<int> e) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.emplace_back(e.outcome.has_exception() ? "hook exception" : "hook");
  };
  const Shield shield = Shield{}.fallback(o);
  EXPECT_EQ(shield.execute(&throw_down), 9);
  EXPECT_EQ(log, (std::vector<std::string>{"hook exception"}));
}

TEST(FallbackAsyncHooks, ASynchronousRecoveryRunsAfterTheAsynchronousHook) {
  std::vector<std::string> log;
  FallbackOptions<int> o;
  o.on_fallback = [&log](FallbackEvent<int>) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.emplace_back("hook");
  };
  o.recovery = [&log](const Outcome<int>& failed, Context&) {
    log.emplace_back("recovery");
    return failed.has_exception() ? 11 : 12;
  };
  EXPECT_EQ(Shield{}.fallback(o).execute(&throw_down), 11);
  EXPECT_EQ(log, (std::vector<std::string>{"hook", "recovery"}));

  std::vector<std::string> void_log;
  FallbackOptions<void> v;
  v.on_fallback = [&void_log](FallbackEvent<void>) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    void_log.emplace_back("hook");
  };
  v.recovery = [&void_log](const Outcome<void>& failed, Context&) {
    void_log.emplace_back(failed.has_exception() ? "recovered exception" : "recovered");
  };
  EXPECT_NO_THROW(Shield{}.fallback(v).execute(&throw_down_void));
  EXPECT_EQ(void_log, (std::vector<std::string>{"hook", "recovered exception"}));
}

/// A value type without a default constructor: fallbacks of it must compile and work, with or
/// without coroutine hooks.
struct Money {
  explicit Money(int c) : cents(c) {}
  int cents;
};

TEST(FallbackAsyncHooks, AValueTypeWithoutADefaultConstructorWorks) {
  EXPECT_EQ(Shield{}.fallback(Money{5}).execute([]() -> Money { throw Down(); }).cents, 5);
  FallbackOptions<Money> o;
  o.recovery = [](Outcome<Money>, Context&) -> asio::awaitable<Money> {
    co_await asio::post(asio::use_awaitable);
    co_return Money{7};
  };
  EXPECT_EQ(Shield{}.fallback(o).execute([]() -> Money { throw Down(); }).cents, 7);
  EXPECT_EQ(Shield{}.fallback(o).execute([] { return Money{1}; }).cents, 1);
}

TEST(FallbackAsyncHooks, OptionsAreValidated) {
  FallbackOptions<int> coroutine_only;
  coroutine_only.recovery = [](Outcome<int>, Context&) -> asio::awaitable<int> { co_return 1; };
  EXPECT_NO_THROW((void)Shield{}.fallback(coroutine_only));
  coroutine_only.value = 3;
  EXPECT_THROW((void)Shield{}.fallback(coroutine_only), std::invalid_argument);
}

}  // namespace
}  // namespace kevlar
