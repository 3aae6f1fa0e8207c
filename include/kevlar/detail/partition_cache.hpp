// kevlar — internal: a bounded, sharded, thread-safe LRU cache of values created once per key.
//
// The engine of kevlar::PartitionedShield, kept generic (any copyable value) so that it is tested
// on its own. Of kevlar it includes only <kevlar/clock.hpp>, for the time types: the cache reads
// time from a plain function, never from a kevlar::Clock object, so it needs nothing that the
// kevlar library defines.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/intrusive_list.hpp>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <version>

namespace kevlar::detail {

/// The last recency stamp this thread gave an entry of any PartitionCache (see
/// PartitionCache::next_stamp). Constant-initialised: read without a thread-local guard.
inline constinit thread_local std::uint64_t tl_partition_recency = 0;

/// The settings of a PartitionCache.
struct PartitionCacheOptions {
  /// The most entries the cache holds; > 0.
  std::size_t max_entries = 1000;
  /// Entries not looked up for at least this long expire; > 0 when set. Unset: no idle expiry.
  std::optional<Clock::duration> idle_expiration;
  /// Where the cache reads the time, only when idle_expiration is set (then it is required): a
  /// monotonic source, callable from any thread, that does not throw. Never called without
  /// idle_expiration.
  std::function<Clock::time_point()> now;
};

/// A bounded cache of values made by a factory, one per key, with least-recently-used eviction and
/// optional idle expiry. get() returns the value of a key, running the factory the first time (or
/// again after the key was evicted, removed or expired).
///
/// Guarantees:
/// - one value per key: every get() of a cached key returns a copy of the same value; the first
///   lookups of a key that race run the factory exactly once, and the callers that did not run it
///   wait and receive its value, or the same exception object (rethrown) if it threw;
/// - the factory runs outside every lock of the cache, so it may look up other keys; looking up
///   its own key from inside the factory (same thread) throws std::logic_error instead of
///   deadlocking, also after the factory removed that key (remove or clear). A cycle across
///   threads (the factory of A waits for B while B's waits for A) deadlocks like any cycle of
///   locks;
/// - a factory that throws leaves nothing cached and evicts nothing; the next lookup runs it again;
/// - at most max_entries entries at any moment, threads or not. When an entry is about to be
///   inserted into a full cache, the least recently used one is evicted first: exactly the least
///   recently used when every call comes from one OS thread, approximately when other threads are
///   touching entries at the same moment (see "Design"). Recency is counted per OS thread: a
///   logical thread that hops between OS threads (a strand on an io_context run by several
///   threads, a coroutine resumed elsewhere) counts as several threads, and two of its uses a few
///   dozen lookups apart may tie or be ordered either way;
/// - with idle_expiration, an entry not looked up for at least that long is never returned: any
///   later operation of the cache (get, try_get, remove, clear, prune_expired) removes it and
///   counts it in evicted_by_expiry() (under threads: that operation, or the sweep another thread
///   is running at that moment). No timer and no thread: nothing happens between operations;
/// - removing an entry (eviction, remove, clear) only drops the cache's copy of the value; copies
///   handed out earlier stay valid.
///
/// Design. The keys are spread over `shard_count` shards by a mix of their hash; each shard has its
/// own mutex, hash map and intrusive LRU list. A lookup of a cached key locks only its shard, moves
/// the entry to the front of the shard's list and gives it a recency stamp. Stamps come from a
/// per-thread counter kept ahead of the shard's newest stamp and of a floor the threads publish to
/// once every 64 stamps (next_stamp), so a lookup writes nothing that other threads' lookups of
/// other keys write, and the least recently used entry of the whole cache is the shard tail with
/// the smallest stamp. Insertion into a full cache scans the shards' tail stamps (one atomic per
/// shard, no lock) and evicts the oldest tail; insertions serialise on one internal mutex that no
/// lookup of a cached key takes, which keeps the bound exact under threads, and keep the new key's
/// shard locked from the check that the key was not removed to the linking (with the victim's
/// shard, the two in address order). Under concurrent use
/// the eviction is approximately LRU: uses on different threads a few dozen lookups apart may be
/// ordered either way, and a tail touched between the scan and the eviction is not re-examined.
/// Idle expiry keeps a last-use time per entry (each shard's list is ordered by it as well), the
/// earliest time any entry could expire in one atomic, and sweeps the shard tails when that time
/// has come. One thread sweeps at a time (an atomic flag): the others' lookups meanwhile check
/// only their own key's last use and keep to their shard's lock, so a lookup of a cached key
/// never takes a mutex shared by all lookups, only the one thread whose operation finds the sweep
/// due (and takes the flag) locks every shard, one after the other, and the insertion mutex.
///
/// Requirements: Key copy-constructible; Value nothrow copy- and move-constructible (a handle such
/// as kevlar::Shield or std::shared_ptr); Hash and KeyEqual consistent with each other and not
/// throwing. Values leave the cache with no lock of the cache held (only moved-from values are
/// destroyed in place); keys are destroyed under their shard's lock, so a Key's destructor must
/// not call back into the cache.
///
/// Thread-safety: every member may be called from any thread at once. The cache must outlive every
/// call into it (a factory still running when the cache is destroyed is undefined behaviour).
/// Not copyable, not movable.
template <class Key, class Value, class Hash = std::hash<Key>, class KeyEqual = std::equal_to<Key>>
class PartitionCache {
  static_assert(std::is_copy_constructible_v<Key>, "PartitionCache: Key must be copyable");
  static_assert(std::is_nothrow_copy_constructible_v<Value> &&
                    std::is_nothrow_move_constructible_v<Value>,
                "PartitionCache: Value must be a handle with nothrow copy and move");

