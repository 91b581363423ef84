#!/usr/bin/env bash
# One command for a fresh Debian 12 machine: installs the packages, builds, and runs the main
# job (`switchml demo`: a software switch and 4 workers on this machine all-reduce a 64 MiB
# float32 tensor, every element verified). Extra arguments go to `switchml demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/switchml demo "$@"
