#include "async_ops.hpp"
#include "test_strategies.hpp"

#include <boom.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using test::EventLog;
using test::Recorder;

using test::Boom;

std::vector<Shield> shields() {
  return {Shield{}, Shield{}.use(std::make_shared<test::PassThrough>()),
          Shield{}
              .use(std::make_shared<test::PassThrough>())
              .use(std::make_shared<test::PassThrough>())};
}

/// Rethrows the exception of a co_spawn'd coroutine (so a failing EXPECT inside is not lost).
void rethrow(std::exception_ptr ep) {
  if (ep) std::rethrow_exception(ep);
}

TEST(AsyncExecution, CallbackReceivesTheOperationsSignature) {
  for (const Shield& shield : shields()) {
    asio::io_context ioc;
    int calls = 0;
    shield.execute_async(
        [&](auto token) {
          return test::async_answer(ioc.get_executor(), {}, 42, std::move(token));
        },
        asio::bind_executor(ioc, [&](error_code ec, int v) {
          ++calls;
          EXPECT_FALSE(ec);
          EXPECT_EQ(v, 42);
        }));
    EXPECT_EQ(calls, 0) << "completed inside the initiating call";
    ioc.run();
    EXPECT_EQ(calls, 1) << shield.describe();
  }
}

TEST(AsyncExecution, StrategiesRunInChainOrder) {
  asio::io_context ioc;
  EventLog log;
  const Shield shield = Shield{}
                            .use(std::make_shared<Recorder>("a", log))
                            .use(std::make_shared<Recorder>("b", log))
                            .use(std::make_shared<Recorder>("c", log));
  shield.execute_async(
      [&](auto token) {
        log.add("op");
        return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code, int) { log.add("done"); }));
  ioc.run();
  EXPECT_EQ(log.events(),
            (std::vector<std::string>{"a:start", "b:start", "c:start", "op", "c:inner", "c:finish",
                                      "b:inner", "b:finish", "a:inner", "a:finish", "done"}));
}

TEST(AsyncExecution, ErrorsFlowAsErrorCodes) {
  asio::io_context ioc;
  error_code got;
  Shield{}
      .use(std::make_shared<test::PassThrough>())
      .execute_async(
          [&](auto token) {
            return test::async_answer(ioc.get_executor(), asio::error::connection_reset, 3,
                                      std::move(token));
          },
          asio::bind_executor(ioc, [&](error_code ec, int v) {
            got = ec;
            EXPECT_EQ(v, 3);  // the operation's values travel with its error
          }));
  ioc.run();
  EXPECT_EQ(got, asio::error::connection_reset);
}

TEST(AsyncExecution, RejectionIsPostedNeverInline) {
  asio::io_context ioc;
  int calls = 0;
  bool op_ran = false;
  Shield{}
      .use(std::make_shared<test::Reject>(errc::concurrency_limit_exceeded))
      .execute_async(
          [&](auto token) {
            op_ran = true;
            return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
          },
          asio::bind_executor(ioc, [&](error_code ec, int v) {
            ++calls;
            EXPECT_EQ(ec, errc::concurrency_limit_exceeded);
            EXPECT_EQ(v, 0);
          }));
  EXPECT_EQ(calls, 0);
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(op_ran);
}

TEST(AsyncExecution, CompletesOnTheCallersExecutor) {
  asio::io_context caller_ctx;
  asio::io_context io_ctx;  // the operation's own executor
  auto strand = asio::make_strand(caller_ctx);
  std::optional<std::thread::id> ran_on;
  bool in_strand = false;
  for (const Shield& shield : shields()) {
    shield.execute_async(
        [&](auto token) {
          return test::async_answer(io_ctx.get_executor(), {}, 1, std::move(token));
        },
        asio::bind_executor(strand, [&](error_code, int) {
          ran_on = std::this_thread::get_id();
          in_strand = strand.running_in_this_thread();
        }));
    io_ctx.run();
    io_ctx.restart();
    caller_ctx.run();
    caller_ctx.restart();
    EXPECT_TRUE(in_strand) << shield.describe();
    in_strand = false;
  }
}

