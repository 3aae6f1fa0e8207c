// kevlar — the fallback strategy: replace a handled failure (or bad result) with a value.
#pragma once

#include <kevlar/basic_shield.hpp>
#include <kevlar/clause.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/observer_layer.hpp>
#include <kevlar/error.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/strategy.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace kevlar {

/// A fallback replaced a handled failure (before its on_fallback hook): an event (Layer::emit,
/// Observer).
struct FallbackTaken {
  static constexpr std::string_view kevlar_event = "FallbackTaken";
  Failure failure;  ///< the failure it replaced
};

/// What the fallback hook sees. Valid only during the hook call.
template <class T>
struct FallbackEvent {
  /// The handled outcome being replaced: an error, an exception (the very object the call
  /// threw), or a value the clause judged bad.
  const Outcome<T>& outcome;
  /// The execution's context.
  Context& context;
};

/// Options of a fallback for calls whose value type is `T`. Set exactly one of `value` and
/// `recovery`. Copied into the strategy when the shield is built.
///
/// `T` is the call's value type as the clauses see it: the function's return type for
/// Shield::execute, `T` for `awaitable<T>` factories, and for an Asio operation with signature
/// `void(error_code, Ts...)` the single `T`, or `std::tuple<Ts...>` for several values. A call of
/// any other value type whose failure the clause handles fails with `errc::invalid_result_type`
/// (kevlar::Error from execute()); its successes pass through.
///
/// Order: on_fallback, then recovery or value (Kevlar's). Each hook (kevlar::Hook) holds a
/// function or a coroutine. Functions run inline on the completion path of the handled call.
/// Coroutines (Kevlar's OnFallbackAsync and asynchronous fallback action) are awaited: spawned on
/// the execution's executor with its cancellation slot in an asynchronous execution (the caller's
/// cancellation, or a timeout outside, aborts what they await, and the call then completes with
/// `operation_aborted`), run to completion on a private io_context in a synchronous one. Unset,
/// they cost nothing. A hook or
/// recovery that throws ends the execution with that exception (the same object); a hook's
/// exception skips the recovery. Hooks and recovery run concurrently for concurrent executions and
/// must be thread-safe.
template <class T>
struct FallbackOptions {
  /// The replacement value.
  std::optional<T> value;
  /// Computes the replacement from the handled outcome and the execution's context (the context's
  /// cancelled() tells whether the caller gave up; the recovery is still run). A coroutine
  /// (Kevlar's asynchronous fallback action) is awaited (see the class comment for where it runs
  /// and how cancellation reaches it).
  Hook<T(const Outcome<T>&, Context&)> recovery;
  /// Told about each fallback before the recovery runs (a coroutine, Kevlar's OnFallbackAsync:
  /// awaited before the recovery; the event's outcome and context stay valid while it runs).
  Hook<void(const FallbackEvent<T>&)> on_fallback;
  /// The outcomes this fallback replaces, instead of the ambient clause (Shield::when) where it is
  /// added (Kevlar's HandlesException / HandlesResult). A fallback with its own clause is never
  /// refused as unreachable: the chain cannot compare two clauses' predicates.
  std::optional<Clause> handles;
};

/// Options of a fallback for calls without a value: `Shield::execute` of a void function, or an
/// Asio operation with signature `void(error_code)` (or `void(exception_ptr)`). A handled failure
/// becomes a success, after the recovery (if any) ran: use it to log, compensate or fill a cache
/// the caller will read. Copied into the strategy when the shield is built.
///
/// A call with a value (of any type) whose failure the clause handles fails with
/// `errc::invalid_result_type`; its successes pass through.
template <>
struct FallbackOptions<void> {
  /// Run for each handled failure (the context's cancelled() tells whether the caller gave up; the
  /// recovery is still run); if it returns (a coroutine: once it ends), the call succeeds.
  /// Optional: without it the handled failure simply becomes a success.
  Hook<void(const Outcome<void>&, Context&)> recovery;
  /// Told about each fallback before the recovery runs (a coroutine: awaited before it).
  Hook<void(const FallbackEvent<void>&)> on_fallback;
  /// As FallbackOptions<T>::handles.
  std::optional<Clause> handles;
};

