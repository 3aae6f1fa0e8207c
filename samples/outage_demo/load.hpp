// The demo's two clients: the same open-loop load, one call every 1/rate seconds, sent to the
// dependency directly by one and through a kevlar shield by the other.
#pragma once

#include "dependency.hpp"
#include "options.hpp"

#include <kevlar/kevlar.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace outage_demo {

/// How one call ended, as its caller saw it.
enum class Result : unsigned char {
  ok,               ///< a 200
  http_error,       ///< another status (after the shield's retries, for the protected client)
  transport_error,  ///< refused, reset or closed before the answer
  timeout,          ///< a kevlar timeout (the shield's budget for the call ran out)
  circuit_open,     ///< refused by the open circuit breaker, without reaching the dependency
  limit,            ///< refused by the concurrency limit, without reaching the dependency
};
inline constexpr std::size_t result_count = 6;

/// One call: when it started (seconds since the start of the run), how long it took, its result.
struct CallRecord {
  double start = 0;            ///< seconds since the start of the run
  double latency = 0;          ///< seconds from start to completion
  Result result = Result::ok;  ///< how it ended
};

/// How long a caller of the demo's service waits for an answer at most: the protected client's
/// total timeout, and the bound of "succeeded within the deadline" in the summary.
inline constexpr std::chrono::milliseconds caller_deadline{1000};

/// The shield the protected client uses: kevlar::http's standard shield scaled to the demo's
/// seconds (total 1 s, 2 retries from 50 ms, a ratio breaker opening for 1 s, 8 running and 8
/// queued, 250 ms per attempt), named "dependency" and observed by `observer`.
[[nodiscard]] kevlar::Shield protected_shield(std::uint64_t seed,
                                              std::shared_ptr<kevlar::Observer> observer);

/// Runs both clients on `ioc` (one thread: the records need no lock).
class Load {
 public:
  /// Sends to `dependency`; the protected client's calls go through `shield`.
  Load(boost::asio::io_context& ioc, const DemoOptions& options,
       boost::asio::ip::tcp::endpoint dependency, kevlar::Shield shield);

  /// Starts sending at `t0`; `done` runs on `ioc` once the last call of both clients completed.
  void start(std::chrono::steady_clock::time_point t0, std::function<void()> done);

  /// Completed calls of `client`, in the order they completed.
  [[nodiscard]] const std::vector<CallRecord>& records(Client client) const noexcept {
    return records_[static_cast<std::size_t>(client)];
  }
  /// Calls of `client` started and not yet completed.
  [[nodiscard]] int in_flight(Client client) const noexcept {
    return in_flight_[static_cast<std::size_t>(client)];
  }

 private:
  boost::asio::awaitable<void> arrivals(Client client);
  boost::asio::awaitable<void> call(Client client);
  boost::asio::awaitable<Result> direct();
  boost::asio::awaitable<Result> shielded();
  [[nodiscard]] double since_start() const;
  void finished_one();

  boost::asio::io_context& ioc_;
  DemoOptions options_;
  boost::asio::ip::tcp::endpoint dependency_;
  kevlar::Shield shield_;
  std::chrono::steady_clock::time_point t0_{};
  std::function<void()> done_;
  std::array<std::vector<CallRecord>, client_count> records_;
  std::array<int, client_count> in_flight_{};
  int sending_ = 0;  ///< arrival loops still running
};

}  // namespace outage_demo
