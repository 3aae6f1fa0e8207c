// kevlar_stress: the pipelines timeout -> retry -> breaker and rate limit -> timeout -> retry ->
// breaker -> concurrency limit, driven from every core for a chosen duration, synchronously
// (Shield::execute) and asynchronously (co_await Shield::execute_async, one io_context per
// thread). Every call's value is checked, and so is the final state of the breaker and the
// limiters; it prints ops/s, allocations per call and p50/p99 latency per run, beside the same
// loop without a shield. See docs/stress.md.
#include "latency_histogram.hpp"

#include <alloc_counter.hpp>
#include <kevlar/kevlar.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using kevlar::stress::LatencyHistogram;

// ---- the command line ------------------------------------------------------------------------

enum class Mode { sync, async };
enum class PipelineKind { raw, shared, trb, five };

const char* name_of(Mode m) noexcept {
  return m == Mode::sync ? "sync" : "async";
}
const char* name_of(PipelineKind p) noexcept {
  switch (p) {
    case PipelineKind::raw:
      return "raw";
    case PipelineKind::shared:
      return "shared";
    case PipelineKind::trb:
      return "trb";
    case PipelineKind::five:
      return "five";
  }
  return "?";
}

struct Config {
  double seconds = 10;
  unsigned threads = 1;
  std::vector<Mode> modes{Mode::sync, Mode::async};
  std::vector<PipelineKind> pipelines{PipelineKind::raw, PipelineKind::shared, PipelineKind::trb,
                                      PipelineKind::five};
  bool json = false;
};

constexpr unsigned max_threads = 1024;  // the five-strategy pipeline's concurrency limit
/// Calls per thread before the measured phase (caches, the deadline queue, the breaker's window).
constexpr std::uint64_t warmup_calls = 10'000;

unsigned default_threads() noexcept {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : std::min(n, max_threads);
}

void print_usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: kevlar_stress [--seconds S] [--threads N] [--mode sync|async|all]\n"
      "                     [--pipeline raw|shared|trb|five|all] [--json] [--help]\n"
      "\n"
      "Runs kevlar pipelines from N threads for S seconds per run, checks the value of every\n"
      "call and the final state of the breaker and the limiters, and prints per run: ops/s,\n"
      "allocated bytes and allocations per call, p50 and p99 latency.\n"
      "\n"
      "  --seconds S    measured duration of each run in seconds (default 10; fractions allowed)\n"
      "  --threads N    threads calling at once (default: hardware_concurrency(), here %u)\n"
      "  --mode M       sync: Shield::execute on every thread;\n"
      "                 async: co_await Shield::execute_async, one io_context per thread;\n"
      "                 all (default): both\n"
      "  --pipeline P   trb: timeout(10s) -> retry(3, no delay) -> circuit breaker (ratio 0.1);\n"
      "                 five: rate limit (never rejecting) -> timeout(10s) -> retry(3) ->\n"
      "                       circuit breaker -> concurrency limit(1024);\n"
      "                 raw: the same loop without a shield (the same-run control);\n"
      "                 shared: the raw loop plus the shared writes a process-wide rate\n"
      "                       limit and concurrency limit need per call (a compare-exchange\n"
      "                       on one word; an increment before the operation and a decrement\n"
      "                       after it on another): the floor of five on several cores;\n"
      "                 all (default): raw, shared, trb and five\n"
      "  --json         one JSON object per run and line instead of the table\n"
      "  --help         this text\n"
      "\n"
      "Exit status: 0 if every call returned its value and every strategy ended idle (circuit\n"
      "closed, nothing running, nothing queued); 1 otherwise; 2 for a bad command line.\n",
      default_threads());
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "kevlar_stress: %s\n\n", message.c_str());
  print_usage(stderr);
  std::exit(2);
}

bool parse_seconds(std::string_view text, double& out) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0 || v > 86400) {
    return false;
  }
  out = v;
  return true;
}

bool parse_threads(std::string_view text, unsigned& out) {
  if (text.empty() || text.size() > 6) return false;
  unsigned v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v == 0 || v > max_threads) return false;
  out = v;
  return true;
}

