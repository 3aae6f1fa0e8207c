// The CircuitBreaker strategy inside Shields: synchronous and asynchronous executions, counting
// rules, rejections, manual control, describe() and build-time validation. Time is a ManualClock.
#include "breaker_test_support.hpp"

#include <alloc_counter.hpp>
#include <pending_ops.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <functional>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;
using S = CircuitState;

using test::Boom;
struct Other : std::runtime_error {
  Other() : std::runtime_error("other") {}
};

std::shared_ptr<CircuitBreaker> breaker(int consecutive, Clock::duration brk = 30s) {
  CircuitBreakerOptions o;
  o.consecutive_failures = consecutive;
  o.break_duration = brk;
  return CircuitBreaker::create(o);
}

/// Runs `fn` through `shield` and returns what it threw (or nullptr).
template <class F>
std::exception_ptr run(const Shield& shield, F fn) {
  try {
    shield.execute(fn);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void fail_with_boom(const Shield& shield) {
  EXPECT_THROW(shield.execute([]() -> int { throw Boom(); }), Boom);
}

/// A consecutive(1) breaker with a 5 s break on a manual clock, opened by one failure and with
/// its break just over: the next call is the probe.
struct CircuitBreakerProbe : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<CircuitBreaker> b = breaker(1, 5s);
  Shield shield = Shield{}.use(b).with_clock(clock);
  CircuitBreakerProbe() { reopen(); }

  /// Opens the circuit with one failure and lets its break pass: the next call is the probe.
  void reopen() {
    fail_with_boom(shield);
    clock->advance(5s);
  }
  /// The probe decided nothing: the circuit is still half-open with its slot free, and the next
  /// call, a success, is the probe that closes it.
  void expect_probe_decided_nothing() {
    EXPECT_EQ(b->state(), S::half_open) << "a probe cancelled from outside decides nothing";
    EXPECT_EQ(b->core().metrics(clock->now()).probes_in_flight, 0);
    EXPECT_EQ(shield.execute([] { return 3; }), 3) << "the slot was freed";
    EXPECT_EQ(b->state(), S::closed);
  }
};

/// The kevlar::Error a call through `shield` throws (fails the test if it throws anything else).
std::optional<Error> rejection(const Shield& shield, int* calls = nullptr) {
  try {
    shield.execute([&] {
      if (calls) ++*calls;
      return 1;
    });
  } catch (const Error& e) {
    return e;
  } catch (...) {
    ADD_FAILURE() << "unexpected exception";
  }
  return std::nullopt;
}

TEST(CircuitBreakerStrategy, DescribeStrings) {
  using namespace std::chrono_literals;
  EXPECT_EQ(Shield{}.circuit_breaker(5, 30s).describe(),
            "CircuitBreaker(5 consecutive, break 30s)");
  EXPECT_EQ(CircuitBreaker::create()->describe(), "CircuitBreaker(5 consecutive, break 15s)");
  CircuitBreakerOptions r;
  r.failure_ratio = 0.5;
  r.minimum_throughput = 20;
  EXPECT_EQ(Shield{}.circuit_breaker(r).describe(),
            "CircuitBreaker(50% over 30s, min 20, break 15s)");
  r.failure_ratio = 0.125;
  r.sampling_window = 1500ms;
  r.break_duration = 250ms;
  EXPECT_EQ(Shield{}.circuit_breaker(r).describe(),
            "CircuitBreaker(12.5% over 1.5s, min 20, break 250ms)");
  CircuitBreakerOptions g;
  g.break_duration_generator = [](const BreakEvent&) { return Clock::duration(1s); };
  EXPECT_EQ(CircuitBreaker::create(g)->describe(), "CircuitBreaker(5 consecutive, break dynamic)");
  EXPECT_EQ(Shield{}.circuit_breaker(3, 90s).describe(),
            "CircuitBreaker(3 consecutive, break 1.5m)");
  EXPECT_EQ(Shield{}.circuit_breaker(3, 2h).describe(), "CircuitBreaker(3 consecutive, break 2h)");
  CircuitBreakerOptions p;
  p.half_open_probes = 3;
  p.success_threshold = 2;
  EXPECT_EQ(CircuitBreaker::create(p)->describe(),
            "CircuitBreaker(5 consecutive, break 15s, probes 3, close after 2)");
  EXPECT_EQ(Shield{}.circuit_breaker(5, 30s).with_name("github").describe(),
            "github: CircuitBreaker(5 consecutive, break 30s)");
}

TEST(CircuitBreakerStrategy, ASuccessThresholdIsDescribedEvenWithASingleProbe) {
  CircuitBreakerOptions o;
  o.success_threshold = 3;
  EXPECT_EQ(CircuitBreaker::create(o)->describe(),
            "CircuitBreaker(5 consecutive, break 15s, probes 1, close after 3)");
}

TEST(CircuitBreakerStrategy, InvalidOptionsAreRefusedWhenTheShieldIsBuilt) {
  EXPECT_THROW((void)Shield{}.circuit_breaker(0, 30s), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.circuit_breaker(3, 0s), std::invalid_argument);
  CircuitBreakerOptions both;
  both.consecutive_failures = 3;
  both.failure_ratio = 0.5;
  try {
    (void)Shield{}.circuit_breaker(both);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not both"), std::string::npos);
  }
  CircuitBreakerOptions bad_ratio;
  bad_ratio.failure_ratio = 1.5;
  EXPECT_THROW((void)CircuitBreaker::create(bad_ratio), std::invalid_argument);
}

TEST(CircuitBreakerStrategy, TraitsAreReactiveAndStateful) {
  const auto b = CircuitBreaker::create();
  EXPECT_EQ(b->traits().role, StrategyRole::reactive);
  EXPECT_TRUE(b->traits().stateful);
  EXPECT_GT(b->traits().frame_size, 0u);
  EXPECT_THROW((void)Shield{}.use(b).use(b), std::invalid_argument) << "one instance per chain";
}

TEST(CircuitBreakerStrategy, RejectionsThrowErrorWithRetryAfterAndDoNotRunTheCall) {
  const auto clock = ManualClock::create();
  const auto b = breaker(1, 30s);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::open);
  int calls = 0;
  auto e = rejection(shield, &calls);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), errc::circuit_open);
  EXPECT_EQ(e->retry_after(), 30s);
  clock->advance(10s);
  e = rejection(shield, &calls);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->retry_after(), 20s);
  EXPECT_EQ(calls, 0);
  const Outcome<int> o = shield.execute_outcome([] { return 1; });
  EXPECT_EQ(o.error(), make_error_code(errc::circuit_open));
  EXPECT_EQ(o.retry_after(), 20s);
  clock->advance(20s);
  EXPECT_EQ(shield.execute([] { return 7; }), 7) << "admitted exactly when the break ends";
  EXPECT_EQ(b->state(), S::closed);
}

