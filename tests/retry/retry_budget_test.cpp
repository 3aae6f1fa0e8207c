// RetryBudget: its three admission rules on their own (sans-I/O, a ManualClock for the rate
// window), then held by retries in synchronous, callback and coroutine executions, shared by
// shields, and bounding a retry storm through three stacked shields.
#include "core/async_ops.hpp"

#include <boom.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/retry_budget.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;
using testing::EventRecorder;

const error_code refused = make_error_code(boost::system::errc::connection_refused);

/// The message of the std::invalid_argument `make` throws ("" if it throws none).
template <class Make>
std::string refusal(Make make) {
  try {
    (void)make();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// ---- the tokens mode ----------------------------------------------------------------------------

TEST(RetryBudgetTokens, StartsFullAndAdmitsOnlyAboveHalfCapacity) {
  const auto b = RetryBudget::tokens({.max_tokens = 10, .token_ratio = 0.1});
  EXPECT_EQ(b->mode(), RetryBudgetMode::tokens);
  EXPECT_DOUBLE_EQ(b->balance(), 10.0);
  for (int i = 0; i < 4; ++i) b->record_failure();
  EXPECT_DOUBLE_EQ(b->balance(), 6.0);
  EXPECT_TRUE(b->try_acquire()) << "6 > 10 / 2";
  EXPECT_DOUBLE_EQ(b->balance(), 6.0) << "admission takes nothing: failures do";
  b->record_failure();
  EXPECT_FALSE(b->allows_additional_attempt()) << "5 is not above half";
  EXPECT_FALSE(b->try_acquire());
  b->record_success();
  EXPECT_DOUBLE_EQ(b->balance(), 5.1);
  EXPECT_TRUE(b->try_acquire());
  const RetryBudgetState s = b->state();
  EXPECT_EQ(s.admitted, 2u);
  EXPECT_EQ(s.exhausted, 1u);
}

TEST(RetryBudgetTokens, TheBalanceStaysWithinZeroAndCapacityAndTheRatioKeepsThreeDecimals) {
  const auto b = RetryBudget::tokens({.max_tokens = 3, .token_ratio = 0.12345});
  for (int i = 0; i < 10; ++i) b->record_failure();
  EXPECT_DOUBLE_EQ(b->balance(), 0.0);
  b->record_success();
  EXPECT_DOUBLE_EQ(b->balance(), 0.123) << "rounded down to three decimals";
  for (int i = 0; i < 100; ++i) b->record_success();
  EXPECT_DOUBLE_EQ(b->balance(), 3.0);
  EXPECT_EQ(b->describe(), "RetryBudget(tokens 3, ratio 0.123)");
}

// ---- the rate mode ------------------------------------------------------------------------------

TEST(RetryBudgetRate, ExecutionsDepositTheirShareAndRetriesWithdrawOne) {
  const auto clock = ManualClock::create();
  const auto b = RetryBudget::rate({.ttl = 10s, .min_retries_per_second = 0, .retry_ratio = 0.2},
                                   clock);
  EXPECT_FALSE(b->try_acquire()) << "no traffic and no minimum: no retry";
  for (int i = 0; i < 10; ++i) b->execution_started();
  EXPECT_DOUBLE_EQ(b->balance(), 2.0);
  EXPECT_TRUE(b->try_acquire());
  EXPECT_TRUE(b->try_acquire());
  EXPECT_FALSE(b->try_acquire()) << "20 % of 10 executions is 2 retries";
  EXPECT_EQ(b->state().exhausted, 2u);
  EXPECT_EQ(b->state().admitted, 2u);
}

TEST(RetryBudgetRate, DepositsAndWithdrawalsExpireAfterTheTtl) {
  const auto clock = ManualClock::create();
  const auto b = RetryBudget::rate({.ttl = 10s, .min_retries_per_second = 0, .retry_ratio = 0.5},
                                   clock);
  for (int i = 0; i < 4; ++i) b->execution_started();  // 2 retries
  ASSERT_TRUE(b->try_acquire());
  clock->advance(5s);
  for (int i = 0; i < 2; ++i) b->execution_started();  // 1 more, deposited 5 s later
  EXPECT_DOUBLE_EQ(b->balance(), 2.0);
  clock->advance(5s);
  // The first slice (deposits and the withdrawal) has expired: only the later deposit counts.
  EXPECT_DOUBLE_EQ(b->balance(), 1.0);
  clock->advance(5s);
  EXPECT_DOUBLE_EQ(b->balance(), 0.0);
  EXPECT_FALSE(b->try_acquire());
}

TEST(RetryBudgetRate, TheMinimumPerSecondAllowsRetriesWithoutTraffic) {
  const auto clock = ManualClock::create();
  const auto b = RetryBudget::rate({.ttl = 2s, .min_retries_per_second = 3, .retry_ratio = 0},
                                   clock);
  EXPECT_DOUBLE_EQ(b->balance(), 6.0) << "3 per second over a 2 s window";
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(b->try_acquire()) << i;
  EXPECT_FALSE(b->try_acquire());
  clock->advance(2s);
  EXPECT_TRUE(b->try_acquire()) << "the withdrawals expired";
  EXPECT_EQ(b->describe(), "RetryBudget(rate 0% +3/s over 2s)");
}

TEST(RetryBudgetRate, CountsTheSameWhereverTheClockStarts) {
  // Far from the clock's epoch (the 24-bit slice tags of a steady clock 150 days after boot),
  // and across its zero: the window counts from the budget's creation.
  for (const auto start : {ManualClock::time_point{std::chrono::hours(24 * 150)},
                           ManualClock::time_point{-5s}}) {
    const auto clock = ManualClock::create(start);
    const auto b = RetryBudget::rate({.ttl = 10s, .min_retries_per_second = 0, .retry_ratio = 1},
                                     clock);
    for (int i = 0; i < 5; ++i) b->execution_started();
    EXPECT_DOUBLE_EQ(b->balance(), 5.0);
    clock->advance(6s);
    EXPECT_TRUE(b->try_acquire());
    EXPECT_DOUBLE_EQ(b->balance(), 4.0);
    clock->advance(4s);
    EXPECT_DOUBLE_EQ(b->balance(), 0.0) << "the deposits expired, the withdrawal not yet";
    clock->advance(6s);
    EXPECT_DOUBLE_EQ(b->balance(), 0.0);
    for (int i = 0; i < 3; ++i) b->execution_started();
    EXPECT_DOUBLE_EQ(b->balance(), 3.0);
  }
}

TEST(RetryBudgetRate, ASliceSaturatesInsteadOfWrappingAround) {
  const auto clock = ManualClock::create();
  const auto b = RetryBudget::rate({.ttl = 10s, .min_retries_per_second = 0, .retry_ratio = 1000},
                                   clock);
  for (int i = 0; i < 600000; ++i) b->execution_started();  // 6e11 units: past a slice's 2^39
  EXPECT_GT(b->balance(), 5e8);
  EXPECT_TRUE(b->try_acquire());
}

// ---- the concurrency mode -----------------------------------------------------------------------

TEST(RetryBudgetConcurrency, AdmitsTheMinimumOrTheRatioOfExecutionsInFlight) {
  const auto b = RetryBudget::concurrency({.max_ratio = 0.2, .min_concurrency = 3});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b->try_acquire()) << i;
  EXPECT_FALSE(b->try_acquire()) << "3 in flight, no execution counted: the minimum";
  for (int i = 0; i < 25; ++i) b->execution_started();
  EXPECT_DOUBLE_EQ(b->balance(), 2.0) << "20 % of 25 is 5, 3 taken";
  EXPECT_TRUE(b->try_acquire());
  EXPECT_TRUE(b->try_acquire());
  EXPECT_FALSE(b->try_acquire());
  b->release_attempt();
  EXPECT_TRUE(b->try_acquire()) << "a finished retry makes room";
  for (int i = 0; i < 25; ++i) b->execution_finished();
  const RetryBudgetState s = b->state();
  EXPECT_EQ(s.attempts_in_flight, 5);
  EXPECT_EQ(s.executions_in_flight, 0);
  EXPECT_DOUBLE_EQ(s.balance, 0.0);
  EXPECT_EQ(b->describe(), "RetryBudget(concurrency 20% min 3)");
}

TEST(RetryBudget, RefusesOptionsOutOfRangeNamingTheOption) {
  EXPECT_EQ(refusal([] { return RetryBudget::tokens({.max_tokens = 0}); }),
            "kevlar::RetryBudget: TokenBudgetOptions::max_tokens must be in [1, 1e+06] (got 0)");
  EXPECT_NE(refusal([] { return RetryBudget::tokens({.token_ratio = 0.0001}); })
                .find("TokenBudgetOptions::token_ratio"),
            std::string::npos);
  EXPECT_NE(refusal([] { return RetryBudget::tokens({.token_ratio = std::nan("")}); })
                .find("token_ratio"),
            std::string::npos);
  EXPECT_EQ(refusal([] { return RetryBudget::rate({.ttl = 500ms}); }),
            "kevlar::RetryBudget: RateBudgetOptions::ttl must be in [1s, 60s] (got 500ms)");
  EXPECT_NE(refusal([] { return RetryBudget::rate({.min_retries_per_second = -1}); })
                .find("min_retries_per_second"),
            std::string::npos);
  EXPECT_NE(refusal([] { return RetryBudget::rate({.retry_ratio = -0.1}); }).find("retry_ratio"),
            std::string::npos);
  EXPECT_NE(refusal([] { return RetryBudget::rate({}, nullptr); }).find("clock"),
            std::string::npos);
  EXPECT_NE(refusal([] { return RetryBudget::concurrency({.max_ratio = 1001}); }).find("max_ratio"),
            std::string::npos);
  EXPECT_NE(refusal([] { return RetryBudget::concurrency({.min_concurrency = -1}); })
                .find("min_concurrency"),
            std::string::npos);
  EXPECT_EQ(refusal([] { return RetryBudget::tokens(); }), "") << "the defaults are valid";
}

// ---- retries held by a budget -------------------------------------------------------------------

RetryOptions budgeted(int retries, std::shared_ptr<RetryBudget> budget) {
  return RetryOptions{.max_retries = retries, .backoff = Backoff::none(), .budget = std::move(budget)};
}

TEST(RetryWithBudget, ARefusedRetryEndsWithTheLastRealFailureAndSaysSo) {
  const auto budget = RetryBudget::tokens({.max_tokens = 4, .token_ratio = 1});
  const auto recorder = std::make_shared<EventRecorder>();
  const Shield shield = Shield{}.observed_by(recorder).retry(budgeted(10, budget));
  int calls = 0;
  try {
    shield.execute([&]() -> int {
      ++calls;
      throw std::runtime_error("call " + std::to_string(calls));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "call 2") << "the last call's own failure";
  }
  // 4 tokens: the first failure leaves 3 (> 2: retry), the second leaves 2 (not above half).
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(recorder->count_of<RetryScheduled>(), 1u);
  const auto refused_events = recorder->events_of<RetryBudgetExhausted>();
  ASSERT_EQ(refused_events.size(), 1u);
  EXPECT_EQ(refused_events[0].mode, RetryBudgetMode::tokens);
  EXPECT_FALSE(refused_events[0].hedge);
  EXPECT_EQ(refused_events[0].attempt, 3u);
  EXPECT_DOUBLE_EQ(refused_events[0].balance, 2.0);
}

TEST(RetryWithBudget, ShieldsSharingABudgetShareItsExhaustion) {
  const auto budget = RetryBudget::tokens({.max_tokens = 4, .token_ratio = 1});
  const Shield a = Shield{}.retry(budgeted(3, budget));
  const Shield b = Shield{}.retry(budgeted(3, budget));
  int calls = 0;
  const auto fail = [&]() -> int {
    ++calls;
    throw test::Boom();
  };
  EXPECT_THROW(a.execute(fail), test::Boom);
  EXPECT_EQ(calls, 2) << "4 tokens: 3 after the first failure (retried), 2 after the second";
  EXPECT_THROW(b.execute(fail), test::Boom);
  EXPECT_EQ(calls, 3) << "the other shield's first retry is refused: 1 token left";
  // Successes refill it, through either shield.
  EXPECT_EQ(a.execute([] { return 1; }), 1);
  EXPECT_EQ(b.execute([] { return 2; }), 2);
  EXPECT_EQ(a.execute([] { return 3; }), 3);
  EXPECT_DOUBLE_EQ(budget->balance(), 4.0);
  calls = 0;
  EXPECT_THROW(a.execute([&]() -> int {
                 if (++calls < 2) throw test::Boom();
                 throw std::runtime_error("second");
               }),
               std::runtime_error)
      << "retried once the balance is above half again";
  EXPECT_EQ(calls, 2);
}

TEST(RetryWithBudget, RejectionsFurtherInTakeNoTokens) {
  // An isolated breaker refuses every call before it reaches the dependency: the retry retries
  // the refusals (the default clause handles them) and the budget, which saw no dependency
  // failure, keeps its tokens.
  const auto budget = RetryBudget::tokens({.max_tokens = 4, .token_ratio = 1});
  const auto breaker = CircuitBreaker::create({});
  breaker->isolate();
  const Shield shield = Shield{}.retry(budgeted(3, budget)).use(breaker);
  int calls = 0;
  try {
    shield.execute([&] { return ++calls; });
    FAIL() << "no rejection";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::isolated);
  }
  EXPECT_EQ(calls, 0);
  EXPECT_DOUBLE_EQ(budget->balance(), 4.0);
  EXPECT_EQ(budget->state().admitted, 3u) << "every retry admitted";
}

TEST(RetryWithBudget, WithoutTheBudgetTheSameFailuresAreRetriedToTheLimit) {
  // The control of the two tests above: the same operation, no budget.
  int calls = 0;
  EXPECT_THROW(Shield{}.retry(budgeted(10, nullptr)).execute([&]() -> int {
    ++calls;
    throw test::Boom();
  }),
               test::Boom);
  EXPECT_EQ(calls, 11);
}

TEST(RetryWithBudget, ConcurrencyAdmissionsAreGivenBackWhenTheAttemptEnds) {
  const auto budget = RetryBudget::concurrency({.max_ratio = 0, .min_concurrency = 1});
  const Shield shield = Shield{}.retry(budgeted(3, budget));
  int calls = 0;
  EXPECT_EQ(shield.execute([&] {
              if (++calls < 4) throw test::Boom();
              RetryBudgetState s = budget->state();
              EXPECT_EQ(s.attempts_in_flight, 1) << "the running retry holds one admission";
              EXPECT_EQ(s.executions_in_flight, 1);
              return calls;
            }),
            4)
      << "each retry gives its admission back when it fails, so one minimum is enough";
  RetryBudgetState s = budget->state();
  EXPECT_EQ(s.attempts_in_flight, 0);
  EXPECT_EQ(s.executions_in_flight, 0);
  EXPECT_EQ(s.admitted, 3u);
  EXPECT_EQ(s.exhausted, 0u);
}

TEST(RetryWithBudget, CallbackAndCoroutineExecutionsDeliverTheLastFailureWhenRefused) {
  asio::io_context ioc;
  const auto budget = RetryBudget::concurrency({.max_ratio = 0, .min_concurrency = 0});
  const auto recorder = std::make_shared<EventRecorder>();
  const Shield shield = Shield{}.observed_by(recorder).retry(budgeted(5, budget));
  int calls = 0;
  const auto op = [&](auto token) {
    ++calls;
    return test::async_answer(ioc.get_executor(), refused, 0, std::move(token));
  };
  std::optional<error_code> got;
  shield.execute_async(op, asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; }));
  ioc.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, refused) << "the operation's own failure, not a budget error";
  EXPECT_EQ(calls, 1);

  ioc.restart();
  std::optional<error_code> from_coroutine;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto [ec, v] = co_await shield.execute_async(op, asio::as_tuple(asio::use_awaitable));
        (void)v;
        from_coroutine = ec;
      },
      asio::detached);
  ioc.run();
  ASSERT_TRUE(from_coroutine.has_value());
  EXPECT_EQ(*from_coroutine, refused);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(recorder->count_of<RetryBudgetExhausted>(), 2u);
  EXPECT_EQ(budget->state().executions_in_flight, 0);
}

