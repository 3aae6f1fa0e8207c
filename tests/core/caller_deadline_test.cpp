// The caller's deadline (CallOptions::deadline): the context's deadline from the start of an
// execution, honoured by every strategy inside as an outer timeout's, and by a shield without
// strategies too. Past it an asynchronous execution is cancelled as by the caller's terminal
// cancellation and fails with errc::timeout; a synchronous one is cooperative. Synchronous,
// callback and coroutine executions; time is a ManualClock (the steady clock only for deadlines
// that are already past or an hour away); nothing sleeps.
#include "core/async_ops.hpp"

#include <pending_ops.hpp>

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

const error_code refused = make_error_code(boost::system::errc::connection_refused);

std::vector<asio::cancellation_type> terminal_once() {
  return {asio::cancellation_type::terminal};
}

/// The error code a failed outcome carries: its error, or the code of the kevlar::Error it holds
/// (empty for a success or another exception).
error_code failure_of(const Outcome<int>& o) {
  if (o.has_error()) return o.error();
  if (!o.has_exception()) return {};
  try {
    std::rethrow_exception(o.exception());
  } catch (const Error& e) {
    return e.error();
  } catch (...) {
  }
  return {};
}

asio::awaitable<int> answer(int v) {
  co_return v;
}

/// How an asynchronous execution completed.
struct Result {
  std::optional<error_code> ec;
  int value = 0;
  int completions = 0;
};

struct CallerDeadline : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  std::shared_ptr<testing::EventRecorder> events = std::make_shared<testing::EventRecorder>();
  std::vector<std::unique_ptr<Result>> results;
  asio::io_context ioc;
  asio::cancellation_signal cancel;  // outlives the calls bound to it
  test::PendingOps ops;  // destroyed first: a pending call's handler is abandoned with ioc alive

  /// A new Result, kept until the test ends.
  Result& next_result() {
    results.push_back(std::make_unique<Result>());
    return *results.back();
  }
  /// The callback recording an execution's completion in `r`.
  static auto recorder(Result& r) {
    return [r = &r](error_code ec, int v) {
      r->ec = ec;
      r->value = v;
      ++r->completions;
    };
  }

  /// A shield without strategies on the manual clock (it bypasses the engine without a deadline).
  [[nodiscard]] Shield bare() const { return Shield{}.with_clock(clock); }
  /// bare(), observed by `events`.
  [[nodiscard]] Shield observed() const { return bare().observed_by(events); }

  /// Starts `shield.execute_async(options, attempt)` with a callback bound to the io_context; runs
  /// nothing (the test drains).
  template <class Attempt>
  Result& start(const Shield& shield, const CallOptions& options, Attempt attempt) {
    Result& r = next_result();
    shield.execute_async(options, std::move(attempt), asio::bind_executor(ioc, recorder(r)));
    return r;
  }
  /// start() of an operation in `ops`, with the callback bound to `cancel` as well.
  Result& start_cancellable(const Shield& shield, const CallOptions& options) {
    Result& r = next_result();
    shield.execute_async(
        options, ops.attempt(),
        asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(ioc, recorder(r))));
    return r;
  }

  /// Starts, through bare(), a call with a deadline 1 s away (its callback bound to `cancel` as
  /// well) whose operation ignores cancellation: it completes only when the test calls `finish`
  /// (posted to the handler's executor). Drains.
  Result& start_deaf(std::function<void(error_code)>& finish) {
    Result& r = next_result();
    auto deaf = [&finish](auto token) {
      return asio::async_initiate<decltype(token), void(error_code, int)>(
          [&finish](auto handler) {
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            finish = [h](error_code ec) {
              const auto ex = asio::get_associated_executor(*h);
              asio::post(ex, [h, ec] {
                auto handler = std::move(*h);
                handler(ec, 0);
              });
            };
          },
          token);
    };
    bare().execute_async(
        CallOptions::within(1s, *clock), deaf,
        asio::bind_cancellation_slot(cancel.slot(), asio::bind_executor(ioc, recorder(r))));
    drain();
    return r;
  }

  /// An attempt that records the deadline of its context (Context::deadline()), then waits in
  /// `ops` until the test completes it.
  auto attempt_seeing(std::optional<Clock::time_point>& seen) {
    return [this, &seen](auto token) {
      return asio::async_initiate<decltype(token), void(error_code, int)>(
          [this, &seen](auto handler) {
            if (const Context* ctx = attempt_context(handler)) seen = ctx->deadline();
            ops.async_call(std::move(handler));
          },
          token);
    };
  }

  /// Runs the io_context until nothing is ready (restarted first: it may have run out of work).
  void drain() {
    ioc.restart();
    while (ioc.poll() != 0) {
    }
  }
  /// Moves the clock, then runs what it released.
  void advance(Clock::duration d) {
    clock->advance(d);
    drain();
  }

  /// Spawns `body` as a coroutine on the io_context (its exception fails the test), then drains.
  template <class Body>
  void spawn(Body body) {
    asio::co_spawn(ioc, std::move(body), [](const std::exception_ptr& e) {
      if (e) std::rethrow_exception(e);
    });
    drain();
  }
};

