// kevlar — internal: the rejection-hook contract the two limiters (rate limit, concurrency limit)
// share.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/run_to_completion.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/system/error_code.hpp>

#include <exception>
#include <functional>
#include <optional>
#include <utility>

namespace kevlar::detail {

/// Runs a limiter's rejection hooks in their documented order, once the strategy has emitted its
/// Rejected event: `on_rejected(event)`, then `on_rejected_async(event)` awaited, then the
/// rejection `rejection` (carrying `retry_after`) becomes the outcome.
///
/// An exception either hook throws replaces the rejection. One thrown by `on_rejected` leaves this
/// function (the engine makes it the outcome), so the asynchronous hook never runs. A synchronous
/// execution runs the asynchronous hook to completion on a private io_context. An asynchronous
/// execution spawns it on the execution's executor and returns Step::suspend, after calling
/// `suspending()` (the strategy marks its frame): when the hook ends, its exception or else the
/// rejection is written to the (suspended) execution's outcome, and the strategy's
/// on_wait_complete, seeing its mark, returns Step::complete. Otherwise the outcome is set and the
/// result is Step::complete. The strategy's frame keeps nothing for the hook.
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
  if (layer.synchronous()) {
    run_to_completion(on_rejected_async(event));  // its exception completes the layer
    layer.outcome().set_rejection(rejection, retry_after);
    return Step::complete;
  }
  std::forward<Suspending>(suspending)();
  auto ex = layer.executor();
  boost::asio::co_spawn(
      ex, on_rejected_async(event),
      boost::asio::bind_executor(ex, [outcome = layer.outcome(), rejection, retry_after,
                                      h = layer.wait_handler()](std::exception_ptr ep) mutable {
        if (ep) {
          outcome.set_exception(std::move(ep));
        } else {
          outcome.set_rejection(rejection, retry_after);
        }
        std::move(h)(boost::system::error_code());
      }));
  return Step::suspend;
}

}  // namespace kevlar::detail
