// Layer::await: a strategy awaits a coroutine as one step of an execution. The callback only
// leaves the coroutine in the execution; the shells start it once the callback has returned: the
// asynchronous one spawns it on the execution's executor, the synchronous one runs it to
// completion on the calling thread.
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/run_to_completion.hpp>
#include <kevlar/error.hpp>
#include <kevlar/layer.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <utility>

namespace kevlar {
namespace detail {
namespace {

/// The coroutine a Layer::await step holds until the shell starts it.
using PendingCoroutine = boost::asio::awaitable<void>;
static_assert(sizeof(PendingCoroutine) <= sizeof(void*) &&
                  alignof(PendingCoroutine) <= alignof(void*),
              "CallBase::hook_room holds one awaitable");

/// Moves the pending coroutine out of the execution's room, leaving the room empty.
PendingCoroutine take_hook(CallBase& call) noexcept {
  PendingCoroutine* room = std::launder(static_cast<PendingCoroutine*>(call.hook_room()));
  PendingCoroutine hook(std::move(*room));
  room->~PendingCoroutine();
  call.hook_step() = Step::suspend;
  return hook;
}

/// Runs `hook` with every cancellation type let through and Asio's throw-if-cancelled net on (a
/// cancellation that arrives while the hook awaits something deaf to it still stops the hook at
/// its next co_await), then turns that net off before returning: co_spawn's own last step must
/// not throw the cancellation out of the executor's run(). The hook's exception becomes the
/// outcome; the result tells whether it threw.
boost::asio::awaitable<bool> guarded(PendingCoroutine hook, OutcomeRef outcome) {
  co_await boost::asio::this_coro::reset_cancellation_state(
      boost::asio::enable_total_cancellation());
  std::exception_ptr failure;
  try {
    co_await std::move(hook);
  } catch (...) {
    failure = std::current_exception();
  }
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  if (!failure) co_return false;
  outcome.set_exception(std::move(failure));
  co_return true;
}

/// What on_wait_complete receives once the coroutine ended.
boost::system::error_code hook_result(bool failed) noexcept {
  return failed ? make_error_code(errc::callback_exception) : boost::system::error_code();
}

/// Who owns the suspended execution while its coroutine is spawned. co_spawn may throw after
/// keeping its handler alive (Asio then destroys it later, through the executor), so a throw does
/// not tell whether the handler is gone: the handler and the engine agree through this claim,
/// shared by the handler and the job that resumes the execution.
struct HookClaim {
  enum class State : unsigned char {
    spawning,  ///< co_spawn has not returned: the engine is on the stack
    handed,    ///< co_spawn returned: the handler (or its resume job) owns the execution
    taken,     ///< nobody may touch the execution any more through this claim
  };
  explicit HookClaim(CallBase& c) noexcept : call(&c) {}
  CallBase* call;
  std::atomic<State> state{State::spawning};
};
using Claim = std::shared_ptr<HookClaim>;

/// A handler or job holding `claim` dies uninvoked. During the spawn, start_hook sees it and fails
/// the layer; after it, the executor shut down with the coroutine pending: the execution is
/// abandoned.
void drop(HookClaim& claim) noexcept {
  auto state = HookClaim::State::spawning;
  if (claim.state.compare_exchange_strong(state, HookClaim::State::taken,
                                          std::memory_order_acq_rel)) {
    return;
  }
  if (state == HookClaim::State::handed) {
    claim.state.store(HookClaim::State::taken, std::memory_order_relaxed);
    claim.call->abandon_execution();
  }
}

/// Resumes the execution with the coroutine's result, through its executor, once start_hook has
/// handed it over (a coroutine that ended on another thread before co_spawn returned looks again
/// later).
class ResumeJob {
 public:
  ResumeJob(Claim claim, boost::asio::any_io_executor ex, boost::system::error_code ec) noexcept
      : claim_(std::move(claim)), ex_(std::move(ex)), ec_(ec) {}
  ResumeJob(ResumeJob&&) noexcept = default;
  ResumeJob& operator=(ResumeJob&&) = delete;
  ~ResumeJob() {
    if (claim_) [[unlikely]] {
      drop(*claim_);
    }
  }
  void operator()() {
    Claim claim = std::move(claim_);
    switch (claim->state.load(std::memory_order_acquire)) {
      case HookClaim::State::spawning: {
        boost::asio::any_io_executor ex = ex_;
        boost::asio::post(ex, ResumeJob(std::move(claim), ex_, ec_));
        return;
      }
      case HookClaim::State::handed:
        claim->state.store(HookClaim::State::taken, std::memory_order_relaxed);
        claim->call->wait_completed(ec_);
        return;
      case HookClaim::State::taken:
        return;  // the spawn failed after all: the engine failed the layer
    }
  }

