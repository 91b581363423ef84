#!/usr/bin/env bash
# install_test.sh BUILD_DIR CMAKE GENERATOR CXX LIBDIR
# `cmake --install BUILD_DIR --prefix TMP` lays out the binaries, headers, library, CMake
# package, docs, units and sample configs (docs/operations.md "Installing"); the project in
# downstream/ (find_package(SwitchML CONFIG REQUIRED), SwitchML::switchml) configures and builds
# against that prefix alone and runs: without a switch, then a one-worker all-reduce through the
# installed `switchml switch` started with the installed sample config.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
(($# == 5)) || die "usage: install_test.sh BUILD_DIR CMAKE GENERATOR CXX LIBDIR"
BUILD=$1 CMAKE=$2 GENERATOR=$3 CXX=$4 LIBDIR=$5
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sml_work_dir switchml-install
[[ -z ${SML_DEADLINE_S:-} ]] || sml_deadline "$SML_DEADLINE_S" "${0##*/}"
sml_operator_token
P=$WORK/prefix

"$CMAKE" --install "$BUILD" --prefix "$P" > "$WORK/install.log" 2>&1 ||
    fail "cmake --install failed: $(tail -5 "$WORK/install.log")"
for f in bin/switchml "$LIBDIR/libswitchml.a" include/switchml/switchml.h include/switchml/options.h \
         "$LIBDIR/cmake/SwitchML/SwitchMLConfig.cmake" "$LIBDIR/cmake/SwitchML/SwitchMLConfigVersion.cmake" \
         "$LIBDIR/cmake/SwitchML/SwitchMLTargets.cmake" share/man/man1/switchml.1 \
         share/doc/switchml/switchml.txt share/doc/switchml/switchml-switch.txt \
         share/doc/switchml/switchml-jobs-create.txt share/doc/switchml/examples/switch.conf \
         lib/systemd/system/switchml-switch.service lib/systemd/system/switchml-controller.service \
         etc/switchml/switch.conf etc/switchml/controller.conf; do
  [[ -s $P/$f ]] || fail "cmake --install did not install $f"
done
pass "cmake --install: binaries, library, headers, CMake package, docs, units, configs"
# Only the public headers; the library holds the internal modules (no dangling references).
extra=$(cd "$P/include" && find . -type f ! -path './switchml/*.h')
[[ -z $extra ]] || fail "headers other than include/switchml/*.h installed: $extra"
nm -C --defined-only "$P/$LIBDIR/libswitchml.a" > "$WORK/nm.txt" 2>/dev/null || true
grep -q 'T switchml::Context::Create(' "$WORK/nm.txt" ||
    fail "libswitchml.a does not define switchml::Context::Create"
! grep -rqF -e "$BUILD" -e "$(cd "$HERE/../.." && pwd)/" "$P/$LIBDIR/cmake/SwitchML" ||
    fail "the installed CMake package refers to the build or source tree"
# The help texts are the installed binary's.
diff <("$P/bin/switchml" switch --help) "$P/share/doc/switchml/switchml-switch.txt" > /dev/null ||
    fail "share/doc/switchml/switchml-switch.txt differs from 'switchml switch --help'"
{ grep -q '^\.TH SWITCHML 1' "$P/share/man/man1/switchml.1" && grep -q '^\.SS "jobs create"' "$P/share/man/man1/switchml.1"; } ||
    fail "switchml.1 lacks its title or the 'jobs create' section"
# The units name this prefix's binary and configuration.
grep -qxF "ExecStart=$P/bin/switchml switch --config $P/etc/switchml/switch.conf --operator-token-file \${CREDENTIALS_DIRECTORY}/operator-token" \
    "$P/lib/systemd/system/switchml-switch.service" ||
    fail "switchml-switch.service: $(grep ExecStart "$P/lib/systemd/system/switchml-switch.service")"
grep -qxF "LoadCredential=operator-token:$P/etc/switchml/operator-token" "$P/lib/systemd/system/switchml-controller.service" ||
    fail "switchml-controller.service: $(grep LoadCredential "$P/lib/systemd/system/switchml-controller.service")"
pass "public headers only, library complete, package relocatable, docs from --help, units for this prefix"

# The downstream project, with only the prefix to find SwitchML in.
"$CMAKE" -S "$HERE/downstream" -B "$WORK/downstream" -G "$GENERATOR" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_PREFIX_PATH="$P" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release \
    > "$WORK/downstream-configure.log" 2>&1 ||
    fail "the downstream project does not configure: $(tail -15 "$WORK/downstream-configure.log")"
grep -q "SwitchML_DIR:PATH=$P/" "$WORK/downstream/CMakeCache.txt" ||
    fail "find_package(SwitchML) did not use the prefix: $(grep SwitchML_DIR "$WORK/downstream/CMakeCache.txt")"
"$CMAKE" --build "$WORK/downstream" > "$WORK/downstream-build.log" 2>&1 ||
    fail "the downstream project does not build: $(tail -15 "$WORK/downstream-build.log")"
pass "downstream project configured and built against the prefix"
out=$("$WORK/downstream/downstream" 2>&1) || fail "downstream (no switch) failed: $out"
grep -q "downstream ok" <<< "$out" || fail "downstream (no switch): $out"
grep -q "^SwitchML package 0\." <<< "$out" || fail "downstream does not report the package version: $out"
pass "downstream without a switch: $(grep 'Create against' <<< "$out")"

SWITCHML=$P/bin/switchml  # sml_start_switch runs $SWITCHML
export SWITCHML
sml_start_switch -- --config "$P/etc/switchml/switch.conf" --counters-json "$WORK/counters.json" ||
    fail "the installed switch did not start with the installed switch.conf"
out=$("$WORK/downstream/downstream" "127.0.0.1:$CTL_PORT" 2>&1) || fail "downstream all-reduce failed: $out"
grep -q "downstream ok" <<< "$out" || fail "downstream all-reduce: $out"
rc=0
sml_stop_switch 10 || rc=$?
((rc == 0)) || fail "the installed switch exited with status $rc: $(tail -5 "$SW_LOG")"
[[ -s $WORK/counters.json ]] || fail "the switch did not write --counters-json (the command line over the config)"
pass "downstream: $(grep 'all-reduce' <<< "$out")"
