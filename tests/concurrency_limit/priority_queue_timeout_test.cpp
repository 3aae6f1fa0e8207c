// The concurrency limit's priorities and queue-wait timeouts through shields: queued calls are
// granted by priority (CallOptions::priority or ConcurrencyLimitOptions::priority_generator), a
// call that finds the queue full displaces the newest call of a lower priority, and a queued call
// gives up at its queue deadline (QueueTimeout::fixed or ::adaptive) with errc::queue_timeout.
// Callback, coroutine and synchronous executions; time is a ManualClock.
#include "concurrency_limit/limiter_test_support.hpp"

#include <kevlar/concurrency_limit.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/queue_timeout.hpp>
#include <kevlar/testing/event_recorder.hpp>
#include <pending_ops.hpp>

#include <gtest/gtest.h>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

/// What an on_rejected hook saw: why the call was rejected, and the call's priority.
struct HookCall {
  errc reason;
  std::int32_t priority;
  friend bool operator==(const HookCall&, const HookCall&) = default;
};
void PrintTo(const HookCall& h, std::ostream* os) {
  *os << "{errc " << static_cast<int>(h.reason) << ", priority " << h.priority << "}";
}

/// A synchronous execution on a thread of its own: execute_outcome(CallOptions{priority}, fn)
/// through `shield`, where fn records the context it ran with, calls `on_run` and returns 7.
class SyncCall {
 public:
  SyncCall(const Shield& shield, std::int32_t priority, std::function<void()> on_run = {})
      : on_run_(std::move(on_run)), thread_([this, shield, priority] {
          result_ = shield.execute_outcome(CallOptions{.priority = priority}, [this](Context& ctx) {
            priority_ = ctx.priority();
            deadline_ = ctx.deadline();
            ran_ = true;
            if (on_run_) on_run_();
            return 7;
          });
        }) {}
  SyncCall(const SyncCall&) = delete;
  SyncCall& operator=(const SyncCall&) = delete;
  ~SyncCall() {
    if (thread_.joinable()) thread_.join();
  }

  /// Waits for the execution to end; its outcome.
  const Outcome<int>& join() {
    if (thread_.joinable()) thread_.join();
    return *result_;
  }
  [[nodiscard]] bool ran() const { return ran_.load(); }
  /// Context::priority() and Context::deadline() as the function saw them (after join()).
  [[nodiscard]] std::int32_t priority() const { return priority_; }
  [[nodiscard]] Clock::time_point deadline() const { return deadline_; }

 private:
  std::function<void()> on_run_;
  std::atomic<bool> ran_{false};
  std::int32_t priority_ = 0;
  Clock::time_point deadline_{};
  std::optional<Outcome<int>> result_;
  std::thread thread_;  // last: starts once the rest is built
};

