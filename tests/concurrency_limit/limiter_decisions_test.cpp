// The concurrency limit's admission decisions through the strategy driver: one driver per call over
// one shield, so the calls share the limiter. Grants across executors, strands and threads, and the
// handoff's scheduling, stay in concurrency_limit_test.cpp.
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using testing::DriverAction;
using testing::Injection;
using testing::InjectionPoint;
using testing::StrategyDriver;
using Actions = std::vector<DriverAction>;

struct LimiterDecisions : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<ConcurrencyLimitStrategy> limiter;
  Shield shield;
  std::vector<std::unique_ptr<StrategyDriver<int>>> calls;

  void make(int max_concurrency, int max_queue, int* hooks = nullptr) {
    ConcurrencyLimitOptions o;
    o.max_concurrency = max_concurrency;
    o.max_queue = max_queue;
    if (hooks != nullptr) o.on_rejected = [hooks](const ConcurrencyLimitRejectedEvent&) { ++*hooks; };
    limiter = std::make_shared<ConcurrencyLimitStrategy>(o);
    shield = Shield{}.use(limiter);
  }
  StrategyDriver<int>& call() {
    calls.push_back(std::make_unique<StrategyDriver<int>>(shield, clock));
    calls.back()->start();
    return *calls.back();
  }
  void run_all() {
    for (auto& c : calls) c->run();
  }
};

TEST_F(LimiterDecisions, APermitRunsTheCallAndTheNextQueuesThenRunsOnTheRelease) {
  make(1, 1);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  StrategyDriver<int>& c = call();
  EXPECT_EQ(a.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_TRUE(b.take_actions().empty()) << "queued";
  EXPECT_EQ(c.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(c.outcome().error(), errc::concurrency_limit_exceeded);
  EXPECT_EQ(limiter->state().running, 1u);
  EXPECT_EQ(limiter->state().queued, 1u);

  a.succeed(0, 1);
  run_all();  // the grant reaches B on its own executor
  EXPECT_EQ(b.take_actions(), Actions{DriverAction::started(0)});
  EXPECT_EQ(limiter->state().running, 1u);
  EXPECT_EQ(limiter->state().queued, 0u);
  b.succeed(0, 2);
  EXPECT_EQ(limiter->state().running, 0u);
  EXPECT_EQ(b.outcome().value(), 2);
}

TEST_F(LimiterDecisions, ExactCapacityThreeRunFiveQueueSevenAreRejectedAndTheQueueIsFifo) {
  make(3, 5);
  for (int i = 0; i < 15; ++i) call();
  int rejected = 0;
  for (auto& c : calls) rejected += c->delivered() ? 1 : 0;
  EXPECT_EQ(rejected, 7);
  std::vector<std::size_t> order;
  for (int round = 0; round < 8; ++round) {
    // Complete the call that has run longest; record who starts.
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (calls[i]->attempts() == 1 && !calls[i]->delivered() &&
          std::find(order.begin(), order.end(), i) == order.end()) {
        order.push_back(i);
      }
    }
    const std::size_t oldest = order[static_cast<std::size_t>(round)];
    calls[oldest]->succeed(0, 0);
    run_all();
    EXPECT_LE(limiter->state().running, 3u);
  }
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST_F(LimiterDecisions, AFailedCallReturnsItsPermit) {
  make(1, 0);
  StrategyDriver<int>& a = call();
  a.fail(0, asio::error::connection_reset);
  StrategyDriver<int>& b = call();
  EXPECT_EQ(b.attempts(), 1u);
}

TEST_F(LimiterDecisions, CancellingAQueuedCallFreesItsPlaceAndIsNoRejection) {
  int hooks = 0;
  make(1, 1, &hooks);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  b.cancel();
  EXPECT_EQ(b.outcome().error(), asio::error::operation_aborted);
  EXPECT_EQ(b.attempts(), 0u) << "a cancelled queued call never runs";
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(hooks, 0);
  StrategyDriver<int>& c = call();  // the place is reusable
  StrategyDriver<int>& d = call();  // 1 running + 1 queued: rejected
  EXPECT_EQ(d.outcome().error(), errc::concurrency_limit_exceeded);
  EXPECT_EQ(hooks, 1);
  a.succeed(0, 0);
  run_all();
  EXPECT_EQ(c.attempts(), 1u);
}

TEST_F(LimiterDecisions, AnAbandonedRunningCallReturnsItsPermit) {
  make(1, 1);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  a.drop(0);
  run_all();
  EXPECT_EQ(b.attempts(), 1u) << "the permit went to the queued call";
}

TEST_F(LimiterDecisions, DestroyingADriverWhoseCallIsQueuedTakesItOutOfTheQueue) {
  make(1, 1);
  StrategyDriver<int>& a = call();
  {
    StrategyDriver<int> queued(shield, clock);
    queued.start();
    EXPECT_EQ(limiter->state().queued, 1u);
  }
  EXPECT_EQ(limiter->state().queued, 0u);
  a.succeed(0, 1);  // nothing to hand the permit to
  run_all();
  EXPECT_EQ(limiter->state().running, 0u);
  StrategyDriver<int>& b = call();
  EXPECT_EQ(b.attempts(), 1u);
}

TEST_F(LimiterDecisions, ARejectionIsReportedWithItsKindAndTheAccountingChanges) {
  make(1, 0);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  const auto rejected = b.events_of<Rejected>();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].kind, RejectionKind::concurrency_limit);
  const auto changes = a.events_of<LimiterStateChanged>();
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.front().running, 1u);
}

