#!/usr/bin/env bash
# AF_PACKET ring (TPACKET_V2, TPACKET_V3), kernel UDP and AF_XDP (generic and native XDP) side by
# side on a veth pair between two namespaces this script creates (and always removes): the
# numbers of "Raw-frame input" in docs/design.md.
#
# Usage: bench/run_raw_compare.sh --raw-rate build/raw_rate --xdp-rate build/xdp_rate
#                                 [--reps 3] [--seconds 2] [--out DIR] [--no-pin]
#
# Rate: namespace B runs `raw_rate send` (1024-byte datagrams, as fast as the device takes them)
# while namespace A receives with each receiver in turn for --seconds, --reps times, receivers
# interleaved within each repetition: raw_rate recv --ring v2, v3, udp; xdp_rate recv --mode skb,
# drv, and drv --spin (busy-polls its RX ring instead of sleeping in poll()). Sender on CPU 0,
# receiver on CPU 1 (--no-pin: unpinned).
# Latency, in each repetition after the rate runs: 300 ping-pongs, one every 2 ms, from
# `xdp_rate ping` (a kernel UDP socket in B) to `raw_rate echo` (v2, v3) and `xdp_rate echo`
# (skb, drv) in A. Then a zero-copy bind (fails on veth) and an ICMP ping to A's kernel while
# the XDP program is attached (it must pass everything but UDP to A's port).
# Writes DIR/rate.jsonl, DIR/rtt.jsonl, DIR/errors.txt and prints a summary table. Needs root.
set -euo pipefail
RAW_RATE="" XDP_RATE="" REPS=3 SECONDS_PER_RUN=2 OUT="" PIN=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --raw-rate) RAW_RATE=$2; shift 2 ;;
    --xdp-rate) XDP_RATE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-pin) PIN=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#'; exit 0 ;;
    *) echo "run_raw_compare: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$RAW_RATE" ]] || { echo "run_raw_compare: --raw-rate '$RAW_RATE' is not an executable" >&2; exit 2; }
[[ -x "$XDP_RATE" ]] || { echo "run_raw_compare: --xdp-rate '$XDP_RATE' is not an executable" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "run_raw_compare: needs root (namespaces, raw sockets, XDP)" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/raw-compare.XXXXXX)}
mkdir -p "$OUT"
: >"$OUT/rate.jsonl"; : >"$OUT/rtt.jsonl"; : >"$OUT/errors.txt"

A="smlxdp$$a" B="smlxdp$$b" VA="xd$$a" VB="xd$$b"
NET="10.79.$(($$ % 250))"
MAC_A=02:00:00:79:00:01
NETTOOL="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/netns" && pwd)/nettool.py"
PORT=48864
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$A"
ip netns add "$B"
ip link add "$VA" netns "$A" address "$MAC_A" type veth peer name "$VB" netns "$B" address 02:00:00:79:00:02
ip -n "$A" addr add "$NET.1/24" dev "$VA"
ip -n "$B" addr add "$NET.2/24" dev "$VB"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "$VA" up
ip -n "$B" link set "$VB" up

pin_rx="" pin_tx=""
if [[ $PIN == 1 ]]; then pin_rx="taskset -c 1"; pin_tx="taskset -c 0"; fi

# wait_ready FILE PID: until FILE says "ready" (5 s), else fail.
wait_ready() {
  local i
  for ((i = 0; i < 500; i++)); do
    grep -q ready "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# rate NAME CMD...: one receive-rate run of the receiver CMD (in A) against the sender (in B).
rate() {
  local name=$1; shift
  local err="$OUT/rx.err" res="$OUT/rx.out"
  : >"$err"; : >"$res"
  ip netns exec "$A" $pin_rx "$@" >"$res" 2>"$err" &
  local rx=$!; pids+=("$rx")
  if ! wait_ready "$err" "$rx"; then
    wait "$rx" || true
    echo "$name: $(cat "$err")" | tee -a "$OUT/errors.txt" >&2
    return 0
  fi
  ip netns exec "$B" $pin_tx "$RAW_RATE" send --if "$VB" --local "$NET.2:40000" --to "$NET.1:$PORT" \
    --dst-mac "$MAC_A" --size 1024 --seconds $((SECONDS_PER_RUN + 2)) >"$OUT/tx.out" 2>"$OUT/tx.err" &
  local tx=$!; pids+=("$tx")
  local rc=0
  wait "$rx" || rc=$?
  wait "$tx" || true
  if [[ $rc != 0 || ! -s "$res" ]]; then
    echo "$name: exit $rc: $(cat "$err")" | tee -a "$OUT/errors.txt" >&2
    return 0
  fi
  python3 - "$name" "$res" "$OUT/tx.out" $((SECONDS_PER_RUN + 2)) >>"$OUT/rate.jsonl" <<'EOF'
import json, sys
name, res, tx, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
r = json.loads(open(res).read().strip().splitlines()[-1])
t = json.loads(open(tx).read().strip().splitlines()[-1])
r["receiver"] = name
r["offered_per_s"] = t["sent"] / secs
print(json.dumps(r))
EOF
  tail -n1 "$OUT/rate.jsonl" | python3 -c 'import json,sys; r=json.load(sys.stdin)
print("%-10s %10.0f/s %6.0f ns  offered %10.0f/s" % (r["receiver"], r["datagrams_per_s"], r["cpu_ns_per_datagram"], r["offered_per_s"]))'
}

# rtt NAME CMD...: the echo server CMD in A, 300 ping-pongs from B.
rtt() {
  local name=$1; shift
  local err="$OUT/echo.err"
  : >"$err"
  ip netns exec "$A" $pin_rx "$@" >"$OUT/echo.out" 2>"$err" &
  local ec=$!; pids+=("$ec")
  if ! wait_ready "$err" "$ec"; then
    wait "$ec" || true
    echo "$name echo: $(cat "$err")" | tee -a "$OUT/errors.txt" >&2
    return 0
  fi
  local line
  if line=$(ip netns exec "$B" $pin_tx "$XDP_RATE" ping --local "$NET.2:40001" --to "$NET.1:$PORT" \
              --count 300 --interval-ms 2 --size 64); then
    echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); r["receiver"]=sys.argv[1]; print(json.dumps(r))' "$name" \
      >>"$OUT/rtt.jsonl"
  else
    echo "$name ping: $line" | tee -a "$OUT/errors.txt" >&2
  fi
  wait "$ec" || true
}

