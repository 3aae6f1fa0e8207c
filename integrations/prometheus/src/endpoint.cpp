// The /metrics endpoint: an acceptor and its connections, as coroutines on one strand.
#include <kevlar/prometheus.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace kevlar::prometheus {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct MetricsEndpoint::State : std::enable_shared_from_this<State> {
  State(const asio::any_io_executor& executor, Source s)
      : strand(asio::make_strand(executor)), acceptor(strand), source(std::move(s)) {}

  asio::strand<asio::any_io_executor> strand;
  tcp::acceptor acceptor;
  Source source;
  std::atomic<std::uint64_t> scrapes{0};
  std::atomic<bool> stop_requested{false};
  tcp::endpoint bound;  ///< set before the first accept, then constant
  // On the strand only:
  bool stopped = false;
  std::unordered_set<beast::tcp_stream*> connections;
};

namespace {

constexpr std::chrono::seconds idle_limit{30};

http::response<http::string_body> respond(MetricsEndpoint::Source& source,
                                          std::atomic<std::uint64_t>& scrapes,
                                          const http::request<http::string_body>& req) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(req.keep_alive());
  res.set(http::field::server, "kevlar");
  const bool get = req.method() == http::verb::get;
  const bool head = req.method() == http::verb::head;
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "not found: this endpoint serves /metrics\n";
  } else if (!get && !head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET, HEAD");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "method not allowed: use GET or HEAD\n";
  } else {
    res.result(http::status::ok);
    res.set(http::field::content_type, content_type);
    try {
      res.body() = source();
      scrapes.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      res.result(http::status::internal_server_error);
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = std::string("metrics source failed: ") + e.what() + "\n";
    } catch (...) {
      res.result(http::status::internal_server_error);
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = "metrics source failed\n";
    }
  }
  res.prepare_payload();
  if (head) res.body().clear();  // Content-Length stays that of the GET answer
  return res;
}

asio::awaitable<void> serve(std::shared_ptr<MetricsEndpoint::State> state, tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  if (state->stopped) co_return;
  state->connections.insert(&stream);
  // Leaves the set however the coroutine ends (an exception included): stop() must never see a
  // destroyed stream.
  struct Registered {
    MetricsEndpoint::State& state;
    beast::tcp_stream& stream;
    ~Registered() { state.connections.erase(&stream); }
  } registered{*state, stream};
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> req;
    stream.expires_after(idle_limit);
    auto [read_ec, read_n] =
        co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
    (void)read_n;
    if (read_ec) break;  // closed by the client, idle too long, stopped, or not HTTP
    http::response<http::string_body> res = respond(state->source, state->scrapes, req);
    const bool keep_alive = res.keep_alive();
    auto [write_ec, write_n] =
        co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    (void)write_n;
    if (write_ec || !keep_alive || state->stopped) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream.socket().close(ignored);
}

asio::awaitable<void> accept(std::shared_ptr<MetricsEndpoint::State> state) {
  while (!state->stopped) {
    auto [ec, socket] = co_await state->acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
    if (state->stopped || ec == asio::error::operation_aborted) break;
    if (ec) continue;  // e.g. too many open files: keep serving the connections that exist
    asio::co_spawn(state->strand, serve(state, std::move(socket)), asio::detached);
  }
}

std::shared_ptr<MetricsEndpoint::State> start(const asio::any_io_executor& executor,
                                              MetricsEndpoint::Source source,
                                              const tcp::endpoint& where) {
  auto state = std::make_shared<MetricsEndpoint::State>(executor, std::move(source));
  state->acceptor.open(where.protocol());
  state->acceptor.set_option(asio::socket_base::reuse_address(true));
  state->acceptor.bind(where);
  state->acceptor.listen(asio::socket_base::max_listen_connections);
  state->bound = state->acceptor.local_endpoint();
  asio::co_spawn(state->strand, accept(state), asio::detached);
  return state;
}

MetricsEndpoint::Source source_of(std::shared_ptr<const MetricsObserver> metrics) {
  if (!metrics) {
    throw std::invalid_argument("kevlar::prometheus::MetricsEndpoint: the metrics observer is null");
  }
  return [m = std::move(metrics)] { return to_text(m->snapshot()); };
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(const asio::any_io_executor& executor,
                                 std::shared_ptr<const MetricsObserver> metrics,
                                 const tcp::endpoint& where)
    : MetricsEndpoint(executor, source_of(std::move(metrics)), where) {}

MetricsEndpoint::MetricsEndpoint(const asio::any_io_executor& executor, Source source,
                                 const tcp::endpoint& where) {
  if (!source) {
    throw std::invalid_argument("kevlar::prometheus::MetricsEndpoint: the source is empty");
  }
  state_ = start(executor, std::move(source), where);
}

MetricsEndpoint::~MetricsEndpoint() { stop(); }

tcp::endpoint MetricsEndpoint::local_endpoint() const { return state_->bound; }

std::uint64_t MetricsEndpoint::scrapes() const noexcept {
  return state_->scrapes.load(std::memory_order_relaxed);
}

void MetricsEndpoint::stop() noexcept {
  if (state_->stop_requested.exchange(true)) return;
  try {
    asio::dispatch(state_->strand, [state = state_] {
      state->stopped = true;
      beast::error_code ignored;
      state->acceptor.close(ignored);
      for (beast::tcp_stream* s : state->connections) s->socket().close(ignored);
    });
  } catch (...) {  // the executor is gone: nothing runs any more that needs stopping
  }
}

}  // namespace kevlar::prometheus
