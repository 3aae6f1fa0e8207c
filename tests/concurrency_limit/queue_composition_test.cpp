// The concurrency limit's queue mechanisms (queue-wait timeouts, priorities, displacement) composed
// with the strategies outside it: retry, timeout, fallback and hedging. Each test pins the sequence
// of events the composition emits and the call's outcome, as docs/strategies/concurrency-limit.md
// and docs/load-management.md ("What each one sees of the others") describe them. The permits are
// held by calls through a shield without observers, so that the recorder sees only the execution
// under test. Callback and synchronous executions; time is a ManualClock.
#include "concurrency_limit/limiter_test_support.hpp"

#include <kevlar/concurrency_limit.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/queue_timeout.hpp>
#include <kevlar/testing/event_recorder.hpp>
#include <pending_ops.hpp>
#include <spin_until.hpp>

#include <gtest/gtest.h>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;
using testing::EventRecorder;
using testing::RecordedEvent;

/// CallOptions with only a priority.
CallOptions with_priority(std::int32_t priority) {
  CallOptions o;
  o.priority = priority;
  return o;
}

/// A limiter of `max_concurrency` permits, a queue of `max_queue` and `timeout`.
std::shared_ptr<ConcurrencyLimitStrategy> make_limit(int max_concurrency, int max_queue,
                                                     QueueTimeout timeout = QueueTimeout::none()) {
  ConcurrencyLimitOptions o;
  o.max_concurrency = max_concurrency;
  o.max_queue = max_queue;
  o.queue_timeout = timeout;
  return ConcurrencyLimitStrategy::create(o);
}

RetryOptions retries(int max_retries, Backoff backoff) {
  RetryOptions o;
  o.max_retries = max_retries;
  o.backoff = std::move(backoff);
  return o;
}

HedgeOptions hedges(std::uint32_t max_attempts, Clock::duration delay) {
  HedgeOptions o;
  o.max_attempts = max_attempts;
  o.delay = delay;
  return o;
}

/// The errors these compositions end with, by name.
std::string error_name(const error_code& ec) {
  if (!ec) return "ok";
  if (ec == errc::queue_timeout) return "queue_timeout";
  if (ec == errc::timeout) return "timeout";
  if (ec == errc::concurrency_limit_exceeded) return "concurrency_limit_exceeded";
  if (ec == errc::closed) return "closed";
  if (is_cancellation(ec)) return "operation_aborted";
  return ec.to_string();
}

std::string failure_name(const Failure& f) {
  return f.exception ? "exception" : error_name(f.error);
}

std::string millis(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + "ms";
}

/// One event as these tests spell it: its kind, the fields that tell the compositions apart, and
/// ` @i` for the strategy at index i that emitted it (nothing for the execution's own events).
std::string spell(const RecordedEvent& e) {
  const testing::RecordedDetail& d = e.detail;
  std::string s;
  if (const auto* r = d.get_if<Rejected>()) {
    s = std::string("Rejected(") + to_string(r->kind) + (r->retry_after ? ", retry_after" : "") +
        ")";
  } else if (const auto* l = d.get_if<LimiterStateChanged>()) {
    s = "LimiterStateChanged(running " + std::to_string(l->running) + ", queued " +
        std::to_string(l->queued) + ")";
  } else if (const auto* rs = d.get_if<RetryScheduled>()) {
    s = "RetryScheduled(" + std::to_string(rs->retry) + ", " + millis(rs->delay) + ", " +
        failure_name(rs->failure) + ")";
  } else if (const auto* t = d.get_if<TimeoutFired>()) {
    s = "TimeoutFired(" + millis(t->timeout) + ")";
  } else if (const auto* f = d.get_if<FallbackTaken>()) {
    s = "FallbackTaken(" + failure_name(f->failure) + ")";
  } else if (const auto* h = d.get_if<HedgeLaunched>()) {
    s = "HedgeLaunched(" + std::to_string(h->attempt) + ")";
  } else if (const auto* a = d.get_if<AttemptStarted>()) {
    s = "AttemptStarted(" + std::to_string(a->attempt) + ")";
  } else if (const auto* x = d.get_if<ExecutionFinished>()) {
    s = std::string("ExecutionFinished(") + (x->success ? "ok" : failure_name(x->failure)) + ", " +
        millis(x->duration) + ")";
  } else {
    s = std::string(d.name());
  }
  if (e.strategy_index != EventSource::no_strategy) s += " @" + std::to_string(e.strategy_index);
  return s;
}

