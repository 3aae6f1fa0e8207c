// kevlar quick start: one shield, three ways to call through it.
#include <kevlar/kevlar.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <iostream>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Built once, shared everywhere: immutable and thread-safe.
const kevlar::Shield shield = kevlar::Shield{}.with_name("quickstart");

asio::awaitable<int> fetch_answer() {
  asio::steady_timer t(co_await asio::this_coro::executor, 5ms);
  co_await t.async_wait(asio::use_awaitable);
  co_return 42;
}

}  // namespace

int main() {
  std::cout << "pipeline: " << shield.describe() << '\n';

  // 1. Synchronous.
  const int sync_value = shield.execute([] { return 6 * 7; });
  std::cout << "execute:            " << sync_value << '\n';

  asio::io_context ioc;
  int coroutine_value = 0;
  // 2. A coroutine: the factory returns asio::awaitable<T> and is called once per attempt.
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        coroutine_value = co_await shield.execute_async([] { return fetch_answer(); });
        std::cout << "co_await:           " << coroutine_value << '\n';
      },
      [](std::exception_ptr ep) {
        if (ep) std::rethrow_exception(ep);
      });

  // 3. Any Asio operation with any completion token; it completes with the operation's signature.
  asio::steady_timer timer(ioc, 10ms);
  boost::system::error_code timer_result = asio::error::would_block;
  shield.execute_async([&](auto token) { return timer.async_wait(std::move(token)); },
                       asio::bind_executor(ioc, [&](boost::system::error_code ec) {
                         timer_result = ec;
                         std::cout << "callback:           " << ec.message() << '\n';
                       }));
  ioc.run();
  return (sync_value == 42 && coroutine_value == 42 && !timer_result) ? 0 : 1;
}
