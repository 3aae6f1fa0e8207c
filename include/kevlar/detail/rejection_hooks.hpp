// kevlar — internal: the rejection-hook contract the two limiters (rate limit, concurrency limit)
// share.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <optional>
#include <utility>

namespace kevlar::detail {

/// Runs a limiter's rejection hook, once the strategy has emitted its Rejected event, then the
/// rejection `rejection` (carrying `retry_after`) becomes the outcome.
///
/// An exception the hook throws replaces the rejection. One thrown by a function hook leaves this
/// function (the engine makes it the outcome). Without a coroutine hook the outcome is set and the
/// result is Step::complete. Otherwise the result awaits it (Layer::await), after calling
/// `suspending()` (the strategy marks its frame): when the coroutine ends, its exception or else
/// the rejection is the outcome, and the strategy's on_wait_complete, seeing its mark, returns
/// Step::complete. The strategy's frame keeps nothing else for the hook.
template <class Event, class Suspending>
Step run_rejection_hooks(Layer& layer, const Event& event,
                         const Hook<void(const Event&)>& on_rejected,
                         const boost::system::error_code& rejection,
                         std::optional<Clock::duration> retry_after, Suspending&& suspending) {
  if (on_rejected.is_function()) on_rejected.function()(event);
  if (!on_rejected.is_coroutine()) {
    layer.outcome().set_rejection(rejection, retry_after);
    return Step::complete;
  }
  Step step = layer.await(on_rejected.coroutine()(event),
                          [outcome = layer.outcome(), rejection, retry_after]() mutable {
                            outcome.set_rejection(rejection, retry_after);
                          });
  std::forward<Suspending>(suspending)();
  return step;
}

}  // namespace kevlar::detail