/// Every event `recorder` holds, spelled, in order.
std::vector<std::string> sequence_of(const EventRecorder& recorder) {
  std::vector<std::string> out;
  for (const RecordedEvent& e : recorder.events()) out.push_back(spell(e));
  return out;
}

/// ExecutionFinished::attempts of each execution `recorder` saw finish.
std::vector<std::uint32_t> attempts_of(const EventRecorder& recorder) {
  std::vector<std::uint32_t> out;
  for (const ExecutionFinished& f : recorder.events_of<ExecutionFinished>()) {
    out.push_back(f.attempts);
  }
  return out;
}

struct QueueComposition : ::testing::Test {
  /// A user operation that started: the call it belongs to and what its attempt's context said.
  struct Started {
    int id = 0;
    std::uint32_t attempt = 0;  ///< Context::attempt()
    std::int32_t priority = 0;  ///< Context::priority()
  };

  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  std::shared_ptr<EventRecorder> events = std::make_shared<EventRecorder>();
  asio::io_context ioc;
  // The pending operations hold no work of their own: keep the context from running out of work.
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  test::PendingOps ops;            // destroyed before the io_context
  std::vector<Started> started;    // in start order: started[i] is the operation ops.at(i)
  std::map<int, error_code> done;  // id -> how its execution completed
  std::map<int, int> values;       // id -> the value it completed with
  std::map<int, int> completions;  // id -> how many times its handler ran

  /// `s` on the test's clock, observed by the test's recorder.
  [[nodiscard]] Shield observed(const Shield& s) const {
    return s.with_clock(clock).observed_by(events);
  }
  /// A shield of `limiter` alone that nobody observes: the calls that hold its permits or compete
  /// for them.
  [[nodiscard]] Shield unobserved(const std::shared_ptr<ConcurrencyLimitStrategy>& limiter) const {
    return Shield{}.use(limiter).with_clock(clock);
  }

  /// An attempt of call `id` that records its start and its context, then waits in `ops` until
  /// the test completes it.
  auto attempt(int id) {
    return [this, id](auto token) {
      return asio::async_initiate<decltype(token), void(error_code, int)>(
          [this, id](auto handler) {
            Started s;
            s.id = id;
            if (const Context* ctx = attempt_context(handler)) {
              s.attempt = ctx->attempt();
              s.priority = ctx->priority();
            }
            started.push_back(s);
            ops.async_call(std::move(handler));
          },
          token);
    };
  }
  /// Starts call `id` through `s` with CallOptions{priority}.
  void start(const Shield& s, int id, std::int32_t priority = 0) {
    s.execute_async(with_priority(priority), attempt(id),
                    asio::bind_executor(ioc, [this, id](error_code ec, int v) {
                      done[id] = ec;
                      values[id] = v;
                      ++completions[id];
                    }));
  }
  /// Runs the io_context until nothing is ready.
  void settle() {
    for (int round = 0; round < 16; ++round) {
      if (ioc.poll() == 0) return;
    }
  }
  /// Completes the `n`-th operation started (0 first) with `value`, and settles.
  void succeed(std::size_t n, int value = 0) {
    ops.succeed(n, value);
    settle();
  }
  [[nodiscard]] std::vector<int> started_ids() const {
    std::vector<int> ids;
    for (const Started& s : started) ids.push_back(s.id);
    return ids;
  }
  [[nodiscard]] std::vector<std::string> sequence() const { return sequence_of(*events); }
  /// Every execution started by start() completed exactly once.
  void expect_each_completed_once() const {
    for (const auto& [id, n] : completions) EXPECT_EQ(n, 1) << "call " << id;
  }
};

// ---- retry outside the limiter ------------------------------------------------------------------

