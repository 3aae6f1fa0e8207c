// kevlar's outage demo: a real HTTP dependency on 127.0.0.1 goes through an outage (healthy,
// slow, failing, recovering) while two clients send it the same load, one directly and one
// through a kevlar shield (kevlar::http's standard pipeline plus a concurrency limit). A live
// table shows both once a second; the end compares them and draws a chart. The protected
// client's metrics are served on /metrics while it runs.
//
//   ./tools/run-demo.sh [flags]       (or: build/release/samples/kevlar_outage_demo --help)
#include "dependency.hpp"
#include "load.hpp"
#include "options.hpp"
#include "report.hpp"

#include <kevlar/metrics.hpp>
#include <kevlar/prometheus.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address_v4.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace outage_demo;
using namespace std::chrono_literals;

namespace {

/// The slow phase keeps a connection open per waiting call on both ends: allow as many
/// descriptors as the system lets this process have.
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

/// Redraw the table in place only on a terminal wide enough for its rows (a wrapped row would
/// break the redraw): plain lines otherwise.
bool on_terminal(const DemoOptions& options) {
  const char* term = std::getenv("TERM");
  if (options.plain || isatty(STDOUT_FILENO) == 0 || term == nullptr ||
      std::string(term) == "dumb") {
    return false;
  }
  winsize size{};
  return ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col >= LiveTable::width;
}

/// Once a second from t0 until the load is done: the calls completed during the second, and what
/// the shield's counters gained.
asio::awaitable<void> tick(std::chrono::steady_clock::time_point t0, const Load& load,
                           const kevlar::MetricsObserver& metrics, LiveTable& table,
                           const bool& done, kevlar::prometheus::MetricsEndpoint& endpoint) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::array<std::size_t, client_count> seen{};
  ShieldCounters before;
  for (int second = 1;; ++second) {
    timer.expires_at(t0 + std::chrono::seconds(second));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    std::array<Stats, client_count> last;
    std::array<int, client_count> in_flight{};
    for (std::size_t c = 0; c < client_count; ++c) {
      const auto& calls = load.records(static_cast<Client>(c));
      last[c] = stats_of(std::span(calls).subspan(seen[c]));
      seen[c] = calls.size();
      in_flight[c] = load.in_flight(static_cast<Client>(c));
    }
    const ShieldCounters now = read_counters(metrics.snapshot());
    ShieldCounters delta = now;
    delta.retries -= before.retries;
    delta.timeouts -= before.timeouts;
    delta.rejected_open -= before.rejected_open;
    delta.rejected_limit -= before.rejected_limit;
    before = now;
    table.update(static_cast<double>(second), last, in_flight, delta, now);
    if (done) break;
  }
  endpoint.stop();
}

int run(const DemoOptions& options) {
  raise_descriptor_limit();
  const std::filesystem::path out = options.out;
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out)) {
    std::fprintf(stderr, "kevlar_outage_demo: cannot create the folder %s: %s\n",
                 out.string().c_str(), ec ? ec.message().c_str() : "not a folder");
    return 1;
  }

  asio::io_context ioc{1};
  auto metrics = std::make_shared<kevlar::MetricsObserver>();
  Dependency dependency(options);
  const kevlar::Shield shield = protected_shield(options.seed, metrics);
  Load load(ioc, options, dependency.endpoint(), shield);
  std::unique_ptr<kevlar::prometheus::MetricsEndpoint> endpoint;
  try {
    endpoint = std::make_unique<kevlar::prometheus::MetricsEndpoint>(
        ioc.get_executor(), metrics,
        asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), options.metrics_port));
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "kevlar_outage_demo: cannot serve /metrics on 127.0.0.1:%u: %s\n",
                 static_cast<unsigned>(options.metrics_port), e.code().message().c_str());
    return 1;
  }

  const auto& s = options.schedule;
  std::printf("kevlar outage demo: %d calls per second from each client for %.1f s\n", options.rate,
              std::chrono::duration<double>(s.total()).count());
  std::printf(
      "  phases: healthy %.1f s, slow %.1f s (answers after %lld ms), failing %.1f s "
      "(503s and dropped connections), recovering %.1f s\n",
      std::chrono::duration<double>(s.lengths[0]).count(),
      std::chrono::duration<double>(s.lengths[1]).count(),
      static_cast<long long>(options.slow_latency.count()),
      std::chrono::duration<double>(s.lengths[2]).count(),
      std::chrono::duration<double>(s.lengths[3]).count());
  std::printf("  dependency: http://%s:%u/  (seed %llu)\n",
              dependency.endpoint().address().to_string().c_str(),
              static_cast<unsigned>(dependency.endpoint().port()),
              static_cast<unsigned long long>(options.seed));
  const auto where = endpoint->local_endpoint();
  std::printf("  protected client's metrics: http://%s:%u/metrics\n",
              where.address().to_string().c_str(), static_cast<unsigned>(where.port()));
  std::printf("  protected client's shield: %s\n\n", shield.describe().c_str());
  std::fflush(stdout);

  LiveTable table(options, on_terminal(options), stdout);
  bool done = false;
  const auto t0 = std::chrono::steady_clock::now() + 50ms;
  dependency.start(t0);
  load.start(t0, [&done] { done = true; });
  asio::co_spawn(ioc, tick(t0, load, *metrics, table, done, *endpoint), asio::detached);
  ioc.run();
  dependency.stop();

  RunResult result;
  for (std::size_t c = 0; c < client_count; ++c) {
    result.calls[c] = load.records(static_cast<Client>(c));
    for (std::size_t p = 0; p < phase_count; ++p) {
      result.reached[c][p] = dependency.reached(static_cast<Client>(c), static_cast<Phase>(p));
    }
  }
  const kevlar::MetricsSnapshot snapshot = metrics->snapshot();
  result.counters = read_counters(snapshot);
  std::printf("\n%s\n", summary_text(options, result).c_str());
  {
    std::ofstream prom(out / "metrics.prom");
    prom << kevlar::prometheus::to_text(snapshot);
    if (!prom) {
      std::fprintf(stderr, "kevlar_outage_demo: cannot write %s\n",
                   (out / "metrics.prom").string().c_str());
      return 1;
    }
  }
  try {
    const std::filesystem::path png = write_chart(out, options, result);
    std::printf("chart: %s\n", png.string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kevlar_outage_demo: %s\n", e.what());
    return 1;
  }
  std::printf("data: %s, final metrics: %s\n", (out / "outage_demo.csv").string().c_str(),
              (out / "metrics.prom").string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<DemoOptions> options;
  try {
    options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kevlar_outage_demo: %s\n\n%s", e.what(), usage().c_str());
    return 2;
  }
  if (!options) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    return run(*options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kevlar_outage_demo: %s\n", e.what());
    return 1;
  }
}
