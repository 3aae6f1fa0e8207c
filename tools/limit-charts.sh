#!/usr/bin/env bash
# tools/limit-charts.sh — the adaptive concurrency limit's charts: builds kevlar_limit_charts
# (release preset), runs the reference scenarios in the testing kit's LimitSimulator (virtual
# time, fixed seeds: the same charts on every machine), and draws one PNG per scenario with
# gnuplot into docs/strategies/adaptive-concurrency/ (the CSVs and summary.csv stay beside them).
#
#   tools/limit-charts.sh [--build-dir DIR] [--out-dir DIR]
#
# On Debian bookworm, as root (or with sudo): installs gnuplot-nox and the build's packages if
# they are missing. Takes about a minute after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/deps.sh
source tools/lib/deps.sh

build_dir=""
out_dir=docs/strategies/adaptive-concurrency
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --out-dir) out_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "limit-charts: unknown option $1" >&2; exit 2 ;;
  esac
done

kevlar_banner "limit-charts: Debian packages"
packages=(gnuplot-nox)
[[ -z "$build_dir" ]] && packages+=("${KEVLAR_BENCH_PACKAGES[@]}")
kevlar_ensure_packages "${packages[@]}"

if [[ -z "$build_dir" ]]; then
  kevlar_banner "limit-charts: configure (release preset) and build"
  kevlar_setup_ccache
  build_dir=build/release
  cmake --preset release "${KEVLAR_CMAKE_LAUNCHER[@]}"
  cmake --build "$build_dir" --target kevlar_limit_charts --parallel "${KEVLAR_JOBS:-2}"
fi
exe="$build_dir/kevlar_limit_charts"
[[ -x "$exe" ]] || { echo "limit-charts: no $exe (build the kevlar_limit_charts target)" >&2; exit 1; }

kevlar_banner "limit-charts: simulate and draw"
mkdir -p "$out_dir"
"$exe" "$out_dir"
for gp in "$out_dir"/*.gp; do
  (cd "$out_dir" && gnuplot "$(basename "$gp")")
done
ls -1 "$out_dir"/*.png
