// The one piece of Asio's private API kevlar reads (src/asio_private.cpp): whether a context takes
// posts from a thread of its own. Pinned here so that an Asio upgrade that changes it fails.
#include <kevlar/detail/asio_private.hpp>

#include <gtest/gtest.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/thread_pool.hpp>

namespace kevlar {
namespace {

namespace asio = boost::asio;

TEST(AsioPrivate, AnIoContextTakesForeignPostsUnlessItsSchedulerHasNoLock) {
  asio::io_context locking;
  EXPECT_TRUE(detail::accepts_foreign_posts(locking.get_executor()));
  asio::io_context one_thread(1);  // still locking: a hint of 1 only tunes
  EXPECT_TRUE(detail::accepts_foreign_posts(one_thread.get_executor()));
  asio::io_context unsafe(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE);
  EXPECT_FALSE(detail::accepts_foreign_posts(unsafe.get_executor()));
  // Without the reactor's I/O lock the scheduler still locks: posts from another thread are safe.
  asio::io_context unsafe_io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO);
  EXPECT_TRUE(detail::accepts_foreign_posts(unsafe_io.get_executor()));
  // Through a strand and a type-erased executor: the same context.
  EXPECT_FALSE(detail::accepts_foreign_posts(asio::any_io_executor(asio::make_strand(unsafe))));
  EXPECT_TRUE(detail::accepts_foreign_posts(asio::any_io_executor(asio::make_strand(locking))));
}

TEST(AsioPrivate, OtherContextsTakeThem) {
  asio::thread_pool pool(1);
  EXPECT_TRUE(detail::accepts_foreign_posts(pool.get_executor()));
  EXPECT_TRUE(detail::accepts_foreign_posts(asio::system_executor()));
  pool.join();
}

}  // namespace
}  // namespace kevlar
