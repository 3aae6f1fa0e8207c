// UnpairedSemaphore: permit conservation, FIFO, close/destruction and executor rules
// (each test names the guaranteed behaviour it checks as "B<n>: ..."; docs/semaphore.md states the
// guarantees).
#include "semaphore_test_support.hpp"

#include <kevlar/error.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <latch>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace kevlar::semaphore_test {
namespace {

// B1: a new semaphore with N tokens grants exactly N try_acquire calls, then refuses, and has N
// again after N releases.
TEST(UnpairedSemaphore, GrantsExactlyTheInitialTokens) {
  UnpairedSemaphore sem(3);
  EXPECT_EQ(sem.available(), 3u);
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_FALSE(sem.try_acquire());
  EXPECT_EQ(sem.available(), 0u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 3u);
  EXPECT_EQ(sem.waiting(), 0u);
}

TEST(UnpairedSemaphore, InitialCountMayBeZero) {
  UnpairedSemaphore sem;
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_FALSE(sem.try_acquire());
  EXPECT_TRUE(sem.release());
  EXPECT_TRUE(sem.try_acquire());
}

// B3: waiters queue when no token is free; none completes before a release, and each release
// completes exactly one of them.
TEST(UnpairedSemaphore, QueuedWaitersCompleteOnlyOnRelease) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor(), 3);
  std::vector<Outcome> out(8);
  for (auto& o : out) sem.async_acquire(record(ioc, o));
  drain(ioc);
  int done = 0;
  for (auto& o : out) done += o.calls;
  EXPECT_EQ(done, 3);
  EXPECT_EQ(sem.waiting(), 5u);
  EXPECT_EQ(sem.available(), 0u);
  for (int r = 1; r <= 5; ++r) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
    done = 0;
    for (auto& o : out) done += o.calls;
    EXPECT_EQ(done, 3 + r);
    EXPECT_EQ(sem.waiting(), static_cast<unsigned>(5 - r));
  }
  for (auto& o : out) EXPECT_TRUE(o.succeeded());
  EXPECT_EQ(sem.available(), 0u);
}

// B7: a release with nobody queued adds a token; with a waiter queued it hands over directly
// (no token becomes visible) and wakes exactly that waiter.
TEST(UnpairedSemaphore, ReleaseHandsOverDirectlyToAQueuedWaiter) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_TRUE(sem.try_acquire());

  Outcome a, b;
  sem.async_acquire(record(ioc, a));
  sem.async_acquire(record(ioc, b));
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 0u);  // handed over, not published
  EXPECT_EQ(sem.waiting(), 1u);
  drain(ioc);
  EXPECT_TRUE(a.succeeded());
  EXPECT_EQ(b.calls, 0);
  sem.close();
  drain(ioc);
}

// B8: K parked waiters and K releases (one release(K) too) complete exactly K waiters.
TEST(UnpairedSemaphore, KReleasesCompleteKWaiters) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  constexpr int k = 6;
  std::vector<Outcome> out(k + 2);
  for (auto& o : out) sem.async_acquire(record(ioc, o));
  EXPECT_TRUE(sem.release(2));
  for (int i = 2; i < k; ++i) EXPECT_TRUE(sem.release());
  drain(ioc);
  for (int i = 0; i < k; ++i) EXPECT_TRUE(out[i].succeeded()) << i;
  EXPECT_EQ(out[k].calls, 0);
  EXPECT_EQ(out[k + 1].calls, 0);
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.waiting(), 2u);
  // A multi-permit release serves the remaining waiters first and keeps the rest as tokens.
  EXPECT_TRUE(sem.release(5));
  drain(ioc);
  EXPECT_TRUE(out[k].succeeded());
  EXPECT_TRUE(out[k + 1].succeeded());
  EXPECT_EQ(sem.available(), 3u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// B9: signals before any wait accumulate; waits then complete at once; try_acquire drains exactly
// the accumulated tokens.
TEST(UnpairedSemaphore, SignalsAccumulateBeforeWaits) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  EXPECT_TRUE(sem.release());
  EXPECT_TRUE(sem.release());
  Outcome a, b;
  sem.async_acquire(record(ioc, a));
  sem.async_acquire(record(ioc, b));
  EXPECT_EQ(sem.waiting(), 0u);
  drain(ioc);
  EXPECT_TRUE(a.succeeded());
  EXPECT_TRUE(b.succeeded());
  EXPECT_TRUE(sem.release(4));
  int drained = 0;
  while (sem.try_acquire()) ++drained;
  EXPECT_EQ(drained, 4);
}

