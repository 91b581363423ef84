#!/usr/bin/env bash
# Loss sweep on the emulated cluster (scripts/cluster.sh): tensor aggregation time against random
# packet loss, and exactness under loss. See --help.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/run_loss_sweep.sh [OPTIONS]

Creates an emulated cluster (one network namespace per worker host and one for the switch host,
tbf-shaped links, scripts/cluster.sh), then for each element type (int32, float32):
  1. a loss-free run: switch + N workers (`switchml allreduce`), the reference checksums;
  2. for each loss rate P and each direction
       to    worker->switch only   (iptables DROP, probability P, in the switch host)
       from  switch->worker only   (iptables DROP, probability P, in every worker host)
       both  both of the above
     a run with that loss, on a fresh switch.
Every rank verifies every element itself (int32: exact sum; float32: within the quantizer's
bound), and this script checks that every rank's result checksum (FNV-1a of the output bytes of
the last timed iteration) equals the loss-free run's: int32 bit-exact, float32 bit-identical.
Every worker and switch runs under `timeout`, so a hang is reported as a failure, not waited out.

Printed and written as JSON: per run the aggregation time (slowest rank's median over the timed
iterations), slowdown against the loss-free run, retransmitted packets in % of packets sent,
datagrams the loss rules really dropped (and the packets they matched: with offload one packet
carries a batch), datagrams lost otherwise (tbf queue overflow, UDP receive errors; normally 0),
and the switch's duplicate counters. Retransmissions without any drop (as in the loss-free run)
are spurious timeouts: the worker was not scheduled in time.

Options:
  --workers N        worker hosts (default 4)
  --size SIZE        tensor size, `switchml allreduce --size` syntax (default 16MiB)
  --rate RATE        tbf rate of each worker link, tc syntax (default 500mbit)
  --rates LIST       comma-separated loss probabilities (default 0.0001,0.001,0.01,0.05)
  --directions LIST  comma-separated subset of to,from,both (default to,from,both)
  --types LIST       comma-separated subset of int32,float32 (default int32,float32)
  --offload on|off   UDP GSO/GRO in switch and workers (default on, the library default). With
                     GSO a sender's batch of datagrams crosses the emulated links as one packet,
                     so an iptables rule drops whole batches (bursty loss, same mean datagram
                     loss rate); off (--no-udp-offload) makes the loss independent per datagram
  --elements-per-packet N  64, 256, 512 or 1024 (default 256); also used to count dropped datagrams
  --iters K          timed iterations per run (default 3; 1 untimed warm-up before them)
  --run-timeout S    seconds after which a run counts as hung and is killed (default 300; the
                     default 5%-both-ways runs take up to about 110 s, see docs/reliability.md)
  --out FILE         write the JSON report to FILE (default: none; the table is always printed)
  --switchml PATH    the switchml binary (default: build/switchml under the repository)
  --name PREFIX      cluster name (default lsw<pid>; 1-32 characters [A-Za-z0-9_])
  --worker-arg ARG   pass ARG to every `switchml allreduce` (repeatable), e.g. --worker-arg=--min-rto-ms=10
  --switch-arg ARG   pass ARG to every `switchml switch` (repeatable), e.g. --switch-arg=--late-duplicate-guard
  --quick            --size 4MiB --rates 0.001,0.01 --iters 1 (and no warm-up): 14 runs, 20-60 s
  --keep             keep the work directory with every log and JSON file
  -h, --help         this text

Exit status: 0 every run exact and in time; 1 a run failed, hung or differed; 2 bad arguments or
a setup error; 77 not root (the CTest skip code).

Needs root (network namespaces, tc, iptables). The cluster is removed at exit, also on failure
or Ctrl-C. Wall time of the default sweep (2 + 2x4x3 runs, 4 workers, 16 MiB, 500 Mbit/s) on
the 2-core development host: 6.5 minutes, most of it in the 5% runs (docs/reliability.md).
EOF
}

