// The adaptive concurrency limit as a strategy: samples classified from outcomes, windows closed
// by completions on the executions' clock, the limiter resized (growth grants queued calls), the
// LimitChanged event and hook, options checked, and every execution shape (synchronous,
// callback, coroutine, inside retry and hedging) feeding it.
#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/error.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/event_recorder.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::DriverAction;
using testing::StrategyDriver;
using Actions = std::vector<DriverAction>;

struct AdaptiveLimiter : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<AdaptiveConcurrencyLimitStrategy> limiter;
  std::shared_ptr<testing::EventRecorder> events = std::make_shared<testing::EventRecorder>();
  std::vector<LimitChanged> hooked;
  Shield shield;
  std::vector<std::unique_ptr<StrategyDriver<int>>> calls;

  static AdaptiveLimitOptions options(int initial, int min_samples = 1) {
    AdaptiveLimitOptions o;
    o.initial_limit = initial;
    o.min_limit = 1;
    o.max_limit = 100;
    o.window = 1s;
    o.min_window_samples = min_samples;
    return o;
  }
  void make(AdaptiveLimitOptions o) {
    o.on_limit_changed = [this](const LimitChanged& c) { hooked.push_back(c); };
    limiter = AdaptiveConcurrencyLimitStrategy::create(std::move(o));
    shield = Shield{}.use(limiter).observed_by(events);
  }
  StrategyDriver<int>& call() {
    calls.push_back(std::make_unique<StrategyDriver<int>>(shield, clock));
    calls.back()->start();
    return *calls.back();
  }
  void run_all() {
    for (auto& c : calls) c->run();
  }
  /// One call that completes at once: the first completion starts the first window.
  void start_window() { call().succeed(0, 0); }
  [[nodiscard]] static bool started(StrategyDriver<int>& c) {
    return c.take_actions() == Actions{DriverAction::started(0)};
  }
};

TEST_F(AdaptiveLimiter, DropsShrinkTheLimitAtTheWindowsEnd) {
  make(options(10, 3));
  start_window();
  for (int i = 0; i < 3; ++i) call().fail(0, make_error_code(errc::timeout));
  EXPECT_EQ(limiter->limit(), 10u) << "the window has not ended: nothing may move";
  clock->advance(1s);
  call().succeed(0, 1);  // the first completion past the end closes the window
  EXPECT_EQ(limiter->limit(), 9u) << "AIMD's decrease: 10 x 0.9";
  EXPECT_EQ(limiter->limiter().max_concurrency(), 9u) << "the limiter was not resized";
  EXPECT_EQ(limiter->controller().total(LimitSample::dropped), 3u);
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 2u);
  const std::vector<LimitChanged> changed = events->events_of<LimitChanged>();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].old_limit, 10u);
  EXPECT_EQ(changed[0].new_limit, 9u);
  EXPECT_EQ(changed[0].reason, LimitChangeReason::dropped);
  EXPECT_EQ(changed[0].dropped, 3u);
  EXPECT_EQ(changed[0].samples, 2u);
  ASSERT_EQ(hooked.size(), 1u);
  EXPECT_EQ(hooked[0].new_limit, 9u);
}

TEST_F(AdaptiveLimiter, AWindowShortOfSamplesKeepsCollectingPastItsEnd) {
  make(options(10, 3));
  start_window();
  clock->advance(2s);
  call().fail(0, make_error_code(errc::timeout));  // 2 samples: not enough
  EXPECT_EQ(limiter->limit(), 10u);
  EXPECT_EQ(limiter->controller().windows(), 0u);
  call().fail(0, make_error_code(errc::timeout));  // the third closes it
  EXPECT_EQ(limiter->controller().windows(), 1u);
  EXPECT_EQ(limiter->limit(), 9u);
}

TEST_F(AdaptiveLimiter, GrowthGrantsQueuedCallsOldestFirst) {
  AdaptiveLimitOptions o = options(2, 2);
  o.max_queue = 2;
  make(o);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  EXPECT_TRUE(started(a));
  EXPECT_TRUE(started(b));
  a.succeed(0, 1);  // starts the first window (a is its first sample)
  StrategyDriver<int>& c = call();
  StrategyDriver<int>& d = call();
  StrategyDriver<int>& e = call();
  EXPECT_TRUE(started(c));
  EXPECT_EQ(limiter->state().queued, 2u);
  clock->advance(1s);
  // b's release hands its permit to d; then the window (a and b, both started with the limit in
  // use) closes healthy and saturated: +1, which grants e.
  b.succeed(0, 2);
  run_all();
  EXPECT_EQ(limiter->limit(), 3u);
  EXPECT_TRUE(started(d));
  EXPECT_TRUE(started(e)) << "the limit grew but the queued call was not granted";
  EXPECT_EQ(limiter->state().running, 3u);
  EXPECT_EQ(limiter->state().queued, 0u);
  const std::vector<LimitChanged> changed = events->events_of<LimitChanged>();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].reason, LimitChangeReason::healthy);
  for (StrategyDriver<int>* x : {&c, &d, &e}) x->succeed(0, 3);
  EXPECT_EQ(limiter->state().running, 0u);
}

