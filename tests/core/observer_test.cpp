// Observers: every event kind, in order, with its source; a throwing observer changes nothing.
#include "core/async_ops.hpp"
#include "core/test_strategies.hpp"

#include <test_options.hpp>

#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

/// Records every event it receives (copied: an event's context must not be kept), of the kinds it
/// was made to want (all by default).
class Recorder final : public Observer {
 public:
  explicit Recorder(EventKinds kinds = EventKinds::all()) : kinds_(std::move(kinds)) {}
  [[nodiscard]] EventKinds interests() const override { return kinds_; }

  struct Seen {
    testing::RecordedDetail detail;
    std::string shield;  ///< "<unnamed>" when the shield has no name
    std::size_t index;
    const Strategy* strategy;
    bool had_context;
  };

  void on_event(const Event& e) override {
    const std::lock_guard lock(mutex_);
    seen_.push_back(Seen{testing::RecordedDetail(e),
                         e.source.shield_name ? *e.source.shield_name : "<unnamed>",
                         e.source.strategy_index, e.source.strategy, e.source.context != nullptr});
  }
  std::vector<Seen> seen() const {
    const std::lock_guard lock(mutex_);
    return seen_;
  }
  /// The kinds received, in order, as short names.
  std::vector<std::string> kinds() const {
    std::vector<std::string> out;
    for (const Seen& s : seen()) out.push_back(kind_of(s.detail));
    return out;
  }
  template <class T>
  std::vector<T> all() const {
    std::vector<T> out;
    for (const Seen& s : seen()) {
      if (const T* t = s.detail.get_if<T>()) out.push_back(*t);
    }
    return out;
  }
  static std::string kind_of(std::string_view name) {
    static const std::pair<std::string_view, const char*> names[] = {
        {"ExecutionFinished", "finished"}, {"AttemptStarted", "attempt"},
        {"RetryScheduled", "retry"},       {"TimeoutFired", "timeout"},
        {"FallbackTaken", "fallback"},     {"Rejected", "rejected"},
        {"BreakerTransition", "breaker"},  {"LimiterStateChanged", "limiter"}};
    for (const auto& [type, shortname] : names) {
      if (type == name) return shortname;
    }
    return std::string(name);
  }
  static std::string kind_of(const testing::RecordedDetail& d) { return kind_of(d.name()); }

 private:
  EventKinds kinds_;
  mutable std::mutex mutex_;
  std::vector<Seen> seen_;
};

/// Throws from every event.
class Thrower final : public Observer {
 public:
  std::atomic<int> calls{0};
  void on_event(const Event&) override {
    ++calls;
    throw std::runtime_error("observer failure");
  }
};

using test::constant_retries;

CircuitBreakerOptions consecutive(int n) { return test::consecutive_breaker(n, 10s); }

struct Observed : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<Recorder> recorder = std::make_shared<Recorder>();
};

TEST_F(Observed, AnUnobservedShieldHasNoObserverLayer) {
  const Shield plain = Shield{}.retry(1);
  const Shield observed = plain.observed_by(recorder);
  EXPECT_EQ(plain.size(), 1u);
  EXPECT_EQ(observed.size(), 1u) << "the observer layer is not a strategy of the shield";
  EXPECT_EQ(observed.describe(), plain.describe());
  EXPECT_EQ(plain.execute([] { return 1; }), 1);
  EXPECT_TRUE(recorder->seen().empty()) << "observed_by returns a copy; the original is silent";
  EXPECT_THROW((void)plain.observed_by(nullptr), std::invalid_argument);
}

TEST_F(Observed, ASuccessfulCallReportsItsAttemptAndItsEnd) {
  const Shield shield = Shield{}.with_name("api").observed_by(recorder).with_clock(clock);
  EXPECT_EQ(shield.execute([&] {
    clock->advance(5ms);
    return 7;
  }),
            7);
  EXPECT_EQ(recorder->kinds(), (std::vector<std::string>{"attempt", "finished"}));
  const auto finished = recorder->all<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].success);
  EXPECT_EQ(finished[0].attempts, 1u);
  EXPECT_EQ(finished[0].duration, 5ms);
  EXPECT_EQ(recorder->all<AttemptStarted>()[0].attempt, 1u);
  for (const auto& s : recorder->seen()) {
    EXPECT_EQ(s.shield, "api");
    EXPECT_EQ(s.index, EventSource::no_strategy);
    EXPECT_EQ(s.strategy, nullptr);
    EXPECT_TRUE(s.had_context);
  }
}

