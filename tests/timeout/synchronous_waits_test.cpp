// Every synchronous wait of kevlar's ends at the context's deadline (an outer timeout's budget):
// the concurrency limit's queue, the rate limit's turn and due time, a retry's backoff and a chaos
// latency. The call then fails with errc::timeout, and no user function starts once the deadline
// has passed. Each case on a ManualClock (the test advances time); the limiter's queue once more on
// the steady clock.
#include "core/test_strategies.hpp"

#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<ConcurrencyLimitStrategy> limiter_of(int max, int queue) {
  ConcurrencyLimitOptions o;
  o.max_concurrency = max;
  o.max_queue = queue;
  return ConcurrencyLimitStrategy::create(o);
}

/// Holds a limiter's only permit on a thread of its own until release() (a synchronous call
/// through `shield`, which must hold the limiter).
class PermitHolder {
 public:
  explicit PermitHolder(const Shield& shield)
      : thread_([this, shield] {
          shield.execute([this] {
            held_.count_down();
            release_.wait();
          });
        }) {
    held_.wait();
  }
  /// Lets the holder's call return (once; the destructor does it if the test did not).
  void release() {
    if (!released_) release_.count_down();
    released_ = true;
  }
  ~PermitHolder() {
    release();
    thread_.join();
  }
  PermitHolder(const PermitHolder&) = delete;
  PermitHolder& operator=(const PermitHolder&) = delete;

 private:
  std::latch held_{1};
  std::latch release_{1};
  bool released_ = false;
  std::thread thread_;
};

/// The program of the report: timeout(200ms) around a limit of 1 with a queue of 10, while another
/// thread holds the permit. The queued call ends at its deadline with errc::timeout and never
/// runs; it used to wait for the permit and then run past its deadline.
TEST(SynchronousWaits, AnOuterTimeoutEndsAConcurrencyLimitQueueWait) {
  auto clock = ManualClock::create();
  auto limiter = limiter_of(1, 10);
  const Shield inner = Shield{}.use(limiter).with_clock(clock);
  const Shield outer = Shield{}.timeout(200ms).wrap(inner).with_clock(clock);
  PermitHolder holder(inner);
  std::atomic<bool> ran{false};
  std::optional<Outcome<int>> result;
  std::thread caller([&] {
    result = outer.execute_outcome([&] {
      ran = true;
      return 1;
    });
  });
  clock->wait_for_sleepers(1);  // queued, sleeping until its deadline
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(199ms);
  EXPECT_EQ(limiter->state().queued, 1u) << "left the queue before its deadline";
  clock->advance(1ms);
  caller.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->error(), errc::timeout);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u);  // the holder's permit is untouched
  holder.release();
}

/// The same through execute(), which throws: kevlar::Error with errc::timeout.
TEST(SynchronousWaits, ExecuteThrowsTheTimeoutOfAQueueWait) {
  auto clock = ManualClock::create();
  auto limiter = limiter_of(1, 1);
  const Shield shield = Shield{}.timeout(1s).use(limiter).with_clock(clock);
  PermitHolder holder(Shield{}.use(limiter).with_clock(clock));
  std::optional<boost::system::error_code> thrown;
  std::thread caller([&] {
    try {
      shield.execute([] { return 1; });
    } catch (const Error& e) {
      thrown = e.error();
    }
  });
  clock->wait_for_sleepers(1);
  clock->advance(1s);
  caller.join();
  ASSERT_TRUE(thrown.has_value());
  EXPECT_EQ(*thrown, errc::timeout);
  holder.release();
}

/// A clock that reads `shift` ahead of a ManualClock and sleeps on it: a test sets the shift
/// while a thread sleeps, so that the sleeper wakes (for another reason) to a reading past its
/// deadline.
class ShiftedClock final : public Clock {
 public:
  explicit ShiftedClock(std::shared_ptr<ManualClock> base) : base_(std::move(base)) {}
  std::atomic<Clock::duration> shift{Clock::duration::zero()};
  time_point now() const noexcept override { return base_->now() + shift.load(); }
  bool sleep_until(time_point deadline, std::stop_token stop) const override {
    return base_->sleep_until(deadline - shift.load(), std::move(stop));
  }
  std::unique_ptr<ClockTimer> make_timer(const boost::asio::any_io_executor& ex) const override {
    return base_->make_timer(ex);
  }

 private:
  std::shared_ptr<ManualClock> base_;
};

/// A grant that reaches a queued call once its deadline has passed does not run it: the permit is
/// handed on (here back to the limiter) and the call times out.
TEST(SynchronousWaits, AGrantThatArrivesPastTheDeadlineIsHandedOn) {
  auto manual = ManualClock::create();
  auto clock = std::make_shared<ShiftedClock>(manual);
  auto limiter = limiter_of(1, 4);
  const Shield inner = Shield{}.use(limiter).with_clock(clock);
  const Shield outer = Shield{}.timeout(1s).wrap(inner).with_clock(clock);
  std::optional<PermitHolder> holder(std::in_place, inner);
  std::atomic<bool> ran{false};
  std::optional<Outcome<int>> result;
  std::thread caller([&] {
    result = outer.execute_outcome([&] {
      ran = true;
      return 1;
    });
  });
  manual->wait_for_sleepers(1);
  clock->shift = 2s;  // the next reading is past the deadline, without waking the sleeper
  holder.reset();     // the grant wakes it
  caller.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->error(), errc::timeout);
  EXPECT_FALSE(ran.load());
  const ConcurrencyLimitState s = limiter->state();
  EXPECT_EQ(s.running, 0u);
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(s.available, 1u);
}

