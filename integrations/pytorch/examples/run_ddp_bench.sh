#!/usr/bin/env bash
# The DDP step-time benchmark (ddp_bench.py) in one command: N processes train each model with
# torch DistributedDataParallel over the "switchml" backend and over "gloo" on the same links,
# interleaved, and rank 0 prints median / p90 step time per backend, the speedup and the
# correctness checks. See --help and docs/training.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh"

PROG=$(basename "$0")
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$SML_ROOT
BENCH_PY="$HERE/ddp_bench.py"
CLUSTER_SH="$REPO/scripts/cluster.sh"

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
need_int() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a non-negative integer, got '$2'"; }
need_num() { [[ "$2" =~ ^[0-9]*\.?[0-9]+([eE]-?[0-9]+)?$ ]] || die "$1 must be a positive number, got '$2'"; }
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
    --cluster) sml_need_value "$@"; RATE=$2; [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] || die "--cluster needs a tc rate such as 500mbit, got '$RATE'"; shift 2 ;;
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
[[ -d "$BUILD" ]] || die "--build: directory '$BUILD' does not exist"
BUILD=$(cd "$BUILD" && pwd)
[[ -d "$BUILD/python/switchml" ]] || die "$BUILD/python/switchml does not exist: build it first (ninja -C $BUILD switchml_torch_ext switchml_cli), or pass --build DIR"
[[ -x "$BUILD/switchml" ]] || die "$BUILD/switchml does not exist: build it first (ninja -C $BUILD switchml_cli), or pass --build DIR"
"$PYTHON" -c "import torch" 2>/dev/null || die "--python $PYTHON cannot import torch (scripts/python-env.sh makes the project venv that can)"
[[ -n "$JSON" ]] || JSON="$BUILD/ddp_bench.json"
if [[ -n "$RATE" ]]; then
  [[ $(id -u) == 0 ]] || die "--cluster needs root (network namespaces)"
  [[ -x "$CLUSTER_SH" ]] || die "$CLUSTER_SH not found"
fi
mkdir -p "$(dirname "$JSON")" || die "--json: cannot create the directory of '$JSON'"
JSON=$(cd "$(dirname "$JSON")" && pwd)/$(basename "$JSON")
rm -f "$JSON"  # no stale result from an earlier run
export PYTHON  # json_get (scripts/lib.sh) reads the switch's ready file with it

# The work directory is kept on failure and with --keep-logs (KEEP=1). At exit the switch and the
# ranks (with their `timeout` processes) are stopped, then the cluster is torn down.
sml_work_dir switchml-ddpbench
NAME=""       # cluster name prefix once created
SWITCHML="$BUILD/switchml"
# shellcheck disable=SC2016  # expanded at exit, by eval
sml_at_exit 'if [[ -n "$NAME" ]]; then "$CLUSTER_SH" down --name "$NAME" >/dev/null 2>&1 || echo "$PROG: could not tear down cluster $NAME (run: $CLUSTER_SH down --name $NAME)" >&2; fi'

# on_host HOST: the command prefix that runs a command in cluster host HOST (nothing on loopback).
on_host() { if [[ -n "$NAME" ]]; then echo "$CLUSTER_SH exec --name $NAME --host $1 --"; fi; }
# in_sw CMD...: execs CMD in the switch host (on loopback: here).
# shellcheck disable=SC2046
in_sw() { exec $(on_host sw) "$@"; }

if [[ -n "$RATE" ]]; then
  NAME="ddp$$"
  echo "== emulated cluster $NAME: $WORKERS worker hosts + switch host, $RATE per worker link"
  "$CLUSTER_SH" up --name "$NAME" --workers "$WORKERS" --rate "$RATE" > "$WORK/cluster.log" 2>&1 \
    || { cat "$WORK/cluster.log" >&2; die "scripts/cluster.sh up failed"; }
  # shellcheck disable=SC1090
  source "/tmp/switchml-cluster-$NAME.env"
  SWITCH_IP=$CLUSTER_SWITCH_IP
  MODE="emulated cluster, $RATE worker links"
else
  SWITCH_IP=127.0.0.1
  MODE="loopback"
fi