namespace detail {

/// Throws std::invalid_argument unless exactly one of `value` and `recovery` is set.
void check_fallback_options(bool has_value, bool has_recovery);

/// The value outcome of `o` as an Outcome<T> (T not void).
template <class T>
Outcome<T> value_outcome(const OutcomeRef& o) {
  const T* v = o.value_if<T>();
  if (v == nullptr) return Outcome<T>::from_error(make_error_code(errc::invalid_result_type));
  return Outcome<T>::from_value(*v);
}

/// A copy of `o` as an Outcome<T>; the caller checked that the call's value type is T.
template <class T>
Outcome<T> outcome_of(const OutcomeRef& o) {
  switch (o.kind()) {
    case OutcomeKind::error:
      return Outcome<T>::from_error(o.error(), o.retry_after());
    case OutcomeKind::exception:
      return Outcome<T>::from_exception(o.exception());
    case OutcomeKind::value:
      break;
  }
  if constexpr (std::is_void_v<T>) {
    return Outcome<void>::success();  // a success the clause judged a failure
  } else {
    return value_outcome<T>(o);
  }
}

/// FallbackStrategy's per-execution state: none (an awaited recovery writes the outcome itself).
struct FallbackFrame {};

}  // namespace detail

/// Replaces outcomes that the clause in force where it was added handles with a value: a fixed
/// one, or one computed by a recovery function. Unhandled outcomes (successes, failures the clause
/// does not select, and — with the default clause — the caller's cancellation) pass through
/// unchanged.
///
/// On a handled outcome: on_fallback, then the recovery (or the value), then the outcome becomes a
/// success carrying it. A shield refuses (std::invalid_argument when built) a fallback placed
/// inside a retry, hedge or breaker with the same clause, which would make that strategy never see
/// a failure; put the fallback first (outermost) or give it its own clause with Shield::when().
///
/// Completion: through the pipeline; adds no hop. The path where nothing is replaced allocates
/// nothing. Thread-safety: stateless; one instance serves any number of concurrent executions.
template <class T>
class FallbackStrategy final : public BasicStrategy<FallbackStrategy<T>, detail::FallbackFrame> {
  using Frame = detail::FallbackFrame;

  static_assert(std::is_void_v<T> ||
                    (std::is_same_v<T, std::remove_cvref_t<T>> && std::is_copy_constructible_v<T>),
                "kevlar::FallbackStrategy<T>: T must be void or a copyable, non-reference, "
                "unqualified value type");

 public:
  /// Validates `options` (exactly one of value and recovery; for void, both are optional):
  /// std::invalid_argument otherwise.
  explicit FallbackStrategy(FallbackOptions<T> options) : options_(std::move(options)) {
    if constexpr (!std::is_void_v<T>) {
      detail::check_fallback_options(options_.value.has_value(),
                                     static_cast<bool>(options_.recovery));
    }
    if (options_.handles) own_clause_ = std::make_shared<const Clause>(*options_.handles);
  }

  /// The options it was built with.
  [[nodiscard]] const FallbackOptions<T>& options() const noexcept { return options_; }

  /// `Fallback`.
  [[nodiscard]] std::string describe() const override { return "Fallback"; }
  /// Fallback role (chain validation refuses it inside a reactive strategy with the same
  /// clause), stateless: its frame is empty and takes no storage.
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept {
    StrategyTraits t;
    t.role = StrategyRole::fallback;
    t.clause = own_clause_;
    return t;
  }
  /// Runs the inner part.
  Step start(Layer&, Frame&) { return Step::run_inner; }
  /// Replaces a handled outcome (see the class comment); always completes.
  Step inner_complete(Layer& layer, Frame&) {
    if (!layer.handled()) return Step::complete;  // the hot path: nothing to replace
    return replace(layer);
  }
  /// The awaited part (a coroutine on_fallback, the recovery) ended: its failure (`ec`: its
  /// exception is the outcome; the caller's cancellation is reported as one), or success (a value
  /// was set as it arrived).
  Step wait_complete(Layer& layer, Frame&, const boost::system::error_code& ec) {
    if (ec) {
      detail::report_cancelled_hook(layer);
      return Step::complete;
    }
    if constexpr (std::is_void_v<T>) layer.outcome().set_success();
    return Step::complete;
  }

