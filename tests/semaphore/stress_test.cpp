// UnpairedSemaphore under concurrency: conservation at quiescence with random cancellation,
// no lost wake-ups, coherent snapshots (each test names the guaranteed behaviour it checks as "B<n>: ..."; docs/semaphore.md states the
// guarantees).
#include "semaphore_test_support.hpp"

#include <kevlar/error.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace kevlar::semaphore_test {
namespace {

// B39 and B5: waiters on two io_context threads acquire with random cancellation while two other
// threads signal; each holder gives its permit back. At quiescence: acquired + aborted = started,
// and the tokens left equal the signals sent (every permit conserved). B42: every concurrent
// snapshot is coherent (never a free token while someone is queued).
TEST(UnpairedSemaphoreStress, RandomCancellationConservesPermits) {
  constexpr int waiters_per_thread = 6000;
  constexpr int signals_per_thread = 1500;
  UnpairedSemaphore sem(2);
  std::atomic<int> acquired{0}, aborted{0}, completions{0};
  std::atomic<bool> snapshots_ok{true};
  std::atomic<bool> stop_watch{false};

  // The contexts outlive every thread: a release on one thread may still be inside its post to
  // another thread's context when that thread finishes.
  asio::io_context contexts[2]{asio::io_context(1), asio::io_context(1)};
  auto waiter_thread = [&](unsigned seed) {
    asio::io_context& ioc = contexts[seed - 1];
    std::mt19937 rng(seed);
    std::vector<std::unique_ptr<asio::cancellation_signal>> sigs;
    sigs.reserve(waiters_per_thread);
    int started = 0;
    while (started < waiters_per_thread) {
      // Keep a handful of waits in flight, cancel some of them at random.
      for (int k = 0; k < 4 && started < waiters_per_thread; ++k, ++started) {
        sigs.push_back(std::make_unique<asio::cancellation_signal>());
        sem.async_acquire(asio::bind_cancellation_slot(sigs.back()->slot(),
                                                       asio::bind_executor(ioc, [&](error_code ec) {
                                                         completions.fetch_add(1);
                                                         if (ec) {
                                                           aborted.fetch_add(1);
                                                         } else {
                                                           acquired.fetch_add(1);
                                                           // The holder's work is done: give the
                                                           // permit back (unpaired from its view).
                                                           EXPECT_TRUE(sem.release());
                                                         }
                                                       })));
        if (rng() % 3 == 0) sigs.back()->emit(asio::cancellation_type::terminal);
      }
      ioc.poll();
      ioc.restart();
    }
    // Cancel whatever is still queued so that the thread can finish, then drain.
    for (auto& s : sigs) s->emit(asio::cancellation_type::terminal);
    ioc.run();
  };
  auto signal_thread = [&] {
    for (int i = 0; i < signals_per_thread; ++i) ASSERT_TRUE(sem.release());
  };
  std::thread watcher([&] {
    while (!stop_watch.load()) {
      const LedgerSnapshot s = sem.snapshot();
      if (s.available != 0 && s.queued != 0) snapshots_ok = false;
    }
  });
  std::vector<std::thread> threads;
  threads.emplace_back(waiter_thread, 1u);
  threads.emplace_back(waiter_thread, 2u);
  threads.emplace_back(signal_thread);
  threads.emplace_back(signal_thread);
  for (auto& t : threads) t.join();
  stop_watch = true;
  watcher.join();

  EXPECT_EQ(completions.load(), 2 * waiters_per_thread);
  EXPECT_EQ(acquired.load() + aborted.load(), 2 * waiters_per_thread);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.available(), 2u + 2u * signals_per_thread);  // every permit came back
  EXPECT_TRUE(snapshots_ok.load());
}

