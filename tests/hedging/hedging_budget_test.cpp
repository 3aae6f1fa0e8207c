// A hedge holding a RetryBudget: refused hedges are not launched (and said so), admissions are
// given back when attempts end or are cancelled, and attempts' outcomes feed the token balance.
#include <pending_ops.hpp>

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>
#include <optional>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

const error_code down = make_error_code(boost::system::errc::connection_refused);

struct HedgingBudget : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<testing::EventRecorder> recorder = std::make_shared<testing::EventRecorder>();
  asio::io_context ioc;
  test::PendingOps ops;
  std::optional<error_code> ec;
  int value = 0;

  void start(const HedgeOptions& options) {
    Shield{}.with_clock(clock).observed_by(recorder).hedge(options).execute_async(
        ops.attempt(), asio::bind_executor(ioc, [this](error_code e, int v) {
          ec = e;
          value = v;
        }));
    poll();
  }
  void poll() {
    ioc.restart();
    ioc.poll();
  }
  void advance(Clock::duration d) {
    clock->advance(d);
    poll();
  }
};

TEST_F(HedgingBudget, ARefusedHedgeIsNotLaunchedAndTheAttemptsRunningDecide) {
  const auto budget = RetryBudget::concurrency({.max_ratio = 0, .min_concurrency = 1});
  start(HedgeOptions{.max_attempts = 3, .delay = 0ms, .budget = budget});
  ASSERT_EQ(ops.size(), 2u) << "the first attempt is free, the second admitted, the third refused";
  const auto refused = recorder->events_of<RetryBudgetExhausted>();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(refused[0].hedge);
  EXPECT_EQ(refused[0].attempt, 3u);
  EXPECT_EQ(recorder->count_of<HedgeLaunched>(), 1u);
  EXPECT_EQ(budget->state().attempts_in_flight, 1);
  ops.complete(1, {}, 42);
  poll();
  ASSERT_TRUE(ec.has_value());
  EXPECT_FALSE(*ec);
  EXPECT_EQ(value, 42);
  const RetryBudgetState s = budget->state();
  EXPECT_EQ(s.attempts_in_flight, 0) << "the winner's admission is given back";
  EXPECT_EQ(s.executions_in_flight, 0);
}

TEST_F(HedgingBudget, ACancelledLoserGivesItsAdmissionBack) {
  const auto budget = RetryBudget::concurrency({.max_ratio = 0, .min_concurrency = 2});
  start(HedgeOptions{.max_attempts = 3, .delay = 0ms, .budget = budget});
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(budget->state().attempts_in_flight, 2);
  ops.complete(0, {}, 7);  // the first attempt wins: both hedges are cancelled, never reported
  poll();
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(value, 7);
  EXPECT_EQ(budget->state().attempts_in_flight, 0);
}

TEST_F(HedgingBudget, AStaggerAsksAgainOnceTheBudgetAllowsIt) {
  const auto budget = RetryBudget::concurrency({.max_ratio = 0, .min_concurrency = 1});
  ASSERT_TRUE(budget->try_acquire());  // someone else holds the only admission
  start(HedgeOptions{.max_attempts = 2, .delay = 1s, .budget = budget});
  advance(1s);
  EXPECT_EQ(ops.size(), 1u) << "refused at the first stagger";
  EXPECT_EQ(recorder->count_of<RetryBudgetExhausted>(), 1u);
  budget->release_attempt();
  advance(1s);
  EXPECT_EQ(ops.size(), 2u) << "the next stagger is admitted";
  ops.complete(1, {}, 8);
  poll();
  EXPECT_EQ(value, 8);
  EXPECT_EQ(budget->state().attempts_in_flight, 0);
}

TEST_F(HedgingBudget, HandledFailuresTakeTokensAndEndTheHedgingWhenRefused) {
  const auto budget = RetryBudget::tokens({.max_tokens = 4, .token_ratio = 1});
  start(HedgeOptions{.max_attempts = 5, .delay = HedgeOptions::infinite_delay, .budget = budget});
  ASSERT_EQ(ops.size(), 1u);
  ops.complete(0, down);  // 3 tokens left: the next attempt is admitted at once
  poll();
  ASSERT_EQ(ops.size(), 2u);
  ops.complete(1, down);  // 2 left: not above half, nothing more is launched
  poll();
  EXPECT_EQ(ops.size(), 2u);
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, down) << "the last attempt's own failure";
  EXPECT_DOUBLE_EQ(budget->balance(), 2.0);
  EXPECT_EQ(recorder->count_of<RetryBudgetExhausted>(), 1u);
}

}  // namespace
}  // namespace kevlar
