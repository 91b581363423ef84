#!/usr/bin/env bash
# Several switch hosts and a switch-link rate (cluster.sh up --switches K --switch-rate RATE), on a
# cluster of its own (4 workers, 3 switch hosts, every link at RATE_MBIT):
#  1. the state file lists the 3 switch hosts in order (host 0 also as CLUSTER_SWITCH_IP/_NS) and
#     the switch rate; exactly the namespaces br, sw, sw1, sw2, w0..w3 exist, each switch host
#     carries its address 10.R.0.(254-j) and every host has a static neighbour entry for every
#     other host;
#  2. tbf at RATE_MBIT sits on both ends of every switch link (and of every worker link);
#  3. every worker reaches every switch host and the switch hosts reach each other (ICMP echo);
#  4. `exec --host sw2` runs in switch host 2; `loss --to-switch` drops in every switch host;
#  5. the switch link's rate holds in both directions: two workers sending to switch host 1 at
#     once get RATE_MBIT together, not 2 * RATE_MBIT (bridge side of the link), and switch host 1
#     sending to two workers at once likewise (switch side);
#  6. `down` removes every namespace, the state file and the processes inside switch host 2.
# Usage: switches_test.sh CLUSTER_SH RATE_MBIT
CLUSTER_SH=${1:?cluster.sh}
RATE_MBIT=${2:?rate in Mbit/s}
source "$(dirname "$0")/lib.sh"
require_netns

sml_netns_sweep smlsw  # the cluster of an earlier run killed before its cleanup
NAME=$(sml_netns_owner smlsw)
WORKERS=4 SWITCHES=3 SECONDS_PER_RUN=1.5
sml_at_exit "'$CLUSTER_SH' down --name $NAME >/dev/null 2>&1"
"$CLUSTER_SH" up --name "$NAME" --workers "$WORKERS" --switches "$SWITCHES" --rate "${RATE_MBIT}mbit" \
    --switch-rate "${RATE_MBIT}mbit" > "$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "cluster.sh up failed"; }
# shellcheck disable=SC1090
source "/tmp/switchml-cluster-$NAME.env"
CX=("$CLUSTER_SH" exec --name "$NAME" --host)
net=${CLUSTER_SUBNET%.0/24}

# --- 1. state file, namespaces, addresses, neighbours --------------------------------------------
[[ $CLUSTER_SWITCHES == "$SWITCHES" ]] || fail "CLUSTER_SWITCHES=$CLUSTER_SWITCHES, expected $SWITCHES"
[[ $CLUSTER_SWITCH_IPS == "$net.254 $net.253 $net.252" ]] || fail "CLUSTER_SWITCH_IPS='$CLUSTER_SWITCH_IPS'"
[[ $CLUSTER_SWITCH_NSS == "$NAME-sw $NAME-sw1 $NAME-sw2" ]] || fail "CLUSTER_SWITCH_NSS='$CLUSTER_SWITCH_NSS'"
[[ $CLUSTER_SWITCH_IP == "$net.254" && $CLUSTER_SWITCH_NS == "$NAME-sw" ]] ||
    fail "CLUSTER_SWITCH_IP/NS = $CLUSTER_SWITCH_IP $CLUSTER_SWITCH_NS, expected switch host 0 ($net.254 $NAME-sw)"
[[ $CLUSTER_SWITCH_RATE == "${RATE_MBIT}mbit" ]] || fail "CLUSTER_SWITCH_RATE='$CLUSTER_SWITCH_RATE'"
expected=$( { echo "$NAME-br"; echo "$NAME-sw"; echo "$NAME-sw1"; echo "$NAME-sw2"
              for ((i = 0; i < WORKERS; i++)); do echo "$NAME-w$i"; done; } | sort)
actual=$(ip netns list | awk '{print $1}' | grep -E "^$NAME-" | sort)
[[ "$actual" == "$expected" ]] || fail "namespaces differ: expected [$(echo $expected)], got [$(echo $actual)]"
read -r -a sw_ips <<<"$CLUSTER_SWITCH_IPS"
read -r -a sw_nss <<<"$CLUSTER_SWITCH_NSS"
read -r -a w_ips <<<"$CLUSTER_WORKER_IPS"
read -r -a w_nss <<<"$CLUSTER_WORKER_NS"
hosts=$((WORKERS + SWITCHES))
for ns in "${w_nss[@]}" "${sw_nss[@]}"; do
  perm=$(ip -n "$ns" neigh show dev eth0 nud permanent | wc -l)
  ((perm == hosts - 1)) || fail "$ns has $perm permanent neighbour entries, expected $((hosts - 1))"
done
for ((j = 0; j < SWITCHES; j++)); do
  a=$(ip -n "${sw_nss[j]}" -4 -o addr show dev eth0 | awk '{print $4}')
  [[ $a == "${sw_ips[j]}/24" ]] || fail "${sw_nss[j]} has address '$a', expected ${sw_ips[j]}/24"
