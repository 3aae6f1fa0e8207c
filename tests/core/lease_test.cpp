// detail::Leased and detail::Lease: what keeps a shield's pipeline alive while asynchronous
// executions run (counted per thread), and the shield-level guarantee built on it.
#include <kevlar/detail/lease.hpp>
#include <kevlar/shield.hpp>
#include "async_ops.hpp"
#include "test_strategies.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using detail::Lease;
using detail::Leased;
using detail::make_leased;

/// A leased object that counts its destructions and knows whether it still lives.
struct Counted : Leased {
  explicit Counted(std::atomic<int>& destroyed) : destroyed(destroyed) {}
  ~Counted() override {
    alive.store(false, std::memory_order_relaxed);
    destroyed.fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic<int>& destroyed;
  std::atomic<bool> alive{true};
};

/// Runs `f` on a new thread and waits for it. The new thread counts on a stripe other than the
/// caller's (chosen here, not left to the round-robin, which other tests' threads have moved on).
template <class F>
void on_other_thread(F f) {
  const std::size_t mine = detail::tl_lease_stripe;
  const std::size_t other = mine == detail::lease_stripe_bytes ? 2 * detail::lease_stripe_bytes
                                                               : detail::lease_stripe_bytes;
  std::thread t([&] {
    detail::tl_lease_stripe = other;
    f();
  });
  t.join();
}

TEST(Lease, WithoutLeasesTheLastOwnerDestroys) {
  std::atomic<int> destroyed{0};
  auto owner = make_leased<Counted>(destroyed);
  auto second = owner;
  owner.reset();
  EXPECT_EQ(destroyed.load(), 0);
  second.reset();
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(Lease, ALeaseKeepsTheObjectAfterItsOwnersUntilItEnds) {
  std::atomic<int> destroyed{0};
  auto owner = make_leased<Counted>(destroyed);
  const Counted* object = owner.get();
  Lease lease(*owner);
  owner.reset();
  EXPECT_EQ(destroyed.load(), 0);
  EXPECT_TRUE(object->alive.load());
  lease = Lease();
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(Lease, LeasesReturnedBeforeTheOwnerGoesLeaveNothingBehind) {
  std::atomic<int> destroyed{0};
  auto owner = make_leased<Counted>(destroyed);
  for (int i = 0; i < 5; ++i) Lease lease(*owner);
  EXPECT_EQ(destroyed.load(), 0);
  owner.reset();
  EXPECT_EQ(destroyed.load(), 1);
}

// A lease taken on one thread and returned on another leaves one stripe above zero and another
// below: only their sum counts.
TEST(Lease, LeasesReturnedOnAnotherThreadCountOnlyInTheSum) {
  std::atomic<int> destroyed{0};
  auto owner = make_leased<Counted>(destroyed);
  std::vector<Lease> taken;
  for (int i = 0; i < 3; ++i) taken.emplace_back(*owner);  // this thread's stripe is chosen now
  Lease kept(*owner);
  on_other_thread([&] { taken.clear(); });  // three returns on another stripe
  owner.reset();
  EXPECT_EQ(destroyed.load(), 0);  // `kept` is still out
  on_other_thread([&] { Lease(std::move(kept)); });
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(Lease, ACopyIsASecondLeaseAlsoAfterTheOwnerWent) {
  std::atomic<int> destroyed{0};
  auto owner = make_leased<Counted>(destroyed);
  Lease first(*owner);
  owner.reset();
  Lease second(first);  // counted centrally: every stripe is closed
  Lease third;
  on_other_thread([&] { third = second; });
  first = Lease();
  second = Lease();
  EXPECT_EQ(destroyed.load(), 0);
  on_other_thread([&] { third = Lease(); });
  EXPECT_EQ(destroyed.load(), 1);
}

TEST(Lease, MovesAndAssignmentsKeepOneLeaseEach) {
  std::atomic<int> destroyed_a{0}, destroyed_b{0};
  auto a = make_leased<Counted>(destroyed_a);
  auto b = make_leased<Counted>(destroyed_b);
  Lease la(*a);
  Lease lb(*b);
  Lease moved(std::move(la));
  EXPECT_FALSE(la);  // NOLINT(bugprone-use-after-move): a moved-from lease holds none
  EXPECT_TRUE(moved);
  a.reset();
  b.reset();
  lb = moved;  // lb's lease on b ends; a now has two
  EXPECT_EQ(destroyed_b.load(), 1);
  moved = Lease();
  EXPECT_EQ(destroyed_a.load(), 0);
  lb = Lease();
  EXPECT_EQ(destroyed_a.load(), 1);
}

// Threads take and return leases (each return on whichever thread holds it then) while the owner
// goes: the object is destroyed exactly once, after every lease (each holder checks it lives).
TEST(Lease, ConcurrentLeasesAndRetirementDestroyExactlyOnceAfterTheLast) {
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> destroyed{0};
    auto owner = make_leased<Counted>(destroyed);
    const Counted* object = owner.get();
    std::atomic<int> dead_seen{0};
    std::atomic<int> started{0};
    std::atomic<bool> go{false};
    std::vector<Lease> seeds;
    for (int t = 0; t < 4; ++t) seeds.emplace_back(*owner);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        Lease mine(std::move(seeds[static_cast<std::size_t>(t)]));
        while (!go.load(std::memory_order_acquire)) {
        }
        started.fetch_add(1, std::memory_order_release);
        for (int i = 0; i < 2000; ++i) {
          Lease extra(mine);
          if (!object->alive.load(std::memory_order_relaxed)) dead_seen.fetch_add(1);
        }
      });
    }
    go.store(true, std::memory_order_release);
    while (started.load(std::memory_order_acquire) < 4) {
    }
    owner.reset();  // while the threads lease (each holds one until it ends)
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(dead_seen.load(), 0);
    EXPECT_EQ(destroyed.load(), 1);
  }
}

