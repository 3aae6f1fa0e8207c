// kevlar — testing kit: drive a shield's strategies event by event, with a manual clock and no
// io_context, and see what they decide.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/observer.hpp>
#include <kevlar/outcome.hpp>
#include <kevlar/basic_shield.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace kevlar::testing {

namespace detail {

/// The event loop of a StrategyDriver: a FIFO of jobs run on the test's thread when the driver
/// says so, and the execution context kevlar's services (the deadline queue) attach to.
class DriverLoop {
 public:
  DriverLoop();
  ~DriverLoop();
  DriverLoop(const DriverLoop&) = delete;
  DriverLoop& operator=(const DriverLoop&) = delete;

  /// Queues `job`. Once shut down, the job is still queued, never run: shut_down() and the
  /// destructor destroy it (which abandons what it owned), as an io_context's destructor does.
  void post(std::function<void()> job);
  /// Runs jobs, including those they post, until none is left. Throws std::logic_error after
  /// `limit` jobs in one call (something re-posts itself forever).
  std::size_t run(std::size_t limit = 100000);
  [[nodiscard]] std::size_t pending() const noexcept;
  /// Stops running jobs and destroys every queued one, including those posted while destroying
  /// (the driver is being destroyed).
  void shut_down() noexcept;

  [[nodiscard]] boost::asio::execution_context& context() noexcept { return *context_; }

 private:
  struct Jobs;
  std::unique_ptr<Jobs> jobs_;
  std::unique_ptr<boost::asio::execution_context> context_;
  bool shut_down_ = false;
};

/// The executor of a DriverLoop. Jobs never run inside execute(): they run when the driver runs
/// its loop, on the test's thread.
class DriverExecutor {
 public:
  explicit DriverExecutor(DriverLoop& loop) noexcept : loop_(&loop) {}

  template <class F>
  void execute(F&& f) const {
    // std::function needs a copyable target; Asio's handlers are move-only.
    auto holder = std::make_shared<std::decay_t<F>>(std::forward<F>(f));
    loop_->post([holder]() mutable { std::move (*holder)(); });
  }
  [[nodiscard]] boost::asio::execution_context& query(
      boost::asio::execution::context_t) const noexcept {
    return loop_->context();
  }
  static constexpr boost::asio::execution::blocking_t query(
      boost::asio::execution::blocking_t) noexcept {
    return boost::asio::execution::blocking.never;
  }
  [[nodiscard]] DriverExecutor require(
      boost::asio::execution::blocking_t::never_t) const noexcept {
    return *this;
  }
  friend bool operator==(const DriverExecutor& a, const DriverExecutor& b) noexcept {
    return a.loop_ == b.loop_;
  }
  friend bool operator!=(const DriverExecutor& a, const DriverExecutor& b) noexcept {
    return a.loop_ != b.loop_;
  }

 private:
  DriverLoop* loop_;
};

}  // namespace detail

/// What a driven execution did at its boundary, in the order it happened.
struct DriverAction {
  enum class Kind : unsigned char {
    start_attempt,   ///< the user's operation was started (attempt `attempt`)
    cancel_attempt,  ///< a cancellation of type `type` reached attempt `attempt`
    deliver,         ///< the execution completed (StrategyDriver::outcome)
  };
  Kind kind = Kind::start_attempt;
  std::uint32_t attempt = 0;  ///< StrategyDriver's attempt index (0 for deliver)
  boost::asio::cancellation_type type = boost::asio::cancellation_type::none;

  static DriverAction started(std::uint32_t attempt) { return {Kind::start_attempt, attempt}; }
  static DriverAction cancelled(std::uint32_t attempt,
                                boost::asio::cancellation_type type =
                                    boost::asio::cancellation_type::terminal) {
    return {Kind::cancel_attempt, attempt, type};
  }
  static DriverAction delivered() { return {Kind::deliver, 0}; }

  friend bool operator==(const DriverAction&, const DriverAction&) = default;
};

