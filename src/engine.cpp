// The engine: one machine decides every execution, synchronous or asynchronous; two shells perform
// what it decides.
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/trampoline.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace kevlar {

bool Layer::judge() const noexcept {
  const Clause* clause = entry_->clause;
  try {
    return clause->handles(outcome());
  } catch (...) {
    call_->outcome().set_exception(std::current_exception());
    return false;
  }
}

namespace detail {
namespace {

/// Marks `call` as the execution whose engine runs on this thread.
class RunningScope {
 public:
  explicit RunningScope(const CallBase* call) noexcept
      : previous_(std::exchange(tl_running_call, call)) {}
  ~RunningScope() { tl_running_call = previous_; }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  const CallBase* previous_;
};

}  // namespace

Step call_on_inner_complete(Strategy& strategy, Layer& layer) {
  return strategy.on_inner_complete(layer);
}

void call_on_finish(Strategy& strategy, Layer& layer) noexcept {
  strategy.on_finish(layer);
}

Step CallBase::dispatch_attempt_complete(std::size_t index, std::uint32_t id) {
  Layer layer(*this, index);
  try {
    return layers_[index].strategy->on_attempt_complete(layer, id);
  } catch (...) {
    return fail_layer(index, std::current_exception());
  }
}

inline Step CallBase::dispatch_wait_complete(std::size_t index,
                                             const boost::system::error_code& ec) {
  Layer layer(*this, index);
  try {
    return layers_[index].strategy->on_wait_complete(layer, ec);
  } catch (...) {
    return fail_layer(index, std::current_exception());
  }
}

Step CallBase::fail_layer(std::size_t index, std::exception_ptr ep) noexcept {
  (void)index;
  outcome_.set_exception(std::move(ep));
  // A coroutine the callback left with Layer::await before it threw is released unstarted (the
  // step of a wait or a queue that has ended releases nothing).
  if (StepTarget* target = StepAccess::target(pending_step_)) [[unlikely]] {
    if (target->step_ops->discard != nullptr) target->step_ops->discard(*target, *this);
  }
  return Step::complete;
}

// ---- the machine: events in, actions out -------------------------------------------------------
//
// advance() takes the step a strategy returned for the layer at depth_ and calls the strategies'
// callbacks until the execution needs something from outside: an operation started, a wait armed,
// a pending wait or attempts left alone, the outcome delivered, the execution given up. It performs
// none of these itself; the shells below do, each in its own way (the synchronous one on the
// calling thread, the asynchronous one through Asio), and feed the result back as the next event.

EngineAction CallBase::advance(Step step) {
  const std::size_t n = pipeline_->size;
  // The loop carries the step (one word) and switches on its tag; a step whose argument the shell
  // needs (a wait's deadline, a queue) is kept in the execution where the machine returns it.
  for (;;) {
    switch (StepAccess::tag(step)) {
      case Step::Kind::run_inner: {
        if (depth_ == attempt_layer_) [[unlikely]] {
          if (!leave_parked_layer()) {
            step = refuse_step_with_attempts(Step::Kind::run_inner);
            continue;
          }
        }
        const std::size_t next = depth_ + 1;  // no_layer + 1 wraps to 0
        if (next < n) {
          depth_ = next;
          step = dispatch_start(next);
          continue;
        }
        if (n != 0 && past_deadline()) {
          // An enclosing deadline passed while this execution waited: the attempt never starts,
          // and fails as the deadline owner's expiry would have cancelled it (the layers inside
          // the owner see a cancellation from outside, the owner its own).
          if (deadline_owner_ != no_layer) {
            // The caller's own deadline (CallOptions::deadline) cancels as the caller does.
            const std::size_t origin =
                deadline_owner_ == caller_deadline_owner ? 0 : deadline_owner_ + 1;
            if (cancel_origin_ == no_layer || cancel_origin_ > origin) cancel_origin_ = origin;
          }
          context_->cancel_requested_ = true;
          outcome_.set_error(boost::asio::error::operation_aborted);
          if (n == first_) return EngineAction::deliver;  // no layer of its own
          depth_ = n - 1;
          step = dispatch_inner_complete(depth_);
          continue;
        }
        depth_ = n;
        count_attempt();
        return EngineAction::start_operation;
      }
      case Step::Kind::complete:
        if (depth_ == attempt_layer_) [[unlikely]] release_attempts(true);
        finish_layer(depth_);
        if (depth_ == first_) return EngineAction::deliver;
        --depth_;
        step = dispatch_inner_complete(depth_);
        continue;
      case Step::Kind::wait:
        if (depth_ == attempt_layer_) [[unlikely]] {
          if (!leave_parked_layer()) {
            step = refuse_step_with_attempts(Step::Kind::wait);
            continue;
          }
        }
        pending_step_ = step;  // the shell waits until its deadline (wait_deadline())
        return EngineAction::wait;
      case Step::Kind::queue:  // the tag of a step that points at an object reads as suspend
      case Step::Kind::await:
      case Step::Kind::suspend:
        if (StepTarget* target = StepAccess::target(step)) [[unlikely]] {
          // A step that points at a queue or a coroutine: the shell starts it (pending_target()).
          if (depth_ == attempt_layer_ && !leave_parked_layer()) {
            if (target->step_ops->discard != nullptr) target->step_ops->discard(*target, *this);
            step = refuse_step_with_attempts(static_cast<Step::Kind>(target->step_ops->kind));
            continue;
          }
          pending_step_ = step;
          return EngineAction::start_step;
        }
        if (depth_ == attempt_layer_) [[unlikely]] {
          // The parked layer's callback returned: completions it caused were queued.
          Attempts& a = async_->attempts;
          a.busy = false;
          if (a.abandoned) return EngineAction::abandon;  // an attempt's executor shut down
          if (!a.done.empty()) {
            step = report_attempt();
            continue;
          }
        }
        return EngineAction::pending;  // the parked layer's attempts own the execution
    }
  }
}

EngineAction CallBase::operation_done() {
  // depth_ is the pipeline's size: the attempt (this execution's innermost part) has its outcome.
  if (pipeline_->size == first_) return EngineAction::deliver;  // no layer of its own
  depth_ = pipeline_->size - 1;
  return advance(dispatch_inner_complete(depth_));
}

EngineAction CallBase::wait_done(const boost::system::error_code& ec) {
  return advance(dispatch_wait_complete(depth_, ec));
}

// ---- the synchronous shell ----------------------------------------------------------------------
//
// The walk itself is SyncCall::run (detail/sync_call.hpp), compiled for each call's type; what it
// shares with the asynchronous machine (the dispatchers) is inline in <kevlar/strategy.hpp>.

Step CallBase::sync_wait(std::size_t index, Step step) {
  if (StepTarget* target = StepAccess::target(step)) {
    // A queue step (its own blocking wait, ended by the caller's stop and the context's deadline)
    // or an await step (the coroutine run to completion on this thread).
    boost::system::error_code ec;
    try {
      ec = target->step_ops->block(*target, *this);
    } catch (...) {
      return fail_layer(index, std::current_exception());
    }
    return dispatch_wait_complete(index, ec);
  }
  if (step.kind() != Step::Kind::wait) {
    // The machine's pending: only attempts leave a step pending.
    return fail_layer(index, std::make_exception_ptr(std::logic_error(
                                 "kevlar: a strategy returned Step::suspend from a synchronous "
                                 "execution")));
  }
  // A deadline set for the running attempt (a synchronous timeout) cuts it short.
  const Clock::time_point wanted = step.deadline();
  const Clock::time_point until = std::min(wanted, context_->deadline_);
  const bool reached = context_->clock().sleep_until(until, context_->stop_token());
  // Aborted if stopped, or if the deadline ended the wait: cut short, or due at the same moment
  // (the strategy must not start an attempt past the deadline).
  const bool aborted = !reached || context_->deadline_ <= wanted;
  return dispatch_wait_complete(
      index, aborted ? boost::system::error_code(boost::asio::error::operation_aborted)
                     : boost::system::error_code());
}

bool CallBase::sync_declines_attempt() noexcept {
  if (!sync_past_deadline()) {
    count_attempt();
    return false;
  }
  outcome_.set_error(boost::asio::error::operation_aborted);
  return true;
}

// ---- the asynchronous shell ---------------------------------------------------------------------

KEVLAR_DETAIL_ALWAYS_INLINE inline void CallBase::perform(EngineAction action) {
  for (;;) {
    switch (action) {
      case EngineAction::start_operation:
        if (start_operation()) return;  // the operation's handler now owns the execution
        // The initiation threw and destroyed its handler: the attempt failed with the exception.
        action = operation_done();
        continue;
      case EngineAction::wait:
        if (start_wait()) return;  // the timer's handler now owns the execution
        // Arming the timer threw: the waiting layer failed with the exception (its outcome now).
        action = advance(Step::complete);
        continue;
      case EngineAction::pending:
        return;
      case EngineAction::start_step: {
        boost::system::error_code decided;
        switch (start_step(decided)) {
          case Started::pending:
            return;  // the queue, or the wait's handler, owns the execution now
          case Started::decided:
            // Decided under the semaphore's lock (a permit came free, the queue is full, closed):
            // the layer hears of it now, without a hop.
            action = wait_done(decided);
            continue;
          case Started::failed:
            action = advance(Step::complete);  // the waiting layer failed with the exception
            continue;
        }
        return;
      }
      case EngineAction::deliver:
        if (pipeline_->observes_executions && first_ == 0) observe_finish();
        deliver();  // the execution is destroyed here
        return;
      case EngineAction::abandon:
        abandon_execution();
        return;
    }
  }
}

void CallBase::run(Step step) {
  RunningScope scope(this);
  perform(advance(step));
}

Step CallBase::refuse_step_with_attempts(Step::Kind kind) noexcept {
  outcome_.set_exception(std::make_exception_ptr(std::logic_error(
      kind == Step::Kind::run_inner
          ? "kevlar: a strategy returned Step::run_inner while attempts it started are running "
            "(start another with Layer::start_attempt)"
      : kind == Step::Kind::wait
          ? "kevlar: a strategy returned Step::wait_until while attempts it started are running "
            "(arm its wait through the deadline service and return Step::suspend)"
          : kind == Step::Kind::queue
          ? "kevlar: a strategy returned Step::queue while attempts it started are running"
          : "kevlar: a strategy returned Layer::await's step while attempts it started are "
            "running")));
  return Step::complete;
}

bool CallBase::start_operation() {
  step_dropped_ = false;
  try {
    invoke_operation();
    return true;  // nothing of the execution may be touched now: the handler owns it
  } catch (...) {
    // Asio's rule: an initiation that throws has destroyed its handler without invoking it. The
    // handler saw this engine on the stack and left the execution to it (step_dropped_). If the
    // handler still lives, it owns the execution: the exception is the initiating caller's.
    if (!step_dropped_) throw;
    outcome_.set_exception(std::current_exception());
    return false;
  }
}

bool CallBase::start_wait() {
  // A ClockTimer whose wait throws has not kept its handler (a destroyed handler's abandon() sees
  // this engine on the stack and leaves the execution to it), so the execution is still the
  // engine's: the waiting layer fails with the exception, as if its hook had thrown.
  try {
    std::unique_ptr<ClockTimer>& timer = async_->timer;
    if (!timer) timer = context_->clock().make_timer(call_executor());
    timer->async_wait_until(wait_deadline(), *this);
    return true;  // nothing of the execution may be touched now: the handler owns it
  } catch (...) {
    step_completed();  // a cancellation handler the failed wait installed must not stay
    (void)fail_layer(depth_, std::current_exception());
    return false;
  }
}

CallBase::Started CallBase::start_step(boost::system::error_code& decided) {
  StepTarget& target = pending_target();
  step_dropped_ = false;
  try {
    return target.step_ops->start(target, *this, decided) ? Started::pending : Started::decided;
  } catch (...) {
    // As for an operation (start_operation): an initiation that throws has destroyed its
    // handler, which saw this engine on the stack and left the execution to it.
    if (!step_dropped_) throw;
    step_completed();  // a cancellation handler the failed wait installed must not stay
    (void)fail_layer(depth_, std::current_exception());
    return Started::failed;
  }
}

void CallBase::operation_completed() {
  const DeferredChecks::Scope checks;  // after the level: they run once its deliveries have
  // If the step throws, the level's destructor sends its deliveries through their executors.
  TrampolineLevel level(this, &CallBase::resolve_trampoline, tl_initiating_call != nullptr);
  resume_after_operation();
  level.drain();
}

void CallBase::wait_completed(const boost::system::error_code& ec) {
  const DeferredChecks::Scope checks;  // after the level: they run once its deliveries have
  // If the step throws, the level's destructor sends its deliveries through their executors.
  TrampolineLevel level(this, &CallBase::resolve_trampoline, tl_initiating_call != nullptr);
  resume_after_wait(ec);
  level.drain();
}

void CallBase::resume_after_operation() {
  step_completed();
  resumed_ = true;
  RunningScope scope(this);
  perform(operation_done());
}

void CallBase::resume_after_wait(const boost::system::error_code& ec) {
  step_completed();
  resumed_ = true;
  // The parked layer's own wait (a hedge's stagger): completions during its callback are queued.
  if (depth_ == attempt_layer_) [[unlikely]] async_->attempts.busy = true;
  RunningScope scope(this);
  perform(wait_done(ec));
}

void CallBase::abandon_execution() noexcept {
  // A synchronous execution has nothing pending to abandon, and its machine fields are unset.
  if (async_ == nullptr) return;
  const DeferredChecks::Scope checks;
  // The attempts a parked layer runs belong to the same executor, which is shutting down: they
  // are detached (not cancelled) and end on their own.
  if (attempt_layer_ != no_attempt_layer) release_attempts(false);
  if (depth_ != no_layer && pipeline_->size > first_) {
    for (std::size_t i = std::min(depth_, pipeline_->size - 1) + 1; i-- > first_;) finish_layer(i);
  }
  if (node_ != nullptr && node_->parent != nullptr) {
    // An attempt that never completes leaves the execution that started it unable to complete.
    CallBase* parent = std::exchange(node_->parent, nullptr);
    parent->attempt_abandoned(*node_);
  }
  if (async_->caller_deadline != nullptr) disarm_caller_deadline(false);
  destroy();
}

void CallBase::emit_step(boost::asio::cancellation_type type) noexcept {
  if (async_ == nullptr) return;  // a synchronous execution sees it through Context::cancelled()
  if (attempt_layer_ != no_attempt_layer) [[unlikely]] {
    forward_cancellation(type);  // the parked layer's attempts are the pending steps
    return;
  }
  // Only the pending step's slot holds a handler (step_completed() clears both), and the emit is
  // the last thing that touches this execution: an operation may complete inside its
  // cancellation handler, and the execution can be destroyed before emit() returns.
  if (async_->inline_cancellation.has_handler()) {
    async_->inline_cancellation.emit(type);
    return;
  }
  async_->step_signal.emit(type);
}

void CallBase::step_completed() noexcept {
  // An operation need not clear the handler it installed in its slot when it completes (Asio's
  // timers do not); a later cancellation must not reach it once the next step is pending.
  async_->step_signal.slot().clear();
  async_->inline_cancellation.clear();
}

void CallBase::cancel_from_caller(boost::asio::cancellation_type type) noexcept {
  cancel_origin_ = 0;
  context_->cancel_requested_ = true;
  const TrampolineSuppressed suppressed;  // an operation completing in its handler drains nothing
  emit_step(type);
}

void CallBase::cancel_own_wait(boost::asio::cancellation_type type) noexcept {
  const TrampolineSuppressed suppressed;
  emit_step(type);
}

void CallBase::cancel_inner(std::size_t origin, boost::asio::cancellation_type type) noexcept {
  if (cancel_origin_ == no_layer || cancel_origin_ > origin + 1) cancel_origin_ = origin + 1;
  context_->cancel_requested_ = true;
  const TrampolineSuppressed suppressed;
  emit_step(type);
}

}  // namespace detail
}  // namespace kevlar