/// A grant and the deadline at the same moment, from two threads: whichever wins, the call runs
/// at most once, times out if it did not run, and the permit is never lost or doubled.
TEST(SynchronousWaits, AGrantRacingTheDeadlineNeverLosesOrDoublesThePermit) {
  int timed_out = 0;
  for (int round = 0; round < 50; ++round) {
    auto clock = ManualClock::create();
    auto limiter = limiter_of(1, 4);
    const Shield inner = Shield{}.use(limiter).with_clock(clock);
    const Shield outer = Shield{}.timeout(1s).wrap(inner).with_clock(clock);
    std::optional<PermitHolder> holder(std::in_place, inner);
    std::atomic<int> ran{0};
    std::optional<Outcome<int>> result;
    std::thread caller([&] {
      result = outer.execute_outcome([&] { return ++ran; });
    });
    clock->wait_for_sleepers(1);
    std::thread advancer([&] { clock->advance(1s); });
    holder.reset();  // releases the permit: a grant to the queued caller, unless it left first
    advancer.join();
    caller.join();
    ASSERT_TRUE(result.has_value());
    if (result->has_value()) {
      EXPECT_EQ(ran.load(), 1) << "round " << round;
    } else {
      EXPECT_EQ(result->error(), errc::timeout) << "round " << round;
      EXPECT_EQ(ran.load(), 0) << "round " << round;
      ++timed_out;
    }
    const ConcurrencyLimitState s = limiter->state();
    EXPECT_EQ(s.running, 0u) << "round " << round;
    EXPECT_EQ(s.queued, 0u) << "round " << round;
    EXPECT_EQ(s.available, 1u) << "round " << round;
  }
  RecordProperty("timed_out_rounds", timed_out);
}

/// The caller's stop token still takes a call out of the queue when a deadline is set too.
TEST(SynchronousWaits, TheCallersStopEndsAQueueWaitBeforeTheDeadline) {
  auto clock = ManualClock::create();
  auto limiter = limiter_of(1, 1);
  const Shield inner = Shield{}.use(limiter).with_clock(clock);
  const Shield outer = Shield{}.timeout(1h).wrap(inner).with_clock(clock);
  PermitHolder holder(inner);
  std::stop_source stop;
  std::optional<Outcome<int>> result;
  std::thread caller([&] { result = outer.execute_outcome([] { return 1; }, stop.get_token()); });
  clock->wait_for_sleepers(1);
  stop.request_stop();
  caller.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(is_cancellation(result->error())) << result->error().message();
  EXPECT_EQ(limiter->state().queued, 0u);
  holder.release();
}

/// Without a deadline a queued call waits for its permit as long as it takes, and runs.
TEST(SynchronousWaits, WithoutADeadlineAQueuedCallWaitsForItsPermitAndRuns) {
  auto clock = ManualClock::create();
  auto limiter = limiter_of(1, 1);
  const Shield shield = Shield{}.use(limiter).with_clock(clock);
  std::optional<PermitHolder> holder(std::in_place, shield);
  std::optional<int> result;
  std::thread caller([&] { result = shield.execute([] { return 7; }); });
  while (limiter->state().queued != 1) std::this_thread::yield();
  clock->advance(24h);  // no deadline: time alone ends nothing
  EXPECT_EQ(limiter->state().queued, 1u);
  holder.reset();
  caller.join();
  EXPECT_EQ(result, 7);
}

/// On the steady clock: the queued call ends at its 50 ms budget, while the holder keeps the
/// permit for much longer.
TEST(SynchronousWaitsOnTheSteadyClock, AnOuterTimeoutEndsAConcurrencyLimitQueueWait) {
  auto limiter = limiter_of(1, 10);
  const Shield inner = Shield{}.use(limiter);
  const Shield outer = Shield{}.timeout(50ms).wrap(inner);
  PermitHolder holder(inner);
  bool ran = false;
  const auto started = std::chrono::steady_clock::now();
  const Outcome<int> result = outer.execute_outcome([&] {
    ran = true;
    return 1;
  });
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.error(), errc::timeout);
  EXPECT_FALSE(ran);
  EXPECT_GE(waited, 50ms);  // never before the budget
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u);
  holder.release();
}

RateLimitOptions queued_rate(int queue) {
  RateLimitOptions o;
  o.permits = 1;
  o.window = 10s;
  o.queue_limit = queue;
  return o;
}

