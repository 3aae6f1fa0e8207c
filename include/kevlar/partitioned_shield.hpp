// kevlar — PartitionedShield: one shield per key (per host, per tenant), made on first use and kept
// in a bounded LRU cache.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/duration_format.hpp>
#include <kevlar/detail/partition_cache.hpp>
#include <kevlar/basic_shield.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace kevlar {

/// The options of a PartitionedShield, validated by its constructor (std::invalid_argument naming
/// the option).
struct PartitionedShieldOptions {
  /// The most partitions (keys with a shield) kept at once; > 0. Before a new partition would
  /// exceed it, the least recently used one is evicted.
  std::size_t max_partitions = 1000;
  /// When set (> 0): a partition not looked up for at least this long is removed by a later
  /// operation of the PartitionedShield (no timer, no thread). Unset: partitions never expire.
  std::optional<Clock::duration> idle_expiration;
  /// The clock idle expiry reads (e.g. a ManualClock in tests); null: Clock::steady(). Read only
  /// when idle_expiration is set; the PartitionedShield keeps it alive.
  std::shared_ptr<const Clock> clock;
};

/// One shield per key: the shield of a key is made by a factory the first time the key is looked
/// up, and the same shield (the same strategy instances, so the same breaker circuit, the same
/// limiter permits) is returned for that key until it is evicted, expires or is removed.
/// ```
/// kevlar::PartitionedShieldOptions options;
/// options.max_partitions = 500;
/// options.idle_expiration = 10min;
/// kevlar::PartitionedShield<std::string> per_host(
///     [](const std::string&) {
///       return kevlar::Shield{}.circuit_breaker(5, 30s).concurrency_limit(10);  // fresh state
///     },
///     options);
/// auto body = per_host.get(request.host).execute([&] { return fetch(request); });
/// ```
/// Semantics (the same as Kevlar's partitioned shields, .NET):
/// - same key (by Hash and KeyEqual), same shield; different keys never share one unless the
///   factory makes them share strategy instances;
/// - the first lookups of a key that race run the factory exactly once; the others wait and get
///   its shield, or the same exception object if it threw;
/// - the factory runs outside every internal lock: it may look up other keys of this
///   PartitionedShield. Looking up its own key from inside the factory, on the same thread, throws
///   std::logic_error (it would wait for itself), also after the factory removed that key
///   (remove() or clear()). A cycle of factories across threads deadlocks;
/// - a throwing factory caches nothing and evicts nothing; the next lookup runs it again;
/// - at most max_partitions partitions; the least recently used is evicted before one more is
///   inserted (exactly when every call comes from one OS thread; approximately under concurrent
///   lookups, never beyond the bound). Recency is per OS thread: a logical thread that hops OS
///   threads (a strand on a multi-threaded io_context) gets only the approximate order;
/// - with idle_expiration, an idle partition is never returned: it is removed (counted by
///   evicted_by_expiry()) by the next operation, and its key gets a fresh shield;
/// - eviction, expiry, remove() and clear() only drop this object's copy of the shield: a shield a
///   caller holds keeps working and its executions are not cancelled; the key's next lookup makes
///   fresh state;
/// - keys never appear in names or metric tags: the factory decides the shield's name.
///
/// A factory returning the empty `Shield{}` is fine: it is a valid shield (it executes calls
/// directly). Unlike Kevlar there is no null shield to refuse, as a Shield is a value.
///
/// Cost: looking up a cached key hashes it once, locks one of 16 shard mutexes (the key's), moves
/// the key to the front of its shard's LRU list with a recency stamp from a per-thread counter, and
/// copies the shield (an atomic reference-count increment). It never allocates, and of what other
/// threads' lookups of other keys write it writes only one word, once every 64 lookups (and the
/// shard, if the keys share one). With idle_expiration it also reads the clock, and when a sweep
/// of idle partitions is due, the one lookup that starts it (one at a time) locks the shards in
/// turn. See
/// docs/partitioning.md.
///
/// Thread-safety: every member may be called from any thread at once. Not copyable or movable
/// (share it by reference or through a std::shared_ptr); it must outlive the calls into it, not
/// the shields it handed out.
template <class Key, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
class PartitionedShield {
 public:
  /// Makes the shield of a key. Called once per key (again after an eviction, expiry or
  /// removal), outside every internal lock, possibly from several threads at once for different
  /// keys; may throw (the lookup then throws the same).
  using Factory = std::function<BasicShield(const Key&)>;

