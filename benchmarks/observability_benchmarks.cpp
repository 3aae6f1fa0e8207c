// BM_Observability: timeout -> retry -> breaker (BM_Pipeline's shield, named "api") without
// observers, with two clock reads around each call (the floor under timing executions), with a
// do-nothing observer (the cost of being observed at all), with the metrics
// observer, and with the spdlog observer on a null sink; run them in one invocation with
// BM_Pipeline/timeout_retry_breaker, their unobserved baseline:
//   kevlar_benchmarks --benchmark_filter='BM_Pipeline/timeout_retry_breaker$|BM_Observability'
#include "bench_support.hpp"

#include <kevlar/metrics.hpp>
#include <kevlar/spdlog.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include <memory>

namespace {

using kevlar::bench::timeout_retry_breaker;

const kevlar::Shield& named() {
  static const kevlar::Shield s = timeout_retry_breaker().with_name("api");
  return s;
}

std::shared_ptr<spdlog::logger> null_logger(spdlog::level::level_enum level) {
  auto logger =
      std::make_shared<spdlog::logger>("bench", std::make_shared<spdlog::sinks::null_sink_mt>());
  logger->set_level(level);
  return logger;
}

void BM_Observability_unobserved(benchmark::State& state) {
  kevlar::bench::run_sync_calls(
      state, named(), "no event loop; no observer (compare BM_Pipeline/timeout_retry_breaker)");
}

/// The floor under any observer that reports an execution's duration: the unobserved shield plus
/// the two reads of the shield's clock a duration takes (one on entering the shield, one on
/// leaving it), done here around the call by hand. An observed shield cannot cost less than this.
void BM_Observability_clock_reads_control(benchmark::State& state) {
  const kevlar::Shield& shield = named();
  const kevlar::Clock& clock = shield.clock();
  int x = 0;
  kevlar::bench::AllocReport allocs;
  for (auto _ : state) {
    const kevlar::Clock::time_point started = clock.now();
    x = shield.execute([x] { return kevlar::bench::work(x); });
    benchmark::DoNotOptimize(x);
    benchmark::DoNotOptimize(clock.now() - started);
  }
  allocs.report(state);
  state.SetLabel(
      "no event loop; no observer, two Clock::now() around each call: the floor under timing "
      "executions (compare BM_Observability/unobserved and /metrics)");
}

/// A do-nothing observer that wants only ExecutionFinished: the cost of being observed at all
/// (the execution layer, its two clock reads, one event built and delivered).
class Noop final : public kevlar::Observer {
 public:
  void on_event(const kevlar::Event& e) override { benchmark::DoNotOptimize(&e); }
  [[nodiscard]] kevlar::EventKinds interests() const override {
    return kevlar::event_kinds<kevlar::ExecutionFinished>();
  }
};

void BM_Observability_noop_observer(benchmark::State& state) {
  kevlar::bench::run_sync_calls(state, named().observed_by(std::make_shared<Noop>()),
                                "no event loop; do-nothing observer of ExecutionFinished (compare "
                                "BM_Observability/unobserved)");
}

void BM_Observability_metrics(benchmark::State& state) {
  auto metrics = std::make_shared<kevlar::MetricsObserver>();
  kevlar::bench::run_sync_calls(
      state, named().observed_by(metrics),
      "no event loop; metrics observer (compare BM_Observability/unobserved)");
  benchmark::DoNotOptimize(metrics->snapshot());
}

void BM_Observability_spdlog_null_sink(benchmark::State& state) {
  // spdlog's default level (info): a successful call's events are debug and write nothing.
  auto log = std::make_shared<kevlar::SpdlogObserver>(null_logger(spdlog::level::info));
  kevlar::bench::run_sync_calls(
      state, named().observed_by(log),
      "no event loop; spdlog observer, null sink at info (compare BM_Observability/unobserved)");
}

void BM_Observability_spdlog_null_sink_debug(benchmark::State& state) {
  // At debug every event is logged: the summary keeps it to one line per kind and second, so this
  // measures the summary's bookkeeping on every event.
  auto log = std::make_shared<kevlar::SpdlogObserver>(null_logger(spdlog::level::debug));
  kevlar::bench::run_sync_calls(
      state, named().observed_by(log),
      "no event loop; spdlog observer, null sink at debug, summarised (compare "
      "BM_Observability/unobserved)");
}

}  // namespace

BENCHMARK(BM_Observability_unobserved)->Name("BM_Observability/unobserved");
BENCHMARK(BM_Observability_clock_reads_control)->Name("BM_Observability/clock_reads_control");
BENCHMARK(BM_Observability_noop_observer)->Name("BM_Observability/noop_observer");
BENCHMARK(BM_Observability_metrics)->Name("BM_Observability/metrics");
BENCHMARK(BM_Observability_spdlog_null_sink)->Name("BM_Observability/spdlog_null_sink");
BENCHMARK(BM_Observability_spdlog_null_sink_debug)->Name("BM_Observability/spdlog_null_sink_debug");
