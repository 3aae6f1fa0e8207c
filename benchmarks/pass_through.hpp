// A strategy that only lets the call through: the engine's cost of one layer, with nothing of a
// strategy's own. Shared by the overhead, hedging and handoff-pair benchmarks and the
// instruction-count driver, so that they all measure the same layer.
#pragma once

#include <kevlar/strategy.hpp>

#include <string>

namespace kevlar::bench {

class PassThrough final : public kevlar::Strategy {
 public:
  [[nodiscard]] std::string describe() const override { return "PassThrough"; }
  kevlar::Step on_start(kevlar::Layer&) override { return kevlar::Step::run_inner; }
};

}  // namespace kevlar::bench
