// kevlar::detail::PartitionCache on its own: values are std::shared_ptr<int>, time is a fake time
// source. Needs only GoogleTest, the header and (for the LRU model test) the testing kit's model
// runner. The threaded tests run under ThreadSanitizer in CI (label "concurrency"); nothing
// sleeps: threads meet on latches and on the cache's waiting() count.
#include <boom.hpp>
#include <kevlar/detail/partition_cache.hpp>
#include <kevlar/testing/model_runner.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <latch>
#include <list>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kevlar::detail {
namespace {

using namespace std::chrono_literals;
using Value = std::shared_ptr<int>;
using Cache = PartitionCache<int, Value>;

/// A time source the test moves by hand; safe to read from any thread.
class FakeTime {
 public:
  std::function<Clock::time_point()> source() {
    return [this] {
      reads_.fetch_add(1, std::memory_order_relaxed);
      return Clock::time_point(Clock::duration(ticks_.load(std::memory_order_relaxed)));
    };
  }
  void advance(Clock::duration d) { ticks_.fetch_add(d.count(), std::memory_order_relaxed); }
  [[nodiscard]] int reads() const { return reads_.load(std::memory_order_relaxed); }

 private:
  std::atomic<Clock::duration::rep> ticks_{Clock::duration(1h).count()};
  std::atomic<int> reads_{0};
};

PartitionCacheOptions bounded(std::size_t max) {
  PartitionCacheOptions o;
  o.max_entries = max;
  return o;
}

PartitionCacheOptions expiring(std::size_t max, Clock::duration idle, FakeTime& time) {
  PartitionCacheOptions o;
  o.max_entries = max;
  o.idle_expiration = idle;
  o.now = time.source();
  return o;
}

/// A factory making `make_shared<int>(key)` and counting its runs.
struct Counting {
  std::shared_ptr<std::atomic<int>> runs = std::make_shared<std::atomic<int>>(0);
  Cache::Factory factory() const {
    return [r = runs](const int& key) {
      r->fetch_add(1);
      return std::make_shared<int>(key);
    };
  }
  [[nodiscard]] int count() const { return runs->load(); }
};

// ---- identity ---------------------------------------------------------------------------------

TEST(PartitionCache, SameKeyReturnsTheSameValue) {
  Counting made;
  Cache cache(made.factory(), bounded(10));
  const Value a = cache.get(1);
  const Value again = cache.get(1);
  const Value other = cache.get(2);
  EXPECT_EQ(a, again);  // the same object, not an equal one
  EXPECT_NE(a, other);
  EXPECT_EQ(*a, 1);
  EXPECT_EQ(*other, 2);
  EXPECT_EQ(made.count(), 2);
  EXPECT_EQ(cache.created(), 2U);
  EXPECT_EQ(cache.size(), 2U);
  EXPECT_EQ(cache.try_get(1), a);
}

struct CaseInsensitiveHash {
  std::size_t operator()(const std::string& s) const noexcept {
    std::string lower(s);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return std::hash<std::string>{}(lower);
  }
};
struct CaseInsensitiveEqual {
  bool operator()(const std::string& a, const std::string& b) const noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  }
};

TEST(PartitionCache, KeysAreComparedThroughHashAndKeyEqual) {
  int runs = 0;
  PartitionCache<std::string, Value, CaseInsensitiveHash, CaseInsensitiveEqual> cache(
      [&](const std::string& host) {
        ++runs;
        return std::make_shared<int>(static_cast<int>(host.size()));
      },
      bounded(10));
  const Value a = cache.get("Api.Example.COM");
  EXPECT_EQ(cache.get("api.example.com"), a);
  EXPECT_EQ(cache.try_get("API.EXAMPLE.COM"), a);
  EXPECT_NE(cache.get("db.example.com"), a);
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(cache.remove("API.example.com"));
  EXPECT_FALSE(cache.try_get("api.example.com").has_value());
}

TEST(PartitionCache, EveryKeyOfAManyKeyCacheKeepsItsOwnValue) {
  Counting made;
  Cache cache(made.factory(), bounded(1000));
  std::vector<Value> first;
  for (int k = 0; k < 500; ++k) first.push_back(cache.get(k));
  for (int k = 0; k < 500; ++k) {
    ASSERT_EQ(cache.get(k), first[static_cast<std::size_t>(k)]) << k;
    ASSERT_EQ(*first[static_cast<std::size_t>(k)], k);
  }
  EXPECT_EQ(made.count(), 500);
  EXPECT_EQ(cache.size(), 500U);
}

