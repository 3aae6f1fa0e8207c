// The race runner: both orders of every repetition, chosen by the reproducible seed, fresh state
// per run, failures reported with name, repetition, seed and order; and a real race through it.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/race_runner.hpp>
#include <kevlar/testing/state.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using kevlar::Shield;
using namespace kevlar::testing;

TEST(RaceRunner, RunsBothOrdersOfEveryRepetitionOnFreshState) {
  std::vector<std::string> runs;
  const RaceReport report = run_race("log", 3, [&](const RaceRound& round) {
    auto log = std::make_shared<std::string>();
    return RaceParties{
        [log] { *log += "a"; }, [log] { *log += "b"; },
        [&runs, log, round] { runs.push_back(std::to_string(round.repetition) + ":" + *log); }};
  });
  EXPECT_EQ(report.runs, 6u);
  EXPECT_EQ(report.a_first_runs, 3u);
  EXPECT_EQ(report.b_first_runs, 3u);
  ASSERT_EQ(runs.size(), 6u);
  for (std::size_t rep = 0; rep < 3; ++rep) {
    const std::string first = first_order(race_seed(rep)) == RaceOrder::a_then_b ? "ab" : "ba";
    const std::string second = first == "ab" ? "ba" : "ab";
    EXPECT_EQ(runs[2 * rep], std::to_string(rep) + ":" + first) << "the seed picks the first order";
    EXPECT_EQ(runs[2 * rep + 1], std::to_string(rep) + ":" + second);
  }
  EXPECT_EQ(race_seed(0), 0x4B45564CULL);
  EXPECT_EQ(race_seed(2), 0x4B45564CULL + 2 * 397);
}

TEST(RaceRunner, TheSeedsPickBothFirstOrders) {
  bool a_first = false;
  bool b_first = false;
  for (std::size_t rep = 0; rep < 16; ++rep) {
    (first_order(race_seed(rep)) == RaceOrder::a_then_b ? a_first : b_first) = true;
  }
  EXPECT_TRUE(a_first && b_first);
}

TEST(RaceRunner, AFailureNamesTheRaceRepetitionSeedAndOrder) {
  try {
    (void)run_race("b must not win", 4, [](const RaceRound&) {
      auto winner = std::make_shared<char>('\0');
      return RaceParties{[winner] { *winner = *winner ? *winner : 'a'; },
                         [winner] { *winner = *winner ? *winner : 'b'; },
                         [winner] {
                           if (*winner == 'b') throw std::runtime_error("b completed first");
                         }};
    });
    ADD_FAILURE() << "the b-first order fails";
  } catch (const RaceFailure& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.round().repetition, 0u);
    EXPECT_EQ(e.round().seed, race_seed(0));
    EXPECT_EQ(e.round().order, RaceOrder::b_then_a);
    EXPECT_NE(m.find("race \"b must not win\" failed at repetition 0 (seed 0x4b45564c, order b "
                     "then a): b completed first"),
              std::string::npos)
        << m;
  }
  EXPECT_THROW((void)run_race("empty", 1, [](const RaceRound&) { return RaceParties{}; }),
               std::invalid_argument);
}

TEST(RaceRunner, AFailingSetupOrANonStandardExceptionIsReportedAsAFailureOfThatRound) {
  try {
    (void)run_race("setup", 2, [](const RaceRound& round) -> RaceParties {
      if (round.repetition == 1) throw std::runtime_error("no fixture");
      return RaceParties{[] {}, [] {}, {}};
    });
    ADD_FAILURE() << "the setup of repetition 1 fails";
  } catch (const RaceFailure& e) {
    EXPECT_EQ(e.round().repetition, 1u);
    EXPECT_NE(std::string(e.what()).find("failed at repetition 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("): no fixture"), std::string::npos) << e.what();
  }
  try {
    (void)run_race("int", 1, [](const RaceRound&) {
      return RaceParties{[] {}, [] { throw 7; }, {}};
    });
    ADD_FAILURE() << "party b throws";
  } catch (const RaceFailure& e) {
    EXPECT_NE(std::string(e.what()).find("an exception that is not a std::exception"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)run_race("no b", 1,
                              [](const RaceRound&) {
                                return RaceParties{[] {}, {}, {}};
                              }),
               std::invalid_argument);
  std::ostringstream orders;
  orders << RaceOrder::a_then_b << ", " << RaceOrder::b_then_a;
  EXPECT_EQ(orders.str(), "a then b, b then a");
}

// A queued call's cancellation races the grant of the permit it waits for: whichever comes
// first, the call completes exactly once and the limiter ends with every permit back.
TEST(RaceRunner, AQueuedCancellationAgainstItsGrantResolvesOnceInBothOrders) {
  struct Scenario {
    std::shared_ptr<kevlar::ManualClock> clock = kevlar::ManualClock::create();
    Shield shield = Shield{}.concurrency_limit(1, 1);
    std::unique_ptr<StrategyDriver<int>> holder;
    std::unique_ptr<StrategyDriver<int>> queued;
  };
  const RaceReport report = run_race("grant vs cancel", 5, [](const RaceRound&) {
    auto s = std::make_shared<Scenario>();
    s->holder = std::make_unique<StrategyDriver<int>>(s->shield, s->clock);
    s->queued = std::make_unique<StrategyDriver<int>>(s->shield, s->clock);
    s->holder->start();
    s->queued->start();
    return RaceParties{
        [s] {  // the holder completes: its permit goes to the queued call
          s->holder->succeed(0, 1);
          s->queued->run();
        },
        [s] {  // the queued call's caller gives up
          s->queued->cancel();
          s->holder->run();
        },
        [s] {
          if (s->queued->deliveries() != 1) throw std::logic_error("not delivered exactly once");
          if (s->queued->outcome().error() != boost::asio::error::operation_aborted) {
            throw std::logic_error("not a cancellation");
          }
          const auto st = shield_state(s->shield).single<ConcurrencyLimitStateSnapshot>();
          if (st != ConcurrencyLimitStateSnapshot{0, 0, 0, 1, false}) {
            throw std::logic_error("permits not conserved: " + to_string(shield_state(s->shield)));
          }
        }};
  });
  EXPECT_EQ(report.runs, 10u);
}

}  // namespace
