// kevlar — internal: the type-independent part of one execution (the engine's trampoline).
#pragma once

#include <kevlar/clause.hpp>
#include <kevlar/clock.hpp>
#include <kevlar/context.hpp>
#include <kevlar/outcome.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

namespace kevlar {

class Strategy;
enum class Step : unsigned char;

namespace detail {

/// One position of a pipeline, as the engine sees it.
struct PipelineLayer {
  Strategy* strategy;
  const Clause* clause;
  std::size_t frame_offset;
};

/// The immutable description of a pipeline an execution runs.
struct PipelineView {
  const PipelineLayer* layers = nullptr;
  std::size_t size = 0;
  std::size_t frame_bytes = 0;  ///< per-execution scratch for all layers, max_align_t aligned
  const Clock* clock = nullptr;
};

inline constexpr std::size_t no_layer = std::numeric_limits<std::size_t>::max();

class CallBase;

/// The execution (if any) whose engine is running on this thread; a pending step's handler that is
/// destroyed while its execution's engine is on the stack (a failed initiation) leaves the
/// execution to the engine instead of abandoning it.
inline thread_local const CallBase* tl_running_call = nullptr;
/// The execution being initiated on this thread: a completion reached while it is set would run
/// inside the initiating function, so it is posted instead.
inline thread_local const CallBase* tl_initiating_call = nullptr;

/// One execution of a pipeline. The engine (`run`) is a trampoline shared by synchronous and
/// asynchronous executions: strategies return Steps, the engine performs them. The typed parts
/// (invoking the user's operation, delivering the result) live in the derived classes.
///
/// An asynchronous execution has at most one pending step at a time (the user's operation, a
/// clock wait or a strategy's own wait); the handler of that step owns the execution.
class CallBase : private ClockWaiter {
 public:
  CallBase(const PipelineView& pipeline, std::byte* frames, Context& context) noexcept
      : pipeline_(&pipeline), frames_(frames), context_(&context) {}
  CallBase(const CallBase&) = delete;
  CallBase& operator=(const CallBase&) = delete;

  /// Performs `step` for the current layer and keeps going until the execution completes or a
  /// step is pending.
  void run(Step step);
  /// The user's operation completed; its result is in outcome_.
  void operation_completed();
  /// A wait started by a strategy (Step::wait or Layer::wait_handler) completed.
  void wait_completed(const boost::system::error_code& ec);
  /// The execution will never complete: tell every active layer and destroy it.
  void abandon_execution() noexcept;
  /// The caller asked to cancel (its cancellation slot, or its stop token).
  void cancel_from_caller(boost::asio::cancellation_type type) noexcept;

  /// Cancels what is running inside layer `origin`.
  void cancel_inner(std::size_t origin, boost::asio::cancellation_type type) noexcept;

  [[nodiscard]] Context& context() noexcept { return *context_; }
  [[nodiscard]] OutcomeState& outcome() noexcept { return outcome_; }
  [[nodiscard]] const PipelineView& pipeline() const noexcept { return *pipeline_; }
  [[nodiscard]] std::byte* frame(std::size_t index) const noexcept {
    return frames_ + pipeline_->layers[index].frame_offset;
  }
  [[nodiscard]] std::size_t depth() const noexcept { return depth_; }
  [[nodiscard]] std::size_t cancel_origin() const noexcept { return cancel_origin_; }
  [[nodiscard]] bool synchronous() const noexcept { return context_->synchronous(); }

  void set_wait_deadline(Clock::time_point t) noexcept { wait_deadline_ = t; }
  Clock::time_point exchange_deadline(Clock::time_point t) noexcept {
    return std::exchange(context_->deadline_, t);
  }

  // Asynchronous executions only.
  [[nodiscard]] virtual boost::asio::any_io_executor call_executor() const noexcept = 0;
  [[nodiscard]] boost::asio::cancellation_slot step_slot() noexcept { return step_signal_.slot(); }

 protected:
  ~CallBase() = default;

  /// Synchronous: run the user's function and store its outcome. Asynchronous: start the user's
  /// operation; its completion calls operation_completed().
  virtual void invoke_operation() = 0;
  /// The outermost layer completed: hand the outcome to the caller (and, asynchronously, destroy
  /// the execution).
  virtual void deliver() = 0;
  /// Destroys an asynchronous execution without delivering.
  virtual void destroy() noexcept = 0;

  OutcomeState outcome_;
  boost::asio::cancellation_signal step_signal_;

 private:
  Step dispatch_start(std::size_t index);
  Step dispatch_inner_complete(std::size_t index);
  Step dispatch_wait_complete(std::size_t index, const boost::system::error_code& ec);
  Step fail_layer(std::size_t index, std::exception_ptr ep) noexcept;
  void finish_layer(std::size_t index) noexcept;
  void start_wait();

  // ClockWaiter (asynchronous Step::wait).
  [[nodiscard]] boost::asio::any_io_executor executor() const noexcept override {
    return call_executor();
  }
  [[nodiscard]] boost::asio::cancellation_slot cancellation_slot() const noexcept override {
    return const_cast<CallBase*>(this)->step_signal_.slot();
  }
  void complete(const boost::system::error_code& ec) override { wait_completed(ec); }
  void abandon() noexcept override { abandon_execution(); }

  const PipelineView* pipeline_;
  std::byte* frames_;
  Context* context_;
  std::size_t depth_ = no_layer;
  std::size_t cancel_origin_ =
      no_layer;  ///< 0: the caller; i + 1: layer i cancelled its inner part
  Clock::time_point wait_deadline_{};
  std::unique_ptr<ClockTimer> timer_;
};

}  // namespace detail
}  // namespace kevlar