// ---- the bound and LRU order --------------------------------------------------------------------

TEST(PartitionCache, FullCacheEvictsTheLeastRecentlyUsedEntry) {
  Counting made;
  Cache cache(made.factory(), bounded(2));
  const Value a = cache.get(1);
  const Value b = cache.get(2);
  EXPECT_EQ(cache.get(1), a);  // 1 is now more recent than 2
  const Value c = cache.get(3);
  EXPECT_EQ(cache.size(), 2U);
  EXPECT_EQ(cache.evicted_by_capacity(), 1U);
  EXPECT_FALSE(cache.try_get(2).has_value());  // 2 went
  EXPECT_EQ(cache.try_get(1), a);
  EXPECT_EQ(cache.try_get(3), c);
}

TEST(PartitionCache, TryGetCountsAsAUse) {
  Counting made;
  Cache cache(made.factory(), bounded(2));
  (void)cache.get(1);
  (void)cache.get(2);
  ASSERT_TRUE(cache.try_get(1).has_value());  // 1 is now more recent than 2
  (void)cache.get(3);
  EXPECT_TRUE(cache.try_get(1).has_value());
  EXPECT_FALSE(cache.try_get(2).has_value());
}

TEST(PartitionCache, TryGetNeverRunsTheFactory) {
  Counting made;
  Cache cache(made.factory(), bounded(2));
  EXPECT_FALSE(cache.try_get(7).has_value());
  EXPECT_EQ(made.count(), 0);
  EXPECT_EQ(cache.created(), 0U);
  EXPECT_EQ(cache.size(), 0U);
}

TEST(PartitionCache, BoundOfOneKeepsOnlyTheLastKey) {
  Counting made;
  Cache cache(made.factory(), bounded(1));
  for (int k = 0; k < 20; ++k) {
    (void)cache.get(k);
    ASSERT_EQ(cache.size(), 1U);
  }
  EXPECT_EQ(cache.evicted_by_capacity(), 19U);
  EXPECT_TRUE(cache.try_get(19).has_value());
  EXPECT_FALSE(cache.try_get(18).has_value());
}

/// One step of the LRU model test.
struct LruCommand {
  bool try_get = false;  ///< try_get (touches a cached key, never inserts) instead of get
  int key = 0;
};

std::ostream& operator<<(std::ostream& os, const LruCommand& c) {
  return os << (c.try_get ? "try_get " : "get ") << c.key;
}

/// What a run of the LRU model exercised.
struct LruCoverage {
  int hits = 0, misses = 0, try_hits = 0, try_misses = 0;
  std::uint64_t evictions = 0;
};

// Single-threaded, the eviction order is exact LRU across every shard: a reference model (a list,
// most recent first) and the cache agree on every step of a random walk over more keys than fit,
// for each seed of the model runner's corpus. (The mt19937 version walked 20000 steps from one
// seed: each corpus seed walks 4000.)
TEST(PartitionCache, EvictionOrderMatchesAnExactLruModel) {
  constexpr std::size_t max = 40;
  LruCoverage coverage;
  const kevlar::testing::ModelRunner<LruCommand> runner(
      "partition cache vs exact LRU",
      [](kevlar::testing::ModelRandom& r) {
        const int key = static_cast<int>(r.below(120));
        return LruCommand{r.below(10) < 2, key};
      },
      [&](const std::vector<LruCommand>& commands) {
        coverage = {};
        Counting made;
        Cache cache(made.factory(), bounded(max));
        std::list<int> model;  // most recently used first
        for (std::size_t step = 0; step < commands.size(); ++step) {
          const int k = commands[step].key;
          const auto at = [&] {
            std::ostringstream o;
            o << "step " << step << " (" << commands[step] << ")";
            return o.str();
          };
          const auto in_model = std::find(model.begin(), model.end(), k);
          const bool cached = in_model != model.end();
          if (commands[step].try_get) {
            if (cache.try_get(k).has_value() != cached) {
              kevlar::testing::model_check(
                  false, at() + (cached ? ": the model has it cached" : ": the model evicted it"));
            }
            if (cached) model.splice(model.begin(), model, in_model);
            ++(cached ? coverage.try_hits : coverage.try_misses);
            continue;
          }
          const int runs_before = made.count();
          const Value v = cache.get(k);
          if (*v != k) kevlar::testing::model_check(false, at() + ": another key's value");
          if (made.count() - runs_before != (cached ? 0 : 1)) {
            kevlar::testing::model_check(
                false, at() + (cached ? ": the factory ran for a key the model has cached"
                                      : ": the factory did not run for a key the model evicted"));
          }
          if (cached) {
            model.splice(model.begin(), model, in_model);
            ++coverage.hits;
          } else {
            if (model.size() == max) {
              model.pop_back();
              ++coverage.evictions;
            }
            model.push_front(k);
            ++coverage.misses;
          }
          if (cache.size() != model.size() || cache.evicted_by_capacity() != coverage.evictions) {
            kevlar::testing::model_check(
                false, at() + ": size " + std::to_string(cache.size()) + " and " +
                           std::to_string(cache.evicted_by_capacity()) + " evictions, the model " +
                           std::to_string(model.size()) + " and " +
                           std::to_string(coverage.evictions));
          }
        }
        for (int k : model) {
          kevlar::testing::model_check(cache.try_get(k).has_value(),
                                       "at the end: " + std::to_string(k) + " is not cached");
        }
      },
      4000);
  for (const std::uint64_t seed : kevlar::testing::model_seeds()) {
    runner.run_seed(seed);
    // Coverage is pinned for the fixed corpus; sweep seeds (KEVLAR_MODEL_SWEEP_SEEDS) only check
    // the model.
    if (std::find(kevlar::testing::model_seed_corpus.begin(),
                  kevlar::testing::model_seed_corpus.end(),
                  seed) == kevlar::testing::model_seed_corpus.end()) {
      continue;
    }
    EXPECT_GT(coverage.hits, 500) << seed;
    EXPECT_GT(coverage.misses, 500) << seed;
    EXPECT_GT(coverage.try_hits, 100) << seed;
    EXPECT_GT(coverage.try_misses, 100) << seed;
    EXPECT_GT(coverage.evictions, 500u) << seed;
  }
}

