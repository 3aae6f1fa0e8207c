// A rejection's kind and retry-after reach the caller in every completion shape: through
// kevlar::with_diagnostics for error-code (and exception_ptr) completions, through kevlar::Error and
// Outcome for synchronous ones. For both limiters and the breaker.
#include "async_ops.hpp"

#include <kevlar/diagnostics.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using namespace std::chrono_literals;

void rethrow(std::exception_ptr ep) {
  if (ep) std::rethrow_exception(ep);
}

/// One permit per 10 s: after the first call, the next is rejected with exactly 10 s to wait (on a
/// manual clock that does not move).
std::shared_ptr<RateLimitStrategy> slow_rate() {
  RateLimitOptions o;
  o.permits = 1;
  o.window = 10s;
  return RateLimitStrategy::create(o);
}

struct DiagnosticsTest : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  asio::io_context ioc;

  /// An Asio operation through `shield` completing with (ec, value), its handler wrapped by
  /// with_diagnostics(d, ...); returns the completion's error code.
  error_code run_op(const Shield& shield, Diagnostics& d, error_code op_error = {}) {
    std::optional<error_code> got;
    shield.execute_async(
        [&](auto token) { return test::async_answer(ioc.get_executor(), op_error, 7, std::move(token)); },
        with_diagnostics(d, asio::bind_executor(ioc, [&](error_code ec, int) { got = ec; })));
    ioc.restart();
    ioc.run();
    EXPECT_TRUE(got.has_value());
    return got.value_or(error_code());
  }
};

TEST_F(DiagnosticsTest, ARateLimitRejectionCarriesItsExactRetryAfter) {
  const Shield shield = Shield{}.use(slow_rate()).with_clock(clock);
  Diagnostics d;
  EXPECT_FALSE(run_op(shield, d));
  EXPECT_FALSE(d.error);
  EXPECT_FALSE(d.rejection.has_value());
  clock->advance(4s);
  EXPECT_EQ(run_op(shield, d), errc::rate_limited);
  EXPECT_EQ(d.error, errc::rate_limited);
  EXPECT_EQ(d.rejection, RejectionKind::rate_limit);
  EXPECT_EQ(d.retry_after, Clock::duration(6s));
}

TEST_F(DiagnosticsTest, AnOpenBreakersRejectionCarriesTheRemainingBreak) {
  const Shield shield = Shield{}.circuit_breaker(1, 30s).with_clock(clock);
  Diagnostics d;
  EXPECT_EQ(run_op(shield, d, asio::error::connection_reset), asio::error::connection_reset);
  EXPECT_EQ(d.error, asio::error::connection_reset) << "the operation's own failure";
  EXPECT_FALSE(d.rejection.has_value());
  EXPECT_FALSE(d.retry_after.has_value());
  clock->advance(10s);
  EXPECT_EQ(run_op(shield, d), errc::circuit_open);
  EXPECT_EQ(d.rejection, RejectionKind::circuit_open);
  EXPECT_EQ(d.retry_after, Clock::duration(20s));
}

TEST_F(DiagnosticsTest, AConcurrencyLimitRejectionHasAKindButNoRetryAfter) {
  const Shield shield = Shield{}.concurrency_limit(1).with_clock(clock);
  Diagnostics first;
  Diagnostics second;
  std::optional<error_code> a;
  std::optional<error_code> b;
  // The first holds the permit (its operation completes only after the second was rejected).
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 1, std::move(token)); },
      with_diagnostics(first, asio::bind_executor(ioc, [&](error_code ec, int) { a = ec; })));
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 2, std::move(token)); },
      with_diagnostics(second, asio::bind_executor(ioc, [&](error_code ec, int) { b = ec; })));
  ioc.run();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(*a);
  EXPECT_EQ(*b, errc::concurrency_limit_exceeded);
  EXPECT_EQ(second.rejection, RejectionKind::concurrency_limit);
  EXPECT_FALSE(second.retry_after.has_value());
  EXPECT_FALSE(first.rejection.has_value());
}

