// kevlar — the concurrency limit strategy: interlocked permits, queued callers woken by the
// unpaired semaphore.
#pragma once

#include <kevlar/basic_shield.hpp>
#include <kevlar/context.hpp>
#include <kevlar/error.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/limiter_ledger.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/permit.hpp>
#include <kevlar/queue_timeout.hpp>
#include <kevlar/queue_wait.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kevlar {

/// A concurrency limit's accounting changed: a call took a permit (at once or after queueing),
/// returned it, or was rejected. Joining or leaving the queue is not reported on its own. An
/// event (Layer::emit, Observer).
struct LimiterStateChanged {
  static constexpr std::string_view kevlar_event = "LimiterStateChanged";
  std::uint32_t running = 0;  ///< permits in use
  std::uint32_t queued = 0;   ///< callers waiting for a permit
};

/// What the rejection hooks receive.
struct ConcurrencyLimitRejectedEvent {
  std::uint32_t max_concurrency;
  std::uint32_t max_queue;
  std::size_t strategy_index;  ///< position of the limiter in the pipeline (0: outermost)
  Context& context;            ///< the rejected execution's context (do not keep it)
  /// Why: `errc::concurrency_limit_exceeded` (no permit and no queue place, or displaced from the
  /// queue by a call of higher priority) or `errc::queue_timeout` (waited its longest).
  errc reason = errc::concurrency_limit_exceeded;
};

/// Options of Shield::concurrency_limit. Defaults follow Kevlar.
struct ConcurrencyLimitOptions {
  /// Calls allowed to run at once (1 .. LimiterLedger::max_count).
  int max_concurrency = 10;
  /// Calls allowed to wait for a permit (0 .. LimiterLedger::max_count); 0 rejects as soon as
  /// every permit is in use.
  int max_queue = 0;
  /// Runs for each rejection, before the rejection becomes the outcome. A function is called at
  /// once; a coroutine (Hook) is awaited: in an asynchronous execution it runs on the execution's
  /// executor, a synchronous execution runs it to completion on a private io_context. An
  /// exception either form throws replaces the rejection.
  Hook<void(const ConcurrencyLimitRejectedEvent&)> on_rejected;
  /// The priority of a call that finds no permit free (called then, before it queues or is
  /// rejected): its result becomes the context's priority (Context::priority()). Empty (the
  /// default): the context's priority as the caller set it (CallOptions::priority, 0 if not).
  /// Higher is served first; a call of higher priority than the newest of the lowest queued ones
  /// takes its place in a full queue. It runs each time the execution finds no permit (again for
  /// a retry's next attempt, or at a second limiter) and sees the context's priority as it is
  /// then, its own last answer included. An exception it throws fails the call.
  std::function<std::int32_t(const Context&)> priority_generator;
  /// How long a queued call may wait before it fails with `errc::queue_timeout` (a rejection:
  /// the Rejected event, the hooks): none (the default), fixed or adaptive (CoDel). With one, an
  /// asynchronous execution needs an executor (StrategyTraits::needs_executor).
  QueueTimeout queue_timeout;
};

/// Running, queued and free permits, read from one atomic load (always coherent).
struct ConcurrencyLimitState {
  std::uint32_t running = 0;    ///< permits in use (including grants on their way to a waiter)
  std::uint32_t queued = 0;     ///< callers waiting for a permit
  std::uint32_t available = 0;  ///< permits free to take
  bool closed = false;
};

namespace detail {

/// A concurrency limit's per-execution state, in its layer's frame. The permit the execution
/// holds goes back with the frame, however the execution ends. A limiter with a queue timeout
/// keeps the queued call's deadline behind the frame (detail::queue_wait_deadline), so that the
/// frame of every other limiter stays 16 bytes.
struct LimiterFrame {
  LimiterFrame() noexcept = default;
  LimiterFrame(const LimiterFrame&) = delete;
  LimiterFrame& operator=(const LimiterFrame&) = delete;
  ~LimiterFrame() {
    if (queue_deadline) [[unlikely]] {
      end_queue_deadline();
    }
  }
  /// Disarms and destroys the queue deadline behind the frame (out of line).
  void end_queue_deadline() noexcept;

  Permit<QueueSemaphore<LimiterLedger>> permit;
  bool rejecting = false;       ///< rejected; the asynchronous rejection hook is running
  bool queue_deadline = false;  ///< a QueueWaitDeadline lives behind the frame
};

}  // namespace detail

