#!/usr/bin/env bash
# CTest `bench_racks_quick` (label bench): the racks scenario (bench/run_racks.sh) end to end,
# small:
#   1. bad options are refused (exit 2) with a message naming them, before anything is created;
#   2. run_racks.sh --quick (2 racks x 2 workers, uplinks 4:1, 1 MiB float32): it passes, and
#      its JSON has one record per method run (flat, gloo unless --no-gloo, and two-level: a
#      leaf switch per rack and a parent placed by a standalone controller; a build without
#      `jobs create --leaf` must say "two-level: not available in this build" instead), each
#      with every field, wrong == 0, ok, tat_s, bound_s > 0, the tensor's bytes, and
#      uplink_bytes > 0; the busiest uplink carried at least 90% of what the bound's model puts
#      there (bytes counted, not time: every packet of the other rack must cross it), and for
#      two-level at most 1.5x (about one tensor's packets each way);
#   3. two levels under 2% loss at every host (run_racks.sh --loss): exact, and the leaves sent
#      partials up again on their workers' retransmissions.
# Asserts correctness only, never speed. Usage: racks_smoke.sh BUILD_DIR [--no-gloo]
# (exit 77 = skipped: not root, no `ip netns`).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BUILD=${1:?usage: racks_smoke.sh BUILD_DIR [--no-gloo]}
NO_GLOO=${2:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}

[[ $(id -u) == 0 ]] || skip "racks_smoke.sh needs root (network namespaces)"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available here"

sml_work_dir switchml-racks-smoke  # kept (with the report and logs) when the test fails
sml_deadline 230 "racks smoke (hang guard, below the CTest TIMEOUT of 240 s)"
bins=(--perf "$BUILD/allreduce_perf" --switchml "$BUILD/switchml" --cluster-sh "$HERE/../scripts/cluster.sh")

# 1. bad options
bad() {  # expected-message args...
  local msg=$1 rc=0; shift
  "$HERE/run_racks.sh" "$@" > "$WORK/bad.out" 2>&1 || rc=$?
  ((rc == 2)) && grep -q -- "$msg" "$WORK/bad.out" ||
    fail "run_racks.sh $*: expected exit 2 and '$msg', got exit $rc: $(cat "$WORK/bad.out")"
}
bad "is not RACKSxPER_RACK" --configs 2y2
bad "racks must be in 1..16" --configs 17x2
bad "needs 2 workers or more" --configs 1x1
bad "--oversub: 'zero' is not a ratio" --oversub zero
bad "unknown method 'tree'" --methods flat,tree
bad "--rate must be" --rate fast
pass "bad options refused (exit 2, naming the problem)"

# 2. the scenario, small
rc=0
"$HERE/run_racks.sh" --quick ${NO_GLOO:+--no-gloo} "${bins[@]}" --timeout 60 --out "$WORK/run" \
    > "$WORK/run.log" 2>&1 || rc=$?
cat "$WORK/run.log"
((rc == 0)) || fail "run_racks.sh --quick failed (exit $rc; logs in $WORK/run)"
methods=flat
[[ -n $NO_GLOO ]] || methods=flat,gloo
if "$BUILD/switchml" jobs create --help 2>&1 | grep -q -- '--leaf'; then
  methods+=,two-level
else
  grep -q "^# two-level: not available in this build" "$WORK/run.log" ||
    fail "run_racks.sh did not say 'two-level: not available in this build'"
fi
"$PY" - "$WORK/run/racks.json" "$methods" <<'PYEOF'
import json, sys
runs = json.load(open(sys.argv[1]))
want = sys.argv[2].split(",")
failures = []
def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
check(sorted(r.get("method") for r in runs) == sorted(want), f"one record per method {want}: {[r.get('method') for r in runs]}")
fields = ("method", "racks", "per_rack", "oversubscription", "tat_s", "bound_s", "uplink_bytes", "tensor_bytes", "wrong")
for r in runs:
    m = r.get("method")
    check(all(f in r for f in fields), f"{m}: fields {fields} present")
    check(r.get("racks") == 2 and r.get("per_rack") == 2 and r.get("oversubscription") == 4, f"{m}: 2 racks x 2 at 4:1")
    check(r.get("wrong") == 0 and r.get("ok") is True, f"{m}: wrong == 0, ok ({r.get('wrong')}, {r.get('ok')})")
    check(r.get("tensor_bytes") == 1 << 20, f"{m}: tensor_bytes 1 MiB ({r.get('tensor_bytes')})")
    check((r.get("tat_s") or 0) > 0 and (r.get("bound_s") or 0) > 0, f"{m}: tat_s and bound_s > 0")
    check((r.get("uplink_bytes") or 0) > 0, f"{m}: uplink_bytes > 0 ({r.get('uplink_bytes')})")
    model = r.get("uplink_model_bytes") or 0
    check(model > 0 and r["uplink_bytes"] >= 0.9 * model,
          f"{m}: the busiest uplink carried {r['uplink_bytes']:.0f} B per all-reduce, the model {model:.0f} B")
    if m == "two-level":
        # Each uplink carries its leaf's partial up and the total down: about one tensor's
        # packets each way (the model's 2P), far less than flat's busiest uplink (2 r P with
        # 2 racks); a loose bound (retransmissions, the workers' gRPC), bytes not time.
        check(r["uplink_bytes"] <= 1.5 * model,
              f"{m}: the busiest uplink carried at most 1.5x the model ({r['uplink_bytes']:.0f} B, model {model:.0f} B)")
sys.exit(1 if failures else 0)
PYEOF
[[ -s "$WORK/run/racks.png" ]] || ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || fail "no plot written"

# 3. two levels under 2% loss at every host (worker -> leaf, leaf -> parent, parent -> leaf,
#    leaf -> worker): every element still right, and the leaves resent partials to the parent
#    on their workers' retransmissions (the parent's total or the leaf's contribution was lost).
if [[ $methods == *two-level* ]]; then
  rc=0
  "$HERE/run_racks.sh" --quick --methods two-level --loss 0.02 "${bins[@]}" --timeout 60 \
      --out "$WORK/loss" > "$WORK/loss.log" 2>&1 || rc=$?
  cat "$WORK/loss.log"
  ((rc == 0)) || fail "run_racks.sh --quick --methods two-level --loss 0.02 failed (exit $rc; logs in $WORK/loss)"
  "$PY" - "$WORK/loss/racks.json" <<'PYEOF'
import json, sys
runs = [r for r in json.load(open(sys.argv[1])) if r["method"] == "two-level"]
assert runs, "no two-level record under loss"
for r in runs:
    assert r["wrong"] == 0 and r["ok"], f"two-level under loss: {r}"
print(f"ok: two-level under 2% loss: {len(runs)} run(s), every element right")
PYEOF
  resent=$(sed -n 's/.*sent up again[^:]*://p' "$WORK/loss.log" | grep -oE '=[0-9]+' | tr -d = |
           awk '{ s += $1 } END { print s + 0 }')
  [[ ${resent:-0} -gt 0 ]] || fail "two-level under 2% loss: no leaf sent a partial up again (resent: '${resent:-}')"
  pass "two-level under 2% loss at every hop: exact; the leaves sent $resent partials up again"
fi
echo PASS
