// ExecutionProbe: attempts and cancellations seen by a wrapped synchronous function, asynchronous
// attempt and awaitable factory, through real executions on a ManualClock.
#include "support/field_equality.hpp"
#include "support/pending_ops.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/execution_probe.hpp>

#include <gtest/gtest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>

namespace {

using namespace std::chrono_literals;
using kevlar::Shield;
using kevlar::testing::ExecutionProbe;
using kevlar::testing::ExecutionProbeSnapshot;

kevlar::RetryOptions immediate_retry(int retries) {
  kevlar::RetryOptions o;
  o.max_retries = retries;
  o.backoff = kevlar::Backoff::none();
  return o;
}

TEST(ExecutionProbe, CountsEverySynchronousAttemptOfARetry) {
  ExecutionProbe probe;
  int calls = 0;
  const int v = Shield{}.retry(immediate_retry(3)).execute(probe.wrap([&] {
    if (++calls < 3) throw std::runtime_error("flaky");
    return 42;
  }));
  EXPECT_EQ(v, 42);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{3, 0, 0}));
}

TEST(ExecutionProbe, ASynchronousAttemptThatEndsCancelledCountsOneCancellation) {
  const auto clock = kevlar::ManualClock::create();
  ExecutionProbe probe;
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  const kevlar::Outcome<int> o = shield.execute_outcome(probe.wrap([&](kevlar::Context& ctx) {
    EXPECT_EQ(probe.active(), 1u) << "the attempt is running";
    clock->advance(2s);  // the attempt overruns its budget
    ctx.throw_if_cancelled();
    return 1;
  }));
  EXPECT_EQ(o.error(), kevlar::errc::timeout);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 1, 0}));

  // The caller's own stop token counts too.
  std::stop_source stop;
  (void)Shield{}.retry(1).execute_outcome(probe.wrap([&] {
    stop.request_stop();
    return 0;
  }),
                                          stop.get_token());
  EXPECT_EQ(probe.cancellations(), 2u);
  EXPECT_EQ(probe.attempts(), 2u);
}

TEST(ExecutionProbe, AnAsynchronousAttemptCancelledByATimeoutIsCountedAndForwarded) {
  const auto clock = kevlar::ManualClock::create();
  boost::asio::io_context io;
  kevlar::test::PendingOps ops;
  ExecutionProbe probe;
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  std::optional<boost::system::error_code> result;
  shield.execute_async(
      probe.wrap_async(ops.attempt()),
      boost::asio::bind_executor(io.get_executor(),
                                 [&](boost::system::error_code ec, int) { result = ec; }));
  io.poll();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops.at(0).attempt, 1u) << "the wrapped operation still sees kevlar's attempt context";
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 0, 1}));

  clock->advance(1s);
  io.poll();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, kevlar::errc::timeout);
  ASSERT_EQ(ops.at(0).cancellations.size(), 1u) << "the cancellation reached the operation";
  EXPECT_EQ(ops.at(0).cancellations[0], boost::asio::cancellation_type::terminal);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 1, 0}));
}

TEST(ExecutionProbe, AnAsynchronousAttemptThatCompletesIsNotACancellation) {
  boost::asio::io_context io;
  const auto work = boost::asio::make_work_guard(io);  // the pending operations hold none
  kevlar::test::PendingOps ops;
  ExecutionProbe probe;
  // On a manual clock, the zero backoff is a wait that completes at once (posted).
  const Shield shield =
      Shield{}.retry(immediate_retry(1)).with_clock(kevlar::ManualClock::create());
  std::optional<int> value;
  shield.execute_async(
      probe.wrap_async(ops.attempt()),
      boost::asio::bind_executor(io.get_executor(), [&](boost::system::error_code ec, int v) {
        if (!ec) value = v;
      }));
  io.poll();
  ops.complete(0, boost::asio::error::connection_reset);
  io.poll();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops.at(1).attempt, 2u);
  ops.succeed(1, 8);
  io.poll();
  EXPECT_EQ(value, 8);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{2, 0, 0}));
}

TEST(ExecutionProbe, AwaitableAttemptsAndTheirCancellationAreCounted) {
  const auto clock = kevlar::ManualClock::create();
  boost::asio::io_context io;
  kevlar::test::PendingOps ops;
  ExecutionProbe probe;
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  std::exception_ptr failure;
  bool done = false;
  shield.execute_async(
      probe.wrap_awaitable([&]() -> boost::asio::awaitable<int> {
        co_return co_await ops.async_call(boost::asio::use_awaitable);
      }),
      boost::asio::bind_executor(io.get_executor(), [&](std::exception_ptr e, int) {
        failure = e;
        done = true;
      }));
  io.poll();
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 0, 1}));
  clock->advance(1s);
  io.poll();
  ASSERT_TRUE(done);
  EXPECT_TRUE(failure);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 1, 0}));

  // A factory whose awaitable succeeds: an attempt, no cancellation.
  ExecutionProbe second;
  std::optional<int> value;
  io.restart();  // it ran out of work
  shield.execute_async(
      second.wrap_awaitable([]() -> boost::asio::awaitable<int> { co_return 3; }),
      boost::asio::bind_executor(io.get_executor(), [&](std::exception_ptr e, int v) {
        if (!e) value = v;
      }));
  io.poll();
  EXPECT_EQ(value, 3);
  EXPECT_EQ(second.snapshot(), (ExecutionProbeSnapshot{1, 0, 0}));
}

