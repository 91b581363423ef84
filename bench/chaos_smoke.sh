#!/usr/bin/env bash
# CTest `bench_chaos_quick` (label bench): the chaos scenario (bench/run_chaos.sh) end to end,
# small:
#   1. without root the script refuses to start (exit 2, "needs root"), creating nothing;
#   2. run_chaos.sh --quick --faults $CHAOS_SMOKE_FAULTS (default switch,shard,controller): the
#      Gloo reference and the disturbed run on the emulated cluster under 1% loss, a job of two
#      shards; the run passes, and its chaos.json says: 25 of 25 steps on both runs, every
#      planned fault injected at a step of the run; with a switch or shard fault the backend
#      failed over (stats failover >= 1), the library and the backend count the same calls
#      recovered, the calls that failed on the switch and were not recovered are among those
#      run on the host path, and later ones ran there too; every call the library took is
#      completed, recovered or failed (calls_submitted); every call is accounted for (switch +
#      recovered + host path = calls made, the library's counters summed over the contexts a
#      return to the switch starts); without one, no call failed; the replicas are identical
#      and the final model bit-identical to the Gloo run's (int32 fixed-point gradients).
#      Whether the backend came back to the switch within the 25 steps depends on timing (its
#      backoff; the ranks agree at the barrier every 5 steps): printed, not asserted.
# Asserts correctness only, never speed. Usage: chaos_smoke.sh BUILD_DIR (exit 77 = skipped: not
# root, no `ip netns`, no torch, or the PyTorch backend not built).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BUILD=${1:?usage: chaos_smoke.sh BUILD_DIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-${SWITCHML_VENV:-$HERE/../.venv}/bin/python}
FAULTS=${CHAOS_SMOKE_FAULTS:-switch,shard,controller}

[[ $(id -u) == 0 ]] || skip "chaos_smoke.sh needs root (network namespaces)"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available here"
command -v iptables >/dev/null || skip "iptables not found"
[[ -x "$BUILD/switchml" && -d "$BUILD/python/switchml" ]] || skip "$BUILD/switchml or $BUILD/python/switchml not built"
PYTHONPATH="$BUILD/python" "$PYTHON" -c "import torch, switchml.torch" 2>/dev/null ||
  skip "$PYTHON cannot import torch and switchml.torch"

sml_work_dir switchml-chaos-smoke  # kept (with the report and logs) when the test fails
sml_deadline 280 "chaos smoke (hang guard, below the CTest TIMEOUT of 300 s)"

# 1. the refusal without root
if command -v setpriv >/dev/null; then
  rc=0
  setpriv --reuid 65534 --regid 65534 --clear-groups "$HERE/run_chaos.sh" --quick --build "$BUILD" \
      --python "$PYTHON" --out "$WORK/nonroot" > "$WORK/nonroot.log" 2>&1 || rc=$?
  if ((rc != 2)) || ! grep -q "needs root" "$WORK/nonroot.log"; then
    cat "$WORK/nonroot.log"
    fail "without root run_chaos.sh must refuse (exit 2, 'needs root'), got exit $rc"
  fi
  pass "without root: refused ($(head -1 "$WORK/nonroot.log"))"
fi

# 2. the scenario, small
rc=0
"$HERE/run_chaos.sh" --quick --faults "$FAULTS" --build "$BUILD" --python "$PYTHON" --out "$WORK/run" \
    --call-timeout-ms 5000 --timeout 200 || rc=$?
((rc == 0)) || fail "run_chaos.sh --quick --faults $FAULTS failed (exit $rc; report and logs in $WORK/run)"

"$PYTHON" - "$WORK/run/chaos.json" "$FAULTS" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1]))
planned = [k for k in sys.argv[2].split(",") if k]
failures = []
def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)

check(rep["ok"] is True and not rep["problems"], f"report ok, no problems ({rep['problems']})")
for run in ("reference", "chaos"):
    r = rep[run]
    check(r["steps_done"] == r["steps_requested"] == 25 and not r["errors"], f"{run}: 25 of 25 steps, no error")
f = rep["faults"]
check([x["kind"] for x in f] == planned and all(x["fired"] for x in f), f"faults {planned} all injected")
check(all(1 <= x["step"] <= 25 and "error" not in x for x in f), "each fault at a step of the run, no injection error")
t = rep["calls_total"]
calls = rep["calls_submitted_rank0"]  # summed over the contexts
if "switch" in planned or "shard" in planned:
    check(t["fallback_events"] >= 1, f"the backend failed over (failover {t['fallback_events']})")
    check(t["recovered"] == t["recovered_library"], f"the backend and the library count the same calls recovered "
          f"({t['recovered']}, {t['recovered_library']})")
    check(t["failed_on_switch"] <= t["host_path"], f"the calls that failed on the switch and were not recovered "
          f"({t['failed_on_switch']}) ran on the host path ({t['host_path']})")
    check(t["host_path"] >= 1, f"later calls on the host path: {t['host_path']}")
else:
    check(t["failed_on_switch"] == 0 and not t["recovered_library"] and not t["fallback_events"],
          "no call failed, no failover")
print(f"note: returns to the switch: {t['returns_to_switch']} (not asserted)")
made = rep["allreduce_calls_rank0"]
check(t["switch"] + t["recovered_library"] + t["failed_on_switch"] == calls,
      f"switch calls {t['switch']} + recovered {t['recovered_library']} + failed {t['failed_on_switch']} = submitted {calls}")
check(made > 0 and t["switch"] + (t["recovered"] or 0) + (t["host_path"] or 0) == made,
      f"every all-reduce accounted for: switch {t['switch']} + recovered {t['recovered']} + host {t['host_path']} = {made} made")
m = rep["final_model"]
check(m["reference_replicas_identical"] and m["disturbed_replicas_identical"], "replicas identical in both runs")
check(m["bit_identical"] and m["max_abs_difference"] == 0.0, "final model bit-identical to the Gloo run's")
sys.exit(1 if failures else 0)
EOF
echo PASS
