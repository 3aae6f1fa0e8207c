#include "test_strategies.hpp"

#include <boom.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <typeinfo>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

using test::EventLog;
using test::Recorder;

using test::Boom;

TEST(SyncExecution, EmptyShieldReturnsTheValue) {
  const Shield shield;
  EXPECT_EQ(shield.execute([] { return 42; }), 42);
  EXPECT_EQ(shield.execute([](Context& ctx) { return static_cast<int>(ctx.attempt()); }), 0);
}

TEST(SyncExecution, StrategiesRunInChainOrderForAnyLength) {
  for (int n = 1; n <= 6; ++n) {
    EventLog log;
    Shield shield;
    for (int i = 0; i < n; ++i)
      shield = shield.use(std::make_shared<Recorder>(std::to_string(i), log));
    EXPECT_EQ(shield.execute([&] {
      log.add("op");
      return 7;
    }),
              7);
    std::vector<std::string> expected;
    for (int i = 0; i < n; ++i) expected.push_back(std::to_string(i) + ":start");
    expected.push_back("op");
    for (int i = n - 1; i >= 0; --i) {
      expected.push_back(std::to_string(i) + ":inner");
      expected.push_back(std::to_string(i) + ":finish");
    }
    EXPECT_EQ(log.events(), expected) << "n = " << n;
  }
}

/// `n` recorders "0" .. "n-1" with `inserted` placed just inside recorder `k`.
Shield recorders_around(int n, int k, EventLog& log, std::shared_ptr<Strategy> inserted) {
  Shield shield;
  for (int i = 0; i < n; ++i) {
    shield = shield.use(std::make_shared<Recorder>(std::to_string(i), log));
    if (i == k) shield = shield.use(inserted);
  }
  return shield;
}

std::size_t count_of(const std::vector<std::string>& events, const std::string& e) {
  return static_cast<std::size_t>(std::count(events.begin(), events.end(), e));
}

// The synchronous walk has a copy per level: the outermost inlined into Shield::execute's path,
// the next two into a function that deeper levels call again (in an optimised build; functions of
// their own at -O0): a strategy's steps must mean the same at every depth.

TEST(SyncExecution, ARepeaterAtAnyDepthRerunsOnlyTheLayersInsideIt) {
  for (int n = 1; n <= 6; ++n) {
    for (int k = 0; k < n; ++k) {
      EventLog log;
      const Shield shield = recorders_around(n, k, log, std::make_shared<test::Repeat>(2));
      std::vector<std::uint32_t> attempts;
      try {
        shield.execute([&](Context& ctx) -> int {
          attempts.push_back(ctx.attempt());
          throw std::runtime_error("failure " + std::to_string(ctx.attempt()));
        });
        ADD_FAILURE() << "no exception, n = " << n << ", k = " << k;
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "failure 3") << "n = " << n << ", k = " << k;
      }
      EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2, 3})) << "n = " << n << ", k = " << k;
      const std::vector<std::string> events = log.events();
      for (int i = 0; i < n; ++i) {
        const std::size_t runs = i <= k ? 1 : 3;  // the layers inside the repeater run each time
        const std::string id = std::to_string(i);
        EXPECT_EQ(count_of(events, id + ":start"), runs) << "n = " << n << ", k = " << k;
        EXPECT_EQ(count_of(events, id + ":finish"), runs) << "n = " << n << ", k = " << k;
      }
      EXPECT_EQ(events.back(), "0:finish");
    }
  }
}

