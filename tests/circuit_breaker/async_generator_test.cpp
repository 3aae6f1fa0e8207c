// The breaker's coroutine break-duration generator (Kevlar's awaited BreakDurationGenerator):
// the tripping execution awaits it with the opening pending, then opens for its duration; a
// failure, a cancellation, a concurrent reset or an abandoned execution leave the circuit as it
// was, able to trip again.
#include "breaker_test_support.hpp"

#include <kevlar/circuit_breaker.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/descriptors.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;
using S = CircuitState;
using test::Boom;

/// What the generator saw of each trip.
struct Seen {
  S from;
  int trip_number;
  error_code error;
  bool has_exception;
  bool has_context;
  bool outcome_is_error;
  bool slow;
};

/// A generator that records each trip, then waits until the test opens `gate` (a timer that never
/// expires by itself; cancelling it lets the generator go on) and returns `duration`.
struct GatedGenerator {
  std::vector<Seen>* seen;
  asio::steady_timer* gate;
  Clock::duration duration;

  asio::awaitable<Clock::duration> operator()(BreakEvent e) const {
    seen->push_back(Seen{e.from, e.trip_number, e.error, e.exception != nullptr,
                         e.context != nullptr, e.outcome != nullptr && e.outcome->has_error(),
                         e.slow});
    error_code ignored;
    co_await gate->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    co_return duration;
  }
};

CircuitBreakerOptions one_failure_trips() {
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.break_duration = 1h;  // never used: the generator sizes every break
  return o;
}

using test::poll_rounds;
using test::start_call;

TEST(BreakerAsyncGenerator, TheTrippingExecutionAwaitsItAndTheBreakStartsWithItsResult) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  std::vector<Seen> seen;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = GatedGenerator{&seen, &gate, 7s};
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);

  std::optional<error_code> first;
  start_call(shield, io, asio::error::connection_reset, first);
  poll_rounds(io);
  EXPECT_FALSE(first.has_value()) << "the execution awaits the generator";
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].from, S::closed);
  EXPECT_EQ(seen[0].trip_number, 1);
  EXPECT_EQ(seen[0].error, asio::error::connection_reset);
  EXPECT_FALSE(seen[0].has_exception);
  EXPECT_TRUE(seen[0].has_context);
  EXPECT_TRUE(seen[0].outcome_is_error) << "the outcome stays readable while it is awaited";
  EXPECT_FALSE(seen[0].slow);
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_TRUE(breaker->core().metrics(clock->now()).opening_pending);

  // Meanwhile the closed circuit admits calls; a second failure starts no second generator.
  std::optional<error_code> second;
  start_call(shield, io, asio::error::connection_reset, second);
  poll_rounds(io);
  EXPECT_EQ(second, error_code(asio::error::connection_reset));
  EXPECT_EQ(seen.size(), 1u);

  clock->advance(2s);  // the break starts when the duration arrives, not at the failure
  gate.cancel();
  poll_rounds(io);
  EXPECT_EQ(first, error_code(asio::error::connection_reset));
  EXPECT_EQ(breaker->state(), S::open);
  EXPECT_FALSE(breaker->core().metrics(clock->now()).opening_pending);

  const Outcome<int> rejected = shield.execute_outcome([] { return 1; });
  ASSERT_TRUE(rejected.has_error());
  EXPECT_EQ(rejected.error(), errc::circuit_open);
  EXPECT_EQ(rejected.retry_after(), std::chrono::nanoseconds(7s));
  clock->advance(7s - 1ns);
  EXPECT_EQ(shield.execute_outcome([] { return 1; }).error(), errc::circuit_open);
  clock->advance(1ns);
  EXPECT_EQ(shield.execute([] { return 3; }), 3) << "the probe after 7 s closes the circuit";
  EXPECT_EQ(breaker->state(), S::closed);
}

