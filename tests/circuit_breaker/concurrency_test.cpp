// The circuit breaker under threads: failure storms, parallel probes, serial event delivery.
// Runs under ThreadSanitizer in CI (label "concurrency"). No sleeping: threads meet on latches and
// condition variables, and time is a ManualClock.
#include "breaker_test_support.hpp"

#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using S = CircuitState;

using test::Boom;

TEST(CircuitBreakerConcurrency, FailureStormOpensExactlyOnce) {
  for (int round = 0; round < 20; ++round) {
    const auto clock = ManualClock::create();
    test::Transitions log;
    CircuitBreakerOptions o;
    o.consecutive_failures = 3;
    o.break_duration = 30s;
    o.on_state_changed = log.observer();
    const auto b = CircuitBreaker::create(o);
    const Shield shield = Shield{}.use(b).with_clock(clock);
    constexpr int threads = 32;
    std::latch go(threads);
    std::atomic<int> failures{0};
    std::atomic<int> rejections{0};
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&] {
        go.arrive_and_wait();
        try {
          shield.execute([]() -> int { throw Boom(); });
        } catch (const Boom&) {
          ++failures;
        } catch (const Error& e) {
          if (e.code() == errc::circuit_open) ++rejections;
        }
      });
    }
    for (auto& t : pool) t.join();
    EXPECT_EQ(failures + rejections, threads);
    EXPECT_GE(failures, 3);
    EXPECT_EQ(log.pairs(), (std::vector<std::pair<S, S>>{{S::closed, S::open}}))
        << "round " << round;
    EXPECT_EQ(log.max_concurrency(), 1);
    EXPECT_EQ(b->state(), S::open);
  }
}

TEST(CircuitBreakerConcurrency, SixteenThreadsAfterTheBreakAdmitExactlyOneProbe) {
  const auto clock = ManualClock::create();
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.break_duration = 5s;
  const auto b = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  EXPECT_THROW(shield.execute([]() -> int { throw Boom(); }), Boom);
  clock->advance(5s);

  constexpr int threads = 16;
  std::mutex m;
  std::condition_variable cv;
  int rejected = 0;  // guarded by m
  std::atomic<int> probes{0};
  std::atomic<int> without_retry_after{0};
  std::latch go(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      go.arrive_and_wait();
      try {
        shield.execute([&] {
          ++probes;
          // The probe stays in flight until every other caller was turned away.
          std::unique_lock lock(m);
          cv.wait(lock, [&] { return rejected == threads - 1; });
          return 1;
        });
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), errc::circuit_open);
        if (!e.retry_after()) ++without_retry_after;
        std::lock_guard lock(m);
        ++rejected;
        cv.notify_all();
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(probes, 1);
  EXPECT_EQ(rejected, threads - 1);
  EXPECT_EQ(without_retry_after, threads - 1) << "half-open rejections carry no retry_after";
  EXPECT_EQ(b->state(), S::closed);
}

TEST(CircuitBreakerConcurrency, ResetAndIsolateWhileAnObserverIsBlocked) {
  // The Closed->Open observer blocks; a reset() and an isolate() from other threads queue behind
  // it and wait for their own delivery. Stream: [Closed->Open, Open->Closed, Closed->Isolated].
  const auto clock = ManualClock::create();
  test::Transitions log;
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  bool entered = false;
  CircuitBreakerOptions o;
  o.consecutive_failures = 1;
  o.on_state_changed = [&](const CircuitStateChange& c) {
    log.add(c);
    if (c.to == S::open) {
      std::unique_lock lock(m);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
  };
  const auto b = CircuitBreaker::create(o);
  std::vector<std::pair<S, S>> subscribed;
  b->subscribe([&](const CircuitStateChange& c) { subscribed.emplace_back(c.from, c.to); });
  const Shield shield = Shield{}.use(b).with_clock(clock);

  std::thread failing([&] { EXPECT_THROW(shield.execute([]() -> int { throw Boom(); }), Boom); });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  std::atomic<bool> reset_returned{false};
  std::thread resetting([&] {
    b->reset();
    reset_returned = true;
  });
  while (b->state() != S::closed) std::this_thread::yield();  // reset() changed the state
  std::thread isolating([&] { b->isolate(); });
  while (b->state() != S::isolated) std::this_thread::yield();
  EXPECT_FALSE(reset_returned) << "reset() returns only after its change was delivered";
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  failing.join();
  resetting.join();
  isolating.join();
  const std::vector<std::pair<S, S>> expected{
      {S::closed, S::open}, {S::open, S::closed}, {S::closed, S::isolated}};
  EXPECT_EQ(log.pairs(), expected);
  EXPECT_EQ(subscribed, expected);
  EXPECT_EQ(log.max_concurrency(), 1);
}

TEST(CircuitBreakerConcurrency, EventsAreDeliveredSeriallyAndInStateOrder) {
  // Threads trip, probe, reset and isolate at random. Whatever happens, observers never overlap
  // and each delivered change starts where the previous one ended.
  const auto clock = ManualClock::create();
  test::Transitions log;
  CircuitBreakerOptions o;
  o.consecutive_failures = 2;
  o.break_duration = 1s;
  o.on_state_changed = log.observer();
  const auto b = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  constexpr int threads = 4;
  std::latch go(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937 rng(1234u + static_cast<unsigned>(t));
      go.arrive_and_wait();
      for (int i = 0; i < 2000; ++i) {
        switch (rng() % 8) {
          case 0:
            b->isolate();
            break;
          case 1:
            b->reset();
            break;
          case 2:
            clock->advance(1s);
            break;
          case 3:
          case 4:
            try {
              shield.execute([] { return 1; });
            } catch (const Error&) {
            }
            break;
          default:
            try {
              shield.execute([]() -> int { throw Boom(); });
            } catch (const Boom&) {
            } catch (const Error&) {
            }
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(log.max_concurrency(), 1);
  const auto changes = log.pairs();
  ASSERT_FALSE(changes.empty());
  S at = S::closed;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    ASSERT_EQ(changes[i].first, at) << "change " << i;
    ASSERT_NE(changes[i].first, changes[i].second);
    at = changes[i].second;
  }
  EXPECT_EQ(at, b->state()) << "the last delivered change is the current state";
}

TEST(CircuitBreakerConcurrency, RatioModeCountsEveryConcurrentSuccess) {
  const auto clock = ManualClock::create();
  CircuitBreakerOptions o;
  o.failure_ratio = 0.5;
  o.minimum_throughput = 10;
  o.sampling_window = 10s;
  const auto b = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(b).with_clock(clock);
  constexpr int threads = 4;
  constexpr int per_thread = 5000;
  std::latch go(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      go.arrive_and_wait();
      for (int i = 0; i < per_thread; ++i) (void)shield.execute([] { return 1; });
    });
  }
  for (auto& t : pool) t.join();
  const auto m = b->core().metrics(clock->now());
  EXPECT_EQ(m.window_total, static_cast<std::uint64_t>(threads * per_thread));
  EXPECT_EQ(m.window_failures, 0u);
}

}  // namespace
}  // namespace kevlar
