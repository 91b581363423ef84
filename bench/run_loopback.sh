#!/usr/bin/env bash
# bench/run_loopback.sh — the `loopback` benchmark scenario (docs/benchmarks.md): every rank and
# the switch on this host over 127.0.0.1, no namespaces, no rate limits. For each worker count
# (default 2 and 4) and each backend it runs allreduce_perf over the same sizes and inputs,
# prints each table, then a side-by-side summary (SwitchML vs Gloo ring vs MPI_Allreduce), and
# writes JSON. Exit status: 0 only if every run finished and every element was right.
#
#   bench/run_loopback.sh                    # full: 4 KiB .. 64 MiB float32, n = 2 and 4
#   bench/run_loopback.sh --quick            # small sizes, for CI (ctest -L bench)
#   bench/run_loopback.sh --workers 4 --backends switchml,gloo --max-bytes 16MiB
#
# Backends: switchml (a fresh `switchml switch` per run), gloo (ring, FileStore rendezvous in a
# fresh directory), mpi (Open MPI, `--mca btl tcp,self`, defaults), mpi-tuned (the same plus the
# tuned flags of ENVIRONMENT.md). Each rank is its own process with explicit --rank/--workers
# (mpi: from mpirun), so the same commands run inside namespaces given addresses.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
PERF="$root/build/allreduce_perf"
SWITCHML="$root/build/switchml"
MPIRUN="$(command -v mpirun.openmpi || true)"
OUT=""
WORKERS="2 4"
BACKENDS="switchml,gloo,mpi,mpi-tuned"
MIN=4KiB MAX=64MiB FACTOR=4 ITERS=5 WARMUP=1 TYPE=float32 TIMEOUT=900
EXTRA=()

usage() {
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  cat <<EOF
Options:
  --quick               4 KiB .. 256 KiB, 3 iterations: a smoke run of the whole harness (< 60 s)
  --workers "2 4"       worker counts (space or comma separated)
  --backends LIST       comma separated: switchml,gloo,mpi,mpi-tuned (default: all four)
  --min-bytes S --max-bytes S --step-factor F --iters N --warmup N --type float32|int32
  --timeout S           kill a run after S seconds (default $TIMEOUT)
  --perf BIN --switchml BIN --mpirun BIN   binaries (default: build/allreduce_perf, build/switchml)
  --out DIR             JSON, logs and summary go here (default: a new directory under /tmp)
  --perf-arg ARG        extra flag for every allreduce_perf rank (repeatable; also --perf-arg=ARG)
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) MIN=4KiB MAX=256KiB FACTOR=4 ITERS=3 WARMUP=1 TIMEOUT=60 ;;
    --workers) WORKERS="${2//,/ }"; shift ;;
    --backends) BACKENDS="$2"; shift ;;
    --min-bytes) MIN="$2"; shift ;;
    --max-bytes) MAX="$2"; shift ;;
    --step-factor) FACTOR="$2"; shift ;;
    --iters) ITERS="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --type) TYPE="$2"; shift ;;
    --timeout) TIMEOUT="$2"; shift ;;
    --perf) PERF="$2"; shift ;;
    --switchml) SWITCHML="$2"; shift ;;
    --mpirun) MPIRUN="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --perf-arg) EXTRA+=("$2"); shift ;;
    --perf-arg=*) EXTRA+=("${1#--perf-arg=}") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_loopback.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

