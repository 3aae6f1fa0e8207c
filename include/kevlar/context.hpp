// kevlar — the per-execution context: properties, attempt number, cancellation.
#pragma once

#include <kevlar/clock.hpp>
#include <kevlar/detail/always_inline.hpp>

#include <any>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <typeindex>
#include <utility>
#include <vector>

namespace kevlar {

/// A typed key for Context properties. Identity is the pair (name, T): two keys with the same
/// name and type address the same property; the same name with another type does not collide.
/// Names are case-sensitive; the empty name is valid.
///
/// Thread-safety: immutable.
template <class T>
class Key {
 public:
  using value_type = T;
  explicit Key(std::string name) : name_(std::move(name)) {}
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
};

/// A typed property bag carried by a Context. Empty bags allocate nothing.
///
/// Thread-safety: not synchronised; it belongs to one execution, which runs one step at a time.
class Properties {
 public:
  Properties() noexcept = default;
  // Plain new (owned at once by entries_): std::make_unique cannot name the custom deleter.
  Properties(const Properties& other)
      : entries_(other.entries_ ? new std::vector<Entry>(*other.entries_) : nullptr) {}
  Properties& operator=(const Properties& other) {
    if (this != &other) Properties(other).swap(*this);
    return *this;
  }
  Properties(Properties&&) noexcept = default;
  Properties& operator=(Properties&&) noexcept = default;
  ~Properties() = default;

  /// Stores `value` under `key`, replacing any previous value.
  template <class T>
  void set(const Key<T>& key, T value) {
    if (Entry* e = find(key.name(), typeid(T))) {
      e->value = std::move(value);
      return;
    }
    if (!entries_) entries_.reset(new std::vector<Entry>());
    entries_->push_back(Entry{key.name(), std::type_index(typeid(T)), std::any(std::move(value))});
  }
  /// The value under `key`, or nullptr if none was set.
  template <class T>
  [[nodiscard]] const T* try_get(const Key<T>& key) const noexcept {
    const Entry* e = const_cast<Properties*>(this)->find(key.name(), typeid(T));
    return e != nullptr ? std::any_cast<T>(&e->value) : nullptr;
  }
  /// The value under `key`, or `fallback` if none was set.
  template <class T>
  [[nodiscard]] T get_or(const Key<T>& key, T fallback) const {
    const T* v = try_get(key);
    return v != nullptr ? *v : std::move(fallback);
  }
  /// True if a value is stored under `key`.
  template <class T>
  [[nodiscard]] bool contains(const Key<T>& key) const noexcept {
    return try_get(key) != nullptr;
  }
  /// Removes the value under `key`; returns true if there was one.
  template <class T>
  bool erase(const Key<T>& key) noexcept {
    if (!entries_) return false;
    for (auto it = entries_->begin(); it != entries_->end(); ++it) {
      if (it->type == typeid(T) && it->name == key.name()) {
        entries_->erase(it);
        return true;
      }
    }
    return false;
  }
  [[nodiscard]] std::size_t size() const noexcept { return entries_ ? entries_->size() : 0; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  void clear() noexcept {
    if (entries_) entries_->clear();
  }

 private:
  struct Entry {
    std::string name;
    std::type_index type;
    std::any value;
  };
  void swap(Properties& other) noexcept { entries_.swap(other.entries_); }
  Entry* find(std::string_view name, const std::type_info& type) noexcept {
    if (!entries_) return nullptr;
    for (Entry& e : *entries_) {
      if (e.type == type && e.name == name) return &e;
    }
    return nullptr;
  }
  /// Deletes the entries out of line, so that the destructor of every context (every
  /// execution's) stays one test of a null pointer that its caller inlines.
  struct DeleteEntries {
    [[gnu::noinline]] void operator()(std::vector<Entry>* entries) const noexcept {
      delete entries;
    }
  };
  // Allocated on the first set(): an execution that never uses properties (nearly all) builds
  // and destroys one null pointer instead of a vector.
  std::unique_ptr<std::vector<Entry>, DeleteEntries> entries_;
};

namespace detail {
class CallBase;
struct ContextAccess;
}

/// What a caller tells one execution before it starts (the overloads of execute, execute_outcome
/// and execute_async that take it first): values the strategies read from its Context.
struct CallOptions {
  /// The execution's priority in the queues of concurrency and rate limits (Context::priority()):
  /// higher first; 0 by default.
  std::int32_t priority = 0;
  /// The execution's end-to-end deadline, on the shield's clock (Shield::clock()):
  /// Clock::time_point::max() (the default) sets none. It is the context's deadline from the
  /// start (Context::deadline()), so every strategy inside respects it as it respects an outer
  /// timeout's: a retry starts no backoff that ends past it and returns its last real failure
  /// instead, a hedge launches nothing after it, a timeout inside is clamped to it, and the
  /// limiters' queues stop waiting at it. When it passes, the execution is cancelled as the
  /// caller's terminal cancellation would cancel it, and a cancellation it ends with is reported
  /// as `errc::timeout`; an execution whose deadline has already passed when it is started runs
  /// nothing and completes with `errc::timeout`. Asynchronous executions need a completion handler
  /// with an associated executor (the expiry is delivered there): without one the call completes
  /// with `errc::executor_required`. Synchronous executions are cooperative, as under a timeout:
  /// the waits end at the deadline and the user's function should poll Context::cancelled().
  Clock::time_point deadline = Clock::time_point::max();

