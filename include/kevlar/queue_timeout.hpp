// kevlar — QueueTimeout: how long a call may wait in a limiter's queue (the concurrency limit's,
// the rate limit's), fixed or adaptive (CoDel), and the per-call state that enforces it.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/layer.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

namespace kevlar {

/// How long a call may wait in a limiter's queue before it gives up with `errc::queue_timeout`
/// (ConcurrencyLimitOptions::queue_timeout, RateLimitOptions::queue_timeout). Three kinds:
///
/// - none (the default): a queued call waits until it is admitted, cancelled, displaced by a
///   call of higher priority, or until the context's deadline (an outer timeout's);
/// - fixed(max_wait): every call waits at most `max_wait`;
/// - adaptive(target, interval), CoDel as Facebook runs it: while the queue has been empty at
///   some moment of the last `interval`, a call may wait up to `interval`; once the queue has
///   stood (never emptied) for a whole `interval`, a call that has waited longer than twice
///   `target` is shed. A queue that drains now and then keeps serving everyone; a standing queue
///   serves fresh calls, whose callers are still there, and sheds the stale ones. Defaults:
///   target 5 ms, interval 100 ms.
///
/// A call's queue deadline is fixed when it joins the queue (for the adaptive kind: from when the
/// queue last became non-empty, which stays put while the call waits), and an earlier deadline of
/// the context (an outer timeout's) ends the wait first, as a cancellation.
struct QueueTimeout {
  enum class Kind : std::uint8_t { none, fixed, adaptive };
  Kind kind = Kind::none;
  /// fixed: the longest wait.
  Clock::duration max_wait{};
  /// adaptive: the standing delay that counts as overload (the shed age is twice this).
  Clock::duration target = std::chrono::milliseconds(5);
  /// adaptive: how long the queue must stand before stale calls are shed.
  Clock::duration interval = std::chrono::milliseconds(100);

  /// No queue timeout.
  [[nodiscard]] static constexpr QueueTimeout none() noexcept { return {}; }
  /// Every call waits at most `max_wait` (more than zero, at most kevlar::max_duration).
  [[nodiscard]] static constexpr QueueTimeout fixed(Clock::duration max_wait) noexcept {
    QueueTimeout t;
    t.kind = Kind::fixed;
    t.max_wait = max_wait;
    return t;
  }
  /// CoDel: shed calls older than 2 x `target` once the queue has stood for `interval` (both more
  /// than zero, at most kevlar::max_duration).
  [[nodiscard]] static constexpr QueueTimeout adaptive(
      Clock::duration target = std::chrono::milliseconds(5),
      Clock::duration interval = std::chrono::milliseconds(100)) noexcept {
    QueueTimeout t;
    t.kind = Kind::adaptive;
    t.target = target;
    t.interval = interval;
    return t;
  }
  [[nodiscard]] constexpr bool enabled() const noexcept { return kind != Kind::none; }
};

namespace detail {

/// Throws std::invalid_argument naming `owner` (e.g. "kevlar::ConcurrencyLimitOptions::") if
/// `timeout` holds a duration out of range.
void validate_queue_timeout(const QueueTimeout& timeout, const char* owner);

/// `fixed(250ms)`, `adaptive(5ms/100ms)`: for describe().
[[nodiscard]] std::string describe_queue_timeout(const QueueTimeout& timeout);

/// A limiter's side of its queue timeout: computes each queued call's deadline. For the adaptive
/// kind it remembers when the queue last became non-empty, as the calls that join it see it (a
/// call that finds nobody queued starts a new standing period). Thread-safe: one relaxed atomic.
class QueueTimeoutPolicy {
 public:
  explicit QueueTimeoutPolicy(const QueueTimeout& timeout) noexcept : timeout_(timeout) {}

  [[nodiscard]] bool enabled() const noexcept { return timeout_.enabled(); }
  [[nodiscard]] const QueueTimeout& options() const noexcept { return timeout_; }

  /// The deadline of a call that joins the queue at `now`, having found `queued` calls waiting.
  [[nodiscard]] Clock::time_point deadline(Clock::time_point now, std::uint32_t queued) noexcept;
  /// The duration every deadline of this policy shares (fixed), or zero (they vary): what the
  /// engine's deadline queue orders by (Layer::arm_deadline).
  [[nodiscard]] Clock::duration same_duration() const noexcept {
    return timeout_.kind == QueueTimeout::Kind::fixed ? timeout_.max_wait : Clock::duration::zero();
  }

 private:
  QueueTimeout timeout_;
  std::atomic<Clock::duration::rep> standing_since_{0};
};

/// One queued call's queue deadline, in the room a limiter's frame keeps behind itself: armed in
/// the engine's deadline service (asynchronous executions: its expiry cancels the wait the
/// limiter is in, DeadlineAction::cancel_wait), or lowering the context's deadline while the call
/// waits (synchronous executions: the blocking waits end at it).
class QueueWaitDeadline {
 public:
  QueueWaitDeadline() noexcept {}  // NOLINT(modernize-use-equals-default): leaves the union raw
  QueueWaitDeadline(const QueueWaitDeadline&) = delete;
  QueueWaitDeadline& operator=(const QueueWaitDeadline&) = delete;
  ~QueueWaitDeadline() {}  // NOLINT(modernize-use-equals-default): the frame calls drop() first

  /// The call starts waiting with its queue deadline `deadline`.
  void begin(Layer& layer, Clock::time_point deadline, Clock::duration same_duration);
  /// The wait ended (any way): disarms or restores. Returns true if the queue deadline ended it
  /// (the call timed out in the queue); false if it ended otherwise, or if an earlier deadline of
  /// the context was the one that ended it (an outer timeout's, which reports it itself).
  bool end(Layer& layer, bool aborted) noexcept;
  /// The execution ends while the call waits (it is abandoned): disarms. (A synchronous wait
  /// always ends through end().)
  void drop() noexcept;
  [[nodiscard]] bool active() const noexcept { return state_ != State::idle; }
  /// True once `now` has reached the queue deadline (whether or not its expiry has arrived).
  [[nodiscard]] bool expired(Clock::time_point now) const noexcept { return now >= deadline_; }

 private:
  enum class State : std::uint8_t { idle, armed, lowered };
  union {
    DeadlineSlot slot_;                      // armed
    detail::CallBase::SavedDeadline saved_;  // lowered
  };
  Clock::time_point deadline_{};
  State state_ = State::idle;
};

/// The offset, from a frame of type `Frame`, of the room a strategy keeps behind it (see
/// StrategyTraits::frame_size).
template <class Frame>
inline constexpr std::size_t frame_extension_offset = (sizeof(Frame) + alignof(std::max_align_t) -
                                                       1) /
                                                      alignof(std::max_align_t) *
                                                      alignof(std::max_align_t);

/// The QueueWaitDeadline behind `frame` (constructed by the limiter when its call queues).
template <class Frame>
[[nodiscard]] QueueWaitDeadline& queue_wait_deadline(Frame& frame) noexcept {
  return *std::launder(reinterpret_cast<QueueWaitDeadline*>(reinterpret_cast<std::byte*>(&frame) +
                                                            frame_extension_offset<Frame>));
}

}  // namespace detail
}  // namespace kevlar
