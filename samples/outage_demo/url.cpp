// The outage demo's URLs: parse_url and the Host field.
#include "url.hpp"

#include <boost/asio/ip/address_v6.hpp>
#include <boost/system/error_code.hpp>

#include <stdexcept>
#include <string>

namespace outage_demo {

namespace {

[[noreturn]] void bad_url(std::string_view text, std::string_view what) {
  std::string m = "parse_url: ";
  m.append(what).append(" in '").append(text).append("'");
  throw std::invalid_argument(m);
}

bool is_alpha(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

}  // namespace

std::string Url::host_field() const {
  std::string h;
  if (host.find(':') != std::string::npos) {
    h.append("[").append(host).append("]");
  } else {
    h = host;
  }
  if (port != 80) h.append(":").append(std::to_string(port));
  return h;
}

Url parse_url(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c <= 0x20 || c == 0x7F) {
      bad_url(text, "a space or a control character at offset " + std::to_string(i) +
                        " (percent-encode it)");
    }
  }
  const std::size_t colon = text.find("://");
  if (colon == std::string_view::npos) bad_url(text, "no scheme (expected http://)");
  std::string scheme(text.substr(0, colon));
  for (char& c : scheme) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (scheme == "https") {
    bad_url(text, "https is not supported (kevlar::http runs on a plain beast::tcp_stream)");
  }
  if (scheme != "http") bad_url(text, "the scheme '" + scheme + "' (expected http)");

  std::string_view rest = text.substr(colon + 3);
  const std::size_t authority_end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, authority_end);
  rest = authority_end == std::string_view::npos ? std::string_view{} : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) {
    bad_url(text, "user information (user@host) is not supported");
  }

  Url url;
  std::string_view port;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) bad_url(text, "an IPv6 address without its ']'");
    const std::string_view v6 = authority.substr(1, close - 1);
    boost::system::error_code invalid;
    (void)boost::asio::ip::make_address_v6(v6, invalid);
    if (v6.empty() || invalid) bad_url(text, "a malformed IPv6 address");
    url.host = std::string(v6);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(text, "characters after the IPv6 address");
      has_port = true;
      port = after.substr(1);
    }
  } else {
    const std::size_t p = authority.rfind(':');
    const std::string_view host = authority.substr(0, p);
    if (p != std::string_view::npos) {
      has_port = true;
      port = authority.substr(p + 1);
    }
    if (host.empty()) bad_url(text, "no host");
    // A registered name or an IPv4 address: letters, digits, '-', '.' and '_'.
    const bool name = std::all_of(host.begin(), host.end(), [](char c) {
      return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_';
    });
    if (!name || host.front() == '.' || host.front() == '-') {
      bad_url(text, "a malformed host '" + std::string(host) + "'");
    }
    url.host = std::string(host);
  }
  if (has_port) {
    unsigned long value = 0;
    const bool digits = !port.empty() && port.size() <= 5 &&
                        std::all_of(port.begin(), port.end(), [](char c) { return is_digit(c); });
    if (digits) value = std::stoul(std::string(port));
    if (!digits || value < 1 || value > 65535) {
      bad_url(text, "the port '" + std::string(port) + "' (expected a number from 1 to 65535)");
    }
    url.port = static_cast<std::uint16_t>(value);
  }

  // The path and query; "/" first when the URL has no path.
  const std::string_view target = rest.substr(0, rest.find('#'));
  std::string t;
  t.reserve(target.size() + 1);
  if (target.empty() || target.front() == '?') t.push_back('/');
  t.append(target.data(), target.size());
  url.target = std::move(t);
  return url;
}

}  // namespace outage_demo