  /// Options whose deadline is `budget` from now on `clock` (the shield's: Shield::clock()). A
  /// budget of zero or less gives a deadline that has passed; one past the clock's range, none.
  [[nodiscard]] static CallOptions within(Clock::duration budget, const Clock& clock) noexcept {
    CallOptions o;
    Clock::duration::rep at = 0;
    if (__builtin_add_overflow(clock.now().time_since_epoch().count(), budget.count(), &at)) {
      o.deadline =
          budget > Clock::duration::zero() ? Clock::time_point::max() : Clock::time_point::min();
    } else {
      o.deadline = Clock::time_point(Clock::duration(at));
    }
    return o;
  }
};

/// The context of one execution, shared by every strategy of the pipeline and passed to the user's
/// function (`fn(Context&)`). It lives until the execution completes; do not keep references to it
/// afterwards.
///
/// Thread-safety: belongs to one execution. cancelled() may be called from the thread running the
/// user's function while the execution is in progress.
class Context {
 public:
  explicit Context(const Clock& clock, bool synchronous, std::stop_token stop = {}) noexcept
      : clock_(&clock), stop_(std::move(stop)), synchronous_(synchronous) {}
  /// A context for an execution of a shield named `*shield_name` (nullptr: unnamed).
  Context(const Clock& clock, const std::string* shield_name, bool synchronous,
          std::stop_token stop = {}) noexcept
      : clock_(&clock), shield_name_(shield_name), stop_(std::move(stop)),
        synchronous_(synchronous) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  // Inlined into every execution's epilogue in optimised builds: two tests of a null pointer when
  // no stop token and no property was set (Properties keeps the rest out of line).
  KEVLAR_DETAIL_ALWAYS_INLINE ~Context() {}

  /// The attempt number: 1 while the user's function runs for the first time, 2 for the second
  /// (retries, hedges) and so on; 0 before the first attempt starts.
  [[nodiscard]] std::uint32_t attempt() const noexcept { return attempt_; }

  /// True for Shield::execute, false for Shield::execute_async.
  [[nodiscard]] bool synchronous() const noexcept { return synchronous_; }

  /// Cooperative cancellation for the user's function: true once the caller's stop token was
  /// requested, the caller's cancellation slot was emitted, or a strategy (a timeout) cancelled the
  /// running attempt. Synchronous functions should poll it; asynchronous operations are cancelled
  /// through their cancellation slot and need not.
  [[nodiscard]] bool cancelled() const noexcept {
    if (cancel_requested_ || stop_.stop_requested()) return true;
    return deadline_ != Clock::time_point::max() && clock_->now() >= deadline_;
  }

  /// Throws kevlar::Error(`asio::error::operation_aborted`) if cancelled() is true: the way a
  /// synchronous function gives up when a timeout expires or the caller stops it.
  void throw_if_cancelled() const {
    if (cancelled()) throw_cancelled();
  }

  /// The caller's stop token (synchronous executions; empty otherwise).
  [[nodiscard]] const std::stop_token& stop_token() const noexcept { return stop_; }

  /// The earliest deadline of the running attempt: the caller's (CallOptions::deadline) or one a
  /// strategy set (a timeout's), Clock::time_point::max() when none. Functions may use it to
  /// bound their own waits and pass the time left on.
  [[nodiscard]] Clock::time_point deadline() const noexcept { return deadline_; }

  /// The shield's clock.
  [[nodiscard]] const Clock& clock() const noexcept { return *clock_; }

  /// The execution's priority in the queues of concurrency and rate limits: a call of higher
  /// priority is granted before every queued call of lower priority, and may displace the newest
  /// of the lowest from a full queue; equal priorities keep their arrival order. 0 unless the
  /// caller set it (CallOptions::priority) or a strategy did (a limiter's priority_generator).
  /// Hedged attempts start with their parent's.
  [[nodiscard]] std::int32_t priority() const noexcept { return priority_; }
  /// Changes the priority for the strategies that queue this execution from now on (a hook, a
  /// priority generator, the user's function before an inner limiter sees it).
  void set_priority(std::int32_t priority) noexcept { priority_ = priority; }

  /// The name of the shield running this execution (Shield::with_name), or nullptr for an
  /// unnamed shield: what hooks and attempts use to tell shields apart in logs and metrics. It
  /// lives as long as the shield.
  [[nodiscard]] const std::string* shield_name() const noexcept { return shield_name_; }

  /// The typed property bag of this execution (the same bag across retries).
  [[nodiscard]] Properties& properties() noexcept { return properties_; }
  [[nodiscard]] const Properties& properties() const noexcept { return properties_; }

 private:
  friend class detail::CallBase;
  friend struct detail::ContextAccess;
  friend class Layer;
  [[noreturn]] static void throw_cancelled();

  const Clock* clock_;
  const std::string* shield_name_ = nullptr;
  std::stop_token stop_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::uint32_t attempt_ = 0;
  std::int32_t priority_ = 0;
  bool synchronous_;
  bool cancel_requested_ = false;
  Properties properties_;
};

namespace detail {
/// What the shield's entry points set on a context they create.
struct ContextAccess {
  /// The caller's options (CallOptions): its priority and its deadline.
  static void apply(Context& context, const CallOptions& options) noexcept {
    context.priority_ = options.priority;
    context.deadline_ = options.deadline;
  }
};
}  // namespace detail

}  // namespace kevlar
