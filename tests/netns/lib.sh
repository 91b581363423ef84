# shellcheck shell=bash disable=SC2034
# What the emulated-cluster tests (CTest label `netns`) share beyond scripts/lib.sh (sourced here;
# see its header for fail, pass, skip (exit 77, the SKIP_RETURN_CODE of every netns test),
# json_get, sml_track, sml_at_exit, sml_wait_*, sml_netns_*, ...). set -euo pipefail is on.
# Sourcing it makes the work directory $WORK (kept on failure or with KEEP=1; the processes a test
# tracks (sml_track) are stopped at exit, then its sml_at_exit commands run) and, under CTest,
# fails the test once SML_DEADLINE_S seconds have passed (set by tests/netns/CMakeLists.txt below
# the test's TIMEOUT; sml_deadline), so that its exit trap always removes what it made: CTest,
# killing a test at its TIMEOUT, would skip that. A test killed anyway (SIGKILL) leaves things
# behind, which the next run of that test removes first: a test on namespaces of its own names
# them after itself (own_namespaces), a test on the fixture's cluster starts with the cluster
# cleared (load_cluster).
#
# Tests on the fixture's cluster: set CLUSTER_SH (scripts/cluster.sh) and NAME_FILE, then
#   load_cluster; cx HOST CMD...; "${CX[@]}" HOST -- CMD... &; sml_start_switch --via in_sw ...
# Tests on namespaces of their own:
#   require_netns [COMMAND...]      # skips without root, namespaces or the commands
#   own_namespaces TAG              # sweeps an earlier run's leftovers; P=TAG_$$; removed at exit
#   netns_add br sw w0              # namespaces $P-br, $P-sw, $P-w0: lo up, IPv6 off
#   netns_bridges br br0            # a bridge br0 in $P-br
#   netns_bridge_port w0 eth0 02:... br br0 v-w0    # w0's eth0 on br0 (port v-w0)
#   ip -n "$(ns_of w0)" addr add 10.9.0.1/24 dev eth0
#   ref_topology ...                # the reference-client topology (two bridges), see below
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
# The emulated hosts' links never leave this machine: tokens may cross them in plaintext gRPC
# (switches, controllers, workers and `switchml jobs` read it; docs/operations.md "Securing").
export SWITCHML_INSECURE=${SWITCHML_INSECURE-1}

NETTOOL="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/nettool.py"
PYTHON=${PYTHON:-python3}

sml_work_dir "switchml-netns-$(basename "$0" .sh)"
[[ -z ${SML_DEADLINE_S:-} ]] || sml_deadline "$SML_DEADLINE_S" "${0##*/}"

# require_netns [COMMAND...]: exits with SML_SKIP (77) unless this process can create network
# namespaces and has ip, tc and the COMMANDs.
require_netns() {
  local c
  [[ $(id -u) == 0 ]] || skip "the netns tests need root (network namespaces); run ctest as root"
  for c in ip tc "$@"; do command -v "$c" >/dev/null || skip "$c is not installed"; done
  ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available here"
  local probe="smlprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then skip "cannot create network namespaces here"; fi
  ip netns del "$probe"
}

# netns_has_pids NS...: true when a process runs inside every namespace NS.
netns_has_pids() {
  local ns
  for ns in "$@"; do [[ -n "$(ip netns pids "$ns" 2>/dev/null)" ]] || return 1; done
}

# --------------------------------------------------------------------------------------------
# The fixture's cluster

# Loads the fixture's cluster: sets NAME, CX and SW (the switch host's namespace) and sources its
# state file (CLUSTER_* variables). Skips when the fixture's setup skipped (it writes no name file
# then). The tests on this cluster hold RESOURCE_LOCK netns_cluster, so no other test uses it
# now: whatever runs inside it or loss rules are an earlier test's leftovers (one killed before
# its cleanup), removed here, and again at exit.
load_cluster() {
  [[ -s "$NAME_FILE" ]] || skip "no emulated cluster (the netns_cluster_setup test skipped or did not run)"
  NAME=$(cat "$NAME_FILE")
  local sf="/tmp/switchml-cluster-$NAME.env"
  [[ -r "$sf" ]] || fail "cluster '$NAME' from $NAME_FILE has no state file $sf"
  # shellcheck disable=SC1090
  source "$sf"
  CX=("$CLUSTER_SH" exec --name "$NAME" --host)
  SW=$CLUSTER_SWITCH_NS
  clear_cluster
  sml_at_exit clear_cluster
}

