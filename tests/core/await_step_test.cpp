// Layer::await: a strategy awaits a coroutine as one step. The callback only leaves the coroutine
// in the execution; the shell starts it once the callback has returned (spawned on the
// execution's executor, or run to completion on the calling thread in a synchronous execution),
// and its end reaches on_wait_complete: success after on_value, or errc::callback_exception with
// the coroutine's exception as the outcome.
#include "test_strategies.hpp"

#include <alloc_counter.hpp>
#include <boom.hpp>
#include <spin_until.hpp>

#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

/// Awaits `hook()` in on_start, with its int result written to the frame by on_value; then runs
/// the inner part with the result added to the operation's value (a failed hook completes the
/// position, its exception the outcome). Records what on_wait_complete saw.
class Awaiting final : public Strategy {
 public:
  using Hook = std::function<asio::awaitable<int>()>;
  explicit Awaiting(Hook hook) : hook_(std::move(hook)) {}
  [[nodiscard]] std::string describe() const override { return "Awaiting"; }
  [[nodiscard]] StrategyTraits traits() const noexcept override {
    StrategyTraits t;
    t.frame_size = sizeof(Frame);
    return t;
  }

  Step on_start(Layer& layer) override {
    Frame* f = ::new (layer.frame()) Frame{};
    ++started_;
    return layer.await(hook_(), [f](int v) { f->value = v; });
  }
  Step on_wait_complete(Layer& layer, const error_code& ec) override {
    Frame& f = layer.frame_as<Frame>();
    {
      const std::lock_guard lock(m_);
      seen_.push_back(Seen{ec, f.value, std::this_thread::get_id()});
    }
    if (ec) return Step::complete;
    return Step::run_inner;
  }
  Step on_inner_complete(Layer& layer) override {
    Frame& f = layer.frame_as<Frame>();
    OutcomeRef out = layer.outcome();
    if (const int* v = out.value_if<int>()) out.set_value(*v + f.value.value_or(0));
    return Step::complete;
  }
  void on_finish(Layer& layer) noexcept override {
    layer.frame_as<Frame>().~Frame();
    ++finished_;
  }

  struct Seen {
    error_code ec;
    std::optional<int> value;  ///< what on_value received before on_wait_complete
    std::thread::id thread;
  };
  [[nodiscard]] std::vector<Seen> seen() const {
    const std::lock_guard lock(m_);
    return seen_;
  }
  [[nodiscard]] int started() const { return started_.load(); }
  [[nodiscard]] int finished() const { return finished_.load(); }

  struct Frame {
    std::optional<int> value;
  };

 private:
  Hook hook_;
  mutable std::mutex m_;
  std::vector<Seen> seen_;
  std::atomic<int> started_{0};
  std::atomic<int> finished_{0};
};

/// The operation: completes with 7 on its handler's executor.
auto answer_seven(asio::io_context& ioc) {
  return [&ioc](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&ioc](auto handler) {
          auto ex = asio::get_associated_executor(handler, ioc.get_executor());
          asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error_code(), 7); });
        },
        token);
  };
}

/// The same with an exception_ptr signature: a failure reaches the handler as the exception.
auto answer_seven_or_throw(asio::io_context& ioc) {
  return [&ioc](auto token) {
    return asio::async_initiate<decltype(token), void(std::exception_ptr, int)>(
        [&ioc](auto handler) {
          auto ex = asio::get_associated_executor(handler, ioc.get_executor());
          asio::post(ex,
                     [h = std::move(handler)]() mutable { std::move(h)(std::exception_ptr(), 7); });
        },
        token);
  };
}

asio::awaitable<int> returns(int v) {
  co_return v;
}

TEST(AwaitStep, AsynchronousCoroutineRunsAfterTheCallbackOnTheExecutorAndHandsOnItsValue) {
  asio::io_context ioc;
  std::vector<std::string> order;
  auto strategy = std::make_shared<Awaiting>([&]() -> asio::awaitable<int> {
    order.emplace_back("hook");
    co_await asio::post(asio::use_awaitable);  // a real suspension on the executor
    co_return 35;
  });
  const Shield shield = Shield{}.use(strategy);
  std::optional<int> result;
  shield.execute_async(answer_seven(ioc), asio::bind_executor(ioc, [&](error_code ec, int v) {
                         EXPECT_FALSE(ec);
                         result = v;
                       }));
  EXPECT_TRUE(order.empty()) << "the coroutine started inside execute_async";
  ioc.run();
  EXPECT_EQ(order, std::vector<std::string>{"hook"});
  ASSERT_EQ(result, 42) << "on_value's 35 plus the operation's 7";
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_FALSE(seen[0].ec);
  EXPECT_EQ(seen[0].value, 35) << "on_value ran before on_wait_complete";
  EXPECT_EQ(strategy->finished(), 1);
}

