// kevlar — HTTP: the standard HTTP shield and one request/response exchange run through a shield (target kevlar::http, on Boost.Beast).
#pragma once

#include <kevlar/http/clause.hpp>
#include <kevlar/http/deadline.hpp>
#include <kevlar/http/retry_after.hpp>
#include <kevlar/kevlar.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace kevlar::http {
/// The parts of standard_shield, with Kevlar's defaults (its standard HTTP pipeline): a total
/// timeout of 30 s, then 3 retries (exponential backoff from 250 ms with jitter, at most 30 s
/// apart, a response's Retry-After honoured when longer), then a failure-ratio circuit breaker
/// (0.5 of at least 10 calls in 30 s opens it for 15 s), then an optional rate limit, then an
/// optional concurrency limit, then a timeout of 10 s per attempt. The retry and the breaker judge
/// outcomes with transient_failures.
struct StandardShieldOptions {
  /// Budget of the whole call, retries included; nullopt: no total timeout.
  std::optional<Clock::duration> total_timeout = std::chrono::seconds(30);
  /// The retry; its max_delay (30 s unless set, also when this whole struct is replaced) caps a
  /// Retry-After too. A delay_generator set here (a function or a coroutine) replaces the
  /// Retry-After rule. A Retry-After that reaches past what is left of total_timeout ends the call
  /// at once with that response (the retry starts no wait that no attempt could follow).
  RetryOptions retry = [] {
    RetryOptions r;
    r.max_retries = 3;
    r.max_delay = std::chrono::seconds(30);
    return r;
  }();
  /// Wait as long as a retried response's Retry-After says, when that is longer than the backoff;
  /// and hold the circuit open as long as the Retry-After of the response that opens it says,
  /// when that is longer than the break duration (capped by the retry's max_delay, or by the
  /// break duration if that is longer), so that the breaker's rejections carry it as their
  /// retry_after. A break_duration_generator set in `breaker` replaces the breaker's part.
  bool honour_retry_after = true;
  /// The breaker; nullopt: none.
  std::optional<CircuitBreakerOptions> breaker = [] {
    CircuitBreakerOptions b;
    b.failure_ratio = 0.5;
    b.minimum_throughput = 10;
    b.sampling_window = std::chrono::seconds(30);
    b.break_duration = std::chrono::seconds(15);
    return b;
  }();
  /// A rate limit between the breaker and the concurrency limit; nullopt (default): none. With
  /// honour_retry_after, the Retry-After of a 429 or 503 response holds it (see
  /// RateLimitOptions::hold_from_outcome): it admits no call before then (calls admitted
  /// earlier go on), and its rejections carry the rest as their retry_after. Capped like the
  /// retry's.
  std::optional<RateLimitOptions> rate_limit;
  /// A concurrency limit between the rate limit and the attempt timeout; nullopt (default): none.
  std::optional<ConcurrencyLimitOptions> concurrency_limit;
  /// Budget of each attempt; nullopt: none.
  std::optional<Clock::duration> attempt_timeout = std::chrono::seconds(10);
  /// The wall clock HTTP-dates are compared with; null: std::chrono::system_clock::now.
  std::function<std::chrono::system_clock::time_point()> wall_clock;
};

