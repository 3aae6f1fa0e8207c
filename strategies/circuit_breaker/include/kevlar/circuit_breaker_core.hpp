// kevlar — the circuit breaker's decisions: its options and its sans-I/O state machine
// (CircuitBreakerCore), which the CircuitBreaker strategy drives.
#pragma once

#include <kevlar/circuit_state.hpp>
#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/rolling_window.hpp>
#include <kevlar/detail/state_change_publisher.hpp>
#include <kevlar/hook.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace kevlar {

/// What a break-duration generator is told about the trip it sizes.
struct BreakEvent {
  /// closed (the failure count or ratio crossed its threshold) or half_open (a probe failed).
  CircuitState from;
  /// 1 for the first opening after the circuit was last closed, 2 if the probe after it failed,
  /// and so on (exponential break durations grow with it).
  int trip_number;
  std::exception_ptr exception;      ///< the failure that trips the circuit, if an exception
  boost::system::error_code error;   ///< the failure that trips the circuit, if an error code
  const Context* context = nullptr;  ///< the failing execution's context (null without one)
  /// The handled outcome that trips the circuit, also when it is a result the clause judged a
  /// failure (read it with value_if<T>(): an HTTP response's Retry-After, for example). Valid
  /// only during the break_duration_generator call (or until a coroutine generator's
  /// awaitable completes); null when the failure was recorded without one
  /// (CircuitBreakerCore::record_failure called directly). `context` is valid as long.
  const OutcomeRef* outcome = nullptr;
  /// True when a slow call (CircuitBreakerOptions::slow_call_threshold) trips the circuit; for a
  /// slow success `exception` and `error` are empty and `outcome` is the success.
  bool slow = false;
};

/// Options of a circuit breaker. Validated when the breaker is created (Shield::circuit_breaker or
/// CircuitBreaker::create): invalid values throw std::invalid_argument naming the option.
///
/// Two counting modes, one at a time:
/// - consecutive: opens after `consecutive_failures` handled failures in a row (the default mode,
///   with 5, when neither threshold is set);
/// - ratio: opens on a handled failure when, over the last `sampling_window` (kept in 10 buckets),
///   at least `minimum_throughput` outcomes were recorded and failures/total >= `failure_ratio`.
///
/// Slow calls, in either mode (resilience4j's slow-call rate): with `slow_call_threshold` set, a
/// call whose inner part takes at least that long (from admission to its outcome, on the shield's
/// clock) is slow, whether it succeeded or failed; the circuit also opens on a slow call when, over
/// the last `sampling_window`, at least `minimum_throughput` outcomes were recorded and
/// slow/total >= `slow_call_ratio`. A half-open probe that is slow fails the probe.
struct CircuitBreakerOptions {
  /// Consecutive mode threshold (> 0). Defaults to 5 when failure_ratio is not set either.
  std::optional<int> consecutive_failures;
  /// Ratio mode threshold, in (0, 1]. Setting both thresholds is refused.
  std::optional<double> failure_ratio;
  /// Ratio mode and slow calls: outcomes the window must hold before a ratio is judged (>= 1).
  int minimum_throughput = 10;
  /// Ratio mode and slow calls: the rolling window, tracked in 10 buckets (> 0, at most
  /// max_duration).
  Clock::duration sampling_window = std::chrono::seconds(30);
  /// A call taking at least this long is slow (> 0, at most max_duration). Unset: call durations
  /// are not measured (no clock read).
  std::optional<Clock::duration> slow_call_threshold;
  /// The share of slow calls in the window that opens the circuit, in (0, 1] (used only with
  /// slow_call_threshold).
  double slow_call_ratio = 1.0;
  /// How long the circuit stays open before a probe is admitted (> 0, at most max_duration).
  Clock::duration break_duration = std::chrono::seconds(15);
  /// Sizes each break instead of break_duration. Runs once per trip, outside the breaker's lock,
  /// for the execution whose failure trips the circuit; must return a positive duration (at most
  /// max_duration). If it throws, the exception becomes that execution's outcome and the circuit
  /// stays as it was, able to trip on a later failure. A result made stale by a concurrent
  /// reset() or isolate() is discarded.
  ///
  /// A coroutine (Hook; Kevlar's awaited BreakDurationGenerator) is awaited by that execution: on
  /// its executor, with its cancellation slot (the caller's cancellation, or a timeout outside
  /// the breaker, reaches what it awaits; the execution then ends with `operation_aborted`, or
  /// the timeout's error); a synchronous execution runs it to completion on a private
  /// io_context. Meanwhile the circuit keeps its state with the opening pending, as during a
  /// function: other failures are counted but start no second generator, and a half-open
  /// circuit admits no probe. The break starts when the duration arrives. If the execution is
  /// abandoned first (its executor destroyed), the opening is cancelled as if the generator had
  /// thrown.
  Hook<Clock::duration(const BreakEvent&)> break_duration_generator;
  /// Runs for every state change, in order, one at a time. A function is called outside the
  /// breaker's lock, on the thread of the call that caused the change, before the observers
  /// added with subscribe() (see CircuitBreaker for the delivery rules). A coroutine (Kevlar's
  /// OnStateChangedAsync) is awaited after the synchronous observers have seen the change, one
  /// change at a time, in order, never two at once: the execution that caused the change awaits
  /// it before it completes, on its executor with its cancellation slot, and receives its
  /// exception; a synchronous caller (Shield::execute, reset(), isolate()) runs it to completion
  /// on a private io_context. See CircuitBreaker for the lane's rules.
  Hook<void(const CircuitStateChange&)> on_state_changed;
  /// The outcomes this breaker counts as failures, instead of the ambient clause (Shield::when) in
  /// force where it is added (Kevlar's HandlesException / HandlesResult). Unset: the ambient one.
  std::optional<Clause> handles;
  /// Half-open: probes admitted at the same time (>= 1). Others are rejected without retry_after.
  int half_open_probes = 1;
  /// Half-open: successful probes needed to close the circuit (>= 1). Probes keep being admitted
  /// (at most half_open_probes at once) until that many succeeded; any failing probe re-opens it.
  int success_threshold = 1;

