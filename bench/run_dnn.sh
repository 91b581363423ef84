#!/usr/bin/env bash
# bench/run_dnn.sh — the DNN benchmark (docs/dnn-benchmark.md) in one command: for
# each model, bucket size and backend it starts n dnn_bench ranks (SwitchML: behind a fresh
# `switchml switch`; Gloo: a fresh FileStore rendezvous), each simulating the model's backward
# pass with one asynchronous all-reduce per layer (or per DDP-style bucket), then prints a table
# model | backend | iteration time | exposed communication | speedup vs Gloo and writes JSON.
# Exit status: 0 only if every run finished and every rank's reduced gradients were right.
#
#   bench/run_dnn.sh                                   # loopback, n = 4, all three models
#   bench/run_dnn.sh --cluster 500mbit --workers 4     # emulated cluster (root): switch and each
#                                                      # rank in its own network namespace
#   bench/run_dnn.sh --models resnet50 --bucket-mib "0 25" --compute-ms 200
#
# --cluster RATE creates a cluster with scripts/cluster.sh (name dnn<pid>, links rate-limited to
# RATE), runs the switch in its switch namespace and rank i in worker namespace i (SwitchML binds
# to the worker's address; Gloo binds its TCP transport to it and meets the others through a
# FileStore directory, which all namespaces see), and removes the cluster on exit, whatever
# happens.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
BENCH="$root/build/dnn_bench"
SWITCHML="$root/build/switchml"
CLUSTER_SH="$root/scripts/cluster.sh"
RATE=""
WORKERS=4
MODELS="resnet50,vgg19,bert-base"
BACKENDS="switchml,gloo"
BUCKETS="0"
COMPUTE_MS=100
ITERATIONS=3
WARMUP=1
TIMEOUT=900
OUT=""
EXTRA=()

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF

Options:
  --cluster RATE       run on the emulated cluster with worker links limited to RATE (tc units,
                       e.g. 500mbit); needs root. Default: loopback (127.0.0.1, no limits)
  --workers N          ranks per run (default $WORKERS)
  --models LIST        comma separated: resnet50,vgg19,bert-base (default: all three)
  --backends LIST      comma separated: switchml,gloo (default: both)
  --bucket-mib "0 25"  bucket sizes to run, space or comma separated; 0 = one all-reduce per layer
                       (default $BUCKETS)
  --compute-ms MS      backward compute per iteration, spread over layers by FLOPs (default $COMPUTE_MS)
  --iterations N --warmup N   timed and untimed iterations per run (default $ITERATIONS and $WARMUP)
  --quick              1 warm-up + 1 timed iteration
  --timeout S          kill a run after S seconds (default $TIMEOUT)
  --bench BIN --switchml BIN --cluster-sh PATH   binaries (default: build/dnn_bench, build/switchml,
                       scripts/cluster.sh)
  --out DIR            JSON (one per run, summary.json), summary.md and logs (default: new /tmp dir)
  --bench-arg ARG      extra flag for every dnn_bench rank (repeatable; also --bench-arg=ARG),
                       e.g. --bench-arg=--layer-times=FILE or --bench-arg=--threads=2
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) sml_need_value "$@"; RATE="$2"; shift ;;
    --workers) sml_need_value "$@"; WORKERS="$2"; shift ;;
    --models) sml_need_value "$@"; MODELS="$2"; shift ;;
    --backends) sml_need_value "$@"; BACKENDS="$2"; shift ;;
    --bucket-mib) sml_need_value "$@"; BUCKETS="${2//,/ }"; shift ;;
    --compute-ms) sml_need_value "$@"; COMPUTE_MS="$2"; shift ;;
    --iterations) sml_need_value "$@"; ITERATIONS="$2"; shift ;;
    --warmup) sml_need_value "$@"; WARMUP="$2"; shift ;;
    --quick) ITERATIONS=1; WARMUP=1 ;;
    --timeout) sml_need_value "$@"; TIMEOUT="$2"; shift ;;
    --bench) sml_need_value "$@"; BENCH="$2"; shift ;;
    --switchml) sml_need_value "$@"; SWITCHML="$2"; shift ;;
    --cluster-sh) sml_need_value "$@"; CLUSTER_SH="$2"; shift ;;
    --out) sml_need_value "$@"; OUT="$2"; shift ;;
    --bench-arg) sml_need_value "$@"; EXTRA+=("$2"); shift ;;
    --bench-arg=*) EXTRA+=("${1#--bench-arg=}") ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$WORKERS'"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds, got '$TIMEOUT'"
