#include <kevlar/chaos.hpp>
#include <kevlar/detail/duration_check.hpp>
#include <kevlar/detail/duration_format.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <cmath>
#include <cstdio>
#include <list>

namespace kevlar {

const char* to_string(ChaosKind kind) noexcept {
  switch (kind) {
    case ChaosKind::latency:
      return "latency";
    case ChaosKind::fault:
      return "fault";
    case ChaosKind::outcome:
      return "outcome";
    case ChaosKind::behavior:
      return "behavior";
  }
  return "unknown";
}

namespace {

/// The golden-ratio increment of SplitMix64.
constexpr std::uint64_t golden_gamma = 0x9E3779B97F4A7C15ULL;

/// SplitMix64's output function.
std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

/// Seeds of strategies built without one: a process-wide golden-ratio sequence.
std::uint64_t next_default_seed() noexcept {
  static std::atomic<std::uint64_t> sequence{0x4B45564C4348414FULL};
  return mix64(sequence.fetch_add(golden_gamma, std::memory_order_relaxed));
}

/// One thread's scopes, innermost last: values, never pointers to scopes (a list: an entry's
/// address stays valid while other scopes come and go).
struct ScopeEntry {
  std::uint64_t token;
  ChaosScopeValues values;  ///< a copy: an entry never points into a scope
};
thread_local std::list<ScopeEntry> tl_scopes;
std::atomic<std::uint64_t> next_scope_token{1};

bool valid_rate(double rate) noexcept { return rate >= 0.0 && rate <= 1.0; }  // false for NaN

std::string format_rate(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  return buf;
}

/// The scope an execution's decision matches against: the one recorded in its context, else this
/// thread's (then recorded); nullptr when there is none.
const ChaosScopeValues* execution_scope(Context& context) {
  if (const ChaosScopeValues* recorded = context.properties().try_get(chaos_scope_key())) {
    return recorded;
  }
  const ChaosScopeValues* current = ChaosScope::current();
  if (current == nullptr) return nullptr;
  context.properties().set(chaos_scope_key(), *current);
  return context.properties().try_get(chaos_scope_key());
}

/// The scope recorded in the execution's context, else this thread's; records nothing.
const ChaosScopeValues* scope_of(Context& context) noexcept {
  if (const ChaosScopeValues* recorded = context.properties().try_get(chaos_scope_key())) {
    return recorded;
  }
  return ChaosScope::current();
}

bool matches(const std::optional<std::string>& wanted, const std::optional<std::string>& have) {
  return !wanted || (have && *have == *wanted);
}

std::string_view view_of(const ChaosScopeValues* scope,
                         std::optional<std::string> ChaosScopeValues::*member) noexcept {
  if (scope == nullptr || !(scope->*member)) return {};
  return *(scope->*member);
}

}  // namespace

// ---- scope ---------------------------------------------------------------------------------------

ChaosScope::ChaosScope(std::optional<std::string> operation, std::optional<std::string> environment)
    : values_{std::move(operation), std::move(environment)},
      token_(next_scope_token.fetch_add(1, std::memory_order_relaxed)) {
  if (const ChaosScopeValues* outer = current()) {
    if (!values_.operation) values_.operation = outer->operation;
    if (!values_.environment) values_.environment = outer->environment;
  }
  tl_scopes.push_back(ScopeEntry{token_, values_});
}

ChaosScope::~ChaosScope() {
  // Usually the innermost entry; out of order, only this scope's own entry goes. Destroyed on
  // another thread (which the docs forbid), it removes nothing there, and its thread keeps a copy
  // of its values, never a dangling one.
  for (auto it = tl_scopes.end(); it != tl_scopes.begin();) {
    --it;
    if (it->token == token_) {
      tl_scopes.erase(it);
      return;
    }
  }
}

const ChaosScopeValues* ChaosScope::current() noexcept {
  return tl_scopes.empty() ? nullptr : &tl_scopes.back().values;
}

const Key<ChaosScopeValues>& chaos_scope_key() {
  static const Key<ChaosScopeValues> key{"kevlar.chaos.scope"};
  return key;
}

void record_chaos_scope(Context& context, ChaosScopeValues values) {
  context.properties().set(chaos_scope_key(), std::move(values));
}

// ---- the decision --------------------------------------------------------------------------------

namespace detail {

ChaosCore::ChaosCore(const ChaosOptions& options, const char* owner)
    : options_(options), state_(options_.seed ? *options_.seed : next_default_seed()) {
  if (!valid_rate(options_.injection_rate)) {
    throw std::invalid_argument(std::string(owner) +
                                "::chaos.injection_rate must be between 0 and 1 (got " +
                                format_rate(options_.injection_rate) + ")");
  }
}

double ChaosCore::next_sample() noexcept {
  const std::uint64_t z =
      mix64(state_.fetch_add(golden_gamma, std::memory_order_relaxed) + golden_gamma);
  return static_cast<double>(z >> 11U) * 0x1.0p-53;
}

bool ChaosCore::decide(Layer& layer, Decision& d) {
  Context& context = layer.context();
  if (!options_.enabled) return false;
  // The execution's scope, recorded at its first decision by any enabled chaos strategy, so that
  // a strategy deciding later (after a wait, on another thread) sees the same one. Read again
  // below: a callback may add properties, which moves them.
  (void)execution_scope(context);
  if (options_.enabled_generator && !options_.enabled_generator(context)) return false;
  if (options_.predicate && !options_.predicate(context)) return false;
  if (options_.operation || options_.environment) {
    const ChaosScopeValues* scope = scope_of(context);
    if (scope == nullptr || !matches(options_.operation, scope->operation) ||
        !matches(options_.environment, scope->environment)) {
      return false;
    }
  }
  double rate = options_.injection_rate;
  if (options_.injection_rate_generator) {
    rate = options_.injection_rate_generator(context);
    if (!valid_rate(rate)) {
      throw std::invalid_argument(
          "kevlar chaos: injection_rate_generator returned " + format_rate(rate) +
          ", outside [0, 1]");
    }
  }
  d.rate = rate;
  if (rate <= 0.0) return false;
  if (rate >= 1.0) {
    d.sample = 0.0;
    return true;
  }
  d.sample = next_sample();
  return d.sample < rate;
}

void ChaosCore::notify(ChaosKind kind, Layer& layer, const Decision& d) const {
  // A copy: the hook may add properties to the context, which would move the recorded scope.
  ChaosScopeValues scope;
  if (const ChaosScopeValues* s = scope_of(layer.context())) scope = *s;
  const std::string_view operation = view_of(&scope, &ChaosScopeValues::operation);
  const std::string_view environment = view_of(&scope, &ChaosScopeValues::environment);
  if (options_.on_injected) {
    options_.on_injected(
        ChaosEvent{kind, layer.context(), operation, environment, d.rate, d.sample});
  }
  if (layer.wants<ChaosInjected>()) {
    layer.emit(ChaosInjected{kind, std::string(operation), std::string(environment)});
  }
}

std::string ChaosCore::describe_options() const {
  std::string out = "rate ";
  out += options_.injection_rate_generator ? std::string("dynamic")
                                           : format_rate(options_.injection_rate);
  if (options_.operation) out += ", operation " + *options_.operation;
  if (options_.environment) out += ", environment " + *options_.environment;
  if (options_.seed) out += ", seed " + std::to_string(*options_.seed);
  if (!options_.enabled) out += ", disabled";
  return out;
}

void check_chaos_outcome_options(bool has_result, bool has_generator) {
  if (has_result == has_generator) {
    throw std::invalid_argument(
        "kevlar::ChaosOutcomeOptions: set exactly one of result and result_generator");
  }
}

}  // namespace detail

// ---- latency -------------------------------------------------------------------------------------

ChaosLatencyStrategy::ChaosLatencyStrategy(ChaosLatencyOptions options)
    : options_(std::move(options)), core_(options_.chaos, "kevlar::ChaosLatencyOptions") {
  detail::check_duration(options_.delay, ChaosLatencyOptions::max_delay,
                         detail::DurationFloor::zero, "kevlar::ChaosLatencyOptions::delay");
}

std::string ChaosLatencyStrategy::describe() const {
  return "ChaosLatency(" +
         (options_.delay_generator ? std::string("dynamic")
                                   : detail::format_duration(options_.delay)) +
         ", " + core_.describe_options() + ")";
}

Step ChaosLatencyStrategy::on_start(Layer& layer) {
  if (!core_.enabled()) return Step::run_inner;  // the disabled path: one test
  detail::ChaosCore::Decision d;
  if (!core_.decide(layer, d)) return Step::run_inner;
  Clock::duration delay = options_.delay;
  if (options_.delay_generator) {
    delay = options_.delay_generator(layer.context());
    detail::check_duration(delay, ChaosLatencyOptions::max_delay, detail::DurationFloor::zero,
                           "kevlar::ChaosLatencyOptions::delay_generator",
                           detail::DurationRole::result);
  }
  core_.notify(ChaosKind::latency, layer, d);
  if (delay == Clock::duration::zero()) return Step::run_inner;
  return layer.wait_for(delay);
}

Step ChaosLatencyStrategy::on_wait_complete(Layer& layer, const boost::system::error_code& ec) {
  if (ec) {
    layer.outcome().set_error(ec);
    return Step::complete;
  }
  if (detail::cancelled_meanwhile(layer)) {  // as the wait ended
    layer.outcome().set_error(boost::asio::error::operation_aborted);
    return Step::complete;
  }
  return Step::run_inner;
}

// ---- fault ---------------------------------------------------------------------------------------

ChaosFaultStrategy::ChaosFaultStrategy(ChaosFaultOptions options)
    : options_(std::move(options)), core_(options_.chaos, "kevlar::ChaosFaultOptions") {
  const int set = (options_.error ? 1 : 0) + (options_.exception ? 1 : 0) +
                  (options_.fault_generator ? 1 : 0);
  if (set > 1) {
    throw std::invalid_argument(
        "kevlar::ChaosFaultOptions: set at most one of error, exception and fault_generator");
  }
  if (set == 0) options_.exception = std::make_exception_ptr(ChaosInjectedError());
}

std::string ChaosFaultStrategy::describe() const {
  return "ChaosFault(" + core_.describe_options() + ")";
}

Step ChaosFaultStrategy::on_start(Layer& layer) {
  if (!core_.enabled()) return Step::run_inner;
  detail::ChaosCore::Decision d;
  if (!core_.decide(layer, d)) return Step::run_inner;
  ChaosFault fault{options_.error, options_.exception};
  if (options_.fault_generator) {
    fault = options_.fault_generator(layer.context());
    if (static_cast<bool>(fault.error) == static_cast<bool>(fault.exception)) {
      throw std::logic_error(
          "kevlar chaos: fault_generator must return a fault with exactly one of error and "
          "exception set");
    }
  }
  core_.notify(ChaosKind::fault, layer, d);
  if (fault.exception) {
    layer.outcome().set_exception(std::move(fault.exception));
  } else {
    layer.outcome().set_error(fault.error);
  }
  return Step::complete;
}

// ---- behavior ------------------------------------------------------------------------------------

ChaosBehaviorStrategy::ChaosBehaviorStrategy(ChaosBehaviorOptions options)
    : options_(std::move(options)), core_(options_.chaos, "kevlar::ChaosBehaviorOptions") {}

std::string ChaosBehaviorStrategy::describe() const {
  return "ChaosBehavior(" + core_.describe_options() + ")";
}

StrategyTraits ChaosBehaviorStrategy::strategy_traits() const noexcept {
  StrategyTraits t;
  t.needs_executor = core_.enabled() && options_.behavior.is_coroutine();
  return t;
}

Step ChaosBehaviorStrategy::start(Layer& layer, Frame& f) {
  if (!core_.enabled() || !options_.behavior) return Step::run_inner;
  detail::ChaosCore::Decision d;
  if (!core_.decide(layer, d)) return Step::run_inner;
  core_.notify(ChaosKind::behavior, layer, d);
  if (options_.behavior.is_function()) {
    options_.behavior.function()(layer.context());
    return Step::run_inner;
  }
  (void)f;
  return layer.await(options_.behavior.coroutine()(layer.context()));
}

Step ChaosBehaviorStrategy::wait_complete(Layer& layer, Frame& f,
                                          const boost::system::error_code& ec) {
  (void)f;
  if (ec) {  // the behaviour threw: its exception is the outcome
    detail::report_cancelled_hook(layer);
    return Step::complete;
  }
  if (detail::cancelled_meanwhile(layer)) {  // a deadline, stop request or cancellation passed meanwhile
    layer.outcome().set_error(boost::asio::error::operation_aborted);
    return Step::complete;
  }
  return Step::run_inner;
}

// ---- scope capture -------------------------------------------------------------------------------

Step ChaosScopeCaptureStrategy::on_start(Layer& layer) {
  Context& context = layer.context();
  if (!context.properties().contains(chaos_scope_key())) {
    if (const ChaosScopeValues* current = ChaosScope::current()) {
      context.properties().set(chaos_scope_key(), *current);
    }
  }
  return Step::run_inner;
}

// ---- builders ------------------------------------------------------------------------------------

namespace chaos {

BasicShield latency(ChaosLatencyOptions options) {
  return BasicShield{}.use(std::make_shared<ChaosLatencyStrategy>(std::move(options)));
}

BasicShield fault(ChaosFaultOptions options) {
  return BasicShield{}.use(std::make_shared<ChaosFaultStrategy>(std::move(options)));
}

BasicShield behavior(ChaosBehaviorOptions options) {
  return BasicShield{}.use(std::make_shared<ChaosBehaviorStrategy>(std::move(options)));
}

BasicShield capture_scope() { return BasicShield{}.use(std::make_shared<ChaosScopeCaptureStrategy>()); }

}  // namespace chaos

}  // namespace kevlar
