// A contended rate limit judges each call on a clock reading no older than the schedule it is
// compared with: a call whose reading predates a concurrent admission is not rejected on that old
// reading, nor given a retry-after computed from it. Deterministically, with a clock whose first
// reading lets another admission in before the caller's compare-exchange; and on the steady clock
// with threads racing.
#include <kevlar/kevlar.hpp>
#include <kevlar/rate_limit.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using Kind = RateLimitLedger::Decision::Kind;

constexpr Clock::time_point origin{1h};

/// A clock whose readings a test scripts: now() answers `time`, and the first reading after
/// `interleave` was set runs it just after taking its reading (once), standing for another thread
/// that admits a call after this caller read the clock and before it decided. It is never slept
/// on.
class InterleavingClock final : public Clock {
 public:
  mutable Clock::time_point time = origin;
  mutable std::function<void()> interleave;
  mutable int reads = 0;

  time_point now() const noexcept override {
    ++reads;
    const time_point reading = time;  // taken before the other admission runs
    if (auto other = std::exchange(interleave, nullptr)) other();
    return reading;
  }
  bool sleep_until(time_point, std::stop_token) const override {
    throw std::logic_error("InterleavingClock is never slept on");
  }
  std::unique_ptr<ClockTimer> make_timer(const boost::asio::any_io_executor&) const override {
    throw std::logic_error("InterleavingClock has no timers");
  }
};

// Two permits per 2 s (T = 1 s, burst 2). The caller reads the clock at t = 0; before it decides,
// another call is admitted at t = 10 s (the schedule moves to 11 s). Judged on its old reading the
// caller was 11 s behind and rejected with a 10 s retry-after; judged at 10 s one permit of the
// burst is left, and it is admitted.
TEST(RateLimitLedgerContention, ACallThatLosesTheRaceIsJudgedOnAFreshReading) {
  RateLimitLedger ledger(1s, 2, 0);
  InterleavingClock clock;
  clock.interleave = [&] {
    EXPECT_EQ(ledger.acquire(origin + 10s).kind, Kind::admitted);  // the concurrent admission
    clock.time = origin + 10s;  // the time has moved on by the caller's next reading
  };
  const RateLimitLedger::Decision d = ledger.acquire(clock);
  EXPECT_EQ(d.kind, Kind::admitted) << "retry_after " << d.retry_after.count() << " ns";
  EXPECT_EQ(clock.reads, 2) << "read once, and once more before it would have rejected";
  // Both calls took the burst: the next is 1 s away, measured from now (10 s).
  const RateLimitLedger::Decision third = ledger.acquire(clock);
  EXPECT_EQ(third.kind, Kind::rejected);
  EXPECT_EQ(third.retry_after, 1s);
}

// A rejection's retry-after comes from the fresh reading too: one permit per second, burst 1. The
// concurrent admission at 10 s takes it; the caller that read 0 s is rejected with 1 s, not 11 s.
TEST(RateLimitLedgerContention, ARejectionAfterALostRaceCarriesAFreshRetryAfter) {
  RateLimitLedger ledger(1s, 1, 0);
  InterleavingClock clock;
  clock.interleave = [&] {
    EXPECT_EQ(ledger.acquire(origin + 10s).kind, Kind::admitted);
    clock.time = origin + 10s;
  };
  const RateLimitLedger::Decision d = ledger.acquire(clock);
  EXPECT_EQ(d.kind, Kind::rejected);
  EXPECT_EQ(d.retry_after, 1s);
}

// Without contention an admission reads the clock once; a rejection reads it again before it
// rejects (after its load of the schedule), and rejects with what that reading says.
TEST(RateLimitLedgerContention, AnAdmissionReadsTheClockOnceARejectionTwice) {
  RateLimitLedger ledger(1s, 1, 0);
  InterleavingClock clock;
  EXPECT_EQ(ledger.acquire(clock).kind, Kind::admitted);
  EXPECT_EQ(clock.reads, 1);
  clock.time = origin + 400ms;
  const RateLimitLedger::Decision d = ledger.acquire(clock);
  EXPECT_EQ(d.kind, Kind::rejected);
  EXPECT_EQ(d.retry_after, 600ms);
  EXPECT_EQ(clock.reads, 3);
}

