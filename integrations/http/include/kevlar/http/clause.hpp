// kevlar — HTTP: which responses and transport errors are transient failures, and the handling clause that says so (target kevlar::http, on Boost.Beast).
#pragma once

#include <kevlar/clause.hpp>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/system/error_code.hpp>

namespace kevlar::http {

/// True for the statuses worth trying again: 408 Request Timeout, 429 Too Many Requests and every
/// 5xx. A response with such a status is a handled failure without being an error.
[[nodiscard]] constexpr bool is_transient_status(unsigned status) noexcept {
  return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

/// True for the transport errors worth trying again: a refused, reset, aborted or timed-out
/// connection, an unreachable host or network, a broken pipe, the peer closing the stream early
/// (asio's eof, Beast's end_of_stream and partial_message), Beast's stream timeout, and kevlar's
/// own errc::timeout. The caller's cancellation (operation_aborted) is not one.
[[nodiscard]] bool is_transient_error(const boost::system::error_code& ec) noexcept;

/// A handling clause for calls whose result is a `boost::beast::http::response<Body, Fields>`:
/// a response with a transient status (is_transient_status) and a transient transport error
/// (is_transient_error, also carried by an exception) are failures for the reactive strategies
/// that follow it. Use it with Shield::when.
template <class Body, class Fields = boost::beast::http::fields>
[[nodiscard]] Clause transient_failures() {
  Clause c;
  c.result<boost::beast::http::response<Body, Fields>>(
      [](const boost::beast::http::response<Body, Fields>& r) {
        return is_transient_status(r.result_int());
      });
  c.errors_if([](const boost::system::error_code& ec) { return is_transient_error(ec); });
  return c;
}

}  // namespace kevlar::http