TEST(AwaitStep, TheCoroutineStartsOnlyOnceTheCallbackReturned) {
  // The coroutine reads a flag the callback sets after creating it, just before returning.
  asio::io_context ioc;
  std::vector<bool> returned;
  struct Probe final : Strategy {
    std::vector<bool>* returned;
    explicit Probe(std::vector<bool>* r) : returned(r) {}
    [[nodiscard]] std::string describe() const override { return "Probe"; }
    Step on_start(Layer& layer) override {
      flag = std::make_shared<bool>(false);
      Step step =
          layer.await([](std::shared_ptr<bool> f, std::vector<bool>* r) -> asio::awaitable<void> {
            r->push_back(*f);
            co_return;
          }(flag, returned));
      *flag = true;
      return step;
    }
    Step on_wait_complete(Layer&, const error_code& ec) override {
      return ec ? Step::complete : Step::run_inner;
    }
    std::shared_ptr<bool> flag;
  };
  const Shield shield = Shield{}.use(std::make_shared<Probe>(&returned));
  int calls = 0;
  for (int i = 0; i < 3; ++i) {
    shield.execute_async(answer_seven(ioc), asio::bind_executor(ioc, [&](error_code ec, int) {
                           EXPECT_FALSE(ec);
                           ++calls;
                         }));
    ioc.run();
    ioc.restart();
  }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(returned, (std::vector<bool>{true, true, true}));
  // And synchronously: the shell runs it after the callback, on the calling thread.
  EXPECT_EQ(shield.execute([] { return 7; }), 7);
  EXPECT_EQ(returned, (std::vector<bool>{true, true, true, true}));
}

TEST(AwaitStep, SynchronousCoroutineRunsToCompletionOnTheCallingThread) {
  std::thread::id ran_on;
  auto strategy = std::make_shared<Awaiting>([&]() -> asio::awaitable<int> {
    ran_on = std::this_thread::get_id();
    co_await asio::post(asio::use_awaitable);
    co_return 35;
  });
  const Shield shield = Shield{}.use(strategy);
  EXPECT_EQ(shield.execute([] { return 7; }), 42);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_FALSE(seen[0].ec);
  EXPECT_EQ(seen[0].thread, std::this_thread::get_id());
  EXPECT_EQ(strategy->finished(), 1);
}

TEST(AwaitStep, AThrowingCoroutineReportsCallbackExceptionWithItsExceptionAsTheOutcome) {
  auto strategy = std::make_shared<Awaiting>([]() -> asio::awaitable<int> {
    co_await asio::post(asio::use_awaitable);
    throw test::Boom(3);
  });
  const Shield shield = Shield{}.use(strategy);
  bool operation_ran = false;
  // Synchronous: the exception leaves execute.
  try {
    (void)shield.execute([&] {
      operation_ran = true;
      return 7;
    });
    ADD_FAILURE() << "no exception";
  } catch (const test::Boom& b) {
    EXPECT_EQ(b.n, 3);
  }
  EXPECT_FALSE(operation_ran);
  // Asynchronous: the handler receives it.
  asio::io_context ioc;
  std::exception_ptr caught;
  int delivered = 0;
  shield.execute_async(answer_seven_or_throw(ioc),
                       asio::bind_executor(ioc, [&](std::exception_ptr ep, int) {
                         caught = ep;
                         ++delivered;
                       }));
  ioc.run();
  ASSERT_EQ(delivered, 1);
  ASSERT_TRUE(caught);
  try {
    std::rethrow_exception(caught);
  } catch (const test::Boom& b) {
    EXPECT_EQ(b.n, 3);
  }
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 2U);
  for (const auto& s : seen) {
    EXPECT_EQ(s.ec, make_error_code(errc::callback_exception));
    EXPECT_FALSE(s.value.has_value()) << "on_value ran for a failed coroutine";
  }
  EXPECT_EQ(strategy->finished(), 2);
}

