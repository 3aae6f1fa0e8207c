// One adaptive throttle hammered from several threads at once (run under ThreadSanitizer in CI,
// label "concurrency"): synchronous callers on two shields moving the clock through new buckets,
// callers throttled at the cap with the per-thread random source, and callback executions
// completing on an io_context run by two threads. Every call is counted exactly once, and every
// accept too.
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/error.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>

#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using boost::system::error_code;

error_code refused() {
  return make_error_code(boost::system::errc::io_error);
}

TEST(ThrottleRaces, CallersOnFourThreadsAndAMovingClockLoseNoCount) {
  constexpr int threads = 4;
  constexpr int per_thread = 5000;
  auto clock = ManualClock::create();
  AdaptiveThrottleOptions o;
  o.window = 1h;
  o.buckets = 1000;                 // 3.6 s buckets: the mover crosses hundreds of them
  o.random = [] { return 0.999; };  // admits everything below the 0.9 cap
  auto throttle = adaptive_throttle(o);
  const Shield a = Shield{}.with_clock(clock).use(throttle);
  const Shield b = Shield{}.with_clock(clock).use(throttle);
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        // Each thread moves the clock to a new bucket every 50 of its calls (400 moves, within the
        // ring's 1000: nothing leaves the window): each first write of a bucket resets its slot,
        // racing the other writers, some of which still write the bucket before.
        if (i % 50 == 49) clock->advance(3600ms);
        const Shield& s = (i + t) % 2 == 0 ? a : b;
        const Outcome<int> out = s.execute_outcome([i]() -> int {
          if (i % 2 == 1) throw boost::system::system_error(refused());
          return i;
        });
        (out.has_value() ? ok : failed).fetch_add(1);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  EXPECT_EQ(ok.load(), threads * per_thread / 2) << "a call was throttled or lost";
  EXPECT_EQ(failed.load(), threads * per_thread / 2);
  const AdaptiveThrottleSnapshot s = throttle->snapshot(*clock);
  EXPECT_EQ(clock->now() - Clock::time_point(1h), threads * (per_thread / 50) * 3600ms);
  EXPECT_EQ(s.requests, static_cast<std::uint64_t>(threads * per_thread));
  EXPECT_EQ(s.accepts, static_cast<std::uint64_t>(ok.load()));
}

TEST(ThrottleRaces, ThrottledCallersCountTheirRejectionsToo) {
  constexpr int threads = 4;
  constexpr int per_thread = 5000;
  constexpr int total = threads * per_thread;
  auto clock = ManualClock::create();
  std::atomic<int> hooked{0};
  AdaptiveThrottleOptions o;
  o.on_throttled = [&hooked](const ThrottleEvent& e) {
    if (e.probability > 0 && e.probability <= 0.9) hooked.fetch_add(1);
  };
  auto throttle = adaptive_throttle(o);  // the per-thread random source
  const Shield shield = Shield{}.with_clock(clock).use(throttle);
  std::atomic<int> sent{0}, throttled{0}, other{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        const Outcome<int> out = shield.execute_outcome([&sent]() -> int {
          sent.fetch_add(1);
          throw boost::system::system_error(refused());
        });
        if (out.has_error() && out.error() == errc::throttled) {
          throttled.fetch_add(1);
        } else if (!out.has_exception()) {
          other.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(sent.load() + throttled.load(), total);
  EXPECT_EQ(hooked.load(), throttled.load());
  // The dependency accepts nothing: p reaches the cap after a few calls, so about 90 % of the
  // 20,000 calls are rejected (a binomial count, 18,000 ± 42: the bounds are far outside it).
  EXPECT_GT(throttled.load(), total * 85 / 100);
  EXPECT_LT(throttled.load(), total * 95 / 100);
  const AdaptiveThrottleSnapshot s = throttle->snapshot(*clock);
  EXPECT_EQ(s.requests, static_cast<std::uint64_t>(total)) << "every call is a request";
  EXPECT_EQ(s.accepts, 0u);
  EXPECT_DOUBLE_EQ(s.probability, 0.9);
}

/// An Asio operation that completes at once (posted) with 7, or with a refusal when `fail`.
auto posted_op(bool fail) {
  return [fail](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [fail](auto handler) {
          auto ex = asio::get_associated_executor(handler);
          asio::post(ex, asio::append(std::move(handler), fail ? refused() : error_code(), 7));
        },
        token);
  };
}

TEST(ThrottleRaces, CallbackExecutionsOnTwoIoThreadsAreCountedOnce) {
  constexpr int calls = 4000;
  AdaptiveThrottleOptions o;
  o.random = [] { return 0.999; };
  auto throttle = adaptive_throttle(o);
  auto clock = ManualClock::create();
  const Shield shield = Shield{}.with_clock(clock).use(throttle);
  asio::io_context ioc(2);
  auto guard = asio::make_work_guard(ioc);
  std::vector<std::thread> io;
  for (int t = 0; t < 2; ++t) io.emplace_back([&ioc] { ioc.run(); });
  std::latch done(calls);
  std::atomic<int> ok{0}, failed{0};
  for (int i = 0; i < calls; ++i) {
    shield.execute_async(posted_op(i % 4 == 0), asio::bind_executor(ioc, [&](error_code ec, int) {
                           (ec ? failed : ok).fetch_add(1);
                           done.count_down();
                         }));
  }
  done.wait();
  guard.reset();
  for (std::thread& th : io) th.join();
  EXPECT_EQ(ok.load(), calls * 3 / 4);
  EXPECT_EQ(failed.load(), calls / 4);
  const AdaptiveThrottleSnapshot s = throttle->snapshot(*clock);
  EXPECT_EQ(s.requests, static_cast<std::uint64_t>(calls));
  EXPECT_EQ(s.accepts, static_cast<std::uint64_t>(calls * 3 / 4));
}

}  // namespace
}  // namespace kevlar
