#include <kevlar/context.hpp>
#include <kevlar/testing/event_recorder.hpp>

#include <chrono>
#include <iterator>
#include <ostream>

namespace kevlar::testing {

const char* event_name(const RecordedDetail& detail) noexcept {
  // A kind's name is its type's `kevlar_event`, a string literal: null-terminated.
  return detail.name().data();
}

std::ostream& operator<<(std::ostream& os, const RecordedEvent& e) {
  os << '#' << e.sequence << ' ' << event_name(e.detail);
  if (e.strategy_index != EventSource::no_strategy) os << " @" << e.strategy_index;
  return os;
}

void EventRecorder::on_event(const Event& event) {
  RecordedEvent r{0, std::nullopt, event.source.strategy_index, std::nullopt,
                  RecordedDetail(event)};
  if (event.source.shield_name != nullptr) r.shield_name = *event.source.shield_name;
  if (event.source.context != nullptr) r.context_attempt = event.source.context->attempt();
  const std::lock_guard lock(mutex_);
  r.sequence = next_sequence_++;
  events_.push_back(std::move(r));
  recorded_.notify_all();
}

std::vector<RecordedEvent> EventRecorder::events() const {
  const std::lock_guard lock(mutex_);
  return events_;
}

std::vector<RecordedDetail> EventRecorder::details() const {
  std::vector<RecordedDetail> r;
  const std::lock_guard lock(mutex_);
  r.reserve(events_.size());
  for (const RecordedEvent& e : events_) r.push_back(e.detail);
  return r;
}

std::size_t EventRecorder::size() const {
  const std::lock_guard lock(mutex_);
  return events_.size();
}

void EventRecorder::clear() {
  const std::lock_guard lock(mutex_);
  events_.clear();
}

bool EventRecorder::wait_for_count(std::size_t n) const {
  std::unique_lock lock(mutex_);
  return recorded_.wait_for(lock, std::chrono::seconds(5), [&] { return events_.size() >= n; });
}

}  // namespace kevlar::testing