TEST_F(DiagnosticsTest, AReusedDiagnosticsIsClearedByTheNextCall) {
  auto rate = slow_rate();
  const Shield shield = Shield{}.use(rate).with_clock(clock);
  Diagnostics d;
  EXPECT_FALSE(run_op(shield, d));
  EXPECT_EQ(run_op(shield, d), errc::rate_limited);
  ASSERT_TRUE(d.rejection.has_value());
  clock->advance(10s);
  EXPECT_FALSE(run_op(shield, d));
  EXPECT_FALSE(d.error);
  EXPECT_FALSE(d.rejection.has_value());
  EXPECT_FALSE(d.retry_after.has_value());
  // A shield with no strategy runs no execution: the diagnostics are only cleared.
  d.error = errc::timeout;
  EXPECT_FALSE(run_op(Shield{}, d));
  EXPECT_FALSE(d.error);
}

TEST_F(DiagnosticsTest, CoroutineTokensInEitherOrderWithAsTuple) {
  const Shield shield = Shield{}.use(slow_rate()).with_clock(clock);
  int checks = 0;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto op = [&](auto token) {
          return test::async_answer(ioc.get_executor(), {}, 7, std::move(token));
        };
        Diagnostics d1;
        auto [ec1, v1] =
            co_await shield.execute_async(op, with_diagnostics(d1, asio::as_tuple(asio::deferred)));
        EXPECT_FALSE(ec1);
        EXPECT_EQ(v1, 7);
        Diagnostics d2;
        auto [ec2, v2] = co_await shield.execute_async(
            op, with_diagnostics(d2, asio::as_tuple(asio::use_awaitable)));
        EXPECT_EQ(ec2, errc::rate_limited);
        EXPECT_EQ(d2.retry_after, Clock::duration(10s));
        (void)v2;
        // The adapter inside as_tuple: Asio's handler forwards the association.
        Diagnostics d3;
        auto [ec3, v3] = co_await shield.execute_async(
            op, asio::as_tuple(with_diagnostics(d3, asio::use_awaitable)));
        EXPECT_EQ(ec3, errc::rate_limited);
        EXPECT_EQ(d3.rejection, RejectionKind::rate_limit);
        EXPECT_EQ(d3.retry_after, Clock::duration(10s));
        (void)v3;
        // use_awaitable alone throws the error: the diagnostics are written before it resumes.
        Diagnostics d4;
        try {
          co_await shield.execute_async(op, with_diagnostics(d4, asio::use_awaitable));
          ADD_FAILURE() << "not rejected";
        } catch (const boost::system::system_error& e) {
          EXPECT_EQ(e.code(), errc::rate_limited);
          EXPECT_EQ(d4.retry_after, Clock::duration(10s));
        }
        // redirect_error forwards it too.
        Diagnostics d5;
        error_code redirected;
        co_await shield.execute_async(
            op, asio::redirect_error(with_diagnostics(d5, asio::use_awaitable), redirected));
        EXPECT_EQ(redirected, errc::rate_limited);
        EXPECT_EQ(d5.rejection, RejectionKind::rate_limit);
        ++checks;
      },
      rethrow);
  ioc.run();
  EXPECT_EQ(checks, 1);
}

asio::awaitable<int> answer() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  co_return 3;
}

TEST_F(DiagnosticsTest, ExceptionPtrCompletionsToo) {
  const Shield shield = Shield{}.use(slow_rate()).with_clock(clock);
  Diagnostics d;
  std::exception_ptr last;
  for (int i = 0; i < 2; ++i) {
    shield.execute_async([] { return answer(); },
                         with_diagnostics(d, asio::bind_executor(ioc, [&](std::exception_ptr ep, int) {
                           last = ep;
                         })));
    ioc.restart();
    ioc.run();
  }
  ASSERT_TRUE(last);
  EXPECT_EQ(d.error, errc::rate_limited);
  EXPECT_EQ(d.rejection, RejectionKind::rate_limit);
  EXPECT_EQ(d.retry_after, Clock::duration(10s));
  try {
    std::rethrow_exception(last);
  } catch (const Error& e) {
    EXPECT_EQ(e.retry_after(), Clock::duration(10s)) << "kevlar::Error carries it as well";
  }
}

