// kevlar::http::async_exchange and standard_shield against a real Beast server on 127.0.0.1 (port
// 0): retried statuses, Retry-After in both forms on the manual clock, a server that never
// answers, a malformed Retry-After, the breaker opening, the caller's deadline and the budget each
// attempt sends in a header.
#include <kevlar/diagnostics.hpp>
#include <kevlar/http.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Request = bhttp::request<bhttp::string_body>;
using Response = bhttp::response<bhttp::string_body>;
using namespace std::chrono_literals;

/// What the server does with one request.
struct Reply {
  unsigned status = 200;
  std::string retry_after;      ///< sent as Retry-After when not empty
  bool hang = false;            ///< never answer; wait for the client to close
  bool early_hints = false;     ///< send a 103 interim response first
  bool close = false;           ///< answer with Connection: close
  std::string raw;              ///< when not empty: send these bytes instead of a response
  bool raw_then_close = false;  ///< close the connection after `raw` (else wait for the client)
};

/// Send `bytes` instead of a response; then close the connection, or wait for the client to.
Reply raw(std::string bytes, bool then_close = false) {
  Reply r;
  r.raw = std::move(bytes);
  r.raw_then_close = then_close;
  return r;
}

/// Answer with `status` (and a Retry-After when given).
Reply answer(unsigned status, std::string retry_after = {}) {
  Reply r;
  r.status = status;
  r.retry_after = std::move(retry_after);
  return r;
}

/// Answer 200 after a 103 Early Hints.
Reply hinted() {
  Reply r;
  r.early_hints = true;
  return r;
}

/// Answer 200 with Connection: close.
Reply closing() {
  Reply r;
  r.close = true;
  return r;
}

/// Never answer.
Reply hang() {
  Reply r;
  r.hang = true;
  return r;
}

