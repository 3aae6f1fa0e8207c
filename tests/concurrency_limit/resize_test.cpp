// The concurrency limit's maximum changed at run time
// (ConcurrencyLimitStrategy::set_max_concurrency over LimiterLedger::resize_locked): growth grants
// the oldest queued calls at once, a shrink revokes no permit (those above the new limit retire as
// their calls finish), and no permit is lost or doubled when a change races grants, releases and
// cancellations.
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/error.hpp>
#include <kevlar/limiter_ledger.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using testing::DriverAction;
using testing::StrategyDriver;
using Actions = std::vector<DriverAction>;

struct LimiterResize : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<ConcurrencyLimitStrategy> limiter;
  Shield shield;
  std::vector<std::unique_ptr<StrategyDriver<int>>> calls;

  void make(int max_concurrency, int max_queue) {
    ConcurrencyLimitOptions o;
    o.max_concurrency = max_concurrency;
    o.max_queue = max_queue;
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
  [[nodiscard]] bool started(StrategyDriver<int>& c) {
    return c.take_actions() == Actions{DriverAction::started(0)};
  }
};

TEST_F(LimiterResize, GrowingGrantsTheOldestQueuedCallsUpToTheNewRoom) {
  make(1, 5);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  StrategyDriver<int>& c = call();
  StrategyDriver<int>& d = call();
  EXPECT_TRUE(started(a));
  EXPECT_EQ(limiter->state().queued, 3u);

  limiter->set_max_concurrency(3);
  run_all();  // the grants reach b and c on their executors
  EXPECT_TRUE(started(b)) << "the oldest waiter was not granted";
  EXPECT_TRUE(started(c));
  EXPECT_TRUE(d.take_actions().empty()) << "granted beyond the new room";
  const ConcurrencyLimitState s = limiter->state();
  EXPECT_EQ(s.running, 3u);
  EXPECT_EQ(s.queued, 1u);
  EXPECT_EQ(limiter->max_concurrency(), 3u);

  a.succeed(0, 1);  // a release hands its permit to the last waiter, as before
  run_all();
  EXPECT_TRUE(started(d));
  EXPECT_EQ(limiter->state().running, 3u);
  EXPECT_EQ(limiter->state().queued, 0u);
}

TEST_F(LimiterResize, ShrinkingStopsNoCallAndRetiresPermitsAsCallsFinish) {
  make(3, 5);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  StrategyDriver<int>& c = call();
  StrategyDriver<int>& d = call();
  EXPECT_TRUE(started(a));
  EXPECT_TRUE(started(b));
  EXPECT_TRUE(started(c));
  EXPECT_TRUE(d.take_actions().empty());

  limiter->set_max_concurrency(1);
  ConcurrencyLimitState s = limiter->state();
  EXPECT_EQ(s.running, 3u) << "a shrink revoked a running call's permit";
  EXPECT_EQ(s.available, 0u);
  EXPECT_EQ(limiter->max_concurrency(), 1u);

  a.succeed(0, 1);
  run_all();
  EXPECT_TRUE(d.take_actions().empty()) << "granted while two calls still ran above the limit";
  EXPECT_EQ(limiter->state().running, 2u);
  b.succeed(0, 2);
  run_all();
  EXPECT_TRUE(d.take_actions().empty()) << "granted while one call ran at the limit";
  EXPECT_EQ(limiter->state().running, 1u);
  c.succeed(0, 3);  // below the limit now: this release hands the permit on
  run_all();
  EXPECT_TRUE(started(d));
  s = limiter->state();
  EXPECT_EQ(s.running, 1u);
  EXPECT_EQ(s.queued, 0u);

  // A newcomer waits: the one permit is d's.
  StrategyDriver<int>& e = call();
  EXPECT_TRUE(e.take_actions().empty());
  d.succeed(0, 4);
  run_all();
  EXPECT_TRUE(started(e));
}

TEST_F(LimiterResize, TheQueueLimitHoldsAcrossAResize) {
  make(1, 1);
  StrategyDriver<int>& a = call();
  StrategyDriver<int>& b = call();
  EXPECT_TRUE(started(a));
  limiter->set_max_concurrency(1);  // no change: nothing granted, nothing rejected
  EXPECT_TRUE(b.take_actions().empty());
  StrategyDriver<int>& c = call();
  EXPECT_EQ(c.take_actions(), Actions{DriverAction::delivered()});
  EXPECT_EQ(c.outcome().error(), errc::concurrency_limit_exceeded);
  limiter->set_max_concurrency(2);
  run_all();
  EXPECT_TRUE(started(b));
  EXPECT_EQ(limiter->describe(), "ConcurrencyLimit(2, queue 1)");
}

