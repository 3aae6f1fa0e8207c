#include "core/async_ops.hpp"
#include "core/test_strategies.hpp"

#include <alloc_counter.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/timeout.hpp>

#include <gtest/gtest.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
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

/// An operation that never completes by itself: a steady timer an hour away (real time).
struct Hang {
  asio::steady_timer* timer;
  template <class Token>
  auto operator()(Token&& token) const {
    timer->expires_after(std::chrono::hours(1));
    return timer->async_wait(std::forward<Token>(token));
  }
};

struct Fixture : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  asio::io_context ioc;
  asio::steady_timer hang_timer{ioc};
  std::optional<error_code> hang_result;

  /// Starts a call through `shield` that never completes by itself, advances the manual clock by
  /// `d` and runs the loop until the call completes (a few polls at most); returns how it did.
  std::optional<error_code> hang_then_advance(const Shield& shield, Clock::duration d) {
    shield.execute_async(Hang{&hang_timer},
                         asio::bind_executor(ioc, [this](error_code ec) { hang_result = ec; }));
    ioc.poll();
    clock->advance(d);
    for (int n = 0; n < 4 && !hang_result; ++n) ioc.poll();
    return hang_result;
  }
};

using Timeout = Fixture;

TEST_F(Timeout, ExpiryAbortsTheOperationAndReportsTimeout) {
  asio::steady_timer timer(ioc);
  int timeouts = 0;
  TimeoutOptions o;
  o.timeout = 2s;
  o.on_timeout = [&](const TimeoutEvent& e) {
    ++timeouts;
    EXPECT_EQ(e.timeout, 2s);
  };
  const Shield shield = Shield{}.timeout(o).with_clock(clock);
  std::optional<error_code> got;
  shield.execute_async(Hang{&timer}, asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  ioc.poll();
  clock->advance(1999ms);
  ioc.poll();
  EXPECT_FALSE(got.has_value());
  clock->advance(1ms);
  ioc.poll();
  ioc.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_EQ(timeouts, 1);
  EXPECT_EQ(timer.cancel(), 0U);  // the timer wait really was aborted, not left pending
}

// An operation may complete inside its cancellation handler: the expiry then continues the
// execution before cancel returns, and the timeout disarms through its deadline queue. The expiry
// must not hold the queue's lock while it cancels (it did: a self-deadlock).
TEST_F(Timeout, AnOperationCompletingInsideItsCancellationHandlerTimesOut) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  std::optional<error_code> got;
  shield.execute_async(test::CompletesOnCancel{},
                       asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  ioc.poll();
  clock->advance(1s);
  ioc.poll();
  ioc.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
}

TEST_F(Timeout, ExpiryAbortsAPendingSocketRead) {
  asio::local::stream_protocol::socket a(ioc), b(ioc);
  asio::local::connect_pair(a, b);
  std::array<char, 16> buf{};
  const Shield shield = Shield{}.timeout(5s).with_clock(clock);
  std::optional<error_code> got;
  shield.execute_async(
      [&](auto token) { return a.async_read_some(asio::buffer(buf), std::move(token)); },
      asio::bind_executor(ioc, [&](error_code ec, std::size_t n) {
        got = ec;
        EXPECT_EQ(n, 0U);
      }));
  ioc.poll();
  clock->advance(5s);
  for (int i = 0; i < 3 && !got; ++i) ioc.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
  // The socket is still usable: the read was cancelled, not abandoned.
  std::optional<std::size_t> read;
  a.async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t n) {
    EXPECT_FALSE(ec);
    read = n;
  });
  asio::write(b, asio::buffer("hi", 2));
  ioc.restart();
  while (!read) ioc.run_one();
  EXPECT_EQ(*read, 2U);
}

TEST_F(Timeout, CompletingInTimePassesTheValueAndAStaleDeadlineNeverFiresLater) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  int value = 0;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 7, std::move(token)); },
      asio::bind_executor(ioc, [&](error_code ec, int v) {
        EXPECT_FALSE(ec);
        value = v;
      }));
  ioc.poll();
  EXPECT_EQ(value, 7);
  // A second call that starts after the first finished: the first one's deadline (at +1s) must
  // not cancel it.
  clock->advance(500ms);
  asio::steady_timer timer(ioc);
  std::optional<error_code> got;
  shield.execute_async(Hang{&timer}, asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  ioc.restart();  // nothing of the first call kept the loop running: it stopped
  ioc.poll();
  clock->advance(600ms);  // past the first call's deadline, before the second's
  ioc.poll();
  EXPECT_FALSE(got.has_value());
  clock->advance(400ms);
  for (int i = 0; i < 3 && !got; ++i) ioc.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
}

TEST_F(Timeout, CallerCancellationWinsAndIsNotATimeout) {
  asio::steady_timer timer(ioc);
  int timeouts = 0;
  TimeoutOptions o;
  o.timeout = 1s;
  o.on_timeout = [&](const TimeoutEvent&) { ++timeouts; };
  const Shield shield = Shield{}.timeout(o).with_clock(clock);
  asio::cancellation_signal signal;
  std::optional<error_code> got;
  shield.execute_async(
      Hang{&timer}, asio::bind_cancellation_slot(
                        signal.slot(), asio::bind_executor(ioc, [&](error_code ec) { got = ec; })));
  ioc.poll();
  signal.emit(asio::cancellation_type::terminal);
  clock->advance(2s);  // the deadline passes too before the completion runs
  for (int i = 0; i < 3 && !got; ++i) ioc.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, asio::error::operation_aborted);
  EXPECT_EQ(timeouts, 0);
}

