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
# tuned flags of docs/benchmarks.md#measured-on-the-development-machine). Each rank is its own
# process with explicit --rank/--workers (mpi: from mpirun), so the same commands run inside
# namespaces given addresses.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=bench/scenario_options.sh
source "$here/scenario_options.sh"  # scenario_option: the shared command-line options
WORKERS="2 4"
BACKENDS="switchml,gloo,mpi,mpi-tuned"
MIN=4KiB MAX=64MiB FACTOR=4 ITERS=5 WARMUP=1 TYPE=float32 TIMEOUT=900
ELEMENTS=1024  # lo's MTU is 64 KiB: jumbo payloads (size code 5) fit

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF
Options:
  --quick               4 KiB .. 256 KiB, 3 iterations: a smoke run of the whole harness (< 60 s)
  --workers "2 4"       worker counts (space or comma separated)
  --backends LIST       comma separated: switchml,gloo,mpi,mpi-tuned (default: all four)
  --min-bytes S --max-bytes S --step-factor F --iters N --warmup N --type float32|int32
  --timeout S           kill a run after S seconds (default $TIMEOUT)
  --elements-per-packet N   SwitchML packet payload: 64, 256, 512 or 1024 elements (default
                        $ELEMENTS: lo's 64 KiB MTU carries jumbo payloads; 256 is the reference's)
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
    --type) TYPE="$2"; shift ;;
    --elements-per-packet) ELEMENTS="$2"; shift ;;
    *) scenario_option "iters warmup timeout perf switchml mpirun out perf-arg" "$@" || die "unknown argument '$1' (see --help)"
       shift $((SCENARIO_SHIFT - 1)) ;;
  esac
  shift
done

[ -x "$PERF" ] || die "allreduce_perf not found at '$PERF' (build it or pass --perf)"
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-bench-loopback.XXXXXX)"
mkdir -p "$OUT/logs"
rm -f "$OUT"/*.json

common=(-b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -d "$TYPE" --iface lo
        --elements-per-packet "$ELEMENTS" "${EXTRA[@]}")
SCENARIO=loopback
SWITCH_IP=127.0.0.1
SWITCH_FLAGS=()
on_switch_host() { exec "$@"; }
on_worker_host() { shift; exec "$@"; }
rank_args() { :; }
mpi_launch() { :; }
mpi_prefix() { "$@"; }
# shellcheck source=bench/scenario_lib.sh
source "$here/scenario_lib.sh"

echo "# loopback scenario: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)," \
     "workers {${WORKERS}}, backends {${BACKENDS}}, $MIN..$MAX x$FACTOR, $ITERS iterations, SwitchML $ELEMENTS elements per packet, output in $OUT"

IFS=',' read -r -a backend_list <<<"$BACKENDS"
for n in $WORKERS; do
  for b in "${backend_list[@]}"; do run_backend "$b" "$n"; done
done
finish "$BACKENDS" "$WORKERS"
