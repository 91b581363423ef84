# Shared helpers for the end-to-end test scripts. Source it; set -euo pipefail is on.
set -euo pipefail
SWITCHML=${1:?usage: $0 path/to/switchml}
WORK=$(mktemp -d /tmp/switchml-e2e.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ] || [ "${FAILED:-0}" = 1 ]; then echo "logs in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
FAILED=0
# The operator credential of every switch and controller these tests start and of every
# `switchml jobs` call (job administration needs it; docs/operations.md, "Access control").
SWITCHML_OPERATOR_TOKEN=${SWITCHML_OPERATOR_TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
export SWITCHML_OPERATOR_TOKEN
fail() { echo "FAIL: $*" >&2; FAILED=1; exit 1; }
pass() { echo "ok: $*"; }

# json_get FILE EXPR: evaluates a Python expression over the JSON document `j`.
json_get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# start_switch_on UDP_PORT CTL_PORT LOG [extra flags...]: starts a switch on the given ports (0 =
# a free one), output to $WORK/LOG; sets SW_PID, UDP_PORT, CTL_PORT.
start_switch_on() {
  local udp=$1 ctl=$2 log=$3
  shift 3
  rm -f "$WORK/ready"
  "$SWITCHML" switch --bind 127.0.0.1 --port "$udp" --controller-port "$ctl" --ready-file "$WORK/ready" \
      "$@" > "$WORK/$log" 2>&1 &
  SW_PID=$!
  PIDS+=("$SW_PID")
  for _ in $(seq 1 200); do [ -s "$WORK/ready" ] && break; sleep 0.05; done
  [ -s "$WORK/ready" ] || { cat "$WORK/$log"; fail "switch did not start (ports $udp, $ctl)"; }
  UDP_PORT=$(json_get "$WORK/ready" "j['udp_port']")
  CTL_PORT=$(json_get "$WORK/ready" "j['controller_port']")
}

# start_switch [extra flags...]: starts a switch on free ports, counters to switch-counters.json.
start_switch() { start_switch_on 0 0 switch.log --counters-json "$WORK/switch-counters.json" "$@"; }

stop_switch() {
  kill -TERM "$SW_PID"
  for _ in $(seq 1 100); do kill -0 "$SW_PID" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$SW_PID" 2>/dev/null && fail "switch did not exit on SIGTERM"
  wait "$SW_PID" || fail "switch exited with an error: $(tail -5 "$WORK/switch.log")"
}
