"""The chaos scenario's helper (bench/run_chaos.sh): the fault schedule and the report.

  chaos_report.py plan --steps N --seed S --faults switch,shard,controller [--warmup W] [--gap G]
      One line per fault, in the order given: "KIND STEP FRACTION": the fault fires while step
      STEP (1-based) runs, FRACTION (in [0, 1)) of the median step time after it started. The
      steps are distinct, at least G apart (default 5), after W undisturbed steps (default 5)
      and before the last G steps; all drawn from --seed.

  chaos_report.py report --ref DIR --chaos DIR --faults FILE --out DIR --workers N [--window W]
                         [--param-tolerance T] [--meta FILE]
      Reads the reference (Gloo) run's and the disturbed run's rank<R>.json and
      params-rank<R>.pt, and the fault log (JSON lines written by run_chaos.sh), prints the
      report (markdown) and writes chaos.md and chaos.json to --out. Exit status 0 when the
      disturbed run finished every step and its final model passed the comparison, 1
      otherwise (the report is written either way).

How the report measures:
  - time lost per fault: the fault's window is its step and the steps after it, up to the
    next fault's step and at most --window steps (default 10); the pace before is the median
    of the last 5 steps before the fault (but for each earlier fault's step and the step after
    it); time lost = sum over
    the window of max(0, step time - pace before): what the steps took beyond the pace before
    (a path that is faster afterwards gives nothing back); the pace after (the median of the
    window's second half) shows the path the training ended on.
  - calls on each path: the backend's stats() after every step of rank 0, as differences
    over each fault's window and over the run; per fault also the step whose stats() first
    show a failover after it, and the step at which the backend was back on the switch
    (failover_returns grown), looked for up to the next fault; which counters mean which path is listed in
    PATH_COUNTERS below (a counter the backend does not have is reported as absent).
  - the final models: every rank's parameters must be bit-identical within a run (replicas);
    rank 0's are compared with the reference's: int32 mode: exact equality (each step's
    all-reduce is an exact integer sum on every path, so any difference is an error);
    float32 mode: the largest |difference| and ||p - p_ref|| / ||p_ref - p_init|| (the
    switch's per-packet quantization differs from Gloo's float sums within its bound each
    step, so the models drift; checked only with --param-tolerance).
"""

import argparse
import json
import math
import os
import random
import statistics
import sys

KINDS = ("switch", "shard", "controller")

# Which stats() counters count calls on which path (summed when several are present).
# The library's (per context): calls_completed, all-reduces the switch finished; calls_recovered,
# those that failed there and the failover's recovery finished; calls_failed, those that failed
# and were not recovered (left to the host path: also in failover_host_calls), so
# calls_submitted = calls_completed + calls_recovered + calls_failed. The PyTorch backend's failover counters
# (integrations/pytorch/README.md): failover (times the group moved to the host path),
# failover_recovered_calls (calls in flight then that the recovery finished),
# failover_host_calls (calls run on the host path), failover_returns (times it came back to the
# switch); recovered_calls / host_path_calls are the MPI interposer's names; fallback_allreduces:
# calls the backend sends to its inner Gloo group by design (dtype/op the switch cannot
# aggregate). The library's counters restart with each new context (a return): see cumulative().
PATH_COUNTERS = {
    "switch": ["calls_completed"],
    "failed_on_switch": ["calls_failed"],
    "recovered": ["failover_recovered_calls", "recovered_calls"],
    "recovered_library": ["calls_recovered"],  # the library's count of the same calls
    "host_path": ["failover_host_calls", "host_path_calls"],
    "fallback_events": ["failover"],
    "returns_to_switch": ["failover_returns"],
    "gloo_by_design": ["fallback_allreduces"],
}


# A stats() counter whose name has one of these words but is not in PATH_COUNTERS is listed in
# the report as it is (a name this report does not know yet).
PATH_WORDS = ("host", "recover", "failover", "rejoin", "return", "switch_back")


