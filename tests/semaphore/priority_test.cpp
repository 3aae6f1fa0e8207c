// UnpairedSemaphore with waiter priorities: grant order (higher first, arrival order within a
// priority), displacement from a full queue, evict_below, cancellation and close across
// priorities, and permit conservation when all of them race (docs/semaphore.md states the
// guarantees of the queue).
#include "semaphore_test_support.hpp"

#include <kevlar/clock.hpp>
#include <kevlar/error.hpp>
#include <kevlar/limiter_ledger.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace kevlar::semaphore_test {
namespace {

using namespace std::chrono_literals;
using asio::cancellation_type;

/// A semaphore whose ledger refuses to queue past its queue limit (the concurrency limiter's).
using LimitedSemaphore = BasicUnpairedSemaphore<LimiterLedger>;

constexpr std::int32_t no_waiter = UnpairedSemaphore::no_waiter_priority;
static_assert(LimitedSemaphore::no_waiter_priority == no_waiter);

/// A handler bound to `ioc` that records into `out` and, on success, appends `name` to `granted`
/// (so `granted` spells the order in which the waiters were given their permits).
auto record_grant(asio::io_context& ioc, Outcome& out, std::string& granted, char name) {
  return asio::bind_executor(ioc, [&out, &granted, name](error_code ec) {
    ++out.calls;
    out.ec = ec;
    out.thread = std::this_thread::get_id();
    if (!ec) granted += name;
  });
}

/// record_grant(...), cancelled through `sig`.
auto cancellable_grant(asio::cancellation_signal& sig, asio::io_context& ioc, Outcome& out,
                       std::string& granted, char name) {
  return asio::bind_cancellation_slot(sig.slot(), record_grant(ioc, out, granted, name));
}

/// True if `out` completed exactly once, with `code`.
bool completed_with(const Outcome& out, errc code) {
  return out.calls == 1 && out.ec == make_error_code(code);
}

// Waiters of priorities 0, 5, 0, 5, 9: one release at a time grants the 9, then the 5s and then
// the 0s, each pair in the order it queued.
TEST(UnpairedSemaphorePriority, HigherPriorityIsGrantedFirstThenArrivalOrder) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::string granted;
  Outcome a, b, c, d, e;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(5, record_grant(ioc, b, granted, 'b'));
  sem.async_acquire(0, record_grant(ioc, c, granted, 'c'));
  sem.async_acquire(5, record_grant(ioc, d, granted, 'd'));
  sem.async_acquire(9, record_grant(ioc, e, granted, 'e'));
  EXPECT_EQ(sem.waiting(), 5u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  drain(ioc);
  EXPECT_EQ(granted, "");

  const std::string expected = "ebdac";
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
    EXPECT_EQ(granted, expected.substr(0, i + 1));
    EXPECT_EQ(sem.waiting(), expected.size() - i - 1);
  }
  for (const Outcome* o : {&a, &b, &c, &d, &e}) EXPECT_TRUE(o->succeeded());
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
}

// A release of several permits serves the first waiters in the queue's order, and the rest of the
// permits become tokens once the queue is empty.
TEST(UnpairedSemaphorePriority, MultiPermitReleaseServesTheQueueInPriorityOrder) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::string granted;
  Outcome out[5];
  const std::int32_t priorities[5] = {0, 5, 0, 5, 9};
  for (int i = 0; i < 5; ++i) {
    sem.async_acquire(priorities[i],
                      record_grant(ioc, out[i], granted, static_cast<char>('a' + i)));
  }
  EXPECT_TRUE(sem.release(3));
  drain(ioc);
  EXPECT_EQ(granted, "ebd");
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  EXPECT_TRUE(sem.release(4));
  drain(ioc);
  EXPECT_EQ(granted, "ebdac");
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.available(), 2u);
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
}

