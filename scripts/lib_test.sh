#!/usr/bin/env bash
# Test of scripts/lib.sh (CTest e2e_shell_lib): messages and exit codes, deadlines of every wait,
# the exit trap (own processes and their descendants stopped, work directory kept or removed),
# starting and stopping a switch. Usage: lib_test.sh [path/to/switchml]   (without it, the switch
# part is skipped)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SWITCHML=${1:-}
sml_work_dir switchml-lib-test
[[ -z ${SML_DEADLINE_S:-} ]] || sml_deadline "$SML_DEADLINE_S" "${0##*/}"
T=$WORK/t
mkdir -p "$T"
LIB="$SML_LIB_DIR/lib.sh"

# run_bash LOG SCRIPT: runs SCRIPT in a fresh bash that sourced the library (set -euo pipefail);
# sets RC; output in LOG.
run_bash() {
  RC=0
  bash -c "set -euo pipefail; source '$LIB'; $2" > "$1" 2>&1 || RC=$?
}

# --- messages and exit codes
run_bash "$T/die.log" "SML_PROG=prog die 'bad --x'"
((RC == 2)) && grep -qx "prog: error: bad --x" "$T/die.log" || fail "die: exit $RC: $(cat "$T/die.log")"
run_bash "$T/die1.log" "SML_DIE_STATUS=1 die x"
((RC == 1)) || fail "die with SML_DIE_STATUS=1 exited $RC"
run_bash "$T/fail.log" "fail 'it broke'"
((RC == 1)) && grep -qx "FAIL: it broke" "$T/fail.log" || fail "fail: exit $RC: $(cat "$T/fail.log")"
run_bash "$T/skip.log" "skip 'no root'"
((RC == 77)) && grep -qx "SKIP: no root" "$T/skip.log" || fail "skip: exit $RC"
run_bash "$T/need.log" "sml_need_value --out"
((RC == 2)) && grep -q -- "--out needs a value" "$T/need.log" || fail "sml_need_value: exit $RC"
run_bash "$T/need2.log" "sml_need_value --out x; echo fine"
grep -qx fine "$T/need2.log" || fail "sml_need_value refused a value"
pass "die, fail, skip, sml_need_value: messages and exit codes"

# --- waits: each returns at its deadline, names what it waited for
start=${EPOCHREALTIME/./}
rc=0; sml_wait_file "$T/never" 0.3 "the never file" 2> "$T/wait.err" || rc=$?
took=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
((rc == 1)) || fail "sml_wait_file of a missing file returned $rc"
# Not before its deadline (a lower bound: load-proof). The upper bound is no speed claim: it
# rules out a deadline ignored or read in the wrong unit (0.3 s as 300 s would run into this
# test's own deadline); 10 s is far above any scheduling delay.
((took >= 300 && took < 10000)) || fail "sml_wait_file with a 0.3 s deadline took $took ms"
grep -q "timed out after 0.3 s waiting for the never file" "$T/wait.err" || fail "no clear message: $(cat "$T/wait.err")"
(sleep 0.2; echo x > "$T/later") &
sml_wait_file "$T/later" 30 || fail "sml_wait_file missed a file written after 0.2 s"
wait $!
port=$(sml_free_port tcp)
[[ $port =~ ^[0-9]+$ ]] && ((port > 0)) || fail "sml_free_port printed '$port'"
rc=0; sml_wait_port tcp "$port" 0.2 2>/dev/null || rc=$?
((rc == 1)) || fail "sml_wait_port found a listener on the free port $port"
python3 -c "
import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(30)" "$port" &
listener=$!
sml_track "$listener"
sml_wait_port tcp "$port" 10 || fail "sml_wait_port missed the listener on port $port"
uport=$(sml_free_port udp)
python3 -c "
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.1', int(sys.argv[1]))); time.sleep(30)" "$uport" &
sml_track $!
sml_wait_port udp "$uport" 10 || fail "sml_wait_port missed the UDP socket on port $uport"
sml_stop "$listener" 5 listener || true
sml_alive "$listener" && fail "sml_stop left the listener running"
echo '{"a": {"b": [1, 2, 3]}}' > "$T/j.json"
[[ $(json_get "$T/j.json" "sum(j['a']['b'])") == 6 ]] || fail "json_get"
pass "sml_wait_file, sml_wait_port (tcp, udp), sml_free_port, json_get"

# --- sml_stop: exit status; a process that ignores SIGTERM is killed after the deadline
# Each process says when its trap is set (a file), and the test waits for that instead of
# sleeping: a SIGTERM before the trap would end it with 143, a false failure on a loaded machine.
bash -c "trap 'exit 3' TERM; echo set > '$T/trap-exit3'; while :; do sleep 0.05; done" &
p=$!
sml_wait_file "$T/trap-exit3" 30 || fail "the exit-3 process did not set its trap"
rc=0; sml_stop "$p" 5 "the exit-3 process" || rc=$?
((rc == 3)) || fail "sml_stop returned $rc, expected the process's status 3"
bash -c "trap '' TERM; echo set > '$T/trap-ignore'; sleep 30 & wait" &
p=$!
sml_wait_file "$T/trap-ignore" 30 || fail "the stubborn process did not set its trap"
rc=0; sml_stop "$p" 0.5 "the stubborn process" 2> "$T/stop.err" || rc=$?
((rc == 124)) || fail "sml_stop of a process ignoring SIGTERM returned $rc"
grep -q "waiting for the stubborn process to exit on SIGTERM" "$T/stop.err" || fail "sml_stop: $(cat "$T/stop.err")"
sml_alive "$p" && fail "sml_stop left a process ignoring SIGTERM alive"
pass "sml_stop: exit status, SIGKILL after the deadline"