# udp_rcvbuf_errors HOST: the UDP RcvbufErrors counter of a cluster host's namespace.
udp_rcvbuf_errors() {
  # shellcheck disable=SC2046,SC2016
  $(on_host "$1") awk '$1 == "Udp:" { if (seen) { for (i = 2; i <= NF; i++) if (h[i] == "RcvbufErrors") print $i; exit }
                                      split($0, h); seen = 1 }' /proc/net/snmp
}
# qdisc_drops NS DEV: packets the tbf qdisc on DEV in namespace NS dropped (queue full).
qdisc_drops() {
  tc -n "$1" -s qdisc show dev "$2" 2>/dev/null | awk '/dropped/ { gsub(",", ""); for (i = 1; i < NF; i++) if ($i ~ /dropped$/) s += $(i + 1) } END { print s + 0 }'
}

echo "== ddp_bench: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $MODE;" \
     "$WORKERS processes; models $MODELS; $WARMUP warm-up + $STEPS timed steps per backend, blocks of $BLOCK"
sml_start_switch --bind "$SWITCH_IP" --via in_sw --ready "$WORK/switch-ready.json" --deadline 30 -- \
    --counters-json "$WORK/switch-counters.json" || die "the switch did not start"
CONTROLLER="$SWITCH_IP:$CTL_PORT"

env_extra=("SWITCHML_CONTROLLER=$CONTROLLER"
           # Generous: N ranks and a switch share few cores, a rank may be descheduled for a while.
           "SWITCHML_CALL_TIMEOUT_MS=${SWITCHML_CALL_TIMEOUT_MS:-60000}")
iface=()
if [[ -n "$NAME" ]]; then
  env_extra+=("GLOO_SOCKET_IFNAME=eth0")
  iface=(--iface eth0)
fi
pids=()
for ((i = 0; i < WORKERS; i++)); do : > "$WORK/rank$i.log"; done
for ((i = 0; i < WORKERS; i++)); do
  # shellcheck disable=SC2046
  $(on_host "w$i") timeout -k 10 "$TIMEOUT" env OMP_NUM_THREADS=1 \
      PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "${env_extra[@]}" \
      "$PYTHON" "$BENCH_PY" --rank "$i" --world-size "$WORKERS" --init-method "file://$WORK/store" \
      --models "$MODELS" --warmup "$WARMUP" --steps "$STEPS" --block "$BLOCK" --seed "$SEED" --lr "$LR" \
      --grad-tolerance "$GRAD_TOL" --param-tolerance "$PARAM_TOL" --timeout "$((TIMEOUT < 600 ? TIMEOUT : 600))" --label "$MODE" "${iface[@]}" --inject-fault "$FAULT" \
      --json "$JSON" > "$WORK/rank$i.log" 2>&1 &
  pids+=($!)
  sml_track $!
done
# Rank 0's progress lines, live, until rank 0 exits.
tail -n +1 -f --pid="${pids[0]}" "$WORK/rank0.log" &
tail_pid=$!
failed="" checks_failed=""
for ((i = 0; i < WORKERS; i++)); do
  rc=0; wait "${pids[i]}" || rc=$?
  if ((rc == 124)); then failed+=" $i(timed out after ${TIMEOUT}s)"
  elif ((rc == 3)); then checks_failed+=" $i"
  elif ((rc != 0)); then failed+=" $i(exit $rc)"; fi
done
wait "$tail_pid" 2>/dev/null || true
sml_untrack "${pids[@]}"
sml_stop_switch 10 || true
if [[ -n "$NAME" ]]; then
  rx="UDP receive-buffer drops:" tbf="tbf queue drops (worker, bridge side):"
  for ((i = 0; i < WORKERS; i++)); do
    rx+=" w$i $(udp_rcvbuf_errors "w$i")"
    tbf+=" w$i $(qdisc_drops "$NAME-w$i" eth0)+$(qdisc_drops "$NAME-br" "w$i")"
  done
  rx+=" switch $(udp_rcvbuf_errors sw)"
  echo "$rx"; echo "$tbf"
fi
if [[ -n "$failed" ]]; then
  for ((i = 0; i < WORKERS; i++)); do echo "--- rank $i (last lines)"; tail -8 "$WORK/rank$i.log"; done >&2
  { echo "--- switch"; tail -8 "$WORK/switch.log"; } >&2 2>/dev/null || true
  echo "$PROG: ranks$failed failed" >&2
  exit 1
fi
[[ -s "$JSON" ]] || { echo "$PROG: rank 0 wrote no result" >&2; exit 1; }
if [[ -n "$checks_failed" ]]; then
  echo "$PROG: a check failed (ranks$checks_failed exited 3; see the table above and $JSON)" >&2
  exit 1
fi