#!/usr/bin/env bash
# Neighbour entries for reference clients (issue #18, part 1): `switchml switch --neighbour-entries`
# installs a permanent neighbour entry only for a worker address it may (transport::
# CheckNeighbourEntry), refuses the registration of any other with its reason, tags its entries
# (proto 83) and removes them when the worker is forgotten, at exit, and after a crash at the next
# start; without the flag (the default) it installs none.
# Usage: neighbour_test.sh SWITCHML_BINARY REF_WORKER_BINARY
#
# Namespaces of its own (always removed, also on failure and at the test's deadline): a
# switch host sw (eth0 10.82.1.254/24, default route via the gateway), a gateway gw
# (10.82.1.1, answers ARP) and a client host cl (10.82.1.50) from which
# switchml_ref_worker --register-only registers "workers" with any IPv4 and MAC, on a bridge in a
# fourth namespace. The switch host also has an operator's static entry 10.82.1.9.
#  a) --neighbour-entries: registrations of a loopback address, the host's own address, the
#     gateway at another MAC, an off-subnet address and the subnet's broadcast address are each
#     refused with FailedPrecondition naming the job, rank, address and reason and the accepted
#     subnet; the switch host's neighbour table (ip neigh, states aside) is unchanged and it still
#     reaches the gateway and its own loopback (ping);
#  b) a valid worker gets a PERMANENT entry tagged proto 83; a new session without it replaces it;
#     the operator's static entry is never touched (also when a worker registers its address and MAC);
#  c) SIGKILL leaves the entry; a switch started without the flag warns about it and keeps it; a
#     restart with the flag removes it; a clean exit (SIGTERM) removes the entries too;
#  d) without the flag: a valid worker is accepted and gets no entry (the switch notes it once);
#     --bind 127.0.0.1: with the flag the switch refuses to start (loopback), without it a worker
#     registering 127.0.0.1 with a MAC leaves lo's neighbour table empty and loopback working;
#     --io raw --neighbour-entries is refused.
# Skips (exit 77) without root or network namespaces.
SWITCHML=${1:?usage: neighbour_test.sh SWITCHML_BINARY REF_WORKER_BINARY}
REF=${2:?usage: neighbour_test.sh SWITCHML_BINARY REF_WORKER_BINARY}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export SWITCHML

require_netns python3
switch_help=$("$SWITCHML" switch --help 2>&1)  # not piped into grep -q: SIGPIPE + pipefail
grep -q -- '--neighbour-entries' <<<"$switch_help" || fail "$SWITCHML switch has no --neighbour-entries"

sml_operator_token
own_namespaces smlnbr
SW=$(ns_of sw)

DATA=10.82.1
SW_IP=$DATA.254
GW_IP=$DATA.1
GW_MAC=02:5e:82:00:00:01
OP_IP=$DATA.9
OP_MAC=02:5e:82:00:00:09

# --- Topology --------------------------------------------------------------------------------
netns_add br sw gw cl
netns_bridges br br0
for h in sw gw cl; do
  case $h in sw) octet=254 ;; gw) octet=1 ;; cl) octet=50 ;; esac
  netns_bridge_port "$h" eth0 "02:5e:82:00:00:$(printf %02x "$octet")" br br0 "v-$h"
  ip -n "$(ns_of "$h")" addr add "$DATA.$octet/24" dev eth0
done
ip -n "$SW" route add default via "$GW_IP" dev eth0
ip -n "$SW" neigh add "$OP_IP" lladdr "$OP_MAC" dev eth0 nud permanent  # the operator's

# ping IP: one ICMP echo from the switch host, answered within 2 s.
ping_from_sw() { ip netns exec "$SW" python3 "$NETTOOL" ping "$1" --count 1 --timeout 2 >/dev/null; }
# The switch host reaches the gateway (by ARP) and the client host, and its own loopback.
reachable() {
  ping_from_sw "$GW_IP" || fail "$1: the switch host cannot ping the gateway $GW_IP"
  ping_from_sw 127.0.0.1 || fail "$1: the switch host cannot ping 127.0.0.1"
}
reachable "before"
ping_from_sw "$DATA.50" || fail "the switch host cannot ping the client host"
# table: the switch host's IPv4 neighbour entries, one a line, without the states that change on
# their own (REACHABLE, STALE, DELAY, PROBE).
table() {
  ip -n "$SW" -4 neigh show | sed -E 's/ (REACHABLE|STALE|DELAY|PROBE)( |$)/\2/; s/ +$//' | sort
}
grep -q "^$GW_IP dev eth0 lladdr $GW_MAC" <<<"$(table)" || fail "the switch host has no entry for the gateway: $(table)"
pass "topology: switch host $SW_IP, gateway $GW_IP ($GW_MAC, learned by ARP), operator's entry $OP_IP"