/// A Beast HTTP server on 127.0.0.1, port 0, on a thread of its own. Request n gets script[n] (the
/// last entry repeats).
class TestServer {
 public:
  explicit TestServer(std::vector<Reply> script) : script_(std::move(script)) {
    acceptor_.open(tcp::v4());
    acceptor_.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    acceptor_.listen();
    endpoint_ = acceptor_.local_endpoint();
    asio::co_spawn(ioc_, accept(), asio::detached);
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~TestServer() {
    ioc_.stop();
    thread_.join();
  }
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;

  [[nodiscard]] tcp::endpoint endpoint() const { return endpoint_; }
  [[nodiscard]] int requests() const { return requests_.load(); }
  [[nodiscard]] int connections() const { return connections_.load(); }
  /// Hanging requests whose client closed the connection.
  [[nodiscard]] int closed_while_hanging() const { return closed_while_hanging_.load(); }
  /// The `x-budget-ms` field of every request so far, in arrival order (nullopt: absent).
  [[nodiscard]] std::vector<std::optional<std::string>> budgets() const {
    const std::lock_guard lock(mutex_);
    return budgets_;
  }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      ++connections_;
      asio::co_spawn(ioc_, serve(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> serve(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      Request req;
      auto [ec, n] =
          co_await bhttp::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
      (void)n;
      if (ec) co_return;
      {
        // Recorded before the request is counted: a test that saw requests() grow reads it.
        const auto field = req.find("x-budget-ms");
        std::optional<std::string> budget;
        if (field != req.end()) budget.emplace(field->value().data(), field->value().size());
        const std::lock_guard lock(mutex_);
        budgets_.push_back(std::move(budget));
      }
      const int index = requests_++;
      const Reply reply =
          script_[std::min<std::size_t>(static_cast<std::size_t>(index), script_.size() - 1)];
      if (!reply.raw.empty()) {
        auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(reply.raw),
                                                    asio::as_tuple(asio::use_awaitable));
        (void)wn;
        if (wec || reply.raw_then_close) co_return;  // closing the stream closes the connection
      }
      if (reply.hang || !reply.raw.empty()) {
        char byte;
        auto [rec, rn] = co_await stream.async_read_some(asio::buffer(&byte, 1),
                                                         asio::as_tuple(asio::use_awaitable));
        (void)rn;
        if (rec) ++closed_while_hanging_;
        co_return;
      }
      if (reply.early_hints) {
        bhttp::response<bhttp::empty_body> hints{static_cast<bhttp::status>(103),
                                                 11};  // Early Hints
        auto [hec, hn] =
            co_await bhttp::async_write(stream, hints, asio::as_tuple(asio::use_awaitable));
        (void)hn;
        if (hec) co_return;
      }
      const bool keep_alive = req.keep_alive() && !reply.close;
      if (req.method() == bhttp::verb::head) {  // the GET's headers, no body
        bhttp::response<bhttp::empty_body> res{static_cast<bhttp::status>(reply.status), 11};
        res.keep_alive(keep_alive);
        res.content_length(3);
        auto [wec, wn] =
            co_await bhttp::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
        (void)wn;
        if (wec || !keep_alive) co_return;
        continue;
      }
      Response res{static_cast<bhttp::status>(reply.status), req.version()};
      res.keep_alive(keep_alive);
      if (!reply.retry_after.empty()) res.set(bhttp::field::retry_after, reply.retry_after);
      res.body() = std::to_string(reply.status);
      res.prepare_payload();
      auto [wec, wn] =
          co_await bhttp::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
      (void)wn;
      if (wec || !keep_alive) co_return;
    }
  }

  std::vector<Reply> script_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  tcp::endpoint endpoint_;
  std::atomic<int> requests_{0};
  std::atomic<int> connections_{0};
  std::atomic<int> closed_while_hanging_{0};
  mutable std::mutex mutex_;
  std::vector<std::optional<std::string>> budgets_;  ///< guarded by mutex_
  std::thread thread_;
};

/// Counts attempts as the shield announces them (on the client's thread).
class Attempts final : public Observer {
 public:
  void on_event(const Event&) override { ++count; }
  [[nodiscard]] EventKinds interests() const override {
    return event_kinds<AttemptStarted>();
  }
  std::atomic<int> count{0};
};

struct Exchange : ::testing::Test {
  std::shared_ptr<ManualClock> clock = ManualClock::create();
  std::shared_ptr<Attempts> attempts = std::make_shared<Attempts>();
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  Request request{bhttp::verb::get, "/item", 11};
  std::optional<boost::system::error_code> ec;
  Response response;
  std::vector<Clock::duration> retry_delays;

  Exchange() { request.set(bhttp::field::host, "127.0.0.1"); }

  /// Options for tests: no jitter, a constant backoff, no total timeout, the retry's delays
  /// recorded.
  http::StandardShieldOptions options(Clock::duration backoff = 100ms) {
    http::StandardShieldOptions o;
    o.total_timeout.reset();
    o.retry.backoff = Backoff::constant(backoff);
    o.retry.on_retry = [this](const RetryEvent& e) { retry_delays.push_back(e.delay); };
    return o;
  }
  Shield shield_of(const http::StandardShieldOptions& o) {
    return http::standard_shield<bhttp::string_body>(o).with_clock(clock).observed_by(attempts);
  }
  void start(const Shield& shield, const TestServer& server) {
    http::async_exchange<bhttp::string_body>(
        shield, stream, server.endpoint(), request,
        asio::bind_cancellation_slot(
            cancel.slot(),
            asio::bind_executor(ioc, [this](boost::system::error_code e, Response r) {
              ec = e;
              response = std::move(r);
            })));
  }
  asio::cancellation_signal cancel;
  /// Runs the client's io_context until `done()` (the server answers in real time); fails after
  /// 10 s of waiting for sockets, never on the shield's timers, which run on the manual clock.
  template <class Pred>
  bool run_until(Pred done) {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      ioc.restart();
      ioc.run_one_for(20ms);
    }
    return true;
  }
  /// Runs what is ready now (no socket wait).
  void settle() {
    for (int i = 0; i < 20; ++i) {
      ioc.restart();
      ioc.poll();
    }
  }
};

