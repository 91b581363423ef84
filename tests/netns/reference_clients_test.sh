#!/usr/bin/env bash
# Reference-style clients (issue #14): workers that put their frames on the wire exactly as the
# reference SwitchML DPDK client does (tests/netns/ref_worker.cc: AF_PACKET, destination = the MAC
# the switch advertised, IPv4 checksum 0 and a UDP checksum holding only the pseudo-header sum,
# source port 4000, one datagram per frame, ARP off) get exact all-reduce results from our switch.
# Usage: reference_clients_test.sh SWITCHML_BINARY REF_WORKER_BINARY
#
# Namespaces of its own (always removed): a switch host and 3 worker hosts, each with a data
# interface eth0 (10.81.1.0/24, ARP off on the workers) and a management interface mgmt0
# (10.81.2.0/24, ARP on), on two bridges in a fifth namespace. gRPC to the switch's data address
# goes over mgmt0 (a /32 route), as a DPDK host's control traffic goes over a kernel interface.
# The switch host has no static neighbour entries for the workers.
#  a) `switchml switch --io raw --iface eth0` dropping 1% of requests and of responses (its drop
#     simulator): 3 workers int32 (reference checksums), a new session float32 (every block's e0
#     the ranks' maximum), a new session with 2 workers; every element exact, with
#     retransmissions; every response frame addressed to the worker's MAC with correct
#     checksums, one datagram per frame; the switch's counters count every worker frame as IPv4
#     checksum zero and UDP checksum partial, none as ok, wrong or refused (skipped with a note
#     if the counters have no such keys).
#  b) `switchml switch --neighbour-entries` (kernel UDP): workers with correct checksums, still
#     ARP off: exact results; while the switch runs, `ip neigh` in its namespace lists each
#     worker's MAC as a PERMANENT entry on eth0 tagged proto 83 (the switch installed them);
#     after it exits they are gone. Control:
#     a worker with the reference checksums gets no result from this switch (the kernel drops them).
#  c) in both modes the MAC the UdpSession reply advertised is the switch's eth0 MAC.
# Skips (exit 77) without root or network namespaces.
SWITCHML=${1:?usage: reference_clients_test.sh SWITCHML_BINARY REF_WORKER_BINARY}
REF=${2:?usage: reference_clients_test.sh SWITCHML_BINARY REF_WORKER_BINARY}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export SWITCHML

require_netns
# Captured first: `grep -q` stops reading at its first match, and the rest of the help then gets
# SIGPIPE, which pipefail would report as a missing option.
switch_help=$("$SWITCHML" switch --help 2>&1)
grep -q -- '--io' <<<"$switch_help" || fail "$SWITCHML switch has no --io option"

sml_operator_token
own_namespaces smlref
DATA=10.81.1
TIMEOUT_S=30

# --- Topology --------------------------------------------------------------------------------
ref_topology "$DATA" 10.81.2 0 sw w0 w1 w2
[[ $(ip -n "$SW" neigh show dev eth0 | grep -c .) == 0 ]] || fail "the switch host has neighbour entries before the test"
pass "topology: switch $SW_IP ($SW_MAC) and 3 workers, ARP off on the workers' eth0"

# run_session TAG N TYPE COUNT WINDOW CHECKSUMS: N workers (w0..w(N-1)) in one session; each must
# exit 0 with every element exact and report the switch's MAC; adds their frames to SESSION_SENT.
run_session() {
  local tag=$1 n=$2 type=$3 count=$4 window=$5 checksums=$6 r pids=() rc
  for ((r = 0; r < n; r++)); do
    ip netns exec "$(ns_of "w$r")" "$REF" --controller "$SW_IP:$CTL_PORT" --rank "$r" --num-workers "$n" \
      --iface eth0 --count "$count" --type "$type" --window "$window" --checksums "$checksums" \
      --timeout-s "$TIMEOUT_S" >"$WORK/$tag-r$r.json" 2>"$WORK/$tag-r$r.err" &
    pids+=($!)
    sml_track $!
  done
  for ((r = 0; r < n; r++)); do
    rc=0
    wait "${pids[$r]}" || rc=$?
    sml_untrack "${pids[$r]}"
    ((rc == 0)) || fail "$tag: rank $r exited with $rc: $(cat "$WORK/$tag-r$r.err")"
  done
  for ((r = 0; r < n; r++)); do
    local f="$WORK/$tag-r$r.json" got
    [[ $(json_get "$f" "j['ok']") == True ]] || fail "$tag: rank $r not ok: $(cat "$f")"
    got=$(json_get "$f" "j['switch_mac']")
    [[ $got == "$SW_MAC" ]] || fail "$tag: rank $r was told the switch's MAC is $got, eth0's is $SW_MAC"
    [[ $(json_get "$f" "j['switch']") == "$SW_IP:48864" ]] ||
      fail "$tag: rank $r was told the switch is at $(json_get "$f" "j['switch']"), want $SW_IP:48864"
    [[ $(json_get "$f" "j['responses']") == $(json_get "$f" "j['packets']") ]] ||
      fail "$tag: rank $r accepted $(json_get "$f" "j['responses']") of $(json_get "$f" "j['packets']") results"
    SESSION_SENT=$((SESSION_SENT + $(json_get "$f" "j['sent']")))
  done
  pass "$tag: $n workers, $count $type, $checksums checksums, every element exact; the advertised MAC is eth0's ($SW_MAC); rank 0: $(cat "$WORK/$tag-r0.json")"
}

