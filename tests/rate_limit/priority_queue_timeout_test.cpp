// Priorities and queue-wait timeouts in the rate limit's queue, on a real io_context and a
// ManualClock: the calls waiting for the turn are served by priority behind the call holding it,
// a full queue gives the place of its newest lowest waiter to a higher newcomer without changing
// the schedule, and a fixed queue timeout ends asynchronous and synchronous waits alike.
#include "core/async_ops.hpp"

#include <pending_ops.hpp>

#include <kevlar/queue_timeout.hpp>
#include <kevlar/rate_limit.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;
using Ids = std::vector<std::string>;

/// How one execution went.
struct Result {
  std::optional<Clock::duration> started;      ///< when its operation started (from the start)
  std::optional<error_code> ec;                ///< how it completed (empty: not yet)
  std::optional<Clock::duration> retry_after;  ///< a coroutine's Error::retry_after()
};

/// What the rejection hook saw.
struct HookCall {
  std::int32_t priority = 0;  ///< the rejected execution's Context::priority()
  Clock::duration retry_after{};
  errc reason = errc::rate_limited;
};

asio::awaitable<int> one() {
  co_return 1;
}

struct RateLimitQueue : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();  // outlives the io_context
  const Clock::time_point t0 = clock->now();
  // What the calls and the hook record: outlives every execution.
  std::mutex mutex;  ///< guards `hooks`, and `order` and `results` for synchronous calls
  std::map<std::string, Result> results;
  Ids order;  ///< the calls whose operation started, in order
  std::vector<HookCall> hooks;
  asio::io_context ioc;
  test::PendingOps ops;  // destroyed before the io_context, as the limiter and the shields are
  std::shared_ptr<testing::EventRecorder> events = std::make_shared<testing::EventRecorder>();
  std::shared_ptr<RateLimitStrategy> limiter;
  Shield shield;

  /// One permit per 100 ms, a burst of one, `queue` places and `timeout`; the rejection hook
  /// records into `hooks`.
  RateLimitOptions options(int queue, QueueTimeout timeout = QueueTimeout::none()) {
    RateLimitOptions o;
    o.permits = 1;
    o.window = 100ms;
    o.queue_limit = queue;
    o.queue_timeout = timeout;
    o.on_rejected = [this](const RateLimitRejectedEvent& e) {
      const std::lock_guard lock(mutex);
      hooks.push_back({e.context.priority(), e.retry_after, e.reason});
    };
    return o;
  }
  void make(RateLimitOptions o) {
    limiter = RateLimitStrategy::create(std::move(o));
    shield = on(Shield{});
  }
  /// `outer` followed by the limiter, on the clock, observed by the recorder.
  Shield on(const Shield& outer) const {
    return outer.use(limiter).with_clock(clock).observed_by(events);
  }

  void poll() {
    ioc.restart();
    ioc.poll();
  }
  void advance(Clock::duration d) {
    clock->advance(d);
    poll();
  }
  [[nodiscard]] RateLimitState state() const { return limiter->state(*clock); }
  [[nodiscard]] std::vector<Rejected> rejections() const { return events->events_of<Rejected>(); }

  Result& fresh(const std::string& id) {
    auto [it, inserted] = results.try_emplace(id);
    EXPECT_TRUE(inserted) << id << " started twice";
    return it->second;
  }
  void note_start(const std::string& id, Result& r) {
    const std::lock_guard lock(mutex);
    r.started = clock->now() - t0;
    order.push_back(id);
  }

  /// Starts call `id` through `s` (with CallOptions{priority} if a priority is given) with an
  /// operation that completes at once, and runs what is ready.
  Result& start_on(const Shield& s, const std::string& id,
                   std::optional<std::int32_t> priority = {}) {
    Result& r = fresh(id);
    launch(s, priority, r, [this, id, &r](auto token) {
      note_start(id, r);
      return test::async_answer(ioc.get_executor(), error_code(), 1, std::move(token));
    });
    return r;
  }
  Result& start(const std::string& id, std::optional<std::int32_t> priority = {}) {
    return start_on(shield, id, priority);
  }
  /// As start(), with an operation that stays pending (in `ops`) until the test completes it.
  Result& start_pending(const std::string& id) {
    Result& r = fresh(id);
    launch(shield, std::nullopt, r, [this, id, &r](auto token) {
      note_start(id, r);
      return ops.async_call(std::move(token));
    });
    return r;
  }
  template <class Attempt>
  void launch(const Shield& s, std::optional<std::int32_t> priority, Result& r, Attempt attempt) {
    auto done = asio::bind_executor(ioc, [&r](error_code ec, int) { r.ec = ec; });
    if (priority) {
      s.execute_async(CallOptions{.priority = *priority}, std::move(attempt), std::move(done));
    } else {
      s.execute_async(std::move(attempt), std::move(done));
    }
    poll();
  }
  /// Starts call `id` as a coroutine at `priority`: a rejection reaches it as a kevlar::Error,
  /// whose code and retry-after the result keeps.
  Result& start_coroutine(const std::string& id, std::int32_t priority) {
    Result& r = fresh(id);
    shield.execute_async(
        CallOptions{.priority = priority},
        [this, id, &r] {
          note_start(id, r);
          return one();
        },
        asio::bind_executor(ioc, [&r](std::exception_ptr e, int) {
          r.ec = error_code();
          if (!e) return;
          try {
            std::rethrow_exception(e);
          } catch (const Error& error) {
            r.ec = error.error();
            r.retry_after = error.retry_after();
          } catch (...) {
            ADD_FAILURE() << "not a kevlar::Error";
          }
        }));
    poll();
    return r;
  }

  /// Runs `id` synchronously on the calling thread (a test's std::thread) with
  /// CallOptions{priority} if a priority is given; its function records its start.
  Outcome<int> execute(const std::string& id, std::optional<std::int32_t> priority = {}) {
    Result* r = nullptr;
    {
      const std::lock_guard lock(mutex);
      r = &fresh(id);
    }
    const auto fn = [this, id, r] {
      note_start(id, *r);
      return 1;
    };
    if (priority) return shield.execute_outcome(CallOptions{.priority = *priority}, fn);
    return shield.execute_outcome(fn);
  }
};

