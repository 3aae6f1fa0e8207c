// The Prometheus exposition, line by line and through promtool; the /metrics endpoint scraped by
// curl over loopback while calls run.
#include <kevlar/chaos.hpp>
#include <kevlar/kevlar.hpp>
#include <kevlar/prometheus.hpp>

#include <gtest/gtest.h>
#include <test_options.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>
#include <utility>

namespace kevlar {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

/// Runs `command` with /bin/sh; returns its exit status and what it wrote to stdout.
std::pair<int, std::string> run(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed: " + command);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// A path of this process's own under the test temp directory (parallel suites share /tmp).
std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kevlar_" + std::to_string(::getpid()) + "_" + name;
}

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

/// promtool's verdict on `text`: its exit status and its output (empty when the text is clean).
std::pair<int, std::string> promtool_check(const std::string& text, const std::string& name) {
  const std::string path = temp_file(name, text);
  return run(std::string(KEVLAR_PROMTOOL) + " check metrics < " + path + " 2>&1");
}

RetryOptions one_retry() { return test::constant_retries(1, 0ms); }

/// A known workload: one call of 50 ms that succeeds, one that fails twice.
std::shared_ptr<MetricsObserver> known_workload(std::shared_ptr<CircuitBreaker>& breaker) {
  MetricsOptions o;
  o.duration_buckets = {0.1, 1};
  auto metrics = std::make_shared<MetricsObserver>(o);
  auto clock = ManualClock::create();
  breaker = CircuitBreaker::create(test::consecutive_breaker(5, 10s));
  const Shield shield =
      Shield{}.with_name("api").retry(one_retry()).use(breaker).observed_by(metrics).with_clock(clock);
  EXPECT_EQ(shield.execute([&] {
    clock->advance(50ms);
    return 1;
  }),
            1);
  EXPECT_THROW(shield.execute([]() -> int { throw std::runtime_error("down"); }),
               std::runtime_error);
  return metrics;
}

TEST(Prometheus, TheExpositionOfAKnownWorkload) {
  std::shared_ptr<CircuitBreaker> breaker;
  const auto metrics = known_workload(breaker);
  const std::string expected =
      R"(# HELP kevlar_executions_total Public executions of the shield that completed, by final outcome.
# TYPE kevlar_executions_total counter
kevlar_executions_total{kevlar_shield_name="api",kevlar_execution_outcome="success"} 1
kevlar_executions_total{kevlar_shield_name="api",kevlar_execution_outcome="failure"} 1
# HELP kevlar_execution_duration_seconds Time from entering the shield to the final outcome.
# TYPE kevlar_execution_duration_seconds histogram
kevlar_execution_duration_seconds_bucket{kevlar_shield_name="api",kevlar_execution_outcome="success",le="0.1"} 1
kevlar_execution_duration_seconds_bucket{kevlar_shield_name="api",kevlar_execution_outcome="success",le="1"} 1
kevlar_execution_duration_seconds_bucket{kevlar_shield_name="api",kevlar_execution_outcome="success",le="+Inf"} 1
kevlar_execution_duration_seconds_sum{kevlar_shield_name="api",kevlar_execution_outcome="success"} 0.05
kevlar_execution_duration_seconds_count{kevlar_shield_name="api",kevlar_execution_outcome="success"} 1
kevlar_execution_duration_seconds_bucket{kevlar_shield_name="api",kevlar_execution_outcome="failure",le="0.1"} 1
kevlar_execution_duration_seconds_bucket{kevlar_shield_name="api",kevlar_execution_outcome="failure",le="1"} 1
kevlar_execution_duration_seconds_bucket{kevlar_shield_name="api",kevlar_execution_outcome="failure",le="+Inf"} 1
kevlar_execution_duration_seconds_sum{kevlar_shield_name="api",kevlar_execution_outcome="failure"} 0
kevlar_execution_duration_seconds_count{kevlar_shield_name="api",kevlar_execution_outcome="failure"} 1
# HELP kevlar_retries_total Retries decided, counted before their backoff.
# TYPE kevlar_retries_total counter
kevlar_retries_total{kevlar_shield_name="api"} 1
# HELP kevlar_timeouts_total Timeouts whose budget elapsed.
# TYPE kevlar_timeouts_total counter
kevlar_timeouts_total{kevlar_shield_name="api"} 0
# HELP kevlar_fallbacks_total Handled failures a fallback replaced.
# TYPE kevlar_fallbacks_total counter
kevlar_fallbacks_total{kevlar_shield_name="api"} 0
# HELP kevlar_hedges_total Hedged attempts launched (the first attempt is not one).
# TYPE kevlar_hedges_total counter
kevlar_hedges_total{kevlar_shield_name="api"} 0
# HELP kevlar_retry_budget_exhausted_total Retries and hedges a retry budget refused, by kind of attempt.
# TYPE kevlar_retry_budget_exhausted_total counter
kevlar_retry_budget_exhausted_total{kevlar_shield_name="api",kevlar_attempt_kind="retry"} 0
kevlar_retry_budget_exhausted_total{kevlar_shield_name="api",kevlar_attempt_kind="hedge"} 0
# HELP kevlar_rejections_total Calls refused without running, by the kind of refusal.
# TYPE kevlar_rejections_total counter
kevlar_rejections_total{kevlar_shield_name="api",kevlar_rejection_type="circuit_open"} 0
kevlar_rejections_total{kevlar_shield_name="api",kevlar_rejection_type="isolated"} 0
kevlar_rejections_total{kevlar_shield_name="api",kevlar_rejection_type="rate_limit"} 0
kevlar_rejections_total{kevlar_shield_name="api",kevlar_rejection_type="concurrency_limit"} 0
kevlar_rejections_total{kevlar_shield_name="api",kevlar_rejection_type="throttle"} 0
kevlar_rejections_total{kevlar_shield_name="api",kevlar_rejection_type="queue_timeout"} 0
# HELP kevlar_circuit_breaker_state Circuit breaker state: 0 closed, 1 open, 2 half-open, 3 isolated.
# TYPE kevlar_circuit_breaker_state gauge
kevlar_circuit_breaker_state{kevlar_shield_name="api",kevlar_strategy_index="1"} 0
)";
  const std::string text = prometheus::to_text(metrics->snapshot());
  // Line by line, so that a difference names its line.
  std::istringstream want(expected), got(text);
  std::string w, g;
  int line = 0;
  while (std::getline(want, w)) {
    ++line;
    ASSERT_TRUE(std::getline(got, g)) << "output ends before line " << line << ": " << w;
    EXPECT_EQ(g, w) << "line " << line;
  }
  EXPECT_FALSE(std::getline(got, g)) << "extra line: " << g;
}

