// Coroutines that return asio::awaitable<void> through execute_async, in every form: co_awaited
// directly, with deferred and use_awaitable, with a callback taking void(std::exception_ptr), and
// inside retry, hedging and a FallbackOptions<void> fallback.
#include "test_strategies.hpp"

#include <boom.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

using test::Boom;

void rethrow(std::exception_ptr ep) {
  if (ep) std::rethrow_exception(ep);
}

/// A write that returns nothing: it records that it ran, after one trip through the executor.
asio::awaitable<void> write(int& writes) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  ++writes;
}

/// A write that fails the first `failures` times it is called.
asio::awaitable<void> flaky_write(int& calls, int failures) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  if (++calls <= failures) throw Boom();
}

std::vector<Shield> shields() {
  RetryOptions retry;
  retry.max_retries = 2;
  retry.backoff = Backoff::none();  // no real time passes between attempts
  return {Shield{}, Shield{}.use(std::make_shared<test::PassThrough>()),
          Shield{}.timeout(10s).retry(retry).circuit_breaker(5, 30s)};
}

TEST(VoidAwaitable, CoAwaitedDirectlyAndThroughTokens) {
  for (const Shield& shield : shields()) {
    asio::io_context ioc;
    int writes = 0;
    int checks = 0;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          co_await shield.execute_async([&] { return write(writes); });
          ++checks;
          co_await shield.execute_async([&] { return write(writes); }, asio::deferred);
          ++checks;
          co_await shield.execute_async([&] { return write(writes); }, asio::use_awaitable);
          ++checks;
          auto [ep] = co_await shield.execute_async([&] { return write(writes); },
                                                    asio::as_tuple(asio::deferred));
          EXPECT_FALSE(ep);
          ++checks;
          // A factory that takes the attempt's context.
          // (An empty shield runs no execution: its context counts no attempt.)
          co_await shield.execute_async([&](Context& ctx) {
            EXPECT_EQ(ctx.attempt(), shield.empty() ? 0u : 1u);
            return write(writes);
          });
          ++checks;
        },
        rethrow);
    ioc.run();
    EXPECT_EQ(checks, 5) << shield.describe();
    EXPECT_EQ(writes, 5) << shield.describe();
  }
}

TEST(VoidAwaitable, ExceptionsPropagateFromTheCoAwait) {
  for (const Shield& shield : shields()) {
    asio::io_context ioc;
    int calls = 0;
    bool caught = false;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          try {
            co_await shield.execute_async([&] { return flaky_write(calls, 100); });
          } catch (const Boom&) {
            caught = true;
          }
        },
        rethrow);
    ioc.run();
    EXPECT_TRUE(caught) << shield.describe();
  }
}

TEST(VoidAwaitable, CallbackReceivesAnExceptionPtrOnly) {
  asio::io_context ioc;
  int writes = 0;
  int calls = 0;
  std::vector<std::exception_ptr> results;
  const Shield shield = Shield{}.timeout(10s);
  shield.execute_async([&] { return write(writes); },
                       asio::bind_executor(ioc, [&](std::exception_ptr ep) { results.push_back(ep); }));
  shield.execute_async([&] { return flaky_write(calls, 100); },
                       asio::bind_executor(ioc, [&](std::exception_ptr ep) { results.push_back(ep); }));
  ioc.run();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[0]);
  EXPECT_THROW(rethrow(results[1]), Boom);
  EXPECT_EQ(writes, 1);
}

TEST(VoidAwaitable, RetriedUntilItSucceeds) {
  asio::io_context ioc;
  int calls = 0;
  RetryOptions o;
  o.max_retries = 3;
  o.backoff = Backoff::none();
  const Shield shield = Shield{}.retry(o);
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        co_await shield.execute_async([&] { return flaky_write(calls, 2); });
        done = true;
      },
      rethrow);
  ioc.run();
  EXPECT_TRUE(done);
  EXPECT_EQ(calls, 3);
}

TEST(VoidAwaitable, HedgedAttemptsOfAVoidCoroutine) {
  asio::io_context ioc;
  int starts = 0;
  int finished = 0;
  // Every attempt starts at once; the first to finish wins, the other is cancelled.
  const Shield shield = Shield{}.hedge(2, 0ms);
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        co_await shield.execute_async([&]() -> asio::awaitable<void> {
          const int me = ++starts;
          asio::steady_timer t(co_await asio::this_coro::executor, me == 1 ? 1h : 0ms);
          co_await t.async_wait(asio::use_awaitable);  // the loser's wait is cancelled
          ++finished;
        });
        done = true;
      },
      rethrow);
  ioc.run();
  EXPECT_TRUE(done);
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(finished, 1);
}

TEST(VoidAwaitable, FallbackOfVoidReplacesTheFailure) {
  asio::io_context ioc;
  int calls = 0;
  int fallbacks = 0;
  FallbackOptions<void> o;
  o.recovery = [&](const Outcome<void>&, Context&) { ++fallbacks; };
  const Shield shield = Shield{}.fallback(o);
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        co_await shield.execute_async([&] { return flaky_write(calls, 100); });
        done = true;
      },
      rethrow);
  ioc.run();
  EXPECT_TRUE(done);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(fallbacks, 1);
}

}  // namespace
}  // namespace kevlar
