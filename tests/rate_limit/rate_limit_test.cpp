// The rate limit with real executors and threads: allocation failures, synchronous executions
// in the queue, and threads hammering one limiter (these also run under ThreadSanitizer).
#include <alloc_counter.hpp>
#include <kevlar/rate_limit.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;

RateLimitOptions options(int permits, Clock::duration window, int queue,
                         std::optional<int> burst = {}) {
  RateLimitOptions o;
  o.permits = permits;
  o.window = window;
  o.queue_limit = queue;
  o.burst = burst;
  return o;
}

/// An operation that completes at once with 7 (posted).
auto immediate_op() {
  return [](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [](auto handler) {
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, asio::append(std::move(handler), error_code(), 7));
        },
        token);
  };
}

// One admitted call, then two that queue: the head (it waits on the clock) and one waiting for its
// turn. The n-th allocation of starting those two fails; whatever failed must have given its
// reservation (and the turn) back, and the survivors and a probe call after them must run at
// exactly their due times, one second apart. `on_strand`: the calls run on a strand, where the
// turn is the semaphore's general wait (an operation block), not the wait embedded in the
// execution (no allocation) that a plain io_context executor gets. Each round runs on a thread of
// its own, whose block cache starts empty: the blocks kevlar takes for the queued calls come from
// operator new, where the failure is injected. Returns the number of rounds in which a call
// failed.
int reservations_survive_a_bad_alloc_at_every_allocation_point(bool on_strand) {
  bool reached_the_end = false;
  int failed_calls = 0;
  for (std::uint64_t n = 0; n < 128 && !reached_the_end; ++n) {
    std::thread([&] {
      auto clock = ManualClock::create();
      auto limiter = RateLimitStrategy::create(options(1, 1s, 3));
      const Shield shield = Shield{}.use(limiter).with_clock(clock);
      asio::io_context ioc;
      const auto strand = asio::make_strand(ioc);
      const auto start = [&](std::optional<error_code>& result) {
        auto done = [&result](error_code ec, int) { result = ec; };
        if (on_strand) {
          shield.execute_async(immediate_op(), asio::bind_executor(strand, done));
        } else {
          shield.execute_async(immediate_op(), asio::bind_executor(ioc, done));
        }
      };
      std::optional<error_code> first;
      start(first);
      ioc.poll();
      ASSERT_EQ(first, error_code());

      std::optional<error_code> b;
      std::optional<error_code> c;
      bool b_started = false;
      bool c_started = false;
      const auto injected = testing::inject_allocation_failure(n, [&] {
        start(b);
        b_started = true;
        start(c);
        c_started = true;
        ioc.poll();
      });
      ioc.restart();
      ioc.poll();
      reached_the_end = !injected.fired;
      std::vector<std::optional<error_code>*> alive;
      if (b_started && !b.has_value()) alive.push_back(&b);
      if (c_started && !c.has_value()) alive.push_back(&c);
      if (alive.size() < 2) {
        ASSERT_TRUE(injected.fired) << n << ": a call failed without an allocation failure";
        ++failed_calls;
      }
      EXPECT_EQ(limiter->ledger().queued(), alive.size()) << n;
      std::optional<error_code> probe;
      start(probe);
      alive.push_back(&probe);
      ioc.poll();
      for (std::size_t i = 0; i < alive.size(); ++i) {
        clock->advance(999ms);
        ioc.restart();
        ioc.poll();
        EXPECT_FALSE(alive[i]->has_value()) << n << ": call " << i << " ran early";
        clock->advance(1ms);
        ioc.restart();
        ioc.poll();
        EXPECT_EQ(*alive[i], std::optional<error_code>(error_code())) << n << ": call " << i;
        for (std::size_t j = i + 1; j < alive.size(); ++j) EXPECT_FALSE(alive[j]->has_value());
      }
      EXPECT_EQ(limiter->ledger().queued(), 0u) << n;
    }).join();
    if (::testing::Test::HasFatalFailure()) break;  // a round's ASSERT failed: stop the sweep
  }
  EXPECT_TRUE(reached_the_end) << "more than 128 allocations on the queued path";
  EXPECT_GT(failed_calls, 0) << "no allocation failure made a queued call fail";
  return failed_calls;
}

