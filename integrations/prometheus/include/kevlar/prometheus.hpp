// kevlar — Prometheus: the text exposition of a metrics snapshot, and a small /metrics endpoint on
// Boost.Beast (target kevlar::prometheus).
#pragma once

#include <kevlar/metrics.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace kevlar::prometheus {

/// The Content-Type of the text exposition format, version 0.0.4.
inline constexpr std::string_view content_type = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus name of a series' metric family: dots and other characters Prometheus does not
/// allow become '_', a unit "s" adds "_seconds", a counter ends in "_total"
/// (kevlar.executions -> kevlar_executions_total, kevlar.execution.duration ->
/// kevlar_execution_duration_seconds).
[[nodiscard]] std::string metric_name(const Series& series);

/// A tag key as a Prometheus label name (kevlar.shield.name -> kevlar_shield_name).
[[nodiscard]] std::string label_name(std::string_view key);

/// Appends `snapshot` to `out` in the text exposition format 0.0.4: per family a HELP and a TYPE
/// line, then its samples; a histogram as cumulative `_bucket{le="..."}` samples ending with
/// `le="+Inf"`, then `_sum` and `_count`. Label values are escaped as the format requires.
void write_text(const MetricsSnapshot& snapshot, std::string& out);

/// write_text into a new string.
[[nodiscard]] std::string to_text(const MetricsSnapshot& snapshot);

/// Serves `GET /metrics` (and `HEAD`) over HTTP/1.1 on a TCP endpoint, from an executor the
/// application runs: each request is answered with what `source` returns at that moment, with
/// content_type. Other paths get 404, other methods 405. Keep-alive connections are served until
/// the client closes them or stays idle for 30 s.
///
/// Threading: the endpoint runs its acceptor and connections on a strand of `executor`, and calls
/// `source` there, one request at a time. Construction binds and listens at once (a
/// boost::system::system_error if it cannot); local_endpoint() then gives the port (pass port 0 to
/// let the system choose). stop() and the destructor close the acceptor and every connection; the
/// work finishes on the executor, which must stay alive (running) until then. All members are
/// thread-safe.
class MetricsEndpoint {
 public:
  /// What a request is answered with.
  using Source = std::function<std::string()>;

  /// Serves to_text(metrics->snapshot()) on `where`.
  MetricsEndpoint(const boost::asio::any_io_executor& executor,
                  std::shared_ptr<const MetricsObserver> metrics,
                  const boost::asio::ip::tcp::endpoint& where);
  /// Serves what `source` returns: one whole exposition, in which no metric family repeats (the
  /// text of two snapshots concatenated would repeat HELP and TYPE lines, which Prometheus
  /// rejects).
  MetricsEndpoint(const boost::asio::any_io_executor& executor, Source source,
                  const boost::asio::ip::tcp::endpoint& where);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  /// The address the endpoint listens on.
  [[nodiscard]] boost::asio::ip::tcp::endpoint local_endpoint() const;
  /// Requests answered with the metrics so far.
  [[nodiscard]] std::uint64_t scrapes() const noexcept;
  /// Stops accepting and closes every open connection (asynchronously, on the strand). Idempotent.
  void stop() noexcept;

  /// The acceptor and connections (defined in the endpoint's source; not part of the API).
  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kevlar::prometheus
