// The per-context deadline service: one DeadlineQueue per (context, clock, duration), and a
// thread-local cache of the queues a thread used last.
#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/detail/engine.hpp>
#include <kevlar/error.hpp>
#include <kevlar/outcome.hpp>

#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace kevlar::detail {

namespace {
/// Incremented whenever a DeadlineService shuts down or dies, so that thread-local caches never
/// hand out a queue of a context that no longer exists (even if a new context reuses its address).
std::atomic<std::uint64_t> g_service_epoch{1};
}  // namespace

namespace {

/// The executor of a queue's timer, from the executor of the call that creates the queue: without
/// the call's strand (Asio's strands of an io_context's or a thread_pool's executor, or of an
/// any_io_executor holding one), which would serialise every deadline of the context behind that
/// strand's handlers, and without outstanding work, which would keep the context's run() from
/// returning for as long as the queue lives. Other executors are used without their work.
boost::asio::any_io_executor timer_executor(const boost::asio::any_io_executor& tracked) {
  using boost::asio::strand;
  // Without outstanding work first: a strand maps the preference onto its inner executor, so a
  // work-tracking strand becomes a strand of the plain executor, which the checks below know.
  const boost::asio::any_io_executor ex =
      boost::asio::prefer(tracked, boost::asio::execution::outstanding_work.untracked);
  if (const auto* s = ex.target<strand<boost::asio::io_context::executor_type>>()) {
    return timer_executor(s->get_inner_executor());
  }
  if (const auto* s = ex.target<strand<boost::asio::thread_pool::executor_type>>()) {
    return timer_executor(s->get_inner_executor());
  }
  if (const auto* s = ex.target<strand<boost::asio::any_io_executor>>()) {
    return timer_executor(s->get_inner_executor());
  }
  return ex;
}

class DeadlineService final : public boost::asio::execution_context::service {
 public:
  static inline boost::asio::execution_context::id id;

  explicit DeadlineService(boost::asio::execution_context& ctx)
      : boost::asio::execution_context::service(ctx) {}
  ~DeadlineService() override { g_service_epoch.fetch_add(1, std::memory_order_acq_rel); }

  DeadlineQueue& queue(const boost::asio::any_io_executor& ex, const Clock& clock,
                       Clock::duration d) {
    std::lock_guard lock(mutex_);
    auto& q = queues_[Key{&clock, d.count()}];
    if (!q) q = std::make_unique<DeadlineQueue>(clock, timer_executor(ex), d.count() != 0);
    return *q;
  }

  void release_idle() noexcept {
    std::lock_guard lock(mutex_);
    for (auto& [key, q] : queues_) q->release_idle_timer();
  }

 private:
  void shutdown() override {
    g_service_epoch.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard lock(mutex_);
    for (auto& [key, q] : queues_) q->shutdown();
  }

  using Key = std::pair<const Clock*, Clock::duration::rep>;
  std::mutex mutex_;
  std::map<Key, std::unique_ptr<DeadlineQueue>> queues_;
};

struct CacheEntry {
  const void* context = nullptr;
  const Clock* clock = nullptr;
  Clock::duration::rep duration = 0;
  std::uint64_t epoch = 0;
  DeadlineQueue* queue = nullptr;
};

thread_local std::array<CacheEntry, 4> tl_cache;
thread_local unsigned tl_cache_next = 0;

/// This thread's cached queue for (context, clock, duration) from services of `epoch`, or
/// nullptr.
DeadlineQueue* cached_queue(const boost::asio::execution_context* ctx, const Clock& clock,
                            Clock::duration duration, std::uint64_t epoch) noexcept {
  for (const CacheEntry& c : tl_cache) {
    if (c.context == ctx && c.clock == &clock && c.duration == duration.count() &&
        c.epoch == epoch) {
      return c.queue;
    }
  }
  return nullptr;
}

}  // namespace