Config parse_command_line(int argc, char** argv) {
  Config cfg;
  cfg.threads = default_threads();
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      std::exit(0);
    }
    if (arg == "--json") {
      cfg.json = true;
      continue;
    }
    // --flag VALUE or --flag=VALUE
    std::string_view flag = arg;
    std::string_view value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    if (flag != "--seconds" && flag != "--threads" && flag != "--mode" && flag != "--pipeline") {
      usage_error("unknown flag '" + std::string(arg) + "'");
    }
    if (!has_value) {
      if (i + 1 >= argc) usage_error("flag '" + std::string(flag) + "' needs a value");
      value = argv[++i];
    }
    const auto bad_value = [&](const char* expected) {
      usage_error("bad value '" + std::string(value) + "' for flag '" + std::string(flag) +
                  "' (expected " + expected + ")");
    };
    if (flag == "--seconds") {
      if (!parse_seconds(value, cfg.seconds)) bad_value("a number of seconds in (0, 86400]");
    } else if (flag == "--threads") {
      if (!parse_threads(value, cfg.threads)) bad_value("an integer in [1, 1024]");
    } else if (flag == "--mode") {
      if (value == "sync") {
        cfg.modes = {Mode::sync};
      } else if (value == "async") {
        cfg.modes = {Mode::async};
      } else if (value == "all") {
        cfg.modes = {Mode::sync, Mode::async};
      } else {
        bad_value("sync, async or all");
      }
    } else {
      if (value == "raw") {
        cfg.pipelines = {PipelineKind::raw};
      } else if (value == "shared") {
        cfg.pipelines = {PipelineKind::shared};
      } else if (value == "trb") {
        cfg.pipelines = {PipelineKind::trb};
      } else if (value == "five") {
        cfg.pipelines = {PipelineKind::five};
      } else if (value == "all") {
        cfg.pipelines = {PipelineKind::raw, PipelineKind::shared, PipelineKind::trb,
                         PipelineKind::five};
      } else {
        bad_value("raw, shared, trb, five or all");
      }
    }
  }
  return cfg;
}

// ---- the call ---------------------------------------------------------------------------------

constexpr std::uint64_t multiplier = 0x9E37'79B9'7F4A'7C15ull;

/// The user's work: a value the caller can check. Not inlined, and opaque to the optimiser, so
/// the raw loop really calls it.
[[gnu::noinline]] std::uint64_t work(std::uint64_t v) noexcept {
  __asm__ __volatile__("" : "+r"(v));
  return v * multiplier + 1;
}

/// What work(v) must have returned.
std::uint64_t expected(std::uint64_t v) noexcept {
  return v * multiplier + 1;
}

using WorkSignature = void(boost::system::error_code, std::uint64_t);

/// Starts async_work: posts (no error, work(input)) to the handler's associated executor (or
/// `ex`), so the loop stays idle (no reactor).
struct WorkInitiation {
  template <class Handler>
  void operator()(Handler handler, asio::io_context::executor_type ex, std::uint64_t input) const {
    auto hex = asio::get_associated_executor(handler, ex);
    asio::post(hex, asio::append(std::move(handler), boost::system::error_code(), work(input)));
  }
};

/// The smallest real asynchronous operation: completes with (no error, work(v)). Its return type
/// is spelled out, so that a token it cannot take is a substitution failure, not a hard error.
template <class Token>
auto async_work(asio::io_context::executor_type ex, std::uint64_t v, Token&& token)
    -> decltype(asio::async_initiate<Token, WorkSignature>(WorkInitiation{}, token, ex, v)) {
  return asio::async_initiate<Token, WorkSignature>(WorkInitiation{}, token, ex, v);
}

/// One attempt of an asynchronous call: starts async_work with the token kevlar gives it. A
/// functor rather than a generic lambda, so that probing it with other arguments (kevlar's
/// concepts do) fails softly.
struct WorkAttempt {
  asio::io_context::executor_type ex;
  std::uint64_t input;

  template <class Token>
  auto operator()(Token token) const -> decltype(async_work(ex, input, std::move(token))) {
    return async_work(ex, input, std::move(token));
  }
};

// ---- the pipelines ----------------------------------------------------------------------------

/// The words the `shared` control writes, each on its own cache line, as a rate limiter's and a
/// concurrency limiter's are.
struct SharedWords {
  alignas(64) std::atomic<std::uint64_t> rate{0};
  alignas(64) std::atomic<std::int64_t> limiter{0};

