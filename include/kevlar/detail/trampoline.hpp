// kevlar — internal: grants of kevlar's own queue waits run on the releasing thread.
#pragma once

#include <cstddef>

namespace kevlar::detail {

/// A queue wait's delivery that the engine may run itself on this thread, instead of a hop
/// through the waiter's executor. Only kevlar's own waiters opt in (QueueWaitHandler), and only
/// when the waiter's executor is an io_context executor running on this thread.
struct TrampolineJob {
  TrampolineJob* next = nullptr;
  /// Delivers now, on this thread (frees the job; may throw what the handler throws).
  void (*run)(TrampolineJob*) = nullptr;
  /// Whether the waiter's executor still runs on this thread (a nested run of another context may
  /// have ended in between).
  bool (*runnable)(const TrampolineJob*) noexcept = nullptr;
  /// Delivers through the waiter's executor instead, as if the trampoline did not exist.
  void (*reschedule)(TrampolineJob*) noexcept = nullptr;
};

/// The calling thread's pending deliveries. `open` while an engine entry point (an operation's or
/// a wait's completion) is on this thread's stack: it drains the list before it returns, after
/// the execution it ran has finished its step, so a grant runs where a deferred delivery would
/// have run next, without the scheduler's queue, its lock and its bookkeeping.
struct Trampoline {
  TrampolineJob* head = nullptr;
  TrampolineJob* tail = nullptr;
  bool open = false;
};

inline constinit thread_local Trampoline tl_trampoline{};

/// Deliveries one drain runs itself; later ones go through their executors (other handlers get
/// their turn, as with deferred deliveries).
inline constexpr std::size_t trampoline_limit = 8;

/// Queues `job` (the trampoline is open and its executor runs on this thread).
inline void trampoline_push(TrampolineJob* job) noexcept {
  Trampoline& t = tl_trampoline;
  job->next = nullptr;
  (t.tail != nullptr ? t.tail->next : t.head) = job;
  t.tail = job;
}

/// Opens the trampoline if no entry point on this thread has; returns whether this call did (and
/// must then drain or flush it).
[[nodiscard]] inline bool trampoline_open() noexcept {
  Trampoline& t = tl_trampoline;
  if (t.open) return false;
  t.open = true;
  return true;
}

/// Runs the pending deliveries (up to trampoline_limit; the rest through their executors) and
/// closes the trampoline. If a delivery throws, the others go through their executors and the
/// exception propagates.
void trampoline_drain();

/// Sends every pending delivery through its executor and closes the trampoline (an entry point is
/// leaving with an exception).
void trampoline_flush() noexcept;

}  // namespace kevlar::detail