// B10: a release that would pass the top of the word is refused before anything changes.
TEST(UnpairedSemaphore, OverflowingReleaseIsRefusedWithoutChange) {
  UnpairedSemaphore sem(TokenLedger::max_count - 1);
  EXPECT_FALSE(sem.release(2));
  EXPECT_EQ(sem.available(), TokenLedger::max_count - 1);
  EXPECT_TRUE(sem.release(1));
  EXPECT_EQ(sem.available(), TokenLedger::max_count);
  EXPECT_FALSE(sem.release(1));
  EXPECT_EQ(sem.available(), TokenLedger::max_count);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_TRUE(sem.release(0));
  EXPECT_TRUE(sem.try_acquire());
  EXPECT_EQ(sem.available(), TokenLedger::max_count - 1);
}

// The ledger alone: a release under the lock serves min(n, queued) waiters and keeps the rest,
// refusing (unchanged) when the rest would overflow.
TEST(TokenLedger, LockedReleaseSplitsBetweenWaitersAndTokens) {
  TokenLedger ledger(0);
  EXPECT_EQ(ledger.admit_locked(), Admission::queued);
  EXPECT_EQ(ledger.admit_locked(), Admission::queued);
  EXPECT_EQ(ledger.try_release(1), ReleaseStep::contended);
  EXPECT_EQ(ledger.release_locked(5), 2);
  EXPECT_EQ(ledger.snapshot().available, 3u);
  EXPECT_EQ(ledger.snapshot().queued, 0u);
  EXPECT_EQ(ledger.admit_locked(), Admission::granted);  // T3': a token appeared
  EXPECT_EQ(ledger.snapshot().available, 2u);
  EXPECT_EQ(ledger.try_release(TokenLedger::max_count), ReleaseStep::refused);
  EXPECT_EQ(ledger.release_locked(TokenLedger::max_count), -1);
  EXPECT_EQ(ledger.snapshot().available, 2u);
  EXPECT_EQ(ledger.close_locked(), 0u);
  EXPECT_EQ(ledger.admit_locked(), Admission::closed);
  EXPECT_FALSE(ledger.try_acquire());
}

// B11: waiters complete in the order they queued.
TEST(UnpairedSemaphore, WaitersCompleteInFifoOrder) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) {
    sem.async_acquire(asio::bind_executor(ioc, [&order, i](error_code ec) {
      EXPECT_FALSE(ec);
      order.push_back(i);
    }));
  }
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
  }
  ASSERT_EQ(order.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(order[i], i);
}

// B12: a newcomer never takes a permit while a waiter is queued, even right after a release.
TEST(UnpairedSemaphore, NewcomerNeverOvertakesAQueuedWaiter) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  Outcome first, late;
  sem.async_acquire(record(ioc, first));
  Outcome second;
  sem.async_acquire(record(ioc, second));
  EXPECT_TRUE(sem.release());  // handed to `first`, still undelivered
  EXPECT_FALSE(sem.try_acquire());
  sem.async_acquire(record(ioc, late));
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(first.succeeded());
  EXPECT_TRUE(second.succeeded());
  EXPECT_EQ(late.calls, 0);
  sem.close();
  drain(ioc);
  EXPECT_EQ(late.ec, make_error_code(errc::closed));
}

