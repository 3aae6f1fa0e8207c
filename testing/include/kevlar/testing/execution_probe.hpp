// kevlar — testing kit: wrap an operation and count the attempts and cancellations it sees.
#pragma once

#include <kevlar/context.hpp>
#include <kevlar/basic_shield.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/this_coro.hpp>

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

namespace kevlar::testing {

/// An ExecutionProbe's counters, read together.
struct ExecutionProbeSnapshot {
  std::uint64_t attempts = 0;       ///< invocations of the wrapped operation
  std::uint64_t cancellations = 0;  ///< attempts that saw a cancellation (at most one each)
  std::uint64_t active = 0;         ///< attempts started and not yet ended

  friend bool operator==(const ExecutionProbeSnapshot&, const ExecutionProbeSnapshot&) = default;
};

namespace detail {

/// The counters an ExecutionProbe and its wrappers share.
class ProbeState {
 public:
  void begin() {
    const std::lock_guard lock(mutex_);
    ++attempts_;
    ++active_;
    changed_.notify_all();
  }
  void end(bool cancelled) {
    const std::lock_guard lock(mutex_);
    --active_;
    if (cancelled) ++cancellations_;
    changed_.notify_all();
  }
  void cancelled_while_active() {
    const std::lock_guard lock(mutex_);
    ++cancellations_;
    changed_.notify_all();
  }
  [[nodiscard]] ExecutionProbeSnapshot snapshot() const {
    const std::lock_guard lock(mutex_);
    return {attempts_, cancellations_, active_};
  }
  /// Waits (signalled, 5 s watchdog) until `done(snapshot)`.
  template <class Done>
  bool wait(Done done) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(5), [&] {
      return done(ExecutionProbeSnapshot{attempts_, cancellations_, active_});
    });
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::uint64_t attempts_ = 0;
  std::uint64_t cancellations_ = 0;
  std::uint64_t active_ = 0;
};

/// A probed synchronous function: counts the invocation and, when it returns or throws, a
/// cancellation if its context reports cancelled().
template <class F>
class ProbedFunction {
 public:
  ProbedFunction(F fn, std::shared_ptr<ProbeState> state)
      : fn_(std::move(fn)), state_(std::move(state)) {}

  decltype(auto) operator()(Context& ctx) {
    state_->begin();
    const AttemptEnd end{state_.get(), &ctx};
    if constexpr (std::invocable<F&, Context&>) {
      return std::invoke(fn_, ctx);
    } else {
      return std::invoke(fn_);
    }
  }

 private:
  struct AttemptEnd {
    ProbeState* state;
    const Context* ctx;
    ~AttemptEnd() { state->end(ctx->cancelled()); }
  };
  F fn_;
  std::shared_ptr<ProbeState> state_;
};

/// What one asynchronous attempt shares with the slot handler installed on its caller's slot.
struct ProbeAttempt {
  explicit ProbeAttempt(std::shared_ptr<ProbeState> s) : state(std::move(s)) {}
  std::shared_ptr<ProbeState> state;
  boost::asio::cancellation_signal inner;  ///< the slot the wrapped operation sees
  bool active = true;
  bool cancelled = false;
};

/// Installed on the attempt's (kevlar's) cancellation slot: counts, then forwards the emission to
/// the wrapped operation.
struct ProbeForwarder {
  std::shared_ptr<ProbeAttempt> attempt;
  void operator()(boost::asio::cancellation_type type) const {
    if (attempt->active && !attempt->cancelled) {
      attempt->cancelled = true;
      attempt->state->cancelled_while_active();
    }
    attempt->inner.emit(type);
  }
};

/// The completion handler the wrapped operation receives: the caller's handler's executor and
/// allocator (through the associators below), its own cancellation slot, and kevlar's attempt
/// context (kevlar::attempt_context) when the caller's handler has one.
template <class Handler>
class ProbeHandler {
 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;

  ProbeHandler(Handler h, std::shared_ptr<ProbeAttempt> attempt,
               boost::asio::cancellation_slot outer)
      : handler_(std::move(h)), attempt_(std::move(attempt)), outer_(outer) {}
  ProbeHandler(ProbeHandler&&) noexcept = default;
  ProbeHandler& operator=(ProbeHandler&&) = delete;
  ~ProbeHandler() {
    // Destroyed uninvoked (the operation's executor shut down): the attempt ends, uncancelled.
    if (attempt_ && attempt_->active) finish();
  }

