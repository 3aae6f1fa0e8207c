// kevlar — internal: an asynchronous execution (Shield::execute_async).
#pragma once

#include <kevlar/detail/always_inline.hpp>
#include <kevlar/detail/block_cache.hpp>
#include <kevlar/detail/deadline_queue.hpp>
#include <kevlar/diagnostics.hpp>
#include <kevlar/detail/engine.hpp>
#include <kevlar/detail/lease.hpp>
#include <kevlar/error.hpp>
#include <kevlar/strategy.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <boost/asio/system_executor.hpp>

#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace kevlar::detail {

/// Completion signatures kevlar wraps: `void(error_code, Ts...)` or `void(exception_ptr, Ts...)`.
template <class Sig>
struct SignatureTraits {
  static constexpr bool supported = false;
};
template <class E, class... Ts>
struct SignatureTraits<void(E, Ts...)> {
  using error_type = std::remove_cvref_t<E>;
  static constexpr bool supported = std::is_same_v<error_type, boost::system::error_code> ||
                                    std::is_same_v<error_type, std::exception_ptr>;
  using values_type = std::tuple<std::decay_t<Ts>...>;
  static constexpr std::size_t value_count = sizeof...(Ts);
  /// What clauses see as the call's value: nothing, the single value, or a tuple of them.
  using value_type = std::conditional_t<
      sizeof...(Ts) == 0, void,
      std::conditional_t<sizeof...(Ts) == 1,
                         std::tuple_element_t<0, std::tuple<std::decay_t<Ts>..., void>>,
                         values_type>>;
};

/// ValueOps over the optional tuple of an operation's completion values.
template <class Values, class Value>
struct TupleValueOps {
  static const void* get(const void* slot) noexcept {
    const auto* o = static_cast<const std::optional<Values>*>(slot);
    if (!o->has_value()) return nullptr;
    if constexpr (std::tuple_size_v<Values> == 1) {
      return std::addressof(std::get<0>(**o));
    } else {
      return std::addressof(**o);
    }
  }
  static void assign(void* slot, const void* src) {
    auto* o = static_cast<std::optional<Values>*>(slot);
    if constexpr (std::tuple_size_v<Values> == 1) {
      o->emplace(*static_cast<const Value*>(src));
    } else {
      o->emplace(*static_cast<const Values*>(src));
    }
  }
  static constexpr ValueOps ops{&typeid(Value), &get, &assign};
};

/// Stores an operation's completion arguments as an outcome and its values.
template <class ErrorType, class Values, class E, class... Args>
void store_completion(OutcomeState& outcome, std::optional<Values>& values, E&& e,
                      Args&&... args) {
  values.emplace(std::forward<Args>(args)...);
  if constexpr (std::is_same_v<ErrorType, boost::system::error_code>) {
    if (e) {
      outcome.set_error(e);
    } else {
      outcome.set_success();
    }
  } else {
    if (e) {
      outcome.set_exception(std::forward<E>(e));
    } else {
      outcome.set_success();
    }
  }
}

/// The first argument of a completion that fails with `ec`.
template <class ErrorType>
ErrorType error_argument(const boost::system::error_code& ec) {
  if constexpr (std::is_same_v<ErrorType, boost::system::error_code>) {
    return ec;
  } else {
    return std::make_exception_ptr(Error(ec));
  }
}

/// Forwards the caller's cancellation into the execution.
struct CallerCancellation {
  CallBase* call;
  void operator()(boost::asio::cancellation_type type) const noexcept {
    call->cancel_by_caller(type);
  }
};

template <class Handler>
inline constexpr bool has_own_executor =
    !std::is_same_v<boost::asio::associated_executor_t<Handler, boost::asio::system_executor>,
                    boost::asio::system_executor>;

/// The completion handler kevlar passes to the user's operation for one attempt. It owns the
/// execution until it is invoked; if destroyed uninvoked (the operation's executor shut down) it
/// abandons the execution. Its associated cancellation slot is the execution's step slot, its
/// allocator and (when the caller's handler has one) its executor are the caller's.
template <class Call>
class AttemptHandler {
 public:
  using cancellation_slot_type = boost::asio::cancellation_slot;
  using allocator_type = typename Call::allocator_type;