 private:
  /// Kept out of line so that the pass-through path stays a test and a return.
  [[gnu::noinline]] Step replace(Layer& layer) {
    OutcomeRef out = layer.outcome();
    if (out.value_type() != typeid(T)) {
      out.set_error(make_error_code(errc::invalid_result_type));
      return Step::complete;
    }
    if (layer.wants<FallbackTaken>()) layer.emit(FallbackTaken{detail::failure_of_outcome(out)});
    if (asynchronous()) return replace_async(layer, out);
    // Neither hook is a coroutine from here on: each is a function or empty.
    if constexpr (std::is_void_v<T>) {
      if (options_.on_fallback || options_.recovery) {
        const Outcome<void> handled = detail::outcome_of<void>(out);
        if (options_.on_fallback) {
          options_.on_fallback.function()(FallbackEvent<void>{handled, layer.context()});
        }
        if (options_.recovery) options_.recovery.function()(handled, layer.context());
      }
      out.set_success();
      return Step::complete;
    } else {
      return replace_value(layer, out);
    }
  }

  Step replace_value(Layer& layer, OutcomeRef out) {
    if (!options_.on_fallback && !options_.recovery) {
      out.set_value(*options_.value);
      return Step::complete;
    }
    const Outcome<T> handled = detail::outcome_of<T>(out);
    if (options_.on_fallback) {
      options_.on_fallback.function()(FallbackEvent<T>{handled, layer.context()});
    }
    if (options_.recovery) {
      const T v = options_.recovery.function()(handled, layer.context());
      out.set_value(v);
    } else {
      out.set_value(*options_.value);
    }
    return Step::complete;
  }

  [[nodiscard]] bool asynchronous() const noexcept {
    return options_.on_fallback.is_coroutine() || options_.recovery.is_coroutine();
  }

  /// A function on_fallback, then the awaited part (a coroutine on_fallback, the recovery) in one
  /// coroutine that owns the handled outcome its event refers to.
  Step replace_async(Layer& layer, OutcomeRef out) {
    Outcome<T> handled = detail::outcome_of<T>(out);
    if (options_.on_fallback.is_function()) {
      options_.on_fallback.function()(FallbackEvent<T>{handled, layer.context()});
    }
    return layer.await(recover(options_, std::move(handled), layer.context(), out));
  }

  /// The awaited part; it writes the replacement itself (an awaitable<void>: co_spawn would need a
  /// default-constructible T to report a failure of an awaitable<T>).
  static boost::asio::awaitable<void> recover(const FallbackOptions<T>& o, Outcome<T> handled,
                                              Context& context, OutcomeRef out) {
    if (o.on_fallback.is_coroutine()) {
      co_await o.on_fallback.coroutine()(FallbackEvent<T>{handled, context});
    }
    if constexpr (std::is_void_v<T>) {
      if (o.recovery.is_coroutine()) {
        co_await o.recovery.coroutine()(std::move(handled), context);
      } else if (o.recovery) {
        o.recovery.function()(handled, context);
      }
    } else if (o.recovery.is_coroutine()) {
      const T v = co_await o.recovery.coroutine()(std::move(handled), context);
      out.set_value(v);
    } else if (o.recovery) {
      out.set_value(o.recovery.function()(handled, context));
    } else {
      out.set_value(*o.value);
    }
  }

  FallbackOptions<T> options_;
  std::shared_ptr<const Clause> own_clause_;  ///< options_.handles
};

/// A fallback replacing handled failures of calls whose value type is `T` with `value` (the
/// factory of kevlar::Shield::fallback and of BasicShield::with). Throws what copying the value
/// throws.
template <class T>
[[nodiscard]] std::shared_ptr<FallbackStrategy<T>> fallback(T value) {
  FallbackOptions<T> options;
  options.value.emplace(std::move(value));
  return std::make_shared<FallbackStrategy<T>>(std::move(options));
}

/// A fallback configured by `options` (std::invalid_argument names an invalid option).
template <class T>
[[nodiscard]] std::shared_ptr<FallbackStrategy<T>> fallback(FallbackOptions<T> options) {
  return std::make_shared<FallbackStrategy<T>>(std::move(options));
}

}  // namespace kevlar
