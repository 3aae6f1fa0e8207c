// The jitter kinds of the built-in backoffs: each formula at its edges with explicit samples,
// which kinds draw a sample, decorrelated jitter's dependence on the previous delay (in Backoff
// and through a retrying execution on the strategy driver), caps, descriptions and bad input.
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using testing::StrategyDriver;

TEST(Jitter, EqualIsHalfTheDelayPlusAUniformHalf) {
  const Backoff b = Backoff::exponential(1s, 2.0, std::nullopt, Jitter::equal);
  EXPECT_EQ(b.delay(1, 0.0), 500ms);
  EXPECT_EQ(b.delay(1, 0.5), 750ms);
  EXPECT_EQ(b.delay(2, 0.0), 1s);
  EXPECT_LT(b.delay(1, 0.999999999), 1s);
  EXPECT_EQ(b.jitter_kind(), Jitter::equal);
  EXPECT_TRUE(b.jitter());
}

TEST(Jitter, FullIsUniformFromZeroToTheDelay) {
  const Backoff b = Backoff::exponential(1s, 2.0, std::nullopt, Jitter::full);
  EXPECT_EQ(b.delay(1, 0.0), 0s);
  EXPECT_EQ(b.delay(1, 0.25), 250ms);
  EXPECT_EQ(b.delay(3, 0.5), 2s);
  EXPECT_LT(b.delay(1, 0.999999999), 1s);
}

TEST(Jitter, ProportionalIsTheDefaultAndTheBooleanShorthand) {
  EXPECT_EQ(Backoff{}.jitter_kind(), Jitter::proportional);
  EXPECT_EQ(Backoff::exponential(1s).jitter_kind(), Jitter::proportional);
  EXPECT_EQ(Backoff::exponential(1s, 2.0, std::nullopt, false).jitter_kind(), Jitter::none);
  const Backoff b = Backoff::exponential(1s, 2.0, std::nullopt, Jitter::proportional);
  EXPECT_EQ(b.delay(1, 0.0), 500ms);
  EXPECT_EQ(b.delay(1, 0.5), 1s);
}

TEST(Jitter, ConstantAndLinearTakeJitterToo) {
  const Backoff c = Backoff::constant(2s, Jitter::full);
  EXPECT_EQ(c.delay(1, 0.5), 1s);
  EXPECT_EQ(c.delay(9, 0.25), 500ms);
  EXPECT_EQ(c.describe(), "constant 2s +full jitter");
  const Backoff l = Backoff::linear(1s, 5s, Jitter::equal);
  EXPECT_EQ(l.delay(3, 0.0), 1500ms);
  EXPECT_EQ(l.delay(3, 0.5), 2250ms);
  // AWS's order: 20 s capped to 5 s first, then jittered in [2.5 s, 5 s): never stuck at the cap.
  EXPECT_EQ(l.delay(20, 0.0), 2500ms);
  EXPECT_LT(l.delay(20, 0.999), 5s);
  const Backoff f = Backoff::exponential(250ms, 2.0, 30s, Jitter::full);
  EXPECT_EQ(f.delay(12, 0.5), 15s);  // 512 s capped to 30 s, then half of it
  EXPECT_EQ(l.describe(), "linear 1s steps +equal jitter <=5s");
  // Proportional jitter can carry a constant above its value, never above the limit.
  const Backoff top = Backoff::constant(Backoff::max_delay_limit, Jitter::proportional);
  EXPECT_EQ(top.delay(1, 0.99), Backoff::max_delay_limit);
  EXPECT_EQ(Backoff::constant(1s).jitter_kind(), Jitter::none);
}

