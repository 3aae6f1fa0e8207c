// The set of event kinds is open: a user strategy publishes an event type the core does not know,
// observers that know it read it, the others ignore it or never receive it, and the testing kit's
// recorder keeps it like any of kevlar's.
#include "core/test_strategies.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kevlar {
namespace {

/// An event of the test's own, unknown to kevlar.
struct QuotaChecked {
  static constexpr std::string_view kevlar_event = "QuotaChecked";
  std::string tenant;
  int remaining = 0;
};

/// Another, to check that kinds are told apart.
struct QuotaRefilled {
  static constexpr std::string_view kevlar_event = "QuotaRefilled";
  int tokens = 0;
};

/// A strategy of the test's: it checks a quota before each call and says so with its own event.
class Quota final : public Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "Quota"; }
  Step on_start(Layer& layer) override {
    if (layer.wants<QuotaChecked>()) layer.emit(QuotaChecked{"acme", --remaining_});
    return Step::run_inner;
  }

 private:
  int remaining_ = 10;
};

/// Knows QuotaChecked and wants only it.
class QuotaWatcher final : public Observer {
 public:
  [[nodiscard]] EventKinds interests() const override { return event_kinds<QuotaChecked>(); }
  void on_event(const Event& e) override {
    const std::lock_guard lock(mutex_);
    if (const auto* q = e.get_if<QuotaChecked>()) {
      seen.push_back(*q);
      strategies.push_back(e.source.strategy_index);
    } else {
      others.emplace_back(e.kind.name());
    }
  }
  std::mutex mutex_;
  std::vector<QuotaChecked> seen;
  std::vector<std::size_t> strategies;
  std::vector<std::string> others;
};

/// Wants a kind nobody emits.
class RefillWatcher final : public Observer {
 public:
  [[nodiscard]] EventKinds interests() const override { return event_kinds<QuotaRefilled>(); }
  void on_event(const Event&) override { ++calls; }
  int calls = 0;
};

TEST(OpenEvents, AUserStrategysOwnEventReachesTheObserversThatWantIt) {
  auto watcher = std::make_shared<QuotaWatcher>();
  auto refills = std::make_shared<RefillWatcher>();
  auto recorder = std::make_shared<testing::EventRecorder>();
  const Shield shield = Shield{}
                            .use(std::make_shared<test::PassThrough>())
                            .use(std::make_shared<Quota>())
                            .observed_by(watcher)
                            .observed_by(refills)
                            .observed_by(recorder);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(shield.execute([] { return 2; }), 2);
  ASSERT_EQ(watcher->seen.size(), 2u);
  EXPECT_EQ(watcher->seen[0].tenant, "acme");
  EXPECT_EQ(watcher->seen[0].remaining, 9);
  EXPECT_EQ(watcher->seen[1].remaining, 8);
  EXPECT_EQ(watcher->strategies, (std::vector<std::size_t>{1, 1})) << "the strategy's position";
  EXPECT_TRUE(watcher->others.empty()) << "only the kind it asked for";
  EXPECT_EQ(refills->calls, 0) << "a kind nobody emits reaches nobody";
  // The recorder keeps a copy of the unknown kind, beside kevlar's own events.
  EXPECT_EQ(recorder->count_of<QuotaChecked>(), 2u);
  EXPECT_EQ(recorder->count_of<QuotaRefilled>(), 0u);
  EXPECT_EQ(recorder->count_of<ExecutionFinished>(), 2u);
  const std::vector<QuotaChecked> recorded = recorder->events_of<QuotaChecked>();
  ASSERT_EQ(recorded.size(), 2u);
  EXPECT_EQ(recorded[1].remaining, 8);
  std::vector<std::string> names;
  for (const testing::RecordedEvent& e : recorder->events()) {
    names.emplace_back(testing::event_name(e.detail));
  }
  // The quota is checked as its layer starts, before the user's call is attempted.
  EXPECT_EQ(names, (std::vector<std::string>{"QuotaChecked", "AttemptStarted", "ExecutionFinished",
                                             "QuotaChecked", "AttemptStarted",
                                             "ExecutionFinished"}));
}

TEST(OpenEvents, AnUnobservedShieldBuildsNoneAndAnObserverOfOtherKindsMakesTheStrategySkipIt) {
  int built = 0;
  struct Counting final : Strategy {
    int* built;
    explicit Counting(int* b) : built(b) {}
    [[nodiscard]] std::string describe() const override { return "Counting"; }
    Step on_start(Layer& layer) override {
      if (layer.wants<QuotaChecked>()) {
        ++*built;
        layer.emit(QuotaChecked{"t", 0});
      }
      return Step::run_inner;
    }
  };
  const Shield plain = Shield{}.use(std::make_shared<Counting>(&built));
  EXPECT_EQ(plain.execute([] { return 1; }), 1);
  EXPECT_EQ(built, 0) << "nobody listens";
  // An observer of kevlar's execution events only: the filter may let a kind through that shares
  // its bit, but the observer never receives it.
  auto finished = std::make_shared<testing::EventRecorder>(event_kinds<ExecutionFinished>());
  const Shield observed = plain.observed_by(finished);
  EXPECT_EQ(observed.execute([] { return 1; }), 1);
  EXPECT_EQ(finished->count_of<QuotaChecked>(), 0u);
  EXPECT_EQ(finished->count_of<ExecutionFinished>(), 1u);
}

TEST(OpenEvents, KindsAreDistinctAndNamed) {
  EXPECT_FALSE(event_kind<QuotaChecked>() == event_kind<QuotaRefilled>());
  EXPECT_TRUE(event_kind<QuotaChecked>() == event_kind<QuotaChecked>());
  EXPECT_EQ(event_kind<QuotaChecked>().name(), "QuotaChecked");
  EXPECT_EQ(event_kind<RetryScheduled>().name(), "RetryScheduled");
  EventKinds set = event_kinds<QuotaChecked>();
  EXPECT_TRUE(set.contains(event_kind<QuotaChecked>()));
  EXPECT_FALSE(set.contains(event_kind<QuotaRefilled>()));
  set.add(event_kinds<QuotaRefilled, Rejected>());
  EXPECT_TRUE(set.contains(event_kind<QuotaRefilled>()));
  EXPECT_TRUE(set.contains(event_kind<Rejected>()));
  EXPECT_EQ(set.mask() & event_kind<QuotaChecked>().bit(), event_kind<QuotaChecked>().bit());
}

TEST(OpenEvents, TheMetricsObserverIgnoresKindsItDoesNotKnow) {
  auto metrics = std::make_shared<MetricsObserver>();
  const Shield shield = Shield{}.use(std::make_shared<Quota>()).with_name("quota").observed_by(
      metrics);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_EQ(metrics->snapshot().value("kevlar.executions", {{"kevlar.shield.name", "quota"},
                                                           {"kevlar.execution.outcome", "success"}}),
            1);
}

}  // namespace
}  // namespace kevlar