  template <class... Args>
  void operator()(Args&&... args) {
    finish();
    std::move(handler_)(std::forward<Args>(args)...);
  }

  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
    return attempt_ ? attempt_->inner.slot() : cancellation_slot_type();
  }
  /// The context of the attempt (kevlar::attempt_context), or nullptr.
  [[nodiscard]] Context* kevlar_context() const noexcept { return attempt_context(handler_); }
  [[nodiscard]] const Handler& inner() const noexcept { return handler_; }

 private:
  void finish() {
    attempt_->active = false;
    // Asio's operations clear the slot they used before completing: it belongs to the next step.
    if (outer_.is_connected()) outer_.clear();
    attempt_->state->end(false);
  }

  Handler handler_;
  std::shared_ptr<ProbeAttempt> attempt_;
  boost::asio::cancellation_slot outer_;
};

/// A probed asynchronous attempt: an AsyncAttempt with the wrapped attempt's signature.
template <class A>
class ProbedAttempt {
 public:
  using Signature = boost::asio::completion_signature_of_t<A>;

  ProbedAttempt(A attempt, std::shared_ptr<ProbeState> state)
      : attempt_(std::move(attempt)), state_(std::move(state)) {}

  template <class Token>
  auto operator()(Token&& token) {
    return boost::asio::async_initiate<Token, Signature>(
        [this](auto handler) {
          using Handler = std::decay_t<decltype(handler)>;
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto attempt = std::make_shared<ProbeAttempt>(state_);
          state_->begin();
          if (slot.is_connected()) slot.template emplace<ProbeForwarder>(ProbeForwarder{attempt});
          attempt_(ProbeHandler<Handler>(std::move(handler), std::move(attempt), slot));
        },
        token);
  }

 private:
  A attempt_;
  std::shared_ptr<ProbeState> state_;
};

/// A probed awaitable factory.
template <class F>
class ProbedFactory {
 public:
  using Awaitable = std::remove_cvref_t<std::invoke_result_t<F&>>;

  ProbedFactory(F factory, std::shared_ptr<ProbeState> state)
      : factory_(std::move(factory)), state_(std::move(state)) {}

  Awaitable operator()() {
    state_->begin();
    try {
      return run(state_, factory_());
    } catch (...) {
      state_->end(false);
      throw;
    }
  }

 private:
  static Awaitable run(std::shared_ptr<ProbeState> state, Awaitable inner) {
    const boost::asio::cancellation_state cs = co_await boost::asio::this_coro::cancellation_state;
    const auto cancelled = [&cs] { return cs.cancelled() != boost::asio::cancellation_type::none; };
    using T = typename kevlar::detail::IsAwaitable<Awaitable>::value_type;
    if constexpr (std::is_void_v<T>) {
      try {
        co_await std::move(inner);
      } catch (...) {
        state->end(cancelled());
        throw;
      }
      state->end(cancelled());
    } else {
      std::optional<T> value;
      try {
        value.emplace(co_await std::move(inner));
      } catch (...) {
        state->end(cancelled());
        throw;
      }
      state->end(cancelled());
      co_return std::move(*value);
    }
  }

  F factory_;
  std::shared_ptr<ProbeState> state_;
};

}  // namespace detail

/// Wraps an operation and counts its attempts (invocations of the wrapped operation) and the
/// cancellations they saw, for tests that check what a shield did to the user's call without
/// instrumenting it:
/// ```
/// kevlar::testing::ExecutionProbe probe;
/// shield.execute(probe.wrap([](kevlar::Context& ctx) { return work(ctx); }));
/// EXPECT_EQ(probe.attempts(), 3u);   // the retry ran it three times
/// ```
///
/// What counts as a cancellation, per attempt (at most one each):
/// - wrap (synchronous `R fn(Context&)` or `R fn()`): Context::cancelled() is true when the
///   attempt returns or throws (the caller's stop token, a timeout's deadline);
/// - wrap_async (an AsyncAttempt): a cancellation emitted on the attempt's cancellation slot while
///   the attempt is active (before it completes); it is forwarded to the wrapped operation;
/// - wrap_awaitable (an AwaitableFactory): the coroutine's cancellation state reports a
///   cancellation when the attempt's awaitable ends.
///
/// The wrappers keep the wrapped operation's signature: wrap_async's result is an AsyncAttempt
/// with the same completion signature, completing on the same executor (it forwards the caller's
/// handler's executor and allocator, and kevlar::attempt_context), and giving the operation a
/// cancellation slot of its own that receives whatever reaches the attempt's slot. A wrapper
/// keeps the probe's counters alive; the probe may be destroyed first.
///
/// Thread-safety: the counters are updated and read under a lock; wrappers may run on any
/// threads at once. wait_for_* block on a condition variable signalled by each update (no
/// polling), with a 5 s watchdog that only bounds a deadlock.
class ExecutionProbe {
 public:
  ExecutionProbe() : state_(std::make_shared<detail::ProbeState>()) {}