 public:
  /// Makes the value of a key: `Value factory(const Key&)`.
  using Factory = std::function<Value(const Key&)>;
  /// The number of shards (a power of two).
  static constexpr std::size_t shard_count = 16;

  /// A cache whose values `factory` makes. Throws std::invalid_argument for an empty factory,
  /// max_entries == 0, a non-positive idle_expiration, or an idle_expiration without a time
  /// source. The shards' maps allocate on first use: an empty cache holds no heap memory beyond
  /// itself and the factory.
  explicit PartitionCache(Factory factory, PartitionCacheOptions options = {}, Hash hash = Hash(),
                          KeyEqual equal = KeyEqual())
      : factory_(std::move(factory)),
        max_entries_(options.max_entries),
        idle_(options.idle_expiration.value_or(Clock::duration::zero())),
        expires_(options.idle_expiration.has_value()),
        now_(std::move(options.now)),
        hash_(std::move(hash)),
        equal_{std::move(equal)} {
    if (!factory_) throw std::invalid_argument("kevlar::detail::PartitionCache: empty factory");
    if (max_entries_ == 0) {
      throw std::invalid_argument("kevlar::detail::PartitionCache: max_entries must be positive");
    }
    if (expires_ && idle_ <= Clock::duration::zero()) {
      throw std::invalid_argument(
          "kevlar::detail::PartitionCache: idle_expiration must be positive when set");
    }
    if (expires_ && !now_) {
      throw std::invalid_argument(
          "kevlar::detail::PartitionCache: idle_expiration needs a time source (now)");
    }
    for (Shard& s : shards_) s.map = Map(0, StoredHash{}, equal_);
  }

  PartitionCache(const PartitionCache&) = delete;
  PartitionCache& operator=(const PartitionCache&) = delete;
  ~PartitionCache() = default;

  /// The value of `key`: the cached one (which counts as a use), or a new one from the factory,
  /// inserted after evicting the least recently used entry if the cache is full. While another
  /// thread runs the factory for `key`, waits for it and returns its value.
  ///
  /// A cached key is found without allocating and with only its shard locked (when a sweep of
  /// expired entries is due and no other thread is running one, this call then runs it).
  ///
  /// Throws what the factory threw (the same exception object for every caller waiting on that
  /// run); std::logic_error if called for `key` from inside the factory running for `key` on this
  /// thread; std::bad_alloc if a new entry cannot be allocated (nothing changes then).
  [[nodiscard]] Value get(const Key& key) {
    const std::size_t h = hash_(key);
    Shard& s = shard_of(h);
    const Clock::time_point now = read_now();
    std::optional<Value> found;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      const auto it = s.map.find(probe(key, h));
      if (it != s.map.end() && it->second.pending == nullptr && !expired(it->second, now)) {
        touch(s, it->second, now);
        found.emplace(*it->second.value);
      }
    }
    if (found) {
      if (sweep_due(now)) try_sweep(now);  // the other keys' expiry: one thread at a time
      return std::move(*found);
    }
    return get_uncached(key, h, s, now);
  }

