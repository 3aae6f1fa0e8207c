// What asynchronous code sees of its execution: Context::shield_name() (the name of the shield
// running the execution, in the function, the hooks and every attempt; nullptr when unnamed), and
// awaitable factories that take the attempt's Context (its number, properties, deadline).
#include <kevlar/kevlar.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

std::string name_of(const Context& c) {
  return c.shield_name() != nullptr ? *c.shield_name() : std::string("<unnamed>");
}

TEST(ContextName, TheFunctionAndTheHooksSeeTheShieldsName) {
  std::vector<std::string> seen;
  RetryOptions r;
  r.max_retries = 1;
  r.backoff = Backoff::none();
  r.on_retry = [&seen](const RetryEvent& e) { seen.push_back("hook:" + name_of(e.context)); };
  const Shield shield = Shield{}.retry(r).with_name("payments");
  int n = 0;
  EXPECT_EQ(shield.execute([&](Context& c) {
    seen.push_back("call:" + name_of(c));
    if (n++ == 0) throw std::runtime_error("once");
    return 1;
  }),
            1);
  EXPECT_EQ(seen, (std::vector<std::string>{"call:payments", "hook:payments", "call:payments"}));
  // Renaming makes a new shield; the old one keeps its name.
  seen.clear();
  (void)shield.with_name("billing").execute_outcome([&](Context& c) {
    seen.push_back(name_of(c));
    return 2;
  });
  (void)shield.execute_outcome([&](Context& c) {
    seen.push_back(name_of(c));
    return 2;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"billing", "payments"}));
}

TEST(ContextName, UnnamedAndEmptyShields) {
  std::vector<std::string> seen;
  const auto record = [&](Context& c) {
    seen.push_back(name_of(c));
    return 0;
  };
  (void)Shield{}.retry(1).execute(record);
  (void)Shield{}.execute(record);
  (void)Shield{}.with_name("empty").execute(record);
  EXPECT_EQ(seen, (std::vector<std::string>{"<unnamed>", "<unnamed>", "empty"}));
}

TEST(ContextName, AsynchronousAttemptsAndHedgesSeeIt) {
  asio::io_context io;
  std::vector<std::string> seen;
  std::optional<int> got;
  const Shield shield = Shield{}.hedge(2, 0ms).with_name("search");
  shield.execute_async(
      [&](auto token) {
        if (const Context* c = attempt_context(token)) seen.push_back(name_of(*c));
        return test::async_answer(io.get_executor(), {}, 7, std::move(token));
      },
      asio::bind_executor(io, [&](boost::system::error_code, int v) { got = v; }));
  io.run();
  EXPECT_EQ(got, 7);
  EXPECT_EQ(seen, (std::vector<std::string>{"search", "search"}));
}

/// Runs `body` as a coroutine on a fresh io_context until it finishes.
template <class Body>
void run_coroutine(Body body) {
  asio::io_context io;
  asio::co_spawn(io, body(), [](std::exception_ptr ep) {
    if (ep) std::rethrow_exception(ep);
  });
  io.run();
}

TEST(AsyncContext, AFactoryTakingTheContextSeesEachAttempt) {
  const Key<std::string> tenant{"tenant"};
  std::vector<std::uint32_t> attempts;
  std::vector<bool> deadlines;
  std::vector<std::string> tenants;
  RetryOptions r;
  r.max_retries = 2;
  r.backoff = Backoff::none();
  r.on_retry = [&](const RetryEvent& e) { e.context.properties().set(tenant, std::string("t42")); };
  const Shield shield = Shield{}.timeout(10s).retry(r).with_name("inventory");
  int result = 0;
  run_coroutine([&]() -> asio::awaitable<void> {
    result = co_await shield.execute_async([&](Context& c) -> asio::awaitable<int> {
      attempts.push_back(c.attempt());
      deadlines.push_back(c.deadline() != Clock::time_point::max());
      tenants.push_back(c.properties().get_or(tenant, std::string("-")));
      EXPECT_EQ(name_of(c), "inventory");
      co_await asio::post(asio::use_awaitable);
      if (c.attempt() < 3) throw std::runtime_error("not yet");
      co_return 3;
    });
  });
  EXPECT_EQ(result, 3);
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(deadlines, (std::vector<bool>{true, true, true})) << "the timeout's budget";
  EXPECT_EQ(tenants, (std::vector<std::string>{"-", "t42", "t42"}));
}

TEST(AsyncContext, AContextFactoryWorksWithATokenAndOnAnEmptyShield) {
  asio::io_context io;
  std::vector<std::uint32_t> seen;
  std::optional<int> got;
  Shield{}.retry(1).execute_async(
      [&](Context& c) -> asio::awaitable<int> {
        seen.push_back(c.attempt());
        co_return 5;
      },
      asio::bind_executor(io, [&](std::exception_ptr ep, int v) {
        EXPECT_FALSE(ep);
        got = v;
      }));
  io.run();
  EXPECT_EQ(got, 5);
  int empty_result = 0;
  run_coroutine([&]() -> asio::awaitable<void> {
    empty_result = co_await Shield{}.execute_async([&](Context& c) -> asio::awaitable<int> {
      seen.push_back(c.attempt());
      EXPECT_FALSE(c.cancelled());
      co_return 6;
    });
  });
  EXPECT_EQ(empty_result, 6);
  std::string empty_name;
  run_coroutine([&]() -> asio::awaitable<void> {
    (void)co_await Shield{}.with_name("empty").execute_async(
        [&](Context& c) -> asio::awaitable<int> {
          empty_name = name_of(c);
          co_return 0;
        });
  });
  EXPECT_EQ(empty_name, "empty") << "an empty shield's context carries its name";
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 0}))
      << "an empty shield runs no attempt accounting, as for synchronous calls";
}

TEST(AsyncContext, HedgedAttemptsHaveTheirOwnContext) {
  const Key<int> replica{"replica"};
  HedgeOptions h;
  h.max_attempts = 2;
  h.delay = 0ms;
  h.action_generator = [&](const HedgeActionArguments& a) { a.context.properties().set(replica, 2); };
  std::vector<int> replicas;
  int result = 0;
  run_coroutine([&]() -> asio::awaitable<void> {
    result = co_await Shield{}.hedge(h).execute_async([&](Context& c) -> asio::awaitable<int> {
      replicas.push_back(c.properties().get_or(replica, 1));
      co_await asio::post(asio::use_awaitable);
      co_return c.properties().get_or(replica, 1) * 10;
    });
  });
  EXPECT_EQ(replicas, (std::vector<int>{1, 2}));
  EXPECT_EQ(result, 10) << "the first attempt to finish wins";
}

}  // namespace
}  // namespace kevlar
