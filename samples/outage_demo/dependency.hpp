// The dependency the demo's clients call: a real HTTP server on 127.0.0.1 whose behaviour follows
// the phases of the schedule, on its own thread.
#pragma once

#include "options.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

namespace outage_demo {

/// Who sent a request (the clients say so in an X-Demo-Client header).
enum class Client : unsigned char { unprotected, protected_ };
inline constexpr std::size_t client_count = 2;

/// "unprotected" or "protected".
[[nodiscard]] const char* to_string(Client client) noexcept;

/// Answers `GET` requests with 200 and a small body, except:
/// - slow: after `slow_latency` (plus up to 50 ms), far above the shield's attempt timeout;
/// - failing: 60 % of requests get a 503 and the other 40 % a closed connection, at once;
/// - healthy: after 5-15 ms; recovering: after 10-25 ms, a service warming up.
/// It counts the requests that reach it, by client and phase. Its choices come from a generator
/// seeded with the demo's seed, drawn on the server's one thread.
class Dependency {
 public:
  /// Binds and listens at once (a boost::system::system_error if it cannot).
  explicit Dependency(const DemoOptions& options);
  /// Stops it (stop()).
  ~Dependency();
  Dependency(const Dependency&) = delete;
  Dependency& operator=(const Dependency&) = delete;

  /// Starts serving on its own thread; phases count from `t0`.
  void start(std::chrono::steady_clock::time_point t0);
  /// Stops the server and joins its thread. Idempotent.
  void stop();

  /// Where it listens (127.0.0.1, the port the system picked).
  [[nodiscard]] boost::asio::ip::tcp::endpoint endpoint() const { return endpoint_; }
  /// Requests from `client` that arrived during `phase`. Thread-safe.
  [[nodiscard]] std::uint64_t reached(Client client, Phase phase) const noexcept;
  /// Requests from `client` in every phase. Thread-safe.
  [[nodiscard]] std::uint64_t reached(Client client) const noexcept;

 private:
  struct Reply {
    std::chrono::milliseconds delay{0};
    unsigned status = 200;  ///< 0: close the connection without answering
  };
  boost::asio::awaitable<void> accept();
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);
  Reply decide(Phase phase);

  DemoOptions options_;
  std::chrono::steady_clock::time_point t0_{};
  boost::asio::io_context ioc_{1};
  boost::asio::ip::tcp::acceptor acceptor_{ioc_};
  boost::asio::ip::tcp::endpoint endpoint_;
  std::mt19937_64 random_;
  std::array<std::array<std::atomic<std::uint64_t>, phase_count>, client_count> reached_{};
  std::thread thread_;
};

}  // namespace outage_demo