  /// Before the operation: a rate limiter's compare-exchange, a limiter's acquisition.
  void take() noexcept {
    std::uint64_t r = rate.load(std::memory_order_relaxed);
    while (!rate.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel,
                                       std::memory_order_relaxed)) {
    }
    limiter.fetch_add(1, std::memory_order_acquire);
  }
  /// After it: the limiter's release.
  void give_back() noexcept { limiter.fetch_sub(1, std::memory_order_release); }
};

/// A pipeline and the stateful strategies whose final state is checked.
struct Pipeline {
  std::unique_ptr<SharedWords> words;  ///< the `shared` control's
  kevlar::Shield shield;
  std::shared_ptr<kevlar::RateLimitStrategy> rate;
  std::shared_ptr<kevlar::CircuitBreaker> breaker;
  std::shared_ptr<kevlar::ConcurrencyLimitStrategy> limiter;
};

kevlar::RetryOptions three_retries() {
  kevlar::RetryOptions o;
  o.max_retries = 3;
  o.backoff = kevlar::Backoff::none();
  return o;
}

/// The benchmarks' breaker: ratio 0.1 over at least 100 calls in 30 s, break 5 s.
kevlar::CircuitBreakerOptions ratio_breaker() {
  kevlar::CircuitBreakerOptions o;
  o.failure_ratio = 0.1;
  o.minimum_throughput = 100;
  o.sampling_window = 30s;
  o.break_duration = 5s;
  return o;
}

/// A rate that never rejects here: 2^31-1 permits per second, a burst of as many.
kevlar::RateLimitOptions never_rejecting_rate() {
  kevlar::RateLimitOptions o;
  o.permits = static_cast<int>(kevlar::RateLimitLedger::max_count);
  o.window = 1s;
  return o;
}

constexpr std::uint32_t limiter_permits = 1024;

/// A fresh pipeline per run, so that each run's final state is its own.
Pipeline make_pipeline(PipelineKind kind) {
  Pipeline p;
  if (kind == PipelineKind::raw) return p;
  if (kind == PipelineKind::shared) {
    p.words = std::make_unique<SharedWords>();
    return p;
  }
  p.breaker = kevlar::CircuitBreaker::create(ratio_breaker());
  if (kind == PipelineKind::trb) {
    p.shield = kevlar::Shield{}.timeout(10s).retry(three_retries()).use(p.breaker);
    return p;
  }
  p.rate = kevlar::RateLimitStrategy::create(never_rejecting_rate());
  kevlar::ConcurrencyLimitOptions limit;
  limit.max_concurrency = static_cast<int>(limiter_permits);
  limit.max_queue = 0;
  p.limiter = kevlar::ConcurrencyLimitStrategy::create(limit);
  p.shield = kevlar::Shield{}
                 .use(p.rate)
                 .timeout(10s)
                 .retry(three_retries())
                 .use(p.breaker)
                 .use(p.limiter);
  return p;
}

/// Checks that every stateful strategy ended idle; describes what it found.
bool check_final_state(const Pipeline& p, std::string& description) {
  bool ok = true;
  description.clear();
  if (p.words != nullptr) {
    const std::int64_t held = p.words->limiter.load();
    description = "no shield; limiter word " + std::to_string(held);
    return held == 0;
  }
  if (p.breaker == nullptr) {
    description = "no shield";
    return true;
  }
  const auto m = p.breaker->core().metrics(kevlar::Clock::steady()->now());
  const bool breaker_ok = p.breaker->state() == kevlar::CircuitState::closed &&
                          m.window_failures == 0 && m.probes_in_flight == 0 && !m.opening_pending;
  ok = ok && breaker_ok;
  description += "circuit ";
  description += kevlar::to_string(p.breaker->state());
  description += " (" + std::to_string(m.window_failures) + " failures in window)";
  if (p.limiter != nullptr) {
    const kevlar::ConcurrencyLimitState s = p.limiter->state();
    const bool limiter_ok =
        s.running == 0 && s.queued == 0 && s.available == limiter_permits && !s.closed;
    ok = ok && limiter_ok;
    description += ", limit running " + std::to_string(s.running) + " queued " +
                   std::to_string(s.queued) + " free " + std::to_string(s.available) + "/" +
                   std::to_string(limiter_permits);
    if (s.closed) description += " closed";
  }
  if (p.rate != nullptr) {
    const kevlar::RateLimitState s = p.rate->state();
    ok = ok && s.queued == 0;
    description += ", rate queued " + std::to_string(s.queued);
  }
  return ok;
}

