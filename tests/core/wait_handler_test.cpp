// Layer::wait_handler(): a strategy's own wait, whose handler may run (or die) before the callback
// that started it has returned to the engine — on another thread of a multi-threaded executor, or
// inside the initiating call. The engine still reads the execution until the callback returns, so
// such a handler leaves its result to the engine, which reports it (or abandons) once it has.
#include "test_strategies.hpp"

#include <spin_until.hpp>

#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;

/// Starts its own wait in on_start: hands the wait handler to `start`, which owns it from then on
/// (invokes it, destroys it, sends it elsewhere), and returns Step::suspend. on_wait_complete
/// records what it saw and runs the inner part (or completes with the wait's error).
class HandsOff final : public Strategy {
 public:
  using Start = std::function<void(WaitHandler&)>;
  explicit HandsOff(Start start) : start_(std::move(start)) {}
  [[nodiscard]] std::string describe() const override { return "HandsOff"; }
  [[nodiscard]] StrategyTraits traits() const noexcept override {
    StrategyTraits t;
    t.frame_size = sizeof(std::atomic<bool>);
    return t;
  }

  // The frame holds "on_start is running" for this execution: written after the handler was
  // handed off (the engine holds its result until on_start returns), read by on_wait_complete.
  Step on_start(Layer& layer) override {
    auto* starting = ::new (layer.frame()) std::atomic<bool>(true);
    WaitHandler handler = layer.wait_handler();
    start_(handler);
    if (throw_after_start) throw std::runtime_error("after the wait started");
    starting->store(false);
    return Step::suspend;
  }
  Step on_wait_complete(Layer& layer, const error_code& ec) override {
    {
      const std::lock_guard lock(m_);
      seen_.push_back(
          Seen{ec, std::this_thread::get_id(), layer.frame_as<std::atomic<bool>>().load()});
    }
    if (ec) {
      layer.outcome().set_error(ec);
      return Step::complete;
    }
    return Step::run_inner;
  }
  void on_finish(Layer& layer) noexcept override {
    {
      const std::lock_guard lock(m_);
      finished_on_ = std::this_thread::get_id();
      finished_inside_on_start_ = layer.frame_as<std::atomic<bool>>().load();
    }
    ++finished_;
  }
  /// on_start throws once it has handed the handler off.
  bool throw_after_start = false;

  struct Seen {
    error_code ec;
    std::thread::id thread;
    bool inside_on_start;  ///< on_wait_complete ran while on_start had not returned
  };
  [[nodiscard]] std::vector<Seen> seen() const {
    const std::lock_guard lock(m_);
    return seen_;
  }
  [[nodiscard]] int finished() const { return finished_.load(); }
  /// The last on_finish: its thread, and whether that execution's on_start had not returned.
  [[nodiscard]] std::thread::id finished_on() const {
    const std::lock_guard lock(m_);
    return finished_on_;
  }
  [[nodiscard]] bool finished_inside_on_start() const {
    const std::lock_guard lock(m_);
    return finished_inside_on_start_;
  }

 private:
  Start start_;
  mutable std::mutex m_;
  std::vector<Seen> seen_;
  std::atomic<int> finished_{0};
  std::thread::id finished_on_;
  bool finished_inside_on_start_ = false;
};

/// A thread running an io_context of its own until destroyed. Declare it after the io_contexts its
/// jobs post to, so that it is joined before they are destroyed.
struct Worker {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  std::jthread thread{[this] { ioc.run(); }};
  ~Worker() {
    guard.reset();
    thread.join();
  }
};

/// The operation: completes with 7 on its handler's executor.
auto answer_seven(asio::io_context& ioc) {
  return [&ioc](auto token) {
    return asio::async_initiate<decltype(token), void(error_code, int)>(
        [&ioc](auto handler) {
          auto ex = asio::get_associated_executor(handler, ioc.get_executor());
          asio::post(ex, [h = std::move(handler)]() mutable { std::move(h)(error_code(), 7); });
        },
        token);
  };
}

TEST(WaitHandler, RunOnAnotherThreadBeforeTheCallbackReturnedIsReportedAfterIt) {
  asio::io_context ioc;
  Worker worker;
  // on_start blocks until the worker thread has invoked the handler and returned from it: without
  // the handoff, on_wait_complete would run there, inside on_start.
  auto strategy = std::make_shared<HandsOff>([&](WaitHandler& handler) {
    std::promise<void> invoked;
    asio::post(worker.ioc, [&invoked, h = std::move(handler)]() mutable {
      std::move(h)(asio::error::timed_out);
      invoked.set_value();
    });
    invoked.get_future().wait();
  });
  const Shield shield = Shield{}.use(strategy);
  std::optional<error_code> result;
  shield.execute_async(answer_seven(ioc),
                       asio::bind_executor(ioc, [&](error_code ec, int) { result = ec; }));
  // Reported by the engine once on_start returned, on this thread: the execution completed inside
  // execute_async, and its handler is posted.
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].ec, asio::error::timed_out);
  EXPECT_FALSE(seen[0].inside_on_start);
  EXPECT_EQ(seen[0].thread, std::this_thread::get_id());
  EXPECT_EQ(strategy->finished(), 1);
  EXPECT_FALSE(result.has_value());  // never inside execute_async
  ioc.run();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, asio::error::timed_out);
}

