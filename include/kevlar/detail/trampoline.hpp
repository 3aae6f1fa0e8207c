// kevlar — internal: grants of kevlar's own queue waits run on the releasing thread.
#pragma once

#include <kevlar/detail/intrusive_list.hpp>

#include <boost/assert.hpp>

#include <cstddef>

namespace kevlar::detail {

/// A queue wait's delivery that the engine may run itself on this thread, instead of a hop
/// through the waiter's executor. Only kevlar's own waiters opt in (the two waits the engine starts
/// for a Step::queue: EmbeddedQueueWait, and an async_acquire with a QueueWaitHandler), and only
/// when the waiter's executor is a plain executor of the io_context the open level belongs to,
/// running on this thread.
struct TrampolineJob : IntrusiveListHook<TrampolineJob> {
  /// Delivers now, on this thread (frees the job; may throw what the handler throws).
  void (*run)(TrampolineJob*) = nullptr;
  /// Whether the waiter's io_context still runs on this thread (as asio::dispatch asks).
  bool (*runnable)(const TrampolineJob*) noexcept = nullptr;
  /// Delivers through the waiter's executor instead, as if the trampoline did not exist.
  void (*reschedule)(TrampolineJob*) noexcept = nullptr;
};

class TrampolineLevel;

/// The calling thread's trampoline. An engine entry point (an operation's or a wait's completion)
/// that runs on a plain io_context executor opens a level for that context: grants for waiters of
/// the same context, made while it runs, queue at the level, and the entry point runs them itself
/// just before it returns, instead of sending each through the scheduler. A nested event loop's
/// entry points open levels of their own, so a grant never waits for a frame below the loop that
/// needs it. Each level lives on its entry point's stack; the thread keeps one pointer to the
/// innermost, so opening and closing one costs two stores.
struct Trampoline {
  TrampolineLevel* level = nullptr;  ///< the innermost open level (nullptr: none)
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

/// One engine entry point's level. Construct it first thing and call drain() when the entry
/// point's work is done; if that work throws, the destructor sends the level's deliveries through
/// their executors.
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
    opener_ = opener;
    resolve_ = resolve;
    outer_ = t.level;
    t.level = this;
    owns_ = true;
  }
  TrampolineLevel(const TrampolineLevel&) = delete;
  TrampolineLevel& operator=(const TrampolineLevel&) = delete;
  /// A level not drained (its entry point's work, or a delivery, threw) must not stay linked from
  /// the thread: its deliveries go through their executors.
  ~TrampolineLevel() {
    if (owns_) flush();
  }

  /// Runs this level's deliveries (up to trampoline_limit; the rest through their executors) and
  /// closes it. If a delivery throws, the exception propagates and the destructor sends the rest
  /// through their executors.
  void drain();

  /// Whether a delivery for a waiter on `context` may queue here. The level's own context is
  /// asked of the execution that opened it only now, the first time: most completions release
  /// nothing, and asking costs a virtual call and, for a type-erased executor, a copy of it.
  [[nodiscard]] bool accepts(const void* context) noexcept {
    if (!resolved_) {
      context_ = opener_ != nullptr ? resolve_(opener_) : nullptr;
      opener_ = nullptr;
      resolved_ = true;
    }
    return context_ != nullptr && context_ == context;
  }
  /// The execution `opener` ends: if it opened this level and never resolved it, the level can no
  /// longer ask it, and accepts nothing from here on.
  void forget(const void* opener) noexcept {
    if (opener_ == opener) {
      opener_ = nullptr;
      context_ = nullptr;
      resolved_ = true;
    }
  }
  /// Queues `job` (accepts() said yes).
  void push(TrampolineJob* job) noexcept { jobs_.push_back(job); }

 private:
  /// Sends this level's deliveries through their executors and closes it.
  void flush() noexcept;
  void close() noexcept {
    BOOST_ASSERT(tl_trampoline.level == this);  // levels close innermost first
    tl_trampoline.level = outer_;
    owns_ = false;
  }

  /// The deliveries queued here, oldest first.
  IntrusiveList<TrampolineJob> jobs_;
  /// The io_context this level accepts, once resolved (nullptr: it accepts nothing).
  const void* context_ = nullptr;
  /// The execution that opened the level, until its context is resolved or it ends.
  const void* opener_ = nullptr;
  const void* (*resolve_)(const void* opener) noexcept = nullptr;
  TrampolineLevel* outer_ = nullptr;
  bool resolved_ = false;
  bool owns_ = false;
};

/// Whether a delivery for a waiter on `context` may queue at this thread's innermost open level.
[[nodiscard]] inline bool trampoline_accepts(const void* context) noexcept {
  TrampolineLevel* level = tl_trampoline.level;
  return level != nullptr && level->accepts(context);
}

/// The execution `opener` ends: the innermost level, if it opened it, stops asking it.
inline void trampoline_forget(const void* opener) noexcept {
  if (TrampolineLevel* level = tl_trampoline.level) level->forget(opener);
}

/// Queues `job` at the innermost open level (trampoline_accepts() said yes).
inline void trampoline_push(TrampolineJob* job) noexcept {
  tl_trampoline.level->push(job);
}

/// Marks a cancellation emitted into user code (see Trampoline::suppressed).
class TrampolineSuppressed {
 public:
  TrampolineSuppressed() noexcept { ++tl_trampoline.suppressed; }
  ~TrampolineSuppressed() { --tl_trampoline.suppressed; }
  TrampolineSuppressed(const TrampolineSuppressed&) = delete;
  TrampolineSuppressed& operator=(const TrampolineSuppressed&) = delete;
};

}  // namespace kevlar::detail
