// The engine's attempts from a user's strategy: docs/strategy-interface.md's worked example,
// compiled and run. Built-in and user strategies use the same interface.
#include <pending_ops.hpp>

#include <kevlar/kevlar.hpp>
#include <kevlar/queue_wait.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/system_executor.hpp>

#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

class FirstOfTwo final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "FirstOfTwo"; }
  kevlar::StrategyTraits traits() const noexcept override {
    kevlar::StrategyTraits t;
    t.role = kevlar::StrategyRole::reactive;  // judges outcomes with the clause in force
    t.needs_executor = true;
    t.asynchronous_only = true;
    return t;
  }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    layer.start_attempt();
    layer.start_attempt();
    return kevlar::Step::suspend;
  }
  kevlar::Step on_attempt_complete(kevlar::Layer& layer, std::uint32_t) override {
    if (!layer.handled()) return kevlar::Step::complete;  // a success: the other is cancelled
    // A handled failure: wait for the other one, or finish with this failure if it was the last.
    return layer.attempts_running() == 0 ? kevlar::Step::complete : kevlar::Step::suspend;
  }
};

struct UserAttempts : ::testing::Test {
  asio::io_context ioc;
  test::PendingOps ops;
  std::optional<error_code> ec;
  int value = 0;

  void start(const Shield& shield) {
    shield.execute_async(ops.attempt(), asio::bind_executor(ioc, [this](error_code e, int v) {
                           ec = e;
                           value = v;
                         }));
    ioc.poll();
  }
  void finish(std::size_t i, error_code e, int v = 0) {
    ops.complete(i, e, v);
    ioc.restart();
    ioc.poll();
  }
};

TEST_F(UserAttempts, TheFirstSuccessOfTwoWinsAndTheOtherIsCancelled) {
  start(Shield{}.use(std::make_shared<FirstOfTwo>()));
  ASSERT_EQ(ops.size(), 2u);
  finish(1, {}, 11);
  ASSERT_TRUE(ec.has_value());
  EXPECT_FALSE(*ec);
  EXPECT_EQ(value, 11);
  EXPECT_EQ(ops.at(0).cancellations.size(), 1u);
  EXPECT_EQ(ops.pending(), 0u);
}

TEST_F(UserAttempts, TwoHandledFailuresEndWithTheLast) {
  start(Shield{}.use(std::make_shared<FirstOfTwo>()));
  finish(0, make_error_code(boost::system::errc::connection_refused));
  EXPECT_FALSE(ec.has_value());
  finish(1, make_error_code(boost::system::errc::connection_reset));
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(boost::system::errc::connection_reset));
}

/// What a strategy racing attempts declares (the tests' strategies below).
kevlar::StrategyTraits racing_traits() noexcept {
  kevlar::StrategyTraits t;
  t.needs_executor = true;
  t.asynchronous_only = true;
  return t;
}

/// Misuse the engine refuses: run_inner, wait, queue or await while attempts run.
class Misuse final : public kevlar::Strategy {
 public:
  /// What it returns while its attempt runs.
  enum class Then : unsigned char { run_inner, wait, queue, await };
  explicit Misuse(Then then) : then_(then) {}
  /// What Then::queue waits in: a permit free, which a step performed would take.
  QueueSemaphore<> queue{1U};
  /// Set by what Then::await awaits, if it ever runs.
  bool awaited_ran = false;
  std::string describe() const override { return "Misuse"; }
  kevlar::StrategyTraits traits() const noexcept override { return racing_traits(); }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    layer.start_attempt();
    switch (then_) {
      case Then::wait:
        return layer.wait_for(std::chrono::seconds(1));
      case Then::queue:
        return Step::queue(queue);
      case Then::await:
        return layer.await([](bool* ran) -> boost::asio::awaitable<void> {
          *ran = true;
          co_return;
        }(&awaited_ran));
      case Then::run_inner:
        break;
    }
    return Step::run_inner;
  }

 private:
  Then then_;
};

TEST_F(UserAttempts, RunInnerWhileAttemptsRunFailsThePositionAndCancelsThem) {
  start(Shield{}.use(std::make_shared<Misuse>(Misuse::Then::run_inner)));
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(errc::callback_exception)) << "a std::logic_error outcome";
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops.at(0).cancellations.size(), 1u);
}

