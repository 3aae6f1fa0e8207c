#include <kevlar/concurrency_limit.hpp>
#include <kevlar/detail/rejection_hooks.hpp>

#include <boost/asio/error.hpp>

#include <new>
#include <sstream>
#include <stdexcept>

namespace kevlar {
namespace {

using Frame = detail::LimiterFrame;
// A synchronous execution keeps its layers' frames on the stack up to a fixed size: the permit's
// pointer and two flags keep this one at 16 bytes (a queue deadline lives behind it, only in the
// frames of limiters that have a queue timeout).
static_assert(sizeof(Frame) <= 16);

LimiterLedger::count_type checked(int value, int min, const char* name,
                                  const char* owner = "kevlar::ConcurrencyLimitOptions::") {
  if (value < min || static_cast<long long>(value) > LimiterLedger::max_count) {
    std::ostringstream msg;
    msg << owner << name << " must be " << (min == 1 ? "positive" : "non-negative")
        << " and at most " << LimiterLedger::max_count << " (got " << value << ")";
    throw std::invalid_argument(msg.str());
  }
  return static_cast<LimiterLedger::count_type>(value);
}

ConcurrencyLimitOptions validated(ConcurrencyLimitOptions options) {
  detail::validate_queue_timeout(options.queue_timeout, "kevlar::ConcurrencyLimitOptions::");
  if (options.queue_timeout.enabled() && options.max_queue == 0) {
    throw std::invalid_argument(
        "kevlar::ConcurrencyLimitOptions::queue_timeout needs a queue (max_queue is 0: nothing "
        "waits)");
  }
  return options;
}

}  // namespace

void detail::LimiterFrame::end_queue_deadline() noexcept {
  QueueWaitDeadline& d = queue_wait_deadline(*this);
  d.drop();
  d.~QueueWaitDeadline();
  queue_deadline = false;
}

namespace {
// The queue deadline's room behind the frame.
constexpr std::size_t frame_with_deadline =
    detail::frame_extension_offset<Frame> + sizeof(detail::QueueWaitDeadline);
}  // namespace

ConcurrencyLimitStrategy::ConcurrencyLimitStrategy(ConcurrencyLimitOptions options)
    : options_(validated(std::move(options))),
      queue_timeout_(options_.queue_timeout),
      semaphore_(checked(options_.max_concurrency, 1, "max_concurrency"),
                 checked(options_.max_queue, 0, "max_queue")) {}

std::string ConcurrencyLimitStrategy::describe() const {
  std::string s = "ConcurrencyLimit(" + std::to_string(semaphore_.ledger().limit());
  if (options_.max_queue > 0) s += ", queue " + std::to_string(options_.max_queue);
  if (queue_timeout_.enabled()) {
    s += ", queue timeout " + detail::describe_queue_timeout(options_.queue_timeout);
  }
  return s + ")";
}

StrategyTraits ConcurrencyLimitStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.stateful = true;
  t.waits_in_queue = true;  // queued executions park inside themselves (Step::queue)
  if (queue_timeout_.enabled()) {
    t.frame_size = frame_with_deadline;
    t.needs_executor = true;  // the queue deadline's expiry runs on the call's executor
  }
  return t;
}

void ConcurrencyLimitStrategy::set_max_concurrency(int max_concurrency) {
  const LimiterLedger::count_type limit =
      checked(max_concurrency, 1, "max_concurrency",
              "kevlar::ConcurrencyLimitStrategy::set_max_concurrency: ");
  (void)semaphore_.adjust(
      [limit](LimiterLedger& ledger) noexcept { return ledger.resize_locked(limit); });
}

/// Reports the limiter's accounting to the shield's observers (only called when observed).
[[gnu::noinline]] void ConcurrencyLimitStrategy::emit_state(Layer& layer) const noexcept {
  const ConcurrencyLimitState s = state();
  layer.emit(LimiterStateChanged{s.running, s.queued});
}

