// detail::RollingWindow on its own: the buckets that count a breaker's outcomes over its sampling
// window, driven with a manual clock (no breaker, no Asio, no sleeping).
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/detail/rolling_window.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using detail::RollingWindow;

/// The window's counts as a vector {total, failures, slow}, for one-line assertions.
std::vector<std::uint64_t> as_vector(const RollingWindow::Counts& c) {
  return {c.total, c.failures, c.slow};
}

/// Counts of `w` read at the clock's time.
std::vector<std::uint64_t> counts(const RollingWindow& w, const ManualClock& clock) {
  return as_vector(w.counts(clock.now()));
}

TEST(RollingWindow, StartsEmptyAndTakesNoLockFreeSuccessBeforeItsFirstBucket) {
  ManualClock clock;
  RollingWindow w(10s);
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{0, 0, 0}));
  EXPECT_FALSE(w.try_add_success(clock.now()));  // no current bucket yet: the caller locks
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{0, 0, 0}));
}

TEST(RollingWindow, AddCountsTheOutcomeAndReturnsTheWindowAfterIt) {
  ManualClock clock;
  RollingWindow w(10s);
  EXPECT_EQ(as_vector(w.add(clock.now(), true, false)), (std::vector<std::uint64_t>{1, 1, 0}));
  EXPECT_EQ(as_vector(w.add(clock.now(), false, true)), (std::vector<std::uint64_t>{2, 1, 1}));
  EXPECT_EQ(as_vector(w.add(clock.now(), true, true)), (std::vector<std::uint64_t>{3, 2, 2}));
  w.add_success(clock.now());
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{4, 2, 2}));
}

TEST(RollingWindow, LockFreeSuccessesLandInTheCurrentBucketUntilItEnds) {
  // 10 s in ten buckets of 1 s, aligned on the timeline: the clock starts at 1 h, a bucket start.
  ManualClock clock;
  RollingWindow w(10s);
  w.add_success(clock.now());
  clock.advance(999ms);
  EXPECT_TRUE(w.try_add_success(clock.now()));
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{2, 0, 0}));
  clock.advance(1ms);  // the next bucket: the window must rotate, under the caller's lock
  EXPECT_FALSE(w.try_add_success(clock.now()));
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{2, 0, 0}));
  w.add_success(clock.now());
  EXPECT_TRUE(w.try_add_success(clock.now()));
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{4, 0, 0}));
}

TEST(RollingWindow, AnOutcomeLeavesTheWindowTenBucketsAfterItsOwn) {
  ManualClock clock;
  RollingWindow w(10s);
  w.add(clock.now() + 500ms, true, true);  // in the bucket [0 s, 1 s) after the start
  clock.advance(9999ms);                   // the tenth bucket: still in the window
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{1, 1, 1}));
  clock.advance(1ms);  // the eleventh bucket: gone, though only 9.5 s passed since it was counted
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{0, 0, 0}));
}

TEST(RollingWindow, ABucketSlotReusedTenBucketsLaterStartsFromZero) {
  ManualClock clock;
  RollingWindow w(10s);
  w.add(clock.now(), true, true);
  w.add(clock.now() + 1s, true, false);
  clock.advance(10s);  // the same slot as the first outcome's bucket
  EXPECT_EQ(as_vector(w.add(clock.now(), false, false)), (std::vector<std::uint64_t>{2, 1, 0}));
  clock.advance(1s);  // and the second's
  EXPECT_EQ(as_vector(w.add(clock.now(), false, false)), (std::vector<std::uint64_t>{2, 0, 0}));
}

TEST(RollingWindow, NeverMovesBackwards) {
  ManualClock clock;
  RollingWindow w(10s);
  w.add(clock.now() + 5s, true, false);
  // An outcome stamped earlier (a coarse clock reading) counts in the current bucket...
  EXPECT_EQ(as_vector(w.add(clock.now() + 1s, false, false)),
            (std::vector<std::uint64_t>{2, 1, 0}));
  // ... so both leave the window together, ten buckets after the later one.
  EXPECT_EQ(as_vector(w.counts(clock.now() + 14s)), (std::vector<std::uint64_t>{2, 1, 0}));
  EXPECT_EQ(as_vector(w.counts(clock.now() + 15s)), (std::vector<std::uint64_t>{0, 0, 0}));
  // Read as of a time before the current bucket, the window leaves the later bucket out.
  EXPECT_EQ(as_vector(w.counts(clock.now() + 1s)), (std::vector<std::uint64_t>{0, 0, 0}));
}

TEST(RollingWindow, AWindowNotDivisibleByTenRoundsBucketStartsUp) {
  // An 11 ns window: bucket n covers [1.1 n, 1.1 (n + 1)) ns, so bucket 0 holds 0 and 1 ns,
  // bucket 1 holds 2 ns, ..., bucket 9 holds 10 ns and bucket 10 starts at 11 ns.
  ManualClock clock{Clock::time_point{}};
  RollingWindow w(11ns);
  w.add_success(clock.now());
  EXPECT_TRUE(w.try_add_success(clock.now() + 1ns));
  EXPECT_FALSE(w.try_add_success(clock.now() + 2ns));
  EXPECT_EQ(as_vector(w.counts(clock.now() + 10ns)), (std::vector<std::uint64_t>{2, 0, 0}));
  EXPECT_EQ(as_vector(w.counts(clock.now() + 11ns)), (std::vector<std::uint64_t>{0, 0, 0}));
}