TEST_F(RateLimitQueue, CallsWaitingForTheTurnRunByPriorityBehindTheCallHoldingIt) {
  make(options(4));
  start("X");     // takes the burst
  start("A");     // holds the turn: waits for its due time (100 ms)
  start("B", 0);  // A, B, C and D hold reservations due at 100, 200, 300 and 400 ms
  start("C", 5);
  start("D", 9);
  EXPECT_EQ(order, Ids{"X"});
  EXPECT_EQ(state().queued, 4u);
  const std::vector<std::pair<std::string, Clock::duration>> expected{
      {"A", 100ms}, {"D", 200ms}, {"C", 300ms}, {"B", 400ms}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    advance(99ms);
    EXPECT_EQ(order.size(), i + 1) << "a call ran early: " << order.back();
    advance(1ms);
    ASSERT_EQ(order.size(), i + 2) << expected[i].first;
    EXPECT_EQ(order.back(), expected[i].first);
    EXPECT_EQ(results[expected[i].first].started, expected[i].second) << expected[i].first;
  }
  EXPECT_EQ(order, (Ids{"X", "A", "D", "C", "B"}));
  for (const auto& [id, r] : results) EXPECT_EQ(r.ec, error_code()) << id;
  EXPECT_EQ(state().queued, 0u);
  EXPECT_TRUE(rejections().empty());
  EXPECT_TRUE(hooks.empty());
}