// B38: N threads signal while waiters on M contexts wait: total wake-ups equal signals minus the
// tokens left over; nothing hangs.
TEST(UnpairedSemaphoreStress, SignalsWakeExactlyAsManyWaiters) {
  constexpr int signallers = 2, per_signaller = 1000;
  constexpr int waiting_threads = 2, per_waiter_thread = 900;  // fewer waits than signals
  UnpairedSemaphore sem;
  std::atomic<int> woken{0};
  std::barrier start(signallers + waiting_threads);
  std::vector<std::thread> threads;
  asio::io_context contexts[waiting_threads]{asio::io_context(1), asio::io_context(1)};
  for (int w = 0; w < waiting_threads; ++w) {
    threads.emplace_back([&, w] {
      asio::io_context& ioc = contexts[w];
      for (int i = 0; i < per_waiter_thread; ++i) {
        sem.async_acquire(asio::bind_executor(ioc, [&](error_code ec) {
          EXPECT_FALSE(ec);
          woken.fetch_add(1);
        }));
      }
      start.arrive_and_wait();
      ioc.run();  // returns once all of this thread's waiters were woken
    });
  }
  for (int s = 0; s < signallers; ++s) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < per_signaller; ++i) ASSERT_TRUE(sem.release());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), waiting_threads * per_waiter_thread);
  EXPECT_EQ(sem.available(), static_cast<unsigned>(signallers * per_signaller -
                                                   waiting_threads * per_waiter_thread));
  EXPECT_EQ(sem.waiting(), 0u);
}

// B40: two io_contexts on two threads ping-pong one permit many times without deadlock; each
// side acquires asynchronously and releases from its own handler.
TEST(UnpairedSemaphoreStress, TwoContextsPingPongOnePermit) {
  constexpr int rounds = 20000;
  UnpairedSemaphore sem(1);
  std::atomic<int> total{0};
  asio::io_context contexts[2]{asio::io_context(1), asio::io_context(1)};
  auto side = [&](asio::io_context& ioc) {
    int done = 0;
    std::function<void()> next = [&] {
      sem.async_acquire(asio::bind_executor(ioc, [&](error_code ec) {
        ASSERT_FALSE(ec);
        ++done;
        total.fetch_add(1);
        EXPECT_TRUE(sem.release());
        if (done < rounds) next();
      }));
    };
    next();
    ioc.run();
    EXPECT_EQ(done, rounds);
  };
  std::thread a(side, std::ref(contexts[0])), b(side, std::ref(contexts[1]));
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * rounds);
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// B4: with one permit and blocking and asynchronous callers on several threads, at most one
// holder at a time, and the permit comes back at the end (B37: releases landing between a failed
// fast path and the commit are picked up by the recheck under the lock, never lost).
TEST(UnpairedSemaphoreStress, MutualExclusionAcrossBlockingAndAsyncCallers) {
  constexpr int per_thread = 3000;
  UnpairedSemaphore sem(1);
  std::atomic<int> holders{0}, max_holders{0};
  auto hold = [&] {
    const int now = holders.fetch_add(1) + 1;
    int seen = max_holders.load();
    while (now > seen && !max_holders.compare_exchange_weak(seen, now)) {
    }
    holders.fetch_sub(1);
    EXPECT_TRUE(sem.release());
  };
  std::thread blocking([&] {
    for (int i = 0; i < per_thread; ++i) {
      if (!sem.try_acquire()) sem.acquire();
      hold();
    }
  });
  asio::io_context ioc(1);
  std::thread async([&] {
    for (int i = 0; i < per_thread; ++i) {
      bool done = false;
      sem.async_acquire(asio::bind_executor(ioc, [&](error_code ec) {
        ASSERT_FALSE(ec);
        hold();
        done = true;
      }));
      while (!done) ioc.run_one();
      ioc.restart();
    }
  });
  blocking.join();
  async.join();
  EXPECT_EQ(max_holders.load(), 1);
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// B28 (concurrent): close() racing with waiters being queued from another thread completes every
// waiter exactly once, with success (granted before the close) or closed.
TEST(UnpairedSemaphoreStress, CloseRacingNewWaitersCompletesEachOnce) {
  for (int round = 0; round < 50; ++round) {
    UnpairedSemaphore sem(3);
    asio::io_context ioc(1);
    std::atomic<int> ok{0}, closed{0};
    std::barrier start(2);
    std::thread closer([&] {
      start.arrive_and_wait();
      sem.close();
    });
    start.arrive_and_wait();
    for (int i = 0; i < 40; ++i) {
      sem.async_acquire(asio::bind_executor(ioc, [&](error_code ec) {
        (ec ? closed : ok).fetch_add(1);
        if (ec) {
          EXPECT_EQ(ec, make_error_code(errc::closed));
        }
      }));
    }
    closer.join();
    ioc.run();
    EXPECT_EQ(ok.load() + closed.load(), 40);
    EXPECT_LE(ok.load(), 3);
    EXPECT_EQ(sem.waiting(), 0u);
  }
}

}  // namespace
}  // namespace kevlar::semaphore_test
