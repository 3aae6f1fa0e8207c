// The engine's machine on its own (detail::CallBase::advance and its events): it calls the
// strategies and returns what the execution needs next, and never runs an operation, arms a timer
// or delivers by itself. The Machine tests drive it event by event with no shell and no
// io_context; the ThreeRunners tests (at the end) run the same scripts through the machine and
// through both shells and compare the traces.
#include "async_ops.hpp"
#include "test_strategies.hpp"

#include <kevlar/detail/engine.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/queue_wait.hpp>

#include <gtest/gtest.h>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

namespace kevlar {
namespace {

using detail::EngineAction;
using namespace std::chrono_literals;
using Strings = std::vector<std::string>;

/// An execution whose shell is the test: it counts what the machine would have had a shell do, if
/// the machine did it itself.
class MachineCall final : public detail::CallBase {
 public:
  using CallBase::CallBase;
  ~MachineCall() = default;

  int operations_run = 0;
  int deliveries = 0;

 private:
  void invoke_operation() override { ++operations_run; }
  void deliver() override { ++deliveries; }
  void destroy() noexcept override {}
  [[nodiscard]] boost::asio::any_io_executor call_executor() const noexcept override { return {}; }
};

/// A strategy whose every callback logs "<id>:<callback>" and answers what the test scripted.
class Scripted final : public Strategy {
 public:
  Scripted(std::string id, test::EventLog& log) : id_(std::move(id)), log_(&log) {}
  std::string describe() const override { return "Scripted(" + id_ + ")"; }
  Step on_start(Layer& layer) override {
    log_->add(id_ + ":start");
    return start ? start(layer) : Step::run_inner;
  }
  Step on_inner_complete(Layer& layer) override {
    log_->add(id_ + ":inner");
    return inner ? inner(layer) : Step::complete;
  }
  Step on_wait_complete(Layer& layer, const boost::system::error_code& ec) override {
    log_->add(id_ + ":wait " + (ec ? "aborted" : "ok"));
    return wait ? wait(layer, ec) : Step::complete;
  }
  void on_finish(Layer&) noexcept override { log_->add(id_ + ":finish"); }
  /// Adds `what` to the trace as this layer's (what a script's coroutine did).
  void note(const std::string& what) const { log_->add(id_ + ":" + what); }

  std::function<Step(Layer&)> start;
  std::function<Step(Layer&)> inner;
  std::function<Step(Layer&, const boost::system::error_code&)> wait;

 private:
  std::string id_;
  test::EventLog* log_;
};

/// One execution of a pipeline of the given strategies (outermost first), driven by hand.
class Machine : public ::testing::Test {
 protected:
  MachineCall& start_pipeline(std::vector<Strategy*> strategies) {
    std::size_t offset = 0;
    for (Strategy* s : strategies) {
      layers_.push_back(detail::PipelineLayer{s, &clause_, offset, false});
      offset += (s->traits().frame_size + alignof(std::max_align_t) - 1) /
                alignof(std::max_align_t) * alignof(std::max_align_t);
    }
    EXPECT_LE(offset, sizeof(frames_));
    view_.layers = layers_.data();
    view_.size = layers_.size();
    view_.frame_bytes = offset;
    view_.clock = clock_.get();
    call_.emplace(view_, reinterpret_cast<std::byte*>(frames_), context_);
    return *call_;
  }

  std::shared_ptr<ManualClock> clock_ = ManualClock::create();
  Clause clause_ = Clause().error(boost::asio::error::connection_reset);
  std::vector<detail::PipelineLayer> layers_;
  detail::PipelineView view_;
  Context context_{*clock_, false};
  alignas(std::max_align_t) std::max_align_t frames_[8];
  std::optional<MachineCall> call_;
  test::EventLog log_;
};

TEST_F(Machine, AnOperationIsAnActionTheShellPerforms) {
  Scripted outer("outer", log_);
  Scripted inner("inner", log_);
  MachineCall& call = start_pipeline({&outer, &inner});

  EXPECT_EQ(call.advance(Step::run_inner), EngineAction::start_operation);
  EXPECT_EQ(call.operations_run, 0) << "the machine asks for the operation, it does not run it";
  EXPECT_EQ(context_.attempt(), 1u) << "the attempt is counted when it is asked for";
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "inner:start"}));

  call.outcome().set_success();
  EXPECT_EQ(call.operation_done(), EngineAction::deliver);
  EXPECT_EQ(call.deliveries, 0) << "delivering is the shell's";
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "inner:start", "inner:inner", "inner:finish",
                                    "outer:inner", "outer:finish"}));
}

