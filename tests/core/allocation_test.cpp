#include "async_ops.hpp"
#include "test_strategies.hpp"

#include <alloc_counter.hpp>
#include <kevlar/detail/block_cache.hpp>
#include <kevlar/kevlar.hpp>

#include <gtest/gtest.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <thread>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using kevlar::testing::AllocScope;

int compute(int x) {
  return x * 2;
}

TEST(Allocation, CounterSeesOperatorNew) {
  AllocScope scope;
  void* p = ::operator new(sizeof(int));  // a direct call: a new-expression may be elided
  EXPECT_EQ(scope.count(), 1U);
  EXPECT_GE(scope.bytes(), sizeof(int));
  ::operator delete(p);
}

TEST(Allocation, FailureInjectionThrowsBadAlloc) {
  bool threw = false;
  try {
    kevlar::testing::fail_allocation_after(0);
    void* p = ::operator new(16);  // a direct call: never elided like a new-expression may be
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
  EXPECT_FALSE(kevlar::testing::allocation_failure_armed());
  void* p = ::operator new(16);
  ::operator delete(p);
}

// The per-thread block cache: a freed block is handed out again, and a block freed by thread-exit
// code that runs after the cache's cleanup (a thread_local constructed before the thread kept its
// first block) is freed, not kept in a cache nobody will empty. LeakSanitizer, in CI's sanitizer
// stage, reports the block otherwise.
TEST(BlockCache, ABlockFreedAfterTheThreadsCleanupIsNotKept) {
  void* first = nullptr;
  void* again = nullptr;
  std::thread([&] {
    struct LateFree {
      void* p = nullptr;
      ~LateFree() {
        if (p != nullptr) detail::cache_deallocate(p, 100);
      }
    };
    thread_local LateFree late;  // constructed first, so destroyed after the cache's cleanup
    late.p = nullptr;
    first = detail::cache_allocate(100);
    detail::cache_deallocate(first, 100);  // the first block kept registers the cleanup
    again = detail::cache_allocate(100);   // the same size class: the kept block
    late.p = again;
  }).join();
  EXPECT_EQ(again, first);
}

TEST(Allocation, EmptyShieldExecuteAllocatesNothing) {
  const Shield shield;
  int sum = 0;
  for (int i = 0; i < 10; ++i) {  // warm-up (the first use creates the process's steady clock)
    sum += shield.execute([i] { return compute(i); });
    sum += shield.execute([i](Context&) { return compute(i); });
  }
  AllocScope scope;
  for (int i = 0; i < 1000; ++i) {
    sum += shield.execute([i] { return compute(i); });
    sum +=
        shield.execute([i](Context& ctx) { return compute(i) + static_cast<int>(ctx.attempt()); });
  }
  EXPECT_EQ(scope.count(), 0U);
  EXPECT_GT(sum, 0);
}

TEST(Allocation, PipelineExecuteAllocatesNothing) {
  const Shield shield =
      Shield{}.use(std::make_shared<test::PassThrough>()).use(std::make_shared<test::Repeat>(3));
  int sum = 0;
  for (int i = 0; i < 10; ++i) sum += shield.execute([i] { return compute(i); });
  AllocScope scope;
  for (int i = 0; i < 1000; ++i) sum += shield.execute([i] { return compute(i); });
  EXPECT_EQ(scope.count(), 0U);
  EXPECT_GT(sum, 0);
}

asio::awaitable<void> async_loop(const Shield& shield, int n, std::uint64_t& allocations,
                                 int& sum) {
  auto ex = co_await asio::this_coro::executor;
  auto op = [ex](auto token) { return test::async_answer(ex, {}, 1, std::move(token)); };
  for (int i = 0; i < 10; ++i) sum += co_await shield.execute_async(op);  // warm-up
  AllocScope scope;
  for (int i = 0; i < n; ++i) sum += co_await shield.execute_async(op);
  allocations = scope.count();
}

TEST(Allocation, CoAwaitExecuteAsyncAllocatesNothingAfterWarmUp) {
  for (const Shield& shield : {Shield{}, Shield{}.use(std::make_shared<test::PassThrough>()),
                               Shield{}.use(std::make_shared<test::Repeat>(2))}) {
    asio::io_context ioc;
    std::uint64_t allocations = 99;
    int sum = 0;
    asio::co_spawn(ioc, async_loop(shield, 1000, allocations, sum), [](std::exception_ptr ep) {
      if (ep) std::rethrow_exception(ep);
    });
    ioc.run();
    EXPECT_EQ(allocations, 0U) << shield.describe();
    EXPECT_EQ(sum, 1010);
  }
}

}  // namespace
}  // namespace kevlar
