// The breaker's coroutine state-change hook (a coroutine on_state_changed: Kevlar's
// OnStateChangedAsync): awaited after the synchronous observers, one change at a time and in
// order, by the caller that holds the hooks' lane — the execution that caused the change (before
// it completes; a probe before it runs), or a synchronous caller on a private io_context; its
// exception is that caller's outcome.
#include "breaker_test_support.hpp"

#include <kevlar/circuit_breaker.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/descriptors.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;
using S = CircuitState;
using test::Boom;

std::string change_name(const CircuitStateChange& c) {
  return std::string(to_string(c.from)) + "->" + to_string(c.to);
}

/// Options whose observers log each change: "sub:" (a subscriber, a synchronous observer) and
/// "async:" (the coroutine on_state_changed, once `gate` opens, if given; it checks that no two
/// hooks overlap). The plain and the coroutine on_state_changed are one option now: the
/// subscriber stands for the synchronous observers the coroutine runs after.
struct Logged {
  std::vector<std::string> log;
  int inside = 0;
  bool overlapped = false;
  asio::steady_timer* gate = nullptr;

  CircuitBreakerOptions options() {
    CircuitBreakerOptions o;
    o.consecutive_failures = 1;
    o.break_duration = 5s;
    o.on_state_changed = [this](CircuitStateChange c) -> asio::awaitable<void> {
      if (++inside > 1) overlapped = true;
      if (gate != nullptr) {
        error_code ignored;
        co_await gate->async_wait(asio::redirect_error(asio::use_awaitable, ignored));
      } else {
        co_await asio::post(asio::use_awaitable);
      }
      log.push_back("async:" + change_name(c));
      --inside;
    };
    return o;
  }
  std::shared_ptr<CircuitBreaker> breaker() {
    auto b = CircuitBreaker::create(options());
    b->subscribe([this](const CircuitStateChange& c) { log.push_back("sub:" + change_name(c)); });
    return b;
  }
};

using test::poll_rounds;
using test::start_call;

TEST(BreakerAsyncStateHook, TheCausingExecutionAwaitsItAfterTheSynchronousObservers) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  Logged l;
  l.gate = &gate;
  const auto breaker = l.breaker();
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  EXPECT_FALSE(got.has_value()) << "the execution awaits the hook";
  EXPECT_EQ(breaker->state(), S::open) << "the change stands while its hook runs";
  EXPECT_EQ(l.log, (std::vector<std::string>{"sub:closed->open"}));
  gate.cancel();
  poll_rounds(io);
  EXPECT_EQ(got, error_code(asio::error::connection_reset));
  EXPECT_EQ(l.log, (std::vector<std::string>{"sub:closed->open", "async:closed->open"}));
  EXPECT_FALSE(l.overlapped);
}

TEST(BreakerAsyncStateHook, AProbeRunsOnlyOnceItsHalfOpenHookEnded) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  Logged l;
  const auto breaker = l.breaker();
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  breaker->isolate();  // by hand, lane free: the hook runs to completion inside isolate()
  EXPECT_EQ(l.log.back(), "async:closed->isolated");
  breaker->reset();
  EXPECT_EQ(l.log.back(), "async:isolated->closed");
  l.log.clear();

  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  ASSERT_EQ(breaker->state(), S::open);
  clock->advance(5s);
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  l.gate = &gate;
  l.log.clear();
  int calls = 0;
  got.reset();
  start_call(shield, io, {}, got, &calls);
  poll_rounds(io);
  EXPECT_EQ(breaker->state(), S::half_open);
  EXPECT_EQ(calls, 0) << "the probe waits for the open -> half_open hook";
  gate.cancel();  // the first hook goes on; the next ones do not wait
  l.gate = nullptr;
  poll_rounds(io);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, error_code());
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_EQ(l.log, (std::vector<std::string>{"sub:open->half_open", "async:open->half_open",
                                             "sub:half_open->closed", "async:half_open->closed"}));
}

