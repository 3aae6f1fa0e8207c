// kevlar — internal: a pipeline as the engine sees it (its layers, their frames and hooks), and
// the sizes an execution of it keeps.
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

namespace kevlar {

class Layer;
class Strategy;
class Step;

namespace detail {

class ObserverSet;

/// A layer's call of Strategy::on_inner_complete, Strategy::on_finish (see PipelineLayer).
using InnerCompleteHook = Step (*)(Strategy& strategy, Layer& layer);
/// See InnerCompleteHook.
using FinishHook = void (*)(Strategy& strategy, Layer& layer) noexcept;
/// The virtual call `strategy.on_inner_complete(layer)`: the hook of a strategy whose class the
/// pipeline cannot see through.
Step call_on_inner_complete(Strategy& strategy, Layer& layer);
/// The virtual call `strategy.on_finish(layer)`, as call_on_inner_complete.
void call_on_finish(Strategy& strategy, Layer& layer) noexcept;

/// One position of a pipeline, as the engine sees it.
struct PipelineLayer {
  Strategy* strategy;
  const Clause* clause;
  std::size_t frame_offset;
  bool judges_results;  ///< clause->judges_results(), read on every success without a hop
  bool observer_layer = false;   ///< kevlar's attempt observer layer, not a strategy
  /// What the shield's observers want (the filter of ObserverSet::interests, EventKinds::mask),
  /// one load away; 0: unobserved.
  std::uint32_t interests = 0;
  /// How the engine calls the strategy's on_inner_complete and on_finish: a virtual call by
  /// default, a direct one for a final class (Shield::use), nullptr for a callback the strategy
  /// leaves to Strategy's default, which the engine then skips (StrategyTraits::needs_*).
  InnerCompleteHook inner_complete = &call_on_inner_complete;
  FinishHook finish = &call_on_finish;
};

/// The immutable description of a pipeline an execution runs.
struct PipelineView {
  const PipelineLayer* layers = nullptr;
  std::size_t size = 0;
  std::size_t frame_bytes = 0;  ///< per-execution scratch for all layers, max_align_t aligned
  const Clock* clock = nullptr;
  /// The shield's name (Shield::with_name), or nullptr: what Context::shield_name() reports.
  const std::string* name = nullptr;
  /// Some layer's StrategyTraits::needs_executor: refuse handlers without an executor.
  bool needs_executor = false;
  /// Some layer's StrategyTraits::asynchronous_only: refuse synchronous executions.
  bool asynchronous_only = false;
  /// One past the last layer that declares StrategyTraits::waits_in_queue (0: none). An
  /// asynchronous execution running the layers from `first` on keeps room for one embedded queue
  /// wait behind its frames (CallBase::queue_wait_storage) if `first` is below it: an attempt
  /// inside a hedge that sits inside the last waiting layer keeps none.
  std::size_t queue_waiters_end = 0;
  /// queue_wait_size if queue_waiters_end is not 0: the room of an execution a caller started.
  std::size_t queue_wait_bytes = 0;
  /// The shield's observers, or nullptr when nobody listens. Emission points test the layer's
  /// interests instead (PipelineLayer::interests). When one wants AttemptStarted, the last layer
  /// is kevlar's attempt observer.
  const std::shared_ptr<const ObserverSet>* observers = nullptr;
  /// An observer wants ExecutionFinished: the engine times each execution a caller started and
  /// emits it just before delivering (CallBase::observe_start, observe_finish).
  bool observes_executions = false;
  /// A synchronous execution goes straight to the walk (SyncCall::walk): the pipeline has a layer,
  /// none is asynchronous-only, nothing observes executions, and the layers' frames fit in
  /// sync_inline_frame_bytes. One test on Shield::execute's path instead of four.
  bool plain_synchronous = false;
};

/// The frame storage a synchronous execution keeps on its stack; a pipeline whose frames need more
/// takes the heap (FrameBuffer).
inline constexpr std::size_t sync_inline_frame_bytes = 256;

inline constexpr std::size_t no_layer = std::numeric_limits<std::size_t>::max();

/// Bytes an asynchronous execution keeps for one embedded queue wait
/// (detail/embedded_queue_wait.hpp checks that it fits), when a layer it runs may wait in a queue
/// (PipelineView::queue_waiters_end).
inline constexpr std::size_t queue_wait_size = 224;

/// The bytes an asynchronous execution of `pipeline` running the layers from `first` on (0 if a
/// caller started it) keeps behind itself: the layers' frames, then the room for an embedded
/// queue wait if one of those layers waits in a queue.
[[nodiscard]] inline std::size_t async_frame_bytes(const PipelineView& pipeline) noexcept {
  return pipeline.frame_bytes + pipeline.queue_wait_bytes;
}
[[nodiscard]] inline std::size_t async_frame_bytes(const PipelineView& pipeline,
                                                   std::size_t first) noexcept {
  return pipeline.frame_bytes + (first < pipeline.queue_waiters_end ? queue_wait_size : 0);
}

}  // namespace detail
}  // namespace kevlar
