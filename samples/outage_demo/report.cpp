#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace outage_demo {

namespace {

[[gnu::format(printf, 1, 2)]] std::string format(const char* pattern, ...) {
  char buffer[512];
  va_list args;
  va_start(args, pattern);
  const int n = std::vsnprintf(buffer, sizeof buffer, pattern, args);
  va_end(args);
  return std::string(buffer, static_cast<std::size_t>(std::clamp(n, 0, 511)));
}

double percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest value with at least q of the values at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

double sum_of(const kevlar::MetricsSnapshot& snapshot, std::string_view name,
              std::string_view tag_key = {}, std::string_view tag_value = {}) {
  double total = 0;
  for (const kevlar::Series& s : snapshot.series) {
    if (s.name != name) continue;
    if (!tag_key.empty()) {
      const bool tagged = std::any_of(s.tags.begin(), s.tags.end(), [&](const auto& t) {
        return t.key == tag_key && t.value == tag_value;
      });
      if (!tagged) continue;
    }
    total += s.value;
  }
  return total;
}

constexpr double ms = 1000.0;

}  // namespace

Stats stats_of(std::span<const CallRecord> calls) {
  Stats s;
  std::vector<double> latencies;
  latencies.reserve(calls.size());
  for (const CallRecord& c : calls) {
    latencies.push_back(c.latency);
    if (c.result == Result::ok) ++s.ok;
  }
  s.calls = calls.size();
  std::sort(latencies.begin(), latencies.end());
  s.p50 = percentile(latencies, 0.50);
  s.p90 = percentile(latencies, 0.90);
  s.p99 = percentile(latencies, 0.99);
  s.max = latencies.empty() ? 0 : latencies.back();
  return s;
}

ShieldCounters read_counters(const kevlar::MetricsSnapshot& snapshot) {
  ShieldCounters c;
  c.retries = sum_of(snapshot, "kevlar.retries");
  c.timeouts = sum_of(snapshot, "kevlar.timeouts");
  c.rejected_open = sum_of(snapshot, "kevlar.rejections", "kevlar.rejection.type", "circuit_open");
  c.rejected_limit =
      sum_of(snapshot, "kevlar.rejections", "kevlar.rejection.type", "concurrency_limit");
  c.breaker_state = snapshot.value("kevlar.circuit_breaker.state");
  c.running = snapshot.value("kevlar.concurrency_limit.inflight");
  c.queued = snapshot.value("kevlar.concurrency_limit.queued");
  return c;
}

const char* breaker_name(double state) noexcept {
  switch (static_cast<int>(state)) {
    case 0:
      return "closed";
    case 1:
      return "open";
    case 2:
      return "half-open";
    case 3:
      return "isolated";
    default:
      return "?";
  }
}

LiveTable::LiveTable(const DemoOptions& options, bool in_place, std::FILE* out)
    : options_(options), in_place_(in_place), out_(out) {}

std::string LiveTable::progress(double elapsed) const {
  // Each phase's name, then its share of a 40-cell bar (at least 3): '#' for the time gone.
  constexpr double width = 40;
  const double total = std::chrono::duration<double>(options_.schedule.total()).count();
  std::string bar = "[";
  for (std::size_t p = 0; p < phase_count; ++p) {
    const auto phase = static_cast<Phase>(p);
    const double start = std::chrono::duration<double>(options_.schedule.start_of(phase)).count();
    const double length = std::chrono::duration<double>(options_.schedule.lengths[p]).count();
    const auto cells = static_cast<std::size_t>(std::max(3.0, std::round(width * length / total)));
    const double done = std::clamp((elapsed - start) / length, 0.0, 1.0);
    const auto filled = static_cast<std::size_t>(std::round(done * static_cast<double>(cells)));
    if (p != 0) bar += '|';
    bar += to_string(phase);
    bar += ' ';
    bar.append(filled, '#').append(cells - filled, '.');
  }
  return bar + "]";
}

