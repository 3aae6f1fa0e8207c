// The retry budget and the adaptive throttle composed with the other strategies: the sequence of
// events each composition emits, in synchronous, callback and coroutine executions.
#include "core/async_ops.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;
using testing::EventRecorder;

const error_code refused = make_error_code(boost::system::errc::connection_refused);

/// The kinds of the recorded events, in order.
std::vector<std::string> kinds(const EventRecorder& r) {
  std::vector<std::string> out;
  for (const auto& e : r.events()) out.emplace_back(e.detail.name());
  return out;
}

/// Runs one failing call through `shield` in `shape` (0 sync, 1 callback, 2 coroutine); returns
/// the error it ended with (empty for a success) and counts the calls made.
error_code run(const Shield& shield, int shape, int& calls) {
  if (shape == 0) {
    const Outcome<int> o = shield.execute_outcome([&]() -> int {
      ++calls;
      throw Error(refused);
    });
    if (o.has_value()) return {};
    return o.has_error() ? o.error() : detail::error_of_exception(o.exception());
  }
  asio::io_context ioc;
  const auto op = [&](auto token) {
    ++calls;
    return test::async_answer(ioc.get_executor(), refused, 0, std::move(token));
  };
  std::optional<error_code> got;
  if (shape == 1) {
    shield.execute_async(op, asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; }));
  } else {
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          auto [ec, v] = co_await shield.execute_async(op, asio::as_tuple(asio::use_awaitable));
          (void)v;
          got = ec;
        },
        asio::detached);
  }
  ioc.run();
  return got.value_or(make_error_code(errc::closed));
}

const char* shape_name(int shape) {
  return shape == 0 ? "sync" : shape == 1 ? "callback" : "coroutine";
}

TEST(BudgetComposition, AFallbackReplacesTheFailureARefusedRetryEndsWith) {
  for (int shape = 0; shape < 3; ++shape) {
    SCOPED_TRACE(shape_name(shape));
    const auto budget = RetryBudget::tokens({.max_tokens = 4, .token_ratio = 1});
    const auto recorder = std::make_shared<EventRecorder>();
    const Shield shield = Shield{}
                              .observed_by(recorder)
                              .fallback(0)
                              .retry(RetryOptions{.max_retries = 5,
                                                  .backoff = Backoff::none(),
                                                  .budget = budget});
    int calls = 0;
    EXPECT_FALSE(run(shield, shape, calls)) << "the fallback's value";
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(kinds(*recorder),
              (std::vector<std::string>{"AttemptStarted", "RetryScheduled", "AttemptStarted",
                                        "RetryBudgetExhausted", "FallbackTaken",
                                        "ExecutionFinished"}));
  }
}

TEST(BudgetComposition, ARetryStoppedByATotalTimeoutsDeadlineAsksNoBudgetAndTimesNothingOut) {
  for (int shape = 1; shape < 3; ++shape) {  // the backoff waits on the io_context
    SCOPED_TRACE(shape_name(shape));
    const auto budget = RetryBudget::tokens({.max_tokens = 100});
    const auto recorder = std::make_shared<EventRecorder>();
    const Shield shield = Shield{}
                              .observed_by(recorder)
                              .timeout(1s)
                              .retry(RetryOptions{.max_retries = 5,
                                                  .backoff = Backoff::constant(2s),
                                                  .budget = budget});
    int calls = 0;
    EXPECT_EQ(run(shield, shape, calls), refused) << "the last real failure, at once";
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(kinds(*recorder),
              (std::vector<std::string>{"AttemptStarted", "ExecutionFinished"}));
    EXPECT_EQ(budget->state().admitted + budget->state().exhausted, 0u) << "never asked";
  }
}

TEST(BudgetComposition, AThrottleInsideARetryCountsEveryAttemptAndTheBudgetStopsTheRetries) {
  for (int shape = 0; shape < 3; ++shape) {
    SCOPED_TRACE(shape_name(shape));
    const auto recorder = std::make_shared<EventRecorder>();
    AdaptiveThrottleOptions throttle;
    throttle.random = [] { return 0.0; };  // any p > 0 rejects
    const Shield shield =
        Shield{}
            .observed_by(recorder)
            .retry(RetryOptions{.max_retries = 3,
                                .backoff = Backoff::none(),
                                .budget = RetryBudget::concurrency({.max_ratio = 0,
                                                                    .min_concurrency = 1})})
            .adaptive_throttle(throttle);
    int calls = 0;
    // Attempt 1 reaches the dependency (p = 0), fails; with 1 request and no accept p = 1/2:
    // attempt 2 is throttled; the throttle's refusal is handled, so the retry goes on, and
    // attempts 3 and 4 are throttled too. The dependency is called once.
    EXPECT_EQ(run(shield, shape, calls), errc::throttled);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(kinds(*recorder),
              (std::vector<std::string>{"AttemptStarted", "RetryScheduled", "Rejected", "Throttled",
                                        "RetryScheduled", "Rejected", "Throttled",
                                        "RetryScheduled", "Rejected", "Throttled",
                                        "ExecutionFinished"}));
  }
}

}  // namespace
}  // namespace kevlar
