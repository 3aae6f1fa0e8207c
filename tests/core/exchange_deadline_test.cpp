// Layer::exchange_deadline: a strategy that sets the deadline code sees (Context::deadline(),
// Context::cancelled()) without owning an expiry of its own. The engine honours it as it honours
// a timeout's: a synchronous wait ends at it, and an asynchronous execution starts no attempt
// once it has passed. Time is a ManualClock; nothing sleeps.
#include "core/test_strategies.hpp"

#include <pending_ops.hpp>

#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <atomic>
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

/// Sets the context's deadline `budget` after its start with exchange_deadline, and restores the
/// one before it when it finishes. It cancels nothing itself.
class Budget final : public BasicStrategy<Budget, Clock::time_point> {
 public:
  explicit Budget(Clock::duration budget) : budget_(budget) {}
  std::string describe() const override { return "Budget"; }
  Step start(Layer& layer, Clock::time_point& previous) {
    previous = layer.exchange_deadline(layer.clock().now() + budget_);
    return Step::run_inner;
  }
  void finish(Layer& layer, Clock::time_point& previous) noexcept {
    restored_from = layer.exchange_deadline(previous);
  }
  Clock::time_point restored_from{};

 private:
  Clock::duration budget_;
};

/// Runs its inner part again after a wait of `delay`, up to `times` times, after any failure: a
/// retry without the retry strategy's own deadline rule (which stops before a wait that would
/// end past the deadline), so that the engine's handling of the deadline is what is tested.
class Redo final : public BasicStrategy<Redo, int> {
 public:
  Redo(Clock::duration delay, int times) : delay_(delay), times_(times) {}
  std::string describe() const override { return "Redo"; }
  Step start(Layer&, int& used) {
    used = 0;
    return Step::run_inner;
  }
  Step inner_complete(Layer& layer, int& used) {
    // A cancellation (the engine refusing an attempt past the deadline) ends it.
    if (!layer.outcome().failed() || used >= times_ || detail::cancelled_meanwhile(layer)) {
      return Step::complete;
    }
    ++used;
    return layer.wait_for(delay_);
  }
  Step wait_complete(Layer& layer, int&, const boost::system::error_code& ec) {
    if (ec) {
      layer.outcome().set_error(ec);
      return Step::complete;
    }
    return Step::run_inner;
  }

 private:
  Clock::duration delay_;
  int times_;
};

/// Sets its own deadline with exchange_deadline (unless the one in force is earlier) and, in
/// inner_complete, asks whether the outcome came from outside before it restores the previous
/// deadline.
class AsksBeforeRestoring final : public BasicStrategy<AsksBeforeRestoring, Clock::time_point> {
 public:
  explicit AsksBeforeRestoring(Clock::duration budget) : budget_(budget) {}
  std::string describe() const override { return "AsksBeforeRestoring"; }
  Step start(Layer& layer, Clock::time_point& previous) {
    previous = layer.exchange_deadline(
        std::min(layer.clock().now() + budget_, layer.context().deadline()));
    return Step::run_inner;
  }
  Step inner_complete(Layer& layer, Clock::time_point& previous) {
    from_outside = layer.cancelled_from_outside();
    layer.exchange_deadline(previous);
    return Step::complete;
  }
  std::optional<bool> from_outside;

 private:
  Clock::duration budget_;
};

std::shared_ptr<Redo> every(Clock::duration delay, int times) {
  return std::make_shared<Redo>(delay, times);
}

const error_code refused = make_error_code(boost::system::errc::connection_refused);

struct ExchangeDeadline : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  asio::io_context ioc;
  test::PendingOps ops;
  std::optional<error_code> result;

  void start(const Shield& shield) {
    shield.execute_async(ops.attempt(),
                         asio::bind_executor(ioc, [this](error_code ec, int) { result = ec; }));
    poll();
  }
  void poll() {
    ioc.restart();
    ioc.poll();
  }

  /// A synchronous call that always fails, under a 1 s budget, retried after `retry_wait`: the
  /// clock moves 1 s once the caller sleeps in the retry's wait. Returns the outcome and counts
  /// the attempts.
  Outcome<int> run_past_the_budget(Clock::duration retry_wait, int& attempts) {
    const Shield shield =
        Shield{}.use(std::make_shared<Budget>(1s)).use(every(retry_wait, 3)).with_clock(clock);
    std::atomic<int> count = 0;
    std::optional<Outcome<int>> outcome;
    std::jthread caller([&] {
      outcome = shield.execute_outcome([&]() -> int {
        ++count;
        throw std::runtime_error("refused");
      });
    });
    clock->wait_for_sleepers(1);
    clock->advance(1s);
    caller.join();
    attempts = count.load();
    EXPECT_TRUE(outcome.has_value());
    return outcome.value_or(Outcome<int>::from_value(-1));
  }
};

TEST_F(ExchangeDeadline, TheOperationSeesTheDeadlineAndTheStrategyRestoresThePreviousOne) {
  auto budget = std::make_shared<Budget>(5s);
  const Clock::time_point start = clock->now();
  std::optional<Clock::time_point> seen;
  const int v = Shield{}.use(budget).with_clock(clock).execute([&](Context& ctx) {
    seen = ctx.deadline();
    return 3;
  });
  EXPECT_EQ(v, 3);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(*seen, start + 5s);
  EXPECT_EQ(budget->restored_from, start + 5s) << "its own deadline was in force until it ended";
}