TEST(SyncExecution, AStrategyThrowingAtAnyDepthFailsTheExecutionAndEndsTheLayersOutside) {
  for (int n = 1; n <= 6; ++n) {
    for (int k = 0; k < n; ++k) {
      EventLog log;
      const Shield shield = recorders_around(n, k, log, std::make_shared<test::Throwing>());
      bool ran = false;
      const Outcome<int> outcome = shield.execute_outcome([&] {
        ran = true;
        return 1;
      });
      ASSERT_TRUE(outcome.has_exception()) << "n = " << n << ", k = " << k;
      EXPECT_THROW(std::rethrow_exception(outcome.exception()), std::runtime_error);
      EXPECT_FALSE(ran);
      std::vector<std::string> expected;
      for (int i = 0; i <= k; ++i) expected.push_back(std::to_string(i) + ":start");
      for (int i = k; i >= 0; --i) {
        expected.push_back(std::to_string(i) + ":inner");
        expected.push_back(std::to_string(i) + ":finish");
      }
      EXPECT_EQ(log.events(), expected) << "n = " << n << ", k = " << k;
    }
  }
}

TEST(SyncExecution, AWaitAtAnyDepthBlocksOnTheShieldsClock) {
  for (const int k : {0, 2, 4, 5}) {
    auto clock = ManualClock::create();
    EventLog log;
    const Shield shield =
        recorders_around(6, k, log, std::make_shared<test::Delay>(std::chrono::seconds(5)))
            .with_clock(clock);
    std::atomic<int> ran{0};
    std::jthread caller(
        [&] { EXPECT_EQ(shield.execute([&] { return ++ran; }), 1) << "k = " << k; });
    clock->wait_for_sleepers(1);
    // Blocked in the wait, inside layer k: the layers up to k started, none inside it did.
    EXPECT_EQ(ran.load(), 0) << "k = " << k;
    EXPECT_EQ(log.events().size(), static_cast<std::size_t>(k + 1)) << "k = " << k;
    EXPECT_EQ(log.events().back(), std::to_string(k) + ":start") << "k = " << k;
    clock->advance(std::chrono::seconds(5));
    caller.join();
    EXPECT_EQ(ran.load(), 1) << "k = " << k;
    EXPECT_EQ(log.events().size(), 18U) << "k = " << k;  // every recorder started and finished
  }
}

/// A strategy whose frame is `Bytes` large: start() fills it with a pattern of its own, and
/// inner_complete() and finish() check it is still there.
template <std::size_t Bytes>
class Filler final : public BasicStrategy<Filler<Bytes>, std::array<unsigned char, Bytes>> {
 public:
  using Frame = std::array<unsigned char, Bytes>;
  Filler(unsigned char seed, std::vector<std::string>& errors) : seed_(seed), errors_(&errors) {}
  std::string describe() const override { return "Filler"; }
  Step start(Layer&, Frame& f) {
    for (std::size_t i = 0; i < Bytes; ++i) f[i] = static_cast<unsigned char>(seed_ + i);
    return Step::run_inner;
  }
  Step inner_complete(Layer&, Frame& f) {
    check(f, "inner_complete");
    return Step::complete;
  }
  void finish(Layer&, Frame& f) noexcept { check(f, "finish"); }

 private:
  void check(const Frame& f, const char* where) const noexcept {
    for (std::size_t i = 0; i < Bytes; ++i) {
      if (f[i] != static_cast<unsigned char>(seed_ + i)) {
        errors_->push_back(std::string(where) + ": byte " + std::to_string(i) + " of seed " +
                           std::to_string(seed_));
        return;
      }
    }
  }
  unsigned char seed_;
  std::vector<std::string>* errors_;
};

TEST(SyncExecution, FramesBeyondTheStackBufferRunAlikeOnTheHeap) {
  // One 200-byte frame fits the buffer a synchronous execution keeps on its stack; two do not,
  // and a third inside a repeater (which runs it twice on a failure) needs still more: each layer
  // must keep its own bytes either way, and the results must not differ.
  std::vector<std::string> errors;
  const Shield fits = Shield{}.use(std::make_shared<Filler<200>>(1, errors));
  const Shield beyond = fits.use(std::make_shared<Filler<200>>(2, errors));
  const Shield repeated = beyond.use(std::make_shared<test::Repeat>(1))
                              .use(std::make_shared<Filler<200>>(3, errors));
  for (const Shield* s : {&fits, &beyond, &repeated}) {
    int calls = 0;
    EXPECT_EQ(s->execute([&] { return ++calls; }), 1);
    EXPECT_EQ(s->execute_outcome([] { return 5; }).value(), 5);
    int failures = 0;
    EXPECT_THROW(s->execute([&]() -> int {
      ++failures;
      throw Boom();
    }),
                 Boom);
    EXPECT_EQ(failures, s == &repeated ? 2 : 1);  // the repeater runs its inner part again
  }
  EXPECT_TRUE(errors.empty()) << errors.front();
}