/// The standard HTTP shield for calls completing with a `response<Body, Fields>` (see
/// StandardShieldOptions). Invalid options throw std::invalid_argument naming the option, as the
/// strategies' own do.
template <class Body, class Fields = boost::beast::http::fields>
[[nodiscard]] Shield standard_shield(StandardShieldOptions options = {}) {
  using Response = boost::beast::http::response<Body, Fields>;
  Shield s;
  if (options.total_timeout) s = s.timeout(*options.total_timeout);
  s = s.when(transient_failures<Body, Fields>());
  RetryOptions retry = options.retry;
  // The cap of a Retry-After, also when the caller replaced the whole RetryOptions.
  if (!retry.max_delay) retry.max_delay = std::chrono::seconds(30);
  std::function<std::chrono::system_clock::time_point()> wall =
      options.wall_clock ? options.wall_clock : [] { return std::chrono::system_clock::now(); };
  // The one Retry-After reader of the three rules: an outcome's response, if it has a valid
  // Retry-After, and that response's status.
  struct Asked {
    Clock::duration after;
    unsigned status;
  };
  const auto asked = [wall = std::move(wall)](OutcomeRef o) -> std::optional<Asked> {
    const Response* r = o.value_if<Response>();
    if (r == nullptr) return std::nullopt;  // an error or an exception
    const std::optional<Clock::duration> after = retry_after(*r, wall());
    if (!after) return std::nullopt;
    return Asked{*after, r->result_int()};
  };
  if (options.honour_retry_after && !retry.delay_generator) {
    retry.delay_generator = [asked](const RetryEvent& e) -> std::optional<Clock::duration> {
      const std::optional<Asked> a = asked(e.outcome);
      if (!a || a->after <= e.delay) return std::nullopt;  // the backoff is longer: keep it
      return a->after;                                     // capped by max_delay by the retry
    };
  }
  s = s.retry(retry);
  if (options.breaker) {
    CircuitBreakerOptions breaker = *options.breaker;
    if (options.honour_retry_after && !breaker.break_duration_generator) {
      const Clock::duration base = breaker.break_duration;
      const Clock::duration cap =
          std::min(std::max(base, *retry.max_delay), CircuitBreakerOptions::max_duration);
      breaker.break_duration_generator = [asked, base, cap](const BreakEvent& e) {
        const std::optional<Asked> a = e.outcome != nullptr ? asked(*e.outcome) : std::nullopt;
        return a && a->after > base ? std::min(a->after, cap) : base;
      };
    }
    s = s.circuit_breaker(breaker);
  }
  if (options.rate_limit) {
    RateLimitOptions rate = *options.rate_limit;
    if (options.honour_retry_after && !rate.hold_from_outcome) {
      const Clock::duration cap = *retry.max_delay;
      rate.hold_from_outcome = [asked, cap](OutcomeRef o) -> std::optional<Clock::duration> {
        const std::optional<Asked> a = asked(o);
        if (!a || (a->status != 429 && a->status != 503)) return std::nullopt;
        return std::min(a->after, cap);
      };
    }
    s = s.rate_limit(rate);
  }
  if (options.concurrency_limit) s = s.concurrency_limit(*options.concurrency_limit);
  if (options.attempt_timeout) s = s.timeout(*options.attempt_timeout);
  return s;
}

namespace detail {

/// One exchange on `stream`: connect if the socket is closed, write the request, read the
/// response (skipping 1xx interim responses; no body after a HEAD). Any failure closes the
/// socket, so that the next attempt starts on a new connection.
template <class ReqBody, class ReqFields, class ResBody>
struct ExchangeOp {
  using Request = boost::beast::http::request<ReqBody, ReqFields>;
  using Response = boost::beast::http::response<ResBody>;
  struct State {
    boost::beast::flat_buffer buffer;
    std::optional<boost::beast::http::response_parser<ResBody>> parser;
    /// The request with this attempt's budget header (send_budget), when one is sent.
    std::optional<Request> budgeted;
  };
  boost::beast::tcp_stream& stream;
  boost::asio::ip::tcp::endpoint endpoint;
  const Request* request;
  std::unique_ptr<State> state = std::make_unique<State>();

  /// Sends this attempt's remaining budget in `header`: a copy of the request carries the time
  /// left until `context`'s deadline (the earlier of the caller's and every timeout's around the
  /// attempt). Nothing is added when the attempt has no deadline.
  void send_budget(const std::string& header, const Context* context) {
    if (context == nullptr || context->deadline() == Clock::time_point::max()) return;
    const Clock::duration left = context->deadline() - context->clock().now();
    state->budgeted.emplace(*request);
    state->budgeted->set(boost::beast::string_view(header.data(), header.size()),
                         format_budget(left));
    request = &*state->budgeted;
  }
  enum class Phase : unsigned char { start, connected, written, read } phase = Phase::start;

  template <class Self>
  void operator()(Self& self, boost::system::error_code ec = {}, std::size_t = 0) {
    namespace http = boost::beast::http;
    // A cancellation that arrived while a completion was already queued is honoured before the
    // next step starts (Beast's operations only see one that arrives while they are pending).
    if (!ec && phase != Phase::start && self.cancelled() != boost::asio::cancellation_type::none) {
      ec = boost::asio::error::operation_aborted;
    }
    switch (phase) {
      case Phase::start:
        // Partial and total cancellation too, checked between the steps.
        self.reset_cancellation_state(boost::asio::enable_total_cancellation());
        if (!stream.socket().is_open()) {
          phase = Phase::connected;
          stream.async_connect(endpoint, std::move(self));
          return;
        }
        phase = Phase::connected;
        [[fallthrough]];
      case Phase::connected:
        if (ec) return fail(self, ec);
        phase = Phase::written;
        http::async_write(stream, *request, std::move(self));
        return;
      case Phase::written:
        if (ec) return fail(self, ec);
        return read(self);
      case Phase::read: {
        if (ec) return fail(self, ec);
        const unsigned status = state->parser->get().result_int();
        if (status / 100 == 1 && status != 101) return read(self);  // interim: the real one follows
        Response response = state->parser->release();
        // Bytes past the response cannot belong to the next exchange: start afresh then.
        if (!response.keep_alive() || state->buffer.size() != 0) close();
        self.complete(ec, std::move(response));
        return;
      }
    }
  }

