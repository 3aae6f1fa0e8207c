// kevlar — the fallback strategy: replace a handled failure (or bad result) with a value.
#pragma once

#include <kevlar/context.hpp>
#include <kevlar/detail/observer_layers.hpp>
#include <kevlar/error.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/shield.hpp>
#include <kevlar/strategy.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace kevlar {

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
/// Hooks are synchronous: they run inline on the completion path of the handled call. Kevlar's
/// OnFallbackAsync has no counterpart — an asynchronous hook would need a scheduler hop and an
/// allocation on every fallback; asynchronous recovery work belongs in a strategy of its own (see
/// <kevlar/strategy.hpp>). A hook or recovery that throws ends the execution with that exception
/// (the same object); a hook's exception skips the recovery. Hooks and recovery run concurrently
/// for concurrent executions and must be thread-safe.
template <class T>
struct FallbackOptions {
  /// The replacement value.
  std::optional<T> value;
  /// Computes the replacement from the handled outcome and the execution's context (the context's
  /// cancelled() tells whether the caller gave up; the recovery is still run).
  std::function<T(const Outcome<T>&, Context&)> recovery;
  /// Told about each fallback before the recovery runs.
  std::function<void(const FallbackEvent<T>&)> on_fallback;
};

namespace detail {

/// Throws std::invalid_argument unless exactly one of `value` and `recovery` is set.
void check_fallback_options(bool has_value, bool has_recovery);

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
  const T* v = o.value_if<T>();
  if (v == nullptr) return Outcome<T>::from_error(make_error_code(errc::invalid_result_type));
  return Outcome<T>::from_value(*v);
}

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
class FallbackStrategy final : public Strategy {
  static_assert(std::is_same_v<T, std::remove_cvref_t<T>> && std::is_copy_constructible_v<T>,
                "kevlar::FallbackStrategy<T>: T must be a copyable, non-reference, unqualified "
                "value type");

 public:
  /// Validates `options` (exactly one of value and recovery): std::invalid_argument otherwise.
  explicit FallbackStrategy(FallbackOptions<T> options) : options_(std::move(options)) {
    detail::check_fallback_options(options_.value.has_value(),
                                   static_cast<bool>(options_.recovery));
  }

  /// The options it was built with.
  [[nodiscard]] const FallbackOptions<T>& options() const noexcept { return options_; }

  /// `Fallback`.
  [[nodiscard]] std::string describe() const override { return "Fallback"; }
  /// Fallback role (chain validation refuses it inside a reactive strategy with the same
  /// clause), stateless, no frame.
  [[nodiscard]] StrategyTraits traits() const noexcept override {
    return {StrategyRole::fallback, false, 0, false};
  }
  /// Runs the inner part.
  Step on_start(Layer&) override { return Step::run_inner; }
  /// Replaces a handled outcome (see the class comment); always completes.
  Step on_inner_complete(Layer& layer) override {
    if (!layer.handled()) return Step::complete;  // the hot path: nothing to replace
    return replace(layer);
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
    if (!options_.on_fallback && !options_.recovery) {
      out.set_value(*options_.value);
      return Step::complete;
    }
    const Outcome<T> handled = detail::outcome_of<T>(out);
    if (options_.on_fallback) options_.on_fallback(FallbackEvent<T>{handled, layer.context()});
    if (options_.recovery) {
      const T v = options_.recovery(handled, layer.context());
      out.set_value(v);
    } else {
      out.set_value(*options_.value);
    }
    return Step::complete;
  }

  FallbackOptions<T> options_;
};

template <class T>
Shield Shield::fallback(T value) const {
  FallbackOptions<T> options;
  options.value.emplace(std::move(value));
  return use(std::make_shared<FallbackStrategy<T>>(std::move(options)));
}

template <class T>
Shield Shield::fallback(FallbackOptions<T> options) const {
  return use(std::make_shared<FallbackStrategy<T>>(std::move(options)));
}

}  // namespace kevlar
