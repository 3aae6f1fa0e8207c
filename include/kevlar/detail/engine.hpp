// kevlar — internal: the engine (src/engine.cpp): the type-independent part of one execution, the
// machine that applies its strategies' steps and the two shells that perform its actions.
// ("Trampoline" in kevlar names only the grant trampoline of detail/trampoline.hpp.)
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/always_inline.hpp>
#include <kevlar/detail/attempt_group.hpp>
#include <kevlar/detail/deferred_checks.hpp>
#include <kevlar/detail/inline_slot.hpp>
#include <kevlar/detail/pipeline.hpp>
#include <kevlar/detail/trampoline.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/step.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/assert.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace kevlar {

class Layer;
class Strategy;

namespace detail {

class CallBase;
struct DeadlineEntry;

/// What only an asynchronous execution needs to run its pending steps: the signal forwarding
/// cancellation to the pending step, the inline slot of kevlar's own queue waits (Step::queue),
/// the timer of Step::wait_until, the attempts a layer runs at once, and the caller's deadline. It
/// lives in the asynchronous execution's block; a synchronous execution has none.
struct AsyncSteps {
  boost::asio::cancellation_signal step_signal;
  InlineCancellation inline_cancellation;
  std::unique_ptr<ClockTimer> timer;
  Attempts attempts;
  /// The caller's deadline (CallOptions::deadline), armed behind the frames of an execution a
  /// caller started with one (arm_caller_deadline); nullptr otherwise.
  DeadlineEntry* caller_deadline = nullptr;
  /// The caller's cancellation slot emitted (CallBase::cancel_by_caller): a cancellation the
  /// caller asked for stays one, unless the caller's deadline expired first.
  bool caller_cancelled = false;
  /// The caller's deadline expired before the caller cancelled (CallBase::expire_caller_deadline):
  /// the execution's cancellation is reported as errc::timeout.
  bool caller_deadline_first = false;
};

/// What the engine's machine (CallBase::advance) asks its shell to do next. The synchronous shell
/// performs each on the calling thread, the asynchronous one through Asio; either feeds the result
/// back to the machine as the next event.
enum class EngineAction : unsigned char {
  start_operation,  ///< run the user's operation once (Context::attempt() is counted already)
  wait,     ///< wait until the wait deadline for the layer at the current depth (Step::wait_until)
  pending,  ///< the attempts of a parked layer own the execution
  start_step,  ///< start what the layer's step points at (Step::queue, Layer::await:
               ///< pending_target())
  deliver,  ///< the execution completed: its outcome is the caller's
  abandon,  ///< an attempt of the parked layer was abandoned: the execution never completes
};

/// No layer runs attempts (CallBase's attempt layer): a value no depth ever takes.
inline constexpr std::size_t no_attempt_layer = no_layer - 1;
/// The owner of the caller's deadline (CallOptions::deadline) in CallBase's deadline owner: a
/// value no depth ever takes.
inline constexpr std::size_t caller_deadline_owner = no_layer - 2;

/// The execution (if any) whose engine is running on this thread; a pending step's handler that is
/// destroyed while its execution's engine is on the stack (a failed initiation) leaves the
/// execution to the engine instead of abandoning it.
inline thread_local const CallBase* tl_running_call = nullptr;
/// The execution being initiated on this thread: a completion reached while it is set would run
/// inside the initiating function, so it is posted instead.
inline thread_local const CallBase* tl_initiating_call = nullptr;

/// One execution of a pipeline. The engine is a machine shared by synchronous and asynchronous
/// executions, driven by two shells:
/// - the machine (`advance` and its events: an operation done, a wait done, an attempt done)
///   calls the strategies and applies the Steps they return, and stops when the execution needs
///   something from outside, which it returns as an EngineAction. It starts no operation, arms
///   no timer and delivers nothing (it may cancel or release a parked layer's attempts, which
///   are executions of their own).
/// - the synchronous shell (SyncCall::run, detail/sync_call.hpp) performs each action on the
///   calling thread: it runs the operation, blocks for a wait, and returns on delivery. It walks
///   the subset of the machine's transitions a synchronous execution can take (no pending step,
///   no attempts) with the depth on the C++ stack, which costs a quarter less than driving
///   advance(), and is compiled for each call's type, so that it calls the user's function
///   directly.
/// - the asynchronous shell (`run`, `perform` and the completions that resume it) starts the
///   operation or the timer with a handler that owns the execution, and feeds their completions
///   back to the machine; it delivers through the caller's handler.
/// A cancellation from the caller or from a layer (an event too) marks who cancelled and is
/// emitted into the pending step's slot. The typed parts (invoking the user's operation,
/// delivering the result) live in the derived classes.
///
/// An asynchronous execution has at most one pending step at a time (the user's operation, a
/// clock wait or a strategy's own wait); the handler of that step owns the execution. The one
/// exception is a parked layer running several inner attempts (Layer::start_attempt): each
/// attempt is an execution of its own, over the layers inside the parked one, that reports its
/// outcome to this execution when it completes. This execution then ends only through the parked
/// layer's strategy (it completes, or an attempt is abandoned); attempts still running when it
/// completes are cancelled and detached, and end on their own.
class CallBase : private ClockWaiter {
 public:
  /// An asynchronous execution (AsyncCall, AttemptCall).
  CallBase(const PipelineView& pipeline, std::byte* frames, Context& context) noexcept
      : pipeline_(&pipeline),
        layers_(pipeline.layers),
        frames_(frames),
        context_(&context),
        depth_(no_layer),
        step_dropped_(false),
        resumed_(false),
        first_(0),
        attempt_layer_(no_attempt_layer),
        node_(nullptr) {}
  /// Selects the constructor of a synchronous execution.
  struct Synchronous {};
  /// A synchronous execution (SyncCall): leaves the fields only the asynchronous machine reads
  /// unset (see the member list), stores every synchronous call would otherwise pay for.
  CallBase(const PipelineView& pipeline, std::byte* frames, Context& context,
           Synchronous /*unused*/) noexcept
      : pipeline_(&pipeline), layers_(pipeline.layers), frames_(frames), context_(&context) {}
  CallBase(const CallBase&) = delete;
  CallBase& operator=(const CallBase&) = delete;