TEST_F(Timeout, InsideARepeaterEachAttemptGetsAFreshBudget) {
  // Repeat(2) -> Timeout(1s): every attempt hangs and times out after its own second.
  const Shield shield = Shield{}
                            .when(Clause{}.error(errc::timeout))
                            .use(std::make_shared<test::Repeat>(2))
                            .timeout(1s)
                            .with_clock(clock);
  asio::steady_timer timer(ioc);
  int attempts = 0;
  std::optional<error_code> got;
  shield.execute_async(
      [&](auto token) {
        ++attempts;
        return Hang{&timer}(std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  for (int attempt = 1; attempt <= 3; ++attempt) {
    ioc.poll();
    EXPECT_EQ(attempts, attempt);
    clock->advance(999ms);
    ioc.poll();
    EXPECT_EQ(attempts, attempt) << "an attempt was cut short by an earlier budget";
    clock->advance(1ms);
    ioc.poll();
    ioc.poll();
  }
  for (int n = 0; n < 3 && !got; ++n) ioc.poll();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_EQ(attempts, 3);
}

TEST_F(Timeout, AThrowingHookReplacesTheTimeout) {
  TimeoutOptions o;
  o.timeout = 1s;
  o.on_timeout = [](const TimeoutEvent&) { throw std::runtime_error("hook"); };
  const Shield shield = Shield{}.timeout(o).with_clock(clock);
  auto outcome = shield.execute_outcome([&](Context& ctx) {
    clock->advance(1s);
    ctx.throw_if_cancelled();
    return 1;
  });
  ASSERT_TRUE(outcome.has_exception());
  EXPECT_THROW(std::rethrow_exception(outcome.exception()), std::runtime_error);
}

TEST_F(Timeout, SynchronousTimeoutIsCooperative) {
  const Shield shield = Shield{}.timeout(2s).with_clock(clock);
  auto timed_out = shield.execute_outcome([&](Context& ctx) {
    EXPECT_FALSE(ctx.cancelled());
    EXPECT_EQ(ctx.deadline(), clock->now() + 2s);
    clock->advance(2s);
    EXPECT_TRUE(ctx.cancelled());
    ctx.throw_if_cancelled();
    return 1;
  });
  ASSERT_TRUE(timed_out.has_error());
  EXPECT_EQ(timed_out.error(), errc::timeout);
  // A function that finishes late but successfully is not failed.
  EXPECT_EQ(shield.execute([&] {
    clock->advance(3s);
    return 4;
  }),
            4);
  // The caller's stop is a cancellation, not a timeout.
  std::stop_source stop;
  auto stopped = shield.execute_outcome(
      [&](Context& ctx) {
        stop.request_stop();
        clock->advance(3s);
        ctx.throw_if_cancelled();
        return 1;
      },
      stop.get_token());
  ASSERT_TRUE(stopped.has_exception());
  try {
    std::rethrow_exception(stopped.exception());
  } catch (const Error& e) {
    EXPECT_TRUE(is_cancellation(e.error()));
  }
}

TEST_F(Timeout, SynchronousTimeoutCutsAnInnerWaitShort) {
  const Shield shield =
      Shield{}.timeout(3s).use(std::make_shared<test::Delay>(1h)).with_clock(clock);
  std::optional<Outcome<int>> outcome;
  std::jthread caller([&] { outcome = shield.execute_outcome([] { return 1; }); });
  clock->wait_for_sleepers(1);
  clock->advance(3s);
  caller.join();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_error());
  EXPECT_EQ(outcome->error(), errc::timeout);
}

// A total timeout outside a retry: the third backoff would end at the deadline (t = 3 s). The
// retry does not start it (a backoff ending at or past the deadline cannot be followed by an
// attempt): no fourth attempt starts, and the third attempt's failure is the call's. The engine's
// own refusal to start an attempt at the deadline, reached after a wait that ends exactly then, is
// the next test's (without a retry).
RetryOptions constant_retries(int n, Clock::duration delay) {
  RetryOptions r;
  r.max_retries = n;
  r.backoff = Backoff::constant(delay);
  return r;
}

TEST_F(Timeout, ASynchronousTotalTimeoutStartsNoAttemptOnceItsDeadlineHasPassed) {
  const Shield shield = Shield{}.timeout(3s).retry(constant_retries(10, 1s)).with_clock(clock);
  std::atomic<int> started = 0;
  std::optional<Outcome<int>> outcome;
  std::jthread caller([&] {
    outcome = shield.execute_outcome([&]() -> int {
      ++started;
      throw std::runtime_error("refused");
    });
  });
  // The backoffs to t = 1 and 2; the one from t = 2 would end at the deadline (3 s): the retry
  // does not start it, and the third attempt's own failure surfaces.
  for (int step = 1; step <= 2; ++step) {
    // Attempt `step` has run: the caller's next sleep is the backoff after it (a sleeper that
    // has not woken from the previous advance yet would still be counted).
    while (started.load() < step) std::this_thread::yield();
    clock->wait_for_sleepers(1);
    clock->advance(1s);
  }
  caller.join();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_exception());
  EXPECT_THROW(std::rethrow_exception(outcome->exception()), std::runtime_error);
  EXPECT_EQ(started.load(), 3);
}

// The same race without a retry: a strategy inside the timeout waits exactly its budget, then asks
// for its inner part. The engine does not start the operation past the enclosing deadline.
TEST_F(Timeout, AnAsynchronousOperationIsNotStartedAfterAWaitThatEndsAtTheDeadline) {
  const Shield shield =
      Shield{}.timeout(1s).use(std::make_shared<test::Delay>(1s)).with_clock(clock);
  bool started = false;
  std::optional<error_code> result;
  shield.execute_async(
      [&](auto token) {
        started = true;
        return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code ec, int) { result = ec; }));
  ioc.poll();
  clock->advance(1s);
  for (int n = 0; n < 4 && !result; ++n) ioc.poll();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, errc::timeout) << result->message();
  EXPECT_FALSE(started);
}

// The attempt the engine declines to start fails as the timeout's own cancellation: a breaker
// between them releases its admission instead of recording a success (which would reset its
// count of consecutive failures, or close a half-open circuit with a probe that never ran).
TEST_F(Timeout, AnAttemptNotStartedPastTheDeadlineIsNoSuccessForABreakerInside) {
  auto breaker = CircuitBreaker::create([] {
    CircuitBreakerOptions o;
    o.consecutive_failures = 2;
    return o;
  }());
  const auto fail_now = [&](auto token) {
    return test::async_answer(ioc.get_executor(), asio::error::connection_refused, 0,
                              std::move(token));
  };
  const Shield failing = Shield{}.use(breaker).with_clock(clock);
  const Shield delayed = Shield{}.timeout(1s).use(breaker).use(std::make_shared<test::Delay>(1s))
                             .with_clock(clock);
  std::optional<error_code> first;
  failing.execute_async(fail_now, asio::bind_executor(ioc, [&](error_code ec, int) { first = ec; }));
  ioc.poll();
  ASSERT_EQ(first, asio::error::connection_refused);  // one failure recorded
  bool started = false;
  std::optional<error_code> second;
  delayed.execute_async(
      [&](auto token) {
        started = true;
        return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code ec, int) { second = ec; }));
  ioc.restart();
  ioc.poll();
  clock->advance(1s);
  for (int n = 0; n < 4 && !second; ++n) ioc.poll();
  ASSERT_EQ(second, errc::timeout);
  EXPECT_FALSE(started);
  std::optional<error_code> third;
  failing.execute_async(fail_now, asio::bind_executor(ioc, [&](error_code ec, int) { third = ec; }));
  ioc.restart();
  ioc.poll();
  ASSERT_EQ(third, asio::error::connection_refused);
  EXPECT_EQ(breaker->state(), CircuitState::open) << "the declined attempt counted as a success";
}

