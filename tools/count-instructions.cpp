// kevlar_count_instructions: instructions per synchronous call of a few shields, driven by
// tools/count-instructions.sh.
//
// Wall-clock times on a shared VM move by 10-30 % between runs; instruction counts do not. The
// script runs this program under callgrind with N and 2N calls and divides the difference by N,
// which cancels start-up and shield construction.
#include <kevlar/kevlar.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

class PassThrough final : public kevlar::Strategy {
 public:
  std::string describe() const override { return "PassThrough"; }
  kevlar::Step on_start(kevlar::Layer&) override { return kevlar::Step::run_inner; }
};

[[gnu::noinline]] int work(int x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}

kevlar::Shield make(const char* name) {
  using namespace std::chrono_literals;
  const kevlar::Shield empty;
  if (std::strcmp(name, "empty") == 0) return empty;
  if (std::strcmp(name, "pass_through") == 0) return empty.use(std::make_shared<PassThrough>());
  if (std::strcmp(name, "retry") == 0) return empty.retry(3);
  if (std::strcmp(name, "timeout") == 0) return empty.timeout(10s);
  if (std::strcmp(name, "circuit_breaker") == 0) {
    kevlar::CircuitBreakerOptions o;
    o.failure_ratio = 0.1;
    o.minimum_throughput = 100;
    return empty.circuit_breaker(o);
  }
  if (std::strcmp(name, "concurrency_limit") == 0) return empty.concurrency_limit(1024);
  if (std::strcmp(name, "fallback") == 0) return empty.fallback(0);
  if (std::strcmp(name, "timeout_retry_breaker") == 0) {
    kevlar::CircuitBreakerOptions o;
    o.failure_ratio = 0.1;
    o.minimum_throughput = 100;
    return empty.timeout(10s).retry(3).circuit_breaker(o);
  }
  std::fprintf(stderr, "unknown shield %s\n", name);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <shield> <calls>\n", argv[0]);
    return 2;
  }
  const kevlar::Shield shield = make(argv[1]);
  const long calls = std::atol(argv[2]);
  int x = 0;
  for (long i = 0; i < calls; ++i) x = shield.execute([x] { return work(x); });
  std::printf("%d\n", x);
  return 0;
}