// The guarantee the leases give users: a temporary shield may run a callback-style call, which
// keeps the shield's pipeline (and its strategies) until it completes.
TEST(Lease, ATemporaryShieldsCallKeepsItsPipelineUntilItCompletes) {
  asio::io_context io;
  std::weak_ptr<Strategy> layer;
  int value = 0;
  error_code result = asio::error::would_block;
  {
    auto strategy = std::make_shared<test::PassThrough>();
    layer = strategy;
    const Shield temporary = Shield{}.use(std::move(strategy));
    temporary.execute_async(
        [&io](auto token) {
          return test::async_answer(io.get_executor(), error_code(), 7, std::move(token));
        },
        asio::bind_executor(io, [&](error_code ec, int v) {
          result = ec;
          value = v;
        }));
  }
  EXPECT_FALSE(layer.expired());  // the execution holds the pipeline
  io.run();
  EXPECT_EQ(result, error_code());
  EXPECT_EQ(value, 7);
  EXPECT_TRUE(layer.expired());  // its lease was the last reference
}

// A deferred call of a temporary shield carries its lease: copied, and initiated after the shield
// is gone, each copy runs through the pipeline, which lives until the last completes.
TEST(Lease, DeferredCallsOfATemporaryShieldKeepItsPipelineAcrossCopies) {
  asio::io_context io;
  std::weak_ptr<Strategy> layer;
  std::vector<int> values;
  {
    auto op = [&] {
      auto strategy = std::make_shared<test::PassThrough>();
      layer = strategy;
      return Shield{}.use(std::move(strategy)).execute_async([&io](auto token) {
        return test::async_answer(io.get_executor(), error_code(), 5, std::move(token));
      });
    }();
    auto copy = op;
    EXPECT_FALSE(layer.expired());  // the deferred operations hold the pipeline
    std::move(op)(asio::bind_executor(io, [&](error_code ec, int v) {
      EXPECT_FALSE(ec);
      values.push_back(v);
    }));
    std::move(copy)(asio::bind_executor(io, [&](error_code ec, int v) {
      EXPECT_FALSE(ec);
      values.push_back(v + 1);
    }));
  }
  EXPECT_FALSE(layer.expired());  // two executions run
  io.run();
  EXPECT_EQ(values, (std::vector<int>{5, 6}));
  EXPECT_TRUE(layer.expired());
}

// A coroutine factory's call of a temporary shield: the awaitable holds the lease until awaited.
TEST(Lease, ACoroutineCallOfATemporaryShieldKeepsItsPipelineUntilAwaited) {
  asio::io_context io;
  std::weak_ptr<Strategy> layer;
  int value = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto awaitable = [&] {
          auto strategy = std::make_shared<test::PassThrough>();
          layer = strategy;
          return Shield{}.use(std::move(strategy)).execute_async([]() -> asio::awaitable<int> {
            co_return 9;
          });
        }();
        EXPECT_FALSE(layer.expired());
        value = co_await std::move(awaitable);
      },
      asio::detached);
  io.run();
  EXPECT_EQ(value, 9);
  EXPECT_TRUE(layer.expired());
}

}  // namespace
}  // namespace kevlar
