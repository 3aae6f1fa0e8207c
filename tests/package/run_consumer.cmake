# run_consumer.cmake — builds and runs a downstream project against kevlar; run by CTest as
#   cmake -DMODE=<find_package|add_subdirectory> -DKEVLAR_SOURCE_DIR=<repo>
#         -DKEVLAR_BINARY_DIR=<kevlar build tree> -DWORK_DIR=<scratch dir>
#         [-DGENERATOR=<gen>] [-DMAKE_PROGRAM=<path>] [-DCXX_COMPILER=<path>]
#         [-DCXX_LAUNCHER=<ccache>] [-DBUILD_TYPE=<cfg>] [-DSANITIZE=<list>]
#         [-DRECYCLING_CACHE_SIZE=<kevlar's KEVLAR_ASIO_RECYCLING_CACHE_SIZE>]
#         -P tests/package/run_consumer.cmake
#
# find_package:     `cmake --install` the kevlar build tree into WORK_DIR/prefix, then configure
#                   tests/package/consumer with CMAKE_PREFIX_PATH=WORK_DIR/prefix (its
#                   find_package(kevlar 0.1 CONFIG REQUIRED) must find that prefix), build, run.
# add_subdirectory: configure tests/package/subdir_consumer, which add_subdirectory()s the
#                   source tree with tests, benchmarks and samples off; build, run.
# WORK_DIR is wiped first, so the test can run any number of times.
#
# Either way the consumer is told kevlar's KEVLAR_ASIO_RECYCLING_CACHE_SIZE (0 when empty) and
# fails to compile unless kevlar::kevlar gave its sources the same recycling cache size.

cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS MODE KEVLAR_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer: -D${var}=... is required")
  endif()
endforeach()
if(MODE STREQUAL "find_package")
  set(project_dir "${KEVLAR_SOURCE_DIR}/tests/package/consumer")
  set(programs kevlar_consumer kevlar_observers_consumer kevlar_testing_consumer
               kevlar_modules_consumer)
  if(NOT DEFINED KEVLAR_BINARY_DIR OR NOT EXISTS "${KEVLAR_BINARY_DIR}/cmake_install.cmake")
    message(FATAL_ERROR "run_consumer: -DKEVLAR_BINARY_DIR must name a configured kevlar build tree")
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  set(project_dir "${KEVLAR_SOURCE_DIR}/tests/package/subdir_consumer")
  set(programs kevlar_subdir_consumer kevlar_subdir_observers kevlar_subdir_testing)
else()
  message(FATAL_ERROR "run_consumer: MODE must be find_package or add_subdirectory, not '${MODE}'")
endif()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# run(<what> <command...>): echo, run, stop on failure.
function(run what)
  message(STATUS "run_consumer: ${what}")
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run_consumer: ${what} failed (${rc})")
  endif()
endfunction()

set(config_args "")
if(DEFINED BUILD_TYPE AND NOT BUILD_TYPE STREQUAL "")
  set(config_args --config "${BUILD_TYPE}")
endif()

set(configure_args -S "${project_dir}" -B "${build}")
if(DEFINED GENERATOR AND NOT GENERATOR STREQUAL "")
  list(APPEND configure_args -G "${GENERATOR}")
endif()
foreach(pair IN ITEMS "MAKE_PROGRAM;CMAKE_MAKE_PROGRAM" "CXX_COMPILER;CMAKE_CXX_COMPILER"
                      "CXX_LAUNCHER;CMAKE_CXX_COMPILER_LAUNCHER" "BUILD_TYPE;CMAKE_BUILD_TYPE")
  list(GET pair 0 in)
  list(GET pair 1 out)
  if(DEFINED ${in} AND NOT "${${in}}" STREQUAL "")
    list(APPEND configure_args "-D${out}=${${in}}")
  endif()
endforeach()
if(DEFINED SANITIZE AND NOT SANITIZE STREQUAL "")
  # A sanitized static libkevlar needs the sanitizer runtime in the consumer too.
  string(REPLACE ";" "," sanitizers "${SANITIZE}")
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${sanitizers}"
                             "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${sanitizers}")
endif()

if(DEFINED RECYCLING_CACHE_SIZE AND NOT RECYCLING_CACHE_SIZE STREQUAL "")
  list(APPEND configure_args "-DKEVLAR_EXPECTED_RECYCLING_CACHE_SIZE=${RECYCLING_CACHE_SIZE}")
else()
  list(APPEND configure_args "-DKEVLAR_EXPECTED_RECYCLING_CACHE_SIZE=0")
endif()

if(MODE STREQUAL "find_package")
  run("install kevlar into ${prefix}"
      "${CMAKE_COMMAND}" --install "${KEVLAR_BINARY_DIR}" --prefix "${prefix}" ${config_args})
  foreach(expected IN ITEMS include/kevlar/kevlar.hpp include/kevlar/shield.hpp
                            include/kevlar/basic_shield.hpp include/kevlar/retry.hpp
                            include/kevlar/metrics.hpp
                            include/kevlar/prometheus.hpp include/kevlar/spdlog.hpp
                            include/kevlar/http.hpp include/kevlar/testing/strategy_driver.hpp
                            include/kevlar/testing/descriptors.hpp)
    if(NOT EXISTS "${prefix}/${expected}")
      message(FATAL_ERROR "run_consumer: the install lacks ${expected}")
    endif()
  endforeach()
  file(GLOB_RECURSE config_files "${prefix}/*/kevlarConfig.cmake" "${prefix}/*/kevlarConfigVersion.cmake")
  list(LENGTH config_files n_config)
  if(n_config LESS 2)
    message(FATAL_ERROR "run_consumer: the install lacks kevlarConfig.cmake / kevlarConfigVersion.cmake")
  endif()
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}" "-DKEVLAR_EXPECTED_PREFIX=${prefix}"
                             -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
else()
  # The vendoring project builds kevlar itself, with the cache size kevlar's own build used.
  list(APPEND configure_args "-DKEVLAR_SOURCE_DIR=${KEVLAR_SOURCE_DIR}"
                             "-DKEVLAR_ASIO_RECYCLING_CACHE_SIZE=${RECYCLING_CACHE_SIZE}")
endif()

run("configure ${project_dir}" "${CMAKE_COMMAND}" ${configure_args})
run("build ${programs}" "${CMAKE_COMMAND}" --build "${build}" --parallel 2 ${config_args})

foreach(program IN LISTS programs)
  find_program(program_path ${program} PATHS "${build}" "${build}/${BUILD_TYPE}" NO_DEFAULT_PATH
               NO_CACHE)
  if(NOT program_path)
    message(FATAL_ERROR "run_consumer: ${program} was not built under ${build}")
  endif()
  run("run ${program}" "${program_path}")
  unset(program_path)
endforeach()
message(STATUS "run_consumer: ${MODE} consumer built and ran against kevlar")
