// Fallback: replaces handled outcomes only; hook, then recovery; their exceptions become the
// outcome; wrong result types; reachability at build; sync and async shapes; allocations.
#include <alloc_counter.hpp>
#include <boom.hpp>
#include <kevlar/fallback.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
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
struct Other : std::runtime_error {
  Other() : std::runtime_error("other") {}
};

void rethrow(std::exception_ptr ep) {
  if (ep) std::rethrow_exception(ep);
}

/// Asserts `fn` throws std::invalid_argument whose message contains `needle`.
template <class F>
void expect_invalid(F fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// Rejects every call with `errc::circuit_open` without running it.
class Rejecting final : public Strategy {
 public:
  std::string describe() const override { return "Rejecting"; }
  Step on_start(Layer& layer) override {
    layer.outcome().set_rejection(make_error_code(errc::circuit_open), 5s);
    return Step::complete;
  }
};

// ---- synchronous ------------------------------------------------------------------------------

TEST(FallbackSync, ValueReplacesAHandledException) {
  EXPECT_EQ(Shield{}.fallback(-1).execute([]() -> int { throw Boom(); }), -1);
}

TEST(FallbackSync, SuccessPassesThrough) {
  int hooks = 0;
  const Shield shield = Shield{}.fallback(FallbackOptions<int>{
      .value = -1, .on_fallback = [&](const FallbackEvent<int>&) { ++hooks; }});
  EXPECT_EQ(shield.execute([] { return 5; }), 5);
  EXPECT_EQ(hooks, 0);
}

TEST(FallbackSync, UnhandledExceptionsPassThrough) {
  const Shield shield = Shield{}.when(Clause().exception<Boom>()).fallback(-1);
  EXPECT_THROW((void)shield.execute([]() -> int { throw Other(); }), Other);
  EXPECT_EQ(shield.execute([]() -> int { throw Boom(); }), -1);
}

TEST(FallbackSync, CancellationPassesThroughUnlessTheClauseNamesIt) {
  auto cancelled = []() -> int { throw Error(asio::error::operation_aborted); };
  EXPECT_THROW((void)Shield{}.fallback(-1).execute(cancelled), Error);
  EXPECT_EQ(
      Shield{}.when(Clause().error(asio::error::operation_aborted)).fallback(-1).execute(cancelled),
      -1);
  // A call the caller stopped before it started is not recovered either.
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW((void)Shield{}.fallback(-1).execute([] { return 1; }, stop.get_token()), Error);
}

TEST(FallbackSync, ResultClauseReplacesBadResults) {
  const Shield shield = Shield{}.when(Clause().result_equal(-1)).fallback(0);
  EXPECT_EQ(shield.execute([] { return -1; }), 0);
  EXPECT_EQ(shield.execute([] { return 3; }), 3);
  EXPECT_THROW((void)shield.execute([]() -> int { throw Boom(); }), Boom)
      << "a result-only clause does not handle exceptions";
}

TEST(FallbackSync, HookRunsBeforeRecoveryWithTheExactOutcome) {
  std::vector<std::string> log;
  const auto original = std::make_exception_ptr(Boom());
  const Key<int> key("k");
  const Shield shield =
      Shield{}.fallback(FallbackOptions<int>{.recovery =
                                                 [&](const Outcome<int>& o, Context& ctx) {
                                                   log.push_back("recovery");
                                                   EXPECT_EQ(o.exception(), original);
                                                   return 40 + ctx.properties().get_or(key, 0);
                                                 },
                                             .on_fallback =
                                                 [&](const FallbackEvent<int>& e) {
                                                   log.push_back("hook");
                                                   EXPECT_EQ(e.outcome.exception(), original)
                                                       << "the very object the call threw";
                                                   e.context.properties().set(key, 2);
                                                 }});
  EXPECT_EQ(shield.execute([&]() -> int { std::rethrow_exception(original); }), 42);
  EXPECT_EQ(log, (std::vector<std::string>{"hook", "recovery"}));
}

TEST(FallbackSync, AHookWithoutARecoverySeesTheFailureAndTheValueReplacesIt) {
  const auto original = std::make_exception_ptr(Boom());
  int hooks = 0;
  const Shield shield = Shield{}.fallback(
      FallbackOptions<int>{.value = 5, .on_fallback = [&](const FallbackEvent<int>& e) {
                             ++hooks;
                             EXPECT_EQ(e.outcome.exception(), original);
                           }});
  EXPECT_EQ(shield.execute([&]() -> int { std::rethrow_exception(original); }), 5);
  EXPECT_EQ(hooks, 1);
}

TEST(FallbackSync, RecoveryReceivesAHandledResult) {
  const Shield shield =
      Shield{}
          .when(Clause().result<int>([](int v) { return v < 0; }))
          .fallback(FallbackOptions<int>{.recovery = [](const Outcome<int>& o, Context&) {
            EXPECT_TRUE(o.has_value());
            return -o.value();
          }});
  EXPECT_EQ(shield.execute([] { return -7; }), 7);
}

TEST(FallbackSync, HookExceptionBecomesTheOutcomeAndSkipsRecovery) {
  const auto hook_error = std::make_exception_ptr(Other());
  int recoveries = 0;
  bool fail_hook = true;
  const Shield shield =
      Shield{}.fallback(FallbackOptions<int>{.recovery =
                                                 [&](const Outcome<int>&, Context&) {
                                                   ++recoveries;
                                                   return -1;
                                                 },
                                             .on_fallback =
                                                 [&](const FallbackEvent<int>&) {
                                                   if (fail_hook)
                                                     std::rethrow_exception(hook_error);
                                                 }});
  std::exception_ptr caught;
  try {
    (void)shield.execute([]() -> int { throw Boom(); });
  } catch (...) {
    caught = std::current_exception();
  }
  EXPECT_EQ(caught, hook_error);
  EXPECT_EQ(recoveries, 0);
  fail_hook = false;
  EXPECT_EQ(shield.execute([]() -> int { throw Boom(); }), -1) << "a later call recovers";
  EXPECT_EQ(recoveries, 1);
}

TEST(FallbackSync, RecoveryExceptionBecomesTheOutcome) {
  const auto recovery_error = std::make_exception_ptr(Other());
  const Shield shield =
      Shield{}.fallback(FallbackOptions<int>{.recovery = [&](const Outcome<int>&, Context&) -> int {
        std::rethrow_exception(recovery_error);
      }});
  std::exception_ptr caught;
  try {
    (void)shield.execute([]() -> int { throw Boom(); });
  } catch (...) {
    caught = std::current_exception();
  }
  EXPECT_EQ(caught, recovery_error);
}

TEST(FallbackSync, WrongResultTypeFailsWithInvalidResultType) {
  const Shield shield = Shield{}.fallback(-1);  // for int calls
  try {
    (void)shield.execute([]() -> std::string { throw Boom(); });
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_result_type);
  }
  EXPECT_EQ(shield.execute([] { return std::string("ok"); }), "ok") << "successes pass";
  try {
    shield.execute([] { throw Boom(); });  // a void call has no value to replace
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_result_type);
  }
  // The type must be exact: a const char* fallback does not serve std::string calls.
  EXPECT_THROW((void)Shield{}.fallback("x").execute([]() -> std::string { throw Boom(); }), Error);
  EXPECT_EQ(Shield{}.fallback(std::string("x")).execute([]() -> std::string { throw Boom(); }),
            "x");
}

