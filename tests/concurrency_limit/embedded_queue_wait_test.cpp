// Step::queue: an asynchronous execution on a plain io_context executor parks in a
// semaphore's queue with its node, work count and delivery storage inside the execution
// (detail/embedded_queue_wait.hpp). A strategy of the test's waits in a semaphore the test holds,
// so that the decisions the limiter meets only in a race (a permit freed, the queue filled or the
// semaphore closed between its lock-free checks and the lock) happen on demand. The limiter's own
// tests (concurrency_limit_test.cpp) cover grants, cancellation, close, the trampoline and
// undelivered grants through the strategy.
#include "concurrency_limit/limiter_test_support.hpp"

#include <alloc_counter.hpp>

#include <spin_until.hpp>

#include <kevlar/concurrency_limit.hpp>
#include <kevlar/hedging.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/queue_wait.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <gtest/gtest.h>
#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using Semaphore = QueueSemaphore<LimiterLedger>;

using test::make_limiter;

/// Waits for a permit of `sem` in every execution, runs its inner part once it owns a permit and
/// gives the permit back when the inner part completes. `embedded`: it declares
/// StrategyTraits::waits_in_queue (otherwise the engine starts a general async_acquire).
class Parking final : public Strategy {
 public:
  explicit Parking(Semaphore& sem, bool embedded = true) : sem_(sem), embedded_(embedded) {}
  [[nodiscard]] std::string describe() const override { return "Parking"; }
  [[nodiscard]] StrategyTraits traits() const noexcept override {
    StrategyTraits t;
    t.waits_in_queue = embedded_;
    return t;
  }
  Step on_start(Layer& /*layer*/) override {
    starting_ = true;
    const Step step = Step::queue(sem_);
    if (before_returning) before_returning();
    if (throw_instead) throw std::runtime_error("instead of returning Step::queue");
    starting_ = false;
    return step;
  }
  Step on_wait_complete(Layer& layer, const error_code& ec) override {
    delivered.push_back(ec);
    delivered_on.push_back(std::this_thread::get_id());
    delivered_inside_on_start.push_back(starting_);
    return owned(layer, ec);
  }
  Step on_inner_complete(Layer& layer) override {
    (void)layer;
    (void)sem_.release();
    return Step::complete;
  }

  /// Every result on_wait_complete received, in order; the thread it ran on; whether on_start had
  /// not returned yet (single-execution tests only).
  std::vector<error_code> delivered;
  std::vector<std::thread::id> delivered_on;
  std::vector<bool> delivered_inside_on_start;
  /// Runs in on_start once it has built its Step::queue, before it returns it.
  std::function<void()> before_returning;
  /// on_start throws once it has built its Step::queue, instead of returning it.
  bool throw_instead = false;

 private:
  static Step owned(Layer& layer, const error_code& ec) {
    if (!ec) return Step::run_inner;
    layer.outcome().set_error(ec);
    return Step::complete;
  }
  Semaphore& sem_;
  bool embedded_;
  std::atomic<bool> starting_{false};
};

// Step::queue takes kevlar's QueueSemaphores only: anything else is refused where it is called,
// a plain semaphore included (the engine could not perform the step).
template <class T>
concept CanWaitIn = requires(T& queue) { Step::queue(queue); };
static_assert(CanWaitIn<Semaphore>);
static_assert(CanWaitIn<QueueSemaphore<>>);
static_assert(!CanWaitIn<UnpairedSemaphore>);
static_assert(!CanWaitIn<BasicUnpairedSemaphore<LimiterLedger>>);
static_assert(!CanWaitIn<int>);
static_assert(!CanWaitIn<std::vector<int>>);
// A QueueSemaphore is the semaphore it extends, and one pointer, which fits in its padding.
static_assert(std::is_base_of_v<BasicUnpairedSemaphore<LimiterLedger>, Semaphore>);
static_assert(sizeof(Semaphore) <= sizeof(BasicUnpairedSemaphore<LimiterLedger>) + sizeof(void*));

