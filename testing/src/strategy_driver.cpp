#include <kevlar/testing/strategy_driver.hpp>

#include <deque>
#include <ostream>

namespace kevlar::testing {
namespace detail {

struct DriverLoop::Jobs {
  std::deque<std::function<void()>> queue;
};

DriverLoop::DriverLoop()
    : jobs_(std::make_unique<Jobs>()), context_(std::make_unique<boost::asio::execution_context>()) {}

DriverLoop::~DriverLoop() {
  shut_down();
  // The services (kevlar's deadline queue) shut down and go with the context; what they still
  // held is destroyed there, and nothing can be posted any more.
  context_.reset();
}

void DriverLoop::post(std::function<void()> job) { jobs_->queue.push_back(std::move(job)); }

std::size_t DriverLoop::run(std::size_t limit) {
  std::size_t ran = 0;
  while (!shut_down_ && !jobs_->queue.empty()) {
    if (ran == limit) {
      throw std::logic_error("kevlar::testing::StrategyDriver: " + std::to_string(limit) +
                             " jobs in one run; something posts itself forever");
    }
    std::function<void()> job = std::move(jobs_->queue.front());
    jobs_->queue.pop_front();
    ++ran;
    job();
  }
  return ran;
}

std::size_t DriverLoop::pending() const noexcept { return jobs_->queue.size(); }

void DriverLoop::shut_down() noexcept {
  shut_down_ = true;
  // Destroying a job may destroy a handler that abandons its execution, which may post again
  // (to this loop: queued, and destroyed by a later turn of this loop).
  while (!jobs_->queue.empty()) {
    std::function<void()> job = std::move(jobs_->queue.front());
    jobs_->queue.pop_front();
    job = nullptr;
  }
}

}  // namespace detail

const char* to_string(boost::asio::cancellation_type type) noexcept {
  using boost::asio::cancellation_type;
  switch (type) {
    case cancellation_type::none:
      return "none";
    case cancellation_type::terminal:
      return "terminal";
    case cancellation_type::partial:
      return "partial";
    case cancellation_type::total:
      return "total";
    case cancellation_type::all:
      return "all";
  }
  return "mixed";
}

std::ostream& operator<<(std::ostream& os, const DriverAction& action) {
  switch (action.kind) {
    case DriverAction::Kind::start_attempt:
      return os << "start(" << action.attempt << ')';
    case DriverAction::Kind::cancel_attempt:
      return os << "cancel(" << action.attempt << ", " << to_string(action.type) << ')';
    case DriverAction::Kind::deliver:
      return os << "deliver";
  }
  return os << "?";
}

}  // namespace kevlar::testing
