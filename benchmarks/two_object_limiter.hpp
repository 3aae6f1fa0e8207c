// The control limiters of BM_QueuedHandoffPair (mutex_control, channel_control): kevlar's former
// two-object design (interlocked counters; a semaphore that only carries wake-ups) over one of the
// control semaphores of semaphore_controls.hpp. Shared by the benchmark
// (benchmarks/limiter_benchmarks.cpp) and the instruction-count driver
// (tools/count-instructions.cpp), so that the driver's pair modes count exactly the pairs the
// benchmark times. Benchmark controls only.
#pragma once

#include "semaphore_controls.hpp"

#include <kevlar/detail/block_cache.hpp>
#include <kevlar/error.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace kevlar::bench {

/// The completion of a control semaphore's wait: resumes the waiting execution (its
/// on_wait_complete) through the engine, as kevlar's own queue waits do, with the execution's
/// executor and cancellation slot.
class ControlWaitHandler {
 public:
  using executor_type = boost::asio::any_io_executor;
  using cancellation_slot_type = boost::asio::cancellation_slot;
  using allocator_type = kevlar::detail::CachingAllocator<void>;

  explicit ControlWaitHandler(kevlar::detail::CallBase& call) noexcept : call_(&call) {}
  ControlWaitHandler(ControlWaitHandler&& other) noexcept
      : call_(std::exchange(other.call_, nullptr)) {}
  ControlWaitHandler& operator=(ControlWaitHandler&&) = delete;
  ~ControlWaitHandler() {
    if (call_ == nullptr) return;
    if (kevlar::detail::tl_running_call == call_) {
      call_->step_dropped();  // its initiation is throwing
    } else {
      call_->abandon_execution();  // its executor shut down with the wait pending
    }
  }
  void operator()(const boost::system::error_code& ec) {
    std::exchange(call_, nullptr)->wait_completed(ec);
  }
  [[nodiscard]] executor_type get_executor() const noexcept {
    return call_ != nullptr ? call_->call_executor() : executor_type();
  }
  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
    return call_ != nullptr ? call_->step_slot() : cancellation_slot_type();
  }
  [[nodiscard]] allocator_type get_allocator() const noexcept { return {}; }

 private:
  kevlar::detail::CallBase* call_;
};

/// A control semaphore as the object of a queue step: the asynchronous shell starts its
/// async_acquire once the strategy's callback has returned. Asynchronous executions only.
template <class Sem>
struct ControlQueue : kevlar::detail::StepTarget {
  explicit ControlQueue(Sem& s) noexcept : kevlar::detail::StepTarget{&ops}, sem(&s) {}

  static bool start(kevlar::detail::StepTarget& target, kevlar::detail::CallBase& call,
                    boost::system::error_code& /*decided*/) {
    static_cast<ControlQueue&>(target).sem->async_acquire(ControlWaitHandler(call));
    return true;
  }
  static boost::system::error_code block(kevlar::detail::StepTarget& /*target*/,
                                         kevlar::detail::CallBase& /*call*/) {
    throw std::logic_error("benchmark control limiter: asynchronous executions only");
  }
  static constexpr kevlar::detail::StepTargetOps ops{
      static_cast<unsigned char>(kevlar::Step::Kind::queue), &ControlQueue::start,
      &ControlQueue::block, nullptr};

  Sem* sem;
};

/// Kevlar's two-object limiter (interlocked counters; a semaphore that only carries wake-ups),
/// following the rules that make it correct in C++ (seq_cst Dekker pair, registration before the
/// retry of the fast path).
template <class Sem>
class TwoObjectLimiter final : public kevlar::Strategy {
 public:
  template <class... A>
  TwoObjectLimiter(int limit, int queue, A&&... sem_args)
      : limit_(limit), queue_(queue), available_(limit), sem_(std::forward<A>(sem_args)...) {}
  std::string describe() const override { return "TwoObjectLimiter"; }
  kevlar::StrategyTraits traits() const noexcept override {
    return {kevlar::StrategyRole::proactive, true, 0};
  }
  kevlar::Step on_start(kevlar::Layer& layer) override {
    if (pending_.fetch_add(1, std::memory_order_seq_cst) + 1 > limit_ + queue_) {
      pending_.fetch_sub(1, std::memory_order_seq_cst);
      layer.outcome().set_rejection(make_error_code(kevlar::errc::concurrency_limit_exceeded), {});
      return kevlar::Step::complete;
    }
    if (try_take()) return kevlar::Step::run_inner;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    if (try_take()) {
      waiters_.fetch_sub(1, std::memory_order_seq_cst);
      return kevlar::Step::run_inner;
    }
    return kevlar::detail::StepAccess::point_at(control_queue_);  // the shell starts async_acquire
  }
  kevlar::Step on_wait_complete(kevlar::Layer& layer,
                                const boost::system::error_code& ec) override {
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
    if (ec) {
      pending_.fetch_sub(1, std::memory_order_seq_cst);
      layer.outcome().set_error(ec);
      return kevlar::Step::complete;
    }
    return kevlar::Step::run_inner;  // the semaphore handed us a permit
  }
  [[nodiscard]] int waiting() const noexcept { return waiters_.load(std::memory_order_acquire); }
  kevlar::Step on_inner_complete(kevlar::Layer&) override {
    available_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) > 0 && try_take()) (void)sem_.release();
    pending_.fetch_sub(1, std::memory_order_seq_cst);
    return kevlar::Step::complete;
  }

 private:
  bool try_take() noexcept {
    int a = available_.load(std::memory_order_seq_cst);
    while (a > 0) {
      if (available_.compare_exchange_weak(a, a - 1, std::memory_order_seq_cst)) return true;
    }
    return false;
  }
  const int limit_;
  const int queue_;
  std::atomic<long long> pending_{0};
  std::atomic<int> available_;
  std::atomic<int> waiters_{0};
  Sem sem_;
  ControlQueue<Sem> control_queue_{sem_};
};

/// Whether call B waits in the control limiter's queue (the pair's precondition for firing).
template <class Sem>
bool queued(const TwoObjectLimiter<Sem>& s) noexcept {
  return s.waiting() > 0;
}

/// mutex_control in the pair's shape (limit 1, queue 1): wakes through MutexDequeSemaphore, the
/// SemaphoreSlim analog.
inline std::shared_ptr<TwoObjectLimiter<MutexDequeSemaphore>> pair_mutex_control(
    boost::asio::io_context& ioc) {
  return std::make_shared<TwoObjectLimiter<MutexDequeSemaphore>>(1, 1, ioc.get_executor(), 0u);
}

/// channel_control in the pair's shape: wakes through an asio concurrent_channel semaphore.
inline std::shared_ptr<TwoObjectLimiter<ChannelSemaphore>> pair_channel_control(
    boost::asio::io_context& ioc) {
  return std::make_shared<TwoObjectLimiter<ChannelSemaphore>>(1, 1, ioc.get_executor(), 0u, 1u);
}

}  // namespace kevlar::bench