// ---- the end-to-end deadline --------------------------------------------------------------------

TEST(RetryDeadline, ABackoffThatWouldEndPastTheDeadlineIsNotStarted) {
  for (const auto& [budget_ms, expected_calls] : {std::pair{1000, 2}, std::pair{2000, 4}}) {
    SCOPED_TRACE(budget_ms);
    asio::io_context ioc;
    const auto clock = ManualClock::create();
    const Shield shield =
        Shield{}.with_clock(clock).timeout(std::chrono::milliseconds(budget_ms)).retry(RetryOptions{
            .max_retries = 10, .backoff = Backoff::constant(600ms)});
    int calls = 0;
    std::optional<error_code> got;
    shield.execute_async([&](auto token) {
      ++calls;
      return test::async_answer(ioc.get_executor(), refused, 0, std::move(token));
    },
                         asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; }));
    for (int i = 0; i < 10 && !got; ++i) {
      ioc.restart();
      ioc.poll();
      if (!got) clock->advance(300ms);
    }
    ASSERT_TRUE(got.has_value()) << budget_ms;
    EXPECT_EQ(calls, expected_calls) << budget_ms;
    // 1 s: the second failure, at 600 ms, would wait until 1.2 s: it surfaces at once.
    // 2 s: the fourth, at 1.8 s, would wait until 2.4 s. Without the rule both would wait for
    // the timeout and end with errc::timeout.
    EXPECT_EQ(*got, refused) << budget_ms << ": the last real failure, not errc::timeout";
  }
}

