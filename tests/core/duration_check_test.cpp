// detail::check_duration: the range check of durations the strategies share, and its message.
#include <kevlar/detail/duration_check.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using detail::DurationFloor;
using detail::DurationRole;

constexpr Clock::duration longest = std::chrono::milliseconds(4294967294LL);

/// The message check_duration throws for `d`, or "accepted".
std::string refusal(Clock::duration d, DurationFloor floor,
                    DurationRole role = DurationRole::option, const char* alternative = "") {
  try {
    EXPECT_EQ(detail::check_duration(d, longest, floor, "kevlar::Options::x", role, alternative),
              d);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(DurationCheck, BoundsAreInclusiveAtTheMaximumAndTheFloorDecidesZero) {
  EXPECT_EQ(refusal(longest, DurationFloor::positive), "accepted");
  EXPECT_EQ(refusal(1ns, DurationFloor::positive), "accepted");
  EXPECT_NE(refusal(0s, DurationFloor::positive), "accepted");
  EXPECT_EQ(refusal(0s, DurationFloor::zero), "accepted");
  EXPECT_NE(refusal(-1ns, DurationFloor::zero), "accepted");
  EXPECT_NE(refusal(longest + 1ns, DurationFloor::zero), "accepted");
  static_assert(detail::duration_in_range(longest, longest, DurationFloor::positive));
  static_assert(
      !detail::duration_in_range(Clock::duration::zero(), longest, DurationFloor::positive));
}

TEST(DurationCheck, TheMessageNamesTheOptionTheRangeAndTheValue) {
  EXPECT_EQ(refusal(-1s, DurationFloor::positive),
            "kevlar::Options::x must be positive and at most 4294967294 ms (1193h) "
            "(got -1s, -1000000000 ns)");
  EXPECT_EQ(refusal(longest + 1ms, DurationFloor::zero),
            "kevlar::Options::x must be between 0 and 4294967294 ms (1193h) "
            "(got 1193h, 4294967295000000 ns)");
}

TEST(DurationCheck, AReturnedDurationIsWordedAsAResult) {
  EXPECT_EQ(refusal(0s, DurationFloor::positive, DurationRole::result),
            "kevlar::Options::x must return a positive duration of at most 4294967294 ms (1193h) "
            "(got 0s, 0 ns)");
  EXPECT_EQ(refusal(-2ms, DurationFloor::zero, DurationRole::result),
            "kevlar::Options::x must return a duration between 0 and 4294967294 ms (1193h) "
            "(got -2ms, -2000000 ns)");
}

TEST(DurationCheck, AnAlternativeFollowsTheRange) {
  EXPECT_EQ(refusal(-1ms, DurationFloor::zero, DurationRole::option, "Options::infinite"),
            "kevlar::Options::x must be between 0 and 4294967294 ms (1193h), or Options::infinite "
            "(got -1ms, -1000000 ns)");
}

TEST(DurationCheck, AMaximumThatIsNoWholeNumberOfMillisecondsIsGivenInNanoseconds) {
  EXPECT_EQ(detail::duration_range_message(2ms, 1500us, DurationFloor::positive, "x"),
            "x must be positive and at most 1500000 ns (1.5ms) (got 2ms, 2000000 ns)");
}

}  // namespace
}  // namespace kevlar