// The default priority is 0: waiters without one interleave with explicit 0s in arrival order,
// behind a 1 and ahead of a -1, whatever the order they came in.
TEST(UnpairedSemaphorePriority, DefaultPriorityIsZeroAndKeepsArrivalOrder) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::string granted;
  Outcome x, a, b, c, d, y;
  sem.async_acquire(-1, record_grant(ioc, x, granted, 'x'));
  sem.async_acquire(record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(0, record_grant(ioc, b, granted, 'b'));
  sem.async_acquire(record_grant(ioc, c, granted, 'c'));
  sem.async_acquire(0, record_grant(ioc, d, granted, 'd'));
  sem.async_acquire(1, record_grant(ioc, y, granted, 'y'));
  EXPECT_EQ(sem.lowest_queued_priority(), -1);
  for (int i = 0; i < 6; ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
  }
  EXPECT_EQ(granted, "yabcdx");
  EXPECT_EQ(sem.waiting(), 0u);
}

// The whole range of std::int32_t orders as numbers: the extremes are ordinary priorities.
TEST(UnpairedSemaphorePriority, ExtremePrioritiesOrderAsNumbers) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  constexpr std::int32_t lowest = std::numeric_limits<std::int32_t>::min();
  constexpr std::int32_t highest = std::numeric_limits<std::int32_t>::max();
  std::string granted;
  Outcome out[5];
  sem.async_acquire(lowest, record_grant(ioc, out[0], granted, 'a'));
  sem.async_acquire(-1, record_grant(ioc, out[1], granted, 'b'));
  sem.async_acquire(highest, record_grant(ioc, out[2], granted, 'c'));
  sem.async_acquire(highest - 1, record_grant(ioc, out[3], granted, 'd'));
  sem.async_acquire(lowest, record_grant(ioc, out[4], granted, 'e'));
  EXPECT_EQ(sem.lowest_queued_priority(), lowest);
  EXPECT_TRUE(sem.release(5));
  drain(ioc);
  EXPECT_EQ(granted, "cdbae");
}

// lowest_queued_priority() is the priority of the queue's tail: it moves as waiters join behind
// or ahead of the tail, as grants empty the queue, and reads no_waiter_priority when empty.
TEST(UnpairedSemaphorePriority, LowestQueuedPriorityFollowsTheTail) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  std::string granted;
  Outcome out[4];
  sem.async_acquire(9, record_grant(ioc, out[0], granted, 'a'));
  EXPECT_EQ(sem.lowest_queued_priority(), 9);
  sem.async_acquire(5, record_grant(ioc, out[1], granted, 'b'));
  EXPECT_EQ(sem.lowest_queued_priority(), 5);
  sem.async_acquire(7, record_grant(ioc, out[2], granted, 'c'));  // ahead of the tail
  EXPECT_EQ(sem.lowest_queued_priority(), 5);
  sem.async_acquire(-2, record_grant(ioc, out[3], granted, 'd'));
  EXPECT_EQ(sem.lowest_queued_priority(), -2);
  EXPECT_TRUE(sem.release(3));
  EXPECT_EQ(sem.lowest_queued_priority(), -2);
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  drain(ioc);
  EXPECT_EQ(granted, "acbd");
}

