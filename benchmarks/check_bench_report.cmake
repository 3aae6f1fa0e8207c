# CTest's smoke test of tools/bench-report.sh: a short report of the BM_Overhead rows from this
# build (2 repetitions of 0.01 s, the committed instruction baseline), then checks that the
# markdown has a row for every benchmark the filter selects, with its control, and that the
# chart is a PNG.
#
#   cmake -DROOT=<source dir> -DBUILD=<build dir> -DBENCH=<kevlar_benchmarks> -DOUT=<folder>
#         -P check_bench_report.cmake
cmake_minimum_required(VERSION 3.20)

set(filter "BM_Overhead/")
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${ROOT}/tools/bench-report.sh" --build-dir "${BUILD}" --filter "${filter}"
          --repetitions 2 --min-time 0.01 --no-instructions --out-dir "${OUT}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tools/bench-report.sh exited with ${rc}:\n${out}\n${err}")
endif()

execute_process(COMMAND "${BENCH}" --benchmark_list_tests=true "--benchmark_filter=${filter}"
                OUTPUT_VARIABLE names RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR names STREQUAL "")
  message(FATAL_ERROR "kevlar_benchmarks listed no ${filter} benchmarks")
endif()
string(STRIP "${names}" names)
string(REPLACE "\n" ";" names "${names}")

file(READ "${OUT}/benchmarks.md" md)
foreach(needle IN ITEMS "## The run" "- Command: `tools/bench-report.sh" "- Machine: "
                        "- Compiler: " "## How to read it" "benchmarks.png")
  string(FIND "${md}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "benchmarks.md has no '${needle}'")
  endif()
endforeach()
list(LENGTH names expected)
set(found 0)
foreach(name IN LISTS names)
  string(FIND "${md}" "\n| `${name}`" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "benchmarks.md has no row for ${name}")
  endif()
  math(EXPR found "${found} + 1")
endforeach()
# The rows over the raw baseline name it and give a ratio.
string(REGEX MATCH "\n\\| `BM_Overhead/one_layer_sync`[^\n]*\\| `BM_Overhead/raw_sync` \\| [0-9.]+ \\|"
       paired "${md}")
if(NOT paired)
  message(FATAL_ERROR "BM_Overhead/one_layer_sync is not paired with BM_Overhead/raw_sync")
endif()

file(READ "${OUT}/benchmarks.png" magic LIMIT 8 HEX)
if(NOT magic STREQUAL "89504e470d0a1a0a")
  message(FATAL_ERROR "benchmarks.png is not a PNG (starts with ${magic})")
endif()
message("bench-report: ${found} of ${expected} rows, chart drawn")