TEST_F(Exchange, A503ThenA200IsRetried) {
  TestServer server({answer(503), answer(200)});
  start(shield_of(options()), server);
  ASSERT_TRUE(run_until([&] { return attempts->count == 1 && retry_delays.size() == 1; }));
  clock->advance(100ms);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec);
  EXPECT_EQ(response.result_int(), 200U);
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(server.connections(), 1) << "the kept-alive connection served both";
}

TEST_F(Exchange, A429WithRetryAfterWaitsThatLongOnTheClock) {
  TestServer server({answer(429, "2"), answer(200)});
  start(shield_of(options(100ms)), server);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  EXPECT_EQ(retry_delays[0], 2s) << "Retry-After (2 s) is longer than the backoff (100 ms)";
  clock->advance(1999ms);
  settle();
  EXPECT_EQ(attempts->count, 1) << "1.999 s is not yet 2 s";
  clock->advance(1ms);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(attempts->count, 2);
  EXPECT_EQ(response.result_int(), 200U);
}

TEST_F(Exchange, RetryAfterAsAnHttpDate) {
  TestServer server({answer(503, "Sun, 06 Nov 1994 08:49:40 GMT"), answer(200)});
  http::StandardShieldOptions o = options(100ms);
  o.wall_clock = [] {  // three seconds before the server's date
    using namespace std::chrono;
    return system_clock::time_point(sys_days(year(1994) / November / 6) + 8h + 49min + 37s);
  };
  start(shield_of(o), server);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  EXPECT_EQ(retry_delays[0], 3s);
  clock->advance(3s);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(response.result_int(), 200U);
}

TEST_F(Exchange, AShorterOrMalformedRetryAfterKeepsTheBackoff) {
  TestServer server({answer(503, "soon"), answer(503, "0"), answer(200)});
  start(shield_of(options(100ms)), server);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  clock->advance(100ms);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 2; }));
  clock->advance(100ms);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(retry_delays, (std::vector<Clock::duration>{100ms, 100ms}));
  EXPECT_EQ(response.result_int(), 200U);
}

TEST_F(Exchange, ARetryAfterIsCappedByTheMaximumDelay) {
  TestServer server({answer(503, "3600"), answer(200)});
  http::StandardShieldOptions o = options(100ms);
  o.retry.max_delay = 5s;
  start(shield_of(o), server);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  EXPECT_EQ(retry_delays[0], 5s);
  clock->advance(5s);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(response.result_int(), 200U);
}

TEST_F(Exchange, ARetryAfterPastTheTotalTimeoutReturnsTheResponseAtOnce) {
  // The server asks for 5 s; 2 s are left of the total timeout: the retry does not start a wait
  // that cannot be followed by an attempt, and the caller gets the 503 now, not errc::timeout
  // in 2 s.
  TestServer server({answer(503, "5"), answer(200)});
  http::StandardShieldOptions o = options(100ms);
  o.total_timeout = 2s;
  start(shield_of(o), server);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec);
  EXPECT_EQ(response.result_int(), 503U) << "the server's own answer";
  EXPECT_EQ(attempts->count, 1);
  EXPECT_TRUE(retry_delays.empty()) << "no retry was scheduled";
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(Exchange, AServerThatNeverAnswersIsTimedOutAndTheConnectionClosed) {
  TestServer server({hang()});
  http::StandardShieldOptions o = options();
  o.retry.max_retries = 0;
  o.attempt_timeout = 1s;
  start(shield_of(o), server);
  ASSERT_TRUE(run_until([&] { return server.requests() == 1; }));
  settle();
  EXPECT_FALSE(ec.has_value());
  clock->advance(1s);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(*ec, errc::timeout);
  EXPECT_FALSE(stream.socket().is_open()) << "the timed-out attempt's socket is closed";
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (server.closed_while_hanging() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(1ms);  // the server's read ends on its own thread
  }
  EXPECT_EQ(server.closed_while_hanging(), 1) << "the server saw the connection close";
}

