// A user strategy that uses all three things the interface offers in one execution: a wait on the
// shield's clock, an awaited coroutine, and two attempts at once. docs/strategy-interface.md ("A
// worked strategy: wait, await, two attempts") shows the class below as it is here, compiled and
// run. Time moves only by ManualClock::advance; the io_context is polled by hand.
#include <boom.hpp>
#include <pending_ops.hpp>

#include <kevlar/clock.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

// ---- the strategy, as docs/strategy-interface.md shows it --------------------------------------

struct CanaryFrame {
  enum class Stage : unsigned char { settling, asking };
  Stage stage = Stage::settling;  // which of the two waits ended in wait_complete
  bool admitted = false;          // the hook's answer, written by on_value
};

class Canary final : public kevlar::BasicStrategy<Canary, CanaryFrame> {
 public:
  struct Options {
    kevlar::Clock::duration settle{};  // how long to wait before asking
  };
  using Ask = std::function<boost::asio::awaitable<bool>()>;
  Canary(Options options, Ask ask) : options_(options), ask_(std::move(ask)) {}

  std::string describe() const override { return "Canary"; }
  kevlar::StrategyTraits strategy_traits() const noexcept {  // frame_size is filled in for you
    kevlar::StrategyTraits t;
    t.role = kevlar::StrategyRole::reactive;  // judges the attempts with the clause in force
    t.needs_executor = true;     // attempts complete, and cancel each other, on the executor
    t.asynchronous_only = true;  // start_attempt needs an asynchronous execution
    return t;
  }

  kevlar::Step start(kevlar::Layer& layer, Frame&) {
    // The frame is value-initialised: its stage is Stage::settling.
    return layer.wait_for(options_.settle);
  }

  kevlar::Step wait_complete(kevlar::Layer& layer, Frame& f, const boost::system::error_code& ec) {
    if (f.stage == Frame::Stage::settling) {
      if (ec) {  // operation_aborted: cancelled while settling
        layer.outcome().set_error(ec);
        return kevlar::Step::complete;
      }
      f.stage = Frame::Stage::asking;
      // on_value writes the frame where the coroutine ends, before wait_complete runs again.
      return layer.await(ask_(), [&f](bool yes) { f.admitted = yes; });
    }
    if (ec) {  // errc::callback_exception: the hook threw; its exception is the outcome
      if (layer.cancelled_from_outside() && layer.outcome().is_cancellation()) {
        layer.outcome().set_error(boost::asio::error::operation_aborted);
      }
      return kevlar::Step::complete;
    }
    if (!f.admitted) {
      layer.outcome().set_error(boost::asio::error::no_permission);  // refused: nothing runs
      return kevlar::Step::complete;
    }
    layer.start_attempt();
    layer.start_attempt();
    // Suspend even if an attempt already ended inside start_attempt (a strategy inside rejected
    // it): its end is reported through attempt_complete once this callback has returned.
    return kevlar::Step::suspend;
  }

  kevlar::Step attempt_complete(kevlar::Layer& layer, Frame&, std::uint32_t) {
    if (!layer.handled()) return kevlar::Step::complete;  // it wins: the other one is cancelled
    // A handled failure: wait for the other attempt, or finish with this failure if it was last.
    return layer.attempts_running() == 0 ? kevlar::Step::complete : kevlar::Step::suspend;
  }
  // inner_complete and finish are left out: the engine never calls them.

 private:
  Options options_;
  Ask ask_;
};

// ---- the tests ----------------------------------------------------------------------------------

/// What the user's hook answers.
enum class Reply : unsigned char { yes, no, throws };

/// The user's hook: counts its calls, suspends once on the executor, then answers `reply`.
asio::awaitable<bool> ask(int* asked, Reply reply) {
  ++*asked;
  co_await asio::post(asio::use_awaitable);
  if (reply == Reply::throws) throw test::Boom(1);
  co_return reply == Reply::yes;
}

struct WorkedStrategy : ::testing::Test {
  static constexpr Clock::duration settle = std::chrono::milliseconds(50);

  asio::io_context ioc;
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  test::PendingOps ops;
  Reply reply = Reply::yes;  ///< read when the hook is called, after the settle delay
  int asked = 0;             ///< calls of the hook
  const Shield shield = Shield{}
                            .use(std::make_shared<Canary>(Canary::Options{.settle = settle},
                                                          [this] { return ask(&asked, reply); }))
                            .with_clock(clock);

  int delivered = 0;
  std::optional<error_code> ec;
  int value = 0;

