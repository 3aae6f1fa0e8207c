// detail::StateChangePublisher on its own: a circuit breaker's state changes delivered in order,
// one at a time, outside any lock, with the asynchronous hook's lane (no breaker, no sleeping).
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/detail/state_change_publisher.hpp>
#include <kevlar/observer.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/errc.hpp>

#include <gtest/gtest.h>

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using detail::StateChangePublisher;
using S = CircuitState;

/// "from->to".
std::string name_of(const CircuitStateChange& c) {
  return std::string(to_string(c.from)) + "->" + to_string(c.to);
}

CircuitStateChange change(S from, S to) {
  return CircuitStateChange{from, to, nullptr, {}};
}

/// The message of the exception `ep` holds.
std::string message_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  }
}

/// A state machine's identity, as the publisher compares it with tl_transition_source.machine.
const int machine = 0;

TEST(StateChangePublisher, QueuesWithoutDeliveringThenDeliversInQueueOrder) {
  std::vector<std::string> log;
  StateChangePublisher p(
      &machine, [&](const CircuitStateChange& c) { log.push_back("first " + name_of(c)); }, {});
  p.subscribe([&](const CircuitStateChange& c) { log.push_back("second " + name_of(c)); });
  const std::uint64_t t1 = p.enqueue(change(S::closed, S::open));
  const std::uint64_t t2 = p.enqueue(change(S::open, S::half_open));
  EXPECT_NE(t1, 0u);
  EXPECT_LT(t1, t2);
  EXPECT_TRUE(log.empty());  // enqueue() runs no observer: the breaker calls it under its lock
  p.deliver(t2);             // delivers everything queued, the earlier change first
  EXPECT_EQ(log, (std::vector<std::string>{"first closed->open", "second closed->open",
                                           "first open->half_open", "second open->half_open"}));
  p.deliver(t1);  // already delivered: nothing runs again
  p.deliver(0);   // no change
  EXPECT_EQ(log.size(), 4u);
}

TEST(StateChangePublisher, AnEmptyObserverIsRefused) {
  StateChangePublisher p(&machine, {}, {});
  EXPECT_THROW(p.subscribe({}), std::invalid_argument);
  p.deliver(p.enqueue(change(S::closed, S::open)));  // no observer at all: nothing to do
}