# clear_cluster: stops every process inside the loaded cluster's namespaces (never by name) and
# removes its loss rules.
clear_cluster() {
  local nss pids
  mapfile -t nss < <(cluster_namespaces)
  mapfile -t pids < <(sml_netns_pids ${nss[@]+"${nss[@]}"})
  ((${#pids[@]} == 0)) || { echo "stopping processes left in cluster $NAME: ${pids[*]}" >&2; sml_terminate 2 "${pids[@]}"; }
  "$CLUSTER_SH" loss --name "$NAME" --to-switch 0 --from-switch 0 >/dev/null
}
cluster_namespaces() { ip netns list | awk '{print $1}' | grep -E "^$NAME-(br|sw[0-9]*|w[0-9]+)\$" || true; }

# cx HOST CMD...: runs CMD in host HOST (w<i>, sw or sw<j>, br) of the loaded cluster, in the
# foreground.
# To start one in the background use `"${CX[@]}" HOST -- CMD... &` instead: then $! is the pid of
# CMD itself (cluster.sh and ip netns exec both exec), whereas `cx ... &` would fork a subshell and
# $! would be that subshell's pid.
cx() { local h=$1; shift; "${CX[@]}" "$h" -- "$@"; }

# leftovers NAME: prints whatever still carries cluster NAME's prefix (namespaces, links in this
# namespace, the state file); empty when everything is gone.
leftovers() {
  ip netns list | awk '{print $1}' | grep -E "^$1-" || true
  ip -o link show | grep -F -- "$1" || true
  [[ ! -e "/tmp/switchml-cluster-$1.env" ]] || echo "/tmp/switchml-cluster-$1.env"
}

# in_sw CMD...: execs CMD in the switch host's namespace $SW (load_cluster or ref_topology set it):
# the launcher for sml_start_switch --via in_sw.
in_sw() { exec ip netns exec "$SW" "$@"; }

# --------------------------------------------------------------------------------------------
# Namespaces of a test's own

# own_namespaces TAG: removes what earlier runs of this test left (sml_netns_sweep TAG: their
# namespaces, with the processes, interfaces, neighbour entries and rules inside), sets
# P=TAG_<this pid>, the prefix of every namespace this test creates (ns_of), and removes those at
# exit (also at the deadline, or when the test fails). TAG: a few letters no other test uses.
own_namespaces() {
  sml_netns_sweep "$1"
  P=$(sml_netns_owner "$1")
  sml_at_exit remove_own_namespaces
}
ns_of() { echo "$P-$1"; }
own_namespace_list() { ip netns list | awk '{print $1}' | grep -E "^$P-" || true; }
# A switch a test stopped (SIGSTOP) does not see SIGTERM: continue it first.
remove_own_namespaces() {
  local nss pids
  mapfile -t nss < <(own_namespace_list)
  mapfile -t pids < <(sml_netns_pids ${nss[@]+"${nss[@]}"})
  ((${#pids[@]} == 0)) || kill -CONT "${pids[@]}" 2>/dev/null || true
  sml_netns_remove ${nss[@]+"${nss[@]}"}
}

# netns_add HOST...: namespaces $P-HOST with lo up and IPv6 off (so that their kernels send nothing
# on the links by themselves).
netns_add() {
  local h ns
  for h in "$@"; do
    ns=$(ns_of "$h")
    ip netns add "$ns"
    ip netns exec "$ns" sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ ! -e $f ] || echo 1 > $f; done'
    ip -n "$ns" link set lo up
  done
}

# netns_bridges HOST BRIDGE...: Linux bridges in HOST's namespace, up. br_netfilter (if loaded)
# does not see their frames: it would drop every frame with a bad IPv4 header checksum (all of the
# reference client's), where an Ethernet switch checks none.
netns_bridges() {
  local ns b f
  ns=$(ns_of "$1")
  shift
  for f in /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-arptables; do
    ip netns exec "$ns" sh -c "[ ! -e $f ] || echo 0 > $f"
  done
  for b in "$@"; do
    ip -n "$ns" link add name "$b" type bridge
    ip -n "$ns" link set "$b" up
  done
}

# netns_veth [--arp-off] HOST IFACE MAC PEER_HOST PEER_IFACE [PEER_MAC]: a veth pair, IFACE (MAC)
# in HOST's namespace and PEER_IFACE in PEER_HOST's, both up (IFACE without ARP with --arp-off).
netns_veth() {
  local arp=on
  if [[ $1 == --arp-off ]]; then arp=off; shift; fi
  local ns peer_ns peer_mac=()
  ns=$(ns_of "$1") peer_ns=$(ns_of "$4")
  [[ -z ${6:-} ]] || peer_mac=(address "$6")
  ip link add "$2" netns "$ns" address "$3" type veth peer name "$5" netns "$peer_ns" ${peer_mac[@]+"${peer_mac[@]}"}
  ip -n "$ns" link set "$2" arp "$arp"
  ip -n "$ns" link set "$2" up
  ip -n "$peer_ns" link set "$5" up
}

# netns_bridge_port [--arp-off] HOST IFACE MAC BR_HOST BRIDGE PORT: HOST's IFACE (MAC) on BRIDGE of
# BR_HOST's namespace, through PORT.
netns_bridge_port() {
  local opt=()
  if [[ $1 == --arp-off ]]; then opt=(--arp-off); shift; fi
  netns_veth ${opt[@]+"${opt[@]}"} "$1" "$2" "$3" "$4" "$6"
  ip -n "$(ns_of "$4")" link set "$6" master "$5"
}

# ref_topology DATA MGMT MAC_BYTE HOST...: the reference-client topology. A namespace br holding two
# bridges, brdata and brmgmt; each HOST (sw, or a worker w<k>) has a data interface eth0 on brdata
# (DATA.<octet>/24, MAC 02:5e:<MAC_BYTE>1:00:00:<octet in hex>) and a management interface mgmt0
# on brmgmt (MGMT.<octet>/24, MAC 02:5e:<MAC_BYTE>2:00:00:<octet in hex>); octet 254 for sw, k+1
# for w<k>. The workers' eth0 has ARP off (like a DPDK port) and the switch's data address is
# routed over their mgmt0 (a /32 route), as a DPDK host's control traffic goes over a kernel
# interface. Sets BR and SW (namespaces), SW_IP and SW_MAC.
ref_topology() {
  local data=$1 mgmt=$2 mb=$3 h octet opt
  shift 3
  netns_add br "$@"
  netns_bridges br brdata brmgmt
  for h in "$@"; do
    if [[ $h == sw ]]; then octet=254 opt=(); else octet=$((${h#w} + 1)) opt=(--arp-off); fi
    netns_bridge_port "${opt[@]}" "$h" eth0 "02:5e:${mb}1:00:00:$(printf %02x "$octet")" br brdata "d-$h"
    netns_bridge_port "$h" mgmt0 "02:5e:${mb}2:00:00:$(printf %02x "$octet")" br brmgmt "m-$h"
    ip -n "$(ns_of "$h")" addr add "$data.$octet/24" dev eth0
    ip -n "$(ns_of "$h")" addr add "$mgmt.$octet/24" dev mgmt0
  done
  for h in "$@"; do
    [[ $h == sw ]] || ip -n "$(ns_of "$h")" route add "$data.254/32" via "$mgmt.254" dev mgmt0
  done
  BR=$(ns_of br) SW=$(ns_of sw) SW_IP=$data.254 SW_MAC=02:5e:${mb}1:00:00:fe
}