TEST(QueueStep, ItsKindIsQueue) {
  Semaphore sem(1U, 1U);
  const Step step = Step::queue(sem);
  EXPECT_EQ(step.kind(), Step::Kind::queue);
  EXPECT_EQ(step, Step::queue(sem));
  Semaphore other(1U, 1U);
  EXPECT_NE(step, Step::queue(other));
  EXPECT_NE(step, Step(Step::suspend));
}

struct EmbeddedWaitTest : ::testing::Test {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  test::ManualOps ops;
  std::map<int, error_code> done;
  auto handler(int id) {
    return asio::bind_executor(ioc, [this, id](error_code ec, int) { done[id] = ec; });
  }
  std::shared_ptr<Parking> parking;
  /// A shield whose one strategy waits in `sem`.
  Shield over(Semaphore& sem, bool embedded = true) {
    parking = std::make_shared<Parking>(sem, embedded);
    return Shield{}.use(parking);
  }
  /// Completes the running call `id`, which gives its permit back, and checks that it succeeded.
  void finish(int id) {
    ops.complete(id);
    ioc.poll();
    EXPECT_FALSE(done.at(id)) << id;
  }
};

TEST_F(EmbeddedWaitTest, AFreePermitIsTakenUnderTheLockWithoutParking) {
  Semaphore sem(1U, 1U);
  const Shield s = over(sem);
  s.execute_async(ops.attempt(1), handler(1));
  ASSERT_EQ(parking->delivered.size(), 1U) << "a decision made at once waited for a hop";
  EXPECT_FALSE(parking->delivered[0]);
  EXPECT_TRUE(ops.pending(1)) << "the permit is the caller's: the operation starts at once";
  EXPECT_EQ(sem.ledger().in_use(), 1U);
  EXPECT_EQ(sem.waiting(), 0U);
  finish(1);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

TEST_F(EmbeddedWaitTest, AFullQueueAndAClosedSemaphoreAreDecidedAtOnce) {
  Semaphore sem(1U, 0U);
  const Shield s = over(sem);
  s.execute_async(ops.attempt(1), handler(1));  // takes the permit
  s.execute_async(ops.attempt(2), handler(2));  // no room to queue
  ASSERT_EQ(parking->delivered.size(), 2U);
  EXPECT_EQ(parking->delivered[1], errc::concurrency_limit_exceeded);
  EXPECT_EQ(sem.waiting(), 0U);
  sem.close();
  s.execute_async(ops.attempt(3), handler(3));
  ASSERT_EQ(parking->delivered.size(), 3U);
  EXPECT_EQ(parking->delivered[2], errc::closed);
  ioc.poll();
  EXPECT_EQ(done.at(2), errc::concurrency_limit_exceeded);
  EXPECT_EQ(done.at(3), errc::closed);
  EXPECT_FALSE(ops.pending(2));
  EXPECT_FALSE(ops.pending(3));
  finish(1);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

TEST_F(EmbeddedWaitTest, AParkedExecutionIsGrantedByTheRelease) {
  Semaphore sem(1U, 2U);
  const Shield s = over(sem);
  s.execute_async(ops.attempt(1), handler(1));
  s.execute_async(ops.attempt(2), handler(2));
  s.execute_async(ops.attempt(3), handler(3));
  EXPECT_EQ(parking->delivered.size(), 1U);  // 1 took the free permit at once
  EXPECT_EQ(sem.waiting(), 2U);
  ops.complete(1);
  ioc.poll();  // 1 releases: 2 is granted, in FIFO order
  ASSERT_EQ(parking->delivered.size(), 2U);
  EXPECT_FALSE(parking->delivered[1]);
  EXPECT_TRUE(ops.pending(2));
  EXPECT_FALSE(ops.pending(3));
  ops.complete(2);
  ioc.poll();
  EXPECT_TRUE(ops.pending(3));
  ops.complete(3);
  ioc.poll();
  EXPECT_EQ(done.size(), 3U);
  for (const auto& [id, ec] : done) EXPECT_FALSE(ec) << id;
  EXPECT_EQ(sem.ledger().in_use(), 0U);
  EXPECT_EQ(sem.waiting(), 0U);
}

TEST_F(EmbeddedWaitTest, ACancelledParkedExecutionLeavesTheQueueOwningNothing) {
  Semaphore sem(1U, 1U);
  const Shield s = over(sem);
  s.execute_async(ops.attempt(1), handler(1));
  asio::cancellation_signal cancel;
  s.execute_async(ops.attempt(2), asio::bind_cancellation_slot(cancel.slot(), handler(2)));
  ASSERT_EQ(sem.waiting(), 1U);
  cancel.emit(asio::cancellation_type::partial);
  EXPECT_EQ(parking->delivered.size(), 1U) << "delivered inside the cancellation handler";
  ioc.poll();
  ASSERT_EQ(parking->delivered.size(), 2U);
  EXPECT_EQ(parking->delivered[1], asio::error::operation_aborted);
  EXPECT_EQ(done.at(2), asio::error::operation_aborted);
  EXPECT_EQ(sem.waiting(), 0U);
  ops.complete(1);
  ioc.poll();
  EXPECT_FALSE(ops.pending(2));
  EXPECT_EQ(sem.ledger().in_use(), 0U) << "the release found nobody to grant";
}

// A decision made at once counts no work on the io_context: giving back a count that was its
// last would stop a loop that is not running yet, and its run() would return without delivering.
TEST(EmbeddedWait, ADecisionMadeAtOnceDoesNotStopAnIdleIoContext) {
  asio::io_context ioc;  // no work guard, not running
  test::ManualOps ops;
  std::map<int, error_code> done;
  Semaphore sem(1U, 1U);
  auto parking = std::make_shared<Parking>(sem);
  const Shield s = Shield{}.use(parking);
  sem.close();
  s.execute_async(ops.attempt(1),
                  asio::bind_executor(ioc, [&](error_code ec, int) { done[1] = ec; }));
  ASSERT_EQ(parking->delivered.size(), 1U);
  EXPECT_FALSE(ioc.stopped());
  // The refusal, posted because the call ended inside its initiation (bounded: a leaked work
  // count would keep run() waiting).
  ioc.run_for(std::chrono::seconds(10));
  EXPECT_EQ(done.at(1), errc::closed);
}

// While parked, the wait counts work on the io_context: a loop with nothing else to do keeps
// running until the grant has been delivered, and not after.
TEST(EmbeddedWait, AParkedCallKeepsItsIoContextFromRunningOutOfWork) {
  asio::io_context ioc;  // no work guard
  test::ManualOps ops;   // its operations hold no work either
  std::map<int, error_code> done;
  Semaphore sem(1U, 1U);
  const Shield s = Shield{}.use(std::make_shared<Parking>(sem));
  const auto handler = [&](int id) {
    return asio::bind_executor(ioc, [&done, id](error_code ec, int) { done[id] = ec; });
  };
  s.execute_async(ops.attempt(1), handler(1));  // takes the permit at once
  s.execute_async(ops.attempt(2), handler(2));  // parks
  ASSERT_EQ(sem.waiting(), 1U);
  ioc.poll();
  EXPECT_FALSE(ioc.stopped()) << "the parked call's wait counted no work";
  ops.complete(1);
  ioc.poll();  // 1 completes and releases: 2 is granted and its operation starts
  ASSERT_TRUE(ops.pending(2));
  EXPECT_TRUE(ioc.stopped()) << "the delivered wait kept its work count";
  ioc.restart();
  ops.complete(2);
  ioc.poll();
  EXPECT_FALSE(done.at(2));
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

// The general wait (a strategy without StrategyTraits::waits_in_queue): an async_acquire whose
// grant, made inside a completion on the same io_context, still runs through the trampoline.
TEST_F(EmbeddedWaitTest, AGeneralWaitOnAnIoContextIsGrantedWithoutASchedulerHop) {
  Semaphore sem(1U, 1U);
  const Shield s = over(sem, false);
  s.execute_async(ops.attempt(1), handler(1));
  s.execute_async(ops.attempt(2), handler(2));
  EXPECT_TRUE(parking->delivered.empty()) << "a general wait delivers through the executor";
  ioc.poll();  // 1 gets its permit through the executor; 2 is queued
  ASSERT_TRUE(ops.pending(1));
  EXPECT_EQ(parking->delivered.size(), 1U);  // 1's permit, through the executor
  EXPECT_EQ(sem.waiting(), 1U);
  ops.complete(1);
  EXPECT_EQ(ioc.poll_one(), 1U);
  EXPECT_TRUE(ops.pending(2)) << "the grant waited for another handler";
  finish(2);
  EXPECT_EQ(parking->delivered.size(), 2U);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

// The grant has been made (its delivery is queued on the waiter's io_context) when the caller
// cancels: the cancellation is too late, and the call runs owning the permit.
TEST(EmbeddedWait, ACancellationAfterTheGrantLetsTheCallRun) {
  auto limiter = make_limiter(1, 1);
  const Shield s = Shield{}.use(limiter);
  test::HolderAndWaiter contexts;
  [[maybe_unused]] auto& [holder_ctx, waiter_ctx, holder_work, waiter_work] = contexts;
  test::ManualOps ops;
  std::map<int, error_code> done;
  asio::cancellation_signal cancel;
  s.execute_async(ops.attempt(1),
                  asio::bind_executor(holder_ctx, [&](error_code ec, int) { done[1] = ec; }));
  s.execute_async(ops.attempt(2),
                  asio::bind_cancellation_slot(
                      cancel.slot(),
                      asio::bind_executor(waiter_ctx, [&](error_code ec, int) { done[2] = ec; })));
  ASSERT_EQ(limiter->state().queued, 1U);
  ops.complete(1);
  holder_ctx.poll();  // 1 releases: the grant goes to waiter_ctx, not delivered yet
  ASSERT_EQ(limiter->state().queued, 0U);
  cancel.emit(asio::cancellation_type::terminal);
  waiter_ctx.poll();
  ASSERT_TRUE(ops.pending(2)) << "a cancellation after the grant stopped the call";
  EXPECT_EQ(limiter->state().running, 1U);
  ops.complete(2);
  waiter_ctx.poll();
  EXPECT_FALSE(done.at(2));
  EXPECT_EQ(limiter->state().running, 0U);
}

// A coroutine's handler carries an any_io_executor holding the io_context's executor: its queue
// wait is the embedded one too.
TEST_F(EmbeddedWaitTest, ACoroutineQueuesAndIsGranted) {
  Semaphore sem(1U, 1U);
  const Shield s = over(sem);
  s.execute_async(ops.attempt(1), handler(1));
  int value = 0;
  bool ended = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        value = co_await s.execute_async(ops.attempt(2), asio::use_awaitable);
        ended = true;
      },
      asio::detached);
  ioc.poll();
  EXPECT_EQ(sem.waiting(), 1U);
  ops.complete(1);
  EXPECT_EQ(ioc.poll_one(), 1U);
  EXPECT_TRUE(ops.pending(2)) << "the coroutine's grant waited for another handler";
  ASSERT_EQ(parking->delivered.size(), 2U);
  EXPECT_FALSE(parking->delivered[1]);
  ops.complete(2, {}, 42);
  ioc.poll();
  EXPECT_TRUE(ended);
  EXPECT_EQ(value, 42);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

// An io_context executor of another type (here one that tracks work) is not the plain one: the
// wait is the general one, delivered through that executor, not by the grant trampoline.
TEST_F(EmbeddedWaitTest, AnExecutorOfAnotherTypeGetsTheGeneralWait) {
  Semaphore sem(1U, 1U);
  const Shield s = over(sem);
  const auto tracked = asio::prefer(ioc.get_executor(), asio::execution::outstanding_work.tracked);
  static_assert(!std::is_same_v<std::decay_t<decltype(tracked)>, asio::io_context::executor_type>);
  s.execute_async(ops.attempt(1), handler(1));
  s.execute_async(ops.attempt(2),
                  asio::bind_executor(tracked, [this](error_code ec, int) { done[2] = ec; }));
  EXPECT_EQ(sem.waiting(), 1U);
  ops.complete(1);
  EXPECT_EQ(ioc.poll_one(), 1U);  // 1's completion: the grant is submitted through `tracked`
  EXPECT_FALSE(ops.pending(2)) << "the grant skipped the executor the call is bound to";
  ioc.poll();
  ASSERT_EQ(parking->delivered.size(), 2U);
  EXPECT_TRUE(ops.pending(2));
  finish(2);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

// The wait starts only once the callback has returned Step::queue: building the step touches
// nothing, so a callback that throws instead of returning it leaves nothing in the queue, and the
// call fails with its exception.
TEST_F(EmbeddedWaitTest, ACallbackThatThrowsInsteadOfReturningTheStepParksNothing) {
  Semaphore sem(1U, 1U);
  const Shield s = over(sem);
  parking->throw_instead = true;
  s.execute_async(ops.attempt(1), handler(1));
  ioc.poll();
  EXPECT_EQ(done.at(1), errc::callback_exception);
  EXPECT_TRUE(parking->delivered.empty());
  EXPECT_EQ(sem.waiting(), 0U);
  EXPECT_EQ(sem.ledger().in_use(), 0U) << "the step took a permit";
  parking->throw_instead = false;  // the execution's room serves the next call
  s.execute_async(ops.attempt(2), handler(2));
  EXPECT_TRUE(ops.pending(2));
  finish(2);
}

// A synchronous execution performs the same step by blocking in the same FIFO: a free permit is
// its own at once, a full queue and a closed semaphore are decided at once.
TEST_F(EmbeddedWaitTest, ASynchronousExecutionWaitsInTheSameQueue) {
  Semaphore sem(1U, 0U);
  const Shield s = over(sem);
  EXPECT_EQ(s.execute([&] { return static_cast<int>(sem.ledger().in_use()); }), 1)
      << "the call ran without the permit";
  ASSERT_EQ(parking->delivered.size(), 1U);
  EXPECT_FALSE(parking->delivered[0]);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
  // Hold the one permit: no room to queue.
  ASSERT_TRUE(sem.try_acquire());
  const Outcome<int> full = s.execute_outcome([] { return 1; });
  EXPECT_EQ(full.error(), errc::concurrency_limit_exceeded);
  (void)sem.release(1);
  sem.close();
  const Outcome<int> closed = s.execute_outcome([] { return 1; });
  EXPECT_EQ(closed.error(), errc::closed);
  ASSERT_EQ(parking->delivered.size(), 3U);
  EXPECT_EQ(sem.waiting(), 0U);
}

// One execution queues at two limiters in turn: its second wait is built where the first was.
TEST_F(EmbeddedWaitTest, AnExecutionQueuedAtTwoLimitersInTurnIsGrantedByEach) {
  auto outer = make_limiter(1, 1);
  auto inner = make_limiter(1, 1);
  const Shield both = Shield{}.use(outer).use(inner);
  const Shield outer_only = Shield{}.use(outer);
  const Shield inner_only = Shield{}.use(inner);
  outer_only.execute_async(ops.attempt(1), handler(1));  // holds the outer permit
  inner_only.execute_async(ops.attempt(2), handler(2));  // holds the inner permit
  both.execute_async(ops.attempt(3), handler(3));        // queues at the outer limiter
  EXPECT_EQ(outer->state().queued, 1U);
  ops.complete(1);
  ioc.poll();  // 3 passes the outer limiter and queues at the inner one
  EXPECT_EQ(outer->state().running, 1U);
  EXPECT_EQ(outer->state().queued, 0U);
  EXPECT_EQ(inner->state().queued, 1U);
  EXPECT_FALSE(ops.pending(3));
  ops.complete(2);
  ioc.poll();
  ASSERT_TRUE(ops.pending(3));
  ops.complete(3, {}, 7);
  ioc.poll();
  EXPECT_EQ(done.size(), 3U);
  for (const auto& [id, ec] : done) EXPECT_FALSE(ec) << id;
  EXPECT_EQ(outer->state().running, 0U);
  EXPECT_EQ(inner->state().running, 0U);
}

// A hedge's attempt runs only the layers inside the hedge, so it keeps room for an embedded wait
// only if one of those declares waits_in_queue. Told apart by a strategy inside the hedge that
// does not declare it: where the attempt has room (the declaring strategy is inside too) its wait
// is embedded and a free permit reaches on_wait_complete at once; where it has none (the
// declaring strategy is outside the hedge), its wait is the general one, granted through the
// executor.
TEST_F(EmbeddedWaitTest, AHedgesAttemptKeepsRoomForAWaitOnlyIfALayerInsideDeclaresIt) {
  for (const bool declaring_inside : {false, true}) {
    SCOPED_TRACE(declaring_inside ? "declaring strategy inside the hedge" : "outside");
    Semaphore declaring_sem(1U, 1U);
    Semaphore plain_sem(1U, 1U);
    auto declaring = std::make_shared<Parking>(declaring_sem, true);
    auto plain = std::make_shared<Parking>(plain_sem, false);
    const Shield s = declaring_inside
                         ? Shield{}.hedge(2, std::chrono::hours(1)).use(declaring).use(plain)
                         : Shield{}.use(declaring).hedge(2, std::chrono::hours(1)).use(plain);
    s.execute_async(ops.attempt(1), handler(1));
    ASSERT_EQ(declaring->delivered.size(), 1U);  // embedded wherever it is: decided at once
    EXPECT_EQ(plain->delivered.size(), declaring_inside ? 1U : 0U);
    ioc.poll();
    ASSERT_EQ(plain->delivered.size(), 1U);
    EXPECT_FALSE(plain->delivered[0]);
    finish(1);
    EXPECT_EQ(declaring_sem.ledger().in_use(), 0U);
    EXPECT_EQ(plain_sem.ledger().in_use(), 0U);
    done.clear();
  }
}

// A handler bound to a strand has no plain io_context executor: its queue wait is the general
// one, and the grant runs the call on that strand.
TEST_F(EmbeddedWaitTest, AQueuedCallOnAStrandIsGrantedOnTheStrand) {
  auto limiter = make_limiter(1, 1);
  const Shield s = Shield{}.use(limiter);
  auto strand = asio::make_strand(ioc);
  s.execute_async(ops.attempt(1), handler(1));
  bool on_strand = false;
  s.execute_async(
      [&](auto token) {
        on_strand = strand.running_in_this_thread();
        return ops.attempt(2)(std::move(token));
      },
      asio::bind_executor(strand, [this](error_code ec, int) { done[2] = ec; }));
  EXPECT_EQ(limiter->state().queued, 1U);
  ops.complete(1);
  ioc.poll();
  ASSERT_TRUE(ops.pending(2));
  EXPECT_TRUE(on_strand);
  ops.complete(2);
  ioc.poll();
  EXPECT_FALSE(done.at(2));
  EXPECT_EQ(limiter->state().running, 0U);
}

/// The stress runs' operation: counted in flight (and the peak kept) from its start until its
/// posted completion runs, just before the limiter hears of it; it completes with 1.
auto counted_operation(std::atomic<int>& in_flight, std::atomic<int>& peak) {
  return [&in_flight, &peak](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&in_flight, &peak](auto handler) {
          const int now = ++in_flight;
          int p = peak.load();
          while (now > p && !peak.compare_exchange_weak(p, now)) {
          }
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, [&in_flight, h = std::move(handler)]() mutable {
            --in_flight;
            std::move(h)(error_code(), 1);
          });
        },
        token);
  };
}

/// Two threads running one io_context, plain executors: grants cross threads (through the
/// io_context) or run on the releasing thread (the trampoline), and a release may free a permit
/// between a call's lock-free checks and its lock. Operations complete through the io_context, so
/// without the limiter many would be in flight at once: never more than `limit` run, every call
/// completes once, full capacity at the end (run under ThreadSanitizer in CI).
TEST(EmbeddedWaitStress, TwoThreadsOnOneIoContextConservePermits) {
  constexpr int calls = 400;
  asio::io_context ioc(2);
  auto limiter = make_limiter(2, 8);
  const Shield s = Shield{}.use(limiter);
  std::atomic<int> in_flight{0}, peak{0}, completed{0}, rejected{0};
  test::run_posted_calls(ioc, 2, calls, completed, [&] {
    s.execute_async(counted_operation(in_flight, peak),
                    asio::bind_executor(ioc, [&](error_code ec, int) {
                      if (ec == errc::concurrency_limit_exceeded) ++rejected;
                      ++completed;
                    }));
  });
  ASSERT_EQ(completed.load(), calls);
  EXPECT_LE(peak.load(), 2);
  EXPECT_LT(rejected.load(), calls);
  test::expect_at_rest(*limiter, 2U);
}

// On a thread pool the wait is the general one, an async_acquire: a permit free at once is
// granted by a post to the pool. The engine starts it only once on_start has returned: before it
// returns, on_start lets the pool's one thread run everything posted so far (a job posted last has
// run), and the semaphore still holds its permit; the grant then reaches on_wait_complete after
// on_start, on the pool's thread.
TEST(EmbeddedWait, AGeneralWaitStartsOnceTheCallbackHasReturned) {
  Semaphore sem(1U, 1U);
  asio::thread_pool pool(1);
  auto parking = std::make_shared<Parking>(sem);
  std::vector<unsigned> in_use_before_returning;
  parking->before_returning = [&] {
    std::promise<void> ran;
    asio::post(pool, [&ran] { ran.set_value(); });
    ran.get_future().wait();
    in_use_before_returning.push_back(sem.ledger().in_use());
  };
  const Shield s = Shield{}.use(parking);
  std::promise<error_code> done;
  s.execute_async(
      [](auto token) {
        return asio::async_initiate<decltype(token), void(error_code, int)>(
            [](auto handler) {
              auto ex = asio::get_associated_executor(handler);
              asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error_code(), 1); });
            },
            token);
      },
      asio::bind_executor(pool, [&](error_code ec, int) { done.set_value(ec); }));
  EXPECT_FALSE(done.get_future().get());
  pool.join();
  ASSERT_EQ(in_use_before_returning.size(), 1U);
  EXPECT_EQ(in_use_before_returning[0], 0U) << "the wait started inside on_start";
  ASSERT_EQ(parking->delivered.size(), 1U);
  EXPECT_FALSE(parking->delivered[0]);
  EXPECT_NE(parking->delivered_on[0], std::this_thread::get_id()) << "the grant skipped the pool";
  EXPECT_FALSE(parking->delivered_inside_on_start[0]);
  EXPECT_EQ(sem.ledger().in_use(), 0U);
}

