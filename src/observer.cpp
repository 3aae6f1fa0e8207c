// Observers: event delivery, and the two layers kevlar adds to an observed shield.
#include <kevlar/detail/observer_layers.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/strategy.hpp>

#include <new>

namespace kevlar {

const char* to_string(RejectionKind kind) noexcept {
  switch (kind) {
    case RejectionKind::circuit_open:
      return "circuit_open";
    case RejectionKind::isolated:
      return "isolated";
    case RejectionKind::rate_limit:
      return "rate_limit";
    case RejectionKind::concurrency_limit:
      return "concurrency_limit";
  }
  return "unknown";
}

namespace detail {

void ObserverSet::count_failure() const noexcept {
  if (failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
    const std::lock_guard lock(first_mutex_);
    first_failure_ = std::current_exception();
  }
}

void ObserverSet::deliver_now(const Event& event) const noexcept {
  for (const std::shared_ptr<Observer>& o : observers_) {
    try {
      o->on_event(event);
    } catch (...) {
      count_failure();
    }
  }
}

void ObserverSet::announce() const noexcept {
  try {
    const std::lock_guard lock(announce_mutex_);
    if (announced_.load(std::memory_order_relaxed) || announcing_) return;
    announcing_ = true;
    try {
      std::vector<std::shared_ptr<Strategy>> strategies;
      strategies.reserve(strategies_.size());
      for (const std::weak_ptr<Strategy>& s : strategies_) strategies.push_back(s.lock());
      const ShieldInfo info{name(), strategies};
      for (const std::shared_ptr<Observer>& o : observers_) {
        try {
          o->on_shield(info);
        } catch (...) {
          count_failure();
        }
      }
    } catch (...) {  // bad_alloc building the list: the shield goes unannounced
      count_failure();
    }
    announcing_ = false;
    announced_.store(true, std::memory_order_release);
  } catch (...) {  // the mutex could not be locked
    count_failure();
  }
}

std::exception_ptr ObserverSet::first_failure() const {
  const std::lock_guard lock(first_mutex_);
  return first_failure_;
}

Failure failure_of_outcome(OutcomeRef outcome) noexcept {
  Failure f;
  if (outcome.has_exception()) {
    f.exception = outcome.exception();
  } else if (outcome.has_error()) {
    f.error = outcome.error();
  }
  return f;
}

namespace {

/// Layer 0 of an observed shield: measures the execution and emits ExecutionFinished.
class ExecutionObserver final : public Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "(observer)"; }
  [[nodiscard]] StrategyTraits traits() const noexcept override {
    return {StrategyRole::proactive, false, sizeof(Clock::time_point), false};
  }
  Step on_start(Layer& layer) override {
    ::new (layer.frame()) Clock::time_point(layer.clock().now());
    return Step::run_inner;
  }
  Step on_inner_complete(Layer& layer) override {
    const Clock::time_point start = layer.frame_as<Clock::time_point>();
    ExecutionFinished e;
    const OutcomeRef outcome = layer.outcome();
    e.success = outcome.has_value();
    if (!e.success) e.failure = failure_of_outcome(outcome);
    e.duration = layer.clock().now() - start;
    e.attempts = layer.context().attempt();
    layer.emit(std::move(e));
    return Step::complete;
  }
};

/// The last layer of an observed shield: emits AttemptStarted before each attempt.
class AttemptObserver final : public Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "(observer)"; }
  Step on_start(Layer& layer) override {
    // The engine declines an attempt past an enclosing deadline (see CallBase::past_deadline):
    // that one never starts and is not announced.
    if (!layer.synchronous() && layer.call()->past_deadline()) return Step::run_inner;
    layer.emit(AttemptStarted{layer.context().attempt() + 1});
    return Step::run_inner;
  }
};

}  // namespace

Strategy& execution_observer() noexcept {
  static ExecutionObserver instance;
  return instance;
}

Strategy& attempt_observer() noexcept {
  static AttemptObserver instance;
  return instance;
}

}  // namespace detail

void Layer::emit_event(Event::Detail detail) const noexcept {
  const detail::ObserverSet& set = **call_->pipeline().observers;
  // Layer 0 is the execution observer; the user's strategy i is layer i + 1.
  const bool own = index_ == 0 || index_ + 1 == call_->pipeline().size;
  EventSource source;
  source.shield_name = set.name();
  source.strategy_index = own ? EventSource::no_strategy : strategy_index();
  source.strategy = own ? nullptr : entry_->strategy;
  source.context = &call_->context();
  set.deliver(Event{source, std::move(detail)});
}

detail::TransitionSource Layer::transition_source() const noexcept {
  const auto* observers = call_->pipeline().observers;
  if (observers == nullptr) return {};
  return {observers, strategy_index(), entry_->strategy};
}

}  // namespace kevlar