// ---- synchronous executions ---------------------------------------------------------------

TEST_F(CallerDeadline, ASynchronousFunctionSeesTheDeadlineAndItsCancellationPastItIsATimeout) {
  const Shield shield = bare().with_name("api");  // no strategy: the engine keeps the deadline
  const CallOptions options = CallOptions::within(1s, *clock);
  const Outcome<int> o = shield.execute_outcome(options, [&](Context& ctx) {
    EXPECT_EQ(ctx.deadline(), options.deadline);
    clock->advance(999ms);
    EXPECT_FALSE(ctx.cancelled()) << "the deadline is ahead";
    clock->advance(1ms);
    EXPECT_TRUE(ctx.cancelled()) << "due at the deadline itself";
    ctx.throw_if_cancelled();
    return 1;
  });
  ASSERT_TRUE(o.has_error()) << "execute_outcome gives an error outcome";
  EXPECT_EQ(o.error(), errc::timeout);

  std::optional<error_code> thrown;
  try {
    (void)shield.execute(CallOptions::within(1s, *clock), [&](Context& ctx) {
      clock->advance(1s);
      ctx.throw_if_cancelled();
      return 1;
    });
  } catch (const Error& e) {
    thrown = e.error();
  }
  ASSERT_TRUE(thrown.has_value()) << "execute returned past the deadline";
  EXPECT_EQ(*thrown, errc::timeout);

  // Successes are unchanged: before the deadline, and after it when the function does not poll.
  EXPECT_EQ(shield.execute(CallOptions::within(1s, *clock),
                           [&](Context& ctx) {
                             clock->advance(500ms);
                             EXPECT_FALSE(ctx.cancelled());
                             return 5;
                           }),
            5);
  EXPECT_EQ(shield.execute(CallOptions::within(1s, *clock),
                           [&] {
                             clock->advance(2s);
                             return 6;
                           }),
            6);
}

TEST_F(CallerDeadline, ASynchronousExecutionWhoseDeadlineHasPassedRunsNothing) {
  int calls = 0;
  const auto fn = [&] { return ++calls; };
  for (const Shield& shield : {Shield{}, bare(), bare().timeout(5s).retry(2)}) {
    for (const Clock::duration budget : {Clock::duration(-1s), Clock::duration::zero()}) {
      SCOPED_TRACE(shield.describe());
      const CallOptions options = CallOptions::within(budget, shield.clock());
      const Outcome<int> o = shield.execute_outcome(options, fn);
      ASSERT_TRUE(o.has_error());
      EXPECT_EQ(o.error(), errc::timeout);
      std::optional<error_code> thrown;
      try {
        (void)shield.execute(options, fn);
      } catch (const Error& e) {
        thrown = e.error();
      }
      ASSERT_TRUE(thrown.has_value());
      EXPECT_EQ(*thrown, errc::timeout);
    }
  }
  EXPECT_EQ(calls, 0) << "the function ran past its deadline";
}

