// Descriptors: describe_shield's typed view of every built-in strategy and of custom ones, their
// printed form, and the shape assertions with their expected-against-actual messages.
#include "support/field_equality.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/descriptors.hpp>

#include <gtest/gtest.h>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

namespace {

using namespace std::chrono_literals;
using kevlar::Shield;
using namespace kevlar::testing;

/// A user-defined strategy: passes the call through.
class Passthrough final : public kevlar::Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "Passthrough(audit)"; }
  kevlar::Step on_start(kevlar::Layer&) override { return kevlar::Step::run_inner; }
};

/// Runs `f`, which must throw ShieldAssertionError, and returns its message.
template <class F>
std::string failure_of(F f) {
  try {
    f();
  } catch (const ShieldAssertionError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ShieldAssertionError";
  return {};
}

TEST(Descriptors, RetryReportsItsOptionsAndBackoffWithoutCallingHooks) {
  int hook_calls = 0;
  kevlar::RetryOptions o;
  o.max_retries = 4;
  o.backoff = kevlar::Backoff::exponential(100ms, 3.0, 5s, false);
  o.max_delay = 2s;
  o.on_retry = [&](const kevlar::RetryEvent&) { ++hook_calls; };
  const ShieldDescriptor d = describe_shield(Shield{}.retry(o));
  ASSERT_EQ(d.strategies.size(), 1u);
  const auto& r = std::get<RetryDescriptor>(d.strategies[0]);
  EXPECT_EQ(r, (RetryDescriptor{0, 4,
                                BackoffDescriptor{BackoffKind::exponential, 100ms, 3.0, 5s,
                                                  kevlar::Jitter::none},
                                2s, false, true}));
  EXPECT_EQ(RetryDescriptor::kind, StrategyKind::retry);
  EXPECT_EQ(hook_calls, 0);

  const RetryDescriptor defaults =
      std::get<RetryDescriptor>(describe_shield(Shield{}.retry()).strategies.at(0));
  EXPECT_EQ(defaults.max_retries, 3);
  EXPECT_EQ(defaults.backoff, (BackoffDescriptor{BackoffKind::exponential, 250ms, 2.0, 30s,
                                                 kevlar::Jitter::proportional}))
      << "Kevlar's default backoff";

  kevlar::RetryOptions n;
  n.backoff = kevlar::Backoff::none();
  n.delay_generator = [](const kevlar::RetryEvent&) {
    return std::optional<kevlar::Clock::duration>{};
  };
  const auto none = std::get<RetryDescriptor>(describe_shield(Shield{}.retry(n)).strategies.at(0));
  EXPECT_EQ(none.backoff.kind, BackoffKind::none);
  EXPECT_TRUE(none.has_delay_generator);
  n.backoff = kevlar::Backoff::linear(50ms);
  EXPECT_EQ(
      std::get<RetryDescriptor>(describe_shield(Shield{}.retry(n)).strategies.at(0)).backoff,
      (BackoffDescriptor{BackoffKind::linear, 50ms, 1.0, std::nullopt, kevlar::Jitter::none}));
  n.backoff = kevlar::Backoff::custom([](int a) { return a * 1ms; });
  EXPECT_EQ(
      std::get<RetryDescriptor>(describe_shield(Shield{}.retry(n)).strategies.at(0)).backoff.kind,
      BackoffKind::custom);
}

TEST(Descriptors, EveryBuiltInStrategyIsDescribedWithItsPositionAndOptions) {
  kevlar::TimeoutOptions t;
  t.timeout = 2s;
  t.on_timeout = [](const kevlar::TimeoutEvent&) {};
  kevlar::CircuitBreakerOptions ratio;
  ratio.failure_ratio = 0.5;
  ratio.minimum_throughput = 20;
  ratio.sampling_window = 10s;
  ratio.break_duration = 5s;
  kevlar::RateLimitOptions rl;
  rl.permits = 10;
  rl.window = 1s;
  rl.queue_limit = 3;
  kevlar::HedgeOptions h;
  h.max_attempts = 3;
  h.delay = 200ms;
  h.on_hedge = [](const kevlar::HedgeEvent&) {};
  const Shield shield = Shield{}
                            .fallback(-1)
                            .rate_limit(rl)
                            .timeout(t)
                            .circuit_breaker(ratio)
                            .circuit_breaker(3, 30s)
                            .concurrency_limit(4, 2)
                            .hedge(h)
                            .use(std::make_shared<Passthrough>())
                            .with_name("api");
  const ShieldDescriptor d = describe_shield(shield);
  EXPECT_EQ(d.name, std::optional<std::string>("api"));
  EXPECT_FALSE(d.custom_clock);
  EXPECT_EQ(d.kinds(),
            (std::vector<StrategyKind>{
                StrategyKind::fallback, StrategyKind::rate_limit, StrategyKind::timeout,
                StrategyKind::circuit_breaker, StrategyKind::circuit_breaker,
                StrategyKind::concurrency_limit, StrategyKind::hedging, StrategyKind::custom}));
  for (std::size_t i = 0; i < d.strategies.size(); ++i) EXPECT_EQ(index_of(d.strategies[i]), i);

  const auto fallback = std::get<FallbackDescriptor>(d.strategies[0]);
  EXPECT_EQ(fallback.result_type, "int");
  EXPECT_EQ(fallback.has_recovery, std::nullopt) << "unknown without the value type";
  EXPECT_EQ(std::get<RateLimitDescriptor>(d.strategies[1]),
            (RateLimitDescriptor{1, 10, 1s, 10, 3, false, false}));
  EXPECT_EQ(std::get<TimeoutDescriptor>(d.strategies[2]), (TimeoutDescriptor{2, 2s, false, true}));
  const auto r = std::get<CircuitBreakerDescriptor>(d.strategies[3]);
  EXPECT_EQ(r.mode, BreakerMode::ratio);
  EXPECT_EQ(r.failure_ratio, 0.5);
  EXPECT_EQ(r.minimum_throughput, 20);
  EXPECT_EQ(r.sampling_window, std::optional<kevlar::Clock::duration>(10s));
  EXPECT_EQ(r.consecutive_failures, std::nullopt);
  EXPECT_EQ(r.break_duration, 5s);
  const auto c = std::get<CircuitBreakerDescriptor>(d.strategies[4]);
  EXPECT_EQ(c.mode, BreakerMode::consecutive);
  EXPECT_EQ(c.consecutive_failures, 3);
  EXPECT_EQ(c.minimum_throughput, std::nullopt);
  EXPECT_EQ(c.break_duration, 30s);
  EXPECT_EQ(std::get<ConcurrencyLimitDescriptor>(d.strategies[5]),
            (ConcurrencyLimitDescriptor{5, 4, 2, false}));
  EXPECT_EQ(std::get<HedgingDescriptor>(d.strategies[6]),
            (HedgingDescriptor{6, 3, 200ms, true, false}));
  EXPECT_EQ(std::get<CustomDescriptor>(d.strategies[7]),
            (CustomDescriptor{7, "Passthrough(audit)"}));

  // Told the fallback's value type, it reports its hooks too.
  const auto typed = describe_shield<std::string, int>(shield).all_of<FallbackDescriptor>();
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_EQ(typed[0].has_recovery, false);
  EXPECT_EQ(typed[0].has_on_fallback, false);

  EXPECT_TRUE(describe_shield(shield.with_clock(kevlar::ManualClock::create())).custom_clock);
}

TEST(Descriptors, ABreakerWithoutThresholdsIsConsecutiveWithFive) {
  const auto b = kevlar::CircuitBreaker::create();
  const auto d =
      std::get<CircuitBreakerDescriptor>(describe_shield(Shield{}.use(b)).strategies.at(0));
  EXPECT_EQ(d.mode, BreakerMode::consecutive);
  EXPECT_EQ(d.consecutive_failures, 5);
}

TEST(Descriptors, PrintOnOneReadableLine) {
  kevlar::RetryOptions o;
  o.backoff = kevlar::Backoff::constant(1s);
  const Shield shield = Shield{}.timeout(30s).retry(o).circuit_breaker(5, 30s).with_name("api");
  EXPECT_EQ(to_string(describe_shield(shield)),
            "api: [#0 Timeout{30s}, #1 Retry{max_retries=3, backoff=constant 1s}, "
            "#2 CircuitBreaker{consecutive 5, break 30s}]");
  std::ostringstream s;
  s << describe_shield(Shield{});
  EXPECT_EQ(s.str(), "(unnamed): []");
  EXPECT_EQ(to_string(describe_shield(Shield{}.retry()).strategies.at(0)),
            "#0 Retry{max_retries=3, backoff=exponential 250ms x2 +jitter <=30s}");
  EXPECT_EQ(to_string(describe_shield(Shield{}.retry(kevlar::retry_forever)).strategies.at(0))
                .rfind("#0 Retry{max_retries=forever", 0),
            0u);
}

TEST(Descriptors, AssertionsPassOnTheRightShape) {
  const Shield shield = Shield{}.timeout(30s).retry(3).circuit_breaker(5, 30s).timeout(5s);
  EXPECT_NO_THROW(expect_strategy_count(shield, 4));
  EXPECT_NO_THROW(
      expect_strategy_order(shield, {StrategyKind::timeout, StrategyKind::retry,
                                     StrategyKind::circuit_breaker, StrategyKind::timeout}));
  EXPECT_EQ(expect_contains<TimeoutDescriptor>(shield).timeout, 30s) << "the outermost one";
  EXPECT_EQ(expect_contains_single<RetryDescriptor>(shield).max_retries, 3);
  EXPECT_EQ(expect_contains_single<CircuitBreakerDescriptor>(shield).index, 2u);
}

TEST(Descriptors, AFailedAssertionPrintsExpectedAgainstActual) {
  const Shield shield = Shield{}.retry(2).timeout(1s).with_name("db");
  const std::string order = failure_of([&] {
    expect_strategy_order(shield, {StrategyKind::timeout, StrategyKind::retry});
  });
  EXPECT_NE(order.find("expected [Timeout, Retry], actual [Retry, Timeout]"), std::string::npos)
      << order;
  EXPECT_NE(order.find("db: [#0 Retry{max_retries=2"), std::string::npos) << order;

  const std::string count = failure_of([&] { expect_strategy_count(shield, 3); });
  EXPECT_NE(count.find("expected 3 strategies, actual 2"), std::string::npos) << count;

  const std::string missing =
      failure_of([&] { (void)expect_contains<CircuitBreakerDescriptor>(shield); });
  EXPECT_NE(missing.find("expected at least one CircuitBreaker, actual 0"), std::string::npos)
      << missing;
  EXPECT_NE(missing.find("#1 Timeout{1s}"), std::string::npos) << missing;

  const std::string twice = failure_of(
      [] { (void)expect_contains_single<TimeoutDescriptor>(Shield{}.timeout(2s).timeout(1s)); });
  EXPECT_NE(twice.find("expected exactly one Timeout, actual 2"), std::string::npos) << twice;
}

TEST(Descriptors, JitterKindsAndSlowCallsAreDescribed) {
  kevlar::RetryOptions retry;
  retry.backoff = kevlar::Backoff::linear(1s, 5s, kevlar::Jitter::decorrelated);
  kevlar::CircuitBreakerOptions slow;
  slow.consecutive_failures = 4;
  slow.slow_call_threshold = 2s;
  slow.slow_call_ratio = 0.5;
  slow.minimum_throughput = 8;
  const ShieldDescriptor d = describe_shield(Shield{}.retry(retry).circuit_breaker(slow));
  const auto r = std::get<RetryDescriptor>(d.strategies[0]);
  EXPECT_EQ(r.backoff.jitter, kevlar::Jitter::decorrelated);
  const auto b = std::get<CircuitBreakerDescriptor>(d.strategies[1]);
  EXPECT_EQ(b.mode, BreakerMode::consecutive);
  EXPECT_EQ(b.slow_call_threshold, std::optional<kevlar::Clock::duration>(2s));
  EXPECT_EQ(b.slow_call_ratio, 0.5);
  EXPECT_EQ(b.minimum_throughput, 8);  // the window is kept for slow calls
  EXPECT_EQ(b.sampling_window, std::optional<kevlar::Clock::duration>(30s));
  std::ostringstream printed;
  printed << d.strategies[0] << " | " << d.strategies[1];
  EXPECT_EQ(printed.str(),
            "#0 Retry{max_retries=3, backoff=linear 1s steps +decorrelated jitter <=5s} | "
            "#1 CircuitBreaker{consecutive 4 over 30s, min 8, break 15s, slow >=2s at 0.5}");
}

TEST(Descriptors, EveryKindAndDescriptorPrintsExactly) {
  std::ostringstream kinds;
  for (const StrategyKind k :
       {StrategyKind::custom, StrategyKind::retry, StrategyKind::timeout,
        StrategyKind::circuit_breaker, StrategyKind::rate_limit, StrategyKind::concurrency_limit,
        StrategyKind::hedging, StrategyKind::fallback}) {
    kinds << k << ' ';
  }
  for (const BackoffKind k : {BackoffKind::none, BackoffKind::constant, BackoffKind::linear,
                              BackoffKind::exponential, BackoffKind::custom}) {
    kinds << k << ' ';
  }
  kinds << BreakerMode::consecutive << ' ' << BreakerMode::ratio;
  EXPECT_EQ(kinds.str(),
            "Custom Retry Timeout CircuitBreaker RateLimit ConcurrencyLimit Hedging Fallback "
            "none constant linear exponential custom consecutive ratio");

  kevlar::RateLimitOptions rl;
  rl.permits = 10;
  rl.window = 1s;
  rl.queue_limit = 2;
  rl.on_rejected = [](const kevlar::RateLimitRejectedEvent&) {};
  kevlar::ConcurrencyLimitOptions cl;
  cl.max_concurrency = 4;
  cl.on_rejected = [](const kevlar::ConcurrencyLimitRejectedEvent&) {};
  kevlar::HedgeOptions h;
  h.max_attempts = 3;
  h.delay = 50ms;
  h.on_hedge = [](const kevlar::HedgeEvent&) {};
  h.action_generator = [](const kevlar::HedgeActionArguments&) {};
  kevlar::FallbackOptions<int> f;
  f.recovery = [](const kevlar::Outcome<int>&, kevlar::Context&) { return 0; };
  f.on_fallback = [](const kevlar::FallbackEvent<int>&) {};
  const Shield shield = Shield{}.fallback(f).rate_limit(rl).concurrency_limit(cl).hedge(h).use(
      std::make_shared<Passthrough>());
  const ShieldDescriptor d = describe_shield<int>(shield);
  std::vector<std::string> printed;
  for (const StrategyDescriptor& s : d.strategies) {
    std::ostringstream os;
    os << s;
    printed.push_back(os.str());
  }
  EXPECT_EQ(printed, (std::vector<std::string>{
                         "#0 Fallback{int, recovery, +on_fallback}",
                         "#1 RateLimit{10/1s, burst 10, queue 2, +on_rejected}",
                         "#2 ConcurrencyLimit{4, queue 0, +on_rejected}",
                         "#3 Hedging{3 attempts, delay 50ms, +on_hedge, +action_generator}",
                         "#4 Custom{Passthrough(audit)}"}));
  std::ostringstream backoffs;
  backoffs << describe_shield(Shield{}.retry(kevlar::RetryOptions{}))
                  .all_of<RetryDescriptor>()[0]
                  .backoff;
  EXPECT_EQ(backoffs.str(), "exponential 250ms x2 +jitter <=30s");
}

TEST(Descriptors, EveryFieldTakesPartInEquality) {
  const RetryDescriptor retry = std::get<RetryDescriptor>(
      describe_shield(Shield{}.retry(kevlar::RetryOptions{})).strategies.at(0));
  kevlar::test::expect_every_field_compared<RetryDescriptor>(
      retry,
      {[](RetryDescriptor& d) { d.index = 1; }, [](RetryDescriptor& d) { d.max_retries = 4; },
       [](RetryDescriptor& d) { d.backoff.kind = BackoffKind::linear; },
       [](RetryDescriptor& d) { d.backoff.base = 1s; },
       [](RetryDescriptor& d) { d.backoff.factor = 3.0; },
       [](RetryDescriptor& d) { d.backoff.max_delay = 1s; },
       [](RetryDescriptor& d) { d.backoff.jitter = kevlar::Jitter::full; },
       [](RetryDescriptor& d) { d.max_delay = 1s; },
       [](RetryDescriptor& d) { d.has_delay_generator = true; },
       [](RetryDescriptor& d) { d.has_on_retry = true; }});
  kevlar::test::expect_every_field_compared<TimeoutDescriptor>(
      TimeoutDescriptor{0, 1s, false, false},
      {[](TimeoutDescriptor& d) { d.index = 1; }, [](TimeoutDescriptor& d) { d.timeout = 2s; },
       [](TimeoutDescriptor& d) { d.has_timeout_generator = true; },
       [](TimeoutDescriptor& d) { d.has_on_timeout = true; }});
  kevlar::test::expect_every_field_compared<CircuitBreakerDescriptor>(
      CircuitBreakerDescriptor{},
      {[](CircuitBreakerDescriptor& d) { d.index = 1; },
       [](CircuitBreakerDescriptor& d) { d.mode = BreakerMode::ratio; },
       [](CircuitBreakerDescriptor& d) { d.consecutive_failures = 5; },
       [](CircuitBreakerDescriptor& d) { d.failure_ratio = 0.5; },
       [](CircuitBreakerDescriptor& d) { d.minimum_throughput = 10; },
       [](CircuitBreakerDescriptor& d) { d.sampling_window = 30s; },
       [](CircuitBreakerDescriptor& d) { d.slow_call_threshold = 1s; },
       [](CircuitBreakerDescriptor& d) { d.slow_call_ratio = 0.5; },
       [](CircuitBreakerDescriptor& d) { d.break_duration = 5s; },
       [](CircuitBreakerDescriptor& d) { d.half_open_probes = 2; },
       [](CircuitBreakerDescriptor& d) { d.success_threshold = 2; },
       [](CircuitBreakerDescriptor& d) { d.has_break_duration_generator = true; },
       [](CircuitBreakerDescriptor& d) { d.has_on_state_changed = true; }});
  kevlar::test::expect_every_field_compared<RateLimitDescriptor>(
      RateLimitDescriptor{0, 10, 1s, 10, 0, false, false},
      {[](RateLimitDescriptor& d) { d.index = 1; }, [](RateLimitDescriptor& d) { d.permits = 5; },
       [](RateLimitDescriptor& d) { d.window = 2s; }, [](RateLimitDescriptor& d) { d.burst = 5; },
       [](RateLimitDescriptor& d) { d.queue_limit = 1; },
       [](RateLimitDescriptor& d) { d.has_on_rejected = true; },
       [](RateLimitDescriptor& d) { d.has_hold_from_outcome = true; }});
  kevlar::test::expect_every_field_compared<ConcurrencyLimitDescriptor>(
      ConcurrencyLimitDescriptor{0, 4, 0, false},
      {[](ConcurrencyLimitDescriptor& d) { d.index = 1; },
       [](ConcurrencyLimitDescriptor& d) { d.max_concurrency = 5; },
       [](ConcurrencyLimitDescriptor& d) { d.max_queue = 1; },
       [](ConcurrencyLimitDescriptor& d) { d.has_on_rejected = true; }});
  kevlar::test::expect_every_field_compared<HedgingDescriptor>(
      HedgingDescriptor{0, 2, 1s, false, false},
      {[](HedgingDescriptor& d) { d.index = 1; }, [](HedgingDescriptor& d) { d.max_attempts = 3; },
       [](HedgingDescriptor& d) { d.delay = 2s; },
       [](HedgingDescriptor& d) { d.has_on_hedge = true; },
       [](HedgingDescriptor& d) { d.has_action_generator = true; }});
  kevlar::test::expect_every_field_compared<FallbackDescriptor>(
      FallbackDescriptor{0, "int", true, false},
      {[](FallbackDescriptor& d) { d.index = 1; },
       [](FallbackDescriptor& d) { d.result_type = "long"; },
       [](FallbackDescriptor& d) { d.has_recovery = std::nullopt; },
       [](FallbackDescriptor& d) { d.has_on_fallback = true; }});
  kevlar::test::expect_every_field_compared<CustomDescriptor>(
      CustomDescriptor{0, "Passthrough(audit)"},
      {[](CustomDescriptor& d) { d.index = 1; },
       [](CustomDescriptor& d) { d.description = "Other"; }});
}

TEST(Descriptors, EveryOptionalPartIsPrinted) {
  kevlar::RetryOptions retry;
  retry.backoff = kevlar::Backoff::none();
  retry.max_delay = 10s;
  retry.delay_generator = [](const kevlar::RetryEvent&) -> std::optional<kevlar::Clock::duration> {
    return std::nullopt;
  };
  retry.on_retry = [](const kevlar::RetryEvent&) {};
  kevlar::TimeoutOptions timeout;
  timeout.timeout = 2s;
  timeout.timeout_generator = [](kevlar::Context&) { return kevlar::Clock::duration(1s); };
  timeout.on_timeout = [](const kevlar::TimeoutEvent&) {};
  kevlar::CircuitBreakerOptions ratio;
  ratio.failure_ratio = 0.25;
  ratio.minimum_throughput = 4;
  ratio.sampling_window = 10s;
  ratio.break_duration = 5s;
  ratio.half_open_probes = 2;
  ratio.success_threshold = 3;
  ratio.break_duration_generator = [](const kevlar::BreakEvent&) {
    return kevlar::Clock::duration(1s);
  };
  ratio.on_state_changed = [](const kevlar::CircuitStateChange&) {};
  kevlar::RateLimitOptions rl;
  rl.permits = 2;
  rl.window = 1s;
  rl.hold_from_outcome = [](kevlar::OutcomeRef) -> std::optional<kevlar::Clock::duration> {
    return std::nullopt;
  };
  const ShieldDescriptor d = describe_shield<int>(Shield{}
                                                      .fallback(7)
                                                      .retry(retry)
                                                      .timeout(timeout)
                                                      .circuit_breaker(ratio)
                                                      .rate_limit(rl)
                                                      .hedge(1, 0s)
                                                      .with_name("all"));
  EXPECT_EQ(to_string(d),
            "all: [#0 Fallback{int, value}, #1 Retry{max_retries=3, backoff=none, max_delay=10s, "
            "+delay_generator, +on_retry}, #2 Timeout{2s, +timeout_generator, +on_timeout}, "
            "#3 CircuitBreaker{ratio 0.25 over 10s, min 4, break 5s, probes 2, close after 3, "
            "+break_duration_generator, +on_state_changed}, "
            "#4 RateLimit{2/1s, burst 2, queue 0, +hold_from_outcome}, "
            "#5 Hedging{1 attempts, delay 0s}]");
  // Without the value types, a fallback's hooks are unknown and not printed.
  EXPECT_EQ(to_string(describe_shield(Shield{}.fallback(7)).strategies.at(0)), "#0 Fallback{int}");
}

TEST(Descriptors, ACoroutineRejectionHookCountsAsAHook) {
  kevlar::RateLimitOptions rl;
  rl.permits = 5;
  rl.window = 1s;
  rl.on_rejected = [](kevlar::RateLimitRejectedEvent) -> boost::asio::awaitable<void> {
    co_return;
  };
  kevlar::ConcurrencyLimitOptions cl;
  cl.max_concurrency = 2;
  cl.on_rejected = [](kevlar::ConcurrencyLimitRejectedEvent) -> boost::asio::awaitable<void> {
    co_return;
  };
  const ShieldDescriptor d = describe_shield(Shield{}.rate_limit(rl).concurrency_limit(cl));
  EXPECT_TRUE(std::get<RateLimitDescriptor>(d.strategies.at(0)).has_on_rejected);
  EXPECT_TRUE(std::get<ConcurrencyLimitDescriptor>(d.strategies.at(1)).has_on_rejected);
  EXPECT_EQ(to_string(describe_shield(Shield{}.concurrency_limit(3, 1))),
            "(unnamed): [#0 ConcurrencyLimit{3, queue 1}]")
      << "no hook, none printed";
}

/// A user-defined strategy in the fallback role that is not a kevlar::FallbackStrategy.
class StaleCache final : public kevlar::Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "StaleCache"; }
  [[nodiscard]] kevlar::StrategyTraits traits() const noexcept override {
    kevlar::StrategyTraits t;
    t.role = kevlar::StrategyRole::fallback;
    return t;
  }
  kevlar::Step on_start(kevlar::Layer&) override { return kevlar::Step::run_inner; }
};

