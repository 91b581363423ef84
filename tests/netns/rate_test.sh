#!/usr/bin/env bash
# The per-link rate limit holds in both directions: a TCP transfer worker 0 -> switch (shaped by
# the tbf on the worker's side) and switch -> worker 1 (shaped by the tbf on the bridge's side)
# each reach R * (MSS / frame) within a few percent, never more than R. tbf counts L2 frame bytes:
# with MTU 1500 and TCP timestamps the goodput is R * 1448/1514. Also checks the qdiscs themselves
# (both ends of every worker link shaped at R, switch link unshaped).
# Usage: rate_test.sh CLUSTER_SH NAME_FILE RATE_MBIT
CLUSTER_SH=${1:?cluster.sh}
NAME_FILE=${2:?name file}
RATE_MBIT=${3:?rate in Mbit/s}
source "$(dirname "$0")/lib.sh"
load_cluster
SECONDS_PER_RUN=1.5

# tbf configuration: `tc -j` reports the rate in bytes per second. One python run checks all.
rate_bps=$((RATE_MBIT * 1000000 / 8))
for ((i = 0; i < CLUSTER_WORKERS; i++)); do tc -n "$NAME-w$i" -j qdisc show dev eth0 > "$WORK/qdisc-w$i.json"; done
tc -n "$CLUSTER_SWITCH_NS" -j qdisc show dev eth0 > "$WORK/qdisc-sw.json"
tc -n "$CLUSTER_BRIDGE_NS" -j qdisc show > "$WORK/qdisc-br.json"
"$PYTHON" - "$WORK" "$CLUSTER_WORKERS" "$rate_bps" <<'EOF' || fail "qdiscs are not as configured"
import json, sys
work, n, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def root(qs, dev=None):
    q = [x for x in qs if x.get("root") and (dev is None or x.get("dev") == dev)]
    return (q[0]["kind"], q[0].get("options", {}).get("rate")) if q else (None, None)
br = json.load(open(f"{work}/qdisc-br.json"))
bad = []
for i in range(n):
    for where, got in ((f"worker {i} eth0", root(json.load(open(f"{work}/qdisc-w{i}.json")))),
                       (f"bridge port w{i}", root(br, f"w{i}"))):
        if got != ("tbf", rate):
            bad.append(f"{where}: {got}, expected tbf at {rate} B/s")
for where, got in (("switch eth0", root(json.load(open(f"{work}/qdisc-sw.json")))), ("bridge port sw", root(br, "sw"))):
    if got[0] == "tbf":
        bad.append(f"{where} is shaped; the switch link must not be")
if bad:
    print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
pass "tbf $RATE_MBIT Mbit/s on both ends of all $CLUSTER_WORKERS worker links; switch link unshaped"

read -r -a ips <<<"$CLUSTER_WORKER_IPS"
mss=$((CLUSTER_MTU - 52))  # IPv4 + TCP with timestamps
frame=$((CLUSTER_MTU + 14))

# measure FROM_HOST TO_HOST TO_IP LABEL: one transfer, checks the receiver's goodput.
measure() {
  local from=$1 to=$2 to_ip=$3 label=$4 ready="$WORK/ready-$4" out="$WORK/rate-$4.json"
  "${CX[@]}" "$to" -- "$PYTHON" "$NETTOOL" tcp-sink --bind "$to_ip" --ready-file "$ready" --json "$out" --timeout 30 \
      > "$WORK/sink-$label.log" 2>&1 &
  local sink=$!
  sml_track "$sink"
  sml_wait_file "$ready" 20 "the $label sink's ready file" || { cat "$WORK/sink-$label.log"; fail "$label: sink did not start"; }
  cx "$from" "$PYTHON" "$NETTOOL" tcp-send "$to_ip:$(cat "$ready")" --seconds "$SECONDS_PER_RUN" \
      > "$WORK/send-$label.log" 2>&1 || { cat "$WORK/send-$label.log"; fail "$label: sender failed"; }
  wait "$sink" || { cat "$WORK/sink-$label.log"; fail "$label: sink failed"; }
  local mbit; mbit=$(json_get "$out" "'%.1f' % j['mbit_per_s']")
  # The upper bound is what this test checks: an unshaped veth carries several Gbit/s, so a
  # missing limit fails it by far. The lower bound (10% of the ideal goodput) only rules out a
  # limit set in the wrong unit (kbit for mbit, a factor of 1000); how close to the limit TCP
  # gets is speed, which depends on the machine's load and is the benchmarks' business.
  "$PYTHON" - "$mbit" "$RATE_MBIT" "$mss" "$frame" "$label" <<'EOF' || exit 1
import sys
mbit, rate, mss, frame, label = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ideal = rate * mss / frame
ok = 0.10 * ideal <= mbit <= 1.02 * rate
print(f"{'ok' if ok else 'FAIL'}: {label}: {mbit:.1f} Mbit/s goodput, ideal {ideal:.1f} ({100 * mbit / ideal:.1f}%), limit {rate:.0f}")
sys.exit(0 if ok else 1)
EOF
}

measure w0 sw "$CLUSTER_SWITCH_IP" worker0-to-switch
measure sw w1 "${ips[1]}" switch-to-worker1

# `cluster.sh drops` finds where datagrams were lost: worker 1 holds a UDP socket with the
# smallest receive buffer and never reads it; 300 datagrams from the switch host overflow it
# (udp_rcvbuf and udp_in_errors of w1 grow) and nothing else moves: worker 0's counters and the
# tbf drops of worker 1's link stay as they were.
drops() { "$CLUSTER_SH" drops --name "$NAME" > "$WORK/drops-$1.txt" || fail "cluster.sh drops failed"; }
field() { sed -n "s/^$2 .*$3=\([0-9]*\).*/\1/p" "$WORK/drops-$1.txt"; }
drops before
cx w1 "$PYTHON" -c "
import os, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
s.bind(('0.0.0.0', 0))
open(sys.argv[1] + '.tmp', 'w').write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(120)  # never reads the socket; the test kills it (sml_track: also on failure)
" "$WORK/sink-port" &
sink=$!
sml_track "$sink"
sml_wait_file "$WORK/sink-port" 20 "the never-reading sink's port file" || fail "the sink did not start"
cx sw "$PYTHON" -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(300):
    s.sendto(b'x' * 1000, (sys.argv[1], int(sys.argv[2])))
" "${ips[1]}" "$(cat "$WORK/sink-port")" || fail "sending to the sink failed"
sleep 0.5  # let the last datagrams arrive (the counters are read after, not timed)
drops after
kill "$sink" 2>/dev/null || true
grow=$(( $(field after w1 udp_rcvbuf) - $(field before w1 udp_rcvbuf) ))
((grow > 0)) || { cat "$WORK"/drops-*.txt; fail "a full receive buffer on worker 1 shows no udp_rcvbuf drops"; }
for host_counter in "w0 udp_rcvbuf" "w0 tbf_in" "w0 tbf_out" "w1 tbf_in" "w1 tbf_out"; do
  # shellcheck disable=SC2086
  [ "$(field after $host_counter)" = "$(field before $host_counter)" ] ||
    { cat "$WORK"/drops-*.txt; fail "cluster.sh drops: $host_counter moved although nothing was lost there"; }
done
pass "cluster.sh drops: $grow of 300 datagrams to a full socket on worker 1 counted as udp_rcvbuf there, other counters unchanged"
