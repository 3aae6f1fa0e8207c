// kevlar — internal: CallBase's dispatchers of the strategies' callbacks, inline where Layer is
// complete, so that the asynchronous machine (src/engine.cpp) and a synchronous execution's walk
// (SyncCall::run) both inline them in optimised builds. Included by <kevlar/strategy.hpp>.
#pragma once

#include <kevlar/strategy.hpp>

#include <exception>

namespace kevlar {

namespace detail {

// CallBase's dispatchers (detail/engine.hpp): here, where Layer is complete, so that the
// asynchronous machine (src/engine.cpp) and a synchronous execution's walk (SyncCall::run) both
// inline them in optimised builds (KEVLAR_DETAIL_ALWAYS_INLINE).

inline Step CallBase::dispatch_start(std::size_t index) {
  Layer layer(*this, index);
  return dispatch_start(layer, index);
}

inline Step CallBase::dispatch_inner_complete(std::size_t index) {
  // No hook: the strategy keeps Strategy's default, which completes the layer as it is.
  if (layers_[index].inner_complete == nullptr) return Step::complete;
  Layer layer(*this, index);
  return dispatch_inner_complete(layer, index);
}

inline void CallBase::finish_layer(std::size_t index) noexcept {
  if (layers_[index].finish != nullptr) {  // none: Strategy's default, which does nothing
    Layer layer(*this, index);
    finish_layer(layer, index);
  } else {
    end_inner_cancellation(index);
  }
}

inline Step CallBase::dispatch_start(Layer& layer, std::size_t index) {
  try {
    return layers_[index].strategy->on_start(layer);
  } catch (...) {
    return fail_layer(index, std::current_exception());
  }
}

inline Step CallBase::dispatch_inner_complete(Layer& layer, std::size_t index) {
  const PipelineLayer& entry = layers_[index];
  // No hook: the strategy keeps Strategy's default, which completes the layer as it is.
  if (entry.inner_complete == nullptr) return Step::complete;
  try {
    return entry.inner_complete(*entry.strategy, layer);
  } catch (...) {
    return fail_layer(index, std::current_exception());
  }
}

inline void CallBase::finish_layer(Layer& layer, std::size_t index) noexcept {
  const PipelineLayer& entry = layers_[index];
  if (entry.finish != nullptr) {  // none: Strategy's default, which does nothing
    entry.finish(*entry.strategy, layer);
  }
  end_inner_cancellation(index);
}

}  // namespace detail

}  // namespace kevlar
