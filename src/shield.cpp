#include <kevlar/detail/observer_layer.hpp>
#include <kevlar/basic_shield.hpp>

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace kevlar {
namespace {

const detail::PipelineView& empty_view() {
  static const detail::PipelineView view{nullptr, 0, 0, Clock::steady().get()};
  return view;
}

std::size_t round_up(std::size_t n) {
  constexpr std::size_t a = alignof(std::max_align_t);
  return (n + a - 1) / a * a;
}

/// A layer's hooks: those BasicShield::use saw, less the callbacks the strategy's traits decline.
detail::LayerHooks hooks_for(detail::LayerHooks hooks, const StrategyTraits& traits) noexcept {
  if (!traits.needs_inner_complete) hooks.inner_complete = nullptr;
  if (!traits.needs_finish) hooks.finish = nullptr;
  return hooks;
}

/// Recomputes the engine's view of `p` and checks the chain's rules.
void seal(detail::Pipeline& p) {
  const std::size_t n = p.strategies.size();
  p.observer_set = p.observers.empty() ? nullptr
                                       : std::make_shared<const detail::ObserverSet>(
                                             p.observers, p.name, p.strategies);
  const EventKinds wanted = p.observer_set ? p.observer_set->interests() : EventKinds{};
  const std::uint32_t interests = wanted.mask();
  // An observed shield has the engine time its executions (if an observer wants
  // ExecutionFinished) and runs kevlar's attempt observer innermost (if one wants AttemptStarted);
  // a shield without observers does neither, and every layer's interests are 0 (no event is
  // built).
  const bool observes_executions = wanted.contains(event_kind<ExecutionFinished>());
  const bool attempt_layer = wanted.contains(event_kind<AttemptStarted>());
  p.layers.clear();
  p.layers.reserve(n + 1);
  std::size_t offset = 0;
  bool needs_executor = false;
  bool asynchronous_only = false;
  std::size_t queue_waiters_end = 0;
  const auto add_observer_layer = [&](Strategy& s) {
    const StrategyTraits t = s.traits();
    const detail::LayerHooks hooks = hooks_for({}, t);
    p.layers.push_back(detail::PipelineLayer{&s, Clause::default_clause().get(), offset, false,
                                             true, interests, hooks.inner_complete, hooks.finish});
    offset += round_up(t.frame_size);
  };
  std::vector<StrategyTraits> traits;
  traits.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    traits.push_back(p.strategies[i]->traits());
    const detail::LayerHooks hooks = hooks_for(p.hooks[i], traits.back());
    p.layers.push_back(detail::PipelineLayer{p.strategies[i].get(), p.clauses[i].get(), offset,
                                             p.clauses[i]->judges_results(), false, interests,
                                             hooks.inner_complete, hooks.finish});
    offset += round_up(traits.back().frame_size);
    needs_executor = needs_executor || traits.back().needs_executor;
    asynchronous_only = asynchronous_only || traits.back().asynchronous_only;
    if (traits.back().waits_in_queue) queue_waiters_end = i + 1;
  }
  if (attempt_layer) add_observer_layer(detail::attempt_observer());
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (traits[i].stateful && p.strategies[i] == p.strategies[j]) {
        std::ostringstream msg;
        msg << "kevlar::Shield: the chain contains the same stateful strategy instance ("
            << p.strategies[i]->describe() << ") at positions " << j + 1 << " and " << i + 1
            << "; one stateful instance used twice in one chain would count every call twice. "
               "Create a second instance instead.";
        throw std::invalid_argument(msg.str());
      }
      if (traits[i].role == StrategyRole::fallback && traits[j].role == StrategyRole::reactive &&
          p.clauses[i] == p.clauses[j]) {
        std::ostringstream msg;
        msg << "kevlar::Shield: the chain places " << p.strategies[i]->describe() << " inside "
            << p.strategies[j]->describe()
            << " with the same handling clause, so the fallback recovers every failure before "
            << p.strategies[j]->describe()
            << " sees one. Add the fallback first (the first strategy is the outermost), or give "
               "it "
               "its own clause with when().";
        throw std::invalid_argument(msg.str());
      }
    }
  }
  p.view.observers = p.observer_set ? &p.observer_set : nullptr;
  p.view.layers = p.layers.data();
  p.view.size = p.layers.size();
  p.view.frame_bytes = offset;
  p.view.needs_executor = needs_executor;
  p.view.asynchronous_only = asynchronous_only;
  p.view.queue_waiters_end = queue_waiters_end;
  p.view.queue_wait_bytes = queue_waiters_end != 0 ? detail::queue_wait_size : 0;
  p.view.clock = p.clock ? p.clock.get() : Clock::steady().get();
  p.view.name = p.name ? &*p.name : nullptr;
  p.view.observes_executions = observes_executions;
  p.view.plain_synchronous = !p.layers.empty() && !asynchronous_only && !observes_executions &&
                             offset <= detail::sync_inline_frame_bytes;
  p.bypasses_engine = p.layers.empty() && !observes_executions;
}

