// kevlar — outcomes: what a call produced (a value, an error code or an exception).
#pragma once

#include <kevlar/error.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <exception>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <variant>

namespace kevlar {

/// The three shapes an outcome can take.
enum class OutcomeKind : unsigned char {
  value,      ///< the call succeeded (it may still carry a value a clause judges as bad)
  error,      ///< the call failed with an error code (Asio style, or produced by a strategy)
  exception,  ///< the call failed with an exception
};

namespace detail {

/// How the engine reaches the typed value of a call without knowing its type.
struct ValueOps {
  const std::type_info* type;                     ///< typeid of the value (void: no value)
  const void* (*get)(const void* slot) noexcept;  ///< the value, or nullptr when absent
  void (*assign)(void* slot, const void* src);    ///< copy-assigns a value of `type`
};

/// The outcome of one call, shared by all layers of a pipeline. Not thread-safe: a call runs
/// one step at a time.
struct OutcomeState {
  OutcomeKind kind = OutcomeKind::value;
  boost::system::error_code error;
  std::exception_ptr exception;
  std::optional<std::chrono::nanoseconds> retry_after;  ///< set by rejections
  void* slot = nullptr;                                 ///< typed storage owned by the call
  const ValueOps* ops = nullptr;                        ///< operations on `slot`

  void set_error(const boost::system::error_code& ec) noexcept {
    kind = OutcomeKind::error;
    error = ec;
    exception = nullptr;
    retry_after.reset();
  }
  void set_exception(std::exception_ptr ep) noexcept {
    kind = OutcomeKind::exception;
    error.clear();
    exception = std::move(ep);
    retry_after.reset();
  }
  void set_success() noexcept {
    // A value outcome never carries an error, an exception or a retry_after (every setter keeps
    // it so): the common case, an attempt that succeeded first time, changes nothing.
    if (kind == OutcomeKind::value) return;
    kind = OutcomeKind::value;
    error.clear();
    exception = nullptr;
    retry_after.reset();
  }
};

/// True if the exception is a cancellation: a boost::system::system_error, std::system_error or
/// kevlar::Error whose code satisfies kevlar::is_cancellation.
[[nodiscard]] bool is_cancellation_exception(const std::exception_ptr& ep) noexcept;

/// The error code carried by a system_error-like exception, or an empty code.
[[nodiscard]] boost::system::error_code error_of_exception(const std::exception_ptr& ep) noexcept;

/// True if the outcome is a cancellation: an error or an exception that kevlar::is_cancellation
/// (or is_cancellation_exception) accepts (OutcomeRef::is_cancellation).
[[nodiscard]] inline bool outcome_is_cancellation(const OutcomeState& outcome) noexcept {
  if (outcome.kind == OutcomeKind::error) return kevlar::is_cancellation(outcome.error);
  if (outcome.kind == OutcomeKind::exception) return is_cancellation_exception(outcome.exception);
  return false;
}

}  // namespace detail

/// A strategy's view of the outcome flowing through its position in the pipeline. Strategies read
/// it in Strategy::on_inner_complete and may replace it (a timeout turns an aborted call into
/// `errc::timeout`; a fallback replaces a failure with a value).
///
/// Thread-safety: belongs to one execution; used only from the step the engine is running.
class OutcomeRef {
 public:
  explicit OutcomeRef(detail::OutcomeState& state) noexcept : state_(&state) {}

  [[nodiscard]] OutcomeKind kind() const noexcept { return state_->kind; }
  [[nodiscard]] bool has_value() const noexcept { return state_->kind == OutcomeKind::value; }
  [[nodiscard]] bool has_error() const noexcept { return state_->kind == OutcomeKind::error; }
  [[nodiscard]] bool has_exception() const noexcept {
    return state_->kind == OutcomeKind::exception;
  }
  /// True if the outcome is an error or an exception (whatever a clause says about it).
  [[nodiscard]] bool failed() const noexcept { return state_->kind != OutcomeKind::value; }

  /// The error code; empty unless has_error().
  [[nodiscard]] const boost::system::error_code& error() const noexcept { return state_->error; }
  /// The exception; null unless has_exception().
  [[nodiscard]] const std::exception_ptr& exception() const noexcept { return state_->exception; }

  /// True if the outcome is a cancellation (an `operation_aborted` error code or a system_error
  /// exception carrying one). Rethrows the exception to inspect it, so it is not free on the
  /// exception path.
  [[nodiscard]] bool is_cancellation() const noexcept {
    return detail::outcome_is_cancellation(*state_);
  }

  /// The type of the call's value (`typeid(void)` for calls without one).
  [[nodiscard]] const std::type_info& value_type() const noexcept {
    return state_->ops != nullptr ? *state_->ops->type : typeid(void);
  }

  /// The value if the call has one of type T and it is present, else nullptr. Present means the
  /// call produced it; an Asio operation that failed still carries its values (e.g. bytes read).
  template <class T>
  [[nodiscard]] const T* value_if() const noexcept {
    if (state_->ops == nullptr || *state_->ops->type != typeid(T)) return nullptr;
    return static_cast<const T*>(state_->ops->get(state_->slot));
  }

  /// The call's value, type-erased (see value_type()); nullptr when absent.
  [[nodiscard]] const void* raw_value() const noexcept {
    return state_->ops != nullptr ? state_->ops->get(state_->slot) : nullptr;
  }

