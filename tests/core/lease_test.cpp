// detail::Leased and detail::Lease: what keeps a shield's pipeline alive while asynchronous
// executions run (counted per thread), and the shield-level guarantee built on it.
#include <kevlar/detail/lease.hpp>
#include <kevlar/shield.hpp>
#include "async_ops.hpp"
#include "test_strategies.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
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

/// Runs `f` on a new thread and waits for it (a thread whose lease stripe is not the caller's).
template <class F>
void on_other_thread(F f) {
  std::thread t(std::move(f));
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
  std::optional<Lease> lease(std::in_place, *owner);
  owner.reset();
  EXPECT_EQ(destroyed.load(), 0);
  EXPECT_TRUE(object->alive.load());
  lease.reset();
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
  for (int i = 0; i < 3; ++i) taken.emplace_back(*owner);
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
  std::optional<Lease> first(std::in_place, *owner);
  owner.reset();
  std::optional<Lease> second(*first);  // counted centrally: every stripe is closed
  std::optional<Lease> third;
  on_other_thread([&] { third.emplace(*second); });
  first.reset();
  second.reset();
  EXPECT_EQ(destroyed.load(), 0);
  on_other_thread([&] { third.reset(); });
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
    std::atomic<bool> go{false};
    std::vector<Lease> seeds;
    for (int t = 0; t < 4; ++t) seeds.emplace_back(*owner);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        Lease mine(std::move(seeds[static_cast<std::size_t>(t)]));
        while (!go.load(std::memory_order_acquire)) {
        }
        for (int i = 0; i < 2000; ++i) {
          Lease extra(mine);
          if (!object->alive.load(std::memory_order_relaxed)) dead_seen.fetch_add(1);
        }
      });
    }
    go.store(true, std::memory_order_release);
    owner.reset();  // while the threads lease
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

}  // namespace
}  // namespace kevlar
