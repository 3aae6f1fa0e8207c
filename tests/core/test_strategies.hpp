// Strategies used by the core tests to observe and drive the engine.
#pragma once

#include <kevlar/kevlar.hpp>

#include <boost/asio/error.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kevlar::test {

/// A thread-safe log of events.
class EventLog {
 public:
  void add(std::string e) {
    std::lock_guard lock(m_);
    events_.push_back(std::move(e));
  }
  std::vector<std::string> events() const {
    std::lock_guard lock(m_);
    return events_;
  }
  void clear() {
    std::lock_guard lock(m_);
    events_.clear();
  }

 private:
  mutable std::mutex m_;
  std::vector<std::string> events_;
};

/// Logs "<id>:start", "<id>:inner", "<id>:finish" and passes through.
class Recorder final : public Strategy {
 public:
  Recorder(std::string id, EventLog& log) : id_(std::move(id)), log_(&log) {}
  std::string describe() const override { return "Recorder(" + id_ + ")"; }
  Step on_start(Layer&) override {
    log_->add(id_ + ":start");
    return Step::run_inner;
  }
  Step on_inner_complete(Layer&) override {
    log_->add(id_ + ":inner");
    return Step::complete;
  }
  void on_finish(Layer&) noexcept override { log_->add(id_ + ":finish"); }

 private:
  std::string id_;
  EventLog* log_;
};

/// Passes straight through (the engine's cost with one layer).
class PassThrough final : public Strategy {
 public:
  std::string describe() const override { return "PassThrough"; }
  Step on_start(Layer&) override { return Step::run_inner; }
};

/// Re-runs the inner part while the clause handles the outcome, up to `retries` times, waiting
/// `delay` between attempts (a minimal retry to exercise the engine's repeater and wait paths).
class Repeat final : public Strategy {
 public:
  explicit Repeat(int retries, Clock::duration delay = {}) : retries_(retries), delay_(delay) {}
  std::string describe() const override { return "Repeat(" + std::to_string(retries_) + ")"; }
  StrategyTraits traits() const noexcept override {
    return {StrategyRole::reactive, false, sizeof(int), false};
  }
  Step on_start(Layer& layer) override {
    ::new (layer.frame()) int(0);
    return Step::run_inner;
  }
  Step on_inner_complete(Layer& layer) override {
    int& used = layer.frame_as<int>();
    if (used >= retries_ || layer.cancelled_from_outside() || !layer.handled()) {
      return Step::complete;
    }
    ++used;
    if (delay_ > Clock::duration::zero()) return layer.wait_for(delay_);
    return Step::run_inner;
  }
  Step on_wait_complete(Layer& layer, const boost::system::error_code& ec) override {
    if (ec) {
      layer.outcome().set_error(ec);
      return Step::complete;
    }
    (void)layer;
    return Step::run_inner;
  }

 private:
  int retries_;
  Clock::duration delay_;
};

/// Rejects every call with `errc` without running the inner part.
class Reject final : public Strategy {
 public:
  explicit Reject(errc e = errc::circuit_open, bool stateful = false)
      : e_(e), stateful_(stateful) {}
  std::string describe() const override { return "Reject"; }
  StrategyTraits traits() const noexcept override {
    return {StrategyRole::proactive, stateful_, 0, false};
  }
  Step on_start(Layer& layer) override {
    layer.outcome().set_error(make_error_code(e_));
    return Step::complete;
  }

 private:
  errc e_;
  bool stateful_;
};

/// Records layer.handled() for each outcome it sees (tests of handling clauses).
class Judge final : public Strategy {
 public:
  std::string describe() const override { return "Judge"; }
  StrategyTraits traits() const noexcept override { return {StrategyRole::reactive, false, 0, false}; }
  Step on_start(Layer&) override { return Step::run_inner; }
  Step on_inner_complete(Layer& layer) override {
    plain.push_back(layer.plain_success());
    verdicts.push_back(layer.handled());
    return Step::complete;
  }
  std::vector<bool> verdicts;  ///< layer.handled(), per outcome seen
  std::vector<bool> plain;     ///< layer.plain_success(), per outcome seen
};

/// A fallback-role strategy replacing handled failures with `value`.
class FallbackTo final : public Strategy {
 public:
  explicit FallbackTo(int value) : value_(value) {}
  std::string describe() const override { return "Fallback"; }
  StrategyTraits traits() const noexcept override { return {StrategyRole::fallback, false, 0, false}; }
  Step on_start(Layer&) override { return Step::run_inner; }
  Step on_inner_complete(Layer& layer) override {
    if (layer.handled()) layer.outcome().set_value(value_);
    return Step::complete;
  }

 private:
  int value_;
};

/// Waits `delay` on the clock before running the inner part.
class Delay final : public Strategy {
 public:
  explicit Delay(Clock::duration d) : d_(d) {}
  std::string describe() const override { return "Delay"; }
  Step on_start(Layer& layer) override { return layer.wait_for(d_); }
  Step on_wait_complete(Layer& layer, const boost::system::error_code& ec) override {
    if (ec) {
      layer.outcome().set_error(ec);
      return Step::complete;
    }
    return Step::run_inner;
  }

 private:
  Clock::duration d_;
};

/// Throws from on_start.
class Throwing final : public Strategy {
 public:
  std::string describe() const override { return "Throwing"; }
  Step on_start(Layer&) override { throw std::runtime_error("strategy failed"); }
};

}  // namespace kevlar::test