 private:
  Claim claim_;
  boost::asio::any_io_executor ex_;
  boost::system::error_code ec_;
};

/// co_spawn's completion. It carries the execution's cancellation slot (so the caller's
/// cancellation, or a timeout outside, reaches what the coroutine awaits) and no executor of its
/// own (so co_spawn forwards a cancellation inline, not through a dispatch that could outlive the
/// coroutine); it runs on the execution's executor, co_spawn's default, and resumes the execution
/// by a post, once the coroutine has finished.
class HookDone {
 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;

  HookDone(Claim claim, boost::asio::any_io_executor ex,
           boost::asio::cancellation_slot slot) noexcept
      : claim_(std::move(claim)), ex_(std::move(ex)), slot_(slot) {}
  HookDone(HookDone&&) noexcept = default;
  HookDone& operator=(HookDone&&) = delete;
  ~HookDone() {
    if (claim_) [[unlikely]] {
      drop(*claim_);
    }
  }

  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept { return slot_; }
  void operator()(std::exception_ptr ep, bool failed) {
    Claim claim = std::move(claim_);
    if (claim->state.load(std::memory_order_acquire) == HookClaim::State::taken) return;
    if (ep) {  // guarded() lets nothing out; kept for what co_spawn itself may report
      OutcomeRef(claim->call->outcome()).set_exception(std::move(ep));
      failed = true;
    }
    boost::asio::post(ex_, ResumeJob(std::move(claim), ex_, hook_result(failed)));
  }

 private:
  Claim claim_;
  boost::asio::any_io_executor ex_;
  boost::asio::cancellation_slot slot_;
};

bool start_hook(StepTarget& /*target*/, CallBase& call, boost::system::error_code& decided) {
  PendingCoroutine body = take_hook(call);
  Claim claim;
  try {
    claim = std::make_shared<HookClaim>(call);
    boost::asio::any_io_executor ex = call.call_executor();
    boost::asio::co_spawn(ex, guarded(std::move(body), OutcomeRef(call.outcome())),
                          HookDone(claim, ex, call.step_slot()));
  } catch (...) {
    // Nothing resumes the execution now, whatever co_spawn kept: the engine fails the layer with
    // the exception.
    if (claim) claim->state.store(HookClaim::State::taken, std::memory_order_release);
    call.step_dropped();
    throw;
  }
  auto state = HookClaim::State::spawning;
  if (claim->state.compare_exchange_strong(state, HookClaim::State::handed,
                                           std::memory_order_acq_rel)) {
    return true;  // the handler owns the execution now: nothing of it may be touched
  }
  // co_spawn returned, having destroyed its handler uninvoked: nothing would resume the execution.
  OutcomeRef(call.outcome())
      .set_exception(std::make_exception_ptr(
          std::logic_error("kevlar: the awaited coroutine's completion was lost")));
  decided = hook_result(true);
  return false;
}

boost::system::error_code block_on_hook(StepTarget& /*target*/, CallBase& call) {
  std::exception_ptr escaped;
  bool failed = false;
  run_to_completion(guarded(take_hook(call), OutcomeRef(call.outcome())),
                    [&escaped, &failed](std::exception_ptr ep, bool f) {
                      escaped = std::move(ep);
                      failed = f;
                    });
  if (escaped) {
    OutcomeRef(call.outcome()).set_exception(std::move(escaped));
    failed = true;
  }
  return hook_result(failed);
}

void discard_hook(StepTarget& /*target*/, CallBase& call) noexcept {
  (void)take_hook(call);
}

constexpr StepTargetOps hook_ops{static_cast<unsigned char>(Step::Kind::await), &start_hook,
                                 &block_on_hook, &discard_hook};
/// What every await step points at: the coroutine itself waits in the execution's room.
StepTarget hook_target{&hook_ops};

}  // namespace
}  // namespace detail

Step Layer::await(boost::asio::awaitable<void> hook) const noexcept {
  Step& noted = call_->hook_step();
  const Step step = detail::StepAccess::point_at(detail::hook_target);
  if (noted == step) (void)detail::take_hook(*call_);  // a second await in one callback: the last
  ::new (call_->hook_room()) detail::PendingCoroutine(std::move(hook));
  noted = step;
  return step;
}

}  // namespace kevlar
