// kevlar — the time source of every strategy: a steady clock in production, a manual one in tests.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <vector>

namespace kevlar {

class ClockTimer;

/// Where strategies read the time and wait for it. Every delay, deadline and window in kevlar goes
/// through the Clock of the shield (Shield::with_clock), so a test can drive time by hand with a
/// ManualClock and never sleep.
///
/// Thread-safety: implementations must be safe to use from any number of threads at once.
class Clock {
 public:
  using duration = std::chrono::nanoseconds;
  /// Time points share std::chrono::steady_clock's epoch domain; a manual clock starts wherever it
  /// is told to. A clock's readings should stay within 2^61 ns (about 73 years) of the epoch: a
  /// strategy's wait (Step::wait_until) keeps a deadline further out as never.
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;

  virtual ~Clock() = default;

  /// The current time. Monotonic.
  [[nodiscard]] virtual time_point now() const noexcept = 0;

  /// The current time at a resolution of a few milliseconds, for hot paths that bucket time
  /// coarsely (a circuit breaker's sampling window). Monotonic and never later than now(), but it
  /// lags now() by an unbounded amount: a scheduler tick, or more when the kernel's tick is late
  /// (1.6-5.7 ms was measured on a VM with a 4 ms tick). Never compute a deadline from it: a
  /// deadline would expire that much early. Defaults to now().
  [[nodiscard]] virtual time_point coarse_now() const noexcept { return now(); }

  /// Blocks the calling thread until `deadline` or until `stop` is requested, whichever is first.
  /// Returns true if the deadline was reached, false if the wait was stopped.
  virtual bool sleep_until(time_point deadline, std::stop_token stop) const = 0;

  /// Creates a timer whose waits complete on `executor` (a strategy's asynchronous waits: backoff,
  /// timeouts). The timer must not outlive the clock.
  [[nodiscard]] virtual std::unique_ptr<ClockTimer> make_timer(
      const boost::asio::any_io_executor& executor) const = 0;

  /// The process-wide steady clock (std::chrono::steady_clock and Asio steady timers).
  [[nodiscard]] static const std::shared_ptr<const Clock>& steady();
};

/// The receiver of one asynchronous ClockTimer wait. Implemented by kevlar's engine and by
/// strategies that keep their own timers; lives until complete() or abandon() is called.
class ClockWaiter {
 public:
  /// The executor the completion must run on.
  [[nodiscard]] virtual boost::asio::any_io_executor executor() const noexcept = 0;
  /// The cancellation slot that cancels the wait (may be disconnected).
  [[nodiscard]] virtual boost::asio::cancellation_slot cancellation_slot() const noexcept = 0;
  /// The wait finished: success when the deadline passed, `operation_aborted` when cancelled.
  /// Called exactly once unless abandon() is called instead, always on executor(), never inside
  /// ClockTimer::async_wait_until.
  virtual void complete(const boost::system::error_code& ec) = 0;
  /// The wait will never complete (its executor was shut down with the wait pending).
  virtual void abandon() noexcept = 0;

 protected:
  ~ClockWaiter() = default;
};

/// The longest duration kevlar's options and generated durations accept (a timeout, a delay, a
/// break, a hold): 2^32 - 2 ms, about 49.7 days, the bound of Kevlar's (.NET) durations. Each
/// strategy's own limit (TimeoutOptions::max_timeout, Backoff::max_delay_limit ...) is this value.
inline constexpr Clock::duration max_duration = std::chrono::milliseconds(4294967294LL);

/// A one-wait-at-a-time timer created by Clock::make_timer.
///
/// Thread-safety: like an Asio timer, a ClockTimer is used from one executor at a time.
class ClockTimer {
 public:
  virtual ~ClockTimer() = default;
  /// Starts waiting until `deadline`; `waiter` is told exactly once (complete or abandon). Only
  /// one wait may be outstanding per timer.
  virtual void async_wait_until(Clock::time_point deadline, ClockWaiter& waiter) = 0;
  /// Cancels the outstanding wait, which then completes with `operation_aborted`.
  virtual void cancel() noexcept = 0;
};

/// A clock that moves only when told to. Sleeping threads and timer waits whose deadline has been
/// reached are released by advance(); timer completions are posted to their executors (never run
/// inside advance()), so a test advances the clock and then runs its io_context.
///
/// Like an Asio timer, an outstanding wait counts as work on its executor (io_context::run() does
/// not return while one is pending). Destroying a ManualClock aborts every outstanding timer wait
/// with `operation_aborted`. Its timers may outlive it (a test that destroys the clock before the
/// io_context whose executions hold them): they then no longer reach the clock, and a wait started
/// on one completes at once with `operation_aborted`.
///
/// Thread-safety: all members may be called from any thread.
class ManualClock final : public Clock {
 public:
  /// A clock reading `start` (within 2^61 ns of the epoch for its waits to end: see time_point).
  explicit ManualClock(time_point start = time_point{std::chrono::hours(1)});
  ~ManualClock() override;
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  /// Creates a manual clock owned by a shared_ptr (what Shield::with_clock takes).
  [[nodiscard]] static std::shared_ptr<ManualClock> create(time_point start = time_point{
                                                               std::chrono::hours(1)}) {
    return std::make_shared<ManualClock>(start);
  }

  [[nodiscard]] time_point now() const noexcept override;
  bool sleep_until(time_point deadline, std::stop_token stop) const override;
  [[nodiscard]] std::unique_ptr<ClockTimer> make_timer(
      const boost::asio::any_io_executor& executor) const override;

  /// Moves the clock forward by `d` (negative values are refused with std::invalid_argument) and
  /// releases every sleeper and timer whose deadline has been reached.
  void advance(duration d);
  /// Moves the clock to `t` if it is later than now().
  void advance_to(time_point t);

  /// Number of threads currently blocked in sleep_until.
  [[nodiscard]] std::size_t sleepers() const;
  /// Number of timer waits outstanding.
  [[nodiscard]] std::size_t pending_timers() const;
  /// The deadlines of the outstanding timer waits, earliest first.
  [[nodiscard]] std::vector<time_point> pending_deadlines() const;
  /// Drops every outstanding timer wait whose completion would run on `executor`, because that
  /// executor is going away (as destroying an io_context destroys its pending timer waits): each
  /// waiter is told ClockWaiter::abandon(), on this thread, outside the clock's lock. Waits of other
  /// executors (a strand of the same context included: executors are compared as they are) are
  /// untouched. Returns how many were dropped. ClockWaiter::executor() is called under the clock's
  /// lock: it must not use the clock.
  std::size_t abandon_waits(const boost::asio::any_io_executor& executor);
  /// Blocks until at least `n` threads are blocked in sleep_until (a test's rendezvous with a
  /// synchronous call that is about to wait; this is not a timed wait).
  void wait_for_sleepers(std::size_t n) const;

 private:
  friend class ManualClockTimer;
  struct Entry {
    time_point deadline;
    ClockWaiter* waiter;
    void* timer;
    boost::asio::any_io_executor work;  ///< keeps the waiter's executor busy, as a real timer does
  };
  void add(Entry e);
  std::optional<Entry> take(void* timer) noexcept;
  void remove(void* timer) noexcept;
  void collect_due(std::vector<Entry>& due);

  /// This clock, for its timers; cleared when the clock is destroyed. The timers share it.
  std::shared_ptr<std::atomic<ManualClock*>> self_;
  mutable std::mutex mutex_;
  mutable std::condition_variable_any changed_;
  time_point now_;
  mutable std::size_t sleepers_ = 0;
  std::vector<Entry> timers_;
};

}  // namespace kevlar