TEST_F(Machine, AWaitIsAnActionWithItsDeadline) {
  Scripted layer("retry", log_);
  layer.start = [](Layer& l) { return l.wait_for(3s); };
  layer.wait = [](Layer&, const boost::system::error_code& ec) {
    return ec ? Step::complete : Step::run_inner;
  };
  MachineCall& call = start_pipeline({&layer});

  EXPECT_EQ(call.advance(Step::run_inner), EngineAction::wait);
  EXPECT_EQ(call.wait_deadline(), clock_->now() + 3s) << "the shell arms the wait";

  EXPECT_EQ(call.wait_done({}), EngineAction::start_operation);
  EXPECT_EQ(context_.attempt(), 1u);
  call.outcome().set_success();
  EXPECT_EQ(call.operation_done(), EngineAction::deliver);
  EXPECT_EQ(log_.events(), (Strings{"retry:start", "retry:wait ok", "retry:inner", "retry:finish"}));
}

TEST_F(Machine, AnAbortedWaitReachesTheStrategyThatAskedForIt) {
  Scripted outer("outer", log_);
  Scripted waiter("waiter", log_);
  waiter.start = [](Layer& l) { return l.wait_for(1s); };
  MachineCall& call = start_pipeline({&outer, &waiter});

  ASSERT_EQ(call.advance(Step::run_inner), EngineAction::wait);
  EXPECT_EQ(call.wait_done(boost::asio::error::operation_aborted), EngineAction::deliver);
  EXPECT_EQ(call.operations_run, 0);
  EXPECT_EQ(context_.attempt(), 0u) << "no attempt was asked for";
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "waiter:start", "waiter:wait aborted",
                                    "waiter:finish", "outer:inner", "outer:finish"}));
}

TEST_F(Machine, ARepeaterAsksForEachAttemptInTurn) {
  test::Repeat repeat(2, 1s);
  MachineCall& call = start_pipeline({&repeat});

  EXPECT_EQ(call.advance(Step::run_inner), EngineAction::start_operation);
  call.outcome().set_error(boost::asio::error::connection_reset);  // handled: try again
  EXPECT_EQ(call.operation_done(), EngineAction::wait);
  EXPECT_EQ(call.wait_done({}), EngineAction::start_operation);
  EXPECT_EQ(context_.attempt(), 2u);
  call.outcome().set_error(boost::asio::error::connection_reset);
  EXPECT_EQ(call.operation_done(), EngineAction::wait);
  EXPECT_EQ(call.wait_done({}), EngineAction::start_operation);
  call.outcome().set_success();
  EXPECT_EQ(call.operation_done(), EngineAction::deliver);
  EXPECT_EQ(context_.attempt(), 3u);
  EXPECT_EQ(call.outcome().kind, OutcomeKind::value);
  EXPECT_EQ(call.operations_run, 0);
}

TEST_F(Machine, ARejectionDeliversWithoutAskingForAnOperation) {
  Scripted outer("outer", log_);
  test::Reject reject(errc::circuit_open);
  MachineCall& call = start_pipeline({&outer, &reject});

  EXPECT_EQ(call.advance(Step::run_inner), EngineAction::deliver);
  EXPECT_EQ(context_.attempt(), 0u);
  EXPECT_EQ(call.outcome().error, make_error_code(errc::circuit_open));
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "outer:inner", "outer:finish"}));
}

TEST_F(Machine, ASuspendedStrategyLeavesTheExecutionPending) {
  Scripted outer("outer", log_);
  Scripted own_wait("own_wait", log_);
  own_wait.start = [](Layer&) { return Step::suspend; };
  MachineCall& call = start_pipeline({&outer, &own_wait});

  EXPECT_EQ(call.advance(Step::run_inner), EngineAction::pending);
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "own_wait:start"}));
  // The strategy's own wait handler reports back as a wait.
  EXPECT_EQ(call.wait_done({}), EngineAction::deliver);
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "own_wait:start", "own_wait:wait ok",
                                    "own_wait:finish", "outer:inner", "outer:finish"}));
}

