// The complete example of docs/testing.md ("A complete test"), kept here so that it is known to
// compile and pass: a shield with retry, breaker and timeout, checked for its shape with
// descriptors, driven on a manual clock, and checked for its state with probes.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/descriptors.hpp>
#include <kevlar/testing/state.hpp>
#include <kevlar/testing/strategy_driver.hpp>
#include <kevlar/testing/time_control.hpp>

#include <gtest/gtest.h>

#include <chrono>

namespace {

using namespace std::chrono_literals;
namespace kt = kevlar::testing;

TEST(InventoryShield, TimesOutRetriesThenOpensAndRecovers) {
  const auto clock = kevlar::ManualClock::create();
  kevlar::CircuitBreakerOptions breaker_options;
  breaker_options.consecutive_failures = 2;
  breaker_options.break_duration = 30s;
  kevlar::RetryOptions retry_options;
  retry_options.max_retries = 1;
  retry_options.backoff = kevlar::Backoff::constant(200ms);
  const auto breaker = kevlar::CircuitBreaker::create(breaker_options);
  const kevlar::Shield shield = kevlar::Shield{}
                                    .retry(retry_options)
                                    .use(breaker)
                                    .timeout(1s)
                                    .with_name("inventory")
                                    .with_clock(clock);

  // 1. The shape: retry outside the breaker, a per-attempt timeout inside it.
  kt::expect_strategy_order(shield, {kt::StrategyKind::retry, kt::StrategyKind::circuit_breaker,
                                     kt::StrategyKind::timeout});
  const auto retry = kt::expect_contains_single<kt::RetryDescriptor>(shield);
  EXPECT_EQ(retry.max_retries, 1);
  EXPECT_EQ(retry.backoff.kind, kt::BackoffKind::constant);
  EXPECT_EQ(retry.backoff.base, 200ms);
  EXPECT_EQ(kt::expect_contains_single<kt::TimeoutDescriptor>(shield).timeout, 1s);
  const auto cb = kt::expect_contains_single<kt::CircuitBreakerDescriptor>(shield);
  EXPECT_EQ(cb.mode, kt::BreakerMode::consecutive);
  EXPECT_EQ(cb.consecutive_failures, 2);

  // 2. The behaviour, on the manual clock: start the call, then advance.
  kt::StrategyDriver<int> call(shield, clock);
  const kt::Drain drain = [&] { call.run(); };
  call.start();  // attempt 0 hangs; its 1 s timeout waits on the clock
  kt::advance_expecting_wait(*clock, 1s, drain);  // attempt 0 times out: one failure
  EXPECT_EQ(kt::shield_state(shield).single<kt::CircuitBreakerStateSnapshot>().state,
            kevlar::CircuitState::closed);
  kt::advance_until(
      *clock, 100ms, [&] { return call.attempts() == 2; },
      "the retry started attempt 1 after its backoff", 10, drain);
  kt::advance_expecting_wait(*clock, 1s, drain);  // attempt 1 times out too: the circuit opens
  EXPECT_EQ(call.outcome().error(), kevlar::errc::timeout);
  EXPECT_EQ(kt::shield_state(shield).single<kt::CircuitBreakerStateSnapshot>().state,
            kevlar::CircuitState::open);

  // 3. While open, calls are rejected without running (the retry tries once more, in vain).
  kt::StrategyDriver<int> rejected(shield, clock);
  rejected.start();
  kt::advance_until_idle(*clock, [&] { rejected.run(); });
  EXPECT_EQ(rejected.outcome().error(), kevlar::errc::circuit_open);
  EXPECT_EQ(rejected.attempts(), 0u);

  // 4. After the break, a probe that succeeds closes the circuit.
  clock->advance(30s);
  kt::StrategyDriver<int> probe(shield, clock);
  probe.start();
  probe.succeed(0, 42);
  EXPECT_EQ(probe.outcome().value(), 42);
  EXPECT_EQ(kt::shield_state(shield).single<kt::CircuitBreakerStateSnapshot>().state,
            kevlar::CircuitState::closed);
}

}  // namespace
