// The metrics observer: Kevlar's counting rules, the histogram, gauges read from the strategies,
// exact totals under concurrency, and recording without allocation.
#include "core/async_ops.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/metrics.hpp>

#include <alloc_counter.hpp>
#include <test_options.hpp>
#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

using test::constant_retries;
using test::limits;

CircuitBreakerOptions consecutive(int n) { return test::consecutive_breaker(n, 10s); }

const auto failing = []() -> int { throw std::runtime_error("down"); };

struct Metrics : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<MetricsObserver> metrics = std::make_shared<MetricsObserver>();
  [[nodiscard]] double value(std::string_view name, MetricsSnapshot::TagFilter tags = {}) const {
    return metrics->snapshot().value(name, tags);
  }
};

TEST_F(Metrics, AFallbackOverRetriesCountsOneSuccessfulExecution) {
  // Kevlar's rule: Fallback(42).Retry(2) over an always-failing call -> executions{success} = 1,
  // retries = 2, fallbacks = 1.
  const Shield shield =
      Shield{}.with_name("api").fallback(42).retry(constant_retries(2, 0ms)).observed_by(metrics);
  EXPECT_EQ(shield.execute(failing), 42);
  const MetricsSnapshot s = metrics->snapshot();
  const MetricsSnapshot::TagFilter api = {{"kevlar.shield.name", "api"}};
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "api"}, {"kevlar.execution.outcome", "success"}}),
            1);
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "api"}, {"kevlar.execution.outcome", "failure"}}),
            0);
  EXPECT_EQ(s.value("kevlar.retries", api), 2);
  EXPECT_EQ(s.value("kevlar.fallbacks", api), 1);
  EXPECT_EQ(s.value("kevlar.timeouts", api), 0);
}

TEST_F(Metrics, EveryPublicCallCountsOnceByItsFinalOutcome) {
  const Shield shield = Shield{}.retry(constant_retries(1, 0ms)).observed_by(metrics);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(shield.execute([] { return 1; }), 1);
  for (int i = 0; i < 2; ++i) EXPECT_THROW(shield.execute(failing), std::runtime_error);
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.executions", {{"kevlar.execution.outcome", "success"}}), 3);
  EXPECT_EQ(s.value("kevlar.executions", {{"kevlar.execution.outcome", "failure"}}), 2);
  EXPECT_EQ(s.value("kevlar.retries"), 2) << "one retry per failing call; no extra execution";
  // An unnamed shield's series carry no name tag at all.
  for (const Series& series : s.series) {
    EXPECT_FALSE(series.tag("kevlar.shield.name")) << series.name;
  }
}

TEST_F(Metrics, AnEmptyShieldIsCountedToo) {
  const Shield shield = Shield{}.with_name("empty").observed_by(metrics);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(value("kevlar.executions",
                  {{"kevlar.shield.name", "empty"}, {"kevlar.execution.outcome", "success"}}),
            1);
}

TEST_F(Metrics, ShieldsAreSeparatedByName) {
  const Shield a = Shield{}.with_name("a").retry(constant_retries(1, 0ms)).observed_by(metrics);
  const Shield b = a.with_name("b");  // same strategies, another name: its own series
  EXPECT_THROW(a.execute(failing), std::runtime_error);
  EXPECT_EQ(b.execute([] { return 1; }), 1);
  EXPECT_EQ(b.execute([] { return 1; }), 1);
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.retries", {{"kevlar.shield.name", "a"}}), 1);
  EXPECT_EQ(s.value("kevlar.retries", {{"kevlar.shield.name", "b"}}), 0);
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "b"}, {"kevlar.execution.outcome", "success"}}),
            2);
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "a"}, {"kevlar.execution.outcome", "failure"}}),
            1);
}