TEST_F(Machine, AThrowingCallbackCompletesItsLayerWithTheException) {
  Scripted outer("outer", log_);
  Scripted thrower("thrower", log_);
  thrower.inner = [](Layer&) -> Step { throw std::runtime_error("judging failed"); };
  MachineCall& call = start_pipeline({&outer, &thrower});

  ASSERT_EQ(call.advance(Step::run_inner), EngineAction::start_operation);
  call.outcome().set_success();
  EXPECT_EQ(call.operation_done(), EngineAction::deliver);
  EXPECT_EQ(call.outcome().kind, OutcomeKind::exception);
  EXPECT_EQ(log_.events(), (Strings{"outer:start", "thrower:start", "thrower:inner",
                                    "thrower:finish", "outer:inner", "outer:finish"}));
}

TEST_F(Machine, AnEmptyPipelineAsksForTheOperationAndDelivers) {
  MachineCall& call = start_pipeline({});
  EXPECT_EQ(call.advance(Step::run_inner), EngineAction::start_operation);
  EXPECT_EQ(context_.attempt(), 1u);
  call.outcome().set_error(boost::asio::error::connection_reset);
  EXPECT_EQ(call.operation_done(), EngineAction::deliver);
  EXPECT_EQ(call.outcome().error, boost::asio::error::connection_reset);
}

// ---- One script, three runners: the synchronous shell, the asynchronous shell, the machine -----
//
// The same scripted strategies run through Shield::execute, Shield::execute_async and the machine
// driven by hand must produce the same trace: the strategies' callbacks in order, and what the
// runner did in between ("op" for an attempt of the operation, "wait <ms>" for a wait it
// performed, "deliver ok" / "deliver failed" at the end). The shells' waits go through a clock
// that jumps to each deadline as it is asked to wait, so that no test sleeps.

/// A clock that, asked to wait until t, logs the wait and jumps to t: at once for a blocking wait,
/// through the waiter's executor for a timer's. Enough for the engine's own waits, which these
/// scripts use; not for a timeout or a hedge (its timers neither cancel nor abandon).
class JumpClock final : public Clock {
 public:
  explicit JumpClock(test::EventLog& log) : log_(&log) {}
  [[nodiscard]] time_point now() const noexcept override {
    return time_point(duration(now_.load()));
  }
  bool sleep_until(time_point deadline, std::stop_token /*stop*/) const override {
    jump(deadline);
    return true;
  }
  [[nodiscard]] std::unique_ptr<ClockTimer> make_timer(
      const boost::asio::any_io_executor& /*executor*/) const override {
    return std::make_unique<Timer>(*this);
  }

 private:
  class Timer final : public ClockTimer {
   public:
    explicit Timer(const JumpClock& clock) : clock_(&clock) {}
    void async_wait_until(Clock::time_point deadline, ClockWaiter& waiter) override {
      clock_->jump(deadline);
      boost::asio::post(waiter.executor(), [&waiter] { waiter.complete({}); });
    }
    void cancel() noexcept override {}

   private:
    const JumpClock* clock_;
  };

  void jump(time_point deadline) const {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now());
    log_->add("wait " + std::to_string(wait.count()) + "ms");
    const duration::rep to = deadline.time_since_epoch().count();
    duration::rep from = now_.load();
    while (from < to && !now_.compare_exchange_weak(from, to)) {
    }
  }

  test::EventLog* log_;
  mutable std::atomic<duration::rep> now_{duration(std::chrono::hours(1)).count()};
};

/// Scripts the outer and the inner strategy of a two-layer pipeline (fresh objects each run).
using Script = std::function<void(Scripted& outer, Scripted& inner)>;

/// A strategy that does not own itself, for a shield built around one on the test's stack.
std::shared_ptr<Scripted> borrowed(Scripted& s) { return {&s, [](Scripted*) {}}; }

/// A shield of two scripted strategies on a JumpClock, for one run of a shell.
struct ShieldRun {
  explicit ShieldRun(const Script& script) {
    script(outer, inner);
    shield = Shield{}
                 .with_clock(std::make_shared<JumpClock>(log))
                 .use(borrowed(outer))
                 .use(borrowed(inner));
  }
  test::EventLog log;
  Scripted outer{"outer", log};
  Scripted inner{"inner", log};
  Shield shield;
};