TEST_F(Exchange, TheBreakerOpensAfterTheConfiguredFailures) {
  TestServer server({answer(503)});
  http::StandardShieldOptions o = options();
  o.retry.max_retries = 0;
  CircuitBreakerOptions b;
  b.consecutive_failures = 2;
  b.break_duration = 30s;
  o.breaker = b;
  const Shield shield = shield_of(o);
  for (int i = 0; i < 2; ++i) {
    ec.reset();
    start(shield, server);
    ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
    EXPECT_FALSE(*ec);
    EXPECT_EQ(response.result_int(), 503U) << "the last response is handed back as it is";
  }
  ec.reset();
  start(shield, server);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(*ec, errc::circuit_open);
  EXPECT_EQ(server.requests(), 2) << "the open circuit kept the third request from the server";
}

/// Records the retry_after of every rejection (on the client's thread).
class Rejections final : public Observer {
 public:
  void on_event(const Event& e) override {
    after.push_back(e.get_if<Rejected>()->retry_after);
  }
  [[nodiscard]] EventKinds interests() const override { return event_kinds<Rejected>(); }
  std::vector<std::optional<Clock::duration>> after;
};

/// A breaker that opens on the first failure for `break_duration`, without retries.
http::StandardShieldOptions one_failure_breaks(http::StandardShieldOptions o,
                                               Clock::duration break_duration) {
  o.retry.max_retries = 0;
  CircuitBreakerOptions b;
  b.consecutive_failures = 1;
  b.break_duration = break_duration;
  o.breaker = b;
  return o;
}

struct RetryAfterHolds : Exchange {
  std::shared_ptr<Rejections> rejections = std::make_shared<Rejections>();

  /// One exchange; its error code.
  boost::system::error_code call(const Shield& shield, const TestServer& server) {
    ec.reset();
    start(shield, server);
    EXPECT_TRUE(run_until([&] { return ec.has_value(); }));
    return ec.value_or(boost::system::error_code{});
  }
  /// The shield rejects (with `refusal`) at once and at `open_for - 1ms` from now, with what is
  /// left as its retry_after, and lets the next request through at `open_for`.
  void expect_open_for(const Shield& shield, const TestServer& server, Clock::duration open_for,
                       errc refusal = errc::circuit_open) {
    const int before = server.requests();
    EXPECT_EQ(call(shield, server), refusal);
    ASSERT_FALSE(rejections->after.empty());
    EXPECT_EQ(rejections->after.back(), open_for);
    clock->advance(open_for - 1ms);
    EXPECT_EQ(call(shield, server), refusal);
    EXPECT_EQ(rejections->after.back(), 1ms);
    EXPECT_EQ(server.requests(), before);
    clock->advance(1ms);
    EXPECT_FALSE(call(shield, server)) << "the probe is let through";
    EXPECT_EQ(response.result_int(), 200U);
    EXPECT_EQ(server.requests(), before + 1);
  }
};

TEST_F(RetryAfterHolds, ALongerRetryAfterHoldsTheCircuitOpenThatLong) {
  TestServer server({answer(503, "10"), answer(200)});
  const Shield shield = shield_of(one_failure_breaks(options(), 2s)).observed_by(rejections);
  EXPECT_FALSE(call(shield, server));
  EXPECT_EQ(response.result_int(), 503U);
  expect_open_for(shield, server, 10s);
}

TEST_F(RetryAfterHolds, AShorterOrMissingRetryAfterKeepsTheBreakDuration) {
  TestServer server({answer(503, "1"), answer(200), answer(503), answer(200)});
  const Shield shield = shield_of(one_failure_breaks(options(), 2s)).observed_by(rejections);
  EXPECT_FALSE(call(shield, server));
  expect_open_for(shield, server, 2s);
  EXPECT_FALSE(call(shield, server));  // the 503 without Retry-After opens it again
  EXPECT_EQ(response.result_int(), 503U);
  expect_open_for(shield, server, 2s);
}