  explicit AttemptHandler(Call* call) noexcept : call_(call), allocator_(call->get_allocator()) {}
  AttemptHandler(AttemptHandler&& other) noexcept
      : call_(std::exchange(other.call_, nullptr)), allocator_(other.allocator_) {}
  AttemptHandler& operator=(AttemptHandler&&) = delete;
  ~AttemptHandler() {
    if (call_ == nullptr) return;
    if (tl_running_call != call_) {
      call_->abandon_execution();  // the operation's executor shut down
    } else {
      call_->step_dropped();  // a failed initiation: the engine on the stack goes on
    }
  }

  template <class... Args>
  void operator()(Args&&... args) {
    Call* call = std::exchange(call_, nullptr);
    call->store(std::forward<Args>(args)...);
    call->operation_completed();
  }

  // The associators answer on a moved-from handler too: an operation whose initiation fails after
  // moving the handler into its own storage frees that storage with the allocator of the handler
  // it was moved from (Asio's operation pointers do).
  [[nodiscard]] cancellation_slot_type get_cancellation_slot() const noexcept {
    return call_ != nullptr ? call_->step_slot() : cancellation_slot_type();
  }
  [[nodiscard]] allocator_type get_allocator() const noexcept { return allocator_; }
  /// The context of the attempt this handler completes (kevlar::attempt_context).
  [[nodiscard]] Context* kevlar_context() const noexcept {
    return call_ != nullptr ? &call_->context() : nullptr;
  }

 protected:
  Call* call_;
  [[no_unique_address]] allocator_type allocator_;
};

/// AttemptHandler for callers whose handler has an associated executor: the operation completes
/// on it.
template <class Call>
class ExecutorAttemptHandler : public AttemptHandler<Call> {
 public:
  using executor_type = typename Call::executor_type;
  using AttemptHandler<Call>::AttemptHandler;
  [[nodiscard]] executor_type get_executor() const noexcept { return this->call_->get_executor(); }
};

/// The unit an execution's block is allocated in: the execution object, then the layers' frames.
using ExecutionBlock = std::aligned_storage_t<sizeof(std::max_align_t), alignof(std::max_align_t)>;

/// Blocks for an execution object of type T followed by `frame_bytes` of frames; `head` is the
/// number of blocks the object takes.
template <class T>
struct BlockLayout {
  static constexpr std::size_t head =
      (sizeof(T) + sizeof(ExecutionBlock) - 1) / sizeof(ExecutionBlock);
  static std::size_t blocks(std::size_t frame_bytes) noexcept {
    return head + (frame_bytes + sizeof(ExecutionBlock) - 1) / sizeof(ExecutionBlock);
  }
};

/// Destroys the execution `self` and frees its `blocks` blocks with (a rebound copy of) `alloc`.
template <class T, class Alloc>
void destroy_execution(T* self, const Alloc& alloc, std::size_t blocks) noexcept {
  using BlockAlloc =
      typename std::allocator_traits<Alloc>::template rebind_alloc<ExecutionBlock>;
  BlockAlloc a(alloc);
  void* mem = self;
  self->~T();
  std::allocator_traits<BlockAlloc>::deallocate(a, static_cast<ExecutionBlock*>(mem), blocks);
}

/// True if `ex` holds the system executor (a handler that brings no executor of its own). The
/// usual answer, an io_context's plain executor, is tested first: any_io_executor::target() of
/// the type it holds finds the two type names at one address, while a mismatch compares them
/// (a strcmp with g++; docs/benchmarks.md, "Layout decisions").
inline bool holds_system_executor(const boost::asio::any_io_executor& ex) noexcept {
  if (ex.target<boost::asio::io_context::executor_type>() != nullptr) return false;
  return ex.target<boost::asio::system_executor>() != nullptr;
}

/// The io_context whose plain executor `ex` is (CallBase::trampoline_context), or nullptr.
template <class Executor>
const void* trampoline_context_of(const Executor& ex) noexcept {
  using IoEx = boost::asio::io_context::executor_type;
  if constexpr (std::is_same_v<Executor, IoEx>) {
    return &ex.context();
  } else if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
    const IoEx* io = ex.template target<IoEx>();
    return io != nullptr ? &io->context() : nullptr;
  } else {
    (void)ex;
    return nullptr;
  }
}