// docs/load-management.md: errc::queue_timeout is "retried, within the budget" by a retry with the
// default clause; retry(n).concurrency_limit(...) holds no permit (and no queue place) during the
// backoff. The shed pass never started the operation: the retried one is attempt 1.
TEST_F(QueueComposition, ARetryOutsideTriesAShedCallAgainAndItRunsOnceAPermitFrees) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.retry(retries(2, Backoff::constant(20ms))).use(limiter));
  start(unobserved(limiter), 1);  // holds the permit
  start(subject, 2);              // queued at t0: queue deadline t0 + 100ms
  settle();
  ASSERT_EQ(limiter->state().queued, 1u);
  clock->advance(99ms);
  settle();
  EXPECT_TRUE(sequence().empty()) << "shed before its queue deadline";
  clock->advance(1ms);  // t0 + 100ms: shed, retried after 20ms
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "RetryScheduled(1, 20ms, queue_timeout) @0",
                        }));
  EXPECT_EQ(limiter->state().queued, 0u) << "the backoff holds a queue place";
  EXPECT_FALSE(done.count(2));
  clock->advance(20ms);  // t0 + 120ms: the second pass queues, queue deadline t0 + 220ms
  settle();
  EXPECT_EQ(limiter->state().queued, 1u);
  EXPECT_EQ(sequence().size(), 3u);
  clock->advance(30ms);  // t0 + 150ms
  succeed(0, 10);        // the holder's permit goes to the retried pass
  ASSERT_EQ(started_ids(), (std::vector<int>{1, 2}));
  EXPECT_EQ(started[1].attempt, 1u) << "the shed pass counted as an attempt that ran";
  succeed(1, 20);
  ASSERT_TRUE(done.count(2));
  EXPECT_FALSE(done.at(2)) << error_name(done.at(2));
  EXPECT_EQ(values.at(2), 20);
  clock->advance(100ms);  // past the second pass's queue deadline: nothing is left armed
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "RetryScheduled(1, 20ms, queue_timeout) @0",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "AttemptStarted(1)",
                            "LimiterStateChanged(running 0, queued 0) @1",
                            "ExecutionFinished(ok, 150ms)",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// The priority generator runs each time the execution finds no permit, again for a retry's next
// pass, and sees the context's priority as it is then, its own last answer included; a retry
// outside starts the next pass with it. Context::attempt() counts the attempts that have run: a
// pass shed from the queue ran none.
TEST_F(QueueComposition, APriorityGeneratorRunsAgainForTheRetryOfAShedCall) {
  struct Seen {
    std::uint32_t attempt;
    std::int32_t priority;
    bool operator==(const Seen&) const = default;
  };
  std::vector<Seen> seen;  // what the generator saw, call after call (all on this thread)
  ConcurrencyLimitOptions o;
  o.max_concurrency = 1;
  o.max_queue = 4;
  o.queue_timeout = QueueTimeout::fixed(100ms);
  o.priority_generator = [&seen](const Context& ctx) {
    seen.push_back({ctx.attempt(), ctx.priority()});
    return ctx.priority() + 1;
  };
  auto limiter = ConcurrencyLimitStrategy::create(o);
  const Shield subject = observed(Shield{}.retry(retries(2, Backoff::none())).use(limiter));
  const Shield others = unobserved(limiter);
  start(others, 1);   // takes the free permit: no generator
  start(subject, 2);  // generated 1, queued at t0
  settle();
  clock->advance(50ms);
  start(others, 3);  // generated 1, queued behind the subject (deadline t0 + 150ms)
  settle();
  clock->advance(50ms);  // t0 + 100ms: the subject is shed and retried at once, generated 2
  settle();
  EXPECT_EQ(seen, (std::vector<Seen>{{0, 0}, {0, 0}, {0, 1}}));
  EXPECT_EQ(limiter->state().queued, 2u);
  clock->advance(20ms);  // t0 + 120ms
  succeed(0, 10);        // the permit goes to the subject, now ahead of call 3
  ASSERT_EQ(started_ids(), (std::vector<int>{1, 2}));
  EXPECT_EQ(started[1].priority, 2);
  succeed(1, 20);  // and then to call 3
  ASSERT_EQ(started_ids(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(started[2].priority, 1);
  succeed(2, 30);
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 1) @1",
                            "RetryScheduled(1, 0ms, queue_timeout) @0",
                            "LimiterStateChanged(running 1, queued 1) @1",
                            "AttemptStarted(1)",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "ExecutionFinished(ok, 120ms)",
                        }));
  EXPECT_EQ(seen.size(), 3u) << "a granted call asks the generator nothing more";
  for (int id = 1; id <= 3; ++id) EXPECT_FALSE(done.at(id)) << "call " << id;
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// ---- timeout outside the limiter ----------------------------------------------------------------

