// kevlar — HTTP: the Retry-After field (RFC 9110 §10.2.3), parsed (target kevlar::http, on Boost.Beast).
#pragma once

#include <kevlar/clock.hpp>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>

#include <chrono>
#include <optional>
#include <string_view>

namespace kevlar::http {
/// Parses a Retry-After field value (RFC 9110 §10.2.3): delay-seconds (`120`) or an HTTP-date in
/// any of the three forms a recipient must accept (§5.6.7: `Sun, 06 Nov 1994 08:49:37 GMT`, the
/// obsolete `Sunday, 06-Nov-94 08:49:37 GMT` and asctime's `Sun Nov  6 08:49:37 1994`), with
/// optional surrounding whitespace. Returns the wait from `now`: zero for a date in the past,
/// std::nullopt for anything malformed (and for more than 10^9 seconds), so that the caller falls
/// back to its own backoff.
[[nodiscard]] std::optional<Clock::duration> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now);

/// The Retry-After of `response` (parse_retry_after of its field), if it has a valid one.
template <class Body, class Fields>
[[nodiscard]] std::optional<Clock::duration> retry_after(
    const boost::beast::http::response<Body, Fields>& response,
    std::chrono::system_clock::time_point now) {
  const auto it = response.find(boost::beast::http::field::retry_after);
  if (it == response.end()) return std::nullopt;
  const auto v = it->value();
  return parse_retry_after(std::string_view(v.data(), v.size()), now);
}

}  // namespace kevlar::http