TEST(FallbackSync, RecoversRejectionsFromInnerStrategies) {
  const Shield shield = Shield{}.fallback(-1).use(std::make_shared<Rejecting>());
  int calls = 0;
  EXPECT_EQ(shield.execute([&] { return ++calls; }), -1);
  EXPECT_EQ(calls, 0);
}

TEST(FallbackSync, OuterFallbackAroundARetryRecoversTheLastFailure) {
  int calls = 0;
  const Shield shield =
      Shield{}.fallback(-1).retry(RetryOptions{.max_retries = 2, .backoff = Backoff::none()});
  EXPECT_EQ(shield.execute([&]() -> int {
    ++calls;
    throw Boom();
  }),
            -1);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(shield.describe(), "Fallback -> Retry(2, no delay)");
}

TEST(FallbackSync, FallbackInsideARetryWithTheSameClauseIsRefused) {
  expect_invalid([] { (void)Shield{}.retry(3).fallback(-1); }, "Fallback");
  const Clause boom = Clause().exception<Boom>();
  expect_invalid([&] { (void)Shield{}.when(boom).retry(3).fallback(-1); }, "Retry(3");
  // Its own clause makes it reachable: the retry still sees what the fallback does not handle.
  const Shield ok = Shield{}
                        .retry(RetryOptions{.max_retries = 2, .backoff = Backoff::none()})
                        .when(Clause().exception<Other>())
                        .fallback(-1);
  int calls = 0;
  EXPECT_THROW((void)ok.execute([&]() -> int {
    ++calls;
    throw Boom();
  }),
               Boom);
  EXPECT_EQ(calls, 3);
  EXPECT_NO_THROW((void)Shield{}.fallback(-1).retry(3));
}

TEST(FallbackSync, OptionsAreValidatedAndSnapshotted) {
  expect_invalid([] { (void)Shield{}.fallback(FallbackOptions<int>{}); }, "value or recovery");
  expect_invalid(
      [] {
        (void)Shield{}.fallback(FallbackOptions<int>{
            .value = 1, .recovery = [](const Outcome<int>&, Context&) { return 2; }});
      },
      "not both");
  FallbackOptions<int> options{.value = 1};
  const Shield shield = Shield{}.fallback(options);
  options.value = 2;
  EXPECT_EQ(shield.execute([]() -> int { throw Boom(); }), 1);
  EXPECT_EQ(shield.describe(), "Fallback");
}

