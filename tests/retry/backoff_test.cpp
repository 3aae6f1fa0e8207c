// Backoff math, describe() strings, the shared duration format and option validation: all pure.
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

// g++ 12 reports designated initializers that leave out members with default initializers
// (the intended way to write kevlar's options) under -Wextra.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using detail::format_duration;

TEST(DurationFormat, UsesTheLargestUnitWithOneDecimal) {
  EXPECT_EQ(format_duration(0s), "0s");
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(100us), "0.1ms");
  EXPECT_EQ(format_duration(999ms), "999ms");
  EXPECT_EQ(format_duration(1s), "1s");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  EXPECT_EQ(format_duration(30s), "30s");
  EXPECT_EQ(format_duration(90s), "1.5m");
  EXPECT_EQ(format_duration(2min), "2m");
  EXPECT_EQ(format_duration(90min), "1.5h");
  EXPECT_EQ(format_duration(24h), "24h");
  EXPECT_EQ(format_duration(1249ms), "1.2s");
  EXPECT_EQ(format_duration(1250ms), "1.3s");  // rounded half away from zero
  EXPECT_EQ(format_duration(Clock::duration::max()), "infinite");
  EXPECT_EQ(format_duration(-1500ms), "-1.5s");
}

TEST(Backoff, DefaultIsExponential250msTimesTwoWithJitterCappedAt30s) {
  const Backoff b;
  EXPECT_EQ(b.kind(), Backoff::Kind::exponential);
  EXPECT_EQ(b.base(), 250ms);
  EXPECT_EQ(b.factor(), 2.0);
  EXPECT_TRUE(b.jitter());
  ASSERT_TRUE(b.max_delay().has_value());
  EXPECT_EQ(*b.max_delay(), 30s);
  EXPECT_EQ(b.describe(), "exponential 250ms x2 +jitter <=30s");
  // u = 0.5 is the neutral jitter factor 1.0.
  EXPECT_EQ(b.delay(1, 0.5), 250ms);
  EXPECT_EQ(b.delay(2, 0.5), 500ms);
  EXPECT_EQ(b.delay(3, 0.5), 1s);
  EXPECT_EQ(b.delay(8, 0.5), 30s);  // 32 s capped
  EXPECT_EQ(b.delay(1000, 0.99), 30s);
}

TEST(Backoff, ConstantAndNone) {
  EXPECT_EQ(Backoff::constant(1s).delay(1), 1s);
  EXPECT_EQ(Backoff::constant(1s).delay(50), 1s);
  EXPECT_EQ(Backoff::none().delay(3), 0s);
  EXPECT_EQ(Backoff::constant(1s).describe(), "constant 1s");
  EXPECT_EQ(Backoff::none().describe(), "no delay");
  EXPECT_EQ(Backoff::constant(0s).describe(), "no delay");
}

TEST(Backoff, LinearIsStepTimesAttemptAndOverflowSafe) {
  const Backoff b = Backoff::linear(500ms);
  EXPECT_EQ(b.delay(1), 500ms);
  EXPECT_EQ(b.delay(2), 1s);
  EXPECT_EQ(b.delay(7), 3500ms);
  EXPECT_EQ(b.describe(), "linear 500ms steps");
  // Implicit one-day cap, and no overflow near the int limit.
  EXPECT_EQ(b.delay(std::numeric_limits<int>::max()), Backoff::implicit_cap);
  EXPECT_EQ(Backoff::linear(Clock::duration::max() / 2).delay(3), Backoff::implicit_cap);
  const Backoff capped = Backoff::linear(500ms, 2s);
  EXPECT_EQ(capped.delay(3), 1500ms);
  EXPECT_EQ(capped.delay(5), 2s);
  EXPECT_EQ(capped.describe(), "linear 500ms steps <=2s");
}

