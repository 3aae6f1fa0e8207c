// The adaptive throttle as a strategy, on a manual clock and an injected random source: the
// formula at known counts, the traffic threshold, buckets leaving the window, what a clause, a
// cancellation and a local refusal further in count as, rejections (errc::throttled, Rejected,
// Throttled, the hook) in synchronous, callback and coroutine executions, the decision at the
// random draw's threshold, options, describe(), and how it composes with a retry.
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/error.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/event_recorder.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using testing::StrategyDriver;

/// A failure the default clause handles (the dependency refused the call).
error_code refused() {
  return make_error_code(boost::system::errc::io_error);
}

/// An Asio operation that completes at once (posted) with 7, counting its starts.
auto counted_op(int& starts) {
  return [&starts](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&starts](auto handler) {
          ++starts;
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, asio::append(std::move(handler), error_code(), 7));
        },
        token);
  };
}

struct Throttle : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // at 1 h: a bucket boundary
  /// What the injected random source answers; 0.999 admits everything below the 0.9 cap.
  double draw = 0.999;
  int draws = 0;
  std::shared_ptr<AdaptiveThrottleStrategy> throttle;
  std::shared_ptr<testing::EventRecorder> events = std::make_shared<testing::EventRecorder>();
  std::vector<ThrottleEvent> hooked;
  Shield shield;

  void make(AdaptiveThrottleOptions o = {}) {
    o.random = [this] {
      ++draws;
      return draw;
    };
    o.on_throttled = [this](const ThrottleEvent& e) { hooked.push_back(e); };
    throttle = AdaptiveThrottleStrategy::create(std::move(o));
    shield = Shield{}.with_clock(clock).use(throttle).observed_by(events);
  }
  void succeed(int n) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(shield.execute([] { return 1; }), 1);
  }
  void fail(int n) {
    for (int i = 0; i < n; ++i) {
      const Outcome<int> o =
          shield.execute_outcome([]() -> int { throw boost::system::system_error(refused()); });
      ASSERT_TRUE(o.has_exception());
    }
  }
  [[nodiscard]] AdaptiveThrottleSnapshot now() const { return throttle->snapshot(*clock); }
};

// ---- the formula -------------------------------------------------------------------------------

TEST_F(Throttle, TheProbabilityIsTheSreFormulaAtTheWindowsCounts) {
  make();
  succeed(4);
  fail(6);
  const AdaptiveThrottleSnapshot s = now();
  EXPECT_EQ(s.requests, 10u);
  EXPECT_EQ(s.accepts, 4u);
  EXPECT_DOUBLE_EQ(s.probability, (10.0 - 2 * 4) / (10 + 1));
  EXPECT_DOUBLE_EQ(throttle->rejection_probability(clock->now()), s.probability);
}

TEST_F(Throttle, NoRejectionWhileAtLeastOneRequestInKIsAccepted) {
  make();
  succeed(5);
  fail(5);  // 10 requests, 5 accepts: 10 - 2 x 5 = 0
  EXPECT_EQ(now().probability, 0.0);
  EXPECT_EQ(draws, 0) << "the random source is asked only while p > 0";
  fail(1);  // 11 - 10 = 1: p = 1/12
  EXPECT_DOUBLE_EQ(now().probability, 1.0 / 12);
}

TEST(ThrottleFormula, MultiplierAggressionAndCapShapeIt) {
  AdaptiveThrottleOptions o;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(10, 4), 2.0 / 11);
  EXPECT_EQ(adaptive_throttle(o)->probability_of(10, 5), 0.0);
  EXPECT_EQ(adaptive_throttle(o)->probability_of(0, 0), 0.0);
  EXPECT_EQ(adaptive_throttle(o)->probability_of(3, 7), 0.0) << "more accepts than requests";
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(100, 0), 0.9) << "the default cap";
  o.multiplier = 1;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(10, 9), 1.0 / 11);
  o.multiplier = 1.5;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(10, 4), 4.0 / 11);
  o.multiplier = 2;
  o.aggression = 2;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(10, 2), std::sqrt(6.0 / 11));
  o.aggression = 4;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(10, 2), std::pow(6.0 / 11, 0.25));
  o.aggression = 1;
  o.max_rejection_probability = 0.5;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(100, 0), 0.5);
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(10, 4), 2.0 / 11) << "below the cap";
  o.max_rejection_probability = 1;
  EXPECT_DOUBLE_EQ(adaptive_throttle(o)->probability_of(100, 0), 100.0 / 101);
}

