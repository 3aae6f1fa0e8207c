// Hedging end to end: real io_context, a ManualClock, and operations that stay pending until the
// test completes them (tests/support/pending_ops.hpp).
#include <pending_ops.hpp>
#include <test_options.hpp>

#include <kevlar/kevlar.hpp>
#include <kevlar/metrics.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <memory>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

const error_code down = make_error_code(boost::system::errc::connection_refused);
const error_code reset = make_error_code(boost::system::errc::connection_reset);

struct Result {
  std::optional<error_code> ec;
  int value = 0;
};

struct Hedging : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  asio::io_context ioc;
  asio::cancellation_signal cancel;  // outlives the calls bound to it
  test::PendingOps ops;  // destroyed first: a pending call's handler is abandoned with ioc alive

  Shield base() const { return Shield{}.with_clock(clock); }

  /// Starts `shield.execute_async(ops.attempt())` with a callback bound to the io_context and to
  /// `cancel`, then runs what is ready.
  Result& start(const Shield& shield) {
    results.push_back(std::make_unique<Result>());
    Result* r = results.back().get();
    shield.execute_async(ops.attempt(),
                         asio::bind_cancellation_slot(
                             cancel.slot(), asio::bind_executor(ioc, [r](error_code ec, int v) {
                               r->ec = ec;
                               r->value = v;
                             })));
    poll();
    return *r;
  }
  void poll() {
    ioc.restart();
    ioc.poll();
  }
  void advance(Clock::duration d) {
    clock->advance(d);
    poll();
  }
  /// Completes call `i` and runs what is ready.
  void finish(std::size_t i, error_code ec, int value = 0) {
    ops.complete(i, ec, value);
    poll();
  }

  /// Spawns `body` as a coroutine on the io_context and runs what is ready.
  template <class Body>
  void spawn(Body body) {
    asio::co_spawn(ioc, std::move(body), asio::detached);
    poll();
  }

  std::vector<std::unique_ptr<Result>> results;
};

std::vector<asio::cancellation_type> terminal_once() {
  return {asio::cancellation_type::terminal};
}

TEST_F(Hedging, TheFirstAttemptThatWinsBeforeTheDelayIsTheOnlyOne) {
  Result& r = start(base().hedge(2, 1s));
  ASSERT_EQ(ops.size(), 1u);
  finish(0, {}, 7);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 7);
  advance(5s);
  EXPECT_EQ(ops.size(), 1u) << "no hedge once the call completed";
  EXPECT_TRUE(ops.at(0).cancellations.empty());
}

TEST_F(Hedging, AnObservedHedgeReportsOneExecutionWithEveryAttempt) {
  // The engine times the caller's execution, not each attempt the hedge runs inside it.
  struct Finished final : Observer {
    std::vector<ExecutionFinished> seen;
    void on_event(const Event& e) override {
      if (const auto* f = e.get_if<ExecutionFinished>()) seen.push_back(*f);
    }
  };
  const auto observer = std::make_shared<Finished>();
  Result& r = start(base().observed_by(observer).hedge(2, 1s));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  advance(2s);
  finish(1, {}, 8);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(r.value, 8);
  ASSERT_EQ(observer->seen.size(), 1u) << "one execution, whatever ran inside it";
  EXPECT_TRUE(observer->seen[0].success);
  EXPECT_EQ(observer->seen[0].attempts, 2u);
  EXPECT_EQ(observer->seen[0].duration, 3s) << "from the call's start, not the attempt's";
}

TEST_F(Hedging, AFiniteDelayLaunchesTheNextAttemptWhenTheClockReachesIt) {
  Result& r = start(base().hedge(2, 1s));
  advance(999ms);
  EXPECT_EQ(ops.size(), 1u);
  advance(1ms);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_FALSE(r.ec.has_value());
  finish(1, {}, 8);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 8) << "the second attempt answered first";
  EXPECT_EQ(ops.at(0).cancellations, terminal_once()) << "the loser is cancelled through its slot";
  EXPECT_EQ(ops.pending(), 0u) << "the loser's operation really stopped";
}

