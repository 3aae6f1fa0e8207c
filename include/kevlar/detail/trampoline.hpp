// kevlar — internal: grants of kevlar's own queue waits run on the releasing thread.
#pragma once

#include <cstddef>

namespace kevlar::detail {

/// A queue wait's delivery that the engine may run itself on this thread, instead of a hop
/// through the waiter's executor. Only kevlar's own waiters opt in (QueueWaitHandler), and only
/// when the waiter's executor is a plain executor of the io_context the open level belongs to,
/// running on this thread.
struct TrampolineJob {
  TrampolineJob* next = nullptr;
  /// Delivers now, on this thread (frees the job; may throw what the handler throws).
  void (*run)(TrampolineJob*) = nullptr;
  /// Whether the waiter's io_context still runs on this thread (as asio::dispatch asks).
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
  /// The io_context of the innermost open level, once resolved (nullptr: it accepts nothing).
  const void* context = nullptr;
  /// The execution that opened the innermost level, until its context is resolved or it ends.
  const void* opener = nullptr;
  /// Asks `opener` for its io_context (or nullptr), the first time a grant is offered.
  const void* (*resolve)(const void* opener) noexcept = nullptr;
  bool open = false;      ///< a level is open on this thread
  bool resolved = false;  ///< `context` holds the innermost level's answer
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

/// Whether a delivery for a waiter on `context` may queue at this thread's open level. The level's
/// own context is asked of the execution that opened it only now, the first time: most
/// completions release nothing, and asking costs a virtual call and, for a type-erased executor,
/// a copy of it.
[[nodiscard]] inline bool trampoline_accepts(const void* context) noexcept {
  Trampoline& t = tl_trampoline;
  if (!t.open) return false;
  if (!t.resolved) {
    t.context = t.opener != nullptr ? t.resolve(t.opener) : nullptr;
    t.opener = nullptr;
    t.resolved = true;
  }
  return t.context != nullptr && t.context == context;
}

/// The execution `opener` ends: a level it opened and never resolved can no longer ask it, and
/// accepts nothing from here on (grants made later go through their executors).
inline void trampoline_forget(const void* opener) noexcept {
  Trampoline& t = tl_trampoline;
  if (t.opener == opener) {
    t.opener = nullptr;
    t.context = nullptr;
    t.resolved = true;
  }
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
  /// `opener`: the execution whose completion this is; `resolve(opener)` names the io_context
  /// whose plain executor it runs on, or nullptr (a strand, another executor: the level then
  /// accepts nothing). `initiating`: the entry point was reached inside an initiating function (an
  /// operation that completed at once), where no other execution may run: no level.
  TrampolineLevel(const void* opener, const void* (*resolve)(const void*) noexcept,
                  bool initiating) noexcept {
    Trampoline& t = tl_trampoline;
    if (t.from_drain) {
      t.from_drain = false;
      return;
    }
    if (initiating || t.suppressed != 0) return;
    saved_ = Saved{t.head, t.tail, t.context, t.opener, t.resolve, t.open, t.resolved};
    t.head = t.tail = nullptr;
    t.context = nullptr;
    t.opener = opener;
    t.resolve = resolve;
    t.open = true;
    t.resolved = false;
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
  struct Saved {
    TrampolineJob* head;
    TrampolineJob* tail;
    const void* context;
    const void* opener;
    const void* (*resolve)(const void*) noexcept;
    bool open;
    bool resolved;
  };
  bool owns_ = false;
  Saved saved_{};
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
