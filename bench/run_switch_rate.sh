#!/usr/bin/env bash
# bench/run_switch_rate.sh — the `switch-rate` benchmark scenario (docs/switch-rate.md): one
# software-switch thread fed by synthetic senders on 127.0.0.1, against a plain UDP forwarder
# with the same I/O method (the limit of that I/O path on this machine). For each worker count
# it runs build/switch_rate --mode forward, then --mode switch (interleaved, --repeat times),
# prints every row, then per n the ratio switch/forwarder of the request rate (target >= 0.8,
# reported, never asserted), and writes all results as JSON. With --dut-threads "1 2" the
# forwarder also runs with T I/O threads for every --steering mode and the switch with T I/O
# threads (`switchml switch --io-threads T`: a port per thread), and a table per mode gives,
# per n, T and steering, the request rate and CPU per request against T = 1 and the misrouted
# requests (docs/switch-rate.md#several-io-threads-steering).
# Exit status: 0 only if every run completed with only correct results; 1 if a run failed
# (wrong results, stall, timeout); 2 on bad arguments.
#
#   bench/run_switch_rate.sh                      # n = 2, 4, 8; 256 elements; 5 s per run
#   bench/run_switch_rate.sh --no-udp-offload     # the same without UDP GSO/GRO
#   bench/run_switch_rate.sh --quick              # n = 2, 1 s per run: the CTest smoke run
#   bench/run_switch_rate.sh --workers 4 --elements-per-packet 1024 --repeat 3
#   bench/run_switch_rate.sh --modes forward --workers "4 8" --dut-threads "1 2" \
#       --steering "ports reuseport reuseport-cbpf" --repeat 2
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
BIN="$root/build/switch_rate"
OUT=""
WORKERS="2 4 8"
WORKERS_SET=0
SECONDS_PER_RUN=5
WARMUP=1
ELEMENTS=256
WINDOW=128
REPEAT=1
OFFLOAD_FLAG=()
EXTRA=()
MODES="forward switch"
DUT_THREADS="1"
STEERING="ports"

usage() {
  sml_help_header "${BASH_SOURCE[0]}"
  cat <<EOF
Options:
  --workers "2 4 8"         worker counts (space or comma separated; default "2 4 8")
  --seconds S               measured seconds per run (default $SECONDS_PER_RUN)
  --warmup S                warm-up seconds per run (default $WARMUP)
  --elements-per-packet N   64, 256, 512 or 1024 (default $ELEMENTS)
  --window W                slots in flight per worker (default $WINDOW)
  --repeat R                run every (mode, n) pair R times, interleaved (default $REPEAT)
  --no-udp-offload          no UDP GSO/GRO on any channel (passed to switch_rate)
  --quick                   n = 2 (unless --workers), 1 s runs, 0.3 s warm-up: a smoke run (~5 s)
  --bin BIN                 the switch_rate binary (default: build/switch_rate)
  --out DIR                 JSON and logs go here (default: a new directory under /tmp)
  --bench-arg ARG           extra flag for every switch_rate run (repeatable; also --bench-arg=ARG)
  --modes "forward switch"  which devices to run (default both; the ratio table needs both)
  --dut-threads "1 2"       I/O thread counts T, 1..8 (default 1), of the forwarder and of the
                            switch; T = 1 runs once, with one socket (steering does not apply);
                            the forwarder with T > 1 runs once per --steering, the switch with
                            ports (its I/O threads each have a port)
  --steering "ports ..."    ports, reuseport, reuseport-cbpf (default ports): how requests reach
                            the thread that owns their slot; a run that misroutes any request
                            fails (ports, reuseport-cbpf); reuseport only reports them
EOF
}

