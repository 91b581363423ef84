#!/usr/bin/env bash
# Faults (issue 6, item 3), end to end over UDP on 127.0.0.1:
#  (a) the switch process (with its embedded controller) SIGKILLed mid-job and restarted on the
#      same ports: every worker of the running job fails clearly (UNAVAILABLE: the switch is what
#      failed, its controller does not answer or no longer knows the job) within its
#      job timeout, the new switch drops their retransmissions as unknown_sender, the old job
#      and token are refused, and after the restart new jobs (JobService and reference session)
#      run exact;
#  (b) the standalone controller (`switchml controller`) SIGKILLed while a job streams and
#      restarted on the same port: the running job completes exact (the data path does not use
#      the controller), the restarted controller still sees the old job (it keeps no state),
#      new jobs run; a worker waiting in the job barrier when the controller dies fails at once
#      (UNAVAILABLE), and the other rank, arriving later, fails within its RPC deadline; and the
#      switch behind the controller SIGKILLed: the controller answers at once, naming the switch
#      that is down, and drives the switch again once it is restarted on the same ports;
#  (c) a worker SIGKILLed mid-job and restarted: the survivors fail with DEADLINE_EXCEEDED
#      within their job timeout, the restarted worker cannot rejoin the old job (ALREADY_EXISTS
#      while it runs, FAILED_PRECONDITION once torn down), the switch tears the idle job down
#      and frees its slots, and the restarted worker plus the survivors run a new job exact.
# (jobs_test.sh covers a killed worker's survivor and teardown; (c) adds the rejoin.)
# Prints every error the user sees and how long it took, for docs/reliability.md.
# Nothing races the jobs: a job that must be streaming when something is killed repeats its
# all-reduce until the test releases it (--hold-file), however fast or slow it runs. Under CTest
# the test fails on its own deadline (SML_DEADLINE_S, tests/e2e/lib.sh), below its TIMEOUT,
# stopping what it started.
source "$(dirname "$0")/../../scripts/lib.sh"
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  echo "usage: $0 path/to/switchml"; sml_help_header "$0"; exit 0
fi
source "$(dirname "$0")/lib.sh"

CALL_TIMEOUT_MS=2000 RPC_TIMEOUT_MS=3000
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
jobs() { "$SWITCHML" jobs "$@"; }

# wait_child PID MAX_S: waits for a background child to exit; sets RC to its exit code and fails
# if it is still running after MAX_S seconds (a deadline that only turns a hang into a failure:
# generous, because a loaded machine may be slow).
wait_child() {
  sml_wait_gone "$1" "$2" "process $1 to exit" || fail "process $1 still running after $2 s (hang)"
  RC=0; wait "$1" || RC=$?
}

# expect_failure NAME LOG RC PATTERN ELAPSED_MS: an exit code of 1 (not a crash, not a hang),
# the log matching PATTERN. Which wait ended the process (the call timeout, the controller
# gone, a refusal) is in PATTERN, not in the clock: ELAPSED_MS is reported, never bounded (a
# loaded machine may be slow).
expect_failure() {
  local name=$1 log=$2 rc=$3 pattern=$4 elapsed=$5
  [ "$rc" -eq 1 ] || { cat "$log"; fail "$name: exit code $rc, expected 1"; }
  grep -qE -- "$pattern" "$log" || { cat "$log"; fail "$name: output lacks /$pattern/"; }
  pass "$name: error after $elapsed ms: $(grep -m1 -oE 'error: .*' "$log" | cut -c1-260)"
}

# A worker of a JobService job (always started in the background with &: exec makes it the
# switchml process itself, so that $! can be killed).
# run_rank CTL ID TOKEN RANK WORKERS COUNTS LOG [allreduce flags...]
run_rank() {
  local log=$7
  exec "$SWITCHML" allreduce --controller "$1" --job-id "$2" --job-token "$3" --rank "$4" --workers "$5" \
      --type int32 --counts "$6" --call-timeout-ms $CALL_TIMEOUT_MS --rpc-timeout-ms $RPC_TIMEOUT_MS \
      --json "$WORK/$log.json" "${@:8}" > "$WORK/$log.log" 2>&1
}

