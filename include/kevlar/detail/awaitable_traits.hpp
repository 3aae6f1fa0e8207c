// kevlar — internal: recognising Asio's awaitable type (a Shield's awaitable factories, a Hook's
// coroutine form).
#pragma once

#include <boost/asio/awaitable.hpp>

#include <type_traits>

namespace kevlar::detail {

/// True for `boost::asio::awaitable<T, E>`, which it names as value_type and executor_type.
template <class T>
struct IsAwaitable : std::false_type {};
template <class T, class E>
struct IsAwaitable<boost::asio::awaitable<T, E>> : std::true_type {
  using value_type = T;
  using executor_type = E;
};

}  // namespace kevlar::detail
