#!/usr/bin/env bash
# deb_test.sh BUILD_DIR CPACK VERSION
# `cpack -G DEB` makes switchml, libswitchml-dev (and switchml-mpi when the interposers are
# built); their contents and control files are what docs/operations.md "Installing" says; the
# binaries of a `dpkg -x` root run: --version, --help, a switch and a controller started with the
# packaged sample configs (on free ports of 127.0.0.1) and stopped; docs/operations.md's
# walkthrough (the packaged switch.conf with TLS and metrics, a scrape, `switchml top`, a job over
# mutual TLS); postinst and postrm purge on
# that root make and remove the operator credential; the systemd units start the
# packaged binary on the packaged conffiles (systemd-analyze verify when present, and a parser).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
(($# == 3)) || die "usage: deb_test.sh BUILD_DIR CPACK VERSION"
BUILD=$1 CPACK=$2 VERSION=$3
command -v dpkg-deb > /dev/null || skip "dpkg-deb not found (Debian's dpkg)"
command -v dpkg-shlibdeps > /dev/null || skip "dpkg-shlibdeps not found (Debian's dpkg-dev, part of build-essential)"
sml_work_dir switchml-deb
[[ -z ${SML_DEADLINE_S:-} ]] || sml_deadline "$SML_DEADLINE_S" "${0##*/}"
sml_operator_token

"$CPACK" -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/out" > "$WORK/cpack.log" 2>&1 ||
    fail "cpack -G DEB failed: $(tail -15 "$WORK/cpack.log")"
deb() { compgen -G "$WORK/out/$1_${VERSION}*_*.deb" | head -1; }
MAIN=$(deb switchml) DEV=$(deb libswitchml-dev)
[[ -n $MAIN && -n $DEV ]] || fail "cpack made $(cd "$WORK/out" && ls ./*.deb), not switchml and libswitchml-dev"
pass "cpack -G DEB: $(cd "$WORK/out" && echo ./*.deb)"

# Contents and control files.
dpkg-deb -c "$MAIN" | awk '{print $6}' > "$WORK/main.list"
for f in ./usr/bin/switchml ./etc/switchml/switch.conf ./etc/switchml/controller.conf \
         ./usr/lib/systemd/system/switchml-switch.service ./usr/lib/systemd/system/switchml-controller.service \
         ./usr/share/man/man1/switchml.1 ./usr/share/doc/switchml/switchml-switch.txt \
         ./usr/share/doc/switchml/operations.md; do
  grep -qxF "$f" "$WORK/main.list" || fail "switchml's package lacks $f"
done
! grep -q '^\./usr/include/\|\.a$' "$WORK/main.list" || fail "switchml's package holds development files"
dpkg-deb -c "$DEV" | awk '{print $6}' > "$WORK/dev.list"
for f in ./usr/include/switchml/switchml.h '\./usr/lib/.*libswitchml\.a' '\./usr/lib/.*cmake/SwitchML/SwitchMLConfig\.cmake'; do
  grep -qx "$f" "$WORK/dev.list" || fail "libswitchml-dev lacks $f"
done
[[ $(dpkg-deb -f "$MAIN" Version) == "$VERSION" ]] || fail "switchml's version is $(dpkg-deb -f "$MAIN" Version), not $VERSION"
depends=$(dpkg-deb -f "$MAIN" Depends)
grep -q 'libgrpc++' <<< "$depends" || fail "switchml does not depend on libgrpc++ (dpkg-shlibdeps): '$depends'"
dev_depends=$(dpkg-deb -f "$DEV" Depends)
{ grep -q 'libgrpc++-dev' <<< "$dev_depends" && grep -q 'protobuf-compiler-grpc' <<< "$dev_depends"; } ||
    fail "libswitchml-dev does not depend on libgrpc++-dev and protobuf-compiler-grpc (gRPC's CMake config): '$dev_depends'"
mkdir "$WORK/control"
dpkg-deb -e "$MAIN" "$WORK/control"
diff <(sort "$WORK/control/conffiles") <(printf '/etc/switchml/controller.conf\n/etc/switchml/switch.conf\n') > /dev/null ||
    fail "conffiles: $(cat "$WORK/control/conffiles")"
{ [[ -x $WORK/control/postinst ]] && grep -q '/etc/switchml/operator-token' "$WORK/control/postinst"; } ||
    fail "no executable postinst making /etc/switchml/operator-token"
pass "contents, Depends ($depends), conffiles, postinst"

# The binaries of the package, from a dpkg -x root.
ROOT=$WORK/root
dpkg -x "$MAIN" "$ROOT"
SWITCHML=$ROOT/usr/bin/switchml
[[ $("$SWITCHML" --version) == "switchml $VERSION" ]] || fail "switchml --version: $("$SWITCHML" --version)"
grep -q -- '--config' <<< "$("$SWITCHML" switch --help)" || fail "switchml switch --help does not show --config"
printf '%s\n' "$SWITCHML_OPERATOR_TOKEN" > "$WORK/operator-token"
chmod 600 "$WORK/operator-token"
sml_start_switch -- --config "$ROOT/etc/switchml/switch.conf" --counters-json "$WORK/counters.json" \
    --operator-token-file "$WORK/operator-token" || fail "the packaged switch did not start with the packaged switch.conf"
# The controller's sample names a switch at 10.0.0.10; the command line's --switch replaces it.
sml_start_controller -- --config "$ROOT/etc/switchml/controller.conf" --switch "127.0.0.1:$CTL_PORT" \
    --operator-token-file "$WORK/operator-token" ||
    fail "the packaged controller did not start with the packaged controller.conf and --switch"
"$SWITCHML" jobs list --controller "127.0.0.1:$C_PORT" > "$WORK/jobs.txt" 2>&1 ||
    fail "switchml jobs list through the packaged controller: $(tail -3 "$WORK/jobs.txt")"
rc=0
sml_stop "$C_PID" 10 controller || rc=$?
((rc == 0)) || fail "the packaged controller exited with status $rc"
sml_stop_switch 10 || rc=$?
((rc == 0)) || fail "the packaged switch exited with status $rc: $(tail -5 "$SW_LOG")"
[[ -s $WORK/counters.json ]] || fail "the packaged switch did not write --counters-json"
pass "dpkg -x root: --version, --help, switch and controller on the sample configs, jobs list, stopped"

# docs/operations.md's walkthrough with the packaged binary: the switch on the packaged
# switch.conf with its TLS lines filled in and metrics on, started as the unit's ExecStart does;
# /metrics scraped; `switchml top` and a job of two workers over mutual TLS (SWITCHML_TLS_*).
command -v openssl > /dev/null || fail "openssl is missing (scripts/install-deps.sh installs it)"
sml_make_pki "$WORK/pki" || fail "openssl failed: $(tail -5 "$WORK/pki/openssl.log")"
sed -e "s|^# tls-cert = .*|tls-cert = \"$WORK/pki/switch.pem\"|" -e "s|^# tls-key = .*|tls-key = \"$WORK/pki/switch.key\"|" \
    -e "s|^# tls-client-ca = \"[^\"]*\"|tls-client-ca = \"$WORK/pki/ca.pem\"|" \
    -e 's|^counters-json = .*|metrics-listen = "127.0.0.1:0"|' "$ROOT/etc/switchml/switch.conf" > "$WORK/switch-tls.conf"
grep -q '^tls-client-ca = ' "$WORK/switch-tls.conf" || fail "the packaged switch.conf has no TLS lines to fill in"
sml_start_switch --log "$WORK/switch-tls.log" -- --config "$WORK/switch-tls.conf" --operator-token-file "$WORK/operator-token" ||
    fail "the packaged switch did not start with TLS: $(tail -3 "$WORK/switch-tls.log")"
grep -q "gRPC over TLS on 127.0.0.1:$CTL_PORT" "$WORK/switch-tls.log" || fail "the packaged switch does not say it serves TLS"
MPORT=$(json_get "$SW_READY" "j['metrics_port']")
python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:$MPORT/metrics" > "$WORK/metrics.txt" || fail "scraping the packaged switch's /metrics failed"
grep -q '^switchml_switch_io_threads 1' "$WORK/metrics.txt" || fail "/metrics lacks switchml_switch_io_threads"
export SWITCHML_TLS_CA=$WORK/pki/ca.pem SWITCHML_TLS_CERT=$WORK/pki/client.pem SWITCHML_TLS_KEY=$WORK/pki/client.key
"$SWITCHML" top --controller "127.0.0.1:$CTL_PORT" --iterations 1 > "$WORK/top.txt" 2>&1 ||
    fail "switchml top over TLS: $(tail -3 "$WORK/top.txt")"
out=$("$SWITCHML" jobs create --controller "127.0.0.1:$CTL_PORT" --workers 2 --slots 64 --type int32) ||
    fail "jobs create over TLS: $out"
eval "$out"
pids=()
for r in 0 1; do
  "$SWITCHML" allreduce --controller "127.0.0.1:$CTL_PORT" --job-id "$SWITCHML_JOB_ID" --job-token "$SWITCHML_JOB_TOKEN" \
      --rank $r --workers 2 --window 64 --type int32 --counts 10000 > "$WORK/tls-r$r.log" 2>&1 &
  pids+=($!); sml_track $!
done
for p in "${pids[@]}"; do wait "$p" || fail "a worker over TLS failed: $(tail -3 "$WORK"/tls-r*.log)"; done
grep -q ' 0 wrong' "$WORK/tls-r0.log" && grep -q ' 0 wrong' "$WORK/tls-r1.log" || fail "wrong elements over TLS"
unset SWITCHML_TLS_CA SWITCHML_TLS_CERT SWITCHML_TLS_KEY
rc=0; "$SWITCHML" jobs list --controller "127.0.0.1:$CTL_PORT" --rpc-timeout-ms 1000 > "$WORK/plain.txt" 2>&1 || rc=$?
((rc != 0)) && grep -q "give its CA" "$WORK/plain.txt" || fail "a plaintext jobs list was not refused clearly: $(cat "$WORK/plain.txt")"
rc=0
sml_stop_switch 10 || rc=$?
((rc == 0)) || fail "the packaged switch (TLS) exited with status $rc: $(tail -5 "$SW_LOG")"
pass "walkthrough: packaged switch.conf with TLS and metrics, /metrics scraped, top and a 2-worker job over mutual TLS, plaintext refused"

# The maintainer scripts, on the dpkg -x root ($DPKG_ROOT, as dpkg gives them): postinst makes a
# private operator credential the switch accepts and keeps it on reconfiguration; purge removes it.
token=$ROOT/etc/switchml/operator-token
DPKG_ROOT=$ROOT sh "$WORK/control/postinst" configure > "$WORK/postinst.log" 2>&1 ||
    fail "postinst configure failed: $(cat "$WORK/postinst.log")"
[[ -f $token && $(stat -c %a "$token") == 600 ]] || fail "postinst did not make $token with mode 600"
grep -qxE '[0-9a-f]{32}' "$token" || fail "postinst's credential is not 32 hex digits: $(cat "$token")"
first=$(cat "$token")
DPKG_ROOT=$ROOT sh "$WORK/control/postinst" configure > /dev/null 2>&1 || fail "postinst configure (again) failed"
[[ $(cat "$token") == "$first" ]] || fail "postinst replaced an existing operator credential"
sml_start_switch --log "$WORK/switch2.log" -- --config "$ROOT/etc/switchml/switch.conf" \
    --counters-json "$WORK/counters2.json" --operator-token-file "$token" ||
    fail "the packaged switch did not start with postinst's credential"
"$SWITCHML" jobs list --controller "127.0.0.1:$CTL_PORT" --operator-token-file "$token" > "$WORK/jobs2.txt" 2>&1 ||
    fail "jobs list with postinst's credential: $(tail -3 "$WORK/jobs2.txt")"
rc=0
sml_stop_switch 10 || rc=$?
((rc == 0)) || fail "the packaged switch exited with status $rc: $(tail -5 "$SW_LOG")"
DPKG_ROOT=$ROOT sh "$WORK/control/postrm" purge > /dev/null 2>&1 || fail "postrm purge failed"
[[ ! -e $token ]] || fail "postrm purge left $token"
pass "postinst makes a private credential once (the switch takes it, jobs list with it), postrm purge removes it"

# The units: ExecStart runs the packaged binary on a packaged conffile; the credential they load
# is the one postinst makes.
for unit in switch controller; do
  file=$ROOT/usr/lib/systemd/system/switchml-$unit.service
  exec_start=$(sed -n 's/^ExecStart=//p' "$file")
  read -r bin sub flag conf _ <<< "$exec_start"
  [[ -x $ROOT$bin && $sub == "$unit" && $flag == --config && $conf == /etc/switchml/$unit.conf ]] ||
      fail "switchml-$unit.service: ExecStart=$exec_start (want the packaged binary, '$unit --config /etc/switchml/$unit.conf')"
  grep -qxF "$conf" "$WORK/control/conffiles" || fail "switchml-$unit.service reads $conf, not a conffile"
  grep -qx 'LoadCredential=operator-token:/etc/switchml/operator-token' "$file" ||
      fail "switchml-$unit.service does not load /etc/switchml/operator-token"
  grep -qx 'WantedBy=multi-user.target' "$file" || fail "switchml-$unit.service has no [Install] WantedBy"
  if command -v systemd-analyze > /dev/null; then
    mkdir -p "$WORK/units"
    sed "s|^ExecStart=/usr/bin/switchml|ExecStart=$ROOT/usr/bin/switchml|" "$file" > "$WORK/units/switchml-$unit.service"
    systemd-analyze verify --man=no "$WORK/units/switchml-$unit.service" > "$WORK/verify-$unit.log" 2>&1 ||
        fail "systemd-analyze verify switchml-$unit.service: $(cat "$WORK/verify-$unit.log")"
    pass "switchml-$unit.service: systemd-analyze verify"
  fi
done
pass "units: ExecStart on the packaged binary and conffiles, credential, install target"