# A worker started with HOLD (--hold-file) streams until the test creates the file: it repeats
# its all-reduce after its --iters, so a fault can be injected while it is known to stream. A
# job whose workers are meant to die is never released (its file never appears).
hold() { echo "--hold-file $WORK/release-$1 --file-timeout-s 120"; }
release() { touch "$WORK/release-$1"; }

# wait_streaming CTL ID MIN: waits (30 s at most) until the job is running and has received at
# least MIN datagrams at the switch.
streaming() {
  jobs show --controller "$1" "$2" > "$WORK/show.json" 2>/dev/null &&
    [ "$(json_get "$WORK/show.json" "j['state'] == 'running' and j['counters']['received'] >= $3")" = True ]
}
wait_streaming() {
  sml_wait_for 30 "job $2 to stream" streaming "$@" || { cat "$WORK/show.json"; fail "job $2 did not start streaming within 30 s"; }
}

# expect_exact NAME FILES...: every rank's JSON says ok (all elements verified).
expect_exact() {
  local name=$1 f; shift
  for f in "$@"; do
    [ "$(json_get "$WORK/$f.json" "j['ok'] and all(r['wrong'] == 0 for r in j['results'])")" = True ] ||
      { cat "$WORK/$f.log"; fail "$name: $f not exact"; }
  done
  pass "$name: every element right on every rank"
}

# restart_switch UDP_PORT CTL_PORT: a switch on the given ports again (a restart).
restart_switch() { start_switch_on "$1" "$2" switch-restarted.log; }

# create_job CTL WORKERS [flags...]: sets JOB_ID and JOB_TOKEN.
create_job() {
  local ctl=$1 n=$2 out; shift 2
  out=$(jobs create --controller "$ctl" --workers "$n" --slots 256 --type int32 "$@") || fail "jobs create: $out"
  eval "$out"
  JOB_ID=$SWITCHML_JOB_ID; JOB_TOKEN=$SWITCHML_JOB_TOKEN
}

# ---------------------------------------------------------------------------------------------
echo "== (a) switch SIGKILLed mid-job, restarted on the same ports"
start_switch
CTL=127.0.0.1:$CTL_PORT
create_job $CTL 2
A_ID=$JOB_ID; A_TOKEN=$JOB_TOKEN
# All-reduces of 2M elements, held (never released): the job streams until the switch dies. A
# longer job timeout here, so that the workers still retransmit (at least every max_rto = 2 s)
# after the switch is back even if the restart is slow on a loaded machine.
CALL_TIMEOUT_MS=4000
run_rank $CTL $A_ID $A_TOKEN 0 2 2000000 a0 $(hold a) & PA0=$!; sml_track $!
run_rank $CTL $A_ID $A_TOKEN 1 2 2000000 a1 $(hold a) & PA1=$!; sml_track $!
wait_streaming $CTL $A_ID 2000
sml_alive $PA0 && sml_alive $PA1 || { cat "$WORK"/a?.log; fail "(a) a held worker exited before the switch was killed"; }
kill -9 "$SW_PID"
t0=$(now_ms)
wait "$SW_PID" 2>/dev/null || true
# Restart at once on the same ports, while the old job's workers still retransmit.
OLD_UDP=$UDP_PORT; OLD_CTL=$CTL_PORT
restart_switch "$OLD_UDP" "$OLD_CTL"
[ "$UDP_PORT" = "$OLD_UDP" ] && [ "$CTL_PORT" = "$OLD_CTL" ] || fail "(a) restarted switch is on other ports"
restart_ms=$(( $(now_ms) - t0 ))
pass "(a) switch restarted on the same ports after $restart_ms ms"
for r in 0 1; do
  eval "p=\$PA$r"
  wait_child "$p" 60
  el=$(( $(now_ms) - t0 ))
  expect_failure "(a) rank $r of the running job (switch killed)" "$WORK/a$r.log" $RC \
      "UNAVAILABLE: no result from switch 127\.0\.0\.1:$OLD_UDP for $CALL_TIMEOUT_MS ms.*(does not answer either|does not exist on this switch)" $el