TEST(CircuitBreakerStrategy, ConsecutiveCountingThroughTheShield) {
  const auto clock = ManualClock::create();
  const auto b = breaker(3);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  for (int i = 0; i < 3; ++i) {
    fail_with_boom(shield);
    fail_with_boom(shield);
    EXPECT_EQ(shield.execute([] { return 1; }), 1);
  }
  EXPECT_EQ(b->state(), S::closed);
  fail_with_boom(shield);
  fail_with_boom(shield);
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::open);
}

TEST(CircuitBreakerStrategy, ErrorCodesFromAsioStyleFailuresCount) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  for (int i = 0; i < 2; ++i) {
    EXPECT_THROW(shield.execute([]() -> int {
      throw boost::system::system_error(asio::error::connection_refused);
    }),
                 boost::system::system_error);
  }
  EXPECT_EQ(b->state(), S::open);
}

TEST(CircuitBreakerStrategy, UnhandledExceptionsCountAsSuccesses) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2);
  const Shield shield = Shield{}.when(Clause().exception<Boom>()).use(b).with_clock(clock);
  for (int i = 0; i < 5; ++i) {
    EXPECT_THROW(shield.execute([]() -> int { throw Other(); }), Other);
  }
  EXPECT_EQ(b->state(), S::closed);
  fail_with_boom(shield);
  EXPECT_THROW(shield.execute([]() -> int { throw Other(); }), Other);  // resets the count
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::closed);
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::open);
}

