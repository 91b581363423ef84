# shellcheck shell=bash
# What the end-to-end test scripts share beyond scripts/lib.sh (sourced here; see its header for
# die, fail, pass, json_get, sml_track, sml_wait_*, sml_start_*, ...). Source it with the
# switchml binary as $1; set -euo pipefail is on. It makes the work directory $WORK (kept on
# failure or with KEEP=1; tracked processes stopped at exit) and exports a random
# SWITCHML_OPERATOR_TOKEN: the operator credential of every switch and controller these tests
# start and of every `switchml jobs` call (job administration needs it; docs/operations.md,
# "Access control"). Under CTest it fails the test once SML_DEADLINE_S seconds have passed (set
# by tests/CMakeLists.txt below the test's TIMEOUT; sml_deadline), stopping what it started.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
[ -x "${1:-}" ] || die "argument 1 must be the switchml binary, got '${1:-}'"
SWITCHML=$1
sml_work_dir switchml-e2e
[[ -z ${SML_DEADLINE_S:-} ]] || sml_deadline "$SML_DEADLINE_S" "${0##*/}"
sml_operator_token

# start_switch_on UDP_PORT CTL_PORT LOG [extra flags...]: starts a switch on 127.0.0.1 on the given
# ports (0 = a free one), output to $WORK/LOG; sets SW_PID, UDP_PORT, CTL_PORT.
start_switch_on() {
  local udp=$1 ctl=$2 log=$3
  shift 3
  sml_start_switch --port "$udp" --controller-port "$ctl" --log "$WORK/$log" --deadline 10 -- "$@" ||
      fail "switch did not start (ports $udp, $ctl)"
}

# start_switch [extra flags...]: starts a switch on free ports, counters to switch-counters.json.
start_switch() { start_switch_on 0 0 switch.log --counters-json "$WORK/switch-counters.json" "$@"; }

# stop_switch: SIGTERM; the switch must exit within 5 s, with status 0.
stop_switch() {
  local rc=0
  sml_stop_switch 5 || rc=$?
  ((rc != 124)) || fail "switch did not exit on SIGTERM"
  ((rc == 0)) || fail "switch exited with an error: $(tail -5 "$SW_LOG")"
}
