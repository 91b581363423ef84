#!/usr/bin/python3
"""Surviving a failing switch with the "switchml" backend (CTest pytorch_failover).

  test_failover.py suite --switchml BUILD/switchml --pythonpath BUILD/python

Each run starts its own switch (`switchml switch` on free ports) and two worker processes
(harness.py), with SWITCHML_CALL_TIMEOUT_MS=2000:
  kill:    100 int32 all-reduces, up to 8 in flight (in place, non-contiguous = staged, chained
           on one tensor), rank 0 tells the parent after call K (K from the seed) and waits until
           the parent has killed the switch (SIGKILL), with its calls in flight; the ranks then
           fail over to the host path (a second Gloo group). Every result must be exact on
           every rank (int32 sums with wrap-around), stats() must show the failover, the calls
           recovery finished and the calls run on the host path, the log line once per rank; later
           collectives work. Twice, with different seeds.
  probe:   rank 0 breaks its context as a switch failure would (_inject_switch_failure); rank 1
           never sees a failure: it joins at its next collective (a broadcast: the probe), and
           the all-reduces after it are exact on the host path on both ranks; one agreement
           each (stats failover_agreements).
  skip:    the probes skipped while no SwitchML all-reduce was called since an agreement that
           found every rank idle: all_reduce, broadcast (probe), broadcast, broadcast (skipped),
           all_reduce, barrier (probe), barrier, all_gather (skipped), exact counts of
           failover_agreements and failover_probes_skipped on both ranks; an async all_reduce
           before a broadcast (probed while busy or not: the counts equal on both ranks); then
           all_reduce, broadcast (probe), the switch killed, broadcast (skipped: nobody knows
           yet), all_reduce (fails on both ranks: the recovery's agreement), broadcast and
           all_reduce on the host path; every result exact, agreements equal on both ranks.
  skip-inject: rank 0 breaks its context while every rank is idle after an agreement: the next
           broadcast is skipped on both ranks and nobody fails over there; the failure reaches
           rank 1 at the first agreement after the next SwitchML all-reduce (an async one, then
           a broadcast), and the all-reduces are exact on the host path.
  destroy: rank 0 breaks its context, then both ranks destroy the group at once: rank 1 joins
           at its destruction (the probe there), nothing hangs, both log the failover.
  ddp:     DDP training of a small model, 30 steps; after step 10 the parent kills the switch
           (between two steps, by construction); training completes, the parameters are
           identical on both ranks, and stats() show the failover.
  return:  10 calls on the switch, the switch killed, 10 calls on the host path, the switch
           restarted on the same controller port: the ranks keep calling, with a barrier after
           each call, until stats() show the return (it happens at the same barrier on every
           rank, so they leave the loop together), then 10 calls on the new switch; every
           result exact.
No timing assertions: every wait has a hang guard only.
Exit code 77 (CTest: skipped) when this interpreter cannot import torch.
"""

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness.py
from harness import (WORKER_TIMEOUT_S, arg_parser, base_env, collect, dispatch, finish_worker, init_worker,
                     parent_main, print_switch_log, rank_data, report, run_with_switch, spawn, start_switch,
                     stop_switch, worker_cmd)

CALL_TIMEOUT_MS = 2000
CALLS = 100
LOG_LINE = "every later all-reduce runs on the host path (Gloo)"


# ---------------------------------------------------------------- parent side

def parent(args):
    def body(tmpdir):
        ok = True
        for seed in (1, 2):
            ok = run_with_kill(args, os.path.join(tmpdir, f"kill{seed}"), "worker-kill", seed) and ok
        ok = run_plain(args, os.path.join(tmpdir, "probe"), "worker-probe") and ok
        ok = run_with_kill(args, os.path.join(tmpdir, "skip"), "worker-skip", 5) and ok
        # A long call timeout: rank 1's all-reduce waits on the live switch for rank 0 (which
        # refuses it) until the agreement breaks it; a hang guard, not a pace.
        ok = run_plain(args, os.path.join(tmpdir, "skip-inject"), "worker-skip-inject", call_timeout_ms=60000) and ok
        ok = run_plain(args, os.path.join(tmpdir, "destroy"), "worker-destroy", check_log=True) and ok
        ok = run_with_kill(args, os.path.join(tmpdir, "ddp"), "worker-ddp", 3) and ok
        ok = run_with_kill(args, os.path.join(tmpdir, "return"), "worker-return", 4) and ok
        return ok
    return parent_main(args, "switchml_failover_", body)


