// The engine's machine on its own (detail::CallBase::advance and its events): it calls the
// strategies and returns what the execution needs next, and never runs an operation, arms a timer
// or delivers by itself. These tests drive it event by event with no shell, no io_context and a
// ManualClock that is never advanced.
#include "test_strategies.hpp"

#include <kevlar/detail/engine.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/error.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
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

TEST_F(Machine, TheWaitIsTheStepReturnedNotTheLastOneBuilt) {
  // A step carries its deadline: building another wait (and dropping it) changes nothing.
  Scripted layer("waiter", log_);
  layer.start = [](Layer& l) {
    const Step first = l.wait_for(3s);
    [[maybe_unused]] const Step dropped = l.wait_for(7s);
    return first;
  };
  MachineCall& call = start_pipeline({&layer});

  ASSERT_EQ(call.advance(Step::run_inner), EngineAction::wait);
  EXPECT_EQ(call.wait_deadline(), clock_->now() + 3s);
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

}  // namespace
}  // namespace kevlar