// A blocking waiter (acquire_until on a ManualClock) takes its place among asynchronous waiters
// by its priority: with 0(async), 5(blocking), 0, 5, 9 queued, the grants go to 9, the blocking
// 5, the other 5, then the 0s in arrival order.
TEST(UnpairedSemaphorePriority, BlockingWaiterIsServedInItsPriorityPlace) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  ManualClock clock;
  const Clock::time_point deadline = clock.now() + 1h;
  std::string granted;
  Outcome a, c, d, e;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  std::optional<error_code> blocked_ec;
  std::thread blocked([&] { blocked_ec = sem.acquire_until(clock, deadline, {}, 5); });
  clock.wait_for_sleepers(1);  // queued behind `a` (it parks before it sleeps)
  sem.async_acquire(0, record_grant(ioc, c, granted, 'c'));
  sem.async_acquire(5, record_grant(ioc, d, granted, 'd'));
  sem.async_acquire(9, record_grant(ioc, e, granted, 'e'));
  EXPECT_EQ(sem.waiting(), 5u);

  EXPECT_TRUE(sem.release());  // -> e
  drain(ioc);
  EXPECT_EQ(granted, "e");
  EXPECT_TRUE(sem.release());  // -> the blocked 5, which queued before d
  drain(ioc);
  EXPECT_EQ(granted, "e");
  // A grant wakes the sleeper before the deadline passes; were the permit given to someone else,
  // the deadline ends the wait with errc::timeout instead of leaving the test hanging.
  clock.advance(2h);
  blocked.join();
  ASSERT_TRUE(blocked_ec.has_value());
  EXPECT_FALSE(*blocked_ec) << blocked_ec->message();
  EXPECT_EQ(sem.waiting(), 3u);

  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
  }
  EXPECT_EQ(granted, "edac");
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// A full queue (one permit held, two 0s waiting, queue limit 2): a newcomer of priority 1 takes
// the place of the newest 0, which completes with the ledger's rejection; the ledger still counts
// two waiters, and the newcomer is served before the older 0.
TEST(UnpairedSemaphorePriority, NewcomerOfHigherPriorityDisplacesTheNewestOfTheLowest) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 2u);
  ASSERT_TRUE(sem.try_acquire());  // the holder
  std::string granted;
  Outcome a, b, c;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(0, record_grant(ioc, b, granted, 'b'));
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_TRUE(sem.ledger().full());
  EXPECT_EQ(sem.lowest_queued_priority(), 0);

  sem.async_acquire(1, record_grant(ioc, c, granted, 'c'));
  EXPECT_EQ(b.calls, 0);  // completed on its executor, not inside async_acquire
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_EQ(sem.ledger().in_use(), 1u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);  // `a` is the tail now
  drain(ioc);
  EXPECT_TRUE(completed_with(b, errc::concurrency_limit_exceeded));
  EXPECT_EQ(a.calls, 0);
  EXPECT_EQ(c.calls, 0);

  EXPECT_TRUE(sem.release());  // the holder's permit -> c
  drain(ioc);
  EXPECT_EQ(granted, "c");
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  EXPECT_TRUE(sem.release());  // c's -> a
  drain(ioc);
  EXPECT_EQ(granted, "ca");
  EXPECT_TRUE(a.succeeded());
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  EXPECT_TRUE(sem.release());  // a's
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.ledger().in_use(), 0u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// On a full queue a newcomer of equal or lower priority than the tail is rejected as before, and
// nobody queued is displaced: asynchronous and blocking newcomers alike.
TEST(UnpairedSemaphorePriority, NewcomerOfEqualOrLowerPriorityIsRejectedAndDisplacesNobody) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 2u);
  ASSERT_TRUE(sem.try_acquire());
  std::string granted;
  Outcome a, b, equal, lower;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(0, record_grant(ioc, b, granted, 'b'));
  sem.async_acquire(0, record_grant(ioc, equal, granted, 'x'));
  sem.async_acquire(-1, record_grant(ioc, lower, granted, 'y'));
  // A blocking newcomer is refused at once; on the steady clock a wrong wait would end at its
  // deadline (as errc::timeout) instead of hanging the test.
  const Clock& steady = *Clock::steady();
  EXPECT_EQ(sem.acquire_until(steady, steady.now() + 10s, {}, 0), errc::concurrency_limit_exceeded);
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  drain(ioc);
  EXPECT_TRUE(completed_with(equal, errc::concurrency_limit_exceeded));
  EXPECT_TRUE(completed_with(lower, errc::concurrency_limit_exceeded));
  EXPECT_EQ(a.calls, 0);
  EXPECT_EQ(b.calls, 0);

  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_EQ(granted, "ab");
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.ledger().in_use(), 0u);
}