TEST_F(Hedging, AFreshFullDelayStartsAfterEveryLaunch) {
  Result& r = start(base().hedge(3, 1s));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  advance(999ms);
  EXPECT_EQ(ops.size(), 2u);
  advance(1ms);
  EXPECT_EQ(ops.size(), 3u);
  advance(10s);
  EXPECT_EQ(ops.size(), 3u) << "never more than max_attempts";
  finish(0, {}, 1);
  EXPECT_EQ(r.value, 1);
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  EXPECT_EQ(ops.at(2).cancellations, terminal_once());
}

TEST_F(Hedging, AZeroDelayLaunchesEveryAttemptAtOnceAndTheFastestWins) {
  Result& r = start(base().hedge(3, 0s));
  ASSERT_EQ(ops.size(), 3u);
  finish(2, {}, 30);
  EXPECT_EQ(r.value, 30);
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  EXPECT_TRUE(ops.at(2).cancellations.empty());
}

TEST_F(Hedging, AHandledFailureLaunchesTheNextAttemptAtOnce) {
  Result& r = start(base().hedge(3, 10s));
  finish(0, down);
  ASSERT_EQ(ops.size(), 2u) << "no wait for the delay after a handled failure";
  EXPECT_FALSE(r.ec.has_value());
  finish(1, {}, 5);
  EXPECT_EQ(r.value, 5);
}

TEST_F(Hedging, AFreshFullDelayStartsAfterAHandledCompletion) {
  start(base().hedge(3, 1s));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  advance(500ms);
  finish(0, down);  // handled: attempt 3 starts at once
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops.pending(), 2u);
}

TEST_F(Hedging, WhenEveryAttemptFailsTheLastToCompleteIsTheOutcome) {
  Result& r = start(base().hedge(2, 0s));
  ASSERT_EQ(ops.size(), 2u);
  finish(1, down);
  EXPECT_FALSE(r.ec.has_value());
  finish(0, reset);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, reset);
}

TEST_F(Hedging, AnInfiniteDelayLaunchesOnlyAfterAHandledFailure) {
  Result& r = start(base().hedge(3, HedgeOptions::infinite_delay));
  advance(24h);
  EXPECT_EQ(ops.size(), 1u);
  finish(0, down);
  ASSERT_EQ(ops.size(), 2u);
  finish(1, down);
  ASSERT_EQ(ops.size(), 3u);
  finish(2, down);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, down);
}

TEST_F(Hedging, AnUnhandledFailureWinsAtOnce) {
  // Only `down` is handled: `reset` is an answer, not a reason to hedge.
  Result& r = start(base().when(Clause{}.error(down)).hedge(2, 0s));
  ASSERT_EQ(ops.size(), 2u);
  finish(0, reset);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, reset);
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
}

TEST_F(Hedging, AResultClauseHedgesOnABadResult) {
  Result& r = start(base().when(Clause{}.result_equal(-1)).hedge(2, 10s));
  finish(0, {}, -1);
  ASSERT_EQ(ops.size(), 2u) << "a handled result launches the next attempt";
  finish(1, {}, 4);
  EXPECT_EQ(r.value, 4);
}

TEST_F(Hedging, CallerCancellationCancelsEveryAttemptAndLaunchesNoMore) {
  int hedges = 0;
  HedgeOptions o;
  o.max_attempts = 3;
  o.delay = 1s;
  o.on_hedge = [&](const HedgeEvent&) { ++hedges; };
  Result& r = start(base().hedge(o));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  cancel.emit(asio::cancellation_type::terminal);
  poll();
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  advance(10s);
  EXPECT_EQ(ops.size(), 2u) << "exactly one hedge: two invocations";
  EXPECT_EQ(hedges, 1);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted);
}

TEST_F(Hedging, CallerCancellationDuringTheStaggerLaunchesNothing) {
  Result& r = start(base().hedge(3, 1s));
  advance(500ms);
  cancel.emit(asio::cancellation_type::terminal);
  poll();
  advance(10s);
  EXPECT_EQ(ops.size(), 1u);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted);
}