def cmd_plan(a):
    kinds = [k.strip() for k in a.faults.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            sys.exit(f"chaos_report.py plan: unknown fault '{k}' (known: {', '.join(KINDS)})")
    n = len(kinds)
    lo, hi = a.warmup + 1, a.steps - a.gap  # fault steps in [lo, hi]
    room = hi - lo + 1 - (n - 1) * (a.gap - 1)
    if n and room < n:
        sys.exit(f"chaos_report.py plan: {n} fault(s) {a.gap} steps apart after {a.warmup} warm-up steps "
                 f"need at least {a.warmup + n * a.gap + 1} steps, got --steps {a.steps}")
    rng = random.Random(a.seed * 104729 + 17)
    picks = sorted(rng.sample(range(room), n)) if n else []
    for i, (k, p) in enumerate(zip(kinds, picks)):
        print(f"{k} {lo + p + i * (a.gap - 1)} {rng.random():.3f}")


# The backend's counters that belong to its SwitchML context (the client library's Stats): a
# return to the switch starts a new context, whose counters start from 0.
def is_context_counter(key):
    return not key.startswith(("fallback_", "failover", "on_host_path", "_"))


def cumulative(snapshots):
    """The stats() snapshots with the context counters made cumulative over contexts: where
    failover_returns grew or calls_submitted shrank, a new context started from 0, so its
    values are added to the old context's last ones."""
    out, base, prev = [], {}, None
    for snap in snapshots:
        if not isinstance(snap, dict):
            out.append(snap)
            continue
        if prev is not None and (snap.get("failover_returns", 0) > prev.get("failover_returns", 0)
                                 or snap.get("calls_submitted", 0) < prev.get("calls_submitted", 0)):
            for k, v in prev.items():
                if is_context_counter(k):
                    base[k] = base.get(k, 0) + v
        out.append({k: (v + base.get(k, 0) if is_context_counter(k) else v) for k, v in snap.items()})
        prev = snap
    return out


def load_run(d, n):
    """Ranks 0..n-1's rank<R>.json in d (None for a rank that wrote none: killed, timed out)."""
    ranks = []
    for r in range(n):
        p = os.path.join(d, f"rank{r}.json")
        if os.path.exists(p):
            with open(p) as f:
                ranks.append(json.load(f))
        else:
            ranks.append(None)
    return ranks


def load_params(torch, d, rank):
    p = os.path.join(d, f"params-rank{rank}.pt")
    return torch.load(p) if os.path.exists(p) else None


def counter(stats, names):
    """Sum of the counters of `names` present in `stats`; None if none is present."""
    if not stats or not isinstance(stats, dict):
        return None
    found = [stats[n] for n in names if n in stats]
    return sum(found) if found else None


def path_calls(before, after):
    """Calls on each path between two stats() snapshots (None: the backend has no such counter)."""
    out = {}
    for path, names in PATH_COUNTERS.items():
        a, b = counter(after, names), counter(before or {}, names)
        out[path] = None if a is None else a - (b or 0)
    return out


def compare(torch, a, b):
    """max |a - b| over all parameters, whether every tensor is bit-equal, and ||a - b||."""
    max_abs, equal, sq = 0.0, True, 0.0
    for name in a:
        x, y = a[name], b[name]
        if x.shape != y.shape:
            return {"max_abs": math.inf, "equal": False, "l2": math.inf, "why": f"{name}: shapes differ"}
        equal = equal and torch.equal(x, y)
        d = (x.double() - y.double())
        max_abs = max(max_abs, float(d.abs().max()) if d.numel() else 0.0)
        sq += float((d * d).sum())
    return {"max_abs": max_abs, "equal": equal, "l2": math.sqrt(sq)}


def cmd_report(a):
    import torch
    faults = []
    if os.path.exists(a.faults):
        with open(a.faults) as f:
            faults = [json.loads(line) for line in f if line.strip()]
    meta = {}
    if a.meta and os.path.exists(a.meta):
        with open(a.meta) as f:
            meta = json.load(f)
    ref, chaos = load_run(a.ref, a.workers), load_run(a.chaos, a.workers)
    rep = {"meta": meta, "ok": False, "problems": []}
    problems = rep["problems"]

    # The runs.
    def run_summary(ranks, what):
        missing = [i for i, r in enumerate(ranks) if r is None]
        if missing:
            problems.append(f"{what}: rank(s) {', '.join(map(str, missing))} wrote no result "
                            "(killed or timed out; see their logs)")
        have = [r for r in ranks if r is not None]
        if not have:
            return {"ranks": 0, "steps_done": 0, "steps_requested": meta.get("steps"), "errors": [],
                    "missing_ranks": missing}
        s = {"ranks": len(ranks), "steps_requested": have[0]["steps_requested"],
             "steps_done": min(r["steps_done"] for r in have),  # of the ranks that wrote a result
             "steps_done_per_rank": [r["steps_done"] if r else None for r in ranks],
             "missing_ranks": missing,
             "errors": [{"rank": r["rank"], "step": r["error_step"], "error": r["error"]}
                        for r in have if r["error"]]}
        if s["errors"]:
            problems.append(f"{what}: FAILED: " + "; ".join(
                f"rank {e['rank']} at step {e['step']}: {e['error']}" for e in s["errors"]))
        elif not missing and s["steps_done"] < s["steps_requested"]:
            problems.append(f"{what}: only {s['steps_done']} of {s['steps_requested']} steps done")
        return s
    rep["reference"] = run_summary(ref, "reference (gloo) run")
    rep["chaos"] = run_summary(chaos, "disturbed (switchml) run")
    world = a.workers
    grad_mode = next((r["grad_mode"] for r in chaos + ref if r), "?")
    rep["grad_mode"] = grad_mode

    # Step times and time lost per fault (rank 0 of the disturbed run).
    c0 = chaos[0] or {}  # rank 0 of the disturbed run ({}: it wrote no result)
    times = c0.get("step_time_s", [])
    stats = cumulative(c0.get("stats_per_step", []) + ([c0["stats_end"]] if c0.get("stats_end") else []))
    stats_end = stats[-1] if c0.get("stats_end") else None
    stats = stats[:len(c0.get("stats_per_step", []))]
    fired = sorted((f for f in faults if f.get("fired")), key=lambda f: f["step"])
    windows = []
    for i, f in enumerate(fired):
        end = min(f["step"] + a.window, fired[i + 1]["step"] if i + 1 < len(fired) else len(times) + 1,
                  len(times) + 1)
        windows.append((f["step"], max(f["step"], end)))  # steps [start, end), 1-based
    inside = set()
    for s, e in windows:
        inside.update(range(s, e))
    quiet = [t for i, t in enumerate(times, 1) if i not in inside]
    median = statistics.median(quiet) if quiet else (statistics.median(times) if times else 0.0)
    rep["step_time_median_s"] = median
    r0 = ref[0] or {}
    rep["reference_step_time_median_s"] = statistics.median(r0["step_time_s"]) if r0.get("step_time_s") else None
    base = sorted(quiet or times)
    rep["step_time_p10_p90_s"] = ([base[int(0.1 * (len(base) - 1))], base[int(0.9 * (len(base) - 1))]]
                                  if base else None)
    rep["step_time_median_of"] = "undisturbed steps" if quiet else "all steps"
    fault_rows = []
    for f in faults:
        row = dict(f)
        if f.get("fired"):
            s, e = windows[fired.index(f)]
            win = times[s - 1:e - 1]
            row["window_steps"] = [s, e - 1] if e > s else None
            row["window_steps_done"] = len(win)
            # The pace before: the median of the last 5 steps before the fault, but for the step
            # of each earlier fault and the step after it (where its stall is).
            hit = {x["step"] + k for x in fired if x["step"] < s for k in (0, 1)}
            before = [t for i, t in enumerate(times[:s - 1], 1) if i not in hit][-5:]
            pace = statistics.median(before) if before else median
            row["pace_before_s"] = pace
            # The pace after: the median of the window's second half (the path it ended on).
            half = win[len(win) // 2:]
            row["pace_after_s"] = statistics.median(half) if half else None
            row["time_lost_s"] = sum(max(0.0, t - pace) for t in win) if win else None
            if s - 1 < len(times):
                row["fault_step_time_s"] = times[s - 1]
            elif s - 1 == len(times) and c0.get("failed_step_time_s") is not None:
                row["fault_step_time_s"] = c0["failed_step_time_s"]  # the step that failed
                row["fault_step_failed"] = True
            else:
                row["fault_step_time_s"] = None
            before = stats[s - 2] if s >= 2 and s - 2 < len(stats) else None
            after = stats[e - 2] if e >= 2 and e - 2 < len(stats) else None
            row["calls"] = path_calls(before, after) if after else None
            # The failover this fault caused and the return to the switch after it (steps
            # whose stats() show failover / failover_returns grown), up to the next fault.
            nxt = fired[fired.index(f) + 1]["step"] if fired.index(f) + 1 < len(fired) else len(stats) + 1
            def first_growth(key):
                for i in range(s, min(nxt, len(stats) + 1)):
                    b = stats[i - 2] if i >= 2 else {}
                    if isinstance(stats[i - 1], dict) and stats[i - 1].get(key, 0) > (b or {}).get(key, 0):
                        return i
                return None
            row["failover_at_step"] = first_growth("failover")
            row["returned_at_step"] = first_growth("failover_returns") if row["failover_at_step"] else None
        fault_rows.append(row)
    rep["faults"] = fault_rows
    rep["calls_total"] = path_calls(None, stats_end) if stats_end else None
    rep["calls_submitted_rank0"] = stats_end.get("calls_submitted") if stats_end else None
    rep["stats_end_rank0"] = c0.get("stats_end")
    rep["allreduce_calls_rank0"] = c0.get("allreduce_calls")
    known = {n for names in PATH_COUNTERS.values() for n in names}
    rep["other_path_counters"] = {k: v for k, v in (c0.get("stats_end") or {}).items()
                                  if k not in known and any(w in k for w in PATH_WORDS)}
    not_fired = [f for f in faults if not f.get("fired")]
    if not_fired:
        problems.append("faults not injected: " + ", ".join(
            f"{f['kind']} (planned at step {f['step']}: {f.get('why', '?')})" for f in not_fired))
    failed_faults = [f for f in faults if f.get("fired") and f.get("error")]
    for f in failed_faults:
        problems.append(f"fault {f['kind']} at step {f['step']}: {f['error']}")

    # The final models.
    cmp = {"available": False}
    p_ref = load_params(torch, a.ref, 0)
    p_chaos = load_params(torch, a.chaos, 0)
    init_path = os.path.join(a.ref, "params-init.pt")
    p_init = torch.load(init_path) if os.path.exists(init_path) else None
    for what, d, ranks, p0 in (("reference", a.ref, ref, p_ref), ("disturbed", a.chaos, chaos, p_chaos)):
        same = None
        if p0 is not None:
            same = all(compare(torch, p0, load_params(torch, d, r))["equal"]
                       for r in range(1, len(ranks)) if load_params(torch, d, r) is not None)
            if not same:
                problems.append(f"{what} run: the ranks' final parameters differ (replicas diverged)")
        cmp[f"{what}_replicas_identical"] = same
    if p_ref is not None and p_chaos is not None:
        c = compare(torch, p_chaos, p_ref)
        cmp.update(available=True, max_abs_difference=c["max_abs"], bit_identical=c["equal"])
        if p_init is not None:
            dist = compare(torch, p_ref, p_init)["l2"]
            cmp["difference_over_training_distance"] = c["l2"] / dist if dist > 0 else None
        if grad_mode == "int32":
            cmp["criterion"] = "int32 gradients: bit-identical to the Gloo run"
            cmp["ok"] = c["equal"]
            if not c["equal"]:
                problems.append(f"final model differs from the Gloo run's (int32 mode must be exact): "
                                f"max |difference| {c['max_abs']:.3e}")
        else:
            rel = cmp.get("difference_over_training_distance")
            if a.param_tolerance > 0:
                cmp["criterion"] = (f"float32: ||p - p_gloo|| / ||p_gloo - p_init|| <= {a.param_tolerance:g}")
                cmp["ok"] = rel is not None and rel <= a.param_tolerance
                if not cmp["ok"]:
                    problems.append(f"final model: relative difference {rel} exceeds --param-tolerance "
                                    f"{a.param_tolerance:g}")
            else:
                cmp["criterion"] = "float32: reported, not checked (no --param-tolerance)"
                cmp["ok"] = True
    else:
        cmp["ok"] = False
        problems.append("final models not compared: " + ", ".join(
            w for w, p in (("no reference parameters", p_ref), ("no parameters from the disturbed run", p_chaos))
            if p is None))
    rep["final_model"] = cmp
    rep["ok"] = not problems
    rep["world_size"] = world

    md = render(rep)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "chaos.json"), "w") as f:
        json.dump(rep, f, indent=1)
    with open(os.path.join(a.out, "chaos.md"), "w") as f:
        f.write(md)
    print(md, end="")
    return 0 if rep["ok"] else 1


