// Retry through Shield::execute_async: the same strategy code as the synchronous path, with backoff
// waits on clock timers bound to the caller's cancellation. Time moves only by ManualClock::advance
// followed by io_context::poll.
#include <boom.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>

#include <alloc_counter.hpp>

#include <gtest/gtest.h>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

// g++ 12 reports designated initializers that leave out members with default initializers
// (the intended way to write kevlar's options) under -Wextra.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using boost::system::error_code;

using test::Boom;

/// Completes with (ec, value) through a post.
template <class Token>
auto async_answer(asio::io_context& ioc, error_code ec, int value, Token&& token) {
  return asio::async_initiate<Token, void(error_code, int)>(
      [&ioc](auto handler, error_code e, int v) {
        auto ex = asio::get_associated_executor(handler, ioc.get_executor());
        asio::post(ex, asio::append(std::move(handler), e, v));
      },
      token, ec, value);
}

void rethrow(std::exception_ptr ep) {
  if (ep) std::rethrow_exception(ep);
}

struct Result {
  int completions = 0;
  error_code ec;
  int value = -1;
};

/// A completion handler recording into `r`, cancellable through `sig`.
auto record(asio::io_context& ioc, asio::cancellation_signal& sig, Result& r) {
  return asio::bind_cancellation_slot(sig.slot(),
                                      asio::bind_executor(ioc, [&r](error_code ec, int v) {
                                        ++r.completions;
                                        r.ec = ec;
                                        r.value = v;
                                      }));
}

/// An attempt failing with `errors[i]` on call i (then succeeding with the call number).
struct Scripted {
  asio::io_context* ioc;
  std::vector<error_code> errors;
  int* calls;
  template <class Token>
  auto operator()(Token&& token) {
    const int n = (*calls)++;
    const error_code ec = static_cast<std::size_t>(n) < errors.size()
                              ? errors[static_cast<std::size_t>(n)]
                              : error_code{};
    return async_answer(*ioc, ec, n + 1, std::forward<Token>(token));
  }
};

// Every allocation while the backoff wait is armed (the clock timer, the cancellation handler,
// the clock's entry) is failed in turn. The wait fails, not the loop: the retry ends with the
// exception, the caller's handler runs once, and nothing is left behind (AddressSanitizer's leak
// check, in CI). The execution once escaped its engine there, leaking with its handler uncalled.
TEST(RetryAsync, AnAllocationFailureWhileArmingTheBackoffFailsTheCall) {
  auto clock = ManualClock::create();
  const Shield shield = Shield{}
                            .retry(RetryOptions{.max_retries = 3, .backoff = Backoff::constant(1s)})
                            .with_clock(clock);
  int failures = 0;
  for (std::uint64_t n = 0; n < 64; ++n) {
    asio::io_context ioc;
    int calls = 0;
    int completions = 0;
    std::optional<error_code> got;
    shield.execute_async(Scripted{&ioc, {asio::error::connection_reset}, &calls},
                         asio::bind_executor(ioc, [&](error_code ec, int) {
                           ++completions;
                           got = ec;
                         }));
    // The first attempt fails, then the wait is armed.
    const auto injected = kevlar::testing::inject_allocation_failure(n, [&] { ioc.poll(); });
    if (!injected.fired) {  // the poll allocated fewer than n + 1 times: all covered
      // This call armed its backoff on the manual clock unharmed: let it finish, or its wait would
      // outlive the io_context, holding the call, which holds the shield, which holds the clock.
      for (int i = 0; i < 4 && completions == 0; ++i) {
        clock->advance(1s);
        ioc.restart();
        ioc.poll();
      }
      EXPECT_EQ(completions, 1);
      EXPECT_EQ(clock->pending_timers(), 0U);
      break;
    }
    ++failures;
    EXPECT_FALSE(injected.threw) << "allocation " << n << ": the failure escaped the loop";
    for (int i = 0; i < 4 && completions == 0; ++i) {
      clock->advance(1s);
      ioc.restart();
      ioc.poll();
    }
    EXPECT_EQ(completions, 1) << "allocation " << n;
    ASSERT_TRUE(got.has_value()) << n;
    EXPECT_EQ(*got, errc::callback_exception) << n;
    EXPECT_EQ(calls, 1) << n;
  }
  EXPECT_GE(failures, 1);
}

