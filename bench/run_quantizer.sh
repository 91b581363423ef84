#!/usr/bin/env bash
# bench/run_quantizer.sh — the quantizer against memcpy (docs/benchmarks.md, "Quantizer against
# memcpy"). Runs build/src/quant/quantizer_bench with interleaved repetitions (Google Benchmark's
# random interleaving, so a noisy neighbour slows every benchmark alike), then prints each
# benchmark's median bandwidth and its ratio to memcpy's median from the same run. The issue's
# target, float32 -> int32 -> float32 at >= 0.8x memcpy, is reported, never asserted.
# Exit status: 0 if the benchmark ran and produced every row; 1 if it failed; 2 on bad arguments.
#
#   bench/run_quantizer.sh                 # 10 interleaved repetitions of 0.3 s each
#   bench/run_quantizer.sh --quick         # 2 repetitions of 0.05 s: the CTest smoke run
#   bench/run_quantizer.sh --filter 'Memcpy|WorkerOrder' --repetitions 20
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
BIN="$root/build/src/quant/quantizer_bench"
REPS=10
MIN_TIME=0.3
FILTER='QuantizeDequantize|WorkerOrder|BM_Quantize/|BM_Dequantize/'
OUT=""

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF
Options:
  --repetitions N   interleaved repetitions of every benchmark (default $REPS)
  --min-time S      seconds per repetition (default $MIN_TIME)
  --filter REGEX    benchmarks to run (default '$FILTER'; BM_Memcpy always runs)
  --quick           2 repetitions of 0.05 s
  --bin BIN         the quantizer_bench binary (default: build/src/quant/quantizer_bench)
  --out DIR         JSON goes here (default: a new directory under /tmp)
EOF
}


while [ $# -gt 0 ]; do
  case "$1" in
    --repetitions) sml_need_value "$@"; REPS="$2"; shift ;;
    --min-time) sml_need_value "$@"; MIN_TIME="$2"; shift ;;
    --filter) sml_need_value "$@"; FILTER="$2"; shift ;;
    --quick) REPS=2; MIN_TIME=0.05 ;;
    --bin) sml_need_value "$@"; BIN="$2"; shift ;;
    --out) sml_need_value "$@"; OUT="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--repetitions must be a positive integer, got '$REPS'"
[[ "$MIN_TIME" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--min-time must be a number of seconds, got '$MIN_TIME'"
[ -x "$BIN" ] || die "no quantizer_bench at $BIN (build with -DSWITCHML_BUILD_BENCH=ON, or pass --bin)"
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-quantizer.XXXXXX)"
mkdir -p "$OUT" || die "cannot create --out directory $OUT"
JSON="$OUT/quantizer.json"

echo "# quantizer_bench: $REPS interleaved repetitions x ${MIN_TIME}s, filter 'BM_Memcpy/|$FILTER'"
if ! "$BIN" --benchmark_filter="BM_Memcpy/|$FILTER" --benchmark_repetitions="$REPS" \
     --benchmark_min_time="$MIN_TIME" --benchmark_enable_random_interleaving=true \
     --benchmark_report_aggregates_only=true --benchmark_out="$JSON" \
     --benchmark_out_format=json >"$OUT/quantizer.log" 2>&1; then
  echo "run_quantizer.sh: quantizer_bench failed; its output:" >&2
  cat "$OUT/quantizer.log" >&2
  exit 1
fi

python3 - "$JSON" <<'EOF'
import json, sys
rows = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"].replace("/real_time", "").split("/target:")[0]
    rows[(name, b.get("label", ""))] = b["bytes_per_second"] / 1e9
if ("BM_Memcpy", "") not in rows:
    sys.exit("run_quantizer.sh: no BM_Memcpy median in the output")
memcpy = rows[("BM_Memcpy", "")]
print(f"{'benchmark':<24} {'target':<8} {'GB/s':>7} {'x memcpy':>9}")
for (name, label), gbs in sorted(rows.items(), key=lambda r: (r[0][0] != "BM_Memcpy", r[0][0], -r[1])):
    print(f"{name:<24} {label:<8} {gbs:7.2f} {gbs / memcpy:9.2f}")
trips = [(l, g) for (n, l), g in rows.items() if n == "BM_QuantizeDequantize"]
if trips:
    label, gbs = max(trips, key=lambda r: r[1])
    verdict = "met" if gbs >= 0.8 * memcpy else "NOT met"
    print(f"round trip (best target, {label}): {gbs / memcpy:.2f}x memcpy; target >= 0.80x: {verdict}")
EOF
echo "# JSON: $JSON"
