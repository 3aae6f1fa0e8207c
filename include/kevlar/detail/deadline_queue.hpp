// kevlar — internal: the shared deadline queue, the engine's service for per-execution deadlines
// (a timeout's expiry, a hedge's stagger): no kernel timer per execution.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/intrusive_list.hpp>
#include <kevlar/detail/spin_lock.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kevlar::detail {

class DeadlineQueue;

/// One armed deadline; lives in the frame of the layer that armed it (a timeout, a hedge).
struct DeadlineEntry : IntrusiveListHook<DeadlineEntry> {
  /// What an expiry does, on the execution's executor, if the execution still runs: by default
  /// (nullptr) it cancels what runs inside layer `index` (a timeout's expiry).
  using Fire = void (*)(CallBase& call, std::size_t index);

  enum class State : std::uint8_t { idle, armed, firing, fired };

  Clock::time_point deadline{};
  CallBase* call = nullptr;
  std::size_t index = 0;
  DeadlineQueue* queue = nullptr;
  /// Names this expiry to the job that delivers it (set when the entry starts firing). An entry's
  /// address alone cannot: once its execution ends, the same storage may hold another execution's
  /// entry, firing on another executor, by the time the stale job runs.
  std::uint64_t ticket = 0;
  Fire fire = nullptr;
  State state = State::idle;
};

/// The armed or the firing entries of a DeadlineQueue.
using DeadlineList = IntrusiveList<DeadlineEntry>;

/// The deadlines of one (execution context, clock, duration): they are armed in deadline order,
/// so arming and disarming are O(1) list operations under a small lock, with one wake-up
/// underneath for the earliest deadline. The wake-up is not cancelled when a call finishes early
/// (re-arming it would cost a syscall per call); it comes at the earliest deadline it was asked
/// for and is asked for again only if deadlines remain. When a deadline expires, the cancellation
/// is delivered on the execution's own executor, and only if the execution has not finished
/// meanwhile.
///
/// Where the wake-up comes from depends on the clock:
/// - the system's steady clock (Clock::steady()), on any context but an io_context whose
///   concurrency hint turns its scheduler's lock off: kevlar's deadline thread (one per process,
///   started by the first such deadline) sleeps until the earliest requested wake-up of every
///   queue and posts the expiries from there. Nothing is created on the caller's execution context:
///   an Asio reactor there (which any timer brings) would run an epoll_wait syscall on every pass
///   over the context's queue for the rest of its life, several times what a call costs on a loop
///   without I/O;
/// - any other clock (a ManualClock), or such an io_context: one clock timer on the executor of
///   the call that created the queue, without its strand (Asio's strands of the usual
///   executors) and without outstanding work: one caller's busy strand must not delay every other
///   caller's deadlines, nor its work keep the context running. When the queue empties and is
///   still empty once the engine has returned to its caller (a loop's next call, started from the
///   completion, arms again before that), a sweep job is posted to the timer's executor; if the
///   queue is still empty after two passes of that executor's queue (no posted call came back),
///   the sweep cancels the timer, so that an idle io_context's run() returns. A busy loop keeps
///   its timer and posts nothing.
class DeadlineQueue final : private ClockWaiter {
 public:
  DeadlineQueue(const Clock& clock, const boost::asio::any_io_executor& ex, bool ordered);
  ~DeadlineQueue();
  DeadlineQueue(const DeadlineQueue&) = delete;
  DeadlineQueue& operator=(const DeadlineQueue&) = delete;

  /// Arms `e` (its deadline, call and index are set).
  void arm(DeadlineEntry& e);
  /// Disarms `e` if it has not fired; returns true if it had fired (its cancellation was
  /// delivered). Safe to call for an entry in any state.
  bool disarm(DeadlineEntry& e) noexcept;
  /// Cancels the clock timer if no deadline is armed (lets io_context::run() return at once). A
  /// queue woken by the deadline thread has no timer on the context: nothing to do.
  void release_idle_timer() noexcept;
  /// The sweep job: releases the timer if the queue has stayed empty since the last pass.
  void sweep(bool second_pass) noexcept;
  /// Delivers the expiry of `e` if it is still the firing entry named by `ticket` (runs on the
  /// execution's executor). Propagates what the entry's Fire action throws (a completion handler
  /// it ran), as any handler's exception leaves the executor's run().
  void deliver(DeadlineEntry* e, std::uint64_t ticket);
  /// Destroys every pending operation (the execution context is shutting down). Once it returns,
  /// the deadline thread never reaches this queue again.
  void shutdown() noexcept;
  /// The deadline thread's wake-up (threaded queues): expires what is due and asks for the next
  /// wake-up if deadlines remain. Propagates what posting an expiry throws, after asking to be
  /// woken again a millisecond later.
  void wake();

