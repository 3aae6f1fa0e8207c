// kevlar — internal: the implementation of kevlar/unpaired_semaphore.hpp, which includes it at
// its end (include that header, not this one). The ledger's word operations, the storage and
// allocator of a waiter's delivery, the blocking waiter, the asynchronous waiter operation and the
// semaphore's slow paths. The transitions T1-T8 are those of docs/semaphore.md.
#pragma once

#include <kevlar/detail/spin_lock.hpp>
#include <kevlar/detail/trampoline.hpp>
#include <kevlar/detail/wait_queue.hpp>
#include <kevlar/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/allocator.hpp>
#include <boost/asio/execution/blocking.hpp>
#include <boost/asio/execution/executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/execution/relationship.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/require.hpp>
#include <boost/assert.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <boost/throw_exception.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace kevlar {

// ---- TokenLedger --------------------------------------------------------------------------------

inline bool TokenLedger::try_acquire() noexcept {
  return word_.update<bool>(std::memory_order_acquire, [](detail::LedgerBits w, auto& c) {
    if (w.count() == 0 || w.closed()) return c.keep(false);
    return c.write(w.minus_count(1), true);
  });
}

inline ReleaseStep TokenLedger::try_release(count_type n) noexcept {
  return word_.update<ReleaseStep>(std::memory_order_release, [n](detail::LedgerBits w, auto& c) {
    if (w.has_queued()) return c.keep(ReleaseStep::contended);
    if (w.count() > max_count - n) return c.keep(ReleaseStep::refused);
    return c.write(w.plus_count(n), ReleaseStep::done);
  });
}

inline Admission TokenLedger::admit_locked() noexcept {
  return word_.update<Admission>(std::memory_order_acq_rel, [](detail::LedgerBits w, auto& c) {
    if (w.closed()) return c.keep(Admission::closed);
    if (w.count() != 0) return c.write(w.minus_count(1), Admission::granted);
    return c.write(w.plus_one_queued(), Admission::queued);
  });
}

// While queued > 0 no lock-free member can change the word (try_acquire needs a token, which INV3
// rules out; try_release needs queued == 0): update_locked stores plainly then.
inline std::int64_t TokenLedger::release_locked(count_type n) noexcept {
  return word_.update_locked<std::int64_t>([n](detail::LedgerBits w, auto& c) {
    const count_type q = w.queued();
    const count_type k = q < n ? q : n;
    const count_type rest = n - k;
    if (w.count() > max_count - rest) return c.keep(-1);
    return c.write(w.minus_queued(k).plus_count(rest), k);
  });
}

inline void TokenLedger::cancel_locked() noexcept {
  word_.leave_queue_locked();
}

inline std::uint32_t TokenLedger::close_locked() noexcept {
  return word_.close_locked();
}

inline LedgerSnapshot TokenLedger::snapshot() const noexcept {
  const detail::LedgerBits w = word_.load();
  return {w.count(), w.queued(), w.closed()};
}

// ---- what a waiter's delivery needs -------------------------------------------------------------

namespace detail {

/// Bytes reserved in every waiter operation for the executor's wrapper around its delivery
/// (an io_context executor_op holding one pointer and one allocator is 40 bytes on LP64).
inline constexpr std::size_t delivery_reserve_size = 64;

/// Storage reserved inside a waiter operation at park time, so that handing the waiter its result
/// (T5, T6, T7) allocates nothing: the executor builds its queued wrapper here.
struct DeliveryReserve {
  alignas(std::max_align_t) unsigned char bytes[delivery_reserve_size];
  bool in_use = false;
};

/// An allocator that serves one allocation from a DeliveryReserve and falls back to Asio's
/// recycling allocator when the request does not fit or the reserve is taken. Executors that honour
/// the `execution::allocator` property (io_context's, strands over it) use it for the wrapper they
/// queue; type-erased executors ignore the property and use their own recycling allocation.
template <class T>
class ReserveAllocator {
 public:
  using value_type = T;

  explicit ReserveAllocator(DeliveryReserve* reserve) noexcept : reserve_(reserve) {}
  template <class U>
  ReserveAllocator(
      const ReserveAllocator<U>& other) noexcept  // NOLINT(google-explicit-constructor)
      : reserve_(other.reserve_) {}