// ---- one run ------------------------------------------------------------------------------------

/// What one thread measured; written by that thread only, read by main after it finished.
struct alignas(64) ThreadResult {
  std::uint64_t calls = 0;                  ///< calls checked, warm-up included
  std::uint64_t ops = 0;                    ///< calls in the measured phase
  std::uint64_t failures = 0;               ///< calls that failed or returned a wrong value
  kevlar::testing::AllocStats allocations;  ///< during the measured phase
  std::uint64_t cpu_ns = 0;                 ///< this thread's CPU time in the measured phase
  SteadyClock::time_point end{};
  LatencyHistogram latency;
  std::string first_failure;  ///< allocated only when a call fails
};

/// The run's synchronisation: a start barrier and a stop flag, each on its own cache line.
struct RunControl {
  alignas(64) std::atomic<unsigned> ready{0};
  alignas(64) std::atomic<bool> go{false};
  alignas(64) std::atomic<bool> stop{false};
  alignas(64) std::atomic<unsigned> finished{0};
};

std::string describe(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return std::string("threw ") + e.what();
  } catch (...) {
    return "threw a non-standard exception";
  }
}

void record_failure(ThreadResult& r, std::uint64_t input, const std::string& what) {
  ++r.failures;
  if (r.first_failure.empty()) r.first_failure = "call " + std::to_string(input) + ": " + what;
}

void check_value(ThreadResult& r, std::uint64_t input, std::uint64_t out) {
  ++r.calls;
  if (out != expected(input)) [[unlikely]] {
    record_failure(
        r, input,
        "returned " + std::to_string(out) + ", expected " + std::to_string(expected(input)));
  }
}

std::uint64_t elapsed_ns(SteadyClock::time_point from, SteadyClock::time_point to) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

/// The calling thread's CPU time (to tell a slow call from a thread that did not get a core).
std::uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void arrive_and_wait(RunControl& ctl) {
  ctl.ready.fetch_add(1, std::memory_order_acq_rel);
  while (!ctl.go.load(std::memory_order_acquire)) std::this_thread::yield();
}

std::uint64_t first_input(unsigned index) noexcept {
  return std::uint64_t{index} << 40;
}

/// The synchronous loop of one thread: `call(input)` returns the value or throws.
template <class Call>
void sync_thread(Call call, unsigned index, RunControl& ctl, ThreadResult& r) {
  std::uint64_t input = first_input(index);
  const auto one = [&] {
    const std::uint64_t in = input++;
    try {
      check_value(r, in, call(in));
    } catch (...) {
      ++r.calls;
      record_failure(r, in, describe(std::current_exception()));
    }
  };
  for (std::uint64_t i = 0; i < warmup_calls; ++i) one();
  arrive_and_wait(ctl);
  const std::uint64_t cpu_before = thread_cpu_ns();
  const kevlar::testing::AllocStats before = kevlar::testing::thread_allocations();
  auto previous = SteadyClock::now();
  std::uint64_t ops = 0;
  while (!ctl.stop.load(std::memory_order_relaxed)) {
    one();
    const auto now = SteadyClock::now();
    r.latency.record(elapsed_ns(previous, now));
    previous = now;
    ++ops;
  }
  const kevlar::testing::AllocStats after = kevlar::testing::thread_allocations();
  r.cpu_ns = thread_cpu_ns() - cpu_before;
  r.ops = ops;
  r.end = previous;
  r.allocations = {after.count - before.count, after.bytes - before.bytes};
}