TEST_F(Throttle, BelowTheTrafficThresholdNothingIsThrottled) {
  AdaptiveThrottleOptions o;
  o.min_requests_per_second = 1;  // 120 requests in the 2 minute window
  make(o);
  fail(119);
  EXPECT_EQ(now().requests, 119u);
  EXPECT_EQ(now().probability, 0.0) << "119 requests in 120 s is below 1 per second";
  EXPECT_DOUBLE_EQ(throttle->probability_of(119, 0), 0.9) << "the formula alone would throttle";
  fail(1);
  EXPECT_DOUBLE_EQ(now().probability, 0.9);
}

// ---- the window --------------------------------------------------------------------------------

TEST_F(Throttle, BucketsLeaveTheWindowAsTheClockMoves) {
  make();  // 2 minutes in 20 buckets of 6 s
  EXPECT_EQ(throttle->window().bucket_width(), 6s);
  fail(4);  // bucket [1h, 1h + 6s)
  clock->advance(6s);
  succeed(2);  // the next bucket
  EXPECT_EQ(now().requests, 6u);
  EXPECT_EQ(now().accepts, 2u);
  clock->advance(114s - 1ns);  // the last instant the first bucket is in the window
  EXPECT_EQ(now().requests, 6u);
  clock->advance(1ns);  // 2 minutes after the first bucket began: it is forgotten
  EXPECT_EQ(now().requests, 2u);
  EXPECT_EQ(now().accepts, 2u);
  EXPECT_EQ(now().probability, 0.0);
  fail(1);  // a new bucket
  EXPECT_EQ(now().requests, 3u);
  clock->advance(6s);
  EXPECT_EQ(now().requests, 1u);
  EXPECT_EQ(now().accepts, 0u);
  clock->advance(2min);
  EXPECT_EQ(now().requests, 0u) << "an idle window empties";
}

TEST_F(Throttle, DecisionsFollowTheBucketsAsTheClockMoves) {
  make();
  succeed(2);
  fail(4);  // 6 requests, 2 accepts: p = 2/7
  clock->advance(6s);
  fail(1);  // the next bucket: 7 requests, p = 3/8
  draw = 0;
  EXPECT_TRUE(shield.execute_outcome([] { return 1; }).has_error());
  ASSERT_EQ(hooked.size(), 1u);
  EXPECT_EQ(hooked[0].requests, 7u) << "the bucket before and this one";
  EXPECT_EQ(hooked[0].accepts, 2u);
  EXPECT_DOUBLE_EQ(hooked[0].probability, 3.0 / 8);
  clock->advance(114s);  // the first bucket leaves the window: 2 requests (1 refused, 1 rejected)
  EXPECT_TRUE(shield.execute_outcome([] { return 1; }).has_error());
  ASSERT_EQ(hooked.size(), 2u);
  EXPECT_EQ(hooked[1].requests, 2u);
  EXPECT_EQ(hooked[1].accepts, 0u);
  clock->advance(6s);  // the second bucket leaves: only the last rejection (1 request) is left
  EXPECT_TRUE(shield.execute_outcome([] { return 1; }).has_error());
  ASSERT_EQ(hooked.size(), 3u);
  EXPECT_EQ(hooked[2].requests, 1u);
  clock->advance(2min);  // the whole window has passed
  EXPECT_EQ(shield.execute([] { return 5; }), 5);
  EXPECT_EQ(hooked.size(), 3u);
}