  T* allocate(std::size_t n) {
    if (!reserve_->in_use && n * sizeof(T) <= delivery_reserve_size &&
        alignof(T) <= alignof(std::max_align_t)) {
      reserve_->in_use = true;
      return reinterpret_cast<T*>(reserve_->bytes);
    }
    return boost::asio::recycling_allocator<T>().allocate(n);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (static_cast<void*>(p) == static_cast<void*>(reserve_->bytes)) {
      reserve_->in_use = false;
      return;
    }
    boost::asio::recycling_allocator<T>().deallocate(p, n);
  }

  template <class U>
  bool operator==(const ReserveAllocator<U>& other) const noexcept {
    return reserve_ == other.reserve_;
  }

 private:
  template <class>
  friend class ReserveAllocator;
  DeliveryReserve* reserve_;
};

/// The executor a waiter's delivery is submitted to: never blocking, as a continuation (defer),
/// with the wrapper built in `reserve`.
template <class Ex>
auto delivery_executor(const Ex& ex, DeliveryReserve* reserve) {
  namespace exec = boost::asio::execution;
  return boost::asio::prefer(boost::asio::require(ex, exec::blocking.never),
                             exec::relationship.continuation,
                             exec::allocator(ReserveAllocator<void>(reserve)));
}

/// The function a waiter queues on its executor: runs `waiter->deliver()`. Destroyed without
/// running (the executor shut down), it calls `waiter->abandon()`, which returns a granted permit
/// to the semaphore (T8).
template <class Waiter>
class WaiterDelivery {
 public:
  explicit WaiterDelivery(Waiter* waiter) noexcept : waiter_(waiter) {}
  WaiterDelivery(WaiterDelivery&& other) noexcept
      : waiter_(std::exchange(other.waiter_, nullptr)) {}
  WaiterDelivery(const WaiterDelivery&) = delete;
  WaiterDelivery& operator=(const WaiterDelivery&) = delete;
  WaiterDelivery& operator=(WaiterDelivery&&) = delete;
  ~WaiterDelivery() {
    if (waiter_ != nullptr) waiter_->abandon();
  }
  void operator()() { std::exchange(waiter_, nullptr)->deliver(); }

 private:
  Waiter* waiter_;
};

/// A waiter of the blocking acquire(): the node lives on the blocked thread's stack and the
/// completion wakes that thread (the only completion that runs on the completing thread: it runs
/// no user code).
class BlockingWaiter final : public WaitNode {
 public:
  BlockingWaiter() noexcept : WaitNode(&BlockingWaiter::on_complete) {}

  boost::system::error_code wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    return ec_;
  }

 private:
  static void on_complete(WaitNode* node, boost::system::error_code ec) noexcept {
    auto* self = static_cast<BlockingWaiter*>(node);
    // Notify under the lock: the waiter cannot return (and destroy this node) before we unlock.
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->ec_ = ec;
    self->done_ = true;
    self->cv_.notify_one();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  boost::system::error_code ec_;
  bool done_ = false;
};

/// A waiter of acquire_until(): like BlockingWaiter, and its completion also wakes the thread
/// sleeping on the clock (Clock::sleep_until) through a stop request, so that the wait ends at
/// the first of a completion, the deadline and the caller's stop.
class ClockBlockingWaiter final : public WaitNode {
 public:
  ClockBlockingWaiter() : WaitNode(&ClockBlockingWaiter::on_complete) {}

  /// The token the sleeping thread waits on: requested by the completion (and by the caller's
  /// stop, which the waiter links to it).
  [[nodiscard]] std::stop_token wake_token() const noexcept { return wake_.get_token(); }
  /// Forwards a stop request of the caller's to the sleeping thread.
  void wake() noexcept { wake_.request_stop(); }
  [[nodiscard]] bool done() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  /// Blocks until the completion has run and returns its result.
  boost::system::error_code wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    return ec_;
  }