# expect_all TAG N EXPR: EXPR (over the JSON line j) is true for every rank of session TAG.
expect_all() {
  local r
  for ((r = 0; r < $2; r++)); do
    [[ $(json_get "$WORK/$1-r$r.json" "$3") == True ]] || fail "$1: rank $r: not $3: $(cat "$WORK/$1-r$r.json")"
  done
}

# --- a) raw frames ----------------------------------------------------------------------------
SESSION_SENT=0
# 1% of requests and of responses dropped by the switch's drop simulator: retransmissions too.
sml_start_switch --bind "$SW_IP" --port 48864 --via in_sw --log "$WORK/switch-raw.log" -- \
  --io raw --iface eth0 --counters-json "$WORK/counters-raw.json" \
  --ingress-drop 0.01 --egress-drop 0.01 --drop-seed 7 || fail "the raw-mode switch did not start"
run_session raw-int32 3 int32 20000 16 reference
run_session raw-float32 3 float32 20000 16 reference
run_session raw-2w 2 int32 5000 8 reference
for tag in raw-int32:3 raw-float32:3 raw-2w:2; do
  # The switch computes every checksum itself and sends one datagram per frame.
  expect_all "${tag%:*}" "${tag#*:}" "j['checksum_offloaded'] == 0 and j['gso_frames'] == 0 and j['not_my_mac'] == 0"
done
pass "raw: every response frame had correct IPv4 and UDP checksums, one datagram, the worker's MAC"
retransmits=0
for f in "$WORK"/raw-*-r*.json; do retransmits=$((retransmits + $(json_get "$f" "j['retransmits']"))); done
((retransmits > 0)) || fail "raw: no worker retransmitted although the switch dropped 1% each way"
pass "raw: $retransmits retransmissions (the switch's 1% simulated loss each way) and still exact"
[[ $(ip -n "$SW" neigh show dev eth0 | grep -c PERMANENT || true) == 0 ]] ||
  fail "raw mode installed neighbour entries: $(ip -n "$SW" neigh show dev eth0)"
sml_stop_switch || fail "the raw-mode switch exited with status $?"
[[ -s "$WORK/counters-raw.json" ]] || fail "the raw-mode switch wrote no counters"
# counter SUFFIX: the value of the one top-level counter whose name ends with SUFFIX (the raw
# channel's are named raw_frames_<verdict>), or nothing if there is none.
counter() {
  json_get "$WORK/counters-raw.json" "next((str(v) for k, v in j.items() if k.endswith('$1')), '')"
}
keys=$(json_get "$WORK/counters-raw.json" "' '.join(sorted(k for k in j if 'checksum' in k))")
if [[ -n $(counter frames_ipv4_checksum_zero) && -n $(counter frames_udp_checksum_partial) ]]; then
  for k in frames_ipv4_checksum_zero frames_udp_checksum_partial; do
    got=$(counter "$k")
    [[ $got == "$SESSION_SENT" ]] || fail "counter *$k = $got, want $SESSION_SENT (every frame the workers sent)"
  done
  for k in frames_ok refused_checksum frames_ipv4_checksum_bad frames_udp_checksum_bad; do
    [[ $(counter "$k") == 0 ]] || fail "counter *$k = $(counter "$k"), want 0: $(cat "$WORK/counters-raw.json")"
  done
  pass "raw: the switch accepted all $SESSION_SENT worker frames, counted as IPv4 checksum zero and UDP checksum partial (checksum counters: $keys)"
else
  echo "note: the switch's counters have no *frames_ipv4_checksum_zero/*frames_udp_checksum_partial (checksum keys: ${keys:-none}); that assertion is skipped"
fi

# --- b) kernel UDP ----------------------------------------------------------------------------
SESSION_SENT=0
sml_start_switch --bind "$SW_IP" --port 48864 --via in_sw --log "$WORK/switch-udp.log" -- \
  --neighbour-entries --counters-json "$WORK/counters-udp.json" || fail "the UDP-mode switch did not start"
run_session udp-int32 3 int32 20000 16 correct
run_session udp-float32 3 float32 20000 16 correct
expect_all udp-int32 3 "j['not_my_mac'] == 0"
neigh=$(ip -n "$SW" neigh show dev eth0)
for i in 1 2 3; do
  grep -Eq "^$DATA\.$i lladdr 02:5e:01:00:00:0$i PERMANENT proto 83" <<<"$neigh" ||
    fail "no permanent neighbour entry $DATA.$i -> 02:5e:01:00:00:0$i proto 83 on the switch's eth0: $neigh"
done
pass "udp: the switch installed a permanent neighbour entry for each worker: $(tr '\n' ';' <<<"$neigh")"
# Control: the same worker with the reference's checksums gets nothing from a kernel UDP socket
# (the kernel drops its frames), which is why --io raw exists.
rc=0
ip netns exec "$(ns_of w0)" "$REF" --controller "$SW_IP:$CTL_PORT" --rank 0 --num-workers 1 --iface eth0 \
  --count 640 --checksums reference --timeout-s 3 >"$WORK/udp-control.json" 2>"$WORK/udp-control.err" || rc=$?
if ! { ((rc == 1)) && grep -q "0 of 10 results came back" "$WORK/udp-control.err"; }; then
  fail "udp: a worker with reference checksums did not time out without results (exit $rc): $(cat "$WORK/udp-control.err")"
fi
pass "udp: control: frames with the reference's checksums are dropped by the switch host's kernel"
sml_stop_switch || fail "the UDP-mode switch exited with status $?"
left=$(ip -n "$SW" neigh show dev eth0 | grep PERMANENT || true)
[[ -z $left ]] || fail "neighbour entries left after the switch exited: $left"
pass "udp: the neighbour entries are gone after the switch exited"
pass "reference-style clients: raw and kernel-UDP modes"