TEST_F(Hedging, CancellationInsideOnHedgeLaunchesNothingAndCountsNoHedge) {
  auto metrics = std::make_shared<MetricsObserver>();
  HedgeOptions o;
  o.max_attempts = 3;
  o.delay = 1s;
  o.on_hedge = [&](const HedgeEvent&) { cancel.emit(asio::cancellation_type::terminal); };
  Result& r = start(base().observed_by(metrics).hedge(o));
  advance(1s);
  poll();
  EXPECT_EQ(ops.size(), 1u) << "the attempt the hook cancelled never ran";
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted);
  EXPECT_EQ(metrics->snapshot().value("kevlar.hedges"), 0.0);
}

TEST_F(Hedging, ACancellationInsideOnHedgeWhoseAttemptsCompleteInlineIsReportedAfterTheHook) {
  ops.complete_inside_cancellation = true;
  HedgeOptions o;
  o.max_attempts = 3;
  o.delay = 1s;
  int after_cancel = 0;
  o.on_hedge = [&](const HedgeEvent&) {
    cancel.emit(asio::cancellation_type::terminal);
    ++after_cancel;  // the execution must still exist here: nothing was reported inside the emit
  };
  Result& r = start(base().hedge(o));
  advance(1s);
  EXPECT_EQ(after_cancel, 1);
  EXPECT_EQ(ops.size(), 1u);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted);
}

TEST_F(Hedging, ACancellationThatCompletesEveryLoserAtOnceLeavesNothingBehind) {
  // Cancelling the first loser completes it and the second one inline, while the engine is
  // still cancelling: both are discarded, none is reported.
  ops.cancel_fails_every_call = true;
  ops.complete_inside_cancellation = true;
  Result& r = start(base().hedge(3, 0s));
  ASSERT_EQ(ops.size(), 3u);
  finish(2, {}, 5);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 5);
  EXPECT_EQ(ops.pending(), 0u);
}

TEST_F(Hedging, NoAttemptStartsOnceAnOuterDeadlineHasPassed) {
  // The stagger (every second) and the 2 s budget fall due together at t = 2 s, in two queues:
  // whichever fires first, the third attempt never starts.
  Result& r = start(base().timeout(2s).hedge(3, 1s));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  advance(1s);
  EXPECT_EQ(ops.size(), 2u);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, make_error_code(errc::timeout));
}

TEST_F(Hedging, HooksSeeTheAttemptNumbersAndTheGeneratorSteersEachAttempt) {
  std::vector<std::uint32_t> hooked;
  HedgeOptions o;
  o.max_attempts = 3;
  o.delay = 0s;
  o.on_hedge = [&](const HedgeEvent& e) { hooked.push_back(e.attempt); };
  o.action_generator = [&](const HedgeActionArguments& a) {
    a.context.properties().set(test::PendingOps::replica_key(), static_cast<int>(a.attempt) * 10);
  };
  start(base().hedge(o));
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(hooked, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_FALSE(ops.at(0).replica.has_value()) << "the first attempt runs the original operation";
  EXPECT_EQ(ops.at(1).replica, 20);
  EXPECT_EQ(ops.at(2).replica, 30);
  EXPECT_EQ(ops.at(0).attempt, 1u);
  EXPECT_EQ(ops.at(1).attempt, 2u);
  EXPECT_EQ(ops.at(2).attempt, 3u);
}

TEST_F(Hedging, AHookThatThrowsCancelsTheRunningAttemptsAndBecomesTheOutcome) {
  auto metrics = std::make_shared<MetricsObserver>();
  HedgeOptions o;
  o.delay = 1s;
  o.on_hedge = [](const HedgeEvent&) { throw std::runtime_error("hook"); };
  const Shield shield = base().observed_by(metrics).hedge(o);
  Result& r = start(shield);
  advance(1s);
  EXPECT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, make_error_code(errc::callback_exception));
  EXPECT_EQ(metrics->snapshot().value("kevlar.hedges"), 0.0);
  // The next execution is healthy.
  Result& next = start(base().hedge(2, 1s));
  finish(1, {}, 3);
  EXPECT_EQ(next.value, 3);
}

TEST_F(Hedging, MetricsCountLaunchedHedgesOnly) {
  auto metrics = std::make_shared<MetricsObserver>();
  start(base().observed_by(metrics).hedge(3, 1s));
  advance(1s);
  advance(1s);
  ASSERT_EQ(ops.size(), 3u);
  finish(0, {}, 1);
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.hedges"), 2.0);
  EXPECT_EQ(s.value("kevlar.executions", {{"kevlar.execution.outcome", "success"}}), 1.0);
}