// A retry inside, every attempt failing, backoffs of 600 ms and a deadline at 1 s: the second
// failure (at 600 ms) would wait until 1.2 s. The retry does not start that wait, and the second
// failure is the call's (not errc::timeout), at once.
TEST_F(CallerDeadline, ASynchronousRetryStartsNoBackoffPastTheDeadlineAndKeepsItsLastFailure) {
  RetryOptions retry;
  retry.max_retries = 10;
  retry.backoff = Backoff::constant(600ms);
  const Shield shield = observed().retry(retry);
  const CallOptions options = CallOptions::within(1s, *clock);
  std::atomic<int> attempts = 0;
  std::optional<Outcome<int>> outcome;
  std::jthread caller([&] {
    outcome = shield.execute_outcome(options, [&]() -> int {
      ++attempts;
      throw std::runtime_error("refused");
    });
  });
  clock->wait_for_sleepers(1);  // the first backoff, until 600 ms
  EXPECT_EQ(attempts.load(), 1);
  clock->advance(600ms);
  caller.join();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_exception()) << failure_of(*outcome).message();
  EXPECT_THROW(std::rethrow_exception(outcome->exception()), std::runtime_error);
  EXPECT_EQ(attempts.load(), 2);
  EXPECT_EQ(events->count_of<RetryScheduled>(), 1u);
}

TEST_F(CallerDeadline, ASynchronousCallQueuedInALimiterStopsWaitingAtTheDeadline) {
  const auto limiter = concurrency_limit(1, 4);
  const Shield shield = observed().use(limiter);
  Result& holder = start(shield, CallOptions{}, ops.attempt());  // holds the only permit
  drain();
  ASSERT_EQ(ops.size(), 1u);
  std::atomic<bool> ran = false;
  std::optional<Outcome<int>> outcome;
  const CallOptions options = CallOptions::within(50ms, *clock);
  std::jthread caller([&] {
    outcome = shield.execute_outcome(options, [&] {
      ran = true;
      return 1;
    });
  });
  clock->wait_for_sleepers(1);  // queued, sleeping until its deadline
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(49ms);
  EXPECT_EQ(limiter->state().queued, 1u) << "left the queue before its deadline";
  clock->advance(1ms);
  caller.join();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_error());
  EXPECT_EQ(outcome->error(), errc::timeout);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u) << "the holder's permit is untouched";
  EXPECT_EQ(events->count_of<Rejected>(), 0u) << "the deadline is no rejection";
  ops.succeed(0, 3);
  drain();
  ASSERT_TRUE(holder.ec.has_value());
  EXPECT_FALSE(*holder.ec);
  EXPECT_EQ(limiter->state().running, 0u);
}

TEST_F(CallerDeadline, ASynchronousInnerTimeoutIsClampedToTheEarlierDeadline) {
  // The caller's deadline (1 s) comes first: it is the context's, and its passing is the caller's
  // timeout, not the inner timeout's.
  const CallOptions options = CallOptions::within(1s, *clock);
  std::optional<Clock::time_point> seen;
  const Outcome<int> o = observed().timeout(5s).execute_outcome(options, [&](Context& ctx) {
    seen = ctx.deadline();
    clock->advance(1s);
    ctx.throw_if_cancelled();
    return 1;
  });
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(*seen, options.deadline);
  ASSERT_TRUE(o.has_error());
  EXPECT_EQ(o.error(), errc::timeout);
  EXPECT_EQ(events->count_of<TimeoutFired>(), 0u) << "the inner timeout claimed the deadline";

  // The inner timeout (1 s) comes first: its own deadline, and its own timeout.
  events->clear();
  const Clock::time_point begun = clock->now();
  const Outcome<int> inner =
      observed().timeout(1s).execute_outcome(CallOptions::within(5s, *clock), [&](Context& ctx) {
        seen = ctx.deadline();
        clock->advance(1s);
        ctx.throw_if_cancelled();
        return 1;
      });
  EXPECT_EQ(*seen, begun + 1s);
  ASSERT_TRUE(inner.has_error());
  EXPECT_EQ(inner.error(), errc::timeout);
  EXPECT_EQ(events->count_of<TimeoutFired>(), 1u);
}

