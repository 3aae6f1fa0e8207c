// The rate limit's decisions without I/O: RateLimitLedger driven with explicit times, and a model
// test against a plain token bucket.
#include "rate_limit/token_bucket_model.hpp"

#include <kevlar/rate_limit.hpp>
#include <kevlar/testing/model_runner.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;
using Kind = RateLimitLedger::Decision::Kind;
using TimePoint = Clock::time_point;

constexpr TimePoint origin{1h};

TimePoint at(Clock::duration d) {
  return origin + d;
}

TEST(RateLimitLedger, TenPerTenSecondsAdmitsTenThenOnePerSecond) {
  RateLimitLedger l(1s, 10, 0);  // RateLimit(10, 10s): T = 1 s, burst 10
  for (int i = 0; i < 10; ++i) EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted) << i;
  const auto r = l.acquire(at(0s));
  EXPECT_EQ(r.kind, Kind::rejected);
  EXPECT_EQ(r.retry_after, 1s) << "the next permit comes back after exactly T";
  EXPECT_EQ(l.acquire(at(999ms)).kind, Kind::rejected);
  EXPECT_EQ(l.acquire(at(999ms)).retry_after, 1ms);
  EXPECT_EQ(l.acquire(at(1s)).kind, Kind::admitted) << "+1 s refills exactly one permit";
  EXPECT_EQ(l.acquire(at(1s)).kind, Kind::rejected);
}

TEST(RateLimitLedger, OnePerTenSecondsRejectsTheSecondWithRetryAfterTenSeconds) {
  RateLimitLedger l(10s, 1, 0);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  const auto r = l.acquire(at(0s));
  EXPECT_EQ(r.kind, Kind::rejected);
  EXPECT_EQ(r.retry_after, 10s);
  EXPECT_EQ(l.acquire(at(4s)).retry_after, 6s) << "the retry-after shrinks as time passes";
  EXPECT_EQ(l.acquire(at(10s)).kind, Kind::admitted);
}

TEST(RateLimitLedger, IdleTimeNeverAccumulatesBeyondTheBurst) {
  RateLimitLedger l(1s, 3, 0);
  EXPECT_EQ(l.snapshot(at(0s)).available, 3u) << "never used: the whole burst";
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.snapshot(at(0s)).available, 2u);
  // A long idle period refills the bucket to the burst, not beyond.
  EXPECT_EQ(l.snapshot(at(1h)).available, 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(l.acquire(at(1h)).kind, Kind::admitted) << i;
  EXPECT_EQ(l.acquire(at(1h)).kind, Kind::rejected);
}

TEST(RateLimitLedger, APartiallyUsedBurstAlsoCaps) {
  RateLimitLedger l(1s, 4, 0);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.snapshot(at(500ms)).available, 2u) << "half a permit refilled rounds down";
  EXPECT_EQ(l.snapshot(at(1s)).available, 3u);
  EXPECT_EQ(l.snapshot(at(10s)).available, 4u) << "capped at the burst";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(l.acquire(at(10s)).kind, Kind::admitted) << i;
  EXPECT_EQ(l.acquire(at(10s)).kind, Kind::rejected);
}

TEST(RateLimitLedger, TheBurstMayExceedTheSustainedRate) {
  RateLimitLedger l(1s, 5, 0);  // 1 per second, bursts of 5
  for (int i = 0; i < 5; ++i) EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted) << i;
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::rejected);
  // Sustained: one per second.
  for (int s = 1; s <= 5; ++s) {
    EXPECT_EQ(l.acquire(at(std::chrono::seconds(s))).kind, Kind::admitted) << s;
    EXPECT_EQ(l.acquire(at(std::chrono::seconds(s))).kind, Kind::rejected) << s;
  }
}