done
jobs list --controller $CTL --json > "$WORK/list.json"
unk=$(json_get "$WORK/list.json" "j['switch_counters']['unknown_sender']")
if (( restart_ms <= CALL_TIMEOUT_MS - 2000 )); then
  [ "$unk" -ge 1 ] || fail "(a) the restarted switch saw no retransmission of the old workers"
  pass "(a) the restarted switch dropped $unk retransmissions of the old job as unknown_sender"
else
  echo "note: restart took $restart_ms ms; not checking that the old workers' retransmissions reached it"
fi
CALL_TIMEOUT_MS=2000
# The old job is gone with the switch: its id and token are refused.
t1=$(now_ms); rc=0
"$SWITCHML" allreduce --controller $CTL --job-id $A_ID --job-token $A_TOKEN --rank 0 --workers 2 \
    --rpc-timeout-ms 3000 > "$WORK/old.log" 2>&1 || rc=$?
expect_failure "(a) old job id after the restart" "$WORK/old.log" $rc "NOT_FOUND: .*does not exist" $(( $(now_ms) - t1 ))
create_job $CTL 2
if [ "$JOB_ID" = "$A_ID" ]; then
  # Job ids restart with the switch; the old token does not open the new job.
  t1=$(now_ms); rc=0
  "$SWITCHML" allreduce --controller $CTL --job-id $A_ID --job-token $A_TOKEN --rank 0 --workers 2 \
      --rpc-timeout-ms 3000 > "$WORK/old2.log" 2>&1 || rc=$?
  expect_failure "(a) old token for the reused job id $A_ID" "$WORK/old2.log" $rc "PERMISSION_DENIED" $(( $(now_ms) - t1 ))
fi
run_rank $CTL $JOB_ID $JOB_TOKEN 0 2 1,65,300000,3000000 a2r0 & P0=$!; sml_track $!
run_rank $CTL $JOB_ID $JOB_TOKEN 1 2 1,65,300000,3000000 a2r1 & P1=$!; sml_track $!
wait_child $P0 60; [ $RC -eq 0 ] || { cat "$WORK/a2r0.log"; fail "(a) new job after restart: rank 0 rc $RC"; }
wait_child $P1 60; [ $RC -eq 0 ] || { cat "$WORK/a2r1.log"; fail "(a) new job after restart: rank 1 rc $RC"; }
expect_exact "(a) new JobService job after the switch restart" a2r0 a2r1
# The reference session (no job id) works on the restarted switch too.
for r in 0 1; do
  "$SWITCHML" allreduce --controller $CTL --rank $r --workers 2 --type int32 --counts 1000,300000 \
      --call-timeout-ms $CALL_TIMEOUT_MS --rpc-timeout-ms 3000 --json "$WORK/s$r.json" > "$WORK/s$r.log" 2>&1 &
  eval "PS$r=$!"; sml_track $!
done
wait_child $PS0 60; [ $RC -eq 0 ] || { cat "$WORK/s0.log"; fail "(a) reference session after restart: rank 0 rc $RC"; }
wait_child $PS1 60; [ $RC -eq 0 ] || { cat "$WORK/s1.log"; fail "(a) reference session after restart: rank 1 rc $RC"; }
expect_exact "(a) reference-session job after the switch restart" s0 s1
stop_switch

