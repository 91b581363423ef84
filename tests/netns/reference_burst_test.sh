#!/usr/bin/env bash
# Reference clients' first burst and what operators see (issue #18), on namespaces of its own:
# a switch host and 4 reference-style workers (tests/netns/ref_worker.cc: the reference DPDK
# client's frames, ARP off), data interfaces on one bridge, gRPC over a second one, IPv6 off so
# that the kernels send nothing on the data bridge by themselves.
# Usage: reference_burst_test.sh SWITCHML_BINARY REF_WORKER_BINARY OPERATIONS_MD
#  a) `switchml switch --io raw` announces itself: before it starts the data bridge does not know
#     the switch's MAC; with no worker running, the bridge learns it on the switch's port (its
#     gratuitous ARP), and learns it again after the entry is deleted (--announce-interval-s 1).
#  b) the example of docs/operations.md ("Serving reference clients": 4 workers, a window of 256
#     packets of 256 elements; the page's config block has no comment after a value, which the
#     reference parser keeps as part of the value) as one burst: every worker registers, the switch is
#     stopped (SIGSTOP), every worker sends its whole first window (1024 frames in all), then the
#     switch continues. With the default ring: raw_ring_drops == 0, every frame counted, every
#     element exact. While the session's switch still runs, `switchml jobs list` lists job 0 as
#     the reference session with 4/4 workers and its counters (received == every frame sent),
#     the drop reasons (duplicates, the drop simulator's, raw_ring_drops) and the raw_* transport
#     counters; --stats-interval printed the counters that moved (datagrams_received, consumed,
#     multicast_rounds, raw_frames, raw_frames_ipv4_checksum_zero).
#  c) control: the same burst into a ring of --raw-ring-frames 256 (about 490 slots of 1024-element
#     frames after rounding to whole 1 MiB blocks) loses frames, counted in raw_ring_drops (> 0, in
#     `jobs list` and at exit); the
#     workers retransmit and still get exact results.
#  d) kernel-UDP mode: a worker with the reference's checksums registers and sends; the kernel
#     drops its datagrams; the switch warns once, naming the kernel counters that rose, and its
#     counters (--counters-json) carry kernel_ip_in_hdr_errors > 0.
# Skips (exit 77) without root or network namespaces.
usage="usage: reference_burst_test.sh SWITCHML_BINARY REF_WORKER_BINARY OPERATIONS_MD"
SWITCHML=${1:?$usage}
REF=${2:?$usage}
DOC=${3:?$usage}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export SWITCHML

require_netns bridge
sml_operator_token
own_namespaces smlbst
N=4
WINDOW=256
EPP=256
COUNT=$((2 * WINDOW * EPP))  # two windows per worker

# --- The documented example --------------------------------------------------------------------
ini=$(awk '/^## Serving reference clients/ {s = 1} s && /^```ini/ {c = 1; next} c && /^```/ {exit} c' "$DOC")
[[ -n $ini ]] || fail "no \`\`\`ini block in the \"Serving reference clients\" section of $DOC"
# Comments only on lines of their own: after a value the reference parser keeps them in the value.
values=$(grep -Ev '^(#|\[|$)' <<<"$ini")
! grep -Eq '[;#]' <<<"$values" || fail "the documented switchml.cfg has a comment after a value (the reference parser keeps it): $(grep -E '[;#]' <<<"$values")"
ini_value() { sed -n "s/^$1 *= *\([^ #]*\).*/\1/p" <<<"$ini" | head -1; }
[[ $(ini_value num_workers) == "$N" && $(ini_value max_outstanding_packets) == "$WINDOW" &&
   $(ini_value packet_numel) == "$EPP" && $(ini_value num_worker_threads) == 1 ]] ||
  fail "the documented example is not what this test runs ($N workers, window $WINDOW, $EPP elements, 1 thread): $ini"
pass "docs: the example switchml.cfg has no comment after a value and is what this test runs ($N workers x window $WINDOW, packets of $EPP, one thread)"

# --- Topology ----------------------------------------------------------------------------------
ref_topology 10.82.1 10.82.2 1 sw w0 w1 w2 w3
fdb_has_switch() {  # captured first: grep -q on a pipe + pipefail fails on SIGPIPE
  local fdb; fdb=$(bridge -n "$BR" fdb show br brdata) || return 1
  grep -qi "^$SW_MAC dev d-sw " <<<"$fdb"
}
! fdb_has_switch || fail "the data bridge knows the switch's MAC before the switch started: $(bridge -n "$BR" fdb show br brdata)"
pass "topology: switch $SW_IP ($SW_MAC) and $N workers on one data bridge, which does not know the switch's MAC yet"

# start_raw_switch TAG [FLAGS...]: the raw-mode switch, stats every 0.5 s, counters to $WORK/TAG.json.
start_raw_switch() {
  local tag=$1
  shift
  sml_start_switch --bind "$SW_IP" --port 48864 --via in_sw --log "$WORK/$tag.log" -- \
    --io raw --iface eth0 --counters-json "$WORK/$tag.json" --stats-interval 0.5 \
    --announce-interval-s 1 "$@" || fail "$tag: the switch did not start"
}
jobs_list() { ip netns exec "$SW" "$SWITCHML" jobs list --controller "$SW_IP:$CTL_PORT" "$@"; }