TEST(AsyncExecution, UseFutureDeliversValueAndError) {
  asio::io_context ioc;
  const Shield shield = Shield{}.use(std::make_shared<test::PassThrough>());
  std::future<int> ok = shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 9, std::move(token)); },
      asio::use_future);
  std::future<int> bad = shield.execute_async(
      [&](auto token) {
        return test::async_answer(ioc.get_executor(), asio::error::timed_out, 0, std::move(token));
      },
      asio::use_future);
  ioc.run();
  EXPECT_EQ(ok.get(), 9);
  EXPECT_THROW(bad.get(), boost::system::system_error);
}

TEST(AsyncExecution, CoroutineTokenShapes) {
  for (const Shield& shield : shields()) {
    asio::io_context ioc;
    int checks = 0;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          auto ex = co_await asio::this_coro::executor;
          auto op = [ex](auto token) { return test::async_answer(ex, {}, 5, std::move(token)); };
          auto failing = [ex](auto token) {
            return test::async_answer(ex, asio::error::eof, 6, std::move(token));
          };
          // No token: deferred.
          EXPECT_EQ(co_await shield.execute_async(op), 5);
          ++checks;
          EXPECT_EQ(co_await shield.execute_async(op, asio::use_awaitable), 5);
          ++checks;
          EXPECT_EQ(co_await shield.execute_async(op, asio::deferred), 5);
          ++checks;
          auto [ec, v] = co_await shield.execute_async(failing, asio::as_tuple(asio::deferred));
          EXPECT_EQ(ec, asio::error::eof);
          EXPECT_EQ(v, 6);
          ++checks;
          try {
            co_await shield.execute_async(failing);
            ADD_FAILURE() << "no exception";
          } catch (const boost::system::system_error& e) {
            EXPECT_EQ(e.code(), asio::error::eof);
            ++checks;
          }
        },
        rethrow);
    ioc.run();
    EXPECT_EQ(checks, 5) << shield.describe();
  }
}

asio::awaitable<int> answer(int v) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return v;
}

asio::awaitable<int> throw_boom(const Boom** where) {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  try {
    throw Boom();
  } catch (const Boom& b) {
    *where = &b;
    throw;
  }
}

TEST(AsyncExecution, AwaitableFactoryValueAndExceptionIdentity) {
  for (const Shield& shield : shields()) {
    asio::io_context ioc;
    int checks = 0;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          EXPECT_EQ(co_await shield.execute_async([] { return answer(11); }), 11);
          ++checks;
          const Boom* thrown = nullptr;
          try {
            co_await shield.execute_async([&] { return throw_boom(&thrown); });
            ADD_FAILURE() << "no exception";
          } catch (const Boom& b) {
            EXPECT_EQ(&b, thrown);
            ++checks;
          }
          // With a token: void(exception_ptr, int).
          auto [ep, v] = co_await shield.execute_async([] { return answer(12); },
                                                       asio::as_tuple(asio::deferred));
          EXPECT_FALSE(ep);
          EXPECT_EQ(v, 12);
          ++checks;
          auto [ep2, v2] = co_await shield.execute_async([&] { return throw_boom(&thrown); },
                                                         asio::as_tuple(asio::deferred));
          try {
            std::rethrow_exception(ep2);
          } catch (const Boom& b) {
            EXPECT_EQ(&b, thrown);
            ++checks;
          }
          (void)v2;
        },
        rethrow);
    ioc.run();
    EXPECT_EQ(checks, 4) << shield.describe();
  }
}