TEST_F(CallerDeadline, ACallersStopBeforeTheDeadlineStaysACancellation) {
  std::stop_source stop;
  const Outcome<int> o = bare().execute_outcome(
      CallOptions::within(1s, *clock),
      [&](Context& ctx) {
        clock->advance(500ms);
        stop.request_stop();
        EXPECT_TRUE(ctx.cancelled());
        ctx.throw_if_cancelled();
        return 1;
      },
      stop.get_token());
  EXPECT_EQ(failure_of(o), asio::error::operation_aborted);
}

// The caller stops the call before its deadline; the function notices after it. The caller
// cancelled first: a cancellation, as a caller's stop under a timeout strategy is never a timeout.
TEST_F(CallerDeadline, ACallersStopNoticedOnlyPastTheDeadlineStaysACancellation) {
  std::stop_source stop;
  const Outcome<int> o = bare().execute_outcome(
      CallOptions::within(1s, *clock),
      [&](Context& ctx) {
        clock->advance(500ms);
        stop.request_stop();
        clock->advance(500ms);  // the deadline passes before the function polls
        ctx.throw_if_cancelled();
        return 1;
      },
      stop.get_token());
  EXPECT_EQ(failure_of(o), asio::error::operation_aborted) << failure_of(o).message();
}

// ExecutionFinished carries the final outcome: the timeout the caller receives.
TEST_F(CallerDeadline, ObserversOfASynchronousExecutionSeeTheTimeoutTheCallerGets) {
  const Outcome<int> o =
      observed().execute_outcome(CallOptions::within(1s, *clock), [&](Context& ctx) {
        clock->advance(1s);
        ctx.throw_if_cancelled();
        return 1;
      });
  ASSERT_TRUE(o.has_error());
  EXPECT_EQ(o.error(), errc::timeout);
  const std::vector<ExecutionFinished> finished = events->events_of<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_FALSE(finished[0].success);
  EXPECT_EQ(finished[0].failure.error, errc::timeout) << finished[0].failure.error.message();
}

// ---- callback executions ------------------------------------------------------------------

TEST_F(CallerDeadline, AnAsynchronousCallIsCancelledAtItsDeadlineAndFailsWithTimeout) {
  const Shield shield = bare().with_name("api");  // no strategy: the engine keeps the deadline
  Result& r = start(shield, CallOptions::within(1s, *clock), ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(clock->pending_timers(), 1u) << "the expiry is armed";
  advance(999ms);
  EXPECT_FALSE(r.ec.has_value());
  EXPECT_TRUE(ops.at(0).cancellations.empty()) << "cancelled before its deadline";
  advance(1ms);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, errc::timeout) << r.ec->message();
  EXPECT_EQ(ops.at(0).cancellations, terminal_once()) << "as the caller's terminal cancellation";
  EXPECT_EQ(clock->pending_timers(), 0u);
  advance(1h);
  EXPECT_EQ(r.completions, 1);
}

TEST_F(CallerDeadline, AnAsynchronousCallWhoseDeadlineHasPassedRunsNothingAndCompletesLater) {
  for (const Shield& shield : {Shield{}, bare(), bare().timeout(5s).retry(2)}) {
    for (const Clock::duration budget : {Clock::duration(-1s), Clock::duration::zero()}) {
      SCOPED_TRACE(shield.describe());
      Result& r = start(shield, CallOptions::within(budget, shield.clock()), ops.attempt());
      EXPECT_FALSE(r.ec.has_value()) << "completed inside the initiating call";
      drain();
      ASSERT_TRUE(r.ec.has_value());
      EXPECT_EQ(*r.ec, errc::timeout) << r.ec->message();
      EXPECT_EQ(r.completions, 1);
    }
  }
  EXPECT_EQ(ops.size(), 0u) << "an attempt started past its deadline";
  EXPECT_EQ(clock->pending_timers(), 0u);
}