TEST_F(Observed, RetriesReportEachDecisionWithItsDelayAndFailure) {
  const Shield shield = Shield{}.retry(constant_retries(2, 0ms)).observed_by(recorder);
  int calls = 0;
  EXPECT_THROW(shield.execute([&]() -> int {
    ++calls;
    throw std::runtime_error("down");
  }),
               std::runtime_error);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(recorder->kinds(), (std::vector<std::string>{"attempt", "retry", "attempt", "retry",
                                                         "attempt", "finished"}));
  const auto retries = recorder->all<RetryScheduled>();
  ASSERT_EQ(retries.size(), 2u);
  EXPECT_EQ(retries[0].retry, 1);
  EXPECT_EQ(retries[1].retry, 2);
  EXPECT_EQ(retries[0].delay, 0ms);
  EXPECT_TRUE(retries[0].failure.exception);
  const auto finished = recorder->all<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u) << "retries never add executions";
  EXPECT_FALSE(finished[0].success);
  EXPECT_TRUE(finished[0].failure.exception);
  EXPECT_EQ(finished[0].attempts, 3u);
  for (const auto& s : recorder->seen()) {
    if (Recorder::kind_of(s.detail) == "retry") {
      EXPECT_EQ(s.index, 0u);
      EXPECT_EQ(s.strategy, shield.strategies()[0].get());
    }
  }
}

TEST_F(Observed, ARetryOfAHandledValueReportsNoFailure) {
  const Shield shield = Shield{}
                            .when(Clause{}.result<int>([](int v) { return v < 0; }))
                            .retry(constant_retries(1, 0ms))
                            .observed_by(recorder);
  int calls = 0;
  EXPECT_EQ(shield.execute([&] { return ++calls == 1 ? -1 : 5; }), 5);
  const auto retries = recorder->all<RetryScheduled>();
  ASSERT_EQ(retries.size(), 1u);
  EXPECT_FALSE(retries[0].failure.error) << "the retried attempt succeeded with a value";
  EXPECT_FALSE(retries[0].failure.exception);
  const auto finished = recorder->all<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].success);
  EXPECT_EQ(finished[0].attempts, 2u);
}

TEST_F(Observed, AFallbackRecoveryIsASuccessfulExecution) {
  const Shield shield = Shield{}.fallback(42).retry(constant_retries(2, 0ms)).observed_by(recorder);
  EXPECT_EQ(shield.execute([]() -> int { throw std::runtime_error("down"); }), 42);
  EXPECT_EQ(recorder->all<RetryScheduled>().size(), 2u);
  ASSERT_EQ(recorder->all<FallbackTaken>().size(), 1u);
  EXPECT_TRUE(recorder->all<FallbackTaken>()[0].failure.exception);
  const auto finished = recorder->all<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].success);
}

TEST_F(Observed, ATimeoutReportsItsBudget) {
  const Shield shield = Shield{}.timeout(1s).observed_by(recorder).with_clock(clock);
  asio::io_context ioc;
  std::optional<error_code> result;
  shield.execute_async(test::CompletesOnCancel{},
                       asio::bind_executor(ioc, [&](error_code ec) { result = ec; }));
  ioc.poll();
  clock->advance(1s);
  for (int i = 0; i < 4 && !result; ++i) ioc.poll();
  ASSERT_EQ(result, errc::timeout);
  EXPECT_EQ(recorder->kinds(), (std::vector<std::string>{"attempt", "timeout", "finished"}));
  EXPECT_EQ(recorder->all<TimeoutFired>()[0].timeout, 1s);
  EXPECT_EQ(recorder->all<ExecutionFinished>()[0].failure.error, errc::timeout);
}