TEST(AsyncExecution, FactoryThatThrowsSynchronouslyFailsTheAttempt) {
  asio::io_context ioc;
  const Shield shield = Shield{}.use(std::make_shared<test::Repeat>(1));
  int calls = 0;
  std::exception_ptr got;
  shield.execute_async(
      [&]() -> asio::awaitable<int> {
        ++calls;
        throw Boom();
      },
      asio::bind_executor(ioc, [&](std::exception_ptr ep, int) { got = ep; }));
  ioc.run();
  EXPECT_EQ(calls, 2);  // the failure was handled and retried once
  EXPECT_THROW(std::rethrow_exception(got), Boom);
}

// An attempt whose initiation throws (before or after taking the handler, as an Asio operation
// that fails to allocate does) fails that attempt: the strategies see the exception and the
// execution completes normally. It used to escape execute_async with the execution leaked and
// its strategies never finished.
TEST(AsyncExecution, AnAttemptWhoseInitiationThrowsFailsTheAttempt) {
  asio::io_context ioc;
  const Shield shield = Shield{}.use(std::make_shared<test::Repeat>(1));
  int calls = 0;
  auto attempt = [&](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&](auto handler) {
          auto taken = std::move(handler);  // destroyed uninvoked by the throw
          ++calls;
          throw Boom();
        },
        token);
  };
  std::optional<error_code> got;
  shield.execute_async(attempt, asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; }));
  EXPECT_FALSE(got.has_value());  // never inside the initiating call
  ioc.run();
  EXPECT_EQ(calls, 2);  // the failure was handled and retried once
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, errc::callback_exception);
}

TEST(AsyncExecution, StrategyErrorsReachAwaitableFactoriesAsKevlarError) {
  asio::io_context ioc;
  bool caught = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        try {
          co_await Shield{}
              .use(std::make_shared<test::Reject>(errc::rate_limited))
              .execute_async([] { return answer(1); });
        } catch (const Error& e) {
          caught = e.error() == errc::rate_limited;
        }
      },
      rethrow);
  ioc.run();
  EXPECT_TRUE(caught);
}

TEST(AsyncExecution, PreCancelledCoroutineNeverStartsTheOperation) {
  for (const Shield& shield : shields()) {
    asio::io_context ioc;
    asio::cancellation_signal signal;
    bool op_started = false;
    bool factory_body_ran = false;
    bool aborted_op = false;
    bool aborted_factory = false;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          // Wait until the caller cancels us, ignoring the cancellation of this first wait.
          asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
          co_await asio::this_coro::reset_cancellation_state(asio::enable_terminal_cancellation());
          co_await asio::this_coro::throw_if_cancelled(false);
          auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
          (void)ec;
          co_await asio::this_coro::throw_if_cancelled(true);
          try {
            co_await shield.execute_async([&](auto token) {
              op_started = true;
              return t.async_wait(std::move(token));
            });
          } catch (const boost::system::system_error& e) {
            aborted_op = is_cancellation(e.code());
          }
          try {
            co_await shield.execute_async([&]() -> asio::awaitable<int> {
              factory_body_ran = true;
              co_return 1;
            });
          } catch (const boost::system::system_error& e) {
            aborted_factory = is_cancellation(e.code());
          }
        },
        asio::bind_cancellation_slot(signal.slot(), rethrow));
    ioc.poll();
    signal.emit(asio::cancellation_type::terminal);
    ioc.run();
    EXPECT_TRUE(aborted_op) << shield.describe();
    EXPECT_TRUE(aborted_factory) << shield.describe();
    EXPECT_FALSE(op_started);
    EXPECT_FALSE(factory_body_ran);
  }
}