// Newcomers keep displacing the newest waiter of the lowest priority below their own, working up
// through the priorities, until the tail's priority is their own.
TEST(UnpairedSemaphorePriority, RepeatedDisplacementsWorkUpFromTheLowestPriority) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 4u);
  ASSERT_TRUE(sem.try_acquire());
  std::string granted;
  Outcome x, a, y, b, n1, n2, n3, n4;
  sem.async_acquire(2, record_grant(ioc, x, granted, 'x'));
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(1, record_grant(ioc, y, granted, 'y'));
  sem.async_acquire(0, record_grant(ioc, b, granted, 'b'));  // queue: x y a b
  EXPECT_EQ(sem.waiting(), 4u);

  sem.async_acquire(1, record_grant(ioc, n1, granted, '1'));  // displaces b: x y 1 a
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  sem.async_acquire(1, record_grant(ioc, n2, granted, '2'));  // displaces a: x y 1 2
  EXPECT_EQ(sem.lowest_queued_priority(), 1);
  sem.async_acquire(1, record_grant(ioc, n3, granted, '3'));  // equal to the tail: rejected
  sem.async_acquire(3, record_grant(ioc, n4, granted, '4'));  // displaces 2: 4 x y 1
  EXPECT_EQ(sem.lowest_queued_priority(), 1);
  EXPECT_EQ(sem.waiting(), 4u);
  drain(ioc);
  EXPECT_TRUE(completed_with(b, errc::concurrency_limit_exceeded));
  EXPECT_TRUE(completed_with(a, errc::concurrency_limit_exceeded));
  EXPECT_TRUE(completed_with(n3, errc::concurrency_limit_exceeded));
  EXPECT_TRUE(completed_with(n2, errc::concurrency_limit_exceeded));
  for (const Outcome* o : {&x, &y, &n1, &n4}) EXPECT_EQ(o->calls, 0);

  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
  }
  EXPECT_EQ(granted, "4xy1");
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.ledger().in_use(), 1u);  // the last grantee holds it
}

// A blocked acquire_or_error caller is displaced by an asynchronous newcomer of higher priority:
// its call returns the ledger's rejection, and the newcomer is served in its place.
TEST(UnpairedSemaphorePriority, BlockingWaiterIsDisplacedByAnAsyncNewcomer) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 1u);
  ASSERT_TRUE(sem.try_acquire());
  std::stop_source stop;
  std::optional<error_code> blocked_ec;
  std::thread blocked([&] { blocked_ec = sem.acquire_or_error(stop.get_token(), 0); });
  while (sem.waiting() < 1) std::this_thread::yield();  // the caller is parked
  std::string granted;
  Outcome c;
  sem.async_acquire(1, record_grant(ioc, c, granted, 'c'));
  // The displacement completed the blocked caller inside async_acquire; a stop request now
  // changes nothing. Had it not been displaced, the stop ends its wait as operation_aborted
  // instead of leaving the test hanging.
  stop.request_stop();
  blocked.join();
  ASSERT_TRUE(blocked_ec.has_value());
  EXPECT_EQ(*blocked_ec, errc::concurrency_limit_exceeded);
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.lowest_queued_priority(), 1);
  EXPECT_EQ(c.calls, 0);

  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(c.succeeded());
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// The same for acquire_until: the sleeping caller wakes with the rejection, not errc::timeout,
// even when the deadline passes right after the displacement.
TEST(UnpairedSemaphorePriority, ClockWaiterIsDisplacedByAnAsyncNewcomer) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 1u);
  ASSERT_TRUE(sem.try_acquire());
  ManualClock clock;
  std::optional<error_code> blocked_ec;
  std::thread blocked([&] { blocked_ec = sem.acquire_until(clock, clock.now() + 1h, {}, -3); });
  clock.wait_for_sleepers(1);
  EXPECT_EQ(sem.lowest_queued_priority(), -3);
  std::string granted;
  Outcome c;
  sem.async_acquire(-2, record_grant(ioc, c, granted, 'c'));
  clock.advance(2h);  // ends the wait as errc::timeout if it was not displaced
  blocked.join();
  ASSERT_TRUE(blocked_ec.has_value());
  EXPECT_EQ(*blocked_ec, errc::concurrency_limit_exceeded);
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.lowest_queued_priority(), -2);

  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(c.succeeded());
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.ledger().in_use(), 0u);
}

