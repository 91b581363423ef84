#!/usr/bin/env bash
# A job on two switches (shards) through a standalone controller, with the real binaries:
# `switchml jobs create --switches 2` places it on both (one of them with two I/O threads);
# three workers with four threads each get exact int32 and verified float32 results, and both
# switches aggregate a share (nothing misrouted). Then one switch is SIGKILLed: every worker's
# all-reduce fails naming that shard, the controller reports the job ended for that reason, and
# the surviving switch has ended it too (its slots are free). Last, a job whose switch dies is
# re-placed by a controller with another switch that has room, and its workers register again.
# Last, a two-level job with two shards per level (`jobs create --leaf 0,1:2 --leaf 2,3:2`).
source "$(dirname "$0")/lib.sh"
unset SWITCHML_JOB_ID SWITCHML_JOB_TOKEN  # set by new_job below
start_switch_on 0 0 switch0.log --io-threads 2
SW0_PID=$SW_PID SW0_CTL=127.0.0.1:$CTL_PORT
start_switch_on 0 0 switch1.log
SW1_PID=$SW_PID SW1_CTL=127.0.0.1:$CTL_PORT
sml_start_controller --deadline 10 -- --switch "$SW0_CTL" --switch "$SW1_CTL" --rpc-timeout-ms 3000 ||
    fail "standalone controller did not start"
CTL=127.0.0.1:$C_PORT
jobs() { "$SWITCHML" jobs "$@"; }

# A rank registers once per job: every run below gets a job of its own. The previous one is
# deleted first: its workers have exited, and a live job keeps their (address, port)s, which the
# kernel may hand to the next workers' sockets (the switch would refuse them: ALREADY_EXISTS).
new_job() {  # name
  local out
  if [[ -n "${SWITCHML_JOB_ID:-}" ]]; then
    jobs delete "$SWITCHML_JOB_ID" --token "$SWITCHML_JOB_TOKEN" --controller "$CTL" > /dev/null ||
        fail "jobs delete $SWITCHML_JOB_ID failed"
  fi
  out=$(jobs create --controller "$CTL" --workers 3 --slots 256 --switches 2 --name "$1") ||
      fail "jobs create --switches 2 failed: $out"
  eval "$out"
}
new_job int32
jobs list --controller "$CTL" > "$WORK/list.log"
grep -q "int32 \[on 2 switches\]" "$WORK/list.log" || { cat "$WORK/list.log"; fail "jobs list does not show the job on 2 switches"; }
[ "$(grep -c '^ *[0-9]' "$WORK/list.log")" = 1 ] || { cat "$WORK/list.log"; fail "the sharded job is not listed exactly once"; }
pass "job $SWITCHML_JOB_ID created on 2 switches, listed once"

# Sizing a job by its workers' window instead of --slots (control::JobLayout::SlotsFor): 3
# threads with 96 packets in flight on 2 switches need 127 slots (shard 0 serves 2 threads of
# 32 slots each and holds slots [0, 64) of 127; shard 1 holds 63 for its one thread's 32), not
# the 96 of the window; contradictory or impossible sizes are refused before anything is created.
out=$(jobs create --controller "$CTL" --workers 3 --window 96 --threads 3 --switches 2 --json) ||
    fail "jobs create --window 96 --threads 3 --switches 2 failed: $out"
read -r sized_id sized_token sized_slots < <(echo "$out" | python3 -c \
    "import json,sys; j=json.load(sys.stdin); print(j['job_id'], j['token'], j['num_slots'])")
[ "$sized_slots" = 127 ] || fail "jobs create --window 96 --threads 3 --switches 2 made $sized_slots slots, not 127"
jobs delete "$sized_id" --token "$sized_token" --controller "$CTL" > /dev/null || fail "jobs delete $sized_id failed"
expect_refused() {  # pattern args...: jobs create fails naming the pattern
  local pattern=$1 out
  shift
  if out=$(jobs create --controller "$CTL" --workers 3 "$@" 2>&1); then fail "jobs create $* succeeded: $out"; fi
  grep -q -- "$pattern" <<<"$out" || fail "jobs create $* does not name '$pattern': $out"
}
expect_refused "give the job's size" --switches 2
expect_refused "give one of them" --slots 256 --window 96
expect_refused "window_packets" --window 100 --threads 3
pass "jobs create --window/--threads sizes a job on 2 switches (127 slots for 3 threads x 32); bad sizes refused"

run_ranks() {  # tag type counts [extra flags]: 3 ranks in the background; pids in PIDS
  local tag=$1 type=$2 counts=$3 r
  shift 3
  PIDS=()
  for r in 0 1 2; do
    "$SWITCHML" allreduce --controller "$CTL" --job-id "$SWITCHML_JOB_ID" --job-token "$SWITCHML_JOB_TOKEN" \
        --rank $r --workers 3 --threads 4 --type "$type" --counts "$counts" --json "$WORK/$tag$r.json" "$@" \
        > "$WORK/$tag$r.log" 2>&1 &
    PIDS+=($!)
    sml_track $!
  done
}
for type in int32 float32; do
  [ "$type" = int32 ] || new_job "$type"
  run_ranks "$type-" "$type" 1,5,1000,300001
  for p in "${PIDS[@]}"; do wait "$p" || { tail -n 5 "$WORK/$type"-*.log; fail "a $type worker failed"; }; done
  for r in 0 1 2; do [ "$(json_get "$WORK/$type-$r.json" "j['ok']")" = True ] || fail "$type rank $r: not ok"; done
