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
fail() { echo "FAIL: $*" >&2; FAILED=1; exit 1; }
pass() { echo "ok: $*"; }

# json_get FILE EXPR: evaluates a Python expression over the JSON document `j`.
json_get() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

# start_switch [extra flags...]: starts a switch on free ports; sets SW_PID, UDP_PORT, CTL_PORT.
start_switch() {
  rm -f "$WORK/ready"
  "$SWITCHML" switch --bind 127.0.0.1 --port 0 --controller-port 0 --ready-file "$WORK/ready" \
      --counters-json "$WORK/switch-counters.json" "$@" > "$WORK/switch.log" 2>&1 &
  SW_PID=$!
  PIDS+=("$SW_PID")
  for _ in $(seq 1 200); do [ -s "$WORK/ready" ] && break; sleep 0.05; done
  [ -s "$WORK/ready" ] || { cat "$WORK/switch.log"; fail "switch did not start"; }
  UDP_PORT=$(json_get "$WORK/ready" "j['udp_port']")
  CTL_PORT=$(json_get "$WORK/ready" "j['controller_port']")
}

stop_switch() {
  kill -TERM "$SW_PID"
  for _ in $(seq 1 100); do kill -0 "$SW_PID" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$SW_PID" 2>/dev/null && fail "switch did not exit on SIGTERM"
  wait "$SW_PID" || fail "switch exited with an error: $(tail -5 "$WORK/switch.log")"
}