  // ---- the machine: events in, actions out ----
  /// Applies `step`, the one the layer at the current depth returned (Step::run_inner with no
  /// layer entered yet starts the execution), calling strategies until the execution needs
  /// something from outside, and returns what. Starts no operation, arms no timer, delivers
  /// nothing: the shells do (SyncCall::run, run and the completions that resume it).
  EngineAction advance(Step step);
  /// Event: the operation of the attempt advance() asked for (start_operation) completed; its
  /// outcome is in outcome().
  EngineAction operation_done();
  /// Event: the wait advance() asked for (EngineAction::wait, until wait_deadline()) completed
  /// with `ec` (`operation_aborted` if it was cut short).
  EngineAction wait_done(const boost::system::error_code& ec);
  /// The deadline of the wait advance() asked for.
  [[nodiscard]] Clock::time_point wait_deadline() const noexcept {
    return pending_step_.deadline();
  }
  /// What the step advance() asked to start (EngineAction::start_step) points at.
  [[nodiscard]] StepTarget& pending_target() const noexcept {
    return *StepAccess::target(pending_step_);
  }

  // ---- the shells ----
  /// Asynchronous executions: performs `step` for the current layer and keeps going until the
  /// execution completes or a step is pending.
  void run(Step step);
  /// The user's operation completed; its result is in outcome_.
  void operation_completed();
  /// A wait started for a strategy (Step::wait_until, Step::queue, Layer::await) completed.
  void wait_completed(const boost::system::error_code& ec);
  /// The execution will never complete: tell every active layer and destroy it.
  void abandon_execution() noexcept;
  /// The caller asked to cancel (its cancellation slot, or its stop token), or its deadline
  /// expired.
  void cancel_from_caller(boost::asio::cancellation_type type) noexcept;
  /// The caller's cancellation slot emitted: cancel_from_caller, remembered as the caller's own.
  void cancel_by_caller(boost::asio::cancellation_type type) noexcept {
    async_->caller_cancelled = true;
    cancel_from_caller(type);
  }
  /// The caller's deadline (arm_caller_deadline) expired: cancel_from_caller, remembered as the
  /// deadline's unless the caller had cancelled first.
  void expire_caller_deadline() noexcept {
    if (!async_->caller_cancelled) async_->caller_deadline_first = true;
    cancel_from_caller(boost::asio::cancellation_type::terminal);
  }
  /// The pending operation's handler was destroyed uninvoked while this execution's engine was on
  /// the stack: its initiation failed, and the engine fails the attempt.
  void step_dropped() noexcept { step_dropped_ = true; }

