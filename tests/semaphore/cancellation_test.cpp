// UnpairedSemaphore: per-operation cancellation, including every race order against a grant
// (each test names the guaranteed behaviour it checks as "B<n>: ..."; docs/semaphore.md states the
// guarantees).
#include "semaphore_test_support.hpp"

#include <kevlar/error.hpp>
#include <kevlar/testing/race_runner.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <gtest/gtest.h>

#include <barrier>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace kevlar::semaphore_test {
namespace {

using asio::cancellation_type;

auto cancellable(asio::cancellation_signal& sig, asio::io_context& ioc, Outcome& out) {
  return asio::bind_cancellation_slot(sig.slot(), record(ioc, out));
}

// B15: a cancellation before the grant completes the waiter aborted, lowers the queue by one,
// consumes nothing; the next release goes to the next waiter, then frees a token.
TEST(UnpairedSemaphoreCancel, BeforeGrantAbortsAndConsumesNothing) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  asio::cancellation_signal sig;
  Outcome a, b;
  sem.async_acquire(cancellable(sig, ioc, a));
  sem.async_acquire(record(ioc, b));
  EXPECT_EQ(sem.waiting(), 2u);
  sig.emit(cancellation_type::terminal);
  EXPECT_EQ(a.calls, 0);  // not inside emit
  EXPECT_EQ(sem.waiting(), 1u);
  drain(ioc);
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(a.ec, asio::error::operation_aborted);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  EXPECT_TRUE(b.succeeded());
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);
  EXPECT_FALSE(sig.slot().has_handler());  // the slot was cleared on completion
}

// B16: a cancellation after the grant (delivery still queued) is ignored: success, permit owned.
TEST(UnpairedSemaphoreCancel, AfterGrantIsIgnored) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  asio::cancellation_signal sig;
  Outcome a;
  sem.async_acquire(cancellable(sig, ioc, a));
  EXPECT_TRUE(sem.release());
  sig.emit(cancellation_type::terminal);
  drain(ioc);
  EXPECT_TRUE(a.succeeded());
  EXPECT_EQ(sem.available(), 0u);  // the caller owns it
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);
}

// B21: terminal, partial and total are each honoured before the grant and ignored after it;
// `none` does nothing.
class CancelTypes : public ::testing::TestWithParam<cancellation_type> {};

TEST_P(CancelTypes, HonouredBeforeGrantIgnoredAfter) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  asio::cancellation_signal before_sig, after_sig;
  Outcome before, after;
  sem.async_acquire(cancellable(before_sig, ioc, before));
  sem.async_acquire(cancellable(after_sig, ioc, after));
  before_sig.emit(cancellation_type::none);
  EXPECT_EQ(sem.waiting(), 2u);
  before_sig.emit(GetParam());
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_TRUE(sem.release());  // goes to `after`
  after_sig.emit(GetParam());
  drain(ioc);
  EXPECT_EQ(before.ec, asio::error::operation_aborted);
  EXPECT_TRUE(after.succeeded());
  EXPECT_EQ(sem.available(), 0u);
  EXPECT_EQ(sem.waiting(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CancelTypes,
                         ::testing::Values(cancellation_type::terminal, cancellation_type::partial,
                                           cancellation_type::total),
                         [](const auto& info) {
                           switch (info.param) {
                             case cancellation_type::terminal:
                               return std::string("terminal");
                             case cancellation_type::partial:
                               return std::string("partial");
                             default:
                               return std::string("total");
                           }
                         });

// B13: cancelling a waiter in the middle of the queue does not reorder the others.
TEST(UnpairedSemaphoreCancel, MiddleCancellationKeepsOrder) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::vector<int> order;
  std::vector<asio::cancellation_signal> sigs(5);
  for (int i = 0; i < 5; ++i) {
    sem.async_acquire(asio::bind_cancellation_slot(
        sigs[i].slot(),
        asio::bind_executor(ioc, [&order, i](error_code ec) { order.push_back(ec ? -i : i); })));
  }
  sigs[2].emit(cancellation_type::terminal);
  drain(ioc);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(sem.release());
    drain(ioc);
  }
  EXPECT_EQ(order, (std::vector<int>{-2, 0, 1, 3, 4}));
}

