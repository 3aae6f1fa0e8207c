// kevlar — handling clauses: which outcomes the reactive strategies treat as failures.
#pragma once

#include <kevlar/outcome.hpp>

#include <boost/system/error_code.hpp>

#include <exception>
#include <functional>
#include <memory>
#include <typeindex>
#include <utility>
#include <vector>

namespace kevlar {

/// A handling clause decides which outcomes count as failures for the reactive strategies
/// (retry, circuit breaker, hedging, fallback) that follow it in a Shield.
///
/// A clause is a list of conditions, OR-ed together and tested in the order they were added:
/// - error conditions (`error`, `errors_if`) match error-code outcomes, and exceptions that carry
///   an error code (`boost::system::system_error`, `std::system_error`, kevlar::Error);
/// - exception conditions (`exception<E>`) match exception outcomes whose object is an `E`
///   (derived types match);
/// - result conditions (`result<T>`, `result_equal<T>`) match successful outcomes whose value
///   has type T (an HTTP 503 response is a failure without being an error).
/// An error or exception never matches a result condition and a success never matches an error or
/// exception condition. A clause with no condition matches nothing.
///
/// Without any clause a shield uses default_clause(): every error and exception except the
/// caller's own cancellation (see kevlar::is_cancellation) is a failure. A clause written by hand
/// may list cancellation explicitly to act on it.
///
/// A predicate that throws makes the evaluating strategy fail with that exception (the same
/// object), as if the call had thrown it.
///
/// Thread-safety: build a clause on one thread; once handed to a Shield it is immutable and safe
/// to evaluate from any number of threads.
class Clause {
 public:
  /// An empty clause (matches nothing until conditions are added).
  Clause() = default;

  /// Matches error codes equal to `ec` (and exceptions carrying such a code).
  Clause& error(const boost::system::error_code& ec);
  /// Matches kevlar's own error `e` (e.g. `errc::timeout`).
  Clause& error(errc e) { return error(make_error_code(e)); }
  /// Matches error codes for which `pred` returns true.
  Clause& errors_if(std::function<bool(const boost::system::error_code&)> pred);

  /// Matches exceptions of type E or derived from it.
  template <class E>
  Clause& exception() {
    return add_exception([](const std::exception_ptr& ep) -> bool {
      try {
        std::rethrow_exception(ep);
      } catch (const E&) {
        return true;
      } catch (...) {
        return false;
      }
    });
  }
  /// Matches exceptions of type E (or derived) for which `pred(e)` returns true.
  template <class E, class Pred>
  Clause& exception(Pred pred) {
    return add_exception([p = std::move(pred)](const std::exception_ptr& ep) -> bool {
      try {
        std::rethrow_exception(ep);
      } catch (const E& e) {
        return static_cast<bool>(p(e));
      } catch (...) {
        return false;
      }
    });
  }
  /// Matches any exception for which `pred(ep)` returns true.
  Clause& exceptions_if(std::function<bool(const std::exception_ptr&)> pred) {
    return add_exception(std::move(pred));
  }

  /// Matches successful outcomes whose value is a T for which `pred(value)` returns true.
  template <class T, class Pred>
  Clause& result(Pred pred) {
    results_.push_back(
        ResultCondition{std::type_index(typeid(T)), [p = std::move(pred)](const void* v) -> bool {
                          return static_cast<bool>(p(*static_cast<const T*>(v)));
                        }});
    return *this;
  }
  /// Matches successful outcomes whose value is a T equal to `value`.
  template <class T>
  Clause& result_equal(T value) {
    return result<T>([v = std::move(value)](const T& x) { return x == v; });
  }

  /// True if the clause matches `outcome`. May throw what a predicate throws.
  [[nodiscard]] bool handles(const OutcomeRef& outcome) const;

  /// True if the clause has result conditions (a successful outcome can match only then).
  [[nodiscard]] bool judges_results() const noexcept { return !results_.empty(); }

  /// True if the clause has no condition at all.
  [[nodiscard]] bool empty() const noexcept {
    return errors_.empty() && exceptions_.empty() && results_.empty() && !default_;
  }

  /// The clause used when a shield has none: any failure except the caller's cancellation. The
  /// same object is returned every time (clauses are compared by identity when a shield checks
  /// that a fallback is reachable).
  [[nodiscard]] static const std::shared_ptr<const Clause>& default_clause();

 private:
  struct ResultCondition {
    std::type_index type;
    std::function<bool(const void*)> pred;
  };
  Clause& add_exception(std::function<bool(const std::exception_ptr&)> pred);

  std::vector<std::function<bool(const boost::system::error_code&)>> errors_;
  std::vector<std::function<bool(const std::exception_ptr&)>> exceptions_;
  std::vector<ResultCondition> results_;
  bool default_ = false;
};

}  // namespace kevlar
