// kevlar — internal: how a synchronous execution awaits a user's asynchronous hook (a coroutine):
// on a private io_context, run to completion on the calling thread.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <exception>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace kevlar::detail {

/// Spawns `work` on a private io_context and runs that context on the calling thread until `work`
/// and everything it started have finished; `handler` receives co_spawn's completion
/// (`void(std::exception_ptr)` or `void(std::exception_ptr, R)`) before this returns. Throws what
/// creating the context or spawning throws (std::bad_alloc), and what `handler` throws.
template <class R, class Handler>
void run_to_completion(boost::asio::awaitable<R> work, Handler&& handler) {
  boost::asio::io_context private_context;
  boost::asio::co_spawn(private_context, std::move(work), std::forward<Handler>(handler));
  private_context.run();
}

/// Runs `work` to completion as above and returns its result, or rethrows its exception.
template <class R>
R run_to_completion(boost::asio::awaitable<R> work) {
  std::exception_ptr failure;
  if constexpr (std::is_void_v<R>) {
    run_to_completion(std::move(work), [&failure](std::exception_ptr ep) { failure = std::move(ep); });
    if (failure) std::rethrow_exception(failure);
  } else {
    std::optional<R> value;
    run_to_completion(std::move(work), [&failure, &value](std::exception_ptr ep, R v) {
      failure = std::move(ep);
      if (!failure) value.emplace(std::move(v));
    });
    if (failure) std::rethrow_exception(failure);
    if (!value) throw std::logic_error("kevlar: an awaited hook ended without completing");
    return std::move(*value);
  }
}

}  // namespace kevlar::detail