/// Copies what an outcome says (not where its values live) from an attempt's outcome.
inline void adopt_result(OutcomeState& to, const OutcomeState& from) {
  to.kind = from.kind;
  to.error = from.error;
  to.exception = from.exception;
  to.retry_after = from.retry_after;
}

/// What an asynchronous execution and its attempts share, typed by the operation's completion
/// signature `Sig`: the lease that keeps the pipeline alive, the machine's asynchronous state, the
/// context, and the completion's values, which the outcome points at. The two executions
/// (AsyncCall, AttemptCall) add what tells them apart: the caller's handler and callable, or the
/// link to the execution that started the attempt.
template <class Sig>
class TypedCall : public CallBase {
 protected:
  using Traits = SignatureTraits<Sig>;
  using ErrorType = typename Traits::error_type;
  using Values = typename Traits::values_type;
  using Value = typename Traits::value_type;

  // Inlined, as the members were when each execution type declared its own: out of line, the
  // pair of them cost a queued handoff 34 more instructions.
  KEVLAR_DETAIL_ALWAYS_INLINE TypedCall(const PipelineView& pipeline, std::byte* frames,
                                        Lease keep_alive, const Clock& clock,
                                        const std::string* shield_name)
      : CallBase(pipeline, frames, context_storage_),
        keep_alive_(std::move(keep_alive)),
        context_storage_(clock, shield_name, false) {
    async_ = &steps_;
    if constexpr (Traits::value_count > 0) {
      outcome_.slot = &values_;
      outcome_.ops = &TupleValueOps<Values, Value>::ops;
    }
  }
  KEVLAR_DETAIL_ALWAYS_INLINE ~TypedCall() {}

 public:
  /// Stores the operation's completion arguments as the outcome and its values.
  template <class E, class... Args>
  void store(E&& e, Args&&... args) {
    store_completion<ErrorType>(outcome_, values_, std::forward<E>(e), std::forward<Args>(args)...);
  }

 protected:
  /// Takes over the outcome and the values of `attempt`, an attempt of this execution (every
  /// attempt of an execution has its completion signature).
  void adopt_outcome(CallBase& attempt) override {
    auto& child = static_cast<TypedCall&>(attempt);
    adopt_result(outcome_, child.outcome());
    values_ = std::move(child.values_);
  }

  Lease keep_alive_;  ///< the pipeline outlives the execution
  // After keep_alive_: destroyed first, so the step timer goes before the pipeline's clock.
  AsyncSteps steps_;
  Context context_storage_;
  std::optional<Values> values_;
};

/// One attempt of the inner part of a pipeline that a layer runs alongside others
/// (Layer::start_attempt): the layers inside that layer, then the user's operation, on a copy of
/// the context. Its block comes from kevlar's per-thread cache (it may outlive the caller's
/// handler: a cancelled attempt ends on its own), and it keeps the pipeline alive. Its completion
/// runs on the caller's executor, like the execution that started it.
template <class Attempt, class Sig, class Executor>
class AttemptCall final : public TypedCall<Sig> {
  using Base = TypedCall<Sig>;
  using typename Base::ErrorType;
  using typename Base::Values;

 public:
  using allocator_type = CachingAllocator<void>;
  using executor_type = Executor;
  using StepHandler = ExecutorAttemptHandler<AttemptCall>;

  /// Allocates an attempt of `parent` running the layers from `first` on (not started yet).
  static AttemptCall* create(CallBase& parent, std::size_t first, Executor ex,
                             const Lease& keep_alive) {
    using Layout = BlockLayout<AttemptCall>;
    CachingAllocator<ExecutionBlock> alloc;
    const std::size_t blocks = Layout::blocks(async_frame_bytes(parent.pipeline(), first));
    ExecutionBlock* mem = alloc.allocate(blocks);
    auto* frames = reinterpret_cast<std::byte*>(mem + Layout::head);
    try {
      return ::new (static_cast<void*>(mem))
          AttemptCall(parent, first, frames, std::move(ex), keep_alive, blocks);
    } catch (...) {
      alloc.deallocate(mem, blocks);
      throw;
    }
  }

  [[nodiscard]] allocator_type get_allocator() const noexcept { return {}; }
  [[nodiscard]] executor_type get_executor() const noexcept { return ex_; }
  [[nodiscard]] boost::asio::any_io_executor call_executor() const noexcept override {
    return boost::asio::any_io_executor(ex_);
  }
  [[nodiscard]] const void* trampoline_context() const noexcept override {
    return trampoline_context_of(ex_);
  }