  /// The cached value of `key` (which counts as a use), or nullopt. Never runs the factory and
  /// never waits: a key whose factory is running is not cached yet. Never allocates; throws
  /// nothing.
  [[nodiscard]] std::optional<Value> try_get(const Key& key) noexcept {
    const std::size_t h = hash_(key);
    Shard& s = shard_of(h);
    const Clock::time_point now = read_now();
    std::optional<Value> found;
    {
      std::optional<Value> stale;  // destroyed after the lock
      std::lock_guard<std::mutex> lock(s.mutex);
      const auto it = s.map.find(probe(key, h));
      if (it != s.map.end() && it->second.pending == nullptr) {
        if (!expired(it->second, now)) {
          touch(s, it->second, now);
          found.emplace(*it->second.value);
        } else {
          stale.emplace(std::move(*it->second.value));
          erase_ready(s, it);
          evicted_by_expiry_.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
    if (sweep_due(now)) try_sweep(now);
    return found;
  }

  /// Drops `key`: its cached value, or the creation running for it. A running creation still
  /// completes for the callers waiting on it, but its value is not cached, so the next lookup
  /// after remove() makes a new one. Returns true if there was such an entry (an expired one does
  /// not count: it is counted as expired). Not an eviction. Throws nothing.
  bool remove(const Key& key) noexcept {
    const std::size_t h = hash_(key);
    Shard& s = shard_of(h);
    const Clock::time_point now = read_now();
    bool removed = false;
    {
      std::optional<Value> dropped;  // destroyed after the lock
      std::lock_guard<std::mutex> lock(s.mutex);
      const auto it = s.map.find(probe(key, h));
      if (it != s.map.end() && it->second.pending != nullptr) {
        it->second.pending->detached = true;
        s.map.erase(it);
        removed = true;
      } else if (it != s.map.end()) {
        removed = !expired(it->second, now);
        if (!removed) evicted_by_expiry_.fetch_add(1, std::memory_order_relaxed);
        dropped.emplace(std::move(*it->second.value));
        erase_ready(s, it);
      }
    }
    if (sweep_due(now)) try_sweep(now);
    return removed;
  }

  /// Drops every entry, and detaches every running creation as remove() does. Expired entries are
  /// counted as expired first; the others are not evictions. Throws nothing.
  void clear() noexcept {
    if (expires_) {
      const Clock::time_point now = read_now();
      if (sweep_due(now)) (void)sweep(now);
    }
    for (Shard& s : shards_) {
      Map dropped(0, StoredHash{}, equal_);  // destroyed after the lock
      std::lock_guard<std::mutex> lock(s.mutex);
      for (auto& [k, e] : s.map) {
        if (e.pending != nullptr) e.pending->detached = true;
      }
      using std::swap;
      swap(dropped, s.map);
      count_.fetch_sub(s.ready, std::memory_order_relaxed);
      s.ready = 0;
      s.lru.forget_all();  // its entries are in `dropped`
      publish_tail(s);
    }
    if (expires_) {
      std::lock_guard<std::mutex> structure(structure_mutex_);
      recompute_next_expiry();
    }
  }

  /// Removes every expired entry now and returns how many (0 without idle_expiration). The other
  /// operations do this too, when an entry may have expired since the last sweep. Throws nothing.
  std::size_t prune_expired() noexcept { return expires_ ? sweep(read_now()) : 0; }

  /// The number of cached entries (creations in progress excluded). Throws nothing.
  [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }
  /// Successful runs of the factory, including values that were not cached because their key was
  /// removed while they were made.
  [[nodiscard]] std::uint64_t created() const noexcept {
    return created_.load(std::memory_order_relaxed);
  }
  /// Entries evicted to keep the cache within max_entries.
  [[nodiscard]] std::uint64_t evicted_by_capacity() const noexcept {
    return evicted_by_capacity_.load(std::memory_order_relaxed);
  }
  /// Entries removed because they were idle for at least idle_expiration.
  [[nodiscard]] std::uint64_t evicted_by_expiry() const noexcept {
    return evicted_by_expiry_.load(std::memory_order_relaxed);
  }
  /// Callers of get() currently waiting for a creation that another thread runs (each of them
  /// will receive that creation's outcome). For tests that need their threads to be waiting.
  [[nodiscard]] std::size_t waiting() const noexcept {
    return waiting_.load(std::memory_order_relaxed);
  }
  /// The bound the cache was built with.
  [[nodiscard]] std::size_t max_entries() const noexcept { return max_entries_; }

 private:
  using Rep = Clock::duration::rep;
  static constexpr Rep never = std::numeric_limits<Rep>::max();
  static constexpr std::uint64_t no_stamp = std::numeric_limits<std::uint64_t>::max();
  static constexpr std::uint64_t recency_publish_interval = 64;

  /// A creation in progress: the thread running the factory and, once it returns, its outcome.
  struct Pending {
    explicit Pending(std::thread::id o) noexcept : owner(o) {}
    const std::thread::id owner;
    bool detached = false;  ///< removed from the cache while running; guarded by the shard mutex
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;  // the three below: guarded by `mutex`
    std::optional<Value> value;
    std::exception_ptr error;

    void finish(std::optional<Value> v, std::exception_ptr e) noexcept {
      {
        std::lock_guard<std::mutex> lock(mutex);
        value = std::move(v);
        error = std::move(e);
        done = true;
      }
      done_cv.notify_all();
    }
    Value wait() {
      std::unique_lock<std::mutex> lock(mutex);
      done_cv.wait(lock, [this] { return done; });
      if (error) std::rethrow_exception(error);
      return *value;
    }
  };

  /// A factory running on this thread: its cache and key (a stack, innermost first).
  struct Making {
    const PartitionCache* cache;
    const Key* key;
    std::size_t hash;
    const Making* outer;
  };
  static inline constinit thread_local const Making* tl_making_ = nullptr;
  struct MakingScope {
    Making m;
    MakingScope(const PartitionCache& c, const Key& k, std::size_t h) noexcept
        : m{&c, &k, h, tl_making_} {
      tl_making_ = &m;
    }
    MakingScope(const MakingScope&) = delete;
    MakingScope& operator=(const MakingScope&) = delete;
    ~MakingScope() { tl_making_ = m.outer; }
  };
  static std::logic_error own_key_error() {
    return std::logic_error(
        "kevlar: the factory making a partition looked up its own key on the same thread "
        "(the lookup would wait for itself forever)");
  }

  struct WaitingScope {
    std::atomic<std::size_t>& n;
    ~WaitingScope() { n.fetch_sub(1, std::memory_order_relaxed); }
  };

  /// A key with its hash, as stored in the shard maps: lookups compare hashes before keys, and the
  /// map never hashes a key again (rehashing reads the stored hash).
  struct StoredKey {
    Key key;
    std::size_t hash;
  };
  /// A lookup's key: a reference to the caller's key, never a copy.
  struct Probe {
    const Key* key;
    std::size_t hash;
  };
  struct StoredHash {
    using is_transparent = void;
    std::size_t operator()(const StoredKey& k) const noexcept { return k.hash; }
    std::size_t operator()(const Probe& k) const noexcept { return k.hash; }
  };
  struct StoredEqual {
    using is_transparent = void;
    KeyEqual equal;
    bool operator()(const StoredKey& a, const StoredKey& b) const {
      return a.hash == b.hash && equal(a.key, b.key);
    }
    bool operator()(const Probe& a, const StoredKey& b) const {
      return a.hash == b.hash && equal(*a.key, b.key);
    }
    bool operator()(const StoredKey& a, const Probe& b) const {
      return a.hash == b.hash && equal(a.key, *b.key);
    }
  };

  /// A map entry: being created (pending set, not linked, not counted) or cached (value set,
  /// linked into the shard's LRU list, counted).
  struct Entry : IntrusiveListHook<Entry> {
    const StoredKey* key = nullptr;
    std::uint64_t stamp = 0;       ///< the global recency stamp of the last use
    Clock::time_point last_use{};  ///< with idle expiry only
    std::optional<Value> value;
    std::shared_ptr<Pending> pending;
  };

  using Map = std::unordered_map<StoredKey, Entry, StoredHash, StoredEqual>;

  // A cache line each: a lookup writes only its own shard's line (and the stamp counter's).
  struct alignas(64) Shard {
    std::mutex mutex;
    Map map;                // guarded by mutex, like every member below but the atomics
    /// The cached entries, most recently used first (the tail is the least recently used).
    IntrusiveList<Entry> lru;
    std::size_t ready = 0;  ///< cached entries (the list's length)
    /// The tail's stamp and last use (no_stamp / never when empty): written under the mutex, read
    /// without it by the victim scan and the expiry bookkeeping.
    std::atomic<std::uint64_t> tail_stamp{no_stamp};
    std::atomic<Rep> tail_last_use{never};
  };

#if defined(__cpp_lib_generic_unordered_lookup) && __cpp_lib_generic_unordered_lookup >= 201811L
  static Probe probe(const Key& key, std::size_t h) noexcept {
    return Probe{&key, h};
  }
#else
  // Without heterogeneous lookup (pre-C++20 standard libraries) a lookup copies the key.
  static StoredKey probe(const Key& key, std::size_t h) {
    return StoredKey{key, h};
  }
#endif

  Shard& shard_of(std::size_t h) noexcept {
    // Fibonacci hashing: the high bits of the product depend on every bit of the hash, and the
    // maps' buckets use the hash itself, so shard and bucket are independent.
    constexpr int shift = 64 - 4;
    static_assert((std::size_t{1} << (64 - shift)) == shard_count);
    const auto mixed = static_cast<std::uint64_t>(h) * 0x9E3779B97F4A7C15ULL;
    return shards_[static_cast<std::size_t>(mixed >> shift)];
  }

  [[nodiscard]] Clock::time_point read_now() const {
    return expires_ ? now_() : Clock::time_point{};
  }

  [[nodiscard]] bool expired(const Entry& e, Clock::time_point now) const noexcept {
    return expires_ && now - e.last_use >= idle_;
  }

  /// `t + idle_`, saturated.
  [[nodiscard]] Rep expiry_of(Rep t) const noexcept {
    return t >= never - idle_.count() ? never : t + idle_.count();
  }

  static void publish_tail(Shard& s) noexcept {
    const Entry* tail = s.lru.back();
    s.tail_stamp.store(tail ? tail->stamp : no_stamp, std::memory_order_relaxed);
    s.tail_last_use.store(tail ? tail->last_use.time_since_epoch().count() : never,
                          std::memory_order_relaxed);
  }

  static void link_front(Shard& s, Entry& e) noexcept { s.lru.push_front(&e); }

  static void unlink(Shard& s, Entry& e) noexcept {
    s.lru.unlink(&e);
  }

  /// Stamps `e` as the most recent use. Under s.mutex. The last use is never earlier than the
  /// head's, so the list stays ordered by time even when threads read the clock out of order.
  void touch(Shard& s, Entry& e, Clock::time_point now) noexcept {
    const bool was_tail = s.lru.back() == &e;
    if (expires_) e.last_use = s.lru.front()->last_use > now ? s.lru.front()->last_use : now;
    e.stamp = next_stamp(s);
    if (s.lru.front() != &e) {
      unlink(s, e);
      link_front(s, e);
    }
    if (was_tail) publish_tail(s);
  }

  /// The recency stamp of a use of an entry of `s`, now. Under s.mutex. It is later than every
  /// stamp this OS thread handed out before (in any cache: on one OS thread, the order of uses is
  /// exact), than the shard's most recent entry (each shard's list stays ordered by stamp, so its
  /// tail is its oldest entry), and than the cache's published floor, which lets a thread that was
  /// idle catch up with the others. Threads publish their stamp to the floor once every
  /// recency_publish_interval stamps: uses on different threads (and shards) less than about that
  /// many lookups apart may be ordered either way, and nothing shared is written on the other
  /// lookups. The publication is a compare-and-swap that only raises the floor: a plain store
  /// from a thread whose counter lags (one that loaded the floor just before another thread
  /// raised it far) would lower it, and keep the other thread's entries the newest of the cache
  /// for as many lookups as the two counters are apart.
  std::uint64_t next_stamp(const Shard& s) noexcept {
    std::uint64_t t = tl_partition_recency + 1;
    const std::uint64_t floor = recency_floor_.load(std::memory_order_relaxed);
    if (t <= floor) t = floor + 1;
    if (const Entry* head = s.lru.front(); head != nullptr && t <= head->stamp) t = head->stamp + 1;
    tl_partition_recency = t;
    if (t >= floor + recency_publish_interval) {
      // Raise only: a plain store from a thread whose counter lags could lower the floor below a
      // stamp another thread already handed out.
      std::uint64_t f = floor;
      while (t > f && !recency_floor_.compare_exchange_weak(f, t, std::memory_order_relaxed)) {
      }
    }
    return t;
  }

  /// Unlinks and erases the cached entry at `it`, whose value has been moved out. Under s.mutex.
  void erase_ready(Shard& s, typename Map::iterator it) noexcept {
    Entry& e = it->second;
    const bool was_tail = s.lru.back() == &e;
    unlink(s, e);
    --s.ready;
    count_.fetch_sub(1, std::memory_order_relaxed);
    s.map.erase(it);
    if (was_tail) publish_tail(s);
  }

  /// Moves the tail of `s` into `out` and erases it, if it is expired at `now` (or if `now` is
  /// unset: any tail). Under s.mutex. Returns whether it did.
  bool pop_tail(Shard& s, std::optional<Value>& out, const Clock::time_point* now) noexcept {
    Entry* t = s.lru.back();
    if (t == nullptr || (now != nullptr && !expired(*t, *now))) return false;
    out.emplace(std::move(*t->value));
    erase_ready(s, s.map.find(probe(t->key->key, t->key->hash)));
    return true;
  }

  /// get() when `key` was not found cached: looks again (under the lock, things may have changed),
  /// then waits for the creation another thread runs, or runs one.
  [[gnu::noinline]] Value get_uncached(const Key& key, std::size_t h, Shard& s,
                                       Clock::time_point now) {
    std::optional<Value> found;
    std::shared_ptr<Pending> running;
    std::shared_ptr<Pending> mine;
    Entry* entry = nullptr;
    // This thread running the factory of `key` (its pending record may have been removed since,
    // by remove() or clear() from inside that factory): waiting or creating would recurse.
    for (const Making* m = tl_making_; m != nullptr; m = m->outer) {
      if (m->cache == this && m->hash == h && equal_.equal(*m->key, key)) throw own_key_error();
    }
    {
      std::optional<Value> stale;  // an expired value of `key`, destroyed after the lock
      std::lock_guard<std::mutex> lock(s.mutex);
      const auto it = s.map.find(probe(key, h));
      if (it != s.map.end() && it->second.pending != nullptr) {
        if (it->second.pending->owner == std::this_thread::get_id()) throw own_key_error();
        running = it->second.pending;
      } else if (it != s.map.end() && !expired(it->second, now)) {
        touch(s, it->second, now);  // a sweep is due, or another thread has just cached it
        found.emplace(*it->second.value);
      } else {
        if (it != s.map.end()) {  // expired: gone, whatever follows
          stale.emplace(std::move(*it->second.value));
          erase_ready(s, it);
          evicted_by_expiry_.fetch_add(1, std::memory_order_relaxed);
        }
        mine = std::make_shared<Pending>(std::this_thread::get_id());
        const auto inserted = s.map.try_emplace(StoredKey{key, h}).first;
        entry = &inserted->second;
        entry->key = &inserted->first;
        entry->pending = mine;
      }
    }
    if (sweep_due(now)) try_sweep(now);  // the other expired entries
    if (found) return std::move(*found);
    if (running != nullptr) {
      waiting_.fetch_add(1, std::memory_order_relaxed);
      const WaitingScope scope{waiting_};
      return running->wait();
    }
    return create(s, key, h, *entry, mine);
  }

  /// Runs the factory for `key` (whose pending entry is `e`, created by this thread), caches the
  /// value unless the key was removed meanwhile, and hands the outcome to the waiters.
  Value create(Shard& s, const Key& key, std::size_t h, Entry& e,
               const std::shared_ptr<Pending>& p) {
    std::optional<Value> made;
    try {
      const MakingScope making(*this, key, h);
      made.emplace(factory_(key));
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (!p->detached) s.map.erase(s.map.find(probe(e.key->key, e.key->hash)));
      }
      p->finish(std::nullopt, std::current_exception());
      throw;
    }
    created_.fetch_add(1, std::memory_order_relaxed);
    std::optional<Value>
        victim;  // evicted by the insertion; destroyed once the waiters have theirs
    insert(s, e, *p, *made, victim);
    p->finish(made, nullptr);
    return std::move(*made);
  }

  /// Turns the pending entry `e` into a cached one holding `v`, first evicting the least recently
  /// used entry into `victim` if the cache is full. Nothing happens if the key was removed while
  /// its value was made. The key's shard stays locked from the check of `detached` through the
  /// eviction to the linking, so a remove() cannot come in between (it would lose the victim for
  /// nothing and leave the cache one below its bound).
  void insert(Shard& s, Entry& e, const Pending& p, const Value& v,
              std::optional<Value>& victim) noexcept {
    const Clock::time_point now = read_now();
    if (sweep_due(now)) try_sweep(now);  // expired entries go as expired, before evictions
    std::lock_guard<std::mutex> structure(structure_mutex_);
    // Only this section (under structure_mutex_) adds entries, so the count cannot grow between
    // the check and the insertion below: the bound holds whatever other threads do.
    for (;;) {
      Shard* const oldest =
          count_.load(std::memory_order_relaxed) >= max_entries_ ? oldest_tail() : nullptr;
      // Two shard mutexes at once happen only here, under structure_mutex_, and always in address
      // order; nobody takes structure_mutex_ with a shard mutex held: no deadlock.
      std::unique_lock<std::mutex> first;
      std::unique_lock<std::mutex> second;
      if (oldest == nullptr || oldest == &s) {
        first = std::unique_lock<std::mutex>(s.mutex);
      } else {
        const bool s_first = std::less<const Shard*>{}(&s, oldest);
        first = std::unique_lock<std::mutex>(s_first ? s.mutex : oldest->mutex);
        second = std::unique_lock<std::mutex>(s_first ? oldest->mutex : s.mutex);
      }
      if (p.detached) return;
      if (count_.load(std::memory_order_relaxed) >= max_entries_) {
        if (oldest == nullptr) continue;  // every tail read empty: entries were removed meanwhile
        const bool was_expired = !oldest->lru.empty() && expired(*oldest->lru.back(), now);
        if (!pop_tail(*oldest, victim, nullptr)) continue;  // emptied meanwhile: scan again
        // Expired but not swept yet: a sweep another thread runs had not reached it.
        (was_expired ? evicted_by_expiry_ : evicted_by_capacity_)
            .fetch_add(1, std::memory_order_relaxed);
      }  // the count is now below the bound: it was at most the bound
      e.pending.reset();
      e.value.emplace(v);
      const Entry* head = s.lru.front();
      if (expires_) e.last_use = head && head->last_use > now ? head->last_use : now;
      e.stamp = next_stamp(s);
      const bool was_empty = head == nullptr;
      link_front(s, e);
      ++s.ready;
      count_.fetch_add(1, std::memory_order_relaxed);
      if (was_empty) publish_tail(s);
      if (expires_) {
        const Rep expiry = expiry_of(e.last_use.time_since_epoch().count());
        if (expiry < next_expiry_.load(std::memory_order_relaxed)) {
          next_expiry_.store(expiry, std::memory_order_relaxed);
        }
      }
      return;
    }
  }

  /// The shard whose tail has the smallest stamp (read without locks), or nullptr if every shard
  /// looks empty. Under structure_mutex_.
  Shard* oldest_tail() noexcept {
    Shard* oldest = nullptr;
    std::uint64_t oldest_stamp = no_stamp;
    for (Shard& s : shards_) {
      const std::uint64_t stamp = s.tail_stamp.load(std::memory_order_relaxed);
      if (stamp < oldest_stamp) {
        oldest_stamp = stamp;
        oldest = &s;
      }
    }
    return oldest;
  }

  /// Whether an entry may have expired at `now` (false without idle expiry).
  [[nodiscard]] bool sweep_due(Clock::time_point now) const noexcept {
    return expires_ &&
           now.time_since_epoch().count() >= next_expiry_.load(std::memory_order_relaxed);
  }

  /// sweep(now), unless another thread is sweeping already (its sweep removes what this one would,
  /// give or take entries expiring in between, which are checked on lookup anyway): so an
  /// operation finding a sweep due does not take every shard mutex, only the first does.
  void try_sweep(Clock::time_point now) noexcept {
    if (sweeping_.load(std::memory_order_relaxed)) return;
    if (sweeping_.exchange(true, std::memory_order_acquire)) return;
    (void)sweep(now);
    sweeping_.store(false, std::memory_order_release);
  }

  /// Removes every entry expired at `now`: the expired ones of a shard are the tail end of its
  /// list. Each value is destroyed outside every lock. Returns how many were removed.
  std::size_t sweep(Clock::time_point now) noexcept {
    std::size_t removed = 0;
    for (Shard& s : shards_) {
      for (;;) {
        std::optional<Value> doomed;
        std::lock_guard<std::mutex> lock(s.mutex);
        if (!pop_tail(s, doomed, &now)) break;
        ++removed;
      }
    }
    evicted_by_expiry_.fetch_add(removed, std::memory_order_relaxed);
    std::lock_guard<std::mutex> structure(structure_mutex_);
    recompute_next_expiry();
    return removed;
  }

  /// next_expiry_ = the earliest expiry of the shard tails. Under structure_mutex_, which excludes
  /// insertions, the only operations that can make an expiry earlier than the tails': a tail read
  /// late is one touched or removed meanwhile, whose successor expires later, so the result is
  /// never later than the truth.
  void recompute_next_expiry() noexcept {
    Rep earliest = never;
    for (const Shard& s : shards_) {
      const Rep t = s.tail_last_use.load(std::memory_order_relaxed);
      if (t < earliest) earliest = t;
    }
    next_expiry_.store(earliest == never ? never : expiry_of(earliest), std::memory_order_relaxed);
  }

  // Read-mostly settings.
  const Factory factory_;
  const std::size_t max_entries_;
  const Clock::duration idle_;
  const bool expires_;
  const std::function<Clock::time_point()> now_;
  const Hash hash_;
  const StoredEqual equal_;
  /// No entry expires before this time (Clock::time_point ticks); never: no entry. Written under
  /// structure_mutex_, read by every operation.
  std::atomic<Rep> next_expiry_{never};
  /// A sweep started by try_sweep is running.
  std::atomic<bool> sweeping_{false};

  /// Roughly the latest recency stamp handed out (see next_stamp): a line of its own, written once
  /// per recency_publish_interval stamps of a thread.
  alignas(64) std::atomic<std::uint64_t> recency_floor_{0};

  // Written on insertion and removal only.
  alignas(64) std::mutex structure_mutex_;  ///< serialises insertions and next_expiry_'s writes
  std::atomic<std::size_t> count_{0};
  std::atomic<std::uint64_t> created_{0};
  std::atomic<std::uint64_t> evicted_by_capacity_{0};
  std::atomic<std::uint64_t> evicted_by_expiry_{0};
  std::atomic<std::size_t> waiting_{0};

  std::array<Shard, shard_count> shards_;
};

}  // namespace kevlar::detail