// B28: close() completes every queued waiter exactly once with errc::closed, on its executor and
// never inline; later acquires fail at once; releases still work.
TEST(UnpairedSemaphore, CloseCompletesEveryWaiterOnceWithClosed) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::vector<Outcome> out(4);
  for (auto& o : out) sem.async_acquire(record(ioc, o));
  sem.close();
  for (auto& o : out) EXPECT_EQ(o.calls, 0);  // not inline
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_TRUE(sem.is_closed());
  drain(ioc);
  for (auto& o : out) {
    EXPECT_EQ(o.calls, 1);
    EXPECT_EQ(o.ec, make_error_code(errc::closed));
  }
  sem.close();  // idempotent
  drain(ioc);
  for (auto& o : out) EXPECT_EQ(o.calls, 1);

  Outcome after;
  EXPECT_TRUE(sem.release());
  sem.async_acquire(record(ioc, after));
  EXPECT_FALSE(sem.try_acquire());
  drain(ioc);
  EXPECT_EQ(after.ec, make_error_code(errc::closed));
  EXPECT_EQ(sem.available(), 1u);  // the release still counted; nothing consumed it
  EXPECT_THROW(sem.acquire(), boost::system::system_error);
}

// B28 (destruction): destroying the semaphore completes each queued waiter once with closed.
TEST(UnpairedSemaphore, DestructionCompletesQueuedWaitersWithClosed) {
  asio::io_context ioc;
  std::vector<Outcome> out(3);
  {
    UnpairedSemaphore sem(ioc.get_executor());
    for (auto& o : out) sem.async_acquire(record(ioc, o));
  }
  drain(ioc);
  for (auto& o : out) {
    EXPECT_EQ(o.calls, 1);
    EXPECT_EQ(o.ec, make_error_code(errc::closed));
  }
}

// B30: destroying an io_context with a granted but undelivered completion returns the permit,
// and passes it on to the next waiter if one is queued.
TEST(UnpairedSemaphore, UndeliveredGrantIsReturnedWhenItsContextDies) {
  UnpairedSemaphore sem;
  {
    asio::io_context doomed;
    Outcome o;
    sem.async_acquire(record(doomed, o));
    EXPECT_TRUE(sem.release());
    EXPECT_EQ(sem.available(), 0u);
    EXPECT_EQ(o.calls, 0);
  }
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.waiting(), 0u);

  asio::io_context survivor;
  Outcome next;
  {
    asio::io_context doomed;
    Outcome o;
    EXPECT_TRUE(sem.try_acquire());
    sem.async_acquire(record(doomed, o));
    sem.async_acquire(record(survivor, next));
    EXPECT_TRUE(sem.release());  // granted to the doomed waiter
  }
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.waiting(), 0u);
  drain(survivor);
  EXPECT_TRUE(next.succeeded());  // the permit moved on

  // A ready grant (T1) whose delivery dies is returned too.
  EXPECT_TRUE(sem.release());
  {
    asio::io_context doomed;
    Outcome o;
    sem.async_acquire(record(doomed, o));
    EXPECT_EQ(sem.available(), 0u);
  }
  EXPECT_EQ(sem.available(), 1u);
}

// B32: the woken waiter runs on its associated executor (a strand of a context run by another
// thread) even when the release comes from a third thread.
TEST(UnpairedSemaphore, WokenWaiterRunsOnItsOwnStrand) {
  asio::io_context ioc;
  auto strand = asio::make_strand(ioc);
  UnpairedSemaphore sem;
  std::latch done(1);
  bool on_strand = false;
  std::thread::id ran_on;
  sem.async_acquire(asio::bind_executor(strand, [&](error_code ec) {
    EXPECT_FALSE(ec);
    on_strand = strand.running_in_this_thread();
    ran_on = std::this_thread::get_id();
    done.count_down();
  }));
  std::thread runner([&] { ioc.run(); });
  std::thread releaser([&] { EXPECT_TRUE(sem.release()); });
  const std::thread::id runner_id = runner.get_id();
  releaser.join();
  done.wait();
  runner.join();  // run() returns once the waiter completed (its work is gone)
  EXPECT_TRUE(on_strand);
  EXPECT_EQ(ran_on, runner_id);
}