TEST_F(Metrics, EachRejectionKindCountsExactlyOnce) {
  auto breaker = CircuitBreaker::create(consecutive(1));
  const Shield tripping = Shield{}.with_name("s").use(breaker).observed_by(metrics).with_clock(clock);
  EXPECT_THROW(tripping.execute(failing), std::runtime_error);  // opens
  EXPECT_THROW(tripping.execute([] { return 1; }), Error);       // circuit_open
  breaker->isolate();
  EXPECT_THROW(tripping.execute([] { return 1; }), Error);  // isolated
  EXPECT_THROW(tripping.execute([] { return 1; }), Error);  // isolated
  breaker->reset();

  auto limiter = ConcurrencyLimitStrategy::create(limits(1, 0));
  const Shield limited = Shield{}.with_name("s").use(limiter).observed_by(metrics);
  std::optional<bool> inner_rejected;
  EXPECT_EQ(limited.execute([&] {
    try {
      (void)limited.execute([] { return 2; });
      inner_rejected = false;
    } catch (const Error& e) {
      inner_rejected = e.code() == errc::concurrency_limit_exceeded;
    }
    return 1;
  }),
            1);
  EXPECT_EQ(inner_rejected, true);

  const MetricsSnapshot s = metrics->snapshot();
  const auto rejections = [&](const char* type) {
    return s.value("kevlar.rejections", {{"kevlar.shield.name", "s"}, {"kevlar.rejection.type", type}});
  };
  EXPECT_EQ(rejections("circuit_open"), 1);
  EXPECT_EQ(rejections("isolated"), 2);
  EXPECT_EQ(rejections("concurrency_limit"), 1);
  EXPECT_EQ(rejections("rate_limit"), 0);
  // Rejected calls are failed executions: 1 tripping failure + 3 rejected + 1 inner rejected.
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "s"}, {"kevlar.execution.outcome", "failure"}}),
            5);
}

TEST_F(Metrics, TimeoutsAreCounted) {
  const Shield shield = Shield{}.with_name("t").timeout(1s).observed_by(metrics).with_clock(clock);
  asio::io_context ioc;
  std::optional<error_code> result;
  shield.execute_async(test::CompletesOnCancel{},
                       asio::bind_executor(ioc, [&](error_code ec) { result = ec; }));
  ioc.poll();
  clock->advance(1s);
  for (int i = 0; i < 4 && !result; ++i) ioc.poll();
  ASSERT_EQ(result, errc::timeout);
  EXPECT_EQ(value("kevlar.timeouts", {{"kevlar.shield.name", "t"}}), 1);
  EXPECT_EQ(value("kevlar.executions",
                  {{"kevlar.shield.name", "t"}, {"kevlar.execution.outcome", "failure"}}),
            1);
}

TEST_F(Metrics, TheDurationHistogramHasFixedCumulativeBuckets) {
  MetricsOptions o;
  o.duration_buckets = {0.01, 0.1, 1};
  metrics = std::make_shared<MetricsObserver>(o);
  const Shield shield = Shield{}.observed_by(metrics).with_clock(clock);
  for (const Clock::duration d : {Clock::duration(5ms), Clock::duration(10ms),
                                  Clock::duration(50ms), Clock::duration(2s)}) {
    EXPECT_EQ(shield.execute([&] {
      clock->advance(d);
      return 0;
    }),
              0);
  }
  const MetricsSnapshot s = metrics->snapshot();
  const Series* h =
      s.find("kevlar.execution.duration", {{"kevlar.execution.outcome", "success"}});
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->kind, InstrumentKind::histogram);
  EXPECT_EQ(h->unit, "s");
  EXPECT_EQ(h->bounds, (std::vector<double>{0.01, 0.1, 1}));
  // 5 ms and 10 ms (a bound is inclusive) <= 0.01; 50 ms <= 0.1; 2 s only in +Inf.
  EXPECT_EQ(h->buckets, (std::vector<std::uint64_t>{2, 3, 3, 4}));
  EXPECT_EQ(h->count, 4u);
  EXPECT_DOUBLE_EQ(h->value, 2.065);
  const Series* failures =
      s.find("kevlar.execution.duration", {{"kevlar.execution.outcome", "failure"}});
  ASSERT_NE(failures, nullptr);
  EXPECT_EQ(failures->count, 0u);
}

