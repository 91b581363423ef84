#!/usr/bin/env bash
# Several jobs on one switch through the JobService (issue 3): two concurrent jobs, int32 and
# float32, exact / within bound; a wrong token, a duplicate rank and a job that needs more slots
# than are free end in clear errors without disturbing the running jobs; deleting a job frees
# its slots at once. Job administration needs the operator credential: none sent is
# UNAUTHENTICATED, a wrong one PERMISSION_DENIED; a switch started without one generates it into
# a private file named in its ready file.
source "$(dirname "$0")/lib.sh"
start_switch --slots 600
CTL=127.0.0.1:$CTL_PORT
jobs() { "$SWITCHML" jobs "$@"; }

rc=0; SWITCHML_OPERATOR_TOKEN= jobs list --controller $CTL > "$WORK/noauth.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "UNAUTHENTICATED.*SWITCHML_OPERATOR_TOKEN" "$WORK/noauth.log" ||
  { cat "$WORK/noauth.log"; fail "jobs list without the operator credential: exit $rc"; }
pass "no operator credential: $(grep -m1 -o 'UNAUTHENTICATED.*' "$WORK/noauth.log" | cut -c1-120)"
rc=0; SWITCHML_OPERATOR_TOKEN=not-the-operator-token jobs create --controller $CTL --workers 1 --slots 1 \
  > "$WORK/wrongauth.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "PERMISSION_DENIED.*wrong operator credential" "$WORK/wrongauth.log" ||
  { cat "$WORK/wrongauth.log"; fail "jobs create with a wrong operator credential: exit $rc"; }
pass "wrong operator credential: $(grep -m1 -o 'PERMISSION_DENIED.*' "$WORK/wrongauth.log" | cut -c1-80)"
(
  # A second switch without a credential generates one, readable only by its user.
  unset SWITCHML_OPERATOR_TOKEN
  start_switch_on 0 0 gen-switch.log
  trap sml_stop_tracked EXIT
  tf=$(json_get "$SW_READY" "j['operator_token_file']")
  [ "$(stat -c %a "$tf")" = 600 ] || fail "generated token file $tf has mode $(stat -c %a "$tf")"
  grep -q "operator credential: generated, in $tf" "$WORK/gen-switch.log" || fail "the log does not name $tf"
  jobs list --controller 127.0.0.1:$CTL_PORT --operator-token-file "$tf" > /dev/null ||
    fail "jobs list with the generated token file failed"
  sml_stop_switch 10 || fail "the second switch exited with status $?"
  [ ! -e "$tf" ] || fail "the generated token file $tf was not removed at exit"
  pass "a switch without a credential generated $tf (mode 600), removed at exit"
) || { FAILED=1; exit 1; }

eval "$(jobs create --controller $CTL --workers 2 --slots 256 --type int32 --name A)"
A_ID=$SWITCHML_JOB_ID; A_TOKEN=$SWITCHML_JOB_TOKEN
eval "$(jobs create --controller $CTL --workers 3 --slots 256 --type float32 --name B)"
B_ID=$SWITCHML_JOB_ID; B_TOKEN=$SWITCHML_JOB_TOKEN
[ "$A_ID" != "$B_ID" ] || fail "two jobs got the same id"

# Only 88 slots left: a third job that needs 256 is refused, naming the shortage.
if jobs create --controller $CTL --workers 2 --slots 256 > "$WORK/c.log" 2>&1; then fail "over-commit accepted"; fi
grep -q "RESOURCE_EXHAUSTED" "$WORK/c.log" || { cat "$WORK/c.log"; fail "no RESOURCE_EXHAUSTED"; }
pass "job needing more slots than free: $(head -1 "$WORK/c.log")"