TEST(RateLimitLedger, NegativeAndLargeEpochsKeepTheInitialBurstAndTheInterval) {
  for (const TimePoint start : {TimePoint(-3'000'000'000'000'000'000ns), TimePoint(0ns),
                                TimePoint(3'000'000'000'000'000'000ns)}) {
    RateLimitLedger l(1ns, 3, 0);  // a billion per second
    for (int i = 0; i < 3; ++i) EXPECT_EQ(l.acquire(start).kind, Kind::admitted) << i;
    const auto r = l.acquire(start);
    EXPECT_EQ(r.kind, Kind::rejected);
    EXPECT_EQ(r.retry_after, 1ns);
    EXPECT_EQ(l.acquire(start + 1ns).kind, Kind::admitted);
    EXPECT_EQ(l.acquire(start + 1ns).kind, Kind::rejected);
  }
}

TEST(RateLimitLedger, QueuedReservationsAreDueOneIntervalApartAndTheOverflowCarriesTheDebt) {
  RateLimitLedger l(1s, 1, 2);  // Permits 1, Window 1 s, QueueLimit 2
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);
  const auto r = l.acquire(at(0s));
  EXPECT_EQ(r.kind, Kind::rejected);
  EXPECT_EQ(r.retry_after, 3s) << "one admitted and two queued: the debt is 3 s";
  EXPECT_EQ(l.queued(), 2u);
  EXPECT_EQ(l.snapshot(at(0s)).available, 0u);
  EXPECT_EQ(l.snapshot(at(0s)).queued, 2u);
  EXPECT_EQ(l.head_due(), at(1s));
  l.consume_head();
  EXPECT_EQ(l.head_due(), at(2s));
  l.consume_head();
  EXPECT_EQ(l.queued(), 0u);
  EXPECT_EQ(l.acquire(at(2s)).kind, Kind::queued) << "the schedule is booked until 3 s";
  EXPECT_EQ(l.head_due(), at(3s));
}

TEST(RateLimitLedger, ANewcomerQueuesBehindOthersEvenWhenAPermitIsDue) {
  RateLimitLedger l(1s, 1, 3);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);  // due at 1 s
  // At 5 s the head has not started yet (its executor is busy): a newcomer does not overtake it.
  EXPECT_EQ(l.acquire(at(5s)).kind, Kind::queued);
  EXPECT_LE(l.head_due(), at(5s));
  l.consume_head();
  EXPECT_LE(l.head_due(), at(5s)) << "the newcomer is due too, behind the head";
}

TEST(RateLimitLedger, AGivenBackReservationMovesTheLaterOnesOneIntervalEarlier) {
  RateLimitLedger l(1s, 1, 3);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);
  EXPECT_EQ(l.head_due(), at(1s));
  // Due at 1, 2, 3 s; one of them leaves: the other two are due at 1 and 2 s.
  l.cancel_reservation();
  EXPECT_EQ(l.queued(), 2u);
  EXPECT_EQ(l.head_due(), at(1s));
  l.consume_head();
  EXPECT_EQ(l.head_due(), at(2s));
  l.consume_head();
  // The freed slot is reused at its original due time: a newcomer now is due at 3 s.
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);
  EXPECT_EQ(l.head_due(), at(3s));
}

TEST(RateLimitLedger, RepeatedCancelAndRequeueLeavesNoPhantomDebt) {
  RateLimitLedger l(1s, 2, 2);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(l.acquire(at(0s)).kind, Kind::queued);
    l.cancel_reservation();
  }
  EXPECT_EQ(l.queued(), 0u);
  const auto r = l.acquire(at(0s));
  EXPECT_EQ(r.kind, Kind::queued) << "still room in the queue";
  EXPECT_EQ(l.head_due(), at(1s)) << "due as if the cancelled ones never existed";
  l.cancel_reservation();
  EXPECT_EQ(l.snapshot(at(2s)).available, 2u) << "the burst comes back in full";
}

TEST(RateLimitLedger, APermitTakenIsNeverGivenBack) {
  RateLimitLedger l(1s, 1, 1);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);
  l.consume_head();  // the reservation became a permit: it stays consumed
  EXPECT_EQ(l.snapshot(at(1s)).available, 0u);
  EXPECT_EQ(l.snapshot(at(2s)).available, 1u);
}