  /// The longest break duration or sampling window accepted: 2^32 - 2 ms (about 49.7 days).
  static constexpr Clock::duration max_duration = kevlar::max_duration;

  /// Throws std::invalid_argument naming the first invalid option.
  void validate() const;
};

/// The circuit breaker's decisions, without I/O: a state machine driven only by the time values
/// its callers pass in (no clock is read, no timer is armed; Open -> HalfOpen happens lazily on the
/// first admit() after the break). The CircuitBreaker strategy drives it for Shield executions;
/// tests drive it directly.
///
/// Protocol per call: `a = admit(now)`; if `a.admitted()`, run the call, then exactly one of
/// record_success(now, a), record_failure(now, a, ...) or release(a) (caller cancellation,
/// abandonment).
///
/// State changes are queued under the lock in the order they happen and delivered to the
/// observers (options.on_state_changed, then subscribe()d ones) after the lock is released, one at
/// a time, never concurrently: the caller that finds no delivery in progress delivers everything
/// queued; a concurrent caller waits until its own change was delivered; a change caused from
/// inside an observer (reentrant reset()/isolate()) is queued behind the current one. Every
/// observer runs even if an earlier one throws; the new state stands; the call that caused the
/// change then throws the observer's exception unchanged (several: CircuitObserverErrors).
/// Exceptions of a reentrant change are attributed to the change being delivered.
///
/// The core keeps the decisions; two parts of it live in their own units: the ratio and slow-call
/// counts in a detail::RollingWindow, and the delivery of state changes (observers, the shields'
/// observers, the lane of a coroutine on_state_changed) in a detail::StateChangePublisher.
///
/// Thread-safety: every member may be called from any number of threads at once. When closed,
/// admission and success recording take no lock and allocate nothing (one atomic increment in
/// ratio mode, at most one atomic store in consecutive mode); failures, slow calls, probes and
/// transitions take one mutex (and a transition, the publisher's, after it).
class CircuitBreakerCore {
 public:
  /// The answer of admit().
  struct Admission {
    enum class Decision : unsigned char {
      admitted,  ///< closed: run the call
      probe,     ///< half-open: run the call as a probe (its outcome decides the circuit)
      rejected,  ///< do not run the call
    };
    Decision decision = Decision::admitted;
    /// Rejections: the state that rejected (open, half_open or isolated).
    CircuitState state = CircuitState::closed;
    /// Rejections by an open circuit: the remaining break. Empty when half-open (probe busy) or
    /// isolated.
    std::optional<Clock::duration> retry_after;
    /// Probes: the half-open period the probe belongs to (stale probes change nothing).
    std::uint64_t generation = 0;