// B22: emitting twice, or after the completion ran, has no effect and touches no freed memory
// (ASan); B41: a recycled operation block is not reached by the previous waiter's signal.
TEST(UnpairedSemaphoreCancel, RepeatedAndLateEmissionsAreHarmless) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  asio::cancellation_signal sig;
  Outcome a;
  sem.async_acquire(cancellable(sig, ioc, a));
  sig.emit(cancellation_type::terminal);
  sig.emit(cancellation_type::terminal);
  drain(ioc);
  sig.emit(cancellation_type::terminal);
  EXPECT_EQ(a.calls, 1);

  // The next op likely reuses the same block (recycling allocator); the old signal is dead to it.
  Outcome b;
  asio::cancellation_signal other;
  sem.async_acquire(asio::bind_cancellation_slot(other.slot(), record(ioc, b)));
  sig.emit(cancellation_type::terminal);
  EXPECT_EQ(sem.waiting(), 1u);
  EXPECT_TRUE(sem.release());
  drain(ioc);
  other.emit(cancellation_type::terminal);
  EXPECT_TRUE(b.succeeded());
  EXPECT_EQ(sem.available(), 0u);
}

// B19: cancellation at every point of an operation's life: before initiation (nothing
// installed), while queued, after a grant, after delivery. It either aborts the wait or is
// ignored, and the permit count always balances.
TEST(UnpairedSemaphoreCancel, SweptOverTheOperationsLife) {
  for (int point = 0; point < 5; ++point) {
    asio::io_context ioc;
    UnpairedSemaphore sem(ioc.get_executor());
    asio::cancellation_signal sig;
    Outcome o;
    if (point == 0) sig.emit(cancellation_type::terminal);
    sem.async_acquire(cancellable(sig, ioc, o));
    if (point == 1) sig.emit(cancellation_type::terminal);
    if (point == 2) drain(ioc), sig.emit(cancellation_type::terminal);
    const bool released = sem.release();
    EXPECT_TRUE(released);
    if (point == 3) sig.emit(cancellation_type::terminal);
    drain(ioc);
    if (point == 4) sig.emit(cancellation_type::terminal);
    drain(ioc);
    ASSERT_EQ(o.calls, 1) << point;
    if (o.ec) {
      EXPECT_EQ(o.ec, asio::error::operation_aborted) << point;
      EXPECT_EQ(sem.available(), 1u) << point;  // the release became a token
    } else {
      EXPECT_EQ(sem.available(), 0u) << point;  // the caller owns the permit
    }
    EXPECT_EQ(sem.waiting(), 0u) << point;
    EXPECT_EQ(o.ec ? 1 : 0, (point == 1 || point == 2) ? 1 : 0) << point;
  }
}

// B20: a coroutine whose cancellation state is already cancelled when it reaches co_await does
// not queue and does not take a free permit.
TEST(UnpairedSemaphoreCancel, PreCancelledCoroutineDoesNotQueueOrTake) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor(), 1);
  UnpairedSemaphore gate(ioc.get_executor());
  asio::cancellation_signal sig;
  std::exception_ptr failure;
  error_code gate_ec;
  bool acquired = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        // The cancellation lands here (and aborts this wait); the coroutine's cancellation
        // state stays cancelled.
        auto [ec] = co_await gate.async_acquire(asio::as_tuple(asio::use_awaitable));
        gate_ec = ec;
        co_await sem.async_acquire(asio::use_awaitable);
        acquired = true;
      },
      asio::bind_cancellation_slot(sig.slot(), [&](std::exception_ptr e) { failure = e; }));
  drain(ioc);  // the coroutine is parked on `gate`
  EXPECT_EQ(gate.waiting(), 1u);
  sig.emit(cancellation_type::terminal);
  drain(ioc);
  EXPECT_EQ(gate_ec, asio::error::operation_aborted);
  EXPECT_FALSE(acquired);
  ASSERT_TRUE(failure);
  try {
    std::rethrow_exception(failure);
  } catch (const boost::system::system_error& e) {
    EXPECT_EQ(e.code(), asio::error::operation_aborted);
  }
  EXPECT_EQ(sem.available(), 1u);  // not taken
  EXPECT_EQ(sem.waiting(), 0u);    // not queued
  EXPECT_EQ(gate.waiting(), 0u);
}