TEST_F(UserAttempts, WaitWhileAttemptsRunFailsThePosition) {
  start(Shield{}.use(std::make_shared<Misuse>(Misuse::Then::wait)));
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(errc::callback_exception));
}

TEST_F(UserAttempts, AQueueStepWhileAttemptsRunFailsThePositionAndTakesNoPermit) {
  auto misuse = std::make_shared<Misuse>(Misuse::Then::queue);
  start(Shield{}.use(misuse));
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(errc::callback_exception)) << "a std::logic_error outcome";
  EXPECT_EQ(misuse->queue.available(), 1U) << "the refused step waited in the queue";
}

TEST_F(UserAttempts, AnAwaitWhileAttemptsRunFailsThePositionAndNeverStartsTheCoroutine) {
  auto misuse = std::make_shared<Misuse>(Misuse::Then::await);
  start(Shield{}.use(misuse));
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(errc::callback_exception)) << "a std::logic_error outcome";
  EXPECT_FALSE(misuse->awaited_ran) << "the refused coroutine ran";
  // The refused coroutine's frame was released (AddressSanitizer reports a leak otherwise).
}

/// Starts two attempts and cancels the first by its id at once: the second's outcome is the call's.
class CancelFirst final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "CancelFirst"; }
  kevlar::StrategyTraits traits() const noexcept override { return racing_traits(); }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    const std::uint32_t a = layer.start_attempt();
    const std::uint32_t b = layer.start_attempt();
    ids = {a, b};
    started = layer.attempts_started();
    cancelled = layer.cancel_attempt(a);
    cancelled_unknown = layer.cancel_attempt(7);
    return kevlar::Step::suspend;
  }
  kevlar::Step on_attempt_complete(kevlar::Layer& layer, std::uint32_t id) override {
    reported.push_back(id);
    return layer.attempts_running() == 0 ? kevlar::Step::complete : kevlar::Step::suspend;
  }
  std::vector<std::uint32_t> ids, reported;
  std::uint32_t started = 0;
  bool cancelled = false;
  bool cancelled_unknown = true;
};

TEST_F(UserAttempts, ACancelledAttemptIsReportedAndTheOtherRunsOn) {
  auto strategy = std::make_shared<CancelFirst>();
  start(Shield{}.use(strategy));
  EXPECT_EQ(strategy->ids, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(strategy->started, 2u);
  EXPECT_TRUE(strategy->cancelled);
  EXPECT_FALSE(strategy->cancelled_unknown) << "no attempt 7 is running";
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops.at(0).cancellations.size(), 1u);
  EXPECT_TRUE(ops.at(1).cancellations.empty());
  ioc.restart();
  ioc.poll();  // the cancelled operation's aborted completion
  EXPECT_EQ(strategy->reported, (std::vector<std::uint32_t>{0}));
  finish(1, {}, 8);
  EXPECT_EQ(strategy->reported, (std::vector<std::uint32_t>{0, 1}));
  ASSERT_TRUE(ec.has_value());
  EXPECT_FALSE(*ec);
  EXPECT_EQ(value, 8) << "the last reported outcome";
}

/// One attempt, then, once it was reported, the inner part once more the ordinary way.
class AttemptThenRunInner final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "AttemptThenRunInner"; }
  kevlar::StrategyTraits traits() const noexcept override { return racing_traits(); }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    layer.start_attempt();
    return kevlar::Step::suspend;
  }
  kevlar::Step on_attempt_complete(kevlar::Layer&, std::uint32_t) override {
    return kevlar::Step::run_inner;  // allowed: no attempt is left unreported
  }
  kevlar::Step on_inner_complete(kevlar::Layer& layer) override {
    started_after = layer.attempts_started();
    return kevlar::Step::complete;
  }
  std::uint32_t started_after = 99;
};

TEST_F(UserAttempts, RunInnerIsAllowedOnceEveryAttemptWasReported) {
  auto strategy = std::make_shared<AttemptThenRunInner>();
  start(Shield{}.use(strategy));
  ASSERT_EQ(ops.size(), 1u);
  finish(0, make_error_code(boost::system::errc::connection_refused));
  ASSERT_EQ(ops.size(), 2u) << "the inner part ran again, in the execution itself";
  finish(1, {}, 3);
  ASSERT_TRUE(ec.has_value());
  EXPECT_FALSE(*ec);
  EXPECT_EQ(value, 3);
  EXPECT_EQ(strategy->started_after, 0u) << "the layer is no longer parked";
}

