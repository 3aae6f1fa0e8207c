// kevlar — what a call's completion signature has no room for: a rejection's kind and when to
// come back (its retry-after), delivered to a kevlar::Diagnostics the caller names with a
// completion-token adapter.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/error.hpp>
#include <kevlar/observer.hpp>

#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/system/error_code.hpp>

#include <optional>
#include <type_traits>
#include <utility>

namespace kevlar {

/// The kind of rejection `ec` reports (`errc::circuit_open`, `isolated`, `rate_limited`,
/// `concurrency_limit_exceeded`), or nothing for any other code.
[[nodiscard]] std::optional<RejectionKind> rejection_kind(
    const boost::system::error_code& ec) noexcept;

/// How an asynchronous execution ended, beyond what its completion signature carries: a completion
/// `void(error_code, Ts...)` (every Asio operation, kevlar::http::async_exchange) has no room for
/// when a rejected call may come back. Name one with with_diagnostics(); kevlar fills it in just
/// before it invokes the completion handler, so it is complete when the handler runs (and when a
/// co_await resumes, or throws).
///
/// A synchronous execution needs none: Shield::execute throws kevlar::Error, whose retry_after()
/// and `rejection_kind(e.error())` say the same, and Shield::execute_outcome returns an Outcome
/// with its retry_after().
///
/// Thread-safety: written by the execution on the thread that completes it, before the handler
/// runs; read it from the handler or after it. Do not share one between concurrent calls.
struct Diagnostics {
  /// The failure the call completed with: the error code of the completion (kevlar's own
  /// `errc`, or the operation's), or for a call that completes with an `exception_ptr` the code
  /// that exception carries (empty for one that carries none). Empty for a success.
  boost::system::error_code error;
  /// Which strategy refused the call without running it, when one did (rejection_kind(error)).
  std::optional<RejectionKind> rejection;
  /// When the refusing strategy expects to admit a call: a rate limit's exact wait, an open
  /// breaker's remaining break (or a server's Retry-After that opened it), a limit held by a
  /// server's Retry-After. Empty when the strategy cannot tell (a concurrency limit, a half-open
  /// breaker whose probe is busy, an isolated breaker) and for anything but a rejection.
  std::optional<Clock::duration> retry_after;

  /// Back to the state of a call that succeeded.
  void clear() noexcept { *this = Diagnostics{}; }
};

template <class T, class Default>
struct associated_diagnostics;

namespace detail {

template <class T, class D, class = void>
struct associated_diagnostics_impl {
  /// Marks the primary template: `T` names no Diagnostics.
  using kevlar_diagnostics_unspecialised = void;
  using type = Diagnostics*;
  static type get(const T&) noexcept { return nullptr; }
  static type get(const T&, const D& d) noexcept { return d; }
};

/// A handler type that forwards Asio's associators (executor_binder, as_tuple's handler,
/// append's, redirect_error's, kevlar's own DiagnosticsHandler) forwards this one too.
template <class T, class D>
struct associated_diagnostics_impl<
    T, D,
    std::void_t<typename boost::asio::associator<associated_diagnostics, T, D>::type>>
    : boost::asio::associator<associated_diagnostics, T, D> {};

}  // namespace detail

/// Asio-style associator: the Diagnostics a completion handler is associated with (nullptr:
/// none). Handlers made by with_diagnostics() have one; Asio's handler wrappers that forward
/// associators (bind_executor, as_tuple, redirect_error, append ...) pass it through.
template <class T, class Default = Diagnostics*>
struct associated_diagnostics : detail::associated_diagnostics_impl<T, Default> {};

/// associated_diagnostics<T>::get(t).
template <class T>
[[nodiscard]] Diagnostics* get_associated_diagnostics(const T& t) noexcept {
  return associated_diagnostics<T>::get(t);
}

namespace detail {

/// True if handlers of type `T` may carry a Diagnostics (an execution then fills it in).
template <class T>
inline constexpr bool may_have_diagnostics =
    !requires { typename associated_diagnostics<T>::kevlar_diagnostics_unspecialised; };

/// A completion handler associated with a Diagnostics: invokes `handler` as it is, forwarding
/// every Asio associator of it.
template <class Handler>
class DiagnosticsHandler {
 public:
  DiagnosticsHandler(Handler handler, Diagnostics* diagnostics) noexcept(
      std::is_nothrow_move_constructible_v<Handler>)
      : handler_(std::move(handler)), diagnostics_(diagnostics) {}

  template <class... Args>
  void operator()(Args&&... args) && {
    std::move(handler_)(std::forward<Args>(args)...);
  }
  template <class... Args>
  void operator()(Args&&... args) & {
    handler_(std::forward<Args>(args)...);
  }

  [[nodiscard]] const Handler& get() const noexcept { return handler_; }
  [[nodiscard]] Diagnostics* diagnostics() const noexcept { return diagnostics_; }

