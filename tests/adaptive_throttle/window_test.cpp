// The adaptive throttle's window (detail::ThrottleWindow) on its own: buckets aligned on the
// clock's timeline, the ring's slots (the buckets rounded up to a power of two) reused generation
// after generation, a writer whose clock is a whole ring behind, requests taken back, the
// remembered bucket, and negative time points.
#include <kevlar/adaptive_throttle.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace kevlar::detail {
namespace {

using namespace std::chrono_literals;
using Counts = ThrottleWindow::Counts;

Clock::time_point at(Clock::duration d) {
  return Clock::time_point(d);
}

TEST(ThrottleWindow, TheWindowIsTheCurrentBucketAndThoseBeforeIt) {
  ThrottleWindow w(10s, 10);  // buckets of 1 s, in a ring of 16 slots
  EXPECT_EQ(w.bucket_width(), 1s);
  EXPECT_EQ(w.length(), 10s);
  EXPECT_EQ(w.buckets(), 10u);
  EXPECT_EQ(w.slots(), 16u);
  (void)w.add_request(at(100s + 500ms));  // bucket 100
  w.add_accept(at(100s + 999ms));
  (void)w.add_request(at(103s));  // bucket 103
  EXPECT_EQ(w.counts(at(100s)).requests, 1u);
  EXPECT_EQ(w.counts(at(99s + 999ms)).requests, 0u) << "bucket 100 is later than now";
  EXPECT_EQ(w.counts(at(103s)).requests, 2u);
  EXPECT_EQ(w.counts(at(109s + 999ms)).requests, 2u);
  EXPECT_EQ(w.counts(at(109s + 999ms)).accepts, 1u);
  EXPECT_EQ(w.counts(at(110s)).requests, 1u) << "bucket 100 left the window at 110 s";
  EXPECT_EQ(w.counts(at(110s)).accepts, 0u);
  EXPECT_EQ(w.counts(at(113s)).requests, 0u);
}

TEST(ThrottleWindow, AnAcceptJoinsItsRequestsBucketUnlessThatBucketHasExpired) {
  ThrottleWindow w(10s, 10);  // buckets of 1 s, in a ring of 16 slots
  const std::int64_t b = w.add_request(at(100s));
  (void)w.add_request(at(103s));
  w.add_accept_in(b);  // completed at 103 s, counted in bucket 100 with its request
  EXPECT_EQ(w.counts(at(109s)).accepts, 1u);
  EXPECT_EQ(w.counts(at(110s)).accepts, 0u) << "it left the window with its request";
  EXPECT_EQ(w.counts(at(110s)).requests, 1u);
  // Bucket 116 takes slot 100's place: an accept for bucket 100 arriving now adds nothing.
  (void)w.add_request(at(116s));
  w.add_accept_in(b);  // the accepts word is still bucket 100's: counted there, out of the window
  EXPECT_EQ(w.counts(at(116s)).accepts, 0u);
  w.add_accept_in(w.add_request(at(116s)));
  EXPECT_EQ(w.counts(at(116s)).accepts, 1u) << "bucket 116's first accept resets the word";
  w.add_accept_in(b);
  EXPECT_EQ(w.counts(at(116s)).accepts, 1u) << "a newer bucket owns the word: dropped";
  EXPECT_EQ(w.counts(at(116s)).requests, 2u);
}

TEST(ThrottleWindow, ASlotIsResetByTheFirstWriteOfItsNextGeneration) {
  ThrottleWindow w(10s, 10);
  for (int i = 0; i < 5; ++i) (void)w.add_request(at(100s));
  EXPECT_EQ(w.add_request(at(116s)), 116) << "the same slot, one ring (16 buckets) later";
  (void)w.add_request(at(116s + 1ms));
  EXPECT_EQ(w.counts(at(116s)).requests, 2u) << "the old bucket's 5 were not reset";
  EXPECT_EQ(w.counts(at(109s)).requests, 0u) << "bucket 100's slot holds bucket 116 now";
  // Twenty rings later, the slot's tag is still told apart.
  EXPECT_EQ(w.counts(at(436s)).requests, 0u);
  (void)w.add_request(at(436s));
  EXPECT_EQ(w.counts(at(436s)).requests, 1u);
}

TEST(ThrottleWindow, AWriterAWholeRingBehindCountsInTheNewerBucket) {
  ThrottleWindow w(10s, 10);
  (void)w.add_request(at(116s));  // slot 4, generation 7
  // A thread that read the clock at 100 s (slot 4, generation 6) writes after it.
  EXPECT_EQ(w.add_request(at(100s)), 116);
  EXPECT_EQ(w.counts(at(116s)).requests, 2u) << "a count was lost or went backwards";
}

TEST(ThrottleWindow, ARequestIsTakenBackFromItsBucketOnlyWhileTheBucketLives) {
  ThrottleWindow w(10s, 10);
  const std::int64_t a = w.add_request(at(100s));
  const std::int64_t b = w.add_request(at(101s));
  EXPECT_EQ(a, 100);
  EXPECT_EQ(b, 101);
  w.remove_request(a);
  EXPECT_EQ(w.counts(at(101s)).requests, 1u);
  w.remove_request(a);  // nothing left in that bucket: never below zero
  EXPECT_EQ(w.counts(at(101s)).requests, 1u);
  (void)w.add_request(at(117s));  // bucket 117 takes bucket 101's slot
  w.remove_request(b);            // bucket 101 has left the ring: nothing to take back
  EXPECT_EQ(w.counts(at(117s)).requests, 1u);
}

TEST(ThrottleWindow, AnEmptiedWordIsResetByTheNextWriteWhateverItsGeneration) {
  ThrottleWindow w(10s, 10);
  const std::int64_t late = w.add_request(at(116s));
  w.remove_request(late);  // the slot holds generation 7 with nothing in it
  EXPECT_EQ(w.add_request(at(100s)), 100) << "an empty word is not a newer bucket";
  EXPECT_EQ(w.counts(at(100s)).requests, 1u);
}

TEST(ThrottleWindow, TheRememberedBucketFollowsTheClockBothWays) {
  ThrottleWindow w(10s, 10);
  EXPECT_EQ(w.position(at(100s + 500ms)).bucket, 100);
  EXPECT_EQ(w.position(at(100s)).bucket, 100);
  EXPECT_EQ(w.position(at(101s) - 1ns).bucket, 100);
  EXPECT_EQ(w.position(at(101s)).bucket, 101);
  EXPECT_EQ(w.position(at(100s + 999ms)).bucket, 100) << "an earlier time after a later one";
  EXPECT_EQ(w.position(at(-1ns)).bucket, -1);
  const ThrottleWindow::Position p = w.position(at(-1ns));
  EXPECT_EQ(p.slot, 15u);
  EXPECT_EQ(p.tag, 0xFFFF'FFFFu) << "generation -1";
  EXPECT_EQ(w.position(at(0s)).bucket, 0);
  // The ends of the range: floor division, no overflow.
  constexpr std::int64_t top = Clock::time_point::max().time_since_epoch().count();
  constexpr std::int64_t bottom = Clock::time_point::min().time_since_epoch().count();
  EXPECT_EQ(w.position(Clock::time_point::max()).bucket, top / 1'000'000'000);
  EXPECT_EQ(w.position(Clock::time_point::min()).bucket, bottom / 1'000'000'000 - 1);
}

TEST(ThrottleWindow, RecentRemembersTheClosedBucketsOncePerBucket) {
  ThrottleWindow w(10s, 10);
  for (int s = 100; s < 115; ++s) {
    for (int i = 0; i <= s % 3; ++i) (void)w.add_request(at(std::chrono::seconds(s)));
    if (s % 2 == 0) w.add_accept(at(std::chrono::seconds(s)));
  }
  // Across the ring's end (slots 15, 0, 1 ...) and within it, recent() sums what counts() does.
  for (int s = 100; s < 130; ++s) {
    const ThrottleWindow::Position p = w.position(at(std::chrono::seconds(s)));
    const Counts exact = w.counts(p);
    const Counts first = w.recent(p);   // makes the pass, remembers it
    const Counts second = w.recent(p);  // from the remembered sums
    EXPECT_EQ(first.requests, exact.requests) << s;
    EXPECT_EQ(first.accepts, exact.accepts) << s;
    EXPECT_EQ(second.requests, exact.requests) << s;
    EXPECT_EQ(second.accepts, exact.accepts) << s;
  }
}

TEST(ThrottleWindow, RecentSeesTheCurrentBucketLiveAndClosedOnesAsRemembered) {
  ThrottleWindow w(10s, 10);
  const std::int64_t old = w.add_request(at(100s));
  (void)w.add_request(at(101s));
  const ThrottleWindow::Position p = w.position(at(101s));
  EXPECT_EQ(w.recent(p).requests, 2u);
  (void)w.add_request(p);  // the current bucket: seen at once
  EXPECT_EQ(w.recent(p).requests, 3u);
  w.remove_request(old);  // a closed bucket: counts() sees it now, recent() from the next bucket
  EXPECT_EQ(w.counts(p).requests, 2u);
  EXPECT_EQ(w.recent(p).requests, 3u);
  EXPECT_EQ(w.recent(w.position(at(102s))).requests, 2u);
  // An earlier time than the remembered bucket makes its own pass and remembers nothing.
  EXPECT_EQ(w.recent(w.position(at(100s))).requests, 0u);
  EXPECT_EQ(w.recent(w.position(at(102s))).requests, 2u);
}

TEST(ThrottleWindow, NegativeTimePointsFallInTheBucketBelowThem) {
  ThrottleWindow w(10s, 10);
  EXPECT_EQ(w.add_request(at(-1ns)), -1);
  EXPECT_EQ(w.add_request(at(-9s)), -9);
  EXPECT_EQ(w.counts(at(-1ns)).requests, 2u);
  EXPECT_EQ(w.counts(at(0s)).requests, 2u);
  EXPECT_EQ(w.counts(at(1s)).requests, 1u) << "bucket -9 left the window at 1 s";
  EXPECT_EQ(w.counts(at(9s - 1ns)).requests, 1u);
  EXPECT_EQ(w.counts(at(9s)).requests, 0u);
  w.remove_request(-1);
  EXPECT_EQ(w.counts(at(-1ns)).requests, 1u);
}

TEST(ThrottleWindow, AWindowThatIsNotAMultipleOfItsBucketsIsCutToWholeNanoseconds) {
  ThrottleWindow w(1s, 7);
  EXPECT_EQ(w.bucket_width(), 142857142ns);
  EXPECT_EQ(w.length(), 999999994ns);
  EXPECT_EQ(w.buckets(), 7u);
}

TEST(ThrottleWindow, OneBucketIsAFixedWindow) {
  ThrottleWindow w(1s, 1);
  (void)w.add_request(at(5s));
  (void)w.add_request(at(5s + 999ms));
  EXPECT_EQ(w.counts(at(5s + 999ms)).requests, 2u);
  EXPECT_EQ(w.counts(at(6s)).requests, 0u);
}

TEST(ThrottleWindow, InvalidShapesAreRefused) {
  EXPECT_THROW(ThrottleWindow(1s, 0), std::invalid_argument);
  EXPECT_THROW(ThrottleWindow(1s, 1001), std::invalid_argument);
  EXPECT_THROW(ThrottleWindow(5ns, 10), std::invalid_argument);
}

TEST(ThrottleDraw, DrawsAreInTheUnitIntervalAndSpread) {
  double low = 1, high = 0, sum = 0;
  constexpr int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double d = next_throttle_draw();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    low = d < low ? d : low;
    high = d > high ? d : high;
    sum += d;
  }
  EXPECT_LT(low, 0.001);
  EXPECT_GT(high, 0.999);
  // The mean of 100,000 uniform draws is 0.5 with a standard deviation of 0.0009.
  EXPECT_NEAR(sum / n, 0.5, 0.005);
}

}  // namespace
}  // namespace kevlar::detail