 private:
  // ClockWaiter: the timer.
  [[nodiscard]] boost::asio::any_io_executor executor() const noexcept override { return ex_; }
  [[nodiscard]] boost::asio::cancellation_slot cancellation_slot() const noexcept override {
    return {};
  }
  void complete(const boost::system::error_code& ec) override;
  void abandon() noexcept override;

  /// Links `e` into the armed list at its place (the back, for deadlines of one duration).
  void link_armed(DeadlineEntry& e) noexcept;
  /// Makes sure a wake-up comes at `t` or earlier (under the lock).
  void arm_timer_locked(Clock::time_point t);
  /// Posts the expiry of every due entry and asks for the next wake-up (under the lock).
  void expire_locked();
  /// Whether a wake-up is on its way for timer_deadline_ or earlier (under the lock).
  [[nodiscard]] bool wake_pending_locked() const noexcept;
  /// Keeps armed_count_ equal to the length of the armed list (under the lock; read without it).
  void count_armed(int delta) noexcept {
    armed_count_.store(
        armed_count_.load(std::memory_order_relaxed) + static_cast<std::uint32_t>(delta),
        std::memory_order_relaxed);
  }
  /// DeferredChecks: the queue emptied during the entry point that has just returned; if it is
  /// still empty, start the sweep.
  static void check_idle(void* queue) noexcept;
  /// Posts the sweep job (without the lock); if posting fails, the timer is released when it
  /// fires, as release_idle_timer() would have done.
  void post_sweep(bool second_pass) noexcept;

  const Clock* clock_;
  boost::asio::any_io_executor ex_;
  bool ordered_;  ///< every deadline has the same duration: appending keeps the list sorted
  /// Woken by the deadline thread (the steady clock), not by a clock timer on the context.
  bool threaded_;
  /// Guards the lists and the timer state. A spin lock: arming and disarming, the sections every
  /// call takes it for, are a few pointer updates; the long sections (starting the timer's wait,
  /// posting expiries) run once per timer expiry, not per call.
  SpinLock lock_;
  DeadlineList armed_;                         ///< armed, earliest first
  std::atomic<std::uint32_t> armed_count_{0};  ///< entries in the armed list
  DeadlineList firing_;                        ///< expired, cancellation on its way
  std::unique_ptr<ClockTimer> timer_;
  /// A wake-up is on its way (the timer's wait, or the deadline thread's request) for
  /// timer_deadline_ or earlier.
  bool timer_waiting_ = false;
  /// Threaded queues: the deadline thread's generation (DeadlineThread::generation) when the
  /// request behind timer_waiting_ was made.
  std::uint32_t wake_generation_ = 0;
  bool sweep_pending_ = false;  ///< a sweep job is on its way
  bool shut_down_ = false;
  Clock::time_point timer_deadline_{};
  std::uint64_t last_ticket_ = 0;
};

/// Finds (or creates) the queue for an execution context, clock and duration (0: deadlines of
/// varying durations). Queues belong to an Asio service of the context and die with it.
[[nodiscard]] DeadlineQueue& deadline_queue_for(const boost::asio::any_io_executor& ex,
                                                const Clock& clock, Clock::duration duration);
/// The same for the execution `call`, found without building its executor when it runs on an
/// io_context's plain executor and this thread has met the queue before (the per-call case).
[[nodiscard]] DeadlineQueue& deadline_queue_for(const CallBase& call, const Clock& clock,
                                                Clock::duration duration);

/// DeadlineAction::resume: resumes the strategy at layer `index`, suspended on its attempts, as
/// its own wait's completion would (Strategy::on_wait_complete with success).
void resume_at_deadline(CallBase& call, std::size_t index);
/// DeadlineAction::cancel_wait: cancels the wait the strategy at layer `index` is in (its queue
/// wait, its timed wait), as a cancellation of the caller's would reach it, with nothing else
/// marked cancelled.
void cancel_wait_at_deadline(CallBase& call, std::size_t index);

/// Cancels the idle timers of every deadline queue of `ctx`.
void release_idle_deadline_timers(boost::asio::execution_context& ctx) noexcept;

}  // namespace kevlar::detail