TEST_F(Observed, ABreakerReportsItsTransitionsAndRejections) {
  auto breaker = CircuitBreaker::create(consecutive(2));
  const Shield shield = Shield{}.use(breaker).observed_by(recorder).with_clock(clock);
  const auto fail = []() -> int { throw std::runtime_error("down"); };
  EXPECT_THROW(shield.execute(fail), std::runtime_error);
  EXPECT_THROW(shield.execute(fail), std::runtime_error);  // opens
  try {
    (void)shield.execute([] { return 1; });
    ADD_FAILURE() << "an open circuit ran the call";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::circuit_open);
  }
  clock->advance(10s);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);  // the probe closes it
  const auto transitions = recorder->all<BreakerTransition>();
  ASSERT_EQ(transitions.size(), 3u);
  EXPECT_EQ(transitions[0].from, CircuitState::closed);
  EXPECT_EQ(transitions[0].to, CircuitState::open);
  EXPECT_TRUE(transitions[0].failure.exception);
  EXPECT_EQ(transitions[1].to, CircuitState::half_open);
  EXPECT_EQ(transitions[2].to, CircuitState::closed);
  EXPECT_FALSE(transitions[2].failure.exception) << "a closing change carries no failure";
  const auto rejections = recorder->all<Rejected>();
  ASSERT_EQ(rejections.size(), 1u);
  EXPECT_EQ(rejections[0].kind, RejectionKind::circuit_open);
  ASSERT_TRUE(rejections[0].retry_after.has_value());
  EXPECT_EQ(*rejections[0].retry_after, 10s);
  for (const auto& s : recorder->seen()) {
    const std::string kind = Recorder::kind_of(s.detail);
    if (kind == "breaker" || kind == "rejected") {
      EXPECT_EQ(s.index, 0u);
      EXPECT_EQ(s.strategy, breaker.get());
    }
  }
  // A change made by hand reaches the breaker's own hooks, not the shield's observers.
  breaker->isolate();
  EXPECT_EQ(recorder->all<BreakerTransition>().size(), 3u);
  EXPECT_THROW((void)shield.execute([] { return 1; }), Error);
  EXPECT_EQ(recorder->all<Rejected>().back().kind, RejectionKind::isolated);
}

/// Resets the breaker from inside the observer, when it sees a rejection.
class ResetOnRejection final : public Observer {
 public:
  explicit ResetOnRejection(std::shared_ptr<CircuitBreaker> b) : breaker_(std::move(b)) {}
  void on_event(const Event& e) override {
    if (e.is<Rejected>()) breaker_->reset();
  }

 private:
  std::shared_ptr<CircuitBreaker> breaker_;
};

TEST_F(Observed, AResetFromInsideAnObserverIsAChangeByHandNotTheShields) {
  auto breaker = CircuitBreaker::create(consecutive(1));
  const Shield shield = Shield{}
                            .use(breaker)
                            .observed_by(std::make_shared<ResetOnRejection>(breaker))
                            .observed_by(recorder)
                            .with_clock(clock);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }),
               std::runtime_error);  // opens
  EXPECT_THROW((void)shield.execute([] { return 1; }), Error);  // rejected; the observer resets
  EXPECT_EQ(breaker->state(), CircuitState::closed);
  const auto transitions = recorder->all<BreakerTransition>();
  ASSERT_EQ(transitions.size(), 1u) << "the reset reached the shield's observers";
  EXPECT_EQ(transitions[0].to, CircuitState::open);
}

TEST_F(Observed, AnAttemptDeclinedPastTheDeadlineIsNotAnnounced) {
  const Shield shield = Shield{}
                            .timeout(1s)
                            .use(std::make_shared<test::Delay>(1s))
                            .observed_by(recorder)
                            .with_clock(clock);
  asio::io_context ioc;
  std::optional<error_code> result;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 1, std::move(token)); },
      asio::bind_executor(ioc, [&](error_code ec, int) { result = ec; }));
  ioc.poll();
  clock->advance(1s);
  for (int i = 0; i < 4 && !result; ++i) ioc.poll();
  ASSERT_EQ(result, errc::timeout);
  EXPECT_TRUE(recorder->all<AttemptStarted>().empty());
  ASSERT_EQ(recorder->all<ExecutionFinished>().size(), 1u);
  EXPECT_EQ(recorder->all<ExecutionFinished>()[0].attempts, 0u);
  EXPECT_EQ(recorder->all<TimeoutFired>().size(), 1u);
}

