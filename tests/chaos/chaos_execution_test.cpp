// Every chaos injection in every execution shape: Shield::execute of a function with a value and
// of a void function, execute_outcome, an Asio operation with a completion handler, and an
// awaitable factory; and the random sequence shared by threads.
#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>

#include <core/async_ops.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

ChaosOptions on(double rate = 1.0, std::uint64_t seed = 1) {
  ChaosOptions o;
  o.enabled = true;
  o.injection_rate = rate;
  o.seed = seed;
  return o;
}

ChaosFaultOptions reset_fault() {
  ChaosFaultOptions o;
  o.chaos = on();
  o.error = asio::error::connection_reset;
  return o;
}

// ---- synchronous ---------------------------------------------------------------------------------

TEST(ChaosExecution, AFaultFailsExecuteWithoutCallingTheFunction) {
  const Shield shield = chaos::fault(reset_fault());
  int calls = 0;
  try {
    (void)shield.execute([&calls] { return ++calls; });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.error(), asio::error::connection_reset);
  }
  EXPECT_THROW(shield.execute([&calls] { ++calls; }), Error);
  const Outcome<int> o = shield.execute_outcome([&calls] { return ++calls; });
  EXPECT_EQ(o.error(), asio::error::connection_reset);
  EXPECT_EQ(calls, 0);
}

TEST(ChaosExecution, AnExceptionFaultIsThrownAsItIs) {
  ChaosFaultOptions o;
  o.chaos = on();
  const Shield shield = chaos::fault(o);
  EXPECT_THROW((void)shield.execute([] { return 1; }), ChaosInjectedError);
  EXPECT_THROW(shield.execute([] {}), ChaosInjectedError);
}

TEST(ChaosExecution, AnOutcomeReplacesTheFunctionsResult) {
  ChaosOutcomeOptions<int> o;
  o.chaos = on();
  o.result = 42;
  const Shield shield = chaos::outcome(o);
  int calls = 0;
  EXPECT_EQ(shield.execute([&calls] { return ++calls; }), 42);
  EXPECT_EQ(shield.execute_outcome([&calls] { return ++calls; }).value(), 42);
  EXPECT_EQ(calls, 0);
  // A function of another value type fails as invalid_result_type.
  try {
    (void)shield.execute([] { return 1.5; });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.error(), errc::invalid_result_type);
  }
}

TEST(ChaosExecution, LatencyBlocksASynchronousCallUntilTheClockMoves) {
  auto clock = ManualClock::create();
  ChaosLatencyOptions o;
  o.chaos = on();
  o.delay = 2s;
  const Shield shield = chaos::latency(o).with_clock(clock);
  std::atomic<int> calls{0};
  std::optional<int> result;
  std::thread caller([&] { result = shield.execute([&calls] { return ++calls; }); });
  clock->wait_for_sleepers(1);
  EXPECT_EQ(calls.load(), 0);
  clock->advance(2s);
  caller.join();
  EXPECT_EQ(result, 1);
}

TEST(ChaosExecution, ATimeoutOutsideCutsASynchronousLatencyShort) {
  auto clock = ManualClock::create();
  ChaosLatencyOptions o;
  o.chaos = on();
  o.delay = 10s;
  const Shield shield = Shield{}.timeout(1s).wrap(chaos::latency(o)).with_clock(clock);
  int calls = 0;
  std::optional<Outcome<int>> result;
  std::thread caller([&] { result = shield.execute_outcome([&calls] { return ++calls; }); });
  clock->wait_for_sleepers(1);
  clock->advance(1s);
  caller.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->error(), errc::timeout);
  EXPECT_EQ(calls, 0);
}

TEST(ChaosExecution, TheCallersStopTokenEndsASynchronousLatency) {
  auto clock = ManualClock::create();
  ChaosLatencyOptions o;
  o.chaos = on();
  o.delay = 10s;
  const Shield shield = chaos::latency(o).with_clock(clock);
  std::stop_source stop;
  std::optional<Outcome<int>> result;
  std::thread caller([&] { result = shield.execute_outcome([] { return 1; }, stop.get_token()); });
  clock->wait_for_sleepers(1);
  stop.request_stop();
  caller.join();
  ASSERT_TRUE(result.has_value());
  ASSERT_TRUE(result->has_error());
  EXPECT_TRUE(is_cancellation(result->error()));
}