TEST_F(Throttle, AFailureStormIsForgottenAWindowLater) {
  make();
  fail(50);
  EXPECT_DOUBLE_EQ(now().probability, 0.9);
  clock->advance(2min);
  EXPECT_EQ(now().probability, 0.0);
  draw = 0;  // would reject any call while p > 0
  succeed(1);
}

// ---- what counts as an accept ------------------------------------------------------------------

TEST_F(Throttle, AResultClauseMakesA503NotAccepted) {
  AdaptiveThrottleOptions o;
  o.handles = Clause().result<int>([](int status) { return status == 503 || status == 429; });
  make(o);
  for (int status : {503, 429, 503, 200}) {
    EXPECT_EQ(shield.execute([status] { return status; }), status) << "the outcome is unchanged";
  }
  EXPECT_EQ(now().requests, 4u);
  EXPECT_EQ(now().accepts, 1u);
  // A failure the clause does not name came back from the dependency: accepted.
  const Outcome<int> o2 =
      shield.execute_outcome([]() -> int { throw boost::system::system_error(refused()); });
  EXPECT_TRUE(o2.has_exception());
  EXPECT_EQ(now().accepts, 2u);
}

TEST_F(Throttle, TheAmbientClauseAppliesWithoutAnOwnOne) {
  const auto t = AdaptiveThrottleStrategy::create();
  const Shield ambient =
      Shield{}.with_clock(clock).when(Clause().result<int>([](int s) { return s == 503; })).use(t);
  (void)ambient.execute([] { return 503; });
  (void)ambient.execute([] { return 200; });
  EXPECT_EQ(t->snapshot(*clock).requests, 2u);
  EXPECT_EQ(t->snapshot(*clock).accepts, 1u);
}

TEST_F(Throttle, TheCallersCancellationIsNeitherAcceptedNorRefused) {
  make();
  StrategyDriver<int> d(shield, clock);
  d.start();
  EXPECT_EQ(now().requests, 1u) << "counted before it is sent";
  d.cancel();
  d.run();
  ASSERT_TRUE(d.outcome().has_error());
  EXPECT_TRUE(is_cancellation(d.outcome().error()));
  EXPECT_EQ(now().requests, 0u) << "the request was not taken back";
  EXPECT_EQ(now().accepts, 0u);
  // A synchronous call that ends in a cancellation exception: the same.
  (void)shield.execute_outcome([]() -> int {
    throw boost::system::system_error(make_error_code(asio::error::operation_aborted));
  });
  EXPECT_EQ(now().requests, 0u);
}

TEST_F(Throttle, AnUnhandledFailureAfterTheCallerCancelledIsNeither) {
  AdaptiveThrottleOptions o;
  o.handles = Clause().result<int>([](int s) { return s == 503; });
  make(o);
  StrategyDriver<int> d(shield, clock, testing::StrategyDriverOptions{false, true});
  d.start();
  d.cancel();
  d.fail(0, refused());  // not a cancellation, but the caller had cancelled
  EXPECT_EQ(now().requests, 0u);
  EXPECT_EQ(now().accepts, 0u);
}

TEST_F(Throttle, ALocalRefusalFurtherInNeverReachedTheDependency) {
  make();
  for (errc e :
       {errc::circuit_open, errc::isolated, errc::rate_limited, errc::concurrency_limit_exceeded,
        errc::throttled, errc::queue_timeout, errc::closed}) {
    StrategyDriver<int> d(shield, clock);
    d.start();
    d.fail(0, make_error_code(e));
    EXPECT_EQ(d.outcome().error(), make_error_code(e));
    EXPECT_EQ(now().requests, 0u) << make_error_code(e).message();
  }
  // A real rate limit inside: its rejection takes the throttle's request back.
  const Shield limited = Shield{}.with_clock(clock).use(throttle).rate_limit(1, 1h);
  EXPECT_EQ(limited.execute([] { return 1; }), 1);
  EXPECT_THROW((void)limited.execute([] { return 2; }), Error);
  EXPECT_EQ(now().requests, 1u);
  EXPECT_EQ(now().accepts, 1u);
  // kevlar's timeout further in is the dependency not answering in time: refused.
  StrategyDriver<int> d(shield, clock);
  d.start();
  d.fail(0, make_error_code(errc::timeout));
  EXPECT_EQ(now().requests, 2u);
  EXPECT_EQ(now().accepts, 1u);
}

