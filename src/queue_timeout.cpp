#include <kevlar/detail/duration_format.hpp>
#include <kevlar/queue_timeout.hpp>

#include <sstream>
#include <stdexcept>

namespace kevlar::detail {
namespace {

void check(Clock::duration d, const char* owner, const char* name) {
  if (d <= Clock::duration::zero() || d > max_duration) {
    std::ostringstream msg;
    msg << owner << "queue_timeout." << name << " must be more than zero and at most "
        << format_duration(max_duration) << " (got " << d.count() << "ns)";
    throw std::invalid_argument(msg.str());
  }
}

}  // namespace

void validate_queue_timeout(const QueueTimeout& timeout, const char* owner) {
  switch (timeout.kind) {
    case QueueTimeout::Kind::none:
      return;
    case QueueTimeout::Kind::fixed:
      check(timeout.max_wait, owner, "max_wait");
      return;
    case QueueTimeout::Kind::adaptive:
      check(timeout.target, owner, "target");
      check(timeout.interval, owner, "interval");
      return;
  }
  std::ostringstream msg;
  msg << owner << "queue_timeout.kind is not one of none, fixed, adaptive (got "
      << static_cast<int>(timeout.kind) << ")";
  throw std::invalid_argument(msg.str());
}

std::string describe_queue_timeout(const QueueTimeout& timeout) {
  switch (timeout.kind) {
    case QueueTimeout::Kind::fixed:
      return "fixed(" + format_duration(timeout.max_wait) + ")";
    case QueueTimeout::Kind::adaptive:
      return "adaptive(" + format_duration(timeout.target) + "/" +
             format_duration(timeout.interval) + ")";
    case QueueTimeout::Kind::none:
      break;
  }
  return "none";
}

Clock::time_point QueueTimeoutPolicy::deadline(Clock::time_point now,
                                               std::uint32_t queued) noexcept {
  if (timeout_.kind == QueueTimeout::Kind::fixed) return now + timeout_.max_wait;
  // Adaptive: the queue has stood since the first of the calls now waiting joined it. A call that
  // finds it empty starts the period; the others read it. Relaxed: a race between two calls
  // joining an empty queue at once moves the start by the time between their clock readings.
  Clock::time_point since = now;
  if (queued == 0) {
    standing_since_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  } else {
    const Clock::time_point recorded{
        Clock::duration(standing_since_.load(std::memory_order_relaxed))};
    if (recorded < now) since = recorded;
  }
  const Clock::time_point shed_at = now + 2 * timeout_.target;
  const Clock::time_point stood = since + timeout_.interval;
  return shed_at > stood ? shed_at : stood;
}

void QueueWaitDeadline::begin(Layer& layer, Clock::time_point deadline,
                              Clock::duration same_duration) {
  deadline_ = deadline;
  if (deadline >= layer.context().deadline()) return;  // an outer deadline comes first: its own
  if (layer.synchronous()) {
    ::new (static_cast<void*>(&saved_)) CallBase::SavedDeadline(layer.lower_deadline(deadline));
    state_ = State::lowered;
    return;
  }
  layer.arm_deadline(slot_, deadline, same_duration, DeadlineAction::cancel_wait);
  state_ = State::armed;
}

bool QueueWaitDeadline::end(Layer& layer, bool aborted) noexcept {
  switch (std::exchange(state_, State::idle)) {
    case State::idle:
      return false;
    case State::armed:
      // Fired and the wait aborted: the expiry ended it. Fired while a grant was on its way: the
      // grant won, the call runs.
      return Layer::disarm_deadline(slot_) && aborted;
    case State::lowered:
      break;
  }
  const CallBase::SavedDeadline saved = saved_;
  layer.restore_deadline(saved);
  return aborted && deadline_ < saved.time && !layer.context().stop_token().stop_requested() &&
         layer.clock().now() >= deadline_;
}

void QueueWaitDeadline::drop() noexcept {
  if (std::exchange(state_, State::idle) == State::armed) (void)Layer::disarm_deadline(slot_);
}

}  // namespace kevlar::detail