TEST_F(RetryAfterHolds, IsCappedByTheRetrysMaximumDelay) {
  TestServer server({answer(503, "3600"), answer(200)});
  http::StandardShieldOptions o = one_failure_breaks(options(), 2s);
  o.retry.max_delay = 5s;
  const Shield shield = shield_of(o).observed_by(rejections);
  EXPECT_FALSE(call(shield, server));
  expect_open_for(shield, server, 5s);
}

TEST_F(RetryAfterHolds, IsIgnoredWhenNotHonouredOrWhenTheBreakerHasItsOwnGenerator) {
  TestServer server({answer(503, "10"), answer(200), answer(503, "10"), answer(200)});
  http::StandardShieldOptions o = one_failure_breaks(options(), 2s);
  o.honour_retry_after = false;
  const Shield plain = shield_of(o).observed_by(rejections);
  EXPECT_FALSE(call(plain, server));
  expect_open_for(plain, server, 2s);
  o = one_failure_breaks(options(), 2s);
  o.breaker->break_duration_generator = [](const BreakEvent&) -> Clock::duration { return 3s; };
  const Shield own = shield_of(o).observed_by(rejections);
  EXPECT_FALSE(call(own, server));
  expect_open_for(own, server, 3s);
}

/// No retry, no breaker, a generous rate limit: what a Retry-After does to the rate limit alone.
http::StandardShieldOptions rate_limited(http::StandardShieldOptions o) {
  o.retry.max_retries = 0;
  o.breaker.reset();
  RateLimitOptions rate;
  rate.permits = 100;
  rate.window = 1s;
  o.rate_limit = rate;
  return o;
}

TEST_F(RetryAfterHolds, A429sRetryAfterHoldsTheRateLimit) {
  TestServer server({answer(429, "3"), answer(200)});
  const Shield shield = shield_of(rate_limited(options())).observed_by(rejections);
  EXPECT_FALSE(call(shield, server));
  EXPECT_EQ(response.result_int(), 429U);
  expect_open_for(shield, server, 3s, errc::rate_limited);
}

TEST_F(RetryAfterHolds, OnlyA429OrA503HoldsTheRateLimitAndTheRetrysMaximumDelayCapsIt) {
  TestServer server({answer(500, "30"), answer(503, "3600"), answer(200)});
  http::StandardShieldOptions o = rate_limited(options());
  o.retry.max_delay = 4s;
  const Shield shield = shield_of(o).observed_by(rejections);
  EXPECT_FALSE(call(shield, server));
  EXPECT_EQ(response.result_int(), 500U);
  EXPECT_FALSE(call(shield, server)) << "a 500's Retry-After holds nothing";
  EXPECT_EQ(response.result_int(), 503U);
  expect_open_for(shield, server, 4s, errc::rate_limited);
}