// Through a real io_context (the driver's outcomes keep only the error): the values the last call
// completed with travel with its error.
TEST(RetryAsync, TheLastFailuresValuesTravelWithItsError) {
  asio::io_context ioc;
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  Shield{}
      .retry(RetryOptions{.max_retries = 2, .backoff = Backoff::none()})
      .execute_async(Scripted{&ioc,
                              {asio::error::connection_reset, asio::error::connection_refused,
                               asio::error::host_unreachable},
                              &calls},
                     record(ioc, sig, r));
  ioc.run();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r.completions, 1);
  EXPECT_EQ(r.ec, asio::error::host_unreachable);
  EXPECT_EQ(r.value, 3) << "the last call's values travel with its error";
}

TEST(RetryAsync, AwaitableFactorySurfacesTheThirdExceptionObject) {
  asio::io_context ioc;
  std::vector<std::exception_ptr> thrown;
  std::exception_ptr caught;
  const Shield shield = Shield{}.retry(RetryOptions{.max_retries = 2, .backoff = Backoff::none()});
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        try {
          (void)co_await shield.execute_async([&]() -> asio::awaitable<int> {
            thrown.push_back(std::make_exception_ptr(Boom(static_cast<int>(thrown.size()) + 1)));
            std::rethrow_exception(thrown.back());
            co_return 0;
          });
          ADD_FAILURE() << "no exception";
        } catch (const Boom&) {
          caught = std::current_exception();
        }
      },
      rethrow);
  ioc.run();
  ASSERT_EQ(thrown.size(), 3U);
  EXPECT_EQ(caught, thrown[2]);
}

TEST(RetryAsync, AttemptsAreCountedByTheContext) {
  asio::io_context ioc;
  std::vector<std::uint32_t> attempts;
  int result = 0;
  const Shield shield = Shield{}.retry(RetryOptions{
      .max_retries = 3, .backoff = Backoff::none(), .on_retry = [&](const RetryEvent& e) {
        attempts.push_back(e.context.attempt());
      }});
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        int calls = 0;
        result = co_await shield.execute_async([&]() -> asio::awaitable<int> {
          if (++calls < 3) throw Boom(calls);
          co_return calls * 10;
        });
      },
      rethrow);
  ioc.run();
  EXPECT_EQ(result, 30);
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2}));
}

TEST(RetryAsync, CancellationInsideOnRetryEndsWithOperationAborted) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  Shield{}
      .retry(RetryOptions{
          .max_retries = 3,
          .backoff = Backoff::constant(1s),
          .on_retry = [&](const RetryEvent&) { sig.emit(asio::cancellation_type::terminal); }})
      .with_clock(clock)
      .execute_async(
          Scripted{&ioc, std::vector<error_code>(10, asio::error::connection_reset), &calls},
          record(ioc, sig, r));
  ioc.poll();
  EXPECT_EQ(r.completions, 1);
  EXPECT_EQ(r.ec, asio::error::operation_aborted);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(clock->pending_timers(), 0U) << "no backoff wait is armed";
}

TEST(RetryAsync, MaxDelayCapsARetryAfterGeneratorToExactlyTenSeconds) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  std::vector<std::string> log;
  Shield{}
      .retry(RetryOptions{
          .max_retries = 1,
          .max_delay = 10s,
          .delay_generator = [&](const RetryEvent& e) -> std::optional<Clock::duration> {
            log.push_back("generator");
            EXPECT_LE(e.delay, 10s) << "the backoff's delay is capped before the generator";
            return 1h;
          },
          .on_retry =
              [&](const RetryEvent& e) {
                log.push_back("on_retry");
                EXPECT_EQ(e.delay, 10s);
                EXPECT_EQ(clock->pending_timers(), 0U) << "on_retry runs before the wait starts";
              }})
      .with_clock(clock)
      .execute_async(Scripted{&ioc, {asio::error::connection_reset}, &calls}, record(ioc, sig, r));
  ioc.poll();
  EXPECT_EQ(log, (std::vector<std::string>{"generator", "on_retry"}));
  EXPECT_EQ(clock->pending_timers(), 1U);
  clock->advance(9999ms);
  ioc.poll();
  EXPECT_EQ(calls, 1) << "9.999 s does not release the wait";
  clock->advance(1ms);
  ioc.poll();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.completions, 1);
  EXPECT_FALSE(r.ec);
}

