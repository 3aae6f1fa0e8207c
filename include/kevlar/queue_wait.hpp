// kevlar — QueueSemaphore: a kevlar::BasicUnpairedSemaphore whose queue a strategy's executions
// wait in with Step::queue (the concurrency limit's queue, the rate limit's turn). Strategies that
// park executions include this header; the semaphore's own header does not, so that a user of the
// primitive alone compiles no part of the engine.
#pragma once

#include <kevlar/context.hpp>
#include <kevlar/detail/embedded_queue_wait.hpp>
#include <kevlar/error.hpp>
#include <kevlar/step.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <concepts>
#include <cstdint>
#include <utility>

namespace kevlar {

/// A BasicUnpairedSemaphore (every member of it, unchanged) that executions of a shield can wait
/// in from a strategy: `return Step::queue(semaphore);` waits for one permit, and the result
/// reaches Strategy::on_wait_complete (see Step::queue). The execution waits with the priority of
/// its context (Context::priority()). What the engine needs to perform that
/// step lives here, in one pointer behind the semaphore (in its padding, where it has some), so
/// that a Step stays one word.
///
/// ```
/// Step start(Layer& layer, Frame& f) {
///   if (queue_.try_acquire()) return Step::run_inner;  // a free permit: no wait
///   return Step::queue(queue_);                        // then wait_complete(layer, f, ec)
/// }
/// kevlar::QueueSemaphore<> queue_{4};                    // 4 permits, a TokenLedger
/// ```
///
/// Declare StrategyTraits::waits_in_queue in a strategy that returns such steps: an asynchronous
/// execution on a plain io_context then keeps room for the wait in its own block, and parking
/// allocates nothing.
///
/// Thread-safety: as BasicUnpairedSemaphore.
template <Ledger L = TokenLedger>
class QueueSemaphore final : public BasicUnpairedSemaphore<L>, public detail::QueueTarget {
 public:
  /// Constructs the semaphore with `args`, as BasicUnpairedSemaphore<L>'s constructors take them.
  template <class... Args>
  requires std::constructible_from<BasicUnpairedSemaphore<L>, Args...>
  explicit QueueSemaphore(Args&&... args)
      : BasicUnpairedSemaphore<L>(std::forward<Args>(args)...), detail::QueueTarget{{&ops}} {}

 private:
  using Semaphore = BasicUnpairedSemaphore<L>;

  static QueueSemaphore& self(detail::StepTarget& target) noexcept {
    return static_cast<QueueSemaphore&>(static_cast<detail::QueueTarget&>(target));
  }

  /// The asynchronous shell: the embedded wait where the execution keeps room for it and runs on
  /// a plain io_context, the semaphore's async_acquire otherwise.
  static bool start(detail::StepTarget& target, detail::CallBase& call,
                    boost::system::error_code& decided) {
    Semaphore& sem = self(target);
    const std::int32_t priority = call.context().priority();
    if (void* storage = call.queue_wait_storage()) [[likely]] {
      if (boost::asio::io_context* context = detail::plain_io_context(call)) [[likely]] {
        return detail::EmbeddedQueueWait<Semaphore>::start(sem, call, *context, storage, priority,
                                                           decided);
      }
    }
    sem.async_acquire(priority, detail::QueueWaitHandler(call));
    return true;
  }

  /// The synchronous shell: blocks in the same queue until the grant, the caller's stop or the
  /// context's deadline.
  static boost::system::error_code block(detail::StepTarget& target, detail::CallBase& call) {
    Semaphore& sem = self(target);
    const Context& context = call.context();
    const Clock::time_point deadline = context.deadline();
    if (deadline == Clock::time_point::max()) {
      return sem.acquire_or_error(context.stop_token(), context.priority());
    }
    const boost::system::error_code ec =
        sem.acquire_until(context.clock(), deadline, context.stop_token(), context.priority());
    if (!ec && context.clock().now() >= deadline) {
      // Granted as the deadline passed: too late to run. The permit goes to the next waiter.
      (void)sem.release(1);
      return boost::asio::error::operation_aborted;
    }
    // The deadline ended the wait: a cancellation, as an outer timeout's expiry makes it in an
    // asynchronous execution (the timeout reports it as errc::timeout).
    if (ec == errc::timeout) return boost::asio::error::operation_aborted;
    return ec;
  }

  static constexpr detail::StepTargetOps ops{static_cast<unsigned char>(Step::Kind::queue),
                                             &QueueSemaphore::start, &QueueSemaphore::block,
                                             nullptr};
};

}  // namespace kevlar