TEST_F(Throttle, AnAbandonedExecutionTakesItsRequestBack) {
  make();
  {
    StrategyDriver<int> d(shield, clock);
    d.start();
    EXPECT_EQ(now().requests, 1u);
    d.drop(0);  // the operation's handler is destroyed: the execution is abandoned
  }
  EXPECT_EQ(now().requests, 0u);
  EXPECT_EQ(now().accepts, 0u);
}

TEST_F(Throttle, AClausePredicateThatThrowsFailsTheCallAndCountsNothing) {
  AdaptiveThrottleOptions o;
  o.handles = Clause().result<int>([](int) -> bool { throw std::runtime_error("predicate"); });
  make(o);
  try {
    (void)shield.execute([] { return 1; });
    ADD_FAILURE() << "the predicate's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "predicate");
  }
  EXPECT_EQ(now().requests, 0u);
  EXPECT_EQ(now().accepts, 0u);
}

// ---- rejections --------------------------------------------------------------------------------

/// A throttle at p = 0.5 (one refused request, K = 2) that rejects every call (draw 0).
struct Rejecting : Throttle {
  void SetUp() override {
    make();
    fail(1);
    ASSERT_DOUBLE_EQ(now().probability, 0.5);
    draw = 0;
    events->clear();
  }
  void expect_one_rejection(std::size_t requests_before) {
    const std::vector<testing::RecordedDetail> d = events->details();
    std::vector<std::string> kinds;
    for (const auto& e : d) kinds.emplace_back(e.name());
    ASSERT_GE(d.size(), 2u);
    ASSERT_TRUE(d[0].is<Rejected>()) << kinds[0];
    EXPECT_EQ(d[0].get_if<Rejected>()->kind, RejectionKind::throttle);
    EXPECT_FALSE(d[0].get_if<Rejected>()->retry_after.has_value());
    ASSERT_TRUE(d[1].is<Throttled>()) << kinds[1];
    EXPECT_DOUBLE_EQ(d[1].get_if<Throttled>()->probability, 0.5);
    EXPECT_EQ(d[1].get_if<Throttled>()->requests, requests_before);
    EXPECT_EQ(d[1].get_if<Throttled>()->accepts, 0u);
    ASSERT_EQ(hooked.size(), 1u);
    EXPECT_DOUBLE_EQ(hooked[0].probability, 0.5);
    EXPECT_EQ(hooked[0].requests, requests_before);
    EXPECT_EQ(hooked[0].strategy_index, 0u);
    EXPECT_EQ(now().requests, requests_before + 1) << "a rejected call is a request too";
  }
};

TEST_F(Rejecting, ASynchronousCallFailsWithThrottledWithoutRunning) {
  int runs = 0;
  try {
    (void)shield.execute([&runs] { return ++runs; });
    ADD_FAILURE() << "not rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::throttled);
    EXPECT_FALSE(e.retry_after().has_value());
  }
  EXPECT_EQ(runs, 0);
  expect_one_rejection(1);
}

TEST_F(Rejecting, ACallbackCompletesWithThrottled) {
  asio::io_context ioc;
  int starts = 0;
  std::optional<error_code> result;
  shield.execute_async(counted_op(starts),
                       asio::bind_executor(ioc, [&](error_code ec, int) { result = ec; }));
  EXPECT_FALSE(result.has_value()) << "completed inside execute_async";
  ioc.run();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, make_error_code(errc::throttled));
  EXPECT_EQ(starts, 0);
  expect_one_rejection(1);
}