TEST(StateChangePublisher, EveryObserverRunsAndTheCallerGetsTheExceptionUnchanged) {
  int later = 0;
  StateChangePublisher p(&machine,
                         [](const CircuitStateChange&) { throw std::runtime_error("first"); }, {});
  p.subscribe([&](const CircuitStateChange&) { ++later; });
  try {
    p.deliver(p.enqueue(change(S::closed, S::open)));
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_EQ(later, 1);
}

TEST(StateChangePublisher, SeveralExceptionsAreAggregatedInObserverOrder) {
  StateChangePublisher p(&machine, [](const CircuitStateChange&) { throw std::runtime_error("a"); },
                         {});
  p.subscribe([](const CircuitStateChange&) { throw std::logic_error("b"); });
  try {
    p.deliver(p.enqueue(change(S::closed, S::isolated)));
    ADD_FAILURE() << "no exception";
  } catch (const CircuitObserverErrors& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_EQ(message_of(e.errors()[0]), "a");
    EXPECT_EQ(message_of(e.errors()[1]), "b");
  }
}

TEST(StateChangePublisher, EachCallerGetsOnlyItsOwnChangesExceptions) {
  StateChangePublisher p(&machine,
                         [](const CircuitStateChange& c) {
                           if (c.to == S::open) throw std::runtime_error("open");
                         },
                         {});
  const std::uint64_t opened = p.enqueue(change(S::closed, S::open));
  const std::uint64_t closed = p.enqueue(change(S::open, S::closed));
  EXPECT_NO_THROW(
      p.deliver(closed));  // delivers both; the opening's exception waits for its caller
  EXPECT_THROW(p.deliver(opened), std::runtime_error);
  EXPECT_NO_THROW(p.deliver(opened));  // handed over once
}

TEST(StateChangePublisher, AChangeQueuedFromAnObserverIsDeliveredAfterItAndItsFailuresGoUp) {
  std::vector<std::string> log;
  int depth = 0;
  int max_depth = 0;
  StateChangePublisher* self = nullptr;
  StateChangePublisher p(
      &machine,
      [&](const CircuitStateChange& c) {
        max_depth = std::max(max_depth, ++depth);
        log.push_back(name_of(c));
        if (c.to == S::open) {
          self->deliver(self->enqueue(change(S::open, S::isolated)));  // returns at once
          log.push_back("inner deliver returned");
        } else {
          --depth;
          throw std::runtime_error("from the reentrant change");
        }
        --depth;
      },
      {});
  self = &p;
  EXPECT_THROW(p.deliver(p.enqueue(change(S::closed, S::open))), std::runtime_error);
  EXPECT_EQ(log,
            (std::vector<std::string>{"closed->open", "inner deliver returned", "open->isolated"}));
  EXPECT_EQ(max_depth, 1);
}

TEST(StateChangePublisher, AConcurrentCallerWaitsUntilTheDelivererReachesItsChange) {
  std::mutex m;
  std::condition_variable cv;
  bool entered = false;
  bool released = false;
  std::vector<std::string> log;
  std::vector<std::thread::id> threads;
  int running = 0;
  int max_running = 0;
  StateChangePublisher p(
      &machine,
      [&](const CircuitStateChange& c) {
        std::unique_lock lock(m);
        max_running = std::max(max_running, ++running);
        log.push_back(name_of(c));
        threads.push_back(std::this_thread::get_id());
        if (c.to == S::open) {  // the first change: hold the delivery until the test says so
          entered = true;
          cv.notify_all();
          cv.wait(lock, [&] { return released; });
        }
        --running;
      },
      {});
  const std::uint64_t first = p.enqueue(change(S::closed, S::open));
  std::thread deliverer([&] { p.deliver(first); });
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  // The first change is being delivered (outside the publisher's lock): a second one queues
  // behind it, and its caller waits for it instead of delivering it concurrently.
  const std::uint64_t second = p.enqueue(change(S::open, S::half_open));
  std::vector<std::string> seen_on_return;
  std::thread waiter([&] {
    p.deliver(second);
    const std::lock_guard lock(m);
    seen_on_return = log;
  });
  {
    const std::lock_guard lock(m);
    released = true;
  }
  cv.notify_all();
  deliverer.join();
  waiter.join();
  EXPECT_EQ(seen_on_return, (std::vector<std::string>{"closed->open", "open->half_open"}));
  EXPECT_EQ(max_running, 1);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[1], threads[0]);  // the thread delivering the first delivered the second
}

/// Records the shields' events it receives.
struct Recorder : Observer {
  std::vector<BreakerTransition> seen;
  void on_event(const Event& event) override {
    if (const auto* t = event.get_if<BreakerTransition>()) seen.push_back(*t);
  }
};

TEST(StateChangePublisher, TheCausingShieldsObserversGetTheChangeAfterTheBreakersOwn) {
  auto recorder = std::make_shared<Recorder>();
  const std::shared_ptr<const detail::ObserverSet> set =
      std::make_shared<detail::ObserverSet>(std::vector<std::shared_ptr<Observer>>{recorder},
                                            std::nullopt, std::vector<std::shared_ptr<Strategy>>{});
  std::vector<std::size_t> seen_by_shield;  // when the breaker's own observer runs
  StateChangePublisher p(
      &machine, [&](const CircuitStateChange&) { seen_by_shield.push_back(recorder->seen.size()); },
      {});
  const auto failure = boost::system::errc::make_error_code(boost::system::errc::timed_out);
  {
    detail::TransitionSource source;
    source.origin.observers = &set;
    source.machine = &machine;
    const detail::TransitionScope scope(source);
    p.deliver(p.enqueue(CircuitStateChange{S::closed, S::open, nullptr, failure}));
  }
  {
    detail::TransitionSource other;  // another state machine's scope: not this change's cause
    other.origin.observers = &set;
    const int another = 0;
    other.machine = &another;
    const detail::TransitionScope scope(other);
    p.deliver(p.enqueue(change(S::open, S::closed)));
  }
  EXPECT_EQ(seen_by_shield, (std::vector<std::size_t>{0, 1}));  // the shield's come after
  ASSERT_EQ(recorder->seen.size(), 1u);
  EXPECT_EQ(recorder->seen[0].from, S::closed);
  EXPECT_EQ(recorder->seen[0].to, S::open);
  EXPECT_EQ(recorder->seen[0].failure.error, failure);
}

