// The spdlog observer: one key=value line per event, repeated events summarised per window.
#include <kevlar/adaptive_concurrency_limit.hpp>
#include <kevlar/adaptive_throttle.hpp>
#include <kevlar/chaos.hpp>
#include <kevlar/circuit_breaker.hpp>
#include <kevlar/concurrency_limit.hpp>
#include <kevlar/fallback.hpp>
#include <kevlar/hedging.hpp>
#include <kevlar/retry.hpp>
#include <kevlar/spdlog.hpp>
#include <kevlar/strategy.hpp>
#include <kevlar/timeout.hpp>

#include <spdlog/logger.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace kevlar {
namespace {

using spdlog::level::level_enum;

/// The name a line gives an event's kind: its type's name in snake case (`RetryScheduled` ->
/// `retry_scheduled`), for kevlar's events and any other.
void append_event_name(fmt::memory_buffer& out, std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c >= 'A' && c <= 'Z') {
      if (i != 0) out.push_back('_');
      out.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      out.push_back(c);
    }
  }
}

level_enum level_of(const Event& e) {
  if (const auto* f = e.get_if<ExecutionFinished>()) {
    return f->success ? level_enum::debug : level_enum::err;
  }
  // A throttle's rejection is logged at warn as its Rejected event; Throttled adds the numbers.
  if (e.is<AttemptStarted>() || e.is<LimiterStateChanged>() || e.is<Throttled>()) {
    return level_enum::debug;
  }
  if (e.is<RetryScheduled>() || e.is<FallbackTaken>()) return level_enum::info;
  if (e.is<TimeoutFired>() || e.is<Rejected>() || e.is<RetryBudgetExhausted>()) {
    return level_enum::warn;
  }
  if (const auto* t = e.get_if<BreakerTransition>()) {
    return t->to == CircuitState::open || t->to == CircuitState::isolated ? level_enum::warn
                                                                          : level_enum::info;
  }
  if (e.is<ChaosInjected>()) return level_enum::warn;  // deliberate, but an operator must see it
  return level_enum::info;
}