# burst TAG: the 4 workers register, the switch stops, every worker sends its first window, the
# switch continues; every worker must end exact. Sets SENT (frames the workers sent in all).
burst() {
  local tag=$1 r pids=() rc
  rm -f "$WORK/$tag-go"*
  for ((r = 0; r < N; r++)); do
    ip netns exec "$(ns_of "w$r")" "$REF" --controller "$SW_IP:$CTL_PORT" --rank "$r" --num-workers "$N" \
      --iface eth0 --count "$COUNT" --type int32 --window "$WINDOW" --elements-per-packet "$EPP" \
      --retransmit-ms "${RTO_MS:-5000}" --timeout-s 60 --hold-file "$WORK/$tag-go" \
      >"$WORK/$tag-r$r.json" 2>"$WORK/$tag-r$r.err" &
    pids+=($!)
    sml_track $!
  done
  all_there() { local k; for ((k = 0; k < N; k++)); do [[ -e "$WORK/$tag-go.$1.$k" ]] || return 1; done; }
  sml_wait_for 30 "every worker of $tag to register" all_there ready || fail "$tag: not every worker registered"
  kill -STOP "$SW_PID"
  : >"$WORK/$tag-go"
  sml_wait_for 30 "every worker of $tag to send its first window" all_there sent ||
    fail "$tag: not every worker sent its first window"
  kill -CONT "$SW_PID"
  SENT=0
  for ((r = 0; r < N; r++)); do
    rc=0
    wait "${pids[$r]}" || rc=$?
    sml_untrack "${pids[$r]}"
    ((rc == 0)) || fail "$tag: rank $r exited with $rc: $(cat "$WORK/$tag-r$r.err")"
    [[ $(json_get "$WORK/$tag-r$r.json" "j['ok'] and j['mismatches'] == 0") == True ]] ||
      fail "$tag: rank $r: $(cat "$WORK/$tag-r$r.json")"
    SENT=$((SENT + $(json_get "$WORK/$tag-r$r.json" "j['sent']")))
  done
}
counter() { json_get "$WORK/$1.json" "j.get('$2', 'missing')"; }
# list_counter FILE NAME: the value `jobs list` printed for NAME in its counter sections.
list_counter() { awk -v n="$2" '$1 == n {print $2; exit}' "$1"; }
job0_counter() { sed -n "s/^job 0 (reference session) counters:.* $2=\([0-9]*\).*/\1/p" "$1"; }

# --- a) the bridge learns the switch's MAC without any worker traffic ----------------------------
start_raw_switch raw
grep -q "gratuitous ARP for $SW_IP (MAC $SW_MAC) on eth0" "$WORK/raw.log" ||
  fail "the switch does not say it announces itself: $(cat "$WORK/raw.log")"
sml_wait_for 10 "the data bridge to learn the switch's MAC" fdb_has_switch ||
  fail "the bridge did not learn $SW_MAC: $(bridge -n "$BR" fdb show br brdata)"
pass "a) the data bridge learned the switch's MAC on its port with no worker running: $(bridge -n "$BR" fdb show br brdata | grep -i "$SW_MAC")"
bridge -n "$BR" fdb del "$SW_MAC" dev d-sw master
! fdb_has_switch || fail "could not delete the bridge's entry for $SW_MAC"
sml_wait_for 10 "the data bridge to learn the switch's MAC again" fdb_has_switch ||
  fail "the bridge did not learn $SW_MAC again (no periodic announcement)"
pass "a) deleted, the entry came back (the switch announces itself every second)"

# --- b) the documented example as one burst ----------------------------------------------------
# Defaults: --slots 8192 x --max-workers 256 is more than the default cap, 16384 frames.
grep -q "raw receive ring: 16384 frames" "$WORK/raw.log" || fail "the switch does not say its ring holds 16384 frames: $(cat "$WORK/raw.log")"
burst raw
pass "b) $N workers x window $WINDOW: every worker's first window at once ($((N * WINDOW)) frames) into the stopped switch, $SENT frames in all, every element exact"
jobs_ok() {
  jobs_list >"$WORK/list.txt" 2>&1 || return 1
  [[ $(list_counter "$WORK/list.txt" raw_frames) == "$SENT" && $(job0_counter "$WORK/list.txt" received) == "$SENT" ]]
}
sml_wait_for 10 "jobs list to count all $SENT frames" jobs_ok || fail "b) jobs list: $(cat "$WORK/list.txt")"
grep -Eq "^ +0 +running +4/4 .*REFERENCE SESSION" "$WORK/list.txt" ||
  fail "b) jobs list does not list job 0 as the reference session with 4/4 workers: $(cat "$WORK/list.txt")"