TEST_F(Observed, ALimiterReportsItsAccountingAndItsRejections) {
  ConcurrencyLimitOptions o;
  o.max_concurrency = 1;
  o.max_queue = 0;
  const Shield shield = Shield{}.concurrency_limit(o).observed_by(recorder);
  asio::io_context ioc;
  std::function<void(error_code)> open;
  int done = 0;
  // A holds the permit until the test opens its gate; B is rejected.
  shield.execute_async(
      [&](auto token) {
        return asio::async_initiate<decltype(token), void(error_code)>(
            [&](auto handler) {
              auto h = std::make_shared<decltype(handler)>(std::move(handler));
              open = [h](error_code ec) { std::move (*h)(ec); };
            },
            token);
      },
      asio::bind_executor(ioc, [&](error_code) { ++done; }));
  std::optional<error_code> rejected;
  shield.execute_async([&](auto token) { return test::async_answer(ioc.get_executor(), {}, 1, std::move(token)); },
                       asio::bind_executor(ioc, [&](error_code ec, int) { rejected = ec; }));
  ioc.poll();
  ASSERT_EQ(rejected, errc::concurrency_limit_exceeded);
  std::exchange(open, nullptr)(error_code{});
  ioc.poll();
  EXPECT_EQ(done, 1);
  const auto states = recorder->all<LimiterStateChanged>();
  ASSERT_EQ(states.size(), 3u);  // A admitted, B rejected, A released
  EXPECT_EQ(states[0].running, 1u);
  EXPECT_EQ(states[1].running, 1u);
  EXPECT_EQ(states[2].running, 0u);
  const auto rejections = recorder->all<Rejected>();
  ASSERT_EQ(rejections.size(), 1u);
  EXPECT_EQ(rejections[0].kind, RejectionKind::concurrency_limit);
  const auto finished = recorder->all<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_FALSE(finished[0].success);  // B, rejected first
  EXPECT_EQ(finished[0].attempts, 0u);
  EXPECT_TRUE(finished[1].success);
}

TEST_F(Observed, AThrowingObserverChangesNoOutcomeAndNoStateAndIsCounted) {
  // Every event kind, through a shield whose first observer throws from each: the outcomes and
  // the strategies' states are those of the same calls unobserved, and the second observer still
  // receives every event.
  auto thrower = std::make_shared<Thrower>();
  auto breaker = CircuitBreaker::create(consecutive(1));
  ConcurrencyLimitOptions lo;
  lo.max_concurrency = 4;
  auto limiter = ConcurrencyLimitStrategy::create(lo);
  const Shield base = Shield{}
                          .fallback(-1)
                          .timeout(1s)
                          .retry(constant_retries(1, 0ms))
                          .use(breaker)
                          .use(limiter)
                          .with_clock(clock);
  const Shield shield = base.observed_by(thrower).observed_by(recorder);
  EXPECT_EQ(shield.execute([] { return 5; }), 5);
  // Fails twice: a retry, the breaker opens, the fallback recovers.
  EXPECT_EQ(shield.execute([]() -> int { throw std::runtime_error("down"); }), -1);
  EXPECT_EQ(breaker->state(), CircuitState::open);
  EXPECT_EQ(shield.execute([] { return 5; }), -1);  // rejected by the open circuit, recovered
  EXPECT_EQ(limiter->state().running, 0u);
  // A timeout, asynchronously, after the break.
  clock->advance(10s);
  asio::io_context ioc;
  std::optional<error_code> result;
  const Shield timed = Shield{}.timeout(1s).observed_by(thrower).observed_by(recorder).with_clock(
      clock);
  timed.execute_async(test::CompletesOnCancel{},
                      asio::bind_executor(ioc, [&](error_code ec) { result = ec; }));
  ioc.poll();
  clock->advance(1s);
  for (int i = 0; i < 4 && !result; ++i) ioc.poll();
  EXPECT_EQ(result, errc::timeout);

  std::vector<std::string> kinds = recorder->kinds();
  for (const char* kind :
       {"finished", "attempt", "retry", "timeout", "fallback", "rejected", "breaker", "limiter"}) {
    EXPECT_NE(std::find(kinds.begin(), kinds.end(), kind), kinds.end()) << kind;
  }
  EXPECT_EQ(thrower->calls.load(), static_cast<int>(kinds.size()))
      << "the throwing observer saw every event the other one saw";
  EXPECT_EQ(shield.observer_failures() + timed.observer_failures(), kinds.size());
  ASSERT_TRUE(shield.first_observer_failure());
  EXPECT_THROW(std::rethrow_exception(shield.first_observer_failure()), std::runtime_error);
}