  CallBase* make_attempt(std::size_t first) override {
    return create(*this, first, ex_, this->keep_alive_);
  }
  void invoke_operation_for(CallBase& attempt) override {
    if (link_.parent != nullptr) {
      link_.parent->invoke_operation_for(attempt);
    } else {
      static_cast<AttemptCall&>(attempt).fail_operation();
    }
  }

 private:
  AttemptCall(CallBase& parent, std::size_t first, std::byte* frames, Executor&& ex,
              const Lease& keep_alive, std::size_t blocks)
      : Base(parent.pipeline(), frames, keep_alive, parent.context().clock(),
             parent.context().shield_name()),
        ex_(std::move(ex)),
        blocks_(blocks) {
    this->become_attempt(parent, first, link_);
  }

  /// The operation runs through the execution that started this attempt (it holds the user's
  /// callable); a detached attempt starts none and fails as cancelled.
  void invoke_operation() override { invoke_operation_for(*this); }
  /// Completes this attempt with `operation_aborted`, through its executor like an operation.
  void fail_operation() {
    std::apply(
        [&](auto&&... v) {
          boost::asio::post(boost::asio::append(
              StepHandler(this),
              error_argument<ErrorType>(boost::asio::error::operation_aborted),
              std::forward<decltype(v)>(v)...));
        },
        Values{});
  }

  void deliver() override {
    if (CallBase* parent = std::exchange(link_.parent, nullptr)) {
      parent->attempt_completed(link_);  // the parent destroys this attempt when it reports it
      return;
    }
    destroy();  // detached: nobody waits for this outcome
  }

  void destroy() noexcept override {
    trampoline_forget(static_cast<const CallBase*>(this));
    destroy_execution(this, allocator_type(), blocks_);
  }

  Executor ex_;
  AttemptNode link_;
  std::size_t blocks_;
};

/// One asynchronous execution: the caller's handler, the user's attempt, the completion values
/// and the context, allocated in one block (with the layers' frames behind it) from the handler's
/// associated allocator.
template <class Handler, class Attempt, class Sig>
class AsyncCall final : public TypedCall<Sig> {
  using Base = TypedCall<Sig>;
  using typename Base::ErrorType;
  using typename Base::Values;
  using Base::disarm_caller_deadline;
  using Base::keep_alive_;
  using Base::outcome_;
  using Base::steps_;
  using Base::values_;

 public:
  /// The caller's allocator if its handler brings one, else kevlar's per-thread block cache.
  using allocator_type = std::conditional_t<
      std::is_same_v<boost::asio::associated_allocator_t<Handler>, std::allocator<void>>,
      CachingAllocator<void>, boost::asio::associated_allocator_t<Handler>>;
  using executor_type = boost::asio::associated_executor_t<Handler, boost::asio::system_executor>;
  using StepHandler =
      std::conditional_t<has_own_executor<Handler>, ExecutorAttemptHandler<AsyncCall>,
                         AttemptHandler<AsyncCall>>;

  /// Allocates and starts an execution. Completion never happens inside this call.
  static void start(Lease keep_alive, const PipelineView& pipeline, Handler handler,
                    Attempt attempt) {
    start_with(std::move(keep_alive), pipeline, std::move(handler), std::move(attempt), nullptr);
  }
  /// start(), for an execution the caller started with `options` (CallOptions).
  static void start(Lease keep_alive, const PipelineView& pipeline, Handler handler,
                    Attempt attempt, const CallOptions& options) {
    start_with(std::move(keep_alive), pipeline, std::move(handler), std::move(attempt), &options);
  }