TEST(FallbackSync, NotTriggeredAllocatesNothing) {
  const Shield shield = Shield{}.fallback(-1);
  int sum = 0;
  for (int i = 0; i < 10; ++i) sum += shield.execute([i] { return i; });
  kevlar::testing::AllocScope scope;
  for (int i = 0; i < 1000; ++i) sum += shield.execute([i] { return i; });
  EXPECT_EQ(scope.count(), 0U);
  EXPECT_GT(sum, 0);
}

// ---- asynchronous -----------------------------------------------------------------------------

/// Completes with (ec, values...) through a post.
template <class... Ts>
struct Answer {
  asio::io_context* ioc;
  error_code ec;
  std::tuple<Ts...> values;
  int* calls;
  template <class Token>
  auto operator()(Token&& token) {
    ++*calls;
    return asio::async_initiate<Token, void(error_code, Ts...)>(
        [this](auto handler) {
          auto ex = asio::get_associated_executor(handler, ioc->get_executor());
          std::apply(
              [&](const Ts&... vs) { asio::post(ex, asio::append(std::move(handler), ec, vs...)); },
              values);
        },
        token);
  }
};

TEST(FallbackAsync, ReplacesAHandledErrorCode) {
  asio::io_context ioc;
  int calls = 0;
  int completions = 0;
  Shield{}.fallback(-1).execute_async(Answer<int>{&ioc, asio::error::connection_reset, {5}, &calls},
                                      asio::bind_executor(ioc, [&](error_code ec, int v) {
                                        ++completions;
                                        EXPECT_FALSE(ec);
                                        EXPECT_EQ(v, -1);
                                      }));
  ioc.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(completions, 1);
}

TEST(FallbackAsync, SeveralValuesAreATuple) {
  asio::io_context ioc;
  int calls = 0;
  int completions = 0;
  using Pair = std::tuple<int, std::string>;
  Shield{}
      .fallback(FallbackOptions<Pair>{.recovery =
                                          [](const Outcome<Pair>& o, Context&) {
                                            EXPECT_EQ(o.error(), asio::error::eof);
                                            return Pair{0, "cached"};
                                          }})
      .execute_async(Answer<int, std::string>{&ioc, asio::error::eof, {3, "partial"}, &calls},
                     asio::bind_executor(ioc, [&](error_code ec, int n, std::string s) {
                       ++completions;
                       EXPECT_FALSE(ec);
                       EXPECT_EQ(n, 0);
                       EXPECT_EQ(s, "cached");
                     }));
  ioc.run();
  EXPECT_EQ(completions, 1);
}

TEST(FallbackAsync, SuccessAndCancellationPassThrough) {
  asio::io_context ioc;
  int calls = 0;
  std::vector<error_code> got;
  std::vector<int> values;
  const Shield shield = Shield{}.fallback(-1);
  for (error_code ec : {error_code{}, error_code(asio::error::operation_aborted)}) {
    shield.execute_async(Answer<int>{&ioc, ec, {5}, &calls},
                         asio::bind_executor(ioc, [&](error_code e, int v) {
                           got.push_back(e);
                           values.push_back(v);
                         }));
  }
  ioc.run();
  ASSERT_EQ(got.size(), 2U);
  EXPECT_FALSE(got[0]);
  EXPECT_EQ(values[0], 5);
  EXPECT_EQ(got[1], asio::error::operation_aborted);
}

TEST(FallbackAsync, WrongResultTypeFailsWithInvalidResultType) {
  asio::io_context ioc;
  int calls = 0;
  error_code got;
  Shield{}.fallback(-1L).execute_async(
      Answer<int>{&ioc, asio::error::connection_reset, {5}, &calls},
      asio::bind_executor(ioc, [&](error_code e, int) { got = e; }));
  ioc.run();
  EXPECT_EQ(got, errc::invalid_result_type);
}

TEST(FallbackAsync, AwaitableFactoryRecoversAndRecoveryExceptionsKeepTheirIdentity) {
  asio::io_context ioc;
  const auto recovery_error = std::make_exception_ptr(Other());
  int recovered = 0;
  std::exception_ptr caught;
  const Shield by_value = Shield{}.fallback(-1);
  const Shield throwing =
      Shield{}.fallback(FallbackOptions<int>{.recovery = [&](const Outcome<int>&, Context&) -> int {
        std::rethrow_exception(recovery_error);
      }});
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto failing = []() -> asio::awaitable<int> {
          throw Boom();
          co_return 0;
        };
        recovered = co_await by_value.execute_async(failing);
        try {
          (void)co_await throwing.execute_async(failing);
        } catch (...) {
          caught = std::current_exception();
        }
      },
      rethrow);
  ioc.run();
  EXPECT_EQ(recovered, -1);
  EXPECT_EQ(caught, recovery_error);
}

}  // namespace
}  // namespace kevlar