TEST(ChaosExecution, SynchronousBehaviourBothKinds) {
  std::vector<std::string> order;
  ChaosBehaviorOptions plain;
  plain.chaos = on();
  plain.behavior = [&order](Context&) { order.emplace_back("plain"); };
  ChaosBehaviorOptions awaited;
  awaited.chaos = on();
  awaited.behavior = [&order](Context&) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);  // really suspends on the private io_context
    order.emplace_back("awaited");
  };
  const Shield shield = chaos::behavior(plain).wrap(chaos::behavior(awaited));
  EXPECT_EQ(shield.execute([&order] {
    order.emplace_back("function");
    return 3;
  }),
            3);
  shield.execute([&order] { order.emplace_back("void"); });
  EXPECT_EQ(order, (std::vector<std::string>{"plain", "awaited", "function", "plain", "awaited",
                                             "void"}));
  ChaosBehaviorOptions failing;
  failing.chaos = on();
  failing.behavior = [](Context&) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    throw std::domain_error("awaited failure");
  };
  int calls = 0;
  EXPECT_THROW((void)chaos::behavior(failing).execute([&calls] { return ++calls; }),
               std::domain_error);
  EXPECT_EQ(calls, 0);
}

TEST(ChaosExecution, AStopRequestedWhileAnAwaitedBehaviourRunsEndsTheCallBeforeTheFunction) {
  std::stop_source stop;
  ChaosBehaviorOptions b;
  b.chaos = on();
  b.behavior = [&stop](Context&) -> asio::awaitable<void> {
    stop.request_stop();  // the caller gives up while the behaviour runs; it ends normally
    co_return;
  };
  int calls = 0;
  const Outcome<int> out =
      chaos::behavior(b).execute_outcome([&calls] { return ++calls; }, stop.get_token());
  ASSERT_TRUE(out.has_error());
  EXPECT_EQ(out.error(), asio::error::operation_aborted);
  EXPECT_EQ(calls, 0);
}

// ---- asynchronous: completion handlers and coroutines ----------------------------------------------

/// Runs `shield` over an operation answering (no error, 5) and returns the handler's arguments.
std::pair<boost::system::error_code, int> run_callback(const Shield& shield, int& calls) {
  asio::io_context io;
  std::optional<std::pair<boost::system::error_code, int>> got;
  shield.execute_async(
      [&](auto token) {
        ++calls;
        return test::async_answer(io.get_executor(), {}, 5, std::move(token));
      },
      asio::bind_executor(io, [&](boost::system::error_code ec, int v) { got.emplace(ec, v); }));
  io.run();
  EXPECT_TRUE(got.has_value());
  return got.value_or(std::pair{boost::system::error_code{}, -1});
}

/// Runs `shield` over an awaitable factory answering 5 and returns its outcome.
Outcome<int> run_coroutine(const Shield& shield, int& calls) {
  asio::io_context io;
  std::optional<Outcome<int>> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          const int v = co_await shield.execute_async([&]() -> asio::awaitable<int> {
            ++calls;
            co_return 5;
          });
          got = Outcome<int>::from_value(v);
        } catch (const Error& e) {
          got = Outcome<int>::from_error(e.error());
        } catch (...) {
          got = Outcome<int>::from_exception(std::current_exception());
        }
      },
      asio::detached);
  io.run();
  EXPECT_TRUE(got.has_value());
  return got.value_or(Outcome<int>::from_value(-1));
}

// Only a coroutine behaviour needs the call's executor (StrategyTraits::needs_executor): with one,
// a handler without an associated executor is refused before anything runs; with a function it is
// served.
TEST(ChaosExecution, OnlyACoroutineBehaviourNeedsAnExecutor) {
  asio::io_context io;
  int behaved = 0;
  ChaosBehaviorOptions function;
  function.chaos = on();
  function.behavior = [&behaved](Context&) { ++behaved; };
  ChaosBehaviorOptions coroutine;
  coroutine.chaos = on();
  coroutine.behavior = [&behaved](Context&) -> asio::awaitable<void> {
    ++behaved;
    co_return;
  };
  const auto answer = [&io](auto token) {
    return test::async_answer(io.get_executor(), {}, 5, std::move(token));
  };
  std::promise<std::pair<boost::system::error_code, int>> served;
  chaos::behavior(function).execute_async(answer, [&served](boost::system::error_code ec, int v) {
    served.set_value({ec, v});
  });
  io.run();  // the operation's post, if it went to `io`
  // An event, not a timer: the delivery may come from the system executor's thread.
  const auto got = served.get_future().get();
  EXPECT_FALSE(got.first);
  EXPECT_EQ(got.second, 5);
  EXPECT_EQ(behaved, 1);
  std::promise<boost::system::error_code> refused;
  chaos::behavior(coroutine).execute_async(
      answer, [&refused](boost::system::error_code ec, int) { refused.set_value(ec); });
  EXPECT_EQ(refused.get_future().get(), make_error_code(errc::executor_required));
  EXPECT_EQ(behaved, 1);  // refused before the behaviour ran
}