TEST_F(Timeout, ASynchronousFunctionIsNotCalledAfterAWaitThatEndsAtTheDeadline) {
  const Shield shield =
      Shield{}.timeout(1s).use(std::make_shared<test::Delay>(1s)).with_clock(clock);
  std::atomic<bool> called = false;
  std::optional<Outcome<int>> outcome;
  std::jthread caller([&] {
    outcome = shield.execute_outcome([&] {
      called = true;
      return 1;
    });
  });
  clock->wait_for_sleepers(1);
  clock->advance(1s);
  caller.join();
  ASSERT_TRUE(outcome.has_value());
  ASSERT_TRUE(outcome->has_error());
  EXPECT_EQ(outcome->error(), errc::timeout);
  EXPECT_FALSE(called.load());
}

TEST_F(Timeout, GeneratorChoosesTheBudget) {
  TimeoutOptions o;
  o.timeout_generator = [](Context&) { return std::chrono::milliseconds(250); };
  const Shield shield = Shield{}.timeout(o).with_clock(clock);
  EXPECT_EQ(shield.describe(), "Timeout(dynamic)");
  shield.execute([&](Context& ctx) { EXPECT_EQ(ctx.deadline(), clock->now() + 250ms); });
  TimeoutOptions bad;
  bad.timeout_generator = [](Context&) { return Clock::duration::zero(); };
  auto outcome = Shield{}.timeout(bad).execute_outcome([] { return 1; });
  ASSERT_TRUE(outcome.has_exception());
  EXPECT_THROW(std::rethrow_exception(outcome.exception()), std::invalid_argument);
}

// Generated budgets of varying lengths share one deadline queue, which keeps them in deadline
// order whatever order they were armed in (a shorter budget armed after longer ones goes before
// them, or between them) and re-arms its timer for an earlier deadline: each call times out at
// its own deadline, not before, and none waits for a later one.
TEST_F(Timeout, GeneratedBudgetsOfVaryingLengthsEachExpireAtTheirOwnDeadline) {
  constexpr std::array<Clock::duration, 5> budgets{30s, 10s, 20s, 5s, 25s};
  std::size_t next = 0;
  TimeoutOptions o;
  o.timeout_generator = [&](Context&) { return budgets.at(next++); };
  const Shield shield = Shield{}.timeout(o).with_clock(clock);
  std::array<std::unique_ptr<asio::steady_timer>, budgets.size()> hangs;
  std::array<std::optional<error_code>, budgets.size()> results;
  for (std::size_t i = 0; i < budgets.size(); ++i) {
    hangs[i] = std::make_unique<asio::steady_timer>(ioc);
    shield.execute_async(
        Hang{hangs[i].get()},
        asio::bind_executor(ioc, [&results, i](error_code ec) { results[i] = ec; }));
  }
  ioc.poll();
  const auto completed = [&] {
    std::string s;
    for (std::size_t i = 0; i < results.size(); ++i) s += results[i].has_value() ? '1' : '0';
    return s;
  };
  ASSERT_EQ(completed(), "00000");
  // Just before and at each deadline, in deadline order: 5 s (call 3), 10 s (1), 20 s (2),
  // 25 s (4), 30 s (0).
  const std::array<std::pair<Clock::duration, const char*>, 10> steps{{{4s, "00000"},
                                                                       {1s, "00010"},
                                                                       {4s, "00010"},
                                                                       {1s, "01010"},
                                                                       {9s, "01010"},
                                                                       {1s, "01110"},
                                                                       {4s, "01110"},
                                                                       {1s, "01111"},
                                                                       {4s, "01111"},
                                                                       {1s, "11111"}}};
  Clock::duration elapsed{};
  for (const auto& [advance, expected] : steps) {
    clock->advance(advance);
    elapsed += advance;
    for (int n = 0; n < 4; ++n) ioc.poll();
    EXPECT_EQ(completed(), expected)
        << "after " << std::chrono::duration_cast<std::chrono::seconds>(elapsed).count() << " s";
  }
  for (const auto& r : results) {
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, errc::timeout);
  }
}

// A manual clock that dies before the io_context (a test declaring it second): the context's
// deadline queue keeps a timer of that clock until the context is destroyed, and neither the
// aborted wait nor the timer's destruction may reach the dead clock (AddressSanitizer checks).
TEST(TimeoutWithAManualClock, AClockDestroyedBeforeTheContextIsNeverReachedAgain) {
  asio::io_context ioc;
  std::optional<int> result;
  {
    auto clock = ManualClock::create();
    const Shield shield = Shield{}.timeout(5s).with_clock(clock);
    shield.execute_async(
        [&](auto token) {
          return asio::async_initiate<decltype(token), void(error_code, int)>(
              [&](auto handler) {
                asio::post(ioc, asio::append(std::move(handler), error_code{}, 3));
              },
              token);
        },
        asio::bind_executor(ioc, [&](error_code ec, int v) {
          EXPECT_FALSE(ec);
          result = v;
        }));
    ioc.run_one();  // the operation's completion: the call is over, its deadline disarmed
    ASSERT_EQ(result, 3);
    EXPECT_EQ(clock->pending_timers(), 1U) << "the queue's timer still waits for the old deadline";
  }  // the shield and the clock are gone
  ioc.restart();
  ioc.poll();  // the aborted wait of the queue's timer
}

TEST_F(Timeout, InvalidOptionsAreRefusedAtBuild) {
  EXPECT_THROW((void)Shield{}.timeout(0s), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.timeout(-1s), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.timeout(std::chrono::hours(24 * 60)), std::invalid_argument);
  try {
    (void)Shield{}.timeout(0s);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TimeoutOptions::timeout"), std::string::npos);
  }
}

TEST_F(Timeout, Describe) {
  EXPECT_EQ(Shield{}.timeout(30s).describe(), "Timeout(30s)");
  EXPECT_EQ(Shield{}.timeout(250ms).describe(), "Timeout(250ms)");
  EXPECT_EQ(Shield{}.timeout(90s).describe(), "Timeout(1.5m)");
}

TEST_F(Timeout, HappyPathAllocatesNothingAfterWarmUp) {
  const Shield shield = Shield{}.timeout(10s).with_clock(clock);
  std::uint64_t allocations = 99;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        auto op = [ex](auto token) { return test::async_answer(ex, {}, 1, std::move(token)); };
        for (int i = 0; i < 10; ++i) co_await shield.execute_async(op);
        kevlar::testing::AllocScope scope;
        for (int i = 0; i < 1000; ++i) co_await shield.execute_async(op);
        allocations = scope.count();
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });
  for (int i = 0; i < 5000 && allocations == 99; ++i) ioc.poll();
  EXPECT_EQ(allocations, 0U);
}

