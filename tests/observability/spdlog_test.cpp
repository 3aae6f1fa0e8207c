// The spdlog observer: levels and key=value fields, summaries of repeated events on the manual
// clock, and spdlog's registry and default logger left alone.
#include "core/async_ops.hpp"

#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/spdlog.hpp>

#include <gtest/gtest.h>
#include <test_options.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

using namespace std::chrono_literals;

/// A logger writing "<level> <message>" lines to a string stream, at every level.
struct Captured {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;
  explicit Captured(spdlog::level::level_enum level = spdlog::level::trace) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
    logger = std::make_shared<spdlog::logger>("kevlar-test", sink);
    logger->set_pattern("%l %v");
    logger->set_level(level);
  }
  [[nodiscard]] std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream in(out.str());
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }
};

RetryOptions one_retry(Clock::duration delay) { return test::constant_retries(1, delay); }

CircuitBreakerOptions one_failure_opens() { return test::consecutive_breaker(1, 30s); }

SpdlogObserverOptions on(std::shared_ptr<const Clock> clock, bool summarize = true) {
  SpdlogObserverOptions o;
  o.clock = std::move(clock);
  o.summarize = summarize;
  return o;
}

TEST(SpdlogObserver, EachEventIsOneLineAtItsLevelWithItsFields) {
  Captured log;
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock, false));
  const Shield shield =
      Shield{}.with_name("api").retry(one_retry(200ms)).observed_by(observer).with_clock(clock);
  boost::asio::io_context ioc;
  std::optional<boost::system::error_code> result;
  const boost::system::error_code refused_ec =
      make_error_code(boost::system::errc::connection_refused);
  shield.execute_async(
      [&](auto&& token) {
        clock->advance(1ms);
        return test::async_answer(ioc.get_executor(), refused_ec, 0,
                                  std::forward<decltype(token)>(token));
      },
      boost::asio::bind_executor(ioc, [&](boost::system::error_code ec, int) { result = ec; }));
  ioc.poll();
  clock->advance(200ms);  // the backoff, on the manual clock
  for (int i = 0; i < 8 && !result; ++i) {
    ioc.restart();
    ioc.poll();
  }
  ASSERT_EQ(result, refused_ec);
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 4u) << log.out.str();
  EXPECT_EQ(lines[0], "debug kevlar event=attempt_started shield=api attempt=1");
  const std::string refused = refused_ec.message();
  const std::string category = refused_ec.category().name();  // generic
  EXPECT_EQ(lines[1],
            "info kevlar event=retry_scheduled shield=api strategy=\"" + shield.strategies()[0]->describe() +
                "\" strategy.index=0 retry=1 delay=200ms error.category=" + category +
                " error.code=111 error.message=\"" + refused + "\"");
  EXPECT_EQ(lines[2], "debug kevlar event=attempt_started shield=api attempt=2");
  EXPECT_EQ(lines[3],
            "error kevlar event=execution_finished shield=api outcome=failure duration=202ms "
            "attempts=2 error.category=" + category + " error.code=111 error.message=\"" +
                refused + "\"");
}

TEST(SpdlogObserver, AChaosInjectionIsAWarningWithItsKindAndScope) {
  Captured log(spdlog::level::warn);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock, false));
  ChaosFaultOptions fault;
  fault.chaos.enabled = true;
  fault.error = boost::asio::error::connection_reset;
  const Shield shield =
      chaos::fault(fault).with_name("api").observed_by(observer).with_clock(clock);
  {
    ChaosScope scope{"checkout", "staging env"};
    (void)shield.execute_outcome([] { return 1; });
  }
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 2u) << log.out.str();  // the injection, then the failed execution
  EXPECT_EQ(lines[0],
            "warning kevlar event=chaos_injected shield=api strategy=\"" +
                shield.strategies()[0]->describe() +
                "\" strategy.index=0 chaos.kind=fault chaos.operation=checkout "
                "chaos.environment=\"staging env\"");
  EXPECT_EQ(lines[1].rfind("error kevlar event=execution_finished shield=api outcome=failure", 0),
            0u)
      << lines[1];
}