  template <class Self>
  void read(Self& self) {
    phase = Phase::read;
    state->parser.emplace();
    state->parser->skip(request->method() == boost::beast::http::verb::head);
    boost::beast::http::async_read(stream, state->buffer, *state->parser, std::move(self));
  }
  template <class Self>
  void fail(Self& self, boost::system::error_code ec) {
    close();
    self.complete(ec, Response{});
  }
  void close() noexcept {
    boost::system::error_code ignored;
    stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
  }
};

}  // namespace detail

/// Runs one HTTP request/response exchange on `stream` through `shield`, as many times as the
/// shield's strategies ask: each attempt (re)connects to `endpoint` when the socket is closed,
/// sends `request` again and reads a new response (interim 1xx responses are skipped; after a
/// HEAD no body is read). Completes with
/// `void(boost::system::error_code, boost::beast::http::response<ResBody>)` through any completion
/// token (default: deferred, so `co_await` works). Use a shield whose clause names the same
/// response type (standard_shield<ResBody>): a clause for another body type never matches.
///
/// A failed attempt (transport error, cancellation, a timeout of the shield) closes the socket: a
/// timed-out attempt's pending socket operation is aborted through its cancellation slot, not
/// abandoned. Terminal cancellation (what kevlar's timeouts emit) aborts a pending operation;
/// partial and total cancellation are honoured between the steps. A response that is not
/// keep-alive, or that is followed by unexpected bytes, closes the socket too.
///
/// Executors: the steps run on the completion handler's associated executor, which must be the
/// stream's (or a strand of it). `stream`, `request` and `shield` must outlive the operation; one
/// exchange at a time per stream. A request is sent again on every attempt: retry only requests
/// that are safe to repeat.
template <class ResBody, class ReqBody, class ReqFields, class Token = boost::asio::deferred_t>
auto async_exchange(const BasicShield& shield, boost::beast::tcp_stream& stream,
                    const boost::asio::ip::tcp::endpoint& endpoint,
                    const boost::beast::http::request<ReqBody, ReqFields>& request,
                    Token&& token = {}) {
  using Response = boost::beast::http::response<ResBody>;
  auto attempt = [&stream, endpoint, &request](auto&& t) {
    return boost::asio::async_compose<decltype(t), void(boost::system::error_code, Response)>(
        detail::ExchangeOp<ReqBody, ReqFields, ResBody>{stream, endpoint, &request}, t, stream);
  };
  return shield.execute_async(std::move(attempt), std::forward<Token>(token));
}

/// What async_exchange with options adds to an exchange.
struct ExchangeOptions {
  /// The execution's options: its priority and its end-to-end deadline (CallOptions::deadline;
  /// call_options_from reads one from an incoming request).
  CallOptions call;
  /// The request field each attempt sends its remaining budget in (format_budget of the time
  /// left until the attempt's deadline: the earlier of `call.deadline` and every timeout around
  /// the attempt), for example `x-budget-ms`, replacing a field of that name the request has; an
  /// attempt without a deadline sends the request as it is. Empty (the default): no budget is
  /// sent.
  std::string budget_header;
};

/// async_exchange(shield, stream, endpoint, request, token) for an execution started with
/// `options`: its CallOptions (priority, deadline), and the remaining budget sent in a request
/// field on every attempt (ExchangeOptions::budget_header). When the caller's deadline passes the
/// exchange completes with `errc::timeout` (a retry stopped by it keeps its last real failure); a
/// deadline in the past sends nothing. An attempt that sends a budget copies the request.
template <class ResBody, class ReqBody, class ReqFields, class Token = boost::asio::deferred_t>
auto async_exchange(const BasicShield& shield, const ExchangeOptions& options,
                    boost::beast::tcp_stream& stream,
                    const boost::asio::ip::tcp::endpoint& endpoint,
                    const boost::beast::http::request<ReqBody, ReqFields>& request,
                    Token&& token = {}) {
  using Response = boost::beast::http::response<ResBody>;
  auto attempt = [&stream, endpoint, &request, header = options.budget_header](auto&& t) {
    detail::ExchangeOp<ReqBody, ReqFields, ResBody> op{stream, endpoint, &request};
    if (!header.empty()) op.send_budget(header, kevlar::attempt_context(t));
    return boost::asio::async_compose<decltype(t), void(boost::system::error_code, Response)>(
        std::move(op), t, stream);
  };
  return shield.execute_async(options.call, std::move(attempt), std::forward<Token>(token));
}

}  // namespace kevlar::http
