#include "test_strategies.hpp"

#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;

struct Base : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Derived : Base {
  Derived() : Base("derived") {}
};
struct Other : std::runtime_error {
  Other() : std::runtime_error("other") {}
};

/// Runs `fn` once through a Judge placed after `prefix` and returns its verdict.
template <class F>
bool verdict(const Shield& prefix, F fn) {
  auto judge = std::make_shared<test::Judge>();
  (void)prefix.use(judge).execute_outcome(fn);
  EXPECT_EQ(judge->verdicts.size(), 1U);
  return judge->verdicts.empty() ? false : judge->verdicts.front();
}

TEST(Clause, DefaultHandlesEveryFailureButCancellation) {
  const Shield s;
  EXPECT_TRUE(verdict(s, []() -> int { throw Other(); }));
  EXPECT_TRUE(verdict(s, []() -> int { throw 42; }));
  EXPECT_FALSE(verdict(s, [] { return 1; }));
  EXPECT_FALSE(verdict(
      s, []() -> int { throw boost::system::system_error(asio::error::operation_aborted); }));
  EXPECT_FALSE(verdict(s, []() -> int { throw Error(asio::error::operation_aborted); }));
  EXPECT_TRUE(verdict(s, []() -> int { throw Error(make_error_code(errc::timeout)); }));
}

TEST(Clause, ExceptionTypesMatchDerivedTypes) {
  const Shield s = Shield{}.when(Clause{}.exception<Base>());
  EXPECT_TRUE(verdict(s, []() -> int { throw Derived(); }));
  EXPECT_TRUE(verdict(s, []() -> int { throw Base("b"); }));
  EXPECT_FALSE(verdict(s, []() -> int { throw Other(); }));
}

TEST(Clause, ExceptionPredicates) {
  const Shield s = Shield{}.when(Clause{}.exception<std::runtime_error>(
      [](const std::runtime_error& e) { return std::string(e.what()) == "retryable"; }));
  EXPECT_TRUE(verdict(s, []() -> int { throw std::runtime_error("retryable"); }));
  EXPECT_FALSE(verdict(s, []() -> int { throw std::runtime_error("fatal"); }));
}

TEST(Clause, AnExceptionPredicateIsNotAskedAboutOtherTypes) {
  int asked = 0;
  const Shield s =
      Shield{}.when(Clause{}.exception<std::runtime_error>([&](const std::runtime_error&) {
        ++asked;
        return true;
      }));
  EXPECT_FALSE(verdict(s, []() -> int { throw 42; }));
  EXPECT_FALSE(verdict(s, []() -> int { throw std::logic_error("not a runtime_error"); }));
  EXPECT_EQ(asked, 0);
  EXPECT_TRUE(verdict(s, []() -> int { throw Other(); }));
  EXPECT_EQ(asked, 1);
}

TEST(Clause, ResultOnlyClauseNeverHandlesExceptions) {
  const Shield s = Shield{}.when(Clause{}.result_equal(-1));
  EXPECT_TRUE(verdict(s, [] { return -1; }));
  EXPECT_FALSE(verdict(s, [] { return 0; }));
  EXPECT_FALSE(verdict(s, []() -> int { throw Other(); }));
  // A result condition of another type never matches.
  EXPECT_FALSE(verdict(s, [] { return -1L; }));
}

TEST(Clause, ResultPredicateJudgesSuccessfulValues) {
  struct Response {
    int status;
  };
  const Shield s =
      Shield{}.when(Clause{}.result<Response>([](const Response& r) { return r.status >= 500; }));
  EXPECT_TRUE(verdict(s, [] { return Response{503}; }));
  EXPECT_FALSE(verdict(s, [] { return Response{200}; }));
}

TEST(Clause, ErrorCodesMatchCodesAndExceptionsCarryingThem) {
  const Shield s =
      Shield{}.when(Clause{}.error(asio::error::connection_reset).error(errc::timeout));
  EXPECT_TRUE(verdict(
      s, []() -> int { throw boost::system::system_error(asio::error::connection_reset); }));
  EXPECT_TRUE(verdict(s, []() -> int { throw Error(make_error_code(errc::timeout)); }));
  EXPECT_FALSE(verdict(s, []() -> int { throw boost::system::system_error(asio::error::eof); }));
  EXPECT_FALSE(verdict(s, []() -> int { throw Other(); }));
  // A strategy-produced error code.
  auto judge = std::make_shared<test::Judge>();
  (void)s.use(judge).use(std::make_shared<test::Reject>(errc::timeout)).execute_outcome([] {
    return 1;
  });
  ASSERT_EQ(judge->verdicts.size(), 1U);
  EXPECT_TRUE(judge->verdicts[0]);
}

