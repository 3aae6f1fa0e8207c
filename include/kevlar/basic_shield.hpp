// kevlar — BasicShield: an immutable pipeline of strategies wrapped around a user's call, the
// core's shield, which names no strategy. kevlar::Shield (<kevlar/shield.hpp>) adds the built-in
// strategies' fluent builders.
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/detail/async_call.hpp>
#include <kevlar/detail/awaitable_traits.hpp>
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/lease.hpp>
#include <kevlar/detail/sync_call.hpp>
#include <kevlar/error.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <concepts>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kevlar {

namespace detail {

/// The immutable data of a Shield, shared by every copy, and kept alive after the last copy by the
/// leases of the asynchronous executions still running (make_leased).
struct Pipeline : Leased {
  std::vector<std::shared_ptr<Strategy>> strategies;
  /// Per strategy: how the engine calls its callbacks, as Shield::use saw its class.
  std::vector<LayerHooks> hooks;
  std::vector<std::shared_ptr<const Clause>> clauses;  ///< per layer (default clause if none)
  std::vector<PipelineLayer> layers;
  PipelineView view;
  std::shared_ptr<const Clause> ambient;  ///< clause for strategies added next (null: default)
  std::shared_ptr<const Clock> clock;     ///< null: Clock::steady()
  std::optional<std::string> name;
  std::vector<std::shared_ptr<Observer>> observers;
  /// What executions deliver events to: rebuilt by every seal (null without observers).
  std::shared_ptr<const ObserverSet> observer_set;
  /// No layer and nothing to observe: calls go straight to the user's function or operation.
  bool bypasses_engine = true;
};

}  // namespace detail

/// A synchronous function a Shield can execute: `R fn()` or `R fn(Context&)`.
template <class F>
concept SyncFunction = std::invocable<F&, Context&> || std::invocable<F&>;

namespace detail {
/// The awaitable a factory returns: `f()`, or `f(Context&)` when it takes the context. No `type`
/// for anything else, so that a return type naming it drops the overload (SFINAE) instead of
/// failing: an Asio attempt (`[&](auto token) {...}`) is never asked whether it takes a Context,
/// which would instantiate its body with one.
template <class F>
struct FactoryResultOf {};
template <class F>
requires std::invocable<F&>
struct FactoryResultOf<F> {
  using type = std::remove_cvref_t<std::invoke_result_t<F&>>;
};
template <class F>
requires(!std::invocable<F&> && !boost::asio::is_async_operation<F>::value &&
         std::invocable<F&, Context&>)
struct FactoryResultOf<F> {
  using type = std::remove_cvref_t<std::invoke_result_t<F&, Context&>>;
};
template <class F>
using FactoryResult = typename FactoryResultOf<F>::type;

/// The completion signature of an execution whose factory's coroutine returns `T`:
/// `void(std::exception_ptr, T)`, or `void(std::exception_ptr)` for `void`. (A specialisation,
/// not a std::conditional_t: both of its branches would be formed, and `void(exception_ptr,
/// void)` is not a type.)
template <class T>
struct FactorySignature {
  using type = void(std::exception_ptr, T);
};
template <>
struct FactorySignature<void> {
  using type = void(std::exception_ptr);
};
}  // namespace detail

/// A callable returning `asio::awaitable<T>`, called once per attempt: `factory(Context&)`, given
/// the attempt's context (the attempt number, the properties, the deadline, whether it was
/// cancelled; a hedged attempt has its own copy), or `factory()`.
/// (An Asio operation's attempt, `[&](auto token) {...}`, is never asked whether it takes a
/// Context: that would instantiate its body with one.)
template <class F>
concept AwaitableFactory = requires { typename detail::FactoryResult<F>; } &&
                           detail::IsAwaitable<detail::FactoryResult<F>>::value;