// A blocking newcomer of higher priority displaces a queued asynchronous waiter, then waits in its
// place and is granted by the next release.
TEST(UnpairedSemaphorePriority, BlockingNewcomerDisplacesAnAsyncWaiter) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 1u);
  ASSERT_TRUE(sem.try_acquire());
  std::string granted;
  Outcome a;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  std::stop_source stop;
  std::atomic<bool> finished{false};
  error_code blocked_ec;
  std::thread blocked([&] {
    blocked_ec = sem.acquire_or_error(stop.get_token(), 1);
    finished = true;
  });
  // Wait until the newcomer has taken the place (or, wrongly, was turned away).
  while (sem.lowest_queued_priority() != 1 && !finished.load()) std::this_thread::yield();
  if (!finished.load()) {
    while (a.calls == 0) ioc.run_one();  // the displaced waiter's completion is on its way
    ioc.restart();
  }
  EXPECT_TRUE(completed_with(a, errc::concurrency_limit_exceeded));
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.ledger().in_use(), 1u);

  EXPECT_TRUE(sem.release());  // -> the blocked newcomer
  stop.request_stop();         // ends the wait instead of hanging if the grant went elsewhere
  blocked.join();
  EXPECT_FALSE(blocked_ec) << blocked_ec.message();
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.ledger().in_use(), 1u);  // the newcomer's
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.ledger().in_use(), 0u);
}

// evict_below on the token ledger: false when nobody waits or nobody waits below the priority;
// otherwise it takes the newest waiter of the lowest priority out (one fewer queued), completes
// it with the given code on its executor, and leaves the others their order. The evicted waiters
// own nothing: the permits released afterwards all go to the rest or become tokens.
TEST(UnpairedSemaphorePriority, EvictBelowTakesTheNewestOfTheLowestIfItIsBelow) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  const error_code shed = make_error_code(errc::rate_limited);
  EXPECT_FALSE(sem.evict_below(std::numeric_limits<std::int32_t>::max(), shed));  // empty
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);

  std::string granted;
  Outcome a, b, c;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(3, record_grant(ioc, b, granted, 'b'));
  sem.async_acquire(0, record_grant(ioc, c, granted, 'c'));  // queue: b a c
  EXPECT_FALSE(sem.evict_below(0, shed));                    // nobody below 0
  EXPECT_FALSE(sem.evict_below(-7, shed));
  EXPECT_EQ(sem.waiting(), 3u);

  EXPECT_TRUE(sem.evict_below(1, shed));  // c, the newest 0
  EXPECT_EQ(c.calls, 0);                  // not inline
  EXPECT_EQ(sem.waiting(), 2u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  drain(ioc);
  EXPECT_EQ(c.calls, 1);
  EXPECT_EQ(c.ec, shed);
  EXPECT_EQ(a.calls, 0);

  EXPECT_TRUE(sem.evict_below(1, shed));  // a
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.lowest_queued_priority(), 3);
  EXPECT_FALSE(sem.evict_below(3, shed));  // b is not below 3
  drain(ioc);
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.ec, shed);
  EXPECT_EQ(b.calls, 0);

  EXPECT_TRUE(sem.release());  // -> b
  drain(ioc);
  EXPECT_EQ(granted, "b");
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// On a limiter ledger evict_below lowers the queued count: a full queue has room again for a
// newcomer of any priority.
TEST(UnpairedSemaphorePriority, EvictBelowMakesRoomInAFullQueue) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 1u);
  ASSERT_TRUE(sem.try_acquire());
  const error_code shed = make_error_code(errc::rate_limited);
  std::string granted;
  Outcome a, refused, c;
  sem.async_acquire(0, record_grant(ioc, a, granted, 'a'));
  sem.async_acquire(0, record_grant(ioc, refused, granted, 'r'));  // the queue is full
  EXPECT_TRUE(sem.evict_below(1, shed));
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_FALSE(sem.ledger().full());
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  sem.async_acquire(0, record_grant(ioc, c, granted, 'c'));
  EXPECT_EQ(sem.waiting(), 1u);
  drain(ioc);
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.ec, shed);
  EXPECT_TRUE(completed_with(refused, errc::concurrency_limit_exceeded));
  EXPECT_EQ(c.calls, 0);

  EXPECT_TRUE(sem.release());  // -> c
  drain(ioc);
  EXPECT_EQ(granted, "c");
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.ledger().in_use(), 0u);
  EXPECT_EQ(sem.waiting(), 0u);
}

