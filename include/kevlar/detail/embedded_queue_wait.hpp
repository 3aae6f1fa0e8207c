// kevlar — internal: how the engine performs Step::queue: a queue wait that lives in the waiting
// execution, and the handler of the general one.
#pragma once

#include <kevlar/detail/block_cache.hpp>
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/inline_slot.hpp>
#include <kevlar/detail/trampoline.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/unpaired_semaphore.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace kevlar::detail {

/// The io_context whose plain executor `call` runs on (its trampoline context), or nullptr (a
/// strand, a thread pool, another executor).
[[nodiscard]] inline boost::asio::io_context* plain_io_context(const CallBase& call) noexcept {
  return static_cast<boost::asio::io_context*>(const_cast<void*>(call.trampoline_context()));
}

/// An asynchronous execution waiting for a permit of `Semaphore` (a BasicUnpairedSemaphore), when
/// it runs on a plain io_context executor: the queue node, the delivery's storage and the work
/// count live in the execution (CallBase::queue_wait_storage), so parking allocates nothing and
/// builds no operation. What a general async_acquire (an AcquireOp) does with a handler, this does
/// with the execution itself: the grant resumes it through CallBase::wait_completed, by the
/// engine's grant trampoline when the releasing completion runs on the same io_context and thread,
/// otherwise through that io_context's executor; an io_context destroyed with the delivery queued
/// returns a granted permit and abandons the execution. The semaphore's rules are unchanged:
/// priority order, displacement, the cancellation race (through the execution's inline slot), close, never completing
/// inside release() or close().
///
/// kevlar::QueueSemaphore's step (<kevlar/queue_wait.hpp>) starts it.
///
/// Lifetime: start() constructs it in the execution and parks it, once the layer's callback has
/// returned Step::queue; once parked, the queue, then the delivery, own it (and the execution);
/// it destroys itself just before it resumes or abandons the execution. A decision the semaphore
/// makes at once destroys it in start(), and the engine hands the result to the layer's
/// on_wait_complete.
template <class Semaphore>
class EmbeddedQueueWait final : public WaitNode, public TrampolineJob {
  using IoEx = boost::asio::io_context::executor_type;
  using WorkEx = std::decay_t<decltype(boost::asio::prefer(
      std::declval<const IoEx&>(), boost::asio::execution::outstanding_work.tracked))>;

 public:
  EmbeddedQueueWait(const EmbeddedQueueWait&) = delete;
  EmbeddedQueueWait& operator=(const EmbeddedQueueWait&) = delete;

  /// Builds a wait of `call`, an asynchronous execution on `context`'s plain executor, for a
  /// permit of `sem` at `priority`, in `storage` (CallBase::queue_wait_storage), and parks it:
  /// true if it is queued (from then on the queue owns the execution), false with `decided` set if the
  /// semaphore decided at once (nothing is left behind). The engine calls it once the layer's
  /// callback has returned: a release on another thread may deliver (and end the execution) as
  /// soon as the node is linked, so the engine reads nothing of the execution after a successful
  /// park. The cancellation handler is in place before the node is visible; the work count is
  /// taken under the lock, only when the node is linked: a decision made at once must not give
  /// back a count that may be the io_context's last (that would stop a loop not yet running).
  static bool start(Semaphore& sem, CallBase& call, boost::asio::io_context& context,
                    void* storage, std::int32_t priority,
                    boost::system::error_code& decided) noexcept {
    static_assert(sizeof(EmbeddedQueueWait) <= queue_wait_size &&
                  alignof(EmbeddedQueueWait) <= alignof(std::max_align_t));
    auto* self = ::new (storage) EmbeddedQueueWait(sem, call, context);
    self->set_priority(priority);
    call.inline_slot().template emplace<CancelHandler>(self);
    const Parked parked = SemaphoreAccess::park(*self->sem_, *self, [self]() noexcept {
      self->work_.emplace(boost::asio::prefer(self->context_->get_executor(),
                                              boost::asio::execution::outstanding_work.tracked));
    });
    if (parked.queued) return true;
    call.inline_slot().clear();
    self->~EmbeddedQueueWait();
    decided = parked.ec;
    return false;
  }

