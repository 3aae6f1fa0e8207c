#!/usr/bin/env bash
# tools/run-tests.sh — builds kevlar and runs its whole test suite; CI (.ci/run) runs exactly this.
#
# On Debian bookworm, as root (or with sudo): installs missing packages, then runs five stages,
# each in its own build directory under build/ with Ninja, ccache and -Werror:
#   a  gcc-release    g++ Release: tests, benchmarks, samples, packaging tests; benchmark smoke run;
#                     then kevlar_benchmarks alone with KEVLAR_ASIO_RECYCLING_CACHE_SIZE set
#                     (build/ci-gcc-release-tuned): its coroutine handoff pairs must allocate nothing
#   b  clang-ubsan    clang++ Release with UndefinedBehaviorSanitizer (all its checks but vptr):
#                     tests, benchmarks, samples
#   c  gcc-asan       g++ Debug with AddressSanitizer: tests, with gcov counters: the coverage of
#                     src/, include/ and strategies/ (tools/coverage.sh: floors on lines and
#                     branches, where only decisions count as branches)
#   d  gcc-tsan       g++ ThreadSanitizer: the tests labelled "concurrency"
#   e  instructions   the instruction-count gate: callgrind counts per call of the g++ Release
#                     build (stage a's directory) against tools/instruction-baseline.txt, 2 %
# Sanitized builds carry line tables only (-g1), which is what their reports print: full debug
# information made an instrumented test file's compile about 30 % slower (ThreadSanitizer at -O2:
# 108 s with -g, 77 s with -g1; AddressSanitizer at -O0: 53 s and 39 s).
# UBSan runs in stage b, not beside ASan in stage c: its checks are branches to gcov, one per
# reference and pointer use and per template instantiation, and never fail, so in the coverage
# build they outnumbered the uncovered decisions of the source. vptr is left out: with it, clang 14
# took twice as long per test file (137 s against 73 s).
# Stops at the first failure. KEVLAR_STAGES="a c" runs a subset; KEVLAR_JOBS overrides -j2.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/deps.sh
source tools/lib/deps.sh

jobs="${KEVLAR_JOBS:-2}"
# Stage a's tuned build: the smallest KEVLAR_ASIO_RECYCLING_CACHE_SIZE at which a coroutine
# handoff pair allocates nothing (3 still allocates 3 blocks per pair; see docs/execution.md).
tuned_cache_size=4
stages="${KEVLAR_STAGES:-a e b c d}"
summary=()
current_stage=""
started_at=$SECONDS

on_exit() {
  local rc=$?
  if ((rc != 0)); then
    echo
    echo "run-tests: FAILED in stage ${current_stage:-setup} (exit $rc) after $((SECONDS - ${stage_started:-0}))s${summary:+; passed before it: ${summary[*]}}" >&2
  fi
}
trap on_exit EXIT

kevlar_banner "setup: Debian packages and ccache"
kevlar_ensure_packages "${KEVLAR_TEST_PACKAGES[@]}"
kevlar_setup_ccache
echo "ccache: ${CCACHE_DIR:-not used}"

# Sanitizer runtimes of g++ 12 / clang 14 predate kernels that randomize mmap with more than
# 28 bits and die at start-up there; run sanitized programs without address randomization then.
sanitizer_runner=()
prepare_sanitizers() {
  local bits
  bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)
  if ((bits <= 28)); then return 0; fi
  if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
    sanitizer_runner=(setarch "$(uname -m)" -R)
    echo "sanitizers: vm.mmap_rnd_bits=$bits; running sanitized builds and tests under setarch -R"
  elif ((EUID == 0)) && sysctl -qw vm.mmap_rnd_bits=28 2>/dev/null; then
    echo "sanitizers: lowered vm.mmap_rnd_bits from $bits to 28"
  else
    echo "sanitizers: warning: vm.mmap_rnd_bits=$bits and no way to lower it; sanitized tests may abort" >&2
  fi
}

