#include <kevlar/clause.hpp>

#include <stdexcept>

namespace kevlar {

Clause& Clause::error(const boost::system::error_code& ec) {
  if (!ec) throw std::invalid_argument("kevlar::Clause::error: the error code is empty");
  errors_.emplace_back([ec](const boost::system::error_code& e) { return e == ec; });
  return *this;
}

Clause& Clause::errors_if(std::function<bool(const boost::system::error_code&)> pred) {
  if (!pred) throw std::invalid_argument("kevlar::Clause::errors_if: the predicate is empty");
  errors_.push_back(std::move(pred));
  return *this;
}

Clause& Clause::add_exception(std::function<bool(const std::exception_ptr&)> pred) {
  if (!pred) throw std::invalid_argument("kevlar::Clause::exceptions_if: the predicate is empty");
  exceptions_.push_back(std::move(pred));
  return *this;
}

bool Clause::handles(const OutcomeRef& outcome) const {
  if (default_) return outcome.failed() && !outcome.is_cancellation();
  switch (outcome.kind()) {
    case OutcomeKind::value: {
      for (const ResultCondition& r : results_) {
        if (r.type != outcome.value_type()) continue;
        const void* v = outcome.raw_value();
        if (v != nullptr && r.pred(v)) return true;
      }
      return false;
    }
    case OutcomeKind::error:
      for (const auto& pred : errors_) {
        if (pred(outcome.error())) return true;
      }
      return false;
    case OutcomeKind::exception:
      break;
  }
  for (const auto& pred : exceptions_) {
    if (pred(outcome.exception())) return true;
  }
  if (!errors_.empty()) {
    const boost::system::error_code ec = detail::error_of_exception(outcome.exception());
    if (ec) {
      for (const auto& pred : errors_) {
        if (pred(ec)) return true;
      }
    }
  }
  return false;
}

const std::shared_ptr<const Clause>& Clause::default_clause() {
  static const std::shared_ptr<const Clause> instance = [] {
    auto c = std::make_shared<Clause>();
    c->default_ = true;
    return std::shared_ptr<const Clause>(std::move(c));
  }();
  return instance;
}

}  // namespace kevlar