/// Caps how many calls run at once (`max_concurrency`) and how many may wait (`max_queue`).
///
/// Capacity is max_concurrency + max_queue; a call beyond it fails at once with
/// `errc::concurrency_limit_exceeded`, without waiting, allocating or taking a lock. A call that
/// finds a permit free takes it with one CAS on the ledger word (no lock, no allocation, no
/// executor hop) and gives it back with one CAS when the inner part completes (success or
/// failure). Otherwise it queues on the UnpairedSemaphore (by priority, FIFO within one): the
/// completing call hands its permit straight to the first waiter, which resumes on its own executor
/// (never inside the releaser). A newcomer never takes a permit while someone waits.
///
/// Priorities: a queued call waits with its context's priority (CallOptions::priority, or
/// ConcurrencyLimitOptions::priority_generator): higher priorities are served first, equal ones
/// in arrival order, and a call that finds the queue full takes the place of the newest call of
/// the lowest priority if that is lower than its own: the displaced call fails with
/// `errc::concurrency_limit_exceeded` (a rejection: event and hooks), as a call turned away
/// from a full queue does. Queue-wait timeouts (ConcurrencyLimitOptions::queue_timeout) end a
/// wait with `errc::queue_timeout`, in asynchronous and synchronous executions alike; a grant
/// that races the timeout or a displacement wins or loses as a whole (the permit is neither lost
/// nor doubled: a call granted as its queue deadline passes in a synchronous execution hands the
/// permit on and times out).
///
/// Cancellation: a queued asynchronous call honours terminal, partial and total cancellation:
/// it leaves the queue (its place is freed exactly once), never runs, and completes with
/// `operation_aborted` — a cancellation, not a rejection (no hooks). A cancellation racing the
/// grant resolves once either way: if the grant won, the call runs. A synchronous execute queued
/// here blocks its thread in the same queue until it gets a permit, its stop token is requested,
/// the context's deadline (an outer timeout's budget) passes, or the limiter is closed; the stop
/// and the deadline leave the queue as a cancellation does (`operation_aborted`, which the
/// timeout reports as `errc::timeout`), and a grant that arrives as the deadline passes is handed
/// on to the next waiter: the call never runs past its deadline.
///
/// close() fails queued callers with `errc::closed` and refuses new ones; permits held keep
/// working. Destroying the limiter closes it. An executor destroyed with a grant in flight returns
/// the permit.
///
/// One instance is one set of permits: every shield containing it shares them (it is stateful;
/// it may appear once per chain). Thread-safety: any number of concurrent executions, on any
/// threads and executors.
class ConcurrencyLimitStrategy final
    : public BasicStrategy<ConcurrencyLimitStrategy, detail::LimiterFrame> {
 public:
  /// Validates `options` (std::invalid_argument naming the option).
  explicit ConcurrencyLimitStrategy(ConcurrencyLimitOptions options);
  /// Creates a limiter to add with Shield::use (keep the pointer to observe or close it).
  [[nodiscard]] static std::shared_ptr<ConcurrencyLimitStrategy> create(
      ConcurrencyLimitOptions options) {
    return std::make_shared<ConcurrencyLimitStrategy>(std::move(options));
  }

  [[nodiscard]] std::string describe() const override;
  // BasicStrategy's callbacks, called by the engine on the execution's thread.
  /// Proactive and stateful (one instance per chain).
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Takes a permit (lock-free) and runs the inner part, queues the call (asynchronous: a
  /// suspended wait cancelled through the caller's slot; synchronous: a blocking wait), or rejects
  /// it with `errc::concurrency_limit_exceeded`.
  Step start(Layer& layer, Frame& f);
  /// Returns the permit; the outcome passes unchanged.
  Step inner_complete(Layer& layer, Frame& f);
  /// A queue wait ended: the permit was granted, or the call was cancelled (`operation_aborted`),
  /// closed (`errc::closed`) or rejected; also the end of an asynchronous rejection hook.
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);

  /// {running, queued, available, closed} from one load. Thread-safe. Inline: a caller that reads
  /// one field pays for that field only.
  [[nodiscard]] ConcurrencyLimitState state() const noexcept {
    const LimiterLedger::Counts c = semaphore_.ledger().counts();
    const std::uint32_t limit = semaphore_.ledger().limit();
    return {c.in_use, c.queued, c.in_use < limit ? limit - c.in_use : 0, c.closed};
  }
  /// The maximum concurrency now (set_max_concurrency changes it); state().running exceeds it for
  /// a while after a shrink, until the calls above it finish. Thread-safe.
  [[nodiscard]] std::uint32_t max_concurrency() const noexcept {
    return semaphore_.ledger().limit();
  }
  /// Changes the maximum concurrency at run time: 1 to LimiterLedger::max_count
  /// (std::invalid_argument otherwise, nothing changed). Growth grants queued calls at once,
  /// first in queue order, up to the new room (they resume on their executors, as after a release);
  /// a shrink stops no running call: permits above the new limit retire as their calls finish, and
  /// no queued call is granted until fewer run than the limit. The queue limit and the queue's
  /// order are unchanged, and no permit is lost or doubled when a change races grants, releases and
  /// cancellations. A call admitted lock-free while the change is made may still count against
  /// the limit it read, so running never exceeds the largest limit set. Thread-safe: admission
  /// takes no lock for it; the change takes the queue's lock once.
  void set_max_concurrency(int max_concurrency);
  /// Fails every queued call with `errc::closed` and refuses new ones. Thread-safe, idempotent.
  void close() noexcept { semaphore_.close(); }
  [[nodiscard]] const ConcurrencyLimitOptions& options() const noexcept { return options_; }

 private:
  /// No permit and no queue place (or closed): the rejection, or `errc::closed`. Out of line.
  Step refuse(Layer& layer);
  Step reject(Layer& layer, errc reason = errc::concurrency_limit_exceeded);
  /// No permit free: the call's priority, then a displacement, a queue place or a rejection.
  Step contend(Layer& layer, Frame& f);
  void emit_state(Layer& layer) const noexcept;
  ConcurrencyLimitOptions options_;
  detail::QueueTimeoutPolicy queue_timeout_;
  QueueSemaphore<LimiterLedger> semaphore_;
};

/// A concurrency limit: at most `max_concurrency` calls run at once and at most `max_queue` wait.
/// Add it with BasicShield::use or with (`kevlar::Shield::concurrency_limit` is the fluent form);
/// keep the pointer to read its state or close it.
[[nodiscard]] std::shared_ptr<ConcurrencyLimitStrategy> concurrency_limit(int max_concurrency,
                                                                          int max_queue = 0);
/// A concurrency limit configured by `options` (std::invalid_argument names an invalid option).
[[nodiscard]] std::shared_ptr<ConcurrencyLimitStrategy> concurrency_limit(
    ConcurrencyLimitOptions options);

}  // namespace kevlar
