#!/usr/bin/env bash
# Racks (cluster.sh up --racks R --per-rack r --uplink-rate U), on clusters of its own:
#  1. bad arguments are refused with a message naming the option, and create nothing;
#     `uplinks` on a star cluster is refused;
#  2. 2 racks x 2 workers, worker links RATE_MBIT, uplinks RATE_MBIT / 2 (oversubscription 4:1,
#     printed by `up`): the state file (topology, racks, leaves, parent, uplink names and rate,
#     rank-major worker order), exactly the namespaces core, rb0, rb1, leaf0, leaf1, parent,
#     w0..w3, addresses 10.R.(k+1).(j+1) / .254 / 10.R.0.254, static neighbours everywhere;
#  3. tbf on both ends of every uplink at the uplink rate and of every worker link at the
#     worker rate (the rate tc shows; speeds are not measured here);
#  4. reachability (ICMP echo): every worker to its leaf, to the other rack's leaf, to the
#     parent; workers across racks; a leaf to the parent (after 5: an unused address does not
#     answer, so the probe can fail);
#  5. the uplink counters (`cluster.sh uplinks`) count exactly what crosses: a ping inside a rack
#     adds nothing to either uplink, a ping across racks adds to both, a ping to the parent only
#     to its own rack's;
#  6. `exec --host` reaches leaf<k>, parent, rb<k>, core; `drops` has a line per uplink;
#  7. a failed `up --racks` (iptables fails half way) rolls everything back; a script that
#     fails after bringing a racks cluster up removes it in its exit trap (`down`), including a
#     process running in a leaf; `down` of the test's cluster removes every namespace, the state
#     file and a process running in the parent.
# Usage: racks_test.sh CLUSTER_SH RATE_MBIT
CLUSTER_SH=${1:?cluster.sh}
RATE_MBIT=${2:?worker rate in Mbit/s}
source "$(dirname "$0")/lib.sh"
require_netns

sml_netns_sweep smlrk  # the clusters of an earlier run killed before its cleanup
NAME=$(sml_netns_owner smlrk)
BAD="${NAME}_b" FAILED="${NAME}_f" STAR="${NAME}_s"
for n in "$NAME" "$BAD" "$FAILED" "$STAR"; do sml_at_exit "'$CLUSTER_SH' down --name $n >/dev/null 2>&1"; done
RACKS=2 PER_RACK=2
UPLINK_MBIT=$((PER_RACK * RATE_MBIT / 4))  # 4:1

# --- 1. bad arguments ---------------------------------------------------------------------------
bad() {  # expected-message args...
  local msg=$1; shift
  if "$CLUSTER_SH" "$@" > "$WORK/bad.out" 2>&1; then fail "cluster.sh $* succeeded"; fi
  grep -q -- "$msg" "$WORK/bad.out" || fail "cluster.sh $*: expected '$msg' in: $(cat "$WORK/bad.out")"
}
bad "--racks must be" up --name "$BAD" --racks 0 --per-rack 2
bad "--racks must be" up --name "$BAD" --racks 17 --per-rack 2
bad "--racks must be" up --name "$BAD" --racks two --per-rack 2
bad "--racks needs --per-rack" up --name "$BAD" --racks 2
bad "--per-rack must be" up --name "$BAD" --racks 2 --per-rack 0
bad "--per-rack must be" up --name "$BAD" --racks 2 --per-rack 65
bad "more than 250" up --name "$BAD" --racks 16 --per-rack 16
bad "--workers and --racks exclude each other" up --name "$BAD" --racks 2 --per-rack 2 --workers 4
bad "--switches and --racks exclude each other" up --name "$BAD" --racks 2 --per-rack 2 --switches 2
bad "--uplink-rate must be" up --name "$BAD" --racks 2 --per-rack 2 --uplink-rate fast
bad "--uplink-rate must be above 0" up --name "$BAD" --racks 2 --per-rack 2 --uplink-rate 0mbit
bad "--uplink-burst must be" up --name "$BAD" --racks 2 --per-rack 2 --uplink-burst big
bad "--uplink-rate needs --racks" up --name "$BAD" --workers 2 --uplink-rate 1gbit
bad "--per-rack needs --racks" up --name "$BAD" --workers 2 --per-rack 2
bad "--rate must be" up --name "$BAD" --racks 2 --per-rack 2 --rate fast
bad "--host must be" exec --name "$BAD" --host leafx -- true
[[ -z $(leftovers "$BAD") ]] || fail "rejected arguments left behind: $(echo $(leftovers "$BAD"))"
"$CLUSTER_SH" up --name "$STAR" --workers 1 > /dev/null
bad "has no uplinks" uplinks --name "$STAR"
grep -qx "CLUSTER_TOPOLOGY=star" "/tmp/switchml-cluster-$STAR.env" || fail "a star cluster's state file does not say CLUSTER_TOPOLOGY=star"
"$CLUSTER_SH" down --name "$STAR" > /dev/null
pass "bad arguments refused with a message naming the option, nothing created; uplinks refused on a star cluster"

