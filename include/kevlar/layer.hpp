// kevlar — Layer: one strategy's handle on one execution (its clause, frame, context, outcome,
// waits, awaited coroutines, cancellation, attempts and events).
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/always_inline.hpp>
#include <kevlar/detail/block_cache.hpp>
#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/detail/engine.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/step.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace kevlar {

class Strategy;

/// What the engine does when a deadline armed with Layer::arm_deadline passes.
enum class DeadlineAction : unsigned char {
  /// Cancel what runs inside the strategy (terminal), as Layer::cancel_inner does: a timeout's
  /// expiry. The strategy then sees cancelled_inner() in on_inner_complete.
  cancel_inner,
  /// Call Strategy::on_wait_complete with success: a hedge's stagger. Only for a strategy that is
  /// suspended (Step::suspend) on attempts it started with Layer::start_attempt, and that disarms
  /// the deadline before it returns anything else: the engine does not check, and resuming a
  /// strategy whose pending step is an operation, a wait or an awaited coroutine is undefined
  /// behaviour.
  resume,
  /// Cancel the wait the strategy itself is in (its Step::queue, its Step::wait_until), which
  /// then completes with `operation_aborted` unless it completed first; nothing inside the
  /// strategy is marked cancelled (cancelled_inner() stays false): a limiter's queue-wait
  /// timeout. Only for a strategy that disarms the deadline as soon as that wait ends.
  cancel_wait,
};

/// Storage for one deadline armed through the engine's deadline service (Layer::arm_deadline). It
/// lives in the strategy's frame, may stay uninitialised until arm_deadline constructs it, and
/// needs no destruction. Its members are the engine's.
using DeadlineSlot = detail::DeadlineEntry;

namespace detail {
struct LayerAccess;

/// Layer::await with a result: awaits `hook` and hands what it gives to `on_value`.
template <class R, class OnValue>
boost::asio::awaitable<void> with_value(boost::asio::awaitable<R> hook, OnValue on_value) {
  if constexpr (std::is_void_v<R>) {
    co_await std::move(hook);
    on_value();
  } else {
    on_value(co_await std::move(hook));
  }
}
}  // namespace detail

/// One strategy's handle on one execution: its clause, its scratch frame, the context, the
/// outcome, waits and cancellation. Valid only inside the Strategy callback it was passed to.
///
/// Thread-safety: an execution runs one step at a time; use a Layer only from the callback.
class Layer {
 public:
  Layer(detail::CallBase& call, std::size_t index) noexcept
      : call_(&call), entry_(&call.layers()[index]), index_(index) {}

  /// The execution's context.
  [[nodiscard]] Context& context() const noexcept { return call_->context(); }
  /// The outcome the inner part of the pipeline produced (meaningful in on_inner_complete and
  /// after it; a strategy that completes without running the inner part sets it first).
  [[nodiscard]] OutcomeRef outcome() const noexcept { return OutcomeRef(call_->outcome()); }
  /// Zero-based position of this strategy among the shield's strategies (Shield::strategies()),
  /// 0 the outermost. It is also the layer's position in the engine's pipeline: kevlar's only
  /// layer of its own, the attempt observer of an observed shield, comes after every strategy.
  [[nodiscard]] std::size_t strategy_index() const noexcept { return index_; }
  /// True for Shield::execute, false for Shield::execute_async.
  [[nodiscard]] bool synchronous() const noexcept { return call_->synchronous(); }
  /// The shield's clock.
  [[nodiscard]] const Clock& clock() const noexcept { return call_->context().clock(); }

  /// The per-execution scratch storage (StrategyTraits::frame_size bytes). Uninitialised when
  /// on_start is called; a strategy constructs what it needs there and destroys it in on_finish.
  [[nodiscard]] void* frame() const noexcept { return call_->frames() + entry_->frame_offset; }
  template <class T>
  [[nodiscard]] T& frame_as() const noexcept {
    return *std::launder(static_cast<T*>(frame()));
  }

  /// Applies the clause in force at this position to the current outcome. If a predicate throws,
  /// the outcome becomes that exception and the result is false (the failure is not handled
  /// again: it surfaces as the execution's failure).
  [[nodiscard]] bool handled() const noexcept { return !plain_success() && judge(); }
  /// True if the outcome is a success and the clause in force here has no result condition:
  /// handled() is then false without asking the clause. A success is judged only by result
  /// conditions, so this is the common case; a strategy whose hot path tests it first, and leaves
  /// handled() to a function of its own, saves that path the registers the clause's call needs.
  [[nodiscard]] bool plain_success() const noexcept {
    return call_->outcome().kind == OutcomeKind::value && !entry_->judges_results;
  }