/// Prints `start(1)`, `cancel(0, terminal)`, `deliver` (test failure messages).
std::ostream& operator<<(std::ostream& os, const DriverAction& action);
/// The name of a cancellation type, as DriverAction prints it.
[[nodiscard]] const char* to_string(boost::asio::cancellation_type type) noexcept;

/// How a StrategyDriver's operation reacts to a cancellation.
struct StrategyDriverOptions {
  /// True: a cancelled attempt completes with `operation_aborted` (posted, as Asio's operations
  /// do). False: it records the cancellation and waits for the test to complete it (an operation
  /// that ignores cancellation).
  bool abort_on_cancel = true;
  /// Attach an EventRecorder that records every event (StrategyDriver::events, recorder).
  bool record_events = true;
};

/// What StrategyDriver::inject does at its step (inject_at_every_step).
enum class Injection : unsigned char {
  none,          ///< nothing: the script runs as written
  failure,       ///< every pending operation fails with the injection's error
  cancellation,  ///< the caller cancels the execution (terminal)
};

/// One operation a driven execution started.
struct DriverAttempt {
  std::uint32_t context_attempt = 0;  ///< Context::attempt() of the attempt that started it
  /// Cancellation types that reached it, in order.
  std::vector<boost::asio::cancellation_type> cancellations;
  bool completed = false;  ///< it completed (or was dropped); it can no longer be completed
};

/// Runs one asynchronous execution of a shield event by event, on a ManualClock and without an
/// io_context, and records what its strategies decide: which operations started, which were
/// cancelled, which clock waits are pending, the events the strategies emitted, and the outcome.
/// It tests a strategy's decisions without sockets or threads: each step is one call here.
///
/// ```
/// StrategyDriver<int> d(Shield().retry(
///     RetryOptions{.max_retries = 1, .backoff = Backoff::constant(100ms)}));
/// d.start();                                   // -> start(0)
/// d.fail(0, make_error_code(std::errc::io_error));
/// EXPECT_EQ(d.timers(), std::vector<Clock::duration>{100ms});  // the backoff
/// d.advance(100ms);                            // -> start(1)
/// d.succeed(1, 42);                            // -> deliver
/// EXPECT_EQ(d.outcome().value(), 42);
/// ```
///
/// The execution is real: `Shield::execute_async` with an operation of signature
/// `void(error_code, T)` and a completion handler whose executor is the driver's own loop (jobs
/// run when a driver call returns, never inside it) and whose cancellation slot is the driver's
/// (cancel()). The shield runs on the driver's ManualClock (Shield::with_clock), so its timers
/// are the clock's waits (timers()) and advance() releases them.
///
/// Thread-safety: a driver is used from one thread, and its loop is not a thread-safe executor: do
/// not hand it to real Asio I/O objects (a socket, a steady_timer), whose completions would come
/// from another thread. It owns the execution: destroying it while the execution is pending
/// abandons the execution (every strategy's on_finish runs), including one queued in a limiter
/// shared with another driver. Drivers sharing a clock see each other's waits in timers(), and
/// settle() moves that clock for all of them.
template <class T = int>
class StrategyDriver {
  static_assert(!std::is_void_v<T> && std::is_default_constructible_v<T>,
                "StrategyDriver's operations complete with a default-constructible value");

 public:
  using value_type = T;

  /// Drives `shield` (its strategies, clauses and observers) on a fresh ManualClock.
  explicit StrategyDriver(const BasicShield& shield, StrategyDriverOptions options = {})
      : StrategyDriver(shield, ManualClock::create(), options) {}
  /// Drives `shield` on `clock` (shared with state the test sets up, such as a breaker's window).
  StrategyDriver(const BasicShield& shield, std::shared_ptr<ManualClock> clock,
                 StrategyDriverOptions options = {})
      : options_(options), clock_(std::move(clock)) {
    if (!clock_) throw std::invalid_argument("kevlar::testing::StrategyDriver: null clock");
    BasicShield s = shield.with_clock(clock_);
    if (options_.record_events) {
      recorder_ = std::make_shared<EventRecorder>();
      s = s.observed_by(recorder_);
    }
    shield_.emplace(std::move(s));
  }
  StrategyDriver(const StrategyDriver&) = delete;
  StrategyDriver& operator=(const StrategyDriver&) = delete;
  ~StrategyDriver() {
    // Pending operations' handlers first (the execution is abandoned), then the clock waits that
    // would complete on the loop (a backoff, the deadline service's timer), then queued jobs, then
    // the shield; the loop's execution context (the deadline service) goes last.
    handlers_.clear();
    clock_->abandon_waits(boost::asio::any_io_executor(detail::DriverExecutor(loop_)));
    // Still alive (the caller's slot keeps its handler until the execution ends): it waits in a
    // queue shared with other drivers (a concurrency limit). Cancelling it makes the queue post
    // its completion to this loop, where shutting down destroys it, abandoning the execution.
    if (caller_signal_.slot().has_handler()) {
      caller_signal_.emit(boost::asio::cancellation_type::terminal);
    }
    loop_.shut_down();
    shield_.reset();
  }

