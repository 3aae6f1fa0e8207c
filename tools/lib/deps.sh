# shellcheck shell=bash disable=SC2034  # the arrays below are read by the scripts that source this
# tools/lib/deps.sh — shared by tools/run-tests.sh, tools/run-demo.sh and tools/bench-report.sh
# (sourced, not run).
#
# kevlar builds against Debian bookworm's packages. kevlar_ensure_packages installs only what is
# missing: it asks dpkg first and touches apt (update + install) only when something is absent,
# so a second run costs a few dpkg queries.

# What the outage demo needs: a compiler, CMake, Ninja, Boost (Asio and Beast are header-only),
# spdlog (the samples' build configures kevlar::spdlog), and gnuplot-nox, which draws its chart.
KEVLAR_DEMO_PACKAGES=(g++ cmake ninja-build libboost1.81-dev libspdlog-dev gnuplot-nox)

# What the whole test suite needs: both compilers, the clang sanitizer runtimes, ccache, and the
# libraries Directory.cmake pins (GoogleTest, Google Benchmark, spdlog which brings fmt).
# valgrind runs the instruction-count gate (stage e); prometheus brings promtool, which checks the
# metrics exposition, and curl scrapes the /metrics endpoint in the observability tests. gcovr
# reports the coverage of stage c (tools/coverage.sh). gnuplot-nox draws the outage demo's chart,
# which its test checks.
KEVLAR_TEST_PACKAGES=(g++ clang libclang-rt-14-dev cmake ninja-build ccache libboost1.81-dev
                      libgtest-dev libbenchmark-dev libspdlog-dev git python3 valgrind
                      prometheus curl gcovr gnuplot-nox)

# What the benchmark report builds with (the release preset: tests, benchmarks and samples, so
# GoogleTest and Google Benchmark) and runs with: python3 reads the run's JSON, valgrind counts
# instructions, gnuplot-nox draws the chart.
KEVLAR_BENCH_PACKAGES=(g++ cmake ninja-build ccache libboost1.81-dev libgtest-dev libbenchmark-dev
                       libspdlog-dev python3 valgrind gnuplot-nox)

kevlar_banner() {
  printf '\n======================================================================\n'
  printf '== %s\n' "$*"
  printf '======================================================================\n'
}

# kevlar_ensure_packages <debian package>...
kevlar_ensure_packages() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps: dpkg-query not found; these scripts expect Debian bookworm (or a derivative)" >&2
    return 1
  fi
  local missing=() pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$pkg")
    fi
  done
  if ((${#missing[@]} == 0)); then
    echo "deps: all $# required Debian packages are installed"
    return 0
  fi

  local as_root=()
  if ((EUID != 0)); then
    if command -v sudo >/dev/null 2>&1; then
      as_root=(sudo)
    else
      echo "deps: missing ${missing[*]}; run as root (or install sudo) to let this script add them" >&2
      return 1
    fi
  fi
  echo "deps: installing ${missing[*]}"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# kevlar_setup_ccache: sets KEVLAR_CMAKE_LAUNCHER to the CMake arguments that put ccache in front
# of the compiler (empty when ccache is absent) and exports ccache's settings: the cache lives in
# ~/.cache/ccache unless CCACHE_DIR says otherwise; paths are hashed relative to the checkout so
# separate clones share hits.
kevlar_setup_ccache() {
  KEVLAR_CMAKE_LAUNCHER=()
  if command -v ccache >/dev/null 2>&1; then
    export CCACHE_DIR="${CCACHE_DIR:-${HOME:-/root}/.cache/ccache}"
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
    export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
    mkdir -p "$CCACHE_DIR"
    KEVLAR_CMAKE_LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
}