 private:
  static void on_complete(WaitNode* node, boost::system::error_code ec) noexcept {
    auto* self = static_cast<ClockBlockingWaiter*>(node);
    // A copy of the stop state first: once done_ is set the waiting thread may return and destroy
    // this node, but the copy keeps the state the sleeper waits on alive for the request below.
    std::stop_source wake = self->wake_;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->ec_ = ec;
      self->done_ = true;
      self->cv_.notify_one();
    }
    wake.request_stop();
  }

  std::stop_source wake_;  // const members only, shared with the waking threads
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  boost::system::error_code ec_;
  bool done_ = false;
};

/// The caller's stop callback of acquire_until(): wakes the sleeping thread.
struct StopForwarder {
  ClockBlockingWaiter* waiter;
  void operator()() const noexcept { waiter->wake(); }
};

}  // namespace detail

// ---- BasicUnpairedSemaphore ---------------------------------------------------------------------

template <Ledger L>
struct BasicUnpairedSemaphore<L>::Initiation {
  using executor_type = BasicUnpairedSemaphore::executor_type;
  BasicUnpairedSemaphore* self;
  std::int32_t priority;
  [[nodiscard]] executor_type get_executor() const noexcept { return self->default_ex_; }
  template <class Handler>
  void operator()(Handler&& handler) const {
    self->start_acquire(std::forward<Handler>(handler), priority);
  }
};

template <Ledger L>
bool BasicUnpairedSemaphore<L>::release(count_type n) noexcept {
  if (n == 0) return true;
  switch (ledger_.try_release(n)) {
    case ReleaseStep::done:
      return true;
    case ReleaseStep::refused:
      return false;
    case ReleaseStep::contended:
      break;
  }
  detail::WaitQueue granted;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    const std::int64_t k = ledger_.release_locked(n);
    if (k < 0) return false;
    take_first_locked(k, granted);
  }
  detail::complete_all(granted, {});
  return true;
}

template <Ledger L>
template <class Change>
requires std::is_nothrow_invocable_r_v<std::int64_t, Change&, L&>
bool BasicUnpairedSemaphore<L>::adjust(Change change) noexcept {
  detail::WaitQueue granted;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    const std::int64_t k = change(ledger_);
    if (k < 0) return false;
    take_first_locked(k, granted);
  }
  detail::complete_all(granted, {});
  return true;
}

template <Ledger L>
KEVLAR_DETAIL_ALWAYS_INLINE inline void BasicUnpairedSemaphore<L>::take_first_locked(
    std::int64_t k, detail::WaitQueue& granted) noexcept {
  for (std::int64_t i = 0; i < k; ++i) {
    detail::WaitNode* w = queue_.pop_front();
    // The ledger counted k waiters, so w is never null; saying so keeps g++ from warning about
    // a store through the null pointer pop_front() returns for an empty queue.
    BOOST_ASSERT(w != nullptr);
    if (w == nullptr) break;
    w->set_state(detail::WaitState::granted);
    granted.push_back(w);
  }
  if (k > 0) note_tail_locked();
}

template <Ledger L>
inline void BasicUnpairedSemaphore<L>::note_tail_locked() noexcept {
  const detail::WaitNode* tail = queue_.back();
  lowest_queued_.store(tail != nullptr ? tail->priority() : no_waiter_priority,
                       std::memory_order_relaxed);
}

template <Ledger L>
detail::WaitNode* BasicUnpairedSemaphore<L>::evict_tail_locked(std::int32_t priority) noexcept {
  detail::WaitNode* tail = queue_.back();
  if (tail == nullptr || tail->priority() >= priority) return nullptr;
  queue_.unlink(tail);
  tail->set_state(detail::WaitState::aborted);
  return tail;
}

template <Ledger L>
bool BasicUnpairedSemaphore<L>::evict_below(std::int32_t priority,
                                            boost::system::error_code ec) noexcept {
  BOOST_ASSERT(ec);  // a waiter completed without an error owns a permit
  detail::WaitNode* victim = nullptr;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    victim = evict_tail_locked(priority);
    if (victim == nullptr) return false;
    ledger_.cancel_locked();
    note_tail_locked();
  }
  victim->complete(ec);
  return true;
}

