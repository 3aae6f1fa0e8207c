// kevlar — Hook: a user's hook in a strategy's options, either a plain function or a coroutine.
#pragma once

#include <kevlar/detail/awaitable_traits.hpp>

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

/// What calling an F with arguments A... returns, without references and qualifiers.
template <class F, class... A>
using HookResult = std::remove_cvref_t<std::invoke_result_t<F&, A...>>;

/// True if an F can be called with arguments A... and returns an Asio awaitable.
template <class F, class... A>
constexpr bool returns_awaitable() {
  if constexpr (std::is_invocable_v<F&, A...>) {
    return IsAwaitable<HookResult<F, A...>>::value;
  } else {
    return false;
  }
}

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
/// exception does) is the same for both and documented with the option. A callable that returns an
/// awaitable but takes a `const X&` argument by reference, or returns an awaitable of another
/// type, and a move-only callable, do not compile (a static_assert says why). An empty
/// std::function or `nullptr` leaves the hook empty. Copyable; a Hook is immutable once the options
/// are given to a strategy, so concurrent calls are as safe as the callable they hold.
template <class R, class... Args>
class Hook<R(Args...)> {
 public:
  /// The plain form.
  using Function = std::function<R(Args...)>;
  /// The coroutine form.
  using Coroutine =
      std::function<boost::asio::awaitable<R>(detail::HookCoroutineArgument<Args>...)>;

  /// True if calling an F with either form's arguments returns an Asio awaitable: F is then held
  /// as a coroutine factory, and must take the coroutine form's arguments and return exactly
  /// `boost::asio::awaitable<R>` (the constructor says so if it does not). Asking with both forms'
  /// arguments catches a coroutine that takes a `const X&` only (`[](auto& e) -> awaitable<void>`),
  /// which a `void` hook would otherwise hold as a function whose awaitable is dropped unrun.
  template <class F>
  static constexpr bool returns_coroutine =
      detail::returns_awaitable<F, detail::HookCoroutineArgument<Args>...>() ||
      detail::returns_awaitable<F, Args...>();

  /// An empty hook: the strategy skips it.
  Hook() noexcept = default;
  /// An empty hook.
  Hook(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)

  /// Holds `f` as a coroutine factory if it returns an Asio awaitable (returns_coroutine), else
  /// as a plain function. Implicit, so that an option is assigned a lambda as before. `f` must be
  /// copyable (both forms are std::functions).
  template <class F>
  requires(!std::same_as<std::remove_cvref_t<F>, Hook> &&
           !std::same_as<std::remove_cvref_t<F>, std::nullptr_t> &&
           (std::is_invocable_r_v<R, F&, Args...> || returns_coroutine<F>))
      Hook(F&& f) {  // NOLINT(google-explicit-constructor)
    static_assert(std::is_copy_constructible_v<std::decay_t<F>>,
                  "kevlar::Hook: the callable must be copyable, as a std::function's target "
                  "(keep move-only state behind a std::shared_ptr)");
    if constexpr (returns_coroutine<F>) {
      static_assert(std::is_invocable_v<F&, detail::HookCoroutineArgument<Args>...>,
                    "kevlar::Hook: a coroutine hook must take its const X& arguments by value "
                    "(a reference would dangle: the coroutine runs after the strategy's callback "
                    "has returned)");
      static_assert(
          std::is_same_v<detail::HookResult<F, detail::HookCoroutineArgument<Args>...>,
                         boost::asio::awaitable<R>>,
          "kevlar::Hook: a coroutine hook must return boost::asio::awaitable<R> of the option's "
          "R, on the default executor");
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

  /// True if the hook is empty (as `!hook`): `options.on_retry == nullptr` reads as it did when
  /// the option was a std::function.
  friend bool operator==(const Hook& hook, std::nullptr_t) noexcept { return !hook; }

 private:
  Function function_;
  Coroutine coroutine_;
};

}  // namespace kevlar