TEST(Backoff, ExponentialWithoutJitterMultipliesByTheFactor) {
  const Backoff b = Backoff::exponential(100ms, 3.0, std::nullopt, false);
  EXPECT_EQ(b.delay(1), 100ms);
  EXPECT_EQ(b.delay(2), 300ms);
  EXPECT_EQ(b.delay(3), 900ms);
  EXPECT_EQ(b.describe(), "exponential 100ms x3");
  EXPECT_EQ(Backoff::exponential(1s, 1.5, 10s, false).describe(), "exponential 1s x1.5 <=10s");
  // Implicit one-day cap; the power overflowing to infinity is the cap, not UB.
  EXPECT_EQ(b.delay(40), Backoff::implicit_cap);
  EXPECT_EQ(b.delay(std::numeric_limits<int>::max()), Backoff::implicit_cap);
  // A zero initial delay stays zero even when the power overflows (0 * inf would be NaN).
  EXPECT_EQ(Backoff::exponential(0s, 10.0).delay(std::numeric_limits<int>::max()), 0s);
}

TEST(Backoff, JitterIsUniformInHalfToOneAndAHalfOfTheBase) {
  const Backoff b = Backoff::exponential(1s, 2.0, std::nullopt, true);
  EXPECT_EQ(b.delay(1, 0.0), 500ms);
  EXPECT_EQ(b.delay(2, 0.25), 1500ms);
  EXPECT_LT(b.delay(1, 0.999999), 1500ms);
  EXPECT_GE(b.delay(1, 0.999999), 1499ms);
  // Out-of-range samples are clamped into [0, 1).
  EXPECT_EQ(b.delay(1, -3.0), 500ms);
  EXPECT_EQ(b.delay(1, std::nan("")), 500ms);
  EXPECT_LT(b.delay(1, 7.0), 1500ms);

  // An injected source makes delay(attempt) deterministic.
  std::vector<double> samples{0.0, 0.5, 0.75};
  std::size_t next = 0;
  const Backoff fixed = b.with_random([&] { return samples[next++ % samples.size()]; });
  EXPECT_EQ(fixed.delay(1), 500ms);
  EXPECT_EQ(fixed.delay(2), 2s);
  EXPECT_EQ(fixed.delay(3), 5s);
  EXPECT_EQ(next, 3U);
  // Without jitter the source is never drawn.
  const Backoff plain = Backoff::exponential(1s, 2.0, std::nullopt, false).with_random([&] {
    ++next;
    return 0.0;
  });
  EXPECT_EQ(plain.delay(2), 2s);
  EXPECT_EQ(next, 3U);
}

TEST(Backoff, PerThreadJitterStaysInRange) {
  const Backoff b = Backoff::exponential(1s, 2.0, std::nullopt, true);
  bool below = false;
  bool above = false;
  for (int i = 0; i < 2000; ++i) {
    const Clock::duration d = b.delay(1);
    ASSERT_GE(d, 500ms);
    ASSERT_LT(d, 1500ms);
    below = below || d < 1s;
    above = above || d > 1s;
  }
  EXPECT_TRUE(below && above) << "the jitter should spread on both sides of the base";
}

TEST(Backoff, CustomReceivesAttemptNumbersAndIsClamped) {
  std::vector<int> seen;
  const Backoff b = Backoff::custom([&](int attempt) -> Clock::duration {
    seen.push_back(attempt);
    if (attempt == 2) return -5s;
    if (attempt == 3) return 400h * 24;
    return std::chrono::milliseconds(attempt * 10);
  });
  EXPECT_EQ(b.delay(1), 10ms);
  EXPECT_EQ(b.delay(2), 0s);
  EXPECT_EQ(b.delay(3), Backoff::max_delay_limit);
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(b.describe(), "custom backoff");
}