// On a strand the queue wait is the general one, an async_acquire whose operation block comes from
// operator new on a thread whose block cache starts empty. The n-th allocation of starting a call
// that must queue fails: the call is refused (execute_async throws), or it completes with the
// failure, or it queues and runs once the permit comes back; either way nothing stays queued and no
// permit is lost. Each round runs on a thread of its own (an empty block cache).
TEST(EmbeddedWait, AGeneralWaitThatFailsToStartLeavesNothingBehind) {
  bool reached_the_end = false;
  int failed_calls = 0;
  for (std::uint64_t n = 0; n < 64 && !reached_the_end; ++n) {
    std::thread([&] {
      Semaphore sem(1U, 1U);
      asio::io_context ioc;
      const auto strand = asio::make_strand(ioc);
      test::ManualOps ops;
      const Shield s = Shield{}.use(std::make_shared<Parking>(sem));
      std::map<int, error_code> done;
      const auto handler = [&](int id) {
        return asio::bind_executor(strand, [&done, id](error_code ec, int) { done[id] = ec; });
      };
      s.execute_async(ops.attempt(1), handler(1));
      ioc.poll();
      ASSERT_TRUE(ops.pending(1)) << n;  // it holds the one permit
      bool started = false;
      const testing::InjectedFailure injected = testing::inject_allocation_failure(n, [&] {
        s.execute_async(ops.attempt(2), handler(2));
        started = true;
        ioc.poll();
      });
      reached_the_end = !injected.fired;
      const bool failed = !started || done.count(2) != 0;
      if (failed) {
        ASSERT_TRUE(injected.fired) << n << ": the call failed without an allocation failure";
        ++failed_calls;
        EXPECT_EQ(sem.waiting(), 0U) << n << ": a failed start left a waiter";
      } else {
        EXPECT_EQ(sem.waiting(), 1U) << n;
      }
      ops.complete(1);
      ioc.restart();
      ioc.poll();  // 1 releases: a queued 2 is granted and starts
      EXPECT_FALSE(done.at(1)) << n;
      if (!failed) {
        ASSERT_TRUE(ops.pending(2)) << n << ": the queued call was not granted";
        ops.complete(2);
        ioc.restart();
        ioc.poll();
        EXPECT_FALSE(done.at(2)) << n;
      }
      EXPECT_EQ(sem.ledger().in_use(), 0U) << n << ": a permit was lost";
      EXPECT_EQ(sem.waiting(), 0U) << n;
    }).join();
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_TRUE(reached_the_end) << "more than 64 allocations on the queued path";
  EXPECT_GT(failed_calls, 0) << "no allocation failure made the queued call fail";
}

// On a thread pool (not a plain io_context executor) a queued call takes the general wait, an
// async_acquire the engine starts once the limiter's callback has returned: its grant may run on
// the other thread before the engine's shell has returned, and owns the execution from then on.
TEST(EmbeddedWaitStress, ThreadPoolsGeneralWaitConservesPermits) {
  constexpr int calls = 400;
  asio::thread_pool pool(2);
  auto limiter = make_limiter(1, calls);
  const Shield s = Shield{}.use(limiter);
  std::atomic<int> in_flight{0}, peak{0}, completed{0}, failed{0};
  for (int i = 0; i < calls; ++i) {
    asio::post(pool, [&] {
      s.execute_async(counted_operation(in_flight, peak),
                      asio::bind_executor(pool, [&](error_code ec, int v) {
                        if (ec || v != 1) ++failed;
                        ++completed;
                      }));
    });
  }
  if (!test::spin_until([&] { return completed.load() >= calls; })) pool.stop();  // a lost call
  pool.join();
  ASSERT_EQ(completed.load(), calls);
  EXPECT_EQ(failed.load(), 0);  // the queue holds every call: none is rejected
  EXPECT_EQ(peak.load(), 1);
  test::expect_at_rest(*limiter, 1U);
}

}  // namespace
}  // namespace kevlar