struct PriorityQueueTimeout : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  std::shared_ptr<testing::EventRecorder> events = std::make_shared<testing::EventRecorder>();
  asio::io_context ioc;
  // The pending operations hold no work of their own: keep the context from running out of work.
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  test::PendingOps ops;                            // destroyed before the io_context
  std::vector<int> started;                        // ids of the user operations, in start order
  std::map<int, std::size_t> op_index;             // id -> its call in `ops`
  std::map<int, std::int32_t> priority_seen;       // id -> Context::priority() of its attempt
  std::map<int, Clock::time_point> deadline_seen;  // id -> Context::deadline() of its attempt
  std::map<int, error_code> done;                  // id -> how its execution completed
  std::map<int, int> completions;                  // id -> how many times its handler ran
  std::map<int, int> values;                       // id -> the value a coroutine call returned
  std::mutex hooks_mutex;  // a synchronous rejection runs the hook on the caller's thread
  std::vector<HookCall> hooks;

  /// A limit of `max_concurrency` with a queue of `max_queue` and `timeout`, whose on_rejected
  /// hook records each rejection.
  ConcurrencyLimitOptions options(int max_concurrency, int max_queue,
                                  QueueTimeout timeout = QueueTimeout::none()) {
    ConcurrencyLimitOptions o;
    o.max_concurrency = max_concurrency;
    o.max_queue = max_queue;
    o.queue_timeout = timeout;
    o.on_rejected = [this](const ConcurrencyLimitRejectedEvent& e) {
      const std::lock_guard lock(hooks_mutex);
      hooks.push_back({e.reason, e.context.priority()});
    };
    return o;
  }
  [[nodiscard]] Shield shield_of(const std::shared_ptr<ConcurrencyLimitStrategy>& limiter) const {
    return Shield{}.use(limiter).with_clock(clock).observed_by(events);
  }

  /// An attempt that records its start and its context, then waits in `ops` until the test
  /// completes it.
  auto attempt(int id) {
    return [this, id](auto token) {
      return asio::async_initiate<decltype(token), void(error_code, int)>(
          [this, id](auto handler) {
            started.push_back(id);
            op_index[id] = ops.size();
            if (const Context* ctx = attempt_context(handler)) {
              priority_seen[id] = ctx->priority();
              deadline_seen[id] = ctx->deadline();
            }
            ops.async_call(std::move(handler));
          },
          token);
    };
  }
  /// Starts call `id` through `s` with CallOptions{priority}.
  void start(const Shield& s, int id, std::int32_t priority = 0) {
    s.execute_async(CallOptions{.priority = priority}, attempt(id),
                    asio::bind_executor(ioc, [this, id](error_code ec, int) {
                      done[id] = ec;
                      ++completions[id];
                    }));
  }
  void complete(int id) { ops.succeed(op_index.at(id), id * 10); }
  /// Runs the io_context until nothing is ready.
  void settle() {
    for (int round = 0; round < 16; ++round) {
      if (ioc.poll() == 0) return;
    }
  }
  /// With one permit: completes the running call, then each call granted after it, in turn.
  void complete_in_turn() {
    for (std::size_t completed = 0; completed < started.size();) {
      complete(started[completed++]);
      settle();
    }
  }

  /// The user's coroutine for call `id`: records its start, then awaits an operation in `ops`.
  asio::awaitable<int> pending_call(int id) {
    started.push_back(id);
    op_index[id] = ops.size();
    co_return co_await ops.async_call(asio::use_awaitable);
  }
  /// A caller's coroutine: co_awaits call `id` through `s` with CallOptions{priority}.
  asio::awaitable<void> call_through(Shield s, int id, std::int32_t priority) {
    values[id] = co_await s.execute_async(CallOptions{.priority = priority},
                                          [this, id] { return pending_call(id); });
    done[id] = {};
    ++completions[id];
  }

  [[nodiscard]] std::vector<HookCall> hook_calls() {
    const std::lock_guard lock(hooks_mutex);
    return hooks;
  }
  /// The kinds of the Rejected events recorded so far.
  [[nodiscard]] std::vector<RejectionKind> rejections() const {
    std::vector<RejectionKind> kinds;
    for (const Rejected& r : events->events_of<Rejected>()) kinds.push_back(r.kind);
    return kinds;
  }
  /// Every execution started by start() completed exactly once.
  void expect_each_completed_once() const {
    for (const auto& [id, n] : completions) EXPECT_EQ(n, 1) << "call " << id;
  }
};

void rethrow(const std::exception_ptr& e) {
  if (e) std::rethrow_exception(e);
}

// ---- priorities ------------------------------------------------------------------------------