  /// Asynchronous executions only (a synchronous one leaves resumed_ unset): true if an
  /// enclosing deadline (Context::deadline) has passed and time may have moved since the
  /// execution started: the engine declines to start an attempt then. (A synchronous wait that
  /// ends at the deadline reports itself aborted instead.)
  [[nodiscard]] bool past_deadline() const noexcept {
    // An expiry is delivered on its own (a posted job, a cut wait), possibly after the completion
    // that resumed this execution; the clock tells the truth before either has arrived.
    return resumed_ && context_->deadline_ != Clock::time_point::max() &&
           context_->clock().now() >= context_->deadline_;
  }

  /// Synchronous executions: true if an enclosing deadline (Context::deadline) has passed.
  [[nodiscard]] bool sync_past_deadline() const noexcept {
    return context_->deadline_ != Clock::time_point::max() &&
           context_->clock().now() >= context_->deadline_;
  }

  // ---- the caller's deadline (CallOptions::deadline) ----
  /// Asynchronous executions: makes `deadline` the context's deadline, owned by the caller, and
  /// arms `entry` (raw storage, constructed here) to cancel the execution as the caller would
  /// when it passes. Throws what arming throws (std::bad_alloc, std::system_error); nothing is
  /// armed then.
  /// The execution disarms it (AsyncSteps::caller_deadline) when it delivers, reporting its
  /// outcome as report_caller_deadline decides (before its observers see it), or when it is
  /// abandoned.
  void arm_caller_deadline(DeadlineEntry& entry, Clock::time_point deadline);
  /// An execution that ran under the caller's deadline ended: a cancellation it ended with becomes
  /// `errc::timeout` if the deadline's expiry came before any cancellation the caller asked for
  /// (`expired`), or if the deadline has passed and the caller did not cancel (its slot, its stop
  /// token): the engine declined an attempt past it, or a wait ended at it. Other outcomes pass
  /// unchanged: a retry stopped by the deadline keeps its last real failure.
  void report_caller_deadline(bool expired = false) noexcept;

  /// Cancels what is running inside layer `origin`.
  void cancel_inner(std::size_t origin, boost::asio::cancellation_type type) noexcept;
  /// Cancels the pending step, the wait of the layer that is waiting (a queue wait, a timed
  /// wait), without marking anything inside it cancelled: the layer's own deadline ended its wait.
  void cancel_own_wait(boost::asio::cancellation_type type) noexcept;