template <Ledger L>
void BasicUnpairedSemaphore<L>::acquire(std::stop_token stop) {
  const boost::system::error_code ec = acquire_or_error(std::move(stop));
  if (ec) boost::throw_exception(boost::system::system_error(ec, "kevlar::UnpairedSemaphore"));
}

template <Ledger L>
boost::system::error_code BasicUnpairedSemaphore<L>::acquire_or_error(std::stop_token stop,
                                                                      std::int32_t priority) {
  if (stop.stop_requested()) return boost::asio::error::operation_aborted;
  if (ledger_.try_acquire()) return {};
  detail::BlockingWaiter waiter;
  waiter.set_priority(priority);
  const detail::Parked parked = park(&waiter, []() noexcept {});
  if (!parked.queued) return parked.ec;  // granted, closed or rejected under the lock
  if (!stop.stop_possible()) return waiter.wait();
  // Declared after the waiter: its destructor waits for a callback running on another thread,
  // so the waiter outlives every use the callback makes of it.
  std::stop_callback on_stop(stop, [this, &waiter]() noexcept { cancel_wait(&waiter); });
  return waiter.wait();
}

template <Ledger L>
boost::system::error_code BasicUnpairedSemaphore<L>::acquire_until(const Clock& clock,
                                                                   Clock::time_point deadline,
                                                                   std::stop_token stop,
                                                                   std::int32_t priority) {
  if (stop.stop_requested()) return boost::asio::error::operation_aborted;
  if (ledger_.try_acquire()) return {};
  if (clock.now() >= deadline) {  // too late to queue
    return make_error_code(ledger_.snapshot().closed ? errc::closed : errc::timeout);
  }
  detail::ClockBlockingWaiter waiter;  // allocates its stop state: before the ledger changes
  waiter.set_priority(priority);
  const detail::Parked parked = park(&waiter, []() noexcept {});
  if (!parked.queued) return parked.ec;  // granted, closed or rejected under the lock
  // Declared after the waiter: its destructor waits for a callback running on another thread.
  std::optional<std::stop_callback<detail::StopForwarder>> on_stop;
  if (stop.stop_possible()) on_stop.emplace(stop, detail::StopForwarder{&waiter});
  const std::stop_token wake = waiter.wake_token();
  while (!waiter.done()) {
    const bool reached = clock.sleep_until(deadline, wake);
    if (waiter.done()) break;
    if (!reached && !stop.stop_requested()) continue;  // woken by nothing it waits for
    // The deadline passed, or the caller stopped: leave the queue unless a grant (or close)
    // took the waiter out first, in which case its completion is running or has run.
    cancel_wait(&waiter);
    const boost::system::error_code ec = waiter.wait();
    if (ec == boost::asio::error::operation_aborted && !stop.stop_requested()) {
      return make_error_code(errc::timeout);
    }
    return ec;
  }
  return waiter.wait();
}

template <Ledger L>
void BasicUnpairedSemaphore<L>::close() noexcept {
  detail::WaitQueue aborted;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    ledger_.close_locked();
    aborted.splice_back(queue_);
    for (detail::WaitNode* n = aborted.front(); n != nullptr; n = detail::WaitQueue::next(n)) {
      n->set_state(detail::WaitState::aborted);
    }
    note_tail_locked();
  }
  detail::complete_all(aborted, make_error_code(errc::closed));
}

// Leaves the node alone unless it is still queued; never touches the semaphore once the node
// reached a final state (the semaphore may be gone).
template <Ledger L>
void BasicUnpairedSemaphore<L>::cancel_wait(detail::WaitNode* node) noexcept {
  using detail::WaitState;
  const WaitState s = node->state();
  if (s != WaitState::idle && s != WaitState::linked) return;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    switch (node->state()) {
      case WaitState::idle:
        node->set_state(WaitState::cancel_pending);
        return;
      case WaitState::linked:
        queue_.unlink(node);
        ledger_.cancel_locked();
        node->set_state(WaitState::cancelled);
        note_tail_locked();
        break;
      default:
        return;
    }
  }
  node->complete(boost::asio::error::operation_aborted);
}