[ -x "$PERF" ] || { echo "run_loopback.sh: allreduce_perf not found at '$PERF' (build it or pass --perf)" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-bench-loopback.XXXXXX)"
mkdir -p "$OUT/logs"
rm -f "$OUT"/*.json

common=(-b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -d "$TYPE" --iface lo "${EXTRA[@]}")
mpi_base=(--allow-run-as-root --oversubscribe --bind-to none --mca btl tcp,self)
# ENVIRONMENT.md: Open MPI's TCP PUT protocol and busy polling cost it half its bandwidth here.
mpi_tuned=(--mca btl_tcp_flags send,inplace,need-ack,need-csum --mca mpi_yield_when_idle 1
           --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4)

echo "# loopback scenario: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "workers {${WORKERS}}, backends {${BACKENDS}}, $MIN..$MAX x$FACTOR, $ITERS iterations, output in $OUT"

failed=()
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

# Waits for the rank processes in "$@" (pids); returns non-zero if any failed.
wait_ranks() {
  local rc=0 p
  for p in "$@"; do wait "$p" || rc=1; done
  return $rc
}

run_switchml() {  # n
  local n=$1 tag="switchml-n$1" ready sw port r rc=0 t0
  ready="$OUT/logs/$tag.switch.ready"
  rm -f "$ready"
  [ -x "$SWITCHML" ] || { echo "run_loopback.sh: switchml CLI not found at '$SWITCHML' (pass --switchml)" >&2; return 1; }
  "$SWITCHML" switch --bind 127.0.0.1 --port 0 --controller-port 0 --ready-file "$ready" \
      >"$OUT/logs/$tag.switch.log" 2>&1 &
  sw=$!
  pids+=("$sw")
  t0=$SECONDS
  until [ -s "$ready" ] && grep -q controller_port "$ready"; do
    if ! kill -0 "$sw" 2>/dev/null || [ $((SECONDS - t0)) -gt 20 ]; then
      echo "run_loopback.sh: the switch did not start:" >&2; tail -5 "$OUT/logs/$tag.switch.log" >&2
      kill "$sw" 2>/dev/null; return 1
    fi
    sleep 0.05
  done
  port="$(grep -o '"controller_port"[^0-9]*[0-9]*' "$ready" | grep -o '[0-9]*$')"
  local ranks=()
  for ((r = 0; r < n; r++)); do
    timeout "$TIMEOUT" "$PERF" --backend switchml --rank "$r" --workers "$n" --controller "127.0.0.1:$port" \
        --label switchml --json "$OUT/$tag.json" "${common[@]}" >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    pids+=("$!")
  done
  wait_ranks "${ranks[@]}" || rc=1
  kill "$sw" 2>/dev/null; wait "$sw" 2>/dev/null
  cat "$OUT/logs/$tag.rank0.log"
  [ $rc -eq 0 ] || for ((r = 1; r < n; r++)); do tail -3 "$OUT/logs/$tag.rank$r.log"; done
  return $rc
}

run_gloo() {  # n
  local n=$1 tag="gloo-n$1" rdv r rc=0 ranks=()
  rdv="$(mktemp -d "$OUT/logs/gloo-rendezvous.XXXXXX")"
  for ((r = 0; r < n; r++)); do
    timeout "$TIMEOUT" "$PERF" --backend gloo --rank "$r" --workers "$n" --rendezvous-dir "$rdv" \
        --label gloo --json "$OUT/$tag.json" "${common[@]}" >"$OUT/logs/$tag.rank$r.log" 2>&1 &
    ranks+=("$!")
    pids+=("$!")
  done
  wait_ranks "${ranks[@]}" || rc=1
  rm -rf "$rdv"
  cat "$OUT/logs/$tag.rank0.log"
  [ $rc -eq 0 ] || for ((r = 1; r < n; r++)); do tail -3 "$OUT/logs/$tag.rank$r.log"; done
  return $rc
}

run_mpi() {  # n label flags...
  local n=$1 label=$2 tag="$2-n$1" rc=0
  shift 2
  [ -n "$MPIRUN" ] || { echo "run_loopback.sh: mpirun.openmpi not found (install openmpi-bin)" >&2; return 1; }
  timeout "$TIMEOUT" "$MPIRUN" "${mpi_base[@]}" "$@" -np "$n" "$PERF" --backend mpi --label "$label" \
      --json "$OUT/$tag.json" "${common[@]}" >"$OUT/logs/$tag.log" 2>&1 || rc=1
  cat "$OUT/logs/$tag.log"
  return $rc
}

IFS=',' read -r -a backend_list <<<"$BACKENDS"
for n in $WORKERS; do
  for b in "${backend_list[@]}"; do
    echo
    echo "## $b, n = $n"
    case "$b" in
      switchml) run_switchml "$n" ;;
      gloo) run_gloo "$n" ;;
      mpi) run_mpi "$n" mpi ;;
      mpi-tuned) run_mpi "$n" mpi-tuned "${mpi_tuned[@]}" ;;
      *) echo "run_loopback.sh: unknown backend '$b' (switchml, gloo, mpi, mpi-tuned)" >&2; false ;;
    esac || { failed+=("$b n=$n"); echo "## FAILED: $b, n = $n (logs in $OUT/logs)"; }
  done
done

files=()
for b in "${backend_list[@]}"; do
  for n in $WORKERS; do [ -s "$OUT/$b-n$n.json" ] && files+=("$OUT/$b-n$n.json"); done
done
echo
if [ ${#files[@]} -gt 0 ]; then
  "$PERF" summarize --json "$OUT/summary.json" "${files[@]}" || failed+=("summary")
fi
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "# loopback: PASS (${#files[@]} runs, every element verified; JSON in $OUT)"
  exit 0
fi
echo "# loopback: FAIL: ${failed[*]} (logs in $OUT/logs)"
exit 1
