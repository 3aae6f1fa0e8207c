// kevlar — the one interface every strategy, built-in or user-defined, implements: Strategy, and
// BasicStrategy for a strategy with a typed per-execution frame. What a strategy returns (Step) is
// in <kevlar/step.hpp>, its handle on an execution (Layer) in <kevlar/layer.hpp>.
#pragma once

#include <kevlar/layer.hpp>
#include <kevlar/step.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>

namespace kevlar {

/// The interface of every strategy. A strategy instance serves every execution of every shield it
/// is part of, concurrently: per-execution data lives in the Layer's frame, shared state in the
/// instance (and must be thread-safe).
///
/// The engine calls, for each execution that reaches this strategy:
/// 1. on_start once; then, each time the strategy returns
/// 2. Step::run_inner -> on_inner_complete when the inner part finished,
///    Step::wait_until, Step::queue, Layer::await -> on_wait_complete when the wait, the queue
///    or the coroutine finished,
///    Step::suspend after Layer::start_attempt -> on_attempt_complete as each attempt finishes,
///    Step::complete -> on_finish, and the outcome moves outwards;
/// 3. on_finish exactly once, also when the execution is abandoned (its executor was destroyed
///    with a step pending).
/// An exception thrown by on_start, on_inner_complete or on_wait_complete becomes the outcome and
/// completes this position (the strategy's on_finish still runs).
///
/// Zero Step::run_inner is a short-circuit (a rejection), one a decorator, several a repeater;
/// Layer::start_attempt runs several inner attempts at once (a hedge).
class Strategy {
 public:
  virtual ~Strategy() = default;

  /// A one-line description used by Shield::describe(), e.g. `Retry(3, constant 1s)`.
  [[nodiscard]] virtual std::string describe() const = 0;
  /// Static facts about the strategy; read once when a shield is built.
  [[nodiscard]] virtual StrategyTraits traits() const noexcept { return {}; }

  /// The execution reached this strategy.
  virtual Step on_start(Layer& layer) = 0;
  /// The inner part of the pipeline completed; its outcome is layer.outcome().
  virtual Step on_inner_complete(Layer& layer) {
    (void)layer;
    return Step::complete;
  }
  /// A wait the strategy asked for completed (`operation_aborted` if it was cancelled).
  virtual Step on_wait_complete(Layer& layer, const boost::system::error_code& ec) {
    (void)layer;
    (void)ec;
    return Step::complete;
  }
  /// Attempt `attempt` (Layer::start_attempt's id) completed; its outcome is now layer.outcome()
  /// (it replaces whatever was there). Return Step::suspend to wait for more, Step::complete to
  /// finish with this outcome (or one set on it).
  virtual Step on_attempt_complete(Layer& layer, std::uint32_t attempt) {
    (void)layer;
    (void)attempt;
    return Step::complete;
  }
  /// This position of the execution ended (completed or abandoned); release the frame.
  virtual void on_finish(Layer& layer) noexcept { (void)layer; }
};

}  // namespace kevlar

#include <kevlar/detail/layer_hooks.hpp>

namespace kevlar {

/// A strategy whose per-execution state is a typed `Frame`: the base constructs it
/// (value-initialised) in the layer's storage before the first callback, hands `Frame&` to every
/// callback, and destroys it after the last, also when the execution is abandoned. The strategy
/// never touches raw storage, and no frame outlives its execution.
///
/// `Derived` (CRTP) defines, as public non-virtual members, the callbacks it needs; the others
/// default as Strategy's do:
/// ```
/// Step start(Layer&, Frame&);                                     // required: on_start
/// Step inner_complete(Layer&, Frame&);                            // on_inner_complete
/// Step wait_complete(Layer&, Frame&, const error_code&);          // on_wait_complete
/// Step attempt_complete(Layer&, Frame&, std::uint32_t attempt);   // on_attempt_complete
/// void finish(Layer&, Frame&) noexcept;                           // on_finish, before ~Frame
/// StrategyTraits strategy_traits() const noexcept;                // traits(); see frame_size
/// ```
/// The calls are static (no virtual call beyond the engine's own). `Frame` must be
/// default-constructible, nothrow-destructible and not over-aligned; where the strategy's
/// callbacks are defined, it must be a complete type. An empty, trivial `Frame` (a stateless
/// strategy's) takes no storage in the execution: every callback receives one shared instance.
template <class Derived, class FrameT>
class BasicStrategy : public Strategy {
  static_assert(std::is_default_constructible_v<FrameT> && std::is_nothrow_destructible_v<FrameT>,
                "a strategy frame is constructed and destroyed by kevlar");
  static_assert(alignof(FrameT) <= alignof(std::max_align_t), "over-aligned strategy frame");

