// The chaos strategies' decisions on the strategy driver: the order of the decision (enabled, kill
// switch, predicate, scope, rate, sample), the random sequence and what it consumes, every option,
// and what each injection does to an asynchronous execution (what starts, what waits, what is
// delivered). Synchronous and Asio-driven execution shapes, and threads, are in
// chaos_execution_test.cpp.
#include <boom.hpp>
#include <kevlar/chaos.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>
#include <kevlar/timeout.hpp>

#include <test_options.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using testing::DriverAction;
using testing::Injection;
using testing::InjectionPoint;
using testing::StrategyDriver;
using Actions = std::vector<DriverAction>;
using Durations = std::vector<Clock::duration>;

ChaosOptions on(double rate = 1.0, std::uint64_t seed = 1) {
  ChaosOptions o;
  o.enabled = true;
  o.injection_rate = rate;
  o.seed = seed;
  return o;
}

ChaosFaultOptions fault_with(ChaosOptions chaos,
                             boost::system::error_code ec = asio::error::connection_reset) {
  ChaosFaultOptions o;
  o.chaos = std::move(chaos);
  o.error = ec;
  return o;
}

/// Whether each of `n` executions through `shield` was injected (a fault ends it at once; an
/// execution that was not injected starts its operation, which succeeds).
std::vector<bool> pattern(const Shield& shield, int n) {
  std::vector<bool> out;
  for (int i = 0; i < n; ++i) {
    StrategyDriver<int> d{shield};
    d.start();
    if (d.attempts() == 1) d.succeed(0, 1);
    out.push_back(d.outcome().has_error());
  }
  return out;
}

/// A synchronous execution through `shield` of a function that counts its calls: exceptions reach
/// the outcome as they are (an asynchronous error-code completion, as the driver's, reports them
/// as errc::callback_exception).
Outcome<int> sync_run(const Shield& shield, int& calls) {
  return shield.execute_outcome([&calls] { return ++calls; });
}

// ---- the decision --------------------------------------------------------------------------------

