# Directory.cmake — the one place that pins kevlar's external dependencies.
#
# Every find_package() in this repository goes through kevlar_find(), which takes
# the version floor from here; cmake/kevlarConfig.cmake.in and vcpkg.json repeat
# the same floors (tests/check_pins verifies that vcpkg.json agrees with this file).
# The floors are the versions Debian bookworm ships; newer versions must keep working.

set(KEVLAR_DEP_Boost_VERSION 1.81)
set(KEVLAR_DEP_spdlog_VERSION 1.10)
set(KEVLAR_DEP_fmt_VERSION 9.1)
set(KEVLAR_DEP_GTest_VERSION 1.12)
set(KEVLAR_DEP_benchmark_VERSION 1.7.1)

# kevlar_find(<package> [extra find_package arguments...])
macro(kevlar_find package)
  if(NOT DEFINED KEVLAR_DEP_${package}_VERSION)
    message(FATAL_ERROR "kevlar: ${package} has no pinned version in Directory.cmake")
  endif()
  find_package(${package} ${KEVLAR_DEP_${package}_VERSION} CONFIG REQUIRED ${ARGN})
endmacro()
