// Shared helpers for kevlar_benchmarks.
#pragma once

#include <alloc_counter.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>

namespace kevlar::bench {

/// Reports allocs_per_op and bytes_per_op for the allocations the calling thread made while the
/// benchmark loop ran. Construct before the loop; call report() after it.
class AllocReport {
 public:
  AllocReport() noexcept : start_(kevlar::testing::thread_allocations()) {}
  void report(benchmark::State& state, std::int64_t ops_per_iteration = 1) const {
    const auto now = kevlar::testing::thread_allocations();
    const double ops = static_cast<double>(state.iterations() * ops_per_iteration);
    state.counters["allocs_per_op"] =
        ops > 0 ? static_cast<double>(now.count - start_.count) / ops : 0;
    state.counters["bytes_per_op"] =
        ops > 0 ? static_cast<double>(now.bytes - start_.bytes) / ops : 0;
  }

 private:
  kevlar::testing::AllocStats start_;
};

/// Same, counting every thread's allocations (benchmarks that use helper threads).
class ProcessAllocReport {
 public:
  ProcessAllocReport() noexcept : start_(kevlar::testing::process_allocations()) {}
  void report(benchmark::State& state, std::int64_t ops_per_iteration = 1) const {
    const auto now = kevlar::testing::process_allocations();
    const double ops = static_cast<double>(state.iterations() * ops_per_iteration);
    state.counters["allocs_per_op"] =
        ops > 0 ? static_cast<double>(now.count - start_.count) / ops : 0;
    state.counters["bytes_per_op"] =
        ops > 0 ? static_cast<double>(now.bytes - start_.bytes) / ops : 0;
  }

 private:
  kevlar::testing::AllocStats start_;
};

}  // namespace kevlar::bench