/// The rate limit's two waits: the head of its queue waits for its due time (10 s away), the next
/// call for its turn. A 1 s budget ends both, and both give their reservations back.
TEST(SynchronousWaits, AnOuterTimeoutEndsTheRateLimitsTurnAndDueTimeWaits) {
  auto clock = ManualClock::create();
  auto rate = RateLimitStrategy::create(queued_rate(2));
  const Shield shield = Shield{}.timeout(1s).use(rate).with_clock(clock);
  EXPECT_EQ(shield.execute([] { return 0; }), 0);  // takes the burst
  std::atomic<int> ran{0};
  std::optional<Outcome<int>> head;
  std::optional<Outcome<int>> next;
  std::thread head_caller([&] { head = shield.execute_outcome([&] { return ++ran; }); });
  clock->wait_for_sleepers(1);  // the head sleeps until its due time, cut at its deadline
  std::thread next_caller([&] { next = shield.execute_outcome([&] { return ++ran; }); });
  clock->wait_for_sleepers(2);  // the next one waits for the turn, until its deadline
  EXPECT_EQ(rate->state(*clock).queued, 2u);
  clock->advance(1s);
  head_caller.join();
  next_caller.join();
  ASSERT_TRUE(head.has_value() && next.has_value());
  EXPECT_EQ(head->error(), errc::timeout);
  EXPECT_EQ(next->error(), errc::timeout);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(rate->state(*clock).queued, 0u);
  // Both reservations came back: the next permit is due 10 s after the first call, not 30 s.
  clock->advance(9s);
  EXPECT_EQ(Shield{}.use(rate).with_clock(clock).execute([] { return 5; }), 5);
}

/// A retry's backoff under a total budget: a backoff that would end past the deadline is not
/// started at all (the retry's deadline rule): the last real failure surfaces at once, with no
/// sleep and no errc::timeout. (A wait the engine cuts at the deadline: exchange_deadline_test.)
TEST(SynchronousWaits, AnOuterTimeoutStopsARetryWhoseBackoffWouldEndPastIt) {
  auto clock = ManualClock::create();
  RetryOptions r;
  r.max_retries = 3;
  r.backoff = Backoff::constant(10s);
  const Shield shield = Shield{}.timeout(1s).retry(r).with_clock(clock);
  int attempts = 0;
  const Outcome<int> result = shield.execute_outcome([&]() -> int {
    ++attempts;
    throw std::runtime_error("refused");
  });
  ASSERT_TRUE(result.has_exception());
  EXPECT_THROW(std::rethrow_exception(result.exception()), std::runtime_error);
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(clock->now(), ManualClock::time_point{std::chrono::hours(1)}) << "nothing slept";
}

/// A chaos latency under a budget ends at it, and the call never runs.
TEST(SynchronousWaits, AnOuterTimeoutEndsAChaosLatency) {
  auto clock = ManualClock::create();
  ChaosLatencyOptions o;
  o.chaos.enabled = true;
  o.chaos.injection_rate = 1.0;
  o.delay = 1h;
  const Shield shield = Shield{}.timeout(2s).wrap(chaos::latency(o)).with_clock(clock);
  std::atomic<int> calls{0};
  std::optional<Outcome<int>> result;
  std::thread caller([&] { result = shield.execute_outcome([&] { return ++calls; }); });
  clock->wait_for_sleepers(1);
  clock->advance(2s);
  caller.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->error(), errc::timeout);
  EXPECT_EQ(calls.load(), 0);
}

/// The engine's rule, synchronous as asynchronous: once an enclosing deadline has passed, no
/// further attempt starts, even where no wait falls between two attempts (a repeater without a
/// delay, which asks no context). The first attempt outlives the budget and fails; the second is
/// declined, and the call times out. (It used to run all four attempts, long past the deadline,
/// and end with the last one's failure.)
TEST(SynchronousWaits, NoAttemptStartsOnceAnEnclosingDeadlineHasPassed) {
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.timeout(1s).use(std::make_shared<test::Repeat>(3)).with_clock(clock);
  int attempts = 0;
  const Outcome<int> result = shield.execute_outcome([&](Context& ctx) -> int {
    ++attempts;
    EXPECT_EQ(ctx.attempt(), static_cast<std::uint32_t>(attempts));
    clock->advance(2s);  // the attempt outlives the budget
    throw std::runtime_error("refused");
  });
  EXPECT_EQ(result.error(), errc::timeout);
  EXPECT_EQ(attempts, 1);
}

/// Within the budget the repeater's attempts all run: the rule reads the clock, not a count.
TEST(SynchronousWaits, AttemptsWithinTheBudgetAllRun) {
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.timeout(10s).use(std::make_shared<test::Repeat>(3)).with_clock(clock);
  int attempts = 0;
  const Outcome<int> result = shield.execute_outcome([&]() -> int {
    ++attempts;
    clock->advance(1s);
    throw std::runtime_error("refused");
  });
  EXPECT_TRUE(result.has_exception());
  EXPECT_EQ(attempts, 4);
}

}  // namespace
}  // namespace kevlar
