// EventRecorder: every event in order, values copied (shield name, strategy index, attempt), typed
// queries, clear, and concurrent executions recorded without loss.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/event_recorder.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <gtest/gtest.h>

#include <boost/asio/error.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using kevlar::Shield;
using kevlar::testing::EventRecorder;
using kevlar::testing::RecordedEvent;

kevlar::RetryOptions immediate_retry(int retries) {
  kevlar::RetryOptions o;
  o.max_retries = retries;
  o.backoff = kevlar::Backoff::none();
  return o;
}

TEST(EventRecorder, RecordsEveryEventInOrderWithItsSourceCopied) {
  auto events = std::make_shared<EventRecorder>();
  std::vector<RecordedEvent> recorded;
  {
    const Shield shield =
        Shield{}.timeout(10s).retry(immediate_retry(2)).with_name("db").observed_by(events);
    int calls = 0;
    EXPECT_EQ(shield.execute([&] {
      if (++calls < 3) throw std::runtime_error("flaky");
      return 4;
    }),
              4);
    recorded = events->events();
  }  // the shield is gone: the records stand on their own
  std::vector<std::string> names;
  for (const RecordedEvent& e : recorded) names.push_back(kevlar::testing::event_name(e.detail));
  EXPECT_EQ(names,
            (std::vector<std::string>{"AttemptStarted", "RetryScheduled", "AttemptStarted",
                                      "RetryScheduled", "AttemptStarted", "ExecutionFinished"}));
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    EXPECT_EQ(recorded[i].sequence, i);
    EXPECT_EQ(recorded[i].shield_name, std::optional<std::string>("db"));
  }
  EXPECT_EQ(recorded[1].strategy_index, 1u) << "the retry is the shield's second strategy";
  EXPECT_EQ(recorded[0].strategy_index, kevlar::EventSource::no_strategy);
  EXPECT_EQ(recorded[1].context_attempt, 1u) << "the retry decided after attempt 1";
  EXPECT_EQ(recorded[3].context_attempt, 2u);

  const auto retries = events->events_of<kevlar::RetryScheduled>();
  ASSERT_EQ(retries.size(), 2u);
  EXPECT_EQ(retries[0].retry, 1);
  EXPECT_EQ(retries[1].retry, 2);
  ASSERT_TRUE(retries[0].failure.exception) << "the failure is kept as a value";
  EXPECT_THROW(std::rethrow_exception(retries[0].failure.exception), std::runtime_error);
  EXPECT_EQ(events->count_of<kevlar::AttemptStarted>(), 3u);
  EXPECT_EQ(events->count_of<kevlar::TimeoutFired>(), 0u);
  std::ostringstream s;
  s << recorded[1];
  EXPECT_EQ(s.str(), "#1 RetryScheduled @1");

  events->clear();
  EXPECT_EQ(events->size(), 0u);
  EXPECT_TRUE(events->details().empty());
}

TEST(EventRecorder, OnlyTheKindsItWantsAreBuilt) {
  auto rejections = std::make_shared<EventRecorder>(kevlar::event_kinds<kevlar::Rejected>());
  const auto clock = kevlar::ManualClock::create();
  const Shield shield = Shield{}.rate_limit(1, 1s).with_clock(clock).observed_by(rejections);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  EXPECT_THROW((void)shield.execute([] { return 1; }), kevlar::Error);
  const auto r = rejections->events_of<kevlar::Rejected>();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kind, kevlar::RejectionKind::rate_limit);
  EXPECT_EQ(r[0].retry_after, std::optional<kevlar::Clock::duration>(1s));
  EXPECT_EQ(rejections->size(), 1u) << "no AttemptStarted nor ExecutionFinished";
}

TEST(EventRecorder, TheStrategyDriverRecordsThroughOne) {
  kevlar::testing::StrategyDriver<int> d{Shield{}.retry(immediate_retry(1))};
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  d.succeed(1, 2);
  ASSERT_TRUE(d.recorder());
  EXPECT_EQ(d.recorder()->count_of<kevlar::RetryScheduled>(), 1u);
  EXPECT_EQ(d.events().size(), d.recorder()->size());
  EXPECT_EQ(d.events_of<kevlar::ExecutionFinished>().size(), 1u);
  kevlar::testing::StrategyDriver<int> quiet{Shield{}.retry(1),
                                             kevlar::testing::StrategyDriverOptions{true, false}};
  EXPECT_FALSE(quiet.recorder());
  EXPECT_TRUE(quiet.events().empty());
}

TEST(EventRecorder, ConcurrentExecutionsLoseNoEvent) {
  auto events = std::make_shared<EventRecorder>();
  const Shield shield = Shield{}.retry(immediate_retry(1)).observed_by(events);
  constexpr int threads = 4;
  constexpr int calls = 200;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < calls; ++i) (void)shield.execute([] { return 1; });
    });
  }
  ASSERT_TRUE(events->wait_for_count(2 * threads * calls));
  for (auto& t : pool) t.join();
  EXPECT_EQ(events->count_of<kevlar::AttemptStarted>(), std::size_t{threads * calls});
  EXPECT_EQ(events->count_of<kevlar::ExecutionFinished>(), std::size_t{threads * calls});
  const auto all = events->events();
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i].sequence, i);
}

TEST(EventRecorder, AnEventWithoutAStrategyPrintsWithoutAnIndex) {
  auto events = std::make_shared<EventRecorder>();
  EXPECT_EQ(Shield{}.retry(1).observed_by(events).execute([] { return 1; }), 1);
  const std::vector<RecordedEvent> recorded = events->events();
  ASSERT_EQ(recorded.size(), 2u);
  std::ostringstream s;
  s << recorded[0] << " | " << recorded[1];
  EXPECT_EQ(s.str(), "#0 AttemptStarted | #1 ExecutionFinished");
}

}  // namespace