done
ports=$(ip -n "$CLUSTER_BRIDGE_NS" -o link show master br0 | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | xargs)
[[ $ports == "sw sw1 sw2 w0 w1 w2 w3" ]] || fail "bridge ports [$ports], expected [sw sw1 sw2 w0 w1 w2 w3]"
pass "$SWITCHES switch hosts ${CLUSTER_SWITCH_IPS// /, } next to $WORKERS workers; state file, namespaces, neighbours"

# --- 2. qdiscs ----------------------------------------------------------------------------------
rate_bps=$((RATE_MBIT * 1000000 / 8))
for ns in "${w_nss[@]}" "${sw_nss[@]}"; do tc -n "$ns" -j qdisc show dev eth0 > "$WORK/qdisc-${ns#"$NAME"-}.json"; done
tc -n "$CLUSTER_BRIDGE_NS" -j qdisc show > "$WORK/qdisc-br.json"
"$PYTHON" - "$WORK" "$rate_bps" sw sw1 sw2 w0 w1 w2 w3 <<'EOF' || fail "qdiscs are not as configured"
import json, sys
work, rate, hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def root(qs, dev=None):
    q = [x for x in qs if x.get("root") and (dev is None or x.get("dev") == dev)]
    return (q[0]["kind"], q[0].get("options", {}).get("rate")) if q else (None, None)
br = json.load(open(f"{work}/qdisc-br.json"))
bad = [f"{where}: {got}, expected tbf at {rate} B/s"
       for h in hosts
       for where, got in ((f"{h} eth0", root(json.load(open(f"{work}/qdisc-{h}.json")))),
                          (f"bridge port {h}", root(br, h)))
       if got != ("tbf", rate)]
if bad:
    print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
pass "tbf $RATE_MBIT Mbit/s on both ends of every switch link and every worker link"

# --- 3. reachability ----------------------------------------------------------------------------
pids=() what=()
for ((i = 0; i < WORKERS; i++)); do
  for ((j = 0; j < SWITCHES; j++)); do
    cx "w$i" "$PYTHON" "$NETTOOL" ping "${sw_ips[j]}" --count 2 --timeout 5 > "$WORK/ping-w$i-sw$j.log" 2>&1 &
    pids+=($!) what+=("w$i-sw$j")
  done
