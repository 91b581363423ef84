#!/usr/bin/env bash
# cluster.sh — an emulated cluster of hosts on one Linux machine, for tests and benchmarks.
#
# Topology (the one calibrated in docs/benchmarks.md#measured-on-the-development-machine):
#
#   PREFIX-w0  (eth0 10.R.0.1)   ──veth── w0  ┐
#   PREFIX-w1  (eth0 10.R.0.2)   ──veth── w1  ├─ br0   (bridge, in namespace PREFIX-br)
#   ...                                       │
#   PREFIX-sw  (eth0 10.R.0.254) ──veth── sw  ┤   switch host 0
#   PREFIX-sw1 (eth0 10.R.0.253) ──veth── sw1 ┤   switch host 1 (--switches K > 1 only)
#   ...                                       ┘   ... switch host K-1 at 10.R.0.(254-(K-1))
#
# Every host is a network namespace of its own; the bridge lives in a namespace of its own too, so
# nothing at all is created in the caller's namespace and two clusters never share an interface
# name. Veth pairs are created directly inside the namespaces. Optional tbf rate limits sit on both
# ends of every worker link (worker side: worker->bridge; bridge side: bridge->worker) and,
# separately (--switch-rate), on both ends of every switch host's link (switch side:
# switch->bridge; bridge side: bridge->switch); by default the switch links are unshaped (one
# switch host is the fabric and must carry n*R). Neighbour entries are static, IPv6 is off.
# Optional random loss is an iptables statistic DROP rule in INPUT on the receiving side (every
# switch namespace for worker->switch loss, worker namespaces for switch->worker loss); dropping in
# OUTPUT would make sendmmsg fail with EPERM.
#
# Racks (`up --racks R --per-rack r --uplink-rate U`): a two-level topology instead of the star.
#
#   PREFIX-w0 ──┐                                    ┌── PREFIX-w<r> ...
#   PREFIX-w1 ──┼─ br0 (PREFIX-rb0) ─uplink─┐   ┌─uplink─ br0 (PREFIX-rb1) ─┤
#   PREFIX-leaf0┘   rack 0          rack0 ├─ br0 (PREFIX-core) ─┤ rack1   rack 1   └── PREFIX-leaf1
#                                          PREFIX-parent (parent switch host)
#
# Rack k holds workers k*r .. k*r+r-1 (rank order is rack-major) and the leaf switch host
# PREFIX-leaf<k>, joined by a bridge in PREFIX-rb<k>; the rack's uplink is a veth pair, `uplink`
# in PREFIX-rb<k> and `rack<k>` in the core bridge's namespace PREFIX-core, which also holds the
# parent switch host's link. One L2 domain 10.R.0.0/16 (worker j of rack k 10.R.(k+1).(j+1),
# leaf k 10.R.(k+1).254, parent 10.R.0.254); static neighbour entries everywhere and static
# bridge forwarding entries (no flooding, so an uplink carries only the traffic that crosses it).
# tbf: worker links at --rate, leaf and parent links at --switch-rate, uplinks at --uplink-rate,
# each on both ends.
#
# Everything a cluster owns carries its name: namespaces PREFIX-br, PREFIX-sw, PREFIX-sw<j> (j >= 1),
# PREFIX-w<i> (racks: PREFIX-core, PREFIX-rb<k>, PREFIX-leaf<k>, PREFIX-parent, PREFIX-w<i>) and the
# state file /tmp/switchml-cluster-PREFIX.env. `down` removes exactly those, killing only the
# processes that run inside those namespaces (never by process name). Run `cluster.sh --help`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Plaintext tokens between the emulated hosts (see `exec` in the usage).
export SWITCHML_INSECURE=${SWITCHML_INSECURE-1}

PROG=$(basename "$0")
STATE_DIR=/tmp
IPTABLES=${IPTABLES:-iptables}
LOSS_CHAIN=SMLLOSS
MAX_WORKERS=250
MAX_SWITCHES=8
MAX_RACKS=16
MAX_PER_RACK=64

