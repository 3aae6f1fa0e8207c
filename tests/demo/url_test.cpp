// The outage demo's URL parsing (samples/outage_demo/url.hpp): what a well-formed URL splits into,
// and a clear refusal, quoting the URL, for every malformed one.
#include "outage_demo/url.hpp"

#include <gtest/gtest.h>
#include <boost/beast/http/verb.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outage_demo {
namespace {

namespace beast = boost::beast;

TEST(DemoUrl, UrlsSplitIntoHostPortAndTarget) {
  Url u = parse_url("http://example.com");
  EXPECT_EQ(u.host, "example.com");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.target, "/");
  EXPECT_EQ(u.host_field(), "example.com");

  u = parse_url("HTTP://127.0.0.1:8080/stock/widget?count=2#top");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 8080);
  EXPECT_EQ(u.target, "/stock/widget?count=2") << "the fragment is never sent";
  EXPECT_EQ(u.host_field(), "127.0.0.1:8080");

  u = parse_url("http://[::1]:65535?q=1");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 65535);
  EXPECT_EQ(u.target, "/?q=1");
  EXPECT_EQ(u.host_field(), "[::1]:65535");
  EXPECT_EQ(parse_url("http://[fe80::1]/").host_field(), "[fe80::1]");
  EXPECT_EQ(parse_url("http://my_host-1.internal:1/").port, 1);

  const auto req = make_request(beast::http::verb::get, parse_url("http://h:81/a"));
  EXPECT_EQ(req.method(), beast::http::verb::get);
  EXPECT_EQ(req.target(), "/a");
  EXPECT_EQ(req.version(), 11U);
  EXPECT_EQ(req[beast::http::field::host], "h:81");
}

TEST(DemoUrl, BadUrlsAreRefusedWithWhatIsWrong) {
  const auto refusal = [](std::string_view url) -> std::string {
    try {
      (void)parse_url(url);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  const std::vector<std::pair<std::string_view, std::string_view>> cases = {
      {"", "no scheme"},
      {"example.com/x", "no scheme"},
      {"https://example.com/", "https is not supported"},
      {"ftp://example.com/", "the scheme 'ftp'"},
      {"http://", "no host"},
      {"http://:8080/", "no host"},
      {"http://user:pw@example.com/", "user information"},
      {"http://exa mple.com/", "a space or a control character at offset 10"},
      {"http://example.com/a\tb", "a space or a control character at offset 20"},
      {"http://example.com:/", "the port ''"},
      {"http://example.com:0/", "the port '0'"},
      {"http://example.com:65536/", "the port '65536'"},
      {"http://example.com:80a/", "the port '80a'"},
      {"http://example.com:-1/", "the port '-1'"},
      {"http://example.com:123456/", "the port '123456'"},
      {"http://exa%mple.com/", "a malformed host 'exa%mple.com'"},
      {"http://-example.com/", "a malformed host"},
      {"http://[::1/", "without its ']'"},
      {"http://[]/", "a malformed IPv6 address"},
      {"http://[zz::1]/", "a malformed IPv6 address"},
      {"http://[1::2::3]/", "a malformed IPv6 address"},
      {"http://[:]/", "a malformed IPv6 address"},
      {"http://[12345::]/", "a malformed IPv6 address"},
      {"http://[::1]x/", "characters after the IPv6 address"},
      {"http://[::1]:99999/", "the port '99999'"},
  };
  for (const auto& [url, why] : cases) {
    const std::string message = refusal(url);
    EXPECT_NE(message.find(why), std::string::npos) << url << " -> " << message;
    if (message != "accepted") {
      // Appended, not `"'" + std::string(url)`: g++ 12 at -O3 warns falsely (-Wrestrict).
      std::string quoted = "'";
      quoted.append(url).append("'");
      EXPECT_NE(message.find(quoted), std::string::npos)
          << "the message quotes the URL: " << message;
    }
  }
}

}  // namespace
}  // namespace outage_demo