// ---- removal: only the cache's reference goes -----------------------------------------------

TEST(PartitionCache, EvictedValueStaysValidAndTheKeyGetsAFreshOne) {
  Counting made;
  Cache cache(made.factory(), bounded(1));
  const Value held = cache.get(1);
  (void)cache.get(2);              // evicts 1
  EXPECT_EQ(held.use_count(), 1);  // the cache let go of it; the caller's copy lives on
  EXPECT_EQ(*held, 1);
  const Value fresh = cache.get(1);
  EXPECT_NE(fresh, held);
  EXPECT_EQ(made.count(), 3);
}

TEST(PartitionCache, RemoveDropsTheEntryWithoutCountingAnEviction) {
  Counting made;
  Cache cache(made.factory(), bounded(4));
  const Value held = cache.get(1);
  (void)cache.get(2);
  EXPECT_TRUE(cache.remove(1));
  EXPECT_FALSE(cache.remove(1));
  EXPECT_FALSE(cache.remove(99));
  EXPECT_EQ(cache.size(), 1U);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);
  EXPECT_EQ(cache.evicted_by_expiry(), 0U);
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_NE(cache.get(1), held);
  EXPECT_EQ(cache.created(), 3U);
}

TEST(PartitionCache, ClearDropsEverythingWithoutCountingEvictions) {
  Counting made;
  Cache cache(made.factory(), bounded(100));
  std::vector<Value> held;
  for (int k = 0; k < 50; ++k) held.push_back(cache.get(k));
  cache.clear();
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);
  for (const Value& v : held) EXPECT_EQ(v.use_count(), 1);
  EXPECT_FALSE(cache.try_get(3).has_value());
  EXPECT_NE(cache.get(3), held[3]);
  EXPECT_EQ(cache.size(), 1U);
  cache.clear();
  cache.clear();  // clearing an empty cache is harmless
  EXPECT_EQ(cache.size(), 0U);
}

TEST(PartitionCache, RemovedKeysFreeRoomForNewOnesWithoutEvicting) {
  Counting made;
  Cache cache(made.factory(), bounded(2));
  (void)cache.get(1);
  (void)cache.get(2);
  EXPECT_TRUE(cache.remove(1));
  (void)cache.get(3);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);
  EXPECT_TRUE(cache.try_get(2).has_value());
}

// ---- idle expiry --------------------------------------------------------------------------------

TEST(PartitionCache, IdleEntryExpiresAndTheKeyGetsAFreshValue) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(10, 10s, time));
  const Value first = cache.get(1);
  time.advance(9s);
  EXPECT_EQ(cache.get(1), first);  // a use: idle again from here
  time.advance(9s);
  EXPECT_EQ(cache.try_get(1), first);  // 9 s idle: still there; try_get is a use too
  time.advance(9s);
  EXPECT_EQ(cache.get(1), first);
  time.advance(10s);  // idle for exactly idle_expiration: expired
  const Value second = cache.get(1);
  EXPECT_NE(second, first);
  EXPECT_EQ(first.use_count(), 1);
  EXPECT_EQ(cache.created(), 2U);
  EXPECT_EQ(cache.evicted_by_expiry(), 1U);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);
  EXPECT_EQ(cache.size(), 1U);
}

