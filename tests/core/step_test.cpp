// kevlar::Step as a value: its kinds, a wait's deadline carried in the word, and equality.
#include <kevlar/layer.hpp>
#include <kevlar/step.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <type_traits>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using Kind = Step::Kind;

// One word, copied in a register.
static_assert(sizeof(Step) == sizeof(std::uint64_t));
static_assert(std::is_trivially_copyable_v<Step>);
// Usable in constant expressions.
static_assert(Step(Step::run_inner).kind() == Kind::run_inner);
static_assert(Step::wait_until(Clock::time_point(5s)).deadline() == Clock::time_point(5s));

Clock::time_point at(Clock::duration d) { return Clock::time_point(d); }

TEST(StepValue, ThePlainStepsHaveTheirKinds) {
  EXPECT_EQ(Step(Step::run_inner).kind(), Kind::run_inner);
  EXPECT_EQ(Step(Step::complete).kind(), Kind::complete);
  EXPECT_EQ(Step(Step::suspend).kind(), Kind::suspend);
  // A wait at the clock's epoch is still a wait, and no plain step.
  EXPECT_EQ(Step::wait_until(at(0s)).kind(), Kind::wait);
  EXPECT_NE(Step::wait_until(at(0s)), Step(Step::run_inner));
  EXPECT_NE(Step::wait_until(at(0s)), Step(Step::complete));
  EXPECT_NE(Step::wait_until(at(0s)), Step(Step::suspend));
}

TEST(StepValue, AWaitCarriesItsDeadline) {
  const Clock::duration deadlines[] = {Clock::duration(0), Clock::duration(1), 1ns * 123456789,
                                       3s, 24h * 365 * 30, -5s, Clock::duration(-1)};
  for (const Clock::duration d : deadlines) {
    const Step step = Step::wait_until(at(d));
    EXPECT_EQ(step.kind(), Kind::wait) << d.count();
    EXPECT_EQ(step.deadline(), at(d)) << d.count();
  }
}

TEST(StepValue, ADeadlineBeyondTheWordIsNeverOrAlreadyPast) {
  EXPECT_EQ(Step::wait_until(Clock::time_point::max()).deadline(), Clock::time_point::max());
  EXPECT_EQ(Step::wait_until(Clock::time_point::min()).deadline(), Clock::time_point::min());
  // 2^61 ns (about 73 years) does not fit beside the kind: kept as never.
  const auto far = at(Clock::duration(Clock::duration::rep{1} << 61));
  EXPECT_EQ(Step::wait_until(far).deadline(), Clock::time_point::max());
  EXPECT_EQ(Step::wait_until(far).kind(), Kind::wait);
  const auto early = at(-Clock::duration(Clock::duration::rep{1} << 61));
  EXPECT_EQ(Step::wait_until(early).deadline(), Clock::time_point::min());
  // The furthest deadlines that fit are kept exactly, both signs.
  const auto last = at(Clock::duration((Clock::duration::rep{1} << 61) - 2));
  EXPECT_EQ(Step::wait_until(last).deadline(), last);
  const auto first = at(-Clock::duration((Clock::duration::rep{1} << 61) - 2));
  EXPECT_EQ(Step::wait_until(first).deadline(), first);
  // A clock counting from 1970 (a reading of 2026 is 1.8e18 ns) is within the range.
  const auto unix_now = at(Clock::duration(1'796'000'000'000'000'000));
  EXPECT_EQ(Step::wait_until(unix_now + 5s).deadline(), unix_now + 5s);
}

TEST(StepValue, StepsAreEqualWhenTheyAskForTheSameThing) {
  EXPECT_EQ(Step::wait_until(at(2s)), Step::wait_until(at(2s)));
  EXPECT_NE(Step::wait_until(at(2s)), Step::wait_until(at(3s)));
  EXPECT_NE(Step::wait_until(at(0s)), Step(Step::run_inner));
  EXPECT_NE(Step(Step::run_inner), Step(Step::complete));
  EXPECT_TRUE(Step(Step::complete) == Step::complete);
  EXPECT_EQ(Layer::wait_until(at(4s)), Step::wait_until(at(4s)));
}

}  // namespace
}  // namespace kevlar