  // ---- events in -----------------------------------------------------------------------------

  /// Starts the execution (once). Throws what Shield::execute_async throws.
  void start() {
    if (started_) throw std::logic_error("kevlar::testing::StrategyDriver: already started");
    started_ = true;
    if (take_injection()) return;
    shield_->execute_async([self = this](auto token) { return self->async_operation(std::move(token)); },
                           CallerHandler{this});
    run();
  }
  /// Operation `attempt` completes with `value`.
  void succeed(std::uint32_t attempt, T value) {
    if (take_injection()) return;
    finish(attempt, {}, std::move(value));
    run();
  }
  /// Operation `attempt` completes with `ec` (not empty).
  void fail(std::uint32_t attempt, boost::system::error_code ec) {
    if (!ec) throw std::invalid_argument("kevlar::testing::StrategyDriver::fail: empty error code");
    if (take_injection()) return;
    finish(attempt, ec, T{});
    run();
  }
  /// The caller cancels the execution (through its completion handler's cancellation slot).
  void cancel(boost::asio::cancellation_type type = boost::asio::cancellation_type::terminal) {
    if (take_injection()) return;
    caller_signal_.emit(type);
    run();
  }
  /// Moves the clock forward by `d` and runs what became due (backoffs, timeouts, staggers).
  void advance(Clock::duration d) {
    if (take_injection()) return;
    clock_->advance(d);
    run();
  }
  /// Destroys operation `attempt`'s completion handler without calling it (its executor shut
  /// down): the execution is abandoned.
  void drop(std::uint32_t attempt) {
    if (take_injection()) return;
    DriverAttempt& a = checked(attempt);
    a.completed = true;
    handlers_.at(attempt).reset();
    run();
  }
  /// Runs queued jobs until none is left (every event call does this before returning).
  void run() { loop_.run(); }

  // ---- what happened -------------------------------------------------------------------------

  /// Boundary actions since the last take_actions(), in order.
  [[nodiscard]] std::vector<DriverAction> take_actions() {
    std::vector<DriverAction> r(all_actions_.begin() + static_cast<std::ptrdiff_t>(taken_),
                                all_actions_.end());
    taken_ = all_actions_.size();
    return r;
  }
  /// Every boundary action so far.
  [[nodiscard]] const std::vector<DriverAction>& actions() const noexcept { return all_actions_; }

  /// Operations started so far.
  [[nodiscard]] std::uint32_t attempts() const noexcept {
    return static_cast<std::uint32_t>(attempts_.size());
  }
  [[nodiscard]] const DriverAttempt& attempt(std::uint32_t i) const { return attempts_.at(i); }
  /// Indices of the operations that are still pending (started, not completed nor dropped).
  [[nodiscard]] std::vector<std::uint32_t> running() const {
    std::vector<std::uint32_t> r;
    for (std::uint32_t i = 0; i < attempts(); ++i) {
      if (!attempts_[i].completed) r.push_back(i);
    }
    return r;
  }

  /// Pending clock waits, as durations from now, earliest first: a retry's backoff, the deadline
  /// service's wait for a timeout or a hedge's stagger. (The deadline service may keep one wait
  /// for a deadline that was disarmed, until it expires or is swept.)
  [[nodiscard]] std::vector<Clock::duration> timers() const {
    std::vector<Clock::duration> r;
    const Clock::time_point now = clock_->now();
    for (Clock::time_point t : clock_->pending_deadlines()) r.push_back(t - now);
    return r;
  }

