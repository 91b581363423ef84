#!/usr/bin/env bash
# The raw-frame switch and the MACs workers register (issue #20): `switchml switch --io raw`
# serving reference-style workers (tests/netns/ref_worker.cc) takes each worker's registered MAC
# as data for its own raw channels only (SwitchHost -> RawChannel::SetNeighbours), answers every
# worker at the MAC its frames come from, and leaves the host's neighbour table alone: nothing a
# worker registers reaches a kernel table (docs/operations.md, "Serving reference clients").
# Usage: raw_registered_macs_test.sh SWITCHML_BINARY REF_WORKER_BINARY
#
# Namespaces of its own (always removed, also on failure and at the test's deadline): the
# reference-client topology of tests/netns/lib.sh (ref_topology): a switch host and 2 worker
# hosts, each with a data interface eth0 (10.84.1.0/24, ARP off on the workers) and a management
# interface mgmt0 (10.84.2.0/24) on two bridges; gRPC goes over mgmt0.
#  a) hostile registrations, each a reference session of one rank from w0 (ref_worker
#     --register-only): w1's data address at a MAC no host has, the switch host's own data address
#     at another, 127.0.0.1 at a third;
#  b) an all-reduce of 2 workers (int32, the reference's checksums, 1% of requests and responses
#     dropped by the switch's simulator so that retransmissions and late duplicates are answered
#     too) in which each worker registers a MAC that is not its interface's (02:66:66:66:66:0k)
#     while its frames come from its own: every element exact, and every response frame
#     addressed to the worker's own MAC (ref_worker fails on any frame to another MAC: the data
#     bridge would flood a frame sent to the registered MAC, which no port has, to every worker);
#     the switch's raw channel never found a destination without a MAC (raw_send_no_mac 0);
#  c) the switch host's neighbour table (`ip neigh show`, every interface) before, after the
#     registrations, after the all-reduce and after the switch exited: no entry on the data
#     interface, none tagged proto 83, none with a registered MAC; every entry is a worker's
#     management address at that host's real management MAC (the kernel's own ARP for gRPC).
# Not covered (not reachable through the switch): the registered MAC as the destination of a
# worker never heard from — a result goes only to workers that all sent to the same channel.
# Skips (exit 77) without root or network namespaces.
SWITCHML=${1:?usage: raw_registered_macs_test.sh SWITCHML_BINARY REF_WORKER_BINARY}
REF=${2:?usage: raw_registered_macs_test.sh SWITCHML_BINARY REF_WORKER_BINARY}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export SWITCHML

require_netns
switch_help=$("$SWITCHML" switch --help 2>&1)  # not piped into grep -q: SIGPIPE + pipefail
grep -q -- '--io' <<<"$switch_help" || fail "$SWITCHML switch has no --io option"
ref_help=$("$REF" --help 2>&1)
grep -q -- '--register-mac' <<<"$ref_help" || fail "$REF has no --register-mac option"

sml_operator_token
own_namespaces smlrmac
DATA=10.84.1
MGMT=10.84.2
BOGUS=02:66:66:66:66  # registered MACs: 02:66:66:66:66:<xx>, no interface has one
TIMEOUT_S=30

ref_topology "$DATA" "$MGMT" 2 sw w0 w1
# The real management MACs (ref_topology: 02:5e:<MAC_BYTE>2:00:00:<octet>): the only ones the
# switch host's kernel may learn, by its own ARP on mgmt0.
declare -A MGMT_MAC=([$MGMT.1]=02:5e:22:00:00:01 [$MGMT.2]=02:5e:22:00:00:02)