/// 250ms, 1.5s, 12.345us, 0s: the largest unit that keeps the value at least 1, up to 3 decimals.
void append_duration(fmt::memory_buffer& out, Clock::duration d) {
  const auto ns = d.count();
  if (ns == 0) {
    fmt::format_to(std::back_inserter(out), "0s");
    return;
  }
  struct Unit {
    std::int64_t ticks;
    const char* name;
  };
  constexpr Unit units[] = {{3'600'000'000'000, "h"}, {60'000'000'000, "min"},
                            {1'000'000'000, "s"},     {1'000'000, "ms"},
                            {1'000, "us"},            {1, "ns"}};
  const std::int64_t magnitude = ns < 0 ? -ns : ns;
  for (const Unit& u : units) {
    if (magnitude >= u.ticks || u.ticks == 1) {
      if (ns % u.ticks == 0) {
        fmt::format_to(std::back_inserter(out), "{}{}", ns / u.ticks, u.name);
      } else {
        // Up to three decimals, trailing zeros dropped.
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / static_cast<double>(u.ticks));
        std::string_view s(buf);
        while (s.back() == '0') s.remove_suffix(1);
        if (s.back() == '.') s.remove_suffix(1);
        fmt::format_to(std::back_inserter(out), "{}{}", s, u.name);
      }
      return;
    }
  }
}

/// A value, quoted (with " and \ escaped) when it holds a space, a quote, a '=' or nothing.
void append_value(fmt::memory_buffer& out, std::string_view v) {
  const bool plain = !v.empty() && v.find_first_of(" \"=\\\t\n") == std::string_view::npos;
  if (plain) {
    out.append(v.data(), v.data() + v.size());
    return;
  }
  out.push_back('"');
  for (const char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out.push_back('\\');
      out.push_back('n');
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
}

void append_field(fmt::memory_buffer& out, std::string_view key, std::string_view value) {
  out.push_back(' ');
  out.append(key.data(), key.data() + key.size());
  out.push_back('=');
  append_value(out, value);
}

void append_failure(fmt::memory_buffer& out, const Failure& f) {
  if (f.exception) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(f.exception);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    append_field(out, "exception", what);
  } else if (f.error) {
    append_field(out, "error.category", f.error.category().name());
    append_field(out, "error.code", std::to_string(f.error.value()));
    append_field(out, "error.message", f.error.message());
  }
}

void append_source(fmt::memory_buffer& out, const Event& e) {
  fmt::format_to(std::back_inserter(out), "kevlar event=");
  append_event_name(out, e.kind.name());
  if (e.source.shield_name != nullptr) append_field(out, "shield", *e.source.shield_name);
  if (e.source.strategy != nullptr) {
    append_field(out, "strategy", e.source.strategy->describe());
    fmt::format_to(std::back_inserter(out), " strategy.index={}", e.source.strategy_index);
  }
}

void format_event(fmt::memory_buffer& out, const Event& event) {
  append_source(out, event);
  const auto it = std::back_inserter(out);
  if (const auto* d = event.get_if<ExecutionFinished>()) {
    fmt::format_to(it, " outcome={} duration=", d->success ? "success" : "failure");
    append_duration(out, d->duration);
    fmt::format_to(it, " attempts={}", d->attempts);
    if (!d->success) append_failure(out, d->failure);
  } else if (const auto* a = event.get_if<AttemptStarted>()) {
    fmt::format_to(it, " attempt={}", a->attempt);
  } else if (const auto* r = event.get_if<RetryScheduled>()) {
    fmt::format_to(it, " retry={} delay=", r->retry);
    append_duration(out, r->delay);
    append_failure(out, r->failure);
  } else if (const auto* t = event.get_if<TimeoutFired>()) {
    fmt::format_to(it, " timeout=");
    append_duration(out, t->timeout);
  } else if (const auto* f = event.get_if<FallbackTaken>()) {
    append_failure(out, f->failure);
  } else if (const auto* j = event.get_if<Rejected>()) {
    fmt::format_to(it, " rejection.type={}", to_string(j->kind));
    if (j->retry_after) {
      fmt::format_to(it, " retry_after=");
      append_duration(out, *j->retry_after);
    }
  } else if (const auto* b = event.get_if<BreakerTransition>()) {
    fmt::format_to(it, " from={} to={}", to_string(b->from), to_string(b->to));
    append_failure(out, b->failure);
  } else if (const auto* l = event.get_if<LimiterStateChanged>()) {
    fmt::format_to(it, " running={} queued={}", l->running, l->queued);
  } else if (const auto* a = event.get_if<LimitChanged>()) {
    fmt::format_to(it, " limit={}->{} reason={} samples={} dropped={} rtt=", a->old_limit,
                   a->new_limit, to_string(a->reason), a->samples, a->dropped);
    append_duration(out, a->average_rtt);
  } else if (const auto* t = event.get_if<Throttled>()) {
    fmt::format_to(it, " throttle.probability={:.3f} throttle.requests={} throttle.accepts={}",
                   t->probability, t->requests, t->accepts);
  } else if (const auto* b = event.get_if<RetryBudgetExhausted>()) {
    fmt::format_to(it, " budget.mode={} attempt.kind={} attempt={} budget.balance={}",
                   to_string(b->mode), b->hedge ? "hedge" : "retry", b->attempt, b->balance);
  } else if (const auto* h = event.get_if<HedgeLaunched>()) {
    fmt::format_to(it, " attempt={}", h->attempt);
  } else if (const auto* c = event.get_if<ChaosInjected>()) {
    fmt::format_to(it, " chaos.kind={}", to_string(c->kind));
    if (!c->operation.empty()) append_field(out, "chaos.operation", c->operation);
    if (!c->environment.empty()) append_field(out, "chaos.environment", c->environment);
  }
  // Another kind (a user strategy's own event): its source alone.
}

}  // namespace

// ShieldTag: a shield as the summaries know it. Announced shields get one each (EventSource::
// observer_state points to it), so that two shields of one name keep separate windows.

/// One summary window: the events of one kind (and outcome), shield and strategy.
struct SpdlogObserver::Window {
  EventKind kind;
  bool success;
  const void* shield_tag;  ///< the announced shield, or nullptr (then the name tells shields apart)
  std::string shield;      ///< empty and !named for an unnamed shield
  bool named;
  std::size_t strategy_index;
  level_enum level;
  Clock::time_point start;
  std::uint64_t suppressed = 0;
  std::string head;  ///< the line's "kevlar event=... strategy.index=..." part, for the summary

  [[nodiscard]] bool is(const EventKind& k, bool ok, const Event& e) const noexcept {
    if (kind != k || success != ok || strategy_index != e.source.strategy_index) return false;
    if (shield_tag != nullptr || e.source.observer_state != nullptr) {
      return shield_tag == e.source.observer_state;
    }
    return e.source.shield_name == nullptr ? !named : named && shield == *e.source.shield_name;
  }
};

struct SpdlogObserver::Pending {
  level_enum level;
  std::string head;
  std::uint64_t count;
};

SpdlogObserver::SpdlogObserver(std::shared_ptr<spdlog::logger> logger,
                               SpdlogObserverOptions options)
    : logger_(std::move(logger)), options_(std::move(options)) {
  if (!logger_) throw std::invalid_argument("kevlar::SpdlogObserver: the logger is null");
  if (options_.summary_window <= Clock::duration::zero() ||
      options_.summary_window > std::chrono::hours(24)) {
    throw std::invalid_argument(
        "kevlar::SpdlogObserverOptions::summary_window must be positive and at most 24 h");
  }
  clock_ = options_.clock ? options_.clock : Clock::steady();
  next_due_ = Clock::time_point::max();
}

SpdlogObserver::~SpdlogObserver() {
  try {
    flush_summaries(true);
  } catch (...) {  // a sink that throws while the observer goes away: the lines are lost
  }
}

std::uint64_t SpdlogObserver::suppressed() const noexcept {
  const std::lock_guard lock(mutex_);
  return suppressed_;
}

void SpdlogObserver::write_summaries(const std::vector<Pending>& pending) {
  for (const Pending& p : pending) {
    fmt::memory_buffer line;
    line.append(p.head.data(), p.head.data() + p.head.size());
    fmt::format_to(std::back_inserter(line), " more={} window=", p.count);
    append_duration(line, options_.summary_window);
    logger_->log(p.level, spdlog::string_view_t(line.data(), line.size()));
  }
}

void SpdlogObserver::flush_summaries(bool all) {
  std::vector<Pending> pending;
  {
    const std::lock_guard lock(mutex_);
    if (!all) {
      collect_due(clock_->now(), pending);
    } else {
      for (Window& w : windows_) {
        if (w.suppressed == 0) continue;
        pending.push_back({w.level, w.head, w.suppressed});
        w.suppressed = 0;
        w.start = Clock::time_point::min();  // closed: the next such event is written
      }
      next_due_ = Clock::time_point::max();
    }
  }
  write_summaries(pending);
}

void SpdlogObserver::on_shield(ShieldInfo& shield) {
  const std::lock_guard lock(mutex_);
  shield.observer_state = &tags_.emplace_back();
}

void SpdlogObserver::collect_due(Clock::time_point now, std::vector<Pending>& pending) {
  if (now < next_due_) return;
  next_due_ = Clock::time_point::max();
  for (Window& x : windows_) {
    if (x.suppressed == 0) continue;
    if (now - x.start >= options_.summary_window) {
      pending.push_back({x.level, x.head, x.suppressed});
      x.suppressed = 0;
    } else {
      next_due_ = std::min(next_due_, x.start + options_.summary_window);
    }
  }
}

void SpdlogObserver::on_event(const Event& event) {
  const level_enum level = level_of(event);
  if (!logger_->should_log(level)) return;
  const EventKind& kind = event.kind;
  std::vector<Pending> pending;
  bool write = true;
  if (options_.summarize) {
    const auto* finished = event.get_if<ExecutionFinished>();
    const bool ok = finished != nullptr && finished->success;
    const std::lock_guard lock(mutex_);
    const Clock::time_point now = clock_->now();
    if (!event.is<BreakerTransition>()) {  // breaker transitions are always written
      auto w = std::find_if(windows_.begin(), windows_.end(),
                            [&](const Window& x) { return x.is(kind, ok, event); });
      if (w == windows_.end()) {
        // Windows that ended with nothing to report carry nothing: drop them, so that the list
        // holds only the windows of events seen within the last window's length.
        std::erase_if(windows_, [&](const Window& x) {
          return x.suppressed == 0 &&
                 (x.start == Clock::time_point::min() || now - x.start >= options_.summary_window);
        });
        fmt::memory_buffer head;
        append_source(head, event);
        windows_.push_back(Window{kind, ok, event.source.observer_state,
                                  event.source.shield_name ? *event.source.shield_name : std::string(),
                                  event.source.shield_name != nullptr, event.source.strategy_index,
                                  level, now, 0, std::string(head.data(), head.size())});
      } else if (w->start == Clock::time_point::min() || now - w->start >= options_.summary_window) {
        if (w->suppressed != 0) pending.push_back({w->level, w->head, w->suppressed});
        w->start = now;
        w->suppressed = 0;
      } else {
        if (w->suppressed++ == 0) next_due_ = std::min(next_due_, w->start + options_.summary_window);
        ++suppressed_;
        write = false;
      }
    }
    collect_due(now, pending);  // other windows that ended with lines still unreported
  }
  write_summaries(pending);
  if (!write) return;
  fmt::memory_buffer line;
  format_event(line, event);
  logger_->log(level, spdlog::string_view_t(line.data(), line.size()));
}

}  // namespace kevlar
