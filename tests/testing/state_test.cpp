// State probes: shield_state reads every stateful strategy of a shield (breaker, concurrency limit,
// rate limit on the shield's clock) with its position, without taking anything.
#include "support/field_equality.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/state.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

using namespace std::chrono_literals;
using kevlar::CircuitState;
using kevlar::Shield;
using namespace kevlar::testing;

TEST(ShieldState, StatelessStrategiesHaveNoEntry) {
  EXPECT_TRUE(shield_state(Shield{}.retry(2).timeout(1s)).strategies.empty());
  EXPECT_TRUE(shield_state(Shield{}).strategies.empty());
}

TEST(ShieldState, ReportsTheBreakerLimiterAndRateLimitAtTheirPositions) {
  const auto clock = kevlar::ManualClock::create();
  const Shield shield = Shield{}
                            .rate_limit(2, 1s)
                            .retry(1)
                            .circuit_breaker(2, 10s)
                            .concurrency_limit(3, 1)
                            .with_clock(clock);
  const ShieldStateSnapshot idle = shield_state(shield);
  EXPECT_EQ(idle, (ShieldStateSnapshot{{RateLimitStateSnapshot{0, 2, 0},
                                        CircuitBreakerStateSnapshot{2, CircuitState::closed},
                                        ConcurrencyLimitStateSnapshot{3, 0, 0, 3, false}}}))
      << to_string(idle);
  EXPECT_EQ(shield_state(shield), idle) << "reading takes nothing";
  std::ostringstream printed;
  for (const auto& st : idle.strategies) printed << st << "; ";
  EXPECT_EQ(printed.str(),
            "#0 RateLimit{available=2, queued=0}; #2 CircuitBreaker{closed}; "
            "#3 ConcurrencyLimit{running=0, queued=0, available=3}; ");

  // One call running: it holds a rate-limit permit and a concurrency permit.
  StrategyDriver<int> running(shield, clock);
  running.start();
  const ShieldStateSnapshot busy = shield_state(shield);
  EXPECT_EQ(busy.single<RateLimitStateSnapshot>().available, 1u);
  EXPECT_EQ(busy.single<ConcurrencyLimitStateSnapshot>(),
            (ConcurrencyLimitStateSnapshot{3, 1, 0, 2, false}));
  running.succeed(0, 1);
  EXPECT_EQ(shield_state(shield).single<ConcurrencyLimitStateSnapshot>().running, 0u);

  // The rate limit refills on the shield's clock: half a window gives one permit back.
  clock->advance(500ms);
  EXPECT_EQ(shield_state(shield).single<RateLimitStateSnapshot>().available, 2u);
}

TEST(ShieldState, ABreakerOpenedByFailuresReadsOpenAndASharedInstanceReadsTheSame) {
  const auto clock = kevlar::ManualClock::create();
  kevlar::CircuitBreakerOptions o;
  o.consecutive_failures = 2;
  const auto breaker = kevlar::CircuitBreaker::create(o);
  const Shield a = Shield{}.use(breaker).with_clock(clock);
  const Shield b = Shield{}.timeout(1s).use(breaker).with_clock(clock);
  for (int i = 0; i < 2; ++i) {
    StrategyDriver<int> d(a, clock);
    d.start();
    d.fail(0, boost::asio::error::connection_reset);
  }
  EXPECT_EQ(shield_state(a).single<CircuitBreakerStateSnapshot>(),
            (CircuitBreakerStateSnapshot{0, CircuitState::open}));
  EXPECT_EQ(shield_state(b).single<CircuitBreakerStateSnapshot>(),
            (CircuitBreakerStateSnapshot{1, CircuitState::open}))
      << "composed shields sharing a breaker report its state at their own position";
}

TEST(ShieldState, SingleThrowsWithTheSnapshotWhenThereIsNotExactlyOne) {
  const ShieldStateSnapshot s =
      shield_state(Shield{}.circuit_breaker(1, 1s).circuit_breaker(2, 1s));
  try {
    (void)s.single<CircuitBreakerStateSnapshot>();
    ADD_FAILURE() << "two breakers";
  } catch (const ShieldAssertionError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("expected exactly one CircuitBreaker state, actual 2"), std::string::npos)
        << m;
    EXPECT_NE(m.find("[#0 CircuitBreaker{closed}, #1 CircuitBreaker{closed}]"), std::string::npos)
        << m;
  }
  EXPECT_THROW((void)s.single<RateLimitStateSnapshot>(), ShieldAssertionError);
}