TEST(CircuitBreakerStrategy, ResultClausesCanTripTheCircuit) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2);
  const Shield shield = Shield{}.when(Clause().result_equal(503)).use(b).with_clock(clock);
  EXPECT_EQ(shield.execute([] { return 503; }), 503);
  EXPECT_EQ(shield.execute([] { return 503; }), 503);
  EXPECT_EQ(b->state(), S::open);
  EXPECT_THROW(shield.execute([] { return 200; }), Error);
}

TEST(CircuitBreakerStrategy, CallerCancelledOutcomesMoveNothing) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2, 5s);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  const auto cancelled_by_caller = [&] {
    std::stop_source stop;
    EXPECT_THROW(shield.execute(
                     [&](Context& ctx) -> int {
                       stop.request_stop();
                       if (ctx.cancelled()) throw Error(boost::asio::error::operation_aborted);
                       return 1;
                     },
                     stop.get_token()),
                 Error);
  };
  // F, caller-cancelled, F: the cancellation did not reset the count, so the circuit opens.
  fail_with_boom(shield);
  cancelled_by_caller();
  EXPECT_EQ(b->state(), S::closed);
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::open);
  // F, a cancellation the caller did not ask for (not handled: a success), F: stays closed.
  b->reset();
  fail_with_boom(shield);
  EXPECT_THROW(shield.execute([]() -> int { throw Error(asio::error::operation_aborted); }), Error);
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::closed);
}

// A deadline set outside the breaker, the caller's or an outer timeout's, that ends the call
// cancels it from outside: the cancellation counts as nothing, not as a success (which would
// reset the consecutive count) and not as a failure.
TEST(CircuitBreakerStrategy, ADeadlineFromOutsideCountsNothingSync) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2, 5s);
  const auto give_up_at_the_deadline = [&](Context& ctx) -> int {
    clock->advance(1s);
    ctx.throw_if_cancelled();
    return 1;
  };
  const Shield breaker_only = Shield{}.use(b).with_clock(clock);
  const Shield timeout_outside = Shield{}.timeout(1s).use(b).with_clock(clock);
  // F, ended by a deadline from outside (the caller's, then an outer timeout's), F: the circuit
  // opens.
  const std::function<Outcome<int>()> ended_by_a_deadline[] = {
      [&] {
        return breaker_only.execute_outcome(CallOptions::within(1s, *clock),
                                            give_up_at_the_deadline);
      },
      [&] { return timeout_outside.execute_outcome(give_up_at_the_deadline); }};
  for (const auto& ended : ended_by_a_deadline) {
    b->reset();
    fail_with_boom(breaker_only);
    EXPECT_EQ(ended().error(), errc::timeout);
    EXPECT_EQ(b->state(), S::closed);
    fail_with_boom(breaker_only);
    EXPECT_EQ(b->state(), S::open);
  }
}

TEST(CircuitBreakerStrategy, ADeadlineFromOutsideCountsNothingAsync) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2, 5s);
  asio::io_context ioc;
  test::PendingOps ops;
  std::vector<error_code> results;
  const auto handler = [&] {
    return asio::bind_executor(ioc, [&](error_code ec, int) { results.push_back(ec); });
  };
  const auto drain = [&] {
    ioc.restart();
    ioc.poll();
  };
  const Shield breaker_only = Shield{}.use(b).with_clock(clock);
  const Shield timeout_outside = Shield{}.timeout(1s).use(b).with_clock(clock);
  const auto fail_once = [&] {
    breaker_only.execute_async(ops.attempt(), handler());
    drain();
    ops.complete(ops.size() - 1, asio::error::connection_reset);
    drain();
  };
  for (const bool callers : {true, false}) {
    SCOPED_TRACE(callers ? "the caller's deadline" : "an outer timeout");
    // F, ended by the deadline, F: the circuit opens.
    b->reset();
    fail_once();
    if (callers) {
      breaker_only.execute_async(CallOptions::within(1s, *clock), ops.attempt(), handler());
    } else {
      timeout_outside.execute_async(ops.attempt(), handler());
    }
    drain();
    clock->advance(1s);
    drain();
    ASSERT_FALSE(results.empty());
    EXPECT_EQ(results.back(), errc::timeout) << results.back().message();
    EXPECT_EQ(b->state(), S::closed);
    fail_once();
    EXPECT_EQ(b->state(), S::open);
  }
}

