#!/usr/bin/env bash
# cluster.sh cleans up after itself and after others:
#  1. a test that fails on purpose inside a subshell whose EXIT trap runs `down` leaves nothing
#     with its prefix (namespaces, links, state file) and no process it started inside the cluster;
#  2. `down` is idempotent and exits 0 when nothing exists;
#  3. leftovers of a crashed run (cluster and processes, no `down`) do not stop a later run with a
#     new name, `list` shows them and `down` removes them;
#  4. `down` of one prefix never touches a cluster whose name merely starts with it;
#  5. `up` refuses an existing name without harming it, rejects bad arguments without creating
#     anything, and rolls back what it created when a step fails half way;
#  6. sml_netns_sweep TAG (scripts/lib.sh; every netns test starts with it) removes the namespaces,
#     processes and cluster state files of dead runs (TAG_PID whose PID is gone, or runs another
#     program) and leaves those of a live run of the same script alone.
# Uses clusters of its own (not the fixture's). Usage: teardown_test.sh CLUSTER_SH
CLUSTER_SH=${1:?cluster.sh}
source "$(dirname "$0")/lib.sh"
require_netns

sml_netns_sweep smltd  # the clusters of an earlier run killed before its cleanup
base=$(sml_netns_owner smltd)
A=${base}_a B=${base}_b C=${base}_c D=${base}_d
# Whatever happens below, remove every cluster this test creates.
sml_at_exit "for n in $A $B $C $D ${D}1; do '$CLUSTER_SH' down --name \$n >/dev/null 2>&1; done"

assert_gone() {  # NAME WHAT
  local left; left=$(leftovers "$1")
  [[ -z "$left" ]] || fail "$2: cluster '$1' left behind: $(echo $left)"
}

# --- 1. failing test in a subshell with a trap -------------------------------------------------
set +e
(
  set -e
  trap "'$CLUSTER_SH' down --name $A" EXIT
  "$CLUSTER_SH" up --name "$A" --workers 3 --rate 100mbit --loss-to-switch 0.05 --loss-from-switch 0.02
  ip netns exec "$A-sw" iptables -w -S SMLLOSS | grep -E 'probability 0\.0(5|4999)' >/dev/null || exit 90
  ip netns exec "$A-w2" iptables -w -S SMLLOSS | grep -E 'probability 0\.0(2|1999)' >/dev/null || exit 91
  "$CLUSTER_SH" exec --name "$A" --host w1 -- sleep 300 &
  echo $! > "$WORK/pid-w1"
  "$CLUSTER_SH" exec --name "$A" --host sw -- sleep 300 &
  echo $! > "$WORK/pid-sw"
  sml_wait_for 10 "processes inside $A-sw and $A-w1" netns_has_pids "$A-sw" "$A-w1" || exit 92
  # `up` on an existing name fails and leaves the cluster intact.
  if "$CLUSTER_SH" up --name "$A" --workers 1 2> "$WORK/dup.err"; then exit 93; fi
  grep -q "already exists" "$WORK/dup.err" || exit 94
  [[ $(ip netns list | grep -c "^$A-") == 5 ]] || exit 95
  exit 3  # the test "fails" here
)
rc=$?
set -e
((rc == 3)) || fail "the failing subshell exited with $rc, expected 3 (its own checks failed: 90-95)"
assert_gone "$A" "after a failed test"
for f in pid-w1 pid-sw; do
  p=$(cat "$WORK/$f")
  sml_wait_gone "$p" 30 "" || fail "process $p started inside the cluster survived its teardown"
done
pass "a failing test's EXIT trap removed everything of '$A', including its processes"

# --- 2. idempotent down -------------------------------------------------------------------------
out=$("$CLUSTER_SH" down --name "$A") || fail "second down exited non-zero"
[[ "$out" == *"nothing to remove"* ]] || fail "second down said: $out"
"$CLUSTER_SH" down --name "${base}never" >/dev/null || fail "down of a never-created cluster exited non-zero"
pass "down is idempotent"

# --- 3. leftovers of a crashed run --------------------------------------------------------------
set +e
(
  "$CLUSTER_SH" up --name "$B" --workers 2 >/dev/null
  "$CLUSTER_SH" exec --name "$B" --host w0 -- sleep 300 &
  echo $! > "$WORK/pid-b"
  kill -9 $BASHPID  # crash: no trap, no down
)
set -e
[[ $(ip netns list | grep -c "^$B-") == 4 ]] || fail "the crashed run did not leave its cluster (test setup)"
listing=$("$CLUSTER_SH" list) || fail "list failed"
grep -qE "^$B +4 +2 " <<<"$listing" || fail "list does not show the leftover cluster '$B': $listing"
"$CLUSTER_SH" up --name "$C" --workers 2 >/dev/null || fail "a new run cannot start next to the leftovers"
source "/tmp/switchml-cluster-$C.env"
ip netns exec "$C-w1" "$PYTHON" "$NETTOOL" ping "$CLUSTER_SWITCH_IP" --count 1 --timeout 5 >/dev/null ||
    fail "the new cluster does not work next to the leftovers"
rm -f "/tmp/switchml-cluster-$B.env"  # a crash can also lose the state file: down must not need it
"$CLUSTER_SH" down --name "$B" >/dev/null || fail "down of the leftovers failed"
assert_gone "$B" "down of a crashed run"
p=$(cat "$WORK/pid-b")
sml_wait_gone "$p" 30 "" || fail "a process of the crashed run survived down"
[[ $(ip netns list | grep -c "^$C-") == 4 ]] || fail "down of '$B' touched cluster '$C'"
"$CLUSTER_SH" down --name "$C" >/dev/null
assert_gone "$C" "down"
pass "leftovers of a crashed run do not block a new run, list shows them, down removes them"