// Every allocation of a first timed call on a fresh io_context is failed in turn (its deadline
// queue, the queue's timer, the timer's wait). A failure fails that call only: the queue must not
// keep the failed call's entry (its storage ends with the call) nor believe a timer is waiting,
// so the next call on the same context times out on schedule. A call on another context takes
// the failed call's recycled block first, so that a stale entry cannot pass for the next call's.
TEST_F(Timeout, AnAllocationFailureWhileArmingLeavesTheQueueUsable) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  int failures = 0;
  for (std::uint64_t n = 0; n < 64; ++n) {
    asio::io_context local;  // fresh: its deadline queue and timer do not exist yet
    asio::steady_timer first_hang(local);
    asio::steady_timer second_hang(local);
    asio::steady_timer spacer_hang(ioc);
    std::optional<error_code> second;
    const auto injected = kevlar::testing::inject_allocation_failure(n, [&] {
      shield.execute_async(Hang{&first_hang}, asio::bind_executor(local, [](error_code) {}));
    });
    if (!injected.fired) break;  // the call allocated fewer than n + 1 times: all covered
    ++failures;
    local.restart();
    local.poll();  // a call that failed completes here
    shield.execute_async(Hang{&spacer_hang}, asio::bind_executor(ioc, [](error_code) {}));
    shield.execute_async(Hang{&second_hang},
                         asio::bind_executor(local, [&](error_code ec) { second = ec; }));
    local.restart();
    local.poll();
    clock->advance(1s);
    for (int i = 0; i < 4 && !second; ++i) local.poll();
    ASSERT_TRUE(second.has_value())
        << "allocation " << n << " failed: the next call never timed out";
    EXPECT_EQ(*second, errc::timeout) << n;
    for (int i = 0; i < 4; ++i) ioc.poll();  // the spacer times out too
    first_hang.cancel();
    local.restart();
    local.poll();
    TimeoutStrategy::release_idle_timers(local);
    TimeoutStrategy::release_idle_timers(ioc);
    ioc.restart();
    ioc.poll();
  }
  EXPECT_GT(failures, 2);
}

/// Makes `shield`'s deadline queue on `ctx` with a call on `ctx`'s own executor that completes at
/// once: the queue's timer then runs on that executor, not on a test's held one.
void create_deadline_queue(const Shield& shield, asio::io_context& ctx) {
  bool done = false;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ctx.get_executor(), {}, 1, std::move(token)); },
      asio::bind_executor(ctx, [&](error_code, int) { done = true; }));
  ctx.restart();
  while (!done) ctx.poll();
}

/// An operation the test completes itself, by calling `*open` (on the test's thread).
struct Gate {
  std::function<void(error_code)>* open;
  asio::cancellation_slot* slot_seen;
  template <class Token>
  auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(error_code)>(
        [open = open, slot_seen = slot_seen](auto handler) {
          *slot_seen = asio::get_associated_cancellation_slot(handler);
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          *open = [h](error_code ec) { std::move (*h)(ec); };
        },
        token);
  }
};

/// An operation that completes with operation_aborted when cancelled, counting the cancellations.
struct CountsCancellation {
  int* cancels;
  asio::cancellation_slot* slot_seen;
  template <class Token>
  auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(error_code)>(
        [cancels = cancels, slot_seen = slot_seen](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          *slot_seen = slot;
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          slot.assign([h, cancels](asio::cancellation_type) {
            ++*cancels;
            std::move (*h)(asio::error::operation_aborted);
          });
        },
        token);
  }
};

// An expiry's delivery job may run after its execution ended, when the execution's storage holds
// another execution whose own deadline is expiring: the stale job must not deliver that expiry
// (on the wrong executor; with a strand per execution, it raced the execution's own handlers). The
// first call's executor holds its jobs, so the stale job runs last, by the test's hand.
TEST_F(Timeout, AStaleExpiryNeverReachesAnExecutionThatReusedItsStorage) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  create_deadline_queue(shield, ioc);
  test::HeldExecutor::Jobs first_jobs;
  test::HeldExecutor::Jobs second_jobs;
  std::function<void(error_code)> open;
  asio::cancellation_slot first_slot;
  std::optional<error_code> first;
  shield.execute_async(
      Gate{&open, &first_slot},
      asio::bind_executor(test::HeldExecutor(ioc, first_jobs), [&](error_code ec) { first = ec; }));
  clock->advance(1s);
  ioc.restart();  // the queue's first call left nothing running: the loop had stopped
  ioc.poll();     // the deadline expires: its delivery waits in the first executor's list
  ioc.restart();  // the held jobs keep no work: the loop ran out of it
  ASSERT_EQ(first_jobs.size(), 1U);
  std::exchange(open, nullptr)(error_code{});  // the operation completes first: the call ends

  int cancels = 0;
  asio::cancellation_slot second_slot;
  std::optional<error_code> second;
  shield.execute_async(CountsCancellation{&cancels, &second_slot},
                       asio::bind_executor(test::HeldExecutor(ioc, second_jobs),
                                           [&](error_code ec) { second = ec; }));
  ASSERT_TRUE(second_slot == first_slot) << "the second call did not reuse the first's storage";
  clock->advance(1s);
  ioc.poll();  // the second deadline expires: its delivery waits in the second list
  ioc.restart();
  ASSERT_EQ(second_jobs.size(), 1U);

  first_jobs.run_all();  // the stale delivery, then the first call's completion
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(*first) << "the operation completed before the expiry was delivered";
  EXPECT_EQ(cancels, 0) << "the first call's expiry cancelled the second call";

  second_jobs.run_all();
  EXPECT_EQ(cancels, 1);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*second, errc::timeout);
}

// The deadline queue's timer does not run on the strand of the call that created the queue: while
// that strand is busy (a handler of it blocks another thread), another call on the same context
// still times out on schedule.
/// Sets its promise once, when called or at the latest when destroyed: a failed assertion that
/// returns early still lets a thread blocked on the promise finish.
struct Release {
  std::promise<void>* p;
  bool done = false;
  void operator()() {
    if (!std::exchange(done, true)) p->set_value();
  }
  ~Release() { (*this)(); }
};

/// A call on a strand made by `make_strand(fresh)` creates the context's deadline queue while that
/// strand is busy on another thread; a second call's deadline, on the plain executor, must fire
/// anyway: the queue's timer runs without the strand.
template <class MakeStrand>
void expect_busy_strand_not_to_delay_another_deadline(const std::shared_ptr<ManualClock>& clock,
                                                      MakeStrand make_strand) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  asio::io_context fresh;  // its deadline queue does not exist yet: the strand's call creates it
  auto strand = make_strand(fresh);
  std::promise<void> entered;
  std::promise<void> release;
  asio::post(strand, [&] {
    entered.set_value();
    release.get_future().wait();
  });
  std::jthread busy([&] { fresh.run_one(); });  // runs the blocking handler, the only one ready
  Release release_busy{&release};
  entered.get_future().wait();

  asio::steady_timer strand_hang(fresh);
  std::optional<error_code> first;
  shield.execute_async(Hang{&strand_hang},
                       asio::bind_executor(strand, [&](error_code ec) { first = ec; }));
  asio::steady_timer hang(fresh);
  std::optional<error_code> second;
  shield.execute_async(Hang{&hang},
                       asio::bind_executor(fresh, [&](error_code ec) { second = ec; }));
  clock->advance(1s);
  for (int i = 0; i < 4 && !second; ++i) fresh.poll();
  EXPECT_FALSE(first.has_value());  // its strand is still busy
  ASSERT_TRUE(second.has_value()) << "the plain call's deadline waited for the busy strand";
  EXPECT_EQ(*second, errc::timeout);

  release_busy();
  busy.join();
  for (int i = 0; i < 4 && !first; ++i) {
    fresh.restart();
    fresh.poll();
  }
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, errc::timeout);
  TimeoutStrategy::release_idle_timers(fresh);
}