TEST(CircuitBreakerStrategy, AClauseThatHandlesCancellationCountsIt) {
  const auto clock = ManualClock::create();
  const auto b = breaker(1, 5s);
  const Shield shield = Shield{}.when(Clause().exception<Error>()).use(b).with_clock(clock);
  std::stop_source stop;
  EXPECT_THROW(shield.execute(
                   [&](Context& ctx) -> int {
                     stop.request_stop();
                     if (ctx.cancelled()) throw Error(boost::asio::error::operation_aborted);
                     return 1;
                   },
                   stop.get_token()),
               Error);
  EXPECT_EQ(b->state(), S::open) << "handled outcomes are failures, cancelled or not";
}

TEST_F(CircuitBreakerProbe, CancelledProbeFreesTheSlotSync) {
  std::stop_source stop;
  EXPECT_THROW(shield.execute(
                   [&](Context& ctx) -> int {
                     stop.request_stop();
                     if (ctx.cancelled()) throw Error(boost::asio::error::operation_aborted);
                     return 1;
                   },
                   stop.get_token()),
               Error);
  EXPECT_EQ(b->state(), S::half_open);
  EXPECT_EQ(b->core().metrics(clock->now()).probes_in_flight, 0);
  EXPECT_EQ(shield.execute([] { return 3; }), 3) << "the next call is the probe";
  EXPECT_EQ(b->state(), S::closed);
}

// A deadline from outside the breaker (the caller's, an outer timeout's) ends the probe: it
// decides nothing, in synchronous and asynchronous executions alike.
TEST_F(CircuitBreakerProbe, AProbeEndedByADeadlineFromOutsideDecidesNothingSync) {
  const Shield timeout_outside = Shield{}.timeout(1s).use(b).with_clock(clock);
  const auto give_up_at_the_deadline = [&](Context& ctx) -> int {
    clock->advance(1s);
    ctx.throw_if_cancelled();
    return 1;
  };
  for (const bool callers : {true, false}) {
    SCOPED_TRACE(callers ? "the caller's deadline" : "an outer timeout");
    const Outcome<int> o =
        callers ? shield.execute_outcome(CallOptions::within(1s, *clock), give_up_at_the_deadline)
                : timeout_outside.execute_outcome(give_up_at_the_deadline);
    EXPECT_EQ(o.error(), errc::timeout);
    expect_probe_decided_nothing();
    reopen();
  }
}

TEST_F(CircuitBreakerProbe, AProbeThatGivesUpBeforeAnOuterDeadlineIsASuccess) {
  // Its own cancellation, nobody outside's: not handled by the clause, so a success.
  const Shield timeout_outside = Shield{}.timeout(1s).use(b).with_clock(clock);
  EXPECT_THROW(timeout_outside.execute([&]() -> int {
    clock->advance(999ms);
    throw Error(asio::error::operation_aborted);
  }),
               Error);
  EXPECT_EQ(b->state(), S::closed);
}

TEST_F(CircuitBreakerProbe, AProbeEndedByADeadlineFromOutsideDecidesNothingAsync) {
  const Shield timeout_outside = Shield{}.timeout(1s).use(b).with_clock(clock);
  for (const bool callers : {true, false}) {
    SCOPED_TRACE(callers ? "the caller's deadline" : "an outer timeout");
    asio::io_context ioc;
    test::PendingOps ops;
    std::optional<error_code> result;
    auto handler = asio::bind_executor(ioc, [&](error_code ec, int) { result = ec; });
    if (callers) {
      shield.execute_async(CallOptions::within(1s, *clock), ops.attempt(), handler);
    } else {
      timeout_outside.execute_async(ops.attempt(), handler);
    }
    ioc.poll();
    ASSERT_EQ(ops.size(), 1u);
    clock->advance(1s);
    ioc.restart();
    ioc.poll();
    ASSERT_TRUE(result);
    EXPECT_EQ(*result, errc::timeout) << result->message();
    expect_probe_decided_nothing();
    reopen();
  }
}