TEST(SpdlogObserver, BreakerRejectionsAndTransitionsAreWarningsOrInfo) {
  Captured log(spdlog::level::info);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock, false));
  auto breaker = CircuitBreaker::create(one_failure_opens());
  const Shield shield = Shield{}.use(breaker).observed_by(observer).with_clock(clock);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("disk on fire"); }),
               std::runtime_error);
  EXPECT_THROW(shield.execute([] { return 1; }), Error);
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 4u) << log.out.str();
  const std::string strategy = "strategy=\"" + breaker->describe() + "\" strategy.index=0";
  EXPECT_EQ(lines[0], "warning kevlar event=breaker_transition " + strategy +
                          " from=closed to=open exception=\"disk on fire\"");
  EXPECT_EQ(lines[1], "error kevlar event=execution_finished outcome=failure duration=0s attempts=1 "
                      "exception=\"disk on fire\"");
  EXPECT_EQ(lines[2], "warning kevlar event=rejected " + strategy +
                          " rejection.type=circuit_open retry_after=30s");
  EXPECT_EQ(lines[3].rfind("error kevlar event=execution_finished outcome=failure", 0), 0u)
      << lines[3];
  EXPECT_EQ(lines.size(), 4u) << "attempts and successes are debug: below the logger's level";
}

TEST(SpdlogObserver, ARejectionStormIsSummarisedPerSecond) {
  Captured log(spdlog::level::warn);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock));
  auto breaker = CircuitBreaker::create(one_failure_opens());
  const Shield shield = Shield{}.with_name("api").use(breaker).observed_by(observer).with_clock(clock);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }), std::runtime_error);
  const std::size_t before = log.lines().size();  // the opening transition, the failed execution
  for (int i = 0; i < 100; ++i) {
    EXPECT_THROW(shield.execute([] { return 1; }), Error);
    clock->advance(5ms);  // 100 rejections within 0.5 s
  }
  std::vector<std::string> lines = log.lines();
  // One rejection line for the whole storm so far; the failed executions share the window the
  // tripping failure opened.
  ASSERT_EQ(lines.size(), before + 1) << log.out.str();
  EXPECT_EQ(observer->suppressed(), 99u + 100u);
  clock->advance(1s);
  EXPECT_THROW(shield.execute([] { return 1; }), Error);
  lines = log.lines();
  ASSERT_EQ(lines.size(), before + 5) << log.out.str();
  const std::string strategy = "strategy=\"" + breaker->describe() + "\" strategy.index=0";
  EXPECT_EQ(lines[before + 1],
            "warning kevlar event=rejected shield=api " + strategy + " more=99 window=1s");
  EXPECT_EQ(lines[before + 2], "error kevlar event=execution_finished shield=api more=100 window=1s");
  EXPECT_EQ(lines[before + 3].rfind("warning kevlar event=rejected shield=api", 0), 0u);
  EXPECT_EQ(lines[before + 3].find("more="), std::string::npos);
  EXPECT_EQ(lines[before + 4].rfind("error kevlar event=execution_finished shield=api outcome=failure", 0), 0u);
  // Nothing pending now but the windows just opened, which hold no suppressed line yet.
  observer->flush_summaries();
  EXPECT_EQ(log.lines().size(), before + 5);
}

TEST(SpdlogObserver, PendingSummariesAreWrittenByFlushOrTheDestructor) {
  Captured log(spdlog::level::warn);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock));
  auto breaker = CircuitBreaker::create(one_failure_opens());
  {
    const Shield shield = Shield{}.use(breaker).observed_by(observer).with_clock(clock);
    EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }),
                 std::runtime_error);
    for (int i = 0; i < 3; ++i) EXPECT_THROW(shield.execute([] { return 1; }), Error);
  }
  const std::size_t before = log.lines().size();
  observer->flush_summaries(false);  // the window has not ended: nothing yet
  EXPECT_EQ(log.lines().size(), before);
  observer.reset();  // the destructor writes what is pending
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), before + 2) << log.out.str();
  // In the order the windows opened: the failed executions' (at the tripping call), then the
  // rejections'.
  EXPECT_EQ(lines[before], "error kevlar event=execution_finished more=3 window=1s");
  EXPECT_NE(lines[before + 1].find("event=rejected"), std::string::npos);
  EXPECT_NE(lines[before + 1].find("more=2 window=1s"), std::string::npos);
}

