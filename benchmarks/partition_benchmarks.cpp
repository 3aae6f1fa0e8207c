// BM_Partitioned: what a kevlar::PartitionedShield lookup costs, and how it scales across threads.
//   existing_key          — each thread looks up its own cached key (1 and 2 threads; keys 0
//                           and 1, which fall in different shards): one shard lock, the recency
//                           stamp, a Shield copy; the threads share only the recency floor,
//                           written once every 64 lookups
//   existing_key_shared   — 2 threads look up the same cached key: its shard lock and its
//                           shield's reference count are shared too
//   new_key_with_eviction — every lookup is a key never seen, into a full cache: the creation
//                           path (factory outside the locks, insertion, one LRU eviction)
//   new_key_built_shield  — the same with a factory that builds the key's shield, as a real one
//                           does: what a cold key costs in all
//   control_map_lookup    — the baseline in the same run: std::unordered_map<Key, Shield>::find
//                           and a Shield copy behind one std::mutex (1 and 2 threads, each thread
//                           its own key)
// Keys are integers, so no key is built or hashed at any cost in the loop; partitions hold a
// circuit breaker shield (what a per-host partition typically holds); nothing is executed.
// The two new_key rows also report `live_bytes_per_partition`: the heap a partition keeps, from
// glibc's allocator statistics (mallinfo2) before and after 1000 keys are added to an empty
// PartitionedShield with the row's factory (0 where the C library is not glibc).
#include "bench_support.hpp"

#include <kevlar/partitioned_shield.hpp>
#include <kevlar/shield.hpp>

#include <benchmark/benchmark.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace {

using namespace std::chrono_literals;
using Key = std::uint64_t;
using kevlar::bench::keep_second_thread_alive;

constexpr Key partitions = 1000;  // the default max_partitions, filled

kevlar::Shield per_host_shield() {
  return kevlar::Shield{}.circuit_breaker(5, 30s);
}

/// A full PartitionedShield (1000 keys, the default bound), shared by the threads of a run.
kevlar::PartitionedShield<Key>& filled_partitions() {
  static kevlar::PartitionedShield<Key> p([](const Key&) { return per_host_shield(); });
  static const bool filled = [] {
    for (Key k = 0; k < partitions; ++k) (void)p.get(k);
    return true;
  }();
  (void)filled;
  return p;
}

/// Heap bytes in use by the whole process (glibc's mallinfo2), or nullopt without glibc.
std::optional<std::int64_t> live_heap_bytes() {
#if defined(__GLIBC__)
  return static_cast<std::int64_t>(mallinfo2().uordblks);
#else
  return std::nullopt;
#endif
}

/// The heap one partition keeps with `factory`: the growth of the live heap while `partitions`
/// keys are added to an empty PartitionedShield, per key (0 without glibc).
double live_bytes_per_partition(const kevlar::PartitionedShield<Key>::Factory& factory) {
  kevlar::PartitionedShield<Key> parts(factory);
  const auto before = live_heap_bytes();
  for (Key k = 0; k < partitions; ++k) (void)parts.get(k);
  const auto after = live_heap_bytes();
  if (!before || !after) return 0;
  return static_cast<double>(*after - *before) / static_cast<double>(partitions);
}

/// Looks up `key` once per iteration; the shield copy is kept alive to the end of the iteration.
void run_lookups(benchmark::State& state, kevlar::PartitionedShield<Key>& parts, Key key,
                 const char* label) {
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    kevlar::Shield s = parts.get(key);
    benchmark::DoNotOptimize(s);
  }
  allocs.report(state);
  if (parts.created() != partitions) state.SkipWithError("a lookup ran the factory");
  state.SetLabel(label);
}

void BM_Partitioned_existing_key(benchmark::State& state) {
  keep_second_thread_alive();  // a real server has many threads: mutexes take their lock prefix
  auto& parts = filled_partitions();
  run_lookups(state, parts, static_cast<Key>(state.thread_index()),
              "no event loop; each thread its own cached key, 1000 partitions");
}

void BM_Partitioned_existing_key_shared(benchmark::State& state) {
  keep_second_thread_alive();
  auto& parts = filled_partitions();
  run_lookups(state, parts, 0, "no event loop; every thread the same cached key, 1000 partitions");
}

/// Every lookup a new key into a full cache (one eviction each), with `factory`.
void run_new_keys(benchmark::State& state, const kevlar::PartitionedShield<Key>::Factory& factory,
                  const char* label) {
  keep_second_thread_alive();
  kevlar::PartitionedShield<Key> parts(factory);
  Key next = 0;
  for (; next < partitions; ++next) (void)parts.get(next);
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    kevlar::Shield s = parts.get(next++);
    benchmark::DoNotOptimize(s);
  }
  allocs.report(state);
  if (parts.evicted_by_capacity() != static_cast<std::uint64_t>(state.iterations())) {
    state.SkipWithError("a lookup did not evict");
  }
  state.counters["live_bytes_per_partition"] = live_bytes_per_partition(factory);
  state.SetLabel(label);
}

void BM_Partitioned_new_key_with_eviction(benchmark::State& state) {
  // The factory returns a copy of one prebuilt shield, so that the loop times the cache's own
  // creation path (pending entry, insertion, eviction), not the building of a shield; a
  // partition keeps only its entry.
  const kevlar::Shield prototype = per_host_shield();
  run_new_keys(
      state, [&](const Key&) { return prototype; },
      "no event loop; every lookup a new key into 1000 full partitions, one eviction");
}

void BM_Partitioned_new_key_built_shield(benchmark::State& state) {
  // The factory builds each key's shield (its own breaker state): a partition keeps its entry,
  // the shield's pipeline and its strategy.
  run_new_keys(
      state, [](const Key&) { return per_host_shield(); },
      "no event loop; every lookup a new key, its shield built, one eviction");
}

/// The control: one mutex around a plain map of the same 1000 shields.
struct ControlMap {
  std::mutex mutex;
  std::unordered_map<Key, kevlar::Shield> map;
  ControlMap() {
    for (Key k = 0; k < partitions; ++k) map.emplace(k, per_host_shield());
  }
  kevlar::Shield get(Key k) {
    std::lock_guard<std::mutex> lock(mutex);
    return map.find(k)->second;
  }
};

void BM_Partitioned_control_map_lookup(benchmark::State& state) {
  keep_second_thread_alive();
  static ControlMap control;
  const Key key = static_cast<Key>(state.thread_index());
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    kevlar::Shield s = control.get(key);
    benchmark::DoNotOptimize(s);
  }
  allocs.report(state);
  state.SetLabel("no event loop; control: one std::mutex around std::unordered_map, own key");
}

}  // namespace

BENCHMARK(BM_Partitioned_existing_key)
    ->Name("BM_Partitioned/existing_key")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_Partitioned_existing_key_shared)
    ->Name("BM_Partitioned/existing_key_shared")
    ->Threads(2)
    ->UseRealTime();
BENCHMARK(BM_Partitioned_new_key_with_eviction)->Name("BM_Partitioned/new_key_with_eviction");
BENCHMARK(BM_Partitioned_new_key_built_shield)->Name("BM_Partitioned/new_key_built_shield");
BENCHMARK(BM_Partitioned_control_map_lookup)
    ->Name("BM_Partitioned/control_map_lookup")
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();
