#!/usr/bin/env bash
# The fixture's cluster has the calibrated topology: WORKERS worker hosts and a switch host, each in
# a namespace of its own with a distinct address, joined by a bridge in a namespace of its own;
# static neighbour entries; IPv6 off; MTU as requested; every worker reaches the switch (ICMP echo)
# and one worker reaches another. The fixture's cluster has the default single switch host, which
# keeps the names it had before --switches existed (namespace PREFIX-sw, bridge port sw, host sw
# and sw0, 10.R.0.254) and an unshaped switch link; tests/netns/switches_test.sh covers K > 1.
# Usage: topology_test.sh CLUSTER_SH NAME_FILE WORKERS
CLUSTER_SH=${1:?cluster.sh}
NAME_FILE=${2:?name file}
WORKERS=${3:?workers}
source "$(dirname "$0")/lib.sh"
load_cluster

[[ $CLUSTER_WORKERS == "$WORKERS" ]] || fail "state file says $CLUSTER_WORKERS workers, expected $WORKERS"
read -r -a ips <<<"$CLUSTER_WORKER_IPS"
read -r -a nss <<<"$CLUSTER_WORKER_NS"
((${#ips[@]} == WORKERS && ${#nss[@]} == WORKERS)) || fail "state file lists ${#ips[@]} addresses, ${#nss[@]} namespaces"

# Namespaces: exactly br, sw, w0..w{N-1}.
expected=$( { echo "$NAME-br"; echo "$NAME-sw"; for ((i = 0; i < WORKERS; i++)); do echo "$NAME-w$i"; done; } | sort)
actual=$(ip netns list | awk '{print $1}' | grep -E "^$NAME-" | sort)
[[ "$actual" == "$expected" ]] || fail "namespaces differ: expected [$expected], got [$actual]"
# One switch host (the default) under the old names; the list variables agree with the old ones.
[[ ${CLUSTER_SWITCHES:-} == 1 ]] || fail "state file says CLUSTER_SWITCHES='${CLUSTER_SWITCHES:-}', expected 1"
[[ $CLUSTER_SWITCH_NS == "$NAME-sw" && ${CLUSTER_SWITCH_NSS:-} == "$NAME-sw" ]] ||
    fail "switch namespace '$CLUSTER_SWITCH_NS' / list '${CLUSTER_SWITCH_NSS:-}', expected $NAME-sw"
[[ $CLUSTER_SWITCH_IP == "${CLUSTER_SUBNET%.0/24}.254" && ${CLUSTER_SWITCH_IPS:-} == "$CLUSTER_SWITCH_IP" ]] ||
    fail "switch address '$CLUSTER_SWITCH_IP' / list '${CLUSTER_SWITCH_IPS:-}', expected ${CLUSTER_SUBNET%.0/24}.254"
[[ -z ${CLUSTER_SWITCH_RATE-x} ]] || fail "CLUSTER_SWITCH_RATE is '${CLUSTER_SWITCH_RATE-unset}', expected empty (unlimited)"
ip -n "$CLUSTER_BRIDGE_NS" link show dev sw >/dev/null 2>&1 || fail "the bridge has no port named sw"
for h in sw sw0; do
  got=$(cx "$h" ip netns identify) || fail "exec --host $h failed"
  [[ $got == "$NAME-sw" ]] || fail "exec --host $h ran in namespace '$got', expected $NAME-sw"
done
pass "one switch host under the old names ($NAME-sw, port sw, hosts sw and sw0, $CLUSTER_SWITCH_IP)"
# Nothing of the cluster lives in the caller's namespace.
! ip -o link show | grep -qF -- "$NAME" || fail "interfaces named after the cluster in the root namespace"

# Addresses: what each host's eth0 really carries, all distinct, matching the state file.
addr_of() { ip -n "$1" -4 -o addr show dev eth0 | awk '{print $4}'; }
declare -A seen=()
all_hosts=("${nss[@]}" "$CLUSTER_SWITCH_NS")
all_ips=("${ips[@]}" "$CLUSTER_SWITCH_IP")
for ((i = 0; i < ${#all_hosts[@]}; i++)); do
  a=$(addr_of "${all_hosts[i]}")
  [[ "$a" == "${all_ips[i]}/24" ]] || fail "${all_hosts[i]} has address '$a', state file says ${all_ips[i]}/24"
  [[ -z "${seen[$a]:-}" ]] || fail "address $a used by both ${seen[$a]} and ${all_hosts[i]}"
  seen[$a]=${all_hosts[i]}
  # IPv6 off, static neighbours for every other host, MTU.
  v6=$(ip netns exec "${all_hosts[i]}" cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6 2>/dev/null || echo 1)
  [[ $v6 == 1 ]] || fail "IPv6 is on in ${all_hosts[i]}"
  ! ip -n "${all_hosts[i]}" -6 addr show dev eth0 | grep -q inet6 || fail "${all_hosts[i]} has an IPv6 address"
  perm=$(ip -n "${all_hosts[i]}" neigh show dev eth0 nud permanent | wc -l)
  ((perm == WORKERS)) || fail "${all_hosts[i]} has $perm permanent neighbour entries, expected $WORKERS"
  mtu=$(ip -n "${all_hosts[i]}" -o link show dev eth0 | sed -nE 's/.* mtu ([0-9]+).*/\1/p')
  [[ $mtu == "$CLUSTER_MTU" ]] || fail "${all_hosts[i]} eth0 mtu $mtu, expected $CLUSTER_MTU"
done
((${#seen[@]} == WORKERS + 1)) || fail "expected $((WORKERS + 1)) distinct addresses, got ${#seen[@]}"
pass "$((WORKERS + 1)) hosts with distinct addresses ${!seen[*]}"

# Bridge: one port per host, all attached to br0.
ports=$(ip -n "$CLUSTER_BRIDGE_NS" -o link show master br0 | wc -l)
((ports == WORKERS + 1)) || fail "bridge has $ports ports, expected $((WORKERS + 1))"

# Reachability: every worker pings the switch (in parallel), and worker 0 pings the last worker.
pids=()
for ((i = 0; i < WORKERS; i++)); do
  cx "w$i" "$PYTHON" "$NETTOOL" ping "$CLUSTER_SWITCH_IP" --count 3 --timeout 5 > "$WORK/ping$i.log" 2>&1 &
  pids+=($!)
done
for ((i = 0; i < WORKERS; i++)); do
  wait "${pids[i]}" || { cat "$WORK/ping$i.log"; fail "worker $i (${ips[i]}) cannot reach the switch $CLUSTER_SWITCH_IP"; }
done
cx w0 "$PYTHON" "$NETTOOL" ping "${ips[WORKERS - 1]}" --count 1 --timeout 5 > "$WORK/ping-ww.log" 2>&1 ||
    { cat "$WORK/ping-ww.log"; fail "worker 0 cannot reach worker $((WORKERS - 1))"; }
# An unused address (.253: workers end at .250, the switch is .254) must not answer: the probe can fail.
! cx w0 "$PYTHON" "$NETTOOL" ping "${CLUSTER_SWITCH_IP%.*}.253" --count 1 --timeout 0.3 >/dev/null 2>&1 ||
    fail "an unused address answered a ping: the probe does not detect missing replies"
pass "all $WORKERS workers reach the switch; workers reach each other"