TEST(ChaosDecisions, DisabledByDefaultAndThenAPassThroughThatDecidesNothing) {
  int told = 0;
  ChaosFaultOptions o;
  o.chaos.on_injected = [&told](const ChaosEvent&) { ++told; };
  o.chaos.predicate = [](Context&) -> bool { throw std::runtime_error("never asked"); };
  StrategyDriver<int> d{chaos::fault(o)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  d.succeed(0, 7);
  EXPECT_EQ(d.outcome().value(), 7);
  EXPECT_EQ(told, 0);
}

TEST(ChaosDecisions, AnInjectedFaultEndsTheExecutionWithoutStartingTheOperation) {
  std::vector<ChaosEvent> seen;
  int told = 0;
  ChaosFaultOptions o = fault_with(on());
  o.chaos.on_injected = [&](const ChaosEvent& e) {
    ++told;
    EXPECT_EQ(e.kind, ChaosKind::fault);
    EXPECT_EQ(e.injection_rate, 1.0);
    EXPECT_EQ(e.sample, 0.0);  // a rate of 1 draws no sample
    EXPECT_EQ(e.operation, "");
    EXPECT_EQ(e.environment, "");
    EXPECT_EQ(e.context.attempt(), 0);
  };
  StrategyDriver<int> d{chaos::fault(o)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(d.outcome().error(), asio::error::connection_reset);
  EXPECT_EQ(told, 1);
}

TEST(ChaosDecisions, TheKillSwitchAndThePredicateAreAskedInOrderAndStopTheDecision) {
  std::vector<std::string> asked;
  bool kill = false;
  bool allow = true;
  ChaosFaultOptions o = fault_with(on());
  o.chaos.enabled_generator = [&](Context&) {
    asked.emplace_back("enabled");
    return !kill;
  };
  o.chaos.predicate = [&](Context&) {
    asked.emplace_back("predicate");
    return allow;
  };
  o.chaos.injection_rate_generator = [&](Context&) {
    asked.emplace_back("rate");
    return 1.0;
  };
  const Shield shield = chaos::fault(o);
  EXPECT_EQ(pattern(shield, 1), std::vector<bool>{true});
  EXPECT_EQ(asked, (std::vector<std::string>{"enabled", "predicate", "rate"}));
  asked.clear();
  allow = false;
  EXPECT_EQ(pattern(shield, 1), std::vector<bool>{false});
  EXPECT_EQ(asked, (std::vector<std::string>{"enabled", "predicate"}));
  asked.clear();
  kill = true;
  EXPECT_EQ(pattern(shield, 1), std::vector<bool>{false});
  EXPECT_EQ(asked, std::vector<std::string>{"enabled"});
}

TEST(ChaosDecisions, ARateOfZeroInjectsNothing) {
  EXPECT_EQ(pattern(chaos::fault(fault_with(on(0.0))), 20), std::vector<bool>(20, false));
}

TEST(ChaosDecisions, TheSameSeedMakesTheSameDecisionsAndAnotherSeedOthers) {
  const auto a = pattern(chaos::fault(fault_with(on(0.5, 42))), 64);
  const auto b = pattern(chaos::fault(fault_with(on(0.5, 42))), 64);
  const auto c = pattern(chaos::fault(fault_with(on(0.5, 43))), 64);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const auto injected = std::count(a.begin(), a.end(), true);
  EXPECT_GT(injected, 16);  // about half of 64
  EXPECT_LT(injected, 48);
}

TEST(ChaosDecisions, TheInjectedShareFollowsTheRate) {
  // One strategy, 4000 decisions at 0.3: the SplitMix64 sequence of seed 7 is fixed, so this
  // count is too; the bound says what it means (within 10 % of the rate).
  const Shield shield = chaos::fault(fault_with(on(0.3, 7)));
  const auto p = pattern(shield, 4000);
  const double share = static_cast<double>(std::count(p.begin(), p.end(), true)) / 4000.0;
  EXPECT_NEAR(share, 0.3, 0.03);
}

// Decisions that stop before the sample, or a rate of 0 or 1, draw no number: the sequence of a
// strategy that made them goes on where a fresh one with the same seed starts.
TEST(ChaosDecisions, NoRandomNumberIsDrawnUnlessTheRateIsStrictlyBetweenZeroAndOne) {
  const auto expected = pattern(chaos::fault(fault_with(on(0.5, 9))), 40);
  int calls = 0;
  ChaosFaultOptions o = fault_with(on(0.5, 9));
  // 10 at rate 1, 10 at rate 0, 10 refused by the predicate, 10 by the kill switch, then 40 at 0.5.
  o.chaos.injection_rate_generator = [&calls](Context&) {
    return calls < 10 ? 1.0 : calls < 20 ? 0.0 : 0.5;
  };
  o.chaos.predicate = [&calls](Context&) { return calls < 20 || calls >= 30; };
  o.chaos.enabled_generator = [&calls](Context&) { return calls < 30 || calls >= 40; };
  const Shield shield = chaos::fault(o);
  std::vector<bool> got;
  for (; calls < 80; ++calls) {
    const auto one = pattern(shield, 1);
    if (calls < 10) {
      EXPECT_TRUE(one[0]) << calls;
    } else if (calls < 40) {
      EXPECT_FALSE(one[0]) << calls;
    } else {
      got.push_back(one[0]);
    }
  }
  EXPECT_EQ(got, expected);
}

TEST(ChaosDecisions, AGeneratedRateOutsideZeroToOneFailsTheExecution) {
  for (const double bad : {-0.1, 1.01, std::numeric_limits<double>::quiet_NaN()}) {
    ChaosFaultOptions o = fault_with(on());
    o.chaos.injection_rate_generator = [bad](Context&) { return bad; };
    int calls = 0;
    const Outcome<int> out = sync_run(chaos::fault(o), calls);
    EXPECT_EQ(calls, 0);
    ASSERT_TRUE(out.has_exception());
    EXPECT_THROW(std::rethrow_exception(out.exception()), std::invalid_argument);
    StrategyDriver<int> d{chaos::fault(o)};  // asynchronously: an error code that says so
    d.start();
    EXPECT_EQ(d.attempts(), 0u);
    EXPECT_EQ(d.outcome().error(), errc::callback_exception);
  }
}

TEST(ChaosDecisions, ACallbackThatThrowsBecomesTheOutcomeAndTheOperationIsNotCalled) {
  using test::Boom;
  auto throws = [](Context&) -> bool { throw Boom(); };
  std::vector<ChaosFaultOptions> cases(4, fault_with(on()));
  cases[0].chaos.enabled_generator = throws;
  cases[1].chaos.predicate = throws;
  cases[2].chaos.injection_rate_generator = [](Context&) -> double { throw Boom(); };
  cases[3].chaos.on_injected = [](const ChaosEvent&) { throw Boom(); };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    int calls = 0;
    const Outcome<int> out = sync_run(chaos::fault(cases[i]), calls);
    EXPECT_EQ(calls, 0) << i;
    ASSERT_TRUE(out.has_exception()) << i;
    EXPECT_THROW(std::rethrow_exception(out.exception()), Boom) << i;
  }
}

// ---- scope ---------------------------------------------------------------------------------------

TEST(ChaosDecisions, OperationAndEnvironmentMatchTheCallersScope) {
  ChaosFaultOptions o = fault_with(on());
  o.chaos.operation = "checkout";
  o.chaos.environment = "staging";
  std::string seen_operation;
  o.chaos.on_injected = [&](const ChaosEvent& e) { seen_operation = std::string(e.operation); };
  const Shield shield = chaos::fault(o);
  EXPECT_EQ(pattern(shield, 1), std::vector<bool>{false});  // no scope at all
  {
    ChaosScope scope{"checkout", "staging"};
    EXPECT_EQ(pattern(shield, 1), std::vector<bool>{true});
    EXPECT_EQ(seen_operation, "checkout");
    {
      ChaosScope inner{"search"};  // inherits the environment
      EXPECT_EQ(inner.values().environment, "staging");
      EXPECT_EQ(pattern(shield, 1), std::vector<bool>{false});
    }
    EXPECT_EQ(ChaosScope::current()->operation, "checkout");  // restored
    EXPECT_EQ(pattern(shield, 1), std::vector<bool>{true});
    {
      ChaosScope prod{std::nullopt, "production"};
      EXPECT_EQ(prod.values().operation, "checkout");
      EXPECT_EQ(pattern(shield, 1), std::vector<bool>{false});
    }
  }
  EXPECT_EQ(ChaosScope::current(), nullptr);
}

TEST(ChaosDecisions, AnExecutionKeepsTheScopeItFirstSawForItsRetries) {
  // The fault sits inside a retry; the scope ends before the retry's second attempt, which still
  // matches (the first decision recorded the scope in the context).
  ChaosFaultOptions o = fault_with(on());
  o.chaos.environment = "staging";
  int told = 0;
  o.chaos.on_injected = [&told](const ChaosEvent& e) {
    ++told;
    EXPECT_EQ(e.environment, "staging");
  };
  StrategyDriver<int> d{
      Shield{}.retry(test::constant_retries(1, 100ms)).wrap(chaos::fault(o))};
  {
    ChaosScope scope{std::nullopt, "staging"};
    d.start();
  }
  EXPECT_EQ(told, 1);
  d.advance(100ms);
  EXPECT_EQ(told, 2);
  EXPECT_EQ(d.attempts(), 0u);
  EXPECT_EQ(d.outcome().error(), asio::error::connection_reset);
}

TEST(ChaosDecisions, ARecordedScopeWinsOverTheThreadsAndTheCaptureRecordsTheThreads) {
  ChaosFaultOptions o = fault_with(on());
  o.chaos.environment = "staging";
  ChaosBehaviorOptions b;
  b.chaos = on();
  b.behavior = [](Context& c) { record_chaos_scope(c, {std::nullopt, "staging"}); };
  {
    ChaosScope scope{std::nullopt, "production"};
    // A behaviour outside records the staging scope: the fault inside matches it.
    EXPECT_EQ(pattern(chaos::behavior(b).wrap(chaos::fault(o)), 1), std::vector<bool>{true});
  }
  // The capture outermost records the scope of the thread that starts the execution.
  const Shield captured = chaos::capture_scope().wrap(chaos::fault(o));
  EXPECT_EQ(captured.describe().find("ChaosScopeCapture"), 0u);
  ChaosScope scope{std::nullopt, "staging"};
  EXPECT_EQ(pattern(captured, 1), std::vector<bool>{true});
}

TEST(ChaosDecisions, AScopeWithoutTheWantedOperationDoesNotMatch) {
  ChaosFaultOptions o = fault_with(on());
  o.chaos.operation = "checkout";
  const Shield shield = chaos::fault(o);
  ChaosScope unnamed{std::nullopt, "staging"};
  EXPECT_EQ(pattern(shield, 1), std::vector<bool>{false});
  ChaosScope named{"checkout"};
  EXPECT_EQ(pattern(shield, 1), std::vector<bool>{true});
}

TEST(ChaosDecisions, TheCaptureRecordsNothingWithoutAScopeAndKeepsAScopeAlreadyRecorded) {
  bool recorded = true;
  ChaosBehaviorOptions look;
  look.chaos = on();
  look.behavior = [&recorded](Context& c) {
    recorded = c.properties().contains(chaos_scope_key());
  };
  StrategyDriver<int> bare{chaos::capture_scope().wrap(chaos::behavior(look))};
  bare.start();
  EXPECT_FALSE(recorded) << "no thread scope: nothing to record";
  EXPECT_EQ(bare.attempts(), 1u);
  // A behaviour outside records the staging scope over the thread's; the capture inside keeps it.
  ChaosFaultOptions f = fault_with(on());
  f.chaos.environment = "staging";
  ChaosBehaviorOptions b;
  b.chaos = on();
  b.behavior = [](Context& c) { record_chaos_scope(c, {std::nullopt, "staging"}); };
  ChaosScope scope{std::nullopt, "production"};
  EXPECT_EQ(pattern(chaos::behavior(b).wrap(chaos::capture_scope()).wrap(chaos::fault(f)), 1),
            std::vector<bool>{true});
}

// ---- latency -------------------------------------------------------------------------------------

ChaosLatencyOptions latency_of(Clock::duration d, ChaosOptions chaos = on()) {
  ChaosLatencyOptions o;
  o.chaos = std::move(chaos);
  o.delay = d;
  return o;
}

TEST(ChaosDecisions, LatencyWaitsOnTheClockThenStartsTheOperation) {
  StrategyDriver<int> d{chaos::latency(latency_of(250ms))};
  d.start();
  EXPECT_TRUE(d.take_actions().empty());
  EXPECT_EQ(d.timers(), Durations{250ms});
  d.advance(249ms);
  EXPECT_TRUE(d.take_actions().empty());
  d.advance(1ms);
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  d.succeed(0, 5);
  EXPECT_EQ(d.outcome().value(), 5);
}

TEST(ChaosDecisions, TheCallersCancellationEndsTheLatencyAtOnce) {
  StrategyDriver<int> d{chaos::latency(latency_of(10s))};
  d.start();
  d.cancel();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(d.outcome().error(), asio::error::operation_aborted);
  EXPECT_EQ(d.attempts(), 0u);
  d.advance(10s);
  EXPECT_EQ(d.attempts(), 0u);
}

TEST(ChaosDecisions, ATimeoutOutsideEndsTheLatencyAsATimeout) {
  StrategyDriver<int> d{Shield{}.timeout(1s).wrap(chaos::latency(latency_of(5s)))};
  d.start();
  d.advance(1s);
  EXPECT_EQ(d.outcome().error(), errc::timeout);
  EXPECT_EQ(d.attempts(), 0u);
}

TEST(ChaosDecisions, ADisabledLatencyStartsTheOperationAtOnceWithoutAskingForADelay) {
  int generated = 0;
  ChaosLatencyOptions o = latency_of(10s);
  o.chaos.enabled = false;
  o.delay_generator = [&generated](Context&) {
    ++generated;
    return Clock::duration(10s);
  };
  StrategyDriver<int> d{chaos::latency(o)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_TRUE(d.timers().empty());
  EXPECT_EQ(generated, 0);
}

TEST(ChaosDecisions, ALatencyNotChosenStartsTheOperationAtOnceAndTellsNoOne) {
  int generated = 0;
  int told = 0;
  ChaosLatencyOptions o = latency_of(10s, on(0.0));
  o.chaos.on_injected = [&told](const ChaosEvent&) { ++told; };
  o.delay_generator = [&generated](Context&) {
    ++generated;
    return Clock::duration(10s);
  };
  StrategyDriver<int> d{chaos::latency(o)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_TRUE(d.timers().empty());
  EXPECT_EQ(generated, 0);
  EXPECT_EQ(told, 0);
}

TEST(ChaosDecisions, ALatencyEndingAtTheDeadlineOfATimeoutOutsideEndsAsATimeout) {
  StrategyDriver<int> d{Shield{}.timeout(1s).wrap(chaos::latency(latency_of(1s)))};
  d.start();
  d.advance(1s);
  EXPECT_EQ(d.outcome().error(), errc::timeout);
  EXPECT_EQ(d.attempts(), 0u);
}

TEST(ChaosDecisions, TheDelayGeneratorChoosesEachWaitAndIsValidated) {
  ChaosLatencyOptions o = latency_of(1s);
  int n = 0;
  o.delay_generator = [&n](Context&) { return ++n == 1 ? 30ms : -1ms; };
  const Shield shield = chaos::latency(o);
  StrategyDriver<int> first{shield};
  first.start();
  EXPECT_EQ(first.timers(), Durations{30ms});
  int calls = 0;
  const Outcome<int> second = sync_run(shield, calls);
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(second.has_exception());
  EXPECT_THROW(std::rethrow_exception(second.exception()), std::invalid_argument);
}

TEST(ChaosDecisions, AZeroLatencyTellsTheHookAndStartsAtOnce) {
  int told = 0;
  ChaosLatencyOptions o = latency_of(0s);
  o.chaos.on_injected = [&told](const ChaosEvent& e) {
    ++told;
    EXPECT_EQ(e.kind, ChaosKind::latency);
  };
  StrategyDriver<int> d{chaos::latency(o)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_EQ(told, 1);
}

TEST(ChaosDecisions, EveryStepOfALatencyRunSurvivesAnInjectedFailureOrCancellation) {
  const std::size_t runs = testing::inject_at_every_step<int>(
      [] { return chaos::latency(latency_of(100ms)); },
      [](StrategyDriver<int>& d) {
        d.start();
        d.advance(100ms);
        d.succeed(0, 3);
      },
      [](StrategyDriver<int>& d, const InjectionPoint& p) {
        if (p.kind == Injection::none) {
          EXPECT_EQ(d.outcome().value(), 3);
        } else {
          EXPECT_TRUE(d.outcome().has_error()) << p.step;
        }
      });
  EXPECT_GT(runs, 4u);
}

// ---- fault ---------------------------------------------------------------------------------------

TEST(ChaosDecisions, TheDefaultFaultIsOneChaosInjectedErrorObject) {
  ChaosFaultOptions o;
  o.chaos = on();
  const Shield shield = chaos::fault(o);
  int calls = 0;
  const Outcome<int> a = sync_run(shield, calls);
  const Outcome<int> b = sync_run(shield, calls);
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(a.has_exception());
  EXPECT_EQ(a.exception(), b.exception());
  EXPECT_THROW(std::rethrow_exception(a.exception()), ChaosInjectedError);
}

TEST(ChaosDecisions, TheFaultGeneratorMakesEachFaultAndMustSetExactlyOne) {
  ChaosFaultOptions o;
  o.chaos = on();
  int n = 0;
  o.fault_generator = [&n](Context&) {
    switch (++n) {
      case 1:
        return ChaosFault{asio::error::host_unreachable, nullptr};
      case 2:
        return ChaosFault{{}, std::make_exception_ptr(std::out_of_range("x"))};
      default:
        return ChaosFault{};
    }
  };
  const Shield shield = chaos::fault(o);
  StrategyDriver<int> a{shield};
  a.start();
  EXPECT_EQ(a.outcome().error(), asio::error::host_unreachable);
  int calls = 0;
  const Outcome<int> b = sync_run(shield, calls);
  ASSERT_TRUE(b.has_exception());
  EXPECT_THROW(std::rethrow_exception(b.exception()), std::out_of_range);
  const Outcome<int> c = sync_run(shield, calls);
  ASSERT_TRUE(c.has_exception());
  EXPECT_THROW(std::rethrow_exception(c.exception()), std::logic_error);
  EXPECT_EQ(calls, 0);
}

TEST(ChaosDecisions, ARetryOutsideHandlesInjectedFaults) {
  // A fault on the first decision only (the predicate counts them): the retry's second pass
  // reaches the operation.
  ChaosFaultOptions o = fault_with(on());
  int decisions = 0;
  o.chaos.predicate = [&decisions](Context&) { return ++decisions == 1; };
  StrategyDriver<int> d{Shield{}.retry(test::constant_retries(2, 10ms)).wrap(chaos::fault(o))};
  d.start();
  EXPECT_EQ(d.attempts(), 0u);
  ASSERT_EQ(d.events_of<RetryScheduled>().size(), 1u);
  EXPECT_EQ(d.events_of<RetryScheduled>()[0].failure.error, asio::error::connection_reset);
  d.advance(10ms);
  EXPECT_EQ(decisions, 2);
  ASSERT_EQ(d.attempts(), 1u);
  d.succeed(0, 8);
  EXPECT_EQ(d.outcome().value(), 8);
}

// ---- outcome -------------------------------------------------------------------------------------

TEST(ChaosDecisions, AnInjectedOutcomeCompletesWithTheResultWithoutTheOperation) {
  ChaosOutcomeOptions<int> o;
  o.chaos = on();
  o.result = 42;
  StrategyDriver<int> d{chaos::outcome(o)};
  d.start();
  EXPECT_EQ(d.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(d.outcome().value(), 42);
}

TEST(ChaosDecisions, TheResultGeneratorMakesEachResult) {
  ChaosOutcomeOptions<int> o;
  o.chaos = on();
  o.result_generator = [](Context& c) { return 100 + c.attempt(); };
  StrategyDriver<int> d{chaos::outcome(o)};
  d.start();
  EXPECT_EQ(d.outcome().value(), 100);
}

TEST(ChaosDecisions, AnOutcomeOfAnotherTypeFailsAsInvalidResultType) {
  ChaosOutcomeOptions<std::string> o;
  o.chaos = on();
  o.result = "nope";
  StrategyDriver<int> d{chaos::outcome(o)};
  d.start();
  EXPECT_EQ(d.outcome().error(), errc::invalid_result_type);
  EXPECT_EQ(d.attempts(), 0u);
}

// ---- behavior ------------------------------------------------------------------------------------

TEST(ChaosDecisions, ABehaviourRunsBeforeTheOperationAndItsFailureReplacesIt) {
  std::vector<std::string> order;
  ChaosBehaviorOptions o;
  o.chaos = on();
  bool fail = false;
  o.behavior = [&](Context&) {
    order.emplace_back("behavior");
    if (fail) throw std::domain_error("injected");
  };
  const Shield shield = chaos::behavior(o);
  StrategyDriver<int> d{shield};
  d.start();
  order.emplace_back(d.attempts() == 1 ? "operation" : "none");
  d.succeed(0, 1);
  EXPECT_EQ(order, (std::vector<std::string>{"behavior", "operation"}));
  fail = true;
  int calls = 0;
  const Outcome<int> e = sync_run(shield, calls);
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(e.has_exception());
  EXPECT_THROW(std::rethrow_exception(e.exception()), std::domain_error);
}

TEST(ChaosDecisions, WithoutABehaviourTheStrategyDecidesNothing) {
  int told = 0;
  ChaosBehaviorOptions o;
  o.chaos = on();
  o.chaos.on_injected = [&told](const ChaosEvent&) { ++told; };
  StrategyDriver<int> d{chaos::behavior(o)};
  d.start();
  EXPECT_EQ(d.attempts(), 1u);
  EXPECT_EQ(told, 0);
}

TEST(ChaosDecisions, ABehaviourRunsOnlyWhenEnabledAndChosen) {
  int ran = 0;
  ChaosBehaviorOptions plain;
  plain.chaos = on();
  plain.chaos.enabled = false;
  plain.behavior = [&ran](Context&) { ++ran; };
  StrategyDriver<int> disabled{chaos::behavior(plain)};
  disabled.start();
  EXPECT_EQ(disabled.attempts(), 1u);
  EXPECT_EQ(ran, 0);
  ChaosBehaviorOptions awaited;
  awaited.chaos = on(0.0);
  awaited.behavior = [&ran](Context&) -> asio::awaitable<void> {
    ++ran;
    co_return;
  };
  StrategyDriver<int> unchosen{chaos::behavior(awaited)};
  unchosen.start();
  EXPECT_EQ(unchosen.attempts(), 1u);
  EXPECT_EQ(ran, 0);
  plain.chaos.enabled = true;
  StrategyDriver<int> chosen{chaos::behavior(plain)};
  chosen.start();
  EXPECT_EQ(chosen.attempts(), 1u);
  EXPECT_EQ(ran, 1);
}

// ---- options and descriptions ---------------------------------------------------------------------

TEST(ChaosOptionsTest, InvalidOptionsAreRefusedNamingTheOption) {
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  for (const double bad : {-0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_NE(message([&] { (void)chaos::fault(fault_with(on(bad))); }).find("injection_rate"),
              std::string::npos);
  }
  EXPECT_NE(message([] { (void)chaos::latency(latency_of(-1ns)); }).find("delay"), std::string::npos);
  EXPECT_NE(message([] {
              (void)chaos::latency(latency_of(ChaosLatencyOptions::max_delay + 1ms));
            }).find("delay"),
            std::string::npos);
  EXPECT_NO_THROW((void)chaos::latency(latency_of(ChaosLatencyOptions::max_delay)));
  ChaosFaultOptions both = fault_with(on());
  both.exception = std::make_exception_ptr(std::runtime_error("x"));
  EXPECT_NE(message([&] { (void)chaos::fault(both); }).find("at most one"), std::string::npos);
  ChaosOutcomeOptions<int> none;
  EXPECT_NE(message([&] { (void)chaos::outcome(none); }).find("exactly one"), std::string::npos);
  ChaosOutcomeOptions<int> two;
  two.result = 1;
  two.result_generator = [](Context&) { return 2; };
  EXPECT_NE(message([&] { (void)chaos::outcome(two); }).find("exactly one"), std::string::npos);
}

TEST(ChaosOptionsTest, DescriptionsNameTheKindAndItsOptions) {
  ChaosLatencyOptions l = latency_of(250ms, on(0.1, 7));
  l.chaos.environment = "staging";
  EXPECT_EQ(chaos::latency(l).describe(), "ChaosLatency(250ms, rate 0.1, environment staging, seed 7)");
  ChaosFaultOptions f;
  EXPECT_EQ(chaos::fault(f).describe(), "ChaosFault(rate 1, disabled)");
  ChaosOutcomeOptions<int> o;
  o.chaos = on(0.5, 3);
  o.chaos.operation = "get";
  o.result = 1;
  EXPECT_EQ(chaos::outcome(o).describe(), "ChaosOutcome(rate 0.5, operation get, seed 3)");
  ChaosBehaviorOptions b;
  b.chaos.injection_rate_generator = [](Context&) { return 0.5; };
  EXPECT_EQ(chaos::behavior(b).describe(), "ChaosBehavior(rate dynamic, disabled)");
  EXPECT_EQ(to_string(ChaosKind::latency), std::string("latency"));
  EXPECT_EQ(to_string(ChaosKind::behavior), std::string("behavior"));
  EXPECT_EQ(to_string(ChaosKind::fault), std::string("fault"));
  EXPECT_EQ(to_string(ChaosKind::outcome), std::string("outcome"));
}

TEST(ChaosOptionsTest, ALatencyWithAGeneratorIsDescribedAsDynamic) {
  ChaosLatencyOptions l = latency_of(250ms, on(1.0, 1));
  l.delay_generator = [](Context&) { return Clock::duration(1s); };
  EXPECT_EQ(chaos::latency(l).describe(), "ChaosLatency(dynamic, rate 1, seed 1)");
}

}  // namespace
}  // namespace kevlar
