#!/usr/bin/env bash
# tools/run-sample.sh — builds and runs kevlar's quick-start sample (samples/quickstart.cpp).
#
# On Debian bookworm, as root (or with sudo): installs the few packages the sample needs if they
# are missing, configures a Release build in build/sample (samples only), builds the target
# kevlar_quickstart and runs it. Run it again and only what changed is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/lib/deps.sh
source tools/lib/deps.sh

kevlar_banner "sample: Debian packages"
kevlar_ensure_packages "${KEVLAR_SAMPLE_PACKAGES[@]}"
kevlar_setup_ccache

kevlar_banner "sample: configure and build kevlar_quickstart"
dir=build/sample
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${KEVLAR_CMAKE_LAUNCHER[@]}" \
  -DKEVLAR_BUILD_SAMPLES=ON -DKEVLAR_BUILD_TESTS=OFF -DKEVLAR_BUILD_BENCHMARKS=OFF \
  -DKEVLAR_PACKAGE_TESTS=OFF
cmake --build "$dir" --target kevlar_quickstart --parallel "${KEVLAR_JOBS:-2}"

kevlar_banner "sample: run kevlar_quickstart"
sample=$(find "$dir" -type f -name kevlar_quickstart -perm -u+x | head -n 1)
if [[ -z "$sample" ]]; then
  echo "run-sample: the build produced no kevlar_quickstart under $dir" >&2
  exit 1
fi
"$sample"