is_number() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --workers) sml_need_value "$@"; WORKERS="${2//,/ }"; WORKERS_SET=1; shift ;;
    --seconds) sml_need_value "$@"; SECONDS_PER_RUN="$2"; shift ;;
    --warmup) sml_need_value "$@"; WARMUP="$2"; shift ;;
    --elements-per-packet) sml_need_value "$@"; ELEMENTS="$2"; shift ;;
    --window) sml_need_value "$@"; WINDOW="$2"; shift ;;
    --repeat) sml_need_value "$@"; REPEAT="$2"; shift ;;
    --no-udp-offload) OFFLOAD_FLAG=(--no-udp-offload) ;;
    --quick) QUICK=1 ;;
    --bin) sml_need_value "$@"; BIN="$2"; shift ;;
    --out) sml_need_value "$@"; OUT="$2"; shift ;;
    --bench-arg) sml_need_value "$@"; EXTRA+=("$2"); shift ;;
    --bench-arg=*) EXTRA+=("${1#--bench-arg=}") ;;
    --modes) sml_need_value "$@"; MODES="${2//,/ }"; shift ;;
    --dut-threads) sml_need_value "$@"; DUT_THREADS="${2//,/ }"; shift ;;
    --steering) sml_need_value "$@"; STEERING="${2//,/ }"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ "${QUICK:-0}" = 1 ]; then
  SECONDS_PER_RUN=1
  WARMUP=0.3
  [ "$WORKERS_SET" = 1 ] || WORKERS=2
fi

for n in $WORKERS; do
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "--workers: '$n' is not a count in 1..64"
done
for m in $MODES; do
  case "$m" in forward|switch) ;; *) die "--modes: '$m' is not forward or switch" ;; esac
done
[ -n "${MODES// /}" ] || die "--modes: empty"
for t in $DUT_THREADS; do
  [[ "$t" =~ ^[0-9]+$ ]] && [ "$t" -ge 1 ] && [ "$t" -le 8 ] || die "--dut-threads: '$t' is not a count in 1..8"
done
for st in $STEERING; do
  case "$st" in ports|reuseport|reuseport-cbpf) ;; *) die "--steering: '$st' is not ports, reuseport or reuseport-cbpf" ;; esac
done
is_number "$SECONDS_PER_RUN" || die "--seconds: '$SECONDS_PER_RUN' is not a number of seconds"
is_number "$WARMUP" || die "--warmup: '$WARMUP' is not a number of seconds"
case "$ELEMENTS" in 64|256|512|1024) ;; *) die "--elements-per-packet: '$ELEMENTS' is not 64, 256, 512 or 1024" ;; esac
[[ "$WINDOW" =~ ^[0-9]+$ ]] && [ "$WINDOW" -ge 1 ] || die "--window: '$WINDOW' is not a positive count"
[[ "$REPEAT" =~ ^[0-9]+$ ]] && [ "$REPEAT" -ge 1 ] || die "--repeat: '$REPEAT' is not a positive count"
[ -x "$BIN" ] || die "switch_rate not found at '$BIN' (build it: ninja -C build switch_rate, or pass --bin)"
command -v python3 >/dev/null || die "python3 is needed for the summary"

