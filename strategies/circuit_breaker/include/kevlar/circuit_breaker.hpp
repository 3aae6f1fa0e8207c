// kevlar — the circuit breaker: stops calling a dependency that keeps failing, then probes it.
#pragma once

#include <kevlar/circuit_breaker_core.hpp>
#include <kevlar/circuit_state.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/strategy.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kevlar {

namespace detail {

/// A breaker's per-execution state, in its layer's frame: how the call was admitted and whether
/// its outcome was recorded.
struct BreakerFrame {
  /// What the execution still owes the breaker when it ends.
  enum class Pending : unsigned char {
    nothing,  ///< admitted while closed, or already recorded
    probe,    ///< a half-open probe slot, until its outcome is recorded
    opening,  ///< a reserved opening, while a coroutine break_duration_generator runs
    lane,     ///< the hooks' lane (a coroutine on_state_changed), while the execution awaits them
  };
  CircuitBreakerCore::Admission admission;
  Pending pending = Pending::nothing;
  Clock::time_point started{};  ///< admission time, when slow calls are tracked
  // Written before they are read, while an asynchronous break-duration generator runs: a frame
  // that never trips pays nothing for them.
  std::uint64_t opening_token;   ///< the reservation (CircuitBreakerCore::Opening::token)
  CircuitState opening_from;     ///< the state the circuit opens from
  Clock::duration break_length;  ///< the generator's result
  bool run_after_lane;           ///< once the lane is empty: run_inner (true) or complete
};

}  // namespace detail

/// The circuit breaker strategy. Create it with CircuitBreaker::create (or Shield::circuit_breaker
/// when no handle is needed), add it to shields with Shield::use, and keep the handle to observe
/// and control the circuit:
/// ```
/// auto breaker = kevlar::CircuitBreaker::create({.failure_ratio = 0.5, .minimum_throughput = 20});
/// const kevlar::Shield shield = kevlar::Shield{}.retry(3).use(breaker);
/// breaker->isolate();   // maintenance: reject everything with errc::isolated
/// breaker->reset();     // back to closed, history cleared
/// ```
/// Counting (after the inner part of the pipeline completes): an outcome the clause in force at
/// this position handles is a failure; a cancellation while the caller (or a strategy outside the
/// breaker) cancelled the execution counts as nothing (a probe frees its slot); anything else,
/// including exceptions the clause does not handle, is a success. With slow_call_threshold, a
/// success or failure that took at least that long since admission is also slow.
///
/// Rejections never run the inner part: errc::circuit_open with retry_after = the remaining break
/// (open) or none (half-open with every probe slot taken); errc::isolated with none (isolated).
///
/// The asynchronous state-change hook (a coroutine CircuitBreakerOptions::on_state_changed) runs in
/// a lane: each change is queued for it once the synchronous observers have seen it, and one caller
/// at a time holds the lane and awaits the queued hooks, in order, until none is left. The caller
/// whose change finds the lane free takes it: an asynchronous execution awaits the hooks on its
/// executor with its cancellation slot before it completes (a probe before it runs); a
/// synchronous caller runs them to completion on a private io_context. A caller whose change finds
/// the lane taken does not wait: the holder awaits that change's hook too, and receives its
/// exception (so does a change made from inside a hook). The holder's outcome is the hooks' (and
/// observers') exception — several: CircuitObserverErrors; a probe then does not run.
///
/// Thread-safety: one instance serves every execution of every shield it is part of; all members
/// are thread-safe. Shields sharing the instance share the circuit.
class CircuitBreaker final : public BasicStrategy<CircuitBreaker, detail::BreakerFrame> {
 public:
  /// Creates a breaker (throws std::invalid_argument naming an invalid option).
  [[nodiscard]] static std::shared_ptr<CircuitBreaker> create(
      const CircuitBreakerOptions& options = {}) {
    return std::make_shared<CircuitBreaker>(options);
  }
  /// Prefer create(); validates `options` like it.
  explicit CircuitBreaker(const CircuitBreakerOptions& options = {});

  /// The current state (an open circuit whose break elapsed reads open until the next call).
  [[nodiscard]] CircuitState state() const noexcept { return core_.state(); }
  /// Opens the circuit by hand until reset(). Throws what a state-change observer throws (the
  /// state change stands).
  void isolate() { core_.isolate(); }
  /// Closes the circuit by hand and clears its history. Throws what a state-change observer
  /// throws (the state change stands).
  void reset() { core_.reset(); }
  /// Adds an observer of state changes; see CircuitBreakerCore for the delivery rules.
  void subscribe(std::function<void(const CircuitStateChange&)> observer) {
    core_.subscribe(std::move(observer));
  }
  /// The decision logic (counters, direct driving in tests).
  [[nodiscard]] CircuitBreakerCore& core() noexcept { return core_; }
  /// The decision logic, read-only.
  [[nodiscard]] const CircuitBreakerCore& core() const noexcept { return core_; }