 private:
  KEVLAR_DETAIL_ALWAYS_INLINE static void start_with(Lease keep_alive,
                                                     const PipelineView& pipeline,
                                                     Handler handler, Attempt attempt,
                                                     const CallOptions* options) {
    // lacks_executor folds to a constant unless the handler's executor is type-erased.
    if (pipeline.needs_executor && lacks_executor(handler)) {
      refuse(std::move(handler), errc::executor_required);
      return;
    }
    // The caller's deadline (CallOptions::deadline) is delivered on the handler's executor, and
    // lives behind the frames.
    const bool has_deadline = options != nullptr && options->deadline != Clock::time_point::max();
    if (has_deadline) [[unlikely]] {
      if (lacks_executor(handler)) {
        refuse(std::move(handler), errc::executor_required);
        return;
      }
      if (pipeline.clock->now() >= options->deadline) {
        refuse(std::move(handler), errc::timeout);  // spent before it started: nothing runs
        return;
      }
    }
    using Layout = BlockLayout<AsyncCall>;
    using BlockAlloc =
        typename std::allocator_traits<allocator_type>::template rebind_alloc<ExecutionBlock>;
    const std::size_t frame_bytes = async_frame_bytes(pipeline);
    const std::size_t blocks =
        Layout::blocks(has_deadline ? frame_bytes + sizeof(DeadlineEntry) : frame_bytes);
    BlockAlloc alloc(allocator_of(handler));
    ExecutionBlock* mem = std::allocator_traits<BlockAlloc>::allocate(alloc, blocks);
    auto* frames = reinterpret_cast<std::byte*>(mem + Layout::head);
    AsyncCall* call;
    try {
      call = ::new (static_cast<void*>(mem)) AsyncCall(
          std::move(keep_alive), pipeline, frames, std::move(handler), std::move(attempt), blocks);
    } catch (...) {
      std::allocator_traits<BlockAlloc>::deallocate(alloc, mem, blocks);
      throw;
    }
    // Binding the caller's slot allocates (Asio's cancellation handler memory). Nothing has run
    // yet: a failure destroys the execution, and with it the caller's handler, and propagates.
    try {
      call->connect_caller();
    } catch (...) {
      call->destroy();
      throw;
    }
    if (options != nullptr) call->context_storage_.set_priority(options->priority);
    if (has_deadline) [[unlikely]] {
      try {
        call->arm_caller_deadline(*reinterpret_cast<DeadlineEntry*>(frames + frame_bytes),
                                  options->deadline);
      } catch (...) {
        call->destroy();
        throw;
      }
    }
    if (pipeline.observes_executions) call->observe_start();
    const CallBase* previous = std::exchange(tl_initiating_call, call);
    try {
      call->run(Step::run_inner);
    } catch (...) {
      tl_initiating_call = previous;
      throw;
    }
    tl_initiating_call = previous;
  }

 public:
  [[nodiscard]] allocator_type get_allocator() const noexcept { return allocator_of(handler_); }
  static allocator_type allocator_of(const Handler& h) noexcept {
    if constexpr (std::is_same_v<allocator_type, CachingAllocator<void>>) {
      (void)h;
      return {};
    } else {
      return boost::asio::get_associated_allocator(h);
    }
  }
  [[nodiscard]] executor_type get_executor() const noexcept {
    return boost::asio::get_associated_executor(handler_, boost::asio::system_executor());
  }
  [[nodiscard]] boost::asio::any_io_executor call_executor() const noexcept override {
    return boost::asio::any_io_executor(get_executor());
  }
  [[nodiscard]] const void* trampoline_context() const noexcept override {
    return trampoline_context_of(get_executor());
  }

 private:
  AsyncCall(Lease keep_alive, const PipelineView& pipeline, std::byte* frames, Handler&& handler,
            Attempt&& attempt, std::size_t blocks)
      : Base(pipeline, frames, std::move(keep_alive), *pipeline.clock, pipeline.name),
        handler_(std::move(handler)),
        attempt_(std::move(attempt)),
        blocks_(blocks) {}

  /// True if `handler` brings no executor of its own (or a type-erased one holding the system
  /// executor).
  static bool lacks_executor(const Handler& handler) noexcept {
    if constexpr (!has_own_executor<Handler>) {
      (void)handler;
      return true;
    } else if constexpr (std::is_same_v<executor_type, boost::asio::any_io_executor>) {
      return holds_system_executor(boost::asio::get_associated_executor(handler));
    } else {
      (void)handler;
      return false;
    }
  }

