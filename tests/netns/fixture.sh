#!/usr/bin/env bash
# CTest fixture of the netns tests.
#   fixture.sh setup   CLUSTER_SH NAME_FILE WORKERS RATE
#   fixture.sh cleanup CLUSTER_SH NAME_FILE
# setup first removes the cluster a previous (crashed) run of this build left behind, then creates
# a cluster with a fresh unique name (sml + 4 hex digits of the build directory + 4 random hex
# digits) and writes the name to NAME_FILE, which the other tests read. cleanup (FIXTURES_CLEANUP:
# it runs even when tests fail) tears that cluster down and checks that nothing is left.
MODE=${1:?mode}
CLUSTER_SH=${2:?cluster.sh}
NAME_FILE=${3:?name file}
source "$(dirname "$0")/lib.sh"

remove_previous() {
  [[ -s "$NAME_FILE" ]] || { rm -f "$NAME_FILE"; return 0; }
  local old; old=$(cat "$NAME_FILE")
  rm -f "$NAME_FILE"
  [[ $(id -u) == 0 ]] || return 0
  "$CLUSTER_SH" down --name "$old"
  local left; left=$(leftovers "$old")
  [[ -z "$left" ]] || fail "cluster '$old' not fully removed: $left"
}

case "$MODE" in
  setup)
    WORKERS=${4:?workers}
    RATE=${5:?rate}
    remove_previous
    require_netns
    build_tag=$(printf '%s' "$(dirname "$NAME_FILE")" | cksum | cut -d' ' -f1)
    name=$(printf 'sml%04x%04x' $((build_tag & 0xffff)) $((RANDOM ^ ($$ & 0xffff))))
    # Written before `up` so that cleanup finds the name even if `up` dies half way.
    echo "$name" > "$NAME_FILE"
    "$CLUSTER_SH" up --name "$name" --workers "$WORKERS" --rate "$RATE" ||
        fail "cluster.sh up --name $name failed"
    pass "cluster '$name' is up ($WORKERS workers, $RATE)"
    ;;
  cleanup)
    had=$(cat "$NAME_FILE" 2>/dev/null || true)
    remove_previous
    if [[ -n "$had" ]]; then pass "cluster '$had' removed, nothing left"; else skip "no cluster to remove"; fi
    ;;
  *) fail "unknown mode '$MODE'" ;;
esac