// ---- a retry storm through three stacked shields -------------------------------------------------

/// Dependency calls for `requests` requests through three stacked shields (each retrying 3 times,
/// each with its own budget from `make`) over a dependency that always fails.
template <class MakeBudget>
int storm(int requests, MakeBudget make) {
  int dependency_calls = 0;
  const Shield inner = Shield{}.retry(budgeted(3, make()));
  const Shield middle = Shield{}.retry(budgeted(3, make()));
  const Shield outer = Shield{}.retry(budgeted(3, make()));
  for (int i = 0; i < requests; ++i) {
    try {
      outer.execute([&] {
        return middle.execute([&] {
          return inner.execute([&]() -> int {
            ++dependency_calls;
            throw test::Boom();
          });
        });
      });
    } catch (const test::Boom&) {
    }
  }
  return dependency_calls;
}

TEST(RetryStorm, BudgetsBoundTheAmplificationOfStackedRetries) {
  const auto clock = ManualClock::create();
  const int requests = 200;
  const int unbounded = storm(requests, [] { return std::shared_ptr<RetryBudget>(); });
  EXPECT_EQ(unbounded, requests * 64) << "(1 + 3)^3 calls per request";

  // Finagle-like: 20 % of each layer's executions, no minimum: each layer multiplies by <= 1.2.
  const int rate = storm(requests, [&] {
    return RetryBudget::rate({.ttl = 10s, .min_retries_per_second = 0, .retry_ratio = 0.2}, clock);
  });
  EXPECT_GE(rate, requests);
  EXPECT_LE(rate, static_cast<int>(requests * 1.2 * 1.2 * 1.2) + 3);

  // gRPC-like tokens: once a layer has seen max_tokens / 2 failures it stops retrying.
  const int tokens = storm(requests, [] { return RetryBudget::tokens({.max_tokens = 10}); });
  EXPECT_GE(tokens, requests);
  EXPECT_LE(tokens, requests + 3 * 64) << "a handful of retries per layer before the budget shuts";
}