TEST_F(Rejecting, ACoroutineGetsThrottled) {
  asio::io_context ioc;
  int starts = 0;
  std::optional<error_code> result;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        try {
          (void)co_await shield.execute_async(counted_op(starts), asio::use_awaitable);
          result = error_code();
        } catch (const boost::system::system_error& e) {
          result = e.code();
        }
      },
      asio::detached);
  ioc.run();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, make_error_code(errc::throttled));
  EXPECT_EQ(starts, 0);
  expect_one_rejection(1);
}

TEST_F(Throttle, TheRandomDrawDecidesAtTheThreshold) {
  make();
  succeed(4);
  fail(6);
  const double p = 2.0 / 11;
  ASSERT_DOUBLE_EQ(now().probability, p);
  draws = 0;
  draw = p;  // not below p: admitted
  EXPECT_EQ(shield.execute([] { return 3; }), 3);
  EXPECT_EQ(draws, 1);
  // That call was accepted: 11 requests, 5 accepts, p = 1/12.
  const double q = 1.0 / 12;
  ASSERT_DOUBLE_EQ(now().probability, q);
  draw = std::nextafter(q, 0.0);  // just below: rejected
  EXPECT_TRUE(shield.execute_outcome([] { return 4; }).has_error());
  EXPECT_EQ(draws, 2);
  ASSERT_EQ(hooked.size(), 1u);
  EXPECT_DOUBLE_EQ(hooked[0].probability, q);
  EXPECT_EQ(hooked[0].requests, 11u);
  EXPECT_EQ(hooked[0].accepts, 5u);
}

TEST_F(Throttle, RejectionsKeepRaisingTheProbabilityUpToTheCap) {
  AdaptiveThrottleOptions o;
  o.max_rejection_probability = 0.75;
  make(o);
  fail(1);
  draw = 0;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(shield.execute_outcome([] { return 1; }).has_error());
  EXPECT_EQ(now().requests, 11u);
  EXPECT_DOUBLE_EQ(now().probability, 0.75);
  EXPECT_EQ(hooked.back().requests, 10u);
}

TEST_F(Throttle, AHookThatThrowsReplacesTheRejection) {
  AdaptiveThrottleOptions throwing;
  throwing.random = [] { return 0.0; };
  throwing.on_throttled = [](const ThrottleEvent&) { throw std::runtime_error("hook"); };
  auto t = adaptive_throttle(throwing);
  const Shield s = Shield{}.with_clock(clock).use(t);
  (void)s.execute_outcome([]() -> int { throw boost::system::system_error(refused()); });
  try {
    (void)s.execute([] { return 1; });
    ADD_FAILURE() << "the hook's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "hook");
  }
  EXPECT_EQ(t->snapshot(*clock).requests, 2u);
}

TEST_F(Rejecting, TheMetricsCountTheRejectionAsThrottle) {
  auto metrics = std::make_shared<MetricsObserver>();
  const Shield named =
      Shield{}.with_clock(clock).use(throttle).with_name("api").observed_by(metrics);
  EXPECT_TRUE(named.execute_outcome([] { return 1; }).has_error());
  EXPECT_EQ(metrics->snapshot().value("kevlar.rejections", {{"kevlar.shield.name", "api"},
                                                            {"kevlar.rejection.type", "throttle"}}),
            1);
}

// ---- composition -------------------------------------------------------------------------------

TEST_F(Throttle, InsideARetryEachAttemptCountsOutsideOnlyTheCall) {
  make();
  RetryOptions r;
  r.max_retries = 2;
  r.backoff = Backoff::none();
  int n = 0;
  const auto fails_twice = [&n] {
    if (++n % 3 != 0) throw boost::system::system_error(refused());
    return n;
  };
  const Shield inside = Shield{}.with_clock(clock).retry(r).use(throttle);
  EXPECT_EQ(inside.execute(fails_twice), 3);
  EXPECT_EQ(now().requests, 3u);
  EXPECT_EQ(now().accepts, 1u);
  auto outer = adaptive_throttle();
  const Shield outside = Shield{}.with_clock(clock).use(outer).retry(r);
  EXPECT_EQ(outside.execute(fails_twice), 6);
  EXPECT_EQ(outer->snapshot(*clock).requests, 1u);
  EXPECT_EQ(outer->snapshot(*clock).accepts, 1u);
}