Step ConcurrencyLimitStrategy::start(Layer& layer, Frame& f) {
  if (f.permit.try_acquire(semaphore_)) {  // the uncontended path: one CAS
    if (layer.wants<LimiterStateChanged>()) emit_state(layer);
    return Step::run_inner;
  }
  if (options_.priority_generator || queue_timeout_.enabled()) [[unlikely]] {
    return contend(layer, f);
  }
  // A full queue is decided from one load and one hint, without allocating: no permit, no place,
  // and nobody queued of lower priority than this call.
  if (semaphore_.ledger().full() &&
      layer.context().priority() <= semaphore_.lowest_queued_priority()) {
    return refuse(layer);
  }
  // The engine waits in the queue once this returns: on an io_context the wait lives in the
  // execution (parking allocates nothing), a synchronous execution blocks until the grant, the
  // caller's stop or the context's deadline. A decision the semaphore makes at once under its
  // lock comes back through wait_complete (without a hop for the embedded wait).
  return Step::queue(semaphore_);
}

[[gnu::noinline]] Step ConcurrencyLimitStrategy::contend(Layer& layer, Frame& f) {
  Context& context = layer.context();
  if (options_.priority_generator) context.set_priority(options_.priority_generator(context));
  const LimiterLedger::Counts counts = semaphore_.ledger().counts();
  if (semaphore_.ledger().full() && context.priority() <= semaphore_.lowest_queued_priority()) {
    return refuse(layer);
  }
  if (queue_timeout_.enabled()) {
    auto* d = ::new (static_cast<void*>(&detail::queue_wait_deadline(f))) detail::QueueWaitDeadline;
    f.queue_deadline = true;
    d->begin(layer, queue_timeout_.deadline(layer.clock().now(), counts.queued),
             queue_timeout_.same_duration());
  }
  return Step::queue(semaphore_);
}

Step ConcurrencyLimitStrategy::wait_complete(Layer& layer, Frame& f,
                                             const boost::system::error_code& ec) {
  if (f.rejecting) return Step::complete;  // the hook set the outcome
  if (f.queue_deadline) [[unlikely]] {
    const bool timed_out =
        detail::queue_wait_deadline(f).end(layer, ec == boost::asio::error::operation_aborted);
    f.end_queue_deadline();
    if (timed_out) return reject(layer, errc::queue_timeout);
  }
  if (!ec) {
    f.permit.adopt(semaphore_);  // the grant made it this execution's
    if (layer.wants<LimiterStateChanged>()) emit_state(layer);
    return Step::run_inner;
  }
  // Lost a race for the last queue place, or displaced by a call of higher priority.
  if (ec == errc::concurrency_limit_exceeded) return reject(layer);
  // operation_aborted (cancelled while queued, or a synchronous wait stopped or past the
  // context's deadline) or closed
  layer.outcome().set_error(ec);
  return Step::complete;
}

[[gnu::noinline, gnu::cold]] Step ConcurrencyLimitStrategy::refuse(Layer& layer) {
  if (semaphore_.is_closed()) {
    layer.outcome().set_error(make_error_code(errc::closed));
    return Step::complete;
  }
  return reject(layer);
}

Step ConcurrencyLimitStrategy::reject(Layer& layer, errc reason) {
  Frame& f = layer.frame_as<Frame>();
  const ConcurrencyLimitRejectedEvent event{semaphore_.ledger().limit(),
                                            static_cast<std::uint32_t>(options_.max_queue),
                                            layer.strategy_index(), layer.context(), reason};
  if (layer.observed()) {
    layer.emit(Rejected{reason == errc::queue_timeout ? RejectionKind::queue_timeout
                                                      : RejectionKind::concurrency_limit,
                        std::nullopt});
    if (layer.wants<LimiterStateChanged>()) emit_state(layer);
  }
  return detail::run_rejection_hooks(layer, event, options_.on_rejected, make_error_code(reason),
                                     std::nullopt, [&f] { f.rejecting = true; });
}

Step ConcurrencyLimitStrategy::inner_complete(Layer& layer, Frame& f) {
  f.permit.release();  // one CAS, or a handoff to the oldest waiter
  if (layer.wants<LimiterStateChanged>()) emit_state(layer);
  return Step::complete;
}

std::shared_ptr<ConcurrencyLimitStrategy> concurrency_limit(int max_concurrency, int max_queue) {
  ConcurrencyLimitOptions options;
  options.max_concurrency = max_concurrency;
  options.max_queue = max_queue;
  return std::make_shared<ConcurrencyLimitStrategy>(std::move(options));
}

std::shared_ptr<ConcurrencyLimitStrategy> concurrency_limit(ConcurrencyLimitOptions options) {
  return std::make_shared<ConcurrencyLimitStrategy>(std::move(options));
}

}  // namespace kevlar