source "$(dirname "$0")/../scripts/lib.sh"
ROOT=$SML_ROOT
CLUSTER_SH="$ROOT/scripts/cluster.sh"
WORKERS=4 SIZE=16MiB RATE=500mbit RATES=0.0001,0.001,0.01,0.05 DIRS=to,from,both TYPES=int32,float32
ITERS=3 WARMUP=1 RUN_TIMEOUT=300 OUT="" SWITCHML="$ROOT/build/switchml" NAME="lsw$$" KEEP=0
PYTHON=${PYTHON:-python3}
WORKER_ARGS=() SWITCH_ARGS=() OFFLOAD=on EPP=256

while [[ $# -gt 0 ]]; do
  case "$1" in
    --workers) sml_need_value "$@"; WORKERS=$2; shift 2 ;;
    --size) sml_need_value "$@"; SIZE=$2; shift 2 ;;
    --rate) sml_need_value "$@"; RATE=$2; shift 2 ;;
    --rates) sml_need_value "$@"; RATES=$2; shift 2 ;;
    --directions) sml_need_value "$@"; DIRS=$2; shift 2 ;;
    --types) sml_need_value "$@"; TYPES=$2; shift 2 ;;
    --iters) sml_need_value "$@"; ITERS=$2; shift 2 ;;
    --run-timeout) sml_need_value "$@"; RUN_TIMEOUT=$2; shift 2 ;;
    --out) sml_need_value "$@"; OUT=$2; shift 2 ;;
    --switchml) sml_need_value "$@"; SWITCHML=$2; shift 2 ;;
    --name) sml_need_value "$@"; NAME=$2; shift 2 ;;
    --worker-arg) sml_need_value "$@"; WORKER_ARGS+=("$2"); shift 2 ;;
    --worker-arg=*) WORKER_ARGS+=("${1#--worker-arg=}"); shift ;;
    --switch-arg) sml_need_value "$@"; SWITCH_ARGS+=("$2"); shift 2 ;;
    --switch-arg=*) SWITCH_ARGS+=("${1#--switch-arg=}"); shift ;;
    --offload) sml_need_value "$@"; OFFLOAD=$2; shift 2 ;;
    --elements-per-packet) sml_need_value "$@"; EPP=$2; shift 2 ;;
    --quick) SIZE=4MiB RATES=0.001,0.01 ITERS=1 WARMUP=0; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[[ $WORKERS =~ ^[0-9]+$ ]] && ((WORKERS >= 1 && WORKERS <= 64)) || die "--workers must be 1..64, got '$WORKERS'"