TEST(Prometheus, PromtoolAcceptsTheExposition) {
  ASSERT_STRNE(KEVLAR_PROMTOOL, "") << "promtool not found: install the Debian package prometheus "
                                       "(tools/run-tests.sh does)";
  std::shared_ptr<CircuitBreaker> breaker;
  const auto metrics = known_workload(breaker);
  breaker->isolate();
  const auto [status, output] = promtool_check(prometheus::to_text(metrics->snapshot()), "known.prom");
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool's lint findings";
  // The check is a real one: a counter without _total is a lint error.
  const auto [bad_status, bad_output] =
      promtool_check("# HELP x_bad A counter.\n# TYPE x_bad counter\nx_bad 1\n", "bad.prom");
  EXPECT_NE(bad_status, 0);
  EXPECT_NE(bad_output.find("_total"), std::string::npos) << bad_output;
}

TEST(Prometheus, PromtoolAcceptsTheLimitersGauges) {
  ASSERT_STRNE(KEVLAR_PROMTOOL, "") << "promtool not found: install the Debian package prometheus";
  auto metrics = std::make_shared<MetricsObserver>();
  RateLimitOptions rate;
  rate.permits = 1;
  rate.window = std::chrono::hours(1);
  rate.queue_limit = 1;
  const Shield shield = Shield{}
                            .with_name("limited")
                            .rate_limit(rate)
                            .concurrency_limit(4)
                            .observed_by(metrics);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  const std::string text = prometheus::to_text(metrics->snapshot());
  EXPECT_NE(text.find("# TYPE kevlar_rate_limit_available gauge\n"
                      "kevlar_rate_limit_available{kevlar_shield_name=\"limited\","
                      "kevlar_strategy_index=\"0\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kevlar_rate_limit_queued{kevlar_shield_name=\"limited\","
                      "kevlar_strategy_index=\"0\"} 0\n"),
            std::string::npos)
      << text;
  const auto [status, output] = promtool_check(text, "limiters.prom");
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool's lint findings";
}