/// A callable that starts one attempt of an Asio operation when invoked with a completion handler,
/// e.g. `[&](auto token) { return sock.async_read_some(buf, token); }`. Its completion signature
/// must be `void(error_code, Ts...)` or `void(std::exception_ptr, Ts...)`.
template <class A>
concept AsyncAttempt =
    !AwaitableFactory<A> && boost::asio::is_async_operation<A>::value &&
    detail::SignatureTraits<boost::asio::completion_signature_of_t<A>>::supported;

/// The context of the attempt that `handler` completes, when `handler` is the completion handler
/// kevlar passed to an AsyncAttempt: inside the attempt, `kevlar::attempt_context(handler)` gives
/// its Context (the attempt number, the properties; a hedged attempt has its own copy, which the
/// hedge's action generator may have prepared). nullptr for any other handler.
template <class Handler>
[[nodiscard]] Context* attempt_context(const Handler& handler) noexcept {
  if constexpr (requires { handler.kevlar_context(); }) {
    return handler.kevlar_context();
  } else {
    return nullptr;
  }
}

/// An immutable, thread-safe pipeline of strategies that wraps a call: the core's shield. It
/// knows no strategy by name: strategies are added with use() (or with(), its synonym), each
/// strategy's header offering a free factory (`kevlar::retry(3)`, `kevlar::timeout(2s)`):
/// ```
/// const kevlar::BasicShield shield =
///     kevlar::BasicShield{}.with(kevlar::timeout(30s)).with(kevlar::retry(3));
/// int v = shield.execute([] { return 42; });
/// ```
/// kevlar::Shield (<kevlar/shield.hpp>, the aggregate kevlar::kevlar) is this class with the
/// built-in strategies' fluent builders (`Shield{}.timeout(30s).retry(3)`); every function that
/// takes a shield takes a BasicShield, so either kind is accepted.
///
/// Build it once, in execution order: the first strategy added is the outermost. Every builder
/// returns a new shield; strategy instances are shared, never copied, so state (a breaker's
/// circuit, a limiter's permits) belongs to the instance and is shared by every shield that
/// contains it. The same stateful instance may appear only once in one chain.
///
/// Thread-safety: a shield may be copied and executed from any number of threads at once. An
/// asynchronous execution keeps the pipeline (and so its strategies) alive until it completes.
class BasicShield {
 public:
  /// The empty shield: executes calls directly.
  BasicShield() noexcept = default;

  // ---- building ------------------------------------------------------------------------------

  /// Appends `strategy` as the innermost strategy so far. Throws std::invalid_argument for a null
  /// strategy, a stateful instance already in the chain, or a fallback made unreachable by a
  /// reactive strategy outside it with the same clause.
  [[nodiscard]] BasicShield use(std::shared_ptr<Strategy> strategy) const;
  /// The same, for a pointer to a class derived from Strategy (what every strategy's factory
  /// returns). If that class is `final`, the engine calls its on_inner_complete and on_finish
  /// directly instead of through the vtable, and skips those it leaves to Strategy's defaults (as
  /// StrategyTraits::needs_inner_complete and needs_finish would): a pass-through layer costs two
  /// calls less per execution. The class must not write `using Strategy::on_finish;` (or
  /// on_inner_complete) over a base's override: that reads as the default, and the override
  /// would be skipped.
  ///
  /// Thread-safety: as every builder, const; the returned shield is a new value.
  template <class S>
  requires std::derived_from<S, Strategy> && (!std::is_same_v<S, Strategy>)
  [[nodiscard]] BasicShield use(std::shared_ptr<S> strategy) const {
    return use_hooked(std::move(strategy), detail::layer_hooks<S>());
  }
  /// use(strategy): `shield.with(kevlar::retry(3))` reads as the pipeline it builds.
  template <class S>
  requires std::derived_from<S, Strategy>
  [[nodiscard]] BasicShield with(std::shared_ptr<S> strategy) const {
    return use(std::move(strategy));
  }
  /// wrap(inner): appends another shield's strategies (a chaos builder's, a recipe's).
  [[nodiscard]] BasicShield with(const BasicShield& inner) const { return wrap(inner); }

