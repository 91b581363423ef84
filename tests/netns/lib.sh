# shellcheck shell=bash disable=SC2034
# What the emulated-cluster tests (CTest label `netns`) share beyond scripts/lib.sh (sourced here;
# see its header for fail, pass, skip (exit 77, the SKIP_RETURN_CODE of every netns test),
# json_get, sml_track, sml_at_exit, sml_wait_*, ...). Source it after setting CLUSTER_SH (path to
# scripts/cluster.sh) and, for tests that use the fixture's cluster, NAME_FILE. set -euo pipefail
# is on. It makes the work directory $WORK (kept on failure or with KEEP=1); the processes a test
# tracks (sml_track) are stopped at exit, then its sml_at_exit commands run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

NETTOOL="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/nettool.py"
PYTHON=${PYTHON:-python3}

# Exits with SML_SKIP (77) unless this process can create network namespaces and has the tools.
require_netns() {
  [[ $(id -u) == 0 ]] || skip "the emulated cluster needs root (network namespaces); run ctest as root"
  command -v ip >/dev/null || skip "ip (iproute2) is not installed"
  command -v tc >/dev/null || skip "tc (iproute2) is not installed"
  ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available here"
  local probe="smlprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then skip "cannot create network namespaces here"; fi
  ip netns del "$probe"
}

# Loads the fixture's cluster: sets NAME and sources its state file (CLUSTER_* variables).
# Skips when the fixture's setup skipped (it writes no name file then).
load_cluster() {
  [[ -s "$NAME_FILE" ]] || skip "no emulated cluster (the netns_cluster_setup test skipped or did not run)"
  NAME=$(cat "$NAME_FILE")
  local sf="/tmp/switchml-cluster-$NAME.env"
  [[ -r "$sf" ]] || fail "cluster '$NAME' from $NAME_FILE has no state file $sf"
  # shellcheck disable=SC1090
  source "$sf"
  CX=("$CLUSTER_SH" exec --name "$NAME" --host)
}

# cx HOST CMD...: runs CMD in host HOST (w<i>, sw or sw<j>, br) of the loaded cluster, in the
# foreground.
# To start one in the background use `"${CX[@]}" HOST -- CMD... &` instead: then $! is the pid of
# CMD itself (cluster.sh and ip netns exec both exec), whereas `cx ... &` would fork a subshell and
# $! would be that subshell's pid.
cx() { local h=$1; shift; "${CX[@]}" "$h" -- "$@"; }

# kill_cluster_processes: SIGKILLs every process inside the loaded cluster's namespaces (never by
# name), so that a failed test leaves none behind for the next one.
kill_cluster_processes() {
  local ns pids
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NAME-(br|sw[0-9]*|w[0-9]+)\$"); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -z "${pids// /}" ]] || kill -9 $pids 2>/dev/null || true
  done
}

sml_work_dir switchml-netns-test

# in_sw CMD...: execs CMD in (the first) switch host of the loaded cluster (the launcher for
# sml_start_switch --via in_sw).
in_sw() { exec "${CX[@]}" sw -- "$@"; }

# leftovers NAME: prints whatever still carries cluster NAME's prefix (namespaces, links in this
# namespace, the state file); empty when everything is gone.
leftovers() {
  ip netns list | awk '{print $1}' | grep -E "^$1-" || true
  ip -o link show | grep -F -- "$1" || true
  [[ ! -e "/tmp/switchml-cluster-$1.env" ]] || echo "/tmp/switchml-cluster-$1.env"
}