TEST(CircuitBreakerStrategy, IsolateAndResetThroughTheHandle) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  b->isolate();
  int calls = 0;
  auto e = rejection(shield, &calls);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), errc::isolated);
  EXPECT_FALSE(e->retry_after());
  clock->advance(1h);
  EXPECT_TRUE(rejection(shield, &calls));
  EXPECT_EQ(calls, 0);
  b->reset();
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  fail_with_boom(shield);
  b->reset();
  fail_with_boom(shield);
  EXPECT_EQ(b->state(), S::closed) << "reset cleared the earlier failure";
}

TEST(CircuitBreakerStrategy, ShieldsSharingTheInstanceShareTheCircuit) {
  const auto clock = ManualClock::create();
  const auto b = breaker(1);
  const Shield a = Shield{}.use(b).with_clock(clock);
  const Shield other = Shield{}.use(std::make_shared<CircuitBreaker>()).use(b).with_clock(clock);
  fail_with_boom(a);
  auto e = rejection(other);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), errc::circuit_open);
}

TEST(CircuitBreakerStrategy, ObserverExceptionReplacesTheTriggeringOutcome) {
  const auto clock = ManualClock::create();
  const auto oops = std::make_exception_ptr(std::logic_error("observer"));
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.on_state_changed = [&](const CircuitStateChange&) { std::rethrow_exception(oops); };
  const auto b = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  const Outcome<int> out = shield.execute_outcome([]() -> int { throw Boom(); });
  ASSERT_TRUE(out.has_exception());
  EXPECT_EQ(out.exception(), oops);
  EXPECT_EQ(b->state(), S::open) << "the new state stands";
}

TEST(CircuitBreakerStrategy, GeneratorExceptionReachesTheCaller) {
  const auto clock = ManualClock::create();
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.break_duration_generator = [](const BreakEvent& e) -> Clock::duration {
    EXPECT_NE(e.context, nullptr);
    EXPECT_TRUE(e.exception);
    throw std::out_of_range("generator");
  };
  const auto b = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  EXPECT_THROW(shield.execute([]() -> int { throw Boom(); }), std::out_of_range);
  EXPECT_EQ(b->state(), S::closed);
}

TEST(CircuitBreakerStrategy, TransitionStreamThroughTheShield) {
  const auto clock = ManualClock::create();
  test::Transitions log;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.break_duration = 5s;
  o.on_state_changed = log.observer();
  const auto b = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  std::exception_ptr thrown = run(shield, []() -> int { throw Boom(); });
  clock->advance(5s);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(log.pairs(),
            (std::vector<std::pair<S, S>>{
                {S::closed, S::open}, {S::open, S::half_open}, {S::half_open, S::closed}}));
  EXPECT_EQ(log.changes().front().last_exception, thrown) << "the very exception object";
}

TEST(CircuitBreakerStrategy, ClosedSuccessAllocatesNothing) {
  const auto clock = ManualClock::create();
  CircuitBreakerOptions r;
  r.failure_ratio = 0.1;
  r.minimum_throughput = 100;
  r.sampling_window = 30s;
  r.break_duration = 5s;
  for (const Shield& shield : {Shield{}.circuit_breaker(r).with_clock(clock),
                               Shield{}.circuit_breaker(5, 30s).with_clock(clock)}) {
    int x = 0;
    for (int i = 0; i < 10; ++i) x = shield.execute([x] { return x + 1; });  // warm up
    testing::AllocScope scope;
    for (int i = 0; i < 1000; ++i) {
      x = shield.execute([x] { return x + 1; });
      if (i % 100 == 0) clock->advance(1s);  // bucket rotations included
    }
    EXPECT_EQ(scope.count(), 0u) << shield.describe();
    EXPECT_EQ(x, 1010);
  }
}

// ---- asynchronous executions -------------------------------------------------------------------

