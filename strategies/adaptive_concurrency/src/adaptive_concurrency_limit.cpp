#include <kevlar/adaptive_concurrency_limit.hpp>

#include <atomic>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kevlar {
namespace {

using Frame = detail::AdaptiveLimiterFrame;
static_assert(std::is_standard_layout_v<Frame> && offsetof(Frame, base) == 0,
              "the static limiter's rejection path reads its frame at the layer's frame address");

std::unique_ptr<LimitAlgorithm> make_algorithm(const AdaptiveLimitOptions& o) {
  if (o.custom_algorithm) {
    std::unique_ptr<LimitAlgorithm> a = o.custom_algorithm();
    if (a == nullptr) {
      throw std::invalid_argument(
          "kevlar::AdaptiveLimitOptions::custom_algorithm returned a null algorithm");
    }
    return a;
  }
  return std::visit(
      [](const auto& options) -> std::unique_ptr<LimitAlgorithm> {
        using T = std::decay_t<decltype(options)>;
        if constexpr (std::is_same_v<T, AimdOptions>) {
          return std::make_unique<AimdLimit>(options);
        } else if constexpr (std::is_same_v<T, VegasOptions>) {
          return std::make_unique<VegasLimit>(options);
        } else {
          return std::make_unique<GradientLimit>(options);
        }
      },
      o.algorithm);
}

}  // namespace

namespace detail {

std::uint32_t seed_adaptive_limit_draw() noexcept {
  // Each thread starts its own sequence (a Weyl sequence of golden-ratio steps, never 0).
  static std::atomic<std::uint32_t> next{0x9e3779b9U};
  std::uint32_t seed = next.fetch_add(0x9e3779b9U, std::memory_order_relaxed);
  return seed != 0 ? seed : 0x2545f491U;
}

}  // namespace detail

namespace {

std::uint32_t sample_mask(int one_in) {
  if (one_in < 1 || one_in > 1024 || (one_in & (one_in - 1)) != 0) {
    throw std::invalid_argument(
        "kevlar::AdaptiveLimitOptions::sample_one_in must be a power of two from 1 to 1024 (got " +
        std::to_string(one_in) + ")");
  }
  return static_cast<std::uint32_t>(one_in - 1);
}

AdaptiveLimitSettings settings_of(const AdaptiveLimitOptions& o) {
  if (static_cast<long long>(o.max_limit) > LimiterLedger::max_count) {
    std::ostringstream msg;
    msg << "kevlar::AdaptiveLimitOptions::max_limit must be at most " << LimiterLedger::max_count
        << " (got " << o.max_limit << ")";
    throw std::invalid_argument(msg.str());
  }
  return {o.initial_limit, o.min_limit, o.max_limit, o.window, o.min_window_samples};
}

ConcurrencyLimitOptions limiter_options(const AdaptiveLimitOptions& o) {
  ConcurrencyLimitOptions l;
  l.max_concurrency = o.initial_limit;
  l.max_queue = o.max_queue;
  l.on_rejected = o.on_rejected;
  return l;
}

bool judges_results(const AdaptiveLimitOptions& o) {
  return (o.dropped && o.dropped->judges_results()) || (o.ignored && o.ignored->judges_results());
}

}  // namespace

AdaptiveConcurrencyLimitStrategy::AdaptiveConcurrencyLimitStrategy(AdaptiveLimitOptions options)
    : options_(std::move(options)),
      judges_results_(judges_results(options_)),
      sample_mask_(sample_mask(options_.sample_one_in)),
      controller_(settings_of(options_), make_algorithm(options_)),
      limiter_(limiter_options(options_)) {}

std::string AdaptiveConcurrencyLimitStrategy::describe() const {
  std::ostringstream out;
  out << "AdaptiveConcurrencyLimit(" << controller_.algorithm().describe() << ", limit "
      << controller_.limit() << " in [" << options_.min_limit << ", " << options_.max_limit << "]";
  if (options_.max_queue > 0) out << ", queue " << options_.max_queue;
  out << ")";
  return out.str();
}

LimitSample AdaptiveConcurrencyLimitStrategy::classify(Layer& layer) const noexcept {
  const OutcomeRef outcome = layer.outcome();
  try {
    if (options_.ignored && options_.ignored->handles(outcome)) return LimitSample::ignored;
    if (options_.dropped && options_.dropped->handles(outcome)) return LimitSample::dropped;
  } catch (...) {
    // A clause's predicate that throws fails the call with its exception, as in every strategy
    // that evaluates a clause; the sample says nothing.
    layer.outcome().set_exception(std::current_exception());
    return LimitSample::ignored;
  }
  if (!outcome.failed()) return LimitSample::success;
  if (outcome.is_cancellation()) return LimitSample::ignored;
  const boost::system::error_code ec =
      outcome.has_error() ? outcome.error() : detail::error_of_exception(outcome.exception());
  if (ec.category() == error_category()) {
    switch (static_cast<errc>(ec.value())) {
      case errc::timeout:
      case errc::rate_limited:
      case errc::concurrency_limit_exceeded:
      case errc::circuit_open:
      case errc::isolated:
        return LimitSample::dropped;  // overload, or a dependency cut off further in
      default:
        return LimitSample::ignored;  // closed, or the caller's own misuse: not the dependency
    }
  }
  // Any other failure came back from the dependency: its time is a measurement like a success's.
  return LimitSample::success;
}

void AdaptiveConcurrencyLimitStrategy::record_untimed(Layer& layer) noexcept {
  const LimitSample kind = classify(layer);
  if (kind == LimitSample::success) return;
  controller_.record(kind, Clock::duration{}, 0);
  if (kind != LimitSample::dropped) return;
  const Clock::time_point now = layer.clock().now();
  if (controller_.due(now)) close_window(layer, now);
}

[[gnu::noinline, gnu::cold]] void AdaptiveConcurrencyLimitStrategy::close_window(
    Layer& layer, Clock::time_point now) noexcept {
  std::optional<LimitChange> change;
  try {
    // The resize runs under the window lock: two windows closing back to back resize in order.
    // The controller's bounds lie within the ledger's, so the resize cannot refuse them.
    change = controller_.close_window(
        now,
        [](void* limiter, const LimitChange& c) noexcept {
          static_cast<ConcurrencyLimitStrategy*>(limiter)->set_max_concurrency(
              static_cast<int>(c.new_limit));
        },
        &limiter_);
  } catch (...) {
    return;  // a custom algorithm threw: that window is lost, the limit stays
  }
  if (!change) return;
  const LimitChanged event{change->old_limit,  change->new_limit,      change->reason,
                           change->window.average_rtt, change->window.samples, change->window.dropped};
  if (layer.wants<LimitChanged>()) layer.emit(event);
  if (options_.on_limit_changed) {
    try {
      options_.on_limit_changed(event);
    } catch (...) {  // documented: swallowed
    }
  }
}

std::shared_ptr<AdaptiveConcurrencyLimitStrategy> adaptive_concurrency_limit(
    AdaptiveLimitOptions options) {
  return std::make_shared<AdaptiveConcurrencyLimitStrategy>(std::move(options));
}

}  // namespace kevlar
