#!/usr/bin/env bash
# SwitchML across namespaces: `switchml switch` in the switch host, `switchml allreduce` ranks
# 0..N-1 in the N worker hosts (each verifies every element of its result itself), int32 on all N
# hosts and float32 on the first F32_N (the largest count <= N that is not a power of two, 7 of
# the fixture's 8: the quantizer's scale is then not a power of two), over the fixture's
# rate-limited links. With LOSS > 0, random loss LOSS in both
# directions (iptables in the receiving namespaces) during the run; then the loss rules must really
# have dropped datagrams and the workers must have retransmitted. Every process must exit 0.
# Usage: switchml_test.sh CLUSTER_SH NAME_FILE SWITCHML SIZE LOSS   (LOSS 0: no loss)
CLUSTER_SH=${1:?cluster.sh}
NAME_FILE=${2:?name file}
SWITCHML=${3:?switchml binary}
SIZE=${4:?tensor size}
LOSS=${5:?loss probability}
source "$(dirname "$0")/lib.sh"
load_cluster
[[ -x "$SWITCHML" ]] || fail "switchml binary not found at $SWITCHML"
N=$CLUSTER_WORKERS
F32_N=$N
while ((F32_N > 2 && (F32_N & (F32_N - 1)) == 0)); do F32_N=$((F32_N - 1)); done

# load_cluster starts and leaves the shared cluster without loss rules or processes inside.

# dropped_packets: datagrams dropped so far by the loss rules of all hosts.
dropped_packets() {
  local total=0 ns n
  for ns in $CLUSTER_SWITCH_NS $CLUSTER_WORKER_NS; do
    n=$(ip netns exec "$ns" iptables -w -n -v -x -L SMLLOSS 2>/dev/null | awk '$3 == "DROP" {s += $1} END {print s + 0}')
    total=$((total + n))
  done
  echo "$total"
}

# run_job TYPE LABEL: one switch + N workers (F32_N for float32); fails unless all exit 0.
run_job() {
  local type=$1 label=$2 i N=$N
  [[ $type == float32 ]] && N=$F32_N
  sml_start_switch --bind "$CLUSTER_SWITCH_IP" --via in_sw --ready "$WORK/ready-$label" --log "$WORK/switch-$label.log" \
      -- --counters-json "$WORK/switch-$label.json" || fail "$label: switch did not start"
  local sw_pid=$SW_PID ctl=$CTL_PORT
  local t0=$SECONDS pids=()
  for ((i = 0; i < N; i++)); do
    # Generous job timeout: the 2-core host runs N workers and the switch at once.
    "${CX[@]}" "w$i" -- "$SWITCHML" allreduce --rank "$i" --workers "$N" --controller "$CLUSTER_SWITCH_IP:$ctl" \
        --type "$type" --size "$SIZE" --call-timeout-ms 60000 --rpc-timeout-ms 30000 \
        --json "$WORK/$label-r$i.json" > "$WORK/$label-r$i.log" 2>&1 &
    pids+=($!)
    sml_track $!
  done
  local failed=""
  for ((i = 0; i < N; i++)); do wait "${pids[i]}" || failed+=" $i"; done
  local took=$((SECONDS - t0))
  local sw_rc=0
  sml_stop "$sw_pid" 10 switch || sw_rc=$?
  ((sw_rc == 0)) || { tail -5 "$WORK/switch-$label.log"; fail "$label: the switch exited with status $sw_rc on SIGTERM"; }
  if [[ -n "$failed" ]]; then
    for i in $failed; do echo "--- rank $i"; tail -5 "$WORK/$label-r$i.log"; done
    echo "--- switch"; tail -5 "$WORK/switch-$label.log"
    fail "$label: ranks$failed failed"
  fi
  # All reports ok; sums of packets and retransmissions (one python run for all ranks).
  read -r sent RETX < <("$PYTHON" - "$WORK" "$label" "$N" <<'EOF'
import json, sys
work, label, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reps = [json.load(open(f"{work}/{label}-r{i}.json")) for i in range(n)]
bad = [i for i, r in enumerate(reps) if not r.get("ok")]
if bad:
    sys.exit(f"{label}: ranks {bad} report not ok")
print(sum(r["stats"]["packets_sent"] for r in reps), sum(r["stats"]["retransmissions"] for r in reps))
EOF
  ) || fail "$label: worker reports"
  [[ -n "${RETX:-}" ]] || fail "$label: could not read the worker reports"
  pass "$label: $N workers x $SIZE $type verified in ${took}s ($sent packets sent, $RETX retransmitted)"
}

if [[ $LOSS == 0 ]]; then
  for type in int32 float32; do run_job "$type" "clean-$type"; done
  exit 0
fi
"$CLUSTER_SH" loss --name "$NAME" --to-switch "$LOSS" --from-switch "$LOSS"
before=$(dropped_packets)
for type in int32 float32; do
  run_job "$type" "lossy-$type"
  ((RETX > 0)) || fail "lossy-$type: no retransmissions although $LOSS loss was on"
done
dropped=$(($(dropped_packets) - before))
((dropped > 0)) || fail "the loss rules dropped nothing"
pass "with $LOSS loss worker->switch and switch->worker: all ranks exact, $dropped datagrams dropped by iptables"