TEST(ShieldState, EveryFieldOfASnapshotTakesPartInEquality) {
  kevlar::test::expect_every_field_compared<CircuitBreakerStateSnapshot>(
      CircuitBreakerStateSnapshot{0, CircuitState::closed},
      {[](CircuitBreakerStateSnapshot& s) { s.index = 1; },
       [](CircuitBreakerStateSnapshot& s) { s.state = CircuitState::open; }});
  kevlar::test::expect_every_field_compared<ConcurrencyLimitStateSnapshot>(
      ConcurrencyLimitStateSnapshot{0, 1, 0, 3, false},
      {[](ConcurrencyLimitStateSnapshot& s) { s.index = 1; },
       [](ConcurrencyLimitStateSnapshot& s) { s.running = 2; },
       [](ConcurrencyLimitStateSnapshot& s) { s.queued = 1; },
       [](ConcurrencyLimitStateSnapshot& s) { s.available = 2; },
       [](ConcurrencyLimitStateSnapshot& s) { s.closed = true; }});
  kevlar::test::expect_every_field_compared<RateLimitStateSnapshot>(
      RateLimitStateSnapshot{0, 2, 0}, {[](RateLimitStateSnapshot& s) { s.index = 1; },
                                        [](RateLimitStateSnapshot& s) { s.available = 1; },
                                        [](RateLimitStateSnapshot& s) { s.queued = 1; }});
  kevlar::test::expect_every_field_compared<ShieldStateSnapshot>(
      ShieldStateSnapshot{{CircuitBreakerStateSnapshot{0, CircuitState::closed}}},
      {[](ShieldStateSnapshot& s) { s.strategies.clear(); },
       [](ShieldStateSnapshot& s) {
         s.strategies.front() = CircuitBreakerStateSnapshot{0, CircuitState::half_open};
       },
       [](ShieldStateSnapshot& s) {
         s.strategies.front() = RateLimitStateSnapshot{0, 1, 0};
       }});
}

TEST(ShieldState, AClosedConcurrencyLimitPrintsClosed) {
  kevlar::ConcurrencyLimitOptions two;
  two.max_concurrency = 2;
  const auto limiter = kevlar::ConcurrencyLimitStrategy::create(two);
  const Shield shield = Shield{}.use(limiter);
  EXPECT_EQ(to_string(shield_state(shield)),
            "[#0 ConcurrencyLimit{running=0, queued=0, available=2}]");
  limiter->close();
  EXPECT_EQ(shield_state(shield).single<ConcurrencyLimitStateSnapshot>(),
            (ConcurrencyLimitStateSnapshot{0, 0, 0, 2, true}));
  EXPECT_EQ(to_string(shield_state(shield)),
            "[#0 ConcurrencyLimit{running=0, queued=0, available=2, closed}]");
}

TEST(ShieldState, AFullConcurrencyLimitHasNoneAvailable) {
  const auto clock = kevlar::ManualClock::create();
  const Shield shield = Shield{}.concurrency_limit(1, 1).with_clock(clock);
  StrategyDriver<int> holder(shield, clock);
  holder.start();
  StrategyDriver<int> queued(shield, clock);
  queued.start();
  EXPECT_EQ(shield_state(shield).single<ConcurrencyLimitStateSnapshot>(),
            (ConcurrencyLimitStateSnapshot{0, 1, 1, 0, false}));
  EXPECT_EQ(to_string(shield_state(shield)),
            "[#0 ConcurrencyLimit{running=1, queued=1, available=0}]");
  holder.succeed(0, 1);
  queued.run();  // the permit is handed over
  EXPECT_EQ(shield_state(shield).single<ConcurrencyLimitStateSnapshot>(),
            (ConcurrencyLimitStateSnapshot{0, 1, 0, 0, false}));
  queued.succeed(0, 2);
  EXPECT_EQ(shield_state(shield).single<ConcurrencyLimitStateSnapshot>().available, 1u);
}

}  // namespace
