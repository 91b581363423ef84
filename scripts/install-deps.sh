#!/usr/bin/env bash
# Installs every Debian package the build, tests and demo need. Idempotent.
# Usage: scripts/install-deps.sh            (core: build + tests + demo)
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libhwy-dev libcli11-dev nlohmann-json3-dev
  # Prometheus metrics (--metrics-listen): prometheus-cpp with its civetweb HTTP server.
  prometheus-cpp-dev
  # TLS on the control plane: OpenSSL checks the certificate files (rendezvous/tls.cc); the
  # openssl command makes the tests' certificates.
  libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 iptables python3 python3-venv
  # Baselines and integrations: Gloo, Open MPI, clang + libFuzzer runtime. (PyTorch 2.x comes
  # from PyPI into the project venv: scripts/python-env.sh.)
  libgloo-dev libopenmpi-dev openmpi-bin libmpich-dev mpich
  # Training example data (FashionMNIST IDX files) and the benchmark plot.
  dataset-fashion-mnist python3-matplotlib
  clang libclang-rt-14-dev
  # AF_XDP measurement tool bench/xdp_rate (optional in the build): libbpf, libxdp.
  libbpf-dev libxdp-dev
  # `switchml top`'s test drives it in a pseudo-terminal.
  tmux
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