for k in duplicates_dropped late_duplicates_dropped sim_ingress_drops sim_egress_drops unknown_sender \
         raw_ring_drops raw_refused_checksum; do
  [[ -n $(list_counter "$WORK/list.txt" "$k") ]] || fail "b) jobs list lacks the drop counter $k: $(cat "$WORK/list.txt")"
done
[[ $(list_counter "$WORK/list.txt" raw_ring_drops) == 0 ]] || fail "b) jobs list: raw_ring_drops is not 0: $(cat "$WORK/list.txt")"
[[ $(list_counter "$WORK/list.txt" raw_frames_ipv4_checksum_zero) == "$SENT" ]] ||
  fail "b) jobs list: raw_frames_ipv4_checksum_zero is not $SENT: $(cat "$WORK/list.txt")"
pass "b) jobs list: job 0 is the reference session, 4/4, received=$SENT; drops by reason and raw_* counters listed: $(grep -E '^ +0 ' "$WORK/list.txt")"
moved() {
  local k
  for k in datagrams_received consumed multicast_rounds raw_frames raw_frames_ipv4_checksum_zero; do
    awk '/counters that moved/ {s = 1; next} /^switchml switch:/ {s = 0} s' "$WORK/raw.log" | grep -Eq "^ +$k +[0-9]+ +\+[0-9]+$" || return 1
  done
}
sml_wait_for 10 "--stats-interval to print the counters that moved" moved ||
  fail "b) --stats-interval did not list the counters that moved: $(cat "$WORK/raw.log")"
pass "b) --stats-interval listed every counter that moved (total and change)"
sml_stop_switch || fail "the raw switch exited with status $?"
[[ $(counter raw raw_ring_drops) == 0 ]] || fail "b) raw_ring_drops = $(counter raw raw_ring_drops), want 0"
[[ $(counter raw raw_frames) == "$SENT" ]] || fail "b) raw_frames = $(counter raw raw_frames), want $SENT (every frame sent)"
pass "b) raw_ring_drops == 0 and raw_frames == $SENT: the default ring held the whole first burst"

# --- c) control: a ring smaller than the burst -------------------------------------------------
start_raw_switch small --raw-ring-frames 256
RTO_MS=200 burst small
listed_drops() {
  jobs_list >"$WORK/list-small.txt" 2>&1 || return 1
  [[ $(list_counter "$WORK/list-small.txt" raw_ring_drops) =~ ^[1-9][0-9]*$ ]]
}
sml_wait_for 10 "jobs list to show the ring drops" listed_drops || fail "c) jobs list: $(cat "$WORK/list-small.txt")"
sml_stop_switch || fail "the small-ring switch exited with status $?"
drops=$(counter small raw_ring_drops)
[[ $drops =~ ^[0-9]+$ ]] && ((drops > 0)) || fail "c) a ring of 256 frames took a burst of $((N * WINDOW)) without drops (raw_ring_drops = $drops)"
pass "c) control: --raw-ring-frames 256 lost $drops frames of the burst (raw_ring_drops), the workers retransmitted, every element exact"

# --- d) kernel-UDP mode: the kernel's drops are seen ---------------------------------------------
sml_start_switch --bind "$SW_IP" --port 48864 --via in_sw --log "$WORK/udp.log" -- \
  --counters-json "$WORK/udp.json" --stats-interval 0.5 || fail "d) the UDP-mode switch did not start"
rc=0
ip netns exec "$(ns_of w0)" "$REF" --controller "$SW_IP:$CTL_PORT" --rank 0 --num-workers 1 --iface eth0 \
  --count 2560 --elements-per-packet 256 --window 10 --checksums reference --timeout-s 3 \
  >"$WORK/udp-w0.json" 2>"$WORK/udp-w0.err" || rc=$?
((rc == 1)) || fail "d) a worker with the reference's checksums got results from a kernel UDP switch (exit $rc)"
warned() { grep -q "warning: the kernel dropped UDP/IP datagrams in this network namespace while workers are registered (.*kernel_ip_in_hdr_errors +[1-9]" "$WORK/udp.log"; }
sml_wait_for 10 "the switch to warn about the kernel's drops" warned || fail "d) no warning: $(cat "$WORK/udp.log")"
sml_stop_switch || fail "the UDP-mode switch exited with status $?"
((($(grep -c "warning: the kernel dropped" "$WORK/udp.log")) == 1)) || fail "d) the warning came more than once"
hdr=$(counter udp kernel_ip_in_hdr_errors)
[[ $hdr =~ ^[0-9]+$ ]] && ((hdr > 0)) || fail "d) kernel_ip_in_hdr_errors = $hdr in the counters"
[[ $(counter udp udp_socket_drops) =~ ^[0-9]+$ ]] || fail "d) no udp_socket_drops counter: $(cat "$WORK/udp.json")"
pass "d) kernel UDP: the switch warned once ($(grep -m1 -o 'while workers are registered ([^)]*)' "$WORK/udp.log")); kernel_ip_in_hdr_errors = $hdr"
pass "reference bursts and operator views"