TEST_F(Metrics, BreakerTransitionsAndItsStateGauge) {
  auto breaker = CircuitBreaker::create(consecutive(2));
  const Shield shield =
      Shield{}.with_name("b").retry(constant_retries(0, 0ms)).use(breaker).observed_by(metrics).with_clock(
          clock);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  const auto state = [&] {
    return value("kevlar.circuit_breaker.state",
                 {{"kevlar.shield.name", "b"}, {"kevlar.strategy.index", "1"}});
  };
  const MetricsSnapshot first = metrics->snapshot();
  const Series* gauge = first.find("kevlar.circuit_breaker.state");
  ASSERT_NE(gauge, nullptr) << "a breaker has its gauge from the shield's first run";
  EXPECT_EQ(gauge->kind, InstrumentKind::gauge);
  EXPECT_EQ(state(), 0) << "closed";
  EXPECT_THROW(shield.execute(failing), std::runtime_error);
  EXPECT_THROW(shield.execute(failing), std::runtime_error);
  EXPECT_EQ(state(), 1) << "open";
  clock->advance(10s);
  EXPECT_EQ(state(), 1) << "still open: the breaker half-opens when a call finds its break over";
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(state(), 0);
  breaker->isolate();
  EXPECT_EQ(state(), 3);
  const MetricsSnapshot s = metrics->snapshot();
  const auto transitions = [&](const char* from, const char* to) {
    return s.value("kevlar.circuit_breaker.transitions",
                   {{"kevlar.circuit_breaker.state.from", from},
                    {"kevlar.circuit_breaker.state.to", to}});
  };
  EXPECT_EQ(transitions("closed", "open"), 1);
  EXPECT_EQ(transitions("open", "half_open"), 1);
  EXPECT_EQ(transitions("half_open", "closed"), 1);
  EXPECT_EQ(transitions("closed", "isolated"), 0) << "a change by hand has no shield";
  for (const Series& series : s.series) {
    if (series.name == "kevlar.circuit_breaker.transitions") {
      EXPECT_FALSE(series.tag("kevlar.shield.name")) << "transitions carry no name tag";
      EXPECT_GT(series.value, 0) << "only the changes that happened are listed";
    }
  }
}

TEST_F(Metrics, ASharedBreakerShowsItsStateUnderEveryShield) {
  auto breaker = CircuitBreaker::create(consecutive(1));
  const Shield a = Shield{}.with_name("a").use(breaker).observed_by(metrics).with_clock(clock);
  const Shield b = Shield{}.with_name("b").retry(0).use(breaker).observed_by(metrics).with_clock(clock);
  EXPECT_EQ(a.execute([] { return 1; }), 1);
  EXPECT_EQ(b.execute([] { return 1; }), 1);
  EXPECT_THROW(a.execute(failing), std::runtime_error);  // a trips the breaker both share
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.circuit_breaker.state",
                    {{"kevlar.shield.name", "a"}, {"kevlar.strategy.index", "0"}}),
            1);
  EXPECT_EQ(s.value("kevlar.circuit_breaker.state",
                    {{"kevlar.shield.name", "b"}, {"kevlar.strategy.index", "1"}}),
            1);
}

TEST_F(Metrics, AliasesOfOneStrategyAreBounded) {
  MetricsOptions o;
  o.max_aliases_per_strategy = 2;
  metrics = std::make_shared<MetricsObserver>(o);
  auto breaker = CircuitBreaker::create(consecutive(1));
  for (const char* name : {"a", "b", "c"}) {
    const Shield s = Shield{}.with_name(name).use(breaker).observed_by(metrics);
    EXPECT_EQ(s.execute([] { return 1; }), 1);
  }
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_NE(s.find("kevlar.circuit_breaker.state", {{"kevlar.shield.name", "a"}}), nullptr);
  EXPECT_NE(s.find("kevlar.circuit_breaker.state", {{"kevlar.shield.name", "b"}}), nullptr);
  EXPECT_EQ(s.find("kevlar.circuit_breaker.state", {{"kevlar.shield.name", "c"}}), nullptr);
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "c"}, {"kevlar.execution.outcome", "success"}}),
            1)
      << "the bound is on gauges only";
}