// evict_below completes a blocked caller too: its call returns the given code.
TEST(UnpairedSemaphorePriority, EvictBelowCompletesABlockedCaller) {
  UnpairedSemaphore sem;
  const error_code shed = make_error_code(errc::rate_limited);
  std::stop_source stop;
  std::optional<error_code> blocked_ec;
  std::thread blocked([&] { blocked_ec = sem.acquire_or_error(stop.get_token(), -1); });
  while (sem.waiting() < 1) std::this_thread::yield();
  // The ledger counts the waiter before the hint names its priority (both in one critical
  // section; the hint is a relaxed store): read the hint only after a call that took the lock.
  EXPECT_FALSE(sem.evict_below(-1, shed));
  EXPECT_EQ(sem.lowest_queued_priority(), -1);
  EXPECT_TRUE(sem.evict_below(0, shed));
  stop.request_stop();  // ends the wait as operation_aborted if it was not evicted
  blocked.join();
  ASSERT_TRUE(blocked_ec.has_value());
  EXPECT_EQ(*blocked_ec, shed);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);  // the evicted caller took nothing
}

// Cancelling waiters of every priority (the head of one, the tail of another, the newest of all)
// leaves the others in their order; lowest_queued_priority() follows the tail as it goes.
TEST(UnpairedSemaphorePriority, CancellationKeepsTheOrderOfTheOthers) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::string granted;
  const std::int32_t priorities[7] = {0, 5, 0, 5, 9, 9, 0};
  asio::cancellation_signal sigs[8];
  Outcome out[8];
  auto start = [&](int i, std::int32_t priority) {
    sem.async_acquire(priority,
                      cancellable_grant(sigs[i], ioc, out[i], granted, static_cast<char>('a' + i)));
  };
  for (int i = 0; i < 7; ++i) start(i, priorities[i]);  // queue: e f b d a c g
  EXPECT_EQ(sem.waiting(), 7u);

  sigs['f' - 'a'].emit(cancellation_type::terminal);  // the newer 9
  sigs['b' - 'a'].emit(cancellation_type::partial);   // the older 5
  sigs['g' - 'a'].emit(cancellation_type::total);     // the tail
  EXPECT_EQ(sem.waiting(), 4u);
  EXPECT_EQ(sem.lowest_queued_priority(), 0);  // c is the tail now
  EXPECT_TRUE(sem.release());                  // -> e
  drain(ioc);
  EXPECT_EQ(granted, "e");

  sigs['a' - 'a'].emit(cancellation_type::terminal);  // the older 0
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  sigs['c' - 'a'].emit(cancellation_type::terminal);  // the last 0
  EXPECT_EQ(sem.lowest_queued_priority(), 5);
  EXPECT_EQ(sem.waiting(), 1u);
  start(7, 0);  // h, behind d
  EXPECT_EQ(sem.lowest_queued_priority(), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
  }
  EXPECT_EQ(granted, "edh");
  for (char name : std::string("fbgac")) {
    const Outcome& o = out[name - 'a'];
    EXPECT_EQ(o.calls, 1) << name;
    EXPECT_EQ(o.ec, asio::error::operation_aborted) << name;
  }
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
}