TEST_F(PriorityQueueTimeout, QueuedCallsStartByPriorityThenInArrivalOrder) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 4));
  const Shield s = shield_of(limiter);
  start(s, 1);  // holds the permit
  settle();
  start(s, 2, 0);
  start(s, 3, 3);
  start(s, 4, 0);
  start(s, 5, 7);
  settle();
  ASSERT_EQ(started, std::vector<int>{1});
  EXPECT_EQ(limiter->state().queued, 4u);
  complete_in_turn();
  EXPECT_EQ(started, (std::vector<int>{1, 5, 3, 2, 4}));
  EXPECT_EQ(priority_seen.at(5), 7) << "the attempt's context carries the caller's priority";
  EXPECT_EQ(priority_seen.at(3), 3);
  for (int id = 1; id <= 5; ++id) EXPECT_FALSE(done.at(id)) << "call " << id;
  EXPECT_TRUE(hook_calls().empty());
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, SynchronousCallsAreGrantedByPriorityToo) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 4));
  const Shield s = shield_of(limiter);
  start(s, 1);  // an asynchronous call holds the permit
  settle();
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::unique_ptr<SyncCall>> calls;
  const std::int32_t priorities[] = {0, 3, 0, 7};
  for (int i = 0; i < 4; ++i) {
    calls.push_back(std::make_unique<SyncCall>(s, priorities[i], [&order_mutex, &order, i] {
      const std::lock_guard lock(order_mutex);
      order.push_back(i);
    }));
    // The next caller starts once this one is parked: their arrival order is fixed.
    while (limiter->state().queued != static_cast<std::uint32_t>(i + 1)) {
      std::this_thread::yield();
    }
  }
  complete(1);  // the release hands the permit to the blocked threads, one after the other
  settle();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Outcome<int>& r = calls[i]->join();
    ASSERT_TRUE(r.has_value()) << "caller " << i << ": " << r.error().message();
    EXPECT_EQ(calls[i]->priority(), priorities[i]);
  }
  EXPECT_EQ(order, (std::vector<int>{3, 1, 0, 2}));
  EXPECT_FALSE(done.at(1));
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, ThePriorityGeneratorDecidesTheOrderAndRunsOnlyWithoutAFreePermit) {
  int generated = 0;
  ConcurrencyLimitOptions o = options(1, 4);
  // Inverts the caller's priority: the order follows the generator, not the caller.
  o.priority_generator = [&generated](const Context& ctx) {
    ++generated;
    return -ctx.priority();
  };
  auto limiter = ConcurrencyLimitStrategy::create(o);
  const Shield s = shield_of(limiter);
  start(s, 1, 9);  // a permit is free: the generator is not called
  settle();
  EXPECT_EQ(generated, 0);
  EXPECT_EQ(priority_seen.at(1), 9);
  start(s, 2, 3);  // generated -3
  start(s, 3, 1);  // generated -1
  start(s, 4, 2);  // generated -2
  settle();
  EXPECT_EQ(generated, 3);
  EXPECT_EQ(limiter->state().queued, 3u);
  complete_in_turn();
  EXPECT_EQ(started, (std::vector<int>{1, 3, 4, 2}));
  // The generated value became the context's priority.
  EXPECT_EQ(priority_seen.at(3), -1);
  EXPECT_EQ(priority_seen.at(4), -2);
  EXPECT_EQ(priority_seen.at(2), -3);
  start(s, 5, 4);  // the limiter is free again
  settle();
  EXPECT_EQ(generated, 3);
  EXPECT_EQ(priority_seen.at(5), 4);
  complete(5);
  settle();
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, ThePriorityGeneratorSetsTheContextOfAQueuedSynchronousCall) {
  std::atomic<int> generated{0};
  ConcurrencyLimitOptions o = options(1, 1);
  o.priority_generator = [&generated](const Context& ctx) {
    ++generated;
    return ctx.priority() + 100;
  };
  auto limiter = ConcurrencyLimitStrategy::create(o);
  const Shield s = shield_of(limiter);
  EXPECT_EQ(s.execute(CallOptions{.priority = 2}, [](Context& ctx) { return ctx.priority(); }), 2)
      << "a free permit: the caller's priority, no generator";
  EXPECT_EQ(generated.load(), 0);
  start(s, 1);
  settle();
  SyncCall call(s, 5);
  while (limiter->state().queued != 1) std::this_thread::yield();
  complete(1);
  settle();
  ASSERT_TRUE(call.join().has_value());
  EXPECT_EQ(generated.load(), 1);
  EXPECT_EQ(call.priority(), 105);
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AHigherPriorityDisplacesTheNewestLowerCallFromAFullQueue) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1));
  const Shield s = shield_of(limiter);
  start(s, 1);     // holds the permit
  start(s, 2, 0);  // A queues
  settle();
  ASSERT_EQ(limiter->state().queued, 1u);
  start(s, 3, 1);  // B takes A's place
  EXPECT_FALSE(done.count(2)) << "the displaced call completed inside the newcomer's call";
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::concurrency_limit_exceeded);
  EXPECT_FALSE(done.count(3));
  EXPECT_EQ(limiter->state().queued, 1u);
  EXPECT_EQ(rejections(), std::vector<RejectionKind>{RejectionKind::concurrency_limit});
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::concurrency_limit_exceeded, 0}}));
  start(s, 4, 1);  // C: an equal priority displaces nobody
  settle();
  ASSERT_TRUE(done.count(4));
  EXPECT_EQ(done.at(4), errc::concurrency_limit_exceeded);
  EXPECT_FALSE(done.count(3)) << "B was displaced by a call of its own priority";
  EXPECT_EQ(rejections().size(), 2u);
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::concurrency_limit_exceeded, 0},
                                                 {errc::concurrency_limit_exceeded, 1}}));
  complete_in_turn();
  EXPECT_EQ(started, (std::vector<int>{1, 3}));
  EXPECT_FALSE(done.at(3));
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, ADisplacedSynchronousCallFailsAsARejection) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1));
  const Shield s = shield_of(limiter);
  start(s, 1);  // holds the permit
  settle();
  SyncCall displaced(s, 0);
  while (limiter->state().queued != 1) std::this_thread::yield();
  start(s, 2, 1);
  const Outcome<int>& r = displaced.join();
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error(), errc::concurrency_limit_exceeded);
  EXPECT_FALSE(displaced.ran());
  EXPECT_EQ(rejections(), std::vector<RejectionKind>{RejectionKind::concurrency_limit});
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::concurrency_limit_exceeded, 0}}));
  settle();
  EXPECT_EQ(limiter->state().queued, 1u);
  complete_in_turn();
  EXPECT_EQ(started, (std::vector<int>{1, 2}));
  EXPECT_FALSE(done.at(2));
  test::expect_at_rest(*limiter, 1);
}