TEST(RateLimitAllocation, ReservationsSurviveABadAllocAtEveryAllocationPoint) {
  reservations_survive_a_bad_alloc_at_every_allocation_point(false);
}

TEST(RateLimitAllocation, ReservationsSurviveABadAllocAtEveryAllocationPointOnAStrand) {
  const int on_strand = reservations_survive_a_bad_alloc_at_every_allocation_point(true);
  // The general wait's operation block is an allocation point the embedded wait does not have (as
  // is, where Asio's own allocations are counted, the cancellation handler of its step slot).
  const int plain = reservations_survive_a_bad_alloc_at_every_allocation_point(false);
  EXPECT_GT(on_strand, plain);
}

TEST(RateLimitAllocation, TheUnqueuedPathAllocatesNothing) {
  auto limiter = RateLimitStrategy::create(options(1'000'000'000, 1s, 0));
  const Shield shield = Shield{}.use(limiter);
  int sum = shield.execute([] { return 1; });  // warm-up
  testing::AllocScope scope;
  for (int i = 0; i < 1000; ++i) sum += shield.execute([i] { return i; });
  EXPECT_EQ(scope.count(), 0u);
  EXPECT_GT(sum, 0);
  EXPECT_EQ(limiter->ledger().queued(), 0u);
}

TEST(RateLimitAsync, AnExceptionCompletionCarriesTheRetryAfterInTheError) {
  auto clock = ManualClock::create();
  const Shield shield = Shield{}.rate_limit(options(1, 10s, 0)).with_clock(clock);
  asio::io_context ioc;
  std::vector<std::optional<Clock::duration>> retry_afters;
  std::vector<int> values;
  for (int i = 0; i < 2; ++i) {
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          try {
            values.push_back(co_await shield.execute_async(
                []() -> asio::awaitable<int> { co_return 5; }, asio::use_awaitable));
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), errc::rate_limited);
            retry_afters.push_back(e.retry_after());
          }
        },
        asio::detached);
  }
  ioc.run();
  EXPECT_EQ(values, std::vector<int>{5});
  ASSERT_EQ(retry_afters.size(), 1u);
  EXPECT_EQ(retry_afters[0], std::optional<Clock::duration>(10s));
}

/// A hold of 2 s after a call returning 429 (a dependency's "come back later").
RateLimitOptions holding_after_429() {
  RateLimitOptions o = options(100, 1s, 0);
  o.hold_from_outcome = [](OutcomeRef outcome) -> std::optional<Clock::duration> {
    const int* v = outcome.value_if<int>();
    if (v != nullptr && *v == 429) return 2s;
    return std::nullopt;
  };
  return o;
}

TEST(RateLimitHold, AnOutcomeAskingForAHoldHoldsEveryShieldSharingTheLimiter) {
  auto clock = ManualClock::create();
  auto limiter = RateLimitStrategy::create(holding_after_429());
  const Shield a = Shield{}.use(limiter).with_clock(clock);
  const Shield b = Shield{}.use(limiter).with_clock(clock);
  EXPECT_EQ(a.execute([] { return 200; }), 200) << "other outcomes hold nothing";
  EXPECT_EQ(a.execute([] { return 429; }), 429) << "the outcome itself is handed back";
  int ran = 0;
  const Outcome<int> held = b.execute_outcome([&] { return ++ran; });
  ASSERT_TRUE(held.has_error());
  EXPECT_EQ(held.error(), errc::rate_limited);
  EXPECT_EQ(held.retry_after(), std::optional<Clock::duration>(2s));
  clock->advance(1999ms);
  EXPECT_EQ(a.execute_outcome([&] { return ++ran; }).retry_after(),
            std::optional<Clock::duration>(1ms));
  EXPECT_EQ(ran, 0) << "nothing ran during the hold";
  clock->advance(1ms);
  EXPECT_EQ(b.execute([&] { return ++ran; }), 1);
}

