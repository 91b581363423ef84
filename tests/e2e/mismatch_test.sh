#!/usr/bin/env bash
# Workers that disagree. Two `switchml allreduce` ranks with different --threads, --window or
# --elements-per-packet, for the reference session and for a job made with `switchml jobs
# create`: both ranks exit non-zero because of the refusal, not the 10 s job and rpc timeouts
# (FAILED_PRECONDITION: the refused rank's stderr names the field with both values and both
# ranks, and the rank left waiting in the barrier names it too); also through a standalone
# `switchml controller`. Then different --size and --type (the call descriptor of the data
# path): both ranks exit non-zero with INVALID_ARGUMENT naming the mismatch, not by the job
# timeout. Which wait ended a rank is read from its error, never from the clock (a loaded
# machine may be slow); the 60 s outer timeout only turns a hang into a failure.
source "$(dirname "$0")/lib.sh"
export SWITCHML_OPERATOR_TOKEN=mismatch-test-operator-token-0123
start_switch
CTL=127.0.0.1:$CTL_PORT
CALL_TIMEOUT_S=10

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$@"; }

# Always started in the background (&): exec makes the background job the switchml process.
# The outer timeout turns a hang into a failure instead of blocking the test.
run_rank() {  # NAME RANK [allreduce flags...]
  local name=$1 rank=$2
  shift 2
  exec timeout 60 "$SWITCHML" allreduce --controller "$CTL" --rank "$rank" --workers 2 \
      --call-timeout-ms $((CALL_TIMEOUT_S * 1000)) --rpc-timeout-ms 10000 "$@" \
      > "$WORK/$name.out" 2> "$WORK/$name.err"
}

# pair NAME "JOB_FLAGS" "RANK0_FLAGS" "RANK1_FLAGS": runs both ranks, asserts both exit
# non-zero (not hung); sets ERR0/ERR1 to the two stderr files and TOOK (for the report only).
pair() {
  local name=$1 job=$2 f0=$3 f1=$4
  local start end rc0=0 rc1=0
  start=$(now)
  # shellcheck disable=SC2086
  run_rank "$name-r0" 0 $job $f0 & local p0=$!; sml_track $p0
  # shellcheck disable=SC2086
  run_rank "$name-r1" 1 $job $f1 & local p1=$!; sml_track $p1
  wait $p0 || rc0=$?
  wait $p1 || rc1=$?
  end=$(now)
  ERR0=$WORK/$name-r0.err
  ERR1=$WORK/$name-r1.err
  [ $rc0 -ne 0 ] || { cat "$WORK/$name-r0.out" "$ERR0"; fail "$name: rank 0 exited 0"; }
  [ $rc1 -ne 0 ] || { cat "$WORK/$name-r1.out" "$ERR1"; fail "$name: rank 1 exited 0"; }
  [ $rc0 -ne 124 ] && [ $rc1 -ne 124 ] || fail "$name: a rank hung (killed by timeout)"
  TOOK=$(elapsed "$start" "$end")
}

# expect_refused NAME FIELD V0 V1 "JOB_FLAGS" "RANK0_FLAGS" "RANK1_FLAGS": the ranks register
# FIELD=V0 (rank 0) and FIELD=V1 (rank 1). The refused rank's stderr has the whole refusal;
# the other rank's names the field too (its barrier failed with the same message).
expect_refused() {
  local name=$1 field=$2 v0=$3 v1=$4
  pair "$name" "$5" "$6" "$7"
  # Whichever rank registered first fixed the value (rank 0 always, for the reference session).
  local refusal="rank 1 registered $field=$v1, but rank 0 registered $field=$v0"
  local refusal_alt="rank 0 registered $field=$v0, but rank 1 registered $field=$v1"
  local refused
  if grep -q "FAILED_PRECONDITION.*$refusal" "$ERR1"; then refused=$ERR1
  elif grep -q "FAILED_PRECONDITION.*$refusal_alt" "$ERR0"; then refused=$ERR0
  else cat "$ERR0" "$ERR1"; fail "$name: no rank's stderr has the refusal naming $field"; fi
  # Both ranks ended by the refusal (FAILED_PRECONDITION naming the field), not by a timeout.
  for e in "$ERR0" "$ERR1"; do
    grep -q "FAILED_PRECONDITION" "$e" && grep -q "$field=$v0" "$e" && grep -q "$field=$v1" "$e" ||
      { cat "$e"; fail "$name: $(basename "$e") is not a refusal naming $field with both values"; }
  done
  pass "$name: both ranks failed in $TOOK s; refused rank: $(grep -m1 -o 'rank [01] registered.*' "$refused" | cut -c1-150)"
}