TEST(PartitionCache, ExpiredEntryIsNeverReturnedByTryGet) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(10, 5s, time));
  (void)cache.get(1);
  time.advance(5s);
  EXPECT_FALSE(cache.try_get(1).has_value());
  EXPECT_EQ(cache.evicted_by_expiry(), 1U);
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_EQ(made.count(), 1);
}

TEST(PartitionCache, AnyLookupRemovesEveryExpiredEntry) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(100, 10s, time));
  for (int k = 0; k < 30; ++k) (void)cache.get(k);
  time.advance(5s);
  const Value kept = cache.get(29);  // touched: expires 5 s after the others
  time.advance(5s);
  EXPECT_EQ(cache.get(29), kept);  // 0..28 are 10 s idle: this lookup removes them
  EXPECT_EQ(cache.size(), 1U);
  EXPECT_EQ(cache.evicted_by_expiry(), 29U);
  time.advance(10s);
  EXPECT_FALSE(cache.try_get(1000).has_value());  // a miss removes them too
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_EQ(cache.evicted_by_expiry(), 30U);
}

TEST(PartitionCache, PruneExpiredReturnsHowManyItRemoved) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(100, 10s, time));
  for (int k = 0; k < 5; ++k) (void)cache.get(k);
  time.advance(3s);
  for (int k = 5; k < 8; ++k) (void)cache.get(k);
  EXPECT_EQ(cache.prune_expired(), 0U);
  time.advance(7s);
  EXPECT_EQ(cache.prune_expired(), 5U);
  EXPECT_EQ(cache.prune_expired(), 0U);
  EXPECT_EQ(cache.size(), 3U);
  time.advance(3s);
  EXPECT_EQ(cache.prune_expired(), 3U);
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_EQ(cache.evicted_by_expiry(), 8U);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);
}

TEST(PartitionCache, RemoveAndClearCountExpiredEntriesAsExpired) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(100, 10s, time));
  (void)cache.get(1);
  (void)cache.get(2);
  time.advance(10s);
  EXPECT_FALSE(cache.remove(1));  // expired already: counted as such, not as removed
  EXPECT_EQ(cache.evicted_by_expiry(), 2U);
  EXPECT_EQ(cache.size(), 0U);
  (void)cache.get(3);
  (void)cache.get(4);
  time.advance(10s);
  cache.clear();
  EXPECT_EQ(cache.evicted_by_expiry(), 4U);
  EXPECT_EQ(cache.size(), 0U);
}

TEST(PartitionCache, ExpiredEntriesLeaveBeforeAnyCapacityEviction) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(2, 10s, time));
  (void)cache.get(1);
  time.advance(5s);
  (void)cache.get(2);
  time.advance(5s);  // 1 expired, 2 not
  (void)cache.get(3);
  EXPECT_EQ(cache.evicted_by_expiry(), 1U);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);
  EXPECT_TRUE(cache.try_get(2).has_value());
  EXPECT_TRUE(cache.try_get(3).has_value());
}

TEST(PartitionCache, WithoutIdleExpiryTimeIsNeverRead) {
  FakeTime time;
  PartitionCacheOptions o = bounded(2);
  o.now = time.source();  // given, but idle_expiration is unset
  Counting made;
  Cache cache(made.factory(), o);
  for (int k = 0; k < 10; ++k) (void)cache.get(k % 3);
  (void)cache.try_get(1);
  (void)cache.remove(1);
  cache.clear();
  EXPECT_EQ(cache.prune_expired(), 0U);
  EXPECT_EQ(time.reads(), 0);
}

TEST(PartitionCache, ImpossibleIdleExpirationNeverExpires) {
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(4, Clock::duration::max(), time));
  const Value v = cache.get(1);
  time.advance(24h * 365 * 100);
  EXPECT_EQ(cache.get(1), v);
  EXPECT_EQ(cache.prune_expired(), 0U);
}

// ---- validation ---------------------------------------------------------------------------------