  /// Replaces the deadline code sees through Context::deadline() and Context::cancelled() (a
  /// timeout's budget), returning the previous one, which the strategy restores when it finishes.
  /// A deadline also cuts short the engine's synchronous waits (a wait that ends at it completes
  /// with `operation_aborted`), and once it has passed after a wait or an attempt, an
  /// asynchronous execution starts no further attempt (it fails as a cancellation). In a
  /// synchronous execution a deadline it changes is this strategy's: a cancellation past it is
  /// one from outside (cancelled_from_outside()) for the strategies inside, not for this one or
  /// those outside it (also after it restored the previous deadline: restore with
  /// lower_deadline's pair, restore_deadline, to give the deadline back to its owner).
  Clock::time_point exchange_deadline(Clock::time_point deadline) const noexcept {
    return call_->exchange_deadline(deadline, index_);
  }

  /// Like exchange_deadline, for a strategy that owns the deadline it sets (a timeout): the
  /// context's deadline becomes `deadline` if that is earlier, and once it has passed, an attempt
  /// the engine declines to start fails as a cancellation by this strategy (cancelled_inner() is
  /// true here), as the strategy's own expiry would have made it. Restore the returned value with
  /// restore_deadline when the strategy finishes.
  detail::CallBase::SavedDeadline lower_deadline(Clock::time_point deadline) const noexcept {
    return call_->lower_deadline(deadline, index_);
  }
  void restore_deadline(const detail::CallBase::SavedDeadline& saved) const noexcept {
    call_->restore_deadline(saved);
  }

  /// Step::wait_until(deadline): a wait until `deadline` on the shield's clock.
  [[nodiscard]] static constexpr Step wait_until(Clock::time_point deadline) noexcept {
    return Step::wait_until(deadline);
  }
  /// Step::wait_until(now + d): a wait of `d` from now on the shield's clock.
  [[nodiscard]] Step wait_for(Clock::duration d) const noexcept {
    return Step::wait_until(clock().now() + d);
  }

  /// Awaits `hook`, a coroutine (a user's asynchronous hook, or any asynchronous work written as
  /// one), as this layer's next step: return the step this gives, from the callback that called
  /// it. Of two awaits in one callback the last replaces the first, and a callback that throws
  /// after awaiting leaves nothing behind; a callback that awaits and returns another step leaves
  /// the coroutine unreleased. The engine starts the coroutine once the callback has returned,
  /// never inside it:
  /// - an asynchronous execution spawns it on the execution's executor; the caller's cancellation
  ///   (and a strategy outside this one cancelling this part of the pipeline, as a timeout's
  ///   expiry does) reaches what it awaits, every cancellation type let through, and stops it at
  ///   its next co_await even where what it awaits ignores cancellation. Its end resumes the
  ///   execution through the execution's executor.
  /// - a synchronous execution runs it to completion on a private io_context on the calling
  ///   thread.
  ///
  /// When it ends, Strategy::on_wait_complete is called: with no error if it returned, or with
  /// `errc::callback_exception` if it threw, its exception being the outcome then (a strategy
  /// that passes a cancellation on tests `cancelled_from_outside()` there). Spawning allocates
  /// (the coroutine's frames, Asio's spawn); a failure to spawn fails this layer with the
  /// exception, as a callback's own would.
  [[nodiscard]] Step await(boost::asio::awaitable<void> hook) const noexcept;

  /// Awaits `hook` as above, and hands its result to `on_value` before on_wait_complete is
  /// called (`on_value()` for a coroutine without a result). `on_value` runs where the coroutine
  /// ends (an asynchronous execution: on the execution's executor, while this layer is suspended),
  /// so it may write the strategy's frame and the outcome, and nothing shared without a lock. An
  /// exception it throws counts as the coroutine's.
  template <class R, class OnValue>
  requires(std::is_void_v<R> ? std::is_invocable_v<OnValue&> : std::is_invocable_v<OnValue&, R>)
  [[nodiscard]] Step await(boost::asio::awaitable<R> hook, OnValue on_value) const {
    return await(detail::with_value(std::move(hook), std::move(on_value)));
  }

