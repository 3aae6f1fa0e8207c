// The one place kevlar reads Asio's private API (boost/asio/detail/): an io_context's concurrency
// hint, on its scheduler service. tests/core/asio_private_test.cpp pins what it answers, so that an
// Asio upgrade that moves it fails there.
#include <kevlar/detail/asio_private.hpp>

#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/detail/scheduler.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>

namespace kevlar::detail {

/// Whether the deadline thread may post to the context of `ex` from its own thread: not to an
/// io_context built with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE (or another hint without the
/// scheduler's lock), whose queue only its own thread may touch. Such a context gets the clock
/// timer on the context instead.
bool accepts_foreign_posts(const boost::asio::any_io_executor& ex) {
  // An io_context's (and a thread_pool's) implementation is Asio's scheduler service.
  using Scheduler = boost::asio::detail::scheduler;
  boost::asio::execution_context& ctx = boost::asio::query(ex, boost::asio::execution::context);
  if (!boost::asio::has_service<Scheduler>(ctx)) return true;
  const int hint = boost::asio::use_service<Scheduler>(ctx).concurrency_hint();
  return BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, hint);
}

}  // namespace kevlar::detail