TEST_F(LimiterResize, AnInvalidLimitIsRefusedAndChangesNothing) {
  make(2, 0);
  EXPECT_THROW(limiter->set_max_concurrency(0), std::invalid_argument);
  EXPECT_THROW(limiter->set_max_concurrency(-3), std::invalid_argument);
  EXPECT_EQ(limiter->max_concurrency(), 2u);
  EXPECT_EQ(limiter->state().available, 2u);
}

// Waiters on two io_context threads acquire with random cancellation and hold their permit for a
// few polls, while another thread resizes the limit between 1 and 6 and snapshots are read. At
// quiescence every permit is back (none lost, none doubled), and at no moment did more holders
// run than the largest limit set.
TEST(LimiterResizeStress, ResizesRacingGrantsReleasesAndCancellationsConservePermits) {
  constexpr int waiters_per_thread = 4000;
  constexpr LimiterLedger::count_type largest = 6;
  BasicUnpairedSemaphore<LimiterLedger> sem(2U, 64U);
  std::atomic<int> acquired{0}, aborted{0}, holders{0}, most_holders{0};
  std::atomic<bool> stop_resizing{false};

  asio::io_context contexts[2]{asio::io_context(1), asio::io_context(1)};
  auto waiter_thread = [&](unsigned seed) {
    asio::io_context& ioc = contexts[seed - 1];
    std::mt19937 rng(seed);
    std::vector<std::unique_ptr<asio::cancellation_signal>> sigs;
    sigs.reserve(waiters_per_thread);
    std::vector<int> held;  // permits this thread holds, released a few polls later
    int started = 0;
    while (started < waiters_per_thread) {
      for (int k = 0; k < 4 && started < waiters_per_thread; ++k, ++started) {
        sigs.push_back(std::make_unique<asio::cancellation_signal>());
        sem.async_acquire(asio::bind_cancellation_slot(
            sigs.back()->slot(), asio::bind_executor(ioc, [&](error_code ec) {
              if (ec) {
                EXPECT_TRUE(ec == asio::error::operation_aborted ||
                            ec == errc::concurrency_limit_exceeded)
                    << ec.message();
                aborted.fetch_add(1);
                return;
              }
              acquired.fetch_add(1);
              const int now = holders.fetch_add(1) + 1;
              int seen = most_holders.load();
              while (now > seen && !most_holders.compare_exchange_weak(seen, now)) {
              }
              held.push_back(1);
            })));
        if (rng() % 4 == 0) sigs.back()->emit(asio::cancellation_type::terminal);
      }
      ioc.poll();
      ioc.restart();
      // Give back about half of what is held: the holders' work is done.
      while (held.size() > static_cast<std::size_t>(rng() % 3)) {
        held.pop_back();
        holders.fetch_sub(1);
        EXPECT_TRUE(sem.release());
      }
    }
    for (auto& s : sigs) s->emit(asio::cancellation_type::terminal);
    ioc.run();
    while (!held.empty()) {
      held.pop_back();
      holders.fetch_sub(1);
      EXPECT_TRUE(sem.release());
    }
  };
  std::thread resizer([&] {
    std::mt19937 rng(7);
    while (!stop_resizing.load()) {
      const auto limit = static_cast<LimiterLedger::count_type>(1 + rng() % largest);
      EXPECT_TRUE(
          sem.adjust([limit](LimiterLedger& l) noexcept { return l.resize_locked(limit); }));
      const LimiterLedger::Counts c = sem.ledger().counts();
      // While anyone waits, every permit the limit allows is in use (a waiter is never left
      // behind a free permit) — read from one load, against a limit that may move meanwhile.
      if (c.queued != 0) {
        EXPECT_GE(c.in_use, 1u);
      }
    }
  });
  std::vector<std::thread> threads;
  threads.emplace_back(waiter_thread, 1u);
  threads.emplace_back(waiter_thread, 2u);
  for (auto& t : threads) t.join();
  stop_resizing = true;
  resizer.join();

  EXPECT_EQ(acquired.load() + aborted.load(), 2 * waiters_per_thread);
  EXPECT_GT(acquired.load(), 0);
  EXPECT_LE(most_holders.load(), static_cast<int>(largest)) << "more holders than any limit";
  const LimiterLedger::Counts end = sem.ledger().counts();
  EXPECT_EQ(end.in_use, 0u) << "a permit was lost or doubled";
  EXPECT_EQ(end.queued, 0u);
  // The final limit's permits are all free, and one more is refused.
  const LimiterLedger::count_type limit = sem.ledger().limit();
  for (LimiterLedger::count_type i = 0; i < limit; ++i) EXPECT_TRUE(sem.try_acquire());
  EXPECT_FALSE(sem.try_acquire());
}

}  // namespace
}  // namespace kevlar
