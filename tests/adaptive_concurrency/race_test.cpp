// Windows closing and the limit moving while executions on several threads take, queue for and
// return permits (run under ThreadSanitizer in CI): no permit is lost or doubled, every sample is
// counted once, and the limit never leaves its bounds.
#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/error.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// A limit that moves at nearly every window: AIMD on 1 ms windows, a drop every few calls.
AdaptiveLimitOptions restless(int max_queue) {
  AdaptiveLimitOptions o;
  o.initial_limit = 2;
  o.min_limit = 1;
  o.max_limit = 4;
  o.max_queue = max_queue;
  o.window = 1ms;
  o.min_window_samples = 1;
  return o;
}

TEST(AdaptiveLimiterRaces, SynchronousCallersOnThreeThreadsLoseNoPermit) {
  constexpr int per_thread = 3000;
  std::atomic<std::uint32_t> limits_out_of_bounds{0};
  AdaptiveLimitOptions o = restless(8);
  o.on_limit_changed = [&](const LimitChanged& c) {
    if (c.new_limit < 1 || c.new_limit > 4) limits_out_of_bounds.fetch_add(1);
  };
  auto limiter = adaptive_concurrency_limit(o);
  const Shield shield = Shield{}.use(limiter);
  std::atomic<int> ok{0}, dropped{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        try {
          const int v = shield.execute([i, t]() -> int {
            if ((i + t) % 5 == 0) throw Error(make_error_code(errc::timeout));
            return i;
          });
          if (v == i) ok.fetch_add(1);
        } catch (const Error& e) {
          if (e.code() == errc::timeout) {
            dropped.fetch_add(1);
          } else {
            refused.fetch_add(1);  // queue full: a rejection, never a lost call
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok + dropped + refused, 3 * per_thread);
  const ConcurrencyLimitState s = limiter->state();
  EXPECT_EQ(s.running, 0u) << "a permit was lost";
  EXPECT_EQ(s.queued, 0u);
  EXPECT_EQ(limits_out_of_bounds.load(), 0u);
  EXPECT_GE(limiter->limit(), 1u);
  EXPECT_LE(limiter->limit(), 4u);
  EXPECT_EQ(limiter->limiter().max_concurrency(), limiter->limit());
  // Every admitted call was one sample (the last window's are not closed yet, so at most).
  const AdaptiveLimitController& c = limiter->controller();
  EXPECT_LE(c.total(LimitSample::success), static_cast<std::uint64_t>(ok.load()));
  EXPECT_LE(c.total(LimitSample::dropped), static_cast<std::uint64_t>(dropped.load()));
}

// Calls started from the loop's own two threads (each completion starts the next, 16 in flight at
// a time), through a limit of 1 to 4 with a queue of 16, while 1 ms windows close and resize it:
// 16 calls always fit (one permit and the queue), so none is refused, whatever the limit does.
TEST(AdaptiveLimiterRaces, AsynchronousCallsOnTwoLoopThreadsLoseNoPermit) {
  constexpr int calls = 20000;
  auto limiter = adaptive_concurrency_limit(restless(16));
  const Shield shield = Shield{}.use(limiter);
  asio::io_context ioc(2);
  std::atomic<int> started{0}, done{0}, ok{0}, refused{0};
  std::function<void()> launch = [&] {
    const int i = started.fetch_add(1);
    if (i >= calls) return;
    shield.execute_async(
        [&ioc, i](auto token) {
          return asio::async_initiate<decltype(token), void(boost::system::error_code, int)>(
              [&ioc, i](auto handler) {
                asio::post(ioc, [h = std::move(handler), i]() mutable {
                  std::move(h)(i % 7 == 0 ? make_error_code(errc::timeout)
                                          : boost::system::error_code(),
                               i);
                });
              },
              token);
        },
        asio::bind_executor(ioc, [&](boost::system::error_code ec, int) {
          if (!ec) ok.fetch_add(1);
          if (ec == errc::concurrency_limit_exceeded) refused.fetch_add(1);
          done.fetch_add(1);
          launch();
        }));
  };
  for (int i = 0; i < 16; ++i) asio::post(ioc, launch);
  std::thread other([&ioc] { ioc.run(); });
  ioc.run();
  other.join();
  EXPECT_EQ(done.load(), calls);
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(ok.load(), calls - (calls + 6) / 7) << "every call but the failing seventh succeeds";
  EXPECT_EQ(limiter->state().running, 0u) << "a permit was lost";
  EXPECT_EQ(limiter->state().queued, 0u);
  EXPECT_GE(limiter->controller().windows(), 1u) << "no window closed during the run";
  EXPECT_EQ(limiter->limiter().max_concurrency(), limiter->limit())
      << "resizes were applied out of order";
}

}  // namespace
}  // namespace kevlar