TEST_F(Observed, ConcurrentExecutionsDeliverEveryEventExactlyOnce) {
  const Shield shield = Shield{}.retry(constant_retries(1, 0ms)).observed_by(recorder);
  constexpr int threads = 4;
  constexpr int calls = 500;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < calls; ++i) {
        int n = 0;
        (void)shield.execute([&] {
          if (n++ == 0 && i % 2 == 0) throw std::runtime_error("once");
          return 1;
        });
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(recorder->all<ExecutionFinished>().size(), std::size_t{threads * calls});
  EXPECT_EQ(recorder->all<RetryScheduled>().size(), std::size_t{threads * calls / 2});
  EXPECT_EQ(recorder->all<AttemptStarted>().size(), std::size_t{threads * calls * 3 / 2});
}

/// Records the shields announced to it, and the events that arrived before any announcement.
class ShieldRecorder final : public Observer {
 public:
  struct Announced {
    std::string name;
    std::vector<const Strategy*> strategies;
  };
  void on_event(const Event&) override {
    const std::lock_guard lock(mutex_);
    ++events;
    if (announced.empty()) ++events_before_announcement;
  }
  void on_shield(ShieldInfo& shield) override {
    const std::lock_guard lock(mutex_);
    Announced a{shield.name ? *shield.name : "<unnamed>", {}};
    for (const auto& s : shield.strategies) a.strategies.push_back(s.get());
    announced.push_back(std::move(a));
    if (throw_on_shield) throw std::runtime_error("on_shield failure");
  }
  std::mutex mutex_;
  std::vector<Announced> announced;
  int events = 0;
  int events_before_announcement = 0;
  bool throw_on_shield = false;
};

TEST_F(Observed, EachShieldThatRunsIsAnnouncedOnceBeforeItsFirstEvent) {
  auto shields = std::make_shared<ShieldRecorder>();
  const Shield unnamed = Shield{}.retry(1).observed_by(shields);
  const Shield named = unnamed.with_name("api").circuit_breaker(5, 1s);  // never runs
  const Shield other = unnamed.with_name("other");
  EXPECT_TRUE(shields->announced.empty()) << "building announces nothing";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(unnamed.execute([] { return 1; }), 1);
  EXPECT_EQ(other.execute([] { return 2; }), 2);
  ASSERT_EQ(shields->announced.size(), 2u) << "once per shield that ran";
  EXPECT_EQ(shields->announced[0].name, "<unnamed>");
  EXPECT_EQ(shields->announced[1].name, "other");
  ASSERT_EQ(shields->announced[0].strategies.size(), 1u);
  EXPECT_EQ(shields->announced[0].strategies[0], unnamed.strategies()[0].get());
  EXPECT_EQ(shields->events_before_announcement, 0);
  EXPECT_EQ(shields->events, 4 * 2) << "an attempt and a finish per call";
  (void)named;
}

TEST_F(Observed, AThrowingAnnouncementIsCountedAndEventsStillFlow) {
  auto shields = std::make_shared<ShieldRecorder>();
  shields->throw_on_shield = true;
  const Shield shield = Shield{}.observed_by(shields).observed_by(recorder);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(shield.observer_failures(), 1u) << "announced once, so thrown once";
  EXPECT_EQ(shields->events, 4);
  EXPECT_EQ(recorder->kinds(), (std::vector<std::string>{"attempt", "finished", "attempt", "finished"}));
}