TEST(RateLimitHold, AThrowingReaderReplacesTheOutcome) {
  auto clock = ManualClock::create();
  RateLimitOptions o = options(100, 1s, 0);
  o.hold_from_outcome = [](OutcomeRef) -> std::optional<Clock::duration> {
    throw std::runtime_error("unreadable");
  };
  const Shield shield = Shield{}.rate_limit(o).with_clock(clock);
  const Outcome<int> first = shield.execute_outcome([] { return 1; });
  ASSERT_TRUE(first.has_exception());
  EXPECT_THROW(std::rethrow_exception(first.exception()), std::runtime_error);
  EXPECT_TRUE(shield.execute_outcome([] { return 2; }).has_exception())
      << "the next call was admitted (and its outcome read again)";
}

TEST(RateLimitSync, ASynchronousExecuteWaitsInTheSameQueue) {
  auto clock = ManualClock::create();
  auto limiter = RateLimitStrategy::create(options(1, 1s, 2));
  const Shield shield = Shield{}.use(limiter).with_clock(clock);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  std::atomic<int> done{0};
  std::thread second([&] {
    EXPECT_EQ(shield.execute([] { return 2; }), 2);
    done.fetch_add(1);
  });
  clock->wait_for_sleepers(1);  // the head sleeps until its due time
  std::thread third([&] {
    EXPECT_EQ(shield.execute([] { return 3; }), 3);
    done.fetch_add(1);
  });
  // The third waits for its turn (not on the clock) until the second has started.
  while (limiter->ledger().queued() != 2) std::this_thread::yield();
  EXPECT_EQ(clock->sleepers(), 1u);
  EXPECT_EQ(done.load(), 0);
  clock->advance(1s);
  second.join();
  EXPECT_EQ(done.load(), 1);
  clock->wait_for_sleepers(1);  // the third is the head now, due at 2 s
  clock->advance(1s);
  third.join();
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(limiter->ledger().queued(), 0u);
}

TEST(RateLimitSync, AStoppedSynchronousCallLeavesTheQueue) {
  auto clock = ManualClock::create();
  auto limiter = RateLimitStrategy::create(options(1, 1s, 2));
  const Shield shield = Shield{}.use(limiter).with_clock(clock);
  (void)shield.execute([] { return 1; });
  std::stop_source head_stop;
  std::stop_source parked_stop;
  std::optional<Outcome<int>> head;
  std::optional<Outcome<int>> parked;
  std::thread h([&] { head = shield.execute_outcome([] { return 2; }, head_stop.get_token()); });
  clock->wait_for_sleepers(1);
  std::thread p(
      [&] { parked = shield.execute_outcome([] { return 3; }, parked_stop.get_token()); });
  while (limiter->ledger().queued() != 2) std::this_thread::yield();
  parked_stop.request_stop();  // waiting for its turn
  p.join();
  head_stop.request_stop();  // waiting for its due time
  h.join();
  ASSERT_TRUE(head && parked);
  EXPECT_EQ(head->error(), asio::error::operation_aborted);
  EXPECT_EQ(parked->error(), asio::error::operation_aborted);
  EXPECT_EQ(limiter->ledger().queued(), 0u);
  // The schedule is as before: a new call is due at 1 s.
  std::thread n([&] { EXPECT_EQ(shield.execute([] { return 4; }), 4); });
  clock->wait_for_sleepers(1);
  clock->advance(1s);
  n.join();
}

TEST(RateLimitSync, ASynchronousCallPastItsDeadlineLeavesWhenTheTurnReachesIt) {
  auto clock = ManualClock::create();
  auto limiter = RateLimitStrategy::create(options(1, 1s, 3));
  const Shield slow = Shield{}.use(limiter).with_clock(clock);
  const Shield bounded = Shield{}.timeout(500ms).use(limiter).with_clock(clock);
  (void)slow.execute([] { return 1; });
  std::thread h([&] { EXPECT_EQ(slow.execute([] { return 2; }), 2); });
  clock->wait_for_sleepers(1);  // the head sleeps until 1 s
  std::atomic<bool> ran{false};
  std::optional<Outcome<int>> late;
  std::thread p([&] {
    late = bounded.execute_outcome([&] {
      ran = true;
      return 3;
    });
  });
  while (limiter->ledger().queued() != 2) std::this_thread::yield();
  clock->advance(500ms);  // P's deadline passes while it waits for its turn
  clock->advance(500ms);  // the head starts and hands the turn to P
  h.join();
  p.join();
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->error(), errc::timeout);
  EXPECT_FALSE(ran.load()) << "past its deadline, it never runs";
  EXPECT_EQ(limiter->ledger().queued(), 0u);
}

