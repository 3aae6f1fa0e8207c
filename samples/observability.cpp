// A failing dependency behind a shield that logs through spdlog and counts in metrics: the log
// lines show each decision (retries, the breaker opening, a rejection storm summarised, the
// breaker closing again) and the Prometheus text at the end shows the totals.
//
// Time is a ManualClock that the sample moves by hand (each call of the dependency takes 2 ms of
// it), so the output is the same on every run: the way to test code that uses kevlar.
//
//   cmake --preset release && cmake --build build/release --target kevlar_observability_sample
//   build/release/samples/kevlar_observability_sample
#include <kevlar/kevlar.hpp>
#include <kevlar/metrics.hpp>
#include <kevlar/prometheus.hpp>
#include <kevlar/spdlog.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

using namespace std::chrono_literals;

namespace {

/// The dependency: each call takes 2 ms; down for its first `down_for` calls, then healthy.
class Inventory {
 public:
  Inventory(std::shared_ptr<kevlar::ManualClock> clock, int down_for)
      : clock_(std::move(clock)), down_for_(down_for) {}
  int stock(const std::string& item) {
    clock_->advance(2ms);
    if (++calls_ <= down_for_) throw std::runtime_error("inventory: connection reset");
    return static_cast<int>(item.size()) * 10;
  }

 private:
  std::shared_ptr<kevlar::ManualClock> clock_;
  int down_for_;
  int calls_ = 0;
};

}  // namespace

int main() {
  // The application's logger: kevlar only writes to it (it never touches spdlog's registry).
  auto logger = std::make_shared<spdlog::logger>("app",
                                                 std::make_shared<spdlog::sinks::stdout_sink_st>());
  logger->set_pattern("[%l] %v");
  logger->set_level(spdlog::level::info);
  auto clock = kevlar::ManualClock::create();
  kevlar::SpdlogObserverOptions log_options;
  log_options.clock = clock;  // summary windows on the same clock
  auto log = std::make_shared<kevlar::SpdlogObserver>(logger, log_options);
  auto metrics = std::make_shared<kevlar::MetricsObserver>();

  kevlar::RetryOptions retry;
  retry.max_retries = 2;
  retry.backoff = kevlar::Backoff::none();
  kevlar::CircuitBreakerOptions breaker;
  breaker.consecutive_failures = 3;
  breaker.break_duration = 300ms;
  const kevlar::Shield shield = kevlar::Shield{}
                                    .with_name("inventory")
                                    .circuit_breaker(breaker)
                                    .retry(retry)
                                    .observed_by(log)
                                    .observed_by(metrics)
                                    .with_clock(clock);

  Inventory inventory(clock, 9);  // three calls of three attempts each fail
  const auto ask = [&](int i) {
    try {
      const int n = shield.execute([&] { return inventory.stock("widget"); });
      std::printf("call %2d: %d in stock\n", i, n);
    } catch (const kevlar::Error& e) {
      std::printf("call %2d: refused: %s\n", i, e.what());
    } catch (const std::exception& e) {
      std::printf("call %2d: failed: %s\n", i, e.what());
    }
  };

  std::printf("-- the dependency is down: retries, then the breaker opens\n");
  for (int i = 1; i <= 3; ++i) ask(i);
  std::printf("-- a burst while the circuit is open: one log line, the rest counted\n");
  for (int i = 4; i <= 20; ++i) ask(i);
  std::printf("-- after the break the dependency is back: a probe closes the circuit\n");
  clock->advance(350ms);
  for (int i = 21; i <= 23; ++i) ask(i);
  log->flush_summaries();  // the burst's "N more" lines

  std::printf("\n-- Prometheus exposition (what MetricsEndpoint serves on /metrics)\n");
  std::fputs(kevlar::prometheus::to_text(metrics->snapshot()).c_str(), stdout);
  return 0;
}
