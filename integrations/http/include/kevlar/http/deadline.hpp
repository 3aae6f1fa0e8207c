// kevlar — HTTP: a deadline carried between services as a remaining budget in a request header
// (target kevlar::http, on Boost.Beast).
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>

#include <boost/beast/http/message.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kevlar::http {

/// The largest budget parse_budget accepts, in milliseconds (about 11.6 days): a larger value is
/// malformed rather than a deadline that never comes.
inline constexpr std::uint64_t max_budget_ms = 1'000'000'000;

/// Parses a budget header's value: the time left for the request as a non-negative whole number
/// of milliseconds (`250`), with optional surrounding whitespace (spaces and tabs). Returns
/// std::nullopt for anything else (a sign, a fraction, a unit, an empty value, more than
/// max_budget_ms), so that the server falls back to its own limits.
///
/// Thread-safety: a pure function.
[[nodiscard]] std::optional<Clock::duration> parse_budget(std::string_view value) noexcept;

/// Formats a remaining budget for a budget header: whole milliseconds, rounded down (a server never
/// gets more time than is left), at most max_budget_ms; zero for a budget that is spent or
/// negative.
///
/// Thread-safety: a pure function.
[[nodiscard]] std::string format_budget(Clock::duration remaining);

/// The deadline an incoming request carries in its `header` field (parse_budget of its value,
/// counted from `now`), or std::nullopt when the field is absent or malformed. Use the clock of the
/// shield that will serve the request.
template <class Body, class Fields>
[[nodiscard]] std::optional<Clock::time_point> deadline_from(
    const boost::beast::http::request<Body, Fields>& request, std::string_view header,
    Clock::time_point now) {
  const auto it = request.find(boost::beast::string_view(header.data(), header.size()));
  if (it == request.end()) return std::nullopt;
  const auto v = it->value();
  const std::optional<Clock::duration> budget = parse_budget(std::string_view(v.data(), v.size()));
  if (!budget) return std::nullopt;
  return now + *budget;
}

/// The options for serving `request` through a shield whose clock is `clock`: the deadline its
/// `header` field carries (deadline_from; none when the field is absent or malformed) and
/// `priority`. Pass them to execute, execute_outcome or execute_async, and to async_exchange's
/// ExchangeOptions to send what is left on to the next service.
template <class Body, class Fields>
[[nodiscard]] CallOptions call_options_from(
    const boost::beast::http::request<Body, Fields>& request, std::string_view header,
    const Clock& clock, std::int32_t priority = 0) {
  CallOptions options;
  options.priority = priority;
  if (const auto deadline = deadline_from(request, header, clock.now())) {
    options.deadline = *deadline;
  }
  return options;
}

}  // namespace kevlar::http