TEST(SpdlogObserver, TransitionsAreNeverSummarised) {
  Captured log(spdlog::level::info);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock));
  CircuitBreakerOptions o = one_failure_opens();
  o.break_duration = 1ms;
  auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).observed_by(observer).with_clock(clock);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }),
                 std::runtime_error);  // closed -> open, or half_open -> open
    clock->advance(1ms);
  }
  std::size_t transitions = 0;
  for (const std::string& l : log.lines()) transitions += l.find("event=breaker_transition") != std::string::npos;
  EXPECT_EQ(transitions, 5u) << log.out.str();  // open, half_open, open, half_open, open
}

TEST(SpdlogObserver, TwoShieldsOfOneNameAreSummarisedApart) {
  Captured log(spdlog::level::warn);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock));
  auto b1 = CircuitBreaker::create(one_failure_opens());
  auto b2 = CircuitBreaker::create(one_failure_opens());
  b1->isolate();
  b2->isolate();
  const Shield a = Shield{}.with_name("db").use(b1).observed_by(observer).with_clock(clock);
  const Shield b = Shield{}.with_name("db").use(b2).observed_by(observer).with_clock(clock);
  EXPECT_THROW(a.execute([] { return 1; }), Error);
  EXPECT_THROW(b.execute([] { return 1; }), Error);
  std::size_t rejections = 0;
  for (const std::string& l : log.lines()) rejections += l.find("event=rejected") != std::string::npos;
  EXPECT_EQ(rejections, 2u) << "each shield's first rejection is written\n" << log.out.str();
}

TEST(SpdlogObserver, ATransitionAlsoWritesTheEndedWindowsSummaries) {
  Captured log(spdlog::level::info);
  auto clock = ManualClock::create();
  auto observer = std::make_shared<SpdlogObserver>(log.logger, on(clock));
  CircuitBreakerOptions o = one_failure_opens();
  o.break_duration = 2s;
  auto breaker = CircuitBreaker::create(o);
  const Shield shield = Shield{}.use(breaker).observed_by(observer).with_clock(clock);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }), std::runtime_error);
  for (int i = 0; i < 3; ++i) EXPECT_THROW(shield.execute([] { return 1; }), Error);
  clock->advance(2s);
  // The next call half-opens the breaker and closes it: transitions, written at once, bring the
  // rejections' ended window with them.
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  const std::vector<std::string> lines = log.lines();
  const auto at = [&](const std::string& what) {
    return std::find_if(lines.begin(), lines.end(),
                        [&](const std::string& l) { return l.find(what) != std::string::npos; }) -
           lines.begin();
  };
  const auto more = at("event=rejected strategy=");
  const auto summary = at("more=2 window=1s");
  const auto half_open = at("to=half_open");
  ASSERT_LT(static_cast<std::size_t>(summary), lines.size()) << log.out.str();
  EXPECT_LT(more, summary);
  EXPECT_LT(summary, half_open) << "the summary comes before the next transition's line\n"
                                << log.out.str();
}

TEST(SpdlogObserver, LeavesTheRegistryAndTheDefaultLoggerAlone) {
  std::ostringstream default_out;
  auto previous_default = spdlog::default_logger();
  auto default_logger = std::make_shared<spdlog::logger>(
      "default-for-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(default_out));
  default_logger->set_level(spdlog::level::trace);
  spdlog::set_default_logger(default_logger);
  {
    Captured log;
    auto observer = std::make_shared<SpdlogObserver>(log.logger);
    const Shield shield = Shield{}.with_name("api").retry(one_retry(0ms)).observed_by(observer);
    EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }), std::runtime_error);
    EXPECT_FALSE(log.lines().empty());
    EXPECT_EQ(spdlog::default_logger_raw(), default_logger.get());
    EXPECT_EQ(spdlog::get("kevlar-test"), nullptr) << "the application's logger was not registered";
    EXPECT_EQ(spdlog::get("kevlar"), nullptr);
  }
  EXPECT_EQ(default_out.str(), "") << "nothing went to the default logger";
  spdlog::set_default_logger(previous_default);
}

TEST(SpdlogObserver, RefusesANullLoggerAndAnEmptyWindow) {
  EXPECT_THROW(SpdlogObserver(nullptr), std::invalid_argument);
  Captured log;
  SpdlogObserverOptions o;
  o.summary_window = 0s;
  EXPECT_THROW(SpdlogObserver(log.logger, o), std::invalid_argument);
  o.summary_window = Clock::duration::max();  // start + window would overflow
  EXPECT_THROW(SpdlogObserver(log.logger, o), std::invalid_argument);
}

}  // namespace
}  // namespace kevlar