std::shared_ptr<detail::Pipeline> copy_of(const std::shared_ptr<const detail::Pipeline>& p) {
  return p ? detail::make_leased<detail::Pipeline>(*p) : detail::make_leased<detail::Pipeline>();
}

}  // namespace

const detail::Pipeline& BasicShield::empty_pipeline() noexcept {
  // Never destroyed: leases on it may outlive every shield.
  static const detail::Pipeline* const p = [] {
    auto* pipeline = new detail::Pipeline();
    seal(*pipeline);
    return pipeline;
  }();
  return *p;
}

const detail::PipelineView& BasicShield::view() const noexcept {
  return p_ ? p_->view : empty_view();
}

const std::optional<std::string>& BasicShield::name() const noexcept {
  static const std::optional<std::string> none;
  return p_ ? p_->name : none;
}

void BasicShield::refuse_synchronous() const {
  std::string names;
  for (const std::shared_ptr<Strategy>& s : p_->strategies) {
    if (!s->traits().asynchronous_only) continue;
    if (!names.empty()) names += ", ";
    names += s->describe();
  }
  throw std::logic_error("kevlar::Shield::execute: " + names +
                         " runs several attempts at once, which needs an asynchronous execution "
                         "(Shield::execute_async)");
}

std::vector<std::shared_ptr<Strategy>> BasicShield::strategies() const {
  return p_ ? p_->strategies : std::vector<std::shared_ptr<Strategy>>{};
}

BasicShield BasicShield::use(std::shared_ptr<Strategy> strategy) const {
  return use_hooked(std::move(strategy), {});
}

BasicShield BasicShield::use_hooked(std::shared_ptr<Strategy> strategy, detail::LayerHooks hooks) const {
  if (!strategy) throw std::invalid_argument("kevlar::BasicShield::use: the strategy is null");
  auto p = copy_of(p_);
  std::shared_ptr<const Clause> own = strategy->traits().clause;
  p->clauses.push_back(own ? std::move(own) : p->ambient ? p->ambient : Clause::default_clause());
  p->hooks.push_back(hooks);
  p->strategies.push_back(std::move(strategy));
  seal(*p);
  return BasicShield(std::move(p));
}

BasicShield BasicShield::when(Clause clause) const {
  auto p = copy_of(p_);
  p->ambient = std::make_shared<const Clause>(std::move(clause));
  seal(*p);
  return BasicShield(std::move(p));
}

BasicShield BasicShield::with_name(std::string name) const {
  auto p = copy_of(p_);
  p->name = std::move(name);
  seal(*p);
  return BasicShield(std::move(p));
}

BasicShield BasicShield::observed_by(std::shared_ptr<Observer> observer) const {
  if (!observer) throw std::invalid_argument("kevlar::BasicShield::observed_by: the observer is null");
  auto p = copy_of(p_);
  p->observers.push_back(std::move(observer));
  seal(*p);
  return BasicShield(std::move(p));
}

std::uint64_t BasicShield::observer_failures() const noexcept {
  return p_ && p_->observer_set ? p_->observer_set->failures() : 0;
}

std::exception_ptr BasicShield::first_observer_failure() const {
  return p_ && p_->observer_set ? p_->observer_set->first_failure() : nullptr;
}

BasicShield BasicShield::with_clock(std::shared_ptr<const Clock> clock) const {
  if (!clock) throw std::invalid_argument("kevlar::BasicShield::with_clock: the clock is null");
  auto p = copy_of(p_);
  p->clock = std::move(clock);
  seal(*p);
  return BasicShield(std::move(p));
}

BasicShield BasicShield::wrap(const BasicShield& inner) const {
  if (!inner.p_) return *this;
  if (!p_) return inner;
  auto p = copy_of(p_);
  p->strategies.insert(p->strategies.end(), inner.p_->strategies.begin(),
                       inner.p_->strategies.end());
  p->hooks.insert(p->hooks.end(), inner.p_->hooks.begin(), inner.p_->hooks.end());
  p->clauses.insert(p->clauses.end(), inner.p_->clauses.begin(), inner.p_->clauses.end());
  if (!p->name) p->name = inner.p_->name;
  for (const std::shared_ptr<Observer>& o : inner.p_->observers) {  // one delivery per observer
    if (std::find(p->observers.begin(), p->observers.end(), o) == p->observers.end()) {
      p->observers.push_back(o);
    }
  }
  if (!p->clock) p->clock = inner.p_->clock;
  if (inner.p_->ambient) p->ambient = inner.p_->ambient;
  seal(*p);
  return BasicShield(std::move(p));
}

BasicShield BasicShield::compose(std::initializer_list<BasicShield> shields) {
  BasicShield result;
  for (const BasicShield& s : shields) result = result.wrap(s);
  return result;
}

std::string BasicShield::describe() const {
  std::string out;
  if (p_ && p_->name) out = *p_->name + ": ";
  if (empty()) return out + "(empty)";
  for (std::size_t i = 0; i < p_->strategies.size(); ++i) {
    if (i != 0) out += " -> ";
    out += p_->strategies[i]->describe();
  }
  return out;
}

}  // namespace kevlar
