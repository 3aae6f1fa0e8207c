#include "test_strategies.hpp"

#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <gtest/gtest.h>

#include <stdexcept>

namespace kevlar {
namespace {

class Named final : public Strategy {
 public:
  explicit Named(std::string text, bool stateful = false)
      : text_(std::move(text)), stateful_(stateful) {}
  std::string describe() const override { return text_; }
  StrategyTraits traits() const noexcept override {
    return {StrategyRole::proactive, stateful_, 0, false};
  }
  Step on_start(Layer&) override { return Step::run_inner; }

 private:
  std::string text_;
  bool stateful_;
};

TEST(Building, DescribeListsStrategiesOutermostFirst) {
  EXPECT_EQ(Shield{}.describe(), "(empty)");
  EXPECT_EQ(Shield{}.with_name("api").describe(), "api: (empty)");
  const Shield s = Shield{}
                       .use(std::make_shared<Named>("Timeout(30s)"))
                       .use(std::make_shared<Named>("Retry(3, exponential 250ms x2 +jitter <=30s)"))
                       .use(std::make_shared<Named>("CircuitBreaker(5 consecutive, break 30s)"));
  EXPECT_EQ(s.describe(),
            "Timeout(30s) -> Retry(3, exponential 250ms x2 +jitter <=30s) -> CircuitBreaker(5 "
            "consecutive, break 30s)");
  EXPECT_EQ(s.with_name("github").describe().rfind("github: Timeout(30s) -> ", 0), 0U);
  EXPECT_EQ(s.size(), 3U);
}

TEST(Building, BuildersReturnNewShieldsAndLeaveTheOriginalAlone) {
  const Shield a = Shield{}.use(std::make_shared<Named>("A"));
  const Shield b = a.use(std::make_shared<Named>("B"));
  EXPECT_EQ(a.describe(), "A");
  EXPECT_EQ(b.describe(), "A -> B");
  EXPECT_FALSE(a.name().has_value());
  EXPECT_EQ(*a.with_name("x").name(), "x");
}

TEST(Building, WrapAndComposeConcatenateAndShareInstances) {
  auto x = std::make_shared<Named>("X");
  auto y = std::make_shared<Named>("Y");
  auto z = std::make_shared<Named>("Z");
  const Shield outer = Shield{}.use(x).with_name("outer");
  const Shield inner = Shield{}.use(y).use(z).with_name("inner");
  const Shield w = outer.wrap(inner);
  EXPECT_EQ(w.describe(), "outer: X -> Y -> Z");
  ASSERT_EQ(w.strategies().size(), 3U);
  EXPECT_EQ(w.strategies()[0], x);
  EXPECT_EQ(w.strategies()[1], y);
  EXPECT_EQ(Shield{}.wrap(inner).describe(), "inner: Y -> Z");
  EXPECT_EQ(Shield::compose({Shield{}.use(x), Shield{}.use(y), Shield{}.use(z)}).describe(),
            "X -> Y -> Z");
  EXPECT_EQ(Shield::compose({}).describe(), "(empty)");
}

// The outer shield's name, clock and observers win; what it lacks comes from the inner shield,
// and an observer of both is called once per event.
TEST(Building, WrapTakesTheInnerNameClockAndObserversOnlyWhereTheOuterHasNone) {
  auto clock = ManualClock::create();
  auto both = std::make_shared<testing::EventRecorder>(event_kinds<ExecutionFinished>());
  auto inner_only = std::make_shared<testing::EventRecorder>(event_kinds<ExecutionFinished>());
  const Shield inner = Shield{}
                           .use(std::make_shared<Named>("Y"))
                           .with_name("inner")
                           .with_clock(clock)
                           .observed_by(both)
                           .observed_by(inner_only);
  const Shield w = Shield{}.use(std::make_shared<Named>("X")).observed_by(both).wrap(inner);
  EXPECT_EQ(w.describe(), "inner: X -> Y");
  EXPECT_EQ(&w.clock(), clock.get());
  EXPECT_EQ(w.execute([] { return 1; }), 1);
  EXPECT_EQ(both->count_of<ExecutionFinished>(), 1U) << "one delivery per observer";
  EXPECT_EQ(inner_only->count_of<ExecutionFinished>(), 1U);

  auto own_clock = ManualClock::create();
  const Shield named = Shield{}
                           .use(std::make_shared<Named>("X"))
                           .with_name("outer")
                           .with_clock(own_clock)
                           .wrap(inner);
  EXPECT_EQ(named.describe(), "outer: X -> Y");
  EXPECT_EQ(&named.clock(), own_clock.get());
  EXPECT_EQ(inner.wrap(Shield{}).describe(), inner.describe())
      << "an empty inner shield adds nothing";
}

// A shield wrapped around one built under when() carries that clause to the strategies added
// after it: here a retry that handles only logic errors.
TEST(Building, WrapCarriesTheInnerAmbientClauseToStrategiesAddedLater) {
  const Shield inner = Shield{}.when(Clause{}.exception<std::logic_error>());
  const Shield w =
      Shield{}.use(std::make_shared<Named>("X")).wrap(inner).use(std::make_shared<test::Repeat>(2));
  int calls = 0;
  EXPECT_THROW(w.execute([&]() -> int {
    ++calls;
    throw std::runtime_error("not handled");
  }),
               std::runtime_error);
  EXPECT_EQ(calls, 1) << "a runtime_error is not a logic_error: no repeat";
  calls = 0;
  EXPECT_THROW(w.execute([&]() -> int {
    ++calls;
    throw std::logic_error("handled");
  }),
               std::logic_error);
  EXPECT_EQ(calls, 3);
}

TEST(Building, AShieldWithoutObserversReportsNoObserverFailure) {
  EXPECT_EQ(Shield{}.observer_failures(), 0U);
  EXPECT_EQ(Shield{}.first_observer_failure(), nullptr);
  const Shield s = Shield{}.use(std::make_shared<Named>("X"));
  EXPECT_EQ(s.observer_failures(), 0U);
  EXPECT_EQ(s.first_observer_failure(), nullptr);
}

/// A strategy that declares it needs an asynchronous execution.
class AsyncOnly final : public Strategy {
 public:
  explicit AsyncOnly(std::string text) : text_(std::move(text)) {}
  std::string describe() const override { return text_; }
  StrategyTraits traits() const noexcept override {
    StrategyTraits t;
    t.asynchronous_only = true;
    return t;
  }
  Step on_start(Layer&) override { return Step::run_inner; }