done
cx sw "$PYTHON" "$NETTOOL" ping "${sw_ips[2]}" --count 2 --timeout 5 > "$WORK/ping-sw0-sw2.log" 2>&1 &
pids+=($!) what+=("sw0-sw2")
cx sw2 "$PYTHON" "$NETTOOL" ping "${sw_ips[1]}" --count 2 --timeout 5 > "$WORK/ping-sw2-sw1.log" 2>&1 &
pids+=($!) what+=("sw2-sw1")
cx sw1 "$PYTHON" "$NETTOOL" ping "${w_ips[3]}" --count 2 --timeout 5 > "$WORK/ping-sw1-w3.log" 2>&1 &
pids+=($!) what+=("sw1-w3")
for ((k = 0; k < ${#pids[@]}; k++)); do
  wait "${pids[k]}" || { cat "$WORK/ping-${what[k]}.log"; fail "no echo replies for ${what[k]}"; }
done
# The first unused address below the switch hosts must not answer: the probe can fail.
! cx w0 "$PYTHON" "$NETTOOL" ping "$net.251" --count 1 --timeout 0.3 >/dev/null 2>&1 ||
    fail "an unused address answered a ping: the probe does not detect missing replies"
pass "every worker reaches every switch host; the switch hosts reach each other and the workers"

# --- 4. exec and loss in switch host j ----------------------------------------------------------
got=$(cx sw2 ip netns identify) || fail "exec --host sw2 failed"
[[ $got == "$NAME-sw2" ]] || fail "exec --host sw2 ran in namespace '$got', expected $NAME-sw2"
got=$(cx sw2 ip -4 -o addr show dev eth0 | awk '{print $4}')
[[ $got == "${sw_ips[2]}/24" ]] || fail "exec --host sw2 sees address '$got', expected ${sw_ips[2]}/24"
if cx sw3 true 2> "$WORK/sw3.err"; then fail "exec --host sw3 succeeded on a cluster of 3 switch hosts"; fi
grep -q "does not exist" "$WORK/sw3.err" || fail "exec --host sw3: $(cat "$WORK/sw3.err")"
"$CLUSTER_SH" loss --name "$NAME" --to-switch 0.05 >/dev/null || fail "loss --to-switch failed"
for ns in "${sw_nss[@]}"; do
  rules=$(ip netns exec "$ns" iptables -w -S SMLLOSS)
  grep -qE 'probability 0\.0(5|4999)' <<<"$rules" || fail "loss --to-switch 0.05 did not install a drop rule in $ns"
done
"$CLUSTER_SH" loss --name "$NAME" --to-switch 0 >/dev/null || fail "loss --to-switch 0 failed"
rules=$(ip netns exec "${sw_nss[2]}" iptables -w -S SMLLOSS)
! grep -q DROP <<<"$rules" || fail "loss --to-switch 0 left a drop rule in ${sw_nss[2]}"
pass "exec --host sw2 runs in $NAME-sw2 (sw3 refused); loss --to-switch applies in every switch host"

# --- 5. the switch link's rate ------------------------------------------------------------------
mss=$((CLUSTER_MTU - 52))  # IPv4 + TCP with timestamps
frame=$((CLUSTER_MTU + 14))
# pair SENDER1 SENDER2 RECEIVER1 RECEIVER2 LABEL: two concurrent TCP transfers SENDERk -> RECEIVERk
# (host names; the receivers' addresses in RIP1/RIP2); their summed goodput over the union of their
# intervals must be that of one link at RATE_MBIT.
pair() {
  local s1=$1 s2=$2 r1=$3 r2=$4 label=$5 k sinks=() senders=() rip from to
  for k in 1 2; do
    if ((k == 1)); then to=$r1 rip=$RIP1; else to=$r2 rip=$RIP2; fi
    "${CX[@]}" "$to" -- "$PYTHON" "$NETTOOL" tcp-sink --bind "$rip" --ready-file "$WORK/ready-$label-$k" \
        --json "$WORK/rate-$label-$k.json" --timeout 30 > "$WORK/sink-$label-$k.log" 2>&1 &
    sinks+=($!)
    sml_track $!
  done
  for k in 1 2; do
    sml_wait_file "$WORK/ready-$label-$k" 20 "the $label sink $k's ready file" ||
        { cat "$WORK/sink-$label-$k.log"; fail "$label: sink $k did not start"; }
  done
  for k in 1 2; do
    if ((k == 1)); then from=$s1 rip=$RIP1; else from=$s2 rip=$RIP2; fi
    "${CX[@]}" "$from" -- "$PYTHON" "$NETTOOL" tcp-send "$rip:$(cat "$WORK/ready-$label-$k")" \
        --seconds "$SECONDS_PER_RUN" > "$WORK/send-$label-$k.log" 2>&1 &
    senders+=($!)
    sml_track $!
  done
  for k in 0 1; do
    wait "${senders[k]}" || { cat "$WORK/send-$label-$((k + 1)).log"; fail "$label: sender $((k + 1)) failed"; }
    wait "${sinks[k]}" || { cat "$WORK/sink-$label-$((k + 1)).log"; fail "$label: sink $((k + 1)) failed"; }
  done
  # Upper bound: without the switch link's tbf the two worker links would carry about twice
  # RATE_MBIT together. The lower bound (10% of one link's ideal goodput) only rules out a limit
  # in the wrong unit; how close to it TCP gets is speed (the benchmarks' business).
  "$PYTHON" - "$WORK/rate-$label-1.json" "$WORK/rate-$label-2.json" "$RATE_MBIT" "$mss" "$frame" "$label" <<'EOF' || exit 1
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
rate, mss, frame, label = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
secs = max(a["t_last"], b["t_last"]) - min(a["t_first"], b["t_first"])
mbit = (a["bytes"] + b["bytes"]) * 8 / secs / 1e6
ideal = rate * mss / frame
ok = 0.10 * ideal <= mbit <= 1.02 * rate
print(f"{'ok' if ok else 'FAIL'}: {label}: {mbit:.1f} Mbit/s together ({a['mbit_per_s']:.1f} + "
      f"{b['mbit_per_s']:.1f} each), one link's ideal {ideal:.1f} ({100 * mbit / ideal:.1f}%), limit {rate:.0f}")
sys.exit(0 if ok else 1)
EOF
}
RIP1=${sw_ips[1]} RIP2=${sw_ips[1]} pair w0 w1 sw1 sw1 workers-to-switch1
RIP1=${w_ips[0]} RIP2=${w_ips[1]} pair sw1 sw1 w0 w1 switch1-to-workers

# --- 6. down ------------------------------------------------------------------------------------
"${CX[@]}" sw2 -- sleep 300 &
sleeper=$!
sml_wait_for 30 "a process inside $NAME-sw2" netns_has_pids "$NAME-sw2" ||
    fail "the process started in sw2 does not show in the namespace"
"$CLUSTER_SH" down --name "$NAME" > "$WORK/down.log" 2>&1 || { cat "$WORK/down.log"; fail "down failed"; }
left=$(leftovers "$NAME")
[[ -z "$left" ]] || fail "down left behind: $(echo $left)"
sml_wait_gone "$sleeper" 30 "the process in sw2 to die" || fail "a process inside switch host 2 survived down"
wait "$sleeper" 2>/dev/null || true
pass "down removed all $((hosts + 1)) namespaces, the state file and the process in sw2"