TEST_F(Timeout, OneCallersBusyStrandDoesNotDelayAnothersDeadline) {
  expect_busy_strand_not_to_delay_another_deadline(
      clock, [](asio::io_context& ctx) { return asio::make_strand(ctx); });
}

// The same on a thread pool: the strand's call creates the pool's queue while the strand blocks
// one of the pool's two threads; the plain call's deadline fires on the other.
TEST(TimeoutOnAThreadPool, OneCallersBusyStrandDoesNotDelayAnothersDeadline) {
  auto clock = ManualClock::create();
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  asio::thread_pool pool(2);
  auto strand = asio::make_strand(pool);
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  asio::post(strand, [&entered, released] {
    entered.set_value();
    released.wait();
  });
  Release release_busy{&release};
  entered.get_future().wait();

  asio::steady_timer strand_hang(pool);
  std::promise<error_code> first;
  shield.execute_async(Hang{&strand_hang},
                       asio::bind_executor(strand, [&](error_code ec) { first.set_value(ec); }));
  asio::steady_timer hang(pool);
  std::promise<error_code> second;
  shield.execute_async(Hang{&hang},
                       asio::bind_executor(pool, [&](error_code ec) { second.set_value(ec); }));
  std::future<error_code> first_done = first.get_future();
  std::future<error_code> second_done = second.get_future();
  clock->advance(1s);
  // A bound on a wait for an event (the other pool thread runs the deadline), not a timer.
  ASSERT_EQ(second_done.wait_for(30s), std::future_status::ready)
      << "the plain call's deadline waited for the busy strand";
  EXPECT_EQ(second_done.get(), errc::timeout);
  EXPECT_EQ(first_done.wait_for(0s), std::future_status::timeout) << "its strand is still busy";

  release_busy();
  EXPECT_EQ(first_done.get(), errc::timeout);
  TimeoutStrategy::release_idle_timers(pool);
  pool.join();
}

// A strand over a type-erased executor (what a socket's executor gives): the same.
TEST_F(Timeout, OneCallersBusyStrandOfATypeErasedExecutorDoesNotDelayAnothersDeadline) {
  expect_busy_strand_not_to_delay_another_deadline(clock, [](asio::io_context& ctx) {
    return asio::make_strand(asio::any_io_executor(ctx.get_executor()));
  });
}

// The deadline queue is found per execution context, also on the fast path that names the
// context without building the call's executor: a second context run by the same thread gets a
// queue (and a timer) of its own, so its deadline expires while only that context runs.
TEST_F(Timeout, EachContextOfOneThreadHasItsOwnDeadlineQueue) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  asio::io_context other;
  asio::steady_timer other_hang(other);
  std::optional<error_code> here;
  std::optional<error_code> there;
  shield.execute_async(Hang{&hang_timer},
                       asio::bind_executor(ioc, [&](error_code ec) { here = ec; }));
  ioc.poll();  // this thread now knows ioc's queue
  shield.execute_async(Hang{&other_hang},
                       asio::bind_executor(other, [&](error_code ec) { there = ec; }));
  other.poll();
  clock->advance(1s);
  for (int i = 0; i < 4 && !there; ++i) other.poll();
  ASSERT_TRUE(there.has_value()) << "the other context's deadline was armed in ioc's queue";
  EXPECT_EQ(*there, errc::timeout);
  EXPECT_FALSE(here.has_value());  // ioc has not run since: its expiry is still on its way
  for (int i = 0; i < 4 && !here; ++i) ioc.poll();
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(*here, errc::timeout);
  TimeoutStrategy::release_idle_timers(other);
}

// Nor does the queue keep the work of the executor that created it: once every call is done and
// the idle timer released, the context runs out of work.
TEST_F(Timeout, TheDeadlineQueueKeepsNoCallersWork) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  asio::io_context fresh;
  std::optional<int> got;
  // The handler's executor tracks work; the handler is the only holder of that work.
  shield.execute_async(
      [&](auto token) { return test::async_answer(fresh.get_executor(), {}, 7, std::move(token)); },
      asio::bind_executor(
          asio::prefer(fresh.get_executor(), asio::execution::outstanding_work.tracked),
          [&](error_code, int v) { got = v; }));
  fresh.poll();
  ASSERT_EQ(got, 7);
  fresh.poll();  // the queue releases its idle timer by itself
  EXPECT_TRUE(fresh.stopped()) << "the context still has work after its only call ended";
}

// Every allocation while a deadline expires is failed in turn (delivering the expiry allocates a
// job on the execution's executor). A failure leaves the loop's poll() as any handler's does; the
// deadline stays armed and the next poll delivers it.
TEST_F(Timeout, AnAllocationFailureWhileExpiringDelaysTheTimeoutButNeverLosesIt) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  int failures = 0;
  for (std::uint64_t n = 0; n < 64; ++n) {
    asio::io_context local;
    create_deadline_queue(shield, local);
    test::HeldExecutor::Jobs held;
    int cancels = 0;
    asio::cancellation_slot slot;
    std::optional<error_code> got;
    shield.execute_async(
        CountsCancellation{&cancels, &slot},
        asio::bind_executor(test::HeldExecutor(local, held), [&](error_code ec) { got = ec; }));
    clock->advance(1s);
    local.restart();  // the queue's first call left nothing running: the loop had stopped
    const auto injected = kevlar::testing::inject_allocation_failure(n, [&] { local.poll(); });
    if (!injected.fired) break;  // the expiry allocated fewer than n + 1 times: all covered
    ++failures;
    EXPECT_TRUE(injected.threw) << n;
    for (int i = 0; i < 4 && held.size() == 0; ++i) {
      local.restart();
      local.poll();
    }
    held.run_all();
    ASSERT_TRUE(got.has_value()) << "allocation " << n << " failed: the deadline was lost";
    EXPECT_EQ(*got, errc::timeout) << n;
    EXPECT_EQ(cancels, 1) << n;
    TimeoutStrategy::release_idle_timers(local);
  }
  EXPECT_GE(failures, 1);
}