def env_for(args, controller):
    env = base_env(args.pythonpath)
    env["SWITCHML_CONTROLLER"] = controller
    env["SWITCHML_CALL_TIMEOUT_MS"] = str(CALL_TIMEOUT_MS)
    env.pop("SWITCHML_FAILOVER", None)  # the default: on
    env.pop("SWITCHML_REJOIN", None)
    # Coming back: rank 0 asks often (the ranks agree at barriers).
    env["SWITCHML_REJOIN_MIN_BACKOFF_MS"] = "200"
    env["SWITCHML_REJOIN_MAX_BACKOFF_MS"] = "500"
    return env


def log_once(results):
    """The failover's log line, exactly once on every rank."""
    ok = True
    for rank, (_, out) in enumerate(results):
        n = out.count(LOG_LINE)
        print(f"parent: {'ok  ' if n == 1 else 'FAIL'} rank {rank} logged the failover {n} time(s)")
        ok = ok and n == 1
    return ok


def wait_for_file(path, procs, deadline):
    while not os.path.exists(path):
        if time.time() > deadline or any(p.poll() is not None for p, _ in procs):
            return False
        time.sleep(0.02)
    return True


def run_with_kill(args, tmpdir, mode, seed):
    """Two workers of `mode`; when rank 0 creates `kill-now` beside the store, the parent kills
    the switch (SIGKILL) and creates `killed`, which rank 0 waits for. Mode worker-return also
    asks for a restart (`restart-now`): the parent starts the switch again on the same
    controller port and creates `restarted`."""
    os.makedirs(tmpdir)
    switch, controller = start_switch(args.switchml, tmpdir)
    killed = False
    try:
        init = "file://" + os.path.join(tmpdir, "store")
        env = env_for(args, controller)
        procs = [spawn(worker_cmd(__file__, mode, rank, 2, init, args, "--seed", str(seed)), env, tmpdir,
                       f"{mode}_{rank}") for rank in range(2)]
        deadline = time.time() + WORKER_TIMEOUT_S  # hang guard only
        if wait_for_file(os.path.join(tmpdir, "kill-now"), procs, deadline):
            switch.kill()
            switch.wait()
            killed = True
            print(f"parent: {mode} seed {seed}: killed the switch")
        else:
            print(f"parent: FAIL {mode} seed {seed}: rank 0 never asked for the kill")
        open(os.path.join(tmpdir, "killed"), "w").close()
        restarted = mode != "worker-return"
        if not restarted and wait_for_file(os.path.join(tmpdir, "restart-now"), procs, deadline):
            switch, _ = start_switch(args.switchml, tmpdir, controller_port=int(controller.rsplit(":", 1)[1]))
            killed = False
            restarted = True
            print(f"parent: {mode}: restarted the switch on {controller}")
            open(os.path.join(tmpdir, "restarted"), "w").close()
        results = collect(procs, deadline)
        ok = report(results, f"{mode} seed {seed}") and restarted and log_once(results)
        if not restarted:
            print(f"parent: FAIL {mode}: rank 0 never asked for the restart")
    finally:
        if not killed:
            stop_switch(switch)
    if not ok:
        print_switch_log(tmpdir, f"{mode} ")
    return ok


def run_plain(args, tmpdir, mode, check_log=False, call_timeout_ms=CALL_TIMEOUT_MS):
    os.makedirs(tmpdir)
    env = {"SWITCHML_CALL_TIMEOUT_MS": str(call_timeout_ms)}
    ok = run_with_switch(args, tmpdir, __file__, mode, mode, env_extra=env)
    if ok and check_log:
        outs = [(0, open(os.path.join(tmpdir, f"{mode}_{r}.log")).read()) for r in range(2)]
        ok = log_once(outs)
    return ok


# ---------------------------------------------------------------- worker side