  /// True if the caller cancelled this execution, or a strategy outside this one cancelled the
  /// part of the pipeline this one runs in. A strategy uses it to tell "cancelled from outside"
  /// (pass the cancellation on) from a cancellation it caused itself (a timeout). In a
  /// synchronous execution, where cancellation is cooperative, it is also true when the outcome
  /// is a cancellation and a deadline set outside this strategy (the caller's, an outer
  /// timeout's) has passed: that deadline ended the inner part, as its expiry does in an
  /// asynchronous execution.
  [[nodiscard]] bool cancelled_from_outside() const noexcept {
    return call_->cancel_origin() <= index_ || call_->context().stop_token().stop_requested() ||
           call_->outer_deadline_passed(index_);
  }
  /// True if this strategy cancelled its inner part with cancel_inner().
  [[nodiscard]] bool cancelled_inner() const noexcept {
    return call_->cancel_origin() == index_ + 1;
  }
  /// Cancels what runs inside this strategy: the pending asynchronous step receives `type`
  /// through its cancellation slot, and the context reports cancelled() to synchronous code.
  void cancel_inner(boost::asio::cancellation_type type =
                        boost::asio::cancellation_type::terminal) const noexcept {
    call_->cancel_inner(index_, type);
  }

  // ---- several attempts at once (asynchronous executions) ------------------------------------

  /// Starts an attempt of the inner part of the pipeline (the strategies inside this one, then the
  /// user's operation) that runs concurrently with any others this strategy started, and returns
  /// its id: 0, 1, 2 ... in launch order, counted afresh each time this position starts over (a
  /// retry outside runs it again). The attempt runs on a copy of the context (properties copied
  /// now; its writes stay its own), with its own cancellation slot and its own outcome; its
  /// completion calls Strategy::on_attempt_complete with the id, its outcome then being
  /// layer.outcome(). While attempts run the strategy returns Step::suspend (not run_inner or
  /// wait_until, which fail the position with std::logic_error); Step::complete cancels the ones
  /// still running and forgets them (they end on their own). A cancellation of this execution (the
  /// caller's, an outer timeout's) reaches every running attempt.
  ///
  /// An attempt that completes inside this call (a strategy inside rejected it) is reported
  /// after the callback that started it returns. Throws std::logic_error in a synchronous
  /// execution, and what allocating the attempt or copying the properties throws (no attempt is
  /// started then).
  std::uint32_t start_attempt() const { return call_->start_attempt(index_, nullptr, nullptr); }
  /// Like start_attempt(), calling `prepare(Context& attempt_context)` on the attempt's own
  /// context before it starts (to choose what the attempt does, through its properties). If
  /// `prepare` throws, no attempt starts and the exception propagates.
  template <class Prepare>
  std::uint32_t start_attempt(Prepare&& prepare) const {
    return call_->start_attempt(
        index_,
        [](void* arg, Context& context) { (*static_cast<std::remove_reference_t<Prepare>*>(arg))(context); },
        const_cast<void*>(static_cast<const void*>(std::addressof(prepare))));
  }
  /// Cancels running attempt `id` through its own slot; false if it is not running.
  bool cancel_attempt(std::uint32_t id, boost::asio::cancellation_type type =
                                            boost::asio::cancellation_type::terminal) const noexcept {
    return call_->cancel_attempt(index_, id, type);
  }
  /// Cancels every running attempt this strategy started.
  void cancel_attempts(boost::asio::cancellation_type type =
                           boost::asio::cancellation_type::terminal) const noexcept {
    call_->cancel_attempts(index_, type);
  }
  /// Attempts started since this position started (or since its last Step::complete).
  [[nodiscard]] std::uint32_t attempts_started() const noexcept {
    return call_->attempts_started(index_);
  }
  /// Attempts started and not yet reported complete.
  [[nodiscard]] std::uint32_t attempts_running() const noexcept {
    return call_->attempts_running(index_);
  }