/// The asynchronous loop of one thread's io_context: one coroutine co_awaits `start(input)`,
/// a deferred operation completing with (error_code, value), one call after the other.
template <class Start>
asio::awaitable<void> async_loop(Start start, unsigned index, RunControl& ctl, ThreadResult& r) {
  std::uint64_t input = first_input(index);
  kevlar::testing::AllocStats before{};
  std::uint64_t cpu_before = 0;
  auto previous = SteadyClock::now();
  std::uint64_t ops = 0;
  for (std::uint64_t i = 0;; ++i) {
    if (i == warmup_calls) {
      arrive_and_wait(ctl);
      cpu_before = thread_cpu_ns();
      before = kevlar::testing::thread_allocations();
      previous = SteadyClock::now();
    }
    if (i >= warmup_calls && ctl.stop.load(std::memory_order_relaxed)) break;
    const std::uint64_t in = input++;
    std::uint64_t out = 0;
    bool threw = false;
    try {
      out = co_await start(in);
    } catch (...) {
      threw = true;
      ++r.calls;
      record_failure(r, in, describe(std::current_exception()));
    }
    if (!threw) check_value(r, in, out);
    if (i >= warmup_calls) {
      const auto now = SteadyClock::now();
      r.latency.record(elapsed_ns(previous, now));
      previous = now;
      ++ops;
    }
  }
  const kevlar::testing::AllocStats after = kevlar::testing::thread_allocations();
  r.cpu_ns = thread_cpu_ns() - cpu_before;
  r.ops = ops;
  r.end = previous;
  r.allocations = {after.count - before.count, after.bytes - before.bytes};
}

/// One thread's io_context: run by this thread alone until it runs out of work. run() returning
/// by itself shows that the calls left nothing behind (no pending timer, wait or operation).
template <class MakeStart>
void async_thread(MakeStart make_start, unsigned index, RunControl& ctl, ThreadResult& r) {
  asio::io_context ioc(1);
  asio::co_spawn(ioc, async_loop(make_start(ioc.get_executor()), index, ctl, r),
                 [&r](const std::exception_ptr& ep) {
                   if (ep) record_failure(r, 0, "the loop " + describe(ep));
                 });
  ioc.run();
}

struct RunResult {
  Mode mode{};
  PipelineKind pipeline{};
  unsigned threads = 0;
  double seconds = 0;  ///< measured wall time
  std::uint64_t ops = 0;
  std::uint64_t calls = 0;
  std::uint64_t failures = 0;
  double ops_per_second = 0;
  double bytes_per_op = 0;
  double allocs_per_op = 0;
  double p50_ns = 0;
  double p99_ns = 0;
  double cores = 0;  ///< CPU time of the threads over wall time: the cores the run really had
  bool state_ok = false;
  std::string state;
  std::vector<std::string> failure_notes;
};