/// Asserts `fn` throws std::invalid_argument whose message contains `needle`.
template <class F>
void expect_invalid(F fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Backoff, InvalidArgumentsAreRefusedNamingTheArgument) {
  expect_invalid([] { (void)Backoff::constant(-1ms); }, "delay");
  expect_invalid([] { (void)Backoff::constant(Backoff::max_delay_limit + 1ms); }, "delay");
  expect_invalid([] { (void)Backoff::linear(-1ms); }, "step");
  expect_invalid([] { (void)Backoff::linear(1s, -1s); }, "max_delay");
  expect_invalid([] { (void)Backoff::exponential(-1ms); }, "initial");
  expect_invalid([] { (void)Backoff::exponential(1s, 0.5); }, "factor");
  expect_invalid([] { (void)Backoff::exponential(1s, std::nan("")); }, "factor");
  expect_invalid([] { (void)Backoff::exponential(1s, std::numeric_limits<double>::infinity()); },
                 "factor");
  expect_invalid([] { (void)Backoff::exponential(1s, 2.0, Backoff::max_delay_limit + 1ns); },
                 "max_delay");
  expect_invalid([] { (void)Backoff::custom({}); }, "function");
  expect_invalid([] { (void)Backoff{}.delay(0); }, "attempt");
  expect_invalid([] { (void)Backoff{}.delay(-1, 0.5); }, "attempt");
  EXPECT_NO_THROW((void)Backoff::constant(Backoff::max_delay_limit));
  EXPECT_NO_THROW((void)Backoff::exponential(0s, 1.0, 0s));
}

TEST(RetryDescribe, MatchesKevlarsStringsInAscii) {
  EXPECT_EQ(Shield{}.retry().describe(), "Retry(3, exponential 250ms x2 +jitter <=30s)");
  EXPECT_EQ(
      Shield{}.retry(RetryOptions{.max_retries = 2, .backoff = Backoff::constant(1s)}).describe(),
      "Retry(2, constant 1s)");
  EXPECT_EQ(Shield{}.retry(RetryOptions{.max_retries = 1, .backoff = Backoff::none()}).describe(),
            "Retry(1, no delay)");
  EXPECT_EQ(
      Shield{}.retry(RetryOptions{.max_retries = 1, .backoff = Backoff::linear(500ms)}).describe(),
      "Retry(1, linear 500ms steps)");
  EXPECT_EQ(
      Shield{}
          .retry(RetryOptions{.max_retries = 2, .backoff = Backoff::constant(1s), .max_delay = 10s})
          .describe(),
      "Retry(2, constant 1s, <=10s)");
  EXPECT_EQ(Shield{}.retry(RetryOptions{.max_retries = retry_forever}).describe(),
            "RetryForever(exponential 250ms x2 +jitter <=30s)");
  EXPECT_EQ(
      Shield{}
          .retry(RetryOptions{.max_retries = 1, .backoff = Backoff::custom([](int) { return 1s; })})
          .describe(),
      "Retry(1, custom backoff)");
  EXPECT_EQ(Shield{}.retry(1).retry(2).with_name("api").describe(),
            "api: Retry(1, exponential 250ms x2 +jitter <=30s) -> "
            "Retry(2, exponential 250ms x2 +jitter <=30s)");
}

TEST(RetryOptionsValidation, IsCheckedWhenTheShieldIsBuilt) {
  expect_invalid([] { (void)Shield{}.retry(-1); }, "max_retries");
  expect_invalid([] { (void)Shield{}.retry(RetryOptions{.max_delay = -1s}); }, "max_delay");
  expect_invalid(
      [] { (void)Shield{}.retry(RetryOptions{.max_delay = Backoff::max_delay_limit + 1ms}); },
      "max_delay");
  EXPECT_NO_THROW((void)Shield{}.retry(0));
  EXPECT_NO_THROW((void)Shield{}.retry(RetryOptions{.max_delay = 0s}));
}

TEST(RetryStrategy, PlannedDelayAppliesMaxDelayToTheBackoff) {
  const RetryStrategy s(
      RetryOptions{.max_retries = 5, .backoff = Backoff::linear(4s), .max_delay = 10s});
  EXPECT_EQ(s.planned_delay(1), 4s);
  EXPECT_EQ(s.planned_delay(2), 8s);
  EXPECT_EQ(s.planned_delay(3), 10s);
  EXPECT_EQ(s.traits().role, StrategyRole::reactive);
  EXPECT_FALSE(s.traits().stateful);
}

}  // namespace
}  // namespace kevlar