  /// Times the execution completed: 0 or 1 (more is a bug the driver reports here).
  [[nodiscard]] std::size_t deliveries() const noexcept { return deliveries_; }
  [[nodiscard]] bool delivered() const noexcept { return deliveries_ != 0; }
  /// The execution's outcome. Throws std::logic_error if it has not completed.
  [[nodiscard]] const Outcome<T>& outcome() const {
    if (!outcome_) {
      throw std::logic_error("kevlar::testing::StrategyDriver::outcome: not delivered yet");
    }
    return *outcome_;
  }

  /// The details of every event the shield emitted, in order (a copy; empty without
  /// StrategyDriverOptions::record_events).
  [[nodiscard]] std::vector<RecordedDetail> events() const {
    return recorder_ ? recorder_->details() : std::vector<RecordedDetail>{};
  }
  /// The events of kind `Detail`, in order.
  template <class Detail>
  [[nodiscard]] std::vector<Detail> events_of() const {
    return recorder_ ? recorder_->template events_of<Detail>() : std::vector<Detail>{};
  }
  /// The recorder attached to the shield (null without StrategyDriverOptions::record_events):
  /// the events with their strategy index and attempt.
  [[nodiscard]] const std::shared_ptr<EventRecorder>& recorder() const noexcept {
    return recorder_;
  }

  [[nodiscard]] ManualClock& clock() const noexcept { return *clock_; }
  /// The shield as driven (on the driver's clock, with its recorder attached).
  [[nodiscard]] const BasicShield& shield() const noexcept { return *shield_; }
  [[nodiscard]] const StrategyDriverOptions& options() const noexcept { return options_; }

  // ---- failure injection (inject_at_every_step) -----------------------------------------------

  /// Event calls counted so far (start, succeed, fail, cancel, advance, drop), injected or not.
  [[nodiscard]] std::size_t steps() const noexcept { return steps_; }
  /// At the event call numbered `step` (0 is start()), does `kind` instead, and ignores every event
  /// call after it; settle() then completes the execution. A failure needs a non-empty `failure`.
  void inject(std::size_t step, Injection kind,
              boost::system::error_code failure = make_error_code(boost::system::errc::io_error)) {
    if (kind == Injection::failure && !failure) {
      throw std::invalid_argument("kevlar::testing::StrategyDriver::inject: empty error code");
    }
    if (kind == Injection::none) {
      injection_.reset();
    } else {
      injection_ = PendingInjection{step, kind, failure};
    }
  }
  /// True once the injection happened.
  [[nodiscard]] bool injected() const noexcept { return injected_; }
  /// Brings the execution to its end after an injection: runs the loop, fails every pending
  /// operation with the injection's error (`operation_aborted` after a cancellation), and moves
  /// the clock to the next pending wait, until the execution delivered and no operation is
  /// pending. Throws std::logic_error if it cannot (the execution hangs).
  void settle() {
    const boost::system::error_code ec =
        injection_ && injection_->kind == Injection::failure
            ? injection_->failure
            : boost::system::error_code(boost::asio::error::operation_aborted);
    for (int round = 0; round < 1000; ++round) {
      loop_.run();
      const std::vector<std::uint32_t> pending = running();
      if (delivered() && pending.empty()) return;
      if (!pending.empty()) {
        // Finishing one may cancel another (a hedge's winner), which then aborts on its own.
        for (std::uint32_t i : pending) {
          if (!attempts_[i].completed) finish(i, ec, T{});
        }
        continue;
      }
      const std::vector<Clock::time_point> waits = clock_->pending_deadlines();
      if (waits.empty()) break;
      clock_->advance_to(waits.front());
    }
    loop_.run();
    if (!delivered() || !running().empty()) {
      throw std::logic_error(
          "kevlar::testing::StrategyDriver::settle: the execution did not complete (" +
          std::to_string(running().size()) + " operations pending, " +
          std::to_string(clock_->pending_timers()) + " clock waits)");
    }
  }