/// Waits until `counter` reaches `n`, at most `limit`; false on time-out.
bool wait_for_count(const std::atomic<unsigned>& counter, unsigned n, SteadyClock::duration limit) {
  const auto deadline = SteadyClock::now() + limit;
  while (counter.load(std::memory_order_acquire) < n) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

[[noreturn]] void hang(const char* what, Mode mode, PipelineKind pipeline) {
  std::fprintf(stderr, "kevlar_stress: %s %s: %s; giving up\n", name_of(mode), name_of(pipeline),
               what);
  std::fflush(stderr);
  std::_Exit(1);
}

RunResult run_one(Mode mode, PipelineKind kind, const Config& cfg) {
  const Pipeline pipeline = make_pipeline(kind);
  const kevlar::Shield& shield = pipeline.shield;
  SharedWords* words = pipeline.words.get();
  std::vector<ThreadResult> results(cfg.threads);
  RunControl ctl;
  std::vector<std::thread> threads;
  threads.reserve(cfg.threads);

  for (unsigned t = 0; t < cfg.threads; ++t) {
    ThreadResult& r = results[t];
    const auto body = [&ctl, &r, &shield, words, mode, kind, t] {
      if (mode == Mode::sync) {
        if (kind == PipelineKind::raw) {
          sync_thread([](std::uint64_t in) { return work(in); }, t, ctl, r);
        } else if (kind == PipelineKind::shared) {
          sync_thread(
              [words](std::uint64_t in) {
                words->take();
                const std::uint64_t out = work(in);
                words->give_back();
                return out;
              },
              t, ctl, r);
        } else {
          sync_thread(
              [&shield](std::uint64_t in) { return shield.execute([in] { return work(in); }); }, t,
              ctl, r);
        }
      } else if (kind == PipelineKind::raw) {
        async_thread(
            [](asio::io_context::executor_type ex) {
              return [ex](std::uint64_t in) { return async_work(ex, in, asio::deferred); };
            },
            t, ctl, r);
      } else if (kind == PipelineKind::shared) {
        async_thread(
            [words](asio::io_context::executor_type ex) {
              return [words, ex](std::uint64_t in) {
                words->take();
                return async_work(
                    ex, in,
                    asio::deferred([words](boost::system::error_code ec, std::uint64_t out) {
                      words->give_back();
                      return asio::deferred.values(ec, out);
                    }));
              };
            },
            t, ctl, r);
      } else {
        async_thread(
            [&shield](asio::io_context::executor_type ex) {
              return [&shield, ex](std::uint64_t in) {
                return shield.execute_async(WorkAttempt{ex, in});
              };
            },
            t, ctl, r);
      }
      ctl.finished.fetch_add(1, std::memory_order_acq_rel);
    };
    threads.emplace_back(body);
  }

  // Warm-up: generous limits, for a loaded machine; a thread stuck there is a hang.
  if (!wait_for_count(ctl.ready, cfg.threads, 60s)) {
    hang("a thread did not finish its warm-up within 60 s", mode, kind);
  }
  const auto start = SteadyClock::now();
  ctl.go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg.seconds));
  ctl.stop.store(true, std::memory_order_relaxed);
  if (!wait_for_count(ctl.finished, cfg.threads, 60s)) {
    hang("a thread did not finish within 60 s of the stop (a call or an io_context hangs)", mode,
         kind);
  }
  for (std::thread& th : threads) th.join();

  RunResult out;
  out.mode = mode;
  out.pipeline = kind;
  out.threads = cfg.threads;
  LatencyHistogram latency;
  kevlar::testing::AllocStats allocations{};
  auto end = start;
  std::uint64_t cpu_ns = 0;
  for (unsigned t = 0; t < cfg.threads; ++t) {
    const ThreadResult& r = results[t];
    out.ops += r.ops;
    out.calls += r.calls;
    out.failures += r.failures;
    allocations.count += r.allocations.count;
    allocations.bytes += r.allocations.bytes;
    latency.merge(r.latency);
    cpu_ns += r.cpu_ns;
    end = std::max(end, r.end);
    if (!r.first_failure.empty()) {
      out.failure_notes.push_back("thread " + std::to_string(t) + ": " + r.first_failure);
    }
  }
  out.seconds = std::chrono::duration<double>(end - start).count();
  const double ops = static_cast<double>(out.ops);
  out.ops_per_second = out.seconds > 0 ? ops / out.seconds : 0;
  out.bytes_per_op = out.ops > 0 ? static_cast<double>(allocations.bytes) / ops : 0;
  out.allocs_per_op = out.ops > 0 ? static_cast<double>(allocations.count) / ops : 0;
  out.p50_ns = latency.quantile(0.50);
  out.p99_ns = latency.quantile(0.99);
  out.cores = out.seconds > 0 ? static_cast<double>(cpu_ns) / 1e9 / out.seconds : 0;
  out.state_ok = check_final_state(pipeline, out.state);
  if (out.ops == 0) out.failure_notes.emplace_back("no call completed in the measured phase");
  return out;
}

// ---- output -------------------------------------------------------------------------------------

constexpr const char* async_shape =
    "one io_context per thread (concurrency hint 1), run by that thread alone; one coroutine "
    "per thread co_awaits one call after the other (deferred); the operation posts its value to "
    "the caller's executor";

