// Allocation accounting for kevlar's tests and benchmarks.
//
// Linking kevlar_alloc_counter replaces the global operator new/delete (every form) and interposes
// aligned_alloc, which Asio's recycling allocator may call directly. Counts are kept per thread and
// per process; failure injection makes the N-th next allocation on this thread fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace kevlar::testing {

struct AllocStats {
  std::uint64_t count = 0;  ///< allocations
  std::uint64_t bytes = 0;  ///< bytes requested
};

/// Allocations made by the calling thread since it started.
[[nodiscard]] AllocStats thread_allocations() noexcept;
/// Allocations made by every thread since the process started.
[[nodiscard]] AllocStats process_allocations() noexcept;

/// True if the counts include aligned_alloc called directly (as Asio's recycling allocator does).
/// Not in a sanitized build (KEVLAR_SANITIZE): the sanitizer's runtime owns aligned_alloc there,
/// and only operator new is counted.
[[nodiscard]] bool counts_aligned_alloc() noexcept;

/// Makes the allocation `n` allocations from now (0 = the next one) on the calling thread fail:
/// operator new throws std::bad_alloc, aligned_alloc returns nullptr. Only one failure is armed at
/// a time; disarm_allocation_failure() cancels it.
void fail_allocation_after(std::uint64_t n) noexcept;
void disarm_allocation_failure() noexcept;
/// True if an armed failure has not fired yet.
[[nodiscard]] bool allocation_failure_armed() noexcept;

/// What an injected allocation failure did to one step (see inject_allocation_failure).
struct InjectedFailure {
  bool fired = false;  ///< the step made the failing allocation
  bool threw = false;  ///< std::bad_alloc left the step
};

/// Runs `step` with the allocation `n` allocations from now failing on this thread, then disarms:
/// whether the failure fired and whether std::bad_alloc came out of the step (it is caught). A
/// sweep over every allocation point of a step loops `n` from 0 and stops at the first `n` that did
/// not fire (the step allocated fewer than n + 1 times).
template <class Step>
InjectedFailure inject_allocation_failure(std::uint64_t n, Step&& step) {
  InjectedFailure result;
  fail_allocation_after(n);
  try {
    step();
  } catch (const std::bad_alloc&) {
    result.threw = true;
  }
  result.fired = !allocation_failure_armed();
  disarm_allocation_failure();
  return result;
}

/// Counts the calling thread's allocations between construction and count()/bytes().
class AllocScope {
 public:
  AllocScope() noexcept : start_(thread_allocations()) {}
  [[nodiscard]] std::uint64_t count() const noexcept {
    return thread_allocations().count - start_.count;
  }
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return thread_allocations().bytes - start_.bytes;
  }

 private:
  AllocStats start_;
};

}  // namespace kevlar::testing
