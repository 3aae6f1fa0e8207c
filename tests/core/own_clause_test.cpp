// Per-strategy handling clauses (the options' `handles`): a strategy's own clause replaces the
// ambient when(...) for it alone, wherever it is added, and the chain's unreachable-fallback rule
// takes it into account.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <stdexcept>
#include <string>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

struct Down : std::runtime_error {
  Down() : std::runtime_error("down") {}
};
struct Busy : std::runtime_error {
  Busy() : std::runtime_error("busy") {}
};

RetryOptions retries(int n) {
  RetryOptions r;
  r.max_retries = n;
  r.backoff = Backoff::none();
  return r;
}

TEST(OwnClause, ARetrysOwnClauseReplacesTheAmbientOne) {
  RetryOptions r = retries(2);
  r.handles = Clause{}.exception<Busy>();
  // The ambient clause says Down; this retry handles Busy only.
  const Shield shield = Shield{}.when(Clause{}.exception<Down>()).retry(r);
  int calls = 0;
  EXPECT_THROW((void)shield.execute([&]() -> int {
    ++calls;
    throw Down();
  }),
               Down);
  EXPECT_EQ(calls, 1) << "Down is not this retry's to handle";
  calls = 0;
  EXPECT_THROW((void)shield.execute([&]() -> int {
    ++calls;
    throw Busy();
  }),
               Busy);
  EXPECT_EQ(calls, 3);
  // A strategy added next still takes the ambient clause.
  const Shield both = shield.retry(retries(1));
  calls = 0;
  EXPECT_THROW((void)both.execute([&]() -> int {
    ++calls;
    throw Down();
  }),
               Down);
  EXPECT_EQ(calls, 2) << "the inner retry, on the ambient clause, retried Down once";
}

TEST(OwnClause, ABreakerCountsOnlyWhatItsOwnClauseHandles) {
  CircuitBreakerOptions o;
  o.consecutive_failures = 2;
  o.handles = Clause{}.error(asio::error::connection_refused);
  auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker);
  for (int i = 0; i < 5; ++i) {
    (void)shield.execute_outcome([]() -> int { throw Error(asio::error::timed_out); });
  }
  EXPECT_EQ(breaker->state(), CircuitState::closed);
  for (int i = 0; i < 2; ++i) {
    (void)shield.execute_outcome([]() -> int { throw Error(asio::error::connection_refused); });
  }
  EXPECT_EQ(breaker->state(), CircuitState::open);
}

TEST(OwnClause, AFallbackWithItsOwnClauseInsideARetryIsReachable) {
  // Without its own clause this chain is refused: the fallback would recover every failure
  // before the retry saw one.
  EXPECT_THROW((void)Shield{}.retry(retries(2)).fallback(-1), std::invalid_argument);
  FallbackOptions<int> f;
  f.value = -1;
  f.handles = Clause{}.exception<Busy>();
  const Shield shield = Shield{}.retry(retries(2)).fallback(f);
  int calls = 0;
  EXPECT_EQ(shield.execute([&]() -> int {
    ++calls;
    throw Busy();
  }),
            -1);
  EXPECT_EQ(calls, 1) << "Busy is replaced inside the retry";
  calls = 0;
  EXPECT_THROW((void)shield.execute([&]() -> int {
    ++calls;
    throw Down();
  }),
               Down);
  EXPECT_EQ(calls, 3) << "Down passes the fallback and is retried";
}

TEST(OwnClause, AHedgesOwnClauseDecidesWhatLaunchesTheNextAttempt) {
  HedgeOptions h;
  h.max_attempts = 3;
  h.delay = HedgeOptions::infinite_delay;  // the next attempt only after a handled failure
  h.handles = Clause{}.error(asio::error::connection_reset);
  testing::StrategyDriver<int> d{Shield{}.hedge(h)};
  d.start();
  d.fail(0, asio::error::connection_reset);  // handled: launches attempt 1
  ASSERT_EQ(d.attempts(), 2u);
  d.fail(1, asio::error::host_unreachable);  // not handled: it wins at once
  EXPECT_EQ(d.outcome().error(), asio::error::host_unreachable);
  EXPECT_EQ(d.attempts(), 2u);
}

TEST(OwnClause, TheDescriptionDoesNotChangeAndWrappingKeepsTheClause) {
  RetryOptions r = retries(1);
  r.handles = Clause{}.exception<Busy>();
  const Shield inner = Shield{}.retry(r);
  const Shield outer = Shield{}.when(Clause{}.exception<Down>()).wrap(inner);
  EXPECT_EQ(outer.describe(), inner.describe());
  int calls = 0;
  EXPECT_THROW((void)outer.execute([&]() -> int {
    ++calls;
    throw Busy();
  }),
               Busy);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace kevlar