  /// `CircuitBreaker(5 consecutive, break 30s)` or
  /// `CircuitBreaker(50% over 30s, min 20, break 15s)`; `break dynamic` with a generator;
  /// `, probes 3, close after 2` when the half-open options differ from 1; `, slow >=2s at 50%
  /// over 30s, min 10` with slow calls.
  [[nodiscard]] std::string describe() const override;
  /// Reactive (judges outcomes with the clause in force where it was added), stateful (one
  /// instance per chain), with a small frame recording how the execution was admitted.
  [[nodiscard]] StrategyTraits strategy_traits() const noexcept;
  /// Admits the execution (closed: no lock) or rejects it without running the inner part.
  Step start(Layer& layer, Frame& f) {
    // Closed, durations not measured: admitted here, without a call (the frame's value
    // initialisation already says admitted, nothing pending).
    if (core_.try_admit_closed()) return Step::run_inner;
    return admit(layer, f);
  }
  /// Records the outcome: handled -> failure, cancelled from outside -> nothing, else success.
  Step inner_complete(Layer& layer, Frame& f);
  /// An awaited break-duration generator ended: opens the circuit, or leaves it as it was.
  Step wait_complete(Layer& layer, Frame& f, const boost::system::error_code& ec);
  /// Frees a probe slot the execution still holds, or cancels the opening it was sizing
  /// (abandoned before its outcome was recorded).
  void finish(Layer& /*layer*/, Frame& f) noexcept {
    if (f.pending == Frame::Pending::nothing) return;  // the common case: nothing owed
    settle(f);
  }

 private:
  /// start() past the closed fast path: half-open probes, open or isolated rejections, timing.
  /// Out of line, so that start() ends in a tail call.
  [[gnu::noinline]] Step admit(Layer& layer, Frame& f);
  /// finish() for an execution that still owes the breaker something (f.pending).
  [[gnu::noinline]] void settle(Frame& f) noexcept;
  /// inner_complete when slow calls are tracked, for an outcome that counts (`handled`: a
  /// failure): the call's duration decides whether it is also slow.
  Step complete_timed(Layer& layer, Frame& f, bool handled);
  /// Records an outcome that may open the circuit (a failure, or a slow success).
  Step record_tripping(Layer& layer, Frame& f, Clock::time_point now, bool failed, bool slow);
  /// record_tripping with a coroutine break_duration_generator: reserves the opening and awaits the
  /// generator.
  Step size_break(Layer& layer, Frame& f, Clock::time_point now,
                  const CircuitBreakerCore::Failure& details, bool failed, bool slow);
  /// The generator ended: opens the circuit with its duration, or cancels the opening if it
  /// `failed` (threw: its exception is the outcome).
  Step break_sized(Layer& layer, Frame& f, bool failed);
  /// The reservation the frame holds.
  [[nodiscard]] static CircuitBreakerCore::Opening opening_of(const Frame& f) noexcept;
  /// A successful probe (may close the circuit).
  [[gnu::noinline]] Step probe_succeeded(Layer& layer, Frame& f);
  /// After a call into the core: `next`, or, if the execution claimed the hooks' lane, await
  /// the queued state-change hooks first.
  Step after_transitions(Layer& layer, Frame& f, bool claimed, Step next);
  /// Awaits the next queued state-change hook, or ends the lane (lane_done).
  Step pump_lane(Layer& layer, Frame& f);
  /// The lane is empty: `f.after_lane`, or the gathered failures as the outcome.
  Step lane_done(Layer& layer, Frame& f, std::vector<std::exception_ptr> failures);
  /// The layer's transition source, bound to this breaker's core.
  [[nodiscard]] detail::TransitionSource transition_source(
      const Layer& layer, bool* lane_claim = nullptr) const noexcept;
  CircuitBreakerCore core_;
  std::shared_ptr<const Clause> own_clause_;  ///< options().handles
};

/// A circuit breaker opening after `consecutive_failures` handled failures in a row, for
/// `break_duration`. Add it with BasicShield::use or with (`kevlar::Shield::circuit_breaker` is
/// the fluent form); keep the pointer to read its state or reset it.
[[nodiscard]] std::shared_ptr<CircuitBreaker> circuit_breaker(int consecutive_failures,
                                                              Clock::duration break_duration);
/// A circuit breaker configured by `options` (std::invalid_argument names an invalid option).
[[nodiscard]] std::shared_ptr<CircuitBreaker> circuit_breaker(const CircuitBreakerOptions& options);

}  // namespace kevlar
