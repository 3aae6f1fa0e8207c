// The engine: one trampoline drives every execution, synchronous or asynchronous.
#include <kevlar/detail/call_base.hpp>
#include <kevlar/detail/trampoline.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/error.hpp>

#include <algorithm>
#include <stdexcept>

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

inline Step CallBase::dispatch_start(std::size_t index) {
  Layer layer(*this, index);
  try {
    return layers_[index].strategy->on_start(layer);
  } catch (...) {
    return fail_layer(index, std::current_exception());
  }
}

inline Step CallBase::dispatch_inner_complete(std::size_t index) {
  Layer layer(*this, index);
  try {
    return layers_[index].strategy->on_inner_complete(layer);
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
  return Step::complete;
}

void CallBase::finish_layer(std::size_t index) noexcept {
  Layer layer(*this, index);
  layers_[index].strategy->on_finish(layer);
  // A cancellation this layer started for its inner part ends with it (a retry outside a timeout
  // starts its next attempt uncancelled).
  if (cancel_origin_ == index + 1) {
    cancel_origin_ = no_layer;
    context_->cancel_requested_ = false;
  }
}

void CallBase::run(Step step) {
  RunningScope scope(this);
  run_steps(step);
}

void CallBase::run_sync() {
  // The synchronous trampoline: the steps of run_steps without the branches of pending
  // asynchronous steps (an operation's or a timer's handler owning the execution), and without
  // the thread-local marker, which only handlers of asynchronous steps read. Each layer runs in a
  // frame of its own (the depth is the C++ stack's, at most the pipeline's length).
  if (pipeline_->size == 0) {
    run_attempt_sync();
    return;  // the caller takes the outcome from here
  }
  run_layer_sync(0);
}

inline void CallBase::run_attempt_sync() {
  ++context_->attempt_;
  invoke_operation();
}

void CallBase::run_layer_sync(std::size_t index) {
  // depth_ is left alone: only the asynchronous paths (a pending step, abandonment) read it.
  Step step = dispatch_start(index);
  for (;;) {
    if (step == Step::run_inner) {
      if (index + 1 < pipeline_->size) {
        run_layer_sync(index + 1);
      } else {
        run_attempt_sync();
      }
      step = dispatch_inner_complete(index);
    } else if (step == Step::complete) {
      finish_layer(index);
      return;
    } else {
      step = sync_wait(index, step);
    }
  }
}

Step CallBase::sync_wait(std::size_t index, Step step) {
  if (step == Step::suspend) {
    return fail_layer(index, std::make_exception_ptr(std::logic_error(
                                 "kevlar: a strategy returned Step::suspend from a synchronous "
                                 "execution")));
  }
  // Step::wait. A deadline set for the running attempt (a synchronous timeout) cuts it short.
  const Clock::time_point until = std::min(wait_deadline_, context_->deadline_);
  const bool reached = context_->clock().sleep_until(until, context_->stop_token());
  // Aborted if stopped, or if the deadline ended the wait: cut short, or due at the same moment
  // (the strategy must not start an attempt past the deadline).
  const bool aborted = !reached || context_->deadline_ <= wait_deadline_;
  return dispatch_wait_complete(
      index, aborted ? boost::system::error_code(boost::asio::error::operation_aborted)
                     : boost::system::error_code());
}

void CallBase::run_steps(Step step) {
  const std::size_t n = pipeline_->size;
  for (;;) {
    switch (step) {
      case Step::run_inner: {
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
          if (deadline_owner_ != no_layer &&
              (cancel_origin_ == no_layer || cancel_origin_ > deadline_owner_ + 1)) {
            cancel_origin_ = deadline_owner_ + 1;
          }
          context_->cancel_requested_ = true;
          outcome_.set_error(boost::asio::error::operation_aborted);
          depth_ = n - 1;
          step = dispatch_inner_complete(depth_);
          continue;
        }
        depth_ = n;
        ++context_->attempt_;
        if (start_operation()) return;  // the operation's handler now owns the execution
        // The initiation threw and destroyed its handler: the attempt failed with the exception.
        if (n == 0) {
          deliver();
          return;
        }
        depth_ = n - 1;
        step = dispatch_inner_complete(depth_);
        continue;
      }
      case Step::complete:
        finish_layer(depth_);
        if (depth_ == 0) {
          deliver();  // the execution is destroyed here
          return;
        }
        --depth_;
        step = dispatch_inner_complete(depth_);
        continue;
      case Step::wait:
        if (start_wait()) return;  // the timer's handler now owns the execution
        // Arming the timer threw: the layer failed with the exception.
        step = Step::complete;
        continue;
      case Step::suspend:
        return;  // the strategy's wait handler now owns the execution
    }
  }
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
    timer->async_wait_until(wait_deadline_, *this);
    return true;  // nothing of the execution may be touched now: the handler owns it
  } catch (...) {
    step_completed();  // a cancellation handler the failed wait installed must not stay
    (void)fail_layer(depth_, std::current_exception());
    return false;
  }
}

// ---- the trampoline ----------------------------------------------------------------------------

void TrampolineLevel::flush() noexcept {
  if (!owns_) return;
  while (TrampolineJob* job = pop()) job->reschedule(job);
  close();
}

void TrampolineLevel::drain() {
  if (!owns_) return;
  Trampoline& t = tl_trampoline;
  std::size_t ran = 0;
  while (TrampolineJob* job = pop()) {
    if (++ran > trampoline_limit || !job->runnable(job)) {
      job->reschedule(job);
      continue;
    }
    t.from_drain = true;  // the entry point this delivery reaches joins this level
    try {
      job->run(job);
    } catch (...) {
      t.from_drain = false;
      throw;  // the destructor sends the deliveries left through their executors
    }
    t.from_drain = false;
  }
  close();
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
  if (pipeline_->size == 0) {
    RunningScope scope(this);
    deliver();
    return;
  }
  depth_ = pipeline_->size - 1;
  Step step;
  {
    RunningScope scope(this);
    step = dispatch_inner_complete(depth_);
  }
  run(step);
}

void CallBase::resume_after_wait(const boost::system::error_code& ec) {
  step_completed();
  resumed_ = true;
  Step step;
  {
    RunningScope scope(this);
    step = dispatch_wait_complete(depth_, ec);
  }
  run(step);
}

void CallBase::abandon_execution() noexcept {
  const DeferredChecks::Scope checks;
  if (depth_ != no_layer && pipeline_->size > 0) {
    for (std::size_t i = std::min(depth_, pipeline_->size - 1) + 1; i-- > 0;) finish_layer(i);
  }
  destroy();
}

void CallBase::emit_step(boost::asio::cancellation_type type) noexcept {
  if (async_ == nullptr) return;  // a synchronous execution sees it through Context::cancelled()
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

void CallBase::cancel_inner(std::size_t origin, boost::asio::cancellation_type type) noexcept {
  if (cancel_origin_ == no_layer || cancel_origin_ > origin + 1) cancel_origin_ = origin + 1;
  context_->cancel_requested_ = true;
  const TrampolineSuppressed suppressed;
  emit_step(type);
}

}  // namespace detail
}  // namespace kevlar