// Each step of a queued call (queued, granted, running) takes an injected failure or cancellation
// and the limiter's accounting returns to zero afterwards.
TEST_F(LimiterDecisions, EveryStepOfAQueuedCallSurvivesAnInjectedFailureOrCancellation) {
  make(1, 1);
  std::unique_ptr<StrategyDriver<int>> holder;
  const std::size_t runs = testing::inject_at_every_step<int>(
      [&] {
        // A call holding the permit, so that the driven call queues; it ends at the second step.
        holder = std::make_unique<StrategyDriver<int>>(shield, clock);
        holder->start();
        return shield;
      },
      [&](StrategyDriver<int>& d) {
        d.start();          // queued behind the holder
        holder->succeed(0, 0);
        d.run();            // granted
        d.succeed(0, 5);
      },
      [&](StrategyDriver<int>& d, const InjectionPoint& p) {
        if (!holder->delivered()) holder->succeed(0, 0);
        d.run();
        if (p.kind == Injection::none) {
          EXPECT_EQ(d.outcome().value(), 5);
        }
        EXPECT_EQ(limiter->state().running, 0u) << p.step;
        EXPECT_EQ(limiter->state().queued, 0u) << p.step;
      });
  EXPECT_EQ(runs, 1u + 2u * 2u);  // start and succeed are the driven call's steps
}

// The ledger's transitions without a semaphore (the test is the only thread, so it stands in
// for the slow-path lock): queueing behind a full limit, a release that must hand over, a
// release of more permits than are in use, the queue limit and closing.
TEST(LimiterLedger, ItQueuesHandsOverRefusesOverReleasesAndClosesWordByWord) {
  LimiterLedger l(1, 1);
  EXPECT_TRUE(l.try_acquire());
  EXPECT_FALSE(l.try_acquire()) << "the only permit is in use";
  EXPECT_FALSE(l.full()) << "a queue place is free";
  EXPECT_EQ(l.admit_locked(), Admission::queued);
  EXPECT_TRUE(l.full());
  EXPECT_EQ(l.admit_locked(), Admission::rejected) << "the queue is full";
  EXPECT_EQ(l.try_release(1), ReleaseStep::contended) << "a waiter must be handed the permit";
  EXPECT_EQ(l.release_locked(2), -1) << "two permits returned, one in use: nothing changes";
  EXPECT_EQ(l.snapshot().queued, 1u);
  EXPECT_EQ(l.release_locked(1), 1) << "handed to the waiter";
  EXPECT_EQ(l.in_use(), 1u) << "a handoff leaves the permit in use";
  EXPECT_EQ(l.snapshot().queued, 0u);
  EXPECT_EQ(l.try_release(2), ReleaseStep::refused);
  EXPECT_EQ(l.try_release(1), ReleaseStep::done);
  EXPECT_EQ(l.in_use(), 0u);
  EXPECT_EQ(l.admit_locked(), Admission::granted) << "a permit freed since the lock-free attempt";
  EXPECT_EQ(l.release_locked(1), 0) << "nobody waiting: the permit is freed";
  EXPECT_EQ(l.close_locked(), 0u);
  EXPECT_TRUE(l.full()) << "a closed ledger rejects every newcomer";
  EXPECT_FALSE(l.try_acquire());
  EXPECT_EQ(l.admit_locked(), Admission::closed);

  LimiterLedger unqueued(1, 0);
  EXPECT_FALSE(unqueued.full());
  EXPECT_TRUE(unqueued.try_acquire());
  EXPECT_TRUE(unqueued.full()) << "no free permit and no queue";
  EXPECT_EQ(unqueued.admit_locked(), Admission::rejected);
}

}  // namespace
}  // namespace kevlar
