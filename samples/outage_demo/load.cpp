#include "load.hpp"
#include "url.hpp"

#include <kevlar/http.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
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

#include <memory>
#include <random>
#include <utility>

namespace outage_demo {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace std::chrono_literals;

kevlar::Shield protected_shield(std::uint64_t seed, std::shared_ptr<kevlar::Observer> observer) {
  kevlar::http::StandardShieldOptions o;
  o.total_timeout = caller_deadline;
  o.retry.max_retries = 2;
  // The jitter is drawn from the demo's seed (calls run on one thread, so one generator will do).
  auto random = std::make_shared<std::mt19937_64>(seed ^ 0x9E3779B97F4A7C15ULL);
  o.retry.backoff = kevlar::Backoff::exponential(50ms, 2.0, 400ms).with_random([random] {
    return std::uniform_real_distribution<double>(0.0, 1.0)(*random);
  });
  o.retry.max_delay = 400ms;
  o.breaker->failure_ratio = 0.5;
  o.breaker->minimum_throughput = 10;
  o.breaker->sampling_window = 2s;
  o.breaker->break_duration = 1s;
  kevlar::ConcurrencyLimitOptions limit;
  limit.max_concurrency = 8;
  limit.max_queue = 8;
  o.concurrency_limit = limit;
  o.attempt_timeout = 250ms;
  return kevlar::http::standard_shield<http::string_body>(o)
      .with_name("dependency")
      .observed_by(std::move(observer));
}

Load::Load(asio::io_context& ioc, const DemoOptions& options, asio::ip::tcp::endpoint dependency,
           kevlar::Shield shield)
    : ioc_(ioc), options_(options), dependency_(dependency), shield_(std::move(shield)) {}

void Load::start(std::chrono::steady_clock::time_point t0, std::function<void()> done) {
  t0_ = t0;
  done_ = std::move(done);
  sending_ = static_cast<int>(client_count);
  for (std::size_t c = 0; c < client_count; ++c) {
    asio::co_spawn(ioc_, arrivals(static_cast<Client>(c)), asio::detached);
  }
}

double Load::since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void Load::finished_one() {
  if (sending_ != 0) return;
  for (const int n : in_flight_) {
    if (n != 0) return;
  }
  if (auto done = std::exchange(done_, nullptr)) done();
}

asio::awaitable<void> Load::arrivals(Client client) {
  asio::steady_timer timer(ioc_);
  const auto period = std::chrono::nanoseconds(1s) / options_.rate;
  const auto end = t0_ + options_.schedule.total();
  for (std::int64_t i = 0;; ++i) {
    const auto at = t0_ + i * period;
    if (at >= end) break;
    timer.expires_at(at);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    ++in_flight_[static_cast<std::size_t>(client)];
    asio::co_spawn(ioc_, call(client), asio::detached);
  }
  --sending_;
  finished_one();
}

asio::awaitable<void> Load::call(Client client) {
  CallRecord r;
  r.start = since_start();
  r.result = client == Client::unprotected ? co_await direct() : co_await shielded();
  r.latency = since_start() - r.start;
  const auto c = static_cast<std::size_t>(client);
  records_[c].push_back(r);
  --in_flight_[c];
  finished_one();
}

namespace {

/// The request both clients send: the dependency's URL, with the client's name for its counts.
http::request<http::empty_body> make_request(Client client, const asio::ip::tcp::endpoint& at) {
  const Url url = parse_url("http://" + at.address().to_string() + ":" +
                            std::to_string(at.port()) + "/stock/widget");
  auto req = outage_demo::make_request(http::verb::get, url);
  req.set("X-Demo-Client", to_string(client));
  return req;
}

}  // namespace

// What an application without protection does: connect, send, wait for the answer however long
// it takes.
asio::awaitable<Result> Load::direct() {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  const auto req = make_request(Client::unprotected, dependency_);
  auto [cec] = co_await stream.async_connect(dependency_, asio::as_tuple(asio::use_awaitable));
  if (cec) co_return Result::transport_error;
  auto [wec, wn] = co_await http::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
  (void)wn;
  if (wec) co_return Result::transport_error;
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  auto [rec, rn] =
      co_await http::async_read(stream, buffer, res, asio::as_tuple(asio::use_awaitable));
  (void)rn;
  if (rec) co_return Result::transport_error;
  co_return res.result() == http::status::ok ? Result::ok : Result::http_error;
}

// The same exchange through the shield: each attempt (re)connects and sends the request again.
asio::awaitable<Result> Load::shielded() {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  const auto req = make_request(Client::protected_, dependency_);
  auto [ec, res] = co_await kevlar::http::async_exchange<http::string_body>(
      shield_, stream, dependency_, req, asio::as_tuple(asio::use_awaitable));
  if (!ec) co_return res.result() == http::status::ok ? Result::ok : Result::http_error;
  if (ec == kevlar::errc::timeout) co_return Result::timeout;
  if (ec == kevlar::errc::circuit_open || ec == kevlar::errc::isolated) {
    co_return Result::circuit_open;
  }
  if (ec == kevlar::errc::concurrency_limit_exceeded) co_return Result::limit;
  co_return Result::transport_error;
}

}  // namespace outage_demo
