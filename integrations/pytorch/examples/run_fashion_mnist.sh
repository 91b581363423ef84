#!/usr/bin/env bash
# Trains the FashionMNIST CNN (fashion_mnist_ddp.py) with DistributedDataParallel twice from the
# same seed, over torch.distributed backend "switchml" and then "gloo", and prints both side by
# side. See --help and docs/training.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh"

PROG=$(basename "$0")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$SML_ROOT
TRAIN_PY="$HERE/fashion_mnist_ddp.py"
CLUSTER_SH="$REPO/scripts/cluster.sh"

usage() {
  cat <<EOF
Usage: $PROG [OPTIONS]

One command: DDP training of a small CNN (80k parameters) on FashionMNIST with N processes,
first over the "switchml" backend (a fresh \`switchml switch\` on free ports), then over "gloo",
same seed, same data order. Rank 0's progress is shown while it trains. Then prints a table:
training loss every K steps, final test accuracy, mean/median step time, and the accuracy
difference (switchml - gloo) in percentage points; writes both runs to a JSON file.
Builds nothing: needs BUILD/switchml and BUILD/python/switchml (ninja -C BUILD
switchml_cli switchml_torch_ext; scripts/python-env.sh makes the venv).

Options:
  --workers N        processes (default 4)
  --epochs E         epochs (default 2)
  --batch-size B     mini-batch per process (default 64)
  --max-steps M      stop after M steps (default 0: all steps of the epochs)
  --seed S           seed of weights and data order, same for both backends (default 1)
  --lr LR            peak SGD learning rate, momentum 0.9, cosine decay to 0 (default 0.05)
  --train-subset K   use the first K training images (default 0: all 60000)
  --test-subset K    use the first K test images (default 0: all 10000)
  --every K          loss row every K steps in the table (default: about 10 rows)
  --out FILE         combined JSON (default: BUILD/fashion_mnist_ddp.json)
  --build DIR        build directory (default: $REPO/build)
  --python PATH      interpreter that imports torch (default: the project venv, REPO/.venv)
  --cluster RATE     run on the emulated cluster (scripts/cluster.sh, needs root): N worker
                     hosts + a switch host, tbf RATE on every link (tc units, e.g. 500mbit);
                     the switch runs in the switch host, rank i in worker host i, rendezvous
                     through a file:// store in a shared directory. Torn down on exit, even
                     after a failure.
  --timeout S        limit for each backend's run, in seconds (default 1800)
  --keep-logs        keep the logs directory even after success
  -h, --help         this text

Environment: SWITCHML_* settings (README of integrations/pytorch) pass through to the ranks.
Exit status: 0 when both runs finished and every rank ended with identical parameters.
EOF
}

WORKERS=4 EPOCHS=2 BATCH=64 MAX_STEPS=0 SEED=1 LR=0.05 TRAIN_SUBSET=0 TEST_SUBSET=0 EVERY=0
OUT="" BUILD="$REPO/build" PYTHON="${SWITCHML_VENV:-$REPO/.venv}/bin/python" RATE="" TIMEOUT=1800 KEEP=0
need_int() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a non-negative integer, got '$2'"; }
while (($#)); do
  case "$1" in
    --workers) WORKERS=${2-}; need_int "$1" "$WORKERS"; shift 2 ;;
    --epochs) EPOCHS=${2-}; need_int "$1" "$EPOCHS"; shift 2 ;;
    --batch-size) BATCH=${2-}; need_int "$1" "$BATCH"; shift 2 ;;
    --max-steps) MAX_STEPS=${2-}; need_int "$1" "$MAX_STEPS"; shift 2 ;;
    --seed) SEED=${2-}; need_int "$1" "$SEED"; shift 2 ;;
    --lr) LR=${2-}; [[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE]-?[0-9]+)?$ ]] || die "--lr must be a positive number, got '$LR'"; shift 2 ;;
    --train-subset) TRAIN_SUBSET=${2-}; need_int "$1" "$TRAIN_SUBSET"; shift 2 ;;
    --test-subset) TEST_SUBSET=${2-}; need_int "$1" "$TEST_SUBSET"; shift 2 ;;
    --every) EVERY=${2-}; need_int "$1" "$EVERY"; shift 2 ;;
    --out) OUT=${2-}; [[ -n "$OUT" ]] || die "--out needs a file name"; shift 2 ;;
    --build) BUILD=${2-}; [[ -n "$BUILD" ]] || die "--build needs a directory"; shift 2 ;;
    --python) PYTHON=${2-}; shift 2 ;;
    --cluster) RATE=${2-}; [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] || die "--cluster needs a tc rate such as 500mbit, got '$RATE'"; shift 2 ;;
    --timeout) TIMEOUT=${2-}; need_int "$1" "$TIMEOUT"; shift 2 ;;
    --keep-logs) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
((WORKERS >= 1)) || die "--workers must be >= 1, got $WORKERS"
((EPOCHS >= 1)) || die "--epochs must be >= 1, got $EPOCHS"
((BATCH >= 1)) || die "--batch-size must be >= 1, got $BATCH"
((TIMEOUT >= 1)) || die "--timeout must be >= 1, got $TIMEOUT"
[[ -d "$BUILD" ]] || die "--build: directory '$BUILD' does not exist"
BUILD=$(cd "$BUILD" && pwd)
[[ -d "$BUILD/python/switchml" ]] || die "$BUILD/python/switchml does not exist: build it first (ninja -C $BUILD switchml_torch_ext switchml_cli), or pass --build DIR"
[[ -x "$BUILD/switchml" ]] || die "$BUILD/switchml does not exist: build it first (ninja -C $BUILD switchml_cli), or pass --build DIR"
"$PYTHON" -c "import torch, numpy" 2>/dev/null || die "--python $PYTHON cannot import torch and numpy (scripts/python-env.sh makes the project venv that can)"
[[ -n "$OUT" ]] || OUT="$BUILD/fashion_mnist_ddp.json"
if [[ -n "$RATE" ]]; then
  [[ $(id -u) == 0 ]] || die "--cluster needs root (network namespaces)"
  [[ -x "$CLUSTER_SH" ]] || die "$CLUSTER_SH not found"
fi

# The work directory is kept on failure and with --keep-logs (KEEP=1). At exit the switch and the
# ranks (with their `timeout` processes) are stopped, then the cluster is torn down.
sml_work_dir switchml-fmnist
NAME=""       # cluster name prefix once created
SWITCHML="$BUILD/switchml"
sml_at_exit 'if [[ -n "$NAME" ]]; then "$CLUSTER_SH" down --name "$NAME" >/dev/null 2>&1 || echo "$PROG: could not tear down cluster $NAME (run: $CLUSTER_SH down --name $NAME)" >&2; fi'

# on_host HOST: the command prefix that runs a command in cluster host HOST (nothing on loopback).
on_host() { if [[ -n "$NAME" ]]; then echo "$CLUSTER_SH exec --name $NAME --host $1 --"; fi; }
# in_sw CMD...: execs CMD in the switch host (on loopback: here).
# shellcheck disable=SC2046
in_sw() { exec $(on_host sw) "$@"; }

if [[ -n "$RATE" ]]; then
  NAME="fm$$"
  echo "== emulated cluster $NAME: $WORKERS worker hosts + switch host, $RATE per link"
  "$CLUSTER_SH" up --name "$NAME" --workers "$WORKERS" --rate "$RATE" > "$WORK/cluster.log" 2>&1 \
    || { cat "$WORK/cluster.log" >&2; die "scripts/cluster.sh up failed"; }
  # shellcheck disable=SC1090
  source "/tmp/switchml-cluster-$NAME.env"
  SWITCH_IP=$CLUSTER_SWITCH_IP
  MODE="cluster $RATE"
else
  SWITCH_IP=127.0.0.1
  MODE="loopback"
fi

# start_switch: a fresh switch on free ports; sets SW_PID and CONTROLLER.
start_switch() {
  sml_start_switch --bind "$SWITCH_IP" --via in_sw --ready "$WORK/switch-ready.json" --deadline 30 -- \
      --counters-json "$WORK/switch-counters.json" || die "the switch did not start"
  CONTROLLER="$SWITCH_IP:$CTL_PORT"
}

stop_switch() {
  [[ -n "${SW_PID:-}" ]] || return 0
  # CPU seconds (user + system) the switch used so far: it shares the cores with the ranks.
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($14 + $15) / hz}' "/proc/$SW_PID/stat" \
      > "$WORK/switch-cpu-s" 2>/dev/null || true
  sml_stop_switch 10 || true
  SW_PID=""
}

# udp_rcvbuf_errors HOST: the UDP RcvbufErrors counter of a cluster host's namespace (datagrams
# the kernel dropped because a socket's receive buffer was full).
udp_rcvbuf_errors() {
  # shellcheck disable=SC2046,SC2016
  $(on_host "$1") awk '$1 == "Udp:" { if (seen) { for (i = 2; i <= NF; i++) if (h[i] == "RcvbufErrors") print $i; exit }
                                      split($0, h); seen = 1 }' /proc/net/snmp
}

# qdisc_drops NS DEV: packets the tbf qdisc on DEV in namespace NS dropped (queue full).
qdisc_drops() {
  tc -n "$1" -s qdisc show dev "$2" 2>/dev/null | awk '/dropped/ { gsub(",", ""); for (i = 1; i < NF; i++) if ($i ~ /dropped$/) s += $(i + 1) } END { print s + 0 }'
}

# report_udp_drops: drops per host during the switchml run (the namespaces and their counters are
# created with the cluster, and the switchml run comes first): UDP receive-buffer drops, and
# tbf drops on each worker link (worker side + bridge side; includes a few rendezvous packets).
report_udp_drops() {
  local rx="UDP receive-buffer drops during the switchml run:" tbf="tbf queue drops (worker, bridge side):" i
  for ((i = 0; i < WORKERS; i++)); do
    rx+=" w$i $(udp_rcvbuf_errors "w$i")"
    tbf+=" w$i $(qdisc_drops "$NAME-w$i" eth0)+$(qdisc_drops "$NAME-br" "w$i")"
  done
  rx+=" switch $(udp_rcvbuf_errors sw)"
  { echo "$rx"; echo "$tbf"; } | tee "$WORK/udp-drops.txt"
}

# run_backend BACKEND: N ranks; rank 0's progress on the terminal; fails unless all exit 0.
run_backend() {
  local backend=$1 i host store="$WORK/store-$1" pids=() env_extra=()
  local result="$WORK/$backend.json"
  echo "== $backend: $WORKERS processes ($MODE), $EPOCHS epoch(s), batch $BATCH per process, seed $SEED"
  if [[ $backend == switchml ]]; then
    start_switch
    env_extra+=("SWITCHML_CONTROLLER=$CONTROLLER")
    # Generous: 4 ranks and a switch share few cores, a rank may be descheduled for a while.
    env_extra+=("SWITCHML_CALL_TIMEOUT_MS=${SWITCHML_CALL_TIMEOUT_MS:-60000}")
  fi
  [[ -z "$NAME" ]] || env_extra+=("GLOO_SOCKET_IFNAME=eth0")
  for ((i = 0; i < WORKERS; i++)); do : > "$WORK/$backend-rank$i.log"; done
  for ((i = 0; i < WORKERS; i++)); do
    host="w$i"
    # shellcheck disable=SC2046
    $(on_host "$host") timeout -k 10 "$TIMEOUT" env OMP_NUM_THREADS=1 \
        PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "${env_extra[@]}" \
        "$PYTHON" "$TRAIN_PY" train --backend "$backend" --rank "$i" --world-size "$WORKERS" \
        --init-method "file://$store" --epochs "$EPOCHS" --batch-size "$BATCH" --seed "$SEED" \
        --lr "$LR" --max-steps "$MAX_STEPS" --train-subset "$TRAIN_SUBSET" --test-subset "$TEST_SUBSET" \
        --timeout "$((TIMEOUT < 600 ? TIMEOUT : 600))" --out "$result" > "$WORK/$backend-rank$i.log" 2>&1 &
    pids+=($!)
    sml_track $!
  done
  # Rank 0's progress lines, live, until rank 0 exits.
  tail -n +1 -f --pid="${pids[0]}" "$WORK/$backend-rank0.log" &
  local tail_pid=$!
  local failed="" rc
  for ((i = 0; i < WORKERS; i++)); do
    rc=0; wait "${pids[i]}" || rc=$?
    if ((rc == 124)); then failed+=" $i(timed out after ${TIMEOUT}s)"; elif ((rc != 0)); then failed+=" $i(exit $rc)"; fi
  done
  wait "$tail_pid" 2>/dev/null || true
  sml_untrack "${pids[@]}"
  stop_switch
  [[ -z "$NAME" || $backend != switchml ]] || report_udp_drops
  if [[ -n "$failed" ]]; then
    for ((i = 0; i < WORKERS; i++)); do echo "--- $backend rank $i (last lines)"; tail -8 "$WORK/$backend-rank$i.log"; done >&2
    [[ $backend != switchml ]] || { echo "--- switch"; tail -8 "$WORK/switch.log"; } >&2
    echo "$PROG: $backend: ranks$failed failed" >&2
    exit 1
  fi
  [[ -s "$result" ]] || { echo "$PROG: $backend: rank 0 wrote no result $result" >&2; exit 1; }
}

run_backend switchml
SWITCH_CPU=$(cat "$WORK/switch-cpu-s" 2>/dev/null || true)
run_backend gloo

echo "== $MODE: switchml vs gloo, $WORKERS processes, seed $SEED"
mkdir -p "$(dirname "$OUT")"
"$PYTHON" "$TRAIN_PY" compare "$WORK/switchml.json" "$WORK/gloo.json" --every "$EVERY" \
    --label "$MODE" --out "$OUT" ${SWITCH_CPU:+--switch-cpu-s "$SWITCH_CPU"}