  /// Throws std::invalid_argument for max_partitions == 0, an idle_expiration <= 0 or an empty
  /// factory. Allocates nothing per key until the first lookup.
  explicit PartitionedShield(Factory factory, PartitionedShieldOptions options = {},
                             Hash hash = Hash(), KeyEqual equal = KeyEqual())
      : cache_(checked(std::move(factory), options), cache_options(options), std::move(hash),
               std::move(equal)) {}

  PartitionedShield(const PartitionedShield&) = delete;
  PartitionedShield& operator=(const PartitionedShield&) = delete;

  /// The shield of `key`, made by the factory on the first lookup (counts as a use of the key).
  /// A cached key is found without allocating, with only one of 16 shard locks held.
  ///
  /// Throws what the factory threw (every caller waiting on the same run gets the same exception
  /// object); std::logic_error when called for `key` from the factory making `key`, on the same
  /// thread; std::bad_alloc when a new partition cannot be allocated (nothing changes then).
  [[nodiscard]] BasicShield get(const Key& key) { return cache_.get(key); }

  /// The shield of `key` if it is cached (counts as a use), else nullopt. Never runs the factory
  /// and never waits for a creation in progress. Throws nothing; never allocates.
  [[nodiscard]] std::optional<BasicShield> try_get(const Key& key) noexcept {
    return cache_.try_get(key);
  }

  /// Drops the partition of `key`; the key's next lookup runs the factory again. If the factory is
  /// running for `key`, the callers waiting on it still receive its shield, but it is not kept.
  /// Returns true if there was a partition (cached or being made) for `key`; an expired one
  /// counts as expired and returns false. Not an eviction. Throws nothing.
  bool remove(const Key& key) noexcept { return cache_.remove(key); }

  /// Drops every partition (creations in progress are treated as remove() treats them). Not
  /// evictions, except expired partitions, counted as expired first. Throws nothing.
  void clear() noexcept { cache_.clear(); }

  /// Removes the partitions idle for at least idle_expiration now and returns how many (0 without
  /// idle_expiration). Other operations do it too; this one is for a caller's own schedule.
  /// Throws nothing.
  std::size_t prune_expired() noexcept { return cache_.prune_expired(); }

  /// The number of partitions (creations in progress excluded). Throws nothing.
  [[nodiscard]] std::size_t size() const noexcept { return cache_.size(); }
  /// Successful runs of the factory (including shields made for a key removed meanwhile).
  [[nodiscard]] std::uint64_t created() const noexcept { return cache_.created(); }
  /// Partitions evicted to stay within max_partitions.
  [[nodiscard]] std::uint64_t evicted_by_capacity() const noexcept {
    return cache_.evicted_by_capacity();
  }
  /// Partitions removed because they were idle for at least idle_expiration.
  [[nodiscard]] std::uint64_t evicted_by_expiry() const noexcept {
    return cache_.evicted_by_expiry();
  }
  /// Callers of get() blocked right now waiting for a shield another thread's factory is making.
  /// For tests and diagnostics. Throws nothing.
  [[nodiscard]] std::size_t waiting() const noexcept { return cache_.waiting(); }

 private:
  using Cache = detail::PartitionCache<Key, BasicShield, Hash, KeyEqual>;

  static Factory checked(Factory factory, const PartitionedShieldOptions& o) {
    if (o.max_partitions == 0) {
      throw std::invalid_argument(
          "kevlar::PartitionedShieldOptions::max_partitions must be positive (got 0)");
    }
    if (o.idle_expiration && *o.idle_expiration <= Clock::duration::zero()) {
      throw std::invalid_argument(
          "kevlar::PartitionedShieldOptions::idle_expiration must be positive when set (got " +
          detail::format_duration(*o.idle_expiration) + ")");
    }
    if (!factory) throw std::invalid_argument("kevlar::PartitionedShield: the factory is empty");
    return factory;
  }

  static detail::PartitionCacheOptions cache_options(const PartitionedShieldOptions& o) {
    detail::PartitionCacheOptions c;
    c.max_entries = o.max_partitions;
    c.idle_expiration = o.idle_expiration;
    if (o.idle_expiration) {
      std::shared_ptr<const Clock> clock = o.clock ? o.clock : Clock::steady();
      c.now = [clock = std::move(clock)] { return clock->now(); };
    }
    return c;
  }

  Cache cache_;
};

}  // namespace kevlar
