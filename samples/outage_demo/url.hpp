// The outage demo's URLs: an absolute `http://` URL, split into what a connection and a request
// need (the demo's dependency address and request target).
#pragma once

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/verb.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace outage_demo {

/// An absolute `http://` URL, split into what a connection and a request need.
struct Url {
  /// A host name or an IPv4 address as written, or an IPv6 address without its brackets.
  std::string host;
  /// The port: the URL's, or 80.
  std::uint16_t port = 80;
  /// The request target: the path and query (`/` when the URL has neither); no fragment.
  std::string target = "/";

  /// The Host field for a request: `host`, with `:port` unless it is 80, an IPv6 address in
  /// brackets.
  [[nodiscard]] std::string host_field() const;
};

/// Parses `http://host[:port][/path][?query][#fragment]` (the scheme case-insensitive, the
/// fragment dropped: it is never sent). Throws std::invalid_argument saying what is wrong, with
/// the URL: another scheme (`https` too: the demo runs on a plain beast::tcp_stream), user
/// information, no host, a malformed host or IPv6 literal, a port that is not a number from 1
/// to 65535, and spaces or control characters anywhere (percent-encode them). Resolving the
/// host is the caller's (an asio::ip::tcp::resolver).
[[nodiscard]] Url parse_url(std::string_view text);

/// A request for `url`: `method`, its target, HTTP/1.1 and its Host field.
template <class Body = boost::beast::http::empty_body>
[[nodiscard]] boost::beast::http::request<Body> make_request(boost::beast::http::verb method,
                                                             const Url& url) {
  boost::beast::http::request<Body> req{method, url.target, 11};
  req.set(boost::beast::http::field::host, url.host_field());
  return req;
}

}  // namespace outage_demo