// B33: no handler runs inside release(), close() or a ready async_acquire.
thread_local bool inside_semaphore_call = false;

TEST(UnpairedSemaphore, NoHandlerRunsInsideReleaseCloseOrInitiation) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor(), 1);
  int ran = 0;
  auto handler = [&](error_code) {
    EXPECT_FALSE(inside_semaphore_call);
    ++ran;
  };
  inside_semaphore_call = true;
  sem.async_acquire(asio::bind_executor(ioc, handler));  // ready: still posted
  sem.async_acquire(asio::bind_executor(ioc, handler));
  sem.async_acquire(asio::bind_executor(ioc, handler));
  EXPECT_TRUE(sem.release());
  sem.close();
  inside_semaphore_call = false;
  EXPECT_EQ(ran, 0);
  drain(ioc);
  EXPECT_EQ(ran, 3);
}

// B34 (Boost 1.81 has no associated immediate executor): a ready async_acquire completes through
// the handler's executor, not inline.
TEST(UnpairedSemaphore, ReadyAcquireIsPostedToTheHandlersExecutor) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor(), 1);
  Outcome o;
  sem.async_acquire(record(ioc, o));
  EXPECT_EQ(o.calls, 0);
  EXPECT_EQ(sem.available(), 0u);  // the permit is taken at initiation
  EXPECT_EQ(drain(ioc), 1u);
  EXPECT_TRUE(o.succeeded());
}

// B35: the operation block comes from the handler's associated allocator.
TEST(UnpairedSemaphore, OperationUsesTheHandlersAllocator) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  CountingAllocator<void> alloc;
  Outcome o;
  sem.async_acquire(asio::bind_allocator(alloc, record(ioc, o)));
  EXPECT_EQ(*alloc.count, 1);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(o.succeeded());
  EXPECT_EQ(*alloc.count, 1);  // delivery reused the op's reserve
}

// B36: a parked waiter keeps the io_context from running out of work; its completion releases it.
TEST(UnpairedSemaphore, ParkedWaiterKeepsTheContextAlive) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  Outcome o;
  sem.async_acquire(record(ioc, o));
  EXPECT_EQ(ioc.poll(), 0u);
  EXPECT_FALSE(ioc.stopped());  // outstanding work: the waiter
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(ioc.poll(), 1u);
  EXPECT_TRUE(ioc.stopped());  // no work left
  EXPECT_TRUE(o.succeeded());
}

// The blocking acquire() shares the FIFO with asynchronous waiters.
TEST(UnpairedSemaphore, BlockingAcquireSharesTheFifo) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  Outcome before;
  sem.async_acquire(record(ioc, before));
  std::atomic<bool> blocked_done{false};
  std::thread blocked([&] {
    sem.acquire();
    blocked_done = true;
  });
  // Wait (without sleeping on time) until the blocking caller is queued behind `before`.
  while (sem.waiting() < 2) std::this_thread::yield();
  Outcome after;
  sem.async_acquire(record(ioc, after));
  EXPECT_TRUE(sem.release());  // -> before
  drain(ioc);
  EXPECT_TRUE(before.succeeded());
  EXPECT_FALSE(blocked_done.load());
  EXPECT_TRUE(sem.release());  // -> the blocked thread
  blocked.join();
  EXPECT_TRUE(blocked_done.load());
  EXPECT_EQ(after.calls, 0);
  EXPECT_TRUE(sem.release());  // -> after
  drain(ioc);
  EXPECT_TRUE(after.succeeded());
}

