// kevlar — error codes and the exception thrown by synchronous execution.
#pragma once

#include <boost/system/error_code.hpp>

#include <chrono>
#include <optional>
#include <system_error>
#include <type_traits>

namespace kevlar {

/// Errors produced by kevlar's strategies. Values are stable; 0 is never used.
///
/// Asynchronous completions carry them as `boost::system::error_code` (or, for awaitable
/// factories, as an `std::exception_ptr` holding a kevlar::Error); `Shield::execute` throws
/// kevlar::Error carrying the same code.
enum class errc {
  timeout = 1,       ///< a Timeout strategy's budget elapsed before the call completed
  circuit_open = 2,  ///< a circuit breaker is open (or half-open with its probe busy)
  isolated = 3,      ///< a circuit breaker was isolated by hand
  rate_limited = 4,  ///< a rate limiter has no permit and no queue place
  concurrency_limit_exceeded = 5,  ///< all concurrency permits and queue places are taken
  closed = 6,                      ///< the primitive or strategy was closed or destroyed
  callback_exception =
      7,  ///< a user callback threw an exception that an error_code path cannot carry
  invalid_result_type = 8,  ///< a typed callback was applied to a call returning another type
  /// An asynchronous call's completion handler has no associated executor, and a strategy of the
  /// shield (a timeout) needs one to deliver its decisions: bind one with asio::bind_executor.
  executor_required = 9,
  /// Client-side adaptive throttling rejected the call locally: the dependency has been refusing
  /// too large a share of recent requests (kevlar::adaptive_throttle).
  throttled = 10,
  /// A call waited in a limiter's queue longer than its queue-wait timeout (fixed or CoDel) and
  /// was shed before it ran. (A deadline of the context that comes first, an outer timeout's,
  /// ends the wait as that timeout: errc::timeout.)
  queue_timeout = 11,
};

/// The error category of kevlar::errc (name "kevlar"). Thread-safe; a process-wide singleton.
[[nodiscard]] const boost::system::error_category& error_category() noexcept;

/// Makes a `boost::system::error_code` from a kevlar::errc.
[[nodiscard]] inline boost::system::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// True if `ec` means "the operation was cancelled" (`asio::error::operation_aborted` in either
/// the system or generic category). kevlar treats such outcomes as the caller's cancellation: by
/// default no strategy counts them as failures.
[[nodiscard]] bool is_cancellation(const boost::system::error_code& ec) noexcept;

/// The exception `Shield::execute` throws for failures produced by kevlar (timeouts, rejections,
/// cancellation). A `std::system_error`; `code()` compares equal to kevlar::errc values, and
/// `error()` returns the original `boost::system::error_code`.
///
/// Thread-safety: immutable after construction.
class Error : public std::system_error {
 public:
  using duration = std::chrono::nanoseconds;

  /// Constructs from an error code and, for rejections, the time after which a new call may be
  /// admitted.
  explicit Error(const boost::system::error_code& ec, std::optional<duration> retry_after = {});

  /// The error as a Boost.System code (what asynchronous completions carry).
  [[nodiscard]] const boost::system::error_code& error() const noexcept { return error_; }

  /// For rejections: how long until the strategy expects to admit a call; empty when unknown.
  [[nodiscard]] std::optional<duration> retry_after() const noexcept { return retry_after_; }

 private:
  boost::system::error_code error_;
  std::optional<duration> retry_after_;
};

}  // namespace kevlar

template <>
struct boost::system::is_error_code_enum<kevlar::errc> : std::true_type {};

template <>
struct std::is_error_code_enum<kevlar::errc> : std::true_type {};
