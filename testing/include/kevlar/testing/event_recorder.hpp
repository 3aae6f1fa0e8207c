// kevlar — testing kit: an observer that records every event a shield emits, as values.
#pragma once

#include <kevlar/observer.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kevlar::testing {

/// An event's value, copied when it was delivered: its kind and a copy that owns itself, of any
/// event type (kevlar's or a user strategy's own).
///
/// Thread-safety: immutable; copies share the value.
class RecordedDetail {
 public:
  /// A copy of `event`'s value.
  explicit RecordedDetail(const Event& event)
      : kind_(event.kind), value_(event.kind.copy(event.detail)) {}
  /// A copy of `detail`.
  template <EventDetail D>
  explicit RecordedDetail(const D& detail)
      : kind_(event_kind<D>()), value_(event_kind<D>().copy(&detail)) {}

  [[nodiscard]] const EventKind& kind() const noexcept { return kind_; }
  /// The kind's name (`RetryScheduled`).
  [[nodiscard]] std::string_view name() const noexcept { return kind_.name(); }
  /// The value, if it is of type `D`; nullptr otherwise.
  template <EventDetail D>
  [[nodiscard]] const D* get_if() const noexcept {
    return kind_ == event_kind<D>() ? static_cast<const D*>(value_.get()) : nullptr;
  }
  /// True if the value is of type `D`.
  template <EventDetail D>
  [[nodiscard]] bool is() const noexcept {
    return kind_ == event_kind<D>();
  }

 private:
  EventKind kind_;
  std::shared_ptr<const void> value_;
};

/// One event, copied when it was delivered: nothing in it refers to the shield, the strategy or
/// the execution (their pointers are not kept; the failure's exception_ptr is a value).
struct RecordedEvent {
  std::uint64_t sequence = 0;  ///< 0, 1, 2... in the order the recorder received the events
  /// The shield's name (Shield::with_name), if it has one.
  std::optional<std::string> shield_name;
  /// Position of the strategy in the shield (EventSource::no_strategy for ExecutionFinished and
  /// AttemptStarted).
  std::size_t strategy_index = EventSource::no_strategy;
  /// Context::attempt() of the execution when the event was emitted (none for a
  /// BreakerTransition, which has no context).
  std::optional<std::uint32_t> context_attempt;
  RecordedDetail detail;  ///< what happened
};

/// The name of the event's kind (its type's `kevlar_event`): `ExecutionFinished`,
/// `AttemptStarted`, `RetryScheduled`, `TimeoutFired`, `FallbackTaken`, `Rejected`,
/// `BreakerTransition`, `LimiterStateChanged`, `HedgeLaunched`, `ChaosInjected`, or a user
/// strategy's own.
[[nodiscard]] const char* event_name(const RecordedDetail& detail) noexcept;
/// `#3 RetryScheduled @1`: sequence, kind and strategy index.
std::ostream& operator<<(std::ostream& os, const RecordedEvent& e);

/// An Observer that records every event of the shields it observes, in the order it receives
/// them, with values copied at delivery (it never keeps a Context, a strategy or a reference).
/// Attach it with Shield::observed_by:
/// ```
/// auto events = std::make_shared<kevlar::testing::EventRecorder>();
/// const kevlar::Shield shield = kevlar::Shield{}.retry(2).observed_by(events);
/// ...
/// EXPECT_EQ(events->count_of<kevlar::RetryScheduled>(), 2u);
/// ```
/// The StrategyDriver records its execution's events with one (StrategyDriver::recorder).
///
/// Thread-safety: every member may be called from any thread; executions on several threads
/// deliver concurrently and are recorded in the order the recorder's lock admits them (the events
/// of one execution keep their order).
class EventRecorder final : public Observer {
 public:
  /// Records every event kind, or only those in `interests` (a shield then builds no other
  /// event for it).
  explicit EventRecorder(EventKinds interests = EventKinds::all()) noexcept
      : interests_(std::move(interests)) {}

  void on_event(const Event& event) override;
  [[nodiscard]] EventKinds interests() const override { return interests_; }

  /// Every event recorded so far, in order (a copy).
  [[nodiscard]] std::vector<RecordedEvent> events() const;
  /// The details of every event recorded so far, in order (a copy).
  [[nodiscard]] std::vector<RecordedDetail> details() const;
  /// The details of the events of kind `Detail`, in order.
  template <class Detail>
  [[nodiscard]] std::vector<Detail> events_of() const {
    std::vector<Detail> r;
    const std::lock_guard lock(mutex_);
    for (const RecordedEvent& e : events_) {
      if (const Detail* d = e.detail.get_if<Detail>()) r.push_back(*d);
    }
    return r;
  }
  /// The number of events of kind `Detail` recorded so far.
  template <class Detail>
  [[nodiscard]] std::size_t count_of() const {
    std::size_t n = 0;
    const std::lock_guard lock(mutex_);
    for (const RecordedEvent& e : events_) n += e.detail.is<Detail>() ? 1 : 0;
    return n;
  }
  /// The number of events recorded so far.
  [[nodiscard]] std::size_t size() const;
  /// Forgets the events recorded so far (sequence numbers go on).
  void clear();
  /// Blocks until at least `n` events were recorded (signalled by on_event, no polling), or until
  /// the 5 s watchdog, which only bounds a deadlock; returns whether `n` were reached. For events
  /// delivered on other threads.
  bool wait_for_count(std::size_t n) const;

 private:
  EventKinds interests_;
  mutable std::mutex mutex_;
  mutable std::condition_variable recorded_;
  std::vector<RecordedEvent> events_;
  std::uint64_t next_sequence_ = 0;
};

}  // namespace kevlar::testing