/// One queued async_acquire: the queue node, the handler, a work-tracked executor and the storage
/// the delivery wrapper needs, in one block from the handler's associated allocator.
template <Ledger L>
template <class Handler>
class BasicUnpairedSemaphore<L>::AcquireOp final : public detail::WaitNode,
                                                   public detail::TrampolineJob {
  using AssocEx = boost::asio::associated_executor_t<Handler, executor_type>;
  using Slot = boost::asio::associated_cancellation_slot_t<Handler>;

  template <class Ex>
  using DeliveryExOf = decltype(detail::delivery_executor(std::declval<const Ex&>(), nullptr));
  // Outstanding work, counted only while the operation waits (a ready grant is counted by the
  // executor's own queue). Made from the final executor: every copy of a tracked executor counts
  // work again, an atomic increment and decrement per temporary.
  template <class Ex>
  using WorkExOf = std::decay_t<decltype(boost::asio::prefer(
      std::declval<const DeliveryExOf<Ex>&>(), boost::asio::execution::outstanding_work.tracked))>;

  // A type-erased any_io_executor ignores the allocator property: a delivery through it would
  // allocate twice (its function wrapper and the io_context's operation). When it wraps an
  // io_context executor (coroutines, kevlar's own executions), deliveries go to that executor
  // directly instead, with the wrapper in the reserve.
  static constexpr bool erased = std::is_same_v<AssocEx, boost::asio::any_io_executor>;
  using IoEx = boost::asio::io_context::executor_type;
  // kevlar's own queue waits (the engine resumes the execution) may be delivered by the engine's
  // trampoline on the releasing thread; a user's handler is always delivered through its executor.
  static constexpr bool inline_grant = requires { requires Handler::kevlar_inline_grant; };

  /// Where deliveries of this op go: the delivery executor made from `Ex` and, while the op is
  /// linked, the work it counts there.
  template <class Ex>
  struct Target {
    std::optional<DeliveryExOf<Ex>> ex;
    std::optional<WorkExOf<Ex>> work;
    void track() {
      work.emplace(boost::asio::prefer(*ex, boost::asio::execution::outstanding_work.tracked));
    }
  };
  struct NoTarget {};

  using HandlerAlloc = boost::asio::associated_allocator_t<Handler>;
  using BaseAlloc = std::conditional_t<std::is_same_v<HandlerAlloc, std::allocator<void>>,
                                       boost::asio::recycling_allocator<void>, HandlerAlloc>;

 public:
  using allocator_type =
      typename std::allocator_traits<BaseAlloc>::template rebind_alloc<AcquireOp>;

  static allocator_type allocator_for(const Handler& h) noexcept {
    if constexpr (std::is_same_v<HandlerAlloc, std::allocator<void>>) {
      return allocator_type();
    } else {
      return allocator_type(boost::asio::get_associated_allocator(h));
    }
  }

  /// Allocates and constructs; on failure nothing is left behind and the exception propagates.
  static AcquireOp* create(BasicUnpairedSemaphore* sem, Handler&& handler) {
    AssocEx ex = boost::asio::get_associated_executor(handler, sem->default_ex_);
    allocator_type alloc = allocator_for(handler);
    AcquireOp* raw = std::allocator_traits<allocator_type>::allocate(alloc, 1);
    try {
      return ::new (static_cast<void*>(raw)) AcquireOp(sem, std::move(handler), ex);
    } catch (...) {
      std::allocator_traits<allocator_type>::deallocate(alloc, raw, 1);
      throw;
    }
  }

  /// Installs the cancellation handler (may throw std::bad_alloc; nothing is installed then).
  void install(Slot slot) {
    slot.template emplace<CancelHandler>(this);
    slot_ = slot;
  }

  /// Counts outstanding work on the waiter's executor, so that its io_context::run() does not
  /// return while the operation waits. May throw (copying a type-erased executor may allocate).
  void track_work() {
    if constexpr (erased) {
      if (io_.ex) {
        io_.track();
        return;
      }
    }
    assoc_.track();
  }

  /// Hands the result to the executor; the op belongs to the queued delivery from here on. A
  /// queue wait of kevlar's engine whose io_context runs on this thread, inside an engine entry
  /// point, goes to the engine's trampoline instead: it runs when that entry point has finished.
  void schedule(boost::system::error_code ec) noexcept {
    ec_ = ec;
    if constexpr (erased) {
      if (io_.ex) {
        if constexpr (inline_grant) {
          if (detail::trampoline_accepts(&io_.ex->context()) && io_.ex->running_in_this_thread()) {
            this->detail::TrampolineJob::run = &AcquireOp::run_inline;
            this->detail::TrampolineJob::runnable = &AcquireOp::still_running_here;
            this->detail::TrampolineJob::reschedule = &AcquireOp::reschedule_job;
            detail::trampoline_push(this);
            return;
          }
        }
        io_.ex->execute(Delivery{this});
        return;
      }
    }
    assoc_.ex->execute(Delivery{this});
  }

  /// Frees an op that was never scheduled (initiation failed after allocation).
  void discard() noexcept {
    if (slot_.is_connected()) slot_.clear();
    allocator_type alloc = allocator_for(handler_);
    this->~AcquireOp();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
  }

  void clear_slot() noexcept {
    if (slot_.is_connected()) {
      slot_.clear();
      slot_ = {};
    }
  }

 private:
  AcquireOp(BasicUnpairedSemaphore* sem, Handler&& handler, const AssocEx& ex)
      : detail::WaitNode(&AcquireOp::on_complete), sem_(sem), handler_(std::move(handler)) {
    if constexpr (erased) {
      if (const IoEx* io = ex.template target<IoEx>()) {
        io_.ex.emplace(detail::delivery_executor(*io, &reserve_));
        return;
      }
    }
    assoc_.ex.emplace(detail::delivery_executor(ex, &reserve_));
  }

  static void on_complete(detail::WaitNode* node, boost::system::error_code ec) noexcept {
    static_cast<AcquireOp*>(node)->schedule(ec);
  }

  // The trampoline's view of a queued delivery. Only an erased waiter with an io_context target
  // is ever pushed (schedule()), so these are instantiated for such ops alone.
  static void run_inline(detail::TrampolineJob* job) { static_cast<AcquireOp*>(job)->deliver(); }
  static bool still_running_here(const detail::TrampolineJob* job) noexcept {
    // Like asio::dispatch: running on this thread is enough. A stop() made by the releasing
    // completion's own handler does not hold the grant back: the granted call goes on right
    // there (what it posts waits for the next run()). Asking io_context::stopped() would take
    // the scheduler's lock for every grant.
    return static_cast<const AcquireOp*>(job)->io_.ex->running_in_this_thread();
  }
  static void reschedule_job(detail::TrampolineJob* job) noexcept {
    auto* op = static_cast<AcquireOp*>(job);
    op->io_.ex->execute(Delivery{op});
  }

  struct CancelHandler {
    explicit CancelHandler(AcquireOp* o) noexcept : op(o) {}  // emplace() needs a constructor
    AcquireOp* op;
    void operator()(boost::asio::cancellation_type_t type) const noexcept {
      using ct = boost::asio::cancellation_type;
      if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
      op->sem_->cancel_wait(op);
    }
  };

  using Delivery = detail::WaiterDelivery<AcquireOp>;
  friend Delivery;

  /// On the waiter's executor: clear the slot, free the block with its work count (so the
  /// handler's next operation can reuse it), then invoke the handler.
  void deliver() {
    clear_slot();
    Handler handler(std::move(handler_));
    const boost::system::error_code ec = ec_;
    // The work count goes with the block: the delivery now running is itself counted by the
    // scheduler until the handler returns, so run() cannot see the context out of work here.
    allocator_type alloc = allocator_for(handler);
    this->~AcquireOp();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
    std::move(handler)(ec);
  }

  /// T8: the delivery was destroyed undelivered (its executor shut down). A grant is returned
  /// (or passed on) through release(); the handler is destroyed without being invoked. The slot
  /// is left alone, as Asio's own operations do on shutdown: its signal may already be gone, and
  /// emitting it after the operation ended is outside the slot's contract.
  void abandon() noexcept {
    BasicUnpairedSemaphore* sem = sem_;
    const bool owned_permit = !ec_;
    Handler handler(std::move(handler_));
    allocator_type alloc = allocator_for(handler);
    this->~AcquireOp();
    std::allocator_traits<allocator_type>::deallocate(alloc, this, 1);
    // Return the permit before the handler goes: destroying it may release the last reference to
    // whatever owns this semaphore (a limiter inside a shield that only the execution kept alive).
    if (owned_permit) (void)sem->release(1);
  }

  BasicUnpairedSemaphore* sem_;
  Handler handler_;
  detail::DeliveryReserve reserve_;
  Target<AssocEx> assoc_;  ///< deliveries through the associated executor, unless ...
  /// ... it is an any_io_executor wrapping an io_context executor: then through that one.
  [[no_unique_address]] std::conditional_t<erased, Target<IoEx>, NoTarget> io_;
  Slot slot_{};
  boost::system::error_code ec_;
};