TEST(PartitionCache, InvalidSettingsAreRefused) {
  FakeTime time;
  Counting made;
  EXPECT_THROW(Cache(nullptr, bounded(1)), std::invalid_argument);
  EXPECT_THROW(Cache(made.factory(), bounded(0)), std::invalid_argument);
  EXPECT_THROW(Cache(made.factory(), expiring(1, 0s, time)), std::invalid_argument);
  EXPECT_THROW(Cache(made.factory(), expiring(1, -1s, time)), std::invalid_argument);
  PartitionCacheOptions no_clock = bounded(1);
  no_clock.idle_expiration = 1s;
  EXPECT_THROW(Cache(made.factory(), no_clock), std::invalid_argument);
  EXPECT_NO_THROW(Cache(made.factory(), expiring(1, 1ns, time)));
}

// ---- the factory --------------------------------------------------------------------------------

using test::Boom;

TEST(PartitionCache, ThrowingFactoryCachesNothingEvictsNothingAndRunsAgainNextTime) {
  int runs = 0;
  bool fail = true;
  Cache cache(
      [&](const int& key) -> Value {
        ++runs;
        if (key == 2 && fail) throw Boom();
        return std::make_shared<int>(key);
      },
      bounded(1));
  const Value one = cache.get(1);  // the cache is full
  EXPECT_THROW((void)cache.get(2), Boom);
  EXPECT_EQ(cache.size(), 1U);
  EXPECT_EQ(cache.evicted_by_capacity(), 0U);  // 1 was not evicted for a value that never came
  EXPECT_EQ(cache.try_get(1), one);
  EXPECT_FALSE(cache.try_get(2).has_value());
  EXPECT_EQ(cache.created(), 1U);
  EXPECT_THROW((void)cache.get(2), Boom);  // not cached: the factory runs again
  EXPECT_EQ(runs, 3);
  fail = false;
  EXPECT_EQ(*cache.get(2), 2);
  EXPECT_EQ(cache.evicted_by_capacity(), 1U);
  EXPECT_EQ(cache.created(), 2U);
}

/// Every key hashes to 0: they all share one shard.
struct OneShardHash {
  std::size_t operator()(const int&) const noexcept { return 0; }
};

TEST(PartitionCache, FactoryMayLookUpOtherKeysOfTheSameCache) {
  // Key 0's factory looks up 1..16, which all share 0's shard (OneShardHash), so the factory is
  // known to run with no shard lock held (a held one would deadlock the lookups).
  using OneShardCache = PartitionCache<int, Value, OneShardHash>;
  std::unique_ptr<OneShardCache> cache;
  std::vector<Value> inner;
  cache = std::make_unique<OneShardCache>(
      [&](const int& key) {
        if (key == 0) {
          for (int k = 1; k <= 16; ++k) inner.push_back(cache->get(k));
          EXPECT_FALSE(cache->try_get(0).has_value());  // itself: not cached yet, no wait
          EXPECT_EQ(cache->size(), 16U);
          EXPECT_EQ(cache->prune_expired(), 0U);
          EXPECT_FALSE(cache->remove(100));
        }
        return std::make_shared<int>(key);
      },
      bounded(100));
  const Value outer = cache->get(0);
  EXPECT_EQ(*outer, 0);
  EXPECT_EQ(cache->size(), 17U);
  for (int k = 1; k <= 16; ++k) EXPECT_EQ(cache->get(k), inner[static_cast<std::size_t>(k - 1)]);
}

TEST(PartitionCache, FactoryMayLookUpItsOwnKeyInAnotherCacheAndOtherKeysInItsOwn) {
  // Only a lookup of the same key in the same cache is recursion: the factory of 5 looks up 5 in
  // another cache and 6 (another hash) in its own.
  Counting made;
  Cache other(made.factory(), bounded(4));
  std::unique_ptr<Cache> cache;
  Value from_other;
  Value six;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        if (key == 5) {
          from_other = other.get(5);
          six = cache->get(6);
        }
        return std::make_shared<int>(key + 100);
      },
      bounded(4));
  const Value five = cache->get(5);
  EXPECT_EQ(*five, 105);
  ASSERT_NE(from_other, nullptr);
  EXPECT_EQ(*from_other, 5);
  EXPECT_EQ(made.count(), 1);
  EXPECT_EQ(other.try_get(5), from_other);
  ASSERT_NE(six, nullptr);
  EXPECT_EQ(cache->try_get(6), six);
  EXPECT_EQ(cache->size(), 2U);
}