# register TAG IPV4 MAC [NS]: one worker (rank 0 of 1) registers IPV4 and MAC from the client host
# (or NS); its JSON in $WORK/TAG.json, its stderr in $WORK/TAG.err; returns its exit status.
register() {
  local tag=$1 ip=$2 mac=$3 ns=${4:-$(ns_of cl)} ctl=${5:-$SW_IP:$CTL_PORT} rc=0
  ip netns exec "$ns" "$REF" --controller "$ctl" --rank 0 --num-workers 1 --register-only \
    --register-ipv4 "$ip" --register-mac "$mac" --timeout-s 8 >"$WORK/$tag.json" 2>"$WORK/$tag.err" || rc=$?
  return "$rc"
}
# refused TAG IPV4 MAC REASON: the registration fails with FailedPrecondition naming REASON.
refused() {
  local tag=$1 ip=$2 mac=$3 reason=$4 err
  if register "$tag" "$ip" "$mac"; then fail "$tag: the switch accepted $ip ($mac): $(cat "$WORK/$tag.json")"; fi
  err=$(cat "$WORK/$tag.err")
  for want in "FAILED_PRECONDITION" "job 0 rank 0: no neighbour entry $ip lladdr $mac on eth0: " "$reason" \
      "only for unicast addresses of $DATA.0/24 (eth0)"; do
    grep -qF -- "$want" <<<"$err" || fail "$tag: the refusal does not say '$want': $err"
  done
  pass "$tag: refused: ${err#*: error: }"
}
# ours: the switch's entries on the switch host's eth0 ("ADDR lladdr MAC PERMANENT proto 83").
ours() { ip -n "$SW" -4 neigh show dev eth0 | sed -E 's/ +$//' | grep -E " proto 83$" || true; }

# --- a) refused registrations ------------------------------------------------------------------
sml_start_switch --bind "$SW_IP" --via in_sw --log "$WORK/switch-a.log" -- --neighbour-entries ||
  fail "the switch did not start with --neighbour-entries"
grep -q "neighbour entries (proto 83)" "$WORK/switch-a.log" || fail "the switch does not say it installs neighbour entries: $(cat "$WORK/switch-a.log")"
before=$(table)
refused loopback 127.0.0.1 02:00:00:00:00:00 "127.0.0.1 is a loopback address (127.0.0.0/8)"
refused own-address "$SW_IP" 02:00:00:00:00:01 "$SW_IP is one of this switch host's own addresses"
refused gateway "$GW_IP" 02:66:66:66:66:66 \
  "the switch host already reaches $GW_IP at $GW_MAC (a "
refused off-subnet 10.99.0.5 02:5e:99:00:00:05 "10.99.0.5 is not on eth0's subnets ($DATA.0/24)"
refused broadcast "$DATA.255" 02:5e:82:00:00:ff "$DATA.255 is the broadcast address of $DATA.0/24"
after=$(table)
[[ $after == "$before" ]] || fail "the refused registrations changed the switch host's neighbour table: before: $before; after: $after"
reachable "after the refused registrations"
[[ $(grep -c "refused a registration: job 0 rank 0" "$WORK/switch-a.log") == 5 ]] ||
  fail "the switch did not log the 5 refusals: $(cat "$WORK/switch-a.log")"
pass "refused registrations: the neighbour table unchanged ($(tr '\n' ';' <<<"$after")), the gateway and loopback reachable"

# --- b) valid workers --------------------------------------------------------------------------
register valid1 "$DATA.7" 02:5e:82:00:00:07 || fail "valid1: refused: $(cat "$WORK/valid1.err")"
[[ $(ours) =~ ^$DATA\.7\ lladdr\ 02:5e:82:00:00:07\ PERMANENT\ proto\ 83$ ]] ||
  fail "valid1: no entry $DATA.7 lladdr 02:5e:82:00:00:07 PERMANENT proto 83: $(ip -n "$SW" -4 neigh show)"
pass "valid worker: entry $(ours)"
# A new session (rank 0 again) forgets the first worker: its entry goes, the new one comes.
register valid2 "$DATA.8" 02:5e:82:00:00:08 || fail "valid2: refused: $(cat "$WORK/valid2.err")"
[[ $(ours) =~ ^$DATA\.8\ lladdr\ 02:5e:82:00:00:08\ PERMANENT\ proto\ 83$ ]] ||
  fail "valid2: want only the entry of $DATA.8: $(ip -n "$SW" -4 neigh show)"
pass "a new session replaced the forgotten worker's entry: $(ours)"
# A worker at the operator's static entry, with its MAC: accepted, the entry stays the operator's.
register operators "$OP_IP" "$OP_MAC" || fail "operators: refused: $(cat "$WORK/operators.err")"
op_entry() { ip -n "$SW" -4 neigh show "$OP_IP" dev eth0 | sed -E 's/ +$//'; }
[[ $(op_entry) == "$OP_IP lladdr $OP_MAC PERMANENT" ]] || fail "the operator's entry changed: $(op_entry)"
[[ -z $(ours) ]] || fail "the new session left entries of ours: $(ours)"
pass "a worker at the operator's static entry: accepted, the entry untouched ($(op_entry))"