TEST(Jitter, DecorrelatedDrawsBetweenTheBaseAndThreeTimesThePreviousDelay) {
  const Backoff b = Backoff::exponential(100ms, 2.0, 10s, Jitter::decorrelated);
  // First retry: no previous delay, so [base, 3 * base].
  EXPECT_EQ(b.delay(1, 0.0), 100ms);
  EXPECT_EQ(b.delay(1, 0.5), 200ms);
  // Later: [base, 3 * previous]; the curve's factor plays no part.
  EXPECT_EQ(b.delay(4, 0.0, 1s), 100ms);
  EXPECT_EQ(b.delay(4, 0.5, 1s), 1550ms);
  EXPECT_EQ(b.delay(2, 0.5, 30ms), 100ms);  // 3 * 30 ms below the base: the base
  // Capped by max_delay.
  EXPECT_EQ(b.delay(5, 0.9, 9s), 10s);
  EXPECT_EQ(b.describe(), "exponential 100ms x2 +decorrelated jitter <=10s");
  // A constant zero with decorrelated jitter stays zero, and says so.
  EXPECT_EQ(Backoff::constant(0s, Jitter::decorrelated).delay(3, 0.7, 0s), 0s);
}

TEST(Jitter, DelayWithoutAPreviousReplaysTheDrawsFromTheBase) {
  std::vector<double> samples{0.5, 0.5, 0.5};
  std::size_t next = 0;
  const Backoff b = Backoff::constant(100ms, Jitter::decorrelated).with_random([&] {
    return samples.at(next++);
  });
  // 100 ms -> 200 ms (u 0.5 of [100, 300]) -> 350 ms (of [100, 600]) -> 575 ms (of [100, 1050]).
  EXPECT_EQ(b.delay(3), 575ms);
  EXPECT_EQ(next, 3u);
}

TEST(Jitter, OnlyJitteredBackoffsDrawASample) {
  int draws = 0;
  auto source = [&draws] {
    ++draws;
    return 0.5;
  };
  (void)Backoff::constant(1s).with_random(source).delay(1);
  (void)Backoff::linear(1s).with_random(source).delay(2);
  (void)Backoff::exponential(1s, 2.0, std::nullopt, Jitter::none).with_random(source).delay(3);
  (void)Backoff::custom([](int) { return 1s; }).with_random(source).delay(1);
  EXPECT_EQ(draws, 0);
  for (const Jitter j : {Jitter::proportional, Jitter::equal, Jitter::full, Jitter::decorrelated}) {
    (void)Backoff::linear(1s, std::nullopt, j).with_random(source).delay(1, 0s);
  }
  EXPECT_EQ(draws, 4);
}

TEST(Jitter, AnUnknownKindIsRefused) {
  const auto bad = static_cast<Jitter>(9);
  EXPECT_THROW((void)Backoff::constant(1s, bad), std::invalid_argument);
  EXPECT_THROW((void)Backoff::linear(1s, std::nullopt, bad), std::invalid_argument);
  EXPECT_THROW((void)Backoff::exponential(1s, 2.0, std::nullopt, bad), std::invalid_argument);
  EXPECT_EQ(std::string(to_string(Jitter::decorrelated)), "decorrelated");
  EXPECT_EQ(std::string(to_string(Jitter::none)), "none");
}

TEST(Jitter, EveryKindHasItsNameAndAnUnknownOneIsNamedUnknown) {
  EXPECT_EQ(std::string(to_string(Jitter::proportional)), "proportional");
  EXPECT_EQ(std::string(to_string(Jitter::equal)), "equal");
  EXPECT_EQ(std::string(to_string(Jitter::full)), "full");
  EXPECT_EQ(std::string(to_string(static_cast<Jitter>(9))), "unknown");
}

TEST(Jitter, EqualJitterOfAZeroDelayIsZero) {
  const Backoff b = Backoff::constant(0s, Jitter::equal);
  EXPECT_EQ(b.delay(1, 0.0, 0s), 0s);
  EXPECT_EQ(b.delay(1, 0.999, 0s), 0s);
}

// A decorrelated backoff from 0 still draws (from 0 up to three times the previous delay), so it
// is described by its base and jitter, not as "no delay".
TEST(Jitter, ADecorrelatedBackoffFromZeroIsNotDescribedAsNoDelay) {
  EXPECT_EQ(Backoff::constant(0s, Jitter::decorrelated).describe(),
            "constant 0s +decorrelated jitter");
  EXPECT_EQ(Backoff::constant(0s, Jitter::full).describe(), "no delay");
}