/// Awaits coroutines that note whether they ran, then misbehaves as told.
struct Misbehaving final : Strategy {
  enum class Then : unsigned char { throw_after_await, await_twice };
  explicit Misbehaving(Then t) : then(t) {}
  [[nodiscard]] std::string describe() const override { return "Misbehaving"; }
  static asio::awaitable<void> note(std::vector<int>* ran, int id) {
    ran->push_back(id);
    co_return;
  }
  Step on_start(Layer& layer) override {
    Step first = layer.await(note(&ran, 1));
    if (then == Then::throw_after_await) throw test::Boom(4);
    (void)first;
    return layer.await(note(&ran, 2));  // replaces the first, which never runs
  }
  Step on_wait_complete(Layer&, const error_code& ec) override {
    return ec ? Step::complete : Step::run_inner;
  }
  Then then;
  std::vector<int> ran;
};

TEST(AwaitStep, ACallbackThatThrowsAfterAwaitLeavesNoCoroutineBehind) {
  // The coroutine is released unstarted (AddressSanitizer reports its frame otherwise), and the
  // callback's exception is the outcome, in both shells.
  auto strategy = std::make_shared<Misbehaving>(Misbehaving::Then::throw_after_await);
  const Shield shield = Shield{}.use(strategy);
  EXPECT_THROW((void)shield.execute([] { return 1; }), test::Boom);
  asio::io_context ioc;
  std::exception_ptr caught;
  shield.execute_async(answer_seven_or_throw(ioc),
                       asio::bind_executor(ioc, [&](std::exception_ptr ep, int) { caught = ep; }));
  ioc.run();
  EXPECT_THROW(std::rethrow_exception(caught), test::Boom);
  EXPECT_TRUE(strategy->ran.empty()) << "a coroutine of a callback that threw ran";
}

TEST(AwaitStep, OfTwoAwaitsInOneCallbackOnlyTheLastRuns) {
  auto strategy = std::make_shared<Misbehaving>(Misbehaving::Then::await_twice);
  const Shield shield = Shield{}.use(strategy);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  asio::io_context ioc;
  std::optional<int> got;
  shield.execute_async(answer_seven(ioc), asio::bind_executor(ioc, [&](error_code ec, int v) {
                         EXPECT_FALSE(ec);
                         got = v;
                       }));
  ioc.run();
  EXPECT_EQ(got, 7);
  EXPECT_EQ(strategy->ran, (std::vector<int>{2, 2}));
}

TEST(AwaitStep, AThrowingOnValueCountsAsTheCoroutinesFailure) {
  struct ValueThrows final : Strategy {
    [[nodiscard]] std::string describe() const override { return "ValueThrows"; }
    Step on_start(Layer& layer) override {
      return layer.await(returns(5), [](int) { throw test::Boom(9); });
    }
    Step on_wait_complete(Layer&, const error_code& ec) override {
      seen = ec;
      return ec ? Step::complete : Step::run_inner;
    }
    error_code seen;
  };
  auto strategy = std::make_shared<ValueThrows>();
  const Shield shield = Shield{}.use(strategy);
  EXPECT_THROW((void)shield.execute([] { return 1; }), test::Boom);
  EXPECT_EQ(strategy->seen, make_error_code(errc::callback_exception));
}

TEST(AwaitStep, TheCallersCancellationReachesWhatTheCoroutineAwaits) {
  asio::io_context ioc;
  asio::steady_timer* timer_seen = nullptr;
  auto strategy = std::make_shared<Awaiting>([&]() -> asio::awaitable<int> {
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
    timer_seen = &timer;
    co_await timer.async_wait(asio::use_awaitable);  // only a cancellation ends it
    co_return 1;
  });
  const Shield shield = Shield{}.use(strategy);
  asio::cancellation_signal signal;
  std::optional<error_code> got;
  bool operation_ran = false;
  shield.execute_async(
      [&](auto token) {
        operation_ran = true;
        return answer_seven(ioc)(std::move(token));
      },
      asio::bind_cancellation_slot(
          signal.slot(), asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; })));
  while (timer_seen == nullptr && ioc.run_one() > 0) {
  }
  ASSERT_NE(timer_seen, nullptr) << "the coroutine never reached its wait";
  signal.emit(asio::cancellation_type::terminal);
  ioc.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, asio::error::operation_aborted);
  EXPECT_FALSE(operation_ran);
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].ec, make_error_code(errc::callback_exception)) << "the wait threw";
  EXPECT_EQ(strategy->finished(), 1);
}

