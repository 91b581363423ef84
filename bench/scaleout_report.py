#!/usr/bin/env python3
"""Table, JSON and plot of a scale-out scenario run (bench/run_scaleout.sh).

Reads DIR/switchml-n<N>-k<K>.json and DIR/gloo-n<N>.json (allreduce_perf --json output), takes
each run's largest size and its mean time over the timed iterations (tat_s), and prints per run:
n, K (switch hosts), io_threads (I/O threads per switch), worker_threads (per rank), tat_s, the
in-network bound, tat/bound, Gloo's time / tat ('vs Gloo', > 1: SwitchML is faster) and the wrong
elements. Writes the runs as a JSON list (--json) and, with --plot, a PNG of time against K, one
line per n, with the bounds and Gloo's times.

  bench/scaleout_report.py --rate 500mbit --json DIR/scaleout.json --plot DIR/scaleout.png DIR

The in-network bound (bench/datacenter_report.py's convention): tbf counts L2 frame bytes without
FCS, preamble or inter-frame gap, so a SwitchML packet of E elements is 4E payload + 10 SwitchML
+ 8 UDP + 20 IP + 14 Ethernet = 4E + 52 bytes. One link carries the tensor's packets each way
(both directions at once) in link_s = ceil(count / E) * (4E + 52) * 8 / R. With K switch hosts
behind links of the same rate, each switch host link carries n/K workers' shares, so
bound_s = max(1, n/K) * link_s. Gloo's rows carry the ring's own bound: 2(n-1)/n of the tensor
over TCP (1448 payload bytes per 1514-byte frame).
"""
import argparse
import json
import math
import os
import re
import sys

UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}
FRAME_OVERHEAD_B = 10 + 8 + 20 + 14  # SwitchML prefix, UDP, IPv4, Ethernet header
TCP_MSS_B, TCP_FRAME_B = 1448, 1514


def parse_rate(text):
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit|bps)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"rate '{text}' is not like 500mbit or 1gbit")
    value = float(m.group(1)) * UNITS[m.group(2)]
    return value * 8 if m.group(3) == "bps" else value  # tc: bps = bytes per second


def parse_pairs(text):
    """'4:1,4:2' -> [(4, 1), (4, 2)]."""
    out = []
    for item in filter(None, text.replace(" ", ",").split(",")):
        m = re.fullmatch(r"([0-9]+):([0-9]+)", item)
        if not m:
            raise argparse.ArgumentTypeError(f"'{item}' is not N:K")
        out.append((int(m.group(1)), int(m.group(2))))
    return out