TEST(SyncExecution, ThrowsTheOriginalExceptionObject) {
  const Boom* thrown = nullptr;
  auto fn = [&]() -> int {
    try {
      throw Boom();
    } catch (const Boom& b) {
      thrown = &b;
      throw;
    }
  };
  for (const Shield& shield : {Shield{}, Shield{}.use(std::make_shared<test::PassThrough>())}) {
    try {
      (void)shield.execute(fn);
      FAIL() << "no exception";
    } catch (const Boom& caught) {
      EXPECT_EQ(&caught, thrown) << shield.describe();
    }
  }
}

TEST(SyncExecution, StrategyErrorsThrowKevlarError) {
  const Shield shield = Shield{}.use(std::make_shared<test::Reject>(errc::circuit_open));
  bool ran = false;
  try {
    shield.execute([&] { ran = true; });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.error(), errc::circuit_open);
    EXPECT_EQ(e.code(), errc::circuit_open);
    EXPECT_FALSE(e.retry_after().has_value());
  }
  EXPECT_FALSE(ran);
}

TEST(SyncExecution, OutcomeFormDoesNotThrow) {
  const Shield shield = Shield{}.use(std::make_shared<test::PassThrough>());
  auto ok = shield.execute_outcome([] { return 5; });
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok.value(), 5);
  auto failed = shield.execute_outcome([]() -> int { throw Boom(); });
  ASSERT_TRUE(failed.has_exception());
  EXPECT_THROW(std::rethrow_exception(failed.exception()), Boom);
  auto rejected = Shield{}.use(std::make_shared<test::Reject>()).execute_outcome([] { return 1; });
  ASSERT_TRUE(rejected.has_error());
  EXPECT_EQ(rejected.error(), errc::circuit_open);
  auto v = Shield{}.execute_outcome([] {});
  EXPECT_TRUE(v.has_value());
}

TEST(SyncExecution, PreCancelledCallNeverRunsTheFunction) {
  std::stop_source source;
  source.request_stop();
  for (const Shield& shield : {Shield{}, Shield{}.use(std::make_shared<test::PassThrough>())}) {
    bool ran = false;
    try {
      shield.execute([&] { ran = true; }, source.get_token());
      FAIL() << "no exception";
    } catch (const Error& e) {
      EXPECT_TRUE(is_cancellation(e.error()));
    }
    auto outcome = shield.execute_outcome([&] { ran = true; }, source.get_token());
    ASSERT_TRUE(outcome.has_error());
    EXPECT_TRUE(is_cancellation(outcome.error()));
    EXPECT_FALSE(ran);
  }
}

TEST(SyncExecution, ContextSeesTheCallersStopToken) {
  std::stop_source source;
  const Shield shield = Shield{}.use(std::make_shared<test::PassThrough>());
  const bool seen = shield.execute(
      [&](Context& ctx) {
        EXPECT_FALSE(ctx.cancelled());
        source.request_stop();
        return ctx.cancelled();
      },
      source.get_token());
  EXPECT_TRUE(seen);
}

TEST(SyncExecution, OnlyTheOverloadsTakingATokenGiveTheContextOne) {
  std::stop_source source;
  const auto stoppable = [](Context& ctx) { return ctx.stop_token().stop_possible(); };
  for (const Shield& shield : {Shield{}, Shield{}.use(std::make_shared<test::PassThrough>())}) {
    EXPECT_FALSE(shield.execute(stoppable));
    EXPECT_FALSE(shield.execute_outcome(stoppable).value());
    EXPECT_FALSE(shield.execute(stoppable, {}));  // an empty token is none either
    EXPECT_TRUE(shield.execute(stoppable, source.get_token()));
    EXPECT_TRUE(shield.execute_outcome(stoppable, source.get_token()).value());
  }
}