# ---------------------------------------------------------------------------------------------
echo "== (b) standalone controller SIGKILLed while a job streams, restarted on the same port"
start_switch
SW_CTL=127.0.0.1:$CTL_PORT
# start_controller [PORT]: sets C_PID, C_PORT and C_LOG (controller-N.log, N = 1, 2, ...).
CONTROLLER_STARTS=0
start_controller() {
  CONTROLLER_STARTS=$((CONTROLLER_STARTS + 1))
  C_LOG=$WORK/controller-$CONTROLLER_STARTS.log
  sml_start_controller --listen 127.0.0.1:${1:-0} --log "$C_LOG" --deadline 10 -- \
      --switch $SW_CTL --rpc-timeout-ms 30000 || fail "controller did not start"
}
start_controller
CTL=127.0.0.1:$C_PORT
create_job $CTL 2
B_ID=$JOB_ID; B_TOKEN=$JOB_TOKEN
# Held until the controller is back: the job streams through the kill and the restart.
run_rank $CTL $B_ID $B_TOKEN 0 2 2000000 b0 $(hold b) & PB0=$!; sml_track $!
run_rank $CTL $B_ID $B_TOKEN 1 2 2000000 b1 $(hold b) & PB1=$!; sml_track $!
wait_streaming $CTL $B_ID 2000
kill -9 $C_PID
t0=$(now_ms)
wait $C_PID 2>/dev/null || true
sml_alive $PB0 && sml_alive $PB1 || { cat "$WORK"/b?.log; fail "(b) a held worker exited before the controller was killed"; }
jobs list --controller $CTL --rpc-timeout-ms 1000 > "$WORK/down.log" 2>&1 && fail "(b) a killed controller answered"
pass "(b) while the controller is down, operators see: $(grep -m1 -oE 'error: .*' "$WORK/down.log" | cut -c1-200)"
# The data path does not need the controller: the switch (asked directly) keeps counting the
# job's datagrams while the controller is down.
switch_received() { jobs list --controller $SW_CTL --json > "$WORK/sw-list.json" 2>/dev/null &&
                      json_get "$WORK/sw-list.json" "sum(x['counters']['received'] for x in j['jobs'])"; }
rx_down=$(switch_received) || fail "(b) the switch does not answer jobs list"
more_received() { local rx; rx=$(switch_received) && ((rx > rx_down + 2000)); }
sml_wait_for 30 "the switch to receive more of the job while the controller is down" more_received ||
  { cat "$WORK/sw-list.json"; fail "(b) the job stopped streaming when the controller died"; }
pass "(b) the job streams on while the controller is down: the switch received $(( $(switch_received) - rx_down )) more datagrams"
start_controller $C_PORT
pass "(b) controller restarted on port $C_PORT after $(( $(now_ms) - t0 )) ms"
sml_alive $PB0 && sml_alive $PB1 || { cat "$WORK"/b?.log; fail "(b) a held worker exited while the controller was down"; }
release b
wait_child $PB0 60; [ $RC -eq 0 ] || { cat "$WORK/b0.log"; fail "(b) rank 0 of the running job failed (rc $RC)"; }
wait_child $PB1 60; [ $RC -eq 0 ] || { cat "$WORK/b1.log"; fail "(b) rank 1 of the running job failed (rc $RC)"; }
expect_exact "(b) the job that streamed through the controller restart completed ($(( $(now_ms) - t0 )) ms after the kill)" b0 b1
jobs show --controller $CTL $B_ID > "$WORK/b.json" || fail "(b) restarted controller cannot show job $B_ID"
[ "$(json_get "$WORK/b.json" "j['state']")" = running ] || fail "(b) job $B_ID not seen as running"
B_ITERS=$(json_get "$WORK/b0.json" "j['results'][0]['iterations']")
[ "$(json_get "$WORK/b.json" "j['counters']['received']")" -ge $((2 * B_ITERS * 7813)) ] ||
  fail "(b) job $B_ID counters lost: fewer than 2 ranks x $B_ITERS all-reduces x 7813 datagrams"
pass "(b) the restarted controller sees job $B_ID: $(json_get "$WORK/b.json" "j['state'], j['counters']['received']") datagrams"
jobs delete --controller $CTL $B_ID --token $B_TOKEN > /dev/null || fail "(b) delete of the old job via the new controller"
create_job $CTL 2
run_rank $CTL $JOB_ID $JOB_TOKEN 0 2 1,65,300000 b2r0 & P0=$!; sml_track $!
run_rank $CTL $JOB_ID $JOB_TOKEN 1 2 1,65,300000 b2r1 & P1=$!; sml_track $!
wait_child $P0 60; [ $RC -eq 0 ] || { cat "$WORK/b2r0.log"; fail "(b) new job: rank 0 rc $RC"; }
wait_child $P1 60; [ $RC -eq 0 ] || { cat "$WORK/b2r1.log"; fail "(b) new job: rank 1 rc $RC"; }
expect_exact "(b) new job through the restarted controller" b2r0 b2r1
jobs delete --controller $CTL $JOB_ID --token $JOB_TOKEN > /dev/null || fail "(b) delete"

