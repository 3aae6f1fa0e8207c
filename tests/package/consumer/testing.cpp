// A downstream test links kevlar::testing: it checks a shield's shape with describe_shield and
// drives it with the strategy driver.
#include <kevlar/kevlar.hpp>
#include <kevlar/testing/descriptors.hpp>
#include <kevlar/testing/strategy_driver.hpp>

#include <boost/asio/error.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

int main() {
  using namespace std::chrono_literals;
  kevlar::RetryOptions o;
  o.max_retries = 1;
  o.backoff = kevlar::Backoff::constant(100ms);
  const kevlar::Shield shield = kevlar::Shield{}.retry(o).timeout(1s);
  const kevlar::testing::ShieldDescriptor shape = kevlar::testing::describe_shield(shield);
  const auto retries = shape.all_of<kevlar::testing::RetryDescriptor>();
  if (shape.kinds() !=
          std::vector<kevlar::testing::StrategyKind>{kevlar::testing::StrategyKind::retry,
                                                     kevlar::testing::StrategyKind::timeout} ||
      retries.size() != 1 || retries[0].max_retries != 1 ||
      retries[0].backoff.kind != kevlar::testing::BackoffKind::constant) {
    std::printf("testing consumer: unexpected shape %s\n",
                kevlar::testing::to_string(shape).c_str());
    return 1;
  }
  kevlar::testing::StrategyDriver<int> d{shield};
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
