// kevlar — internal: checks a strategy defers until the engine entry point that requested them
// returns (the timeout's deadline queue asks there whether it became idle).
#pragma once

#include <cstddef>

namespace kevlar::detail {

/// Checks a strategy defers until the engine entry point that requested them (a step's
/// completion, an abandonment) returns: by then the completion's handler has run, and so has any
/// call it started inline. The timeout's deadline queue asks there whether it became idle, so that
/// a loop whose next call starts from the previous one's completion pays nothing for it. Each entry
/// point runs the checks requested inside it (a nested event loop's completions run theirs before
/// that loop returns). An initiation opens no scope: a call that ends inside its own initiation (a
/// rejection) is rare, and its check runs at once.
class DeferredChecks {
 public:
  using Check = void (*)(void* arg) noexcept;

  /// Runs `check(arg)` when the innermost entry point running on this thread returns, once
  /// however often it is asked for; at once if none is running, or if too many are waiting. The
  /// entry point is one of an execution on `arg`'s own event loop, so `arg` outlives it (a loop is
  /// not destroyed from inside one of its handlers); forget() covers an object that ends earlier.
  static void request(Check check, void* arg) noexcept {
    if (depth_ == 0) {
      check(arg);
      return;
    }
    for (std::size_t i = 0; i < count_; ++i) {
      if (pending_[i].check == check && pending_[i].arg == arg) return;
    }
    if (count_ == capacity) {
      check(arg);
      return;
    }
    pending_[count_++] = Entry{check, arg};
  }
  /// Drops this thread's pending checks of `arg` (it is being destroyed).
  static void forget(const void* arg) noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      if (pending_[i].arg == arg) pending_[i].check = &skip;
    }
  }

  /// Marks an engine entry point for the lifetime of the object.
  class Scope {
   public:
    Scope() noexcept : start_(count_) { ++depth_; }
    ~Scope() {
      --depth_;
      if (count_ != start_) run_from(start_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::size_t start_;
  };

 private:
  struct Entry {
    Check check;
    void* arg;
  };
  static void skip(void*) noexcept {}
  static constexpr std::size_t capacity = 4;
  /// Runs the checks requested since `start` and forgets them.
  static void run_from(std::size_t start) noexcept {
    const std::size_t end = count_;
    count_ = start;
    for (std::size_t i = start; i < end; ++i) pending_[i].check(pending_[i].arg);
  }

  static inline thread_local std::size_t depth_ = 0;
  static inline thread_local std::size_t count_ = 0;
  static inline thread_local Entry pending_[capacity] = {};
};

}  // namespace kevlar::detail