 private:
  std::string text_;
};

TEST(Building, ASynchronousExecutionNamesEveryStrategyThatNeedsAnAsynchronousOne) {
  const Shield s = Shield{}
                       .use(std::make_shared<AsyncOnly>("RaceA"))
                       .use(std::make_shared<Named>("Plain"))
                       .use(std::make_shared<AsyncOnly>("RaceB"));
  int calls = 0;
  try {
    (void)s.execute([&] { return ++calls; });
    FAIL() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("kevlar::Shield::execute: RaceA, RaceB runs several"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(calls, 0);
}

TEST(Building, StateIsSharedByInstanceAcrossShields) {
  test::EventLog log;
  auto shared = std::make_shared<test::Recorder>("shared", log);
  const Shield a = Shield{}.use(shared);
  const Shield b = Shield{}.use(std::make_shared<test::PassThrough>()).wrap(a).with_name("b");
  a.execute([] {});
  b.execute([] {});
  EXPECT_EQ(log.events().size(), 6U);  // the same instance saw both executions
}

TEST(Building, SameStatefulInstanceTwiceIsRefused) {
  auto breaker = std::make_shared<Named>("Breaker", true);
  const Shield one = Shield{}.use(breaker);
  try {
    (void)one.use(std::make_shared<Named>("Other")).use(breaker);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("positions 1 and 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)one.wrap(one), std::invalid_argument);
  // Stateless instances may repeat; equal but distinct stateful instances are fine.
  auto stateless = std::make_shared<Named>("S");
  EXPECT_NO_THROW((void)Shield{}.use(stateless).use(stateless));
  EXPECT_NO_THROW((void)one.use(std::make_shared<Named>("Breaker", true)));
}

TEST(Building, FallbackInsideAReactiveStrategyWithTheSameClauseIsRefused) {
  auto repeat = std::make_shared<test::Repeat>(3);
  auto fallback = std::make_shared<test::FallbackTo>(-1);
  EXPECT_THROW((void)Shield{}.use(repeat).use(fallback), std::invalid_argument);
  EXPECT_NO_THROW((void)Shield{}.use(fallback).use(repeat));
  // A fallback with its own clause is reachable.
  EXPECT_NO_THROW(
      (void)Shield{}.use(repeat).when(Clause{}.exception<std::logic_error>()).use(fallback));
  // Recombining through wrap is validated too.
  EXPECT_THROW((void)Shield{}.use(repeat).wrap(Shield{}.use(fallback)), std::invalid_argument);
}

TEST(Building, InvalidArgumentsAreRefused) {
  EXPECT_THROW((void)Shield{}.use(nullptr), std::invalid_argument);
  EXPECT_THROW((void)Shield{}.with_clock(nullptr), std::invalid_argument);
}

TEST(Building, WithClockAppliesToTheContext) {
  auto clock = ManualClock::create();
  const Shield s = Shield{}.use(std::make_shared<test::PassThrough>()).with_clock(clock);
  EXPECT_EQ(&s.clock(), clock.get());
  s.execute([&](Context& ctx) { EXPECT_EQ(&ctx.clock(), clock.get()); });
  EXPECT_EQ(&Shield{}.clock(), Clock::steady().get());
}

}  // namespace
}  // namespace kevlar
