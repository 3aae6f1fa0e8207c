// kevlar — Layer::wait_in_queue: a strategy's execution waits for a permit of a
// kevlar::BasicUnpairedSemaphore (the concurrency limit's queue, the rate limit's turn). Strategies
// that park executions include this header; the semaphore's own header does not, so that a user of
// the primitive alone compiles no part of the engine.
#pragma once

#include <kevlar/detail/embedded_queue_wait.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/io_context.hpp>

#include <stdexcept>

namespace kevlar {
namespace detail {

template <Ledger L>
inline constexpr bool is_unpaired_semaphore<BasicUnpairedSemaphore<L>> = true;

}  // namespace detail

template <class Semaphore>
requires detail::is_unpaired_semaphore<Semaphore>
inline void Layer::wait_in_queue(Semaphore& semaphore) const {
  // The pipeline keeps room for the wait (StrategyTraits::waits_in_queue) in asynchronous
  // executions only: a synchronous one is refused on the general path.
  if (void* storage = call_->queue_wait_storage()) [[likely]] {
    if (boost::asio::io_context* context = detail::plain_io_context(*call_)) [[likely]] {
      detail::EmbeddedQueueWait<Semaphore>::prepare(semaphore, *call_, *context, storage);
      return;
    }
  }
  wait_in_queue_elsewhere(semaphore);
}

template <class Semaphore>
void Layer::wait_in_queue_elsewhere(Semaphore& semaphore) const {
  if (call_->synchronous()) {
    throw std::logic_error(
        "kevlar: Layer::wait_in_queue needs an asynchronous execution (block on the semaphore's "
        "acquire_or_error in a synchronous one)");
  }
  semaphore.async_acquire(queue_wait_handler());
}

}  // namespace kevlar
