// The circuit breaker's ordered publisher of state changes: observers, shield observers and the
// asynchronous hook's lane.
#include <kevlar/detail/state_change_publisher.hpp>
#include <kevlar/detail/run_to_completion.hpp>

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace kevlar::detail {

StateChangePublisher::StateChangePublisher(const void* machine, Observer first, AsyncHook hook)
    : machine_(machine), hook_(std::move(hook)) {
  auto observers = std::make_shared<std::vector<Observer>>();
  if (first) observers->push_back(std::move(first));
  observers_ = std::move(observers);
}

StateChangePublisher::~StateChangePublisher() = default;

void StateChangePublisher::subscribe(Observer observer) {
  if (!observer) throw std::invalid_argument("kevlar::CircuitBreaker::subscribe: empty observer");
  std::lock_guard lock(mutex_);
  auto next = std::make_shared<std::vector<Observer>>(*observers_);
  next->push_back(std::move(observer));
  observers_ = std::move(next);
}

std::uint64_t StateChangePublisher::enqueue(const CircuitStateChange& change) {
  std::lock_guard lock(mutex_);
  const std::uint64_t seq = next_seq_;
  // A change made from inside an observer (reentrant) belongs to the change being delivered.
  const bool reentrant = publishing_ && publisher_ == std::this_thread::get_id();
  // The causing call's shield, if observed (set by the strategy around its calls into the core).
  const TransitionSource& tl = tl_transition_source;
  const bool ours = tl.machine == machine_ && tl.origin.observers != nullptr;
  queue_.push_back(Event{change, seq, reentrant ? delivering_owner_ : seq,
                         ours ? *tl.origin.observers : nullptr,
                         ours ? tl.origin.strategy_index : EventSource::no_strategy,
                         ours ? tl.origin.strategy : nullptr});
  ++next_seq_;
  return seq;
}

std::vector<std::exception_ptr> StateChangePublisher::notify(const std::vector<Observer>& observers,
                                                             const Event& e) {
  // The callbacks below are not the call that caused this change: a change they make (reset() or
  // isolate() from a hook) is made by hand.
  const TransitionScope by_hand{TransitionSource{}};
  std::vector<std::exception_ptr> failed;
  for (const Observer& o : observers) {
    try {
      o(e.change);
    } catch (...) {
      try {
        failed.push_back(std::current_exception());
      } catch (...) {  // std::bad_alloc: the observer's exception is lost, nothing else
      }
    }
  }
  if (e.shield_observers) {  // never throws: a shield observer's exception is swallowed
    EventSource source;
    source.shield_name = e.shield_observers->name();
    source.strategy_index = e.strategy_index;
    source.strategy = e.strategy;
    kevlar::Failure failure;
    if (e.change.to == CircuitState::open) {
      failure = kevlar::Failure{e.change.last_error, e.change.last_exception};
    }
    const BreakerTransition transition{e.change.from, e.change.to, failure};
    kevlar::Event event = make_event(transition, source);
    e.shield_observers->deliver(event);
  }
  return failed;
}

void StateChangePublisher::deliver(std::uint64_t ticket) {
  if (ticket == 0) return;
  std::vector<std::exception_ptr> mine;
  bool claimed = false;
  // An asynchronous execution that awaits the state-change hooks itself, if they come to this
  // caller (read before the observers run under scopes of their own).
  bool* const lane_claim =
      tl_transition_source.machine == machine_ ? tl_transition_source.lane_claim : nullptr;
  {
    std::unique_lock lock(mutex_);
    const std::thread::id me = std::this_thread::get_id();
    // Reentrant: the change is queued behind the one being delivered, by this very thread.
    if (publishing_ && publisher_ == me) return;
    const auto delivered = [&] {
      if (delivered_seq_ < ticket || delivering_owner_ == ticket) return false;
      return std::none_of(queue_.begin(), queue_.end(),
                          [&](const Event& e) { return e.owner == ticket; });
    };
    while (!delivered()) {
      if (publishing_) {  // another thread delivers; wait until it delivered this change
        delivered_.wait(lock);
        continue;
      }
      publishing_ = true;
      publisher_ = me;
      while (!queue_.empty()) {
        Event e = std::move(queue_.front());
        queue_.pop_front();
        delivering_owner_ = e.owner;
        const std::shared_ptr<const std::vector<Observer>> observers = observers_;
        lock.unlock();
        std::vector<std::exception_ptr> failed = notify(*observers, e);
        lock.lock();
        for (std::exception_ptr& ep : failed) {
          try {
            observer_failures_.emplace_back(e.owner, std::move(ep));
          } catch (...) {
          }
        }
        if (hook_) {
          try {
            lane_.push_back(e.change);  // its hook is awaited next, by the lane's holder
          } catch (...) {               // std::bad_alloc: the hook misses this change, nothing else
          }
        }
        delivered_seq_ = e.seq;
        delivering_owner_ = 0;
        delivered_.notify_all();
      }
      publishing_ = false;
      publisher_ = std::thread::id();
      delivered_.notify_all();
    }
    for (auto it = observer_failures_.begin(); it != observer_failures_.end();) {
      if (it->first == ticket) {
        mine.push_back(std::move(it->second));
        it = observer_failures_.erase(it);
      } else {
        ++it;
      }
    }
    if (!lane_.empty() && !lane_busy_) {  // take the lane: this caller awaits the hooks
      lane_busy_ = true;
      claimed = true;
      if (lane_claim != nullptr) {  // the failures so far wait for the hooks' (no allocation)
        lane_failures_ = std::move(mine);
        *lane_claim = true;
        return;
      }
    }
  }
  if (claimed) {
    pump_lane(std::move(mine));
    return;
  }
  throw_failures(std::move(mine));
}

void StateChangePublisher::throw_failures(std::vector<std::exception_ptr> failures) {
  if (failures.size() == 1) std::rethrow_exception(failures.front());
  if (failures.size() > 1) throw CircuitObserverErrors(std::move(failures));
}

void StateChangePublisher::pump_lane(std::vector<std::exception_ptr> failures) {
  for (;;) {
    std::optional<CircuitStateChange> change;
    {
      std::lock_guard lock(mutex_);
      if (lane_.empty()) {
        lane_busy_ = false;
        break;
      }
      change.emplace(std::move(lane_.front()));
      lane_.pop_front();
    }
    // Not the call that caused the change: a change the hook makes is made by hand.
    const TransitionScope by_hand{TransitionSource{}};
    std::exception_ptr failure;
    try {
      detail::run_to_completion(hook_(std::move(*change)));
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure) {
      try {
        failures.push_back(std::move(failure));
      } catch (...) {  // std::bad_alloc: this hook's exception is lost, nothing else
      }
    }
  }
  throw_failures(std::move(failures));
}

bool StateChangePublisher::next_lane_change(CircuitStateChange& change,
                                            std::vector<std::exception_ptr>& failures) {
  std::lock_guard lock(mutex_);
  if (lane_.empty()) {
    lane_busy_ = false;
    failures = std::move(lane_failures_);
    lane_failures_.clear();
    return false;
  }
  change = std::move(lane_.front());
  lane_.pop_front();
  return true;
}

void StateChangePublisher::lane_hook_failed(std::exception_ptr failure) noexcept {
  std::lock_guard lock(mutex_);
  try {
    lane_failures_.push_back(std::move(failure));
  } catch (...) {  // std::bad_alloc: this hook's exception is lost, nothing else
  }
}

void StateChangePublisher::abandon_lane() noexcept {
  std::lock_guard lock(mutex_);
  lane_busy_ = false;
  lane_failures_.clear();
}

}  // namespace kevlar::detail