# Always started in the background (&): exec makes the background job the switchml process itself,
# so that its $! can be killed.
run_rank() {  # job id token rank workers type counts log [allreduce flags...]
  exec "$SWITCHML" allreduce --controller $CTL --job-id $1 --job-token $2 --rank $3 --workers $4 --type $5 \
      --counts $6 --call-timeout-ms 3000 --json "$WORK/$7.json" "${@:8}" > "$WORK/$7.log" 2>&1
}
# A job whose workers run --hold-file that never appears streams until the test ends it (a
# worker killed, the job deleted), however fast or slow it runs.
HOLD=(--hold-file "$WORK/never" --file-timeout-s 120)
# wait_streaming ID: until the job runs and the switch has received 1000 of its datagrams (30 s).
streaming() {
  jobs show --controller $CTL "$1" > "$WORK/show.json" 2>/dev/null &&
    [ "$(json_get "$WORK/show.json" "j['state'] == 'running' and j['counters']['received'] >= 1000")" = True ]
}
wait_streaming() {
  sml_wait_for 30 "job $1 to stream" streaming "$1" || { cat "$WORK/show.json"; fail "job $1 did not stream within 30 s"; }
}
# wait_rc PID SECONDS: waits for a background child to exit (failing after SECONDS); sets rc.
wait_rc() {
  sml_wait_gone "$1" "$2" "process $1 to exit" || fail "process $1 still running after $2 s (hang)"
  rc=0; wait "$1" || rc=$?
}
run_rank $A_ID $A_TOKEN 0 2 int32 1,65,300000 a0 & PA0=$!; sml_track $!
run_rank $A_ID $A_TOKEN 1 2 int32 1,65,300000 a1 & PA1=$!; sml_track $!
for r in 0 1 2; do run_rank $B_ID $B_TOKEN $r 3 float32 7,1000,200000 b$r & eval PB$r=$!; sml_track $!; done

# While they run: a wrong token and a duplicate rank are refused and disturb nothing.
if "$SWITCHML" allreduce --controller $CTL --job-id $A_ID --job-token wrong --rank 0 --workers 2 \
    --rpc-timeout-ms 3000 > "$WORK/t.log" 2>&1; then fail "wrong token accepted"; fi
