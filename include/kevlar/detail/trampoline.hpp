// kevlar — internal: grants of kevlar's own queue waits run on the releasing thread.
#pragma once

#include <cstddef>

namespace kevlar::detail {

/// A queue wait's delivery that the engine may run itself on this thread, instead of a hop
/// through the waiter's executor. Only kevlar's own waiters opt in (QueueWaitHandler), and only
/// when the waiter's executor is a plain executor of the io_context the open level belongs to,
/// running (not stopped) on this thread.
struct TrampolineJob {
  TrampolineJob* next = nullptr;
  /// Delivers now, on this thread (frees the job; may throw what the handler throws).
  void (*run)(TrampolineJob*) = nullptr;
  /// Whether the waiter's io_context still runs on this thread and has not been stopped.
  bool (*runnable)(const TrampolineJob*) noexcept = nullptr;
  /// Delivers through the waiter's executor instead, as if the trampoline did not exist.
  void (*reschedule)(TrampolineJob*) noexcept = nullptr;
};

/// The calling thread's pending deliveries, per level. An engine entry point (an operation's or
/// a wait's completion) that runs on a plain io_context executor opens a level for that context:
/// grants for waiters of the same context, made while it runs, queue here, and the entry point
/// runs them itself just before it returns, instead of sending each through the scheduler. A
/// nested event loop's entry points open levels of their own, so a grant never waits for a frame
/// below the loop that needs it.
struct Trampoline {
  TrampolineJob* head = nullptr;
  TrampolineJob* tail = nullptr;
  /// The io_context of the innermost open level; nullptr while none is open.
  const void* context = nullptr;
  /// Set by a drain around each delivery it runs: the entry point that delivery reaches joins the
  /// drain's level instead of opening one (the drain stays flat).
  bool from_drain = false;
  /// Non-zero while kevlar emits a cancellation into user code: an operation completing inside
  /// its cancellation handler opens no level there (its drain would run inside the emit).
  unsigned suppressed = 0;
};

inline constinit thread_local Trampoline tl_trampoline{};

/// Deliveries one level runs itself; later ones go through their executors (other handlers get
/// their turn).
inline constexpr std::size_t trampoline_limit = 8;

/// Whether a delivery for a waiter on `context` may queue at this thread's open level.
[[nodiscard]] inline bool trampoline_accepts(const void* context) noexcept {
  return tl_trampoline.context != nullptr && tl_trampoline.context == context;
}

/// Queues `job` at the open level (trampoline_accepts() said yes).
inline void trampoline_push(TrampolineJob* job) noexcept {
  Trampoline& t = tl_trampoline;
  job->next = nullptr;
  (t.tail != nullptr ? t.tail->next : t.head) = job;
  t.tail = job;
}

/// One engine entry point's level. Construct it first thing; call drain() when the entry point's
/// work is done, or flush() if that work throws.
class TrampolineLevel {
 public:
  /// `context`: the io_context whose plain executor the entry point's execution runs on, or
  /// nullptr (a strand, another executor): no level of its own then. `initiating`: the entry point
  /// was reached inside an initiating function (an operation that completed at once), where no
  /// other execution may run.
  TrampolineLevel(const void* context, bool initiating) noexcept {
    Trampoline& t = tl_trampoline;
    if (t.from_drain) {
      t.from_drain = false;
      return;
    }
    if (context == nullptr || initiating || t.suppressed != 0) return;
    saved_head_ = t.head;
    saved_tail_ = t.tail;
    saved_context_ = t.context;
    t.head = t.tail = nullptr;
    t.context = context;
    owns_ = true;
  }
  TrampolineLevel(const TrampolineLevel&) = delete;
  TrampolineLevel& operator=(const TrampolineLevel&) = delete;
  ~TrampolineLevel() = default;

  /// Runs this level's deliveries (up to trampoline_limit; the rest through their executors) and
  /// closes it. If a delivery throws, the others go through their executors and it propagates.
  void drain();
  /// Sends this level's deliveries through their executors and closes it.
  void flush() noexcept;

 private:
  void close() noexcept;
  bool owns_ = false;
  TrampolineJob* saved_head_ = nullptr;
  TrampolineJob* saved_tail_ = nullptr;
  const void* saved_context_ = nullptr;
};

/// Marks a cancellation emitted into user code (see Trampoline::suppressed).
class TrampolineSuppressed {
 public:
  TrampolineSuppressed() noexcept { ++tl_trampoline.suppressed; }
  ~TrampolineSuppressed() { --tl_trampoline.suppressed; }
  TrampolineSuppressed(const TrampolineSuppressed&) = delete;
  TrampolineSuppressed& operator=(const TrampolineSuppressed&) = delete;
};

}  // namespace kevlar::detail