TEST(StateChangePublisher, ASynchronousCallerRunsTheHooksToCompletionAfterTheObservers) {
  std::vector<std::string> log;
  StateChangePublisher p(
      &machine,
      [&](const CircuitStateChange& c) {
        log.push_back("observer " + name_of(c));
        throw std::runtime_error("observer");
      },
      [&](CircuitStateChange c) -> boost::asio::awaitable<void> {
        log.push_back("hook " + name_of(c));
        if (c.to == S::half_open) throw std::logic_error("hook");
        co_return;
      });
  const std::uint64_t opened = p.enqueue(change(S::closed, S::open));
  const std::uint64_t half = p.enqueue(change(S::open, S::half_open));
  try {
    p.deliver(half);  // takes the lane: awaits both hooks, gets its observer's and the hooks'
    ADD_FAILURE() << "no exception";
  } catch (const CircuitObserverErrors& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_EQ(message_of(e.errors()[0]), "observer");
    EXPECT_EQ(message_of(e.errors()[1]), "hook");
  }
  EXPECT_EQ(log, (std::vector<std::string>{"observer closed->open", "observer open->half_open",
                                           "hook closed->open", "hook open->half_open"}));
  EXPECT_THROW(p.deliver(opened), std::runtime_error);  // its own observer's exception only
  EXPECT_EQ(log.size(), 4u);
}

/// Queues and delivers `c` as an asynchronous execution does, able to await the hooks itself;
/// true if it claimed the lane (it then awaits them).
bool deliver_as_async_caller(StateChangePublisher& p, const CircuitStateChange& c) {
  bool claimed = false;
  detail::TransitionSource source;
  source.machine = &machine;
  source.lane_claim = &claimed;
  const detail::TransitionScope scope(source);
  p.deliver(p.enqueue(c));
  return claimed;
}

TEST(StateChangePublisher, AnAsynchronousCallerClaimsTheLaneAndAwaitsTheHooksItself) {
  int hooks_run = 0;
  StateChangePublisher p(
      &machine,
      [](const CircuitStateChange& c) {
        if (c.to == S::open) throw std::runtime_error("observer");
      },
      [&](CircuitStateChange) -> boost::asio::awaitable<void> {
        ++hooks_run;
        co_return;
      });
  // The observer's failure is kept for the lane's end.
  ASSERT_TRUE(deliver_as_async_caller(p, change(S::closed, S::open)));
  // A second caller finds the lane taken: it neither waits nor claims; the holder awaits its hook.
  EXPECT_FALSE(deliver_as_async_caller(p, change(S::open, S::half_open)));
  EXPECT_EQ(hooks_run, 0);  // nothing ran the hooks: the holder awaits them
  CircuitStateChange next;
  std::vector<std::exception_ptr> failures;
  ASSERT_TRUE(p.next_lane_change(next, failures));
  EXPECT_EQ(name_of(next), "closed->open");
  ASSERT_TRUE(p.next_lane_change(next, failures));
  EXPECT_EQ(name_of(next), "open->half_open");
  p.lane_hook_failed(std::make_exception_ptr(std::logic_error("hook")));
  EXPECT_FALSE(p.next_lane_change(next, failures));  // releases the lane
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(message_of(failures[0]), "observer");
  EXPECT_EQ(message_of(failures[1]), "hook");
  // The lane is free again: the next change's caller takes it.
  EXPECT_TRUE(deliver_as_async_caller(p, change(S::half_open, S::closed)));
}

TEST(StateChangePublisher, AnAbandonedLaneIsTakenOverByTheNextCaller) {
  std::vector<std::string> hooks;
  StateChangePublisher p(
      &machine, [](const CircuitStateChange&) { throw std::runtime_error("observer"); },
      [&](CircuitStateChange c) -> boost::asio::awaitable<void> {
        hooks.push_back(name_of(c));
        co_return;
      });
  ASSERT_TRUE(deliver_as_async_caller(p, change(S::closed, S::open)));
  p.abandon_lane();  // its holder's executor went away: its gathered failures are dropped
  EXPECT_TRUE(hooks.empty());
  // A synchronous caller of the next change takes the lane and awaits what is left, in order.
  try {
    p.deliver(p.enqueue(change(S::open, S::closed)));
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {  // only its own observer's: the dropped one is gone
    EXPECT_STREQ(e.what(), "observer");
  }
  EXPECT_EQ(hooks, (std::vector<std::string>{"closed->open", "open->closed"}));
}

}  // namespace
}  // namespace kevlar
