# shellcheck shell=bash disable=SC2034
# Shared helpers for the emulated-cluster tests (CTest label `netns`). Source it after setting
# CLUSTER_SH (path to scripts/cluster.sh) and, for tests that use the fixture's cluster, NAME_FILE.
set -euo pipefail

SKIP=77  # CTest SKIP_RETURN_CODE of every netns test
NETTOOL="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/nettool.py"
PYTHON=${PYTHON:-python3}

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
skip() { echo "SKIP: $*"; exit "$SKIP"; }

# Exits with SKIP unless this process can create network namespaces and has the tools.
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

# cx HOST CMD...: runs CMD in host HOST (w<i>, sw, br) of the loaded cluster, in the foreground.
# To start one in the background use `"${CX[@]}" HOST -- CMD... &` instead: then $! is the pid of
# CMD itself (cluster.sh and ip netns exec both exec), whereas `cx ... &` would fork a subshell and
# $! would be that subshell's pid.
cx() { local h=$1; shift; "${CX[@]}" "$h" -- "$@"; }

# kill_cluster_processes: SIGKILLs every process inside the loaded cluster's namespaces (never by
# name), so that a failed test leaves none behind for the next one.
kill_cluster_processes() {
  local ns pids
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NAME-(br|sw|w[0-9]+)\$"); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -z "${pids// /}" ]] || kill -9 $pids 2>/dev/null || true
  done
}

# Background processes of the test, killed at exit whatever happens.
PIDS=()
WORK=$(mktemp -d /tmp/switchml-netns-test.XXXXXX)
KEEP_WORK=0
on_exit() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if ((rc != 0 && rc != SKIP)) || ((KEEP_WORK)); then echo "logs in $WORK"; else rm -rf "$WORK"; fi
  for hook in "${EXIT_HOOKS[@]}"; do eval "$hook" || true; done
  exit "$rc"
}
EXIT_HOOKS=()
trap on_exit EXIT

# wait_file FILE SECONDS: waits until FILE is non-empty.
wait_file() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do [[ -s "$1" ]] && return 0; sleep 0.05; done
  return 1
}

# json_get FILE EXPR: evaluates a Python expression over the JSON document `j`.
json_get() { "$PYTHON" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# leftovers NAME: prints whatever still carries cluster NAME's prefix (namespaces, links in this
# namespace, the state file); empty when everything is gone.
leftovers() {
  ip netns list | awk '{print $1}' | grep -E "^$1-" || true
  ip -o link show | grep -F -- "$1" || true
  [[ ! -e "/tmp/switchml-cluster-$1.env" ]] || echo "/tmp/switchml-cluster-$1.env"
}