DeadlineQueue& deadline_queue_for(const boost::asio::any_io_executor& ex, const Clock& clock,
                                  Clock::duration duration) {
  boost::asio::execution_context& ctx = boost::asio::query(ex, boost::asio::execution::context);
  // Read before the lookup: a queue created by a service that dies meanwhile is cached with the
  // old epoch and never handed out.
  const std::uint64_t epoch = g_service_epoch.load(std::memory_order_acquire);
  if (DeadlineQueue* q = cached_queue(&ctx, clock, duration, epoch)) return *q;
  DeadlineQueue& q = boost::asio::use_service<DeadlineService>(ctx).queue(ex, clock, duration);
  tl_cache[tl_cache_next++ % tl_cache.size()] =
      CacheEntry{&ctx, &clock, duration.count(), epoch, &q};
  return q;
}

DeadlineQueue& deadline_queue_for(const CallBase& call, const Clock& clock,
                                  Clock::duration duration) {
  // On an io_context's plain executor the execution names its context directly: no
  // any_io_executor is built, queried and destroyed per call.
  if (const void* io = call.trampoline_context()) {
    const boost::asio::execution_context* ctx = static_cast<const boost::asio::io_context*>(io);
    const std::uint64_t epoch = g_service_epoch.load(std::memory_order_acquire);
    if (DeadlineQueue* q = cached_queue(ctx, clock, duration, epoch)) return *q;
  }
  return deadline_queue_for(call.call_executor(), clock, duration);
}

void resume_at_deadline(CallBase& call, std::size_t index) {
  (void)index;  // the execution is parked at that layer: its pending step is the layer's own wait
  call.wait_completed(boost::system::error_code());
}

void cancel_wait_at_deadline(CallBase& call, std::size_t index) {
  (void)index;  // the layer is still waiting (it disarms when its wait ends): the step is its own
  call.cancel_own_wait(boost::asio::cancellation_type::terminal);
}

namespace {
/// The caller's deadline passed: the execution is cancelled as the caller's terminal cancellation
/// would cancel it (report_caller_deadline turns the cancellation it ends with into a timeout).
void cancel_at_caller_deadline(CallBase& call, std::size_t /*index*/) {
  call.expire_caller_deadline();
}
}  // namespace

void CallBase::arm_caller_deadline(DeadlineEntry& entry, Clock::time_point deadline) {
  ::new (static_cast<void*>(&entry)) DeadlineEntry{};
  entry.deadline = deadline;
  entry.call = this;
  entry.fire = &cancel_at_caller_deadline;
  // Deadlines of varying durations: the queue of duration zero orders them.
  deadline_queue_for(*this, context_->clock(), Clock::duration::zero()).arm(entry);
  async_->caller_deadline = &entry;
  context_->deadline_ = deadline;
  deadline_owner_ = caller_deadline_owner;  // an attempt declined past it is the caller's
}

void CallBase::disarm_caller_deadline(bool report) noexcept {
  DeadlineEntry* entry = std::exchange(async_->caller_deadline, nullptr);
  if (entry == nullptr) return;
  // Disarmed after its expiry fired: a timeout, unless the caller had cancelled first. (Expired
  // but not yet fired, its job still on its way: report_caller_deadline asks the clock.)
  const bool expired = entry->queue->disarm(*entry) && async_->caller_deadline_first;
  if (report) report_caller_deadline(expired);
}

bool CallBase::outer_deadline_ended(std::size_t index) const noexcept {
  const bool outer = deadline_owner_ < index || deadline_owner_ == no_layer ||
                     deadline_owner_ == caller_deadline_owner;
  return outer && sync_past_deadline() && outcome_is_cancellation(outcome_);
}

void CallBase::report_caller_deadline(bool expired) noexcept {
  if (!outcome_is_cancellation(outcome_)) return;
  if (!expired) {
    const bool by_caller =
        async_ != nullptr ? async_->caller_cancelled : context_->stop_token().stop_requested();
    // Every layer has finished, so the context's deadline is the caller's again.
    if (by_caller || context_->clock().now() < context_->deadline_) return;
  }
  outcome_.set_error(make_error_code(errc::timeout));
}

void release_idle_deadline_timers(boost::asio::execution_context& ctx) noexcept {
  if (boost::asio::has_service<DeadlineService>(ctx)) {
    boost::asio::use_service<DeadlineService>(ctx).release_idle();
  }
}

}  // namespace kevlar::detail
