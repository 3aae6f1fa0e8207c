#!/usr/bin/env bash
# tools/bench-report.sh — the benchmark report: runs kevlar_benchmarks and writes
# docs/benchmarks.md (every benchmark's median, spread, allocations, ratio to its baseline or
# control in the same run, instructions per call, the machine and the compiler) and
# docs/benchmarks.png (per-strategy overheads beside the published .NET figures).
#
#   tools/bench-report.sh [options]          (tools/bench-report.sh --help lists them)
#
# On Debian bookworm, as root (or with sudo): installs the packages it needs if they are missing,
# configures the Release preset (build/release) and builds kevlar_benchmarks and
# kevlar_count_instructions, unless --build-dir names a build to use as it is. Then it runs the
# benchmarks with repetitions in random interleaving (JSON, every repetition kept), counts
# instructions per call with tools/count-instructions.sh on the same build (callgrind, about two
# minutes; --no-instructions reads tools/instruction-baseline.txt instead), and hands both to
# tools/bench-report.py, which writes the report and draws the chart with gnuplot. The run's JSON,
# the counts and the chart's data stay in <build-dir>/bench-report/ (<out-dir>/bench-report-data/
# with --out-dir).
#
# The defaults (10 repetitions of 0.3 s) take about 8 minutes for the whole binary on two cores.
# Keep the machine otherwise idle while it runs: wall-clock figures move with other load.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/deps.sh
source tools/lib/deps.sh

usage() {
  cat <<'EOF'
usage: tools/bench-report.sh [options]

  --build-dir DIR     use the kevlar_benchmarks and kevlar_count_instructions already built in
                      DIR (no configure, no build); default: configure and build the release
                      preset in build/release
  --repetitions N     repetitions of every benchmark (default 10)
  --min-time S        minimum seconds per repetition (default 0.3)
  --filter REGEX      run only the benchmarks whose names match (Google Benchmark's filter)
  --out-dir DIR       where benchmarks.md and benchmarks.png go (default docs); the run's data
                      then goes to DIR/bench-report-data instead of <build-dir>/bench-report
  --no-instructions   do not run callgrind; show the committed tools/instruction-baseline.txt
  -h, --help          this text

Relative directories are relative to the checkout, where the script runs.
EOF
}

die() {
  echo "bench-report: $*" >&2
  exit 2
}

build_dir=""
repetitions=10
min_time=0.3
filter=""
out_dir=docs
instructions=1
args=("$@")
while (($# > 0)); do
  case "$1" in
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --repetitions) repetitions="${2:?--repetitions needs a number}"; shift 2 ;;
    --min-time) min_time="${2:?--min-time needs seconds}"; shift 2 ;;
    --filter) filter="${2:?--filter needs a regular expression}"; shift 2 ;;
    --out-dir) out_dir="${2:?--out-dir needs a directory}"; shift 2 ;;
    --no-instructions) instructions=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ "$repetitions" =~ ^[1-9][0-9]*$ ]] || die "--repetitions must be a positive integer"
[[ "$min_time" =~ ^[0-9]*\.?[0-9]+$ ]] || die "--min-time must be a number of seconds"

# The command as given, for the report: an argument a shell would split or expand is quoted.
command="tools/bench-report.sh"
for arg in "${args[@]}"; do
  if [[ "$arg" =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then
    command+=" $arg"
  else
    command+=" '${arg//\'/\'\\\'\'}'"
  fi
done

kevlar_banner "bench-report: Debian packages"
packages=(python3 gnuplot-nox)
((instructions)) && packages+=(valgrind)
[[ -z "$build_dir" ]] && packages+=("${KEVLAR_BENCH_PACKAGES[@]}")
kevlar_ensure_packages "${packages[@]}"

if [[ -z "$build_dir" ]]; then
  kevlar_banner "bench-report: configure (release preset) and build"
  kevlar_setup_ccache
  build_dir=build/release
  cmake --preset release "${KEVLAR_CMAKE_LAUNCHER[@]}"
  cmake --build "$build_dir" --target kevlar_benchmarks kevlar_count_instructions \
    --parallel "${KEVLAR_JOBS:-2}"
fi
build_dir="$(cd "$build_dir" && pwd)"
bench="$build_dir/benchmarks/kevlar_benchmarks"
[[ -x "$bench" ]] || die "no $bench: build the kevlar_benchmarks target (release preset) first"

# The run's JSON, the counts and the chart's data: in the build for the committed report, beside
# the report when it goes elsewhere (so that a second report never overwrites the first's).
if [[ "$(realpath -m "$out_dir")" == "$PWD/docs" ]]; then
  work="$build_dir/bench-report"
else
  work="$out_dir/bench-report-data"
fi
mkdir -p "$work" "$out_dir"
json="$work/benchmarks.json"

# The commit measured, read before the run (a checkout edited during it stays unaffected).
commit=$(git describe --always --dirty --abbrev=10 2>/dev/null || echo unknown)

kevlar_banner "bench-report: kevlar_benchmarks, $repetitions repetitions of ${min_time} s, interleaved"
run=("$bench" "--benchmark_repetitions=$repetitions" "--benchmark_enable_random_interleaving=true"
     "--benchmark_min_time=$min_time" "--benchmark_display_aggregates_only=true"
     "--benchmark_out=$json" "--benchmark_out_format=json")
[[ -n "$filter" ]] && run+=("--benchmark_filter=$filter")
"${run[@]}"

counts="$work/instructions.txt"
if ((instructions)); then
  kevlar_banner "bench-report: instructions per call (callgrind, same build)"
  tools/count-instructions.sh "$build_dir" | tee "$counts"
  source_kind=counted
else
  cp tools/instruction-baseline.txt "$counts"
  source_kind=baseline
fi

kevlar_banner "bench-report: $out_dir/benchmarks.md and $out_dir/benchmarks.png"
python3 tools/bench-report.py --json "$json" --instructions "$counts" \
  --instructions-source "$source_kind" --build-dir "$build_dir" --out-dir "$out_dir" \
  --work-dir "$work" --command "$command" --repetitions "$repetitions" --min-time "$min_time" \
  --filter "$filter" --commit "$commit"