TEST(BreakerAsyncGenerator, ASynchronousExecutionRunsItToCompletion) {
  const auto clock = ManualClock::create();
  std::vector<int> trips;
  std::exception_ptr seen_exception;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = [&](BreakEvent e) -> asio::awaitable<Clock::duration> {
    co_await asio::post(asio::use_awaitable);  // really suspends, on the private io_context
    trips.push_back(e.trip_number);
    seen_exception = e.exception;
    co_return 3s;
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::exception_ptr thrown;
  try {
    shield.execute([]() -> int { throw Boom(); });
  } catch (const Boom&) {
    thrown = std::current_exception();
  }
  ASSERT_TRUE(thrown);
  EXPECT_EQ(seen_exception, thrown) << "the very exception object";
  EXPECT_EQ(trips, std::vector<int>{1});
  EXPECT_EQ(breaker->state(), S::open);
  clock->advance(3s);
  // The probe fails: the generator sizes the second trip, from half-open.
  EXPECT_THROW(shield.execute([]() -> int { throw Boom(); }), Boom);
  EXPECT_EQ(trips, (std::vector<int>{1, 2}));
  EXPECT_EQ(breaker->state(), S::open);
}

TEST(BreakerAsyncGenerator, AHalfOpenCircuitAdmitsNoProbeWhileItRuns) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  std::vector<Seen> seen;
  CircuitBreakerOptions o = one_failure_trips();
  o.half_open_probes = 2;
  o.break_duration_generator = GatedGenerator{&seen, &gate, 5s};
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  // Open the circuit through a first trip.
  std::optional<error_code> first;
  start_call(shield, io, asio::error::connection_reset, first);
  poll_rounds(io);
  gate.cancel();
  poll_rounds(io);
  ASSERT_EQ(breaker->state(), S::open);
  clock->advance(5s);
  gate.expires_at(asio::steady_timer::time_point::max());

  std::optional<error_code> probe;
  start_call(shield, io, asio::error::connection_reset, probe);  // the probe fails
  poll_rounds(io);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].from, S::half_open);
  EXPECT_EQ(seen[1].trip_number, 2);
  EXPECT_EQ(breaker->state(), S::half_open);
  const Outcome<int> refused = shield.execute_outcome([] { return 1; });
  ASSERT_TRUE(refused.has_error()) << "a second probe slot is free, but an opening is pending";
  EXPECT_EQ(refused.error(), errc::circuit_open);
  gate.cancel();
  poll_rounds(io);
  EXPECT_EQ(probe, error_code(asio::error::connection_reset));
  EXPECT_EQ(breaker->state(), S::open);
}

TEST(BreakerAsyncGenerator, AFailingGeneratorIsTheOutcomeAndTheCircuitCanTripAgain) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  int calls = 0;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = [&calls](BreakEvent) -> asio::awaitable<Clock::duration> {
    co_await asio::post(asio::use_awaitable);
    if (++calls == 1) throw std::domain_error("generator");
    co_return 2s;
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  EXPECT_EQ(got, error_code(errc::callback_exception))
      << "an error-code completion cannot carry it";
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_FALSE(breaker->core().metrics(clock->now()).opening_pending);

  got.reset();
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  EXPECT_EQ(got, error_code(asio::error::connection_reset));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(breaker->state(), S::open);
}

