// kevlar — typed events for every decision a strategy takes, and the observers that receive them.
#pragma once

#include <kevlar/clock.hpp>

#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace kevlar {

class Context;
class Strategy;
/// The circuit breaker's states (defined in <kevlar/circuit_breaker.hpp>).
enum class CircuitState : unsigned char;

/// Why a call was refused without running its inner part.
enum class RejectionKind : unsigned char {
  circuit_open,       ///< an open circuit breaker, or a half-open one whose probes are busy
  isolated,           ///< a circuit breaker isolated by hand
  rate_limit,         ///< a rate limiter with no permit and no queue place
  concurrency_limit,  ///< a concurrency limit with every permit and queue place taken
};

/// `circuit_open`, `isolated`, `rate_limit` or `concurrency_limit` (the metric tag values).
[[nodiscard]] const char* to_string(RejectionKind kind) noexcept;

/// What a chaos strategy (<kevlar/chaos.hpp>) injects.
enum class ChaosKind : unsigned char {
  latency,   ///< a wait before the call
  fault,     ///< a failure instead of the call
  outcome,   ///< a result instead of the call
  behavior,  ///< a user callback before the call
};

/// `latency`, `fault`, `outcome` or `behavior` (the metric tag values).
[[nodiscard]] const char* to_string(ChaosKind kind) noexcept;

/// The failure an event is about: an error code or an exception (both empty for a successful
/// result that the clause judged a failure).
struct Failure {
  boost::system::error_code error;
  std::exception_ptr exception;
};

/// An execution (one public execute / execute_async call) completed; emitted once, with the final
/// outcome, after every strategy has had its say (a fallback's recovery is a success).
struct ExecutionFinished {
  bool success = false;
  Failure failure;             ///< when not a success
  Clock::duration duration{};  ///< from entering the shield to the final outcome (shield clock)
  std::uint32_t attempts = 0;  ///< user operations started (0: rejected before any ran)
};

/// An attempt of the user's operation is about to start.
struct AttemptStarted {
  std::uint32_t attempt = 0;  ///< 1 for the first, 2 for the second, ...
};

/// A retry decided to try again, before its backoff wait.
struct RetryScheduled {
  int retry = 0;            ///< 1 for the first retry
  Clock::duration delay{};  ///< the backoff it waits before the next attempt
  Failure failure;          ///< the outcome that is being retried
};

/// A timeout's budget elapsed and it reports `errc::timeout` (before its on_timeout hook).
struct TimeoutFired {
  Clock::duration timeout{};  ///< the budget that elapsed
};

/// A fallback replaced a handled failure (before its on_fallback hook).
struct FallbackTaken {
  Failure failure;  ///< the failure it replaced
};

/// A strategy refused a call without running its inner part (before its rejection hooks).
struct Rejected {
  RejectionKind kind = RejectionKind::concurrency_limit;
  std::optional<Clock::duration> retry_after;  ///< when the strategy expects to admit a call
};

/// A circuit breaker changed state. Delivered to the observers of the shield whose call caused
/// the change, in the breaker's order, one at a time, from the breaker's publication loop (which
/// may run on another call's thread); a change made by hand, with reset() or isolate(), has no
/// shield and reaches only the breaker's own state-change hooks.
struct BreakerTransition {
  CircuitState from;
  CircuitState to;
  Failure failure;  ///< for a change to open: the failure that tripped the circuit
};

/// A concurrency limit's accounting changed: a call took a permit (at once or after queueing),
/// returned it, or was rejected. Joining or leaving the queue is not reported on its own.
struct LimiterStateChanged {
  std::uint32_t running = 0;  ///< permits in use
  std::uint32_t queued = 0;   ///< callers waiting for a permit
};

/// A hedge launched another attempt alongside the ones running (after its on_hedge hook and
/// action generator, before the attempt starts).
struct HedgeLaunched {
  std::uint32_t attempt = 0;  ///< 2 for the first hedge
};

