#!/usr/bin/env bash
# CTest `pytorch_ddp_bench_smoke` (label pytorch): the DDP step-time benchmark end to end, small:
# examples/run_ddp_bench.sh --quick on loopback, 2 processes, the cnn model. Asserts correctness
# only, never speed:
#   1. the run passes; its JSON has the model with 4 timed steps per backend, positive step times
#      and a speedup; the replicas are bit-identical on both ranks for both backends; the first
#      step's loss is the same for both backends (same weights, same data, no all-reduce yet);
#      on the same weights and data switchml's reduced gradients equal gloo's within the
#      benchmark's default tolerance (1e-4 relative; measured ~1e-7); the final cnn models differ
#      by at most 1e-3 of the training distance (--param-tolerance; measured ~1e-7 after 6 steps
#      and < 1e-6 after 53: this small model does not amplify rounding differences); the switchml
#      group made SwitchML calls (>= one per timed step), none failed, none went to Gloo.
#   2. the same run with --inject-fault scale-grad (the switchml replica's gradients x1.5 after
#      the all-reduce, as a wrong all-reduce would make them) fails, and its JSON says that the
#      gradient check failed (error 0.5) while the replicas stayed identical: the check can fail.
# Usage: ddp_bench_smoke.sh BUILD_DIR   (exit 77 = skipped: no torch / no backend built)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh" "$@"  # BUILD, HERE, PYTHON
RUN="$HERE/../examples/run_ddp_bench.sh"

pt_skip_unless_imports torch
pt_skip_unless_built python/switchml switchml

sml_work_dir switchml-ddpbench-smoke  # kept (with the JSON) when the test fails
sml_deadline 280 "ddp_bench smoke (hang guard, below the CTest TIMEOUT of 300 s)"
common=(--build "$BUILD" --python "$PYTHON" --workers 2 --models cnn --quick --timeout 120
        --param-tolerance 1e-3)

"$RUN" "${common[@]}" --json "$WORK/good.json" || fail "run_ddp_bench.sh --quick failed"

rc=0
"$RUN" "${common[@]}" --json "$WORK/fault.json" --inject-fault scale-grad > "$WORK/fault.log" 2>&1 || rc=$?
((rc == 1)) || { cat "$WORK/fault.log"; fail "with --inject-fault scale-grad the run must fail with exit 1, got $rc"; }
# The failed run kept its logs directory (and said "logs in DIR"): it failed on purpose, remove it.
kept=$(grep -o 'logs in /tmp/switchml-ddpbench\.[A-Za-z0-9]*' "$WORK/fault.log" | cut -d' ' -f3 || true)
[[ -z "$kept" || ! -d "$kept" ]] || rm -rf "$kept"

"$PYTHON" - "$WORK/good.json" "$WORK/fault.json" <<'EOF'
import json, math, sys
good, fault = (json.load(open(p)) for p in sys.argv[1:3])
failures = []
def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)

check(good["ok"] is True and good["world_size"] == 2, "good run: ok, 2 processes")
check([r["model"] for r in good["results"]] == ["cnn"], "good run: one model, cnn")
r = good["results"][0]
c = r["checks"]
check(r["parameters"] == 80202 and r["allreduce_bytes_per_step"] == 4 * 80202,
      f"cnn: 80,202 parameters, {4 * 80202} bytes all-reduced per step")
for b in ("switchml", "gloo"):
    e = r["backends"][b]
    check(len(e["step_time_s"]) == 4 and all(t > 0 for t in e["step_time_s"]),
          f"{b}: 4 timed steps with positive times")
    check(e["p90_ms"] >= e["median_ms"] > 0, f"{b}: 0 < median {e['median_ms']:.1f} ms <= p90 {e['p90_ms']:.1f} ms")
    check(e["replicas_identical"], f"{b}: parameters bit-identical on both ranks")
    check(len(e["loss_mean_over_ranks"]) == 6, f"{b}: 2 warm-up + 4 timed losses")
check(math.isfinite(r["speedup"]) and r["speedup"] > 0, f"speedup reported ({r['speedup']:.2f}x; not asserted)")
check(c["first_step_loss_difference"] == 0.0,
      f"first step's loss identical for both backends (difference {c['first_step_loss_difference']:.1e})")
for k in ("gradient_relative_error_first_step", "gradient_relative_error_end"):
    check(c[k] <= c["grad_tolerance"], f"{k}: {c[k]:.2e} <= {c['grad_tolerance']:g}")
rel = c["switchml_vs_gloo_diff_over_training_distance"]
check(rel <= 1e-3 and c["parameters_ok"], f"final models: difference / training distance {rel:.2e} <= 1e-3")
st = r["backends"]["switchml"]["switchml_stats_timed"]
check(st.get("calls_submitted", 0) >= 4, f"SwitchML calls during the 4 timed steps: {st.get('calls_submitted')}")
check(st.get("fallback_allreduces", -1) == 0, f"no Gloo fallback: {st.get('fallback_allreduces')}")
check(st.get("calls_failed", -1) == 0, "no failed SwitchML call")
check(c["ok"], "cnn: all checks ok")

fc = fault["results"][0]["checks"]
check(fault["ok"] is False and fault["inject_fault"] == "scale-grad", "fault run: not ok")
check(fc["replicas_identical"], "fault run: replicas still identical (the fault is the same on every rank)")
fg = fc["gradient_relative_error"]
check(not fc["gradients_ok"] and fg > 0.4, f"fault run: gradient error {fg:.2e} (x1.5: 0.5) fails the check")
sys.exit(1 if failures else 0)
EOF
echo PASS
