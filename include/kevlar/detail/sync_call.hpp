// kevlar — internal: a synchronous execution (Shield::execute).
#pragma once

#include <kevlar/detail/engine.hpp>
#include <kevlar/error.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/strategy.hpp>

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <typeinfo>

namespace kevlar::detail {

/// ValueOps for a value kept in a std::optional<T>.
template <class T>
struct OptionalValueOps {
  static const void* get(const void* slot) noexcept {
    const auto* o = static_cast<const std::optional<T>*>(slot);
    return o->has_value() ? std::addressof(**o) : nullptr;
  }
  static void assign(void* slot, const void* src) {
    if constexpr (std::is_copy_constructible_v<T>) {
      static_cast<std::optional<T>*>(slot)->emplace(*static_cast<const T*>(src));
    } else {
      (void)slot;
      (void)src;
      throw std::invalid_argument("kevlar: the call's result type cannot be copied into");
    }
  }
  static constexpr ValueOps ops{&typeid(T), &get, &assign};
};

/// The result type of a synchronous function: `fn(Context&)` if it accepts a context, else `fn()`.
template <class F>
struct SyncResult;
template <class F>
requires std::invocable<F&, Context&>
struct SyncResult<F> {
  using type = std::invoke_result_t<F&, Context&>;
};
template <class F>
requires(!std::invocable<F&, Context&> && std::invocable<F&>) struct SyncResult<F> {
  using type = std::invoke_result_t<F&>;
};

/// The value type execute() returns for a function of type F (a reference or not).
template <class F>
using SyncValue = std::remove_cvref_t<typename SyncResult<std::remove_reference_t<F>>::type>;

template <class F>
decltype(auto) invoke_sync(F& fn, Context& ctx) {
  if constexpr (std::invocable<F&, Context&>) {
    return std::invoke(fn, ctx);
  } else {
    (void)ctx;
    return std::invoke(fn);
  }
}

/// Per-execution scratch storage for the layers of a synchronous execution: on the stack when it
/// fits, on the heap otherwise.
class FrameBuffer {
 public:
  explicit FrameBuffer(std::size_t bytes) {
    if (bytes > sizeof(inline_)) {
      heap_ = std::make_unique<std::max_align_t[]>((bytes + sizeof(std::max_align_t) - 1) /
                                                   sizeof(std::max_align_t));
    }
  }
  [[nodiscard]] std::byte* data() noexcept {
    return heap_ ? reinterpret_cast<std::byte*>(heap_.get()) : inline_;
  }

 private:
  alignas(std::max_align_t) std::byte inline_[256];
  std::unique_ptr<std::max_align_t[]> heap_;
};

/// One synchronous execution. Lives on the caller's stack.
template <class F, class R>
class SyncCall final : public CallBase {
 public:
  SyncCall(const PipelineView& pipeline, std::byte* frames, Context& ctx, F& fn) noexcept
      : CallBase(pipeline, frames, ctx, Synchronous{}), fn_(fn) {
    if constexpr (!std::is_void_v<R>) {
      outcome_.slot = &value_;
      outcome_.ops = &OptionalValueOps<R>::ops;
    }
  }

  /// The value, or the failure thrown as Outcome<R>::value() would throw it.
  R take_value() {
    switch (outcome_.kind) {
      case OutcomeKind::value:
        if constexpr (std::is_void_v<R>) {
          return;
        } else {
          return std::move(*value_);
        }
      case OutcomeKind::error:
        throw Error(outcome_.error, outcome_.retry_after);
      case OutcomeKind::exception:
        break;
    }
    std::rethrow_exception(outcome_.exception);
  }

  Outcome<R> take_outcome() {
    switch (outcome_.kind) {
      case OutcomeKind::value:
        if constexpr (std::is_void_v<R>) {
          return Outcome<R>::success();
        } else {
          return Outcome<R>::from_value(std::move(*value_));
        }
      case OutcomeKind::error:
        return Outcome<R>::from_error(outcome_.error, outcome_.retry_after);
      case OutcomeKind::exception:
        break;
    }
    return Outcome<R>::from_exception(outcome_.exception);
  }

 private:
  void invoke_operation() override {
    try {
      if constexpr (std::is_void_v<R>) {
        invoke_sync(fn_, context());
      } else {
        value_.emplace(invoke_sync(fn_, context()));
      }
      outcome_.set_success();
    } catch (...) {
      outcome_.set_exception(std::current_exception());
    }
  }
  void deliver() override {}
  void destroy() noexcept override {}
  [[nodiscard]] boost::asio::any_io_executor call_executor() const noexcept override { return {}; }

  F& fn_;
  [[no_unique_address]] std::conditional_t<std::is_void_v<R>, char, std::optional<R>> value_{};
};

}  // namespace kevlar::detail