# configure_and_build <dir> <compiler> <build type> [cmake -D arguments...]
configure_and_build() {
  local dir=$1 cxx=$2 type=$3
  shift 3
  cmake -S . -B "$dir" -G Ninja \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$type" "${KEVLAR_CMAKE_LAUNCHER[@]}" \
    -DKEVLAR_WARNINGS_AS_ERRORS=ON "$@"
  "${sanitizer_runner[@]}" cmake --build "$dir" --parallel "$jobs"
}

# run_ctest <dir> [ctest arguments...]; leaves the test count in $tests_run.
run_ctest() {
  local dir=$1
  shift
  "${sanitizer_runner[@]}" ctest --test-dir "$dir" --output-on-failure --no-tests=error \
    -j "$jobs" "$@" 2>&1 | tee "$dir/ctest.log"
  tests_run=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1 tests/p' "$dir/ctest.log" | tail -1)
}

# finish_stage <label>: records the stage's time and test count for the final summary.
finish_stage() {
  local elapsed=$((SECONDS - stage_started))
  summary+=("$1 ok ($(printf '%dm%02ds' $((elapsed / 60)) $((elapsed % 60))), ${tests_run:-? tests})")
  echo "run-tests: stage $1 passed in ${elapsed}s"
}

for stage in $stages; do
  stage_started=$SECONDS
  tests_run=""
  current_stage="$stage"
  case "$stage" in
    a)
      current_stage="a gcc-release"
      kevlar_banner "stage a: g++ Release — tests, benchmarks, samples, packaging"
      dir=build/ci-gcc-release
      configure_and_build "$dir" g++ Release -DKEVLAR_BUILD_TESTS=ON -DKEVLAR_BUILD_BENCHMARKS=ON \
        -DKEVLAR_BUILD_SAMPLES=ON -DKEVLAR_PACKAGE_TESTS=ON -DKEVLAR_SANITIZE=
      run_ctest "$dir"
      bench="$dir/benchmarks/kevlar_benchmarks"
      if [[ -x "$bench" ]]; then
        kevlar_banner "stage a: benchmark smoke run (BM_Overhead)"
        "$bench" --benchmark_min_time=0.01 --benchmark_filter=BM_Overhead
      else
        echo "run-tests: no $bench; benchmark smoke run skipped"
      fi
      # The tuned build: Asio's recycling cache sized so that a coroutine handoff pair allocates
      # nothing (docs/execution.md, "Asio's recycling cache"). Only kevlar_benchmarks (and the
      # libraries it links) is built; ccache makes that quick after the first run.
      kevlar_banner "stage a: KEVLAR_ASIO_RECYCLING_CACHE_SIZE=$tuned_cache_size — coroutine pairs allocate nothing"
      tuned=build/ci-gcc-release-tuned
      cmake -S . -B "$tuned" -G Ninja -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release \
        "${KEVLAR_CMAKE_LAUNCHER[@]}" -DKEVLAR_WARNINGS_AS_ERRORS=ON -DKEVLAR_BUILD_TESTS=OFF \
        -DKEVLAR_BUILD_BENCHMARKS=ON -DKEVLAR_BUILD_SAMPLES=OFF -DKEVLAR_PACKAGE_TESTS=OFF \
        -DKEVLAR_SANITIZE= -DKEVLAR_ASIO_RECYCLING_CACHE_SIZE="$tuned_cache_size"
      cmake --build "$tuned" --target kevlar_benchmarks --parallel "$jobs"
      "$tuned/benchmarks/kevlar_benchmarks" --benchmark_min_time=0.05 \
        --benchmark_filter='^BM_QueuedHandoffPair/(unpaired|no_limiter_control)/(callback|coroutine)/idle$' \
        --benchmark_out="$tuned/pairs.json" --benchmark_out_format=json
      ./tools/check-pair-allocations.py "$tuned/pairs.json" \
        BM_QueuedHandoffPair/unpaired/coroutine/idle \
        BM_QueuedHandoffPair/no_limiter_control/coroutine/idle
      ;;
    b)
      current_stage="b clang-ubsan"
      kevlar_banner "stage b: clang++ Release with UndefinedBehaviorSanitizer — tests, benchmarks, samples"
      dir=build/ci-clang-ubsan
      configure_and_build "$dir" clang++ Release -DKEVLAR_BUILD_TESTS=ON \
        -DKEVLAR_BUILD_BENCHMARKS=ON -DKEVLAR_BUILD_SAMPLES=ON -DKEVLAR_PACKAGE_TESTS=OFF \
        -DKEVLAR_SANITIZE=undefined -DKEVLAR_SANITIZE_EXCLUDE=vptr
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_ctest "$dir"
      ;;
    c)
      current_stage="c gcc-asan"
      kevlar_banner "stage c: g++ AddressSanitizer — tests, coverage"
      prepare_sanitizers
      dir=build/ci-gcc-asan
      # Debug: unoptimised code keeps gcov's branches those of the source (and builds in half
      # the time of RelWithDebInfo); the sanitizers check the same.
      configure_and_build "$dir" g++ Debug -DKEVLAR_SANITIZE=address \
        -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
        -DKEVLAR_COVERAGE=ON -DKEVLAR_BUILD_TESTS=ON -DKEVLAR_BUILD_BENCHMARKS=OFF \
        -DKEVLAR_BUILD_SAMPLES=OFF -DKEVLAR_PACKAGE_TESTS=OFF
      # Counters of an earlier run in the same directory would inflate this run's coverage.
      find "$dir" -name '*.gcda' -delete
      ASAN_OPTIONS=detect_leaks=1 run_ctest "$dir"
      kevlar_banner "stage c: coverage of src/, include/, strategies/ (gcovr)"
      ./tools/coverage.sh "$dir"
      ;;
    d)
      current_stage="d gcc-tsan"
      kevlar_banner "stage d: g++ ThreadSanitizer — tests labelled concurrency"
      prepare_sanitizers
      dir=build/ci-gcc-tsan
      configure_and_build "$dir" g++ RelWithDebInfo -DKEVLAR_SANITIZE=thread \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
        -DKEVLAR_BUILD_TESTS=ON -DKEVLAR_BUILD_BENCHMARKS=OFF -DKEVLAR_BUILD_SAMPLES=OFF \
        -DKEVLAR_PACKAGE_TESTS=OFF
      TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 run_ctest "$dir" -L concurrency
      ;;
    e)
      current_stage="e instructions"
      kevlar_banner "stage e: instruction-count gate (callgrind, tolerance 2 %)"
      dir=build/ci-gcc-release
      # Stage a's configuration: after stage a, only the driver is checked for being up to date.
      cmake -S . -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release \
        "${KEVLAR_CMAKE_LAUNCHER[@]}" -DKEVLAR_WARNINGS_AS_ERRORS=ON -DKEVLAR_BUILD_TESTS=ON \
        -DKEVLAR_BUILD_BENCHMARKS=ON -DKEVLAR_BUILD_SAMPLES=ON -DKEVLAR_PACKAGE_TESTS=ON \
        -DKEVLAR_SANITIZE=
      cmake --build "$dir" --target kevlar_count_instructions --parallel "$jobs"
      ./tools/check-instructions.sh "$dir" | tee "$dir/instructions.log"
      tests_run="$(grep -c ' ok$' "$dir/instructions.log" || true) counts"
      ;;
    *)
      echo "run-tests: unknown stage '$stage' in KEVLAR_STAGES (use a, b, c, d, e)" >&2
      exit 2
      ;;
  esac
  finish_stage "$current_stage"
done

current_stage=""
total=$((SECONDS - started_at))
kevlar_banner "run-tests: ALL STAGES PASSED in $(printf '%dm%02ds' $((total / 60)) $((total % 60)))"
printf -v summary_line '%s | ' "${summary[@]}"
echo "run-tests summary: ${summary_line% | }"