TEST_F(Metrics, OneGaugeSeriesPerNameAndIndex) {
  // Two live shields named "db", each with a breaker of its own at index 0: one series, showing
  // the breaker of the shield announced last (two samples with the same labels would be refused).
  auto first = CircuitBreaker::create(consecutive(1));
  auto second = CircuitBreaker::create(consecutive(1));
  const Shield a = Shield{}.with_name("db").use(first).observed_by(metrics);
  const Shield b = Shield{}.with_name("db").use(second).observed_by(metrics);
  EXPECT_EQ(a.execute([] { return 1; }), 1);
  second->isolate();
  EXPECT_THROW(b.execute([] { return 1; }), Error);
  std::size_t series = 0;
  for (const Series& s : metrics->snapshot().series) {
    if (s.name == "kevlar.circuit_breaker.state") {
      ++series;
      EXPECT_EQ(s.value, 3) << "the later shield's isolated breaker";
    }
  }
  EXPECT_EQ(series, 1u);
}

TEST_F(Metrics, LimiterGaugesAreReadFromTheLimiter) {
  auto limiter = ConcurrencyLimitStrategy::create(limits(3, 2));
  const Shield shield = Shield{}.with_name("l").use(limiter).observed_by(metrics);
  const MetricsSnapshot::TagFilter tags = {{"kevlar.shield.name", "l"}, {"kevlar.strategy.index", "0"}};
  std::optional<double> inside;
  EXPECT_EQ(shield.execute([&] {
    inside = value("kevlar.concurrency_limit.inflight", tags);
    return 1;
  }),
            1);
  EXPECT_EQ(inside, 1.0);
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.concurrency_limit.inflight", tags), 0);
  EXPECT_EQ(s.value("kevlar.concurrency_limit.queued", tags), 0);
  EXPECT_EQ(s.value("kevlar.concurrency_limit.capacity", tags), 3);
}

TEST_F(Metrics, RetryBudgetRefusalsAreCountedByKindAndItsBalanceIsReadFromIt) {
  const auto budget = RetryBudget::tokens({.max_tokens = 4, .token_ratio = 1});
  RetryOptions options;
  options.max_retries = 5;
  options.backoff = Backoff::none();
  options.budget = budget;
  const Shield shield = Shield{}.with_name("b").retry(options).observed_by(metrics);
  EXPECT_THROW(shield.execute(failing), std::runtime_error);  // 2 calls, then refused
  EXPECT_THROW(shield.execute(failing), std::runtime_error);  // refused after the first call
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.retry_budget.exhausted",
                    {{"kevlar.shield.name", "b"}, {"kevlar.attempt.kind", "retry"}}),
            2);
  EXPECT_EQ(s.value("kevlar.retry_budget.exhausted",
                    {{"kevlar.shield.name", "b"}, {"kevlar.attempt.kind", "hedge"}}),
            0);
  EXPECT_EQ(s.value("kevlar.retries", {{"kevlar.shield.name", "b"}}), 1);
  EXPECT_EQ(s.value("kevlar.retry_budget.balance", {{"kevlar.shield.name", "b"},
                                                    {"kevlar.strategy.index", "0"},
                                                    {"kevlar.retry_budget.mode", "tokens"}}),
            1);
  // A retry without a budget has no balance series.
  const Shield plain = Shield{}.with_name("p").retry(1).observed_by(metrics);
  EXPECT_EQ(plain.execute([] { return 1; }), 1);
  bool plain_balance = false;
  for (const Series& series : metrics->snapshot().series) {
    plain_balance = plain_balance || (series.name == "kevlar.retry_budget.balance" &&
                                      series.tag("kevlar.shield.name") == "p");
  }
  EXPECT_FALSE(plain_balance);
}