TEST(CircuitBreakerStrategy, AsyncRejectionCarriesTheErrorCode) {
  const auto clock = ManualClock::create();
  const auto b = breaker(1, 30s);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  asio::io_context ioc;
  test::PendingOps ops;
  std::vector<error_code> results;
  auto start = [&] {
    shield.execute_async(
        ops.attempt(),
        asio::bind_executor(ioc, [&](error_code ec, int) { results.push_back(ec); }));
  };
  start();
  ops.complete(0, asio::error::connection_reset);
  ioc.run();
  ioc.restart();
  EXPECT_EQ(b->state(), S::open);
  start();
  EXPECT_TRUE(results.size() == 1) << "a rejection never completes inside the initiating call";
  ioc.run();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1], make_error_code(errc::circuit_open));
  EXPECT_EQ(ops.size(), 1u);
}

TEST_F(CircuitBreakerProbe, AsyncSixteenCallsAfterTheBreakAdmitExactlyOneProbe) {
  asio::io_context ioc;
  test::PendingOps ops;
  int rejected = 0;
  int succeeded = 0;
  for (int i = 0; i < 16; ++i) {
    shield.execute_async(ops.attempt(),
                         asio::bind_executor(ioc, [&](error_code ec, int) {
                           if (ec == make_error_code(errc::circuit_open)) ++rejected;
                           if (!ec) ++succeeded;
                         }));
  }
  ioc.poll();
  EXPECT_EQ(ops.size(), 1u) << "exactly one probe";
  EXPECT_EQ(rejected, 15);
  EXPECT_EQ(b->state(), S::half_open);
  ops.succeed(0, 1);
  ioc.restart();
  ioc.run();
  EXPECT_EQ(succeeded, 1);
  EXPECT_EQ(b->state(), S::closed);
}

TEST_F(CircuitBreakerProbe, AsyncCancelledProbeFreesTheSlot) {
  asio::io_context ioc;
  test::PendingOps ops;
  asio::cancellation_signal cancel;
  std::optional<error_code> probe_result;
  shield.execute_async(
      ops.attempt(),
      asio::bind_cancellation_slot(
          cancel.slot(), asio::bind_executor(ioc, [&](error_code ec, int) { probe_result = ec; })));
  ioc.poll();
  ASSERT_EQ(ops.size(), 1u);
  cancel.emit(asio::cancellation_type::terminal);
  ioc.restart();
  ioc.run();
  ASSERT_TRUE(probe_result);
  EXPECT_EQ(*probe_result, asio::error::operation_aborted);
  EXPECT_EQ(b->state(), S::half_open) << "a cancelled probe decides nothing";
  EXPECT_EQ(b->core().metrics(clock->now()).probes_in_flight, 0);
  EXPECT_EQ(shield.execute([] { return 1; }), 1) << "the slot was freed";
  EXPECT_EQ(b->state(), S::closed);
}

TEST_F(CircuitBreakerProbe, AsyncAbandonedProbeReleasesTheSlot) {
  {
    asio::io_context ioc;
    test::PendingOps ops;
    shield.execute_async(ops.attempt(),
                         asio::bind_executor(ioc, [](error_code, int) { ADD_FAILURE(); }));
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(b->core().metrics(clock->now()).probes_in_flight, 1);
    ops.drop(0);  // the operation's handler is destroyed uninvoked
  }
  EXPECT_EQ(b->state(), S::half_open);
  EXPECT_EQ(b->core().metrics(clock->now()).probes_in_flight, 0);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(b->state(), S::closed);
}

TEST(CircuitBreakerStrategy, AsyncCoroutinePathCountsAndRejects) {
  const auto clock = ManualClock::create();
  const auto b = breaker(2, 5s);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  asio::io_context ioc;
  std::vector<std::string> log;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 3; ++i) {
          try {
            co_await shield.execute_async([]() -> asio::awaitable<int> {
              throw Boom();
              co_return 1;
            });
          } catch (const Boom&) {
            log.push_back("boom");
          } catch (const Error& e) {
            log.push_back(e.code() == errc::circuit_open ? "open" : "other");
          }
        }
        clock->advance(5s);
        const int v = co_await shield.execute_async([]() -> asio::awaitable<int> { co_return 9; });
        log.push_back(std::to_string(v));
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });
  ioc.run();
  EXPECT_EQ(log, (std::vector<std::string>{"boom", "boom", "open", "9"}));
  EXPECT_EQ(b->state(), S::closed);
}

}  // namespace
}  // namespace kevlar
