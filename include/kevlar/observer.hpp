// kevlar — typed events for every decision a strategy takes, and the observers that receive them.
// The set of event types is open: each strategy declares its own (see EventDetail).
#pragma once

#include <kevlar/clock.hpp>

#include <boost/system/error_code.hpp>

#include <atomic>
#include <concepts>
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
#include <vector>

namespace kevlar {

class Context;
class Strategy;

/// Why a call was refused without running its inner part.
enum class RejectionKind : unsigned char {
  circuit_open,       ///< an open circuit breaker, or a half-open one whose probes are busy
  isolated,           ///< a circuit breaker isolated by hand
  rate_limit,         ///< a rate limiter with no permit and no queue place
  concurrency_limit,  ///< a concurrency limit with every permit and queue place taken
  throttle,           ///< client-side adaptive throttling (errc::throttled)
  queue_timeout,      ///< a limiter's queue-wait timeout ended a wait in its queue
};

/// `circuit_open`, `isolated`, `rate_limit`, `concurrency_limit`, `throttle` or `queue_timeout`
/// (the metric tag values).
[[nodiscard]] const char* to_string(RejectionKind kind) noexcept;

// ---- event kinds: an open set ------------------------------------------------------------------
//
// An event is a value of any copyable class that names itself with a static member
// `kevlar_event` (its kind's name, conventionally the type's own name):
//
//   struct QuotaRefilled {
//     static constexpr std::string_view kevlar_event = "QuotaRefilled";
//     std::uint32_t tokens = 0;
//   };
//
// Each strategy declares the events it emits beside itself (kevlar's: the core's execution events
// below, RetryScheduled in <kevlar/retry.hpp>, BreakerTransition in <kevlar/circuit_breaker.hpp>
// ...), a user's strategy its own; an observer that knows a type reads it with
// Event::get_if<Type>(), and any observer may ignore the kinds it does not know. There is no limit
// on the number of kinds.

/// A class that can be delivered as an event: copyable, naming its kind with `kevlar_event`.
/// (The name is checked before copyability, so that a class with a constructor template
/// constrained on EventDetail, which is not an event itself, does not make the check recursive.)
template <class D>
concept EventDetail = std::is_class_v<D> && requires {
  { D::kevlar_event } -> std::convertible_to<std::string_view>;
} && std::is_copy_constructible_v<D>;

class EventKind;
template <EventDetail D>
constexpr EventKind event_kind() noexcept;

namespace detail {
/// One object per event type: its address is the kind's identity.
template <class D>
inline constexpr char event_tag = 0;
/// The bit of a kind's name in a 32-bit filter: FNV-1a of the name, modulo 32. Two kinds may share
/// a bit; the filter only decides whether an event is worth building (EventKinds::mask).
constexpr std::uint32_t event_bit(std::string_view name) noexcept {
  std::uint32_t h = 2166136261u;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return 1u << (h % 32u);
}
template <class D>
std::shared_ptr<const void> copy_event(const void* detail) {
  return std::make_shared<const D>(*static_cast<const D*>(detail));
}
}  // namespace detail

/// The identity of one type of event, known at compile time (event_kind<Type>()).
class EventKind {
 public:
  /// The kind's name: the type's `kevlar_event` (`"RetryScheduled"`).
  [[nodiscard]] constexpr std::string_view name() const noexcept { return name_; }
  /// The kind's bit in a shield's 32-bit interest filter (see EventKinds::mask).
  [[nodiscard]] constexpr std::uint32_t bit() const noexcept { return bit_; }
  /// A copy of `detail`, an event of this kind, that owns itself (what a recorder keeps).
  [[nodiscard]] std::shared_ptr<const void> copy(const void* detail) const {
    return copy_(detail);
  }
  friend constexpr bool operator==(const EventKind& a, const EventKind& b) noexcept {
    return a.id_ == b.id_;
  }

 private:
  template <EventDetail D>
  friend constexpr EventKind event_kind() noexcept;
  using Copy = std::shared_ptr<const void> (*)(const void*);
  constexpr EventKind(const void* id, std::uint32_t bit, std::string_view name, Copy copy) noexcept
      : id_(id), bit_(bit), name_(name), copy_(copy) {}