TEST_F(CallerDeadline, AnAsynchronousCallCompletedBeforeItsDeadlineDisarmsIt) {
  Result& r = start(bare(), CallOptions::within(1s, *clock), ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(clock->pending_timers(), 1u);
  advance(500ms);
  ops.succeed(0, 7);
  drain();
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 7);
  EXPECT_EQ(clock->pending_timers(), 0u) << "the expiry outlived its call";
  advance(1s);  // past the deadline
  EXPECT_EQ(r.completions, 1);
  EXPECT_TRUE(ops.at(0).cancellations.empty());

  // A default shield on the steady clock: a deadline an hour away.
  const Shield empty;
  Result& steady = start(empty, CallOptions::within(1h, empty.clock()), [&](auto token) {
    return test::async_answer(ioc.get_executor(), {}, 5, std::move(token));
  });
  drain();
  ASSERT_TRUE(steady.ec.has_value());
  EXPECT_FALSE(*steady.ec);
  EXPECT_EQ(steady.value, 5);
}

TEST_F(CallerDeadline, AHandlerWithoutAnExecutorIsRefusedWithExecutorRequired) {
  for (const Shield& shield : {Shield{}, bare()}) {
    SCOPED_TRACE(shield.describe());
    std::promise<error_code> got;
    shield.execute_async(CallOptions::within(1h, shield.clock()), ops.attempt(),
                         [&got](error_code ec, int) { got.set_value(ec); });
    // The refusal runs on the system executor's thread: wait for it (an event, not a timer).
    EXPECT_EQ(got.get_future().get(), make_error_code(errc::executor_required));
  }
  EXPECT_EQ(ops.size(), 0u);
}

TEST_F(CallerDeadline, ARetryInsideReturnsItsLastRealFailureInsteadOfWaitingPastTheDeadline) {
  RetryOptions retry;
  retry.max_retries = 10;
  retry.backoff = Backoff::constant(600ms);
  Result& r = start(observed().retry(retry), CallOptions::within(1s, *clock), ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  ops.complete(0, refused);
  drain();
  EXPECT_FALSE(r.ec.has_value()) << "the first backoff ends before the deadline";
  advance(600ms);
  ASSERT_EQ(ops.size(), 2u);
  ops.complete(1, refused);  // at 600 ms: the next backoff would end at 1.2 s
  drain();
  ASSERT_TRUE(r.ec.has_value()) << "waits for the deadline";
  EXPECT_EQ(*r.ec, refused) << "the last real failure, not " << r.ec->message();
  EXPECT_EQ(ops.size(), 2u);
  EXPECT_EQ(events->count_of<RetryScheduled>(), 1u);
  EXPECT_EQ(events->count_of<TimeoutFired>(), 0u);
  EXPECT_EQ(clock->pending_timers(), 0u);
}

TEST_F(CallerDeadline, AHedgeLaunchesNoAttemptAtTheDeadline) {
  // The stagger (every second) and the 2 s deadline fall due together, in two queues: whichever
  // fires first, the third attempt never starts.
  Result& r = start(observed().hedge(3, 1s), CallOptions::within(2s, *clock), ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  advance(1s);
  ASSERT_EQ(ops.size(), 2u) << "the second attempt is due before the deadline";
  EXPECT_FALSE(r.ec.has_value());
  advance(1s);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, errc::timeout) << r.ec->message();
  EXPECT_EQ(ops.size(), 2u) << "a hedge launched at the deadline";
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  EXPECT_EQ(events->count_of<HedgeLaunched>(), 1u);
  advance(10s);
  EXPECT_EQ(ops.size(), 2u);
  EXPECT_EQ(r.completions, 1);
}

TEST_F(CallerDeadline, AnInnerTimeoutIsClampedToTheEarlierDeadline) {
  // The caller's deadline (1 s) comes first: the attempt sees it, and its expiry is the caller's
  // timeout; the inner timeout reports nothing.
  const CallOptions options = CallOptions::within(1s, *clock);
  std::optional<Clock::time_point> seen;
  Result& r = start(observed().timeout(5s), options, attempt_seeing(seen));
  drain();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(*seen, options.deadline);
  advance(999ms);
  EXPECT_FALSE(r.ec.has_value());
  advance(1ms);
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, errc::timeout) << r.ec->message();
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  EXPECT_EQ(events->count_of<TimeoutFired>(), 0u) << "the inner timeout claimed the deadline";
  const std::vector<ExecutionFinished> finished = events->events_of<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].failure.error, errc::timeout) << finished[0].failure.error.message();
  advance(5s);  // past the inner timeout's own deadline
  EXPECT_EQ(r.completions, 1);
  EXPECT_EQ(events->count_of<TimeoutFired>(), 0u);
  EXPECT_EQ(clock->pending_timers(), 0u);

  // The inner timeout (1 s) comes first: its own deadline, and its own timeout.
  events->clear();
  seen.reset();
  const Clock::time_point begun = clock->now();
  Result& inner =
      start(observed().timeout(1s), CallOptions::within(5s, *clock), attempt_seeing(seen));
  drain();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(*seen, begun + 1s);
  advance(1s);
  ASSERT_TRUE(inner.ec.has_value());
  EXPECT_EQ(*inner.ec, errc::timeout);
  EXPECT_EQ(events->count_of<TimeoutFired>(), 1u);
}

