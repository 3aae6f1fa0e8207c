// UnpairedSemaphore: allocation behaviour and std::bad_alloc injection (each test names the
// guaranteed behaviour it checks as "B<n>: ..."; docs/semaphore.md states the guarantees).
#include "semaphore_test_support.hpp"

#include <alloc_counter.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <new>

namespace kevlar::semaphore_test {
namespace {

using kevlar::testing::allocation_failure_armed;
using kevlar::testing::AllocScope;
using kevlar::testing::disarm_allocation_failure;
using kevlar::testing::fail_allocation_after;

// B24: a failure of the op block allocation throws std::bad_alloc from the initiating function
// and leaves tokens, queue and list unchanged; a later release frees a token (no ghost waiter).
TEST(UnpairedSemaphoreAlloc, OpBlockFailureChangesNothing) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  Outcome queued;
  sem.async_acquire(record(ioc, queued));  // one real waiter
  CountingAllocator<void> alloc;           // goes through operator new
  Outcome o;
  fail_allocation_after(0);
  EXPECT_THROW(sem.async_acquire(asio::bind_allocator(alloc, record(ioc, o))), std::bad_alloc);
  disarm_allocation_failure();
  EXPECT_EQ(*alloc.count, 0);
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_TRUE(sem.release());
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(queued.succeeded());
  EXPECT_EQ(o.calls, 0);
  EXPECT_EQ(sem.available(), 1u);  // no ghost waiter took the second release
}

// B25: an allocation failure on the way to a free token leaves that token free.
TEST(UnpairedSemaphoreAlloc, FailureWithATokenFreeLeavesItFree) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor(), 1);
  CountingAllocator<void> alloc;
  Outcome o;
  fail_allocation_after(0);
  EXPECT_THROW(sem.async_acquire(asio::bind_allocator(alloc, record(ioc, o))), std::bad_alloc);
  disarm_allocation_failure();
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(drain(ioc), 0u);
}

// B24 (sweep): every allocation of a cancellable wait is failed in turn (op block, slot handler
// storage). Each failure throws and changes nothing; the sweep ends with a wait that succeeds.
TEST(UnpairedSemaphoreAlloc, EveryAllocationPointOfAWaitIsSafe) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  CountingAllocator<void> alloc;  // the op block always reaches operator new
  int failures = 0;
  for (std::uint64_t n = 0; n < 16; ++n) {
    asio::cancellation_signal sig;  // fresh: its handler memory is not yet allocated
    Outcome o;
    const auto [fired, threw] = kevlar::testing::inject_allocation_failure(n, [&] {
      sem.async_acquire(
          asio::bind_cancellation_slot(sig.slot(), asio::bind_allocator(alloc, record(ioc, o))));
    });
    // A failed initiation gives back the work it counted, which stops an otherwise idle context
    // (as Asio's own operations do); make it runnable again.
    ioc.restart();
    if (threw) {
      ++failures;
      EXPECT_TRUE(fired);
      EXPECT_EQ(sem.waiting(), 0u) << n;
      EXPECT_EQ(sem.available(), 0u) << n;
      EXPECT_FALSE(sig.slot().has_handler()) << n;
      continue;
    }
    EXPECT_FALSE(fired) << n;  // no allocation swallowed a failure
    EXPECT_EQ(sem.waiting(), 1u);
    EXPECT_TRUE(sem.release());
    drain(ioc);
    EXPECT_TRUE(o.succeeded());
    break;
  }
  // At least the op block; the slot handler's storage too when it is not already cached.
  EXPECT_GE(failures, 1);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.available(), 0u);
}

// B26: the ready path (try_acquire + release) and a release without waiters make no allocation.
TEST(UnpairedSemaphoreAlloc, ReadyPathsDoNotAllocate) {
  UnpairedSemaphore sem(1);
  AllocScope scope;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(sem.try_acquire());
    ASSERT_TRUE(sem.release());
  }
  ASSERT_TRUE(sem.release(5));
  EXPECT_EQ(scope.count(), 0u);
}

// B27: between parking and delivery nothing allocates: with a failure armed after the waiter
// parked, release() still hands over and the waiter still completes; after warm-up a whole
// park-release-deliver cycle started from a handler (where Asio's recycling caches live) makes no
// allocation at all.
TEST(UnpairedSemaphoreAlloc, NothingAllocatesBetweenParkAndDelivery) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  asio::cancellation_signal sig;
  Outcome o;
  sem.async_acquire(asio::bind_cancellation_slot(sig.slot(), record(ioc, o)));
  fail_allocation_after(0);
  AllocScope scope;
  EXPECT_TRUE(sem.release());
  drain(ioc);
  const bool still_armed = allocation_failure_armed();
  disarm_allocation_failure();
  EXPECT_TRUE(still_armed);
  EXPECT_TRUE(o.succeeded());
  EXPECT_EQ(scope.count(), 0u);

  // A chain of cycles, each started from the previous waiter's handler (as a server's handlers
  // do): the op block and the slot storage are recycled from the thread's caches.
  std::uint64_t at_warm = 0, at_end = 0;
  int completed = 0;
  std::function<void()> cycle = [&] {
    sem.async_acquire(
        asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](error_code ec) {
                                       EXPECT_FALSE(ec);
                                       ++completed;
                                       if (completed == 3)
                                         at_warm = kevlar::testing::thread_allocations().count;
                                       if (completed == 103) {
                                         at_end = kevlar::testing::thread_allocations().count;
                                         return;
                                       }
                                       cycle();
                                     })));
    EXPECT_TRUE(sem.release());
  };
  asio::post(ioc, cycle);
  drain(ioc);
  EXPECT_EQ(completed, 103);
  EXPECT_EQ(at_end - at_warm, 0u);
}

// A cancelled wait's delivery allocates nothing either (the aborted completion uses the reserve),
// and a whole park-cancel-deliver cycle from a handler reaches malloc zero times after warm-up.
TEST(UnpairedSemaphoreAlloc, CancellationDeliveryDoesNotAllocate) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  asio::cancellation_signal sig;
  Outcome o;
  sem.async_acquire(asio::bind_cancellation_slot(sig.slot(), record(ioc, o)));
  AllocScope scope;
  sig.emit(asio::cancellation_type::terminal);
  drain(ioc);
  EXPECT_EQ(o.ec, asio::error::operation_aborted);
  EXPECT_EQ(scope.count(), 0u);

  std::uint64_t at_warm = 0, at_end = 0;
  int aborted = 0;
  std::function<void()> cycle = [&] {
    sem.async_acquire(
        asio::bind_cancellation_slot(sig.slot(), asio::bind_executor(ioc, [&](error_code ec) {
                                       EXPECT_EQ(ec, asio::error::operation_aborted);
                                       ++aborted;
                                       if (aborted == 3)
                                         at_warm = kevlar::testing::thread_allocations().count;
                                       if (aborted == 103) {
                                         at_end = kevlar::testing::thread_allocations().count;
                                         return;
                                       }
                                       cycle();
                                     })));
    sig.emit(asio::cancellation_type::terminal);
  };
  asio::post(ioc, cycle);
  drain(ioc);
  EXPECT_EQ(aborted, 103);
  EXPECT_EQ(at_end - at_warm, 0u);
}

}  // namespace
}  // namespace kevlar::semaphore_test
