// kevlar — the Timeout strategy.
#pragma once

#include <kevlar/basic_shield.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/execution_context.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kevlar {

/// A timeout's budget elapsed and it reports `errc::timeout` (before its on_timeout hook): an
/// event (Layer::emit, Observer).
struct TimeoutFired {
  static constexpr std::string_view kevlar_event = "TimeoutFired";
  Clock::duration timeout{};  ///< the budget that elapsed
};

/// What a timeout hook receives.
struct TimeoutEvent {
  Clock::duration timeout;  ///< the budget that elapsed
  Context& context;         ///< the execution's context (do not keep it)
};

/// Options of Shield::timeout. Defaults follow Kevlar.
struct TimeoutOptions {
  /// The budget (> 0, <= max_timeout). Outside a retry it bounds the whole call; inside, each
  /// attempt.
  Clock::duration timeout = std::chrono::seconds(30);
  /// If set, called once per execution (at this position) to choose the budget instead of
  /// `timeout`; an invalid result (<= 0 or > max_timeout) fails that execution with
  /// std::invalid_argument.
  std::function<Clock::duration(Context&)> timeout_generator;
  /// Runs when this timeout expires, before the call completes with `errc::timeout` (Kevlar's
  /// OnTimeout). A function is called at once; a coroutine (Hook) is awaited: spawned on the
  /// execution's executor with its cancellation slot in an asynchronous execution, run to
  /// completion on a private io_context in a synchronous one. An exception either form throws
  /// becomes the outcome instead; if the caller's cancellation ends the coroutine, the call
  /// completes with `operation_aborted`. While it runs, the context still reports cancelled()
  /// (the timeout cancelled the inner part).
  Hook<void(const TimeoutEvent&)> on_timeout;

  /// The longest supported budget (Kevlar's: 2^32 - 2 ms, about 49.7 days).
  static constexpr Clock::duration max_timeout = kevlar::max_duration;
};

namespace detail {

/// A timeout's per-execution state, in its layer's frame.
struct TimeoutFrame {
  TimeoutFrame() noexcept {}  // `entry` is constructed only by an asynchronous execution, on arming
  ~TimeoutFrame() {}
  TimeoutFrame(const TimeoutFrame&) = delete;
  TimeoutFrame& operator=(const TimeoutFrame&) = delete;

  union {
    DeadlineEntry entry;  // trivially destructible: nothing to end
  };
  // Written by start() before anything reads them, and left unset here: durations since the
  // clock's epoch and an index, whose default initialisation stores nothing (a time_point's would
  // store zero in every call's frame). The previous deadline is read only once `deadline_set`
  // was set.
  Clock::duration deadline_at;  ///< this timeout's deadline, since the clock's epoch
  Clock::duration previous_at;  ///< the context's deadline before this one, since the epoch
  std::size_t previous_owner;   ///< asynchronous executions: the layer that owned that deadline
  Clock::duration budget;       ///< the timeout this execution was given
  bool armed = false;           ///< `entry` is armed in the deadline queue
  bool deadline_set = false;    ///< the context's deadline is this timeout's until disarmed

  /// This timeout's deadline.
  [[nodiscard]] Clock::time_point deadline() const noexcept {
    return Clock::time_point(deadline_at);
  }
  /// The context's deadline before this one.
  [[nodiscard]] Clock::time_point previous_deadline() const noexcept {
    return Clock::time_point(previous_at);
  }
};

}  // namespace detail