TEST(BreakerAsyncGenerator, ItsExceptionAndAnInvalidDurationReachASynchronousCaller) {
  int calls = 0;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = [&calls](BreakEvent) -> asio::awaitable<Clock::duration> {
    if (++calls == 1) throw std::out_of_range("generator");  // before its first suspension
    co_return 0s;
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(ManualClock::create());
  const Outcome<int> thrown = shield.execute_outcome([]() -> int { throw Boom(); });
  ASSERT_TRUE(thrown.has_exception());
  EXPECT_THROW(std::rethrow_exception(thrown.exception()), std::out_of_range);
  const Outcome<int> zero = shield.execute_outcome([]() -> int { throw Boom(); });
  ASSERT_TRUE(zero.has_exception());
  try {
    std::rethrow_exception(zero.exception());
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("break_duration_generator must return a positive"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_FALSE(breaker->core().metrics(Clock::time_point{}).opening_pending);
}

TEST(BreakerAsyncGenerator, TheCallersCancellationEndsItAndCancelsTheOpening) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  asio::cancellation_signal cancel;
  bool returned = false;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = [&](BreakEvent) -> asio::awaitable<Clock::duration> {
    co_await hour.async_wait(asio::use_awaitable);
    returned = true;
    co_return 1s;
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  shield.execute_async(
      [&](auto token) {
        return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_cancellation_slot(cancel.slot(),
                                   asio::bind_executor(io, [&](error_code ec, int) { got = ec; })));
  poll_rounds(io);
  ASSERT_FALSE(got.has_value());
  EXPECT_TRUE(breaker->core().metrics(clock->now()).opening_pending);
  cancel.emit(asio::cancellation_type::terminal);
  poll_rounds(io);
  ASSERT_TRUE(got.has_value()) << "the generator's wait was not cancelled";
  EXPECT_EQ(*got, asio::error::operation_aborted);
  EXPECT_FALSE(returned);
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_FALSE(breaker->core().metrics(clock->now()).opening_pending);
}

TEST(BreakerAsyncGenerator, AResetWhileItRunsDiscardsItsResult) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  std::vector<Seen> seen;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = GatedGenerator{&seen, &gate, 5s};
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  ASSERT_EQ(seen.size(), 1u);
  breaker->reset();
  gate.cancel();
  poll_rounds(io);
  EXPECT_EQ(got, error_code(asio::error::connection_reset));
  EXPECT_EQ(breaker->state(), S::closed) << "a stale duration opens nothing";
}

TEST(BreakerAsyncGenerator, AnExecutionAbandonedWhileItRunsCancelsTheOpening) {
  const auto clock = ManualClock::create();
  bool delivered = false;
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = [](BreakEvent) -> asio::awaitable<Clock::duration> {
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await timer.async_wait(asio::use_awaitable);
    co_return 1s;
  };
  const auto breaker = CircuitBreaker::create(o);
  auto shield = std::make_unique<Shield>(Shield{}.use(breaker).with_clock(clock));
  {
    asio::io_context io;
    shield->execute_async(
        [&](auto token) {
          return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                    std::move(token));
        },
        asio::bind_executor(io, [&](error_code, int) { delivered = true; }));
    poll_rounds(io);
    EXPECT_TRUE(breaker->core().metrics(clock->now()).opening_pending);
  }  // the io_context goes with the generator's coroutine and the execution it holds
  EXPECT_FALSE(delivered);
  EXPECT_FALSE(breaker->core().metrics(clock->now()).opening_pending);
  EXPECT_EQ(breaker->state(), S::closed);
  shield.reset();  // the strategies outlive nothing of the execution (ASan checks)
}

TEST(BreakerAsyncGenerator, TheCoreDrivenDirectlyAwaitsItOnAPrivateContext) {
  CircuitBreakerOptions o = one_failure_trips();
  o.break_duration_generator = [](BreakEvent e) -> asio::awaitable<Clock::duration> {
    co_await asio::post(asio::use_awaitable);
    co_return std::chrono::seconds(10 * e.trip_number);
  };
  test::Driver d(o);
  EXPECT_TRUE(d.fail());
  EXPECT_EQ(d.core.state(), S::open);
  const auto rejected = d.core.admit(d.now);
  ASSERT_FALSE(rejected.admitted());
  EXPECT_EQ(rejected.retry_after, Clock::duration(10s));
}

TEST(BreakerAsyncGenerator, OptionsDescriptionAndDescriptor) {
  CircuitBreakerOptions o;
  o.break_duration_generator = [](BreakEvent) -> asio::awaitable<Clock::duration> { co_return 1s; };
  const Shield shield = Shield{}.circuit_breaker(o);
  EXPECT_EQ(shield.describe(), "CircuitBreaker(5 consecutive, break dynamic)");
  const auto descriptor =
      testing::expect_contains_single<testing::CircuitBreakerDescriptor>(shield);
  EXPECT_TRUE(descriptor.has_break_duration_generator);
}

}  // namespace
}  // namespace kevlar
