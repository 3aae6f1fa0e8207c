// The engine's attempts: a layer of an asynchronous execution running several attempts of its
// inner part at once (Layer::start_attempt), each an execution of its own that reports back.
#include <kevlar/detail/engine.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/cancellation_type.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <stdexcept>

namespace kevlar::detail {

namespace {

AttemptNode* find_running(const Attempts& a, std::uint32_t id) noexcept {
  for (AttemptNode* n = a.running.front(); n != nullptr; n = IntrusiveList<AttemptNode>::next(n)) {
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
  context_->priority_ = from.priority_;
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
  a.running.push_back(&node);
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
    AttemptNode* n = a.running.front();
    while (n != nullptr && (n->cancel_epoch == epoch || (terminal && n->cancelled_terminally))) {
      n = IntrusiveList<AttemptNode>::next(n);
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
  if (a.done.empty()) return;
  // Attempts completed inside their cancellation handlers: report them now (the parked layer
  // may complete the execution here, the last thing this call does with it). As for an operation
  // completing inside its cancellation handler, a completion handler that throws here ends the
  // program: cancellation is emitted from noexcept code.
  run(Step::suspend);
}

void CallBase::attempt_completed(AttemptNode& node) {
  Attempts& a = async_->attempts;
  a.running.unlink(&node);
  a.done.push_back(&node);
  if (a.busy) return;  // reported when the engine gets back to the parked layer
  run(Step::suspend);
}

void CallBase::attempt_abandoned(AttemptNode& node) noexcept {
  Attempts& a = async_->attempts;
  a.running.unlink(&node);
  --a.running_count;
  if (a.busy) {
    a.abandoned = true;  // the engine is inside the layer: it abandons when it gets back
    return;
  }
  abandon_execution();
}

Step CallBase::report_attempt() {
  Attempts& a = async_->attempts;
  AttemptNode* node = a.done.pop_front();
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
  while (AttemptNode* done = a.done.pop_front()) {
    done->call->destroy();  // completed, never reported: its outcome is discarded
  }
  while (AttemptNode* running = a.running.pop_front()) {
    running->parent = nullptr;  // from here on it ends on its own
  }
  a.started = 0;
  a.running_count = 0;
  a.busy = false;
  a.abandoned = false;
  ++a.epoch;  // a cancellation of the next round never matches a stale one
  attempt_layer_ = no_attempt_layer;
}

}  // namespace kevlar::detail