// B23 and B29: a timeout composed with a timer (awaitable ||). If the timer wins, the waiter
// coroutine is cancelled and unlinked, and capacity is conserved; if the acquire wins, the timer
// is cancelled and the permit is owned.
TEST(UnpairedSemaphoreCancel, TimeoutComposedWithATimer) {
  using namespace asio::experimental::awaitable_operators;
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  int timer_won = 0, acquire_won = 0;
  auto attempt = [&](bool expire_now) -> asio::awaitable<void> {
    asio::steady_timer timer(ioc);
    if (expire_now) {
      timer.expires_at(asio::steady_timer::time_point::min());  // already due: no waiting
    } else {
      timer.expires_after(std::chrono::hours(1));
    }
    auto r =
        co_await (sem.async_acquire(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
    (r.index() == 0 ? acquire_won : timer_won)++;
  };
  asio::co_spawn(ioc, attempt(true), [](std::exception_ptr e) { EXPECT_FALSE(e); });
  ioc.run();
  ioc.restart();
  EXPECT_EQ(timer_won, 1);
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_EQ(sem.available(), 0u);

  EXPECT_TRUE(sem.release());
  asio::co_spawn(ioc, attempt(false), [](std::exception_ptr e) { EXPECT_FALSE(e); });
  ioc.run();
  EXPECT_EQ(acquire_won, 1);
  EXPECT_EQ(sem.available(), 0u);  // owned by the winner
  EXPECT_EQ(sem.waiting(), 0u);
}

// B17: cancel (on the waiter's thread) and release (another thread) race behind a barrier,
// thousands of times. Each round ends with exactly one of {success with the permit, aborted with
// the permit left as a token}, and the count balances after every round.
TEST(UnpairedSemaphoreCancel, CancelRacingReleaseResolvesExactlyOnce) {
  constexpr int rounds = 10000;
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::barrier sync(2);
  int successes = 0, aborts = 0;
  std::thread releaser([&] {
    for (int i = 0; i < rounds; ++i) {
      sync.arrive_and_wait();  // the waiter is queued
      EXPECT_TRUE(sem.release());
      sync.arrive_and_wait();  // round settled
    }
  });
  for (int i = 0; i < rounds; ++i) {
    asio::cancellation_signal sig;
    Outcome o;
    sem.async_acquire(cancellable(sig, ioc, o));
    sync.arrive_and_wait();
    if (i % 3 != 0) sig.emit(i % 3 == 1 ? cancellation_type::terminal : cancellation_type::total);
    while (o.calls == 0) ioc.run_one();
    ioc.restart();
    sync.arrive_and_wait();  // the release has happened too
    ASSERT_EQ(o.calls, 1);
    if (o.ec) {
      ASSERT_EQ(o.ec, asio::error::operation_aborted);
      ++aborts;
      ASSERT_TRUE(sem.try_acquire());  // the released permit became a token
    } else {
      ++successes;
    }
    ASSERT_EQ(sem.available(), 0u);
    ASSERT_EQ(sem.waiting(), 0u);
  }
  releaser.join();
  EXPECT_EQ(successes + aborts, rounds);
  EXPECT_GE(successes, rounds / 3);  // the uncancelled third always succeeds
}

// B18: cancelling the head waiter while a release races never strands the second waiter.
TEST(UnpairedSemaphoreCancel, CancelledHeadNeverStrandsTheNextWaiter) {
  constexpr int rounds = 5000;
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  std::barrier sync(2);
  std::thread releaser([&] {
    for (int i = 0; i < rounds; ++i) {
      sync.arrive_and_wait();
      EXPECT_TRUE(sem.release());
      sync.arrive_and_wait();
    }
  });
  for (int i = 0; i < rounds; ++i) {
    asio::cancellation_signal sig;
    Outcome head, second;
    sem.async_acquire(cancellable(sig, ioc, head));
    sem.async_acquire(record(ioc, second));
    sync.arrive_and_wait();
    sig.emit(cancellation_type::terminal);
    while (head.calls == 0) ioc.run_one();
    ioc.restart();
    sync.arrive_and_wait();
    drain(ioc);
    // Exactly one permit was released: either the head kept it, or the second waiter got it.
    if (head.ec) {
      ASSERT_TRUE(second.succeeded()) << i;
    } else {
      ASSERT_EQ(second.calls, 0) << i;
      ASSERT_TRUE(sem.release());  // the head finishes its work: the second waiter runs
      drain(ioc);
      ASSERT_TRUE(second.succeeded()) << i;
    }
    ASSERT_EQ(sem.available(), 0u);
    ASSERT_EQ(sem.waiting(), 0u);
  }
  releaser.join();
}

/// Throws (failing the race round, which run_race names) unless `condition`.
void race_check(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error(what);
}

/// The cancellation type of a race repetition: terminal, total and partial in turn.
cancellation_type race_cancellation(const testing::RaceRound& round) {
  switch (round.repetition % 3) {
    case 0:
      return cancellation_type::terminal;
    case 1:
      return cancellation_type::total;
    default:
      return cancellation_type::partial;
  }
}

// B17, both orders pinned on one thread by the race runner (the threaded test above checks the
// same race under real interleavings, where either order may or may not happen): release first
// and the waiter owns the permit, the later cancellation ignored (B16); cancel first and the
// waiter ends aborted, the released permit left as a token (B15). The count balances either way.
TEST(UnpairedSemaphoreCancel, CancelRacingReleaseResolvesAsItsOrderSays) {
  struct Scenario {  // the signal and the outcome outlive the semaphore's waiters
    asio::cancellation_signal sig;
    Outcome o;
    asio::io_context ioc;
    UnpairedSemaphore sem{ioc.get_executor()};
  };
  const testing::RaceReport report = testing::run_race(
      "semaphore: release vs cancel of the waiter", 6, [](const testing::RaceRound& round) {
        auto sc = std::make_shared<Scenario>();
        sc->sem.async_acquire(cancellable(sc->sig, sc->ioc, sc->o));
        race_check(sc->sem.waiting() == 1, "the waiter is not queued");
        const cancellation_type type = race_cancellation(round);
        const bool release_first = round.order == testing::RaceOrder::a_then_b;
        return testing::RaceParties{
            [sc] { race_check(sc->sem.release(), "release refused"); },
            [sc, type] { sc->sig.emit(type); },
            [sc, release_first] {
              drain(sc->ioc);
              race_check(sc->o.calls == 1,
                         "the waiter completed " + std::to_string(sc->o.calls) + " times");
              if (release_first) {
                race_check(!sc->o.ec, "the release came first, but the waiter did not get it");
                race_check(sc->sem.available() == 0, "the permit is both owned and free");
              } else {
                race_check(sc->o.ec == asio::error::operation_aborted,
                           "the cancellation came first, but the waiter was not aborted");
                race_check(sc->sem.try_acquire(), "the released permit did not become a token");
              }
              race_check(sc->sem.available() == 0 && sc->sem.waiting() == 0,
                         "the count does not balance");
            }};
      });
  EXPECT_EQ(report.runs, 12u);
  EXPECT_EQ(report.a_first_runs, 6u);
  EXPECT_EQ(report.b_first_runs, 6u);
}

// B18, both orders pinned on one thread by the race runner (the threaded test above races them
// for real): release first and the head keeps the permit, the second waiter runs on the head's
// release; cancel first and the release goes to the second waiter. Never stranded.
TEST(UnpairedSemaphoreCancel, CancelledHeadNeverStrandsTheNextWaiterInEitherOrder) {
  struct Scenario {  // the signal and the outcomes outlive the semaphore's waiters
    asio::cancellation_signal sig;
    Outcome head, second;
    asio::io_context ioc;
    UnpairedSemaphore sem{ioc.get_executor()};
  };
  const testing::RaceReport report = testing::run_race(
      "semaphore: release vs cancel of the head waiter", 6, [](const testing::RaceRound& round) {
        auto sc = std::make_shared<Scenario>();
        sc->sem.async_acquire(cancellable(sc->sig, sc->ioc, sc->head));
        sc->sem.async_acquire(record(sc->ioc, sc->second));
        race_check(sc->sem.waiting() == 2, "the waiters are not queued");
        const cancellation_type type = race_cancellation(round);
        const bool release_first = round.order == testing::RaceOrder::a_then_b;
        return testing::RaceParties{
            [sc] { race_check(sc->sem.release(), "release refused"); },
            [sc, type] { sc->sig.emit(type); },
            [sc, release_first] {
              drain(sc->ioc);
              race_check(sc->head.calls == 1,
                         "the head completed " + std::to_string(sc->head.calls) + " times");
              if (release_first) {
                race_check(!sc->head.ec, "the release came first, but the head did not get it");
                race_check(sc->second.calls == 0, "one release woke two waiters");
                race_check(sc->sem.release(), "release refused");  // the head's work is done
                drain(sc->ioc);
              } else {
                race_check(sc->head.ec == asio::error::operation_aborted,
                           "the cancellation came first, but the head was not aborted");
              }
              race_check(sc->second.succeeded(), "the second waiter was stranded");
              race_check(sc->sem.available() == 0 && sc->sem.waiting() == 0,
                         "the count does not balance");
            }};
      });
  EXPECT_EQ(report.runs, 12u);
  EXPECT_EQ(report.a_first_runs, 6u);
  EXPECT_EQ(report.b_first_runs, 6u);
}

// B46: once a cancelled wait has completed, its queue slot is gone and the semaphore serves the
// next waiter as if it had never queued.
TEST(UnpairedSemaphoreCancel, CompletedCancellationLeavesNoDebt) {
  asio::io_context ioc;
  UnpairedSemaphore sem(ioc.get_executor());
  for (int i = 0; i < 100; ++i) {
    asio::cancellation_signal sig;
    Outcome o;
    sem.async_acquire(cancellable(sig, ioc, o));
    sig.emit(cancellation_type::partial);
    drain(ioc);
    ASSERT_EQ(o.ec, asio::error::operation_aborted);
  }
  EXPECT_EQ(sem.waiting(), 0u);
  EXPECT_TRUE(sem.release());
  EXPECT_EQ(sem.available(), 1u);
}

}  // namespace
}  // namespace kevlar::semaphore_test