// The outer timeout's deadline comes before the queue deadline: the limiter arms nothing, the
// deadline ends the wait as a cancellation, and the timeout reports errc::timeout with its own
// event; none of the limiter's.
TEST_F(QueueComposition, AnOuterTimeoutThatComesFirstEndsTheWaitAsATimeout) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.timeout(50ms).use(limiter));
  start(unobserved(limiter), 1);
  start(subject, 2);
  settle();
  clock->advance(49ms);
  settle();
  EXPECT_FALSE(done.count(2));
  clock->advance(1ms);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::timeout) << error_name(done.at(2));
  clock->advance(100ms);  // past the queue deadline, which was never armed
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "TimeoutFired(50ms) @0",
                            "ExecutionFinished(timeout, 50ms)",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{0});
  EXPECT_EQ(limiter->state().queued, 0u);
  succeed(0);
  EXPECT_EQ(started_ids(), std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// "When the context's deadline (an outer timeout's budget) is at or before the queue deadline,
// the limiter arms nothing": at equal deadlines the timeout reports.
TEST_F(QueueComposition, AnOuterTimeoutDueWithTheQueueDeadlineReportsTheTimeout) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.timeout(100ms).use(limiter));
  start(unobserved(limiter), 1);
  start(subject, 2);
  settle();
  clock->advance(100ms);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::timeout) << error_name(done.at(2));
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "TimeoutFired(100ms) @0",
                            "ExecutionFinished(timeout, 100ms)",
                        }));
  succeed(0);
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// The converse: the queue deadline comes first, so the limiter sheds the call with
// errc::queue_timeout (a rejection), and the timeout, whose deadline passes later, fires nothing.
TEST_F(QueueComposition, AQueueTimeoutThatComesFirstIsTheLimitersRejectionNotATimeout) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.timeout(200ms).use(limiter));
  start(unobserved(limiter), 1);
  start(subject, 2);
  settle();
  clock->advance(99ms);
  settle();
  EXPECT_FALSE(done.count(2));
  clock->advance(1ms);
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::queue_timeout) << error_name(done.at(2));
  clock->advance(200ms);  // past the timeout's deadline
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "ExecutionFinished(queue_timeout, 100ms)",
                        }));
  EXPECT_EQ(events->count_of<TimeoutFired>(), 0u);
  succeed(0);
  EXPECT_EQ(started_ids(), std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// timeout(total).retry(...).concurrency_limit(...): the retried pass queues again, its queue
// deadline lies past the total deadline (nothing armed), and the total timeout's expiry ends the
// wait: the retry stops and the timeout reports.
TEST_F(QueueComposition, ATotalTimeoutEndsTheQueueWaitOfARetriedPass) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject =
      observed(Shield{}.timeout(150ms).retry(retries(2, Backoff::none())).use(limiter));
  start(unobserved(limiter), 1);
  start(subject, 2);
  settle();
  clock->advance(100ms);  // shed, retried at once: queued again (queue deadline t0 + 200ms)
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @2",
                            "LimiterStateChanged(running 1, queued 0) @2",
                            "RetryScheduled(1, 0ms, queue_timeout) @1",
                        }));
  EXPECT_EQ(limiter->state().queued, 1u);
  EXPECT_FALSE(done.count(2));
  clock->advance(50ms);  // the total deadline
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::timeout) << error_name(done.at(2));
  clock->advance(100ms);
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @2",
                            "LimiterStateChanged(running 1, queued 0) @2",
                            "RetryScheduled(1, 0ms, queue_timeout) @1",
                            "TimeoutFired(150ms) @0",
                            "ExecutionFinished(timeout, 150ms)",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{0});
  EXPECT_EQ(limiter->state().queued, 0u);
  succeed(0);
  EXPECT_EQ(started_ids(), std::vector<int>{1});
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// The same, with a backoff that would end past the total deadline: the retry does not start it,
// and the shed call's errc::queue_timeout surfaces at once.
TEST_F(QueueComposition, ARetryWhoseBackoffPassesTheTotalDeadlineSurfacesTheQueueTimeout) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject =
      observed(Shield{}.timeout(150ms).retry(retries(2, Backoff::constant(60ms))).use(limiter));
  start(unobserved(limiter), 1);
  start(subject, 2);
  settle();
  clock->advance(100ms);  // shed at t0 + 100ms; t0 + 160ms is past the total deadline
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_EQ(done.at(2), errc::queue_timeout) << error_name(done.at(2));
  clock->advance(100ms);
  settle();
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @2",
                            "LimiterStateChanged(running 1, queued 0) @2",
                            "ExecutionFinished(queue_timeout, 100ms)",
                        }));
  succeed(0);
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// ---- fallback outside the limiter ---------------------------------------------------------------