TEST(BreakerAsyncStateHook, ItsFailureIsTheOutcomeAndAProbeThatFailsSoDoesNotRun) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  int failures_left = 0;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.break_duration = 5s;
  o.on_state_changed = [&](CircuitStateChange) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    if (failures_left > 0) {
      --failures_left;
      throw std::domain_error("hook");
    }
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  failures_left = 1;
  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  EXPECT_EQ(got, error_code(errc::callback_exception))
      << "an error-code completion cannot carry it";
  EXPECT_EQ(breaker->state(), S::open) << "the change stands";

  clock->advance(5s);
  failures_left = 1;
  int calls = 0;
  got.reset();
  start_call(shield, io, {}, got, &calls);
  poll_rounds(io);
  EXPECT_EQ(got, error_code(errc::callback_exception));
  EXPECT_EQ(calls, 0) << "the probe whose hook failed does not run";
  EXPECT_EQ(breaker->state(), S::half_open);
  got.reset();
  start_call(shield, io, {}, got, &calls);  // its slot was freed: the next call is the probe
  poll_rounds(io);
  EXPECT_EQ(got, error_code());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(breaker->state(), S::closed);
}

TEST(BreakerAsyncStateHook, ASynchronousCallerRunsItAndReceivesItsExceptionUnchanged) {
  std::exception_ptr thrown;
  std::vector<std::string> log;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.on_state_changed = [&](CircuitStateChange c) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);  // really suspends, on the private io_context
    log.push_back(change_name(c));
    try {
      throw std::out_of_range("hook");
    } catch (...) {
      thrown = std::current_exception();
      throw;
    }
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(ManualClock::create());
  const Outcome<int> out = shield.execute_outcome([]() -> int { throw Boom(); });
  ASSERT_TRUE(out.has_exception());
  EXPECT_EQ(out.exception(), thrown) << "the very exception object";
  EXPECT_EQ(log, std::vector<std::string>{"closed->open"});
  EXPECT_THROW(breaker->reset(), std::out_of_range);
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_EQ(log, (std::vector<std::string>{"closed->open", "open->closed"}));
}

TEST(BreakerAsyncStateHook, AChangeThatFindsTheLaneTakenIsAwaitedByItsHolderInOrder) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  Logged l;
  l.gate = &gate;
  const auto breaker = l.breaker();
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  ASSERT_FALSE(got.has_value());
  breaker->reset();  // the lane is taken: reset() returns once its synchronous observers ran
  breaker->isolate();
  EXPECT_EQ(l.log, (std::vector<std::string>{"sub:closed->open", "sub:open->closed",
                                             "sub:closed->isolated"}));
  gate.cancel();  // the first hook goes on; the next ones do not wait
  l.gate = nullptr;
  poll_rounds(io);
  EXPECT_EQ(got, error_code(asio::error::connection_reset));
  EXPECT_EQ(l.log, (std::vector<std::string>{"sub:closed->open", "sub:open->closed",
                                             "sub:closed->isolated", "async:closed->open",
                                             "async:open->closed", "async:closed->isolated"}));
  EXPECT_FALSE(l.overlapped);
}