  /// True if the shield has observers (Shield::observed_by): only then is an event worth building.
  [[nodiscard]] bool observed() const noexcept { return entry_->interests != 0; }
  /// True when an observer of the shield may want events of type `Detail` (a filter: it may say
  /// yes for a kind nobody wants, never no for one somebody does): test it before computing what
  /// only such an event needs. One load and one test.
  template <EventDetail Detail>
  [[nodiscard]] bool wants() const noexcept {
    return (entry_->interests & event_kind<Detail>().bit()) != 0;
  }
  /// Delivers `detail`, an event about this strategy's decision, to the shield's observers that
  /// want its kind (nothing if there are none), synchronously, on this thread. Any EventDetail
  /// type: kevlar's, or one of the strategy's own. Never throws: an observer's exception is
  /// swallowed and counted (see Observer). Call it outside any lock of the strategy.
  template <EventDetail Detail>
  void emit(const Detail& detail) const noexcept {
    if (!wants<Detail>()) return;
    Event event = make_event(detail);
    emit_event(event);
  }
  /// What a stateful strategy needs to deliver its events later, from outside this callback (a
  /// breaker's state changes, published by its own loop): the shield's observers and this
  /// strategy's position. Empty when nobody listens.
  [[nodiscard]] detail::EventOrigin event_origin() const noexcept;

  // ---- engine services (asynchronous executions) ---------------------------------------------

  /// Arms `slot` (constructing it) to expire at `deadline` through the engine's deadline service:
  /// no kernel timer per execution, O(1) arming and disarming when every deadline the strategy arms
  /// has the same duration, passed as `same_duration` (zero when durations vary). When the deadline
  /// passes, the engine performs `action` on the execution's executor, serialised with the
  /// execution's completions, and only if the slot is still armed. `slot` must not be armed
  /// already (disarm it first: arming overwrites it). Disarm it with disarm_deadline
  /// before the strategy finishes (in on_finish at the latest). Declare
  /// StrategyTraits::needs_executor. Throws what creating the service's queue throws
  /// (std::bad_alloc), or starting kevlar's deadline thread the first time (std::system_error);
  /// nothing is armed then.
  void arm_deadline(DeadlineSlot& slot, Clock::time_point deadline, Clock::duration same_duration,
                    DeadlineAction action) const {
    ::new (static_cast<void*>(&slot)) DeadlineSlot{};
    slot.deadline = deadline;
    slot.call = call_;
    slot.index = index_;
    if (action == DeadlineAction::resume) slot.fire = &detail::resume_at_deadline;
    if (action == DeadlineAction::cancel_wait) slot.fire = &detail::cancel_wait_at_deadline;
    detail::deadline_queue_for(*call_, clock(), same_duration).arm(slot);
  }
  /// Disarms a slot armed by arm_deadline; returns true if it had fired already (its action was
  /// performed). Call it once per arming.
  static bool disarm_deadline(DeadlineSlot& slot) noexcept { return slot.queue->disarm(slot); }

  /// Asynchronous executions: the executor the execution's completions run on.
  [[nodiscard]] boost::asio::any_io_executor executor() const noexcept {
    return call_->call_executor();
  }

 private:
  friend struct detail::LayerAccess;
  /// handled() when the clause must be asked. Cold: a failure, or a success under a result
  /// condition, so that a strategy's success path saves no register for it.
  [[nodiscard, gnu::cold]] bool judge() const noexcept;
  void emit_event(Event& event) const noexcept;

  detail::CallBase* call_;
  const detail::PipelineLayer* entry_;  ///< this position's strategy, clause and frame offset
  std::size_t index_;
};

namespace detail {

/// True if the caller, a stop request or a deadline outside `layer` cancelled its execution: what
/// a strategy checks when a step it awaited (a wait, a hook) has ended, and before it starts
/// another attempt.
[[nodiscard]] inline bool cancelled_meanwhile(const Layer& layer) noexcept {
  return layer.cancelled_from_outside() || layer.context().cancelled();
}

/// An awaited coroutine failed (on_wait_complete has `errc::callback_exception`) and its exception
/// is the outcome. If the execution was cancelled meanwhile and that exception is a cancellation
/// (the cancellation reached what the coroutine awaited), the outcome becomes
/// `operation_aborted`, as any cancelled wait's does. Every built-in strategy with an awaited hook
/// applies this one rule.
inline void report_cancelled_hook(Layer& layer) noexcept {
  if (cancelled_meanwhile(layer) && layer.outcome().is_cancellation()) {
    layer.outcome().set_error(boost::asio::error::operation_aborted);
  }
}

/// kevlar's own layer (the attempt observer) reaches the execution it runs in.
struct LayerAccess {
  static CallBase* call(const Layer& layer) noexcept { return layer.call_; }
};

}  // namespace detail


}  // namespace kevlar