TEST(ChaosExecution, EveryInjectionThroughACompletionHandler) {
  int calls = 0;
  EXPECT_EQ(run_callback(chaos::fault(reset_fault()), calls).first, asio::error::connection_reset);
  ChaosFaultOptions thrown;
  thrown.chaos = on();
  // An error-code completion cannot carry the exception.
  EXPECT_EQ(run_callback(chaos::fault(thrown), calls).first, errc::callback_exception);
  ChaosOutcomeOptions<int> o;
  o.chaos = on();
  o.result = 42;
  EXPECT_EQ(run_callback(chaos::outcome(o), calls), (std::pair{boost::system::error_code{}, 42}));
  EXPECT_EQ(calls, 0);

  ChaosLatencyOptions l;
  l.chaos = on();
  l.delay = 0s;
  int told = 0;
  l.chaos.on_injected = [&told](const ChaosEvent&) { ++told; };
  EXPECT_EQ(run_callback(chaos::latency(l), calls), (std::pair{boost::system::error_code{}, 5}));
  EXPECT_EQ(told, 1);
  ChaosBehaviorOptions b;
  b.chaos = on();
  b.behavior = [&told](Context& c) -> asio::awaitable<void> {
    EXPECT_EQ(c.attempt(), 0);
    co_await asio::post(asio::use_awaitable);
    ++told;
  };
  EXPECT_EQ(run_callback(chaos::behavior(b), calls), (std::pair{boost::system::error_code{}, 5}));
  EXPECT_EQ(told, 2);
  EXPECT_EQ(calls, 2);
}

TEST(ChaosExecution, EveryInjectionThroughACoroutine) {
  int calls = 0;
  EXPECT_EQ(run_coroutine(chaos::fault(reset_fault()), calls).error(),
            asio::error::connection_reset);
  ChaosFaultOptions thrown;
  thrown.chaos = on();
  const Outcome<int> t = run_coroutine(chaos::fault(thrown), calls);
  ASSERT_TRUE(t.has_exception());
  EXPECT_THROW(std::rethrow_exception(t.exception()), ChaosInjectedError);
  ChaosOutcomeOptions<int> o;
  o.chaos = on();
  o.result = 42;
  EXPECT_EQ(run_coroutine(chaos::outcome(o), calls).value(), 42);
  EXPECT_EQ(calls, 0);
  ChaosBehaviorOptions b;
  b.chaos = on();
  b.behavior = [](Context&) -> asio::awaitable<void> {
    co_await asio::post(asio::use_awaitable);
    throw std::domain_error("awaited failure");
  };
  const Outcome<int> failed = run_coroutine(chaos::behavior(b), calls);
  ASSERT_TRUE(failed.has_exception());
  EXPECT_THROW(std::rethrow_exception(failed.exception()), std::domain_error);
  EXPECT_EQ(calls, 0);
  ChaosLatencyOptions l;
  l.chaos = on();
  l.delay = 0s;
  EXPECT_EQ(run_coroutine(chaos::latency(l), calls).value(), 5);
  EXPECT_EQ(calls, 1);
}

TEST(ChaosExecution, LatencyHoldsAnAsynchronousCallOnARealLoopUntilTheClockMoves) {
  auto clock = ManualClock::create();
  asio::io_context io;
  ChaosLatencyOptions l;
  l.chaos = on();
  l.delay = 3s;
  int calls = 0;
  std::optional<int> got;
  chaos::latency(l).with_clock(clock).execute_async(
      [&](auto token) {
        ++calls;
        return test::async_answer(io.get_executor(), {}, 5, std::move(token));
      },
      asio::bind_executor(io, [&](boost::system::error_code, int v) { got = v; }));
  io.poll();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(clock->pending_deadlines().size(), 1u);
  clock->advance(2999ms);
  io.poll();
  EXPECT_EQ(calls, 0);
  clock->advance(1ms);
  io.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, 5);
}