[ -x "$BENCH" ] || die "dnn_bench not found at '$BENCH' (build it or pass --bench)"
IFS=',' read -r -a model_list <<<"$MODELS"
IFS=',' read -r -a backend_list <<<"$BACKENDS"
for m in "${model_list[@]}"; do
  case "$m" in resnet50|vgg19|bert-base) ;; *) die "--models: unknown model '$m' (resnet50, vgg19, bert-base)" ;; esac
done
for b in "${backend_list[@]}"; do
  case "$b" in
    switchml) [ -x "$SWITCHML" ] || die "switchml CLI not found at '$SWITCHML' (pass --switchml)" ;;
    gloo) ;;
    *) die "--backends: unknown backend '$b' (switchml, gloo)" ;;
  esac
done
for bk in $BUCKETS; do [[ "$bk" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--bucket-mib: not a size in MiB: '$bk'"; done

[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-dnn.XXXXXX)"
mkdir -p "$OUT/logs"
rm -f "$OUT"/*.json

NAME=""
# At exit: the processes of the runs stopped (with their descendants), then the cluster removed.
sml_exit_trap
sml_at_exit 'if [ -n "$NAME" ]; then "$CLUSTER_SH" down --name "$NAME" >/dev/null 2>&1 || true; fi'

# Where things run: on loopback every host is this one; on the cluster a host is a namespace.
SWITCH_IP=127.0.0.1
WORKER_IPS=()
on_host() {  # on_host HOST CMD...: exec CMD on HOST (sw or w<i>)
  local h=$1
  shift
  if [ -n "$NAME" ]; then exec "$CLUSTER_SH" exec --name "$NAME" --host "$h" -- "$@"; else exec "$@"; fi
}
on_switch_host() { on_host sw "$@"; }
if [ -n "$RATE" ]; then
  [ "$(id -u)" = 0 ] || die "--cluster needs root (network namespaces)"
  [ -x "$CLUSTER_SH" ] || die "cluster.sh not found at '$CLUSTER_SH' (pass --cluster-sh)"
  NAME="dnn$$"
  echo "# creating cluster $NAME: $WORKERS workers, links $RATE"
  "$CLUSTER_SH" up --name "$NAME" --workers "$WORKERS" --rate "$RATE" >"$OUT/logs/cluster.log" 2>&1 ||
    { cat "$OUT/logs/cluster.log" >&2; die "cluster.sh up failed (see above)"; }
  # shellcheck disable=SC1090
  source "/tmp/switchml-cluster-$NAME.env"
  SWITCH_IP=$CLUSTER_SWITCH_IP
  read -r -a WORKER_IPS <<<"$CLUSTER_WORKER_IPS"
else
  for ((r = 0; r < WORKERS; r++)); do WORKER_IPS+=(127.0.0.1); done
fi

scenario="loopback (127.0.0.1)"
[ -z "$RATE" ] || scenario="emulated cluster $NAME, worker links $RATE"
echo "# dnn benchmark: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$scenario, n = $WORKERS, models {$MODELS}, backends {$BACKENDS}, buckets {$BUCKETS} MiB," \
     "backward $COMPUTE_MS ms, $WARMUP warm-up + $ITERATIONS timed iterations; output in $OUT"

common=(--workers "$WORKERS" --compute-ms "$COMPUTE_MS" --iterations "$ITERATIONS" --warmup "$WARMUP"
        --timeout-ms "$((TIMEOUT * 1000))" "${EXTRA[@]}")

# wait_ranks TAG PID...: waits for the rank processes; prints rank 0's log; non-zero if any failed.
wait_ranks() {
  local tag=$1 rc=0 p r
  shift
  for p in "$@"; do wait "$p" || rc=1; done
  cat "$OUT/logs/$tag.rank0.log"
  if [ $rc -ne 0 ]; then
    for ((r = 1; r < WORKERS; r++)); do echo "--- rank $r:"; tail -3 "$OUT/logs/$tag.rank$r.log"; done
  fi
  return $rc
}

run_switchml() {  # TAG MODEL BUCKET
  local tag=$1 model=$2 bucket=$3 port r ranks=() rc=0
  sml_start_switch --bind "$SWITCH_IP" --via on_switch_host --ready "$OUT/logs/$tag.switch.ready" \
      --log "$OUT/logs/$tag.switch.log" --deadline 20 || return 1
  port=$CTL_PORT
  for ((r = 0; r < WORKERS; r++)); do
    local bind=()
    [ -z "$NAME" ] || bind=(--bind-ip "${WORKER_IPS[$r]}")
    (on_host "w$r" timeout "$TIMEOUT" "$BENCH" --model "$model" --backend switchml --rank "$r" \
        --controller "$SWITCH_IP:$port" "${bind[@]}" --bucket-mib "$bucket" --json "$OUT/$tag.json" "${common[@]}") \
        >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    sml_track "$!"
  done
  wait_ranks "$tag" "${ranks[@]}" || rc=1
  sml_stop_switch 10 || true  # SIGTERM: it prints its counters
  return $rc
}

run_gloo() {  # TAG MODEL BUCKET
  local tag=$1 model=$2 bucket=$3 rdv r ranks=() rc=0
  rdv="$(mktemp -d "$OUT/logs/gloo-rendezvous.XXXXXX")"
  for ((r = 0; r < WORKERS; r++)); do
    (on_host "w$r" timeout "$TIMEOUT" "$BENCH" --model "$model" --backend gloo --rank "$r" \
        --rendezvous-dir "$rdv" --host "${WORKER_IPS[$r]}" --bucket-mib "$bucket" --json "$OUT/$tag.json" \
        "${common[@]}") >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    sml_track "$!"
  done
  wait_ranks "$tag" "${ranks[@]}" || rc=1
  rm -rf "$rdv"
  return $rc
}

failed=()
files=()
for model in "${model_list[@]}"; do
  for bucket in $BUCKETS; do
    for b in "${backend_list[@]}"; do
      tag="$model-$b-n$WORKERS-b$bucket"
      echo
      echo "## $model, $b, n = $WORKERS, buckets ${bucket} MiB ($(date -u +%H:%M:%S))"
      if "run_$b" "$tag" "$model" "$bucket"; then :; else
        failed+=("$tag")
        echo "## FAILED: $tag (logs in $OUT/logs)"
      fi
      [ -s "$OUT/$tag.json" ] && files+=("$OUT/$tag.json")
    done
  done
done

echo
echo "# $scenario, n = $WORKERS, backward compute $COMPUTE_MS ms per iteration (mean of $ITERATIONS timed iterations;" \
     "each the slowest rank's)"
if [ ${#files[@]} -gt 0 ]; then
  "$BENCH" summarize --json "$OUT/summary.json" "${files[@]}" | tee "$OUT/summary.md" || failed+=("summary")
fi
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "# dnn benchmark: PASS (${#files[@]} runs, reduced gradients verified on every rank; JSON in $OUT)"
  exit 0
fi
echo "# dnn benchmark: FAIL: ${failed[*]} (logs in $OUT/logs)"
exit 1