/// Writes a property when its attempt starts: the hedge's attempts must not see each other's.
class PropertyWriter final : public Strategy {
 public:
  std::string describe() const override { return "PropertyWriter"; }
  Step on_start(Layer& layer) override {
    seen.push_back(layer.context().properties().get_or(key, 0));
    layer.context().properties().set(key, static_cast<int>(seen.size()));
    return Step::run_inner;
  }
  Step on_inner_complete(Layer&) override { return Step::complete; }
  Key<int> key{"written"};
  std::vector<int> seen;
};

TEST_F(Hedging, EachAttemptWritesItsOwnCopyOfTheProperties) {
  auto writer = std::make_shared<PropertyWriter>();
  start(base().hedge(3, 1s).use(writer));
  advance(1s);
  advance(1s);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(writer->seen, (std::vector<int>{0, 0, 0}))
      << "each attempt starts from the execution's properties, not a sibling's writes";
}

TEST_F(Hedging, RetryOutsideAHedgeRunsTheExactSequence) {
  std::vector<std::string> log;
  RetryOptions retry = test::constant_retries(1, 0s);
  retry.on_retry = [&](const RetryEvent&) { log.push_back("retry-group"); };
  HedgeOptions hedge;
  hedge.max_attempts = 3;
  hedge.delay = HedgeOptions::infinite_delay;
  hedge.on_hedge = [&](const HedgeEvent& e) { log.push_back("hedge-" + std::to_string(e.attempt)); };
  Result& r = start(base().retry(retry).hedge(hedge));
  for (std::size_t i = 0; i < 6; ++i) {
    ASSERT_EQ(ops.size(), i + 1);
    log.push_back("action-" + std::to_string(ops.at(i).attempt));
    finish(i, down);
  }
  EXPECT_EQ(log, (std::vector<std::string>{"action-1", "hedge-2", "action-2", "hedge-3", "action-3",
                                           "retry-group", "action-4", "hedge-2", "action-5",
                                           "hedge-3", "action-6"}));
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, down);
}

TEST_F(Hedging, AWinnerStopsTheRetryLoopsOfTheLosers) {
  // A retry inside the hedge: the loser's retry must not try again once it is cancelled.
  Result& r = start(base().hedge(2, 1s).retry(test::constant_retries(5, 0s)));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  finish(1, {}, 9);
  EXPECT_EQ(r.value, 9);
  advance(1s);
  EXPECT_EQ(ops.size(), 2u) << "the cancelled loser does not retry";
}

TEST_F(Hedging, ATotalTimeoutOutsideCancelsEveryAttemptAndLaunchesNoMore) {
  Result& r = start(base().timeout(5s).hedge(3, 3s));
  advance(3s);
  ASSERT_EQ(ops.size(), 2u);
  advance(2s);  // t = 5 s: the budget is spent one second before the third attempt is due
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, make_error_code(errc::timeout));
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  advance(10s);
  EXPECT_EQ(ops.size(), 2u);
}

TEST_F(Hedging, ATimeoutInsideGivesEachAttemptItsOwnBudget) {
  Result& r = start(base().hedge(2, 1s).timeout(3s));
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  advance(2s);  // t = 3 s: the first attempt's budget is spent, not the second's
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  EXPECT_TRUE(ops.at(1).cancellations.empty());
  EXPECT_FALSE(r.ec.has_value());
  advance(1s);  // t = 4 s: the second's
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, make_error_code(errc::timeout));
}

// A hedge inside a hedge: each outer attempt runs a hedge of its own, whose attempts are started
// by an attempt (the engine's attempts nest). A winner anywhere ends everything else.
TEST_F(Hedging, AHedgeInsideAHedgeRacesEveryAttemptOfBoth) {
  Result& r = start(base().hedge(2, 0s).hedge(2, 0s));
  ASSERT_EQ(ops.size(), 4u) << "two outer attempts, each hedged twice";
  finish(0, down);  // handled inside the first outer attempt: its other attempt runs on
  EXPECT_FALSE(r.ec.has_value());
  EXPECT_TRUE(ops.at(1).cancellations.empty());
  finish(3, {}, 12);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 12);
  EXPECT_EQ(ops.at(1).cancellations, terminal_once()) << "the other outer attempt's last one";
  EXPECT_EQ(ops.at(2).cancellations, terminal_once()) << "the winner's sibling";
  EXPECT_TRUE(ops.at(3).cancellations.empty());
  EXPECT_EQ(ops.pending(), 0u) << "every loser ended";
}