// kevlar.chaos.injections: a series per shield name, kind, operation and environment seen, the
// scope's tags only when set; promtool accepts it.
TEST(Prometheus, ChaosInjectionsAreCountedByKindAndScope) {
  ASSERT_STRNE(KEVLAR_PROMTOOL, "") << "promtool not found: install the Debian package prometheus";
  auto metrics = std::make_shared<MetricsObserver>();
  ChaosFaultOptions fault;
  fault.chaos.enabled = true;
  fault.chaos.injection_rate = 0.5;
  fault.chaos.seed = 11;
  fault.error = asio::error::connection_reset;
  ChaosLatencyOptions latency;
  latency.chaos.enabled = true;
  latency.delay = 0ms;
  const Shield shield = Shield{}
                            .with_name("api")
                            .wrap(chaos::latency(latency))
                            .wrap(chaos::fault(fault))
                            .observed_by(metrics);
  int faults = 0;
  int calls = 0;
  auto run = [&](int n) {
    for (int i = 0; i < n; ++i) {
      if (shield.execute_outcome([&calls] { return ++calls; }).has_error()) ++faults;
    }
  };
  run(40);
  {
    ChaosScope scope{"checkout", "staging"};
    run(10);
  }
  EXPECT_GT(faults, 0);
  EXPECT_LT(faults, 50);
  EXPECT_EQ(faults + calls, 50);
  const MetricsSnapshot snapshot = metrics->snapshot();
  std::vector<std::pair<std::string, double>> injections;
  for (const Series& s : snapshot.series) {
    if (s.name != "kevlar.chaos.injections") continue;
    std::string tags;
    for (const auto& [k, v] : s.tags) tags += k + "=" + v + ";";
    injections.emplace_back(tags, s.value);
  }
  double fault_total = 0;
  for (const auto& [tags, value] : injections) {
    if (tags.find("kevlar.chaos.kind=fault") != std::string::npos) fault_total += value;
  }
  EXPECT_EQ(fault_total, faults);
  ASSERT_EQ(injections.size(), 4u);  // latency and fault, without and with the scope
  EXPECT_EQ(injections[0], (std::pair<std::string, double>{
                               "kevlar.shield.name=api;kevlar.chaos.kind=latency;", 40}));
  EXPECT_EQ(injections[1], (std::pair<std::string, double>{
                               "kevlar.shield.name=api;kevlar.chaos.kind=latency;"
                               "kevlar.chaos.operation=checkout;kevlar.chaos.environment=staging;",
                               10}));
  const std::string text = prometheus::to_text(snapshot);
  EXPECT_NE(text.find("kevlar_chaos_injections_total{kevlar_shield_name=\"api\","
                      "kevlar_chaos_kind=\"latency\"} 40\n"),
            std::string::npos)
      << text;
  const auto [status, output] = promtool_check(text, "chaos.prom");
  EXPECT_EQ(status, 0) << output;
  EXPECT_EQ(output, "") << "promtool's lint findings";
}

