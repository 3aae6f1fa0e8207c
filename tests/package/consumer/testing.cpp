// A downstream test links kevlar::testing and drives a shield with the strategy driver.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <boost/asio/error.hpp>

#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  kevlar::RetryOptions o;
  o.max_retries = 1;
  o.backoff = kevlar::Backoff::constant(100ms);
  kevlar::testing::StrategyDriver<int> d{kevlar::Shield{}.retry(o)};
  d.start();
  d.fail(0, boost::asio::error::connection_reset);
  d.advance(100ms);
  d.succeed(1, 42);
  if (d.attempts() != 2 || !d.outcome().has_value() || d.outcome().value() != 42) {
    std::puts("testing consumer: unexpected outcome");
    return 1;
  }
  std::puts("testing consumer: ok");
  return 0;
}
