// The retry happy path (first attempt succeeds) allocates nothing, sync and async.
#include <alloc_counter.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/shield.hpp>

#include <gtest/gtest.h>
#include <boost/asio/append.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

// g++ 12 reports designated initializers that leave out members with default initializers
// (the intended way to write kevlar's options) under -Wextra.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

namespace kevlar {
namespace {

namespace asio = boost::asio;
using kevlar::testing::AllocScope;

int compute(int x) {
  return x * 2;
}

TEST(RetryAllocation, FirstAttemptSuccessAllocatesNothingSync) {
  for (const Shield& shield :
       {Shield{}.retry(), Shield{}.retry(3).retry(RetryOptions{.backoff = Backoff::none()})}) {
    int sum = 0;
    for (int i = 0; i < 10; ++i) sum += shield.execute([i] { return compute(i); });  // warm-up
    AllocScope scope;
    for (int i = 0; i < 1000; ++i) {
      sum += shield.execute([i](Context& ctx) { return compute(i) + int(ctx.attempt()); });
    }
    EXPECT_EQ(scope.count(), 0U) << shield.describe();
    EXPECT_GT(sum, 0);
  }
}

template <class Token>
auto async_one(const asio::any_io_executor& ex, Token&& token) {
  return asio::async_initiate<Token, void(boost::system::error_code, int)>(
      [ex](auto handler) {
        auto hex = asio::get_associated_executor(handler, ex);
        asio::post(hex, asio::append(std::move(handler), boost::system::error_code(), 1));
      },
      token);
}

asio::awaitable<void> async_loop(const Shield& shield, std::uint64_t& allocations, int& sum) {
  auto ex = co_await asio::this_coro::executor;
  auto op = [ex](auto token) { return async_one(ex, std::move(token)); };
  for (int i = 0; i < 10; ++i) sum += co_await shield.execute_async(op);  // warm-up
  AllocScope scope;
  for (int i = 0; i < 1000; ++i) sum += co_await shield.execute_async(op);
  allocations = scope.count();
}

TEST(RetryAllocation, FirstAttemptSuccessAllocatesNothingAsync) {
  asio::io_context ioc;
  std::uint64_t allocations = 99;
  int sum = 0;
  const Shield shield = Shield{}.retry();  // outlives the coroutine that refers to it
  asio::co_spawn(ioc, async_loop(shield, allocations, sum), [](std::exception_ptr ep) {
    if (ep) std::rethrow_exception(ep);
  });
  ioc.run();
  EXPECT_EQ(allocations, 0U);
  EXPECT_EQ(sum, 1010);
}

}  // namespace
}  // namespace kevlar