// The same sweep on the steady clock, whose timer takes its handler before allocating: a wait
// that fails to start destroys that handler, which once re-entered the queue's lock on the same
// thread (a deadlock).
TEST(TimeoutOnTheSteadyClock, AnAllocationFailureWhileArmingLeavesTheQueueUsable) {
  const Shield shield = Shield{}.timeout(10s);
  int failures = 0;
  for (std::uint64_t n = 0; n < 64; ++n) {
    asio::io_context local;
    asio::steady_timer first_hang(local);
    asio::steady_timer second_hang(local);
    std::optional<error_code> first;
    std::optional<error_code> second;
    const auto injected = kevlar::testing::inject_allocation_failure(n, [&] {
      shield.execute_async(Hang{&first_hang},
                           asio::bind_executor(local, [&](error_code ec) { first = ec; }));
    });
    if (!injected.fired) break;
    const bool started = !injected.threw;
    ++failures;
    // A second call on the same context arms the queue's timer whatever happened to the first.
    shield.execute_async(Hang{&second_hang},
                         asio::bind_executor(local, [&](error_code ec) { second = ec; }));
    first_hang.cancel();
    second_hang.cancel();
    local.restart();
    local.poll();
    EXPECT_EQ(first.has_value(), started) << n;
    ASSERT_TRUE(second.has_value()) << n;
    EXPECT_EQ(*second, asio::error::operation_aborted) << n;
    TimeoutStrategy::release_idle_timers(local);
    local.restart();
    local.poll();
  }
  EXPECT_GT(failures, 2);
}

// An asynchronous timeout delivers its expiry on the call's executor; a handler without one
// would leave it to the system executor, racing the operation. Such a call is refused before any
// strategy runs, with its own error whose message says what to do, and its operation never
// starts. (The handler, having no executor, runs on the system executor: the test waits for it
// through a promise.)
TEST_F(Timeout, AnAsynchronousCallWithoutAnExecutorIsRefusedWithExecutorRequired) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  bool started = false;
  std::promise<std::string> outcome;  // what the handler saw, described on its own thread
  auto attempt = [&](auto token) {    // an operation completing with (exception_ptr, int)
    return asio::async_initiate<decltype(token), void(std::exception_ptr, int)>(
        [&](auto handler) {
          started = true;
          asio::post(ioc, asio::append(std::move(handler), std::exception_ptr(), 1));
        },
        token);
  };
  shield.execute_async(attempt, [&](std::exception_ptr ep, int) {  // no associated executor
    std::string seen = "no exception";
    if (ep) {
      try {
        std::rethrow_exception(ep);
      } catch (const Error& e) {
        seen = e.code() == errc::executor_required ? std::string(e.what()) : "another kevlar::Error";
      } catch (...) {
        seen = "an exception other than kevlar::Error";
      }
    }
    outcome.set_value(std::move(seen));
  });
  ioc.poll();  // an operation that did start completes here (and the test fails below)
  std::future<std::string> delivered = outcome.get_future();  // else on the system executor
  ASSERT_EQ(delivered.wait_for(10s), std::future_status::ready) << "the handler never ran";
  const std::string seen = delivered.get();
  EXPECT_FALSE(started);
  EXPECT_NE(seen.find("bind_executor"), std::string::npos) << seen;
}

TEST_F(Timeout, AnErrorCodeHandlerWithoutAnExecutorSeesExecutorRequiredNotACallbackException) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  bool started = false;
  std::promise<error_code> seen;
  shield.execute_async(
      [&](auto token) {
        started = true;
        return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
      },
      [&](error_code ec, int) { seen.set_value(ec); });
  ioc.poll();
  std::future<error_code> delivered = seen.get_future();
  ASSERT_EQ(delivered.wait_for(10s), std::future_status::ready) << "the handler never ran";
  const error_code ec = delivered.get();
  EXPECT_FALSE(started);
  EXPECT_EQ(ec, errc::executor_required) << ec.message();
  EXPECT_NE(ec.message().find("asio::bind_executor"), std::string::npos) << ec.message();
}

/// Runs one call through breaker -> retry(3) -> timeout(1s), its handler made by `wrap` from a
/// plain callback, and checks that it was refused before any strategy ran: executor_required, at
/// once (no backoff wait on the manual clock), no attempt, the breaker untouched.
template <class Wrap>
void expect_refused_before_any_strategy(Fixture& t, Wrap wrap) {
  auto breaker = CircuitBreaker::create([] {
    CircuitBreakerOptions o;
    o.consecutive_failures = 1;
    return o;
  }());
  const Shield shield = Shield{}.use(breaker).retry(3).timeout(1s).with_clock(t.clock);
  int attempts = 0;
  std::promise<error_code> seen;
  shield.execute_async(
      [&](auto token) {
        ++attempts;
        return test::async_answer(t.ioc.get_executor(), {}, 1, std::move(token));
      },
      wrap([&](error_code ec, int) { seen.set_value(ec); }));
  std::future<error_code> delivered = seen.get_future();
  ASSERT_EQ(delivered.wait_for(10s), std::future_status::ready) << "refused after a backoff?";
  EXPECT_EQ(delivered.get(), errc::executor_required);
  t.ioc.poll();
  EXPECT_EQ(attempts, 0);
  EXPECT_EQ(breaker->state(), CircuitState::closed);
}

TEST_F(Timeout, ATypeErasedSystemExecutorIsRefusedBeforeAnyStrategyToo) {
  expect_refused_before_any_strategy(*this, [](auto handler) {
    return asio::bind_executor(asio::any_io_executor(asio::system_executor()), std::move(handler));
  });
}

TEST_F(Timeout, ARefusalForAMissingExecutorIsNeitherRetriedNorCountedByABreaker) {
  expect_refused_before_any_strategy(*this, [](auto handler) { return handler; });
  const Shield shield = Shield{}.retry(3).timeout(1s).with_clock(clock);
  int attempts = 0;
  // The same call with an executor bound runs.
  std::optional<error_code> bound;
  shield.execute_async(
      [&](auto token) {
        ++attempts;
        return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code ec, int) { bound = ec; }));
  ioc.restart();  // the first poll found nothing to run and stopped the loop
  ioc.poll();
  ASSERT_TRUE(bound.has_value());
  EXPECT_FALSE(*bound);
  EXPECT_EQ(attempts, 1);
}

TEST_F(Timeout, AbandonedExecutionDisarmsItsDeadline) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  {
    asio::io_context local;
    asio::steady_timer timer(local);
    shield.execute_async(Hang{&timer}, asio::bind_executor(local, [](error_code) {}));
    local.poll();
  }                    // destroyed with the execution pending
  clock->advance(2s);  // the queue has nothing left to fire into
  ioc.poll();
}