 private:
  struct PendingInjection {
    std::size_t step;
    Injection kind;
    boost::system::error_code failure;
  };

  /// Counts an event call; true if it must be skipped (it is the injection, or comes after it).
  bool take_injection() {
    const std::size_t step = steps_++;
    if (injected_) return true;
    if (!injection_ || injection_->step != step) return false;
    injected_ = true;
    if (step == 0) {  // start() itself: the execution starts, then the injection hits it
      shield_->execute_async([self = this](auto token) { return self->async_operation(std::move(token)); },
                             CallerHandler{this});
      loop_.run();
    }
    if (injection_->kind == Injection::cancellation) {
      caller_signal_.emit(boost::asio::cancellation_type::terminal);
    } else {
      for (std::uint32_t i : running()) {
        if (!attempts_[i].completed) finish(i, injection_->failure, T{});
      }
    }
    loop_.run();
    return true;
  }

  /// A pending operation's completion handler, type-erased.
  class AnyHandler {
   public:
    virtual ~AnyHandler() = default;
    virtual void complete(boost::system::error_code ec, T value) = 0;
  };
  template <class Handler>
  class HandlerBox final : public AnyHandler {
   public:
    explicit HandlerBox(Handler&& h) : h_(std::move(h)) {}
    void complete(boost::system::error_code ec, T value) override {
      Handler h(std::move(h_));
      std::move(h)(ec, std::move(value));
    }

   private:
    Handler h_;
  };

  /// Receives a cancellation aimed at an operation.
  struct Canceller {
    StrategyDriver* driver;
    std::uint32_t index;
    void operator()(boost::asio::cancellation_type type) const {
      // Completing the operation clears this slot, destroying this object: work from locals.
      StrategyDriver* d = driver;
      const std::uint32_t i = index;
      d->attempts_[i].cancellations.push_back(type);
      d->record(DriverAction::cancelled(i, type));
      if (d->options_.abort_on_cancel && !d->attempts_[i].completed) {
        d->attempts_[i].completed = true;
        d->loop_.post([d, i] { d->complete_handler(i, boost::asio::error::operation_aborted, T{}); });
      }
    }
  };

  template <class Token>
  auto async_operation(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, T)>(
        [self = this](auto handler) { self->start_operation(std::move(handler)); }, token);
  }

  template <class Handler>
  void start_operation(Handler handler) {
    const auto index = static_cast<std::uint32_t>(attempts_.size());
    DriverAttempt a;
    if (const Context* ctx = attempt_context(handler)) a.context_attempt = ctx->attempt();
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    attempts_.push_back(std::move(a));
    handlers_.push_back(std::make_unique<HandlerBox<Handler>>(std::move(handler)));
    slots_.push_back(slot);
    record(DriverAction::started(index));
    if (slot.is_connected()) slot.template emplace<Canceller>(Canceller{this, index});
  }

  DriverAttempt& checked(std::uint32_t i) {
    if (i >= attempts_.size()) {
      throw std::out_of_range("kevlar::testing::StrategyDriver: no operation " + std::to_string(i) +
                              " (" + std::to_string(attempts_.size()) + " started)");
    }
    if (attempts_[i].completed) {
      throw std::logic_error("kevlar::testing::StrategyDriver: operation " + std::to_string(i) +
                             " already completed");
    }
    return attempts_[i];
  }

  void finish(std::uint32_t i, boost::system::error_code ec, T value) {
    checked(i).completed = true;
    complete_handler(i, ec, std::move(value));
  }

  void complete_handler(std::uint32_t i, boost::system::error_code ec, T value) {
    std::unique_ptr<AnyHandler> h = std::move(handlers_.at(i));
    if (!h) return;  // dropped
    // The operation is over: its slot belongs to whatever step comes next (Asio's operations
    // clear it before completing).
    if (slots_[i].is_connected()) slots_[i].clear();
    h->complete(ec, std::move(value));
  }

  void record(DriverAction a) { all_actions_.push_back(a); }

  /// The caller's completion handler: the driver's executor and cancellation slot.
  struct CallerHandler {
    using executor_type = detail::DriverExecutor;
    using cancellation_slot_type = boost::asio::cancellation_slot;
    StrategyDriver* driver;
    void operator()(boost::system::error_code ec, T value) const {
      StrategyDriver& d = *driver;
      ++d.deliveries_;
      d.outcome_.emplace(ec ? Outcome<T>::from_error(ec) : Outcome<T>::from_value(std::move(value)));
      d.record(DriverAction::delivered());
    }
    [[nodiscard]] executor_type get_executor() const noexcept {
      return detail::DriverExecutor(driver->loop_);
    }
    [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
      return driver->caller_signal_.slot();
    }
  };

  StrategyDriverOptions options_;
  /// Before the loop: the deadline service in the loop's context holds a timer of this clock.
  std::shared_ptr<ManualClock> clock_;
  detail::DriverLoop loop_;  // before the shield and the handlers: it outlives them
  std::shared_ptr<EventRecorder> recorder_;
  std::optional<BasicShield> shield_;
  boost::asio::cancellation_signal caller_signal_;
  std::vector<DriverAttempt> attempts_;
  std::vector<std::unique_ptr<AnyHandler>> handlers_;
  std::vector<boost::asio::cancellation_slot> slots_;
  std::vector<DriverAction> all_actions_;
  std::size_t taken_ = 0;  ///< all_actions_ returned by take_actions() so far
  std::optional<Outcome<T>> outcome_;
  std::size_t deliveries_ = 0;
  bool started_ = false;
  std::size_t steps_ = 0;
  std::optional<PendingInjection> injection_;
  bool injected_ = false;
};

