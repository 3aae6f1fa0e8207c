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
  // A queue wait the callback prepared before it threw is never parked.
  if (async_ != nullptr) {
    if (async_->queue_wait != nullptr) [[unlikely]] {
      std::exchange(async_->queue_wait, nullptr)->discard(prepared_queue_wait_storage());
    }
    // A wait handler the callback created before it threw was destroyed by its failed initiation,
    // or ran or died meanwhile and left its result to the engine, which drops it: the layer's
    // outcome is the exception.
    if (async_->handoff.load(std::memory_order_relaxed) != WaitHandoff::idle) [[unlikely]] {
      async_->handoff.exchange(WaitHandoff::idle, std::memory_order_acq_rel);
    }
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
  for (;;) {
    switch (step) {
      case Step::run_inner: {
        if (depth_ == attempt_layer_) [[unlikely]] {
          if (!leave_parked_layer()) {
            step = refuse_step_with_attempts(step);
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
          if (deadline_owner_ != no_layer &&
              (cancel_origin_ == no_layer || cancel_origin_ > deadline_owner_ + 1)) {
            cancel_origin_ = deadline_owner_ + 1;
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
      case Step::complete:
        if (depth_ == attempt_layer_) [[unlikely]] release_attempts(true);
        finish_layer(depth_);
        if (depth_ == first_) return EngineAction::deliver;
        --depth_;
        step = dispatch_inner_complete(depth_);
        continue;
      case Step::wait:
        if (depth_ == attempt_layer_) [[unlikely]] {
          if (!leave_parked_layer()) {
            step = refuse_step_with_attempts(step);
            continue;
          }
        }
        return EngineAction::wait;
      case Step::suspend:
        if (depth_ == attempt_layer_) [[unlikely]] {
          // The parked layer's callback returned: completions it caused were queued.
          Attempts& a = async_->attempts;
          a.busy = false;
          if (a.abandoned) return EngineAction::abandon;  // an attempt's executor shut down
          if (a.done_head != nullptr) {
            step = report_attempt();
            continue;
          }
        }
        // A queue wait the layer prepared: parked by the shell, after which nothing may read the
        // execution. Otherwise the strategy's wait handler owns it, or the parked layer's
        // attempts do.
        if (async_ != nullptr) {
          if (async_->queue_wait != nullptr) return EngineAction::park;
          // A wait handler created in this callback: settle the handoff. Until this exchange the
          // handler cannot resume the execution, so the reads above were safe.
          if (async_->handoff.load(std::memory_order_relaxed) != WaitHandoff::idle) [[unlikely]] {
            switch (async_->handoff.exchange(WaitHandoff::idle, std::memory_order_acq_rel)) {
              case WaitHandoff::completed:
                // It ran before the callback returned (another thread, or inside the initiating
                // call): the layer hears of it now, as from wait_completed, without a hop.
                step_completed();
                resumed_ = true;
                if (depth_ == attempt_layer_) async_->attempts.busy = true;
                step = dispatch_wait_complete(depth_, async_->handoff_error());
                continue;
              case WaitHandoff::dropped:
                return EngineAction::abandon;  // destroyed uninvoked: it never completes
              case WaitHandoff::idle:
              case WaitHandoff::armed:
                break;  // the handler owns the execution from here
            }
          }
        }
        return EngineAction::pending;
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
  if (step == Step::suspend) {
    // The machine's pending: only a strategy's own asynchronous wait or attempts leave a step
    // pending.
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

bool CallBase::sync_declines_attempt() noexcept {
  const Clock::time_point deadline = context_->deadline_;
  if (deadline == Clock::time_point::max() || context_->clock().now() < deadline) {
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
      case EngineAction::park: {
        boost::system::error_code decided;
        const QueueWaitOps* ops = std::exchange(async_->queue_wait, nullptr);
        if (ops->park(prepared_queue_wait_storage(), decided)) return;  // the queue owns it now
        // Decided under the semaphore's lock (a permit came free, the queue is full, closed): the
        // layer hears of it now, without a hop.
        action = wait_done(decided);
        continue;
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

Step CallBase::refuse_step_with_attempts(Step step) noexcept {
  outcome_.set_exception(std::make_exception_ptr(std::logic_error(
      step == Step::run_inner
          ? "kevlar: a strategy returned Step::run_inner while attempts it started are running "
            "(start another with Layer::start_attempt)"
          : "kevlar: a strategy returned Step::wait while attempts it started are running (arm "
            "its wait through the deadline service and return Step::suspend)")));
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
    timer->async_wait_until(wait_deadline_, *this);
    return true;  // nothing of the execution may be touched now: the handler owns it
  } catch (...) {
    step_completed();  // a cancellation handler the failed wait installed must not stay
    (void)fail_layer(depth_, std::current_exception());
    return false;
  }
}

// ---- the grant trampoline (detail/trampoline.hpp) ----------------------------------------------

void TrampolineLevel::flush() noexcept {
  if (!owns_) return;
  while (TrampolineJob* job = jobs_.pop_front()) job->reschedule(job);
  close();
}

void TrampolineLevel::drain() {
  if (!owns_) return;
  Trampoline& t = tl_trampoline;
  std::size_t ran = 0;
  while (TrampolineJob* job = jobs_.pop_front()) {
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
  // A synchronous execution has nothing pending to abandon, and its machine fields are unset: a
  // strategy that dropped a wait handler inside its callback is failed by the synchronous shell.
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

void CallBase::cancel_inner(std::size_t origin, boost::asio::cancellation_type type) noexcept {
  if (cancel_origin_ == no_layer || cancel_origin_ > origin + 1) cancel_origin_ = origin + 1;
  context_->cancel_requested_ = true;
  const TrampolineSuppressed suppressed;
  emit_step(type);
}

// ---- several attempts at once ------------------------------------------------------------------

namespace {

void unlink_running(Attempts& a, AttemptNode& node) noexcept {
  for (AttemptNode** p = &a.running; *p != nullptr; p = &(*p)->next) {
    if (*p == &node) {
      *p = node.next;
      node.next = nullptr;
      return;
    }
  }
}

AttemptNode* find_running(const Attempts& a, std::uint32_t id) noexcept {
  for (AttemptNode* n = a.running; n != nullptr; n = n->next) {
    if (n->id == id) return n;
  }
  return nullptr;
}

}  // namespace

CallBase* CallBase::make_attempt(std::size_t) {
  throw std::logic_error("kevlar: this execution cannot start attempts of its inner part");
}

void CallBase::invoke_operation_for(CallBase&) {
  throw std::logic_error("kevlar: this execution cannot start attempts of its inner part");
}

void CallBase::adopt_outcome(CallBase&) {}

void CallBase::become_attempt(CallBase& parent, std::size_t first, AttemptNode& node) {
  first_ = first;
  depth_ = first - 1;
  deadline_owner_ = parent.deadline_owner_;
  resumed_ = true;  // time has moved since the parent started
  node.call = this;
  node_ = &node;
  Context& from = *parent.context_;
  context_->deadline_ = from.deadline_;
  context_->properties_ = from.properties_;  // copied at launch; the attempt's writes stay its own
}

std::uint32_t CallBase::start_attempt(std::size_t layer, PrepareAttempt prepare, void* arg) {
  if (async_ == nullptr) {
    throw std::logic_error(
        "kevlar: Layer::start_attempt needs an asynchronous execution (Shield::execute_async)");
  }
  if (attempt_layer_ != no_attempt_layer && attempt_layer_ != layer) {
    throw std::logic_error("kevlar: only one layer of an execution may run attempts at once");
  }
  // From here until the layer's callback returns to the engine, completions are queued, not
  // reported into the strategy (a cancellation emitted from a hook, a rejection inside).
  Attempts& a = async_->attempts;
  a.busy = true;
  CallBase* attempt = make_attempt(layer + 1);  // nothing changed if this throws
  // Numbered in launch order: the attempt's operation runs as attempt `n + 1` of this execution.
  attempt->context_->attempt_ = context_->attempt_;
  if (prepare != nullptr) {
    try {
      prepare(arg, *attempt->context_);
    } catch (...) {
      attempt->destroy();
      throw;
    }
  }
  count_attempt();
  AttemptNode& node = *attempt->node_;
  node.parent = this;
  node.id = a.started++;
  node.cancel_epoch = a.epoch;
  AttemptNode** tail = &a.running;
  while (*tail != nullptr) tail = &(*tail)->next;
  *tail = &node;
  ++a.running_count;
  attempt_layer_ = layer;
  const std::uint32_t id = node.id;
  // If its operation's initiation throws with the handler alive, the handler owns the attempt and
  // the exception is the strategy's.
  attempt->run(Step::run_inner);
  return id;
}

bool CallBase::cancel_attempt(std::size_t layer, std::uint32_t id,
                              boost::asio::cancellation_type type) noexcept {
  if (async_ == nullptr || attempt_layer_ != layer) return false;
  Attempts& a = async_->attempts;
  AttemptNode* node = find_running(a, id);
  if (node == nullptr) return false;
  const bool was_busy = std::exchange(a.busy, true);
  if (type == boost::asio::cancellation_type::terminal) node->cancelled_terminally = true;
  node->call->cancel_from_caller(type);  // a completion inside is queued
  a.busy = was_busy;
  return true;
}

void CallBase::cancel_attempts(std::size_t layer, boost::asio::cancellation_type type) noexcept {
  if (async_ == nullptr || attempt_layer_ != layer) return;
  Attempts& a = async_->attempts;
  const bool was_busy = std::exchange(a.busy, true);
  const std::uint32_t epoch = ++a.epoch;
  const bool terminal = type == boost::asio::cancellation_type::terminal;
  // Each cancellation may complete its attempt (and, through user code, others): rescan from the
  // head, skipping those this round already reached, and for a terminal one those that already
  // received one.
  for (;;) {
    AttemptNode* n = a.running;
    while (n != nullptr && (n->cancel_epoch == epoch || (terminal && n->cancelled_terminally))) {
      n = n->next;
    }
    if (n == nullptr) break;
    n->cancel_epoch = epoch;
    n->cancelled_terminally = n->cancelled_terminally || terminal;
    n->call->cancel_from_caller(type);
  }
  a.busy = was_busy;
}

std::uint32_t CallBase::attempts_started(std::size_t layer) const noexcept {
  return async_ != nullptr && attempt_layer_ == layer ? async_->attempts.started : 0;
}

std::uint32_t CallBase::attempts_running(std::size_t layer) const noexcept {
  return async_ != nullptr && attempt_layer_ == layer ? async_->attempts.running_count : 0;
}

void CallBase::forward_cancellation(boost::asio::cancellation_type type) noexcept {
  Attempts& a = async_->attempts;
  const bool was_busy = a.busy;
  cancel_attempts(attempt_layer_, type);
  if (was_busy) return;  // the engine reports them when it gets back to the layer
  if (a.abandoned) {
    abandon_execution();
    return;
  }
  if (a.done_head == nullptr) return;
  // Attempts completed inside their cancellation handlers: report them now (the parked layer
  // may complete the execution here, the last thing this call does with it). As for an operation
  // completing inside its cancellation handler, a completion handler that throws here ends the
  // program: cancellation is emitted from noexcept code.
  run(Step::suspend);
}

void CallBase::attempt_completed(AttemptNode& node) {
  Attempts& a = async_->attempts;
  unlink_running(a, node);
  node.next_done = nullptr;
  (a.done_tail != nullptr ? a.done_tail->next_done : a.done_head) = &node;
  a.done_tail = &node;
  if (a.busy) return;  // reported when the engine gets back to the parked layer
  run(Step::suspend);
}

void CallBase::attempt_abandoned(AttemptNode& node) noexcept {
  Attempts& a = async_->attempts;
  unlink_running(a, node);
  --a.running_count;
  if (a.busy) {
    a.abandoned = true;  // the engine is inside the layer: it abandons when it gets back
    return;
  }
  abandon_execution();
}

Step CallBase::report_attempt() {
  Attempts& a = async_->attempts;
  AttemptNode* node = a.done_head;
  a.done_head = node->next_done;
  if (a.done_head == nullptr) a.done_tail = nullptr;
  --a.running_count;
  a.busy = true;  // until on_attempt_complete returns to the engine
  CallBase* attempt = node->call;
  const std::uint32_t id = node->id;
  try {
    adopt_outcome(*attempt);
  } catch (...) {
    outcome_.set_exception(std::current_exception());
  }
  context_->attempt_ = std::max(context_->attempt_, attempt->context_->attempt_);
  attempt->destroy();
  resumed_ = true;
  return dispatch_attempt_complete(depth_, id);
}

bool CallBase::leave_parked_layer() noexcept {
  if (async_->attempts.running_count != 0) return false;
  release_attempts(false);  // every attempt was reported: the layer may go on as any other
  return true;
}

void CallBase::release_attempts(bool cancel) noexcept {
  Attempts& a = async_->attempts;
  // Cancel while they are still attached: one that completes inside (or completes another) is
  // queued, and discarded below with the others that completed unreported.
  a.busy = true;
  if (cancel) cancel_attempts(attempt_layer_, boost::asio::cancellation_type::terminal);
  while (AttemptNode* done = a.done_head) {
    a.done_head = done->next_done;
    done->call->destroy();  // completed, never reported: its outcome is discarded
  }
  for (AttemptNode* running = a.running; running != nullptr;) {
    AttemptNode* next = running->next;
    running->next = nullptr;
    running->parent = nullptr;  // from here on it ends on its own
    running = next;
  }
  const std::uint32_t epoch = a.epoch;
  a = Attempts{};
  a.epoch = epoch + 1;  // a cancellation of the next round never matches a stale one
  attempt_layer_ = no_attempt_layer;
}

}  // namespace detail
}  // namespace kevlar