TEST_F(Timeout, StrandSerialisedExecutionsRaceTheirDeadlinesSafely) {
  // Two threads run the io_context; each execution lives on its own strand. Deadlines expire
  // while operations complete, in every interleaving the scheduler produces.
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  auto guard = asio::make_work_guard(ioc);
  std::array<std::jthread, 2> threads{std::jthread([&] { ioc.run(); }),
                                      std::jthread([&] { ioc.run(); })};
  std::atomic<int> done{0};
  std::atomic<int> timeouts{0};
  constexpr int calls = 200;
  for (int i = 0; i < calls; ++i) {
    auto strand = asio::make_strand(ioc);
    asio::post(strand, [&, strand, i] {
      shield.execute_async(
          [&, strand, i](auto token) {
            return test::async_answer(strand, {}, i, std::move(token));
          },
          asio::bind_executor(strand, [&](error_code ec, int) {
            if (ec == errc::timeout) ++timeouts;
            ++done;
          }));
    });
    if (i % 10 == 0) clock->advance(1s);
  }
  while (done.load() < calls) {
    clock->advance(1s);
    std::this_thread::yield();
  }
  guard.reset();
  TimeoutStrategy::release_idle_timers(ioc);
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), calls);
  EXPECT_LE(timeouts.load(), calls);
}

// The real clock: a deadline is never earlier than the call's start plus its budget. Deadlines
// once came from the kernel's coarse clock, which lags now() by up to a scheduler tick (more on a
// VM: 1.6-5.7 ms measured here), so timeouts fired that much early.
TEST(TimeoutOnTheSteadyClock, ASynchronousDeadlineIsNeverEarlierThanTheBudget) {
  const Shield shield = Shield{}.timeout(10s);
  const Clock& clock = *Clock::steady();
  for (int i = 0; i < 1000; ++i) {
    const Clock::time_point before = clock.now();
    const Clock::time_point deadline = shield.execute([](Context& ctx) { return ctx.deadline(); });
    ASSERT_GE(deadline, before + 10s)
        << "call " << i << " got a deadline " << (before + 10s - deadline).count() << " ns early";
  }
}

TEST(TimeoutOnTheSteadyClock, AnAsynchronousTimeoutNeverFiresBeforeItsBudget) {
  // Real time, short budgets: the assertion is a lower bound, which the loop's scheduling can
  // only lengthen.
  asio::io_context ioc;
  asio::steady_timer hang(ioc);
  const Shield shield = Shield{}.timeout(5ms);
  const Clock& clock = *Clock::steady();
  for (int i = 0; i < 20; ++i) {
    std::optional<error_code> got;
    ioc.restart();  // the loop stops whenever it runs out of work (after each call)
    const Clock::time_point before = clock.now();
    shield.execute_async(Hang{&hang}, asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
    while (!got) ASSERT_EQ(ioc.run_one(), 1U) << "call " << i << ": the loop ran out of work";
    const Clock::duration elapsed = clock.now() - before;
    ASSERT_EQ(*got, errc::timeout);
    ASSERT_GE(elapsed, 5ms) << "call " << i << " timed out after " << elapsed.count() << " ns";
  }
  TimeoutStrategy::release_idle_timers(ioc);
}

// ---- the deadline thread (the steady clock) ----------------------------------------------------
//
// Deadlines on the system's steady clock are woken by kevlar's deadline thread, not by a timer on
// the caller's context. These tests wait for real expiries by running the loop (an expiry is an
// event that ends run_one), never by sleeping; budgets are a few milliseconds.

/// An operation that completes with operation_aborted when cancelled, counting the cancellations,
/// and holds work on its handler's executor while it is pending, as Asio's operations do (the
/// deadline thread keeps nothing of the caller's loop running).
struct AbortsOnCancel {
  int* cancels;
  template <class Token>
  auto operator()(Token&& token) const {
    return asio::async_initiate<Token, void(error_code)>(
        [cancels = cancels](auto handler) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto work = asio::prefer(asio::get_associated_executor(handler),
                                   asio::execution::outstanding_work.tracked);
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          slot.assign([h, cancels, work](asio::cancellation_type) {
            ++*cancels;
            std::move (*h)(asio::error::operation_aborted);
          });
        },
        token);
  }
};

/// Runs `ioc` one handler at a time until `done` holds; fails if 30 s pass without a handler (a
/// deadline thread that never woke).
void run_until(asio::io_context& ioc, const std::function<bool()>& done) {
  ioc.restart();
  while (!done()) ASSERT_EQ(ioc.run_one_for(30s), 1U) << "no expiry arrived within 30 s";
}

// Any Asio timer on a context brings its reactor, which then runs an epoll_wait syscall on every
// pass over the context's queue for the rest of the context's life. A steady-clock timeout must
// not bring one to a loop that has no I/O of its own; and nothing of it keeps run() going.
TEST(TimeoutOnTheSteadyClock, ATimeoutBringsNoReactorToTheCallersContext) {
  const Shield shield = Shield{}.timeout(10s).retry(2);
  asio::io_context ioc;
  std::optional<int> got;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 7, std::move(token)); },
      asio::bind_executor(ioc, [&](error_code, int v) { got = v; }));
  ioc.run();  // returns once the call is done
  EXPECT_EQ(got, 7);
  EXPECT_FALSE(asio::has_service<asio::detail::reactor>(ioc))
      << "the timeout created a reactor on the caller's io_context";
}

// The expiry comes from the deadline thread and is delivered on the call's own executor: the
// operation sees the cancellation there, and the handler runs on the loop's thread.
TEST(TimeoutOnTheSteadyClock, AnExpiryIsDeliveredOnTheCallsExecutor) {
  const Shield shield = Shield{}.timeout(2ms);
  asio::io_context ioc;
  int cancels = 0;
  std::optional<error_code> got;
  bool on_loop_thread = false;
  shield.execute_async(AbortsOnCancel{&cancels}, asio::bind_executor(ioc, [&](error_code ec) {
                         got = ec;
                         on_loop_thread = ioc.get_executor().running_in_this_thread();
                       }));
  run_until(ioc, [&] { return got.has_value(); });
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_EQ(cancels, 1);
  EXPECT_TRUE(on_loop_thread);
  ioc.restart();
  ioc.poll();
  EXPECT_TRUE(ioc.stopped()) << "the expiry left work behind";
}

// The thread sleeps until the earliest wake-up it was asked for. A deadline earlier than that
// (another queue's shorter budget, or a shorter generated budget in the same queue) must wake it
// early: the short call times out while the long one still waits.
TEST(TimeoutOnTheSteadyClock, AShorterDeadlineWakesTheThreadBeforeALongerOne) {
  TimeoutOptions generated;
  Clock::duration next_budget = 1h;
  generated.timeout_generator = [&](Context&) { return next_budget; };
  const Shield by_generator = Shield{}.timeout(generated);
  const Shield long_fixed = Shield{}.timeout(1h);
  const Shield short_fixed = Shield{}.timeout(2ms);
  for (const bool same_queue : {false, true}) {
    SCOPED_TRACE(same_queue ? "one queue, generated budgets" : "two queues, fixed budgets");
    asio::io_context ioc;
    int cancels = 0;
    asio::cancellation_signal stop_long;
    std::optional<error_code> long_result;
    std::optional<error_code> short_result;
    next_budget = 1h;
    (same_queue ? by_generator : long_fixed)
        .execute_async(AbortsOnCancel{&cancels},
                       asio::bind_cancellation_slot(
                           stop_long.slot(),
                           asio::bind_executor(ioc, [&](error_code ec) { long_result = ec; })));
    ioc.restart();
    ioc.poll();  // the long deadline is armed: the thread sleeps until it
    next_budget = 2ms;
    (same_queue ? by_generator : short_fixed)
        .execute_async(AbortsOnCancel{&cancels},
                       asio::bind_executor(ioc, [&](error_code ec) { short_result = ec; }));
    run_until(ioc, [&] { return short_result.has_value(); });
    EXPECT_EQ(*short_result, errc::timeout);
    EXPECT_FALSE(long_result.has_value());
    stop_long.emit(asio::cancellation_type::terminal);
    run_until(ioc, [&] { return long_result.has_value(); });
    EXPECT_EQ(*long_result, asio::error::operation_aborted);
  }
}