# --- c) crash, restart, clean exit ---------------------------------------------------------------
register valid3 "$DATA.7" 02:5e:82:00:00:07 || fail "valid3: refused: $(cat "$WORK/valid3.err")"
kill -KILL "$SW_PID"
wait "$SW_PID" 2>/dev/null || true
sml_untrack "$SW_PID"
[[ -n $(ours) ]] || fail "after SIGKILL the entry is gone already (expected it left behind)"
pass "SIGKILL left the entry: $(ours)"
sml_start_switch --bind "$SW_IP" --via in_sw --log "$WORK/switch-c0.log" || fail "the switch did not start without the flag"
grep -q "eth0 has 1 neighbour entries (proto 83)" "$WORK/switch-c0.log" ||
  fail "a switch without --neighbour-entries does not warn about the leftover: $(cat "$WORK/switch-c0.log")"
[[ -n $(ours) ]] || fail "a switch without --neighbour-entries removed the leftover"
sml_stop_switch || fail "the switch without the flag exited with status $?"
sml_start_switch --bind "$SW_IP" --via in_sw --log "$WORK/switch-c1.log" -- --neighbour-entries ||
  fail "the switch did not restart"
[[ -z $(ours) ]] || fail "the restarted switch left the killed run's entry: $(ours)"
grep -q "removed 1 neighbour entries (proto 83) an earlier run left on eth0" "$WORK/switch-c1.log" ||
  fail "the restarted switch does not say it removed the leftover: $(cat "$WORK/switch-c1.log")"
pass "a restart with --neighbour-entries removed the killed run's entry"
register valid4 "$DATA.7" 02:5e:82:00:00:07 || fail "valid4: refused: $(cat "$WORK/valid4.err")"
[[ -n $(ours) ]] || fail "valid4: no entry installed"
sml_stop_switch || fail "the switch exited with status $? on SIGTERM"
[[ -z $(ours) ]] || fail "entries left after a clean exit: $(ours)"
[[ $(op_entry) == "$OP_IP lladdr $OP_MAC PERMANENT" ]] || fail "the operator's entry changed: $(op_entry)"
reachable "after the switch runs"
pass "a clean exit removed the entry; the operator's entry and connectivity intact"

# --- d) default off; loopback; raw ----------------------------------------------------------------
sml_start_switch --bind "$SW_IP" --via in_sw --log "$WORK/switch-d.log" || fail "the default switch did not start"
before=$(table)
register default "$DATA.7" 02:5e:82:00:00:07 || fail "default: refused: $(cat "$WORK/default.err")"
[[ $(table) == "$before" ]] || fail "the default switch changed the neighbour table: $(table)"
grep -q "note: job 0 rank 0 registered a MAC (02:5e:82:00:00:07)" "$WORK/switch-d.log" ||
  fail "the default switch did not note the MAC: $(cat "$WORK/switch-d.log")"
sml_stop_switch || fail "the default switch exited with status $?"
pass "default (no --neighbour-entries): the worker accepted, no entry, a note in the log"

rc=0
timeout 20 ip netns exec "$SW" "$SWITCHML" switch --bind 127.0.0.1 --port 0 --controller-port 0 \
  --neighbour-entries >"$WORK/lo-flag.log" 2>&1 || rc=$?
((rc == 1)) && grep -q "lo is a loopback or point-to-point interface" "$WORK/lo-flag.log" ||
  fail "--bind 127.0.0.1 --neighbour-entries: want exit 1 naming the loopback, got $rc: $(cat "$WORK/lo-flag.log")"
pass "--bind 127.0.0.1 --neighbour-entries refused: $(grep error "$WORK/lo-flag.log")"
rc=0
timeout 20 ip netns exec "$SW" "$SWITCHML" switch --bind "$SW_IP" --port 48864 --controller-port 0 --io raw \
  --neighbour-entries >"$WORK/raw-flag.log" 2>&1 || rc=$?
((rc == 1)) && grep -q -- "--neighbour-entries is for --io udp" "$WORK/raw-flag.log" ||
  fail "--io raw --neighbour-entries: want exit 1, got $rc: $(cat "$WORK/raw-flag.log")"
pass "--io raw --neighbour-entries refused"
# The issue's case: a worker registering 127.0.0.1 with a MAC on a loopback switch (default).
sml_start_switch --bind 127.0.0.1 --via in_sw --log "$WORK/switch-lo.log" || fail "the loopback switch did not start"
register lo 127.0.0.1 02:00:00:00:00:00 "$SW" "127.0.0.1:$CTL_PORT" || fail "lo: refused: $(cat "$WORK/lo.err")"
[[ -z $(ip -n "$SW" neigh show dev lo) ]] || fail "lo has neighbour entries: $(ip -n "$SW" neigh show dev lo)"
reachable "with a loopback switch"
register lo2 127.0.0.1 02:00:00:00:00:01 "$SW" "127.0.0.1:$CTL_PORT" || fail "lo2: the loopback no longer works: $(cat "$WORK/lo2.err")"
sml_stop_switch || fail "the loopback switch exited with status $?"
pass "--bind 127.0.0.1 (default): a worker registering 127.0.0.1 with a MAC leaves lo alone"
pass "neighbour entries: refused, tagged, removed"