TEST(Prometheus, WholeNumbersPrintAsIntegersAndFractionsExactly) {
  MetricsSnapshot snap;
  for (const double v : {0.0, 1e6, 123456789.0, 9007199254740992.0, 0.0005, 2.5, 7.1765e-05}) {
    Series s;
    s.name = "x.value";
    s.kind = InstrumentKind::gauge;
    s.description = "A value.";
    s.tags.push_back({"v", std::to_string(snap.series.size())});
    s.value = v;
    snap.series.push_back(std::move(s));
  }
  const std::string text = prometheus::to_text(snap);
  for (const char* line :
       {"x_value{v=\"0\"} 0\n", "x_value{v=\"1\"} 1000000\n", "x_value{v=\"2\"} 123456789\n",
        "x_value{v=\"3\"} 9007199254740992\n", "x_value{v=\"4\"} 0.0005\n", "x_value{v=\"5\"} 2.5\n",
        "x_value{v=\"6\"} 7.1765e-05\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
}

TEST(Prometheus, NamesAndLabelValuesAreEscaped) {
  auto metrics = std::make_shared<MetricsObserver>();
  const Shield shield = Shield{}.with_name("a\"b\\c\nd").observed_by(metrics);
  EXPECT_EQ(shield.execute([] { return 1; }), 1);
  const std::string text = prometheus::to_text(metrics->snapshot());
  EXPECT_NE(text.find(R"(kevlar_executions_total{kevlar_shield_name="a\"b\\c\nd",kevlar_execution_outcome="success"} 1)"),
            std::string::npos)
      << text;
  if (std::string(KEVLAR_PROMTOOL).empty()) GTEST_FAIL() << "promtool not found";
  const auto [status, output] = promtool_check(text, "escaped.prom");
  EXPECT_EQ(status, 0) << output;

  Series s;
  s.name = "kevlar.execution.duration";
  s.unit = "s";
  s.kind = InstrumentKind::histogram;
  EXPECT_EQ(prometheus::metric_name(s), "kevlar_execution_duration_seconds");
  s.name = "9x-y.z";
  s.unit = "{x}";
  s.kind = InstrumentKind::counter;
  EXPECT_EQ(prometheus::metric_name(s), "_x_y_z_total");
  EXPECT_EQ(prometheus::label_name("kevlar.shield.name"), "kevlar_shield_name");
}

class Endpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_STRNE(KEVLAR_CURL, "") << "curl not found: install the Debian package curl";
    metrics = std::make_shared<MetricsObserver>();
    shield = Shield{}.with_name("api").retry(one_retry()).observed_by(metrics);
    endpoint = std::make_unique<prometheus::MetricsEndpoint>(
        ioc.get_executor(), metrics, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    url = "http://127.0.0.1:" + std::to_string(endpoint->local_endpoint().port());
    server = std::thread([this] { ioc.run(); });
  }
  void TearDown() override {
    if (endpoint) endpoint->stop();
    work.reset();
    if (server.joinable()) server.join();  // returns only once every connection is closed
  }
  [[nodiscard]] std::pair<int, std::string> curl(const std::string& args) const {
    return run(std::string(KEVLAR_CURL) + " -sS --max-time 20 " + args);
  }

  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  std::shared_ptr<MetricsObserver> metrics;
  Shield shield;
  std::unique_ptr<prometheus::MetricsEndpoint> endpoint;
  std::string url;
  std::thread server;
};