# --- 4. prefixes --------------------------------------------------------------------------------
"$CLUSTER_SH" up --name "$D" --workers 1 >/dev/null
"$CLUSTER_SH" up --name "${D}1" --workers 1 >/dev/null
"$CLUSTER_SH" down --name "$D" >/dev/null
assert_gone "$D" "down"
[[ $(ip netns list | grep -c "^${D}1-") == 3 && -e "/tmp/switchml-cluster-${D}1.env" ]] ||
    fail "down --name $D damaged cluster ${D}1"
"$CLUSTER_SH" down --name "${D}1" >/dev/null
assert_gone "${D}1" "down"
pass "down --name P leaves cluster P1 alone"

# --- 5. bad arguments and half-way failures -----------------------------------------------------
bad() {  # expected-message args...
  local msg=$1; shift
  if "$CLUSTER_SH" "$@" > "$WORK/bad.out" 2>&1; then fail "cluster.sh $* succeeded"; fi
  grep -q -- "$msg" "$WORK/bad.out" || fail "cluster.sh $*: expected '$msg' in: $(cat "$WORK/bad.out")"
}
bad "--workers must be" up --name "$D" --workers 0
bad "--workers must be" up --name "$D" --workers 251
bad "--name must be" up --name "bad-name!" --workers 1
bad "--name must be" up --name "x123456789x123456789x123456789xyz" --workers 1
bad "--name is required" up --workers 1
bad "--rate must be" up --name "$D" --workers 1 --rate fast
bad "--switches must be" up --name "$D" --workers 1 --switches 0
bad "--switches must be" up --name "$D" --workers 1 --switches 9
bad "exceed the 254 host addresses" up --name "$D" --workers 250 --switches 5
bad "--switch-rate must be" up --name "$D" --workers 1 --switch-rate fast
bad "--switch-burst must be" up --name "$D" --workers 1 --switch-burst big
bad "--mtu must be" up --name "$D" --workers 1 --mtu 100000
bad "--loss-to-switch must be" up --name "$D" --workers 1 --loss-to-switch 1.5
bad "--loss-from-switch must be" up --name "$D" --workers 1 --loss-from-switch 1
bad "unknown option" up --name "$D" --workers 1 --bogus
bad "--host must be" exec --name "$D" --host x1 -- true
bad "does not exist" exec --name "$D" --host sw1 -- true
bad "does not exist" exec --name "$D" --host w0 -- true
bad "unknown command" frobnicate
assert_gone "$D" "rejected arguments"
# A failure half way (iptables fails once the namespaces and links exist) rolls everything back.
if IPTABLES=false "$CLUSTER_SH" up --name "$D" --workers 2 --loss-to-switch 0.1 > "$WORK/half.out" 2>&1; then
  fail "up succeeded although iptables failed"
fi
grep -q "removing what was created" "$WORK/half.out" || fail "up did not roll back: $(cat "$WORK/half.out")"
assert_gone "$D" "rollback of a failed up"
help=$("$CLUSTER_SH" --help) || fail "--help exited non-zero"
grep -q "exec --name PREFIX --host" <<<"$help" || fail "--help does not describe exec"
pass "bad arguments rejected with a message naming the option; a failed up rolls back"

# --- 6. sweeping the leftovers of killed runs -----------------------------------------------------
tag=smlsweep
# A run that is gone: its pid is that of a finished process.
bash -c 'exit 0' &
dead=$!
wait "$dead"
# A pid reused by another program: alive, but not running this script.
sleep 300 &
stranger=$!
sml_track "$stranger"
sml_at_exit "for n in ${tag}_${dead} ${tag}_${stranger}_x ${tag}_$$; do ip netns del \$n-h 2>/dev/null; rm -f /tmp/switchml-cluster-\$n.env; done"
for n in "${tag}_$dead" "${tag}_${stranger}_x" "${tag}_$$"; do
  ip netns add "$n-h"
  ip -n "$n-h" link add v0 type veth peer name v1
  : > "/tmp/switchml-cluster-$n.env"
done
ip netns exec "${tag}_$dead-h" sleep 300 &
inside=$!
sml_track "$inside"
sml_wait_for 30 "a process inside ${tag}_$dead-h" netns_has_pids "${tag}_$dead-h" || fail "sweep: no process inside the dead run's namespace (test setup)"
sml_netns_sweep "$tag" 2> "$WORK/sweep.err" || fail "sml_netns_sweep failed: $(cat "$WORK/sweep.err")"
for n in "${tag}_$dead" "${tag}_${stranger}_x"; do
  [[ -z $(leftovers "$n") ]] || fail "sweep: the leftovers of the dead run $n are still there: $(echo $(leftovers "$n"))"
done
sml_wait_gone "$inside" 30 "the process inside the dead run's namespace to be stopped" ||
  fail "sweep: the process inside the dead run's namespace survived"
namespaces=$(ip netns list)  # captured first: grep -q on a pipe + pipefail fails on SIGPIPE
if ! grep -q "^${tag}_$$-h\b" <<<"$namespaces" || [[ ! -e "/tmp/switchml-cluster-${tag}_$$.env" ]]; then
  fail "sweep: it removed the namespace or state file of this live run (${tag}_$$)"
fi
grep -q "removing what earlier runs left behind" "$WORK/sweep.err" || fail "sweep: it did not say what it removed"
ip netns del "${tag}_$$-h"
rm -f "/tmp/switchml-cluster-${tag}_$$.env"
pass "sml_netns_sweep removed the namespaces, process and state files of dead runs (pid gone, pid reused), not a live run's: $(cat "$WORK/sweep.err")"