template <Ledger L>
template <class Handler>
void BasicUnpairedSemaphore<L>::start_acquire(Handler&& handler, std::int32_t priority) {
  using Op = AcquireOp<std::decay_t<Handler>>;
  auto slot = boost::asio::get_associated_cancellation_slot(handler);

  // Every allocation happens before the ledger or the queue change (std::bad_alloc leaves them
  // untouched).
  Op* op = Op::create(this, std::move(handler));
  op->set_priority(priority);
  if (ledger_.try_acquire()) {  // T1
    op->set_state(detail::WaitState::granted);
    op->schedule({});
    return;
  }
  try {
    if (slot.is_connected()) op->install(slot);
    op->track_work();
  } catch (...) {
    op->discard();
    throw;
  }

  const detail::Parked parked = park(op, [] {});  // its work is counted already
  if (parked.queued) return;                      // T3: visible to releasers; never touch op again
  op->clear_slot();
  op->schedule(parked.ec);
}

template <Ledger L>
template <class OnLink>
detail::Parked BasicUnpairedSemaphore<L>::park(detail::WaitNode* node, OnLink&& on_link) noexcept {
  using detail::WaitState;
  detail::WaitNode* victim = nullptr;
  {
    std::lock_guard<detail::SpinLock> lock(lock_);
    if (node->state() == WaitState::cancel_pending) {
      node->set_state(WaitState::cancelled);
      return {false, boost::asio::error::operation_aborted};
    }
    switch (ledger_.admit_locked()) {
      case Admission::queued:  // T3: visible to releasers from here
        on_link();
        link_locked(node);
        return {true, {}};
      case Admission::granted:  // T3'
        node->set_state(WaitState::granted);
        return {false, {}};
      case Admission::closed:
        node->set_state(WaitState::aborted);
        return {false, make_error_code(errc::closed)};
      case Admission::rejected:
        break;
    }
    // T2 with priorities: the newest waiter of the lowest priority, if lower than this one's,
    // gives its place up. The ledger's count of queued waiters is unchanged: one leaves as the
    // other joins, in one critical section.
    victim = evict_tail_locked(node->priority());
    if (victim == nullptr) {
      node->set_state(WaitState::aborted);
      return {false, L::rejection()};
    }
    on_link();
    link_locked(node);
  }
  victim->complete(L::rejection());
  return {true, {}};
}

template <Ledger L>
inline void BasicUnpairedSemaphore<L>::link_locked(detail::WaitNode* node) noexcept {
  detail::link_by_priority(queue_, node);
  node->set_state(detail::WaitState::linked);
  note_tail_locked();
}

namespace detail {

/// kevlar's own waiters that own their queue node (an execution waiting through Step::queue,
/// detail/embedded_queue_wait.hpp): park and cancel without an asynchronous operation.
struct SemaphoreAccess {
  template <Ledger L, class OnLink>
  static Parked park(BasicUnpairedSemaphore<L>& sem, WaitNode& node, OnLink&& on_link) noexcept {
    return sem.park(&node, std::forward<OnLink>(on_link));
  }
  template <Ledger L>
  static void cancel(BasicUnpairedSemaphore<L>& sem, WaitNode& node) noexcept {
    sem.cancel_wait(&node);
  }
};

}  // namespace detail

}  // namespace kevlar
