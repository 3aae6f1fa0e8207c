// kevlar — Hook: a user's hook in a strategy's options, either a plain function or a coroutine.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <concepts>
#include <cstddef>
#include <functional>
#include <type_traits>
#include <utility>

namespace kevlar {

namespace detail {

/// How an argument of a hook's signature reaches its coroutine form: a `const X&` as a copy (a
/// coroutine outlives the call that started it, so it must own what it reads), anything else as
/// it is (a `Context&` stays a reference: the execution outlives the hook it awaits).
template <class A>
using HookCoroutineArgument =
    std::conditional_t<std::is_lvalue_reference_v<A> && std::is_const_v<std::remove_reference_t<A>>,
                       std::remove_cvref_t<A>, A>;

template <class T>
inline constexpr bool is_awaitable_v = false;
template <class T, class Executor>
inline constexpr bool is_awaitable_v<boost::asio::awaitable<T, Executor>> = true;

}  // namespace detail

template <class Signature>
class Hook;

/// A hook a strategy's options hold (RetryOptions::on_retry, TimeoutOptions::on_timeout, ...): a
/// function the strategy calls at a point of its work. It holds one of two forms, chosen by what
/// the callable assigned to it returns:
///
/// - a **plain function**, returning R: called on the thread that runs the strategy, at once;
/// - a **coroutine factory**, returning `boost::asio::awaitable<R>`: the strategy awaits the
///   coroutine (Layer::await) before it goes on. In an asynchronous execution it is spawned on
///   the execution's executor, and the caller's cancellation reaches it; in a synchronous one it
///   runs to completion on a private io_context on the calling thread. Its arguments are copies
///   of the `const X&` ones of the signature (a coroutine may outlive its caller's arguments), so
///   declare them by value: `[](RetryEvent e) -> asio::awaitable<void> { ... }`.
///
/// ```
/// options.on_retry = [](const RetryEvent& e) { log(e.attempt); };            // plain
/// options.on_retry = [](RetryEvent e) -> asio::awaitable<void> { co_await ...; };  // coroutine
/// ```
///
/// What a strategy does with each form (its order among the strategy's other work, what an
/// exception does) is the same for both and documented with the option. An empty std::function or
/// `nullptr` leaves the hook empty. Copyable; a Hook is immutable once the options are given to a
/// strategy, so concurrent calls are as safe as the callable they hold.
template <class R, class... Args>
class Hook<R(Args...)> {
 public:
  /// The plain form.
  using Function = std::function<R(Args...)>;
  /// The coroutine form.
  using Coroutine =
      std::function<boost::asio::awaitable<R>(detail::HookCoroutineArgument<Args>...)>;

  /// True if calling an F with the coroutine form's arguments returns an awaitable: F is then
  /// held as a coroutine factory (and must return exactly `boost::asio::awaitable<R>`).
  template <class F>
  static constexpr bool returns_coroutine = [] {
    if constexpr (std::is_invocable_v<F&, detail::HookCoroutineArgument<Args>...>) {
      using Result =
          std::remove_cvref_t<std::invoke_result_t<F&, detail::HookCoroutineArgument<Args>...>>;
      static_assert(
          !detail::is_awaitable_v<Result> || std::is_same_v<Result, boost::asio::awaitable<R>>,
          "kevlar::Hook: a coroutine hook must return boost::asio::awaitable<R> of the "
          "option's R, on the default executor");
      return detail::is_awaitable_v<Result>;
    } else {
      return false;
    }
  }();

  /// An empty hook: the strategy skips it.
  Hook() noexcept = default;
  /// An empty hook.
  Hook(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)

  /// Holds `f` as a coroutine factory if calling it with the signature's (coroutine) arguments
  /// returns `boost::asio::awaitable<R>`, else as a plain function. Implicit, so that an option
  /// is assigned a lambda as before.
  template <class F>
  requires(!std::same_as<std::remove_cvref_t<F>, Hook> &&
           !std::same_as<std::remove_cvref_t<F>, std::nullptr_t> &&
           (std::is_invocable_r_v<R, F&, Args...> || returns_coroutine<F>))
      Hook(F&& f) {  // NOLINT(google-explicit-constructor)
    if constexpr (returns_coroutine<F>) {
      coroutine_ = std::forward<F>(f);
    } else {
      function_ = std::forward<F>(f);
    }
  }

  /// True if the hook holds either form.
  explicit operator bool() const noexcept {
    return static_cast<bool>(function_) || static_cast<bool>(coroutine_);
  }
  /// True if it holds a plain function.
  [[nodiscard]] bool is_function() const noexcept { return static_cast<bool>(function_); }
  /// True if it holds a coroutine factory.
  [[nodiscard]] bool is_coroutine() const noexcept { return static_cast<bool>(coroutine_); }
  /// The plain form; empty unless is_function().
  [[nodiscard]] const Function& function() const noexcept { return function_; }
  /// The coroutine form; empty unless is_coroutine().
  [[nodiscard]] const Coroutine& coroutine() const noexcept { return coroutine_; }

 private:
  Function function_;
  Coroutine coroutine_;
};

}  // namespace kevlar