void LiveTable::update(double elapsed, const std::array<Stats, client_count>& last,
                       const std::array<int, client_count>& in_flight, const ShieldCounters& delta,
                       const ShieldCounters& now) {
  const double total = std::chrono::duration<double>(options_.schedule.total()).count();
  // The phase of the second that just ended (its middle: phase boundaries fall on ticks).
  const double middle = elapsed - 0.5;
  const char* phase =
      middle > total
          ? "draining"
          : to_string(options_.schedule.at(std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::duration<double>(middle))));
  // Percentages and latencies of a second without completed calls are shown as "-".
  const auto cells = [](const Stats& s) {
    if (s.calls == 0) return std::array<std::string, 3>{"-", "-", "-"};
    return std::array<std::string, 3>{format("%.1f", s.success_rate()), format("%.1f", s.p50 * ms),
                                      format("%.1f", s.p99 * ms)};
  };
  const auto u = cells(last[0]);
  const auto p = cells(last[1]);
  if (!in_place_) {
    std::fprintf(
        out_, "[%5.1f s %-10s] unprotected calls=%zu ok%%=%s p50ms=%s p99ms=%s running=%d\n",
        elapsed, phase, last[0].calls, u[0].c_str(), u[1].c_str(), u[2].c_str(), in_flight[0]);
    std::fprintf(out_,
                 "[%5.1f s %-10s] protected   calls=%zu ok%%=%s p50ms=%s p99ms=%s retries=%.0f "
                 "timeouts=%.0f rejected_open=%.0f rejected_limit=%.0f breaker=%s running=%.0f "
                 "queued=%.0f\n",
                 elapsed, phase, last[1].calls, p[0].c_str(), p[1].c_str(), p[2].c_str(),
                 delta.retries, delta.timeouts, delta.rejected_open, delta.rejected_limit,
                 breaker_name(now.breaker_state), now.running, now.queued);
    std::fflush(out_);
    return;
  }
  constexpr const char* row = "%-11s  %6s  %5s  %7s  %7s  %7s  %8s  %5s  %5s  %-9s  %7s  %6s";
  std::vector<std::string> lines;
  lines.push_back(
      format("%s  %-10s %5.1f s of %.1f s", progress(elapsed).c_str(), phase, elapsed, total));
  lines.emplace_back();
  lines.push_back(format("%-11s  %6s  %5s  %7s  %7s  %7s  %8s  %12s  %-9s  %7s  %6s", "last second",
                         "calls", "ok %", "p50 ms", "p99 ms", "retries", "timeouts", "rejected   ",
                         "breaker", "running", "queued"));
  lines.push_back(format(row, "", "", "", "", "", "", "", "open", "limit", "", "", ""));
  lines.push_back(format(row, "unprotected", std::to_string(last[0].calls).c_str(), u[0].c_str(),
                         u[1].c_str(), u[2].c_str(), "-", "-", "-", "-", "-",
                         std::to_string(in_flight[0]).c_str(), "-"));
  lines.push_back(
      format(row, "protected", std::to_string(last[1].calls).c_str(), p[0].c_str(), p[1].c_str(),
             p[2].c_str(), format("%.0f", delta.retries).c_str(),
             format("%.0f", delta.timeouts).c_str(), format("%.0f", delta.rejected_open).c_str(),
             format("%.0f", delta.rejected_limit).c_str(), breaker_name(now.breaker_state),
             format("%.0f", now.running).c_str(), format("%.0f", now.queued).c_str()));
  std::string frame;
  if (drawn_ > 0) frame += format("\x1b[%dA", drawn_);  // back to the first line of the table
  for (const std::string& l : lines) frame += "\x1b[2K" + l + "\n";
  drawn_ = static_cast<int>(lines.size());
  std::fputs(frame.c_str(), out_);
  std::fflush(out_);
}

std::optional<double> time_to_recover(std::span<const CallRecord> calls, const Schedule& schedule,
                                      int rate) {
  const double from = std::chrono::duration<double>(schedule.start_of(Phase::recovering)).count();
  std::vector<CallRecord> after;
  for (const CallRecord& c : calls) {
    if (c.start >= from) after.push_back(c);
  }
  std::sort(after.begin(), after.end(),
            [](const CallRecord& a, const CallRecord& b) { return a.start < b.start; });
  // Long enough to hold three calls at any rate.
  const double window = std::max(0.5, 3.0 / static_cast<double>(rate));
  for (std::size_t i = 0; i < after.size(); ++i) {
    std::size_t n = 0;
    std::size_t ok = 0;
    for (std::size_t j = i; j < after.size() && after[j].start < after[i].start + window; ++j) {
      ++n;
      if (after[j].result == Result::ok) ++ok;
    }
    if (n >= 3 && static_cast<double>(ok) >= 0.9 * static_cast<double>(n)) {
      return after[i].start - from;
    }
  }
  return std::nullopt;
}