TEST_F(Observed, ConcurrentFirstEventsWaitForTheAnnouncement) {
  // The announcing thread holds on_shield until every other thread has started its call: their
  // first events must wait for it to finish.
  struct Slow final : Observer {
    std::atomic<int> started{0};
    std::atomic<bool> finished{false};
    std::atomic<int> announcements{0};
    std::atomic<int> early{0};
    std::atomic<int> events{0};
    void on_event(const Event&) override {
      ++events;
      if (!finished.load()) ++early;
    }
    void on_shield(ShieldInfo&) override {
      ++announcements;
      while (started.load() < 4) std::this_thread::yield();
      for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // let them reach their events
      finished = true;
    }
  };
  auto slow = std::make_shared<Slow>();
  const Shield shield = Shield{}.retry(1).observed_by(slow);
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {
      ++slow->started;
      EXPECT_EQ(shield.execute([] { return 1; }), 1);
    });
  }
  for (std::thread& th : pool) th.join();
  EXPECT_EQ(slow->announcements, 1);
  EXPECT_EQ(slow->early, 0) << "an event was delivered before the announcement finished";
  EXPECT_EQ(slow->events, 8);
}

/// Wants only the kinds it is given.
class Picky final : public Observer {
 public:
  explicit Picky(EventKinds kinds) : kinds_(std::move(kinds)) {}
  void on_event(const Event& e) override {
    const std::lock_guard lock(mutex_);
    seen.push_back(Recorder::kind_of(e.kind.name()));
  }
  [[nodiscard]] EventKinds interests() const override { return kinds_; }
  std::mutex mutex_;
  std::vector<std::string> seen;

 private:
  EventKinds kinds_;
};

TEST_F(Observed, AnObserverReceivesOnlyTheKindsItWants) {
  auto retries = std::make_shared<Picky>(event_kinds<RetryScheduled>());
  const Shield shield = Shield{}.retry(constant_retries(2, 0ms)).observed_by(retries).observed_by(recorder);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }), std::runtime_error);
  EXPECT_EQ(retries->seen, (std::vector<std::string>{"retry", "retry"}));
  EXPECT_EQ(recorder->kinds(), (std::vector<std::string>{"attempt", "retry", "attempt", "retry",
                                                         "attempt", "finished"}))
      << "another observer of the same shield still gets everything";
}

TEST_F(Observed, EventsNobodyWantsAreNotBuilt) {
  // Only retries are wanted: no attempt or execution layer runs, so the shield announces itself
  // with its first retry, and a call that never retries delivers nothing at all.
  auto retries = std::make_shared<Picky>(event_kinds<RetryScheduled>());
  struct Nothing final : Observer {
    std::atomic<int> calls{0};
    void on_event(const Event&) override { ++calls; }
    [[nodiscard]] EventKinds interests() const override { return EventKinds{}; }
  };
  auto nothing = std::make_shared<Nothing>();
  const Shield shield = Shield{}.retry(constant_retries(1, 0ms)).observed_by(retries).observed_by(nothing);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_TRUE(retries->seen.empty());
  EXPECT_EQ(nothing->calls, 0);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }), std::runtime_error);
  EXPECT_EQ(retries->seen, (std::vector<std::string>{"retry"}));
  EXPECT_EQ(nothing->calls, 0) << "an observer wanting nothing is never called";
  // The sets hold exactly the kinds named; every kind is distinct.
  const EventKinds two = event_kinds<AttemptStarted, LimiterStateChanged>();
  EXPECT_TRUE(two.contains(event_kind<AttemptStarted>()));
  EXPECT_TRUE(two.contains(event_kind<LimiterStateChanged>()));
  EXPECT_FALSE(two.contains(event_kind<ExecutionFinished>()));
  EXPECT_FALSE(two.contains(event_kind<HedgeLaunched>()));
  EXPECT_FALSE(event_kinds<HedgeLaunched>().contains(event_kind<ChaosInjected>()));
  EXPECT_TRUE(EventKinds::all().contains(event_kind<ChaosInjected>()));
  EXPECT_TRUE(EventKinds{}.empty());
}

