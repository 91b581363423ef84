#!/usr/bin/env bash
# Trains the FashionMNIST CNN (fashion_mnist_ddp.py) with DistributedDataParallel twice from the
# same seed, over torch.distributed backend "switchml" and then "gloo", and prints both side by
# side. See --help and docs/training.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/runner_lib.sh"  # also PROG, REPO
TRAIN_PY="$HERE/fashion_mnist_ddp.py"

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
                     hosts + a switch host, tbf RATE on every worker link (tc units, e.g. 500mbit);
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
while (($#)); do
  case "$1" in
    --workers) WORKERS=${2-}; need_int "$1" "$WORKERS"; shift 2 ;;
    --epochs) EPOCHS=${2-}; need_int "$1" "$EPOCHS"; shift 2 ;;
    --batch-size) BATCH=${2-}; need_int "$1" "$BATCH"; shift 2 ;;
    --max-steps) MAX_STEPS=${2-}; need_int "$1" "$MAX_STEPS"; shift 2 ;;
    --seed) SEED=${2-}; need_int "$1" "$SEED"; shift 2 ;;
    --lr) LR=${2-}; need_num "$1" "$LR"; shift 2 ;;
    --train-subset) TRAIN_SUBSET=${2-}; need_int "$1" "$TRAIN_SUBSET"; shift 2 ;;
    --test-subset) TEST_SUBSET=${2-}; need_int "$1" "$TEST_SUBSET"; shift 2 ;;
    --every) EVERY=${2-}; need_int "$1" "$EVERY"; shift 2 ;;
    --out) OUT=${2-}; [[ -n "$OUT" ]] || die "--out needs a file name"; shift 2 ;;
    --build) BUILD=${2-}; [[ -n "$BUILD" ]] || die "--build needs a directory"; shift 2 ;;
    --python) PYTHON=${2-}; shift 2 ;;
    --cluster) RATE=${2-}; need_rate "$RATE"; shift 2 ;;
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
runner_check_build "import torch, numpy"
[[ -n "$OUT" ]] || OUT="$BUILD/fashion_mnist_ddp.json"

# The work directory (kept on failure and with --keep-logs) and, with --cluster, the cluster.
runner_setup switchml-fmnist fm "cluster $RATE"

# run_backend BACKEND: N ranks; rank 0's progress on the terminal; fails unless all exit 0.
run_backend() {
  local backend=$1 store="$WORK/store-$1"
  local result="$WORK/$backend.json"
  echo "== $backend: $WORKERS processes ($MODE), $EPOCHS epoch(s), batch $BATCH per process, seed $SEED"
  RANK_ENV=()
  if [[ $backend == switchml ]]; then
    runner_start_switch
    RANK_ENV+=("SWITCHML_CONTROLLER=$CONTROLLER")
    # Generous: 4 ranks and a switch share few cores, a rank may be descheduled for a while.
    RANK_ENV+=("SWITCHML_CALL_TIMEOUT_MS=${SWITCHML_CALL_TIMEOUT_MS:-60000}")
  fi
  [[ -z "$NAME" ]] || RANK_ENV+=("GLOO_SOCKET_IFNAME=eth0")
  run_ranks "$WORK/$backend-rank" "$PYTHON" "$TRAIN_PY" train --backend "$backend" --world-size "$WORKERS" \
      --init-method "file://$store" --epochs "$EPOCHS" --batch-size "$BATCH" --seed "$SEED" \
      --lr "$LR" --max-steps "$MAX_STEPS" --train-subset "$TRAIN_SUBSET" --test-subset "$TEST_SUBSET" \
      --timeout "$((TIMEOUT < 600 ? TIMEOUT : 600))" --out "$result"
  runner_stop_switch
  # The switchml run comes first: the cluster's counters since it was created are its own.
  [[ $backend != switchml ]] || report_udp_drops " during the switchml run"
  [[ -z "$RANKS_FAILED" ]] || runner_fail_ranks "$backend" "$WORK/$backend-rank" "$([[ $backend == switchml ]] && echo 1 || echo 0)"
  [[ -s "$result" ]] || { echo "$PROG: $backend: rank 0 wrote no result $result" >&2; exit 1; }
}

run_backend switchml
SWITCH_CPU=$(cat "$WORK/switch-cpu-s" 2>/dev/null || true)
run_backend gloo

echo "== $MODE: switchml vs gloo, $WORKERS processes, seed $SEED"
mkdir -p "$(dirname "$OUT")"
"$PYTHON" "$TRAIN_PY" compare "$WORK/switchml.json" "$WORK/gloo.json" --every "$EVERY" \
    --label "$MODE" --out "$OUT" ${SWITCH_CPU:+--switch-cpu-s "$SWITCH_CPU"}