  const void* id_;
  std::uint32_t bit_;
  std::string_view name_;
  Copy copy_;
};

/// The kind of events of type `D`.
template <EventDetail D>
constexpr EventKind event_kind() noexcept {
  return EventKind(&detail::event_tag<D>, detail::event_bit(D::kevlar_event), D::kevlar_event,
                   &detail::copy_event<D>);
}

/// A set of event kinds: what an observer wants (Observer::interests).
///
/// Thread-safety: a value; const members may be called concurrently.
class EventKinds {
 public:
  /// The empty set.
  EventKinds() = default;
  /// Every kind, including those no code has named yet.
  [[nodiscard]] static EventKinds all() {
    EventKinds k;
    k.all_ = true;
    k.mask_ = ~std::uint32_t{0};
    return k;
  }
  /// Adds `kind`.
  EventKinds& add(const EventKind& kind) {
    if (all_ || contains(kind)) return *this;
    kinds_.push_back(kind);
    mask_ |= kind.bit();
    return *this;
  }
  /// Adds every kind of `other`.
  EventKinds& add(const EventKinds& other) {
    if (other.all_) {
      *this = all();
      return *this;
    }
    for (const EventKind& k : other.kinds_) add(k);
    return *this;
  }
  /// True if the set holds `kind`.
  [[nodiscard]] bool contains(const EventKind& kind) const noexcept {
    if (all_) return true;
    if ((mask_ & kind.bit()) == 0) return false;
    for (const EventKind& k : kinds_) {
      if (k == kind) return true;
    }
    return false;
  }
  /// True for the set of every kind.
  [[nodiscard]] bool is_all() const noexcept { return all_; }
  [[nodiscard]] bool empty() const noexcept { return !all_ && kinds_.empty(); }
  /// The union of the kinds' bits: a strategy builds an event of kind K only if `mask() &
  /// K.bit()` (Layer::wants), so a kind the set does not hold may still pass it (two kinds can
  /// share a bit); delivery then checks the kind itself.
  [[nodiscard]] std::uint32_t mask() const noexcept { return mask_; }

 private:
  bool all_ = false;
  std::uint32_t mask_ = 0;
  std::vector<EventKind> kinds_;
};

/// The set holding the kinds of `Details...` (e.g. `event_kinds<RetryScheduled, Rejected>()`).
template <EventDetail... Details>
[[nodiscard]] EventKinds event_kinds() {
  EventKinds k;
  (k.add(event_kind<Details>()), ...);
  return k;
}

// ---- the core's own events ---------------------------------------------------------------------

/// The failure an event is about: an error code or an exception (both empty for a successful
/// result that the clause judged a failure).
struct Failure {
  boost::system::error_code error;
  std::exception_ptr exception;
};

/// An execution (one public execute / execute_async call) completed; emitted once, with the final
/// outcome, after every strategy has had its say (a fallback's recovery is a success).
struct ExecutionFinished {
  static constexpr std::string_view kevlar_event = "ExecutionFinished";
  bool success = false;
  Failure failure;             ///< when not a success
  Clock::duration duration{};  ///< from entering the shield to the final outcome (shield clock)
  std::uint32_t attempts = 0;  ///< user operations started (0: rejected before any ran)
};

/// An attempt of the user's operation is about to start.
struct AttemptStarted {
  static constexpr std::string_view kevlar_event = "AttemptStarted";
  std::uint32_t attempt = 0;  ///< 1 for the first, 2 for the second, ...
};

/// A strategy refused a call without running its inner part (before its rejection hooks): the
/// breaker's and both limiters' rejections share it.
struct Rejected {
  static constexpr std::string_view kevlar_event = "Rejected";
  RejectionKind kind = RejectionKind::concurrency_limit;
  std::optional<Clock::duration> retry_after;  ///< when the strategy expects to admit a call
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
  /// The execution's context (do not keep it); nullptr for an event delivered after the call that
  /// caused it (a BreakerTransition).
  const Context* context = nullptr;

  static constexpr std::size_t no_strategy = std::numeric_limits<std::size_t>::max();
};

/// One event: where it comes from, its kind and what happened (valid only during the delivery).
struct Event {
  EventSource source;
  EventKind kind;
  /// The event's value, of the type `kind` names.
  const void* detail = nullptr;

  /// The value, if this event is of type `D`; nullptr otherwise.
  template <EventDetail D>
  [[nodiscard]] const D* get_if() const noexcept {
    return kind == event_kind<D>() ? static_cast<const D*>(detail) : nullptr;
  }
  /// True if this event is of type `D`.
  template <EventDetail D>
  [[nodiscard]] bool is() const noexcept {
    return kind == event_kind<D>();
  }
};

/// An event of type `D` about `detail`, from `source` (what kevlar's emission points build).
template <EventDetail D>
[[nodiscard]] Event make_event(const D& detail, EventSource source = {}) noexcept {
  return Event{source, event_kind<D>(), &detail};
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
  [[nodiscard]] virtual EventKinds interests() const { return EventKinds::all(); }
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
  [[nodiscard]] const EventKinds& interests() const noexcept { return interests_; }

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
  EventKinds interests_;
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

/// Where a strategy's events go when it emits them later, outside the callback that caused them
/// (a breaker's transitions, delivered by its publication loop): the shield's observers and the
/// strategy's position. Layer::event_origin() gives it; null `observers` when nobody listens.
struct EventOrigin {
  const std::shared_ptr<const ObserverSet>* observers = nullptr;  ///< the causing shield's
  std::size_t strategy_index = EventSource::no_strategy;
  const Strategy* strategy = nullptr;
};

}  // namespace detail
}  // namespace kevlar