// A cancellation of a displaced waiter whose rejection is still on its way changes nothing: it
// completes once, with the rejection, and the newcomer that displaced it keeps its place.
TEST(UnpairedSemaphorePriority, CancellingADisplacedWaiterChangesNothing) {
  asio::io_context ioc;
  LimitedSemaphore sem(ioc.get_executor(), 1u, 1u);
  ASSERT_TRUE(sem.try_acquire());
  std::string granted;
  asio::cancellation_signal sig;
  Outcome a, c;
  sem.async_acquire(0, cancellable_grant(sig, ioc, a, granted, 'a'));
  sem.async_acquire(1, record_grant(ioc, c, granted, 'c'));  // displaces a
  sig.emit(cancellation_type::terminal);
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_EQ(sem.lowest_queued_priority(), 1);
  drain(ioc);
  EXPECT_TRUE(completed_with(a, errc::concurrency_limit_exceeded));
  EXPECT_FALSE(sig.slot().has_handler());  // the slot was cleared on completion
  EXPECT_EQ(c.calls, 0);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(c.succeeded());
  EXPECT_EQ(sem.ledger().in_use(), 1u);
}

// close() completes every waiter, whatever its priority, blocking ones included, once with
// errc::closed; the queue reads empty afterwards and a later acquire of any priority is closed.
TEST(UnpairedSemaphorePriority, CloseCompletesWaitersOfEveryPriority) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::optional<error_code> blocked_ec;
  std::thread blocked([&] { blocked_ec = sem.acquire_or_error({}, 4); });
  while (sem.waiting() < 1) std::this_thread::yield();
  std::string granted;
  const std::int32_t priorities[5] = {std::numeric_limits<std::int32_t>::min(), -3, 0, 7,
                                      std::numeric_limits<std::int32_t>::max()};
  Outcome out[5];
  for (int i = 0; i < 5; ++i) {
    sem.async_acquire(priorities[i],
                      record_grant(ioc, out[i], granted, static_cast<char>('a' + i)));
  }
  EXPECT_EQ(sem.waiting(), 6u);
  sem.close();
  blocked.join();
  ASSERT_TRUE(blocked_ec.has_value());
  EXPECT_EQ(*blocked_ec, errc::closed);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  for (const Outcome& o : out) EXPECT_EQ(o.calls, 0);  // not inline
  drain(ioc);
  for (const Outcome& o : out) EXPECT_TRUE(completed_with(o, errc::closed));
  EXPECT_EQ(granted, "");

  EXPECT_FALSE(sem.evict_below(std::numeric_limits<std::int32_t>::max(),
                               make_error_code(errc::rate_limited)));
  Outcome late;
  sem.async_acquire(100, record_grant(ioc, late, granted, 'z'));
  drain(ioc);
  EXPECT_TRUE(completed_with(late, errc::closed));
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
}

