// Retry through Shield::execute: the loop, clauses, hooks, caps and cancellation, on a
// ManualClock (synchronous waits are released by another thread advancing the clock).
#include <boom.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

// g++ 12 reports designated initializers that leave out members with default initializers
// (the intended way to write kevlar's options) under -Wextra.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

using test::Boom;
struct Other : std::runtime_error {
  Other() : std::runtime_error("other") {}
};

RetryOptions no_delay(int n) {
  return RetryOptions{.max_retries = n, .backoff = Backoff::none()};
}

TEST(RetrySync, RetriesUntilSuccess) {
  const Shield shield = Shield{}.retry(no_delay(2));
  std::vector<std::uint32_t> attempts;
  const int v = shield.execute([&](Context& ctx) {
    attempts.push_back(ctx.attempt());
    if (attempts.size() < 3) throw Boom(static_cast<int>(attempts.size()));
    return 7;
  });
  EXPECT_EQ(v, 7);
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(RetrySync, ExhaustedRetriesSurfaceTheLastFailureObject) {
  const Shield shield = Shield{}.retry(no_delay(2));
  std::vector<std::exception_ptr> thrown;
  std::exception_ptr caught;
  try {
    (void)shield.execute([&]() -> int {
      thrown.push_back(std::make_exception_ptr(Boom(static_cast<int>(thrown.size()) + 1)));
      std::rethrow_exception(thrown.back());
    });
  } catch (const Boom&) {
    caught = std::current_exception();
  }
  ASSERT_EQ(thrown.size(), 3U);
  EXPECT_EQ(caught, thrown[2]) << "the third exception, the very object";
  EXPECT_NE(caught, thrown[0]);
}

TEST(RetrySync, ZeroRetriesCallsOnce) {
  int calls = 0;
  EXPECT_THROW((void)Shield{}.retry(0).execute([&]() -> int { throw Boom(++calls); }), Boom);
  EXPECT_EQ(calls, 1);
}

TEST(RetrySync, UnhandledExceptionIsNotRetried) {
  const Shield shield = Shield{}.when(Clause().exception<Boom>()).retry(no_delay(3));
  int calls = 0;
  EXPECT_THROW((void)shield.execute([&]() -> int {
    ++calls;
    throw Other();
  }),
               Other);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_THROW((void)shield.execute([&]() -> int { throw Boom(++calls); }), Boom);
  EXPECT_EQ(calls, 4) << "the clause's own exception type is retried";
}

TEST(RetrySync, CancellationIsNotRetriedByDefaultButCanBeOptedInto) {
  int calls = 0;
  auto cancelled = [&]() -> int {
    ++calls;
    throw Error(asio::error::operation_aborted);
  };
  EXPECT_THROW((void)Shield{}.retry(no_delay(3)).execute(cancelled), Error);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_THROW((void)Shield{}
                   .when(Clause().error(asio::error::operation_aborted))
                   .retry(no_delay(3))
                   .execute(cancelled),
               Error);
  EXPECT_EQ(calls, 4);
}

TEST(RetrySync, ResultClauseRetriesBadResultsAndNotExceptions) {
  const Shield shield = Shield{}.when(Clause().result_equal(-1)).retry(no_delay(3));
  int calls = 0;
  EXPECT_EQ(shield.execute([&] { return ++calls < 3 ? -1 : 5; }), 5);
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_EQ(shield.execute([&] {
    ++calls;
    return -1;
  }),
            -1)
      << "exhausted: the last (bad) result surfaces";
  EXPECT_EQ(calls, 4);
  calls = 0;
  EXPECT_THROW((void)shield.execute([&]() -> int { throw Boom(++calls); }), Boom);
  EXPECT_EQ(calls, 1);
}

TEST(RetrySync, NestedRetriesMultiply) {
  int calls = 0;
  EXPECT_THROW((void)Shield{}.retry(no_delay(2)).retry(no_delay(2)).execute([&]() -> int {
    throw Boom(++calls);
  }),
               Boom);
  EXPECT_EQ(calls, 9);
}

TEST(RetrySync, CancellationDuringAnAttemptReturnsTheOriginalFailure) {
  std::stop_source stop;
  int calls = 0;
  int retries = 0;
  const Shield shield = Shield{}.retry(RetryOptions{
      .max_retries = 3, .backoff = Backoff::none(), .on_retry = [&](const RetryEvent&) {
        ++retries;
      }});
  try {
    (void)shield.execute(
        [&]() -> int {
          ++calls;
          stop.request_stop();  // the caller gives up while the attempt runs
          throw Boom(calls);
        },
        stop.get_token());
    ADD_FAILURE() << "no exception";
  } catch (const Boom& e) {
    EXPECT_EQ(e.n, 1);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(retries, 0);
}

TEST(RetrySync, CancellationInsideOnRetryEndsWithOperationAborted) {
  std::stop_source stop;
  int calls = 0;
  std::vector<std::string> log;
  const Shield shield = Shield{}.retry(
      RetryOptions{.max_retries = 3,
                   .backoff = Backoff::constant(1h),
                   .delay_generator = [&](const RetryEvent&) -> std::optional<Clock::duration> {
                     log.push_back("generator");
                     return std::nullopt;
                   },
                   .on_retry =
                       [&](const RetryEvent&) {
                         log.push_back("on_retry");
                         stop.request_stop();
                       }});
  try {
    (void)shield.execute([&]() -> int { throw Boom(++calls); }, stop.get_token());
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.error(), asio::error::operation_aborted);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(log, (std::vector<std::string>{"generator", "on_retry"}))
      << "the round's hooks all run";
}

TEST(RetrySync, BackoffBlocksOnTheShieldsClockAndReleasesExactlyAtTheDelay) {
  auto clock = ManualClock::create();
  const Shield shield = Shield{}
                            .retry(RetryOptions{.max_retries = 1, .backoff = Backoff::constant(2s)})
                            .with_clock(clock);
  std::atomic<int> calls{0};
  std::vector<Clock::time_point> starts;
  std::thread t([&] {
    EXPECT_EQ(shield.execute([&] {
      starts.push_back(clock->now());
      if (calls.fetch_add(1) == 0) throw Boom(1);
      return 3;
    }),
              3);
  });
  clock->wait_for_sleepers(1);
  EXPECT_EQ(calls.load(), 1);
  clock->advance(1999ms);
  EXPECT_EQ(clock->sleepers(), 1U) << "1.999 s does not release a 2 s backoff";
  EXPECT_EQ(calls.load(), 1);
  clock->advance(1ms);
  t.join();
  EXPECT_EQ(calls.load(), 2);
  ASSERT_EQ(starts.size(), 2U);
  EXPECT_EQ(starts[1] - starts[0], 2s);
}

TEST(RetrySync, MaxDelayCapsARetryAfterGenerator) {
  auto clock = ManualClock::create();
  std::vector<Clock::duration> generator_saw;
  std::vector<Clock::duration> on_retry_saw;
  const Shield shield =
      Shield{}
          .retry(RetryOptions{
              .max_retries = 1,
              .backoff = Backoff::constant(2s),
              .max_delay = 10s,
              .delay_generator = [&](const RetryEvent& e) -> std::optional<Clock::duration> {
                generator_saw.push_back(e.delay);
                return 1h;  // a server's "retry after"
              },
              .on_retry = [&](const RetryEvent& e) { on_retry_saw.push_back(e.delay); }})
          .with_clock(clock);
  std::atomic<int> calls{0};
  std::thread t([&] {
    EXPECT_EQ(shield.execute([&] {
      if (calls.fetch_add(1) == 0) throw Boom(1);
      return 1;
    }),
              1);
  });
  clock->wait_for_sleepers(1);
  clock->advance(9999ms);
  EXPECT_EQ(clock->sleepers(), 1U) << "9.999 s does not release the capped 10 s wait";
  EXPECT_EQ(calls.load(), 1);
  clock->advance(1ms);
  t.join();
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(generator_saw, (std::vector<Clock::duration>{2s}));
  EXPECT_EQ(on_retry_saw, (std::vector<Clock::duration>{10s}));
}

TEST(RetrySync, CancellationDuringTheBackoffEndsWithOperationAborted) {
  auto clock = ManualClock::create();
  const Shield shield = Shield{}
                            .retry(RetryOptions{.max_retries = 3, .backoff = Backoff::constant(1h)})
                            .with_clock(clock);
  std::stop_source stop;
  std::atomic<int> calls{0};
  std::thread t([&] {
    try {
      (void)shield.execute([&]() -> int { throw Boom(calls.fetch_add(1) + 1); }, stop.get_token());
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.error(), asio::error::operation_aborted);
    }
  });
  clock->wait_for_sleepers(1);
  stop.request_stop();
  t.join();
  EXPECT_EQ(calls.load(), 1);
}

TEST(RetrySync, HooksRunInKevlarsOrderWithTheEvent) {
  std::vector<std::string> log;
  const Shield shield = Shield{}.retry(
      RetryOptions{.max_retries = 2,
                   .backoff = Backoff::none(),
                   .delay_generator = [&](const RetryEvent& e) -> std::optional<Clock::duration> {
                     log.push_back("generator " + std::to_string(e.attempt) + " ctx " +
                                   std::to_string(e.context.attempt()));
                     return std::nullopt;
                   },
                   .on_retry =
                       [&](const RetryEvent& e) {
                         EXPECT_TRUE(e.outcome.has_exception());
                         std::string what;
                         try {
                           std::rethrow_exception(e.outcome.exception());
                         } catch (const Boom& b) {
                           what = b.what();
                         }
                         log.push_back("on_retry " + std::to_string(e.attempt) + " " + what);
                       }});
  int calls = 0;
  EXPECT_EQ(shield.execute([&] {
    log.push_back("call " + std::to_string(++calls));
    if (calls < 3) throw Boom(calls);
    return 0;
  }),
            0);
  EXPECT_EQ(log,
            (std::vector<std::string>{"call 1", "generator 1 ctx 1", "on_retry 1 boom 1", "call 2",
                                      "generator 2 ctx 2", "on_retry 2 boom 2", "call 3"}));
}

TEST(RetrySync, GeneratorNulloptOrNegativeKeepsTheDelayAndValuesReplaceIt) {
  std::vector<Clock::duration> seen;
  int round = 0;
  const Shield shield = Shield{}.retry(
      RetryOptions{.max_retries = 3,
                   .backoff = Backoff::none(),
                   .delay_generator = [&](const RetryEvent&) -> std::optional<Clock::duration> {
                     ++round;
                     if (round == 1) return std::nullopt;
                     if (round == 2) return -1s;
                     return 0ms;
                   },
                   .on_retry = [&](const RetryEvent& e) { seen.push_back(e.delay); }});
  EXPECT_THROW((void)shield.execute([]() -> int { throw Boom(0); }), Boom);
  EXPECT_EQ(seen, (std::vector<Clock::duration>{0s, 0s, 0s}));
}

TEST(RetrySync, HookExceptionsSurfaceWithTheirIdentityAndStopTheLoop) {
  const auto hook_error = std::make_exception_ptr(Other());
  int calls = 0;
  int on_retry_calls = 0;
  const Shield throwing_generator = Shield{}.retry(
      RetryOptions{.max_retries = 3,
                   .backoff = Backoff::none(),
                   .delay_generator = [&](const RetryEvent&) -> std::optional<Clock::duration> {
                     std::rethrow_exception(hook_error);
                   },
                   .on_retry = [&](const RetryEvent&) { ++on_retry_calls; }});
  std::exception_ptr caught;
  try {
    (void)throwing_generator.execute([&]() -> int { throw Boom(++calls); });
  } catch (...) {
    caught = std::current_exception();
  }
  EXPECT_EQ(caught, hook_error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(on_retry_calls, 0) << "a generator failure skips on_retry";

  calls = 0;
  caught = nullptr;
  const Shield throwing_hook = Shield{}.retry(RetryOptions{
      .max_retries = 3, .backoff = Backoff::none(), .on_retry = [&](const RetryEvent&) {
        std::rethrow_exception(hook_error);
      }});
  try {
    (void)throwing_hook.execute([&]() -> int { throw Boom(++calls); });
  } catch (...) {
    caught = std::current_exception();
  }
  EXPECT_EQ(caught, hook_error);
  EXPECT_EQ(calls, 1);
}

TEST(RetrySync, PropertiesAreTheSameBagAcrossAttempts) {
  const Key<int> key("tries");
  const int v = Shield{}.retry(no_delay(3)).execute([&](Context& ctx) {
    const int n = ctx.properties().get_or(key, 0) + 1;
    ctx.properties().set(key, n);
    if (n < 3) throw Boom(n);
    return n;
  });
  EXPECT_EQ(v, 3);
}

TEST(RetrySync, ConcurrentExecutionsKeepTheirOwnCounters) {
  // One strategy instance serves many threads; each execution has its own retry count.
  const Shield shield = Shield{}.retry(no_delay(4));
  constexpr int threads = 4;
  constexpr int per_thread = 200;
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const int fail_first = (t + i) % 5;  // 0..4 failures, always within 4 retries
        int calls = 0;
        const int v = shield.execute([&] {
          if (++calls <= fail_first) throw Boom(calls);
          return calls;
        });
        if (v != fail_first + 1) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kevlar
