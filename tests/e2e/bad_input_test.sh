#!/usr/bin/env bash
# Bad input of every kind gets a clear error naming the problem, never a hang, and never
# crashes the switch.
source "$(dirname "$0")/lib.sh"

# expect_error NAME PATTERN DEADLINE_S -- command...: the command must fail (non-zero exit, not
# a crash signal) and print PATTERN; DEADLINE_S only turns a hang into a failure (a loaded
# machine may be slow: no bound on how fast it fails). That it failed for the right reason
# (e.g. the RPC timeout, not a longer wait) is in PATTERN.
expect_error() {
  local name=$1 pattern=$2 deadline=$3; shift 4
  local rc=0
  timeout "$deadline" "$@" > "$WORK/out.log" 2>&1 || rc=$?
  [ $rc -ne 0 ] || { cat "$WORK/out.log"; fail "$name: exited 0"; }
  [ $rc -lt 124 ] || { cat "$WORK/out.log"; fail "$name: exit code $rc (hung past $deadline s, or crashed)"; }
  grep -qE -- "$pattern" "$WORK/out.log" || { cat "$WORK/out.log"; fail "$name: output lacks /$pattern/"; }
  pass "$name: $(grep -m1 -E -- "$pattern" "$WORK/out.log")"
}

expect_error "unknown option" "--bogus" 30 -- "$SWITCHML" demo --bogus
expect_error "unknown subcommand" "frobnicate" 30 -- "$SWITCHML" frobnicate
expect_error "demo workers out of range" "--workers must be in \[1, 64\]" 30 -- "$SWITCHML" demo --workers 0
expect_error "demo bad size" "--size.*unknown suffix" 30 -- "$SWITCHML" demo --size 12parsecs
expect_error "demo bad type" "--type must be float32 or int32" 30 -- "$SWITCHML" demo --type float64
expect_error "rank out of range" "rank must be in \[0, num_workers=2\), got 5" 30 -- \
    "$SWITCHML" allreduce --rank 5 --workers 2
expect_error "bad packet size" "elements_per_packet must be one of 64, 256, 512, 1024, got 100" 30 -- \
    "$SWITCHML" allreduce --rank 0 --workers 1 --elements-per-packet 100
expect_error "bad window" "window_packets" 30 -- "$SWITCHML" allreduce --rank 0 --workers 1 --window 0
expect_error "bad controller address" "controller_address" 30 -- \
    "$SWITCHML" allreduce --rank 0 --workers 1 --controller 999.1.2.3:50099
expect_error "switch: bad slots" "num_slots" 30 -- "$SWITCHML" switch --slots 0
expect_error "switch: bad drop probability" "ingress_drop_probability" 30 -- "$SWITCHML" switch --ingress-drop 1.5
# Configuration files (--config): a misspelt key, a bad value, a missing file.
printf 'slots = 64\nslotz = 5\n' > "$WORK/typo.conf"
expect_error "switch: unknown config key" "slotz" 30 -- "$SWITCHML" switch --config "$WORK/typo.conf"
printf 'io-threads = 99\n' > "$WORK/bad.conf"
expect_error "switch: bad config value" "io.threads" 30 -- "$SWITCHML" switch --config "$WORK/bad.conf"
printf 'listen = "0.0.0.0:0"\nswitches = ["127.0.0.1:9"]\n' > "$WORK/ctl.conf"
expect_error "controller: unknown config key" "switches" 30 -- "$SWITCHML" controller --config "$WORK/ctl.conf"
expect_error "switch: missing config file" "$WORK/none.conf" 30 -- "$SWITCHML" switch --config "$WORK/none.conf"
# Not a file to read to its end: an error, not a hang.
expect_error "switch: config from /dev/zero" "'/dev/zero': cannot read it: not a regular file" 30 -- \
  "$SWITCHML" switch --config /dev/zero
# A good one is applied, and the command line wins over it.
printf '# the site settings\nslots = 96\nlate-duplicate-guard = true\n' > "$WORK/good.conf"
start_switch_on 0 0 config1.log --config "$WORK/good.conf"
grep -q ", 96 slots," "$SW_LOG" || { cat "$SW_LOG"; fail "switch --config: the file's slots = 96 not applied"; }
stop_switch
start_switch_on 0 0 config2.log --config "$WORK/good.conf" --slots 80
grep -q ", 80 slots," "$SW_LOG" || { cat "$SW_LOG"; fail "switch --config: --slots 80 did not win over the file"; }
stop_switch
pass "switch --config: the file's options applied, the command line's win"

# No switch at this address: a clear error naming it, ended by the RPC timeout (2 s here, named
# in the error).
expect_error "switch not running" "127\.0\.0\.1:9 unreachable.* within 2000 ms" 30 -- \
    "$SWITCHML" allreduce --rank 0 --workers 1 --controller 127.0.0.1:9 --rpc-timeout-ms 2000