std::string format_latency(double ns) {
  char buf[32];
  if (ns < 10'000) {
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  } else if (ns < 10'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  }
  return buf;
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void print_header(const Config& cfg) {
  std::printf(
      "kevlar_stress: %u thread%s (%u hardware threads), %.3g s per run, after %llu warm-up "
      "calls per thread\n",
      cfg.threads, cfg.threads == 1 ? "" : "s", std::thread::hardware_concurrency(), cfg.seconds,
      static_cast<unsigned long long>(warmup_calls));
  std::printf("  sync:  Shield::execute in a loop on every thread\n");
  std::printf("  async: %s\n", async_shape);
  std::printf(
      "  raw: the same loop without a shield; latency: the interval between a thread's "
      "consecutive completions\n        (one clock read per call), 1/16-octave buckets merged "
      "over the threads;\n  cores: the threads' CPU time over the wall time (below the thread "
      "count: the threads did not get their cores)\n\n");
  std::printf("%-5s  %-8s  %10s  %6s  %5s  %5s  %9s  %8s  %8s  %8s  %s\n", "mode", "pipeline",
              "ops/s", "vs raw", "cores", "B/op", "allocs/op", "p50", "p99", "failures",
              "final state");
}

void print_row(const RunResult& r, double raw_ops_per_second) {
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.2f M", r.ops_per_second / 1e6);
  char ratio[16] = "-";
  if (raw_ops_per_second > 0 && r.pipeline != PipelineKind::raw) {
    std::snprintf(ratio, sizeof ratio, "%.2f", r.ops_per_second / raw_ops_per_second);
  }
  std::printf("%-5s  %-8s  %10s  %6s  %5.2f  %5.2f  %9.4f  %8s  %8s  %8llu  %s%s\n",
              name_of(r.mode), name_of(r.pipeline), rate, ratio, r.cores, r.bytes_per_op,
              r.allocs_per_op, format_latency(r.p50_ns).c_str(), format_latency(r.p99_ns).c_str(),
              static_cast<unsigned long long>(r.failures),
              r.state_ok ? "ok: " : "NOT IDLE: ", r.state.c_str());
  std::fflush(stdout);
}

void print_json(const RunResult& r) {
  const std::string shape =
      r.mode == Mode::async ? "\"" + json_escape(async_shape) + "\"" : std::string("null");
  std::string notes;
  for (const std::string& n : r.failure_notes) {
    if (!notes.empty()) notes += ',';
    notes += '"' + json_escape(n) + '"';
  }
  std::printf(
      "{\"mode\":\"%s\",\"pipeline\":\"%s\",\"threads\":%u,\"seconds\":%.3f,\"ops\":%llu,"
      "\"calls_checked\":%llu,\"ops_per_second\":%.0f,\"bytes_per_op\":%.4f,"
      "\"allocs_per_op\":%.6f,\"p50_ns\":%.0f,\"p99_ns\":%.0f,\"cores\":%.3f,\"failures\":%llu,"
      "\"final_state_ok\":%s,\"final_state\":\"%s\",\"async_shape\":%s,\"failure_notes\":[%s]}\n",
      name_of(r.mode), name_of(r.pipeline), r.threads, r.seconds,
      static_cast<unsigned long long>(r.ops), static_cast<unsigned long long>(r.calls),
      r.ops_per_second, r.bytes_per_op, r.allocs_per_op, r.p50_ns, r.p99_ns, r.cores,
      static_cast<unsigned long long>(r.failures), r.state_ok ? "true" : "false",
      json_escape(r.state).c_str(), shape.c_str(), notes.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Config cfg = parse_command_line(argc, argv);
  if (!cfg.json) print_header(cfg);
  bool failed = false;
  std::vector<std::string> problems;
  for (const Mode mode : cfg.modes) {
    double raw_ops_per_second = 0;
    for (const PipelineKind kind : cfg.pipelines) {
      const RunResult r = run_one(mode, kind, cfg);
      if (kind == PipelineKind::raw) raw_ops_per_second = r.ops_per_second;
      if (cfg.json) {
        print_json(r);
      } else {
        print_row(r, raw_ops_per_second);
      }
      const std::string run = std::string(name_of(mode)) + " " + name_of(kind);
      if (r.failures != 0) {
        problems.push_back(run + ": " + std::to_string(r.failures) + " of " +
                           std::to_string(r.calls) + " calls failed");
      }
      for (const std::string& note : r.failure_notes) problems.push_back(run + ": " + note);
      if (!r.state_ok) problems.push_back(run + ": final state not idle: " + r.state);
      failed = failed || r.failures != 0 || !r.state_ok || r.ops == 0;
    }
  }
  for (const std::string& p : problems) std::fprintf(stderr, "kevlar_stress: %s\n", p.c_str());
  if (!cfg.json) {
    std::printf(failed ? "\nFAILED (see above)\n"
                       : "\nok: every call returned its value; every breaker closed, every limiter "
                         "idle\n");
  }
  return failed ? 1 : 0;
}