TEST_F(RateLimitQueue, AFullQueueGivesTheNewestLowerWaitersPlaceToAHigherNewcomer) {
  make(options(2));
  start("X");
  Result& a = start("A", 0);            // holds the turn, due at 100 ms
  Result& b = start_coroutine("B", 0);  // waits for the turn, due at 200 ms
  advance(40ms);
  ASSERT_EQ(state().queued, 2u) << "the queue is full";
  ASSERT_TRUE(rejections().empty());

  Result& c = start("C", 1);
  // B gives its reservation back and C takes one: X, A and C are served at 0, 100 and 200 ms, so
  // a newcomer would be served at 300 ms, 260 ms from now.
  ASSERT_TRUE(b.ec.has_value());
  EXPECT_EQ(*b.ec, errc::rate_limited);
  EXPECT_EQ(b.retry_after, std::optional<Clock::duration>(260ms));
  EXPECT_FALSE(b.started);
  std::vector<Rejected> rejected = rejections();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].kind, RejectionKind::rate_limit);
  EXPECT_EQ(rejected[0].retry_after, std::optional<Clock::duration>(260ms));
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].priority, 0);
  EXPECT_EQ(hooks[0].retry_after, 260ms);
  EXPECT_EQ(hooks[0].reason, errc::rate_limited);
  EXPECT_FALSE(a.ec);
  EXPECT_FALSE(c.ec);
  EXPECT_EQ(state().queued, 2u) << "A and C";

  // A newcomer of C's priority displaces nobody: rejected at once, with the same debt.
  Result& d = start("D", 1);
  ASSERT_TRUE(d.ec.has_value());
  EXPECT_EQ(*d.ec, errc::rate_limited);
  EXPECT_FALSE(c.ec) << "C keeps its place";
  rejected = rejections();
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[1].retry_after, std::optional<Clock::duration>(260ms));
  ASSERT_EQ(hooks.size(), 2u);
  EXPECT_EQ(hooks[1].priority, 1);
  EXPECT_EQ(hooks[1].retry_after, 260ms);
  EXPECT_EQ(hooks[1].reason, errc::rate_limited);

  advance(60ms);
  EXPECT_EQ(a.started, 100ms);
  advance(99ms);
  EXPECT_FALSE(c.started);
  advance(1ms);
  EXPECT_EQ(c.started, 200ms) << "C runs when B would have: the schedule is unchanged";
  EXPECT_EQ(order, (Ids{"X", "A", "C"}));
  EXPECT_EQ(c.ec, error_code());
  EXPECT_EQ(state().queued, 0u);
  EXPECT_EQ(hooks.size(), 2u);
}

TEST_F(RateLimitQueue, TheCallHoldingTheTurnIsPassedOverForTheWaiterBelowTheNewcomer) {
  make(options(2));
  start("X");
  Result& a = start("A", 0);  // the lowest priority, but it holds the turn
  Result& b = start("B", 3);
  Result& c = start("C", 5);
  ASSERT_TRUE(b.ec.has_value());
  EXPECT_EQ(*b.ec, errc::rate_limited);
  EXPECT_FALSE(a.ec) << "the call holding the turn keeps it";
  EXPECT_FALSE(c.ec);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].priority, 3);
  EXPECT_EQ(hooks[0].retry_after, 300ms) << "X, A and C are served at 0, 100 and 200 ms";
  advance(100ms);
  EXPECT_EQ(a.started, 100ms);
  advance(100ms);
  EXPECT_EQ(c.started, 200ms);
  EXPECT_EQ(order, (Ids{"X", "A", "C"}));
  EXPECT_EQ(state().queued, 0u);
}

TEST_F(RateLimitQueue, AHigherNewcomerIsRejectedWhenOnlyTheCallHoldingTheTurnQueues) {
  make(options(1));
  start("X");
  Result& a = start("A", 0);  // holds the turn; the queue is full
  Result& c = start("C", 9);
  ASSERT_TRUE(c.ec.has_value());
  EXPECT_EQ(*c.ec, errc::rate_limited);
  EXPECT_FALSE(a.ec);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].priority, 9);
  EXPECT_EQ(hooks[0].retry_after, 200ms);
  const std::vector<Rejected> rejected = rejections();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].kind, RejectionKind::rate_limit);
  EXPECT_EQ(state().queued, 1u);
  advance(100ms);
  EXPECT_EQ(a.started, 100ms);
  EXPECT_EQ(a.ec, error_code());
  EXPECT_EQ(order, (Ids{"X", "A"}));
  EXPECT_EQ(state().queued, 0u);
}

