#!/usr/bin/env bash
# TLS as docs/operations.md "Securing" sets it up, with its commands: a CA, a certificate for
# the switch and one for the clients made by openssl; the switch started from a config file
# with tls-cert/tls-key/tls-client-ca (mutual TLS); `switchml jobs create` with --tls-* flags;
# two workers (`switchml allreduce`) given only SWITCHML_TLS_* variables: exact int32 sums; a
# standalone controller over TLS to the switch and to its own clients, with `switchml top` and
# `jobs list` through it. Refusals, each a clear error: a plaintext client, a client without a
# certificate, a client trusting another CA. The plaintext rule: a switch on 0.0.0.0 without
# TLS says where it takes tokens from, and with --insecure logs a warning.
source "$(dirname "$0")/lib.sh"
command -v openssl > /dev/null || fail "openssl is missing (scripts/install-deps.sh installs it)"

# The commands of docs/operations.md "Securing", with the switch's address 127.0.0.1, and another
# CA (scripts/lib.sh sml_make_pki).
PKI=$WORK/pki
sml_make_pki "$PKI" || { cat "$PKI/openssl.log"; fail "openssl failed"; }
pass "CA, switch and client certificates made with openssl"

cat > "$WORK/switch.conf" <<EOF
tls-cert = "$PKI/switch.pem"
tls-key = "$PKI/switch.key"
tls-client-ca = "$PKI/ca.pem"
EOF
start_switch --config "$WORK/switch.conf"
grep -q "gRPC over TLS on 127.0.0.1:$CTL_PORT (certificate '$PKI/switch.pem'; client certificates required" "$SW_LOG" ||
  { cat "$SW_LOG"; fail "the switch does not log that it serves TLS"; }
CTL=127.0.0.1:$CTL_PORT
TLS=(--tls-ca "$PKI/ca.pem" --tls-cert "$PKI/client.pem" --tls-key "$PKI/client.key")

# Refusals: each says what to check.
expect_refused() {  # WHAT PATTERN JOBS-FLAGS...
  local what=$1 pattern=$2 rc=0
  shift 2
  "$SWITCHML" jobs list --controller "$CTL" --rpc-timeout-ms 1000 "$@" > "$WORK/refused.log" 2>&1 || rc=$?
  [ $rc -ne 0 ] && grep -q -- "$pattern" "$WORK/refused.log" ||
    { cat "$WORK/refused.log"; fail "$what: exit $rc without '$pattern'"; }
  pass "$what refused: $(grep -o -- "$pattern.*" "$WORK/refused.log" | head -1 | cut -c1-110)"
}
expect_refused "a plaintext client" "if the controller serves TLS, give its CA"
expect_refused "a client without a certificate" "if it requires client certificates" --tls-ca "$PKI/ca.pem"
expect_refused "a client trusting another CA" "certificate verify failed" --tls-ca "$PKI/other.pem" \
  --tls-cert "$PKI/client.pem" --tls-key "$PKI/client.key"
expect_refused "a key that is not the certificate's" "--tls-key '$PKI/switch.key' is not the key of the certificate" --tls-ca "$PKI/ca.pem" \
  --tls-cert "$PKI/client.pem" --tls-key "$PKI/switch.key"

# A job over TLS: the operator with flags, the workers with variables only.
out=$("$SWITCHML" jobs create --controller "$CTL" "${TLS[@]}" --workers 2 --slots 64 --type int32) ||
  fail "jobs create over TLS failed: $out"
eval "$out"
PIDS=()
for r in 0 1; do
  SWITCHML_TLS_CA=$PKI/ca.pem SWITCHML_TLS_CERT=$PKI/client.pem SWITCHML_TLS_KEY=$PKI/client.key \
    "$SWITCHML" allreduce --controller "$CTL" --job-id "$SWITCHML_JOB_ID" --job-token "$SWITCHML_JOB_TOKEN" \
      --rank $r --workers 2 --window 64 --type int32 --counts 1000,100000 --json "$WORK/r$r.json" > "$WORK/r$r.log" 2>&1 &
  PIDS+=($!); sml_track $!
done
for i in 0 1; do
  sml_wait_gone "${PIDS[i]}" 60 "worker $i" || fail "worker $i still running"
  wait "${PIDS[i]}" || { tail -n 5 "$WORK"/r*.log; fail "worker $i failed over TLS"; }
  [ "$(json_get "$WORK/r$i.json" "sum(x['wrong'] for x in j['results']) if j['ok'] else -1")" = 0 ] || fail "worker $i: wrong elements over TLS"
done
pass "job $SWITCHML_JOB_ID over mutual TLS: 2 workers (SWITCHML_TLS_* only), int32 exact"

# A standalone controller: TLS to the switch (its certificate presented to the switch) and to
# its own clients.
sml_start_controller --deadline 15 -- --switch "$CTL" --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/switch.pem" \
  --tls-key "$PKI/switch.key" --tls-client-ca "$PKI/ca.pem" || fail "controller over TLS did not start"
grep -q "gRPC over TLS on 127.0.0.1:$C_PORT" "$WORK/controller.log" || fail "the controller does not log TLS"
"$SWITCHML" jobs list --controller "127.0.0.1:$C_PORT" "${TLS[@]}" > "$WORK/list.log" 2>&1 ||
  { cat "$WORK/list.log"; fail "jobs list through the TLS controller failed"; }
grep -q "up" "$WORK/list.log" || { cat "$WORK/list.log"; fail "the controller does not see its switch up"; }
"$SWITCHML" top --controller "127.0.0.1:$C_PORT" "${TLS[@]}" --iterations 1 > "$WORK/top.log" 2>&1 ||
  { cat "$WORK/top.log"; fail "switchml top over TLS failed"; }
grep -q "$CTL" "$WORK/top.log" || { cat "$WORK/top.log"; fail "switchml top does not show the switch"; }
pass "standalone controller over TLS both ways: jobs list and top through it"
sml_stop "$C_PID" 10 controller || fail "the controller did not stop"
stop_switch

# The plaintext rule, as the switch logs it (0.0.0.0 reaches other hosts).
sml_start_switch --bind 0.0.0.0 --log "$WORK/plain.log" --deadline 10 || fail "plaintext switch on 0.0.0.0 did not start"
grep -q "calls with tokens (jobs, operators) are accepted only from this host" "$WORK/plain.log" ||
  { cat "$WORK/plain.log"; fail "a plaintext switch on 0.0.0.0 does not say where it takes tokens from"; }
stop_switch
sml_start_switch --bind 0.0.0.0 --log "$WORK/insecure.log" --deadline 10 -- --insecure ||
  fail "switch with --insecure did not start"
grep -q "warning: --insecure: tokens" "$WORK/insecure.log" || { cat "$WORK/insecure.log"; fail "no --insecure warning"; }
stop_switch
rc=0; SWITCHML_INSECURE=yes "$SWITCHML" switch --bind 127.0.0.1 --port 0 --controller-port 0 > "$WORK/env.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "SWITCHML_INSECURE must be 0 or 1, got 'yes'" "$WORK/env.log" ||
  { cat "$WORK/env.log"; fail "SWITCHML_INSECURE=yes: exit $rc without naming the variable"; }
pass "plaintext on 0.0.0.0: tokens only from this host; --insecure warns; SWITCHML_INSECURE=yes refused"