  /// For a rejection: when the rejecting strategy expects to admit a call again.
  [[nodiscard]] std::optional<std::chrono::nanoseconds> retry_after() const noexcept {
    return state_->retry_after;
  }

  /// Replaces the outcome with an error code.
  void set_error(const boost::system::error_code& ec) noexcept { state_->set_error(ec); }
  /// Replaces the outcome with a rejection: an error code and, when known, how long until the
  /// strategy expects to admit a call (carried by kevlar::Error::retry_after()).
  void set_rejection(const boost::system::error_code& ec,
                     std::optional<std::chrono::nanoseconds> retry_after) noexcept {
    state_->set_error(ec);
    state_->retry_after = retry_after;
  }
  /// Replaces the outcome with an exception.
  void set_exception(std::exception_ptr ep) noexcept { state_->set_exception(std::move(ep)); }
  /// Replaces the outcome with a success, for a call without a value (value_type() is void: a
  /// void function, a `void(error_code)` operation). Returns false (and changes nothing) for a
  /// call with a value, which needs set_value.
  bool set_success() noexcept {
    if (value_type() != typeid(void)) return false;
    state_->set_success();
    return true;
  }
  /// Replaces the outcome with a success carrying `value`. Returns false (and changes nothing)
  /// when the call's value type is not T.
  template <class T>
  bool set_value(const T& value) {
    if (state_->ops == nullptr || *state_->ops->type != typeid(T)) return false;
    state_->ops->assign(state_->slot, &value);
    state_->set_success();
    return true;
  }

 private:
  detail::OutcomeState* state_;
};

/// The outcome of a call: a value, an error code or an exception, never more than one. Returned by
/// `Shield::execute_outcome` so that failures flow without being thrown.
///
/// `T` may be `void`. Thread-safety: a value type; distinct objects may be used concurrently.
template <class T>
class Outcome {
  struct Unit {};
  using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;

 public:
  using value_type = T;

  /// A success (for `Outcome<void>`; for other T the value is value-initialised).
  Outcome() requires std::is_default_constructible_v<Stored> : v_(std::in_place_index<0>) {}

  /// A success carrying `value`.
  template <class U = Stored>
  requires(!std::is_void_v<T> && std::is_constructible_v<Stored, U&&>) static Outcome
      from_value(U&& value) {
    return Outcome(std::in_place_index<0>, std::forward<U>(value));
  }
  /// A success for `Outcome<void>`.
  static Outcome success() requires std::is_void_v<T> { return Outcome(std::in_place_index<0>); }
  /// A failure carrying an error code. An empty code is refused with std::invalid_argument.
  static Outcome from_error(const boost::system::error_code& ec,
                            std::optional<std::chrono::nanoseconds> retry_after = {}) {
    if (!ec) throw std::invalid_argument("kevlar::Outcome::from_error: the error code is empty");
    Outcome o(std::in_place_index<1>, ec);
    o.retry_after_ = retry_after;
    return o;
  }
  /// A failure carrying an exception. A null pointer is refused with std::invalid_argument.
  static Outcome from_exception(std::exception_ptr ep) {
    if (!ep) throw std::invalid_argument("kevlar::Outcome::from_exception: the exception is null");
    return Outcome(std::in_place_index<2>, std::move(ep));
  }

  [[nodiscard]] bool has_value() const noexcept { return v_.index() == 0; }
  [[nodiscard]] bool has_error() const noexcept { return v_.index() == 1; }
  [[nodiscard]] bool has_exception() const noexcept { return v_.index() == 2; }
  explicit operator bool() const noexcept { return has_value(); }

  /// The kind of outcome.
  [[nodiscard]] OutcomeKind kind() const noexcept { return static_cast<OutcomeKind>(v_.index()); }

  /// The error code (empty unless has_error()).
  [[nodiscard]] boost::system::error_code error() const noexcept {
    return has_error() ? std::get<1>(v_) : boost::system::error_code{};
  }
  /// For rejections: how long until the rejecting strategy expects to admit a call.
  [[nodiscard]] std::optional<std::chrono::nanoseconds> retry_after() const noexcept {
    return retry_after_;
  }
  /// The exception (null unless has_exception()).
  [[nodiscard]] std::exception_ptr exception() const noexcept {
    return has_exception() ? std::get<2>(v_) : std::exception_ptr{};
  }

  /// The value; on a failure, rethrows the stored exception (same object) or throws
  /// kevlar::Error with the stored code.
  decltype(auto) value() & {
    rethrow_if_failed();
    if constexpr (!std::is_void_v<T>) return (std::get<0>(v_));
  }
  decltype(auto) value() const& {
    rethrow_if_failed();
    if constexpr (!std::is_void_v<T>) return (std::get<0>(v_));
  }
  T value() && {
    rethrow_if_failed();
    if constexpr (!std::is_void_v<T>) return std::move(std::get<0>(v_));
  }

  /// Throws what the failure carries: the original exception object, or kevlar::Error(code).
  void rethrow_if_failed() const {
    if (has_exception()) std::rethrow_exception(std::get<2>(v_));
    if (has_error()) throw Error(std::get<1>(v_), retry_after_);
  }

 private:
  template <std::size_t I, class... A>
  explicit Outcome(std::in_place_index_t<I> i, A&&... a) : v_(i, std::forward<A>(a)...) {}

  std::variant<Stored, boost::system::error_code, std::exception_ptr> v_;
  std::optional<std::chrono::nanoseconds> retry_after_;
};

}  // namespace kevlar