# Malformed and foreign datagrams to a running switch: dropped and counted by reason; a job
# then runs correctly on the same switch.
start_switch
python3 - "$UDP_PORT" <<'PY'
import socket, struct, sys
port = int(sys.argv[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def hdr(msg_type=1, size=1, job=0, tsi=0, pool=0):
    return bytes([msg_type << 4 | size, job]) + struct.pack("<I", tsi) + struct.pack(">H", pool) + b"\0\0"
bad = [
    b"",                                   # truncated (empty)
    b"\x11\x05\x46",                        # truncated
    hdr(msg_type=2) + bytes(256),           # unknown msg type
    hdr(size=2) + bytes(512),               # unsupported size code (reference drops 2)
    hdr(size=0) + bytes(128),               # unsupported size code 0
    hdr(size=1) + bytes(100),               # length mismatch
    hdr(size=3) + bytes(256),               # length mismatch (code 3 = 1024 bytes)
    hdr(size=1, pool=5) + bytes(256),       # well-formed, but from an unregistered sender
]
for b in bad:
    s.sendto(b, ("127.0.0.1", port))
s.sendto(bytes(70000 // 2), ("127.0.0.1", port))   # oversized
PY
# The switch has read them all (the counters asserted below, live) before the job starts.
malformed_counted() {
  "$SWITCHML" jobs list --controller 127.0.0.1:$CTL_PORT --json > "$WORK/live.json" 2>/dev/null &&
    [ "$(json_get "$WORK/live.json" "(lambda c: c['decode_truncated'] >= 2 and c['decode_unknown_msg_type'] >= 1 and
         c['decode_unsupported_size_code'] >= 2 and c['decode_length_mismatch'] >= 2 and
         c['unknown_sender'] >= 1)(j['switch_counters'])")" = True ]
}
sml_wait_for 30 "the switch to count the malformed datagrams" malformed_counted ||
  { cat "$WORK/live.json"; fail "the switch did not count the malformed datagrams within 30 s"; }
for r in 0 1; do
  "$SWITCHML" allreduce --rank $r --workers 2 --controller 127.0.0.1:$CTL_PORT --type int32 --count 100000 \
      --json "$WORK/r$r.json" > "$WORK/r$r.log" 2>&1 &
  sml_track $!
  eval "W$r=$!"
done
wait "$W0" || { cat "$WORK/r0.log"; fail "rank 0 failed after malformed traffic"; }
wait "$W1" || { cat "$WORK/r1.log"; fail "rank 1 failed after malformed traffic"; }
stop_switch
C="$WORK/switch-counters.json"
[ "$(json_get "$C" "j['decode_truncated']")" -ge 2 ] || fail "truncated datagrams not counted"
[ "$(json_get "$C" "j['decode_unknown_msg_type']")" -ge 1 ] || fail "unknown msg type not counted"
[ "$(json_get "$C" "j['decode_unsupported_size_code']")" -ge 2 ] || fail "unsupported size codes not counted"
[ "$(json_get "$C" "j['decode_length_mismatch']")" -ge 2 ] || fail "length mismatches not counted"
[ "$(json_get "$C" "j['unknown_sender']")" -ge 1 ] || fail "unregistered sender not counted"
pass "malformed datagrams dropped and counted: $(json_get "$C" "{k: v for k, v in j.items() if v and ('decode' in k or 'unknown' in k or 'trunc' in k)}")"

# Workers that disagree on the tensor size (contract C1,
# docs/protocol.md#c1-identical-call-sequence): the call descriptor that every call carries
# makes the call fail on BOTH ranks, naming the two counts, well within the job timeout (the
# reference would hang one rank and give the other a partial result with status OK).
start_switch
for r in 0 1; do
  "$SWITCHML" allreduce --rank $r --workers 2 --controller 127.0.0.1:$CTL_PORT --type int32 \
      --count $((1000 + 500 * r)) --call-timeout-ms 1500 > "$WORK/m$r.log" 2>&1 &
  sml_track $!
  eval "M$r=$!"
done
rc0=0; rc1=0
wait "$M0" || rc0=$?
wait "$M1" || rc1=$?
[ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] || { cat "$WORK/m0.log" "$WORK/m1.log"; fail "mismatched sizes: exit codes $rc0 $rc1"; }
for r in 0 1; do
  grep -q "INVALID_ARGUMENT.*the element count differs (this worker: $((1000 + 500 * r)); the other worker: $((1500 - 500 * r)))" "$WORK/m$r.log" ||
    { cat "$WORK/m$r.log"; fail "mismatched sizes: rank $r does not name both counts"; }
done
pass "mismatched sizes: $(grep -m1 -o "the element count differs[^;]*;[^)]*)" "$WORK/m1.log")"
stop_switch