TEST(ChaosExecution, TheCallersCancellationDuringAnAsynchronousBehaviourEndsTheCall) {
  asio::io_context io;
  asio::cancellation_signal cancel;
  ChaosBehaviorOptions b;
  b.chaos = on();
  b.behavior = [&cancel](Context&) -> asio::awaitable<void> {
    cancel.emit(asio::cancellation_type::terminal);  // the caller gives up meanwhile
    co_await asio::post(asio::use_awaitable);
  };
  int calls = 0;
  std::optional<boost::system::error_code> got;
  chaos::behavior(b).execute_async(
      [&](auto token) {
        ++calls;
        return test::async_answer(io.get_executor(), {}, 5, std::move(token));
      },
      asio::bind_cancellation_slot(
          cancel.slot(), asio::bind_executor(io, [&](boost::system::error_code ec, int) { got = ec; })));
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, asio::error::operation_aborted);
  EXPECT_EQ(calls, 0);
}

TEST(ChaosExecution, ATimeoutOutsideCancelsAnAsynchronousBehaviourAtOnce) {
  auto clock = ManualClock::create();
  asio::io_context io;
  asio::steady_timer hour(io, std::chrono::hours(1));
  ChaosBehaviorOptions b;
  b.chaos = on();
  bool behaviour_ended = false;
  b.behavior = [&](Context&) -> asio::awaitable<void> {
    co_await hour.async_wait(asio::use_awaitable);  // aborted by the timeout's cancellation
    behaviour_ended = true;
  };
  int calls = 0;
  std::optional<boost::system::error_code> got;
  Shield{}.timeout(1s).wrap(chaos::behavior(b)).with_clock(clock).execute_async(
      [&](auto token) {
        ++calls;
        return test::async_answer(io.get_executor(), {}, 5, std::move(token));
      },
      asio::bind_executor(io, [&](boost::system::error_code ec, int) { got = ec; }));
  io.poll();
  EXPECT_FALSE(got.has_value());
  clock->advance(1s);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value()) << "the timeout did not end the behaviour's wait";
  EXPECT_EQ(*got, errc::timeout);
  EXPECT_FALSE(behaviour_ended);
  EXPECT_EQ(calls, 0);
}

TEST(ChaosExecution, AnExecutionAbandonedDuringAnAsynchronousBehaviourEndsCleanly) {
  bool delivered = false;
  auto shield_owner = std::make_unique<Shield>();
  {
    asio::io_context io;
    ChaosBehaviorOptions b;
    b.chaos = on();
    // The timer lives in the coroutine's frame, which goes with the io_context.
    b.behavior = [](Context&) -> asio::awaitable<void> {
      asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
      co_await timer.async_wait(asio::use_awaitable);
    };
    *shield_owner = chaos::behavior(b);
    shield_owner->execute_async(
        [&](auto token) { return test::async_answer(io.get_executor(), {}, 5, std::move(token)); },
        asio::bind_executor(io, [&](boost::system::error_code, int) { delivered = true; }));
    io.poll();
  }  // the io_context goes with the behaviour's coroutine and the execution it holds
  EXPECT_FALSE(delivered);
  shield_owner.reset();  // the strategies outlive nothing of the execution (ASan checks)
}

// The scope is recorded by the first enabled chaos strategy: a fault behind a latency still sees
// the caller's scope after the wait, on a later turn of the loop, once the scope has ended.
TEST(ChaosExecution, TheScopeSurvivesAWaitBeforeTheScopedStrategy) {
  auto clock = ManualClock::create();
  asio::io_context io;
  ChaosLatencyOptions l;
  l.chaos = on();
  l.delay = 1s;
  ChaosFaultOptions f = reset_fault();
  f.chaos.environment = "staging";
  const Shield shield = chaos::latency(l).wrap(chaos::fault(f)).with_clock(clock);
  std::optional<boost::system::error_code> got;
  {
    ChaosScope scope{std::nullopt, "staging"};
    shield.execute_async(
        [&](auto token) { return test::async_answer(io.get_executor(), {}, 5, std::move(token)); },
        asio::bind_executor(io, [&](boost::system::error_code ec, int) { got = ec; }));
  }
  io.poll();
  clock->advance(1s);
  for (int i = 0; i < 10 && !got; ++i) {
    io.restart();
    io.poll();
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, asio::error::connection_reset);
}