// With a queue timeout the limiter decides out of line (it arms a deadline per queued call): a
// displaced call's deadline goes with it, and the newcomer's is its own.
TEST_F(PriorityQueueTimeout, ADisplacedCallsQueueDeadlineIsDisarmed) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1, QueueTimeout::fixed(100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);
  start(s, 2, 0);  // A: deadline t0 + 100ms
  settle();
  clock->advance(50ms);
  start(s, 3, 1);  // B displaces A: deadline t0 + 150ms
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::concurrency_limit_exceeded);
  clock->advance(50ms);  // A's deadline: nothing left to time out
  settle();
  EXPECT_FALSE(done.count(3));
  EXPECT_EQ(limiter->state().queued, 1u);
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::concurrency_limit_exceeded, 0}}));
  clock->advance(49ms);
  settle();
  EXPECT_FALSE(done.count(3));
  clock->advance(1ms);  // B's deadline
  settle();
  ASSERT_TRUE(done.count(3));
  EXPECT_EQ(done.at(3), errc::queue_timeout);
  EXPECT_EQ(rejections(), (std::vector<RejectionKind>{RejectionKind::concurrency_limit,
                                                      RejectionKind::queue_timeout}));
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::concurrency_limit_exceeded, 0},
                                                 {errc::queue_timeout, 1}}));
  complete_in_turn();
  EXPECT_EQ(started, std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, CoroutineCallsAreGrantedByPriority) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 4));
  const Shield s = shield_of(limiter);
  asio::co_spawn(ioc, call_through(s, 1, 0), rethrow);  // holds the permit
  settle();
  ASSERT_EQ(started, std::vector<int>{1});
  asio::co_spawn(ioc, call_through(s, 2, 1), rethrow);
  asio::co_spawn(ioc, call_through(s, 3, 5), rethrow);
  asio::co_spawn(ioc, call_through(s, 4, 3), rethrow);
  settle();
  EXPECT_EQ(limiter->state().queued, 3u);
  complete_in_turn();
  EXPECT_EQ(started, (std::vector<int>{1, 3, 4, 2}));
  EXPECT_EQ(values, (std::map<int, int>{{1, 10}, {2, 20}, {3, 30}, {4, 40}}));
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// ---- fixed queue timeouts ----------------------------------------------------------------------