done
pass "3 workers x 4 threads over 2 shards: int32 exact, float32 within bound, sizes 1..300001"

for i in 0 1; do
  ctl_var=SW${i}_CTL
  jobs list --controller "${!ctl_var}" --json > "$WORK/sw$i.json"
  read -r rx wrong < <(json_get "$WORK/sw$i.json" \
      "'%d %d' % (sum(x['counters']['consumed'] for x in j['jobs']), sum(x['counters']['wrong_io_thread'] for x in j['jobs']))")
  ((rx > 0)) || fail "switch $i aggregated nothing of the sharded job"
  ((wrong == 0)) || fail "switch $i: $wrong datagrams of the job reached the wrong I/O thread or shard"
  eval "rx$i=$rx"
done
pass "both shards aggregated ($rx0 and $rx1 datagrams consumed), none misrouted"

# Workers that registered and stream; then switch 1's host dies. They repeat their all-reduce
# until a file appears that the test never creates (--hold-file): still streaming when the switch
# dies, however fast or slow they run.
new_job doomed
run_ranks dead- int32 100000 --hold-file "$WORK/never" --file-timeout-s 120 --call-timeout-ms 2000
running() { jobs show "$SWITCHML_JOB_ID" --controller "$CTL" 2>/dev/null |
              python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j["counters"]["consumed"] > 0 else 1)'; }
sml_wait_for 20 "the job to stream" running || fail "the workers never started streaming"
{ kill -9 "$SW1_PID"; wait "$SW1_PID"; } 2>/dev/null || true
for p in "${PIDS[@]}"; do if wait "$p"; then fail "a worker succeeded with shard 1 dead"; fi; done
for r in 0 1 2; do
  grep -q "no result from switch shard 1 of 2" "$WORK/dead-$r.log" ||
      { cat "$WORK/dead-$r.log"; fail "rank $r's error does not name shard 1"; }
done
pass "shard 1 killed: every worker fails naming it: $(grep -m1 -o 'no result from switch shard 1 of 2[^,]*' "$WORK/dead-0.log")"
jobs show "$SWITCHML_JOB_ID" --controller "$CTL" > "$WORK/show.json" || fail "jobs show failed"
[ "$(json_get "$WORK/show.json" "j['state']")" = ended ] || { cat "$WORK/show.json"; fail "the job is not ended"; }
json_get "$WORK/show.json" "j['end_reason']" | grep -q "shard 1 of 2 (switch 1 at $SW1_CTL)" ||
    { cat "$WORK/show.json"; fail "the end reason does not name shard 1"; }
jobs list --controller "$SW0_CTL" --json > "$WORK/sw0-after.json"
[ "$(json_get "$WORK/sw0-after.json" "[x['state'] for x in j['jobs'] if x['name'] == 'doomed']")" = "['ended']" ] ||
    { cat "$WORK/sw0-after.json"; fail "the surviving shard did not end the job"; }
pass "the controller ended the job: $(json_get "$WORK/show.json" "j['end_reason']" | cut -c1-100); so did switch 0"
sml_stop "$C_PID" 10 controller || true

# Re-placement (docs/operations.md "Health checks and re-placement"): a controller driving a new
# switch 2 and switch 0, in that order, so that a job of one switch goes to switch 2 (ties: the
# first). Switch 2's host dies: the controller's health probe finds it down and re-places the
# job on switch 0, same id and token, placement 2; `jobs list` shows switch 2 down; the workers
# register again with the same id and token and get exact results.
start_switch_on 0 0 switch2.log
SW2_PID=$SW_PID SW2_CTL=127.0.0.1:$CTL_PORT
sml_start_controller --log "$WORK/controller-2.log" --ready "$WORK/controller-2-ready" --deadline 10 -- \
    --switch "$SW2_CTL" --switch "$SW0_CTL" --rpc-timeout-ms 3000 --health-interval-ms 200 ||
    fail "second standalone controller did not start"
CTL=127.0.0.1:$C_PORT
out=$(jobs create --controller "$CTL" --workers 3 --slots 256 --name moving) || fail "jobs create: $out"
eval "$out"
(( SWITCHML_JOB_ID >> 24 == 0 )) || fail "job $SWITCHML_JOB_ID was not placed on switch 2 (index 0)"
{ kill -9 "$SW2_PID"; wait "$SW2_PID"; } 2>/dev/null || true
replaced() { jobs show "$SWITCHML_JOB_ID" --controller "$CTL" > "$WORK/moved.json" 2>/dev/null &&
               [ "$(json_get "$WORK/moved.json" "j['placement']")" = 2 ]; }
