#include <kevlar/context.hpp>
#include <kevlar/error.hpp>
#include <kevlar/outcome.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <array>
#include <exception>
#include <string>
#include <system_error>
#include <typeinfo>

namespace kevlar {
namespace {

class Category final : public boost::system::error_category {
 public:
  // A fixed identifier makes codes compare equal across shared-library boundaries.
  constexpr Category() noexcept : boost::system::error_category(0x6b65766c61720001ULL) {}

  const char* name() const noexcept override { return "kevlar"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::timeout:
        return "the call did not complete within its timeout";
      case errc::circuit_open:
        return "the circuit is open and is rejecting calls";
      case errc::isolated:
        return "the circuit is isolated and is rejecting calls until it is reset";
      case errc::rate_limited:
        return "the rate limit has been exceeded";
      case errc::concurrency_limit_exceeded:
        return "the concurrency limit and its queue are both full";
      case errc::closed:
        return "the strategy or primitive has been closed";
      case errc::callback_exception:
        return "a user callback threw an exception that carries no error code";
      case errc::invalid_result_type:
        return "a typed callback does not match the call's result type";
      case errc::executor_required:
        return "the call's completion handler has no associated executor, which this shield's "
               "timeout needs to deliver its expiry: bind one with asio::bind_executor (or use a "
               "coroutine's token)";
      case errc::throttled:
        return "the call was throttled locally: the dependency has been refusing too many recent "
               "requests";
      case errc::queue_timeout:
        return "the call waited in a limiter's queue past its queue-wait timeout or its deadline";
    }
    return "unknown kevlar error " + std::to_string(value);
  }
};

constexpr Category category_instance;

}  // namespace

const boost::system::error_category& error_category() noexcept {
  return category_instance;
}

bool is_cancellation(const boost::system::error_code& ec) noexcept {
  return ec == boost::asio::error::operation_aborted ||
         ec == boost::system::errc::operation_canceled;
}

Error::Error(const boost::system::error_code& ec, std::optional<duration> retry_after)
    : std::system_error(static_cast<std::error_code>(ec)), error_(ec), retry_after_(retry_after) {}

void Context::throw_cancelled() {
  throw Error(boost::asio::error::operation_aborted);
}

namespace detail {

namespace {

#if defined(__GLIBCXX__)
/// Whether exceptions of a dynamic type can carry an error code (derive from std::system_error or
/// boost::system::system_error) is a property of the type: each thread learns it once per type, by
/// one rethrow, and answers "no error code" for that type afterwards without rethrowing (a rethrow
/// costs about a microsecond). Types that can carry one are always rethrown: the code belongs to
/// the instance. Only libstdc++ names an exception_ptr's type without rethrowing it.
struct TypeVerdict {
  const std::type_info* type = nullptr;
  bool carries_code = false;
};
thread_local std::array<TypeVerdict, 8> tl_verdicts{};
thread_local unsigned tl_next_verdict = 0;

const TypeVerdict* known_verdict(const std::type_info* type) noexcept {
  for (const TypeVerdict& v : tl_verdicts) {
    if (v.type == type) return &v;
  }
  return nullptr;
}

void remember_verdict(const std::type_info* type, bool carries_code) noexcept {
  tl_verdicts[tl_next_verdict++ % tl_verdicts.size()] = TypeVerdict{type, carries_code};
}
#endif

}  // namespace

boost::system::error_code error_of_exception(const std::exception_ptr& ep) noexcept {
  if (!ep) return {};
#if defined(__GLIBCXX__)
  const std::type_info* type = ep.__cxa_exception_type();
  if (type != nullptr) {
    if (const TypeVerdict* v = known_verdict(type); v != nullptr && !v->carries_code) return {};
  }
  bool carries_code = true;
  boost::system::error_code ec;
  try {
    std::rethrow_exception(ep);
  } catch (const Error& e) {
    ec = e.error();
  } catch (const boost::system::system_error& e) {
    ec = e.code();
  } catch (const std::system_error& e) {
    ec = boost::system::error_code(e.code());
  } catch (...) {
    carries_code = false;
  }
  if (type != nullptr && known_verdict(type) == nullptr) remember_verdict(type, carries_code);
  return ec;
#else
  try {
    std::rethrow_exception(ep);
  } catch (const Error& e) {
    return e.error();
  } catch (const boost::system::system_error& e) {
    return e.code();
  } catch (const std::system_error& e) {
    return boost::system::error_code(e.code());
  } catch (...) {
  }
  return {};
#endif
}

bool is_cancellation_exception(const std::exception_ptr& ep) noexcept {
  const boost::system::error_code ec = error_of_exception(ep);
  return ec && is_cancellation(ec);
}

}  // namespace detail
}  // namespace kevlar