def parse_counts(text):
    try:
        return [int(x) for x in filter(None, text.replace(" ", ",").split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a list of worker counts")


def largest_row(path):
    """(run JSON, its row of the largest size) or (None, None) when the file is missing or empty."""
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        run = json.load(f)
    if not run.get("rows"):
        return run, None
    return run, max(run["rows"], key=lambda r: r["bytes"])


def switchml_bound(count, elements_per_packet, n, k, rate):
    packets = math.ceil(count / elements_per_packet)
    link_s = packets * (4 * elements_per_packet + FRAME_OVERHEAD_B) * 8 / rate
    return max(1.0, n / k) * link_s


def ring_bound(nbytes, n, rate):
    return (2 * (n - 1) / n if n > 1 else 0) * nbytes * 8 / (rate * TCP_MSS_B / TCP_FRAME_B)


def collect(directory, switchml_runs, gloo_runs, rate, io_threads):
    runs = []
    for n in gloo_runs:
        run, row = largest_row(os.path.join(directory, f"gloo-n{n}.json"))
        entry = {"backend": "gloo", "workers": n, "switch_hosts": None, "io_threads": None,
                 "bytes": None, "tat_s": None, "bound_s": None, "wrong": None, "ok": False}
        if row:
            entry.update(bytes=int(row["bytes"]), tat_s=row["time_us"] / 1e6,
                         bound_s=ring_bound(int(row["bytes"]), n, rate), wrong=int(row["wrong"]),
                         ok=bool(run.get("ok")) and int(row["wrong"]) == 0)
        runs.append(entry)
    gloo_tat = {r["workers"]: r["tat_s"] for r in runs if r["tat_s"]}
    for n, k in switchml_runs:
        run, row = largest_row(os.path.join(directory, f"switchml-n{n}-k{k}.json"))
        entry = {"backend": "switchml", "workers": n, "switch_hosts": k, "io_threads": io_threads,
                 "worker_threads": None,
                 "bytes": None, "tat_s": None, "bound_s": None, "wrong": None, "ok": False,
                 "tat_over_bound": None, "gloo_over_tat": None}
        if row:
            sw = run.get("switchml", {})
            e = int(sw.get("elements_per_packet", 256))
            bound = switchml_bound(int(row["count"]), e, n, k, rate)
            tat = row["time_us"] / 1e6
            entry.update(worker_threads=sw.get("threads"), elements_per_packet=e, bytes=int(row["bytes"]),
                         tat_s=tat, bound_s=bound, wrong=int(row["wrong"]),
                         ok=bool(run.get("ok")) and int(row["wrong"]) == 0, tat_over_bound=tat / bound,
                         gloo_over_tat=gloo_tat[n] / tat if n in gloo_tat and tat > 0 else None)
        runs.append(entry)
    return runs


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_table(runs, rate):
    print(f"# scale-out report: every worker and switch host link {rate / 1e6:g} Mbit/s each way; tat_s = mean time"
          " of the timed iterations of the largest size; bound_s = max(1, n/K) x one link's time for the tensor's"
          " packets (4E + 52 B per packet: payload, SwitchML 10, UDP 8, IP 20, Ethernet 14; no FCS, preamble or"
          " inter-frame gap), for Gloo the ring's 2(n-1)/n of the tensor over TCP; vs Gloo = Gloo's time / tat"
          " (> 1: SwitchML faster)")
    print(f"{'n':>3} {'K':>5} {'io_threads':>10} {'w_threads':>9} {'tat_s':>9} {'bound_s':>9} {'tat/bound':>9} {'vs Gloo':>8}"
          f" {'wrong':>6}  status")
    key = lambda r: (r["workers"], r["backend"] != "switchml", r["switch_hosts"] or 0)
    for r in sorted(runs, key=key):
        k = "gloo" if r["backend"] == "gloo" else str(r["switch_hosts"])
        status = "ok" if r["ok"] else ("FAILED (no result)" if r["tat_s"] is None else "WRONG ELEMENTS")
        ratio = r["tat_s"] / r["bound_s"] if r["tat_s"] and r["bound_s"] else None
        print(f"{r['workers']:>3} {k:>5} {fmt(r['io_threads'], ''):>10} {fmt(r.get('worker_threads'), ''):>9}"
              f" {fmt(r['tat_s'], '.3f'):>9}"
              f" {fmt(r['bound_s'], '.3f'):>9} {fmt(ratio, '.2f'):>9} {fmt(r.get('gloo_over_tat'), '.2f'):>8}"
              f" {fmt(r['wrong'], 'd'):>6}  {status}")


def plot(runs, path, rate):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("scaleout_report.py: no plot (python3-matplotlib is not installed)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ks_all = sorted({r["switch_hosts"] for r in runs if r["backend"] == "switchml"})
    sizes = {r["bytes"] for r in runs if r["bytes"]}
    for i, n in enumerate(sorted({r["workers"] for r in runs})):
        color = f"C{i}"
        pts = sorted((r["switch_hosts"], r["tat_s"], r["bound_s"]) for r in runs
                     if r["backend"] == "switchml" and r["workers"] == n and r["tat_s"])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=f"SwitchML, n = {n}")
            ax.plot([p[0] for p in pts], [p[2] for p in pts], ls="--", color=color, alpha=0.7,
                    label=f"in-network bound, n = {n}")
        for r in runs:
            if r["backend"] == "gloo" and r["workers"] == n and r["tat_s"]:
                ax.axhline(r["tat_s"], ls=":", color=color, label=f"Gloo ring, n = {n}")
    size = f"{max(sizes) / (1 << 20):g} MiB" if sizes else ""
    ax.set_title(f"one job on K switch hosts: {size} float32, links {rate / 1e6:g} Mbit/s")
    ax.set_xlabel("switch hosts K")
    ax.set_ylabel("time per all-reduce (s)")
    if ks_all:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks_all)
        ax.set_xticklabels([str(k) for k in ks_all])
        ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"# plot written to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="output directory of bench/run_scaleout.sh")
    ap.add_argument("--rate", type=parse_rate, required=True, help="link rate, tc units (500mbit)")
    ap.add_argument("--switchml-runs", type=parse_pairs, required=True,
                    help="the SwitchML runs expected, N:K comma separated (missing ones are reported as failed)")
    ap.add_argument("--gloo-runs", type=parse_counts, default=[], help="worker counts of the expected Gloo runs")
    ap.add_argument("--io-threads", type=int, default=1, help="I/O threads of every switch")
    ap.add_argument("--json", help="write the runs as a JSON list to FILE")
    ap.add_argument("--plot", help="write a PNG of time against K to FILE")
    a = ap.parse_args()
    runs = collect(a.dir, a.switchml_runs, a.gloo_runs, a.rate, a.io_threads)
    print_table(runs, a.rate)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)
        print(f"# runs written to {a.json}")
    if a.plot:
        plot(runs, a.plot, a.rate)
    bad = [r for r in runs if not r["ok"]]
    if bad:
        sys.exit(f"scaleout_report.py: {len(bad)} run(s) failed or had wrong elements")


if __name__ == "__main__":
    main()