TEST(WaitHandler, InvokedInsideTheCallbackIsReportedAfterIt) {
  asio::io_context ioc;
  auto strategy =
      std::make_shared<HandsOff>([](WaitHandler& handler) { std::move(handler)(error_code()); });
  const Shield shield = Shield{}.use(strategy);
  std::optional<int> value;
  shield.execute_async(answer_seven(ioc), asio::bind_executor(ioc, [&](error_code ec, int v) {
                         EXPECT_FALSE(ec);
                         value = v;
                       }));
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_FALSE(seen[0].ec);
  EXPECT_FALSE(seen[0].inside_on_start);  // not re-entered from inside the callback
  EXPECT_FALSE(value.has_value());
  ioc.run();
  EXPECT_EQ(value, 7);  // the wait succeeded, so the operation ran
  EXPECT_EQ(strategy->finished(), 1);
}

TEST(WaitHandler, RunInsideACallbackThatThenThrowsIsDropped) {
  asio::io_context ioc;
  auto strategy =
      std::make_shared<HandsOff>([](WaitHandler& handler) { std::move(handler)(error_code()); });
  strategy->throw_after_start = true;
  const Shield shield = Shield{}.use(strategy);
  std::optional<error_code> result;
  shield.execute_async(answer_seven(ioc),
                       asio::bind_executor(ioc, [&](error_code ec, int) { result = ec; }));
  ioc.run();
  // The layer failed with the exception: the wait's result was dropped, the operation never ran.
  EXPECT_TRUE(strategy->seen().empty());
  EXPECT_EQ(strategy->finished(), 1);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, errc::callback_exception);  // what an error-code completion carries of it
  // The next execution's wait is reported as usual.
  strategy->throw_after_start = false;
  std::optional<int> value;
  shield.execute_async(answer_seven(ioc),
                       asio::bind_executor(ioc, [&](error_code, int v) { value = v; }));
  ioc.restart();
  ioc.run();
  EXPECT_EQ(strategy->seen().size(), 1U);
  EXPECT_EQ(value, 7);
}

TEST(WaitHandler, DestroyedOnAnotherThreadBeforeTheCallbackReturnedAbandonsAfterIt) {
  asio::io_context ioc;
  Worker worker;
  auto strategy = std::make_shared<HandsOff>([&](WaitHandler& handler) {
    std::promise<void> dropped;
    asio::post(worker.ioc,
               [&dropped, h = std::optional<WaitHandler>(std::move(handler))]() mutable {
                 h.reset();  // destroyed uninvoked, on the worker's thread
                 dropped.set_value();
               });
    dropped.get_future().wait();
  });
  const Shield shield = Shield{}.use(strategy);
  auto sentinel = std::make_shared<int>(0);
  std::weak_ptr<int> watch = sentinel;
  bool called = false;
  shield.execute_async(answer_seven(ioc),
                       asio::bind_executor(ioc, [&called, s = std::move(sentinel)](
                                                    error_code, int) { called = true; }));
  // Abandoned once on_start returned, on this thread: every layer finished, the caller's handler
  // destroyed without being invoked.
  EXPECT_TRUE(strategy->seen().empty());
  EXPECT_EQ(strategy->finished(), 1);
  EXPECT_EQ(strategy->finished_on(), std::this_thread::get_id());
  EXPECT_FALSE(strategy->finished_inside_on_start());
  EXPECT_TRUE(watch.expired());
  ioc.run();
  EXPECT_FALSE(called);
}

TEST(WaitHandler, RunAfterTheCallbackReturnedResumesTheExecutionWhereItRuns) {
  asio::io_context ioc;
  Worker worker;
  auto strategy = std::make_shared<HandsOff>([&](WaitHandler& handler) {
    // Sent to the worker only through the caller's io_context, which runs after on_start returned.
    asio::post(ioc, [&worker, h = std::move(handler)]() mutable {
      asio::post(worker.ioc, [h = std::move(h)]() mutable { std::move(h)(error_code()); });
    });
  });
  const Shield shield = Shield{}.use(strategy);
  std::optional<int> value;
  shield.execute_async(answer_seven(ioc),
                       asio::bind_executor(ioc, [&](error_code, int v) { value = v; }));
  auto guard = asio::make_work_guard(ioc);
  std::thread caller([&] { ioc.run(); });
  test::spin_until([&] { return strategy->finished() != 0; }, std::chrono::seconds(30));
  guard.reset();
  caller.join();
  const auto seen = strategy->seen();
  ASSERT_EQ(seen.size(), 1U);
  // The handler resumed the execution itself, on the worker's thread.
  EXPECT_EQ(seen[0].thread, worker.thread.get_id());
  EXPECT_EQ(value, 7);
}

// Executions on one io_context run by two threads, each of whose waits is posted to that
// io_context: the handler often runs on the other thread while the engine is still settling the
// callback. Every execution completes once, with its value (ThreadSanitizer runs this).
TEST(WaitHandlerStress, TwoThreadsResumeEachOthersWaits) {
  constexpr int calls = 2000;
  asio::io_context ioc(2);
  auto strategy = std::make_shared<HandsOff>([&](WaitHandler& handler) {
    asio::post(ioc, [h = std::move(handler)]() mutable { std::move(h)(error_code()); });
  });
  const Shield shield = Shield{}.use(strategy).use(std::make_shared<test::PassThrough>());
  std::atomic<int> completed{0}, wrong{0};
  test::run_posted_calls(ioc, 2, calls, completed, [&] {
    shield.execute_async(answer_seven(ioc), asio::bind_executor(ioc, [&](error_code ec, int v) {
                           if (ec || v != 7) ++wrong;
                           ++completed;
                         }));
  });
  ASSERT_EQ(completed.load(), calls);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(strategy->finished(), calls);
  for (const auto& s : strategy->seen()) ASSERT_FALSE(s.inside_on_start);
}

}  // namespace
}  // namespace kevlar