TEST_F(AdaptiveLimiter, TheCallersCancellationIsIgnored) {
  make(options(10));
  StrategyDriver<int>& a = call();
  a.cancel();
  run_all();
  ASSERT_TRUE(a.outcome().has_error());
  EXPECT_TRUE(is_cancellation(a.outcome().error()));
  EXPECT_EQ(limiter->controller().total(LimitSample::ignored), 1u);
  EXPECT_EQ(limiter->state().running, 0u);
}

TEST_F(AdaptiveLimiter, ADroppedClauseNamesOverloadAmongValues) {
  AdaptiveLimitOptions o = options(10);
  o.dropped = Clause().result<int>([](int status) { return status == 503 || status == 429; });
  make(o);
  start_window();
  clock->advance(1s);
  call().succeed(0, 503);
  EXPECT_EQ(limiter->controller().total(LimitSample::dropped), 1u);
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 1u);  // the first call
  EXPECT_EQ(limiter->limit(), 9u);
}

TEST_F(AdaptiveLimiter, AnIgnoredClauseTakesFailuresOutOfTheSamples) {
  AdaptiveLimitOptions o = options(10);
  o.ignored = Clause().error(make_error_code(boost::system::errc::invalid_argument));
  make(o);
  call().fail(0, make_error_code(boost::system::errc::invalid_argument));
  EXPECT_EQ(limiter->controller().total(LimitSample::ignored), 1u);
}

// kevlar's own errors: an isolated breaker further in cuts the dependency off as an open one does
// (a drop); a closed primitive and the caller's misuse say nothing about the dependency (ignored).
TEST_F(AdaptiveLimiter, KevlarsOwnErrorsAreDropsOrIgnored) {
  make(options(10));
  call().fail(0, make_error_code(errc::isolated));
  call().fail(0, make_error_code(errc::circuit_open));
  call().fail(0, make_error_code(errc::closed));
  call().fail(0, make_error_code(errc::callback_exception));
  call().fail(0, make_error_code(errc::executor_required));
  clock->advance(1s);
  call().fail(0, make_error_code(errc::rate_limited));  // closes the window
  EXPECT_EQ(limiter->controller().total(LimitSample::dropped), 3u);
  EXPECT_EQ(limiter->controller().total(LimitSample::ignored), 3u);
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 0u);
}

TEST_F(AdaptiveLimiter, OtherFailuresAreMeasuredAndKeepTheirOutcome) {
  make(options(10));
  StrategyDriver<int>& a = call();
  clock->advance(250ms);
  a.fail(0, make_error_code(boost::system::errc::io_error));  // starts the window, as a sample
  clock->advance(1s);
  StrategyDriver<int>& b = call();
  b.succeed(0, 1);
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 2u);
  EXPECT_EQ(a.outcome().error(), make_error_code(boost::system::errc::io_error));
}

TEST_F(AdaptiveLimiter, AClausePredicateThatThrowsFailsTheCallWithItsException) {
  AdaptiveLimitOptions o = options(10);
  o.dropped = Clause().result<int>([](int) -> bool { throw std::runtime_error("predicate"); });
  make(o);
  const Shield sync = Shield{}.with_clock(clock).use(limiter);
  try {
    (void)sync.execute([] { return 1; });
    ADD_FAILURE() << "the predicate's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "predicate");
  }
  // An error-code completion cannot carry it: kevlar's callback_exception instead.
  StrategyDriver<int>& a = call();
  a.succeed(0, 1);
  EXPECT_EQ(a.outcome().error(), make_error_code(errc::callback_exception));
  EXPECT_EQ(limiter->controller().total(LimitSample::ignored), 2u);
  EXPECT_EQ(limiter->state().running, 0u);
}