[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/switchml-switch-rate.XXXXXX)"
mkdir -p "$OUT/runs"
rm -f "$OUT"/runs/*.json "$OUT"/switch_rate.json

# A run ends by its own deadlines (warm-up + seconds, or the stall timeout); the outer timeout
# only catches a hang in setup or teardown.
run_timeout=$(python3 -c "import math; print(int(math.ceil($SECONDS_PER_RUN + $WARMUP)) + 30)")
offload_name=gso+gro
[ ${#OFFLOAD_FLAG[@]} -eq 0 ] || offload_name=off

echo "switch-rate: n = $WORKERS, $ELEMENTS elements/packet, window $WINDOW, ${SECONDS_PER_RUN} s" \
     "(+${WARMUP} s warm-up) per run, repeat $REPEAT, udp offload $offload_name, modes $MODES," \
     "I/O threads $DUT_THREADS, steering $STEERING; load average $(cut -d' ' -f1-3 /proc/loadavg);" \
     "results in $OUT"
# The runs of one repeat, in order: "mode threads steering".
configs=()
for mode in $MODES; do
  if [ "$mode" = switch ]; then
    for t in $DUT_THREADS; do configs+=("switch $t ports"); done
    continue
  fi
  for t in $DUT_THREADS; do
    if [ "$t" = 1 ]; then configs+=("forward 1 ports"); continue; fi
    for st in $STEERING; do configs+=("forward $t $st"); done
  done
done
failed=0
header_done=0
for rep in $(seq 1 "$REPEAT"); do
  for n in $WORKERS; do
    for config in "${configs[@]}"; do
      read -r mode threads steering <<<"$config"
      tag="${mode}-n${n}-e${ELEMENTS}-${offload_name}-t${threads}-${steering}-r${rep}"
      args=(--mode "$mode" --workers "$n" --elements-per-packet "$ELEMENTS" --window "$WINDOW"
            --seconds "$SECONDS_PER_RUN" --warmup "$WARMUP" --json "$OUT/runs/$tag.json"
            --dut-threads "$threads" --steering "$steering"
            "${OFFLOAD_FLAG[@]}" "${EXTRA[@]}")
      [ "$header_done" = 0 ] || args+=(--no-header)
      header_done=1
      rc=0
      timeout -k 5 "$run_timeout" "$BIN" "${args[@]}" 2>"$OUT/runs/$tag.log" || rc=$?
      if [ "$rc" -ne 0 ]; then
        failed=1
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
          echo "$tag: FAIL (killed after ${run_timeout} s)" >&2
        else
          echo "$tag: FAIL (exit $rc): $(tail -n 3 "$OUT/runs/$tag.log" | tr '\n' ' ')" >&2
        fi
      fi
    done
  done
done

python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
runs = []
for path in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
    with open(path) as f:
        r = json.load(f)
    r["file"] = os.path.basename(path)
    runs.append(r)
for r in runs:  # results written before --dut-threads existed
    r.setdefault("dut_threads", 1)
    r.setdefault("steering", "ports")
base = [r for r in runs if r["dut_threads"] == 1]
ratios = []
if {r["mode"] for r in base} >= {"forward", "switch"}:
    print()
    print("switch / forwarder request rate (target >= 0.80): `ratio` = best switch rate / best forwarder")
    print("rate over the repeats (`per repeat`: each interleaved pair); `cpu ratio` = forwarder / switch")
    print("CPU us per request of the switch (forwarder) thread: the rate ratio if each thread had a core")
    print("to itself (min over the repeats).")
    print(f"{'n':>3} {'elems':>5} {'offload':>7} {'forward req/s':>14} {'switch req/s':>13} {'ratio':>6}"
          f" {'fwd us/req':>10} {'sw us/req':>10} {'cpu ratio':>9}  per repeat")
    keys = sorted({(r["workers"], r["elements_per_packet"], r["udp_offload"]) for r in base})
    for n, e, off in keys:
        sel = [r for r in base if (r["workers"], r["elements_per_packet"], r["udp_offload"]) == (n, e, off) and r["ok"]]
        fwd = sorted((r for r in sel if r["mode"] == "forward"), key=lambda r: r["file"])
        sw = sorted((r for r in sel if r["mode"] == "switch"), key=lambda r: r["file"])
        if not fwd or not sw:
            print(f"{n:>3} {e:>5} {'gso+gro' if off else 'off':>7}  (a run failed: no ratio)")
            continue
        bf = max(r["requests_per_s"] for r in fwd)
        bs = max(r["requests_per_s"] for r in sw)
        cf = min(r["dut_cpu_us_per_request"] for r in fwd)
        cs = min(r["dut_cpu_us_per_request"] for r in sw)
        each = [s["requests_per_s"] / f["requests_per_s"] for f, s in zip(fwd, sw) if f["requests_per_s"] > 0]
        ratio = bs / bf if bf > 0 else 0.0
        ratios.append({"workers": n, "elements_per_packet": e, "udp_offload": off,
                       "forward_requests_per_s": bf, "switch_requests_per_s": bs, "ratio": ratio,
                       "ratio_per_repeat": each, "forward_cpu_us_per_request": cf,
                       "switch_cpu_us_per_request": cs,
                       "cpu_ratio": cf / cs if cs > 0 else None, "meets_target": ratio >= 0.8})
        print(f"{n:>3} {e:>5} {'gso+gro' if off else 'off':>7} {bf:>14.0f} {bs:>13.0f} {ratio:>6.2f}"
              f" {cf:>10.2f} {cs:>10.2f} {cf / cs if cs > 0 else 0:>9.2f}  "
              + " ".join(f"{x:.2f}" for x in each))

else:
    print("\n(no switch/forwarder ratio: --modes did not include both)")

# Several I/O threads: per mode, (n, T, steering) against T = 1 (the same device, one thread).
threads_rows = []
for mode in ("forward", "switch"):
    fwd = [r for r in runs if r["mode"] == mode]
    if not any(r["dut_threads"] > 1 for r in fwd):
        continue
    print()
    what = "forwarder" if mode == "forward" else "switch (--io-threads T: a port per I/O thread)"
    print(f"{what} with T I/O threads against T = 1 (best requests/s and least CPU us per request")
    print("over the repeats; `rate x` = best rate / best T = 1 rate, target >= 1.7 where the sender")
    print("is not the limit; `cpu x` = CPU us per request / T = 1's, target <= 1.10; thrCPU = per")
    print("thread CPU % of the best run; sndCPU = the one sender thread's CPU %: near 100 = the")
    print("sender is the limit; misrouted = requests at a thread other than their slot's owner)")
    print(f"{'n':>3} {'elems':>5} {'offload':>7} {'T':>2} {'steering':<14} {'req/s':>10} {'rate x':>6}"
          f" {'us/req':>7} {'cpu x':>6} {'thrCPU%':<11} {'sndCPU':>6} {'dutRQ':>6} {'misrouted':>10}  per repeat req/s")
    tkeys = sorted({(r["workers"], r["elements_per_packet"], r["udp_offload"], r["dut_threads"], r["steering"]) for r in fwd})
    for n, e, off, t, st in tkeys:
        sel = sorted((r for r in fwd if (r["workers"], r["elements_per_packet"], r["udp_offload"], r["dut_threads"], r["steering"]) == (n, e, off, t, st)), key=lambda r: r["file"])
        ok = [r for r in sel if r["ok"]]
        one = [r for r in fwd if (r["workers"], r["elements_per_packet"], r["udp_offload"], r["dut_threads"]) == (n, e, off, 1) and r["ok"]]
        name = f"{n:>3} {e:>5} {'gso+gro' if off else 'off':>7} {t:>2} {st:<14}"
        if not ok:
            print(f"{name}  (every run failed: {sel[0]['verdict'] if sel else '?'})")
            continue
        best = max(ok, key=lambda r: r["requests_per_s"])
        cpu = min(r["dut_cpu_us_per_request"] for r in ok)
        b1 = max((r["requests_per_s"] for r in one), default=0.0)
        c1 = min((r["dut_cpu_us_per_request"] for r in one), default=0.0)
        thr = "/".join(f"{100 * x['cpu_utilization']:.0f}" for x in best.get("dut_thread", []))
        mis = max(r.get("misrouted", 0) for r in sel)
        row = {"mode": mode, "workers": n, "elements_per_packet": e, "udp_offload": off, "dut_threads": t,
               "steering": st, "requests_per_s": best["requests_per_s"],
               "rate_vs_t1": best["requests_per_s"] / b1 if b1 > 0 else None,
               "cpu_us_per_request": cpu, "cpu_vs_t1": cpu / c1 if c1 > 0 else None,
               "thread_cpu_utilization": [x["cpu_utilization"] for x in best.get("dut_thread", [])],
               "sender_cpu_utilization": best["sender_cpu_utilization"],
               "dut_runqueue_wait_fraction": best["dut_runqueue_wait_fraction"],
               "misrouted_max": mis, "failed_runs": len(sel) - len(ok),
               "requests_per_s_per_repeat": [r["requests_per_s"] for r in sel]}
        threads_rows.append(row)
        rx = f"{row['rate_vs_t1']:.2f}" if row["rate_vs_t1"] else "-"
        cx = f"{row['cpu_vs_t1']:.2f}" if row["cpu_vs_t1"] else "-"
        print(f"{name} {best['requests_per_s']:>10.0f} {rx:>6} {cpu:>7.2f} {cx:>6} {thr:<11}"
              f" {100 * best['sender_cpu_utilization']:>5.0f}% {100 * best['dut_runqueue_wait_fraction']:>5.0f}%"
              f" {mis:>10}  " + " ".join(f"{r['requests_per_s']:.0f}" for r in sel))
with open(os.path.join(out, "switch_rate.json"), "w") as f:
    json.dump({"scenario": "switch-rate", "runs": runs, "ratios": ratios, "threads": threads_rows}, f, indent=2)
print(f"\nJSON: {os.path.join(out, 'switch_rate.json')}")
PY

if [ "$failed" -ne 0 ]; then
  echo "run_switch_rate.sh: FAIL (a run had wrong results, stalled or timed out; logs in $OUT/runs)" >&2
  exit 1
fi
echo "run_switch_rate.sh: all runs completed with correct results"