  /// Starts one execution of `shield` over `ops`, its handler bound to `slot` (if connected).
  void start(asio::cancellation_slot slot = {}) {
    shield.execute_async(
        ops.attempt(),
        asio::bind_cancellation_slot(slot, asio::bind_executor(ioc, [this](error_code e, int v) {
                                       ++delivered;
                                       ec = e;
                                       value = v;
                                     })));
    run();
  }
  /// Runs what is ready on the io_context, and what that makes ready, without blocking.
  void run() {
    ioc.restart();
    ioc.poll();
  }
  void advance(Clock::duration d) {
    clock->advance(d);
    run();
  }
  void finish(std::size_t i, error_code e, int v = 0) {
    ops.complete(i, e, v);
    run();
  }
};

TEST_F(WorkedStrategy, WaitsThenAsksThenRacesTwoAttemptsAndTheFirstSuccessWins) {
  const Clock::time_point t0 = clock->now();
  start();
  EXPECT_EQ(clock->pending_deadlines(), std::vector<Clock::time_point>{t0 + settle})
      << "the settle wait is on the shield's clock";
  advance(settle - std::chrono::nanoseconds(1));
  EXPECT_EQ(asked, 0) << "the hook ran before the settle delay passed";
  EXPECT_EQ(ops.size(), 0U) << "the operation ran before the settle delay passed";
  advance(std::chrono::nanoseconds(1));
  EXPECT_EQ(asked, 1);
  ASSERT_EQ(ops.size(), 2U) << "two attempts in flight";
  EXPECT_EQ(ops.pending(), 2U);
  EXPECT_EQ(delivered, 0);

  finish(1, {}, 11);
  ASSERT_EQ(delivered, 1);
  ASSERT_TRUE(ec.has_value());
  EXPECT_FALSE(*ec);
  EXPECT_EQ(value, 11);
  ASSERT_EQ(ops.at(0).cancellations.size(), 1U) << "the other attempt was not cancelled";
  EXPECT_EQ(ops.at(0).cancellations[0], asio::cancellation_type::terminal);
  EXPECT_TRUE(ops.at(1).cancellations.empty());
  EXPECT_EQ(ops.pending(), 0U);
  EXPECT_EQ(clock->pending_timers(), 0U);
  EXPECT_EQ(asked, 1);
}

TEST_F(WorkedStrategy, AHookThatSaysNoRefusesTheCallAndTheOperationNeverRuns) {
  reply = Reply::no;
  start();
  advance(settle);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(ops.size(), 0U) << "a refused call ran its operation";
  ASSERT_EQ(delivered, 1);
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, asio::error::no_permission);
}

TEST_F(WorkedStrategy, AHookThatThrowsFailsTheCallAndStartsNoAttempt) {
  reply = Reply::throws;
  start();
  advance(settle);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(ops.size(), 0U) << "an attempt started after the hook threw";
  ASSERT_EQ(delivered, 1);
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(errc::callback_exception)) << "the hook's exception, as a code";
}

TEST_F(WorkedStrategy, TwoHandledFailuresEndWithTheLastOnceBothCompleted) {
  start();
  advance(settle);
  ASSERT_EQ(ops.size(), 2U);
  finish(0, make_error_code(boost::system::errc::connection_refused));
  EXPECT_EQ(delivered, 0) << "a handled failure ended the race while the other attempt ran";
  EXPECT_TRUE(ops.at(1).cancellations.empty()) << "a handled failure cancelled the other attempt";
  finish(1, make_error_code(boost::system::errc::connection_reset), 5);
  ASSERT_EQ(delivered, 1);
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, make_error_code(boost::system::errc::connection_reset));
  EXPECT_EQ(value, 5) << "the last failure's value travels with its error";
  EXPECT_EQ(ops.pending(), 0U);
}

TEST_F(WorkedStrategy, TheCallersCancellationWhileSettlingEndsTheCallBeforeTheHook) {
  asio::cancellation_signal signal;
  start(signal.slot());
  ASSERT_EQ(clock->pending_timers(), 1U);
  signal.emit(asio::cancellation_type::terminal);
  run();
  ASSERT_EQ(delivered, 1);
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(*ec, asio::error::operation_aborted);
  EXPECT_EQ(clock->pending_timers(), 0U);
  advance(settle);
  EXPECT_EQ(asked, 0) << "the hook ran after the call was cancelled";
  EXPECT_EQ(ops.size(), 0U);
  EXPECT_EQ(delivered, 1);
}

}  // namespace
}  // namespace kevlar
