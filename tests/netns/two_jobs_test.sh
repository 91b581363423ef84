#!/usr/bin/env bash
# Two concurrent jobs on one switch in the emulated cluster (issue 3): job A (int32, 3 workers)
# on worker hosts w0..w2, job B (float32, 5 workers: not a power of two, so the quantizer's
# scale is not one either) on w3..w7, created through the JobService with
# their own slot ranges and tokens. Every rank verifies every element (int32 exact, float32
# within the quantization bound) and must exit 0.
# Usage: two_jobs_test.sh CLUSTER_SH NAME_FILE SWITCHML SIZE
# shellcheck disable=SC2034  # used by load_cluster (lib.sh)
CLUSTER_SH=${1:?cluster.sh}
NAME_FILE=${2:?name file}
SWITCHML=${3:?switchml binary}
SIZE=${4:?tensor size}
source "$(dirname "$0")/lib.sh"
# The operator credential of the switch and of `switchml jobs` (ip netns exec keeps the
# environment).
sml_operator_token
load_cluster
[[ -x "$SWITCHML" ]] || fail "switchml binary not found at $SWITCHML"
((CLUSTER_WORKERS >= 8)) || fail "needs 8 worker hosts, the cluster has $CLUSTER_WORKERS"

sml_start_switch --bind "$CLUSTER_SWITCH_IP" --via in_sw || fail "switch did not start"
CTL="$CLUSTER_SWITCH_IP:$CTL_PORT"

declare -A ID TOKEN WORKERS=([A]=3 [B]=5)
for job in A B; do
  out=$(cx w0 "$SWITCHML" jobs create --controller "$CTL" --workers "${WORKERS[$job]}" --slots 256 --name "$job") \
      || fail "jobs create $job: $out"
  eval "$out"
  ID[$job]=$SWITCHML_JOB_ID
  TOKEN[$job]=$SWITCHML_JOB_TOKEN
done
[[ ${ID[A]} != "${ID[B]}" ]] || fail "both jobs got id ${ID[A]}"

t0=$SECONDS
pids=()
for ((i = 0; i < 8; i++)); do
  if ((i < 3)); then job=A type=int32 rank=$i; else job=B type=float32 rank=$((i - 3)); fi
  "${CX[@]}" "w$i" -- "$SWITCHML" allreduce --rank "$rank" --workers "${WORKERS[$job]}" --controller "$CTL" \
      --job-id "${ID[$job]}" --job-token "${TOKEN[$job]}" --type "$type" --size "$SIZE" \
      --call-timeout-ms 60000 --rpc-timeout-ms 30000 --json "$WORK/w$i.json" > "$WORK/w$i.log" 2>&1 &
  pids+=($!)
  sml_track $!
done
failed=""
for ((i = 0; i < 8; i++)); do wait "${pids[i]}" || failed+=" w$i"; done
if [[ -n "$failed" ]]; then
  for h in $failed; do echo "--- $h"; tail -5 "$WORK/$h.log"; done
  fail "hosts$failed failed"
fi
for ((i = 0; i < 8; i++)); do
  [[ $(json_get "$WORK/w$i.json" "j['ok']") == True ]] || fail "w$i: report not ok"
done
cx w0 "$SWITCHML" jobs list --controller "$CTL" > "$WORK/jobs.log" || fail "jobs list failed"
sml_stop_switch || fail "the switch exited with status $? on SIGTERM"
pass "two concurrent jobs on one switch (A 3 x int32 exact, B 5 x float32 within bound), $SIZE each, in $((SECONDS - t0))s"