  // ---- several attempts at once (asynchronous executions) ----
  /// Starts an attempt of the layers inside `layer` (and the user's operation) with a copy of the
  /// context, on which `prepare(arg, context)` runs first if given; returns its id. Throws
  /// std::logic_error in a synchronous execution, and what allocating the attempt, copying the
  /// properties or `prepare` throws (nothing is started then).
  using PrepareAttempt = void (*)(void* arg, Context& context);
  std::uint32_t start_attempt(std::size_t layer, PrepareAttempt prepare, void* arg);
  /// Cancels the running attempt `id` of `layer`; false if it is not running.
  bool cancel_attempt(std::size_t layer, std::uint32_t id,
                      boost::asio::cancellation_type type) noexcept;
  /// Cancels every running attempt of `layer`.
  void cancel_attempts(std::size_t layer, boost::asio::cancellation_type type) noexcept;
  /// Attempts of `layer` started in its current round, and those still running.
  [[nodiscard]] std::uint32_t attempts_started(std::size_t layer) const noexcept;
  [[nodiscard]] std::uint32_t attempts_running(std::size_t layer) const noexcept;
  /// An attempt this execution started completed (its outcome is in its execution): report it to
  /// the parked layer, now or once the engine gets back to it. The attempt is this execution's to
  /// destroy from here on.
  void attempt_completed(AttemptNode& node);
  /// An attempt this execution started will never complete (its executor shut down with its step
  /// pending): the execution cannot complete either, and is abandoned.
  void attempt_abandoned(AttemptNode& node) noexcept;

  [[nodiscard]] Context& context() noexcept { return *context_; }
  [[nodiscard]] OutcomeState& outcome() noexcept { return outcome_; }
  [[nodiscard]] const PipelineView& pipeline() const noexcept { return *pipeline_; }
  /// pipeline().layers, one dependent load closer.
  [[nodiscard]] const PipelineLayer* layers() const noexcept { return layers_; }
  /// The layers' scratch storage: a layer's frame is this plus its PipelineLayer::frame_offset.
  [[nodiscard]] std::byte* frames() const noexcept { return frames_; }
  [[nodiscard]] std::size_t cancel_origin() const noexcept { return cancel_origin_; }
  /// A synchronous execution marks no cancellation's origin (its deadlines are cooperative): true
  /// if it is synchronous, its outcome is a cancellation and the context's deadline has passed,
  /// owned by nobody (the caller's, a synchronous timeout's: kevlar's built-ins restore their own
  /// before a layer outside hears of the outcome) or by a layer outside layer `index` (one that
  /// set it with Layer::exchange_deadline or lower_deadline): that deadline ended the inner part.
  /// Always false for an asynchronous execution, whose expiries mark their origin.
  [[nodiscard]] bool outer_deadline_passed(std::size_t index) const noexcept {
    if (async_ != nullptr || context_->deadline_ == Clock::time_point::max()) return false;
    return outer_deadline_ended(index);
  }
  [[nodiscard]] bool synchronous() const noexcept { return async_ == nullptr; }

  /// Sets the context's deadline, its owner unchanged (a synchronous timeout's: see
  /// outer_deadline_passed).
  Clock::time_point exchange_deadline(Clock::time_point t) noexcept {
    return std::exchange(context_->deadline_, t);
  }
  /// Layer::exchange_deadline for layer `layer`: in a synchronous execution a deadline it changes
  /// is that layer's from then on, so that the layer and those outside it do not hear a
  /// cancellation past it as one from outside (outer_deadline_passed).
  Clock::time_point exchange_deadline(Clock::time_point t, std::size_t layer) noexcept {
    const Clock::time_point previous = std::exchange(context_->deadline_, t);
    if (async_ == nullptr && t != previous) deadline_owner_ = layer;
    return previous;
  }
  /// A deadline and the layer that set it, as lower_deadline saved them.
  struct SavedDeadline {
    Clock::time_point time = Clock::time_point::max();
    std::size_t owner = no_layer;
  };
  /// Sets the context's deadline to `t` if that is earlier, owned by layer `layer`; returns what
  /// to restore when the layer finishes.
  SavedDeadline lower_deadline(Clock::time_point t, std::size_t layer) noexcept {
    const SavedDeadline saved{context_->deadline_, deadline_owner_};
    if (t < saved.time) {
      context_->deadline_ = t;
      deadline_owner_ = layer;
    }
    return saved;
  }
  void restore_deadline(const SavedDeadline& saved) noexcept {
    context_->deadline_ = saved.time;
    deadline_owner_ = saved.owner;
  }

