# asio_recycling.cmake — the option KEVLAR_ASIO_RECYCLING_CACHE_SIZE: how many blocks Asio's
# thread-local recycling allocator keeps per purpose (BOOST_ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE;
# Asio's default is 2). docs/execution.md ("Asio's recycling cache") says when to set it.
#
# Included by CMakeLists.txt, which calls kevlar_check_recycling_cache_size() on the cache
# variable before it becomes a compile definition. Also runs on its own, so that the tests can
# feed it bad values without configuring the whole project:
#
#   cmake -DKEVLAR_ASIO_RECYCLING_CACHE_SIZE=<value> -P cmake/asio_recycling.cmake
#
# prints "kevlar: KEVLAR_ASIO_RECYCLING_CACHE_SIZE=<value> accepted" or fails with the reason.

# The largest accepted value. The cache is an array of (5 purposes x size) pointers inside Asio's
# per-thread record, which lives on the stack of every thread running an io_context, and every
# allocation and deallocation searches its purpose's slots one by one: a typo such as 100000
# would cost megabytes of stack per thread and a long search per allocation.
set(KEVLAR_ASIO_RECYCLING_CACHE_SIZE_MAX 64)

# kevlar_check_recycling_cache_size(<value>): fails the configuration unless <value> is empty
# (Asio's default) or a decimal integer from 1 to KEVLAR_ASIO_RECYCLING_CACHE_SIZE_MAX without a
# leading zero (the value is pasted into C++ as a literal, where 010 would mean 8).
function(kevlar_check_recycling_cache_size value)
  if("${value}" STREQUAL "")
    return()
  endif()
  set(problem "")
  if(NOT value MATCHES "^[1-9][0-9]*$")
    set(problem "it must be a positive decimal integer without a leading zero, or empty for Asio's default (2)")
  elseif(value GREATER KEVLAR_ASIO_RECYCLING_CACHE_SIZE_MAX)
    set(problem "the largest accepted value is ${KEVLAR_ASIO_RECYCLING_CACHE_SIZE_MAX} (the cache lives on every io_context thread's stack and is searched slot by slot)")
  endif()
  if(problem)
    message(FATAL_ERROR "kevlar: KEVLAR_ASIO_RECYCLING_CACHE_SIZE='${value}' is not valid: ${problem}.")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  kevlar_check_recycling_cache_size("${KEVLAR_ASIO_RECYCLING_CACHE_SIZE}")
  message("kevlar: KEVLAR_ASIO_RECYCLING_CACHE_SIZE=${KEVLAR_ASIO_RECYCLING_CACHE_SIZE} accepted")
endif()