TEST(RetryAsync, HookExceptionSurfacesAsTheSameObject) {
  asio::io_context ioc;
  const auto hook_error = std::make_exception_ptr(std::logic_error("hook"));
  int calls = 0;
  std::exception_ptr caught;
  const Shield shield = Shield{}.retry(RetryOptions{
      .max_retries = 3, .backoff = Backoff::none(), .on_retry = [&](const RetryEvent&) {
        std::rethrow_exception(hook_error);
      }});
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        try {
          (void)co_await shield.execute_async([&]() -> asio::awaitable<int> {
            throw Boom(++calls);
            co_return 0;
          });
        } catch (...) {
          caught = std::current_exception();
        }
      },
      rethrow);
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(caught, hook_error);
}

TEST(RetryAsync, NestedRetriesMultiply) {
  asio::io_context ioc;
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  const RetryOptions two{.max_retries = 2, .backoff = Backoff::none()};
  Shield{}.retry(two).retry(two).execute_async(
      Scripted{&ioc, std::vector<error_code>(100, asio::error::connection_reset), &calls},
      record(ioc, sig, r));
  ioc.run();
  EXPECT_EQ(calls, 9);
  EXPECT_EQ(r.ec, asio::error::connection_reset);
}

TEST(RetryAsync, ResultClauseSeesTheOperationsValue) {
  asio::io_context ioc;
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  std::vector<int> bad_values;
  Shield{}
      .when(Clause().result<int>([](int v) { return v < 3; }))
      .retry(RetryOptions{.max_retries = 5,
                          .backoff = Backoff::none(),
                          .on_retry =
                              [&](const RetryEvent& e) {
                                const int* v = e.outcome.value_if<int>();
                                bad_values.push_back(v != nullptr ? *v : -1);
                              }})
      .execute_async(Scripted{&ioc, {}, &calls}, record(ioc, sig, r));
  ioc.run();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r.value, 3);
  EXPECT_EQ(bad_values, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace kevlar

namespace kevlar {
namespace {

TEST(RetryAsync, JitteredBackoffWithAFixedRandomSourceWaitsExactly) {
  asio::io_context ioc;
  auto clock = ManualClock::create();
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  RetryOptions options;
  options.max_retries = 2;
  // u = 0 is the smallest jitter factor, 0.5: waits of 500 ms, then 1 s.
  options.backoff = Backoff::exponential(1s).with_random([] { return 0.0; });
  Shield{}.retry(options).with_clock(clock).execute_async(
      Scripted{&ioc, {asio::error::connection_reset, asio::error::connection_reset}, &calls},
      record(ioc, sig, r));
  ioc.poll();
  clock->advance(499ms);
  ioc.poll();
  EXPECT_EQ(calls, 1);
  clock->advance(1ms);
  ioc.poll();
  EXPECT_EQ(calls, 2);
  clock->advance(999ms);
  ioc.poll();
  EXPECT_EQ(calls, 2);
  clock->advance(1ms);
  ioc.poll();
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(r.ec);
}

/// Cancels the part of the pipeline inside it before running it (what a timeout does on expiry).
class CancelInside final : public Strategy {
 public:
  std::string describe() const override { return "CancelInside"; }
  Step on_start(Layer& layer) override {
    layer.cancel_inner();
    return Step::run_inner;
  }
};

TEST(RetryAsync, CancellationByAnOuterStrategyStopsTheLoop) {
  asio::io_context ioc;
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  Shield{}
      .use(std::make_shared<CancelInside>())
      .retry(RetryOptions{.max_retries = 3, .backoff = Backoff::none()})
      .execute_async(
          Scripted{&ioc, std::vector<error_code>(10, asio::error::connection_reset), &calls},
          record(ioc, sig, r));
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.ec, asio::error::connection_reset);
}

TEST(RetryAsync, RetryForeverKeepsGoingUntilSuccess) {
  asio::io_context ioc;
  int calls = 0;
  asio::cancellation_signal sig;
  Result r;
  Shield{}
      .retry(RetryOptions{.max_retries = retry_forever, .backoff = Backoff::none()})
      .execute_async(
          Scripted{&ioc, std::vector<error_code>(50, asio::error::connection_reset), &calls},
          record(ioc, sig, r));
  ioc.run();
  EXPECT_EQ(calls, 51);
  EXPECT_FALSE(r.ec);
  EXPECT_EQ(r.value, 51);
}

}  // namespace
}  // namespace kevlar
