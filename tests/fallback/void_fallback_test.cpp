// Fallback for calls without a value: a handled failure of a void function or a void(error_code)
// operation becomes a success, after the hook and the optional recovery; unhandled outcomes, the
// caller's cancellation and calls with a value are left alone.
#include <kevlar/fallback.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

struct Down : std::runtime_error {
  Down() : std::runtime_error("down") {}
};

/// Completes a void(error_code) operation with `ec`, through a post to `io`.
struct Answer {
  asio::io_context& io;
  error_code ec;
  int* calls;
  template <class Token>
  auto operator()(Token&& token) const {
    ++*calls;
    return asio::post(io, asio::append(std::forward<Token>(token), ec));
  }
};

TEST(VoidFallback, AHandledExceptionOfAVoidFunctionBecomesASuccessAfterHookAndRecovery) {
  std::vector<std::string> order;
  FallbackOptions<void> o;
  o.on_fallback = [&](const FallbackEvent<void>& e) {
    order.emplace_back("hook");
    EXPECT_TRUE(e.outcome.has_exception());
  };
  o.recovery = [&](const Outcome<void>& failed, Context&) {
    order.emplace_back("recovery");
    EXPECT_THROW(failed.rethrow_if_failed(), Down);
  };
  const Shield shield = Shield{}.fallback(o);
  EXPECT_NO_THROW(shield.execute([] { throw Down(); }));
  EXPECT_EQ(order, (std::vector<std::string>{"hook", "recovery"}));
  EXPECT_TRUE(shield.execute_outcome([] { throw Down(); }).has_value());
}

TEST(VoidFallback, WithoutRecoveryTheFailureIsSwallowed) {
  const Shield shield = Shield{}.fallback(FallbackOptions<void>{});
  int calls = 0;
  shield.execute([&calls] {
    ++calls;
    throw Down();
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(shield.describe(), "Fallback");
}

TEST(VoidFallback, ARecoveryOrHookThatThrowsIsTheOutcome) {
  FallbackOptions<void> o;
  o.recovery = [](const Outcome<void>&, Context&) { throw std::logic_error("compensation"); };
  EXPECT_THROW(Shield{}.fallback(o).execute([] { throw Down(); }), std::logic_error);
  FallbackOptions<void> h;
  h.on_fallback = [](const FallbackEvent<void>&) { throw std::domain_error("hook"); };
  bool recovered = false;
  h.recovery = [&recovered](const Outcome<void>&, Context&) { recovered = true; };
  EXPECT_THROW(Shield{}.fallback(h).execute([] { throw Down(); }), std::domain_error);
  EXPECT_FALSE(recovered) << "a hook's exception skips the recovery";
}

TEST(VoidFallback, UnhandledFailuresAndTheCallersCancellationPassThrough) {
  const Shield shield = Shield{}
                            .when(Clause{}.exception<Down>())
                            .fallback(FallbackOptions<void>{});
  EXPECT_NO_THROW(shield.execute([] { throw Down(); }));
  EXPECT_THROW(shield.execute([] { throw std::out_of_range("not handled"); }), std::out_of_range);
  std::stop_source stop;
  stop.request_stop();
  const Shield plain = Shield{}.fallback(FallbackOptions<void>{});
  EXPECT_THROW(plain.execute([](Context& c) { c.throw_if_cancelled(); }, stop.get_token()), Error);
}

TEST(VoidFallback, AnErrorCodeOperationSucceedsAfterARetryGaveUp) {
  asio::io_context io;
  int calls = 0;
  int fallbacks = 0;
  FallbackOptions<void> o;
  o.recovery = [&fallbacks](const Outcome<void>& failed, Context&) {
    ++fallbacks;
    EXPECT_EQ(failed.error(), asio::error::connection_reset);
  };
  RetryOptions r;
  r.max_retries = 2;
  r.backoff = Backoff::none();
  std::optional<error_code> got;
  Shield{}.fallback(o).retry(r).execute_async(
      Answer{io, asio::error::connection_reset, &calls},
      asio::bind_executor(io, [&](error_code ec) { got = ec; }));
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(*got) << got->message();
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(fallbacks, 1);
}

TEST(VoidFallback, ASuccessfulOperationIsNotTouched) {
  asio::io_context io;
  int calls = 0;
  int fallbacks = 0;
  FallbackOptions<void> o;
  o.recovery = [&fallbacks](const Outcome<void>&, Context&) { ++fallbacks; };
  std::optional<error_code> got;
  Shield{}.fallback(o).execute_async(Answer{io, {}, &calls},
                                     asio::bind_executor(io, [&](error_code ec) { got = ec; }));
  io.run();
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(*got);
  EXPECT_EQ(fallbacks, 0);
}

TEST(VoidFallback, ACallWithAValueFailsAsInvalidResultType) {
  const Shield shield = Shield{}.fallback(FallbackOptions<void>{});
  EXPECT_EQ(shield.execute([] { return 4; }), 4);  // successes pass through
  try {
    (void)shield.execute([]() -> int { throw Down(); });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.error(), errc::invalid_result_type);
  }
}

TEST(VoidFallback, ObserversSeeTheFallbackTaken) {
  struct Seen final : Observer {
    void on_event(const Event& e) override {
      if (e.is<FallbackTaken>()) ++taken;
    }
    int taken = 0;
  };
  auto seen = std::make_shared<Seen>();
  Shield{}.fallback(FallbackOptions<void>{}).observed_by(seen).execute([] { throw Down(); });
  EXPECT_EQ(seen->taken, 1);
}

}  // namespace
}  // namespace kevlar
