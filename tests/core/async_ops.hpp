// Small Asio operations used by the asynchronous tests.
#pragma once

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <deque>
#include <memory>
#include <type_traits>
#include <utility>

namespace kevlar::test {

/// Completes with (ec, value) through a post to `ex` (or the handler's executor).
template <class Executor, class Token>
auto async_answer(const Executor& ex, boost::system::error_code ec, int value, Token&& token) {
  return boost::asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex](auto handler, boost::system::error_code e, int v) {
        auto hex = boost::asio::get_associated_executor(handler, ex);
        boost::asio::post(hex, boost::asio::append(std::move(handler), e, v));
      },
      token, ec, value);
}

/// An attempt whose operation never completes by itself and completes with operation_aborted
/// inside its cancellation handler (as an operation may): for execute_async.
struct CompletesOnCancel {
  template <class Token>
  auto operator()(Token&& token) const {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [](auto handler) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          slot.assign([h](boost::asio::cancellation_type) {
            std::move (*h)(boost::asio::error::operation_aborted);
          });
        },
        token);
  }
};

/// An executor of an io_context's execution context whose jobs wait in a list until the test runs
/// them: a test sees which executor a job was meant for, and decides when it runs. Never blocking;
/// jobs run on the thread that calls run_all().
class HeldExecutor {
 public:
  /// The jobs of one or more copies of a HeldExecutor.
  class Jobs {
   public:
    /// Runs jobs (including those they add) until none is left; returns how many ran.
    std::size_t run_all() {
      std::size_t n = 0;
      while (!list_.empty()) {
        std::unique_ptr<Base> job = std::move(list_.front());
        list_.pop_front();
        job->run();
        ++n;
      }
      return n;
    }
    [[nodiscard]] std::size_t size() const noexcept { return list_.size(); }

   private:
    friend class HeldExecutor;
    struct Base {
      virtual ~Base() = default;
      virtual void run() = 0;
    };
    template <class F>
    struct Job final : Base {
      template <class G>
      explicit Job(G&& g) : f(std::forward<G>(g)) {}
      void run() override { std::move(f)(); }
      F f;
    };
    std::deque<std::unique_ptr<Base>> list_;
  };

  HeldExecutor(boost::asio::io_context& ioc, Jobs& jobs) noexcept : ioc_(&ioc), jobs_(&jobs) {}

  [[nodiscard]] boost::asio::io_context& query(boost::asio::execution::context_t) const noexcept {
    return *ioc_;
  }
  [[nodiscard]] static constexpr boost::asio::execution::blocking_t query(
      boost::asio::execution::blocking_t) noexcept {
    return boost::asio::execution::blocking.never;
  }
  [[nodiscard]] HeldExecutor require(boost::asio::execution::blocking_t::never_t) const noexcept {
    return *this;
  }
  template <class F>
  void execute(F&& f) const {
    jobs_->list_.push_back(std::make_unique<Jobs::Job<std::decay_t<F>>>(std::forward<F>(f)));
  }
  friend bool operator==(const HeldExecutor& a, const HeldExecutor& b) noexcept {
    return a.ioc_ == b.ioc_ && a.jobs_ == b.jobs_;
  }
  friend bool operator!=(const HeldExecutor& a, const HeldExecutor& b) noexcept {
    return !(a == b);
  }

 private:
  boost::asio::io_context* ioc_;
  Jobs* jobs_;
};

static_assert(boost::asio::execution::is_executor_v<HeldExecutor>);

}  // namespace kevlar::test