  /// Wraps a synchronous function (`R fn(Context&)` or `R fn()`) for Shield::execute.
  template <class F>
  requires std::invocable<F&, Context&> || std::invocable<F&>
  [[nodiscard]] detail::ProbedFunction<F> wrap(F fn) const {
    return detail::ProbedFunction<F>(std::move(fn), state_);
  }
  /// Wraps an asynchronous attempt (`[&](auto token) { return op.async_x(..., token); }`) for
  /// Shield::execute_async. The wrapper refers to itself while an attempt starts: keep it alive
  /// until every attempt it started has been initiated (kevlar copies it into the execution).
  template <AsyncAttempt A>
  [[nodiscard]] detail::ProbedAttempt<A> wrap_async(A attempt) const {
    return detail::ProbedAttempt<A>(std::move(attempt), state_);
  }
  /// Wraps a nullary awaitable factory (`[&] { return client.get(id); }`) for
  /// Shield::execute_async. (A factory taking the attempt's Context reads the attempt number from
  /// it directly.)
  template <AwaitableFactory F>
  requires std::invocable<F&>
  [[nodiscard]] detail::ProbedFactory<F> wrap_awaitable(F factory) const {
    return detail::ProbedFactory<F>(std::move(factory), state_);
  }

  /// Attempts started so far.
  [[nodiscard]] std::uint64_t attempts() const { return state_->snapshot().attempts; }
  /// Attempts that saw a cancellation so far.
  [[nodiscard]] std::uint64_t cancellations() const { return state_->snapshot().cancellations; }
  /// Attempts running now.
  [[nodiscard]] std::uint64_t active() const { return state_->snapshot().active; }
  /// All three, read together.
  [[nodiscard]] ExecutionProbeSnapshot snapshot() const { return state_->snapshot(); }

  /// Blocks until at least `n` attempts started; false if the watchdog expired first.
  bool wait_for_attempts(std::uint64_t n) const {
    return state_->wait([n](const ExecutionProbeSnapshot& s) { return s.attempts >= n; });
  }
  /// Blocks until at least `n` attempts saw a cancellation; false if the watchdog expired first.
  bool wait_for_cancellations(std::uint64_t n) const {
    return state_->wait([n](const ExecutionProbeSnapshot& s) { return s.cancellations >= n; });
  }

 private:
  std::shared_ptr<detail::ProbeState> state_;
};

}  // namespace kevlar::testing

namespace boost::asio {

/// A probed attempt's handler completes on the caller's handler's executor...
template <class Handler, class DefaultCandidate>
struct associator<associated_executor, kevlar::testing::detail::ProbeHandler<Handler>,
                  DefaultCandidate> {
  using type = typename associated_executor<Handler, DefaultCandidate>::type;
  static type get(const kevlar::testing::detail::ProbeHandler<Handler>& h) noexcept {
    return associated_executor<Handler, DefaultCandidate>::get(h.inner());
  }
  static auto get(const kevlar::testing::detail::ProbeHandler<Handler>& h,
                  const DefaultCandidate& c) noexcept
      -> decltype(associated_executor<Handler, DefaultCandidate>::get(h.inner(), c)) {
    return associated_executor<Handler, DefaultCandidate>::get(h.inner(), c);
  }
};

/// ...and allocates with its allocator.
template <class Handler, class DefaultCandidate>
struct associator<associated_allocator, kevlar::testing::detail::ProbeHandler<Handler>,
                  DefaultCandidate> {
  using type = typename associated_allocator<Handler, DefaultCandidate>::type;
  static type get(const kevlar::testing::detail::ProbeHandler<Handler>& h) noexcept {
    return associated_allocator<Handler, DefaultCandidate>::get(h.inner());
  }
  static auto get(const kevlar::testing::detail::ProbeHandler<Handler>& h,
                  const DefaultCandidate& c) noexcept
      -> decltype(associated_allocator<Handler, DefaultCandidate>::get(h.inner(), c)) {
    return associated_allocator<Handler, DefaultCandidate>::get(h.inner(), c);
  }
};

}  // namespace boost::asio
