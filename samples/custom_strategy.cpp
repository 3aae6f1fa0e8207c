// A user-defined strategy through kevlar's public Strategy interface: it logs every attempt and
// retries handled failures a fixed number of times, on both the synchronous and the asynchronous
// path. Built-in strategies use exactly the same interface.
#include <kevlar/kevlar.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <iostream>
#include <memory>
#include <stdexcept>

namespace {

/// Re-runs the inner pipeline while the handling clause says the outcome is a failure, up to
/// `retries` more times, waiting `pause` on the shield's clock in between.
class LoggingRetry final : public kevlar::BasicStrategy<LoggingRetry, int> {
 public:
  LoggingRetry(int retries, kevlar::Clock::duration pause) : retries_(retries), pause_(pause) {}

  std::string describe() const override { return "LoggingRetry(" + std::to_string(retries_) + ")"; }
  // Reactive: it judges outcomes with the clause in force where it was added. Its per-execution
  // state, the retry count, is its typed frame: kevlar constructs it (0) before start() and
  // destroys it after the last callback, and hands it to every callback.
  kevlar::StrategyTraits strategy_traits() const noexcept {
    kevlar::StrategyTraits t;
    t.role = kevlar::StrategyRole::reactive;
    return t;
  }
  kevlar::Step start(kevlar::Layer&, int&) { return kevlar::Step::run_inner; }
  kevlar::Step inner_complete(kevlar::Layer& layer, int& retries) {
    const bool failed = layer.handled();
    std::cout << "  attempt " << layer.context().attempt() << (failed ? " failed" : " done")
              << '\n';
    if (!failed || retries == retries_ || layer.cancelled_from_outside()) {
      return kevlar::Step::complete;
    }
    ++retries;
    return layer.wait_for(pause_);  // blocks a synchronous call, a timer for an asynchronous one
  }
  kevlar::Step wait_complete(kevlar::Layer& layer, int&, const boost::system::error_code& ec) {
    if (ec) {
      layer.outcome().set_error(ec);  // cancelled while waiting
      return kevlar::Step::complete;
    }
    return kevlar::Step::run_inner;
  }

 private:
  int retries_;
  kevlar::Clock::duration pause_;
};

boost::asio::awaitable<int> flaky_fetch(int& calls) {
  co_await boost::asio::post(co_await boost::asio::this_coro::executor, boost::asio::use_awaitable);
  if (++calls < 3) throw std::runtime_error("service unavailable");
  co_return 42;
}

}  // namespace

int main() {
  using namespace std::chrono_literals;
  const kevlar::Shield shield =
      kevlar::Shield{}.use(std::make_shared<LoggingRetry>(3, 10ms)).with_name("custom");
  std::cout << shield.describe() << '\n';

  std::cout << "synchronous:\n";
  int sync_calls = 0;
  const int v = shield.execute([&] {
    if (++sync_calls < 2) throw std::runtime_error("busy");
    return 7;
  });
  std::cout << "  result " << v << '\n';

  std::cout << "asynchronous:\n";
  boost::asio::io_context ioc;
  int async_calls = 0;
  boost::asio::co_spawn(
      ioc,
      [&]() -> boost::asio::awaitable<void> {
        const int r = co_await shield.execute_async([&] { return flaky_fetch(async_calls); });
        std::cout << "  result " << r << '\n';
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });
  ioc.run();
  return (v == 7 && async_calls == 3) ? 0 : 1;
}