# The job barrier lives in the controller: a rank waiting in it when the controller dies fails
# at once; a rank arriving after the restart waits for a peer that left and fails at its RPC
# deadline; the job keeps both ranks registered, so it must be deleted and created again.
# Rank 0's barrier call waits up to its RPC timeout, 30 s here: far longer than the test takes
# to see it arrive and kill the controller, however slow the machine: `jobs show` counts the
# job's callers waiting in its barrier (barrier_waiters; only rank 0 runs, so it is rank 0).
create_job $CTL 2
RPC_TIMEOUT_MS=30000 run_rank $CTL $JOB_ID $JOB_TOKEN 0 2 1000 bb0 & P0=$!; sml_track $!
registered() {
  jobs show --controller $CTL $JOB_ID > "$WORK/show.json" 2>/dev/null &&
    [ "$(json_get "$WORK/show.json" "j['num_registered']")" = 1 ]
}
sml_wait_for 30 "rank 0 to register" registered || { cat "$WORK/show.json" "$WORK/bb0.log"; fail "(b) rank 0 did not register"; }
in_barrier() {
  jobs show --controller $CTL $JOB_ID > "$WORK/show.json" 2>/dev/null &&
    [ "$(json_get "$WORK/show.json" "j['barrier_waiters']")" = 1 ]
}
sml_wait_for 30 "rank 0 to wait in the job's barrier" in_barrier ||
  { cat "$WORK/show.json" "$WORK/bb0.log"; fail "(b) the controller shows no caller waiting in job $JOB_ID's barrier"; }
sml_alive $P0 || { cat "$WORK/bb0.log"; fail "(b) rank 0 left the barrier before the controller was killed"; }
kill -9 $C_PID
t0=$(now_ms)
wait $C_PID 2>/dev/null || true
# At once, not at its 30 s rpc deadline: UNAVAILABLE (the controller went away), where waiting
# out the deadline would give DEADLINE_EXCEEDED.
wait_child $P0 60
expect_failure "(b) rank waiting in the job barrier (controller killed)" "$WORK/bb0.log" $RC \
    "UNAVAILABLE: job $JOB_ID rank 0: barrier: controller 127\.0\.0\.1:$C_PORT" $(( $(now_ms) - t0 ))
start_controller $C_PORT
t0=$(now_ms)
run_rank $CTL $JOB_ID $JOB_TOKEN 1 2 1000 bb1 & P1=$!; sml_track $!
wait_child $P1 60
expect_failure "(b) other rank arriving after the restart" "$WORK/bb1.log" $RC \
    "DEADLINE_EXCEEDED: job $JOB_ID rank 1: barrier: .*1 of 2 workers had arrived" $(( $(now_ms) - t0 ))
t0=$(now_ms); rc=0
"$SWITCHML" allreduce --controller $CTL --job-id $JOB_ID --job-token $JOB_TOKEN --rank 0 --workers 2 \
    --rpc-timeout-ms 3000 > "$WORK/bb0r.log" 2>&1 || rc=$?
expect_failure "(b) restarted rank 0 rejoining the same job" "$WORK/bb0r.log" $rc "ALREADY_EXISTS: .*rank 0" $(( $(now_ms) - t0 ))
jobs delete --controller $CTL $JOB_ID --token $JOB_TOKEN > /dev/null || fail "(b) delete"
create_job $CTL 2
run_rank $CTL $JOB_ID $JOB_TOKEN 0 2 1000,65537 bc0 & P0=$!; sml_track $!
run_rank $CTL $JOB_ID $JOB_TOKEN 1 2 1000,65537 bc1 & P1=$!; sml_track $!
wait_child $P0 60; [ $RC -eq 0 ] || { cat "$WORK/bc0.log"; fail "(b) recreated job: rank 0 rc $RC"; }
wait_child $P1 60; [ $RC -eq 0 ] || { cat "$WORK/bc1.log"; fail "(b) recreated job: rank 1 rc $RC"; }
expect_exact "(b) the job deleted and created again runs" bc0 bc1