TEST(AsyncExecution, CallersCancellationReachesTheRunningOperation) {
  for (auto type : {asio::cancellation_type::terminal, asio::cancellation_type::partial,
                    asio::cancellation_type::total}) {
    for (const Shield& shield : shields()) {
      asio::io_context ioc;
      asio::steady_timer timer(ioc, std::chrono::hours(1));
      asio::cancellation_signal signal;
      error_code got;
      int calls = 0;
      shield.execute_async(
          [&](auto token) { return timer.async_wait(std::move(token)); },
          asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(ioc, [&](error_code ec) {
                                         ++calls;
                                         got = ec;
                                       })));
      ioc.poll();
      EXPECT_EQ(calls, 0);
      signal.emit(type);
      ioc.run();
      EXPECT_EQ(calls, 1);
      EXPECT_EQ(got, asio::error::operation_aborted) << shield.describe();
    }
  }
}

TEST(AsyncExecution, CallersCancellationStopsARepeaterAndAWait) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.use(std::make_shared<test::Repeat>(5, std::chrono::seconds(1))).with_clock(clock);
  asio::cancellation_signal signal;
  int attempts = 0;
  int calls = 0;
  error_code got;
  shield.execute_async(
      [&](auto token) {
        ++attempts;
        return test::async_answer(ioc.get_executor(), asio::error::connection_refused, 0,
                                  std::move(token));
      },
      asio::bind_cancellation_slot(signal.slot(), asio::bind_executor(ioc, [&](error_code ec, int) {
                                     ++calls;
                                     got = ec;
                                   })));
  ioc.poll();  // attempt 1 failed, the repeater waits 1s
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(clock->pending_timers(), 1U);
  clock->advance(std::chrono::seconds(1));
  ioc.poll();  // attempt 2 failed, waiting again
  EXPECT_EQ(attempts, 2);
  signal.emit(asio::cancellation_type::terminal);
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(got, asio::error::operation_aborted);
  EXPECT_EQ(clock->pending_timers(), 0U);
}

TEST(AsyncExecution, AsyncWaitsUseTheManualClock) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.use(std::make_shared<test::Delay>(std::chrono::seconds(30))).with_clock(clock);
  int calls = 0;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 4, std::move(token)); },
      asio::bind_executor(ioc, [&](error_code ec, int v) {
        ++calls;
        EXPECT_FALSE(ec);
        EXPECT_EQ(v, 4);
      }));
  ioc.poll();
  clock->advance(std::chrono::seconds(29));
  ioc.poll();
  EXPECT_EQ(calls, 0);
  clock->advance(std::chrono::seconds(1));
  ioc.poll();
  EXPECT_EQ(calls, 1);
}

TEST(AsyncExecution, AbandonedExecutionFinishesEveryActiveLayer) {
  EventLog log;
  bool handler_ran = false;
  {
    asio::io_context ioc;
    asio::steady_timer timer(ioc, std::chrono::hours(1));
    const Shield shield = Shield{}
                              .use(std::make_shared<Recorder>("a", log))
                              .use(std::make_shared<Recorder>("b", log));
    shield.execute_async([&](auto token) { return timer.async_wait(std::move(token)); },
                         asio::bind_executor(ioc, [&](error_code) { handler_ran = true; }));
    ioc.poll();
    EXPECT_EQ(log.events(), (std::vector<std::string>{"a:start", "b:start"}));
  }  // the io_context is destroyed with the operation pending
  EXPECT_FALSE(handler_ran);
  EXPECT_EQ(log.events(), (std::vector<std::string>{"a:start", "b:start", "b:finish", "a:finish"}));
}

TEST(AsyncExecution, SyncAndAsyncParity) {
  // The same shield gives the same outcomes both ways: a repeater over a function that fails twice.
  const Shield shield = Shield{}.use(std::make_shared<test::Repeat>(2));
  int sync_calls = 0;
  const int sync_result = shield.execute([&] {
    if (++sync_calls < 3) throw std::runtime_error("x");
    return 7;
  });
  asio::io_context ioc;
  int async_calls = 0;
  int async_result = 0;
  shield.execute_async(
      [&](auto token) {
        ++async_calls;
        return test::async_answer(ioc.get_executor(),
                                  async_calls < 3 ? error_code(asio::error::eof) : error_code(), 7,
                                  std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code ec, int v) {
        EXPECT_FALSE(ec);
        async_result = v;
      }));
  ioc.run();
  EXPECT_EQ(sync_result, async_result);
  EXPECT_EQ(sync_calls, async_calls);
}