TEST_F(PriorityQueueTimeout, AFixedQueueTimeoutEndsAnAsynchronousWait) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 2, QueueTimeout::fixed(100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);  // holds the permit
  start(s, 2);  // queued at t0
  settle();
  ASSERT_EQ(limiter->state().queued, 1u);
  clock->advance(99ms);
  settle();
  EXPECT_FALSE(done.count(2)) << "left the queue before its deadline";
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(1ms);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::queue_timeout);
  EXPECT_EQ(rejections(), std::vector<RejectionKind>{RejectionKind::queue_timeout});
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::queue_timeout, 0}}));
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u) << "the holder's permit is untouched";
  EXPECT_EQ(started, std::vector<int>{1}) << "the timed-out call ran";
  start(s, 3);  // the freed place takes a new call, which runs after the holder
  settle();
  EXPECT_EQ(limiter->state().queued, 1u);
  complete_in_turn();
  EXPECT_EQ(started, (std::vector<int>{1, 3}));
  EXPECT_FALSE(done.at(1));
  EXPECT_FALSE(done.at(3));
  EXPECT_EQ(hook_calls().size(), 1u);
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AFixedQueueTimeoutEndsASynchronousWait) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 2, QueueTimeout::fixed(100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);  // an asynchronous call holds the permit
  settle();
  {
    SyncCall call(s, 0);
    clock->wait_for_sleepers(1);  // queued, sleeping until its queue deadline
    EXPECT_EQ(limiter->state().queued, 1u);
    clock->advance(99ms);
    EXPECT_EQ(limiter->state().queued, 1u) << "left the queue before its deadline";
    clock->advance(1ms);
    const Outcome<int>& r = call.join();
    ASSERT_TRUE(r.has_error());
    EXPECT_EQ(r.error(), errc::queue_timeout);
    EXPECT_FALSE(call.ran());
  }
  EXPECT_EQ(rejections(), std::vector<RejectionKind>{RejectionKind::queue_timeout});
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::queue_timeout, 0}}));
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u);
  // execute() throws it.
  std::optional<error_code> thrown;
  bool ran = false;
  std::thread caller([&] {
    try {
      (void)s.execute(CallOptions{.priority = 4}, [&ran] {
        ran = true;
        return 1;
      });
    } catch (const Error& e) {
      thrown = e.error();
    }
  });
  clock->wait_for_sleepers(1);
  clock->advance(100ms);
  caller.join();
  ASSERT_TRUE(thrown.has_value());
  EXPECT_EQ(*thrown, errc::queue_timeout);
  EXPECT_FALSE(ran);
  EXPECT_EQ(hook_calls(),
            (std::vector<HookCall>{{errc::queue_timeout, 0}, {errc::queue_timeout, 4}}));
  complete_in_turn();
  EXPECT_EQ(started, std::vector<int>{1});
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AGrantBeforeTheQueueDeadlineRunsTheCallAndLeavesNoTimeoutBehind) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1, QueueTimeout::fixed(100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);
  start(s, 2);  // queued at t0: deadline t0 + 100ms
  settle();
  clock->advance(60ms);
  settle();
  complete(1);  // the grant comes first
  settle();
  ASSERT_EQ(started, (std::vector<int>{1, 2}));
  EXPECT_EQ(deadline_seen.at(2), Clock::time_point::max())
      << "the queue deadline reached the running call's context";
  clock->advance(200ms);  // past the queue deadline while the call runs
  settle();
  EXPECT_FALSE(done.count(2)) << "a stray queue timeout ended the running call";
  EXPECT_EQ(limiter->state().running, 1u);
  complete(2);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_FALSE(done.at(2));
  EXPECT_TRUE(rejections().empty());
  EXPECT_TRUE(hook_calls().empty());
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, ASynchronousGrantBeforeTheQueueDeadlineRestoresTheContextDeadline) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1, QueueTimeout::fixed(100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);
  settle();
  SyncCall call(s, 0);
  clock->wait_for_sleepers(1);
  clock->advance(60ms);
  complete(1);  // the release hands the permit to the sleeping thread
  settle();
  const Outcome<int>& r = call.join();
  ASSERT_TRUE(r.has_value()) << r.error().message();
  EXPECT_EQ(r.value(), 7);
  EXPECT_EQ(call.deadline(), Clock::time_point::max())
      << "the queue deadline outlived the wait in the call's context";
  clock->advance(200ms);
  EXPECT_TRUE(rejections().empty());
  EXPECT_TRUE(hook_calls().empty());
  test::expect_at_rest(*limiter, 1);
}