 private:
  Handler handler_;
  Diagnostics* diagnostics_;
};

/// Fills in `d` for a completion that failed with `ec` (empty: a success) and the outcome's
/// `retry_after`.
inline void write_diagnostics(Diagnostics& d, const boost::system::error_code& ec,
                              const std::optional<Clock::duration>& retry_after) noexcept {
  d.error = ec;
  d.rejection = rejection_kind(ec);
  d.retry_after = retry_after;
}

}  // namespace detail

/// A completion token adapter: `with_diagnostics(diagnostics, token)` completes as `token` does,
/// and an execution of kevlar's (Shield::execute_async, or any kevlar operation that runs one)
/// fills in `diagnostics` just before it invokes the handler. The call starts by clearing it.
/// ```
/// kevlar::Diagnostics d;
/// auto [ec, n] = co_await shield.execute_async(op, kevlar::with_diagnostics(
///                                                      d, asio::as_tuple(asio::deferred)));
/// if (ec == kevlar::errc::rate_limited) retry_later(*d.retry_after);
/// ```
/// `diagnostics` must outlive the call's completion. Works with every completion token: a
/// callback, `use_awaitable`, `deferred`, `as_tuple(...)`, `use_future` ..., and inside or outside
/// Asio's adapters that forward associators (`as_tuple(with_diagnostics(d, t))` works too). A call
/// through a shield that has no strategy and nothing to observe runs no execution: `diagnostics`
/// then stays cleared.
template <class Token>
struct DiagnosticsToken {
  Diagnostics* diagnostics;
  Token token;
};

/// See DiagnosticsToken.
template <class Token>
[[nodiscard]] DiagnosticsToken<std::decay_t<Token>> with_diagnostics(Diagnostics& diagnostics,
                                                                     Token&& token) {
  return {&diagnostics, std::forward<Token>(token)};
}

}  // namespace kevlar

template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct boost::asio::associator<Associator, kevlar::detail::DiagnosticsHandler<Handler>,
                               DefaultCandidate> : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const kevlar::detail::DiagnosticsHandler<Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.get());
  }
  static auto get(const kevlar::detail::DiagnosticsHandler<Handler>& h,
                  const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.get(), c)) {
    return Associator<Handler, DefaultCandidate>::get(h.get(), c);
  }
};

template <class Handler, class DefaultCandidate>
struct boost::asio::associator<kevlar::associated_diagnostics,
                               kevlar::detail::DiagnosticsHandler<Handler>, DefaultCandidate> {
  using type = kevlar::Diagnostics*;
  static type get(const kevlar::detail::DiagnosticsHandler<Handler>& h) noexcept {
    return h.diagnostics();
  }
  static type get(const kevlar::detail::DiagnosticsHandler<Handler>& h,
                  const DefaultCandidate&) noexcept {
    return h.diagnostics();
  }
};

namespace kevlar::detail {
/// The legacy `return_type` of async_result<Token, Signatures...>, where it has one (adapters of
/// Boost 1.81 such as redirect_error name it).
template <class Result, class = void>
struct ReturnTypeOf {};
template <class Result>
struct ReturnTypeOf<Result, std::void_t<typename Result::return_type>> {
  using return_type = typename Result::return_type;
};
}  // namespace kevlar::detail

template <class Token, class... Signatures>
struct boost::asio::async_result<kevlar::DiagnosticsToken<Token>, Signatures...>
    : kevlar::detail::ReturnTypeOf<boost::asio::async_result<Token, Signatures...>> {
  /// Wraps the handler `Token` makes into a DiagnosticsHandler, after clearing the diagnostics.
  template <class Initiation>
  struct Wrapper {
    Initiation initiation;
    kevlar::Diagnostics* diagnostics;
    template <class Handler, class... Args>
    void operator()(Handler&& handler, Args&&... args) {
      diagnostics->clear();
      std::move(initiation)(
          kevlar::detail::DiagnosticsHandler<std::decay_t<Handler>>(
              std::forward<Handler>(handler), diagnostics),
          std::forward<Args>(args)...);
    }
    template <class Handler, class... Args>
    void operator()(Handler&& handler, Args&&... args) const {
      diagnostics->clear();
      initiation(kevlar::detail::DiagnosticsHandler<std::decay_t<Handler>>(
                     std::forward<Handler>(handler), diagnostics),
                 std::forward<Args>(args)...);
    }
  };

  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& initiation, RawToken&& token, Args&&... args)
      -> decltype(boost::asio::async_initiate<Token, Signatures...>(
          std::declval<Wrapper<std::decay_t<Initiation>>>(), std::declval<Token&>(),
          std::declval<Args>()...)) {
    return boost::asio::async_initiate<Token, Signatures...>(
        Wrapper<std::decay_t<Initiation>>{std::forward<Initiation>(initiation), token.diagnostics},
        token.token, std::forward<Args>(args)...);
  }
};
