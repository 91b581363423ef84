#!/usr/bin/env bash
# The DDP step-time benchmark (ddp_bench.py) in one command: N processes train each model with
# torch DistributedDataParallel over the "switchml" backend and over "gloo" on the same links,
# interleaved, and rank 0 prints median / p90 step time per backend, the speedup and the
# correctness checks. See --help and docs/training.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/runner_lib.sh"  # also PROG, REPO
BENCH_PY="$HERE/ddp_bench.py"

usage() {
  cat <<EOF
Usage: $PROG [OPTIONS]

One command: N processes (one thread each) run real DistributedDataParallel training steps on
synthetic data for each model, with two replicas of the model from the same seed: one over the
"switchml" backend (a fresh \`switchml switch\` on free ports), one over a "gloo" group on the same
ranks and links. Blocks of K steps alternate switchml, gloo, switchml, gloo, ... Prints rank
0's progress, then per model: median and p90 step time of each backend, the speedup (gloo
median / switchml median), the all-reduce volume per step, and the checks (every rank holds the
same parameters; on the same weights and data switchml's reduced gradients equal gloo's within
--grad-tolerance; how far the final models differ). Writes JSON.
Builds nothing: needs BUILD/switchml and BUILD/python/switchml (ninja -C BUILD
switchml_cli switchml_torch_ext; scripts/python-env.sh makes the venv).

Options:
  --workers N        processes (default 4)
  --models LIST      comma separated, from: cnn, mlp, resnet, transformer (default: all four;
                     \`ddp_bench.py --list-models\` describes them)
  --steps S          timed steps per backend and model (default 50)
  --warmup W         untimed steps per backend and model first (default 3)
  --block K          steps of one backend before switching to the other (default 5)
  --quick            --warmup 2 --steps 4 --block 2 (a smoke run)
  --seed S           seed of the weights and the synthetic data (default 1)
  --lr LR            SGD learning rate, momentum 0.9 (default 0.01)
  --grad-tolerance T  max ||g_switchml - g_gloo|| / ||g_gloo|| of the reduced gradients on the
                     same weights and data (default 1e-4)
  --param-tolerance T  max ||p_switchml - p_gloo|| / ||p_gloo - p_initial|| after the run
                     (default 0: reported, not checked; see ddp_bench.py --help)
  --json FILE        result JSON (default: BUILD/ddp_bench.json)
  --build DIR        build directory (default: $REPO/build)
  --python PATH      interpreter that imports torch (default: the project venv, REPO/.venv)
  --cluster RATE     run on the emulated cluster (scripts/cluster.sh, needs root): N worker
                     hosts + a switch host, tbf RATE on every worker link (tc units, e.g.
                     500mbit); the switch runs in the switch host, rank i in worker host i; both
                     backends' traffic crosses the shaped links (GLOO_SOCKET_IFNAME=eth0), and
                     each rank counts its eth0 bytes per step. Torn down on exit, even after a
                     failure.
  --timeout S        limit for the whole run, in seconds (default 1800)
  --keep-logs        keep the logs directory even after success
  --inject-fault F   testing aid, passed to ddp_bench.py: scale-grad makes the switchml replica's
                     gradients wrong (x1.5), so the gradient check must fail (exit 1)
  -h, --help         this text

Environment: SWITCHML_* settings (README of integrations/pytorch) pass through to the ranks.
Exit status: 0 when every model ran and passed its checks; 1 when a check failed (the JSON is
still written) or a rank failed or timed out; 2 for bad arguments.
EOF
}

WORKERS=4 MODELS="cnn,mlp,resnet,transformer" STEPS=50 WARMUP=3 BLOCK=5 SEED=1 LR=0.01 GRAD_TOL=1e-4 PARAM_TOL=0
FAULT=none JSON="" BUILD="$REPO/build" PYTHON="${SWITCHML_VENV:-$REPO/.venv}/bin/python" RATE="" TIMEOUT=1800 KEEP=0
while (($#)); do
  case "$1" in
    --workers) sml_need_value "$@"; WORKERS=$2; need_int "$1" "$WORKERS"; shift 2 ;;
    --models) sml_need_value "$@"; MODELS=$2; shift 2 ;;
    --steps) sml_need_value "$@"; STEPS=$2; need_int "$1" "$STEPS"; shift 2 ;;
    --warmup) sml_need_value "$@"; WARMUP=$2; need_int "$1" "$WARMUP"; shift 2 ;;
    --block) sml_need_value "$@"; BLOCK=$2; need_int "$1" "$BLOCK"; shift 2 ;;
    --quick) WARMUP=2 STEPS=4 BLOCK=2; shift ;;
    --seed) sml_need_value "$@"; SEED=$2; need_int "$1" "$SEED"; shift 2 ;;
    --lr) sml_need_value "$@"; LR=$2; need_num "$1" "$LR"; shift 2 ;;
    --grad-tolerance) sml_need_value "$@"; GRAD_TOL=$2; need_num "$1" "$GRAD_TOL"; shift 2 ;;
    --param-tolerance) sml_need_value "$@"; PARAM_TOL=$2; need_num "$1" "$PARAM_TOL"; shift 2 ;;
    --json) sml_need_value "$@"; JSON=$2; shift 2 ;;
    --build) sml_need_value "$@"; BUILD=$2; shift 2 ;;
    --python) sml_need_value "$@"; PYTHON=$2; shift 2 ;;
    --cluster) sml_need_value "$@"; RATE=$2; need_rate "$RATE"; shift 2 ;;
    --timeout) sml_need_value "$@"; TIMEOUT=$2; need_int "$1" "$TIMEOUT"; shift 2 ;;
    --keep-logs) KEEP=1; shift ;;
    --inject-fault) sml_need_value "$@"; FAULT=$2; [[ "$FAULT" == none || "$FAULT" == scale-grad ]] || die "--inject-fault must be none or scale-grad, got '$FAULT'"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
((WORKERS >= 1)) || die "--workers must be >= 1, got $WORKERS"
((STEPS >= 1)) || die "--steps must be >= 1, got $STEPS"
((WARMUP >= 1)) || die "--warmup must be >= 1, got $WARMUP (DDP rebuilds its buckets after the first step)"
((BLOCK >= 1)) || die "--block must be >= 1, got $BLOCK"
((TIMEOUT >= 1)) || die "--timeout must be >= 1, got $TIMEOUT"
IFS=',' read -r -a model_list <<<"$MODELS"
((${#model_list[@]})) || die "--models needs at least one model"
for m in "${model_list[@]}"; do
  case "$m" in cnn|mlp|resnet|transformer) ;; *) die "--models: unknown model '$m' (cnn, mlp, resnet, transformer)" ;; esac
done
runner_check_build "import torch"
[[ -n "$JSON" ]] || JSON="$BUILD/ddp_bench.json"
mkdir -p "$(dirname "$JSON")" || die "--json: cannot create the directory of '$JSON'"
JSON=$(cd "$(dirname "$JSON")" && pwd)/$(basename "$JSON")
rm -f "$JSON"  # no stale result from an earlier run
export PYTHON  # json_get (scripts/lib.sh) reads the switch's ready file with it

# The work directory (kept on failure and with --keep-logs) and, with --cluster, the cluster.
runner_setup switchml-ddpbench ddp "emulated cluster, $RATE worker links"

echo "== ddp_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $MODE;" \
     "$WORKERS processes; models $MODELS; $WARMUP warm-up + $STEPS timed steps per backend, blocks of $BLOCK"
runner_start_switch

RANK_ENV=("SWITCHML_CONTROLLER=$CONTROLLER"
          # Generous: N ranks and a switch share few cores, a rank may be descheduled for a while.
          "SWITCHML_CALL_TIMEOUT_MS=${SWITCHML_CALL_TIMEOUT_MS:-60000}")
iface=()
if [[ -n "$NAME" ]]; then
  RANK_ENV+=("GLOO_SOCKET_IFNAME=eth0")
  iface=(--iface eth0)
fi
# Exit 3: a check failed (the report is still written).
run_ranks --soft 3 "$WORK/rank" "$PYTHON" "$BENCH_PY" --world-size "$WORKERS" --init-method "file://$WORK/store" \
    --models "$MODELS" --warmup "$WARMUP" --steps "$STEPS" --block "$BLOCK" --seed "$SEED" --lr "$LR" \
    --grad-tolerance "$GRAD_TOL" --param-tolerance "$PARAM_TOL" --timeout "$((TIMEOUT < 600 ? TIMEOUT : 600))" \
    --label "$MODE" "${iface[@]}" --inject-fault "$FAULT" --json "$JSON"
runner_stop_switch
report_udp_drops ""
[[ -z "$RANKS_FAILED" ]] || runner_fail_ranks "" "$WORK/rank" 1
[[ -s "$JSON" ]] || { echo "$PROG: rank 0 wrote no result" >&2; exit 1; }
if [[ -n "$RANKS_SOFT" ]]; then
  echo "$PROG: a check failed (ranks$RANKS_SOFT exited 3; see the table above and $JSON)" >&2
  exit 1
fi