TEST_F(DiagnosticsTest, ARefusalForAMissingExecutorIsWrittenToo) {
  const Shield shield = Shield{}.timeout(1s).with_clock(clock);
  Diagnostics d;
  std::promise<error_code> seen;
  shield.execute_async(
      [&](auto token) { return test::async_answer(ioc.get_executor(), {}, 1, std::move(token)); },
      with_diagnostics(d, [&](error_code ec, int) { seen.set_value(ec); }));
  // No executor of its own: it completes on the system executor, with the diagnostics written
  // before the handler runs.
  std::future<error_code> delivered = seen.get_future();
  ASSERT_EQ(delivered.wait_for(10s), std::future_status::ready) << "the handler never ran";
  EXPECT_EQ(delivered.get(), errc::executor_required);
  EXPECT_EQ(d.error, errc::executor_required);
  EXPECT_FALSE(d.rejection.has_value());
}

// Synchronous executions: kevlar::Error and Outcome carry the retry-after, and rejection_kind
// names the kind, for both limiters and the breaker.
TEST_F(DiagnosticsTest, SynchronousRejectionsCarryTheSameThroughErrorAndOutcome) {
  const Shield rate = Shield{}.use(slow_rate()).with_clock(clock);
  EXPECT_EQ(rate.execute([] { return 1; }), 1);
  try {
    rate.execute([] { return 1; });
    ADD_FAILURE() << "not rejected";
  } catch (const Error& e) {
    EXPECT_EQ(rejection_kind(e.error()), RejectionKind::rate_limit);
    EXPECT_EQ(e.retry_after(), Clock::duration(10s));
  }
  const Shield breaker = Shield{}.circuit_breaker(1, 30s).with_clock(clock);
  EXPECT_THROW(breaker.execute([]() -> int { throw std::runtime_error("down"); }),
               std::runtime_error);
  const Outcome<int> open = breaker.execute_outcome([] { return 1; });
  EXPECT_EQ(rejection_kind(open.error()), RejectionKind::circuit_open);
  EXPECT_EQ(open.retry_after(), Clock::duration(30s));
  auto limiter = ConcurrencyLimitStrategy::create({});
  limiter->close();
  const Outcome<int> closed = Shield{}.use(limiter).execute_outcome([] { return 1; });
  EXPECT_EQ(closed.error(), errc::closed);
  EXPECT_FALSE(rejection_kind(closed.error()).has_value()) << "closed is no rejection";
  EXPECT_FALSE(rejection_kind(asio::error::operation_aborted).has_value());
  EXPECT_EQ(rejection_kind(make_error_code(errc::isolated)), RejectionKind::isolated);
  EXPECT_EQ(rejection_kind(make_error_code(errc::concurrency_limit_exceeded)),
            RejectionKind::concurrency_limit);
}

// Synchronous concurrency-limit rejection: the kind, no retry-after.
TEST_F(DiagnosticsTest, ASynchronousConcurrencyLimitRejection) {
  const Shield shield = Shield{}.concurrency_limit(1).with_clock(clock);
  std::optional<Outcome<int>> inner;
  const Outcome<int> outer = shield.execute_outcome([&] {
    inner = shield.execute_outcome([] { return 2; });  // the only permit is the outer call's
    return 1;
  });
  ASSERT_TRUE(inner.has_value());
  EXPECT_EQ(rejection_kind(inner->error()), RejectionKind::concurrency_limit);
  EXPECT_FALSE(inner->retry_after().has_value());
  EXPECT_EQ(outer.value(), 1);
}

}  // namespace
}  // namespace kevlar
