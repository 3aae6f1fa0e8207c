// kevlar — internal: the circuit breaker's ordered publisher of state changes, to its observers
// and to the asynchronous state-change hook's lane.
#pragma once

#include <kevlar/circuit_state.hpp>
#include <kevlar/observer.hpp>

#include <boost/asio/awaitable.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar::detail {

/// Who caused a state change of a circuit breaker: set by the breaker around the calls into its
/// state machine that may change state, so that the change is delivered to the observers of the
/// shield whose call caused it (EventOrigin), with the machine it is for.
struct TransitionSource {
  EventOrigin origin;  ///< the causing shield's observers and the breaker's position in it
  /// The state machine the scope is for: another one's changes (a call made from a hook) ignore
  /// it.
  const void* machine = nullptr;
  /// Set by an asynchronous execution that can await the machine's asynchronous state-change
  /// hooks itself: the machine sets it to true when the caller is to await them (it claimed the
  /// hooks' lane) instead of running them to completion on a private io_context.
  bool* lane_claim = nullptr;
};
inline thread_local TransitionSource tl_transition_source{};

/// Marks the calling thread's calls into a state machine as caused by `source` (if observed).
class TransitionScope {
 public:
  explicit TransitionScope(const TransitionSource& source) noexcept
      : previous_(tl_transition_source) {
    tl_transition_source = source;
  }
  ~TransitionScope() { tl_transition_source = previous_; }
  TransitionScope(const TransitionScope&) = delete;
  TransitionScope& operator=(const TransitionScope&) = delete;

 private:
  TransitionSource previous_;
};

/// Delivers a circuit breaker's state changes to its observers: in the order they were queued,
/// one at a time, never concurrently, never under the breaker's lock.
///
/// Protocol: the breaker queues each change with enqueue() under its own lock, in the order the
/// changes happen, and gets a ticket; after releasing its lock it calls deliver(ticket). The
/// caller that finds no delivery in progress delivers everything queued; a concurrent caller waits
/// until its own change was delivered; a change queued from inside an observer (reentrant, same
/// thread) is delivered behind the current one, and its observers' exceptions go to the caller of
/// the change being delivered. Every observer runs even if an earlier one throws; deliver() then
/// throws the observer's exception unchanged (several: CircuitObserverErrors). After the
/// observers, a change reaches the observers of the shield whose call caused it (read from
/// tl_transition_source at enqueue() when its `machine` is this publisher's), as a
/// BreakerTransition.
///
/// With an asynchronous hook, each delivered change is also queued for it in a lane: one caller at
/// a time holds the lane and awaits the queued hooks, in order, until none is left. The caller of
/// deliver() that finds the lane free takes it: if tl_transition_source (for this machine) has a
/// `lane_claim`, deliver() sets it to true and returns, and that caller awaits the hooks itself
/// with next_lane_change(); otherwise deliver() runs them to completion on a private io_context.
///
/// Thread-safety: every member may be called from any number of threads at once; enqueue() may be
/// called under the breaker's lock (the publisher's own lock is taken after it, and the publisher
/// never takes the breaker's).
class StateChangePublisher {
 public:
  /// An observer of state changes.
  using Observer = std::function<void(const CircuitStateChange&)>;
  /// The asynchronous state-change hook (a coroutine CircuitBreakerOptions::on_state_changed).
  using AsyncHook = std::function<boost::asio::awaitable<void>(CircuitStateChange)>;

  /// A publisher for the state machine `machine` (compared with tl_transition_source.machine),
  /// whose first observer is `first` (if not empty) and whose asynchronous hook is `hook` (if not
  /// empty).
  StateChangePublisher(const void* machine, Observer first, AsyncHook hook);
  StateChangePublisher(const StateChangePublisher&) = delete;
  StateChangePublisher& operator=(const StateChangePublisher&) = delete;
  ~StateChangePublisher();

  /// Adds an observer, called after those added before it, for changes queued after this call.
  /// Throws std::invalid_argument if `observer` is empty.
  void subscribe(Observer observer);

  /// Queues `change` and returns its ticket (never 0). Throws std::bad_alloc (nothing queued).
  [[nodiscard]] std::uint64_t enqueue(const CircuitStateChange& change);

  /// Returns once the change `ticket` was delivered (at once for 0), delivering it and the others
  /// queued if no other thread is delivering; then throws its observers' exceptions, or hands the
  /// lane to the caller (see the class comment).
  void deliver(std::uint64_t ticket);

  /// The lane, for a caller whose `lane_claim` deliver() set: pops the next change whose hook the
  /// holder awaits into `change` and returns true; when none is left, releases the lane, moves the
  /// failures gathered since it was claimed (observers' and hooks') into `failures` and returns
  /// false.
  bool next_lane_change(CircuitStateChange& change, std::vector<std::exception_ptr>& failures);
  /// The hook the lane's holder awaited threw `failure`.
  void lane_hook_failed(std::exception_ptr failure) noexcept;
  /// The lane's holder was abandoned: releases the lane and drops its gathered failures. Changes
  /// still queued are awaited by the next caller that finds the lane free.
  void abandon_lane() noexcept;

  /// Throws nothing (no failure), the exception (one) or CircuitObserverErrors (several).
  static void throw_failures(std::vector<std::exception_ptr> failures);

 private:
  struct Event {
    CircuitStateChange change;
    std::uint64_t seq;
    std::uint64_t owner;  ///< the seq whose caller receives the observers' exceptions
    /// The shield whose call caused the change, when that shield has observers (Shield::
    /// observed_by): they receive it as a BreakerTransition after the breaker's own observers.
    std::shared_ptr<const ObserverSet> shield_observers;
    std::size_t strategy_index = EventSource::no_strategy;
    const Strategy* strategy = nullptr;
  };

  /// Runs the observers and the shield's observers for `e`, outside the lock; returns the
  /// observers' exceptions.
  static std::vector<std::exception_ptr> notify(const std::vector<Observer>& observers,
                                                const Event& e);
  /// A synchronous caller holds the lane: runs the queued hooks to completion, then throws the
  /// gathered failures (`failures` first).
  void pump_lane(std::vector<std::exception_ptr> failures);

  const void* machine_;
  AsyncHook hook_;

  std::mutex mutex_;
  std::shared_ptr<const std::vector<Observer>> observers_;
  std::deque<Event> queue_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t delivered_seq_ = 0;
  bool publishing_ = false;
  std::thread::id publisher_;
  std::uint64_t delivering_owner_ = 0;
  std::vector<std::pair<std::uint64_t, std::exception_ptr>> observer_failures_;
  std::condition_variable delivered_;
  /// Changes whose hook is still to be awaited, in order.
  std::deque<CircuitStateChange> lane_;
  bool lane_busy_ = false;  ///< a caller awaits the hooks (it pops lane_ until empty)
  std::vector<std::exception_ptr> lane_failures_;  ///< gathered for the lane's holder
};

}  // namespace kevlar::detail
