#!/usr/bin/env python3
"""Goodput report and plot of a datacenter scenario run (bench/run_datacenter.sh).

Reads DIR/<type>/<backend>-n<N>.json (allreduce_perf --json output), takes each run's largest
size, and prints per type and worker count: time, goodput (tensor bits per second through a
worker's link), goodput as a share of the link's payload capacity, the share of the backend's own
bound, and SwitchML's speedup over each baseline. Writes the table as JSON (--out) and, with
--plot, a PNG of aggregated elements per second against the number of workers.

  bench/datacenter_report.py --rate 500mbit /tmp/switchml-bench-datacenter.XXXX
  bench/datacenter_report.py --rate 500mbit --plot docs/img/datacenter.png DIR

Bounds (docs/benchmarks.md#measured-on-the-development-machine): tbf counts L2 frame bytes
(payload + UDP 8 + IP 20 + Ethernet 14). A SwitchML packet carries 4*E tensor bytes behind a
10-byte header, so a worker's link carries at most R * 4E/(4E + 52) tensor bits per second,
whatever the number of workers. A ring all-reduce sends 2(n-1)/n of the tensor over TCP (1448
payload bytes per 1514-byte frame at MTU 1500, 8948 per 9014 at MTU 9000).
"""
import argparse
import glob
import json
import os
import re
import sys

UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}


def parse_rate(text):
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit|bps)?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"rate '{text}' is not like 500mbit or 1gbit")
    value = float(m.group(1)) * UNITS[m.group(2)]
    if m.group(3) == "bps":  # tc: bps = bytes per second
        value *= 8
    return value


def load_runs(directory):
    runs = []
    for path in sorted(glob.glob(os.path.join(directory, "*", "*-n*.json"))):
        if os.path.basename(path) == "summary.json":
            continue
        with open(path) as f:
            run = json.load(f)
        if not run.get("rows"):
            continue
        row = max(run["rows"], key=lambda r: r["bytes"])
        runs.append({
            "type": run.get("type", os.path.basename(os.path.dirname(path))),
            "backend": run.get("label", run.get("backend")),
            "workers": int(run["workers"]),
            "bytes": int(row["bytes"]),
            "count": int(row["count"]),
            "time_s": row["time_us"] / 1e6,
            "wrong": int(row["wrong"]),
            "ok": bool(run.get("ok")),
            "elements_per_packet": run.get("switchml", {}).get("elements_per_packet"),
            "retx_pct": row.get("retx_pct"),
            "wire_over_size": row.get("wire_over_size"),
        })
    return runs


def capacity_and_bound(run, rate, mtu):
    """Returns (payload capacity of one link in bit/s, the backend's lower bound on time in s)."""
    size_bits = run["bytes"] * 8
    n = run["workers"]
    if run["backend"] == "switchml":
        payload = 4 * (run["elements_per_packet"] or 256)
        capacity = rate * payload / (payload + 52)
        return capacity, size_bits / capacity
    mss, frame = (1448, 1514) if mtu == 1500 else (8948, 9014)
    capacity = rate * mss / frame
    ring_share = 2 * (n - 1) / n if n > 1 else 0
    return capacity, ring_share * size_bits / capacity


def report(runs, rate, mtu):
    rows = []
    for run in runs:
        capacity, bound = capacity_and_bound(run, rate, mtu)
        goodput = run["bytes"] * 8 / run["time_s"]
        rows.append(dict(run, goodput_bps=goodput, link_payload_capacity_bps=capacity,
                         goodput_share=goodput / capacity, bound_s=bound,
                         share_of_bound=bound / run["time_s"] if bound > 0 else None,
                         ate_per_s=run["count"] / run["time_s"]))
    by_key = {(r["type"], r["workers"], r["backend"]): r for r in rows}
    for r in rows:
        sw = by_key.get((r["type"], r["workers"], "switchml"))
        r["switchml_speedup"] = r["time_s"] / sw["time_s"] if sw else None
    return rows


def print_table(rows, rate):
    print(f"# datacenter report: link rate {rate / 1e6:g} Mbit/s; goodput = tensor bits / time per worker link;"
          " 'of cap' = goodput / the link's payload capacity; 'of bound' = the backend's own lower bound / time;"
          " 'sw speedup' = this time / SwitchML's time")
    print(f"{'type':>8} {'n':>3} {'backend':>10} {'size(B)':>10} {'time(ms)':>9} {'goodput':>9} {'of cap':>7}"
          f" {'of bound':>8} {'ATE/s':>10} {'sw speedup':>10}")
    print(f"{'':>8} {'':>3} {'':>10} {'':>10} {'':>9} {'(Mbit/s)':>9} {'(%)':>7} {'(%)':>8} {'(Melem/s)':>10} {'(x)':>10}")
    for r in sorted(rows, key=lambda r: (r["type"], r["workers"], r["backend"] != "switchml", r["backend"])):
        sp = f"{r['switchml_speedup']:.2f}" if r["switchml_speedup"] else "-"
        ob = f"{100 * r['share_of_bound']:.1f}" if r["share_of_bound"] else "-"
        print(f"{r['type']:>8} {r['workers']:>3} {r['backend']:>10} {r['bytes']:>10} {1e3 * r['time_s']:>9.1f}"
              f" {r['goodput_bps'] / 1e6:>9.1f} {100 * r['goodput_share']:>7.1f} {ob:>8}"
              f" {r['ate_per_s'] / 1e6:>10.2f} {sp:>10}")


def plot(rows, path, rate):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("datacenter_report.py: --plot needs matplotlib (apt-get install python3-matplotlib)")
    types = sorted({r["type"] for r in rows})
    fig, axes = plt.subplots(1, len(types), figsize=(5.5 * len(types), 4), squeeze=False)
    for ax, t in zip(axes[0], types):
        for backend in sorted({r["backend"] for r in rows if r["type"] == t}, key=lambda b: (b != "switchml", b)):
            pts = sorted((r["workers"], r["ate_per_s"] / 1e6) for r in rows if r["type"] == t and r["backend"] == backend)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=backend)
        ax.set_title(f"{t}, {rows[0]['bytes'] // (1 << 20)} MiB, links {rate / 1e6:g} Mbit/s")
        ax.set_xlabel("workers")
        ax.set_ylabel("aggregated elements per second (M)")
        ax.set_xticks(sorted({r["workers"] for r in rows}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"# plot written to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="output directory of bench/run_datacenter.sh")
    ap.add_argument("--rate", type=parse_rate, required=True, help="link rate, tc units (500mbit)")
    ap.add_argument("--mtu", type=int, choices=(1500, 9000), default=1500)
    ap.add_argument("--out", help="write the table as JSON to FILE")
    ap.add_argument("--plot", help="write a PNG of aggregated elements/s against workers to FILE")
    a = ap.parse_args()
    runs = load_runs(a.dir)
    if not runs:
        sys.exit(f"datacenter_report.py: no allreduce_perf JSON under {a.dir}/<type>/")
    rows = report(runs, a.rate, a.mtu)
    print_table(rows, a.rate)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rate_bps": a.rate, "mtu": a.mtu, "rows": rows}, f, indent=1)
    if a.plot:
        plot(rows, a.plot, a.rate)
    bad = [r for r in rows if r["wrong"] or not r["ok"]]
    if bad:
        sys.exit(f"datacenter_report.py: {len(bad)} run(s) had wrong elements or failed")


if __name__ == "__main__":
    main()
