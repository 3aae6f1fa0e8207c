# CTest's check of the outage demo: runs a 5-second version (0.5 s healthy, 1 s slow, 1.5 s
# failing, 2 s recovering), then compares the summary's figures
# with what the scenario guarantees, checks the chart is a real PNG, and checks that a bad flag
# is refused with the usage text.
#
#   cmake -DDEMO=<kevlar_outage_demo> -DOUT=<folder> -P check_demo.cmake
cmake_minimum_required(VERSION 3.20)

file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${DEMO}" --healthy 0.5 --slow 1 --failing 1.5 --recovering 2 --rate 40 --seed 7 --plain
          --out "${OUT}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the demo exited with ${rc}: ${err}")
endif()

# Both figures of a summary line, e.g. "latency p99 (ms)   2045.8   957.5".
function(summary_pair label unprotected protected)
  string(REGEX MATCH "\n${label} +([0-9.]+|never) +([0-9.]+|never)\n" line "${out}")
  if(NOT line)
    message(FATAL_ERROR "the summary has no line '${label}'")
  endif()
  set(${unprotected} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(${protected} "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

function(expect condition)
  if(NOT (${ARGV}))
    string(REPLACE ";" " " text "${ARGV}")
    message(FATAL_ERROR "expected: ${text}")
  endif()
endfunction()

summary_pair("calls" calls_u calls_p)
summary_pair("success rate \\(%\\)" ok_u ok_p)
summary_pair("latency p99 \\(ms\\)" p99_u p99_p)
summary_pair("latency max \\(ms\\)" max_u max_p)
summary_pair("reached the dependency while failing" failing_u failing_p)
summary_pair("ended refused \\(breaker, limit\\)" refused_u refused_p)
summary_pair("time to recover \\(s\\)" recover_u recover_p)

# The same load through both clients: 40 calls a second for 5 seconds, every one completed.
expect(calls_u EQUAL 200 AND calls_p EQUAL 200)
# Healthy and recovering phases succeed, the failing one cannot: neither client is at 0 or 100.
expect(ok_u GREATER 0 AND ok_u LESS 100 AND ok_p GREATER 0 AND ok_p LESS 100)
# The unprotected client waits out the slow phase (2 s answers); the shield's total timeout
# (1 s) bounds every protected call.
expect(p99_u GREATER_EQUAL 2000)
expect(max_p LESS 1500)
# The unprotected client sends every call of the failing phase: 60, give or take a call that the
# dependency read a little after a phase boundary. The open breaker keeps most protected calls
# away and refuses them (2 s of recovery is enough for the next probe after a 1 s break).
expect(failing_u GREATER_EQUAL 57 AND failing_u LESS_EQUAL 63)
math(EXPR spared_limit "${failing_u} * 6 / 10")
expect(failing_p LESS ${spared_limit})
expect(refused_p GREATER 0)
expect(NOT recover_p STREQUAL "never")

# The chart: a PNG signature and more than a blank image's bytes.
set(png "${OUT}/outage_demo.png")
expect(EXISTS "${png}")
file(READ "${png}" signature LIMIT 8 HEX)
expect(signature STREQUAL "89504e470d0a1a0a")
file(SIZE "${png}" png_size)
expect(png_size GREATER 20000)
file(STRINGS "${OUT}/outage_demo.csv" rows)
list(LENGTH rows row_count)
expect(row_count EQUAL 11)  # a header and ten half-second buckets
file(READ "${OUT}/metrics.prom" prom)
expect(prom MATCHES "kevlar_executions_total{kevlar_shield_name=\"dependency\",kevlar_execution_outcome=\"success\"} [1-9]")

# A bad flag: a message naming it, the usage text, exit status 2, nothing run.
execute_process(COMMAND "${DEMO}" --rate fast OUTPUT_VARIABLE bad_out ERROR_VARIABLE bad_err
                RESULT_VARIABLE bad_rc TIMEOUT 10)
expect(bad_rc EQUAL 2)
expect(bad_err MATCHES "--rate: expected a whole number from 1 to 200, got 'fast'")
expect(bad_err MATCHES "usage: kevlar_outage_demo")
execute_process(COMMAND "${DEMO}" --failing OUTPUT_VARIABLE bad_out ERROR_VARIABLE bad_err
                RESULT_VARIABLE bad_rc TIMEOUT 10)
expect(bad_rc EQUAL 2)
expect(bad_err MATCHES "--failing: needs a value")
execute_process(COMMAND "${DEMO}" --colour OUTPUT_VARIABLE bad_out ERROR_VARIABLE bad_err
                RESULT_VARIABLE bad_rc TIMEOUT 10)
expect(bad_rc EQUAL 2)
expect(bad_err MATCHES "unknown flag '--colour'")
message("outage demo: all checks passed")