TEST_F(CallerDeadline, AnAsynchronousCallQueuedInALimiterStopsWaitingAtTheDeadline) {
  const auto limiter = concurrency_limit(1, 4);
  const Shield shield = observed().use(limiter);
  Result& holder = start(shield, CallOptions{}, ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  Result& queued = start(shield, CallOptions::within(50ms, *clock), ops.attempt());
  drain();
  EXPECT_EQ(limiter->state().queued, 1u);
  advance(49ms);
  EXPECT_FALSE(queued.ec.has_value());
  advance(1ms);
  ASSERT_TRUE(queued.ec.has_value());
  EXPECT_EQ(*queued.ec, errc::timeout) << queued.ec->message();
  EXPECT_EQ(ops.size(), 1u) << "the queued call ran";
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u);
  EXPECT_EQ(events->count_of<Rejected>(), 0u) << "the deadline is no rejection";
  ops.succeed(0, 1);
  drain();
  ASSERT_TRUE(holder.ec.has_value());
  EXPECT_FALSE(*holder.ec);
  EXPECT_EQ(limiter->state().running, 0u);
  EXPECT_EQ(queued.completions, 1);
}

// The rate limit's queue (a call waiting for its turn) stops at the caller's deadline as the
// concurrency limit's does: the call never runs, and its reservation is given back.
TEST_F(CallerDeadline, AnAsynchronousCallWaitingForARateLimitsTurnStopsAtTheDeadline) {
  RateLimitOptions o;
  o.permits = 1;
  o.window = 100ms;
  o.queue_limit = 2;
  const auto limiter = RateLimitStrategy::create(std::move(o));
  const Shield shield = observed().use(limiter);
  Result& first = start(shield, CallOptions{}, ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u) << "the burst of one admits the first call at once";
  Result& waiting = start(shield, CallOptions::within(50ms, *clock), ops.attempt());
  drain();
  advance(49ms);
  EXPECT_FALSE(waiting.ec.has_value());
  advance(1ms);
  ASSERT_TRUE(waiting.ec.has_value());
  EXPECT_EQ(*waiting.ec, errc::timeout) << waiting.ec->message();
  EXPECT_EQ(ops.size(), 1u) << "the waiting call ran";
  EXPECT_EQ(events->count_of<Rejected>(), 0u) << "the deadline is no rejection";
  // Its turn was given back: a call arriving once the first permit has come back runs at once.
  advance(50ms);
  Result& later = start(shield, CallOptions{}, ops.attempt());
  drain();
  EXPECT_EQ(ops.size(), 2u) << "the timed-out call kept its reservation";
  ops.succeed(0, 1);
  ops.succeed(1, 2);
  drain();
  ASSERT_TRUE(first.ec.has_value());
  ASSERT_TRUE(later.ec.has_value());
  EXPECT_FALSE(*later.ec);
  EXPECT_EQ(later.value, 2);
  EXPECT_EQ(waiting.completions, 1);
}