usage() {
  cat <<EOF
Usage:
  $PROG up   --name PREFIX --workers N [--switches K] [--rate RATE] [--burst SIZE]
             [--switch-rate RATE] [--switch-burst SIZE] [--mtu 1500|9000]
             [--loss-to-switch P] [--loss-from-switch P]
  $PROG up   --name PREFIX --racks R --per-rack r [--uplink-rate RATE] [--uplink-burst SIZE]
             [--rate RATE] [--burst SIZE] [--switch-rate RATE] [--switch-burst SIZE] [--mtu M]
             [--loss-to-switch P] [--loss-from-switch P]
  $PROG down --name PREFIX
  $PROG loss --name PREFIX [--to-switch P] [--from-switch P]
  $PROG exec --name PREFIX --host w<i>|sw|sw<j>|br|leaf<k>|parent|rb<k>|core -- COMMAND [ARGS...]
  $PROG info --name PREFIX
  $PROG drops --name PREFIX
  $PROG uplinks --name PREFIX
  $PROG list

Emulated cluster: one network namespace per worker host (PREFIX-w0 .. PREFIX-w<N-1>), one per
switch host (host 0 is PREFIX-sw, hosts 1..K-1 are PREFIX-sw1 .. PREFIX-sw<K-1>; with the default
K = 1 there is just PREFIX-sw) and one holding the Linux bridge that joins them all (PREFIX-br).
Needs root, iproute2 (ip, tc) and iptables.

Commands:
  up      Create a cluster. Fails (and changes nothing) if one with this name exists; rolls back
          what it created if a step fails.
  down    Remove every namespace of the cluster and its state file, after killing the processes
          that run inside those namespaces (SIGTERM, then SIGKILL after 2 s). Idempotent: exits 0
          when nothing exists. Also cleans up after a crashed run.
  loss    Replace the random-loss rules of a running cluster (0 removes them).
  exec    Run COMMAND inside a host's namespace (w3 = worker 3; sw or sw0 = switch host 0,
          sw2 = switch host 2; br = bridge; racks: leaf1 = rack 1's leaf switch host, parent =
          the parent switch host, rb1 = rack 1's bridge, core = the core bridge). COMMAND runs
          with SWITCHML_INSECURE=1 unless the caller set it: the emulated hosts' links never
          leave this machine, so tokens may cross them in plaintext gRPC (switches, controllers,
          workers and \`switchml jobs\` all read it; docs/operations.md "Securing").
  info    Print the state file (shell variables, see below).
  drops   Print, per host, where datagrams were dropped since the cluster came up, one line
          each: \`HOST udp_rcvbuf=N udp_in_errors=N tbf_out=N tbf_in=N\` (UDP receive-buffer
          overflows and all UDP receive errors of the host's namespace, /proc/net/snmp; packets
          the tbf qdisc dropped on the host's side of its link and on the bridge's side, i.e.
          towards the host). Counters only grow: take the difference of two calls. Racks: one
          more line per rack, \`rack<k>-uplink tbf_out=N tbf_in=N\` (tbf drops of the uplink on
          the rack side, towards the core, and on the core side, towards the rack).
  uplinks Racks only: one line per rack, \`rack<k> ns=NS if=uplink core_if=rack<k> tx_bytes=N
          rx_bytes=N\`: the byte counters of the rack side of its uplink (NS = PREFIX-rb<k>;
          tx = rack to core, rx = core to rack; frames with their Ethernet header, no FCS).
  list    Show the clusters that exist (including leftovers of crashed runs).

Options:
  --name PREFIX          1-32 characters [A-Za-z0-9_]; choose a unique one per run, e.g. sml\$\$.
  --workers N            Worker hosts, 1..$MAX_WORKERS (and N + K <= 254).
  --switches K           Switch hosts, 1..$MAX_SWITCHES (default 1).
  --rate RATE            tbf rate limit on each worker link, in tc units (e.g. 500mbit, 1gbit);
                         applied on both ends of the link. Default: unlimited.
  --burst SIZE           tbf burst of the worker links (default 256kb; use >= 1mb above a few
                         Gbit/s).
  --switch-rate RATE     tbf rate limit on each switch host's link, on both ends (switch->bridge
                         and bridge->switch). Default: unlimited (one switch host carries n*R).
  --switch-burst SIZE    tbf burst of the switch links (default: the --burst value).
  --mtu M                MTU of every link (default 1500; 9000 for jumbo frames).
  --loss-to-switch P     Drop each UDP datagram arriving at a switch host with probability P.
  --loss-from-switch P   Drop each UDP datagram arriving at a worker host with probability P.
  --racks R              Racks instead of the star: 1..$MAX_RACKS racks (needs --per-rack; excludes
                         --workers and --switches). The switch hosts are the R leaves and the parent.
  --per-rack r           Worker hosts per rack, 1..$MAX_PER_RACK (R x r <= $MAX_WORKERS).
  --uplink-rate RATE     tbf rate limit on each rack's uplink (rack <-> core), on both ends.
                         Default: unlimited. With --rate, \`up\` prints the oversubscription
                         r x RATE / uplink rate (e.g. 4:1).
  --uplink-burst SIZE    tbf burst of the uplinks (default: the --burst value).

Addresses: subnet 10.R.0.0/24 with R = 1 + (cksum of PREFIX) mod 250; worker i is 10.R.0.(i+1),
switch host j is 10.R.0.(254-j) (interface eth0 in every host). MAC of host with last octet X is
02:00:0a:RR:00:XX. Namespaces isolate addresses, so clusters that happen to share R never clash.
Every host has a static neighbour entry for every other host (workers and switch hosts).
Racks: subnet 10.R.0.0/16; worker j of rack k (global index i = k*r + j, namespace PREFIX-w<i>)
is 10.R.(k+1).(j+1), rack k's leaf switch host (PREFIX-leaf<k>) 10.R.(k+1).254, the parent
switch host (PREFIX-parent) 10.R.0.254; MAC 02:00:0a:RR:YY:XX for address 10.R.Y.X. Switch host
j is leaf j for j < R and the parent for j = R (so switch host 0, CLUSTER_SWITCH_IP, is rack 0's
leaf). Every bridge has a static forwarding entry for every host's MAC.

State file: $STATE_DIR/switchml-cluster-PREFIX.env, shell syntax, for other scripts:
  CLUSTER_NAME CLUSTER_WORKERS CLUSTER_SUBNET CLUSTER_BRIDGE_NS
  CLUSTER_WORKER_IPS CLUSTER_WORKER_NS (space-separated, in rank order)
  CLUSTER_SWITCHES (K) CLUSTER_SWITCH_IPS CLUSTER_SWITCH_NSS (space-separated, host 0 first)
  CLUSTER_SWITCH_IP CLUSTER_SWITCH_NS (switch host 0)
  CLUSTER_RATE CLUSTER_BURST CLUSTER_SWITCH_RATE CLUSTER_SWITCH_BURST (rates empty: unlimited)
  CLUSTER_MTU CLUSTER_LOSS_TO_SWITCH CLUSTER_LOSS_FROM_SWITCH
  CLUSTER_TOPOLOGY (star or racks)
Racks also (lists space-separated, rack 0 first; CLUSTER_BRIDGE_NS is the core bridge's):
  CLUSTER_RACKS CLUSTER_PER_RACK CLUSTER_RACK_OF (each worker's rack, in rank order)
  CLUSTER_LEAF_IPS CLUSTER_LEAF_NSS CLUSTER_PARENT_IP CLUSTER_PARENT_NS CLUSTER_CORE_NS
  CLUSTER_RACK_NSS (the racks' bridge namespaces, which hold the rack side of the uplinks)
  CLUSTER_UPLINK_IF (the rack side's interface name, \`uplink\` in every rack namespace)
  CLUSTER_UPLINK_CORE_IFS (the core side's, rack0 rack1 ..., in CLUSTER_CORE_NS)
  CLUSTER_UPLINK_RATE CLUSTER_UPLINK_BURST CLUSTER_OVERSUBSCRIPTION (r x rate / uplink rate;
  empty when either is unlimited)

Example:
  $PROG up --name demo --workers 4 --rate 500mbit
  source $STATE_DIR/switchml-cluster-demo.env
  $PROG exec --name demo --host sw -- switchml switch --bind \$CLUSTER_SWITCH_IP &
  sleep 1; pids=()
  for i in 0 1 2 3; do
    $PROG exec --name demo --host w\$i -- switchml allreduce --rank \$i --workers 4 \\
        --controller \$CLUSTER_SWITCH_IP:50099 & pids+=(\$!)
  done
  wait "\${pids[@]}"
  $PROG down --name demo     # also stops the switch

  $PROG up --name racks --racks 2 --per-rack 4 --rate 500mbit --uplink-rate 500mbit   # 4:1
  $PROG uplinks --name racks  # byte counters of each rack's uplink
EOF
}

SML_DIE_STATUS=1  # die (scripts/lib.sh): "cluster.sh: error: ..." on stderr, exit 1
note() { echo "$PROG: $*" >&2; }

# ---------------------------------------------------------------------------------------------
# Names and addresses.

check_name() {
  [[ -n "${NAME:-}" ]] || die "--name is required"
  [[ "$NAME" =~ ^[A-Za-z0-9_]{1,32}$ ]] || die "--name must be 1-32 characters of [A-Za-z0-9_], got '$NAME'"
}
state_file() { echo "$STATE_DIR/switchml-cluster-$1.env"; }
subnet_octet() { local c; c=$(printf '%s' "$1" | cksum | cut -d' ' -f1); echo $((1 + c % 250)); }
host_mac() { printf '02:00:0a:%02x:00:%02x' "$1" "$2"; }  # (R, last octet)
host_mac3() { printf '02:00:0a:%02x:%02x:%02x' "$1" "$2" "$3"; }  # (R, third octet, last octet)
# Switch host j of cluster $1: namespace (host 0 keeps the name PREFIX-sw), bridge port, address.
switch_ns() { if (($2 == 0)); then echo "$1-sw"; else echo "$1-sw$2"; fi; }
switch_port() { if (($1 == 0)); then echo sw; else echo "sw$1"; fi; }
switch_octet() { echo $((254 - $1)); }

# Namespaces of cluster $1 that exist now (exact pattern, so prefix "a" never matches "ab-w0").
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^$1-(br|sw[0-9]*|w[0-9]+|core|rb[0-9]+|leaf[0-9]+|parent)\$" || true
}
ns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$1"; }

# ---------------------------------------------------------------------------------------------
# Loss.

check_probability() {  # name value
  [[ "$2" =~ ^(0(\.[0-9]+)?|\.[0-9]+|1(\.0*)?)$ ]] || die "$1 must be a probability in [0, 1), got '$2'"
  awk -v p="$2" 'BEGIN { exit !(p < 1) }' || die "$1 must be below 1, got '$2'"
}
is_zero() { awk -v p="$1" 'BEGIN { exit !(p == 0) }'; }

# rate_bits RATE: a tc rate (500mbit, 1gbit, 100mbps) in bit/s (tc: k, m, g, t are powers of
# 1000; bps means bytes per second).
rate_bits() {
  awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
                         m = substr(u, 1, 1); f = 1
                         if (m == "k") f = 1e3; else if (m == "m") f = 1e6; else if (m == "g") f = 1e9; else if (m == "t") f = 1e12
                         if (u ~ /bps$/) f *= 8
                         printf "%.0f\n", n * f }'
}

# set_loss NS P: makes NS drop each arriving UDP datagram with probability P (0: drop nothing).
# The rule lives in a chain of its own, jumped to from INPUT, so that it can be replaced.
set_loss() {
  local ns=$1 p=$2
  if ! ip netns exec "$ns" "$IPTABLES" -w -n -L "$LOSS_CHAIN" >/dev/null 2>&1; then
    ip netns exec "$ns" "$IPTABLES" -w -N "$LOSS_CHAIN"
    ip netns exec "$ns" "$IPTABLES" -w -I INPUT -j "$LOSS_CHAIN"
  fi
  ip netns exec "$ns" "$IPTABLES" -w -F "$LOSS_CHAIN"
  if ! is_zero "$p"; then
    ip netns exec "$ns" "$IPTABLES" -w -A "$LOSS_CHAIN" -p udp -m statistic --mode random \
        --probability "$p" -j DROP
  fi
}

apply_loss() {  # to_switch from_switch (reads NAME, WORKERS, SWITCH_NS)
  local i ns
  for ns in $SWITCH_NS; do set_loss "$ns" "$1"; done
  for ((i = 0; i < WORKERS; i++)); do set_loss "$NAME-w$i" "$2"; done
}

# ---------------------------------------------------------------------------------------------
# up

# add_namespaces NS...: the first step of both topologies' `up`: each namespace, with IPv6 off
# before any interface exists and loopback up.
add_namespaces() {
  local ns
  for ns in "$@"; do
    ip netns add "$ns"
    if [[ -d /proc/sys/net/ipv6 ]]; then
      ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 &&
                                 echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
    fi
    ip -n "$ns" link set lo up
  done
}

# The last steps of both topologies' `up`, on the caller's arrays (bash's dynamic scope): hosts
# (namespaces), host_ips, host_macs, n hosts, the first WORKERS of them workers.
# static_neighbours: every host gets a permanent neighbour entry for every other host.
static_neighbours() {
  local i j batch
  for ((i = 0; i < n; i++)); do
    batch=""
    for ((j = 0; j < n; j++)); do
      ((i == j)) && continue
      batch+="neigh replace ${host_ips[j]} lladdr ${host_macs[j]} dev eth0 nud permanent"$'\n'
    done
    [[ -n "$batch" ]] && ip -n "${hosts[i]}" -batch - <<<"$batch"
  done
}
# shape_host_links BNS_ARRAY PORT_ARRAY: both ends of every host's link (the host side shapes
# host -> bridge; the bridge port, in namespace BNS[i] named PORT[i], bridge -> host): workers
# at --rate, switch hosts at --switch-rate; unset rates leave a link unshaped.
shape_host_links() {
  local -n bns_of=$1 port_of=$2
  local i rate burst
  for ((i = 0; i < n; i++)); do
    if ((i < WORKERS)); then rate=$RATE burst=$BURST; else rate=$SWITCH_RATE burst=$SWITCH_BURST; fi
    [[ -n "$rate" ]] || continue
    tc -n "${hosts[i]}" qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
    tc -n "${bns_of[i]}" qdisc replace dev "${port_of[i]}" root tbf rate "$rate" burst "$burst" latency 50ms
  done
}

write_state() {  # file; reads the cluster variables
  local tmp="$1.tmp.$$"
  {
    echo "# Emulated cluster written by scripts/cluster.sh; remove with: cluster.sh down --name $NAME"
    echo "CLUSTER_NAME=$NAME"
    echo "CLUSTER_WORKERS=$WORKERS"
    echo "CLUSTER_SUBNET=10.$R.0.0/$([[ ${TOPOLOGY:-star} == racks ]] && echo 16 || echo 24)"
    echo "CLUSTER_SWITCH_IP=${SWITCH_IPS%% *}"
    echo "CLUSTER_SWITCH_NS=${SWITCH_NS%% *}"
    echo "CLUSTER_SWITCHES=$SWITCHES"
    echo "CLUSTER_SWITCH_IPS=\"$SWITCH_IPS\""
    echo "CLUSTER_SWITCH_NSS=\"$SWITCH_NS\""
    echo "CLUSTER_BRIDGE_NS=$NAME-$([[ ${TOPOLOGY:-star} == racks ]] && echo core || echo br)"
    echo "CLUSTER_WORKER_IPS=\"$WORKER_IPS\""
    echo "CLUSTER_WORKER_NS=\"$WORKER_NS\""
    echo "CLUSTER_RATE=$RATE"
    echo "CLUSTER_BURST=$BURST"
    echo "CLUSTER_SWITCH_RATE=$SWITCH_RATE"
    echo "CLUSTER_SWITCH_BURST=$SWITCH_BURST"
    echo "CLUSTER_MTU=$MTU"
    echo "CLUSTER_LOSS_TO_SWITCH=$LOSS_TO"
    echo "CLUSTER_LOSS_FROM_SWITCH=$LOSS_FROM"
    echo "CLUSTER_TOPOLOGY=${TOPOLOGY:-star}"
    [[ ${TOPOLOGY:-star} != racks ]] || racks_state
  } > "$tmp"
  mv -f "$tmp" "$1"
}

# oversubscription: r x worker rate / uplink rate, e.g. 4 or 1.5; empty when either is unlimited.
oversubscription() {
  [[ -n "$RATE" && -n "$UPLINK_RATE" ]] || return 0
  awk -v r="$PER_RACK" -v w="$(rate_bits "$RATE")" -v u="$(rate_bits "$UPLINK_RATE")" 'BEGIN { printf "%.4g\n", r * w / u }'
}

# The racks' variables of the state file (reads NAME, R, RACKS, PER_RACK, the rates).
racks_state() {
  local k i leaf_ips=() leaf_nss=() rack_nss=() core_ifs=() rack_of=()
  for ((k = 0; k < RACKS; k++)); do
    leaf_ips+=("10.$R.$((k + 1)).254"); leaf_nss+=("$NAME-leaf$k"); rack_nss+=("$NAME-rb$k"); core_ifs+=("rack$k")
    for ((i = 0; i < PER_RACK; i++)); do rack_of+=("$k"); done
  done
  echo "CLUSTER_RACKS=$RACKS"
  echo "CLUSTER_PER_RACK=$PER_RACK"
  echo "CLUSTER_RACK_OF=\"${rack_of[*]}\""
  echo "CLUSTER_LEAF_IPS=\"${leaf_ips[*]}\""
  echo "CLUSTER_LEAF_NSS=\"${leaf_nss[*]}\""
  echo "CLUSTER_PARENT_IP=10.$R.0.254"
  echo "CLUSTER_PARENT_NS=$NAME-parent"
  echo "CLUSTER_CORE_NS=$NAME-core"
  echo "CLUSTER_RACK_NSS=\"${rack_nss[*]}\""
  echo "CLUSTER_UPLINK_IF=uplink"
  echo "CLUSTER_UPLINK_CORE_IFS=\"${core_ifs[*]}\""
  echo "CLUSTER_UPLINK_RATE=$UPLINK_RATE"
  echo "CLUSTER_UPLINK_BURST=$UPLINK_BURST"
  echo "CLUSTER_OVERSUBSCRIPTION=$(oversubscription)"
}

is_tc_rate() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT]?(bit|bps))$ ]]; }
is_tc_size() { [[ "$1" =~ ^[0-9]+([kKmMgG]?(b|bit)?)$ ]]; }

# The options of `up --racks`; sets TOPOLOGY, WORKERS and SWITCHES (the leaves and the parent).
check_racks_args() {
  [[ -z "$WORKERS" ]] || die "--workers and --racks exclude each other (with --racks the workers are --racks x --per-rack)"
  [[ -z "$SWITCHES" ]] || die "--switches and --racks exclude each other (with --racks the switch hosts are one leaf per rack and the parent)"
  [[ "$RACKS" =~ ^[0-9]+$ ]] && ((RACKS >= 1 && RACKS <= MAX_RACKS)) ||
      die "--racks must be an integer in [1, $MAX_RACKS], got '$RACKS'"
  [[ -n "$PER_RACK" ]] || die "--racks needs --per-rack (worker hosts per rack)"
  [[ "$PER_RACK" =~ ^[0-9]+$ ]] && ((PER_RACK >= 1 && PER_RACK <= MAX_PER_RACK)) ||
      die "--per-rack must be an integer in [1, $MAX_PER_RACK], got '$PER_RACK'"
  ((RACKS * PER_RACK <= MAX_WORKERS)) ||
      die "--racks $RACKS x --per-rack $PER_RACK = $((RACKS * PER_RACK)) workers, more than $MAX_WORKERS"
  [[ -z "$UPLINK_RATE" ]] || is_tc_rate "$UPLINK_RATE" ||
      die "--uplink-rate must be a tc rate such as 500mbit or 1gbit, got '$UPLINK_RATE'"
  [[ -z "$UPLINK_RATE" ]] || (($(rate_bits "$UPLINK_RATE") > 0)) || die "--uplink-rate must be above 0, got '$UPLINK_RATE'"
  [[ -z "$RATE" ]] || ! is_tc_rate "$RATE" || (($(rate_bits "$RATE") > 0)) || die "--rate must be above 0, got '$RATE'"
  [[ -z "$UPLINK_BURST" ]] || is_tc_size "$UPLINK_BURST" ||
      die "--uplink-burst must be a tc size such as 256kb, got '$UPLINK_BURST'"
  UPLINK_BURST=${UPLINK_BURST:-$BURST}  # --burst is checked with the star's options
  TOPOLOGY=racks WORKERS=$((RACKS * PER_RACK)) SWITCHES=$((RACKS + 1))
}

UP_CREATING=0
up_rollback() {
  local rc=$?
  if [[ $UP_CREATING == 1 ]]; then
    UP_CREATING=0
    note "setting up cluster '$NAME' failed; removing what was created"
    do_down >/dev/null 2>&1 || true
  fi
  exit "$rc"
}

do_up() {
  WORKERS="" SWITCHES="" RATE="" BURST=256kb SWITCH_RATE="" SWITCH_BURST="" MTU=1500 LOSS_TO=0 LOSS_FROM=0
  RACKS="" PER_RACK="" UPLINK_RATE="" UPLINK_BURST="" TOPOLOGY=star
  while (($#)); do
    case "$1" in
      --name) NAME=${2-}; shift 2 || die "--name needs a value" ;;
      --workers) WORKERS=${2-}; shift 2 || die "--workers needs a value" ;;
      --switches) SWITCHES=${2-}; shift 2 || die "--switches needs a value" ;;
      --rate) RATE=${2-}; shift 2 || die "--rate needs a value" ;;
      --burst) BURST=${2-}; shift 2 || die "--burst needs a value" ;;
      --switch-rate) SWITCH_RATE=${2-}; shift 2 || die "--switch-rate needs a value" ;;
      --switch-burst) SWITCH_BURST=${2-}; shift 2 || die "--switch-burst needs a value" ;;
      --mtu) MTU=${2-}; shift 2 || die "--mtu needs a value" ;;
      --loss-to-switch) LOSS_TO=${2-}; shift 2 || die "--loss-to-switch needs a value" ;;
      --loss-from-switch) LOSS_FROM=${2-}; shift 2 || die "--loss-from-switch needs a value" ;;
      --racks) RACKS=${2-}; shift 2 || die "--racks needs a value" ;;
      --per-rack) PER_RACK=${2-}; shift 2 || die "--per-rack needs a value" ;;
      --uplink-rate) UPLINK_RATE=${2-}; shift 2 || die "--uplink-rate needs a value" ;;
      --uplink-burst) UPLINK_BURST=${2-}; shift 2 || die "--uplink-burst needs a value" ;;
      -h|--help) usage; exit 0 ;;
      *) die "up: unknown option '$1' (see --help)" ;;
    esac
  done
  check_name
  if [[ -n "$RACKS" ]]; then
    check_racks_args
  else
    [[ -z "$PER_RACK" ]] || die "--per-rack needs --racks"
    [[ -z "$UPLINK_RATE" ]] || die "--uplink-rate needs --racks (a star cluster has no uplinks)"
    [[ -z "$UPLINK_BURST" ]] || die "--uplink-burst needs --racks (a star cluster has no uplinks)"
    SWITCHES=${SWITCHES:-1}
    [[ "$WORKERS" =~ ^[0-9]+$ ]] && ((WORKERS >= 1 && WORKERS <= MAX_WORKERS)) ||
        die "--workers must be an integer in [1, $MAX_WORKERS], got '$WORKERS'"
    [[ "$SWITCHES" =~ ^[0-9]+$ ]] && ((SWITCHES >= 1 && SWITCHES <= MAX_SWITCHES)) ||
        die "--switches must be an integer in [1, $MAX_SWITCHES], got '$SWITCHES'"
    ((WORKERS + SWITCHES <= 254)) ||
        die "--workers $WORKERS plus --switches $SWITCHES exceed the 254 host addresses of 10.R.0.0/24"
  fi
  [[ "$MTU" =~ ^[0-9]+$ ]] && ((MTU >= 1280 && MTU <= 9000)) || die "--mtu must be in [1280, 9000], got '$MTU'"
  [[ -z "$RATE" || "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT]?(bit|bps))$ ]] ||
      die "--rate must be a tc rate such as 500mbit or 1gbit, got '$RATE'"
  [[ "$BURST" =~ ^[0-9]+([kKmMgG]?(b|bit)?)$ ]] || die "--burst must be a tc size such as 256kb, got '$BURST'"
  [[ -z "$SWITCH_RATE" || "$SWITCH_RATE" =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT]?(bit|bps))$ ]] ||
      die "--switch-rate must be a tc rate such as 500mbit or 1gbit, got '$SWITCH_RATE'"
  SWITCH_BURST=${SWITCH_BURST:-$BURST}
  [[ "$SWITCH_BURST" =~ ^[0-9]+([kKmMgG]?(b|bit)?)$ ]] ||
      die "--switch-burst must be a tc size such as 256kb, got '$SWITCH_BURST'"
  check_probability --loss-to-switch "$LOSS_TO"
  check_probability --loss-from-switch "$LOSS_FROM"
  ((EUID == 0)) || die "needs root (network namespaces)"
  command -v ip >/dev/null || die "ip (iproute2) not found"
  command -v tc >/dev/null || die "tc (iproute2) not found"
  if ! is_zero "$LOSS_TO" || ! is_zero "$LOSS_FROM"; then
    command -v "$IPTABLES" >/dev/null || die "$IPTABLES not found (needed for --loss-*)"
  fi

  local existing sf
  existing=$(cluster_namespaces "$NAME")
  sf=$(state_file "$NAME")
  if [[ -n "$existing" || -e "$sf" ]]; then
    die "cluster '$NAME' already exists (namespaces: ${existing//$'\n'/ }${existing:+; }state file: $([[ -e $sf ]] && echo "$sf" || echo none)); remove it with: $PROG down --name $NAME"
  fi

  R=$(subnet_octet "$NAME")
  if [[ $TOPOLOGY == racks ]]; then up_racks "$sf"; return; fi
  local br="$NAME-br" i ns
  # Hosts in order: workers 0..N-1, then switch hosts 0..K-1 (ports[] names their bridge ports).
  local -a hosts=() host_ips=() host_macs=() ports=()
  for ((i = 0; i < WORKERS; i++)); do
    hosts+=("$NAME-w$i"); host_ips+=("10.$R.0.$((i + 1))"); host_macs+=("$(host_mac "$R" $((i + 1)))")
    ports+=("w$i")
  done
  for ((i = 0; i < SWITCHES; i++)); do
    hosts+=("$(switch_ns "$NAME" "$i")"); host_ips+=("10.$R.0.$(switch_octet "$i")")
    host_macs+=("$(host_mac "$R" "$(switch_octet "$i")")"); ports+=("$(switch_port "$i")")
  done
  WORKER_IPS="${host_ips[*]:0:WORKERS}"
  WORKER_NS="${hosts[*]:0:WORKERS}"
  SWITCH_IPS="${host_ips[*]:WORKERS}"
  SWITCH_NS="${hosts[*]:WORKERS}"

  UP_CREATING=1
  trap up_rollback EXIT
  trap 'exit 130' INT TERM
  add_namespaces "$br" "${hosts[@]}"

  # The bridge (no STP, no forwarding delay) and one veth pair per host, created directly in the
  # bridge namespace with the peer end moved at creation into the host namespace as eth0.
  ip -n "$br" link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0
  local n=${#hosts[@]} port
  for ((i = 0; i < n; i++)); do
    ns=${hosts[i]} port=${ports[i]}
    ip -n "$br" link add "$port" mtu "$MTU" type veth peer name eth0 mtu "$MTU" address "${host_macs[i]}" netns "$ns"
    ip -n "$br" link set "$port" master br0
    ip -n "$br" link set "$port" up
    ip -n "$ns" addr add "${host_ips[i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  ip -n "$br" link set br0 mtu "$MTU"
  ip -n "$br" link set br0 up

  # Every host (worker or switch) knows every other host's MAC; both ends of every worker link
  # and, with --switch-rate, of every switch link are shaped.
  local -a host_bns=()
  for ((i = 0; i < n; i++)); do host_bns+=("$br"); done
  static_neighbours
  shape_host_links host_bns ports

  if ! is_zero "$LOSS_TO" || ! is_zero "$LOSS_FROM"; then apply_loss "$LOSS_TO" "$LOSS_FROM"; fi

  write_state "$sf"
  UP_CREATING=0
  trap - EXIT INT TERM
  echo "cluster '$NAME' up: $WORKERS worker(s) ${host_ips[0]}..${host_ips[WORKERS - 1]}," \
       "$SWITCHES switch host(s) ${SWITCH_IPS// /, }, rate ${RATE:-unlimited}," \
       "switch rate ${SWITCH_RATE:-unlimited}, mtu $MTU, loss to/from switch $LOSS_TO/$LOSS_FROM; state in $sf"
}

# up --racks (after do_up's checks; R is set). See the header for the topology.
up_racks() {
  local sf=$1 core="$NAME-core" k i j ns
  # Hosts in order: workers 0..N-1 (rack-major), leaves 0..R-1, the parent; each with its
  # bridge's namespace and its port there.
  local -a hosts=() host_ips=() host_macs=() host_bns=() host_ports=() host_rack=()
  for ((k = 0; k < RACKS; k++)); do
    for ((j = 0; j < PER_RACK; j++)); do
      i=$((k * PER_RACK + j))
      hosts+=("$NAME-w$i"); host_ips+=("10.$R.$((k + 1)).$((j + 1))"); host_macs+=("$(host_mac3 "$R" $((k + 1)) $((j + 1)))")
      host_bns+=("$NAME-rb$k"); host_ports+=("w$i"); host_rack+=("$k")
    done
  done
  for ((k = 0; k < RACKS; k++)); do
    hosts+=("$NAME-leaf$k"); host_ips+=("10.$R.$((k + 1)).254"); host_macs+=("$(host_mac3 "$R" $((k + 1)) 254)")
    host_bns+=("$NAME-rb$k"); host_ports+=(leaf); host_rack+=("$k")
  done
  hosts+=("$NAME-parent"); host_ips+=("10.$R.0.254"); host_macs+=("$(host_mac3 "$R" 0 254)")
  host_bns+=("$core"); host_ports+=(parent); host_rack+=(-1)
  WORKER_IPS="${host_ips[*]:0:WORKERS}"
  WORKER_NS="${hosts[*]:0:WORKERS}"
  SWITCH_IPS="${host_ips[*]:WORKERS}"
  SWITCH_NS="${hosts[*]:WORKERS}"
  local -a bridges=("$core")
  for ((k = 0; k < RACKS; k++)); do bridges+=("$NAME-rb$k"); done

  UP_CREATING=1
  trap up_rollback EXIT
  trap 'exit 130' INT TERM
  add_namespaces "${bridges[@]}" "${hosts[@]}"
  for ns in "${bridges[@]}"; do
    ip -n "$ns" link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0
  done

  # One veth pair per host (bridge port in its rack's or the core's namespace, eth0 in the host).
  local n=${#hosts[@]} port bns
  for ((i = 0; i < n; i++)); do
    ns=${hosts[i]} port=${host_ports[i]} bns=${host_bns[i]}
    ip -n "$bns" link add "$port" mtu "$MTU" type veth peer name eth0 mtu "$MTU" address "${host_macs[i]}" netns "$ns"
    ip -n "$bns" link set "$port" master br0
    ip -n "$bns" link set "$port" up
    ip -n "$ns" addr add "${host_ips[i]}/16" dev eth0
    ip -n "$ns" link set eth0 up
  done
  # The uplinks: `uplink` in rack k's namespace, `rack<k>` in the core's.
  for ((k = 0; k < RACKS; k++)); do
    ip -n "$NAME-rb$k" link add uplink mtu "$MTU" type veth peer name "rack$k" mtu "$MTU" netns "$core"
    ip -n "$NAME-rb$k" link set uplink master br0
    ip -n "$NAME-rb$k" link set uplink up
    ip -n "$core" link set "rack$k" master br0
    ip -n "$core" link set "rack$k" up
  done
  for ns in "${bridges[@]}"; do
    ip -n "$ns" link set br0 mtu "$MTU"
    ip -n "$ns" link set br0 up
  done

  # Static forwarding entries: every bridge knows where every host is (its own port, or the
  # uplink / the rack's port on the core), so nothing is flooded across the uplinks.
  local batch b
  for b in "${bridges[@]}"; do
    batch=""
    for ((i = 0; i < n; i++)); do
      if [[ ${host_bns[i]} == "$b" ]]; then port=${host_ports[i]}
      elif [[ $b == "$core" ]]; then port="rack${host_rack[i]}"
      else port=uplink
      fi
      batch+="fdb replace ${host_macs[i]} dev $port master static"$'\n'
    done
    ip netns exec "$b" bridge -batch - <<<"$batch"
  done

  # Every host knows every other host's MAC; worker links shaped at --rate, leaf and parent
  # links at --switch-rate, uplinks at --uplink-rate (rack side: rack -> core; core side: core
  # -> rack).
  static_neighbours
  shape_host_links host_bns host_ports
  if [[ -n "$UPLINK_RATE" ]]; then
    for ((k = 0; k < RACKS; k++)); do
      tc -n "$NAME-rb$k" qdisc replace dev uplink root tbf rate "$UPLINK_RATE" burst "$UPLINK_BURST" latency 50ms
      tc -n "$core" qdisc replace dev "rack$k" root tbf rate "$UPLINK_RATE" burst "$UPLINK_BURST" latency 50ms
    done
  fi

  if ! is_zero "$LOSS_TO" || ! is_zero "$LOSS_FROM"; then apply_loss "$LOSS_TO" "$LOSS_FROM"; fi

  write_state "$sf"
  UP_CREATING=0
  trap - EXIT INT TERM
  local over leaves="${host_ips[*]:WORKERS:RACKS}"
  over=$(oversubscription)
  echo "cluster '$NAME' up: $RACKS rack(s) x $PER_RACK worker(s) (${host_ips[0]}..${host_ips[WORKERS - 1]}," \
       "rack-major), leaf switch hosts ${leaves// /, }, parent ${host_ips[n - 1]}; rate ${RATE:-unlimited}," \
       "uplink rate ${UPLINK_RATE:-unlimited}, switch rate ${SWITCH_RATE:-unlimited}, mtu $MTU," \
       "loss to/from switch $LOSS_TO/$LOSS_FROM; state in $sf"
  if [[ -n "$over" ]]; then
    echo "cluster '$NAME': oversubscription $over:1 ($PER_RACK x $RATE per rack over a $UPLINK_RATE uplink)"
  else
    echo "cluster '$NAME': oversubscription undefined (worker rate ${RATE:-unlimited}, uplink rate ${UPLINK_RATE:-unlimited})"
  fi
}

# ---------------------------------------------------------------------------------------------
# down

do_down() {
  local sf namespaces
  sf=$(state_file "$NAME")
  namespaces=$(cluster_namespaces "$NAME")
  if [[ -z "$namespaces" && ! -e "$sf" ]]; then
    echo "cluster '$NAME': nothing to remove"
    return 0
  fi
  # Stop the processes first (all namespaces at once, so that a peer does not hang), then remove
  # the namespaces; deleting a namespace destroys the veth ends inside it. Never this script or
  # its ancestors (`down` may run from inside a cluster host).
  local failed=0
  # shellcheck disable=SC2086
  sml_netns_remove $namespaces || failed=1
  rm -f "$sf" "$sf".tmp.*
  if ((failed)); then return 1; fi
  echo "cluster '$NAME' removed ($(echo $namespaces | wc -w) namespaces)"
}

# ---------------------------------------------------------------------------------------------
# loss, exec, info, list

load_state() {
  local sf; sf=$(state_file "$NAME")
  [[ -r "$sf" ]] || die "cluster '$NAME' does not exist (no $sf)"
  # shellcheck disable=SC1090
  source "$sf"
  WORKERS=$CLUSTER_WORKERS R=${CLUSTER_SUBNET#10.}; R=${R%%.*}
  RATE=$CLUSTER_RATE MTU=$CLUSTER_MTU WORKER_IPS=$CLUSTER_WORKER_IPS WORKER_NS=$CLUSTER_WORKER_NS
  # State files written before --switches existed have one switch host and no burst variables.
  SWITCHES=${CLUSTER_SWITCHES:-1} SWITCH_IPS=${CLUSTER_SWITCH_IPS:-$CLUSTER_SWITCH_IP}
  SWITCH_NS=${CLUSTER_SWITCH_NSS:-$CLUSTER_SWITCH_NS} BURST=${CLUSTER_BURST:-256kb}
  SWITCH_RATE=${CLUSTER_SWITCH_RATE:-} SWITCH_BURST=${CLUSTER_SWITCH_BURST:-$BURST}
  LOSS_TO=$CLUSTER_LOSS_TO_SWITCH LOSS_FROM=$CLUSTER_LOSS_FROM_SWITCH
  TOPOLOGY=${CLUSTER_TOPOLOGY:-star}
  if [[ $TOPOLOGY == racks ]]; then
    RACKS=$CLUSTER_RACKS PER_RACK=$CLUSTER_PER_RACK UPLINK_RATE=$CLUSTER_UPLINK_RATE UPLINK_BURST=$CLUSTER_UPLINK_BURST
  fi
}

do_loss() {
  local to="" from=""
  while (($#)); do
    case "$1" in
      --name) NAME=${2-}; shift 2 || die "--name needs a value" ;;
      --to-switch) to=${2-}; shift 2 || die "--to-switch needs a value" ;;
      --from-switch) from=${2-}; shift 2 || die "--from-switch needs a value" ;;
      *) die "loss: unknown option '$1' (see --help)" ;;
    esac
  done
  check_name
  load_state
  [[ -n "$to" ]] && { check_probability --to-switch "$to"; LOSS_TO=$to; }
  [[ -n "$from" ]] && { check_probability --from-switch "$from"; LOSS_FROM=$from; }
  apply_loss "$LOSS_TO" "$LOSS_FROM"
  write_state "$(state_file "$NAME")"
  echo "cluster '$NAME': loss to switch $LOSS_TO, from switch $LOSS_FROM"
}

do_exec() {
  local host=""
  while (($#)); do
    case "$1" in
      --name) NAME=${2-}; shift 2 || die "--name needs a value" ;;
      --host) host=${2-}; shift 2 || die "--host needs a value" ;;
      --) shift; break ;;
      *) die "exec: unknown option '$1' (expected: exec --name P --host w<i>|sw|sw<j>|br|leaf<k>|parent|rb<k>|core -- COMMAND...)" ;;
    esac
  done
  check_name
  [[ "$host" =~ ^(w[0-9]+|sw|sw[0-9]+|br|leaf[0-9]+|parent|rb[0-9]+|core)$ ]] ||
      die "--host must be w<i>, sw, sw<j> or br (racks: leaf<k>, parent, rb<k>, core), got '$host'"
  (($#)) || die "exec: no command given after --"
  local ns="$NAME-$host"
  [[ "$host" == sw0 ]] && ns="$NAME-sw"  # switch host 0 keeps the name PREFIX-sw
  ns_exists "$ns" || die "namespace $ns does not exist"
  exec ip netns exec "$ns" "$@"
}

# qdisc_drops NS DEV: packets the qdiscs on DEV in namespace NS dropped (0 without a qdisc).
qdisc_drops() {
  tc -n "$1" -s qdisc show dev "$2" 2>/dev/null |
    awk '/dropped/ { gsub(",", ""); for (i = 1; i < NF; i++) if ($i ~ /dropped$/) s += $(i + 1) } END { print s + 0 }'
}

# name_only CMD ARGS...: the options of a command that takes only --name; sets NAME, checks it.
name_only() {
  local cmd=$1
  shift
  while (($#)); do
    case "$1" in
      --name) NAME=${2-}; shift 2 || die "--name needs a value" ;;
      *) die "$cmd: unknown option '$1' (see --help)" ;;
    esac
  done
  check_name
}

do_drops() {
  name_only drops "$@"
  load_state
  local i k host ns port snmp
  local -a hosts=() nss=() ports=() bnss=()
  for ((i = 0; i < WORKERS; i++)); do hosts+=("w$i"); nss+=("$NAME-w$i"); ports+=("w$i"); done
  if [[ $TOPOLOGY == racks ]]; then
    for ((i = 0; i < WORKERS; i++)); do bnss+=("$NAME-rb$((i / PER_RACK))"); done
    for ((k = 0; k < RACKS; k++)); do hosts+=("leaf$k"); nss+=("$NAME-leaf$k"); ports+=(leaf); bnss+=("$NAME-rb$k"); done
    hosts+=(parent); nss+=("$NAME-parent"); ports+=(parent); bnss+=("$NAME-core")
  else
    i=0
    for ns in $SWITCH_NS; do
      if ((i == 0)); then hosts+=(sw); ports+=(sw); else hosts+=("sw$i"); ports+=("sw$i"); fi
      nss+=("$ns"); i=$((i + 1))
    done
    for i in "${!hosts[@]}"; do bnss+=("$NAME-br"); done
  fi
  for i in "${!hosts[@]}"; do
    host=${hosts[i]} ns=${nss[i]} port=${ports[i]}
    # The Udp: header line names the columns; the next Udp: line holds the values.
    snmp=$(ip netns exec "$ns" awk '$1 == "Udp:" { if (seen) { for (i = 2; i <= NF; i++) v[h[i]] = $i
                                       print v["RcvbufErrors"] + 0, v["InErrors"] + 0; exit }
                                     split($0, h); seen = 1 }' /proc/net/snmp)
    read -r rcvbuf inerr <<<"${snmp:-0 0}"
    echo "$host udp_rcvbuf=$rcvbuf udp_in_errors=$inerr tbf_out=$(qdisc_drops "$ns" eth0) tbf_in=$(qdisc_drops "${bnss[i]}" "$port")"
  done
  [[ $TOPOLOGY == racks ]] || return 0
  for ((k = 0; k < RACKS; k++)); do
    echo "rack$k-uplink tbf_out=$(qdisc_drops "$NAME-rb$k" uplink) tbf_in=$(qdisc_drops "$NAME-core" "rack$k")"
  done
}

# uplinks: the byte counters of the rack side of every uplink (racks only).
do_uplinks() {
  name_only uplinks "$@"
  load_state
  [[ $TOPOLOGY == racks ]] || die "cluster '$NAME' has no uplinks (it was made without --racks)"
  local k ns tx rx
  for ((k = 0; k < RACKS; k++)); do
    ns="$NAME-rb$k"
    read -r tx rx < <(ip netns exec "$ns" cat /sys/class/net/uplink/statistics/tx_bytes \
                          /sys/class/net/uplink/statistics/rx_bytes | xargs) ||
      die "cannot read the counters of the uplink of rack $k (namespace $ns)"
    echo "rack$k ns=$ns if=uplink core_if=rack$k tx_bytes=$tx rx_bytes=$rx"
  done
}

do_list() {
  local prefixes p sf
  prefixes=$( {
    ip netns list 2>/dev/null | awk '{print $1}' | sed -nE 's/^([A-Za-z0-9_]{1,32})-(br|sw[0-9]*|core)$/\1/p'
    for sf in "$STATE_DIR"/switchml-cluster-*.env; do
      [[ -e "$sf" ]] || continue
      sf=${sf##*/switchml-cluster-}; echo "${sf%.env}"
    done
  } | sort -u)
  if [[ -z "$prefixes" ]]; then echo "no clusters"; return 0; fi
  printf '%-34s %-11s %-8s %s\n' NAME NAMESPACES WORKERS "STATE FILE"
  for p in $prefixes; do
    sf=$(state_file "$p")
    local w="?"
    [[ -r "$sf" ]] && w=$(sed -n 's/^CLUSTER_WORKERS=//p' "$sf")
    printf '%-34s %-11s %-8s %s\n' "$p" "$(cluster_namespaces "$p" | wc -l)" "$w" \
        "$([[ -e $sf ]] && echo "$sf" || echo 'none (leftover: run down)')"
  done
}

# ---------------------------------------------------------------------------------------------

NAME=""
cmd=${1:-}
[[ -n "$cmd" ]] || { usage >&2; exit 2; }
shift
case "$cmd" in
  up) do_up "$@" ;;
  down)
    name_only down "$@"
    ((EUID == 0)) || die "needs root (network namespaces)"
    do_down ;;
  loss) do_loss "$@" ;;
  exec) do_exec "$@" ;;
  info)
    [[ "${1:-}" == --name ]] && NAME=${2:-}
    check_name
    cat "$(state_file "$NAME")" 2>/dev/null || die "cluster '$NAME' does not exist" ;;
  drops) do_drops "$@" ;;
  uplinks) do_uplinks "$@" ;;
  list) do_list ;;
  -h|--help|help) usage ;;
  *) echo "$PROG: unknown command '$cmd'" >&2; usage >&2; exit 2 ;;
esac