TEST(ExecutionProbe, WaitForAttemptsIsSignalledFromAnotherThread) {
  ExecutionProbe probe;
  std::thread worker([&] { (void)Shield{}.retry(1).execute(probe.wrap([] { return 1; })); });
  EXPECT_TRUE(probe.wait_for_attempts(1));
  worker.join();
  EXPECT_EQ(probe.attempts(), 1u);
}

TEST(ExecutionProbe, EveryFieldOfASnapshotTakesPartInEquality) {
  kevlar::test::expect_every_field_compared<ExecutionProbeSnapshot>(
      ExecutionProbeSnapshot{2, 1, 0}, {[](ExecutionProbeSnapshot& s) { s.attempts = 3; },
                                        [](ExecutionProbeSnapshot& s) { s.cancellations = 0; },
                                        [](ExecutionProbeSnapshot& s) { s.active = 1; }});
}

TEST(ExecutionProbe, AnAsynchronousAttemptCountsOneCancellationHoweverManyReachIt) {
  boost::asio::io_context io;
  const auto work = boost::asio::make_work_guard(io);  // the pending operation holds none
  kevlar::test::PendingOps ops;
  ExecutionProbe probe;
  boost::asio::cancellation_signal caller;
  std::optional<boost::system::error_code> result;
  Shield{}.execute_async(probe.wrap_async(ops.attempt()),
                         boost::asio::bind_cancellation_slot(
                             caller.slot(), boost::asio::bind_executor(
                                                io.get_executor(), [&](boost::system::error_code ec,
                                                                       int) { result = ec; })));
  io.poll();
  ASSERT_EQ(ops.size(), 1u);
  caller.emit(boost::asio::cancellation_type::partial);
  caller.emit(boost::asio::cancellation_type::terminal);  // before the abort completes
  EXPECT_EQ(ops.at(0).cancellations.size(), 2u) << "both reached the operation";
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 1, 1}));
  io.poll();
  EXPECT_EQ(result, boost::system::error_code(boost::asio::error::operation_aborted));
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 1, 0}));
}

TEST(ExecutionProbe, AnAsynchronousAttemptDestroyedUninvokedEndsUncancelled) {
  boost::asio::io_context io;
  kevlar::test::PendingOps ops;
  ExecutionProbe probe;
  bool completed = false;
  Shield{}.execute_async(
      probe.wrap_async(ops.attempt()),
      boost::asio::bind_executor(io.get_executor(),
                                 [&](boost::system::error_code, int) { completed = true; }));
  io.poll();
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 0, 1}));
  ops.drop(0);  // its executor went away with it pending
  io.poll();
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 0, 0}));
  EXPECT_FALSE(completed) << "the execution is abandoned";
}

TEST(ExecutionProbe, AProbedAttemptCalledWithoutACancellationSlotStillCounts) {
  boost::asio::io_context io;
  kevlar::test::PendingOps ops;
  ExecutionProbe probe;
  auto attempt = probe.wrap_async(ops.attempt());
  std::optional<int> value;
  attempt(boost::asio::bind_executor(io.get_executor(), [&](boost::system::error_code ec, int v) {
    if (!ec) value = v;
  }));
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 0, 1}));
  ops.succeed(0, 4);
  io.poll();
  EXPECT_EQ(value, 4);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{1, 0, 0}));
}

TEST(ExecutionProbe, AnAwaitableFactoryThatThrowsEndsItsAttempt) {
  boost::asio::io_context io;
  ExecutionProbe probe;
  std::exception_ptr failure;
  bool done = false;
  // Not a coroutine: the factory throws before it returns an awaitable.
  Shield{}
      .retry(immediate_retry(1))
      .execute_async(probe.wrap_awaitable([]() -> boost::asio::awaitable<int> {
        throw std::runtime_error("no connection");
      }),
                     boost::asio::bind_executor(io.get_executor(), [&](std::exception_ptr e, int) {
                       failure = e;
                       done = true;
                     }));
  io.poll();
  ASSERT_TRUE(done);
  EXPECT_THROW(std::rethrow_exception(failure), std::runtime_error);
  EXPECT_EQ(probe.snapshot(), (ExecutionProbeSnapshot{2, 0, 0}));
}

}  // namespace