// The breaker's rejection after a 503 with Retry-After: 10 reaches the caller of async_exchange,
// whose completion void(error_code, response) has no room for it, through with_diagnostics.
TEST_F(RetryAfterHolds, AnExchangesRejectionCarriesItsRetryAfterToTheCaller) {
  TestServer server({answer(503, "10"), answer(200)});
  const Shield shield = shield_of(one_failure_breaks(options(), 2s));
  EXPECT_FALSE(call(shield, server));
  EXPECT_EQ(response.result_int(), 503U);
  clock->advance(4s);
  Diagnostics d;
  std::optional<boost::system::error_code> got;
  http::async_exchange<bhttp::string_body>(
      shield, stream, server.endpoint(), request,
      with_diagnostics(d, asio::bind_executor(
                              ioc, [&](boost::system::error_code e, Response) { got = e; })));
  ASSERT_TRUE(run_until([&] { return got.has_value(); }));
  EXPECT_EQ(*got, errc::circuit_open);
  EXPECT_EQ(d.rejection, RejectionKind::circuit_open);
  EXPECT_EQ(d.retry_after, Clock::duration(6s)) << "the rest of the server's 10 s";
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(Exchange, AMalformedResponseFailsTheCallAtOnceAndClosesTheConnection) {
  TestServer server({raw("HTTP/1.1 two hundred OK\r\n\r\n")});
  start(shield_of(options()), server);  // three retries, which a parse error does not use
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  ASSERT_TRUE(*ec);
  EXPECT_EQ(ec->category(), bhttp::make_error_code(bhttp::error::bad_status).category())
      << ec->message();
  EXPECT_EQ(attempts->count, 1) << "a malformed answer is no transient failure: not retried";
  EXPECT_TRUE(retry_delays.empty());
  EXPECT_FALSE(stream.socket().is_open());
  ASSERT_TRUE(run_until([&] { return server.closed_while_hanging() == 1; }))
      << "the server saw its connection closed";
}

TEST_F(Exchange, ATruncatedResponseIsATransientFailureAndRetried) {
  TestServer server({raw("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true), answer(200)});
  start(shield_of(options()), server);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  clock->advance(100ms);  // the backoff
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(response.result_int(), 200U);
  EXPECT_EQ(server.connections(), 2) << "the truncated exchange's connection was not reused";
}

TEST_F(Exchange, InterimResponsesAreSkipped) {
  TestServer server({hinted()});
  start(shield_of(options()), server);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec);
  EXPECT_EQ(response.result_int(), 200U) << "the 103 is not the answer";
  EXPECT_EQ(response.body(), "200");
}

TEST_F(Exchange, AHeadRequestReadsNoBody) {
  TestServer server({answer(200)});
  request.method(bhttp::verb::head);
  start(shield_of(options()), server);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(response.result_int(), 200U);
  EXPECT_TRUE(stream.socket().is_open()) << "the kept-alive connection stays usable";
}

TEST_F(Exchange, ConnectionCloseClosesTheSocketAndTheNextExchangeReconnects) {
  TestServer server({closing(), answer(200)});
  const Shield shield = shield_of(options());
  start(shield, server);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec);
  EXPECT_FALSE(stream.socket().is_open());
  ec.reset();
  start(shield, server);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec);
  EXPECT_EQ(server.connections(), 2);
}

TEST_F(Exchange, TheCallersCancellationAbortsThePendingRead) {
  TestServer server({hang()});
  http::StandardShieldOptions o = options();
  o.retry.max_retries = 0;
  start(shield_of(o), server);
  ASSERT_TRUE(run_until([&] { return server.requests() == 1; }));
  settle();
  cancel.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(*ec, asio::error::operation_aborted);
  EXPECT_FALSE(stream.socket().is_open());
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (server.closed_while_hanging() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(1ms);  // the server's read ends on its own thread
  }
  EXPECT_EQ(server.closed_while_hanging(), 1);
}

TEST(StandardShield, HasKevlarsDefaultShape) {
  // Without the Retry-After rule, whose break-duration generator describes itself as dynamic.
  http::StandardShieldOptions defaults;
  defaults.honour_retry_after = false;
  const Shield s = http::standard_shield<bhttp::string_body>(defaults);
  ASSERT_EQ(s.size(), 4U);  // no concurrency limit by default
  RetryOptions retry;
  retry.max_retries = 3;
  retry.max_delay = 30s;
  CircuitBreakerOptions breaker;
  breaker.failure_ratio = 0.5;
  breaker.minimum_throughput = 10;
  breaker.sampling_window = 30s;
  breaker.break_duration = 15s;
  EXPECT_EQ(s.describe(),
            Shield{}.timeout(30s).retry(retry).circuit_breaker(breaker).timeout(10s).describe())
      << "outermost first: total timeout, retry, breaker, attempt timeout";
  http::StandardShieldOptions o;
  o.concurrency_limit = ConcurrencyLimitOptions{};
  EXPECT_EQ(http::standard_shield<bhttp::string_body>(o).size(), 5U);
  o.attempt_timeout = 0s;
  EXPECT_THROW((void)http::standard_shield<bhttp::string_body>(o), std::invalid_argument);
  // Replacing the whole retry keeps the 30 s cap on a Retry-After.
  http::StandardShieldOptions replaced = defaults;
  replaced.retry = RetryOptions{};
  EXPECT_EQ(http::standard_shield<bhttp::string_body>(replaced).describe(), s.describe());
  EXPECT_NE(http::standard_shield<bhttp::string_body>().describe().find("break dynamic"),
            std::string::npos)
      << "by default the breaker holds the circuit open for a longer Retry-After";
}

/// Exchanges started with ExchangeOptions: the caller's deadline on the manual clock, and the
/// budget each attempt sends in `x-budget-ms` (which the server records).
struct ExchangeDeadline : Exchange {
  using Budgets = std::vector<std::optional<std::string>>;
  using Exchange::start;

  void start(const Shield& shield, const TestServer& server, const http::ExchangeOptions& o) {
    http::async_exchange<bhttp::string_body>(
        shield, o, stream, server.endpoint(), request,
        asio::bind_cancellation_slot(
            cancel.slot(),
            asio::bind_executor(ioc, [this](boost::system::error_code e, Response r) {
              ec = e;
              response = std::move(r);
            })));
  }
  /// The caller's deadline `budget` from now on the shield's clock, sent as `header`.
  http::ExchangeOptions within(Clock::duration budget, std::string header = "x-budget-ms") {
    return http::ExchangeOptions{CallOptions::within(budget, *clock), std::move(header)};
  }
  /// No attempt timeout and no total timeout: the caller's deadline is the only one.
  http::StandardShieldOptions untimed(Clock::duration backoff = 100ms) {
    http::StandardShieldOptions o = options(backoff);
    o.attempt_timeout.reset();
    return o;
  }
};

TEST_F(ExchangeDeadline, AnAttemptSendsWhatIsLeftOfTheCallersDeadline) {
  TestServer server({answer(200)});
  start(shield_of(untimed()), server, within(5s));
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(response.result_int(), 200U);
  EXPECT_EQ(server.budgets(), Budgets{"5000"}) << "the manual clock stood still: 5 s are left";
}

TEST_F(ExchangeDeadline, EachAttemptSendsTheEarlierOfTheCallersDeadlineAndItsTimeout) {
  // The caller gives 2.5 s; each attempt has 2 s of its own; the retry waits 1 s.
  TestServer server({answer(503), answer(200)});
  http::StandardShieldOptions o = untimed(1s);
  o.attempt_timeout = 2s;
  start(shield_of(o), server, within(2500ms));
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  EXPECT_EQ(server.budgets(), Budgets{"2000"}) << "the attempt's timeout comes first";
  clock->advance(1s);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(response.result_int(), 200U);
  EXPECT_EQ(server.budgets(), (Budgets{"2000", "1500"}))
      << "1.5 s are left of the caller's 2.5 s, less than the attempt's 2 s";
}

TEST_F(ExchangeDeadline, EveryRetrySendsItsOwnAttemptsBudget) {
  TestServer server({answer(503), answer(503), answer(200)});
  http::StandardShieldOptions o = untimed();
  o.attempt_timeout = 2s;
  start(shield_of(o), server, within(5s));
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  clock->advance(100ms);
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 2; }));
  clock->advance(100ms);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(response.result_int(), 200U);
  EXPECT_EQ(server.budgets(), (Budgets{"2000", "2000", "2000"}));
}