/// The trace of Shield::execute with the operation failing its first `failures` attempts.
Strings trace_sync(const Script& script, int failures) {
  ShieldRun run(script);
  test::EventLog& log = run.log;
  int attempts = 0;
  try {
    run.shield.execute([&] {
      log.add("op");
      if (attempts++ < failures) {
        throw boost::system::system_error(boost::asio::error::connection_reset);
      }
      return 7;
    });
    log.add("deliver ok");
  } catch (const std::exception&) {
    log.add("deliver failed");
  }
  return log.events();
}

/// The trace of Shield::execute_async on an io_context, the operation failing as above.
Strings trace_async(const Script& script, int failures) {
  ShieldRun run(script);
  test::EventLog& log = run.log;
  boost::asio::io_context ioc;
  int attempts = 0;
  run.shield.execute_async(
      [&](auto token) {
        log.add("op");
        const boost::system::error_code ec = attempts++ < failures
                                                 ? boost::asio::error::connection_reset
                                                 : boost::system::error_code();
        return test::async_answer(ioc.get_executor(), ec, 7, std::move(token));
      },
      boost::asio::bind_executor(ioc, [&](const boost::system::error_code& ec, int) {
        log.add(ec ? "deliver failed" : "deliver ok");
      }));
  ioc.run();
  return log.events();
}

class ThreeRunners : public Machine {
 protected:
  /// The trace of the machine alone, the test acting as its shell.
  Strings trace_machine(const Script& script, int failures) {
    Scripted outer("outer", log_);
    Scripted inner("inner", log_);
    script(outer, inner);
    MachineCall& call = start_pipeline({&outer, &inner});
    int attempts = 0;
    EngineAction action = call.advance(Step::run_inner);
    for (int guard = 0; guard < 100; ++guard) {
      switch (action) {
        case EngineAction::start_operation:
          log_.add("op");
          if (attempts++ < failures) {
            call.outcome().set_error(boost::asio::error::connection_reset);
          } else {
            call.outcome().set_success();
          }
          action = call.operation_done();
          break;
        case EngineAction::wait: {
          const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
              call.wait_deadline() - clock_->now());
          log_.add("wait " + std::to_string(wait.count()) + "ms");
          clock_->advance_to(call.wait_deadline());
          action = call.wait_done({});
          break;
        }
        case EngineAction::start_step: {
          // A queue or await step: the test performs it as the synchronous shell does.
          detail::StepTarget& target = call.pending_target();
          action = call.wait_done(target.step_ops->block(target, call));
          break;
        }
        case EngineAction::deliver:
          log_.add(call.outcome().kind == OutcomeKind::value ? "deliver ok" : "deliver failed");
          return log_.events();
        default:
          ADD_FAILURE() << "an action these scripts never ask for";
          return log_.events();
      }
    }
    ADD_FAILURE() << "the machine did not deliver";
    return log_.events();
  }

  /// Runs `script` three ways and checks each trace against `expected`.
  void expect_trace(const Script& script, int failures, const Strings& expected) {
    EXPECT_EQ(trace_machine(script, failures), expected) << "the machine alone";
    EXPECT_EQ(trace_sync(script, failures), expected) << "the synchronous shell";
    EXPECT_EQ(trace_async(script, failures), expected) << "the asynchronous shell";
  }
};

/// Ends a wait: runs the inner part again if it ended normally.
Step again_unless_aborted(Layer&, const boost::system::error_code& ec) {
  return ec ? Step::complete : Step::run_inner;
}

TEST_F(ThreeRunners, Decorators) {
  expect_trace([](Scripted&, Scripted&) {}, 0,
               {"outer:start", "inner:start", "op", "inner:inner", "inner:finish", "outer:inner",
                "outer:finish", "deliver ok"});
}