# The switch behind the standalone controller SIGKILLed: the controller answers at once (it
# does not wait for the dead switch until the deadline), says which switch is down, and uses
# the switch again once it is back on the same ports. "At once" without a clock: the
# controller's calls to the switch may take 30 s (--rpc-timeout-ms of start_controller), these
# operator calls only 10 s, so a controller that waited for the dead switch would leave them
# with DEADLINE_EXCEEDED instead of its answer.
SWITCH_UDP=$UDP_PORT; SWITCH_CTL=$CTL_PORT
kill -9 "$SW_PID"
wait "$SW_PID" 2>/dev/null || true
t0=$(now_ms)
jobs list --controller $CTL --rpc-timeout-ms 10000 > "$WORK/down-list.log" 2>&1 || { cat "$WORK/down-list.log"; fail "(b) jobs list failed with the switch down"; }
grep -q "switch0: UNREACHABLE" "$WORK/down-list.log" || { cat "$WORK/down-list.log"; fail "(b) jobs list does not say the switch is down"; }
pass "(b) switch down: jobs list answers in $(( $(now_ms) - t0 )) ms: $(grep -m1 UNREACHABLE "$WORK/down-list.log")"
t0=$(now_ms); rc=0
jobs create --controller $CTL --rpc-timeout-ms 10000 --workers 2 --slots 256 > "$WORK/down-create.log" 2>&1 || rc=$?
expect_failure "(b) jobs create with the switch down" "$WORK/down-create.log" $rc \
    "UNAVAILABLE: controller 127\.0\.0\.1:$C_PORT answered \(CreateJob\): no switch reachable .*switch 0 \(127\.0\.0\.1:$SWITCH_CTL\)" \
    $(( $(now_ms) - t0 ))
restart_switch "$SWITCH_UDP" "$SWITCH_CTL"
t0=$(now_ms)
# The controller reconnects on its own (gRPC's backoff): up to 20 s on a loaded machine.
created() { out=$(jobs create --controller $CTL --workers 2 --slots 256 2>&1); }
sml_wait_for 20 "" created || fail "(b) no job created within 20 s of the switch coming back: $out"
eval "$out"
JOB_ID=$SWITCHML_JOB_ID; JOB_TOKEN=$SWITCHML_JOB_TOKEN
pass "(b) the controller created a job on the restarted switch $(( $(now_ms) - t0 )) ms after it was back"
run_rank $CTL $JOB_ID $JOB_TOKEN 0 2 1000,65537 bd0 & P0=$!; sml_track $!
run_rank $CTL $JOB_ID $JOB_TOKEN 1 2 1000,65537 bd1 & P1=$!; sml_track $!
wait_child $P0 60; [ $RC -eq 0 ] || { cat "$WORK/bd0.log"; fail "(b) job on the restarted switch: rank 0 rc $RC"; }
wait_child $P1 60; [ $RC -eq 0 ] || { cat "$WORK/bd1.log"; fail "(b) job on the restarted switch: rank 1 rc $RC"; }
expect_exact "(b) a job through the controller on the restarted switch" bd0 bd1
kill -TERM $C_PID
wait_child $C_PID 10; [ $RC -eq 0 ] || fail "(b) controller exit code $RC on SIGTERM"
stop_switch

