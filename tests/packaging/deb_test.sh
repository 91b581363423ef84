#!/usr/bin/env bash
# deb_test.sh BUILD_DIR CPACK VERSION
# `cpack -G DEB` makes switchml, libswitchml-dev (and switchml-mpi when the interposers are
# built); their contents and control files are what docs/operations.md "Installing" says; the
# binaries of a `dpkg -x` root run: --version, --help, a switch and a controller started with the
# packaged sample configs (on free ports of 127.0.0.1) and stopped; postinst and postrm purge on
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