# --- the exit trap: tracked processes and their descendants stop; work dir kept on failure only
for want in 0 1; do
  bash -c "source '$LIB'; sml_work_dir switchml-lib-test-inner; echo \$WORK > '$T/work$want'
           bash -c 'sleep 60 & echo \$! > \"$T/grandchild$want\"; wait' &
           sml_track \$!
           bash -c 'trap \"\" TERM; sleep 60' & echo \$! > '$T/stubborn$want'; sml_track \$!
           sml_at_exit 'echo hook ran > \"$T/hook$want\"'
           source '$LIB'
           sml_wait_file '$T/grandchild$want' 5
           exit $want" 2> "$T/trap$want.err" || true
  inner=$(cat "$T/work$want")
  for f in grandchild stubborn; do
    q=$(cat "$T/$f$want")
    sml_wait_gone "$q" 5 "the $f process of the exited script" || fail "exit trap left $f pid $q running"
  done
  [[ -s "$T/hook$want" ]] || fail "sml_at_exit hook did not run (or sourcing the library again dropped it)"
  if ((want == 0)); then
    [[ ! -e "$inner" ]] || fail "work directory $inner kept after success"
  else
    [[ -d "$inner" ]] && grep -q "logs in $inner" "$T/trap$want.err" || fail "work directory not kept after failure"
    rm -rf "$inner"
  fi
done
pass "exit trap: own processes and descendants stopped (SIGKILL after SIGTERM was ignored), hooks run, logs kept on failure only"

# --- sml_deadline: a script past its deadline fails (130) and cleans up, even when blocked in a
# foreground command; a script that ends in time leaves no watchdog behind. "Even when blocked":
# the foreground command sleeps 300 s, and the script must end long before that (bound 30 s,
# a tenth of it and far above any scheduling delay); a deadline that waited for the command
# to finish would also end in 130 with the message, so the bound is what tells them apart.
start=${EPOCHREALTIME/./}
run_bash "$T/deadline.log" "sml_work_dir switchml-lib-test-dl; echo \$WORK > '$T/dl-work'
    sleep 600 & echo \$! > '$T/dl-child'; sml_track \$!
    sml_deadline 0.5 'the slow test'
    sleep 300; echo 'not stopped'"
took=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
((RC == 130)) || fail "sml_deadline: exit $RC, expected 130: $(cat "$T/deadline.log")"
grep -q "FAIL: the slow test: deadline of 0.5 s passed" "$T/deadline.log" || fail "sml_deadline: $(cat "$T/deadline.log")"
! grep -q "not stopped" "$T/deadline.log" || fail "sml_deadline: the script went on past its deadline"
((took < 30000)) || fail "sml_deadline 0.5 with a script blocked in a 300 s command took $took ms"
q=$(cat "$T/dl-child")
sml_wait_gone "$q" 5 "the tracked child of the timed-out script" || fail "sml_deadline left tracked pid $q running"
dl_work=$(cat "$T/dl-work")
[[ -d $dl_work ]] || fail "sml_deadline: the work directory of the failed script was removed"
rm -rf "$dl_work"
run_bash "$T/deadline2.log" "sml_deadline 30; echo \$SML_DEADLINE_PID > '$T/dl-watchdog'; echo done"
((RC == 0)) && grep -qx done "$T/deadline2.log" || fail "sml_deadline in a script that ends in time: exit $RC"
q=$(cat "$T/dl-watchdog")
sml_wait_gone "$q" 5 "the watchdog of a finished script" || fail "sml_deadline's watchdog $q outlived its script"
# A script SIGKILLed (no trap runs) takes its watchdog with it: it would keep the script's output
# open, and CTest would wait for it until the deadline.
run_bash "$T/deadline3.log" "sml_deadline 60; echo \$SML_DEADLINE_PID > '$T/dl-watchdog3'; kill -KILL \$\$"
((RC == 137)) || fail "sml_deadline: a script killing itself exited $RC, expected 137"
q=$(cat "$T/dl-watchdog3")
sml_wait_gone "$q" 5 "the watchdog of a SIGKILLed script" || fail "sml_deadline's watchdog $q outlived its SIGKILLed script"
pass "sml_deadline: exit 130 within $took ms of a 0.5 s deadline (blocked in a foreground command), processes stopped, logs kept; no watchdog left after a script that ends in time or is SIGKILLed"

# --- a switch
if [[ -n "$SWITCHML" ]]; then
  sml_start_switch --deadline 20 -- --slots 64 || fail "sml_start_switch"
  [[ $UDP_PORT =~ ^[0-9]+$ && $CTL_PORT =~ ^[0-9]+$ ]] || fail "ports '$UDP_PORT' '$CTL_PORT'"
  sml_wait_port tcp "$CTL_PORT" 5 && sml_wait_port udp "$UDP_PORT" 5 || fail "the switch's ports are not bound"
  rc=0; sml_stop_switch 10 || rc=$?
  ((rc == 0)) || fail "the switch exited with status $rc"
  # A switch that cannot start (bad flag): an error at once, not after the deadline.
  start=${EPOCHREALTIME/./}
  if sml_start_switch --log "$T/bad.log" --deadline 20 -- --slots 0 2> "$T/bad.err"; then fail "a bad switch started"; fi
  (( (${EPOCHREALTIME/./} - start) / 1000000 < 10 )) || fail "a switch that exited was waited for until the deadline"
  grep -q "exited (status [1-9][0-9]*) before it was ready" "$T/bad.err" || fail "sml_start_switch: $(cat "$T/bad.err")"
  pass "sml_start_switch / sml_stop_switch; a switch that exits at start is reported at once"
fi
