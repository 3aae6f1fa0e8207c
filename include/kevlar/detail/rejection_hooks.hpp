// kevlar — internal: the rejection-hook contract the two limiters (rate limit, concurrency limit)
// share.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <functional>
#include <optional>
#include <utility>

namespace kevlar::detail {

/// Runs a limiter's rejection hooks in their documented order, once the strategy has emitted its
/// Rejected event: `on_rejected(event)`, then `on_rejected_async(event)` awaited, then the
/// rejection `rejection` (carrying `retry_after`) becomes the outcome.
///
/// An exception either hook throws replaces the rejection. One thrown by `on_rejected` leaves this
/// function (the engine makes it the outcome), so the asynchronous hook never runs. Without an
/// asynchronous hook the outcome is set and the result is Step::complete. Otherwise the result
/// awaits it (Layer::await), after calling `suspending()` (the strategy marks its frame): when the
/// hook ends, its exception or else the rejection is the outcome, and the strategy's
/// on_wait_complete, seeing its mark, returns Step::complete. The strategy's frame keeps nothing
/// else for the hook.
template <class Event, class Suspending>
Step run_rejection_hooks(
    Layer& layer, const Event& event, const std::function<void(const Event&)>& on_rejected,
    const std::function<boost::asio::awaitable<void>(Event)>& on_rejected_async,
    const boost::system::error_code& rejection, std::optional<Clock::duration> retry_after,
    Suspending&& suspending) {
  if (on_rejected) on_rejected(event);
  if (!on_rejected_async) {
    layer.outcome().set_rejection(rejection, retry_after);
    return Step::complete;
  }
  Step step = layer.await(on_rejected_async(event),
                          [outcome = layer.outcome(), rejection, retry_after]() mutable {
                            outcome.set_rejection(rejection, retry_after);
                          });
  std::forward<Suspending>(suspending)();
  return step;
}

}  // namespace kevlar::detail