TEST(BreakerAsyncStateHook, SeveralFailuresAwaitedByOneHolderReachItAsCircuitObserverErrors) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer gate(io, asio::steady_timer::time_point::max());
  bool gated = true;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.on_state_changed = [&](CircuitStateChange c) -> asio::awaitable<void> {
    if (gated) {
      error_code ignored;
      co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    }
    throw std::domain_error(change_name(c));
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::exception_ptr failure;
  bool done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          (void)co_await shield.execute_async([]() -> asio::awaitable<int> {
            throw Boom();
            co_return 1;
          });
        } catch (...) {
          failure = std::current_exception();
        }
        done = true;
      },
      asio::detached);
  poll_rounds(io);
  ASSERT_FALSE(done) << "the tripping execution awaits the closed -> open hook";
  breaker->reset();  // the lane is taken: its hook is awaited by the same holder
  gated = false;
  gate.cancel();
  poll_rounds(io);
  ASSERT_TRUE(done);
  ASSERT_TRUE(failure);
  try {
    std::rethrow_exception(failure);
  } catch (const CircuitObserverErrors& e) {
    std::vector<std::string> what;
    for (const std::exception_ptr& ep : e.errors()) {
      try {
        std::rethrow_exception(ep);
      } catch (const std::domain_error& d) {
        what.emplace_back(d.what());
      }
    }
    EXPECT_EQ(what, (std::vector<std::string>{"closed->open", "open->closed"}));
  } catch (...) {
    ADD_FAILURE() << "not a CircuitObserverErrors";
  }
  EXPECT_EQ(breaker->state(), S::closed);
}

TEST(BreakerAsyncStateHook, AChangeMadeInsideTheHookIsAwaitedNextWithoutDeadlock) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  std::vector<std::string> log;
  std::shared_ptr<CircuitBreaker> breaker;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.on_state_changed = [&](CircuitStateChange c) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    log.push_back(change_name(c));
    if (c.to == S::open) breaker->isolate();  // queued behind: awaited next by the same holder
  };
  breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  EXPECT_EQ(got, error_code(asio::error::connection_reset));
  EXPECT_EQ(log, (std::vector<std::string>{"closed->open", "open->isolated"}));
  EXPECT_EQ(breaker->state(), S::isolated);
}

TEST(BreakerAsyncStateHook, TheHoldersCancellationEndsTheHookAndFreesTheLane) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  asio::cancellation_signal cancel;
  int hooks = 0;
  bool returned = false;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.on_state_changed = [&](CircuitStateChange) -> asio::awaitable<void> {
    if (++hooks == 1) co_await hour.async_wait(asio::use_awaitable);
    returned = true;
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
  cancel.emit(asio::cancellation_type::terminal);
  poll_rounds(io);
  ASSERT_TRUE(got.has_value()) << "the hook's wait was not cancelled";
  EXPECT_EQ(*got, asio::error::operation_aborted);
  EXPECT_FALSE(returned);
  breaker->reset();  // the lane is free again: the hook runs inside reset()
  EXPECT_EQ(hooks, 2);
  EXPECT_TRUE(returned);
}

TEST(BreakerAsyncStateHook, AnAbandonedHolderFreesTheLaneAndTheNextChangeAwaitsWhatIsLeft) {
  const auto clock = ManualClock::create();
  std::vector<std::string> log;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  int hooks = 0;
  o.on_state_changed = [&](CircuitStateChange c) -> asio::awaitable<void> {
    if (++hooks == 1) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
      co_await timer.async_wait(asio::use_awaitable);
    }
    log.push_back(change_name(c));
  };
  const auto breaker = CircuitBreaker::create(o);
  auto shield = std::make_unique<Shield>(Shield{}.use(breaker).with_clock(clock));
  bool delivered = false;
  {
    asio::io_context io;
    shield->execute_async(
        [&](auto token) {
          return test::async_answer(io.get_executor(), asio::error::connection_reset, 0,
                                    std::move(token));
        },
        asio::bind_executor(io, [&](error_code, int) { delivered = true; }));
    poll_rounds(io);
    breaker->reset();  // queued behind the holder's hook
    EXPECT_TRUE(log.empty());
  }  // the io_context goes with the hook's coroutine and the execution it holds
  EXPECT_FALSE(delivered);
  breaker->isolate();  // finds the lane free: awaits the reset's hook, then its own
  EXPECT_EQ(log, (std::vector<std::string>{"open->closed", "closed->isolated"}));
  shield.reset();
}