/// Bounds the time the strategies inside it and the user's operation may take.
///
/// Asynchronous executions: expiry cancels the pending step through its cancellation slot
/// (terminal cancellation), so the operation really stops (a socket read or timer wait is
/// aborted, not abandoned); when it completes with `operation_aborted`, the call completes with
/// `errc::timeout`. The budget is also the context's deadline: once it has passed, no further
/// attempt starts, even before the expiry is delivered. No kernel timer is armed per call:
/// deadlines of one duration share one queue per execution context (arming and disarming are O(1)
/// list operations), woken at its earliest deadline. On the steady clock kevlar's deadline thread
/// (one per process) wakes the queues: nothing is created on the caller's context, which gets no
/// Asio reactor from a timeout. On another clock (a ManualClock), and on an io_context whose
/// concurrency hint turns its scheduler's lock off, one clock timer on the context wakes the queue;
/// it is not cancelled when a call finishes early while another follows, and once no deadline is
/// pending and no call came back, it is cancelled. Either way a pending deadline holds no work:
/// io_context::run() returns once the calls are done. Expiry is delivered on the execution's own
/// executor: with a multi-threaded io_context, run the calls on a strand, as for any Asio
/// per-operation cancellation. An asynchronous call whose completion handler has no associated
/// executor is refused before any strategy runs with `errc::executor_required`
/// (StrategyTraits::needs_executor): its expiry would race the operation.
///
/// Synchronous executions: cooperative. The budget becomes the context's deadline
/// (Context::cancelled() turns true when it passes, and kevlar's own waits end there); a
/// function that then fails with a cancellation (e.g. throws kevlar::Error(operation_aborted)
/// via Context::throw_if_cancelled) fails the call with `errc::timeout`.
///
/// Arbitration (Kevlar's rules): a cancellation by the caller (or by a timeout outside this one)
/// stays a cancellation and is never reported as a timeout; of equal nested timeouts the outermost
/// reports; a success or a non-cancellation failure that arrives after expiry passes through
/// unchanged.
///
/// Thread-safety: one instance serves any number of concurrent executions.
class TimeoutStrategy final : public BasicStrategy<TimeoutStrategy, detail::TimeoutFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit TimeoutStrategy(TimeoutOptions options);

  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks, called by the engine on the execution's thread.
  /// Proactive; needs the call's executor (the expiry is delivered there).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Sets the deadline (the context's, and in an asynchronous execution an entry of the deadline
  /// queue) and runs the inner part.
  Step start(Layer& layer, Frame& f);
  /// Disarms, then reports a cancellation this timeout caused as `errc::timeout`.
  Step inner_complete(Layer& layer, Frame& f);
  /// A coroutine on_timeout ended: its exception, or `errc::timeout`.
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);
  /// Disarms and restores the previous deadline (also when abandoned).
  void finish(Layer& layer, Frame& f) noexcept;

  [[nodiscard]] const TimeoutOptions& options() const noexcept { return options_; }

  /// Cancels the idle deadline timers kevlar keeps on `ctx` at once (deadlines on a clock other
  /// than the steady clock, or on an io_context without its scheduler's lock: other steady-clock
  /// deadlines keep no timer on the context). They are
  /// released by themselves shortly after the last call (a few passes of the executor's queue);
  /// this is for a caller that cannot wait for those passes. Thread-safe.
  static void release_idle_timers(boost::asio::execution_context& ctx) noexcept;

 private:
  /// inner_complete in an asynchronous execution (apart, so that the synchronous one saves no
  /// register).
  Step inner_complete_async(Layer& layer, Frame& f);
  /// The inner part failed: decides whether the failure is this timeout's expiry.
  Step judge_failure(Layer& layer, Frame& f, Clock::time_point previous);

  TimeoutOptions options_;
};

/// A timeout of `timeout`: outside a retry it bounds the whole call, inside it each attempt. Add it
/// with BasicShield::use or with (`kevlar::Shield::timeout` is the fluent form). Throws
/// std::invalid_argument for a budget out of range.
[[nodiscard]] std::shared_ptr<TimeoutStrategy> timeout(Clock::duration timeout);
/// A timeout configured by `options` (std::invalid_argument names an invalid option).
[[nodiscard]] std::shared_ptr<TimeoutStrategy> timeout(TimeoutOptions options);

}  // namespace kevlar
