// A downstream program using kevlar's integrations: the metrics observer (kevlar::kevlar), its
// Prometheus exposition (kevlar::prometheus), the spdlog observer (kevlar::spdlog) and the HTTP
// helpers (kevlar::http).
#include <kevlar/http.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/prometheus.hpp>
#include <kevlar/spdlog.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

int main() {
  auto metrics = std::make_shared<kevlar::MetricsObserver>();
  auto logger = std::make_shared<spdlog::logger>("consumer",
                                                 std::make_shared<spdlog::sinks::null_sink_mt>());
  auto log = std::make_shared<kevlar::SpdlogObserver>(logger);
  const kevlar::Shield shield =
      kevlar::Shield{}.with_name("consumer").retry(1).observed_by(metrics).observed_by(log);
  if (shield.execute([] { return 42; }) != 42) return 1;
  const std::string text = kevlar::prometheus::to_text(metrics->snapshot());
  const std::string want =
      "kevlar_executions_total{kevlar_shield_name=\"consumer\",kevlar_execution_outcome=\"success\"} 1";
  if (text.find(want) == std::string::npos) {
    std::fprintf(stderr, "consumer: the exposition lacks %s:\n%s", want.c_str(), text.c_str());
    return 1;
  }
  if (!kevlar::http::is_transient_status(503) ||
      kevlar::http::parse_retry_after("2", std::chrono::system_clock::now()) !=
          std::chrono::seconds(2)) {
    std::fprintf(stderr, "consumer: kevlar::http misjudged 503 or Retry-After: 2\n");
    return 1;
  }
  std::printf("kevlar observers consumer: ok\n");
  return 0;
}