TEST_F(Hedging, AHedgeInsideAHedgeEndsWithTheLastFailureWhenEveryAttemptFails) {
  Result& r = start(base().hedge(2, 0s).hedge(2, 0s));
  ASSERT_EQ(ops.size(), 4u);
  finish(2, down);
  finish(0, down);
  finish(3, down);
  EXPECT_FALSE(r.ec.has_value()) << "one attempt is still running";
  finish(1, reset);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, reset);
}

/// The first execution it sees waits a second, then starts an attempt of its inner part even if
/// the wait was cancelled (a strategy that ignores its cancellation) and ends with that attempt's
/// outcome; every later one runs its inner part at once.
class StubbornFirst final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "StubbornFirst"; }
  kevlar::StrategyTraits traits() const noexcept override {
    kevlar::StrategyTraits t;
    t.needs_executor = true;
    t.asynchronous_only = true;
    return t;
  }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    return starts++ == 0 ? layer.wait_for(1s) : kevlar::Step::run_inner;
  }
  kevlar::Step on_wait_complete(kevlar::Layer& layer, const error_code& ec) override {
    waits.push_back(ec);
    layer.start_attempt();
    return kevlar::Step::suspend;
  }
  kevlar::Step on_attempt_complete(kevlar::Layer& layer, std::uint32_t) override {
    attempt_errors.push_back(layer.outcome().error());
    return kevlar::Step::complete;
  }
  int starts = 0;
  std::vector<error_code> waits;
  std::vector<error_code> attempt_errors;
};

// A losing hedge attempt is cancelled, then left to end on its own. An attempt started inside it
// after that, by a strategy that ignores the cancellation, starts no operation: it fails as
// cancelled at once, and the loser ends with it.
TEST_F(Hedging, AnAttemptStartedInsideALoserLeftBehindStartsNoOperation) {
  auto stubborn = std::make_shared<StubbornFirst>();
  Result& r = start(base().hedge(2, 0s).use(stubborn));
  ASSERT_EQ(ops.size(), 1u) << "the first hedge attempt waits; the second runs its operation";
  finish(0, {}, 21);  // the second wins: the first is cancelled in its wait, then left behind
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 21);
  ASSERT_EQ(stubborn->waits.size(), 1u);
  EXPECT_EQ(stubborn->waits[0], asio::error::operation_aborted);
  EXPECT_EQ(ops.size(), 1u) << "the attempt started inside the loser ran no operation";
  ASSERT_EQ(stubborn->attempt_errors.size(), 1u);
  EXPECT_EQ(stubborn->attempt_errors[0], asio::error::operation_aborted);
  advance(1s);
  EXPECT_EQ(ops.size(), 1u);
}

TEST_F(Hedging, AFallbackOutsideAnExhaustedHedgeFiresOnce) {
  int fallbacks = 0;
  FallbackOptions<int> f;
  f.value = 42;
  f.on_fallback = [&](const FallbackEvent<int>&) { ++fallbacks; };
  Result& r = start(base().fallback(f).hedge(2, 0s));
  finish(0, down);
  finish(1, down);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 42);
  EXPECT_EQ(fallbacks, 1);
}

TEST_F(Hedging, AnInnerRejectionDuringALaunchIsReportedAfterIt) {
  // The open breaker inside rejects every attempt while it is being launched.
  auto breaker = std::make_shared<CircuitBreaker>(test::consecutive_breaker(1, 1min));
  breaker->isolate();
  Result& r = start(base().hedge(3, 10s).use(breaker));
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, make_error_code(errc::isolated)) << "every attempt rejected: the last outcome";
  EXPECT_EQ(ops.size(), 0u);
}

