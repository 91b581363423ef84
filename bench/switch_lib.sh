# shellcheck shell=bash
# bench/switch_lib.sh — starting a `switchml switch` for a benchmark run (sourced by
# scenario_lib.sh and run_dnn.sh).
#
# start_switch READY_FILE LOG_FILE CMD...
#   Runs CMD (a `switchml switch ...` command line, possibly behind a launcher such as a
#   function that execs into a namespace; do not pass --ready-file) in the background with
#   `--ready-file READY_FILE` appended, output to LOG_FILE, and waits up to 20 s for it to
#   serve. Sets SWITCH_PID (also appended to the caller's `pids` array for cleanup) and
#   SWITCH_CTL_PORT (its controller port). Returns 1, with the log's tail on stderr, if the
#   switch exits or does not come up in time.
start_switch() {
  local ready=$1 log=$2 t0
  shift 2
  rm -f "$ready"
  "$@" --ready-file "$ready" >"$log" 2>&1 &
  SWITCH_PID=$!
  pids+=("$SWITCH_PID")
  t0=$SECONDS
  until [ -s "$ready" ] && grep -q controller_port "$ready"; do
    if ! kill -0 "$SWITCH_PID" 2>/dev/null || [ $((SECONDS - t0)) -gt 20 ]; then
      echo "the switch did not start within 20 s ($log):" >&2
      tail -5 "$log" >&2
      kill "$SWITCH_PID" 2>/dev/null || true
      return 1
    fi
    sleep 0.05
  done
  SWITCH_CTL_PORT="$(grep -o '"controller_port"[^0-9]*[0-9]*' "$ready" | grep -o '[0-9]*$')"
}

# stop_switch: stops the switch start_switch started (SIGTERM: it prints its counters).
stop_switch() {
  kill "$SWITCH_PID" 2>/dev/null || true
  wait "$SWITCH_PID" 2>/dev/null || true
}