TEST_F(RateLimitQueue, AQueuedCallTimesOutAtExactlyMaxWaitAndGivesItsReservationBack) {
  make(options(2, QueueTimeout::fixed(150ms)));
  start("X");
  Result& a = start("A");  // due at 100 ms
  Result& b = start("B");  // due at 200 ms, past its queue deadline (150 ms)
  advance(100ms);
  EXPECT_EQ(a.started, 100ms);
  advance(50ms - 1ns);
  EXPECT_FALSE(b.ec) << "still waiting 1 ns before its queue deadline";
  EXPECT_EQ(state().queued, 1u);
  advance(1ns);
  ASSERT_TRUE(b.ec.has_value());
  EXPECT_EQ(*b.ec, errc::queue_timeout);
  EXPECT_FALSE(b.started);
  EXPECT_EQ(state().queued, 0u);
  const std::vector<Rejected> rejected = rejections();
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].kind, RejectionKind::queue_timeout);
  EXPECT_FALSE(rejected[0].retry_after.has_value());
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].reason, errc::queue_timeout);
  EXPECT_EQ(hooks[0].retry_after, 0ns);

  // B's reservation went back: a newcomer is due at 200 ms (B's slot), not 300 ms.
  Result& n = start("N");
  EXPECT_EQ(state().queued, 1u);
  advance(50ms - 1ns);
  EXPECT_FALSE(n.started);
  advance(1ns);
  EXPECT_EQ(n.started, 200ms);
  EXPECT_EQ(n.ec, error_code());
  EXPECT_EQ(order, (Ids{"X", "A", "N"}));
}

TEST_F(RateLimitQueue, TheCallHoldingTheTurnAndOneWaitingForItBothTimeOut) {
  make(options(2, QueueTimeout::fixed(50ms)));
  start("X");
  Result& a = start("A");  // holds the turn, due at 100 ms
  Result& b = start("B");  // waits for the turn, due at 200 ms
  advance(50ms - 1ns);
  EXPECT_FALSE(a.ec);
  EXPECT_FALSE(b.ec);
  advance(1ns);
  ASSERT_TRUE(a.ec.has_value());
  ASSERT_TRUE(b.ec.has_value());
  EXPECT_EQ(*a.ec, errc::queue_timeout);
  EXPECT_EQ(*b.ec, errc::queue_timeout);
  EXPECT_EQ(order, Ids{"X"});
  EXPECT_EQ(state().queued, 0u);
  const std::vector<Rejected> rejected = rejections();
  ASSERT_EQ(rejected.size(), 2u);
  for (const Rejected& r : rejected) EXPECT_EQ(r.kind, RejectionKind::queue_timeout);
  ASSERT_EQ(hooks.size(), 2u);
  for (const HookCall& h : hooks) EXPECT_EQ(h.reason, errc::queue_timeout);

  // Both reservations and the turn went back: a newcomer is due at 100 ms, as A was.
  advance(10ms);
  Result& n = start("N");
  advance(40ms - 1ns);
  EXPECT_FALSE(n.started);
  advance(1ns);
  EXPECT_EQ(n.started, 100ms);
  EXPECT_EQ(n.ec, error_code());
}

TEST_F(RateLimitQueue, SynchronousCallsTimeOutOnTheirThreadsAndNothingRuns) {
  make(options(2, QueueTimeout::fixed(80ms)));
  EXPECT_EQ(execute("X").value(), 1);
  std::optional<Outcome<int>> head;
  std::optional<Outcome<int>> waiting;
  std::atomic<int> finished{0};
  std::thread h([&] {
    head = execute("H");  // holds the turn: sleeps until its queue deadline (due at 100 ms)
    finished.fetch_add(1);
  });
  clock->wait_for_sleepers(1);
  std::thread w([&] {
    waiting = execute("W", 0);  // waits for the turn until its queue deadline
    finished.fetch_add(1);
  });
  clock->wait_for_sleepers(2);
  advance(80ms - 1ns);
  EXPECT_EQ(clock->sleepers(), 2u);
  EXPECT_EQ(finished.load(), 0) << "both still wait 1 ns before their queue deadline";
  advance(1ns);
  h.join();
  w.join();
  ASSERT_TRUE(head.has_value() && waiting.has_value());
  EXPECT_EQ(head->error(), errc::queue_timeout);
  EXPECT_EQ(waiting->error(), errc::queue_timeout);
  EXPECT_FALSE(head->retry_after().has_value());
  EXPECT_FALSE(waiting->retry_after().has_value());
  EXPECT_EQ(order, Ids{"X"}) << "nothing ran";
  EXPECT_EQ(state().queued, 0u);
  ASSERT_EQ(hooks.size(), 2u);
  for (const HookCall& hook : hooks) EXPECT_EQ(hook.reason, errc::queue_timeout);
  const std::vector<Rejected> rejected = rejections();
  ASSERT_EQ(rejected.size(), 2u);
  for (const Rejected& r : rejected) EXPECT_EQ(r.kind, RejectionKind::queue_timeout);

  // The reservations went back: a newcomer is due at 100 ms, as H was.
  std::thread n([&] { EXPECT_EQ(execute("N").value(), 1); });
  clock->wait_for_sleepers(1);
  clock->advance(20ms);
  n.join();
  EXPECT_EQ(results["N"].started, 100ms);
  EXPECT_EQ(order, (Ids{"X", "N"}));
}