TEST(Clause, APlainSuccessIsOneNoResultConditionCanMatch) {
  // Default clause: a success is plain (and not handled); a failure is neither plain nor passed.
  auto judge = std::make_shared<test::Judge>();
  const Shield plain = Shield{}.use(judge);
  EXPECT_EQ(plain.execute([] { return 1; }), 1);
  (void)plain.execute_outcome([]() -> int { throw Other(); });
  EXPECT_EQ(judge->plain, (std::vector<bool>{true, false}));
  EXPECT_EQ(judge->verdicts, (std::vector<bool>{false, true}));

  // A clause with a result condition: no success is plain, whether it matches or not.
  auto judged = std::make_shared<test::Judge>();
  const Shield results = Shield{}.when(Clause{}.result_equal(503)).use(judged);
  (void)results.execute_outcome([] { return 503; });
  EXPECT_EQ(results.execute([] { return 200; }), 200);
  EXPECT_EQ(judged->plain, (std::vector<bool>{false, false}));
  EXPECT_EQ(judged->verdicts, (std::vector<bool>{true, false}));
}

TEST(Clause, AnExplicitClauseMayHandleCancellation) {
  const Shield s = Shield{}.when(Clause{}.error(asio::error::operation_aborted));
  EXPECT_TRUE(verdict(
      s, []() -> int { throw boost::system::system_error(asio::error::operation_aborted); }));
}

TEST(Clause, ConditionsAreOredInOrderWithShortCircuit) {
  int second_calls = 0;
  const Shield s = Shield{}.when(Clause{}
                                     .exceptions_if([](const std::exception_ptr&) { return true; })
                                     .exceptions_if([&](const std::exception_ptr&) {
                                       ++second_calls;
                                       return true;
                                     }));
  EXPECT_TRUE(verdict(s, []() -> int { throw Other(); }));
  EXPECT_EQ(second_calls, 0);
}

TEST(Clause, AThrowingPredicateSurfacesItsOwnException) {
  const Shield s = Shield{}.when(
      Clause{}.exceptions_if([](const std::exception_ptr&) -> bool { throw Derived(); }));
  auto judge = std::make_shared<test::Judge>();
  auto outcome = s.use(judge).execute_outcome([]() -> int { throw Other(); });
  ASSERT_TRUE(outcome.has_exception());
  EXPECT_THROW(std::rethrow_exception(outcome.exception()), Derived);
  ASSERT_EQ(judge->verdicts.size(), 1U);
  EXPECT_FALSE(judge->verdicts[0]);
}

TEST(Clause, AClauseAppliesToReactiveStrategiesAfterItUntilReplaced) {
  auto first = std::make_shared<test::Judge>();
  auto second = std::make_shared<test::Judge>();
  auto third = std::make_shared<test::Judge>();
  const Shield s = Shield{}
                       .use(first)  // default clause
                       .when(Clause{}.exception<Base>())
                       .use(second)
                       .use(std::make_shared<test::PassThrough>())  // proactive: carries it on
                       .use(third);
  (void)s.execute_outcome([]() -> int { throw Other(); });
  EXPECT_EQ(first->verdicts, std::vector<bool>{true});
  EXPECT_EQ(second->verdicts, std::vector<bool>{false});
  EXPECT_EQ(third->verdicts, std::vector<bool>{false});
}

TEST(Clause, FallbackRecoversHandledFailuresOnly) {
  const Shield s =
      Shield{}.when(Clause{}.exception<Base>()).use(std::make_shared<test::FallbackTo>(99));
  EXPECT_EQ(s.execute([]() -> int { throw Derived(); }), 99);
  EXPECT_THROW(s.execute([]() -> int { throw Other(); }), Other);
  EXPECT_EQ(s.execute([] { return 1; }), 1);
}

TEST(Clause, EmptyErrorCodeIsRefused) {
  EXPECT_THROW(Clause{}.error(boost::system::error_code{}), std::invalid_argument);
  EXPECT_THROW(Clause{}.errors_if({}), std::invalid_argument);
  EXPECT_THROW(Clause{}.exceptions_if({}), std::invalid_argument);
}

}  // namespace
}  // namespace kevlar