# ---------------------------------------------------------------------------------------------
echo "== (c) a worker SIGKILLed mid-job, restarted, rejoining"
start_switch --slots 1024
CTL=127.0.0.1:$CTL_PORT
create_job $CTL 3 --idle-timeout-s 3
C_ID=$JOB_ID; C_TOKEN=$JOB_TOKEN
# A tensor that is quick to fill, all-reduced again and again (held, never released) until rank 2
# dies: the job's idle clock (3 s here) counts the time a worker spends preparing its input
# before the first datagram, so one huge tensor (30M elements take over a second to fill on a
# loaded 2-core machine) gets the job torn down before it streams.
for r in 0 1 2; do run_rank $CTL $C_ID $C_TOKEN $r 3 2000000 c$r $(hold c) & eval "PC$r=$!"; sml_track $!; done
wait_streaming $CTL $C_ID 3000
sml_alive $PC0 && sml_alive $PC1 && sml_alive $PC2 || { cat "$WORK"/c?.log; fail "(c) a held worker exited before rank 2 was killed"; }
kill -9 $PC2
t0=$(now_ms)
wait $PC2 2>/dev/null || true
# The restarted rank 2 tries the same job at once: its rank is still registered (ALREADY_EXISTS),
# or, if starting the process took longer than call_timeout + idle_timeout on a loaded machine,
# the job has already been torn down (FAILED_PRECONDITION).
rc=0
"$SWITCHML" allreduce --controller $CTL --job-id $C_ID --job-token $C_TOKEN --rank 2 --workers 3 \
    --rpc-timeout-ms 3000 > "$WORK/c2r.log" 2>&1 || rc=$?
expect_failure "(c) restarted rank 2 rejoining the running job" "$WORK/c2r.log" $rc \
    "ALREADY_EXISTS: .*rank 2 of job $C_ID|FAILED_PRECONDITION: .*job $C_ID has ended" $(( $(now_ms) - t0 ))
for r in 0 1; do
  eval "p=\$PC$r"
  wait_child "$p" 60
  expect_failure "(c) surviving rank $r (rank 2 killed)" "$WORK/c$r.log" $RC \
      "DEADLINE_EXCEEDED: no result from switch 127\.0\.0\.1:$UDP_PORT for $CALL_TIMEOUT_MS ms.*the switch has had no datagram from rank 2 \(127\.0\.0\.1\) for [0-9]+ ms: it may have died" \
      $(( $(now_ms) - t0 ))
done
# The switch tears the job down once nothing arrives for its idle timeout, and frees its slots.
ended() { jobs show --controller $CTL $C_ID > "$WORK/show.json" && [ "$(json_get "$WORK/show.json" "j['state']")" = ended ]; }
sml_wait_for 20 "" ended || { cat "$WORK/show.json"; fail "(c) killed job not torn down within 20 s"; }
pass "(c) job torn down $(( $(now_ms) - t0 )) ms after the kill: $(json_get "$WORK/show.json" "j['end_reason']")"
jobs list --controller $CTL --json > "$WORK/list.json"
[ "$(json_get "$WORK/list.json" "j['free_slots'] == j['pool_slots'] == 1024")" = True ] ||
  { cat "$WORK/list.json"; fail "(c) slots not freed"; }
listed=$(jobs list --controller $CTL)  # not piped into grep -q: SIGPIPE + pipefail
grep -qE "^ +$C_ID +ended" <<<"$listed" || fail "(c) jobs list does not show job $C_ID as ended"
pass "(c) all 1024 slots free again; jobs list shows job $C_ID ended"
t1=$(now_ms); rc=0
"$SWITCHML" allreduce --controller $CTL --job-id $C_ID --job-token $C_TOKEN --rank 2 --workers 3 \
    --rpc-timeout-ms 3000 > "$WORK/c2e.log" 2>&1 || rc=$?
expect_failure "(c) restarted rank 2 joining the torn-down job" "$WORK/c2e.log" $rc \
    "FAILED_PRECONDITION: .*job $C_ID has ended" $(( $(now_ms) - t1 ))
create_job $CTL 3 --idle-timeout-s 1
for r in 0 1 2; do run_rank $CTL $JOB_ID $JOB_TOKEN $r 3 1,65,300000,2000000 cn$r & eval "PN$r=$!"; sml_track $!; done
for r in 0 1 2; do
  eval "p=\$PN$r"
  wait_child "$p" 60; [ $RC -eq 0 ] || { cat "$WORK/cn$r.log"; fail "(c) new job: rank $r rc $RC"; }
done
expect_exact "(c) restarted rank 2 and the survivors in a new job" cn0 cn1 cn2
stop_switch
echo "all fault scenarios passed"
