// Controls for the semaphore benchmarks (and the limiter's): the same async_acquire / release /
// try_acquire surface as kevlar::UnpairedSemaphore, built the two obvious other ways.
//
// - MutexDequeSemaphore: one std::mutex around a count and a FIFO (std::deque) of waiter nodes,
//   each node allocated per wait from the handler's associated allocator; a release pops under the
//   lock and posts the completion after unlocking; cancellation finds and erases the node under
//   the lock. The .NET SemaphoreSlim design in Asio terms.
// - ChannelSemaphore: experimental::concurrent_channel<void(error_code)> with capacity N; sending
//   takes a permit (waits while the buffer is full), receiving gives one back.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace kevlar::bench {

/// A FIFO async semaphore with one mutex around a count and a deque of heap waiter nodes.
/// Thread-safe; completions are posted to the waiter's executor, never run inline.
class MutexDequeSemaphore {
 public:
  using executor_type = boost::asio::any_io_executor;

  explicit MutexDequeSemaphore(executor_type ex, std::uint32_t initial = 0)
      : ex_(std::move(ex)), count_(initial) {}
  MutexDequeSemaphore(const MutexDequeSemaphore&) = delete;
  MutexDequeSemaphore& operator=(const MutexDequeSemaphore&) = delete;
  ~MutexDequeSemaphore() {
    std::deque<Waiter*> left;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      left.swap(waiters_);
    }
    for (Waiter* w : left) w->complete(boost::asio::error::operation_aborted);
  }

  bool try_acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (count_ == 0 || !waiters_.empty()) return false;
    --count_;
    return true;
  }

  bool release(std::uint32_t n = 1) {
    for (; n > 0; --n) {
      Waiter* w = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (waiters_.empty()) {
          count_ += n;
          return true;
        }
        w = waiters_.front();
        waiters_.pop_front();
      }
      w->complete({});
    }
    return true;
  }

  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire(CompletionToken&& token = CompletionToken()) {
    return boost::asio::async_initiate<CompletionToken, void(boost::system::error_code)>(
        [this](auto handler) { this->start(std::move(handler)); }, token);
  }

  [[nodiscard]] std::uint32_t available() {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }

 private:
  struct Waiter {
    virtual void complete(boost::system::error_code ec) = 0;

   protected:
    ~Waiter() = default;
  };

  template <class Handler>
  struct Node final : Waiter {
    using Alloc = typename std::allocator_traits<std::conditional_t<
        std::is_same_v<boost::asio::associated_allocator_t<Handler>, std::allocator<void>>,
        boost::asio::recycling_allocator<void>,
        boost::asio::associated_allocator_t<Handler>>>::template rebind_alloc<Node>;

    Node(MutexDequeSemaphore* s, Handler&& h, const executor_type& fallback)
        : sem(s), work(boost::asio::get_associated_executor(h, fallback)), handler(std::move(h)) {}

    void complete(boost::system::error_code ec) override {
      slot.clear();
      auto ex = work.get_executor();
      boost::asio::post(ex, boost::asio::append(std::move(handler), ec));
      Alloc alloc;
      this->~Node();
      alloc.deallocate(this, 1);
    }

    MutexDequeSemaphore* sem;
    boost::asio::executor_work_guard<boost::asio::associated_executor_t<Handler, executor_type>>
        work;
    Handler handler;
    boost::asio::cancellation_slot slot;
  };

  template <class Handler>
  void start(Handler handler) {
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    using N = Node<Handler>;
    typename N::Alloc alloc;
    N* node = ::new (alloc.allocate(1)) N(this, std::move(handler), ex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (count_ > 0 && waiters_.empty()) {
        --count_;
      } else {
        if (slot.is_connected()) {
          node->slot = slot;
          slot.template emplace<Cancel>(this, node);
        }
        waiters_.push_back(node);
        return;
      }
    }
    node->complete({});
  }

  struct Cancel {
    Cancel(MutexDequeSemaphore* s, Waiter* n) noexcept : sem(s), node(n) {}
    MutexDequeSemaphore* sem;
    Waiter* node;
    void operator()(boost::asio::cancellation_type_t) const {
      {
        std::lock_guard<std::mutex> lock(sem->mutex_);
        auto it = std::find(sem->waiters_.begin(), sem->waiters_.end(), node);
        if (it == sem->waiters_.end()) return;
        sem->waiters_.erase(it);
      }
      node->complete(boost::asio::error::operation_aborted);
    }
  };

  executor_type ex_;
  std::mutex mutex_;
  std::uint32_t count_;
  std::deque<Waiter*> waiters_;
};

/// A semaphore built on asio::experimental::concurrent_channel<void(error_code)>: capacity is the
/// most permits that can be held; a held permit is a buffered message.
class ChannelSemaphore {
 public:
  using executor_type = boost::asio::any_io_executor;

  ChannelSemaphore(executor_type ex, std::uint32_t initial, std::uint32_t capacity)
      : channel_(std::move(ex), capacity) {
    for (std::uint32_t i = initial; i < capacity; ++i) {
      (void)channel_.try_send(boost::system::error_code{});
    }
  }

  bool try_acquire() { return channel_.try_send(boost::system::error_code{}); }

  bool release(std::uint32_t n = 1) {
    for (; n > 0; --n) {
      if (!channel_.try_receive([](boost::system::error_code) {})) return false;
    }
    return true;
  }

  template <class CompletionToken = boost::asio::deferred_t>
  auto async_acquire(CompletionToken&& token = CompletionToken()) {
    return channel_.async_send(boost::system::error_code{}, std::forward<CompletionToken>(token));
  }

 private:
  boost::asio::experimental::concurrent_channel<void(boost::system::error_code)> channel_;
};

}  // namespace kevlar::bench