L="$NET.1:$PORT"
echo "== $REPS repetitions: rate (1024-byte datagrams, ${SECONDS_PER_RUN} s per run), then RTT (300 ping-pongs, one every 2 ms, 64-byte payload); load: $(cat /proc/loadavg)"
for ((rep = 1; rep <= REPS; rep++)); do
  rate v2 "$RAW_RATE" recv --if "$VA" --local "$L" --ring v2 --seconds "$SECONDS_PER_RUN"
  rate v3 "$RAW_RATE" recv --if "$VA" --local "$L" --ring v3 --seconds "$SECONDS_PER_RUN"
  rate udp "$RAW_RATE" recv --if "$VA" --local "$L" --ring udp --seconds "$SECONDS_PER_RUN"
  rate xdp-skb "$XDP_RATE" recv --if "$VA" --local "$L" --mode skb --seconds "$SECONDS_PER_RUN"
  rate xdp-drv "$XDP_RATE" recv --if "$VA" --local "$L" --mode drv --seconds "$SECONDS_PER_RUN"
  rate xdp-drv-spin "$XDP_RATE" recv --if "$VA" --local "$L" --mode drv --spin --seconds "$SECONDS_PER_RUN"
  rtt v2 "$RAW_RATE" echo --if "$VA" --local "$L" --ring v2 --count 300 --timeout 20
  rtt v3 "$RAW_RATE" echo --if "$VA" --local "$L" --ring v3 --count 300 --timeout 20
  rtt xdp-skb "$XDP_RATE" echo --if "$VA" --local "$L" --mode skb --count 300 --timeout 20
  rtt xdp-drv "$XDP_RATE" echo --if "$VA" --local "$L" --mode drv --count 300 --timeout 20
done
echo "== zero-copy bind (veth has no zero-copy AF_XDP: expected to fail)"
rate xdp-drv-zc "$XDP_RATE" recv --if "$VA" --local "$L" --mode drv --zerocopy --seconds 1
echo "== with the XDP program attached, ICMP still reaches A's kernel"
ip netns exec "$A" "$XDP_RATE" echo --if "$VA" --local "$L" --mode drv --count 1 --timeout 5 \
  >"$OUT/icmp.out" 2>"$OUT/icmp.err" &
ec=$!; pids+=("$ec")
if wait_ready "$OUT/icmp.err" "$ec" &&
  ip netns exec "$B" python3 "$NETTOOL" ping "$NET.1" --count 1 --timeout 2 >/dev/null; then
  echo "ping through the XDP program: ok"
else
  echo "ping through the XDP program: FAILED" | tee -a "$OUT/errors.txt" >&2
fi
kill "$ec" 2>/dev/null || true; wait "$ec" 2>/dev/null || true
echo "== load after: $(cat /proc/loadavg)"

python3 - "$OUT" <<'EOF'
import json, statistics, sys, collections
out = sys.argv[1]
rows = collections.defaultdict(list)
for line in open(f"{out}/rate.jsonl"):
    r = json.loads(line); rows[r["receiver"]].append(r)
print(f"{'receiver':12s} {'datagrams/s (median; min-max)':>34s} {'CPU/datagram':>22s} {'offered/s':>10s}")
for name, rs in rows.items():
    d = [r["datagrams_per_s"] for r in rs]; c = [r["cpu_ns_per_datagram"] for r in rs]
    o = [r["offered_per_s"] for r in rs]
    print(f"{name:12s} {statistics.median(d):12.0f} ({min(d):8.0f}-{max(d):8.0f}) "
          f"{statistics.median(c):8.0f} ns ({min(c):4.0f}-{max(c):4.0f}) {statistics.median(o):10.0f}")
rtts = collections.defaultdict(list)
for line in open(f"{out}/rtt.jsonl"):
    r = json.loads(line); rtts[r["receiver"]].append(r)
for name, rs in rtts.items():
    f = lambda k: "/".join(f"{r[k]:.0f}" for r in rs)
    print(f"RTT {name:8s} median {f('rtt_us_median')} us  p90 {f('rtt_us_p90')} us  p99 {f('rtt_us_p99')} us  "
          f"lost {sum(r['lost'] for r in rs)}")
EOF
echo "results in $OUT"