def ask_parent(args, request, answer):
    """Rank 0: creates `request` beside the store and waits for the parent's `answer`."""
    folder = os.path.dirname(args.init[len("file://"):])
    open(os.path.join(folder, request), "w").close()
    deadline = time.monotonic() + WORKER_TIMEOUT_S  # hang guard
    while not os.path.exists(os.path.join(folder, answer)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the parent did not answer {request}")
        time.sleep(0.01)


def wait_for_kill(args):
    """Rank 0: asks the parent to kill the switch and waits until it did."""
    ask_parent(args, "kill-now", "killed")


def wrap32(x):
    import torch
    return ((x.to(torch.int64) + 2**31) % 2**32 - 2**31).to(torch.int32)


def stats_line(c, what):
    import switchml.torch
    st = switchml.torch.stats()
    keys = ("calls_submitted", "calls_completed", "calls_recovered", "calls_failed", "failover",
            "failover_recovered_calls", "failover_host_calls", "failover_agreements", "failover_probes_skipped")
    print(f"rank {c.rank}: STATS {what} " + json.dumps({k: st[k] for k in keys}), flush=True)
    return st


def worker_kill(args):
    """100 int32 all-reduces with the switch killed while rank 0's calls are in flight."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    rank, world = args.rank, args.world
    rng = random.Random(args.seed)
    kill_after = rng.randrange(10, 90)
    sizes = [1, 100, 1000, 5000, 20000]
    pending = []  # (work, tensor, expected, what)
    wrong = []

    def settle(entry):
        work, t, expected, what = entry
        try:
            work.wait()
        except RuntimeError as e:
            wrong.append(f"{what}: raised {str(e).splitlines()[0]}")
            return
        if not torch.equal(t, expected):
            bad = int((t != expected).sum())
            wrong.append(f"{what}: {bad} of {t.numel()} elements wrong")

    for k in range(CALLS):
        n = sizes[rng.randrange(len(sizes))]
        kind = k % 3
        seed = args.seed * 1000 + k
        total = sum(rank_data(r, n, torch.int32, seed).to(torch.int64) for r in range(world))
        if kind == 0:  # in place, contiguous: the library's direct path
            t = rank_data(rank, n, torch.int32, seed)
            pending.append((dist.all_reduce(t, async_op=True), t, wrap32(total), f"call {k} (in place, {n})"))
        elif kind == 1:  # non-contiguous: staged through a host buffer
            base = torch.zeros(2 * n, dtype=torch.int32)
            t = base[::2]
            t.copy_(rank_data(rank, n, torch.int32, seed))
            pending.append((dist.all_reduce(t, async_op=True), t, wrap32(total), f"call {k} (strided, {n})"))
        else:  # two chained calls on one tensor: the second sums the first's results
            t = rank_data(rank, n, torch.int32, seed)
            w1 = dist.all_reduce(t, async_op=True)
            w2 = dist.all_reduce(t, async_op=True)
            pending.append((w1, t, None, None))
            pending.append((w2, t, wrap32(wrap32(total).to(torch.int64) * world), f"call {k} (chained, {n})"))
        if rank == 0 and k == kill_after:
            print(f"rank 0: asking for the kill after submitting call {k}", flush=True)
            wait_for_kill(args)
        while len(pending) > 8:
            e = pending.pop(0)
            if e[2] is None:
                e[0].wait()
            else:
                settle(e)
    for e in pending:
        if e[2] is None:
            e[0].wait()
        else:
            settle(e)
    c.check(not wrong, f"all {CALLS} calls exact on this rank" + ("" if not wrong else ": " + "; ".join(wrong[:5])))
    st = stats_line(c, "after the calls")
    c.check(st["failover"] == 1, "stats: the group moved to the host path")
    c.check(st["failover_host_calls"] > 0, f"stats: calls ran on the host path ({st['failover_host_calls']})")
    # Every rank has the same results: compare a digest of the last tensors over Gloo.
    x = torch.full((1000,), rank + 1, dtype=torch.int32)
    dist.all_reduce(x)
    c.check(bool((x == 3).all()), "a later all_reduce (host path) is exact")
    y = torch.full((10,), float(rank), dtype=torch.float64)
    dist.broadcast(y, src=1)
    c.check(bool((y == 1).all()), "broadcast after the failover works")
    dist.barrier()
    return finish_worker(c)


def worker_probe(args):
    """Rank 0 breaks its context; rank 1 learns of it at the broadcast (its probe)."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    import switchml.torch
    rank = args.rank
    x = torch.full((500,), rank + 1, dtype=torch.int32)
    dist.all_reduce(x)
    c.check(bool((x == 3).all()), "a first all_reduce on the switch")
    if rank == 0:
        switchml.torch.backend()._inject_switch_failure()
    y = torch.full((10,), float(rank), dtype=torch.float64)
    dist.broadcast(y, src=0)
    c.check(bool((y == 0).all()), "the broadcast (rank 1's probe) works")
    st = stats_line(c, "after the broadcast")
    c.check(st["failover"] == 1, "stats: the group moved to the host path at the broadcast")
    c.check(st["failover_agreements"] == 1, f"stats: one agreement ({st['failover_agreements']})")
    for k in range(5):
        x = torch.full((3000,), rank + k, dtype=torch.int32)
        dist.all_reduce(x)
        c.check(bool((x == 2 * k + 1).all()), f"all_reduce {k} on the host path is exact")
    st = stats_line(c, "at the end")
    c.check(st["failover_host_calls"] == 5, f"stats: 5 calls on the host path ({st['failover_host_calls']})")
    return finish_worker(c)


def same_on_every_rank(c, value, what):
    """Whether `value` (an int) is the same on every rank (an all_gather on the current path)."""
    import torch
    import torch.distributed as dist
    mine = torch.tensor([value], dtype=torch.int64)
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    values = [int(t) for t in every]
    c.check(len(set(values)) == 1, f"{what} the same on every rank: {values}")


def skip_ops(c, rank):
    """The collectives of the skip workers: an exact int32 all_reduce and an exact broadcast."""
    import torch
    import torch.distributed as dist
    count = {"ar": 0, "bc": 0}

    def ar(async_op=False):
        k = count["ar"]
        count["ar"] += 1
        x = torch.full((1000,), rank * 10 + k, dtype=torch.int32)
        w = dist.all_reduce(x, async_op=async_op)

        def check():
            if async_op:
                w.wait()
            c.check(bool((x == 10 + 2 * k).all()), f"all_reduce {k} exact")
        if not async_op:
            check()
        return check

    def bc():
        k = count["bc"]
        count["bc"] += 1
        y = torch.full((10,), float(rank + k), dtype=torch.float64)
        dist.broadcast(y, src=k % 2)
        c.check(bool((y == float(k % 2 + k)).all()), f"broadcast {k} exact")
    return ar, bc


def worker_skip(args):
    """Probes skipped and run (exact counts), then the switch killed between two broadcasts."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    rank = args.rank
    ar, bc = skip_ops(c, rank)

    def counts():
        st = switchml_stats()
        return st["failover_agreements"], st["failover_probes_skipped"]

    a0, s0 = counts()
    ar()          # a SwitchML call: the next point probes
    bc()          # probe: every rank idle (the all_reduce completed)
    bc()          # skipped
    bc()          # skipped
    ar()
    dist.barrier()  # probe
    dist.barrier()  # skipped
    every = [torch.zeros(3) for _ in range(2)]
    dist.all_gather(every, torch.full((3,), float(rank)))  # skipped
    c.check(all(bool((every[r] == r).all()) for r in range(2)), "all_gather exact")
    a1, s1 = counts()
    c.check((a1 - a0, s1 - s0) == (2, 4),
            f"2 agreements and 4 probes skipped on the healthy switch (got {a1 - a0} and {s1 - s0})")
    # An async all_reduce still running (or not) at the broadcast's probe: busy or idle there,
    # the same decision on every rank.
    check = ar(async_op=True)
    bc()
    check()
    bc()
    # The switch killed while every rank is idle after an agreement.
    ar()
    bc()          # probe: idle
    a2, s2 = counts()
    if rank == 0:
        wait_for_kill(args)
    bc()          # skipped: nobody has seen the failure yet
    st = stats_line(c, "after the kill, before the next all_reduce")
    c.check(st["failover"] == 0, "no failover before the next SwitchML all-reduce")
    ar()          # fails on both ranks: the recovery's agreement; finished on the host path
    bc()          # on the host path: no probe
    ar()          # on the host path
    st = stats_line(c, "after the failover")
    a3, s3 = st["failover_agreements"], st["failover_probes_skipped"]
    c.check(st["failover"] == 1, "stats: the group moved to the host path")
    c.check((a3 - a2, s3 - s2) == (1, 1),
            f"after the kill: 1 skipped probe, then the recovery's agreement (got {a3 - a2} agreements, "
            f"{s3 - s2} skipped)")
    c.check(st["calls_submitted"] == st["calls_completed"] + st["calls_recovered"] + st["calls_failed"],
            "library stats: every call completed, recovered or failed")
    c.check(st["calls_recovered"] == st["failover_recovered_calls"],
            f"library calls_recovered {st['calls_recovered']} = the backend's failover_recovered_calls")
    same_on_every_rank(c, a3, "failover_agreements")
    dist.barrier()
    return finish_worker(c)


def worker_skip_inject(args):
    """Rank 0 breaks its context while idle: seen at the agreement after the next all-reduce."""
    c = init_worker(args)
    import switchml.torch
    rank = args.rank
    ar, bc = skip_ops(c, rank)
    ar()
    bc()          # probe: idle
    if rank == 0:
        switchml.torch.backend()._inject_switch_failure()
    bc()          # skipped on both ranks
    st = stats_line(c, "after the skipped broadcast")
    c.check(st["failover"] == 0 and st["failover_agreements"] == 1,
            "still on the switch after the skipped broadcast, one agreement so far")
    check = ar(async_op=True)  # refused on rank 0 (recovery thread: Agree(true)); on the switch on rank 1
    bc()          # rank 1's probe meets rank 0's agreement: both recover
    check()
    ar()
    st = stats_line(c, "at the end")
    c.check(st["failover"] == 1, "stats: the group moved to the host path")
    c.check(st["failover_agreements"] == 2, f"stats: two agreements ({st['failover_agreements']})")
    same_on_every_rank(c, st["failover_host_calls"], "failover_host_calls")
    return finish_worker(c)


def worker_destroy(args):
    """Rank 0 breaks its context, then both destroy the group: rank 1 joins at its destruction."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    import switchml.torch
    x = torch.full((500,), args.rank + 1, dtype=torch.int32)
    dist.all_reduce(x)
    c.check(bool((x == 3).all()), "a first all_reduce on the switch")
    if args.rank == 0:
        switchml.torch.backend()._inject_switch_failure()
    return finish_worker(c)


def worker_ddp(args):
    """DDP over the switch; the switch is killed after step 10; training completes on the host."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + args.rank)
    steps = 30
    for step in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        if step == 10:
            dist.barrier()  # both ranks are between steps 10 and 11 ...
            if args.rank == 0:
                wait_for_kill(args)
            dist.barrier()  # ... until the switch is dead
    c.check(True, f"{steps} training steps completed")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    both = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(both, flat)
    c.check(torch.equal(both[0], both[1]), "the parameters are identical on both ranks")
    st = stats_line(c, "after training")
    c.check(st["failover"] == 1 and st["failover_host_calls"] > 0,
            f"stats: the training moved to the host path ({st['failover_host_calls']} calls there)")
    return finish_worker(c)


def worker_return(args):
    """On the switch, then the switch killed (failover), calls on the host path, the switch
    restarted on the same controller port: the ranks come back to it at the same call, and the
    calls after that run on the new switch. Every result exact."""
    c = init_worker(args)
    import torch
    import torch.distributed as dist
    rank = args.rank
    wrong = []
    count = [0]

    def call(what):
        k = count[0]
        count[0] += 1
        x = torch.full((2000,), rank * 7 + k, dtype=torch.int32)
        dist.all_reduce(x)
        if not bool((x == 7 + 2 * k).all()):
            wrong.append(f"{what} call {k}")

    for _ in range(10):
        call("switch")
    dist.barrier()
    if rank == 0:
        wait_for_kill(args)
    dist.barrier()
    for _ in range(10):
        call("host")
    st = stats_line(c, "after the failover")
    c.check(st["failover"] == 1 and st["on_host_path"] == 1, "on the host path after the switch died")
    dist.barrier()
    if rank == 0:
        ask_parent(args, "restart-now", "restarted")
    dist.barrier()
    # The ranks agree on coming back at barriers: every rank leaves the loop at the same barrier.
    start = time.monotonic()
    while True:
        call("host, waiting for the return")
        dist.barrier()
        if switchml_stats()["failover_returns"] == 1:
            break
        if rank == 0 and time.monotonic() - start > WORKER_TIMEOUT_S / 2:
            raise RuntimeError("no return to the switch (hang guard)")
        time.sleep(0.05)
    st = stats_line(c, "right after the return")
    c.check(st["on_host_path"] == 0 and st["calls_submitted"] == 0,
            "back on the switch with a new context at the same barrier on every rank")
    for _ in range(10):
        call("back on the switch")
    st = stats_line(c, "at the end")
    c.check(st["calls_completed"] == 10 and st["failover_returns"] == 1 and st["failover_rejoin_attempts"] >= 1,
            "the calls after the return ran on the switch (10 calls completed on the new context)")
    c.check(not wrong, f"all {count[0]} calls exact" + ("" if not wrong else ": " + "; ".join(wrong[:5])))
    return finish_worker(c)


def switchml_stats():
    import switchml.torch
    return switchml.torch.stats()


WORKERS = {"worker-return": worker_return, "worker-kill": worker_kill, "worker-probe": worker_probe, "worker-destroy": worker_destroy,
           "worker-ddp": worker_ddp, "worker-skip": worker_skip, "worker-skip-inject": worker_skip_inject}


def main():
    p = arg_parser(["suite", *WORKERS])
    p.add_argument("--seed", type=int, default=1)
    return dispatch(p, WORKERS, parent)


if __name__ == "__main__":
    sys.exit(main())