    /// True if the call may run (closed, or as a probe).
    [[nodiscard]] bool admitted() const noexcept { return decision != Decision::rejected; }
    /// True if the call runs as a half-open probe.
    [[nodiscard]] bool probe() const noexcept { return decision == Decision::probe; }
  };

  /// What a failure was, for events and the break-duration generator.
  struct Failure {
    std::exception_ptr exception;         ///< the failure, if an exception
    boost::system::error_code error;      ///< the failure, if an error code
    const Context* context = nullptr;     ///< the failing execution's context, if any
    const OutcomeRef* outcome = nullptr;  ///< the handled outcome, if any (BreakEvent::outcome)
  };

  /// A trip whose break the caller sizes itself with a coroutine break_duration_generator (see
  /// reserve_opening): the reservation and what the generator is told.
  struct Opening {
    std::uint64_t token = 0;                   ///< the reservation (stale once superseded)
    CircuitState from = CircuitState::closed;  ///< the state the circuit opens from
    Admission admission;                       ///< how the tripping call was admitted
    BreakEvent event{};                        ///< what the generator is told
  };

  /// Counters, for tests and diagnostics (a consistent snapshot taken under the lock).
  struct Metrics {
    CircuitState state;
    int consecutive_failures;       ///< consecutive mode: failures in a row
    std::uint64_t window_total;     ///< ratio mode or slow calls: outcomes in the window (at `now`)
    std::uint64_t window_failures;  ///< ratio mode or slow calls: failures in the window
    std::uint64_t window_slow;      ///< slow calls: slow outcomes in the window
    int probes_in_flight;           ///< half-open: admitted probes not yet recorded or released
    bool opening_pending;           ///< a break-duration generator is running
  };

  /// A validated copy of `options` (throws std::invalid_argument naming the invalid option).
  explicit CircuitBreakerCore(const CircuitBreakerOptions& options);
  CircuitBreakerCore(const CircuitBreakerCore&) = delete;
  CircuitBreakerCore& operator=(const CircuitBreakerCore&) = delete;
  ~CircuitBreakerCore();

  /// The options in force (validated; consecutive_failures filled in when defaulted).
  [[nodiscard]] const CircuitBreakerOptions& options() const noexcept { return options_; }
  /// True in ratio mode (record_success then reads `now`).
  [[nodiscard]] bool ratio_mode() const noexcept { return ratio_mode_; }
  /// True if slow calls are tracked (options().slow_call_threshold is set).
  [[nodiscard]] bool slow_calls() const noexcept { return slow_mode_; }
  /// True if the rolling window is kept (ratio mode, or slow calls): record_success reads `now`.
  [[nodiscard]] bool windowed() const noexcept { return windowed_; }

  /// The current state. An open circuit whose break elapsed still reads open until the next
  /// admit() (there is no timer).
  [[nodiscard]] CircuitState state() const noexcept {
    return state_.load(std::memory_order_acquire);
  }

  /// The fast path of admit(): true (admitted, no lock) if the circuit is closed and slow calls
  /// are not tracked (a call whose duration is measured reads the clock first: see slow_calls()).
  [[nodiscard]] bool try_admit_closed() const noexcept {
    return state_.load(std::memory_order_acquire) == fast_closed_;
  }

  /// Decides whether a call starting at `now` may run. May move Open -> HalfOpen (and deliver that
  /// change; if an observer throws, the probe slot is released and the exception propagates).
  Admission admit(Clock::time_point now);