  /// Sets the handling clause for the reactive strategies appended after it (until the next
  /// `when`). Without one, Clause::default_clause() applies.
  [[nodiscard]] BasicShield when(Clause clause) const;

  /// A copy with a name (shown by describe()); shares the strategy instances.
  [[nodiscard]] BasicShield with_name(std::string name) const;

  /// A copy whose strategies read time from `clock` (e.g. a ManualClock in tests); shares the
  /// strategy instances. Throws std::invalid_argument for a null clock.
  [[nodiscard]] BasicShield with_clock(std::shared_ptr<const Clock> clock) const;

  /// A copy whose executions deliver their events (<kevlar/observer.hpp>) to `observer` as well as
  /// to the observers already attached; shares the strategy instances. A shield without observers
  /// builds no event and pays nothing for them. Throws std::invalid_argument for a null observer.
  [[nodiscard]] BasicShield observed_by(std::shared_ptr<Observer> observer) const;
  /// Exceptions this shield's observers threw and that were swallowed (see Observer). Thread-safe.
  [[nodiscard]] std::uint64_t observer_failures() const noexcept;
  /// The first of them, or null. Thread-safe.
  [[nodiscard]] std::exception_ptr first_observer_failure() const;

  /// `*this` around `inner`: this shield's strategies, then inner's (same instances). Name and
  /// clock: this shield's if set, else inner's; the clause in force afterwards: inner's if set,
  /// else this one's. Validated like use().
  [[nodiscard]] BasicShield wrap(const BasicShield& inner) const;

  /// Concatenates shields in order (the first is outermost); see wrap().
  [[nodiscard]] static BasicShield compose(std::initializer_list<BasicShield> shields);

  // ---- inspecting ----------------------------------------------------------------------------