TEST_F(Hedging, LosersThatCompleteInsideTheirCancellationHandlerEndCleanly) {
  ops.complete_inside_cancellation = true;
  Result& r = start(base().hedge(3, 0s));
  finish(1, {}, 2);
  EXPECT_EQ(r.value, 2);
  EXPECT_EQ(ops.pending(), 0u);
}

TEST_F(Hedging, CallerCancellationWhoseAttemptsCompleteInlineIsReported) {
  ops.complete_inside_cancellation = true;
  Result& r = start(base().hedge(2, 0s));
  cancel.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(r.ec.has_value()) << "completed inside the emit, as an operation may";
  EXPECT_EQ(*r.ec, asio::error::operation_aborted);
}

/// Counts its starts and finishes: every position that started must finish, also when abandoned.
class Counting final : public Strategy {
 public:
  std::string describe() const override { return "Counting"; }
  Step on_start(Layer&) override {
    ++starts;
    return Step::run_inner;
  }
  Step on_inner_complete(Layer&) override { return Step::complete; }
  void on_finish(Layer&) noexcept override { ++finishes; }
  int starts = 0;
  int finishes = 0;
};

TEST(HedgingAbandonment, AnExecutorShutDownWithAttemptsPendingFinishesEveryPosition) {
  auto clock = ManualClock::create();
  auto outer = std::make_shared<Counting>();
  auto inner = std::make_shared<Counting>();
  bool delivered = false;
  {
    test::PendingOps ops;
    {
      asio::io_context ioc;
      Shield{}.with_clock(clock).use(outer).hedge(3, 0s).use(inner).execute_async(
          ops.attempt(), asio::bind_executor(ioc, [&](error_code, int) { delivered = true; }));
      ioc.poll();
      ASSERT_EQ(ops.size(), 3u);
    }
    // ops' handlers die now, after their io_context: each attempt is abandoned in turn.
  }
  EXPECT_FALSE(delivered);
  EXPECT_EQ(outer->starts, 1);
  EXPECT_EQ(outer->finishes, 1);
  EXPECT_EQ(inner->starts, 3);
  EXPECT_EQ(inner->finishes, 3);
}

TEST(HedgingBuild, OptionsAreValidatedAndDescribed) {
  EXPECT_THROW((void)Shield{}.hedge(0, 1s), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.hedge(11, 1s), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.hedge(2, -1ms), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.hedge(2, HedgeOptions::max_delay + 1ms), std::invalid_argument);
  EXPECT_NO_THROW((void)Shield{}.hedge(10, HedgeOptions::max_delay));
  EXPECT_EQ(HedgeStrategy(HedgeOptions{}).describe(), "Hedge(2, 1s)");
  HedgeOptions o;
  o.max_attempts = 3;
  o.delay = HedgeOptions::infinite_delay;
  EXPECT_EQ(HedgeStrategy(o).describe(), "Hedge(3, infinite)");
  EXPECT_EQ(Shield{}.hedge(4, 0s).describe(), "Hedge(4, 0s)");
}

TEST(HedgingBuild, ASameClauseFallbackInsideAHedgeIsRefused) {
  EXPECT_THROW((void)Shield{}.hedge().fallback(1), std::invalid_argument);
  EXPECT_NO_THROW((void)Shield{}.fallback(1).hedge());
}

