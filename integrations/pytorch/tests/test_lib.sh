# shellcheck shell=bash disable=SC2034
# tests/test_lib.sh — the start the PyTorch backend's shell tests share (ddp_bench_smoke.sh,
# fashion_mnist_smoke.sh, wheel_test.sh), with the test's arguments:
#
#   set -euo pipefail
#   source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh" "$@"
#   pt_skip_unless_imports "torch, numpy"
#   pt_skip_unless_built python/switchml switchml
#
# Sources scripts/lib.sh and sets BUILD (the first argument, the build directory: required),
# HERE (this folder) and PYTHON (default: the project venv's, $SWITCHML_VENV or REPO/.venv).
#   pt_skip_unless_imports MODULES   skips (77) unless $PYTHON runs `import MODULES`
#   pt_skip_unless_built PATH...     skips unless each BUILD/PATH exists (is built)
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh"
BUILD=${1:?usage: ${0##*/} BUILD_DIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-${SWITCHML_VENV:-$HERE/../../../.venv}/bin/python}

pt_skip_unless_imports() {
  "$PYTHON" -c "import $1" 2>/dev/null || skip "$PYTHON cannot import $1 (scripts/python-env.sh)"
}

pt_skip_unless_built() {
  local p
  for p in "$@"; do [[ -e "$BUILD/$p" ]] || skip "$BUILD/$p not built"; done
}