// Asynchronous waiters on two io_context threads acquire with seeded random priorities into a
// full queue (displacing and being displaced), cancel some of their waits and release every
// permit they are given; two blocking callers wait too, one above every asynchronous priority
// (never refused nor displaced) and one below all of them. Whatever the interleaving: every wait
// completes exactly once with a permit, the rejection or operation_aborted; every permit given is
// released exactly once; the ledger ends with every permit free and nobody queued; and no
// snapshot ever shows a free permit while someone is queued.
TEST(UnpairedSemaphorePriorityStress, DisplacementAndCancellationConservePermits) {
  constexpr LimiterLedger::count_type limit = 2, queue_limit = 3;
  constexpr int waiters_per_thread = 2000;
  constexpr int blocking_rounds = 300;
  constexpr std::int32_t top = 3, bottom = -3;  // the async priorities are -2 .. 2
  LimitedSemaphore sem(limit, queue_limit);
  std::atomic<int> granted{0}, rejected{0}, aborted{0}, unexpected{0}, released{0};
  std::atomic<bool> snapshots_ok{true};

  auto check_snapshot = [&] {
    const LedgerSnapshot s = sem.snapshot();
    if (s.queued > queue_limit || (s.queued != 0 && s.available != 0)) snapshots_ok = false;
  };
  auto give_back = [&] {
    if (sem.release()) released.fetch_add(1);
  };

  // The contexts outlive every thread: a release on one thread may still be inside its post to
  // another thread's context when that thread finishes.
  asio::io_context contexts[2]{asio::io_context(1), asio::io_context(1)};
  auto async_thread = [&](unsigned seed) {
    asio::io_context& ioc = contexts[seed - 1];
    std::mt19937 rng(seed);
    std::vector<std::unique_ptr<asio::cancellation_signal>> sigs;
    std::vector<int> calls(waiters_per_thread, 0);
    sigs.reserve(waiters_per_thread);
    // What waiter `i` does with its outcome: a grantee gives its permit back at once.
    auto complete = [&](int i) {
      return [&, i](error_code ec) {
        ++calls[i];
        if (!ec) {
          granted.fetch_add(1);
          give_back();
        } else if (ec == errc::concurrency_limit_exceeded) {
          rejected.fetch_add(1);
        } else if (ec == asio::error::operation_aborted) {
          aborted.fetch_add(1);
        } else {
          unexpected.fetch_add(1);
        }
      };
    };
    int started = 0;
    while (started < waiters_per_thread) {
      // More waits at once than the permits and the queue hold: some are refused, some displace.
      for (int k = 0; k < 6 && started < waiters_per_thread; ++k, ++started) {
        const auto priority = static_cast<std::int32_t>(rng() % 5) - 2;
        sigs.push_back(std::make_unique<asio::cancellation_signal>());
        sem.async_acquire(
            priority, asio::bind_cancellation_slot(sigs.back()->slot(),
                                                   asio::bind_executor(ioc, complete(started))));
        if (rng() % 4 == 0) sigs.back()->emit(cancellation_type::terminal);
      }
      ioc.poll();
      ioc.restart();
      check_snapshot();
    }
    // Cancel whatever is still queued so that the thread can finish, then drain.
    for (auto& s : sigs) s->emit(cancellation_type::terminal);
    ioc.run();
    for (int i = 0; i < waiters_per_thread; ++i) EXPECT_EQ(calls[i], 1) << seed << ":" << i;
  };
  // Above every other waiter: a full queue then holds only lower ones, so it displaces one, and
  // nobody outranks it to displace it in turn: every call is granted.
  std::atomic<int> top_granted{0};
  auto top_thread = [&] {
    for (int i = 0; i < blocking_rounds; ++i) {
      const error_code ec = sem.acquire_or_error({}, top);
      EXPECT_FALSE(ec) << ec.message();
      if (ec) continue;
      top_granted.fetch_add(1);
      granted.fetch_add(1);
      give_back();
    }
  };
  // Below every asynchronous waiter: refused or displaced whenever the queue is full.
  auto bottom_thread = [&] {
    for (int i = 0; i < blocking_rounds; ++i) {
      const error_code ec = sem.acquire_or_error({}, bottom);
      if (!ec) {
        granted.fetch_add(1);
        give_back();
      } else if (ec == errc::concurrency_limit_exceeded) {
        rejected.fetch_add(1);
      } else {
        unexpected.fetch_add(1);
      }
      check_snapshot();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(async_thread, 1u);
  threads.emplace_back(async_thread, 2u);
  threads.emplace_back(top_thread);
  threads.emplace_back(bottom_thread);
  for (auto& t : threads) t.join();

  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(top_granted.load(), blocking_rounds);
  EXPECT_EQ(granted.load() + rejected.load() + aborted.load(),
            2 * waiters_per_thread + 2 * blocking_rounds);
  EXPECT_EQ(released.load(), granted.load());  // every permit given came back, none refused
  const LedgerSnapshot end = sem.snapshot();
  EXPECT_EQ(end.available, limit);
  EXPECT_EQ(end.queued, 0u);
  EXPECT_FALSE(end.closed);
  EXPECT_EQ(sem.ledger().in_use(), 0u);
  EXPECT_EQ(sem.lowest_queued_priority(), no_waiter);
  EXPECT_TRUE(snapshots_ok.load());
}

}  // namespace
}  // namespace kevlar::semaphore_test