TEST(HedgingSync, ASynchronousExecutionOfARacingHedgeIsRefusedBeforeAnythingRuns) {
  int calls = 0;
  const Shield shield = Shield{}.hedge(2, 1s);
  try {
    (void)shield.execute([&] { return ++calls; });
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("Hedge(2, 1s)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("execute_async"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)shield.execute_outcome([&] { return ++calls; }), std::logic_error);
  EXPECT_EQ(calls, 0);
}

TEST(HedgingSync, ASingleAttemptHedgeIsAPassThroughAnywhere) {
  const Shield shield = Shield{}.hedge(1, 1s);
  EXPECT_EQ(shield.execute([] { return 5; }), 5);
  EXPECT_FALSE(shield.strategies().front()->traits().needs_executor);
}

TEST(HedgingExecutor, AHandlerWithoutAnExecutorIsRefused) {
  test::PendingOps ops;
  std::promise<error_code> got;
  Shield{}.hedge(2, 1s).execute_async(ops.attempt(),
                                      [&](error_code ec, int) { got.set_value(ec); });
  // The refusal runs on the system executor's thread: wait for it (an event, not a timer).
  EXPECT_EQ(got.get_future().get(), make_error_code(errc::executor_required));
  EXPECT_EQ(ops.size(), 0u);
}

// ---- other execution shapes ----------------------------------------------------------------

TEST_F(Hedging, ACoroutineAwaitsAHedgedCall) {
  std::optional<int> got;
  const Shield shield = base().hedge(2, 1s);
  spawn([&]() -> asio::awaitable<void> {
    got = co_await shield.execute_async(ops.attempt(), asio::use_awaitable);
  });
  advance(1s);
  ASSERT_EQ(ops.size(), 2u);
  finish(1, {}, 6);
  EXPECT_EQ(got, 6);
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
}

TEST_F(Hedging, AnAwaitableFactoryIsHedgedAndItsLoserCoroutineStops) {
  // Each attempt is a coroutine of its own; the loser's is cancelled through its spawn's slot and
  // its pending operation completes with operation_aborted.
  std::optional<int> got;
  std::exception_ptr failure;
  int finished_coroutines = 0;
  const Shield shield = base().hedge(2, 0s);
  spawn([&]() -> asio::awaitable<void> {
    try {
      got = co_await shield.execute_async([&]() -> asio::awaitable<int> {
        struct Count {
          int* n;
          ~Count() { ++*n; }
        } count{&finished_coroutines};
        co_return co_await ops.async_call(asio::use_awaitable);
      });
    } catch (...) {
      failure = std::current_exception();
    }
  });
  ASSERT_EQ(ops.size(), 2u);
  finish(0, {}, 4);
  EXPECT_EQ(got, 4);
  EXPECT_FALSE(failure);
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  EXPECT_EQ(finished_coroutines, 2) << "the loser's coroutine ran to its end";
}

TEST_F(Hedging, AnExceptionSignatureSurfacesTheLastHandledFailure) {
  std::exception_ptr failure;
  const Shield shield = base().hedge(2, 0s);
  spawn([&]() -> asio::awaitable<void> {
    try {
      (void)co_await shield.execute_async([&]() -> asio::awaitable<int> {
        co_return co_await ops.async_call(asio::use_awaitable);
      });
    } catch (...) {
      failure = std::current_exception();
    }
  });
  ASSERT_EQ(ops.size(), 2u);
  finish(0, down);
  finish(1, reset);
  ASSERT_TRUE(failure);
  try {
    std::rethrow_exception(failure);
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), reset) << "the last to complete";
  }
}

// ---- concurrency (ThreadSanitizer) --------------------------------------------------------

TEST(HedgingRaces, ManyHedgedCallsOnStrandsOfAMultiThreadedContext) {
  constexpr int threads = 4;
  constexpr int calls = 400;
  asio::io_context ioc(threads);
  const Shield shield = Shield{}.hedge(3, 0s).timeout(10s);
  std::atomic<int> done{0};
  std::atomic<int> wrong{0};
  std::vector<asio::strand<asio::io_context::executor_type>> strands;
  for (int i = 0; i < calls; ++i) strands.push_back(asio::make_strand(ioc));
  for (int i = 0; i < calls; ++i) {
    auto strand = strands[static_cast<std::size_t>(i)];
    asio::post(strand, [&, strand, i] {
      // Attempt n answers with n after n posts: the attempts race through the strand's queue.
      auto attempt = [strand, i](auto token) {
        return asio::async_initiate<decltype(token), void(error_code, int)>(
            [strand, i](auto handler) {
              Context* ctx = attempt_context(handler);
              const int n = ctx != nullptr ? static_cast<int>(ctx->attempt()) : -1;
              asio::post(strand, asio::append(std::move(handler), error_code{}, i * 10 + n));
            },
            token);
      };
      shield.execute_async(attempt, asio::bind_executor(strand, [&, i](error_code ec, int v) {
                             if (ec || v / 10 != i || v % 10 < 1 || v % 10 > 3) ++wrong;
                             ++done;
                           }));
    });
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&] { ioc.run(); });
  for (auto& t : pool) t.join();
  EXPECT_EQ(done.load(), calls);
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kevlar