/// Starts an attempt from a synchronous execution (not declared asynchronous_only).
class SyncStarter final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "SyncStarter"; }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    layer.start_attempt();
    return kevlar::Step::suspend;
  }
};

TEST(UserAttemptsSync, StartingAnAttemptInASynchronousExecutionThrows) {
  EXPECT_THROW((void)Shield{}.use(std::make_shared<SyncStarter>()).execute([] { return 1; }),
               std::logic_error);
}

TEST(UserAttemptsSync, TheRefusalSaysWhatTheStrategyNeeds) {
  try {
    (void)Shield{}.use(std::make_shared<SyncStarter>()).execute([] { return 1; });
    FAIL() << "a synchronous execution started an attempt";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("needs an asynchronous execution"), std::string::npos)
        << e.what();
  }
}

/// Uses the attempt queries and cancellations without having started an attempt: they concern
/// no attempt, in either kind of execution.
class QueriesWithoutAttempts final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "QueriesWithoutAttempts"; }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    layer.cancel_attempts();  // nothing to cancel: a no-op
    cancelled = layer.cancel_attempt(0);
    started = layer.attempts_started();
    running = layer.attempts_running();
    return kevlar::Step::run_inner;
  }
  bool cancelled = true;
  std::uint32_t started = 99;
  std::uint32_t running = 99;
};

TEST(UserAttemptsSync, QueriesAndCancellationsWithoutAttemptsConcernNone) {
  auto strategy = std::make_shared<QueriesWithoutAttempts>();
  EXPECT_EQ(Shield{}.use(strategy).execute([] { return 4; }), 4);
  EXPECT_FALSE(strategy->cancelled);
  EXPECT_EQ(strategy->started, 0u);
  EXPECT_EQ(strategy->running, 0u);
}

TEST_F(UserAttempts, QueriesAndCancellationsWithoutAttemptsConcernNone) {
  auto strategy = std::make_shared<QueriesWithoutAttempts>();
  start(Shield{}.use(strategy));
  EXPECT_FALSE(strategy->cancelled);
  EXPECT_EQ(strategy->started, 0u);
  EXPECT_EQ(strategy->running, 0u);
  ASSERT_EQ(ops.size(), 1u) << "the inner part runs the ordinary way";
  EXPECT_TRUE(ops.at(0).cancellations.empty());
  finish(0, {}, 6);
  ASSERT_TRUE(ec.has_value());
  EXPECT_FALSE(*ec);
  EXPECT_EQ(value, 6);
}

TEST(UserAttemptsExecutor, StartingAnAttemptForAHandlerWithoutAnExecutorFails) {
  // SyncStarter does not declare needs_executor: the shield accepts the plain callback, and the
  // engine refuses to start attempts that would complete on the system executor's threads.
  test::PendingOps ops;
  std::promise<error_code> got;
  Shield{}.use(std::make_shared<SyncStarter>())
      .execute_async(ops.attempt(), [&](error_code e, int) { got.set_value(e); });
  // The completion runs on the system executor's thread: wait for it (an event, not a timer).
  EXPECT_EQ(got.get_future().get(), make_error_code(errc::callback_exception))
      << "a std::logic_error outcome";
  EXPECT_EQ(ops.size(), 0u);
}

TEST_F(UserAttempts, APrepareThatThrowsStartsNoAttempt) {
  class Throwing final : public kevlar::Strategy {
   public:
    std::string describe() const override { return "Throwing"; }
    kevlar::StrategyTraits traits() const noexcept override { return racing_traits(); }
    kevlar::Step on_start(kevlar::Layer& layer) override {
      layer.start_attempt([](Context&) { throw std::runtime_error("prepare"); });
      return kevlar::Step::suspend;
    }
  };
  start(Shield{}.use(std::make_shared<Throwing>()));
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(errc::callback_exception));
  EXPECT_EQ(ops.size(), 0u);
}

}  // namespace
}  // namespace kevlar