SESSION_CASES=(
  "threads num_worker_threads 1 2 --threads=1 --threads=2"
  "window window_packets 256 128 --window=256 --window=128"
  "packet elements_per_packet 256 64 --elements-per-packet=256 --elements-per-packet=64"
)

echo "== the reference session"
for c in "${SESSION_CASES[@]}"; do
  read -r what field v0 v1 f0 f1 <<< "$c"
  expect_refused "session-$what" "$field" "$v0" "$v1" "--size 1MiB --type int32" "$f0" "$f1"
done

echo "== a job made with switchml jobs create"
new_job() {
  local out
  out=$("$SWITCHML" jobs create --controller "$CTL" --workers 2 --slots 256 2>&1) ||
    fail "jobs create: $out"
  eval "$out"
  JOB_FLAGS="--job-id $SWITCHML_JOB_ID --job-token $SWITCHML_JOB_TOKEN"
}
delete_job() {
  "$SWITCHML" jobs delete --controller "$CTL" "$SWITCHML_JOB_ID" --token "$SWITCHML_JOB_TOKEN" \
      > /dev/null || fail "jobs delete $SWITCHML_JOB_ID"
}
for c in "${SESSION_CASES[@]}"; do
  read -r what field v0 v1 f0 f1 <<< "$c"
  new_job
  expect_refused "job-$what" "$field" "$v0" "$v1" "$JOB_FLAGS --size 1MiB --type int32" "$f0" "$f1"
  delete_job
done

echo "== through a standalone controller (switchml controller) driving the switch"
SW_CTL=$CTL
sml_start_controller --deadline 10 -- --switch "$SW_CTL" --rpc-timeout-ms 3000 ||
    fail "standalone controller did not start"
CTL=127.0.0.1:$C_PORT
expect_refused "standalone-session-threads" num_worker_threads 1 2 "--size 1MiB --type int32" \
    "--threads=1" "--threads=2"
new_job
expect_refused "standalone-job-window" window_packets 256 128 \
    "$JOB_FLAGS --size 1MiB --type int32" "--window=256" "--window=128"
delete_job
sml_stop "$C_PID" 10 controller || true
CTL=$SW_CTL

# Workers that agree still run (the same switch, after all those refusals).
pair_ok() {  # NAME "FLAGS"
  run_rank "$1-r0" 0 $2 & local p0=$!; sml_track $p0
  run_rank "$1-r1" 1 $2 & local p1=$!; sml_track $p1
  wait $p0 && wait $p1 || { cat "$WORK/$1"-r*.err; fail "$1: agreeing workers failed"; }
  pass "$1: agreeing workers run"
}
pair_ok session-agree "--size 1MiB --type int32 --threads 2"
new_job
pair_ok job-agree "$JOB_FLAGS --size 1MiB --type int32 --threads 2"
delete_job

echo "== different --size / --type at the same call (the data path's call descriptor)"
# Both ranks must fail (not hang, not return a wrong sum as OK) by the calls' mismatch
# (INVALID_ARGUMENT naming what differs), not by the 10 s job timeout.
# expect_mismatch NAME WHAT: both ranks' stderr has the mismatch of WHAT (count or type).
expect_mismatch() {
  for e in "$ERR0" "$ERR1"; do
    grep -q "INVALID_ARGUMENT: .*do not match: the element $2 differs" "$e" ||
      { cat "$e"; fail "$1: $(basename "$e") does not report the element $2 mismatch"; }
  done
}
pair session-size "--type int32" "--size 1MiB" "--size 2MiB"
expect_mismatch session-size count
pass "session, --size 1MiB vs 2MiB: both ranks failed in $TOOK s: $(tail -1 "$ERR0" | cut -c1-120)"
pair session-type "--size 1MiB" "--type int32" "--type float32"
expect_mismatch session-type type
pass "session, --type int32 vs float32: both ranks failed in $TOOK s: $(tail -1 "$ERR0" | cut -c1-120)"
new_job
pair job-size "$JOB_FLAGS --type int32" "--size 1MiB" "--size 2MiB"
expect_mismatch job-size count
pass "job, --size 1MiB vs 2MiB: both ranks failed in $TOOK s: $(tail -1 "$ERR0" | cut -c1-120)"
delete_job
new_job
pair job-type "$JOB_FLAGS --size 1MiB" "--type int32" "--type float32"
expect_mismatch job-type type
pass "job, --type int32 vs float32: both ranks failed in $TOOK s: $(tail -1 "$ERR0" | cut -c1-120)"
delete_job
stop_switch