  // Asynchronous executions only.
  [[nodiscard]] virtual boost::asio::any_io_executor call_executor() const noexcept = 0;
  /// The io_context whose plain executor this execution runs on (its grant trampoline, see
  /// detail/trampoline.hpp), or nullptr (a strand, another executor).
  [[nodiscard]] virtual const void* trampoline_context() const noexcept { return nullptr; }
  /// TrampolineLevel's resolver: `call`'s trampoline_context().
  static const void* resolve_trampoline(const void* call) noexcept {
    return static_cast<const CallBase*>(call)->trampoline_context();
  }
  [[nodiscard]] boost::asio::cancellation_slot step_slot() noexcept {
    return async_ != nullptr ? async_->step_signal.slot() : boost::asio::cancellation_slot();
  }
  /// The allocation-free slot of kevlar's own queue waits (see InlineCancellation).
  [[nodiscard]] InlineSlot inline_slot() noexcept {
    return async_ != nullptr ? InlineSlot(&async_->inline_cancellation) : InlineSlot();
  }
  /// The room for the pending step's embedded queue wait, behind the frames (async_frame_bytes):
  /// nullptr in a synchronous execution, or when none of the layers it runs waits in a queue.
  [[nodiscard]] void* queue_wait_storage() const noexcept {
    return async_ != nullptr && first_ < pipeline_->queue_waiters_end
               ? frames_ + pipeline_->frame_bytes
               : nullptr;
  }
  /// The room for the coroutine of a pending Layer::await (a boost::asio::awaitable<void>, one
  /// pointer): written by Layer::await, emptied by the shell that starts it (or by the machine
  /// when it refuses the step).
  [[nodiscard]] void* hook_room() noexcept { return hook_room_; }
  /// The step of the coroutine in hook_room(), from Layer::await until the shell (or the machine
  /// refusing it) takes it out, when it becomes Step::suspend: a callback that throws after
  /// Layer::await (fail_layer), or calls it twice, leaves nothing behind.
  [[nodiscard]] Step& hook_step() noexcept { return pending_step_; }

 protected:
  ~CallBase() = default;

  /// Synchronous: run the user's function and store its outcome. Asynchronous: start the user's
  /// operation; its completion calls operation_completed().
  virtual void invoke_operation() = 0;
  /// Asynchronous executions: the outermost layer completed; hand the outcome to the caller and
  /// destroy the execution. (A synchronous caller reads the outcome once SyncCall::run()
  /// returns.)
  virtual void deliver() = 0;
  /// Destroys an asynchronous execution without delivering.
  virtual void destroy() noexcept = 0;
  /// Disarms the caller's deadline (AsyncSteps::caller_deadline, set) and, if `report`, reports
  /// the outcome as it decides (report_caller_deadline). Idempotent: the first call clears it.
  [[gnu::cold]] void disarm_caller_deadline(bool report) noexcept;
  /// outer_deadline_passed past its first tests.
  [[gnu::cold]] bool outer_deadline_ended(std::size_t index) const noexcept;

  /// PipelineView::observes_executions: the execution starts (announces the shield to its
  /// observers, reads the clock) ...
  void observe_start() noexcept;
  /// ... and is about to deliver: emits ExecutionFinished. Not for attempt executions.
  void observe_finish() noexcept;

 public:
  // Called on other executions of the same family (an attempt's ancestors).
  /// Asynchronous executions: allocates (does not start) an attempt execution running the layers
  /// from `first` on, with a copy of this execution's context; its node is attempt_node().
  virtual CallBase* make_attempt(std::size_t first);
  /// Starts the user's operation for attempt execution `attempt` (a descendant of this one), or
  /// fails that attempt with `operation_aborted` if this execution can no longer start it.
  virtual void invoke_operation_for(CallBase& attempt);
  /// Moves the result of the completed attempt `attempt` into this execution's outcome.
  virtual void adopt_outcome(CallBase& attempt);

