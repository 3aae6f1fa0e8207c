// kevlar::http: transient statuses and errors, the response clause in a shield, Retry-After in
// every form RFC 9110 asks a recipient to accept, and the budget header that carries a deadline.
#include <kevlar/http.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/string_body.hpp>
#include <test_options.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace beast = boost::beast;
using Response = beast::http::response<beast::http::string_body>;
using Request = beast::http::request<beast::http::string_body>;
using namespace std::chrono_literals;

/// 1994-11-06 08:49:37 UTC, the RFC's example date.
std::chrono::system_clock::time_point rfc_example() {
  using namespace std::chrono;
  return sys_days(year(1994) / November / 6) + 8h + 49min + 37s;
}

Response response(unsigned status) {
  Response r;
  r.result(status);
  r.body() = std::to_string(status);
  return r;
}

TEST(Http, TransientStatusesAreFiveHundredsAnd408And429) {
  for (const unsigned s : {408U, 429U, 500U, 502U, 503U, 504U, 599U}) {
    EXPECT_TRUE(http::is_transient_status(s)) << s;
  }
  for (const unsigned s : {100U, 200U, 204U, 301U, 400U, 401U, 403U, 404U, 409U, 499U, 600U}) {
    EXPECT_FALSE(http::is_transient_status(s)) << s;
  }
}

TEST(Http, TransientTransportErrors) {
  namespace ae = boost::asio::error;
  for (const boost::system::error_code ec :
       {make_error_code(ae::connection_refused), make_error_code(ae::connection_reset),
        make_error_code(ae::timed_out), make_error_code(ae::eof),
        make_error_code(ae::host_unreachable), make_error_code(ae::broken_pipe),
        make_error_code(beast::error::timeout), make_error_code(beast::http::error::end_of_stream),
        make_error_code(beast::http::error::partial_message), make_error_code(errc::timeout)}) {
    EXPECT_TRUE(http::is_transient_error(ec)) << ec.message();
  }
  for (const boost::system::error_code ec :
       {boost::system::error_code(), make_error_code(ae::operation_aborted),
        make_error_code(beast::http::error::bad_target), make_error_code(errc::circuit_open),
        make_error_code(ae::access_denied)}) {
    EXPECT_FALSE(http::is_transient_error(ec)) << ec.message();
  }
}

TEST(Http, TheClauseRetriesA503ThenReturnsThe200) {
  const Shield shield = Shield{}
                            .when(http::transient_failures<beast::http::string_body>())
                            .retry(test::constant_retries(3, 0ms));
  std::vector<unsigned> script{503, 429, 200, 500};
  std::size_t calls = 0;
  const Response r = shield.execute([&] { return response(script[calls++]); });
  EXPECT_EQ(r.result_int(), 200U);
  EXPECT_EQ(calls, 3U) << "503 and 429 were retried; 200 ended the call";
}

TEST(Http, TheClauseLeavesClientErrorsAloneAndRetriesTransportErrors) {
  const Shield shield = Shield{}
                            .when(http::transient_failures<beast::http::string_body>())
                            .retry(test::constant_retries(3, 0ms));
  std::size_t calls = 0;
  EXPECT_EQ(shield
                .execute([&] {
                  ++calls;
                  return response(404);
                })
                .result_int(),
            404U);
  EXPECT_EQ(calls, 1U) << "a 404 is an answer, not a failure";
  calls = 0;
  const Response r = shield.execute([&]() -> Response {
    if (++calls < 3) {
      throw boost::system::system_error(make_error_code(boost::asio::error::connection_reset));
    }
    return response(200);
  });
  EXPECT_EQ(r.result_int(), 200U);
  EXPECT_EQ(calls, 3U);
  calls = 0;
  EXPECT_THROW(shield.execute([&]() -> Response {
    ++calls;
    throw std::runtime_error("not a transport error");
  }),
               std::runtime_error);
  EXPECT_EQ(calls, 1U) << "other exceptions are not this clause's failures";
}