 public:
  /// The frame type, visible to Derived as `Frame`.
  using Frame = FrameT;

  [[nodiscard]] StrategyTraits traits() const noexcept final {
    StrategyTraits t = derived().strategy_traits();
    // Room behind the frame that some instances ask for (StrategyTraits::frame_size) is kept.
    if constexpr (stateless) {
      t.frame_size = 0;
    } else if (t.frame_size < sizeof(Frame)) {
      t.frame_size = sizeof(Frame);
    }
    // The engine skips a callback Derived leaves to the default (and that has no frame to end).
    // Set outright: on_inner_complete and on_finish are this class's, final, whatever Derived's
    // strategy_traits() said.
    t.needs_inner_complete = !keeps_default_inner_complete();
    // Derived's strategy_traits() may clear needs_finish for an instance whose finish has nothing
    // to do (a retry without a budget), never for a frame that must be destroyed.
    t.needs_finish = !std::is_trivially_destructible_v<Frame> ||
                     (t.needs_finish && !keeps_default_finish());
    return t;
  }
  Step on_start(Layer& layer) final {
    if constexpr (stateless) {
      return derived().start(layer, frame_of(layer));
    } else {
      Frame& f = *::new (layer.frame()) Frame();
      return derived().start(layer, f);
    }
  }
  Step on_inner_complete(Layer& layer) final {
    return derived().inner_complete(layer, frame_of(layer));
  }
  Step on_wait_complete(Layer& layer, const boost::system::error_code& ec) final {
    return derived().wait_complete(layer, frame_of(layer), ec);
  }
  Step on_attempt_complete(Layer& layer, std::uint32_t attempt) final {
    return derived().attempt_complete(layer, frame_of(layer), attempt);
  }
  void on_finish(Layer& layer) noexcept final {
    Frame& f = frame_of(layer);
    derived().finish(layer, f);
    if constexpr (!stateless) f.~Frame();
  }

  // The defaults, hidden by Derived's own.
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept { return {}; }
  Step inner_complete(Layer&, Frame&) { return Step::complete; }
  Step wait_complete(Layer&, Frame&, const boost::system::error_code&) { return Step::complete; }
  Step attempt_complete(Layer&, Frame&, std::uint32_t) { return Step::complete; }
  void finish(Layer&, Frame&) noexcept {}

 protected:
  BasicStrategy() = default;

 private:
  /// An empty, trivial frame: no storage in the execution, one shared instance (it has no bytes
  /// for concurrent executions to share).
  static constexpr bool stateless = std::is_empty_v<FrameT> &&
                                    std::is_trivially_default_constructible_v<FrameT> &&
                                    std::is_trivially_destructible_v<FrameT>;
  static inline FrameT shared_frame_{};
  static Frame& frame_of(Layer& layer) noexcept {
    if constexpr (stateless) {
      (void)layer;
      return shared_frame_;
    } else {
      return layer.frame_as<Frame>();
    }
  }

  /// Derived declares no `inner_complete`, `finish` of its own: naming one through Derived
  /// finds this class's default.
  static constexpr bool keeps_default_inner_complete() noexcept {
    if constexpr (requires { &Derived::inner_complete; }) {
      return std::is_same_v<decltype(&Derived::inner_complete),
                            Step (BasicStrategy::*)(Layer&, Frame&)>;
    } else {
      return false;
    }
  }
  static constexpr bool keeps_default_finish() noexcept {
    if constexpr (requires { &Derived::finish; }) {
      return std::is_same_v<decltype(&Derived::finish),
                            void (BasicStrategy::*)(Layer&, Frame&) noexcept>;
    } else {
      return false;
    }
  }

  Derived& derived() noexcept { return static_cast<Derived&>(*this); }
  const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }
};

}  // namespace kevlar

#include <kevlar/detail/dispatch.hpp>