// sample_one_in = 4 times a quarter of the calls, drawn at random: two limiters called alternately
// on one thread (the shape that aliases with a per-thread stride) are each timed about 1,000 times
// in 4,000 calls (a binomial count: 1,000 ± 27, so the bounds are 5.5 standard deviations), and
// drops count on every call, timed or not.
TEST_F(AdaptiveLimiter, SamplingOneInFourTimesAQuarterOfTheCallsOfEachLimiter) {
  AdaptiveLimitOptions o = options(10);
  o.sample_one_in = 4;
  auto a = AdaptiveConcurrencyLimitStrategy::create(o);
  auto b = AdaptiveConcurrencyLimitStrategy::create(o);
  const Shield sa = Shield{}.with_clock(clock).use(a);
  const Shield sb = Shield{}.with_clock(clock).use(b);
  for (int i = 0; i < 4000; ++i) {
    (void)sa.execute([] { return 1; });
    (void)sb.execute([] { return 2; });
  }
  // Every timed success so far sits in each limiter's first window (the clock has not moved); a
  // drop after its end closes it, whether or not that call was timed.
  clock->advance(1s);
  const auto drop = [] { throw Error(make_error_code(errc::timeout)); };
  EXPECT_THROW(sa.execute(drop), Error);
  EXPECT_THROW(sb.execute(drop), Error);
  for (const auto* l : {a.get(), b.get()}) {
    EXPECT_EQ(l->controller().windows(), 1u);
    EXPECT_GE(l->controller().total(LimitSample::success), 850u);
    EXPECT_LE(l->controller().total(LimitSample::success), 1150u);
    EXPECT_EQ(l->controller().total(LimitSample::dropped), 1u);
  }
}

TEST_F(AdaptiveLimiter, RejectsBeyondItsLimitAndQueue) {
  AdaptiveLimitOptions o = options(1);
  o.max_queue = 0;
  int rejected = 0;
  o.on_rejected = [&rejected](const ConcurrencyLimitRejectedEvent& e) {
    EXPECT_EQ(e.max_concurrency, 1u);
    ++rejected;
  };
  make(o);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  EXPECT_TRUE(started(a));
  EXPECT_EQ(b.outcome().error(), make_error_code(errc::concurrency_limit_exceeded));
  EXPECT_EQ(rejected, 1);
  limiter->close();
  a.succeed(0, 1);
  EXPECT_EQ(call().outcome().error(), make_error_code(errc::closed));
}

TEST(AdaptiveLimiterOptions, InvalidOptionsAreNamed) {
  const auto what = [](AdaptiveLimitOptions o) -> std::string {
    try {
      (void)adaptive_concurrency_limit(std::move(o));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  AdaptiveLimitOptions o;
  o.initial_limit = 0;
  EXPECT_NE(what(o).find("initial_limit"), std::string::npos) << what(o);
  o = {};
  o.min_limit = 0;
  EXPECT_NE(what(o).find("min_limit"), std::string::npos) << what(o);
  o = {};
  o.max_limit = 5;
  EXPECT_NE(what(o).find("max_limit"), std::string::npos) << what(o);
  o = {};
  o.max_limit = 1 << 30;
  EXPECT_NE(what(o).find("max_limit"), std::string::npos) << what(o);
  o = {};
  o.max_queue = -1;
  EXPECT_NE(what(o).find("max_queue"), std::string::npos) << what(o);
  o = {};
  o.window = 0s;
  EXPECT_NE(what(o).find("window"), std::string::npos) << what(o);
  o = {};
  o.min_window_samples = 0;
  EXPECT_NE(what(o).find("min_window_samples"), std::string::npos) << what(o);
  o = {};
  o.sample_one_in = 3;
  EXPECT_NE(what(o).find("sample_one_in"), std::string::npos) << what(o);
  o = {};
  o.algorithm = VegasOptions{.probe_multiplier = 0};
  EXPECT_NE(what(o).find("probe_multiplier"), std::string::npos) << what(o);
  o = {};
  o.custom_algorithm = [] { return std::unique_ptr<LimitAlgorithm>(); };
  EXPECT_NE(what(o).find("custom_algorithm"), std::string::npos) << what(o);
  EXPECT_EQ(what(AdaptiveLimitOptions{}), "accepted");
}

TEST(AdaptiveLimiterOptions, DescribeNamesTheAlgorithmAndBounds) {
  AdaptiveLimitOptions o;
  o.max_queue = 4;
  EXPECT_EQ(adaptive_concurrency_limit(o)->describe(),
            "AdaptiveConcurrencyLimit(aimd(0.9, 2), limit 10 in [1, 100], queue 4)");
  o.algorithm = GradientOptions{};
  EXPECT_EQ(adaptive_concurrency_limit(o)->describe(),
            "AdaptiveConcurrencyLimit(gradient(1.5, 60, 4), limit 10 in [1, 100], queue 4)");
}

// --- every execution shape feeds it ---

AdaptiveLimitOptions one_sample_windows() {
  AdaptiveLimitOptions o;
  o.min_window_samples = 1;
  return o;
}

TEST(AdaptiveLimiterShapes, SynchronousCallsAreSampled) {
  auto clock = ManualClock::create();
  auto limiter = adaptive_concurrency_limit(one_sample_windows());
  const Shield shield = Shield{}.with_clock(clock).use(limiter);
  EXPECT_EQ(shield.execute([] { return 7; }), 7);  // starts the window
  clock->advance(1s);
  EXPECT_EQ(shield.execute([] { return 8; }), 8);
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 2u);
  EXPECT_EQ(limiter->state().running, 0u);
}

TEST(AdaptiveLimiterShapes, CoroutineCallsAreSampled) {
  auto clock = ManualClock::create();
  auto limiter = adaptive_concurrency_limit(one_sample_windows());
  const Shield shield = Shield{}.with_clock(clock).use(limiter);
  asio::io_context ioc;
  std::vector<int> got;
  const auto once = [&]() -> asio::awaitable<void> {
    got.push_back(co_await shield.execute_async(
        [](auto token) {
          return asio::async_initiate<decltype(token), void(boost::system::error_code, int)>(
              [](auto handler) {
                auto ex = asio::get_associated_executor(handler);
                asio::post(ex, [h = std::move(handler)]() mutable {
                  std::move(h)(boost::system::error_code(), 5);
                });
              },
              token);
        },
        asio::use_awaitable));
  };
  asio::co_spawn(ioc, once(), asio::detached);
  ioc.run();
  clock->advance(1s);
  ioc.restart();
  asio::co_spawn(ioc, once(), asio::detached);
  ioc.run();
  EXPECT_EQ(got, (std::vector<int>{5, 5}));
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 2u);
}