TEST(ChaosExecution, ScopesEndingOutOfOrderLeaveNoDanglingScope) {
  auto a = std::make_unique<ChaosScope>("a", "env");
  auto b = std::make_unique<ChaosScope>("b");
  ASSERT_NE(ChaosScope::current(), nullptr);
  EXPECT_EQ(ChaosScope::current()->operation, "b");
  a.reset();  // the outer one first
  ASSERT_NE(ChaosScope::current(), nullptr);
  EXPECT_EQ(ChaosScope::current()->operation, "b");
  EXPECT_EQ(ChaosScope::current()->environment, "env");  // inherited when b began
  b.reset();
  EXPECT_EQ(ChaosScope::current(), nullptr);
}

// ---- threads ---------------------------------------------------------------------------------------

/// The samples of the injected executions of `n` calls per thread through one strategy seeded
/// `seed` at rate 0.5, from `threads` threads, sorted.
std::vector<double> injected_samples(int threads, int n, std::uint64_t seed) {
  std::mutex m;
  std::vector<double> samples;
  ChaosOutcomeOptions<int> o;
  o.chaos = on(0.5, seed);
  o.chaos.on_injected = [&](const ChaosEvent& e) {
    const std::lock_guard lock(m);
    samples.push_back(e.sample);
  };
  o.result = 1;
  const Shield shield = chaos::outcome(o);
  std::atomic<int> injected{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < n; ++i) {
        if (shield.execute([] { return 0; }) == 1) ++injected;
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(static_cast<std::size_t>(injected.load()), samples.size());
  std::sort(samples.begin(), samples.end());
  return samples;
}

TEST(ChaosExecution, ThreadsSharingASeededStrategyMakeTheSameDecisionsAsAMultiset) {
  const auto one_thread = injected_samples(1, 4000, 77);
  const auto four_threads = injected_samples(4, 1000, 77);
  EXPECT_EQ(one_thread, four_threads);
  EXPECT_GT(one_thread.size(), 1600u);
  EXPECT_LT(one_thread.size(), 2400u);
  EXPECT_TRUE(std::all_of(one_thread.begin(), one_thread.end(),
                          [](double s) { return s >= 0.0 && s < 0.5; }));
}

// ---- the documentation's example -----------------------------------------------------------------

// docs/chaos.md's staging switch: 10 % connection resets inside a retry, only where the scope's
// environment is "staging". The operation succeeds; what reaches the caller is always its value,
// and the retry absorbs the faults.
TEST(ChaosDocs, StagingSwitchInjectsOnlyInStaging) {
  ChaosFaultOptions faults;
  faults.chaos.enabled = true;
  faults.chaos.injection_rate = 0.1;
  faults.chaos.environment = "staging";
  faults.chaos.seed = 2024;
  faults.error = asio::error::connection_reset;
  std::atomic<int> injected{0};
  faults.chaos.on_injected = [&injected](const ChaosEvent&) { ++injected; };
  RetryOptions retries;
  retries.max_retries = 3;
  retries.backoff = Backoff::none();
  const Shield shield = Shield{}
                            .timeout(2s)
                            .retry(retries)
                            .wrap(chaos::fault(faults))
                            .with_clock(ManualClock::create());
  int calls = 0;
  auto run = [&](const char* env) {
    ChaosScope scope{std::nullopt, env};
    for (int i = 0; i < 1000; ++i) EXPECT_EQ(shield.execute([&calls] {
      ++calls;
      return 7;
    }), 7);
  };
  run("production");
  EXPECT_EQ(injected.load(), 0);
  EXPECT_EQ(calls, 1000);
  run("staging");
  EXPECT_EQ(calls, 2000);                  // every call reached the operation once in the end
  EXPECT_GT(injected.load(), 60);          // about 10 % of the ~1100 decisions
  EXPECT_LT(injected.load(), 160);
}

}  // namespace
}  // namespace kevlar
