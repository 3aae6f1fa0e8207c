// Observers: event delivery, the engine's timing of executions (ExecutionFinished), and the layer
// kevlar adds to an observed shield (AttemptStarted).
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/observer_layer.hpp>
#include <kevlar/diagnostics.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/strategy.hpp>

#include <new>
#include <utility>

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
    case RejectionKind::throttle:
      return "throttle";
    case RejectionKind::queue_timeout:
      return "queue_timeout";
  }
  return "unknown";
}

std::optional<RejectionKind> rejection_kind(const boost::system::error_code& ec) noexcept {
  if (ec.category() != error_category()) return std::nullopt;
  switch (static_cast<errc>(ec.value())) {
    case errc::circuit_open:
      return RejectionKind::circuit_open;
    case errc::isolated:
      return RejectionKind::isolated;
    case errc::rate_limited:
      return RejectionKind::rate_limit;
    case errc::concurrency_limit_exceeded:
      return RejectionKind::concurrency_limit;
    case errc::throttled:
      return RejectionKind::throttle;
    case errc::queue_timeout:
      return RejectionKind::queue_timeout;
    default:
      return std::nullopt;
  }
}

namespace detail {

void ObserverSet::count_failure() const noexcept {
  if (failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
    const std::lock_guard lock(first_mutex_);
    first_failure_ = std::current_exception();
  }
}

ObserverSet::ObserverSet(std::vector<std::shared_ptr<Observer>> observers,
                         std::optional<std::string> name,
                         const std::vector<std::shared_ptr<Strategy>>& strategies)
    : observers_(std::move(observers)),
      states_(observers_.size(), nullptr),
      name_(std::move(name)),
      strategies_(strategies.begin(), strategies.end()) {
  wants_.reserve(observers_.size());
  for (const std::shared_ptr<Observer>& o : observers_) {
    wants_.push_back(o->interests());
    interests_.add(wants_.back());
  }
}

void ObserverSet::deliver_now(Event& event) const noexcept {
  for (std::size_t i = 0; i < observers_.size(); ++i) {
    if (!wants_[i].contains(event.kind)) continue;
    event.source.observer_state = states_[i];
    try {
      observers_[i]->on_event(event);
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
      for (std::size_t i = 0; i < observers_.size(); ++i) {
        ShieldInfo info{name(), strategies, nullptr};
        try {
          observers_[i]->on_shield(info);
          states_[i] = info.observer_state;
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

/// Delivers `event` to the shield's observers from `call`, naming `strategy` at `strategy_index`
/// as its source (nullptr and EventSource::no_strategy: the execution's own event).
void deliver_from(CallBase& call, Event& event, std::size_t strategy_index,
                  const Strategy* strategy) noexcept {
  const ObserverSet& set = **call.pipeline().observers;
  event.source.shield_name = set.name();
  event.source.strategy_index = strategy_index;
  event.source.strategy = strategy;
  event.source.context = &call.context();
  set.deliver(event);
}

/// The last layer of an observed shield: emits AttemptStarted before each attempt.
class AttemptObserver final : public Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "(observer)"; }
  /// Only on_start: the engine need not call the defaults (see StrategyTraits::needs_finish).
  [[nodiscard]] StrategyTraits traits() const noexcept override {
    StrategyTraits t;
    t.needs_inner_complete = false;
    t.needs_finish = false;
    return t;
  }
  Step on_start(Layer& layer) override {
    // The engine declines an attempt past an enclosing deadline (see CallBase::past_deadline):
    // that one never starts and is not announced. (Emitting announces the shield first.)
    // A synchronous execution declines a later attempt past its deadline the same way (the walk's
    // later rounds: an attempt after another).
    const CallBase& call = *detail::LayerAccess::call(layer);
    if (layer.synchronous() ? layer.context().attempt() != 0 && call.sync_past_deadline()
                            : call.past_deadline()) {
      return Step::run_inner;
    }
    layer.emit(AttemptStarted{layer.context().attempt() + 1});
    return Step::run_inner;
  }
};

}  // namespace

void CallBase::observe_start() noexcept {
  (*pipeline_->observers)->ensure_announced();
  started_ = context_->clock().now().time_since_epoch();
}

void CallBase::observe_finish() noexcept {
  // Observers see what the caller will: the caller's deadline (CallOptions::deadline) reports
  // first, as the execution's delivery (or, synchronously, the shield) would after them. With
  // every layer finished, a deadline left on a synchronous context is the caller's.
  if (async_ != nullptr) {
    if (async_->caller_deadline != nullptr) disarm_caller_deadline(true);
  } else if (context_->deadline_ != Clock::time_point::max()) {
    report_caller_deadline();
  }
  const OutcomeRef outcome(outcome_);
  ExecutionFinished e;
  e.success = outcome.has_value();
  if (!e.success) e.failure = failure_of_outcome(outcome);
  e.duration = context_->clock().now().time_since_epoch() - started_;
  e.attempts = context_->attempt();
  Event event = make_event(e);
  deliver_from(*this, event, EventSource::no_strategy, nullptr);
}

Strategy& attempt_observer() noexcept {
  static AttemptObserver instance;
  return instance;
}

}  // namespace detail

void Layer::emit_event(Event& event) const noexcept {
  // The attempt observer's events are the execution's own: it is no strategy.
  const bool own = entry_->observer_layer;
  detail::deliver_from(*call_, event, own ? EventSource::no_strategy : strategy_index(),
                       own ? nullptr : entry_->strategy);
}

detail::EventOrigin Layer::event_origin() const noexcept {
  const auto* observers = call_->pipeline().observers;
  if (observers == nullptr) return {};
  return {observers, strategy_index(), entry_->strategy};
}

}  // namespace kevlar
