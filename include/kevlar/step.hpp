// kevlar — what a strategy returns to the engine (Step) and the static facts it declares
// (StrategyTraits).
#pragma once

#include <kevlar/clause.hpp>

#include <cstddef>
#include <memory>

namespace kevlar {

/// What a strategy asks the engine to do next for its position in the pipeline.
enum class Step : unsigned char {
  run_inner,  ///< run the rest of the pipeline (and finally the user's operation) once more
  complete,   ///< this position is done; the current outcome flows to the strategy outside it;
              ///< attempts it started that still run are cancelled and detached
  wait,       ///< wait until the deadline given to Layer::wait_until / wait_for, then call
              ///< Strategy::on_wait_complete (blocks the thread in a synchronous execution)
  suspend,    ///< the strategy started its own asynchronous wait with Layer::wait_handler(), or
              ///< attempts with Layer::start_attempt(): their completions call
              ///< Strategy::on_wait_complete / on_attempt_complete (asynchronous executions only)
};

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
  /// True if the strategy parks executions with Layer::wait_in_queue (the concurrency limit, the
  /// rate limit): an asynchronous execution of a shield holding it keeps room for one wait in its
  /// own block (224 bytes), so that parking on an io_context allocates nothing; a hedge's attempt
  /// keeps it only if a strategy inside the hedge declares it. Where there is no room,
  /// wait_in_queue starts a general async_acquire (one operation block per wait).
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
  /// `finish`, or its Frame is not trivially destructible).
  bool needs_finish = true;
};

}  // namespace kevlar