TEST(UnpairedSemaphore, BlockingAcquireFailsWhenClosed) {
  UnpairedSemaphore sem;
  std::thread blocked([&] { EXPECT_EQ(sem.acquire_or_error(), make_error_code(errc::closed)); });
  while (sem.waiting() < 1) std::this_thread::yield();
  sem.close();
  blocked.join();
  EXPECT_EQ(sem.acquire_or_error(), make_error_code(errc::closed));
}

// A stop token takes a blocked caller out of the queue: it consumes nothing, the waiters behind it
// keep their order, and a release afterwards goes to them, not to the caller that left.
TEST(UnpairedSemaphore, BlockingAcquireLeavesTheQueueWhenStopped) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::stop_source stop;
  boost::system::error_code blocked_ec;
  std::thread blocked([&] { blocked_ec = sem.acquire_or_error(stop.get_token()); });
  while (sem.waiting() < 1) std::this_thread::yield();
  Outcome behind;
  sem.async_acquire(record(ioc, behind));
  EXPECT_EQ(sem.waiting(), 2U);
  stop.request_stop();
  blocked.join();
  EXPECT_EQ(blocked_ec, asio::error::operation_aborted);
  EXPECT_EQ(sem.waiting(), 1U);
  EXPECT_EQ(sem.available(), 0U);
  EXPECT_TRUE(sem.release());  // -> behind
  drain(ioc);
  EXPECT_TRUE(behind.succeeded());
  EXPECT_EQ(sem.available(), 0U);
  EXPECT_EQ(sem.waiting(), 0U);
}

TEST(UnpairedSemaphore, BlockingAcquireWithAStopAlreadyRequestedTakesNothing) {
  UnpairedSemaphore sem(1);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(sem.acquire_or_error(stop.get_token()), asio::error::operation_aborted);
  EXPECT_EQ(sem.available(), 1U);
  EXPECT_THROW(sem.acquire(stop.get_token()), boost::system::system_error);
  EXPECT_EQ(sem.available(), 1U);
  sem.acquire(std::stop_source().get_token());  // an unrequested token acquires as usual
  EXPECT_EQ(sem.available(), 0U);
}

// A stop request racing a grant resolves exactly once: either the caller owns the permit, or it
// left the queue and the permit stayed in the semaphore. Never both, never neither.
TEST(UnpairedSemaphore, BlockingAcquireStopRacingAGrantConservesThePermit) {
  for (int round = 0; round < 2000; ++round) {
    UnpairedSemaphore sem;
    std::stop_source stop;
    boost::system::error_code ec;
    std::thread blocked([&] { ec = sem.acquire_or_error(stop.get_token()); });
    while (sem.waiting() < 1) std::this_thread::yield();
    std::thread stopper([&] { stop.request_stop(); });
    EXPECT_TRUE(sem.release());
    stopper.join();
    blocked.join();
    if (ec) {
      ASSERT_EQ(ec, asio::error::operation_aborted);
      ASSERT_EQ(sem.available(), 1U) << "round " << round;
    } else {
      ASSERT_EQ(sem.available(), 0U) << "round " << round;
    }
    ASSERT_EQ(sem.waiting(), 0U);
  }
}

// Completion tokens: deferred (the default) and use_awaitable in coroutines, as_tuple, use_future.
TEST(UnpairedSemaphore, WorksWithCoroutinesTuplesAndFutures) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor(), 1);
  int stage = 0;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        co_await sem.async_acquire();  // deferred by default
        stage = 1;
        co_await sem.async_acquire(asio::use_awaitable);  // waits for the release below
        stage = 2;
        sem.close();
        auto [ec] = co_await sem.async_acquire(asio::as_tuple(asio::use_awaitable));
        EXPECT_EQ(ec, make_error_code(errc::closed));
        stage = 3;
      },
      [](std::exception_ptr e) { EXPECT_FALSE(e); });
  drain(ioc);
  EXPECT_EQ(stage, 1);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_EQ(stage, 3);

  UnpairedSemaphore other(1);  // handlers without an executor run on the system executor
  std::future<void> f = other.async_acquire(asio::use_future);
  f.get();
  std::future<void> g = other.async_acquire(asio::use_future);
  other.close();
  EXPECT_THROW(g.get(), boost::system::system_error);
}