TEST(RateLimitLedger, AHoldAdmitsNothingUntilItEndsThenOnePermit) {
  RateLimitLedger l(1s, 10, 0);  // 10 per 10 s, a full burst available
  l.hold_for(at(0s), 3s);
  const auto r = l.acquire(at(0s));
  EXPECT_EQ(r.kind, Kind::rejected) << "a full bucket is held too";
  EXPECT_EQ(r.retry_after, 3s);
  EXPECT_EQ(l.acquire(at(2999ms)).retry_after, 1ms);
  EXPECT_EQ(l.snapshot(at(2s)).available, 0U);
  EXPECT_EQ(l.acquire(at(3s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(3s)).kind, Kind::rejected) << "the hold used up the burst";
  EXPECT_EQ(l.acquire(at(4s)).kind, Kind::admitted) << "then the sustained rate";
}

TEST(RateLimitLedger, AShorterHoldChangesNothingAndHoldsAreClamped) {
  RateLimitLedger l(1s, 1, 0);
  l.hold_for(at(0s), 5s);
  l.hold_for(at(1s), 1s);  // ends at 2 s, before the first one
  EXPECT_EQ(l.acquire(at(4s)).retry_after, 1s) << "still held until 5 s";
  l.hold_for(at(4s), -3s);  // a negative hold is no hold
  EXPECT_EQ(l.acquire(at(4s)).retry_after, 1s);
  EXPECT_EQ(l.acquire(at(5s)).kind, Kind::admitted);

  RateLimitLedger far(1s, 1, 0);
  far.hold_for(at(0s), std::chrono::hours(24 * 365));
  EXPECT_EQ(far.acquire(at(0s)).retry_after, RateLimitLedger::max_hold) << "clamped";
  // A clock reading far into the nanosecond range holds just the same.
  RateLimitLedger top(1s, 5, 0);
  const TimePoint late{Clock::duration(std::numeric_limits<Clock::duration::rep>::max() / 2)};
  top.hold_for(late, 10s);
  EXPECT_EQ(top.acquire(late).retry_after, 10s);
  EXPECT_EQ(top.acquire(late + 10s).kind, Kind::admitted);
}

// A hold whose end lies past the nanosecond range, or whose schedule behind it would, holds until
// the top of the range the ledger counts in rather than wrapping round into the past (no hold).
TEST(RateLimitLedger, AHoldPastTheEndOfTheRangeSaturatesInsteadOfWrapping) {
  using rep = Clock::duration::rep;
  constexpr rep max = std::numeric_limits<rep>::max();
  constexpr Clock::duration a_century = 24h * 365 * 100;
  RateLimitLedger end_overflows(1s, 1, 0);
  end_overflows.hold_for(TimePoint(Clock::duration(max - 1'000'000'000)), 10s);
  const auto r1 = end_overflows.acquire(at(0s));
  EXPECT_EQ(r1.kind, Kind::rejected);
  EXPECT_GT(r1.retry_after, a_century);

  RateLimitLedger schedule_overflows(1s, 5, 0);  // 4 s of tolerance behind the hold's end
  schedule_overflows.hold_for(TimePoint(Clock::duration(max - 5'000'000'000)), 2s);
  const auto r2 = schedule_overflows.acquire(at(0s));
  EXPECT_EQ(r2.kind, Kind::rejected);
  EXPECT_GT(r2.retry_after, a_century);
  EXPECT_EQ(r2.retry_after, r1.retry_after - 4s) << "the same saturated end, less the tolerance";

  RateLimitLedger queued(1s, 1, 2);
  EXPECT_EQ(queued.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(queued.acquire(at(0s)).kind, Kind::queued);
  queued.hold_for(TimePoint(Clock::duration(max - 1'000'000'000)), 10s);
  EXPECT_GT(queued.head_due(), at(a_century)) << "the queued reservation waits at the top too";
}

// Nothing booked yet: the oldest reservation's due time saturates at the bottom of the range
// instead of overflowing below it.
TEST(RateLimitLedger, AnUnusedLedgersHeadDueSaturatesAtTheEarliestTime) {
  RateLimitLedger l(1s, 3, 1);
  EXPECT_EQ(l.head_due(), TimePoint::min());
}

TEST(RateLimitLedger, AHoldMovesTheQueuedReservationsBehindIt) {
  RateLimitLedger l(1s, 1, 3);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);  // due at 1 s
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);  // due at 2 s
  EXPECT_EQ(l.head_due(), at(1s));
  l.hold_for(at(0s), 10s);
  EXPECT_EQ(l.head_due(), at(10s)) << "the oldest reservation waits for the hold";
  l.consume_head();
  EXPECT_EQ(l.head_due(), at(11s)) << "the next one follows it one interval later";
  const auto r = l.acquire(at(0s));
  EXPECT_EQ(r.kind, Kind::queued);
  l.consume_head();
  EXPECT_EQ(l.head_due(), at(12s));
  l.hold_for(at(0s), 5s);  // ends before the schedule does
  EXPECT_EQ(l.head_due(), at(12s));
}

TEST(RateLimitLedger, RefusesValuesItCannotCount) {
  EXPECT_THROW(RateLimitLedger(0ns, 1, 0), std::invalid_argument);
  EXPECT_THROW(RateLimitLedger(-1ns, 1, 0), std::invalid_argument);
  EXPECT_THROW(RateLimitLedger(1s, 0, 0), std::invalid_argument);
  EXPECT_THROW(RateLimitLedger(1s, RateLimitLedger::max_count + 1, 0), std::invalid_argument);
  EXPECT_THROW(RateLimitLedger(24h * 365 * 10, 100, 0), std::invalid_argument)
      << "a thousand years of schedule";
  EXPECT_NO_THROW(RateLimitLedger(1ms, RateLimitLedger::max_count, RateLimitLedger::max_count));
}

TEST(RateLimitLedger, RefusesAQueueLimitItCannotCount) {
  EXPECT_THROW(RateLimitLedger(1s, 1, RateLimitLedger::max_count + 1), std::invalid_argument);
}

TEST(RateLimitLedger, AFullQueueWhoseDebtIsPaidRejectsWithAZeroRetryAfter) {
  RateLimitLedger l(1s, 1, 1);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::admitted);
  EXPECT_EQ(l.acquire(at(0s)).kind, Kind::queued);  // due at 1 s
  // At 5 s the queued call has not started yet (its executor is busy): the queue is still full,
  // but the schedule is paid for, so the newcomer may come back at once, never "in the past".
  const auto r = l.acquire(at(5s));
  EXPECT_EQ(r.kind, Kind::rejected);
  EXPECT_EQ(r.retry_after, 0s);
  l.consume_head();
  EXPECT_EQ(l.acquire(at(5s)).kind, Kind::admitted);
}

/// One step of the ledger's model test.
struct LedgerCommand {
  enum class Kind : unsigned char { arrive, advance, leave } kind = Kind::arrive;
  std::int64_t d = 0;  ///< advance: nanoseconds
};

std::ostream& operator<<(std::ostream& os, const LedgerCommand& c) {
  switch (c.kind) {
    case LedgerCommand::Kind::arrive:
      return os << "arrive";
    case LedgerCommand::Kind::advance:
      return os << "advance " << c.d << "ns";
    case LedgerCommand::Kind::leave:
      return os << "leave";
  }
  return os;
}

/// What a model run exercised.
struct LedgerCoverage {
  int counts[3] = {0, 0, 0};  ///< admitted, queued, rejected
  int started_late = 0;
};

/// Random arrivals, clock advances and (with a queue) cancellations of queued calls, from the
/// model runner's seed corpus: every decision, every retry-after and every start matches the token
/// bucket, and each seed exercises every decision.
void run_model(std::int64_t t_ns, std::uint32_t burst, std::uint32_t queue) {
  LedgerCoverage coverage;
  const testing::ModelRunner<LedgerCommand> runner(
      "rate limit ledger vs token bucket",
      [t_ns](testing::ModelRandom& r) {
        const std::uint64_t action = r.below(10);
        if (action < 6) return LedgerCommand{LedgerCommand::Kind::arrive, 0};
        if (action < 9) return LedgerCommand{LedgerCommand::Kind::advance, r.between(0, 3 * t_ns)};
        return LedgerCommand{LedgerCommand::Kind::leave, 0};
      },
      [&](const std::vector<LedgerCommand>& commands) {
        coverage = {};
        RateLimitLedger l(Clock::duration(t_ns), burst, queue);
        test::TokenBucketModel m(t_ns, burst, queue);
        TimePoint now = origin;
        for (std::size_t step = 0; step < commands.size(); ++step) {
          const LedgerCommand& c = commands[step];
          const std::string at = "step " + std::to_string(step);
          if (c.kind == LedgerCommand::Kind::arrive) {
            std::int64_t model_retry = 0;
            const int expected = m.acquire(model_retry);
            const auto d = l.acquire(now);
            testing::model_check(static_cast<int>(d.kind) == expected,
                                 at + ": decision " + std::to_string(static_cast<int>(d.kind)) +
                                     ", the bucket says " + std::to_string(expected));
            ++coverage.counts[expected];
            if (expected == 2) {
              testing::model_check(d.retry_after.count() == model_retry,
                                   at + ": retry-after " + std::to_string(d.retry_after.count()) +
                                       "ns, the bucket says " + std::to_string(model_retry));
            }
          } else if (c.kind == LedgerCommand::Kind::advance) {  // due heads start in order
            now += Clock::duration(c.d);
            const std::int64_t expected = m.advance(c.d);
            std::int64_t started = 0;
            while (l.queued() > 0 && l.head_due() <= now) {
              l.consume_head();
              ++started;
            }
            testing::model_check(started == expected, at + ": " + std::to_string(started) +
                                                          " started, the bucket says " +
                                                          std::to_string(expected));
            coverage.started_late += static_cast<int>(started);
          } else if (m.waiting() > 0) {  // a queued call leaves
            m.cancel_one();
            l.cancel_reservation();
          }
          testing::model_check(static_cast<std::int64_t>(l.queued()) == m.waiting(),
                               at + ": queued differs");
        }
      },
      1000);
  for (const std::uint64_t seed : testing::model_seeds()) {
    runner.run_seed(seed);
    // Coverage is pinned for the fixed corpus; sweep seeds (KEVLAR_MODEL_SWEEP_SEEDS) only check
    // the model.
    if (std::find(testing::model_seed_corpus.begin(), testing::model_seed_corpus.end(), seed) ==
        testing::model_seed_corpus.end()) {
      continue;
    }
    // The sequence exercised every decision.
    EXPECT_GT(coverage.counts[0], 20) << seed;
    EXPECT_GT(coverage.counts[2], 20) << seed;
    if (queue > 0) {
      EXPECT_GT(coverage.counts[1], 20) << seed;
      EXPECT_GT(coverage.started_late, 10) << seed;
    }
  }
}

TEST(RateLimitModel, WithoutAQueueMatchesATokenBucketForTheSeedCorpus) {
  run_model(2'000'000'000, 3, 0);  // 3 permits per 6 s
  run_model(333'333'334, 1, 0);    // 3 per second, no burst
}

TEST(RateLimitModel, WithAQueueAndCancellationsMatchesATokenBucketForTheSeedCorpus) {
  run_model(2'000'000'000, 3, 4);
  run_model(1'000'000, 1, 2);
}

}  // namespace
}  // namespace kevlar
