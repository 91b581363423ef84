#!/usr/bin/env bash
# Creates (once) and updates the project's Python virtual environment with the pinned packages
# of integrations/pytorch/requirements.txt (PyTorch 2.x from PyPI), and prints its interpreter.
# Reused between runs: nothing is downloaded when the pins are already installed.
#   SWITCHML_VENV   where the environment lives (default: <repo>/.venv)
#   PYTHON          the interpreter that creates it (default: the python3 first on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SWITCHML_VENV:-$PWD/.venv}
REQS=integrations/pytorch/requirements.txt
PY=${PYTHON:-python3}
stamp="$VENV/.switchml-requirements"
if [ ! -x "$VENV/bin/python" ]; then
  echo "python-env: creating $VENV with $($PY --version 2>&1)" >&2
  "$PY" -m venv "$VENV"
fi
if ! cmp -s "$REQS" "$stamp"; then
  echo "python-env: installing $(grep -v '^#' "$REQS" | tr '\n' ' ')into $VENV (PyTorch is a" \
       "download of several GB the first time)" >&2
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQS" >&2
  cp "$REQS" "$stamp"
fi
echo "$VENV/bin/python"
