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
// pointer and a flag keep this one at 16 bytes.
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

}  // namespace

ConcurrencyLimitStrategy::ConcurrencyLimitStrategy(ConcurrencyLimitOptions options)
    : options_(std::move(options)),
      semaphore_(checked(options_.max_concurrency, 1, "max_concurrency"),
                 checked(options_.max_queue, 0, "max_queue")) {}

std::string ConcurrencyLimitStrategy::describe() const {
  std::string s = "ConcurrencyLimit(" + std::to_string(semaphore_.ledger().limit());
  if (options_.max_queue > 0) s += ", queue " + std::to_string(options_.max_queue);
  return s + ")";
}

StrategyTraits ConcurrencyLimitStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.stateful = true;
  t.waits_in_queue = true;  // queued executions park inside themselves (Step::queue)
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
  if (semaphore_.ledger().full()) return refuse(layer);  // decided from one load, no allocation
  // The engine waits in the same FIFO once this returns: on an io_context the wait lives in the
  // execution (parking allocates nothing), a synchronous execution blocks until the grant, the
  // caller's stop or the context's deadline. A decision the semaphore makes at once under its
  // lock comes back through wait_complete (without a hop for the embedded wait).
  return Step::queue(semaphore_);
}

Step ConcurrencyLimitStrategy::wait_complete(Layer& layer, Frame& f,
                                             const boost::system::error_code& ec) {
  if (f.rejecting) return Step::complete;  // the hook set the outcome
  if (!ec) {
    f.permit.adopt(semaphore_);  // the grant made it this execution's
    if (layer.wants<LimiterStateChanged>()) emit_state(layer);
    return Step::run_inner;
  }
  if (ec == errc::concurrency_limit_exceeded) return reject(layer);  // lost a race for the queue
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

Step ConcurrencyLimitStrategy::reject(Layer& layer) {
  Frame& f = layer.frame_as<Frame>();
  const ConcurrencyLimitRejectedEvent event{semaphore_.ledger().limit(),
                                            static_cast<std::uint32_t>(options_.max_queue),
                                            layer.strategy_index(), layer.context()};
  if (layer.observed()) {
    layer.emit(Rejected{RejectionKind::concurrency_limit, std::nullopt});
    if (layer.wants<LimiterStateChanged>()) emit_state(layer);
  }
  return detail::run_rejection_hooks(layer, event, options_.on_rejected, options_.on_rejected_async,
                                     LimiterLedger::rejection(), std::nullopt,
                                     [&f] { f.rejecting = true; });
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
