// HTTP: transient errors, the Retry-After parser (RFC 9110 §10.2.3 and §5.6.7) and the budget
// header.
#include <kevlar/error.hpp>
#include <kevlar/http.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ip/address_v6.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace kevlar::http {

bool is_transient_error(const boost::system::error_code& ec) noexcept {
  namespace ae = boost::asio::error;
  if (!ec) return false;
  if (ec == errc::timeout) return true;
  if (ec == boost::beast::error::timeout) return true;
  if (ec == boost::beast::http::error::end_of_stream ||
      ec == boost::beast::http::error::partial_message) {
    return true;
  }
  return ec == ae::connection_refused || ec == ae::connection_reset ||
         ec == ae::connection_aborted || ec == ae::timed_out || ec == ae::host_unreachable ||
         ec == ae::network_unreachable || ec == ae::network_down || ec == ae::network_reset ||
         ec == ae::broken_pipe || ec == ae::eof || ec == ae::host_not_found_try_again;
}

namespace {

/// A cursor over the field value; every read checks the bounds.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  [[nodiscard]] bool done() const noexcept { return i_ == s_.size(); }
  bool literal(std::string_view lit) {
    if (s_.substr(i_, lit.size()) != lit) return false;
    i_ += lit.size();
    return true;
  }
  /// Exactly `n` digits.
  bool digits(std::size_t n, int& out) {
    if (s_.size() - i_ < n) return false;
    int v = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const char c = s_[i_ + k];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    i_ += n;
    out = v;
    return true;
  }
  /// One of `names` (case-sensitive, as the grammar says); its index.
  template <std::size_t N>
  bool one_of(const std::array<std::string_view, N>& names, int& index) {
    for (std::size_t k = 0; k < N; ++k) {
      if (literal(names[k])) {
        index = static_cast<int>(k);
        return true;
      }
    }
    return false;
  }
  [[nodiscard]] char peek() const noexcept { return done() ? '\0' : s_[i_]; }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

constexpr std::array<std::string_view, 7> short_days{"Mon", "Tue", "Wed", "Thu",
                                                     "Fri", "Sat", "Sun"};
constexpr std::array<std::string_view, 7> long_days{"Monday", "Tuesday",  "Wednesday", "Thursday",
                                                    "Friday", "Saturday", "Sunday"};
constexpr std::array<std::string_view, 12> months{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

struct Civil {
  int year, month, day, hour, minute, second;
};

/// "HH:MM:SS".
bool time_of_day(Reader& r, Civil& c) {
  return r.digits(2, c.hour) && r.literal(":") && r.digits(2, c.minute) && r.literal(":") &&
         r.digits(2, c.second);
}

/// IMF-fixdate after the day name: ", 06 Nov 1994 08:49:37 GMT".
bool imf_fixdate(Reader& r, Civil& c) {
  return r.literal(", ") && r.digits(2, c.day) && r.literal(" ") && r.one_of(months, c.month) &&
         r.literal(" ") && r.digits(4, c.year) && r.literal(" ") && time_of_day(r, c) &&
         r.literal(" GMT") && r.done();
}

/// asctime-date after the day name: " Nov  6 08:49:37 1994".
bool asctime_date(Reader& r, Civil& c) {
  if (!(r.literal(" ") && r.one_of(months, c.month) && r.literal(" "))) return false;
  if (r.peek() == ' ') {
    if (!(r.literal(" ") && r.digits(1, c.day))) return false;
  } else if (!r.digits(2, c.day)) {
    return false;
  }
  return r.literal(" ") && time_of_day(r, c) && r.literal(" ") && r.digits(4, c.year) && r.done();
}

/// rfc850-date after the long day name: ", 06-Nov-94 08:49:37 GMT"; the two-digit year is the
/// latest one that is not more than 50 years after `now_year` (RFC 9110 §5.6.7).
bool rfc850_date(Reader& r, Civil& c, int now_year) {
  int yy = 0;
  if (!(r.literal(", ") && r.digits(2, c.day) && r.literal("-") && r.one_of(months, c.month) &&
        r.literal("-") && r.digits(2, yy) && r.literal(" ") && time_of_day(r, c) &&
        r.literal(" GMT") && r.done())) {
    return false;
  }
  // The year of `now`'s century with those two digits, moved by a century into the window
  // (now_year - 50, now_year + 50].
  c.year = now_year / 100 * 100 + yy;
  if (c.year > now_year + 50) {
    c.year -= 100;
  } else if (c.year + 100 <= now_year + 50) {
    c.year += 100;
  }
  return true;
}

std::optional<std::chrono::sys_seconds> http_date(std::string_view s, int now_year) {
  Civil c{};
  int day_name = 0;
  bool ok = false;
  {
    Reader r(s);  // the long day names first: "Sunday" starts with "Sun"
    if (r.one_of(long_days, day_name) && rfc850_date(r, c, now_year)) ok = true;
  }
  if (!ok) {
    Reader r(s);
    if (r.one_of(short_days, day_name)) {
      Reader imf = r;
      if (imf_fixdate(imf, c)) {
        ok = true;
      } else if (asctime_date(r, c)) {
        ok = true;
      }
    }
  }
  if (!ok) return std::nullopt;
  const std::chrono::year_month_day ymd{std::chrono::year(c.year),
                                        std::chrono::month(static_cast<unsigned>(c.month + 1)),
                                        std::chrono::day(static_cast<unsigned>(c.day))};
  // A leap second (60) is allowed by the grammar; count it as the next second.
  if (!ymd.ok() || c.hour > 23 || c.minute > 59 || c.second > 60) return std::nullopt;
  return std::chrono::sys_days(ymd) + std::chrono::hours(c.hour) + std::chrono::minutes(c.minute) +
         std::chrono::seconds(c.second);
}

}  // namespace

std::optional<Clock::duration> parse_retry_after(std::string_view value,
                                                 std::chrono::system_clock::time_point now) {
  constexpr std::uint64_t max_seconds = 1'000'000'000;
  // Optional whitespace around the value (OWS: spaces and tabs).
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (value.front() >= '0' && value.front() <= '9') {  // delay-seconds = 1*DIGIT
    std::uint64_t seconds = 0;
    for (const char ch : value) {
      if (ch < '0' || ch > '9') return std::nullopt;
      seconds = seconds * 10 + static_cast<std::uint64_t>(ch - '0');
      if (seconds > max_seconds) return std::nullopt;
    }
    return std::chrono::seconds(static_cast<std::int64_t>(seconds));
  }
  const auto today = std::chrono::year_month_day(std::chrono::floor<std::chrono::days>(now));
  const std::optional<std::chrono::sys_seconds> at = http_date(value, int(today.year()));
  if (!at) return std::nullopt;
  // Bounded in seconds first: a date centuries away would overflow nanoseconds.
  const auto whole = *at - std::chrono::floor<std::chrono::seconds>(now);
  if (whole > std::chrono::seconds(max_seconds)) return std::nullopt;
  if (whole < std::chrono::seconds(-1)) return Clock::duration::zero();
  const auto wait = std::chrono::duration_cast<Clock::duration>(
      std::chrono::time_point_cast<std::chrono::system_clock::duration>(*at) - now);
  return wait <= Clock::duration::zero() ? Clock::duration::zero() : wait;
}

std::optional<Clock::duration> parse_budget(std::string_view value) noexcept {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  std::uint64_t ms = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    ms = ms * 10 + static_cast<std::uint64_t>(c - '0');
    if (ms > max_budget_ms) return std::nullopt;  // also keeps the product from overflowing
  }
  return std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(ms));
}

std::string format_budget(Clock::duration remaining) {
  if (remaining <= Clock::duration::zero()) return "0";
  // No more than a receiver accepts (parse_budget): a longer budget would read as malformed.
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(remaining).count();
  return std::to_string(std::min<std::uint64_t>(static_cast<std::uint64_t>(ms), max_budget_ms));
}

}  // namespace kevlar::http