std::string summary_text(const DemoOptions& options, const RunResult& run) {
  const Stats u = stats_of(run.calls[0]);
  const Stats p = stats_of(run.calls[1]);
  const auto reached = [&](std::size_t c) {
    std::uint64_t n = 0;
    for (const std::uint64_t r : run.reached[c]) n += r;
    return n;
  };
  const auto failing = static_cast<std::size_t>(Phase::failing);
  const auto refused = [&](std::size_t c) {
    return std::count_if(run.calls[c].begin(), run.calls[c].end(), [](const CallRecord& r) {
      return r.result == Result::circuit_open || r.result == Result::limit;
    });
  };
  const auto recover = [&](std::size_t c) {
    const std::optional<double> t = time_to_recover(run.calls[c], options.schedule, options.rate);
    return t ? format("%.2f", *t) : std::string("never");
  };
  const double total = std::chrono::duration<double>(options.schedule.total()).count();
  std::string s;
  s += format("summary: %.1f s, %d calls per second from each client\n", total, options.rate);
  s += format("%-40s %12s %12s\n", "", "unprotected", "protected");
  s += format("%-40s %12zu %12zu\n", "calls", u.calls, p.calls);
  s += format("%-40s %12zu %12zu\n", "succeeded", u.ok, p.ok);
  s += format("%-40s %12.1f %12.1f\n", "success rate (%)", u.success_rate(), p.success_rate());
  const auto in_time = [](std::span<const CallRecord> calls) {
    const double deadline = std::chrono::duration<double>(caller_deadline).count();
    const auto n = std::count_if(calls.begin(), calls.end(), [&](const CallRecord& r) {
      return r.result == Result::ok && r.latency <= deadline;
    });
    return calls.empty() ? 0.0 : 100.0 * static_cast<double>(n) / static_cast<double>(calls.size());
  };
  const std::string within =
      format("succeeded within %lld ms (%%)", static_cast<long long>(caller_deadline.count()));
  s +=
      format("%-40s %12.1f %12.1f\n", within.c_str(), in_time(run.calls[0]), in_time(run.calls[1]));
  s += format("%-40s %12.1f %12.1f\n", "latency p50 (ms)", u.p50 * ms, p.p50 * ms);
  s += format("%-40s %12.1f %12.1f\n", "latency p90 (ms)", u.p90 * ms, p.p90 * ms);
  s += format("%-40s %12.1f %12.1f\n", "latency p99 (ms)", u.p99 * ms, p.p99 * ms);
  s += format("%-40s %12.1f %12.1f\n", "latency max (ms)", u.max * ms, p.max * ms);
  s += format("%-40s %12llu %12llu\n", "requests that reached the dependency",
              static_cast<unsigned long long>(reached(0)),
              static_cast<unsigned long long>(reached(1)));
  s += format("%-40s %12llu %12llu\n", "reached the dependency while failing",
              static_cast<unsigned long long>(run.reached[0][failing]),
              static_cast<unsigned long long>(run.reached[1][failing]));
  s += format("%-40s %12td %12td\n", "ended refused (breaker, limit)", refused(0), refused(1));
  s += format("%-40s %12s %12s\n", "time to recover (s)", recover(0).c_str(), recover(1).c_str());
  s += format("%-40s %12s %12.0f\n", "retries", "-", run.counters.retries);
  s += format("%-40s %12s %12.0f\n", "timeouts", "-", run.counters.timeouts);
  return s;
}

namespace {

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

}  // namespace