/// A chaos strategy injected something (after its on_injected hook, before the injection takes
/// effect).
struct ChaosInjected {
  ChaosKind kind = ChaosKind::fault;
  std::string operation;    ///< the execution's chaos scope's operation ("" when none)
  std::string environment;  ///< the execution's chaos scope's environment ("" when none)
};

/// Where an event comes from.
struct EventSource {
  /// What this observer stored in ShieldInfo::observer_state when the shield was announced (for
  /// example its series for that shield), or nullptr. Set per observer at delivery.
  void* observer_state = nullptr;
  /// The shield's name (Shield::with_name), or nullptr for an unnamed shield.
  const std::string* shield_name = nullptr;
  /// Position of the strategy in the shield, outermost 0 (no_strategy for ExecutionFinished and
  /// AttemptStarted, which belong to the execution).
  std::size_t strategy_index = no_strategy;
  /// The strategy (nullptr for the execution's own events).
  const Strategy* strategy = nullptr;
  /// The execution's context (do not keep it); nullptr for a BreakerTransition, which may be
  /// delivered after the call that caused it ended.
  const Context* context = nullptr;

  static constexpr std::size_t no_strategy = std::numeric_limits<std::size_t>::max();
};

/// One event: its source and what happened.
struct Event {
  using Detail =
      std::variant<ExecutionFinished, AttemptStarted, RetryScheduled, TimeoutFired, FallbackTaken,
                   Rejected, BreakerTransition, LimiterStateChanged, HedgeLaunched, ChaosInjected>;
  EventSource source;
  Detail detail;
};

/// A set of event kinds: bit i stands for the alternative i of Event::Detail.
using EventKinds = std::uint16_t;

/// The set holding the event kinds `Details...` (e.g. `event_kinds<RetryScheduled, Rejected>()`).
template <class... Details>
[[nodiscard]] constexpr EventKinds event_kinds() noexcept;

/// Every event kind.
inline constexpr EventKinds all_event_kinds =
    static_cast<EventKinds>((1U << std::variant_size_v<Event::Detail>)-1);

namespace detail {
template <class T, class Variant>
struct EventIndex;
template <class T, class... Ts>
struct EventIndex<T, std::variant<Ts...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    std::size_t i = 0;
    while (i < sizeof...(Ts) && !same[i]) ++i;
    return i;
  }();
  static_assert(value < sizeof...(Ts), "not an event detail type");
};
}  // namespace detail

template <class... Details>
constexpr EventKinds event_kinds() noexcept {
  return static_cast<EventKinds>(
      (0U | ... | (1U << detail::EventIndex<Details, Event::Detail>::value)));
}

/// What an observer learns about a shield it observes, once, before the shield's first event.
struct ShieldInfo {
  /// The shield's name (Shield::with_name), or nullptr for an unnamed shield.
  const std::string* name = nullptr;
  /// The shield's strategies, outermost first (EventSource::strategy_index indexes this). Keep a
  /// std::weak_ptr, not a std::shared_ptr, so that observing a shield never keeps it alive. An
  /// entry is null when its strategy no longer exists (a shield announced by a breaker's late
  /// publication, after the shield itself was destroyed).
  std::span<const std::shared_ptr<Strategy>> strategies;
  /// Out: a pointer the observer wants back, as EventSource::observer_state, with every event of
  /// this shield (it must stay valid as long as the observer lives). Starts null.
  void* observer_state = nullptr;
};