  /// An attempt execution's set-up, called by its constructor: it runs the layers from `first` on
  /// for `parent`, whose context it copies (properties, deadline).
  void become_attempt(CallBase& parent, std::size_t first, AttemptNode& node);
  /// This execution's link to the execution that started it (nullptr: it is a caller's).
  /// Asynchronous executions only.
  [[nodiscard]] AttemptNode* attempt_node() const noexcept { return node_; }

 protected:
  // The callbacks' dispatchers, defined inline in <kevlar/strategy.hpp> (they need Layer), where a
  // synchronous execution's walk (SyncCall::run) sees them too.
  /// Calls the layer's on_start; a callback that throws fails the layer (fail_layer).
  KEVLAR_DETAIL_ALWAYS_INLINE inline Step dispatch_start(std::size_t index);
  /// Calls the layer's on_inner_complete hook, if it has one.
  KEVLAR_DETAIL_ALWAYS_INLINE inline Step dispatch_inner_complete(std::size_t index);
  /// The layer ends: its on_finish hook, then the cancellation it started for its inner part.
  KEVLAR_DETAIL_ALWAYS_INLINE inline void finish_layer(std::size_t index) noexcept;
  // The same three, handing the callbacks `layer`, a Layer(*this, index) the caller keeps: a
  // synchronous execution's walk builds one per layer instead of one per callback.
  /// dispatch_start(index) with the caller's `layer`.
  KEVLAR_DETAIL_ALWAYS_INLINE inline Step dispatch_start(Layer& layer, std::size_t index);
  /// dispatch_inner_complete(index) with the caller's `layer`.
  KEVLAR_DETAIL_ALWAYS_INLINE inline Step dispatch_inner_complete(Layer& layer,
                                                                  std::size_t index);
  /// finish_layer(index) with the caller's `layer`.
  KEVLAR_DETAIL_ALWAYS_INLINE inline void finish_layer(Layer& layer, std::size_t index) noexcept;
  /// A cancellation layer `index` started for its inner part ends with it (a retry outside a
  /// timeout starts its next attempt uncancelled).
  void end_inner_cancellation(std::size_t index) noexcept {
    if (cancel_origin_ == index + 1) {
      cancel_origin_ = no_layer;
      context_->cancel_requested_ = false;
    }
  }
  /// A synchronous execution's other steps: a wait blocks until its deadline (or the context's
  /// deadline, if earlier), a queue step until its grant (see Step::queue), and each reports how
  /// it ended to the layer, returning the layer's next step; Step::suspend fails the layer.
  [[gnu::noinline]] Step sync_wait(std::size_t index, Step step);
  /// A synchronous attempt starts: Context::attempt() counts it.
  void count_attempt() noexcept { ++context_->attempt_; }
  /// A synchronous attempt is about to start in a later round of a layer (a repeater's, or after
  /// a wait: time has moved since the deadline was set): true if an enclosing deadline
  /// (Context::deadline) has passed, in which case the outcome is already `operation_aborted`
  /// (the attempt never starts, and is not counted), as the asynchronous machine declines an
  /// attempt past its deadline; otherwise counts the attempt and returns false. The first round
  /// needs no check: the waits before it (the limiters' queues) end at the deadline themselves.
  [[gnu::noinline]] bool sync_declines_attempt() noexcept;

  OutcomeState outcome_;
  AsyncSteps* async_ = nullptr;  ///< set by asynchronous executions

 private:
  Step dispatch_wait_complete(std::size_t index, const boost::system::error_code& ec);
  Step fail_layer(std::size_t index, std::exception_ptr ep) noexcept;
  // The asynchronous shell.
  /// Performs `action` and the ones that follow until a step is pending or the execution ended.
  void perform(EngineAction action);
  /// Starts the user's operation; false if its initiation threw and dropped its handler (the
  /// outcome is then the exception).
  bool start_operation();
  /// Arms the timer of Step::wait_until; false if that threw (the outcome is then the exception).
  bool start_wait();
  /// How starting the wait of a queue step went.
  enum class Started : unsigned char { pending, decided, failed };
  /// Starts the wait the pending step points at: pending (its completion owns the execution),
  /// decided at once (`decided` holds the result) or failed (its initiation threw: the waiting
  /// layer's outcome is the exception).
  Started start_step(boost::system::error_code& decided);