def fmt(v, spec="", none="-"):
    if v is None:
        return none
    return format(v, spec)


def render(rep):
    L = []
    m = rep["meta"]
    L.append("# Chaos scenario report\n")
    if m:
        L.append(", ".join(f"{k} {v}" for k, v in m.items()) + "\n")
    c, r = rep["chaos"], rep["reference"]
    verdict = "PASSED" if rep["ok"] else "FAILED"
    L.append(f"**{verdict}**: disturbed run {c.get('steps_done', 0)}/{c.get('steps_requested', '?')} steps "
             f"(reference {r.get('steps_done', 0)}/{r.get('steps_requested', '?')}), {rep['world_size']} ranks, "
             f"gradients {rep['grad_mode']}\n")
    for p in rep["problems"]:
        L.append(f"- {p}")
    if rep["problems"]:
        L.append("")
    spread = rep.get("step_time_p10_p90_s")
    L.append(f"Median step time ({rep['step_time_median_of']}): {rep['step_time_median_s'] * 1e3:.1f} ms"
             + (f" (p10 {spread[0] * 1e3:.1f}, p90 {spread[1] * 1e3:.1f} ms: a fault's time lost within a few "
                "times that spread is noise)" if spread else "")
             + (f"; the Gloo reference's median step time: {rep['reference_step_time_median_s'] * 1e3:.1f} ms"
                if rep.get("reference_step_time_median_s") else "") + "\n")
    L.append("| # | fault | step | detail | steps in window | fault step ms | pace before / after ms | time lost s | switch calls | host-path calls | recovered | failovers | returns | host path from / back at step |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, f in enumerate(rep["faults"]):
        calls = f.get("calls") or {}
        if f.get("fired"):
            w = f.get("window_steps")
            L.append(f"| {i + 1} | {f['kind']} | {f['step']} | {f.get('detail', '')}"
                     f"{' ERROR: ' + f['error'] if f.get('error') else ''} | "
                     f"{f'{w[0]}..{w[1]}' if w else 'none (training had ended)'} | "
                     f"{fmt(f.get('fault_step_time_s') and f['fault_step_time_s'] * 1e3, '.1f')}"
                     f"{' (failed)' if f.get('fault_step_failed') else ''} | "
                     f"{fmt(f.get('pace_before_s') and f['pace_before_s'] * 1e3, '.1f')} / "
                     f"{fmt(f.get('pace_after_s') and f['pace_after_s'] * 1e3, '.1f')} | "
                     f"{fmt(f.get('time_lost_s'), '.3f')} | {fmt(calls.get('switch'))} | "
                     f"{fmt(calls.get('host_path'), none='n/a')} | {fmt(calls.get('recovered'), none='n/a')} | "
                     f"{fmt(calls.get('fallback_events'), none='n/a')} | {fmt(calls.get('returns_to_switch'), none='n/a')} | "
                     f"{fmt(f.get('failover_at_step'))} / {fmt(f.get('returned_at_step'), none='-' if not f.get('failover_at_step') else 'not before the next fault')} |")
        else:
            L.append(f"| {i + 1} | {f['kind']} | {f['step']} | not injected: {f.get('why', '?')} | | | | | | | | | | |")
    L.append("")
    t = rep.get("calls_total")
    if t:
        L.append(f"All-reduces over the whole disturbed run (rank 0): {fmt(rep.get('allreduce_calls_rank0'))} made; "
                 "stats(): " + ", ".join(
            f"{k} {fmt(v, none='n/a')}" for k, v in t.items()) + "\n")
    if rep.get("other_path_counters"):
        L.append("Other path counters of the backend (end of run, rank 0): " + ", ".join(
            f"{k} {v}" for k, v in rep["other_path_counters"].items()) + "\n")
    fm = rep["final_model"]
    if fm.get("available"):
        L.append(f"Final model vs the Gloo run: bit-identical {fm['bit_identical']}, max |difference| "
                 f"{fm['max_abs_difference']:.3e}, relative to the training distance "
                 f"{fmt(fm.get('difference_over_training_distance'), '.3e')}; replicas identical: "
                 f"reference {fm.get('reference_replicas_identical')}, disturbed {fm.get('disturbed_replicas_identical')}; "
                 f"criterion: {fm['criterion']}\n")
    else:
        L.append("Final models: not compared (see above)\n")
    for e in rep["chaos"].get("errors", []):
        L.append(f"Error on rank {e['rank']} at step {e['step']}: {e['error']}")
    return "\n".join(L) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan")
    pl.add_argument("--steps", type=int, required=True)
    pl.add_argument("--seed", type=int, required=True)
    pl.add_argument("--faults", required=True)
    pl.add_argument("--warmup", type=int, default=5)
    pl.add_argument("--gap", type=int, default=5)
    rp = sub.add_parser("report")
    rp.add_argument("--ref", required=True)
    rp.add_argument("--chaos", required=True)
    rp.add_argument("--faults", required=True)
    rp.add_argument("--out", required=True)
    rp.add_argument("--meta", default="")
    rp.add_argument("--workers", type=int, required=True, help="ranks of each run")
    rp.add_argument("--window", type=int, default=10)
    rp.add_argument("--param-tolerance", type=float, default=0.0)
    a = p.parse_args(argv)
    if a.cmd == "plan":
        if a.gap < 1 or a.warmup < 0:
            sys.exit("chaos_report.py plan: --gap must be >= 1 and --warmup >= 0")
        cmd_plan(a)
        return 0
    if a.window < 1:
        sys.exit("chaos_report.py report: --window must be >= 1")
    return cmd_report(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