TEST_F(ThreeRunners, ARepeaterWaitsBetweenAttempts) {
  expect_trace(
      [](Scripted& outer, Scripted&) {
        auto tries = std::make_shared<int>(1);
        outer.inner = [tries](Layer& l) {
          if (l.outcome().has_value() || *tries == 3) return Step(Step::complete);
          return l.wait_for(std::chrono::milliseconds(100 * (*tries)++));
        };
        outer.wait = again_unless_aborted;
      },
      2,
      {"outer:start", "inner:start", "op", "inner:inner", "inner:finish", "outer:inner",
       "wait 100ms", "outer:wait ok", "inner:start", "op", "inner:inner", "inner:finish",
       "outer:inner", "wait 200ms", "outer:wait ok", "inner:start", "op", "inner:inner",
       "inner:finish", "outer:inner", "outer:finish", "deliver ok"});
}

TEST_F(ThreeRunners, ARepeaterThatGivesUpDeliversTheFailure) {
  expect_trace(
      [](Scripted& outer, Scripted&) {
        auto tries = std::make_shared<int>(1);
        outer.inner = [tries](Layer& l) {
          if (l.outcome().has_value() || (*tries)++ == 2) return Step(Step::complete);
          return l.wait_for(std::chrono::seconds(1));
        };
        outer.wait = again_unless_aborted;
      },
      5,
      {"outer:start", "inner:start", "op", "inner:inner", "inner:finish", "outer:inner",
       "wait 1000ms", "outer:wait ok", "inner:start", "op", "inner:inner", "inner:finish",
       "outer:inner", "outer:finish", "deliver failed"});
}

TEST_F(ThreeRunners, AWaitBeforeTheInnerPart) {
  expect_trace(
      [](Scripted&, Scripted& inner) {
        inner.start = [](Layer& l) { return l.wait_for(std::chrono::seconds(2)); };
        inner.wait = again_unless_aborted;
      },
      0,
      {"outer:start", "inner:start", "wait 2000ms", "inner:wait ok", "op", "inner:inner",
       "inner:finish", "outer:inner", "outer:finish", "deliver ok"});
}

TEST_F(ThreeRunners, AShortCircuitRunsNoOperation) {
  expect_trace(
      [](Scripted&, Scripted& inner) {
        inner.start = [](Layer& l) {
          l.outcome().set_rejection(make_error_code(errc::circuit_open), std::nullopt);
          return Step(Step::complete);
        };
      },
      0, {"outer:start", "inner:start", "inner:finish", "outer:inner", "outer:finish",
          "deliver failed"});
}

TEST_F(ThreeRunners, TheWaitIsTheStepReturnedNotTheLastOneBuilt) {
  expect_trace(
      [](Scripted&, Scripted& inner) {
        inner.start = [](Layer& l) {
          const Step first = l.wait_for(std::chrono::seconds(3));
          [[maybe_unused]] const Step dropped = l.wait_for(std::chrono::seconds(7));
          return first;
        };
        inner.wait = again_unless_aborted;
      },
      0,
      {"outer:start", "inner:start", "wait 3000ms", "inner:wait ok", "op", "inner:inner",
       "inner:finish", "outer:inner", "outer:finish", "deliver ok"});
}

TEST_F(ThreeRunners, ARepeaterAroundAWaiter) {
  expect_trace(
      [](Scripted& outer, Scripted& inner) {
        outer.inner = [](Layer& l) {
          return l.outcome().has_value() ? Step(Step::complete) : l.wait_for(std::chrono::seconds(1));
        };
        outer.wait = again_unless_aborted;
        inner.start = [](Layer& l) { return l.wait_for(std::chrono::milliseconds(250)); };
        inner.wait = again_unless_aborted;
      },
      1,
      {"outer:start", "inner:start", "wait 250ms", "inner:wait ok", "op", "inner:inner",
       "inner:finish", "outer:inner", "wait 1000ms", "outer:wait ok", "inner:start", "wait 250ms",
       "inner:wait ok", "op", "inner:inner", "inner:finish", "outer:inner", "outer:finish",
       "deliver ok"});
}

/// A layer that waits in `queue` for a permit before its inner part, and gives it back after.
void queue_before_inner(Scripted& layer, const std::shared_ptr<QueueSemaphore<>>& queue) {
  layer.start = [queue](Layer&) { return Step::queue(*queue); };
  layer.wait = [](Layer& l, const boost::system::error_code& ec) {
    if (!ec) return Step(Step::run_inner);
    l.outcome().set_error(ec);
    return Step(Step::complete);
  };
  layer.inner = [queue](Layer&) {
    (void)queue->release(1);
    return Step(Step::complete);
  };
}