  void resume_after_operation();
  void resume_after_wait(const boost::system::error_code& ec);
  void emit_step(boost::asio::cancellation_type type) noexcept;
  void step_completed() noexcept;
  Step dispatch_attempt_complete(std::size_t index, std::uint32_t id);
  /// Reports the oldest completion queued for the parked layer.
  Step report_attempt();
  /// The parked layer ends: queued completions are discarded, running attempts detached (and
  /// cancelled if `cancel`).
  void release_attempts(bool cancel) noexcept;
  /// Forwards a cancellation to every running attempt of the parked layer.
  void forward_cancellation(boost::asio::cancellation_type type) noexcept;
  [[gnu::noinline]] Step refuse_step_with_attempts(Step::Kind kind) noexcept;
  /// The parked layer asks for run_inner or wait: allowed (the layer stops being parked) once
  /// every attempt it started was reported.
  bool leave_parked_layer() noexcept;

  // ClockWaiter (asynchronous Step::wait_until).
  [[nodiscard]] boost::asio::any_io_executor executor() const noexcept override {
    return call_executor();
  }
  [[nodiscard]] boost::asio::cancellation_slot cancellation_slot() const noexcept override {
    return const_cast<CallBase*>(this)->step_slot();
  }
  void complete(const boost::system::error_code& ec) override { wait_completed(ec); }
  void abandon() noexcept override {
    // With this execution's engine on the stack, the only timer handler that can die uninvoked is
    // the one whose initiation is throwing: start_wait() keeps the execution and fails the wait.
    if (tl_running_call != this) abandon_execution();
  }

  const PipelineView* pipeline_;
  const PipelineLayer* layers_;
  std::byte* frames_;
  Context* context_;
  // Fields without an initializer belong to the asynchronous machine (advance(), the
  // asynchronous shell, attempts). A synchronous execution leaves them unset and never reads them:
  // the synchronous shell and the dispatchers do not touch them, and every other member function
  // a synchronous execution can reach (through Layer, or abandon_execution) tests async_ first.
  // past_deadline() and attempt_node() are for asynchronous executions only.
  std::size_t depth_;  ///< asynchronous: the layer whose step is pending
  std::size_t cancel_origin_ =
      no_layer;  ///< 0: the caller; i + 1: layer i cancelled its inner part
  /// The step whose argument the shell needs (a wait's deadline, a queue): kept by advance()
  /// where it returns EngineAction::wait or start_step.
  Step pending_step_ = Step::suspend;
  /// The layer whose deadline the context holds (lower_deadline), or no_layer.
  std::size_t deadline_owner_ = no_layer;
  bool step_dropped_;
  /// Asynchronous executions: a wait or an attempt has completed, so the clock may have passed a
  /// deadline set before it. The first pass starts its attempt without reading the clock again.
  bool resumed_;
  /// The first layer this execution runs: 0, or for an attempt execution the layer inside the one
  /// that started it. Reaching its completion delivers.
  std::size_t first_;
  /// The layer running several attempts at once (no_attempt_layer: none).
  std::size_t attempt_layer_;
  AttemptNode* node_;  ///< set for attempt executions
  /// When the execution started, as time since the clock's epoch: set by observe_start, read
  /// only after it (a pipeline that observes executions). A duration, whose default
  /// initialisation stores nothing, where a time_point's would store zero on every call.
  Clock::duration started_;
  /// See hook_room(). Raw storage: only an execution that awaits a coroutine constructs it, and
  /// the shell moves it out when it starts the step, so no execution pays to destroy it.
  alignas(void*) unsigned char hook_room_[sizeof(void*)];
};

}  // namespace detail
}  // namespace kevlar