// A call displaced from the full queue by a call of higher priority fails as a rejection
// (errc::concurrency_limit_exceeded, the Rejected event), which the fallback outside replaces.
TEST_F(QueueComposition, AFallbackRecoversACallDisplacedFromTheQueue) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.fallback(-1).use(limiter));
  const Shield others = unobserved(limiter);
  start(others, 1);      // holds the permit
  start(subject, 2, 0);  // queued at t0
  settle();
  clock->advance(10ms);
  start(others, 3, 1);  // takes the subject's place
  EXPECT_FALSE(done.count(2)) << "the displaced call completed inside the newcomer's call";
  settle();
  ASSERT_TRUE(done.count(2));
  EXPECT_FALSE(done.at(2)) << error_name(done.at(2));
  EXPECT_EQ(values.at(2), -1) << "the fallback's value";
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(concurrency_limit) @1",
                            "LimiterStateChanged(running 1, queued 1) @1",
                            "FallbackTaken(concurrency_limit_exceeded) @0",
                            "ExecutionFinished(ok, 10ms)",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{0});
  clock->advance(90ms);  // the subject's queue deadline: it left with the subject
  settle();
  EXPECT_EQ(sequence().size(), 4u);
  EXPECT_FALSE(done.count(3));
  succeed(0);  // the newcomer runs
  ASSERT_EQ(started_ids(), (std::vector<int>{1, 3}));
  succeed(1);
  EXPECT_FALSE(done.at(3));
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// A synchronous execute queues on the same limiter and honours the same queue-wait timeout: at
// its queue deadline it leaves the queue, never runs, and the fallback outside replaces the
// errc::queue_timeout.
TEST_F(QueueComposition, AFallbackRecoversASynchronousCallShedFromTheQueue) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.fallback(-1).use(limiter));
  start(unobserved(limiter), 1);  // an asynchronous call holds the permit
  settle();
  std::atomic<bool> ran{false};
  std::optional<int> value;
  std::optional<error_code> thrown;
  {
    std::jthread caller([&](std::stop_token stop) {
      try {
        value = subject.execute(
            [&ran] {
              ran = true;
              return 7;
            },
            std::move(stop));
      } catch (const Error& e) {
        thrown = e.error();
      }
    });
    clock->wait_for_sleepers(1);  // queued, asleep until its queue deadline
    EXPECT_EQ(limiter->state().queued, 1u);
    clock->advance(99ms);
    EXPECT_EQ(limiter->state().queued, 1u) << "left the queue before its deadline";
    clock->advance(1ms);
    caller.join();  // before the destructor could request a stop
  }
  EXPECT_FALSE(thrown.has_value()) << error_name(*thrown);
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(*value, -1) << "the fallback's value";
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "FallbackTaken(queue_timeout) @0",
                            "ExecutionFinished(ok, 100ms)",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{0});
  succeed(0);
  EXPECT_EQ(started_ids(), std::vector<int>{1});
  test::expect_at_rest(*limiter, 1);
}

// ---- synchronous executions ---------------------------------------------------------------------