TEST(SyncExecution, RepeaterReinvokesTheFunctionAndSurfacesTheLastFailure) {
  const Shield shield = Shield{}.use(std::make_shared<test::Repeat>(2));
  int calls = 0;
  std::vector<std::uint32_t> attempts;
  try {
    shield.execute([&](Context& ctx) -> int {
      attempts.push_back(ctx.attempt());
      throw std::runtime_error("failure " + std::to_string(++calls));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "failure 3");
  }
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(SyncExecution, ContextPropertiesPersistAcrossAttempts) {
  const Key<int> counter("counter");
  const Shield shield = Shield{}.use(std::make_shared<test::Repeat>(3));
  const int result = shield.execute([&](Context& ctx) {
    const int n = ctx.properties().get_or(counter, 0) + 1;
    ctx.properties().set(counter, n);
    if (n < 3) throw std::runtime_error("again");
    return n;
  });
  EXPECT_EQ(result, 3);
}

TEST(SyncExecution, AStrategyThatThrowsFailsTheExecutionWithItsException) {
  EventLog log;
  const Shield shield = Shield{}
                            .use(std::make_shared<Recorder>("outer", log))
                            .use(std::make_shared<test::Throwing>());
  bool ran = false;
  try {
    shield.execute([&] { ran = true; });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "strategy failed");
  }
  EXPECT_FALSE(ran);
  EXPECT_EQ(log.events(), (std::vector<std::string>{"outer:start", "outer:inner", "outer:finish"}));
}

TEST(SyncExecution, WaitsBlockOnTheShieldsClockUntilItIsAdvanced) {
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.use(std::make_shared<test::Delay>(std::chrono::seconds(5))).with_clock(clock);
  std::atomic<bool> done{false};
  std::jthread caller([&] {
    EXPECT_EQ(shield.execute([] { return 1; }), 1);
    done = true;
  });
  clock->wait_for_sleepers(1);
  clock->advance(std::chrono::seconds(4));
  EXPECT_EQ(clock->sleepers(), 1U);  // still blocked: the deadline is not reached
  EXPECT_FALSE(done.load());
  clock->advance(std::chrono::seconds(1));
  caller.join();
  EXPECT_TRUE(done.load());
}

TEST(SyncExecution, StoppingTheCallerCutsAWaitShort) {
  auto clock = ManualClock::create();
  const Shield shield =
      Shield{}.use(std::make_shared<test::Delay>(std::chrono::hours(1))).with_clock(clock);
  std::stop_source source;
  bool ran = false;
  std::jthread caller([&] {
    auto outcome = shield.execute_outcome([&] { ran = true; }, source.get_token());
    EXPECT_TRUE(outcome.has_error());
    EXPECT_TRUE(is_cancellation(outcome.error()));
  });
  clock->wait_for_sleepers(1);
  source.request_stop();
  caller.join();
  EXPECT_FALSE(ran);
}

TEST(SyncExecution, SuspendIsRefusedInSynchronousExecutions) {
  struct Suspender final : Strategy {
    std::string describe() const override { return "Suspender"; }
    Step on_start(Layer&) override { return Step::suspend; }
  };
  const Shield shield = Shield{}.use(std::make_shared<Suspender>());
  EXPECT_THROW(shield.execute([] {}), std::logic_error);
}

/// Hands the outcome its inner part produced to `probe`, then completes.
class OutcomeProbe final : public Strategy {
 public:
  explicit OutcomeProbe(std::function<void(OutcomeRef)> probe) : probe_(std::move(probe)) {}
  std::string describe() const override { return "OutcomeProbe"; }
  Step on_start(Layer&) override { return Step::run_inner; }
  Step on_inner_complete(Layer& layer) override {
    probe_(layer.outcome());
    return Step::complete;
  }

 private:
  std::function<void(OutcomeRef)> probe_;
};

TEST(SyncExecution, AVoidCallsOutcomeHasNoValueToReadOrReplace) {
  bool probed = false;
  Shield{}
      .use(std::make_shared<OutcomeProbe>([&](OutcomeRef o) {
        probed = true;
        EXPECT_EQ(o.value_type(), typeid(void));
        EXPECT_EQ(o.raw_value(), nullptr);
        EXPECT_EQ(o.value_if<int>(), nullptr);
        EXPECT_FALSE(o.is_cancellation()) << "a success is no cancellation";
        EXPECT_FALSE(o.set_value(1)) << "a void call takes no value";
        EXPECT_EQ(o.kind(), OutcomeKind::value);
      }))
      .execute([] {});
  EXPECT_TRUE(probed);
}

TEST(SyncExecution, AValuedCallsOutcomeTakesOnlyAValueOfItsOwnType) {
  const int v = Shield{}
                    .use(std::make_shared<OutcomeProbe>([](OutcomeRef o) {
                      EXPECT_EQ(o.value_if<long>(), nullptr) << "another type is absent";
                      ASSERT_NE(o.value_if<int>(), nullptr);
                      EXPECT_EQ(*o.value_if<int>(), 1);
                      EXPECT_FALSE(o.set_success()) << "a valued call needs a value";
                      EXPECT_FALSE(o.set_value(2L)) << "a value of another type is refused";
                      EXPECT_EQ(*o.value_if<int>(), 1) << "refusals change nothing";
                      EXPECT_TRUE(o.set_value(7));
                    }))
                    .execute([] { return 1; });
  EXPECT_EQ(v, 7);
}

TEST(SyncExecution, AFailedValuedCallsOutcomeHasNoValueUntilOneIsSet) {
  const int v = Shield{}
                    .use(std::make_shared<OutcomeProbe>([](OutcomeRef o) {
                      ASSERT_TRUE(o.has_exception());
                      EXPECT_EQ(o.value_type(), typeid(int));
                      EXPECT_EQ(o.raw_value(), nullptr) << "the function produced no value";
                      EXPECT_EQ(o.value_if<int>(), nullptr);
                      EXPECT_TRUE(o.set_value(9));
                      ASSERT_NE(o.value_if<int>(), nullptr);
                      EXPECT_EQ(*o.value_if<int>(), 9);
                    }))
                    .execute([]() -> int { throw std::runtime_error("no value"); });
  EXPECT_EQ(v, 9);
}

/// Cancels its inner part before running it, and records what it sees when the part completes.
class CancelInnerFirst final : public Strategy {
 public:
  std::string describe() const override { return "CancelInnerFirst"; }
  Step on_start(Layer& layer) override {
    layer.cancel_inner();
    return Step::run_inner;
  }
  Step on_inner_complete(Layer& layer) override {
    cancelled_inner = layer.cancelled_inner();
    cancelled_from_outside = layer.cancelled_from_outside();
    return Step::complete;
  }
  bool cancelled_inner = false;
  bool cancelled_from_outside = true;
};

TEST(SyncExecution, AStrategyCancellingItsInnerPartIsSeenThroughTheContext) {
  auto cancel = std::make_shared<CancelInnerFirst>();
  bool seen = false;
  const Outcome<int> o = Shield{}.use(cancel).execute_outcome([&](Context& ctx) {
    seen = ctx.cancelled();
    ctx.throw_if_cancelled();
    return 1;
  });
  EXPECT_TRUE(seen) << "a synchronous function sees the cancellation through its context";
  EXPECT_TRUE(cancel->cancelled_inner);
  EXPECT_FALSE(cancel->cancelled_from_outside) << "the strategy caused it itself";
  ASSERT_TRUE(o.has_exception());
  EXPECT_TRUE(detail::is_cancellation_exception(o.exception()));
}

}  // namespace
}  // namespace kevlar