TEST(BreakerAsyncStateHook, AProbeAbandonedWhileItAwaitsItsHalfOpenHookFreesItsSlot) {
  const auto clock = ManualClock::create();
  bool hold = false;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.break_duration = 5s;
  o.on_state_changed = [&hold](CircuitStateChange) -> asio::awaitable<void> {
    if (hold) {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
      co_await timer.async_wait(asio::use_awaitable);
    }
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  int calls = 0;
  {
    asio::io_context io;
    start_call(shield, io, asio::error::connection_reset, got);
    poll_rounds(io);
  }
  ASSERT_EQ(got, error_code(asio::error::connection_reset));
  ASSERT_EQ(breaker->state(), S::open);
  clock->advance(5s);
  hold = true;
  got.reset();
  {
    asio::io_context io;
    start_call(shield, io, {}, got, &calls);
    poll_rounds(io);
    EXPECT_EQ(breaker->state(), S::half_open);
    EXPECT_EQ(calls, 0) << "the probe awaits the open -> half_open hook";
  }  // the io_context goes with the hook's coroutine and the probe that awaits it
  EXPECT_FALSE(got.has_value());
  hold = false;
  asio::io_context io;
  start_call(shield, io, {}, got, &calls);
  poll_rounds(io);
  EXPECT_EQ(got, error_code()) << "the abandoned probe's slot was freed: this call is the probe";
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(breaker->state(), S::closed);
}

TEST(BreakerAsyncStateHook, NothingIsAwaitedWithoutAChange) {
  const auto clock = ManualClock::create();
  asio::io_context io;
  int hooks = 0;
  CircuitBreakerOptions o;
  o.consecutive_failures = 3;
  o.on_state_changed = [&hooks](CircuitStateChange) -> asio::awaitable<void> {
    ++hooks;
    co_return;
  };
  const auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).with_clock(clock);
  std::optional<error_code> got;
  start_call(shield, io, {}, got);
  poll_rounds(io);
  EXPECT_EQ(got, error_code());
  got.reset();
  start_call(shield, io, asio::error::connection_reset, got);
  poll_rounds(io);
  EXPECT_EQ(got, error_code(asio::error::connection_reset));
  EXPECT_EQ(hooks, 0);
  EXPECT_EQ(breaker->state(), S::closed);
  EXPECT_TRUE(testing::expect_contains_single<testing::CircuitBreakerDescriptor>(shield)
                  .has_on_state_changed);
}

// Four threads trip, probe and reset the circuit at once: every change's hook runs exactly once,
// never two at a time, in the order the synchronous observer (a subscriber: the plain and the
// coroutine on_state_changed are one option now) saw the changes.
TEST(BreakerAsyncStateHook, ConcurrentChangesReachTheHookOnceEachInOrder) {
  std::mutex m;
  std::vector<std::string> sync_seen;
  std::vector<std::string> async_seen;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  CircuitBreakerOptions o;
  o.consecutive_failures = 2;
  o.break_duration = 1ns;  // every later call may probe
  o.on_state_changed = [&](CircuitStateChange c) -> asio::awaitable<void> {
    if (inside.fetch_add(1) != 0) overlapped = true;
    co_await asio::post(asio::use_awaitable);
    {
      const std::lock_guard lock(m);
      async_seen.push_back(change_name(c));
    }
    inside.fetch_sub(1);
  };
  const auto breaker = CircuitBreaker::create(o);
  breaker->subscribe([&](const CircuitStateChange& c) {
    const std::lock_guard lock(m);
    sync_seen.push_back(change_name(c));
  });
  const Shield shield = Shield{}.use(breaker);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (t == 3 && i % 10 == 0) {
          breaker->reset();
          continue;
        }
        (void)shield.execute_outcome([&]() -> int {
          if ((i + t) % 3 == 0) return 1;
          throw Boom();
        });
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(overlapped.load());
  ASSERT_FALSE(sync_seen.empty());
  EXPECT_EQ(async_seen, sync_seen);
}

}  // namespace
}  // namespace kevlar