TEST_F(RateLimitQueue, SynchronousCallsWaitingForTheTurnRunByPriority) {
  // With a queue timeout (far away), a synchronous call waiting for the turn sleeps on the clock:
  // ManualClock::sleepers() tells when it has queued.
  make(options(3, QueueTimeout::fixed(10s)));
  EXPECT_EQ(execute("X").value(), 1);
  std::thread h([&] { EXPECT_EQ(execute("H").value(), 1); });  // holds the turn
  clock->wait_for_sleepers(1);
  std::thread l([&] { EXPECT_EQ(execute("L").value(), 1); });
  clock->wait_for_sleepers(2);
  std::thread m([&] { EXPECT_EQ(execute("M", 5).value(), 1); });
  clock->wait_for_sleepers(3);
  EXPECT_EQ(state().queued, 3u);
  clock->advance(100ms);
  h.join();  // H ran, and handed the turn to M
  clock->wait_for_sleepers(2);
  clock->advance(100ms);
  m.join();
  clock->wait_for_sleepers(1);
  clock->advance(100ms);
  l.join();
  EXPECT_EQ(order, (Ids{"X", "H", "M", "L"}));
  EXPECT_EQ(results["H"].started, 100ms);
  EXPECT_EQ(results["M"].started, 200ms);
  EXPECT_EQ(results["L"].started, 300ms);
  EXPECT_EQ(state().queued, 0u);
  EXPECT_TRUE(hooks.empty());
}

TEST_F(RateLimitQueue, ACallDueBeforeItsQueueDeadlineRunsAndIsNotTimedOutAfterwards) {
  make(options(1, QueueTimeout::fixed(150ms)));
  start("X");
  Result& a = start_pending("A");  // due at 100 ms, queue deadline at 150 ms
  advance(99ms);
  EXPECT_FALSE(a.started);
  advance(1ms);
  EXPECT_EQ(a.started, 100ms);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(state().queued, 0u);
  advance(200ms);  // past the queue deadline while A's operation runs
  EXPECT_TRUE(ops.at(0).cancellations.empty()) << "the queue deadline ended with the wait";
  EXPECT_FALSE(a.ec) << "still running";
  ops.succeed(0, 7);
  poll();
  EXPECT_EQ(a.ec, error_code());
  EXPECT_TRUE(rejections().empty());
  EXPECT_TRUE(hooks.empty());
}

TEST_F(RateLimitQueue, AnEarlierOuterTimeoutEndsTheWaitAsATimeout) {
  make(options(1, QueueTimeout::fixed(150ms)));
  const Shield bounded = on(Shield{}.timeout(50ms));
  start("X");
  Result& a = start_on(bounded, "A");  // due at 100 ms; the timeout expires at 50 ms
  advance(50ms - 1ns);
  EXPECT_FALSE(a.ec);
  advance(1ns);
  ASSERT_TRUE(a.ec.has_value());
  EXPECT_EQ(*a.ec, errc::timeout);
  EXPECT_FALSE(a.started);
  EXPECT_TRUE(rejections().empty()) << "a timeout, not a rejection";
  EXPECT_TRUE(hooks.empty());
  EXPECT_EQ(state().queued, 0u);
  Result& n = start("N");  // A's reservation went back: due at 100 ms
  advance(50ms);
  EXPECT_EQ(n.started, 100ms);
}