// An execution abandoned with its deadline armed (its operation's executor shut down, so the
// operation's handler is destroyed uninvoked) disarms it: the deadline passing later reaches
// nothing (under AddressSanitizer, an expiry delivered to the destroyed execution would be a
// use after free).
TEST_F(CallerDeadline, AnAbandonedExecutionLeavesNoExpiryBehind) {
  const Shield shield = bare().timeout(10s);
  Result& r = start(shield, CallOptions::within(1s, *clock), ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(clock->pending_timers(), 2u) << "the caller's deadline and the timeout's";
  ops.drop(0);
  drain();
  advance(1s);
  advance(10s);
  EXPECT_FALSE(r.ec.has_value()) << "an abandoned execution completed";
  EXPECT_EQ(r.completions, 0);
  EXPECT_EQ(clock->pending_timers(), 0u) << "an expiry outlived its execution";
}

// CallOptions::within saturates at the clock's range instead of overflowing: the most negative
// budget gives a deadline that has passed (and the call runs nothing), the largest none.
TEST_F(CallerDeadline, WithinStaysInsideTheClocksRange) {
  const CallOptions past = CallOptions::within(Clock::duration::min(), *clock);
  EXPECT_LT(past.deadline, clock->now());
  EXPECT_EQ(CallOptions::within(Clock::duration::max(), *clock).deadline,
            Clock::time_point::max());
  const Outcome<int> o = bare().execute_outcome(past, [] { return 1; });
  EXPECT_EQ(failure_of(o), errc::timeout);
}

TEST_F(CallerDeadline, ACallersCancellationBeforeTheDeadlineIsNotATimeout) {
  Result& r = start_cancellable(bare(), CallOptions::within(1s, *clock));
  drain();
  ASSERT_EQ(ops.size(), 1u);
  advance(500ms);
  cancel.emit(asio::cancellation_type::terminal);
  drain();
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted) << r.ec->message();
  EXPECT_EQ(ops.at(0).cancellations, terminal_once());
  advance(1s);
  EXPECT_EQ(r.completions, 1);
  EXPECT_EQ(clock->pending_timers(), 0u);
}

// The caller cancels before the deadline; the operation's completion runs after it (as under a
// timeout strategy, whose test "CallerCancellationWinsAndIsNotATimeout" is this one's model).
TEST_F(CallerDeadline, ACallersCancellationDeliveredPastTheDeadlineIsNotATimeout) {
  Result& r = start_cancellable(bare(), CallOptions::within(1s, *clock));
  drain();
  advance(500ms);
  cancel.emit(asio::cancellation_type::terminal);
  clock->advance(500ms);  // the deadline passes too before the completion runs
  drain();
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted) << r.ec->message();
  EXPECT_EQ(r.completions, 1);
}

// The caller cancels first; the deadline's expiry is delivered before the operation completes.
TEST_F(CallerDeadline, ACallersCancellationBeforeAnExpiryThatArrivesFirstIsNotATimeout) {
  std::function<void(error_code)> finish;
  Result& r = start_deaf(finish);
  ASSERT_TRUE(finish);
  advance(500ms);
  cancel.emit(asio::cancellation_type::terminal);
  advance(500ms);  // the expiry fires and is delivered; the operation has not completed
  EXPECT_FALSE(r.ec.has_value());
  EXPECT_EQ(clock->pending_timers(), 0u) << "the expiry fired";
  finish(asio::error::operation_aborted);
  drain();
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, asio::error::operation_aborted) << r.ec->message();
  EXPECT_EQ(r.completions, 1);
}

// The mirror image: the expiry comes first, the caller's cancellation after it.
TEST_F(CallerDeadline, AnExpiryBeforeTheCallersCancellationIsATimeout) {
  std::function<void(error_code)> finish;
  Result& r = start_deaf(finish);
  ASSERT_TRUE(finish);
  advance(1s);
  cancel.emit(asio::cancellation_type::terminal);
  finish(asio::error::operation_aborted);
  drain();
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_EQ(*r.ec, errc::timeout) << r.ec->message();
  EXPECT_EQ(r.completions, 1);
}