// Through an execution: each retry's decorrelated delay is drawn from the backoff's previous
// delay capped by max_delay, before the delay generator (as Kevlar does): a generator's long delay
// does not inflate the next draw.
TEST(Jitter, ARetryFeedsDecorrelatedJitterItsPreviousBackoffDelay) {
  RetryOptions o;
  o.max_retries = 3;
  o.backoff = Backoff::constant(100ms, Jitter::decorrelated).with_random([] { return 0.5; });
  int n = 0;
  // The second retry's delay (350 ms, of [100, 600]) is replaced by 1 s: the third is still drawn
  // from [100 ms, 3 * 350 ms], not from [100 ms, 3 s].
  o.delay_generator = [&n](const RetryEvent& e) -> std::optional<Clock::duration> {
    if (++n == 2) return 1s;
    return e.delay;
  };
  StrategyDriver<int> d{Shield{}.retry(o)};
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  EXPECT_EQ(d.timers(), std::vector<Clock::duration>{200ms});  // [100, 300] at 0.5
  d.advance(200ms);
  d.fail(1, boost::asio::error::connection_reset);
  EXPECT_EQ(d.timers(), std::vector<Clock::duration>{1s});
  d.advance(1s);
  d.fail(2, boost::asio::error::connection_reset);
  EXPECT_EQ(d.timers(), std::vector<Clock::duration>{575ms});  // [100, 1050] at 0.5
  const auto events = d.events_of<RetryScheduled>();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].delay, 1s);
  EXPECT_EQ(events[2].delay, 575ms);
}

// Rounding can carry d/2 + u * d/2 up to d itself for u just below 1 (here 1.5 + (3 - 2^-51) / 2
// ties to 3): equal jitter still stays strictly below the delay.
TEST(Jitter, EqualJitterStaysBelowTheDelayWhenRoundingReachesIt) {
  const Backoff b = Backoff::constant(3ns, Jitter::equal);
  EXPECT_LT(b.delay(1, 1.0, 0s), 3ns);
  EXPECT_EQ(b.delay(1, 1.0, 0s), 2ns);
  EXPECT_EQ(b.delay(1, 0.0, 0s), 1ns);
}

// A synchronous delay generator on the driver: no value and a negative one keep the backoff's
// delay, a value replaces it and is capped by max_delay, and a zero one retries at once.
TEST(Jitter, ADelayGeneratorKeepsTheBackoffDelayUnlessItReturnsAUsableValue) {
  RetryOptions o;
  o.max_retries = 4;
  o.backoff = Backoff::constant(100ms);
  o.max_delay = 1min;
  int n = 0;
  o.delay_generator = [&n](const RetryEvent&) -> std::optional<Clock::duration> {
    switch (++n) {
      case 1:
        return std::nullopt;
      case 2:
        return -1ns;
      case 3:
        return 2h;
      default:
        return 0s;
    }
  };
  StrategyDriver<int> d{Shield{}.retry(o)};
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  EXPECT_EQ(d.timers(), std::vector<Clock::duration>{100ms});
  d.advance(100ms);
  d.fail(1, boost::asio::error::connection_reset);
  EXPECT_EQ(d.timers(), std::vector<Clock::duration>{100ms});
  d.advance(100ms);
  d.fail(2, boost::asio::error::connection_reset);
  EXPECT_EQ(d.timers(), std::vector<Clock::duration>{1min});
  d.advance(1min);
  d.fail(3, boost::asio::error::connection_reset);
  EXPECT_TRUE(d.timers().empty());
  EXPECT_EQ(d.attempts(), 5u);
  const auto events = d.events_of<RetryScheduled>();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].delay, 100ms);
  EXPECT_EQ(events[1].delay, 100ms);
  EXPECT_EQ(events[2].delay, 1min);
  EXPECT_EQ(events[3].delay, 0s);
}

}  // namespace
}  // namespace kevlar
