#!/usr/bin/env bash
# One command for the whole test suite: installs the packages, builds, and runs every test
# (unit + end-to-end) with CTest. Extra arguments go to ctest (e.g. -L unit, -R engine).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd "${BUILD_DIR:-build}"
exec ctest --output-on-failure --timeout 600 "$@"