// A blocking acquire() of a closed semaphore throws system_error with errc::closed, even when
// tokens are left: closing refuses every new acquisition.
TEST(UnpairedSemaphore, BlockingAcquireThrowsClosedOnceClosedEvenWithTokensLeft) {
  UnpairedSemaphore sem(1);
  sem.close();
  try {
    sem.acquire();
    ADD_FAILURE() << "no error";
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), make_error_code(errc::closed));
    EXPECT_NE(std::string(e.what()).find("kevlar::UnpairedSemaphore"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(sem.waiting(), 0U);
}

// A handler whose associated executor is an any_io_executor around something other than an
// io_context executor (a strand) is delivered through that executor, ready or woken.
TEST(UnpairedSemaphore, WaiterWithATypeErasedStrandRunsOnTheStrand) {
  asio::io_context ioc;
  auto strand = asio::make_strand(ioc);
  UnpairedSemaphore sem(1);
  std::vector<bool> on_strand;
  const auto handler = [&](error_code ec) {
    EXPECT_FALSE(ec);
    on_strand.push_back(strand.running_in_this_thread());
  };
  sem.async_acquire(asio::bind_executor(asio::any_io_executor(strand), handler));  // ready
  sem.async_acquire(asio::bind_executor(asio::any_io_executor(strand), handler));  // queued
  EXPECT_EQ(sem.waiting(), 1U);
  EXPECT_TRUE(on_strand.empty()) << "no handler runs inside the initiation";
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.waiting(), 0U);
  ioc.run();
  EXPECT_EQ(on_strand, (std::vector<bool>{true, true}));
  EXPECT_EQ(sem.available(), 0U);
}

// The delivery reserve serves one allocation that fits it; a second one while it is taken, one
// too large and one over-aligned come from Asio's recycling allocator, and freeing those leaves
// the reserve taken until its own block is freed.
TEST(ReserveAllocator, ServesOneFittingAllocationAndSendsTheRestToTheHeap) {
  struct alignas(2 * alignof(std::max_align_t)) OverAligned {
    unsigned char bytes[2 * alignof(std::max_align_t)];
  };
  detail::DeliveryReserve reserve;
  detail::ReserveAllocator<std::uint64_t> alloc(&reserve);
  const void* const block = reserve.bytes;
  std::uint64_t* first = alloc.allocate(detail::delivery_reserve_size / sizeof(std::uint64_t));
  EXPECT_EQ(static_cast<void*>(first), block);
  EXPECT_TRUE(reserve.in_use);
  std::uint64_t* second = alloc.allocate(1);
  EXPECT_NE(static_cast<void*>(second), block) << "the reserve is taken";
  alloc.deallocate(second, 1);
  EXPECT_TRUE(reserve.in_use);
  alloc.deallocate(first, detail::delivery_reserve_size / sizeof(std::uint64_t));
  EXPECT_FALSE(reserve.in_use);

  const std::size_t too_many = detail::delivery_reserve_size / sizeof(std::uint64_t) + 1;
  std::uint64_t* large = alloc.allocate(too_many);
  EXPECT_NE(static_cast<void*>(large), block);
  EXPECT_FALSE(reserve.in_use);
  alloc.deallocate(large, too_many);

  detail::ReserveAllocator<OverAligned> aligned(alloc);
  EXPECT_TRUE(aligned == alloc);
  OverAligned* over = aligned.allocate(1);
  EXPECT_NE(static_cast<void*>(over), block);
  EXPECT_FALSE(reserve.in_use);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(over) % alignof(OverAligned), 0U);
  aligned.deallocate(over, 1);
}

}  // namespace
}  // namespace kevlar::semaphore_test
