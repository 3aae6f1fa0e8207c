// kevlar — internal: a synchronous execution (Shield::execute).
#pragma once

#include <kevlar/detail/always_inline.hpp>
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
    if (bytes > sync_inline_frame_bytes) {
      heap_ = std::make_unique<std::max_align_t[]>((bytes + sizeof(std::max_align_t) - 1) /
                                                   sizeof(std::max_align_t));
    }
  }
  [[nodiscard]] std::byte* data() noexcept {
    return heap_ ? reinterpret_cast<std::byte*>(heap_.get()) : inline_;
  }

 private:
  alignas(std::max_align_t) std::byte inline_[sync_inline_frame_bytes];
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

  /// Runs the whole execution on the calling thread (the engine's synchronous shell); the outcome
  /// is the caller's when it returns.
  ///
  /// A synchronous execution sees a subset of the machine's transitions (CallBase::advance): its
  /// operation and its waits complete before the shell goes on, no step is ever pending, no layer
  /// runs attempts (Layer::start_attempt refuses), and no deadline check falls between a wait and
  /// the next attempt (a wait that reaches the deadline reports itself aborted); an attempt in a
  /// layer's later round is declined once an enclosing deadline has passed (walk_layer's
  /// `Again`).
  /// The shell walks that subset with each layer in a C++ frame of its own, so the depth lives on
  /// the stack and the compiler keeps it in a register (cheaper than driving advance(): see
  /// docs/benchmarks.md, "Layout decisions"). Compiled here
  /// for the call's type, the walk calls the user's function directly, not through the virtual
  /// invoke_operation(), and in an optimised build its outermost layer inlines into the caller
  /// of walk(): with g++ 12 the whole one-layer execution is one function, Shield::execute's
  /// out-of-line path (execute_pipeline, which tests the flag itself and calls walk()).
  void run() {
    if (pipeline().plain_synchronous) [[likely]] {
      walk();
    } else {
      run_any();
    }
  }

  /// run() for a pipeline that is PipelineView::plain_synchronous, without testing it (what
  /// Shield::execute calls, having tested the flag itself).
  void walk() {
    // The thread-local marker of a running engine is left alone: only handlers of asynchronous
    // steps read it; depth_ too (only the asynchronous paths, a pending step and abandonment).
    walk_layer<0>(0);
  }

  /// run() for any pipeline (observed, empty, large frames): the walk's levels are not inlined
  /// here. Kept apart so that the plain path tests one flag.
  [[gnu::noinline]] void run_any() {
    const bool observed = pipeline().observes_executions;
    if (observed) observe_start();
    if (pipeline().size == 0) {
      run_attempt();
    } else {
      run_layer(0);
    }
    if (observed) observe_finish();
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
  /// One layer and everything inside it, each layer in a C++ frame of its own, with one Layer
  /// handed to all its callbacks. The outer `Inlined` + 1 levels are inlined into the caller, the
  /// deeper ones are calls of run_layer(). walk() inlines one level and run_layer(), a function
  /// of its own, the next two: the one-layer call keeps the few registers one level needs, and a
  /// deeper pipeline pays one call (the split the counts chose: docs/benchmarks.md, "Layout
  /// decisions"). Each inlined level is one more copy of the dispatchers
  /// per call type. An unoptimised build inlines none of this (KEVLAR_DETAIL_ALWAYS_INLINE): each
  /// level is a function of its own there.
  ///
  /// `Again`: this walk runs the layers again after an earlier pass (a repeater's next round, or a
  /// round after a wait), so time has moved since any deadline was set: its attempt first asks
  /// whether an enclosing deadline has passed (sync_declines_attempt). The first pass, the common
  /// case, pays nothing for that rule: a layer's later rounds go through the separate, out-of-line
  /// run_layer<true>.
  template <int Inlined, bool Again = false>
  KEVLAR_DETAIL_ALWAYS_INLINE void walk_layer(std::size_t index) {
    Layer layer(*this, index);  // one per layer, handed to each of its callbacks
    Step step = dispatch_start(layer, index);
    if (step == Step::run_inner) [[likely]] {  // the machine's next layer, or its attempt
      run_inner_part<Inlined, Again>(index);
      step = dispatch_inner_complete(layer, index);
    }
    while (step != Step::complete) {  // the outer layer's inner_complete, or deliver, next
      if (step == Step::run_inner) {  // another round (a repeater, or after a wait)
        run_inner_part<0, true>(index);
        step = dispatch_inner_complete(layer, index);
      } else {
        step = sync_wait(index, step);  // a wait, performed here
      }
    }
    finish_layer(layer, index);
  }
  /// What runs inside layer `index`: the next layer, or the user's function.
  template <int Inlined, bool Again>
  KEVLAR_DETAIL_ALWAYS_INLINE void run_inner_part(std::size_t index) {
    if (index + 1 < pipeline().size) {
      if constexpr (Inlined > 0) {
        walk_layer<Inlined - 1, Again>(index + 1);
      } else {
        run_layer<Again>(index + 1);
      }
    } else {
      run_attempt<Again>();
    }
  }
  /// The layers from `index` on: two levels inline (a later round: none), the deeper ones
  /// through this function again.
  template <bool Again = false>
  [[gnu::noinline]] void run_layer(std::size_t index) {
    if constexpr (Again) {
      walk_layer<0, true>(index);
    } else {
      walk_layer<1, false>(index);
    }
  }

  /// The user's function, once; in a later round (`Again`), unless an enclosing deadline has
  /// passed since the deadline was set (the outcome is then `operation_aborted`).
  template <bool Again = false>
  KEVLAR_DETAIL_ALWAYS_INLINE void run_attempt() {
    if constexpr (Again) {
      if (sync_declines_attempt()) return;  // counts the attempt when it may start
      SyncCall::invoke_operation();         // a later round: a call is no cost worth saving
    } else {
      count_attempt();
      invoke_inline();  // stores the outcome, the exception included
    }
  }

  void invoke_operation() override { invoke_inline(); }
  /// Calls the user's function and stores its outcome: inlined into the walk's first round.
  KEVLAR_DETAIL_ALWAYS_INLINE void invoke_inline() {
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