TEST(PartitionCache, FactoryLookingUpItsOwnKeyThrowsLogicError) {
  std::unique_ptr<Cache> cache;
  bool recurse = true;
  std::string message;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        if (recurse) {
          try {
            (void)cache->get(key);
          } catch (const std::logic_error& e) {
            message = e.what();
            throw;
          }
        }
        return std::make_shared<int>(key);
      },
      bounded(4));
  EXPECT_THROW((void)cache->get(5), std::logic_error);
  EXPECT_NE(message.find("its own key"), std::string::npos) << message;
  EXPECT_EQ(cache->size(), 0U);
  recurse = false;
  EXPECT_EQ(*cache->get(5), 5);
}

TEST(PartitionCache, FactoryMayRemoveItsOwnKeyWhichIsThenNotCached) {
  std::unique_ptr<Cache> cache;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        EXPECT_TRUE(cache->remove(key));  // the creation in progress
        return std::make_shared<int>(key);
      },
      bounded(4));
  const Value v = cache->get(1);
  EXPECT_EQ(*v, 1);
  EXPECT_EQ(cache->size(), 0U);
  EXPECT_EQ(cache->created(), 1U);
  EXPECT_NE(cache->get(1), v);
}

// After removing its own key (or clearing the cache), the factory's pending record is gone; a
// lookup of its own key must still throw rather than start a second, recursive creation.
TEST(PartitionCache, FactoryLookingUpItsOwnKeyAfterRemovingItThrowsLogicError) {
  std::unique_ptr<Cache> cache;
  int runs = 0;
  bool use_clear = false;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        ++runs;
        if (key == 1) {
          if (use_clear) {
            cache->clear();
          } else {
            EXPECT_TRUE(cache->remove(key));
          }
          EXPECT_THROW((void)cache->get(key), std::logic_error);
          EXPECT_EQ(*cache->get(2), 2);  // other keys still work
        }
        return std::make_shared<int>(key);
      },
      bounded(4));
  EXPECT_EQ(*cache->get(1), 1);
  EXPECT_EQ(runs, 2);  // 1 once (no recursion), 2 once
  use_clear = true;
  EXPECT_EQ(*cache->get(1), 1);
  EXPECT_EQ(runs, 4);  // 1 again, and 2 again (the clear dropped it)
  EXPECT_FALSE(cache->try_get(1).has_value());
}

TEST(PartitionCache, FactoryMayClearTheCacheWhichDetachesItsOwnCreation) {
  std::unique_ptr<Cache> cache;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        if (key == 9) cache->clear();
        return std::make_shared<int>(key);
      },
      bounded(4));
  (void)cache->get(1);
  (void)cache->get(2);
  const Value nine = cache->get(9);
  EXPECT_EQ(*nine, 9);
  EXPECT_EQ(cache->size(), 0U);
}

TEST(PartitionCache, RemovingAKeyThatFailedToCreateIsHarmless) {
  std::unique_ptr<Cache> cache;
  cache = std::make_unique<Cache>(
      [&](const int& key) -> Value {
        (void)cache->remove(key);
        throw Boom();
      },
      bounded(4));
  EXPECT_THROW((void)cache->get(1), Boom);
  EXPECT_EQ(cache->size(), 0U);
}

// ---- threads ------------------------------------------------------------------------------------

/// Spins (yielding) until `n` callers wait on a creation in `cache`. Not a timed wait.
template <class C>
void wait_for_waiters(const C& cache, std::size_t n) {
  while (cache.waiting() < n) std::this_thread::yield();
}

TEST(PartitionCacheThreads, ConcurrentFirstLookupsRunTheFactoryOnce) {
  constexpr int threads = 8;
  std::atomic<int> runs{0};
  std::unique_ptr<Cache> cache;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        runs.fetch_add(1);
        wait_for_waiters(*cache, threads - 1);  // every other caller is waiting on this run
        return std::make_shared<int>(key);
      },
      bounded(4));
  std::latch go(threads);
  std::vector<Value> got(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      go.arrive_and_wait();
      got[static_cast<std::size_t>(i)] = cache->get(42);
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(runs.load(), 1);
  for (const Value& v : got) EXPECT_EQ(v, got[0]);
  EXPECT_EQ(*got[0], 42);
  EXPECT_EQ(cache->created(), 1U);
  EXPECT_EQ(cache->size(), 1U);
  EXPECT_EQ(cache->waiting(), 0U);
}