[[ $ITERS =~ ^[0-9]+$ ]] && ((ITERS >= 1)) || die "--iters must be a positive integer, got '$ITERS'"
[[ $RUN_TIMEOUT =~ ^[0-9]+$ ]] && ((RUN_TIMEOUT >= 5)) || die "--run-timeout must be an integer >= 5, got '$RUN_TIMEOUT'"
[[ $OFFLOAD == on || $OFFLOAD == off ]] || die "--offload must be on or off, got '$OFFLOAD'"
[[ $EPP == 64 || $EPP == 256 || $EPP == 512 || $EPP == 1024 ]] || die "--elements-per-packet must be 64, 256, 512 or 1024, got '$EPP'"
if [[ $OFFLOAD == off ]]; then SWITCH_ARGS+=(--no-udp-offload); WORKER_ARGS+=(--no-udp-offload); fi
[[ $NAME =~ ^[A-Za-z0-9_]{1,32}$ ]] || die "--name must be 1-32 characters [A-Za-z0-9_], got '$NAME'"
IFS=, read -r -a RATE_LIST <<< "$RATES"
((${#RATE_LIST[@]} > 0)) || die "--rates is empty"
for p in "${RATE_LIST[@]}"; do
  "$PYTHON" -c "import sys; p=float(sys.argv[1]); sys.exit(0 if 0 < p < 1 else 1)" "$p" 2>/dev/null ||
      die "--rates: '$p' is not a probability in (0, 1)"
done
IFS=, read -r -a DIR_LIST <<< "$DIRS"
for d in "${DIR_LIST[@]}"; do [[ $d == to || $d == from || $d == both ]] || die "--directions: '$d' is not to, from or both"; done
IFS=, read -r -a TYPE_LIST <<< "$TYPES"
for t in "${TYPE_LIST[@]}"; do [[ $t == int32 || $t == float32 ]] || die "--types: '$t' is not int32 or float32"; done
[[ -x "$SWITCHML" ]] || die "--switchml: '$SWITCHML' is not an executable (build it: ninja -C build switchml_cli)"
[[ $(id -u) == 0 ]] || skip "run_loss_sweep.sh needs root (network namespaces, tc, iptables)"
if [[ -n "$OUT" ]]; then
  touch "$OUT" 2>/dev/null || die "--out: cannot write '$OUT'"
  OUT=$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")
fi

# The work directory (logs, per-rank JSON) is kept on failure and with --keep. At exit the
# switches and workers are stopped, then the cluster is removed, whatever happens.
sml_work_dir switchml-loss-sweep
CLUSTER_UP=0
sml_at_exit '((CLUSTER_UP)) && "$CLUSTER_SH" down --name "$NAME" >/dev/null 2>&1 || true'

echo "== cluster $NAME: $WORKERS workers, $RATE per link"
CLUSTER_UP=1
"$CLUSTER_SH" up --name "$NAME" --workers "$WORKERS" --rate "$RATE" > "$WORK/cluster.log" 2>&1 ||
    { cat "$WORK/cluster.log"; die "cluster.sh up failed"; }
# shellcheck disable=SC1090
source "/tmp/switchml-cluster-$NAME.env"
CX=("$CLUSTER_SH" exec --name "$NAME" --host)
# in_sw CMD...: execs CMD in the switch host, under `timeout` (a hung switch is killed).
in_sw() { exec timeout -k 5 $((RUN_TIMEOUT + 30)) "${CX[@]}" sw -- "$@"; }

# dropped_in NS...: datagrams dropped so far by the loss rules (chain SMLLOSS) of these
# namespaces, as "DATAGRAMS PACKETS". A packet the rules see may carry a GSO batch of datagrams
# (one IPv4 + UDP header of 28 bytes, then the datagrams' payloads of PAYLOAD bytes each), so
# datagrams = (bytes - 28 * packets) / PAYLOAD; without offload the two counts are equal.
PAYLOAD=$((10 + 4 * EPP))  # SwitchML datagram: 10-byte prefix + EPP int32 elements
dropped_in() {
  local pk=0 by=0 ns p b
  for ns in "$@"; do
    read -r p b < <(ip netns exec "$ns" iptables -w -n -v -x -L SMLLOSS 2>/dev/null |
                    awk '$3 == "DROP" {p += $1; b += $2} END {print p + 0, b + 0}')
    pk=$((pk + p)); by=$((by + b))
  done
  echo "$(( (by - 28 * pk + PAYLOAD / 2) / PAYLOAD )) $pk"
}

# other_drops: datagrams lost for reasons other than the loss rules, so far, in every namespace of
# the cluster: tbf queue overflows (tc -s) plus UDP receive errors (/proc/net/snmp InErrors, which
# include socket buffer overflows). Non-zero means the run lost more than the rules dropped.
other_drops() {
  local total=0 ns n
  for ns in "$CLUSTER_SWITCH_NS" "$CLUSTER_BRIDGE_NS" $CLUSTER_WORKER_NS; do
    n=$(ip netns exec "$ns" tc -s qdisc show 2>/dev/null | awk '/dropped/ {gsub(",", "", $7); s += $7} END {print s + 0}')
    total=$((total + n))
    n=$(ip netns exec "$ns" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ {print $4}' /proc/net/snmp 2>/dev/null || echo 0)
    total=$((total + ${n:-0}))
  done
  echo "$total"
}

# run_one LABEL TYPE TO_P FROM_P: one switch + WORKERS workers with that loss; writes
# $WORK/LABEL.meta.json (what the summary reads). Returns 0 even when ranks fail (recorded).
run_one() {
  local label=$1 type=$2 to_p=$3 from_p=$4 i
  "$CLUSTER_SH" loss --name "$NAME" --to-switch "$to_p" --from-switch "$from_p" > /dev/null
  local d_sw0 d_w0 p_sw0 p_w0
  read -r d_sw0 p_sw0 < <(dropped_in "$CLUSTER_SWITCH_NS")
  # shellcheck disable=SC2086
  read -r d_w0 p_w0 < <(dropped_in $CLUSTER_WORKER_NS)
  local o0; o0=$(other_drops)
  sml_start_switch --bind "$CLUSTER_SWITCH_IP" --via in_sw --ready "$WORK/$label.ready" \
      --log "$WORK/$label.switch.log" --deadline 30 -- --counters-json "$WORK/$label.switch.json" \
      ${SWITCH_ARGS[@]+"${SWITCH_ARGS[@]}"} || die "$label: switch did not start"
  local sw_pid=$SW_PID ctl=$CTL_PORT
  local pids=() t0; t0=$(date +%s.%N)
  for ((i = 0; i < WORKERS; i++)); do
    # job timeout: a run that makes no progress for 60 s fails inside the worker; `timeout`
    # bounds the whole run in case anything else hangs.
    timeout -k 5 "$RUN_TIMEOUT" "${CX[@]}" "w$i" -- "$SWITCHML" allreduce --rank "$i" --workers "$WORKERS" \
        --controller "$CLUSTER_SWITCH_IP:$ctl" --type "$type" --size "$SIZE" --elements-per-packet "$EPP" --iters "$ITERS" --warmup "$WARMUP" \
        --call-timeout-ms 60000 --rpc-timeout-ms 30000 --json "$WORK/$label.r$i.json" \
        ${WORKER_ARGS[@]+"${WORKER_ARGS[@]}"} > "$WORK/$label.r$i.log" 2>&1 &
    pids+=($!)
    sml_track $!
  done
  local rcs=()
  for ((i = 0; i < WORKERS; i++)); do
    local rc=0
    wait "${pids[i]}" || rc=$?
    rcs+=("$rc")
  done
  local wall; wall=$("$PYTHON" -c "import sys,time; print(round(time.time() - float(sys.argv[1]), 3))" "$t0")
  local sw_rc=0
  sml_stop "$sw_pid" 30 switch || sw_rc=$?
  local d_sw1 d_w1 p_sw1 p_w1
  read -r d_sw1 p_sw1 < <(dropped_in "$CLUSTER_SWITCH_NS")
  # shellcheck disable=SC2086
  read -r d_w1 p_w1 < <(dropped_in $CLUSTER_WORKER_NS)
  local o1; o1=$(other_drops)
  "$PYTHON" - "$WORK" "$label" "$type" "$to_p" "$from_p" "$WORKERS" "$wall" "$sw_rc" \
      $((d_sw1 - d_sw0)) $((d_w1 - d_w0)) $((o1 - o0)) $((p_sw1 - p_sw0 + p_w1 - p_w0)) "${rcs[@]}" <<'EOF'
import json, os, statistics, sys
work, label, typ, to_p, from_p, n, wall, sw_rc, d_to, d_from, d_other, d_pkts = sys.argv[1:13]
rcs = [int(x) for x in sys.argv[13:]]
n = int(n)
ranks = []
for i in range(n):
    path = f"{work}/{label}.r{i}.json"
    rep = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
    res = (rep.get("results") or [{}])[0]
    ranks.append({
        "rank": i, "exit": rcs[i], "ok": bool(rep.get("ok")) and rcs[i] == 0,
        "error": rep.get("error", "no report (killed by timeout?)" if rcs[i] in (124, 137) else "no report"),
        "wrong": res.get("wrong"), "checksum": res.get("checksum"), "times_s": res.get("times_s", []),
        "packets_sent": res.get("packets_sent", 0), "retransmissions": res.get("retransmissions", 0),
        "timeouts": rep.get("stats", {}).get("timeouts", 0),
    })
sw = {}
swp = f"{work}/{label}.switch.json"
if os.path.exists(swp) and os.path.getsize(swp):
    sw = json.load(open(swp))
    sw = sw.get("counters", sw)
ok = all(r["ok"] for r in ranks)
meds = [statistics.median(r["times_s"]) for r in ranks if r["times_s"]]
sent = sum(r["packets_sent"] for r in ranks)
retx = sum(r["retransmissions"] for r in ranks)
meta = {
    "label": label, "type": typ, "loss_to_switch": float(to_p), "loss_from_switch": float(from_p),
    "ok": ok, "hung": any(r["exit"] in (124, 137) for r in ranks), "switch_exit": int(sw_rc),
    "time_s": max(meds) if ok and len(meds) == n else None,
    "best_s": min(min(r["times_s"]) for r in ranks) if ok and len(meds) == n else None,
    "wall_s": float(wall), "packets_sent": sent, "retransmissions": retx,
    "retx_pct": 100.0 * retx / sent if sent else 0.0,
    "timeouts": sum(r["timeouts"] for r in ranks),
    "dropped_to_switch": int(d_to), "dropped_from_switch": int(d_from), "dropped_other": int(d_other),
    "dropped_packets": int(d_pkts),
    "checksums": sorted({r["checksum"] for r in ranks if r["checksum"] is not None}),
    "switch_counters": sw, "ranks": ranks,
}
json.dump(meta, open(f"{work}/{label}.meta.json", "w"), indent=1)
state = "ok" if ok else "FAILED: " + "; ".join(f"rank {r['rank']} exit {r['exit']}: {r['error']}" for r in ranks if not r["ok"])
t = f"{meta['time_s']:.3f} s" if meta["time_s"] is not None else "-"
print(f"   {label:<22} {t:>9}  retx {meta['retx_pct']:6.3f}%  dropped {int(d_to)}+{int(d_from)} ({int(d_pkts)} packets) other {int(d_other)}  wall {float(wall):.1f} s  {state}")
EOF
}

SECONDS=0
LABELS=()
for type in "${TYPE_LIST[@]}"; do
  echo "== $type, $WORKERS workers x $SIZE, $ITERS timed iteration(s) after $WARMUP warm-up"
  run_one "$type-clean" "$type" 0 0
  LABELS+=("$type-clean")
  for p in "${RATE_LIST[@]}"; do
    for d in "${DIR_LIST[@]}"; do
      case $d in to) tp=$p fp=0 ;; from) tp=0 fp=$p ;; both) tp=$p fp=$p ;; esac
      run_one "$type-$d-$p" "$type" "$tp" "$fp"
      LABELS+=("$type-$d-$p")
    done
  done
done
"$CLUSTER_SH" loss --name "$NAME" --to-switch 0 --from-switch 0 > /dev/null

"$PYTHON" - "$WORK" "$OUT" "$WORKERS" "$SIZE" "$RATE" "$ITERS" "$WARMUP" "$SECONDS" \
    "${WORKER_ARGS[*]+${WORKER_ARGS[*]}}" "${SWITCH_ARGS[*]+${SWITCH_ARGS[*]}}" "$OFFLOAD" "${LABELS[@]}" <<'EOF'
import json, sys
work, out, n, size, rate, iters, warmup, secs, wargs, sargs, offload = sys.argv[1:12]
runs = [json.load(open(f"{work}/{l}.meta.json")) for l in sys.argv[12:]]
base = {r["type"]: r for r in runs if r["loss_to_switch"] == 0 and r["loss_from_switch"] == 0}
failures = []
for r in runs:
    b = base.get(r["type"])
    r["direction"] = ("none" if not (r["loss_to_switch"] or r["loss_from_switch"]) else
                      "both" if r["loss_to_switch"] and r["loss_from_switch"] else
                      "to" if r["loss_to_switch"] else "from")
    r["loss"] = max(r["loss_to_switch"], r["loss_from_switch"])
    r["identical_to_loss_free"] = bool(r["ok"] and b and b["ok"] and len(r["checksums"]) == 1
                                       and r["checksums"] == b["checksums"])
    r["slowdown"] = (r["time_s"] / b["time_s"]) if (b and b["time_s"] and r["time_s"]) else None
    if not r["ok"]:
        failures.append(f"{r['label']}: a rank failed or hung")
    elif len(r["checksums"]) != 1:
        failures.append(f"{r['label']}: ranks disagree on the result ({len(r['checksums'])} checksums)")
    elif not r["identical_to_loss_free"]:
        failures.append(f"{r['label']}: result differs from the loss-free run")
    if r["switch_counters"].get("aggregator_invalid", 0):
        failures.append(f"{r['label']}: switch counted aggregator_invalid")
    # A rule that dropped nothing although it should have is a broken setup. With offload a
    # packet on the link may carry up to 64 datagrams, so fewer drop events are expected.
    dropped = r["dropped_to_switch"] + r["dropped_from_switch"]
    least = 20 if offload == "off" else 20 * 64
    if r["loss"] > 0 and r["ok"] and r["packets_sent"] * r["loss"] >= least and dropped == 0:
        failures.append(f"{r['label']}: the loss rules dropped nothing (about {r['packets_sent'] * r['loss']:.0f} expected)")
print()
print(f"Loss sweep: {n} workers x {size} per tensor, {rate} per link, median of {iters} timed iteration(s), "
      f"slowest rank; UDP offload {offload}; {secs} s wall")
if wargs or sargs:
    print(f"extra worker arguments: '{wargs}', extra switch arguments: '{sargs}'")
hdr = f"{'type':<8} {'direction':<9} {'loss %':>7} {'time s':>8} {'slowdown':>9} {'retx %':>8} {'dropped':>8} {'pkts':>6} {'other':>6} {'late_dup':>8} {'dup_drop':>8} {'unicast':>8}  exact"
print(hdr); print("-" * len(hdr))
for r in runs:
    sc = r["switch_counters"]
    t = f"{r['time_s']:.3f}" if r["time_s"] is not None else "-"
    s = f"{r['slowdown']:.2f}x" if r["slowdown"] is not None else "-"
    exact = "yes" if r["identical_to_loss_free"] else "NO"
    print(f"{r['type']:<8} {r['direction']:<9} {100 * r['loss']:>7.3g} {t:>8} {s:>9} {r['retx_pct']:>8.3f} "
          f"{r['dropped_to_switch'] + r['dropped_from_switch']:>8} {r['dropped_packets']:>6} {r['dropped_other']:>6} {sc.get('late_duplicates_dropped', 0):>8} "
          f"{sc.get('duplicates_dropped', 0):>8} {sc.get('unicast_replies', 0):>8}  {exact}")
report = {"workers": int(n), "size": size, "rate": rate, "iters": int(iters), "warmup": int(warmup),
          "wall_s": int(secs), "offload": offload, "worker_args": wargs, "switch_args": sargs, "ok": not failures, "failures": failures,
          "runs": [{k: v for k, v in r.items()} for r in runs]}
if out:
    json.dump(report, open(out, "w"), indent=1)
    print(f"\nJSON report: {out}")
if failures:
    print("\nFAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"\nall {len(runs)} runs: every rank verified every element, results identical to the loss-free run, no hang")
EOF