TEST_F(Throttle, ShieldsSharingTheInstanceShareTheWindow) {
  make();
  const Shield other = Shield{}.with_clock(clock).use(throttle);
  succeed(1);
  (void)other.execute([] { return 2; });
  EXPECT_EQ(now().requests, 2u);
  EXPECT_EQ(now().accepts, 2u);
}

// ---- options -----------------------------------------------------------------------------------

TEST(ThrottleOptions, InvalidOptionsAreNamed) {
  const auto what = [](AdaptiveThrottleOptions o) -> std::string {
    try {
      (void)adaptive_throttle(std::move(o));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  const auto names = [&](AdaptiveThrottleOptions o, const std::string& option) {
    const std::string w = what(std::move(o));
    EXPECT_NE(w.find("kevlar::AdaptiveThrottleOptions::" + option), std::string::npos) << w;
  };
  AdaptiveThrottleOptions o;
  o.multiplier = 0.99;
  names(o, "multiplier");
  o.multiplier = std::nan("");
  names(o, "multiplier");
  o = {};
  o.window = 999ms;
  names(o, "window");
  o.window = 1h + 1ns;
  names(o, "window");
  o = {};
  o.buckets = 0;
  names(o, "buckets");
  o.buckets = 1001;
  names(o, "buckets");
  o = {};
  o.aggression = 0.5;
  names(o, "aggression");
  o = {};
  o.max_rejection_probability = 0;
  names(o, "max_rejection_probability");
  o.max_rejection_probability = 1.01;
  names(o, "max_rejection_probability");
  o = {};
  o.min_requests_per_second = -1;
  names(o, "min_requests_per_second");
  o.min_requests_per_second = std::numeric_limits<double>::infinity();
  names(o, "min_requests_per_second");
  EXPECT_EQ(what(AdaptiveThrottleOptions{}), "accepted");
  o = {};
  o.window = 1s;
  o.buckets = 1000;
  o.multiplier = 1;
  o.aggression = 1;
  o.max_rejection_probability = 1;
  EXPECT_EQ(what(o), "accepted") << "the bounds are valid";
  o.window = 1h;
  EXPECT_EQ(what(o), "accepted");
}

TEST(ThrottleOptions, DescribeNamesKTheWindowAndWhatDiffers) {
  EXPECT_EQ(adaptive_throttle()->describe(), "AdaptiveThrottle(K=2, 2m)");
  AdaptiveThrottleOptions o;
  o.multiplier = 1.5;
  o.window = 30s;
  o.buckets = 30;
  o.aggression = 2;
  o.max_rejection_probability = 0.8;
  o.min_requests_per_second = 5;
  EXPECT_EQ(adaptive_throttle(o)->describe(),
            "AdaptiveThrottle(K=1.5, 30s, buckets 30, aggression 2, max 0.8, min 5/s)");
  EXPECT_NE(Shield{}.adaptive_throttle().describe().find("AdaptiveThrottle(K=2, 2m)"),
            std::string::npos);
}

TEST(ThrottleOptions, ItIsAReactiveStatefulStrategyWithItsOwnClause) {
  auto t = adaptive_throttle();
  EXPECT_EQ(t->traits().role, StrategyRole::reactive);
  EXPECT_TRUE(t->traits().stateful);
  EXPECT_EQ(t->traits().clause, nullptr);
  AdaptiveThrottleOptions o;
  o.handles = Clause().error(errc::timeout);
  EXPECT_NE(adaptive_throttle(o)->traits().clause, nullptr);
  EXPECT_THROW((void)Shield{}.use(t).use(t), std::invalid_argument) << "one instance per chain";
}

}  // namespace
}  // namespace kevlar