TEST(PartitionCacheThreads, ConcurrentFirstLookupsShareTheFactorysException) {
  constexpr int threads = 8;
  std::atomic<int> runs{0};
  std::unique_ptr<Cache> cache;
  cache = std::make_unique<Cache>(
      [&](const int&) -> Value {
        if (runs.fetch_add(1) == 0) wait_for_waiters(*cache, threads - 1);
        throw Boom();
      },
      bounded(4));
  std::latch go(threads);
  std::vector<const void*> caught(threads, nullptr);
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      go.arrive_and_wait();
      try {
        (void)cache->get(42);
      } catch (const Boom& e) {
        caught[static_cast<std::size_t>(i)] = &e;
        errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(runs.load(), 1);
  for (int i = 0; i < threads; ++i) {
    EXPECT_NE(caught[static_cast<std::size_t>(i)], nullptr) << i;
    EXPECT_EQ(caught[static_cast<std::size_t>(i)], caught[0]) << "one exception object for all";
    EXPECT_EQ(errors[static_cast<std::size_t>(i)], errors[0]);
  }
  EXPECT_EQ(cache->size(), 0U);
  EXPECT_EQ(cache->created(), 0U);
  EXPECT_FALSE(cache->try_get(42).has_value());
  EXPECT_THROW((void)cache->get(42), Boom);  // nothing cached: it runs again
  EXPECT_EQ(runs.load(), 2);
}

// remove() while the factory runs: the creator and its waiters still get the value, the cache
// does not keep it, and the next lookup makes a fresh one.
TEST(PartitionCacheThreads, RemoveDuringCreationServesTheWaitersButCachesNothing) {
  constexpr int waiters = 3;
  std::latch entered(1);
  std::latch release(1);
  std::atomic<int> runs{0};
  Cache cache(
      [&](const int& key) {
        if (runs.fetch_add(1) == 0) {
          entered.count_down();
          release.wait();
        }
        return std::make_shared<int>(key);
      },
      bounded(4));
  Value creator_got;
  std::thread creator([&] { creator_got = cache.get(7); });
  entered.wait();
  std::vector<Value> got(waiters);
  std::vector<std::thread> pool;
  for (int i = 0; i < waiters; ++i) {
    pool.emplace_back([&, i] { got[static_cast<std::size_t>(i)] = cache.get(7); });
  }
  wait_for_waiters(cache, waiters);
  EXPECT_TRUE(cache.remove(7));  // the creation in progress
  EXPECT_FALSE(cache.try_get(7).has_value());
  release.count_down();
  creator.join();
  for (auto& t : pool) t.join();
  for (const Value& v : got) EXPECT_EQ(v, creator_got);
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_EQ(cache.created(), 1U);
  const Value fresh = cache.get(7);
  EXPECT_NE(fresh, creator_got);
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(cache.size(), 1U);
}

TEST(PartitionCacheThreads, ClearDuringCreationCachesNothingFromBeforeTheClear) {
  std::latch entered(1);
  std::latch release(1);
  Cache cache(
      [&](const int& key) {
        if (key == 1) {
          entered.count_down();
          release.wait();
        }
        return std::make_shared<int>(key);
      },
      bounded(4));
  (void)cache.get(2);
  Value one;
  std::thread creator([&] { one = cache.get(1); });
  entered.wait();
  cache.clear();
  release.count_down();
  creator.join();
  EXPECT_EQ(*one, 1);
  EXPECT_EQ(cache.size(), 0U);
  EXPECT_FALSE(cache.try_get(1).has_value());
}

// A lookup of a key another thread is creating, from a factory: it waits for that creation (no
// lock is held while factories run), while a third key is looked up freely.
TEST(PartitionCacheThreads, FactoryWaitingForAnotherThreadsCreation) {
  std::latch entered(1);
  std::unique_ptr<Cache> cache;
  cache = std::make_unique<Cache>(
      [&](const int& key) {
        if (key == 1) {
          entered.count_down();
          // Finish only once 2's factory waits for this creation: its get(1) cannot find 1 cached.
          while (cache->waiting() == 0) std::this_thread::yield();
        }
        if (key == 2) {
          EXPECT_EQ(*cache->get(3), 3);
          EXPECT_EQ(*cache->get(1), 1);
        }
        return std::make_shared<int>(key);
      },
      bounded(8));
  Value one;
  std::thread t1([&] { one = cache->get(1); });
  entered.wait();
  const Value two = cache->get(2);
  t1.join();
  EXPECT_EQ(*two, 2);
  EXPECT_EQ(cache->get(1), one);
  EXPECT_EQ(cache->size(), 3U);
}

// Many threads, many keys, a small bound: gets, try_gets, removes and clears racing. Every value
// returned is its key's, and the bound is never exceeded.
TEST(PartitionCacheThreads, RacingLookupsEvictionsAndRemovalsKeepTheBound) {
  constexpr std::size_t max = 8;
  constexpr int threads = 6;
  constexpr int ops = 4000;
  Counting made;
  Cache cache(made.factory(), bounded(max));
  std::latch go(threads);
  std::atomic<int> wrong_values{0};
  std::atomic<std::size_t> largest{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      std::mt19937 rng(static_cast<unsigned>(i) + 1);
      std::uniform_int_distribution<int> key_of(0, 39);
      std::uniform_int_distribution<int> op_of(0, 99);
      go.arrive_and_wait();
      for (int n = 0; n < ops; ++n) {
        const int k = key_of(rng);
        const int op = op_of(rng);
        if (op < 70) {
          if (*cache.get(k) != k) wrong_values.fetch_add(1);
        } else if (op < 90) {
          const auto v = cache.try_get(k);
          if (v && **v != k) wrong_values.fetch_add(1);
        } else if (op < 99) {
          (void)cache.remove(k);
        } else {
          cache.clear();
        }
        const std::size_t size = cache.size();
        std::size_t seen = largest.load();
        while (size > seen && !largest.compare_exchange_weak(seen, size)) {
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(wrong_values.load(), 0);
  EXPECT_LE(largest.load(), max);
  EXPECT_LE(cache.size(), max);
  EXPECT_GT(cache.evicted_by_capacity(), 0U);
  // Every cached key still maps to its own value, and nothing is counted twice.
  std::size_t cached = 0;
  for (int k = 0; k < 40; ++k) {
    if (const auto v = cache.try_get(k)) {
      EXPECT_EQ(**v, k);
      ++cached;
    }
  }
  EXPECT_EQ(cached, cache.size());
}

// Without removals every successful creation is accounted for: cached, or evicted by capacity or
// by expiry. Time moves while the threads look up.
TEST(PartitionCacheThreads, RacingLookupsAndExpiryAccountForEveryCreation) {
  constexpr std::size_t max = 16;
  constexpr int threads = 4;
  constexpr int ops = 4000;
  FakeTime time;
  Counting made;
  Cache cache(made.factory(), expiring(max, 50ms, time));
  std::latch go(threads + 1);
  std::atomic<bool> done{false};
  std::atomic<int> wrong_values{0};
  std::atomic<bool> over_bound{false};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      std::mt19937 rng(static_cast<unsigned>(i) + 100);
      std::uniform_int_distribution<int> key_of(0, 47);
      go.arrive_and_wait();
      for (int n = 0; n < ops; ++n) {
        const int k = key_of(rng);
        if (n % 5 == 0) {
          const auto v = cache.try_get(k);
          if (v && **v != k) wrong_values.fetch_add(1);
        } else if (*cache.get(k) != k) {
          wrong_values.fetch_add(1);
        }
        if (cache.size() > max) over_bound = true;
      }
    });
  }
  std::atomic<std::uint64_t> pruned{0};
  std::thread clock([&] {
    go.arrive_and_wait();
    while (!done.load()) {
      time.advance(1ms);
      pruned.fetch_add(cache.prune_expired());
      if (cache.evicted_by_expiry() < pruned.load()) over_bound = true;  // prunes are counted
      std::this_thread::yield();
    }
  });
  for (auto& t : pool) t.join();
  done = true;
  clock.join();
  EXPECT_EQ(wrong_values.load(), 0);
  EXPECT_FALSE(over_bound.load());
  EXPECT_EQ(cache.created(), static_cast<std::uint64_t>(made.count()));
  EXPECT_EQ(cache.created(),
            cache.size() + cache.evicted_by_capacity() + cache.evicted_by_expiry());
  const std::size_t left = cache.size();
  time.advance(50ms);  // nobody looks up any more: everything left expires
  EXPECT_EQ(cache.prune_expired(), left);
  EXPECT_EQ(cache.size(), 0U);
}

TEST(PartitionCacheThreads, ThreadsLookingUpTheirOwnKeysNeverCreateTwice) {
  constexpr int threads = 4;
  Counting made;
  Cache cache(made.factory(), bounded(64));
  std::latch go(threads);
  std::vector<std::thread> pool;
  std::atomic<int> mismatches{0};
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      go.arrive_and_wait();
      const Value mine = cache.get(i);
      for (int n = 0; n < 2000; ++n) {
        if (cache.get(i) != mine) mismatches.fetch_add(1);
        if (cache.get(100 + (n % 8)) == nullptr) mismatches.fetch_add(1);  // shared keys
      }
    });
  }
  for (auto& t : pool) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(made.count(), threads + 8);
  EXPECT_EQ(cache.size(), static_cast<std::size_t>(threads + 8));
}

}  // namespace
}  // namespace kevlar::detail