  /// The pipeline, outermost first, e.g. `api: Timeout(30s) -> Retry(3, constant 1s)`;
  /// `(empty)` for an empty shield.
  [[nodiscard]] std::string describe() const;
  /// Number of strategies.
  [[nodiscard]] std::size_t size() const noexcept { return p_ ? p_->strategies.size() : 0; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// The name given by with_name, if any.
  [[nodiscard]] const std::optional<std::string>& name() const noexcept;
  /// The strategies, outermost first.
  [[nodiscard]] std::vector<std::shared_ptr<Strategy>> strategies() const;
  /// The clock the strategies use.
  [[nodiscard]] const Clock& clock() const noexcept { return *view().clock; }

  // ---- executing synchronously ---------------------------------------------------------------

  /// Executes `fn` (`R fn()` or `R fn(Context&)`) through the pipeline on the calling thread,
  /// blocking through queues and backoff waits. Returns its value or throws: the original exception
  /// object when `fn` threw, kevlar::Error for failures produced by kevlar (timeout, rejection,
  /// cancellation: `asio::error::operation_aborted`).
  ///
  /// Cancellation: none from the caller (the overload taking a std::stop_token has it); a timeout
  /// is cooperative, `fn` observes it through Context::cancelled(). Cheaper than passing an empty
  /// token: no token is built, moved or destroyed.
  ///
  /// Throws std::logic_error, before any strategy or `fn` runs, if the shield holds a strategy
  /// that needs an asynchronous execution (StrategyTraits::asynchronous_only: a hedge with more
  /// than one attempt). So does execute_outcome().
  ///
  /// Thread-safety: a Shield may execute on any number of threads at once.
  template <SyncFunction F>
  auto execute(F&& fn) const -> detail::SyncValue<F> {
    return execute_with(fn);
  }

  /// Executes `fn` as execute(fn) does, cancelled cooperatively by `stop`: if it is already
  /// requested, `fn` is never called (kevlar::Error, `operation_aborted`); once requested, queue
  /// and backoff waits end with `operation_aborted`, and `fn` observes it through
  /// Context::cancelled() and Context::stop_token(). Thread-safety: as execute(fn).
  template <SyncFunction F>
  auto execute(F&& fn, std::stop_token stop) const -> detail::SyncValue<F> {
    return execute_with(fn, std::move(stop));
  }

  /// Like execute(fn), but returns the Outcome instead of throwing. Thread-safety: as execute(fn).
  template <SyncFunction F>
  auto execute_outcome(F&& fn) const -> Outcome<detail::SyncValue<F>> {
    return execute_outcome_with(fn);
  }

  /// Like execute(fn, stop), but returns the Outcome instead of throwing (a token already
  /// requested gives the `operation_aborted` error without calling `fn`). Thread-safety: as
  /// execute(fn).
  template <SyncFunction F>
  auto execute_outcome(F&& fn, std::stop_token stop) const -> Outcome<detail::SyncValue<F>> {
    return execute_outcome_with(fn, std::move(stop));
  }

  /// execute(fn) for an execution started with `options` (CallOptions: its priority, its
  /// deadline). A deadline that has passed already throws kevlar::Error(`errc::timeout`) without
  /// calling `fn`; a cancellation the execution ends with once the deadline has passed (the
  /// function gave up through Context::cancelled()) is reported as `errc::timeout` too.
  template <SyncFunction F>
  auto execute(const CallOptions& options, F&& fn) const -> detail::SyncValue<F> {
    return execute_with(options, fn);
  }
  /// execute(fn, stop) for an execution started with `options`.
  template <SyncFunction F>
  auto execute(const CallOptions& options, F&& fn, std::stop_token stop) const
      -> detail::SyncValue<F> {
    return execute_with(options, fn, std::move(stop));
  }
  /// execute_outcome(fn) for an execution started with `options`.
  template <SyncFunction F>
  auto execute_outcome(const CallOptions& options, F&& fn) const -> Outcome<detail::SyncValue<F>> {
    return execute_outcome_with(options, fn);
  }
  /// execute_outcome(fn, stop) for an execution started with `options`.
  template <SyncFunction F>
  auto execute_outcome(const CallOptions& options, F&& fn, std::stop_token stop) const
      -> Outcome<detail::SyncValue<F>> {
    return execute_outcome_with(options, fn, std::move(stop));
  }

  // ---- executing asynchronously --------------------------------------------------------------

  /// Executes an asynchronous operation through the pipeline. `attempt` is invoked once per
  /// attempt with a completion handler and starts the user's operation; the execution completes
  /// with that operation's own signature (`void(error_code, Ts...)` or
  /// `void(std::exception_ptr, Ts...)`), through any completion token: a callback,
  /// `use_awaitable`, `deferred` (the default, so `co_await shield.execute_async(op)` works),
  /// `use_future`, `as_tuple(...)`...
  ///
  /// Completion: on the handler's associated executor (for handlers without one, where the
  /// operation completed, or — for a call decided before any operation ran — the system
  /// executor); never inside this call. Failures produced by kevlar arrive as kevlar::errc codes
  /// (or, for exception_ptr signatures, as kevlar::Error).
  ///
  /// Cancellation: the handler's cancellation slot is forwarded to whatever step is pending
  /// (the user's operation, a backoff wait, a queue wait), with the type the caller emitted
  /// (terminal, partial or total; a step that does not support a type ignores it). Emit it from
  /// the handler's executor. A coroutine whose cancellation state is already cancelled never
  /// starts the call (Asio throws `operation_aborted` at the co_await).
  ///
  /// `attempt` is taken by value and invoked as an lvalue, so it must be re-invocable.
  template <AsyncAttempt A, class Token = boost::asio::deferred_t>
  auto execute_async(A attempt, Token&& token = {}) const {
    using Sig = boost::asio::completion_signature_of_t<A>;
    return initiate<Sig>(std::move(attempt), std::forward<Token>(token));
  }

  /// execute_async(attempt, token) for an execution started with `options` (CallOptions: its
  /// priority, its deadline). With a deadline the handler needs an associated executor (else the
  /// call completes with `errc::executor_required`); when it passes, the execution is cancelled
  /// and completes with `errc::timeout`, as one started past it does without running anything.
  template <AsyncAttempt A, class Token = boost::asio::deferred_t>
  auto execute_async(const CallOptions& options, A attempt, Token&& token = {}) const {
    using Sig = boost::asio::completion_signature_of_t<A>;
    return initiate<Sig>(std::move(attempt), std::forward<Token>(token), options);
  }

  /// Executes a coroutine through the pipeline: `factory()` or `factory(Context&)` returns
  /// `asio::awaitable<T>` and is called once per attempt (with that attempt's context, which lives
  /// until the attempt completes); the result is awaited in a coroutine spawned on the handler's
  /// associated executor. Completes with `void(std::exception_ptr, T)` (or
  /// `void(std::exception_ptr)` for `awaitable<void>`) through any completion token; the
  /// exception is the object the coroutine threw, or a kevlar::Error. See the other overload for
  /// executors and cancellation.
  template <AwaitableFactory F, class Token>
  auto execute_async(F factory, Token&& token) const {
    using Aw = detail::FactoryResult<F>;
    using T = typename detail::IsAwaitable<Aw>::value_type;
    using Sig = typename detail::FactorySignature<T>::type;
    if constexpr (std::invocable<F&>) {
      return initiate<Sig>(FactoryAttempt<F>{std::move(factory), {}, 0},
                           std::forward<Token>(token));
    } else {  // an empty shield's call needs the shield's clock and name for its context
      // (an execution's attempts have its context, and its lease keeps the pipeline)
      return initiate<Sig>(
          FactoryAttempt<F>{std::move(factory), bypasses_engine() ? p_ : nullptr, 0},
          std::forward<Token>(token));
    }
  }

  /// execute_async(factory, token) for an execution started with `options`.
  template <AwaitableFactory F, class Token>
  auto execute_async(const CallOptions& options, F factory, Token&& token) const {
    using Aw = detail::FactoryResult<F>;
    using T = typename detail::IsAwaitable<Aw>::value_type;
    using Sig = typename detail::FactorySignature<T>::type;
    if constexpr (std::invocable<F&>) {
      return initiate<Sig>(FactoryAttempt<F>{std::move(factory), {}, 0}, std::forward<Token>(token),
                           options);
    } else {
      return initiate<Sig>(
          FactoryAttempt<F>{std::move(factory), bypasses_engine() ? p_ : nullptr, options.priority},
          std::forward<Token>(token), options);
    }
  }

  /// execute_async(factory) for an execution started with `options`: an awaitable of the value.
  template <AwaitableFactory F>
  auto execute_async(const CallOptions& options, F factory) const -> detail::FactoryResult<F> {
    if constexpr (std::invocable<F&>) {
      // No strategy reads the options, unless the caller set a deadline (the engine keeps it).
      if (bypasses_engine() && !has_deadline(options)) return factory();
    }
    using Executor = typename detail::IsAwaitable<detail::FactoryResult<F>>::executor_type;
    return execute_async(options, std::move(factory), boost::asio::use_awaitable_t<Executor>{});
  }

  /// Executes a coroutine through the pipeline and returns an awaitable of its value:
  /// `T v = co_await shield.execute_async([&] { return client.get(id); });`. Failures are thrown
  /// from the co_await (the coroutine's own exception object, or kevlar::Error). With a shield that
  /// has no strategy and nothing to observe, the factory's awaitable is returned as it is.
  template <AwaitableFactory F>
  auto execute_async(F factory) const -> detail::FactoryResult<F> {
    if constexpr (std::invocable<F&>) {         // a nullary factory
      if (bypasses_engine()) return factory();  // no strategy, no observer
    }
    // use_awaitable, not deferred: Boost 1.81 cannot co_await a deferred operation whose
    // signature is void(std::exception_ptr, T). The awaitable keeps the initiation's arguments,
    // the execution's lease on the pipeline among them, until it is awaited or destroyed: a
    // temporary shield is safe, and no copy of the shield is made.
    using Executor = typename detail::IsAwaitable<detail::FactoryResult<F>>::executor_type;
    return execute_async(std::move(factory), boost::asio::use_awaitable_t<Executor>{});
  }

 private:
  /// No strategy and nothing to observe (Pipeline::bypasses_engine): calls go straight to the
  /// user's function or operation.
  [[nodiscard]] bool bypasses_engine() const noexcept {
    return p_ == nullptr || p_->bypasses_engine;
  }

  template <class F>
  struct FactoryAttempt {
    struct NoOwner {};
    /// For a factory taking a Context: the shield's data, which an empty shield's call (no
    /// execution) reads its clock and name from.
    using Owner = std::conditional_t<std::invocable<F&>, NoOwner,
                                     std::shared_ptr<const detail::Pipeline>>;
    F factory;
    [[no_unique_address]] Owner owner;
    /// The empty shield's call: its context's priority (CallOptions::priority).
    std::int32_t priority = 0;

    /// An attempt of an execution (the execution owns the factory and the context).
    template <class Handler>
    void operator()(Handler&& handler) & {
      auto ex = boost::asio::get_associated_executor(handler, boost::asio::system_executor());
      Context* context = attempt_context(handler);
      boost::asio::co_spawn(ex, call(factory, context), std::forward<Handler>(handler));
    }
    /// The empty shield's one call: the coroutine owns the factory (and a context of its own).
    template <class Handler>
    void operator()(Handler&& handler) && {
      auto ex = boost::asio::get_associated_executor(handler, boost::asio::system_executor());
      boost::asio::co_spawn(ex, call_owned(std::move(factory), std::move(owner), priority),
                            std::forward<Handler>(handler));
    }

    /// Runs the factory inside the spawned coroutine, so that a factory that throws fails the
    /// attempt instead of escaping.
    static auto call(F& f, Context* context) -> detail::FactoryResult<F> {
      if constexpr (!std::invocable<F&>) {  // it takes the attempt's context
        co_return co_await f(*context);
      } else {
        (void)context;
        co_return co_await f();
      }
    }
    static auto call_owned(F f, Owner owner, std::int32_t priority) -> detail::FactoryResult<F> {
      if constexpr (!std::invocable<F&>) {
        const Clock& clock = owner && owner->view.clock ? *owner->view.clock : *Clock::steady();
        Context context(clock, owner ? owner->view.name : nullptr, false);
        context.set_priority(priority);
        co_return co_await f(context);
      } else {
        (void)owner;
        (void)priority;
        co_return co_await f();
      }
    }
  };

  /// What an execution started without CallOptions applies to its context: nothing.
  struct NoOptions {};
  static void apply(Context& /*ctx*/, NoOptions /*options*/) noexcept {}
  static void apply(Context& ctx, const CallOptions& options) noexcept {
    detail::ContextAccess::apply(ctx, options);
  }
  /// True if the caller set a deadline (CallOptions::deadline).
  static constexpr bool has_deadline(NoOptions /*options*/) noexcept { return false; }
  static bool has_deadline(const CallOptions& options) noexcept {
    return options.deadline != Clock::time_point::max();
  }
  /// A synchronous execution with the caller's deadline: true if it has passed already (the
  /// execution then runs nothing and fails with `errc::timeout`).
  static constexpr bool out_of_time(NoOptions /*options*/,
                                    const detail::PipelineView& /*v*/) noexcept {
    return false;
  }
  static bool out_of_time(const CallOptions& options, const detail::PipelineView& v) noexcept {
    return has_deadline(options) && v.clock->now() >= options.deadline;
  }
  /// A synchronous execution ran under the caller's deadline: report its outcome as the deadline
  /// decides (a cancellation past it is `errc::timeout`).
  template <class Call>
  static void settle(NoOptions /*options*/, Call& /*call*/) noexcept {}
  template <class Call>
  static void settle(const CallOptions& options, Call& call) noexcept {
    if (has_deadline(options)) [[unlikely]] call.report_caller_deadline();
  }

  template <class Fn, class... Stop>
  detail::SyncValue<Fn> execute_with(Fn& fn, Stop&&... stop) const {
    return execute_with(NoOptions{}, fn, std::forward<Stop>(stop)...);
  }

  /// execute(): `Stop` is a std::stop_token or nothing. A shield with no strategy and nothing to
  /// observe calls `fn` here.
  template <class Options, class Fn, class... Stop>
  detail::SyncValue<Fn> execute_with(const Options& options, Fn& fn, Stop&&... stop) const {
    // The caller's deadline needs the engine (it ends waits, declines attempts, reports a
    // timeout), even in a shield with no strategy, on its general path.
    if (has_deadline(options)) [[unlikely]] {
      return execute_any(options, fn, std::forward<Stop>(stop)...);
    }
    if (bypasses_engine()) {
      if ((stop.stop_requested() || ...)) throw Error(boost::asio::error::operation_aborted);
      if constexpr (std::invocable<Fn&, Context&>) {
        Context ctx(clock(), p_ != nullptr ? p_->view.name : nullptr, true,
                    std::forward<Stop>(stop)...);
        apply(ctx, options);
        return std::invoke(fn, ctx);
      } else {
        return std::invoke(fn);
      }
    }
    return execute_pipeline(options, fn, std::forward<Stop>(stop)...);
  }

  /// The non-empty path of execute(), kept out of line so that the empty shield's path stays a
  /// direct call wherever execute() is inlined.
  template <class Options, class Fn, class... Stop>
  [[gnu::noinline]] detail::SyncValue<Fn> execute_pipeline(const Options& options, Fn& fn,
                                                           Stop&&... stop) const {
    if ((stop.stop_requested() || ...)) throw Error(boost::asio::error::operation_aborted);
    const detail::PipelineView& v = p_->view;  // execute() routes only engine shields here
    if (!v.plain_synchronous) [[unlikely]] {
      return execute_any(options, fn, std::forward<Stop>(stop)...);
    }
    Context ctx(*v.clock, v.name, true, std::forward<Stop>(stop)...);
    apply(ctx, options);
    alignas(std::max_align_t) std::byte frames[detail::sync_inline_frame_bytes];
    detail::SyncCall<Fn, detail::SyncValue<Fn>> call(v, frames, ctx, fn);
    call.walk();
    return call.take_value();  // no Outcome in between: the value moves once
  }

  /// execute_pipeline() for a pipeline that is not PipelineView::plain_synchronous, and every
  /// call with the caller's deadline (from execute_with).
  template <class Options, class Fn, class... Stop>
  [[gnu::noinline]] detail::SyncValue<Fn> execute_any(const Options& options, Fn& fn,
                                                      Stop&&... stop) const {
    // A call with the caller's deadline comes straight from execute_with, its stop not checked
    // yet; a shield without strategies comes here only for such a call.
    if (has_deadline(options) && (stop.stop_requested() || ...)) {
      throw Error(boost::asio::error::operation_aborted);
    }
    const detail::PipelineView& v = std::is_same_v<Options, NoOptions> ? p_->view : view();
    if (v.asynchronous_only) refuse_synchronous();
    if (out_of_time(options, v)) [[unlikely]] throw Error(make_error_code(errc::timeout));
    Context ctx(*v.clock, v.name, true, std::forward<Stop>(stop)...);
    apply(ctx, options);
    detail::FrameBuffer frames(v.frame_bytes);
    detail::SyncCall<Fn, detail::SyncValue<Fn>> call(v, frames.data(), ctx, fn);
    call.run_any();
    settle(options, call);
    return call.take_value();
  }

  /// execute_outcome(), as execute_with.
  template <class Fn, class... Stop>
  Outcome<detail::SyncValue<Fn>> execute_outcome_with(Fn& fn, Stop&&... stop) const {
    return execute_outcome_with(NoOptions{}, fn, std::forward<Stop>(stop)...);
  }
  template <class Options, class Fn, class... Stop>
  Outcome<detail::SyncValue<Fn>> execute_outcome_with(const Options& options, Fn& fn,
                                                      Stop&&... stop) const {
    using R = detail::SyncValue<Fn>;
    if ((stop.stop_requested() || ...)) {
      return Outcome<R>::from_error(boost::asio::error::operation_aborted);
    }
    const detail::PipelineView& v = view();
    if (v.asynchronous_only) [[unlikely]] refuse_synchronous();
    if (out_of_time(options, v)) [[unlikely]] {
      return Outcome<R>::from_error(make_error_code(errc::timeout));
    }
    Context ctx(*v.clock, v.name, true, std::forward<Stop>(stop)...);
    apply(ctx, options);
    detail::FrameBuffer frames(v.frame_bytes);
    detail::SyncCall<Fn, R> call(v, frames.data(), ctx, fn);
    call.run();
    settle(options, call);
    return call.take_outcome();
  }

  template <class Sig, class A, class Token>
  auto initiate(A attempt, Token&& token) const {
    // A shield with no strategy and nothing to observe (Pipeline::bypasses_engine) hands the
    // caller's handler straight to the operation. Otherwise the execution holds a lease on the
    // pipeline, which keeps it alive (a temporary shield may run a callback-style call) without
    // a shared_ptr's count, which every thread would write.
    return boost::asio::async_initiate<Token, Sig>(
        [](auto handler, detail::Lease lease, A a) {
          if (!lease) {
            std::move(a)(std::move(handler));  // the operation may keep what it needs
            return;
          }
          using Handler = std::decay_t<decltype(handler)>;
          const auto& pipeline = static_cast<const detail::Pipeline&>(*lease.get());
          detail::AsyncCall<Handler, A, Sig>::start(std::move(lease), pipeline.view,
                                                    std::move(handler), std::move(a));
        },
        token, bypasses_engine() ? detail::Lease() : detail::Lease(*p_), std::move(attempt));
  }

  /// initiate() for an execution the caller started with `options` (a separate initiation, so
  /// that a call without options carries none).
  template <class Sig, class A, class Token>
  auto initiate(A attempt, Token&& token, const CallOptions& options) const {
    return boost::asio::async_initiate<Token, Sig>(
        [](auto handler, detail::Lease lease, A a, CallOptions o) {
          if (!lease) {
            std::move(a)(std::move(handler));
            return;
          }
          using Handler = std::decay_t<decltype(handler)>;
          const auto& pipeline = static_cast<const detail::Pipeline&>(*lease.get());
          detail::AsyncCall<Handler, A, Sig>::start(std::move(lease), pipeline.view,
                                                    std::move(handler), std::move(a), o);
        },
        token, lease_for(options), std::move(attempt), options);
  }

  /// The lease of an execution started with `options`: none for a shield that bypasses the
  /// engine, unless the caller set a deadline, which needs the engine (an empty shield's then
  /// runs on a pipeline without layers).
  [[nodiscard]] detail::Lease lease_for(const CallOptions& options) const {
    if (!bypasses_engine()) return detail::Lease(*p_);
    if (!has_deadline(options)) return {};
    return detail::Lease(p_ ? *p_ : empty_pipeline());
  }
  /// The pipeline without layers of a default-constructed shield's executions with a deadline.
  [[nodiscard]] static const detail::Pipeline& empty_pipeline() noexcept;
  [[nodiscard]] const detail::PipelineView& view() const noexcept;
  /// Throws the std::logic_error of a synchronous execution of an asynchronous-only pipeline.
  [[noreturn]] void refuse_synchronous() const;
  /// use(): appends `strategy`, whose callbacks the engine calls through `hooks`
  /// (detail::layer_hooks of its static type).
  [[nodiscard]] BasicShield use_hooked(std::shared_ptr<Strategy> strategy,
                                  detail::LayerHooks hooks) const;

  explicit BasicShield(std::shared_ptr<const detail::Pipeline> p) noexcept : p_(std::move(p)) {}

  std::shared_ptr<const detail::Pipeline> p_;
};

}  // namespace kevlar