TEST_F(RateLimitQueue, ALaterOuterTimeoutLeavesTheWaitToTheQueueTimeout) {
  make(options(2, QueueTimeout::fixed(150ms)));
  const Shield bounded = on(Shield{}.timeout(1s));
  start("X");
  Result& a = start("A");              // due at 100 ms
  Result& b = start_on(bounded, "B");  // due at 200 ms, queue deadline at 150 ms
  advance(100ms);
  EXPECT_EQ(a.started, 100ms);
  advance(50ms - 1ns);
  EXPECT_FALSE(b.ec);
  advance(1ns);
  ASSERT_TRUE(b.ec.has_value());
  EXPECT_EQ(*b.ec, errc::queue_timeout);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].reason, errc::queue_timeout);
  EXPECT_EQ(state().queued, 0u);
}

TEST_F(RateLimitQueue, ThePriorityGeneratorDecidesTheOrderAndIsNotAskedForAdmittedCalls) {
  RateLimitOptions o = options(3);
  std::vector<std::int32_t> seen;  // the caller's priority, as the generator saw it
  const std::vector<std::int32_t> answers{0, 1, 7, 4};
  o.priority_generator = [&seen, answers](const Context& ctx) {
    seen.push_back(ctx.priority());
    return answers.at(seen.size() - 1);
  };
  make(std::move(o));
  start("X", 50);  // admitted
  EXPECT_TRUE(seen.empty()) << "an admitted call is not asked for";
  Result& a = start("A");       // 0: holds the turn
  Result& b = start("B", 100);  // 1, whatever its caller said
  Result& c = start("C", -5);   // 7
  ASSERT_EQ(state().queued, 3u);
  Result& d = start("D");  // 4: the queue is full; takes the place of B, the lowest
  EXPECT_EQ(seen, (std::vector<std::int32_t>{0, 100, -5, 0}));
  ASSERT_TRUE(b.ec.has_value());
  EXPECT_EQ(*b.ec, errc::rate_limited);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].priority, 1) << "the generator's priority is the context's";
  EXPECT_EQ(hooks[0].retry_after, 400ms) << "X, A, C and D are served at 0 to 300 ms";
  advance(100ms);
  advance(100ms);
  advance(100ms);
  EXPECT_EQ(order, (Ids{"X", "A", "C", "D"}));
  EXPECT_EQ(a.started, 100ms);
  EXPECT_EQ(c.started, 200ms);
  EXPECT_EQ(d.started, 300ms);
  EXPECT_EQ(state().queued, 0u);
  advance(1s);
  Result& y = start("Y", 3);  // admitted
  EXPECT_EQ(y.started, 1300ms);
  EXPECT_EQ(seen.size(), 4u) << "an admitted call is not asked for";
}

TEST(RateLimitQueueTimeout, NeedsAQueueAndShowsInTheDescription) {
  const auto message = [](RateLimitOptions o) -> std::string {
    try {
      RateLimitStrategy s(std::move(o));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  RateLimitOptions o;
  o.permits = 10;
  o.window = 1s;
  o.queue_timeout = QueueTimeout::fixed(250ms);
  EXPECT_NE(message(o).find("queue_timeout"), std::string::npos) << message(o);
  EXPECT_THROW((void)Shield{}.rate_limit(o), std::invalid_argument);
  o.queue_limit = 5;
  EXPECT_EQ(message(o), "accepted");
  EXPECT_EQ(RateLimitStrategy(o).describe(),
            "RateLimit(10/1s, queue 5, queue timeout fixed(250ms))");
  o.queue_timeout = QueueTimeout::fixed(0s);
  EXPECT_NE(message(o).find("queue_timeout.max_wait"), std::string::npos) << message(o);
  o.queue_timeout = QueueTimeout::none();
  EXPECT_EQ(RateLimitStrategy(o).describe(), "RateLimit(10/1s, queue 5)");
  o.queue_limit = 0;
  EXPECT_EQ(message(o), "accepted") << "without a queue timeout, no queue is needed";
}

}  // namespace
}  // namespace kevlar