TEST(Descriptors, AFallbackOfATemplateTypeAndAUserFallbackAreNamedRight) {
  const ShieldDescriptor d =
      describe_shield(Shield{}.fallback(std::vector<int>{1}).use(std::make_shared<StaleCache>()));
  ASSERT_EQ(d.kinds(), (std::vector<StrategyKind>{StrategyKind::fallback, StrategyKind::custom}));
  const std::string type = std::get<FallbackDescriptor>(d.strategies[0]).result_type;
  EXPECT_NE(type.find("vector<int"), std::string::npos) << type;
  ASSERT_FALSE(type.empty());
  EXPECT_EQ(type.back(), '>') << "no space left from the demangled `> >`: '" << type << "'";
  EXPECT_EQ(std::get<CustomDescriptor>(d.strategies[1]), (CustomDescriptor{1, "StaleCache"}))
      << "a fallback-role strategy of the user's is described by its describe()";
}

TEST(Descriptors, NamingOtherValueTypesLeavesAFallbacksHooksUnknown) {
  kevlar::FallbackOptions<int> f;
  f.recovery = [](const kevlar::Outcome<int>&, kevlar::Context&) { return 0; };
  const auto d = describe_shield<std::string, double>(Shield{}.fallback(f));
  EXPECT_EQ(d.all_of<FallbackDescriptor>(),
            (std::vector<FallbackDescriptor>{{0, "int", std::nullopt, std::nullopt}}));
  EXPECT_EQ(
      describe_shield<int>(Shield{}.fallback(f)).all_of<FallbackDescriptor>().at(0).has_recovery,
      true);
}

TEST(Descriptors, AKindOutsideTheEnumeratorsPrintsAsAQuestionMark) {
  EXPECT_STREQ(to_string(static_cast<StrategyKind>(200)), "?");
  EXPECT_STREQ(to_string(static_cast<BackoffKind>(200)), "?");
  BackoffDescriptor backoff;
  backoff.kind = static_cast<BackoffKind>(200);
  backoff.base = 100ms;
  std::ostringstream os;
  os << backoff;
  EXPECT_EQ(os.str(), "?") << "an unknown kind prints no base delay";
}

}  // namespace