# check_neighbours WHEN: the switch host's neighbour table holds only what its own kernel
# learnt on mgmt0 (see c) above).
check_neighbours() {
  local when=$1 table line ip mac
  table=$(ip -n "$SW" neigh show)
  echo "$when: switch host neighbours: ${table:-none}"
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    [[ $line != *" dev eth0"* ]] || fail "$when: a neighbour entry on the data interface: $line (table: $table)"
    [[ $line != *"proto 83"* ]] || fail "$when: an entry tagged as the switch's (proto 83): $line"
    [[ $line != *"$BOGUS"* ]] || fail "$when: an entry with a MAC a worker registered: $line"
    ip=${line%% *}
    [[ $line == *" dev mgmt0"* && -n ${MGMT_MAC[$ip]:-} ]] || fail "$when: an entry for an address that is no worker's management address: $line"
    if [[ $line == *" lladdr "* ]]; then
      mac=${line#* lladdr }
      mac=${mac%% *}
      [[ $mac == "${MGMT_MAC[$ip]}" ]] || fail "$when: $ip at $mac, its interface's MAC is ${MGMT_MAC[$ip]}: $line"
    fi
  done <<<"$table"
}
check_neighbours "before"
pass "topology: switch $SW_IP ($SW_MAC), 2 workers with ARP off on eth0; the switch host has no neighbour entry on eth0"

# Counters of the raw channel at exit (--counters-json).
sml_start_switch --bind "$SW_IP" --port 48864 --via in_sw --log "$WORK/switch.log" -- \
  --io raw --iface eth0 --counters-json "$WORK/counters.json" \
  --ingress-drop 0.01 --egress-drop 0.01 --drop-seed 11 || fail "the raw-mode switch did not start"

# --- a) hostile registrations ------------------------------------------------------------------
n=0
for target in "$DATA.2:aa" "$SW_IP:fe" "127.0.0.1:7f"; do
  ip=${target%:*} mac="$BOGUS:${target##*:}" rc=0
  ip netns exec "$(ns_of w0)" "$REF" --controller "$SW_IP:$CTL_PORT" --rank 0 --num-workers 1 \
    --register-only --register-ipv4 "$ip" --register-mac "$mac" --iface eth0 --timeout-s "$TIMEOUT_S" \
    >"$WORK/reg-$n.json" 2>"$WORK/reg-$n.err" || rc=$?
  echo "registration of $ip at $mac: exit $rc: $(cat "$WORK/reg-$n.json" "$WORK/reg-$n.err")"
  # Raw mode installs nothing, so it has no reason to refuse one; either way the table must stay.
  ((rc == 0)) || fail "the raw-mode switch refused the registration of $ip at $mac: $(cat "$WORK/reg-$n.err")"
  check_neighbours "after registering $ip at $mac"
  n=$((n + 1))
done
pass "a) w1's data address, the switch host's own and 127.0.0.1 registered at MACs no host has: accepted, and the switch host's neighbour table is as before"

# --- b) an all-reduce with registered MACs that are not the workers' ---------------------------
pids=()
for r in 0 1; do
  ip netns exec "$(ns_of "w$r")" "$REF" --controller "$SW_IP:$CTL_PORT" --rank "$r" --num-workers 2 \
    --iface eth0 --register-mac "$BOGUS:0$((r + 1))" --count 20000 --type int32 --window 16 \
    --checksums reference --timeout-s "$TIMEOUT_S" >"$WORK/w$r.json" 2>"$WORK/w$r.err" &
  pids+=($!)
  sml_track $!
done
for r in 0 1; do
  rc=0
  wait "${pids[$r]}" || rc=$?
  sml_untrack "${pids[$r]}"
  ((rc == 0)) || fail "b) rank $r exited with $rc: $(cat "$WORK/w$r.err" "$WORK/w$r.json")"
done
retransmits=0
for r in 0 1; do
  f=$WORK/w$r.json
  [[ $(json_get "$f" "j['ok']") == True ]] || fail "b) rank $r not ok: $(cat "$f")"
  [[ $(json_get "$f" "j['registered_mac']") == "$BOGUS:0$((r + 1))" ]] || fail "b) rank $r registered $(json_get "$f" "j['registered_mac']")"
  [[ $(json_get "$f" "j['mac']") == "02:5e:21:00:00:0$((r + 1))" ]] || fail "b) rank $r sent from $(json_get "$f" "j['mac']")"
  [[ $(json_get "$f" "j['not_my_mac'] == 0 and j['responses'] == j['packets']") == True ]] ||
    fail "b) rank $r: responses to another MAC, or missing: $(cat "$f")"
  [[ $(json_get "$f" "j['switch_mac']") == "$SW_MAC" ]] || fail "b) rank $r was told the switch's MAC is $(json_get "$f" "j['switch_mac']")"
  retransmits=$((retransmits + $(json_get "$f" "j['retransmits']")))
done
((retransmits > 0)) || fail "b) no retransmission although the switch dropped 1% each way: the late-duplicate answers went untested"
pass "b) 2 workers registered 02:66:66:66:66:01/02 and sent from 02:5e:21:00:00:01/02: every element exact, every response (with $retransmits retransmissions) to the MAC the frames came from; rank 0: $(cat "$WORK/w0.json")"
check_neighbours "after the all-reduce"

sml_stop_switch || fail "the raw-mode switch exited with status $?"
[[ -s $WORK/counters.json ]] || fail "the switch wrote no counters"
no_mac=$(json_get "$WORK/counters.json" "j.get('raw_send_no_mac', 'missing')")
[[ $no_mac == 0 ]] || fail "b) raw_send_no_mac = $no_mac, want 0: $(cat "$WORK/counters.json")"
sent=$(json_get "$WORK/counters.json" "j['raw_sent']")
((sent > 0)) || fail "b) the raw channel sent nothing: $(cat "$WORK/counters.json")"
if grep -q "refused a registration" "$WORK/switch.log"; then fail "the switch refused a registration: $(cat "$WORK/switch.log")"; fi
pass "b) the switch sent $sent frames and found every destination's MAC (raw_send_no_mac 0)"
check_neighbours "after the switch exited"
pass "c) the workers' registrations changed nothing in the switch host's neighbour table"
pass "raw frames with registered MACs"