std::filesystem::path write_chart(const std::filesystem::path& folder, const DemoOptions& options,
                                  const RunResult& run) {
  constexpr double bucket = 0.5;
  const double total = std::chrono::duration<double>(options.schedule.total()).count();
  const auto buckets = static_cast<std::size_t>(std::ceil(total / bucket));
  std::array<std::vector<std::vector<CallRecord>>, client_count> by_start;
  for (std::size_t c = 0; c < client_count; ++c) {
    by_start[c].resize(buckets);
    for (const CallRecord& r : run.calls[c]) {
      // A call the load started a little late, past the end, belongs to the last bucket.
      const auto b = static_cast<std::size_t>(std::max(0.0, r.start) / bucket);
      by_start[c][std::min(b, buckets - 1)].push_back(r);
    }
  }
  {
    std::ofstream csv(folder / "outage_demo.csv");
    csv << "start_s,unprotected_p50_ms,unprotected_p99_ms,unprotected_ok_pct,"
           "protected_p50_ms,protected_p99_ms,protected_ok_pct\n";
    for (std::size_t b = 0; b < buckets; ++b) {
      csv << format("%.2f", (static_cast<double>(b) + 0.5) * bucket);
      for (std::size_t c = 0; c < client_count; ++c) {
        const Stats s = stats_of(by_start[c][b]);
        if (s.calls == 0) {
          csv << ",?,?,?";
        } else {
          csv << format(",%.3f,%.3f,%.1f", s.p50 * ms, s.p99 * ms, s.success_rate());
        }
      }
      csv << '\n';
    }
    if (!csv) throw std::runtime_error("cannot write " + (folder / "outage_demo.csv").string());
  }
  {
    std::ofstream gp(folder / "outage_demo.gp");
    gp << "# Draws outage_demo.png from outage_demo.csv (written by kevlar_outage_demo).\n"
          "set terminal pngcairo size 1280,860 font 'DejaVu Sans,11'\n"
          "set output 'outage_demo.png'\n"
          "set datafile separator ','\n"
          "set datafile missing '?'\n"
          "set multiplot layout 2,1 title 'kevlar outage demo: the same load, unprotected and "
          "through a shield' font ',14'\n"
       << format("set xrange [0:%.2f]\n", total)
       << "set grid\nset key left bottom opaque box\nset lmargin 12\nset rmargin 4\n";
    const char* colours[] = {"#e8f5e9", "#fff3cd", "#fde2e2", "#e3f0fb"};
    for (std::size_t ph = 0; ph < phase_count; ++ph) {
      const auto phase = static_cast<Phase>(ph);
      const double a = std::chrono::duration<double>(options.schedule.start_of(phase)).count();
      const double b = std::chrono::duration<double>(options.schedule.end_of(phase)).count();
      gp << format(
                "set object %zu rect from first %.3f, graph 0 to first %.3f, graph 1 behind "
                "fillcolor rgb '%s' fillstyle solid 1.0 noborder\n",
                ph + 1, a, b, colours[ph])
         << format("set label %zu '%s' at first %.3f, graph 0.95 center font ',12'\n", ph + 1,
                   to_string(phase), (a + b) / 2);
    }
    gp << "set ylabel 'p99 latency (ms, log scale)'\n"
          "set logscale y\n"
          "set format y '%g'\n"
          "plot 'outage_demo.csv' using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#c62828' "
          "title 'unprotected', \\\n"
          "     '' using 1:6 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1565c0' "
          "title 'protected by kevlar'\n"
          "unset logscale y\n"
          "set key left center\n"
          "set ylabel 'calls that succeeded (%)'\n"
          "set yrange [0:110]\n"
          "set xlabel 'seconds since start (calls grouped by start time, 0.5 s buckets)'\n"
          "plot 'outage_demo.csv' using 1:4 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#c62828' "
          "title 'unprotected', \\\n"
          "     '' using 1:7 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1565c0' "
          "title 'protected by kevlar'\n"
          "unset multiplot\n";
    if (!gp) throw std::runtime_error("cannot write " + (folder / "outage_demo.gp").string());
  }
  const std::filesystem::path png = folder / "outage_demo.png";
  std::error_code ignored;
  std::filesystem::remove(png, ignored);
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    throw std::runtime_error(
        "gnuplot is not installed (Debian: apt-get install gnuplot-nox); the chart's data and "
        "script are in " +
        folder.string());
  }
  const std::string command = "cd " + shell_quote(folder.string()) + " && gnuplot outage_demo.gp";
  if (std::system(command.c_str()) != 0 || !std::filesystem::exists(png)) {
    throw std::runtime_error("gnuplot failed to draw " + png.string());
  }
  return png;
}

}  // namespace outage_demo