TEST(AdaptiveLimiterShapes, EachRetryAttemptIsASample) {
  auto clock = ManualClock::create();
  auto limiter = adaptive_concurrency_limit(one_sample_windows());
  RetryOptions retry;
  retry.max_retries = 2;
  retry.backoff = Backoff::constant(0s);
  const Shield shield = Shield{}.retry(retry).use(limiter);
  StrategyDriver<int> d(shield, clock);
  d.start();
  d.fail(0, make_error_code(errc::timeout));  // dropped, and starts the window
  clock->advance(1s);
  d.run();
  d.succeed(1, 3);  // closes it
  EXPECT_EQ(d.outcome().value(), 3);
  EXPECT_EQ(limiter->controller().total(LimitSample::dropped), 1u);
  EXPECT_EQ(limiter->controller().total(LimitSample::success), 1u);
  EXPECT_EQ(limiter->limit(), 9u);
}

TEST(AdaptiveLimiterShapes, AHedgesCancelledLoserIsIgnored) {
  auto clock = ManualClock::create();
  auto limiter = adaptive_concurrency_limit(one_sample_windows());
  const Shield shield = Shield{}.hedge(2, 0s).use(limiter);
  StrategyDriver<int> d(shield, clock);
  d.start();
  d.run();
  ASSERT_EQ(d.running().size(), 2u) << "both attempts hold a permit";
  EXPECT_EQ(limiter->state().running, 2u);
  d.succeed(0, 4);
  d.run();
  EXPECT_EQ(d.outcome().value(), 4);
  EXPECT_EQ(limiter->controller().total(LimitSample::ignored), 1u) << "the loser's cancellation";
  EXPECT_EQ(limiter->state().running, 0u);
}

TEST(AdaptiveLimiterMetrics, TheLimitAndSamplesAreSeries) {
  auto clock = ManualClock::create();
  AdaptiveLimitOptions o = one_sample_windows();
  auto limiter = adaptive_concurrency_limit(o);
  auto metrics = std::make_shared<MetricsObserver>();
  const Shield shield = Shield{}.with_clock(clock).use(limiter).with_name("api").observed_by(metrics);
  (void)shield.execute([] { return 1; });
  clock->advance(1s);
  EXPECT_THROW((void)shield.execute([]() -> int {
    throw boost::system::system_error(make_error_code(errc::timeout));
  }),
               std::exception);
  ASSERT_EQ(limiter->limit(), 9u);
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.concurrency_limit.limit", {{"kevlar.shield.name", "api"}}), 9);
  EXPECT_EQ(s.value("kevlar.concurrency_limit.capacity", {{"kevlar.shield.name", "api"}}), 9);
  EXPECT_EQ(s.value("kevlar.concurrency_limit.samples", {{"kevlar.sample.kind", "success"}}), 1);
  EXPECT_EQ(s.value("kevlar.concurrency_limit.samples", {{"kevlar.sample.kind", "dropped"}}), 1);
}

}  // namespace
}  // namespace kevlar