  /// Completes the call with `code` before any strategy sees it: a strategy of the pipeline (or
  /// the caller's deadline) delivers its decisions on the call's executor and the handler has
  /// none (`errc::executor_required`: a retry or a breaker outside would otherwise count the
  /// refusal as a failure), or the caller's deadline had passed (`errc::timeout`). Posted, like
  /// every completion decided during the initiation; a handler without an executor runs on the
  /// system executor.
  static void refuse(Handler handler, errc code) {
    if constexpr (may_have_diagnostics<Handler>) {
      if (Diagnostics* d = get_associated_diagnostics(handler)) {
        write_diagnostics(*d, make_error_code(code), std::nullopt);
      }
    }
    ErrorType err = error_argument<ErrorType>(make_error_code(code));
    std::apply(
        [&](auto&&... v) {
          boost::asio::post(boost::asio::append(std::move(handler), std::move(err),
                                                std::forward<decltype(v)>(v)...));
        },
        Values{});
  }

  void connect_caller() {
    caller_slot_ = boost::asio::get_associated_cancellation_slot(handler_);
    if (caller_slot_.is_connected())
      caller_slot_.template emplace<CallerCancellation>(CallerCancellation{this});
  }

  void invoke_operation() override { attempt_(StepHandler(this)); }

  using Child = AttemptCall<Attempt, Sig, executor_type>;
  CallBase* make_attempt(std::size_t first) override {
    // Attempts complete, and cancel each other, on the call's executor: without one they would
    // race on the system executor's threads.
    bool has_executor = has_own_executor<Handler>;
    if constexpr (std::is_same_v<executor_type, boost::asio::any_io_executor>) {
      has_executor = !holds_system_executor(get_executor());
    }
    if (!has_executor) {
      throw std::logic_error(
          "kevlar: Layer::start_attempt needs a completion handler with an associated executor "
          "(declare StrategyTraits::needs_executor)");
    }
    return Child::create(*this, first, get_executor(), keep_alive_);
  }
  void invoke_operation_for(CallBase& attempt) override {
    attempt_(typename Child::StepHandler(static_cast<Child*>(&attempt)));
  }
  void deliver() override {
    if (steps_.caller_deadline != nullptr) [[unlikely]] disarm_caller_deadline(true);
    if (caller_slot_.is_connected()) caller_slot_.clear();
    Handler handler(std::move(handler_));
    ErrorType err = make_error();
    if constexpr (may_have_diagnostics<Handler>) {
      if (Diagnostics* d = get_associated_diagnostics(handler)) {
        write_diagnostics(*d, code_of(err), outcome_.retry_after);
      }
    }
    Values values = values_.has_value() ? std::move(*values_) : Values{};
    const bool inside_initiation = tl_initiating_call == this;
    destroy();
    std::apply(
        [&](auto&&... v) {
          if (inside_initiation) {
            boost::asio::post(boost::asio::append(std::move(handler), std::move(err),
                                                  std::forward<decltype(v)>(v)...));
          } else {
            std::move(handler)(std::move(err), std::forward<decltype(v)>(v)...);
          }
        },
        std::move(values));
  }

  /// The error code a completion's first argument carries (Diagnostics::error).
  static boost::system::error_code code_of(const ErrorType& err) noexcept {
    if constexpr (std::is_same_v<ErrorType, boost::system::error_code>) {
      return err;
    } else {
      return error_of_exception(err);
    }
  }

  ErrorType make_error() {
    if constexpr (std::is_same_v<ErrorType, boost::system::error_code>) {
      switch (outcome_.kind) {
        case OutcomeKind::value:
          return {};
        case OutcomeKind::error:
          return outcome_.error;
        case OutcomeKind::exception:
          break;
      }
      boost::system::error_code ec = error_of_exception(outcome_.exception);
      return ec ? ec : make_error_code(errc::callback_exception);
    } else {
      switch (outcome_.kind) {
        case OutcomeKind::value:
          return nullptr;
        case OutcomeKind::exception:
          return outcome_.exception;
        case OutcomeKind::error:
          break;
      }
      return std::make_exception_ptr(Error(outcome_.error, outcome_.retry_after));
    }
  }

  void destroy() noexcept override {
    // A trampoline level this execution opened can no longer ask it.
    trampoline_forget(static_cast<const CallBase*>(this));
    if (caller_slot_.is_connected()) caller_slot_.clear();
    destroy_execution(this, get_allocator(), blocks_);
  }

  Handler handler_;
  Attempt attempt_;
  boost::asio::cancellation_slot caller_slot_;
  std::size_t blocks_;
};

}  // namespace kevlar::detail