// The synchronous analogue of the retry composition: the blocked caller is shed at its queue
// deadline, the retry queues it again at once, and the release of the permit wakes it.
TEST_F(QueueComposition, ARetryOutsideTriesAShedSynchronousCallAgain) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.retry(retries(2, Backoff::none())).use(limiter));
  start(unobserved(limiter), 1);  // an asynchronous call holds the permit
  settle();
  std::atomic<std::uint32_t> attempt_seen{0};
  std::optional<Outcome<int>> result;
  {
    std::jthread caller([&](std::stop_token stop) {
      result = subject.execute_outcome(
          [&attempt_seen](Context& ctx) {
            attempt_seen = ctx.attempt();
            return 7;
          },
          std::move(stop));
    });
    clock->wait_for_sleepers(1);  // the first pass, queued at t0
    clock->advance(100ms);        // shed; the second pass queues at t0 + 100ms
    // The first pass has woken (it recorded the rejection) when the retry is scheduled: the
    // sleeper counted next is the second pass.
    ASSERT_TRUE(events->wait_for_count(3));
    ASSERT_TRUE(test::spin_until([&] { return limiter->state().queued == 1; }));
    clock->wait_for_sleepers(1);
    EXPECT_EQ(sequence(), (std::vector<std::string>{
                              "Rejected(queue_timeout) @1",
                              "LimiterStateChanged(running 1, queued 0) @1",
                              "RetryScheduled(1, 0ms, queue_timeout) @0",
                          }));
    clock->advance(50ms);  // t0 + 150ms, before the second pass's queue deadline
    succeed(0);            // the release hands the permit to the sleeping caller
    caller.join();
  }
  ASSERT_TRUE(result.has_value());
  ASSERT_TRUE(result->has_value()) << error_name(result->error());
  EXPECT_EQ(result->value(), 7);
  EXPECT_EQ(attempt_seen.load(), 1u);
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "RetryScheduled(1, 0ms, queue_timeout) @0",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "AttemptStarted(1)",
                            "LimiterStateChanged(running 0, queued 0) @1",
                            "ExecutionFinished(ok, 150ms)",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{1});
  test::expect_at_rest(*limiter, 1);
}

// A synchronous wait inside an outer timeout ends at whichever deadline comes first, and the error
// and the events say which: the timeout's (errc::timeout, TimeoutFired) or the limiter's
// (errc::queue_timeout, Rejected).
TEST_F(QueueComposition, ASynchronousWaitEndsAtWhicheverDeadlineComesFirst) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  start(unobserved(limiter), 1);  // an asynchronous call holds the permit
  settle();
  const auto run = [&](Clock::duration budget, Clock::duration wait,
                       const std::shared_ptr<EventRecorder>& recorder) {
    const Shield subject =
        Shield{}.timeout(budget).use(limiter).with_clock(clock).observed_by(recorder);
    std::atomic<bool> ran{false};
    std::optional<Outcome<int>> result;
    {
      std::jthread caller([&](std::stop_token stop) {
        result = subject.execute_outcome(
            [&ran] {
              ran = true;
              return 7;
            },
            std::move(stop));
      });
      clock->wait_for_sleepers(1);
      clock->advance(wait - 1ms);
      EXPECT_EQ(limiter->state().queued, 1u) << "left the queue before its deadline";
      clock->advance(1ms);
      caller.join();  // before the destructor could request a stop
    }
    EXPECT_FALSE(ran.load());
    EXPECT_EQ(limiter->state().queued, 0u);
    return result;
  };

  const auto timed_out = std::make_shared<EventRecorder>();
  const std::optional<Outcome<int>> first = run(50ms, 50ms, timed_out);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(first->has_error());
  EXPECT_EQ(first->error(), errc::timeout) << error_name(first->error());
  EXPECT_EQ(sequence_of(*timed_out), (std::vector<std::string>{
                                         "TimeoutFired(50ms) @0",
                                         "ExecutionFinished(timeout, 50ms)",
                                     }));

  const auto shed = std::make_shared<EventRecorder>();
  const std::optional<Outcome<int>> second = run(200ms, 100ms, shed);
  ASSERT_TRUE(second.has_value());
  ASSERT_TRUE(second->has_error());
  EXPECT_EQ(second->error(), errc::queue_timeout) << error_name(second->error());
  EXPECT_EQ(sequence_of(*shed), (std::vector<std::string>{
                                    "Rejected(queue_timeout) @1",
                                    "LimiterStateChanged(running 1, queued 0) @1",
                                    "ExecutionFinished(queue_timeout, 100ms)",
                                }));
  EXPECT_EQ(attempts_of(*timed_out), std::vector<std::uint32_t>{0});
  EXPECT_EQ(attempts_of(*shed), std::vector<std::uint32_t>{0});
  succeed(0);
  EXPECT_EQ(started_ids(), std::vector<int>{1});
  test::expect_at_rest(*limiter, 1);
}

// ---- hedging outside the limiter ----------------------------------------------------------------