TEST(AsyncExecution, HandlerRunsExactlyOnceFromAnotherThreadsOperation) {
  // The operation completes on a second io_context run by another thread; the caller's handler
  // still runs once, on the caller's io_context.
  asio::io_context caller_ctx;
  asio::io_context worker_ctx;
  auto guard = asio::make_work_guard(worker_ctx);
  std::jthread worker([&] { worker_ctx.run(); });
  std::atomic<int> calls{0};
  std::thread::id caller_thread = std::this_thread::get_id();
  bool on_caller_thread = false;
  const Shield shield = Shield{}.use(std::make_shared<test::PassThrough>());
  auto caller_guard = asio::make_work_guard(caller_ctx);
  shield.execute_async(
      [&](auto token) {
        return test::async_answer(worker_ctx.get_executor(), {}, 1, std::move(token));
      },
      asio::bind_executor(caller_ctx, [&](error_code, int) {
        on_caller_thread = std::this_thread::get_id() == caller_thread;
        ++calls;
        caller_guard.reset();
      }));
  caller_ctx.run();
  guard.reset();
  worker.join();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(on_caller_thread);
}

// An operation may complete inside its own cancellation handler: the execution then finishes (and
// is destroyed) while the caller's cancellation is being forwarded, and nothing may touch it after.
// The handler brings std::allocator so the execution's block is freed to the heap, where
// AddressSanitizer sees any later use.
TEST(AsyncExecution, AnOperationCompletingInsideItsCancellationHandlerEndsTheExecutionCleanly) {
  asio::io_context ioc;
  asio::cancellation_signal caller;
  const Shield s = Shield{}.retry(0);
  std::optional<error_code> done;
  s.execute_async(
      test::CompletesOnCancel{},
      asio::bind_cancellation_slot(
          caller.slot(),
          asio::bind_allocator(std::allocator<char>(),
                               asio::bind_executor(ioc, [&](error_code ec) { done = ec; }))));
  ioc.poll();
  ASSERT_FALSE(done.has_value());
  caller.emit(asio::cancellation_type::terminal);
  ioc.poll();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(*done, asio::error::operation_aborted);
}

// An execution that outlives its shield holds the pipeline, and with it the shield's clock: its
// backoff timer must go before the clock does.
TEST(AsyncExecution, AnExecutionOutlivingItsShieldDestroysItsTimerBeforeTheClock) {
  asio::io_context ioc;
  auto clock = std::make_shared<ManualClock>();
  ManualClock* raw = clock.get();
  std::optional<error_code> done;
  auto attempts = std::make_shared<int>(0);
  {
    RetryOptions o;
    o.max_retries = 1;
    o.backoff = Backoff::constant(std::chrono::seconds(1));
    const Shield s = Shield{}.with_clock(std::move(clock)).retry(o);
    s.execute_async(
        [attempts](auto token) {
          return asio::async_initiate<decltype(token), void(error_code)>(
              [attempts](auto handler) {
                const bool first = (*attempts)++ == 0;
                auto ex = asio::get_associated_executor(handler);
                asio::post(ex, asio::append(std::move(handler),
                                            first ? error_code(asio::error::connection_reset)
                                                  : error_code()));
              },
              token);
        },
        asio::bind_executor(ioc, [&](error_code ec) { done = ec; }));
    ioc.poll();  // the first attempt failed; the execution waits on the backoff timer
  }  // the shield is gone: the execution holds the last reference to the pipeline and the clock
  EXPECT_EQ(*attempts, 1);
  raw->advance(std::chrono::seconds(1));
  ioc.poll();
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(*done);
  EXPECT_EQ(*attempts, 2);
}

}  // namespace
}  // namespace kevlar
