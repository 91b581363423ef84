#!/usr/bin/env bash
# One command for the whole test suite: installs the packages and the project's Python
# environment (PyTorch 2.x, scripts/python-env.sh), builds, and runs every test (unit,
# end-to-end, integrations) with CTest. Extra arguments go to ctest (e.g. -L unit, -R engine).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
python=$(scripts/python-env.sh)
scripts/build.sh -DSWITCHML_TORCH_PYTHON="$python"
# The pip package, against the same torch (pytorch_wheel installs it into a fresh venv).
rm -f "${BUILD_DIR:-build}"/dist/switchml-*.whl
"$python" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -q \
  -w "${BUILD_DIR:-build}/dist" .
cd "${BUILD_DIR:-build}"
exec ctest --output-on-failure --timeout 600 "$@"