/// One run of inject_at_every_step.
struct InjectionPoint {
  std::size_t step = 0;  ///< the event call replaced (0 is start())
  Injection kind = Injection::none;  ///< none for the reference run, which injects nothing
};

/// Boost.MySQL's `check_network_errors`, for strategies: runs `script` once as written (the
/// reference run), then once per event call it makes and per injection — every pending operation
/// fails with `failure`, or the caller cancels — on a fresh driver over `make_shield()`, with that
/// call and every later one replaced by the injection and StrategyDriver::settle(). After each run
/// it checks what holds whatever the strategy decided: the execution completed exactly once and
/// left no operation pending (std::logic_error otherwise, naming the step); then `check(driver,
/// point)` asserts what the test expects. Returns the number of runs.
template <class T>
std::size_t inject_at_every_step(
    const std::function<BasicShield()>& make_shield,
    const std::function<void(StrategyDriver<T>&)>& script,
    const std::function<void(StrategyDriver<T>&, const InjectionPoint&)>& check,
    boost::system::error_code failure = make_error_code(boost::system::errc::io_error),
    StrategyDriverOptions options = {}) {
  auto verify = [](StrategyDriver<T>& d, const InjectionPoint& p) {
    if (d.deliveries() != 1 || !d.running().empty()) {
      throw std::logic_error(
          "kevlar::testing::inject_at_every_step: at step " + std::to_string(p.step) +
          (p.kind == Injection::none      ? " (reference run)"
           : p.kind == Injection::failure ? " (failure)"
                                          : " (cancellation)") +
          ": " + std::to_string(d.deliveries()) + " deliveries, " +
          std::to_string(d.running().size()) + " operations pending");
    }
  };
  std::size_t steps = 0;
  {
    StrategyDriver<T> d(make_shield(), options);
    script(d);
    steps = d.steps();
    const InjectionPoint p{0, Injection::none};
    verify(d, p);
    check(d, p);
  }
  std::size_t runs = 1;
  for (std::size_t step = 0; step < steps; ++step) {
    for (const Injection kind : {Injection::failure, Injection::cancellation}) {
      StrategyDriver<T> d(make_shield(), options);
      d.inject(step, kind, failure);
      script(d);
      d.settle();
      const InjectionPoint p{step, kind};
      verify(d, p);
      check(d, p);
      ++runs;
    }
  }
  return runs;
}

}  // namespace kevlar::testing