TEST(AwaitStep, AnExecutionWhoseCoroutineNeverEndsIsAbandonedWithItsExecutor) {
  auto strategy = std::make_shared<Awaiting>([]() -> asio::awaitable<int> {
    asio::steady_timer timer(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await timer.async_wait(asio::use_awaitable);
    co_return 1;
  });
  const Shield shield = Shield{}.use(strategy);
  int delivered = 0;
  {
    asio::io_context ioc;
    shield.execute_async(answer_seven(ioc),
                         asio::bind_executor(ioc, [&](error_code, int) { ++delivered; }));
    ioc.poll();  // the coroutine now waits on its timer
    EXPECT_EQ(strategy->finished(), 0);
  }  // the io_context dies with the coroutine pending
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(strategy->started(), 1);
  EXPECT_EQ(strategy->finished(), 1) << "the abandoned execution's layer did not finish once";
  EXPECT_TRUE(strategy->seen().empty());
}

TEST(AwaitStep, AFailedSpawnFailsTheLayerWithTheException) {
  // Sweep every allocation of an asynchronous execution whose strategy awaits a coroutine: each
  // failure either leaves execute_async (before anything was pending) or fails the execution with
  // std::bad_alloc; never a lost or doubled completion.
  auto strategy = std::make_shared<Awaiting>([]() -> asio::awaitable<int> { co_return 35; });
  const Shield shield = Shield{}.use(strategy);
  bool saw_failed_layer = false;
  for (std::uint64_t n = 0;; ++n) {
    asio::io_context ioc;
    int delivered = 0;
    std::exception_ptr caught;
    std::optional<int> value;
    const testing::InjectedFailure r = testing::inject_allocation_failure(n, [&] {
      shield.execute_async(answer_seven_or_throw(ioc),
                           asio::bind_executor(ioc, [&](std::exception_ptr ep, int v) {
                             ++delivered;
                             caught = ep;
                             if (!ep) value = v;
                           }));
      // Asio's co_spawn, failing at its first dispatch, gives back outstanding work it never
      // counted and stops the io_context: the delivery is queued behind the stop.
      if (ioc.stopped()) ioc.restart();
      ioc.run();
    });
    if (!r.fired) {
      EXPECT_EQ(delivered, 1);
      EXPECT_EQ(value, 42);
      break;
    }
    if (r.threw) {
      EXPECT_EQ(delivered, 0) << "at allocation " << n;
      continue;
    }
    ASSERT_EQ(delivered, 1) << "at allocation " << n;
    if (caught) {
      try {
        std::rethrow_exception(caught);
      } catch (const std::bad_alloc&) {
        saw_failed_layer = true;
      } catch (...) {
        ADD_FAILURE() << "another exception at allocation " << n;
      }
    } else {
      EXPECT_EQ(value, 42) << "at allocation " << n;
    }
    ASSERT_LT(n, 200U) << "the sweep does not end";
  }
  EXPECT_TRUE(saw_failed_layer) << "no allocation failure reached the awaiting layer";
  EXPECT_EQ(strategy->started(), strategy->finished());
}

// Executions on one io_context run by two threads, each awaiting a coroutine that hops through the
// io_context: the coroutine often ends on the other thread. Every execution completes once, with
// its value (ThreadSanitizer runs this).
TEST(AwaitStepStress, TwoThreadsEndEachOthersCoroutines) {
  constexpr int calls = 2000;
  asio::io_context ioc(2);
  auto strategy = std::make_shared<Awaiting>([]() -> asio::awaitable<int> {
    co_await asio::post(asio::use_awaitable);
    co_return 35;
  });
  const Shield shield = Shield{}.use(strategy).use(std::make_shared<test::PassThrough>());
  std::atomic<int> completed{0}, wrong{0};
  test::run_posted_calls(ioc, 2, calls, completed, [&] {
    shield.execute_async(answer_seven(ioc), asio::bind_executor(ioc, [&](error_code ec, int v) {
                           if (ec || v != 42) ++wrong;
                           ++completed;
                         }));
  });
  ASSERT_EQ(completed.load(), calls);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(strategy->finished(), calls);
}

}  // namespace
}  // namespace kevlar