// ---- adaptive queue timeouts (CoDel) -----------------------------------------------------------

TEST_F(PriorityQueueTimeout, AnAdaptiveTimeoutShedsStaleCallsOnceTheQueueHasStood) {
  auto limiter =
      ConcurrencyLimitStrategy::create(options(1, 4, QueueTimeout::adaptive(5ms, 100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);
  start(s, 2);  // A joins an empty queue at t0: it may wait the whole interval (t0 + 100ms)
  settle();
  clock->advance(95ms);
  start(s, 3);  // B joins a queue standing since t0: max(t0 + 95 + 2 * 5, t0 + 100) = t0 + 105ms
  settle();
  clock->advance(4ms);  // t0 + 99ms
  settle();
  EXPECT_FALSE(done.count(2));
  EXPECT_FALSE(done.count(3));
  EXPECT_EQ(limiter->state().queued, 2u);
  clock->advance(1ms);  // t0 + 100ms
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::queue_timeout);
  EXPECT_FALSE(done.count(3));
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(4ms);  // t0 + 104ms
  settle();
  EXPECT_FALSE(done.count(3));
  clock->advance(1ms);  // t0 + 105ms
  settle();
  ASSERT_TRUE(done.count(3));
  EXPECT_EQ(done.at(3), errc::queue_timeout);
  EXPECT_EQ(rejections(), (std::vector<RejectionKind>{RejectionKind::queue_timeout,
                                                      RejectionKind::queue_timeout}));
  EXPECT_EQ(hook_calls(),
            (std::vector<HookCall>{{errc::queue_timeout, 0}, {errc::queue_timeout, 0}}));
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u);
  complete_in_turn();
  EXPECT_EQ(started, std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AnAdaptiveTimeoutStartsAFreshPeriodOnceTheQueueHasDrained) {
  auto limiter =
      ConcurrencyLimitStrategy::create(options(1, 4, QueueTimeout::adaptive(5ms, 100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);
  start(s, 2);  // A joins an empty queue at t0
  settle();
  clock->advance(50ms);
  complete(1);  // A is granted: the queue is empty again
  settle();
  ASSERT_EQ(started, (std::vector<int>{1, 2}));
  clock->advance(45ms);
  start(s, 3);  // B joins the empty queue at t0 + 95ms: a new period, deadline t0 + 195ms
  settle();
  clock->advance(99ms);  // t0 + 194ms (a period kept from t0 would have shed B at t0 + 105ms)
  settle();
  EXPECT_FALSE(done.count(3));
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(1ms);  // t0 + 195ms
  settle();
  ASSERT_TRUE(done.count(3));
  EXPECT_EQ(done.at(3), errc::queue_timeout);
  EXPECT_EQ(hook_calls(), (std::vector<HookCall>{{errc::queue_timeout, 0}}));
  complete(2);
  settle();
  EXPECT_FALSE(done.at(2));
  EXPECT_EQ(started, (std::vector<int>{1, 2}));
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AnAdaptiveTimeoutEndsASynchronousWaitAfterTheInterval) {
  auto limiter =
      ConcurrencyLimitStrategy::create(options(1, 4, QueueTimeout::adaptive(5ms, 100ms)));
  const Shield s = shield_of(limiter);
  start(s, 1);
  settle();
  SyncCall call(s, 0);  // joins an empty queue: it may wait the whole interval
  clock->wait_for_sleepers(1);
  clock->advance(99ms);
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(1ms);
  const Outcome<int>& r = call.join();
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error(), errc::queue_timeout);
  EXPECT_FALSE(call.ran());
  EXPECT_EQ(rejections(), std::vector<RejectionKind>{RejectionKind::queue_timeout});
  complete_in_turn();
  test::expect_at_rest(*limiter, 1);
}

// ---- queue timeouts inside an outer timeout ----------------------------------------------------

TEST_F(PriorityQueueTimeout, AnEarlierOuterTimeoutEndsAnAsynchronousWaitAsATimeout) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1, QueueTimeout::fixed(100ms)));
  const Shield holder = shield_of(limiter);
  const Shield outer = Shield{}.timeout(50ms).use(limiter).with_clock(clock).observed_by(events);
  start(holder, 1);
  start(outer, 2);
  settle();
  clock->advance(49ms);
  settle();
  EXPECT_FALSE(done.count(2));
  clock->advance(1ms);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::timeout);
  EXPECT_TRUE(rejections().empty()) << "the outer timeout's expiry is no queue timeout";
  EXPECT_TRUE(hook_calls().empty());
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_EQ(limiter->state().running, 1u);
  clock->advance(100ms);  // past the queue deadline the call never armed
  settle();
  EXPECT_EQ(done.at(2), errc::timeout);
  EXPECT_TRUE(hook_calls().empty());
  complete_in_turn();
  EXPECT_EQ(started, std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AnEarlierOuterTimeoutEndsASynchronousWaitAsATimeout) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1, QueueTimeout::fixed(100ms)));
  const Shield outer = Shield{}.timeout(50ms).use(limiter).with_clock(clock).observed_by(events);
  start(shield_of(limiter), 1);
  settle();
  SyncCall call(outer, 0);
  clock->wait_for_sleepers(1);
  clock->advance(49ms);
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(1ms);
  const Outcome<int>& r = call.join();
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error(), errc::timeout);
  EXPECT_FALSE(call.ran());
  EXPECT_TRUE(rejections().empty());
  EXPECT_TRUE(hook_calls().empty());
  complete_in_turn();
  test::expect_at_rest(*limiter, 1);
}