 private:
  struct CancelHandler {
    explicit CancelHandler(EmbeddedQueueWait* w) noexcept : wait(w) {}
    EmbeddedQueueWait* wait;
    void operator()(boost::asio::cancellation_type_t type) const noexcept {
      using ct = boost::asio::cancellation_type;
      if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none) return;
      SemaphoreAccess::cancel(*wait->sem_, *wait);
    }
  };

  /// The function queued on the io_context (destroyed without running: abandon()).
  using Delivery = WaiterDelivery<EmbeddedQueueWait>;
  friend Delivery;

  /// The queue's completion (a grant, a cancellation, close), after its lock: hands the result
  /// to the trampoline when this thread runs the execution's io_context inside an engine entry
  /// point of that context, otherwise to the io_context's executor.
  static void on_complete(WaitNode* node, boost::system::error_code ec) noexcept {
    auto* self = static_cast<EmbeddedQueueWait*>(node);
    self->ec_ = ec;
    if (trampoline_accepts(self->context_) &&
        self->context_->get_executor().running_in_this_thread()) {
      self->TrampolineJob::run = &EmbeddedQueueWait::run_inline;
      self->TrampolineJob::runnable = &EmbeddedQueueWait::still_running_here;
      self->TrampolineJob::reschedule = &EmbeddedQueueWait::reschedule_job;
      trampoline_push(self);
      return;
    }
    self->post();
  }

  void post() noexcept {
    delivery_executor(context_->get_executor(), &reserve_).execute(Delivery{this});
  }

  static void run_inline(TrampolineJob* job) { static_cast<EmbeddedQueueWait*>(job)->deliver(); }
  static bool still_running_here(const TrampolineJob* job) noexcept {
    // As asio::dispatch asks: running on this thread is enough (see AcquireOp).
    return static_cast<const EmbeddedQueueWait*>(job)
        ->context_->get_executor()
        .running_in_this_thread();
  }
  static void reschedule_job(TrampolineJob* job) noexcept {
    static_cast<EmbeddedQueueWait*>(job)->post();
  }

  /// On the execution's io_context: resumes the waiting layer with the result. The wait (and its
  /// work count) goes first: the delivery now running is counted by the scheduler until it
  /// returns, and the execution's next queue wait may reuse the storage.
  void deliver() {
    CallBase* call = call_;
    const boost::system::error_code ec = ec_;
    this->~EmbeddedQueueWait();
    call->wait_completed(ec);
  }

  /// The delivery was destroyed undelivered (its io_context shut down): this wait goes, then a
  /// granted permit goes back (or on to the next waiter), then the execution is abandoned (ending
  /// it may release the last reference to whatever owns the semaphore).
  void abandon() noexcept {
    Semaphore* sem = sem_;
    CallBase* call = call_;
    const bool owned_permit = !ec_;
    this->~EmbeddedQueueWait();
    if (owned_permit) (void)sem->release(1);
    call->abandon_execution();
  }

  EmbeddedQueueWait(Semaphore& sem, CallBase& call, boost::asio::io_context& context) noexcept
      : WaitNode(&EmbeddedQueueWait::on_complete), sem_(&sem), call_(&call), context_(&context) {}
  ~EmbeddedQueueWait() = default;

  Semaphore* sem_;
  CallBase* call_;
  boost::asio::io_context* context_;
  std::optional<WorkEx> work_;  ///< while parked: the io_context's run() waits for the grant
  DeliveryReserve reserve_;     ///< the io_context builds its wrapper of the delivery here
  boost::system::error_code ec_;
};

/// The handler of a general queue wait (an async_acquire, where the execution keeps no room for
/// an embedded one or does not run on a plain io_context): it resumes the execution with the
/// result, and its cancellation slot lives in the execution, so that parking allocates no
/// cancellation handler. The engine starts the wait once the layer's callback has returned, so
/// the handler may resume the execution as soon as it runs; destroyed uninvoked, it abandons the
/// execution, or, inside the initiation that failed, leaves it to the engine.
class QueueWaitHandler {
 public:
  using executor_type = boost::asio::any_io_executor;
  using cancellation_slot_type = InlineSlot;
  using allocator_type = CachingAllocator<void>;
  /// Its grant may be delivered by the engine's trampoline (see detail/trampoline.hpp).
  static constexpr bool kevlar_inline_grant = true;

  explicit QueueWaitHandler(CallBase& call) noexcept : call_(&call) {}
  QueueWaitHandler(QueueWaitHandler&& other) noexcept
      : call_(std::exchange(other.call_, nullptr)) {}
  QueueWaitHandler& operator=(QueueWaitHandler&&) = delete;
  ~QueueWaitHandler() {
    if (call_ != nullptr) [[unlikely]] {
      drop();
    }
  }

  void operator()(const boost::system::error_code& ec) {
    std::exchange(call_, nullptr)->wait_completed(ec);
  }
  [[nodiscard]] executor_type get_executor() const noexcept {
    return call_ != nullptr ? call_->call_executor() : executor_type();
  }
  /// Answers on a moved-from handler too (an initiation that fails after moving it may ask).
  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
    return call_ != nullptr ? call_->inline_slot() : cancellation_slot_type();
  }
  /// Waits started with this handler allocate from kevlar's per-thread block cache.
  [[nodiscard]] allocator_type get_allocator() const noexcept { return {}; }

 private:
  [[gnu::noinline]] void drop() noexcept {
    if (tl_running_call == call_) {
      call_->step_dropped();  // its initiation is throwing: the engine fails the waiting layer
    } else {
      call_->abandon_execution();  // its executor shut down with the wait pending
    }
  }

  CallBase* call_;
};

}  // namespace kevlar::detail