/// Receives the events of the shields it observes (Shield::observed_by).
///
/// Shields: every builder call returns a new shield, and each one that runs is announced to its
/// observers once, through on_shield: when its first execution starts (if an observer wants
/// ExecutionFinished or AttemptStarted), and in any case before the first of its events is
/// delivered (an event delivered on another thread at the same moment waits for the announcement
/// to finish). A shield that never runs is never announced. on_shield must not run the shield it
/// announces, nor another shield sharing its circuit breakers: the announcement holds a lock that
/// the shield's other threads (and a breaker publishing a change) wait for.
///
/// Delivery: synchronous, on the thread that made the decision (a breaker's transitions: on the
/// thread running the breaker's publication loop), never under a strategy's lock; the events of
/// one execution arrive in its order, and a breaker's transitions in the breaker's order, one at a
/// time. Different executions deliver concurrently: on_event must be thread-safe.
///
/// Failures: an exception thrown by on_event is swallowed: it never changes a strategy's state or
/// a call's outcome, and the other observers still receive the event. The shield counts it
/// (Shield::observer_failures) and keeps the first (Shield::first_observer_failure).
class Observer {
 public:
  virtual ~Observer() = default;
  /// One event of a kind in interests(); see the class comment for when and where it is called.
  virtual void on_event(const Event& event) = 0;
  /// The event kinds this observer wants, asked once when a shield is built. A shield builds no
  /// event that none of its observers wants (and runs no layer for it). Default: all of them.
  [[nodiscard]] virtual EventKinds interests() const noexcept { return all_event_kinds; }
  /// `shield` is about to deliver its first event (see the class comment). The default does
  /// nothing. Its exceptions are swallowed and counted like on_event's.
  virtual void on_shield(ShieldInfo& shield) { (void)shield; }
};

namespace detail {

/// The observers of one sealed pipeline, with its name and the failures they threw.
class ObserverSet {
 public:
  ObserverSet(std::vector<std::shared_ptr<Observer>> observers, std::optional<std::string> name,
              const std::vector<std::shared_ptr<Strategy>>& strategies);

  /// Delivers `event` to every observer that wants its kind (announcing the shield first, once),
  /// setting event.source.observer_state for each; exceptions are swallowed and counted.
  void deliver(Event& event) const noexcept {
    ensure_announced();
    deliver_now(event);
  }
  /// Announces the shield to its observers unless that was done (see Observer::on_shield).
  void ensure_announced() const noexcept {
    if (!announced_.load(std::memory_order_acquire)) announce();
  }
  /// The union of the observers' interests.
  [[nodiscard]] EventKinds interests() const noexcept { return interests_; }

  [[nodiscard]] const std::string* name() const noexcept { return name_ ? &*name_ : nullptr; }
  [[nodiscard]] std::uint64_t failures() const noexcept {
    return failures_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::exception_ptr first_failure() const;

 private:
  void deliver_now(Event& event) const noexcept;
  /// Calls every observer's on_shield, once (the first caller does; concurrent ones wait).
  void announce() const noexcept;
  void count_failure() const noexcept;

  std::vector<std::shared_ptr<Observer>> observers_;
  std::vector<EventKinds> wants_;      ///< per observer
  mutable std::vector<void*> states_;  ///< per observer; written once, before announced_
  EventKinds interests_ = 0;
  std::optional<std::string> name_;
  /// Weak: a breaker's pending publications hold the set, and must not keep the breaker alive.
  std::vector<std::weak_ptr<Strategy>> strategies_;
  mutable std::atomic<bool> announced_{false};
  mutable std::recursive_mutex announce_mutex_;
  mutable bool announcing_ = false;  ///< under announce_mutex_: on_shield is running
  mutable std::atomic<std::uint64_t> failures_{0};
  mutable std::mutex first_mutex_;
  mutable std::exception_ptr first_failure_;
};

/// Who caused a state change of a stateful strategy: set by the strategy around the calls into its
/// state machine that may change state, so that the change is delivered to the observers of the
/// shield whose call caused it.
struct TransitionSource {
  const std::shared_ptr<const ObserverSet>* observers = nullptr;  ///< the causing shield's
  std::size_t strategy_index = EventSource::no_strategy;
  const Strategy* strategy = nullptr;
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

}  // namespace detail
}  // namespace kevlar