sml_wait_for 30 "the job to be re-placed" replaced || { cat "$WORK/moved.json"; fail "the job was not re-placed"; }
[ "$(json_get "$WORK/moved.json" "j['state']")" = waiting_for_workers ] ||
    { cat "$WORK/moved.json"; fail "the re-placed job does not wait for its workers"; }
listed=$(jobs list --controller "$CTL")
grep -q "switch0: UNREACHABLE" <<<"$listed" || { echo "$listed"; fail "jobs list does not show switch 2 down"; }
grep -q "switch1 ($SW0_CTL): up" <<<"$listed" || { echo "$listed"; fail "jobs list does not show switch 0 up"; }
grep -q "moving \[re-placed: placement 2\]" <<<"$listed" || { echo "$listed"; fail "jobs list does not show the re-placement"; }
run_ranks moved- int32 1000,65537
for p in "${PIDS[@]}"; do wait "$p" || { tail -n 5 "$WORK"/moved-*.log; fail "a worker of the re-placed job failed"; }; done
for r in 0 1 2; do [ "$(json_get "$WORK/moved-$r.json" "j['ok']")" = True ] || fail "re-placed job, rank $r: not ok"; done
pass "switch 2 killed: job $SWITCHML_JOB_ID re-placed on switch 0 (placement 2), its workers registered again: exact"
sml_stop "$C_PID" 10 controller || true

# Two levels with two shards per level (docs/scaling.md, `jobs create --leaf S,S:N`): four leaf
# switches (racks 0 and 1, two shards each; some with two I/O threads) and a parent of two
# shards the controller chooses (switches 4 and 5); 4 workers x 4 threads, int32 exact (float32
# through two levels: two_level_test); every leaf sent its share up and every parent shard
# aggregated.
TL_CTL=()
for i in 0 1 2 3 4 5; do
  io=1
  ((i % 2 == 1)) && io=2
  start_switch_on 0 0 "tl-switch$i.log" --io-threads "$io"
  TL_CTL+=(--switch "127.0.0.1:$CTL_PORT")
  eval "TL${i}_CTL=127.0.0.1:\$CTL_PORT"
done
sml_start_controller --log "$WORK/controller-3.log" --ready "$WORK/controller-3-ready" --deadline 10 -- \
    "${TL_CTL[@]}" --rpc-timeout-ms 3000 || fail "third standalone controller did not start"
CTL=127.0.0.1:$C_PORT
expect_refused "names 1 switch(es) but --leaf 0,1:2 names 2" --leaf 0,1:2 --leaf 2:1 --slots 128
expect_refused "switch 1 is given twice" --leaf 0,1:2 --leaf 1,2:1 --slots 128
out=$(jobs create --controller "$CTL" --workers 4 --leaf 0,1:2 --leaf 2,3:2 --window 256 --threads 4 \
      --name two-by-two) || fail "jobs create --leaf 0,1:2 --leaf 2,3:2 failed: $out"
eval "$out"
listed=$(jobs list --controller "$CTL")
grep -q "two-by-two \[on 2 switches\] \[two-level: leaves 0,1:2 2,3:2, parent 4,5\]" <<<"$listed" ||
    { echo "$listed"; fail "jobs list does not show the two-level job of 2 shards per level"; }
PIDS=()
for r in 0 1 2 3; do
  "$SWITCHML" allreduce --controller "$CTL" --job-id "$SWITCHML_JOB_ID" --job-token "$SWITCHML_JOB_TOKEN" \
      --rank $r --workers 4 --threads 4 --type int32 --counts 1,1000,300001 --json "$WORK/tl$r.json" \
      > "$WORK/tl$r.log" 2>&1 &
  PIDS+=($!)
  sml_track $!
done
for p in "${PIDS[@]}"; do wait "$p" || { tail -n 5 "$WORK"/tl*.log; fail "a worker of the two-level job failed"; }; done
for r in 0 1 2 3; do [ "$(json_get "$WORK/tl$r.json" "j['ok']")" = True ] || fail "two-level rank $r: not ok"; done
for i in 0 1 2 3 4 5; do
  ctl_var=TL${i}_CTL
  jobs list --controller "${!ctl_var}" --json > "$WORK/tl-sw$i.json"
  read -r consumed up wrong < <(json_get "$WORK/tl-sw$i.json" \
      "'%d %d %d' % tuple(sum(x['counters'][c] for x in j['jobs']) for c in ('consumed', 'uplink_sent', 'wrong_io_thread'))")
  ((consumed > 0)) || fail "switch $i aggregated nothing of the two-level job"
  ((wrong == 0)) || fail "switch $i: $wrong datagrams reached the wrong I/O thread"
  ((i >= 4 || up > 0)) || fail "leaf switch $i sent nothing up"
done
pass "two levels x 2 shards (leaves 0,1 and 2,3, parent 4,5): 4 workers x 4 threads exact; every leaf sent up, every switch aggregated"
sml_stop "$C_PID" 10 controller || true