// A context destroyed with a deadline armed takes its queue with it: the thread must never wake
// that queue again. The thread serves wake-ups earliest first, so once a later deadline on
// another context has expired, the destroyed one's time has passed too (under AddressSanitizer
// a wake of the freed queue is a use after free).
TEST(TimeoutOnTheSteadyClock, AContextDestroyedWithADeadlineArmedIsNeverWokenAgain) {
  const Shield shield = Shield{}.timeout(1ms);
  int cancels = 0;
  bool doomed_completed = false;
  {
    asio::io_context doomed;
    asio::steady_timer hang(doomed);  // goes first: its wait's handler then dies with the context
    // Armed inside execute_async; the loop never runs (a poll that took longer than the budget
    // would deliver the expiry).
    shield.execute_async(Hang{&hang},
                         asio::bind_executor(doomed, [&](error_code) { doomed_completed = true; }));
  }
  EXPECT_FALSE(doomed_completed);  // abandoned with its context, never invoked
  const Shield later = Shield{}.timeout(20ms);
  asio::io_context ioc;
  std::optional<error_code> got;
  later.execute_async(AbortsOnCancel{&cancels},
                      asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  run_until(ioc, [&] { return got.has_value(); });
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_FALSE(doomed_completed);
}

// Several threads, each with its own loop, arm, disarm and expire deadlines at once: the queues
// of every context share the one deadline thread (run under ThreadSanitizer in CI).
TEST(TimeoutOnTheSteadyClock, LoopsOnSeveralThreadsShareTheDeadlineThread) {
  const Shield shield = Shield{}.timeout(1ms);
  constexpr int threads = 4;
  constexpr int calls = 10;
  std::array<int, threads> timeouts{};
  std::array<int, threads> answers{};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      asio::io_context ioc;
      int cancels = 0;
      for (int i = 0; i < calls; ++i) {
        std::optional<error_code> expired;
        shield.execute_async(AbortsOnCancel{&cancels},
                             asio::bind_executor(ioc, [&](error_code ec) { expired = ec; }));
        std::optional<int> answered;
        shield.execute_async(
            [&](auto token) {
              return test::async_answer(ioc.get_executor(), {}, i, std::move(token));
            },
            asio::bind_executor(ioc, [&](error_code, int v) { answered = v; }));
        ioc.restart();
        while (!expired || !answered) {
          if (ioc.run_one_for(30s) != 1) break;
        }
        if (expired == errc::timeout) ++timeouts[t];
        if (answered == i) ++answers[t];
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(timeouts[t], calls) << "thread " << t;
    EXPECT_EQ(answers[t], calls) << "thread " << t;
  }
}

// A child forked after the parent's deadline thread started has no such thread (a thread does not
// survive fork): its first deadline starts one, and its timeouts expire, on contexts it creates
// and on one it inherited with a call of the same queue pending (whose request the parent's
// thread took with it). (ThreadSanitizer stops a child that starts threads after a
// multi-threaded fork, so that build skips this test.)
TEST(TimeoutOnTheSteadyClock, AForkedChildStartsItsOwnDeadlineThread) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer forbids threads in a forked child";
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  GTEST_SKIP() << "ThreadSanitizer forbids threads in a forked child";
#endif
#endif
  const Shield shield = Shield{}.timeout(1ms);
  auto expires = [&] {
    asio::io_context ioc;
    int cancels = 0;
    std::optional<error_code> got;
    shield.execute_async(AbortsOnCancel{&cancels},
                         asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
    ioc.restart();
    while (!got && ioc.run_one_for(30s) == 1) {
    }
    return got == errc::timeout;
  };
  ASSERT_TRUE(expires());  // the parent's deadline thread runs
  const Shield inherited_shield = Shield{}.timeout(50ms);
  asio::io_context inherited;
  int cancels = 0;
  std::optional<error_code> parents_call;
  inherited_shield.execute_async(
      AbortsOnCancel{&cancels},
      asio::bind_executor(inherited, [&](error_code ec) { parents_call = ec; }));
  inherited.notify_fork(asio::execution_context::fork_prepare);
  const pid_t child = ::fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    inherited.notify_fork(asio::execution_context::fork_child);
    // A call on the inherited context lands behind the parent's entry in the same queue.
    std::optional<error_code> childs_call;
    inherited_shield.execute_async(
        AbortsOnCancel{&cancels},
        asio::bind_executor(inherited, [&](error_code ec) { childs_call = ec; }));
    inherited.restart();
    while (!childs_call && inherited.run_one_for(30s) == 1) {
    }
    bool all = childs_call == errc::timeout;
    // Several calls on new contexts, each expiring while the thread sleeps with nothing to do:
    // each arms anew and has to wake the child's thread.
    for (int i = 0; i < 5; ++i) all = expires() && all;
    ::_exit(all ? 0 : 1);
  }
  inherited.notify_fork(asio::execution_context::fork_parent);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a timeout in the child never expired";
  inherited.restart();
  while (!parents_call && inherited.run_one_for(30s) == 1) {
  }
  EXPECT_EQ(parents_call, errc::timeout);
}

// An io_context built without its scheduler's lock lets only its own thread touch its queue: the
// deadline thread may not post there, so such a context's queue keeps a clock timer on the context
// (its reactor shows it), and its deadlines still expire.
TEST(TimeoutOnTheSteadyClock, AContextWithoutASchedulerLockKeepsItsTimerOnTheContext) {
  const Shield shield = Shield{}.timeout(2ms);
  asio::io_context ioc(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);
  int cancels = 0;
  std::optional<error_code> got;
  shield.execute_async(AbortsOnCancel{&cancels},
                       asio::bind_executor(ioc, [&](error_code ec) { got = ec; }));
  run_until(ioc, [&] { return got.has_value(); });
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_TRUE(asio::has_service<asio::detail::reactor>(ioc))
      << "the deadline thread would have posted to a context without a lock";
  TimeoutStrategy::release_idle_timers(ioc);
}

}  // namespace
}  // namespace kevlar