TEST_F(Metrics, AThrottlesRejectionsAreCountedAndItsWindowIsReadFromIt) {
  AdaptiveThrottleOptions o;
  double draw = 0.95;  // above the 0.9 cap: nothing is refused while the failures are counted
  o.random = [&draw] { return draw; };
  const Shield shield = Shield{}.with_name("t").adaptive_throttle(o).observed_by(metrics);
  for (int i = 0; i < 10; ++i) {
    try {
      shield.execute(failing);
    } catch (const Error&) {
      ADD_FAILURE() << "throttled at call " << i;
    } catch (const std::runtime_error&) {
    }
  }
  // 10 requests, none accepted: p = min(0.9, 10 / 11) = 0.9 > 0.5, the next call is refused.
  draw = 0.5;
  try {
    shield.execute([] { return 1; });
    ADD_FAILURE() << "not throttled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::throttled);
  }
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.value("kevlar.rejections",
                    {{"kevlar.shield.name", "t"}, {"kevlar.rejection.type", "throttle"}}),
            1);
  EXPECT_DOUBLE_EQ(s.value("kevlar.throttle.probability",
                           {{"kevlar.shield.name", "t"}, {"kevlar.strategy.index", "0"}}),
                   0.9);
  EXPECT_EQ(s.value("kevlar.throttle.requests", {{"kevlar.shield.name", "t"},
                                                 {"kevlar.strategy.index", "0"},
                                                 {"kevlar.throttle.count", "requests"}}),
            11)
      << "the refused call counts";
  EXPECT_EQ(s.value("kevlar.throttle.requests", {{"kevlar.shield.name", "t"},
                                                 {"kevlar.strategy.index", "0"},
                                                 {"kevlar.throttle.count", "accepts"}}),
            0);
}

TEST_F(Metrics, RateLimitGaugesAreReadOnTheObserversClock) {
  MetricsOptions o;
  o.clock = clock;
  metrics = std::make_shared<MetricsObserver>(o);
  RateLimitOptions r;
  r.permits = 2;
  r.window = 2s;
  auto limiter = RateLimitStrategy::create(r);
  const Shield shield =
      Shield{}.with_name("r").use(limiter).with_clock(clock).observed_by(metrics);
  const MetricsSnapshot::TagFilter tags = {{"kevlar.shield.name", "r"},
                                           {"kevlar.strategy.index", "0"}};
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(value("kevlar.rate_limit.available", tags), 1);
  EXPECT_EQ(value("kevlar.rate_limit.queued", tags), 0);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(value("kevlar.rate_limit.available", tags), 0);
  EXPECT_THROW((void)shield.execute([] { return 1; }), Error);
  EXPECT_EQ(value("kevlar.rejections", {{"kevlar.rejection.type", "rate_limit"}}), 1);
  clock->advance(1s);
  EXPECT_EQ(value("kevlar.rate_limit.available", tags), 1) << "the permits refill with time";
  clock->advance(1h);
  EXPECT_EQ(value("kevlar.rate_limit.available", tags), 2) << "up to the burst";
}

TEST_F(Metrics, TheObserverKeepsNoStrategyAlive) {
  std::weak_ptr<CircuitBreaker> weak;
  {
    auto breaker = CircuitBreaker::create(consecutive(1));
    weak = breaker;
    const Shield shield = Shield{}.use(breaker).observed_by(metrics);
    EXPECT_EQ(shield.execute([] { return 1; }), 1);
    EXPECT_NE(metrics->snapshot().find("kevlar.circuit_breaker.state"), nullptr);
  }
  EXPECT_TRUE(weak.expired());
  const MetricsSnapshot s = metrics->snapshot();
  EXPECT_EQ(s.find("kevlar.circuit_breaker.state"), nullptr) << "a destroyed breaker has no gauge";
  EXPECT_EQ(s.value("kevlar.executions", {{"kevlar.execution.outcome", "success"}}), 1)
      << "counters outlive the shield";
}

