// Helpers for the concurrency limit tests: operations the test completes by hand, limiters and
// their state at rest.
#pragma once

#include <kevlar/concurrency_limit.hpp>

#include <gtest/gtest.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

namespace kevlar::test {

/// Operations that stay pending until the test completes them by id. Each completes with
/// (error_code, int) on its handler's executor; started and completed ids are recorded.
class ManualOps {
 public:
  /// An attempt for Shield::execute_async: starts operation `id`.
  auto attempt(int id) {
    return [this, id](auto token) {
      return boost::asio::async_initiate<decltype(token), void(boost::system::error_code, int)>(
          [this, id](auto handler) {
            auto ex = boost::asio::get_associated_executor(handler);
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            ++started_;
            ++running_;
            if (running_ > peak_) peak_ = running_;
            started_ids_.push_back(id);
            pending_[id] = [this, h, ex](boost::system::error_code ec, int v) {
              --running_;
              boost::asio::post(ex, boost::asio::append(std::move(*h), ec, v));
            };
          },
          token);
    };
  }
  /// Completes operation `id` (posted; run the io_context to deliver).
  void complete(int id, boost::system::error_code ec = {}, int value = 0) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    auto fn = std::move(it->second);
    pending_.erase(it);
    fn(ec, value);
  }
  [[nodiscard]] bool pending(int id) const { return pending_.count(id) != 0; }
  [[nodiscard]] int started() const { return started_; }
  [[nodiscard]] int running() const { return running_; }
  [[nodiscard]] int peak() const { return peak_; }
  [[nodiscard]] const std::vector<int>& started_ids() const { return started_ids_; }

 private:
  std::map<int, std::function<void(boost::system::error_code, int)>> pending_;
  std::vector<int> started_ids_;
  int started_ = 0;
  int running_ = 0;
  int peak_ = 0;
};

/// A limiter of `max` permits and a queue of `queue`.
/// Two io_contexts that run only when a test polls them, each kept from running out of work: the
/// permit holder's and the waiter's. Polling the holder's makes a grant; the waiter's delivers it,
/// so a test can act in between (cancel the waiter, destroy its context with the grant queued).
struct HolderAndWaiter {
  boost::asio::io_context holder_ctx;
  boost::asio::io_context waiter_ctx;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> holder_work =
      boost::asio::make_work_guard(holder_ctx);
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> waiter_work =
      boost::asio::make_work_guard(waiter_ctx);
};

inline std::shared_ptr<ConcurrencyLimitStrategy> make_limiter(int max, int queue) {
  ConcurrencyLimitOptions o;
  o.max_concurrency = max;
  o.max_queue = queue;
  return ConcurrencyLimitStrategy::create(o);
}

/// Checks that `limiter` is at rest: nothing running, nothing queued, all `permits` free.
inline void expect_at_rest(const ConcurrencyLimitStrategy& limiter, std::uint32_t permits) {
  const ConcurrencyLimitState st = limiter.state();
  EXPECT_EQ(st.running, 0U);
  EXPECT_EQ(st.queued, 0U);
  EXPECT_EQ(st.available, permits);
}

}  // namespace kevlar::test