TEST_F(ExchangeDeadline, ATimeoutAloneSendsItsBudget) {
  TestServer server({answer(200)});
  http::StandardShieldOptions o = untimed();
  o.attempt_timeout = 2s;
  start(shield_of(o), server, http::ExchangeOptions{{}, "x-budget-ms"});
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(server.budgets(), Budgets{"2000"}) << "the attempt's deadline, without the caller's";
}

TEST_F(ExchangeDeadline, NoHeaderIsSentWhenItHasNoName) {
  TestServer server({answer(200)});
  const Shield shield = shield_of(options());  // with its attempt timeout
  start(shield, server, within(5s, ""));
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  ec.reset();
  start(shield, server);  // the overload without options sends none either
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(server.budgets(), (Budgets{std::nullopt, std::nullopt}));
}

TEST_F(ExchangeDeadline, NoHeaderIsSentWithoutADeadline) {
  TestServer server({answer(200)});
  start(shield_of(untimed()), server, http::ExchangeOptions{{}, "x-budget-ms"});
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << ec->message();
  EXPECT_EQ(server.budgets(), Budgets{std::nullopt});
}

TEST_F(ExchangeDeadline, ADeadlineAlreadyPastSendsNothing) {
  TestServer server({answer(200)});
  const Shield shield = shield_of(options());
  for (const Clock::duration budget : {Clock::duration(-1ms), Clock::duration::zero()}) {
    ec.reset();
    start(shield, server, within(budget));
    EXPECT_FALSE(ec.has_value()) << "completed through the handler's executor, not inline";
    ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
    EXPECT_EQ(*ec, errc::timeout) << budget.count();
  }
  // A shield without strategies, on the steady clock, refuses it the same way.
  ec.reset();
  const Shield empty;
  start(empty, server,
        http::ExchangeOptions{CallOptions::within(-1s, empty.clock()), "x-budget-ms"});
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(*ec, errc::timeout);
  EXPECT_EQ(attempts->count, 0) << "no attempt started";
  EXPECT_FALSE(stream.socket().is_open()) << "nothing was connected";
  EXPECT_EQ(server.requests(), 0);
  EXPECT_TRUE(server.budgets().empty());
}