TEST(Http, RetryAfterInSeconds) {
  const auto now = rfc_example();
  EXPECT_EQ(http::parse_retry_after("120", now), Clock::duration(120s));
  EXPECT_EQ(http::parse_retry_after("0", now), Clock::duration(0s));
  EXPECT_EQ(http::parse_retry_after(" \t2 ", now), Clock::duration(2s)) << "optional whitespace";
  EXPECT_EQ(http::parse_retry_after("1000000000", now), Clock::duration(1'000'000'000s));
  EXPECT_EQ(http::parse_retry_after("1000000001", now), std::nullopt) << "more than 10^9 s";
  EXPECT_EQ(http::parse_retry_after("99999999999999999999999", now), std::nullopt);
  for (const char* bad : {"", "  ", "-1", "+5", "1.5", "12a", "0x10", "1 2", "soon"}) {
    EXPECT_EQ(http::parse_retry_after(bad, now), std::nullopt) << '"' << bad << '"';
  }
}

TEST(Http, RetryAfterAsAnHttpDateInTheThreeForms) {
  const auto now = rfc_example() - 90s;
  for (const char* date : {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                           "Sun Nov  6 08:49:37 1994"}) {
    EXPECT_EQ(http::parse_retry_after(date, now), Clock::duration(90s)) << date;
  }
  // Sub-second precision of `now` is kept: the wait ends exactly at the date.
  EXPECT_EQ(http::parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", rfc_example() - 1500ms),
            Clock::duration(1500ms));
  // A date in the past: retry now.
  EXPECT_EQ(http::parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", rfc_example() + 1h),
            Clock::duration::zero());
  // Two-digit years are read relative to `now` (at most 50 years ahead).
  using namespace std::chrono;
  const auto in_2030 = sys_days(year(2030) / January / 1) + 0s;
  EXPECT_EQ(http::parse_retry_after("Tuesday, 01-Jan-30 00:00:10 GMT", in_2030),
            Clock::duration(10s));
  EXPECT_EQ(http::parse_retry_after("Friday, 01-Jan-99 00:00:10 GMT", in_2030),
            Clock::duration::zero())
      << "99 is 1999 in 2030, in the past";
  // In 2070, "10" is 2110 (40 years ahead), not 2010: far too far, so refused like 10^9 s.
  const auto in_2070 = sys_days(year(2070) / January / 1) + 0s;
  EXPECT_EQ(http::parse_retry_after("Thursday, 01-Jan-70 00:00:05 GMT", in_2070),
            Clock::duration(5s));
  EXPECT_EQ(http::parse_retry_after("Wednesday, 01-Jan-10 00:00:05 GMT", in_2070), std::nullopt)
      << "2110 is more than 10^9 s after 2070";
  EXPECT_EQ(http::parse_retry_after("Friday, 01-Jan-21 00:00:05 GMT", in_2070),
            Clock::duration::zero())
      << "21 is 2021 in 2070 (2121 would be more than 50 years ahead)";
}

TEST(Http, MalformedDatesAreIgnored) {
  const auto now = rfc_example();
  for (const char* bad : {
           "Sun, 06 Nov 1994 08:49:37 UTC",    // GMT only
           "Sun, 6 Nov 1994 08:49:37 GMT",     // two-digit day
           "Sun, 06 nov 1994 08:49:37 GMT",    // month names are case-sensitive
           "Sun, 31 Feb 1994 08:49:37 GMT",    // no such day
           "Sun, 06 Nov 1994 24:00:00 GMT",    // hour out of range
           "Sun, 06 Nov 1994 08:60:00 GMT",    // minute out of range
           "Sun, 06 Nov 1994 08:49:37 GMT x",  // trailing text
           "Sun, 06 Nov 1994 08:49 GMT",       // no seconds
           "Sun Nov 6 08:49:37 1994",          // asctime pads the day with a space
           "Sunday, 06-Nov-1994 08:49:37 GMT",
           "Funday, 06 Nov 1994 08:49:37 GMT",
           "Sun, 06 Nov 1994 08:49:37",
       }) {
    EXPECT_EQ(http::parse_retry_after(bad, now), std::nullopt) << bad;
  }
  // A date too far ahead is refused like too many seconds (and cannot overflow).
  EXPECT_EQ(http::parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now), std::nullopt);
}

TEST(Http, RetryAfterOfAResponse) {
  Response r = response(429);
  EXPECT_EQ(http::retry_after(r, rfc_example()), std::nullopt) << "no field";
  r.set(beast::http::field::retry_after, "2");
  EXPECT_EQ(http::retry_after(r, rfc_example()), Clock::duration(2s));
  r.set(beast::http::field::retry_after, "later");
  EXPECT_EQ(http::retry_after(r, rfc_example()), std::nullopt);
}

TEST(HttpBudget, ParsesWholeMillisecondsWithOptionalWhitespace) {
  EXPECT_EQ(http::parse_budget("0"), Clock::duration::zero());
  EXPECT_EQ(http::parse_budget("250"), Clock::duration(250ms));
  EXPECT_EQ(http::parse_budget(" 250\t"), Clock::duration(250ms)) << "spaces and tabs around it";
  EXPECT_EQ(http::parse_budget("\t \t7  "), Clock::duration(7ms));
  EXPECT_EQ(http::parse_budget("0000000000000000000000005"), Clock::duration(5ms))
      << "leading zeros are digits of a small number, not a large one";
  EXPECT_EQ(http::max_budget_ms, 1'000'000'000U);
  EXPECT_EQ(http::parse_budget("1000000000"),
            Clock::duration(std::chrono::milliseconds(1'000'000'000)))
      << "max_budget_ms itself";
}

TEST(HttpBudget, RefusesAnythingButANonNegativeWholeNumberUpToTheMaximum) {
  for (const char* bad :
       {"", " ", "\t\t", "-1", "+5", "1.5", "250ms", "0x10", "1e3", "1 2", "soon", "\n250",
        "1000000001", "99999999999999999999999", "18446744073709551616"}) {
    EXPECT_EQ(http::parse_budget(bad), std::nullopt) << '"' << bad << '"';
  }
}

TEST(HttpBudget, FormatsWholeMillisecondsRoundedDown) {
  EXPECT_EQ(http::format_budget(2s), "2000");
  EXPECT_EQ(http::format_budget(std::chrono::nanoseconds(1'999'999)), "1")
      << "never more time than is left";
  EXPECT_EQ(http::format_budget(1ms), "1");
  EXPECT_EQ(http::format_budget(std::chrono::microseconds(999)), "0");
  EXPECT_EQ(http::format_budget(Clock::duration::zero()), "0");
  EXPECT_EQ(http::format_budget(-5ms), "0") << "a spent budget";
  EXPECT_EQ(http::format_budget(Clock::duration::min()), "0");
  // What a client sends, a server reads back (to the millisecond).
  for (const Clock::duration d :
       {Clock::duration(0ms), Clock::duration(1ms), Clock::duration(2500ms),
        Clock::duration(std::chrono::milliseconds(1'000'000'000))}) {
    EXPECT_EQ(http::parse_budget(http::format_budget(d)), d) << d.count();
  }
}

TEST(HttpBudget, TheDeadlineARequestCarries) {
  Request req{beast::http::verb::get, "/items/42", 11};
  const Clock::time_point now{1h};
  EXPECT_EQ(http::deadline_from(req, "x-budget-ms", now), std::nullopt) << "no field";
  req.set("x-budget-ms", "250");
  EXPECT_EQ(http::deadline_from(req, "x-budget-ms", now), now + 250ms);
  EXPECT_EQ(http::deadline_from(req, "X-Budget-Ms", now), now + 250ms)
      << "field names are case-insensitive";
  EXPECT_EQ(http::deadline_from(req, "x-deadline", now), std::nullopt) << "another field";
  req.set("x-budget-ms", " 0 ");
  EXPECT_EQ(http::deadline_from(req, "x-budget-ms", now), now) << "a spent budget: due now";
  req.set("x-budget-ms", "250ms");
  EXPECT_EQ(http::deadline_from(req, "x-budget-ms", now), std::nullopt) << "malformed";
  req.set("x-budget-ms", "1000000001");
  EXPECT_EQ(http::deadline_from(req, "x-budget-ms", now), std::nullopt) << "too far";
}

TEST(HttpBudget, CallOptionsFromARequestOnTheShieldsClock) {
  const auto clock = ManualClock::create();
  Request req{beast::http::verb::get, "/items/42", 11};
  CallOptions o = http::call_options_from(req, "x-budget-ms", *clock, 7);
  EXPECT_EQ(o.priority, 7);
  EXPECT_EQ(o.deadline, Clock::time_point::max()) << "no field: no deadline";
  req.set("x-budget-ms", "1500");
  o = http::call_options_from(req, "x-budget-ms", *clock);
  EXPECT_EQ(o.priority, 0) << "the default priority";
  EXPECT_EQ(o.deadline, clock->now() + 1500ms);
  clock->advance(1s);
  EXPECT_EQ(http::call_options_from(req, "x-budget-ms", *clock, -1).deadline, clock->now() + 1500ms)
      << "counted from the clock's reading when it is called";
  req.set("x-budget-ms", "-1500");
  EXPECT_EQ(http::call_options_from(req, "x-budget-ms", *clock).deadline, Clock::time_point::max())
      << "malformed: no deadline";
}

TEST(HttpBudget, CallOptionsWithinABudget) {
  const auto clock = ManualClock::create();
  CallOptions o = CallOptions::within(2s, *clock);
  EXPECT_EQ(o.deadline, clock->now() + 2s);
  EXPECT_EQ(o.priority, 0);
  EXPECT_EQ(CallOptions::within(-1ms, *clock).deadline, clock->now() - 1ms) << "in the past";
  EXPECT_EQ(CallOptions::within(Clock::duration::max(), *clock).deadline, Clock::time_point::max())
      << "past the clock's range: none";
  EXPECT_EQ(CallOptions{}.deadline, Clock::time_point::max());
}

}  // namespace
}  // namespace kevlar
