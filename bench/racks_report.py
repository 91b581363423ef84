#!/usr/bin/env python3
"""Table, JSON and plot of a racks scenario run (bench/run_racks.sh).

Reads the runs file run_racks.sh writes (one tab-separated line per run: method, racks, per_rack,
oversubscription, worker rate, uplink rate, switch host rate or '-', all-reduces in the run
(warm-up + timed), allreduce_perf's --json file, the bytes that crossed each rack's uplink during
the run (both directions, comma separated, rack 0 first), status) and prints per run: the median
time per all-reduce of the largest size (tat_s; an iteration's time is the slowest rank's), the
method's bound, tat/bound, the bytes that crossed the busiest uplink per all-reduce (measured,
and what the model below says), the tensor's bytes and the wrong elements. Writes the runs as a
JSON list (--json) and, with --plot, a PNG of each configuration's times against the bounds.

  bench/racks_report.py --json DIR/racks.json --plot DIR/racks.png DIR/runs.tsv

The bounds. Every link is shaped by tbf in each direction separately, so a method's bound is the
largest, over links and directions, of (bytes the method puts on it) / (its rate); tbf counts L2
frame bytes without FCS, preamble or inter-frame gap. With S the tensor's bytes, n = R x r
workers, W the worker links' rate, U the uplinks', L the switch hosts' (unlimited by default):
- SwitchML packets carry E elements in 4E + 52 bytes (payload, SwitchML 10, UDP 8, IP 20,
  Ethernet 14), so every worker sends and receives P = ceil(S / 4E) x (4E + 52) bytes.
- flat (one switch on rack 0's leaf host): each worker link carries P each way (P / W); the
  switch host's link n x P each way (n P / L); rack k's uplink (k > 0) its r workers' P each way
  (r P / U); rack 0's uplink every other rack's workers' P each way ((R - 1) r P / U; rack 0's
  own workers do not cross it). bound = the largest: at 4:1 with R >= 2 the rack-0 uplink.
- gloo (ring in rank order, ranks rack-major): each rank sends 2 (n - 1) / n x S to its right
  neighbour over TCP (1448 payload bytes per 1514-byte frame at MTU 1500; ACKs ignored). Every
  worker link carries one ring edge each way; every uplink (R >= 2) one edge out of its rack and
  one into it, so bound = 2 (n - 1) / n x S x 1514 / 1448 / min(W, U) (only W when R = 1).
- two-level (a leaf switch per rack, a parent over the leaves): each worker link P each way
  (P / W); each leaf host's link its r workers' P plus P to and from the parent ((r + 1) P / L);
  each uplink P each way (P / U); the parent's link R x P each way (R P / L): the slowest level.
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import sys

UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
FRAME_OVERHEAD_B = 10 + 8 + 20 + 14  # SwitchML prefix, UDP, IPv4, Ethernet header
TCP_MSS_B, TCP_FRAME_B = 1448, 1514
METHODS = ("flat", "gloo", "two-level")


def parse_rate(text):
    """A tc rate (500mbit, 1gbit, 125000kbit, 100mbps) in bit/s; None for '-' (unlimited)."""
    if text in ("-", ""):
        return None
    m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)(bit|bps)", text.strip().lower())
    if not m:
        raise ValueError(f"rate '{text}' is not like 500mbit or 1gbit")
    value = float(m.group(1)) * UNITS[m.group(2)]
    return value * 8 if m.group(3) == "bps" else value


def secs(nbytes, rate_bps):
    return 0.0 if rate_bps is None else nbytes * 8 / rate_bps


def switchml_bytes(count, elements_per_packet):
    """Bytes one worker sends (and receives) for one all-reduce: P."""
    e = elements_per_packet
    return math.ceil(count / e) * (4 * e + FRAME_OVERHEAD_B)


def model(method, racks, per_rack, tensor_bytes, e, w, u, sw):
    """(bound_s, bytes per all-reduce on the busiest uplink, both directions) of the model above."""
    n = racks * per_rack
    if method in ("flat", "two-level"):
        p = switchml_bytes(tensor_bytes // 4, e)
        if method == "flat":
            # rack 0's uplink: the other racks' workers; rack k > 0's: its own r workers.
            rack0 = (racks - 1) * per_rack * p
            other = per_rack * p if racks > 1 else 0
            times = [secs(p, w), secs(n * p, sw), secs(rack0, u), secs(other, u)]
            return max(times), 2 * max(rack0, other)
        times = [secs(p, w), secs((per_rack + 1) * p, sw), secs(p, u), secs(racks * p, sw)]
        return max(times), 2 * p
    # gloo: ring edges i -> i+1 (mod n); per rack the bytes out of and into it.
    edge = (2 * (n - 1) / n) * tensor_bytes * TCP_FRAME_B / TCP_MSS_B
    out = [0.0] * racks
    into = [0.0] * racks
    for i in range(n):
        a, b = i // per_rack, ((i + 1) % n) // per_rack
        if a != b:
            out[a] += edge
            into[b] += edge
    times = [secs(edge, w)] + [secs(max(o, i), u) for o, i in zip(out, into)]
    return max(times), max(o + i for o, i in zip(out, into))


def largest_row(path):
    if not path or not os.path.exists(path):
        return None, None
    with open(path) as f:
        run = json.load(f)
    if not run.get("rows"):
        return run, None
    return run, max(run["rows"], key=lambda r: r["bytes"])


def collect(runs_file):
    out = []
    with open(runs_file) as f:
        for line in csv.reader(f, delimiter="\t"):
            if not line:
                continue
            if len(line) != 11:
                raise ValueError(f"{runs_file}: a line has {len(line)} fields, expected 11: {line}")
            method, racks, per_rack, over, rate, uplink, sw, ops, perf_json, uplink_csv, status = line
            racks, per_rack, ops = int(racks), int(per_rack), int(ops)
            w, u, swr = parse_rate(rate), parse_rate(uplink), parse_rate(sw)
            each = [int(x) / ops for x in uplink_csv.split(",")] if uplink_csv not in ("", "-") else []
            rec = {"method": method, "racks": racks, "per_rack": per_rack, "oversubscription": float(over),
                   "workers": racks * per_rack, "tat_s": None, "bound_s": None,
                   "uplink_bytes": max(each) if each else None, "tensor_bytes": None, "wrong": None,
                   "ok": False, "mean_tat_s": None, "iter_tat_s": None, "tat_over_bound": None,
                   "uplink_bytes_each": each, "uplink_model_bytes": None, "all_reduces": ops,
                   "rate_bps": w, "uplink_rate_bps": u, "switch_rate_bps": swr}
            run, row = largest_row(perf_json)
            if row:
                e = int((run.get("switchml") or {}).get("elements_per_packet") or 256)
                tensor = int(row["bytes"])
                tat = row.get("median_time_us", row["time_us"]) / 1e6
                bound, uplink_model = model(method, racks, per_rack, tensor, e, w, u, swr)
                rec.update(tat_s=tat, mean_tat_s=row["time_us"] / 1e6,
                           iter_tat_s=[t / 1e6 for t in row.get("iter_time_us", [])],
                           tensor_bytes=tensor, wrong=int(row["wrong"]), bound_s=bound,
                           tat_over_bound=tat / bound if bound > 0 else None,
                           uplink_model_bytes=uplink_model,
                           ok=status == "ok" and bool(run.get("ok")) and int(row["wrong"]) == 0)
            out.append(rec)
    return out


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_table(runs, note):
    print("# racks report: tat_s = median time per all-reduce (slowest rank per iteration); bound_s = the"
          " method's bound (bench/racks_report.py); uplink_MB = MB (1e6 B) that crossed the busiest uplink"
          " per all-reduce, both directions (interface counters over the run / all-reduces in it, warm-up"
          " included), model_MB = what the bound's model puts there")
    print(f"{'method':>9} {'racks':>5} {'per':>4} {'over':>5} {'tat_s':>8} {'bound_s':>8} {'tat/bnd':>7}"
          f" {'uplink_MB':>9} {'model_MB':>8} {'tensor_MB':>9} {'wrong':>6}  status")
    key = lambda r: (r["racks"], r["per_rack"], -r["oversubscription"], METHODS.index(r["method"]))
    for r in sorted(runs, key=key):
        status = "ok" if r["ok"] else ("FAILED (no result)" if r["tat_s"] is None else "WRONG ELEMENTS or failed")
        mb = lambda b: None if b is None else b / 1e6
        print(f"{r['method']:>9} {r['racks']:>5} {r['per_rack']:>4} {r['oversubscription']:>4g}:1"
              f" {fmt(r['tat_s'], '.3f'):>8} {fmt(r['bound_s'], '.3f'):>8} {fmt(r['tat_over_bound'], '.2f'):>7}"
              f" {fmt(mb(r['uplink_bytes']), '.2f'):>9} {fmt(mb(r['uplink_model_bytes']), '.2f'):>8}"
              f" {fmt(mb(r['tensor_bytes']), '.2f'):>9} {fmt(r['wrong'], 'd'):>6}  {status}")
    if note:
        print(f"# {note}")


def plot(runs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("racks_report.py: no plot (python3-matplotlib is not installed)", file=sys.stderr)
        return
    configs = sorted({(r["racks"], r["per_rack"], r["oversubscription"]) for r in runs},
                     key=lambda c: (c[0], c[1], -c[2]))
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(configs) + 2), 4.2))
    width = 0.8 / max(1, len(methods))
    for j, m in enumerate(methods):
        xs, ys, bs = [], [], []
        for x, c in enumerate(configs):
            r = next((r for r in runs if r["method"] == m and (r["racks"], r["per_rack"], r["oversubscription"]) == c), None)
            if r and r["tat_s"] is not None:
                xs.append(x + (j - (len(methods) - 1) / 2) * width)
                ys.append(r["tat_s"])
                bs.append(r["bound_s"])
        ax.bar(xs, ys, width * 0.9, color=f"C{j}", label=m)
        ax.plot(xs, bs, ls="none", marker="_", markersize=18, color="black",
                label="bound" if j == 0 else None)
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([f"{c[0]} x {c[1]}\n{c[2]:g}:1" for c in configs])
    sizes = {r["tensor_bytes"] for r in runs if r["tensor_bytes"]}
    size = f"{max(sizes) / (1 << 20):g} MiB" if sizes else ""
    ax.set_title(f"{size} float32 all-reduce across racks")
    ax.set_xlabel("racks x workers per rack, oversubscription")
    ax.set_ylabel("time per all-reduce (s, median)")
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"# plot written to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="the runs file of bench/run_racks.sh (OUT/runs.tsv)")
    ap.add_argument("--json", help="write the runs as a JSON list to FILE")
    ap.add_argument("--plot", help="write a PNG of the times against the bounds to FILE")
    ap.add_argument("--note", default="", help="a line printed under the table (e.g. why two-level did not run)")
    a = ap.parse_args()
    runs = collect(a.runs)
    print_table(runs, a.note)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)
        print(f"# runs written to {a.json}")
    if a.plot and runs:
        plot(runs, a.plot)
    if not runs:
        sys.exit("racks_report.py: no runs")
    bad = [r for r in runs if not r["ok"]]
    if bad:
        sys.exit(f"racks_report.py: {len(bad)} run(s) failed or had wrong elements")


if __name__ == "__main__":
    main()