grep -q "PERMISSION_DENIED" "$WORK/t.log" || { cat "$WORK/t.log"; fail "wrong token: no PERMISSION_DENIED"; }
pass "wrong token: $(grep -m1 PERMISSION "$WORK/t.log")"
for p in $PA0 $PA1 $PB0 $PB1 $PB2; do
  wait_rc $p 60; [ $rc -eq 0 ] || { tail -n 5 "$WORK"/*.log; fail "a worker of the concurrent jobs failed"; }
done
for f in a0 a1 b0 b1 b2; do
  [ "$(json_get "$WORK/$f.json" "j['ok']")" = True ] || fail "$f: not ok"
done
pass "two concurrent jobs (2 x int32, 3 x float32) on one switch: every element right"

# A second rank 0 for job A (its rank 0 is registered) is refused by the switch.
if "$SWITCHML" allreduce --controller $CTL --job-id $A_ID --job-token $A_TOKEN --rank 0 --workers 2 \
    --rpc-timeout-ms 3000 > "$WORK/r.log" 2>&1; then fail "duplicate rank 0 accepted"; fi
grep -q "ALREADY_EXISTS" "$WORK/r.log" || { cat "$WORK/r.log"; fail "duplicate rank: no ALREADY_EXISTS"; }
pass "duplicate rank: $(head -1 "$WORK/r.log")"

jobs list --controller $CTL > "$WORK/list.log"
grep -q "A" "$WORK/list.log" && grep -q "B" "$WORK/list.log" || { cat "$WORK/list.log"; fail "jobs list lacks the jobs"; }
# Job 0, the reference session, is listed too (no reference client here: no session), with its
# counters; so are every drop reason and the transport's counters.
grep -Eq "^ +0 +no_session +0/0 .*REFERENCE SESSION" "$WORK/list.log" &&
  grep -Eq "^job 0 \(reference session\) counters: .*received=0" "$WORK/list.log" ||
  { cat "$WORK/list.log"; fail "jobs list does not list job 0 (the reference session) with its counters"; }
for k in duplicates_dropped late_duplicates_dropped sim_ingress_drops sim_egress_drops unknown_sender udp_socket_drops; do
  grep -Eq "^ +$k +[0-9]+$" "$WORK/list.log" || { cat "$WORK/list.log"; fail "jobs list lacks the counter $k"; }
done
pass "jobs list: job 0 listed as the reference session with its counters; every drop reason listed"
jobs delete --controller $CTL $A_ID --token $A_TOKEN > /dev/null || fail "delete failed"
out=$(jobs create --controller $CTL --workers 2 --slots 256 --name C) || fail "slots of the deleted job were not freed: $out"
eval "$out"
pass "deleting a job frees its slots at once (job $SWITCHML_JOB_ID created in its place)"

# A worker process killed (SIGKILL) mid-job: the other worker of that job gets an error within
# its job timeout, the switch tears the idle job down and frees its slots, and a new job runs.
jobs delete --controller $CTL $B_ID --token $B_TOKEN > /dev/null || fail "delete B failed"
out=$(jobs create --controller $CTL --workers 2 --slots 256 --idle-timeout-s 1 --name D) || fail "create D: $out"
eval "$out"
D_ID=$SWITCHML_JOB_ID; D_TOKEN=$SWITCHML_JOB_TOKEN
# 2M-element all-reduces repeated (held) rather than one huge tensor: filling a huge one can take
# longer than the 1 s idle timeout, and the job would be torn down before it streamed at all.
run_rank $D_ID $D_TOKEN 0 2 int32 2000000 d0 "${HOLD[@]}" & PD0=$!; sml_track $!
run_rank $D_ID $D_TOKEN 1 2 int32 2000000 d1 "${HOLD[@]}" & PD1=$!; sml_track $!
wait_streaming $D_ID
sml_alive $PD0 && sml_alive $PD1 || { cat "$WORK"/d?.log; fail "a held worker of job $D_ID exited before the kill"; }
kill -9 $PD1
start=$SECONDS
# "Within its job timeout": the error names the 3000 ms call timeout that ended the call (read
# from the error, not the clock; the 60 s wait only turns a hang into a failure).
wait_rc $PD0 60
[ $rc -eq 1 ] || { cat "$WORK/d0.log"; fail "survivor of a killed worker: exit code $rc"; }
grep -q "DEADLINE_EXCEEDED: .* for 3000 ms" "$WORK/d0.log" ||
  { cat "$WORK/d0.log"; fail "survivor: no DEADLINE_EXCEEDED naming the 3000 ms call timeout"; }
pass "worker killed mid-job: survivor failed in $((SECONDS - start)) s: $(grep -m1 -o 'DEADLINE_EXCEEDED.*' "$WORK/d0.log" | cut -c1-120)"
ended() { grep -q '"state": "ended"' <(jobs show --controller $CTL "$1"); }
sml_wait_for 20 "job $D_ID to be torn down" ended $D_ID || fail "the killed job was not torn down within 20 s"
pass "killed job torn down: $(jobs show --controller $CTL $D_ID | grep -m1 end_reason | cut -c1-110)"
out=$(jobs create --controller $CTL --workers 2 --slots 256 --name E) || fail "create E: $out"
eval "$out"
E_ID=$SWITCHML_JOB_ID; E_TOKEN=$SWITCHML_JOB_TOKEN
run_rank $E_ID $E_TOKEN 0 2 float32 100000 e0 & PE0=$!; sml_track $!
run_rank $E_ID $E_TOKEN 1 2 float32 100000 e1 & PE1=$!; sml_track $!
wait_rc $PE0 60; [ $rc -eq 0 ] || { cat "$WORK/e0.log"; fail "a new job on the freed slots failed (rank 0)"; }
wait_rc $PE1 60; [ $rc -eq 0 ] || { cat "$WORK/e1.log"; fail "a new job on the freed slots failed (rank 1)"; }
pass "a new job runs on the freed slots"

# A job deleted while its workers stream: each of them fails within its job timeout, and the
# error says why (the client asks the controller about the job when it times out).
jobs delete --controller $CTL $E_ID --token $E_TOKEN > /dev/null || fail "delete E failed"
out=$(jobs create --controller $CTL --workers 2 --slots 256 --name F 2>&1) || fail "create F: $out"
eval "$out"
F_ID=$SWITCHML_JOB_ID; F_TOKEN=$SWITCHML_JOB_TOKEN
run_rank $F_ID $F_TOKEN 0 2 int32 2000000 f0 "${HOLD[@]}" & PF0=$!; sml_track $!
run_rank $F_ID $F_TOKEN 1 2 int32 2000000 f1 "${HOLD[@]}" & PF1=$!; sml_track $!
wait_streaming $F_ID
sml_alive $PF0 && sml_alive $PF1 || { cat "$WORK"/f?.log; fail "a held worker of job $F_ID exited before the delete"; }
jobs delete --controller $CTL $F_ID --token $F_TOKEN > /dev/null || fail "delete F failed"
start=$SECONDS
# Ended by the 3000 ms call timeout (named in the error) and then told why; no bound on the
# clock (the 60 s wait only turns a hang into a failure).
for p in $PF0 $PF1; do wait_rc $p 60; [ $rc -eq 1 ] || fail "worker of a deleted job: exit code $rc"; done
for f in f0 f1; do
  grep -q "DEADLINE_EXCEEDED: .* for 3000 ms.*job $F_ID has ended: deleted through the controller" "$WORK/$f.log" ||
    { cat "$WORK/$f.log"; fail "$f: the error does not say the call timed out (3000 ms) because the job was deleted"; }
done
pass "job deleted mid-stream: both workers failed in $((SECONDS - start)) s: $(grep -m1 -o 'job [0-9]* has ended.*' "$WORK/f0.log" | cut -c1-80)"
stop_switch