  /// Records a success of the call admitted as `a`, completed at `now` (read when windowed()).
  /// Closes a half-open circuit once success_threshold probes succeeded.
  void record_success(Clock::time_point now, const Admission& a) {
    if (a.probe()) {
      record_success_slow(now, a);
      return;
    }
    record_closed_success(now, a);
  }
  /// record_success() for an admission the caller has found is not a probe (admitted while
  /// closed), so that a caller that read the clock in between does not test it again.
  void record_closed_success(Clock::time_point now, const Admission& a) {
    // Outcomes of calls admitted while closed count only while the circuit is still closed.
    if (state() != CircuitState::closed) return;
    if (!ratio_mode_) {
      if (consecutive_.load(std::memory_order_relaxed) != 0) {
        consecutive_.store(0, std::memory_order_relaxed);
      }
      if (!slow_mode_) return;
    }
    // The current bucket is still current: one atomic increment, no lock.
    if (window_.try_add_success(now)) return;
    record_success_slow(now, a);
  }

  /// Records a success that was slow (CircuitBreakerOptions::slow_call_threshold): counted as a
  /// success and as slow in the window, it may open the circuit (BreakEvent::slow; `details`
  /// gives the generator the context and outcome); a slow probe fails the probe. Takes the lock.
  void record_slow_success(Clock::time_point now, const Admission& a, const Failure& details) {
    record_outcome(now, a, details, false, true);
  }
  /// Records a handled failure of the call admitted as `a`, completed at `now`; `slow` if it took
  /// at least slow_call_threshold (counted as slow too). May open the circuit (calling
  /// break_duration_generator outside the lock, whose exception propagates after the reservation is
  /// cancelled).
  void record_failure(Clock::time_point now, const Admission& a, const Failure& failure,
                      bool slow = false) {
    record_outcome(now, a, failure, true, slow);
  }
  /// Same, for a failure without details.
  void record_failure(Clock::time_point now, const Admission& a);

  /// record_failure (`failed`) or record_slow_success (not `failed`) for a caller that awaits
  /// a coroutine break_duration_generator itself (the CircuitBreaker strategy in an execution;
  /// requires that option). Returns true and fills `opening` when the outcome trips the circuit:
  /// the opening is then pending, and the caller must end it with exactly one of open_reserved()
  /// (the generator's duration) or cancel_opening() (it failed, or the call was abandoned).
  /// Returns false when nothing opens (state changes it made, such as none, are delivered).
  bool reserve_opening(Clock::time_point now, const Admission& a, const Failure& details,
                       bool failed, bool slow, Opening& opening);
  /// Opens the circuit reserved as `opening` for `d` from `now`, unless a concurrent reset() or
  /// isolate() made the reservation stale (then nothing happens). Throws std::invalid_argument
  /// (after cancelling the reservation) if `d` is not positive or above max_duration, and what a
  /// state-change observer throws (the circuit is then open).
  void open_reserved(const Opening& opening, Clock::time_point now, Clock::duration d);
  /// Cancels the reservation `opening`, as a failing generator does: the circuit stays as it was,
  /// able to trip on a later failure; a half-open probe frees its slot. No-op when stale.
  void cancel_opening(const Opening& opening) noexcept;

  /// The call admitted as `a` ended without an outcome that counts (cancelled by its caller, or
  /// abandoned): frees its probe slot if it is a probe of the current half-open period.
  void release(const Admission& a) noexcept;

  /// Opens the circuit by hand until reset(): calls are rejected with errc::isolated. Cancels a
  /// pending opening and frees probe slots. No event if already isolated.
  void isolate();
  /// Closes the circuit by hand and clears its history. Cancels a pending opening and frees probe
  /// slots. No event if already closed.
  void reset();

  /// Adds an observer of state changes (called after options.on_state_changed and the observers
  /// added before it, for changes queued after this call).
  void subscribe(std::function<void(const CircuitStateChange&)> observer) {
    publisher_.subscribe(std::move(observer));
  }