// A hedged attempt that waits in the queue and is shed by the queue timeout is a handled failure
// of that attempt only: the execution goes on with the primary, whose success is the outcome.
TEST_F(QueueComposition, AHedgedAttemptShedFromTheQueueDoesNotFailTheExecution) {
  auto limiter = make_limit(1, 1, QueueTimeout::fixed(100ms));
  const Shield subject = observed(Shield{}.hedge(hedges(2, 10ms)).use(limiter));
  start(subject, 1);  // the primary takes the permit
  settle();
  ASSERT_EQ(started_ids(), std::vector<int>{1});
  clock->advance(10ms);  // the hedge launches attempt 2, which queues (queue deadline t0 + 110ms)
  settle();
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(99ms);
  settle();
  EXPECT_EQ(limiter->state().queued, 1u);
  clock->advance(1ms);  // t0 + 110ms: the hedged attempt is shed
  settle();
  EXPECT_FALSE(done.count(1)) << "the shed hedge ended the execution";
  EXPECT_EQ(limiter->state().queued, 0u);
  succeed(0, 10);  // the primary wins
  ASSERT_TRUE(done.count(1));
  EXPECT_FALSE(done.at(1)) << error_name(done.at(1));
  EXPECT_EQ(values.at(1), 10);
  EXPECT_EQ(started_ids(), std::vector<int>{1}) << "the shed attempt reached the operation";
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "AttemptStarted(1)",
                            "HedgeLaunched(2) @0",
                            "Rejected(queue_timeout) @1",
                            "LimiterStateChanged(running 1, queued 0) @1",
                            "LimiterStateChanged(running 0, queued 0) @1",
                            "ExecutionFinished(ok, 110ms)",
                        }));
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 1);
}

// Hedged attempts start with the priority of the execution that launched them, and queue with it:
// the hedge goes ahead of a call of lower priority that queued before it.
TEST_F(QueueComposition, AHedgedAttemptQueuesWithTheExecutionsPriority) {
  auto limiter = make_limit(2, 4);
  const Shield subject = observed(Shield{}.hedge(hedges(2, 10ms)).use(limiter));
  const Shield others = unobserved(limiter);
  start(others, 1);      // holds a permit
  start(others, 2);      // holds the other
  start(subject, 3, 5);  // the primary queues at priority 5
  start(others, 4, 1);   // queues behind it, at priority 1
  settle();
  ASSERT_EQ(limiter->state().queued, 2u);
  clock->advance(10ms);  // the hedge launches attempt 2: it queues ahead of call 4
  settle();
  EXPECT_EQ(limiter->state().queued, 3u);
  succeed(0);  // the first permit goes to the primary
  succeed(1);  // the second to the hedge, not to call 4
  ASSERT_EQ(started_ids(), (std::vector<int>{1, 2, 3, 3}));
  EXPECT_EQ(started[2].attempt, 1u);
  EXPECT_EQ(started[2].priority, 5);
  EXPECT_EQ(started[3].attempt, 2u);
  EXPECT_EQ(started[3].priority, 5) << "the hedged attempt's context lost the priority";
  EXPECT_EQ(limiter->state().queued, 1u);
  succeed(3, 33);  // the hedge wins: the primary is cancelled and gives its permit back
  ASSERT_TRUE(done.count(3));
  EXPECT_FALSE(done.at(3)) << error_name(done.at(3));
  EXPECT_EQ(values.at(3), 33);
  EXPECT_FALSE(ops.at(2).cancellations.empty()) << "the losing primary was not cancelled";
  EXPECT_EQ(sequence(), (std::vector<std::string>{
                            "HedgeLaunched(2) @0",
                            "LimiterStateChanged(running 2, queued 2) @1",
                            "AttemptStarted(1)",
                            "LimiterStateChanged(running 2, queued 1) @1",
                            "AttemptStarted(2)",
                            "LimiterStateChanged(running 2, queued 0) @1",
                            "ExecutionFinished(ok, 10ms)",
                            "LimiterStateChanged(running 1, queued 0) @1",
                        }));
  EXPECT_EQ(attempts_of(*events), std::vector<std::uint32_t>{2});
  ASSERT_EQ(started_ids(), (std::vector<int>{1, 2, 3, 3, 4}));
  succeed(4);
  for (int id : {1, 2, 4}) EXPECT_FALSE(done.at(id)) << "call " << id;
  expect_each_completed_once();
  test::expect_at_rest(*limiter, 2);
}

}  // namespace
}  // namespace kevlar