TEST_F(Metrics, ConcurrentTotalsAreExact) {
  const Shield shield =
      Shield{}.with_name("c").retry(constant_retries(1, 0ms)).observed_by(metrics);
  constexpr int threads = 4;
  constexpr int calls = 5000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        if ((i + t) % 5 == 0) {
          EXPECT_THROW(shield.execute(failing), std::runtime_error);
        } else {
          EXPECT_EQ(shield.execute([] { return 1; }), 1);
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const MetricsSnapshot s = metrics->snapshot();
  const double failures = threads * calls / 5;
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "c"}, {"kevlar.execution.outcome", "failure"}}),
            failures);
  EXPECT_EQ(s.value("kevlar.executions",
                    {{"kevlar.shield.name", "c"}, {"kevlar.execution.outcome", "success"}}),
            threads * calls - failures);
  EXPECT_EQ(s.value("kevlar.retries", {{"kevlar.shield.name", "c"}}), failures);
}

TEST_F(Metrics, RecordingAllocatesNothing) {
  const Shield shield = Shield{}.with_name("api").retry(constant_retries(1, 0ms)).observed_by(metrics);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);  // announces the shield: its series exist
  const std::string name = "api";
  EventSource source;
  source.shield_name = &name;
  const ExecutionFinished succeeded{true, {}, 3ms, 1};
  const ExecutionFinished failed{false, {}, 30s, 2};
  const RetryScheduled retried{1, 0ms, {}};
  const TimeoutFired timed_out{1s};
  const FallbackTaken fell_back{};
  const Rejected rejected{RejectionKind::circuit_open, std::nullopt};
  const BreakerTransition opened{CircuitState::closed, CircuitState::open, {}};
  const LimiterStateChanged limited{1, 0};
  const Event events[] = {
      make_event(succeeded, source), make_event(failed, source),    make_event(retried, source),
      make_event(timed_out, source), make_event(fell_back, source), make_event(rejected, source),
      make_event(opened, source),    make_event(limited, source),
  };
  {
    // Events without the per-shield state (as one racing the announcement): the name lookup.
    const testing::AllocScope scope;
    for (const Event& e : events) metrics->on_event(e);
    EXPECT_EQ(scope.count(), 0u);
  }
  EXPECT_EQ(metrics->snapshot().value("kevlar.retries", {{"kevlar.shield.name", "api"}}), 1);
  // The ordinary path: executions through the observed shield, each with a retry, against the
  // same loop through the same strategies unobserved (the thrown exceptions allocate in both).
  const auto allocations = [](const Shield& s) {
    int calls = 0;
    const testing::AllocScope scope;
    for (int i = 0; i < 100; ++i) {
      EXPECT_EQ(s.execute([&] {
        if (++calls % 2 == 1) throw std::runtime_error("once");
        return 1;
      }),
                1);
    }
    return scope.count();
  };
  const Shield unobserved = Shield{}.with_name("api").use(shield.strategies()[0]);
  const std::uint64_t control = allocations(unobserved);
  EXPECT_EQ(allocations(shield), control) << "observing adds no allocation";
  EXPECT_EQ(metrics->snapshot().value("kevlar.retries", {{"kevlar.shield.name", "api"}}), 101);
}

TEST_F(Metrics, InvalidOptionsAreRefused) {
  const auto with = [](auto change) {
    MetricsOptions o;
    change(o);
    return o;
  };
  EXPECT_THROW(MetricsObserver(with([](MetricsOptions& o) { o.duration_buckets = {}; })),
               std::invalid_argument);
  EXPECT_THROW(MetricsObserver(with([](MetricsOptions& o) { o.duration_buckets = {1, 0.5}; })),
               std::invalid_argument);
  EXPECT_THROW(MetricsObserver(with([](MetricsOptions& o) { o.duration_buckets = {0, 1}; })),
               std::invalid_argument);
  EXPECT_THROW(MetricsObserver(with([](MetricsOptions& o) { o.shards = 3; })),
               std::invalid_argument);
  EXPECT_THROW(MetricsObserver(with([](MetricsOptions& o) { o.shards = 2048; })),
               std::invalid_argument);
  EXPECT_NO_THROW(MetricsObserver(with([](MetricsOptions& o) { o.shards = 1; })));
}

}  // namespace
}  // namespace kevlar