TEST_F(ExchangeDeadline, AnAsynchronousExecutionStartsNoAttemptOnceTheDeadlinePassed) {
  // The first attempt fails at once; the retry waits 2 s, past the 1 s budget: its next attempt
  // is never started and the execution fails as a cancellation.
  start(Shield{}.use(std::make_shared<Budget>(1s)).use(every(2s, 3)).with_clock(clock));
  ASSERT_EQ(ops.size(), 1u);
  ops.complete(0, refused);
  poll();
  EXPECT_FALSE(result.has_value()) << "the retry waits";
  clock->advance(2s);
  poll();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, asio::error::operation_aborted);
  EXPECT_EQ(ops.size(), 1u) << "no attempt started past the deadline";
}

TEST_F(ExchangeDeadline, BeforeTheDeadlineTheNextAttemptStarts) {
  start(Shield{}.use(std::make_shared<Budget>(10s)).use(every(2s, 3)).with_clock(clock));
  ops.complete(0, refused);
  poll();
  clock->advance(2s);
  poll();
  ASSERT_EQ(ops.size(), 2u);
  ops.complete(1, {}, 1);
  poll();
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(*result);
}

TEST_F(ExchangeDeadline, ASynchronousWaitEndsAtTheDeadlineAsACancellation) {
  int attempts = 0;
  const Outcome<int> outcome = run_past_the_budget(1h, attempts);  // the wait, cut to 1 s
  EXPECT_EQ(attempts, 1);
  ASSERT_TRUE(outcome.has_error()) << "the cut wait ends the retry as a cancellation";
  EXPECT_EQ(outcome.error(), asio::error::operation_aborted);
}

TEST_F(ExchangeDeadline, CodeSeesCancellationOnlyOnceTheDeadlineIsReached) {
  const Outcome<int> o = Shield{}
                             .use(std::make_shared<Budget>(5s))
                             .with_clock(clock)
                             .execute_outcome([&](Context& ctx) {
                               EXPECT_FALSE(ctx.cancelled()) << "the deadline is ahead";
                               EXPECT_NO_THROW(ctx.throw_if_cancelled());
                               clock->advance(4s);
                               EXPECT_FALSE(ctx.cancelled());
                               clock->advance(1s);
                               EXPECT_TRUE(ctx.cancelled()) << "due at the deadline itself";
                               ctx.throw_if_cancelled();
                               return 1;
                             });
  ASSERT_TRUE(o.has_exception());
  try {
    std::rethrow_exception(o.exception());
  } catch (const Error& e) {
    EXPECT_EQ(e.error(), asio::error::operation_aborted);
  }
}

TEST_F(ExchangeDeadline, ASynchronousWaitDueAtTheDeadlineEndsAsACancellation) {
  // The wait is not cut short (it ends when it was due), but the deadline is due at the same
  // moment: no attempt may start then.
  int attempts = 0;
  const Outcome<int> outcome = run_past_the_budget(1s, attempts);
  EXPECT_EQ(attempts, 1);
  ASSERT_TRUE(outcome.has_error());
  EXPECT_EQ(outcome.error(), asio::error::operation_aborted);
}

// A synchronous strategy's own deadline, set with exchange_deadline, is not a cancellation from
// outside for it, alone or inside a longer timeout (whose deadline, owned, is outer for it).
TEST_F(ExchangeDeadline, ASynchronousStrategysOwnDeadlineIsNotACancellationFromOutside) {
  for (const bool inside_a_timeout : {false, true}) {
    SCOPED_TRACE(inside_a_timeout ? "inside a longer timeout" : "alone");
    const auto own = std::make_shared<AsksBeforeRestoring>(1s);
    const Shield shield = inside_a_timeout ? Shield{}.timeout(10s).use(own).with_clock(clock)
                                           : Shield{}.use(own).with_clock(clock);
    const Outcome<int> o = shield.execute_outcome([&](Context& ctx) -> int {
      clock->advance(1s);
      ctx.throw_if_cancelled();
      return 1;
    });
    EXPECT_FALSE(o.has_value());
    ASSERT_TRUE(own->from_outside.has_value());
    EXPECT_FALSE(*own->from_outside) << "its own deadline passed, nobody else's";
  }
}

// The control: the same strategy inside a shorter timeout leaves the timeout's deadline in force,
// and hears it, owned outside it, as a cancellation from outside.
TEST_F(ExchangeDeadline, ASynchronousStrategyHearsAnOuterTimeoutsDeadlineAsFromOutside) {
  const auto own = std::make_shared<AsksBeforeRestoring>(1h);
  const Shield shield = Shield{}.timeout(1s).use(own).with_clock(clock);
  const Outcome<int> o = shield.execute_outcome([&](Context&) -> int {
    clock->advance(1s);
    throw Error(asio::error::operation_aborted);
  });
  EXPECT_FALSE(o.has_value());
  ASSERT_TRUE(own->from_outside.has_value());
  EXPECT_TRUE(*own->from_outside);
}

}  // namespace
}  // namespace kevlar
