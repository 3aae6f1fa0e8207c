#!/usr/bin/env bash
# tools/run-demo.sh — builds and runs kevlar's outage demo (samples/outage_demo/).
#
# On Debian bookworm, as root (or with sudo): installs the packages the demo needs if they are
# missing (a compiler, CMake, Ninja, Boost, and gnuplot for the chart), configures a Release
# build in build/demo (samples only), builds kevlar_outage_demo and runs it. Arguments are passed
# to the demo (`./tools/run-demo.sh --help` lists them); the chart, its data and the final
# metrics go to build/outage-demo unless --out says otherwise (a relative --out is relative to
# the checkout, where this script runs). Run it again and only what changed is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/deps.sh
source tools/lib/deps.sh

kevlar_banner "demo: Debian packages"
kevlar_ensure_packages "${KEVLAR_DEMO_PACKAGES[@]}"
kevlar_setup_ccache

kevlar_banner "demo: configure and build kevlar_outage_demo"
dir=build/demo
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${KEVLAR_CMAKE_LAUNCHER[@]}" \
  -DKEVLAR_BUILD_SAMPLES=ON -DKEVLAR_BUILD_TESTS=OFF -DKEVLAR_BUILD_BENCHMARKS=OFF \
  -DKEVLAR_PACKAGE_TESTS=OFF
cmake --build "$dir" --target kevlar_outage_demo --parallel "${KEVLAR_JOBS:-2}"

kevlar_banner "demo: run kevlar_outage_demo"
demo=$(find "$dir" -type f -name kevlar_outage_demo -perm -u+x | head -n 1)
if [[ -z "$demo" ]]; then
  echo "run-demo: the build produced no kevlar_outage_demo under $dir" >&2
  exit 1
fi
# The demo's own --out, when given, comes last and wins.
exec "$demo" --out build/outage-demo "$@"
