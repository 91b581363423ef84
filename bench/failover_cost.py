#!/usr/bin/python3
"""What the PyTorch backend's failover costs while the switch works (docs/reliability.md,
"Surviving a failing switch"): the same workload with SWITCHML_FAILOVER=1 (the default: shadow
copies of every result, an agreement before a collective delegated to Gloo when a SwitchML
all-reduce was called since the last one) and with
SWITCHML_FAILOVER=0 (none of that), interleaved,
on one switch and 2 worker processes on this machine (loopback: CPU-bound, the worst case for
the shadow copies' memcpy).

  bench/failover_cost.py --switchml build/switchml --pythonpath build/python [--rounds 3]

Per round and setting it reports: ms per all-reduce of 16 MiB of float32 (shadow copies),
µs per all-reduce of 1000 float32, µs per broadcast of 10 float64 after a broadcast (the
agreement skipped: no all-reduce since the last one), µs per pair of a 1000-element
all-reduce and a broadcast (an agreement each: the broadcast follows an all-reduce). Prints
what it measured; asserts nothing.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integrations", "pytorch",
                                "tests"))
from harness import (base_env, run_processes, start_switch, stop_switch, use_pythonpath, worker_cmd)  # noqa: E402


def worker(args):
    use_pythonpath(args)
    import datetime
    import torch
    import torch.distributed as dist
    import switchml.torch  # noqa: F401
    dist.init_process_group("switchml", init_method=args.init, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=120))
    big = torch.ones(4 * 1024 * 1024)
    small = torch.ones(1000)
    b = torch.ones(10, dtype=torch.float64)
    for _ in range(3):  # warm-up
        big.fill_(1.0)
        small.fill_(1.0)
        dist.all_reduce(big)
        dist.all_reduce(small)
    dist.barrier()
    t = time.perf_counter()
    for _ in range(10):
        big.fill_(1.0)
        dist.all_reduce(big)
    big_ms = (time.perf_counter() - t) / 10 * 1e3
    dist.barrier()
    t = time.perf_counter()
    for _ in range(320):
        small.fill_(1.0)  # in place sums would double it each call
        dist.all_reduce(small)
    small_us = (time.perf_counter() - t) / 320 * 1e6
    dist.barrier()
    t = time.perf_counter()
    for _ in range(100):
        dist.broadcast(b, src=0)
    bcast_us = (time.perf_counter() - t) / 100 * 1e6
    dist.barrier()
    t = time.perf_counter()
    for _ in range(100):
        small.fill_(1.0)
        dist.all_reduce(small)
        dist.broadcast(b, src=0)  # after an all-reduce: the agreement runs
    pair_us = (time.perf_counter() - t) / 100 * 1e6
    if args.rank == 0:
        print(f"RESULT {big_ms:.2f} {small_us:.1f} {bcast_us:.1f} {pair_us:.1f}", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="parent", choices=["parent", "worker"])
    p.add_argument("--switchml", help="the switchml binary (parent)")
    p.add_argument("--pythonpath", help="folder of the built switchml package")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--init")
    args = p.parse_args()
    if args.mode == "worker":
        return worker(args)
    if not args.switchml:
        p.error("--switchml is required")
    import tempfile
    results = {"1": [], "0": []}
    with tempfile.TemporaryDirectory(prefix="switchml_failover_cost_") as tmpdir:
        for rnd in range(args.rounds):
            for setting in ("1", "0"):
                d = os.path.join(tmpdir, f"r{rnd}_{setting}")
                os.makedirs(d)
                switch, controller = start_switch(args.switchml, d)
                try:
                    env = base_env(args.pythonpath)
                    env["SWITCHML_CONTROLLER"] = controller
                    env["SWITCHML_FAILOVER"] = setting
                    init = "file://" + os.path.join(d, "store")
                    cmds = [(worker_cmd(__file__, "worker", r, 2, init, args), env) for r in range(2)]
                    out = run_processes(cmds, d, 300, "cost")
                finally:
                    stop_switch(switch)
                line = [ln for ln in out[0][1].splitlines() if ln.startswith("RESULT ")]
                if out[0][0] != 0 or not line:
                    print(f"round {rnd} SWITCHML_FAILOVER={setting}: FAILED\n{out[0][1]}")
                    return 1
                vals = [float(v) for v in line[0].split()[1:]]
                results[setting].append(vals)
                print(f"round {rnd} SWITCHML_FAILOVER={setting}: 16 MiB all-reduce {vals[0]:.2f} ms, "
                      f"1000-element all-reduce {vals[1]:.1f} us, broadcast after a broadcast {vals[2]:.1f} us, "
                      f"all-reduce + broadcast {vals[3]:.1f} us", flush=True)
    med = {k: [statistics.median(v[i] for v in vs) for i in range(4)] for k, vs in results.items()}
    print(f"median over {args.rounds} rounds: failover on / off: 16 MiB {med['1'][0]:.2f} / {med['0'][0]:.2f} ms "
          f"({med['1'][0] / med['0'][0]:.3f}x), 1000 elements {med['1'][1]:.1f} / {med['0'][1]:.1f} us "
          f"({med['1'][1] / med['0'][1]:.3f}x), broadcast after a broadcast {med['1'][2]:.1f} / {med['0'][2]:.1f} us "
          f"({med['1'][2] / med['0'][2]:.3f}x), all-reduce + broadcast {med['1'][3]:.1f} / {med['0'][3]:.1f} us "
          f"({med['1'][3] / med['0'][3]:.3f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
