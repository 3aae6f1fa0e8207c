#include "dependency.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/address_v4.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <utility>

namespace outage_demo {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

const char* to_string(Client client) noexcept {
  return client == Client::unprotected ? "unprotected" : "protected";
}

Dependency::Dependency(const DemoOptions& options) : options_(options), random_(options.seed) {
  const tcp::endpoint where(asio::ip::address_v4::loopback(), 0);
  acceptor_.open(where.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(where);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  endpoint_ = acceptor_.local_endpoint();
}

Dependency::~Dependency() {
  stop();
}

void Dependency::start(std::chrono::steady_clock::time_point t0) {
  t0_ = t0;
  asio::co_spawn(ioc_, accept(), asio::detached);
  thread_ = std::thread([this] { ioc_.run(); });
}

void Dependency::stop() {
  if (!thread_.joinable()) return;
  // Connections still waiting out a slow answer end with the io_context.
  ioc_.stop();
  thread_.join();
}

std::uint64_t Dependency::reached(Client client, Phase phase) const noexcept {
  return reached_[static_cast<std::size_t>(client)][static_cast<std::size_t>(phase)].load(
      std::memory_order_relaxed);
}

std::uint64_t Dependency::reached(Client client) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t p = 0; p < phase_count; ++p) n += reached(client, static_cast<Phase>(p));
  return n;
}

asio::awaitable<void> Dependency::accept() {
  const auto ex = co_await asio::this_coro::executor;
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of descriptors, for example: let the clients' connects fail, and try again shortly.
      asio::steady_timer pause(ex, std::chrono::milliseconds(10));
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    asio::co_spawn(ex, serve(std::move(socket)), asio::detached);
  }
}

Dependency::Reply Dependency::decide(Phase phase) {
  using std::chrono::milliseconds;
  auto uniform = [this](int lo, int hi) {
    return milliseconds(std::uniform_int_distribution<int>(lo, hi)(random_));
  };
  switch (phase) {
    case Phase::healthy:
      return {uniform(5, 15), 200};
    case Phase::slow:
      return {options_.slow_latency + uniform(0, 50), 200};
    case Phase::failing: {
      const bool unavailable = std::bernoulli_distribution(0.6)(random_);
      return {uniform(1, 3), unavailable ? 503u : 0u};
    }
    case Phase::recovering:
      return {uniform(10, 25), 200};
  }
  return {};
}

asio::awaitable<void> Dependency::serve(tcp::socket socket) {
  const auto ex = co_await asio::this_coro::executor;
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::empty_body> req;
    auto [ec, n] =
        co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
    (void)n;
    if (ec) co_return;  // the client closed its connection, or sent something else than HTTP
    const auto from =
        req["X-Demo-Client"] == "protected" ? Client::protected_ : Client::unprotected;
    const Phase phase = options_.schedule.at(std::chrono::steady_clock::now() - t0_);
    reached_[static_cast<std::size_t>(from)][static_cast<std::size_t>(phase)].fetch_add(
        1, std::memory_order_relaxed);
    const Reply reply = decide(phase);
    asio::steady_timer work(ex, reply.delay);
    co_await work.async_wait(asio::as_tuple(asio::use_awaitable));
    if (reply.status == 0) {  // a dropped connection: no answer at all
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      co_return;
    }
    http::response<http::string_body> res{static_cast<http::status>(reply.status), req.version()};
    res.keep_alive(req.keep_alive());
    res.set(http::field::content_type, "text/plain");
    res.body() = reply.status == 200 ? "in stock: 42\n" : "service unavailable\n";
    res.prepare_payload();
    auto [wec, wn] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    (void)wn;
    if (wec || !res.keep_alive()) co_return;
  }
}

}  // namespace outage_demo