// ---- many threads --------------------------------------------------------------------------------

TEST(RetryBudgetRace, ConcurrentAdmissionsNeverExceedTheConcurrencyBound) {
  const auto budget = RetryBudget::concurrency({.max_ratio = 0, .min_concurrency = 3});
  std::atomic<int> holding{0};
  std::atomic<int> worst{0};
  std::atomic<std::uint64_t> tries{0};
  const auto work = [&] {
    for (int i = 0; i < 20000; ++i) {
      tries.fetch_add(1, std::memory_order_relaxed);
      if (!budget->try_acquire()) continue;
      const int now = holding.fetch_add(1) + 1;
      int w = worst.load();
      while (now > w && !worst.compare_exchange_weak(w, now)) {
      }
      holding.fetch_sub(1);
      budget->release_attempt();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  EXPECT_LE(worst.load(), 3);
  const RetryBudgetState s = budget->state();
  EXPECT_EQ(s.attempts_in_flight, 0);
  EXPECT_EQ(s.admitted + s.exhausted, tries.load());
}

TEST(RetryBudgetRace, ConcurrentFeedbackAndDepositsAreCountedExactly) {
  const auto tokens = RetryBudget::tokens({.max_tokens = 10000, .token_ratio = 1});
  const auto clock = ManualClock::create();
  const auto rate =
      RetryBudget::rate({.ttl = 10s, .min_retries_per_second = 0, .retry_ratio = 0.2}, clock);
  const auto work = [&] {
    for (int i = 0; i < 1000; ++i) {
      tokens->record_failure();
      rate->execution_started();
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_DOUBLE_EQ(tokens->balance(), 8000.0);
  EXPECT_DOUBLE_EQ(rate->balance(), 400.0);
}

}  // namespace
}  // namespace kevlar