TEST(RollingWindow, BucketsBeforeTheClocksEpochAreFlooredNotTruncated) {
  // -1 ns is in bucket -1, not bucket 0: it leaves the window one bucket before 0 ns does.
  ManualClock clock{Clock::time_point{}};
  RollingWindow w(10s);
  w.add(clock.now() - 1ns, true, false);
  EXPECT_FALSE(w.try_add_success(clock.now()));  // 0 ns starts the next bucket
  w.add_success(clock.now());
  EXPECT_EQ(as_vector(w.counts(clock.now() + 8999ms)), (std::vector<std::uint64_t>{2, 1, 0}));
  EXPECT_EQ(as_vector(w.counts(clock.now() + 9s)), (std::vector<std::uint64_t>{1, 0, 0}));
  EXPECT_EQ(as_vector(w.counts(clock.now() + 10s)), (std::vector<std::uint64_t>{0, 0, 0}));
}

TEST(RollingWindow, TheLongestWindowDoesNotOverflow) {
  // About 49.7 days, at a time point a century after the epoch.
  const Clock::duration longest = CircuitBreakerOptions::max_duration;
  ManualClock clock{Clock::time_point{std::chrono::hours(24 * 365 * 100)}};
  RollingWindow w(longest);
  w.add(clock.now(), true, false);
  EXPECT_EQ(as_vector(w.add(clock.now() + longest / 2, false, true)),
            (std::vector<std::uint64_t>{2, 1, 1}));
  EXPECT_TRUE(w.try_add_success(clock.now() + longest / 2));
  EXPECT_EQ(as_vector(w.counts(clock.now() + longest / 2)), (std::vector<std::uint64_t>{3, 1, 1}));
  EXPECT_EQ(as_vector(w.counts(clock.now() + 2 * longest)), (std::vector<std::uint64_t>{0, 0, 0}));
}

TEST(RollingWindow, ClearForgetsEverything) {
  ManualClock clock;
  RollingWindow w(10s);
  w.add(clock.now(), true, true);
  w.add_success(clock.now());
  w.clear();
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{0, 0, 0}));
  EXPECT_FALSE(w.try_add_success(clock.now()));  // no current bucket again
  EXPECT_EQ(as_vector(w.add(clock.now(), false, false)), (std::vector<std::uint64_t>{1, 0, 0}));
}

/// Counts `n` lock-free successes at `at` from each of `threads` threads (their own stripes).
void add_lock_free_successes(RollingWindow& w, Clock::time_point at, int threads, int n) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < n; ++i) ASSERT_TRUE(w.try_add_success(at));
    });
  }
  for (std::thread& t : pool) t.join();
}

// Lock-free successes are counted per thread until the bucket ends; the rotation moves them into
// the bucket they were counted for (not the new one), so they leave the window with it.
TEST(RollingWindow, LockFreeSuccessesOfSeveralThreadsLeaveTheWindowWithTheirBucket) {
  ManualClock clock;
  RollingWindow w(10s);
  w.add_success(clock.now());
  add_lock_free_successes(w, clock.now(), 3, 1000);
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{3001, 0, 0}));
  clock.advance(1s);
  EXPECT_EQ(as_vector(w.add(clock.now(), true, false)), (std::vector<std::uint64_t>{3002, 1, 0}));
  add_lock_free_successes(w, clock.now(), 2, 10);
  EXPECT_EQ(as_vector(w.counts(clock.now() + 8s)), (std::vector<std::uint64_t>{3022, 1, 0}));
  // The first bucket leaves: its 3001 successes go, the second bucket's outcomes stay.
  EXPECT_EQ(as_vector(w.counts(clock.now() + 9s)), (std::vector<std::uint64_t>{21, 1, 0}));
  clock.advance(9s);  // rotating onto the first bucket's slot starts it from zero
  w.add_success(clock.now());
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{22, 1, 0}));
}

TEST(RollingWindow, ClearForgetsLockFreeSuccessesToo) {
  ManualClock clock;
  RollingWindow w(10s);
  w.add_success(clock.now());
  add_lock_free_successes(w, clock.now(), 2, 50);
  w.clear();
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{0, 0, 0}));
  w.add_success(clock.now());
  EXPECT_EQ(counts(w, clock), (std::vector<std::uint64_t>{1, 0, 0}));
}

TEST(RollingWindow, LockFreeSuccessesFromManyThreadsAreAllCounted) {
  ManualClock clock;
  RollingWindow w(10s);
  std::mutex lock;  // what the breaker's lock is to the locked members
  w.add_success(clock.now());
  const Clock::time_point now = clock.now();
  constexpr int threads = 4;
  constexpr int per_thread = 10000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        if (!w.try_add_success(now)) {
          const std::lock_guard guard(lock);
          w.add_success(now);
        }
        if (i % 100 == 0) {
          const std::lock_guard guard(lock);
          w.add(now, true, false);
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const std::uint64_t failures = threads * (per_thread / 100);
  EXPECT_EQ(as_vector(w.counts(now)),
            (std::vector<std::uint64_t>{1 + threads * per_thread + failures, failures, 0}));
}

}  // namespace
}  // namespace kevlar
