#!/usr/bin/env python3
"""Checks a Prometheus text exposition (format 0.0.4) and reads samples from it.

  metrics_check.py FILE                         checks FILE; prints "N families, M samples"
  metrics_check.py FILE NAME [LABEL=VALUE ...]  checks FILE; prints the sum of the samples of
                                                NAME whose labels include every LABEL=VALUE
                                                (exit 1 if none does)
  metrics_check.py FILE --dump                  checks FILE; prints JSON [[name, {labels}, value]]

The check: every line is a comment or a sample; every family has one HELP and one TYPE line
(counter, gauge, or summary: prometheus-cpp's own exposer_request_latencies) before its samples, and its samples are together; a sample parses as
NAME{LABEL="VALUE",...} VALUE with a float value; a counter's name ends in _total and its
value is >= 0; no sample (name and labels) appears twice. Exit 1 naming the first bad line.
"""
import json
import math
import re
import sys

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(" + NAME + r")(\{(.*)\})? (\S+)( -?\d+)?$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def parse_labels(text, where):
    labels = {}
    pos = 0
    while pos < len(text):
        m = LABEL.match(text, pos)
        if not m:
            sys.exit(f"metrics_check: {where}: bad labels at '{text[pos:]}'")
        value = m.group(2).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
        if m.group(1) in labels:
            sys.exit(f"metrics_check: {where}: label {m.group(1)} twice")
        labels[m.group(1)] = value
        pos = m.end()
    return labels


def parse(path):
    helps, types, samples, seen, done = {}, {}, [], set(), set()
    current = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        where = f"{path}:{n}: '{line}'"
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            if len(parts) < 4 or not re.fullmatch(NAME, parts[2]):
                sys.exit(f"metrics_check: {where}: bad {parts[1]} line")
            table = helps if parts[1] == "HELP" else types
            if parts[2] in table:
                sys.exit(f"metrics_check: {where}: second {parts[1]} for {parts[2]}")
            if parts[1] == "TYPE" and parts[3] not in ("counter", "gauge", "summary"):
                sys.exit(f"metrics_check: {where}: type {parts[3]} (counter, gauge or summary expected)")
            table[parts[2]] = parts[3]
            if current != parts[2]:
                if current is not None:
                    done.add(current)
                current = parts[2]
            continue
        if line.startswith("#") or line.strip() == "":
            continue
        m = SAMPLE.match(line)
        if not m:
            sys.exit(f"metrics_check: {where}: not a sample line")
        name = m.group(1)
        family = name
        for suffix in ("_sum", "_count"):  # a summary's (prometheus-cpp's own exposer_*)
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "summary":
                family = name[: -len(suffix)]
        if family not in helps or family not in types:
            sys.exit(f"metrics_check: {where}: no HELP and TYPE before the first sample of {name}")
        if family != current or family in done:
            sys.exit(f"metrics_check: {where}: samples of {family} not together after its TYPE")
        labels = parse_labels(m.group(3) or "", where)
        try:
            value = float(m.group(4))
        except ValueError:
            sys.exit(f"metrics_check: {where}: value '{m.group(4)}' is not a number")
        if types[family] == "counter":
            if not name.endswith("_total"):
                sys.exit(f"metrics_check: {where}: counter {name} does not end in _total")
            if not (value >= 0) or math.isinf(value):
                sys.exit(f"metrics_check: {where}: counter value {value}")
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            sys.exit(f"metrics_check: {where}: sample appears twice")
        seen.add(key)
        samples.append((name, labels, value))
    if not samples:
        sys.exit(f"metrics_check: {path}: no samples")
    return types, samples


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    types, samples = parse(sys.argv[1])
    if len(sys.argv) == 2:
        print(f"{len(types)} families, {len(samples)} samples")
        return
    if sys.argv[2] == "--dump":
        print(json.dumps(samples))
        return
    name = sys.argv[2]
    want = {}
    for arg in sys.argv[3:]:
        k, sep, v = arg.partition("=")
        if not sep:
            sys.exit(f"metrics_check: '{arg}' is not LABEL=VALUE")
        want[k] = v
    hits = [v for (n, l, v) in samples if n == name and all(l.get(k) == v for k, v in want.items())]
    if not hits:
        sys.exit(f"metrics_check: {sys.argv[1]}: no sample {name} with {want}")
    total = sum(hits)
    print(int(total) if total == int(total) else total)


if __name__ == "__main__":
    main()