TEST_F(Observed, AShieldWithoutStrategiesTimesEachExecutionSyncAndAsync) {
  // Only ExecutionFinished is wanted and there is no strategy: the shield has no layer at all, and
  // the engine still runs (and times) each execution, synchronous, asynchronous and coroutine.
  const auto finished_only = std::make_shared<Recorder>(event_kinds<ExecutionFinished>());
  const Shield shield = Shield{}.observed_by(finished_only).with_clock(clock);
  EXPECT_EQ(shield.execute([&] {
    clock->advance(3ms);
    return 1;
  }),
            1);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }),
               std::runtime_error);

  asio::io_context ioc;
  std::optional<error_code> got;
  shield.execute_async(
      [&](auto token) {
        clock->advance(4ms);
        return test::async_answer(ioc.get_executor(), asio::error::connection_reset, 0,
                                  std::move(token));
      },
      asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; }));
  std::optional<int> from_coroutine;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        from_coroutine = co_await shield.execute_async([&]() -> asio::awaitable<int> {
          clock->advance(5ms);
          co_return 9;
        });
      },
      asio::detached);
  ioc.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, asio::error::connection_reset);
  EXPECT_EQ(from_coroutine, 9);

  EXPECT_EQ(finished_only->kinds(),
            (std::vector<std::string>{"finished", "finished", "finished", "finished"}));
  const auto finished = finished_only->all<ExecutionFinished>();
  ASSERT_EQ(finished.size(), 4u);
  EXPECT_TRUE(finished[0].success);
  EXPECT_EQ(finished[0].duration, 3ms);
  EXPECT_EQ(finished[0].attempts, 1u);
  EXPECT_FALSE(finished[1].success);
  EXPECT_NE(finished[1].failure.exception, nullptr);
  EXPECT_FALSE(finished[2].success);
  EXPECT_EQ(finished[2].failure.error, asio::error::connection_reset);
  EXPECT_EQ(finished[2].duration, 4ms);
  EXPECT_EQ(finished[2].attempts, 1u);
  EXPECT_TRUE(finished[3].success);
  EXPECT_EQ(finished[3].duration, 5ms);
  for (const auto& seen : finished_only->seen()) {
    EXPECT_EQ(seen.index, EventSource::no_strategy);
    EXPECT_EQ(seen.strategy, nullptr);
  }
}

TEST_F(Observed, AnAbandonedExecutionReportsNoEnd) {
  const Shield shield = Shield{}.retry(1).observed_by(recorder).with_clock(clock);
  {
    asio::io_context ioc;
    shield.execute_async(
        [&](auto token) {
          return test::async_answer(ioc.get_executor(), {}, 1, std::move(token));
        },
        asio::bind_executor(ioc, [](error_code, int) { ADD_FAILURE() << "never delivered"; }));
  }  // destroyed with the operation's completion queued: the execution is abandoned
  EXPECT_EQ(recorder->kinds(), (std::vector<std::string>{"attempt"}));
}

TEST_F(Observed, StrategyIndicesAreTheStrategiesPositionsInAnObservedShield) {
  const Shield shield =
      Shield{}.retry(constant_retries(1, 0ms)).circuit_breaker(consecutive(5)).observed_by(recorder);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }),
               std::runtime_error);
  std::vector<std::size_t> retry_indices;
  for (const auto& seen : recorder->seen()) {
    if (seen.detail.is<RetryScheduled>()) retry_indices.push_back(seen.index);
  }
  EXPECT_EQ(retry_indices, (std::vector<std::size_t>{0})) << "retry is the first strategy";
}

TEST(Observer, RejectionAndChaosKindsAreNamedAndAnUnknownValueSaysSo) {
  EXPECT_EQ(std::string(to_string(RejectionKind::circuit_open)), "circuit_open");
  EXPECT_EQ(std::string(to_string(RejectionKind::isolated)), "isolated");
  EXPECT_EQ(std::string(to_string(RejectionKind::rate_limit)), "rate_limit");
  EXPECT_EQ(std::string(to_string(RejectionKind::concurrency_limit)), "concurrency_limit");
  EXPECT_EQ(std::string(to_string(static_cast<RejectionKind>(99))), "unknown");
  EXPECT_EQ(std::string(to_string(static_cast<ChaosKind>(99))), "unknown");
}

}  // namespace
}  // namespace kevlar