TEST_F(ThreeRunners, AQueueStepWithAPermitFree) {
  auto queue = std::make_shared<QueueSemaphore<>>(1U);
  expect_trace([queue](Scripted&, Scripted& inner) { queue_before_inner(inner, queue); }, 0,
               {"outer:start", "inner:start", "inner:wait ok", "op", "inner:inner",
                "inner:finish", "outer:inner", "outer:finish", "deliver ok"});
  EXPECT_EQ(queue->available(), 1U);
}

TEST_F(ThreeRunners, AQueueStepOnAClosedSemaphore) {
  auto queue = std::make_shared<QueueSemaphore<>>(1U);
  queue->close();
  expect_trace([queue](Scripted&, Scripted& inner) { queue_before_inner(inner, queue); }, 0,
               {"outer:start", "inner:start", "inner:wait aborted", "inner:finish",
                "outer:inner", "outer:finish", "deliver failed"});
}

TEST_F(ThreeRunners, ARepeaterAroundAQueue) {
  auto queue = std::make_shared<QueueSemaphore<>>(1U);
  expect_trace(
      [queue](Scripted& outer, Scripted& inner) {
        outer.inner = [](Layer& l) {
          return l.outcome().has_value() ? Step(Step::complete)
                                         : l.wait_for(std::chrono::milliseconds(10));
        };
        outer.wait = again_unless_aborted;
        queue_before_inner(inner, queue);
      },
      1,
      {"outer:start", "inner:start", "inner:wait ok", "op", "inner:inner", "inner:finish",
       "outer:inner", "wait 10ms", "outer:wait ok", "inner:start", "inner:wait ok", "op",
       "inner:inner", "inner:finish", "outer:inner", "outer:finish", "deliver ok"});
  EXPECT_EQ(queue->available(), 1U);
}

/// A layer that awaits a coroutine before its inner part: the coroutine notes that it ran and
/// gives 5 (to on_value, which notes it), or throws if `fail`; the inner part runs once it ended
/// normally.
void await_before_inner(Scripted& layer, bool fail) {
  layer.start = [&layer, fail](Layer& l) {
    return l.await(
        [](const Scripted* s, bool fail) -> boost::asio::awaitable<int> {
          s->note("hook");
          if (fail) throw std::runtime_error("the hook failed");
          co_return 5;
        }(&layer, fail),
        [&layer](int v) { layer.note("value " + std::to_string(v)); });
  };
  layer.wait = again_unless_aborted;
}

TEST_F(ThreeRunners, AnAwaitBeforeTheInnerPart) {
  expect_trace([](Scripted&, Scripted& inner) { await_before_inner(inner, false); }, 0,
               {"outer:start", "inner:start", "inner:hook", "inner:value 5", "inner:wait ok", "op",
                "inner:inner", "inner:finish", "outer:inner", "outer:finish", "deliver ok"});
}

TEST_F(ThreeRunners, AFailedAwaitRunsNoOperation) {
  expect_trace([](Scripted&, Scripted& inner) { await_before_inner(inner, true); }, 0,
               {"outer:start", "inner:start", "inner:hook", "inner:wait aborted", "inner:finish",
                "outer:inner", "outer:finish", "deliver failed"});
}

TEST_F(ThreeRunners, ARepeaterAroundAnAwait) {
  expect_trace(
      [](Scripted& outer, Scripted& inner) {
        outer.inner = [](Layer& l) {
          return l.outcome().has_value() ? Step(Step::complete)
                                         : l.wait_for(std::chrono::milliseconds(10));
        };
        outer.wait = again_unless_aborted;
        await_before_inner(inner, false);
      },
      1,
      {"outer:start", "inner:start", "inner:hook", "inner:value 5", "inner:wait ok", "op",
       "inner:inner", "inner:finish", "outer:inner", "wait 10ms", "outer:wait ok", "inner:start",
       "inner:hook", "inner:value 5", "inner:wait ok", "op", "inner:inner", "inner:finish",
       "outer:inner", "outer:finish", "deliver ok"});
}

}  // namespace
}  // namespace kevlar