TEST(RateLimitThreads, HammeringThreadsNeverExceedTheBurstPlusTheElapsedRate) {
  constexpr int threads = 4;
  constexpr auto interval = 1ms;
  constexpr std::uint32_t burst = 5;
  auto clock = ManualClock::create();
  auto limiter = RateLimitStrategy::create(options(1000, 1s, 0, burst));
  const Shield shield = Shield{}.use(limiter).with_clock(clock);
  const Clock::time_point start = clock->now();
  std::atomic<std::int64_t> admitted{0};
  std::atomic<int> finished{0};
  std::latch go(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      go.arrive_and_wait();
      for (int i = 0; i < 2000; ++i) {
        const Outcome<int> o = shield.execute_outcome([&] {
          admitted.fetch_add(1, std::memory_order_relaxed);
          return 1;
        });
        if (!o.has_value()) {
          EXPECT_EQ(o.error(), errc::rate_limited);
        }
      }
      finished.fetch_add(1);
    });
  }
  go.arrive_and_wait();
  std::int64_t max_seen = 0;
  while (finished.load() != threads) {
    // Every admission so far happened at or before now: the bound holds at every moment.
    const Clock::time_point now = clock->now();
    const std::int64_t count = admitted.load();
    const std::int64_t bound = burst + (now - start) / interval;
    EXPECT_LE(count, bound);
    if (count > bound) break;
    max_seen = count;
    clock->advance(100us);
    std::this_thread::yield();
  }
  for (auto& t : pool) t.join();
  const std::int64_t bound = burst + (clock->now() - start) / interval;
  EXPECT_LE(admitted.load(), bound);
  EXPECT_GE(admitted.load(), static_cast<std::int64_t>(burst));
  EXPECT_GE(admitted.load(), max_seen);
}

TEST(RateLimitThreads, QueuedSynchronousCallsWithRandomStopsConserveTheSchedule) {
  constexpr int threads = 4;
  auto clock = ManualClock::create();
  auto limiter = RateLimitStrategy::create(options(1, 1ms, 3, 2));
  const Shield shield = Shield{}.use(limiter).with_clock(clock);
  const Clock::time_point start = clock->now();
  std::atomic<std::int64_t> admitted{0};
  std::atomic<int> finished{0};
  std::mutex sources_mutex;
  std::vector<std::stop_source> sources(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        std::stop_token token;
        {
          const std::lock_guard lock(sources_mutex);
          sources[static_cast<std::size_t>(t)] = std::stop_source();
          token = sources[static_cast<std::size_t>(t)].get_token();
        }
        const Outcome<int> o = shield.execute_outcome(
            [&] {
              admitted.fetch_add(1, std::memory_order_relaxed);
              return 1;
            },
            token);
        if (!o.has_value()) {
          EXPECT_TRUE(o.error() == errc::rate_limited ||
                      o.error() == asio::error::operation_aborted)
              << o.error().message();
        }
      }
      finished.fetch_add(1);
    });
  }
  std::mt19937 rng(7);
  while (finished.load() != threads) {
    if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
      const std::lock_guard lock(sources_mutex);
      sources[std::uniform_int_distribution<std::size_t>(0, threads - 1)(rng)].request_stop();
    }
    clock->advance(250us);
    std::this_thread::yield();
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(limiter->ledger().queued(), 0u) << "every reservation was used or given back";
  EXPECT_LE(admitted.load(), 2 + (clock->now() - start) / 1ms);
  // Nothing is owed: after a full refill the whole burst is there.
  clock->advance(1s);
  EXPECT_EQ(limiter->state(*clock).available, 2u);
}

}  // namespace
}  // namespace kevlar