/// The value of the sample `series` (name and labels, as printed) in exposition `text`.
std::optional<double> sample(const std::string& text, const std::string& series) {
  const std::size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nullopt;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST_F(Endpoint, CurlScrapesWhileCallsRun) {
  std::atomic<bool> done{false};
  std::atomic<int> calls{0};
  std::thread caller([&] {
    while (!done.load()) {
      EXPECT_EQ(shield.execute([] { return 1; }), 1);
      ++calls;
    }
  });
  struct Join {  // a failed ASSERT below must not leave the thread joinable
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done = true;
      if (t.joinable()) t.join();
    }
  } join{done, caller};
  while (calls.load() == 0) std::this_thread::yield();
  const std::string success =
      "kevlar_executions_total{kevlar_shield_name=\"api\",kevlar_execution_outcome=\"success\"}";
  double previous = 0;
  for (int i = 0; i < 3; ++i) {
    const auto [status, body] = curl("--fail " + url + "/metrics");
    ASSERT_EQ(status, 0) << body;
    const std::optional<double> seen = sample(body, success);
    ASSERT_TRUE(seen) << body;
    EXPECT_GE(*seen, previous) << "a counter never goes back";
    previous = *seen;
  }
  done = true;
  caller.join();
  // Once the calls stopped, a scrape shows exactly how many ran; promtool accepts it.
  const std::string path = temp_path("scraped.prom");
  const auto [status, body] = curl("--fail -o " + path + " " + url + "/metrics");
  ASSERT_EQ(status, 0) << body;
  std::ifstream in(path);
  const std::string scraped((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(sample(scraped, success), static_cast<double>(calls.load())) << scraped;
  if (!std::string(KEVLAR_PROMTOOL).empty()) {
    const auto [check, output] = run(std::string(KEVLAR_PROMTOOL) + " check metrics < " + path + " 2>&1");
    EXPECT_EQ(check, 0) << output;
    EXPECT_EQ(output, "");
  } else {
    ADD_FAILURE() << "promtool not found";
  }
  EXPECT_EQ(endpoint->scrapes(), 4u);
}

TEST_F(Endpoint, AnswersOtherPathsAndMethodsAsHttpDoes) {
  EXPECT_EQ(shield.execute([] { return 1; }), 1);  // so that the shield has series
  EXPECT_EQ(curl("-o /dev/null -w '%{http_code}' " + url + "/other").second, "404");
  EXPECT_EQ(curl("-o /dev/null -w '%{http_code}' -X POST " + url + "/metrics").second, "405");
  const auto [status, headers] = curl("-I " + url + "/metrics");
  EXPECT_EQ(status, 0);
  EXPECT_NE(headers.find("HTTP/1.1 200 OK"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"), std::string::npos)
      << headers;
  // Two requests on one kept-alive connection: curl reuses it for the second URL, making no new
  // connection (num_connects 0).
  const auto [both, connects] = curl("--fail -o /dev/null -o /dev/null -w '%{num_connects} ' " +
                                     url + "/metrics " + url + "/metrics?x=1");
  EXPECT_EQ(both, 0);
  EXPECT_EQ(connects, "1 0 ");
  EXPECT_EQ(endpoint->scrapes(), 3u) << "HEAD and both GETs";
}

TEST_F(Endpoint, StopClosesAnIdleConnectionAndTheAcceptor) {
  // A client that completes one keep-alive request and then stays idle: the server is waiting for
  // its next request when stop() must close the connection so that run() returns.
  asio::io_context client_ctx;
  asio::ip::tcp::socket idle(client_ctx);
  idle.connect(endpoint->local_endpoint());
  const std::string request = "GET /other HTTP/1.1\r\nHost: x\r\n\r\n";
  asio::write(idle, asio::buffer(request));
  std::string reply;
  asio::read_until(idle, asio::dynamic_buffer(reply), "\r\n\r\n");
  ASSERT_EQ(reply.rfind("HTTP/1.1 404", 0), 0u) << reply;
  endpoint->stop();
  endpoint->stop();  // idempotent
  work.reset();
  server.join();  // would hang on the idle connection otherwise (CTest's timeout fails it)
  boost::system::error_code ec;
  asio::ip::tcp::socket late(client_ctx);
  late.connect(endpoint->local_endpoint(), ec);
  EXPECT_TRUE(ec) << "the acceptor is closed";
  std::array<char, 512> rest{};
  boost::system::error_code read_ec;
  (void)idle.read_some(asio::buffer(rest), read_ec);  // the 404's body, then the close
  if (!read_ec) (void)idle.read_some(asio::buffer(rest), read_ec);
  EXPECT_EQ(read_ec, asio::error::eof) << "the server closed the idle connection";
}

TEST(Prometheus, AnEndpointNeedsASource) {
  asio::io_context ioc;
  const asio::ip::tcp::endpoint loopback(asio::ip::make_address("127.0.0.1"), 0);
  EXPECT_THROW(prometheus::MetricsEndpoint(ioc.get_executor(), std::shared_ptr<const MetricsObserver>(), loopback),
               std::invalid_argument);
  EXPECT_THROW(prometheus::MetricsEndpoint(ioc.get_executor(), prometheus::MetricsEndpoint::Source(), loopback),
               std::invalid_argument);
  // A port taken by another listener: the constructor reports it.
  prometheus::MetricsEndpoint first(ioc.get_executor(), [] { return std::string(); }, loopback);
  EXPECT_THROW(prometheus::MetricsEndpoint(ioc.get_executor(), [] { return std::string(); },
                                           first.local_endpoint()),
               boost::system::system_error);
}

}  // namespace
}  // namespace kevlar