TEST_F(ExchangeDeadline, ARetryStoppedByTheDeadlineReturnsTheLastResponse) {
  // The caller gives 150 ms; the backoff is 100 ms: after the second 503 (at 100 ms), the next
  // wait would end at 200 ms, past the deadline, so the retry stops with that 503.
  TestServer server({answer(503)});
  start(shield_of(untimed()), server, within(150ms));
  ASSERT_TRUE(run_until([&] { return retry_delays.size() == 1; }));
  clock->advance(100ms);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_FALSE(*ec) << "the server's own answer, not errc::timeout";
  EXPECT_EQ(response.result_int(), 503U);
  EXPECT_EQ(attempts->count, 2);
  EXPECT_EQ(retry_delays.size(), 1U) << "no wait that no attempt could follow";
  EXPECT_EQ(server.budgets(), (Budgets{"150", "50"}));
}

TEST_F(ExchangeDeadline, AServerThatNeverAnswersIsTimedOutAtTheCallersDeadline) {
  TestServer server({hang()});
  start(shield_of(options()), server, within(1s));  // 3 retries, a 10 s attempt timeout
  ASSERT_TRUE(run_until([&] { return server.requests() == 1; }));
  settle();
  EXPECT_FALSE(ec.has_value());
  EXPECT_EQ(server.budgets(), Budgets{"1000"});
  clock->advance(999ms);
  settle();
  EXPECT_FALSE(ec.has_value()) << "999 ms is not yet the deadline";
  clock->advance(1ms);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(*ec, errc::timeout);
  EXPECT_EQ(attempts->count, 1) << "the retry does not try again past the deadline";
  EXPECT_TRUE(retry_delays.empty());
  EXPECT_FALSE(stream.socket().is_open()) << "the cancelled attempt's socket is closed";
  ASSERT_TRUE(run_until([&] { return server.closed_while_hanging() == 1; }))
      << "the server saw the connection close";
  EXPECT_EQ(server.requests(), 1);
}

TEST_F(ExchangeDeadline, AShieldWithoutStrategiesKeepsTheCallersDeadline) {
  TestServer server({hang()});
  start(Shield{}.with_clock(clock), server, within(1s));
  ASSERT_TRUE(run_until([&] { return server.requests() == 1; }));
  settle();
  EXPECT_FALSE(ec.has_value());
  EXPECT_EQ(server.budgets(), Budgets{"1000"});
  clock->advance(1s);
  ASSERT_TRUE(run_until([&] { return ec.has_value(); }));
  EXPECT_EQ(*ec, errc::timeout);
  EXPECT_FALSE(stream.socket().is_open());
  ASSERT_TRUE(run_until([&] { return server.closed_while_hanging() == 1; }));
}

}  // namespace
}  // namespace kevlar