  /// The lane of a coroutine options().on_state_changed, for an asynchronous execution that claimed
  /// it (detail::TransitionSource::lane_claim). Pops the next change whose hook the holder
  /// awaits into `change` and returns true; when none is left, releases the lane, moves the
  /// failures gathered since it was claimed (observers' and hooks') into `failures` and returns
  /// false.
  bool next_lane_change(CircuitStateChange& change, std::vector<std::exception_ptr>& failures) {
    return publisher_.next_lane_change(change, failures);
  }
  /// The hook the lane's holder awaited threw `failure`.
  void lane_hook_failed(std::exception_ptr failure) noexcept {
    publisher_.lane_hook_failed(std::move(failure));
  }
  /// The lane's holder was abandoned (its executor destroyed): releases the lane and drops its
  /// gathered failures. Changes still queued are awaited by the next caller that finds the lane
  /// free (the caller of the next state change).
  void abandon_lane() noexcept { publisher_.abandon_lane(); }

  /// A snapshot of the counters; the ratio window is read as of `now`.
  [[nodiscard]] Metrics metrics(Clock::time_point now) const;

 private:
  // --- under mutex_
  /// Queues the change from `from` to `to` (with the last failure) for the observers; its ticket.
  std::uint64_t enqueue(CircuitState from, CircuitState to) {
    return publisher_.enqueue(CircuitStateChange{from, to, last_exception_, last_error_});
  }
  void set_state(CircuitState s) noexcept { state_.store(s, std::memory_order_release); }
  void open_locked(Clock::time_point now, Clock::duration d, std::uint64_t& ticket);
  void close_locked(std::uint64_t& ticket);
  /// isolate() and reset(): moves to `to` (isolated or closed) by hand, whatever the state.
  void force_state(CircuitState to);
  void clear_metrics_locked() noexcept;
  void end_half_open_locked() noexcept;
  /// Counts an outcome of a call admitted while closed; true if it crosses a threshold.
  bool count_locked(Clock::time_point now, bool failed, bool slow);

  // --- without the lock
  /// A failure, or a slow outcome: the path that may open the circuit.
  void record_outcome(Clock::time_point now, const Admission& a, const Failure& failure,
                      bool failed, bool slow);
  /// The locked part of record_outcome: counts, opens at once (filling `ticket`) or reserves an
  /// opening for a generator (returns true and fills `opening`).
  bool count_outcome(Clock::time_point now, const Admission& a, const Failure& failure, bool failed,
                     bool slow, Opening& opening, std::uint64_t& ticket);
  /// Runs a coroutine break_duration_generator to completion on a private io_context
  /// (record_failure called directly).
  [[nodiscard]] Clock::duration await_generator(const BreakEvent& event) const;
  void record_success_slow(Clock::time_point now, const Admission& a);
  void count_success_slow(Clock::time_point now);

  CircuitBreakerOptions options_;
  bool ratio_mode_;
  bool slow_mode_;
  bool windowed_;  ///< ratio_mode_ || slow_mode_
  /// CircuitState::closed, or with slow calls a value the state never takes (no fast admission).
  CircuitState fast_closed_;
  int consecutive_limit_;

  // Read without the lock on the hot path; written under mutex_.
  std::atomic<CircuitState> state_{CircuitState::closed};
  std::atomic<int> consecutive_{0};
  /// Ratio mode or slow calls: the outcomes of the sampling window (its lock is mutex_, except
  /// for try_add_success).
  detail::RollingWindow window_;

  mutable std::mutex mutex_;
  /// When an open circuit admits its first probe (nanoseconds on the clock's timeline). Written
  /// under mutex_ before the state becomes open; read without the lock to reject quickly.
  std::atomic<std::int64_t> open_until_{0};
  std::uint64_t probe_generation_ = 0;
  int probes_in_flight_ = 0;
  int probe_successes_ = 0;
  int trips_ = 0;  ///< openings since the circuit was last closed
  bool opening_pending_ = false;
  std::uint64_t opening_token_ = 0;
  std::exception_ptr last_exception_;
  boost::system::error_code last_error_;

  /// Delivers the state changes (its own lock, taken after mutex_ by enqueue).
  detail::StateChangePublisher publisher_;
};
}  // namespace kevlar