# --- 2. up, state file, namespaces, addresses, neighbours ---------------------------------------
"$CLUSTER_SH" up --name "$NAME" --racks $RACKS --per-rack $PER_RACK --rate "${RATE_MBIT}mbit" \
    --uplink-rate "${UPLINK_MBIT}mbit" > "$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "cluster.sh up --racks failed"; }
cat "$WORK/up.log"
grep -q "oversubscription 4:1" "$WORK/up.log" || fail "up did not print the oversubscription 4:1"
# shellcheck disable=SC1090
source "/tmp/switchml-cluster-$NAME.env"
CX=("$CLUSTER_SH" exec --name "$NAME" --host)
net=${CLUSTER_SUBNET%.0.0/16}
[[ $CLUSTER_SUBNET == "$net.0.0/16" ]] || fail "CLUSTER_SUBNET='$CLUSTER_SUBNET', expected a /16"
expect() { [[ ${!1} == "$2" ]] || fail "$1='${!1}', expected '$2'"; }
expect CLUSTER_TOPOLOGY racks
expect CLUSTER_RACKS $RACKS
expect CLUSTER_PER_RACK $PER_RACK
expect CLUSTER_WORKERS $((RACKS * PER_RACK))
expect CLUSTER_RACK_OF "0 0 1 1"
expect CLUSTER_WORKER_IPS "$net.1.1 $net.1.2 $net.2.1 $net.2.2"
expect CLUSTER_WORKER_NS "$NAME-w0 $NAME-w1 $NAME-w2 $NAME-w3"
expect CLUSTER_LEAF_IPS "$net.1.254 $net.2.254"
expect CLUSTER_LEAF_NSS "$NAME-leaf0 $NAME-leaf1"
expect CLUSTER_PARENT_IP "$net.0.254"
expect CLUSTER_PARENT_NS "$NAME-parent"
expect CLUSTER_CORE_NS "$NAME-core"
expect CLUSTER_RACK_NSS "$NAME-rb0 $NAME-rb1"
expect CLUSTER_UPLINK_IF uplink
expect CLUSTER_UPLINK_CORE_IFS "rack0 rack1"
expect CLUSTER_UPLINK_RATE "${UPLINK_MBIT}mbit"
expect CLUSTER_OVERSUBSCRIPTION 4
expect CLUSTER_SWITCH_IP "$net.1.254"  # switch host 0 is rack 0's leaf
expect CLUSTER_SWITCH_IPS "$net.1.254 $net.2.254 $net.0.254"
expect CLUSTER_SWITCH_NSS "$NAME-leaf0 $NAME-leaf1 $NAME-parent"
expected=$(printf '%s\n' "$NAME"-{core,rb0,rb1,leaf0,leaf1,parent,w0,w1,w2,w3} | sort)
actual=$(ip netns list | awk '{print $1}' | grep -E "^$NAME-" | sort)
[[ "$actual" == "$expected" ]] || fail "namespaces differ: expected [$(echo $expected)], got [$(echo $actual)]"
read -r -a w_ips <<<"$CLUSTER_WORKER_IPS"
read -r -a w_nss <<<"$CLUSTER_WORKER_NS"
read -r -a leaf_ips <<<"$CLUSTER_LEAF_IPS"
read -r -a leaf_nss <<<"$CLUSTER_LEAF_NSS"
read -r -a rack_nss <<<"$CLUSTER_RACK_NSS"
hosts=("${w_nss[@]}" "${leaf_nss[@]}" "$CLUSTER_PARENT_NS")
host_ips=("${w_ips[@]}" "${leaf_ips[@]}" "$CLUSTER_PARENT_IP")
for i in "${!hosts[@]}"; do
  a=$(ip -n "${hosts[i]}" -4 -o addr show dev eth0 | awk '{print $4}')
  [[ $a == "${host_ips[i]}/16" ]] || fail "${hosts[i]} has address '$a', expected ${host_ips[i]}/16"
  perm=$(ip -n "${hosts[i]}" neigh show dev eth0 nud permanent | wc -l)
  ((perm == ${#hosts[@]} - 1)) || fail "${hosts[i]} has $perm permanent neighbour entries, expected $((${#hosts[@]} - 1))"
done
for k in 0 1; do
  ports=$(ip -n "${rack_nss[k]}" -o link show master br0 | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | xargs)
  want=$(printf '%s\n' leaf uplink "w$((2 * k))" "w$((2 * k + 1))" | sort | xargs)
  [[ $ports == "$want" ]] || fail "rack $k's bridge ports [$ports], expected [$want]"
done
ports=$(ip -n "$CLUSTER_CORE_NS" -o link show master br0 | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | xargs)
[[ $ports == "parent rack0 rack1" ]] || fail "the core bridge's ports [$ports], expected [parent rack0 rack1]"
pass "2 racks x 2: state file, namespaces, addresses, neighbours, bridge ports; oversubscription 4:1 printed"

# --- 3. qdiscs ----------------------------------------------------------------------------------
for ns in "${hosts[@]}"; do tc -n "$ns" -j qdisc show dev eth0 > "$WORK/qdisc-${ns#"$NAME"-}.json"; done
for k in 0 1; do tc -n "${rack_nss[k]}" -j qdisc show > "$WORK/qdisc-rb$k.json"; done
tc -n "$CLUSTER_CORE_NS" -j qdisc show > "$WORK/qdisc-core.json"
"$PYTHON" - "$WORK" $((RATE_MBIT * 125000)) $((UPLINK_MBIT * 125000)) <<'EOF' || fail "qdiscs are not as configured"
import json, sys
work, rate, uplink = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def root(name, dev):
    # The hosts' files hold eth0 only (tc names no dev then); the bridges' hold every port.
    q = [x for x in json.load(open(f"{work}/qdisc-{name}.json")) if x.get("root") and x.get("dev", "eth0") == dev]
    return (q[0]["kind"], q[0].get("options", {}).get("rate")) if q else (None, None)
want = {("rb0", "uplink"): uplink, ("rb1", "uplink"): uplink, ("core", "rack0"): uplink, ("core", "rack1"): uplink}
for w in range(4):
    want[(f"w{w}", "eth0")] = rate
    want[(f"rb{w // 2}", f"w{w}")] = rate
bad = [f"{ns} {dev}: {root(ns, dev)}, expected tbf at {r} B/s" for (ns, dev), r in want.items() if root(ns, dev) != ("tbf", r)]
# The leaves' and the parent's links are not shaped without --switch-rate.
bad += [f"{ns} {dev}: {root(ns, dev)[0]}, expected no tbf"
        for ns, dev in (("leaf0", "eth0"), ("rb0", "leaf"), ("parent", "eth0"), ("core", "parent"))
        if root(ns, dev)[0] == "tbf"]
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
pass "tbf ${UPLINK_MBIT} Mbit/s on both ends of both uplinks, ${RATE_MBIT} Mbit/s on both ends of every worker link"

# --- 4. reachability ----------------------------------------------------------------------------
pids=() what=()
ping_from() {  # host address label
  cx "$1" "$PYTHON" "$NETTOOL" ping "$2" --count 2 --timeout 5 > "$WORK/ping-$3.log" 2>&1 &
  pids+=($!) what+=("$3")
}
for i in 0 1 2 3; do
  k=$((i / PER_RACK))
  ping_from "w$i" "${leaf_ips[k]}" "w$i-own-leaf"
  ping_from "w$i" "${leaf_ips[1 - k]}" "w$i-other-leaf"
  ping_from "w$i" "$CLUSTER_PARENT_IP" "w$i-parent"
done
ping_from w0 "${w_ips[2]}" w0-w2
ping_from w1 "${w_ips[3]}" w1-w3
ping_from w3 "${w_ips[0]}" w3-w0
ping_from leaf0 "$CLUSTER_PARENT_IP" leaf0-parent
ping_from parent "${leaf_ips[1]}" parent-leaf1
for ((k = 0; k < ${#pids[@]}; k++)); do
  wait "${pids[k]}" || { cat "$WORK/ping-${what[k]}.log"; fail "no echo replies for ${what[k]}"; }
done
pass "every worker reaches both leaves and the parent; workers across racks; leaf <-> parent"

# --- 5. uplink counters -------------------------------------------------------------------------
# uplink_sum K: tx + rx bytes of rack K's uplink (rack side) from `cluster.sh uplinks`.
uplinks() { "$CLUSTER_SH" uplinks --name "$NAME" > "$WORK/uplinks.txt" || fail "cluster.sh uplinks failed"; }
uplink_sum() {
  awk -v k="rack$1" '$1 == k { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                               print v["tx_bytes"] + v["rx_bytes"] }' "$WORK/uplinks.txt"
}
uplinks
grep -qx "rack1 ns=$NAME-rb1 if=uplink core_if=rack1 tx_bytes=[0-9]* rx_bytes=[0-9]*" "$WORK/uplinks.txt" ||
    fail "cluster.sh uplinks printed: $(cat "$WORK/uplinks.txt")"
a0=$(uplink_sum 0) a1=$(uplink_sum 1)
cx w0 "$PYTHON" "$NETTOOL" ping "${w_ips[1]}" --count 3 --timeout 5 >/dev/null || fail "w0 -> w1 ping failed"
cx w3 "$PYTHON" "$NETTOOL" ping "${leaf_ips[1]}" --count 3 --timeout 5 >/dev/null || fail "w3 -> leaf1 ping failed"
uplinks
b0=$(uplink_sum 0) b1=$(uplink_sum 1)
((b0 == a0 && b1 == a1)) || fail "pings inside the racks crossed an uplink: rack0 $a0 -> $b0, rack1 $a1 -> $b1 bytes"
cx w0 "$PYTHON" "$NETTOOL" ping "${w_ips[3]}" --count 3 --timeout 5 >/dev/null || fail "w0 -> w3 ping failed"
uplinks
c0=$(uplink_sum 0) c1=$(uplink_sum 1)
# 3 requests and 3 replies, each an Ethernet frame of more than 60 bytes, cross both uplinks.
((c0 - b0 >= 360 && c1 - b1 >= 360)) || fail "a ping across racks: rack0 +$((c0 - b0)), rack1 +$((c1 - b1)) bytes, expected >= 360 each"
cx w2 "$PYTHON" "$NETTOOL" ping "$CLUSTER_PARENT_IP" --count 3 --timeout 5 >/dev/null || fail "w2 -> parent ping failed"
uplinks
d0=$(uplink_sum 0) d1=$(uplink_sum 1)
((d0 == c0 && d1 - c1 >= 360)) || fail "a ping rack 1 -> parent: rack0 +$((d0 - c0)) (expected 0), rack1 +$((d1 - c1)) bytes"
pass "uplink counters: nothing for traffic inside a rack, both uplinks across racks, one to the parent"
# After the counters: the kernel broadcasts ARP requests for an address it has no entry for.
! cx w0 "$PYTHON" "$NETTOOL" ping "$net.3.1" --count 1 --timeout 0.3 >/dev/null 2>&1 ||
    fail "an unused address answered a ping: the probe does not detect missing replies"
pass "an unused address does not answer: the probe detects missing replies"

# --- 6. exec, drops -----------------------------------------------------------------------------
for h in leaf1 parent rb0 core; do
  got=$(cx "$h" ip netns identify) || fail "exec --host $h failed"
  [[ $got == "$NAME-$h" ]] || fail "exec --host $h ran in namespace '$got', expected $NAME-$h"
done
"$CLUSTER_SH" drops --name "$NAME" > "$WORK/drops.txt" || fail "cluster.sh drops failed"
for h in w0 w3 leaf0 leaf1 parent rack0-uplink rack1-uplink; do
  grep -q "^$h .*tbf_out=[0-9]* tbf_in=[0-9]*$" "$WORK/drops.txt" || fail "drops has no line for $h: $(cat "$WORK/drops.txt")"
done
pass "exec --host leaf1/parent/rb0/core; drops has a line per host and per uplink"

# --- 7. rollback, down after a failure, down --------------------------------------------------
if IPTABLES=false "$CLUSTER_SH" up --name "$BAD" --racks 2 --per-rack 1 --loss-to-switch 0.1 > "$WORK/half.out" 2>&1; then
  fail "up --racks succeeded although iptables failed"
fi
grep -q "removing what was created" "$WORK/half.out" || fail "up --racks did not roll back: $(cat "$WORK/half.out")"
[[ -z $(leftovers "$BAD") ]] || fail "the rollback of a failed up --racks left: $(echo $(leftovers "$BAD"))"
# A script that brings a cluster up, starts a process in a leaf and then fails: its exit trap's
# `down` removes everything.
rc=0
bash -c 'CLUSTER_SH=$1 NAME=$2
         trap "\"\$CLUSTER_SH\" down --name \"\$NAME\" > /dev/null" EXIT
         "$CLUSTER_SH" up --name "$NAME" --racks 2 --per-rack 1 --uplink-rate 100mbit > /dev/null || exit 3
         "$CLUSTER_SH" exec --name "$NAME" --host leaf1 -- sleep 300 &
         echo $! > "$3"
         for _ in $(seq 100); do [[ -n $(ip netns pids "$NAME-leaf1") ]] && break; sleep 0.1; done
         exit 7  # the failure' _ "$CLUSTER_SH" "$FAILED" "$WORK/failed-pid" || rc=$?
((rc == 7)) || fail "the failing script exited $rc, expected 7 (3: its up failed)"
[[ -z $(leftovers "$FAILED") ]] || fail "down in the exit trap of a failed script left: $(echo $(leftovers "$FAILED"))"
sml_wait_gone "$(cat "$WORK/failed-pid")" 30 "the process in the failed script's leaf1" ||
    fail "a process inside leaf1 survived down"
"${CX[@]}" parent -- sleep 300 &
sleeper=$!
sml_wait_for 30 "a process inside $NAME-parent" netns_has_pids "$NAME-parent" ||
    fail "the process started in the parent does not show in the namespace"
"$CLUSTER_SH" down --name "$NAME" > "$WORK/down.log" 2>&1 || { cat "$WORK/down.log"; fail "down failed"; }
grep -q "removed (10 namespaces)" "$WORK/down.log" || fail "down: $(cat "$WORK/down.log")"
[[ -z $(leftovers "$NAME") ]] || fail "down left behind: $(echo $(leftovers "$NAME"))"
sml_wait_gone "$sleeper" 30 "the process in the parent to die" || fail "a process inside the parent survived down"
wait "$sleeper" 2>/dev/null || true
pass "a failed up --racks rolls back; a failing script's trap and down remove every namespace, the state file and the processes inside"
