// kevlar — what a strategy returns to the engine (Step) and the static facts it declares
// (StrategyTraits).
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kevlar {

class Step;

namespace detail {

class CallBase;
struct StepTarget;

/// What the shells do with the object a step points at (Step::queue, Layer::await): its kind, and
/// how each shell performs it once the strategy's callback has returned. Internal: the kinds of
/// object a step can point at are kevlar's (kevlar::QueueSemaphore, the awaited hook).
struct StepTargetOps {
  /// The Step::Kind of a step pointing at such an object.
  unsigned char kind;
  /// The asynchronous shell: starts the wait for `call`. True if it is pending (its completion
  /// resumes the execution through CallBase::wait_completed, and nothing of the execution may be
  /// touched after this returns), false if it ended at once, with its result in `decided`. May
  /// throw what its initiation throws, having dropped its handler (CallBase::step_dropped).
  bool (*start)(StepTarget& target, CallBase& call, boost::system::error_code& decided);
  /// The synchronous shell: performs the wait on the calling thread, ended by the caller's stop
  /// and the context's deadline, and returns its result.
  boost::system::error_code (*block)(StepTarget& target, CallBase& call);
  /// The machine refuses the step (a parked layer's attempts still run): releases what the step
  /// holds in the execution. Null: it holds nothing there.
  void (*discard)(StepTarget& target, CallBase& call) noexcept;
};

/// The start of every object a Step can point at: its operations. Pointer-aligned, so that the
/// step's kind fits in the pointer's low bits.
struct StepTarget {
  const StepTargetOps* step_ops;
};

/// The engine reads a step as the machine does: the kind in its tag (a queue step reads as
/// suspend there) and the object it points at.
struct StepAccess;

/// What Step::queue accepts: kevlar::QueueSemaphore (<kevlar/queue_wait.hpp>).
struct QueueTarget : StepTarget {};

}  // namespace detail

/// What a strategy asks the engine to do next for its position in the pipeline: a small value
/// that carries its own argument (a wait carries its deadline), returned by the strategy's step
/// callbacks (on_start, on_inner_complete, on_wait_complete, on_attempt_complete). The engine
/// runs the inner part, completes the position or performs the wait once the callback has
/// returned.
///
/// ```
/// return Step::run_inner;                                // run the inner part (once more)
/// return Step::complete;                                 // done: the outcome moves outwards
/// return Step::wait_until(layer.clock().now() + 100ms);  // then on_wait_complete
/// return Step::queue(semaphore_);                        // a permit, then on_wait_complete
/// return layer.await(options_.on_event_async(event));     // a coroutine, then on_wait_complete
/// ```
///
/// One machine word, trivially copyable, so that it travels in a register: a tag in its low two
/// bits, the argument above them (a wait's deadline; the address of what a queue step waits in,
/// or of what performs an await).
class Step {
 public:
  /// The kinds of step, as Step::kind() reports them.
  enum class Kind : unsigned char {
    run_inner,  ///< run the rest of the pipeline (and finally the user's operation) once more
    complete,   ///< this position is done; the current outcome flows to the strategy outside it;
                ///< attempts it started that still run are cancelled and detached
    wait,       ///< wait until deadline(), then call Strategy::on_wait_complete (blocks the
                ///< thread in a synchronous execution)
    suspend,    ///< the strategy started attempts with Layer::start_attempt(): their
                ///< completions call Strategy::on_attempt_complete (asynchronous executions
                ///< only)
    queue,      ///< wait in the queue of a kevlar::QueueSemaphore for one permit, then call
                ///< Strategy::on_wait_complete (blocks the thread in a synchronous execution)
    await,      ///< await a coroutine (Layer::await), then call Strategy::on_wait_complete (runs
                ///< it on the calling thread in a synchronous execution)
  };

  /// The steps without an argument, as constants: `return Step::run_inner;` converts one to a
  /// Step. (Enumerators rather than Step objects, so that the compiler folds them as early as
  /// the numbers they are.)
  enum class Plain : unsigned char {
    run_inner = static_cast<unsigned char>(Kind::run_inner),
    complete = static_cast<unsigned char>(Kind::complete),
    suspend = static_cast<unsigned char>(Kind::suspend),
  };
  /// Runs the inner part of the pipeline (the strategies inside this one, then the user's
  /// operation) once more; its completion calls Strategy::on_inner_complete.
  static constexpr Plain run_inner = Plain::run_inner;
  /// Ends this position: the current outcome flows to the strategy outside it.
  static constexpr Plain complete = Plain::complete;
  /// The attempts the strategy started own the execution (see Kind::suspend).
  static constexpr Plain suspend = Plain::suspend;

  /// A step without an argument; implicit, so that `return Step::complete;` reads as it does.
  constexpr Step(Plain plain) noexcept  // NOLINT(google-explicit-constructor)
      : bits_(static_cast<std::uint64_t>(plain)) {}

  /// Waits until `deadline` on the shield's clock, then calls Strategy::on_wait_complete: with
  /// success once it is reached, with `operation_aborted` if the caller cancelled the wait (or a
  /// strategy outside this one cancelled this part of the pipeline, as a timeout does on expiry);
  /// in a synchronous execution an enclosing deadline (Context::deadline) also ends it with
  /// `operation_aborted`. A deadline already passed completes at once (asynchronously: through
  /// the execution's executor). The deadline is kept to the nanosecond within 2^61 - 2 ns (about
  /// 73 years) of the clock's epoch; further out it is kept as Clock::time_point::max() (never),
  /// or min() before it (see Clock: the steady clock counts from the machine's boot).
  [[nodiscard]] static constexpr Step wait_until(Clock::time_point deadline) noexcept {
    return Step(encode_ticks(deadline.time_since_epoch().count()) | bits(Kind::wait));
  }

  /// Waits in the queue of `semaphore`, a kevlar::QueueSemaphore (<kevlar/queue_wait.hpp>), for
  /// one permit, then calls Strategy::on_wait_complete with the result: no error (the permit is
  /// this execution's: give it back with `release()` when done), `operation_aborted` (the caller
  /// cancelled, or a strategy outside this one cancelled this part of the pipeline, while it was
  /// queued), `errc::closed`, or the ledger's rejection code (a full queue). The engine starts
  /// the wait once the callback has returned, never inside it; for the embedded wait (below), a
  /// decision the semaphore makes at once (a permit came free, the queue is full, it is closed)
  /// reaches on_wait_complete without a hop. The semaphore's rules hold: FIFO, cancellation until
  /// the grant, no result inside release() or close().
  ///
  /// Asynchronous executions: on a plain io_context executor (or an any_io_executor holding one),
  /// when the strategy declares StrategyTraits::waits_in_queue, the wait lives in the execution
  /// (no allocation, no operation); otherwise it is the semaphore's async_acquire, every result
  /// delivered through the execution's executor. Synchronous executions block in the same FIFO
  /// until the grant, the caller's stop or the context's deadline (Context::deadline): those two
  /// end it with `operation_aborted`, and a permit granted as the deadline passes goes back to
  /// the semaphore (the result is then `operation_aborted` too).
  [[nodiscard]] static Step queue(detail::QueueTarget& semaphore) noexcept {
    return Step(reinterpret_cast<std::uintptr_t>(static_cast<detail::StepTarget*>(&semaphore)) |
                target_tag);
  }

  /// What this step asks for.
  [[nodiscard]] constexpr Kind kind() const noexcept {
    if ((bits_ & kind_mask) != target_tag || bits_ == target_tag) {
      return static_cast<Kind>(bits_ & kind_mask);
    }
    return static_cast<Kind>(target()->step_ops->kind);
  }
  /// The deadline of a wait (kind() == Kind::wait); unspecified for other kinds.
  [[nodiscard]] constexpr Clock::time_point deadline() const noexcept {
    // An arithmetic shift: the ticks' sign comes back.
    const auto ticks = static_cast<Clock::duration::rep>(bits_) >> kind_bits;
    if (ticks == max_ticks) return Clock::time_point::max();
    if (ticks == -max_ticks) return Clock::time_point::min();
    return Clock::time_point(Clock::duration(ticks));
  }

  /// Two steps are equal if they ask for the same thing (waits: until the same deadline).
  friend constexpr bool operator==(Step a, Step b) noexcept { return a.bits_ == b.bits_; }

 private:
  friend struct detail::StepAccess;
  static_assert(sizeof(Clock::duration::rep) == sizeof(std::uint64_t));
  /// Two bits hold the tag: run_inner, complete, wait, and a fourth shared by suspend (no address
  /// above it) and the steps that point at an object (queue, await). A wait's deadline keeps 61 bits and
  /// a sign.
  static constexpr int kind_bits = 2;
  static constexpr std::uint64_t kind_mask = (std::uint64_t{1} << kind_bits) - 1;
  static constexpr std::uint64_t target_tag = static_cast<std::uint64_t>(Kind::suspend);
  static_assert(alignof(detail::StepTarget) > kind_mask && sizeof(std::uintptr_t) <= 8);
  /// Ticks whose shifted value fits the word, both signs; the bounds stand for max() and min().
  static constexpr Clock::duration::rep max_ticks =
      (Clock::duration::rep{1} << (63 - kind_bits)) - 1;

  constexpr explicit Step(std::uint64_t bits) noexcept : bits_(bits) {}
  static constexpr std::uint64_t bits(Kind kind) noexcept {
    return static_cast<std::uint64_t>(kind);
  }
  static constexpr std::uint64_t encode_ticks(Clock::duration::rep ticks) noexcept {
    if (ticks > max_ticks) ticks = max_ticks;
    if (ticks < -max_ticks) ticks = -max_ticks;
    return static_cast<std::uint64_t>(ticks) << kind_bits;
  }

  /// The object a step with the fourth tag points at (nullptr: Step::suspend).
  [[nodiscard]] detail::StepTarget* target() const noexcept {
    return reinterpret_cast<detail::StepTarget*>(static_cast<std::uintptr_t>(bits_ & ~kind_mask));
  }

  std::uint64_t bits_;
};

namespace detail {

struct StepAccess {
  /// The step's tag as a kind: run_inner, complete, wait or suspend (a step that points at an
  /// object reads as suspend).
  [[nodiscard]] static constexpr Step::Kind tag(Step step) noexcept {
    return static_cast<Step::Kind>(step.bits_ & Step::kind_mask);
  }
  /// The object a step of the suspend tag points at; nullptr for Step::suspend and other tags.
  [[nodiscard]] static StepTarget* target(Step step) noexcept {
    return (step.bits_ & Step::kind_mask) == Step::target_tag ? step.target() : nullptr;
  }
  /// A step that points at `target` (kevlar's own kinds of step object).
  [[nodiscard]] static Step point_at(StepTarget& target) noexcept {
    return Step(reinterpret_cast<std::uintptr_t>(&target) | Step::target_tag);
  }
};

}  // namespace detail


/// How a strategy takes part in handling clauses and chain validation.
enum class StrategyRole : unsigned char {
  proactive,  ///< acts before or around the call (timeout, limiters); ignores clauses
  reactive,   ///< judges outcomes with the clause in force where it was added (retry, breaker)
  fallback,   ///< judges outcomes and replaces handled ones; refused inside a reactive strategy
              ///< with the same clause, which would make it unreachable
};

/// Static facts about a strategy, read once when a Shield is built.
struct StrategyTraits {
  StrategyRole role = StrategyRole::proactive;
  /// True if the instance holds state shared by every execution (breaker, limiters). The same
  /// stateful instance may appear in a chain only once.
  bool stateful = false;
  /// Bytes of per-execution scratch storage (Layer::frame), aligned to alignof(std::max_align_t).
  /// A BasicStrategy sets it to sizeof(Frame), or keeps what strategy_traits() asked for if that
  /// is more: the bytes behind the Frame are then the strategy's own, for state that only some
  /// instances need (a limiter's queue-wait deadline), so that the others keep a small frame.
  std::size_t frame_size = 0;
  /// True if the strategy's asynchronous decisions must run on the call's executor, serialised
  /// with the operation's completion (a timeout's expiry). An asynchronous call through a shield
  /// holding such a strategy, whose completion handler has no associated executor, is refused
  /// before any strategy runs with `errc::executor_required`.
  bool needs_executor = false;
  /// True if the strategy runs several attempts at once (a hedge with more than one): a
  /// synchronous execution (Shield::execute, execute_outcome) of a shield holding it throws
  /// std::logic_error before any strategy runs.
  bool asynchronous_only = false;
  /// True if the strategy returns Step::queue (the concurrency limit, the rate limit): an
  /// asynchronous execution of a shield holding it keeps room for one wait in its own block (224
  /// bytes), so that waiting in a queue on an io_context allocates nothing; a hedge's attempt
  /// keeps it only if a strategy inside the hedge declares it. Where there is no room, the
  /// engine performs Step::queue with the semaphore's async_acquire (one operation block per
  /// wait).
  bool waits_in_queue = false;
  /// A handling clause of the strategy's own (its options' `handles`), used instead of the ambient
  /// clause (Shield::when) wherever the strategy is added; null: the ambient one. Chain validation
  /// treats an own clause as distinct from every other clause.
  std::shared_ptr<const Clause> clause{};
  /// False if the strategy keeps Strategy's default on_inner_complete (the layer completes with
  /// the inner outcome as it is): the engine then completes the layer without calling it. A
  /// strategy that sets it false and overrides the callback anyway is not called there.
  /// BasicStrategy computes it (Derived declares `inner_complete` or not), and Shield::use finds
  /// it out by itself for a `final` class (see Shield::use).
  bool needs_inner_complete = true;
  /// False if the strategy keeps Strategy's default on_finish (which does nothing): the engine
  /// then skips the call. Computed like needs_inner_complete (BasicStrategy: Derived declares
  /// `finish`, or its Frame is not trivially destructible); a BasicStrategy whose `finish` has
  /// nothing to do for one instance (a retry without a budget) clears it in strategy_traits(),
  /// which BasicStrategy overrides for a frame with a destructor.
  bool needs_finish = true;
};

}  // namespace kevlar