// ---- coroutine executions -----------------------------------------------------------------

TEST_F(CallerDeadline, ACoroutineCallIsCancelledAtItsDeadlineAndThrowsTimeout) {
  const Shield shield = bare();  // no strategy
  const CallOptions options = CallOptions::within(1s, *clock);
  std::optional<int> early;
  std::optional<Clock::time_point> seen;
  std::optional<error_code> thrown;
  spawn([&]() -> asio::awaitable<void> {
    early = co_await shield.execute_async(options, [&]() -> asio::awaitable<int> {
      co_return co_await ops.async_call(asio::use_awaitable);
    });
    try {
      const int v =
          co_await shield.execute_async(options, [&](Context& ctx) -> asio::awaitable<int> {
            seen = ctx.deadline();
            co_return co_await ops.async_call(asio::use_awaitable);
          });
      ADD_FAILURE() << "completed with " << v;
    } catch (const Error& e) {
      thrown = e.error();
    }
  });
  ASSERT_EQ(ops.size(), 1u);
  ops.succeed(0, 3);  // before the deadline: the value
  drain();
  EXPECT_EQ(early, 3);
  ASSERT_EQ(ops.size(), 2u);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(*seen, options.deadline);
  advance(999ms);
  EXPECT_FALSE(thrown.has_value());
  advance(1ms);
  ASSERT_TRUE(thrown.has_value());
  EXPECT_EQ(*thrown, errc::timeout) << thrown->message();
  EXPECT_EQ(ops.at(1).cancellations, terminal_once());
  EXPECT_EQ(clock->pending_timers(), 0u);
}

TEST_F(CallerDeadline, ACoroutineCallWhoseDeadlineHasPassedNeverCallsTheFactory) {
  int factory_calls = 0;
  std::vector<error_code> thrown;
  for (const Shield& shield : {Shield{}, bare()}) {
    const CallOptions options = CallOptions::within(-1s, shield.clock());
    spawn([&, shield, options]() -> asio::awaitable<void> {
      try {
        const int v = co_await shield.execute_async(options, [&] {
          ++factory_calls;
          return answer(1);
        });
        ADD_FAILURE() << "completed with " << v;
      } catch (const Error& e) {
        thrown.push_back(e.error());
      }
    });
  }
  ASSERT_EQ(thrown.size(), 2u);
  EXPECT_EQ(thrown[0], errc::timeout) << thrown[0].message();
  EXPECT_EQ(thrown[1], errc::timeout) << thrown[1].message();
  EXPECT_EQ(factory_calls, 0);
}

// ---- without a deadline -------------------------------------------------------------------

TEST_F(CallerDeadline, WithoutADeadlineNothingChanges) {
  const CallOptions none{};
  EXPECT_EQ(none.deadline, Clock::time_point::max());
  EXPECT_EQ(CallOptions::within(2s, *clock).deadline, clock->now() + 2s);
  EXPECT_EQ(CallOptions::within(-1s, *clock).deadline, clock->now() - 1s);
  EXPECT_EQ(CallOptions::within(Clock::duration::max(), *clock).deadline, Clock::time_point::max())
      << "a budget past the clock's range sets none";

  const Shield shield = bare();
  EXPECT_EQ(shield.execute(none,
                           [&](Context& ctx) {
                             EXPECT_EQ(ctx.deadline(), Clock::time_point::max());
                             clock->advance(24h);
                             EXPECT_FALSE(ctx.cancelled());
                             return 4;
                           }),
            4);

  Result& r = start(shield, none, ops.attempt());
  drain();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(clock->pending_timers(), 0u) << "an expiry was armed without a deadline";
  advance(24h);
  EXPECT_FALSE(r.ec.has_value());
  EXPECT_TRUE(ops.at(0).cancellations.empty());
  ops.succeed(0, 8);
  drain();
  ASSERT_TRUE(r.ec.has_value());
  EXPECT_FALSE(*r.ec);
  EXPECT_EQ(r.value, 8);
}

}  // namespace
}  // namespace kevlar