// With a queue the reading is taken under the ledger's mutex, after every earlier decision: the
// same interleaving cannot happen between the reading and the decision. Here the other admission
// runs before the caller takes the mutex, and the caller still sees the time it reads inside.
TEST(RateLimitLedgerContention, WithAQueueTheReadingIsTakenUnderTheMutex) {
  RateLimitLedger ledger(1s, 2, 4);
  InterleavingClock clock;
  clock.time = origin + 10s;
  ASSERT_EQ(ledger.acquire(origin + 10s).kind, Kind::admitted);  // the schedule is at 11 s
  const RateLimitLedger::Decision d = ledger.acquire(clock);
  EXPECT_EQ(d.kind, Kind::admitted);
  EXPECT_EQ(clock.reads, 1);
  EXPECT_EQ(ledger.acquire(clock).kind, Kind::queued) << "the burst is spent: the next one queues";
}

// The strategy reads the shield's clock through the ledger: the same interleaving through a
// shield, with the concurrent admission a nested call through the same limiter.
TEST(RateLimitContention, ACallThatLosesTheRaceThroughAShieldIsAdmitted) {
  auto clock = std::make_shared<InterleavingClock>();
  RateLimitOptions o;
  o.permits = 2;
  o.window = 2s;
  const Shield shield = Shield{}.rate_limit(o).with_clock(clock);
  int nested = 0;
  clock->interleave = [&] {
    clock->time = origin + 10s;
    nested = shield.execute([] { return 2; });  // admitted at 10 s: the schedule moves
  };
  const Outcome<int> outer = shield.execute_outcome([] { return 1; });
  EXPECT_EQ(nested, 2);
  ASSERT_TRUE(outer.has_value()) << outer.error().message() << ", retry_after "
                                 << outer.retry_after().value_or(0ns).count() << " ns";
  EXPECT_EQ(outer.value(), 1);
}

// Threads race on the steady clock. One permit every 0.5 ms, burst 1, no queue: judged on a fresh
// reading, a rejection's retry-after is never more than one emission interval (the last admission
// was at or before the reading, and moved the schedule by one interval). Stale readings made it
// 4.5-12.6 ms with four threads.
TEST(RateLimitContentionOnTheSteadyClock, RetryAfterNeverExceedsOneIntervalUnderContention) {
  RateLimitOptions o;
  o.permits = 2000;
  o.window = 1s;  // T = 0.5 ms
  o.burst = 1;
  auto limiter = RateLimitStrategy::create(o);
  const Shield shield = Shield{}.use(limiter);
  const Clock::duration interval = limiter->ledger().emission_interval();
  ASSERT_EQ(interval, 500us);
  constexpr int threads = 4;
  constexpr int calls = 20000;
  std::atomic<long long> worst{0};
  std::atomic<int> admitted{0};
  std::atomic<int> rejected{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      long long mine = 0;
      for (int i = 0; i < calls; ++i) {
        const Outcome<int> r = shield.execute_outcome([] { return 1; });
        if (r.has_value()) {
          admitted.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        rejected.fetch_add(1, std::memory_order_relaxed);
        mine = std::max<long long>(mine, r.retry_after().value_or(Clock::duration::max()).count());
      }
      long long seen = worst.load();
      while (mine > seen && !worst.compare_exchange_weak(seen, mine)) {
      }
    });
  }
  for (std::thread& t : pool) t.join();
  EXPECT_GT(admitted.load(), 0);
  EXPECT_GT(rejected.load(), 0);
  EXPECT_LE(worst.load(), interval.count()) << "a retry-after of " << worst.load() << " ns";
}

}  // namespace
}  // namespace kevlar