TEST_F(PriorityQueueTimeout, AQueueTimeoutEarlierThanAnOuterTimeoutIsStillAQueueTimeout) {
  auto limiter = ConcurrencyLimitStrategy::create(options(1, 1, QueueTimeout::fixed(100ms)));
  const Shield outer = Shield{}.timeout(200ms).use(limiter).with_clock(clock).observed_by(events);
  start(shield_of(limiter), 1);
  start(outer, 2);
  settle();
  clock->advance(99ms);
  settle();
  EXPECT_FALSE(done.count(2));
  clock->advance(1ms);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::queue_timeout);
  clock->advance(100ms);  // the outer deadline: the execution is over
  settle();
  EXPECT_EQ(done.at(2), errc::queue_timeout);
  // The same synchronously: the queue deadline lowers the outer one while the call waits.
  SyncCall call(outer, 0);
  clock->wait_for_sleepers(1);
  clock->advance(99ms);
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(1ms);
  const Outcome<int>& r = call.join();
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error(), errc::queue_timeout);
  EXPECT_FALSE(call.ran());
  EXPECT_EQ(rejections(), (std::vector<RejectionKind>{RejectionKind::queue_timeout,
                                                      RejectionKind::queue_timeout}));
  EXPECT_EQ(hook_calls(),
            (std::vector<HookCall>{{errc::queue_timeout, 0}, {errc::queue_timeout, 0}}));
  complete_in_turn();
  EXPECT_EQ(started, std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// ---- options ------------------------------------------------------------------------------------

/// The message of the std::invalid_argument that creating a limiter of `o` throws ("" if none).
std::string invalid_argument_of(const ConcurrencyLimitOptions& o) {
  try {
    (void)ConcurrencyLimitStrategy::create(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

TEST(ConcurrencyLimitQueueTimeoutOptions, InvalidTimeoutsThrowAndDescribeNamesTheTimeout) {
  ConcurrencyLimitOptions o;
  o.max_concurrency = 2;
  o.max_queue = 0;
  o.queue_timeout = QueueTimeout::fixed(250ms);
  EXPECT_NE(invalid_argument_of(o).find("queue_timeout"), std::string::npos)
      << "a queue timeout without a queue";
  o.max_queue = 4;
  o.queue_timeout = QueueTimeout::fixed(0ns);
  EXPECT_NE(invalid_argument_of(o).find("max_wait"), std::string::npos);
  o.queue_timeout = QueueTimeout::fixed(-1ms);
  EXPECT_NE(invalid_argument_of(o).find("max_wait"), std::string::npos);
  o.queue_timeout = QueueTimeout::fixed(max_duration + 1ms);
  EXPECT_NE(invalid_argument_of(o).find("max_wait"), std::string::npos);
  o.queue_timeout = QueueTimeout::adaptive(0ns);
  EXPECT_NE(invalid_argument_of(o).find("target"), std::string::npos);
  o.queue_timeout = QueueTimeout::adaptive(5ms, 0ns);
  EXPECT_NE(invalid_argument_of(o).find("interval"), std::string::npos);

  o.queue_timeout = QueueTimeout::fixed(250ms);
  const auto fixed = ConcurrencyLimitStrategy::create(o);
  EXPECT_EQ(fixed->describe(), "ConcurrencyLimit(2, queue 4, queue timeout fixed(250ms))");
  EXPECT_TRUE(fixed->traits().needs_executor);
  o.queue_timeout = QueueTimeout::adaptive();
  EXPECT_EQ(Shield{}.concurrency_limit(o).describe(),
            "ConcurrencyLimit(2, queue 4, queue timeout adaptive(5ms/100ms))");
  o.queue_timeout = QueueTimeout::adaptive(2ms, 1500ms);
  EXPECT_EQ(ConcurrencyLimitStrategy::create(o)->describe(),
            "ConcurrencyLimit(2, queue 4, queue timeout adaptive(2ms/1.5s))");

  // No queue timeout: nothing to validate, nothing described, no executor needed.
  o.queue_timeout = QueueTimeout::none();
  o.priority_generator = [](const Context&) { return 1; };
  const auto plain = ConcurrencyLimitStrategy::create(o);
  EXPECT_EQ(plain->describe(), "ConcurrencyLimit(2, queue 4)");
  EXPECT_FALSE(plain->traits().needs_executor);
  o.max_queue = 0;
  EXPECT_EQ(invalid_argument_of(o), "");
}

}  // namespace
}  // namespace kevlar
