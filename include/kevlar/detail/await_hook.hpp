// kevlar — internal: a strategy awaits a user's asynchronous hook (a coroutine) as one step of an
// execution: inline on a private io_context in a synchronous execution, spawned on the execution's
// executor with its cancellation slot in an asynchronous one.
#pragma once

#include <kevlar/detail/run_to_completion.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/error_code.hpp>

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace kevlar::detail {

/// How an awaited hook ended, kept in the strategy's frame. Trivially constructible and
/// destructible, and written by await_hook before it is read: a frame that never awaits a hook
/// pays nothing for it. A hook's exception goes to the execution's outcome (as a synchronous
/// hook's would), not here.
struct HookEnd {
  bool failed;  ///< the hook threw (or was cancelled): the outcome holds its exception
};

/// An awaited hook failed and its exception is the outcome. If the execution was cancelled
/// meanwhile and that exception is a cancellation (the cancellation reached what the hook
/// awaited), the outcome becomes `operation_aborted`, as any cancelled wait's does. Every
/// strategy with an awaited hook applies this one rule.
inline void report_cancelled_hook(Layer& layer) noexcept {
  if (cancelled_meanwhile(layer) && layer.outcome().is_cancellation()) {
    layer.outcome().set_error(boost::asio::error::operation_aborted);
  }
}

/// Runs `hook` with every cancellation type let through and Asio's throw-if-cancelled net on (a
/// cancellation that arrives while the hook awaits something deaf to it still stops the hook at
/// its next co_await), then turns that net off before returning: co_spawn's own last step (a post
/// after the hook returned) must not throw the cancellation out of the executor's run().
template <class R>
boost::asio::awaitable<R> guarded_hook(boost::asio::awaitable<R> hook) {
  co_await boost::asio::this_coro::reset_cancellation_state(
      boost::asio::enable_total_cancellation());
  std::exception_ptr failure;
  if constexpr (std::is_void_v<R>) {
    try {
      co_await std::move(hook);
    } catch (...) {
      failure = std::current_exception();
    }
    co_await boost::asio::this_coro::throw_if_cancelled(false);
    if (failure) std::rethrow_exception(failure);
  } else {
    std::optional<R> value;
    try {
      value.emplace(co_await std::move(hook));
    } catch (...) {
      failure = std::current_exception();
    }
    co_await boost::asio::this_coro::throw_if_cancelled(false);
    if (failure) std::rethrow_exception(failure);
    co_return std::move(*value);
  }
}

/// Records how a hook ended: its exception into the outcome, its value through `on_value`.
template <class R, class OnValue>
struct HookRecorder {
  HookEnd* end;
  OutcomeRef outcome;
  OnValue on_value;

  void operator()(std::exception_ptr ep) requires std::is_void_v<R> { finish(std::move(ep)); }
  template <class V>
  requires(!std::is_void_v<R> && std::is_convertible_v<V &&, R>)
  void operator()(std::exception_ptr ep, V&& v) {
    if (!ep) {
      try {  // a throwing copy becomes the outcome, as in a synchronous execution
        on_value(R(std::forward<V>(v)));
      } catch (...) {
        ep = std::current_exception();
      }
    }
    finish(std::move(ep));
  }
  void finish(std::exception_ptr ep) {
    end->failed = ep != nullptr;
    if (ep) outcome.set_exception(std::move(ep));
  }
};

/// The completion of an awaited hook: it carries the execution's cancellation slot (so the
/// caller's cancellation, or a timeout outside, reaches what the hook awaits) and no executor of
/// its own (so co_spawn forwards a cancellation inline, not through a dispatch that could outlive
/// the coroutine); it completes on the execution's executor, co_spawn's default, and resumes the
/// execution by a post, once the coroutine has finished.
template <class R, class OnValue>
struct HookDone {
  using cancellation_slot_type = boost::asio::cancellation_slot;
  HookRecorder<R, OnValue> record;
  WaitHandler resume;
  boost::asio::any_io_executor executor;
  boost::asio::cancellation_slot cancellation;

  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
    return cancellation;
  }
  template <class... V>
  void operator()(std::exception_ptr ep, V&&... v) {
    record(std::move(ep), std::forward<V>(v)...);
    boost::asio::post(executor, [h = std::move(resume)]() mutable {
      std::move(h)(boost::system::error_code());
    });
  }
};

/// Awaits `hook` as a step of `layer`'s execution. When it ends, `end.failed` tells whether it
/// threw (its exception is then the execution's outcome); otherwise `on_value(R)` received its
/// result (for a non-void R). `end` lives in the strategy's frame.
/// - Synchronous execution: runs the hook to completion on a private io_context and returns
///   false (carry on at once).
/// - Asynchronous execution: spawns it on the execution's executor with the execution's
///   cancellation slot and returns true: the strategy returns Step::suspend, and its
///   on_wait_complete is called once the hook ended.
/// Throws what spawning throws (nothing is then pending).
template <class R, class OnValue>
bool await_hook(Layer& layer, boost::asio::awaitable<R> hook, HookEnd& end, OnValue on_value) {
  end.failed = false;
  HookRecorder<R, OnValue> record{&end, layer.outcome(), std::move(on_value)};
  if (layer.synchronous()) {
    run_to_completion(std::move(hook), std::move(record));
    return false;
  }
  auto ex = layer.executor();
  boost::asio::co_spawn(ex, guarded_hook(std::move(hook)),
                        HookDone<R, OnValue>{std::move(record), layer.wait_handler(), ex,
                                             layer.cancellation_slot()});
  return true;
}

/// await_hook for a hook without a value.
inline bool await_hook(Layer& layer, boost::asio::awaitable<void> hook, HookEnd& end) {
  return await_hook(layer, std::move(hook), end, [] {});
}

}  // namespace kevlar::detail
